//! `block/blk-mq-tag.c`: the tag set of a hardware queue (`hw_queue_depth` tags, each with its
//! request slot, `tags->static_rqs`), `blk_mq_get_tag()` and `blk_mq_put_tag()`.
//!
//! `blk_mq_get_tag()` with no free tag: a `BLK_MQ_REQ_NOWAIT` allocation (a `REQ_NOWAIT` bio)
//! fails at once, and `blk_mq_submit_bio()` ends the bio with `bio_wouldblock_error()`
//! (`BLK_STS_AGAIN`); otherwise the task sleeps on the tag wait queue (`io_schedule()`) until a
//! tag is freed, which the model expresses as `cx.wait_until("blk_mq_get_tag", ..)`. The model
//! has no reserved tags and no per-CPU tag cache (one sbitmap, lowest free tag first).

use super::request::RqSlot;
use crate::kernel::Cpu;
use crate::sync::Mutex;

/// `struct blk_mq_tags` of a queue's one hardware context: a bitmap of `nr_tags` and the
/// request of each tag.
#[derive(Debug)]
pub struct BlkMqTags {
    slots: Mutex<Vec<(bool, RqSlot)>>,
}

/// Why [`BlkMqTags::blk_mq_get_tag`] gave no tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoTag {
    /// `BLK_MQ_REQ_NOWAIT` and every tag busy: `BLK_MQ_NO_TAG`.
    WouldBlock,
    /// The sleep can never end (no tag will ever be freed): the runtime's deadlock answer.
    Deadlock,
}

impl BlkMqTags {
    /// `blk_mq_init_tags()` with `nr_tags` (`set->queue_depth`, `hw_queue_depth`).
    pub fn new(nr_tags: usize) -> Self {
        BlkMqTags {
            slots: Mutex::new((0..nr_tags).map(|_| (false, RqSlot::free())).collect()),
        }
    }

    /// The depth.
    pub fn nr_tags(&self) -> usize {
        self.slots.lock().len()
    }

    /// Tags in use now.
    pub fn busy(&self) -> usize {
        self.slots.lock().iter().filter(|(b, _)| *b).count()
    }

    fn try_get(&self) -> Option<usize> {
        let mut s = self.slots.lock();
        let tag = s.iter().position(|(b, _)| !*b)?;
        s[tag] = (true, RqSlot::free());
        Some(tag)
    }

    /// `blk_mq_get_tag()`: the lowest free tag; with none free, `nowait` fails and otherwise the
    /// task sleeps until one is freed (`schedule()`: the plug is flushed first).
    pub fn blk_mq_get_tag(&self, nowait: bool, cx: &Cpu) -> Result<usize, NoTag> {
        if let Some(t) = self.try_get() {
            return Ok(t);
        }
        if nowait {
            return Err(NoTag::WouldBlock);
        }
        loop {
            let _ = cx.might_sleep_at("block/blk-mq-tag.c:blk_mq_get_tag");
            if !cx.wait_until("blk_mq_get_tag", &|| self.busy() < self.nr_tags()) {
                return Err(NoTag::Deadlock);
            }
            if let Some(t) = self.try_get() {
                return Ok(t);
            }
        }
    }

    /// `blk_mq_put_tag()`: whether the tag was busy (a free of a free tag is the caller's
    /// report).
    pub fn blk_mq_put_tag(&self, tag: usize) -> bool {
        let mut s = self.slots.lock();
        match s.get_mut(tag) {
            Some(e) if e.0 => {
                *e = (false, RqSlot::free());
                true
            }
            _ => false,
        }
    }

    pub(crate) fn slot<R>(&self, tag: usize, f: impl FnOnce(&RqSlot) -> R) -> R {
        f(&self.slots.lock()[tag].1)
    }

    pub(crate) fn slot_mut<R>(&self, tag: usize, f: impl FnOnce(&mut RqSlot) -> R) -> R {
        f(&mut self.slots.lock()[tag].1)
    }
}
