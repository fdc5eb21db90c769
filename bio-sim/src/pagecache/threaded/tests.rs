//! The page cache on the threaded runtime: data integrity on every design and path (also under
//! a limit that forces reclaim), the oracle's checks after a threaded run, and the driver's own
//! settling before its final counts.

use super::*;
use crate::pagecache::dropbehind_oracle::{
    baseline_leaves_irq_completed, check_dontcache_run, no_dropbehind_survives_writeback,
};
use crate::pagecache::seed_bench::{all_designs, design_name, path_name};
use bio_core::mm::dontcache::{DontcacheDesign, WritebackPath};

const PATHS: [WritebackPath; 2] = [WritebackPath::Iomap, WritebackPath::BufferHead];

/// 64 KiB syscalls over `range` bytes.
fn small(
    design: DontcacheDesign,
    path: WritebackPath,
    workload: Workload,
    range: u64,
) -> DriverConfig {
    let mut c = DriverConfig::new(design, path, workload);
    c.io_bytes = 64 << 10;
    c.range_bytes = range;
    c
}

fn what(design: &DontcacheDesign, path: WritebackPath, dontcache: bool) -> String {
    format!(
        "{} {} dontcache={dontcache}",
        design_name(design),
        path_name(path)
    )
}

/// Write twice over 1 MiB, fsync, drop, read back: the bytes are the last pass's, in the cache's
/// reads and in null_blk's memory, on every design and path, with and without DONTCACHE.
#[test]
fn integrity_on_every_design_and_path() {
    for design in all_designs() {
        for path in PATHS {
            for dontcache in [false, true] {
                let mut c = small(design, path, Workload::Writes, 1 << 20);
                c.dontcache = dontcache;
                c.force_dontcache = true;
                let w = what(&design, path, dontcache);
                let r = integrity_run_threaded(c, NullBlkDevice::default())
                    .unwrap_or_else(|e| panic!("{w}: {e}"));
                assert_eq!(r.run.refused, None, "{w}");
                assert_eq!(r.run.corrupt_bytes, 0, "{w}: data read back differs");
                assert_eq!(r.run.ios, 2 * 16 + 16, "{w}: 2 write passes + 1 read pass");
                assert_eq!(r.run.bytes, 3 << 20, "{w}");
            }
        }
    }
}

/// Writes that cover a quarter of the range: the pages they did not write read back as the disk
/// held them (the pass-0 pattern), so the integrity check flags nothing it should not.
#[test]
fn integrity_of_a_partial_write_compares_the_unwritten_pages_too() {
    let design = DontcacheDesign::parse("v7").unwrap();
    for path in PATHS {
        let mut c = small(design, path, Workload::Writes, 1 << 20);
        c.max_ios = Some(4);
        let w = what(&design, path, false);
        let r = integrity_run_threaded(c, NullBlkDevice::default())
            .unwrap_or_else(|e| panic!("{w}: {e}"));
        assert_eq!(r.run.refused, None, "{w}");
        assert_eq!(r.run.corrupt_bytes, 0, "{w}: data read back differs");
        assert_eq!(r.run.ios, 4 + 16, "{w}: 4 writes + 1 read pass");
    }
}

/// 4 MiB written twice through a 1 MiB cache: reclaim evicts, the flusher writes (woken by
/// reclaim), the data survives. Catches a flusher that is never woken (bio-core's
/// `bug-flusher-never-woken`: the charge fails with ENOMEM).
#[test]
#[cfg_attr(
    feature = "bug-flusher-never-woken",
    should_panic(expected = "Some(ENOMEM)")
)]
fn integrity_under_a_limit_that_forces_reclaim() {
    for design in [
        DontcacheDesign::Baseline,
        DontcacheDesign::parse("v7").unwrap(),
    ] {
        for path in PATHS {
            let mut c = small(design, path, Workload::Writes, 4 << 20);
            c.limit_bytes = Some(1 << 20);
            let w = what(&design, path, false);
            let r = integrity_run_threaded(c, NullBlkDevice::default())
                .unwrap_or_else(|e| panic!("{w}: {e}"));
            assert_eq!(r.run.refused, None, "{w}: {:?}", r.run.stats);
            assert_eq!(r.run.corrupt_bytes, 0, "{w}: data read back differs");
            assert!(r.run.peak_cached <= 256, "{w}: peak {}", r.run.peak_cached);
            let s = &r.run.stats;
            assert!(s.reclaim_evicted > 0 && s.flusher_pages > 0, "{w}: {s:?}");
        }
    }
}

/// On cgroup v2 the writer is dirty-throttled by its 1 MiB memcg: `balance_dirty_pages()`'s
/// pauses are timed sleeps on the task's CPU thread until `jiffies` reaches the pause's end, and
/// the data survives. The pauses follow one another, so the run spans at least their jiffies
/// less one (the first may start just before a tick). Catches a pause that does not sleep (the
/// pauses would add up to more than the run) or one that never ends (the test would hang).
#[test]
fn on_cgroup_v2_the_writer_sleeps_its_pauses() {
    let v7 = DontcacheDesign::parse("v7").unwrap();
    for path in PATHS {
        let mut c = small(v7, path, Workload::Writes, 4 << 20);
        c.limit_bytes = Some(1 << 20);
        c.cgroup_v2 = true;
        let w = what(&v7, path, false);
        let r = integrity_run_threaded(c, NullBlkDevice::default())
            .unwrap_or_else(|e| panic!("{w}: {e}"));
        assert_eq!(r.run.corrupt_bytes, 0, "{w}: data read back differs");
        let s = &r.run.stats;
        assert!(s.dirty_throttled > 0, "{w}: {s:?}");
        let hz = u64::from(bio_core::KernelConfig::default().hz);
        let paused_ns = s.dirty_paused_jiffies.saturating_sub(1) * 1_000_000_000 / hz;
        assert!(
            r.wall_ns >= paused_ns,
            "{w}: {} ns run, {paused_ns} ns paused",
            r.wall_ns
        );
    }
}

