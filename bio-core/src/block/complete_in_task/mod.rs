//! Task-context bio completion: the infrastructure of "block: add task-context bio completion
//! infrastructure" (block/bio.c, include/linux/bio.h), in every posted version.
//!
//! - `BIO_COMPLETE_IN_TASK` in [`bio_endio`](crate::block::bio_endio): after the chain walk, a
//!   flagged bio whose completion runs where [`bio_in_atomic`] is true is handed to
//!   [`__bio_complete_in_task`] instead of calling `bi_end_io` there.
//! - [`bio_complete_in_task`]: the dynamic form a `bi_end_io` calls itself.
//! - The per-CPU `bio_complete_batch` ([`batch`]), drained by `bio_complete_work_fn` on the
//!   `bio_complete` workqueue (`WQ_MEM_RECLAIM | WQ_PERCPU`).
//! - The init protocol and the three hotplug callbacks ([`cpuhp`]): online/down_prep at
//!   `CPUHP_AP_ONLINE_DYN`, dead at `CPUHP_BP_PREPARE_DYN`, registered with
//!   `cpuhp_setup_state_nocalls()`.
//!
//! Which version runs is a [`Variant`]: a preset of knobs (`v5`, `v6`, `v6-review`, `v7`). The code
//! exists once; the knobs select the posted behaviour at the few places the versions differ.

mod batch;
mod cpuhp;
mod variant;

pub use variant::{Knob, KnobValues, ListKind, Variant, WorkKind};

use self::batch::{BatchWork, BioCompleteBatch};
use super::bio::{bio_in_atomic, end_io};
use super::{Bio, BioEndIo, BioFlag};
use crate::kernel::{Cpu, CpuId, Kernel, ReportKind};
use crate::sync::untracked::{self, Ordering::Relaxed};
use crate::sync::UntrackedArc;
use crate::workqueue::{Workqueue, WqError, WQ_MEM_RECLAIM, WQ_PERCPU};
use std::fmt;

/// Which hotplug callback of the batcher ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchCallback {
    /// `bio_complete_batch_cpu_online()` (startup at `CPUHP_AP_ONLINE_DYN`).
    Online,
    /// `bio_complete_batch_cpu_down_prep()` (teardown at `CPUHP_AP_ONLINE_DYN`).
    DownPrep,
    /// `bio_complete_batch_cpu_dead()` (teardown at `CPUHP_BP_PREPARE_DYN`).
    Dead,
}

/// What the batcher reports to an observer (the oracle, statistics). Every method has an empty
/// default. Not a kernel concept.
pub trait BatcherObserver: Send + Sync {
    /// A bio was put on `cx`'s batch.
    fn deferred(&self, _bio: u64, _cx: &Cpu) {}
    /// `bio_complete_work_fn()` of `batch_cpu`'s batch started on `cx`.
    fn work_fn(&self, _batch_cpu: CpuId, _cx: &Cpu) {}
    /// The worker was (re)scheduled for `batch_cpu`: `queued` is the queue call's return value.
    fn scheduled(&self, _batch_cpu: CpuId, _queued: bool) {}
    /// A hotplug callback ran for `target` on `cx`.
    fn hotplug(&self, _callback: BatchCallback, _target: CpuId, _cx: &Cpu) {}
}

/// Why the batcher could not be initialised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InitError {
    /// `init_bio()` already ran on this kernel.
    #[error("the task-completion batcher is already initialised on this kernel")]
    AlreadyInitialised,
    /// `alloc_workqueue()` failed (the kernel panics: "bio: can't allocate bio_complete workqueue").
    #[error("bio: can't allocate bio_complete workqueue: {0}")]
    Workqueue(#[from] WqError),
    /// A hotplug state could not be registered (`cpuhp_setup_state_nocalls()` failed).
    #[error("cpuhp_setup_state_nocalls({state}) failed")]
    Hotplug {
        /// The state's name.
        state: &'static str,
        /// The hotplug machine's error.
        #[source]
        error: ::hotplug::HotplugError,
    },
}

