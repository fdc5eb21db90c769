//! The simulated kernel: its configuration, its CPUs and the execution context of whatever runs on
//! each of them.
//!
//! [`Kernel`] is the machine-wide state (`struct` globals of the real kernel: the config, the
//! report log, later the workqueues and the completion batcher). [`Cpu`] is "the code currently
//! running on CPU n": the explicit stand-in for `smp_processor_id()`, `current` and the per-CPU
//! `preempt_count`. Every function the kernel runs "on this CPU" takes a `&Cpu`; nothing reads an
//! OS thread id or a thread-local.

mod boot_states;
pub use boot_states::{EarlyState, EARLY_DYNAMIC_STATES};
mod config;
mod cpu;
pub mod fault_inject;
pub mod hung_task;
mod irqflags;
pub mod llist;
pub mod local_lock;
mod lockdep;
pub mod percpu;
mod preempt;
mod rcupdate;
mod report;
mod sched;
pub mod srcu;
mod task;
pub(crate) mod trace;

pub use config::{ConfigError, KernelConfig, PreemptModel};
pub use cpu::{HotplugGuard, HotplugStep};
pub use irqflags::IrqFlags;
pub use lockdep::{HeldLock, LockClass, LockRead, WaitType};
pub use preempt::{
    ContextKind, ContextSnapshot, HARDIRQ_MASK, HARDIRQ_OFFSET, NMI_MASK, NMI_OFFSET, PREEMPT_MASK,
    PREEMPT_OFFSET, SOFTIRQ_DISABLE_OFFSET, SOFTIRQ_MASK, SOFTIRQ_OFFSET,
};
pub use report::{Report, ReportKind, ReportLog};
pub use sched::PrevState;
pub use task::{
    memalloc_nofs_restore, memalloc_nofs_save, memalloc_noio_restore, memalloc_noio_save, Task,
    TaskState, DEFAULT_PRIO, HIGHPRI_PRIO, PF_MEMALLOC_NOFS, PF_MEMALLOC_NOIO,
};
pub use task::{memalloc_noreclaim_restore, memalloc_noreclaim_save, PF_MEMALLOC};
pub use trace::{hashed_ptr, timer_ptr, work_ptr, PtrKind, TraceFlags};

pub use hotplug::CpuId;

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{Mutex, UntrackedArc, UntrackedOnceLock};
use hotplug::Cpuhp;
use std::cell::{Cell, RefCell};
use std::fmt;

/// The machine-wide state of a simulated kernel: its config, the CPU masks, jiffies, the
/// workqueue, timer and IRQ subsystems, the CPU-hotplug machine and the report log.
pub struct Kernel {
    config: KernelConfig,
    nr_cpus: u32,
    reports: ReportLog,
    next_bio_id: AtomicU64,
    next_ctx_id: AtomicU64,
    /// Tokens of asynchronous device I/O (the kiocbs loop devices hand to their backing).
    aio_tokens: UntrackedArc<crate::sync::untracked::AtomicUsize>,
    pub(crate) percpu: Vec<PerCpuState>,
    pub(crate) jiffies: AtomicU64,
    pub(crate) workqueues: crate::workqueue::Workqueues,
    pub(crate) timers: crate::time::Timers,
    pub(crate) irqs: crate::irq::Irqs,
    /// Only through [`Kernel::hotplug`] / `lock_hotplug()`, which keep `hotplug_owner`.
    hotplug: Mutex<Cpuhp<Cpu>>,
    /// The thread holding `hotplug`, to refuse a second take on it.
    hotplug_owner: crate::sync::LockOwner,
    waker: UntrackedOnceLock<UntrackedArc<dyn Fn(CpuId) + Send + Sync>>,
    warned_once: Mutex<Vec<&'static str>>,
    /// `debug_locks` and lockdep's lock classes.
    lockdep: lockdep::Lockdep,
    pub(crate) bio_complete:
        UntrackedOnceLock<UntrackedArc<crate::block::complete_in_task::BioCompleteBatcher>>,
    /// `failslab`, `fail_make_request`, the one-shots and the fault log.
    fault_inject: fault_inject::FaultInject,
    /// The hung-task detector's sysctls.
    pub(crate) hung_task: hung_task::HungTask,
    /// Whether `blk_mq_flush_plug_list()` has the post-6.18 fix "blk-mq: fix plug list
    /// corruption when queue_rq adds new requests" (Ming Lei, Nov 2025): off, the 6.18 code.
    blk_plug_list_fix: crate::sync::untracked::AtomicBool,
    /// The tracepoints' static keys as one switch (see [`Kernel::set_tracepoints_enabled`]).
    tracepoints: crate::sync::untracked::AtomicBool,
    /// `kblockd_workqueue`, allocated on first use (`block::blk_core::kblockd_workqueue`).
    pub(crate) kblockd: UntrackedOnceLock<crate::workqueue::Workqueue>,
    /// `blkdev_dio_pool` (block/fops.c), made on first use (`block::fops::blkdev_dio_pool`).
    pub(crate) blkdev_dio_pool: UntrackedOnceLock<crate::block::BioSet>,
    /// `fs_bio_set` (block/bio.c), made on first use (`block::bio::fs_bio_set`).
    pub(crate) fs_bio_set: UntrackedOnceLock<crate::block::BioSet>,
    /// `fs_bio_set.cache` (`BIOSET_PERCPU_CACHE`): one `struct bio_alloc_cache` per possible CPU,
    /// made by [`Kernel::bioset_percpu_cache_init`] (unset: `bs->cache == NULL`).
    pub(crate) bio_alloc_cache:
        UntrackedOnceLock<Vec<crate::sync::untracked::Mutex<crate::block::BioAllocCache>>>,
    /// `iomap_ioend_bioset` (fs/iomap/ioend.c), made on first use (`fs::iomap`).
    pub(crate) iomap_ioend_bioset: UntrackedOnceLock<crate::block::BioSet>,
}

