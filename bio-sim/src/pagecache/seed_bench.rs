//! `biosim bench dontcache --preset seed-reads|seed-writes`: the seed's experiment on every
//! design and path in the simulation, printed as the cover letter's tables, then what the tables
//! do not show: the page-cache footprint, the folios DONTCACHE left behind, the deferred
//! completions (and the regular ones merged with them), the reclaim work, and the per-page costs
//! that priced it all.

use super::driver::{run, DriverConfig, DriverError, RunResult};
use super::dropbehind_oracle::{check_dropbehind, data_integrity, verdict_lines, Verdict};
use super::nvme_device::{Completion, CompletionIrq, NvmeModel};
use super::seed_machine::SeedMachine;
use super::seed_presets::{SeedPreset, Workload};
use super::seed_table::{average_mb, ratio, seed_table};
use crate::perf::dontcache_costs::PageCosts;
use bio_core::mm::dontcache::{DontcacheDesign, WritebackPath};
use bio_core::mm::filemap::PageCacheStats;
use std::fmt::Write as _;

/// The bench's parameters.
#[derive(Debug, Clone)]
pub struct SeedBenchConfig {
    /// The experiment.
    pub preset: SeedPreset,
    /// The designs, in order.
    pub designs: Vec<DontcacheDesign>,
    /// The paths, in order.
    pub paths: Vec<WritebackPath>,
    /// Simulated seconds per run.
    pub seconds: u64,
    /// The cache limit in bytes.
    pub limit_bytes: u64,
    /// The per-page costs.
    pub costs: PageCosts,
    /// The memcg on cgroup v2, a dirty domain of its own (`--cgroup v2`); cgroup v1 otherwise.
    pub cgroup_v2: bool,
    /// The simulated kernel's `CONFIG_HZ` (`--hz`).
    pub hz: u32,
    /// A VM guest with free page reporting at this order (`--page-reporting`).
    pub page_reporting_order: Option<u32>,
    /// The device (`--device`): [`NvmeModel::DEFAULT`], or the same speed completing as
    /// [`Completion::WhenQueueEmpty`].
    pub device: NvmeModel,
    /// The machine that set the device, memory and kernel (`--machine`), if one did.
    pub machine: Option<SeedMachine>,
}

impl SeedBenchConfig {
    /// `preset` on every design and both paths, with its own limit and length.
    pub fn new(preset: SeedPreset) -> Self {
        Self {
            preset,
            designs: all_designs(),
            paths: vec![WritebackPath::Iomap, WritebackPath::BufferHead],
            seconds: preset.seconds,
            limit_bytes: preset.limit_bytes,
            costs: PageCosts::MEASURED,
            cgroup_v2: false,
            hz: bio_core::KernelConfig::default().hz,
            page_reporting_order: None,
            device: NvmeModel::DEFAULT,
            machine: None,
        }
    }
}

/// The report's lines for what differs from the default machine: the machine `--machine` named,
/// the memcg on cgroup v2, a `CONFIG_HZ` other than 250, free page reporting, the virtio-blk
/// device (none on the default run, whose output the docs quote).
pub(super) fn kernel_config_lines(cfg: &SeedBenchConfig, out: &mut String) {
    if let Some(m) = &cfg.machine {
        let _ = writeln!(out, "machine {}: {}", m.name, m.description);
    }
    if cfg.cgroup_v2 {
        let _ = writeln!(
            out,
            "memcg on cgroup v2: a dirty domain of its own (20% / 10% of its available memory)"
        );
    }
    if cfg.hz != bio_core::KernelConfig::default().hz {
        let _ = writeln!(out, "CONFIG_HZ={}", cfg.hz);
    }
    if let Some(order) = cfg.page_reporting_order {
        let _ = writeln!(
            out,
            "free page reporting (a VM guest, page_reporting_order {order}): the limit's {} start \
             reported to the host; a page allocated from reported memory costs reported_touch_ns",
            mib(cfg.limit_bytes)
        );
    }
    if cfg.device.completion == Completion::WhenQueueEmpty {
        let _ = writeln!(
            out,
            "device: virtio-blk (Firecracker's Sync engine): a busy period's requests complete \
             together, with one interrupt, when its queue is empty{}",
            match cfg.device.irq {
                CompletionIrq::OneVector(cpu) => format!(
                    "; the interrupt ({}) on CPU{}, the requests ended in BLOCK_SOFTIRQ there \
                     (--irq-cpu)",
                    cfg.device.irq.name(),
                    cpu.0
                ),
                CompletionIrq::SubmittingCpu => String::new(),
            }
        );
    }
    if cfg.device.bandwidth != NvmeModel::DEFAULT.bandwidth {
        let _ = writeln!(
            out,
            "device bandwidth: {} GB/s (--device-gbps; the default is {} GB/s)",
            gbps_text(cfg.device.bandwidth),
            gbps_text(NvmeModel::DEFAULT.bandwidth)
        );
    }
}

