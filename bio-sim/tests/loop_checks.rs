//! The loop driver's NOWAIT-series checks: every cell of the matrix as expected, each check shown
//! to catch (on the version with the problem or on its twin) and to pass.

use bio_core::drivers::block::loop_drv::LoopVariant;
use bio_sim::checks::loop_checks::{
    loop_check, loop_matrix, render_loop, run_loop_check, twin_variant, LOOP_CHECKS,
};
use bio_sim::checks::Verdict;

#[test]
fn every_cell_of_the_loop_matrix_matches_its_expectation() {
    let rows = loop_matrix().unwrap();
    assert_eq!(rows.len(), LOOP_CHECKS.len());
    for r in &rows {
        assert!(
            r.mismatches().is_empty(),
            "{}: {:?}\n{}",
            r.check.id,
            r.mismatches(),
            render_loop(&rows)
        );
        // Every check catches somewhere: on a posted version or on its twin.
        let caught = r.cells.iter().any(|c| matches!(c.0, Verdict::Caught(_)))
            || matches!(r.twin, Some(Verdict::Caught(_)));
        assert!(caught, "{} never catches anything", r.check.id);
    }
}

#[test]
fn the_hint_turns_32_wasted_nowait_attempts_into_one() {
    let no_hint = run_loop_check("L1", LoopVariant::V5_NO_HINT, false)
        .unwrap()
        .stats;
    let hint = run_loop_check("L1", LoopVariant::V5, false).unwrap().stats;
    assert_eq!((no_hint.nowait_eagain, no_hint.hint_skipped), (32, 0));
    assert_eq!((hint.nowait_eagain, hint.hint_skipped), (1, 31));
    assert_eq!(no_hint.worker_cmds, 32);
    assert_eq!(hint.worker_cmds, 32);
}

#[test]
fn traces_show_the_nowait_attempt_the_hint_and_the_lockdep_splat() {
    let t = run_loop_check("L1", LoopVariant::V5, true).unwrap().trace;
    assert!(t.contains("loop0: IOCB_NOWAIT W 0 + 8 -> -EAGAIN"), "{t}");
    assert!(
        t.contains("lo_aio_try_nowait() false for W 296 + 8 (nr_blocking_writes=1)"),
        "{t}"
    );
    assert!(t.contains("loop0: worker: W 0 + 8 (blocking)"), "{t}");
    let r = run_loop_check("L2", LoopVariant::V4, true).unwrap();
    let Verdict::Caught(v) = r.verdict else {
        panic!("v4 asserts lo_mutex")
    };
    assert!(
        v[0].message.contains("lockdep_assert_held(&lo->lo_mutex)"),
        "{}",
        v[0].message
    );
    let twin = run_loop_check(
        "L4",
        twin_variant(loop_check("L4").unwrap()).unwrap(),
        false,
    )
    .unwrap();
    assert!(matches!(twin.verdict, Verdict::Caught(_)));
}

/// L7: the merged request's failed `bvec` allocation. The base completes it once with `-EIO`
/// (`block_rq_complete ... [-5]`, both bios `BLK_STS_IOERR`, nothing stranded); V5's `goto fail`
/// takes the stale `cmd->ref` to -1 and both bios are stranded; the fix (the twin) completes it.
#[test]
fn l7_shows_the_base_failing_the_merged_request_once_and_v5_never_completing_it() {
    let base = run_loop_check("L7", LoopVariant::BASE, true).unwrap();
    assert!(matches!(base.verdict, Verdict::Clean), "{:?}", base.verdict);
    assert!(
        base.trace
            .contains("block_bio_backmerge: 7,0 W 16 + 8 [biosim/0]"),
        "{}",
        base.trace
    );
    assert!(
        base.trace
            .contains("block_rq_complete: 7,0 W () 8 + 16 be,0,4 [-5]"),
        "{}",
        base.trace
    );
    let v5 = run_loop_check("L7", LoopVariant::V5, true).unwrap();
    let Verdict::Caught(v) = v5.verdict else {
        panic!("v5 strands the request")
    };
    assert!(
        v[0].message
            .contains("biosim: waiting in blk_mq_freeze_queue_wait: no event can make it true"),
        "{}",
        v[0].message
    );
    let stranded: Vec<&str> = v[1..].iter().map(|x| x.message.as_str()).collect();
    assert_eq!(
        stranded,
        [
            "bio#1 never completed (deferred 0 times; lost)",
            "bio#2 never completed (deferred 0 times; lost)"
        ]
    );
    assert!(
        v5.trace
            .contains("cmd->ref 0 -> -1, the request is never completed"),
        "{}",
        v5.trace
    );
    let twin =
        run_loop_check("L7", twin_variant(loop_check("L7").unwrap()).unwrap(), true).unwrap();
    assert!(matches!(twin.verdict, Verdict::Clean), "{:?}", twin.verdict);
    assert!(twin.trace.contains("[-5]"), "{}", twin.trace);
}
