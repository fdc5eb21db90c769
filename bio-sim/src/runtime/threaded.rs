//! The threaded runtime: one OS thread per simulated CPU, on real time.
//!
//! # What it models
//!
//! Each simulated CPU is an OS thread named `biosim-cpu{n}` that owns that CPU's one task
//! context ([`Cpu`]) and does what a real CPU does between tasks: it takes the hard interrupts
//! raised on it (`Kernel::raise_irq`) and runs their handlers in hardirq context, runs its
//! pending softirq work (`ksoftirqd`), fires the timers of its base when they are due (the timer
//! softirq), runs the workers (and, for a congested pool, the `WQ_MEM_RECLAIM` rescuer) of its
//! own pool, and serves the unbound pool and the pools of offline CPUs (disassociated, running
//! unbound) together with the other online CPUs. Code a test wants to run "in task context on
//! CPU n" goes to that thread's mailbox ([`ThreadedRuntime::run_on`]). A ticker thread
//! (`biosim-tick`) advances `jiffies` in real time at `CONFIG_HZ`, optionally slowed down by
//! [`ThreadedConfig::tick_scale`]. An idle CPU thread sleeps on a condition variable until the
//! kernel's waker says something became runnable on it (queued work, a raised IRQ or softirq,
//! a due timer, a hotplug change): there is no busy spinning.
//!
//! Because the interrupts of CPU n are delivered only by CPU n's thread, and only where that
//! thread's context has interrupts enabled (between two events, or at an *IRQ window* inside
//! running code: `local_irq_restore()`, `local_irq_enable()`, `cond_resched()`, and while it
//! sleeps in [`Runtime::wait_until`]), `local_irq_save()` on CPU n really holds CPU n's
//! interrupts off while the code between save and restore runs, with the other CPUs running
//! truly in parallel.
//!
//! CPU hotplug is driven from the caller's thread ([`ThreadedRuntime::cpu_down`],
//! [`ThreadedRuntime::cpu_up`]): each step of the [`hotplug`] machine is executed on the thread
//! of the CPU it names (AP steps on the target CPU, including the bring-up steps that run before
//! it is online; BP steps on the control CPU) and finished on the caller's thread. An offline
//! CPU's thread runs nothing but the hotplug steps addressed to it. Fail injection is the
//! kernel's own `hotplug/fail` knob: `kernel.hotplug().set_fail(cpu, state)` before the
//! operation.
//!
//! # What it cannot show, compared with the deterministic runtime
//!
//! - **Not reproducible.** The interleavings are real (the host scheduler decides them), so a
//!   run that found a bug may not find it again, and there is no seed and no trace to replay.
//!   Use the [deterministic runtime](super::deterministic) to pin an interleaving down.
//! - **Interrupts land only at IRQ windows and between events**, not between two arbitrary
//!   "instructions" of kernel code: a race that needs an interrupt in the middle of a code
//!   sequence without an IRQ window cannot happen here (nor in the deterministic runtime, which
//!   at least lets a test choose every window).
//! - **One worker per pool.** bio-core runs one work item per pool at a time; a work that sleeps
//!   waiting for another item of its own pool waits until [`ThreadedConfig::wait_timeout`] and
//!   the kernel reports the deadlock (the real kernel would create another worker).
//! - **Real time is coarse.** Jiffies advance from the host clock; on a loaded host a timer can
//!   fire late (never early), and latencies measured here include the host's thread wake-up cost.
//!
//! # Exclusion rules the runtime adds
//!
//! Every CPU has an *execution lock*, held by its thread while it runs one event, by another CPU
//! thread while that one runs the CPU's disassociated pool, and by the hotplug controller while it
//! finishes a step of that CPU (which updates `cpu_online_mask`). So a CPU never leaves the online
//! mask in the middle of one of its own events (the kernel gets this from `stop_machine()`), and a
//! pool is never rebound while another CPU is taking an item off it as "unbound".

use bio_core::kernel::{CpuId, HotplugStep, Runtime};
use bio_core::workqueue::{PoolId, PoolInfo, WorkExecution};
use bio_core::{Cpu, Kernel};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use hotplug::{Errno, HotplugError, StateId, StepOutcome};
use parking_lot::{Condvar, Mutex};
use std::any::Any;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

/// How deep [`Runtime::wait_until`] may nest (a waiting task running an event that waits in turn)
/// before a wait only sleeps instead of running further events.
const MAX_NESTED_WAITS: u32 = 8;

/// How the threaded runtime behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadedConfig {
    /// Slow-down factor of the clock: one jiffy lasts `tick_scale / CONFIG_HZ` seconds of real
    /// time. `1` is real time. Must be at least 1.
    pub tick_scale: u32,
    /// Run the ticker thread. Without it `jiffies` only moves when the caller calls
    /// `Kernel::advance_jiffies` (which wakes the CPUs whose timers became due).
    pub ticker: bool,
    /// Longest an idle CPU thread sleeps without being woken (a safety net: every runnable thing
    /// wakes its CPU through the kernel's waker). Must not be zero.
    pub idle_timeout: Duration,
    /// How long [`Runtime::wait_until`] waits for its condition before returning `false` (the
    /// kernel then reports a deadlock).
    pub wait_timeout: Duration,
    /// How long the hotplug controller waits for one step to be executed on its CPU's thread.
    pub hotplug_step_timeout: Duration,
    /// How long [`ThreadedRuntime::shutdown`] waits for the machine to quiesce before stopping it.
    pub shutdown_quiesce_timeout: Duration,
    /// How long shutdown (and `Drop`) waits for the threads to exit; a thread still running then
    /// (stuck in a kernel function that never returns) is detached and reported.
    pub join_timeout: Duration,
    /// Record every work execution (worker and rescuer) for [`ThreadedRuntime::take_work_log`].
    pub record_work: bool,
}

