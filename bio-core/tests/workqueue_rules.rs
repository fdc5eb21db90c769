//! One test per workqueue rule of kernel-semantics.md §2, run on bio-core directly (the test plays
//! the runtime: it decides when a worker or a timer runs).

use bio_core::kernel::{CpuId, ReportKind};
use bio_core::workqueue::{
    PoolId, WorkStruct, Workqueue, WORK_CPU_UNBOUND, WORK_OFFQ_DISABLE_MAX, WQ_MEM_RECLAIM,
    WQ_PERCPU, WQ_UNBOUND,
};
use bio_core::{Cpu, Kernel, KernelConfig};
use hotplug::{CPUHP_OFFLINE, CPUHP_ONLINE};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

struct Machine {
    k: Arc<Kernel>,
    wq: Workqueue,
    cpus: Vec<Cpu>,
}

fn machine(nr: u32) -> Machine {
    let k = Kernel::new(KernelConfig::default(), nr).unwrap();
    let wq = k.alloc_workqueue("test_wq", WQ_PERCPU, 0).unwrap();
    let cpus = (0..nr).map(|c| k.cpu(CpuId(c)).unwrap()).collect();
    Machine { k, wq, cpus }
}

/// A work that counts its runs and records the CPU of each.
fn counting(k: &Kernel, log: &Arc<Mutex<Vec<u32>>>) -> WorkStruct {
    let log = Arc::clone(log);
    k.init_work("counting_fn", move |cx, _w| {
        log.lock().unwrap().push(cx.id().0)
    })
}

#[test]
fn queue_returns_true_only_when_it_set_pending() {
    let m = machine(2);
    let log = Arc::default();
    let w = counting(&m.k, &log);
    assert!(m.k.queue_work_on(Some(CpuId(1)), &m.wq, w, &m.cpus[0]));
    assert!(m.k.work_pending(w));
    assert!(
        !m.k.queue_work_on(Some(CpuId(1)), &m.wq, w, &m.cpus[0]),
        "already pending"
    );
    assert!(
        !m.k.queue_work_on(Some(CpuId(0)), &m.wq, w, &m.cpus[0]),
        "pending anywhere counts"
    );
    let ran = m.k.run_worker(PoolId::Cpu(CpuId(1)), &m.cpus[1]).unwrap();
    assert_eq!(ran.ran_on, CpuId(1));
    assert!(
        m.k.run_worker(PoolId::Cpu(CpuId(1)), &m.cpus[1]).is_none(),
        "ran once"
    );
    assert_eq!(*log.lock().unwrap(), [1]);
    assert!(!m.k.work_pending(w));
    assert!(
        m.k.queue_work_on(Some(CpuId(1)), &m.wq, w, &m.cpus[0]),
        "idle again"
    );
}

#[test]
fn unbound_cpu_on_a_percpu_wq_means_the_local_cpu() {
    let m = machine(2);
    let log = Arc::default();
    let w = counting(&m.k, &log);
    assert!(m.k.queue_work_on(WORK_CPU_UNBOUND, &m.wq, w, &m.cpus[1]));
    assert_eq!(m.k.pool(PoolId::Cpu(CpuId(1))).unwrap().queued, 1);
    let uwq = m.k.alloc_workqueue("unbound", WQ_UNBOUND, 0).unwrap();
    let w2 = counting(&m.k, &log);
    assert!(m.k.queue_work_on(Some(CpuId(1)), &uwq, w2, &m.cpus[1]));
    assert_eq!(m.k.pool(PoolId::Unbound).unwrap().queued, 1);
}

#[test]
fn alloc_workqueue_rejects_percpu_with_unbound() {
    let m = machine(1);
    let err =
        m.k.alloc_workqueue("bad", WQ_PERCPU | WQ_UNBOUND, 0)
            .unwrap_err();
    assert!(err.to_string().contains("mutually exclusive"), "{err}");
    assert!(m.k.alloc_workqueue("bad", WQ_PERCPU, 5000).is_err());
}

