//! The ticker thread (`biosim-tick`): `jiffies` in real time at `CONFIG_HZ`.

use super::shared::Shared;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The ticker thread: advances `jiffies` by the jiffies due since it started, `tick_scale`
/// times slower than `CONFIG_HZ` real time, catching up after a late wake-up.
pub(super) fn ticker_main(sh: Arc<Shared>) {
    let hz = u64::from(sh.kernel.config().hz.max(1));
    let jiffy_ns = (1_000_000_000u64 * u64::from(sh.config.tick_scale) / hz).max(1);
    let start = Instant::now();
    let mut done: u64 = 0;
    while !sh.stop.load(Ordering::SeqCst) {
        let next = start + Duration::from_nanos(jiffy_ns.saturating_mul(done + 1));
        let now = Instant::now();
        if now < next {
            sh.ticker_parker.park(next - now);
            continue;
        }
        let due = u64::try_from(now.duration_since(start).as_nanos() / u128::from(jiffy_ns))
            .unwrap_or(u64::MAX);
        let n = due.saturating_sub(done);
        if n > 0 {
            sh.ticks.fetch_add(n, Ordering::Relaxed);
            sh.kernel.advance_jiffies(n);
            done = due;
        }
    }
}