/// The batcher of one kernel: the `bio_complete` workqueue, the per-CPU batches and the variant.
pub struct BioCompleteBatcher {
    variant: Variant,
    wq: Workqueue,
    batches: Vec<BioCompleteBatch>,
    observer: Option<UntrackedArc<dyn BatcherObserver>>,
    watchdog: Vec<Watchdog>,
    /// The dynamic hotplug states it got: (`block/bio:complete:online`, `block/bio:complete:dead`).
    states: (::hotplug::StateId, ::hotplug::StateId),
}

impl fmt::Debug for BioCompleteBatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BioCompleteBatcher")
            .field("variant", &self.variant.name)
            .field("cpus", &self.batches.len())
            .finish()
    }
}

/// What [`bio_complete_in_task`] did with the bio.
#[derive(Debug)]
pub enum InTask {
    /// Offloaded to the worker (the kernel's `true`): the caller must not touch the bio again.
    Deferred,
    /// Not offloaded (`false`): the caller runs its completion here, with the bio handed back.
    Run(Box<Bio>),
}

impl Kernel {
    /// The task-completion batcher, once [`bio_complete_init`] ran.
    pub fn bio_complete(&self) -> Option<&UntrackedArc<BioCompleteBatcher>> {
        self.bio_complete.get()
    }
}

/// The part of `init_bio()` the series adds: per-CPU batches (`bio_complete_batch_init()`, which
/// disables the work of CPUs that are offline now, as mm/vmstat.c does), the `bio_complete`
/// workqueue, and the two hotplug states registered with `cpuhp_setup_state_nocalls()`.
pub fn bio_complete_init(
    kernel: &UntrackedArc<Kernel>,
    variant: Variant,
    observer: Option<UntrackedArc<dyn BatcherObserver>>,
) -> Result<UntrackedArc<BioCompleteBatcher>, InitError> {
    if kernel.bio_complete.get().is_some() {
        return Err(InitError::AlreadyInitialised);
    }
    let boot = kernel.cpu(CpuId(0)).expect("CPU0 exists");
    let mut batches = Vec::new();
    for cpu in kernel.possible_cpus() {
        let func = move |cx: &Cpu, _w: &crate::workqueue::WorkStruct| {
            if let Some(b) = cx.kernel().bio_complete() {
                b.bio_complete_work_fn(cpu, cx);
            }
        };
        let work = match variant.work {
            WorkKind::Delayed { delay } => BatchWork::Delayed(
                kernel.init_delayed_work("bio_complete_work_fn", func),
                delay,
            ),
            WorkKind::Plain => BatchWork::Plain(kernel.init_work("bio_complete_work_fn", func)),
        };
        let batch = BioCompleteBatch::new(cpu, work);
        if variant.init_disables_offline && !kernel.cpu_online(cpu) {
            cpuhp::disable_sync(kernel, &batch, &boot);
        }
        batches.push(batch);
    }
    let wq = kernel.alloc_workqueue("bio_complete", WQ_MEM_RECLAIM | WQ_PERCPU, 0)?;
    let states = cpuhp::register(kernel)?;
    let watchdog = kernel
        .possible_cpus()
        .map(|_| Watchdog::default())
        .collect();
    let batcher = UntrackedArc::new(BioCompleteBatcher {
        variant,
        wq,
        batches,
        observer,
        watchdog,
        states,
    });
    kernel
        .bio_complete
        .set(UntrackedArc::clone(&batcher))
        .map_err(|_| InitError::AlreadyInitialised)?;
    Ok(batcher)
}

impl BioCompleteBatcher {
    /// The version running.
    pub fn variant(&self) -> &Variant {
        &self.variant
    }

    /// The `bio_complete` workqueue.
    pub fn workqueue(&self) -> &Workqueue {
        &self.wq
    }

    /// The hotplug states it registered: (`block/bio:complete:online`, `block/bio:complete:dead`).
    pub fn hotplug_states(&self) -> (::hotplug::StateId, ::hotplug::StateId) {
        self.states
    }

