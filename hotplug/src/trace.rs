//! What the machine reports while it runs: the `cpuhp:cpuhp_enter` / `cpuhp:cpuhp_multi_enter` /
//! `cpuhp:cpuhp_exit` tracepoints of `include/trace/events/cpuhp.h`, the kernel's WARN/BUG splats
//! of kernel/cpu.c as values ([`Warning`]), and an in-memory log ([`LogRecord`]) that tests and
//! docs read back.
//!
//! # Tracepoints
//!
//! Each is a `tracing` event of target `"cpuhp"` with the field `tracepoint` (the kernel event
//! name), the message exactly as tracefs prints the event after the timestamp
//! ([`cpuhp_enter_text`], [`cpuhp_multi_enter_text`], [`cpuhp_exit_text`]), the field `cpu` (the
//! hotplugged CPU) and the context fields `exec_cpu`, `comm`, `pid`, `flags` of the task the
//! kernel fires it in ([`crate::task`]). They fire where kernel/cpu.c fires them:
//!
//! - `cpuhp_invoke_callback()`: `cpuhp_enter` / `cpuhp_exit` around a single-instance callback,
//!   `cpuhp_multi_enter` / `cpuhp_exit` around each instance of a multi-instance one. `cpuhp_exit`
//!   reports `st->state` after the call: the step itself on the way up, one below it on the way
//!   down (`cpuhp_next_state()` moved it before the call).
//! - An injected `hotplug/fail` returns `-EAGAIN` before `trace_cpuhp_enter()`: no cpuhp event;
//!   biosim fires a `biosim_cpuhp_fail_injected` annotation instead.
//! - The `CPUHP_BRINGUP_CPU` startup (`cpuhp_bringup_ap()`) and the `CPUHP_TEARDOWN_CPU`
//!   teardown (`takedown_cpu()`) contain the AP's part of the operation: their `cpuhp_exit`
//!   comes after it, with the state it left (`CPUHP_ONLINE` / `CPUHP_AP_IDLE_DEAD`).
//! - `cpuhp_kick_ap_work()` (the AP part of `cpu_down()`): `cpuhp_enter ... step: 236
//!   (cpuhp_kick_ap_work)` from the BP task before the AP thread runs, `cpuhp_exit` with the
//!   state reached and the AP part's result after it. `cpu_up()`'s `cpuhp_kick_ap()` has none.
//! - No tracepoint fires on a CPU outside `cpu_online_mask`, so STARTING/DYING callbacks never
//!   show.
//!
//! Besides: `biosim_cpuhp_op` (DEBUG; `cpu`, `op`, `from`/`target` or `ret`) and
//! `biosim_cpuhp_warn` (WARN) for what no kernel tracepoint reports.

use std::fmt;
use std::sync::Arc;

use crate::errno::Errno;
use crate::invoke::{Invocation, Origin, RunsOn};
use crate::state::{CpuId, StateId};
use crate::task::Task;

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
    /// `WARN_ON_ONCE(ret)` ("Rollback must not fail") in `cpuhp_invoke_callback()`: undoing the
    /// instances already done after an instance of a multi-instance state failed, an opposite
    /// callback failed too. The kernel carries on and returns the original error.
    InstanceRollbackFailed {
        /// The CPU.
        cpu: CpuId,
        /// The multi-instance step.
        state: StateId,
        /// Its name.
        name: Arc<str>,
        /// Direction of the failed undo callback.
        bringup: bool,
        /// What it returned.
        errno: Errno,
    },
    /// `WARN(!hlist_empty(&sp->list), "Error: Removing state %d which has instances left.")` in
    /// `__cpuhp_remove_state_cpuslocked()`; the state is removed anyway.
    RemovingStateWithInstances {
        /// The state.
        state: StateId,
    },
}