impl Default for ThreadedConfig {
    fn default() -> Self {
        Self {
            tick_scale: 1,
            ticker: true,
            idle_timeout: Duration::from_millis(100),
            wait_timeout: Duration::from_secs(10),
            hotplug_step_timeout: Duration::from_secs(30),
            shutdown_quiesce_timeout: Duration::from_secs(2),
            join_timeout: Duration::from_secs(5),
            record_work: false,
        }
    }
}

impl ThreadedConfig {
    fn validate(&self) -> Result<(), ThreadedError> {
        if self.tick_scale == 0 {
            return Err(ThreadedError::Config(
                "tick_scale must be at least 1 (1 = real time)",
            ));
        }
        if self.idle_timeout.is_zero() {
            return Err(ThreadedError::Config(
                "idle_timeout must not be zero (an idle CPU would spin)",
            ));
        }
        Ok(())
    }
}

/// Why a threaded-runtime operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ThreadedError {
    /// The configuration is unusable.
    #[error("invalid threaded runtime config: {0}")]
    Config(&'static str),
    /// The CPU does not exist.
    #[error("{cpu} does not exist (the machine has {nr_cpus} CPUs)")]
    NoSuchCpu {
        /// The CPU asked for.
        cpu: CpuId,
        /// How many CPUs the machine has.
        nr_cpus: u32,
    },
    /// The CPU is offline: its thread runs nothing but hotplug steps.
    #[error("{0} is offline: its thread runs only the hotplug steps addressed to it")]
    CpuOffline(CpuId),
    /// The kernel already has a waker installed (a runtime ran on it before): one threaded
    /// runtime per kernel.
    #[error("this kernel already has a runtime waker installed: start the threaded runtime on a fresh kernel")]
    WakerInstalled,
    /// An OS thread could not be spawned.
    #[error("spawning thread {name}: {source}")]
    Spawn {
        /// The thread's name.
        name: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The call was made from one of the runtime's own CPU threads, where waiting for a CPU
    /// thread could deadlock.
    #[error("called from the thread of {0}: run_on, cpu_up and cpu_down must be called from outside the simulated CPUs")]
    FromCpuThread(CpuId),
    /// The runtime is stopping or stopped, or the CPU thread is gone.
    #[error("the threaded runtime is stopped")]
    Stopped,
    /// The code run on a CPU panicked.
    #[error("code run on {cpu} panicked: {message}")]
    Panicked {
        /// The CPU.
        cpu: CpuId,
        /// The panic message.
        message: String,
    },
    /// A hotplug step was not executed in time; the operation is left in progress.
    #[error("hotplug step `{step}` got no answer from the thread of {on} within {timeout:?}; the operation is left in progress")]
    StepTimeout {
        /// The step.
        step: String,
        /// The CPU that should have run it.
        on: CpuId,
        /// The timeout.
        timeout: Duration,
    },
    /// The hotplug machine refused the operation, or the operation failed (and was rolled back
    /// as the kernel does).
    #[error(transparent)]
    Hotplug(#[from] HotplugError),
}

/// Counters of one CPU thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuStats {
    /// The CPU.
    pub cpu: CpuId,
    /// Hard interrupts whose handler ran on this CPU.
    pub irqs: u64,
    /// Of those, interrupts delivered at an IRQ window inside running code (or while it waited).
    pub irqs_in_windows: u64,
    /// Softirq work items run by the `ksoftirqd` path (those run on `irq_exit()` are not counted).
    pub softirq_items: u64,
    /// Timers fired on this CPU.
    pub timers_fired: u64,
    /// Work items run on this CPU (workers and rescuers, all pools).
    pub works: u64,
    /// Of those, run by a rescuer.
    pub rescuer_works: u64,
    /// Of those, taken from another (offline, disassociated) CPU's pool.
    pub foreign_works: u64,
    /// Hotplug steps executed on this CPU.
    pub hotplug_steps: u64,
    /// Closures run with [`ThreadedRuntime::run_on`].
    pub tasks: u64,
    /// Mailbox messages refused (the CPU was offline or the runtime stopping).
    pub refused: u64,
    /// Times the thread went to sleep idle.
    pub parks: u64,
    /// Idle sleeps ended by the waker.
    pub wakeups: u64,
    /// Idle sleeps ended by [`ThreadedConfig::idle_timeout`].
    pub idle_timeouts: u64,
    /// [`Runtime::wait_until`] calls that had to wait.
    pub waits: u64,
    /// Waits that gave up after [`ThreadedConfig::wait_timeout`].
    pub wait_timeouts: u64,
    /// Panics caught on this thread.
    pub panics: u64,
}

/// Counters of the whole runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeStats {
    /// One entry per CPU, by CPU number.
    pub cpus: Vec<CpuStats>,
    /// Jiffies the ticker advanced.
    pub ticks: u64,
}

impl RuntimeStats {
    /// The sum over all CPUs (its `cpu` field is CPU0's).
    pub fn total(&self) -> CpuStats {
        let mut t = Counters::default().snapshot(CpuId(0));
        for c in &self.cpus {
            t.irqs += c.irqs;
            t.irqs_in_windows += c.irqs_in_windows;
            t.softirq_items += c.softirq_items;
            t.timers_fired += c.timers_fired;
            t.works += c.works;
            t.rescuer_works += c.rescuer_works;
            t.foreign_works += c.foreign_works;
            t.hotplug_steps += c.hotplug_steps;
            t.tasks += c.tasks;
            t.refused += c.refused;
            t.parks += c.parks;
            t.wakeups += c.wakeups;
            t.idle_timeouts += c.idle_timeouts;
            t.waits += c.waits;
            t.wait_timeouts += c.wait_timeouts;
            t.panics += c.panics;
        }
        t
    }
}

