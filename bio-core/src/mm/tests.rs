//! The page cache driven end to end on the [`Rig`](super::testing::Rig): data integrity on every
//! design and path, the dropbehind outcome of each design, the two paths' flag decisions, and the
//! tracepoints. Each check names the broken version it catches; where that is cheap, a twin test
//! runs the broken configuration and shows the check fire.

use super::dontcache::{DontcacheDesign, DropbehindIrq, FolioRef, PageCacheConfig, WritebackPath};
use super::filemap::AddressSpace;
use super::filemap::{IocbFlags, PAGE_SIZE};
use super::testing::{Completion, Rig};
use crate::block::complete_in_task::Variant;
use crate::kernel::trace::tests::capture;
use crate::kernel::Cpu;
use crate::sync::{Mutex, UntrackedArc};

const DC: IocbFlags = IocbFlags::IOCB_DONTCACHE;
const NONE: IocbFlags = IocbFlags::NONE;

/// A byte pattern that differs per page and per offset, so a page read back from the wrong place
/// or a stale copy shows.
pub(super) fn pattern(pages: u64, seed: u8) -> Vec<u8> {
    (0..pages as usize * PAGE_SIZE)
        .map(|i| (i / PAGE_SIZE) as u8 ^ (i % 251) as u8 ^ seed)
        .collect()
}

pub(super) fn rig(design: DontcacheDesign, path: WritebackPath, limit: Option<u64>) -> Rig {
    Rig::with(design, path, |c| {
        let c = c.with_nr_pages(1024).with_force_dontcache();
        match limit {
            Some(l) => c.with_limit(l),
            None => c,
        }
    })
}

/// Write (in 48 KiB chunks and one unaligned piece), fsync, drop the cache, read back (in
/// 1 MiB-ish pieces), verify — through the cache and on the disk. Catches any path that loses or
/// misplaces data: a read bio filled into the wrong folio, a writeback bio with stale bytes, an
/// eviction of a dirty folio, a read-modify-write that skips the read.
pub(super) fn write_fsync_drop_read(r: &Rig, flags: IocbFlags, pages: u64, seed: u8) {
    let data = pattern(pages, seed);
    for chunk in data.chunks(12 * PAGE_SIZE).enumerate() {
        let pos = (chunk.0 * 12 * PAGE_SIZE) as u64;
        assert_eq!(r.pwrite(pos, chunk.1, flags), Ok(chunk.1.len()));
        r.settle();
    }
    // An unaligned overwrite in the middle (partial pages: read-modify-write).
    let mut expect = data.clone();
    let patch = vec![seed ^ 0xa5; 5000];
    let at = 3 * PAGE_SIZE + 100;
    expect[at..at + patch.len()].copy_from_slice(&patch);
    r.drop_caches();
    assert_eq!(r.pwrite(at as u64, &patch, flags), Ok(patch.len()));
    r.fsync();
    let s = r.mapping.stats();
    assert_eq!(
        (s.nr_dirty, s.nr_writeback),
        (0, 0),
        "fsync left dirty or writeback folios"
    );
    for i in 0..pages {
        let page = &expect[i as usize * PAGE_SIZE..][..PAGE_SIZE];
        assert_eq!(r.disk.page(i), page, "disk page {i}");
    }
    r.drop_caches();
    let mut back = Vec::new();
    let len = expect.len();
    let mut pos = 0;
    while pos < len {
        let n = (260 * PAGE_SIZE - 7).min(len - pos);
        back.extend(r.pread(pos as u64, n, flags).expect("read"));
        pos += n;
    }
    assert!(back == expect, "read back differs");
}

#[test]
fn data_survives_write_fsync_drop_read_on_every_design_and_path() {
    for design in DontcacheDesign::all() {
        for path in WritebackPath::ALL {
            for flags in [NONE, DC] {
                let r = rig(design, path, None);
                write_fsync_drop_read(&r, flags, 80, 3);
                assert!(
                    r.kernel.reports().is_empty(),
                    "{design}/{path}: {:?}",
                    r.kernel.reports().all()
                );
            }
        }
    }
}

/// Under a 24-page memcg limit the same run must reclaim: evict clean folios and mark dirty ones
/// `PG_reclaim` for the flusher, which writes them (normal writes), and never exceed the limit.
/// Catches a reclaim that frees dirty folios (data lost: the integrity check fails), one that
/// never runs (the counters stay 0, the peak exceeds the limit) and a charge that ignores the
/// limit.
#[test]
fn data_survives_reclaim_under_a_small_memcg_limit() {
    const LIMIT: u64 = 24;
    for design in DontcacheDesign::all() {
        for path in WritebackPath::ALL {
            for flags in [NONE, DC] {
                let r = rig(design, path, Some(LIMIT));
                write_fsync_drop_read(&r, flags, 200, 9);
                let s = r.mapping.stats();
                let what = format!("{design}/{path}/{flags:?}: {s:?}");
                assert!(s.peak_cached <= LIMIT, "{what}");
                assert!(s.memcg_usage <= LIMIT, "{what}");
                if flags == NONE {
                    assert!(s.reclaim_evicted > 0, "{what}");
                    assert!(s.reclaim_dirty_marked > 0, "{what}");
                    assert!(s.flusher_wakeups > 0, "{what}");
                }
                // The twin: without the limit the same run never reclaims, so the counters
                // above are not positive by construction.
                if design == DontcacheDesign::Baseline && flags == NONE {
                    let r = rig(design, path, None);
                    write_fsync_drop_read(&r, flags, 200, 9);
                    let s = r.mapping.stats();
                    assert_eq!((s.reclaim_runs, s.reclaim_evicted), (0, 0), "{s:?}");
                    assert!(s.peak_cached > LIMIT);
                }
                assert!(
                    r.kernel.reports().is_empty(),
                    "{what}: {:?}",
                    r.kernel.reports().all()
                );
            }
        }
    }
}

