//! `kernel/sched/core.c`: `might_sleep()` (`__might_sleep()` → `__might_resched()`), the check
//! that a function which may sleep is not called from atomic context; and the scheduler's
//! tracepoints `sched_switch` (`__schedule()`) and `sched_wakeup` (`try_to_wake_up()`).

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

/// The state `sched_switch` prints for the task leaving the CPU (`prev_state`: the
/// `TASK_REPORT` letter of `__trace_sched_switch_state()`, `+` when it was preempted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PrevState {
    /// `TASK_RUNNING`, switched out voluntarily while runnable (the idle task): `R`.
    Running,
    /// Preempted while running: `R+` (`TASK_REPORT_MAX`).
    Preempted,
    /// `TASK_INTERRUPTIBLE`: `S`.
    Sleeping,
    /// `TASK_UNINTERRUPTIBLE`: `D`.
    DiskSleep,
    /// `TASK_IDLE` (`TASK_UNINTERRUPTIBLE | TASK_NOLOAD`, reported as `TASK_REPORT_IDLE`): `I`, a
    /// kworker waiting for work in `worker_thread()`.
    Idle,
}

impl PrevState {
    /// The letters `sched_switch`'s `%s%s` prints.
    pub fn letters(self) -> &'static str {
        match self {
            Self::Running => "R",
            Self::Preempted => "R+",
            Self::Sleeping => "S",
            Self::DiskSleep => "D",
            Self::Idle => "I",
        }
    }
}

impl Cpu {
    /// `trace_sched_switch()` in `__schedule()`: `current` leaves the CPU in `prev_state` and
    /// `next` runs; the caller switches `current` afterwards. The line is traced by the task
    /// leaving, with IRQs off and the runqueue lock held inside `schedule()`'s
    /// `preempt_disable()` (`d..2.` from a task; the idle task enters through
    /// `schedule_idle()`, whose only extra count is the lock), and with `TIF_NEED_RESCHED`
    /// already cleared.
    pub fn trace_sched_switch(&self, next: &super::Task, prev_state: PrevState) {
        if !self.tracepoints_enabled() || !tracing::enabled!(target: "sched", tracing::Level::TRACE)
        {
            return;
        }
        let prev = self.current();
        let flags = self.sched_switch_trace_flags();
        crate::ktrace!(
            self,
            target: "sched",
            "sched_switch",
            flags: flags,
            "prev_comm={} prev_pid={} prev_prio={} prev_state={} ==> next_comm={} next_pid={} next_prio={}",
            prev.comm,
            prev.pid,
            prev.prio(),
            prev_state.letters(),
            next.comm,
            next.pid,
            next.prio()
        );
    }

    /// The context column of [`Cpu::trace_sched_switch`], `current` being the task leaving: for
    /// whoever traces a switch on this CPU (a runtime's own).
    pub fn sched_switch_trace_flags(&self) -> super::TraceFlags {
        let resched = self.need_resched();
        self.need_resched.set(false);
        let idle = self.current().is_idle();
        let flags = self.trace_flags_under(true, if idle { 1 } else { 2 });
        self.need_resched.set(resched);
        flags
    }

    /// The context column of [`Cpu::trace_sched_wakeup`] with `extra_depth` more locks held:
    /// `p->pi_lock` and the runqueue lock of `try_to_wake_up()` on top, IRQs off.
    pub fn sched_wakeup_trace_flags(&self, extra_depth: u32) -> super::TraceFlags {
        self.trace_flags_under(true, extra_depth + 2)
    }

    /// `trace_sched_wakeup()` in `ttwu_do_activate()`: `task` becomes runnable on `target_cpu`,
    /// traced by the waker with IRQs off, `p->pi_lock` and the runqueue lock held on top of the
    /// `extra_depth` locks the waker's own path holds (e.g. `pool->lock` in `kick_pool()`).
    pub fn trace_sched_wakeup(
        &self,
        task: &super::Task,
        target_cpu: super::CpuId,
        extra_depth: u32,
    ) {
        crate::ktrace!(
            self,
            target: "sched",
            "sched_wakeup",
            flags: self.sched_wakeup_trace_flags(extra_depth),
            "comm={} pid={} prio={} target_cpu={:03}",
            task.comm,
            task.pid,
            task.prio(),
            target_cpu.0
        );
    }
}
