//! `block/blk-rq-qos.c` and `block/blk-wbt.c`, the shape of the writeback throttle:
//! `rq_qos_throttle()` → `wbt_wait()` keeps the writes in flight on a queue under a limit
//! (`rwb->wb_normal`); a writer over the limit sleeps on the throttle's wait queue
//! (`rq_qos_wait()`: `io_schedule()`) until a completion (`wbt_done()` → `wbt_rqw_done()` →
//! `wake_up()`) hands it a slot (`rq_qos_wake_function()` acquires the inflight count for the
//! waiter before waking it).
//!
//! Left out: wbt's latency-driven scaling of the limit (`scale_up()`/`scale_down()`), the
//! separate background/discard wait queues and the "sync write is not throttled" rule; only
//! `REQ_OP_WRITE` bios are throttled, and a `REQ_NOWAIT` bio is never made to wait (it is not
//! counted either). The throttle is per queue and off unless a queue asks for it
//! ([`super::blk_mq::RequestQueue::with_wbt`]).

use super::{Bio, ReqFlags, ReqOp};
use crate::kernel::Cpu;
use crate::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use crate::sync::{Arc, Mutex};
use std::collections::VecDeque;

/// `rq_qos_throttle()`'s sleep can never end: no completion will wake the writer (a hung task).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WbtHung;

/// `struct rq_wb` with its one `struct rq_wait`: the limit, the writes in flight, the sleepers.
#[derive(Debug)]
pub struct RqWb {
    /// `rwb->wb_normal`.
    limit: u32,
    /// `rqw->inflight`.
    inflight: AtomicU32,
    /// `rqw->wait`: each sleeper's "woken with a slot" flag (`data->got_token`).
    waiters: Mutex<VecDeque<Arc<AtomicBool>>>,
}

impl RqWb {
    /// `wbt_init()` with limit `limit`.
    pub fn new(limit: u32) -> Self {
        RqWb {
            limit,
            inflight: AtomicU32::new(0),
            waiters: Mutex::new(VecDeque::new()),
        }
    }

    /// Writes counted in flight now.
    pub fn inflight(&self) -> u32 {
        self.inflight.load(Ordering::Acquire)
    }

    /// Sleepers on the wait queue.
    pub fn waiters(&self) -> usize {
        self.waiters.lock().len()
    }

    /// `rq_wait_inc_below()`: take a slot if one is free.
    fn inc_below(&self) -> bool {
        let mut cur = self.inflight.load(Ordering::Acquire);
        loop {
            if cur >= self.limit {
                return false;
            }
            match self
                .inflight
                .compare_exchange(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// `rq_qos_throttle()` → `wbt_wait()`: `Ok(true)` if the write is counted (the request's
    /// `wbt_flags`), `Ok(false)` if not throttled, `Err(WbtHung)` if its sleep can never end (no
    /// completion will wake it: a hung task).
    pub fn rq_qos_throttle(&self, bio: &Bio, cx: &Cpu) -> Result<bool, WbtHung> {
        if bio.op() != ReqOp::Write || bio.bi_opf.flags.contains(ReqFlags::REQ_NOWAIT) {
            return Ok(false);
        }
        // rq_qos_wait(): no sleeper queued and a slot free: go.
        if self.waiters.lock().is_empty() && self.inc_below() {
            return Ok(true);
        }
        let token = Arc::new(AtomicBool::new(false));
        self.waiters.lock().push_back(Arc::clone(&token));
        let _ = cx.might_sleep_at("block/blk-rq-qos.c:rq_qos_wait");
        if cx.wait_until("wbt_wait", &|| token.load(Ordering::Acquire)) {
            Ok(true)
        } else {
            self.waiters.lock().retain(|t| !Arc::ptr_eq(t, &token));
            Err(WbtHung)
        }
    }

    /// `wbt_done()` → `wbt_rqw_done()`: a counted write completed: its slot goes to the first
    /// sleeper (`wake_up()` → `rq_qos_wake_function()`), or back to the pool. The buggy twin
    /// `bug-wbt-no-wakeup` returns the slot and wakes no one.
    pub fn wbt_done(&self, _cx: &Cpu) {
        if cfg!(feature = "bug-wbt-no-wakeup") {
            self.inflight.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let first = self.waiters.lock().pop_front();
        match first {
            // The slot passes to the waiter: inflight stays.
            Some(t) => t.store(true, Ordering::Release),
            None => {
                self.inflight.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}
