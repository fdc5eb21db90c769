//! mm/filemap.c as RFC v3 ("[PATCH RFC v3 1/2] filemap: defer dropbehind invalidation from IRQ
//! context", lkml 2026-02-27) changes it: a dropbehind folio whose writeback ends outside task
//! context is put on a per-CPU `struct dropbehind_batch` and invalidated later by per-CPU work on
//! `system_wq`, instead of being silently left cached (finding 11's gap).
//!
//! The C, re-expressed (the seed has only the cover letter; the code summary is in the plan):
//!
//! - `struct dropbehind_batch { local_lock_t lock_irq; struct folio_batch fbatch; struct
//!   work_struct work; }`, one per possible CPU ([`DropbehindBatch`]).
//! - `folio_end_writeback()`: `if (in_task()) folio_end_dropbehind(folio); else
//!   folio_end_dropbehind_irq(folio);` ([`DropbehindBatchV3::folio_end_dropbehind_irq`]).
//! - `folio_end_dropbehind_irq()`: `local_lock_irqsave()`, **returns without the invalidation if the
//!   batch is full** (the folio stays cached), else `folio_get()` + `folio_batch_add()`, unlock,
//!   `schedule_work_on(smp_processor_id(), &batch->work)`.
//! - `dropbehind_work_fn()` ([`DropbehindBatchV3::dropbehind_work_fn`]): drains `this_cpu_ptr()`,
//!   the batch of the CPU the work *runs on*, and `goto again` while the batch refilled. The work
//!   is never disabled on hotplug: once `workqueue:online` is torn down for a dying CPU its pool is
//!   disassociated and the CPU's work runs on another CPU, where it drains *that* CPU's batch.
//! - `dropbehind_drain_cpu(cpu)` ([`DropbehindBatchV3::dropbehind_drain_cpu`]), called from
//!   `page_alloc_cpu_dead()` (teardown of the fixed state `CPUHP_PAGE_ALLOC`, on a control CPU,
//!   after `lru_add_drain_cpu()`): the same loop on the dead CPU's batch, without the lock.
//! - `dropbehind_init()` ([`DropbehindBatchV3::dropbehind_init`]), from `pagecache_init()`:
//!   `folio_batch_init()` and `INIT_WORK()` for every possible CPU.
//!
//! The batch is generic over what it holds ([`DropbehindFolio`]): the page cache puts a folio
//! reference in it, the gallery's `v3` module a flagged bio standing for its folio
//! (`block::complete_in_task::v3`). What "the invalidation" and "skipping it" mean is the item's.
//!
//! Only the dropbehind test (`if (!folio_test_dropbehind(folio)) return;`) is the caller's: it
//! hands the batch dropbehind folios only.

use crate::block::complete_in_task::module::kapi;
use crate::kernel::local_lock::LocalLock;
use crate::kernel::percpu::{per_cpu_ptr, this_cpu_ptr, PerCpu};
use crate::kernel::{Cpu, CpuId, Kernel};
use crate::sync::untracked::{AtomicU64, Ordering::Relaxed};
use crate::sync::{UntrackedArc, UntrackedOnceLock};
use crate::workqueue::{WorkStruct, Workqueue, WqError, WQ_PERCPU};
use hotplug::{Errno, HotplugError, Invocation, StateId, CPUHP_PAGE_ALLOC};
use std::fmt;

/// `PAGEVEC_SIZE` (include/linux/pagevec.h): how many folios a `struct folio_batch` holds.
pub const PAGEVEC_SIZE: usize = 31;

/// What a `struct dropbehind_batch` holds: a folio with the reference `folio_get()` took, or what
/// stands for one.
pub trait DropbehindFolio: Send + 'static {
    /// The work's (or the dead drain's) per-folio body, in task context: `if
    /// (folio_trylock(folio)) { filemap_end_dropbehind(folio); folio_unlock(folio); }
    /// folio_put(folio);`.
    fn end(self, cx: &Cpu);
    /// `folio_end_dropbehind_irq()` found the batch full and returned before `folio_get()`: the
    /// invalidation is skipped, the folio stays cached. Called with the local lock released.
    fn skip(self, cx: &Cpu);
}

