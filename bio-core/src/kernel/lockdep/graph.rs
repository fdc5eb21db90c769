//! `kernel/locking/lockdep.c`'s dependency graph: `validate_chain()` → `lookup_chain_cache_add()`
//! (the `lock_chains` hash), `check_deadlock()` ("possible recursive locking detected",
//! `print_deadlock_bug()`), `check_prevs_add()` → `check_prev_add()` → `check_noncircular()`
//! ("possible circular locking dependency detected", `print_circular_bug()`), with the read
//! rules of "lockdep: Support deadlock detection for recursive read locks" (v5.11): every edge
//! `prev -> next` carries the `DEP_{SR,ER,SN,EN}` bits and only a *strong* path (no
//! `-(*R)->` followed by `-(S*)->`) closes a cycle.
//!
//! Classes are keyed by name, as everywhere in this module. Each edge is kept twice, as the
//! kernel does: in `prev`'s `locks_after` with `calc_dep()` and in `next`'s `locks_before` with
//! `calc_depb()`, the backward lists serving `check_irq_usage()` (`irq_usage.rs`). A trylock
//! adds no edge for itself (`validate_chain()` skips it) but, held, is a `prev` of every later
//! acquisition down to the nearest non-trylock (`check_prevs_add()`).

use super::{Cpu, HeldLock, LockClass, LockRead, LockdepState, ReportKind};
use std::collections::{HashMap, HashSet, VecDeque};

/// `DEP_SR_BIT`: shared (read) `prev`, recursive-read `next`.
pub(super) const DEP_SR_MASK: u8 = 1 << 0;
/// `DEP_ER_BIT`: exclusive `prev`, recursive-read `next`.
pub(super) const DEP_ER_MASK: u8 = 1 << 1;
/// `DEP_SN_BIT`: shared `prev`, non-recursive `next`.
pub(super) const DEP_SN_MASK: u8 = 1 << 2;
/// `DEP_EN_BIT`: exclusive `prev`, non-recursive `next`.
pub(super) const DEP_EN_MASK: u8 = 1 << 3;

/// `held_lock->read` as the graph sees it: 0 write, 1 read, 2 recursive read.
pub(super) fn hlock_read(read: LockRead) -> u8 {
    match read {
        LockRead::Write => 0,
        LockRead::Read => 1,
        // Twin: a recursive read (srcu_read_lock()) counts as a write, so SRCU readers
        // deadlock with each other and with everything they nest with.
        LockRead::RecursiveRead if cfg!(feature = "bug-lockdep-read-as-write") => 0,
        LockRead::RecursiveRead => 2,
    }
}

/// `calc_dep()` / `__calc_dep_bit()`: shared or exclusive `prev`, recursive or not `next`.
fn calc_dep(prev: &HeldLock, next: &HeldLock) -> u8 {
    calc_dep_bit(prev, next)
}

/// `calc_depb()` / `__calc_dep_bitb()`: the backward edge's bits. The E/S position says whether
/// `next` is not a recursive reader, the N/R position whether `prev` is exclusive (`(next->read
/// != 2) + ((prev->read == 0) << 1)`), so that `__bfs_backwards()` applies the strong-path rule
/// seen from `next`. It differs from `__calc_dep_bit(next, prev)` for a plain reader (read 1).
fn calc_depb(prev: &HeldLock, next: &HeldLock) -> u8 {
    match (hlock_read(next.read) != 2, hlock_read(prev.read) == 0) {
        (false, false) => DEP_SR_MASK,
        (true, false) => DEP_ER_MASK,
        (false, true) => DEP_SN_MASK,
        (true, true) => DEP_EN_MASK,
    }
}

/// `__calc_dep_bit()`.
fn calc_dep_bit(prev: &HeldLock, next: &HeldLock) -> u8 {
    match (hlock_read(prev.read) == 0, hlock_read(next.read) != 2) {
        (false, false) => DEP_SR_MASK,
        (true, false) => DEP_ER_MASK,
        (false, true) => DEP_SN_MASK,
        (true, true) => DEP_EN_MASK,
    }
}

/// One step of a path `__bfs()` found: the class, and the trace of the `lock_list` entry it
/// was reached through, `None` for the search's root.
pub(super) type PathEntry = (usize, Option<String>);

/// `__bfs_forwards()` (over `locks_after`) or `__bfs_backwards()` (over `locks_before`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BfsDir {
    /// `locks_after`.
    Forwards,
    /// `locks_before`.
    Backwards,
}