    fn batch(&self, cpu: CpuId) -> &BioCompleteBatch {
        &self.batches[cpu.index()]
    }

    /// How many bios wait on `cpu`'s batch. A read for tests and the oracle between steps; it takes
    /// no lock, so it must not race with the CPU's own producers and worker.
    pub fn pending(&self, cpu: CpuId) -> usize {
        self.batch(cpu).len_unlocked(&self.variant)
    }

    /// The work item of `cpu`'s batch (for tests: its pending/disable state).
    pub fn work_of(&self, cpu: CpuId) -> crate::workqueue::WorkStruct {
        match self.batch(cpu).work {
            BatchWork::Plain(w) => w,
            BatchWork::Delayed(d, _) => d.work,
        }
    }

    /// `__bio_complete_in_task()`: puts `bio` on the current CPU's batch and schedules the worker if
    /// the list was empty (v5/v6: `mod_delayed_work_on(cpu, wq, dwork, 1)`; v7:
    /// `queue_work_on()`).
    pub fn defer(&self, bio: Box<Bio>, cx: &Cpu) {
        let b = self.batch(cx.id());
        let id = bio.id();
        crate::ktrace!(cx, target: "block", "biosim_bio_complete_defer", fields(bio = id), "bio#{id} to the batch of CPU{}", cx.id().0);
        let was_empty = self.list_add(b, bio, cx);
        self.watchdog[cx.id().index()].adds.fetch_add(1, Relaxed);
        if let Some(o) = &self.observer {
            o.deferred(id, cx);
        }
        if was_empty {
            self.schedule(b, cx, false);
        }
    }

    /// `bio_list_add(&batch->list, bio)` under the variant's protection (or `llist_add()`);
    /// returns whether the list was empty.
    fn list_add(&self, b: &BioCompleteBatch, bio: Box<Bio>, cx: &Cpu) -> bool {
        if self.variant.list == ListKind::Llist {
            return b.llist_add(bio);
        }
        let guard = b.lock(self.batch(cx.id()), cx, &self.variant, true);
        let was_empty = guard.empty();
        guard.add(bio);
        was_empty
    }

    /// The worker's `list = batch->list; bio_list_init(&batch->list)` (or `llist_del_all()`).
    fn list_take(&self, b: &BioCompleteBatch, cx: &Cpu) -> crate::block::BioList {
        if self.variant.list == ListKind::Llist {
            return b.llist_del_all();
        }
        b.lock(self.batch(cx.id()), cx, &self.variant, false).take()
    }

    /// `bio_list_empty(&batch->list)` under the variant's protection (or `llist_empty()`).
    fn list_empty(&self, b: &BioCompleteBatch, cx: &Cpu, producer: bool) -> bool {
        if self.variant.list == ListKind::Llist {
            return b.llist_empty();
        }
        b.lock(self.batch(cx.id()), cx, &self.variant, producer)
            .empty()
    }

    /// Schedules the batch's worker: with the variant's delay, or at once (`now`) for the
    /// `need_resched()` requeue and the online requeue.
    fn schedule(&self, b: &BioCompleteBatch, cx: &Cpu, now: bool) {
        let k = cx.kernel();
        let queued = match b.work {
            BatchWork::Delayed(dw, delay) => {
                // mod_delayed_work_on() returns whether it modified a pending work; the work is
                // scheduled either way unless it is disabled.
                k.mod_delayed_work_on(Some(b.cpu), &self.wq, dw, if now { 0 } else { delay }, cx);
                k.work_pending(dw.work)
            }
            BatchWork::Plain(w) => k.queue_work_on(Some(b.cpu), &self.wq, w, cx),
        };
        crate::ktrace!(
            cx,
            target: "block",
            "biosim_bio_complete_schedule",
            "{} for CPU{}'s batch -> {}",
            match (self.variant.work, now) {
                (WorkKind::Plain, _) => "queue_work_on".to_owned(),
                (WorkKind::Delayed { .. }, true) => "mod_delayed_work_on(delay 0)".to_owned(),
                (WorkKind::Delayed { delay }, false) => format!("mod_delayed_work_on(delay {delay})"),
            },
            b.cpu.0,
            if queued {
                "work pending"
            } else if k.work_disable_count(self.work_of(b.cpu)) > 0 {
                "not queued: the work is disabled"
            } else {
                "not queued: already pending"
            }
        );
        if let Some(o) = &self.observer {
            o.scheduled(b.cpu, queued);
        }
    }

