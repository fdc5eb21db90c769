//! The model's side of a calibration: a `hotplug::Cpuhp` with the table learned from the live
//! kernel (`Cpuhp::from_listing`, callbacks that succeed), driven by the same writes the live run
//! made: `fail_store()` ([`hotplug::Cpuhp::set_fail`]), then `cpu_down(cpu, CPUHP_OFFLINE)` or
//! `cpu_up(cpu, CPUHP_ONLINE)` as `device_offline()`/`device_online()` (drivers/base/core.c) call
//! them for a write to `cpuN/online`.
//!
//! The callbacks it ran are read from its log ([`hotplug::LogRecord::Call`]) as the live trace
//! would show them: no entry for an injected failure (the kernel returns before
//! `trace_cpuhp_enter()`), none for a STARTING/DYING callback (tracepoints do not fire on a CPU
//! outside `cpu_online_mask`), none for a multi-instance step with no instances; the calls of a
//! multi-instance step's instances are one entry with their count. A step whose
//! callback contains the AP part (`cpuhp_bringup_ap()`, `takedown_cpu()`) has the result it
//! returns once that part ended, as its `cpuhp_exit` shows.

use hotplug::{
    CallbackMap, CpuId, Cpuhp, LogRecord, Origin, RunsOn, StateId, StatesListing, CPUHP_OFFLINE,
    CPUHP_ONLINE,
};

use super::recording::FailWrite;
use super::{Case, Observed, Op, Outcome, Ran};

/// A deliberately wrong model, to show the comparison catches it (the buggy twins of the replay
/// test).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Twin {
    /// The model as it is.
    None,
    /// The table without one callback: `(step, startup?)`.
    DropCallback(i32, bool),
    /// A `fail` that stays armed after it fired (the one-shot `st->fail = CPUHP_INVALID` of
    /// `cpuhp_invoke_callback()` forgotten).
    FailNotConsumed,
    /// The result of `cpuhp_bringup_ap()`/`takedown_cpu()` read when their callback proper
    /// returned, before the AP part they contain ran (departure D1: a failed online shows step
    /// 83 succeeding).
    ExitBeforeApPart,
    /// The table with one instance fewer at this multi-instance step (both directions).
    DropInstance(i32),
}

/// The model set up for one machine.
#[derive(Debug, Clone)]
pub struct Model {
    listing: StatesListing,
    map: CallbackMap,
    cpu: CpuId,
    nr_cpus: u32,
    twin: Twin,
}

/// The lowest value the `fail` sweep writes: one below `CPUHP_INVALID`.
pub const SWEEP_FROM: i32 = -2;

impl Model {
    /// The model of a machine with `nr_cpus` CPUs whose CPU `cpu` is calibrated, its table from
    /// `listing` and `map`. Errors: a listing or map the hotplug crate refuses, a CPU that is 0 or
    /// not below `nr_cpus`.
    pub fn new(
        listing: &str,
        map: CallbackMap,
        cpu: u32,
        nr_cpus: u32,
        twin: Twin,
    ) -> Result<Model, String> {
        if cpu == 0 || cpu >= nr_cpus {
            return Err(format!(
                "CPU{cpu} cannot be calibrated on a machine of {nr_cpus} CPUs (never CPU0)"
            ));
        }
        let listing = StatesListing::parse(listing).map_err(|e| e.to_string())?;
        let mut map = map;
        if let Twin::DropInstance(step) = twin {
            if let Some(c) = map.get_mut(&StateId(step)) {
                for info in [&mut c.startup, &mut c.teardown].into_iter().flatten() {
                    if info.multi_instance {
                        info.instances = info.instances.saturating_sub(1);
                    }
                }
            }
        }
        if let Twin::DropCallback(step, bringup) = twin {
            if let Some(c) = map.get_mut(&StateId(step)) {
                if bringup {
                    c.startup = None;
                } else {
                    c.teardown = None;
                }
                if c.startup.is_none() && c.teardown.is_none() {
                    map.remove(&StateId(step));
                }
            }
        }
        let m = Model {
            listing,
            map,
            cpu: CpuId(cpu),
            nr_cpus,
            twin,
        };
        m.machine()?;
        Ok(m)
    }

    /// The callback map the table was built from.
    pub fn map(&self) -> &CallbackMap {
        &self.map
    }

    /// A fresh machine: every CPU online at `CPUHP_ONLINE`.
    fn machine(&self) -> Result<Cpuhp<()>, String> {
        Cpuhp::from_listing(self.nr_cpus, self.nr_cpus, &self.listing, &self.map)
            .map_err(|e| e.to_string())
    }

