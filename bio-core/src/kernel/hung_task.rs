//! `kernel/hung_task.c`: the hung-task detector, in simulated terms.
//!
//! The kernel's `khungtaskd` (`watchdog()`) wakes every `hung_task_check_interval_secs` (0: the
//! timeout; never more than the timeout) and runs `check_hung_task()` on each task in
//! `TASK_UNINTERRUPTIBLE`: a task whose switch count (`nvcsw + nivcsw`) changed since the last
//! check only gets `last_switch_count`/`last_switch_time` updated; one whose count did not change
//! for `hung_task_timeout_secs` is reported, with the time since `last_switch_time`.
//!
//! The model has a sharper criterion for "never switches again": a task waiting in
//! [`Cpu::wait_until`] whose runtime gave up because no event it could run makes the condition
//! true (or, without a runtime, nothing could) is blocked forever. khungtaskd's first check after
//! it slept records `last_switch_time`; the first check at least the timeout later reports it
//! ([`HungTask::reported_after_secs`]). A task in a timed sleep
//! ([`Cpu::wait_until_timeout`], `io_schedule_timeout()`) that retries forever switches at every
//! timeout, so khungtaskd sees its count change and never reports it, unless the checks span the
//! timeout without a switch in between ([`check_hung_task_timed`]). Only a context that may sleep
//! counts (an atomic one already got its might_sleep() report and its wait returns at once).
//!
//! The detector is per [`Kernel`](super::Kernel) and off by default
//! (`hung_task_timeout_secs` = 0, the kernel's "disabled"): the existing waiters
//! (`flush_work()`, `timer_delete_sync()`, `blk_mq_get_tag()`) already report their own
//! give-ups, and a unit test without a runtime gives up on every wait. A scenario or test turns
//! it on with [`Kernel::set_hung_task_timeout_secs`] (the kernel's default
//! `CONFIG_DEFAULT_HUNG_TASK_TIMEOUT` is 120). `hung_task_warnings` (default 10) caps the
//! reports as the kernel's sysctl does.
//!
//! The report ([`ReportKind::HungTask`]) follows `check_hung_task()`'s printk: the banner with
//! the elapsed `(jiffies - t->last_switch_time) / HZ`, the taint/release line, the `echo 0` line,
//! `sched_show_task()`'s first line (`task_flags` is `p->flags` as far as the model keeps it: the
//! `PF_MEMALLOC_*` scope bits); left out are the stack trace and `debug_show_all_locks()` (the
//! held locks are listed instead, in lockdep's `print_lock()` form), and biosim adds what the
//! task waits on (the `what` of `wait_until`).

use super::{Cpu, Kernel, ReportKind};
use crate::sync::untracked::{AtomicU64, Ordering};

/// `UTS_RELEASE` biosim prints where the kernel prints its release.
pub const UTS_RELEASE: &str = "6.18.0-biosim";

/// `read_task_thread_flags()` as `sched_show_task()` prints it for a sleeping task: the model
/// keeps no thread flags; x86-64's `_TIF_NEED_FPU_LOAD` (bit 14) is what a task that slept in
/// the kernel typically shows.
const TIF_FLAGS: u32 = 1 << 14;

/// The detector's sysctls.
#[derive(Debug)]
pub struct HungTask {
    /// `sysctl_hung_task_timeout_secs` (0: off).
    timeout_secs: AtomicU64,
    /// `sysctl_hung_task_check_interval_secs` (0: the timeout).
    check_interval_secs: AtomicU64,
    /// `sysctl_hung_task_warnings`: reports left (the kernel's default 10).
    warnings: AtomicU64,
}

impl Default for HungTask {
    fn default() -> Self {
        Self {
            timeout_secs: AtomicU64::new(0),
            check_interval_secs: AtomicU64::new(0),
            warnings: AtomicU64::new(10),
        }
    }
}

impl HungTask {
    /// khungtaskd's period as `watchdog()` computes it: `hung_task_check_interval_secs`, 0
    /// meaning the timeout, capped at the timeout.
    fn interval_secs(&self, timeout: u64) -> u64 {
        match self.check_interval_secs.load(Ordering::Relaxed) {
            0 => timeout,
            i => i.min(timeout),
        }
    }

