//! `mm/swap.c`: the LRU lists of the page cache (`folio_add_lru()`, `folio_mark_accessed()`,
//! `folio_rotate_reclaimable()`, `folio_activate()`), one memcg's file lists (`LRU_INACTIVE_FILE`,
//! `LRU_ACTIVE_FILE`).
//!
//! Each list is ordered by a sequence number: the head (most recently added) has the highest,
//! the tail (next to reclaim) the lowest. Rotation to the tail takes a number below every other.

use std::collections::BTreeMap;

/// Which LRU list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LruList {
    /// `LRU_INACTIVE_FILE`.
    InactiveFile,
    /// `LRU_ACTIVE_FILE`.
    ActiveFile,
}

/// `struct lruvec`'s two file lists: sequence number → page index.
#[derive(Debug, Default)]
pub(crate) struct Lru {
    pub(crate) inactive: BTreeMap<i64, u64>,
    pub(crate) active: BTreeMap<i64, u64>,
    head: i64,
    tail: i64,
}

impl Lru {
    fn list(&mut self, active: bool) -> &mut BTreeMap<i64, u64> {
        if active {
            &mut self.active
        } else {
            &mut self.inactive
        }
    }

    /// `lruvec_add_folio()`: at the head of a list. Returns the folio's sequence number.
    pub(crate) fn add_head(&mut self, index: u64, active: bool) -> i64 {
        self.head += 1;
        let seq = self.head;
        self.list(active).insert(seq, index);
        seq
    }

    /// `lruvec_add_folio_tail()`: at the tail of a list.
    pub(crate) fn add_tail(&mut self, index: u64, active: bool) -> i64 {
        self.tail -= 1;
        let seq = self.tail;
        self.list(active).insert(seq, index);
        seq
    }

    /// `lruvec_del_folio()`.
    pub(crate) fn del(&mut self, seq: i64, active: bool) {
        self.list(active).remove(&seq);
    }

    /// The tail of a list: (sequence number, index).
    pub(crate) fn tail_of(&self, active: bool) -> Option<(i64, u64)> {
        let l = if active { &self.active } else { &self.inactive };
        l.first_key_value().map(|(s, i)| (*s, *i))
    }

    /// Folios on the lists: (inactive, active).
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.inactive.len(), self.active.len())
    }
}

use super::filemap::{AddressSpace, Mapping};

impl AddressSpace {
    /// `folio_mark_accessed()`: the first access sets `PG_referenced`; a second one on the
    /// inactive list moves the folio to the active list (`folio_activate()`) and clears it. A
    /// dropbehind folio is never marked (`if (folio_test_dropbehind(folio)) return;`, added to
    /// mm/swap.c by the RWF_DONTCACHE series): an uncached access must not promote it.
    pub(crate) fn folio_mark_accessed(&self, m: &mut Mapping, index: u64) {
        let Some(f) = m.folios.get_mut(&index) else {
            return;
        };
        if f.flags.dropbehind {
            return;
        }
        if !f.flags.referenced {
            f.flags.referenced = true;
            return;
        }
        if f.flags.active {
            return;
        }
        f.flags.referenced = false;
        f.flags.active = true;
        m.lru.del(f.lru_seq, false);
        f.lru_seq = m.lru.add_head(index, true);
        m.stats.activated += 1;
    }

    /// `folio_rotate_reclaimable()`: a folio whose reclaim-started writeback ended goes to the
    /// inactive tail, to be reclaimed next (`lru_move_tail()`).
    pub(crate) fn folio_rotate_reclaimable(&self, m: &mut Mapping, index: u64) {
        let Some(f) = m.folios.get_mut(&index) else {
            return;
        };
        if f.flags.locked || f.flags.dirty {
            return;
        }
        m.lru.del(f.lru_seq, f.flags.active);
        f.flags.active = false;
        f.lru_seq = m.lru.add_tail(index, false);
    }
}
