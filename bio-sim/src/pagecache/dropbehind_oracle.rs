//! The oracle's checks on a run of the [driver](super::driver), after all writeback completed:
//! what `folio_end_writeback()` → `folio_end_dropbehind()` (mm/filemap.c) must have done on a
//! design that fixes the IRQ-completion gap, and what the kernel before the series does instead.

use super::driver::RunResult;
use bio_core::mm::dontcache::{DontcacheDesign, WritebackPath};

/// A check's verdict: `Err` says what was wrong, with the counts.
pub type Verdict = Result<(), String>;

/// On a fixed design (every one but `baseline`): no folio still marked `PG_dropbehind` is left
/// clean and idle in the cache once its writeback completed.
pub fn no_dropbehind_survives_writeback(run: &RunResult) -> Verdict {
    match run.left_behind {
        0 => Ok(()),
        n => Err(format!(
            "{n} dropbehind folios survived their completed writeback (folio_end_dropbehind() \
             skipped {} of them outside task context)",
            run.stats.skipped_not_in_task
        )),
    }
}

/// On a fixed design: `folio_end_dropbehind()` never ran in atomic context (it would have
/// skipped the folio, `!in_task()`), and no invalidation ran there.
pub fn end_dropbehind_in_task_only(run: &RunResult) -> Verdict {
    let s = &run.stats;
    if s.skipped_not_in_task == 0 && s.end_dropbehind_atomic == 0 {
        return Ok(());
    }
    Err(format!(
        "folio_end_dropbehind() skipped {} folios outside task context and ran {} times where \
         it may not sleep",
        s.skipped_not_in_task, s.end_dropbehind_atomic
    ))
}

/// On `baseline` with DONTCACHE forced: some folios are left behind, and no more than
/// `folio_end_dropbehind()` skipped in the interrupt (the kernel's silent skip); not exactly as
/// many, since a skipped folio can still leave the cache later, reclaimed or written again.
pub fn baseline_leaves_irq_completed(run: &RunResult) -> Verdict {
    let s = &run.stats;
    if run.left_behind > 0 && run.left_behind <= s.skipped_not_in_task {
        return Ok(());
    }
    Err(format!(
        "baseline left {} dropbehind folios after {} IRQ-context folio_end_dropbehind() skips; \
         expected some, all from those skips",
        run.left_behind, s.skipped_not_in_task
    ))
}

/// On RFC v3: every folio left behind is one `folio_end_dropbehind_irq()` took in and its work
/// did not invalidate (the full batch's skip, or a folio locked or redirtied when the work ran).
/// How many depends on how many folios one interrupt ends before the work runs.
pub fn v3_leaves_only_what_its_batch_skipped(run: &RunResult) -> Verdict {
    let s = &run.stats;
    let not_dropped = s.v3_handed.saturating_sub(s.v3_invalidated);
    if run.left_behind <= not_dropped {
        return Ok(());
    }
    Err(format!(
        "v3 left {} dropbehind folios; its batch took {} and invalidated {}",
        run.left_behind, s.v3_handed, s.v3_invalidated
    ))
}

/// Every check that applies to a DONTCACHE run on `design` x `path`: on a fixed design
/// ([`DontcacheDesign::is_fixed`]) nothing survives and nothing ends in atomic context; on the
/// others (`baseline`; `xfs-wq` on buffer_head, which XFS does not have) the IRQ-completed folios
/// stay, as the kernel leaves them; on `v3` only what its batch skipped stays. (Block-device
/// writes make dropbehind folios on both paths: `blkdev_write_iter()` always takes iomap's write
/// path, whose `iomap_get_folio()` passes `FGP_DONTCACHE`.)
pub fn check_dontcache_run(
    design: &DontcacheDesign,
    path: WritebackPath,
    run: &RunResult,
) -> Vec<(&'static str, Verdict)> {
    let mut out = vec![("data integrity", data_integrity(run))];
    out.extend(check_dropbehind(design, path, run));
    out
}

/// No byte the run read, or left on the device where it compared the device after its writes,
/// differs from what the workload wrote (or the device held before it).
pub fn data_integrity(run: &RunResult) -> Verdict {
    match run.corrupt_bytes {
        0 => Ok(()),
        n => Err(format!(
            "{n} bytes differ from the expected data (read back, or left on the device)"
        )),
    }
}

/// The verdicts as the benches print them, one `oracle: NAME: ok` or `oracle: NAME: FAILED:
/// WHY` line each.
pub fn verdict_lines(verdicts: &[(&'static str, Verdict)], out: &mut String) {
    use std::fmt::Write as _;
    for (name, v) in verdicts {
        let _ = match v {
            Ok(()) => writeln!(out, "oracle: {name}: ok"),
            Err(e) => writeln!(out, "oracle: {name}: FAILED: {e}"),
        };
    }
}

/// The checks of [`check_dontcache_run`] on what a DONTCACHE write run left and where its folios
/// ended, without the data's: for a run that wrote without reading back (the deterministic seed
/// bench; its integrity is `integrity_run`'s, in the tests).
pub fn check_dropbehind(
    design: &DontcacheDesign,
    path: WritebackPath,
    run: &RunResult,
) -> Vec<(&'static str, Verdict)> {
    let mut out = Vec::new();
    if fixed_in_run(design, path, run) {
        out.push((
            "no dropbehind folio survives writeback",
            no_dropbehind_survives_writeback(run),
        ));
        out.push((
            "folio_end_dropbehind in task context only",
            end_dropbehind_in_task_only(run),
        ));
    } else if *design == DontcacheDesign::V3 {
        out.push((
            "v3 leaves only what its batch skipped",
            v3_leaves_only_what_its_batch_skipped(run),
        ));
    } else {
        out.push((
            "IRQ-completed folios stay, as the kernel leaves them",
            baseline_leaves_irq_completed(run),
        ));
    }
    out
}

/// Every regular folio iomap merged into a `BIO_COMPLETE_IN_TASK` bio (patch 2/4, counted when
/// the ioend was built) went to the device and came back in a flagged bio, ended its writeback
/// in a run after that interrupt, and ended it in task context with the bio's deferred
/// `bi_end_io`: the count, the driver's view at submission and interrupt, and the completion
/// side agree. A device or stacking driver that drops the flag on the way, or a count of merges
/// that did not happen, fails it. (With no merge at all it holds trivially: whether a workload
/// must merge is its bench's check.)
pub fn merged_regular_end_with_their_bio(run: &RunResult) -> Verdict {
    let (s, w) = (&run.stats, &run.merged_wait);
    if w.seen_at_irq == s.merged_regular_folios
        && w.ended == w.seen_at_irq
        && s.merged_regular_ended_in_task == s.merged_regular_folios
    {
        return Ok(());
    }
    Err(format!(
        "iomap merged {} regular folios into flagged bios; the interrupts found {} of them in a flagged bio, {} ended their writeback after it, {} in task context",
        s.merged_regular_folios, w.seen_at_irq, w.ended, s.merged_regular_ended_in_task
    ))
}

/// [`DontcacheDesign::is_fixed`], for this run (`run` kept for callers that judge by it).
pub fn fixed_in_run(design: &DontcacheDesign, path: WritebackPath, _run: &RunResult) -> bool {
    design.is_fixed(path)
}
