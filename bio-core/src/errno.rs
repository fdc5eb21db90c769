//! Error numbers (`include/uapi/asm-generic/errno-base.h`, `errno.h`, and the kernel-internal
//! `include/linux/errno.h`): [`Errno`], the one typed errno of the workspace, defined in the
//! hotplug crate and re-exported here for the block layer (the `blk_errors[]` column,
//! `EIOCBQUEUED`). Kernel functions return them negated ([`Errno::as_neg_i32`]); biosim's models
//! pass the typed value where the kernel passes an `int` errno, and convert only where the kernel's
//! integer is what is shown (`blk_status_to_errno()`, the `block_bio_complete` tracepoint).

pub use hotplug::Errno;
