//! The deterministic runtime: explicit steps, seeded scheduling, byte-identical traces per seed,
//! IRQ windows, nested waits, and hotplug interleaved with other events.

use bio_core::kernel::{CpuId, ReportKind};
use bio_core::workqueue::{PoolId, WQ_MEM_RECLAIM, WQ_PERCPU};
use bio_core::{Kernel, KernelConfig};
use bio_sim::runtime::deterministic::{DetConfig, DetRuntime, StepError};
use bio_sim::runtime::Event;
use hotplug::{CPUHP_OFFLINE, CPUHP_ONLINE};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A scenario with something to interleave on every CPU: IRQs that queue per-CPU work, delayed
/// works on timers, and CPU2 going offline and coming back. Returns the trace and what ran where.
fn scenario(seed: u64) -> (String, Vec<(String, u32)>) {
    let kernel = Kernel::new(KernelConfig::default(), 3).unwrap();
    let rt = DetRuntime::new(
        Arc::clone(&kernel),
        DetConfig {
            seed,
            ..DetConfig::default()
        },
    );
    let wq = kernel
        .alloc_workqueue("scenario_wq", WQ_PERCPU | WQ_MEM_RECLAIM, 0)
        .unwrap();
    let ran: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
    for c in 0..3u32 {
        let r = Arc::clone(&ran);
        let work = kernel.init_work("irq_work_fn", move |cx, _| {
            r.lock().unwrap().push((format!("work{c}"), cx.id().0))
        });
        let r = Arc::clone(&ran);
        let dwork = kernel.init_delayed_work("delayed_fn", move |cx, _| {
            r.lock().unwrap().push((format!("dwork{c}"), cx.id().0))
        });
        let cx = rt.cpu(CpuId(c)).unwrap();
        kernel.queue_delayed_work_on(Some(CpuId(c)), &wq, dwork, 2 + u64::from(c), cx);
        for i in 0..2 {
            let wq = wq.clone();
            kernel
                .raise_irq(
                    CpuId(c),
                    "test_irq",
                    Box::new(move |cx| {
                        if i == 0 {
                            cx.kernel().queue_work_on(Some(cx.id()), &wq, work, cx);
                        }
                    }),
                )
                .unwrap();
        }
    }
    kernel.cpu_down_start(CpuId(2), CPUHP_OFFLINE).unwrap();
    let first = rt.run(10_000);
    assert!(first.quiescent, "the scenario ends");
    kernel.cpu_up_start(CpuId(2), CPUHP_ONLINE).unwrap();
    assert!(rt.run(10_000).quiescent);
    assert!(kernel.cpu_online(CpuId(2)));
    assert!(kernel.reports().is_empty(), "{:#?}", kernel.reports().all());
    let ran = ran.lock().unwrap().clone();
    (rt.trace_text(), ran)
}

#[test]
fn same_seed_gives_a_byte_identical_trace() {
    let (a, ran_a) = scenario(42);
    let (b, ran_b) = scenario(42);
    assert_eq!(a, b);
    assert_eq!(ran_a, ran_b);
    assert!(a.lines().count() > 40, "a non-trivial trace:\n{a}");
    assert!(
        a.contains("workqueue_execute_start"),
        "kernel tracepoints are captured:\n{a}"
    );
    assert!(
        a.contains("cpuhp_enter"),
        "hotplug tracepoints are captured:\n{a}"
    );
}

#[test]
fn different_seeds_give_different_interleavings() {
    let traces: Vec<String> = (0..8).map(|s| scenario(s).0).collect();
    let distinct: std::collections::HashSet<&String> = traces.iter().collect();
    assert!(
        distinct.len() >= 4,
        "only {} distinct interleavings out of 8 seeds",
        distinct.len()
    );
    // Every run does the same work whatever the order: 3 IRQ works and 3 delayed works.
    for s in 0..8 {
        let (_, ran) = scenario(s);
        assert_eq!(ran.iter().filter(|(n, _)| n.starts_with("work")).count(), 3);
        assert_eq!(
            ran.iter().filter(|(n, _)| n.starts_with("dwork")).count(),
            3
        );
    }
}

