//! `include/linux/page-flags.h` and `include/linux/mm.h`: a folio's `PG_*` flags and its
//! reference count, as far as the page cache of this model uses them.
//!
//! Every folio is order 0 (one 4 KiB page); its index is the page index in the mapping.

use super::filemap::PAGE_SIZE;

/// The `PG_*` bits of `folio->flags` this model uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FolioFlags {
    /// `PG_uptodate`: the folio holds the data of its blocks.
    pub uptodate: bool,
    /// `PG_dirty`: written since the last writeback started.
    pub dirty: bool,
    /// `PG_writeback`: a writeback bio is in flight.
    pub writeback: bool,
    /// `PG_dropbehind`: drop from the cache once clean (`RWF_DONTCACHE`).
    pub dropbehind: bool,
    /// `PG_locked`: held by a read in flight or by `folio_trylock()`.
    pub locked: bool,
    /// `PG_reclaim`: reclaim started this folio's writeback; `folio_end_writeback()` rotates it
    /// to the inactive tail (`folio_rotate_reclaimable()`).
    pub reclaim: bool,
    /// `PG_referenced`: accessed once since it was last on the LRU scan (`folio_mark_accessed()`).
    pub referenced: bool,
    /// `PG_active`: on the active LRU list.
    pub active: bool,
    /// `PG_readahead`: the marker that triggers the next asynchronous readahead.
    pub readahead: bool,
}

/// A folio of the page cache: flags, its bytes and extra references.
#[derive(Debug, Clone)]
pub(crate) struct Folio {
    /// `folio->flags`.
    pub(crate) flags: FolioFlags,
    /// The page's bytes ([`PAGE_SIZE`]).
    pub(crate) data: Vec<u8>,
    /// References beyond the page cache's own (`folio_get()`/`folio_put()`): reclaim skips a folio
    /// that has any (`folio_ref_freeze()` fails in `__remove_mapping()`).
    pub(crate) extra_refs: u32,
    /// The simulated pfn (`folio_pfn()`): the folio's identity.
    pub(crate) pfn: u64,
    /// The folio's position on its LRU list (see [`super::swap::Lru`]).
    pub(crate) lru_seq: i64,
    /// Its last `->read_folio()` failed: the `-EIO` `filemap_read_folio()` returns to the one
    /// waiting for it (not a folio flag; the kernel passes it back on the stack).
    pub(crate) read_error: bool,
}

impl Folio {
    /// A new folio (`filemap_alloc_folio()`): zeroed bytes, no flags.
    pub(crate) fn new(pfn: u64) -> Self {
        Self {
            flags: FolioFlags::default(),
            data: vec![0; PAGE_SIZE],
            extra_refs: 0,
            pfn,
            lru_seq: 0,
            read_error: false,
        }
    }
}
