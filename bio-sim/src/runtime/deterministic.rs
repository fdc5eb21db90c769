//! The deterministic runtime: a seeded, single-threaded event loop on virtual time.
//!
//! Each [`Event`] is one thing a real CPU could do next: take an interrupt, run a worker, run its
//! timer softirq, advance the clock, or take one step of a hotplug operation. [`DetRuntime::enabled`]
//! lists what can happen now; a caller (a test, a scenario, a proptest state machine) picks each
//! next step with [`DetRuntime::step`], or lets the seeded scheduler pick with
//! [`DetRuntime::step_random`] / [`DetRuntime::run`]. Same seed, same choices, same trace.
//!
//! An event runs to completion, except at *IRQ windows*: where the kernel code re-enables
//! interrupts (`local_irq_restore()`, `cond_resched()`), the runtime may deliver a pending IRQ on
//! that CPU, nested as a real interrupt would be, with the probability set by
//! [`DetConfig::irq_window_chance`]. When kernel code must sleep (`flush_work()`), the runtime
//! runs other events until the condition holds, as the scheduler would.
//!
//! Besides its human-readable trace (one line per step, the captured events under it) a run keeps
//! the same events as [`TraceRecord`]s for the ftrace writer: timestamps from the simulated clock
//! (`jiffies / HZ` seconds plus 1 µs per event within a jiffy, so the same seed gives the same
//! bytes; a driver with its own clock sets it instead, [`DetRuntime::set_trace_clock`]), the
//! task each CPU runs (`<idle>` unless something runs there: the submitter `biosim/N` for
//! scenario code run on a CPU, the kworker or cpuhp thread bio-core switches `current` to),
//! `sched_switch`/`sched_wakeup` for the switches the runtime makes, and the scenario's notes as
//! `biosim_*` markers from the writer task `biosim` on the control CPU.

use super::event::Event;
use super::rng::SplitMix64;
use crate::report::capture::{self, CaptureContext, Lines};
use crate::report::ftrace::record::{TraceRecord, NO_FLAGS, WRITER_COMM, WRITER_PID};
use bio_core::kernel::{CpuId, Runtime, Task};
use bio_core::workqueue::{PoolId, WorkExecution};
use bio_core::{Cpu, Kernel};
use hotplug::{Errno, HotplugError, StepOutcome};
use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::Arc;

/// How a deterministic run behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetConfig {
    /// The seed of every random choice.
    pub seed: u64,
    /// Record a line per step in the trace. Off, a run keeps no trace at all (benchmarks,
    /// large explorations).
    pub record_steps: bool,
    /// Also record the kernel's tracepoints inside each step (needs `record_steps`).
    pub capture_trace: bool,
    /// Chance `(num, den)` that a pending IRQ is delivered at each IRQ window inside an event.
    /// `(0, 1)` never interrupts an event.
    pub irq_window_chance: (u32, u32),
}

impl Default for DetConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            record_steps: true,
            capture_trace: true,
            irq_window_chance: (0, 1),
        }
    }
}

/// Why a step could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// The event is not enabled now (nothing to deliver, CPU offline, pool empty, ...).
    #[error("step {event} is not possible now: {why}")]
    NotEnabled {
        /// The event.
        event: Event,
        /// Why.
        why: String,
    },
    /// The hotplug machine refused the step.
    #[error("hotplug step on {cpu} failed: {source}")]
    Hotplug {
        /// The CPU.
        cpu: CpuId,
        /// The machine's error.
        #[source]
        source: HotplugError,
    },
}

/// What one step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRecord {
    /// The step number.
    pub step: u64,
    /// The event.
    pub event: Event,
    /// Its outcome.
    pub outcome: Outcome,
}

impl StepRecord {
    /// The outcome in a line.
    pub fn detail(&self) -> String {
        self.outcome.to_string()
    }
}

