//! bio-core: the kernel model of biosim.
//!
//! Each module models a part of the Linux kernel and names the file it models:
//!
//! - [`block`]: `struct bio`, `bio_list`, `blk_status_t`, `bio_endio()` and chaining
//!   (`block/bio.c`, `include/linux/bio.h`, `include/linux/blk_types.h`); [`block::fops`]: the
//!   block device opened buffered (`block/fops.c`: `def_blk_fops` with or without
//!   `FOP_DONTCACHE`, `blkdev_read_iter()`/`blkdev_write_iter()`, `kiocb_set_rw_flags()`).
//! - [`drivers`]: block drivers: the loop driver with its NOWAIT series
//!   (`drivers/block/loop.c`).
//! - [`errno`]: the error numbers kernel functions return (`include/uapi/asm-generic/errno*.h`).
//! - [`fs`]: the block device's address-space operations, iomap and buffer_head, and where they
//!   set `BIO_COMPLETE_IN_TASK` (`fs/iomap/`, `fs/buffer.c`, `fs/mpage.c`), and XFS's ioend
//!   workqueue completion (`fs/xfs/xfs_aops.c`).
//! - [`mm`]: the page cache above a block device (`mm/filemap.c`, `swap.c`, `vmscan.c`,
//!   `memcontrol.c`, `readahead.c`, `page-writeback.c`): folios, LRU, memcg limit and reclaim,
//!   readahead, writeback, `RWF_DONTCACHE`'s dropbehind folios, the designs compared
//!   (`mm::dontcache`) and RFC v3's per-CPU batch (`mm::dropbehind_v3`).
//! - [`kernel`]: the kernel config, per-CPU execution contexts (`include/linux/preempt.h`,
//!   `irqflags.h`, `rcupdate.h`), `might_sleep()` and lockdep's wait-context check, the simulated
//!   tasks (`kernel::Task`), and what `kernel/trace/` records with each tracepoint (the ftrace
//!   flags column, hashed `%p`, the [`ktrace!`] macro every tracepoint goes through).
//! - [`workqueue`]: `kernel/workqueue.c`: workqueues, work and delayed work, worker pools, the
//!   rescuer, disassociation on CPU offline.
//! - [`time`]: jiffies and per-CPU timers (`kernel/time/timer.c`).
//! - [`irq`]: hard IRQs, softirqs and IPIs (`kernel/irq/`, `kernel/softirq.c`, `kernel/smp.c`).
//! - [`sync`]: the one facade over std, parking_lot and loom.
//!
//! Code the kernel runs "on this CPU" takes a [`kernel::Cpu`] explicitly; nothing here reads an OS
//! thread id or a thread-local, so the deterministic runtime, the threaded runtime and the loom
//! models all run this same code.

#![warn(missing_docs)]

pub mod block;
pub mod drivers;
pub mod errno;
pub mod fs;
pub mod irq;
pub mod kernel;
pub mod mm;
pub mod sync;
pub mod time;
pub mod workqueue;

pub use kernel::{Cpu, CpuId, Kernel, KernelConfig};
