//! Reclaim, the flusher and dirty throttling as 6.18 does them ([`super::vmscan`],
//! [`crate::fs::fs_writeback`], [`super::page_writeback`]): direct reclaim never starts
//! writeback (the flusher does), `PG_reclaim` folios rotate to the inactive tail when their
//! writeback ends, the flusher writes in `writeback_index` order, the background threshold wakes
//! it, `balance_dirty_pages()` pauses a dirtier at the limit, and data survives all of it.

use super::dirty_ratelimit::{
    dirty_poll_interval, wb_max_pause, wb_min_pause, wb_position_ratio, wb_stat_error,
    wb_update_dirty_ratelimit, DirtyThrottleControl, RATELIMIT_CALC_SHIFT,
};
use super::dontcache::{DontcacheDesign, WritebackPath};
use super::filemap::{AddressSpace, Blocked, IocbFlags, Mapping, PAGE_SECTORS, PAGE_SIZE};
use super::gfp::GfpFlags;
use super::testing::{run_deferred, Rig};
use super::tests::{pattern, write_fsync_drop_read};
use super::vmscan::SWAP_CLUSTER_MAX;
use crate::block::complete_in_task::Variant;
use crate::fs::fs_writeback::WbReason;
use crate::fs::fs_writeback::INIT_BW;

const NONE: IocbFlags = IocbFlags::NONE;
const DC: IocbFlags = IocbFlags::IOCB_DONTCACHE;
const V7: DontcacheDesign = DontcacheDesign::Bio(Variant::V7);

/// A v7 iomap rig of 1024 pages with a memcg limit and a machine of `machine_pages`.
fn rig_with(limit: Option<u64>, machine_pages: Option<u64>) -> Rig {
    Rig::with(V7, WritebackPath::Iomap, |c| {
        let mut c = c.with_nr_pages(1024);
        if let Some(l) = limit {
            c = c.with_limit(l);
        }
        if let Some(p) = machine_pages {
            c = c.with_machine_memory(p * PAGE_SIZE as u64);
        }
        c
    })
}

/// The charge of a write over a memcg full of dirty folios sleeps in cgroup v1's
/// `reclaim_throttle()`: the sleep begins and ends at once (the test drives completions itself).
fn end_reclaim_throttle(
    mapping: &AddressSpace,
    cx: &crate::kernel::Cpu,
    blocked: Option<Blocked>,
    what: &str,
) {
    assert_eq!(blocked, Some(Blocked::ReclaimThrottle), "{what}");
    let sleep = mapping.reclaim_throttle_begin();
    mapping.reclaim_throttle_end(cx, sleep);
}

/// The first page index of each bio, in submission order.
fn bio_pages(bios: &[Box<crate::block::Bio>]) -> Vec<(u64, u64)> {
    bios.iter()
        .map(|b| (b.bi_iter.bi_sector / PAGE_SECTORS, b.bi_io_vec.len() as u64))
        .collect()
}

/// A write that charges over a memcg full of dirty folios: reclaim marks them `PG_reclaim`,
/// activates them and wakes the flusher; the task submits nothing itself and waits; the flusher
/// (a kworker) writes them. Catches reclaim paging out file folios outside kswapd (the
/// `bug-reclaim-pages-out-file` twin: the write returns writeback bios of its own).
#[test]
#[cfg_attr(feature = "bug-reclaim-pages-out-file", should_panic)]
fn direct_reclaim_never_starts_writeback_the_flusher_does() {
    let r = rig_with(Some(32), None);
    let cx = r.task();
    let data = pattern(64, 1);
    let p = r
        .mapping
        .generic_perform_write(&cx, 0, &data, NONE)
        .unwrap();
    assert_eq!(p.written, 32 * PAGE_SIZE, "the limit's worth is copied");
    end_reclaim_throttle(&r.mapping, &cx, p.blocked, "the charge waits for writeback");
    assert!(
        p.submit.is_empty(),
        "direct reclaim submitted {} writeback bios itself",
        p.submit.len()
    );
    let s = r.mapping.stats();
    assert_eq!(s.reclaim_writeback_started, 0, "{s:?}");
    assert_eq!(
        s.reclaim_dirty_marked, 32,
        "one SWAP_CLUSTER_MAX batch, all dirty"
    );
    assert_eq!(
        s.flusher_wakeups, 1,
        "wakeup_flusher_threads(WB_REASON_VMSCAN)"
    );
    assert_eq!(
        s.nr_writeback, 0,
        "nothing under writeback before the flusher runs"
    );
    for i in 0..32 {
        let f = r.mapping.folio(i).unwrap();
        assert!(f.dirty && f.reclaim && f.active, "folio {i}: {f:?}");
    }
    // The flusher runs as a kworker of the unbound `writeback` workqueue.
    assert_eq!(
        r.mapping.inner.lock().wb.start_all,
        Some(WbReason::Vmscan),
        "WB_start_all set with the reason"
    );
    run_deferred(&r.kernel);
    let bios = r.mapping.wb_take_submitted();
    assert_eq!(
        bio_pages(&bios),
        vec![(0, 32)],
        "the flusher wrote the 32 folios"
    );
    let s = r.mapping.stats();
    assert_eq!((s.flusher_pages, s.nr_writeback, s.nr_dirty), (32, 32, 0));
    assert_eq!(
        r.mapping.inner.lock().wb.start_all,
        None,
        "WB_start_all cleared"
    );
}

/// `folio_end_writeback()` of a `PG_reclaim` folio clears the flag and rotates the folio to the
/// inactive tail (`folio_rotate_reclaimable()`), so the retried charge evicts exactly those:
/// the write then completes within the limit. Catches a rotation that is skipped (the folios stay
/// active and the next reclaim must deactivate them first) or a flag left set.
#[test]
fn pg_reclaim_folios_rotate_to_the_inactive_tail_when_writeback_ends() {
    let r = rig_with(Some(32), None);
    let cx = r.task();
    let data = pattern(64, 2);
    let p = r
        .mapping
        .generic_perform_write(&cx, 0, &data, NONE)
        .unwrap();
    end_reclaim_throttle(
        &r.mapping,
        &cx,
        p.blocked,
        "the memcg is full of dirty folios",
    );
    run_deferred(&r.kernel);
    r.disk.submit(r.mapping.wb_take_submitted());
    let irq = r.kernel.cpu(r.irq_cpu).unwrap();
    assert_eq!(r.disk.complete_all(&irq), 1);
    run_deferred(&r.kernel);
    for i in 0..32 {
        let f = r.mapping.folio(i).unwrap();
        assert!(
            !f.reclaim && !f.active && !f.dirty && !f.writeback,
            "folio {i}: {f:?}"
        );
    }
    {
        let m = r.mapping.inner.lock();
        // Each completion moves its folio to the very tail: the last one ended is reclaimed first.
        let tail: Vec<u64> = m.lru.inactive.values().copied().take(32).collect();
        assert_eq!(
            tail,
            (0..32).rev().collect::<Vec<_>>(),
            "rotated to the tail"
        );
        assert!(m.lru.active.is_empty());
    }
    let before = r.mapping.stats();
    let p = r
        .mapping
        .generic_perform_write(&cx, 32 * PAGE_SIZE as u64, &data[32 * PAGE_SIZE..], NONE)
        .unwrap();
    assert_eq!(p.written, 32 * PAGE_SIZE);
    let d = r.mapping.stats().since(&before);
    assert_eq!((d.reclaim_evicted, d.reclaim_deactivated), (32, 0), "{d:?}");
    assert!(
        r.mapping.folio(0).is_none(),
        "the rotated folios went first"
    );
}

/// A memcg whose 32 folios are all under writeback with `PG_reclaim` (reclaim marked them dirty,
/// the flusher started them). Returns the rig and the reclaim's deltas for a charge under `gfp`:
/// (`reclaim_throttled`, `reclaim_must_wait`, folios still under writeback and `PG_reclaim`).
fn reclaim_meets_pg_reclaim_writeback(gfp: GfpFlags) -> (u64, bool, usize) {
    let r = rig_with(Some(32), None);
    let cx = r.task();
    let p = r
        .mapping
        .generic_perform_write(&cx, 0, &pattern(64, 5), NONE)
        .unwrap();
    end_reclaim_throttle(
        &r.mapping,
        &cx,
        p.blocked,
        "the memcg is full of dirty folios",
    );
    run_deferred(&r.kernel);
    let _bios = r.mapping.wb_take_submitted();
    for i in 0..32 {
        let f = r.mapping.folio(i).unwrap();
        assert!(f.writeback && f.reclaim, "folio {i}: {f:?}");
    }
    let before = r.mapping.stats();
    let mut submit = Vec::new();
    let must_wait = {
        let mut m = r.mapping.inner.lock();
        r.mapping
            .try_to_free_mem_cgroup_pages(&mut m, &cx, 32, gfp, &mut submit);
        std::mem::take(&mut m.reclaim_must_wait)
    };
    assert!(submit.is_empty(), "reclaim never writes");
    let d = r.mapping.stats().since(&before);
    assert_eq!(d.reclaim_evicted, 0, "nothing is clean: {d:?}");
    let marked = (0..32)
        .filter(|&i| {
            let f = r.mapping.folio(i).unwrap();
            f.writeback && f.reclaim
        })
        .count();
    (d.reclaim_throttled, must_wait, marked)
}