    /// A fresh machine with the CPU online (`Op::Down`'s start) or taken offline (`Op::Up`'s).
    fn machine_at(&self, online: bool) -> Result<Cpuhp<()>, String> {
        let mut hp = self.machine()?;
        if !online {
            hp.cpu_down(self.cpu, CPUHP_OFFLINE, &())
                .map_err(|e| format!("the model's clean offline of {}: {e}", self.cpu))?;
        }
        hp.take_log();
        Ok(hp)
    }

    /// What `fail_store()` answers to every value of `SWEEP_FROM..=CPUHP_ONLINE`, the CPU online
    /// and offline (an accepted value is cleared again with -1 before the next).
    pub fn fail_writes(&self) -> Result<Vec<FailWrite>, String> {
        let mut up = self.machine_at(true)?;
        let mut down = self.machine_at(false)?;
        let mut out = Vec::new();
        for value in SWEEP_FROM..=CPUHP_ONLINE.0 {
            let write = |hp: &mut Cpuhp<()>| {
                let r = hp.set_fail(self.cpu, value).map_err(|e| e.errno());
                let _ = hp.set_fail(self.cpu, -1);
                r
            };
            out.push(FailWrite {
                value,
                online: write(&mut up),
                offline: write(&mut down),
            });
        }
        Ok(out)
    }

    /// Runs one case on a fresh machine.
    pub fn run(&self, case: Case) -> Result<Outcome, String> {
        let mut hp = self.machine_at(case.op == Op::Down)?;
        let fail_write = hp.set_fail(self.cpu, case.fail).map_err(|e| e.errno());
        let ret = match case.op {
            Op::Down => hp.cpu_down(self.cpu, CPUHP_OFFLINE, &()),
            Op::Up => hp.cpu_up(self.cpu, CPUHP_ONLINE, &()),
        }
        .map_err(|e| e.errno());
        if self.twin == Twin::FailNotConsumed && fail_write.is_ok() {
            let _ = hp.set_fail(self.cpu, case.fail);
        }
        // device_online()/device_offline(): dev->offline changes only when the operation succeeds.
        let online = if ret.is_ok() {
            case.op == Op::Up
        } else {
            case.op == Op::Down
        };
        let err = |e: hotplug::HotplugError| e.to_string();
        let observed = Observed {
            fail_write,
            ret,
            state: hp.state(self.cpu).map_err(err)?.0,
            target: hp.target(self.cpu).map_err(err)?.0,
            fail: hp.fail(self.cpu).map_err(err)?,
            online,
            in_mask: hp.cpu_online(self.cpu),
        };
        let (callbacks, failed) = self.traced(hp.log());
        Ok(Outcome {
            observed,
            callbacks,
            failed,
        })
    }

    /// The callbacks of the log a live trace would show (see the module documentation), and the
    /// ones that failed by themselves.
    fn traced(&self, log: &[LogRecord]) -> (Vec<Ran>, Vec<(i32, i32)>) {
        let mut ran: Vec<Ran> = Vec::new();
        let mut failed = Vec::new();
        let mut last_instance = false;
        for rec in log {
            let LogRecord::Call {
                invocation: inv,
                result,
                injected,
                nests_ap_part,
                ..
            } = rec
            else {
                continue;
            };
            let result = if *nests_ap_part && self.twin == Twin::ExitBeforeApPart {
                &Ok(())
            } else {
                result
            };
            if *injected
                || inv.origin != Origin::Hotplug
                || inv.runs_on == (RunsOn::Target { irqs_off: true })
            {
                continue;
            }
            let Some(info) = self.map.get(&inv.state).and_then(|c| c.get(inv.bringup)) else {
                continue;
            };
            if let Err(e) = result {
                failed.push((inv.state.0, e.as_neg_i32()));
            }
            // The instance calls of one multi-instance call follow each other: one entry.
            if let Some(prev) = ran.last_mut().filter(|p: &&mut Ran| {
                inv.instance.is_some()
                    && last_instance
                    && p.step == inv.state.0
                    && p.bringup == inv.bringup
                    && p.rollback == inv.rollback
            }) {
                prev.instances += 1;
                continue;
            }
            last_instance = inv.instance.is_some();
            ran.push(Ran {
                step: inv.state.0,
                bringup: inv.bringup,
                rollback: inv.rollback,
                function: info.function.clone(),
                instances: 1,
            });
        }
        (ran, failed)
    }
}