/// The outcome of one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A hard interrupt was handled.
    Irq,
    /// Softirq work items ran.
    Softirqs(usize),
    /// Timers fired.
    Timers(usize),
    /// A worker or rescuer ran a work item.
    Work(WorkExecution),
    /// jiffies advanced to this value.
    Tick(u64),
    /// A hotplug step ran.
    Hotplug {
        /// The invocation, as `CPU1 187 workqueue:online teardown [on target, cpuhp thread]`
        /// (empty when the runtime records no steps, `DetConfig::record_steps` off).
        invocation: String,
        /// Its result (`-EAGAIN` for an injected failure).
        result: Result<(), Errno>,
        /// Whether `hotplug/fail` stood in for it.
        injected: bool,
        /// The operation's result, if this step completed it.
        finished: Option<Result<(), HotplugError>>,
    },
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Irq => f.write_str("hardirq handled"),
            Outcome::Softirqs(n) => write!(f, "{n} softirq items"),
            Outcome::Timers(n) => write!(f, "{n} timers fired"),
            Outcome::Work(x) => write!(
                f,
                "{} ran {} from {}{}",
                if x.rescuer { "rescuer" } else { "worker" },
                x.function,
                x.workqueue,
                if x.disassociated {
                    " (pool disassociated: unbound)"
                } else {
                    ""
                }
            ),
            Outcome::Tick(j) => write!(f, "jiffies={j}"),
            Outcome::Hotplug {
                invocation,
                result,
                injected,
                finished,
            } => {
                write!(f, "{invocation} -> ")?;
                match result {
                    Ok(()) => f.write_str("0")?,
                    Err(e) => write!(
                        f,
                        "{}{}",
                        e.as_neg_i32(),
                        if *injected { " (injected)" } else { "" }
                    )?,
                }
                match finished {
                    Some(Ok(())) => f.write_str("; operation finished: ok"),
                    Some(Err(e)) => write!(f, "; operation finished: {e}"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSummary {
    /// Steps taken.
    pub steps: u64,
    /// Whether nothing was left to run.
    pub quiescent: bool,
}

struct Inner {
    kernel: Arc<Kernel>,
    cpus: Vec<Cpu>,
    rng: RefCell<SplitMix64>,
    config: DetConfig,
    trace: RefCell<Vec<String>>,
    /// The trace's events for the ftrace writer (kept when steps are recorded).
    records: RefCell<Vec<TraceRecord>>,
    /// The last timestamp given, in µs.
    last_ts: Cell<Option<u64>>,
    /// A driver's own clock, in ns ([`DetRuntime::set_trace_clock`]): when set, events are
    /// stamped with it instead of `jiffies / HZ`.
    trace_clock_ns: Cell<Option<u64>>,
    /// What the runtime runs on each CPU (`None`: the idle task).
    shown: RefCell<Vec<Option<Task>>>,
    /// `current` of each CPU as the runtime left it: a different `current` is a task bio-core
    /// switched to (a kworker, a cpuhp thread).
    base: RefCell<Vec<Task>>,
    context: Rc<dyn CaptureContext>,
    capture: Option<Lines>,
    exec_cpu: capture::ExecCpu,
    steps: Cell<u64>,
    wait_depth: Cell<u32>,
}

struct Hook {
    inner: Weak<Inner>,
}

impl Runtime for Hook {
    fn irq_window(&self, cpu: &Cpu) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        let (num, den) = inner.config.irq_window_chance;
        if num == 0 {
            return;
        }
        while inner.kernel.pending_irqs(cpu.id()) > 0 && inner.rng.borrow_mut().chance(num, den) {
            inner.log(|| {
                format!(
                    "       irq window on {}: interrupt delivered inside the running code",
                    cpu.id()
                )
            });
            inner.marker(
                Some(cpu.id().0),
                "irq_window",
                "interrupt delivered inside the running code",
            );
            inner.kernel.deliver_irq(cpu);
        }
    }

    fn wait_until(&self, cpu: &Cpu, what: &str, cond: &dyn Fn() -> bool) -> bool {
        let Some(inner) = self.inner.upgrade() else {
            return cond();
        };
        // Only a context that may sleep lets others run (the threaded runtime does the same); an
        // atomic one already got its might_sleep() report and must not nest a task on itself.
        if inner.wait_depth.get() >= 8 || !cpu.may_sleep() {
            return cond();
        }
        inner.wait_depth.set(inner.wait_depth.get() + 1);
        inner.log(|| format!("       {} sleeps in {what}: running other events", cpu.id()));
        inner.marker(
            Some(cpu.id().0),
            "sleep",
            &format!("{what}: running other events"),
        );
        let mut ok = cond();
        let mut budget = 100_000;
        while !ok && budget > 0 {
            let events = inner.enabled();
            if events.is_empty() {
                break;
            }
            let ev = events[inner.rng.borrow_mut().below(events.len())];
            let _ = inner.exec(ev);
            ok = cond();
            budget -= 1;
        }
        inner.wait_depth.set(inner.wait_depth.get() - 1);
        ok
    }
}

/// The runtime's clock and tasks, for the capture layer.
struct DetContext {
    inner: Weak<Inner>,
}

impl CaptureContext for DetContext {
    fn now_us(&self) -> u64 {
        self.inner.upgrade().map_or(0, |i| i.stamp())
    }

    fn task(&self, cpu: Option<u32>) -> (String, u32) {
        match self.inner.upgrade() {
            Some(i) => i.task_on(cpu),
            None => idle(cpu.unwrap_or(0)),
        }
    }
}

/// The idle task of `cpu` (`swapper/N`, pid 0; ftrace prints it as `<idle>`).
fn idle(cpu: u32) -> (String, u32) {
    (format!("swapper/{cpu}"), 0)
}

/// The submitting task on `cpu`: `biosim/N`, pid `1000 + N` (the model's I/O submitter).
pub fn submitter(cpu: CpuId) -> Task {
    Task::submitter(cpu)
}

/// `sched_switch`'s print fmt (include/trace/events/sched.h), both tasks at the default prio 120.
fn sched_switch_fields(prev: &(String, u32), prev_state: &str, next: &(String, u32)) -> String {
    format!(
        "prev_comm={} prev_pid={} prev_prio=120 prev_state={prev_state} ==> next_comm={} next_pid={} next_prio=120",
        prev.0, prev.1, next.0, next.1
    )
}

/// The deterministic runtime.
pub struct DetRuntime {
    inner: Rc<Inner>,
}

impl std::fmt::Debug for DetRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DetRuntime")
            .field("config", &self.inner.config)
            .field("steps", &self.inner.steps.get())
            .finish()
    }
}

