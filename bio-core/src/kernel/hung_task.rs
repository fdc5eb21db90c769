//! `kernel/hung_task.c`: the hung-task detector, in simulated terms.
//!
//! The kernel's `khungtaskd` wakes every `hung_task_timeout_secs` and reports each task in
//! `TASK_UNINTERRUPTIBLE` that has not been scheduled since (`check_hung_task()`). The model has
//! a sharper criterion: a task waiting in [`Cpu::wait_until`] whose runtime gave up because no
//! event it could run makes the condition true (or, without a runtime, nothing could) is blocked
//! forever, so "more than `hung_task_timeout_secs`" holds whatever the timeout. Only a context
//! that may sleep counts (an atomic one already got its might_sleep() report and its wait
//! returns at once).
//!
//! The detector is per [`Kernel`](super::Kernel) and off by default
//! (`hung_task_timeout_secs` = 0, the kernel's "disabled"): the existing waiters
//! (`flush_work()`, `timer_delete_sync()`, `blk_mq_get_tag()`) already report their own
//! give-ups, and a unit test without a runtime gives up on every wait. A scenario or test turns
//! it on with [`Kernel::set_hung_task_timeout_secs`] (the kernel's default
//! `CONFIG_DEFAULT_HUNG_TASK_TIMEOUT` is 120). `hung_task_warnings` (default 10) caps the
//! reports as the kernel's sysctl does.
//!
//! The report ([`ReportKind::HungTask`]) follows `check_hung_task()`'s printk: the banner, the
//! taint/release line, the `echo 0` line, `sched_show_task()`'s first line; left out are the
//! stack trace and `debug_show_all_locks()` (the held locks are listed instead, in lockdep's
//! `print_lock()` form), and biosim adds what the task waits on (the `what` of `wait_until`).

use super::{Cpu, Kernel, ReportKind};
use crate::sync::untracked::{AtomicU64, Ordering};

/// `UTS_RELEASE` biosim prints where the kernel prints its release.
pub const UTS_RELEASE: &str = "6.18.0-biosim";

/// The detector's sysctls.
#[derive(Debug)]
pub struct HungTask {
    /// `sysctl_hung_task_timeout_secs` (0: off).
    timeout_secs: AtomicU64,
    /// `sysctl_hung_task_warnings`: reports left (the kernel's default 10).
    warnings: AtomicU64,
}

impl Default for HungTask {
    fn default() -> Self {
        Self {
            timeout_secs: AtomicU64::new(0),
            warnings: AtomicU64::new(10),
        }
    }
}

impl Kernel {
    /// `echo N > /proc/sys/kernel/hung_task_timeout_secs` (0 turns the detector off).
    pub fn set_hung_task_timeout_secs(&self, secs: u64) {
        self.hung_task.timeout_secs.store(secs, Ordering::Relaxed);
    }

    /// `/proc/sys/kernel/hung_task_timeout_secs`.
    pub fn hung_task_timeout_secs(&self) -> u64 {
        self.hung_task.timeout_secs.load(Ordering::Relaxed)
    }
}

/// `check_hung_task()` for `cx`'s task, which waits on `what` and can never be woken: reports
/// it (once per `hung_task_warnings`) if the detector is on. Returns whether it reported.
pub(crate) fn check_hung_task(cx: &Cpu, what: &str) -> bool {
    let ht = &cx.kernel().hung_task;
    let timeout = ht.timeout_secs.load(Ordering::Relaxed);
    // Twin: `bug-hung-task-detector-off` never reports.
    if timeout == 0 || !cx.may_sleep() || cfg!(feature = "bug-hung-task-detector-off") {
        return false;
    }
    if ht
        .warnings
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_err()
    {
        return false;
    }
    let task = cx.current();
    let mut msg = format!(
        "INFO: task {}:{} blocked for more than {timeout} seconds.\n      Not tainted {UTS_RELEASE} #1\n\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message.\ntask:{:<15} state:D stack:0     pid:{:<5} tgid:{:<5} ppid:2      task_flags:0x{:x} flags:0x00004000\nbiosim: waiting in {what}: no event can make it true",
        task.comm,
        task.pid,
        task.comm,
        task.pid,
        task.pid,
        cx.task_state().pf_flags.get(),
    );
    let held = cx.held_locks();
    if !held.is_empty() {
        msg.push_str(&format!(
            "\n{} lock(s) held by {}/{}:",
            held.len(),
            task.comm,
            task.pid
        ));
        for (i, h) in held.iter().enumerate() {
            msg.push_str(&format!("\n #{i}: {h}"));
        }
    }
    cx.report(ReportKind::HungTask, msg);
    true
}
