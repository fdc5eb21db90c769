//! `mm/`: the page cache of a block device, as far as `RWF_DONTCACHE` needs it.
//!
//! - [`filemap`] (`mm/filemap.c`): the mapping, buffered reads and writes, writeback
//!   completion and the dropbehind invalidation, the filemap tracepoints.
//! - [`folio`] (`include/linux/page-flags.h`): the folio flags.
//! - [`swap`] (`mm/swap.c`): the LRU lists.
//! - [`vmscan`] (`mm/vmscan.c`): memcg reclaim.
//! - [`memcontrol`] (`mm/memcontrol.c`): the memcg charge and limit.
//! - [`readahead`] (`mm/readahead.c`): the readahead window.
//! - [`page_writeback`] (`mm/page-writeback.c`): writeback of a range, `fsync`.
//! - [`dontcache`]: the designs compared, the writeback paths and the configuration.
//! - [`testing`]: a memory disk whose completions arrive as device IRQs, for tests.

pub mod dontcache;
pub mod filemap;
pub mod folio;
pub mod memcontrol;
pub mod page_writeback;
pub mod readahead;
pub mod swap;
pub mod testing;
pub mod vmscan;

#[cfg(test)]
mod tests;
