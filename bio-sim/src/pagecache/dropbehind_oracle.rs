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
        "folio_end_dropbehind() ran in atomic context {} times (invalidations there: {})",
        s.skipped_not_in_task, s.end_dropbehind_atomic
    ))
}

/// On `baseline` with DONTCACHE forced: the folios whose writeback completed in the interrupt
/// are exactly the ones left behind (the kernel's silent skip), and there are some.
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

/// On buffer_head before patches 3-4/4: `blkdev_write_begin()` calls `block_write_begin()`,
/// which has no kiocb, so a forced DONTCACHE write makes ordinary folios: none is dropbehind,
/// `folio_end_dropbehind()` never has one to look at, and the written folios stay cached.
pub fn no_dropbehind_made(run: &RunResult) -> Verdict {
    let s = &run.stats;
    if s.end_dropbehind_calls == 0 && run.left_behind == 0 && run.final_cached > 0 {
        return Ok(());
    }
    Err(format!(
        "expected plain folios: {} folio_end_dropbehind() calls on dropbehind folios, {} left \
         dropbehind, {} cached",
        s.end_dropbehind_calls, run.left_behind, run.final_cached
    ))
}

/// Every check that applies to a DONTCACHE run on `design` x `path`: on a fixed design
/// ([`DontcacheDesign::is_fixed`]) nothing survives and nothing ends in atomic context; on the
/// others (`baseline`; `xfs-wq` on buffer_head, which XFS does not have) the IRQ-completed folios
/// stay, as the kernel leaves them.
pub fn check_dontcache_run(
    design: &DontcacheDesign,
    path: WritebackPath,
    run: &RunResult,
) -> Vec<(&'static str, Verdict)> {
    let integrity = if run.corrupt_bytes == 0 {
        Ok(())
    } else {
        Err(format!(
            "{} bytes read differ from the device",
            run.corrupt_bytes
        ))
    };
    let mut out = vec![("data integrity", integrity)];
    if fixed_in_run(design, path, run) {
        out.push((
            "no dropbehind folio survives writeback",
            no_dropbehind_survives_writeback(run),
        ));
        out.push((
            "folio_end_dropbehind in task context only",
            end_dropbehind_in_task_only(run),
        ));
    } else if path == WritebackPath::Iomap || design.block_write_begin_iocb() {
        out.push((
            "IRQ-completed folios stay, as the kernel leaves them",
            baseline_leaves_irq_completed(run),
        ));
    } else {
        out.push((
            "no dropbehind folio without block_write_begin_iocb()",
            no_dropbehind_made(run),
        ));
    }
    out
}

/// [`DontcacheDesign::is_fixed`], for this run: RFC v3 only fixes the gap with its
/// `folio_end_dropbehind_irq()` hook configured.
pub fn fixed_in_run(design: &DontcacheDesign, path: WritebackPath, run: &RunResult) -> bool {
    design.is_fixed(path) && (*design != DontcacheDesign::V3 || run.v3_hook)
}
