//! `fs/fs-writeback.c` (and `mm/backing-dev.c`'s `bdi_writeback`): the flusher of the block
//! device's inode. One `struct bdi_writeback` per mapping (the bdev's `bdi->wb`), whose
//! `wb->dwork` (`wb_workfn`) runs on the unbound, `WQ_MEM_RECLAIM` `writeback` workqueue
//! (`bdi_wq`) as a kworker, woken three ways:
//!
//! - `wakeup_flusher_threads(WB_REASON_VMSCAN)` from reclaim ([`super::super::mm::vmscan`]):
//!   `wb_start_writeback()` sets `WB_start_all` (one such work pending or running at a time) and
//!   `wb_check_start_all()` writes `get_nr_dirty_pages()` pages;
//! - `wb_start_background_writeback()` from `balance_dirty_pages()` above the background
//!   threshold: `wb_check_background_flush()` writes while `wb_over_bg_thresh()`;
//! - `wb_wakeup_delayed()` when the inode is first dirtied (`__mark_inode_dirty()`): every
//!   `dirty_writeback_interval` (5 s) `wb_check_old_data_flush()` writes the inode if it was
//!   dirtied more than `dirty_expire_interval` (30 s) ago (kupdate).
//!
//! `wb_writeback()` writes in chunks of `writeback_chunk_size()` pages (`WB_SYNC_NONE`:
//! `min(avg_write_bandwidth / 2, dirty_limit / DIRTY_SCOPE)`, capped by the work's pages, rounded
//! to `MIN_WRITEBACK_PAGES`), each chunk `do_writepages()` with `range_cyclic` from
//! `mapping->writeback_index` to the end of the device (6.18's `writeback_iter()` does not wrap:
//! it resets the index to 0 at the end).
//!
//! **Simplifications.** One work step ([`AddressSpace::wb_workfn`]) writes one chunk and requeues
//! the work while the work item has pages left: the kernel's `wb_workfn` loops over the chunks in
//! one invocation (with `cond_resched()` between them); a step per chunk lets the simulation's
//! clock interleave the flusher with the task. `avg_write_bandwidth` starts at `INIT_BW` (100
//! MB/s) and follows the device through mm/page-writeback.c's estimator
//! ([`crate::mm::page_writeback`]: `wb_update_bandwidth()` from `do_writepages()` every
//! `BANDWIDTH_INTERVAL`), so a chunk is half a second of the measured writeback rate.
//! No `b_dirty`/`b_io`/`b_more_io` lists: there is one inode.
//! The bios the flusher builds are submitted by its kworker to the mapping's device
//! ([`PageCacheConfig::bdev`](crate::mm::dontcache::PageCacheConfig::bdev), the threaded
//! runtime's null_blk) under `wb_writeback()`'s plug (`blk_start_plug()` / `blk_finish_plug()`),
//! so a chunk's contiguous bios (buffer_head's one per folio) reach a blk-mq driver merged
//! (null_blk's model has no plug: one bio is one request there); the plug spans one step (the
//! kernel's spans the work and is flushed before each `cond_resched()`).
//! Without a device they are handed to the driver ([`AddressSpace::wb_take_submitted`]) as
//! `submit_bio()` would hand them to the bdev's queue, and the driver's device model merges
//! what the plug would.

// Bios travel boxed everywhere in bio-core (`Box<Bio>` moves from submitter to driver to
// `bio_endio()`); a list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

use crate::block::blk_plug::{blk_finish_plug, blk_start_plug};
use crate::block::{submit_bio_noacct, Bio};
use crate::kernel::Cpu;
use crate::mm::filemap::{AddressSpace, Mapping};
use crate::workqueue::{DelayedWork, Workqueue, WORK_CPU_UNBOUND, WQ_MEM_RECLAIM, WQ_UNBOUND};

/// `enum wb_reason` (`include/linux/backing-dev-defs.h`): why the flusher writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WbReason {
    /// `WB_REASON_BACKGROUND`: above the background threshold.
    Background,
    /// `WB_REASON_VMSCAN`: reclaim met dirty folios no one had queued for writeback.
    Vmscan,
    /// `WB_REASON_PERIODIC`: the kupdate timer found expired dirty data.
    Periodic,
}

