//! `mm/`: the page cache of a block device, as far as `RWF_DONTCACHE` needs it.
//!
//! - [`filemap`] (`mm/filemap.c`): the mapping, buffered reads and writes, writeback
//!   completion and the dropbehind invalidation, the filemap tracepoints.
//! - [`folio`] (`include/linux/page-flags.h`): the folio flags.
//! - [`gfp`] (`include/linux/gfp_types.h`): allocation flags, `current_gfp_context()`,
//!   `might_alloc()`.
//! - [`slab`] (`include/linux/slab.h`): `kmalloc()`/`kmem_cache_alloc()`, the one allocation
//!   function, with `failslab`; [`mempool`] (`mm/mempool.c`): the reserve behind it.
//! - [`swap`] (`mm/swap.c`): the LRU lists.
//! - [`vmscan`] (`mm/vmscan.c`): memcg reclaim (no file pageout: it wakes the flusher).
//! - [`memcontrol`] (`mm/memcontrol.c`): the memcg charge and limit.
//! - [`page_reporting`] (`mm/page_reporting.c`): a VM guest's free page reporting, which makes
//!   an allocation from memory the host discarded a host fault.
//! - [`readahead`] (`mm/readahead.c`): the readahead window.
//! - [`page_writeback`] (`mm/page-writeback.c`): writeback of a range, `fsync`, the dirty
//!   limits and `balance_dirty_pages()`; the flusher is [`crate::fs::fs_writeback`].
//! - [`dirty_ratelimit`] (`mm/page-writeback.c`): `balance_dirty_pages()`'s position ratio,
//!   rate limit and pause bounds.
//! - [`dontcache`]: the designs compared, the writeback paths and the configuration.
//! - [`dropbehind_v3`] (`mm/filemap.c` of RFC v3): the per-CPU `folio_batch` behind
//!   `folio_end_dropbehind_irq()`; a `DontcacheDesign::V3` mapping sets it up itself.
//! - [`testing`]: a memory disk whose completions arrive as device IRQs, for tests.
//!
//! The calls are step-wise: each returns the bios to submit and what it waits for. A driver
//! submits them, completes them where a device would (hardirq), runs the deferred work, and
//! calls again:
//!
//! ```
//! use bio_core::block::complete_in_task::{bio_complete_init, Variant};
//! use bio_core::block::fops::{blkdev_write_iter, RWF_DONTCACHE};
//! use bio_core::mm::dontcache::{DontcacheDesign, PageCacheConfig, WritebackPath};
//! use bio_core::mm::filemap::AddressSpace;
//! use bio_core::mm::testing::{run_deferred, IrqDisk};
//! use bio_core::{CpuId, Kernel, KernelConfig};
//!
//! let design = DontcacheDesign::Bio(Variant::V7);
//! let kernel = Kernel::new(KernelConfig::default(), 2).unwrap();
//! bio_complete_init(&kernel, design.boot_variant(), None).unwrap();
//! let config = PageCacheConfig::new(design, WritebackPath::Iomap).with_limit(64);
//! let mapping = AddressSpace::new(&kernel, config);
//! let (task, irq) = (kernel.cpu(CpuId(0)).unwrap(), kernel.cpu(CpuId(1)).unwrap());
//! let disk = IrqDisk::new();
//!
//! // pwritev2(RWF_DONTCACHE) of 16 pages: copied, and writeback kicked before it returns.
//! let p = blkdev_write_iter(&mapping, &task, 0, &[7; 16 * 4096], RWF_DONTCACHE).unwrap();
//! assert_eq!((p.written, p.blocked), (16 * 4096, None));
//! disk.submit(p.submit);
//! disk.complete_all(&irq); // bio_endio() in hardirq: BIO_COMPLETE_IN_TASK defers it
//! run_deferred(&kernel); // bio_complete_work_fn: folio_end_writeback() in task context
//! assert_eq!(mapping.stats().nr_cached, 0);
//! assert_eq!(disk.page(3), vec![7; 4096]);
//! ```

pub mod dirty_ratelimit;
pub mod dontcache;
pub mod dropbehind_v3;
pub mod filemap;
pub mod folio;
pub mod gfp;
pub mod memcontrol;
pub mod mempool;
pub mod page_reporting;
pub mod page_writeback;
pub mod readahead;
pub mod slab;
pub mod swap;
pub mod testing;
pub mod vmscan;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod writeback_tests;
