//! The seam: the task-completion infrastructure of block/bio.c as a loadable module.
//!
//! The series adds to block/bio.c an init part of `init_bio()` (`alloc_workqueue()`, the per-CPU
//! batches, `cpuhp_setup_state_nocalls()`), the producer `__bio_complete_in_task()` that
//! `bio_endio()` calls for a `BIO_COMPLETE_IN_TASK` bio in atomic context, the dynamic helper
//! `bio_complete_in_task()`, a work function and hotplug callbacks. A [`BioCompleteModule`] is
//! exactly that code, written in Rust against bio-core's kernel API; [`bio_complete_init`] loads one
//! into a kernel and `bio_endio()` calls whichever is loaded.
//!
//! The posted versions are instances of one configurable module ([`super::posted`], chosen by a
//! [`Variant`]'s knobs); a reviewer's patch is another module ([`Variant::module`]). Everything
//! biosim runs takes a `Variant`, so the gallery, `explore`, the proptest machines, the loom models,
//! the threaded figures and `diff` run a reviewer's module as they run v7.
//!
//! What the seam adds around a module, so that no module has to do it (biosim's bookkeeping, not
//! kernel code): the observer calls the oracle needs (a bio deferred, the work function started,
//! a queueing of the module's work, a hotplug callback and where it ran), the
//! `biosim_bio_complete_defer` trace line, and biosim's livelock detector (a work-function run
//! whose every `bi_end_io` defers its bio again; [`LIVELOCK_PASSES`]).
//!
//! # Writing a module
//!
//! A module's code reads like the C. This one is the smallest that runs: an `llist` and plain
//! work, with no hotplug callbacks at all (so it strands the bios of a CPU going offline: finding
//! 9 catches it). `bio-sim/examples/` and docs/own-patch.md have two complete ones:
//!
//! ```
//! use bio_core::block::complete_in_task::module::prelude::*;
//!
//! struct Batch { list: LlistHead, work: WorkStruct }
//! struct Llist { batches: PerCpu<Batch>, wq: Workqueue }
//!
//! impl BioCompleteOps for Llist {
//!     fn __bio_complete_in_task(&self, bio: Box<Bio>, cx: &Cpu) {
//!         let batch = this_cpu_ptr(&self.batches, cx);
//!         if llist_add(bio, &batch.list) {
//!             queue_work_on(cx.id(), &self.wq, batch.work, cx);
//!         }
//!     }
//!     fn pending(&self, cpu: CpuId) -> usize {
//!         per_cpu_ptr(&self.batches, cpu).list.len_unlocked()
//!     }
//! }
//!
//! fn bio_complete_work_fn(m: &Llist, cpu: CpuId, cx: &Cpu) {
//!     let mut list = llist_reverse_order(llist_del_all(&per_cpu_ptr(&m.batches, cpu).list));
//!     while let Some(bio) = list.pop() {
//!         bi_end_io(bio, cx);
//!     }
//! }
//!
//! struct LlistModule;
//! impl BioCompleteModule for LlistModule {
//!     fn name(&self) -> &'static str { "llist-doc" }
//!     fn summary(&self) -> &'static str { "doc example: llist, plain work, no hotplug" }
//!     fn init(&self, m: &ModuleInit<'_>) -> Result<Box<dyn BioCompleteOps>, InitError> {
//!         let wq = m.alloc_workqueue("bio_complete", WQ_MEM_RECLAIM | WQ_PERCPU, 0)?;
//!         let me = std::sync::Arc::new(std::sync::OnceLock::<std::sync::Arc<Llist>>::new());
//!         let batches = PerCpu::new(m.kernel(), |cpu| {
//!             let me = std::sync::Arc::clone(&me);
//!             Batch {
//!                 list: LlistHead::new(),
//!                 work: m.init_work(cpu, "bio_complete_work_fn", move |cx| {
//!                     bio_complete_work_fn(me.get().unwrap(), cpu, cx)
//!                 }),
//!             }
//!         });
//!         let ops = std::sync::Arc::new(Llist { batches, wq });
//!         let _ = me.set(std::sync::Arc::clone(&ops));
//!         Ok(Box::new(Shared(ops)))
//!     }
//! }
//! static LLIST: LlistModule = LlistModule;
//!
//! let k = Kernel::new(KernelConfig::default(), 2).unwrap();
//! bio_complete_init(&k, Variant::module(&LLIST), None).unwrap();
//! assert_eq!(k.bio_complete().unwrap().variant().name, "llist-doc");
//! ```

