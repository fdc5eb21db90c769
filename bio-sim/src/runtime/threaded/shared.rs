//! What the runtime's threads and its controller share: the [`Shared`] state, the idle threads'
//! [`Parker`]s and the CPU mailboxes' messages ([`Msg`]).

use super::config::ThreadedConfig;
use super::idle_wait::IdleWait;
use super::stats::{bump, Counters, RuntimeStats};
use bio_core::kernel::CpuId;
use bio_core::workqueue::{PoolId, WorkExecution};
use bio_core::{Cpu, Kernel};
use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::ThreadId;
use std::time::Duration;

/// A sleeping place for one thread: a kick flag and a condition variable, or an [`IdleWait`]
/// (one io_uring per CPU) when one is installed. A kick that arrives while the thread is busy is
/// remembered, so the next sleep returns at once (no lost wake-up).
#[derive(Default)]
pub(super) struct Parker {
    kicked: Mutex<Kick>,
    cv: Condvar,
    /// Where the thread sleeps instead of `cv` (weak: its owner, e.g. an io_uring backing, keeps
    /// it alive; once gone, the thread sleeps on `cv` again).
    waiter: parking_lot::RwLock<Option<Weak<dyn IdleWait>>>,
}

/// A [`Parker`]'s state under its lock.
#[derive(Default)]
struct Kick {
    /// A kick not yet consumed by a park.
    kicked: bool,
    /// The [`IdleWait`] the thread sleeps in right now: the one a kick must wake (not whatever
    /// is installed by then, which may have been replaced or dropped).
    sleeping_in: Option<Arc<dyn IdleWait>>,
}

impl Parker {
    /// Wakes the thread sleeping here, or makes its next sleep return at once.
    pub(super) fn kick(&self) {
        let mut k = self.kicked.lock();
        if !k.kicked {
            k.kicked = true;
            match &k.sleeping_in {
                // The buggy twin: the kick is recorded but never reaches a thread asleep in its
                // io_uring, which sleeps on until a completion or its timeout.
                Some(_) if cfg!(feature = "bug-cpu-ring-wake-lost") => {}
                // The buggy twin: the kick wakes whatever waiter is installed by now, not the
                // one the thread sleeps in (lost when it was replaced meanwhile).
                Some(_) if cfg!(feature = "bug-cpu-ring-kick-wakes-installed") => {
                    if let Some(w) = self.waiter() {
                        w.wake();
                    }
                }
                // A reference only: the kicker never drops the waiter (its Drop may block).
                Some(w) => w.wake(),
                None => {
                    self.cv.notify_one();
                }
            }
        }
    }

    /// The installed [`IdleWait`], if it is still alive.
    pub(super) fn waiter(&self) -> Option<Arc<dyn IdleWait>> {
        self.waiter.read().as_ref().and_then(Weak::upgrade)
    }

    /// Installs (or with `None` removes) the thread's [`IdleWait`].
    pub(super) fn set_waiter(&self, w: Option<Weak<dyn IdleWait>>) {
        *self.waiter.write() = w;
    }

    /// Sleeps until kicked or `timeout`; returns whether it was kicked (and clears the kick) or,
    /// with an [`IdleWait`], whether its wait delivered something. A park that finds a kick
    /// pending still hands the waiter's queued work on ([`IdleWait::flush`]), so a CPU kicked
    /// between all its parks does not hold its I/O back.
    pub(super) fn park(&self, timeout: Duration) -> bool {
        let w = self.waiter();
        let mut k = self.kicked.lock();
        if k.kicked {
            k.kicked = false;
            drop(k);
            if let Some(w) = w {
                // The buggy twin: the queued SQEs wait for a park that sleeps.
                if !cfg!(feature = "bug-cpu-ring-no-flush") {
                    w.flush();
                }
            }
            return true;
        }
        let Some(w) = w else {
            self.cv.wait_for(&mut k, timeout);
            return std::mem::replace(&mut k.kicked, false);
        };
        // From here a kick calls `w.wake()`: set under the lock the kicker takes.
        k.sleeping_in = Some(Arc::clone(&w));
        drop(k);
        w.wait(timeout);
        let kicked = {
            let mut k = self.kicked.lock();
            k.sleeping_in = None;
            std::mem::replace(&mut k.kicked, false)
        };
        w.deliver() || kicked
    }
}

/// The closure of a mailbox message.
pub(super) type MailFn = Box<dyn FnOnce(Option<&Cpu>) + Send>;

/// A mailbox message. The closure gets the CPU's context to run in, or `None` when the message
/// is refused (it must then answer its sender with an error).
pub(super) enum Msg {
    /// A `ThreadedRuntime::run_on` closure: runs only while the CPU is online.
    Task(MailFn),
    /// A hotplug step: runs whether the CPU is online or not.
    Hotplug(MailFn),
}

impl Msg {
    /// Answers the sender with "not run" (the closure sees no CPU).
    pub(super) fn refuse(self) {
        match self {
            Msg::Task(f) | Msg::Hotplug(f) => f(None),
        }
    }
}

