//! `mm/page-writeback.c` and `mm/filemap.c`'s writeback entry points: `writeback_iter()` over a
//! range (`folio_clear_dirty_for_io()` + `folio_start_writeback()`), `filemap_fdatawrite_range()`
//! (`WB_SYNC_NONE`), `filemap_fdatawrite_range_kick()` (`IOCB_DONTCACHE`'s kick),
//! `filemap_write_and_wait_range()` (`fsync`), and the dirty/writeback accounting. The folios
//! go to the path's `->writepages()` (`iomap_writepages()` or `block_write_full_folio()`).
//!
//! Dirty throttling: `domain_dirty_limits()` of the global domain (`vm.dirty_ratio` 20 and
//! `vm.dirty_background_ratio` 10 of the configured machine's dirtyable memory,
//! [`PageCacheConfig::dirtyable_pages`](super::dontcache::PageCacheConfig::dirtyable_pages)) and
//! `balance_dirty_pages_ratelimited()` → `balance_dirty_pages()` for buffered writes. On cgroup
//! v1 (the default, see [`super::memcontrol`]) the memcg has no dirty domain, so only the global
//! one applies. On cgroup v2 ([`PageCacheConfig::cgroup_v2`](super::dontcache::PageCacheConfig::cgroup_v2))
//! a memcg with a limit is a domain of its own (`mdtc`): `mdtc_calc_avail()` gives it the
//! memcg's file pages plus the headroom to its limit (no more than the clean memory outside it),
//! `domain_dirty_limits()` the same ratios of that; a dirtier runs free only while both domains
//! are under their freerun ceilings, is paused when either reaches its limit, and the flusher's
//! background writeback goes on while either is over its background threshold
//! (`wb_over_bg_thresh()`).
//!
//! **Simplification of `balance_dirty_pages()`**: the kernel's position-ratio control (a pause
//! per call sized from `pos_ratio` and the write bandwidth, between the freerun ceiling and the
//! limit) is not modelled. Here a dirtier at or under the freerun ceiling `(thresh + bg_thresh) /
//! 2` runs free; above the background threshold it wakes the flusher
//! (`wb_start_background_writeback()`); at or above `thresh` it pauses until writeback
//! completes ([`Blocked::DirtyThrottle`]) — the `dirty_exceeded` hard limit. Between the ceiling
//! and the limit it is not slowed.
//!
//! **The write-bandwidth estimator** (`wb->write_bandwidth`, `wb->avg_write_bandwidth`, which
//! `writeback_chunk_size()` reads): `do_writepages()` calls [`AddressSpace::wb_bandwidth_estimate_start`]
//! first (after more than `HZ` idle with nothing under writeback, the stamps restart so idle time
//! is not averaged in) and `wb_update_bandwidth()` after, once `BANDWIDTH_INTERVAL` passed since
//! the last update; `balance_dirty_pages()` above the freerun ceiling does the same.
//! [`wb_update_write_bandwidth`] is the kernel's arithmetic: the pages whose writeback ended since
//! the last update (`WB_WRITTEN`) over the elapsed jiffies, weighted into `write_bandwidth` over a
//! period of `roundup_pow_of_two(3 * HZ)`, then `avg_write_bandwidth` moved an eighth of the way
//! toward it when both agree on the direction. Not modelled: the delayed `wb->bw_dwork` that
//! `wb_inode_writeback_end()` queues `BANDWIDTH_INTERVAL` after the inode's last writeback ends
//! (it matters for bursts, not for the steady writeback of the presets), and the
//! `update_ratelimit` half of `__wb_update_bandwidth()` (`dirty_ratelimit` feeds only the
//! position-ratio control, which is not modelled either).
//!
//! **Simplification of the rate limit**: the kernel counts only clean→dirty transitions
//! (`folio_account_dirtied()` bumps `current->nr_dirtied`), and after a freerun pass it sets
//! `current->nr_dirtied_pause` to `dirty_poll_interval(dirty, thresh)`,
//! `1 << (ilog2(thresh - dirty) >> 1)`: about the square root of the distance to the dirty
//! threshold (1,024 pages on the model's idle 24 GiB machine, whose threshold is 1,258,291
//! pages). The model counts every page a
//! write copies, redirtied or not, and checks every [`DIRTY_RATELIMIT_PAGES`]. It only checks
//! more often than the kernel far from the limits, which is harmless for the seed's presets on
//! cgroup v1: they stay far under the freerun ceiling and are never throttled. Near a limit (a
//! cgroup v2 memcg's) the kernel polls more often than every 32 pages (`dirty_poll_interval()`
//! shrinks with the distance, and `dirty_exceeded` caps it at 8), so the model's writer may
//! overshoot the limit by up to 31 pages before it pauses.