/// A DONTCACHE write of `pages`, its writeback completed by the disk in `ctx` and the deferred
/// work run: the folios left behind and the stats.
fn dontcache_write_outcome(
    design: DontcacheDesign,
    path: WritebackPath,
    ctx: Completion,
    pages: u64,
) -> (Vec<u64>, super::filemap::PageCacheStats) {
    let mut r = rig(design, path, None);
    r.completion = ctx;
    let data = pattern(pages, 1);
    assert_eq!(r.pwrite(0, &data, DC), Ok(data.len()));
    assert!(
        r.disk.in_flight() > 0,
        "the DONTCACHE kick started writeback"
    );
    r.settle();
    (r.mapping.dropbehind_left(), r.mapping.stats())
}

/// On every fixed design no dropbehind folio survives its writeback completed in hardirq, and
/// `folio_end_dropbehind()` never ran in atomic context. Catches a design whose completion stays
/// in the IRQ (the baseline below, finding 11's twin below) and one that defers to a context
/// that is still atomic.
#[test]
fn no_dropbehind_folio_survives_writeback_on_the_fixed_designs() {
    let fixed = [
        (DontcacheDesign::Bio(Variant::V7), WritebackPath::Iomap),
        (DontcacheDesign::Bio(Variant::V7), WritebackPath::BufferHead),
        (DontcacheDesign::Bio(Variant::V6), WritebackPath::Iomap),
        (DontcacheDesign::Bio(Variant::V6), WritebackPath::BufferHead),
        (
            DontcacheDesign::Bio(Variant::V6_REVIEW),
            WritebackPath::BufferHead,
        ),
        (DontcacheDesign::Bio(Variant::V5), WritebackPath::Iomap),
        (DontcacheDesign::XfsWorkqueue, WritebackPath::Iomap),
    ];
    for (design, path) in fixed {
        assert!(design.is_fixed(path));
        for ctx in [Completion::Hardirq, Completion::AtomicTask] {
            let (left, s) = dontcache_write_outcome(design, path, ctx, 40);
            let what = format!("{design}/{path}/{ctx:?}: {s:?}");
            assert_eq!(left, Vec::<u64>::new(), "{what}");
            assert_eq!(s.nr_cached, 0, "{what}");
            assert_eq!(s.dropbehind_invalidated_write, 40, "{what}");
            assert_eq!(s.end_dropbehind_atomic, 0, "{what}");
            assert_eq!(s.end_dropbehind_calls, 40, "{what}");
        }
    }
}

/// The twins: the baseline (forced DONTCACHE) and finding 11's regression (v7 without patch 2/4's
/// flag) leave every IRQ-completed folio cached, and the checks above see it.
#[test]
fn the_baseline_and_the_unflagged_twin_leave_irq_completed_folios_cached() {
    let twin = DontcacheDesign::Bio(Variant {
        fs_flag: false,
        ..Variant::V7
    });
    for design in [DontcacheDesign::Baseline, twin] {
        for path in WritebackPath::ALL {
            assert!(!design.is_fixed(path));
            let (left, s) = dontcache_write_outcome(design, path, Completion::Hardirq, 40);
            assert_eq!(s.nr_cached, 40, "{design}/{path}: every folio stays");
            assert_eq!(s.dropbehind_invalidated, 0);
            assert_eq!(left, (0..40).collect::<Vec<_>>(), "{design}/{path}");
            assert_eq!(s.skipped_not_in_task, 40, "{design}/{path}");
            assert_eq!(
                s.end_dropbehind_atomic, 40,
                "{design}/{path}: the atomic-context count fires"
            );
        }
    }
    // XFS's workqueue does nothing for the buffer_head path (XFS has none): the write still made
    // dropbehind folios (iomap_get_folio(FGP_DONTCACHE)), and the IRQ completion leaves them all.
    let (left, s) = dontcache_write_outcome(
        DontcacheDesign::XfsWorkqueue,
        WritebackPath::BufferHead,
        Completion::Hardirq,
        8,
    );
    assert_eq!(s.nr_cached, 8);
    assert_eq!(left, (0..8).collect::<Vec<_>>());
    assert_eq!(s.skipped_not_in_task, 8);
    // Completed in atomic task context, the baseline's in_task() test passes: the folios go, but
    // folio_end_dropbehind() ran where it may not sleep, and the atomic count says so.
    let (left, s) = dontcache_write_outcome(
        DontcacheDesign::Baseline,
        WritebackPath::Iomap,
        Completion::AtomicTask,
        8,
    );
    assert!(left.is_empty());
    assert_eq!(s.end_dropbehind_atomic, 8);
}

/// The buffer_head path with `->read_folio()` (no readahead): a DONTCACHE read of dropbehind folios
/// goes through `submit_bh_wbc()`. v6 as posted flags it (the read completion is deferred to the
/// worker); the gated variants never do. Catches a gate that is missing (v7 deferring reads) and
/// one applied where it was not posted (v6 not deferring).
#[test]
fn buffer_head_reads_are_deferred_only_on_v6_as_posted() {
    for (variant, deferred) in [
        (Variant::V6, true),
        (Variant::V5, true),
        (Variant::V6_REVIEW, false),
        (Variant::V7, false),
    ] {
        let r = Rig::with(
            DontcacheDesign::Bio(variant),
            WritebackPath::BufferHead,
            |c| c.with_nr_pages(64).with_ra_pages(0),
        );
        let data = pattern(16, 7);
        r.pwrite(0, &data, NONE).unwrap();
        r.fsync();
        r.drop_caches();
        assert_eq!(r.pread(0, data.len(), DC).unwrap(), data, "{variant}");
        let s = r.mapping.stats();
        let n = if deferred { 16 } else { 0 };
        assert_eq!(s.read_bios_flagged, n, "{variant}: {s:?}");
        assert_eq!(s.reads_ended_in_task, n, "{variant}: {s:?}");
        assert_eq!(s.reads_ended_in_irq, 16 - n, "{variant}: {s:?}");
        assert_eq!(
            s.nr_cached, 0,
            "{variant}: the reader dropped them after the copy"
        );
        assert_eq!(s.dropbehind_invalidated_read, 16);
    }
}

