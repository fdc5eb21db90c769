//! Explore with fault injection and plugging (`--inject`) and stacked backings (`--backing`):
//! the generator draws the new lines only when asked, and a campaign finds a bug only an
//! injected I/O error reveals — the twin `bug-rig-failed-io-as-data` (the loop rig counts a
//! failed write as written data) — down to a minimal scenario with the `fail_io` line.
//!
//! Why that twin: no loop version in the model handles an I/O error of its backing differently
//! from another (each ends the request with the error, once), so an injected error exposes no
//! version difference; the rig's reference is the one piece whose error handling only an
//! injected failure exercises (a sparse or preallocated backing never fails on its own).

use super::campaign::{Budget, Campaign, Shard};
use super::generator::{transition, Space};
use crate::machine::loop_rig::{BackingKind, LoopSetup};
use crate::machine::transition::Transition;
use bio_core::block::complete_in_task::Variant;
use bio_core::drivers::block::loop_drv::{LoopKnob, LoopVariant};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};

fn draw(space: &Space, n: usize) -> Vec<Transition> {
    let mut runner = TestRunner::new_with_rng(
        proptest::test_runner::Config::default(),
        TestRng::from_seed(RngAlgorithm::XorShift, &[9; 16]),
    );
    let s = transition(space);
    (0..n)
        .map(|_| s.new_tree(&mut runner).unwrap().current())
        .collect()
}

/// Without `inject` no injection or plug line is drawn (existing campaigns draw what they
/// always drew); with it every kind is, and `fail_io` names the stacked lower device too.
#[test]
fn injection_is_drawn_only_when_asked() {
    let is_new = |t: &Transition| {
        matches!(
            t,
            Transition::FailIo { .. }
                | Transition::FailAlloc { .. }
                | Transition::Plug { .. }
                | Transition::Unplug { .. }
        )
    };
    let space = Space {
        nr_cpus: 2,
        dynamic_helper: true,
        loop_blocks: Some(8),
        inject: false,
        lower: Some("nullb0"),
    };
    assert!(!draw(&space, 3000).iter().any(is_new));
    let ts = draw(
        &Space {
            inject: true,
            ..space
        },
        3000,
    );
    let lines: std::collections::BTreeSet<String> = ts
        .iter()
        .filter(|t| is_new(t))
        .map(|t| {
            t.to_scenario_line()
                .replace(|c: char| c.is_ascii_digit(), "")
        })
        .collect();
    assert_eq!(
        lines.into_iter().collect::<Vec<_>>(),
        vec![
            "fail_alloc bio_alloc_bioset",
            "fail_alloc bvec_alloc",
            "fail_alloc lo_rw_aio_prep",
            "fail_io loop",
            "fail_io nullb",
            "plug ",
            "unplug ",
        ]
    );
}

/// One CPU: the loop device's I/O under CPU hotplug has violations of its own on main (a
/// request submitted on a CPU that goes down is lost; see docs/explore.md), which a campaign
/// with hotplug finds first; with one CPU every hotplug operation is refused (the last online
/// CPU), so what the campaign finds is what the injection and plug lines reveal. v5 with L6's
/// fix: v5 as posted leaks a `kiocb_start_write()` on its first fallen-back write (loop check
/// L6), which [`explore_finds_l6_on_v5_as_posted`] shows explore finding by itself.
fn campaign(backing: BackingKind, cases: u64) -> Campaign {
    campaign_on(
        LoopVariant::V5.with(LoopKnob::NowaitEndsWriteOnEagain(true)),
        backing,
        cases,
    )
}

fn campaign_on(variant: LoopVariant, backing: BackingKind, cases: u64) -> Campaign {
    let base = crate::perf::explore_bench::campaign(Variant::DEFAULT, cases, 24, 1, 11);
    Campaign {
        config: crate::machine::sim::SimConfig {
            nr_cpus: 1,
            online: 1,
            ..base.config
        },
        loop_dev: Some(LoopSetup::new(variant, backing, 0)),
        inject: true,
        budget: Budget::Cases(cases),
        shard: Shard::ALL,
        ..base
    }
}

/// A campaign with injection over loop v5 (a sparse file, stacked on nullb0, on loop1) finds nothing:
/// an injected error ends its bio with the error, once, and the data check expects the block
/// unchanged. Under the twin the failed write is expected in the read-back, and the campaign
/// finds the mismatch.
#[test]
#[cfg_attr(
    feature = "bug-rig-failed-io-as-data",
    should_panic(expected = "found")
)]
fn a_campaign_with_injection_finds_no_violation() {
    // Over a loop device, v5's inline NOWAIT I/O meets 6.18's plug flush (see
    // `explore_finds_the_6_18_plug_list_corruption_on_v5_over_a_loop_device`); base, which
    // never submits from `->queue_rq()`, stands for that backing here.
    for backing in [BackingKind::Sparse, BackingKind::Nullb, BackingKind::Loop] {
        let c = if backing == BackingKind::Loop {
            campaign_on(LoopVariant::BASE, backing, 150)
        } else {
            campaign(backing, 150)
        };
        let out = c.run(None).unwrap();
        if let Some(f) = out.found {
            let lines: Vec<String> = f.case.iter().map(|t| t.to_scenario_line()).collect();
            panic!(
                "found case {} on {}: {:?}\n{}",
                f.index,
                backing.name(),
                f.failure.violations,
                lines.join("\n")
            );
        }
        assert_eq!(out.cases, 150);
    }
}