/// A charge without `__GFP_FS` (the block device's write_begin, `FGP_NOFS`, and readahead under
/// `memalloc_nofs_save()`) meeting a `PG_reclaim` folio under writeback takes case 2 of
/// `shrink_folio_list()`: it activates the folio and keeps scanning, never waits on it. Catches
/// a case 3 (`folio_wait_writeback()`) taken without `may_enter_fs()`.
#[test]
fn a_nofs_charge_meeting_pg_reclaim_writeback_keeps_scanning() {
    let nofs = GfpFlags::GFP_KERNEL.without(GfpFlags::__GFP_FS);
    let (throttled, must_wait, marked) = reclaim_meets_pg_reclaim_writeback(nofs);
    assert_eq!(
        (throttled, must_wait),
        (0, false),
        "a no-FS charge never waits"
    );
    assert_eq!(
        marked, 32,
        "each folio is left under writeback with PG_reclaim"
    );
}

/// A charge with `__GFP_FS` (`filemap_create_folio()` on the read path, `GFP_USER`) meeting a
/// `PG_reclaim` folio under writeback takes case 3 on cgroup v1: the scan stops and the caller
/// waits for writeback. Catches the wait being dropped altogether.
#[test]
fn an_fs_charge_meeting_pg_reclaim_writeback_waits() {
    let (throttled, must_wait, _) = reclaim_meets_pg_reclaim_writeback(GfpFlags::GFP_KERNEL);
    assert_eq!((throttled, must_wait), (1, true), "folio_wait_writeback()");
}

/// `do_writepages()` with `range_cyclic` starts at `mapping->writeback_index`, writes up to the
/// chunk, moves the index past it, and at the end of the device resets it to 0 without
/// wrapping in the same call; the flusher's next round starts from 0. Catches a writeback that
/// ignores the index (always from 0) or wraps within a call.
#[test]
fn the_flusher_writes_a_dirty_range_in_writeback_index_order() {
    let r = rig_with(None, None);
    let cx = r.task();
    r.pwrite(0, &pattern(100, 3), NONE).unwrap();
    let mut m = r.mapping.inner.lock();
    m.wb.writeback_index = 40;
    let (bios, n) = r.mapping.writeback_range_cyclic(&mut m, &cx, 30);
    assert_eq!((bio_pages(&bios), n), (vec![(40, 30)], 30));
    assert_eq!(m.wb.writeback_index, 70);
    let (bios, n) = r.mapping.writeback_range_cyclic(&mut m, &cx, 1000);
    assert_eq!(
        (bio_pages(&bios), n),
        (vec![(70, 30)], 30),
        "no wrap in one call"
    );
    assert_eq!(m.wb.writeback_index, 0, "reset at the end of the device");
    // Only 0..40 is dirty: from 50 writeback_iter() finds nothing, resets the index, and does
    // not come back for them in the same call.
    m.wb.writeback_index = 50;
    let (bios, n) = r.mapping.writeback_range_cyclic(&mut m, &cx, 1000);
    assert_eq!((bios.len(), n), (0, 0), "no wrap in one call");
    assert_eq!(m.wb.writeback_index, 0, "reset when nothing is found");
    let (bios, n) = r.mapping.writeback_range_cyclic(&mut m, &cx, 1000);
    assert_eq!((bio_pages(&bios), n), (vec![(0, 40)], 40));
    drop(m);
    // The whole flusher: woken by reclaim with the index at 50, it writes 50.. then 0..50.
    let r = rig_with(None, None);
    r.pwrite(0, &pattern(100, 4), NONE).unwrap();
    {
        let mut m = r.mapping.inner.lock();
        m.wb.writeback_index = 50;
        r.mapping.wakeup_flusher_threads(&mut m, WbReason::Vmscan);
    }
    r.mapping.wb_kick(&cx);
    run_deferred(&r.kernel);
    let bios = r.mapping.wb_take_submitted();
    assert_eq!(bio_pages(&bios), vec![(50, 50), (0, 50)]);
    assert_eq!(r.mapping.stats().flusher_runs, 2, "one chunk per step");
}

/// `balance_dirty_pages()` wakes the flusher for background writeback once the dirty pages pass
/// `dirty_background_ratio` of the machine, and `wb_check_background_flush()` writes while over
/// it; below it nothing but the kupdate timer is armed. Catches a flusher that only reclaim can
/// wake (the `bug-flusher-never-woken` twin too).
#[test]
#[cfg_attr(feature = "bug-flusher-never-woken", should_panic)]
fn the_background_threshold_wakes_the_flusher() {
    // A 1024-page machine: bg_thresh 102, thresh 204, freerun ceiling 153.
    let r = rig_with(None, Some(1024));
    let l = r.mapping.domain_dirty_limits();
    assert_eq!((l.bg_thresh, l.thresh, l.freerun()), (102, 204, 153));
    let cx = r.task();
    let p = r
        .mapping
        .generic_perform_write(&cx, 0, &pattern(96, 5), NONE)
        .unwrap();
    assert_eq!(p.blocked, None);
    run_deferred(&r.kernel);
    let s = r.mapping.stats();
    assert_eq!(
        (s.flusher_wakeups, s.flusher_pages, s.nr_dirty),
        (0, 0, 96),
        "{s:?}"
    );
    assert!(r.kernel.armed_timers() > 0, "the kupdate timer is armed");
    // 64 more: the check at 128 dirty is over bg_thresh.
    let p = r
        .mapping
        .generic_perform_write(&cx, 96 * PAGE_SIZE as u64, &pattern(64, 6), NONE)
        .unwrap();
    assert_eq!(p.blocked, None, "under the freerun ceiling: no pause");
    assert!(r.mapping.stats().flusher_wakeups > 0);
    run_deferred(&r.kernel);
    let s = r.mapping.stats();
    assert!(s.flusher_pages > 0, "{s:?}");
    assert!(
        s.nr_dirty <= l.bg_thresh,
        "written down to the threshold: {s:?}"
    );
    assert!(!r.mapping.wb_take_submitted().is_empty());
}

/// Past the freerun ceiling and short of the limit `balance_dirty_pages()` pauses the dirtier
/// for its rate ([`Blocked::DirtyThrottle`]): on a 4,096-page machine (thresh 819, freerun 614)
/// with the rig's clock standing still, the checks past the ceiling owe nothing until the pages
/// dirtied since the last free-running one are worth a jiffy at the task's rate (the polling
/// interval doubling from 8 meanwhile), which comes before the limit: a rate pause, not the
/// limit's loop. The rig then finishes the write and the data is intact. Catches a dirtier that
/// is never throttled (the write copies all 1,000 pages at once) and the old hard limit (no
/// pause under 819).
#[test]
fn balance_dirty_pages_pauses_for_the_rate_before_the_limit() {
    let r = rig_with(None, Some(4096));
    let cx = r.task();
    let data = pattern(1000, 7);
    let p = r
        .mapping
        .generic_perform_write(&cx, 0, &data, NONE)
        .unwrap();
    let Some(Blocked::DirtyThrottle { pause }) = p.blocked else {
        panic!("not paused: {:?}", p.blocked);
    };
    let pages = (p.written / PAGE_SIZE) as u64;
    let l = r.mapping.domain_dirty_limits();
    assert_eq!((l.freerun(), l.thresh), (614, 819));
    assert!(
        pages > l.freerun() + 64 && pages < l.thresh,
        "paused past the ceiling and under the limit: {pages}"
    );
    assert_eq!(
        r.mapping.inner.lock().wb.bdp_looping,
        None,
        "not the limit's loop"
    );
    assert_eq!(pause, 1, "a jiffy's worth of pages");
    // The last free-running check at 608 set an interval of 8; past the ceiling it doubles
    // (616, 624, 640, 672) while a jiffy is not yet owed, and at 736 the 128 pages are: at the
    // task's rate with a wb share of only the inactive floor, (819 - 736) / 8 pages.
    assert_eq!(pages, 736);
    let s = r.mapping.stats();
    assert_eq!((s.dirty_throttled, s.dirty_paused_jiffies), (1, pause));
    finish_paused_write(&r, &cx, p.written, &data);
}

/// A write paused after `written` bytes of `data` (at offset 0) finished: the flusher kicked,
/// the rest written with the flusher and completions driven, fsync, and every page on the disk.
fn finish_paused_write(r: &Rig, cx: &crate::kernel::Cpu, written: usize, data: &[u8]) {
    r.mapping.wb_kick(cx);
    let rest = r.pwrite(written as u64, &data[written..], NONE).unwrap();
    assert_eq!(written + rest, data.len());
    r.fsync();
    for i in 0..(data.len() / PAGE_SIZE) as u64 {
        assert_eq!(r.disk.page(i), &data[i as usize * PAGE_SIZE..][..PAGE_SIZE]);
    }
}

/// `__wb_calc_thresh()` for the one wb: nothing before its first completed writeback but 6.14's
/// floor for an inactive wb, an eighth of the room under the threshold (none at or over it); the
/// whole threshold after.
#[test]
fn the_wbs_share_is_the_floor_until_a_writeback_ends_then_the_threshold() {
    let r = rig_with(None, Some(4096));
    let l = r.mapping.domain_dirty_limits();
    let mut m = r.mapping.inner.lock();
    let share = |m: &Mapping, dirty| r.mapping.dtc(m, l, dirty).wb_thresh;
    assert_eq!(l.thresh, 819);
    assert_eq!(
        (share(&m, 736), share(&m, 0), share(&m, 819), share(&m, 900)),
        (10, 102, 0, 0)
    );
    m.wb.bw.written = 1;
    assert_eq!((share(&m, 736), share(&m, 900)), (819, 819));
    let d = r.mapping.dtc(&m, l, 736);
    assert_eq!(
        (d.dirty, d.wb_dirty, d.limit, d.bg_thresh),
        (736, 736, 819, l.bg_thresh)
    );
}

