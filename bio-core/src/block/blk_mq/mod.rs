//! `block/blk-mq.c`: the request-based submission path of a blk-mq queue.
//!
//! `blk_mq_submit_bio()`: `bio_queue_enter()` (waits while the queue is frozen; lockdep: a read
//! of `&q->q_usage_counter(io)` taken and released at once, as `bio_queue_enter()` annotates
//! it; the write side is `blk_freeze_acquire_lock()` in [`blk_mq_freeze_queue`], held until
//! [`blk_mq_unfreeze_queue`]), `rq_qos_throttle()` (the optional
//! write throttle, [`crate::block::blk_wbt`]; a bio merged into a plugged request skips it and
//! what follows, see [`crate::block::blk_merge`]), a tag ([`tag::BlkMqTags::blk_mq_get_tag`]), the
//! request (`block_getrq`), then `current->plug` if the task has one (`blk_add_rq_to_plug()`)
//! or `blk_mq_try_issue_directly()`.
//!
//! `->queue_rq()` always runs inside `blk_mq_run_dispatch_ops()`: under the tag set's SRCU read
//! lock for a `BLK_MQ_F_BLOCKING` tag set, otherwise under `rcu_read_lock()`, so a non-blocking
//! driver that sleeps in `->queue_rq()` gets `might_sleep()`'s splat. `BLK_STS_RESOURCE` /
//! `BLK_STS_DEV_RESOURCE` put the request on the hardware queue's dispatch list
//! (`blk_mq_request_bypass_insert()`, `block_rq_insert`), re-run when a request completes;
//! any other error ends the request with it.
//!
//! `blk_mq_start_request()` (`block_rq_issue`, `WARN_ON_ONCE(state != MQ_RQ_IDLE)`) and
//! `blk_mq_end_request()` → `blk_update_request()` (`block_rq_complete` with the whole request,
//! then every bio of the request ends, in order) →
//! `blk_mq_free_request()`, whose `req_ref_put_and_test()` is the kernel's
//! `WARN_ON_ONCE(req_ref_zero(rq))` for a request completed twice.
//!
//! `blk_mq_run_hw_queue(hctx, async)`: inline in the caller's context, or, `async` (a plug
//! flushed from `schedule()`), through `hctx->run_work` on kblockd
//! (`blk_mq_delay_run_hw_queue()` → `kblockd_mod_delayed_work_on(WORK_CPU_UNBOUND, ..)`, the
//! local CPU's `kworker/N:1H`, as `blk_mq_hctx_next_cpu()` answers for a single hardware queue),
//! whose `blk_mq_run_work_fn()` dispatches the list from the worker.
//!
//! Simplifications: one hardware queue and one software context per queue, no I/O scheduler (so
//! merging is the plug's only: `blk_attempt_plug_merge()`), no cached requests, no timeout
//! handling; requests inserted for a run go straight onto the dispatch list (the kernel puts
//! them on the software queue, `ctx->rq_lists`, which the run then takes).

pub mod request;
pub mod tag;
#[cfg(test)]
pub(crate) mod tests;

pub use request::{MqRqState, Rq};
pub use tag::{BlkMqTags, NoTag};

use super::blk_wbt::RqWb;
use super::{bio_endio_status, bio_wouldblock_error, Bio, BlkStatus, BLK_STS_IOERR, BLK_STS_OK};
use crate::drivers::block::blk_mq_trace::{
    block_getrq, block_rq_complete, block_rq_insert, block_rq_issue,
};
use crate::kernel::srcu::SrcuStruct;
use crate::kernel::HeldLock;
use crate::kernel::{Cpu, LockClass, LockRead, ReportKind};
use crate::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use crate::sync::{Mutex, UntrackedArc, UntrackedOnceLock, UntrackedWeak};
use crate::workqueue::DelayedWork;
use std::collections::VecDeque;
use std::fmt;

/// `BLK_MQ_F_BLOCKING`: `->queue_rq()` may sleep; dispatch runs under the tag set's SRCU.
pub const BLK_MQ_F_BLOCKING: u32 = 1 << 5;
/// `BLK_MQ_F_STACKING`: the device needs another blk-mq device to complete its I/O (loop).
pub const BLK_MQ_F_STACKING: u32 = 1 << 2;