#[derive(Default)]
struct Counters {
    irqs: AtomicU64,
    irqs_in_windows: AtomicU64,
    softirq_items: AtomicU64,
    timers_fired: AtomicU64,
    works: AtomicU64,
    rescuer_works: AtomicU64,
    foreign_works: AtomicU64,
    hotplug_steps: AtomicU64,
    tasks: AtomicU64,
    refused: AtomicU64,
    parks: AtomicU64,
    wakeups: AtomicU64,
    idle_timeouts: AtomicU64,
    waits: AtomicU64,
    wait_timeouts: AtomicU64,
    panics: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    fn snapshot(&self, cpu: CpuId) -> CpuStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CpuStats {
            cpu,
            irqs: g(&self.irqs),
            irqs_in_windows: g(&self.irqs_in_windows),
            softirq_items: g(&self.softirq_items),
            timers_fired: g(&self.timers_fired),
            works: g(&self.works),
            rescuer_works: g(&self.rescuer_works),
            foreign_works: g(&self.foreign_works),
            hotplug_steps: g(&self.hotplug_steps),
            tasks: g(&self.tasks),
            refused: g(&self.refused),
            parks: g(&self.parks),
            wakeups: g(&self.wakeups),
            idle_timeouts: g(&self.idle_timeouts),
            waits: g(&self.waits),
            wait_timeouts: g(&self.wait_timeouts),
            panics: g(&self.panics),
        }
    }
}

/// What is still in flight when the runtime stops, and what it did. Nothing the machine held is
/// dropped silently: everything that did not run is listed here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Whether the machine quiesced within [`ThreadedConfig::shutdown_quiesce_timeout`] before the
    /// threads were stopped.
    pub quiesced: bool,
    /// CPUs with hard interrupts never delivered, and how many.
    pub pending_irqs: Vec<(CpuId, usize)>,
    /// CPUs with softirq work never run, and how many items.
    pub pending_softirqs: Vec<(CpuId, usize)>,
    /// Pools with queued work or a worker still busy (e.g. work queued on a congested pool that
    /// no rescuer can serve).
    pub pools: Vec<PoolInfo>,
    /// The earliest expiry of a timer still armed on an online CPU (`None`: no timer armed).
    pub next_timer_expiry: Option<u64>,
    /// Timers still armed on any CPU's base, offline ones included.
    pub armed_timers: usize,
    /// CPUs with a hotplug operation left in progress.
    pub hotplug_in_progress: Vec<CpuId>,
    /// Mailbox messages (`run_on` closures) refused because the runtime was stopping.
    pub refused_messages: u64,
    /// Panics caught on the CPU threads.
    pub panics: Vec<String>,
    /// Threads that did not exit within [`ThreadedConfig::join_timeout`] (detached).
    pub stuck_threads: Vec<String>,
    /// `jiffies` when the runtime stopped.
    pub jiffies: u64,
    /// The runtime's counters.
    pub stats: RuntimeStats,
}

impl ShutdownReport {
    /// Whether nothing at all was left in flight (no IRQ, softirq, queued or running work, armed
    /// timer, hotplug operation, refused message, panic or stuck thread).
    pub fn is_clean(&self) -> bool {
        self.quiesced
            && self.pending_irqs.is_empty()
            && self.pending_softirqs.is_empty()
            && self.pools.is_empty()
            && self.next_timer_expiry.is_none()
            && self.hotplug_in_progress.is_empty()
            && self.refused_messages == 0
            && self.panics.is_empty()
            && self.stuck_threads.is_empty()
    }
}

impl fmt::Display for ShutdownReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "threaded runtime stopped at jiffies={} ({})",
            self.jiffies,
            if self.quiesced {
                "quiesced"
            } else {
                "did NOT quiesce"
            }
        )?;
        if self.is_clean() {
            return writeln!(f, "  nothing in flight");
        }
        for (c, n) in &self.pending_irqs {
            writeln!(f, "  {c}: {n} hard IRQs never delivered")?;
        }
        for (c, n) in &self.pending_softirqs {
            writeln!(f, "  {c}: {n} softirq items never run")?;
        }
        for p in &self.pools {
            writeln!(
                f,
                "  {}: {} queued{}{}{}",
                super::pool_name(p.id),
                p.queued,
                if p.busy { ", a worker still busy" } else { "" },
                if p.congested { ", congested" } else { "" },
                if p.disassociated {
                    ", disassociated"
                } else {
                    ""
                }
            )?;
        }
        if let Some(e) = self.next_timer_expiry {
            writeln!(
                f,
                "  {} timers still armed (next on an online CPU expires at jiffies={e})",
                self.armed_timers
            )?;
        } else if self.armed_timers > 0 {
            writeln!(
                f,
                "  {} timers armed on offline CPUs' bases",
                self.armed_timers
            )?;
        }
        for c in &self.hotplug_in_progress {
            writeln!(f, "  {c}: hotplug operation left in progress")?;
        }
        if self.refused_messages > 0 {
            writeln!(
                f,
                "  {} run_on closures refused while stopping",
                self.refused_messages
            )?;
        }
        for p in &self.panics {
            writeln!(f, "  panic: {p}")?;
        }
        for t in &self.stuck_threads {
            writeln!(f, "  thread {t} did not exit (detached)")?;
        }
        Ok(())
    }
}