#[test]
fn queueing_a_disabled_work_returns_false_for_every_queue_call() {
    let m = machine(2);
    let log = Arc::default();
    let w = counting(&m.k, &log);
    let dw = m.k.init_delayed_work("delayed_fn", |_, _| {});
    assert!(!m.k.disable_work(w, &m.cpus[0]), "was not pending");
    assert!(!m.k.disable_delayed_work(dw, &m.cpus[0]));
    assert!(!m.k.queue_work_on(Some(CpuId(0)), &m.wq, w, &m.cpus[0]));
    assert!(!m
        .k
        .queue_delayed_work_on(Some(CpuId(0)), &m.wq, dw, 5, &m.cpus[0]));
    assert!(!m
        .k
        .mod_delayed_work_on(Some(CpuId(0)), &m.wq, dw, 5, &m.cpus[0]));
    assert!(!m.k.work_pending(w) && !m.k.delayed_work_pending(dw));
    assert_eq!(m.k.pool(PoolId::Cpu(CpuId(0))).unwrap().queued, 0);
    assert!(m.k.delayed_work_timer(dw).is_none());
}

#[test]
fn disable_nests_and_enable_returns_true_only_at_zero() {
    let m = machine(1);
    let w = m.k.init_work("w", |_, _| {});
    m.k.disable_work(w, &m.cpus[0]);
    m.k.disable_work(w, &m.cpus[0]);
    assert_eq!(m.k.work_disable_count(w), 2);
    assert!(!m.k.enable_work(w, &m.cpus[0]), "count 1: still disabled");
    assert!(!m.k.queue_work_on(Some(CpuId(0)), &m.wq, w, &m.cpus[0]));
    assert!(m.k.enable_work(w, &m.cpus[0]), "count 0");
    assert!(m.k.queue_work_on(Some(CpuId(0)), &m.wq, w, &m.cpus[0]));
    assert!(m.k.reports().is_empty());
}

#[test]
fn disable_count_underflow_and_overflow_warn() {
    let m = machine(1);
    let w = m.k.init_work("w", |_, _| {});
    assert!(m.k.enable_work(w, &m.cpus[0]));
    let warns = m.k.reports().of_kind(ReportKind::Warn);
    assert_eq!(warns.len(), 1);
    assert!(
        warns[0].message.contains("work disable count underflowed"),
        "{}",
        warns[0].message
    );
    for _ in 0..WORK_OFFQ_DISABLE_MAX {
        m.k.disable_work(w, &m.cpus[0]);
    }
    assert_eq!(m.k.work_disable_count(w), WORK_OFFQ_DISABLE_MAX);
    assert!(m.k.reports().len() == 1, "no overflow yet");
    m.k.disable_work(w, &m.cpus[0]);
    assert_eq!(
        m.k.work_disable_count(w),
        WORK_OFFQ_DISABLE_MAX,
        "saturates"
    );
    let warns = m.k.reports().of_kind(ReportKind::Warn);
    assert!(
        warns[1].message.contains("work disable count overflowed"),
        "{}",
        warns[1].message
    );
}

#[test]
fn disable_cancels_pending_and_enable_never_requeues() {
    let m = machine(1);
    let log = Arc::default();
    let w = counting(&m.k, &log);
    assert!(m.k.queue_work_on(Some(CpuId(0)), &m.wq, w, &m.cpus[0]));
    assert!(
        m.k.disable_work(w, &m.cpus[0]),
        "returns whether it was pending"
    );
    assert!(!m.k.work_pending(w));
    assert!(m.k.enable_work(w, &m.cpus[0]));
    assert!(!m.k.work_pending(w), "enable does not requeue");
    assert!(m.k.run_worker(PoolId::Cpu(CpuId(0)), &m.cpus[0]).is_none());
    assert!(log.lock().unwrap().is_empty());
    // enable_and_queue_work() is the one that queues, and only at count 0.
    m.k.disable_work(w, &m.cpus[0]);
    m.k.disable_work(w, &m.cpus[0]);
    assert!(!m.k.enable_and_queue_work(&m.wq, w, &m.cpus[0]));
    assert!(!m.k.work_pending(w));
    assert!(m.k.enable_and_queue_work(&m.wq, w, &m.cpus[0]));
    assert!(m.k.work_pending(w));
}

