//! The oracle on the threaded runtime: real threads, real interleavings, the same invariants. A
//! workload of flagged and dynamic completions from hardirq on every CPU with a CPU going offline
//! and back in the middle passes on v7; the oracle catches the init-protocol twin there too.

use bio_core::block::complete_in_task::Variant;
use bio_core::block::{bio_endio, ReqOp};
use bio_core::kernel::CpuId;
use bio_core::{Kernel, KernelConfig};
use bio_sim::machine::oracle::{Invariant, Need, Oracle};
use bio_sim::runtime::threaded::{ThreadedConfig, ThreadedRuntime};
use biosim_tests::{assert_clean, MachineBuilder, Parts};
use hotplug::{CPUHP_OFFLINE, CPUHP_ONLINE};
use std::sync::Arc;
use std::time::Duration;

fn machine(variant: Variant, nr: u32, online: u32) -> (Parts, ThreadedRuntime) {
    MachineBuilder::new()
        .kernel(KernelConfig {
            hz: 1000,
            ..KernelConfig::default()
        })
        .cpus(nr)
        .online(online)
        .variant(variant)
        .threaded(ThreadedConfig::default())
}

fn complete_from_irqs(kernel: &Arc<Kernel>, oracle: &Arc<Oracle>, cpu: CpuId, n: u32) {
    for i in 0..n {
        let need = if i % 3 == 0 {
            Need::Dynamic
        } else {
            Need::Flag
        };
        let bio = oracle.bio(kernel, ReqOp::Write, need);
        kernel
            .raise_irq(cpu, "oracle_test", Box::new(move |cx| bio_endio(bio, cx)))
            .expect("the CPU exists");
    }
}

#[test]
fn v7_holds_every_invariant_under_real_concurrency_and_hotplug() {
    let (m, rt) = machine(Variant::V7, 4, 4);
    let (kernel, oracle) = (&m.kernel, &m.oracle);
    for c in 0..4 {
        complete_from_irqs(kernel, oracle, CpuId(c), 200);
    }
    rt.cpu_down(CpuId(2), CPUHP_OFFLINE).unwrap();
    for c in [0, 1, 3] {
        complete_from_irqs(kernel, oracle, CpuId(c), 200);
    }
    rt.cpu_up(CpuId(2), CPUHP_ONLINE).unwrap();
    complete_from_irqs(kernel, oracle, CpuId(2), 200);
    assert!(rt.quiesce(Duration::from_secs(20)), "the machine quiesces");
    assert_clean("after quiescing", &m.check_quiescent());
    assert_eq!(oracle.counts(), (1600, 1600), "every bio completed once");
    let report = rt.shutdown();
    assert!(report.is_clean(), "{report}");
}

#[test]
fn the_oracle_catches_the_init_protocol_twin_on_threads_too() {
    let mut twin = Variant::V7;
    twin.init_disables_offline = false;
    let (m, rt) = machine(twin, 2, 1);
    let (kernel, oracle) = (&m.kernel, &m.oracle);
    rt.cpu_up(CpuId(1), CPUHP_ONLINE).unwrap();
    complete_from_irqs(kernel, oracle, CpuId(1), 10);
    assert!(rt.quiesce(Duration::from_secs(20)));
    let violations = m.check_quiescent();
    assert!(
        violations
            .iter()
            .any(|v| matches!(v.invariant, Invariant::KernelReport(_))
                && v.message.contains("underflowed")),
        "{violations:#?}"
    );
    drop(rt.shutdown());
}

/// Finding 14 on threads: the twin whose worker takes the list lock with interrupts on is
/// lockdep's inconsistent usage; v6, whose worker uses `local_lock_irq()`, and v7 are silent.
#[test]
fn lockdeps_usage_check_catches_the_irqs_on_worker_on_threads_too() {
    use bio_core::kernel::ReportKind;
    use bio_sim::checks::lockdep_usage::V6_IRQS_ON;
    for (variant, caught) in [
        (Variant::module(&V6_IRQS_ON), true),
        (Variant::V6, false),
        (Variant::V7, false),
    ] {
        let (m, rt) = machine(variant, 2, 2);
        complete_from_irqs(&m.kernel, &m.oracle, CpuId(0), 20);
        assert!(rt.quiesce(Duration::from_secs(20)), "{variant}: quiesces");
        let usage = m
            .kernel
            .reports()
            .all()
            .into_iter()
            .filter(|r| r.kind == ReportKind::InconsistentLockState)
            .count();
        assert_eq!(usage, usize::from(caught), "{variant}");
        drop(rt.shutdown());
    }
}