use super::{Bio, InTask, InitError, Variant};
use crate::block::bio::end_io;
use crate::kernel::{Cpu, CpuId, Kernel, ReportKind};
use crate::sync::untracked::{self, Ordering::Relaxed};
use crate::sync::UntrackedArc;
use crate::workqueue::{DelayedWork, WorkStruct, Workqueue, WqError};
use hotplug::{Callback, Errno, Invocation, RunsOn, StateId};
use std::cell::{Cell, RefCell};
use std::fmt;

/// A task-completion module: what a version of the series adds to block/bio.c.
pub trait BioCompleteModule: Send + Sync + 'static {
    /// The name `--module`, a scenario's `module` line and the gallery's column use (`v6-llist`).
    fn name(&self) -> &'static str;
    /// One line on what the module is, for `biosim variants`.
    fn summary(&self) -> &'static str;
    /// Whether the module has the dynamic helper `bio_complete_in_task()` (v5 had not). A module
    /// that says so implements [`BioCompleteOps::bio_complete_in_task`]; the tools then drive
    /// dynamic completions through it (explore, the gallery's finding 2).
    fn dynamic_helper(&self) -> bool {
        false
    }
    /// How the module schedules its worker (a `delayed_work` of N jiffies, or plain work), as
    /// reports and the loom models describe it. The default is plain work (v7).
    fn work(&self) -> super::WorkKind {
        super::WorkKind::Plain
    }
    /// `init_bio()`'s part: allocate the workqueue, set up the per-CPU data, register the hotplug
    /// states (`cpuhp_setup_state_nocalls()`), all through `m`. Returns the running module.
    fn init(&self, m: &ModuleInit<'_>) -> Result<Box<dyn BioCompleteOps>, InitError>;
}

/// A loaded module's entry points that the rest of the kernel calls.
pub trait BioCompleteOps: Send + Sync + 'static {
    /// `__bio_complete_in_task()`: put `bio` on the current CPU's batch and schedule the worker.
    /// `bio_endio()` calls it (through the seam, which accounts the deferral first).
    fn __bio_complete_in_task(&self, bio: Box<Bio>, cx: &Cpu);

    /// `bio_complete_in_task()`, the dynamic helper a `bi_end_io` calls. Defer through the global
    /// [`__bio_complete_in_task`] (as the C calls the exported symbol) so the deferral is
    /// accounted. The default is a version without the helper (v5): a WARN once, the bio back.
    fn bio_complete_in_task(&self, bio: Box<Bio>, cx: &Cpu) -> InTask {
        cx.kernel().warn_once(
            cx,
            "bio_complete_in_task:absent",
            "block/bio.c: bio_complete_in_task() does not exist in this version",
        );
        InTask::Run(bio)
    }

    /// How many bios wait on `cpu`'s batch: a read between steps for the oracle and tests.
    fn pending(&self, cpu: CpuId) -> usize;
}

/// `Box<dyn BioCompleteOps>` for a module that shares its state with its callbacks through an
/// `Arc` (the usual way: the work function and the hotplug callbacks capture a clone).
pub struct Shared<T>(pub UntrackedArc<T>);

impl<T> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Shared(..)")
    }
}

impl<T: BioCompleteOps> BioCompleteOps for Shared<T> {
    fn __bio_complete_in_task(&self, bio: Box<Bio>, cx: &Cpu) {
        self.0.__bio_complete_in_task(bio, cx);
    }
    fn bio_complete_in_task(&self, bio: Box<Bio>, cx: &Cpu) -> InTask {
        self.0.bio_complete_in_task(bio, cx)
    }
    fn pending(&self, cpu: CpuId) -> usize {
        self.0.pending(cpu)
    }
}

/// A module by reference, as a [`Variant`] carries it: compared and hashed by name.
#[derive(Clone, Copy)]
pub struct ModuleRef(pub &'static dyn BioCompleteModule);

impl fmt::Debug for ModuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ModuleRef({})", self.0.name())
    }
}

impl PartialEq for ModuleRef {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl Eq for ModuleRef {}

impl std::hash::Hash for ModuleRef {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.name().hash(state);
    }
}