impl DetRuntime {
    /// A runtime over `kernel`, with one task context per CPU.
    // The hooks are single-threaded by design (they reach back into this runtime's Rc state);
    // `Cpu` takes an Arc only because the threaded runtime shares its hooks across threads.
    #[allow(clippy::arc_with_non_send_sync)]
    pub fn new(kernel: Arc<Kernel>, config: DetConfig) -> Self {
        let exec_cpu: capture::ExecCpu = Arc::new(std::sync::atomic::AtomicI64::new(-1));
        let capture = (config.record_steps && config.capture_trace).then(Lines::default);
        let inner = Rc::new_cyclic(|weak: &Weak<Inner>| {
            let cpus: Vec<Cpu> = kernel
                .possible_cpus()
                .map(|c| {
                    let hook: Arc<dyn Runtime> = Arc::new(Hook {
                        inner: weak.clone(),
                    });
                    let cx = kernel.cpu_with_runtime(c, hook).expect("possible CPU");
                    // Nothing runs on a CPU until the runtime puts something there: its idle
                    // task is `current` (timers, softirqs and IRQs come in on top of it).
                    cx.set_current(Task::idle(c));
                    cx
                })
                .collect();
            let base: Vec<Task> = cpus.iter().map(Cpu::current).collect();
            Inner {
                kernel: Arc::clone(&kernel),
                shown: RefCell::new(vec![None; cpus.len()]),
                base: RefCell::new(base),
                cpus,
                rng: RefCell::new(SplitMix64::new(config.seed)),
                config,
                trace: RefCell::new(Vec::new()),
                records: RefCell::new(Vec::new()),
                last_ts: Cell::new(None),
                trace_clock_ns: Cell::new(None),
                context: Rc::new(DetContext {
                    inner: weak.clone(),
                }),
                capture,
                exec_cpu,
                steps: Cell::new(0),
                wait_depth: Cell::new(0),
            }
        });
        Self { inner }
    }

