//! The posted versions of the series (v5, v6, v6-review, v7) and their buggy twins: one
//! configurable module, each version an instance chosen by a [`Variant`]'s knobs. The code exists
//! once; the knobs select the posted behaviour at the few places the versions differ, so each
//! version reads against its seed diff by following its knobs (`biosim variants` lists them).
//!
//! Why one module and not four: the versions differ in six places of ~150 lines (the list and its
//! protection, delayed or plain work, the `need_resched()` yield, the online requeue, the dynamic
//! helper and its guard); four copies would be four places to keep the shared protocol right, and
//! the twins (one knob changed) would be more copies still. A reviewer's version that is not a
//! knob is a module of its own (see [`super::module`]).

use super::batch::{BatchWork, BioCompleteBatch};
use super::cpuhp;
use super::module::kapi;
use super::module::{BioCompleteModule, BioCompleteOps, ModuleInit, Shared};
use super::{InTask, InitError, ListKind, Variant, WorkKind};
use crate::block::bio::bio_in_atomic;
use crate::block::{Bio, BioFlag, BioList};
use crate::kernel::{Cpu, CpuId};
use crate::sync::{UntrackedArc, UntrackedOnceLock};
use crate::workqueue::{Workqueue, WQ_MEM_RECLAIM, WQ_PERCPU};

/// The posted module configured by a variant's knobs.
#[derive(Debug, Clone, Copy)]
pub(super) struct PostedModule(pub(super) Variant);

impl BioCompleteModule for PostedModule {
    fn name(&self) -> &'static str {
        self.0.name
    }

    fn summary(&self) -> &'static str {
        "the posted series, configured by its knobs"
    }

    /// The part of `init_bio()` the series adds: per-CPU batches (`bio_complete_batch_init()`,
    /// which disables the work of CPUs that are offline now, as mm/vmstat.c does), the
    /// `bio_complete` workqueue, and the two hotplug states registered with
    /// `cpuhp_setup_state_nocalls()`.
    fn init(&self, m: &ModuleInit<'_>) -> Result<Box<dyn BioCompleteOps>, InitError> {
        let variant = self.0;
        let kernel = m.kernel();
        let me: UntrackedArc<UntrackedOnceLock<UntrackedArc<Posted>>> = UntrackedArc::default();
        let mut batches = Vec::new();
        for cpu in kernel.possible_cpus() {
            let me = UntrackedArc::clone(&me);
            let func = move |cx: &Cpu| {
                if let Some(p) = me.get() {
                    p.bio_complete_work_fn(cpu, cx);
                }
            };
            let work = match variant.work {
                WorkKind::Delayed { delay } => BatchWork::Delayed(
                    m.init_delayed_work(cpu, "bio_complete_work_fn", func),
                    delay,
                ),
                WorkKind::Plain => BatchWork::Plain(m.init_work(cpu, "bio_complete_work_fn", func)),
            };
            let batch = BioCompleteBatch::new(cpu, work);
            if variant.init_disables_offline && !kernel.cpu_online(cpu) {
                cpuhp::disable_sync(&batch, m.boot_cpu());
            }
            batches.push(batch);
        }
        let wq = m.alloc_workqueue("bio_complete", WQ_MEM_RECLAIM | WQ_PERCPU, 0)?;
        let posted = UntrackedArc::new(Posted {
            variant,
            wq,
            batches,
        });
        let _ = me.set(UntrackedArc::clone(&posted));
        cpuhp::register(m, &posted)?;
        Ok(Box::new(Shared(posted)))
    }
}

/// A running instance: the `bio_complete` workqueue and the per-CPU batches.
pub(super) struct Posted {
    pub(super) variant: Variant,
    wq: Workqueue,
    batches: Vec<BioCompleteBatch>,
}

impl BioCompleteOps for Posted {
    /// `__bio_complete_in_task()`: puts `bio` on the current CPU's batch and schedules the worker
    /// if the list was empty (v5/v6: `mod_delayed_work_on(cpu, wq, dwork, 1)`; v7:
    /// `queue_work_on()`).
    fn __bio_complete_in_task(&self, bio: Box<Bio>, cx: &Cpu) {
        let b = self.batch(cx.id());
        if self.list_add(b, bio, cx) {
            self.schedule(b, cx, false);
        }
    }