/// Per-CPU kernel state that any CPU may read.
pub(crate) struct PerCpuState {
    /// `cpu_online_mask` bit.
    pub(crate) online: AtomicBool,
    /// The IRQ flag as a lock: held while some context of this CPU runs with IRQs off, so that
    /// two flows of one CPU (an IRQ and the task it interrupts) exclude each other for real in the
    /// threaded runtime and under loom.
    pub(crate) irq_lock: crate::sync::RawLock,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("config", &self.config)
            .field("nr_cpus", &self.nr_cpus)
            .field("jiffies", &self.jiffies())
            .field("reports", &self.reports.len())
            .finish()
    }
}

impl Kernel {
    /// Boots a kernel with `nr_cpus` possible CPUs, all online, under `config`.
    ///
    /// The config is validated against the Kconfig rules first: an impossible config is an error
    /// naming the rule, never a silently wrong simulation.
    pub fn new(config: KernelConfig, nr_cpus: u32) -> Result<UntrackedArc<Self>, ConfigError> {
        Self::boot(config, nr_cpus, nr_cpus)
    }

    /// Boots a kernel with `nr_cpus` possible CPUs of which the first `online` are up (at
    /// `CPUHP_ONLINE`) and the rest offline (at `CPUHP_OFFLINE`), as after a boot with
    /// `maxcpus=online`. The subsystems register their hotplug states on the way, as their
    /// `__init` code does.
    pub fn boot(
        config: KernelConfig,
        nr_cpus: u32,
        online: u32,
    ) -> Result<UntrackedArc<Self>, ConfigError> {
        config.validate()?;
        if nr_cpus == 0 {
            return Err(ConfigError::Unsupported(
                "a machine needs at least one CPU (nr_cpu_ids >= 1)",
            ));
        }
        if online == 0 || online > nr_cpus {
            return Err(ConfigError::Unsupported(
                "the boot CPUs must be between 1 and nr_cpus (CPU0 always boots)",
            ));
        }
        // CONFIG_CPU_HOTPLUG_STATE_CONTROL (KernelConfig::cpu_hotplug_state_control, on by
        // default): `cpuN/hotplug/target` takes any named, stoppable state, not only 0 and
        // CPUHP_ONLINE (target_store()), so a scenario can park a CPU between two steps.
        let cpuhp = Cpuhp::with_config(
            nr_cpus,
            online,
            hotplug::CpuhpConfig {
                state_control: config.cpu_hotplug_state_control,
                // The same rule as `Cpu::trace_flags()`: a tracepoint's own preempt_disable shows
                // on a PREEMPT_COUNT kernel without PREEMPTION.
                tracepoint_preempt_depth: u8::from(config.preempt_count && !config.preemption()),
                ..hotplug::CpuhpConfig::default()
            },
        )
        .map_err(|_| ConfigError::Unsupported("the hotplug machine rejected the CPU counts"))?;
        let percpu = (0..nr_cpus)
            .map(|i| PerCpuState {
                online: AtomicBool::new(i < online),
                irq_lock: crate::sync::RawLock::new(),
            })
            .collect();
        let kernel = UntrackedArc::new(Self {
            config,
            nr_cpus,
            reports: ReportLog::default(),
            next_bio_id: AtomicU64::new(1),
            next_ctx_id: AtomicU64::new(1),
            aio_tokens: UntrackedArc::new(crate::sync::untracked::AtomicUsize::new(1)),
            percpu,
            jiffies: AtomicU64::new(0),
            workqueues: crate::workqueue::Workqueues::new(nr_cpus),
            timers: crate::time::Timers::new(nr_cpus),
            irqs: crate::irq::Irqs::new(nr_cpus),
            hotplug: Mutex::new(cpuhp),
            hotplug_owner: crate::sync::LockOwner::default(),
            waker: UntrackedOnceLock::new(),
            warned_once: Mutex::new(Vec::new()),
            lockdep: lockdep::Lockdep::default(),
            bio_complete: UntrackedOnceLock::new(),
            fault_inject: fault_inject::FaultInject::default(),
            hung_task: hung_task::HungTask::default(),
            blk_plug_list_fix: crate::sync::untracked::AtomicBool::new(false),
            tracepoints: crate::sync::untracked::AtomicBool::new(true),
            kblockd: UntrackedOnceLock::new(),
            blkdev_dio_pool: UntrackedOnceLock::new(),
            fs_bio_set: UntrackedOnceLock::new(),
            bio_alloc_cache: UntrackedOnceLock::new(),
            iomap_ioend_bioset: UntrackedOnceLock::new(),
        });
        crate::workqueue::register_hotplug_states(&kernel);
        crate::time::register_hotplug_states(&kernel);
        boot_states::register_early_dynamic_states(&kernel);
        Ok(kernel)
    }