/// `dirty_writeback_interval` default: 500 centisecs (5 s) between kupdate runs.
pub const DIRTY_WRITEBACK_CENTISECS: u64 = 500;
/// `dirty_expire_interval` default: 3000 centisecs (30 s) before dirty data is old.
pub const DIRTY_EXPIRE_CENTISECS: u64 = 3000;
/// `MIN_WRITEBACK_PAGES`: 4 MiB, the chunk granularity of `writeback_chunk_size()`.
pub const MIN_WRITEBACK_PAGES: u64 = 1024;
/// `INIT_BW` (`mm/backing-dev.c`): the initial `avg_write_bandwidth`, 100 MB/s in pages per second.
pub const INIT_BW: u64 = 100 << (20 - 12);
/// `DIRTY_SCOPE` (`include/linux/writeback.h`).
pub const DIRTY_SCOPE: u64 = 8;

/// `struct wb_writeback_work` in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WbWork {
    /// Pages still to write.
    pub(crate) nr_pages: u64,
    /// `for_background`: stop once `!wb_over_bg_thresh()`.
    pub(crate) for_background: bool,
    /// `for_kupdate`: only an inode dirtied before `jiffies - dirty_expire_interval`.
    pub(crate) for_kupdate: bool,
    pub(crate) reason: WbReason,
}

/// `struct bdi_writeback` of the bdev, and the inode's writeback state, under the mapping's lock.
#[derive(Debug)]
pub(crate) struct BdiWriteback {
    /// `WB_start_all` + `wb->start_all_reason`.
    pub(crate) start_all: Option<WbReason>,
    /// The work `wb_workfn` is in the middle of.
    pub(crate) work: Option<WbWork>,
    /// `wb_wakeup()` asked for while the mapping's lock was held: queued when it is dropped.
    pub(crate) wakeup_pending: bool,
    /// `wb_wakeup_delayed()` asked for (the inode went dirty).
    pub(crate) wakeup_delayed_pending: bool,
    /// `mapping->writeback_index`.
    pub(crate) writeback_index: u64,
    /// `inode->dirtied_when` (jiffies), while the inode has dirty pages.
    pub(crate) dirtied_when: Option<u64>,
    /// `wb->last_old_flush` (jiffies).
    pub(crate) last_old_flush: u64,
    /// Bios the flusher submitted, for the driver.
    pub(crate) submitted: Vec<Box<Bio>>,
    /// `current->nr_dirtied` of the (one) dirtier: the pages it took from clean to dirty since
    /// its last `balance_dirty_pages()`.
    pub(crate) nr_dirtied: u64,
    /// `current->nr_dirtied_pause`: the pages after which it calls `balance_dirty_pages()`.
    pub(crate) nr_dirtied_pause: u64,
    /// `current->dirty_paused_when` (jiffies), `None` while the kernel's is 0 (never set: the
    /// model's jiffies start at 0, the kernel's at `INITIAL_JIFFIES`, so 0 cannot be the mark).
    pub(crate) dirty_paused_when: Option<u64>,
    /// `pages_dirtied` of a `balance_dirty_pages()` loop that paused at the limit
    /// (`task_ratelimit == 0`) and goes round again after the pause.
    pub(crate) bdp_looping: Option<u64>,
    /// `start_time` of the `balance_dirty_pages()` call in progress (jiffies at its entry; kept
    /// across the limit loop's rounds): `balance_dirty_pages`'s `paused`.
    pub(crate) bdp_start_time: u64,
    /// `wb->dirty_exceeded`: the dirtier polls every 8 pages while it is set.
    pub(crate) dirty_exceeded: bool,
    /// The bandwidth estimator's state ([`crate::mm::page_writeback`]).
    pub(crate) bw: WbBandwidth,
}