/// Readahead reads (mpage, iomap) are never flagged, on any variant.
#[test]
fn readahead_reads_are_never_flagged() {
    for path in WritebackPath::ALL {
        let r = rig(DontcacheDesign::Bio(Variant::V6), path, None);
        r.pwrite(0, &pattern(64, 2), NONE).unwrap();
        r.fsync();
        r.drop_caches();
        r.pread(0, 64 * PAGE_SIZE, DC).unwrap();
        let s = r.mapping.stats();
        assert_eq!(
            (s.read_bios_flagged, s.reads_ended_in_task),
            (0, 0),
            "{path}: {s:?}"
        );
        assert!(s.readahead_pages >= 64, "{path}: {s:?}");
    }
}

/// Regular dirty folios 0..8 (pass 1), then dropbehind folios 8..16 written with `RWF_DONTCACHE`
/// (pass 2) and written again (pass 3) while the first write's kick has them under writeback:
/// dirty again, skipped by the second kick (`WB_SYNC_NONE`), still under writeback.
fn regular_beside_redirtied_dropbehind(r: &Rig) {
    r.pwrite(0, &pattern(8, 1), NONE).unwrap();
    r.pwrite(8 * PAGE_SIZE as u64, &pattern(8, 2), DC).unwrap();
    r.pwrite(8 * PAGE_SIZE as u64, &pattern(8, 3), DC).unwrap();
}

/// Regular dirty folios 0..8 and redirtied dropbehind folios 8..16 written back together (fsync).
/// Returns the fsync's bios as (pages, flagged), the stats after completion and the indices
/// still cached.
fn merged_writeback(
    design: DontcacheDesign,
) -> (Vec<(u64, bool)>, super::filemap::PageCacheStats, Vec<u64>) {
    use crate::block::BioFlag;
    let r = rig(design, WritebackPath::Iomap, None);
    regular_beside_redirtied_dropbehind(&r);
    r.settle();
    let cx = r.task();
    let p = r.mapping.fsync(&cx);
    let shape = p
        .submit
        .iter()
        .map(|b| (b.sectors() / 8, b.flagged(BioFlag::CompleteInTask)))
        .collect();
    r.disk.submit(p.submit);
    r.settle();
    r.fsync();
    let cached = (0..16).filter(|&i| r.mapping.folio(i).is_some()).collect();
    (shape, r.mapping.stats(), cached)
}

/// `fsync()`'s `WB_SYNC_ALL` pass sleeps on a dirty folio still under writeback in the middle of
/// the pass (`folio_prepare_writeback()` → `folio_wait_writeback()`): on iomap the ioend built
/// before the sleep stays open, nothing submitted, and the folios after it join it (one bio of
/// 16, flagged, the 8 regular folios merged); on buffer_head the 8 regular folios' bios went out
/// before the sleep (the plug is flushed when the task sleeps). Catches a pass that writes
/// around a folio under writeback (two ioends on iomap, as the model did before).
#[test]
fn fsync_sleeps_inside_its_pass_with_the_ioend_open() {
    use super::filemap::Blocked;
    use crate::block::BioFlag;
    for path in WritebackPath::ALL {
        let r = rig(DontcacheDesign::Bio(Variant::V7), path, None);
        regular_beside_redirtied_dropbehind(&r);
        let cx = r.task();
        let p = r.mapping.fsync(&cx);
        assert!(
            matches!(p.blocked, Some(Blocked::Writeback(8))),
            "{path}: asleep on folio 8: {:?}",
            p.blocked
        );
        assert!(
            (0..8).all(|i| r.mapping.folio(i).is_some_and(|f| f.writeback && !f.dirty)),
            "{path}: the pass started the regular folios' writeback before it slept"
        );
        let shape = |bios: &[Box<crate::block::Bio>]| -> Vec<(u64, bool)> {
            bios.iter()
                .map(|b| (b.sectors() / 8, b.flagged(BioFlag::CompleteInTask)))
                .collect()
        };
        match path {
            WritebackPath::Iomap => assert!(p.submit.is_empty(), "iomap: the ioend is open"),
            WritebackPath::BufferHead => {
                assert_eq!(shape(&p.submit), vec![(1, false); 8], "buffer_head: sent")
            }
        }
        r.disk.submit(p.submit);
        // Called again before the folio's writeback ended: still asleep on it, nothing more sent.
        let again = r.mapping.fsync(&cx);
        assert!(
            again.submit.is_empty() && matches!(again.blocked, Some(Blocked::Writeback(8))),
            "{path}: still asleep on folio 8"
        );
        r.settle();
        let p = r.mapping.fsync(&cx);
        let want = match path {
            WritebackPath::Iomap => vec![(16, true)],
            WritebackPath::BufferHead => vec![(1, true); 8],
        };
        assert_eq!(shape(&p.submit), want, "{path}: after the wait");
        r.disk.submit(p.submit);
        r.settle();
        r.fsync();
        let merged = if path == WritebackPath::Iomap { 8 } else { 0 };
        assert_eq!(r.mapping.stats().merged_regular_folios, merged, "{path}");
        r.drop_caches();
        assert_eq!(
            r.pread(0, 16 * PAGE_SIZE, NONE).unwrap(),
            [pattern(8, 1), pattern(8, 3)].concat(),
            "{path}"
        );
    }
}

/// A range's sync writes its own pages and no others, a one-byte range included
/// (`filemap_write_and_wait_range()` over bytes `start..=end`).
#[test]
fn a_range_sync_writes_only_the_pages_of_its_range() {
    use crate::block::Bio;
    let r = rig(
        DontcacheDesign::Bio(Variant::V7),
        WritebackPath::Iomap,
        None,
    );
    r.pwrite(0, &pattern(8, 1), NONE).unwrap();
    let cx = r.task();
    let pages = |bios: &[Box<Bio>]| bios.iter().map(|b| b.sectors() / 8).sum::<u64>();
    let p = r
        .mapping
        .filemap_write_and_wait_range(&cx, 0, 4 * PAGE_SIZE as u64 - 1);
    assert_eq!(pages(&p.submit), 4, "pages 0..4");
    let dirty = |i| r.mapping.folio(i).is_some_and(|f| f.dirty);
    assert!((0..4).all(|i| !dirty(i)) && (4..8).all(dirty));
    r.disk.submit(p.submit);
    r.settle();
    let at = 5 * PAGE_SIZE as u64 + 7;
    let p = r.mapping.filemap_write_and_wait_range(&cx, at, at);
    assert_eq!(pages(&p.submit), 1, "one byte: its page");
    assert!(!dirty(5) && dirty(4) && dirty(6));
    r.disk.submit(p.submit);
    r.settle();
}