/// `struct folio_batch` (include/linux/pagevec.h): up to [`PAGEVEC_SIZE`] folios.
pub struct FolioBatch<T> {
    folios: Vec<T>,
}

impl<T> fmt::Debug for FolioBatch<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FolioBatch({} of {PAGEVEC_SIZE})", self.folios.len())
    }
}

impl<T> Default for FolioBatch<T> {
    fn default() -> Self {
        Self::folio_batch_init()
    }
}

impl<T> FolioBatch<T> {
    /// `folio_batch_init()`: empty.
    pub fn folio_batch_init() -> Self {
        Self {
            folios: Vec::with_capacity(PAGEVEC_SIZE),
        }
    }

    /// `folio_batch_count()`.
    pub fn folio_batch_count(&self) -> usize {
        self.folios.len()
    }

    /// `folio_batch_space()`: how many more folios fit.
    pub fn folio_batch_space(&self) -> usize {
        PAGEVEC_SIZE - self.folios.len()
    }

    /// `folio_batch_add()`: adds `folio` and returns the space left. The caller checked
    /// [`FolioBatch::folio_batch_space`] first, as `folio_end_dropbehind_irq()` does.
    pub fn folio_batch_add(&mut self, folio: T) -> usize {
        assert!(
            self.folios.len() < PAGEVEC_SIZE,
            "folio_batch_add() on a full batch"
        );
        self.folios.push(folio);
        self.folio_batch_space()
    }

    /// The work's `fbatch = batch->fbatch; folio_batch_reinit(&batch->fbatch);`: the folios, in
    /// the order they were added, leaving the batch empty.
    pub fn take(&mut self) -> Vec<T> {
        std::mem::replace(&mut self.folios, Vec::with_capacity(PAGEVEC_SIZE))
    }
}

/// `struct dropbehind_batch`: one CPU's batch and its work.
pub struct DropbehindBatch<T> {
    /// `local_lock_t lock_irq` with the `struct folio_batch fbatch` it protects.
    pub lock_irq: LocalLock<FolioBatch<T>>,
    /// `struct work_struct work`, running `dropbehind_work_fn()`.
    pub work: WorkStruct,
}

impl<T> fmt::Debug for DropbehindBatch<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DropbehindBatch")
            .field("work", &self.work)
            .finish_non_exhaustive()
    }
}

/// What v3's code did, counted (biosim's, not kernel state): the figures the gallery, the page
/// cache's statistics and docs/findings/15 read.
#[derive(Debug, Default)]
pub struct DropbehindV3Stats {
    /// Folios put on a batch by `folio_end_dropbehind_irq()`.
    pub added: AtomicU64,
    /// Folios `folio_end_dropbehind_irq()` left cached because the batch was full.
    pub skipped_full: AtomicU64,
    /// Folios `dropbehind_work_fn()` ended.
    pub ended_by_work: AtomicU64,
    /// Folios `dropbehind_drain_cpu()` ended.
    pub ended_by_dead_drain: AtomicU64,
    /// `dropbehind_work_fn()` runs.
    pub work_runs: AtomicU64,
    /// Runs of CPU n's work on another CPU (its pool disassociated): each drained the batch of the
    /// CPU it ran on, not CPU n's.
    pub work_runs_off_cpu: AtomicU64,
    /// `goto again` passes: the batch refilled while the work ended the previous one.
    pub again: AtomicU64,
}

/// A snapshot of [`DropbehindV3Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropbehindV3Counts {
    /// [`DropbehindV3Stats::added`].
    pub added: u64,
    /// [`DropbehindV3Stats::skipped_full`].
    pub skipped_full: u64,
    /// [`DropbehindV3Stats::ended_by_work`].
    pub ended_by_work: u64,
    /// [`DropbehindV3Stats::ended_by_dead_drain`].
    pub ended_by_dead_drain: u64,
    /// [`DropbehindV3Stats::work_runs`].
    pub work_runs: u64,
    /// [`DropbehindV3Stats::work_runs_off_cpu`].
    pub work_runs_off_cpu: u64,
    /// [`DropbehindV3Stats::again`].
    pub again: u64,
}

