//! The seam's bookkeeping for a module that does not follow the rules to the letter: a dynamic
//! helper that defers through its own method instead of the global `__bio_complete_in_task()` is
//! still accounted, exactly once, and a helper that defers through the global is not counted twice.

use bio_core::block::complete_in_task::module::prelude::*;
use bio_core::block::complete_in_task::{end_io_in_task, BatcherObserver};
use bio_core::block::{bio_endio, ReqOp};
use bio_core::kernel::ContextKind;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

struct Batch {
    list: LlistHead,
    work: WorkStruct,
}

struct Llist {
    batches: PerCpu<Batch>,
    wq: Workqueue,
    /// The dynamic helper defers through the global symbol (the rule) or its own method.
    via_global: bool,
}

impl BioCompleteOps for Llist {
    fn __bio_complete_in_task(&self, bio: Box<Bio>, cx: &Cpu) {
        let batch = this_cpu_ptr(&self.batches, cx);
        if llist_add(bio, &batch.list) {
            queue_work_on(cx.id(), &self.wq, batch.work, cx);
        }
    }

    fn bio_complete_in_task(&self, mut bio: Box<Bio>, cx: &Cpu) -> InTask {
        if bio.flagged(BioFlag::CompleteInTask) || !bio_in_atomic(cx) {
            return InTask::Run(bio);
        }
        bio.set_flag(BioFlag::CompleteInTask);
        if self.via_global {
            __bio_complete_in_task(bio, cx);
        } else {
            self.__bio_complete_in_task(bio, cx);
        }
        InTask::Deferred
    }

    fn pending(&self, cpu: CpuId) -> usize {
        per_cpu_ptr(&self.batches, cpu).list.len_unlocked()
    }
}

fn work_fn(m: &Llist, cpu: CpuId, cx: &Cpu) {
    let mut list = llist_reverse_order(llist_del_all(&per_cpu_ptr(&m.batches, cpu).list));
    while let Some(bio) = list.pop() {
        bi_end_io(bio, cx);
    }
}

struct Module(&'static str, bool);

impl BioCompleteModule for Module {
    fn name(&self) -> &'static str {
        self.0
    }
    fn summary(&self) -> &'static str {
        "test: the dynamic helper's deferral path"
    }
    fn dynamic_helper(&self) -> bool {
        true
    }
    fn init(&self, m: &ModuleInit<'_>) -> Result<Box<dyn BioCompleteOps>, InitError> {
        let wq = m.alloc_workqueue("bio_complete", WQ_MEM_RECLAIM | WQ_PERCPU, 0)?;
        let me: Arc<OnceLock<Arc<Llist>>> = Arc::default();
        let batches = PerCpu::new(m.kernel(), |cpu| {
            let me = Arc::clone(&me);
            Batch {
                list: LlistHead::new(),
                work: m.init_work(cpu, "bio_complete_work_fn", move |cx| {
                    work_fn(me.get().expect("initialised"), cpu, cx)
                }),
            }
        });
        let ops = Arc::new(Llist {
            batches,
            wq,
            via_global: self.1,
        });
        let _ = me.set(Arc::clone(&ops));
        Ok(Box::new(Shared(ops)))
    }
}

static VIA_GLOBAL: Module = Module("seam-via-global", true);
static VIA_METHOD: Module = Module("seam-via-method", false);

#[derive(Default)]
struct Count(AtomicUsize);

impl BatcherObserver for Count {
    fn deferred(&self, _bio: u64, _cx: &Cpu) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_dynamic_deferral_is_accounted_once_whichever_path_the_module_takes() {
    for module in [&VIA_GLOBAL, &VIA_METHOD] {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let count = Arc::new(Count::default());
        let observer: Arc<dyn BatcherObserver> = count.clone();
        bio_complete_init(&k, Variant::module(module), Some(observer)).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let d = Arc::clone(&done);
        let end = end_io_in_task("test_end_io_in_task", move |_bio, _cx| {
            d.fetch_add(1, Ordering::Relaxed);
        });
        ContextKind::Hardirq.run(&cx, |cx| {
            bio_endio(k.bio_alloc(ReqOp::Write, 0).with_end_io(end), cx)
        });
        assert_eq!(count.0.load(Ordering::Relaxed), 1, "{}", module.0);
        k.run_worker(bio_core::workqueue::PoolId::Cpu(CpuId(0)), &cx)
            .unwrap();
        assert_eq!(done.load(Ordering::Relaxed), 1, "{}: completed", module.0);
        assert!(
            k.reports().is_empty(),
            "{}: {:?}",
            module.0,
            k.reports().all()
        );
    }
}
