//! The request tracepoints of `include/trace/events/block.h` that blk-mq (block/blk-mq.c) fires
//! for the requests of the drivers in `drivers/block/`: `block_getrq` (`blk_mq_submit_bio()` got a
//! request for the bio), `block_rq_insert` (`blk_mq_insert_request()`, e.g. a plug flush),
//! `block_rq_issue` (`blk_mq_start_request()`, called by the driver's `->queue_rq()`) and
//! `block_rq_complete` (`blk_update_request()` from `blk_mq_end_request()`).
//!
//! bio-core has no request layer (a driver gets one bio per request), so the drivers fire these
//! where blk-mq would for them. Messages are exactly the tracepoints' print fmts
//! (tests/data/tracefs-6.18/formats/): `block_rq_issue: 7,0 WS 4096 () 64 + 8 be,0,4 [dd]`. The
//! `cmd` string is empty (it is for passthrough requests only) and the I/O priority is the
//! default a task without `ioprio_set()` gets, `IOPRIO_CLASS_BE` level 4 (`be,0,4`).

use crate::kernel::Cpu;

/// One request as its tracepoints print it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RqTrace {
    /// `disk_devt()`: `(major, minor)`.
    pub dev: (u32, u32),
    /// `blk_fill_rwbs()` of the request's `cmd_flags`.
    pub rwbs: crate::block::Rwbs,
    /// `blk_rq_pos()`.
    pub sector: u64,
    /// `blk_rq_sectors()`.
    pub nr_sector: u64,
}

impl RqTrace {
    fn bytes(&self) -> u64 {
        self.nr_sector << crate::block::SECTOR_SHIFT
    }
}

/// `IOPRIO_CLASS_BE`, level 4, as `%s,%u,%u` prints class, hint and level.
const DEFAULT_IOPRIO: &str = "be,0,4";

/// `trace_block_getrq()`.
pub fn block_getrq(rq: &RqTrace, cx: &Cpu) {
    crate::ktrace!(
        cx,
        target: "block",
        "block_getrq",
        "{},{} {} {} + {} [{}]",
        rq.dev.0,
        rq.dev.1,
        rq.rwbs,
        rq.sector,
        rq.nr_sector,
        cx.current().comm,
    );
}

/// The events of include/trace/events/block.h's `DECLARE_EVENT_CLASS(block_rq)` share one
/// `TP_printk("%d,%d %s %u (%s) %llu + %u %s,%u,%u [%s]")`: `event` is the tracepoint's name.
fn block_rq_class(event: &'static str, rq: &RqTrace, cx: &Cpu) {
    crate::ktrace!(
        cx,
        target: "block",
        event,
        "{},{} {} {} () {} + {} {} [{}]",
        rq.dev.0,
        rq.dev.1,
        rq.rwbs,
        rq.bytes(),
        rq.sector,
        rq.nr_sector,
        DEFAULT_IOPRIO,
        cx.current().comm,
    );
}

/// `trace_block_rq_insert()`.
pub fn block_rq_insert(rq: &RqTrace, cx: &Cpu) {
    block_rq_class("block_rq_insert", rq, cx);
}

/// `trace_block_rq_issue()`.
pub fn block_rq_issue(rq: &RqTrace, cx: &Cpu) {
    block_rq_class("block_rq_issue", rq, cx);
}

/// `trace_block_rq_complete()`: `error` is `blk_status_to_errno()` of the status (0, `-5`, ...).
pub fn block_rq_complete(rq: &RqTrace, error: i32, cx: &Cpu) {
    crate::ktrace!(
        cx,
        target: "block",
        "block_rq_complete",
        "{},{} {} () {} + {} {} [{}]",
        rq.dev.0,
        rq.dev.1,
        rq.rwbs,
        rq.sector,
        rq.nr_sector,
        DEFAULT_IOPRIO,
        error,
    );
}
