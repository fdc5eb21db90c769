//! `mm/vmscan.c`: memcg reclaim of the page cache (`try_to_free_mem_cgroup_pages()` →
//! `shrink_lruvec()` → `shrink_active_list()` / `shrink_inactive_list()` →
//! `shrink_folio_list()`), as a memcg's limit drives it (cgroup v1 by default; on cgroup v2,
//! `writeback_throttling_sane()` is true and reclaim never throttles on writeback).
//!
//! `shrink_inactive_list()` isolates up to [`SWAP_CLUSTER_MAX`] folios from the inactive tail
//! and `shrink_folio_list()` decides each, as 6.18 does outside kswapd:
//! - a clean, unlocked folio without extra references is evicted (`__remove_mapping()`);
//! - a dirty one is never written here (only kswapd may `pageout()` a file folio): it gets
//!   `PG_reclaim` and is activated (`activate_locked`), counted as unqueued dirty;
//! - one under writeback gets `PG_reclaim` and is activated (case 2), and the scan goes on;
//!   `folio_end_writeback()` then rotates it to the inactive tail (`folio_rotate_reclaimable()`)
//!   and the next scan evicts it. Case 3 (cgroup v1, `!writeback_throttling_sane()`:
//!   `folio_wait_writeback()` on a folio already `PG_reclaim`; the scan stops and the caller waits,
//!   [`Blocked::Memcg`]) needs `may_enter_fs()`, i.e. a charge with `__GFP_FS`. On a block device
//!   only the read path's `filemap_create_folio()` (`GFP_USER`) charges so: the write path's
//!   `iomap_get_folio()` passes `FGP_NOFS` (`__filemap_get_folio()` clears `__GFP_FS` before
//!   `mem_cgroup_charge()`) and readahead allocates under `memalloc_nofs_save()`, so writers never
//!   wait on a folio here;
//! - locked or referenced-by-someone folios are put back.
//!
//! When every folio of a batch was dirty and unqueued (`nr_unqueued_dirty == nr_taken`),
//! `shrink_inactive_list()` wakes the flusher (`wakeup_flusher_threads(WB_REASON_VMSCAN)`,
//! [`crate::fs::fs_writeback`]) and, on cgroup v1, `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)`
//! ([`Blocked::ReclaimThrottle`]). That is the only throttle a writer meets on cgroup v1, and it
//! is 6.18's: the first sleeper records the node's `NR_THROTTLED_WRITTEN` (`nr_reclaim_start`);
//! every `folio_end_writeback()` while someone sleeps adds its pages to it
//! (`acct_reclaim_writeback()`), and once more than `SWAP_CLUSTER_MAX` pages per sleeper ended
//! writeback since then, `__acct_reclaim_writeback()` wakes them all; otherwise the
//! `schedule_timeout(HZ/10)` ends the sleep. Each sleep ends with a `vmscan:mm_vmscan_throttled`
//! line, the jiffies slept in microseconds (`usect_delayed`, 6.18's spelling).
//!
//! When the inactive list is smaller than the active one, `shrink_active_list()` first moves
//! active folios to it (`inactive_is_low()`, the ratio 1 of a memcg under 1 GB).
//!
//! **Simplifications.** One memcg with a hard limit (cgroup v1's `memory.limit_in_bytes`, v2's
//! `memory.max`; no `memory.high`, no ancestors); there is no kswapd
//! (global reclaim: the configured machine is large and only this memcg is under pressure), so no
//! reclaim writes a file folio itself. After a `reclaim_throttle()` sleep the caller retries the
//! charge, which reclaims again (the kernel goes on with the same reclaim pass); the node is this
//! mapping, so `NR_THROTTLED_WRITTEN` counts its writeback only, and exactly: the kernel's is a
//! vmstat counter whose per-CPU deltas fold into the global value `node_page_state()` reads only
//! past a threshold, so its wake-up can come some pages later than the 33rd. The
//! `VMSCAN_THROTTLE_CONGESTED`/`ISOLATED`/`NOPROGRESS` throttles, MGLRU and the anon lists are not
//! modelled.
//! `folio_wait_writeback()` (case 3) waits for any completion, not that folio's.

// Bios travel boxed everywhere in bio-core (`Box<Bio>` moves from submitter to driver to
// `bio_endio()`); a list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

#[cfg(doc)]
use super::filemap::Blocked;
use super::filemap::{AddressSpace, Mapping};
use super::gfp::GfpFlags;
use crate::block::Bio;
use crate::fs::fs_writeback::WbReason;
use crate::kernel::Cpu;
use crate::time::jiffies_to_usecs;