/// Bytes per second as GB/s with at most three decimals (`5.7`, `0.05`, `20`).
fn gbps_text(bandwidth: f64) -> String {
    let t = format!("{:.3}", bandwidth / 1e9);
    t.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The name the CLI and the tables use for `d` ([`DontcacheDesign::name`]).
pub fn design_name(d: &DontcacheDesign) -> String {
    d.name().to_owned()
}

/// Every design: baseline, xfs-wq, v3, then the bio-level versions (posted and registered
/// modules).
pub fn all_designs() -> Vec<DontcacheDesign> {
    DontcacheDesign::all()
}

/// `--design NAME[,NAME...]|all`: the designs in the order given, each once.
pub fn parse_designs(name: &str) -> Result<Vec<DontcacheDesign>, String> {
    if name == "all" {
        return Ok(all_designs());
    }
    let mut out = Vec::new();
    for one in name.split(',') {
        let d = DontcacheDesign::parse(one).map_err(|e| {
            if one == "all" {
                format!("'all' cannot be part of a list ('{name}')")
            } else {
                format!("{e}, or all")
            }
        })?;
        if out.contains(&d) {
            return Err(format!("'{one}' is named twice in '{name}'"));
        }
        out.push(d);
    }
    Ok(out)
}

/// The name of a path.
pub fn path_name(p: WritebackPath) -> &'static str {
    match p {
        WritebackPath::Iomap => "iomap",
        WritebackPath::BufferHead => "buffer-head",
    }
}

/// `--path iomap|buffer-head|both`.
pub fn parse_paths(name: &str) -> Result<Vec<WritebackPath>, String> {
    match name {
        "iomap" => Ok(vec![WritebackPath::Iomap]),
        "buffer-head" => Ok(vec![WritebackPath::BufferHead]),
        "both" => Ok(vec![WritebackPath::Iomap, WritebackPath::BufferHead]),
        _ => Err(format!(
            "unknown path '{name}' (known: iomap, buffer-head, both)"
        )),
    }
}

/// One design x path: the normal run, the DONTCACHE run, and (baseline) the refusal.
#[derive(Debug, Clone)]
pub struct DesignRow {
    /// The design.
    pub design: DontcacheDesign,
    /// The path.
    pub path: WritebackPath,
    /// Without `RWF_DONTCACHE`.
    pub normal: RunResult,
    /// With it (forced on a design that refuses it).
    pub dontcache: RunResult,
    /// The error the unforced DONTCACHE syscall got, if the bdev refused it.
    pub refused: Option<bio_core::errno::Errno>,
}

impl DesignRow {
    /// Average MB/s (normal, dontcache).
    pub fn averages(&self) -> (f64, f64) {
        (
            average_mb(&self.normal.per_second),
            average_mb(&self.dontcache.per_second),
        )
    }

    /// dontcache / normal.
    pub fn ratio(&self) -> Option<f64> {
        let (a, b) = self.averages();
        ratio(a, b)
    }

    /// The DONTCACHE run's peak footprint as a fraction of the limit.
    pub fn dontcache_footprint(&self) -> f64 {
        match self.dontcache.limit_pages {
            Some(l) if l > 0 => self.dontcache.peak_cached as f64 / l as f64,
            _ => 0.0,
        }
    }
}