    /// The kernel.
    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.inner.kernel
    }

    /// The task context of `cpu` (to run scenario code "on CPU n"), or `None` if it does not exist.
    pub fn cpu(&self, cpu: CpuId) -> Option<&Cpu> {
        self.inner.cpus.get(cpu.index())
    }

    /// Runs `f` on `cpu`'s task context with the kernel's tracepoints captured into the trace.
    /// The code runs as the submitter `biosim/N` ([`submitter`]): the ftrace records show it
    /// woken and switched in from idle, `what` as a `biosim_on_cpu` marker, and switched out.
    pub fn on_cpu<R>(&self, cpu: CpuId, what: &str, f: impl FnOnce(&Cpu) -> R) -> Option<R> {
        let inner = &self.inner;
        let cx = inner.cpus.get(cpu.index())?;
        let task = submitter(cpu);
        if !inner.config.record_steps {
            // No trace: only `current` matters (a kernel report names the task).
            let saved = cx.replace_current(task);
            let r = {
                let _on = inner.executing_on(Some(cpu));
                inner.captured(|| f(cx))
            };
            cx.set_current(saved);
            return Some(r);
        }
        let saved = cx.current();
        let pair = (task.comm.clone(), task.pid);
        let from = inner.task_on(Some(cpu.0));
        let control = inner.control_cpu();
        // The context columns bio-core's own sched_wakeup/sched_switch print, computed while
        // `current` is the task that traces them (the writer wakes, the idle task or whoever
        // ran switches out).
        let wake_flags = {
            let ccx = inner.cpus.get(control as usize).unwrap_or(cx);
            let was = ccx.current();
            ccx.set_current(Task {
                pid: WRITER_PID,
                comm: WRITER_COMM.to_owned(),
            });
            let flags = ccx.sched_wakeup_trace_flags(0);
            ccx.set_current(was);
            flags
        };
        let switch_in_flags = {
            cx.set_current(Task {
                pid: from.1,
                comm: from.0.clone(),
            });
            let flags = cx.sched_switch_trace_flags();
            cx.set_current(saved.clone());
            flags
        };
        cx.set_current(task.clone());
        let prev_base = std::mem::replace(&mut inner.base.borrow_mut()[cpu.index()], task.clone());
        let prev_shown = inner.shown.borrow()[cpu.index()].clone();
        inner
            .trace
            .borrow_mut()
            .push(format!("       {cpu}: {what}"));
        if from != pair {
            inner.record(
                Some(control),
                (WRITER_COMM.to_owned(), WRITER_PID),
                wake_flags.as_str(),
                "sched_wakeup",
                format!(
                    "comm={} pid={} prio=120 target_cpu={:03}",
                    pair.0, pair.1, cpu.0
                ),
            );
            inner.record(
                Some(cpu.0),
                from.clone(),
                switch_in_flags.as_str(),
                "sched_switch",
                sched_switch_fields(&from, "R", &pair),
            );
        }
        inner.shown.borrow_mut()[cpu.index()] = Some(task.clone());
        inner.marker(Some(cpu.0), "on_cpu", what);
        let r = {
            let _on = inner.executing_on(Some(cpu));
            inner.captured(|| f(cx))
        };
        inner.shown.borrow_mut()[cpu.index()] = prev_shown;
        inner.base.borrow_mut()[cpu.index()] = prev_base;
        cx.set_current(task.clone());
        let switch_out_flags = cx.sched_switch_trace_flags();
        cx.set_current(saved);
        if from != pair {
            inner.record(
                Some(cpu.0),
                pair.clone(),
                switch_out_flags.as_str(),
                "sched_switch",
                sched_switch_fields(&pair, "S", &from),
            );
        }
        Some(r)
    }

    /// Every event that can happen now, in a fixed order.
    pub fn enabled(&self) -> Vec<Event> {
        self.inner.enabled()
    }

    /// Whether nothing can happen any more.
    pub fn quiescent(&self) -> bool {
        self.inner.enabled().is_empty()
    }

    /// Runs `event` if it is enabled.
    pub fn step(&self, event: Event) -> Result<StepRecord, StepError> {
        self.inner.exec(event)
    }

    /// Lets the seeded scheduler pick and run one enabled event; `None` when quiescent.
    pub fn step_random(&self) -> Option<Result<StepRecord, StepError>> {
        let events = self.inner.enabled();
        if events.is_empty() {
            return None;
        }
        let i = self.inner.rng.borrow_mut().below(events.len());
        Some(self.inner.exec(events[i]))
    }

    /// Runs seeded steps until quiescent or `max_steps` taken.
    pub fn run(&self, max_steps: u64) -> RunSummary {
        let mut n = 0;
        while n < max_steps {
            match self.step_random() {
                None => {
                    return RunSummary {
                        steps: n,
                        quiescent: true,
                    }
                }
                Some(_) => n += 1,
            }
        }
        RunSummary {
            steps: n,
            quiescent: self.quiescent(),
        }
    }

    /// Adds a scenario line to the trace (nothing when steps are not recorded). In the ftrace
    /// records it is a marker from the writer task on the control CPU: a `# ` line (the
    /// machine, a device's setup) as `biosim_machine`, a transition (`>>> ...`) as `biosim_scenario`, any other
    /// line (the writer's sysfs writes, settle's notes) as `biosim_note`.
    pub fn note(&self, line: impl Into<String>) {
        let inner = &self.inner;
        if !inner.config.record_steps {
            return;
        }
        let line = line.into();
        let t = line.trim();
        let (name, text) = if let Some(m) = t.strip_prefix("# biosim: ").or(t.strip_prefix("# ")) {
            ("machine", m)
        } else if let Some(m) = t.strip_prefix(">>> ") {
            ("scenario", m)
        } else {
            ("note", t)
        };
        let control = inner.control_cpu();
        inner.record(
            Some(control),
            (WRITER_COMM.to_owned(), WRITER_PID),
            NO_FLAGS,
            &format!("biosim_{name}"),
            text.to_owned(),
        );
        inner.trace.borrow_mut().push(line);
    }

    /// [`DetRuntime::note`] with the line built only when the runtime keeps a trace: explore's
    /// machines record nothing, and formatting their notes (the machine header with the variant's
    /// knobs, every `cpu_down()`/`echo` line) was a tenth of a case's time.
    pub fn note_with(&self, line: impl FnOnce() -> String) {
        if self.inner.config.record_steps {
            self.note(line());
        }
    }

    /// The trace's events for the ftrace writer, in order.
    pub fn records(&self) -> Vec<TraceRecord> {
        self.inner.records.borrow().clone()
    }

    /// The CPU the scenario's writer task runs on now: the lowest online CPU.
    pub fn control_cpu(&self) -> u32 {
        self.inner.control_cpu()
    }

    /// Whether this runtime keeps a trace (`DetConfig::record_steps`): callers can skip
    /// formatting lines nobody will read.
    pub fn recording(&self) -> bool {
        self.inner.config.record_steps
    }

    /// The trace so far.
    pub fn trace(&self) -> Vec<String> {
        self.inner.trace.borrow().clone()
    }

    /// The trace as one text.
    pub fn trace_text(&self) -> String {
        let mut s = self.inner.trace.borrow().join("\n");
        s.push('\n');
        s
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.inner.steps.get()
    }

    /// Stamps the events of the steps that follow at `ns` on a driver's own clock (the
    /// page-cache driver's simulated nanoseconds), as the kernel's trace clock would: events of
    /// one step share its start time, and a time before the last stamp given is printed as that
    /// stamp, so the trace stays in order. Without it, `jiffies / HZ` plus one µs per event.
    pub fn set_trace_clock(&self, ns: u64) {
        self.inner.trace_clock_ns.set(Some(ns));
    }
}

