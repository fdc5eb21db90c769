//! A loop device's backing file that is itself a simulated block device (`losetup` on
//! `/dev/nullb0` or `/dev/loop1`): the direct I/O `lo_rw_aio()` starts goes to
//! `blkdev_direct_IO()`, which allocates a bio from `blkdev_dio_pool` (`GFP_KERNEL`: the mempool
//! falls back to its reserve and never fails), sets it over the request's pages and submits it
//! with `submit_bio_noacct()` in the submitter's context; the bio's end calls `ki_complete()`
//! (`lo_rw_aio_complete()`).
//!
//! Since a loop device's `->queue_rq()` runs inside `__submit_bio_noacct_mq()` (or its bio-based
//! `->submit_bio()` inside `__submit_bio_noacct()`), the lower bio lands on `current->bio_list`
//! and is handled after `loop_queue_rq()` returns: the stacking is the kernel's, not a
//! recursion. A lower device that supports `REQ_NOWAIT` gets the NOWAIT attempt as
//! `REQ_NOWAIT` (`blkdev_direct_IO()`: `IOCB_NOWAIT` → `REQ_NOWAIT`), and its `BLK_STS_AGAIN`
//! comes back as `ki_complete(-EAGAIN)`, which the loop requeues to its worker.
//!
//! Only direct I/O is modelled: the buffered path (a loop device without
//! `LO_FLAGS_DIRECT_IO`) would go through the block device's page cache; [`LoopBacking::rw`]
//! refuses it with `-EOPNOTSUPP`, as does `fallocate()` (no `blkdev_fallocate()` here).

use super::{AioRequest, Fallocate, LoopBacking, LoopDevice};
use crate::block::fops::blkdev_dio_pool;
use crate::block::{
    blk_status_to_errno, submit_bio_noacct, BioEndIo, BlockDriver, ReqFlags, ReqOp, SECTOR_SHIFT,
};
use crate::errno::Errno;
use crate::kernel::Cpu;
use crate::mm::gfp::GfpFlags;
use crate::sync::{UntrackedArc, UntrackedOnceLock, UntrackedWeak};
use std::fmt;

/// A block device as a loop device's backing file.
pub struct BdevBacking {
    lower: UntrackedArc<dyn BlockDriver>,
    /// The loop device whose `ki_complete()` the bios call (set by [`BdevBacking::attach`]).
    lo: UntrackedOnceLock<UntrackedWeak<LoopDevice>>,
}

impl fmt::Debug for BdevBacking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BdevBacking({})", self.lower.disk_name())
    }
}

impl BdevBacking {
    /// The block device `lower` as a backing file.
    pub fn new(lower: UntrackedArc<dyn BlockDriver>) -> Self {
        BdevBacking {
            lower,
            lo: UntrackedOnceLock::new(),
        }
    }

    /// Binds the backing to the loop device it backs (`LOOP_CONFIGURE` hands the file to one
    /// device). A second binding is refused (`false`).
    pub fn attach(&self, lo: &UntrackedArc<LoopDevice>) -> bool {
        self.lo.set(UntrackedArc::downgrade(lo)).is_ok()
    }
}

impl LoopBacking for BdevBacking {
    /// `bdev_nr_bytes()`.
    fn size(&self) -> u64 {
        self.lower.limits().capacity_bytes()
    }

    /// `None`: `kiocb_start_write()` on a block device file takes the bdev pseudo file system's
    /// superblock, which nothing freezes (`fsfreeze` freezes the file system mounted on the
    /// device, another superblock), so its count is not modelled here; [`super::MemBacking`]'s
    /// `as_block_device()` models it.
    fn superblock(&self) -> Option<&crate::fs::super_block::SuperBlock> {
        None
    }

    fn is_block_device(&self) -> bool {
        true
    }

    /// A block device file has `FMODE_NOWAIT` when its queue has `BLK_FEAT_NOWAIT`.
    fn fmode_nowait(&self) -> bool {
        self.lower.limits().nowait
    }

    fn rw(&self, _write: bool, _pos: u64, _buf: &mut [u8], _nowait: bool) -> Result<usize, Errno> {
        Err(Errno::EOPNOTSUPP)
    }

    /// `blkdev_fsync()`: the model's lower devices have no volatile cache to flush here.
    fn fsync(&self) -> Result<(), Errno> {
        Ok(())
    }

    fn fallocate(&self, _mode: Fallocate, _pos: u64, _len: u64) -> Result<(), Errno> {
        Err(Errno::EOPNOTSUPP)
    }

    fn is_async(&self) -> bool {
        true
    }

    /// Without a context there is no submitter to submit from.
    fn submit_aio(&self, req: AioRequest) -> Result<(), (AioRequest, Errno)> {
        Err((req, Errno::EOPNOTSUPP))
    }

    /// `blkdev_direct_IO()` → `submit_bio_noacct()`: one bio for the whole range, its end
    /// calling the loop device's `ki_complete()` with the bytes done or the errno.
    fn submit_aio_cx(&self, req: AioRequest, cx: &Cpu) -> Result<(), (AioRequest, Errno)> {
        let Some(lo) = self.lo.get().cloned() else {
            return Err((req, Errno::EINVAL));
        };
        let op = if req.write { ReqOp::Write } else { ReqOp::Read };
        let mut flags = ReqFlags::REQ_SYNC;
        if req.nowait && self.lower.limits().nowait {
            flags = flags | ReqFlags::REQ_NOWAIT;
        }
        let (token, len) = (req.token, req.data.len());
        let end = BioEndIo::new("blkdev_bio_end_io_async", move |mut bio, cx| {
            let status = bio.status();
            let res = if status.is_ok() {
                Ok(len)
            } else {
                Err(Errno::from_i32(-blk_status_to_errno(status)).unwrap_or(Errno::EIO))
            };
            // The buffer goes back whole (a write's too): the loop device may have lent its
            // bio's own segment, which must return to that bio.
            let data = match bio.bi_io_vec.as_mut_slice() {
                [seg] => std::mem::take(&mut seg.data),
                _ => bio.data(),
            };
            match lo.upgrade() {
                Some(lo) => lo.lo_rw_aio_complete_async(token, res, data, cx),
                None => {
                    cx.warn("drivers/block/loop.c: ki_complete() after the loop device went away")
                }
            }
        });
        // __blkdev_direct_IO_async(): bio_alloc_bioset(bdev, nr_pages, opf, GFP_KERNEL,
        // &blkdev_dio_pool); nr_pages is 0 for the loop's ITER_BVEC (bio_iov_vecs_to_alloc():
        // the bio borrows the request's bvecs). GFP_KERNEL sleeps rather than fail, so the
        // kernel has no NULL check; the model's only None is a mempool loop it had to give up
        // (already reported), which the caller sees as -ENOMEM.
        let Some(bio) = blkdev_dio_pool(cx.kernel()).bio_alloc_bioset(
            op,
            req.pos >> SECTOR_SHIFT,
            0,
            GfpFlags::GFP_KERNEL,
            cx,
        ) else {
            return Err((req, Errno::ENOMEM));
        };
        let bio = bio.with_flags(flags).with_data(req.data).with_end_io(end);
        submit_bio_noacct(bio, &*self.lower, cx);
        Ok(())
    }
}