/// One node of a `__bfs()` walk (`struct lock_list` as the queue holds it).
pub(super) struct BfsEntry {
    /// The class reached.
    pub(super) class: usize,
    /// `lock_list::only_xr`: only `-(*R)->` led here, so the next step must be `-(E*)->`.
    pub(super) only_xr: bool,
    dep: u8,
    parent: Option<usize>,
    /// The dependency list entry of the parent's class this came through.
    edge: Option<usize>,
}

/// One `struct lock_list` in a class's `locks_after`: the edge to `class`, its dependency kinds
/// and the "trace" of the acquisition that first made it (task and context, not a stack).
#[derive(Debug)]
struct LockList {
    class: usize,
    dep: u8,
    trace: String,
}

/// The dependency graph (`lock_classes[]`'s `locks_after` lists) and the chain cache
/// (`lock_chains` / `chainhash_table`).
#[derive(Debug, Default)]
pub(crate) struct DepGraph {
    ids: HashMap<&'static str, usize>,
    names: Vec<&'static str>,
    /// `lock_class::lock_type == LD_LOCK_PERCPU` (a `local_lock_t`), which `usage_skip()`
    /// leaves out of the IRQ-usage searches.
    percpu: Vec<bool>,
    locks_after: Vec<Vec<LockList>>,
    locks_before: Vec<Vec<LockList>>,
    /// `chainhash_table`: the 64-bit keys of every chain validated. Like the kernel, the key
    /// alone identifies a chain.
    lock_chains: HashSet<u64>,
    /// How many `check_noncircular()` walks ran: a cached chain costs none.
    pub(crate) bfs_walks: u64,
}

impl DepGraph {
    /// `register_lock_class()`: the class index of `name`, created on first use.
    fn class_id(&mut self, name: &'static str) -> usize {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len();
        self.names.push(name);
        self.percpu.push(false);
        self.locks_after.push(Vec::new());
        self.locks_before.push(Vec::new());
        self.ids.insert(name, id);
        id
    }

    /// [`DepGraph::class_id`] of a held lock, recording its lock type (`LD_LOCK_PERCPU` for a
    /// `local_lock_t`).
    pub(super) fn hlock_class(&mut self, h: &HeldLock) -> usize {
        let id = self.class_id(h.name);
        if h.class == LockClass::LocalLock {
            self.percpu[id] = true;
        }
        id
    }

