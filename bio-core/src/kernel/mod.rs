//! The simulated kernel: its configuration, its CPUs and the execution context of whatever runs on
//! each of them.
//!
//! [`Kernel`] is the machine-wide state (`struct` globals of the real kernel: the config, the
//! report log, later the workqueues and the completion batcher). [`Cpu`] is "the code currently
//! running on CPU n": the explicit stand-in for `smp_processor_id()`, `current` and the per-CPU
//! `preempt_count`. Every function the kernel runs "on this CPU" takes a `&Cpu`; nothing reads an
//! OS thread id or a thread-local.

mod config;
mod irqflags;
mod lockdep;
mod preempt;
mod rcupdate;
mod report;
mod sched;

pub use config::{ConfigError, KernelConfig, PreemptModel};
pub use irqflags::IrqFlags;
pub use lockdep::{HeldLock, LockClass, WaitType};
pub use preempt::{
    ContextKind, ContextSnapshot, HARDIRQ_MASK, HARDIRQ_OFFSET, NMI_MASK, NMI_OFFSET, PREEMPT_MASK,
    PREEMPT_OFFSET, SOFTIRQ_DISABLE_OFFSET, SOFTIRQ_MASK, SOFTIRQ_OFFSET,
};
pub use report::{Report, ReportKind, ReportLog};

// TEMP-CPUID
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuId(pub u32);

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::UntrackedArc;
use std::cell::{Cell, RefCell};
use std::fmt;

/// The machine-wide state of a simulated kernel.
#[derive(Debug)]
pub struct Kernel {
    config: KernelConfig,
    nr_cpus: u32,
    reports: ReportLog,
    next_bio_id: AtomicU64,
}

impl Kernel {
    /// Boots a kernel with `nr_cpus` possible CPUs under `config`.
    ///
    /// The config is validated against the Kconfig rules first: an impossible config is an error
    /// naming the rule, never a silently wrong simulation.
    pub fn new(config: KernelConfig, nr_cpus: u32) -> Result<UntrackedArc<Self>, ConfigError> {
        config.validate()?;
        if nr_cpus == 0 {
            return Err(ConfigError::Unsupported(
                "a machine needs at least one CPU (nr_cpu_ids >= 1)",
            ));
        }
        Ok(UntrackedArc::new(Self {
            config,
            nr_cpus,
            reports: ReportLog::default(),
            next_bio_id: AtomicU64::new(1),
        }))
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

    /// Every BUG, WARN and context-check violation recorded so far.
    pub fn reports(&self) -> &ReportLog {
        &self.reports
    }

    /// Creates the execution context of code running on `cpu`, in plain task context with
    /// preemption and IRQs enabled. Returns `None` for a CPU that does not exist.
    pub fn cpu(self: &UntrackedArc<Self>, cpu: CpuId) -> Option<Cpu> {
        (cpu.0 < self.nr_cpus).then(|| Cpu::new(UntrackedArc::clone(self), cpu))
    }

    /// A fresh simulator-wide bio identity (not a kernel concept: traces and the oracle use it).
    pub(crate) fn alloc_bio_id(&self) -> u64 {
        self.next_bio_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// The task a CPU is running: `current`'s pid and comm, as a BUG report prints them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// `current->pid`.
    pub pid: u32,
    /// `current->comm`, e.g. `kworker/0:1H` or `irq/54-ufshcd`.
    pub comm: String,
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
    current: RefCell<Task>,
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
    fn new(kernel: UntrackedArc<Kernel>, id: CpuId) -> Self {
        Self {
            kernel,
            id,
            pc: Cell::new(0),
            softirq: Cell::new(0),
            hidden_preempt: Cell::new(0),
            irqs_off: Cell::new(false),
            rcu_nesting: Cell::new(0),
            rcu_sched_depth: Cell::new(0),
            held_locks: RefCell::new(Vec::new()),
            need_resched: Cell::new(false),
            nmi_saved_irqs: RefCell::new(Vec::new()),
            current: RefCell::new(Task {
                pid: 1000 + id.0,
                comm: format!("biosim/{}", id.0),
            }),
        }
    }

    /// `smp_processor_id()`.
    pub fn id(&self) -> CpuId {
        self.id
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

    /// Switches `current` (the runtime does this when it runs a worker or an IRQ thread).
    pub fn set_current(&self, task: Task) {
        *self.current.borrow_mut() = task;
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