    /// Applies (or not) the post-6.18 patch "blk-mq: fix plug list corruption when queue_rq
    /// adds new requests": `blk_mq_flush_plug_list()` swaps `plug->mq_list` to a local list and
    /// loops while `->queue_rq()` added requests. Off by default: 6.18 walks the live list
    /// (see `block::blk_plug`).
    pub fn set_blk_plug_list_fix(&self, on: bool) {
        self.blk_plug_list_fix
            .store(on, crate::sync::untracked::Ordering::Relaxed);
    }

    /// Whether [`Kernel::set_blk_plug_list_fix`] is on.
    pub fn blk_plug_list_fix(&self) -> bool {
        self.blk_plug_list_fix
            .load(crate::sync::untracked::Ordering::Relaxed)
    }

    /// Attaches (`true`, the default) or detaches every tracepoint probe: the
    /// `__tracepoint_<name>.key` static keys of include/linux/tracepoint.h, which
    /// `tracepoint_probe_register()` enables when tracefs, perf or BPF attaches to an event and
    /// which leave a disabled `trace_<name>()` a patched-out jump, its arguments never computed.
    /// Off, [`ktrace!`](crate::ktrace) and the request tracepoints build nothing and ask no
    /// `tracing` subscriber: a kernel with tracing off, as `biosim bench` compares against the
    /// real one. One switch for all events (the kernel has one key per event).
    pub fn set_tracepoints_enabled(&self, on: bool) {
        self.tracepoints
            .store(on, crate::sync::untracked::Ordering::Relaxed);
    }

    /// Whether [`Kernel::set_tracepoints_enabled`] left the tracepoints' probes attached.
    pub fn tracepoints_enabled(&self) -> bool {
        self.tracepoints
            .load(crate::sync::untracked::Ordering::Relaxed)
    }

    /// The configuration this kernel was built with.
    pub fn config(&self) -> &KernelConfig {
        &self.config
    }

    /// `nr_cpu_ids`: the number of possible CPUs.
    pub fn nr_cpus(&self) -> u32 {
        self.nr_cpus
    }

    /// The possible CPUs, `for_each_possible_cpu()`.
    pub fn possible_cpus(&self) -> impl Iterator<Item = CpuId> {
        (0..self.nr_cpus).map(CpuId)
    }

    /// `cpu_online(cpu)`: whether `cpu` is in `cpu_online_mask`.
    pub fn cpu_online(&self, cpu: CpuId) -> bool {
        self.percpu
            .get(cpu.index())
            .is_some_and(|p| p.online.load(Ordering::Acquire))
    }

    /// `for_each_online_cpu()`.
    pub fn online_cpus(&self) -> Vec<CpuId> {
        self.possible_cpus()
            .filter(|c| self.cpu_online(*c))
            .collect()
    }