#[test]
fn mod_delayed_work_rearms_a_pending_work_with_the_new_delay_and_cpu() {
    let m = machine(2);
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = Arc::clone(&log);
    let dw =
        m.k.init_delayed_work("dw_fn", move |cx, _| l.lock().unwrap().push(cx.id().0));
    assert!(
        !m.k.mod_delayed_work_on(Some(CpuId(0)), &m.wq, dw, 10, &m.cpus[0]),
        "idle: queued, returns false"
    );
    assert_eq!(m.k.delayed_work_timer(dw), Some(CpuId(0)));
    assert!(
        !m.k.queue_delayed_work_on(Some(CpuId(0)), &m.wq, dw, 1, &m.cpus[0]),
        "pending"
    );
    assert!(
        m.k.mod_delayed_work_on(Some(CpuId(1)), &m.wq, dw, 50, &m.cpus[0]),
        "pending: modified, returns true"
    );
    assert_eq!(
        m.k.delayed_work_timer(dw),
        Some(CpuId(1)),
        "timer moved to the new CPU"
    );
    m.k.advance_jiffies(10);
    assert_eq!(m.k.run_timers(&m.cpus[0]), 0, "the old deadline is gone");
    assert_eq!(m.k.run_timers(&m.cpus[1]), 0, "the deadline moved later");
    m.k.advance_jiffies(40);
    assert_eq!(m.k.run_timers(&m.cpus[1]), 1);
    assert_eq!(
        m.k.pool(PoolId::Cpu(CpuId(1))).unwrap().queued,
        1,
        "queued on dwork->cpu"
    );
    m.k.run_worker(PoolId::Cpu(CpuId(1)), &m.cpus[1]).unwrap();
    assert_eq!(*log.lock().unwrap(), [1]);
    // delay 0 queues at once, whatever the state.
    assert!(!m
        .k
        .mod_delayed_work_on(Some(CpuId(0)), &m.wq, dw, 0, &m.cpus[0]));
    assert_eq!(m.k.pool(PoolId::Cpu(CpuId(0))).unwrap().queued, 1);
    assert!(
        m.k.mod_delayed_work_on(Some(CpuId(1)), &m.wq, dw, 0, &m.cpus[0]),
        "stolen from the worklist"
    );
    assert_eq!(m.k.pool(PoolId::Cpu(CpuId(0))).unwrap().queued, 0);
    assert_eq!(m.k.pool(PoolId::Cpu(CpuId(1))).unwrap().queued, 1);
}

#[test]
fn cancel_delayed_work_stops_the_timer() {
    let m = machine(1);
    let dw = m.k.init_delayed_work("dw_fn", |_, _| {});
    assert!(m
        .k
        .queue_delayed_work_on(Some(CpuId(0)), &m.wq, dw, 3, &m.cpus[0]));
    assert!(m.k.cancel_delayed_work(dw));
    assert!(!m.k.cancel_delayed_work(dw));
    m.k.advance_jiffies(5);
    assert_eq!(m.k.run_timers(&m.cpus[0]), 0);
    assert_eq!(m.k.pool(PoolId::Cpu(CpuId(0))).unwrap().queued, 0);
}

#[test]
fn a_work_running_in_one_pool_is_queued_behind_itself_there() {
    let m = machine(2);
    let runs = Arc::new(AtomicUsize::new(0));
    let wq = m.wq.clone();
    let r = Arc::clone(&runs);
    let slot: Arc<Mutex<Option<WorkStruct>>> = Arc::default();
    let s = Arc::clone(&slot);
    let w = m.k.init_work("self_requeue", move |cx, me| {
        if r.fetch_add(1, Ordering::SeqCst) == 0 {
            // Asks for CPU1 while running in CPU0's pool: non-reentrancy keeps it in CPU0's pool.
            assert!(cx.kernel().queue_work_on(Some(CpuId(1)), &wq, *me, cx));
        }
        *s.lock().unwrap() = Some(*me);
    });
    m.k.queue_work_on(Some(CpuId(0)), &m.wq, w, &m.cpus[0]);
    m.k.run_worker(PoolId::Cpu(CpuId(0)), &m.cpus[0]).unwrap();
    assert_eq!(m.k.pool(PoolId::Cpu(CpuId(0))).unwrap().queued, 1);
    assert_eq!(m.k.pool(PoolId::Cpu(CpuId(1))).unwrap().queued, 0);
    m.k.run_worker(PoolId::Cpu(CpuId(0)), &m.cpus[0]).unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // Once it is idle, the requested CPU is honoured again.
    m.k.queue_work_on(Some(CpuId(1)), &m.wq, w, &m.cpus[0]);
    assert_eq!(m.k.pool(PoolId::Cpu(CpuId(1))).unwrap().queued, 1);
}