/// `BLK_STS_RESOURCE` and `BLK_STS_DEV_RESOURCE`: the driver is out of resources; the request
/// is kept and dispatched again later.
pub fn blk_sts_is_resource(s: BlkStatus) -> bool {
    s == super::BLK_STS_RESOURCE || s == super::BLK_STS_DEV_RESOURCE
}

/// `struct blk_mq_ops`: what a blk-mq driver provides.
pub trait BlkMqOps: Send + Sync {
    /// `->queue_rq()`: start the request (`blk_mq_start_request()`) and return `BLK_STS_OK`, or
    /// return `BLK_STS_RESOURCE`/`BLK_STS_DEV_RESOURCE` to have it dispatched again later, or
    /// another error to end it with.
    fn queue_rq(&self, rq: &Rq, cx: &Cpu) -> BlkStatus;
}

/// `struct blk_mq_tag_set` + `struct request_queue` of one hardware queue.
pub struct RequestQueue {
    /// `disk_devt()`, for the tracepoints.
    pub devt: (u32, u32),
    /// `set->flags`.
    pub flags: u32,
    /// The tags and their requests.
    pub tags: BlkMqTags,
    /// `set->srcu` of a `BLK_MQ_F_BLOCKING` tag set.
    pub srcu: SrcuStruct,
    /// The hardware queue's dispatch list (`hctx->dispatch`).
    dispatch: Mutex<VecDeque<usize>>,
    /// `q->rq_qos`: the write throttle, if enabled.
    pub rq_qos: Option<RqWb>,
    /// `q->mq_freeze_depth`.
    mq_freeze_depth: AtomicU32,
    ops: UntrackedWeak<dyn BlkMqOps>,
    /// `hctx->run_work` (`INIT_DELAYED_WORK(.., blk_mq_run_work_fn)`), made on the first
    /// asynchronous run (the queue has no kernel before it is used).
    run_work: UntrackedOnceLock<DelayedWork>,
    /// `QUEUE_FLAG_NOMERGES` in `q->queue_flags` (sysfs `nomerges` 2).
    nomerges: AtomicBool,
    /// `queue_max_sectors()` (`limits.max_sectors`): no request grows past it by merging.
    pub max_sectors: u64,
    /// `queue_max_segments()` (`limits.max_segments`).
    pub max_segments: u32,
}

/// `BLK_DEF_MAX_SECTORS_CAP`: the `max_sectors` `blk_validate_limits()` gives a queue whose
/// driver sets no lower hardware limit (2560 sectors, 1280 KiB).
pub const BLK_DEF_MAX_SECTORS_CAP: u64 = 2560;
/// `BLK_MAX_SEGMENTS`: the default `max_segments`.
pub const BLK_MAX_SEGMENTS: u32 = 128;

impl fmt::Debug for RequestQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestQueue")
            .field("devt", &self.devt)
            .field("flags", &self.flags)
            .field("busy", &self.tags.busy())
            .finish()
    }
}

impl RequestQueue {
    /// `blk_mq_alloc_tag_set()` + `blk_mq_alloc_queue()`: `queue_depth` tags, `flags`, the
    /// driver's ops (weak: the driver owns its queue), no throttle.
    pub fn new(
        devt: (u32, u32),
        queue_depth: usize,
        flags: u32,
        ops: UntrackedWeak<dyn BlkMqOps>,
    ) -> Self {
        RequestQueue {
            devt,
            flags,
            tags: BlkMqTags::new(queue_depth),
            srcu: SrcuStruct::new("set->srcu"),
            dispatch: Mutex::new(VecDeque::new()),
            rq_qos: None,
            mq_freeze_depth: AtomicU32::new(0),
            ops,
            run_work: UntrackedOnceLock::new(),
            nomerges: AtomicBool::new(false),
            max_sectors: BLK_DEF_MAX_SECTORS_CAP,
            max_segments: BLK_MAX_SEGMENTS,
        }
    }

    /// `blk_queue_nomerges()`: `QUEUE_FLAG_NOMERGES` is set.
    pub fn blk_queue_nomerges(&self) -> bool {
        self.nomerges.load(Ordering::Acquire)
    }

