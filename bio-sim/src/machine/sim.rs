//! A simulated machine ready for scenarios: a kernel with the task-completion batcher of one
//! variant, the deterministic runtime, and the oracle watching both.
//!
//! Scenario code (the finding checks, the proptest state machine, `biosim` scenarios) drives it with
//! [`Transition`](crate::machine::transition::Transition)s and asks the oracle after each one.

use crate::machine::oracle::{Invariant, Need, Oracle, Violation};
use crate::runtime::deterministic::{DetConfig, DetRuntime};
use bio_core::block::complete_in_task::{bio_complete_init, BatcherObserver, InitError, Variant};
use bio_core::block::{bio_endio, ReqOp};
use bio_core::kernel::{ConfigError, ContextKind, CpuId};
use bio_core::workqueue::{PoolId, RescuerAffinity};
use bio_core::{Kernel, KernelConfig};
use hotplug::{HotplugError, StateId, CPUHP_OFFLINE, CPUHP_ONLINE};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// How a simulated machine is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimConfig {
    /// The kernel configuration.
    pub kernel: KernelConfig,
    /// Possible CPUs.
    pub nr_cpus: u32,
    /// CPUs online at boot.
    pub online: u32,
    /// The batcher version.
    pub variant: Variant,
    /// Where rescuers run (the kernel's way by default).
    pub rescuer: RescuerAffinity,
    /// The deterministic runtime's seed.
    pub seed: u64,
    /// Keep a trace (slower; for reading counterexamples).
    pub trace: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            kernel: KernelConfig::default(),
            nr_cpus: 2,
            online: 2,
            variant: Variant::DEFAULT,
            rescuer: RescuerAffinity::PoolCpu,
            seed: 0,
            trace: true,
        }
    }
}

/// Why a machine could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// The kernel config or CPU counts were refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The batcher could not be initialised.
    #[error(transparent)]
    Init(#[from] InitError),
}

/// Where a completion runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompletionContext {
    /// A hard interrupt handler (NVMe, virtio-blk, buffer_head writeback).
    Hardirq,
    /// The block softirq (`blk_complete_reqs()`).
    Softirq,
    /// Task context with preemption disabled (under a spinlock).
    AtomicTask,
    /// Preemptible task context (a threaded IRQ handler without RCU, a kworker).
    Task,
}

impl CompletionContext {
    /// Every context.
    pub const ALL: [CompletionContext; 4] =
        [Self::Hardirq, Self::Softirq, Self::AtomicTask, Self::Task];

    fn kind(self) -> ContextKind {
        match self {
            Self::Hardirq => ContextKind::Hardirq,
            Self::Softirq => ContextKind::Softirq,
            Self::AtomicTask => ContextKind::TaskPreemptDisabled,
            Self::Task => ContextKind::Task,
        }
    }
}

impl fmt::Display for CompletionContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Hardirq => "hardirq",
            Self::Softirq => "softirq",
            Self::AtomicTask => "atomic task",
            Self::Task => "preemptible task",
        })
    }
}

/// Two batcher observers as one: the oracle, then another.
struct Tee(Arc<Oracle>, Arc<dyn BatcherObserver>);

impl BatcherObserver for Tee {
    fn deferred(&self, bio: u64, cx: &bio_core::Cpu) {
        self.0.deferred(bio, cx);
        self.1.deferred(bio, cx);
    }

    fn work_fn(&self, batch_cpu: CpuId, cx: &bio_core::Cpu) {
        self.0.work_fn(batch_cpu, cx);
        self.1.work_fn(batch_cpu, cx);
    }

    fn scheduled(&self, batch_cpu: CpuId, queued: bool) {
        self.0.scheduled(batch_cpu, queued);
        self.1.scheduled(batch_cpu, queued);
    }

    fn hotplug(
        &self,
        callback: bio_core::block::complete_in_task::BatchCallback,
        target: CpuId,
        cx: &bio_core::Cpu,
    ) {
        self.0.hotplug(callback, target, cx);
        self.1.hotplug(callback, target, cx);
    }
}