#[test]
fn explicit_steps_are_checked() {
    let kernel = Kernel::new(KernelConfig::default(), 2).unwrap();
    let rt = DetRuntime::new(Arc::clone(&kernel), DetConfig::default());
    assert!(rt.quiescent());
    let err = rt.step(Event::Irq(CpuId(1))).unwrap_err();
    assert!(matches!(err, StepError::NotEnabled { .. }));
    assert!(err.to_string().contains("no IRQ pending on CPU1"), "{err}");
    assert!(rt
        .step(Event::Irq(CpuId(9)))
        .unwrap_err()
        .to_string()
        .contains("does not exist"));
    let hits = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&hits);
    kernel
        .raise_irq(
            CpuId(1),
            "t",
            Box::new(move |cx| {
                assert!(cx.in_hardirq() && cx.id() == CpuId(1));
                h.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .unwrap();
    assert_eq!(rt.enabled(), vec![Event::Irq(CpuId(1))]);
    let rec = rt.step(Event::Irq(CpuId(1))).unwrap();
    assert_eq!(rec.step, 1);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert!(rt.trace_text().contains("irq CPU1: hardirq handled"));
    assert!(rt.step(Event::Irq(CpuId(1))).is_err(), "delivered once");
    assert_eq!(rt.steps(), 1, "a refused step is not counted");
}

#[test]
fn an_offline_cpu_runs_no_irqs_and_no_bound_work() {
    let kernel = Kernel::new(KernelConfig::default(), 2).unwrap();
    let rt = DetRuntime::new(Arc::clone(&kernel), DetConfig::default());
    let wq = kernel.alloc_workqueue("w", WQ_PERCPU, 0).unwrap();
    let where_: Arc<Mutex<Vec<u32>>> = Arc::default();
    let w2 = Arc::clone(&where_);
    let work = kernel.init_work("w_fn", move |cx, _| w2.lock().unwrap().push(cx.id().0));
    kernel
        .cpu_hotplug_to(CpuId(1), CPUHP_OFFLINE, false)
        .unwrap();
    // An IRQ aimed at the offline CPU is handled by an online one.
    let irq_cpu = Arc::new(Mutex::new(None));
    let ic = Arc::clone(&irq_cpu);
    assert_eq!(
        kernel
            .raise_irq(
                CpuId(1),
                "t",
                Box::new(move |cx| *ic.lock().unwrap() = Some(cx.id()))
            )
            .unwrap(),
        CpuId(0)
    );
    assert!(rt.step(Event::Irq(CpuId(1))).is_err());
    rt.step(Event::Irq(CpuId(0))).unwrap();
    assert_eq!(*irq_cpu.lock().unwrap(), Some(CpuId(0)));
    // Work queued to the offline CPU is offered to online CPUs only.
    kernel.queue_work_on(Some(CpuId(1)), &wq, work, rt.cpu(CpuId(0)).unwrap());
    assert_eq!(
        rt.enabled(),
        vec![Event::Worker {
            pool: PoolId::Cpu(CpuId(1)),
            on: CpuId(0)
        }]
    );
    let err = rt
        .step(Event::Worker {
            pool: PoolId::Cpu(CpuId(1)),
            on: CpuId(1),
        })
        .unwrap_err();
    assert!(err.to_string().contains("CPU1 is offline"), "{err}");
    rt.step(Event::Worker {
        pool: PoolId::Cpu(CpuId(1)),
        on: CpuId(0),
    })
    .unwrap();
    assert_eq!(*where_.lock().unwrap(), [0]);
}

#[test]
fn bound_work_is_only_offered_on_its_cpu() {
    let kernel = Kernel::new(KernelConfig::default(), 2).unwrap();
    let rt = DetRuntime::new(Arc::clone(&kernel), DetConfig::default());
    let wq = kernel.alloc_workqueue("w", WQ_PERCPU, 0).unwrap();
    let work = kernel.init_work("w_fn", |_, _| {});
    kernel.queue_work_on(Some(CpuId(1)), &wq, work, rt.cpu(CpuId(0)).unwrap());
    assert_eq!(
        rt.enabled(),
        vec![Event::Worker {
            pool: PoolId::Cpu(CpuId(1)),
            on: CpuId(1)
        }]
    );
    let err = rt
        .step(Event::Worker {
            pool: PoolId::Cpu(CpuId(1)),
            on: CpuId(0),
        })
        .unwrap_err();
    assert!(err.to_string().contains("bound to CPU1"), "{err}");
}

#[test]
fn hotplug_steps_interleave_with_irqs_on_the_dying_cpu() {
    let kernel = Kernel::new(KernelConfig::default(), 2).unwrap();
    let rt = DetRuntime::new(Arc::clone(&kernel), DetConfig::default());
    kernel.cpu_down_start(CpuId(1), CPUHP_OFFLINE).unwrap();
    let mut steps = 0;
    let mut irqs_on_1 = 0;
    let handled = Arc::new(AtomicUsize::new(0));
    while kernel.hotplug_in_progress(CpuId(1)) {
        // Between every two hotplug steps, an interrupt arrives on the dying CPU while it can
        // still take one.
        let h = Arc::clone(&handled);
        let target = kernel
            .raise_irq(
                CpuId(1),
                "between_steps",
                Box::new(move |_| {
                    h.fetch_add(1, Ordering::SeqCst);
                }),
            )
            .unwrap();
        if target == CpuId(1) {
            rt.step(Event::Irq(CpuId(1))).unwrap();
            irqs_on_1 += 1;
        } else {
            rt.step(Event::Irq(target)).unwrap();
        }
        rt.step(Event::Hotplug(CpuId(1))).unwrap();
        steps += 1;
    }
    assert!(!kernel.cpu_online(CpuId(1)));
    assert_eq!(
        steps, 7,
        "mm/vmstat:online, x86/kvm:online, workqueue:online, cpu:teardown, cpu:bringup (takedown), timers:prepare and fork:vm_stack_cache have callbacks"
    );
    assert!(
        irqs_on_1 > 0,
        "some IRQs landed on CPU1 while it was still online"
    );
    assert_eq!(handled.load(Ordering::SeqCst), steps);
    let trace = rt.trace_text();
    assert!(trace.contains("workqueue:online teardown"), "{trace}");
    assert!(trace.contains("timers:prepare teardown"), "{trace}");
}

#[test]
fn an_irq_window_delivers_an_interrupt_inside_a_running_work() {
    // With chance 1/1 every IRQ window delivers: the interrupt lands between the work's
    // local_irq_restore() and its next statement, as on hardware.
    let kernel = Kernel::new(KernelConfig::default(), 1).unwrap();
    let rt = DetRuntime::new(
        Arc::clone(&kernel),
        DetConfig {
            irq_window_chance: (1, 1),
            ..DetConfig::default()
        },
    );
    let wq = kernel.alloc_workqueue("w", WQ_PERCPU, 0).unwrap();
    let order: Arc<Mutex<Vec<&str>>> = Arc::default();
    let o = Arc::clone(&order);
    let work = kernel.init_work("w_fn", move |cx, _| {
        let flags = cx.local_irq_save();
        o.lock().unwrap().push("irqs off");
        let o2 = Arc::clone(&o);
        cx.kernel()
            .raise_irq(
                cx.id(),
                "nested",
                Box::new(move |_| o2.lock().unwrap().push("irq")),
            )
            .unwrap();
        o.lock().unwrap().push("still off");
        cx.local_irq_restore(flags);
        o.lock().unwrap().push("after restore");
    });
    kernel.queue_work_on(Some(CpuId(0)), &wq, work, rt.cpu(CpuId(0)).unwrap());
    rt.step(Event::Worker {
        pool: PoolId::Cpu(CpuId(0)),
        on: CpuId(0),
    })
    .unwrap();
    assert_eq!(
        *order.lock().unwrap(),
        ["irqs off", "still off", "irq", "after restore"]
    );
    assert!(rt.trace_text().contains("irq window on CPU0"));
}

#[test]
fn flush_work_sleeps_while_the_scheduler_runs_the_work() {
    let kernel = Kernel::new(KernelConfig::default(), 2).unwrap();
    let rt = DetRuntime::new(Arc::clone(&kernel), DetConfig::default());
    let wq = kernel.alloc_workqueue("w", WQ_PERCPU, 0).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&runs);
    let work = kernel.init_work("w_fn", move |_, _| {
        r.fetch_add(1, Ordering::SeqCst);
    });
    let cx = rt.cpu(CpuId(0)).unwrap();
    kernel.queue_work_on(Some(CpuId(1)), &wq, work, cx);
    assert!(kernel.flush_work(work, cx));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "flush returned after the work ran"
    );
    assert!(kernel.reports().is_empty(), "{:?}", kernel.reports().all());
    assert!(rt.trace_text().contains("sleeps in flush_work"));
}