// Bios travel boxed everywhere in bio-core (`Box<Bio>` moves from submitter to driver to
// `bio_endio()`); a list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

use super::dontcache::WritebackPath;
use super::filemap::{AddressSpace, Blocked, Mapping, SyncProgress, PAGE_SIZE};
use crate::block::Bio;
use crate::errno::Errno;
use crate::fs::{buffer, iomap};
use crate::kernel::Cpu;

/// A folio `folio_start_writeback()` put under writeback, for the path to build bios from.
#[derive(Debug, Clone)]
pub(crate) struct WbFolio {
    pub(crate) index: u64,
    pub(crate) pfn: u64,
    /// The bytes the bio carries (snapshot at submission).
    pub(crate) data: Vec<u8>,
    /// `folio_test_dropbehind()`.
    pub(crate) dropbehind: bool,
    /// The block is an unwritten extent (`IOMAP_UNWRITTEN`).
    pub(crate) unwritten: bool,
}

/// `ratelimit_pages` / the initial `current->nr_dirtied_pause` (`128 >> (PAGE_SHIFT - 10)`):
/// a dirtier calls `balance_dirty_pages()` after dirtying this many pages.
pub const DIRTY_RATELIMIT_PAGES: u64 = 32;

/// `BANDWIDTH_INTERVAL`: `max(HZ / 5, 1)` jiffies (200 ms) between bandwidth updates.
pub fn bandwidth_interval(hz: u64) -> u64 {
    (hz / 5).max(1)
}

/// `WB_BANDWIDTH_IDLE_JIF`: `HZ`; after this long without writeback the estimate restarts.
pub fn wb_bandwidth_idle_jif(hz: u64) -> u64 {
    hz
}

/// `wb_update_write_bandwidth(wb, elapsed, written)`: the rate of `written - written_stamp` pages
/// over `elapsed` jiffies, weighted into `write_bandwidth` over the period
/// `roundup_pow_of_two(3 * HZ)` (an elapsed longer than the period replaces both estimates),
/// then `avg_write_bandwidth` moved by an eighth toward `write_bandwidth` only when the new
/// estimate does not contradict the move (a filter for spikes), kept at least 1.
pub(crate) fn wb_update_write_bandwidth(
    bw: &mut crate::fs::fs_writeback::WbBandwidth,
    elapsed: u64,
    written: u64,
    hz: u64,
) {
    let period = (3 * hz).next_power_of_two();
    let mut avg = bw.avg_write_bandwidth;
    let old = bw.write_bandwidth;
    // `written` may be below the stamp after a redirty (the kernel guards the underflow).
    let mut rate = (written - written.min(bw.written_stamp)).saturating_mul(hz);
    if elapsed > period {
        rate /= elapsed;
        avg = rate;
    } else {
        rate = rate.saturating_add(old.saturating_mul(period - elapsed)) >> period.trailing_zeros();
        if avg > old && old >= rate {
            avg -= (avg - old) >> 3;
        }
        if avg < old && old <= rate {
            avg += (old - avg) >> 3;
        }
    }
    bw.write_bandwidth = rate;
    bw.avg_write_bandwidth = avg.max(1);
}

/// `struct dirty_throttle_control`'s thresholds of one domain, in pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirtyLimits {
    /// `bg_thresh`: background writeback starts above it.
    pub bg_thresh: u64,
    /// `thresh`: dirtiers are throttled at it.
    pub thresh: u64,
}

