//! `hillf`: block/bio.c's task-completion infrastructure with Hillf Danton's suggestion from the
//! v6 review applied to v6-review's protocol: the work function has no `need_resched()` check and
//! drains the batch until it finds it empty.
//!
//! Hillf's mail, on v6's `if (need_resched()) { ... requeue ...; break; }`: "Checking resched is
//! not needed as workqueue worker can be preempted while processing bios. Given batch and delayed
//! work, I suspect completing more than batch, the bios accumulated within a jiff, makes sense."
//! So the 1-jiffy delayed work stays (his "given batch and delayed work"), and one run completes
//! every bio that arrives while it runs, not only the batch it found.
//!
//! His premise, "the worker can be preempted", holds on PREEMPT, PREEMPT_LAZY and PREEMPT_RT. On
//! PREEMPT_NONE and PREEMPT_VOLUNTARY nothing preempts a kworker in the kernel, and a loop that
//! drains until empty under a stream of completions faster than it drains never returns: finding
//! 13 (CPU monopolization) catches this module there, as it catches v6-review and v7.
//!
//! The rest is v6 with the review's agreed changes: the `bio_list` under `local_irq_save()` (not
//! `local_lock`, finding 4), the `BIO_COMPLETE_IN_TASK` guard in the dynamic helper (finding 2),
//! and the requeue on online written as v6-review writes it, `enable_delayed_work()` then
//! `mod_delayed_work_on(cpu, wq, &batch->work, 0)` if bios wait (finding 1; the v6-llist example
//! uses `enable_and_queue_work()` instead and says why). The list is per-CPU data that only its
//! CPU touches with interrupts off ([`IrqLocal`]), and the dead callback once the CPU is dead.
//!
//! Each function's doc comment shows the C it stands for.

use bio_core::block::complete_in_task::module::prelude::*;
use std::sync::{Arc, OnceLock};

/// `struct bio_complete_batch`.
#[derive(Debug)]
pub struct BioCompleteBatch {
    /// `struct bio_list list`: touched on its CPU with IRQs off, or by the dead callback.
    pub list: IrqLocal<BioList>,
    /// `struct delayed_work work`.
    pub work: DelayedWork,
    /// `int cpu`.
    pub cpu: CpuId,
}

/// `DEFINE_PER_CPU(struct bio_complete_batch, bio_complete_batch)` and `bio_complete_wq`.
#[derive(Debug)]
pub struct BioComplete {
    /// `bio_complete_batch`.
    pub batches: PerCpu<BioCompleteBatch>,
    /// `bio_complete_wq`.
    pub wq: Workqueue,
}

/// A hotplug callback's body: `int fn(unsigned int cpu)`, with the module's state.
type CpuhpFn = fn(&BioComplete, &Cpu, CpuId) -> Result<(), Errno>;

impl BioCompleteOps for BioComplete {
    /// As v6, with `local_irq_save()` for `local_lock_irqsave()` (the review's change).
    ///
    /// ```c
    /// void __bio_complete_in_task(struct bio *bio)
    /// {
    ///         struct bio_complete_batch *batch;
    ///         unsigned long flags;
    ///         bool was_empty;
    ///
    ///         local_irq_save(flags);
    ///         batch = this_cpu_ptr(&bio_complete_batch);
    ///         was_empty = bio_list_empty(&batch->list);
    ///         bio_list_add(&batch->list, bio);
    ///         local_irq_restore(flags);
    ///
    ///         if (was_empty)
    ///                 mod_delayed_work_on(batch->cpu, bio_complete_wq,
    ///                                     &batch->work, 1);
    /// }
    /// ```
    fn __bio_complete_in_task(&self, bio: Box<Bio>, cx: &Cpu) {
        let flags = local_irq_save(cx);
        let batch = this_cpu_ptr(&self.batches, cx);
        let was_empty = batch.list.with(cx, |list| {
            let was_empty = list.empty();
            list.add(bio);
            was_empty
        });
        local_irq_restore(cx, flags);
        if was_empty {
            mod_delayed_work_on(batch.cpu, &self.wq, batch.work, 1, cx);
        }
    }

