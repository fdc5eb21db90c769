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
//! **`balance_dirty_pages()`** is the kernel's control, one loop iteration per call: under every
//! domain's freerun ceiling `(thresh + bg_thresh) / 2` the dirtier runs free and comes back
//! after `dirty_poll_interval()` pages; past it, each domain's position ratio
//! ([`super::dirty_ratelimit::wb_position_ratio`]) scales `wb->dirty_ratelimit` (moved every
//! `BANDWIDTH_INTERVAL` by `wb_update_dirty_ratelimit()` toward the rate that matches the
//! device's write bandwidth), the lower domain's `task_ratelimit` decides a pause of `HZ *
//! pages_dirtied / task_ratelimit` jiffies less the time since the last one, none under
//! `wb_min_pause()` and at most `wb_max_pause()` (`MAX_PAUSE`, 200 ms); at the limit
//! (`task_ratelimit` 0) the dirtier sleeps `max_pause` and goes round again until
//! `task_ratelimit` is not 0 (`dirty_ratelimit * pos_ratio >= 1024`, which near the limit may
//! take longer than getting under it) or the wb has no more than `wb_stat_error()` dirty pages. The pause is a timed sleep
//! ([`Blocked::DirtyThrottle`]'s `pause`), whatever completes meanwhile. The model's
//! departures: one wb of one mapping, so `wb_dirty` is the domain's dirty + writeback and
//! `wb_thresh` its threshold once any writeback ended in it (`__wb_calc_thresh()`'s completion
//! fraction is 1 for the only wb, 0 before its first completion, then raised to an eighth of
//! the room left as 6.14+ does); `hard_dirty_limit()` is
//! `thresh` (both domains' thresholds are constant in the model, so `dom->dirty_limit`, which
//! follows them, equals them); the dirtier's `nr_dirtied`/`nr_dirtied_pause`/
//! `dirty_paused_when` are the mapping's (one task writes); the per-CPU `bdp_ratelimits`
//! backstop is left out (`ratelimit_pages`, `dirty_thresh / (num_online_cpus() * 32)` pages:
//! 19,660 on the model's 24 GiB machine with 2 CPUs, forces a check once a CPU dirtied that
//! many; it would fire before `nr_dirtied_pause` only above about 10 GB/s of `dirty_ratelimit`
//! with 2 CPUs, since `wb_min_pause()` sets about 10 ms of it). `writeback:balance_dirty_pages`
//! fires where the kernel fires it (a pause carried over, and before each pause) with the live
//! 6.18 format's fields (`BdpTrace`); its `bdi` is the device's `MAJOR:MINOR`. `cgroup_ino` is
//! always 1, the root cgroup's inode: right on cgroup v1, while on cgroup v2 (the only runs that
//! throttle) the kernel's writes come from the memcg's own wb and it prints that memcg's kernfs
//! inode, which the model's memcg does not have (a departure).
//!
//! **The write-bandwidth estimator** (`wb->write_bandwidth`, `wb->avg_write_bandwidth`, which
//! `writeback_chunk_size()` reads): `do_writepages()` calls [`AddressSpace::wb_bandwidth_estimate_start`]
//! first (after more than `HZ` idle with nothing under writeback, the stamps restart so idle time
//! is not averaged in) and `wb_update_bandwidth()` after, once `BANDWIDTH_INTERVAL` passed since
//! the last update; `balance_dirty_pages()` above the freerun ceiling does the same with the
//! rate limit's half (`__wb_update_bandwidth(gdtc, mdtc, true)`: `wb_update_dirty_ratelimit()`
//! of each domain first).
//! [`wb_update_write_bandwidth`] is the kernel's arithmetic: the pages whose writeback ended since
//! the last update (`WB_WRITTEN`) over the elapsed jiffies, weighted into `write_bandwidth` over a
//! period of `roundup_pow_of_two(3 * HZ)`, then `avg_write_bandwidth` moved an eighth of the way
//! toward it when both agree on the direction. Not modelled: the delayed `wb->bw_dwork` that
//! `wb_inode_writeback_end()` queues `BANDWIDTH_INTERVAL` after the inode's last writeback ends
//! (it matters for bursts, not for the steady writeback of the presets).
//!
//! **The rate limit** (`balance_dirty_pages_ratelimited()`): `folio_account_dirtied()` counts
//! clean→dirty transitions into `current->nr_dirtied` and `WB_DIRTIED` (a redirtied folio is
//! free), and the dirtier calls `balance_dirty_pages()` once `nr_dirtied` reaches
//! `nr_dirtied_pause` (8 while `wb->dirty_exceeded`): 32 at first, then what the last call set.
//! The model checks before each folio's copy rather than after, so a pause due after a
//! syscall's last folio is taken at the next call.

