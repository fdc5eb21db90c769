//! RFC v3 of the DONTCACHE series (mm/filemap.c, "[PATCH RFC v3 1/2] filemap: defer dropbehind
//! invalidation from IRQ context") as a module on the task-completion seam, so that the finding
//! gallery, the proptest hotplug machine and the loom models check its hotplug protocol as they
//! check the bio-level versions'.
//!
//! v3 defers folios, not bios: `folio_end_writeback()` outside task context puts a dropbehind
//! folio on a per-CPU batch ([`crate::mm::dropbehind_v3`]). On the seam a bio flagged
//! `BIO_COMPLETE_IN_TASK` stands for its dropbehind folio, and its `bi_end_io` for the folio's
//! invalidation (`filemap_end_dropbehind()`), the work that must run in task context:
//!
//! - `__bio_complete_in_task(bio)` is `folio_end_writeback()`'s choice: in task context (`in_task()`,
//!   v3's test, which a preempt-disabled task passes) the invalidation runs here; otherwise
//!   `folio_end_dropbehind_irq()`, the same generic batch the page cache uses, with the bio as the
//!   item. A **full batch** (`PAGEVEC_SIZE` = 31) skips the invalidation: on the seam the bio is
//!   ended at once, in the interrupt, so the oracle sees a flagged bio completed in atomic context
//!   -- what stands for "the folio stays cached" (finding 15).
//! - The work (`dropbehind_work_fn()` on `system_wq`) ends the bios of the batch of the CPU it
//!   runs on, in task context, and goes `again` while the batch refilled.
//! - No online/down_prep callbacks: the work is never disabled. The only hotplug callback is
//!   `dropbehind_drain_cpu()` from `page_alloc_cpu_dead()`, teardown of the fixed state
//!   `CPUHP_PAGE_ALLOC` (registered through [`ModuleInit::cpuhp_setup_state_nocalls`], which
//!   takes a fixed state as well as a dynamic one).
//! - A bio without `bi_end_io` has no folio: v3's batching sits inside a `bi_end_io`
//!   (`folio_end_writeback()` is called from one), so such a bio never reaches it and completes as
//!   `bio_endio()` completes it (finding 3 does not apply to v3's code path: clean).
//! - No dynamic helper (`bio_complete_in_task()` is the bio series'), and the submitters flag only
//!   dropbehind writes (reads drop their folios in the reader, `filemap_end_dropbehind_read()`).

use super::module::{bi_end_io, BioCompleteModule, BioCompleteOps, CpuhpCallback, ModuleInit};
use super::{InitError, WorkKind};
use crate::block::bio::end_io;
use crate::block::Bio;
use crate::kernel::{Cpu, CpuId};
use crate::mm::dropbehind_v3::{
    alloc_system_wq, DropbehindBatchV3, DropbehindFolio, CPUHP_PAGE_ALLOC_NAME,
};
use crate::sync::UntrackedArc;
use hotplug::CPUHP_PAGE_ALLOC;

/// A flagged bio standing for its dropbehind folio in v3's batch.
#[derive(Debug)]
pub struct BioFolio(pub Box<Bio>);

impl DropbehindFolio for BioFolio {
    /// The folio's invalidation in task context: the bio's `bi_end_io`.
    fn end(self, cx: &Cpu) {
        bi_end_io(self.0, cx);
    }

    /// The batch was full: v3 skips the invalidation. The bio's completion cannot be skipped, so
    /// it runs here, in the interrupt: the flagged bio completed in atomic context is the folio
    /// left cached.
    fn skip(self, cx: &Cpu) {
        end_io(self.0, cx);
    }
}

/// The running module: v3's batch over bios.
#[derive(Debug)]
pub struct V3Running {
    batch: UntrackedArc<DropbehindBatchV3<BioFolio>>,
}

impl V3Running {
    /// The batch (its counters, for figures and tests).
    pub fn batch(&self) -> &DropbehindBatchV3<BioFolio> {
        &self.batch
    }
}

impl BioCompleteOps for V3Running {
    /// `folio_end_writeback()`'s tail in v3: `if (in_task()) folio_end_dropbehind(folio); else
    /// folio_end_dropbehind_irq(folio);` (a bio without `bi_end_io` never gets here in the kernel:
    /// see the module docs).
    fn __bio_complete_in_task(&self, bio: Box<Bio>, cx: &Cpu) {
        if bio.bi_end_io.is_none() || cx.in_task() {
            end_io(bio, cx);
            return;
        }
        self.batch.folio_end_dropbehind_irq(BioFolio(bio), cx);
    }

    fn pending(&self, cpu: CpuId) -> usize {
        self.batch.pending(cpu)
    }
}

/// The module: RFC v3's dropbehind batching.
#[derive(Debug, Clone, Copy)]
pub struct V3Module;

/// The one instance [`super::Variant::V3`] names.
pub static V3_MODULE: V3Module = V3Module;

impl BioCompleteModule for V3Module {
    fn name(&self) -> &'static str {
        "v3"
    }

    fn summary(&self) -> &'static str {
        "RFC v3 (mm/filemap.c): per-CPU folio_batch under local_lock, drained by per-CPU work on system_wq, a full batch skips the invalidation, drained at page_alloc_cpu_dead"
    }

    /// Plain `struct work_struct`, `schedule_work_on()`.
    fn work(&self) -> WorkKind {
        WorkKind::Plain
    }

    /// `dropbehind_init()` from `pagecache_init()`, and `page_alloc_cpu_dead()`'s call of
    /// `dropbehind_drain_cpu()` at `CPUHP_PAGE_ALLOC`.
    fn init(&self, m: &ModuleInit<'_>) -> Result<Box<dyn BioCompleteOps>, InitError> {
        let wq = alloc_system_wq(m.kernel())?;
        let batch = DropbehindBatchV3::dropbehind_init(m.kernel(), wq, &mut |cpu, name, f| {
            m.init_work_running_cpu(cpu, name, move |cx| f(cx))
        });
        let b = UntrackedArc::clone(&batch);
        m.cpuhp_setup_state_nocalls(
            CPUHP_PAGE_ALLOC,
            CPUHP_PAGE_ALLOC_NAME,
            None,
            Some(CpuhpCallback::new("page_alloc_cpu_dead", move |cx, cpu| {
                b.page_alloc_cpu_dead(cx, cpu)
            })),
        )?;
        Ok(Box::new(V3Running { batch }))
    }
}