    /// The fault-injection state (`lib/fault-inject.c` instances and biosim's one-shots).
    pub fn fault_inject(&self) -> &fault_inject::FaultInject {
        &self.fault_inject
    }

    /// Every BUG, WARN and context-check violation recorded so far.
    pub fn reports(&self) -> &ReportLog {
        &self.reports
    }

    /// Creates the execution context of code running on `cpu`, in plain task context with
    /// preemption and IRQs enabled. Returns `None` for a CPU that does not exist.
    pub fn cpu(self: &UntrackedArc<Self>, cpu: CpuId) -> Option<Cpu> {
        (cpu.0 < self.nr_cpus).then(|| Cpu::new(UntrackedArc::clone(self), cpu, None))
    }

    /// Like [`Kernel::cpu`], for a runtime: the context calls `runtime` at IRQ windows and when
    /// it must wait.
    pub fn cpu_with_runtime(
        self: &UntrackedArc<Self>,
        cpu: CpuId,
        runtime: UntrackedArc<dyn Runtime>,
    ) -> Option<Cpu> {
        (cpu.0 < self.nr_cpus).then(|| Cpu::new(UntrackedArc::clone(self), cpu, Some(runtime)))
    }

    /// Installs the runtime's wake-up hook: called with a CPU whenever something becomes
    /// runnable on it (queued work, a raised IRQ, an armed timer). Set once; later calls are
    /// ignored and return `false`.
    pub fn set_waker(&self, waker: UntrackedArc<dyn Fn(CpuId) + Send + Sync>) -> bool {
        self.waker.set(waker).is_ok()
    }

    /// Wakes `cpu`'s runtime thread, if a runtime installed a waker.
    pub(crate) fn wake(&self, cpu: CpuId) {
        if let Some(w) = self.waker.get() {
            w(cpu);
        }
    }

    /// A fresh simulator-wide bio identity (not a kernel concept: traces and the oracle use it).
    pub(crate) fn alloc_bio_id(&self) -> u64 {
        self.next_bio_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The generator of asynchronous I/O tokens, unique across the kernel's devices.
    pub(crate) fn aio_tokens(&self) -> UntrackedArc<crate::sync::untracked::AtomicUsize> {
        UntrackedArc::clone(&self.aio_tokens)
    }

    /// `WARN_ON_ONCE()`: reports `message` as a WARN the first time call site `site` fires.
    pub fn warn_once(&self, cx: &Cpu, site: &'static str, message: &str) {
        {
            let mut w = self.warned_once.lock();
            if w.contains(&site) {
                return;
            }
            w.push(site);
        }
        cx.warn(message);
    }

    pub(crate) fn irq_lock_acquire(&self, cpu: CpuId) {
        self.percpu[cpu.index()].irq_lock.lock();
    }

    pub(crate) fn irq_lock_release(&self, cpu: CpuId) {
        self.percpu[cpu.index()].irq_lock.unlock();
    }
}

/// What a runtime lends the code it runs. The deterministic runtime answers by choosing among
/// its events; the threaded runtime by draining its inbox or parking; without a runtime (unit
/// tests) nothing is delivered and waits can only succeed if the condition already holds.
///
/// Not `Send`/`Sync`: a context and its runtime hook live on the thread that executes them (the
/// deterministic runtime's hook refers back to its own single-threaded state).
pub trait Runtime {
    /// IRQs just became enabled in `cpu`'s context (`local_irq_restore()`, `local_irq_enable()`,
    /// a `cond_resched()` point): the runtime may deliver pending interrupts here, as hardware
    /// would between two instructions.
    fn irq_window(&self, cpu: &Cpu);

    /// `cpu`'s context must sleep until `cond` holds (`schedule()` in a wait loop): the runtime
    /// lets other work run meanwhile. Returns `false` if the condition can never become true
    /// (a deadlock the caller reports).
    fn wait_until(&self, cpu: &Cpu, what: &str, cond: &dyn Fn() -> bool) -> bool;

