//! `biosim calibrate hotplug`: the hotplug model (`hotplug::Cpuhp`, kernel/cpu.c) checked against
//! the CPU hotplug of the live kernel it runs on, through `/sys/devices/system/cpu/cpuN/online`,
//! `cpuN/hotplug/{state,target,fail}` (`fail_store()`, `state_show()`, ...) and the `cpuhp`
//! tracepoints.
//!
//! A run has three parts:
//! - [`learn`]: a traced clean offline and online of the CPU tell which steps have a startup and a
//!   teardown callback (the functions `cpuhp_enter` prints, the instances `cpuhp_multi_enter`
//!   counts); with the `states` listing this is the model's table (`Cpuhp::from_listing`).
//! - the `fail` writes: every value from -2 to `CPUHP_ONLINE`, with the CPU online and offline,
//!   accepted or refused by `fail_store()`, live and in the model.
//! - the cases: for every state the live `fail_store()` accepts, the failure injected with the CPU
//!   online and then an offline (`down`), or with the CPU offline and then an online (`up`), live
//!   and in the model; [`compare`] sets the callbacks run and the outcome side by side.
//!
//! [`live`] does it on the machine (root; it always leaves the CPU online, `fail` at -1 and
//! tracing off), [`recording`] keeps it in a directory, and a replay runs the model against a
//! recorded directory without touching the kernel.

pub mod compare;
pub mod learn;
pub mod live;
pub mod model;
pub mod recording;

use ::hotplug::Errno;

/// The operation of a case: `echo 0 > cpuN/online` (`device_offline()` → `cpu_down(cpu,
/// CPUHP_OFFLINE)`) or `echo 1 > cpuN/online` (`device_online()` → `cpu_up(cpu, CPUHP_ONLINE)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// Offline: the CPU starts online.
    Down,
    /// Online: the CPU starts offline.
    Up,
}

impl Op {
    /// `down` / `up`, as the recording and the table name it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Down => "down",
            Op::Up => "up",
        }
    }

    /// Parses [`Op::name`].
    pub fn parse(s: &str) -> Option<Op> {
        match s {
            "down" => Some(Op::Down),
            "up" => Some(Op::Up),
            _ => None,
        }
    }

    /// Whether the operation brings the CPU up (its callbacks are startups, its rollback's
    /// teardowns).
    pub fn bringup(self) -> bool {
        self == Op::Up
    }
}

/// One case: `fail` written, then the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Case {
    /// The operation.
    pub op: Op,
    /// The value written to `cpuN/hotplug/fail` first.
    pub fail: i32,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} fail={}", self.op.name(), self.fail)
    }
}

/// A sysfs write's result as the writer sees it: `Ok`, or the errno of `write(2)`.
pub type WriteResult = Result<(), Errno>;

/// What a case leaves, as the writer and sysfs show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The `fail` write (`fail_store()`).
    pub fail_write: WriteResult,
    /// The `online` write: what `cpu_down()`/`cpu_up()` returned.
    pub ret: WriteResult,
    /// `cpuN/hotplug/state` afterwards (`st->state`).
    pub state: i32,
    /// `cpuN/hotplug/target` afterwards (`st->target`).
    pub target: i32,
    /// `cpuN/hotplug/fail` afterwards: -1 if the failure fired (one-shot), the value if still armed.
    pub fail: i32,
    /// `cpuN/online` afterwards: `!dev->offline`, which drivers/base/core.c `device_online()` /
    /// `device_offline()` change only when the operation succeeds.
    pub online: bool,
    /// Whether the CPU is in `/sys/devices/system/cpu/online` (`cpu_online_mask`).
    pub in_mask: bool,
}

/// One callback that ran, as a trace shows it (multi-instance steps collapsed to one entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// The step.
    pub step: i32,
    /// Startup (`true`) or teardown.
    pub bringup: bool,
    /// Part of the rollback (its direction is the opposite of the operation's).
    pub rollback: bool,
    /// The kernel function.
    pub function: String,
    /// How many instances ran (consecutive `cpuhp_multi_enter`s of the step), 1 otherwise.
    pub instances: u32,
}

/// What one case did: the outcome and the callbacks run, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The outcome.
    pub observed: Observed,
    /// The callbacks, injected failures excluded (the kernel runs and traces none there).
    pub callbacks: Vec<Ran>,
    /// Callbacks that returned an error of their own (`cpuhp_exit` with `ret` != 0): `(step, ret)`.
    pub failed: Vec<(i32, i32)>,
}

/// Whether the per-instance counts of multi-instance steps are compared: the model's table has
/// the instances the recording counts (`Cpuhp::from_listing`), and its log one call per instance.
pub const COMPARE_INSTANCES: bool = true;
