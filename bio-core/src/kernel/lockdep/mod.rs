//! `kernel/locking/lockdep.c`: the wait-context check (`check_wait_context()`), the IRQ-usage
//! check (`mark_usage()`/`mark_lock()`/`valid_state()`/`print_usage_bug()`), the dependency
//! graph (`validate_chain()`, in `graph.rs`), the IRQ-usage checks over the graph
//! (`check_irq_usage()`, `check_usage_forwards()`/`check_usage_backwards()`, in
//! `irq_usage.rs`), trylocks (`lock_acquire(.., trylock = 1, ..)`), lockdep's
//! one-splat rule (`debug_locks_off()`, `lib/debug_locks.c`), and the lock classes it knows, with
//! the preemption side effects of taking each lock (`include/linux/spinlock.h`,
//! `include/linux/local_lock.h`, `kernel/locking/spinlock_rt.c`).
//!
//! On PREEMPT_RT `spinlock_t` and `local_lock_t` are sleeping locks (rtmutex based). Taking one
//! from a context that cannot sleep (a hard interrupt, inside a `raw_spinlock_t`) is lockdep's
//! "BUG: Invalid wait context", the bug class of finding 4.
//!
//! # IRQ usage (`CONFIG_PROVE_LOCKING`)
//!
//! Lockdep keys a lock class by the lock's name ([`HeldLock::name`]) and keeps, per class and per
//! [`Kernel`], the usage bits of `enum lock_usage_bit` that the model can reach: `LOCK_USED_IN_HARDIRQ`
//! (taken in hardirq), `LOCK_ENABLED_HARDIRQ` (taken with hardirqs on), `LOCK_USED_IN_SOFTIRQ`
//! (taken while serving a softirq) and `LOCK_ENABLED_SOFTIRQ` (taken with hardirqs and softirqs
//! on: no `local_bh_disable()`, no softirq being served). Every [`Cpu::lockdep_acquire`] (which
//! [`Cpu::lock_acquire`] runs) sets them as `mark_usage()` does; a new bit whose opposite is
//! already set (`exclusive_bit()`: IN-HARDIRQ against HARDIRQ-ON, IN-SOFTIRQ against SOFTIRQ-ON)
//! is `valid_state()`'s "WARNING: inconsistent lock state", [`ReportKind::InconsistentLockState`],
//! with `print_usage_bug()`'s lines:
//!
//! ```text
//! WARNING: inconsistent lock state
//! --------------------------------
//! inconsistent {IN-HARDIRQ-W} -> {HARDIRQ-ON-W} usage.
//! kworker/0:1/300 [HC0[0]:SC0[0]:HE1:SE1] takes:
//! (bio_complete_batch.lock){?...}
//! {IN-HARDIRQ-W} state was registered at:
//!   biosim/0/1000 on CPU0 [HC1[1]:SC0[0]:HE0:SE1]
//! other info that might help us debug this:
//!  Possible unsafe locking scenario:
//!        CPU0
//!        ----
//!   lock(bio_complete_batch.lock);
//!   <Interrupt>
//!     lock(bio_complete_batch.lock);
//!  *** DEADLOCK ***
//! no locks held by kworker/0:1/300.
//! ```
//!
//! `{?...}` is `get_usage_chars()`: per state (HARDIRQ, SOFTIRQ) a write and a read character,
//! `-` used in the IRQ with it off, `+` taken with it on, `?` both, `.` neither. Left out of the
//! kernel's layout: the banner and `print_kernel_ident()`, blank lines, the lock's address, wait
//! types and call site, the `irq event stamp` block and the stack traces (the registration
//! "trace" is the task and the context that set the bit).
//!
//! On PREEMPT_RT lockdep has no softirq context ("lockdep: Remove softirq accounting on
//! PREEMPT_RT", v5.17: `lockdep_softirq_enter()` is empty there, since RT's softirqs run
//! preemptible in a thread under a per-CPU lock): nothing is ever USED_IN_SOFTIRQ, so
//! `local_lock_irq()` (a plain `spin_lock()` on RT) in a task and the same lock in a softirq is no
//! report, and the `SC` field prints 0. In hardirq the wait-context check fires first and turns
//! lockdep off (see below).
//!
//! Read acquisitions ([`LockRead::Read`], [`LockRead::RecursiveRead`]) set the `_READ` bits and
//! print in the read column of `{....}`; as `mark_lock_irq()`, a new bit conflicts with the
//! opposite direction's write bit, and a write bit also with its read bit. A `lock_sync()` sets
//! no ENABLED bit.
//!
//! A new usage bit is also checked against the graph (`mark_lock_irq()` →
//! `check_usage_forwards()` for a USED_IN bit, `check_usage_backwards()` for an ENABLED one):
//! a class that already depends on, or is depended on by, a class with the conflicting usage is
//! [`ReportKind::IrqLockInversion`], "WARNING: possible irq lock inversion dependency
//! detected"; and every new dependency `prev -> next` runs `check_irq_usage()`: an IRQ-safe
//! class before `prev` reaching an IRQ-unsafe class after `next` is
//! [`ReportKind::BadIrqDependency`], "WARNING: HARDIRQ-safe -> HARDIRQ-unsafe lock order
//! detected" (or SOFTIRQ, or `-READ`). Both follow the graph's strong paths with the kernel's
//! read rules and skip `local_lock_t` classes (`usage_skip()`); see `irq_usage.rs`.
//!
//! # Trylocks
//!
//! [`Cpu::lock_acquire_try`] / [`Cpu::lockdep_acquire_try`] are a successful trylock's
//! annotation (`spin_trylock()`, `percpu_rwsem_acquire()`, `rwsem_acquire(.., 1, ..)`): no
//! `check_wait_context()`, no sleep check, only the ENABLED usage bits (`mark_usage()` marks
//! USED_IN for non-trylocks only) and no `validate_chain()`, so no dependency from the held
//! locks to it (a trylock never waits, so it closes no cycle). Held, it is a `prev` of later
//! acquisitions: `check_prevs_add()` adds an edge from each held trylock on top of the stack and
//! from the first full acquisition below them.
//!
//! Not modelled: `mark_held_locks()`: re-enabling IRQs or BHs while holding a lock does not set
//! ENABLED bits, only acquisitions do. An NMI marks nothing: `nmi_enter()` runs `lockdep_off()`.
//!
//! # The dependency graph
//!
//! After `mark_usage()` every acquisition runs `validate_chain()` (`graph.rs`): the chain of held
//! locks of the acquisition's IRQ context (`held_lock->irq_context`: task, hardirq or softirq)
//! plus the new lock is looked up in the `lock_chains` cache by its 64-bit key; a known chain
//! costs that lookup only. A new one runs `check_deadlock()` (the class held already:
//! [`ReportKind::RecursiveLocking`], "WARNING: possible recursive locking detected", unless a
//! recursive read nests in a read) and `check_prev_add()` for the nearest held lock of the same
//! context: `check_noncircular()` searches the graph from the new class for the held one along a
//! strong path (the `DEP_{SR,ER,SN,EN}` rules of v5.11's recursive-read support: two recursive
//! readers never deadlock, a `-(*R)->` edge cannot be followed by `-(S*)->`), reporting
//! [`ReportKind::CircularLockDependency`], "WARNING: possible circular locking dependency
//! detected", with `print_circular_bug()`'s layout:
//!
//! ```text
//! WARNING: possible circular locking dependency detected
//! ------------------------------------------------------
//! biosim/1/1001 is trying to acquire lock:
//! (lock_A){+.+.}
//! but task is already holding lock:
//! (lock_B){+.+.}
//! which lock already depends on the new lock.
//! the existing dependency chain (in reverse order) is:
//! -> #1 (lock_B){+.+.}:
//!        biosim/0/1000 on CPU0 [HC0[0]:SC0[0]:HE1:SE1]
//! -> #0 (lock_A){+.+.}:
//!        biosim/1/1001 on CPU1 [HC0[0]:SC0[0]:HE1:SE1]
//! other info that might help us debug this:
//!  Possible unsafe locking scenario:
//!        CPU0                    CPU1
//!        ----                    ----
//!   lock(lock_B);
//!                                lock(lock_A);
//!                                lock(lock_B);
//!   lock(lock_A);
//!  *** DEADLOCK ***
//! 1 lock held by biosim/1/1001:
//!  #0: (lock_B){+.+.}
//! ```
//!
//! Where the kernel prints a stack (`print_lock_trace()`) the entry names the task, CPU and IRQ
//! state of the acquisition that first recorded the edge into that class (for `#0`, the current
//! one). A longer cycle first prints "Chain exists of:" and a read or `lock_sync()` acquisition
//! prints `rlock(`/`sync(` in the scenario, as `print_circular_lock_scenario()`. Left out, as in
//! the usage report: the `=====` banner line and `print_kernel_ident()`, blank lines, lock
//! addresses, the `-{4:4}` wait-type suffix, `, at: symbol` and the stack backtrace.
//!
//! Pseudo-locks go through the same calls: `fs_reclaim` (a [`LockClass::Map`] taken for write by
//! `might_alloc()`, see `mm/gfp.rs`), SRCU (`srcu_read_lock()` a recursive read,
//! `synchronize_srcu()` a [`Cpu::lock_sync`], checked and recorded but never held),
//! `&q->q_usage_counter(io)` (a map taken for read by `blk_queue_enter()`, for write by a freeze)
//! and the sb freeze percpu rwsems `sb_writers#N` (read == 1: non-recursive, so two readers in
//! opposite orders are a cycle, as the kernel's rwsem_ABBA selftests say).
//! [`Cpu::lockdep_assert_held`] is `lockdep_assert_held()`'s `WARN_ON`.
//!
//! # One splat per boot
//!
//! Every lockdep report here (invalid wait context, inconsistent lock state, recursive locking,
//! circular dependency, bad IRQ dependency, IRQ lock inversion, bad unlock balance)
//! first calls `debug_locks_off()`: the first one clears `debug_locks` ([`Kernel::debug_locks`])
//! and prints; later ones on the same kernel are silent, and no usage bits or dependencies are
//! recorded any more, as
//! `lock_acquire()` returns early once `lockdep_enabled()` is false. `might_sleep()` is not
//! lockdep and keeps reporting.
//!
//! Buggy twins (features of bio-core, run by `.ci/run`): `bug-lockdep-no-valid-state`,
//! `bug-lockdep-every-splat`, `bug-lockdep-enabled-ignores-irqs-off`, `bug-lockdep-no-graph`
//! (`check_noncircular()` never finds a path), `bug-lockdep-read-as-write` (recursive reads
//! count as writes), `bug-fs-reclaim-ignores-noio` (`fs_reclaim` taken under `GFP_NOIO`),
//! `bug-lockdep-no-irq-usage` (`check_irq_usage()` and `check_usage_{forwards,backwards}()`
//! skipped), `bug-lockdep-trylock-as-lock` (a trylock validated as a full acquisition); the
//! unit tests each one breaks are `should_panic` under it.
//!
//! The class table and `debug_locks` are a checker's bookkeeping, not kernel state the loom
//! models explore: they use the untracked primitives, never held across a loom operation, so they
//! add no interleavings.