    /// [`Runtime::wait_until`] for a condition that turns true by itself at the wall-clock time
    /// `at` (a rate limit, a think time: `hrtimer_nanosleep()`'s timer): a runtime that sleeps
    /// between polls of `cond` wakes by `at` rather than a poll slice later. By default the
    /// plain wait (a runtime with no wall clock, the deterministic one, ignores `at`).
    fn wait_until_at(
        &self,
        cpu: &Cpu,
        what: &str,
        at: std::time::Instant,
        cond: &dyn Fn() -> bool,
    ) -> bool {
        let _ = at;
        self.wait_until(cpu, what, cond)
    }
}

/// The code currently running on one simulated CPU: `smp_processor_id()`, `current` and the
/// per-CPU `preempt_count`, IRQ flag and RCU nesting of `include/linux/preempt.h`,
/// `include/linux/irqflags.h` and `include/linux/rcupdate.h`.
///
/// A `Cpu` holds a reference to its [`Kernel`] and is owned by whoever executes on that CPU (its thread in the threaded runtime, the event
/// loop in the deterministic one, one loom thread per execution flow in the models), so its
/// counters are plain cells: only the owner ever touches them.
pub struct Cpu {
    kernel: UntrackedArc<Kernel>,
    id: CpuId,
    /// Identity of this execution flow (to tell "the work I am running" from another's).
    ctx_id: u64,
    runtime: Option<UntrackedArc<dyn Runtime>>,
    /// Preempt-disable depth and hardirq/NMI bits as the kernel sees them (`preempt_count()`
    /// without the softirq bits, which live in `softirq`).
    pub(crate) pc: Cell<u32>,
    /// Softirq bits (`SOFTIRQ_OFFSET` serving, `SOFTIRQ_DISABLE_OFFSET` per BH disable). Part of
    /// `preempt_count()` on !RT; a per-task count (`current->softirq_disable_cnt`) on RT.
    pub(crate) softirq: Cell<u32>,
    /// `preempt_disable()` depth the kernel cannot see because `CONFIG_PREEMPT_COUNT=n`. The
    /// simulator still knows it: this is the ground truth the oracle checks against.
    pub(crate) hidden_preempt: Cell<u32>,
    /// The IRQ flag: `irqs_disabled()`.
    pub(crate) irqs_off: Cell<bool>,
    /// `current->rcu_read_lock_nesting` (`CONFIG_PREEMPT_RCU`).
    pub(crate) rcu_nesting: Cell<u32>,
    /// `rcu_read_lock()` depth on a non-preemptible-RCU kernel, where it is `preempt_disable()`.
    pub(crate) rcu_sched_depth: Cell<u32>,
    pub(crate) held_locks: RefCell<Vec<HeldLock>>,
    pub(crate) need_resched: Cell<bool>,
    /// The IRQ flag of each context an NMI interrupted.
    pub(crate) nmi_saved_irqs: RefCell<Vec<bool>>,
    pub(crate) current: RefCell<Task>,
    /// The rest of `current` the submission path reads (see [`TaskState`]).
    pub(crate) task_state: TaskState,
}

impl fmt::Debug for Cpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cpu")
            .field("id", &self.id)
            .field("context", &self.snapshot())
            .finish()
    }
}

impl Cpu {
    fn new(
        kernel: UntrackedArc<Kernel>,
        id: CpuId,
        runtime: Option<UntrackedArc<dyn Runtime>>,
    ) -> Self {
        let ctx_id = kernel.next_ctx_id.fetch_add(1, Ordering::Relaxed);
        Self {
            kernel,
            id,
            ctx_id,
            runtime,
            pc: Cell::new(0),
            softirq: Cell::new(0),
            hidden_preempt: Cell::new(0),
            irqs_off: Cell::new(false),
            rcu_nesting: Cell::new(0),
            rcu_sched_depth: Cell::new(0),
            held_locks: RefCell::new(Vec::new()),
            need_resched: Cell::new(false),
            nmi_saved_irqs: RefCell::new(Vec::new()),
            current: RefCell::new(Task::submitter(id)),
            task_state: TaskState::default(),
        }
    }

    /// `smp_processor_id()`.
    pub fn id(&self) -> CpuId {
        self.id
    }

    /// The identity of this execution flow.
    pub fn ctx_id(&self) -> u64 {
        self.ctx_id
    }

    /// The runtime executing this context, if any.
    pub fn runtime(&self) -> Option<&UntrackedArc<dyn Runtime>> {
        self.runtime.as_ref()
    }

    /// An IRQ window: if IRQs are enabled here, lets the runtime deliver pending interrupts.
    /// Called where the kernel re-enables IRQs and at `cond_resched()` points.
    pub fn irq_window(&self) {
        if self.irqs_off.get() {
            return;
        }
        if let Some(rt) = &self.runtime {
            rt.irq_window(self);
        }
    }

    /// `cond_resched()`: a voluntary preemption point, where pending interrupts may come in.
    pub fn cond_resched(&self) {
        if self.may_sleep() {
            self.irq_window();
        }
    }