/// Which hotplug callback of the module ran, by where kernel/cpu.c runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchCallback {
    /// A startup callback of an AP state, on the CPU itself (`bio_complete_batch_cpu_online()`
    /// at `CPUHP_AP_ONLINE_DYN`).
    Online,
    /// A teardown callback of an AP state, on the CPU itself
    /// (`bio_complete_batch_cpu_down_prep()`).
    DownPrep,
    /// A teardown callback of a BP state, on a control CPU after the CPU died
    /// (`bio_complete_batch_cpu_dead()` at `CPUHP_BP_PREPARE_DYN`).
    Dead,
    /// A startup callback of a BP state, on a control CPU before the CPU runs (`*_prepare`).
    Prepare,
    /// A startup callback of the STARTING section, on the CPU with IRQs off
    /// (`notify_cpu_starting()`).
    Starting,
    /// A teardown callback of the DYING section, on the CPU with IRQs off (`take_cpu_down()`
    /// under `stop_machine`).
    Dying,
}

impl BatchCallback {
    fn of(inv: &Invocation) -> Self {
        match (&inv.runs_on, inv.bringup) {
            (RunsOn::Target { irqs_off: true }, true) => Self::Starting,
            (RunsOn::Target { irqs_off: true }, false) => Self::Dying,
            (RunsOn::Target { .. }, true) => Self::Online,
            (RunsOn::Target { .. }, false) => Self::DownPrep,
            (RunsOn::Control { .. }, false) => Self::Dead,
            (RunsOn::Control { .. }, true) => Self::Prepare,
        }
    }
}

/// What the loaded module reports to an observer (the oracle, statistics). Every method has an
/// empty default. Not a kernel concept: the seam makes the calls, no module does.
pub trait BatcherObserver: Send + Sync {
    /// A bio was put on `cx`'s batch.
    fn deferred(&self, _bio: u64, _cx: &Cpu) {}
    /// The module's work function for `batch_cpu` started on `cx`.
    fn work_fn(&self, _batch_cpu: CpuId, _cx: &Cpu) {}
    /// The worker was (re)scheduled for `batch_cpu`: `queued` is whether it is pending now.
    fn scheduled(&self, _batch_cpu: CpuId, _queued: bool) {}
    /// A hotplug callback ran for `target` on `cx`.
    fn hotplug(&self, _callback: BatchCallback, _target: CpuId, _cx: &Cpu) {}
}

/// A hotplug callback of a module: `int fn(unsigned int cpu)` with the function's name, which
/// `cpuhp_enter` prints (`%ps`).
pub struct CpuhpCallback {
    name: &'static str,
    f: UntrackedArc<CpuhpFn>,
}

/// The body of a [`CpuhpCallback`].
type CpuhpFn = dyn Fn(&Cpu, CpuId) -> Result<(), Errno> + Send + Sync;

impl fmt::Debug for CpuhpCallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuhpCallback({})", self.name)
    }
}

impl CpuhpCallback {
    /// The callback `name` (the C function's name) running `f(cx, cpu)`.
    pub fn new(
        name: &'static str,
        f: impl Fn(&Cpu, CpuId) -> Result<(), Errno> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name,
            f: UntrackedArc::new(f),
        }
    }
}

/// What a module's `init` may do: the kernel calls of `init_bio()`, recorded by the seam.
pub struct ModuleInit<'a> {
    kernel: &'a UntrackedArc<Kernel>,
    boot: Cpu,
    works: RefCell<Vec<(WorkStruct, CpuId)>>,
    states: RefCell<Vec<StateId>>,
}

impl fmt::Debug for ModuleInit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModuleInit").finish_non_exhaustive()
    }
}