/// Under the twin: the campaign finds the data mismatch, and the shrunk counterexample is a few
/// lines with the `fail_io` line that reveals it, and reproduces with `biosim run`.
#[cfg(feature = "bug-rig-failed-io-as-data")]
#[test]
fn the_counterexample_keeps_the_injection_line() {
    use super::counterexample::{self, Provenance};
    use super::shrink::shrink;
    use crate::machine::oracle::Invariant;
    let c = campaign(BackingKind::Sparse, 150);
    let found = c.run(None).unwrap().found.expect("the twin is found");
    let shrunk = shrink(&c, &found).unwrap();
    assert_eq!(shrunk.invariant, Invariant::DataMismatch);
    let path = std::env::temp_dir().join(format!(
        "biosim-inject-twin-{}-{}.scn",
        std::process::id(),
        found.index
    ));
    let w = counterexample::write(
        &c,
        &found.seed,
        &shrunk.case,
        &Provenance {
            command: "biosim explore --loop v5 --inject",
            preset: "v7",
            knobs: &[],
            index: found.index,
            drawn: found.case.len(),
            invariant: shrunk.invariant,
        },
        &path,
    )
    .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(text.contains("\nfail_io loop0\n"), "{text}");
    assert!(w.transitions.len() <= 3, "{text}");
    assert!(text.contains("\nexpect data\n"), "{text}");
}

/// Loop check L6 found from scratch: a campaign on v5 as posted (no injection needed) finds the
/// leaked `SB_FREEZE_WRITE` writer of a write whose NOWAIT attempt fell back, and shrinks it to
/// the write alone; base, which makes no NOWAIT attempt, stays clean over the same cases. No
/// injection: the leak is v5's own.
#[test]
fn explore_finds_l6_on_v5_as_posted() {
    use super::shrink::shrink;
    use crate::machine::oracle::Invariant;
    use bio_core::kernel::ReportKind;
    let c = Campaign {
        inject: false,
        ..campaign_on(LoopVariant::V5, BackingKind::Sparse, 300)
    };
    let found = c
        .run(None)
        .unwrap()
        .found
        .expect("v5 as posted leaks a writer");
    let shrunk = shrink(&c, &found).unwrap();
    assert_eq!(
        shrunk.invariant,
        Invariant::KernelReport(ReportKind::SbWritersUnbalanced)
    );
    let lines: Vec<String> = shrunk.case.iter().map(|t| t.to_scenario_line()).collect();
    assert!(
        lines.len() <= 2 && lines.iter().any(|l| l.contains(" write ")),
        "{lines:?}"
    );
    let base = Campaign {
        inject: false,
        ..campaign_on(LoopVariant::BASE, BackingKind::Sparse, 300)
    }
    .run(None)
    .unwrap();
    assert!(
        base.found.is_none(),
        "base: {:?}",
        base.found.map(|f| f.index)
    );
}

/// The plug-list corruption that "blk-mq: fix plug list corruption when queue_rq adds new
/// requests" (posted after 6.18) fixes, found by explore: loop0 (v5, with L6's fix) over loop1,
/// an explicit `unplug` flushes loop0's request, whose NOWAIT attempt in `->queue_rq()`
/// submits loop1's bio with no `current->bio_list`, and loop1's request is added to the plug
/// list 6.18 is walking: the WARN, shrunk to the plug and one I/O (read or write: both try
/// NOWAIT inline), the settle finishing the open plug.
#[test]
#[cfg_attr(feature = "bug-rig-failed-io-as-data", ignore)]
fn explore_finds_the_6_18_plug_list_corruption_on_v5_over_a_loop_device() {
    use super::shrink::shrink;
    use crate::machine::oracle::Invariant;
    use bio_core::kernel::ReportKind;
    let c = campaign(BackingKind::Loop, 300);
    let found = c
        .run(None)
        .unwrap()
        .found
        .expect("6.18 walks the live plug list");
    assert!(
        found.failure.violations[0]
            .message
            .contains("request added to plug->mq_list while blk_mq_flush_plug_list() walks it"),
        "{:?}",
        found.failure.violations
    );
    let shrunk = shrink(&c, &found).unwrap();
    assert_eq!(shrunk.invariant, Invariant::KernelReport(ReportKind::Warn));
    let lines: Vec<String> = shrunk.case.iter().map(|t| t.to_scenario_line()).collect();
    assert!(
        lines.len() <= 3
            && lines.iter().any(|l| l.starts_with("plug "))
            && lines.iter().any(|l| l.starts_with("io ")),
        "{lines:?}"
    );
}