/// How [`DropbehindBatchV3::dropbehind_init`] makes a CPU's work item: `INIT_WORK()` with the
/// function to run (the caller may wrap it, as the module seam does for its bookkeeping).
pub type InitWork<'a> =
    dyn FnMut(CpuId, &'static str, Box<dyn Fn(&Cpu) + Send + Sync>) -> WorkStruct + 'a;

/// RFC v3's dropbehind batching: `DEFINE_PER_CPU(struct dropbehind_batch, dropbehind_batch)` and
/// the functions that use it, over items `T`.
pub struct DropbehindBatchV3<T> {
    batches: PerCpu<DropbehindBatch<T>>,
    /// `system_wq`: per-CPU, no `WQ_MEM_RECLAIM` (no rescuer).
    wq: Workqueue,
    stats: DropbehindV3Stats,
}

impl<T> fmt::Debug for DropbehindBatchV3<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DropbehindBatchV3")
            .field("wq", &self.wq)
            .finish_non_exhaustive()
    }
}

/// `system_wq` as `alloc_workqueue()` makes it at boot (kernel/workqueue.c,
/// `workqueue_init_early()`: `alloc_workqueue("events", WQ_PERCPU, 0)`).
pub fn alloc_system_wq(kernel: &Kernel) -> Result<Workqueue, WqError> {
    kernel.alloc_workqueue("events", WQ_PERCPU, 0)
}

impl<T: DropbehindFolio> DropbehindBatchV3<T> {
    /// `dropbehind_init()` (from `pagecache_init()`): for every possible CPU
    /// `folio_batch_init(&batch->fbatch)` and `INIT_WORK(&batch->work, dropbehind_work_fn)`
    /// through `init_work`; the work is queued on `system_wq`, `wq`.
    pub fn dropbehind_init(
        kernel: &Kernel,
        wq: Workqueue,
        init_work: &mut InitWork<'_>,
    ) -> UntrackedArc<Self> {
        // The work functions reach the batches through this, set once they exist (the C reaches
        // its per-CPU variable directly).
        let me: UntrackedArc<UntrackedOnceLock<UntrackedArc<Self>>> = UntrackedArc::default();
        let batches = PerCpu::new(kernel, |cpu| {
            let me = UntrackedArc::clone(&me);
            let f = move |cx: &Cpu| {
                if let Some(b) = me.get() {
                    b.dropbehind_work_fn(cpu, cx);
                }
            };
            DropbehindBatch {
                lock_irq: LocalLock::new(
                    cpu,
                    "dropbehind_batch.lock_irq",
                    FolioBatch::folio_batch_init(),
                ),
                work: init_work(cpu, "dropbehind_work_fn", Box::new(f)),
            }
        });
        let this = UntrackedArc::new(Self {
            batches,
            wq,
            stats: DropbehindV3Stats::default(),
        });
        let _ = me.set(UntrackedArc::clone(&this));
        this
    }

    /// `dropbehind_init()` on a bare kernel (the page cache's use, with no module seam): the
    /// work items from `Kernel::init_work()`, `system_wq` allocated here, and
    /// `page_alloc_cpu_dead()`'s call registered as the teardown of `CPUHP_PAGE_ALLOC`
    /// ([`DropbehindBatchV3::register_page_alloc_dead`]).
    pub fn dropbehind_init_on(kernel: &UntrackedArc<Kernel>) -> Result<UntrackedArc<Self>, String> {
        let wq = alloc_system_wq(kernel).map_err(|e| format!("system_wq: {e}"))?;
        let k = UntrackedArc::clone(kernel);
        let this = Self::dropbehind_init(kernel, wq, &mut |_cpu, name, f| {
            k.init_work(name, move |cx, _w| f(cx))
        });
        this.register_page_alloc_dead(kernel)
            .map_err(|e| format!("{}: {e}", CPUHP_PAGE_ALLOC_NAME))?;
        Ok(this)
    }

