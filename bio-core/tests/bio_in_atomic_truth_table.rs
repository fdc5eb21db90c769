//! The `bio_in_atomic()` truth table: every kernel configuration biosim accepts × every execution
//! context, with the kernel-visible predicates beside it. Each expected row is written out by hand
//! from kernel-semantics.md §5 (not computed by the code under test), with its justification.

use bio_core::block::bio_in_atomic;
use bio_core::kernel::{ContextKind, PreemptModel};
use bio_core::{CpuId, Kernel, KernelConfig};

/// Expected answers in one context: (bio_in_atomic, preemptible, in_atomic, in_task).
type Row = (bool, bool, bool, bool);

struct Case {
    config: KernelConfig,
    label: &'static str,
    rows: [(ContextKind, Row, &'static str); 8],
}

use ContextKind::*;

fn cases() -> Vec<Case> {
    let none = KernelConfig::for_model(PreemptModel::None);
    let none_nopc = KernelConfig::without_preempt_count(PreemptModel::None);
    let vol = KernelConfig::for_model(PreemptModel::Voluntary);
    let vol_nopc = KernelConfig::without_preempt_count(PreemptModel::Voluntary);
    let full = KernelConfig::for_model(PreemptModel::Full);
    let lazy = KernelConfig::for_model(PreemptModel::Lazy);
    let lazy_norcu = KernelConfig {
        preempt_rcu: false,
        ..lazy
    };
    let rt = KernelConfig::for_model(PreemptModel::Rt);

    // Rows shared by every PREEMPT_COUNT=y, non-RT kernel whose RCU is not preemptible.
    let counted_nonpreempt_rcu = |label| {
        Case {
        config: none,
        label,
        rows: [
            (Task, (false, true, false, true), "preempt_count()==0, IRQs on: preemptible() is true, so not atomic"),
            (TaskPreemptDisabled, (true, false, true, true), "PREEMPT_COUNT: preempt_disable() bumps the count, !preemptible()"),
            (TaskIrqsDisabled, (true, false, false, true), "preemptible() requires !irqs_disabled()"),
            (TaskBhDisabled, (true, false, true, true), "!RT: local_bh_disable() adds SOFTIRQ_DISABLE_OFFSET to preempt_count; BH-disabled is still in_task()"),
            (RcuReadSide, (true, false, true, true), "!PREEMPT_RCU: rcu_read_lock() is preempt_disable(); rcu_preempt_depth() is 0"),
            (Softirq, (true, false, true, false), "serving softirq: SOFTIRQ_OFFSET in preempt_count, in_task() false"),
            (Hardirq, (true, false, true, false), "HARDIRQ_OFFSET and IRQs off"),
            (Nmi, (true, false, true, false), "NMI_OFFSET + HARDIRQ_OFFSET"),
        ],
    }
    };
    // Without PREEMPT_COUNT the kernel cannot tell: bio_in_atomic() is constant true, preemptible()
    // constant 0, and in_atomic() blind to preempt_disable()/rcu_read_lock().
    let uncounted = |config, label| Case {
        config,
        label,
        rows: [
            (
                Task,
                (true, false, false, true),
                "!PREEMPT_COUNT: bio_in_atomic() returns true unconditionally (finding 2)",
            ),
            (
                TaskPreemptDisabled,
                (true, false, false, true),
                "preempt_disable() is a barrier only: in_atomic() cannot see it",
            ),
            (
                TaskIrqsDisabled,
                (true, false, false, true),
                "constant true; preemptible() is constant 0",
            ),
            (
                TaskBhDisabled,
                (true, false, true, true),
                "softirq bits are maintained whatever PREEMPT_COUNT says",
            ),
            (
                RcuReadSide,
                (true, false, false, true),
                "rcu_read_lock() is an invisible preempt_disable()",
            ),
            (
                Softirq,
                (true, false, true, false),
                "SOFTIRQ_OFFSET is always counted",
            ),
            (
                Hardirq,
                (true, false, true, false),
                "HARDIRQ_OFFSET is always counted",
            ),
            (
                Nmi,
                (true, false, true, false),
                "NMI bits are always counted",
            ),
        ],
    };
    // PREEMPTION with PREEMPT_RCU (FULL, LAZY): the RCU row is the erofs fix.
    let preempt_rcu = |config, label| {
        Case {
        config,
        label,
        rows: [
            (Task, (false, true, false, true), "preemptible task context"),
            (TaskPreemptDisabled, (true, false, true, true), "!preemptible()"),
            (TaskIrqsDisabled, (true, false, false, true), "irqs_disabled()"),
            (TaskBhDisabled, (true, false, true, true), "SOFTIRQ_DISABLE_OFFSET in preempt_count"),
            (RcuReadSide, (true, true, false, true), "PREEMPT_RCU reader stays preemptible(), but PREEMPTION && rcu_preempt_depth() makes it atomic (the erofs fix)"),
            (Softirq, (true, false, true, false), "serving softirq"),
            (Hardirq, (true, false, true, false), "hardirq"),
            (Nmi, (true, false, true, false), "NMI"),
        ],
    }
    };
    vec![
        counted_nonpreempt_rcu("PREEMPT_NONE"),
        uncounted(none_nopc, "PREEMPT_NONE, PREEMPT_COUNT=n"),
        Case { config: vol, ..counted_nonpreempt_rcu("PREEMPT_VOLUNTARY") },
        uncounted(vol_nopc, "PREEMPT_VOLUNTARY, PREEMPT_COUNT=n"),
        preempt_rcu(full, "PREEMPT (full)"),
        preempt_rcu(lazy, "PREEMPT_LAZY"),
        Case { config: lazy_norcu, ..counted_nonpreempt_rcu("PREEMPT_LAZY, PREEMPT_RCU=n") },
        Case {
            config: rt,
            label: "PREEMPT_RT",
            rows: [
                (Task, (false, true, false, true), "preemptible task context"),
                (TaskPreemptDisabled, (true, false, true, true), "!preemptible()"),
                (TaskIrqsDisabled, (true, false, false, true), "irqs_disabled()"),
                (TaskBhDisabled, (true, true, false, true), "RT: BH-disabled sections are preemptible (softirq count lives in the task) but hold rcu_read_lock(), so rcu_preempt_depth() > 0"),
                (RcuReadSide, (true, true, false, true), "PREEMPT_RCU reader: rcu_preempt_depth() > 0"),
                (Softirq, (true, true, false, false), "RT softirqs run preemptible in task context under rcu_read_lock(); in_serving_softirq() makes in_task() false"),
                (Hardirq, (true, false, true, false), "a genuine (non-threaded) hardirq"),
                (Nmi, (true, false, true, false), "NMI"),
            ],
        },
    ]
}

#[test]
fn bio_in_atomic_truth_table() {
    let cases = cases();
    assert_eq!(
        cases.len(),
        KernelConfig::matrix().len(),
        "one case per accepted configuration"
    );
    for m in KernelConfig::matrix() {
        assert!(cases.iter().any(|c| c.config == m), "no case for {m}");
    }
    let mut checked = 0;
    for case in cases {
        let kernel = Kernel::new(case.config, 1).expect(case.label);
        let cpu = kernel.cpu(CpuId(0)).unwrap();
        for (ctx, expected, why) in case.rows {
            let got = ctx.run(&cpu, |cpu| {
                (
                    bio_in_atomic(cpu),
                    cpu.preemptible(),
                    cpu.in_atomic(),
                    cpu.in_task(),
                )
            });
            assert_eq!(
                got, expected,
                "{} / {}: (bio_in_atomic, preemptible, in_atomic, in_task) — expected because: {}",
                case.label, ctx, why
            );
            checked += 1;
        }
        // Leaving every context restores a clean task context.
        assert!(!bio_in_atomic(&cpu) || !case.config.preempt_count);
        assert!(
            kernel.reports().is_empty(),
            "{}: {:?}",
            case.label,
            kernel.reports().all()
        );
    }
    assert_eq!(checked, 64);
}

#[test]
fn ground_truth_may_sleep_differs_from_what_a_nopc_kernel_sees() {
    // The oracle's view: in plain task context a sleeping bi_end_io is fine even though a
    // !PREEMPT_COUNT kernel's bio_in_atomic() says otherwise.
    let k = Kernel::new(KernelConfig::without_preempt_count(PreemptModel::None), 1).unwrap();
    let cpu = k.cpu(CpuId(0)).unwrap();
    assert!(bio_in_atomic(&cpu));
    assert!(cpu.may_sleep());
    for ctx in ContextKind::ALL.into_iter().skip(1) {
        assert!(
            !ctx.run(&cpu, |c| c.may_sleep()),
            "{ctx} must not be a sleeping context"
        );
    }
}
