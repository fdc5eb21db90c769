//! `kernel/locking/lockdep.c`'s IRQ-usage checks over the dependency graph: `check_irq_usage()`
//! (run by `check_prev_add()` for every new dependency `prev -> next`: an IRQ-safe lock before
//! `prev` must not reach an IRQ-unsafe lock after `next`, `print_bad_irq_dependency()`), and
//! `mark_lock_irq()`'s `check_usage_forwards()` / `check_usage_backwards()` (a usage bit set
//! after the dependencies exist: `print_irq_inversion_bug()`), with the mask helpers
//! `usage_accumulate()`, `usage_match()`, `usage_skip()`, `exclusive_mask()`, `original_mask()`
//! and `find_exclusive_match()`.
//!
//! The read rules are the kernel's (v5.11's recursive-read support): the searches follow
//! strong paths only, and a node reached only through `-(*R)->` (backwards: only `-(S*)->`)
//! counts with its write usage bits alone (`LOCKF_IRQ`), so a read-held USED_IN_*_READ lock
//! against an ENABLED_*_READ one closes no inversion. `local_lock_t` classes are skipped
//! (`usage_skip()`).
//!
//! Left out of the kernel's layout, as in the other lockdep reports: the `=====` banner line,
//! `print_kernel_ident()`, blank lines, lock addresses and wait types, `, at: symbol`, the
//! stack backtrace; usage "traces" are the task, CPU and IRQ state that set the bit. In the
//! dependency listings (`print_shortest_lock_dependencies[_backwards]()`) each class header is
//! `-> (name){usage}` without its per-bit usage traces and `... key at:` line.
//!
//! ```text
//! WARNING: HARDIRQ-safe -> HARDIRQ-unsafe lock order detected
//! -----------------------------------------------------
//! biosim/0/1000 [HC0[0]:SC0[0]:HE0:SE1] is trying to acquire:
//! (&q->queue_lock){+.+.}
//! and this task is already holding:
//! (&dev->lock){-...}
//! which would create a new lock dependency:
//! (&dev->lock){-...} -> (&q->queue_lock){+.+.}
//! but this new dependency connects a HARDIRQ-irq-safe lock:
//! (&dev->lock){-...}
//! ... which became HARDIRQ-irq-safe at:
//!   biosim/0/1000 on CPU0 [HC1[1]:SC0[0]:HE0:SE1]
//! to a HARDIRQ-irq-unsafe lock:
//! (&q->queue_lock){+.+.}
//! ... which became HARDIRQ-irq-unsafe at:
//! ...
//!   biosim/1/1001 on CPU1 [HC0[0]:SC0[0]:HE1:SE1]
//! other info that might help us debug this:
//!  Possible interrupt unsafe locking scenario:
//!        CPU0                    CPU1
//!        ----                    ----
//!   lock(&q->queue_lock);
//!                                local_irq_disable();
//!                                lock(&dev->lock);
//!                                lock(&q->queue_lock);
//!   <Interrupt>
//!     lock(&dev->lock);
//!  *** DEADLOCK ***
//! 1 lock held by biosim/0/1000:
//!  #0: (&dev->lock){-...}
//! the dependencies between HARDIRQ-irq-safe lock and the holding lock:
//! -> (&dev->lock){-...}
//! the dependencies between the lock to be acquired and HARDIRQ-irq-unsafe lock:
//! -> (&q->queue_lock){+.+.}
//!  ... acquired at:
//!    biosim/0/1000 on CPU0 [HC0[0]:SC0[0]:HE0:SE1]
//! ```
//!
//! ```text
//! WARNING: possible irq lock inversion dependency detected
//! --------------------------------------------------------
//! biosim/0/1000 just changed the state of lock:
//! (lock_B){+...}
//! but this lock was taken by another, HARDIRQ-safe lock in the past:
//! (lock_A){-...}
//! and interrupts could create inverse lock ordering between them.
//! other info that might help us debug this:
//!  Possible interrupt unsafe locking scenario:
//!        CPU0                    CPU1
//!        ----                    ----
//!   lock(lock_B);
//!                                local_irq_disable();
//!                                lock(lock_A);
//!                                lock(lock_B);
//!   <Interrupt>
//!     lock(lock_A);
//!  *** DEADLOCK ***
//! no locks held by biosim/0/1000.
//! the shortest dependencies between 2nd lock and 1st lock:
//!  -> (lock_A){-...}
//!   ... acquired at:
//!    biosim/0/1000 on CPU0 [HC0[0]:SC0[0]:HE0:SE1]
//! -> (lock_B){+...}
//!  ... acquired at:
//!    biosim/0/1000 on CPU0 [HC0[0]:SC0[0]:HE1:SE1]
//! ```