    /// Registers `page_alloc_cpu_dead()`'s drain as the teardown of the fixed state
    /// `CPUHP_PAGE_ALLOC` (`cpuhp_setup_state_nocalls()`; the kernel's `page_alloc_init_cpuhp()`
    /// registers the state with the drain inside its dead callback). A fixed state takes one
    /// registration: a second is `-EBUSY`.
    pub fn register_page_alloc_dead(
        self: &UntrackedArc<Self>,
        kernel: &Kernel,
    ) -> Result<StateId, HotplugError> {
        let me = UntrackedArc::clone(self);
        let teardown: hotplug::Callback<Cpu> =
            UntrackedArc::new(move |cx: &Cpu, inv: &Invocation| {
                me.page_alloc_cpu_dead(cx, inv.cpu)
            });
        let mut hp = kernel.hotplug();
        let got = hp.cpuhp_setup_state_nocalls(
            CPUHP_PAGE_ALLOC,
            CPUHP_PAGE_ALLOC_NAME,
            None,
            Some(teardown),
        )?;
        hp.set_callback_fns(got, None, Some("page_alloc_cpu_dead"))?;
        Ok(got)
    }

    /// `page_alloc_cpu_dead(cpu)`'s part that v3 adds: `dropbehind_drain_cpu(cpu)` (after
    /// `lru_add_drain_cpu()`, which biosim does not model).
    pub fn page_alloc_cpu_dead(&self, cx: &Cpu, cpu: CpuId) -> Result<(), Errno> {
        self.dropbehind_drain_cpu(cpu, cx);
        Ok(())
    }

    /// `folio_end_dropbehind_irq(folio)`: from `folio_end_writeback()` outside task context.
    /// Under `local_lock_irqsave()` on this CPU's batch: a full batch skips the invalidation
    /// ([`DropbehindFolio::skip`] after the unlock); otherwise the folio is added and the work
    /// scheduled on this CPU, `schedule_work_on(smp_processor_id(), &batch->work)`. Returns
    /// whether the folio was batched.
    pub fn folio_end_dropbehind_irq(&self, folio: T, cx: &Cpu) -> bool {
        let batch = this_cpu_ptr(&self.batches, cx);
        let guard = batch.lock_irq.local_lock_irqsave(cx);
        let full = guard.with(|b| b.folio_batch_space() == 0);
        if full {
            drop(guard);
            self.stats.skipped_full.fetch_add(1, Relaxed);
            crate::ktrace!(cx, target: "filemap", "biosim_dropbehind_batch_full", "folio_end_dropbehind_irq: CPU{}'s batch is full ({PAGEVEC_SIZE}): invalidation skipped, the folio stays cached", cx.id().0);
            folio.skip(cx);
            return false;
        }
        // folio_get(): the item carries the reference it takes.
        guard.with(|b| b.folio_batch_add(folio));
        drop(guard);
        self.stats.added.fetch_add(1, Relaxed);
        // schedule_work_on(smp_processor_id(), ...): queue_work_on(cpu, system_wq, work).
        kapi::queue_work_on(cx.id(), &self.wq, batch.work, cx);
        true
    }

    /// `dropbehind_work_fn()` of the work item of `work_cpu`, running on `cx`: takes
    /// `this_cpu_ptr(&dropbehind_batch)` -- the batch of the CPU it *runs on* -- under
    /// `local_lock_irq()`, ends every folio with the lock released, and goes `again` while the
    /// batch refilled meanwhile.
    pub fn dropbehind_work_fn(&self, work_cpu: CpuId, cx: &Cpu) {
        self.stats.work_runs.fetch_add(1, Relaxed);
        if work_cpu != cx.id() {
            self.stats.work_runs_off_cpu.fetch_add(1, Relaxed);
            crate::ktrace!(cx, target: "filemap", "biosim_dropbehind_work_off_cpu", "dropbehind_work_fn: CPU{}'s work runs on CPU{} (pool disassociated) and drains CPU{}'s batch", work_cpu.0, cx.id().0, cx.id().0);
        }
        loop {
            // again:
            let batch = this_cpu_ptr(&self.batches, cx);
            let fbatch = {
                let guard = batch.lock_irq.local_lock_irq(cx);
                guard.with(FolioBatch::take)
            };
            for folio in fbatch {
                folio.end(cx);
                self.stats.ended_by_work.fetch_add(1, Relaxed);
            }
            let refilled = {
                let guard = batch.lock_irq.local_lock_irq(cx);
                guard.with(|b| b.folio_batch_count())
            };
            if refilled == 0 {
                break;
            }
            self.stats.again.fetch_add(1, Relaxed);
        }
    }