impl DirtyLimits {
    /// `dirty_freerun_ceiling()`: below it a dirtier is not throttled at all.
    pub fn freerun(&self) -> u64 {
        (self.thresh + self.bg_thresh) / 2
    }
}

/// `mdtc_calc_avail()`: the memory a memcg's dirty domain may count on, its file pages plus its
/// headroom to the limit, the headroom no more than the clean memory outside the memcg (the
/// global domain's available memory minus its dirty pages and the memcg's clean ones).
pub fn mdtc_calc_avail(
    filepages: u64,
    headroom: u64,
    m_dirty: u64,
    g_avail: u64,
    g_dirty: u64,
) -> u64 {
    let clean = filepages - filepages.min(m_dirty);
    let global_clean = g_avail - g_avail.min(g_dirty);
    let other_clean = global_clean - global_clean.min(clean);
    filepages + headroom.min(other_clean)
}

impl AddressSpace {
    /// `domain_dirty_limits()` of the global domain: `dirty_ratio` and `dirty_background_ratio`
    /// percent of `global_dirtyable_memory()` (the configured machine's memory; the kernel
    /// subtracts reserves and counts free + file LRU pages, which on an idle machine is most of
    /// it). A background ratio at or above the dirty ratio becomes half of it, as there.
    pub fn domain_dirty_limits(&self) -> DirtyLimits {
        self.domain_dirty_limits_of(self.config.dirtyable_pages)
    }

    /// `domain_dirty_limits()` of a domain with `avail` pages available.
    fn domain_dirty_limits_of(&self, avail: u64) -> DirtyLimits {
        let c = &self.config;
        let mut bg = c.dirty_background_ratio;
        if bg >= c.dirty_ratio {
            bg = c.dirty_ratio / 2;
        }
        DirtyLimits {
            bg_thresh: avail * bg / 100,
            thresh: avail * c.dirty_ratio / 100,
        }
    }

    /// `balance_dirty_pages_ratelimited()`: once the dirtier dirtied [`DIRTY_RATELIMIT_PAGES`]
    /// since its last check, `balance_dirty_pages()` (see the module's simplifications: the
    /// kernel counts clean→dirty transitions only and polls every `dirty_poll_interval()` pages
    /// after a freerun pass; the model counts every copied page and polls every 32).
    /// Returns whether the dirtier must pause ([`Blocked::DirtyThrottle`]).
    pub(crate) fn balance_dirty_pages_ratelimited(&self, m: &mut Mapping) -> bool {
        if m.wb.nr_dirtied < DIRTY_RATELIMIT_PAGES {
            return false;
        }
        self.balance_dirty_pages(m)
    }

    /// The memcg's dirty domain (`mdtc`) on cgroup v2, `None` on cgroup v1 or without a limit,
    /// as `balance_dirty_pages()` computes it (dirty pages counted with those under writeback).
    pub fn memcg_dirty_limits(&self) -> Option<DirtyLimits> {
        let m = self.inner.lock();
        self.memcg_domain(&m, true)
    }

    /// `domain_dirty_avail(mdtc, include_writeback)` and `domain_dirty_limits(mdtc)` under the
    /// mapping's lock: `mem_cgroup_wb_stats()` (the file pages are every page charged, as the
    /// model's memcg charges only page cache; the headroom is the limit minus the usage: one
    /// memcg with `memory.max` only, where the kernel takes the least of `memory.max` and
    /// `memory.high` over the memcg and its ancestors; one mapping in one memcg, so its dirty
    /// and writeback pages are the machine's too), then [`mdtc_calc_avail`] against the global
    /// domain's, then the global ratios of that. The kernel gives every non-root memcg's
    /// writeback an `mdtc`; without a limit the model has none, which is the same here since the
    /// mapping is the only dirtier. Rounding: `avail * ratio / 100`, where the kernel scales the
    /// ratio to per-`PAGE_SIZE` first (a page or two lower on a 61 MiB memcg), as for the global
    /// domain.
    pub(crate) fn memcg_domain(&self, m: &Mapping, include_writeback: bool) -> Option<DirtyLimits> {
        if !self.config.cgroup_v2 {
            return None;
        }
        let limit = m.memcg.limit_pages?;
        let filepages = m.memcg.usage_pages;
        let headroom = limit.saturating_sub(filepages);
        let mut dirty = m.stats.nr_dirty;
        if include_writeback {
            dirty += m.stats.nr_writeback;
        }
        let avail = mdtc_calc_avail(
            filepages,
            headroom,
            dirty,
            self.config.dirtyable_pages,
            dirty,
        );
        Some(self.domain_dirty_limits_of(avail))
    }

