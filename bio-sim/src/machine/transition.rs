//! Scenario transitions: the steps a finding check, the proptest state machine or a scenario file
//! applies to a [`Sim`]. Each is something that can happen on a real machine; one that cannot happen
//! now (a completion on an offline CPU, a second hotplug operation) is refused: [`Sim::try_apply`]
//! says why (a scenario file makes that an error unless the line says `try`), [`Sim::apply`] (the
//! generators') skips it.

use crate::machine::oracle::Need;
use crate::machine::sim::{CompletionContext, Sim};
use bio_core::block::ReqOp;
use bio_core::kernel::CpuId;
use bio_core::workqueue::PoolId;
use hotplug::StateId;
use std::fmt;

/// One transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transition {
    /// Complete a new bio on `cpu` from `ctx`.
    Complete {
        /// The CPU.
        cpu: u32,
        /// The context `bio_endio()` runs in.
        ctx: CompletionContext,
        /// Whether and how the bio asks for task context.
        need: Need,
    },
    /// Run one item of `cpu`'s worker pool.
    RunWorker {
        /// The CPU.
        cpu: u32,
    },
    /// Advance a jiffy and fire due timers.
    Tick,
    /// Start `cpu_down` (or `cpu_up`) of `cpu`, optionally with `hotplug/fail` armed at a state.
    Hotplug {
        /// The CPU.
        cpu: u32,
        /// Up instead of down.
        up: bool,
        /// The state to fail at.
        fail_at: Option<i32>,
    },
    /// Run the next step of the hotplug operation in progress.
    HotplugStep,
    /// Set `TIF_NEED_RESCHED` on `cpu` (a task wants the CPU).
    NeedResched {
        /// The CPU.
        cpu: u32,
    },
    /// Submit one block's I/O to the scenario's loop device from `cpu`'s task context.
    LoopIo {
        /// The CPU.
        cpu: u32,
        /// Read, write or discard.
        op: crate::machine::loop_rig::LoopOp,
        /// The block (4 KiB).
        block: u32,
        /// The byte a write fills the block with.
        fill: u8,
    },
    /// One run of the loop device's worker (its unbound workqueue) on `cpu`.
    LoopWorker {
        /// The CPU.
        cpu: u32,
    },
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transition::Complete { cpu, ctx, need } => write!(
                f,
                "complete a {} bio on CPU{cpu} from {ctx}",
                match need {
                    Need::Any => "plain",
                    Need::Flag => "BIO_COMPLETE_IN_TASK",
                    Need::Dynamic => "bio_complete_in_task()",
                }
            ),
            Transition::RunWorker { cpu } => write!(f, "run CPU{cpu}'s worker"),
            Transition::Tick => f.write_str("advance a jiffy"),
            Transition::Hotplug { cpu, up, fail_at } => {
                write!(f, "{} CPU{cpu}", if *up { "cpu_up" } else { "cpu_down" })?;
                if let Some(s) = fail_at {
                    write!(f, " with hotplug/fail={s}")?;
                }
                Ok(())
            }
            Transition::HotplugStep => f.write_str("one hotplug step"),
            Transition::NeedResched { cpu } => write!(f, "set need_resched on CPU{cpu}"),
            Transition::LoopIo {
                cpu,
                op,
                block,
                fill,
            } => {
                write!(f, "{op} loop0 block {block} from CPU{cpu}")?;
                if *op == crate::machine::loop_rig::LoopOp::Write {
                    write!(f, " (fill {fill:#04x})")?;
                }
                Ok(())
            }
            Transition::LoopWorker { cpu } => write!(f, "run loop0's worker on CPU{cpu}"),
        }
    }
}

/// Why a transition could not happen at that moment (see [`Sim::try_apply`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

fn refuse<T>(why: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(why.into()))
}

impl Sim {
    /// Applies one transition; returns whether it happened (`false`: not possible now, skipped).
    /// The lenient form the generators use: a `hotplug/fail` value sysfs refuses is left unarmed
    /// (the trace says so) and the operation still starts.
    pub fn apply(&self, t: &Transition) -> bool {
        self.apply_inner(t, false).is_ok()
    }

