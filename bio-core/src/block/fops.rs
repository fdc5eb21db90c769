//! `block/fops.c` (`def_blk_fops`, `blkdev_read_iter()`, `blkdev_write_iter()`) and
//! `include/linux/fs.h`'s `kiocb_set_rw_flags()`: the file operations of a block device opened
//! buffered, and whether `RWF_DONTCACHE` is accepted on it.
//!
//! `kiocb_set_rw_flags()` refuses `RWF_DONTCACHE` with `EOPNOTSUPP` unless the file's
//! `f_op->fop_flags` has `FOP_DONTCACHE`. 6.18's `def_blk_fops` does not (the live kernel refuses
//! the flag on `/dev/loopN`); patch 4/4 of the series adds it, as RFC v3's 2/2 does.
//! [`PageCacheConfig::force_dontcache`] adds it on the other designs, to measure what they would
//! leave behind.
//!
//! Also `blkdev_dio_pool`, the bio_set of `blkdev_direct_IO()`'s bios ([`blkdev_dio_pool`]).

use crate::errno::Errno;
use crate::kernel::Cpu;
use crate::mm::dontcache::PageCacheConfig;
use crate::mm::filemap::{AddressSpace, IocbFlags, ReadProgress, WriteProgress};

/// `blkdev_dio_pool`: `blkdev_init()`'s `bioset_init(&blkdev_dio_pool, 4, offsetof(struct
/// blkdev_dio, bio), BIOSET_NEED_BVECS | BIOSET_PERCPU_CACHE)`, one per kernel, made on first
/// use (the per-CPU cache is not modelled).
pub fn blkdev_dio_pool(kernel: &crate::kernel::Kernel) -> &crate::block::BioSet {
    kernel
        .blkdev_dio_pool
        .get_or_init(|| crate::block::BioSet::new(BLKDEV_DIO_POOL_SIZE))
}

/// The reserve of [`blkdev_dio_pool`].
pub const BLKDEV_DIO_POOL_SIZE: usize = 4;

/// `RWF_HIPRI`.
pub const RWF_HIPRI: u32 = 0x0000_0001;
/// `RWF_DSYNC`.
pub const RWF_DSYNC: u32 = 0x0000_0002;
/// `RWF_SYNC`.
pub const RWF_SYNC: u32 = 0x0000_0004;
/// `RWF_NOWAIT`.
pub const RWF_NOWAIT: u32 = 0x0000_0008;
/// `RWF_APPEND`.
pub const RWF_APPEND: u32 = 0x0000_0010;
/// `RWF_NOAPPEND`.
pub const RWF_NOAPPEND: u32 = 0x0000_0020;
/// `RWF_ATOMIC`.
pub const RWF_ATOMIC: u32 = 0x0000_0040;
/// `RWF_DONTCACHE`: buffered I/O that drops the cache after reading or writing the data.
pub const RWF_DONTCACHE: u32 = 0x0000_0080;
/// `RWF_NOSIGNAL` (6.16): no `SIGPIPE` from a pipe or socket write; nothing for a block device.
pub const RWF_NOSIGNAL: u32 = 0x0000_0100;
/// `RWF_SUPPORTED`: every flag `kiocb_set_rw_flags()` knows (include/uapi/linux/fs.h of 6.18,
/// `RWF_NOSIGNAL` included).
pub const RWF_SUPPORTED: u32 = RWF_HIPRI
    | RWF_DSYNC
    | RWF_SYNC
    | RWF_NOWAIT
    | RWF_APPEND
    | RWF_NOAPPEND
    | RWF_ATOMIC
    | RWF_DONTCACHE
    | RWF_NOSIGNAL;

/// `FOP_BUFFER_RASYNC`: buffered reads may be async (`RWF_NOWAIT`).
pub const FOP_BUFFER_RASYNC: u32 = 1 << 0;
/// `FOP_BUFFER_WASYNC`: buffered writes may be async.
pub const FOP_BUFFER_WASYNC: u32 = 1 << 1;
/// `FOP_DONTCACHE`: the file supports `RWF_DONTCACHE`.
pub const FOP_DONTCACHE: u32 = 1 << 7;