/// The write-bandwidth estimator's fields of `struct bdi_writeback` (mm/page-writeback.c's
/// `wb_update_write_bandwidth()`), in pages per second and jiffies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WbBandwidth {
    /// `wb->stat[WB_WRITTEN]`: pages whose writeback ended (`__wb_writeout_add()`).
    pub(crate) written: u64,
    /// `wb->written_stamp`: `WB_WRITTEN` at the last update.
    pub(crate) written_stamp: u64,
    /// `wb->bw_time_stamp` (jiffies).
    pub(crate) bw_time_stamp: u64,
    /// `wb->write_bandwidth`: the period-weighted estimate.
    pub(crate) write_bandwidth: u64,
    /// `wb->avg_write_bandwidth`: `write_bandwidth` smoothed once more.
    pub(crate) avg_write_bandwidth: u64,
    /// `wb->stat[WB_DIRTIED]`: pages taken from clean to dirty (`folio_account_dirtied()`).
    pub(crate) dirtied: u64,
    /// `wb->dirtied_stamp`: `WB_DIRTIED` at the last update.
    pub(crate) dirtied_stamp: u64,
    /// `wb->dirty_ratelimit`: the base rate a dirtier is throttled to, pages per second.
    pub(crate) dirty_ratelimit: u64,
    /// `wb->balanced_dirty_ratelimit`: the last balanced-rate estimate.
    pub(crate) balanced_dirty_ratelimit: u64,
}

impl Default for WbBandwidth {
    /// `wb_init()`: the bandwidth estimates and the rate limits at `INIT_BW`, the stamps at
    /// boot (jiffies 0).
    fn default() -> Self {
        Self {
            written: 0,
            written_stamp: 0,
            bw_time_stamp: 0,
            write_bandwidth: INIT_BW,
            avg_write_bandwidth: INIT_BW,
            dirtied: 0,
            dirtied_stamp: 0,
            dirty_ratelimit: INIT_BW,
            balanced_dirty_ratelimit: INIT_BW,
        }
    }
}

impl Default for BdiWriteback {
    /// Nothing queued; the dirtier's `nr_dirtied_pause` at its `copy_process()` value
    /// (`128 >> (PAGE_SHIFT - 10)`).
    fn default() -> Self {
        Self {
            start_all: None,
            work: None,
            wakeup_pending: false,
            wakeup_delayed_pending: false,
            writeback_index: 0,
            dirtied_when: None,
            last_old_flush: 0,
            submitted: Vec::new(),
            nr_dirtied: 0,
            nr_dirtied_pause: crate::mm::dirty_ratelimit::DIRTY_POLL_THRESH,
            dirty_paused_when: None,
            bdp_looping: None,
            bdp_start_time: 0,
            dirty_exceeded: false,
            bw: WbBandwidth::default(),
        }
    }
}

impl BdiWriteback {
    /// Whether the flusher has something queued or in progress (a completion or its own bios
    /// will come: a waiter is not stuck).
    pub(crate) fn busy(&self) -> bool {
        self.wakeup_pending || self.start_all.is_some() || self.work.is_some()
    }
}

impl AddressSpace {
    /// `bdi_wq` (`alloc_workqueue("writeback", WQ_MEM_RECLAIM | WQ_UNBOUND | WQ_FREEZABLE,
    /// 0)`; freezing is not modelled) and `wb->dwork` (`wb_workfn`), made on first use.
    pub(crate) fn bdi_wq(&self) -> &(Workqueue, DelayedWork) {
        self.wb_wq.get_or_init(|| {
            let wq = self
                .kernel
                .alloc_workqueue("writeback", WQ_MEM_RECLAIM | WQ_UNBOUND, 0)
                .expect("valid workqueue flags");
            let weak = self.this.clone();
            let dwork = self
                .kernel
                .init_delayed_work("wb_workfn", move |cx, _work| {
                    if let Some(mapping) = weak.upgrade() {
                        mapping.wb_workfn(cx);
                    }
                });
            (wq, dwork)
        })
    }

    /// `wakeup_flusher_threads(reason)` → `wb_start_writeback()`: with dirty pages and no
    /// start-all work pending or running, set `WB_start_all` and wake the flusher (the queueing
    /// happens when the caller drops the mapping's lock, [`AddressSpace::wb_kick`]).
    pub(crate) fn wakeup_flusher_threads(&self, m: &mut Mapping, reason: WbReason) {
        if cfg!(feature = "bug-flusher-never-woken") {
            return;
        }
        if m.stats.nr_dirty == 0 || m.wb.start_all.is_some() {
            return;
        }
        m.wb.start_all = Some(reason);
        m.stats.flusher_wakeups += 1;
        m.wb.wakeup_pending = true;
    }

