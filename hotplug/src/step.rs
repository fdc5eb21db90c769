//! Transitions: `cpu_up()` / `_cpu_up()`, `cpu_down()` / `_cpu_down()` and the
//! machinery under them in kernel/cpu.c — `cpuhp_next_state()`,
//! `cpuhp_invoke_callback_range()`, `cpuhp_set_state()`,
//! `cpuhp_reset_state()`, `cpuhp_up_callbacks()`, `cpuhp_down_callbacks()`,
//! `cpuhp_kick_ap()` / `cpuhp_thread_fun()`, and the nested ranges that run
//! inside `bringup_cpu()` (`notify_cpu_starting()`, `cpuhp_online_idle()`,
//! `cpuhp_bringup_ap()`) and `takedown_cpu()` (`take_cpu_down()`).
//!
//! The kernel runs these as nested function calls across two CPUs. The model
//! keeps the same structure as an explicit stack of frames (one per range
//! the kernel is iterating), so an operation can be suspended between any two
//! callbacks: [`Cpuhp::begin_step`] picks the next callback exactly as
//! `cpuhp_next_state()` would (adjusting `st->state` first, skipping steps
//! without a callback for the direction), and [`Cpuhp::finish_step`] applies
//! its result the way the kernel's caller of that range would, including
//! rollback.

use crate::errno::Errno;
use crate::error::HotplugError;
use crate::invoke::{Callback, InstanceId, Invocation, Origin, RunsOn};
use crate::state::*;
use crate::task::{Task, FLAGS_TASK};
use crate::trace::{self, LogRecord, TpContext, TpFlags, Warning};
use crate::Cpuhp;

/// Which transition an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    Up,
    Down,
}

impl OpKind {
    fn name(self) -> &'static str {
        match self {
            OpKind::Up => "cpu_up",
            OpKind::Down => "cpu_down",
        }
    }
}

/// Who is iterating a range, which decides where its callbacks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runner {
    /// The AP's hotplug thread (`cpuhp_thread_fun()`).
    Ap,
    /// The control task (`cpuhp_invoke_callback_range()` on the BP).
    Bp,
    /// The AP with interrupts off (`notify_cpu_starting()`, `take_cpu_down()`).
    Atomic,
}

/// What to do when a rollback on the AP finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterApRollback {
    /// `cpuhp_kick_ap()` returns the error to `_cpu_up()`.
    Finish,
    /// `cpuhp_kick_ap()` returns the error to `cpuhp_kick_ap_work()` (which traces its exit),
    /// then to `_cpu_down()`.
    FinishKickApWork { prev: StateId },
    /// `cpuhp_kick_ap()` returns it to `bringup_cpu()`, whose BP range fails.
    BringupFailed,
}

/// The kernel function iterating a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// `cpuhp_kick_ap()` from `_cpu_up()` (CPU already past `CPUHP_BRINGUP_CPU`).
    UpApKick { prev: StateId },
    /// `cpuhp_kick_ap_work()` from `_cpu_down()`, down to `CPUHP_TEARDOWN_CPU`.
    DownApKick { prev: StateId },
    /// The second `__cpuhp_kick_ap()` of `cpuhp_kick_ap()`: rollback on the AP.
    ApRollback { then: AfterApRollback },
    /// `cpuhp_up_callbacks()`.
    UpCallbacks { prev: StateId },
    /// The rollback range inside `cpuhp_up_callbacks()`.
    UpCallbacksRollback,
    /// `notify_cpu_starting()`, nested in `bringup_cpu()`.
    Starting,
    /// `cpuhp_kick_ap()` from `cpuhp_bringup_ap()`, nested in `bringup_cpu()`.
    BringupKick { prev: StateId },
    /// `cpuhp_down_callbacks()`.
    DownCallbacks { prev: StateId },
    /// The rollback range inside `cpuhp_down_callbacks()`.
    DownCallbacksRollback,
    /// `take_cpu_down()`, nested in `takedown_cpu()`.
    Dying,
    /// `_cpu_down()`'s `__cpuhp_kick_ap()` when the teardown stopped at or above
    /// `CPUHP_TEARDOWN_CPU` ("CPU refused to die" in `takedown_cpu()`, or a failure injected there).
    ReUp,
}

impl Role {
    fn is_rollback(self) -> bool {
        matches!(
            self,
            Role::ApRollback { .. }
                | Role::UpCallbacksRollback
                | Role::DownCallbacksRollback
                | Role::ReUp
        )
    }
}

/// One range being iterated: `cpuhp_invoke_callback_range(bringup, cpu, st, target)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    role: Role,
    runner: Runner,
    bringup: bool,
    target: StateId,
    /// `cpuhp_invoke_callback_range_nofail()`: failures are warned and skipped.
    nofail: bool,
}

#[derive(Debug)]
struct Pending {
    seq: u64,
    invocation: Invocation,
    injected: bool,
}

/// The instance loop of `cpuhp_invoke_callback()` for a multi-instance state in progress: one
/// step per instance.
#[derive(Debug)]
struct MultiCall {
    state: StateId,
    bringup: bool,
    /// `step->list` when the call began (head first).
    list: Vec<InstanceId>,
    /// The next node of `list`.
    pos: usize,
    /// Called with `lastp` (`&st->last`, the AP thread): a failure stops here and leaves the
    /// failed node in `st->last`; without it (the BP, STARTING/DYING) the call undoes the
    /// instances done itself.
    lastp: bool,
    /// `*lastp` when the call began: the loop stops at that node (a rollback undoing a partial
    /// call).
    stop: Option<InstanceId>,
    /// `cnt`: instances done.
    done: usize,
    /// The `err:` path: undoing `remaining` instances with the opposite callback.
    undo: Option<MultiUndo>,
}

#[derive(Debug)]
struct MultiUndo {
    remaining: usize,
    errno: Errno,
    /// The call that failed (what the operation's error names).
    failed: Invocation,
}

/// What one instance call of a [`MultiCall`] leaves.
enum MultiNext {
    /// More instances to call: the step is not over.
    Continue,
    /// `cpuhp_invoke_callback()` returns this (for the call `Invocation`).
    Done(Result<(), Errno>, Option<Invocation>),
}

/// A core step whose `cpuhp_invoke_callback()` has not returned yet: its callback runs the AP
/// part of the operation (`cpuhp_bringup_ap()`, `takedown_cpu()`).
#[derive(Debug, Clone, Copy)]
struct Section {
    /// The step.
    step: StateId,
    /// Its [`LogRecord::Call`] in the log, completed when the part ends.
    record: usize,
}