mod graph;
#[cfg(test)]
mod graph_tests;
mod irq_usage;
#[cfg(test)]
mod irq_usage_tests;

use super::{Cpu, Kernel, Report, ReportKind};
use crate::sync::untracked;
use std::collections::HashMap;
use std::fmt;

/// Lockdep's `enum lockdep_wait_type`, ordered from most to least restrictive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WaitType {
    /// `LD_WAIT_SPIN`: spinning locks only (`raw_spinlock_t`).
    Spin,
    /// `LD_WAIT_CONFIG`: spinning on !RT, sleeping on RT (`spinlock_t`, `local_lock_t`).
    Config,
    /// `LD_WAIT_SLEEP`: may sleep (`mutex`).
    Sleep,
}

/// A lock type, with the wait type lockdep gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockClass {
    /// `raw_spinlock_t`: always spins, disables preemption.
    RawSpinlock,
    /// `spinlock_t`: spins and disables preemption on !RT; an rtmutex on RT.
    Spinlock,
    /// `local_lock_t`: `preempt_disable()` on !RT; a per-CPU `spinlock_t` on RT.
    LocalLock,
    /// `struct mutex`: always sleeps.
    Mutex,
    /// `struct rw_semaphore`: always sleeps; taken for read or write ([`LockRead`]).
    RwSemaphore,
    /// `struct percpu_rw_semaphore` (`include/linux/percpu-rwsem.h`): sb freeze protection's
    /// `sb->s_writers.rw_sem[]`; readers never wait for each other, a writer waits for all.
    PercpuRwsem,
    /// `struct srcu_struct`'s `dep_map`: `srcu_read_lock()` is a recursive read acquisition,
    /// `synchronize_srcu()` a `lock_sync()` (`kernel/rcu/srcutree.c`). Does not sleep to take.
    Srcu,
    /// A bare `struct lockdep_map` that stands for no lock (`STATIC_LOCKDEP_MAP_INIT`):
    /// `fs_reclaim`, `q->q_usage_counter(io)`, the workqueue and work maps. Its wait type is
    /// `LD_WAIT_INV`, which `check_wait_context()` skips.
    Map,
}

/// The `read` argument of `lock_acquire()`: 0 a write (exclusive) acquisition, 1 a read, 2 a
/// recursive read (`rwlock_t` readers in IRQ context, `rcu_read_lock()`, `srcu_read_lock()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LockRead {
    /// `read == 0`.
    #[default]
    Write,
    /// `read == 1`.
    Read,
    /// `read == 2`.
    RecursiveRead,
}

impl LockClass {
    /// The lock's wait type (`lockdep_map::wait_type_inner`).
    pub fn wait_type(self) -> WaitType {
        match self {
            Self::RawSpinlock => WaitType::Spin,
            Self::Spinlock | Self::LocalLock => WaitType::Config,
            Self::Mutex | Self::RwSemaphore | Self::PercpuRwsem | Self::Srcu | Self::Map => {
                WaitType::Sleep
            }
        }
    }

    /// Whether `check_wait_context()` looks at this lock at all: a bare map is `LD_WAIT_INV`
    /// and is skipped, both as the lock taken and as a held lock capping the context.
    pub fn wait_checked(self) -> bool {
        !matches!(self, Self::Map)
    }

    /// Whether taking it disables preemption: the spinning locks (on RT only `raw_spinlock_t`).
    pub fn disables_preemption(self, config: &super::KernelConfig) -> bool {
        match self {
            Self::RawSpinlock => true,
            Self::Spinlock | Self::LocalLock => !config.preempt_rt(),
            _ => false,
        }
    }

    /// Whether taking this lock may sleep under `config` (a sleeping lock does not make the
    /// holder atomic).
    pub fn sleeps(self, config: &super::KernelConfig) -> bool {
        match self {
            // Taking an SRCU read side or a bare map never sleeps (and never disables
            // preemption either).
            Self::Srcu | Self::Map => false,
            _ => match self.wait_type() {
                WaitType::Spin => false,
                WaitType::Config => config.preempt_rt(),
                WaitType::Sleep => true,
            },
        }
    }

    /// The kernel type name.
    pub fn kernel_type(self) -> &'static str {
        match self {
            Self::RawSpinlock => "raw_spinlock_t",
            Self::Spinlock => "spinlock_t",
            Self::LocalLock => "local_lock_t",
            Self::Mutex => "struct mutex",
            Self::RwSemaphore => "struct rw_semaphore",
            Self::PercpuRwsem => "struct percpu_rw_semaphore",
            Self::Srcu => "struct srcu_struct",
            Self::Map => "struct lockdep_map",
        }
    }
}

