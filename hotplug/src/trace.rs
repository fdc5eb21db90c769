//! What the machine reports while it runs: the `cpuhp:cpuhp_enter` /
//! `cpuhp:cpuhp_exit` tracepoints of `include/trace/events/cpuhp.h`, the
//! kernel's WARN/BUG splats of kernel/cpu.c as values ([`Warning`]), and an
//! in-memory log ([`LogRecord`]) that tests and docs read back.
//!
//! # `tracing` scheme
//!
//! Every event uses the `tracing` target `"cpuhp"`; its message is the
//! kernel's tracepoint name, or a `biosim_` name for what no kernel
//! tracepoint reports:
//!
//! | message | level | fields |
//! |---|---|---|
//! | `cpuhp_enter` | TRACE | `cpu`, `target`, `step`, `callback` (name + direction), `rollback`, `runs_on` |
//! | `cpuhp_exit` | TRACE | `cpu`, `state` (after the call), `step`, `ret` (0 or -errno), `injected` |
//! | `biosim_cpuhp_op` | DEBUG | `cpu`, `op` (`cpu_up`/`cpu_down`), `from`/`target` or `ret` |
//! | `biosim_cpuhp_warn` | WARN | `cpu`, the kernel's message |
//!
//! so `RUST_LOG=cpuhp=trace` shows every callback in kernel order.

use std::fmt;
use std::sync::Arc;

use crate::errno::Errno;
use crate::invoke::{Invocation, Origin, RunsOn};
use crate::state::{CpuId, StateId};

/// A kernel WARN/BUG (or a `pr_warn`) that the model records instead of
/// crashing. Read them with [`crate::Cpuhp::warnings`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// A callback failed while the machine was rolling back
    /// (`WARN_ON_ONCE(st->rollback)` in `cpuhp_thread_fun()`,
    /// `WARN_ON(cpuhp_invoke_callback_range(...))` in `cpuhp_up_callbacks()` /
    /// `cpuhp_down_callbacks()`). The rollback stops; the CPU stays in the
    /// intermediate state `state_left`.
    RollbackFailed {
        /// The CPU.
        cpu: CpuId,
        /// The step whose callback failed.
        state: StateId,
        /// Its name.
        name: Arc<str>,
        /// Direction of the failed callback.
        bringup: bool,
        /// What it returned.
        errno: Errno,
        /// `st->state` after the failure.
        state_left: StateId,
    },
    /// A STARTING/DYING callback failed. They "must not fail": during
    /// `cpu_up()`/`cpu_down()` the kernel `pr_warn()`s
    /// "CPU %u %s state %s (%d) failed (%d)" and carries on
    /// (`cpuhp_invoke_callback_range_nofail()`); for a single invocation from
    /// `cpuhp_setup_state()` it is `WARN_ON_ONCE(st->result)` and the error is
    /// still returned.
    AtomicCallbackFailed {
        /// The CPU.
        cpu: CpuId,
        /// The STARTING/DYING step.
        state: StateId,
        /// Its name.
        name: Arc<str>,
        /// Startup (STARTING) or teardown (DYING).
        bringup: bool,
        /// What it returned.
        errno: Errno,
    },
    /// `WARN(1, "DEAD callback error for CPU%d")` in `_cpu_down()`: a BP-side
    /// teardown failed below `CPUHP_TEARDOWN_CPU`, the CPU could not be
    /// brought back to where the offline started.
    DeadCallbackError {
        /// The CPU.
        cpu: CpuId,
        /// `st->state` the CPU was left in.
        state_left: StateId,
    },
    /// `BUG_ON(ret && !bringup)` in `cpuhp_issue_call()`: a teardown invoked by
    /// `cpuhp_remove_state()` or `cpuhp_rollback_install()` failed. The kernel
    /// would oops; the model records it and treats the teardown as done.
    TeardownBug {
        /// The CPU.
        cpu: CpuId,
        /// The step.
        state: StateId,
        /// Its name.
        name: Arc<str>,
        /// What the teardown returned.
        errno: Errno,
        /// Remove or setup rollback.
        origin: Origin,
    },
    /// `WARN(1, "No more dynamic states available for CPU hotplug")` in
    /// `cpuhp_reserve_state()`.
    NoDynamicStates {
        /// `"CPUHP_AP_ONLINE_DYN"` or `"CPUHP_BP_PREPARE_DYN"`.
        range: &'static str,
    },
    /// `WARN_ON(st->target != target)` in `target_store()` when the CPU already
    /// is at the requested state but its target differs.
    TargetMismatch {
        /// The CPU.
        cpu: CpuId,
        /// The stale `st->target`.
        was: StateId,
        /// The state written.
        target: StateId,
    },
    /// `WARN(--cpu_hotplug_disabled < 0, "Unbalanced cpu hotplug enable")` in
    /// `cpu_hotplug_enable()`.
    UnbalancedHotplugEnable,
}