    /// The class's name.
    pub(super) fn name(&self, class: usize) -> &'static str {
        self.names[class]
    }

    /// `usage_skip()`: a `local_lock_t` is left out of IRQ-inversion searches (on !RT it is no
    /// lock; on RT it can never sit between an IRQ-safe and an IRQ-unsafe lock).
    pub(super) fn usage_skip(&self, class: usize) -> bool {
        self.percpu[class]
    }

    /// `__bfs()`: a breadth-first search from `root` (its `only_xr` as `bfs_init_root[b]()`
    /// set it) along strong paths only (a `-(*R)->` step is never followed by `-(S*)->`),
    /// each `lock_list` entry visited once (the kernel: each class). `skip` drops a node and every path through it
    /// (`usage_skip()`); the first node `matches` accepts ends the search. Returns the path,
    /// target first and root last, each with the trace of the entry it came through.
    pub(super) fn bfs(
        &self,
        root: usize,
        root_only_xr: bool,
        dir: BfsDir,
        mut skip: impl FnMut(&BfsEntry) -> bool,
        mut matches: impl FnMut(&BfsEntry) -> bool,
    ) -> Option<Vec<PathEntry>> {
        let lists = match dir {
            BfsDir::Forwards => &self.locks_after,
            BfsDir::Backwards => &self.locks_before,
        };
        let mut entries = vec![BfsEntry {
            class: root,
            only_xr: root_only_xr,
            dep: 0,
            parent: None,
            edge: None,
        }];
        let mut accessed: HashSet<(usize, usize)> = HashSet::new();
        let mut queue = VecDeque::from([0usize]);
        while let Some(i) = queue.pop_front() {
            if let (Some(p), Some(e)) = (entries[i].parent, entries[i].edge) {
                // Step 1: each lock_list entry is visited once. The kernel marks the class
                // instead (lock_accessed() on class->dep_gen_id, the root included), so it can
                // miss a class first reached weakly; docs/detectors/lockdep.md says so.
                if !accessed.insert((entries[p].class, e)) {
                    continue;
                }
                // Step 2: -(*R)-> -(S*)-> is not a strong dependency.
                let mut dep = entries[i].dep;
                if entries[p].only_xr {
                    dep &= !(DEP_SR_MASK | DEP_SN_MASK);
                }
                if dep == 0 {
                    continue;
                }
                // Only -(*R)-> left: the next step must start exclusive.
                entries[i].only_xr = dep & (DEP_SN_MASK | DEP_EN_MASK) == 0;
            }
            // Step 3: skip, then match.
            if skip(&entries[i]) {
                continue;
            }
            if matches(&entries[i]) {
                let mut path = Vec::new();
                let mut at = Some(i);
                while let Some(j) = at {
                    let trace = entries[j]
                        .parent
                        .zip(entries[j].edge)
                        .map(|(p, e)| lists[entries[p].class][e].trace.clone());
                    path.push((entries[j].class, trace));
                    at = entries[j].parent;
                }
                return Some(path);
            }
            // Step 4: expand along the class's dependencies in this direction.
            let class = entries[i].class;
            for (e, l) in lists[class].iter().enumerate() {
                if accessed.contains(&(class, e)) {
                    continue;
                }
                entries.push(BfsEntry {
                    class: l.class,
                    only_xr: false,
                    dep: l.dep,
                    parent: Some(i),
                    edge: Some(e),
                });
                queue.push_back(entries.len() - 1);
            }
        }
        None
    }

    /// Whether the graph has the edge `prev -> next`, and with which `DEP_*` bits.
    #[cfg(test)]
    pub(crate) fn dependency(&self, prev: &str, next: &str) -> Option<u8> {
        let (p, n) = (*self.ids.get(prev)?, *self.ids.get(next)?);
        self.locks_after[p]
            .iter()
            .find(|e| e.class == n)
            .map(|e| e.dep)
    }

    /// `nr_lock_chains`.
    #[cfg(test)]
    pub(crate) fn nr_lock_chains(&self) -> usize {
        self.lock_chains.len()
    }

    /// `check_noncircular(next, prev)`: a breadth-first search from `next`'s class over
    /// `locks_after` for `prev`'s class along a strong path (`__bfs()` with `only_xr`), matched
    /// by `hlock_conflict()`. Returns the path found, target first, with no trace for the root
    /// (the acquisition being made).
    fn check_noncircular(
        &mut self,
        next: (usize, u8),
        prev: (usize, u8),
    ) -> Option<Vec<PathEntry>> {
        // Twin: the graph is recorded but never searched.
        if cfg!(feature = "bug-lockdep-no-graph") {
            return None;
        }
        self.bfs_walks += 1;
        // bfs_init_root(): a recursive-read `next` may only continue with -(E*)->.
        // hlock_conflict(): prev's class, and either prev is a write or the path into it does
        // not end -(*R)-> (else the closing prev -> next, which starts shared, would make it
        // weak).
        self.bfs(
            next.0,
            next.1 == 2,
            BfsDir::Forwards,
            |_| false,
            |e| e.class == prev.0 && (prev.1 == 0 || !e.only_xr),
        )
    }
}

/// `INITIAL_CHAIN_KEY`.
const INITIAL_CHAIN_KEY: u64 = u64::MAX;