use super::graph::{hlock_read, BfsDir, GraphBug, PathEntry};
use super::{
    Cpu, HeldLock, LockUsageBit, LockdepState, ReportKind, LOCK_USAGE_DIR_MASK,
    LOCK_USAGE_READ_MASK,
};

/// `LOCKF_USED_IN_IRQ_ALL`: every `LOCK_USED_IN_*` bit, write and read.
const LOCKF_USED_IN_IRQ_ALL: u8 = 0b0011_0011;
/// `LOCKF_ENABLED_IRQ_ALL`: every `LOCK_ENABLED_*` bit, write and read.
const LOCKF_ENABLED_IRQ_ALL: u8 = 0b1100_1100;
/// `LOCKF_IRQ`: the write (non-`_READ`) bits.
const LOCKF_IRQ: u8 = 0b0101_0101;
/// `LOCKF_IRQ_READ`: the `_READ` bits.
const LOCKF_IRQ_READ: u8 = 0b1010_1010;

/// `invert_dir_mask()`: USED_IN bits become ENABLED bits and the other way round.
fn invert_dir_mask(mask: u8) -> u8 {
    ((mask & LOCKF_ENABLED_IRQ_ALL) >> LOCK_USAGE_DIR_MASK)
        | ((mask & LOCKF_USED_IN_IRQ_ALL) << LOCK_USAGE_DIR_MASK)
}

/// `exclusive_mask()`: the usages that conflict with `mask`, read and write halves both (an
/// IRQ-safe read lock against an IRQ-unsafe read lock deadlocks too).
fn exclusive_mask(mask: u8) -> u8 {
    let mut excl = invert_dir_mask(mask);
    excl |= (excl & LOCKF_IRQ_READ) >> LOCK_USAGE_READ_MASK;
    excl |= (excl & LOCKF_IRQ) << LOCK_USAGE_READ_MASK;
    excl
}

/// `original_mask()`: the usages `mask` is exclusive to (the inverse of [`exclusive_mask`]).
fn original_mask(mask: u8) -> u8 {
    exclusive_mask(mask)
}

/// `usage_match()`: whether a node's usage meets `mask`; reached only through `-(*R)->` (or,
/// backwards, `-(S*)->`) only its write bits count.
fn usage_match(usage: u8, only_xr: bool, mask: u8) -> bool {
    let usage = if only_xr { usage & LOCKF_IRQ } else { usage };
    usage & mask != 0
}

/// `find_exclusive_match()`: the first bit of `mask` (in bit order) whose exclusive bit, or
/// its `_READ` half, is in `excl_mask`.
fn find_exclusive_match(mask: u8, excl_mask: u8) -> Option<(LockUsageBit, LockUsageBit)> {
    LockUsageBit::ALL
        .into_iter()
        .filter(|b| mask & b.flag() != 0)
        .find_map(|bit| {
            let excl = bit.exclusive();
            [excl, excl.read_half()]
                .into_iter()
                .find(|e| excl_mask & e.flag() != 0)
                .map(|e| (bit, e))
        })
}

/// `state_name()`: the IRQ class a report names, `HARDIRQ`, `HARDIRQ-READ`, `SOFTIRQ` or
/// `SOFTIRQ-READ`.
fn state_name(bit: LockUsageBit) -> &'static str {
    use LockUsageBit::*;
    match bit {
        UsedInHardirq | EnabledHardirq => "HARDIRQ",
        UsedInHardirqRead | EnabledHardirqRead => "HARDIRQ-READ",
        UsedInSoftirq | EnabledSoftirq => "SOFTIRQ",
        UsedInSoftirqRead | EnabledSoftirqRead => "SOFTIRQ-READ",
    }
}

impl LockdepState {
    /// The `usage_mask` of the graph's class `class`.
    fn class_usage(&self, class: usize) -> u8 {
        self.usage_mask(self.graph.name(class))
    }

