//! `block/blk-merge.c` (and `blk_mq_attempt_bio_merge()` of `block/blk-mq.c`): a bio merged
//! into a request already in `current->plug`, as 6.18 does it.
//!
//! `blk_mq_submit_bio()` → `blk_mq_attempt_bio_merge()`: unless the queue has
//! `QUEUE_FLAG_NOMERGES` or the bio carries one of `REQ_NOMERGE_FLAGS`,
//! `blk_attempt_plug_merge()` tries ONE request: the plug list's tail (the newest, "one-shot
//! backmerge", 961296e89dc3 "block: use plug request list tail for one-shot backmerge attempt",
//! 6.16) when
//! it is for the same queue; otherwise, only if the plug spans queues, the first request of that
//! queue from the head. `blk_attempt_bio_merge()` then asks `blk_rq_merge_ok()` (both mergeable,
//! same op) and `blk_try_merge()` (the bio starts where the request ends: back merge; it ends
//! where the request starts: front merge), and `ll_back_merge_fn()`/`ll_front_merge_fn()` keep
//! the request within `max_sectors` and `max_segments` (a request that would outgrow them is
//! marked `REQ_NOMERGE`, `req_set_nomerge()`). A merged bio is traced `block_bio_backmerge` /
//! `block_bio_frontmerge` and joins the request's bio list; it gets no request, no tag and no
//! throttling of its own.
//!
//! Left out, because the model's bios do not carry what they compare: the cgroup, integrity,
//! inline-crypt, write-hint/stream, I/O-priority and atomic-write tests of `blk_rq_merge_ok()`,
//! the virt-boundary gap test (`req_gap_back_merge()`), failfast mixing, and discard merging
//! (`blk_discard_mergable()` needs `max_discard_segments > 1`, which no modelled queue sets).
//! `blk_rq_get_max_sectors()` is `max_sectors` for every op (no chunk or discard limits).

use super::blk_mq::request::RqSlot;
use super::blk_mq::{RequestQueue, Rq};
use super::trace::{block_bio_backmerge, block_bio_frontmerge};
use super::{Bio, ReqFlags, ReqOp};
use crate::kernel::Cpu;
use crate::sync::UntrackedArc;

/// The number of physical segments of a bio (`bio_split_rw_at()`'s `nr_segs`): one per bio
/// vector in the model (a vector is one contiguous buffer).
pub fn bio_nr_segs(bio: &Bio) -> u32 {
    u32::try_from(bio.bi_io_vec.len()).unwrap_or(u32::MAX)
}

/// `bio_mergeable()`: none of `REQ_NOMERGE_FLAGS`.
pub fn bio_mergeable(bio: &Bio) -> bool {
    !bio.bi_opf.flags.intersects(ReqFlags::REQ_NOMERGE_FLAGS)
}

/// `rq_mergeable()`: not a flush or write-zeroes request, none of `REQ_NOMERGE_FLAGS`.
fn rq_mergeable(s: &RqSlot) -> bool {
    !matches!(s.cmd_flags.op, ReqOp::Flush | ReqOp::WriteZeroes)
        && !s.cmd_flags.flags.intersects(ReqFlags::REQ_NOMERGE_FLAGS)
}

/// `blk_rq_merge_ok()`: both mergeable and the same op (see the module doc for what is left out).
fn blk_rq_merge_ok(s: &RqSlot, bio: &Bio) -> bool {
    rq_mergeable(s) && bio_mergeable(bio) && s.cmd_flags.op == bio.op()
}

/// `enum elv_merge`, as `blk_try_merge()` answers (no discard merge, see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElvMerge {
    /// `ELEVATOR_NO_MERGE`.
    NoMerge,
    /// `ELEVATOR_BACK_MERGE`: the bio starts where the request ends.
    BackMerge,
    /// `ELEVATOR_FRONT_MERGE`: the bio ends where the request starts.
    FrontMerge,
}

/// `blk_try_merge()`.
fn blk_try_merge(s: &RqSlot, bio: &Bio) -> ElvMerge {
    let bio_sector = bio.bi_iter.bi_sector;
    if s.sector + s.nr_sectors == bio_sector {
        ElvMerge::BackMerge
    } else if s.sector.checked_sub(bio.sectors()) == Some(bio_sector) {
        ElvMerge::FrontMerge
    } else {
        ElvMerge::NoMerge
    }
}

