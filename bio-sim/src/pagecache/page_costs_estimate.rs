//! The per-page CPU costs the simulated page cache is priced with, in the shape of
//! `bio_sim::perf::dontcache_costs::PageCosts` (the calibrated costs measured on this machine):
//! this file is the driver's own copy of that struct, with [`PageCosts::ESTIMATED`], until the
//! calibrated one is merged, and is then replaced by a re-export of it.
//!
//! bio-core's `mm` counts work (pages copied, folios added, scanned, evicted, invalidated, written
//! back); bio-sim prices it here. Nothing in bio-core knows about time.

/// What one unit of page-cache work costs the CPU that does it, in nanoseconds (4 KiB pages).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageCosts {
    /// `copy_page_to_iter()` / `copy_folio_from_iter_atomic()`: one page between the user buffer
    /// and a folio.
    pub copy_ns: f64,
    /// `filemap_alloc_folio()` + `filemap_add_folio()`: allocate, charge the memcg, insert into
    /// the mapping's xarray and the LRU (`folio_add_lru()`).
    pub alloc_add_ns: f64,
    /// `shrink_folio_list()` → `__remove_mapping()`: evicting one clean folio reclaim isolated.
    pub reclaim_evict_ns: f64,
    /// `isolate_lru_folios()` + `folio_referenced()`/`folio_check_references()`: one folio scanned
    /// from the inactive tail, whether or not it is then evicted.
    pub reclaim_scan_ns: f64,
    /// `filemap_end_dropbehind()` → `folio_unmap_invalidate()`: one folio removed by the
    /// DONTCACHE path (no LRU scan: the folio is named).
    pub invalidate_ns: f64,
    /// `folio_start_writeback()` + adding the folio to a bio (`iomap_add_to_ioend()` /
    /// `submit_bh_wbc()`), per page written back.
    pub writeback_submit_ns: f64,
    /// One hard interrupt: entry, the driver's completion handler, exit (per IRQ, not per page).
    pub irq_ns: f64,
    /// Handing a completion to task context: queueing the work, waking the kworker, switching to
    /// it (per work-function run).
    pub work_handoff_ns: f64,
    /// Where the numbers come from.
    pub source: &'static str,
}

impl PageCosts {
    /// Estimates until calibrated: typical per-page kernel costs on a ~3 GHz x86 core, from the
    /// order of magnitude `perf` profiles of buffered I/O show (a 4 KiB copy at ~16 GB/s is
    /// ~250 ns; reclaim's isolate + referenced check + `__remove_mapping()` is several times an
    /// invalidation of a named folio). Replaced by the calibrated `PageCosts::MEASURED` once it
    /// is merged.
    pub const ESTIMATED: PageCosts = PageCosts {
        copy_ns: 250.0,
        alloc_add_ns: 400.0,
        reclaim_evict_ns: 600.0,
        reclaim_scan_ns: 350.0,
        invalidate_ns: 450.0,
        writeback_submit_ns: 300.0,
        irq_ns: 2_000.0,
        work_handoff_ns: 3_000.0,
        source: "estimates until calibrated (bio-sim/src/pagecache/page_costs_estimate.rs)",
    };

    /// The costs as `name=value ns` lines, for the bench's output.
    pub fn lines(&self) -> Vec<String> {
        vec![
            format!("copy               {:>8.0} ns/page", self.copy_ns),
            format!("alloc+add          {:>8.0} ns/page", self.alloc_add_ns),
            format!("reclaim scan       {:>8.0} ns/page", self.reclaim_scan_ns),
            format!("reclaim evict      {:>8.0} ns/page", self.reclaim_evict_ns),
            format!("invalidate         {:>8.0} ns/page", self.invalidate_ns),
            format!(
                "writeback submit   {:>8.0} ns/page",
                self.writeback_submit_ns
            ),
            format!("irq                {:>8.0} ns/irq", self.irq_ns),
            format!("work handoff       {:>8.0} ns/run", self.work_handoff_ns),
            format!("source: {}", self.source),
        ]
    }
}