/// The usage bits of lockdep's `enum lock_usage_bit` the model reaches: `LOCKDEP_STATE(HARDIRQ)`
/// and `LOCKDEP_STATE(SOFTIRQ)`, each with its write and `_READ` halves, in the kernel's order
/// (bit 0 `_READ`, bit 1 the direction `ENABLED`, then the state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LockUsageBit {
    /// `LOCK_USED_IN_HARDIRQ`.
    UsedInHardirq,
    /// `LOCK_USED_IN_HARDIRQ_READ`.
    UsedInHardirqRead,
    /// `LOCK_ENABLED_HARDIRQ`.
    EnabledHardirq,
    /// `LOCK_ENABLED_HARDIRQ_READ`.
    EnabledHardirqRead,
    /// `LOCK_USED_IN_SOFTIRQ`.
    UsedInSoftirq,
    /// `LOCK_USED_IN_SOFTIRQ_READ`.
    UsedInSoftirqRead,
    /// `LOCK_ENABLED_SOFTIRQ`.
    EnabledSoftirq,
    /// `LOCK_ENABLED_SOFTIRQ_READ`.
    EnabledSoftirqRead,
}

/// `LOCK_USAGE_READ_MASK`.
const LOCK_USAGE_READ_MASK: usize = 1;
/// `LOCK_USAGE_DIR_MASK`.
const LOCK_USAGE_DIR_MASK: usize = 2;

impl LockUsageBit {
    const ALL: [Self; 8] = [
        Self::UsedInHardirq,
        Self::UsedInHardirqRead,
        Self::EnabledHardirq,
        Self::EnabledHardirqRead,
        Self::UsedInSoftirq,
        Self::UsedInSoftirqRead,
        Self::EnabledSoftirq,
        Self::EnabledSoftirqRead,
    ];

    /// The bit's index into a class's `usage_traces[]` (its kernel value).
    fn index(self) -> usize {
        self as usize
    }

    /// `lock_flag(bit)`: the bit in a class's `usage_mask`.
    fn flag(self) -> u8 {
        1 << self.index()
    }

    /// Whether this is a `_READ` bit.
    fn is_read(self) -> bool {
        self.index() & LOCK_USAGE_READ_MASK != 0
    }

    /// `exclusive_bit()`: the same state, the other direction, the write half (IN against ON).
    fn exclusive(self) -> Self {
        let state = self.index() & !(LOCK_USAGE_READ_MASK | LOCK_USAGE_DIR_MASK);
        let dir = self.index() & LOCK_USAGE_DIR_MASK;
        Self::ALL[state | (dir ^ LOCK_USAGE_DIR_MASK)]
    }

    /// The `_READ` half of a write bit.
    fn read_half(self) -> Self {
        Self::ALL[self.index() | LOCK_USAGE_READ_MASK]
    }

    /// `usage_str[bit]`, as `print_usage_bug()` prints it between braces.
    fn usage_str(self) -> &'static str {
        match self {
            Self::UsedInHardirq => "IN-HARDIRQ-W",
            Self::UsedInHardirqRead => "IN-HARDIRQ-R",
            Self::EnabledHardirq => "HARDIRQ-ON-W",
            Self::EnabledHardirqRead => "HARDIRQ-ON-R",
            Self::UsedInSoftirq => "IN-SOFTIRQ-W",
            Self::UsedInSoftirqRead => "IN-SOFTIRQ-R",
            Self::EnabledSoftirq => "SOFTIRQ-ON-W",
            Self::EnabledSoftirqRead => "SOFTIRQ-ON-R",
        }
    }
}

/// What lockdep knows of one lock class (`struct lock_class`): its `usage_mask` and, per usage
/// bit, where it was first set (`usage_traces[]`, here the task and IRQ state instead of a stack).
#[derive(Debug, Default)]
struct LockClassUsage {
    usage_mask: u8,
    usage_traces: [Option<String>; 8],
}

impl LockClassUsage {
    /// `get_usage_chars()`: for HARDIRQ then SOFTIRQ, `get_usage_char()` of the write bits and
    /// of the `_READ` bits: `-` used in the IRQ, `+` taken with it on, `?` both, `.` neither.
    fn usage_chars(&self) -> String {
        let mut s = String::with_capacity(4);
        for used_in in [
            LockUsageBit::UsedInHardirq,
            LockUsageBit::UsedInHardirqRead,
            LockUsageBit::UsedInSoftirq,
            LockUsageBit::UsedInSoftirqRead,
        ] {
            let enabled = LockUsageBit::ALL[used_in.index() + LOCK_USAGE_DIR_MASK];
            let used = self.usage_mask & used_in.flag() != 0;
            let on = self.usage_mask & enabled.flag() != 0;
            s.push(match (used, on) {
                (true, true) => '?',
                (false, true) => '+',
                (true, false) => '-',
                (false, false) => '.',
            });
        }
        s
    }
}

/// Everything lockdep keeps under its `graph_lock()`: the classes' usage and the dependency
/// graph with its chain cache.
#[derive(Debug, Default)]
pub(crate) struct LockdepState {
    usage: HashMap<&'static str, LockClassUsage>,
    pub(crate) graph: graph::DepGraph,
}

impl LockdepState {
    /// A class's `get_usage_chars()`, `....` for a class never marked.
    fn usage_chars(&self, name: &str) -> String {
        self.usage
            .get(name)
            .map_or_else(|| "....".to_owned(), LockClassUsage::usage_chars)
    }

    /// A class's `usage_mask` (0 for a class never marked).
    fn usage_mask(&self, name: &str) -> u8 {
        self.usage.get(name).map_or(0, |u| u.usage_mask)
    }

    /// Where a class's usage bit was first set (`usage_traces[bit]`).
    fn usage_trace(&self, name: &str, bit: LockUsageBit) -> String {
        self.usage
            .get(name)
            .and_then(|u| u.usage_traces[bit.index()].clone())
            .unwrap_or_default()
    }
}

/// A kernel's lockdep state: `debug_locks`, the lock classes (`lock_classes[]`, found by name
/// instead of `classhash_table`'s key) and the dependency graph. Untracked by loom (see the
/// module docs).
#[derive(Debug)]
pub(crate) struct Lockdep {
    /// `debug_locks` (`lib/debug_locks.c`): 1 at boot, cleared by the first lockdep splat.
    debug_locks: untracked::AtomicBool,
    state: untracked::Mutex<LockdepState>,
}

impl Default for Lockdep {
    fn default() -> Self {
        Self {
            debug_locks: untracked::AtomicBool::new(true),
            state: untracked::Mutex::new(LockdepState::default()),
        }
    }
}