impl Warning {
    /// The CPU the warning is about, if any.
    pub fn cpu(&self) -> Option<CpuId> {
        match self {
            Warning::RollbackFailed { cpu, .. }
            | Warning::AtomicCallbackFailed { cpu, .. }
            | Warning::DeadCallbackError { cpu, .. }
            | Warning::TeardownBug { cpu, .. }
            | Warning::TargetMismatch { cpu, .. } => Some(*cpu),
            Warning::NoDynamicStates { .. } | Warning::UnbalancedHotplugEnable => None,
        }
    }
}

fn dir(bringup: bool) -> &'static str {
    if bringup {
        "UP"
    } else {
        "DOWN"
    }
}

impl fmt::Display for Warning {
    /// The kernel's message, prefixed with the kind of splat.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::RollbackFailed {
                cpu,
                state,
                name,
                bringup,
                errno,
                state_left,
            } => write!(
                f,
                "WARNING: rollback failed: CPU {} {} state {} ({}) failed ({}); left at state {}",
                cpu.0,
                dir(*bringup),
                name,
                state,
                errno.as_neg_i32(),
                state_left
            ),
            Warning::AtomicCallbackFailed {
                cpu,
                state,
                name,
                bringup,
                errno,
            } => write!(
                f,
                "CPU {} {} state {} ({}) failed ({})",
                cpu.0,
                dir(*bringup),
                name,
                state,
                errno.as_neg_i32()
            ),
            Warning::DeadCallbackError { cpu, state_left } => write!(
                f,
                "WARNING: DEAD callback error for CPU{} (left at state {})",
                cpu.0, state_left
            ),
            Warning::TeardownBug {
                cpu,
                state,
                name,
                errno,
                origin,
            } => write!(
                f,
                "kernel BUG in cpuhp_issue_call: teardown {} ({}) on CPU{} failed ({}) during {:?}",
                name,
                state,
                cpu.0,
                errno.as_neg_i32(),
                origin
            ),
            Warning::NoDynamicStates { range } => write!(
                f,
                "WARNING: No more dynamic states available for CPU hotplug ({range})"
            ),
            Warning::TargetMismatch { cpu, was, target } => write!(
                f,
                "WARNING: target_store: CPU{} st->target {} != {}",
                cpu.0, was, target
            ),
            Warning::UnbalancedHotplugEnable => {
                f.write_str("WARNING: Unbalanced cpu hotplug enable")
            }
        }
    }
}

/// One entry of the in-memory log ([`crate::Cpuhp::log`]), in the order
/// things happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRecord {
    /// A `cpu_up()`/`cpu_down()` began.
    OpStart {
        /// The CPU.
        cpu: CpuId,
        /// `"cpu_up"` or `"cpu_down"`.
        op: &'static str,
        /// `st->state` at the start.
        from: StateId,
        /// The requested target.
        target: StateId,
    },
    /// A callback ran (or an injected failure stood in for it).
    Call {
        /// What ran.
        invocation: Invocation,
        /// What it returned.
        result: Result<(), Errno>,
        /// `-EAGAIN` from `hotplug/fail`, the callback was not run.
        injected: bool,
        /// `st->state` once the result was applied (as `cpuhp_exit` reports).
        state_after: StateId,
    },
    /// The CPU joined or left `cpu_online_mask`.
    Online {
        /// The CPU.
        cpu: CpuId,
        /// New membership.
        online: bool,
    },
    /// A WARN/BUG was recorded.
    Warning(Warning),
    /// A `cpu_up()`/`cpu_down()` finished.
    OpEnd {
        /// The CPU.
        cpu: CpuId,
        /// `"cpu_up"` or `"cpu_down"`.
        op: &'static str,
        /// The operation's return value.
        result: Result<(), Errno>,
        /// `st->state` at the end.
        state: StateId,
    },
}