/// At the limit (`task_ratelimit` 0) the dirtier sleeps `max_pause` and `balance_dirty_pages()`
/// goes round again: on a 1,024-page machine (thresh 204, freerun 153) with the clock standing
/// still the polling interval doubles past the ceiling (checks at 160, 168, 184) without a
/// jiffy's worth, and the next check, at 216, is past the limit: a `max_pause` of 1 and the
/// loop. Each call after that pauses again without dirtying a page; once the flusher's
/// writeback completed (the rig settles), the loop ends and the dirtier goes on. Catches a
/// dirtier let go at the limit (the second call would write), one still held once under it,
/// and a pause other than `max_pause`.
#[test]
fn at_the_limit_the_dirtier_pauses_until_writeback_brings_it_under() {
    let r = rig_with(None, Some(1024));
    let cx = r.task();
    let data = pattern(400, 8);
    let p = r
        .mapping
        .generic_perform_write(&cx, 0, &data, NONE)
        .unwrap();
    let hz = u64::from(r.kernel.config().hz);
    let written = p.written;
    assert_eq!(written, 216 * PAGE_SIZE);
    assert_eq!(wb_max_pause(INIT_BW, 216, hz), 1);
    assert_eq!(p.blocked, Some(Blocked::DirtyThrottle { pause: 1 }));
    // The loop goes on with the check's pages_dirtied: the 64 since the last free-running one.
    assert_eq!(r.mapping.inner.lock().wb.bdp_looping, Some(64));
    for n in 2..5 {
        let p = r
            .mapping
            .generic_perform_write(&cx, written as u64, &data[written..], NONE)
            .unwrap();
        assert_eq!(p.written, 0, "no page while at the limit");
        assert_eq!(p.blocked, Some(Blocked::DirtyThrottle { pause: 1 }));
        assert_eq!(r.mapping.stats().dirty_throttled, n);
    }
    // The flusher (woken past the background threshold) writes back; the rig completes it.
    r.mapping.wb_kick(&cx);
    r.settle();
    let s = r.mapping.stats();
    assert!(s.nr_dirty + s.nr_writeback < 204, "{s:?}");
    let p = r
        .mapping
        .generic_perform_write(&cx, written as u64, &data[written..], NONE)
        .unwrap();
    assert!(
        p.written > 0,
        "under the limit the dirtier goes on: {:?}",
        p.blocked
    );
    assert_eq!(r.mapping.inner.lock().wb.bdp_looping, None);
    finish_paused_write(&r, &cx, written + p.written, &data);
}

/// `balance_dirty_pages()` between the ceiling and the limit is a rate, not a wall: a dirtier
/// that dirtied `pages_dirtied` pages sleeps `HZ * pages_dirtied / task_ratelimit` jiffies less
/// the time since its last pause, not at all under `wb_min_pause()` (the period carried over),
/// at most `wb_max_pause()` (the excess moved into the next period), and is forgiven when more
/// than a second behind. A cgroup v2 memcg of 100,000 pages (thresh 20,000, setpoint 17,500)
/// with 17,500 pages dirty, set on the counters `balance_dirty_pages()` reads. Catches the
/// `bug-bdp-pause-ignores-elapsed` twin (the whole period slept every time).
#[test]
#[cfg_attr(feature = "bug-bdp-pause-ignores-elapsed", should_panic)]
fn balance_dirty_pages_pauses_for_the_rate_less_the_time_since_the_last_pause() {
    let r = rig_cgroup(100_000, true);
    let hz = u64::from(r.kernel.config().hz);
    r.kernel.advance_jiffies(10 * hz);
    let now = r.kernel.jiffies();
    let mut m = r.mapping.inner.lock();
    m.stats.nr_dirty = 17_500;
    m.wb.bw.written = 1; // a writeback ended: the wb owns its domain's threshold
    m.wb.bw.bw_time_stamp = now; // no bandwidth update due
    let ml = r.mapping.memcg_domain(&m, true).expect("a memcg domain");
    assert_eq!((ml.bg_thresh, ml.thresh), (10_000, 20_000));
    let dtc = DirtyThrottleControl {
        dirty: 17_500,
        thresh: 20_000,
        bg_thresh: 10_000,
        limit: 20_000,
        wb_dirty: 17_500,
        wb_thresh: 20_000,
    };
    let task = (INIT_BW * wb_position_ratio(&dtc, INIT_BW)) >> RATELIMIT_CALC_SHIFT;
    let max = wb_max_pause(INIT_BW, 17_500, hz);
    let (min, next) = wb_min_pause(INIT_BW, INIT_BW, max, task, hz);
    let period = |pages: u64| hz * pages / task;
    assert_eq!(
        (period(1000), max, min, next),
        (9, 22, 2, 200),
        "task {task}"
    );
    // balance_dirty_pages() after `pages` dirtied, the last pause ending at `paused_when`:
    // (pause, dirty_paused_when, nr_dirtied, nr_dirtied_pause) after it.
    let bdp = |m: &mut Mapping, paused_when: u64, pages: u64| {
        m.wb.dirty_paused_when = Some(paused_when);
        m.wb.nr_dirtied = pages;
        let pause = r.mapping.balance_dirty_pages(m, &r.task(), pages);
        let when = m.wb.dirty_paused_when.expect("still set");
        (pause, when, m.wb.nr_dirtied, m.wb.nr_dirtied_pause)
    };
    // Just paused: the whole period.
    assert_eq!(bdp(&mut m, now, 1000), (Some(9), now + 9, 0, next));
    // 5 jiffies since: the rest.
    assert_eq!(bdp(&mut m, now - 5, 1000), (Some(4), now + 4, 0, next));
    // 8 since: 1 jiffy is under the minimum; no sleep, the period carried over.
    assert_eq!(bdp(&mut m, now - 8, 1000), (None, now + 1, 0, next));
    // More than a second behind: a light dirtier, its clock restarted.
    assert_eq!(bdp(&mut m, now - hz - 10, 1000), (None, now, 0, next));
    // Exactly a second behind is still carried over.
    assert_eq!(
        bdp(&mut m, now - hz - 9, 1000),
        (None, now - hz - 9 + 9, 0, next)
    );
    // 5,000 pages: a 48-jiffy period is cut to max_pause, the excess (up to another max_pause)
    // moved into the next period.
    assert_eq!(period(5000), 48);
    assert_eq!(bdp(&mut m, now, 5000), (Some(max), now + 2 * max, 0, next));
    // 3,000 pages: 29 jiffies, the 7 over max_pause moved.
    assert_eq!(period(3000), 29);
    assert_eq!(bdp(&mut m, now, 3000), (Some(max), now + 29, 0, next));
    let s = m.stats;
    assert_eq!(
        (s.dirty_throttled, s.dirty_paused_jiffies),
        (4, 9 + 4 + max + max)
    );

    // At the limit: max_pause, and the loop goes round with the same pages_dirtied.
    m.stats.nr_dirty = 20_000;
    let at_limit = wb_max_pause(INIT_BW, 20_000, hz);
    assert_eq!(bdp(&mut m, now, 1000).0, Some(at_limit));
    assert_eq!(m.wb.bdp_looping, Some(1000));
    // After the sleep, writeback brought the pages under the limit (19,000): the next check
    // pauses for the 1,000 pages at the new rate, where a dirtier let go would owe nothing.
    drop(m);
    r.kernel.advance_jiffies(at_limit);
    let mut m = r.mapping.inner.lock();
    m.stats.nr_dirty = 19_000;
    let under = DirtyThrottleControl {
        dirty: 19_000,
        wb_dirty: 19_000,
        ..dtc
    };
    let task = (INIT_BW * wb_position_ratio(&under, INIT_BW)) >> RATELIMIT_CALC_SHIFT;
    let max = wb_max_pause(INIT_BW, 19_000, hz);
    let expect = (hz * 1000 / task).min(max);
    assert!(expect > 2, "{task} {expect}");
    assert_eq!(
        r.mapping.balance_dirty_pages_ratelimited(&mut m, &r.task()),
        Some(expect)
    );
    assert_eq!(m.wb.bdp_looping, None, "under the limit the loop ends");
}