/// `may_enter_fs()` for a page cache folio: whether reclaim under `gfp` (`sc->gfp_mask`) may wait
/// on it, i.e. whether the charge has `__GFP_FS` (a block device folio is not swap-backed, so only
/// the flag counts).
pub(crate) fn may_enter_fs(gfp: GfpFlags) -> bool {
    gfp.contains(GfpFlags::__GFP_FS)
}

/// `SWAP_CLUSTER_MAX`: reclaim frees at least this many pages per call.
pub const SWAP_CLUSTER_MAX: u64 = 32;

/// `pgdat`'s state for `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)` (mm/vmscan.c, 6.18): the
/// sleepers (`nr_writeback_throttled`), the node's `NR_THROTTLED_WRITTEN` when the first of them
/// began (`nr_reclaim_start`), that counter, and the wake-ups of
/// `reclaim_wait[VMSCAN_THROTTLE_WRITEBACK]` so far.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ReclaimWait {
    pub(crate) nr_writeback_throttled: u64,
    pub(crate) nr_reclaim_start: u64,
    /// `NR_THROTTLED_WRITTEN`: pages that ended writeback while someone slept here.
    pub(crate) nr_throttled_written: u64,
    pub(crate) wakeups: u64,
}

/// One task's sleep in `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)`: `schedule_timeout(HZ/10)`
/// on `pgdat->reclaim_wait[VMSCAN_THROTTLE_WRITEBACK]`, from
/// [`AddressSpace::reclaim_throttle_begin`] to [`AddressSpace::reclaim_throttle_end`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReclaimSleep {
    /// `jiffies` when the sleep began.
    pub start_jiffies: u64,
    /// `HZ/10` jiffies.
    pub timeout: u64,
    /// The jiffy the timeout's timer fires at: `calc_index()` rounds a timer's expiry up to the
    /// next jiffy, so a sleep nothing wakes lasts `timeout + 1` ticks (and prints `timeout`).
    pub fires_at: u64,
    /// The wait queue's wake-ups when the sleep began: a later one wakes it.
    wake_seq: u64,
}

impl ReclaimSleep {
    /// `expires` of `schedule_timeout()`'s timer: `start_jiffies + timeout`.
    pub fn expires(&self) -> u64 {
        self.start_jiffies + self.timeout
    }
}

/// `reclaim_throttle()`'s timeout for `VMSCAN_THROTTLE_WRITEBACK`: `HZ/10` jiffies.
pub fn reclaim_throttle_timeout(hz: u64) -> u64 {
    hz / 10
}

impl AddressSpace {
    /// Where `shrink_inactive_list()` calls `reclaim_throttle(pgdat, VMSCAN_THROTTLE_WRITEBACK)`:
    /// the charging call stops there and returns [`Blocked::ReclaimThrottle`]; its caller sleeps
    /// ([`AddressSpace::reclaim_throttle_begin`] when its clock reaches the call's end). Counted
    /// once per call. The kernel's exemption of kthreads and workers does not arise: only
    /// syscalls charge here.
    pub(crate) fn reclaim_throttle(&self, m: &mut Mapping) {
        if !std::mem::replace(&mut m.reclaim_throttle_pending, true) {
            m.stats.reclaim_throttled += 1;
        }
    }

    /// `reclaim_throttle()` up to its `schedule_timeout()`, at the moment the caller goes to
    /// sleep: `nr_writeback_throttled` rises, and the first sleeper records `NR_THROTTLED_WRITTEN`
    /// as `nr_reclaim_start`, so only writeback that ends from now on counts towards its wake-up.
    pub fn reclaim_throttle_begin(&self) -> ReclaimSleep {
        let hz = self.kernel.config().hz;
        let start = self.kernel.jiffies();
        let timeout = reclaim_throttle_timeout(u64::from(hz));
        let mut m = self.inner.lock();
        let w = &mut m.reclaim_wait;
        w.nr_writeback_throttled += 1;
        if w.nr_writeback_throttled == 1 {
            w.nr_reclaim_start = w.nr_throttled_written;
        }
        ReclaimSleep {
            start_jiffies: start,
            timeout,
            fires_at: crate::time::calc_wheel_index(start + timeout, start, hz).1,
            wake_seq: w.wakeups,
        }
    }

    /// Whether `__acct_reclaim_writeback()` has woken the wait queue since `sleep` began.
    pub fn reclaim_throttle_woken(&self, sleep: &ReclaimSleep) -> bool {
        self.inner.lock().reclaim_wait.wakeups != sleep.wake_seq
    }