    /// `__bfs()` with `usage_match()` against `mask` and `usage_skip()`.
    fn find_usage(
        &self,
        root: usize,
        root_only_xr: bool,
        dir: BfsDir,
        mask: u8,
    ) -> Option<Vec<PathEntry>> {
        self.graph.bfs(
            root,
            root_only_xr,
            dir,
            |e| self.graph.usage_skip(e.class),
            |e| usage_match(self.class_usage(e.class), e.only_xr, mask),
        )
    }
}

/// `bfs_init_rootb()`: backwards from a held lock, a read-held root counts as `-(S*)->`.
fn rootb_only_xr(h: &HeldLock) -> bool {
    hlock_read(h.read) != 0
}

/// `bfs_init_root()`: forwards from a recursive reader, only `-(E*)->` may follow.
fn root_only_xr(h: &HeldLock) -> bool {
    hlock_read(h.read) == 2
}

/// `print_irq_lock_scenario()`: the CPU0/CPU1 table, with "Chain exists of:" when the unsafe
/// lock is not taken directly under the safe one.
fn print_irq_lock_scenario(
    lines: &mut Vec<String>,
    safe: &str,
    unsafe_: &str,
    prev_class: &str,
    next_class: &str,
) {
    let middle = if prev_class == safe {
        next_class
    } else {
        prev_class
    };
    if middle != unsafe_ {
        lines.push("Chain exists of:".to_owned());
        lines.push(format!("  {safe} --> {middle} --> {unsafe_}"));
    }
    lines.extend([
        " Possible interrupt unsafe locking scenario:".to_owned(),
        "       CPU0                    CPU1".to_owned(),
        "       ----                    ----".to_owned(),
        format!("  lock({unsafe_});"),
        "                               local_irq_disable();".to_owned(),
        format!("                               lock({safe});"),
        format!("                               lock({middle});"),
        "  <Interrupt>".to_owned(),
        format!("    lock({safe});"),
        " *** DEADLOCK ***".to_owned(),
    ]);
}

impl Cpu {
    /// `check_irq_usage()` for the new dependency `prev -> next` (both classes registered):
    /// gathers the USED_IN usage of every class `prev` is reached from (`usage_accumulate()`
    /// backwards, `prev` included), looks forwards from `next` for a class with a conflicting
    /// ENABLED usage (`exclusive_mask()`), then back for the safe class that conflicts with it
    /// (`original_mask()` of its ENABLED bits) and names the pair of bits
    /// (`find_exclusive_match()`). Under `graph_lock()`; formats
    /// `print_bad_irq_dependency()`.
    pub(super) fn check_irq_usage(
        &self,
        state: &mut LockdepState,
        held: &[HeldLock],
        prev: &HeldLock,
        next: &HeldLock,
    ) -> Option<GraphBug> {
        // Twin: the IRQ-usage search never runs.
        if cfg!(feature = "bug-lockdep-no-irq-usage") {
            return None;
        }
        let p = state.graph.hlock_class(prev);
        let n = state.graph.hlock_class(next);
        let state = &*state;
        // Step 1: the IRQ usage of everything before prev.
        let mut usage_mask = 0u8;
        let _ = state.graph.bfs(
            p,
            rootb_only_xr(prev),
            BfsDir::Backwards,
            |e| state.graph.usage_skip(e.class),
            |e| {
                let usage = state.class_usage(e.class);
                usage_mask |= if e.only_xr { usage & LOCKF_IRQ } else { usage };
                false
            },
        );
        usage_mask &= LOCKF_USED_IN_IRQ_ALL;
        if usage_mask == 0 {
            return None;
        }
        // Step 2: a lock after next whose usage is exclusive to it.
        let forward_mask = exclusive_mask(usage_mask);
        let forwards = state.find_usage(n, root_only_xr(next), BfsDir::Forwards, forward_mask)?;
        let unsafe_class = forwards[0].0;
        // Step 3: the safe lock that conflicts with that one's ENABLED bits (only those: a
        // softirq-safe unsafe lock must not pull in a softirq-unsafe "safe" one).
        let backward_mask = original_mask(state.class_usage(unsafe_class) & LOCKF_ENABLED_IRQ_ALL);
        // Step 1 found a USED_IN bit step 2's match conflicts with, so this finds a class (the
        // kernel's DEBUG_LOCKS_WARN_ON(ret == BFS_RNOMATCH) cannot fire).
        let backwards =
            state.find_usage(p, rootb_only_xr(prev), BfsDir::Backwards, backward_mask)?;
        let safe_class = backwards[0].0;
        // Step 4: the pair of bits.
        let (bit1, bit2) = find_exclusive_match(
            state.class_usage(safe_class),
            state.class_usage(unsafe_class),
        )?;
        Some(
            self.print_bad_irq_dependency(
                state, held, &backwards, &forwards, prev, next, bit1, bit2,
            ),
        )
    }

