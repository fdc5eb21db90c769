//! The block tracepoints of `include/trace/events/block.h` that exist so far, fired with
//! [`ktrace!`](crate::ktrace) on target `block` in ftrace's format (tracefs-6.18/formats):
//! `block_bio_queue: 8,0 WS 2048 + 8 [comm]` (`current->comm`, the real one: `swapper/0` for the
//! idle task), `block_bio_complete: 8,0 W 2048 + 8 [0]`, the merge events of the same
//! `block_bio` class, `block_bio_backmerge: 7,0 W 16 + 8 [comm]` / `block_bio_frontmerge`, and
//! `block_bio_remap: 8,0 W 4104 + 8 <- (8,1) 2056`.

use super::blk_status::blk_status_to_errno;
use super::blk_types::Bio;
use crate::kernel::Cpu;

/// `trace_block_bio_queue()`: a bio is queued (`submit_bio_noacct()`).
pub fn block_bio_queue(bio: &Bio, cpu: &Cpu) {
    block_bio_class("block_bio_queue", bio, cpu);
}

/// `trace_block_bio_remap(bio, dev, from)`: a stacked or partitioned device moved the bio
/// (`blk_partition_remap()`): `dev,minor RWBS sector + n <- (old_dev) old_sector`, where the
/// bio's device is `bio_dev()` (the whole disk) and `(old_dev) old_sector` where it came from.
pub fn block_bio_remap(bio: &Bio, old_dev: (u32, u32), old_sector: u64, cpu: &Cpu) {
    let (major, minor) = bio.bi_bdev.unwrap_or((0, 0));
    crate::ktrace!(
        cpu,
        target: "block",
        "block_bio_remap",
        fields(bio = bio.id()),
        "{},{} {} {} + {} <- ({},{}) {}",
        major,
        minor,
        bio.bi_opf.rwbs(),
        bio.bi_iter.bi_sector,
        bio.sectors(),
        old_dev.0,
        old_dev.1,
        old_sector
    );
}

/// `DECLARE_EVENT_CLASS(block_bio)`'s `TP_printk("%d,%d %s %llu + %u [%s]")` with
/// `current->comm`: `block_bio_queue`, `block_bio_backmerge`, `block_bio_frontmerge`.
fn block_bio_class(event: &'static str, bio: &Bio, cpu: &Cpu) {
    let (major, minor) = bio.bi_bdev.unwrap_or((0, 0));
    crate::ktrace!(
        cpu,
        target: "block",
        event,
        fields(bio = bio.id()),
        "{},{} {} {} + {} [{}]",
        major,
        minor,
        bio.bi_opf.rwbs(),
        bio.bi_iter.bi_sector,
        bio.sectors(),
        cpu.current().comm
    );
}

/// `trace_block_bio_backmerge()`: `bio_attempt_back_merge()` appended the bio to a request.
pub fn block_bio_backmerge(bio: &Bio, cpu: &Cpu) {
    block_bio_class("block_bio_backmerge", bio, cpu);
}

/// `trace_block_bio_frontmerge()`: `bio_attempt_front_merge()` put the bio in front of a
/// request.
pub fn block_bio_frontmerge(bio: &Bio, cpu: &Cpu) {
    block_bio_class("block_bio_frontmerge", bio, cpu);
}

/// `trace_block_bio_complete()`: `bio_endio()` of a `BIO_TRACE_COMPLETION` bio. The bracket holds
/// `blk_status_to_errno(bi_status)`, as the kernel's event does.
pub fn block_bio_complete(bio: &Bio, cpu: &Cpu) {
    let (major, minor) = bio.bi_bdev.unwrap_or((0, 0));
    crate::ktrace!(
        cpu,
        target: "block",
        "block_bio_complete",
        fields(bio = bio.id()),
        "{},{} {} {} + {} [{}]",
        major,
        minor,
        bio.bi_opf.rwbs(),
        bio.bi_iter.bi_sector,
        bio.sectors(),
        blk_status_to_errno(bio.status())
    );
}

#[cfg(test)]
mod tests {
    use super::{block_bio_complete, block_bio_queue};
    use crate::block::{ReqOp, BLK_STS_MEDIUM};
    use crate::kernel::trace::tests::{capture, check_formats};
    use crate::kernel::{Kernel, KernelConfig, PreemptModel, Task};
    use crate::CpuId;

    #[test]
    fn bio_events_print_their_fmt_with_current_comm_and_errno() {
        let k = Kernel::new(KernelConfig::for_model(PreemptModel::Full), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let mut bio = k.bio_alloc(ReqOp::Write, 64).with_data(vec![0; 4096]);
        bio.bi_bdev = Some((7, 0));
        let ev = capture(|| {
            block_bio_queue(&bio, &cx);
            bio.set_status(BLK_STS_MEDIUM);
            cx.set_current(Task::idle(CpuId(0)));
            cx.with_softirq(|cx| {
                block_bio_complete(&bio, cx);
                block_bio_queue(&bio, cx);
            });
        });
        assert_eq!(check_formats(&ev), Vec::<String>::new());
        assert_eq!(ev[0].message, "block_bio_queue: 7,0 W 64 + 8 [biosim/0]");
        assert_eq!(ev[1].message, "block_bio_complete: 7,0 W 64 + 8 [-61]");
        assert_eq!(
            (ev[1].comm.as_deref(), ev[1].flags.as_deref()),
            (Some("<idle>"), Some("..s1."))
        );
        // The event's comm field is current->comm, the real one; only the TASK column says <idle>.
        assert_eq!(ev[2].message, "block_bio_queue: 7,0 W 64 + 8 [swapper/0]");
    }
}