    /// The review's guard (finding 2).
    ///
    /// ```c
    /// static inline bool bio_complete_in_task(struct bio *bio)
    /// {
    ///         if (bio_flagged(bio, BIO_COMPLETE_IN_TASK))
    ///                 return false;
    ///         if (!bio_in_atomic())
    ///                 return false;
    ///         bio_set_flag(bio, BIO_COMPLETE_IN_TASK);
    ///         __bio_complete_in_task(bio);
    ///         return true;
    /// }
    /// ```
    fn bio_complete_in_task(&self, mut bio: Box<Bio>, cx: &Cpu) -> InTask {
        if bio.flagged(BioFlag::CompleteInTask) {
            return InTask::Run(bio);
        }
        if !bio_in_atomic(cx) {
            return InTask::Run(bio);
        }
        bio.set_flag(BioFlag::CompleteInTask);
        __bio_complete_in_task(bio, cx);
        InTask::Deferred
    }

    fn pending(&self, cpu: CpuId) -> usize {
        per_cpu_ptr(&self.batches, cpu).list.peek(BioList::size)
    }
}

/// Hillf's work function: take the batch, complete it, and go round again until a pass finds the
/// list empty; no `need_resched()` check (the kworker is preemptible).
///
/// ```c
/// static void bio_complete_work_fn(struct work_struct *w)
/// {
///         struct delayed_work *dw = to_delayed_work(w);
///         struct bio_complete_batch *batch =
///                 container_of(dw, struct bio_complete_batch, work);
///
///         for (;;) {
///                 struct bio_list list;
///                 struct bio *bio;
///
///                 local_irq_disable();
///                 list = batch->list;
///                 bio_list_init(&batch->list);
///                 local_irq_enable();
///
///                 if (bio_list_empty(&list))
///                         break;
///                 while ((bio = bio_list_pop(&list)))
///                         bio->bi_end_io(bio);
///         }
/// }
/// ```
pub fn bio_complete_work_fn(m: &BioComplete, batch_cpu: CpuId, cx: &Cpu) {
    let batch = per_cpu_ptr(&m.batches, batch_cpu);
    loop {
        local_irq_disable(cx);
        let mut list = batch.list.with(cx, std::mem::take);
        local_irq_enable(cx);
        if list.empty() {
            break;
        }
        while let Some(bio) = list.pop() {
            bi_end_io(bio, cx);
        }
    }
}

/// v6-review's requeue (finding 1).
///
/// ```c
/// static int bio_complete_batch_cpu_online(unsigned int cpu)
/// {
///         struct bio_complete_batch *batch = per_cpu_ptr(&bio_complete_batch, cpu);
///         unsigned long flags;
///         bool is_empty;
///
///         enable_delayed_work(&batch->work);
///         local_irq_save(flags);
///         is_empty = bio_list_empty(&batch->list);
///         local_irq_restore(flags);
///         if (!is_empty)
///                 mod_delayed_work_on(cpu, bio_complete_wq, &batch->work, 0);
///         return 0;
/// }
/// ```
fn bio_complete_batch_cpu_online(m: &BioComplete, cx: &Cpu, cpu: CpuId) -> Result<(), Errno> {
    let batch = per_cpu_ptr(&m.batches, cpu);
    enable_delayed_work(batch.work, cx);
    let flags = local_irq_save(cx);
    let is_empty = batch.list.with(cx, |list| list.empty());
    local_irq_restore(cx, flags);
    if !is_empty {
        mod_delayed_work_on(cpu, &m.wq, batch.work, 0, cx);
    }
    Ok(())
}

