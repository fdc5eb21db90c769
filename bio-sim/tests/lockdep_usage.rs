//! Finding 14 on every kernel config: lockdep's inconsistent-usage report for a worker that takes
//! the list lock with interrupts on (the `v6-irqs-on` twin module), and none for any posted
//! version. The threaded runtime's side is in tests/tests/oracle_threaded.rs.

use bio_core::block::complete_in_task::Variant;
use bio_core::kernel::{PreemptModel, ReportKind};
use bio_core::workqueue::RescuerAffinity;
use bio_core::KernelConfig;
use bio_sim::checks::lockdep_usage::{check_14_lockdep_usage, verdict_14, V6_IRQS_ON};

/// Every non-RT preemption model with lockdep (`CONFIG_PROVE_LOCKING` selects `PREEMPT_COUNT`, so
/// a kernel without it has no lockdep to report anything).
const MODELS: [PreemptModel; 4] = [
    PreemptModel::None,
    PreemptModel::Voluntary,
    PreemptModel::Full,
    PreemptModel::Lazy,
];

fn reports(variant: Variant, model: PreemptModel) -> Vec<bio_core::kernel::Report> {
    let s = check_14_lockdep_usage(
        variant,
        KernelConfig::for_model(model),
        RescuerAffinity::PoolCpu,
        false,
    )
    .expect("the machine boots");
    let verdict = verdict_14(&s);
    let (total, done) = s.oracle.counts();
    assert_eq!(
        total, done,
        "{variant} on {model:?}: every bio completed ({verdict:?})"
    );
    s.kernel.reports().all()
}

#[test]
fn the_twin_is_lockdeps_inconsistent_usage_on_every_non_rt_model() {
    for model in MODELS {
        let r = reports(Variant::module(&V6_IRQS_ON), model);
        assert_eq!(
            r.len(),
            1,
            "{model:?}: one splat, lockdep is off after it: {r:#?}"
        );
        assert_eq!(r[0].kind, ReportKind::InconsistentLockState, "{model:?}");
        let text = &r[0].message;
        for line in [
            "WARNING: inconsistent lock state",
            "inconsistent {IN-HARDIRQ-W} -> {HARDIRQ-ON-W} usage.",
            "kworker/0:1/300 [HC0[0]:SC0[0]:HE1:SE1] takes:",
            "(bio_complete_batch.lock){?...}",
            "  <Interrupt>",
            " *** DEADLOCK ***",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{model:?}: no `{line}` in\n{text}"
            );
        }
    }
}

#[test]
fn no_posted_version_has_an_inconsistent_lock_state() {
    // PREEMPT_RT too: v6's hardirq producer there is finding 4's Invalid wait context instead.
    for model in MODELS.into_iter().chain([PreemptModel::Rt]) {
        for v in Variant::ALL {
            let r = reports(v, model);
            assert!(
                r.iter()
                    .all(|r| r.kind != ReportKind::InconsistentLockState),
                "{v} on {model:?}: {r:#?}"
            );
        }
    }
}

#[test]
fn on_preempt_rt_the_hardirq_producer_is_the_wait_context_bug_first() {
    // On RT the local lock sleeps: the hardirq producer is finding 4's Invalid wait context, and
    // lockdep, off after its first splat, reports nothing more.
    let r = reports(Variant::module(&V6_IRQS_ON), PreemptModel::Rt);
    let lockdep: Vec<_> = r
        .iter()
        .filter(|r| {
            matches!(
                r.kind,
                ReportKind::InvalidWaitContext | ReportKind::InconsistentLockState
            )
        })
        .collect();
    assert_eq!(lockdep.len(), 1, "{r:#?}");
    assert_eq!(lockdep[0].kind, ReportKind::InvalidWaitContext);
}
