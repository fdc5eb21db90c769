//! Error numbers (`include/uapi/asm-generic/errno-base.h`, `errno.h`, and the kernel-internal
//! `include/linux/errno.h`), as the positive values of x86-64 Linux. Kernel functions return
//! them negated; biosim's models pass them as `i32` where the kernel passes an `int` errno.
//!
//! The values the hotplug crate already types ([`hotplug::Errno`]) come from there; the block
//! layer's own (the `blk_errors[]` column, `EIOCBQUEUED`) are defined here.

use hotplug::Errno;

/// `EIO`.
pub const EIO: i32 = Errno::EIO.as_i32();
/// `EAGAIN` (`EWOULDBLOCK`).
pub const EAGAIN: i32 = Errno::EAGAIN.as_i32();
/// `ENOMEM`.
pub const ENOMEM: i32 = Errno::ENOMEM.as_i32();
/// `EBUSY`.
pub const EBUSY: i32 = Errno::EBUSY.as_i32();
/// `ENODEV`.
pub const ENODEV: i32 = Errno::ENODEV.as_i32();
/// `EINVAL`.
pub const EINVAL: i32 = Errno::EINVAL.as_i32();
/// `ENOSPC`.
pub const ENOSPC: i32 = Errno::ENOSPC.as_i32();
/// `EBADE`.
pub const EBADE: i32 = 52;
/// `ENODATA`.
pub const ENODATA: i32 = 61;
/// `ETIME`.
pub const ETIME: i32 = 62;
/// `ENOLINK`.
pub const ENOLINK: i32 = 67;
/// `EOVERFLOW`.
pub const EOVERFLOW: i32 = 75;
/// `EREMCHG`.
pub const EREMCHG: i32 = 78;
/// `EILSEQ`.
pub const EILSEQ: i32 = 84;
/// `EOPNOTSUPP`.
pub const EOPNOTSUPP: i32 = Errno::EOPNOTSUPP.as_i32();
/// `ETOOMANYREFS`.
pub const ETOOMANYREFS: i32 = 109;
/// `ETIMEDOUT`.
pub const ETIMEDOUT: i32 = 110;
/// `EREMOTEIO`.
pub const EREMOTEIO: i32 = 121;
/// `EIOCBQUEUED` (kernel-internal): the I/O was queued and completes later through
/// `ki_complete()`.
pub const EIOCBQUEUED: i32 = 529;

/// The constant's name (`"EAGAIN"`) of a positive errno biosim models, for traces.
pub fn errno_name(e: i32) -> Option<&'static str> {
    if let Some(n) = Errno::from_i32(e).filter(|n| !matches!(n, Errno::Other(_))) {
        return Some(n.name());
    }
    Some(match e {
        EBADE => "EBADE",
        ENODATA => "ENODATA",
        ETIME => "ETIME",
        ENOLINK => "ENOLINK",
        EOVERFLOW => "EOVERFLOW",
        EREMCHG => "EREMCHG",
        EILSEQ => "EILSEQ",
        EOPNOTSUPP => "EOPNOTSUPP",
        ETOOMANYREFS => "ETOOMANYREFS",
        ETIMEDOUT => "ETIMEDOUT",
        EREMOTEIO => "EREMOTEIO",
        EIOCBQUEUED => "EIOCBQUEUED",
        _ => return None,
    })
}

/// `-NAME` for a positive errno (`-EAGAIN`), or `-N` for one without a name here.
pub fn neg_errno_str(e: i32) -> String {
    match errno_name(e) {
        Some(n) => format!("-{n}"),
        None => format!("-{e}"),
    }
}