/// The model's departure (one pass per mapping): a `WB_SYNC_ALL` call for another range while a
/// pass sleeps sends out what that pass held first, so the held folios are never lost or stuck
/// under writeback with no bio.
#[test]
fn another_ranges_sync_sends_out_a_sleeping_passs_ioend() {
    let r = rig(
        DontcacheDesign::Bio(Variant::V7),
        WritebackPath::Iomap,
        None,
    );
    regular_beside_redirtied_dropbehind(&r);
    r.pwrite(32 * PAGE_SIZE as u64, &pattern(4, 4), NONE)
        .unwrap();
    let cx = r.task();
    let p = r
        .mapping
        .filemap_write_and_wait_range(&cx, 0, 16 * PAGE_SIZE as u64 - 1);
    assert!(p.submit.is_empty() && p.blocked.is_some());
    let end = 36 * PAGE_SIZE as u64 - 1;
    let p = r
        .mapping
        .filemap_write_and_wait_range(&cx, 32 * PAGE_SIZE as u64, end);
    let sectors: Vec<u64> = p.submit.iter().map(|b| b.sectors() / 8).collect();
    assert_eq!(sectors, [8, 4], "the held ioend, then the new range's");
    r.disk.submit(p.submit);
    r.settle();
    r.fsync();
    r.drop_caches();
    assert_eq!(
        r.pread(0, 16 * PAGE_SIZE, NONE).unwrap(),
        [pattern(8, 1), pattern(8, 3)].concat()
    );
}

/// iomap after patch 2/4 merges regular folios into the dropbehind folios' flagged bio and defers
/// them with it (counted); XFS's `IOMAP_IOEND_DONTCACHE` NOMERGE rule never merges them. Catches
/// a series iomap that keeps the NOMERGE flag (no merging, count 0) and an XFS that merges.
#[test]
fn iomap_defers_merged_regular_writes_on_bio_designs_and_xfs_never_merges_them() {
    for v in Variant::ALL {
        let (shape, s, cached) = merged_writeback(DontcacheDesign::Bio(v));
        assert_eq!(shape, [(16, true)], "{v}: one ioend, flagged");
        assert_eq!(s.merged_regular_folios, 8, "{v}");
        assert_eq!(
            s.merged_regular_ended_in_task, 8,
            "{v}: deferred from the IRQ with the bio"
        );
        assert_eq!(
            cached,
            (0..8).collect::<Vec<_>>(),
            "{v}: the 8 regular folios kept, the 8 dropbehind ones dropped"
        );
    }
    for design in [
        DontcacheDesign::XfsWorkqueue,
        DontcacheDesign::Baseline,
        DontcacheDesign::V3,
    ] {
        let (shape, s, _) = merged_writeback(design);
        assert_eq!(shape, [(8, false), (8, false)], "{design}: two ioends");
        assert_eq!(s.merged_regular_folios, 0, "{design}");
        assert_eq!(s.merged_regular_ended_in_task, 0, "{design}");
        // XFS: the two DONTCACHE ioends on its workqueue, the regular one in the IRQ.
        let on_wq = if design == DontcacheDesign::XfsWorkqueue {
            2
        } else {
            0
        };
        assert_eq!(
            (s.writeback_ended_in_task, s.writeback_ended_in_irq),
            (on_wq, 3 - on_wq),
            "{design}"
        );
        assert_eq!(s.wq_ioends, on_wq, "{design}");
    }
}

/// XFS's completion runs `xfs_end_io` on the `xfs-conv` workqueue (visible in the workqueue
/// tracepoints), and the filemap tracepoints print 6.18's format.
#[test]
fn xfs_completion_and_filemap_events_show_in_the_trace() {
    let events = capture(|| {
        let _ = dontcache_write_outcome(
            DontcacheDesign::XfsWorkqueue,
            WritebackPath::Iomap,
            Completion::Hardirq,
            2,
        );
    });
    let msgs: Vec<&str> = events.iter().map(|e| e.message.as_str()).collect();
    assert!(
        msgs.iter().any(|m| m.starts_with("workqueue_queue_work:")
            && m.contains("function=xfs_end_io workqueue=xfs-conv")),
        "{msgs:#?}"
    );
    assert!(
        msgs.contains(
            &"mm_filemap_add_to_page_cache: dev 7:0 ino 700000 pfn=0x100000 ofs=0 order=0"
        ),
        "{msgs:#?}"
    );
    assert!(
        msgs.contains(
            &"mm_filemap_delete_from_page_cache: dev 7:0 ino 700000 pfn=0x100001 ofs=4096 order=0"
        ),
        "{msgs:#?}"
    );
    let adds = events
        .iter()
        .filter(|e| e.tracepoint == "mm_filemap_add_to_page_cache")
        .count();
    let dels = events
        .iter()
        .filter(|e| e.tracepoint == "mm_filemap_delete_from_page_cache")
        .count();
    assert_eq!((adds, dels), (2, 2));
    let del = events
        .iter()
        .find(|e| e.tracepoint == "mm_filemap_delete_from_page_cache")
        .unwrap();
    assert!(
        del.comm
            .as_deref()
            .is_some_and(|c| c.starts_with("kworker/1")),
        "{del:?}: deleted in the worker on the IRQ's CPU"
    );
}

