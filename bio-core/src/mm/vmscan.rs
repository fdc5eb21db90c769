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
//! [`crate::fs::fs_writeback`]) and, on cgroup v1, `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)`:
//! the caller waits for writeback ([`Blocked::Memcg`]). That is the only throttle a writer meets. When the inactive list is smaller than the
//! active one, `shrink_active_list()` first moves active folios to it (`inactive_is_low()`, the
//! ratio 1 of a memcg under 1 GB).
//!
//! **Simplifications.** One memcg with a hard limit (cgroup v1's `memory.limit_in_bytes`, v2's
//! `memory.max`; no `memory.high`, no ancestors); there is no kswapd
//! (global reclaim: the configured machine is large and only this memcg is under pressure), so no
//! reclaim writes a file folio itself. `reclaim_throttle()` sleeps up to `HZ/10` or until enough
//! reclaim-marked writeback completes; here the caller waits for the next completion of the
//! mapping's I/O (or the flusher's first bios) and retries the charge, which reclaims again. The
//! `VMSCAN_THROTTLE_CONGESTED`/`ISOLATED` throttles, MGLRU and the anon lists are not modelled.
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

/// `may_enter_fs()` for a page cache folio: whether reclaim under `gfp` (`sc->gfp_mask`) may wait
/// on it, i.e. whether the charge has `__GFP_FS` (a block device folio is not swap-backed, so only
/// the flag counts).
pub(crate) fn may_enter_fs(gfp: GfpFlags) -> bool {
    gfp.contains(GfpFlags::__GFP_FS)
}

/// `SWAP_CLUSTER_MAX`: reclaim frees at least this many pages per call.
pub const SWAP_CLUSTER_MAX: u64 = 32;

impl AddressSpace {
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
                    m.stats.reclaim_throttled += 1;
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