/// A `cpu_up()`/`cpu_down()` in progress.
#[derive(Debug)]
pub(crate) struct Operation {
    kind: OpKind,
    /// `prev_state` of `_cpu_up()`/`_cpu_down()`.
    s0: StateId,
    /// The requested target.
    final_target: StateId,
    /// The control CPU, chosen once at the start (`work_on_cpu()`).
    control: CpuId,
    stack: Vec<Frame>,
    /// The first failure: what the operation returns.
    error: Option<HotplugError>,
    pending: Option<Pending>,
    done: Option<Result<(), HotplugError>>,
    /// The instance loop in progress, if the current step is a multi-instance one.
    multi: Option<MultiCall>,
    /// A core step whose callback contains the AP part (`CPUHP_BRINGUP_CPU` up,
    /// `CPUHP_TEARDOWN_CPU` down): its `cpuhp_exit` and the result its log record shows wait
    /// until that part ends ([`Cpuhp::close_section`]).
    section: Option<Section>,
    /// `cpuhp_kick_ap_work()`'s `cpuhp_enter` (target, prev_state), not fired yet: it fires with
    /// the first step of the AP part (nothing happens in between), so a runtime that records the
    /// steps' events records it too.
    kick_enter: Option<(StateId, StateId)>,
}

impl Operation {
    /// The task of the BP side: `_cpu_down()` in the control CPU's `work_on_cpu()` worker,
    /// `_cpu_up()` in the writer's task.
    fn bp_task(&self) -> Task {
        match self.kind {
            OpKind::Down => Task::CpuDownWorker(self.control),
            OpKind::Up => Task::Writer,
        }
    }

    fn bp_context(&self, depth: u8) -> TpContext {
        TpContext {
            exec_cpu: self.control,
            task: self.bp_task(),
            flags: TpFlags::new(FLAGS_TASK, depth),
        }
    }
}

/// A callback that has been begun with [`Cpuhp::begin_step`] and must be
/// completed with [`Cpuhp::finish_step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCall {
    /// What to run and where.
    pub invocation: Invocation,
    /// `hotplug/fail` fired for this step: do not run the callback; it counts
    /// as `-EAGAIN` whatever `finish_step` is given.
    pub injected_fail: bool,
    seq: u64,
}

/// One callback that ran (or the injected failure standing in for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executed {
    /// What ran.
    pub invocation: Invocation,
    /// What it returned (`-EAGAIN` when injected).
    pub result: Result<(), Errno>,
    /// Whether `hotplug/fail` stood in for the callback.
    pub injected_fail: bool,
}

/// The result of one [`Cpuhp::step`] / [`Cpuhp::finish_step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    /// One callback ran. `finished` is `Some(result)` when that completed the
    /// operation (the value `cpu_up()`/`cpu_down()` returns).
    Ran {
        /// The callback that ran.
        executed: Executed,
        /// The operation's result, if it is now complete.
        finished: Option<Result<(), HotplugError>>,
    },
    /// No operation is in progress on this CPU.
    Done,
}