/// A file model with holes (ext4 and XFS alike complete unwritten-extent ioends on a workqueue):
/// on the baseline, DONTCACHE writes into holes are dropped and overwrites are kept — what the
/// live ext4 shows (0 of 65,536 vs all). Catches unwritten ioends completed in the IRQ (holes kept
/// too) and overwrites sent to the workqueue (overwrites dropped too).
#[test]
fn holes_are_dropped_and_overwrites_kept_on_the_baseline() {
    let r = Rig::with(DontcacheDesign::Baseline, WritebackPath::Iomap, |c| {
        c.with_nr_pages(256).with_unwritten().with_force_dontcache()
    });
    r.pwrite(0, &pattern(32, 1), DC).unwrap();
    r.settle();
    let s = r.mapping.stats();
    assert_eq!(
        (s.nr_cached, s.unwritten_ioends > 0, s.wq_ioends > 0),
        (0, true, true),
        "{s:?}"
    );
    r.pwrite(0, &pattern(32, 2), DC).unwrap();
    r.settle();
    assert_eq!(
        r.mapping.dropbehind_left().len(),
        32,
        "overwrites completed in the IRQ stay"
    );
    // Reading a hole never touches the disk: zeroes, no read bio.
    let before = r.mapping.stats().read_bios;
    assert_eq!(
        r.pread(100 * PAGE_SIZE as u64, PAGE_SIZE, NONE).unwrap(),
        vec![0; PAGE_SIZE]
    );
    assert_eq!(r.mapping.stats().read_bios, before);
}

/// A stand-in for RFC v3's batch: keeps the references, as `folio_end_dropbehind_irq()` does.
#[derive(Default)]
struct KeepRefs(Mutex<Vec<FolioRef>>);

impl DropbehindIrq for KeepRefs {
    fn folio_end_dropbehind_irq(&self, folio: FolioRef, cx: &Cpu) {
        assert!(!cx.in_task(), "only IRQ completions are handed over");
        self.0.lock().push(folio);
    }
}

/// The V3 seam: IRQ completions hand the folio over with a reference (reclaim skips it), and
/// [`FolioRef::end_dropbehind`] in task context drops it. Catches a hook called in task context,
/// a reference reclaim ignores, and a FolioRef that leaks its reference.
#[test]
fn v3_hook_gets_irq_completions_with_a_reference_reclaim_respects() {
    let hook = UntrackedArc::new(KeepRefs::default());
    let r = Rig::with(DontcacheDesign::V3, WritebackPath::BufferHead, |c| {
        c.with_nr_pages(64)
            .with_dropbehind_irq(hook.clone())
            .with_limit(8)
    });
    r.pwrite(0, &pattern(4, 1), DC).unwrap();
    r.settle();
    let s = r.mapping.stats();
    assert_eq!(
        (s.v3_handed, s.nr_cached, s.end_dropbehind_calls),
        (4, 4, 0),
        "{s:?}"
    );
    // Reclaim under the limit cannot take the referenced folios: 4 more fit, then none.
    r.pwrite(8 * PAGE_SIZE as u64, &pattern(4, 2), NONE)
        .unwrap();
    r.fsync();
    let cx = r.task();
    let p = r
        .mapping
        .generic_perform_write(&cx, 20 * PAGE_SIZE as u64, &pattern(1, 3), NONE)
        .unwrap();
    assert_eq!(
        p.written, PAGE_SIZE,
        "a clean regular folio was evicted for it"
    );
    assert!(
        r.mapping.stats().reclaim_skipped_busy >= 4,
        "{:?}",
        r.mapping.stats()
    );
    assert!(
        (0..4).all(|i| r.mapping.folio(i).is_some()),
        "the referenced folios stay"
    );
    let mut refs: Vec<FolioRef> = std::mem::take(&mut *hook.0.lock());
    // A broken v3 draining its batch from the IRQ: invalidated, but counted as atomic.
    let first = refs.remove(0);
    assert!(cx.with_hardirq(|cx| first.end_dropbehind(cx)));
    assert_eq!(r.mapping.stats().end_dropbehind_atomic, 1);
    for f in refs {
        assert!(f.end_dropbehind(&cx));
    }
    assert_eq!(r.mapping.stats().end_dropbehind_atomic, 1);
    let s = r.mapping.stats();
    assert_eq!(
        (s.v3_invalidated, s.dropbehind_invalidated_write),
        (4, 4),
        "{s:?}"
    );
    assert!((0..4).all(|i| r.mapping.folio(i).is_none()));
    r.disk.submit(p.submit);
    r.settle();
}

/// The mapping and a folio reference cross threads (a threaded runtime, RFC v3's per-CPU batch).
#[test]
fn the_mapping_is_send_and_sync_and_a_folio_ref_is_send() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<super::filemap::AddressSpace>();
    send::<FolioRef>();
}

/// `since()` is the work between two snapshots; the gauges are the later snapshot's. Catches a
/// delta that subtracts a gauge (the footprint would read 0) or forgets a counter.
#[test]
fn stats_since_subtracts_counters_and_keeps_gauges() {
    let r = rig(
        DontcacheDesign::Bio(Variant::V7),
        WritebackPath::Iomap,
        None,
    );
    r.pwrite(0, &pattern(4, 1), NONE).unwrap();
    let before = r.mapping.stats();
    r.pwrite(4 * PAGE_SIZE as u64, &pattern(2, 1), NONE)
        .unwrap();
    let d = r.mapping.stats().since(&before);
    assert_eq!((d.folios_added, d.copied_from_user_pages), (2, 2));
    assert_eq!((d.nr_cached, d.nr_dirty, d.peak_cached), (6, 6, 6));
    let zero = r.mapping.stats().since(&r.mapping.stats());
    assert_eq!(
        zero.folios_added + zero.copied_from_user_bytes + zero.writeback_pages,
        0
    );
    assert_eq!(zero.nr_cached, 6);
}