#[test]
fn a_work_may_requeue_itself_because_pending_clears_before_it_runs() {
    let m = machine(1);
    let wq = m.wq.clone();
    let w = m.k.init_work("requeue", move |cx, me| {
        assert!(!cx.kernel().work_pending(*me));
        assert!(cx.kernel().queue_work_on(Some(CpuId(0)), &wq, *me, cx));
    });
    m.k.queue_work_on(Some(CpuId(0)), &m.wq, w, &m.cpus[0]);
    m.k.run_worker(PoolId::Cpu(CpuId(0)), &m.cpus[0]).unwrap();
    assert!(m.k.work_pending(w));
}

#[test]
fn per_cpu_work_runs_unbound_after_offline_and_bound_again_after_online() {
    let m = machine(2);
    let log = Arc::default();
    let w = counting(&m.k, &log);
    m.k.queue_work_on(Some(CpuId(1)), &m.wq, w, &m.cpus[0]);
    // Associated: only CPU1 may run it; running it elsewhere trips the kernel's WARN.
    m.k.cpu_hotplug_to(CpuId(1), CPUHP_OFFLINE, false).unwrap();
    assert!(!m.k.cpu_online(CpuId(1)));
    let pool = m.k.pool(PoolId::Cpu(CpuId(1))).unwrap();
    assert!(pool.disassociated);
    assert_eq!(pool.bound_cpu(), None, "runs on any online CPU now");
    let ran = m.k.run_worker(PoolId::Cpu(CpuId(1)), &m.cpus[0]).unwrap();
    assert!(ran.disassociated);
    assert_eq!(ran.ran_on, CpuId(0));
    // New work queued to the offline CPU keeps running unbound.
    m.k.queue_work_on(Some(CpuId(1)), &m.wq, w, &m.cpus[0]);
    assert_eq!(
        m.k.run_worker(PoolId::Cpu(CpuId(1)), &m.cpus[0])
            .unwrap()
            .ran_on,
        CpuId(0)
    );
    assert!(m.k.reports().is_empty(), "{:?}", m.k.reports().all());
    m.k.cpu_hotplug_to(CpuId(1), CPUHP_ONLINE, true).unwrap();
    assert!(!m.k.pool(PoolId::Cpu(CpuId(1))).unwrap().disassociated);
    m.k.queue_work_on(Some(CpuId(1)), &m.wq, w, &m.cpus[0]);
    m.k.run_worker(PoolId::Cpu(CpuId(1)), &m.cpus[0]).unwrap();
    let warns = m.k.reports().of_kind(ReportKind::Warn);
    assert_eq!(
        warns.len(),
        1,
        "bound again: running on CPU0 is the kernel's WARN"
    );
    assert!(warns[0]
        .message
        .contains("raw_smp_processor_id() != pool->cpu"));
}