#[test]
fn timers_need_ticks_and_fire_on_their_cpu() {
    let kernel = Kernel::new(KernelConfig::default(), 2).unwrap();
    let rt = DetRuntime::new(Arc::clone(&kernel), DetConfig::default());
    let fired = Arc::new(Mutex::new(Vec::new()));
    let f = Arc::clone(&fired);
    let t = kernel.timer_setup("t", move |cx| f.lock().unwrap().push(cx.id().0));
    kernel.add_timer_on(rt.cpu(CpuId(0)).unwrap(), t, 2, CpuId(1));
    assert_eq!(rt.enabled(), vec![Event::Tick]);
    rt.step(Event::Tick).unwrap();
    assert_eq!(rt.enabled(), vec![Event::Tick]);
    rt.step(Event::Tick).unwrap();
    assert_eq!(rt.enabled(), vec![Event::Timers(CpuId(1)), Event::Tick]);
    rt.step(Event::Timers(CpuId(1))).unwrap();
    assert_eq!(*fired.lock().unwrap(), [1]);
    assert!(rt.quiescent());
}

#[test]
fn a_congested_pool_is_served_by_the_rescuer_on_its_cpu() {
    let kernel = Kernel::new(KernelConfig::default(), 2).unwrap();
    let rt = DetRuntime::new(Arc::clone(&kernel), DetConfig::default());
    let wq = kernel
        .alloc_workqueue("bio_complete", WQ_PERCPU | WQ_MEM_RECLAIM, 0)
        .unwrap();
    let work = kernel.init_work("w_fn", |_, _| {});
    assert!(kernel.set_pool_congested(PoolId::Cpu(CpuId(1)), true));
    kernel.queue_work_on(Some(CpuId(1)), &wq, work, rt.cpu(CpuId(0)).unwrap());
    assert_eq!(
        rt.enabled(),
        vec![Event::Rescuer {
            pool: PoolId::Cpu(CpuId(1)),
            on: CpuId(1)
        }]
    );
    let rec = rt
        .step(Event::Rescuer {
            pool: PoolId::Cpu(CpuId(1)),
            on: CpuId(1),
        })
        .unwrap();
    assert!(
        rec.detail().contains("rescuer ran w_fn"),
        "{}",
        rec.detail()
    );
    assert!(kernel.reports().of_kind(ReportKind::Warn).is_empty());
}