/// A failed readahead is retried with `->read_folio()`; a failed `->read_folio()` is the reader's
/// `EIO`, once, and the next read succeeds. Catches a readahead error returned as `EIO` (the
/// kernel retries), an error that never clears (`EIO` forever) and one that is swallowed.
#[test]
fn read_errors_are_retried_once_then_eio() {
    for path in WritebackPath::ALL {
        let r = rig(DontcacheDesign::Bio(Variant::V7), path, None);
        let data = pattern(4, 5);
        r.pwrite(0, &data, NONE).unwrap();
        r.fsync();
        r.drop_caches();
        r.disk.fail_next(1); // the readahead bio
        assert_eq!(
            r.pread(0, data.len(), NONE).unwrap(),
            data,
            "{path}: retried"
        );
        r.drop_caches();
        r.disk.fail_next(2); // the readahead bio and the retry
        assert_eq!(
            r.pread(0, data.len(), NONE),
            Err(crate::errno::Errno::EIO),
            "{path}"
        );
        assert_eq!(
            r.pread(0, data.len(), NONE).unwrap(),
            data,
            "{path}: the error is spent"
        );
        assert!(r.mapping.stats().read_errors >= 3);
    }
}

/// A failed writeback bio is `fsync`'s `EIO`, reported once (`AS_EIO`). Catches a swallowed
/// writeback error and one reported forever.
#[test]
fn a_failed_writeback_is_fsyncs_eio_once() {
    for path in WritebackPath::ALL {
        let r = rig(DontcacheDesign::Bio(Variant::V7), path, None);
        r.pwrite(0, &pattern(2, 1), NONE).unwrap();
        r.disk.fail_next(1);
        assert_eq!(r.try_fsync(), Err(crate::errno::Errno::EIO), "{path}");
        assert_eq!(r.try_fsync(), Ok(()), "{path}");
        assert_eq!(r.mapping.stats().writeback_errors, 1);
    }
}

/// Found by `mixed_ops`: a readahead window larger than the memcg limit over unwritten blocks
/// (zero-filled at once, so clean and unlocked) used to let the window's own later charges
/// reclaim its first folios, and the read waited on a folio that was gone, forever. The readahead
/// control's references keep them (as `readahead_control`'s folio references do).
#[test]
fn a_readahead_window_over_the_limit_keeps_its_own_folios() {
    let r = Rig::with(DontcacheDesign::Baseline, WritebackPath::Iomap, |c| {
        c.with_nr_pages(48).with_unwritten().with_limit(6)
    });
    assert_eq!(r.pread(0, 8193, NONE).unwrap(), vec![0; 8193]);
    assert!(r.mapping.stats().nr_cached <= 6);
}

mod mixed_ops {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// pwrite of `len` bytes at byte `pos`.
        Write {
            pos: u64,
            len: usize,
            dc: bool,
            seed: u8,
        },
        /// pread of `len` bytes at byte `pos`, checked against the shadow.
        Read {
            pos: u64,
            len: usize,
            dc: bool,
        },
        /// Complete some bios in flight and run the deferred work.
        Complete(usize),
        Fsync,
        Drop,
    }

    const PAGES: u64 = 48;

    fn op() -> impl Strategy<Value = Op> {
        let bytes = PAGES * PAGE_SIZE as u64;
        prop_oneof![
            4 => (0..bytes, 1..6 * PAGE_SIZE, any::<bool>(), any::<u8>())
                .prop_map(|(pos, len, dc, seed)| Op::Write { pos, len, dc, seed }),
            4 => (0..bytes, 1..20 * PAGE_SIZE, any::<bool>())
                .prop_map(|(pos, len, dc)| Op::Read { pos, len, dc }),
            2 => (0..6usize).prop_map(Op::Complete),
            1 => Just(Op::Fsync),
            1 => Just(Op::Drop),
        ]
    }

    fn design() -> impl Strategy<Value = DontcacheDesign> {
        prop_oneof![
            Just(DontcacheDesign::Baseline),
            Just(DontcacheDesign::XfsWorkqueue),
            Just(DontcacheDesign::Bio(Variant::V7)),
            Just(DontcacheDesign::Bio(Variant::V6)),
            Just(DontcacheDesign::Bio(Variant::V6_REVIEW)),
            Just(DontcacheDesign::V3),
        ]
    }

    fn completion() -> impl Strategy<Value = Completion> {
        prop_oneof![
            Just(Completion::Hardirq),
            Just(Completion::AtomicTask),
            Just(Completion::Task),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Any mix of buffered reads and writes, DONTCACHE or not, with completions interleaved
        /// anywhere, under a memcg limit or none, on every path: every read returns what the
        /// writes before it left (a shadow copy), the disk holds it after fsync, and the memcg
        /// limit holds. Catches lost or stale data from any race between writes, writeback
        /// completion, dropbehind invalidation, readahead and reclaim.
        #[test]
        fn reads_see_the_writes_before_them(
            design in design(),
            bh in any::<bool>(),
            limit in prop::option::of(6u64..40),
            holes in any::<bool>(),
            ctx in completion(),
            ops in prop::collection::vec(op(), 1..40),
        ) {
            let path = if bh { WritebackPath::BufferHead } else { WritebackPath::Iomap };
            let mut r = Rig::with(design, path, |c| {
                let c = c.with_nr_pages(PAGES).with_force_dontcache();
                let c = if holes { c.with_unwritten() } else { c };
                match limit { Some(l) => c.with_limit(l), None => c }
            });
            r.completion = ctx;
            let size = (PAGES * PAGE_SIZE as u64) as usize;
            let mut shadow = vec![0u8; size];
            for op in ops {
                match op {
                    Op::Write { pos, len, dc, seed } => {
                        let len = len.min(size - pos as usize);
                        let data: Vec<u8> = (0..len).map(|i| seed ^ (i % 253) as u8).collect();
                        let flags = if dc { DC } else { NONE };
                        prop_assert_eq!(r.pwrite(pos, &data, flags), Ok(len));
                        shadow[pos as usize..pos as usize + len].copy_from_slice(&data);
                    }
                    Op::Read { pos, len, dc } => {
                        let flags = if dc { DC } else { NONE };
                        let got = r.pread(pos, len, flags).unwrap();
                        let end = (pos as usize + len).min(size);
                        prop_assert!(got == shadow[pos as usize..end], "read at {} of {}", pos, len);
                    }
                    Op::Complete(n) => r.settle_some(n),
                    Op::Fsync => r.fsync(),
                    Op::Drop => {
                        r.drop_caches();
                    }
                }
                let s = r.mapping.stats();
                if let Some(l) = limit {
                    prop_assert!(s.memcg_usage <= l && s.nr_cached <= l, "{:?}", s);
                }
            }
            r.fsync();
            for i in 0..PAGES {
                let page = &shadow[i as usize * PAGE_SIZE..][..PAGE_SIZE];
                prop_assert!(r.disk.page(i) == page, "disk page {}", i);
            }
            prop_assert!(r.kernel.reports().is_empty(), "{:?}", r.kernel.reports().all());
        }
    }
}

