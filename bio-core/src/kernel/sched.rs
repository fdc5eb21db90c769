//! `kernel/sched/core.c`: `might_sleep()` (`__might_sleep()` → `__might_resched()`), the check
//! that a function which may sleep is not called from atomic context.

use super::{Cpu, Report, ReportKind};
use std::fmt;
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
        self.might_resched(&Location::caller(), 0)
    }

    /// [`Cpu::might_sleep`] with an explicit `file:line` (e.g. the kernel site a model stands for).
    pub fn might_sleep_at(&self, site: impl fmt::Display) -> Result<(), Report> {
        self.might_resched(&site, 0)
    }

    /// `rtlock_might_resched()` (PREEMPT_RT `rt_spin_lock()`): `__might_resched()` with
    /// `RTLOCK_RESCHED_OFFSETS`, which expects the current RCU nesting, so taking a sleeping
    /// `spinlock_t`/`local_lock_t` inside `rcu_read_lock()` is not reported.
    pub fn might_resched_rtlock(&self, site: impl fmt::Display) -> Result<(), Report> {
        self.might_resched(&site, self.rcu_preempt_depth())
    }

    /// `__might_resched(file, line, offsets)` with the RCU nesting the caller may hold. The site
    /// is only formatted when there is something to report (this runs on every sleeping call).
    fn might_resched(&self, site: &dyn fmt::Display, rcu_expected: u32) -> Result<(), Report> {
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