    /// `blk_queue_flag_set(QUEUE_FLAG_NOMERGES)` / `blk_queue_flag_clear()` (sysfs
    /// `queue/nomerges` 2 / 0): no bio is merged into a request of this queue while set.
    pub fn set_nomerges(&self, on: bool) {
        self.nomerges.store(on, Ordering::Release);
    }

    /// `wbt_init()` with an inflight limit on writes (`wb_normal`).
    pub fn with_wbt(mut self, limit: u32) -> Self {
        self.rq_qos = Some(RqWb::new(limit));
        self
    }

    /// Requests waiting on the dispatch list.
    pub fn dispatch_len(&self) -> usize {
        self.dispatch.lock().len()
    }

    /// `blk_mq_run_dispatch_ops()`: `f` under `srcu_read_lock(set->srcu)` for a blocking tag
    /// set, `rcu_read_lock()` otherwise.
    pub fn blk_mq_run_dispatch_ops<R>(&self, cx: &Cpu, f: impl FnOnce() -> R) -> R {
        if self.flags & BLK_MQ_F_BLOCKING != 0 {
            let (idx, _report) = self.srcu.srcu_read_lock(cx);
            let r = f();
            self.srcu.srcu_read_unlock(idx, cx);
            r
        } else {
            cx.rcu_read_lock();
            let r = f();
            cx.rcu_read_unlock();
            r
        }
    }

    /// `__blk_mq_issue_directly()`: `->queue_rq()` and what its status means. Called inside the
    /// dispatch ops.
    fn issue(self: &UntrackedArc<Self>, tag: usize, cx: &Cpu) {
        let rq = Rq {
            q: UntrackedArc::clone(self),
            tag,
        };
        let Some(ops) = self.ops.upgrade() else {
            blk_mq_end_request(&rq, BLK_STS_IOERR, cx);
            return;
        };
        let status = ops.queue_rq(&rq, cx);
        if status == BLK_STS_OK {
            return;
        }
        if blk_sts_is_resource(status) {
            // __blk_mq_requeue_request(): a started request goes back to idle.
            self.tags.slot_mut(tag, |s| s.state = MqRqState::Idle);
            self.blk_mq_request_bypass_insert(&rq, cx);
            return;
        }
        blk_mq_end_request(&rq, status, cx);
    }

    /// `blk_mq_request_bypass_insert()`: onto the hardware queue's dispatch list.
    fn blk_mq_request_bypass_insert(&self, rq: &Rq, cx: &Cpu) {
        if cx.tracepoints_enabled() {
            block_rq_insert(&rq.trace(), cx);
        }
        self.dispatch.lock().push_back(rq.tag);
    }

    /// `blk_mq_insert_requests(hctx, ctx, list, run_queue_async)` for requests flushed from a
    /// plug by `schedule()` (`blk_mq_dispatch_list(.., from_sched = true)`): with
    /// `run_queue_async` the direct issue is skipped, each request is inserted
    /// (`block_rq_insert`) and the queue is run on kblockd.
    pub(crate) fn blk_mq_insert_requests(
        self: &UntrackedArc<Self>,
        tags: Vec<usize>,
        run_queue_async: bool,
        cx: &Cpu,
    ) {
        for tag in tags {
            let rq = Rq {
                q: UntrackedArc::clone(self),
                tag,
            };
            if cx.tracepoints_enabled() {
                block_rq_insert(&rq.trace(), cx);
            }
            self.dispatch.lock().push_back(tag);
        }
        self.blk_mq_run_hw_queue_async(run_queue_async, cx);
    }

    /// `blk_mq_run_hw_queue(hctx, async)`: nothing to do on an empty dispatch list
    /// (`blk_mq_hw_queue_need_run()`); `async` queues `hctx->run_work` on kblockd
    /// (`blk_mq_delay_run_hw_queue(hctx, 0)`), else the list is dispatched here.
    pub fn blk_mq_run_hw_queue_async(self: &UntrackedArc<Self>, async_run: bool, cx: &Cpu) {
        if self.dispatch_len() == 0 {
            return;
        }
        if !async_run {
            return self.blk_mq_run_hw_queue(cx);
        }
        let dwork = *self.run_work.get_or_init(|| {
            let q = UntrackedArc::downgrade(self);
            cx.kernel()
                .init_delayed_work("blk_mq_run_work_fn", move |cx, _| {
                    // blk_mq_run_work_fn(): blk_mq_run_dispatch_ops(.., blk_mq_sched_dispatch_requests()).
                    if let Some(q) = q.upgrade() {
                        q.blk_mq_run_hw_queue(cx);
                    }
                })
        });
        // blk_mq_hctx_next_cpu(): WORK_CPU_UNBOUND with one hardware queue.
        crate::block::blk_core::kblockd_mod_delayed_work_on(None, dwork, 0, cx);
    }

