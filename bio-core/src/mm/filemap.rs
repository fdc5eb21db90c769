//! `mm/filemap.c` and `include/linux/page-flags.h`: the folios of one file's page cache
//! (`struct address_space`), with the `PG_dropbehind` flag `RWF_DONTCACHE` sets, and the
//! writeback completion that is supposed to drop them (kernel-semantics.md §6.3).
//!
//! `folio_end_writeback()` calls `folio_end_dropbehind()`, which invalidates the folio only
//! `if (in_task() && folio_trylock(folio))`: a writeback bio completed in interrupt context (the
//! buffer_head and block-device paths) leaves a DONTCACHE folio in the cache, silently. That gap
//! is why the seed series moves those completions to task context (`BIO_COMPLETE_IN_TASK`).
//!
//! One folio is one 4 KiB page here (order-0 folios); indices are page indices.

use crate::kernel::Cpu;
use crate::sync::Mutex;
use std::collections::BTreeMap;

/// `PAGE_SIZE`.
pub const PAGE_SIZE: usize = 4096;

/// The `PG_*` bits of `folio->flags` (`include/linux/page-flags.h`) that this model uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FolioFlags {
    /// `PG_uptodate`.
    pub uptodate: bool,
    /// `PG_dirty`.
    pub dirty: bool,
    /// `PG_writeback`.
    pub writeback: bool,
    /// `PG_dropbehind`: drop from the cache once clean (`RWF_DONTCACHE`).
    pub dropbehind: bool,
    /// `PG_locked`.
    pub locked: bool,
}

/// What happened to folios at writeback completion (simulator counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropbehindStats {
    /// Folios `filemap_end_dropbehind()` removed from the cache.
    pub dropped: u64,
    /// `folio_end_dropbehind()` calls that skipped the folio because `!in_task()`.
    pub skipped_not_in_task: u64,
    /// ... because `folio_trylock()` failed.
    pub skipped_locked: u64,
}

/// `struct address_space`: one file's page cache.
#[derive(Debug, Default)]
pub struct AddressSpace {
    inner: Mutex<Mapping>,
}

#[derive(Debug, Default)]
struct Mapping {
    folios: BTreeMap<u64, (FolioFlags, Vec<u8>)>,
    stats: DropbehindStats,
}

impl AddressSpace {
    /// An empty page cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// A buffered write of one page (`generic_perform_write()` →
    /// `__filemap_get_folio(FGP_WRITEBEGIN | (dontcache ? FGP_DONTCACHE : 0))`): the folio is
    /// found or created, filled and dirtied. A new folio gets `PG_dropbehind` under
    /// `FGP_DONTCACHE`; an existing folio touched without it loses the flag (a normal access
    /// wants the page kept) [derived from `__filemap_get_folio()` in 6.14+].
    pub fn write_page(&self, index: u64, data: &[u8], dontcache: bool) {
        let mut m = self.inner.lock();
        let (f, buf) = m.folios.entry(index).or_insert_with(|| {
            (
                FolioFlags {
                    dropbehind: dontcache,
                    ..FolioFlags::default()
                },
                vec![0; PAGE_SIZE],
            )
        });
        if !dontcache {
            f.dropbehind = false;
        }
        let n = data.len().min(PAGE_SIZE);
        buf[..n].copy_from_slice(&data[..n]);
        f.uptodate = true;
        f.dirty = true;
    }

    /// `folio_clear_dirty_for_io()` + `folio_start_writeback()` on every dirty folio in
    /// `[first, last]`, as writeback (`writeback_iter()`) does. Returns `(index, data, dropbehind)`
    /// of each, in order, for the caller to build bios from.
    pub fn start_writeback(&self, first: u64, last: u64) -> Vec<(u64, Vec<u8>, bool)> {
        let mut m = self.inner.lock();
        m.folios
            .range_mut(first..=last)
            .filter(|(_, (f, _))| f.dirty && !f.writeback)
            .map(|(i, (f, data))| {
                f.dirty = false;
                f.writeback = true;
                (*i, data.clone(), f.dropbehind)
            })
            .collect()
    }