    /// `bio_complete_in_task()`: from inside a `bi_end_io`, offloads the bio to the worker when
    /// the current context is atomic, or hands it back to run here. With the review's guard
    /// (v6-review, v7) a bio already flagged `BIO_COMPLETE_IN_TASK` is handed back, and a
    /// deferred bio gets the flag; v6 as posted has no guard, so on a kernel without
    /// `CONFIG_PREEMPT_COUNT` it re-defers forever (finding 2). v5 has no dynamic helper.
    fn bio_complete_in_task(&self, mut bio: Box<Bio>, cx: &Cpu) -> InTask {
        if !self.variant.dynamic_helper {
            cx.kernel().warn_once(
                cx,
                "bio_complete_in_task:absent",
                "block/bio.c: bio_complete_in_task() does not exist in this version",
            );
            return InTask::Run(bio);
        }
        if self.variant.in_task_guard && bio.flagged(BioFlag::CompleteInTask) {
            return InTask::Run(bio);
        }
        if !bio_in_atomic(cx) {
            return InTask::Run(bio);
        }
        if self.variant.in_task_guard {
            bio.set_flag(BioFlag::CompleteInTask);
        }
        super::module::__bio_complete_in_task(bio, cx);
        InTask::Deferred
    }

    fn pending(&self, cpu: CpuId) -> usize {
        self.batch(cpu).len_unlocked(&self.variant)
    }
}

impl Posted {
    pub(super) fn batch(&self, cpu: CpuId) -> &BioCompleteBatch {
        &self.batches[cpu.index()]
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
    fn list_take(&self, b: &BioCompleteBatch, cx: &Cpu) -> BioList {
        if self.variant.list == ListKind::Llist {
            return b.llist_del_all();
        }
        b.lock(self.batch(cx.id()), cx, &self.variant, false).take()
    }

    /// `bio_list_empty(&batch->list)` under the variant's protection (or `llist_empty()`).
    pub(super) fn list_empty(&self, b: &BioCompleteBatch, cx: &Cpu, producer: bool) -> bool {
        if self.variant.list == ListKind::Llist {
            return b.llist_empty();
        }
        b.lock(self.batch(cx.id()), cx, &self.variant, producer)
            .empty()
    }

    /// Schedules the batch's worker: with the variant's delay, or at once (`now`) for the
    /// `need_resched()` requeue and the online requeue.
    pub(super) fn schedule(&self, b: &BioCompleteBatch, cx: &Cpu, now: bool) {
        let k = cx.kernel();
        let queued = match b.work {
            BatchWork::Delayed(dw, delay) => {
                // mod_delayed_work_on() returns whether it modified a pending work; the work is
                // scheduled either way unless it is disabled. Called on the kernel, not through
                // kapi, so the one pending read below serves the trace and the observer (under
                // loom every read of the workqueue state is a scheduling point).
                k.mod_delayed_work_on(Some(b.cpu), &self.wq, dw, if now { 0 } else { delay }, cx);
                let queued = k.work_pending(dw.work);
                if let Some(loaded) = k.bio_complete() {
                    loaded.scheduled(dw.work, queued);
                }
                queued
            }
            BatchWork::Plain(w) => kapi::queue_work_on(b.cpu, &self.wq, w, cx),
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
            } else if k.work_disable_count(b.work.work_struct()) > 0 {
                "not queued: the work is disabled"
            } else {
                "not queued: already pending"
            }
        );
    }

    /// `bio_complete_work_fn()`: takes the batch with IRQs off (or under the local lock),
    /// completes every bio in task context, and loops until a pass finds the list empty. v5/v6
    /// stop after a batch when `need_resched()`, requeueing themselves if bios remain.
    fn bio_complete_work_fn(&self, batch_cpu: CpuId, cx: &Cpu) {
        let b = self.batch(batch_cpu);
        loop {
            let mut list = self.list_take(b, cx);
            if list.empty() {
                break;
            }
            while let Some(bio) = list.pop() {
                self.call_end_io(bio, cx);
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
            if self.variant.need_resched_yield && cx.need_resched() {
                if !self.list_empty(b, cx, false) && self.variant.yield_requeues {
                    self.schedule(b, cx, true);
                }
                break;
            }
        }
    }

    /// `bio->bi_end_io(bio)`, or nothing for a bio without one when the variant has the
    /// automated review's NULL check (finding 3's suggestion).
    pub(super) fn call_end_io(&self, bio: Box<Bio>, cx: &Cpu) {
        if self.variant.end_io_null_check && bio.bi_end_io.is_none() {
            return;
        }
        super::module::bi_end_io(bio, cx);
    }
}