/// The rest of `balance_dirty_pages()`'s state on a cgroup v2 memcg (counters set as in
/// `balance_dirty_pages_pauses_for_the_rate_less_the_time_since_the_last_pause`): free running,
/// the next check is after the smaller of the two domains' polling intervals; over the threshold
/// `wb->dirty_exceeded` makes the dirtier check every 8 pages; the loop at the limit ends at
/// once when the wb's dirty pages are within `wb_stat_error()` (32 on 2 CPUs); and a due
/// bandwidth update moves `dirty_ratelimit` by the global domain's step, then the memcg's.
#[test]
fn balance_dirty_pages_polls_exceeds_exits_and_updates_as_the_kernel() {
    let hz = 250;
    let state = |limit: u64, dirty: u64| {
        let r = rig_cgroup(limit, true);
        assert_eq!(u64::from(r.kernel.config().hz), hz);
        r.kernel.advance_jiffies(10 * hz);
        {
            let mut m = r.mapping.inner.lock();
            m.stats.nr_dirty = dirty;
            m.wb.bw.written = 1;
            m.wb.bw.bw_time_stamp = r.kernel.jiffies();
        }
        r
    };
    // Free running: min(dirty_poll_interval(1000, 1,258,291), dirty_poll_interval(1000, 20,000)).
    let r = state(100_000, 1000);
    let mut m = r.mapping.inner.lock();
    let g = r.mapping.domain_dirty_limits();
    assert_eq!(
        (
            dirty_poll_interval(1000, g.thresh),
            dirty_poll_interval(1000, 20_000)
        ),
        (1024, 128)
    );
    assert_eq!(r.mapping.balance_dirty_pages(&mut m, &r.task(), 32), None);
    assert_eq!(m.wb.nr_dirtied_pause, 128);
    drop(m);

    // Free running over the background threshold (1,024-page machine: 102, ceiling 153) the
    // check wakes the flusher, unless it is already busy; at the threshold it does not.
    for (dirty, busy, wakes) in [(120, false, true), (102, false, false), (120, true, false)] {
        let r = rig_with(None, Some(1024));
        let mut m = r.mapping.inner.lock();
        m.stats.nr_dirty = dirty;
        m.wb.wakeup_pending = busy;
        let before = m.stats.flusher_wakeups;
        assert_eq!(r.mapping.balance_dirty_pages(&mut m, &r.task(), 32), None);
        let woke = m.stats.flusher_wakeups > before;
        assert_eq!(woke, wakes, "{dirty} dirty, busy {busy}");
    }

    // A bandwidth update is due only once more than BANDWIDTH_INTERVAL (50 jiffies) passed.
    let r = state(100_000, 19_000);
    let mut m = r.mapping.inner.lock();
    let now = r.kernel.jiffies();
    m.wb.bw.bw_time_stamp = now - 50;
    m.wb.bw.dirtied = 30_000;
    r.mapping.balance_dirty_pages(&mut m, &r.task(), 32);
    assert_eq!(
        (m.wb.bw.bw_time_stamp, m.wb.bw.dirtied_stamp),
        (now - 50, 0),
        "not yet due"
    );
    drop(m);

    // Over the threshold: dirty_exceeded, and the dirtier checks every 8 pages whatever its
    // nr_dirtied_pause.
    let r = state(100_000, 20_100);
    let mut m = r.mapping.inner.lock();
    assert!(r
        .mapping
        .balance_dirty_pages(&mut m, &r.task(), 32)
        .is_some());
    assert!(m.wb.dirty_exceeded);
    m.wb.bdp_looping = None;
    m.wb.nr_dirtied_pause = 200;
    m.wb.nr_dirtied = 7;
    assert_eq!(
        r.mapping.balance_dirty_pages_ratelimited(&mut m, &r.task()),
        None
    );
    m.wb.nr_dirtied = 8;
    assert!(r
        .mapping
        .balance_dirty_pages_ratelimited(&mut m, &r.task())
        .is_some());
    drop(m);

    // At the limit of a 150-page memcg (30) the wb's 30 dirty pages are within the counters'
    // error, as are a 160-page memcg's 32: one pause, no loop; at a 200-page memcg's (40) the
    // loop goes on.
    assert_eq!(wb_stat_error(2), 32);
    for (limit, thresh, looping) in [(150, 30, None), (160, 32, None), (200, 40, Some(16))] {
        let r = state(limit, thresh);
        let mut m = r.mapping.inner.lock();
        assert!(
            r.mapping
                .balance_dirty_pages(&mut m, &r.task(), 16)
                .is_some(),
            "{limit}"
        );
        assert_eq!(m.wb.bdp_looping, looping, "{limit}");
    }

    // A bandwidth update due, the memcg's pages over its setpoint (19,000 of 17,500) and
    // dirtying (125,000 pages/s) outrunning writeback (20,000): the global domain, far under its
    // setpoint, leaves dirty_ratelimit where it is and records its balanced rate (20,000); the
    // memcg's step then takes it down. Both on the same wb, in that order.
    let r = state(100_000, 19_000);
    let mut m = r.mapping.inner.lock();
    let now = r.kernel.jiffies();
    m.wb.bw.bw_time_stamp = now - 60;
    m.wb.bw.dirtied = 30_000;
    m.wb.bw.avg_write_bandwidth = 20_000;
    let mut want = m.wb.bw;
    let dtc = |thresh: u64, bg_thresh: u64| DirtyThrottleControl {
        dirty: 19_000,
        thresh,
        bg_thresh,
        limit: thresh,
        wb_dirty: 19_000,
        wb_thresh: thresh,
    };
    let (gd, md) = (dtc(g.thresh, g.bg_thresh), dtc(20_000, 10_000));
    let g_pos = wb_position_ratio(&gd, 20_000);
    wb_update_dirty_ratelimit(&gd, g_pos, &mut want, 30_000, 60, hz);
    assert_eq!(
        (want.dirty_ratelimit, want.balanced_dirty_ratelimit),
        (INIT_BW, 20_000)
    );
    let m_pos = wb_position_ratio(&md, 20_000);
    wb_update_dirty_ratelimit(&md, m_pos, &mut want, 30_000, 60, hz);
    assert!(want.dirty_ratelimit < INIT_BW, "the memcg's step: {want:?}");
    r.mapping.balance_dirty_pages(&mut m, &r.task(), 32);
    assert_eq!(
        (m.wb.bw.dirty_ratelimit, m.wb.bw.balanced_dirty_ratelimit),
        (want.dirty_ratelimit, want.balanced_dirty_ratelimit)
    );
    assert_eq!(
        (m.wb.bw.dirtied_stamp, m.wb.bw.bw_time_stamp),
        (30_000, now)
    );
}

/// `folio_account_dirtied()` counts only clean→dirty transitions: rewriting dirty folios costs
/// the dirtier nothing. On a cgroup v2 memcg of 512 pages (freerun 76, limit 102), 90 dirty
/// folios rewritten twenty times over never bring `balance_dirty_pages()` to a pause, while 200
/// new folios after them are throttled. Catches counting every copied page (the 1,800 copies
/// would be worth a pause).
#[test]
fn rewriting_dirty_folios_is_not_throttled() {
    let r = rig_cgroup(512, true);
    let cx = r.task();
    let first = r
        .mapping
        .generic_perform_write(&cx, 0, &pattern(90, 1), NONE)
        .unwrap();
    assert_eq!((first.written, first.blocked), (90 * PAGE_SIZE, None));
    for pass in 2..22 {
        let p = r
            .mapping
            .generic_perform_write(&cx, 0, &pattern(90, pass), NONE)
            .unwrap();
        assert_eq!(
            (p.written, p.blocked),
            (90 * PAGE_SIZE, None),
            "pass {pass}"
        );
    }
    assert_eq!(r.mapping.stats().dirty_throttled, 0);
    let more = r
        .mapping
        .generic_perform_write(&cx, 90 * PAGE_SIZE as u64, &pattern(200, 3), NONE)
        .unwrap();
    assert!(matches!(more.blocked, Some(Blocked::DirtyThrottle { .. })));
}

/// A memcg full of dirty folios makes progress: reclaim can free nothing until the flusher
/// writes them, so a flusher that is never woken leaves the charge with nothing in flight
/// (`ENOMEM`). Checked within 1 s of jiffies, before the 5 s kupdate timer could rescue it.
/// Catches the `bug-flusher-never-woken` twin.
#[test]
#[cfg_attr(feature = "bug-flusher-never-woken", should_panic)]
fn a_memcg_full_of_dirty_folios_makes_progress() {
    let r = rig_with(Some(24), None);
    let data = pattern(200, 8);
    assert_eq!(r.pwrite(0, &data, NONE), Ok(data.len()));
    let hz = u64::from(r.kernel.config().hz);
    assert!(r.kernel.jiffies() < hz, "jiffies {}", r.kernel.jiffies());
    let s = r.mapping.stats();
    assert!(s.flusher_pages > 0 && s.reclaim_evicted > 0, "{s:?}");
    assert!(s.peak_cached <= 24);
}

/// Write, fsync, drop, read back and verify on every design and path, both flags, under a small
/// memcg limit and a small machine (the dirty limit is reached too). Catches data lost or
/// misplaced by the flusher's cyclic writeback, by a pause, or by a `PG_reclaim` rotation.
#[test]
fn data_survives_the_flusher_and_dirty_throttling_on_every_design() {
    for design in DontcacheDesign::all() {
        for path in WritebackPath::ALL {
            for flags in [NONE, DC] {
                for (limit, machine) in [(Some(40), Some(256)), (None, Some(256))] {
                    let r = Rig::with(design, path, |c| {
                        let c = c
                            .with_nr_pages(1024)
                            .with_force_dontcache()
                            .with_machine_memory(machine.unwrap() * PAGE_SIZE as u64);
                        match limit {
                            Some(l) => c.with_limit(l),
                            None => c,
                        }
                    });
                    write_fsync_drop_read(&r, flags, 200, 11);
                    let s = r.mapping.stats();
                    let what = format!("{design}/{path}/{flags:?}/{limit:?}: {s:?}");
                    if flags == NONE {
                        assert!(s.flusher_pages > 0, "{what}");
                    }
                    assert_eq!(s.reclaim_writeback_started, 0, "{what}");
                    assert!(
                        r.kernel.reports().is_empty(),
                        "{what}: {:?}",
                        r.kernel.reports().all()
                    );
                }
            }
        }
    }
}

/// A v7 mapping of 1024 pages with a memcg limit of 32 over a memory-backed null_blk with
/// `irqmode=0` (each request ends in the submitter's context, here the flusher's kworker), set
/// as the mapping's device ([`PageCacheConfig::bdev`](super::dontcache::PageCacheConfig::bdev)).
fn null_blk_rig(
    path: WritebackPath,
) -> (
    crate::sync::UntrackedArc<crate::kernel::Kernel>,
    crate::sync::UntrackedArc<crate::drivers::block::null_blk::NullBlk>,
    crate::sync::UntrackedArc<super::filemap::AddressSpace>,
) {
    use super::dontcache::PageCacheConfig;
    use super::filemap::AddressSpace;
    use crate::block::complete_in_task::bio_complete_init;
    use crate::block::BlockDriver;
    use crate::drivers::block::null_blk::{NullBlk, NullBlkConfig, NullIrqMode};
    use crate::kernel::{Kernel, KernelConfig};
    use crate::sync::UntrackedArc;
    let kernel = Kernel::new(KernelConfig::default(), 2).unwrap();
    bio_complete_init(&kernel, V7.boot_variant(), None).unwrap();
    let nb = NullBlk::new(
        &kernel,
        0,
        NullBlkConfig {
            size_bytes: 1024 * PAGE_SIZE as u64,
            irqmode: NullIrqMode::None,
            memory_backed: true,
            ..NullBlkConfig::default()
        },
    )
    .unwrap();
    let dev: UntrackedArc<dyn BlockDriver> = nb.clone();
    let mapping = AddressSpace::new(
        &kernel,
        PageCacheConfig::new(V7, path)
            .with_nr_pages(1024)
            .with_limit(32)
            .with_bdev(dev),
    );
    (kernel, nb, mapping)
}