fn ret(result: &Result<(), Errno>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => e.as_neg_i32(),
    }
}

impl fmt::Display for LogRecord {
    /// ftrace-style text: the kernel's `cpuhp_enter`/`cpuhp_exit` formats
    /// (`" cpu: %04u target: %3d step: %3d (%ps)"`,
    /// `" cpu: %04u  state: %3d step: %3d ret: %d"`), with the callback shown as
    /// the kernel function for core steps (`takedown_cpu`) and as
    /// `name startup`/`name teardown` otherwise, followed by where it ran.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogRecord::OpStart {
                cpu,
                op,
                from,
                target,
            } => write!(f, "{op}: {cpu} {from} -> {target}"),
            LogRecord::Call {
                invocation: inv,
                result,
                injected,
                state_after,
            } => {
                let on = match inv.runs_on {
                    RunsOn::Target { irqs_off: true } => format!("on CPU{} irqs off", inv.cpu.0),
                    RunsOn::Target { irqs_off: false } => format!("on cpuhp/{}", inv.cpu.0),
                    RunsOn::Control { cpu } => format!("on CPU{} (control)", cpu.0),
                };
                // Core steps show the kernel function (`%ps`), others the
                // step name and direction.
                let core_fn = crate::table::CORE_STEPS
                    .iter()
                    .find(|c| c.state == inv.state)
                    .and_then(|c| if inv.bringup { c.startup } else { c.teardown });
                let callback = match core_fn {
                    Some(func) if inv.core => func.to_string(),
                    _ => format!("{} {}", inv.name, inv.direction()),
                };
                write!(
                    f,
                    "  cpuhp_enter: cpu: {:04} target: {:3} step: {:3} ({}) {}{}",
                    inv.cpu.0,
                    inv.target.0,
                    inv.state.0,
                    callback,
                    on,
                    if inv.rollback { " [rollback]" } else { "" }
                )?;
                write!(
                    f,
                    "\n  cpuhp_exit:  cpu: {:04}  state: {:3} step: {:3} ret: {}{}",
                    inv.cpu.0,
                    state_after.0,
                    inv.state.0,
                    ret(result),
                    if *injected {
                        " (injected by hotplug/fail, callback not run)"
                    } else {
                        ""
                    }
                )
            }
            LogRecord::Online { cpu, online } => {
                if *online {
                    write!(f, "  set_cpu_online({}, true)", cpu.0)
                } else {
                    write!(f, "  set_cpu_online({}, false)", cpu.0)
                }
            }
            LogRecord::Warning(w) => write!(f, "  {w}"),
            LogRecord::OpEnd {
                cpu,
                op,
                result,
                state,
            } => write!(f, "{op}: {cpu} returns {} at state {state}", ret(result)),
        }
    }
}

pub(crate) fn trace_enter(inv: &Invocation) {
    tracing::trace!(
        target: "cpuhp",
        cpu = inv.cpu.0,
        target = inv.target.0,
        step = inv.state.0,
        callback = %format_args!("{}:{}", inv.name, inv.direction()),
        rollback = inv.rollback,
        runs_on = ?inv.runs_on,
        "cpuhp_enter"
    );
}

pub(crate) fn trace_exit(
    cpu: CpuId,
    state: StateId,
    step: StateId,
    result: &Result<(), Errno>,
    injected: bool,
) {
    tracing::trace!(
        target: "cpuhp",
        cpu = cpu.0,
        state = state.0,
        step = step.0,
        ret = ret(result),
        injected,
        "cpuhp_exit"
    );
}

pub(crate) fn trace_warning(w: &Warning) {
    tracing::warn!(target: "cpuhp", cpu = ?w.cpu(), "biosim_cpuhp_warn: {w}");
}