    /// `balance_dirty_pages()`: `NR_FILE_DIRTY + NR_WRITEBACK` against the global limits and, on
    /// cgroup v2, the memcg's ([`Self::memcg_domain`]).
    pub(crate) fn balance_dirty_pages(&self, m: &mut Mapping) -> bool {
        let l = self.domain_dirty_limits();
        let ml = self.memcg_domain(m, true);
        let nr_dirty = m.stats.nr_dirty;
        // One mapping in one memcg: the memcg's dirty and writeback pages are the machine's.
        let dirty = nr_dirty + m.stats.nr_writeback;
        let in_progress = m.wb.busy();
        if nr_dirty > l.bg_thresh && !in_progress {
            self.wb_start_background_writeback(m);
        }
        // domain_dirty_freerun() of each domain: free only if every domain is.
        if dirty <= l.freerun() && ml.is_none_or(|ml| dirty <= ml.freerun()) {
            m.wb.nr_dirtied = 0;
            return false;
        }
        if !m.wb.busy() {
            // "Start writeback even when in laptop mode".
            self.wb_start_background_writeback(m);
        }
        // __wb_update_bandwidth(gdtc, mdtc, true) once BANDWIDTH_INTERVAL passed (its ratelimit
        // half is not modelled).
        self.wb_update_bandwidth_if_due(m);
        if dirty < l.thresh && ml.is_none_or(|ml| dirty < ml.thresh) {
            m.wb.nr_dirtied = 0;
            return false;
        }
        // The hard limit: pause until writeback brings it down (nr_dirtied stays, so the
        // next call checks again).
        m.stats.dirty_throttled += 1;
        true
    }

    /// `wb_bandwidth_estimate_start()`: after more than `WB_BANDWIDTH_IDLE_JIF` since the last
    /// update with no inode under writeback (`wb->writeback_inodes`; the model has one inode),
    /// restart the stamps, so the idle time is not taken for a slow device.
    pub(crate) fn wb_bandwidth_estimate_start(&self, m: &mut Mapping) {
        let now = self.kernel.jiffies();
        let hz = u64::from(self.kernel.config().hz);
        let bw = &mut m.wb.bw;
        if now.saturating_sub(bw.bw_time_stamp) > wb_bandwidth_idle_jif(hz)
            && m.stats.nr_writeback == 0
        {
            bw.written_stamp = bw.written;
            bw.bw_time_stamp = now;
        }
    }

    /// `wb_update_bandwidth()` → `__wb_update_bandwidth(gdtc, NULL, false)`: the write bandwidth
    /// over `max(now - bw_time_stamp, 1)` jiffies, then the stamps move to now.
    pub(crate) fn wb_update_bandwidth(&self, m: &mut Mapping) {
        let now = self.kernel.jiffies();
        let hz = u64::from(self.kernel.config().hz);
        let bw = &mut m.wb.bw;
        let elapsed = now.saturating_sub(bw.bw_time_stamp).max(1);
        let written = bw.written;
        wb_update_write_bandwidth(bw, elapsed, written, hz);
        bw.written_stamp = written;
        bw.bw_time_stamp = now;
    }