/// A machine under test.
pub struct Sim {
    /// The kernel.
    pub kernel: Arc<Kernel>,
    /// The deterministic runtime over it.
    pub rt: DetRuntime,
    /// The oracle.
    pub oracle: Arc<Oracle>,
    config: SimConfig,
    loop_rig: std::sync::OnceLock<crate::machine::loop_rig::LoopRig>,
    /// How many lines of the kernel's fault log are already in the trace (see
    /// [`Sim::note_faults`]).
    faults_noted: std::cell::Cell<usize>,
    /// Each CPU's submitter plug between `plug N` and `unplug N` (`current->plug` of `biosim/N`):
    /// parked here while the submitter is off the CPU, so a worker or IRQ thread that runs on
    /// that CPU meanwhile does not see it as its own.
    plugs: std::cell::RefCell<
        BTreeMap<
            u32,
            (
                bio_core::block::blk_plug::PlugToken,
                bio_core::block::blk_plug::BlkPlug,
            ),
        >,
    >,
}

impl fmt::Debug for Sim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim").field("config", &self.config).finish()
    }
}

impl Sim {
    /// Boots the kernel, initialises the batcher with the oracle as its observer, and starts the
    /// deterministic runtime.
    pub fn new(config: SimConfig) -> Result<Self, SimError> {
        Self::with_observer(config, None)
    }

    /// [`Sim::new`] with a second batcher observer beside the oracle (e.g. counters for a
    /// summary): both see every callback, the oracle first.
    pub fn with_observer(
        config: SimConfig,
        extra: Option<Arc<dyn BatcherObserver>>,
    ) -> Result<Self, SimError> {
        let kernel = Kernel::boot(config.kernel, config.nr_cpus, config.online)?;
        kernel.set_rescuer_affinity(config.rescuer);
        // The run's seed also seeds fault injection, so a seed reproduces every injected fault;
        // seed 0 keeps the kernel's default PRNG seed.
        kernel.fault_inject().reseed(Self::fault_seed(config.seed));
        // The hung-task detector of a distribution kernel (`CONFIG_DEFAULT_HUNG_TASK_TIMEOUT`).
        kernel.set_hung_task_timeout_secs(120);
        let oracle = Arc::new(Oracle::new());
        let observer: Arc<dyn BatcherObserver> = match extra {
            None => oracle.clone(),
            Some(extra) => Arc::new(Tee(Arc::clone(&oracle), extra)),
        };
        bio_complete_init(&kernel, config.variant, Some(observer))?;
        let rt = DetRuntime::new(
            Arc::clone(&kernel),
            DetConfig {
                seed: config.seed,
                record_steps: config.trace,
                capture_trace: config.trace,
                ..DetConfig::default()
            },
        );
        rt.note_with(|| {
            format!(
                "# biosim: variant {} ({}) on {} CPUs, {} online; {}",
                config.variant.name,
                crate::report::knob_line(&config.variant.knobs()),
                config.nr_cpus,
                config.online,
                config.kernel
            )
        });
        Ok(Self {
            kernel,
            rt,
            oracle,
            config,
            loop_rig: std::sync::OnceLock::new(),
            faults_noted: std::cell::Cell::new(0),
            plugs: std::cell::RefCell::new(BTreeMap::new()),
        })
    }

    /// The fault-injection PRNG seed of a run with `seed`: `DEFAULT_FAULT_SEED ^ seed`.
    pub fn fault_seed(seed: u64) -> u64 {
        bio_core::kernel::fault_inject::DEFAULT_FAULT_SEED ^ seed
    }

    /// Notes the kernel fault log's lines not noted yet (`fail_dump()`'s printk, one-shots that
    /// fired) in the trace, under a `(fault log: ...)` heading. Each fault is already in the
    /// trace where it struck (the `biosim::fault_inject` event the runtime captures);
    /// [`Sim::settle`] calls this at its end so the run's faults are also listed in one place,
    /// and a run without a trace still has [`Kernel::fault_inject`]'s log.
    pub fn note_faults(&self) {
        let log = self.kernel.fault_inject().log();
        let seen = self.faults_noted.replace(log.len());
        if log.len() > seen {
            self.rt.note_with(|| {
                format!(
                    "   (fault log: {} injected fault line(s))",
                    log.len() - seen
                )
            });
        }
        for line in log.iter().skip(seen) {
            self.rt.note_with(|| format!("       fault_inject: {line}"));
        }
    }

