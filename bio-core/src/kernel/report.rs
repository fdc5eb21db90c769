//! Kernel splats as values: `BUG()`, `WARN()`, `might_sleep()` and lockdep reports.
//!
//! The simulator never lets a simulated kernel bug take the process down: each one becomes a
//! [`Report`] in the kernel's [`ReportLog`] (and is returned to the caller where the API can), with
//! the kernel's wording and a snapshot of the context it happened in.

use super::{ContextSnapshot, CpuId, Task};
use crate::sync::Mutex;
use std::fmt;

/// What kind of splat a report is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReportKind {
    /// `BUG: sleeping function called from invalid context` (`__might_resched()`).
    SleepInAtomic,
    /// lockdep's `BUG: Invalid wait context` (`check_wait_context()`).
    InvalidWaitContext,
    /// lockdep's `WARNING: inconsistent lock state` (`valid_state()` → `print_usage_bug()`): a
    /// lock class taken both in an IRQ context and with that IRQ enabled.
    InconsistentLockState,
    /// `BUG()`/`BUG_ON()`: the kernel would oops here.
    Bug,
    /// `WARN()`/`WARN_ON()`.
    Warn,
    /// `kernel/hung_task.c`'s `INFO: task comm:pid blocked for more than N seconds.`: a task
    /// waits for something no event can bring (see `kernel/hung_task.rs`).
    HungTask,
    /// biosim's freeze-protection accounting (`fs/super_block.rs`): a superblock level whose
    /// writers never all ended (`sb_start_write()`/`kiocb_start_write()` without the end).
    SbWritersUnbalanced,
    /// lockdep's `WARNING: possible circular locking dependency detected`
    /// (`check_noncircular()` → `print_circular_bug()`): a new dependency closes a cycle in the
    /// lock graph.
    CircularLockDependency,
    /// lockdep's `WARNING: possible recursive locking detected` (`check_deadlock()` →
    /// `print_deadlock_bug()`): a held non-recursive class taken again.
    RecursiveLocking,
    /// lockdep's `WARNING: HARDIRQ-safe -> HARDIRQ-unsafe lock order detected` (or SOFTIRQ,
    /// or their `-READ` forms; `check_irq_usage()` → `print_bad_irq_dependency()`): a new
    /// dependency connects a lock taken in an IRQ to one taken with that IRQ enabled.
    BadIrqDependency,
    /// lockdep's `WARNING: possible irq lock inversion dependency detected`
    /// (`mark_lock_irq()` → `check_usage_forwards()`/`check_usage_backwards()` →
    /// `print_irq_inversion_bug()`): a usage bit set on a lock whose dependencies have the
    /// conflicting one.
    IrqLockInversion,
    /// biosim's check on a timed retry loop (`mm/mempool.rs`): a task retries a timed sleep
    /// forever (`mempool_alloc()`'s `io_schedule_timeout(5*HZ)` loop with nothing to free an
    /// element). The kernel prints nothing (the task switches at every timeout, so the hung-task
    /// detector skips it); the model cannot loop forever, so it says so and returns.
    EndlessRetry,
}

/// One splat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Its kind.
    pub kind: ReportKind,
    /// The CPU it happened on.
    pub cpu: CpuId,
    /// `current` at the time.
    pub task: Task,
    /// The text, worded as the kernel prints it.
    pub message: String,
    /// The execution context.
    pub context: ContextSnapshot,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.message)?;
        write!(
            f,
            "CPU: {} PID: {} Comm: {} [{}]",
            self.cpu.0, self.task.pid, self.task.comm, self.context
        )
    }
}

impl std::error::Error for Report {}

/// The kernel log's splats, in the order they happened.
#[derive(Debug, Default)]
pub struct ReportLog {
    reports: Mutex<Vec<Report>>,
}

impl ReportLog {
    pub(crate) fn push(&self, report: Report) {
        self.reports.lock().push(report);
    }

    /// A copy of every report so far.
    pub fn all(&self) -> Vec<Report> {
        self.reports.lock().clone()
    }

    /// The reports of one kind.
    pub fn of_kind(&self, kind: ReportKind) -> Vec<Report> {
        self.reports
            .lock()
            .iter()
            .filter(|r| r.kind == kind)
            .cloned()
            .collect()
    }

    /// How many reports there are.
    pub fn len(&self) -> usize {
        self.reports.lock().len()
    }

    /// Whether the log is clean.
    pub fn is_empty(&self) -> bool {
        self.reports.lock().is_empty()
    }

    /// Removes and returns every report.
    pub fn take(&self) -> Vec<Report> {
        std::mem::take(&mut *self.reports.lock())
    }
}