    /// `if (time_is_before_jiffies(wb->bw_time_stamp + BANDWIDTH_INTERVAL))
    /// wb_update_bandwidth(wb);`, as `do_writepages()` ends.
    fn wb_update_bandwidth_if_due(&self, m: &mut Mapping) {
        let hz = u64::from(self.kernel.config().hz);
        if m.wb.bw.bw_time_stamp + bandwidth_interval(hz) < self.kernel.jiffies() {
            self.wb_update_bandwidth(m);
        }
    }

    /// `do_writepages()`: [`Self::wb_bandwidth_estimate_start`], `->writepages()` of `indices`,
    /// then a bandwidth update if one is due.
    fn do_writepages(&self, m: &mut Mapping, cx: &Cpu, indices: Vec<u64>) -> Vec<Box<Bio>> {
        self.wb_bandwidth_estimate_start(m);
        let bios = self.start_writeback_indices(m, cx, indices);
        self.wb_update_bandwidth_if_due(m);
        bios
    }

    /// `wb->avg_write_bandwidth` in pages per second.
    pub fn avg_write_bandwidth(&self) -> u64 {
        self.inner.lock().wb.bw.avg_write_bandwidth
    }

    /// `do_writepages()` with `range_cyclic` and `nr_to_write = chunk` (the flusher's
    /// `WB_SYNC_NONE`): the dirty folios not under writeback from `mapping->writeback_index`
    /// to the end, at most `chunk`; the index moves past the last one written, or to 0 at the
    /// end (6.18's `writeback_iter()` does not wrap within a call; the flusher's next round
    /// starts from 0). Returns the bios and the pages written.
    pub(crate) fn writeback_range_cyclic(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        chunk: u64,
    ) -> (Vec<Box<Bio>>, u64) {
        // One pass from the index: writeback_iter() finding nothing resets the index and
        // returns; it does not wrap within the call.
        let start = m.wb.writeback_index;
        let indices: Vec<u64> = m
            .folios
            .range(start..)
            .filter(|(_, f)| f.flags.dirty && !f.flags.writeback)
            .map(|(i, _)| *i)
            .take(chunk as usize)
            .collect();
        let n = indices.len() as u64;
        if n == chunk && n > 0 {
            m.wb.writeback_index = indices[indices.len() - 1] + 1;
        } else {
            m.wb.writeback_index = 0;
        }
        if n > 0 {
            return (self.do_writepages(m, cx, indices), n);
        }
        (Vec::new(), 0)
    }

    /// `writeback_iter()` + `->writepages()` over the dirty folios of `first..=last` that are not
    /// already under writeback (`WB_SYNC_NONE` skips those).
    pub(crate) fn start_writeback_range(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        first: u64,
        last: u64,
    ) -> Vec<Box<Bio>> {
        if first > last {
            // An empty range (`lend < lstart`): nothing to write, as the kernel returns 0.
            return Vec::new();
        }
        let indices: Vec<u64> = m
            .folios
            .range(first..=last)
            .filter(|(_, f)| f.flags.dirty && !f.flags.writeback)
            .map(|(i, _)| *i)
            .collect();
        self.do_writepages(m, cx, indices)
    }

    /// `folio_clear_dirty_for_io()` + `folio_start_writeback()` on each of `indices` (ascending)
    /// that is dirty and not under writeback, then the path's `->writepages()`.
    pub(crate) fn start_writeback_indices(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        mut indices: Vec<u64>,
    ) -> Vec<Box<Bio>> {
        indices.sort_unstable();
        let mut wb = Vec::new();
        for index in indices {
            let unwritten = m.unwritten(index);
            let Some(f) = m.folios.get_mut(&index) else {
                continue;
            };
            if !f.flags.dirty || f.flags.writeback {
                continue;
            }
            f.flags.dirty = false;
            f.flags.writeback = true;
            wb.push(WbFolio {
                index,
                pfn: f.pfn,
                data: f.data.clone(),
                dropbehind: f.flags.dropbehind,
                unwritten,
            });
            m.stats.nr_dirty -= 1;
            m.stats.nr_writeback += 1;
            m.stats.writeback_pages += 1;
        }
        if m.stats.nr_dirty == 0 {
            // The inode is clean: off the dirty list (`inode->dirtied_when` restarts).
            m.wb.dirtied_when = None;
        }
        if wb.is_empty() {
            return Vec::new();
        }
        match self.config.path {
            WritebackPath::Iomap => iomap::iomap_writepages(self, m, cx, wb),
            WritebackPath::BufferHead => buffer::block_write_full_folios(self, m, cx, wb),
        }
    }