    /// The end of a `reclaim_throttle()` sleep, on the sleeper's CPU at the jiffy it runs again
    /// (woken, or when the timer fires at [`ReclaimSleep::fires_at`]): `nr_writeback_throttled`
    /// drops and `vmscan:mm_vmscan_throttled` fires with the jiffies slept (`timeout - ret`, at
    /// most the timeout) in microseconds, as 6.18 prints it (`usect_delayed`, its own spelling).
    pub fn reclaim_throttle_end(&self, cx: &Cpu, sleep: ReclaimSleep) {
        let hz = self.kernel.config().hz;
        let now = self.kernel.jiffies();
        let ret = sleep.expires().saturating_sub(now).min(sleep.timeout);
        let delayed = sleep.timeout - ret;
        {
            let mut m = self.inner.lock();
            let woken = m.reclaim_wait.wakeups != sleep.wake_seq;
            m.reclaim_wait.nr_writeback_throttled =
                m.reclaim_wait.nr_writeback_throttled.saturating_sub(1);
            m.stats.reclaim_throttle_sleeps += 1;
            m.stats.reclaim_throttle_woken += u64::from(woken);
            m.stats.reclaim_throttle_jiffies += delayed;
        }
        crate::ktrace!(
            cx,
            target: "vmscan",
            "mm_vmscan_throttled",
            "nid=0 usec_timeout={} usect_delayed={} reason=VMSCAN_THROTTLE_WRITEBACK",
            jiffies_to_usecs(sleep.timeout, hz),
            jiffies_to_usecs(delayed, hz)
        );
    }

    /// `acct_reclaim_writeback()` from `folio_end_writeback()`: while anyone sleeps in
    /// `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)`, the folio's pages count in
    /// `NR_THROTTLED_WRITTEN`, and once more than `SWAP_CLUSTER_MAX` per sleeper ended writeback
    /// since the first sleeper began, every sleeper is woken (`wake_up()`, at each such folio).
    pub(crate) fn acct_reclaim_writeback(m: &mut Mapping, nr_pages: u64) {
        let w = &mut m.reclaim_wait;
        if w.nr_writeback_throttled == 0 {
            return;
        }
        w.nr_throttled_written += nr_pages;
        let written = w.nr_throttled_written - w.nr_reclaim_start;
        if written > SWAP_CLUSTER_MAX * w.nr_writeback_throttled
            || cfg!(feature = "bug-reclaim-throttle-any-completion")
        {
            w.wakeups += 1;
        }
    }

    /// `mem_cgroup_charge()` of up to `nr` new folios under the allocation's `gfp`: charges what
    /// fits under the limit, after `try_to_free_mem_cgroup_pages()` when over it. Returns the
    /// pages charged (0: no room now, or reclaim must wait for writeback first). Only the
    /// `bug-reclaim-pages-out-file` twin appends writeback bios to `submit`.
    pub(crate) fn try_charge(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        nr: u64,
        gfp: GfpFlags,
        submit: &mut Vec<Box<Bio>>,
    ) -> u64 {
        let over = m.memcg.over_by(nr);
        if over > 0 {
            self.try_to_free_mem_cgroup_pages(m, cx, over.max(SWAP_CLUSTER_MAX), gfp, submit);
            if std::mem::take(&mut m.reclaim_must_wait) {
                // folio_wait_writeback() / reclaim_throttle(): the charge goes on after it.
                return 0;
            }
        }
        let fits = match m.memcg.limit_pages {
            Some(limit) => nr.min(limit.saturating_sub(m.memcg.usage_pages)),
            None => nr,
        };
        m.memcg.charge(fits);
        if let Some(r) = m.page_reporting.as_mut() {
            m.stats.reported_pages_allocated += r.alloc(fits, self.kernel.jiffies());
        }
        fits
    }

    /// `writeback_throttling_sane()` for memcg reclaim (`cgroup_reclaim(sc)`, the model's only
    /// kind): true on cgroup v2 (`cgroup_subsys_on_dfl(memory_cgrp_subsys)`), whose memcg is a
    /// dirty domain that `balance_dirty_pages()` throttles; false on cgroup v1, whose reclaim
    /// throttles instead (`reclaim_throttle()`, case 3).
    pub(crate) fn writeback_throttling_sane(&self) -> bool {
        self.config.cgroup_v2
    }

