//! `struct blk_plug` and its functions in `block/blk-core.c` / `block/blk-mq.c`:
//! `blk_start_plug()`, `blk_finish_plug()`, `blk_add_rq_to_plug()`, `blk_mq_flush_plug_list()`,
//! and the flush on `schedule()` (`sched_submit_work()` → `blk_flush_plug(plug, true)`), with the
//! tracepoints `block_plug` (the first request of a plug batch) and `block_unplug` (a flush, with
//! `nr_rq`).
//!
//! The plug is `current->plug` ([`crate::kernel::TaskState::plug`]). `schedule()` is where a
//! task sleeps; in the model that is [`Cpu::wait_until`], which calls [`sched_submit_work`]
//! before it hands the CPU to the runtime (whatever the runtime): a task never sleeps on
//! requests it holds in its own plug.
//!
//! 6.18's `blk_mq_flush_plug_list()` zeroes `rq_count` and walks the live `plug->mq_list`: a
//! `->queue_rq()` that submits to a blk-mq device with no `current->bio_list` (a stacking driver
//! whose flush comes from an outer plug, e.g. io_uring's or `schedule()`'s, outside
//! `submit_bio()`) adds to the list being walked, which is list corruption in the kernel;
//! [`blk_add_rq_to_plug`] WARNs when that happens. The loop driver's NOWAIT-first path (V5) is
//! such a `->queue_rq()`. The fix posted after 6.18 ("blk-mq: fix plug list corruption when
//! queue_rq adds new requests", Ming Lei, Nov 2025) swaps the list to a local one first and
//! loops while new requests were added: `Kernel::set_blk_plug_list_fix` applies it; the buggy
//! twin `bug-plug-flush-no-splice` breaks the fix (it walks the live list with the fix on).
//!
//! A flush from `schedule()` never calls `->queue_rq()` in the sleeping task: 6.18's
//! `blk_mq_flush_plug_list(plug, true)` skips the direct issue, and `blk_mq_dispatch_list()`
//! inserts the requests and runs the queue on kblockd (`blk_mq_run_hw_queue(hctx, true)`), so
//! the driver sees them later from `kworker/N:1H`. The list corruption above needs an explicit
//! flush (`blk_finish_plug()`, or a full plug in `blk_add_rq_to_plug()`).
//!
//! `block_unplug`'s `explicit` argument (`!from_schedule`) is not in the event's print format
//! (`"[%s] %d"`, include/trace/events/block.h); blktrace alone uses it (`BLK_TA_UNPLUG_IO` for
//! an explicit unplug, `BLK_TA_UNPLUG_TIMER` for one from `schedule()`).

use super::blk_mq::{RequestQueue, Rq};
use crate::kernel::Cpu;
use crate::sync::UntrackedArc;
use std::collections::VecDeque;

/// `BLK_MAX_REQUEST_COUNT`: a plug of one queue is flushed when it holds this many requests.
pub const BLK_MAX_REQUEST_COUNT: usize = 32;
/// `BLK_PLUG_FLUSH_SIZE`: ... or when its last request is this big (bytes).
pub const BLK_PLUG_FLUSH_SIZE: u64 = 128 * 1024;

/// `blk_plug_max_rq_count()`: twice `BLK_MAX_REQUEST_COUNT` once the plug spans queues.
pub fn blk_plug_max_rq_count(plug: &BlkPlug) -> usize {
    if plug.multiple_queues {
        BLK_MAX_REQUEST_COUNT * 2
    } else {
        BLK_MAX_REQUEST_COUNT
    }
}

/// `struct blk_plug`.
#[derive(Debug, Default)]
pub struct BlkPlug {
    /// `plug->mq_list`.
    pub mq_list: VecDeque<Rq>,
    /// `plug->rq_count`.
    pub rq_count: usize,
    /// `plug->multiple_queues`.
    pub multiple_queues: bool,
    /// The buggy twin's walk of the live list is in progress (never set by the kernel's splice).
    walking: bool,
}

/// What [`blk_start_plug`] returns: whether this call installed `current->plug` (a nested
/// `blk_start_plug()` finds one and does nothing, as the kernel's `if (tsk->plug) return;`).
#[derive(Debug)]
#[must_use = "a plug must be finished with blk_finish_plug()"]
pub struct PlugToken {
    installed: bool,
}

/// `trace_block_plug()`: `"[%s]", comm`.
pub fn block_plug(cx: &Cpu) {
    crate::ktrace!(cx, target: "block", "block_plug", "[{}]", cx.current().comm);
}

/// `trace_block_unplug()`: `"[%s] %d", comm, nr_rq`; `explicit` (`!from_schedule`) is not
/// printed.
pub fn block_unplug(nr_rq: usize, explicit: bool, cx: &Cpu) {
    let _ = explicit;
    crate::ktrace!(
        cx,
        target: "block",
        "block_unplug",
        "[{}] {}",
        cx.current().comm,
        nr_rq
    );
}