/// The ftrace records: the simulated clock (`jiffies / HZ`, then 1 µs per event within the
/// jiffy), the submitter switched in from idle and out again around scenario code, the worker's
/// own task on its events, and the notes as markers of the writer task.
#[test]
fn records_carry_the_simulated_clock_and_who_ran_where() {
    let kernel = Kernel::new(KernelConfig::default(), 2).unwrap(); // HZ=250: a jiffy is 4 ms
    let rt = DetRuntime::new(Arc::clone(&kernel), DetConfig::default());
    let wq = kernel.alloc_workqueue("clock_wq", WQ_PERCPU, 0).unwrap();
    let work = kernel.init_work("clock_fn", |_, _| {});
    rt.note("   >>> queue a work on CPU1");
    rt.step(Event::Tick).unwrap();
    rt.step(Event::Tick).unwrap();
    rt.on_cpu(CpuId(1), "queue_work_on(clock_fn)", |cx| {
        kernel.queue_work_on(Some(CpuId(1)), &wq, work, cx)
    })
    .unwrap();
    rt.step(Event::Worker {
        pool: PoolId::Cpu(CpuId(1)),
        on: CpuId(1),
    })
    .unwrap();
    let r = rt.records();
    let names: Vec<&str> = r.iter().map(|r| r.event.as_str()).collect();
    let at = |e: &str| {
        names
            .iter()
            .position(|n| *n == e)
            .unwrap_or_else(|| panic!("{e}: {names:?}"))
    };
    let scenario = &r[at("biosim_scenario")];
    assert_eq!(
        (scenario.comm.as_str(), scenario.pid, scenario.ts_us),
        ("biosim", 999, 0)
    );
    // After two ticks, jiffy 2 = 8 ms; each later event 1 µs after the one before.
    let wakeup = &r[at("sched_wakeup")];
    assert_eq!(wakeup.ts_us, 8_000);
    assert_eq!(
        wakeup.fields,
        "comm=biosim/1 pid=1001 prio=120 target_cpu=001"
    );
    let switch_in = &r[at("sched_switch")];
    assert_eq!(
        (switch_in.pid, switch_in.cpu, switch_in.ts_us),
        (0, Some(1), 8_001)
    );
    assert!(switch_in
        .fields
        .ends_with("==> next_comm=biosim/1 next_pid=1001 next_prio=120"));
    let queued = &r[at("workqueue_queue_work")];
    assert_eq!((queued.comm.as_str(), queued.pid), ("biosim/1", 1001));
    let switch_out = r
        .iter()
        .filter(|r| r.event == "sched_switch")
        .nth(1)
        .unwrap();
    assert!(switch_out
        .fields
        .contains("prev_comm=biosim/1 prev_pid=1001 prev_prio=120 prev_state=S"));
    let ran = &r[at("workqueue_execute_start")];
    assert!(ran.comm.starts_with("kworker/1:"), "{ran:?}");
    assert_eq!(ran.cpu, Some(1));
    assert!(r.windows(2).all(|w| w[0].ts_us < w[1].ts_us), "{r:?}");
}
