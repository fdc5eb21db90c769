//! `jiffies` and its conversions (`include/linux/jiffies.h`, `kernel/time/time.c`).

use crate::kernel::Kernel;
use crate::sync::atomic::Ordering;

impl Kernel {
    /// `jiffies`: ticks since boot at `CONFIG_HZ`.
    pub fn jiffies(&self) -> u64 {
        self.jiffies.load(Ordering::Acquire)
    }

    /// Advances `jiffies` by `n` ticks (`do_timer()` on the timekeeping CPU). The runtime calls
    /// it; timers that became due fire when each CPU next runs its timer softirq.
    pub fn advance_jiffies(&self, n: u64) -> u64 {
        let now = self.jiffies.fetch_add(n, Ordering::AcqRel) + n;
        for cpu in self.online_cpus() {
            if self.timers.due(cpu, now) {
                self.wake(cpu);
            }
        }
        now
    }
}

/// `msecs_to_jiffies()`, rounding up as the kernel does.
pub fn msecs_to_jiffies(ms: u64, hz: u32) -> u64 {
    (ms * u64::from(hz)).div_ceil(1000)
}

/// `jiffies_to_msecs()`.
pub fn jiffies_to_msecs(j: u64, hz: u32) -> u64 {
    j * 1000 / u64::from(hz)
}

/// `jiffies_to_usecs()`.
pub fn jiffies_to_usecs(j: u64, hz: u32) -> u64 {
    j * 1_000_000 / u64::from(hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_up_like_the_kernel() {
        assert_eq!(msecs_to_jiffies(1, 250), 1);
        assert_eq!(msecs_to_jiffies(4, 250), 1);
        assert_eq!(msecs_to_jiffies(5, 250), 2);
        assert_eq!(msecs_to_jiffies(1000, 1000), 1000);
        assert_eq!(jiffies_to_msecs(1, 250), 4);
        assert_eq!(jiffies_to_msecs(1, 100), 10);
    }
}