impl ModuleInit<'_> {
    /// The kernel being booted.
    pub fn kernel(&self) -> &UntrackedArc<Kernel> {
        self.kernel
    }

    /// The boot CPU's context, where `init_bio()` runs (for `disable_delayed_work_sync()` of the
    /// CPUs offline at init).
    pub fn boot_cpu(&self) -> &Cpu {
        &self.boot
    }

    /// `alloc_workqueue(name, flags, max_active)`.
    pub fn alloc_workqueue(
        &self,
        name: &'static str,
        flags: crate::workqueue::WqFlags,
        max_active: u32,
    ) -> Result<Workqueue, WqError> {
        self.kernel.alloc_workqueue(name, flags, max_active)
    }

    fn wrap(
        cpu: CpuId,
        name: &'static str,
        f: impl Fn(&Cpu) + Send + Sync + 'static,
    ) -> impl Fn(&Cpu, &WorkStruct) + Send + Sync + 'static {
        move |cx: &Cpu, _w: &WorkStruct| match cx.kernel().bio_complete() {
            Some(b) => b.run_work_fn(cpu, name, cx, || f(cx)),
            None => f(cx),
        }
    }

    /// `INIT_WORK(&per_cpu(batch, cpu).work, name)`: `cpu`'s work item running `f`.
    pub fn init_work(
        &self,
        cpu: CpuId,
        name: &'static str,
        f: impl Fn(&Cpu) + Send + Sync + 'static,
    ) -> WorkStruct {
        let w = self.kernel.init_work(name, Self::wrap(cpu, name, f));
        self.works.borrow_mut().push((w, cpu));
        w
    }

    /// `INIT_WORK(&per_cpu(batch, cpu).work, name)` for a work function that serves the batch of
    /// the CPU it *runs on* (`this_cpu_ptr()`), not `cpu`'s: RFC v3's `dropbehind_work_fn()`.
    /// The work is still `cpu`'s (queued there, counted as the module's), but the observer is told
    /// the running CPU's batch, so a run on another CPU after its pool was disassociated is not a
    /// per-CPU access off its CPU (it drains the CPU it runs on, under that CPU's lock).
    pub fn init_work_running_cpu(
        &self,
        cpu: CpuId,
        name: &'static str,
        f: impl Fn(&Cpu) + Send + Sync + 'static,
    ) -> WorkStruct {
        let w = self
            .kernel
            .init_work(name, move |cx: &Cpu, _w: &WorkStruct| {
                match cx.kernel().bio_complete() {
                    Some(b) => b.run_work_fn(cx.id(), name, cx, || f(cx)),
                    None => f(cx),
                }
            });
        self.works.borrow_mut().push((w, cpu));
        w
    }

    /// `INIT_DELAYED_WORK(&per_cpu(batch, cpu).work, name)`.
    pub fn init_delayed_work(
        &self,
        cpu: CpuId,
        name: &'static str,
        f: impl Fn(&Cpu) + Send + Sync + 'static,
    ) -> DelayedWork {
        let d = self
            .kernel
            .init_delayed_work(name, Self::wrap(cpu, name, f));
        self.works.borrow_mut().push((d.work, cpu));
        d
    }

    /// `cpuhp_setup_state_nocalls(state, name, startup, teardown)`: registers a state (a dynamic
    /// one for `CPUHP_AP_ONLINE_DYN`/`CPUHP_BP_PREPARE_DYN`) without calling anything now;
    /// returns the state it got.
    pub fn cpuhp_setup_state_nocalls(
        &self,
        state: StateId,
        name: &'static str,
        startup: Option<CpuhpCallback>,
        teardown: Option<CpuhpCallback>,
    ) -> Result<StateId, InitError> {
        let names = (
            startup.as_ref().map(|c| c.name),
            teardown.as_ref().map(|c| c.name),
        );
        let wrap = |c: CpuhpCallback| -> Callback<Cpu> {
            UntrackedArc::new(move |cx: &Cpu, inv: &Invocation| {
                let Some(b) = cx.kernel().bio_complete() else {
                    return Ok(());
                };
                if let Some(o) = &b.observer {
                    o.hotplug(BatchCallback::of(inv), inv.cpu, cx);
                }
                let _site = Site::enter(c.name);
                (c.f)(cx, inv.cpu)
            })
        };
        let mut hp = self.kernel.hotplug();
        let err = |error| InitError::Hotplug { state: name, error };
        let got = hp
            .cpuhp_setup_state_nocalls(state, name, startup.map(wrap), teardown.map(wrap))
            .map_err(err)?;
        hp.set_callback_fns(got, names.0, names.1).map_err(err)?;
        drop(hp);
        self.states.borrow_mut().push(got);
        Ok(got)
    }
}

/// The module loaded in a kernel: its entry points, the variant that chose it, and the seam's
/// bookkeeping.
pub struct BioCompleteBatcher {
    variant: Variant,
    ops: Box<dyn BioCompleteOps>,
    pub(super) observer: Option<UntrackedArc<dyn BatcherObserver>>,
    watchdog: Vec<Watchdog>,
    works: Vec<(WorkStruct, CpuId)>,
    states: Vec<StateId>,
}

