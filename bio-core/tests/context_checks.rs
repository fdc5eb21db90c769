//! might_sleep() and lockdep wait-context reports: the kernel's wording, the context snapshot, and
//! no report where the kernel would print none.

use bio_core::kernel::{ContextKind, LockClass, PreemptModel, ReportKind};
use bio_core::{CpuId, Kernel, KernelConfig};

fn kernel(config: KernelConfig) -> std::sync::Arc<Kernel> {
    Kernel::new(config, 2).unwrap()
}

#[test]
fn might_sleep_in_task_context_is_clean() {
    let k = kernel(KernelConfig::default());
    let cpu = k.cpu(CpuId(1)).unwrap();
    assert!(cpu.might_sleep().is_ok());
    assert!(k.reports().is_empty());
}

#[test]
fn might_sleep_in_every_atomic_context_reports_with_the_kernel_wording() {
    for ctx in ContextKind::ALL
        .into_iter()
        .filter(|c| *c != ContextKind::Task)
    {
        let k = kernel(KernelConfig::for_model(PreemptModel::Full));
        let cpu = k.cpu(CpuId(1)).unwrap();
        let report = ctx
            .run(&cpu, |c| c.might_sleep_at("mm/filemap.c:1234"))
            .unwrap_err();
        assert_eq!(report.kind, ReportKind::SleepInAtomic, "{ctx}");
        let first = report.message.lines().next().unwrap();
        assert_eq!(
            first,
            "BUG: sleeping function called from invalid context at mm/filemap.c:1234"
        );
        assert!(
            report.message.contains("in_atomic(): "),
            "{}",
            report.message
        );
        assert!(
            report.message.contains("RCU nest depth: "),
            "{}",
            report.message
        );
        assert_eq!(report.cpu, CpuId(1));
        assert!(
            !report.context.may_sleep,
            "{ctx}: the snapshot says the context cannot sleep"
        );
        assert_eq!(k.reports().len(), 1, "{ctx}: recorded in the log");
    }
}

#[test]
fn might_sleep_snapshot_carries_the_counts() {
    let k = kernel(KernelConfig::for_model(PreemptModel::Full));
    let cpu = k.cpu(CpuId(0)).unwrap();
    let r = cpu.with_hardirq(|c| c.might_sleep()).unwrap_err();
    assert_eq!(r.context.preempt_count, 0x10000);
    assert!(r.context.irqs_disabled);
    assert!(!r.context.in_task);
    assert!(
        r.message.contains("in_atomic(): 1, irqs_disabled(): 1"),
        "{}",
        r.message
    );
    assert!(
        r.message.contains("preempt_count: 10000, expected: 0"),
        "{}",
        r.message
    );
    let r = cpu
        .with_rcu_read_lock(|c| c.with_rcu_read_lock(|c| c.might_sleep()))
        .unwrap_err();
    assert!(
        r.message.contains("RCU nest depth: 2, expected: 0"),
        "{}",
        r.message
    );
}

#[test]
fn might_sleep_is_silent_without_debug_atomic_sleep() {
    // The kernel cannot see it; the simulator's ground truth still can.
    let k = kernel(KernelConfig::without_preempt_count(PreemptModel::None));
    let cpu = k.cpu(CpuId(0)).unwrap();
    let (checked, truth) = cpu.with_hardirq(|c| (c.might_sleep(), c.may_sleep()));
    assert!(checked.is_ok());
    assert!(!truth);
    assert!(k.reports().is_empty());
}

#[test]
fn local_lock_in_hardirq_on_rt_is_an_invalid_wait_context() {
    let k = kernel(KernelConfig::for_model(PreemptModel::Rt));
    let cpu = k.cpu(CpuId(0)).unwrap();
    let (held, report) = cpu.with_hardirq(|c| {
        let (held, report) = c.lock_acquire(LockClass::LocalLock, "bio_complete_batch.lock");
        c.lock_release(held.clone());
        (held, report)
    });
    let report = report.expect("RT local_lock_t in hardirq must be reported");
    assert_eq!(report.kind, ReportKind::InvalidWaitContext);
    assert!(
        report.message.starts_with("BUG: Invalid wait context"),
        "{}",
        report.message
    );
    assert!(report.message.contains("bio_complete_batch.lock"));
    assert!(report.context.in_atomic && !report.context.in_task);
    assert_eq!(held.class, LockClass::LocalLock);
    assert_eq!(k.reports().of_kind(ReportKind::InvalidWaitContext).len(), 1);
}