    /// Applies one transition, or says why it cannot happen now: the CPU does not exist or is
    /// offline (a completion, `need_resched`, loop I/O), the CPU's worker pool has nothing to run,
    /// the loop worker has nothing to run, no hotplug operation is in progress (`step`), sysfs
    /// refuses the `hotplug/fail` value, or the hotplug operation itself is refused (another in
    /// progress, the CPU already in the target state, the last online CPU). A refused transition
    /// changes nothing but the trace.
    pub fn try_apply(&self, t: &Transition) -> Result<(), Refusal> {
        self.apply_inner(t, true)
    }

    fn apply_inner(&self, t: &Transition, strict_fail: bool) -> Result<(), Refusal> {
        let n = self.kernel.nr_cpus();
        if self.rt.recording() {
            self.rt.note(format!("   >>> {t}"));
        }
        let cpu = match *t {
            Transition::Complete { cpu, .. }
            | Transition::RunWorker { cpu }
            | Transition::Hotplug { cpu, .. }
            | Transition::NeedResched { cpu }
            | Transition::LoopIo { cpu, .. }
            | Transition::LoopWorker { cpu } => Some(cpu),
            Transition::Tick | Transition::HotplugStep => None,
        };
        if let Some(c) = cpu {
            if c >= n {
                return refuse(format!("CPU{c} does not exist"));
            }
        }
        let offline = |c: u32| format!("CPU{c} is offline");
        match *t {
            Transition::Complete { cpu, ctx, need } => {
                if !self.kernel.cpu_online(CpuId(cpu)) {
                    return refuse(offline(cpu));
                }
                match self.complete(CpuId(cpu), ctx, need, ReqOp::Write) {
                    Some(_) => Ok(()),
                    None => refuse(format!("CPU{cpu} cannot run {ctx} now")),
                }
            }
            Transition::RunWorker { cpu } => {
                if self.kernel.pool(PoolId::Cpu(CpuId(cpu))).is_none() {
                    return refuse(format!("CPU{cpu} has no worker pool"));
                }
                if self.run_worker(CpuId(cpu)) {
                    Ok(())
                } else {
                    refuse(format!("CPU{cpu}'s worker pool has nothing to run"))
                }
            }
            Transition::Tick => {
                self.tick();
                Ok(())
            }
            Transition::Hotplug { cpu, up, fail_at } => {
                if let (true, Some(s)) = (strict_fail, fail_at) {
                    if let Err(e) = self.kernel.hotplug().set_fail(CpuId(cpu), s) {
                        return refuse(format!("hotplug/fail={s} refused: {e}"));
                    }
                }
                self.hotplug_start(CpuId(cpu), up, fail_at.map(StateId))
                    .or_else(|e| refuse(e.to_string()))
            }
            Transition::HotplugStep => {
                if self.kernel.hotplug_ops_in_progress().is_empty() {
                    return refuse("no hotplug operation is in progress");
                }
                if self.hotplug_step() {
                    Ok(())
                } else {
                    refuse("the hotplug operation cannot take a step now")
                }
            }
            Transition::NeedResched { cpu } => match self.rt.cpu(CpuId(cpu)) {
                Some(cx) => {
                    cx.set_need_resched(true);
                    Ok(())
                }
                None => refuse(offline(cpu)),
            },
            Transition::LoopIo {
                cpu,
                op,
                block,
                fill,
            } => {
                let Some(r) = self.loop_rig() else {
                    return refuse("there is no loop device");
                };
                if !self.kernel.cpu_online(CpuId(cpu)) {
                    return refuse(offline(cpu));
                }
                if r.submit(self.parts(), cpu, op, block, fill) {
                    Ok(())
                } else {
                    refuse(format!("loop0 cannot take the {op} now"))
                }
            }
            Transition::LoopWorker { cpu } => {
                let Some(r) = self.loop_rig() else {
                    return refuse("there is no loop device");
                };
                if r.run_worker(self.parts(), cpu) {
                    Ok(())
                } else {
                    refuse("loop0's worker has nothing to run")
                }
            }
        }
    }
}