// Bios travel boxed everywhere in bio-core (`Box<Bio>` moves from submitter to driver to
// `bio_endio()`); a list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

use super::dirty_ratelimit::{
    dirty_poll_interval, wb_max_pause, wb_min_pause, wb_position_ratio, wb_stat_error,
    wb_update_dirty_ratelimit, DirtyThrottleControl, RATELIMIT_CALC_SHIFT,
};
use super::dontcache::{PageCacheConfig, WritebackPath};
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

/// A `WB_SYNC_ALL` pass (`fsync()`'s `__filemap_fdatawrite_range()`) that met a dirty folio
/// still under writeback: `writeback_iter()` → `folio_prepare_writeback()` sleeps in
/// `folio_wait_writeback()` there, in the middle of the pass. The bios built so far stay where
/// the path keeps them: iomap's open ioend (`wpc->ioend`, submitted only when a folio cannot join
/// it or the pass ends), so the folios after the wait can still join it; buffer_head's bios were
/// each submitted (`submit_bh_wbc()` into the plug `blkdev_writepages()` holds, which the sleep
/// flushes). The pass writes the folios tagged `PAGECACHE_TAG_TOWRITE` when it began, as
/// `tag_pages_for_writeback()` does, not those dirtied during the sleep. The model's departures:
/// one pass per mapping (a call for another range sends out what a sleeping pass held, and a
/// second caller of the same range goes on with the first's pass, where each kernel pass keeps
/// its ioend to itself); the pass does not hold the folio lock it sleeps with, so the flusher may
/// write that folio meanwhile (the pass then finds it clean and goes on, as the kernel's does when
/// "somebody else wrote it for us"); a held folio's bytes are those of when its writeback began
/// (the kernel's bio points at the page, which a write during the sleep may still change without
/// stable pages); and the callers call again until the range is clean, where `fsync()` waits
/// once (`filemap_fdatawait_range()`).
#[derive(Debug)]
pub(crate) struct SyncPass {
    /// The range, in pages.
    first: u64,
    last: u64,
    /// Where the pass resumes: the folio it waits on.
    next: u64,
    /// The folios `tag_pages_for_writeback()` marked `PAGECACHE_TAG_TOWRITE` when the pass
    /// began (dirty then), ascending: the pass writes these and no folio dirtied after.
    towrite: Vec<u64>,
    /// iomap: the folios in the open ioend, under writeback, not yet in a bio.
    held: Vec<WbFolio>,
}

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

/// What `trace_balance_dirty_pages()` is given (include/trace/events/writeback.h, 6.18:
/// `TP_PROTO(wb, sdtc, dirty_ratelimit, task_ratelimit, dirtied, period, pause, start_time)`,
/// with `current`'s `nr_dirtied_pause` and `dirty_paused_when` as they are before the pause).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BdpTrace<'a> {
    pub(crate) dtc: &'a DirtyThrottleControl,
    pub(crate) dirty_ratelimit: u64,
    pub(crate) task_ratelimit: u64,
    pub(crate) dirtied: u64,
    pub(crate) dirtied_pause: u64,
    pub(crate) dirty_paused_when: Option<u64>,
    pub(crate) period: u64,
    pub(crate) pause: i64,
    pub(crate) start_time: u64,
    pub(crate) jiffies: u64,
    pub(crate) hz: u64,
}