/// A sleeping place for one thread: a kick flag and a condition variable. A kick that arrives
/// while the thread is busy is remembered, so the next sleep returns at once (no lost wake-up).
#[derive(Default)]
struct Parker {
    kicked: Mutex<bool>,
    cv: Condvar,
}

impl Parker {
    fn kick(&self) {
        let mut k = self.kicked.lock();
        if !*k {
            *k = true;
            self.cv.notify_one();
        }
    }

    /// Sleeps until kicked or `timeout`; returns whether it was kicked (and clears the kick).
    fn park(&self, timeout: Duration) -> bool {
        let mut k = self.kicked.lock();
        if !*k {
            self.cv.wait_for(&mut k, timeout);
        }
        std::mem::replace(&mut *k, false)
    }
}

type MailFn = Box<dyn FnOnce(Option<&Cpu>) + Send>;

/// A mailbox message. The closure gets the CPU's context to run in, or `None` when the message
/// is refused (it must then answer its sender with an error).
enum Msg {
    /// A [`ThreadedRuntime::run_on`] closure: runs only while the CPU is online.
    Task(MailFn),
    /// A hotplug step: runs whether the CPU is online or not.
    Hotplug(MailFn),
}

impl Msg {
    fn refuse(self) {
        match self {
            Msg::Task(f) | Msg::Hotplug(f) => f(None),
        }
    }
}

struct Shared {
    kernel: Arc<Kernel>,
    config: ThreadedConfig,
    parkers: Arc<[Parker]>,
    ticker_parker: Parker,
    mailboxes: Vec<Sender<Msg>>,
    /// Per-CPU execution locks (see the module docs).
    exec: Vec<Mutex<()>>,
    counters: Vec<Counters>,
    /// A CPU thread is between waking up and finding nothing to do.
    active: Vec<AtomicBool>,
    thread_ids: Vec<OnceLock<ThreadId>>,
    stop: AtomicBool,
    /// Bumped after every event a CPU thread completes (for [`ThreadedRuntime::quiesce`]).
    progress: AtomicU64,
    ticks: AtomicU64,
    hotplug_ctl: Mutex<()>,
    panics: Mutex<Vec<String>>,
    work_log: Option<Mutex<Vec<WorkExecution>>>,
}

impl Shared {
    fn kick(&self, cpu: CpuId) {
        if let Some(p) = self.parkers.get(cpu.index()) {
            p.kick();
        }
    }

    fn record_panic(&self, cpu: CpuId, what: &str, payload: &(dyn Any + Send)) -> String {
        let message = panic_message(payload);
        bump(&self.counters[cpu.index()].panics, 1);
        let line = format!("{cpu} ({what}): {message}");
        tracing::error!(target: "biosim::threaded", cpu = cpu.0, "panic caught: {line}");
        self.panics.lock().push(line);
        message
    }