    /// `dropbehind_drain_cpu(cpu)`: the dead CPU's batch, without the lock ("the CPU is already
    /// dead"), every folio ended on the control CPU `cx`, and the batch reinitialised.
    pub fn dropbehind_drain_cpu(&self, cpu: CpuId, cx: &Cpu) {
        let fbatch = per_cpu_ptr(&self.batches, cpu)
            .lock_irq
            .with_dead(cx, FolioBatch::take);
        let n = fbatch.len();
        crate::ktrace!(cx, target: "filemap", "biosim_dropbehind_drain_cpu", "dropbehind_drain_cpu: {n} folios of dead CPU{}", cpu.0);
        for folio in fbatch {
            folio.end(cx);
            self.stats.ended_by_dead_drain.fetch_add(1, Relaxed);
        }
    }

    /// How many folios wait on `cpu`'s batch (between steps, for the oracle and tests).
    pub fn pending(&self, cpu: CpuId) -> usize {
        per_cpu_ptr(&self.batches, cpu)
            .lock_irq
            .peek(FolioBatch::folio_batch_count)
    }

    /// `cpu`'s batch (its work item, for tests).
    pub fn batch(&self, cpu: CpuId) -> &DropbehindBatch<T> {
        per_cpu_ptr(&self.batches, cpu)
    }

    /// `system_wq`.
    pub fn workqueue(&self) -> &Workqueue {
        &self.wq
    }

    /// The counters so far.
    pub fn counts(&self) -> DropbehindV3Counts {
        let s = &self.stats;
        DropbehindV3Counts {
            added: s.added.load(Relaxed),
            skipped_full: s.skipped_full.load(Relaxed),
            ended_by_work: s.ended_by_work.load(Relaxed),
            ended_by_dead_drain: s.ended_by_dead_drain.load(Relaxed),
            work_runs: s.work_runs.load(Relaxed),
            work_runs_off_cpu: s.work_runs_off_cpu.load(Relaxed),
            again: s.again.load(Relaxed),
        }
    }
}