    /// `blk_mq_run_hw_queue(hctx, false)`: dispatch the list here until it is empty or the
    /// driver pushes back (a request that comes back with `BLK_STS_RESOURCE` ends the run).
    pub fn blk_mq_run_hw_queue(self: &UntrackedArc<Self>, cx: &Cpu) {
        let n = self.dispatch_len();
        for _ in 0..n {
            let Some(tag) = self.dispatch.lock().pop_front() else {
                return;
            };
            let before = self.dispatch_len();
            self.blk_mq_run_dispatch_ops(cx, || self.issue(tag, cx));
            if self.dispatch_len() > before {
                return; // pushed back: wait for a completion to re-run
            }
        }
    }

    /// `blk_mq_dispatch_queue_requests()` for one queue's requests spliced off a plug:
    /// `block_unplug`, then each issued directly.
    pub(crate) fn dispatch_plugged(
        self: &UntrackedArc<Self>,
        tags: Vec<usize>,
        depth: usize,
        explicit: bool,
        cx: &Cpu,
    ) {
        super::blk_plug::block_unplug(depth, explicit, cx);
        self.blk_mq_run_dispatch_ops(cx, || {
            for tag in tags {
                self.issue(tag, cx);
            }
        });
    }
}

/// `q->io_lockdep_map`'s lockdep name.
pub const Q_USAGE_COUNTER_IO: &str = "&q->q_usage_counter(io)";

/// Why [`bio_queue_enter`] did not enter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnterError {
    /// The queue is frozen and the bio is `REQ_NOWAIT` (`-EAGAIN`).
    WouldBlock,
    /// The freeze never ends: the runtime's deadlock answer.
    Deadlock,
}

/// `bio_queue_enter()`: waits while the queue is frozen (`REQ_NOWAIT`: fails instead), then
/// lockdep's annotation, `rwsem_acquire_read()` + `rwsem_release()` of `q->io_lockdep_map`
/// (`&q->q_usage_counter(io)`): entering may wait for a freeze, so a freezer that waits for
/// something the submitter holds is a cycle.
pub fn bio_queue_enter(q: &RequestQueue, nowait: bool, cx: &Cpu) -> Result<(), EnterError> {
    if q.frozen() {
        if nowait {
            return Err(EnterError::WouldBlock);
        }
        let _ = cx.might_sleep_at("block/blk-core.c:__bio_queue_enter");
        if !cx.wait_until("bio_queue_enter", &|| !q.frozen()) {
            return Err(EnterError::Deadlock);
        }
    }
    let (held, _report) = cx.lock_acquire_mode(LockClass::Map, Q_USAGE_COUNTER_IO, LockRead::Read);
    cx.lock_release(held);
    Ok(())
}

/// A frozen queue, from [`blk_mq_freeze_queue`] to [`blk_mq_unfreeze_queue`]: the lockdep
/// acquisition `blk_freeze_acquire_lock()` made.
#[derive(Debug)]
#[must_use = "a frozen queue must be unfrozen with blk_mq_unfreeze_queue()"]
pub struct Frozen {
    held: Option<HeldLock>,
}

impl RequestQueue {
    /// Whether `mq_freeze_depth` is non-zero (`percpu_ref_is_dying(&q->q_usage_counter)`).
    pub fn frozen(&self) -> bool {
        self.mq_freeze_depth.load(Ordering::Acquire) > 0
    }
}

