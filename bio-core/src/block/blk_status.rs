//! `blk_status_t` (`include/linux/blk_types.h`) and its errno mapping (`blk_errors[]`,
//! `errno_to_blk_status()`, `blk_status_to_errno()` and `blk_status_to_str()` in
//! `block/blk-core.c`).
//!
//! A bio's outcome is a [`BlkStatus`], never an `io::Error`: the block layer and the VFS speak
//! different error languages and the conversion is an explicit, table-driven step, as in the kernel.

use std::fmt;

/// `blk_status_t`: the per-bio completion status (a `u8`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct BlkStatus(pub u8);

macro_rules! blk_statuses {
    ($( $(#[$doc:meta])* $name:ident = $val:expr, $errno:expr, $text:expr; )*) => {
        $( $(#[$doc])* pub const $name: BlkStatus = BlkStatus($val); )*

        /// `blk_errors[]`: (status, errno, name, constant) for every entry of the kernel table.
        /// Indices with no entry (`BLK_STS_ZONE_RESOURCE`) are absent, as the C array's
        /// zero-filled holes are.
        const BLK_ERRORS: &[(BlkStatus, Option<Errno>, &str, &str)] = &[
            $( ($name, $errno, $text, stringify!($name)), )*
        ];
    };
}

use crate::errno::Errno;

blk_statuses! {
    /// `BLK_STS_OK`.
    BLK_STS_OK = 0, None, "";
    /// `BLK_STS_NOTSUPP`: operation not supported (`-EOPNOTSUPP`).
    BLK_STS_NOTSUPP = 1, Some(Errno::EOPNOTSUPP), "operation not supported";
    /// `BLK_STS_TIMEOUT` (`-ETIMEDOUT`).
    BLK_STS_TIMEOUT = 2, Some(Errno::ETIMEDOUT), "timeout";
    /// `BLK_STS_NOSPC`: critical space allocation (`-ENOSPC`).
    BLK_STS_NOSPC = 3, Some(Errno::ENOSPC), "critical space allocation";
    /// `BLK_STS_TRANSPORT` (`-ENOLINK`).
    BLK_STS_TRANSPORT = 4, Some(Errno::ENOLINK), "recoverable transport";
    /// `BLK_STS_TARGET` (`-EREMOTEIO`).
    BLK_STS_TARGET = 5, Some(Errno::EREMOTEIO), "critical target";
    /// `BLK_STS_RESV_CONFLICT` (`-EBADE`).
    BLK_STS_RESV_CONFLICT = 6, Some(Errno::EBADE), "reservation conflict";
    /// `BLK_STS_MEDIUM` (`-ENODATA`).
    BLK_STS_MEDIUM = 7, Some(Errno::ENODATA), "critical medium";
    /// `BLK_STS_PROTECTION` (`-EILSEQ`).
    BLK_STS_PROTECTION = 8, Some(Errno::EILSEQ), "protection";
    /// `BLK_STS_RESOURCE` (`-ENOMEM`).
    BLK_STS_RESOURCE = 9, Some(Errno::ENOMEM), "kernel resource";
    /// `BLK_STS_IOERR`: everything not covered elsewhere (`-EIO`).
    BLK_STS_IOERR = 10, Some(Errno::EIO), "I/O";
    /// `BLK_STS_DM_REQUEUE`: device-mapper internal retry (`-EREMCHG`).
    BLK_STS_DM_REQUEUE = 11, Some(Errno::EREMCHG), "dm internal retry";
    /// `BLK_STS_AGAIN`: nonblocking retry (`-EAGAIN`), what a `REQ_NOWAIT` bio gets instead of
    /// blocking.
    BLK_STS_AGAIN = 12, Some(Errno::EAGAIN), "nonblocking retry";
    /// `BLK_STS_DEV_RESOURCE` (`-EBUSY`).
    BLK_STS_DEV_RESOURCE = 13, Some(Errno::EBUSY), "device resource";
    /// `BLK_STS_ZONE_OPEN_RESOURCE` (`-ETOOMANYREFS`).
    BLK_STS_ZONE_OPEN_RESOURCE = 15, Some(Errno::ETOOMANYREFS), "open zones exceeded";
    /// `BLK_STS_ZONE_ACTIVE_RESOURCE` (`-EOVERFLOW`).
    BLK_STS_ZONE_ACTIVE_RESOURCE = 16, Some(Errno::EOVERFLOW), "active zones exceeded";
    /// `BLK_STS_OFFLINE`: device offline (`-ENODEV`).
    BLK_STS_OFFLINE = 17, Some(Errno::ENODEV), "device offline";
    /// `BLK_STS_DURATION_LIMIT`: command duration limit exceeded (`-ETIME`).
    BLK_STS_DURATION_LIMIT = 18, Some(Errno::ETIME), "duration limit exceeded";
}

/// `BLK_STS_ZONE_RESOURCE`: a driver-internal "retry later" status. It has no `blk_errors[]`
/// entry, so `blk_status_to_errno()` maps it to 0, exactly as the C table's hole does.
pub const BLK_STS_ZONE_RESOURCE: BlkStatus = BlkStatus(14);

/// The highest status the table knows, `ARRAY_SIZE(blk_errors) - 1`.
const BLK_STS_MAX: u8 = 18;

impl BlkStatus {
    /// Whether this is `BLK_STS_OK`.
    pub fn is_ok(self) -> bool {
        self == BLK_STS_OK
    }

    fn entry(self) -> Option<&'static (BlkStatus, Option<Errno>, &'static str, &'static str)> {
        BLK_ERRORS.iter().find(|e| e.0 == self)
    }

    /// The constant's name, e.g. `BLK_STS_IOERR`.
    pub fn name(self) -> &'static str {
        match self.entry() {
            Some(e) => e.3,
            None if self == BLK_STS_ZONE_RESOURCE => "BLK_STS_ZONE_RESOURCE",
            None => "BLK_STS_<invalid>",
        }
    }
}

impl fmt::Debug for BlkStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

impl fmt::Display for BlkStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `errno_to_blk_status()`: the first table entry with that (negative) errno, `BLK_STS_IOERR`
/// for any other value. `0` maps to `BLK_STS_OK`.
pub fn errno_to_blk_status(errno: i32) -> BlkStatus {
    BLK_ERRORS
        .iter()
        .find(|e| e.1.map_or(0, Errno::as_neg_i32) == errno)
        .map(|e| e.0)
        .unwrap_or(BLK_STS_IOERR)
}

/// `blk_status_to_errno()`: the (negative) errno of `status`. A status beyond the table is the
/// kernel's `WARN_ON_ONCE` and `-EIO`; a hole in the table (`BLK_STS_ZONE_RESOURCE`) gives 0.
pub fn blk_status_to_errno(status: BlkStatus) -> i32 {
    if status.0 > BLK_STS_MAX {
        return Errno::EIO.as_neg_i32();
    }
    status
        .entry()
        .and_then(|e| e.1)
        .map_or(0, Errno::as_neg_i32)
}

/// `blk_status_to_str()`: the table's name (`"I/O"`, `"timeout"`, ...), `"<null>"` beyond it.
pub fn blk_status_to_str(status: BlkStatus) -> &'static str {
    if status.0 > BLK_STS_MAX {
        return "<null>";
    }
    status.entry().map(|e| e.2).unwrap_or("<null>")
}

/// Every status the kernel defines (table entries and `BLK_STS_ZONE_RESOURCE`), by value.
pub fn all_statuses() -> impl Iterator<Item = BlkStatus> {
    (0..=BLK_STS_MAX).map(BlkStatus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_blk_types_h() {
        let expected = [
            (BLK_STS_OK, 0),
            (BLK_STS_NOTSUPP, 1),
            (BLK_STS_TIMEOUT, 2),
            (BLK_STS_NOSPC, 3),
            (BLK_STS_TRANSPORT, 4),
            (BLK_STS_TARGET, 5),
            (BLK_STS_RESV_CONFLICT, 6),
            (BLK_STS_MEDIUM, 7),
            (BLK_STS_PROTECTION, 8),
            (BLK_STS_RESOURCE, 9),
            (BLK_STS_IOERR, 10),
            (BLK_STS_DM_REQUEUE, 11),
            (BLK_STS_AGAIN, 12),
            (BLK_STS_DEV_RESOURCE, 13),
            (BLK_STS_ZONE_RESOURCE, 14),
            (BLK_STS_ZONE_OPEN_RESOURCE, 15),
            (BLK_STS_ZONE_ACTIVE_RESOURCE, 16),
            (BLK_STS_OFFLINE, 17),
            (BLK_STS_DURATION_LIMIT, 18),
        ];
        for (s, v) in expected {
            assert_eq!(s.0, v, "{s:?}");
        }
    }

    #[test]
    fn errno_mapping_round_trips_for_every_table_entry() {
        for s in all_statuses() {
            let errno = blk_status_to_errno(s);
            if s == BLK_STS_ZONE_RESOURCE {
                assert_eq!(errno, 0, "a hole in blk_errors[] maps to 0");
                continue;
            }
            assert_eq!(errno_to_blk_status(errno), s, "{s:?} -> {errno}");
        }
    }

    #[test]
    fn unknown_errnos_and_statuses_fall_back_like_the_kernel() {
        assert_eq!(errno_to_blk_status(-9999), BLK_STS_IOERR);
        assert_eq!(errno_to_blk_status(Errno::EIO.as_neg_i32()), BLK_STS_IOERR);
        assert_eq!(errno_to_blk_status(0), BLK_STS_OK);
        assert_eq!(blk_status_to_errno(BlkStatus(200)), -5);
        assert_eq!(blk_status_to_str(BlkStatus(200)), "<null>");
        assert_eq!(blk_status_to_str(BLK_STS_AGAIN), "nonblocking retry");
        assert_eq!(blk_status_to_errno(BLK_STS_NOSPC), -28);
    }
}