/// RFC v3 wired for real (the batch [`AddressSpace::new`] sets up): on buffer_head, one bio per
/// folio, each ended in its own hardirq with the work run after it, every dropbehind folio is
/// invalidated by `dropbehind_work_fn()` in task context.
#[test]
fn v3_on_buffer_head_one_bio_per_irq_leaves_nothing() {
    let r = rig(DontcacheDesign::V3, WritebackPath::BufferHead, None);
    assert!(
        r.mapping.config().dropbehind_irq.is_some(),
        "wired by new()"
    );
    let data = pattern(40, 7);
    assert_eq!(r.pwrite(0, &data, DC), Ok(data.len()));
    for _ in 0..1000 {
        if r.disk.in_flight() == 0 {
            break;
        }
        r.settle_some(1);
    }
    let (left, s) = (r.mapping.dropbehind_left(), r.mapping.stats());
    let c = r.mapping.v3_counts().expect("a V3 batch");
    assert_eq!(left, Vec::<u64>::new(), "{s:?} {c:?}");
    assert_eq!((s.nr_cached, s.v3_handed, s.v3_invalidated), (0, 40, 40));
    assert_eq!((c.added, c.skipped_full, c.ended_by_work), (40, 0, 40));
    assert_eq!(
        s.end_dropbehind_atomic, 0,
        "the work runs where it may sleep"
    );
    assert_eq!(r.disk.page(39), data[39 * PAGE_SIZE..].to_vec());
}

/// RFC v3 on iomap: one ioend's bio of 64 folios ended in one hardirq. The per-CPU batch holds
/// `PAGEVEC_SIZE` = 31; `folio_end_dropbehind_irq()` skips the invalidation of the other 33,
/// which stay cached (RFC v3's real behaviour), and the overflow counter says 33.
#[test]
fn v3_on_iomap_one_64_folio_bio_in_one_irq_leaves_33() {
    let r = rig(DontcacheDesign::V3, WritebackPath::Iomap, None);
    assert_eq!(r.pwrite(0, &pattern(64, 3), DC), Ok(64 * PAGE_SIZE));
    assert_eq!(r.disk.in_flight(), 1, "one ioend, one bio");
    r.settle();
    let (left, s) = (r.mapping.dropbehind_left(), r.mapping.stats());
    let c = r.mapping.v3_counts().expect("a V3 batch");
    assert_eq!(left.len(), 64 - 31, "{s:?} {c:?}");
    assert_eq!(
        left,
        (31..64).collect::<Vec<_>>(),
        "the batch took the first 31"
    );
    assert_eq!(c.skipped_full, 33);
    assert_eq!((c.added, c.ended_by_work, s.v3_invalidated), (31, 31, 31));
    assert_eq!(s.nr_cached, 33);
    assert!(!DontcacheDesign::V3.is_fixed(WritebackPath::Iomap));
    assert!(!DontcacheDesign::V3.is_fixed(WritebackPath::BufferHead));
}

/// The twin of the two above: a V3 mapping whose hook never ends what it keeps (the work does
/// not run) leaves every IRQ-completed folio, so the zero above is the batch's work.
#[test]
fn v3_twin_a_batch_whose_work_never_runs_leaves_them_all() {
    let hook = UntrackedArc::new(KeepRefs::default());
    let r = Rig::with(DontcacheDesign::V3, WritebackPath::BufferHead, |c| {
        c.with_nr_pages(1024)
            .with_force_dontcache()
            .with_dropbehind_irq(hook.clone())
    });
    r.pwrite(0, &pattern(40, 7), DC).unwrap();
    for _ in 0..1000 {
        if r.disk.in_flight() == 0 {
            break;
        }
        r.settle_some(1);
    }
    assert_eq!(r.mapping.dropbehind_left(), (0..40).collect::<Vec<_>>());
    assert_eq!(
        r.mapping.v3_counts(),
        None,
        "the stand-in keeps no counters"
    );
    // A second V3 batch on the same kernel is refused: CPUHP_PAGE_ALLOC takes one registration.
    let cfg = PageCacheConfig::new(DontcacheDesign::V3, WritebackPath::Iomap);
    let first = AddressSpace::try_new(&r.kernel, cfg.clone());
    assert!(first.is_ok());
    let e = AddressSpace::try_new(&r.kernel, cfg).unwrap_err();
    assert!(e.contains("dropbehind_init"), "{e}");
}