/// `CPUHP_PAGE_ALLOC`'s name in the 6.18 table.
pub const CPUHP_PAGE_ALLOC_NAME: &str = "mm/page_alloc:pcp";

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::KernelConfig;
    use std::sync::{Arc, Mutex};

    /// What happened to an item: its id, `end` or `skip`, the CPU, whether it could sleep.
    type Event = (u32, &'static str, CpuId, bool);

    /// A folio standing in for the page cache's: records where it was ended or skipped.
    #[derive(Debug)]
    struct Item {
        id: u32,
        log: Arc<Mutex<Vec<Event>>>,
    }

    impl DropbehindFolio for Item {
        fn end(self, cx: &Cpu) {
            self.log
                .lock()
                .unwrap()
                .push((self.id, "end", cx.id(), cx.may_sleep()));
        }
        fn skip(self, cx: &Cpu) {
            self.log
                .lock()
                .unwrap()
                .push((self.id, "skip", cx.id(), cx.may_sleep()));
        }
    }

    fn setup(n: u32) -> (UntrackedArc<Kernel>, UntrackedArc<DropbehindBatchV3<Item>>) {
        let k = Kernel::new(KernelConfig::default(), n).unwrap();
        let b = DropbehindBatchV3::dropbehind_init_on(&k).unwrap();
        (k, b)
    }

    #[test]
    fn the_batch_holds_pagevec_size_and_reinit_empties_it() {
        let mut b = FolioBatch::folio_batch_init();
        for i in 0..PAGEVEC_SIZE {
            assert_eq!(b.folio_batch_add(i), PAGEVEC_SIZE - i - 1);
        }
        assert_eq!(b.folio_batch_space(), 0);
        assert_eq!(b.take(), (0..PAGEVEC_SIZE).collect::<Vec<_>>());
        assert_eq!(b.folio_batch_count(), 0);
    }

    /// 33 completions in hardirq on CPU1 before its work runs: 31 are batched, 2 skipped in the
    /// interrupt (left cached); the work ends the 31 in task context on CPU1.
    #[test]
    fn a_burst_past_pagevec_size_skips_the_invalidation_and_the_work_ends_the_rest() {
        let (k, b) = setup(2);
        let log = Arc::new(Mutex::new(Vec::new()));
        let cx1 = k.cpu(CpuId(1)).unwrap();
        for id in 0..33 {
            let item = Item {
                id,
                log: Arc::clone(&log),
            };
            cx1.with_hardirq(|cx| b.folio_end_dropbehind_irq(item, cx));
        }
        assert_eq!(b.pending(CpuId(1)), PAGEVEC_SIZE);
        assert!(k.work_pending(b.batch(CpuId(1)).work));
        let skipped: Vec<_> = log.lock().unwrap().clone();
        assert_eq!(
            skipped,
            vec![(31, "skip", CpuId(1), false), (32, "skip", CpuId(1), false)]
        );
        b.dropbehind_work_fn(CpuId(1), &cx1);
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 33);
        assert!(log[2..]
            .iter()
            .enumerate()
            .all(|(i, e)| *e == (i as u32, "end", CpuId(1), true)));
        assert_eq!(b.pending(CpuId(1)), 0);
        let c = b.counts();
        assert_eq!((c.added, c.skipped_full, c.ended_by_work), (31, 2, 31));
        assert!(k.reports().all().is_empty(), "{:?}", k.reports().all());
    }

    /// CPU1's work run on CPU0 (its pool disassociated) drains CPU0's batch, not CPU1's: CPU1's
    /// folio waits for the dead drain, which `page_alloc_cpu_dead()` runs on the control CPU.
    #[test]
    fn an_off_cpu_run_drains_its_own_cpu_and_the_dead_drain_gets_the_rest() {
        let (k, b) = setup(2);
        let log = Arc::new(Mutex::new(Vec::new()));
        let (cx0, cx1) = (k.cpu(CpuId(0)).unwrap(), k.cpu(CpuId(1)).unwrap());
        let item = |id| Item {
            id,
            log: Arc::clone(&log),
        };
        cx1.with_hardirq(|cx| b.folio_end_dropbehind_irq(item(1), cx));
        cx0.with_hardirq(|cx| b.folio_end_dropbehind_irq(item(0), cx));
        b.dropbehind_work_fn(CpuId(1), &cx0);
        assert_eq!(*log.lock().unwrap(), vec![(0, "end", CpuId(0), true)]);
        assert_eq!(b.pending(CpuId(1)), 1);
        assert_eq!(b.counts().work_runs_off_cpu, 1);
        // The registered teardown of CPUHP_PAGE_ALLOC is the drain.
        let info = k.hotplug().step_info(CPUHP_PAGE_ALLOC).unwrap();
        assert!(info.has_teardown && !info.has_startup);
        assert_eq!(info.teardown_fn.as_deref(), Some("page_alloc_cpu_dead"));
        k.cpu_hotplug_to(CpuId(1), hotplug::CPUHP_OFFLINE, false)
            .unwrap();
        assert_eq!(b.pending(CpuId(1)), 0);
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 2);
        assert_eq!((log[1].0, log[1].1, log[1].3), (1, "end", true));
        assert_ne!(log[1].2, CpuId(1), "the dead drain runs on a control CPU");
        assert_eq!(b.counts().ended_by_dead_drain, 1);
    }

    /// A second registration of the fixed state is refused (`-EBUSY` in the kernel).
    #[test]
    fn the_fixed_state_takes_one_registration() {
        let (k, b) = setup(2);
        assert!(b.register_page_alloc_dead(&k).is_err());
    }
}