impl BdpTrace<'_> {
    /// The event's fields as its `print fmt` prints them, computed as `TP_fast_assign()` does:
    /// `setpoint = (limit + freerun) / 2`, `wb_setpoint = setpoint * wb_thresh / (thresh + 1)`,
    /// the rate limits in KB/s (`KBps()`: pages << 2), times in ms (`* 1000 / HZ`), `think` 0
    /// while `dirty_paused_when` was never set. `bdi` is the device's `MAJOR:MINOR`; `cgroup_ino`
    /// is 1, the root cgroup's inode (on cgroup v2 the kernel prints the memcg's, which the model
    /// does not have: see the module docs).
    pub(crate) fn fields(&self, dev: (u32, u32)) -> String {
        let d = self.dtc;
        let setpoint = (d.limit + d.freerun()) / 2;
        let wb_setpoint = setpoint * d.wb_thresh / (d.thresh + 1);
        let ms = |j: i64| j * 1000 / self.hz as i64;
        let think = self
            .dirty_paused_when
            .map_or(0, |w| ms(self.jiffies as i64 - w as i64));
        format!(
            "bdi {}:{}: limit={} setpoint={} dirty={} wb_setpoint={} wb_dirty={} \
             dirty_ratelimit={} task_ratelimit={} dirtied={} dirtied_pause={} paused={} pause={} \
             period={} think={} cgroup_ino={}",
            dev.0,
            dev.1,
            d.limit,
            setpoint,
            d.dirty,
            wb_setpoint,
            d.wb_dirty,
            self.dirty_ratelimit << 2,
            self.task_ratelimit << 2,
            self.dirtied,
            self.dirtied_pause,
            ms((self.jiffies - self.start_time) as i64),
            ms(self.pause),
            ms(self.period as i64),
            think,
            1
        )
    }
}