impl fmt::Debug for BioCompleteBatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BioCompleteBatcher")
            .field("variant", &self.variant.name)
            .field("cpus", &self.watchdog.len())
            .finish()
    }
}

impl Kernel {
    /// The loaded task-completion module, once [`bio_complete_init`] ran.
    pub fn bio_complete(&self) -> Option<&UntrackedArc<BioCompleteBatcher>> {
        self.bio_complete.get()
    }
}

/// Loads the module `variant` names into `kernel` (the posted module configured by its knobs, or
/// [`Variant::module`]'s), running its init on the boot CPU, with `observer` watching it.
pub fn bio_complete_init(
    kernel: &UntrackedArc<Kernel>,
    variant: Variant,
    observer: Option<UntrackedArc<dyn BatcherObserver>>,
) -> Result<UntrackedArc<BioCompleteBatcher>, InitError> {
    if kernel.bio_complete.get().is_some() {
        return Err(InitError::AlreadyInitialised);
    }
    let m = ModuleInit {
        kernel,
        boot: kernel.cpu(CpuId(0)).expect("CPU0 exists"),
        works: RefCell::new(Vec::new()),
        states: RefCell::new(Vec::new()),
    };
    let ops = match variant.module {
        Some(module) => module.0.init(&m)?,
        None => super::posted::PostedModule(variant).init(&m)?,
    };
    let batcher = UntrackedArc::new(BioCompleteBatcher {
        variant,
        ops,
        observer,
        watchdog: kernel
            .possible_cpus()
            .map(|_| Watchdog::default())
            .collect(),
        works: m.works.into_inner(),
        states: m.states.into_inner(),
    });
    kernel
        .bio_complete
        .set(UntrackedArc::clone(&batcher))
        .map_err(|_| InitError::AlreadyInitialised)?;
    Ok(batcher)
}

impl BioCompleteBatcher {
    /// The variant that chose the module.
    pub fn variant(&self) -> &Variant {
        &self.variant
    }

    /// The hotplug states the module registered, in registration order (the posted module:
    /// `block/bio:complete:online`, `block/bio:complete:dead`).
    pub fn hotplug_states(&self) -> &[StateId] {
        &self.states
    }

    /// How many bios wait on `cpu`'s batch (between steps; see [`BioCompleteOps::pending`]).
    pub fn pending(&self, cpu: CpuId) -> usize {
        let held = self.watchdog[cpu.index()]
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len();
        self.ops.pending(cpu) + held
    }

    /// The first work item the module made for `cpu` (for tests: its pending/disable state).
    pub fn work_of(&self, cpu: CpuId) -> Option<WorkStruct> {
        self.works.iter().find(|(_, c)| *c == cpu).map(|(w, _)| *w)
    }

    /// The CPU whose batch `work` serves, if it is one of the module's work items.
    pub fn work_cpu(&self, work: WorkStruct) -> Option<CpuId> {
        self.works.iter().find(|(w, _)| *w == work).map(|(_, c)| *c)
    }

    /// Reports a queueing of the module's `work` to the observer.
    pub(crate) fn scheduled(&self, work: WorkStruct, queued: bool) {
        if let (Some(o), Some(cpu)) = (&self.observer, self.work_cpu(work)) {
            o.scheduled(cpu, queued);
        }
    }

    fn run_work_fn(&self, batch_cpu: CpuId, name: &'static str, cx: &Cpu, f: impl FnOnce()) {
        if let Some(o) = &self.observer {
            o.work_fn(batch_cpu, cx);
        }
        let watch = &self.watchdog[cx.id().index()];
        if watch.stuck.load(Relaxed) {
            // The kernel's CPU never left the loop that tripped the livelock detector.
            return;
        }
        // A run nested on this CPU (a flow that slept in the outer one) counts on its own; the
        // outer run's count is put back after it.
        let outer = watch.in_work.swap(true, Relaxed);
        let outer_count = watch.no_progress.swap(0, Relaxed);
        let _site = Site::enter(name);
        f();
        watch.no_progress.store(outer_count, Relaxed);
        watch.in_work.store(outer, Relaxed);
    }
}

