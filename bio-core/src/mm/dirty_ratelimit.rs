//! `mm/page-writeback.c`'s dirty throttling control, the arithmetic `balance_dirty_pages()`
//! ([`super::page_writeback`]) runs between a domain's freerun ceiling and its limit:
//!
//! - the **position ratio** (`pos_ratio_polynom()`, [`wb_position_ratio`]): 1.0 at the
//!   setpoint halfway between the freerun ceiling and the limit, 2.0 at the ceiling, 0 at the
//!   limit (a cubic), scaled by the wb's own control line (its share of the dirty pages against
//!   `8 * write_bw`, never under a quarter) and raised in its reserve area;
//! - the **base rate limit** `wb->dirty_ratelimit` ([`wb_update_dirty_ratelimit`]), moved every
//!   `BANDWIDTH_INTERVAL` toward `task_ratelimit * write_bw / dirty_rate`, the rate that makes
//!   the dirtiers' rate the device's, in filtered steps;
//! - the **pause bounds** ([`wb_max_pause`], [`wb_min_pause`]) and the polling interval
//!   ([`dirty_poll_interval`]).
//!
//! A dirtier that dirtied `pages_dirtied` pages is then paused `HZ * pages_dirtied /
//! task_ratelimit` jiffies less the time since its last pause (`task_ratelimit =
//! dirty_ratelimit * pos_ratio >> RATELIMIT_CALC_SHIFT`), not at all under the minimum pause and
//! at most [`wb_max_pause`] jiffies (itself at most `MAX_PAUSE`, [`max_pause`]: 200 ms).
//!
//! Pure functions of the `struct dirty_throttle_control` and `struct bdi_writeback` fields they
//! read, in the kernel's integer arithmetic (pages, pages per second, jiffies), so their results
//! can be checked against the kernel's numbers. Not modelled: `BDI_CAP_STRICTLIMIT` (FUSE's)
//! and `PF_LOCAL_THROTTLE` (a block device has neither).

use crate::fs::fs_writeback::WbBandwidth;

/// `RATELIMIT_CALC_SHIFT`: the position ratio is a fixed-point number with this many fraction
/// bits (1.0 is 1024).
pub const RATELIMIT_CALC_SHIFT: u32 = 10;

/// `DIRTY_POLL_THRESH` (`128 >> (PAGE_SHIFT - 10)`): a dirtier paused should not come back
/// sooner than after this many pages.
pub const DIRTY_POLL_THRESH: u64 = 32;

/// `MAX_PAUSE`: `max(HZ / 5, 1)` jiffies (200 ms), the longest single pause.
pub fn max_pause(hz: u64) -> u64 {
    (hz / 5).max(1)
}

/// `ilog2()` of a non-zero value (the kernel's callers never pass 0; 0 here gives 0).
fn ilog2(v: u64) -> u64 {
    u64::from(v.max(1).ilog2())
}

/// One domain's `struct dirty_throttle_control` as `balance_dirty_pages()` fills it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirtyThrottleControl {
    /// `dirty`: the domain's dirty plus writeback pages.
    pub dirty: u64,
    /// `thresh`: the domain's dirty threshold.
    pub thresh: u64,
    /// `bg_thresh`: its background threshold.
    pub bg_thresh: u64,
    /// `hard_dirty_limit(dom, thresh)`: `max(thresh, dom->dirty_limit)`.
    pub limit: u64,
    /// `wb_dirty`: the wb's dirty plus writeback pages.
    pub wb_dirty: u64,
    /// `wb_thresh`: the wb's share of `thresh` (`__wb_calc_thresh()`, with 6.14+'s floor for an
    /// inactive wb, an eighth of `thresh - dirty`, already applied).
    pub wb_thresh: u64,
}

impl DirtyThrottleControl {
    /// `dirty_freerun_ceiling(thresh, bg_thresh)`.
    pub fn freerun(&self) -> u64 {
        (self.thresh + self.bg_thresh) / 2
    }

    /// The setpoint, `(freerun + limit) / 2`: where the position ratio is 1.0.
    pub fn setpoint(&self) -> u64 {
        (self.freerun() + self.limit) / 2
    }

    /// `wb_dirty_exceeded()`: the wb is over its share and the domain over its threshold.
    pub fn dirty_exceeded(&self) -> bool {
        self.wb_dirty > self.wb_thresh && self.dirty > self.thresh
    }
}