    /// `bio_complete_work_fn()`: takes the batch with IRQs off (or under the local lock), completes
    /// every bio in task context, and loops until a pass finds the list empty. v5/v6 stop after a
    /// batch when `need_resched()`, requeueing themselves if bios remain.
    fn bio_complete_work_fn(&self, batch_cpu: CpuId, cx: &Cpu) {
        let b = self.batch(batch_cpu);
        let watch = &self.watchdog[batch_cpu.index()];
        if let Some(o) = &self.observer {
            o.work_fn(batch_cpu, cx);
        }
        if watch.stuck.load(Relaxed) {
            // The kernel's CPU never left the loop that tripped the livelock detector.
            return;
        }
        let mut no_progress_passes = 0usize;
        loop {
            let list = self.list_take(b, cx);
            if list.empty() {
                break;
            }
            let mut list = list;
            let mut progress = false;
            while let Some(bio) = list.pop() {
                let adds = watch.adds.load(Relaxed);
                call_end_io(
                    bio,
                    cx,
                    "bio_complete_work_fn",
                    self.variant.end_io_null_check,
                );
                // A bio whose bi_end_io put it straight back on a batch made no progress.
                progress |= watch.adds.load(Relaxed) == adds;
                if !self.variant.yield_keeps_batch
                    && self.variant.need_resched_yield
                    && cx.need_resched()
                {
                    // The buggy twin of finding 7: yields mid-batch; what is left of the local
                    // list goes out of scope with it.
                    let abandoned = list.size();
                    crate::ktrace!(cx, target: "block", "biosim_bio_complete_yield", "bio_complete_work_fn: need_resched() mid-batch, {abandoned} bios left behind");
                    drop(list);
                    return;
                }
            }
            no_progress_passes = if progress { 0 } else { no_progress_passes + 1 };
            if no_progress_passes >= LIVELOCK_PASSES {
                watch.stuck.store(true, Relaxed);
                self.report_livelock(cx);
                return;
            }
            if self.variant.need_resched_yield && cx.need_resched() {
                if !self.list_empty(b, cx, false) && self.variant.yield_requeues {
                    self.schedule(b, cx, true);
                }
                break;
            }
        }
    }

    /// Reports the endless re-deferral in biosim's own words: no kernel prints this. A version
    /// with the `need_resched()` yield (v6) would requeue itself forever in a real kernel without
    /// any splat; one without it would spin until kernel/watchdog.c's soft-lockup detector fired.
    fn report_livelock(&self, cx: &Cpu) {
        let real_kernel = if self.variant.need_resched_yield {
            "a real kernel yields on need_resched() and requeues the work forever, with no splat"
        } else {
            "a real kernel, with no need_resched() yield here, would report a soft lockup"
        };
        cx.report(
            ReportKind::Bug,
            format!(
                "{LIVELOCK_REPORT}: CPU#{} bio_complete_work_fn [{}] ran {LIVELOCK_PASSES} passes and completed no bio (every bi_end_io deferred its bio again; {real_kernel})",
                cx.id().0,
                cx.current().comm
            ),
        );
    }
}

/// How many consecutive passes of one work-function run may complete nothing (every `bi_end_io`
/// re-deferring its bio) before biosim's livelock detector stops the run. A real burst always
/// makes progress; only an endless re-deferral gets there. Not a kernel value: the kernel has no
/// such detector (kernel/watchdog.c's soft-lockup detector measures time without scheduling, which
/// a version with the `need_resched()` yield never reaches).
pub const LIVELOCK_PASSES: usize = 1_000;