impl Lockdep {
    /// Runs `f` under `graph_lock()` on the class table and graph (a panicked holder leaves
    /// them usable). `f` must not reach a loom operation (report, tracked lock).
    pub(crate) fn with_state<R>(&self, f: impl FnOnce(&mut LockdepState) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// What `mark_lock()` found: a usage conflict on the class itself (`valid_state()`), or one
/// through its dependencies (`check_usage_forwards()`/`check_usage_backwards()`, formatted
/// under `graph_lock()`).
enum MarkBug {
    State(UsageBug),
    Inversion(graph::GraphBug),
}

/// A usage conflict `mark_lock()` found, with what `print_usage_bug()` prints of the class.
struct UsageBug {
    prev_bit: LockUsageBit,
    new_bit: LockUsageBit,
    usage_chars: String,
    registered_at: String,
    /// The held locks with their classes' usage characters (`lockdep_print_held_locks()`).
    held: Vec<(&'static str, String)>,
}

impl Kernel {
    /// `debug_locks`: whether lockdep still checks and reports (`lib/debug_locks.c`). Cleared by
    /// the first lockdep splat of this kernel (the one-splat rule).
    pub fn debug_locks(&self) -> bool {
        self.lockdep.debug_locks.load(untracked::Ordering::Acquire)
    }

    /// `debug_locks_off()`: turns lockdep off and returns whether this call did it, i.e. whether
    /// the caller may print its splat (`__debug_locks_off()` is an `xchg()`, so of two racing
    /// splats one prints).
    pub(crate) fn debug_locks_off(&self) -> bool {
        // Twin: lockdep never turns off, so every splat prints.
        if cfg!(feature = "bug-lockdep-every-splat") {
            return true;
        }
        self.lockdep
            .debug_locks
            .swap(false, untracked::Ordering::AcqRel)
    }
}

/// A lock the current context holds, returned by [`Cpu::lock_acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a held lock must be released with Cpu::lock_release"]
pub struct HeldLock {
    /// The lock type.
    pub class: LockClass,
    /// The lock's name, e.g. `bio_complete_batch.lock`.
    pub name: &'static str,
    /// How it was taken (`held_lock->read`).
    pub read: LockRead,
    disabled_preemption: bool,
    /// `held_lock->irq_context` (`task_irq_context()`): 0 task, 1 hardirq, 2 softirq. Only
    /// locks of the same context depend on each other.
    irq_context: u8,
    /// `held_lock->sync`: a `lock_sync()` acquisition, checked but never held.
    sync: bool,
    /// `held_lock->trylock`: a successful trylock ([`Cpu::lock_acquire_try`]), which added no
    /// dependency of its own but is a `prev` of the acquisitions made while it is held.
    trylock: bool,
}

impl HeldLock {
    /// `==`, with the name compared by address first: a lock's name is one `&'static str`, so
    /// the release of what was taken needs no string compare.
    fn same(&self, other: &HeldLock) -> bool {
        // Destructured, so a field added later cannot be left out of the comparison.
        let HeldLock {
            class,
            name,
            read,
            disabled_preemption,
            irq_context,
            sync,
            trylock,
        } = self;
        *class == other.class
            && *read == other.read
            && *disabled_preemption == other.disabled_preemption
            && *irq_context == other.irq_context
            && *sync == other.sync
            && *trylock == other.trylock
            && (std::ptr::eq(*name, other.name) || *name == other.name)
    }
}

impl fmt::Display for HeldLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.class.kernel_type())
    }
}

impl Cpu {
    /// The most a lock taken here may wait, lockdep's `curr_inner`: hardirq is `LD_WAIT_SPIN` on
    /// RT (only non-threaded handlers run there) and `LD_WAIT_CONFIG` on !RT (handlers that RT
    /// would thread); a held lock caps it at its own wait type.
    pub fn context_wait_type(&self) -> WaitType {
        let rt = self.config().preempt_rt();
        let mut ceiling = if self.in_nmi() {
            WaitType::Spin
        } else if self.in_hardirq() {
            if rt {
                WaitType::Spin
            } else {
                WaitType::Config
            }
        } else if self.in_serving_softirq() && !rt {
            WaitType::Config
        } else {
            WaitType::Sleep
        };
        for held in self.held_locks.borrow().iter() {
            if held.class.wait_checked() {
                ceiling = ceiling.min(held.class.wait_type());
            }
        }
        ceiling
    }

    /// Takes a lock of `class` named `name` in the current context (`lock_acquire()` plus the
    /// lock's own preemption effect).
    ///
    /// With `CONFIG_PROVE_LOCKING` a lock whose wait type exceeds what the context allows is
    /// reported as "BUG: Invalid wait context" (on !RT `LD_WAIT_CONFIG` spins, so only RT can hit
    /// it with `spinlock_t`/`local_lock_t`), and a class taken both in an IRQ and with that IRQ
    /// enabled as "WARNING: inconsistent lock state" (see the module docs); only the first
    /// lockdep splat of the kernel prints. On RT, taking a sleeping lock with IRQs disabled is
    /// the rtlock `might_sleep()` splat. Either way the lock is still taken, as the kernel would
    /// (it prints and carries on), so the caller can release it. Every report is logged; the
    /// first is returned.
    pub fn lock_acquire(&self, class: LockClass, name: &'static str) -> (HeldLock, Option<Report>) {
        self.lock_acquire_mode(class, name, LockRead::Write)
    }

    /// [`Cpu::lock_acquire`] for read (`down_read()`, `percpu_down_read()`) or recursive read
    /// (`srcu_read_lock()`), as `read` says.
    pub fn lock_acquire_mode(
        &self,
        class: LockClass,
        name: &'static str,
        read: LockRead,
    ) -> (HeldLock, Option<Report>) {
        let taken = self.lockdep_acquire_mode(class, name, read);
        self.lock_preempt_effect(class, taken)
    }

    /// The lock's own preemption effect after its lockdep half
    /// ([`LockClass::disables_preemption`]: a raw spinlock always, a spinlock or `local_lock_t`
    /// on !PREEMPT_RT), recorded on the held lock so that release undoes it.
    fn lock_preempt_effect(
        &self,
        class: LockClass,
        (mut held, report): (HeldLock, Option<Report>),
    ) -> (HeldLock, Option<Report>) {
        held.disabled_preemption = class.disables_preemption(self.config());
        if held.disabled_preemption {
            self.preempt_disable();
            if let Some(h) = self.held_locks.borrow_mut().last_mut() {
                h.disabled_preemption = true;
            }
        }
        (held, report)
    }

    /// The lockdep half of taking a lock (`lock_acquire()` on its `lockdep_map`) with no effect on
    /// preemption: what `local_lock_irqsave()` does on !RT after `local_irq_save()`, and the
    /// check every lock type runs. Reports like [`Cpu::lock_acquire`].
    pub fn lockdep_acquire(
        &self,
        class: LockClass,
        name: &'static str,
    ) -> (HeldLock, Option<Report>) {
        self.lockdep_acquire_mode(class, name, LockRead::Write)
    }

    /// A successful trylock (`spin_trylock()`, `mutex_trylock()`, `down_read_trylock()`,
    /// `percpu_rwsem_acquire()`): `lock_acquire(.., trylock = 1, read, ..)` plus the lock's own
    /// preemption effect. As `__lock_acquire()` with `trylock`: no `check_wait_context()` and no
    /// sleep check (a trylock never waits), only the ENABLED usage bits (`mark_usage()` marks
    /// no USED_IN for a trylock), and no `validate_chain()`: no dependency from the held locks
    /// to it, no recursion check. Held, it is a `prev` of every later acquisition
    /// (`check_prevs_add()` walks down through trylocks to the first full acquisition).
    pub fn lock_acquire_try(
        &self,
        class: LockClass,
        name: &'static str,
        read: LockRead,
    ) -> (HeldLock, Option<Report>) {
        let taken = self.lockdep_acquire_try(class, name, read);
        self.lock_preempt_effect(class, taken)
    }

    /// The lockdep half of a successful trylock (see [`Cpu::lock_acquire_try`]) with no effect
    /// on preemption: what `percpu_rwsem_acquire()` and `rwsem_acquire(.., 1, ..)` annotate.
    pub fn lockdep_acquire_try(
        &self,
        class: LockClass,
        name: &'static str,
        read: LockRead,
    ) -> (HeldLock, Option<Report>) {
        // Twin: the trylock flag is dropped, so it is validated as a full acquisition.
        let trylock = !cfg!(feature = "bug-lockdep-trylock-as-lock");
        self.lockdep_acquire_inner(class, name, read, false, trylock)
    }