    /// `print_bad_irq_dependency()`: "WARNING: HARDIRQ-safe -> HARDIRQ-unsafe lock order
    /// detected" (or SOFTIRQ, or their `-READ` forms, after the safe lock's bit). `backwards`
    /// runs from the safe class to `prev`, `forwards` from the unsafe class to `next` (target
    /// first, as `__bfs()` returns them).
    #[allow(clippy::too_many_arguments)]
    fn print_bad_irq_dependency(
        &self,
        state: &LockdepState,
        held: &[HeldLock],
        backwards: &[PathEntry],
        forwards: &[PathEntry],
        prev: &HeldLock,
        next: &HeldLock,
        bit1: LockUsageBit,
        bit2: LockUsageBit,
    ) -> GraphBug {
        let task = self.current();
        let irqclass = state_name(bit1);
        let graph = &state.graph;
        let safe = graph.name(backwards[0].0);
        let unsafe_ = graph.name(forwards[0].0);
        let mut lines = vec![
            format!("WARNING: {irqclass}-safe -> {irqclass}-unsafe lock order detected"),
            // The kernel's rule is a fixed 53 dashes, whatever the banner's length.
            "-".repeat(53),
            format!(
                "{}/{} [{}] is trying to acquire:",
                task.comm,
                task.pid,
                self.lockdep_irq_state()
            ),
            Self::print_lock_name(state, next.name),
            "and this task is already holding:".to_owned(),
            Self::print_lock_name(state, prev.name),
            "which would create a new lock dependency:".to_owned(),
            format!(
                "{} -> {}",
                Self::print_lock_name(state, prev.name),
                Self::print_lock_name(state, next.name)
            ),
            format!("but this new dependency connects a {irqclass}-irq-safe lock:"),
            Self::print_lock_name(state, safe),
            format!("... which became {irqclass}-irq-safe at:"),
            format!("  {}", state.usage_trace(safe, bit1)),
            format!("to a {irqclass}-irq-unsafe lock:"),
            Self::print_lock_name(state, unsafe_),
            format!("... which became {irqclass}-irq-unsafe at:"),
            "...".to_owned(),
            format!("  {}", state.usage_trace(unsafe_, bit2)),
            "other info that might help us debug this:".to_owned(),
        ];
        print_irq_lock_scenario(&mut lines, safe, unsafe_, prev.name, next.name);
        let mut m = lines.join("\n");
        m.push('\n');
        self.print_held_locks(state, held, &mut m);
        let current = self.lockdep_trace();
        m.push_str(&format!(
            "\nthe dependencies between {irqclass}-irq-safe lock and the holding lock:"
        ));
        Self::print_shortest_backwards(state, backwards, &mut m);
        m.push_str(&format!(
            "\nthe dependencies between the lock to be acquired and {irqclass}-irq-unsafe lock:"
        ));
        Self::print_shortest(state, forwards, &current, &mut m);
        GraphBug {
            kind: ReportKind::BadIrqDependency,
            message: m,
        }
    }

    /// `print_shortest_lock_dependencies()`: from the found class up to the root, each class
    /// and where it was acquired under the one before it (`root_trace` for the root, the
    /// acquisition being checked). Indented by the depth left, as the kernel does.
    fn print_shortest(state: &LockdepState, path: &[PathEntry], root_trace: &str, m: &mut String) {
        let depth = path.len() - 1;
        for (k, (class, trace)) in path.iter().enumerate() {
            let pad = " ".repeat(depth - k);
            m.push_str(&format!(
                "\n{pad}-> {}\n{pad} ... acquired at:\n   {}",
                Self::print_lock_name(state, state.graph.name(*class)),
                trace.as_deref().unwrap_or(root_trace)
            ));
        }
    }