impl<E: 'static> Cpuhp<E> {
    // ---- public transition API ---------------------------------------

    /// Models `cpu_up(cpu, target)` → `_cpu_up()`: brings `cpu` up to `target`,
    /// running every callback with `env`, and returns the kernel's result.
    ///
    /// Errors: `-EINVAL` for a CPU that does not exist or a bad target (see
    /// [`Cpuhp::start_cpu_up`]), `-EBUSY` while hotplug is disabled or another
    /// operation is in progress, or the failing callback's error after the
    /// kernel's rollback.
    pub fn cpu_up(&mut self, cpu: CpuId, target: StateId, env: &E) -> Result<(), HotplugError> {
        self.start_cpu_up(cpu, target)?;
        self.run_to_completion(cpu, env)
    }

    /// Models `cpu_down(cpu, target)` → `cpu_down_maps_locked()` →
    /// `_cpu_down()`: takes `cpu` down to `target`. `-EBUSY` if it is the last
    /// online CPU; see [`Cpuhp::start_cpu_down`].
    pub fn cpu_down(&mut self, cpu: CpuId, target: StateId, env: &E) -> Result<(), HotplugError> {
        self.start_cpu_down(cpu, target)?;
        self.run_to_completion(cpu, env)
    }

    /// Steps the operation in progress on `cpu` to its end and returns its
    /// result; `Ok(())` if none is in progress (see [`Cpuhp::last_result`] for
    /// an operation that already finished).
    pub fn run_to_completion(&mut self, cpu: CpuId, env: &E) -> Result<(), HotplugError> {
        self.check_cpu("run_to_completion", cpu, Errno::EINVAL)?;
        while self.in_progress(cpu) {
            if let StepOutcome::Ran {
                finished: Some(result),
                ..
            } = self.step(cpu, env)?
            {
                return result;
            }
        }
        // Nothing was in progress (or it completed without running a
        // callback, which cannot fail).
        Ok(())
    }

    /// Starts `cpu_up(cpu, target)` without running any callback; drive it with
    /// [`Cpuhp::step`] or [`Cpuhp::begin_step`]/[`Cpuhp::finish_step`].
    ///
    /// Returns `Ok(())` without starting anything if the CPU is already at or
    /// above `target` (as `_cpu_up()` does). An operation with no callback to
    /// run completes inside this call.
    ///
    /// Valid targets are `CPUHP_OFFLINE..=CPUHP_BRINGUP_CPU` and
    /// `CPUHP_TEARDOWN_CPU..=CPUHP_ONLINE`. A target inside the STARTING/DYING
    /// section is `-EINVAL`: the kernel cannot stop there (the AP always runs
    /// on to `CPUHP_AP_ONLINE_IDLE` on the way up and to `CPUHP_AP_IDLE_DEAD`
    /// on the way down) and the model refuses rather than imitate that.
    pub fn start_cpu_up(&mut self, cpu: CpuId, target: StateId) -> Result<(), HotplugError> {
        let op = "cpu_up";
        self.check_transition(op, cpu, target)?;
        if self.hotplug_disabled > 0 {
            return Err(HotplugError::Refused {
                op,
                cpu,
                reason: "CPU hotplug is disabled (cpu_hotplug_disabled)",
                errno: Errno::EBUSY,
            });
        }
        let st = &self.cpus[cpu.index()];
        if st.state >= target {
            return Ok(());
        }
        let control = self.cpumask_any_but_online(cpu).unwrap_or(cpu);
        let prev = self.cpuhp_set_state(cpu, target);
        let frame = if prev > CPUHP_BRINGUP_CPU {
            Frame {
                role: Role::UpApKick { prev },
                runner: Runner::Ap,
                bringup: true,
                target,
                nofail: false,
            }
        } else {
            Frame {
                role: Role::UpCallbacks { prev },
                runner: Runner::Bp,
                bringup: true,
                target: target.min(CPUHP_BRINGUP_CPU),
                nofail: false,
            }
        };
        self.begin_operation(cpu, OpKind::Up, prev, target, control, frame);
        Ok(())
    }

    /// Starts `cpu_down(cpu, target)` without running any callback.
    ///
    /// Checks, in the kernel's order: `-EOPNOTSUPP` if offlining is not
    /// supported, `-EBUSY` if hotplug is disabled, `-EBUSY` if no other CPU is
    /// online to act as control CPU or only one CPU is online
    /// (`num_online_cpus() == 1`). Returns `Ok(())` without starting anything
    /// if the CPU is already at or below `target`. Valid targets as for
    /// [`Cpuhp::start_cpu_up`].
    pub fn start_cpu_down(&mut self, cpu: CpuId, target: StateId) -> Result<(), HotplugError> {
        let op = "cpu_down";
        self.check_transition(op, cpu, target)?;
        if self.config.offline_disabled {
            return Err(HotplugError::Refused {
                op,
                cpu,
                reason: "offlining CPUs is not supported on this platform",
                errno: Errno::EOPNOTSUPP,
            });
        }
        if self.hotplug_disabled > 0 {
            return Err(HotplugError::Refused {
                op,
                cpu,
                reason: "CPU hotplug is disabled (cpu_hotplug_disabled)",
                errno: Errno::EBUSY,
            });
        }
        let Some(control) = self.cpumask_any_but_online(cpu) else {
            return Err(HotplugError::Refused {
                op,
                cpu,
                reason: "no other online CPU to run the offline on (last online CPU)",
                errno: Errno::EBUSY,
            });
        };
        if self.num_online_cpus() == 1 {
            return Err(HotplugError::Refused {
                op,
                cpu,
                reason: "only one CPU is online",
                errno: Errno::EBUSY,
            });
        }
        if self.cpus[cpu.index()].state <= target {
            return Ok(());
        }
        let prev = self.cpuhp_set_state(cpu, target);
        let frame = if prev > CPUHP_TEARDOWN_CPU {
            // The AP thread first drives itself down to CPUHP_TEARDOWN_CPU.
            let ap_target = target.max(CPUHP_TEARDOWN_CPU);
            let ap_prev = self.cpuhp_set_state(cpu, ap_target);
            Frame {
                role: Role::DownApKick { prev: ap_prev },
                runner: Runner::Ap,
                bringup: false,
                target: ap_target,
                nofail: false,
            }
        } else {
            Frame {
                role: Role::DownCallbacks { prev },
                runner: Runner::Bp,
                bringup: false,
                target,
                nofail: false,
            }
        };
        self.begin_operation(cpu, OpKind::Down, prev, target, control, frame);
        Ok(())
    }

    /// Whether a `cpu_up()`/`cpu_down()` is in progress on `cpu`.
    pub fn in_progress(&self, cpu: CpuId) -> bool {
        self.cpus.get(cpu.index()).is_some_and(|c| c.op.is_some())
    }

    /// The result of the last operation that finished on `cpu`, if any.
    pub fn last_result(&self, cpu: CpuId) -> Option<&Result<(), HotplugError>> {
        self.cpus
            .get(cpu.index())
            .and_then(|c| c.last_result.as_ref())
    }

    /// Peeks at the callback the next [`Cpuhp::step`] of `cpu` will run
    /// (skipping steps without a callback for the direction), without changing
    /// anything. `None` when no operation is in progress. If a step has been
    /// begun and not finished, returns that step's invocation.
    pub fn next_invocation(&self, cpu: CpuId) -> Option<Invocation> {
        let st = self.cpus.get(cpu.index())?;
        let op = st.op.as_ref()?;
        if let Some(p) = &op.pending {
            return Some(p.invocation.clone());
        }
        let frame = op.stack.last()?;
        let s = self.cpuhp_next_state(cpu, st.state, frame)?;
        Some(self.invocation_for(cpu, op, frame, s, st.rollback, st.target))
    }

    /// Runs exactly one callback of the operation in progress on `cpu` (or the
    /// injected failure in its place), applies the result (rolling back on
    /// failure as the kernel does) and reports what ran. Built on
    /// [`Cpuhp::begin_step`] / [`Cpuhp::finish_step`]; callbacks are called
    /// with `env` while the machine is borrowed, so they cannot call back into
    /// it — use the two-phase form for that.
    pub fn step(&mut self, cpu: CpuId, env: &E) -> Result<StepOutcome, HotplugError> {
        self.check_cpu("step", cpu, Errno::EINVAL)?;
        if !self.in_progress(cpu) {
            return Ok(StepOutcome::Done);
        }
        let call = self.begin_step(cpu)?;
        let result = self.cpuhp_invoke_callback(&call, env);
        self.finish_step(call, result)
    }

    /// Models the call proper of `cpuhp_invoke_callback()`: the step's callback
    /// for its direction, run with `env`, or `-EAGAIN` without calling it when
    /// `hotplug/fail` fired ([`Cpuhp::begin_step`] did the fail check and
    /// `trace_cpuhp_enter()`, [`Cpuhp::finish_step`] does `trace_cpuhp_exit()`).
    fn cpuhp_invoke_callback(&self, call: &StepCall, env: &E) -> Result<(), Errno> {
        if call.injected_fail {
            return Err(Errno::EAGAIN);
        }
        match self.callback_for(call) {
            Some(cb) => cb(env, &call.invocation),
            None => Ok(()),
        }
    }

    /// First half of a step: chooses the next callback like
    /// `cpuhp_next_state()` (so `st->state` reads as the kernel's while the
    /// callback runs: the step itself on the way up, one below it on the way
    /// down), consumes a matching `hotplug/fail` (one-shot) and returns the
    /// call. Run [`Cpuhp::callback_for`] anywhere, then [`Cpuhp::finish_step`].
    ///
    /// `-EINVAL` if no operation is in progress or a step is already begun.
    pub fn begin_step(&mut self, cpu: CpuId) -> Result<StepCall, HotplugError> {
        let op_name = "begin_step";
        self.check_cpu(op_name, cpu, Errno::EINVAL)?;
        let i = cpu.index();
        let Some(op) = self.cpus[i].op.as_ref() else {
            return Err(HotplugError::invalid(
                op_name,
                format!("no hotplug operation in progress on {cpu}"),
            ));
        };
        if op.pending.is_some() {
            return Err(HotplugError::invalid(
                op_name,
                format!("a step of {cpu} is already begun"),
            ));
        }
        let Some(frame) = op.stack.last().copied() else {
            return Err(HotplugError::invalid(
                op_name,
                format!("{cpu}: operation has nothing left to run"),
            ));
        };
        self.step_seq += 1;
        let seq = self.step_seq;
        if let Some(mut op) = self.cpus[i].op.take() {
            self.kick_ap_work_enter(cpu, &mut op);
            self.cpus[i].op = Some(op);
        }
        let op = self.cpus[i].op.as_ref().expect("checked above");
        if let Some(mc) = op.multi.as_ref() {
            // The next instance of the multi-instance call in progress.
            let inv = self.multi_invocation(cpu, op, &frame, mc);
            let ctx = TpContext::of(&inv, self.config.tracepoint_preempt_depth);
            let online = self.cpu_online(ctx.exec_cpu);
            trace::tp_enter(online, ctx, true, cpu, inv.target, inv.state, &inv.fun);
            return Ok(self.begun(cpu, seq, inv, false));
        }
        let Some(s) = self.cpuhp_next_state(cpu, self.cpus[i].state, &frame) else {
            return Err(HotplugError::invalid(
                op_name,
                format!("{cpu}: operation has nothing left to run"),
            ));
        };
        let mut inv = {
            let st = &self.cpus[i];
            self.invocation_for(cpu, op, &frame, s, st.rollback, st.target)
        };
        let multi = self.step_ref(s).is_some_and(|st| st.multi_instance);
        let list = if multi {
            self.step_ref(s)
                .map(|st| st.instances.clone())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let ctx = TpContext::of(&inv, self.config.tracepoint_preempt_depth);
        let online = self.cpu_online(ctx.exec_cpu);
        // cpuhp_next_state(): the state moves over the empty steps, and to the step (up) or one
        // below it (down) before the callback runs.
        self.walk(
            cpu,
            if frame.bringup { StateId(s.0 - 1) } else { s },
            &frame,
        );
        let st = &mut self.cpus[i];
        st.state = if frame.bringup { s } else { StateId(s.0 - 1) };
        // cpuhp_invoke_callback(): the fail check comes first, before any tracepoint.
        let injected = st.fail == s;
        if injected {
            st.fail = CPUHP_INVALID;
            trace::tp_fail_injected(online, ctx, &inv);
            return Ok(self.begun(cpu, seq, inv, true));
        }
        if !multi {
            trace::tp_enter(online, ctx, false, cpu, inv.target, s, &inv.fun);
            return Ok(self.begun(cpu, seq, inv, false));
        }
        let lastp = frame.runner == Runner::Ap;
        let stop = if lastp { st.last } else { None };
        // cpuhp_next_state() only stops here with something to call (or with the fail armed,
        // handled above).
        let Some(&first) = list.first() else {
            return Err(HotplugError::invalid(
                op_name,
                format!("{cpu}: multi-instance state {s} has no instance"),
            ));
        };
        inv.instance = Some(first);
        trace::tp_enter(online, ctx, true, cpu, inv.target, s, &inv.fun);
        if let Some(op) = st.op.as_mut() {
            op.multi = Some(MultiCall {
                state: s,
                bringup: frame.bringup,
                list,
                pos: 0,
                lastp,
                stop,
                done: 0,
                undo: None,
            });
        }
        Ok(self.begun(cpu, seq, inv, false))
    }

    /// Records a begun step as pending and returns its token.
    fn begun(&mut self, cpu: CpuId, seq: u64, inv: Invocation, injected: bool) -> StepCall {
        if let Some(op) = self.cpus[cpu.index()].op.as_mut() {
            op.pending = Some(Pending {
                seq,
                invocation: inv.clone(),
                injected,
            });
        }
        StepCall {
            invocation: inv,
            injected_fail: injected,
            seq,
        }
    }

    /// The invocation of the next node of a multi-instance call in progress: forward, or the
    /// opposite callback while undoing.
    fn multi_invocation(
        &self,
        cpu: CpuId,
        op: &Operation,
        frame: &Frame,
        mc: &MultiCall,
    ) -> Invocation {
        let st = &self.cpus[cpu.index()];
        let mut f = *frame;
        f.bringup = if mc.undo.is_some() {
            !mc.bringup
        } else {
            mc.bringup
        };
        let mut inv = self.invocation_for(
            cpu,
            op,
            &f,
            mc.state,
            st.rollback || mc.undo.is_some(),
            st.target,
        );
        inv.instance = mc.list.get(mc.pos).copied();
        inv
    }

    /// The callback to run for a begun step, or `None` when `hotplug/fail`
    /// stands in for it (the kernel returns `-EAGAIN` without calling it).
    pub fn callback_for(&self, call: &StepCall) -> Option<Callback<E>> {
        if call.injected_fail {
            return None;
        }
        self.step_ref(call.invocation.state)?
            .callback(call.invocation.bringup)
            .cloned()
    }

    /// Second half of a step: applies `result` (ignored and replaced by
    /// `-EAGAIN` for an injected failure) as the end of `cpuhp_invoke_callback()`
    /// and its range's caller would (`trace_cpuhp_exit()`, then the
    /// rollback/continuation the kernel performs), and reports what ran and
    /// whether the operation is now complete. `-EINVAL` for a stale or foreign
    /// `call`.
    pub fn finish_step(
        &mut self,
        call: StepCall,
        result: Result<(), Errno>,
    ) -> Result<StepOutcome, HotplugError> {
        let cpu = call.invocation.cpu;
        self.check_cpu("finish_step", cpu, Errno::EINVAL)?;
        let (mut op, pending) = self.take_pending(cpu, call.seq)?;
        let inv = pending.invocation;
        let result = if pending.injected {
            Err(Errno::EAGAIN)
        } else {
            result
        };
        let nested = self.cpuhp_invoke_callback_exit(cpu, &inv, result, pending.injected);
        // The result of cpuhp_invoke_callback() as a whole, once a multi-instance loop is over.
        let (call_result, failed_inv) = if inv.instance.is_some() && op.multi.is_some() {
            match self.multi_advance(cpu, &mut op, &inv, result) {
                MultiNext::Continue => {
                    let executed = Executed {
                        invocation: inv,
                        result,
                        injected_fail: false,
                    };
                    self.cpus[cpu.index()].op = Some(op);
                    return Ok(StepOutcome::Ran {
                        executed,
                        finished: None,
                    });
                }
                MultiNext::Done(r, failed) => (r, failed),
            }
        } else {
            (result, None)
        };
        match (call_result, op.stack.last().copied()) {
            (_, None) => {}
            (Ok(()), Some(_)) => self.after_success(cpu, &mut op, &inv, nested),
            (Err(errno), Some(frame)) => {
                self.cpuhp_invoke_callback_range_failed(
                    cpu,
                    &mut op,
                    frame,
                    failed_inv.as_ref().unwrap_or(&inv),
                    errno,
                    pending.injected,
                );
            }
        }
        self.settle(cpu, &mut op);
        let executed = Executed {
            invocation: inv,
            result,
            injected_fail: pending.injected,
        };
        let finished = self.end_if_done(cpu, op);
        Ok(StepOutcome::Ran { executed, finished })
    }

    /// Takes `cpu`'s operation and the step begun with token `seq` out of the
    /// machine; `-EINVAL` (and nothing taken) without an operation or for a
    /// stale or foreign token.
    fn take_pending(&mut self, cpu: CpuId, seq: u64) -> Result<(Operation, Pending), HotplugError> {
        let op_name = "finish_step";
        let i = cpu.index();
        let Some(mut op) = self.cpus[i].op.take() else {
            return Err(HotplugError::invalid(
                op_name,
                format!("no hotplug operation in progress on {cpu}"),
            ));
        };
        match op.pending.take() {
            Some(p) if p.seq == seq => Ok((op, p)),
            other => {
                op.pending = other;
                self.cpus[i].op = Some(op);
                Err(HotplugError::invalid(
                    op_name,
                    format!("step token does not match the step begun on {cpu}"),
                ))
            }
        }
    }

    /// The end of `cpuhp_invoke_callback()`: `trace_cpuhp_exit()` with the
    /// state after the call, and the in-memory log's record of it. For a core step whose
    /// callback contains the AP part ([`trace::record_exit_is_deferred`]) both wait for the end
    /// of that part: returns the index of its log record then, which [`Self::close_section`]
    /// completes.
    pub(crate) fn cpuhp_invoke_callback_exit(
        &mut self,
        cpu: CpuId,
        inv: &Invocation,
        result: Result<(), Errno>,
        injected: bool,
    ) -> Option<usize> {
        let state_after = self.cpus[cpu.index()].state;
        let ctx = TpContext::of(inv, self.config.tracepoint_preempt_depth);
        let online = self.cpu_online(ctx.exec_cpu);
        let nests_ap_part = trace::record_exit_is_deferred(inv, &result, injected);
        if injected {
            trace::tp_fail_injected_exit(online, ctx, inv, state_after);
        } else if !nests_ap_part || cfg!(feature = "bug-trace-exit-before-ap-part") {
            trace::tp_exit(online, ctx, cpu, state_after, inv.state, &result);
        }
        self.log.push(LogRecord::Call {
            invocation: inv.clone(),
            result,
            injected,
            state_after,
            nests_ap_part,
        });
        nests_ap_part.then(|| self.log.len() - 1)
    }

    /// Models the error path of `__cpuhp_invoke_callback_range()`: in a
    /// STARTING/DYING range (`cpuhp_invoke_callback_range_nofail()`) the
    /// failure is warned ("STARTING/DYING must not fail!") and the range
    /// carries on; otherwise the range stops, a failure during rollback is
    /// warned, the first error is kept as the operation's result, and the
    /// function that iterated the range handles it ([`Self::returned`]).
    fn cpuhp_invoke_callback_range_failed(
        &mut self,
        cpu: CpuId,
        op: &mut Operation,
        frame: Frame,
        inv: &Invocation,
        errno: Errno,
        injected: bool,
    ) {
        if frame.nofail {
            self.warn(Warning::AtomicCallbackFailed {
                cpu,
                state: inv.state,
                name: inv.name.clone(),
                bringup: inv.bringup,
                errno,
            });
            return;
        }
        if frame.role.is_rollback() {
            self.warn(Warning::RollbackFailed {
                cpu,
                state: inv.state,
                name: inv.name.clone(),
                bringup: inv.bringup,
                errno,
                state_left: self.cpus[cpu.index()].state,
            });
        }
        if op.error.is_none() {
            op.error = Some(HotplugError::CallbackFailed {
                op: op.kind.name(),
                cpu,
                state: inv.state,
                name: inv.name.clone(),
                bringup: inv.bringup,
                errno,
                injected,
            });
        }
        op.stack.pop();
        self.returned(cpu, op, frame.role, Err(()));
    }

    // ---- engine --------------------------------------------------------

    fn check_transition(
        &self,
        op: &'static str,
        cpu: CpuId,
        target: StateId,
    ) -> Result<(), HotplugError> {
        self.check_cpu(op, cpu, Errno::EINVAL)?;
        if !target.in_table() {
            return Err(HotplugError::invalid_state(
                op,
                target.0,
                "target out of range",
            ));
        }
        if CPUHP_AP_IDLE_DEAD <= target && target <= CPUHP_AP_ONLINE {
            return Err(HotplugError::invalid_state(
                op,
                target.0,
                "a CPU cannot stop inside the STARTING/DYING section",
            ));
        }
        if let Some(holder) = self.lock_holder {
            return Err(HotplugError::Busy {
                op,
                holder,
                errno: Errno::EBUSY,
            });
        }
        Ok(())
    }

    fn begin_operation(
        &mut self,
        cpu: CpuId,
        kind: OpKind,
        s0: StateId,
        final_target: StateId,
        control: CpuId,
        frame: Frame,
    ) {
        tracing::debug!(target: "cpuhp", cpu = cpu.0, op = kind.name(), from = s0.0, target = final_target.0, "biosim_cpuhp_op");
        self.log.push(LogRecord::OpStart {
            cpu,
            op: kind.name(),
            from: s0,
            target: final_target,
        });
        self.lock_holder = Some(cpu);
        let mut op = Operation {
            kind,
            s0,
            final_target,
            control,
            stack: vec![frame],
            error: None,
            pending: None,
            done: None,
            multi: None,
            section: None,
            kick_enter: None,
        };
        if let Role::DownApKick { prev } = frame.role {
            op.kick_enter = Some((frame.target, prev));
        }
        self.settle(cpu, &mut op);
        let _ = self.end_if_done(cpu, op);
    }

    /// Stores `op` back, or ends it if it is done; returns its result then.
    fn end_if_done(&mut self, cpu: CpuId, mut op: Operation) -> Option<Result<(), HotplugError>> {
        let i = cpu.index();
        let Some(result) = op.done.take() else {
            self.cpus[i].op = Some(op);
            return None;
        };
        let ret = result.as_ref().map(|_| ()).map_err(HotplugError::errno);
        // `ret` as the kernel's `int`: 0 or -errno, with the errno's name.
        let ret_text = match &ret {
            Ok(()) => "0".to_owned(),
            Err(e) => format!("{} ({})", e.as_neg_i32(), e.neg_str()),
        };
        tracing::debug!(target: "cpuhp", cpu = cpu.0, op = op.kind.name(), ret = %ret_text, "biosim_cpuhp_op");
        self.log.push(LogRecord::OpEnd {
            cpu,
            op: op.kind.name(),
            result: ret,
            state: self.cpus[i].state,
        });
        self.lock_holder = None;
        self.cpus[i].last_result = Some(result.clone());
        Some(result)
    }

    /// Models `cpuhp_next_state()` without its side effect: the next step of
    /// `frame` from `state` with a callback for its direction, if the range
    /// has one before its target ([`Cpuhp::begin_step`] then moves `st->state`).
    ///
    /// A multi-instance state with nothing to call (no instance, or, in the AP thread, its first
    /// instance is `st->last`) is passed over like an empty step unless `hotplug/fail` is armed
    /// at it: the kernel's call would invoke and trace nothing, so the model saves the step.
    /// [`Self::walk`] clears `st->last` where that call would have.
    fn cpuhp_next_state(&self, cpu: CpuId, state: StateId, frame: &Frame) -> Option<StateId> {
        let st = &self.cpus[cpu.index()];
        let runs = |s: StateId| {
            self.has_cb(s, frame.bringup) && (st.fail == s || !self.nothing_to_call(cpu, s, frame))
        };
        if frame.bringup {
            ((state.0 + 1)..=frame.target.0)
                .map(StateId)
                .find(|&s| runs(s))
        } else {
            ((frame.target.0 + 1)..=state.0)
                .rev()
                .map(StateId)
                .find(|&s| runs(s))
        }
    }

    /// Whether `s` is a multi-instance state whose instance loop would call nothing.
    fn nothing_to_call(&self, cpu: CpuId, s: StateId, frame: &Frame) -> bool {
        let Some(step) = self.step_ref(s) else {
            return false;
        };
        if !step.multi_instance {
            return false;
        }
        match step.instances.first() {
            None => true,
            Some(&first) => {
                frame.runner == Runner::Ap && self.cpus[cpu.index()].last == Some(first)
            }
        }
    }

    /// Moves `st->state` to `to` over states the model passes over. A multi-instance state
    /// among them that has a callback for the direction was a call in the kernel, which ends
    /// with `if (lastp) *lastp = NULL` in the AP thread.
    fn walk(&mut self, cpu: CpuId, to: StateId, frame: &Frame) {
        let i = cpu.index();
        let from = self.cpus[i].state;
        let range = if frame.bringup {
            (from.0 + 1)..=to.0
        } else {
            (to.0 + 1)..=from.0
        };
        if frame.runner == Runner::Ap
            && range.into_iter().map(StateId).any(|s| {
                self.has_cb(s, frame.bringup)
                    && self.step_ref(s).is_some_and(|st| st.multi_instance)
            })
        {
            self.cpus[i].last = None;
        }
        self.cpus[i].state = to;
    }

    fn invocation_for(
        &self,
        cpu: CpuId,
        op: &Operation,
        frame: &Frame,
        s: StateId,
        rollback: bool,
        target: StateId,
    ) -> Invocation {
        let (runs_on, task) = match frame.runner {
            Runner::Ap => (
                RunsOn::Target {
                    irqs_off: s.cpuhp_is_atomic_state(),
                },
                Task::CpuhpThread(cpu),
            ),
            // notify_cpu_starting() in the AP's idle task, take_cpu_down() in its stopper.
            Runner::Atomic if frame.bringup => (RunsOn::Target { irqs_off: true }, Task::Idle(cpu)),
            Runner::Atomic => (RunsOn::Target { irqs_off: true }, Task::Stopper(cpu)),
            Runner::Bp => (RunsOn::Control { cpu: op.control }, op.bp_task()),
        };
        Invocation {
            cpu,
            state: s,
            name: self.step_name(s),
            bringup: frame.bringup,
            rollback,
            runs_on,
            target,
            origin: Origin::Hotplug,
            core: self
                .step_ref(s)
                .is_some_and(|st| st.kind == crate::table::StepKind::Core),
            fun: self.step_fun(s, frame.bringup),
            instance: None,
            task,
        }
    }

    /// One instance call of a [`MultiCall`] returned `result`: the instance loop of
    /// `cpuhp_invoke_callback()` carries on, stops (leaving the failed node in `st->last` when
    /// called with `lastp`), or undoes the instances done (`err:`, without `lastp`).
    fn multi_advance(
        &mut self,
        cpu: CpuId,
        op: &mut Operation,
        inv: &Invocation,
        result: Result<(), Errno>,
    ) -> MultiNext {
        let i = cpu.index();
        let Some(mc) = op.multi.as_mut() else {
            return MultiNext::Done(result, None);
        };
        if let Some(undo) = mc.undo.as_mut() {
            if let Err(errno) = result {
                // "Rollback must not fail": WARN_ON_ONCE, and the loop carries on.
                let w = Warning::InstanceRollbackFailed {
                    cpu,
                    state: inv.state,
                    name: inv.name.clone(),
                    bringup: inv.bringup,
                    errno,
                };
                undo.remaining -= 1;
                mc.pos += 1;
                let over = undo.remaining == 0;
                self.warn(w);
                if !over {
                    return MultiNext::Continue;
                }
            } else {
                undo.remaining -= 1;
                mc.pos += 1;
                if undo.remaining > 0 {
                    return MultiNext::Continue;
                }
            }
            let undo = op.multi.take().and_then(|mc| mc.undo).expect("undoing");
            // The original error is returned (the rollback's own result is only warned).
            return MultiNext::Done(Err(undo.errno), Some(undo.failed));
        }
        match result {
            Ok(()) => {
                mc.done += 1;
                mc.pos += 1;
                if let Some(&next) = mc.list.get(mc.pos) {
                    if !(mc.lastp && Some(next) == mc.stop) {
                        return MultiNext::Continue;
                    }
                }
                if mc.lastp {
                    self.cpus[i].last = None;
                }
                op.multi = None;
                MultiNext::Done(Ok(()), None)
            }
            Err(errno) => {
                if mc.lastp {
                    self.cpus[i].last = mc.list.get(mc.pos).copied();
                    op.multi = None;
                    return MultiNext::Done(Err(errno), None);
                }
                if mc.done == 0 || !self.has_cb(mc.state, !mc.bringup) {
                    op.multi = None;
                    return MultiNext::Done(Err(errno), None);
                }
                mc.undo = Some(MultiUndo {
                    remaining: mc.done,
                    errno,
                    failed: inv.clone(),
                });
                mc.pos = 0;
                MultiNext::Continue
            }
        }
    }

    /// The end of the `cpuhp_invoke_callback()` of a core step whose callback contained the AP
    /// part, now that the part ended with `result` (`cpuhp_bringup_ap()` returns the AP's error,
    /// `takedown_cpu()` succeeds): `st->state` is where the part left the CPU. The one place the
    /// deferred exit happens: its `cpuhp_exit`, the result and state of its [`LogRecord::Call`],
    /// and the [`LogRecord::Exit`] that shows it in the log's order. With the
    /// `bug-trace-exit-before-ap-part` twin both the tracepoint and the record keep what they
    /// were when the callback proper returned.
    fn close_section(&mut self, cpu: CpuId, op: &mut Operation, result: Result<(), Errno>) {
        let Some(Section { step, record }) = op.section.take() else {
            return;
        };
        let state = self.cpus[cpu.index()].state;
        if !cfg!(feature = "bug-trace-exit-before-ap-part") {
            let ctx = op.bp_context(self.config.tracepoint_preempt_depth);
            trace::tp_exit(
                self.cpu_online(ctx.exec_cpu),
                ctx,
                cpu,
                state,
                step,
                &result,
            );
            // The log may have been taken meanwhile: complete the record only if it is still
            // there.
            if let Some(LogRecord::Call {
                invocation,
                result: r,
                state_after,
                nests_ap_part: true,
                ..
            }) = self.log.get_mut(record)
            {
                if invocation.cpu == cpu && invocation.state == step {
                    *r = result;
                    *state_after = state;
                }
            }
        }
        self.log.push(LogRecord::Exit {
            cpu,
            state,
            step,
            result,
        });
    }

    /// `cpuhp_kick_ap_work()`'s `trace_cpuhp_enter(cpu, st->target, prev_state, ...)`, if not
    /// fired yet.
    fn kick_ap_work_enter(&mut self, cpu: CpuId, op: &mut Operation) {
        let Some((target, prev)) = op.kick_enter.take() else {
            return;
        };
        let ctx = op.bp_context(self.config.tracepoint_preempt_depth);
        trace::tp_enter(
            self.cpu_online(ctx.exec_cpu),
            ctx,
            false,
            cpu,
            target,
            prev,
            "cpuhp_kick_ap_work",
        );
        self.log.push(LogRecord::KickApWork {
            cpu,
            target,
            step: prev,
            control: op.control,
        });
    }

    /// The `cpuhp_exit` of `cpuhp_kick_ap_work()`: the AP part of a `cpu_down()` ended.
    fn kick_ap_work_exit(
        &mut self,
        cpu: CpuId,
        op: &mut Operation,
        prev: StateId,
        result: Result<(), Errno>,
    ) {
        // An AP part without a callback: the enter has not fired.
        self.kick_ap_work_enter(cpu, op);
        let state = self.cpus[cpu.index()].state;
        let ctx = op.bp_context(self.config.tracepoint_preempt_depth);
        trace::tp_exit(
            self.cpu_online(ctx.exec_cpu),
            ctx,
            cpu,
            state,
            prev,
            &result,
        );
        self.log.push(LogRecord::Exit {
            cpu,
            state,
            step: prev,
            result,
        });
    }

    /// Ends ranges that have nothing left and performs what their callers do
    /// next, until a callback is ready or the operation is done.
    fn settle(&mut self, cpu: CpuId, op: &mut Operation) {
        let i = cpu.index();
        while op.done.is_none() {
            let Some(frame) = op.stack.last().copied() else {
                // Every path ends the operation explicitly; be safe anyway.
                op.done = Some(op.error.clone().map_or(Ok(()), Err));
                return;
            };
            if self
                .cpuhp_next_state(cpu, self.cpus[i].state, &frame)
                .is_some()
            {
                return;
            }
            // cpuhp_next_state() walks the remaining empty steps to the target.
            let st = &self.cpus[i];
            if (frame.bringup && st.state < frame.target)
                || (!frame.bringup && st.state > frame.target)
            {
                self.walk(cpu, frame.target, &frame);
            }
            op.stack.pop();
            self.returned(cpu, op, frame.role, Ok(()));
        }
    }

    /// Side effects of core steps that succeeded: [`Self::bringup_cpu`] and
    /// [`Self::takedown_cpu`], for the call whose exit [`Self::cpuhp_invoke_callback_exit`]
    /// deferred (`nested`: its log record).
    fn after_success(
        &mut self,
        cpu: CpuId,
        op: &mut Operation,
        inv: &Invocation,
        nested: Option<usize>,
    ) {
        let Some(record) = nested else {
            return;
        };
        op.section = Some(Section {
            step: inv.state,
            record,
        });
        if inv.bringup {
            self.bringup_cpu(cpu, op);
        } else {
            self.takedown_cpu(cpu, op);
        }
    }

    /// Models the `CPUHP_BRINGUP_CPU` startup, the first half of what 6.18 x86_64 runs there:
    /// `cpuhp_bringup_ap()` (the split-startup path; `bringup_cpu()` on kernels without
    /// `CONFIG_HOTPLUG_SPLIT_STARTUP`, as `down-up-clean.trace` of the tracefs reference shows):
    /// the AP boots and runs the STARTING range itself with IRQs off (`notify_cpu_starting()`).
    /// [`Self::cpuhp_bringup_ap`] models the rest.
    fn bringup_cpu(&mut self, cpu: CpuId, op: &mut Operation) {
        let target = self.cpus[cpu.index()].target.min(CPUHP_AP_ONLINE);
        op.stack.push(Frame {
            role: Role::Starting,
            runner: Runner::Atomic,
            bringup: true,
            target,
            nofail: true,
        });
    }

    /// Models `takedown_cpu()` (`CPUHP_TEARDOWN_CPU` teardown): the CPU leaves
    /// `cpu_online_mask` (`__cpu_disable()`) and runs the DYING range under
    /// `stop_machine` (`take_cpu_down()`).
    fn takedown_cpu(&mut self, cpu: CpuId, op: &mut Operation) {
        self.set_cpu_online(cpu, false);
        let target = self.cpus[cpu.index()].target.max(CPUHP_AP_OFFLINE);
        op.stack.push(Frame {
            role: Role::Dying,
            runner: Runner::Atomic,
            bringup: false,
            target,
            nofail: true,
        });
    }

    /// What the kernel function that iterated a finished range does next.
    /// `result` is `Err(())` when the range stopped on a failure (the error
    /// itself is in `op.error`).
    fn returned(&mut self, cpu: CpuId, op: &mut Operation, role: Role, result: Result<(), ()>) {
        match role {
            Role::UpApKick { prev } => {
                if self.cpuhp_kick_ap(cpu, op, prev, result, AfterApRollback::Finish) {
                    self.finish(op);
                }
            }
            Role::DownApKick { prev } => {
                let then = AfterApRollback::FinishKickApWork { prev };
                if self.cpuhp_kick_ap(cpu, op, prev, result, then) {
                    self.kick_ap_work_exit(cpu, op, prev, Ok(()));
                    self.cpu_down_after_ap(cpu, op);
                }
            }
            Role::BringupKick { prev } => {
                // On success cpuhp_bringup_ap() returns 0 and the BP range carries on.
                if self.cpuhp_kick_ap(cpu, op, prev, result, AfterApRollback::BringupFailed) {
                    self.close_section(cpu, op, Ok(()));
                }
            }
            Role::ApRollback { then } => self.cpuhp_kick_ap_rolled_back(cpu, op, then),
            Role::UpCallbacks { prev } => self.cpuhp_up_callbacks(cpu, op, prev, result),
            Role::DownCallbacks { prev } => self.cpuhp_down_callbacks(cpu, op, prev, result),
            Role::UpCallbacksRollback | Role::ReUp => self.finish(op),
            Role::DownCallbacksRollback => self.after_down_callbacks_failed(cpu, op),
            Role::Starting => self.cpuhp_bringup_ap(cpu, op),
            Role::Dying => {
                self.cpuhp_report_idle_dead(cpu);
                self.close_section(cpu, op, Ok(()));
            }
        }
    }

    /// Models `cpuhp_kick_ap()` once the AP thread (`cpuhp_thread_fun()`)
    /// finished its range: on failure, `cpuhp_reset_state()` and a second
    /// `__cpuhp_kick_ap()` that runs the AP back (`then` says what follows).
    /// Returns whether the range succeeded.
    fn cpuhp_kick_ap(
        &mut self,
        cpu: CpuId,
        op: &mut Operation,
        prev: StateId,
        result: Result<(), ()>,
        then: AfterApRollback,
    ) -> bool {
        if result.is_ok() {
            return true;
        }
        self.cpuhp_reset_state(cpu, prev);
        let st = &self.cpus[cpu.index()];
        op.stack.push(Frame {
            role: Role::ApRollback { then },
            runner: Runner::Ap,
            bringup: st.bringup,
            target: st.target,
            nofail: false,
        });
        false
    }

    /// `cpuhp_kick_ap()` returns the AP's error once its rollback ran: to
    /// `_cpu_up()`/`_cpu_down()`, or to `bringup_cpu()`, whose BP range then
    /// fails at `CPUHP_BRINGUP_CPU`.
    fn cpuhp_kick_ap_rolled_back(&mut self, cpu: CpuId, op: &mut Operation, then: AfterApRollback) {
        let errno = op.error.as_ref().map_or(Errno::EIO, HotplugError::errno);
        match then {
            AfterApRollback::Finish => {
                self.finish(op);
                return;
            }
            AfterApRollback::FinishKickApWork { prev } => {
                self.kick_ap_work_exit(cpu, op, prev, Err(errno));
                self.finish(op);
                return;
            }
            AfterApRollback::BringupFailed => self.close_section(cpu, op, Err(errno)),
        }
        let Some(parent) = op.stack.pop() else {
            self.finish(op);
            return;
        };
        if parent.role.is_rollback() {
            self.warn(Warning::RollbackFailed {
                cpu,
                state: CPUHP_BRINGUP_CPU,
                name: self.step_name(CPUHP_BRINGUP_CPU),
                bringup: true,
                errno: op.error.as_ref().map_or(Errno::EIO, HotplugError::errno),
                state_left: self.cpus[cpu.index()].state,
            });
        }
        self.returned(cpu, op, parent.role, Err(()));
    }

    /// `_cpu_down()` after `cpuhp_kick_ap_work()` succeeded: "We might have
    /// stopped still in the range of the AP hotplug thread"; otherwise the BP
    /// goes on with `cpuhp_down_callbacks()` to the final target.
    fn cpu_down_after_ap(&mut self, cpu: CpuId, op: &mut Operation) {
        let i = cpu.index();
        if self.cpus[i].state > CPUHP_TEARDOWN_CPU {
            self.finish(op);
            return;
        }
        self.cpus[i].target = op.final_target;
        let prev = self.cpus[i].state;
        op.stack.push(Frame {
            role: Role::DownCallbacks { prev },
            runner: Runner::Bp,
            bringup: false,
            target: op.final_target,
            nofail: false,
        });
    }

    /// Models `cpuhp_up_callbacks()` once its range returned: done, or on
    /// failure `cpuhp_reset_state()` and the teardowns back down to `prev`.
    fn cpuhp_up_callbacks(
        &mut self,
        cpu: CpuId,
        op: &mut Operation,
        prev: StateId,
        result: Result<(), ()>,
    ) {
        if result.is_ok() {
            self.finish(op);
            return;
        }
        self.cpuhp_reset_state(cpu, prev);
        op.stack.push(Frame {
            role: Role::UpCallbacksRollback,
            runner: Runner::Bp,
            bringup: false,
            target: prev,
            nofail: false,
        });
    }

    /// Models `cpuhp_down_callbacks()` once its range returned: done, or on
    /// failure `cpuhp_reset_state()` and the startups back up to `prev` (if
    /// any step was torn down), then the tail of `_cpu_down()`.
    fn cpuhp_down_callbacks(
        &mut self,
        cpu: CpuId,
        op: &mut Operation,
        prev: StateId,
        result: Result<(), ()>,
    ) {
        if result.is_ok() {
            self.finish(op);
            return;
        }
        self.cpuhp_reset_state(cpu, prev);
        if self.cpus[cpu.index()].state < prev {
            op.stack.push(Frame {
                role: Role::DownCallbacksRollback,
                runner: Runner::Bp,
                bringup: true,
                target: prev,
                nofail: false,
            });
        } else {
            self.after_down_callbacks_failed(cpu, op);
        }
    }

    /// Models the tail of `cpuhp_bringup_ap()`, after the STARTING range: the AP marks
    /// itself online (`set_cpu_online()` in its `start_secondary()`),
    /// `cpuhp_online_idle()` moves it straight to `CPUHP_AP_ONLINE_IDLE`, and
    /// `cpuhp_kick_ap()` runs the ONLINE section if the target is above that.
    fn cpuhp_bringup_ap(&mut self, cpu: CpuId, op: &mut Operation) {
        let i = cpu.index();
        self.set_cpu_online(cpu, true);
        self.cpus[i].state = CPUHP_AP_ONLINE_IDLE;
        let target = self.cpus[i].target;
        if target > CPUHP_AP_ONLINE_IDLE {
            let prev = self.cpuhp_set_state(cpu, target);
            op.stack.push(Frame {
                role: Role::BringupKick { prev },
                runner: Runner::Ap,
                bringup: true,
                target,
                nofail: false,
            });
        } else {
            self.close_section(cpu, op, Ok(()));
        }
    }

    /// Models `cpuhp_report_idle_dead()`: after `take_cpu_down()` the dead
    /// CPU's idle task reports `CPUHP_AP_IDLE_DEAD`.
    fn cpuhp_report_idle_dead(&mut self, cpu: CpuId) {
        self.cpus[cpu.index()].state = CPUHP_AP_IDLE_DEAD;
    }

    /// The tail of `_cpu_down()` once `cpuhp_down_callbacks()` failed.
    fn after_down_callbacks_failed(&mut self, cpu: CpuId, op: &mut Operation) {
        let i = cpu.index();
        let state = self.cpus[i].state;
        if state < op.s0 {
            if state == CPUHP_TEARDOWN_CPU {
                // "CPU refused to die": the AP brings itself back up.
                self.cpuhp_reset_state(cpu, op.s0);
                let st = &self.cpus[i];
                op.stack.push(Frame {
                    role: Role::ReUp,
                    runner: Runner::Ap,
                    bringup: st.bringup,
                    target: st.target,
                    nofail: false,
                });
                return;
            }
            self.warn(Warning::DeadCallbackError {
                cpu,
                state_left: state,
            });
        }
        self.finish(op);
    }

    fn finish(&mut self, op: &mut Operation) {
        op.stack.clear();
        op.done = Some(op.error.clone().map_or(Ok(()), Err));
    }

    /// Models `set_cpu_online()`: the CPU's bit in `cpu_online_mask`, logged
    /// when it changes.
    fn set_cpu_online(&mut self, cpu: CpuId, online: bool) {
        let st = &mut self.cpus[cpu.index()];
        if st.online != online {
            st.online = online;
            self.log.push(LogRecord::Online { cpu, online });
        }
    }

    /// Models `cpuhp_set_state()`: starts a transition towards `target` and
    /// returns the previous state.
    pub(crate) fn cpuhp_set_state(&mut self, cpu: CpuId, target: StateId) -> StateId {
        let st = &mut self.cpus[cpu.index()];
        let prev = st.state;
        let bringup = st.state < target;
        st.rollback = false;
        st.target = target;
        st.bringup = bringup;
        st.dying = !bringup;
        prev
    }

    /// Models `cpuhp_reset_state()`: turns a failed transition into its
    /// rollback towards `prev_state`. The state adjustment of
    /// `cpuhp_next_state()` is undone so the failed step's own opposite
    /// callback is not called (unless the `bug-rollback-calls-failed-state`
    /// feature is on).
    pub(crate) fn cpuhp_reset_state(&mut self, cpu: CpuId, prev_state: StateId) {
        let st = &mut self.cpus[cpu.index()];
        st.target = prev_state;
        if st.rollback {
            return;
        }
        st.rollback = true;
        // "If we have st->last we need to undo partial multi_instance of this state first.
        // Otherwise start undo at the previous state."
        if !cfg!(feature = "bug-rollback-calls-failed-state") && st.last.is_none() {
            if st.bringup {
                st.state = StateId(st.state.0 - 1);
            } else {
                st.state = StateId(st.state.0 + 1);
            }
        }
        st.bringup = !st.bringup;
        st.dying = !st.bringup;
    }
}
