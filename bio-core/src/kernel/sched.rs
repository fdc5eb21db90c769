//! `kernel/sched/core.c`: `might_sleep()` (`__might_sleep()` → `__might_resched()`), the check
//! that a function which may sleep is not called from atomic context.

use super::{Cpu, Report, ReportKind};
use std::panic::Location;

impl Cpu {
    /// `might_sleep()`: with `CONFIG_DEBUG_ATOMIC_SLEEP`, reports "BUG: sleeping function called
    /// from invalid context" when `preempt_count()` is non-zero, IRQs are disabled or an RCU
    /// read-side section is open. The report names the caller's source location the way the
    /// kernel names `__FILE__:__LINE__`.
    ///
    /// Without `CONFIG_DEBUG_ATOMIC_SLEEP` it checks nothing, as in the kernel; the oracle's
    /// ground truth ([`Cpu::may_sleep`]) still knows.
    #[track_caller]
    pub fn might_sleep(&self) -> Result<(), Report> {
        self.might_sleep_at(Location::caller().to_string())
    }

    /// [`Cpu::might_sleep`] with an explicit `file:line` (e.g. the kernel site a model stands for).
    pub fn might_sleep_at(&self, site: impl Into<String>) -> Result<(), Report> {
        self.might_resched(site.into(), 0)
    }

    /// `rtlock_might_resched()` (PREEMPT_RT `rt_spin_lock()`): `__might_resched()` with
    /// `RTLOCK_RESCHED_OFFSETS`, which expects the current RCU nesting, so taking a sleeping
    /// `spinlock_t`/`local_lock_t` inside `rcu_read_lock()` is not reported.
    pub fn might_resched_rtlock(&self, site: &str) -> Result<(), Report> {
        self.might_resched(site.to_owned(), self.rcu_preempt_depth())
    }

    /// `__might_resched(file, line, offsets)` with the RCU nesting the caller may hold.
    fn might_resched(&self, site: String, rcu_expected: u32) -> Result<(), Report> {
        if !self.config().debug_atomic_sleep {
            return Ok(());
        }
        let pc = self.preempt_count();
        let irqs = self.irqs_disabled();
        let rcu = self.rcu_preempt_depth();
        if pc == 0 && !irqs && rcu == rcu_expected {
            return Ok(());
        }
        let task = self.current();
        let message = format!(
            "BUG: sleeping function called from invalid context at {}\n\
             in_atomic(): {}, irqs_disabled(): {}, non_block: 0, pid: {}, name: {}\n\
             preempt_count: {:x}, expected: 0\n\
             RCU nest depth: {}, expected: {}",
            site,
            self.in_atomic() as u8,
            irqs as u8,
            task.pid,
            task.comm,
            pc,
            rcu,
            rcu_expected
        );
        Err(self.report(ReportKind::SleepInAtomic, message))
    }
}