/// `ll_back_merge_fn()` / `ll_front_merge_fn()` → `ll_new_hw_segment()`: the merged request
/// stays within `max_sectors` and `max_segments`; if not, `req_set_nomerge()` marks it
/// `REQ_NOMERGE` and the merge fails. On success the segments are counted.
fn ll_merge_fn(q: &RequestQueue, s: &mut RqSlot, bio: &Bio, nr_segs: u32) -> bool {
    if s.nr_sectors + bio.sectors() > q.max_sectors {
        s.cmd_flags.flags = s.cmd_flags.flags | ReqFlags::REQ_NOMERGE;
        return false;
    }
    if s.cmd_flags.op != ReqOp::Discard {
        if s.nr_phys_segments + nr_segs > q.max_segments {
            s.cmd_flags.flags = s.cmd_flags.flags | ReqFlags::REQ_NOMERGE;
            return false;
        }
        s.nr_phys_segments += nr_segs;
    }
    true
}

/// `blk_attempt_bio_merge()` on request `rq`: `None` if the bio was merged (it is the
/// request's now), else the bio back.
fn blk_attempt_bio_merge(rq: &Rq, bio: Box<Bio>, nr_segs: u32, cx: &Cpu) -> Option<Box<Bio>> {
    let q = &rq.q;
    let kind = q.tags.slot_mut(rq.tag, |s| {
        if !blk_rq_merge_ok(s, &bio) {
            return ElvMerge::NoMerge;
        }
        match blk_try_merge(s, &bio) {
            ElvMerge::NoMerge => ElvMerge::NoMerge,
            k if ll_merge_fn(q, s, &bio, nr_segs) => k,
            _ => ElvMerge::NoMerge, // BIO_MERGE_FAILED
        }
    });
    match kind {
        ElvMerge::NoMerge => return Some(bio),
        // bio_attempt_back_merge(): traced before the bio joins the request.
        ElvMerge::BackMerge => block_bio_backmerge(&bio, cx),
        ElvMerge::FrontMerge => block_bio_frontmerge(&bio, cx),
    }
    q.tags.slot_mut(rq.tag, |s| {
        s.nr_sectors += bio.sectors();
        if kind == ElvMerge::FrontMerge {
            // req->bio = bio; req->__sector = bio->bi_iter.bi_sector.
            s.sector = bio.bi_iter.bi_sector;
            s.bios.insert(0, bio);
        } else {
            // req->biotail->bi_next = bio; req->biotail = bio.
            s.bios.push(bio);
        }
    });
    None
}

/// `blk_attempt_plug_merge()`: see the module doc. `None` if merged.
pub fn blk_attempt_plug_merge(
    q: &UntrackedArc<RequestQueue>,
    bio: Box<Bio>,
    nr_segs: u32,
    cx: &Cpu,
) -> Option<Box<Bio>> {
    let candidate = {
        let g = cx.task_state().plug.borrow();
        let Some(plug) = g.as_ref() else {
            return Some(bio);
        };
        match plug.mq_list.back() {
            None => None,
            Some(tail) if UntrackedArc::ptr_eq(&tail.q, q) => Some(tail.clone()),
            Some(_) if !plug.multiple_queues => None,
            // rq_list_for_each(): the first request of this queue, one try.
            Some(_) => plug
                .mq_list
                .iter()
                .find(|r| UntrackedArc::ptr_eq(&r.q, q))
                .cloned(),
        }
    };
    match candidate {
        Some(rq) => blk_attempt_bio_merge(&rq, bio, nr_segs, cx),
        None => Some(bio),
    }
}

/// `blk_mq_attempt_bio_merge()`: the plug merge, unless the queue has `QUEUE_FLAG_NOMERGES` or
/// the bio is not mergeable (there is no I/O scheduler to try after it). `None` if merged.
pub fn blk_mq_attempt_bio_merge(
    q: &UntrackedArc<RequestQueue>,
    bio: Box<Bio>,
    cx: &Cpu,
) -> Option<Box<Bio>> {
    if q.blk_queue_nomerges() || !bio_mergeable(&bio) {
        return Some(bio);
    }
    let nr_segs = bio_nr_segs(&bio);
    blk_attempt_plug_merge(q, bio, nr_segs, cx)
}