/// Per-CPU state of biosim's livelock detector (not kernel state of any module).
#[derive(Debug)]
struct Watchdog {
    /// The bio whose `bi_end_io` runs in this CPU's work function now (`u64::MAX`: none).
    ending: untracked::AtomicU64,
    /// That bio was deferred again while its `bi_end_io` ran: no progress.
    redeferred: untracked::AtomicBool,
    /// A module work function runs on this CPU.
    in_work: untracked::AtomicBool,
    /// Consecutive `bi_end_io` calls of this run that deferred their bio again.
    no_progress: untracked::AtomicUsize,
    /// The detector fired: the CPU is considered stuck in the work function for good.
    stuck: untracked::AtomicBool,
    /// The bios the stuck CPU's loop still holds: they never leave it (counted as pending).
    #[allow(clippy::vec_box)] // bios travel boxed everywhere; unboxing here would copy them
    held: untracked::Mutex<Vec<Box<Bio>>>,
}

impl Default for Watchdog {
    fn default() -> Self {
        Self {
            ending: untracked::AtomicU64::new(u64::MAX),
            redeferred: untracked::AtomicBool::new(false),
            in_work: untracked::AtomicBool::new(false),
            no_progress: untracked::AtomicUsize::new(0),
            stuck: untracked::AtomicBool::new(false),
            held: untracked::Mutex::new(Vec::new()),
        }
    }
}

/// How many consecutive `bi_end_io` calls of one work-function run may complete nothing (each
/// re-deferring its bio) before biosim's livelock detector stops the run. A real burst always
/// makes progress; only an endless re-deferral gets there. Not a kernel value: the kernel has no
/// such detector (kernel/watchdog.c's soft-lockup detector measures time without scheduling, which
/// a version with the `need_resched()` yield never reaches).
pub const LIVELOCK_PASSES: usize = 1_000;

/// How biosim's livelock report begins: the words a check matches. biosim's own, not a kernel
/// splat.
pub const LIVELOCK_REPORT: &str = "biosim: livelock";

thread_local! {
    /// The module function running on this flow, for the NULL `bi_end_io` oops's `RIP:`.
    static SITE: Cell<&'static str> = const { Cell::new("bio_complete_work_fn") };
}

