//! `fs/xfs/xfs_aops.c`: XFS's own ioend completion, which patch 2/4 of the series removes for
//! `IOMAP_IOEND_DONTCACHE`: `xfs_end_bio()` (the bio's `bi_end_io`, in the device IRQ) puts the
//! ioend on the inode's `i_ioend_list` under `i_ioend_lock` and queues `i_ioend_work` on the
//! per-CPU `xfs-conv` workqueue if the list was empty; `xfs_end_io()` (the work, in task context)
//! takes the list and finishes each ioend (`iomap_finish_ioends()` → `folio_end_writeback()`,
//! where `folio_end_dropbehind()` can invalidate). Unwritten-extent ioends take the same way (the
//! conversion), in every kernel; ext4's `ext4_end_bio()` does the same for its unwritten ioends.

use crate::kernel::Cpu;
use crate::mm::filemap::{AddressSpace, QueuedIoend};

impl AddressSpace {
    /// `xfs_end_bio()`: queues a completed ioend for [`AddressSpace::xfs_end_io`].
    pub(crate) fn xfs_end_bio(
        &self,
        cx: &Cpu,
        folios: Vec<(u64, u64)>,
        ok: bool,
        unwritten: bool,
        merged_regular: u64,
    ) {
        let (wq, work) = self.conv_wq();
        let was_empty = {
            let mut m = self.inner.lock();
            let empty = m.ioend_list.is_empty();
            m.ioend_list.push(QueuedIoend {
                folios,
                ok,
                unwritten,
                merged_regular,
            });
            empty
        };
        if was_empty {
            self.kernel.queue_work(wq, *work, cx);
        }
    }

    /// `xfs_end_io()`: the `i_ioend_work` function, finishing every queued ioend in task context.
    pub(crate) fn xfs_end_io(&self, cx: &Cpu) {
        let ioends = std::mem::take(&mut self.inner.lock().ioend_list);
        for e in ioends {
            self.inner.lock().stats.wq_ioends += 1;
            self.finish_ioend(cx, &e.folios, e.ok, e.unwritten, e.merged_regular);
        }
    }
}