/// The bench's results.
#[derive(Debug, Clone)]
pub struct SeedBenchReport {
    /// The configuration.
    pub config: SeedBenchConfig,
    /// One per design x path.
    pub rows: Vec<DesignRow>,
}

impl SeedBenchReport {
    /// The oracle's verdicts on `row`: on writes, what the DONTCACHE run left and where its
    /// folios ended ([`check_dropbehind`]: the fixed designs leave nothing and end nothing in
    /// atomic context, `baseline` leaves its IRQ-completed folios, v3 what its batch skipped);
    /// on reads, that every byte each run read was what the device holds (the driver compares
    /// each read; a write run does not read back, its integrity is `integrity_run`'s, tested).
    pub fn verdicts(&self, row: &DesignRow) -> Vec<(&'static str, Verdict)> {
        match self.config.preset.workload {
            Workload::Writes => check_dropbehind(&row.design, row.path, &row.dontcache),
            Workload::Reads => vec![(
                "every byte read is the device's",
                data_integrity(&row.normal).and_then(|()| data_integrity(&row.dontcache)),
            )],
        }
    }

    /// Whether every verdict on every row passed.
    pub fn oracle_ok(&self) -> bool {
        self.rows
            .iter()
            .all(|r| self.verdicts(r).iter().all(|(_, v)| v.is_ok()))
    }
}

pub(super) fn driver_config(
    cfg: &SeedBenchConfig,
    d: DontcacheDesign,
    p: WritebackPath,
) -> DriverConfig {
    let mut c = DriverConfig::new(d, p, cfg.preset.workload);
    c.limit_bytes = Some(cfg.limit_bytes);
    c.range_bytes = cfg.limit_bytes * cfg.preset.range_limits;
    c.io_bytes = cfg.preset.io_bytes;
    c.duration_ns = cfg.seconds * 1_000_000_000;
    c.costs = cfg.costs.clone();
    c.cgroup_v2 = cfg.cgroup_v2;
    c.hz = cfg.hz;
    c.page_reporting_order = cfg.page_reporting_order;
    c.device = cfg.device;
    c
}

/// A bound on the memory one discrete-event bench row of `cfg` can hold, in bytes: 2.25 times
/// the bytes it can have cached and 3 times the bytes of its range it can write.
/// The factors are fitted to measured peaks (`/usr/bin/time -f %M`, GB = 10^9 bytes), with a
/// margin, not derived: `seed-reads` on `fc-guest` for 14 s peaked at 12.1 GB with 6.1 GB cached
/// (2.0 times); `seed-writes --machine fc-guest --limit 244M` at 3.1 GB, with a 244 MiB cache
/// and its 976 MiB range written (1 s on v7, and 10 s over every design alike). No run caches faster than its task copies and adds pages (`copy_ns +
/// alloc_add_ns` a page on one CPU, and `reported_touch_ns` on a guest with page reporting,
/// whose first fill of the limit takes every page from the host), so a short run of a large
/// limit needs far less than the limit: one second of `seed-reads` on `fc-guest` can cache about
/// 0.5 GB of its 24105 MiB.
pub fn deterministic_memory_need(cfg: &SeedBenchConfig) -> u64 {
    let (cached, written) = cached_and_written_at_most(cfg);
    (cached.saturating_mul(9) / 4).saturating_add(written.saturating_mul(3))
}

/// The bytes a run of `cfg` can have cached at once, and write to the device, at most
/// ([`deterministic_memory_need`]).
fn cached_and_written_at_most(cfg: &SeedBenchConfig) -> (u64, u64) {
    let page = bio_core::mm::filemap::PAGE_SIZE as f64;
    let ns = cfg.seconds as f64 * 1e9;
    let (copy_add, touch) = (
        cfg.costs.copy_ns + cfg.costs.alloc_add_ns,
        cfg.page_reporting_order
            .map_or(0.0, |_| cfg.costs.reported_touch_ns),
    );
    let moved = |per_page_ns: f64| (ns / per_page_ns.max(1.0) * page).min(u64::MAX as f64) as u64;
    let cached = cfg.limit_bytes.min(moved(copy_add + touch));
    let written = match cfg.preset.workload {
        Workload::Writes => cfg
            .limit_bytes
            .saturating_mul(cfg.preset.range_limits)
            .min(moved(copy_add)),
        Workload::Reads => 0,
    };
    (cached, written)
}