/// `pos_ratio_polynom(setpoint, dirty, limit)`: `1.0 + ((setpoint - dirty) / (limit -
/// setpoint))^3` in fixed point, clamped to `[0, 2.0]`.
pub fn pos_ratio_polynom(setpoint: u64, dirty: u64, limit: u64) -> i64 {
    let x = ((setpoint as i64 - dirty as i64) << RATELIMIT_CALC_SHIFT)
        / (limit.saturating_sub(setpoint) | 1) as i64;
    let mut pos_ratio = x;
    pos_ratio = (pos_ratio * x) >> RATELIMIT_CALC_SHIFT;
    pos_ratio = (pos_ratio * x) >> RATELIMIT_CALC_SHIFT;
    pos_ratio += 1 << RATELIMIT_CALC_SHIFT;
    pos_ratio.clamp(0, 2 << RATELIMIT_CALC_SHIFT)
}

/// `wb_position_ratio(dtc)` (without strictlimit): 0 at or over the limit; otherwise the
/// domain's cubic, times the wb's control line `(x_intercept - wb_dirty) / (x_intercept -
/// wb_setpoint)` with `x_intercept = wb_setpoint + span` (`span` about `8 * write_bw` for a
/// single wb; a quarter once `wb_dirty` is past three quarters of the span), times up to 8 in
/// the wb's reserve area (`wb_dirty` under half its threshold). `write_bw` is
/// `wb->avg_write_bandwidth`.
pub fn wb_position_ratio(dtc: &DirtyThrottleControl, write_bw: u64) -> u64 {
    let limit = dtc.limit;
    if dtc.dirty >= limit {
        return 0;
    }
    let setpoint = dtc.setpoint();
    let mut pos_ratio = pos_ratio_polynom(setpoint, dtc.dirty, limit) as u64;
    // (Before 6.14 an inactive wb's share was raised here to an eighth of `limit - dirty`;
    // 6.14+ raises it in __wb_calc_thresh(), which fills `dtc.wb_thresh`.)
    let wb_thresh = dtc.wb_thresh.min(dtc.thresh);
    let x = (wb_thresh << 16) / (dtc.thresh | 1);
    let wb_setpoint = (setpoint * x) >> 16;
    let span = ((dtc.thresh.saturating_sub(wb_thresh) + 8 * write_bw) * x) >> 16;
    let x_intercept = wb_setpoint + span;
    if dtc.wb_dirty < x_intercept - span / 4 {
        pos_ratio = pos_ratio * (x_intercept - dtc.wb_dirty) / ((x_intercept - wb_setpoint) | 1);
    } else {
        pos_ratio /= 4;
    }
    // The wb's reserve area: keep its pool from running dry and the disk idle.
    let x_intercept = wb_thresh / 2;
    if dtc.wb_dirty < x_intercept {
        if dtc.wb_dirty > x_intercept / 8 {
            pos_ratio = pos_ratio * x_intercept / dtc.wb_dirty;
        } else {
            pos_ratio *= 8;
        }
    }
    pos_ratio
}

