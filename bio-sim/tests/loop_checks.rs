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
