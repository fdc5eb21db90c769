//! lockdep's IRQ-usage check on a module: v6's `bio_list` under `local_lock_t`, with a worker that
//! takes the lock with `local_lock()` — interrupts on — while the producer takes it in hardirq.
//! The kernel's lockdep reports exactly that ("inconsistent {IN-HARDIRQ-W} -> {HARDIRQ-ON-W}
//! usage"); the posted versions, whose workers use `local_lock_irq()` or `local_irq_save()`, are
//! silent. Written against the module API the way a reviewer's module is.

use bio_core::block::complete_in_task::module::prelude::*;
use bio_core::block::{bio_endio, BioEndIo, ReqOp};
use bio_core::kernel::{ContextKind, PreemptModel, ReportKind};
use bio_core::workqueue::PoolId;
use std::sync::{Arc, OnceLock};

/// `struct bio_complete_batch` of v6: the list under its local lock, and the work.
struct Batch {
    list: LocalLock<BioList>,
    work: WorkStruct,
}

struct IrqsOn {
    batches: PerCpu<Batch>,
    wq: Workqueue,
}

impl BioCompleteOps for IrqsOn {
    /// v6's producer: `local_lock_irqsave(&bio_complete_batch.lock, flags)`.
    fn __bio_complete_in_task(&self, bio: Box<Bio>, cx: &Cpu) {
        let batch = this_cpu_ptr(&self.batches, cx);
        let was_empty = {
            let guard = batch.list.local_lock_irqsave(cx);
            guard.with(|l| {
                let empty = l.empty();
                l.add(bio);
                empty
            })
        };
        if was_empty {
            queue_work_on(cx.id(), &self.wq, batch.work, cx);
        }
    }

    fn pending(&self, cpu: CpuId) -> usize {
        per_cpu_ptr(&self.batches, cpu).list.peek(|l| l.size())
    }
}

/// The bug: `local_lock(&bio_complete_batch.lock)` instead of `local_lock_irq()`.
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

struct IrqsOnModule;

impl BioCompleteModule for IrqsOnModule {
    fn name(&self) -> &'static str {
        "v6-irqs-on"
    }

    fn summary(&self) -> &'static str {
        "v6 whose worker takes the list lock with local_lock(): interrupts on"
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

static IRQS_ON: IrqsOnModule = IrqsOnModule;

/// A flagged bio completed in hardirq on CPU0, then CPU0's worker runs: the reports it leaves.
fn run(variant: Variant, config: KernelConfig) -> Vec<bio_core::kernel::Report> {
    let k = Kernel::new(config, 2).unwrap();
    bio_complete_init(&k, variant, None).unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let mut bio = k
        .bio_alloc(ReqOp::Write, 0)
        .with_end_io(BioEndIo::new("test_end_io", |_b, _cx| {}));
    bio.set_flag(BioFlag::CompleteInTask);
    ContextKind::Hardirq.run(&cx, |cx| bio_endio(bio, cx));
    k.advance_jiffies(1);
    k.run_timers(&cx);
    k.run_worker(PoolId::Cpu(CpuId(0)), &cx).unwrap();
    assert_eq!(
        k.bio_complete().unwrap().pending(CpuId(0)),
        0,
        "{variant}: drained"
    );
    k.reports().all()
}

/// Every non-RT preemption model with lockdep (`CONFIG_PROVE_LOCKING` selects `PREEMPT_COUNT`, so
/// a kernel without it has no lockdep to report anything).
fn configs() -> Vec<(&'static str, KernelConfig)> {
    [
        ("PREEMPT_NONE", PreemptModel::None),
        ("PREEMPT_VOLUNTARY", PreemptModel::Voluntary),
        ("PREEMPT", PreemptModel::Full),
        ("PREEMPT_LAZY", PreemptModel::Lazy),
    ]
    .into_iter()
    .map(|(n, m)| (n, KernelConfig::for_model(m)))
    .collect()
}

#[test]
fn a_worker_taking_the_list_lock_with_irqs_on_is_lockdeps_inconsistent_usage() {
    for (name, config) in configs() {
        let reports = run(Variant::module(&IRQS_ON), config);
        let usage: Vec<_> = reports
            .iter()
            .filter(|r| r.kind == ReportKind::InconsistentLockState)
            .collect();
        assert_eq!(usage.len(), 1, "{name}: {reports:#?}");
        let text = &usage[0].message;
        assert!(
            text.contains("inconsistent {IN-HARDIRQ-W} -> {HARDIRQ-ON-W} usage."),
            "{name}: {text}"
        );
        assert!(text.contains("(bio_complete_batch.lock)"), "{name}: {text}");
        assert!(text.contains("kworker/0:1/300"), "{name}: {text}");
        assert_eq!(reports.len(), 1, "{name}: nothing else: {reports:#?}");
    }
}

#[test]
fn on_preempt_rt_the_hardirq_producer_is_the_wait_context_bug_first() {
    // On RT the local lock sleeps: the hardirq producer is finding 4's Invalid wait context, and
    // lockdep, off after its first splat, says nothing more.
    let reports = run(
        Variant::module(&IRQS_ON),
        KernelConfig::for_model(PreemptModel::Rt),
    );
    let lockdep: Vec<_> = reports
        .iter()
        .filter(|r| {
            matches!(
                r.kind,
                ReportKind::InvalidWaitContext | ReportKind::InconsistentLockState
            )
        })
        .collect();
    assert_eq!(lockdep.len(), 1, "{reports:#?}");
    assert_eq!(lockdep[0].kind, ReportKind::InvalidWaitContext);
}

#[test]
fn no_posted_version_has_an_inconsistent_lock_state() {
    for (name, config) in configs() {
        for v in Variant::ALL {
            let reports = run(v, config);
            assert!(
                reports
                    .iter()
                    .all(|r| r.kind != ReportKind::InconsistentLockState),
                "{v} on {name}: {reports:#?}"
            );
        }
    }
}
