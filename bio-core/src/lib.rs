//! bio-core: the kernel model of biosim.
//!
//! Each module models a part of the Linux kernel and names the file it models:
//!
//! - [`block`]: `struct bio`, `bio_list`, `blk_status_t`, `bio_endio()` and chaining
//!   (`block/bio.c`, `include/linux/bio.h`, `include/linux/blk_types.h`).
//! - [`kernel`]: the kernel config, per-CPU execution contexts (`include/linux/preempt.h`,
//!   `irqflags.h`, `rcupdate.h`), `might_sleep()` and lockdep's wait-context check.
//! - [`sync`]: the one facade over std, parking_lot and loom.
//!
//! Code the kernel runs "on this CPU" takes a [`kernel::Cpu`] explicitly; nothing here reads an OS
//! thread id or a thread-local, so the deterministic runtime, the threaded runtime and the loom
//! models all run this same code.

#![warn(missing_docs)]

pub mod block;
pub mod kernel;
pub mod sync;

pub use kernel::{Cpu, CpuId, Kernel, KernelConfig};