/// With the mapping's device set ([`PageCacheConfig::bdev`](super::dontcache::PageCacheConfig::bdev)),
/// the flusher's kworker submits the bios it builds itself (`wb_workfn()` → `do_writepages()` →
/// `submit_bio()`), as the kernel's flusher does on a threaded machine: nothing waits in
/// `wb_take_submitted()` and the data is on the device. Catches a flusher that builds bios and
/// leaves them parked (the folios would stay under writeback forever on the threaded runtime).
#[test]
fn the_flusher_submits_its_bios_to_the_mappings_device() {
    use crate::kernel::CpuId;
    let (kernel, nb, mapping) = null_blk_rig(WritebackPath::Iomap);
    let cx = kernel.cpu(CpuId(0)).unwrap();
    let data = pattern(64, 3);
    let p = mapping.generic_perform_write(&cx, 0, &data, NONE).unwrap();
    end_reclaim_throttle(&mapping, &cx, p.blocked, "the limit's worth is dirty");
    run_deferred(&kernel);
    assert!(
        mapping.wb_take_submitted().is_empty(),
        "the flusher left its bios for the caller"
    );
    let s = mapping.stats();
    assert_eq!(
        (s.flusher_pages, s.nr_writeback, s.nr_dirty),
        (32, 0, 0),
        "{s:?}"
    );
    assert_eq!(
        nb.read_backing(0, 32 * PAGE_SIZE).as_deref(),
        Some(&data[..32 * PAGE_SIZE]),
        "the flusher's writes reached null_blk's memory"
    );
}

/// `wb_writeback()` brackets its chunks with `blk_start_plug()` / `blk_finish_plug()`: on the
/// buffer_head path (`submit_bh_wbc()`, one 4 KiB bio per folio) the chunk's 32 contiguous bios
/// back-merge into the plugged request (`blk_attempt_plug_merge()`), and a blk-mq driver's
/// `->queue_rq()` sees one 128 KiB request, not 32 (`BLK_MAX_SEGMENTS`, `max_sectors` and the
/// plug's 32-request flush all leave room for it). The twin `bug-wb-writeback-no-plug` submits
/// unplugged: one request per bio. (null_blk's model has no plug, see its module doc.)
#[test]
#[cfg_attr(
    feature = "bug-wb-writeback-no-plug",
    should_panic(expected = "the flusher's chunk reached the driver unmerged")
)]
fn the_flusher_plugs_its_chunk_so_contiguous_bios_merge() {
    use super::dontcache::PageCacheConfig;
    use super::filemap::AddressSpace;
    use crate::block::blk_mq::tests::MqDevCfg;
    use crate::block::complete_in_task::bio_complete_init;
    use crate::block::BlockDriver;
    use crate::kernel::{CpuId, Kernel, KernelConfig};
    use crate::sync::UntrackedArc;
    let kernel = Kernel::new(KernelConfig::default(), 2).unwrap();
    bio_complete_init(&kernel, V7.boot_variant(), None).unwrap();
    let log = UntrackedArc::new(crate::sync::Mutex::new(Vec::new()));
    // A blk-mq driver that starts and ends each request in its ->queue_rq() and logs it.
    let mq = MqDevCfg::new("mq0", 0, &log).build();
    let dev: UntrackedArc<dyn BlockDriver> = mq.clone();
    let mapping = AddressSpace::new(
        &kernel,
        PageCacheConfig::new(V7, WritebackPath::BufferHead)
            .with_nr_pages(1024)
            .with_limit(32)
            .with_bdev(dev),
    );
    let cx = kernel.cpu(CpuId(0)).unwrap();
    let p = mapping
        .generic_perform_write(&cx, 0, &pattern(64, 5), NONE)
        .unwrap();
    end_reclaim_throttle(&mapping, &cx, p.blocked, "the limit's worth is dirty");
    run_deferred(&kernel);
    let s = mapping.stats();
    assert_eq!(
        (s.flusher_pages, s.nr_writeback, s.nr_dirty),
        (32, 0, 0),
        "{s:?}"
    );
    let requests: Vec<String> = log.lock().clone();
    assert_eq!(
        requests,
        ["mq0: queue_rq 0"],
        "the flusher's chunk reached the driver unmerged"
    );
    assert!(kernel.reports().is_empty(), "{:?}", kernel.reports().all());
}

/// `wb_do_writeback()` runs `wb_check_old_data_flush()` and then `wb_check_background_flush()` in
/// one pass: a kupdate run whose dirty data is too young to write (and which still stamps
/// `last_old_flush`) falls through to the background writeback in the same flusher step. Catches
/// a flusher that runs only the first check that applies (nothing written until the next kupdate
/// timer, 5 s later).
#[test]
fn a_kupdate_with_nothing_old_falls_through_to_background_writeback() {
    use crate::fs::fs_writeback::DIRTY_WRITEBACK_CENTISECS;
    let r = rig_with(None, Some(1024));
    let hz = u64::from(r.kernel.config().hz);
    // The kupdate interval has passed since boot, and the pages dirtied now are young.
    r.kernel
        .advance_jiffies(DIRTY_WRITEBACK_CENTISECS * hz / 100 + 1);
    let now = r.kernel.jiffies();
    let cx = r.task();
    let p = r
        .mapping
        .generic_perform_write(&cx, 0, &pattern(160, 3), NONE)
        .unwrap();
    assert_eq!(p.blocked, None, "under the freerun ceiling");
    let l = r.mapping.domain_dirty_limits();
    assert!(r.mapping.stats().nr_dirty > l.bg_thresh);
    assert_eq!(r.mapping.stats().flusher_pages, 0);
    // One flusher step, as its kworker would run it.
    r.mapping.wb_workfn(&cx);
    assert_eq!(
        r.mapping.inner.lock().wb.last_old_flush,
        now,
        "the kupdate check ran"
    );
    let s = r.mapping.stats();
    assert!(
        s.flusher_pages > 0,
        "the background check wrote in the same step: {s:?}"
    );
    assert!(!r.mapping.wb_take_submitted().is_empty());
}

/// A work that finishes in a step does not end the kernel's pass: `wb_do_writeback()` goes on
/// to `wb_check_old_data_flush()` in the same run, so old dirty data the work left behind its
/// `writeback_index` is written at once, not when the kupdate timer next fires 5 s later. (The
/// model writes one chunk per step and requeues itself at once for the checks.) Not when the
/// kupdate interval has not passed since `last_old_flush`, and not when nothing is left dirty:
/// then the step is the last one.
#[test]
fn a_finished_work_goes_on_to_the_kupdate_check() {
    use crate::fs::fs_writeback::{DIRTY_EXPIRE_CENTISECS, DIRTY_WRITEBACK_CENTISECS};
    // (last flush this many jiffies before the interval is up, first dirty page; pages up to
    // 100 are dirtied) -> (flusher steps, pages still dirty, bios of the second step).
    let case = |early: u64, first: u64| {
        let r = rig_with(None, None);
        let hz = u64::from(r.kernel.config().hz);
        r.kernel
            .advance_jiffies(DIRTY_EXPIRE_CENTISECS * hz / 100 + 1);
        let cx = r.task();
        // Dirtying arms the kupdate timer 5 s from now; the inode is then made 30 s old, and
        // a work of 10 pages is in progress with the index at 50.
        r.pwrite(first * PAGE_SIZE as u64, &pattern(100 - first, 7), NONE)
            .unwrap();
        {
            let mut m = r.mapping.inner.lock();
            m.wb.dirtied_when = Some(0);
            m.wb.last_old_flush = r.kernel.jiffies() - DIRTY_WRITEBACK_CENTISECS * hz / 100 + early;
            m.wb.writeback_index = 50;
            m.wb.work = Some(WbWork {
                nr_pages: 10,
                for_background: false,
                for_kupdate: false,
                reason: WbReason::Vmscan,
            });
        }
        r.mapping.wb_workfn(&cx);
        assert_eq!(
            bio_pages(&r.mapping.wb_take_submitted()),
            vec![(50, 50)],
            "the work's chunk runs from the index to the last dirty page"
        );
        // A few jiffies, far less than the kupdate timer's 5 s.
        run_deferred(&r.kernel);
        let s = r.mapping.stats();
        (
            s.flusher_runs,
            s.nr_dirty,
            bio_pages(&r.mapping.wb_take_submitted()),
        )
    };
    use crate::fs::fs_writeback::WbWork;
    assert_eq!(
        case(0, 0),
        (2, 0, vec![(0, 50)]),
        "the interval is up: the kupdate check wrote the old data behind the index at once"
    );
    assert_eq!(
        case(10, 0),
        (1, 50, vec![]),
        "10 jiffies before the interval is up: left to the kupdate timer"
    );
    assert_eq!(
        case(0, 50),
        (1, 0, vec![]),
        "everything written by the work: nothing for the checks, no further step"
    );
}