/// `wb_update_dirty_ratelimit(dtc, dirtied, elapsed)` with the domain's `pos_ratio`: the
/// dirty rate since `wb->dirtied_stamp` over `elapsed` jiffies, the balanced rate
/// `task_ratelimit * write_bw / dirty_rate` (at most `write_bw`), and `dirty_ratelimit`
/// stepped toward it only when `task_ratelimit` agrees on the direction given the dirty
/// pages' side of the setpoint, by an eighth of the gap shrunk further as it closes
/// (`step >> (dirty_ratelimit / (2 * step + 1))`), kept at least 1.
pub(crate) fn wb_update_dirty_ratelimit(
    dtc: &DirtyThrottleControl,
    pos_ratio: u64,
    bw: &mut WbBandwidth,
    dirtied: u64,
    elapsed: u64,
    hz: u64,
) {
    let setpoint = dtc.setpoint();
    let write_bw = bw.avg_write_bandwidth;
    let mut dirty_ratelimit = bw.dirty_ratelimit;
    let dirty_rate = dirtied.saturating_sub(bw.dirtied_stamp) * hz / elapsed.max(1);
    // `+ 1` helps ramp up from tiny values.
    let task_ratelimit = ((dirty_ratelimit * pos_ratio) >> RATELIMIT_CALC_SHIFT) + 1;
    let balanced = (task_ratelimit * write_bw / (dirty_rate | 1)).min(write_bw);
    let mut step = 0;
    if dtc.dirty < setpoint {
        let x = bw
            .balanced_dirty_ratelimit
            .min(balanced)
            .min(task_ratelimit);
        if dirty_ratelimit < x {
            step = x - dirty_ratelimit;
        }
    } else {
        let x = bw
            .balanced_dirty_ratelimit
            .max(balanced)
            .max(task_ratelimit);
        if dirty_ratelimit > x {
            step = dirty_ratelimit - x;
        }
    }
    let shift = dirty_ratelimit / (2 * step + 1);
    step = if shift < 64 {
        (step >> shift).div_ceil(8)
    } else {
        0
    };
    if dirty_ratelimit < balanced {
        dirty_ratelimit += step;
    } else {
        dirty_ratelimit = dirty_ratelimit.saturating_sub(step);
    }
    bw.dirty_ratelimit = dirty_ratelimit.max(1);
    bw.balanced_dirty_ratelimit = balanced;
}

/// `dirty_poll_interval(dirty, thresh)`: about the square root of the room left,
/// `1 << (ilog2(thresh - dirty) >> 1)` pages, 1 at or over the threshold.
pub fn dirty_poll_interval(dirty: u64, thresh: u64) -> u64 {
    if thresh > dirty {
        1 << (ilog2(thresh - dirty) >> 1)
    } else {
        1
    }
}

/// `wb_max_pause(wb, wb_dirty)`: short enough that the wb's dirty pages do not run dry at its
/// write bandwidth (`wb_dirty / (1 + bw / roundup_pow_of_two(1 + HZ / 8)) + 1`, a safety
/// ratio of 8), at most `MAX_PAUSE`.
pub fn wb_max_pause(avg_write_bandwidth: u64, wb_dirty: u64, hz: u64) -> u64 {
    let t = wb_dirty / (1 + avg_write_bandwidth / (1 + hz / 8).next_power_of_two()) + 1;
    t.min(max_pause(hz))
}

/// `wb_min_pause(wb, max_pause, task_ratelimit, dirty_ratelimit, &nr_dirtied_pause)`: the
/// pause under which the dirtier is not put to sleep, and the pages it may dirty before its
/// next `balance_dirty_pages()` (`nr_dirtied_pause`), aiming at 10 ms pauses (more for
/// concurrent dirtiers), at least `DIRTY_POLL_THRESH` pages where `max_pause` allows, and no
/// next pause over `max_pause`. Returns `(min_pause, nr_dirtied_pause)`.
pub fn wb_min_pause(
    avg_write_bandwidth: u64,
    dirty_ratelimit: u64,
    max_pause: u64,
    task_ratelimit: u64,
    hz: u64,
) -> (u64, u64) {
    let hi = ilog2(avg_write_bandwidth);
    let lo = ilog2(dirty_ratelimit);
    let hz_pow2 = hz.next_power_of_two();
    // 10 ms on one dirtier, N * 10 ms on 2^N.
    let mut t = (hz / 100).max(1);
    if hi > lo {
        t += (hi - lo) * (10 * hz) / 1024;
    }
    t = t.min(1 + max_pause / 2);
    let mut pages = dirty_ratelimit * t / hz_pow2;
    if pages < DIRTY_POLL_THRESH {
        t = max_pause;
        pages = dirty_ratelimit * t / hz_pow2;
        if pages > DIRTY_POLL_THRESH {
            pages = DIRTY_POLL_THRESH;
            t = hz * DIRTY_POLL_THRESH / dirty_ratelimit.max(1);
        }
    }
    let pause = hz * pages / (task_ratelimit + 1);
    if pause > max_pause {
        t = max_pause;
        pages = task_ratelimit * t / hz_pow2;
    }
    let min_pause = if pages >= DIRTY_POLL_THRESH {
        1 + t / 2
    } else {
        t
    };
    (min_pause, pages)
}