#[test]
fn rescuer_runs_reclaim_work_of_a_congested_pool_on_the_pool_cpu() {
    let m = machine(2);
    let reclaim =
        m.k.alloc_workqueue("bio_complete", WQ_MEM_RECLAIM | WQ_PERCPU, 0)
            .unwrap();
    let log = Arc::default();
    let w = counting(&m.k, &log);
    let plain = counting(&m.k, &log);
    assert!(m.k.set_pool_congested(PoolId::Cpu(CpuId(1)), true));
    m.k.queue_work_on(Some(CpuId(1)), &m.wq, plain, &m.cpus[0]);
    m.k.queue_work_on(Some(CpuId(1)), &reclaim, w, &m.cpus[0]);
    let pool = m.k.pool(PoolId::Cpu(CpuId(1))).unwrap();
    assert!(!pool.worker_runnable(), "no worker can be created");
    assert!(pool.rescuer_runnable());
    assert_eq!(pool.rescuable, 1, "only WQ_MEM_RECLAIM work is rescued");
    assert!(m.k.run_worker(PoolId::Cpu(CpuId(1)), &m.cpus[1]).is_none());
    let ran = m.k.run_rescuer(PoolId::Cpu(CpuId(1)), &m.cpus[1]).unwrap();
    assert!(ran.rescuer);
    assert_eq!(
        ran.ran_on,
        CpuId(1),
        "attached to the associated pool's CPU"
    );
    assert_eq!(ran.work, w);
    assert!(
        m.k.run_rescuer(PoolId::Cpu(CpuId(1)), &m.cpus[1]).is_none(),
        "the plain work waits"
    );
    assert!(m.k.reports().is_empty());
    // A rescuer that ran elsewhere while the pool is associated trips the kernel's WARN.
    m.k.queue_work_on(Some(CpuId(1)), &reclaim, w, &m.cpus[0]);
    m.k.run_rescuer(PoolId::Cpu(CpuId(1)), &m.cpus[0]).unwrap();
    assert_eq!(m.k.reports().of_kind(ReportKind::Warn).len(), 1);
    assert!(m.k.set_pool_congested(PoolId::Cpu(CpuId(1)), false));
    assert!(m.k.run_worker(PoolId::Cpu(CpuId(1)), &m.cpus[1]).is_some());
}

#[test]
fn rescuer_of_a_disassociated_pool_runs_unbound() {
    let m = machine(2);
    let reclaim =
        m.k.alloc_workqueue("bio_complete", WQ_MEM_RECLAIM | WQ_PERCPU, 0)
            .unwrap();
    let log = Arc::default();
    let w = counting(&m.k, &log);
    m.k.queue_work_on(Some(CpuId(1)), &reclaim, w, &m.cpus[0]);
    assert!(m.k.set_pool_congested(PoolId::Cpu(CpuId(1)), true));
    m.k.cpu_hotplug_to(CpuId(1), CPUHP_OFFLINE, false).unwrap();
    let ran = m.k.run_rescuer(PoolId::Cpu(CpuId(1)), &m.cpus[0]).unwrap();
    assert!(ran.disassociated && ran.rescuer);
    assert!(m.k.reports().is_empty());
}

#[test]
fn cancel_sync_of_the_running_work_from_itself_is_reported_not_hung() {
    let m = machine(1);
    let w = m.k.init_work("self_cancel", |cx, me| {
        cx.kernel().cancel_work_sync(*me, cx);
    });
    m.k.queue_work_on(Some(CpuId(0)), &m.wq, w, &m.cpus[0]);
    m.k.run_worker(PoolId::Cpu(CpuId(0)), &m.cpus[0]).unwrap();
    let bugs = m.k.reports().of_kind(ReportKind::Bug);
    assert_eq!(bugs.len(), 1);
    assert!(bugs[0]
        .message
        .contains("cancel_work_sync() on the work it is called from"));
    assert_eq!(m.k.work_disable_count(w), 0, "re-enabled afterwards");
}

#[test]
fn cancel_work_sync_rejects_queueing_while_it_runs_and_re_enables() {
    let m = machine(1);
    let w = m.k.init_work("w", |_, _| {});
    m.k.queue_work_on(Some(CpuId(0)), &m.wq, w, &m.cpus[0]);
    assert!(m.k.cancel_work_sync(w, &m.cpus[0]));
    assert!(!m.k.cancel_work_sync(w, &m.cpus[0]));
    assert_eq!(m.k.work_disable_count(w), 0);
    assert!(m.k.queue_work_on(Some(CpuId(0)), &m.wq, w, &m.cpus[0]));
}

#[test]
fn disable_work_sync_in_atomic_context_is_might_sleep() {
    let m = machine(1);
    let w = m.k.init_work("w", |_, _| {});
    m.cpus[0].with_hardirq(|cx| m.k.disable_work_sync(w, cx));
    assert_eq!(m.k.reports().of_kind(ReportKind::SleepInAtomic).len(), 1);
}

#[test]
fn flush_work_without_a_runtime_cannot_wait_and_says_so() {
    let m = machine(1);
    let w = m.k.init_work("w", |_, _| {});
    assert!(!m.k.flush_work(w, &m.cpus[0]), "idle: nothing to wait for");
    m.k.queue_work_on(Some(CpuId(0)), &m.wq, w, &m.cpus[0]);
    assert!(m.k.flush_work(w, &m.cpus[0]));
    assert!(m.k.reports().of_kind(ReportKind::Bug)[0]
        .message
        .contains("flush_work() waits forever"));
}