/// ```c
/// static int bio_complete_batch_cpu_down_prep(unsigned int cpu)
/// {
///         disable_delayed_work_sync(&per_cpu(bio_complete_batch, cpu).work);
///         return 0;
/// }
/// ```
fn bio_complete_batch_cpu_down_prep(m: &BioComplete, cx: &Cpu, cpu: CpuId) -> Result<(), Errno> {
    disable_delayed_work_sync(per_cpu_ptr(&m.batches, cpu).work, cx);
    Ok(())
}

/// The CPU is dead and its work disabled: no locking (finding 9).
///
/// ```c
/// static int bio_complete_batch_cpu_dead(unsigned int cpu)
/// {
///         struct bio_complete_batch *batch = per_cpu_ptr(&bio_complete_batch, cpu);
///         struct bio *bio;
///
///         while ((bio = bio_list_pop(&batch->list)))
///                 bio->bi_end_io(bio);
///         return 0;
/// }
/// ```
fn bio_complete_batch_cpu_dead(m: &BioComplete, cx: &Cpu, cpu: CpuId) -> Result<(), Errno> {
    let mut list = per_cpu_ptr(&m.batches, cpu).list.with(cx, std::mem::take);
    while let Some(bio) = list.pop() {
        bi_end_io(bio, cx);
    }
    Ok(())
}

/// The module.
#[derive(Debug)]
pub struct Hillf;

/// The example module.
pub static MODULE: Hillf = Hillf;

impl BioCompleteModule for Hillf {
    fn name(&self) -> &'static str {
        "hillf"
    }

    fn summary(&self) -> &'static str {
        "v6-review's protocol, the work function draining until empty with no need_resched() check (Hillf Danton)"
    }

    /// `bio_complete_in_task()` exists (with the review's guard).
    fn dynamic_helper(&self) -> bool {
        true
    }

    /// `struct delayed_work`, armed with a 1-jiffy delay, as v6.
    fn work(&self) -> WorkKind {
        WorkKind::Delayed { delay: 1 }
    }

    /// As v6 (see the v6-llist example for the C), with `bio_list_init()` for the list.
    fn init(&self, m: &ModuleInit<'_>) -> Result<Box<dyn BioCompleteOps>, InitError> {
        let me: Arc<OnceLock<Arc<BioComplete>>> = Arc::default();
        let batches = PerCpu::new(m.kernel(), |cpu| {
            let me = Arc::clone(&me);
            let work = m.init_delayed_work(cpu, "bio_complete_work_fn", move |cx| {
                if let Some(bc) = me.get() {
                    bio_complete_work_fn(bc, cpu, cx);
                }
            });
            if !cpu_online(m.boot_cpu(), cpu) {
                disable_delayed_work_sync(work, m.boot_cpu());
            }
            BioCompleteBatch {
                list: IrqLocal::new(cpu, BioList::new()),
                work,
                cpu,
            }
        });
        let wq = m.alloc_workqueue("bio_complete", WQ_MEM_RECLAIM | WQ_PERCPU, 0)?;
        let bc = Arc::new(BioComplete { batches, wq });
        let _ = me.set(Arc::clone(&bc));
        let cb = |name: &'static str, f: CpuhpFn| {
            let bc = Arc::clone(&bc);
            CpuhpCallback::new(name, move |cx, cpu| f(&bc, cx, cpu))
        };
        m.cpuhp_setup_state_nocalls(
            CPUHP_AP_ONLINE_DYN,
            "block/bio:complete:online",
            Some(cb(
                "bio_complete_batch_cpu_online",
                bio_complete_batch_cpu_online,
            )),
            Some(cb(
                "bio_complete_batch_cpu_down_prep",
                bio_complete_batch_cpu_down_prep,
            )),
        )?;
        m.cpuhp_setup_state_nocalls(
            CPUHP_BP_PREPARE_DYN,
            "block/bio:complete:dead",
            None,
            Some(cb(
                "bio_complete_batch_cpu_dead",
                bio_complete_batch_cpu_dead,
            )),
        )?;
        Ok(Box::new(Shared(bc)))
    }
}