    /// `lock_sync()` (`kernel/locking/lockdep.c`, 6.4+): what `synchronize_srcu()` tells lockdep,
    /// an acquisition checked and recorded as a dependency of every held lock, then released at
    /// once (the caller waits for the readers, it does not hold them off).
    ///
    /// As the kernel's `__lock_acquire(..., sync = 1)`: validated (dependencies from the held
    /// locks are recorded), marked without the ENABLED bits (no critical section is entered),
    /// and never pushed on the held stack.
    pub fn lock_sync(&self, class: LockClass, name: &'static str) -> Option<Report> {
        self.lockdep_acquire_inner(class, name, LockRead::Write, true, false)
            .1
    }

    /// [`Cpu::lockdep_acquire`] in a given read mode.
    pub fn lockdep_acquire_mode(
        &self,
        class: LockClass,
        name: &'static str,
        read: LockRead,
    ) -> (HeldLock, Option<Report>) {
        self.lockdep_acquire_inner(class, name, read, false, false)
    }

    /// `__lock_acquire()`: `check_wait_context()`, `mark_usage()`, `validate_chain()` (see
    /// `graph.rs`), then the push on the held stack unless this is a `lock_sync()`. A
    /// `trylock` skips the wait-context and sleep checks and `validate_chain()`.
    fn lockdep_acquire_inner(
        &self,
        class: LockClass,
        name: &'static str,
        read: LockRead,
        sync: bool,
        trylock: bool,
    ) -> (HeldLock, Option<Report>) {
        let mut report = None;
        let held = HeldLock {
            class,
            name,
            read,
            disabled_preemption: false,
            irq_context: self.lockdep_irq_context(),
            sync,
            trylock,
        };
        let rt = self.config().preempt_rt();
        // check_wait_context() exists only with CONFIG_PROVE_LOCKING, and returns at once for a
        // trylock (it does not wait); the context's wait type (a walk of the held locks) is
        // only worked out when it runs.
        let invalid_wait = || {
            let effective = match class.wait_type() {
                WaitType::Config if !rt => WaitType::Spin,
                w => w,
            };
            let ceiling = match self.context_wait_type() {
                WaitType::Config if !rt => WaitType::Spin,
                w => w,
            };
            effective > ceiling
        };
        if self.config().prove_locking && class.wait_checked() && !trylock && invalid_wait() {
            // print_lock_invalid_wait_context(): debug_locks_off_graph_unlock() first, so only
            // the first lockdep splat of the kernel prints. The lock is not marked either:
            // __lock_acquire() returns before mark_usage().
            // The rtlock might_sleep() check is skipped here as it always was, also once
            // lockdep is off (the kernel would still run it), so that a later invalid wait
            // context stays silent rather than turning into a different splat.
            if self.kernel().debug_locks_off() {
                report = Some(self.invalid_wait_context(class, name));
            }
        } else {
            // __lock_acquire(): mark_usage() after the wait-context check, and both before
            // rt_spin_lock() reaches rtlock_might_resched().
            report = self.mark_usage(&held);
            // validate_chain() after mark_usage(), with the new lock not yet on the stack.
            if report.is_none() {
                report = self.validate_chain(&held);
            }
            // A trylock never sleeps (rt_spin_trylock(), mutex_trylock() do not wait).
            if class.sleeps(self.config()) && !trylock {
                // Formatted only if a report is made.
                let site = format_args!("kernel/locking/spinlock_rt.c ({name})");
                let slept = if class.wait_type() == WaitType::Config {
                    // rt_spin_lock() → rtlock_might_resched(): __might_resched() with the RCU
                    // nesting as the expected offset, so an rtlock inside rcu_read_lock() (every
                    // RT softirq) is fine; preemption or IRQs off are not.
                    self.might_resched_rtlock(site).err()
                } else {
                    self.might_sleep_at(site).err()
                };
                report = report.or(slept);
            }
        }
        if !sync {
            self.held_locks.borrow_mut().push(held.clone());
        }
        (held, report)
    }

    /// lockdep's "BUG: Invalid wait context" splat (`print_lock_invalid_wait_context()`).
    fn invalid_wait_context(&self, class: LockClass, name: &'static str) -> Report {
        let task = self.current();
        let held: Vec<String> = self
            .held_locks
            .borrow()
            .iter()
            .map(|h| h.to_string())
            .collect();
        let message = format!(
            "BUG: Invalid wait context\n\
             {} is trying to lock:\n {name} ({}) {{{:?}}}\n\
             other info that might help us debug this:\n context-{{{:?}}}\n {} lock(s) held{}{}",
            task.comm,
            class.kernel_type(),
            class.wait_type(),
            self.context_wait_type(),
            held.len(),
            if held.is_empty() { "" } else { ": " },
            held.join(", ")
        );
        self.report(ReportKind::InvalidWaitContext, message)
    }

    /// `print_usage_bug()`'s `[HC%u[%lu]:SC%u[%lu]:HE%u:SE%u]`: `lockdep_hardirq_context()`,
    /// `hardirq_count()`, `lockdep_softirq_context()` (serving a softirq), `softirq_count()`,
    /// `lockdep_hardirqs_enabled()`, `lockdep_softirqs_enabled()` (no softirq count at all).
    fn lockdep_irq_state(&self) -> String {
        let hardirqs = self.hardirq_count() / super::HARDIRQ_OFFSET;
        format!(
            "HC{hardirqs}[{hardirqs}]:SC{}[{}]:HE{}:SE{}",
            u32::from(self.lockdep_softirq_context()),
            self.softirq_count() / super::SOFTIRQ_OFFSET,
            u32::from(!self.irqs_disabled()),
            u32::from(self.softirq_count() == 0),
        )
    }

    /// What lockdep records where the kernel saves a stack trace (`save_trace()`): the task, the
    /// CPU and the IRQ state of the acquisition.
    fn lockdep_trace(&self) -> String {
        let task = self.current();
        format!(
            "{}/{} on CPU{} [{}]",
            task.comm,
            task.pid,
            self.id().0,
            self.lockdep_irq_state()
        )
    }

    /// `lockdep_assert_held(l)` (`include/linux/lockdep.h`): `WARN_ON(debug_locks &&
    /// !lockdep_is_held(l))`, named at the caller's file and line. See
    /// [`Cpu::lockdep_assert_held_at`].
    #[track_caller]
    pub fn lockdep_assert_held(&self, name: &'static str) -> Option<Report> {
        self.lockdep_assert_held_at(name, std::panic::Location::caller())
    }

    /// `lockdep_assert_held(l)` at a kernel site (e.g. `drivers/block/loop.c:
    /// loop_inc_blocking_writes()`). The lock is found by class name among every lock the flow
    /// holds (any context, any read mode, as `lock_is_held_type(l, -1)`). A WARN
    /// (`ReportKind::Warn`), not a lockdep splat: it does not turn lockdep off, and is silent
    /// once lockdep is off or without `CONFIG_PROVE_LOCKING` (where the kernel's macro is
    /// empty). The WARN names the site (the kernel's `at file:line`, no `func+off`) and the
    /// locks held.
    pub fn lockdep_assert_held_at(
        &self,
        name: &'static str,
        site: impl fmt::Display,
    ) -> Option<Report> {
        if !self.config().prove_locking || !self.kernel().debug_locks() {
            return None;
        }
        let held: Vec<&str> = self.held_locks.borrow().iter().map(|h| h.name).collect();
        if held.contains(&name) {
            return None;
        }
        Some(self.report(
            ReportKind::Warn,
            format!(
                "WARNING: CPU: {} at {site}: lockdep_assert_held({name}): not held (held: {})",
                self.id().0,
                held.join(", ")
            ),
        ))
    }

    /// `lockdep_softirq_context()`: serving a softirq, as lockdep knows it; never on PREEMPT_RT,
    /// whose `lockdep_softirq_enter()` is empty.
    fn lockdep_softirq_context(&self) -> bool {
        self.in_serving_softirq() && !self.config().preempt_rt()
    }

