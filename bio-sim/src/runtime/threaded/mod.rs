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
//!   Use the [deterministic runtime](crate::runtime::deterministic) to pin an interleaving down.
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
//! pool is never rebound while another CPU is taking an item off it as "unbound". A CPU thread
//! that finds its own lock taken does not block on it: it sleeps in its idle wait (so its
//! io_uring is still reaped) until the holder, letting go, kicks it.
//!
//! # Where it lives
//!
//! - [`config`], [`error`]: [`ThreadedConfig`] and [`ThreadedError`].
//! - `shared`: the state the threads share, their parkers and mailbox messages.
//! - `cpu`: one CPU's thread: its event loop, IRQ windows and waits, idle sleep.
//! - `ticker`: the jiffies ticker thread.
//! - `cpuhp`: hotplug steps run on the CPU threads they name.
//! - [`idle_wait`]: [`IdleWait`], an idle sleep with wake-up sources of its own (a CPU's io_uring).
//! - `quiesce`: when nothing is runnable any more.
//! - `shutdown`: stopping and joining the threads, and the [`ShutdownReport`].
//! - [`stats`]: the counters ([`CpuStats`], [`RuntimeStats`]); [`task`]: [`TaskHandle`].
//!
//! [`Runtime::wait_until`]: bio_core::kernel::Runtime::wait_until

pub mod config;
mod cpu;
mod cpuhp;
pub mod error;
pub mod idle_wait;
mod quiesce;
mod shared;
pub mod shutdown;
pub mod stats;
pub mod task;
mod ticker;

#[cfg(test)]
mod tests;

pub use config::ThreadedConfig;
pub use error::ThreadedError;
pub use idle_wait::IdleWait;
pub use shutdown::ShutdownReport;
pub use stats::{CpuStats, RuntimeStats};
pub use task::TaskHandle;

use bio_core::kernel::CpuId;
use bio_core::workqueue::WorkExecution;
use bio_core::{Cpu, Kernel};
use hotplug::StateId;
use shared::{Msg, Parker, Shared};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

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
        let shared = Arc::new(Shared::new(kernel, config, parkers, senders));
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
                .spawn(move || cpu::cpu_thread_main(sh, cpu, rx));
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
                .spawn(move || ticker::ticker_main(sh))
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

    /// Registers `hook`, called on a CPU thread each time it is about to park (sleep with
    /// nothing to run, or in `Runtime::wait_until` with nothing to do): where work deferred until
    /// the CPU goes quiet is pushed out, as an io_uring backing rings its doorbell once for the
    /// submissions of a burst ([`crate::dev::loop_file::UringBacking::defer_doorbell`]). A hook
    /// must be quick and must not block.
    pub fn on_park(&self, hook: impl Fn() + Send + Sync + 'static) {
        self.shared.park_hooks.write().push(Arc::new(hook));
    }

    /// Makes `cpu`'s thread sleep in `waiter` ([`IdleWait::wait`]) instead of on its condition
    /// variable whenever it parks (idle, or in `Runtime::wait_until` with nothing to do); every
    /// wake-up of that CPU then reaches it through [`IdleWait::wake`]. The runtime keeps only a
    /// weak reference: once the waiter is dropped the thread sleeps as before. A thread already
    /// asleep is woken, so it moves to the new waiter at once.
    ///
    /// Errors: an unknown CPU.
    pub fn set_idle_wait(
        &self,
        cpu: CpuId,
        waiter: std::sync::Weak<dyn IdleWait>,
    ) -> Result<(), ThreadedError> {
        self.check_cpu(cpu)?;
        self.shared.parkers[cpu.index()].set_waiter(Some(waiter));
        self.shared.kick(cpu);
        Ok(())
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
        self.shared.stats()
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

    /// The trace captured so far on the CPU threads (empty unless
    /// [`ThreadedConfig::capture_trace`] is set), in timestamp order: monotonic time since the
    /// runtime started, the CPU column the thread's CPU, the task the event's own `comm`/`pid`
    /// or `<idle>` (this runtime does not follow `current` for the trace).
    pub fn ftrace(&self) -> crate::report::ftrace::Ftrace {
        let mut records = self
            .shared
            .trace
            .as_ref()
            .map(|l| l.lock().clone())
            .unwrap_or_default();
        records.sort_by_key(|r| r.ts_us);
        crate::report::ftrace::Ftrace {
            records,
            nr_cpus: self.shared.kernel.nr_cpus(),
            control_cpu: 0,
        }
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
        self.shared.current_cpu_thread()
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
        self.shared.post(cpu, msg);
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
        cpuhp::drive(&self.shared, cpu, target, up)
    }

    /// Waits until nothing is runnable on the online CPUs: no pending IRQ or softirq, no due
    /// timer, no runnable worker or rescuer, no busy pool, no mailbox message, no hotplug
    /// operation in progress, every CPU thread idle. Timers may remain armed, and work that
    /// nothing can run (a congested pool without a rescuer) may remain queued. Returns `false`
    /// if that did not happen within `timeout`, and at once when called from a CPU thread (which
    /// is itself busy).
    pub fn quiesce(&self, timeout: Duration) -> bool {
        quiesce::wait_quiescent(&self.shared, timeout, false)
    }

    /// Like [`ThreadedRuntime::quiesce`], and also waits until no timer is armed on an online CPU
    /// (delayed work has been queued and run).
    pub fn drain(&self, timeout: Duration) -> bool {
        quiesce::wait_quiescent(&self.shared, timeout, true)
    }

    /// Stops the machine cleanly: quiesces (bounded by
    /// [`ThreadedConfig::shutdown_quiesce_timeout`]), stops and joins every thread (bounded by
    /// [`ThreadedConfig::join_timeout`]; a thread that does not exit is detached and reported),
    /// and reports everything still in flight. Never hangs.
    pub fn shutdown(mut self) -> ShutdownReport {
        let quiesced = self.quiesce(self.shared.config.shutdown_quiesce_timeout);
        let stuck_threads = self.stop_threads();
        shutdown::report(&self.shared, quiesced, stuck_threads)
    }

    /// Stops and joins the threads (see [`shutdown::stop_threads`]); the names of those that did
    /// not exit.
    fn stop_threads(&mut self) -> Vec<String> {
        shutdown::stop_threads(&self.shared, &mut self.threads)
    }
}

impl Drop for ThreadedRuntime {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            let _ = self.stop_threads();
        }
    }
}