    /// `folio_end_writeback()`: clears `PG_writeback`, then `folio_end_dropbehind()`.
    pub fn folio_end_writeback(&self, index: u64, cx: &Cpu) {
        let mut m = self.inner.lock();
        let Some((f, _)) = m.folios.get_mut(&index) else {
            return;
        };
        f.writeback = false;
        if !f.dropbehind {
            return;
        }
        // folio_end_dropbehind(): only in task context, and only if the folio lock is free.
        if !cx.in_task() {
            m.stats.skipped_not_in_task += 1;
            return;
        }
        if f.locked {
            m.stats.skipped_locked += 1;
            return;
        }
        // filemap_end_dropbehind(): a folio dirtied again or under writeback stays.
        if f.dirty || f.writeback {
            return;
        }
        // folio_test_clear_dropbehind() + folio_unmap_invalidate().
        m.folios.remove(&index);
        m.stats.dropped += 1;
    }

    /// Locks or unlocks a folio (`folio_lock()`/`folio_unlock()`, e.g. a concurrent reader).
    pub fn set_locked(&self, index: u64, locked: bool) {
        if let Some((f, _)) = self.inner.lock().folios.get_mut(&index) {
            f.locked = locked;
        }
    }

    /// The folio's flags, if it is cached.
    pub fn folio(&self, index: u64) -> Option<FolioFlags> {
        self.inner.lock().folios.get(&index).map(|(f, _)| *f)
    }

    /// Cached folios.
    pub fn nr_cached(&self) -> usize {
        self.inner.lock().folios.len()
    }

    /// Cached folios still marked `PG_dropbehind` that are clean and not under writeback: the
    /// ones a DONTCACHE writer expected gone.
    pub fn dropbehind_left(&self) -> Vec<u64> {
        self.inner
            .lock()
            .folios
            .iter()
            .filter(|(_, (f, _))| f.dropbehind && !f.dirty && !f.writeback)
            .map(|(i, _)| *i)
            .collect()
    }

    /// The counters.
    pub fn stats(&self) -> DropbehindStats {
        self.inner.lock().stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{CpuId, KernelConfig};
    use crate::Kernel;

    #[test]
    fn a_dontcache_folio_is_dropped_only_when_writeback_ends_in_task_context() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let m = AddressSpace::new();
        for i in 0..3 {
            m.write_page(i, &[i as u8; 16], true);
        }
        m.write_page(3, &[3; 16], false);
        let wb = m.start_writeback(0, 10);
        assert_eq!(
            wb.iter().map(|w| (w.0, w.2)).collect::<Vec<_>>(),
            [(0, true), (1, true), (2, true), (3, false)]
        );
        cx.with_hardirq(|cx| m.folio_end_writeback(0, cx));
        m.set_locked(1, true);
        m.folio_end_writeback(1, &cx);
        m.folio_end_writeback(2, &cx);
        m.folio_end_writeback(3, &cx);
        assert_eq!(
            m.dropbehind_left(),
            [0, 1],
            "hardirq and a locked folio leave it cached"
        );
        assert!(m.folio(2).is_none(), "task context drops it");
        assert_eq!(
            m.folio(3).map(|f| f.writeback),
            Some(false),
            "a normal folio stays"
        );
        assert_eq!(
            m.stats(),
            DropbehindStats {
                dropped: 1,
                skipped_not_in_task: 1,
                skipped_locked: 1
            }
        );
    }

    #[test]
    fn a_normal_write_clears_dropbehind_and_a_redirtied_folio_stays() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let m = AddressSpace::new();
        m.write_page(0, &[1], true);
        m.write_page(0, &[2], false);
        assert_eq!(m.folio(0).map(|f| f.dropbehind), Some(false));
        m.write_page(1, &[1], true);
        m.start_writeback(1, 1);
        m.write_page(1, &[2], true); // dirtied again while under writeback
        m.folio_end_writeback(1, &cx);
        assert!(m.folio(1).is_some_and(|f| f.dirty && f.dropbehind));
        assert_eq!(m.stats().dropped, 0);
    }
}