    /// Sleeps until `cond` holds, letting the runtime run other work (`schedule()` in a wait
    /// loop). Before it sleeps, `schedule()`'s `sched_submit_work()` flushes the task's plug
    /// (`block::blk_plug::sched_submit_work`), whatever the runtime. Without a runtime only an
    /// already-true condition (possibly made true by that flush) succeeds. Returns whether the
    /// condition holds.
    pub fn wait_until(&self, what: &str, cond: &dyn Fn() -> bool) -> bool {
        self.wait_until_inner(what, None, cond)
    }

    /// [`Cpu::wait_until`] for a condition that turns true by itself at the wall-clock time
    /// `at` ([`Runtime::wait_until_at`]): a sleep until a deadline, as `hrtimer_nanosleep()`.
    pub fn wait_until_at(
        &self,
        what: &str,
        at: std::time::Instant,
        cond: &dyn Fn() -> bool,
    ) -> bool {
        self.wait_until_inner(what, Some(at), cond)
    }

    fn wait_until_inner(
        &self,
        what: &str,
        at: Option<std::time::Instant>,
        cond: &dyn Fn() -> bool,
    ) -> bool {
        if cond() {
            return true;
        }
        // schedule() → sched_submit_work(): the task's plug is flushed before it sleeps.
        crate::block::blk_plug::sched_submit_work(self);
        if cond() {
            return true;
        }
        let ok = match (&self.runtime, at) {
            (Some(rt), Some(at)) => rt.wait_until_at(self, what, at, cond),
            (Some(rt), None) => rt.wait_until(self, what, cond),
            (None, _) => false,
        };
        // Gave up: nothing can make the condition true, a task blocked forever.
        if !ok {
            hung_task::check_hung_task(self, what);
        }
        ok
    }

    /// Sleeps until `cond` holds or `timeout` jiffies pass (`io_schedule_timeout()` in a
    /// wait loop whose caller retries: `mempool_alloc()`), letting the runtime run other work.
    /// Returns whether the condition holds; `false` is the timeout (the model takes it when no
    /// event can make the condition true, and does not advance jiffies for it). A task that sleeps
    /// like this switches at every timeout, so the hung-task detector reports it only if its
    /// check would not see that (`hung_task::check_hung_task_timed`).
    pub fn wait_until_timeout(&self, what: &str, timeout: u64, cond: &dyn Fn() -> bool) -> bool {
        if cond() {
            return true;
        }
        crate::block::blk_plug::sched_submit_work(self);
        if cond() {
            return true;
        }
        let ok = match &self.runtime {
            Some(rt) => rt.wait_until(self, what, cond),
            None => false,
        };
        if !ok {
            hung_task::check_hung_task_timed(self, what, timeout);
        }
        ok
    }

    /// The kernel this CPU belongs to.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// The kernel configuration (shorthand for `self.kernel().config()`).
    pub fn config(&self) -> &KernelConfig {
        &self.kernel.config
    }

    /// `current`.
    pub fn current(&self) -> Task {
        self.current.borrow().clone()
    }

    /// `current`'s per-task state: memalloc scopes, `journal_info`, the block layer's
    /// `bio_list` and `plug`.
    pub fn task_state(&self) -> &TaskState {
        &self.task_state
    }

    /// Switches `current` (the runtime does this when it runs a worker or an IRQ thread).
    pub fn set_current(&self, task: Task) {
        *self.current.borrow_mut() = task;
    }

    /// Switches `current` to `task` and returns the task it was, for switching back: what
    /// `current()` then `set_current()` do, without cloning the task.
    pub fn replace_current(&self, task: Task) -> Task {
        std::mem::replace(&mut *self.current.borrow_mut(), task)
    }

    /// Sets `TIF_NEED_RESCHED` (the runtime's scheduler does this when another task wants the CPU).
    pub fn set_need_resched(&self, v: bool) {
        self.need_resched.set(v);
    }

    /// `need_resched()`: `TIF_NEED_RESCHED` is set on the current task.
    pub fn need_resched(&self) -> bool {
        self.need_resched.get()
    }

    /// Records a report in the kernel's log and returns it.
    pub(crate) fn report(&self, kind: ReportKind, message: String) -> Report {
        let report = Report {
            kind,
            cpu: self.id,
            task: self.current(),
            message,
            context: self.snapshot(),
        };
        tracing::warn!(target: "biosim::report", cpu = self.id.0, "{}", report.message);
        self.kernel.reports.push(report.clone());
        report
    }
}