/// Empty and reversed ranges are nothing to do (the kernel's `if (lend < lstart) return 0;`),
/// not a panic; a size past `MAX_LFS_FILESIZE` is an error naming it; a position near `u64::MAX`
/// is past the end. Catches a `BTreeMap::range(first..=last)` reached with `first > last` and an
/// overflowing `nr_pages * PAGE_SIZE` or `pos + len`.
#[test]
fn reversed_ranges_and_huge_sizes_do_not_panic() {
    let r = rig(
        DontcacheDesign::Bio(Variant::V7),
        WritebackPath::Iomap,
        None,
    );
    r.pwrite(0, &pattern(4, 9), NONE).unwrap();
    let cx = r.task();
    let m = &r.mapping;
    assert!(m
        .filemap_fdatawrite_range(&cx, 3 * PAGE_SIZE as u64, 0)
        .is_empty());
    let p = m.filemap_write_and_wait_range(&cx, 5, 4);
    assert!(p.submit.is_empty() && p.blocked.is_none() && p.error.is_none());
    assert_eq!(m.invalidate_mapping_pages(&cx, 3, 1), 0);
    assert_eq!(m.stats().nr_dirty, 4, "nothing was written back");
    let mut buf = vec![0u8; 16];
    assert_eq!(
        m.filemap_read(&cx, u64::MAX - 3, &mut buf, NONE)
            .unwrap()
            .copied,
        0
    );
    assert_eq!(
        m.generic_perform_write(&cx, u64::MAX - 3, &buf, NONE)
            .unwrap_err(),
        crate::errno::Errno::ENOSPC
    );
    // The whole range still works.
    let p = m.filemap_write_and_wait_range(&cx, 0, u64::MAX);
    assert_eq!(p.submit.len(), 1);
    let huge = PageCacheConfig::new(DontcacheDesign::Baseline, WritebackPath::Iomap)
        .with_nr_pages(u64::MAX);
    let e = AddressSpace::try_new(&r.kernel, huge).unwrap_err();
    assert!(e.contains("MAX_LFS_FILESIZE"), "{e}");
    let max = super::filemap::MAX_LFS_FILESIZE / PAGE_SIZE as u64;
    let big = AddressSpace::try_new(
        &r.kernel,
        PageCacheConfig::new(DontcacheDesign::Baseline, WritebackPath::Iomap).with_nr_pages(max),
    )
    .unwrap();
    assert_eq!(big.i_size(), max * PAGE_SIZE as u64);
    let p = big.fsync(&cx);
    assert!(p.submit.is_empty() && p.error.is_none());
}

/// Writeback bios come from their biosets (`iomap_alloc_ioend()`: `iomap_ioend_bioset`,
/// `GFP_NOFS`; `submit_bh_wbc()`: `fs_bio_set`, `GFP_NOIO`): a one-shot failure at
/// `bio_alloc_bioset` is reached and absorbed by the reserve, so every page still reaches the
/// disk and reads back. It strikes `mempool_alloc()`'s first try, whose mask has lost
/// `__GFP_DIRECT_RECLAIM | __GFP_IO` and gained `__GFP_NORETRY` (both paths' masks come out as
/// `GFP_NOWAIT`'s kswapd bit then).
#[test]
fn a_failed_writeback_bio_allocation_is_absorbed_by_the_bioset_reserve() {
    for path in WritebackPath::ALL {
        let r = rig(DontcacheDesign::Bio(Variant::V7), path, None);
        let fi = r.kernel.fault_inject();
        fi.fail_alloc_once("bio_alloc_bioset").unwrap();
        write_fsync_drop_read(&r, NONE, 16, 3);
        assert_eq!(
            fi.log(),
            ["biosim: fail_alloc bio_alloc_bioset: one-shot allocation failure (GFP_NOWAIT|__GFP_NORETRY)"],
            "{path:?}"
        );
    }
}

/// On a VM guest with free page reporting ([`super::page_reporting`]) whose free memory starts
/// reported, a folio allocation faults on the host only when it needs more memory than the guest
/// ever had in use: reclaim's and the dropbehind invalidation's freed pages are allocated again
/// first, until the reporting worker hands them to the host `2 * HZ` later. So a normal read over
/// four times the memory pays for all of it once, a DONTCACHE read only for its peak (the
/// readahead window and the read in flight), and memory freed and left alone pays again.
/// Catches an allocation that prefers reported memory, a free that reports at once, and a
/// worker that never runs.
#[test]
fn with_page_reporting_only_memory_the_host_took_back_faults() {
    const LIMIT: u64 = 256;
    let reporting = |flags: IocbFlags| {
        let r = Rig::with(
            DontcacheDesign::Bio(Variant::V7),
            WritebackPath::Iomap,
            |c| {
                c.with_nr_pages(1024)
                    .with_force_dontcache()
                    .with_limit(LIMIT)
                    .with_page_reporting(4)
            },
        );
        let mut pos = 0;
        while pos < 1024 * PAGE_SIZE {
            assert_eq!(
                r.pread(pos as u64, 64 * PAGE_SIZE, flags).unwrap().len(),
                64 * PAGE_SIZE
            );
            pos += 64 * PAGE_SIZE;
        }
        r.settle();
        r
    };
    let normal = reporting(NONE);
    let s = normal.mapping.stats();
    assert_eq!(
        (s.peak_cached, s.reported_pages_allocated),
        (LIMIT, LIMIT),
        "{s:?}"
    );
    assert!(s.reclaim_evicted >= 1024 - LIMIT, "{s:?}");
    let dc = reporting(DC);
    let d = dc.mapping.stats();
    assert!(d.peak_cached > 0 && d.peak_cached < LIMIT / 2, "{d:?}");
    assert_eq!(d.reported_pages_allocated, d.peak_cached, "{d:?}");
    // The free memory is the limit less the usage, split as the worker left it: nothing
    // reported since (jiffies never moved).
    let fr = dc.mapping.page_reporting().unwrap();
    assert_eq!(fr.free().0 + fr.free().1, LIMIT - d.memcg_usage);
    assert_eq!((fr.passes, fr.free().1), (0, LIMIT - d.peak_cached));

    // Drop what is cached: a read at once reuses it; after the worker's 2 s it faults again.
    for (wait, faults) in [(0, 0), (2 * 250, 1)] {
        let r = reporting(NONE);
        assert_eq!(r.drop_caches(), LIMIT);
        r.kernel.advance_jiffies(wait);
        let before = r.mapping.stats();
        r.pread(0, 64 * PAGE_SIZE, NONE).unwrap();
        let added = r.mapping.stats().folios_added - before.folios_added;
        let got = r.mapping.stats().reported_pages_allocated - before.reported_pages_allocated;
        let fr = r.mapping.page_reporting().unwrap();
        assert_eq!(fr.passes, faults, "wait {wait}: {fr:?}");
        // Every folio the read added came from reported memory after the wait, none before.
        assert!(got == 0 || got == added, "wait {wait}: {got} of {added}");
        assert_eq!(got > 0, faults == 1, "wait {wait}: {got}");
    }
}