    /// `blk_start_plug()` in `cpu`'s submitter (`plug N`). Refused if its plug is active.
    pub(crate) fn plug(&self, cpu: CpuId) -> Result<(), String> {
        if self.plugs.borrow().contains_key(&cpu.0) {
            return Err(format!(
                "{cpu}'s submitter already has a plug (blk_start_plug() would nest)"
            ));
        }
        let r = self.rt.on_cpu(cpu, "blk_start_plug()", |cx| {
            let token = bio_core::block::blk_plug::blk_start_plug(cx);
            let plug = cx.task_state().plug.borrow_mut().take();
            (token, plug)
        });
        match r {
            Some((token, Some(plug))) => {
                self.plugs.borrow_mut().insert(cpu.0, (token, plug));
                Ok(())
            }
            _ => Err(format!("{cpu} cannot start a plug")),
        }
    }

    /// Runs `f` with `cpu`'s parked plug (if any) installed as `current->plug`, and parks it
    /// again afterwards.
    pub(crate) fn with_plug<R>(&self, cpu: CpuId, f: impl FnOnce() -> R) -> R {
        let parked = self.plugs.borrow_mut().remove(&cpu.0);
        let Some((token, plug)) = parked else {
            return f();
        };
        let Some(cx) = self.rt.cpu(cpu) else {
            return f();
        };
        *cx.task_state().plug.borrow_mut() = Some(plug);
        let r = f();
        let plug = cx.task_state().plug.borrow_mut().take().unwrap_or_default();
        self.plugs.borrow_mut().insert(cpu.0, (token, plug));
        r
    }

    /// `blk_finish_plug()` in `cpu`'s submitter (`unplug N`): the plugged requests are
    /// dispatched. Refused without a plug.
    pub(crate) fn unplug(&self, cpu: CpuId) -> Result<(), String> {
        let Some((token, plug)) = self.plugs.borrow_mut().remove(&cpu.0) else {
            return Err(format!(
                "{cpu}'s submitter has no plug (no `plug {}` before)",
                cpu.0
            ));
        };
        self.rt.on_cpu(cpu, "blk_finish_plug()", |cx| {
            *cx.task_state().plug.borrow_mut() = Some(plug);
            bio_core::block::blk_plug::blk_finish_plug(token, cx);
        });
        Ok(())
    }