/// Refuses a run that could hold more than the host's `MemAvailable` (`None`: unknown, nothing
/// refused): it would make the machine swap or the OOM killer pick a process, perhaps another's.
pub fn check_deterministic_size_on(
    cfg: &SeedBenchConfig,
    mem_available: Option<u64>,
) -> Result<(), String> {
    let need = deterministic_memory_need(cfg);
    let (cached, written) = cached_and_written_at_most(cfg);
    match mem_available {
        Some(avail) if need > avail => Err(format!(
            "{} with a cache limit of {} for {} s could cache up to {}{}, and the simulation \
             keeps the bytes: up to {} of host memory, more than the host's MemAvailable of {}; \
             lower --seconds or --limit",
            cfg.preset.name,
            mib(cfg.limit_bytes),
            cfg.seconds,
            mib(cached),
            if written > 0 {
                format!(" and write {} of its range", mib(written))
            } else {
                String::new()
            },
            mib(need),
            mib(avail)
        )),
        _ => Ok(()),
    }
}

/// Runs the bench.
pub fn seed_bench(cfg: &SeedBenchConfig) -> Result<SeedBenchReport, DriverError> {
    if cfg.preset == super::seed_presets::NOMERGE {
        return Err(DriverError::Config(
            "the nomerge preset prints its own table (super::nomerge_bench)".to_owned(),
        ));
    }
    check_deterministic_size_on(cfg, super::threaded_seed_bench::host_mem_available())
        .map_err(DriverError::Config)?;
    let mut rows = Vec::new();
    for &design in &cfg.designs {
        for &path in &cfg.paths {
            let base = driver_config(cfg, design, path);
            let normal = run(base.clone())?;
            let mut dc = base.clone();
            dc.dontcache = true;
            let mut dontcache = run(dc.clone())?;
            let refused = dontcache.refused;
            if refused.is_some() {
                dc.force_dontcache = true;
                dontcache = run(dc)?;
            }
            rows.push(DesignRow {
                design,
                path,
                normal,
                dontcache,
                refused,
            });
        }
    }
    Ok(SeedBenchReport {
        config: cfg.clone(),
        rows,
    })
}

pub(super) fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

impl std::fmt::Display for SeedBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cfg = &self.config;
        let p = &cfg.preset;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}: {} over {} with a cache limit of {}, {} simulated s per run, \
             normal vs RWF_DONTCACHE (simulation: deterministic runtime, {} device)",
            p.name,
            syscall_name(p),
            mib(cfg.limit_bytes * p.range_limits),
            mib(cfg.limit_bytes),
            cfg.seconds,
            match cfg.device.completion {
                Completion::PerRequest => "NVMe-like",
                Completion::WhenQueueEmpty => "virtio-blk",
            }
        );
        kernel_config_lines(cfg, &mut out);
        let _ = writeln!(out, "per-page costs:");
        for (name, ns) in cfg.costs.fields() {
            let _ = writeln!(out, "  {name:<20} {ns:>7.0} ns");
        }
        let _ = writeln!(out, "  source: {}", cfg.costs.source);
        for r in &self.rows {
            let _ = writeln!(out);
            out.push_str(&row_text(p, r, ""));
            verdict_lines(&self.verdicts(r), &mut out);
        }
        let _ = writeln!(out);
        out.push_str(&summary_text(&self.rows));
        f.write_str(&out)
    }
}

/// `1 MiB pwritev2` / `1 MiB preadv2`: what the preset's task calls.
pub(super) fn syscall_name(p: &SeedPreset) -> &'static str {
    match p.workload {
        Workload::Reads => "1 MiB preadv2",
        Workload::Writes => "1 MiB pwritev2",
    }
}