    /// `wb_start_background_writeback()`: `wb_wakeup()`; the work checks the threshold.
    pub(crate) fn wb_start_background_writeback(&self, m: &mut Mapping) {
        if cfg!(feature = "bug-flusher-never-woken") {
            return;
        }
        m.stats.flusher_wakeups += 1;
        m.wb.wakeup_pending = true;
    }

    /// Queues what [`AddressSpace::wakeup_flusher_threads`], `wb_start_background_writeback()`
    /// or the inode's first dirtying asked for: `wb_wakeup()` is `mod_delayed_work(bdi_wq,
    /// &wb->dwork, 0)`; `wb_wakeup_delayed()` is `queue_delayed_work(bdi_wq, &wb->dwork,
    /// dirty_writeback_interval)` (a no-op when already queued). Call without the mapping's lock.
    pub(crate) fn wb_kick(&self, cx: &Cpu) {
        let (now, delayed) = {
            let mut m = self.inner.lock();
            let now = std::mem::take(&mut m.wb.wakeup_pending);
            let delayed = std::mem::take(&mut m.wb.wakeup_delayed_pending);
            (now, delayed)
        };
        if !now && !delayed {
            return;
        }
        let (wq, dwork) = self.bdi_wq();
        if now {
            self.kernel
                .mod_delayed_work_on(WORK_CPU_UNBOUND, wq, *dwork, 0, cx);
        } else {
            let delay = DIRTY_WRITEBACK_CENTISECS * u64::from(self.kernel.config().hz) / 100;
            self.kernel
                .queue_delayed_work_on(WORK_CPU_UNBOUND, wq, *dwork, delay, cx);
        }
    }

    /// `wb_over_bg_thresh()`: the machine's dirty pages (`NR_FILE_DIRTY`) above the background
    /// threshold of the global domain or, on cgroup v2, the memcg's dirty pages above its own
    /// (`domain_over_bg_thresh()` of each, writeback not counted).
    pub(crate) fn wb_over_bg_thresh(&self, m: &Mapping) -> bool {
        m.stats.nr_dirty > self.domain_dirty_limits().bg_thresh
            || self
                .memcg_domain(m, false)
                .is_some_and(|l| m.stats.nr_dirty > l.bg_thresh)
    }

    /// `writeback_chunk_size()` for `WB_SYNC_NONE`: half a second's worth at the estimated
    /// bandwidth (`wb->avg_write_bandwidth / 2`), at most an eighth of the dirty limit.
    pub(crate) fn writeback_chunk_size(&self, m: &Mapping, work: &WbWork) -> u64 {
        let pages = (m.wb.bw.avg_write_bandwidth / 2)
            .min(self.domain_dirty_limits().thresh / DIRTY_SCOPE)
            .min(work.nr_pages);
        (pages + MIN_WRITEBACK_PAGES) / MIN_WRITEBACK_PAGES * MIN_WRITEBACK_PAGES
    }