    /// `task_irq_context()`: the held-lock context a new acquisition belongs to.
    fn lockdep_irq_context(&self) -> u8 {
        u8::from(self.in_hardirq()) + 2 * u8::from(self.lockdep_softirq_context())
    }

    /// Whether lockdep looks at acquisitions at all here (`lockdep_enabled()` and
    /// `CONFIG_PROVE_LOCKING`): not once a splat turned it off, not in an NMI (`lockdep_off()`).
    pub(crate) fn lockdep_checking(&self) -> bool {
        self.config().prove_locking && self.kernel().debug_locks() && !self.in_nmi()
    }

    /// `mark_usage()` for an acquisition of `hlock`: sets the usage bits the context implies
    /// (the `_READ` halves for a read), each through `mark_lock()`, and reports the first
    /// conflict as `print_usage_bug()` or `print_irq_inversion_bug()` (if `debug_locks_off()`
    /// lets it print). A trylock sets no USED_IN bit (`!hlock->trylock`), a `lock_sync()` no
    /// ENABLED bit (`hlock->sync`). Nothing with `CONFIG_PROVE_LOCKING` off, once lockdep is
    /// off, or in an NMI (`lockdep_off()`).
    fn mark_usage(&self, hlock: &HeldLock) -> Option<Report> {
        if !self.lockdep_checking() {
            return None;
        }
        let (name, read, sync) = (hlock.name, hlock.read, hlock.sync);
        let half = |bit: LockUsageBit| {
            if read == LockRead::Write {
                bit
            } else {
                bit.read_half()
            }
        };
        let mut bits = Vec::with_capacity(4);
        if self.in_hardirq() && !hlock.trylock {
            bits.push(half(LockUsageBit::UsedInHardirq));
        }
        if self.lockdep_softirq_context() && !hlock.trylock {
            bits.push(half(LockUsageBit::UsedInSoftirq));
        }
        // hlock->hardirqs_off: ENABLED_SOFTIRQ too needs hardirqs on. Twin: a task's IRQs-off
        // acquisition (the worker's local_lock_irq()) is marked as if hardirqs were on.
        let twin_irqs_on = cfg!(feature = "bug-lockdep-enabled-ignores-irqs-off") && self.in_task();
        if (!self.irqs_disabled() || twin_irqs_on) && !sync {
            bits.push(half(LockUsageBit::EnabledHardirq));
            if self.softirq_count() == 0 {
                bits.push(half(LockUsageBit::EnabledSoftirq));
            }
        }
        let bug = match self.mark_lock(hlock, &bits)? {
            MarkBug::State(bug) => bug,
            MarkBug::Inversion(bug) => {
                if !self.kernel().debug_locks_off() {
                    return None;
                }
                return Some(self.report(bug.kind, bug.message));
            }
        };
        if !self.kernel().debug_locks_off() {
            return None;
        }
        let task = self.current();
        let comm_pid = format!("{}/{}", task.comm, task.pid);
        let mut m = String::new();
        let mut line = |l: &str| {
            m.push_str(l);
            m.push('\n');
        };
        line("WARNING: inconsistent lock state");
        line("--------------------------------");
        line(&format!(
            "inconsistent {{{}}} -> {{{}}} usage.",
            bug.prev_bit.usage_str(),
            bug.new_bit.usage_str()
        ));
        line(&format!("{comm_pid} [{}] takes:", self.lockdep_irq_state()));
        line(&format!("({name}){{{}}}", bug.usage_chars));
        line(&format!(
            "{{{}}} state was registered at:",
            bug.prev_bit.usage_str()
        ));
        line(&format!("  {}", bug.registered_at));
        line("other info that might help us debug this:");
        // print_usage_bug_scenario().
        line(" Possible unsafe locking scenario:");
        line("       CPU0");
        line("       ----");
        line(&format!("  lock({name});"));
        line("  <Interrupt>");
        line(&format!("    lock({name});"));
        line(" *** DEADLOCK ***");
        // lockdep_print_held_locks(): the lock being taken is not held yet.
        if bug.held.is_empty() {
            line(&format!("no locks held by {comm_pid}."));
        } else {
            let n = bug.held.len();
            line(&format!(
                "{n} lock{} held by {comm_pid}:",
                if n == 1 { "" } else { "s" }
            ));
            for (i, (held, chars)) in bug.held.iter().enumerate() {
                line(&format!(" #{i}: ({held}){{{chars}}}"));
            }
        }
        m.pop();
        Some(self.report(ReportKind::InconsistentLockState, m))
    }

    /// `mark_lock()` of each of `bits` in turn on `hlock`'s class, under the class table's lock
    /// (the kernel's `graph_lock()`): a bit already set is skipped; a new one is set with its
    /// registration, then `mark_lock_irq()`: `valid_state()` checks its exclusive bit, then
    /// `check_usage_forwards()` (a USED_IN bit) or `check_usage_backwards()` (an ENABLED bit)
    /// the classes it depends on or that depend on it (`irq_usage.rs`). Returns the first
    /// conflict; the bits after it are not set, as `mark_usage()` stops there.
    fn mark_lock(&self, hlock: &HeldLock, bits: &[LockUsageBit]) -> Option<MarkBug> {
        if bits.is_empty() {
            return None;
        }
        self.kernel()
            .lockdep
            .with_state(|state| self.mark_lock_locked(state, hlock, bits))
    }

    /// [`Cpu::mark_lock`] under `graph_lock()`.
    fn mark_lock_locked(
        &self,
        state: &mut LockdepState,
        hlock: &HeldLock,
        bits: &[LockUsageBit],
    ) -> Option<MarkBug> {
        let name = hlock.name;
        let mut conflict = None;
        for &bit in bits {
            let class = state.usage.entry(name).or_default();
            if class.usage_mask & bit.flag() != 0 {
                continue;
            }
            class.usage_mask |= bit.flag();
            class.usage_traces[bit.index()] = Some(self.lockdep_trace());
            // mark_lock_irq(): valid_state() against the exclusive write bit, and a write bit
            // also against the exclusive read bit ("read in write conflicts").
            let excl = [bit.exclusive(), bit.exclusive().read_half()]
                .into_iter()
                .take(if bit.is_read() { 1 } else { 2 })
                .find(|e| class.usage_mask & e.flag() != 0);
            // Twin: valid_state() never finds the exclusive bit.
            if let Some(excl) = excl.filter(|_| !cfg!(feature = "bug-lockdep-no-valid-state")) {
                conflict = Some(UsageBug {
                    prev_bit: excl,
                    new_bit: bit,
                    usage_chars: class.usage_chars(),
                    registered_at: class.usage_traces[excl.index()].clone().unwrap_or_default(),
                    held: Vec::new(),
                });
                break;
            }
            // mark_lock_irq(): the dependencies must not have the conflicting usage either.
            if let Some(bug) = self.check_usage(state, hlock, bit) {
                return Some(MarkBug::Inversion(bug));
            }
        }
        let mut bug = conflict?;
        bug.held = self
            .held_locks
            .borrow()
            .iter()
            .map(|h| (h.name, state.usage_chars(h.name)))
            .collect();
        Some(MarkBug::State(bug))
    }

    /// Releases a lock taken with [`Cpu::lock_acquire`] (`lock_release()`). Releasing a lock the
    /// context does not hold is lockdep's "bad unlock balance", reported as a WARN if lockdep is
    /// still on (and then it turns lockdep off).
    pub fn lock_release(&self, held: HeldLock) {
        let pos = {
            let stack = self.held_locks.borrow();
            // Locks nest: the innermost is the one released nearly always.
            match stack.last() {
                Some(top) if top.same(&held) => Some(stack.len() - 1),
                _ => stack.iter().rposition(|h| h.same(&held)),
            }
        };
        match pos {
            Some(i) => {
                drop(self.held_locks.borrow_mut().remove(i));
                if held.disabled_preemption {
                    self.preempt_enable();
                }
            }
            // print_unlock_imbalance_bug() prints only if its debug_locks_off() turns lockdep
            // off (lock_release() does not even look once lockdep is off).
            None => {
                if self.kernel().debug_locks_off() {
                    self.warn(&format!(
                        "kernel/locking/lockdep.c: WARNING: bad unlock balance detected! {held}"
                    ));
                }
            }
        }
    }