/// `trace_balance_dirty_pages()` (writeback:balance_dirty_pages), fired where the kernel fires
/// it: when a pause too short to sleep is carried over, and before each pause.
fn trace_balance_dirty_pages(cx: &Cpu, cfg: &PageCacheConfig, t: &BdpTrace<'_>) {
    crate::ktrace!(
        cx,
        target: "writeback",
        "balance_dirty_pages",
        "{}",
        t.fields(cfg.dev)
    );
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

    /// `balance_dirty_pages_ratelimited()`: once the dirtier took `nr_dirtied_pause` folios
    /// from clean to dirty since its last check (at most 8 while `wb->dirty_exceeded`), or while
    /// a loop paused at the limit goes on, `balance_dirty_pages()`. Returns the pause in
    /// jiffies if the dirtier must sleep ([`Blocked::DirtyThrottle`]).
    pub(crate) fn balance_dirty_pages_ratelimited(&self, m: &mut Mapping, cx: &Cpu) -> Option<u64> {
        if let Some(pages_dirtied) = m.wb.bdp_looping {
            return self.balance_dirty_pages(m, cx, pages_dirtied);
        }
        let mut ratelimit = m.wb.nr_dirtied_pause;
        if m.wb.dirty_exceeded {
            ratelimit = ratelimit.min(32 >> (12 - 10));
        }
        if m.wb.nr_dirtied < ratelimit {
            return None;
        }
        self.balance_dirty_pages(m, cx, m.wb.nr_dirtied)
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

    /// One domain's `struct dirty_throttle_control` for `balance_dirty_pages()`: its limits,
    /// `dirty` (dirty + writeback), and the one wb's share, `__wb_calc_thresh()`: the whole
    /// threshold once a writeback ended in the domain (its completion fraction is 1 for the only
    /// wb, 0 before), at least an eighth of the room left (6.14's floor for an inactive wb).
    pub(crate) fn dtc(&self, m: &Mapping, l: DirtyLimits, dirty: u64) -> DirtyThrottleControl {
        let mut wb_thresh = if m.wb.bw.written > 0 { l.thresh } else { 0 };
        if l.thresh > dirty {
            wb_thresh = wb_thresh.max((l.thresh - dirty) / 8);
        }
        DirtyThrottleControl {
            dirty,
            thresh: l.thresh,
            bg_thresh: l.bg_thresh,
            limit: l.thresh,
            wb_dirty: dirty,
            wb_thresh,
        }
    }

    /// `balance_dirty_pages(wb, pages_dirtied, 0)`, one iteration of its loop:
    /// `NR_FILE_DIRTY + NR_WRITEBACK` against the global domain and, on cgroup v2, the
    /// memcg's ([`Self::memcg_domain`]). Returns the pause in jiffies, or `None` when the
    /// dirtier goes on (free running, or a pause under the minimum carried over).
    pub(crate) fn balance_dirty_pages(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        pages_dirtied: u64,
    ) -> Option<u64> {
        let now = self.kernel.jiffies();
        let hz = u64::from(self.kernel.config().hz);
        if m.wb.bdp_looping.is_none() {
            m.wb.bdp_start_time = now;
        }
        let l = self.domain_dirty_limits();
        let ml = self.memcg_domain(m, true);
        let nr_dirty = m.stats.nr_dirty;
        // One mapping in one memcg: the memcg's dirty and writeback pages are the machine's.
        let dirty = nr_dirty + m.stats.nr_writeback;
        if nr_dirty > l.bg_thresh && !m.wb.busy() {
            self.wb_start_background_writeback(m);
        }
        // domain_dirty_freerun() of each domain: free only if every domain is.
        if dirty <= l.freerun() && ml.is_none_or(|ml| dirty <= ml.freerun()) {
            let intv = dirty_poll_interval(dirty, l.thresh);
            let m_intv = ml.map_or(u64::MAX, |ml| dirty_poll_interval(dirty, ml.thresh));
            m.wb.dirty_paused_when = Some(now);
            m.wb.nr_dirtied = 0;
            m.wb.nr_dirtied_pause = intv.min(m_intv);
            m.wb.bdp_looping = None;
            return None;
        }
        if !m.wb.busy() {
            // "Start writeback even when in laptop mode".
            self.wb_start_background_writeback(m);
        }
        let write_bw = m.wb.bw.avg_write_bandwidth;
        let gdtc = self.dtc(m, l, dirty);
        let g_pos = wb_position_ratio(&gdtc, write_bw);
        let mdtc = ml.map(|ml| self.dtc(m, ml, dirty));
        let m_pos = mdtc.map(|d| wb_position_ratio(&d, write_bw));
        // The domain with the lower position ratio throttles.
        let (sdtc, pos_ratio) = match (mdtc, m_pos) {
            (Some(d), Some(p)) if p < g_pos => (d, p),
            _ => (gdtc, g_pos),
        };
        m.wb.dirty_exceeded = gdtc.dirty_exceeded() || mdtc.is_some_and(|d| d.dirty_exceeded());
        if m.wb.bw.bw_time_stamp + bandwidth_interval(hz) < now {
            // __wb_update_bandwidth(gdtc, mdtc, true): the rate limit from each domain, then
            // the write bandwidth.
            let elapsed = (now - m.wb.bw.bw_time_stamp).max(1);
            let dirtied = m.wb.bw.dirtied;
            wb_update_dirty_ratelimit(&gdtc, g_pos, &mut m.wb.bw, dirtied, elapsed, hz);
            if let (Some(d), Some(p)) = (mdtc, m_pos) {
                wb_update_dirty_ratelimit(&d, p, &mut m.wb.bw, dirtied, elapsed, hz);
            }
            self.wb_update_bandwidth(m);
        }
        let dirty_ratelimit = m.wb.bw.dirty_ratelimit;
        let task_ratelimit = (dirty_ratelimit * pos_ratio) >> RATELIMIT_CALC_SHIFT;
        let max_pause = wb_max_pause(m.wb.bw.avg_write_bandwidth, sdtc.wb_dirty, hz);
        let (min_pause, nr_dirtied_pause) = wb_min_pause(
            m.wb.bw.avg_write_bandwidth,
            dirty_ratelimit,
            max_pause,
            task_ratelimit,
            hz,
        );
        let jiffies = now;
        let mut now = now;
        let trace = |m: &Mapping, period: u64, pause: i64| {
            let t = BdpTrace {
                dtc: &sdtc,
                dirty_ratelimit,
                task_ratelimit,
                dirtied: pages_dirtied,
                dirtied_pause: m.wb.nr_dirtied_pause,
                dirty_paused_when: m.wb.dirty_paused_when,
                period,
                pause,
                start_time: m.wb.bdp_start_time,
                jiffies,
                hz,
            };
            trace_balance_dirty_pages(cx, &self.config, &t);
        };
        // At the limit (task_ratelimit 0) the period and the pause are max_pause.
        let (period, pause) = match (hz * pages_dirtied).checked_div(task_ratelimit) {
            None => (max_pause, max_pause),
            Some(period) => {
                let mut pause = period as i64;
                if let Some(when) = m.wb.dirty_paused_when {
                    if !cfg!(feature = "bug-bdp-pause-ignores-elapsed") {
                        pause -= now as i64 - when as i64;
                    }
                }
                if pause < min_pause as i64 {
                    trace(m, period, pause.min(0));
                    // Too short to sleep: carried over into the next period, or (more than a
                    // second behind: a light dirtier) forgotten.
                    if pause < -(hz as i64) {
                        m.wb.dirty_paused_when = Some(now);
                        m.wb.nr_dirtied = 0;
                    } else if period > 0 {
                        // Never set (a task's first check, not free running): the kernel's
                        // `0 + period` is far from its jiffies and restarts the clock at the
                        // next check; the model starts it from now.
                        m.wb.dirty_paused_when =
                            Some(m.wb.dirty_paused_when.unwrap_or(now) + period);
                        m.wb.nr_dirtied = 0;
                    } else if m.wb.nr_dirtied_pause <= pages_dirtied {
                        m.wb.nr_dirtied_pause += pages_dirtied;
                    }
                    m.wb.bdp_looping = None;
                    return None;
                }
                let pause = pause as u64;
                if pause > max_pause {
                    // For an occasional dropped task_ratelimit.
                    now += (pause - max_pause).min(max_pause);
                    (period, max_pause)
                } else {
                    (period, pause)
                }
            }
        };
        trace(m, period, pause as i64);

        // io_schedule_timeout(pause), then the state the kernel sets after it.
        m.stats.dirty_throttled += 1;
        m.stats.dirty_paused_jiffies += pause;
        m.wb.dirty_paused_when = Some(now + pause);
        m.wb.nr_dirtied = 0;
        m.wb.nr_dirtied_pause = nr_dirtied_pause;
        // At the limit the loop goes round again after the pause, until the wb's dirty pages
        // are down to the counters' error.
        let n_cpus = u64::from(self.kernel.nr_cpus());
        m.wb.bdp_looping =
            (task_ratelimit == 0 && sdtc.wb_dirty > wb_stat_error(n_cpus)).then_some(pages_dirtied);
        Some(pause)
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
            bw.dirtied_stamp = bw.dirtied;
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
        bw.dirtied_stamp = bw.dirtied;
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
            .tagged_in(start, u64::MAX)
            .into_iter()
            .filter(|i| {
                m.folios
                    .get(i)
                    .is_some_and(|f| f.flags.dirty && !f.flags.writeback)
            })
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
        // The tagged folios: `folio_start_writeback_indices()` skips those not dirty or under
        // writeback (`WB_SYNC_NONE`).
        let indices = m.tagged_in(first, last);
        self.do_writepages(m, cx, indices)
    }

    /// `folio_clear_dirty_for_io()` + `folio_start_writeback()` on each of `indices` (ascending)
    /// that is dirty and not under writeback, then the path's `->writepages()`.
    pub(crate) fn start_writeback_indices(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        indices: Vec<u64>,
    ) -> Vec<Box<Bio>> {
        let wb = self.folio_start_writeback_indices(m, indices);
        self.writepages(m, cx, wb)
    }

    /// `folio_clear_dirty_for_io()` + `folio_start_writeback()` on each of `indices` (ascending)
    /// that is dirty and not under writeback: the folios for the path's bios.
    fn folio_start_writeback_indices(
        &self,
        m: &mut Mapping,
        mut indices: Vec<u64>,
    ) -> Vec<WbFolio> {
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
        wb
    }

    /// The path's `->writepages()` over folios already under writeback: the bios to submit.
    fn writepages(&self, m: &mut Mapping, cx: &Cpu, wb: Vec<WbFolio>) -> Vec<Box<Bio>> {
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
        let submit = self.write_cache_pages_sync(&mut m, cx, first, last);
        let blocked = match &m.sync_pass {
            Some(p) => Some(Blocked::Writeback(p.next)),
            None => m
                .tagged_in(first, last)
                .first()
                .map(|&i| Blocked::Writeback(i)),
        };
        // filemap_check_errors(): reported once the wait is over.
        let error = (blocked.is_none() && std::mem::take(&mut m.as_eio)).then_some(Errno::EIO);
        SyncProgress {
            submit,
            blocked,
            error,
        }
    }

    /// `__filemap_fdatawrite_range(WB_SYNC_ALL)` of pages `first..=last`, from where an earlier
    /// call's pass slept ([`SyncPass`]): every dirty folio in index order gets its writeback
    /// started, until one is still under writeback, where the pass sleeps (the bios so far
    /// submitted on buffer_head, held in the open ioend on iomap); at the end of the range the
    /// pass's bios go out. A call for another range first sends out what a sleeping pass held.
    fn write_cache_pages_sync(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        first: u64,
        last: u64,
    ) -> Vec<Box<Bio>> {
        let mut bios = Vec::new();
        let mut pass = match m.sync_pass.take() {
            Some(p) if (p.first, p.last) == (first, last) => p,
            other => {
                if let Some(p) = other {
                    bios = self.writepages(m, cx, p.held);
                    self.wb_update_bandwidth_if_due(m);
                }
                self.wb_bandwidth_estimate_start(m);
                let towrite = m
                    .tagged_in(first, last)
                    .into_iter()
                    .filter(|i| m.folios.get(i).is_some_and(|f| f.flags.dirty))
                    .collect();
                SyncPass {
                    first,
                    last,
                    next: first,
                    towrite,
                    held: Vec::new(),
                }
            }
        };
        let mut take = Vec::new();
        let mut sleep_on = None;
        for &index in pass.towrite.iter().filter(|&&i| i >= pass.next) {
            let Some(f) = m.folios.get(&index) else {
                continue; // truncated or invalidated meanwhile
            };
            if !f.flags.dirty {
                continue; // "Did somebody else write it for us?"
            }
            if f.flags.writeback {
                sleep_on = Some(index); // folio_wait_writeback()
                break;
            }
            take.push(index);
        }
        let mut started = self.folio_start_writeback_indices(m, take);
        match sleep_on {
            None => {
                pass.held.append(&mut started);
                bios.extend(self.writepages(m, cx, pass.held));
                self.wb_update_bandwidth_if_due(m);
            }
            Some(index) => {
                match self.config.path {
                    WritebackPath::Iomap => pass.held.append(&mut started),
                    WritebackPath::BufferHead => bios.extend(self.writepages(m, cx, started)),
                }
                pass.next = index;
                m.sync_pass = Some(pass);
            }
        }
        bios
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