/// The state every thread of one runtime shares.
pub(super) struct Shared {
    pub(super) kernel: Arc<Kernel>,
    pub(super) config: ThreadedConfig,
    pub(super) parkers: Arc<[Parker]>,
    pub(super) ticker_parker: Parker,
    pub(super) mailboxes: Vec<Sender<Msg>>,
    /// Per-CPU execution locks (see the module docs of [`super`]).
    pub(super) exec: Vec<Mutex<()>>,
    pub(super) counters: Vec<Counters>,
    /// A CPU thread is between waking up and finding nothing to do.
    pub(super) active: Vec<AtomicBool>,
    /// Per CPU: its thread found its execution lock taken and parks until the holder kicks it.
    /// The holder kicks only then, so a thread running an offline CPU's pool does not wake that
    /// CPU's thread after every item (which would make the next `try_lock` fail).
    pub(super) exec_missed: Vec<AtomicBool>,
    pub(super) thread_ids: Vec<OnceLock<ThreadId>>,
    pub(super) stop: AtomicBool,
    /// Bumped after every event a CPU thread completes (for `ThreadedRuntime::quiesce`).
    pub(super) progress: AtomicU64,
    pub(super) ticks: AtomicU64,
    pub(super) hotplug_ctl: Mutex<()>,
    pub(super) panics: Mutex<Vec<String>>,
    pub(super) work_log: Option<Mutex<Vec<WorkExecution>>>,
    /// The captured trace of every CPU thread (with [`ThreadedConfig::capture_trace`]).
    pub(super) trace: Option<crate::report::capture::Lines>,
    /// When the runtime started: time zero of the trace.
    pub(super) started: std::time::Instant,
    /// Called by a CPU thread just before it parks ([`super::ThreadedRuntime::on_park`]).
    pub(super) park_hooks: parking_lot::RwLock<Vec<ParkHook>>,
}

/// A [`super::ThreadedRuntime::on_park`] hook.
pub(super) type ParkHook = Arc<dyn Fn() + Send + Sync>;

impl Shared {
    /// The shared state of a machine of `parkers.len()` CPUs, nothing run yet.
    pub(super) fn new(
        kernel: Arc<Kernel>,
        config: ThreadedConfig,
        parkers: Arc<[Parker]>,
        mailboxes: Vec<Sender<Msg>>,
    ) -> Self {
        let n = parkers.len();
        Self {
            kernel,
            parkers,
            ticker_parker: Parker::default(),
            mailboxes,
            exec: (0..n).map(|_| Mutex::new(())).collect(),
            counters: (0..n).map(|_| Counters::default()).collect(),
            active: (0..n).map(|_| AtomicBool::new(false)).collect(),
            exec_missed: (0..n).map(|_| AtomicBool::new(false)).collect(),
            thread_ids: (0..n).map(|_| OnceLock::new()).collect(),
            stop: AtomicBool::new(false),
            progress: AtomicU64::new(0),
            ticks: AtomicU64::new(0),
            hotplug_ctl: Mutex::new(()),
            panics: Mutex::new(Vec::new()),
            work_log: config.record_work.then(|| Mutex::new(Vec::new())),
            trace: config.capture_trace.then(Default::default),
            started: std::time::Instant::now(),
            park_hooks: parking_lot::RwLock::new(Vec::new()),
            config,
        }
    }

    /// Runs the park hooks: a CPU thread is about to sleep.
    pub(super) fn before_park(&self) {
        for h in self.park_hooks.read().iter() {
            h();
        }
    }

    /// Wakes `cpu`'s thread.
    pub(super) fn kick(&self, cpu: CpuId) {
        if let Some(p) = self.parkers.get(cpu.index()) {
            p.kick();
        }
    }

    /// Puts `msg` in `cpu`'s mailbox and wakes its thread; a mailbox whose thread is gone refuses
    /// the message at once, so its sender is answered.
    pub(super) fn post(&self, cpu: CpuId, msg: Msg) {
        if let Err(crossbeam_channel::SendError(msg)) = self.mailboxes[cpu.index()].send(msg) {
            msg.refuse();
        }
        self.kick(cpu);
    }

    /// The CPU whose thread is calling, if it is one of this runtime's CPU threads.
    pub(super) fn current_cpu_thread(&self) -> Option<CpuId> {
        let me = std::thread::current().id();
        self.thread_ids
            .iter()
            .position(|t| t.get() == Some(&me))
            .map(|i| CpuId(i as u32))
    }

    /// A snapshot of the counters.
    pub(super) fn stats(&self) -> RuntimeStats {
        RuntimeStats {
            cpus: self
                .counters
                .iter()
                .enumerate()
                .map(|(i, c)| c.snapshot(CpuId(i as u32)))
                .collect(),
            ticks: self.ticks.load(Ordering::Relaxed),
        }
    }

    /// Records a panic caught on `cpu`'s thread while running `what`; returns its message.
    pub(super) fn record_panic(
        &self,
        cpu: CpuId,
        what: &str,
        payload: &(dyn Any + Send),
    ) -> String {
        let message = panic_message(payload);
        bump(&self.counters[cpu.index()].panics, 1);
        let line = format!("{cpu} ({what}): {message}");
        tracing::error!(target: "biosim::threaded", cpu = cpu.0, "panic caught: {line}");
        self.panics.lock().push(line);
        message
    }

    /// Counts a work execution on `me` (and logs it if [`ThreadedConfig::record_work`]).
    pub(super) fn record_work(&self, x: &WorkExecution, me: CpuId) {
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

/// The message of a panic payload (`panic!` gives a `&str` or a `String`).
pub(super) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