/// `blk_start_plug()`.
pub fn blk_start_plug(cx: &Cpu) -> PlugToken {
    let mut p = cx.task_state().plug.borrow_mut();
    if p.is_some() {
        return PlugToken { installed: false };
    }
    // The kernel's plug is on the stack: reuse the buffer the task's last plug left (empty).
    let mq_list = std::mem::take(&mut *cx.task_state().plug_storage.borrow_mut());
    debug_assert!(mq_list.is_empty(), "a finished plug left requests behind");
    *p = Some(BlkPlug {
        mq_list,
        ..BlkPlug::default()
    });
    PlugToken { installed: true }
}

/// `blk_finish_plug()`: an explicit flush (`__blk_flush_plug(plug, false)`), then
/// `current->plug = NULL` — only by the call that installed it.
pub fn blk_finish_plug(token: PlugToken, cx: &Cpu) {
    if !token.installed {
        return;
    }
    blk_mq_flush_plug_list(cx, false);
    let plug = cx.task_state().plug.borrow_mut().take();
    // Keep the emptied list's buffer for the task's next plug (see `TaskState::plug_storage`);
    // a list that still holds requests is dropped with them, as before.
    if let Some(p) = plug.filter(|p| p.mq_list.is_empty()) {
        *cx.task_state().plug_storage.borrow_mut() = p.mq_list;
    }
}

/// `blk_flush_plug(current->plug, from_schedule)`.
pub fn blk_flush_plug(cx: &Cpu, from_schedule: bool) {
    blk_mq_flush_plug_list(cx, from_schedule);
}

/// `sched_submit_work()`: the part of `schedule()` that flushes the task's plug before it
/// sleeps (`blk_flush_plug(tsk->plug, true)`). [`Cpu::wait_until`] calls it.
pub fn sched_submit_work(cx: &Cpu) {
    if cx.task_state().plug.borrow().is_some() {
        blk_flush_plug(cx, true);
    }
}

/// `blk_add_rq_to_plug()`: the first request of a batch traces `block_plug`; a full plug
/// (`blk_plug_max_rq_count()` requests, or, unless the queue has `QUEUE_FLAG_NOMERGES`, a
/// `last` request of `BLK_PLUG_FLUSH_SIZE` or more) is flushed first and starts a new batch; a
/// request for another queue than `last` sets `multiple_queues`. The request goes to the tail.
///
/// `last` is 6.18's `rq_list_peek(&plug->mq_list)`: the list's HEAD, the oldest request (the
/// rq_list has a head and a tail since 6.13 and adds at the tail), not the newest. The twin
/// `bug-plug-last-is-newest` peeks at the tail and drops the `!blk_queue_nomerges()` gate, as
/// the model did before.
pub fn blk_add_rq_to_plug(rq: Rq, cx: &Cpu) {
    let (walking, count, full) = {
        let g = cx.task_state().plug.borrow();
        let Some(p) = g.as_ref() else {
            drop(g);
            super::blk_mq::blk_mq_try_issue_directly(&rq, cx);
            return;
        };
        let twin = cfg!(feature = "bug-plug-last-is-newest");
        let last = if twin {
            p.mq_list.back()
        } else {
            p.mq_list.front()
        };
        let gate = twin || !rq.q.blk_queue_nomerges();
        let last_big = gate && last.is_some_and(|l| l.bytes() >= BLK_PLUG_FLUSH_SIZE);
        (
            p.walking,
            p.rq_count,
            p.rq_count >= blk_plug_max_rq_count(p) || last_big,
        )
    };
    if walking {
        cx.warn("block/blk-mq.c: blk_add_rq_to_plug: request added to plug->mq_list while blk_mq_flush_plug_list() walks it (list corruption)");
    }
    let mut flushed = false;
    if count == 0 {
        block_plug(cx);
    } else if full && !walking {
        blk_mq_flush_plug_list(cx, false);
        flushed = true; // last = NULL
        block_plug(cx);
    }
    let mut g = cx.task_state().plug.borrow_mut();
    let Some(p) = g.as_mut() else { return };
    if !p.multiple_queues && !flushed {
        let last = if cfg!(feature = "bug-plug-last-is-newest") {
            p.mq_list.back()
        } else {
            p.mq_list.front()
        };
        if let Some(last) = last {
            if !UntrackedArc::ptr_eq(&last.q, &rq.q) {
                p.multiple_queues = true;
            }
        }
    }
    p.mq_list.push_back(rq);
    p.rq_count += 1;
}

/// The requests of a spliced plug list, grouped by queue in their order of first appearance.
fn by_queue(list: VecDeque<Rq>) -> Vec<(UntrackedArc<RequestQueue>, Vec<usize>)> {
    let mut groups: Vec<(UntrackedArc<RequestQueue>, Vec<usize>)> = Vec::new();
    for rq in list {
        match groups
            .iter_mut()
            .find(|(q, _)| UntrackedArc::ptr_eq(q, &rq.q))
        {
            Some((_, tags)) => tags.push(rq.tag),
            None => groups.push((rq.q, vec![rq.tag])),
        }
    }
    groups
}