    /// The `N` of "blocked for more than N seconds" in khungtaskd's first report of a task that
    /// never switches again: `last_switch_time` is the check after it slept, the report the
    /// first check at least `timeout` later, so `N` is the timeout rounded up to whole check
    /// intervals (the timeout itself with the default interval). `None` while the detector is off.
    pub fn reported_after_secs(&self) -> Option<u64> {
        let timeout = self.timeout_secs.load(Ordering::Relaxed);
        if timeout == 0 {
            return None;
        }
        let interval = self.interval_secs(timeout);
        Some(timeout.div_ceil(interval) * interval)
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

    /// `echo N > /proc/sys/kernel/hung_task_check_interval_secs` (0: check every timeout).
    pub fn set_hung_task_check_interval_secs(&self, secs: u64) {
        self.hung_task
            .check_interval_secs
            .store(secs, Ordering::Relaxed);
    }

    /// The hung-task detector's sysctls.
    pub fn hung_task(&self) -> &HungTask {
        &self.hung_task
    }
}

/// `check_hung_task()` for `cx`'s task, which waits on `what` and can never be woken: reports
/// it (once per `hung_task_warnings`) if the detector is on. Returns whether it reported.
pub(crate) fn check_hung_task(cx: &Cpu, what: &str) -> bool {
    let ht = &cx.kernel().hung_task;
    // Twin: `bug-hung-task-detector-off` never reports.
    if cfg!(feature = "bug-hung-task-detector-off") || !cx.may_sleep() {
        return false;
    }
    let Some(elapsed) = ht.reported_after_secs() else {
        return false;
    };
    report(cx, what, elapsed, "no event can make it true")
}

/// `check_hung_task()` for `cx`'s task, which sleeps in timed waits of `timeout` jiffies on
/// `what` and retries forever (`mempool_alloc()`'s `io_schedule_timeout(5*HZ)` loop): every
/// timeout switches it, so khungtaskd, which only reports a task whose switch count stayed the
/// same for `hung_task_timeout_secs`, sees it only if that span, rounded up to its check
/// intervals, is shorter than the sleep. Returns whether it reported.
pub(crate) fn check_hung_task_timed(cx: &Cpu, what: &str, timeout: u64) -> bool {
    let ht = &cx.kernel().hung_task;
    if cfg!(feature = "bug-hung-task-detector-off") || !cx.may_sleep() {
        return false;
    }
    let Some(elapsed) = ht.reported_after_secs() else {
        return false;
    };
    if elapsed * u64::from(cx.config().hz) >= timeout {
        return false;
    }
    let note = format!("no event can make it true, it wakes every {timeout} jiffies and retries");
    report(cx, what, elapsed, &note)
}

/// Prints `check_hung_task()`'s report for `cx`'s task, `elapsed` seconds after its last switch;
/// `note` ends biosim's line saying why the wait never ends.
fn report(cx: &Cpu, what: &str, elapsed: u64, note: &str) -> bool {
    let ht = &cx.kernel().hung_task;
    if ht
        .warnings
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_err()
    {
        return false;
    }
    let task = cx.current();
    // sched_show_task(): "task:%-15.15s state:%c" then " stack:%-5lu pid:%-5d tgid:%-5d
    // ppid:%-6d task_flags:0x%04x flags:0x%08lx".
    let mut msg = format!(
        "INFO: task {}:{} blocked for more than {elapsed} seconds.\n      Not tainted {UTS_RELEASE} #1\n\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message.\ntask:{:<15.15} state:D stack:0     pid:{:<5} tgid:{:<5} ppid:{:<6} task_flags:0x{:04x} flags:0x{:08x}\nbiosim: waiting in {what}: {note}",
        task.comm,
        task.pid,
        task.comm,
        task.pid,
        task.pid,
        2,
        cx.task_state().pf_flags.get(),
        TIF_FLAGS,
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

#[cfg(test)]
mod tests {
    use crate::kernel::task::{memalloc_noio_restore, memalloc_noio_save};
    use crate::kernel::{CpuId, KernelConfig, ReportKind};
    use crate::Kernel;

    #[test]
    #[cfg_attr(
        feature = "bug-hung-task-detector-off",
        should_panic(expected = "one report")
    )]
    fn the_banner_prints_the_elapsed_time_and_sched_show_task_its_6_18_line() {
        // khungtaskd checks every 50 s: the first check after the task slept records its
        // last_switch_time, the third one after that (150 s >= 120 s) reports it.
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        k.set_hung_task_timeout_secs(120);
        k.set_hung_task_check_interval_secs(50);
        assert_eq!(k.hung_task().reported_after_secs(), Some(150));
        let cx = k.cpu(CpuId(0)).unwrap();
        let noio = memalloc_noio_save(&cx);
        assert!(!cx.wait_until("test: never", &|| false));
        memalloc_noio_restore(&cx, noio);
        let hung = k.reports().of_kind(ReportKind::HungTask);
        assert_eq!(hung.len(), 1, "one report");
        println!("{}", hung[0]);
        let lines: Vec<&str> = hung[0].message.lines().collect();
        assert_eq!(
            lines[0],
            "INFO: task biosim/0:1000 blocked for more than 150 seconds."
        );
        assert_eq!(
            lines[3],
            "task:biosim/0        state:D stack:0     pid:1000  tgid:1000  ppid:2      task_flags:0x80000 flags:0x00004000"
        );
    }

    #[test]
    fn the_check_interval_is_capped_at_the_timeout_and_off_is_none() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        assert_eq!(k.hung_task().reported_after_secs(), None);
        k.set_hung_task_timeout_secs(120);
        assert_eq!(k.hung_task().reported_after_secs(), Some(120));
        k.set_hung_task_check_interval_secs(500);
        assert_eq!(k.hung_task().reported_after_secs(), Some(120));
        k.set_hung_task_check_interval_secs(7);
        assert_eq!(k.hung_task().reported_after_secs(), Some(126));
    }
}