    /// `try_to_free_mem_cgroup_pages()`: reclaims up to `nr_to_reclaim` pages of this mapping's
    /// memcg, scanning each folio at most once, in batches of [`SWAP_CLUSTER_MAX`]
    /// (`shrink_inactive_list()`), under the charge's `gfp` (`sc->gfp_mask`). Returns the pages
    /// freed; sets `m.reclaim_must_wait` when the caller must wait for writeback (cgroup v1).
    pub(crate) fn try_to_free_mem_cgroup_pages(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        nr_to_reclaim: u64,
        gfp: GfpFlags,
        submit: &mut Vec<Box<Bio>>,
    ) -> u64 {
        m.stats.reclaim_runs += 1;
        let (inactive, active) = m.lru.sizes();
        let budget = (inactive + active) as u64;
        let mut scanned = 0;
        let mut reclaimed = 0;
        let mut to_write = Vec::new();
        'scan: while reclaimed < nr_to_reclaim && scanned < budget {
            let (inactive, active) = m.lru.sizes();
            if inactive < active || inactive == 0 {
                // shrink_active_list(): deactivate from the active tail.
                scanned += 1;
                let Some((seq, index)) = m.lru.tail_of(true) else {
                    break;
                };
                m.lru.del(seq, true);
                let new_seq = m.lru.add_head(index, false);
                let f = m.folios.get_mut(&index).expect("an LRU folio is cached");
                f.flags.active = false;
                f.flags.referenced = false;
                f.lru_seq = new_seq;
                m.stats.reclaim_deactivated += 1;
                continue;
            }
            // shrink_inactive_list(): isolate_lru_folios() of up to SWAP_CLUSTER_MAX.
            let take = SWAP_CLUSTER_MAX.min(budget - scanned) as usize;
            let batch: Vec<(i64, u64)> = m
                .lru
                .inactive
                .iter()
                .take(take)
                .map(|(s, i)| (*s, *i))
                .collect();
            let mut nr_taken = 0;
            let mut nr_unqueued_dirty = 0;
            for (seq, index) in batch {
                if reclaimed >= nr_to_reclaim {
                    // Enough: the rest is not taken (sc->nr_to_reclaim reached).
                    break;
                }
                nr_taken += 1;
                scanned += 1;
                m.stats.reclaim_scanned += 1;
                let f = m.folios.get_mut(&index).expect("an LRU folio is cached");
                let fl = f.flags;
                if fl.locked || f.extra_refs > 0 {
                    // folio_trylock() fails / the refcount freeze fails: keep_locked.
                    m.stats.reclaim_skipped_busy += 1;
                    m.lru.del(seq, false);
                    f.lru_seq = m.lru.add_head(index, false);
                } else if fl.writeback {
                    if fl.reclaim && !self.writeback_throttling_sane() && may_enter_fs(gfp) {
                        // Case 3: cgroup v1 waits for this folio's writeback, then retries it:
                        // the folio stays at the tail, the caller waits. Only a charge that may
                        // enter the filesystem does (a no-FS one could deadlock on it).
                        m.stats.reclaim_throttled += 1;
                        m.reclaim_must_wait = true;
                        break 'scan;
                    }
                    // Case 2: mark it for immediate reclaim, activate_locked.
                    f.flags.reclaim = true;
                    f.flags.active = true;
                    m.lru.del(seq, false);
                    f.lru_seq = m.lru.add_head(index, true);
                } else if fl.dirty {
                    // Only kswapd may pageout() a file folio: PG_reclaim, activate_locked, and
                    // the flusher writes it.
                    nr_unqueued_dirty += 1;
                    f.flags.reclaim = true;
                    f.flags.active = true;
                    m.lru.del(seq, false);
                    f.lru_seq = m.lru.add_head(index, true);
                    m.stats.reclaim_dirty_marked += 1;
                    if cfg!(feature = "bug-reclaim-pages-out-file") {
                        // The twin: reclaim writes the folio itself, as the model once did.
                        m.stats.reclaim_writeback_started += 1;
                        to_write.push(index);
                    }
                } else {
                    m.delete_folio(&self.config, cx, index);
                    m.stats.reclaim_evicted += 1;
                    reclaimed += 1;
                }
            }
            if nr_taken > 0 && nr_unqueued_dirty == nr_taken {
                // The flushers are not keeping up: wake them; cgroup v1 throttles here.
                self.wakeup_flusher_threads(m, WbReason::Vmscan);
                if !self.writeback_throttling_sane() {
                    self.reclaim_throttle(m);
                    m.reclaim_must_wait = true;
                    break;
                }
            }
        }
        if !to_write.is_empty() {
            let bios = self.start_writeback_indices(m, cx, to_write);
            submit.extend(bios);
        }
        reclaimed
    }
}
