//! `mm/page_reporting.c` under a virtio-balloon with `VIRTIO_BALLOON_F_REPORTING`
//! (drivers/virtio/virtio_balloon.c `virtballoon_free_page_report()`): a guest's free page
//! reporting, as far as what a page allocation costs.
//!
//! A guest with free page reporting hands its free memory back to the host in blocks of
//! `page_reporting_order` (`pageblock_order`, 2 MiB on x86, by default): the host discards the
//! block, and the guest's next touch of any of its pages faults on the host, which allocates and
//! zeroes a host page before the vCPU goes on. This machine is such a guest (Firecracker's
//! balloon reports, `page_reporting_order` 9), and the fault is the dearest thing a page-cache
//! read can meet there: about 7.6 µs per 4 KiB page against 0.45 µs for its copy
//! (`PageCosts::reported_touch_ns` in bio-sim, measured by `biosim bench dontcache
//! --calibrate`). Which reads pay it depends on reuse: a page freed and allocated again before
//! the reporting worker runs never reaches the host.
//!
//! What the model keeps of the kernel:
//! - `page_reporting_notify_free()`: a free that merges into a block of `page_reporting_order`
//!   (with its free buddies, whether the host still backs them or not) requests the worker,
//!   which runs [`PAGE_REPORTING_DELAY_SECS`] (`2 * HZ`) later (`__page_reporting_request()` →
//!   `schedule_delayed_work()`), once per request.
//! - `page_reporting_cycle()`: a pass reports at most `DIV_ROUND_UP(nr_free,
//!   PAGE_REPORTING_CAPACITY * 16) + 1` calls of [`PAGE_REPORTING_CAPACITY`] blocks, where
//!   `nr_free` counts the free blocks, reported or not; what is left asks for another pass
//!   `2 * HZ` later (`PAGE_REPORTING_REQUESTED`). An idle guest is reported in about 30 s. A block
//!   is reported whole: the pages of it the host still backed are discarded now.
//! - Allocation takes recently freed pages first (the per-CPU lists, then the buddy lists, where
//!   `page_reporting_drain()` put reported blocks back at the tail, `FPI_TO_TAIL`), then what is
//!   left of reported blocks split earlier, then reported blocks ([`FreePageReporting::alloc`]);
//!   every page of the last two faults when touched.
//!
//! **Simplifications.** One zone, one migratetype and one order: the kernel gives each
//! (order, migratetype) free list its own budget, and skips a zone whose free memory is below its
//! low watermark plus 32 blocks (not modelled: the model's guest has no watermarks). Freed pages
//! coalesce with any free pages into whole blocks (no per-CPU lists holding them back: a page
//! that the kernel keeps on a per-CPU list is reported here once it merges). The host side is a
//! cost per page, not a model of the host.

/// `pageblock_order`: 9 on x86-64 (2 MiB), the default of the `page_reporting_order` module
/// parameter when the device asks for none, and this machine's value
/// (`/sys/module/page_reporting/parameters/page_reporting_order`).
pub const PAGEBLOCK_ORDER: u32 = 9;

/// `PAGE_REPORTING_DELAY` in seconds (`2 * HZ` jiffies).
pub const PAGE_REPORTING_DELAY_SECS: u64 = 2;

/// `PAGE_REPORTING_CAPACITY`: blocks per `prdev->report()` call (the scatterlist's length).
pub const PAGE_REPORTING_CAPACITY: u64 = 32;

/// The guest's free memory as free page reporting sees it, in 4 KiB pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreePageReporting {
    /// `page_reporting_order`: the smallest block reported.
    order: u32,
    /// `CONFIG_HZ`.
    hz: u64,
    /// Free pages the host still backs (the allocator's first choice).
    unreported: u64,
    /// Free pages of reported blocks split by an allocation: discarded on the host, no longer
    /// `PageReported`.
    leftover: u64,
    /// Free pages in whole reported (`PageReported`) blocks.
    reported: u64,
    /// When the requested worker runs (jiffies); `None`: `PAGE_REPORTING_IDLE`.
    worker_due: Option<u64>,
    /// Pages allocated from discarded memory, each one host fault.
    pub reported_allocated: u64,
    /// Pages the worker reported (blocks times their pages).
    pub pages_reported: u64,
    /// Worker passes (`page_reporting_process()` runs).
    pub passes: u64,
}