/// `WB_start_all` is cleared only when the start-all work itself is done
/// (`wb_check_start_all()`): a kupdate work that finishes while it is pending leaves it set,
/// and the next step writes everything dirty for it.
#[test]
fn only_the_start_all_work_clears_wb_start_all() {
    use crate::fs::fs_writeback::{WbWork, DIRTY_EXPIRE_CENTISECS};
    let r = rig_with(None, None);
    let hz = u64::from(r.kernel.config().hz);
    r.kernel
        .advance_jiffies(DIRTY_EXPIRE_CENTISECS * hz / 100 + 1);
    let cx = r.task();
    r.pwrite(0, &pattern(100, 6), NONE).unwrap();
    {
        let mut m = r.mapping.inner.lock();
        m.wb.dirtied_when = Some(0);
        m.wb.last_old_flush = r.kernel.jiffies();
        m.wb.writeback_index = 50;
        m.wb.start_all = Some(WbReason::Vmscan);
        m.wb.work = Some(WbWork {
            nr_pages: 10,
            for_background: false,
            for_kupdate: true,
            reason: WbReason::Periodic,
        });
    }
    r.mapping.wb_workfn(&cx);
    assert_eq!(bio_pages(&r.mapping.wb_take_submitted()), vec![(50, 50)]);
    assert_eq!(
        r.mapping.inner.lock().wb.start_all,
        Some(WbReason::Vmscan),
        "the kupdate work finished; the start-all request stands"
    );
    run_deferred(&r.kernel);
    assert_eq!(bio_pages(&r.mapping.wb_take_submitted()), vec![(0, 50)]);
    assert_eq!(r.mapping.inner.lock().wb.start_all, None);
    assert_eq!(r.mapping.stats().nr_dirty, 0);
}

/// A flusher run that no work or threshold asked for (a spurious wake-up) within the kupdate
/// interval of the last `wb_check_old_data_flush()` writes nothing, even data older than
/// `dirty_expire_interval`, and leaves `last_old_flush` as it was.
#[test]
fn a_flusher_run_within_the_kupdate_interval_writes_nothing() {
    use crate::fs::fs_writeback::{DIRTY_EXPIRE_CENTISECS, DIRTY_WRITEBACK_CENTISECS};
    let r = rig_with(None, None);
    let hz = u64::from(r.kernel.config().hz);
    r.kernel
        .advance_jiffies(2 * DIRTY_EXPIRE_CENTISECS * hz / 100);
    let cx = r.task();
    r.pwrite(0, &pattern(20, 4), NONE).unwrap();
    let last = r.kernel.jiffies() - DIRTY_WRITEBACK_CENTISECS * hz / 100 + 1;
    {
        let mut m = r.mapping.inner.lock();
        m.wb.dirtied_when = Some(0);
        m.wb.last_old_flush = last;
    }
    r.mapping.wb_workfn(&cx);
    let s = r.mapping.stats();
    assert_eq!((s.flusher_pages, s.nr_dirty), (0, 20), "{s:?}");
    assert_eq!(r.mapping.inner.lock().wb.last_old_flush, last);
    assert!(r.mapping.wb_take_submitted().is_empty());
}

/// Advances the clock one jiffy at a time up to `until`, running every CPU's expired timers and
/// queued work at each tick, and calls `each` with the new `jiffies` after each tick.
fn tick_until(r: &Rig, until: u64, mut each: impl FnMut(u64)) {
    use crate::workqueue::PoolId;
    while r.kernel.jiffies() < until {
        r.kernel.advance_jiffies(1);
        for c in r.kernel.online_cpus() {
            let Some(cx) = r.kernel.cpu(c) else { continue };
            r.kernel.run_timers(&cx);
            while r.kernel.run_worker(PoolId::Cpu(c), &cx).is_some() {}
            while r.kernel.run_worker(PoolId::Unbound, &cx).is_some() {}
        }
        each(r.kernel.jiffies());
    }
}

/// The kupdate timer: the first dirtying arms the flusher `dirty_writeback_interval` (5 s) ahead
/// (`wb_wakeup_delayed()`; the timer wheel files a 1,250-jiffy timer in a level of 64-jiffy
/// buckets, so it fires up to 64 jiffies late, never early); a run writes nothing younger than
/// `dirty_expire_interval` (30 s) but stamps `last_old_flush` and re-arms while the inode is
/// dirty; the first run at or after 30 s writes the data.
#[test]
fn kupdate_writes_only_data_older_than_the_expire_interval() {
    use crate::fs::fs_writeback::{DIRTY_EXPIRE_CENTISECS, DIRTY_WRITEBACK_CENTISECS};
    let r = rig_with(None, None);
    let hz = u64::from(r.kernel.config().hz);
    let interval = DIRTY_WRITEBACK_CENTISECS * hz / 100;
    let expire = DIRTY_EXPIRE_CENTISECS * hz / 100;
    let t0 = r.kernel.jiffies();
    r.pwrite(0, &pattern(10, 9), NONE).unwrap();
    let (mut first_run, mut written_at, mut runs_before) = (None, None, 0);
    tick_until(&r, t0 + expire + 2 * interval, |j| {
        let s = r.mapping.stats();
        if first_run.is_none() && s.flusher_runs > 0 {
            first_run = Some(j);
            assert_eq!(
                s.nr_dirty, 10,
                "the first kupdate run at {j} wrote young data"
            );
            assert_eq!(r.mapping.inner.lock().wb.last_old_flush, j, "stamped");
        }
        if written_at.is_none() && s.nr_dirty == 0 {
            written_at = Some(j);
            runs_before = s.flusher_runs;
        }
    });
    let first = first_run.expect("the kupdate timer fired");
    assert!(
        (t0 + interval..=t0 + interval + 64).contains(&first),
        "first kupdate run at {first}, armed at {t0}"
    );
    let at = written_at.expect("the old data was written");
    assert!(
        (t0 + expire..=t0 + expire + interval + 64).contains(&at),
        "written at {at}, dirtied at {t0}"
    );
    assert_eq!(runs_before, 6, "one run per 5 s up to 30 s");
    assert_eq!(bio_pages(&r.mapping.wb_take_submitted()), vec![(0, 10)]);
}

/// `wb_over_bg_thresh()` is `dirty > bg_thresh`: at the threshold the flusher's background
/// check has nothing to do, one page above it does. And `writeback_chunk_size()` is
/// `min(avg_write_bandwidth / 2, dirty_limit / DIRTY_SCOPE, nr_pages)` rounded up to whole
/// `MIN_WRITEBACK_PAGES`: an eighth of a small machine's limit binds (25 pages, one 4 MiB
/// chunk), half the initial bandwidth binds on a large one (12,800 pages: 13 chunks of 1,024).
#[test]
fn the_background_threshold_and_the_chunk_size_are_the_kernels() {
    use crate::fs::fs_writeback::{WbWork, INIT_BW, MIN_WRITEBACK_PAGES};
    let r = rig_with(None, Some(1024));
    let l = r.mapping.domain_dirty_limits();
    let cx = r.task();
    r.mapping
        .generic_perform_write(&cx, 0, &pattern(l.bg_thresh, 1), NONE)
        .unwrap();
    {
        let m = r.mapping.inner.lock();
        assert_eq!(m.stats.nr_dirty, l.bg_thresh);
        assert!(!r.mapping.wb_over_bg_thresh(&m), "at the threshold");
    }
    r.mapping
        .generic_perform_write(&cx, l.bg_thresh * PAGE_SIZE as u64, &pattern(1, 2), NONE)
        .unwrap();
    let work = WbWork {
        nr_pages: u64::MAX,
        for_background: true,
        for_kupdate: false,
        reason: WbReason::Background,
    };
    {
        let m = r.mapping.inner.lock();
        assert!(r.mapping.wb_over_bg_thresh(&m), "one page above it");
        assert_eq!(l.thresh / 8, 25);
        assert_eq!(
            r.mapping.writeback_chunk_size(&m, &work),
            MIN_WRITEBACK_PAGES
        );
    }
    // A 4 GiB machine: the limit's eighth is 26,214 pages; half of INIT_BW (25,600) binds.
    let big = rig_with(None, Some(1 << 20));
    let m = big.mapping.inner.lock();
    assert_eq!(m.wb.bw.avg_write_bandwidth, INIT_BW);
    assert_eq!(
        big.mapping.writeback_chunk_size(&m, &work),
        (INIT_BW / 2 + MIN_WRITEBACK_PAGES) / MIN_WRITEBACK_PAGES * MIN_WRITEBACK_PAGES
    );
    assert_eq!(big.mapping.writeback_chunk_size(&m, &work), 13_312);
    let small = WbWork {
        nr_pages: 3000,
        ..work
    };
    assert_eq!(
        big.mapping.writeback_chunk_size(&m, &small),
        3072,
        "nr_pages binds: round_down(3000 + 1024, 1024)"
    );
}

/// `wb_update_write_bandwidth()`'s arithmetic at HZ=250 (period `roundup_pow_of_two(750)` =
/// 1024 jiffies), by hand: 1,000 pages in 50 jiffies are 5,000 pages/s, weighted 50/1024 against
/// `INIT_BW` (25,600): `(1000 * 250 + 25600 * 974) >> 10` = 24,594; `avg_write_bandwidth` stays
/// (the filter moves it only toward an `old` the new estimate does not contradict), then follows
/// an eighth of the way once both estimates agree it is too high. An elapsed time beyond the
/// period replaces both.
#[test]
fn the_write_bandwidth_update_is_the_kernels_arithmetic() {
    use super::page_writeback::{bandwidth_interval, wb_update_write_bandwidth};
    use crate::fs::fs_writeback::{WbBandwidth, INIT_BW};
    assert_eq!(
        (
            bandwidth_interval(250),
            bandwidth_interval(1000),
            bandwidth_interval(3)
        ),
        (50, 200, 1)
    );
    let mut bw = WbBandwidth::default();
    assert_eq!(
        (bw.write_bandwidth, bw.avg_write_bandwidth),
        (INIT_BW, 25_600)
    );
    wb_update_write_bandwidth(&mut bw, 50, 1000, 250);
    assert_eq!(
        (bw.write_bandwidth, bw.avg_write_bandwidth),
        (24_594, 25_600)
    );
    // The next interval: old (24,594) < avg and the new estimate is lower still: avg moves
    // (25,600 - 24,594) >> 3 = 125 down.
    bw.written_stamp = 1000;
    wb_update_write_bandwidth(&mut bw, 50, 2000, 250);
    assert_eq!(bw.write_bandwidth, (1000 * 250 + 24_594 * 974) >> 10);
    assert_eq!(bw.avg_write_bandwidth, 25_600 - 125);
    // Longer than the period: the plain rate, 3,000 pages in 2,000 jiffies.
    bw.written_stamp = 0;
    wb_update_write_bandwidth(&mut bw, 2000, 3000, 250);
    assert_eq!((bw.write_bandwidth, bw.avg_write_bandwidth), (375, 375));
    // A redirty left `written` below the stamp: no underflow, a rate of 0 weighted in.
    bw.written_stamp = 5000;
    wb_update_write_bandwidth(&mut bw, 1024, 4000, 250);
    assert_eq!(bw.write_bandwidth, 0);
}