/// `wb_stat_error()`: the per-CPU counters' worst drift, `nr_cpu_ids * WB_STAT_BATCH` with
/// `WB_STAT_BATCH = 8 * (1 + ilog2(nr_cpu_ids))`. A dirtier paused at the limit stops looping
/// once the wb has no more dirty pages than this.
pub fn wb_stat_error(nr_cpu_ids: u64) -> u64 {
    nr_cpu_ids * 8 * (1 + ilog2(nr_cpu_ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: u64 = 250;

    /// A single wb's domain of 3,120 pages (a 61 MiB memcg's 20%): freerun 2,340, setpoint
    /// 2,730, the wb owning the whole threshold.
    fn memcg_dtc(dirty: u64) -> DirtyThrottleControl {
        DirtyThrottleControl {
            dirty,
            thresh: 3120,
            bg_thresh: 1560,
            limit: 3120,
            wb_dirty: dirty,
            wb_thresh: 3120,
        }
    }

    /// The cubic in the kernel's fixed point: 1.0 at the setpoint, 0.875 halfway to the limit
    /// (896 after `div64_s64()`'s truncation and the arithmetic shifts' flooring), just under
    /// 2.0 at the freerun end (the `| 1` of the divisor), clamped at 2.0 below it, and 5, not
    /// 0, at the limit itself (`wb_position_ratio()` returns 0 there before calling it).
    #[test]
    fn pos_ratio_polynom_is_the_kernels_cubic() {
        assert_eq!(pos_ratio_polynom(3000, 3000, 4000), 1024);
        assert_eq!(pos_ratio_polynom(3000, 3500, 4000), 896);
        assert_eq!(pos_ratio_polynom(3000, 2000, 4000), 2042);
        assert_eq!(pos_ratio_polynom(3000, 1000, 4000), 2048);
        assert_eq!(pos_ratio_polynom(3000, 4000, 4000), 5);
        assert_eq!(pos_ratio_polynom(3000, 9000, 4000), 0);
        // An odd gap is its own divisor (`| 1` changes only even ones): 1,024,000 / 1,001.
        assert_eq!(pos_ratio_polynom(3000, 2000, 4001), 2042);
    }

    /// The wb's control line at its edges, with a write bandwidth of 1 page/s (a span of 7
    /// pages past the wb's setpoint of 2,729): at 2,734 pages it is still the line,
    /// `1024 * (2736 - 2734) / 7`; at 2,735, three quarters of the span, it is a quarter. An odd
    /// threshold (3,121) is its own divisor in the scaling `wb_thresh << 16 / (thresh | 1)`.
    #[test]
    fn wb_position_ratio_at_the_edges_of_the_wb_control_line() {
        let at = |dirty| wb_position_ratio(&memcg_dtc(dirty), 1);
        assert_eq!((at(2734), at(2735)), (292, 256));
        let odd = DirtyThrottleControl {
            thresh: 3121,
            limit: 3121,
            wb_thresh: 3121,
            ..memcg_dtc(2730)
        };
        assert_eq!(odd.setpoint(), 2730);
        assert_eq!(wb_position_ratio(&odd, 25_600), 1023);
    }

    /// `wb_dirty_exceeded()`: strictly over both the wb's share and the domain's threshold.
    #[test]
    fn dirty_exceeded_is_strictly_over_both() {
        let over = |dirty, wb_dirty| {
            DirtyThrottleControl {
                dirty,
                wb_dirty,
                ..memcg_dtc(0)
            }
            .dirty_exceeded()
        };
        assert!(over(3121, 3121));
        assert!(!over(3121, 3120));
        assert!(!over(3120, 3121));
    }

    /// At the setpoint of a single wb the wb's control line is flat (`8 * write_bw` of span:
    /// 1023, the scaling's rounding); it falls with the dirty pages, is 0 at the limit, and is
    /// raised eightfold in the wb's reserve area.
    #[test]
    fn wb_position_ratio_of_a_single_wb() {
        assert_eq!(memcg_dtc(2730).setpoint(), 2730);
        assert_eq!(wb_position_ratio(&memcg_dtc(2730), 25_600), 1023);
        let mut last = u64::MAX;
        for dirty in (2400..3120).step_by(40) {
            let p = wb_position_ratio(&memcg_dtc(dirty), 25_600);
            assert!(p <= last, "falls with the dirty pages: {dirty} -> {p}");
            last = p;
        }
        assert_eq!(wb_position_ratio(&memcg_dtc(3120), 25_600), 0);
        assert_eq!(wb_position_ratio(&memcg_dtc(5000), 25_600), 0);
        // Before its first completion the wb's share is only __wb_calc_thresh()'s floor, an
        // eighth of the room left (5 pages): its setpoint is tiny, so 160 dirty pages are far
        // past it (1,284 instead of the cubic's 1,326).
        let young = DirtyThrottleControl {
            dirty: 160,
            thresh: 204,
            bg_thresh: 102,
            limit: 204,
            wb_dirty: 160,
            wb_thresh: (204 - 160) / 8,
        };
        assert_eq!(pos_ratio_polynom(young.setpoint(), 160, 204), 1326);
        assert_eq!(wb_position_ratio(&young, 25_600), 1284);
        // The reserve area (under half the wb's threshold, 1,560): 1,000 pages scale the line's
        // 1,032 by 1,560 / 1,000; 100, under an eighth of 1,560, by 8.
        let mid = DirtyThrottleControl {
            wb_dirty: 1000,
            ..memcg_dtc(2730)
        };
        assert_eq!(wb_position_ratio(&mid, 25_600), 1032 * 1560 / 1000);
        let reserve = DirtyThrottleControl {
            wb_dirty: 100,
            ..memcg_dtc(2730)
        };
        assert_eq!(wb_position_ratio(&reserve, 25_600), 1037 * 8);
    }

    /// `dirty_ratelimit` follows the balanced rate only when the position agrees: with the dirty
    /// pages over the setpoint and a device at half `INIT_BW`, the first update only records the
    /// balanced rate (the previous one, `INIT_BW`, holds the step at 0); the second steps down
    /// by `ceil((12,799 >> 1) / 8)`.
    #[test]
    fn wb_update_dirty_ratelimit_steps_toward_the_balanced_rate() {
        let dtc = memcg_dtc(2900);
        let mut bw = WbBandwidth {
            avg_write_bandwidth: 12_800,
            ..WbBandwidth::default()
        };
        // 2,560 pages dirtied in 50 jiffies: 12,800 pages/s.
        wb_update_dirty_ratelimit(&dtc, 512, &mut bw, 2560, 50, HZ);
        assert_eq!(
            (bw.dirty_ratelimit, bw.balanced_dirty_ratelimit),
            (25_600, 12_800)
        );
        wb_update_dirty_ratelimit(&dtc, 512, &mut bw, 2560, 50, HZ);
        assert_eq!(
            (bw.dirty_ratelimit, bw.balanced_dirty_ratelimit),
            (24_800, 12_800)
        );
        // Under the setpoint with the rates matched: no step.
        let mut bw = WbBandwidth::default();
        wb_update_dirty_ratelimit(&memcg_dtc(2500), 2048, &mut bw, 10_000, 50, HZ);
        assert_eq!(
            (bw.dirty_ratelimit, bw.balanced_dirty_ratelimit),
            (25_600, 25_600)
        );
        // Under the setpoint, every estimate above dirty_ratelimit (10,000): it rises toward the
        // lowest, task_ratelimit. 5,000 pages in 50 jiffies against 40,000 pages/s of writeback.
        let up_by = |dirty: u64, pos_ratio: u64, dirtied: u64| {
            let mut bw = WbBandwidth {
                avg_write_bandwidth: 40_000,
                dirty_ratelimit: 10_000,
                balanced_dirty_ratelimit: 30_000,
                ..WbBandwidth::default()
            };
            wb_update_dirty_ratelimit(&memcg_dtc(dirty), pos_ratio, &mut bw, dirtied, 50, HZ);
            (bw.dirty_ratelimit, bw.balanced_dirty_ratelimit)
        };
        let up = |dirty, pos_ratio| up_by(dirty, pos_ratio, 5000);
        // task 20,001, balanced 20,001 * 40,000 / 25,001: a step of ceil(10,001 / 8).
        assert_eq!(up(2500, 2048), (11_251, 32_000));
        // An odd dirty rate (25,005) is its own divisor.
        assert_eq!(up_by(2500, 2048, 5001), (11_251, 31_995));
        // A smaller gap (task 12,002) is slowed by its shift: ceil((2,002 >> 2) / 8).
        assert_eq!(up(2500, 1229), (10_063, 19_202));
        // At the setpoint the rate may only fall, and no estimate is under it: no step.
        assert_eq!(up(2730, 2048), (10_000, 32_000));
        // A gap so small that the shift reaches 64 (192 / (2 * 1 + 1)): no step, no overflow.
        let mut bw = WbBandwidth {
            avg_write_bandwidth: 1000,
            dirty_ratelimit: 192,
            balanced_dirty_ratelimit: 1000,
            ..WbBandwidth::default()
        };
        wb_update_dirty_ratelimit(&memcg_dtc(2500), 1024, &mut bw, 100, 50, HZ);
        assert_eq!(
            (bw.dirty_ratelimit, bw.balanced_dirty_ratelimit),
            (192, 385)
        );
    }

    /// The pause bounds at `CONFIG_HZ=250` (`MAX_PAUSE` 50 jiffies): `wb_max_pause()` is the
    /// dirty pages over `1 + bw / 32`, plus one; `wb_min_pause()` aims at 10 ms (2 jiffies, cut
    /// to `1 + max_pause / 2`) and 100 pages at `INIT_BW`, and for a slow rate limit trims the
    /// pages so that the next pause fits in `max_pause`.
    #[test]
    fn the_pause_bounds_are_the_kernels() {
        assert_eq!(max_pause(HZ), 50);
        assert_eq!(max_pause(1000), 200);
        assert_eq!(max_pause(3), 1);
        assert_eq!(wb_max_pause(25_600, 2730, HZ), 4);
        assert_eq!(wb_max_pause(25_600, 160, HZ), 1);
        assert_eq!(wb_max_pause(25_600, 100_000, HZ), 50);
        assert_eq!(wb_min_pause(25_600, 25_600, 4, 25_600, HZ), (2, 200));
        assert_eq!(wb_min_pause(25_600, 25_600, 1, 32_100, HZ), (1, 100));
        assert_eq!(wb_min_pause(25_600, 1000, 4, 500, HZ), (4, 7));
        // 800 dirty pages over 1 + 25,600 / 32 = 801: 0 jiffies, plus one.
        assert_eq!(wb_max_pause(25_600, 800, HZ), 1);
        // More bandwidth than rate limit (2^14 against 2^9: concurrent dirtiers): a longer
        // target, 2 + 5 * 2,500 / 1,024 = 14 jiffies, for 54 pages, a minimum of 1 + 14 / 2.
        assert_eq!(wb_min_pause(25_600, 1000, 50, 500, HZ), (8, 54));
        // Exactly DIRTY_POLL_THRESH pages in the 10 ms target: kept, a minimum of 1 + 2 / 2.
        assert_eq!(wb_min_pause(4096, 4096, 50, 4096, HZ), (2, 32));
        // Fewer: the target grows to max_pause, the pages are capped at 32 and the target is
        // their time at the rate limit, HZ * 32 / 3,000 = 2 jiffies.
        assert_eq!(wb_min_pause(3000, 3000, 50, 3000, HZ), (2, 32));
        // Exactly 32 at max_pause (2,048 * 4 / 256): not capped, the target stays 4.
        assert_eq!(wb_min_pause(2048, 2048, 4, 2048, HZ), (3, 32));
        // A slow rate: 19 pages in max_pause, which is then the minimum itself.
        assert_eq!(wb_min_pause(100, 100, 50, 100, HZ), (50, 19));
        // The next pause exactly max_pause (250 * 200 / 20,001 = 2): the pages are kept.
        assert_eq!(wb_min_pause(25_600, 25_600, 2, 20_000, HZ), (2, 200));
    }

    /// `dirty_poll_interval()`: 1,024 pages on an idle 24 GiB machine (threshold 1,258,291),
    /// 16 with 390 pages of room, 1 at the threshold; `wb_stat_error()` for 1, 2 and 4 CPUs.
    #[test]
    fn the_polling_interval_and_the_counter_error() {
        assert_eq!(dirty_poll_interval(0, 1_258_291), 1024);
        assert_eq!(dirty_poll_interval(2730, 3120), 16);
        assert_eq!(dirty_poll_interval(3120, 3120), 1);
        assert_eq!(dirty_poll_interval(4000, 3120), 1);
        assert_eq!(
            (wb_stat_error(1), wb_stat_error(2), wb_stat_error(4)),
            (8, 32, 96)
        );
    }
}