/// One design x path of a seed bench: the refusal, the cover letter's table (titled with
/// `title_extra` after the path), the footprint, the folios left, the deferred completions and
/// the reclaim counters.
pub(super) fn row_text(p: &SeedPreset, r: &DesignRow, title_extra: &str) -> String {
    let mut out = String::new();
    let name = design_name(&r.design);
    let path = path_name(r.path);
    if let Some(e) = r.refused {
        let _ = writeln!(
            out,
            "{name} ({path}): RWF_DONTCACHE on the block device: {e:?} (no FOP_DONTCACHE \
             in def_blk_fops without patch 4/4); forced on below"
        );
    }
    let title = format!(
        "===== {} ({name}, {path}{}{title_extra}) =====",
        p.title,
        if r.refused.is_some() {
            ", dontcache forced"
        } else {
            ""
        }
    );
    out.push_str(&seed_table(
        &title,
        &r.normal.per_second,
        &r.dontcache.per_second,
    ));
    let limit = r.dontcache.limit_pages.unwrap_or(0);
    let _ = writeln!(
        out,
        "footprint (folios of {limit}): normal peak {} final {}; dontcache peak {} final {} ({:.1}% of the limit)",
        r.normal.peak_cached,
        r.normal.final_cached,
        r.dontcache.peak_cached,
        r.dontcache.final_cached,
        r.dontcache_footprint() * 100.0
    );
    let seconds = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
    let _ = writeln!(
        out,
        "footprint at each second's end (folios): normal {}; dontcache {}",
        seconds(&r.normal.footprint),
        seconds(&r.dontcache.footprint)
    );
    let _ = writeln!(
        out,
        "dropbehind folios left cached after writeback: {}{}",
        r.dontcache.left_behind,
        match p.workload {
            Workload::Reads => " (reads: the readahead window past the last read)",
            Workload::Writes => "",
        }
    );
    let s = &r.dontcache.stats;
    let _ = writeln!(
        out,
        "completions deferred to task context: normal {}, dontcache {} (regular folios merged into flagged bios: {})",
        r.normal.deferred,
        r.dontcache.deferred,
        s.merged_regular_folios
    );
    for (label, x) in [("normal", &r.normal), ("dontcache", &r.dontcache)] {
        let s = &x.stats;
        let _ = writeln!(
            out,
            "reclaim ({label}): scanned {} evicted {} marked PG_reclaim {} throttled {}{}; flusher wrote {} pages in {} runs; dirty throttled {} ({} jiffies paused; at the end dirty_ratelimit {} and avg_write_bandwidth {} pages/s); invalidated {}",
            s.reclaim_scanned,
            s.reclaim_evicted,
            s.reclaim_dirty_marked,
            s.reclaim_throttled,
            throttle_sleeps(s, x.hz),
            s.flusher_pages,
            s.flusher_runs,
            s.dirty_throttled,
            s.dirty_paused_jiffies,
            s.dirty_ratelimit,
            s.avg_write_bandwidth,
            s.dropbehind_invalidated
        );
    }
    if r.normal.page_reporting.is_some() {
        let (n, d) = (&r.normal.stats, &r.dontcache.stats);
        let _ = writeln!(
            out,
            "pages allocated from reported memory (host faults): normal {}, dontcache {}",
            n.reported_pages_allocated, d.reported_pages_allocated
        );
    }
    out
}

/// The `reclaim_throttle()` sleeps of a run, as the live bench prints its traced ones: how many,
/// how long in all (the `usect_delayed` of their `mm_vmscan_throttled` lines), how many
/// `__acct_reclaim_writeback()` woke before the timeout. Empty when there were none.
fn throttle_sleeps(s: &PageCacheStats, hz: u32) -> String {
    if s.reclaim_throttle_sleeps == 0 {
        return String::new();
    }
    format!(
        " (reclaim_throttle(WRITEBACK) {}x, {} ms asleep, {} woken by writeback)",
        s.reclaim_throttle_sleeps,
        bio_core::time::jiffies_to_msecs(s.reclaim_throttle_jiffies, hz.max(1)),
        s.reclaim_throttle_woken
    )
}