impl Warning {
    /// The CPU the warning is about, if any.
    pub fn cpu(&self) -> Option<CpuId> {
        match self {
            Warning::RollbackFailed { cpu, .. }
            | Warning::AtomicCallbackFailed { cpu, .. }
            | Warning::DeadCallbackError { cpu, .. }
            | Warning::TeardownBug { cpu, .. }
            | Warning::InstanceRollbackFailed { cpu, .. }
            | Warning::TargetMismatch { cpu, .. } => Some(*cpu),
            Warning::NoDynamicStates { .. }
            | Warning::UnbalancedHotplugEnable
            | Warning::RemovingStateWithInstances { .. } => None,
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
            Warning::InstanceRollbackFailed {
                cpu,
                state,
                name,
                bringup,
                errno,
            } => write!(
                f,
                "WARNING: cpuhp_invoke_callback: instance rollback failed: CPU {} {} state {} ({}) failed ({})",
                cpu.0,
                dir(*bringup),
                name,
                state,
                errno.as_neg_i32()
            ),
            Warning::RemovingStateWithInstances { state } => write!(
                f,
                "WARNING: Error: Removing state {state} which has instances left."
            ),
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
    /// A callback ran (or an injected failure stood in for it), once per instance for a
    /// multi-instance state.
    Call {
        /// What ran.
        invocation: Invocation,
        /// What it returned.
        result: Result<(), Errno>,
        /// `-EAGAIN` from `hotplug/fail`, the callback was not run.
        injected: bool,
        /// `st->state` once the result was applied (as `cpuhp_exit` reports).
        state_after: StateId,
        /// The callback contains the AP part of the operation (`cpuhp_bringup_ap()` at
        /// `CPUHP_BRINGUP_CPU`, `takedown_cpu()` at `CPUHP_TEARDOWN_CPU`): the record sits where
        /// the call began, `result` and `state_after` are what the kernel's call returns once
        /// that part ended (the AP's error, the state it left), and its `cpuhp_exit` is the
        /// [`LogRecord::Exit`] after the part. A failure in it is one recorded earlier.
        nests_ap_part: bool,
    },
    /// `cpuhp_kick_ap_work()` began: the BP hands the AP part of a `cpu_down()` to the AP
    /// thread (its `cpuhp_enter`, fired by the BP task on the control CPU).
    KickApWork {
        /// The CPU going down.
        cpu: CpuId,
        /// `st->target` of the AP part (`CPUHP_TEARDOWN_CPU` or above).
        target: StateId,
        /// `prev_state`, the state the AP part starts from.
        step: StateId,
        /// The control CPU.
        control: CpuId,
    },
    /// A `cpuhp_exit` that closes a section containing other calls: `cpuhp_kick_ap_work()`, or a
    /// core step whose callback contains the AP part (`cpuhp_bringup_ap()` at
    /// `CPUHP_BRINGUP_CPU`, `takedown_cpu()` at `CPUHP_TEARDOWN_CPU`; their [`LogRecord::Call`]
    /// shows the enter only).
    Exit {
        /// The CPU.
        cpu: CpuId,
        /// `st->state` when the section ended.
        state: StateId,
        /// The step (`prev_state` for `cpuhp_kick_ap_work()`).
        step: StateId,
        /// The section's result.
        result: Result<(), Errno>,
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

/// Whether a [`LogRecord::Call`]'s `cpuhp_exit` is a separate [`LogRecord::Exit`]: the core
/// steps whose callback contains the AP part, during a hotplug operation.
pub(crate) fn record_exit_is_deferred(
    inv: &Invocation,
    result: &Result<(), Errno>,
    injected: bool,
) -> bool {
    inv.core
        && inv.origin == Origin::Hotplug
        && !injected
        && result.is_ok()
        && ((inv.bringup && inv.state == crate::state::CPUHP_BRINGUP_CPU)
            || (!inv.bringup && inv.state == crate::state::CPUHP_TEARDOWN_CPU))
}

fn ret(result: &Result<(), Errno>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => e.as_neg_i32(),
    }
}

impl fmt::Display for LogRecord {
    /// ftrace-style text: the kernel's `cpuhp_enter`/`cpuhp_multi_enter`/`cpuhp_exit` formats
    /// with the callback's `%ps` name, followed by the instance, where it ran and whether it was
    /// a rollback. Unlike the tracepoints the log keeps injected failures (marked so).
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
                nests_ap_part,
            } => {
                let on = match inv.runs_on {
                    RunsOn::Target { irqs_off: true } => format!("on CPU{} irqs off", inv.cpu.0),
                    RunsOn::Target { irqs_off: false } => format!("on cpuhp/{}", inv.cpu.0),
                    RunsOn::Control { cpu } => format!("on CPU{} (control)", cpu.0),
                };
                let event = if inv.instance.is_some() {
                    "cpuhp_multi_enter:"
                } else {
                    "cpuhp_enter:"
                };
                let instance = inv.instance.map(|i| format!(" {i}")).unwrap_or_default();
                write!(
                    f,
                    "  {event} cpu: {:04} target: {:3} step: {:3} ({}){instance} {}{}",
                    inv.cpu.0,
                    inv.target.0,
                    inv.state.0,
                    inv.fun,
                    on,
                    if inv.rollback { " [rollback]" } else { "" }
                )?;
                if *nests_ap_part {
                    return Ok(());
                }
                write!(
                    f,
                    "\n  cpuhp_exit:  cpu: {:04}  state: {:3} step: {:3} ret: {}{}",
                    inv.cpu.0,
                    state_after.0,
                    inv.state.0,
                    ret(result),
                    if *injected {
                        " (injected by hotplug/fail: callback not run, no cpuhp event)"
                    } else {
                        ""
                    }
                )
            }
            LogRecord::KickApWork {
                cpu,
                target,
                step,
                control,
            } => write!(
                f,
                "  cpuhp_enter: cpu: {:04} target: {:3} step: {:3} (cpuhp_kick_ap_work) on CPU{} (control)",
                cpu.0, target.0, step.0, control.0
            ),
            LogRecord::Exit {
                cpu,
                state,
                step,
                result,
            } => write!(
                f,
                "  cpuhp_exit:  cpu: {:04}  state: {:3} step: {:3} ret: {}",
                cpu.0,
                state.0,
                step.0,
                ret(result)
            ),
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

/// The context columns of a tracepoint: the CPU it runs on, the task, the flags.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TpContext {
    pub(crate) exec_cpu: CpuId,
    pub(crate) task: Task,
    pub(crate) flags: TpFlags,
}

impl TpContext {
    /// The context of `inv`'s callback, `depth` added to the flags' preempt depth
    /// ([`crate::CpuhpConfig::tracepoint_preempt_depth`]).
    pub(crate) fn of(inv: &Invocation, depth: u8) -> Self {
        TpContext {
            exec_cpu: inv.exec_cpu(),
            task: inv.task,
            flags: TpFlags::new(inv.flags(), depth),
        }
    }
}

/// The five flag characters of a tracepoint's context (`trace_print_lat_fmt()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TpFlags([u8; 5]);

impl TpFlags {
    /// `base` (a `FLAGS_*` constant of [`crate::task`]) with `depth` added to its preempt-depth
    /// column (a hex digit, `.` for 0).
    pub(crate) fn new(base: &str, depth: u8) -> Self {
        let mut b = [b'.'; 5];
        b.copy_from_slice(&base.as_bytes()[..5]);
        let now = match b[3] {
            b'.' => 0,
            c => (c as char).to_digit(16).unwrap_or(0) as u8,
        };
        let d = (now + depth).min(15);
        b[3] = if d == 0 {
            b'.'
        } else {
            char::from_digit(u32::from(d), 16).map_or(b'f', |c| c as u8)
        };
        TpFlags(b)
    }

    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or(".....")
    }
}

/// `TRACE_EVENT(cpuhp_enter)`'s `TP_printk("cpu: %04u target: %3d step: %3d (%ps)")`.
pub fn cpuhp_enter_text(cpu: CpuId, target: StateId, step: StateId, fun: &str) -> String {
    format!(
        "cpuhp_enter: cpu: {:04} target: {:3} step: {:3} ({fun})",
        cpu.0, target.0, step.0
    )
}

/// `TRACE_EVENT(cpuhp_multi_enter)`: the same print fmt as `cpuhp_enter`.
pub fn cpuhp_multi_enter_text(cpu: CpuId, target: StateId, step: StateId, fun: &str) -> String {
    format!(
        "cpuhp_multi_enter: cpu: {:04} target: {:3} step: {:3} ({fun})",
        cpu.0, target.0, step.0
    )
}

/// `TRACE_EVENT(cpuhp_exit)`'s `TP_printk(" cpu: %04u  state: %3d step: %3d ret: %d")` (the
/// leading space gives two after the colon).
pub fn cpuhp_exit_text(cpu: CpuId, state: StateId, step: StateId, ret: i32) -> String {
    format!(
        "cpuhp_exit:  cpu: {:04}  state: {:3} step: {:3} ret: {ret}",
        cpu.0, state.0, step.0
    )
}

/// Fires `cpuhp_enter` (or `cpuhp_multi_enter` for one instance of a multi-instance state) as
/// the `tracing` event of the ftrace interface. `online`: whether `ctx.exec_cpu` is in
/// `cpu_online_mask`; a tracepoint does not fire on a CPU that is not (`DECLARE_TRACE()`'s
/// `cpu_online(raw_smp_processor_id())` condition), which hides STARTING/DYING callbacks.
pub(crate) fn tp_enter(
    online: bool,
    ctx: TpContext,
    multi: bool,
    cpu: CpuId,
    target: StateId,
    step: StateId,
    fun: &str,
) {
    if !online {
        return;
    }
    let tp = if multi {
        "cpuhp_multi_enter"
    } else {
        "cpuhp_enter"
    };
    // The text is built inside the macro, so only when a subscriber takes the event (a machine
    // without a trace formats nothing).
    let text = || {
        if multi {
            cpuhp_multi_enter_text(cpu, target, step, fun)
        } else {
            cpuhp_enter_text(cpu, target, step, fun)
        }
    };
    tracing::trace!(
        target: "cpuhp",
        tracepoint = tp,
        cpu = cpu.0,
        exec_cpu = u64::from(ctx.exec_cpu.0),
        comm = ctx.task.comm().as_str(),
        pid = u64::from(ctx.task.pid()),
        flags = ctx.flags.as_str(),
        "{}",
        text()
    );
}

/// Fires `cpuhp_exit`; see [`tp_enter`] for `online`.
pub(crate) fn tp_exit(
    online: bool,
    ctx: TpContext,
    cpu: CpuId,
    state: StateId,
    step: StateId,
    result: &Result<(), Errno>,
) {
    if !online {
        return;
    }
    tracing::trace!(
        target: "cpuhp",
        tracepoint = "cpuhp_exit",
        cpu = cpu.0,
        exec_cpu = u64::from(ctx.exec_cpu.0),
        comm = ctx.task.comm().as_str(),
        pid = u64::from(ctx.task.pid()),
        flags = ctx.flags.as_str(),
        "{}",
        cpuhp_exit_text(cpu, state, step, ret(result))
    );
}

/// `hotplug/fail` fired: the kernel's `cpuhp_invoke_callback()` returns `-EAGAIN` before
/// `trace_cpuhp_enter()`, so no cpuhp event exists for it. biosim notes it as a
/// `biosim_cpuhp_fail_injected` annotation (a trace_marker line in the ftrace output).
pub(crate) fn tp_fail_injected(online: bool, ctx: TpContext, inv: &Invocation) {
    if cfg!(feature = "bug-trace-injected-fail") {
        // Twin: the failed step shows as a cpuhp_enter/cpuhp_exit pair, as it never does on
        // the live kernel; the live-trace comparisons must catch it.
        tp_enter(online, ctx, false, inv.cpu, inv.target, inv.state, &inv.fun);
        return;
    }
    if !online {
        return;
    }
    tracing::trace!(
        target: "cpuhp",
        tracepoint = "biosim_cpuhp_fail_injected",
        cpu = inv.cpu.0,
        exec_cpu = u64::from(ctx.exec_cpu.0),
        comm = ctx.task.comm().as_str(),
        pid = u64::from(ctx.task.pid()),
        flags = ctx.flags.as_str(),
        "biosim_cpuhp_fail_injected: cpu: {:04} step: {:3} ({} {}): -EAGAIN before the callback, no cpuhp event",
        inv.cpu.0,
        inv.state.0,
        inv.fun,
        inv.direction()
    );
}

/// The exit the twin's injected enter needs.
pub(crate) fn tp_fail_injected_exit(
    online: bool,
    ctx: TpContext,
    inv: &Invocation,
    state: StateId,
) {
    if cfg!(feature = "bug-trace-injected-fail") {
        tp_exit(online, ctx, inv.cpu, state, inv.state, &Err(Errno::EAGAIN));
    }
}

pub(crate) fn trace_warning(w: &Warning) {
    tracing::warn!(target: "cpuhp", cpu = ?w.cpu(), "biosim_cpuhp_warn: {w}");
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_tracepoint_preempt_depth_adds_to_the_depth_column() {
        assert_eq!(super::TpFlags::new(".....", 0).as_str(), ".....");
        assert_eq!(super::TpFlags::new(".....", 1).as_str(), "...1.");
        assert_eq!(super::TpFlags::new("d..1.", 1).as_str(), "d..2.");
        assert_eq!(super::TpFlags::new("d..f.", 1).as_str(), "d..f.");
    }

    use std::sync::Arc;

    use super::{cpuhp_enter_text, cpuhp_exit_text, cpuhp_multi_enter_text};
    use crate::tracefs::{record, TraceLine};
    use crate::*;

    fn noop() -> Option<Callback<()>> {
        Some(Arc::new(|_: &(), _: &Invocation| Ok(())))
    }

    /// `TASK-PID [CPU] FLAGS: EVENT: FIELDS` of the recorded lines (timestamps dropped).
    fn text(lines: &[TraceLine]) -> Vec<String> {
        lines
            .iter()
            .map(|l| {
                format!(
                    "{}-{} [{:03}] {}: {}: {}",
                    l.comm, l.pid, l.cpu, l.flags, l.event, l.fields
                )
            })
            .collect()
    }

    #[test]
    fn the_print_fmts_pad_as_the_kernels() {
        assert_eq!(
            cpuhp_enter_text(
                CpuId(1),
                StateId(144),
                StateId(187),
                "workqueue_offline_cpu"
            ),
            "cpuhp_enter: cpu: 0001 target: 144 step: 187 (workqueue_offline_cpu)"
        );
        assert_eq!(
            cpuhp_enter_text(CpuId(1), StateId(236), StateId(1), "smpboot_create_threads"),
            "cpuhp_enter: cpu: 0001 target: 236 step:   1 (smpboot_create_threads)"
        );
        assert_eq!(
            cpuhp_multi_enter_text(CpuId(1), StateId(0), StateId(24), "blk_mq_hctx_notify_dead"),
            "cpuhp_multi_enter: cpu: 0001 target:   0 step:  24 (blk_mq_hctx_notify_dead)"
        );
        assert_eq!(
            cpuhp_exit_text(CpuId(1), StateId(186), StateId(187), 0),
            "cpuhp_exit:  cpu: 0001  state: 186 step: 187 ret: 0"
        );
        assert_eq!(
            cpuhp_exit_text(CpuId(1), StateId(236), StateId(236), -11),
            "cpuhp_exit:  cpu: 0001  state: 236 step: 236 ret: -11"
        );
    }

    /// A machine with an ONLINE state (AP, cpuhp/1), a PREPARE state (BP), a STARTING state and
    /// a multi-instance ONLINE state with two instances.
    fn machine() -> (Cpuhp<()>, StateId, StateId) {
        let mut hp: Cpuhp<()> = Cpuhp::new(2, 2).unwrap();
        hp.cpuhp_setup_state_nocalls(
            CPUHP_AP_WORKQUEUE_ONLINE,
            "workqueue:online",
            noop(),
            noop(),
        )
        .unwrap();
        hp.cpuhp_setup_state_nocalls(CPUHP_TIMERS_PREPARE, "timers:prepare", noop(), noop())
            .unwrap();
        hp.cpuhp_setup_state_nocalls(CPUHP_AP_SCHED_STARTING, "sched:starting", noop(), noop())
            .unwrap();
        let dynamic = hp
            .cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "demo:online", noop(), None)
            .unwrap();
        let multi = hp
            .cpuhp_setup_state_multi(CPUHP_AP_BLK_MQ_ONLINE, "block/mq:online", noop(), noop())
            .unwrap();
        hp.cpuhp_state_add_instance_nocalls(multi).unwrap();
        hp.cpuhp_state_add_instance_nocalls(multi).unwrap();
        (hp, dynamic, multi)
    }

