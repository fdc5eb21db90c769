//! `RWF_DONTCACHE` on a block device opened buffered (block/fops.c `def_blk_fops`, the file
//! operations of `/dev/loopN`): `kiocb_set_rw_flags()` (include/linux/fs.h) refuses the flag with
//! `EOPNOTSUPP` unless the file's `f_op->fop_flags` has `FOP_DONTCACHE`. Linux 6.18's
//! `def_blk_fops` has `FOP_BUFFER_RASYNC | FOP_BUFFER_WASYNC` (and others) but not
//! `FOP_DONTCACHE`; patch 4/4 of the seed series adds it, which makes the block device's own
//! mapping take dropbehind folios (its writeback goes through `blkdev_writepages()`, iomap or
//! buffer heads, whose bios patches 2/4 and 3/4 complete in task context).

use crate::dev::backing::RwFlags;
use crate::dev::cleanup::TempFile;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// What one `preadv2`/`pwritev2` on the device returned: `None` = accepted, else the errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BdevProbe {
    /// The device, e.g. `/dev/loop0`.
    pub dev: String,
    /// A plain buffered `preadv2()` of one block (the control: must be accepted).
    pub plain_read: Option<i32>,
    /// `preadv2(RWF_DONTCACHE)` of one block.
    pub dontcache_read: Option<i32>,
    /// `pwritev2(RWF_DONTCACHE)` of one block.
    pub dontcache_write: Option<i32>,
}

/// `EOPNOTSUPP`'s name and number, or the errno's number.
pub fn errno_name(e: Option<i32>) -> String {
    match e {
        None => "accepted".into(),
        Some(libc::EOPNOTSUPP) => "EOPNOTSUPP".into(),
        Some(libc::EINVAL) => "EINVAL".into(),
        Some(libc::EAGAIN) => "EAGAIN".into(),
        Some(n) => format!("errno {n}"),
    }
}

/// The inverse of [`errno_name`] (for recordings).
pub fn parse_errno(s: &str) -> Option<Option<i32>> {
    Some(match s {
        "accepted" => None,
        "EOPNOTSUPP" => Some(libc::EOPNOTSUPP),
        "EINVAL" => Some(libc::EINVAL),
        "EAGAIN" => Some(libc::EAGAIN),
        _ => Some(s.strip_prefix("errno ")?.parse().ok()?),
    })
}

fn one(fd: libc::c_int, write: bool, flags: RwFlags, buf: &mut [u8]) -> Option<i32> {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    loop {
        // SAFETY: `iov` describes `buf`, live and exclusively borrowed for the call.
        let r = unsafe {
            if write {
                libc::pwritev2(fd, &iov, 1, 0, flags.bits() as libc::c_int)
            } else {
                libc::preadv2(fd, &iov, 1, 0, flags.bits() as libc::c_int)
            }
        };
        if r >= 0 {
            return None;
        }
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if e != libc::EINTR {
            return Some(e);
        }
    }
}

/// Attaches a loop device over a 1 MiB sparse temporary file in `dir`, opens `/dev/loopN`
/// buffered and tries one block with and without `RWF_DONTCACHE`; detaches and removes the file.
pub fn probe(dir: &Path) -> Result<BdevProbe, String> {
    crate::dev::space::ensure_fits(dir, 1 << 20, "block device probe file")?;
    let tmp = TempFile::create_in(dir, "biosim-dontcache-bdev").map_err(|e| e.to_string())?;
    let backing = std::fs::File::options()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(tmp.path())
        .map_err(|e| format!("open {}: {e}", tmp.path().display()))?;
    backing
        .set_len(1 << 20)
        .map_err(|e| format!("truncate {}: {e}", tmp.path().display()))?;
    let lo = crate::calibrate::loop_cal::live::attach(tmp.path()).map_err(|e| e.to_string())?;
    let dev = lo.dev_path().display().to_string();
    let f = std::fs::File::options()
        .read(true)
        .write(true)
        .open(&dev)
        .map_err(|e| format!("open {dev} buffered: {e}"))?;
    let mut buf = vec![0u8; 4096];
    let fd = f.as_raw_fd();
    let r = BdevProbe {
        dev: dev.clone(),
        plain_read: one(fd, false, RwFlags::empty(), &mut buf),
        dontcache_read: one(fd, false, RwFlags::DONTCACHE, &mut buf),
        dontcache_write: one(fd, true, RwFlags::DONTCACHE, &mut buf),
    };
    drop(f);
    drop(lo); // LOOP_CLR_FD
    drop(backing);
    drop(tmp);
    Ok(r)
}