    /// `wb_workfn()` → `wb_do_writeback()`, one chunk per step: the work in progress, else
    /// `wb_check_start_all()`, `wb_check_old_data_flush()`, `wb_check_background_flush()` in turn
    /// (one that writes nothing falls through to the next); writes one chunk (`wb_writeback()`'s
    /// loop body); requeues itself while the work has pages left, or at once after a work that
    /// finished in this step when the checks after it would write (over the background
    /// threshold, or the kupdate interval passed with dirty pages left: the kernel runs them in
    /// the same `wb_do_writeback()`), else re-arms the kupdate timer while the inode is dirty
    /// (`wb_wakeup_delayed()`).
    pub fn wb_workfn(&self, cx: &Cpu) {
        let jiffies = self.kernel.jiffies();
        let hz = u64::from(self.kernel.config().hz);
        // dirty_writeback_interval in jiffies: wb_check_old_data_flush()'s period.
        let interval = DIRTY_WRITEBACK_CENTISECS * hz / 100;
        let requeue = {
            let mut m = self.inner.lock();
            m.stats.flusher_runs += 1;
            // wb_do_writeback() runs the work in progress, then wb_check_start_all(),
            // wb_check_old_data_flush() (kupdate) and wb_check_background_flush() in one pass:
            // a check with nothing to write falls through to the next one. One chunk per step.
            let mut left = None;
            let mut wrote = 0;
            for stage in 0..4 {
                let work = match stage {
                    0 => m.wb.work.take(),
                    // wb_check_start_all(): all the dirty pages (get_nr_dirty_pages()).
                    1 => m.wb.start_all.map(|reason| WbWork {
                        nr_pages: m.stats.nr_dirty,
                        for_background: false,
                        for_kupdate: false,
                        reason,
                    }),
                    // wb_check_old_data_flush(): it stamps last_old_flush even when
                    // get_nr_dirty_pages() is 0, and then writes nothing.
                    2 => {
                        let expired = jiffies >= m.wb.last_old_flush + interval;
                        if expired {
                            m.wb.last_old_flush = jiffies;
                        }
                        (expired && m.stats.nr_dirty > 0).then_some(WbWork {
                            nr_pages: m.stats.nr_dirty,
                            for_background: false,
                            for_kupdate: true,
                            reason: WbReason::Periodic,
                        })
                    }
                    // wb_check_background_flush().
                    _ => self.wb_over_bg_thresh(&m).then_some(WbWork {
                        nr_pages: u64::MAX,
                        for_background: true,
                        for_kupdate: false,
                        reason: WbReason::Background,
                    }),
                };
                let Some(mut work) = work else { continue };
                let expire = DIRTY_EXPIRE_CENTISECS * hz / 100;
                let stop = (work.for_background && !self.wb_over_bg_thresh(&m))
                    || (work.for_kupdate
                        && m.wb
                            .dirtied_when
                            .is_none_or(|d| d.saturating_add(expire) > jiffies));
                let written = if stop {
                    0
                } else {
                    let chunk = self.writeback_chunk_size(&m, &work);
                    let (bios, written) = self.writeback_range_cyclic(&mut m, cx, chunk);
                    m.wb.submitted.extend(bios);
                    m.stats.flusher_pages += written;
                    written
                };
                work.nr_pages = work.nr_pages.saturating_sub(written);
                if written > 0 && work.nr_pages > 0 {
                    left = Some(work);
                } else if !work.for_background && !work.for_kupdate {
                    // The start-all work is done: clear_bit(WB_start_all).
                    m.wb.start_all = None;
                }
                wrote = written;
                if written > 0 {
                    break;
                }
            }
            m.wb.work = left;
            // The kernel's pass goes on to the checks after a finished work, in the same
            // wb_do_writeback(): a step that wrote and left the device over the background
            // threshold, or with the kupdate interval passed and dirty pages left (old data
            // behind the work's writeback_index), comes back at once for them instead of
            // waiting for the kupdate timer.
            let kupdate_due = jiffies >= m.wb.last_old_flush + interval && m.stats.nr_dirty > 0;
            let more = wrote > 0 && (self.wb_over_bg_thresh(&m) || kupdate_due);
            if m.wb.work.is_some() || m.wb.start_all.is_some() || more {
                m.wb.wakeup_pending = true;
            } else if m.stats.nr_dirty > 0 {
                m.wb.wakeup_delayed_pending = true;
            }
            m.wb.wakeup_pending || m.wb.wakeup_delayed_pending
        };
        // wb_writeback() -> do_writepages(): the chunk's bios go to the device from this kworker
        // (outside the mapping's lock: a completion may end them before submit returns), under
        // wb_writeback()'s blk_start_plug() / blk_finish_plug() (505a666ee3fc "writeback: plug
        // writeback in wb_writeback() and writeback_inodes_wb()"): contiguous bios merge into
        // the plugged request (blk_attempt_plug_merge()) and reach the driver as one.
        if let Some(dev) = &self.config.bdev {
            let plug = (!cfg!(feature = "bug-wb-writeback-no-plug")).then(|| blk_start_plug(cx));
            for bio in self.wb_take_submitted() {
                submit_bio_noacct(bio, &**dev, cx);
            }
            if let Some(plug) = plug {
                blk_finish_plug(plug, cx);
            }
        }
        if requeue {
            self.wb_kick(cx);
        }
    }

    /// The bios the flusher submitted since the last call (its `submit_bio()`s), for the driver
    /// to send to the device.
    pub fn wb_take_submitted(&self) -> Vec<Box<Bio>> {
        std::mem::take(&mut self.inner.lock().wb.submitted)
    }

    /// `mapping->writeback_index`: where the next `range_cyclic` writeback starts.
    pub fn writeback_index(&self) -> u64 {
        self.inner.lock().wb.writeback_index
    }
}