/// `struct file_operations`, as far as `kiocb_set_rw_flags()` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOperations {
    /// The kernel symbol (`def_blk_fops`).
    pub name: &'static str,
    /// `fop_flags`.
    pub fop_flags: u32,
}

impl FileOperations {
    /// Whether `FOP_DONTCACHE` is set.
    pub fn dontcache(&self) -> bool {
        self.fop_flags & FOP_DONTCACHE != 0
    }
}

/// `def_blk_fops` of the design in `config`: `FOP_BUFFER_RASYNC`, plus `FOP_DONTCACHE` with
/// patch 4/4 (the bio-level series) or RFC v3, or when forced.
pub fn def_blk_fops(config: &PageCacheConfig) -> FileOperations {
    let mut fop_flags = FOP_BUFFER_RASYNC;
    if config.design.bdev_fop_dontcache() || config.force_dontcache {
        fop_flags |= FOP_DONTCACHE;
    }
    FileOperations {
        name: "def_blk_fops",
        fop_flags,
    }
}

/// `kiocb_set_rw_flags()`: the `IOCB_*` flags of a `preadv2()`/`pwritev2()` with `flags`, or
/// `EOPNOTSUPP` for an unknown flag or for `RWF_DONTCACHE` without `FOP_DONTCACHE`, `EINVAL` for
/// `RWF_APPEND | RWF_NOAPPEND`. `RWF_DSYNC`/`RWF_SYNC` are accepted but not modelled: biosim's
/// `generic_write_sync()` does not sync the range for them (a caller wanting it calls
/// [`AddressSpace::filemap_write_and_wait_range`]).
pub fn kiocb_set_rw_flags(fops: &FileOperations, flags: u32) -> Result<IocbFlags, Errno> {
    if flags & !RWF_SUPPORTED != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if flags & RWF_APPEND != 0 && flags & RWF_NOAPPEND != 0 {
        return Err(Errno::EINVAL);
    }
    let mut iocb = IocbFlags::NONE;
    if flags & RWF_NOWAIT != 0 {
        // A block device file has FMODE_NOWAIT.
        iocb = iocb | IocbFlags::IOCB_NOWAIT;
    }
    if flags & RWF_DONTCACHE != 0 {
        if !fops.dontcache() {
            return Err(Errno::EOPNOTSUPP);
        }
        iocb = iocb | IocbFlags::IOCB_DONTCACHE;
    }
    Ok(iocb)
}

/// `preadv2(fd, ..., flags)` on the block device: `kiocb_set_rw_flags()` with the mapping's
/// `def_blk_fops`, then `blkdev_read_iter()` → `filemap_read()`.
pub fn blkdev_read_iter(
    mapping: &AddressSpace,
    cx: &Cpu,
    pos: u64,
    buf: &mut [u8],
    rwf: u32,
) -> Result<ReadProgress, Errno> {
    let flags = kiocb_set_rw_flags(&def_blk_fops(mapping.config()), rwf)?;
    mapping.filemap_read(cx, pos, buf, flags)
}