#[test]
fn delayed_work_queued_to_an_offline_cpu_warns_once() {
    let k = Kernel::boot(KernelConfig::default(), 2, 1).unwrap();
    let wq = k.alloc_workqueue("w", WQ_PERCPU, 0).unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let dw = k.init_delayed_work("dw", |_, _| {});
    assert!(k.queue_delayed_work_on(Some(CpuId(1)), &wq, dw, 1, &cx));
    k.cancel_delayed_work(dw);
    assert!(k.queue_delayed_work_on(Some(CpuId(1)), &wq, dw, 1, &cx));
    let warns = k.reports().of_kind(ReportKind::Warn);
    assert_eq!(warns.len(), 1, "WARN_ON_ONCE");
    assert!(warns[0].message.contains("!cpu_online(cpu)"));
    // The timer sits on the offline CPU's base: nothing runs timers there.
    assert_eq!(k.delayed_work_timer(dw), Some(CpuId(1)));
    assert!(
        k.pool(PoolId::Cpu(CpuId(1))).unwrap().disassociated,
        "pools of CPUs not up at boot start disassociated"
    );
}

#[test]
fn an_unbalanced_enable_of_a_pending_work_steals_it_like_work_grab_pending() {
    let m = machine(1);
    let w = m.k.init_work("w", |_, _| {});
    assert!(m.k.queue_work_on(Some(CpuId(0)), &m.wq, w, &m.cpus[0]));
    assert!(m.k.enable_work(w, &m.cpus[0]), "count stays 0: true");
    assert!(
        !m.k.work_pending(w),
        "enable_work() grabbed and cleared PENDING"
    );
    assert_eq!(m.k.pool(PoolId::Cpu(CpuId(0))).unwrap().queued, 0);
    assert_eq!(
        m.k.reports().of_kind(ReportKind::Warn).len(),
        1,
        "underflow warned"
    );
}

#[test]
fn an_overflowing_disable_still_clears_pending() {
    let m = machine(1);
    let w = m.k.init_work("w", |_, _| {});
    for _ in 0..WORK_OFFQ_DISABLE_MAX {
        m.k.disable_work(w, &m.cpus[0]);
    }
    // The work cannot be queued now; the overflowing disable must not leave PENDING set by its
    // own grab.
    assert!(!m.k.disable_work(w, &m.cpus[0]));
    assert!(!m.k.work_pending(w));
}

#[test]
fn queueing_to_a_cpu_that_does_not_exist_is_reported_and_the_work_kept() {
    let m = machine(2);
    let w = m.k.init_work("w", |_, _| {});
    assert!(m.k.queue_work_on(Some(CpuId(99)), &m.wq, w, &m.cpus[1]));
    assert_eq!(m.k.reports().of_kind(ReportKind::Bug).len(), 1);
    assert_eq!(
        m.k.pool(PoolId::Cpu(CpuId(1))).unwrap().queued,
        1,
        "kept on the local CPU"
    );
}

#[test]
fn a_pool_of_a_cpu_that_does_not_exist_is_none_not_another_cpus_pool() {
    let m = machine(2);
    let log = Arc::default();
    let w = counting(&m.k, &log);
    assert!(m.k.queue_work_on(Some(CpuId(1)), &m.wq, w, &m.cpus[0]));
    // Once, an out-of-range CPU was clamped to the last one: CPU7's "worker" ran CPU1's work.
    assert!(m.k.pool(PoolId::Cpu(CpuId(7))).is_none());
    assert!(m.k.run_worker(PoolId::Cpu(CpuId(7)), &m.cpus[1]).is_none());
    assert!(!m.k.set_pool_congested(PoolId::Cpu(CpuId(7)), true));
    assert!(!m.k.pool(PoolId::Cpu(CpuId(1))).unwrap().congested);
    assert_eq!(m.k.pool(PoolId::Cpu(CpuId(1))).unwrap().queued, 1);
    assert!(log.lock().unwrap().is_empty());
}
