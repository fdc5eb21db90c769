//! The block tracepoints of `include/trace/events/block.h` that exist so far, fired with
//! [`ktrace!`](crate::ktrace) on target `block` in ftrace's format (tracefs-6.18/formats):
//! `block_bio_queue: 8,0 WS 2048 + 8 [comm]` (`current->comm`, the real one: `swapper/0` for the
//! idle task), `block_bio_complete: 8,0 W 2048 + 8 [0]`.

use super::blk_status::blk_status_to_errno;
use super::blk_types::Bio;
use crate::kernel::Cpu;

/// `trace_block_bio_queue()`: a bio is queued (`submit_bio_noacct()`).
pub fn block_bio_queue(bio: &Bio, cpu: &Cpu) {
    let (major, minor) = bio.bi_bdev.unwrap_or((0, 0));
    crate::ktrace!(
        cpu,
        target: "block",
        "block_bio_queue",
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
