//! Tests of the fault-injection, plug and stacking lines (`fail_alloc`, `fail_io`, `plug`,
//! `unplug`; the `nullb` and `loop` backings) and of the seed reaching fault injection.

use super::*;
use crate::machine::sim::{Sim, SimConfig};
use bio_core::kernel::fault_inject::ALLOC_SITES;
use bio_core::kernel::CpuId;

fn parse_err(text: &str) -> String {
    Scenario::parse(text, "t.scn").unwrap_err().to_string()
}

fn run(text: &str) -> ScenarioRun {
    let r = Scenario::parse(text, "t.scn").unwrap().run().unwrap();
    assert!(
        r.failed_expectations.is_empty(),
        "{:?}\n{}",
        r.failed_expectations,
        r.trace
    );
    r
}

/// Each new line parses to its transition and prints back as the same line.
#[test]
fn injection_and_plug_lines_round_trip() {
    for (header, line, want) in [
        (
            "loop v5 prealloc",
            "fail_alloc bio_alloc_bioset",
            Transition::FailAlloc {
                site: "bio_alloc_bioset",
            },
        ),
        (
            "loop v5 prealloc",
            "fail_alloc bvec_alloc",
            Transition::FailAlloc { site: "bvec_alloc" },
        ),
        (
            "loop v5 prealloc",
            "fail_alloc lo_rw_aio_prep",
            Transition::FailAlloc {
                site: "lo_rw_aio_prep",
            },
        ),
        (
            "loop v5 prealloc",
            "fail_io loop0",
            Transition::FailIo { dev: "loop0" },
        ),
        (
            "loop v5 nullb",
            "fail_io nullb0",
            Transition::FailIo { dev: "nullb0" },
        ),
        (
            "loop v5 loop",
            "fail_io loop1",
            Transition::FailIo { dev: "loop1" },
        ),
        (
            "null_blk",
            "fail_io nullb0",
            Transition::FailIo { dev: "nullb0" },
        ),
        ("loop v5 prealloc", "plug 1", Transition::Plug { cpu: 1 }),
        (
            "loop v5 prealloc",
            "freeze_queue",
            Transition::FreezeLoopQueue,
        ),
        (
            "loop v5 prealloc",
            "unplug 0",
            Transition::Unplug { cpu: 0 },
        ),
    ] {
        let s = Scenario::parse(&format!("cpus 2\n{header}\n{line}\n"), "t.scn").unwrap();
        let got: Vec<Transition> = s.transitions.iter().map(|(_, t)| *t).collect();
        assert_eq!(got, vec![want], "{line}");
        assert_eq!(want.to_scenario_line(), line);
    }
    assert_eq!(
        ALLOC_SITES.len(),
        3,
        "the round trip above covers every site"
    );
}