/// `iterate_chain_key()`: folds one `hlock_id()` into a chain key (a 64-bit mix, deterministic).
fn iterate_chain_key(key: u64, id: u64) -> u64 {
    let k = (key ^ id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    k ^ (k >> 29)
}

/// What `validate_chain()` found, formatted under `graph_lock()`.
pub(super) struct GraphBug {
    pub(super) kind: ReportKind,
    pub(super) message: String,
}

impl Cpu {
    /// `validate_chain()` for `next`, about to be pushed on the held stack: if the chain of held
    /// locks of `next`'s IRQ context plus `next` is new (`lookup_chain_cache_add()`), runs
    /// `check_deadlock()` and, unless `next` heads its context's chain, `check_prevs_add()`.
    /// Reports as the kernel prints (see [`Cpu::print_circular_bug`]); only the first lockdep
    /// splat of the kernel prints.
    pub(super) fn validate_chain(&self, next: &HeldLock) -> Option<super::Report> {
        // A trylock keeps the held stack but adds no dependency (it can be taken in any
        // order): validate_chain() runs for `!hlock->trylock` only.
        if !self.lockdep_checking() || next.trylock {
            return None;
        }
        let bug = {
            let held = self.held_locks.borrow();
            self.kernel()
                .lockdep
                .with_state(|state| self.validate_chain_locked(state, &held, next))?
        };
        if !self.kernel().debug_locks_off() {
            return None;
        }
        Some(self.report(bug.kind, bug.message))
    }

    fn validate_chain_locked(
        &self,
        state: &mut LockdepState,
        held: &[HeldLock],
        next: &HeldLock,
    ) -> Option<GraphBug> {
        // The chain is the held locks of next's IRQ context on top of the stack (the key is
        // reset when the context changes), then next.
        let start = held
            .iter()
            .rposition(|h| h.irq_context != next.irq_context)
            .map_or(0, |i| i + 1);
        let chain = &held[start..];
        let graph = &mut state.graph;
        let mut key = INITIAL_CHAIN_KEY ^ u64::from(next.irq_context);
        for h in chain.iter().chain(std::iter::once(next)) {
            // hlock_id(): the class and the read mode.
            let id = graph.hlock_class(h) as u64 | (u64::from(hlock_read(h.read)) << 48);
            key = iterate_chain_key(key, id);
        }
        if !graph.lock_chains.insert(key) {
            return None;
        }
        // check_deadlock(): the same class held already, unless both are reads and next a
        // recursive one (read_lock() inside read_lock(), srcu_read_lock() nesting).
        for prev in held {
            if prev.name != next.name {
                continue;
            }
            if hlock_read(next.read) == 2 && hlock_read(prev.read) != 0 {
                continue;
            }
            return Some(self.print_deadlock_bug(state, held, prev, next));
        }
        // check_prevs_add(): every held lock of the same context from the top down to, and
        // including, the first one that is not a trylock (those added their own edges to the
        // ones below already).
        for prev in chain.iter().rev() {
            if let Some(bug) = self.check_prev_add(state, held, prev, next) {
                return Some(bug);
            }
            if !prev.trylock {
                break;
            }
        }
        None
    }

    /// `check_prev_add()`: proves `prev -> next` closes no cycle, then adds it (or widens the
    /// existing edge's `dep`).
    fn check_prev_add(
        &self,
        state: &mut LockdepState,
        held: &[HeldLock],
        prev: &HeldLock,
        next: &HeldLock,
    ) -> Option<GraphBug> {
        let graph = &mut state.graph;
        let p = graph.hlock_class(prev);
        let n = graph.hlock_class(next);
        if let Some(path) =
            graph.check_noncircular((n, hlock_read(next.read)), (p, hlock_read(prev.read)))
        {
            if path.len() == 1 {
                return Some(self.print_deadlock_bug(state, held, prev, next));
            }
            return Some(self.print_circular_bug(state, held, &path, prev, next));
        }
        if let Some(bug) = self.check_irq_usage(state, held, prev, next) {
            return Some(bug);
        }
        let graph = &mut state.graph;
        let (dep, depb) = (calc_dep(prev, next), calc_depb(prev, next));
        if let Some(e) = graph.locks_after[p].iter_mut().find(|e| e.class == n) {
            e.dep |= dep;
            // The reverse entry in next's locks_before exists with it, always.
            if let Some(b) = graph.locks_before[n].iter_mut().find(|e| e.class == p) {
                b.dep |= depb;
            }
            return None;
        }
        let trace = self.lockdep_trace();
        graph.locks_after[p].push(LockList {
            class: n,
            dep,
            trace: trace.clone(),
        });
        graph.locks_before[n].push(LockList {
            class: p,
            dep: depb,
            trace,
        });
        None
    }

    /// `print_lock()` / `print_lock_name()`: `(name){usage}` (no address, wait types, call site).
    pub(super) fn print_lock_name(state: &LockdepState, name: &str) -> String {
        format!("({name}){{{}}}", state.usage_chars(name))
    }

    /// `lockdep_print_held_locks()`.
    pub(super) fn print_held_locks(&self, state: &LockdepState, held: &[HeldLock], m: &mut String) {
        let task = self.current();
        if held.is_empty() {
            m.push_str(&format!("no locks held by {}/{}.", task.comm, task.pid));
            return;
        }
        let n = held.len();
        m.push_str(&format!(
            "{n} lock{} held by {}/{}:",
            if n == 1 { "" } else { "s" },
            task.comm,
            task.pid
        ));
        for (i, h) in held.iter().enumerate() {
            m.push_str(&format!(
                "\n #{i}: {}",
                Self::print_lock_name(state, h.name)
            ));
        }
    }

    /// `print_deadlock_bug()`: "WARNING: possible recursive locking detected" with
    /// `print_deadlock_scenario()`.
    fn print_deadlock_bug(
        &self,
        state: &LockdepState,
        held: &[HeldLock],
        prev: &HeldLock,
        next: &HeldLock,
    ) -> GraphBug {
        let task = self.current();
        let banner = "WARNING: possible recursive locking detected";
        let mut m = String::new();
        for l in [
            banner.to_owned(),
            "-".repeat(banner.len()),
            format!("{}/{} is trying to acquire lock:", task.comm, task.pid),
            Self::print_lock_name(state, next.name),
            "but task is already holding lock:".to_owned(),
            Self::print_lock_name(state, prev.name),
            "other info that might help us debug this:".to_owned(),
            " Possible unsafe locking scenario:".to_owned(),
            "       CPU0".to_owned(),
            "       ----".to_owned(),
            format!("  lock({});", prev.name),
            format!("  lock({});", next.name),
            " *** DEADLOCK ***".to_owned(),
            " May be due to missing lock nesting notation".to_owned(),
        ] {
            m.push_str(&l);
            m.push('\n');
        }
        self.print_held_locks(state, held, &mut m);
        GraphBug {
            kind: ReportKind::RecursiveLocking,
            message: m,
        }
    }

    /// `print_circular_bug()`: the header (`print_circular_bug_header()`), the dependency chain
    /// from `prev` back to `next` (`print_circular_bug_entry()`, each with the context that
    /// made the edge into it, and `next` with the current one), `print_circular_lock_scenario()`
    /// and the held locks. `path` is target (prev's class) first, the root (next) last.
    fn print_circular_bug(
        &self,
        state: &LockdepState,
        held: &[HeldLock],
        path: &[PathEntry],
        prev: &HeldLock,
        next: &HeldLock,
    ) -> GraphBug {
        let task = self.current();
        let graph = &state.graph;
        let banner = "WARNING: possible circular locking dependency detected";
        let mut lines = vec![
            banner.to_owned(),
            "-".repeat(banner.len()),
            format!("{}/{} is trying to acquire lock:", task.comm, task.pid),
            Self::print_lock_name(state, next.name),
            "but task is already holding lock:".to_owned(),
            Self::print_lock_name(state, prev.name),
            "which lock already depends on the new lock.".to_owned(),
            "the existing dependency chain (in reverse order) is:".to_owned(),
        ];
        let depth = path.len() - 1;
        let current_trace = self.lockdep_trace();
        for (k, (class, trace)) in path.iter().enumerate() {
            let name = graph.names[*class];
            lines.push(format!(
                "-> #{} {}:",
                depth - k,
                Self::print_lock_name(state, name)
            ));
            let trace = trace.as_deref().unwrap_or(current_trace.as_str());
            lines.push(format!("       {trace}"));
        }
        lines.push("other info that might help us debug this:".to_owned());
        // print_circular_lock_scenario(): `parent` is the class the search reached prev from.
        let parent = graph.names[path[1].0];
        if parent != next.name {
            lines.push("Chain exists of:".to_owned());
            lines.push(format!("  {} --> {parent} --> {}", next.name, prev.name));
        }
        let tgt = if hlock_read(prev.read) != 0 {
            "rlock"
        } else {
            "lock"
        };
        let src = if hlock_read(next.read) != 0 {
            "rlock"
        } else if next.sync {
            "sync"
        } else {
            "lock"
        };
        lines.extend([
            " Possible unsafe locking scenario:".to_owned(),
            "       CPU0                    CPU1".to_owned(),
            "       ----                    ----".to_owned(),
            format!("  {tgt}({});", prev.name),
            format!("                               lock({parent});"),
            format!("                               lock({});", prev.name),
            format!("  {src}({});", next.name),
            " *** DEADLOCK ***".to_owned(),
        ]);
        let mut m = lines.join("\n");
        m.push('\n');
        self.print_held_locks(state, held, &mut m);
        GraphBug {
            kind: ReportKind::CircularLockDependency,
            message: m,
        }
    }
}
