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
    /// `fail_alloc SITE`: arm a one-shot allocation failure at `SITE` (one of
    /// `bio_core::kernel::fault_inject::ALLOC_SITES`): the next allocation there fails.
    FailAlloc {
        /// The allocation site.
        site: &'static str,
    },
    /// `fail_io DEV`: the next bio submitted to `DEV` fails with `BLK_STS_IOERR`
    /// (`fail_make_request`'s one-shot).
    FailIo {
        /// The device's disk name (`loop0`, `nullb0`, a stacked lower device).
        dev: &'static str,
    },
    /// `plug N`: `blk_start_plug()` in CPU N's submitter; its I/O is held until `unplug N`.
    Plug {
        /// The CPU.
        cpu: u32,
    },
    /// `unplug N`: `blk_finish_plug()` in CPU N's submitter: the plugged requests dispatch.
    Unplug {
        /// The CPU.
        cpu: u32,
    },
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
    /// Write `state` to `cpuN/hotplug/fail` now (`fail_store()`'s rules; also mid-operation, on
    /// this CPU or another; -1 disarms). The failure fires at the armed state's next callback on
    /// this CPU, once.
    Fail {
        /// The CPU.
        cpu: u32,
        /// The state to fail at, or -1.
        state: i32,
    },
    /// Write `state` to `cpuN/hotplug/target` (`target_store()`'s rules): start a stepped
    /// `cpu_up`/`cpu_down` of `cpu` that stops at `state`.
    Target {
        /// The CPU.
        cpu: u32,
        /// The state to stop at.
        state: i32,
    },
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
    /// `nullb0`'s earliest pending hrtimer expires (`irqmode=2`): its interrupt is raised on the
    /// CPU that submitted the request, for the runtime to deliver.
    NullbTimer,
    /// `fsfreeze -f` on the loop device's backing file system: `freeze_super()` on its
    /// superblock from task context on the lowest online CPU.
    FreezeBacking,
    /// `fsfreeze -u`: `thaw_super()` on the backing's superblock, likewise.
    ThawBacking,
    /// `blk_mq_freeze_queue()` then `blk_mq_unfreeze_queue()` on loop0's request queue, from task
    /// context on the lowest online CPU, as `LOOP_SET_STATUS` and `LOOP_CLR_FD` (`losetup -d`) do
    /// around their update: the freeze waits until every request in flight has ended.
    FreezeLoopQueue,
    /// `locks CPU CONTEXT KIND:NAME...`: a `lib/locking-selftest.c`-style sequence: the locks
    /// taken nested in order on `cpu` in `ctx`, then released in reverse, through lockdep.
    LockSeq {
        /// The CPU.
        cpu: u32,
        /// The context the locks are taken in.
        ctx: crate::machine::locks::LockContext,
        /// The locks, outermost first (interned: see [`crate::machine::locks::intern_steps`]).
        steps: &'static [crate::machine::locks::LockStep],
    },
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transition::FailAlloc { site } => {
                write!(f, "arm a one-shot allocation failure at {site}")
            }
            Transition::FailIo { dev } => {
                write!(f, "arm a one-shot BLK_STS_IOERR for the next bio to {dev}")
            }
            Transition::Plug { cpu } => write!(f, "blk_start_plug() on CPU{cpu}"),
            Transition::Unplug { cpu } => write!(f, "blk_finish_plug() on CPU{cpu}"),
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
            Transition::Fail { cpu, state } => {
                write!(f, "write {state} to CPU{cpu}'s hotplug/fail")
            }
            Transition::Target { cpu, state } => {
                write!(f, "write {state} to CPU{cpu}'s hotplug/target")
            }
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
            Transition::NullbTimer => f.write_str("expire nullb0's next hrtimer"),
            Transition::FreezeBacking => f.write_str("freeze loop0's backing file system"),
            Transition::ThawBacking => f.write_str("thaw loop0's backing file system"),
            Transition::FreezeLoopQueue => {
                f.write_str("freeze and unfreeze loop0's request queue (LOOP_SET_STATUS)")
            }
            Transition::LockSeq { cpu, ctx, steps } => {
                write!(f, "on CPU{cpu} in {}: take", ctx.word())?;
                for s in *steps {
                    write!(f, " {s}")?;
                }
                f.write_str(", then release in reverse")
            }
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