/// Reads over a range four times the limit, prefilled: every byte checked, reclaim evicts
/// (normal) or DONTCACHE drops after the copy and the footprint stays small.
#[test]
fn reads_under_a_limit_are_verified() {
    let v7 = DontcacheDesign::parse("v7").unwrap();
    for dontcache in [false, true] {
        let mut c = small(v7, WritebackPath::Iomap, Workload::Reads, 4 << 20);
        c.limit_bytes = Some(1 << 20);
        c.max_ios = Some(128);
        c.dontcache = dontcache;
        let r = run_threaded(c, NullBlkDevice::default()).unwrap();
        let s = &r.run.stats;
        assert_eq!((r.run.corrupt_bytes, r.run.ios), (0, 128), "{s:?}");
        assert!(r.run.peak_cached <= 256, "{s:?}");
        if dontcache {
            assert!(
                s.dropbehind_invalidated_read > 0 && s.reclaim_evicted == 0,
                "{s:?}"
            );
        } else {
            assert!(s.reclaim_evicted > 0, "{s:?}");
        }
    }
}

/// 64 DONTCACHE writes of 64 KiB over 4 MiB: one pass, so no folio is written again while its
/// first writeback is in flight (such a folio is dirty at its completion and stays cached until
/// written again, as in the kernel; with a 2 MiB range a fast machine met that in 144 folios).
fn dontcache_writes(design: DontcacheDesign, path: WritebackPath) -> ThreadedRun {
    let mut c = small(design, path, Workload::Writes, 4 << 20);
    c.dontcache = true;
    c.force_dontcache = true;
    c.max_ios = Some(64);
    run_threaded(c, NullBlkDevice::default())
        .unwrap_or_else(|e| panic!("{}: {e}", what(&design, path, true)))
}

/// On every fixed design, after a threaded DONTCACHE write run has settled: every oracle check
/// passes, no folio is under writeback and none is cached (every one was dropbehind and its
/// writeback completed). Catches the driver counting before writeback completed
/// (`bug-pagecache-threaded-no-settle`).
#[test]
#[cfg_attr(
    feature = "bug-pagecache-threaded-no-settle",
    should_panic(expected = "writeback still in flight")
)]
fn fixed_designs_leave_nothing_after_threaded_writeback() {
    let mut fixed = 0;
    for design in all_designs() {
        for path in PATHS {
            if !design.is_fixed(path) {
                continue;
            }
            fixed += 1;
            let r = dontcache_writes(design, path);
            let w = what(&design, path, true);
            let s = &r.run.stats;
            // First: under the twin this is the check that fails, whatever the oracle's
            // checks below would say of counts taken too early.
            assert_eq!(
                s.nr_writeback, 0,
                "{w}: writeback still in flight at the count"
            );
            for (name, v) in check_dontcache_run(&design, path, &r.run) {
                assert_eq!(v, Ok(()), "{w}: {name}");
            }
            assert_eq!(r.run.final_cached, 0, "{w}: final footprint {s:?}");
            assert!(s.dropbehind_invalidated_write > 0, "{w}: {s:?}");
        }
    }
    assert!(fixed >= 9, "fixed design x path cases checked: {fixed}");
}

/// On `baseline` (forced), null_blk's softirq completions end writeback in atomic context and
/// `folio_end_dropbehind()` skips those folios: they stay, as the kernel leaves them; with
/// `irqmode=0` the same bios end in the submitter's task and nothing stays.
#[test]
fn baseline_leaves_the_softirq_completed_folios() {
    for path in PATHS {
        let r = dontcache_writes(DontcacheDesign::Baseline, path);
        let w = what(&DontcacheDesign::Baseline, path, true);
        assert_eq!(baseline_leaves_irq_completed(&r.run), Ok(()), "{w}");
        let e = no_dropbehind_survives_writeback(&r.run).unwrap_err();
        assert!(e.contains("survived their completed writeback"), "{w}: {e}");
        assert!(r.softirqs > 0, "{w}: completions came in BLOCK_SOFTIRQ");
    }
    let mut c = small(
        DontcacheDesign::Baseline,
        WritebackPath::Iomap,
        Workload::Writes,
        2 << 20,
    );
    c.dontcache = true;
    c.force_dontcache = true;
    c.max_ios = Some(64);
    let dev = NullBlkDevice {
        irqmode: NullIrqMode::None,
        ..NullBlkDevice::default()
    };
    let r = run_threaded(c, dev).unwrap();
    assert_eq!(
        (r.run.left_behind, r.run.stats.skipped_not_in_task),
        (0, 0),
        "irqmode=0 ends every bio in task context"
    );
}

/// Unusable runs are refused by name, before anything boots.
#[test]
fn bad_runs_are_refused() {
    let v7 = DontcacheDesign::parse("v7").unwrap();
    let mut c = small(v7, WritebackPath::Iomap, Workload::Writes, 1 << 20);
    c.io_bytes = 1000;
    let e = run_threaded(c, NullBlkDevice::default()).unwrap_err();
    assert!(e.to_string().contains("multiple of 4096"), "{e}");
    let c = small(v7, WritebackPath::Iomap, Workload::Writes, 1 << 20);
    let dev = NullBlkDevice {
        irqmode: NullIrqMode::Timer,
        ..NullBlkDevice::default()
    };
    let e = run_threaded(c, dev).unwrap_err();
    assert!(e.to_string().contains("irqmode=2"), "{e}");
}