/// On a steady writeback the estimate converges to the rate the device completes it at, and
/// `writeback_chunk_size()` follows: 64 pages written back per jiffy (16,000 pages/s at HZ=250,
/// below `INIT_BW`'s 25,600) through `do_writepages()` (`filemap_fdatawrite_range()`) for 30
/// simulated seconds. The chunk starts at `INIT_BW / 2` rounded up to `MIN_WRITEBACK_PAGES`
/// (13,312) and ends at half the measured rate, 8,000 rounded up (8,192).
#[test]
fn the_bandwidth_estimate_follows_a_steady_writeback() {
    use crate::fs::fs_writeback::{WbReason, WbWork};
    let r = rig_with(None, None);
    let hz = u64::from(r.kernel.config().hz);
    let cx = r.task();
    let irq = r.kernel.cpu(r.irq_cpu).unwrap();
    let work = WbWork {
        nr_pages: u64::MAX,
        for_background: true,
        for_kupdate: false,
        reason: WbReason::Background,
    };
    let chunk = || {
        let m = r.mapping.inner.lock();
        r.mapping.writeback_chunk_size(&m, &work)
    };
    assert_eq!(chunk(), 13_312);
    const PER_JIFFY: u64 = 64;
    let data = pattern(PER_JIFFY, 7);
    for j in 0..30 * hz {
        let pos = (j * PER_JIFFY % 1024) * PAGE_SIZE as u64;
        let p = r
            .mapping
            .generic_perform_write(&cx, pos, &data, NONE)
            .unwrap();
        assert_eq!(p.blocked, None);
        let end = pos + data.len() as u64 - 1;
        r.disk
            .submit(r.mapping.filemap_fdatawrite_range(&cx, pos, end));
        r.disk.complete_all_in(&irq, r.completion);
        r.kernel.advance_jiffies(1);
    }
    let want = PER_JIFFY * hz;
    let avg = r.mapping.avg_write_bandwidth();
    assert!(
        avg.abs_diff(want) * 100 <= want,
        "avg_write_bandwidth {avg} pages/s, device {want}"
    );
    assert_eq!(chunk(), (avg / 2 + 1024) / 1024 * 1024);
    assert_eq!(chunk(), 8192);
}

/// `do_writepages()`'s estimator bookkeeping: `wb_update_bandwidth()` once more than
/// `BANDWIDTH_INTERVAL` (50 jiffies) passed since the stamp, not at exactly 50;
/// `wb_bandwidth_estimate_start()` restarts the stamps instead (the estimate unchanged) after
/// more than `HZ` (250) idle with nothing under writeback, not at exactly 250, and not while a
/// writeback is in flight however long the idle. Catches an update at every call or never, a
/// restart that never happens or ignores the writeback in flight.
#[test]
fn do_writepages_updates_the_bandwidth_each_interval_and_restarts_after_idle() {
    let r = rig_with(None, None);
    let cx = r.task();
    let irq = r.kernel.cpu(r.irq_cpu).expect("CPU1");
    // Write `n` pages at `first` and start their writeback; the bios come back unsubmitted.
    let write_back = |first: u64, n: u64| {
        let pos = first * PAGE_SIZE as u64;
        let p = r
            .mapping
            .generic_perform_write(&cx, pos, &pattern(n, 3), NONE)
            .unwrap();
        assert_eq!(p.blocked, None);
        let end = pos + n * PAGE_SIZE as u64 - 1;
        r.mapping.filemap_fdatawrite_range(&cx, pos, end)
    };
    let done = |bios| {
        r.disk.submit(bios);
        r.disk.complete_all_in(&irq, r.completion);
    };
    let bw = || r.mapping.inner.lock().wb.bw;
    r.kernel.advance_jiffies(50);
    done(write_back(0, 8));
    assert_eq!(bw().bw_time_stamp, 0, "not due at exactly the interval");
    r.kernel.advance_jiffies(1);
    done(write_back(8, 8));
    assert_eq!(
        (bw().bw_time_stamp, bw().written_stamp),
        (51, 8),
        "due after it"
    );
    // Exactly HZ idle: an update, not a restart.
    r.kernel.advance_jiffies(250);
    let before = bw().write_bandwidth;
    done(write_back(16, 8));
    assert_eq!(bw().bw_time_stamp, 301);
    assert_ne!(bw().write_bandwidth, before, "updated over the 250 jiffies");
    // More than HZ idle with nothing under writeback: a restart, the estimate kept.
    r.kernel.advance_jiffies(251);
    let before = bw().write_bandwidth;
    done(write_back(24, 8));
    assert_eq!((bw().bw_time_stamp, bw().written_stamp), (552, 24));
    assert_eq!(
        bw().write_bandwidth,
        before,
        "restarted, not averaged over the idle time"
    );
    // A writeback still in flight: no restart however long, the update averages it in.
    let in_flight = write_back(32, 8);
    r.kernel.advance_jiffies(300);
    let before = bw().write_bandwidth;
    done(write_back(40, 8));
    assert_eq!(bw().bw_time_stamp, 852);
    assert_ne!(
        bw().write_bandwidth,
        before,
        "updated with a writeback in flight"
    );
    done(in_flight);
}

/// A v7 iomap rig of 1024 pages under a memcg limit of `limit` pages on cgroup v1 or v2.
fn rig_cgroup(limit: u64, v2: bool) -> Rig {
    Rig::with(V7, WritebackPath::Iomap, |c| {
        let c = c.with_nr_pages(1024).with_limit(limit);
        if v2 {
            c.with_cgroup_v2()
        } else {
            c
        }
    })
}

/// `mdtc_calc_avail()`: the memcg's file pages plus its headroom, the headroom no more than the
/// clean memory outside the memcg.
#[test]
fn a_memcg_domain_counts_its_pages_and_headroom_up_to_the_clean_memory_outside() {
    use super::page_writeback::mdtc_calc_avail;
    // Plenty of clean memory outside: file pages + the whole headroom.
    assert_eq!(mdtc_calc_avail(1000, 500, 200, 10_000, 200), 1500);
    // Global clean 1000 - the memcg's own clean 800 = 200 outside: the headroom is capped.
    assert_eq!(mdtc_calc_avail(1000, 500, 200, 1200, 200), 1200);
    // More dirty than file pages (writeback counted): no clean pages of its own.
    assert_eq!(mdtc_calc_avail(100, 50, 300, 10_000, 300), 150);
    // Nothing clean anywhere: the file pages alone.
    assert_eq!(mdtc_calc_avail(1000, 500, 1000, 1000, 1000), 1000);
}

/// On cgroup v2 a memcg with a limit is a dirty domain of its own: with a 512-page limit on a
/// 24 GiB machine its limits are 20% and 10% of 512 (the headroom fits in the machine's clean
/// memory), and a writer is paused at the memcg's limit, where on cgroup v1 (no memcg domain)
/// the global limits are far away and it is not. Catches a `balance_dirty_pages()` that ignores
/// the memcg's domain.
#[test]
fn on_cgroup_v2_a_writer_is_throttled_at_its_memcgs_dirty_limit() {
    let v1 = rig_cgroup(512, false);
    assert_eq!(
        v1.mapping.memcg_dirty_limits(),
        None,
        "cgroup v1: no memcg domain"
    );
    let r = rig_cgroup(512, true);
    let l = r.mapping.memcg_dirty_limits().expect("a memcg domain");
    assert_eq!((l.bg_thresh, l.thresh, l.freerun()), (51, 102, 76));
    let data = pattern(300, 11);
    for (rig, v2) in [(&v1, false), (&r, true)] {
        let cx = rig.task();
        let p = rig
            .mapping
            .generic_perform_write(&cx, 0, &data, NONE)
            .unwrap();
        let pages = (p.written / PAGE_SIZE) as u64;
        let paused = matches!(p.blocked, Some(Blocked::DirtyThrottle { .. }));
        if v2 {
            assert!(paused, "v2: {:?}", p.blocked);
            assert!(
                (l.freerun() + 1..l.thresh + 32).contains(&pages),
                "paused past the memcg's freerun ceiling: {pages}"
            );
            assert_eq!(rig.mapping.stats().dirty_throttled, 1);
        } else {
            assert!(!paused, "v1: {pages} pages");
            assert_eq!(rig.mapping.stats().dirty_throttled, 0);
        }
        // Either way the whole write lands, with the flusher and completions.
        finish_paused_write(rig, &cx, p.written, &data);
    }
}