/// The module function a flow is in, restored when it returns.
struct Site(&'static str);

impl Site {
    fn enter(name: &'static str) -> Self {
        Site(SITE.with(|s| s.replace(name)))
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        SITE.with(|s| s.set(self.0));
    }
}

/// `__bio_complete_in_task()`, the exported symbol: `bio_endio()` calls it for a
/// `BIO_COMPLETE_IN_TASK` bio in atomic context, and a module's dynamic helper defers through it.
/// Without a loaded module the bio completes here, with a WARN once.
pub fn __bio_complete_in_task(bio: Box<Bio>, cx: &Cpu) {
    let Some(b) = cx.kernel().bio_complete() else {
        cx.kernel().warn_once(cx, "__bio_complete_in_task:uninit", "block/bio.c: BIO_COMPLETE_IN_TASK without the task-completion batcher: completing in place");
        end_io(bio, cx);
        return;
    };
    b.account_deferral(bio.id(), cx);
    b.ops.__bio_complete_in_task(bio, cx);
}

thread_local! {
    /// The bio the seam last accounted as deferred on this flow (see [`bio_complete_in_task`]).
    static ACCOUNTED: Cell<u64> = const { Cell::new(u64::MAX) };
}

impl BioCompleteBatcher {
    /// The seam's bookkeeping of one deferral: the trace line, the livelock detector, the
    /// observer.
    fn account_deferral(&self, id: u64, cx: &Cpu) {
        crate::ktrace!(cx, target: "block", "biosim_bio_complete_defer", fields(bio = id), "bio#{id} to the batch of CPU{}", cx.id().0);
        let watch = &self.watchdog[cx.id().index()];
        if watch.ending.load(Relaxed) == id {
            watch.redeferred.store(true, Relaxed);
        }
        if let Some(o) = &self.observer {
            o.deferred(id, cx);
        }
        ACCOUNTED.with(|a| a.set(id));
    }
}

/// `bio_complete_in_task()`: the loaded module's dynamic helper. Without a loaded module the bio is
/// handed back with a WARN once.
pub fn bio_complete_in_task(bio: Box<Bio>, cx: &Cpu) -> InTask {
    match cx.kernel().bio_complete() {
        Some(b) => {
            // A module that deferred without the global `__bio_complete_in_task()` (its own
            // method, say) is accounted here all the same, after the fact.
            let id = bio.id();
            ACCOUNTED.with(|a| a.set(u64::MAX));
            let r = b.ops.bio_complete_in_task(bio, cx);
            if matches!(r, InTask::Deferred) && ACCOUNTED.with(Cell::get) != id {
                b.account_deferral(id, cx);
            }
            r
        }
        None => {
            cx.kernel().warn_once(
                cx,
                "bio_complete_in_task:uninit",
                "block/bio.c: bio_complete_in_task() without the task-completion batcher",
            );
            InTask::Run(bio)
        }
    }
}

/// `bio->bi_end_io(bio)` as a module's worker and dead callback call it: unconditionally. A
/// deferred bio without `bi_end_io` is the kernel's NULL pointer dereference (finding 3),
/// reported; the bio is lost, as it would be with the oops. In a work function it also feeds
/// biosim's livelock detector.
pub fn bi_end_io(bio: Box<Bio>, cx: &Cpu) {
    if bio.bi_end_io.is_none() {
        let site = SITE.with(Cell::get);
        // The oops taints the kernel (oops_end(): add_taint(TAINT_DIE, LOCKDEP_NOW_UNRELIABLE)),
        // which turns lockdep off.
        cx.kernel().debug_locks_off();
        cx.report(
            ReportKind::Bug,
            format!(
                "BUG: kernel NULL pointer dereference, address: 0000000000000000\nRIP: {site}: bio#{} has no bi_end_io",
                bio.id()
            ),
        );
        return;
    }
    let Some(b) = cx.kernel().bio_complete() else {
        end_io(bio, cx);
        return;
    };
    let watch = &b.watchdog[cx.id().index()];
    if !watch.in_work.load(Relaxed) {
        end_io(bio, cx);
        return;
    }
    if watch.stuck.load(Relaxed) {
        // The CPU never left the loop: this bio stays with it and never completes.
        watch
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(bio);
        return;
    }
    // Progress is this bio not coming back: a bi_end_io that defers a fresh bio (a new I/O)
    // completed its own all the same.
    let id = bio.id();
    let outer = watch.ending.swap(id, Relaxed);
    watch.redeferred.store(false, Relaxed);
    end_io(bio, cx);
    let again = watch.redeferred.swap(false, Relaxed);
    watch.ending.store(outer, Relaxed);
    if !again {
        watch.no_progress.store(0, Relaxed);
        return;
    }
    if watch.no_progress.fetch_add(1, Relaxed) + 1 >= LIVELOCK_PASSES {
        watch.stuck.store(true, Relaxed);
        report_livelock(b, cx);
    }
}

/// Reports the endless re-deferral in biosim's own words: no kernel prints this.
fn report_livelock(b: &BioCompleteBatcher, cx: &Cpu) {
    let real_kernel = if b.variant.module.is_some() {
        "a real kernel would spin here until it yields, or until the soft-lockup detector fires"
    } else if b.variant.need_resched_yield {
        "a real kernel yields on need_resched() and requeues the work forever, with no splat"
    } else {
        "a real kernel, with no need_resched() yield here, would report a soft lockup"
    };
    cx.report(
        ReportKind::Bug,
        format!(
            "{LIVELOCK_REPORT}: CPU#{} {} [{}] ran {LIVELOCK_PASSES} passes and completed no bio (every bi_end_io deferred its bio again; {real_kernel})",
            cx.id().0,
            SITE.with(Cell::get),
            cx.current().comm
        ),
    );
}

/// The work functions of the kernel API a module calls, in the C spelling, with the seam's
/// accounting of the module's own work items.
pub mod kapi {
    use super::*;

    /// Tells the observer about a queueing of one of the module's work items: `queued` is
    /// whether this call queued it (plain work) or it is pending after the call (delayed work).
    fn seen(cx: &Cpu, work: WorkStruct, queued: bool) {
        if let Some(b) = cx.kernel().bio_complete() {
            b.scheduled(work, queued);
        }
    }

    /// `queue_work_on(cpu, wq, work)`: whether this call queued it.
    pub fn queue_work_on(cpu: CpuId, wq: &Workqueue, work: WorkStruct, cx: &Cpu) -> bool {
        let queued = cx.kernel().queue_work_on(Some(cpu), wq, work, cx);
        seen(cx, work, queued);
        queued
    }

    /// `queue_work(wq, work)`: on the local CPU for a per-CPU workqueue.
    pub fn queue_work(wq: &Workqueue, work: WorkStruct, cx: &Cpu) -> bool {
        let queued = cx.kernel().queue_work(wq, work, cx);
        seen(cx, work, queued);
        queued
    }

    /// `mod_delayed_work_on(cpu, wq, dwork, delay)`: whether it modified a pending work.
    pub fn mod_delayed_work_on(
        cpu: CpuId,
        wq: &Workqueue,
        dwork: DelayedWork,
        delay: u64,
        cx: &Cpu,
    ) -> bool {
        let modified = cx
            .kernel()
            .mod_delayed_work_on(Some(cpu), wq, dwork, delay, cx);
        seen(cx, dwork.work, cx.kernel().work_pending(dwork.work));
        modified
    }

    /// `enable_work(work)`: whether the disable count reached 0.
    pub fn enable_work(work: WorkStruct, cx: &Cpu) -> bool {
        cx.kernel().enable_work(work, cx)
    }

    /// `enable_delayed_work(dwork)`.
    pub fn enable_delayed_work(dwork: DelayedWork, cx: &Cpu) -> bool {
        cx.kernel().enable_delayed_work(dwork, cx)
    }

    /// `enable_and_queue_work(wq, work)`: enables, and queues (on the local CPU) if the count
    /// reached 0.
    pub fn enable_and_queue_work(wq: &Workqueue, work: WorkStruct, cx: &Cpu) -> bool {
        let enabled = cx.kernel().enable_and_queue_work(wq, work, cx);
        if enabled {
            seen(cx, work, cx.kernel().work_pending(work));
        }
        enabled
    }

    /// `disable_work_sync(work)`.
    pub fn disable_work_sync(work: WorkStruct, cx: &Cpu) -> bool {
        cx.kernel().disable_work_sync(work, cx)
    }

    /// `disable_delayed_work_sync(dwork)`.
    pub fn disable_delayed_work_sync(dwork: DelayedWork, cx: &Cpu) -> bool {
        cx.kernel().disable_delayed_work_sync(dwork, cx)
    }

    /// `need_resched()`.
    pub fn need_resched(cx: &Cpu) -> bool {
        cx.need_resched()
    }

    /// `local_irq_disable()`.
    pub fn local_irq_disable(cx: &Cpu) {
        cx.local_irq_disable();
    }

    /// `local_irq_enable()`.
    pub fn local_irq_enable(cx: &Cpu) {
        cx.local_irq_enable();
    }

    /// `cond_resched()`.
    pub fn cond_resched(cx: &Cpu) {
        cx.cond_resched();
    }

    /// `local_irq_save(flags)`.
    pub fn local_irq_save(cx: &Cpu) -> crate::kernel::IrqFlags {
        cx.local_irq_save()
    }

    /// `local_irq_restore(flags)`.
    pub fn local_irq_restore(cx: &Cpu, flags: crate::kernel::IrqFlags) {
        cx.local_irq_restore(flags);
    }

    /// `cpu_online(cpu)`.
    pub fn cpu_online(cx: &Cpu, cpu: CpuId) -> bool {
        cx.kernel().cpu_online(cpu)
    }
}

/// Everything a module needs, in one import.
pub mod prelude {
    pub use super::kapi::*;
    pub use super::{
        __bio_complete_in_task, bi_end_io, bio_complete_init, BioCompleteModule, BioCompleteOps,
        CpuhpCallback, ModuleInit, Shared,
    };
    pub use crate::block::bio::bio_in_atomic;
    pub use crate::block::complete_in_task::WorkKind;
    pub use crate::block::complete_in_task::{InTask, InitError, Variant};
    pub use crate::block::{Bio, BioFlag, BioList};
    pub use crate::kernel::llist::{
        llist_add, llist_del_all, llist_empty, llist_reverse_order, LlistHead,
    };
    pub use crate::kernel::local_lock::LocalLock;
    pub use crate::kernel::percpu::{per_cpu_ptr, this_cpu_ptr, IrqLocal, PerCpu};
    pub use crate::kernel::{Cpu, CpuId, IrqFlags, Kernel, KernelConfig};
    pub use crate::workqueue::{DelayedWork, WorkStruct, Workqueue, WQ_MEM_RECLAIM, WQ_PERCPU};
    pub use hotplug::{Errno, StateId, CPUHP_AP_ONLINE_DYN, CPUHP_BP_PREPARE_DYN};
}