    /// `filemap_fdatawrite_range()` (`WB_SYNC_NONE`) of bytes `start..=end`: starts writeback of
    /// the dirty folios there and returns the bios to submit.
    pub fn filemap_fdatawrite_range(&self, cx: &Cpu, start: u64, end: u64) -> Vec<Box<Bio>> {
        let mut m = self.inner.lock();
        self.start_writeback_range(&mut m, cx, start / PAGE_SIZE as u64, end / PAGE_SIZE as u64)
    }

    /// `filemap_fdatawrite_range_kick()`: what `generic_write_sync()` does for `IOCB_DONTCACHE`
    /// (the same `WB_SYNC_NONE` writeback, without waiting).
    pub fn filemap_fdatawrite_range_kick(&self, cx: &Cpu, start: u64, end: u64) -> Vec<Box<Bio>> {
        self.filemap_fdatawrite_range(cx, start, end)
    }

    /// `filemap_write_and_wait_range()` (`fsync`'s data part, `WB_SYNC_ALL`) of bytes
    /// `start..=end`: starts writeback of the dirty folios and reports the first folio still under
    /// writeback. Call again after completing the bios until `blocked` is `None`.
    pub fn filemap_write_and_wait_range(&self, cx: &Cpu, start: u64, end: u64) -> SyncProgress {
        if end < start {
            // filemap_write_and_wait_range(): `if (lend < lstart) return 0;`.
            return SyncProgress {
                submit: Vec::new(),
                blocked: None,
                error: None,
            };
        }
        let (first, last) = (start / PAGE_SIZE as u64, end / PAGE_SIZE as u64);
        let mut m = self.inner.lock();
        let submit = self.start_writeback_range(&mut m, cx, first, last);
        let blocked = m
            .folios
            .range(first..=last)
            .find(|(_, f)| f.flags.writeback || f.flags.dirty)
            .map(|(i, _)| Blocked::Writeback(*i));
        // filemap_check_errors(): reported once the wait is over.
        let error = (blocked.is_none() && std::mem::take(&mut m.as_eio)).then_some(Errno::EIO);
        SyncProgress {
            submit,
            blocked,
            error,
        }
    }

    /// `vfs_fsync()` of the whole device.
    pub fn fsync(&self, cx: &Cpu) -> SyncProgress {
        let end = self.i_size().saturating_sub(1);
        self.filemap_write_and_wait_range(cx, 0, end)
    }

    /// `iomap_finish_ioend_buffered()` / `end_buffer_async_write()`: ends writeback of every
    /// folio of a completed ioend (`ok`: the bio succeeded; an unwritten ioend's blocks become
    /// written, the extent conversion). `merged_regular`: the regular folios the bio carried
    /// with `BIO_COMPLETE_IN_TASK` (counted when they end in task context).
    pub(crate) fn finish_ioend(
        &self,
        cx: &Cpu,
        folios: &[(u64, u64)],
        ok: bool,
        unwritten: bool,
        merged_regular: u64,
    ) {
        {
            let mut m = self.inner.lock();
            if !ok {
                m.stats.writeback_errors += 1;
                m.as_eio = true; // mapping_set_error()
            }
            if unwritten && ok {
                if let Some(w) = m.written.as_mut() {
                    w.extend(folios.iter().map(|(i, _)| *i));
                }
            }
            if cx.in_task() {
                m.stats.merged_regular_ended_in_task += merged_regular;
                m.stats.writeback_ended_in_task += 1;
            } else {
                m.stats.writeback_ended_in_irq += 1;
            }
        }
        for (index, pfn) in folios {
            self.folio_end_writeback(cx, *index, *pfn);
        }
    }
}