/// How biosim's livelock report begins: the words a check matches, so the message and its readers
/// cannot drift apart. biosim's own, not a kernel splat.
pub const LIVELOCK_REPORT: &str = "biosim: livelock";

/// Per-CPU state of biosim's livelock detector (not kernel state of the batcher).
#[derive(Debug, Default)]
struct Watchdog {
    /// Bios put on this CPU's batch so far.
    adds: untracked::AtomicUsize,
    /// The detector fired: the CPU is considered stuck in the work function for good.
    stuck: untracked::AtomicBool,
}

/// `bio->bi_end_io(bio)` as the worker and the dead drain call it: unconditionally. A deferred bio
/// without `bi_end_io` is the kernel's NULL pointer dereference (finding 3), reported; the bio is
/// lost, as it would be with the oops.
pub(crate) fn call_end_io(bio: Box<Bio>, cx: &Cpu, site: &str, null_check: bool) {
    if bio.bi_end_io.is_none() {
        if null_check {
            return;
        }
        cx.report(
            ReportKind::Bug,
            format!(
                "BUG: kernel NULL pointer dereference, address: 0000000000000000\nRIP: {site}: bio#{} has no bi_end_io",
                bio.id()
            ),
        );
        return;
    }
    end_io(bio, cx);
}

/// `bio_complete_in_task()`: from inside a `bi_end_io`, offloads the bio to the worker when the
/// current context is atomic ([`InTask::Deferred`]), or hands it back to run here
/// ([`InTask::Run`]). With the review's guard (v6-review, v7) a bio already flagged
/// `BIO_COMPLETE_IN_TASK` is handed back, and a deferred bio gets the flag; v6 as posted has no
/// guard, so on a kernel without `CONFIG_PREEMPT_COUNT` it re-defers forever (finding 2).
///
/// Without an initialised batcher, or on a version without the dynamic helper (v5), the bio is
/// handed back and a WARN is reported once.
pub fn bio_complete_in_task(mut bio: Box<Bio>, cx: &Cpu) -> InTask {
    let Some(b) = cx.kernel().bio_complete() else {
        cx.kernel().warn_once(
            cx,
            "bio_complete_in_task:uninit",
            "block/bio.c: bio_complete_in_task() without the task-completion batcher",
        );
        return InTask::Run(bio);
    };
    if !b.variant.dynamic_helper {
        cx.kernel().warn_once(
            cx,
            "bio_complete_in_task:absent",
            "block/bio.c: bio_complete_in_task() does not exist in this version",
        );
        return InTask::Run(bio);
    }
    if b.variant.in_task_guard && bio.flagged(BioFlag::CompleteInTask) {
        return InTask::Run(bio);
    }
    if !bio_in_atomic(cx) {
        return InTask::Run(bio);
    }
    if b.variant.in_task_guard {
        bio.set_flag(BioFlag::CompleteInTask);
    }
    b.defer(bio, cx);
    InTask::Deferred
}

/// `__bio_complete_in_task()`: defers `bio` to the current CPU's batch unconditionally. Without an
/// initialised batcher the bio completes here, with a WARN reported once.
pub fn __bio_complete_in_task(bio: Box<Bio>, cx: &Cpu) {
    match cx.kernel().bio_complete() {
        Some(b) => b.defer(bio, cx),
        None => {
            cx.kernel().warn_once(cx, "__bio_complete_in_task:uninit", "block/bio.c: BIO_COMPLETE_IN_TASK without the task-completion batcher: completing in place");
            end_io(bio, cx);
        }
    }
}

/// A `bi_end_io` that calls [`bio_complete_in_task`] first and runs `f` only where it may sleep:
/// the pattern of the series' dynamic users (fserror reporting).
pub fn end_io_in_task(
    name: &'static str,
    f: impl Fn(Box<Bio>, &Cpu) + Send + Sync + 'static,
) -> BioEndIo {
    BioEndIo::new(name, move |bio, cx| {
        if let InTask::Run(bio) = bio_complete_in_task(bio, cx) {
            f(bio, cx);
        }
    })
}