    fn record_work(&self, x: &WorkExecution, me: CpuId) {
        let c = &self.counters[me.index()];
        bump(&c.works, 1);
        if x.rescuer {
            bump(&c.rescuer_works, 1);
        }
        if matches!(x.pool, PoolId::Cpu(p) if p != me) {
            bump(&c.foreign_works, 1);
        }
        if let Some(log) = &self.work_log {
            log.lock().push(x.clone());
        }
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Runs one event on `cx`'s CPU, if there is one: a mailbox message (when `rx` is given), then
/// (online only) one IRQ, the softirq backlog, due timers, one item of the CPU's own pool, of the
/// unbound pool, or of another CPU's disassociated pool. Returns whether something ran.
///
/// The caller holds `cx`'s execution lock (the main loop takes it; nested calls from
/// [`Runtime::wait_until`] run inside an event that holds it).
fn run_one(sh: &Shared, cx: &Cpu, rx: Option<&Receiver<Msg>>) -> bool {
    let k = &*sh.kernel;
    let me = cx.id();
    let c = &sh.counters[me.index()];
    let online = k.cpu_online(me);
    if let Some(msg) = rx.and_then(|rx| rx.try_recv().ok()) {
        match msg {
            Msg::Hotplug(f) => {
                f(Some(cx));
                bump(&c.hotplug_steps, 1);
            }
            Msg::Task(f) if online => {
                f(Some(cx));
                bump(&c.tasks, 1);
            }
            Msg::Task(f) => {
                f(None);
                bump(&c.refused, 1);
            }
        }
        return true;
    }
    if !online {
        return false;
    }
    if k.deliver_irq(cx) {
        bump(&c.irqs, 1);
        return true;
    }
    let n = k.run_softirqs(cx);
    if n > 0 {
        bump(&c.softirq_items, n as u64);
        return true;
    }
    let n = k.run_timers(cx);
    if n > 0 {
        bump(&c.timers_fired, n as u64);
        return true;
    }
    // The CPU's own pool: bound to it, or disassociated (then any CPU may run it).
    for pool in [PoolId::Cpu(me), PoolId::Unbound] {
        if let Some(x) = k.run_worker(pool, cx).or_else(|| k.run_rescuer(pool, cx)) {
            sh.record_work(&x, me);
            return true;
        }
    }
    // Other CPUs' disassociated pools, run unbound.
    for p in k.pools() {
        let PoolId::Cpu(m) = p.id else { continue };
        if m == me || !p.disassociated || !(p.worker_runnable() || p.rescuer_runnable()) {
            continue;
        }
        let Some(lock) = sh.exec.get(m.index()) else {
            continue;
        };
        let Some(_guard) = lock.try_lock() else {
            continue;
        };
        // Rebinding happens only in a hotplug step of CPU m, which holds this lock: the pool
        // stays disassociated until we are done.
        if !k.pool(p.id).is_some_and(|now| now.disassociated) {
            continue;
        }
        if let Some(x) = k.run_worker(p.id, cx).or_else(|| k.run_rescuer(p.id, cx)) {
            sh.record_work(&x, me);
            return true;
        }
    }
    false
}

/// The runtime hook of one CPU thread's context.
struct Hook {
    sh: Arc<Shared>,
    /// Nesting depth of waits (only this CPU's thread touches it).
    depth: AtomicU32,
}

impl Runtime for Hook {
    fn irq_window(&self, cpu: &Cpu) {
        let c = &self.sh.counters[cpu.id().index()];
        while self.sh.kernel.deliver_irq(cpu) {
            bump(&c.irqs, 1);
            bump(&c.irqs_in_windows, 1);
        }
    }

    fn wait_until(&self, cpu: &Cpu, what: &str, cond: &dyn Fn() -> bool) -> bool {
        if cond() {
            return true;
        }
        let sh = &*self.sh;
        let i = cpu.id().index();
        let c = &sh.counters[i];
        bump(&c.waits, 1);
        let deadline = Instant::now() + sh.config.wait_timeout;
        let nested_ok = self.depth.fetch_add(1, Ordering::Relaxed) < MAX_NESTED_WAITS;
        let mut slice = Duration::from_micros(50);
        let ok = loop {
            if cond() {
                break true;
            }
            if sh.stop.load(Ordering::SeqCst) {
                break false;
            }
            if Instant::now() >= deadline {
                bump(&c.wait_timeouts, 1);
                tracing::warn!(target: "biosim::threaded", cpu = cpu.id().0, "{} waited {:?} in {what} and gives up", cpu.id(), sh.config.wait_timeout);
                break false;
            }
            // A sleeping task lets its CPU run other things; a context that may not sleep can
            // only take interrupts (if it has them enabled).
            let ran = if nested_ok && cpu.may_sleep() {
                run_one(sh, cpu, None)
            } else if sh.kernel.deliver_irq(cpu) {
                bump(&c.irqs, 1);
                bump(&c.irqs_in_windows, 1);
                true
            } else {
                false
            };
            if ran {
                slice = Duration::from_micros(50);
            } else {
                sh.parkers[i].park(slice);
                slice = (slice * 2).min(Duration::from_millis(1));
            }
        };
        self.depth.fetch_sub(1, Ordering::Relaxed);
        ok
    }
}

fn cpu_thread_main(sh: Arc<Shared>, id: CpuId, rx: Receiver<Msg>) {
    let i = id.index();
    let _ = sh.thread_ids[i].set(std::thread::current().id());
    let hook: Arc<dyn Runtime> = Arc::new(Hook {
        sh: Arc::clone(&sh),
        depth: AtomicU32::new(0),
    });
    let Some(cx) = sh.kernel.cpu_with_runtime(id, hook) else {
        return;
    };
    let c = &sh.counters[i];
    while !sh.stop.load(Ordering::SeqCst) {
        sh.active[i].store(true, Ordering::SeqCst);
        let did = {
            let _exec = sh.exec[i].lock();
            match catch_unwind(AssertUnwindSafe(|| run_one(&sh, &cx, Some(&rx)))) {
                Ok(did) => did,
                Err(payload) => {
                    sh.record_panic(id, "event", &*payload);
                    true
                }
            }
        };
        if did {
            sh.progress.fetch_add(1, Ordering::SeqCst);
            continue;
        }
        sh.active[i].store(false, Ordering::SeqCst);
        bump(&c.parks, 1);
        if sh.parkers[i].park(sh.config.idle_timeout) {
            bump(&c.wakeups, 1);
        } else {
            bump(&c.idle_timeouts, 1);
        }
    }
    sh.active[i].store(false, Ordering::SeqCst);
    // Answer everything still in the mailbox: nothing is dropped silently.
    while let Ok(msg) = rx.try_recv() {
        bump(&c.refused, 1);
        msg.refuse();
    }
}

fn ticker_main(sh: Arc<Shared>) {
    let hz = u64::from(sh.kernel.config().hz.max(1));
    let jiffy_ns = (1_000_000_000u64 * u64::from(sh.config.tick_scale) / hz).max(1);
    let start = Instant::now();
    let mut done: u64 = 0;
    while !sh.stop.load(Ordering::SeqCst) {
        let next = start + Duration::from_nanos(jiffy_ns.saturating_mul(done + 1));
        let now = Instant::now();
        if now < next {
            sh.ticker_parker.park(next - now);
            continue;
        }
        let due = u64::try_from(now.duration_since(start).as_nanos() / u128::from(jiffy_ns))
            .unwrap_or(u64::MAX);
        let n = due.saturating_sub(done);
        if n > 0 {
            sh.ticks.fetch_add(n, Ordering::Relaxed);
            sh.kernel.advance_jiffies(n);
            done = due;
        }
    }
}

/// The pending result of a closure posted with [`ThreadedRuntime::post_on`].
#[derive(Debug)]
pub struct TaskHandle<R> {
    rx: Receiver<Result<R, ThreadedError>>,
}

impl<R> TaskHandle<R> {
    /// Waits for the closure's result. [`ThreadedError::Stopped`] if the runtime stopped first,
    /// [`ThreadedError::CpuOffline`] if the CPU went offline before it ran,
    /// [`ThreadedError::Panicked`] if it panicked.
    pub fn wait(self) -> Result<R, ThreadedError> {
        self.rx.recv().unwrap_or(Err(ThreadedError::Stopped))
    }

    /// Like [`TaskHandle::wait`], giving up after `timeout` (`Err(self)` to wait again later).
    pub fn wait_timeout(self, timeout: Duration) -> Result<Result<R, ThreadedError>, Self> {
        match self.rx.recv_timeout(timeout) {
            Ok(r) => Ok(r),
            Err(RecvTimeoutError::Timeout) => Err(self),
            Err(RecvTimeoutError::Disconnected) => Ok(Err(ThreadedError::Stopped)),
        }
    }
}

/// The threaded runtime: one OS thread per simulated CPU plus a jiffies ticker (see the module
/// docs). Stop it with [`ThreadedRuntime::shutdown`] to learn what was left in flight; dropping
/// it stops the threads too, without a report.
pub struct ThreadedRuntime {
    shared: Arc<Shared>,
    threads: Vec<(String, JoinHandle<()>)>,
}

impl fmt::Debug for ThreadedRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadedRuntime")
            .field("nr_cpus", &self.shared.kernel.nr_cpus())
            .field("config", &self.shared.config)
            .field("jiffies", &self.shared.kernel.jiffies())
            .field("threads", &self.threads.len())
            .finish()
    }
}