    #[test]
    fn an_offline_and_an_online_print_the_kernels_events_in_the_kernels_tasks() {
        let (mut hp, _, _) = machine();
        let ((), down) = record(|| hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &()).unwrap());
        assert_eq!(
            text(&down),
            [
                // cpuhp_kick_ap_work() in the work_on_cpu() kworker of the control CPU.
                "kworker/0:0-200 [000] .....: cpuhp_enter: cpu: 0001 target: 144 step: 236 (cpuhp_kick_ap_work)",
                "cpuhp/1-101 [001] .....: cpuhp_enter: cpu: 0001 target: 144 step: 187 (workqueue_offline_cpu)",
                "cpuhp/1-101 [001] .....: cpuhp_exit:  cpu: 0001  state: 186 step: 187 ret: 0",
                "cpuhp/1-101 [001] .....: cpuhp_multi_enter: cpu: 0001 target: 144 step: 151 (blk_mq_hctx_notify_offline)",
                "cpuhp/1-101 [001] .....: cpuhp_exit:  cpu: 0001  state: 150 step: 151 ret: 0",
                "cpuhp/1-101 [001] .....: cpuhp_multi_enter: cpu: 0001 target: 144 step: 151 (blk_mq_hctx_notify_offline)",
                "cpuhp/1-101 [001] .....: cpuhp_exit:  cpu: 0001  state: 150 step: 151 ret: 0",
                "kworker/0:0-200 [000] .....: cpuhp_exit:  cpu: 0001  state: 144 step: 236 ret: 0",
                // takedown_cpu()'s exit after the DYING callbacks (sched_cpu_dying, not traced:
                // CPU1 is out of cpu_online_mask) with the state they left.
                "kworker/0:0-200 [000] .....: cpuhp_enter: cpu: 0001 target:   0 step: 144 (takedown_cpu)",
                "kworker/0:0-200 [000] .....: cpuhp_exit:  cpu: 0001  state:  84 step: 144 ret: 0",
                "kworker/0:0-200 [000] .....: cpuhp_enter: cpu: 0001 target:   0 step:  83 (finish_cpu)",
                "kworker/0:0-200 [000] .....: cpuhp_exit:  cpu: 0001  state:  82 step:  83 ret: 0",
                "kworker/0:0-200 [000] .....: cpuhp_enter: cpu: 0001 target:   0 step:  58 (timers_dead_cpu)",
                "kworker/0:0-200 [000] .....: cpuhp_exit:  cpu: 0001  state:  57 step:  58 ret: 0",
            ]
        );
        let ((), up) = record(|| hp.cpu_up(CpuId(1), CPUHP_ONLINE, &()).unwrap());
        assert_eq!(
            text(&up),
            [
                "biosim-999 [000] .....: cpuhp_enter: cpu: 0001 target: 236 step:   1 (smpboot_create_threads)",
                "biosim-999 [000] .....: cpuhp_exit:  cpu: 0001  state:   1 step:   1 ret: 0",
                "biosim-999 [000] .....: cpuhp_enter: cpu: 0001 target: 236 step:  58 (timers_prepare_cpu)",
                "biosim-999 [000] .....: cpuhp_exit:  cpu: 0001  state:  58 step:  58 ret: 0",
                "biosim-999 [000] .....: cpuhp_enter: cpu: 0001 target: 236 step:  82 (cpuhp_kick_ap_alive)",
                "biosim-999 [000] .....: cpuhp_exit:  cpu: 0001  state:  82 step:  82 ret: 0",
                // cpuhp_bringup_ap(): STARTING untraced, the ONLINE section in cpuhp/1, its exit
                // at the end with CPUHP_ONLINE.
                "biosim-999 [000] .....: cpuhp_enter: cpu: 0001 target: 236 step:  83 (cpuhp_bringup_ap)",
                "cpuhp/1-101 [001] .....: cpuhp_multi_enter: cpu: 0001 target: 236 step: 151 (blk_mq_hctx_notify_online)",
                "cpuhp/1-101 [001] .....: cpuhp_exit:  cpu: 0001  state: 151 step: 151 ret: 0",
                "cpuhp/1-101 [001] .....: cpuhp_multi_enter: cpu: 0001 target: 236 step: 151 (blk_mq_hctx_notify_online)",
                "cpuhp/1-101 [001] .....: cpuhp_exit:  cpu: 0001  state: 151 step: 151 ret: 0",
                "cpuhp/1-101 [001] .....: cpuhp_enter: cpu: 0001 target: 236 step: 187 (workqueue_online_cpu)",
                "cpuhp/1-101 [001] .....: cpuhp_exit:  cpu: 0001  state: 187 step: 187 ret: 0",
                // A callback registered without a function name prints its state's name.
                "cpuhp/1-101 [001] .....: cpuhp_enter: cpu: 0001 target: 236 step: 192 (demo:online)",
                "cpuhp/1-101 [001] .....: cpuhp_exit:  cpu: 0001  state: 192 step: 192 ret: 0",
                "biosim-999 [000] .....: cpuhp_exit:  cpu: 0001  state: 236 step:  83 ret: 0",
            ]
        );
    }

    #[test]
    #[cfg_attr(
        feature = "bug-rollback-calls-failed-state",
        should_panic(expected = "assertion")
    )]
    fn an_injected_failure_fires_no_cpuhp_event_only_an_annotation() {
        let (mut hp, dynamic, _) = machine();
        hp.set_fail(CpuId(1), CPUHP_AP_WORKQUEUE_ONLINE.0).unwrap();
        let (r, down) = record(|| hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &()));
        assert_eq!(r.unwrap_err().errno(), Errno::EAGAIN);
        let t = text(&down);
        assert_eq!(
            t,
            [
                "kworker/0:0-200 [000] .....: cpuhp_enter: cpu: 0001 target: 144 step: 236 (cpuhp_kick_ap_work)",
                "cpuhp/1-101 [001] .....: tracing_mark_write: biosim_cpuhp_fail_injected: cpu: 0001 step: 187 (workqueue_offline_cpu teardown): -EAGAIN before the callback, no cpuhp event",
                // The rollback: the startups above 187 (the failed step's own is not called).
                "cpuhp/1-101 [001] .....: cpuhp_enter: cpu: 0001 target: 236 step: 192 (demo:online)",
                "cpuhp/1-101 [001] .....: cpuhp_exit:  cpu: 0001  state: 192 step: 192 ret: 0",
                "kworker/0:0-200 [000] .....: cpuhp_exit:  cpu: 0001  state: 236 step: 236 ret: -11",
            ]
        );
        // The log keeps the injected call (tests and docs read it).
        assert!(hp.log().iter().any(|r| matches!(r,
            LogRecord::Call { injected: true, invocation, .. } if invocation.state == CPUHP_AP_WORKQUEUE_ONLINE)));
        let _ = dynamic;
    }

    #[test]
    fn single_invocations_run_in_cpuhp_thread_or_the_writer() {
        let mut hp: Cpuhp<()> = Cpuhp::new(2, 2).unwrap();
        let (_, lines) = record(|| {
            hp.cpuhp_setup_state(CPUHP_AP_ONLINE_DYN, "demo:online", noop(), None, &())
                .unwrap();
            hp.cpuhp_setup_state(CPUHP_TIMERS_PREPARE, "timers:prepare", noop(), None, &())
                .unwrap();
        });
        assert_eq!(
            text(&lines),
            [
                "cpuhp/0-100 [000] .....: cpuhp_enter: cpu: 0000 target: 236 step: 192 (demo:online)",
                "cpuhp/0-100 [000] .....: cpuhp_exit:  cpu: 0000  state: 236 step: 192 ret: 0",
                "cpuhp/1-101 [001] .....: cpuhp_enter: cpu: 0001 target: 236 step: 192 (demo:online)",
                "cpuhp/1-101 [001] .....: cpuhp_exit:  cpu: 0001  state: 236 step: 192 ret: 0",
                "biosim-999 [001] .....: cpuhp_enter: cpu: 0000 target: 236 step:  58 (timers_prepare_cpu)",
                "biosim-999 [001] .....: cpuhp_exit:  cpu: 0000  state: 236 step:  58 ret: 0",
                "biosim-999 [000] .....: cpuhp_enter: cpu: 0001 target: 236 step:  58 (timers_prepare_cpu)",
                "biosim-999 [000] .....: cpuhp_exit:  cpu: 0001  state: 236 step:  58 ret: 0",
            ]
        );
    }
}