/// `blk_mq_flush_plug_list(plug, from_schedule)`: a flush from `schedule()` skips the direct
/// issue and hands every request to [`blk_mq_dispatch_list`], which runs the queues on kblockd.
/// An explicit flush on 6.18 walks the live list ([`flush_live_list`]); with the post-6.18 fix,
/// it splices the list off and zeroes `rq_count`, then per queue
/// `blk_mq_dispatch_queue_requests()` (`block_unplug`, issue directly), again while
/// `->queue_rq()` added requests to the plug meanwhile.
pub fn blk_mq_flush_plug_list(cx: &Cpu, from_schedule: bool) {
    if from_schedule {
        return flush_from_schedule(cx);
    }
    if !cx.kernel().blk_plug_list_fix() || cfg!(feature = "bug-plug-flush-no-splice") {
        return flush_live_list(cx);
    }
    loop {
        let (list, depth) = {
            let mut g = cx.task_state().plug.borrow_mut();
            let Some(p) = g.as_mut() else { return };
            if p.rq_count == 0 || p.mq_list.is_empty() {
                return;
            }
            let depth = p.rq_count;
            p.rq_count = 0;
            p.multiple_queues = false;
            (std::mem::take(&mut p.mq_list), depth)
        };
        let groups = by_queue(list);
        let single = groups.len() == 1;
        for (q, tags) in groups {
            let n = if single { depth } else { tags.len() };
            q.dispatch_plugged(tags, n, true, cx);
        }
    }
}

/// The `from_schedule` branch of `blk_mq_flush_plug_list()` (6.18 and the fix alike):
/// `rq_count` zeroed, then `blk_mq_dispatch_list(&plug->mq_list, true)` until the list is
/// empty. No `->queue_rq()` runs in the sleeping task, so nothing can add to the list meanwhile.
fn flush_from_schedule(cx: &Cpu) {
    {
        let mut g = cx.task_state().plug.borrow_mut();
        let Some(p) = g.as_mut() else { return };
        if p.rq_count == 0 {
            return;
        }
        p.rq_count = 0;
    }
    loop {
        let list = {
            let mut g = cx.task_state().plug.borrow_mut();
            match g.as_mut() {
                Some(p) if !p.mq_list.is_empty() => std::mem::take(&mut p.mq_list),
                _ => return,
            }
        };
        let rest = blk_mq_dispatch_list(list, true, cx);
        if let Some(p) = cx.task_state().plug.borrow_mut().as_mut() {
            // What a dispatch left for another queue goes back in front, in order.
            let mut rest = rest;
            rest.extend(p.mq_list.drain(..));
            p.mq_list = rest;
        }
    }
}

/// `blk_mq_dispatch_list(rqs, from_sched)`: takes the requests of the first request's queue off
/// `rqs` (the others stay, in order, and are returned), traces `block_unplug` with their count
/// (`explicit = !from_sched`) and inserts them with `blk_mq_insert_requests(..,
/// run_queue_async = from_sched)`.
pub fn blk_mq_dispatch_list(rqs: VecDeque<Rq>, from_sched: bool, cx: &Cpu) -> VecDeque<Rq> {
    let mut this: Option<UntrackedArc<RequestQueue>> = None;
    let mut tags = Vec::new();
    let mut requeue = VecDeque::new();
    for rq in rqs {
        match &this {
            None => {
                this = Some(UntrackedArc::clone(&rq.q));
                tags.push(rq.tag);
            }
            Some(q) if UntrackedArc::ptr_eq(q, &rq.q) => tags.push(rq.tag),
            Some(_) => requeue.push_back(rq),
        }
    }
    if let Some(q) = this {
        block_unplug(tags.len(), !from_sched, cx);
        q.blk_mq_insert_requests(tags, from_sched, cx);
    }
    requeue
}

/// 6.18's explicit flush (`blk_mq_dispatch_queue_requests()` on `plug->mq_list`): the live list
/// is walked while `->queue_rq()` runs (also what the twin `bug-plug-flush-no-splice` makes of
/// the fixed code).
fn flush_live_list(cx: &Cpu) {
    let depth = {
        let mut g = cx.task_state().plug.borrow_mut();
        let Some(p) = g.as_mut() else { return };
        if p.rq_count == 0 {
            return;
        }
        p.walking = true;
        std::mem::take(&mut p.rq_count)
    };
    block_unplug(depth, true, cx);
    loop {
        let rq = {
            let mut g = cx.task_state().plug.borrow_mut();
            g.as_mut().and_then(|p| p.mq_list.pop_front())
        };
        let Some(rq) = rq else { break };
        super::blk_mq::blk_mq_try_issue_directly(&rq, cx);
    }
    if let Some(p) = cx.task_state().plug.borrow_mut().as_mut() {
        p.walking = false;
        p.rq_count = 0;
    }
}