#[test]
fn same_lock_on_non_rt_or_in_task_context_is_fine() {
    for model in [
        PreemptModel::None,
        PreemptModel::Voluntary,
        PreemptModel::Full,
        PreemptModel::Lazy,
    ] {
        let k = kernel(KernelConfig::for_model(model));
        let cpu = k.cpu(CpuId(0)).unwrap();
        cpu.with_hardirq(|c| {
            let (h, r) = c.lock_acquire(LockClass::LocalLock, "bio_complete_batch.lock");
            assert!(r.is_none(), "{model}: {r:?}");
            assert!(c.in_atomic());
            c.lock_release(h);
        });
        assert!(k.reports().is_empty(), "{model}");
    }
    let k = kernel(KernelConfig::for_model(PreemptModel::Rt));
    let cpu = k.cpu(CpuId(0)).unwrap();
    let (h, r) = cpu.lock_acquire(LockClass::Spinlock, "some_lock");
    assert!(r.is_none());
    assert!(
        cpu.preemptible(),
        "an RT spinlock_t sleeps and does not disable preemption"
    );
    cpu.lock_release(h);
    assert!(k.reports().is_empty());
}

#[test]
fn spinlock_under_raw_spinlock_on_rt_is_invalid() {
    let k = kernel(KernelConfig::for_model(PreemptModel::Rt));
    let cpu = k.cpu(CpuId(0)).unwrap();
    let (raw, r1) = cpu.lock_acquire(LockClass::RawSpinlock, "raw");
    assert!(r1.is_none());
    let (inner, r2) = cpu.lock_acquire(LockClass::Spinlock, "inner");
    let r2 = r2.unwrap();
    assert_eq!(r2.kind, ReportKind::InvalidWaitContext);
    assert!(
        r2.message.contains("raw (raw_spinlock_t)"),
        "held locks listed: {}",
        r2.message
    );
    cpu.lock_release(inner);
    cpu.lock_release(raw);
    assert!(cpu.preemptible());
}

#[test]
fn mutex_in_atomic_context_is_reported_on_every_config() {
    for config in KernelConfig::matrix()
        .into_iter()
        .filter(|c| c.prove_locking)
    {
        let k = kernel(config);
        let cpu = k.cpu(CpuId(0)).unwrap();
        cpu.with_softirq(|c| {
            let (h, r) = c.lock_acquire(LockClass::Mutex, "m");
            // RT softirq runs in task context where a mutex is a valid wait context, but it is
            // inside rcu_read_lock(), which might_sleep() catches.
            assert!(r.is_some(), "{config}");
            c.lock_release(h);
        });
    }
}

#[test]
fn unbalanced_operations_are_warnings_not_panics() {
    let k = kernel(KernelConfig::default());
    let cpu = k.cpu(CpuId(0)).unwrap();
    cpu.preempt_enable();
    cpu.rcu_read_unlock();
    cpu.local_bh_enable();
    cpu.hardirq_exit();
    cpu.nmi_exit();
    let (h, _) = cpu.lock_acquire(LockClass::Spinlock, "x");
    cpu.lock_release(h.clone());
    cpu.lock_release(h);
    let warns = k.reports().of_kind(ReportKind::Warn);
    assert_eq!(warns.len(), 6, "{warns:#?}");
    assert!(warns
        .iter()
        .all(|w| w.message.starts_with("WARNING: CPU: 0 at ")));
    assert!(cpu.may_sleep(), "state unchanged by the bad calls");
}

#[test]
fn rt_spinlock_inside_rcu_read_lock_is_fine_but_not_with_preemption_off() {
    // rtlock_might_resched() expects the current RCU nesting: every RT softirq holds
    // rcu_read_lock(), and takes spinlock_t/local_lock_t there.
    let k = kernel(KernelConfig::for_model(PreemptModel::Rt));
    let cpu = k.cpu(CpuId(0)).unwrap();
    for ctx in [
        ContextKind::Softirq,
        ContextKind::RcuReadSide,
        ContextKind::TaskBhDisabled,
    ] {
        ctx.run(&cpu, |c| {
            // One lock per context: one lock taken in softirq and with softirqs on would be
            // lockdep's inconsistent lock state, not what this test is about.
            let (h, r) = c.lock_acquire(LockClass::LocalLock, ctx.name());
            assert!(r.is_none(), "{ctx}: {r:?}");
            c.lock_release(h);
        });
    }
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    let r = cpu.with_preempt_disabled(|c| {
        let (h, r) = c.lock_acquire(LockClass::Spinlock, "s");
        c.lock_release(h);
        r
    });
    let r = r.expect("an rtlock with preemption disabled is a sleeping-in-atomic bug");
    assert_eq!(r.kind, ReportKind::SleepInAtomic);
}