/// `blk_mq_freeze_queue()`: `blk_freeze_queue_start()` (the first freezer takes
/// `q->io_lockdep_map` for write, `blk_freeze_acquire_lock()`; new submitters now wait in
/// `bio_queue_enter()`), then `blk_mq_freeze_queue_wait()`: sleep until no request is left
/// (the model counts requests holding a tag as `q_usage_counter`). Returns the freeze and
/// whether the wait ended (`false`: it never can, a deadlock).
///
/// Lockdep: the kernel's `rwsem_acquire(.., trylock=1, ..)`, a trylock (no edge from the held
/// locks to the map; locks taken while frozen do depend on it).
pub fn blk_mq_freeze_queue(q: &RequestQueue, cx: &Cpu) -> (Frozen, bool) {
    let first = q.mq_freeze_depth.fetch_add(1, Ordering::AcqRel) == 0;
    let held = first.then(|| {
        cx.lock_acquire_try(LockClass::Map, Q_USAGE_COUNTER_IO, LockRead::Write)
            .0
    });
    let _ = cx.might_sleep_at("block/blk-mq.c:blk_mq_freeze_queue_wait");
    let drained = cx.wait_until("blk_mq_freeze_queue_wait", &|| q.tags.busy() == 0);
    (Frozen { held }, drained)
}

/// `blk_mq_unfreeze_queue()`: the last unfreezer releases the lockdep map and lets submitters
/// in again. An unfreeze without a freeze is the kernel's `WARN_ON_ONCE(q->mq_freeze_depth < 0)`.
pub fn blk_mq_unfreeze_queue(q: &RequestQueue, frozen: Frozen, cx: &Cpu) {
    if let Some(held) = frozen.held {
        cx.lock_release(held);
    }
    let prev = q.mq_freeze_depth.fetch_sub(1, Ordering::AcqRel);
    if prev == 0 {
        q.mq_freeze_depth.store(0, Ordering::Release);
        cx.warn("block/blk-mq.c: __blk_mq_unfreeze_queue: WARN_ON_ONCE(q->mq_freeze_depth < 0)");
    }
}

/// A submitter whose sleep nothing can end (`Cpu::wait_until` gave up): biosim's own report of
/// where, unless the hung-task detector is on, which already reported the task with what it waited
/// on (`kernel/hung_task.rs`): one report per hang.
fn never_woken(cx: &Cpu, message: String) {
    if cx.kernel().hung_task_timeout_secs() == 0 {
        cx.report(ReportKind::Bug, message);
    }
}

/// `blk_mq_submit_bio()`: see the module doc.
pub fn blk_mq_submit_bio(q: &UntrackedArc<RequestQueue>, bio: Box<Bio>, cx: &Cpu) {
    let nowait = bio.bi_opf.flags.contains(super::ReqFlags::REQ_NOWAIT);
    match bio_queue_enter(q, nowait, cx) {
        Ok(()) => {}
        Err(EnterError::WouldBlock) => return bio_wouldblock_error(bio, cx),
        Err(EnterError::Deadlock) => {
            never_woken(
                cx,
                format!(
                    "biosim: bio_queue_enter: {} sleeps forever: {},{} is never unfrozen",
                    cx.current().comm,
                    q.devt.0,
                    q.devt.1
                ),
            );
            return bio_endio_status(bio, BLK_STS_IOERR, cx);
        }
    }
    // blk_mq_attempt_bio_merge(): a bio merged into a plugged request is done here
    // (blk_queue_exit(): the model's bio_queue_enter() holds nothing).
    let Some(bio) = super::blk_merge::blk_mq_attempt_bio_merge(q, bio, cx) else {
        return;
    };
    let wbt_tracked = match &q.rq_qos {
        Some(w) => match w.rq_qos_throttle(&bio, cx) {
            Ok(tracked) => tracked,
            Err(super::blk_wbt::WbtHung) => {
                never_woken(
                    cx,
                    format!("biosim: wbt_wait: {} sleeps forever: no write completion will wake it (bio#{})", cx.current().comm, bio.id()),
                );
                bio_endio_status(bio, BLK_STS_IOERR, cx);
                return;
            }
        },
        None => false,
    };
    let tag = match q.tags.blk_mq_get_tag(nowait, cx) {
        Ok(t) => t,
        Err(e) => {
            if wbt_tracked {
                if let Some(w) = &q.rq_qos {
                    w.wbt_done(cx); // rq_qos_cleanup()
                }
            }
            match e {
                NoTag::WouldBlock => bio_wouldblock_error(bio, cx),
                NoTag::Deadlock => {
                    never_woken(
                        cx,
                        format!("biosim: blk_mq_get_tag: {} sleeps forever: no tag of {},{} will be freed", cx.current().comm, q.devt.0, q.devt.1),
                    );
                    bio_endio_status(bio, BLK_STS_IOERR, cx);
                }
            }
            return;
        }
    };
    q.tags.slot_mut(tag, |s| {
        s.state = MqRqState::Idle;
        s.refcount = 1;
        s.cmd_flags = bio.bi_opf;
        s.sector = bio.bi_iter.bi_sector;
        s.nr_sectors = bio.sectors();
        s.wbt_tracked = wbt_tracked;
        s.nr_phys_segments = super::blk_merge::bio_nr_segs(&bio);
        s.bios = vec![bio];
    });
    let rq = Rq {
        q: UntrackedArc::clone(q),
        tag,
    };
    if cx.tracepoints_enabled() {
        block_getrq(&rq.trace(), cx);
    }
    if cx.task_state().plug.borrow().is_some() {
        super::blk_plug::blk_add_rq_to_plug(rq, cx);
        return;
    }
    blk_mq_try_issue_directly(&rq, cx);
}