/// Why a transition is refused, as data: [`Sim::apply`] (the generators' lenient form, run for
/// every transition of every explore case) only asks whether it happened, so the text is built
/// only when [`Sim::try_apply`] returns it (formatting every refusal was some 4% of a case).
#[derive(Debug)]
enum Why {
    /// A fixed reason.
    Text(&'static str),
    /// A reason already built by the callee (plug, lock sequence, fault injection).
    Built(String),
    /// The CPU does not exist.
    NoCpu(u32),
    /// The CPU is offline.
    Offline(u32),
    /// The completion context cannot run on the CPU now.
    CannotRun(u32, CompletionContext),
    /// The CPU has no worker pool.
    NoPool(u32),
    /// The CPU's worker pool has nothing to run.
    PoolIdle(u32),
    /// The hotplug operation was refused.
    Hotplug(hotplug::HotplugError),
    /// sysfs refused the `hotplug/fail` value.
    FailRefused(i32, hotplug::HotplugError),
    /// sysfs refused the `hotplug/target` value.
    TargetRefused(i32, hotplug::HotplugError),
    /// loop0 cannot take the operation now.
    LoopBusy(crate::machine::loop_rig::LoopOp),
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::Text(t) => f.write_str(t),
            Why::Built(t) => f.write_str(t),
            Why::NoCpu(c) => write!(f, "CPU{c} does not exist"),
            Why::Offline(c) => write!(f, "CPU{c} is offline"),
            Why::CannotRun(c, ctx) => write!(f, "CPU{c} cannot run {ctx} now"),
            Why::NoPool(c) => write!(f, "CPU{c} has no worker pool"),
            Why::PoolIdle(c) => write!(f, "CPU{c}'s worker pool has nothing to run"),
            Why::Hotplug(e) => write!(f, "{e}"),
            Why::FailRefused(s, e) => write!(f, "hotplug/fail={s} refused: {e}"),
            Why::TargetRefused(s, e) => write!(f, "hotplug/target={s} refused: {e}"),
            Why::LoopBusy(op) => write!(f, "loop0 cannot take the {op} now"),
        }
    }
}

fn refuse<T>(why: Why) -> Result<T, Why> {
    Err(why)
}