/// The summary table of a seed bench: averages, ratio, DONTCACHE's peak footprint and the
/// folios it left, one line per design x path.
pub(super) fn summary_text(rows: &[DesignRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "design      path          normal MB/s  dontcache MB/s  ratio  dontcache peak  left"
    );
    for r in rows {
        let (a, b) = r.averages();
        let _ = writeln!(
            out,
            "{:<10}  {:<11}  {:>11.1}  {:>14.1}  {:>5}  {:>13.1}%  {:>4}",
            design_name(&r.design),
            path_name(r.path),
            a,
            b,
            r.ratio()
                .map(|x| format!("{x:.2}"))
                .unwrap_or_else(|| "-".to_owned()),
            r.dontcache_footprint() * 100.0,
            r.dontcache.left_behind
        );
    }
    out
}

/// One 16 KiB `pwritev2(RWF_DONTCACHE)` (4 folios; forced on a design whose bdev refuses it) on
/// `design` x `path` on `device`, run until its writeback completed and every deferred
/// completion ran, as an ftrace-format trace (docs/dontcache.md quotes these).
pub fn traced_write(
    design: DontcacheDesign,
    path: WritebackPath,
    costs: &PageCosts,
    device: NvmeModel,
) -> Result<String, DriverError> {
    let mut c = DriverConfig::new(design, path, Workload::Writes);
    c.device = device;
    c.io_bytes = 16 << 10;
    c.range_bytes = 16 << 10;
    c.max_ios = Some(1);
    c.dontcache = true;
    c.force_dontcache = true;
    c.capture = true;
    c.costs = costs.clone();
    let r = run(c)?;
    Ok(r.ftrace.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pagecache::seed_presets::{SEED_READS, SEED_WRITES};
    use bio_core::block::complete_in_task::Variant;

    fn report(
        preset: SeedPreset,
        design: DontcacheDesign,
        dontcache: RunResult,
    ) -> SeedBenchReport {
        let mut config = SeedBenchConfig::new(preset);
        config.designs = vec![design];
        config.paths = vec![WritebackPath::Iomap];
        SeedBenchReport {
            config,
            rows: vec![DesignRow {
                design,
                path: WritebackPath::Iomap,
                normal: RunResult::default(),
                dontcache,
                refused: None,
            }],
        }
    }

    /// The memory bound holds what runs held (peaks measured with `/usr/bin/time -f %M`, KiB
    /// read as GB = 10^9 bytes: `seed-reads --machine fc-guest --seconds 14` 12.14 GB (VmHWM),
    /// `--seconds 1` 0.89 GB (a debug build); `seed-reads --limit 1G --seconds 1` 2.25 GB;
    /// `seed-writes --machine fc-guest --limit 244M --seconds 1` 3.12 GB) without refusing them
    /// on this 24 GiB machine, and refuses a run that could fill a 24105 MiB cache. Catches a
    /// bound that ignores the time, the page reporting or the writes.
    #[test]
    fn the_memory_bound_covers_measured_runs_and_refuses_a_cache_past_the_host() {
        use crate::pagecache::seed_machine::SeedMachine;
        let gb = 1e9;
        let need = |preset: SeedPreset, machine: bool, limit: Option<u64>, seconds: u64| {
            let mut cfg = SeedBenchConfig::new(preset);
            if machine {
                SeedMachine::fc_guest().apply(&mut cfg);
            }
            if let Some(l) = limit {
                cfg.limit_bytes = l;
            }
            cfg.seconds = seconds;
            (deterministic_memory_need(&cfg) as f64 / gb, cfg)
        };
        for (preset, machine, limit, seconds, peak_gb) in [
            (SEED_READS, true, None, 14, 12.14),
            (SEED_READS, true, None, 1, 0.89),
            (SEED_READS, false, Some(1 << 30), 1, 2.25),
            (SEED_WRITES, true, Some(244 << 20), 1, 3.12),
        ] {
            let (n, cfg) = need(preset, machine, limit, seconds);
            assert!(
                n >= peak_gb && n < 1.5 * peak_gb + 0.2,
                "{} {seconds} s: bound {n:.2} GB, measured {peak_gb}",
                preset.name
            );
            // This machine's MemAvailable at the time: 22.9 GB.
            assert_eq!(
                check_deterministic_size_on(&cfg, Some(22_900_000_000)),
                Ok(())
            );
        }
        // The time bound: one CPU copying and adding 4 KiB pages, each also a host fault on a
        // guest with page reporting; a write run's range is bounded the same way.
        let (_, mut cfg) = need(SEED_READS, false, Some(24_105 << 20), 1);
        let c = &cfg.costs;
        let per_second = |ns: f64| (1e9 / ns * 4096.0) as u64;
        assert_eq!(
            cached_and_written_at_most(&cfg),
            (per_second(c.copy_ns + c.alloc_add_ns), 0)
        );
        cfg.page_reporting_order = Some(9);
        let with_faults = per_second(c.copy_ns + c.alloc_add_ns + c.reported_touch_ns);
        assert_eq!(cached_and_written_at_most(&cfg), (with_faults, 0));
        let (_, writes) = need(SEED_WRITES, true, Some(24_105 << 20), 1);
        assert_eq!(
            cached_and_written_at_most(&writes),
            (with_faults, per_second(c.copy_ns + c.alloc_add_ns))
        );
        let (n, cfg) = need(SEED_READS, true, None, 120);
        assert!(n > 2.0 * 24.0, "{n}");
        let e = check_deterministic_size_on(&cfg, Some(22_900_000_000)).unwrap_err();
        assert!(
            e.starts_with("seed-reads with a cache limit of 24105 MiB for 120 s could cache up to 24105 MiB, and")
                && e.ends_with("more than the host's MemAvailable of 21839 MiB; lower --seconds or --limit"),
            "{e}"
        );
        assert_eq!(check_deterministic_size_on(&cfg, None), Ok(()));
        // Exactly what the host has is enough; a byte less is not.
        let need = deterministic_memory_need(&cfg);
        assert_eq!(check_deterministic_size_on(&cfg, Some(need)), Ok(()));
        assert!(check_deterministic_size_on(&cfg, Some(need - 1)).is_err());
    }

    /// The report runs the oracle on every row and prints each verdict: a v7 write run that
    /// left a dropbehind folio fails (and `oracle_ok()` says so, for the CLI's exit status), the
    /// same run on `baseline` passes only if the folio was an interrupt's skip, and a read run is
    /// judged on its bytes. Catches a report that prints no verdict, always "ok", or the wrong
    /// checks for the workload.
    #[test]
    fn the_report_prints_the_oracles_verdict_on_every_row() {
        let clean = report(
            SEED_WRITES,
            DontcacheDesign::Bio(Variant::V7),
            RunResult::default(),
        );
        let text = clean.to_string();
        assert!(clean.oracle_ok(), "{text}");
        assert!(
            text.contains("oracle: no dropbehind folio survives writeback: ok\n"),
            "{text}"
        );
        assert!(
            text.contains("oracle: folio_end_dropbehind in task context only: ok\n"),
            "{text}"
        );
        let mut left = RunResult {
            left_behind: 3,
            ..RunResult::default()
        };
        let v7 = report(SEED_WRITES, DontcacheDesign::Bio(Variant::V7), left.clone());
        assert!(!v7.oracle_ok());
        assert!(
            v7.to_string().contains(
                "oracle: no dropbehind folio survives writeback: FAILED: 3 dropbehind folios"
            ),
            "{v7}"
        );
        left.stats.skipped_not_in_task = 3;
        let baseline = report(SEED_WRITES, DontcacheDesign::Baseline, left);
        assert!(baseline.oracle_ok(), "{baseline}");
        assert!(
            baseline
                .to_string()
                .contains("oracle: IRQ-completed folios stay, as the kernel leaves them: ok\n"),
            "{baseline}"
        );
        let torn = RunResult {
            corrupt_bytes: 5,
            ..RunResult::default()
        };
        let reads = report(SEED_READS, DontcacheDesign::Bio(Variant::V7), torn);
        assert!(!reads.oracle_ok());
        assert!(
            reads
                .to_string()
                .contains("oracle: every byte read is the device's: FAILED: 5 bytes differ"),
            "{reads}"
        );
    }
}