    /// `print_shortest_lock_dependencies_backwards()`: the same walk over a backward path, each
    /// class after the first with the trace of the dependency into it (which the backward
    /// entry of the class before it carries).
    fn print_shortest_backwards(state: &LockdepState, path: &[PathEntry], m: &mut String) {
        let depth = path.len() - 1;
        let mut trace: Option<&str> = None;
        for (k, (class, entry_trace)) in path.iter().enumerate() {
            let pad = " ".repeat(depth - k);
            m.push_str(&format!(
                "\n{pad}-> {}",
                Self::print_lock_name(state, state.graph.name(*class))
            ));
            if let Some(t) = trace {
                m.push_str(&format!("\n{pad} ... acquired at:\n   {t}"));
            }
            trace = entry_trace.as_deref();
        }
    }

    /// `mark_lock_irq()`'s dependency half for `bit`, just set on `hlock`'s class: an ENABLED
    /// bit looks backwards for a class USED_IN the same IRQ (`check_usage_backwards()`), a
    /// USED_IN bit forwards for one ENABLED in it (`check_usage_forwards()`), write or read
    /// (`excl_bit` and its `_READ` half). Formats `print_irq_inversion_bug()`.
    pub(super) fn check_usage(
        &self,
        state: &mut LockdepState,
        hlock: &HeldLock,
        bit: LockUsageBit,
    ) -> Option<GraphBug> {
        // Twin: mark_lock_irq() checks the class alone.
        if cfg!(feature = "bug-lockdep-no-irq-usage") {
            return None;
        }
        let this = state.graph.hlock_class(hlock);
        let state = &*state;
        let excl_bit = bit.exclusive();
        let read_bit = excl_bit.read_half();
        let mask = excl_bit.flag() | read_bit.flag();
        let forwards = bit.index() & LOCK_USAGE_DIR_MASK == 0;
        let (dir, only_xr) = if forwards {
            (BfsDir::Forwards, root_only_xr(hlock))
        } else {
            (BfsDir::Backwards, rootb_only_xr(hlock))
        };
        let path = state.find_usage(this, only_xr, dir, mask)?;
        // The root is matched too (a non-recursive reader's own ENABLED_*_READ against its new
        // USED_IN_*_READ); with valid_state() gone (its twin) that repeats the class's own
        // check, which the twin removes.
        if cfg!(feature = "bug-lockdep-no-valid-state") && path.len() == 1 {
            return None;
        }
        let other = path[0].0;
        let irqclass = if state.class_usage(other) & excl_bit.flag() != 0 {
            state_name(excl_bit)
        } else {
            state_name(read_bit)
        };
        Some(self.print_irq_inversion_bug(state, &path, hlock, forwards, irqclass))
    }

    /// `print_irq_inversion_bug()`: "WARNING: possible irq lock inversion dependency detected".
    /// `path` runs from the other class to `hlock`'s (the root).
    fn print_irq_inversion_bug(
        &self,
        state: &LockdepState,
        path: &[PathEntry],
        hlock: &HeldLock,
        forwards: bool,
        irqclass: &str,
    ) -> GraphBug {
        let task = self.current();
        let graph = &state.graph;
        let root = graph.name(path[path.len() - 1].0);
        let other = graph.name(path[0].0);
        // The middle lock: the one the search reached first from the root.
        let middle = graph.name(path[path.len().saturating_sub(2)].0);
        let banner = "WARNING: possible irq lock inversion dependency detected";
        let mut lines = vec![
            banner.to_owned(),
            "-".repeat(banner.len()),
            format!("{}/{} just changed the state of lock:", task.comm, task.pid),
            Self::print_lock_name(state, hlock.name),
            if forwards {
                format!("but this lock took another, {irqclass}-unsafe lock in the past:")
            } else {
                format!("but this lock was taken by another, {irqclass}-safe lock in the past:")
            },
            Self::print_lock_name(state, other),
            "and interrupts could create inverse lock ordering between them.".to_owned(),
            "other info that might help us debug this:".to_owned(),
        ];
        if forwards {
            print_irq_lock_scenario(&mut lines, root, other, middle, other);
        } else {
            print_irq_lock_scenario(&mut lines, other, root, middle, root);
        }
        let mut m = lines.join("\n");
        m.push('\n');
        let held = self.held_locks.borrow();
        self.print_held_locks(state, &held, &mut m);
        m.push_str("\nthe shortest dependencies between 2nd lock and 1st lock:");
        Self::print_shortest(state, path, &self.lockdep_trace(), &mut m);
        GraphBug {
            kind: ReportKind::IrqLockInversion,
            message: m,
        }
    }
}
