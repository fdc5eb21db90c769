//! Scenario transitions: the steps a finding check, the proptest state machine or a scenario file
//! applies to a [`Sim`]. Each is something that can happen on a real machine; one that cannot happen
//! now (a completion on an offline CPU, a second hotplug operation) is skipped, not an error.

use crate::machine::oracle::Need;
use crate::machine::sim::{CompletionContext, Sim};
use bio_core::block::ReqOp;
use bio_core::kernel::CpuId;
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

impl Sim {
    /// Applies one transition; returns whether it happened (`false`: not possible now, skipped).
    pub fn apply(&self, t: &Transition) -> bool {
        let n = self.kernel.nr_cpus();
        if self.rt.recording() {
            self.rt.note(format!("   >>> {t}"));
        }
        match *t {
            Transition::Complete { cpu, ctx, need } if cpu < n => {
                self.complete(CpuId(cpu), ctx, need, ReqOp::Write).is_some()
            }
            Transition::RunWorker { cpu } if cpu < n => self.run_worker(CpuId(cpu)),
            Transition::Tick => {
                self.tick();
                true
            }
            Transition::Hotplug { cpu, up, fail_at } if cpu < n => self
                .hotplug_start(CpuId(cpu), up, fail_at.map(StateId))
                .is_ok(),
            Transition::HotplugStep => self.hotplug_step(),
            Transition::NeedResched { cpu } if cpu < n => {
                match self.rt.cpu(CpuId(cpu)) {
                    Some(cx) => cx.set_need_resched(true),
                    None => return false,
                }
                true
            }
            Transition::LoopIo {
                cpu,
                op,
                block,
                fill,
            } if cpu < n => self
                .loop_rig()
                .is_some_and(|r| r.submit(self.parts(), cpu, op, block, fill)),
            Transition::LoopWorker { cpu } if cpu < n => self
                .loop_rig()
                .is_some_and(|r| r.run_worker(self.parts(), cpu)),
            _ => false,
        }
    }
}
