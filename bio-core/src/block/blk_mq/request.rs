//! `struct request` of `include/linux/blk-mq.h` and its life-cycle state (`enum mq_rq_state`:
//! `MQ_RQ_IDLE`, `MQ_RQ_IN_FLIGHT`, `MQ_RQ_COMPLETE`) with the reference count `rq->ref`
//! (`block/blk-mq.h`: `req_ref_put_and_test()`).
//!
//! The request itself lives in its tag's slot (`tags->static_rqs[tag]`); a driver holds an
//! [`Rq`], the model's `struct request *`: a clonable handle, so a driver can complete the same
//! request twice, and the kernel's check on that is reproduced.
//!
//! A request carries a list of bios, `rq->bio` … `rq->biotail` (linked by `bi_next` in the
//! kernel, a `Vec` in order here): the first one it was made for, then those merged into it
//! (`block/blk-merge.c`, [`crate::block::blk_merge`]).

// Bios travel boxed everywhere in bio-core (`Box<Bio>` moves from submitter to driver to
// `bio_endio()`); a request's list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

use super::RequestQueue;
use crate::block::{Bio, BlkOpf};
use crate::drivers::block::blk_mq_trace::RqTrace;
use crate::sync::UntrackedArc;

/// `enum mq_rq_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MqRqState {
    /// `MQ_RQ_IDLE`: allocated (or free), not started.
    Idle,
    /// `MQ_RQ_IN_FLIGHT`: `blk_mq_start_request()` ran.
    InFlight,
    /// `MQ_RQ_COMPLETE`: `blk_mq_complete_request()` marked it, not yet ended.
    Complete,
}

/// What a tag's slot holds (`tags->static_rqs[tag]`).
#[derive(Debug)]
pub(crate) struct RqSlot {
    /// `rq->state`.
    pub(crate) state: MqRqState,
    /// `rq->ref`: 1 from allocation to `blk_mq_free_request()`.
    pub(crate) refcount: u32,
    /// `rq->bio` … `rq->biotail`, in order (empty while a driver holds them, see
    /// [`Rq::take_bios`]).
    pub(crate) bios: Vec<Box<Bio>>,
    /// `rq->nr_phys_segments`: the bio segments of every bio of the request.
    pub(crate) nr_phys_segments: u32,
    /// `rq->cmd_flags`.
    pub(crate) cmd_flags: BlkOpf,
    /// `blk_rq_pos()`.
    pub(crate) sector: u64,
    /// `blk_rq_sectors()`.
    pub(crate) nr_sectors: u64,
    /// `RQF_*`-like: the request was counted by the rq-qos throttle (`wbt_flags`).
    pub(crate) wbt_tracked: bool,
}

impl RqSlot {
    pub(crate) fn free() -> Self {
        RqSlot {
            state: MqRqState::Idle,
            refcount: 0,
            bios: Vec::new(),
            nr_phys_segments: 0,
            cmd_flags: BlkOpf {
                op: crate::block::ReqOp::Read,
                flags: crate::block::ReqFlags::NONE,
            },
            sector: 0,
            nr_sectors: 0,
            wbt_tracked: false,
        }
    }
}

/// A `struct request *`: the queue and the tag of the request.
#[derive(Debug, Clone)]
pub struct Rq {
    /// `rq->q`.
    pub q: UntrackedArc<RequestQueue>,
    /// `rq->tag`.
    pub tag: usize,
}

impl Rq {
    /// The request as the block tracepoints print it.
    pub fn trace(&self) -> RqTrace {
        let s = self
            .q
            .tags
            .slot(self.tag, |s| (s.cmd_flags, s.sector, s.nr_sectors));
        RqTrace {
            dev: self.q.devt,
            rwbs: s.0.rwbs_buf(),
            sector: s.1,
            nr_sector: s.2,
        }
    }

    /// `blk_mq_rq_state()`.
    pub fn state(&self) -> MqRqState {
        self.q.tags.slot(self.tag, |s| s.state)
    }

    /// `rq->bio` … `rq->biotail`, taken by a driver that moves the data itself (they stay the
    /// request's: the driver hands them back with [`Rq::put_bios`] before ending the request,
    /// or the request ends without bios to complete).
    pub fn take_bios(&self) -> Vec<Box<Bio>> {
        self.q
            .tags
            .slot_mut(self.tag, |s| std::mem::take(&mut s.bios))
    }

    /// Gives the bios back to the request (after the driver filled or consumed them).
    pub fn put_bios(&self, bios: Vec<Box<Bio>>) {
        self.q.tags.slot_mut(self.tag, |s| s.bios = bios);
    }

    /// The number of bios the request carries (`rq->bio != rq->biotail` when more than one).
    pub fn nr_bios(&self) -> usize {
        self.q.tags.slot(self.tag, |s| s.bios.len())
    }

    /// `blk_rq_bytes()`.
    pub fn bytes(&self) -> u64 {
        self.q.tags.slot(self.tag, |s| s.nr_sectors) << crate::block::SECTOR_SHIFT
    }

    /// `req_op(rq)` is a write.
    pub fn is_write(&self) -> bool {
        self.q.tags.slot(self.tag, |s| s.cmd_flags.op.is_write())
    }
}