impl FreePageReporting {
    /// A guest with `free_pages` free, all of them already reported (an idle guest: the worker
    /// has reported everything after about 30 s), at `page_reporting_order` `order`, `CONFIG_HZ`
    /// `hz`.
    pub fn idle(free_pages: u64, order: u32, hz: u64) -> Self {
        Self {
            order,
            hz,
            unreported: 0,
            leftover: 0,
            reported: free_pages,
            worker_due: None,
            reported_allocated: 0,
            pages_reported: 0,
            passes: 0,
        }
    }

    /// Pages per reported block (`1 << page_reporting_order`).
    pub fn block_pages(&self) -> u64 {
        1 << self.order
    }

    /// Free pages: (backed by the host, discarded on it), the second being split leftovers
    /// plus whole reported blocks.
    pub fn free(&self) -> (u64, u64) {
        (self.unreported, self.leftover + self.reported)
    }

    /// When the worker runs next, if it is requested.
    pub fn worker_due(&self) -> Option<u64> {
        self.worker_due
    }

    /// `__alloc_pages()` of `nr` order-0 pages at `now` (jiffies): pages the host backs first,
    /// then split leftovers, then reported blocks (split: their other pages become leftovers).
    /// Returns how many came from discarded memory (each a host fault on first touch). The
    /// caller never asks for more than is free: its memcg limit is the guest's memory.
    pub fn alloc(&mut self, nr: u64, now: u64) -> u64 {
        self.advance(now);
        debug_assert!(nr <= self.unreported + self.leftover + self.reported);
        let hot = nr.min(self.unreported);
        self.unreported -= hot;
        let from_left = (nr - hot).min(self.leftover);
        self.leftover -= from_left;
        let from_reported = (nr - hot - from_left).min(self.reported);
        let block = self.block_pages();
        let split = from_reported.div_ceil(block) * block;
        let split = split.min(self.reported);
        self.reported -= split;
        self.leftover += split - from_reported;
        let cold = from_left + from_reported;
        self.reported_allocated += cold;
        cold
    }

    /// `free_pages()` of `nr` order-0 pages at `now`: they join the free memory the host backs,
    /// and `page_reporting_notify_free()` requests the worker once they can merge into a whole
    /// block (with split leftovers).
    pub fn free_pages(&mut self, nr: u64, now: u64) {
        self.advance(now);
        self.unreported += nr;
        if self.worker_due.is_none() && self.unreported + self.leftover >= self.block_pages() {
            self.worker_due = Some(now + PAGE_REPORTING_DELAY_SECS * self.hz);
        }
    }