fn built<T>(why: String) -> Result<T, Why> {
    Err(Why::Built(why))
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
    /// refuses the `hotplug/fail` value (`fail=`, [`Transition::Fail`]) or the `hotplug/target`
    /// value ([`Transition::Target`]: unnamed or `cant_stop` state; another operation in
    /// progress, where the kernel's write would wait for `device_hotplug_lock`), or the hotplug operation itself is refused (another in progress, the CPU already
    /// in the target state, the last online CPU). A refused transition changes nothing but the
    /// trace.
    pub fn try_apply(&self, t: &Transition) -> Result<(), Refusal> {
        self.apply_inner(t, true)
            .map_err(|why| Refusal(why.to_string()))
    }

    fn apply_inner(&self, t: &Transition, strict_fail: bool) -> Result<(), Why> {
        let n = self.kernel.nr_cpus();
        if self.rt.recording() {
            let line = format!("   >>> {t}");
            // The I/O lines name the scenario's device: loop0, or nullb0.
            match self.loop_rig() {
                Some(r) if r.is_nullb() => self.rt.note(line.replace("loop0", "nullb0")),
                _ => self.rt.note(line),
            }
        }
        let cpu = match *t {
            Transition::Plug { cpu } | Transition::Unplug { cpu } => Some(cpu),
            Transition::FailAlloc { .. } | Transition::FailIo { .. } => None,
            Transition::Complete { cpu, .. }
            | Transition::RunWorker { cpu }
            | Transition::Hotplug { cpu, .. }
            | Transition::Fail { cpu, .. }
            | Transition::Target { cpu, .. }
            | Transition::NeedResched { cpu }
            | Transition::LoopIo { cpu, .. }
            | Transition::LoopWorker { cpu }
            | Transition::LockSeq { cpu, .. } => Some(cpu),
            Transition::Tick
            | Transition::HotplugStep
            | Transition::NullbTimer
            | Transition::FreezeBacking
            | Transition::ThawBacking
            | Transition::FreezeLoopQueue => None,
        };
        if let Some(c) = cpu {
            if c >= n {
                return refuse(Why::NoCpu(c));
            }
        }
        self.apply_now(t, strict_fail)
    }

    fn apply_now(&self, t: &Transition, strict_fail: bool) -> Result<(), Why> {
        let offline = Why::Offline;
        match *t {
            // Both sites and devices were checked when the line was parsed (a generator only
            // names known ones): arming cannot be refused.
            Transition::FailAlloc { site } => self
                .kernel
                .fault_inject()
                .fail_alloc_once(site)
                .or_else(|e| built(e.to_string())),
            Transition::FailIo { dev } => self
                .kernel
                .fault_inject()
                .fail_io_once(dev)
                .or_else(|e| built(e.to_string())),
            Transition::Plug { cpu } => {
                if !self.kernel.cpu_online(CpuId(cpu)) {
                    return refuse(offline(cpu));
                }
                self.plug(CpuId(cpu)).or_else(built)
            }
            Transition::Unplug { cpu } => self.unplug(CpuId(cpu)).or_else(built),
            Transition::Complete { cpu, ctx, need } => {
                if !self.kernel.cpu_online(CpuId(cpu)) {
                    return refuse(offline(cpu));
                }
                match self.complete(CpuId(cpu), ctx, need, ReqOp::Write) {
                    Some(_) => Ok(()),
                    None => refuse(Why::CannotRun(cpu, ctx)),
                }
            }
            Transition::RunWorker { cpu } => {
                if self.kernel.pool(PoolId::Cpu(CpuId(cpu))).is_none() {
                    return refuse(Why::NoPool(cpu));
                }
                if self.run_worker(CpuId(cpu)) {
                    Ok(())
                } else {
                    refuse(Why::PoolIdle(cpu))
                }
            }
            Transition::Tick => {
                self.tick();
                Ok(())
            }
            Transition::Hotplug { cpu, up, fail_at } => {
                if let (true, Some(s)) = (strict_fail, fail_at) {
                    if let Err(e) = self.kernel.hotplug().set_fail(CpuId(cpu), s) {
                        return refuse(Why::FailRefused(s, e));
                    }
                }
                self.hotplug_start(CpuId(cpu), up, fail_at.map(StateId))
                    .map_err(Why::Hotplug)
            }
            Transition::Fail { cpu, state } => self
                .hotplug_fail(CpuId(cpu), state)
                .map_err(|e| Why::FailRefused(state, e)),
            Transition::Target { cpu, state } => self
                .hotplug_target(CpuId(cpu), state)
                .map_err(|e| Why::TargetRefused(state, e)),
            Transition::HotplugStep => {
                if self.kernel.hotplug_ops_in_progress().is_empty() {
                    return refuse(Why::Text("no hotplug operation is in progress"));
                }
                if self.hotplug_step() {
                    Ok(())
                } else {
                    refuse(Why::Text("the hotplug operation cannot take a step now"))
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
                    return refuse(Why::Text("there is no loop device"));
                };
                if !self.kernel.cpu_online(CpuId(cpu)) {
                    return refuse(offline(cpu));
                }
                if self.with_plug(CpuId(cpu), || r.submit(self.parts(), cpu, op, block, fill)) {
                    Ok(())
                } else {
                    refuse(Why::LoopBusy(op))
                }
            }
            Transition::LoopWorker { cpu } => {
                let Some(r) = self.loop_rig() else {
                    return refuse(Why::Text("there is no loop device"));
                };
                if r.run_worker(self.parts(), cpu) {
                    Ok(())
                } else {
                    refuse(Why::Text("loop0's worker has nothing to run"))
                }
            }
            Transition::NullbTimer => match self.loop_rig() {
                Some(r) if r.fire_nullb_timer() => Ok(()),
                Some(_) => refuse(Why::Text("nullb0 has no pending hrtimer")),
                None => refuse(Why::Text("there is no null_blk device")),
            },
            Transition::FreezeBacking | Transition::ThawBacking => match self.loop_rig() {
                Some(r) => r
                    .freeze_backing(self.parts(), *t == Transition::FreezeBacking)
                    .or_else(built),
                None => refuse(Why::Text("there is no loop device")),
            },
            Transition::FreezeLoopQueue => match self.loop_rig() {
                Some(r) => r.freeze_loop_queue(self.parts()).or_else(built),
                None => refuse(Why::Text("there is no loop device")),
            },
            Transition::LockSeq { cpu, ctx, steps } => {
                if !self.kernel.cpu_online(CpuId(cpu)) {
                    return refuse(offline(cpu));
                }
                self.lock_seq(CpuId(cpu), ctx, steps).or_else(built)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::sim::SimConfig;
    use hotplug::{CPUHP_OFFLINE, CPUHP_ONLINE};

    fn sim(cpus: u32) -> Sim {
        Sim::new(SimConfig {
            nr_cpus: cpus,
            online: cpus,
            ..SimConfig::default()
        })
        .unwrap()
    }

    fn state(s: &Sim, cpu: u32) -> i32 {
        s.kernel.hotplug().state(CpuId(cpu)).unwrap().0
    }

    fn fail(s: &Sim, cpu: u32) -> i32 {
        s.kernel.hotplug().fail(CpuId(cpu)).unwrap()
    }

    /// Steps the operation in progress to its end; returns its result as text.
    fn finish(s: &Sim, cpu: u32) -> String {
        while !s.kernel.hotplug_ops_in_progress().is_empty() {
            s.try_apply(&Transition::HotplugStep).unwrap();
        }
        format!("{:?}", s.kernel.hotplug().last_result(CpuId(cpu)))
    }

    fn down(cpu: u32) -> Transition {
        Transition::Hotplug {
            cpu,
            up: false,
            fail_at: None,
        }
    }

    /// A machine without a trace (explore's) builds none of its notes, and one with a trace has
    /// them all: the header with the variant's knobs, the sysfs writes, the operations.
    #[test]
    fn notes_are_built_only_for_a_machine_with_a_trace() {
        for trace in [true, false] {
            let s = Sim::new(SimConfig {
                nr_cpus: 2,
                online: 2,
                trace,
                ..SimConfig::default()
            })
            .unwrap();
            let built = std::cell::Cell::new(0);
            s.rt.note_with(|| {
                built.set(built.get() + 1);
                "   (a note)".into()
            });
            s.try_apply(&Transition::Hotplug {
                cpu: 1,
                up: false,
                fail_at: Some(144),
            })
            .unwrap();
            let r = finish(&s, 1);
            assert!(
                r.contains("Err") && r.contains("144"),
                "the armed fail fired: {r}"
            );
            let t = s.trace();
            assert_eq!(built.get(), u32::from(trace), "{t}");
            if trace {
                for line in [
                    "# biosim: variant v7 (list=",
                    "(a note)",
                    "echo 144 > /sys/devices/system/cpu/cpu1/hotplug/fail",
                    "cpu_down(CPU1, CPUHP_OFFLINE)",
                ] {
                    assert!(t.contains(line), "{line} in {t}");
                }
            } else {
                assert_eq!(t.trim(), "", "no trace");
            }
        }
    }

    /// `fail` written after down_prep ran takes effect at the armed (lower) state: the teardown
    /// there fails, the operation rolls back to where it started, and the knob is consumed.
    #[test]
    fn fail_mid_operation_fires_at_the_armed_state_and_rolls_back() {
        let s = sim(2);
        s.try_apply(&down(1)).unwrap();
        s.try_apply(&Transition::HotplugStep).unwrap(); // block/bio:complete:online (197)
        assert_eq!(state(&s, 1), 196);
        s.try_apply(&Transition::Fail { cpu: 1, state: 187 })
            .unwrap();
        assert_eq!(fail(&s, 1), 187);
        let r = finish(&s, 1);
        assert!(r.contains("Err") && r.contains("187"), "{r}");
        assert_eq!(state(&s, 1), CPUHP_ONLINE.0, "rolled back to CPUHP_ONLINE");
        assert!(s.kernel.cpu_online(CpuId(1)));
        assert_eq!(fail(&s, 1), -1, "one-shot");
        let t = s.trace();
        assert!(
            t.contains("echo 187 > /sys/devices/system/cpu/cpu1/hotplug/fail"),
            "{t}"
        );
        // -1 disarms, also mid-operation.
        s.try_apply(&down(1)).unwrap();
        s.try_apply(&Transition::Fail { cpu: 1, state: 187 })
            .unwrap();
        s.try_apply(&Transition::Fail { cpu: 1, state: -1 })
            .unwrap();
        assert_eq!(finish(&s, 1), "Some(Ok(()))");
        assert_eq!(state(&s, 1), CPUHP_OFFLINE.0);
    }

    /// A fail armed for a state the operation already passed does nothing for it: the operation
    /// completes, and the knob stays armed for the next invocation of that state.
    #[test]
    fn fail_for_a_state_already_passed_does_nothing_for_this_operation() {
        let s = sim(2);
        s.try_apply(&down(1)).unwrap();
        // 197, then the early dynamic states' no-op teardowns, then 187.
        while state(&s, 1) >= 187 {
            s.try_apply(&Transition::HotplugStep).unwrap();
        }
        s.try_apply(&Transition::Fail { cpu: 1, state: 197 })
            .unwrap();
        assert_eq!(finish(&s, 1), "Some(Ok(()))");
        assert_eq!(state(&s, 1), CPUHP_OFFLINE.0);
        assert!(!s.kernel.cpu_online(CpuId(1)));
        assert_eq!(fail(&s, 1), 197, "still armed");
        // The next operation through 197 meets it: cpu_up fails there and rolls back.
        s.try_apply(&Transition::Hotplug {
            cpu: 1,
            up: true,
            fail_at: None,
        })
        .unwrap();
        let r = finish(&s, 1);
        assert!(r.contains("Err") && r.contains("197"), "{r}");
        assert_eq!(fail(&s, 1), -1);
    }

    /// `target` stops at its state (neither online nor offline in hotplug terms; `hotplug/state`
    /// reads it), and a later `target` or `cpu_up` continues from there.
    #[test]
    fn target_stops_at_the_state_and_a_later_operation_continues() {
        let s = sim(2);
        s.try_apply(&Transition::Target { cpu: 1, state: 186 })
            .unwrap();
        assert!(
            s.kernel.hotplug_in_progress(CpuId(1)),
            "a stepped operation"
        );
        assert_eq!(finish(&s, 1), "Some(Ok(()))");
        assert_eq!(state(&s, 1), 186);
        assert_eq!(s.kernel.hotplug().target(CpuId(1)).unwrap().0, 186);
        assert!(s.kernel.cpu_online(CpuId(1)), "still in cpu_online_mask");
        let t = s.trace();
        assert!(
            t.contains("echo 186 > /sys/devices/system/cpu/cpu1/hotplug/target")
                && t.contains("cpu_down(CPU1, 186)"),
            "{t}"
        );
        // The current state: a no-op the kernel accepts.
        s.try_apply(&Transition::Target { cpu: 1, state: 186 })
            .unwrap();
        assert!(s.kernel.hotplug_ops_in_progress().is_empty());
        // Lower, then back up part of the way with `target`, then fully with `cpu_up`.
        s.try_apply(&Transition::Target { cpu: 1, state: 150 })
            .unwrap();
        finish(&s, 1);
        assert_eq!(state(&s, 1), 150);
        s.try_apply(&Transition::Target { cpu: 1, state: 187 })
            .unwrap();
        assert_eq!(finish(&s, 1), "Some(Ok(()))");
        assert_eq!(state(&s, 1), 187);
        s.try_apply(&Transition::Hotplug {
            cpu: 1,
            up: true,
            fail_at: None,
        })
        .unwrap();
        assert_eq!(finish(&s, 1), "Some(Ok(()))");
        assert_eq!(state(&s, 1), CPUHP_ONLINE.0);
        // Offline, then up to a partial state.
        s.try_apply(&down(1)).unwrap();
        finish(&s, 1);
        s.try_apply(&Transition::Target { cpu: 1, state: 186 })
            .unwrap();
        assert_eq!(finish(&s, 1), "Some(Ok(()))");
        assert_eq!(state(&s, 1), 186);
    }

    #[test]
    fn refusals_say_why_and_change_nothing() {
        let s = sim(3);
        // fail_store(): with the CPU up, nothing at or below CPUHP_BRINGUP_CPU; no atomic state;
        // no state without callbacks.
        let e = s
            .try_apply(&Transition::Fail { cpu: 1, state: 0 })
            .unwrap_err();
        assert!(e.0.starts_with("hotplug/fail=0 refused:"), "{e}");
        assert!(e.0.contains("cannot fail while the CPU is up"), "{e}");
        let e = s
            .try_apply(&Transition::Fail { cpu: 1, state: 87 })
            .unwrap_err();
        assert!(e.0.contains("STARTING/DYING"), "{e}");
        let e = s
            .try_apply(&Transition::Fail { cpu: 1, state: 160 })
            .unwrap_err();
        assert!(e.0.contains("no callbacks"), "{e}");
        assert_eq!(fail(&s, 1), -1);
        // target_store(): a cant_stop or unnamed step.
        let e = s
            .try_apply(&Transition::Target { cpu: 1, state: 144 })
            .unwrap_err();
        assert!(e.0.starts_with("hotplug/target=144 refused:"), "{e}");
        assert!(e.0.contains("cant_stop"), "{e}");
        let e = s
            .try_apply(&Transition::Target { cpu: 1, state: 160 })
            .unwrap_err();
        assert!(e.0.contains("no name"), "{e}");
        let e = s
            .try_apply(&Transition::Target { cpu: 5, state: 0 })
            .unwrap_err();
        assert!(e.0.contains("CPU5 does not exist"), "{e}");
        assert!(s.kernel.hotplug_ops_in_progress().is_empty());
        // target while an operation is in progress (on another CPU, or this one): the write
        // would wait for device_hotplug_lock (lock_device_hotplug_sysfs()), no errno.
        s.try_apply(&down(2)).unwrap();
        for cpu in [1, 2] {
            let e = s
                .try_apply(&Transition::Target { cpu, state: 186 })
                .unwrap_err();
            assert!(e.0.contains("would wait"), "{e}");
            assert!(e.0.contains("device_hotplug_lock"), "{e}");
            assert!(!e.0.contains("EBUSY"), "{e}");
        }
        // fail takes no lock: armed for CPU1 while CPU2's operation runs.
        s.try_apply(&Transition::Fail { cpu: 1, state: 187 })
            .unwrap();
        assert_eq!(fail(&s, 1), 187);
        assert_eq!(finish(&s, 2), "Some(Ok(()))");
        assert_eq!(state(&s, 1), CPUHP_ONLINE.0);
        // The lenient form skips a refusal too.
        assert!(!s.apply(&Transition::Target { cpu: 1, state: 144 }));
    }
}
