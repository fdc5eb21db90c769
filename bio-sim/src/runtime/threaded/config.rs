//! How the threaded runtime behaves: [`ThreadedConfig`], its timeouts and its clock.

use super::error::ThreadedError;
use std::time::Duration;

/// How the threaded runtime behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadedConfig {
    /// Slow-down factor of the clock: one jiffy lasts `tick_scale / CONFIG_HZ` seconds of real
    /// time. `1` is real time. Must be at least 1.
    pub tick_scale: u32,
    /// Run the ticker thread. Without it `jiffies` only moves when the caller calls
    /// `Kernel::advance_jiffies` (which wakes the CPUs whose timers became due).
    pub ticker: bool,
    /// Longest an idle CPU thread sleeps without being woken (a safety net: every runnable thing
    /// wakes its CPU through the kernel's waker). Must not be zero.
    pub idle_timeout: Duration,
    /// How long `Runtime::wait_until` waits for its condition before returning `false` (the
    /// kernel then reports a deadlock).
    pub wait_timeout: Duration,
    /// How long the hotplug controller waits for one step to be executed on its CPU's thread.
    pub hotplug_step_timeout: Duration,
    /// How long `ThreadedRuntime::shutdown` waits for the machine to quiesce before stopping it.
    pub shutdown_quiesce_timeout: Duration,
    /// How long shutdown (and `Drop`) waits for the threads to exit; a thread still running then
    /// (stuck in a kernel function that never returns) is detached and reported.
    pub join_timeout: Duration,
    /// Record every work execution (worker and rescuer) for `ThreadedRuntime::take_work_log`.
    pub record_work: bool,
    /// Capture the kernel's tracepoints on every CPU thread for `ThreadedRuntime::ftrace`
    /// (timestamps: monotonic time since the runtime started).
    pub capture_trace: bool,
}

impl Default for ThreadedConfig {
    fn default() -> Self {
        Self {
            tick_scale: 1,
            ticker: true,
            idle_timeout: Duration::from_millis(100),
            wait_timeout: Duration::from_secs(10),
            hotplug_step_timeout: Duration::from_secs(30),
            shutdown_quiesce_timeout: Duration::from_secs(2),
            join_timeout: Duration::from_secs(5),
            record_work: false,
            capture_trace: false,
        }
    }
}

impl ThreadedConfig {
    /// Refuses a config the runtime cannot run with (checked before anything is started).
    pub(super) fn validate(&self) -> Result<(), ThreadedError> {
        if self.tick_scale == 0 {
            return Err(ThreadedError::Config(
                "tick_scale must be at least 1 (1 = real time)",
            ));
        }
        if self.idle_timeout.is_zero() {
            return Err(ThreadedError::Config(
                "idle_timeout must not be zero (an idle CPU would spin)",
            ));
        }
        Ok(())
    }
}