/// Every bad form is refused with file:line:column and says what was expected.
#[test]
fn bad_injection_and_plug_lines_are_refused() {
    for (text, want) in [
        ("loop v5 prealloc\nfail_alloc kmalloc\n", "t.scn:2:12: fail_alloc: unknown allocation site `kmalloc` (known sites: bio_alloc_bioset, bvec_alloc, lo_rw_aio_prep)"),
        ("loop v5 prealloc\nfail_alloc\n", "t.scn:2:11: `fail_alloc` needs an allocation site"),
        ("loop v5 prealloc\nfail_alloc bvec_alloc 2\n", "t.scn:2:23: unexpected `2`"),
        ("loop v5 prealloc\nfail_io nullb0\n", "t.scn:2:9: fail_io: `nullb0` is not a device of this scenario (its devices: loop0)"),
        ("loop v5 nullb\nfail_io loop1\n", "t.scn:2:9: fail_io: `loop1` is not a device of this scenario (its devices: loop0, nullb0)"),
        ("null_blk\nfail_io loop0\n", "t.scn:2:9: fail_io: `loop0` is not a device of this scenario (its devices: nullb0)"),
        ("loop v5 prealloc\nfail_io loop0 loop0\n", "t.scn:2:15: unexpected `loop0`"),
        ("cpus 2\nfail_io loop0\n", "t.scn:2:1: `fail_io` needs a `loop` or `null_blk` header line"),
        ("cpus 2\nplug 0\n", "t.scn:2:1: `plug` needs a `loop` or `null_blk` header line"),
        ("loop v5 prealloc\nplug\n", "t.scn:2:5: `plug` needs a CPU number"),
        ("loop v5 prealloc\nunplug 0 1\n", "t.scn:2:10: unexpected `1`"),
        ("null_blk\nfreeze_queue\n", "t.scn:2:1: `freeze_queue` needs a `loop` header line"),
        ("loop v5 prealloc\nfreeze_queue now\n", "t.scn:2:14: unexpected `now`"),
        ("cpus 2\nloop v5 prealloc\nplug 2\n", "t.scn:3:6: CPU2 does not exist"),
        ("loop v5 tape\n", "loop: unknown backing `tape` (expected sparse, prealloc, refusing, blockdev, nullb or loop)"),
    ] {
        let e = parse_err(text);
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

/// `fail_io loop0`: the next bio to loop0 ends with BLK_STS_IOERR, once (the oracle's `once`
/// holds), the failed write leaves the block as it was (the read-back finds zeros), and the
/// fault is in the trace and in the log listed at the end. The following write succeeds.
#[test]
fn fail_io_fails_the_next_bio_once() {
    let text = "cpus 2\nloop v5 prealloc\nfail_io loop0\nio 1 write 3 fill=7\nio 1 write 4 fill=8\nsettle\nexpect clean\n";
    let r = run(text);
    assert_eq!(
        r.trace
            .matches("biosim: fail_io loop0: one-shot I/O failure (BLK_STS_IOERR)")
            .count(),
        2,
        "once where it struck, once in the log: {}",
        r.trace
    );
    assert!(
        r.trace.contains("   (fault log: 1 injected fault line(s))"),
        "{}",
        r.trace
    );
    // Through the Sim, the rig's count of failed I/O.
    let s = Sim::new(SimConfig::default()).unwrap();
    s.attach_loop(LoopSetup::new(
        bio_core::drivers::block::loop_drv::LoopVariant::V5,
        crate::machine::loop_rig::BackingKind::Prealloc,
        0,
    ));
    for t in Scenario::parse(text, "t.scn")
        .unwrap()
        .transitions
        .iter()
        .map(|(_, t)| t)
    {
        s.try_apply(t).unwrap();
    }
    assert!(s.settle(10_000).is_empty());
    assert_eq!(s.loop_outcome().unwrap().1, 1, "exactly one I/O failed");
    assert!(s.verify_devices(10_000).is_empty());
    assert!(s.kernel.fault_inject().armed().1.is_empty(), "consumed");
}

/// `fail_io` on the lower device of a stack: loop0's I/O to nullb0 fails, and loop0's bio ends
/// with the error (one failed I/O, data unchanged, the oracle clean).
#[test]
fn fail_io_on_the_lower_device_reaches_the_upper_bio() {
    for (backing, lower) in [("nullb", "nullb0"), ("loop", "loop1")] {
        let text = format!(
            "cpus 2\nloop v5 {backing}\nio 0 write 2 fill=1\nfail_io {lower}\nio 0 write 3 fill=2\nsettle\nexpect clean\n"
        );
        let r = run(&text);
        assert!(
            r.trace
                .contains(&format!("biosim: fail_io {lower}: one-shot I/O failure")),
            "{}",
            r.trace
        );
    }
}

/// `fail_alloc bio_alloc_bioset` arms the one-shot; it is listed as armed until an allocation
/// at that site takes it.
#[test]
fn fail_alloc_arms_the_site() {
    let s = Sim::new(SimConfig::default()).unwrap();
    s.try_apply(&Transition::FailAlloc {
        site: "bio_alloc_bioset",
    })
    .unwrap();
    assert_eq!(s.kernel.fault_inject().armed().0, vec!["bio_alloc_bioset"]);
}

/// `plug`/`unplug`: the writes between them (not contiguous: nothing merges) are held in the plug
/// (no request issued) and dispatched at `unplug` (`block_unplug` with both); a second `plug` and an `unplug` without a
/// plug are refused; a plug left open is finished by settle.
#[test]
fn plug_holds_requests_until_unplug() {
    let r = run("cpus 2\nloop v5 prealloc\nplug 0\nio 0 write 1 fill=1\nio 0 write 3 fill=2\nunplug 0\nsettle\nexpect clean\n");
    let t = &r.trace;
    let finish = t.find("   >>> blk_finish_plug() on CPU0").unwrap();
    assert!(!t[..finish].contains("block_rq_issue"), "{t}");
    assert!(t[..finish].contains("block_plug: [biosim/0]"), "{t}");
    assert!(t[finish..].contains("block_unplug: [biosim/0] 2"), "{t}");
    for (text, want) in [
        (
            "loop v5 prealloc\nplug 0\n plug 0\n",
            "t.scn:3:2: `plug 0`: CPU0's submitter already has a plug",
        ),
        (
            "loop v5 prealloc\nunplug 1\n",
            "t.scn:2:1: `unplug 1`: CPU1's submitter has no plug",
        ),
    ] {
        let RunError::Refused(e) = Scenario::parse(text, "t.scn").unwrap().run().unwrap_err()
        else {
            panic!("a refusal")
        };
        assert!(e.to_string().starts_with(want), "{e}");
    }
    let r = run("loop v5 prealloc\nplug 1\nio 1 write 1\nsettle\nexpect clean\n");
    assert!(
        r.trace
            .contains("   (settle: CPU1's plug is still open: blk_finish_plug())"),
        "{}",
        r.trace
    );
    assert!(
        r.trace.contains("block_unplug: [biosim/1] 1"),
        "{}",
        r.trace
    );
}

/// The submitter's plug is parked while it is off the CPU: a worker that runs there meanwhile
/// has no `current->plug`.
#[test]
fn a_parked_plug_is_not_the_workers() {
    let s = Sim::new(SimConfig::default()).unwrap();
    s.attach_loop(LoopSetup::new(
        bio_core::drivers::block::loop_drv::LoopVariant::V5,
        crate::machine::loop_rig::BackingKind::Prealloc,
        0,
    ));
    s.try_apply(&Transition::Plug { cpu: 0 }).unwrap();
    assert_eq!(s.open_plugs(), vec![0]);
    assert!(s
        .rt
        .cpu(CpuId(0))
        .unwrap()
        .task_state()
        .plug
        .borrow()
        .is_none());
    s.try_apply(&Transition::Unplug { cpu: 0 }).unwrap();
    assert!(s.open_plugs().is_empty());
}

/// Stacked backings: loop0 over nullb0 and over loop1 store data through the stack (the
/// read-back compares every written block), and the lower device's requests are in the trace.
#[test]
fn stacked_backings_read_back_through_the_stack() {
    for (backing, lower_rq) in [("nullb", "254,0 W"), ("loop", "7,1 W")] {
        let r = run(&format!(
            "cpus 2\nloop v5 {backing}\nio 0 write 1 fill=3\nio 1 write 9 fill=4\nio 0 discard 9\nio 1 write 1 fill=5\nsettle\nexpect clean\n"
        ));
        assert!(r.trace.contains(lower_rq), "{backing}: {}", r.trace);
        assert!(
            r.trace
                .contains("read every written block back through loop0"),
            "{}",
            r.trace
        );
    }
}

/// The run's seed seeds fault injection: with `fail_make_request` at 50% on loop0, the same
/// seed injects the same faults (identical trace and log), another seed other faults.
#[test]
fn the_seed_reproduces_the_injected_faults() {
    let go = |seed: u64| {
        let s = Sim::new(SimConfig {
            seed,
            ..SimConfig::default()
        })
        .unwrap();
        s.attach_loop(LoopSetup::new(
            bio_core::drivers::block::loop_drv::LoopVariant::V5,
            crate::machine::loop_rig::BackingKind::Prealloc,
            0,
        ));
        let fi = s.kernel.fault_inject();
        fi.set_make_it_fail("loop0", true);
        fi.set_fail_make_request(|a| {
            a.probability = 50;
            a.times = -1;
            a.verbose = 1;
        });
        for block in 0..16 {
            s.try_apply(&Transition::LoopIo {
                cpu: block % 2,
                op: crate::machine::loop_rig::LoopOp::Write,
                block,
                fill: 1,
            })
            .unwrap();
        }
        assert!(s.settle(10_000).is_empty());
        (
            s.trace(),
            s.kernel.fault_inject().log(),
            s.loop_outcome().unwrap().1,
        )
    };
    let (a, b) = (go(7), go(7));
    assert_eq!(a, b);
    assert!(a.2 > 0 && a.2 < 16, "some failed, some not: {}", a.2);
    assert!(
        a.0.contains("fault_inject: FAULT_INJECTION: forcing a failure."),
        "{}",
        a.0
    );
    let c = go(8);
    assert_eq!(a.1.len(), 2 * a.2, "two log lines per failure");
    assert_ne!((a.1, a.2), (c.1, c.2), "another seed, other faults");
}

/// Every scenario in docs/scenarios/detectors/ parses, runs and holds its expectations.
#[test]
fn the_detector_scenarios_hold() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/scenarios/detectors");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "scn") {
            let s = Scenario::load(&path).unwrap();
            assert!(!s.expect.is_empty(), "{}", path.display());
            let r = s.run().unwrap();
            assert!(
                r.failed_expectations.is_empty(),
                "{}: {:?}",
                path.display(),
                r.failed_expectations
            );
            n += 1;
        }
    }
    assert!(n >= 4, "{n}");
}