    /// The CPUs whose submitter has a plug open.
    pub fn open_plugs(&self) -> Vec<u32> {
        self.plugs.borrow().keys().copied().collect()
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Completes a new tracked bio on `cpu` from `ctx`: `bio_endio()` runs there. Returns the bio's
    /// id, or `None` if `cpu` is not online (nothing runs on it).
    pub fn complete(
        &self,
        cpu: CpuId,
        ctx: CompletionContext,
        need: Need,
        op: ReqOp,
    ) -> Option<u64> {
        if !self.kernel.cpu_online(cpu) {
            return None;
        }
        let bio = self.oracle.bio(&self.kernel, op, need);
        let id = bio.id();
        // The trace line is only made when the runtime keeps a trace.
        let what = if self.rt.recording() {
            format!(
                "bio_endio(bio#{id} {}{}) from {ctx}",
                op.name(),
                match need {
                    Need::Any => "",
                    Need::Flag => ", BIO_COMPLETE_IN_TASK",
                    Need::Dynamic => ", bi_end_io calls bio_complete_in_task()",
                }
            )
        } else {
            String::new()
        };
        self.rt
            .on_cpu(cpu, &what, |cx| ctx.kind().run(cx, |cx| bio_endio(bio, cx)))?;
        Some(id)
    }

    /// Runs one item of `cpu`'s pool: on `cpu` while the pool is bound, else on the lowest online
    /// CPU. Returns whether something ran.
    pub fn run_worker(&self, cpu: CpuId) -> bool {
        let Some(pool) = self.kernel.pool(PoolId::Cpu(cpu)) else {
            return false;
        };
        let on = match pool.bound_cpu() {
            Some(c) => c,
            None => match self.kernel.online_cpus().first() {
                Some(c) => *c,
                None => return false,
            },
        };
        let event = if pool.congested {
            crate::runtime::event::Event::Rescuer {
                pool: PoolId::Cpu(cpu),
                on: pool.rescuer_cpu().unwrap_or(on),
            }
        } else {
            crate::runtime::event::Event::Worker {
                pool: PoolId::Cpu(cpu),
                on,
            }
        };
        self.rt.step(event).is_ok()
    }

    /// Advances `jiffies` by one and runs every online CPU's due timers.
    pub fn tick(&self) {
        let _ = self.rt.step(crate::runtime::event::Event::Tick);
        for c in self.kernel.online_cpus() {
            let _ = self.rt.step(crate::runtime::event::Event::Timers(c));
        }
    }

    /// Starts taking `cpu` down (or up) fully, with `hotplug/fail` set to `fail_at` first if given
    /// (a value the kernel's sysfs rejects is ignored, and said so in the trace).
    pub fn hotplug_start(
        &self,
        cpu: CpuId,
        up: bool,
        fail_at: Option<StateId>,
    ) -> Result<(), HotplugError> {
        if let Some(s) = fail_at {
            let r = self.kernel.hotplug().set_fail(cpu, s.0);
            match r {
                Ok(()) => self.rt.note_with(|| {
                    format!(
                        "       echo {} > /sys/devices/system/cpu/cpu{}/hotplug/fail",
                        s.0, cpu.0
                    )
                }),
                Err(e) => self
                    .rt
                    .note_with(|| format!("       (hotplug/fail={} refused: {e})", s.0)),
            }
        }
        let r = if up {
            self.kernel.cpu_up_start(cpu, CPUHP_ONLINE)
        } else {
            self.kernel.cpu_down_start(cpu, CPUHP_OFFLINE)
        };
        match &r {
            Ok(()) => self.rt.note_with(|| {
                format!(
                    "       {}({}, {})",
                    if up { "cpu_up" } else { "cpu_down" },
                    cpu,
                    if up { "CPUHP_ONLINE" } else { "CPUHP_OFFLINE" }
                )
            }),
            Err(e) => {
                self.rt.note_with(|| {
                    format!(
                        "       {}({cpu}) refused: {e}",
                        if up { "cpu_up" } else { "cpu_down" }
                    )
                });
                // A refused operation leaves no armed fail behind.
                let _ = self.kernel.hotplug().set_fail(cpu, -1);
            }
        }
        r
    }

    /// Writes `state` to `cpuN/hotplug/fail` now (`fail_store()`: no hotplug lock, so also while
    /// an operation on this CPU or another is in progress; -1 disarms). The failure fires when the
    /// armed state's callback is next invoked on this CPU, once. Refused with sysfs's reason.
    pub fn hotplug_fail(&self, cpu: CpuId, state: i32) -> Result<(), HotplugError> {
        let r = self.kernel.hotplug().set_fail(cpu, state);
        if r.is_ok() {
            self.rt.note_with(|| {
                format!(
                    "       echo {state} > /sys/devices/system/cpu/cpu{}/hotplug/fail",
                    cpu.0
                )
            });
        }
        r
    }

    /// Writes `state` to `cpuN/hotplug/target` (`target_store()`'s validation, then
    /// `cpu_up(cpu, state)` or `cpu_down(cpu, state)`) as a stepped operation: it is started, and
    /// runs with [`Sim::hotplug_step`] or at settle, stopping at `state`. A target equal to the
    /// current state starts nothing. Refused (nothing changes) with sysfs's or the operation's
    /// reason: `-EINVAL` for a state without a name or `cant_stop`, `-EBUSY` while an operation
    /// is in progress.
    pub fn hotplug_target(&self, cpu: CpuId, state: i32) -> Result<(), HotplugError> {
        let (before, r) = {
            let mut hp = self.kernel.hotplug();
            let before = hp.state(cpu);
            (before, hp.start_target(cpu, state))
        };
        if r.is_ok() {
            self.rt.note_with(|| {
                format!(
                    "       echo {state} > /sys/devices/system/cpu/cpu{}/hotplug/target",
                    cpu.0
                )
            });
            match before {
                Ok(b) if b.0 < state => self
                    .rt
                    .note_with(|| format!("       cpu_up({cpu}, {state})")),
                Ok(b) if b.0 > state => self
                    .rt
                    .note_with(|| format!("       cpu_down({cpu}, {state})")),
                _ => self
                    .rt
                    .note_with(|| format!("       ({cpu} is at {state} already: nothing to do)")),
            }
        }
        r
    }

    /// Runs the next step of the hotplug operation in progress, if any.
    pub fn hotplug_step(&self) -> bool {
        match self.kernel.hotplug_ops_in_progress().first() {
            Some(&c) => self
                .rt
                .step(crate::runtime::event::Event::Hotplug(c))
                .is_ok(),
            None => false,
        }
    }

    /// Violations so far (no stranded check: the machine may not be quiescent), each carrying the
    /// trace that led to it.
    pub fn check(&self) -> Vec<Violation> {
        self.with_trace(self.oracle.check(&self.kernel))
    }

    fn with_trace(&self, mut v: Vec<Violation>) -> Vec<Violation> {
        if v.iter().any(|x| x.trace.is_empty()) && self.config.trace {
            let trace = self.rt.trace();
            for x in v.iter_mut().filter(|x| x.trace.is_empty()) {
                x.trace = trace.clone();
            }
        }
        v
    }

    /// Lets the seeded scheduler run everything left (hotplug steps, ticks, timers, workers) for at
    /// most `max_steps`, then checks every invariant including stranded bios. Not reaching
    /// quiescence is itself a violation.
    ///
    /// A CPU that `hotplug/target` left parked between `CPUHP_OFFLINE` and `CPUHP_ONLINE` is not
    /// at rest: bios on its batch wait for the operator's next write, not forever. So once the
    /// machine is quiescent, settle writes -1 to each parked CPU's `hotplug/fail` (if armed) and
    /// `CPUHP_ONLINE` to its `hotplug/target` (in the trace, as an operator ending a hotplug test
    /// would) and runs again, once per CPU, and the stranded
    /// check sees every CPU fully up or fully down.
    pub fn settle(&self, max_steps: u64) -> Vec<Violation> {
        // A plug left open at the end of a scenario is finished first, as the task's exit would
        // (`do_exit()` cannot sleep with requests in its plug): its requests are then dispatched.
        for cpu in self.open_plugs() {
            self.rt.note_with(|| {
                format!("   (settle: CPU{cpu}'s plug is still open: blk_finish_plug())")
            });
            let _ = self.unplug(CpuId(cpu));
        }
        let mut summary = self.rt.run(max_steps);
        let mut left = max_steps.saturating_sub(summary.steps);
        // Each CPU is ended at most once: one the kernel cannot move stays where it is.
        let mut ended = Vec::new();
        while summary.quiescent && self.kernel.hotplug_ops_in_progress().is_empty() {
            let Some(cpu) = self.parked_cpu(&ended) else {
                break;
            };
            ended.push(cpu);
            self.rt.note_with(|| format!(
                "   (settle: {cpu} is left at state {}, neither offline nor online (a hotplug/target park or a failed rollback): ending it)",
                self.kernel.hotplug().state(cpu).map_or(-1, |s| s.0)
            ));
            // The harness's cleanup, not the case's: an armed failure is disarmed first.
            if self.kernel.hotplug().fail(cpu).is_ok_and(|f| f != -1)
                && self.kernel.hotplug().set_fail(cpu, -1).is_ok()
            {
                self.rt.note_with(|| {
                    format!(
                        "       echo -1 > /sys/devices/system/cpu/cpu{}/hotplug/fail",
                        cpu.0
                    )
                });
            }
            if self.hotplug_target(cpu, CPUHP_ONLINE.0).is_err() {
                break;
            }
            summary = self.rt.run(left);
            left = left.saturating_sub(summary.steps);
        }
        self.note_faults();
        // The harness's cleanup, not the case's: a one-shot the run armed but never reached is
        // disarmed, so the read-back that checks the data does not meet it.
        let (sites, devs) = self.kernel.fault_inject().disarm_oneshots();
        for what in sites
            .iter()
            .map(|s| format!("fail_alloc {s}"))
            .chain(devs.iter().map(|d| format!("fail_io {d}")))
        {
            self.rt
                .note_with(|| format!("   (settle: `{what}` is still armed: disarmed)"));
        }
        if !summary.quiescent {
            self.oracle.push(Violation {
                invariant: Invariant::NoQuiescence,
                message: format!(
                    "still busy after {max_steps} steps: {:?}",
                    self.rt.enabled()
                ),
                trace: Vec::new(),
            });
        }
        self.with_trace(self.oracle.check_quiescent(&self.kernel))
    }

    /// Whether `kernel/cpu.c` gave up on a CPU: a callback failed during a rollback
    /// (`WARN_ON_ONCE(st->rollback)`: "no way forward, no way back. We loose, thanks for
    /// playing") or a DEAD callback failed (`WARN(1, "DEAD callback error for CPU%d")`). Only an
    /// injected failure gets there (every callback the model registers succeeds), and the kernel
    /// itself declares the CPU broken: what the batcher does afterwards is not its contract.
    /// Returns the kernel's message.
    pub fn hotplug_gave_up(&self) -> Option<String> {
        self.kernel
            .hotplug()
            .warnings()
            .iter()
            .find(|w| {
                matches!(
                    w,
                    hotplug::Warning::RollbackFailed { .. }
                        | hotplug::Warning::DeadCallbackError { .. }
                )
            })
            .map(ToString::to_string)
    }

    /// The first CPU whose hotplug state is neither `CPUHP_OFFLINE` nor `CPUHP_ONLINE` (parked by
    /// `hotplug/target`), not in `except`.
    fn parked_cpu(&self, except: &[CpuId]) -> Option<CpuId> {
        let hp = self.kernel.hotplug();
        (0..self.kernel.nr_cpus()).map(CpuId).find(|&c| {
            !except.contains(&c)
                && hp
                    .state(c)
                    .is_ok_and(|s| s != CPUHP_OFFLINE && s != CPUHP_ONLINE)
        })
    }

    /// Attaches a loop device (`drivers/block/loop.c`) over an in-memory backing file, for
    /// [`Transition::LoopIo`](crate::machine::transition::Transition::LoopIo) and `LoopWorker`. Only the
    /// first call counts; returns whether this one did.
    pub fn attach_loop(&self, setup: crate::machine::loop_rig::LoopSetup) -> bool {
        let mut fresh = false;
        self.loop_rig.get_or_init(|| {
            fresh = true;
            crate::machine::loop_rig::LoopRig::new(self.parts(), setup)
        });
        fresh
    }

    /// The parts a device rig takes.
    pub(crate) fn parts(&self) -> crate::machine::loop_rig::RigParts<'_> {
        crate::machine::loop_rig::RigParts {
            kernel: &self.kernel,
            rt: &self.rt,
            oracle: &self.oracle,
        }
    }