/// On cgroup v2 the flusher's background writeback (`wb_over_bg_thresh()`) runs while the
/// memcg's dirty pages are over the memcg's background threshold: 100 dirty pages in a
/// 512-page memcg (the check at 96) are past its freerun ceiling (76), so the writer wakes the
/// flusher, which writes them down to at most 51. On cgroup v1 the same pages are far under the
/// global thresholds and stay dirty.
#[test]
fn on_cgroup_v2_background_writeback_goes_down_to_the_memcgs_threshold() {
    for v2 in [false, true] {
        let r = rig_cgroup(512, v2);
        let cx = r.task();
        let p = r
            .mapping
            .generic_perform_write(&cx, 0, &pattern(100, 12), NONE)
            .unwrap();
        assert_eq!(p.blocked, None, "under the memcg's dirty limit (102)");
        run_deferred(&r.kernel);
        let s = r.mapping.stats();
        if v2 {
            assert!(s.flusher_wakeups > 0 && s.flusher_pages > 0, "{s:?}");
            assert!(
                s.nr_dirty <= 51,
                "written down to the memcg's threshold: {s:?}"
            );
        } else {
            assert_eq!((s.flusher_pages, s.nr_dirty), (0, 100), "{s:?}");
        }
    }
}

/// Memcg reclaim that meets only dirty folios wakes the flusher on both hierarchies; cgroup v1
/// then throttles (`reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)`: the caller waits), while on
/// cgroup v2 `writeback_throttling_sane()` is true and it does not (its memcg's dirty domain
/// throttles the writer instead). Catches v2 reclaim throttling as v1's does.
#[test]
fn on_cgroup_v2_reclaim_meeting_dirty_folios_does_not_throttle() {
    for v2 in [false, true] {
        let r = rig_cgroup(32, v2);
        let cx = r.task();
        // Fill the memcg with dirty folios (on v2 the writer is paused at the memcg's limit; the
        // flusher's work it queued is not run here, so they stay dirty).
        let _ = r
            .mapping
            .generic_perform_write(&cx, 0, &pattern(32, 13), NONE)
            .unwrap();
        let dirty = r.mapping.stats().nr_dirty;
        assert!(
            dirty > 0 && dirty == r.mapping.stats().nr_cached,
            "v2 {v2}: {dirty} dirty"
        );
        let before = r.mapping.stats();
        let must_wait = {
            let mut m = r.mapping.inner.lock();
            let mut submit = Vec::new();
            r.mapping.try_to_free_mem_cgroup_pages(
                &mut m,
                &cx,
                32,
                GfpFlags::GFP_KERNEL,
                &mut submit,
            );
            std::mem::take(&mut m.reclaim_must_wait)
        };
        let d = r.mapping.stats().since(&before);
        assert_eq!(d.reclaim_evicted, 0, "v2 {v2}: nothing clean: {d:?}");
        assert!(
            d.flusher_wakeups > 0 || v2,
            "v2 {v2}: the flusher is woken: {d:?}"
        );
        if v2 {
            assert_eq!((d.reclaim_throttled, must_wait), (0, false), "{d:?}");
        } else {
            assert_eq!((d.reclaim_throttled, must_wait), (1, true), "{d:?}");
        }
    }
}

/// `writeback:balance_dirty_pages`'s fields as `TP_fast_assign()` computes them (6.18's
/// include/trace/events/writeback.h), by hand: the setpoints, the rate limits in KB/s, the times
/// in ms, `think` from the last pause's end (0 when never set, negative when it is ahead), a
/// negative (carried-over) pause. Catches a field in pages where the kernel prints KB/s,
/// jiffies where it prints ms, a setpoint from `thresh` instead of the hard limit, or a wb
/// setpoint from `thresh` instead of `wb_thresh`. (`min(pause, 0)` is the caller's: here the
/// pause is given as the call site passes it.)
#[test]
fn the_balance_dirty_pages_tracepoint_prints_the_kernels_fields() {
    use super::dirty_ratelimit::DirtyThrottleControl;
    use super::page_writeback::BdpTrace;
    let dtc = DirtyThrottleControl {
        dirty: 3000,
        thresh: 4000,
        bg_thresh: 2000,
        limit: 4100,
        wb_dirty: 2900,
        wb_thresh: 3000,
    };
    let t = |when: Option<u64>, pause: i64| {
        BdpTrace {
            dtc: &dtc,
            dirty_ratelimit: 25_600,
            task_ratelimit: 12_800,
            dirtied: 32,
            dirtied_pause: 16,
            dirty_paused_when: when,
            period: 3,
            pause,
            start_time: 100,
            jiffies: 110,
            hz: 250,
        }
        .fields((7, 0))
    };
    // freerun 3000, setpoint (4100 + 3000) / 2 = 3550, wb_setpoint 3550 * 3000 / 4001 = 2661.
    let head = "bdi 7:0: limit=4100 setpoint=3550 dirty=3000 wb_setpoint=2661 wb_dirty=2900 \
                dirty_ratelimit=102400 task_ratelimit=51200 dirtied=32 dirtied_pause=16 paused=40";
    assert_eq!(
        t(Some(105), 2),
        format!("{head} pause=8 period=12 think=20 cgroup_ino=1")
    );
    assert_eq!(
        t(None, 2),
        format!("{head} pause=8 period=12 think=0 cgroup_ino=1")
    );
    assert_eq!(
        t(Some(113), -3),
        format!("{head} pause=-12 period=12 think=-12 cgroup_ino=1")
    );
}

/// `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)` is woken as 6.18's `__acct_reclaim_writeback()`
/// wakes it: by the page that takes `NR_THROTTLED_WRITTEN` past `SWAP_CLUSTER_MAX` per sleeper
/// since the first sleeper began (the 33rd with one sleeper, the 65th with two), not by an
/// earlier completion; pages that ended writeback while nobody slept do not count. Catches a
/// sleep woken by any completion (the `bug-reclaim-throttle-any-completion` twin, the model
/// before this rule) and a count that starts before the sleep.
#[test]
#[cfg_attr(feature = "bug-reclaim-throttle-any-completion", should_panic)]
fn reclaim_throttle_wakes_past_swap_cluster_max_pages_per_sleeper() {
    let r = rig_with(Some(32), None);
    let begin = || r.mapping.reclaim_throttle_begin();
    let end_writeback = |n: u64| {
        let mut m = r.mapping.inner.lock();
        for _ in 0..n {
            AddressSpace::acct_reclaim_writeback(&mut m, 1);
        }
    };
    // Nobody asleep: nothing counts.
    end_writeback(100);
    let a = begin();
    end_writeback(SWAP_CLUSTER_MAX);
    assert!(
        !r.mapping.reclaim_throttle_woken(&a),
        "32 pages do not wake it"
    );
    end_writeback(1);
    assert!(
        r.mapping.reclaim_throttle_woken(&a),
        "the 33rd page wakes it"
    );
    let cx = r.task();
    r.mapping.reclaim_throttle_end(&cx, a);
    // Two sleepers, the second while the first sleeps: 64 pages since the first began are not
    // enough, the 65th wakes both.
    let b = begin();
    end_writeback(10);
    let c = begin();
    end_writeback(2 * SWAP_CLUSTER_MAX - 10);
    assert!(!r.mapping.reclaim_throttle_woken(&b) && !r.mapping.reclaim_throttle_woken(&c));
    end_writeback(1);
    assert!(r.mapping.reclaim_throttle_woken(&b) && r.mapping.reclaim_throttle_woken(&c));
    r.mapping.reclaim_throttle_end(&cx, b);
    r.mapping.reclaim_throttle_end(&cx, c);
    let s = r.mapping.stats();
    assert_eq!(s.nr_writeback_throttled, 0, "every sleeper left");
    assert_eq!(
        (s.reclaim_throttle_sleeps, s.reclaim_throttle_woken),
        (3, 3)
    );
}

/// A `reclaim_throttle()` sleep ends with one `vmscan:mm_vmscan_throttled` line in 6.18's
/// format, its `usect_delayed` the jiffies slept (`timeout - ret`) in microseconds and never more
/// than the `HZ/10` timeout: 7 jiffies for a sleep ended after 7, the whole 25 (100 ms at
/// HZ=250) for one ended after 40, however late the sleeper ran again. Catches a delay in
/// jiffies, one not capped at the timeout, and a sleep ended without its line.
#[test]
fn a_reclaim_throttle_sleep_ends_with_its_mm_vmscan_throttled_line() {
    use crate::kernel::trace::tests::{capture, check_formats};
    let r = rig_with(Some(32), None);
    let cx = r.task();
    let hz = u64::from(r.kernel.config().hz);
    assert_eq!(hz, 250, "the default CONFIG_HZ");
    let begin = || r.mapping.reclaim_throttle_begin();
    let events = capture(|| {
        let a = begin();
        assert_eq!(a.timeout, 25);
        // calc_index() rounds the timer's expiry up a jiffy: it fires at the 26th tick.
        assert_eq!(
            (a.expires(), a.fires_at),
            (a.start_jiffies + 25, a.start_jiffies + 26)
        );
        r.kernel.advance_jiffies(7);
        r.mapping.reclaim_throttle_end(&cx, a);
        let b = begin();
        r.kernel.advance_jiffies(40);
        r.mapping.reclaim_throttle_end(&cx, b);
    });
    let lines: Vec<&str> = events
        .iter()
        .filter(|e| e.tracepoint == "mm_vmscan_throttled")
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(
        lines,
        [
            "mm_vmscan_throttled: nid=0 usec_timeout=100000 usect_delayed=28000 reason=VMSCAN_THROTTLE_WRITEBACK",
            "mm_vmscan_throttled: nid=0 usec_timeout=100000 usect_delayed=100000 reason=VMSCAN_THROTTLE_WRITEBACK",
        ]
    );
    let bad = check_formats(&events);
    assert!(bad.is_empty(), "{bad:?}");
    let s = r.mapping.stats();
    assert_eq!(
        (
            s.reclaim_throttle_sleeps,
            s.reclaim_throttle_woken,
            s.reclaim_throttle_jiffies
        ),
        (2, 0, 32)
    );
}