    /// `lock_map_release()` of a bare map ([`LockClass::Map`]) taken for write in the current
    /// context, by name: what a pseudo-lock's release (`fs_reclaim_release()`) does without
    /// carrying the [`HeldLock`]. Not held is "bad unlock balance", as [`Cpu::lock_release`].
    pub fn lock_map_release(&self, name: &'static str) {
        self.lock_release(HeldLock {
            class: LockClass::Map,
            name,
            read: LockRead::Write,
            disabled_preemption: false,
            irq_context: self.lockdep_irq_context(),
            sync: false,
            trylock: false,
        });
    }

    /// The locks the current context holds, innermost last.
    pub fn held_locks(&self) -> Vec<HeldLock> {
        self.held_locks.borrow().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{CpuId, KernelConfig, PreemptModel, Task};
    use super::*;

    const LOCK: &str = "bio_complete_batch.lock";

    fn kernel(config: KernelConfig) -> crate::sync::UntrackedArc<Kernel> {
        Kernel::new(config, 2).unwrap()
    }

    /// Takes and releases `name` in `cx`'s current context; returns the report, if any.
    fn take(cx: &Cpu, name: &'static str) -> Option<Report> {
        let (held, report) = cx.lock_acquire(LockClass::Spinlock, name);
        cx.lock_release(held);
        report
    }

    fn usage_reports(k: &Kernel) -> Vec<Report> {
        k.reports().of_kind(ReportKind::InconsistentLockState)
    }

    /// The module docs' example splat, so that the docs quote exactly what the check prints.
    fn documented_splat() -> String {
        let src = include_str!("mod.rs");
        let start = src.find("//! ```text\n").unwrap() + "//! ```text\n".len();
        let end = start + src[start..].find("//! ```\n").unwrap();
        src[start..end]
            .lines()
            .map(|l| {
                l.strip_prefix("//! ")
                    .unwrap_or(l.trim_start_matches("//!"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    #[cfg_attr(
        feature = "bug-lockdep-no-valid-state",
        should_panic(expected = "must be reported")
    )]
    #[cfg_attr(
        feature = "bug-lockdep-every-splat",
        should_panic(expected = "turned lockdep off")
    )]
    fn in_hardirq_then_hardirq_on_in_task_is_an_inconsistent_lock_state() {
        let k = kernel(KernelConfig::default());
        let cx = k.cpu(CpuId(0)).unwrap();
        assert!(cx.with_hardirq(|c| take(c, LOCK)).is_none());
        cx.set_current(Task::kworker(CpuId(0)));
        let r = take(&cx, LOCK).expect("IN-HARDIRQ then HARDIRQ-ON must be reported");
        assert_eq!(r.kind, ReportKind::InconsistentLockState);
        assert_eq!(r.message, documented_splat());
        let lines: Vec<&str> = r.message.lines().collect();
        assert_eq!(lines[0], "WARNING: inconsistent lock state");
        assert_eq!(
            lines[2],
            "inconsistent {IN-HARDIRQ-W} -> {HARDIRQ-ON-W} usage."
        );
        assert_eq!(lines[3], "kworker/0:1/300 [HC0[0]:SC0[0]:HE1:SE1] takes:");
        assert_eq!(lines[4], "(bio_complete_batch.lock){?...}");
        assert_eq!(lines[5], "{IN-HARDIRQ-W} state was registered at:");
        assert!(r.message.contains(
            "  lock(bio_complete_batch.lock);\n  <Interrupt>\n    lock(bio_complete_batch.lock);\n *** DEADLOCK ***"
        ));
        assert_eq!(usage_reports(&k).len(), 1);
        assert!(!k.debug_locks(), "the splat turned lockdep off");
    }

    #[test]
    #[cfg_attr(
        feature = "bug-lockdep-no-valid-state",
        should_panic(expected = "must be reported")
    )]
    fn hardirq_on_then_in_hardirq_is_reported_the_other_way_round() {
        let k = kernel(KernelConfig::default());
        let cx = k.cpu(CpuId(1)).unwrap();
        assert!(take(&cx, "q.lock").is_none());
        let r = cx
            .with_hardirq(|c| take(c, "q.lock"))
            .expect("HARDIRQ-ON then IN-HARDIRQ must be reported");
        let lines: Vec<&str> = r.message.lines().collect();
        assert_eq!(
            lines[2],
            "inconsistent {HARDIRQ-ON-W} -> {IN-HARDIRQ-W} usage."
        );
        assert_eq!(lines[3], "biosim/1/1001 [HC1[1]:SC0[0]:HE0:SE1] takes:");
        // HARDIRQ: used in and enabled; SOFTIRQ: enabled (the task had BHs on).
        assert_eq!(lines[4], "(q.lock){?.+.}");
        assert_eq!(lines[5], "{HARDIRQ-ON-W} state was registered at:");
        assert_eq!(lines[6], "  biosim/1/1001 on CPU1 [HC0[0]:SC0[0]:HE1:SE1]");
        assert_eq!(usage_reports(&k).len(), 1);
    }