    pub(crate) fn loop_rig(&self) -> Option<&crate::machine::loop_rig::LoopRig> {
        self.loop_rig.get()
    }

    /// The attached loop device, if any (for invariant checks on its internals).
    pub fn loop_device(&self) -> Option<&Arc<bio_core::drivers::block::loop_drv::LoopDevice>> {
        self.loop_rig().and_then(|r| r.device())
    }

    /// The attached loop device's counters and how many of the scenario's I/Os on it ended with
    /// an error status.
    pub fn loop_outcome(&self) -> Option<(bio_core::drivers::block::loop_drv::LoopStats, usize)> {
        self.loop_rig().map(|r| (r.stats(), r.failed()))
    }

    /// With a loop device attached: reads every block written back through it and reports
    /// blocks that differ from the reference (`Invariant::DataMismatch`), each with the trace.
    pub fn verify_devices(&self, max_steps: u64) -> Vec<Violation> {
        match self.loop_rig() {
            Some(r) => {
                let v = r.verify(self.parts(), max_steps);
                self.with_trace(v)
            }
            None => Vec::new(),
        }
    }

    /// The trace so far, as ftrace records (see [`crate::report::ftrace::Ftrace`]).
    pub fn ftrace(&self) -> crate::report::ftrace::Ftrace {
        crate::report::ftrace::Ftrace {
            records: self.rt.records(),
            nr_cpus: self.config.nr_cpus,
            control_cpu: self.rt.control_cpu(),
        }
    }

    /// The trace so far.
    pub fn trace(&self) -> String {
        self.rt.trace_text()
    }
}
