//! Kernel error numbers (`include/uapi/asm-generic/errno-base.h`, `errno.h`, and
//! the kernel-internal `include/linux/errno.h`), as the values of x86-64 Linux.
//! The one typed errno of the workspace: bio-core re-exports it for the block
//! layer's values (the `blk_errors[]` column, `EIOCBQUEUED`).
//!
//! Hotplug callbacks and the hotplug core report failures as negative errno
//! values; the model keeps them typed so callers match on `Errno::EBUSY`
//! rather than on magic numbers, and converts with [`Errno::as_neg_i32`] when a
//! kernel-style integer is wanted (sysfs, traces).

use std::fmt;

/// A kernel errno value, as returned (negated) by hotplug callbacks and by
/// `cpu_up()`/`cpu_down()`/`cpuhp_setup_state()`.
///
/// Models the positive constants of `include/uapi/asm-generic/errno-base.h`
/// and `errno.h`; [`Errno::Other`] carries any value without a named variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Errno {
    /// `EPERM` (1): operation not permitted (`cpu_up()` on a CPU that may not boot).
    EPERM,
    /// `ENOENT` (2): no such entry.
    ENOENT,
    /// `EIO` (5): I/O error; a convenient "the callback failed" value for tests.
    EIO,
    /// `EAGAIN` (11): try again; what an injected `hotplug/fail` returns.
    EAGAIN,
    /// `ENOMEM` (12): out of memory.
    ENOMEM,
    /// `EBUSY` (16): busy; the last online CPU, hotplug disabled, a named state.
    EBUSY,
    /// `ENODEV` (19): no such device (a sysfs file of a CPU that does not exist).
    ENODEV,
    /// `EINVAL` (22): invalid argument.
    EINVAL,
    /// `ENOSPC` (28): no space left; the dynamic state ranges are full.
    ENOSPC,
    /// `EBADE` (52): invalid exchange (`BLK_STS_RESV_CONFLICT`).
    EBADE,
    /// `ENODATA` (61): no data available (`BLK_STS_MEDIUM`).
    ENODATA,
    /// `ETIME` (62): timer expired (`BLK_STS_DURATION_LIMIT`).
    ETIME,
    /// `ENOLINK` (67): link has been severed (`BLK_STS_TRANSPORT`).
    ENOLINK,
    /// `EOVERFLOW` (75): value too large (`BLK_STS_ZONE_ACTIVE_RESOURCE`).
    EOVERFLOW,
    /// `EREMCHG` (78): remote address changed (`BLK_STS_DM_REQUEUE`).
    EREMCHG,
    /// `EILSEQ` (84): illegal byte sequence (`BLK_STS_PROTECTION`).
    EILSEQ,
    /// `EOPNOTSUPP` (95): operation not supported (`CC_ATTR_HOTPLUG_DISABLED`).
    EOPNOTSUPP,
    /// `ETOOMANYREFS` (109): too many references (`BLK_STS_ZONE_OPEN_RESOURCE`).
    ETOOMANYREFS,
    /// `ETIMEDOUT` (110): timed out (`BLK_STS_TIMEOUT`).
    ETIMEDOUT,
    /// `EREMOTEIO` (121): remote I/O error (`BLK_STS_TARGET`).
    EREMOTEIO,
    /// `ERESTARTNOINTR` (513, kernel-internal, `include/linux/errno.h`): what
    /// `restart_syscall()` returns; the syscall is restarted, so user space never sees it
    /// (`lock_device_hotplug_sysfs()` while `device_hotplug_lock` is held).
    ERESTARTNOINTR,
    /// `EIOCBQUEUED` (529, kernel-internal, `include/linux/errno.h`): the I/O was queued and
    /// completes later through `ki_complete()`. Never seen by user space.
    EIOCBQUEUED,
    /// Any other positive errno value.
    Other(u16),
}

impl Errno {
    /// The positive errno number (`EBUSY` → 16).
    pub const fn as_i32(self) -> i32 {
        match self {
            Errno::EPERM => 1,
            Errno::ENOENT => 2,
            Errno::EIO => 5,
            Errno::EAGAIN => 11,
            Errno::ENOMEM => 12,
            Errno::EBUSY => 16,
            Errno::ENODEV => 19,
            Errno::EINVAL => 22,
            Errno::ENOSPC => 28,
            Errno::EBADE => 52,
            Errno::ENODATA => 61,
            Errno::ETIME => 62,
            Errno::ENOLINK => 67,
            Errno::EOVERFLOW => 75,
            Errno::EREMCHG => 78,
            Errno::EILSEQ => 84,
            Errno::EOPNOTSUPP => 95,
            Errno::ETOOMANYREFS => 109,
            Errno::ETIMEDOUT => 110,
            Errno::EREMOTEIO => 121,
            Errno::ERESTARTNOINTR => 513,
            Errno::EIOCBQUEUED => 529,
            Errno::Other(n) => n as i32,
        }
    }

    /// The value the kernel returns (`-EBUSY` → -16).
    pub fn as_neg_i32(self) -> i32 {
        -self.as_i32()
    }

