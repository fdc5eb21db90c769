//! `mm/vmscan.c`: memcg reclaim of the page cache (`try_to_free_mem_cgroup_pages()` →
//! `shrink_lruvec()` → `shrink_active_list()` / `shrink_inactive_list()` →
//! `shrink_folio_list()`), as cgroup v1's limit drives it.
//!
//! From the inactive tail: a clean, unlocked folio without extra references is evicted
//! (`__remove_mapping()`); a dirty one gets `PG_reclaim` and its writeback is started (the
//! writeback reclaim wakes, `wakeup_flusher_threads(WB_REASON_VMSCAN)`; the bios go to the caller)
//! and it is activated (`activate_locked`); one under writeback is kept (cgroup v1's
//! `folio_wait_writeback()` is the caller's wait, [`Blocked::Memcg`](super::filemap::Blocked));
//! locked or referenced-by-someone folios are put back. When the inactive list is smaller than the
//! active one, `shrink_active_list()` first moves active folios to it (`inactive_is_low()`).
//!
//! **Simplifications.** In the kernel `shrink_folio_list()` never pages out a file folio outside
//! kswapd: it sets `PG_reclaim` and activates the folio, and `shrink_inactive_list()` wakes the
//! flusher (`wakeup_flusher_threads(WB_REASON_VMSCAN)`) when every folio it took was dirty and
//! unqueued; the flusher then writes the inode's dirty range. Here reclaim starting the dirty
//! folio's writeback itself stands for that flusher (same folios, no flusher thread, no delay).
//! There is no `balance_dirty_pages()` and no background writeback: dirty folios leave only
//! through reclaim, `fsync` or `RWF_DONTCACHE`'s kick, which the normal (not DONTCACHE) write
//! figures of the seed-writes preset depend on.

// Bios travel boxed everywhere in bio-core (`Box<Bio>` moves from submitter to driver to
// `bio_endio()`); a list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

use super::filemap::{AddressSpace, Mapping};
use crate::block::Bio;
use crate::kernel::Cpu;

/// `SWAP_CLUSTER_MAX`: reclaim frees at least this many pages per call.
pub const SWAP_CLUSTER_MAX: u64 = 32;

impl AddressSpace {
    /// `mem_cgroup_charge()` of up to `nr` new folios: charges what fits under the limit, after
    /// `try_to_free_mem_cgroup_pages()` when over it. Returns the pages charged (0: no room now);
    /// reclaim's writeback bios are appended to `submit`.
    pub(crate) fn try_charge(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        nr: u64,
        submit: &mut Vec<Box<Bio>>,
    ) -> u64 {
        let over = m.memcg.over_by(nr);
        if over > 0 {
            self.try_to_free_mem_cgroup_pages(m, cx, over.max(SWAP_CLUSTER_MAX), submit);
        }
        let fits = match m.memcg.limit_pages {
            Some(limit) => nr.min(limit.saturating_sub(m.memcg.usage_pages)),
            None => nr,
        };
        m.memcg.charge(fits);
        fits
    }

    /// `try_to_free_mem_cgroup_pages()`: reclaims up to `nr_to_reclaim` pages of this mapping's
    /// memcg, scanning each folio at most once. Returns the pages freed.
    pub(crate) fn try_to_free_mem_cgroup_pages(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        nr_to_reclaim: u64,
        submit: &mut Vec<Box<Bio>>,
    ) -> u64 {
        m.stats.reclaim_runs += 1;
        let (inactive, active) = m.lru.sizes();
        let budget = (inactive + active) as u64;
        let mut scanned = 0;
        let mut reclaimed = 0;
        let mut to_write = Vec::new();
        while reclaimed < nr_to_reclaim && scanned < budget {
            scanned += 1;
            let (inactive, active) = m.lru.sizes();
            if inactive < active || inactive == 0 {
                // shrink_active_list(): deactivate from the active tail.
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
            let Some((seq, index)) = m.lru.tail_of(false) else {
                break;
            };
            m.stats.reclaim_scanned += 1;
            let f = m.folios.get_mut(&index).expect("an LRU folio is cached");
            let fl = f.flags;
            if fl.locked || f.extra_refs > 0 {
                m.stats.reclaim_skipped_busy += 1;
                m.lru.del(seq, false);
                f.lru_seq = m.lru.add_head(index, false);
            } else if fl.writeback {
                if fl.reclaim {
                    m.stats.reclaim_throttled += 1;
                } else {
                    f.flags.reclaim = true;
                }
                m.lru.del(seq, false);
                f.lru_seq = m.lru.add_head(index, false);
            } else if fl.dirty {
                f.flags.reclaim = true;
                f.flags.active = true;
                m.lru.del(seq, false);
                f.lru_seq = m.lru.add_head(index, true);
                m.stats.reclaim_writeback_started += 1;
                to_write.push(index);
            } else {
                m.delete_folio(&self.config, cx, index);
                m.stats.reclaim_evicted += 1;
                reclaimed += 1;
            }
        }
        if !to_write.is_empty() {
            let bios = self.start_writeback_indices(m, cx, to_write);
            submit.extend(bios);
        }
        reclaimed
    }
}
