//! Finding 14: lockdep's IRQ-usage check (kernel/locking/lockdep.c `mark_usage()`,
//! `valid_state()`) on the batch's list lock, the kernel's own detector for a lock taken in
//! hardirq and elsewhere with interrupts on. The producer of every version runs in hardirq; v6's
//! worker takes its `local_lock_t` with `local_lock_irq()`, the others have no lock at all
//! (`local_irq_save()`, an llist). A worker that takes the lock with `local_lock()` leaves the
//! list open to its CPU's interrupts — a deadlock on the lock's owner in a real kernel, and
//! "inconsistent {IN-HARDIRQ-W} -> {HARDIRQ-ON-W} usage" from lockdep — and nothing else in the
//! gallery sees it: the bios still complete, once and in task context.
//!
//! The twin is a module ([`V6_IRQS_ON`]), because the posted versions have no knob for it: v6
//! with exactly that one call changed.

use super::verdict::Verdict;
use crate::machine::oracle::{Invariant, Need};
use crate::machine::sim::{CompletionContext, Sim, SimConfig, SimError};
use crate::machine::transition::Transition;
use bio_core::block::complete_in_task::module::prelude::*;
use bio_core::kernel::ReportKind;
use bio_core::workqueue::RescuerAffinity;
use std::sync::{Arc, OnceLock};

/// Finding 14: three flagged bios completed in hardirq on CPU0 (the producer takes the list lock
/// in hardirq), then the machine settles (CPU0's worker takes it in task context). The verdict
/// is lockdep's inconsistent-usage report, on `kernel`.
pub fn check_14_lockdep_usage(
    variant: Variant,
    kernel: KernelConfig,
    rescuer: RescuerAffinity,
    trace: bool,
) -> Result<Sim, SimError> {
    let s = Sim::new(SimConfig {
        kernel,
        nr_cpus: 2,
        online: 2,
        variant,
        rescuer,
        seed: 1,
        trace,
    })?;
    for _ in 0..3 {
        s.apply(&Transition::Complete {
            cpu: 0,
            ctx: CompletionContext::Hardirq,
            need: Need::Flag,
        });
    }
    Ok(s)
}

/// The verdict of a machine [`check_14_lockdep_usage`] ran.
pub fn verdict_14(s: &Sim) -> Verdict {
    Verdict::of(
        s.settle(super::findings::BUDGET)
            .into_iter()
            .filter(|v| v.invariant == Invariant::KernelReport(ReportKind::InconsistentLockState))
            .collect(),
    )
}

/// `struct bio_complete_batch` of v6: the list under its local lock, and the work.
struct Batch {
    list: LocalLock<BioList>,
    work: WorkStruct,
}

/// The running twin.
struct IrqsOn {
    batches: PerCpu<Batch>,
    wq: Workqueue,
}

impl BioCompleteOps for IrqsOn {
    /// v6's producer, as posted:
    ///
    /// ```c
    /// local_lock_irqsave(&bio_complete_batch.lock, flags);
    /// batch = this_cpu_ptr(&bio_complete_batch);
    /// was_empty = bio_list_empty(&batch->list);
    /// bio_list_add(&batch->list, bio);
    /// local_unlock_irqrestore(&bio_complete_batch.lock, flags);
    /// if (was_empty)
    ///         queue_work_on(batch->cpu, bio_complete_wq, &batch->work);
    /// ```
    fn __bio_complete_in_task(&self, bio: Box<Bio>, cx: &Cpu) {
        let batch = this_cpu_ptr(&self.batches, cx);
        let was_empty = batch.list.local_lock_irqsave(cx).with(|l| {
            let empty = l.empty();
            l.add(bio);
            empty
        });
        if was_empty {
            queue_work_on(cx.id(), &self.wq, batch.work, cx);
        }
    }

    fn pending(&self, cpu: CpuId) -> usize {
        per_cpu_ptr(&self.batches, cpu).list.peek(|l| l.size())
    }
}

/// The one change: `local_lock()` where v6 has `local_lock_irq()`.
///
/// ```c
/// local_lock(&bio_complete_batch.lock);      /* v6: local_lock_irq() */
/// list = batch->list;
/// bio_list_init(&batch->list);
/// local_unlock(&bio_complete_batch.lock);
/// ```
fn bio_complete_work_fn(m: &IrqsOn, cpu: CpuId, cx: &Cpu) {
    let batch = per_cpu_ptr(&m.batches, cpu);
    loop {
        let mut list = batch.list.local_lock(cx).with(std::mem::take);
        if list.empty() {
            break;
        }
        while let Some(bio) = list.pop() {
            bi_end_io(bio, cx);
        }
    }
}

/// Finding 14's twin: v6 whose worker takes the list lock with interrupts on. Plain work and no
/// hotplug callbacks (the check keeps every CPU online).
#[derive(Debug)]
pub struct V6IrqsOn;

/// The twin, as a [`Variant::module`] takes it.
pub static V6_IRQS_ON: V6IrqsOn = V6IrqsOn;

impl BioCompleteModule for V6IrqsOn {
    fn name(&self) -> &'static str {
        "v6-irqs-on"
    }

    fn summary(&self) -> &'static str {
        "finding 14's twin: v6 whose worker takes the list lock with local_lock(), interrupts on"
    }

    fn init(&self, m: &ModuleInit<'_>) -> Result<Box<dyn BioCompleteOps>, InitError> {
        let wq = m.alloc_workqueue("bio_complete", WQ_MEM_RECLAIM | WQ_PERCPU, 0)?;
        let me: Arc<OnceLock<Arc<IrqsOn>>> = Arc::default();
        let batches = PerCpu::new(m.kernel(), |cpu| {
            let me = Arc::clone(&me);
            Batch {
                list: LocalLock::new(cpu, "bio_complete_batch.lock", BioList::new()),
                work: m.init_work(cpu, "bio_complete_work_fn", move |cx| {
                    if let Some(s) = me.get() {
                        bio_complete_work_fn(s, cpu, cx);
                    }
                }),
            }
        });
        let ops = Arc::new(IrqsOn { batches, wq });
        let _ = me.set(Arc::clone(&ops));
        Ok(Box::new(Shared(ops)))
    }
}
