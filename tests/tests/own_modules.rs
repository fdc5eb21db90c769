//! A reviewer's module under `biosim explore`'s campaign (the library entry the command runs,
//! `bio_sim::explore::campaign::Campaign`, with the variant fixed to the module): the deliberately
//! broken twin of the v6-llist example (tests/src/broken_module.rs: online does not requeue) is
//! caught within explore's default budget and shrinks to finding 1's rollback, while the example
//! itself runs the same cases clean. The gallery's finding-1 check agrees on both.

use bio_core::block::complete_in_task::Variant;
use bio_core::workqueue::RescuerAffinity;
use bio_core::KernelConfig;
use bio_sim::checks::findings::run_check;
use bio_sim::checks::Verdict;
use bio_sim::cli::explore::DEFAULT_CASES;
use bio_sim::explore::campaign::{Budget, Campaign};
use bio_sim::explore::shrink::shrink;
use bio_sim::explore::Shard;
use bio_sim::machine::oracle::Invariant;
use bio_sim::machine::sim::SimConfig;
use bio_sim::machine::transition::Transition;
use biosim_tests::{broken_module, v6_llist};

/// `biosim explore --variant NAME`'s campaign with every other option at its default (3 CPUs,
/// seed 1, 40 steps, one job), `cases` cases.
fn explore(variant: Variant, cases: u64) -> Campaign {
    Campaign {
        config: SimConfig {
            kernel: KernelConfig::default(),
            nr_cpus: 3,
            online: 3,
            variant,
            rescuer: RescuerAffinity::PoolCpu,
            seed: 0,
            trace: false,
        },
        loop_dev: None,
        seed: 1,
        steps: 40,
        budget: Budget::Cases(cases),
        jobs: 1,
        shard: Shard::ALL,
        inject: false,
    }
}

#[test]
fn explore_catches_the_broken_module_within_its_default_budget() {
    let c = explore(Variant::module(&broken_module::MODULE), DEFAULT_CASES);
    let out = c.run(None).expect("the machine boots");
    let found = out
        .found
        .unwrap_or_else(|| panic!("{DEFAULT_CASES} cases ran clean on the broken module"));
    assert!(found.failure.breaks(Invariant::Stranded), "{found:?}");
    let shrunk = shrink(&c, &found).expect("shrinks");
    assert_eq!(shrunk.invariant, Invariant::Stranded);
    // Finding 1's shape: an offline that stops after `down_prep` and comes back online (an
    // injected failure's rollback, or a `hotplug/target` park that the settle ends).
    assert!(
        shrunk.case.iter().any(|t| matches!(
            t,
            Transition::Hotplug {
                up: false,
                fail_at: Some(_),
                ..
            } | Transition::Fail { .. }
                | Transition::Target { .. }
        )),
        "{:?}",
        shrunk.case
    );
    println!(
        "broken module: caught at case {} of {DEFAULT_CASES} ({} drawn transitions), shrunk to {} in {} candidates: {:?}",
        found.index,
        found.case.len(),
        shrunk.case.len(),
        shrunk.iterations,
        shrunk.case
    );
    // The example it is the twin of runs the same cases, up to the one that caught the twin and
    // as many again, clean.
    let fixed = explore(Variant::module(&v6_llist::MODULE), 2 * (found.index + 1))
        .run(None)
        .expect("boots");
    assert!(fixed.found.is_none(), "{:?}", fixed.found);
}

#[test]
fn the_gallery_check_of_finding_1_catches_the_broken_module_only() {
    let verdict = |v| {
        run_check(1, v, RescuerAffinity::PoolCpu, false)
            .expect("a check")
            .expect("runs")
            .verdict
    };
    assert!(matches!(
        verdict(Variant::module(&broken_module::MODULE)),
        Verdict::Caught(_)
    ));
    assert!(matches!(
        verdict(Variant::module(&v6_llist::MODULE)),
        Verdict::Clean
    ));
}