/// `pwritev2(fd, ..., flags)` on the block device: `kiocb_set_rw_flags()`, then
/// `blkdev_write_iter()` → `generic_perform_write()` + `generic_write_sync()`. A buffered
/// `RWF_NOWAIT` write is `EOPNOTSUPP` (`blkdev_write_iter()`: `(ki_flags & (IOCB_NOWAIT |
/// IOCB_DIRECT)) == IOCB_NOWAIT`).
pub fn blkdev_write_iter(
    mapping: &AddressSpace,
    cx: &Cpu,
    pos: u64,
    data: &[u8],
    rwf: u32,
) -> Result<WriteProgress, Errno> {
    let flags = kiocb_set_rw_flags(&def_blk_fops(mapping.config()), rwf)?;
    if rwf & RWF_NOWAIT != 0 {
        // Every write here is buffered (no IOCB_DIRECT).
        return Err(Errno::EOPNOTSUPP);
    }
    mapping.generic_perform_write(cx, pos, data, flags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::dontcache::{DontcacheDesign, WritebackPath};

    /// Catches a `def_blk_fops` with `FOP_DONTCACHE` on a kernel without patch 4/4 (the live
    /// 6.18 kernel refuses the flag) and one without it where the patch is applied.
    #[test]
    fn the_block_device_refuses_rwf_dontcache_without_patch_4() {
        for design in DontcacheDesign::all() {
            let cfg = PageCacheConfig::new(design, WritebackPath::Iomap);
            let got = kiocb_set_rw_flags(&def_blk_fops(&cfg), RWF_DONTCACHE);
            match design {
                DontcacheDesign::Baseline | DontcacheDesign::XfsWorkqueue => {
                    assert_eq!(got, Err(Errno::EOPNOTSUPP), "{design}")
                }
                DontcacheDesign::V3 | DontcacheDesign::Bio(_) => {
                    assert_eq!(got, Ok(IocbFlags::IOCB_DONTCACHE), "{design}")
                }
            }
            // Forced, every design accepts it; a plain read never needs it.
            let forced = cfg.clone().with_force_dontcache();
            assert!(kiocb_set_rw_flags(&def_blk_fops(&forced), RWF_DONTCACHE).is_ok());
            assert_eq!(
                kiocb_set_rw_flags(&def_blk_fops(&cfg), 0),
                Ok(IocbFlags::NONE)
            );
        }
        let cfg = PageCacheConfig::new(DontcacheDesign::Baseline, WritebackPath::Iomap);
        assert_eq!(
            kiocb_set_rw_flags(&def_blk_fops(&cfg), 0x200),
            Err(Errno::EOPNOTSUPP),
            "an unknown RWF bit"
        );
        assert_eq!(
            kiocb_set_rw_flags(&def_blk_fops(&cfg), RWF_NOSIGNAL),
            Ok(IocbFlags::NONE),
            "RWF_NOSIGNAL is in 6.18's RWF_SUPPORTED"
        );
        assert_eq!(
            kiocb_set_rw_flags(&def_blk_fops(&cfg), RWF_APPEND | RWF_NOAPPEND),
            Err(Errno::EINVAL)
        );
    }

    /// Through `pwritev2()`/`preadv2()`: refused before any folio is made on the baseline, taken
    /// on v7.
    #[test]
    fn pwritev2_with_rwf_dontcache_is_refused_before_touching_the_cache() {
        use crate::block::complete_in_task::Variant;
        use crate::mm::testing::Rig;
        let data = vec![1; 4096];
        let r = Rig::with(DontcacheDesign::Baseline, WritebackPath::Iomap, |c| {
            c.with_nr_pages(8)
        });
        let cx = r.task();
        assert_eq!(
            blkdev_write_iter(&r.mapping, &cx, 0, &data, RWF_DONTCACHE).err(),
            Some(Errno::EOPNOTSUPP)
        );
        let mut buf = vec![0; 4096];
        assert_eq!(
            blkdev_read_iter(&r.mapping, &cx, 0, &mut buf, RWF_DONTCACHE).err(),
            Some(Errno::EOPNOTSUPP)
        );
        assert_eq!(r.mapping.stats().folios_added, 0);
        let r = Rig::with(
            DontcacheDesign::Bio(Variant::V7),
            WritebackPath::Iomap,
            |c| c.with_nr_pages(8),
        );
        let cx = r.task();
        let p = blkdev_write_iter(&r.mapping, &cx, 0, &data, RWF_DONTCACHE).unwrap();
        assert_eq!((p.written, p.submit.len()), (4096, 1), "written and kicked");
        // A buffered RWF_NOWAIT write is refused (blkdev_write_iter()); a NOWAIT read is not
        // (def_blk_fops has FOP_BUFFER_RASYNC).
        let before = r.mapping.stats().folios_added;
        assert_eq!(
            blkdev_write_iter(&r.mapping, &cx, 4096, &data, RWF_NOWAIT).err(),
            Some(Errno::EOPNOTSUPP)
        );
        assert_eq!(r.mapping.stats().folios_added, before);
        assert!(blkdev_read_iter(&r.mapping, &cx, 0, &mut buf, RWF_NOWAIT).is_ok());
    }
}