    #[test]
    #[cfg_attr(
        feature = "bug-lockdep-no-valid-state",
        should_panic(expected = "must be reported")
    )]
    #[cfg_attr(
        feature = "bug-lockdep-enabled-ignores-irqs-off",
        should_panic(expected = "IRQs off is consistent")
    )]
    fn in_hardirq_and_in_task_with_irqs_off_is_consistent() {
        // v6's local_lock_irqsave() in hardirq and local_lock_irq() in the worker, on !RT.
        let k = kernel(KernelConfig::default());
        let cx = k.cpu(CpuId(0)).unwrap();
        for _ in 0..2 {
            assert!(cx.with_hardirq(|c| take(c, LOCK)).is_none());
            let r = cx.with_irqs_disabled(|c| take(c, LOCK));
            assert!(r.is_none(), "IRQs off is consistent: {r:?}");
            cx.local_irq_disable();
            let (held, r) = cx.lockdep_acquire(LockClass::LocalLock, LOCK);
            assert!(r.is_none(), "IRQs off is consistent: {r:?}");
            cx.lock_release(held);
            cx.local_irq_enable();
        }
        assert!(k.reports().is_empty(), "{:?}", k.reports().all());
        assert!(k.debug_locks());
        // Still checking: the same class with IRQs on now is caught.
        assert!(
            take(&cx, LOCK).is_some(),
            "HARDIRQ-ON after IN-HARDIRQ must be reported"
        );
    }

    #[test]
    #[cfg_attr(
        feature = "bug-lockdep-no-valid-state",
        should_panic(expected = "must be reported")
    )]
    fn in_softirq_then_softirq_on_is_reported_and_bh_disabled_is_not() {
        let k = kernel(KernelConfig::default());
        let cx = k.cpu(CpuId(0)).unwrap();
        assert!(cx.with_softirq(|c| take(c, "s.lock")).is_none());
        // local_bh_disable(): softirqs off, so only HARDIRQ-ON is marked.
        assert!(cx.with_bh_disabled(|c| take(c, "s.lock")).is_none());
        assert!(usage_reports(&k).is_empty());
        let r = take(&cx, "s.lock").expect("IN-SOFTIRQ then SOFTIRQ-ON must be reported");
        let lines: Vec<&str> = r.message.lines().collect();
        assert_eq!(
            lines[2],
            "inconsistent {IN-SOFTIRQ-W} -> {SOFTIRQ-ON-W} usage."
        );
        // A softirq runs with hardirqs on: HARDIRQ-ON too.
        assert_eq!(lines[4], "(s.lock){+.?.}");
        assert_eq!(lines[6], "  biosim/0/1000 on CPU0 [HC0[0]:SC1[1]:HE1:SE0]");
    }

    #[test]
    #[cfg_attr(
        feature = "bug-lockdep-no-valid-state",
        should_panic(expected = "must be reported")
    )]
    fn the_held_locks_are_listed_with_their_usage() {
        let k = kernel(KernelConfig::default());
        let cx = k.cpu(CpuId(0)).unwrap();
        assert!(cx.with_hardirq(|c| take(c, "inner")).is_none());
        let (outer, r) = cx.lock_acquire(LockClass::RawSpinlock, "outer");
        assert!(r.is_none());
        let r = take(&cx, "inner").expect("IN-HARDIRQ then HARDIRQ-ON must be reported");
        cx.lock_release(outer);
        assert!(
            r.message
                .ends_with("1 lock held by biosim/0/1000:\n #0: (outer){+.+.}"),
            "{}",
            r.message
        );
    }

    #[test]
    #[cfg_attr(
        feature = "bug-lockdep-no-valid-state",
        should_panic(expected = "must be reported")
    )]
    #[cfg_attr(
        feature = "bug-lockdep-every-splat",
        should_panic(expected = "lockdep is off")
    )]
    fn only_the_first_lockdep_splat_of_a_kernel_prints() {
        let k = kernel(KernelConfig::default());
        let cx = k.cpu(CpuId(0)).unwrap();
        for name in ["a", "b"] {
            assert!(cx.with_hardirq(|c| take(c, name)).is_none());
        }
        assert!(
            take(&cx, "a").is_some(),
            "the first conflict must be reported"
        );
        assert!(!k.debug_locks(), "lockdep is off after the first splat");
        assert!(take(&cx, "b").is_none(), "lockdep is off");
        // Nor does it mark any more: "c" collects no bits while lockdep is off.
        assert!(cx.with_hardirq(|c| take(c, "c")).is_none());
        assert!(take(&cx, "c").is_none());
        // A bad unlock is a lockdep splat too, silent now.
        let (h, _) = cx.lock_acquire(LockClass::Spinlock, "d");
        cx.lock_release(h.clone());
        cx.lock_release(h);
        assert_eq!(k.reports().len(), 1, "{:#?}", k.reports().all());
        // might_sleep() is not lockdep: it still reports.
        assert!(cx.with_hardirq(|c| c.might_sleep_at("t.c:1")).is_err());
        assert_eq!(k.reports().of_kind(ReportKind::SleepInAtomic).len(), 1);
        // A new kernel starts with lockdep on.
        let k2 = kernel(KernelConfig::default());
        let cx2 = k2.cpu(CpuId(0)).unwrap();
        assert!(cx2.with_hardirq(|c| take(c, "b")).is_none());
        assert!(
            take(&cx2, "b").is_some(),
            "a new kernel's first must be reported"
        );
    }

    #[test]
    #[cfg_attr(
        feature = "bug-lockdep-every-splat",
        should_panic(expected = "is silent")
    )]
    fn an_invalid_wait_context_turns_lockdep_off_first() {
        // Finding 4 on RT: the hardirq producer's local_lock is the splat; the worker's
        // local_lock_irq() (IRQs on, RT) would be HARDIRQ-ON but lockdep is off by then.
        let k = kernel(KernelConfig::for_model(PreemptModel::Rt));
        let cx = k.cpu(CpuId(0)).unwrap();
        let r = cx.with_hardirq(|c| {
            let (held, r) = c.lockdep_acquire(LockClass::LocalLock, LOCK);
            c.lock_release(held);
            r
        });
        assert_eq!(r.unwrap().kind, ReportKind::InvalidWaitContext);
        let (held, r) = cx.lockdep_acquire(LockClass::LocalLock, LOCK);
        cx.lock_release(held);
        assert!(r.is_none());
        let r = cx.with_hardirq(|c| {
            let (held, r) = c.lockdep_acquire(LockClass::LocalLock, LOCK);
            c.lock_release(held);
            r
        });
        assert!(r.is_none(), "a second invalid wait context is silent");
        assert_eq!(k.reports().len(), 1, "{:#?}", k.reports().all());
    }

    #[test]
    fn an_nmi_marks_nothing() {
        // nmi_enter() runs lockdep_off(): the NMI's acquisition sets no IN-HARDIRQ bit.
        let k = kernel(KernelConfig::default());
        let cx = k.cpu(CpuId(0)).unwrap();
        assert!(cx.with_nmi(|c| take(c, "n.lock")).is_none());
        assert!(take(&cx, "n.lock").is_none());
        assert!(k.reports().is_empty(), "{:#?}", k.reports().all());
    }

    #[test]
    fn on_rt_a_local_lock_in_softirq_and_in_a_task_with_bhs_on_is_no_report() {
        // On RT local_lock_irq() is spin_lock() on the per-CPU spinlock_t (IRQs and BHs stay on),
        // but lockdep has no softirq context on RT: nothing is USED_IN_SOFTIRQ, nothing conflicts.
        // The same two acquisitions on !RT are the usage bug (the softirq test above).
        let k = kernel(KernelConfig::for_model(PreemptModel::Rt));
        let cx = k.cpu(CpuId(0)).unwrap();
        let r = cx.with_softirq(|c| {
            let (held, r) = c.lockdep_acquire(LockClass::LocalLock, LOCK);
            c.lock_release(held);
            r
        });
        assert!(r.is_none(), "{r:?}");
        cx.set_current(Task::kworker(CpuId(0)));
        let (held, r) = cx.lockdep_acquire(LockClass::LocalLock, LOCK);
        cx.lock_release(held);
        assert!(r.is_none(), "RT has no softirq accounting: {r:?}");
        assert!(k.reports().is_empty(), "{:#?}", k.reports().all());
        assert!(k.debug_locks(), "lockdep still on for finding 4's report");
    }

    #[test]
    fn without_prove_locking_nothing_is_reported() {
        let k = kernel(KernelConfig::without_preempt_count(PreemptModel::None));
        assert!(!k.config().prove_locking);
        let cx = k.cpu(CpuId(0)).unwrap();
        assert!(cx.with_hardirq(|c| take(c, LOCK)).is_none());
        assert!(take(&cx, LOCK).is_none());
        assert!(k.reports().is_empty());
        assert!(k.debug_locks());
    }

    #[test]
    #[cfg_attr(
        feature = "bug-lockdep-no-valid-state",
        should_panic(expected = "exactly one splat")
    )]
    #[cfg_attr(
        feature = "bug-lockdep-every-splat",
        should_panic(expected = "exactly one splat")
    )]
    fn racing_cpus_on_os_threads_print_one_splat() {
        // The threaded runtime: one OS thread per CPU, both breaking several classes at once.
        let names: [&'static str; 8] = ["l0", "l1", "l2", "l3", "l4", "l5", "l6", "l7"];
        for _ in 0..20 {
            let k = kernel(KernelConfig::default());
            let threads: Vec<_> = [0, 1]
                .into_iter()
                .map(|cpu| {
                    let k = crate::sync::UntrackedArc::clone(&k);
                    std::thread::spawn(move || {
                        let cx = k.cpu(CpuId(cpu)).unwrap();
                        for name in names {
                            if cpu == 0 {
                                let _ = cx.with_hardirq(|c| take(c, name));
                            } else {
                                let _ = take(&cx, name);
                            }
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(
                usage_reports(&k).len(),
                1,
                "exactly one splat: {:#?}",
                k.reports().all()
            );
            assert_eq!(k.reports().len(), 1);
        }
    }
}