    /// `-NAME` as a kernel reviewer writes a return value (`-EAGAIN`), or `-N` for
    /// [`Errno::Other`].
    pub fn neg_str(self) -> String {
        match self {
            Errno::Other(n) => format!("-{n}"),
            e => format!("-{}", e.name()),
        }
    }

    /// Converts a kernel return value (negative errno) or a positive errno into
    /// an `Errno`; `None` for 0 and for values that are not errno numbers.
    pub fn from_i32(value: i32) -> Option<Errno> {
        let n = value.checked_abs()?;
        Some(match n {
            0 => return None,
            1 => Errno::EPERM,
            2 => Errno::ENOENT,
            5 => Errno::EIO,
            11 => Errno::EAGAIN,
            12 => Errno::ENOMEM,
            16 => Errno::EBUSY,
            19 => Errno::ENODEV,
            22 => Errno::EINVAL,
            28 => Errno::ENOSPC,
            52 => Errno::EBADE,
            61 => Errno::ENODATA,
            62 => Errno::ETIME,
            67 => Errno::ENOLINK,
            75 => Errno::EOVERFLOW,
            78 => Errno::EREMCHG,
            84 => Errno::EILSEQ,
            95 => Errno::EOPNOTSUPP,
            109 => Errno::ETOOMANYREFS,
            110 => Errno::ETIMEDOUT,
            121 => Errno::EREMOTEIO,
            513 => Errno::ERESTARTNOINTR,
            529 => Errno::EIOCBQUEUED,
            // MAX_ERRNO in include/linux/err.h.
            n if n <= 4095 => Errno::Other(n as u16),
            _ => return None,
        })
    }

    /// The symbolic name (`"EBUSY"`), or `"E?"` for [`Errno::Other`].
    pub fn name(self) -> &'static str {
        match self {
            Errno::EPERM => "EPERM",
            Errno::ENOENT => "ENOENT",
            Errno::EIO => "EIO",
            Errno::EAGAIN => "EAGAIN",
            Errno::ENOMEM => "ENOMEM",
            Errno::EBUSY => "EBUSY",
            Errno::ENODEV => "ENODEV",
            Errno::EINVAL => "EINVAL",
            Errno::ENOSPC => "ENOSPC",
            Errno::EBADE => "EBADE",
            Errno::ENODATA => "ENODATA",
            Errno::ETIME => "ETIME",
            Errno::ENOLINK => "ENOLINK",
            Errno::EOVERFLOW => "EOVERFLOW",
            Errno::EREMCHG => "EREMCHG",
            Errno::EILSEQ => "EILSEQ",
            Errno::EOPNOTSUPP => "EOPNOTSUPP",
            Errno::ETOOMANYREFS => "ETOOMANYREFS",
            Errno::ETIMEDOUT => "ETIMEDOUT",
            Errno::EREMOTEIO => "EREMOTEIO",
            Errno::ERESTARTNOINTR => "ERESTARTNOINTR",
            Errno::EIOCBQUEUED => "EIOCBQUEUED",
            Errno::Other(_) => "E?",
        }
    }
}

impl fmt::Display for Errno {
    /// `-EBUSY (-16)`, the way a kernel reviewer reads a return value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "-{} ({})", self.name(), self.as_neg_i32())
    }
}

impl std::error::Error for Errno {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_values_round_trip() {
        for e in [
            Errno::EPERM,
            Errno::ENOENT,
            Errno::EIO,
            Errno::EAGAIN,
            Errno::ENOMEM,
            Errno::EBUSY,
            Errno::ENODEV,
            Errno::EINVAL,
            Errno::ENOSPC,
            Errno::EBADE,
            Errno::ENODATA,
            Errno::ETIME,
            Errno::ENOLINK,
            Errno::EOVERFLOW,
            Errno::EREMCHG,
            Errno::EILSEQ,
            Errno::EOPNOTSUPP,
            Errno::ETOOMANYREFS,
            Errno::ETIMEDOUT,
            Errno::EREMOTEIO,
            Errno::ERESTARTNOINTR,
            Errno::EIOCBQUEUED,
            Errno::Other(111),
        ] {
            assert_eq!(Errno::from_i32(e.as_neg_i32()), Some(e));
            assert_eq!(Errno::from_i32(e.as_i32()), Some(e));
        }
        assert_eq!(Errno::EBUSY.as_neg_i32(), -16);
        assert_eq!(Errno::EAGAIN.as_neg_i32(), -11);
        assert_eq!(Errno::from_i32(0), None);
        assert_eq!(Errno::from_i32(i32::MIN), None);
        assert_eq!(Errno::EINVAL.to_string(), "-EINVAL (-22)");
        assert_eq!(Errno::EIOCBQUEUED.neg_str(), "-EIOCBQUEUED");
        assert_eq!(Errno::ERESTARTNOINTR.as_i32(), 513);
        assert_eq!(Errno::Other(111).neg_str(), "-111");
    }
}