    /// Runs every worker pass due by `now`: each reports up to its budget of whole blocks that
    /// are not `PageReported` (leftovers first, then pages the host backs) and, if some are
    /// left, asks for the next pass `2 * HZ` later.
    pub fn advance(&mut self, now: u64) {
        while let Some(due) = self.worker_due.filter(|d| *d <= now) {
            self.passes += 1;
            let block = self.block_pages();
            let nr_free = (self.unreported + self.leftover + self.reported) / block;
            let calls = nr_free.div_ceil(PAGE_REPORTING_CAPACITY * 16) + 1;
            let candidates = (self.unreported + self.leftover) / block;
            let blocks = candidates.min(calls * PAGE_REPORTING_CAPACITY);
            let pages = blocks * block;
            let from_left = pages.min(self.leftover);
            self.leftover -= from_left;
            self.unreported -= pages - from_left;
            self.reported += pages;
            self.pages_reported += pages;
            self.worker_due =
                (candidates > blocks).then_some(due + PAGE_REPORTING_DELAY_SECS * self.hz);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: u64 = 250;

    #[test]
    fn an_idle_guest_allocates_reported_memory() {
        let mut r = FreePageReporting::idle(1000, 9, HZ);
        assert_eq!(r.alloc(300, 0), 300);
        assert_eq!(r.free(), (0, 700));
        // The split block's other 212 pages go first, then the rest of the reported ones.
        assert_eq!(r.alloc(700, 1), 700);
        assert_eq!(r.reported_allocated, 1000);
        assert_eq!(r.free(), (0, 0));
    }

    #[test]
    fn freed_pages_are_allocated_before_reported_ones() {
        let mut r = FreePageReporting::idle(10_000, 9, HZ);
        r.free_pages(100, 0);
        // 100 backed first, then 50 reported.
        assert_eq!(r.alloc(150, 1), 50);
        assert_eq!(r.free(), (0, 9_950));
    }

    #[test]
    fn the_worker_runs_two_seconds_after_a_whole_block_is_free() {
        let mut r = FreePageReporting::idle(0, 9, HZ);
        r.free_pages(511, 10);
        assert_eq!(r.worker_due(), None, "less than a block: no request");
        r.free_pages(1, 20);
        assert_eq!(r.worker_due(), Some(20 + 2 * HZ));
        // A later free does not move the request.
        r.free_pages(600, 30);
        assert_eq!(r.worker_due(), Some(20 + 2 * HZ));
        // Just before it is due nothing is reported.
        assert_eq!(r.alloc(0, 20 + 2 * HZ - 1), 0);
        assert_eq!(r.free(), (1112, 0));
        // At the due jiffy the whole blocks go (2 of 512), the rest stays.
        assert_eq!(r.alloc(0, 20 + 2 * HZ), 0);
        assert_eq!(r.free(), (88, 1024));
        assert_eq!(
            (r.passes, r.pages_reported, r.worker_due()),
            (1, 1024, None)
        );
        // Then the unreported rest first, and 12 of the reported.
        assert_eq!(r.alloc(100, 20 + 2 * HZ + 1), 12);
    }

    #[test]
    fn memory_reused_before_the_worker_runs_never_faults() {
        // A reader that frees what it read and allocates it again (DONTCACHE): 256 pages out, 256
        // back, every jiffy for ten seconds. Its pages and the other half of the block it split
        // make a whole block while they are free, so the worker is requested, but when it runs
        // the pages are allocated again: nothing whole to report, nothing faults.
        let mut r = FreePageReporting::idle(1 << 20, 9, HZ);
        let first = r.alloc(256, 0);
        let mut later = 0;
        for j in 1..10 * HZ {
            r.free_pages(256, j);
            later += r.alloc(256, j);
        }
        assert_eq!((first, later), (256, 0));
        assert_eq!((r.passes, r.pages_reported), (4, 0));
    }

    #[test]
    fn a_window_left_free_for_two_seconds_faults_again() {
        // DONTCACHE's 384-page window at order 9, freed, then allocated again before the
        // worker's pass (no fault) or after it: the pass reports the 384 pages with the 128 the
        // first allocation left of its block, and all 384 fault again.
        for (again_at, faults) in [(1 + 2 * HZ - 1, 0), (1 + 2 * HZ, 384)] {
            let mut r = FreePageReporting::idle(1 << 20, 9, HZ);
            assert_eq!(r.alloc(384, 0), 384);
            assert_eq!(r.free(), (0, (1 << 20) - 384));
            r.free_pages(384, 1);
            assert_eq!(r.worker_due(), Some(1 + 2 * HZ));
            r.advance(again_at);
            // Before the pass: 384 backed; after it, the whole block is reported again.
            let backed = 384 - faults;
            assert_eq!(r.free(), (backed, (1 << 20) - backed), "at {again_at}");
            assert_eq!(r.alloc(384, again_at), faults, "at {again_at}");
        }
    }

    #[test]
    fn a_pass_reports_a_sixteenth_of_the_free_list_plus_one_call() {
        // 40,000 free blocks, 20,000 of them unreported: budget DIV_ROUND_UP(40,000, 512) = 79,
        // so 80 calls of 32 blocks = 2,560 blocks per pass, then another pass 2 s later.
        let block = 1 << 9;
        let mut r = FreePageReporting::idle(20_000 * block, 9, HZ);
        r.free_pages(20_000 * block, 0);
        let due = r.worker_due().unwrap();
        assert_eq!(r.alloc(0, due), 0);
        assert_eq!(r.pages_reported, 2_560 * block);
        assert_eq!(r.worker_due(), Some(due + 2 * HZ));
        // Two more passes at once if the caller comes back late.
        assert_eq!(r.alloc(0, due + 4 * HZ), 0);
        assert_eq!(r.passes, 3);
        assert_eq!(r.pages_reported, 3 * 2_560 * block);
        // Eight passes in all (the last one has 2,080 blocks left: it reports them and stops).
        r.alloc(0, due + 100 * HZ);
        assert_eq!((r.passes, r.pages_reported), (8, 20_000 * block));
        assert_eq!((r.free(), r.worker_due()), ((0, 40_000 * block), None));
    }
}
