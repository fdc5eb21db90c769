//! `mm/mempool.c`: a reserve of preallocated elements in front of a slab cache, so that an
//! allocation with a blocking mask (`GFP_NOIO` in the block layer) never fails: it waits for an
//! element to come back instead.
//!
//! `mempool_alloc()` as 6.18 has it: `might_alloc(gfp)`; adds `__GFP_NOMEMALLOC | __GFP_NORETRY
//! | __GFP_NOWARN`; first tries the slab without `__GFP_DIRECT_RECLAIM | __GFP_IO`; then takes
//! a reserved element; then (if the first try was the reduced mask) the slab with the full mask;
//! then, without `__GFP_DIRECT_RECLAIM`, returns NULL; else sleeps until an element is freed or
//! 5 seconds pass (`io_schedule_timeout(5*HZ)`, here [`Cpu::wait_until_timeout`]) and starts
//! over. `__GFP_NOMEMALLOC` is not modelled (no memory reserves).
//!
//! With nothing to free an element the kernel loops here forever, waking every 5 seconds: the
//! hung-task detector does not report it (its switch count changes at every timeout, see
//! `kernel/hung_task.rs`). The model retries [`MEMPOOL_TIMED_RETRIES`] times (a probabilistic
//! failslab may let a later slab attempt through), then reports the endless loop as biosim's
//! [`ReportKind::EndlessRetry`] and returns `None` rather than loop forever.

use super::gfp::{gfpflags_allow_blocking, might_alloc, GfpFlags};
use super::slab::{kmem_cache_alloc, KmemCache, SlabObject};
use crate::kernel::{Cpu, ReportKind};
use crate::sync::atomic::{AtomicUsize, Ordering};

/// How many fruitless 5-second sleeps in a row the model lets a blocking `mempool_alloc()` take
/// before it calls the loop endless (the kernel has no limit).
pub const MEMPOOL_TIMED_RETRIES: u32 = 4;

/// `mempool_t`: `min_nr` elements reserved from `cache`.
#[derive(Debug)]
pub struct Mempool {
    cache: KmemCache,
    min_nr: usize,
    /// `curr_nr`: reserved elements available now.
    curr_nr: AtomicUsize,
}

/// An element from a mempool: from the slab, or one of the reserve.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a mempool element goes back with mempool_free()"]
pub struct MempoolElement {
    /// The object.
    pub obj: SlabObject,
    /// Whether it came from the reserve (for tests; the kernel does not know).
    pub from_reserve: bool,
}

impl Mempool {
    /// `mempool_create_slab_pool(min_nr, cache)`: the reserve is filled at creation (with
    /// `GFP_KERNEL`, which injection skips by default; the model fills it without asking).
    pub fn new(min_nr: usize, cache: KmemCache) -> Self {
        Self {
            cache,
            min_nr,
            curr_nr: AtomicUsize::new(min_nr),
        }
    }

    /// `pool->curr_nr`.
    pub fn curr_nr(&self) -> usize {
        self.curr_nr.load(Ordering::Acquire)
    }

    /// `pool->min_nr`.
    pub fn min_nr(&self) -> usize {
        self.min_nr
    }

    /// The slab cache behind the pool.
    pub fn cache(&self) -> &KmemCache {
        &self.cache
    }

    fn take_reserved(&self) -> bool {
        self.curr_nr
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }

    /// `mempool_alloc(pool, gfp_mask)`: see the module docs for the order of attempts.
    #[track_caller]
    pub fn mempool_alloc(&self, gfp_mask: GfpFlags, cx: &Cpu) -> Option<MempoolElement> {
        might_alloc(gfp_mask, cx);
        let gfp_mask = gfp_mask.union(GfpFlags(
            GfpFlags::__GFP_NORETRY.0 | GfpFlags::__GFP_NOWARN.0,
        ));
        let reduced = gfp_mask.without(GfpFlags(
            GfpFlags::__GFP_DIRECT_RECLAIM.0 | GfpFlags::__GFP_IO.0,
        ));
        let mut gfp_temp = reduced;
        let mut timeouts = 0;
        loop {
            if let Ok(obj) = kmem_cache_alloc(&self.cache, gfp_temp, cx) {
                return Some(MempoolElement {
                    obj,
                    from_reserve: false,
                });
            }
            if self.take_reserved() {
                return Some(MempoolElement {
                    obj: SlabObject {
                        site: self.cache.name,
                        size: self.cache.object_size,
                    },
                    from_reserve: true,
                });
            }
            if gfp_temp != gfp_mask {
                gfp_temp = gfp_mask;
                continue;
            }
            if !gfpflags_allow_blocking(gfp_mask) {
                return None;
            }
            if !self.mempool_wait(cx) {
                timeouts += 1;
                if timeouts == MEMPOOL_TIMED_RETRIES {
                    let task = cx.current();
                    cx.report(
                        ReportKind::EndlessRetry,
                        format!(
                            "biosim: task {}:{} retries mempool_alloc() from {} forever: io_schedule_timeout(5*HZ) timed out {timeouts} times and no event can free an element (the kernel prints nothing)",
                            task.comm, task.pid, self.cache.name
                        ),
                    );
                    return None;
                }
            }
            // `goto repeat_alloc` keeps `gfp_temp == gfp_mask`: after a wait each round is one
            // full-mask try, then the reserve (review: resetting it made two slab tries a round).
        }
    }

    /// `prepare_to_wait(&pool->wait)` + `io_schedule_timeout(5*HZ)`: sleeps until `mempool_free()`
    /// refills the reserve or 5 seconds pass. Returns whether an element came back.
    fn mempool_wait(&self, cx: &Cpu) -> bool {
        let cond = || self.curr_nr() > 0;
        // Twin: `bug-mempool-wait-untimed` sleeps as io_schedule() would (no timeout), so the
        // hung-task detector reports a task the kernel's skips.
        if cfg!(feature = "bug-mempool-wait-untimed") {
            return cx.wait_until("mempool_alloc", &cond);
        }
        let timeout = 5 * u64::from(cx.config().hz);
        cx.wait_until_timeout("mempool_alloc", timeout, &cond)
    }

    /// `mempool_free(element, pool)`: refills the reserve if it is below `min_nr`, else frees
    /// the object to the slab.
    pub fn mempool_free(&self, elem: MempoolElement) {
        let refilled = self
            .curr_nr
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.min_nr).then_some(n + 1)
            })
            .is_ok();
        if !refilled {
            super::slab::kfree(elem.obj);
        }
    }
}