/// Restores what the runtime showed on a CPU when dropped.
struct ShownGuard<'a> {
    inner: &'a Inner,
    cpu: usize,
    prev: Option<Task>,
}

impl Drop for ShownGuard<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.inner.shown.borrow_mut().get_mut(self.cpu) {
            *slot = self.prev.take();
        }
    }
}

/// Restores the previous executing CPU when dropped.
struct ExecGuard<'a> {
    cell: &'a capture::ExecCpu,
    prev: i64,
}

impl Drop for ExecGuard<'_> {
    fn drop(&mut self) {
        self.cell
            .store(self.prev, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Inner {
    /// The next timestamp: the driver's clock if it set one, never before the last stamp;
    /// otherwise `jiffies / HZ` in µs, or 1 µs after the last one if that is later (the
    /// sub-jiffy order of events).
    fn stamp(&self) -> u64 {
        let ts = if let Some(ns) = self.trace_clock_ns.get() {
            let base = ns / 1_000;
            self.last_ts.get().map_or(base, |l| base.max(l))
        } else {
            let hz = u64::from(self.kernel.config().hz.max(1));
            let base = self.kernel.jiffies() * 1_000_000 / hz;
            self.last_ts.get().map_or(base, |l| base.max(l + 1))
        };
        self.last_ts.set(Some(ts));
        ts
    }

    /// `(comm, pid)` of what runs on `cpu` now: the task bio-core switched `current` to, else
    /// what the runtime runs there, else the idle task.
    fn task_on(&self, cpu: Option<u32>) -> (String, u32) {
        let Some(c) = cpu else {
            return idle(0);
        };
        let i = c as usize;
        if let Some(cx) = self.cpus.get(i) {
            let cur = cx.current();
            if self.base.borrow().get(i) != Some(&cur) {
                return (cur.comm, cur.pid);
            }
        }
        match self.shown.borrow().get(i) {
            Some(Some(t)) => (t.comm.clone(), t.pid),
            _ => idle(c),
        }
    }

    /// Shows `task` running on `cpu` until the guard drops.
    fn showing(&self, cpu: u32, task: Task) -> ShownGuard<'_> {
        let i = cpu as usize;
        let prev = self
            .shown
            .borrow_mut()
            .get_mut(i)
            .and_then(|slot| slot.replace(task));
        ShownGuard {
            inner: self,
            cpu: i,
            prev,
        }
    }

    /// The lowest online CPU (the control CPU of the writer task and of `cpu_down()`).
    fn control_cpu(&self) -> u32 {
        self.kernel.online_cpus().first().map_or(0, |c| c.0)
    }

    /// Appends a record made by the runtime itself, stamped now.
    fn record(
        &self,
        cpu: Option<u32>,
        task: (String, u32),
        flags: &str,
        event: &str,
        fields: String,
    ) {
        if !self.config.record_steps {
            return;
        }
        let ts_us = self.stamp();
        self.records.borrow_mut().push(TraceRecord {
            ts_us,
            cpu,
            comm: task.0,
            pid: task.1,
            flags: flags.to_owned(),
            event: event.to_owned(),
            fields,
            bio: None,
            text: None,
        });
    }

    /// A `biosim_<name>` marker on `cpu` from the task running there.
    fn marker(&self, cpu: Option<u32>, name: &str, text: &str) {
        let task = self.task_on(cpu);
        self.record(
            cpu,
            task,
            NO_FLAGS,
            &format!("biosim_{name}"),
            text.to_owned(),
        );
    }

    /// Appends a trace line made by `line`, only when steps are recorded.
    fn log(&self, line: impl FnOnce() -> String) {
        if self.config.record_steps {
            self.trace.borrow_mut().push(line());
        }
    }

    /// Marks `cpu` as the CPU executing until the guard drops (the trace's CPU column).
    fn executing_on(&self, cpu: Option<CpuId>) -> ExecGuard<'_> {
        let v = cpu.map_or(-1, |c| i64::from(c.0));
        let prev = self.exec_cpu.swap(v, std::sync::atomic::Ordering::Relaxed);
        ExecGuard {
            cell: &self.exec_cpu,
            prev,
        }
    }

    fn captured<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.capture {
            None => f(),
            Some(lines) => {
                let r = capture::capture(
                    lines,
                    &self.exec_cpu,
                    tracing::Level::TRACE,
                    Rc::clone(&self.context),
                    f,
                );
                let mut captured = lines.lock();
                let mut trace = self.trace.borrow_mut();
                let mut records = self.records.borrow_mut();
                for l in captured.drain(..) {
                    trace.push(format!("       {}", l.human()));
                    records.push(l);
                }
                r
            }
        }
    }

    fn enabled(&self) -> Vec<Event> {
        let k = &self.kernel;
        let mut out = Vec::new();
        let online = k.online_cpus();
        out.extend(k.hotplug_ops_in_progress().into_iter().map(Event::Hotplug));
        let (timers_due, timer_armed) = k.timer_scan();
        for &c in &online {
            let (hard, soft) = k.pending_interrupts(c);
            if hard > 0 {
                out.push(Event::Irq(c));
            }
            if soft > 0 {
                out.push(Event::Softirq(c));
            }
            if timers_due.contains(&c) {
                out.push(Event::Timers(c));
            }
        }
        for p in k.pools() {
            for (runnable, rescuer) in [(p.worker_runnable(), false), (p.rescuer_runnable(), true)]
            {
                if !runnable {
                    continue;
                }
                let mk = |on| {
                    if rescuer {
                        Event::Rescuer { pool: p.id, on }
                    } else {
                        Event::Worker { pool: p.id, on }
                    }
                };
                let bound = if rescuer {
                    p.rescuer_cpu()
                } else {
                    p.bound_cpu()
                };
                match bound {
                    Some(c) if online.contains(&c) => out.push(mk(c)),
                    Some(_) => {}
                    None => out.extend(online.iter().map(|&m| mk(m))),
                }
            }
        }
        if timer_armed {
            out.push(Event::Tick);
        }
        out
    }

    fn not_enabled(event: Event, why: impl Into<String>) -> StepError {
        StepError::NotEnabled {
            event,
            why: why.into(),
        }
    }

    fn exec(&self, event: Event) -> Result<StepRecord, StepError> {
        let k = &self.kernel;
        let step = self.steps.get() + 1;
        let record = self.config.record_steps;
        let header_at = self.trace.borrow().len();
        let records_at = self.records.borrow().len();
        if record {
            self.trace.borrow_mut().push(String::new());
        }
        let _on = self.executing_on(match event {
            Event::Irq(c) | Event::Softirq(c) | Event::Timers(c) => Some(c),
            Event::Worker { on, .. } | Event::Rescuer { on, .. } => Some(on),
            Event::Tick | Event::Hotplug(_) => None,
        });
        let outcome: Result<Outcome, StepError> = self.captured(|| self.run_event(event));
        match outcome {
            Ok(outcome) => {
                self.steps.set(step);
                if record {
                    self.trace.borrow_mut()[header_at] =
                        format!("{step:>6} j={:<5} {event}: {outcome}", k.jiffies());
                }
                Ok(StepRecord {
                    step,
                    event,
                    outcome,
                })
            }
            Err(e) => {
                // A refused step leaves no trace: it did not happen.
                if record {
                    self.trace.borrow_mut().truncate(header_at);
                    self.records.borrow_mut().truncate(records_at);
                }
                Err(e)
            }
        }
    }

    /// CPU `c`'s context, or why `event` cannot run there.
    fn cx(&self, event: Event, c: CpuId) -> Result<&Cpu, StepError> {
        self.cpus
            .get(c.index())
            .ok_or_else(|| Self::not_enabled(event, format!("{c} does not exist")))
    }

    /// Runs `event` on the kernel, or says why it is not enabled.
    fn run_event(&self, event: Event) -> Result<Outcome, StepError> {
        let k = &self.kernel;
        let online = |c: CpuId| k.cpu_online(c);
        match event {
            Event::Irq(c) => {
                let cpu = self.cx(event, c)?;
                if !online(c) {
                    return Err(Self::not_enabled(event, format!("{c} is offline")));
                }
                if k.deliver_irq(cpu) {
                    Ok(Outcome::Irq)
                } else {
                    Err(Self::not_enabled(event, format!("no IRQ pending on {c}")))
                }
            }
            Event::Softirq(c) => {
                let cpu = self.cx(event, c)?;
                match k.run_softirqs(cpu) {
                    0 => Err(Self::not_enabled(
                        event,
                        format!("no softirq pending on {c}"),
                    )),
                    n => Ok(Outcome::Softirqs(n)),
                }
            }
            Event::Timers(c) => {
                let cpu = self.cx(event, c)?;
                if !online(c) {
                    return Err(Self::not_enabled(event, format!("{c} is offline")));
                }
                match k.run_timers(cpu) {
                    0 => Err(Self::not_enabled(event, format!("no timer due on {c}"))),
                    n => Ok(Outcome::Timers(n)),
                }
            }
            Event::Worker { pool, on } | Event::Rescuer { pool, on } => {
                self.run_work(event, pool, on)
            }
            Event::Tick => Ok(Outcome::Tick(k.advance_jiffies(1))),
            Event::Hotplug(c) => self.run_hotplug_step(event, c),
        }
    }

    /// One item of `pool` on `on` by its worker (or rescuer, for [`Event::Rescuer`]).
    fn run_work(&self, event: Event, pool: PoolId, on: CpuId) -> Result<Outcome, StepError> {
        let k = &self.kernel;
        let rescuer = matches!(event, Event::Rescuer { .. });
        let cpu = self.cx(event, on)?;
        if !k.cpu_online(on) {
            return Err(Self::not_enabled(event, format!("{on} is offline")));
        }
        let Some(info) = k.pool(pool) else {
            return Err(Self::not_enabled(event, format!("{pool:?}: no such pool")));
        };
        let bound = if rescuer {
            info.rescuer_cpu()
        } else {
            info.bound_cpu()
        };
        if let Some(b) = bound {
            if b != on {
                return Err(Self::not_enabled(
                    event,
                    format!("{} is bound to {b}", super::pool_name(pool)),
                ));
            }
        }
        let ran = if rescuer {
            k.run_rescuer(pool, cpu)
        } else {
            k.run_worker(pool, cpu)
        };
        ran.map(Outcome::Work).ok_or_else(|| {
            Self::not_enabled(
                event,
                format!("nothing runnable in {}", super::pool_name(pool)),
            )
        })
    }

    /// The next step of `c`'s hotplug operation, begun, run and finished on the CPU it names.
    fn run_hotplug_step(&self, event: Event, c: CpuId) -> Result<Outcome, StepError> {
        let k = &self.kernel;
        // cpuhp_enter is traced when the step begins: mark the CPU that will run it first.
        let peek = k.hotplug().next_invocation(c).map(|inv| match inv.runs_on {
            hotplug::RunsOn::Target { .. } => inv.cpu,
            hotplug::RunsOn::Control { cpu } => cpu,
        });
        let _pre = self.executing_on(peek);
        // The step runs in the target's cpuhp thread or, on the control CPU, in the kworker
        // `cpu_down()` runs in (kernel/cpu.c `work_on_cpu()`) or the writer that called
        // `cpu_up()` (until the hotplug crate names its tasks itself).
        let recording = self.config.record_steps;
        let thread = recording
            .then(|| k.hotplug().next_invocation(c))
            .flatten()
            .map(|inv| match inv.runs_on {
                hotplug::RunsOn::Target { .. } => (
                    inv.cpu.0,
                    Task {
                        pid: 100 + inv.cpu.0,
                        comm: format!("cpuhp/{}", inv.cpu.0),
                    },
                ),
                // `cpu_up()` runs in the writer itself; a rollback runs in the direction
                // opposite to its operation's.
                hotplug::RunsOn::Control { cpu } if inv.bringup != inv.rollback => (
                    cpu.0,
                    Task {
                        pid: WRITER_PID,
                        comm: WRITER_COMM.to_owned(),
                    },
                ),
                hotplug::RunsOn::Control { cpu } => (
                    cpu.0,
                    Task {
                        pid: 200 + cpu.0,
                        comm: format!("kworker/{}:0", cpu.0),
                    },
                ),
            });
        let _shown = thread.map(|(cpu, task)| self.showing(cpu, task));
        let hstep = k
            .hotplug_begin_step(c)
            .map_err(|source| StepError::Hotplug { cpu: c, source })?;
        let on = hstep.run_on();
        let _on = self.executing_on(Some(on));
        // Formatted for the trace only: exploring runs keep none, and this is their hot path.
        let invocation = if self.config.record_steps {
            hstep.invocation().to_string()
        } else {
            String::new()
        };
        let injected = hstep.injected_fail();
        let result = k.hotplug_run_step(&hstep, self.cx(event, on)?);
        let out = k
            .hotplug_finish_step(hstep, result)
            .map_err(|source| StepError::Hotplug { cpu: c, source })?;
        let finished = match out {
            StepOutcome::Ran { finished, .. } => finished,
            StepOutcome::Done => None,
        };
        Ok(Outcome::Hotplug {
            invocation,
            result,
            injected,
            finished,
        })
    }
}