impl ThreadedRuntime {
    /// Starts the machine: installs the kernel's waker and spawns one thread per possible CPU
    /// (`biosim-cpu{n}`; offline CPUs' threads wait for hotplug steps) and, if configured, the
    /// ticker (`biosim-tick`).
    ///
    /// Errors: an invalid config, a kernel that already has a waker (one threaded runtime per
    /// kernel, ever), or a thread that could not be spawned (the others are stopped again).
    pub fn start(kernel: Arc<Kernel>, config: ThreadedConfig) -> Result<Self, ThreadedError> {
        config.validate()?;
        let n = kernel.nr_cpus() as usize;
        let parkers: Arc<[Parker]> = (0..n).map(|_| Parker::default()).collect();
        let waker_parkers = Arc::clone(&parkers);
        let waker: Arc<dyn Fn(CpuId) + Send + Sync> = Arc::new(move |cpu: CpuId| {
            if let Some(p) = waker_parkers.get(cpu.index()) {
                p.kick();
            }
        });
        if !kernel.set_waker(waker) {
            return Err(ThreadedError::WakerInstalled);
        }
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..n).map(|_| crossbeam_channel::unbounded()).unzip();
        let shared = Arc::new(Shared {
            kernel,
            parkers,
            ticker_parker: Parker::default(),
            mailboxes: senders,
            exec: (0..n).map(|_| Mutex::new(())).collect(),
            counters: (0..n).map(|_| Counters::default()).collect(),
            active: (0..n).map(|_| AtomicBool::new(false)).collect(),
            thread_ids: (0..n).map(|_| OnceLock::new()).collect(),
            stop: AtomicBool::new(false),
            progress: AtomicU64::new(0),
            ticks: AtomicU64::new(0),
            hotplug_ctl: Mutex::new(()),
            panics: Mutex::new(Vec::new()),
            work_log: config.record_work.then(|| Mutex::new(Vec::new())),
            config,
        });
        let mut rt = Self {
            shared,
            threads: Vec::with_capacity(n + 1),
        };
        for (i, rx) in receivers.into_iter().enumerate() {
            let name = format!("biosim-cpu{i}");
            let sh = Arc::clone(&rt.shared);
            let cpu = CpuId(i as u32);
            let spawned = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || cpu_thread_main(sh, cpu, rx));
            match spawned {
                Ok(h) => rt.threads.push((name, h)),
                Err(source) => {
                    rt.stop_threads();
                    return Err(ThreadedError::Spawn { name, source });
                }
            }
        }
        if rt.shared.config.ticker {
            let name = "biosim-tick".to_owned();
            let sh = Arc::clone(&rt.shared);
            match std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || ticker_main(sh))
            {
                Ok(h) => rt.threads.push((name, h)),
                Err(source) => {
                    rt.stop_threads();
                    return Err(ThreadedError::Spawn { name, source });
                }
            }
        }
        Ok(rt)
    }

    /// The kernel this runtime executes.
    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.shared.kernel
    }

    /// The configuration it was started with.
    pub fn config(&self) -> &ThreadedConfig {
        &self.shared.config
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> RuntimeStats {
        RuntimeStats {
            cpus: self
                .shared
                .counters
                .iter()
                .enumerate()
                .map(|(i, c)| c.snapshot(CpuId(i as u32)))
                .collect(),
            ticks: self.shared.ticks.load(Ordering::Relaxed),
        }
    }

    /// Takes the work executions recorded so far, in completion order per CPU (empty unless
    /// [`ThreadedConfig::record_work`] is set).
    pub fn take_work_log(&self) -> Vec<WorkExecution> {
        self.shared
            .work_log
            .as_ref()
            .map(|l| std::mem::take(&mut *l.lock()))
            .unwrap_or_default()
    }

    /// The panics caught on the CPU threads so far (a panicking handler or work function is
    /// caught, recorded and the CPU carries on, its context as the panic left it).
    pub fn panics(&self) -> Vec<String> {
        self.shared.panics.lock().clone()
    }

    fn check_cpu(&self, cpu: CpuId) -> Result<(), ThreadedError> {
        let nr_cpus = self.shared.kernel.nr_cpus();
        if cpu.0 >= nr_cpus {
            return Err(ThreadedError::NoSuchCpu { cpu, nr_cpus });
        }
        Ok(())
    }

    /// The CPU whose thread is calling, if it is one of this runtime's CPU threads.
    pub fn current_cpu_thread(&self) -> Option<CpuId> {
        let me = std::thread::current().id();
        self.shared
            .thread_ids
            .iter()
            .position(|t| t.get() == Some(&me))
            .map(|i| CpuId(i as u32))
    }

    fn check_caller(&self) -> Result<(), ThreadedError> {
        if self.shared.stop.load(Ordering::SeqCst) {
            return Err(ThreadedError::Stopped);
        }
        match self.current_cpu_thread() {
            Some(c) => Err(ThreadedError::FromCpuThread(c)),
            None => Ok(()),
        }
    }

    fn post(&self, cpu: CpuId, msg: Msg) {
        if let Err(crossbeam_channel::SendError(msg)) = self.shared.mailboxes[cpu.index()].send(msg)
        {
            msg.refuse();
        }
        self.shared.kick(cpu);
    }

    /// Runs `f` in task context on `cpu`'s thread (between two events of that CPU, with its
    /// interrupts enabled at entry) and returns its result. Interrupts raised on `cpu` meanwhile
    /// are delivered at the IRQ windows of `f` (`local_irq_restore()`, `cond_resched()`, waits).
    ///
    /// Errors: an unknown CPU, an offline CPU (also if it went offline before `f` got to run),
    /// a call from one of the runtime's CPU threads, a stopped runtime, or `f` panicking (caught
    /// on the CPU thread and returned here).
    pub fn run_on<R, F>(&self, cpu: CpuId, f: F) -> Result<R, ThreadedError>
    where
        F: FnOnce(&Cpu) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.check_caller()?;
        self.post_on(cpu, f)?.wait()
    }

    /// Like [`ThreadedRuntime::run_on`] without waiting: posts `f` to `cpu`'s mailbox and returns
    /// a handle to its result. Unlike `run_on` it may be called from a CPU thread (the handle must
    /// then not be waited for from a CPU thread that `f` needs).
    pub fn post_on<R, F>(&self, cpu: CpuId, f: F) -> Result<TaskHandle<R>, ThreadedError>
    where
        F: FnOnce(&Cpu) -> R + Send + 'static,
        R: Send + 'static,
    {
        self.check_cpu(cpu)?;
        if self.shared.stop.load(Ordering::SeqCst) {
            return Err(ThreadedError::Stopped);
        }
        if !self.shared.kernel.cpu_online(cpu) {
            return Err(ThreadedError::CpuOffline(cpu));
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        let sh = Arc::clone(&self.shared);
        let msg = Msg::Task(Box::new(move |cx: Option<&Cpu>| {
            let r = match cx {
                None if sh.stop.load(Ordering::SeqCst) => Err(ThreadedError::Stopped),
                None => Err(ThreadedError::CpuOffline(cpu)),
                Some(cx) => catch_unwind(AssertUnwindSafe(|| f(cx))).map_err(|p| {
                    let message = sh.record_panic(cpu, "run_on", &*p);
                    ThreadedError::Panicked { cpu, message }
                }),
            };
            let _ = tx.send(r);
        }));
        self.post(cpu, msg);
        Ok(TaskHandle { rx })
    }

    /// `cpu_down(cpu, target)`: takes `cpu` down to `target` (e.g. `hotplug::CPUHP_OFFLINE`),
    /// executing each step on the CPU thread the step names and finishing it here. Other events
    /// keep running on every CPU between (and during) the steps. A failing callback (or an
    /// injected `hotplug/fail`, set with `kernel.hotplug().set_fail(cpu, state)`) rolls the
    /// operation back as the kernel does and is returned as [`ThreadedError::Hotplug`].
    pub fn cpu_down(&self, cpu: CpuId, target: StateId) -> Result<(), ThreadedError> {
        self.hotplug(cpu, target, false)
    }

    /// `cpu_up(cpu, target)` (e.g. `hotplug::CPUHP_ONLINE`); see [`ThreadedRuntime::cpu_down`].
    /// The target CPU's AP bring-up callbacks run on its own thread before it is online.
    pub fn cpu_up(&self, cpu: CpuId, target: StateId) -> Result<(), ThreadedError> {
        self.hotplug(cpu, target, true)
    }

    fn hotplug(&self, cpu: CpuId, target: StateId, up: bool) -> Result<(), ThreadedError> {
        self.check_cpu(cpu)?;
        self.check_caller()?;
        let sh = &*self.shared;
        let k = &sh.kernel;
        // cpus_write_lock(): one hotplug operation at a time.
        let _ctl = sh.hotplug_ctl.lock();
        if up {
            k.cpu_up_start(cpu, target)?;
        } else {
            k.cpu_down_start(cpu, target)?;
        }
        loop {
            let step = k.hotplug_begin_step(cpu)?;
            let on = step.run_on();
            let desc = step.invocation().to_string();
            let (tx, rx) = crossbeam_channel::bounded::<(HotplugStep, Result<(), Errno>)>(1);
            let (ptx, prx) = crossbeam_channel::bounded::<String>(1);
            let kernel = Arc::clone(k);
            let msg = Msg::Hotplug(Box::new(move |cx: Option<&Cpu>| {
                let Some(cx) = cx else { return };
                match catch_unwind(AssertUnwindSafe(|| kernel.hotplug_run_step(&step, cx))) {
                    Ok(r) => {
                        let _ = tx.send((step, r));
                    }
                    Err(p) => {
                        let _ = ptx.send(panic_message(&*p));
                    }
                }
            }));
            self.post(on, msg);
            let (step, result) = match rx.recv_timeout(sh.config.hotplug_step_timeout) {
                Ok(r) => r,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(ThreadedError::StepTimeout {
                        step: desc,
                        on,
                        timeout: sh.config.hotplug_step_timeout,
                    })
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(match prx.try_recv() {
                        Ok(message) => {
                            sh.record_panic(
                                on,
                                "hotplug step",
                                &message.clone() as &(dyn Any + Send),
                            );
                            ThreadedError::Panicked {
                                cpu: on,
                                message: format!("{desc}: {message}"),
                            }
                        }
                        Err(_) => ThreadedError::Stopped,
                    })
                }
            };
            let out = {
                // The step may change `cpu`'s online bit: not in the middle of one of its events.
                let _exec = sh.exec[cpu.index()].lock();
                k.hotplug_finish_step(step, result)?
            };
            sh.kick(cpu);
            match out {
                StepOutcome::Ran {
                    finished: Some(r), ..
                } => return r.map_err(ThreadedError::Hotplug),
                StepOutcome::Ran { finished: None, .. } => {}
                StepOutcome::Done => return Ok(()),
            }
        }
    }

    fn quiescent_now(&self) -> bool {
        let sh = &*self.shared;
        let k = &*sh.kernel;
        let before = sh.progress.load(Ordering::SeqCst);
        if sh.mailboxes.iter().any(|m| !m.is_empty()) {
            return false;
        }
        let online = k.online_cpus();
        for &c in &online {
            if k.pending_irqs(c) > 0 || k.pending_softirqs(c) > 0 || k.timers_due(c) {
                return false;
            }
        }
        if k.possible_cpus().any(|c| k.hotplug_in_progress(c)) {
            return false;
        }
        for p in k.pools() {
            if p.busy {
                return false;
            }
            if p.worker_runnable() || p.rescuer_runnable() {
                let runnable_here = match p.bound_cpu() {
                    Some(c) => online.contains(&c),
                    None => !online.is_empty(),
                };
                if runnable_here {
                    return false;
                }
            }
        }
        if sh.active.iter().any(|a| a.load(Ordering::SeqCst)) {
            return false;
        }
        sh.progress.load(Ordering::SeqCst) == before
    }

    /// Waits until nothing is runnable on the online CPUs: no pending IRQ or softirq, no due
    /// timer, no runnable worker or rescuer, no busy pool, no mailbox message, no hotplug
    /// operation in progress, every CPU thread idle. Timers may remain armed, and work that
    /// nothing can run (a congested pool without a rescuer) may remain queued. Returns `false`
    /// if that did not happen within `timeout`, and at once when called from a CPU thread (which
    /// is itself busy).
    pub fn quiesce(&self, timeout: Duration) -> bool {
        self.wait_quiescent(timeout, false)
    }

    /// Like [`ThreadedRuntime::quiesce`], and also waits until no timer is armed on an online CPU
    /// (delayed work has been queued and run).
    pub fn drain(&self, timeout: Duration) -> bool {
        self.wait_quiescent(timeout, true)
    }

    fn wait_quiescent(&self, timeout: Duration, no_timers: bool) -> bool {
        if self.current_cpu_thread().is_some() {
            return false;
        }
        let deadline = Instant::now() + timeout;
        let mut streak = 0;
        loop {
            let q = self.quiescent_now()
                && (!no_timers || self.shared.kernel.next_timer_expiry().is_none());
            if q {
                streak += 1;
                if streak >= 2 {
                    return true;
                }
            } else {
                streak = 0;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Stops the machine cleanly: quiesces (bounded by
    /// [`ThreadedConfig::shutdown_quiesce_timeout`]), stops and joins every thread (bounded by
    /// [`ThreadedConfig::join_timeout`]; a thread that does not exit is detached and reported),
    /// and reports everything still in flight. Never hangs.
    pub fn shutdown(mut self) -> ShutdownReport {
        let quiesced = self.quiesce(self.shared.config.shutdown_quiesce_timeout);
        let stuck_threads = self.stop_threads();
        let sh = &*self.shared;
        let k = &*sh.kernel;
        let per_cpu = |f: &dyn Fn(CpuId) -> usize| -> Vec<(CpuId, usize)> {
            k.possible_cpus()
                .map(|c| (c, f(c)))
                .filter(|(_, n)| *n > 0)
                .collect()
        };
        let stats = self.stats();
        ShutdownReport {
            quiesced,
            pending_irqs: per_cpu(&|c| k.pending_irqs(c)),
            pending_softirqs: per_cpu(&|c| k.pending_softirqs(c)),
            pools: k
                .pools()
                .into_iter()
                .filter(|p| p.queued > 0 || p.busy)
                .collect(),
            next_timer_expiry: k.next_timer_expiry(),
            armed_timers: k.armed_timers(),
            hotplug_in_progress: k
                .possible_cpus()
                .filter(|&c| k.hotplug_in_progress(c))
                .collect(),
            refused_messages: stats.total().refused,
            panics: sh.panics.lock().clone(),
            stuck_threads,
            jiffies: k.jiffies(),
            stats,
        }
    }

    /// Sets the stop flag, wakes every thread and joins them within the join timeout. Returns the
    /// names of the threads that did not exit (detached).
    fn stop_threads(&mut self) -> Vec<String> {
        let sh = &*self.shared;
        sh.stop.store(true, Ordering::SeqCst);
        for p in sh.parkers.iter() {
            p.kick();
        }
        sh.ticker_parker.kick();
        let deadline = Instant::now() + sh.config.join_timeout;
        let mut stuck = Vec::new();
        for (name, h) in self.threads.drain(..) {
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(200));
            }
            if h.is_finished() {
                if h.join().is_err() {
                    sh.panics
                        .lock()
                        .push(format!("thread {name} died of a panic"));
                }
            } else {
                tracing::error!(target: "biosim::threaded", "thread {name} did not stop within {:?}; detached", sh.config.join_timeout);
                stuck.push(name);
            }
        }
        stuck
    }
}

impl Drop for ThreadedRuntime {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            let _ = self.stop_threads();
        }
    }
}