/// `blk_mq_try_issue_directly()`: `->queue_rq()` now, inside the dispatch ops.
pub fn blk_mq_try_issue_directly(rq: &Rq, cx: &Cpu) {
    rq.q.blk_mq_run_dispatch_ops(cx, || rq.q.issue(rq.tag, cx));
}

/// `blk_mq_start_request()`: `block_rq_issue`, the request in flight. Starting a request that is
/// not idle is the kernel's `WARN_ON_ONCE(blk_mq_rq_state(rq) != MQ_RQ_IDLE)`.
pub fn blk_mq_start_request(rq: &Rq, cx: &Cpu) {
    if cx.tracepoints_enabled() {
        block_rq_issue(&rq.trace(), cx);
    }
    let was = rq.q.tags.slot_mut(rq.tag, |s| {
        let was = s.state;
        s.state = MqRqState::InFlight;
        was
    });
    if was != MqRqState::Idle {
        cx.warn(
            "block/blk-mq.c: blk_mq_start_request: WARN_ON_ONCE(blk_mq_rq_state(rq) != MQ_RQ_IDLE)",
        );
    }
}

/// `blk_mq_end_request()`: `blk_update_request()` (`block_rq_complete` for the whole request,
/// then every bio of the request ends with `status`, `rq->bio` first), rq-qos done (`wbt_done()`), then `blk_mq_free_request()`: the reference drops
/// and the tag is freed. A request whose reference is already zero (completed before) is the
/// kernel's `WARN_ON_ONCE(req_ref_zero(rq))` in `req_ref_put_and_test()`, and nothing else
/// happens. A freed tag lets the dispatch list run again.
pub fn blk_mq_end_request(rq: &Rq, status: BlkStatus, cx: &Cpu) {
    let taken = rq.q.tags.slot_mut(rq.tag, |s| {
        if s.refcount == 0 {
            return None;
        }
        s.refcount = 0;
        s.state = MqRqState::Complete;
        Some((std::mem::take(&mut s.bios), s.wbt_tracked))
    });
    let Some((bios, wbt_tracked)) = taken else {
        cx.warn(&format!(
            "block/blk-mq.h:req_ref_put_and_test: WARN_ON_ONCE(req_ref_zero(rq)) ({},{} tag {}: request completed twice)",
            rq.q.devt.0, rq.q.devt.1, rq.tag
        ));
        return;
    };
    if cx.tracepoints_enabled() {
        block_rq_complete(&rq.trace(), super::blk_status_to_errno(status), cx);
    }
    for bio in bios {
        bio_endio_status(bio, status, cx);
    }
    if wbt_tracked {
        if let Some(w) = &rq.q.rq_qos {
            w.wbt_done(cx);
        }
    }
    rq.q.tags.blk_mq_put_tag(rq.tag);
    if rq.q.dispatch_len() > 0 {
        rq.q.blk_mq_run_hw_queue(cx);
    }
}
