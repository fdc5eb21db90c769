//! Per-CPU timers: arming, modifying, deleting, firing in softirq context on their CPU, and
//! migration to the control CPU when their CPU dies (`timers_dead_cpu()`).

use bio_core::kernel::CpuId;
use bio_core::{Kernel, KernelConfig};
use hotplug::CPUHP_OFFLINE;
use std::sync::{Arc, Mutex};

#[test]
fn timers_fire_in_softirq_on_their_cpu_in_expiry_order() {
    let k = Kernel::new(KernelConfig::default(), 2).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    type Log = Arc<Mutex<Vec<(&'static str, u32, bool)>>>;
    let log: Log = Arc::default();
    let mk = |name: &'static str| {
        let log = Arc::clone(&log);
        k.timer_setup(name, move |cx| {
            log.lock()
                .unwrap()
                .push((name, cx.id().0, cx.in_serving_softirq()))
        })
    };
    let late = mk("late");
    let early = mk("early");
    k.add_timer_on(&cx1, late, 5, CpuId(1));
    k.add_timer_on(&cx1, early, 3, CpuId(1));
    assert!(k.timer_pending(late) && k.timer_pending(early));
    assert_eq!(k.next_timer_expiry(), Some(3));
    assert_eq!(k.run_timers(&cx1), 0, "nothing due at jiffies 0");
    k.advance_jiffies(5);
    assert_eq!(k.run_timers(&cx1), 2);
    assert_eq!(
        *log.lock().unwrap(),
        [("early", 1, true), ("late", 1, true)]
    );
    assert!(!k.timer_pending(late));
}

#[test]
fn mod_timer_and_delete_report_pending_state() {
    let k = Kernel::new(KernelConfig::default(), 1).unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let t = k.timer_setup("t", |_| {});
    assert!(!k.mod_timer(&cx, t, 10), "was not pending");
    assert!(k.mod_timer(&cx, t, 20), "was pending");
    assert!(k.timer_delete_sync(&cx, t));
    assert!(!k.timer_delete(t));
    k.advance_jiffies(30);
    assert_eq!(k.run_timers(&cx), 0);
}

#[test]
fn a_dead_cpus_timers_migrate_to_the_control_cpu() {
    let k = Kernel::new(KernelConfig::default(), 3).unwrap();
    let cx2 = k.cpu(CpuId(2)).unwrap();
    let fired: Arc<Mutex<Vec<u32>>> = Arc::default();
    let f = Arc::clone(&fired);
    let t = k.timer_setup("t", move |cx| f.lock().unwrap().push(cx.id().0));
    k.add_timer_on(&cx2, t, 1, CpuId(2));
    k.cpu_hotplug_to(CpuId(2), CPUHP_OFFLINE, false).unwrap();
    // timers_dead_cpu() ran on the control CPU (the lowest online other than 2: CPU0).
    k.advance_jiffies(1);
    let cx0 = k.cpu(CpuId(0)).unwrap();
    assert_eq!(k.run_timers(&cx0), 1);
    assert_eq!(*fired.lock().unwrap(), [0]);
}
