//! The discrete-event driver: one workload task doing 1 MiB `preadv2()`/`pwritev2()` (with or
//! without `RWF_DONTCACHE`) on a block device's own page cache (`def_blk_fops` over
//! `mm/filemap.c`, bio-core's `mm`), over the [NVMe-like device](super::nvme_device), on the
//! [deterministic runtime](crate::runtime::deterministic), with its own nanosecond clock.
//!
//! Time: the task's syscalls, the device's interrupts and the kworkers cost what the page cache
//! counted (bio-core's `PageCacheStats` deltas) priced by [`PageCosts`]; each runs on a CPU
//! ([`CpuClocks`]): an interrupt or kworker on the task's CPU delays it. jiffies advance with the
//! clock (`Event::Tick` at every `1/HZ`), so the posted versions' one-jiffy delayed work fires
//! when it would. Completions come in as hard interrupts (`Kernel::raise_irq` + `Event::Irq`) on
//! the CPU the device's [`CompletionIrq`] names: the NVMe-like device's on the submitting CPU,
//! where `bio_endio()` runs in the hardirq; virtio-blk's on its one vector's CPU, where it runs
//! in the `BLOCK_SOFTIRQ` the interrupt raises. Each request fires `block_rq_complete` before its
//! bios end; deferred completions run in `Event::Worker` steps.
//!
//! The flusher (`wb_workfn`, bio-core's `fs/fs_writeback.rs`) is a kworker of the unbound
//! `writeback` workqueue: the driver runs it on the CPU that is free first (the other CPU of the
//! 2-CPU machine while the task runs, as the scheduler would place an unbound kworker), after what
//! that CPU already has to do, and sends its bios to the device as it builds them: each
//! request-sized group of contiguous bios at the time its last page's `writeback submit` cost is
//! paid, from that CPU (on NVMe, whose queue's interrupt then completes them).

// Bios travel boxed everywhere in bio-core (`Box<Bio>` moves from submitter to device to
// `bio_endio()`); a list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

use super::cpu_time::{CpuClocks, CpuTime, Runner};
use super::nvme_device::{CompletionIrq, NvmeDevice, NvmeModel};
use super::seed_presets::Workload;
use super::workload_pattern::{range_pattern, PAGE};
use crate::perf::dontcache_costs::PageCosts;
use crate::runtime::deterministic::{DetConfig, DetRuntime};
use crate::runtime::Event;
use bio_core::block::complete_in_task::{bio_complete_init, BatcherObserver};
use bio_core::block::{bio_endio, Bio, BioFlag};
use bio_core::drivers::block::blk_mq_trace::{block_rq_complete, RqTrace};
use bio_core::errno::Errno;
use bio_core::irq::SoftirqVec;
use bio_core::kernel::CpuId;
use bio_core::mm::dontcache::{
    DontcacheDesign, DropbehindIrq, PageCacheConfig, WritebackPath, DEFAULT_MACHINE_MEMORY_BYTES,
};
use bio_core::mm::filemap::{AddressSpace, Blocked, PageCacheStats, ReclaimSleep};
use bio_core::mm::page_reporting::FreePageReporting;
use bio_core::workqueue::PoolId;
use bio_core::{Cpu, Kernel, KernelConfig};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A deliberately broken machine, for the oracle's buggy twins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Twin {
    /// The device driver clones each bio without its flags (a stacking driver that forgets
    /// `BIO_COMPLETE_IN_TASK`): every completion runs `bi_end_io` in the interrupt.
    DropsCompleteInTask,
}

/// One run's parameters.
#[derive(Clone)]
pub struct DriverConfig {
    /// The design.
    pub design: DontcacheDesign,
    /// The bdev mapping's writeback path.
    pub path: WritebackPath,
    /// Reads or writes.
    pub workload: Workload,
    /// `RWF_DONTCACHE` on every syscall.
    pub dontcache: bool,
    /// Accept `RWF_DONTCACHE` on a bdev that refuses it (`baseline` measured anyway).
    pub force_dontcache: bool,
    /// The cache (memcg) limit in bytes.
    pub limit_bytes: Option<u64>,
    /// The range the task goes over, in bytes.
    pub range_bytes: u64,
    /// Bytes per syscall.
    pub io_bytes: usize,
    /// Simulated run time, ns (the task stops starting syscalls then).
    pub duration_ns: u64,
    /// Stop after this many syscalls (small traced runs).
    pub max_ios: Option<u64>,
    /// The device.
    pub device: NvmeModel,
    /// The per-page costs.
    pub costs: PageCosts,
    /// Record the runtime's trace (tracepoints included).
    pub capture: bool,
    /// Simulated CPUs.
    pub nr_cpus: u32,
    /// The CPU the task runs on.
    pub task_cpu: u32,
    /// A broken machine.
    pub twin: Option<Twin>,
    /// RFC v3's `folio_end_dropbehind_irq()` for [`DontcacheDesign::V3`] (bio-core's
    /// `mm/dropbehind_v3.rs` behind A's `DropbehindIrq` seam). Without it a V3 mapping's IRQ
    /// completions skip the invalidation as `baseline`'s do.
    pub dropbehind_irq: Option<Arc<dyn DropbehindIrq>>,
    /// The machine's memory in bytes: the global dirty limits (`vm.dirty_ratio` 20 and
    /// `vm.dirty_background_ratio` 10) are percentages of it.
    pub machine_memory_bytes: u64,
    /// The memory controller on cgroup v2: the memcg is a dirty domain of its own
    /// ([`PageCacheConfig::cgroup_v2`]); `false`, cgroup v1 (this machine's).
    pub cgroup_v2: bool,
    /// The simulated kernel's `CONFIG_HZ` ([`KernelConfig::hz`]; default 250).
    pub hz: u32,
    /// A VM guest with free page reporting at this `page_reporting_order`
    /// ([`PageCacheConfig::page_reporting_order`]): the memcg limit's memory starts reported to
    /// the host, and each page allocated from it costs [`PageCosts::reported_touch_ns`]. `None`
    /// (default): no reporting.
    pub page_reporting_order: Option<u32>,
}

impl std::fmt::Debug for DriverConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverConfig")
            .field("design", &self.design.name())
            .field("path", &self.path)
            .field("workload", &self.workload)
            .field("dontcache", &self.dontcache)
            .field("limit_bytes", &self.limit_bytes)
            .field("range_bytes", &self.range_bytes)
            .field("dropbehind_irq", &self.dropbehind_irq.is_some())
            .field("cgroup_v2", &self.cgroup_v2)
            .field("hz", &self.hz)
            .field("page_reporting_order", &self.page_reporting_order)
            .finish_non_exhaustive()
    }
}

/// The simulated machine's CPUs unless a run says otherwise: this machine's two.
pub const DEFAULT_NR_CPUS: u32 = 2;

impl DriverConfig {
    /// A run of `workload` on `design` x `path` with the defaults: 2 CPUs, the task on CPU0,
    /// [`NvmeModel::DEFAULT`], [`PageCosts::MEASURED`], 1 MiB syscalls, one simulated second.
    pub fn new(design: DontcacheDesign, path: WritebackPath, workload: Workload) -> Self {
        Self {
            design,
            path,
            workload,
            dontcache: false,
            force_dontcache: false,
            limit_bytes: None,
            range_bytes: 64 << 20,
            io_bytes: 1 << 20,
            duration_ns: 1_000_000_000,
            max_ios: None,
            device: NvmeModel::DEFAULT,
            costs: PageCosts::MEASURED,
            capture: false,
            nr_cpus: DEFAULT_NR_CPUS,
            task_cpu: 0,
            twin: None,
            dropbehind_irq: None,
            machine_memory_bytes: DEFAULT_MACHINE_MEMORY_BYTES,
            cgroup_v2: false,
            hz: KernelConfig::default().hz,
            page_reporting_order: None,
        }
    }
}

/// Why a run could not be made (not a syscall's error: those are results).
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The configuration is unusable.
    #[error("invalid run: {0}")]
    Config(String),
    /// The simulated machine could not boot.
    #[error("booting the simulated kernel: {0}")]
    Boot(String),
    /// Nothing can happen and the task still waits: a lost completion.
    #[error("stuck at {at_ns} ns: the task waits, no bio is in flight and no work is pending")]
    Stuck {
        /// When.
        at_ns: u64,
    },
    /// The [threaded](super::threaded) machine failed: its runtime refused or timed out, or the
    /// simulated kernel reported something.
    #[error("threaded run: {0}")]
    Threaded(String),
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    /// The syscall's error if the bdev refused it (`EOPNOTSUPP` on `baseline` unforced).
    pub refused: Option<Errno>,
    /// Bytes the task moved in each simulated second.
    pub per_second: Vec<u64>,
    /// Cached folios at the end of each simulated second.
    pub footprint: Vec<u64>,
    /// Peak cached folios.
    pub peak_cached: u64,
    /// Cached folios when the run (and its writeback) ended.
    pub final_cached: u64,
    /// The limit in folios, if any.
    pub limit_pages: Option<u64>,
    /// Clean, idle folios still marked dropbehind after all writeback completed.
    pub left_behind: u64,
    /// Bios whose completion was deferred to task context (the batcher's count).
    pub deferred: u64,
    /// The page cache's counters at the end.
    pub stats: PageCacheStats,
    /// Bytes the task moved.
    pub bytes: u64,
    /// Syscalls done.
    pub ios: u64,
    /// When the last syscall returned (ns).
    pub elapsed_ns: u64,
    /// Bytes a read returned that differ from what the device holds (must be 0).
    pub corrupt_bytes: u64,
    /// Time per CPU.
    pub cpu_time: Vec<CpuTime>,
    /// The runtime's trace, if captured.
    pub trace: Option<String>,
    /// The ftrace-format trace, if captured.
    pub ftrace: Option<String>,
    /// Whether the V3 design had its `folio_end_dropbehind_irq()` hook.
    pub v3_hook: bool,
    /// With free page reporting: the guest's free memory at the end.
    pub page_reporting: Option<FreePageReporting>,
    /// The simulated kernel's `CONFIG_HZ` (the stats' jiffies are of this rate).
    pub hz: u32,
    /// Regular folios that came back from the device in a `BIO_COMPLETE_IN_TASK` bio, and how
    /// long each waited from that interrupt to its `folio_end_writeback()`: what removing
    /// `IOMAP_IOEND_DONTCACHE` from the NOMERGE flags costs the regular data merged into a
    /// dropbehind folio's bio.
    pub merged_wait: MergedRegularWait,
}

/// Regular (not dropbehind) folios that went to the device in a bio flagged
/// `BIO_COMPLETE_IN_TASK` (recorded as the bio is submitted, as iomap built it), followed from the
/// interrupt that completed the bio to their `folio_end_writeback()`, on the driver's clock. The
/// driver prices a kworker's or an interrupt's run as a whole, so a folio's end is known between
/// two bounds: the run's start (after the work hand-off, where `bi_end_io` begins) and its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergedRegularWait {
    /// Regular folios of flagged bios the device completed.
    pub seen_at_irq: u64,
    /// Of those, the ones whose writeback has ended.
    pub ended: u64,
    /// Their waits to the start of the run that ended them, summed (ns).
    pub total_lo_ns: u64,
    /// Their waits to the end of that run, summed (ns).
    pub total_hi_ns: u64,
    /// The longest wait to the end of that run (ns).
    pub max_hi_ns: u64,
}

impl MergedRegularWait {
    /// The mean wait in ns (to the start, to the end of the run that ended it), if any ended.
    pub fn mean_ns(&self) -> Option<(f64, f64)> {
        (self.ended > 0).then(|| {
            let n = self.ended as f64;
            (self.total_lo_ns as f64 / n, self.total_hi_ns as f64 / n)
        })
    }
}

impl RunResult {
    /// Throughput over the run, bytes per simulated second.
    pub fn bytes_per_sec(&self) -> f64 {
        if self.elapsed_ns == 0 {
            return 0.0;
        }
        self.bytes as f64 * 1e9 / self.elapsed_ns as f64
    }
}

/// Counts the batcher's deferrals (`__bio_complete_in_task()` calls).
#[derive(Default)]
pub(super) struct DeferCount(pub(super) AtomicU64);

impl BatcherObserver for DeferCount {
    fn deferred(&self, _bio: u64, _cx: &Cpu) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// The simulated machine of one run.
pub struct Machine {
    cfg: DriverConfig,
    rt: DetRuntime,
    mapping: Arc<AddressSpace>,
    dev: NvmeDevice,
    clocks: CpuClocks,
    deferred: Arc<DeferCount>,
    /// Pages written by the workload: their last pass.
    passes: BTreeMap<u64, u64>,
    /// The highest pass in `passes` (a phase's writes are the next one).
    last_pass: u64,
    /// ns per jiffy.
    jiffy_ns: u64,
    next_tick: u64,
    now: u64,
    /// Regular folios submitted in flagged bios, not completed yet.
    merged_in_flight: BTreeSet<u64>,
    /// Regular folios of flagged bios the device completed, by index: when their interrupt came.
    merged_pending: BTreeMap<u64, u64>,
    merged_wait: MergedRegularWait,
    /// When the last run that ended a writeback (an ioend, a buffer_head bio) ended (ns).
    last_writeback_end: u64,
}

impl std::fmt::Debug for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machine")
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

/// One phase of a run: what the task does and for how long.
#[derive(Debug, Clone, Copy)]
pub struct Phase {
    /// Reads or writes.
    pub workload: Workload,
    /// `RWF_DONTCACHE` on each syscall.
    pub dontcache: bool,
    /// Where the range starts, in bytes (a multiple of the page).
    pub start: u64,
    /// The range in bytes, from `start`.
    pub range: u64,
    /// Start no syscall at or after this time (ns).
    pub until_ns: u64,
    /// Stop after this many syscalls.
    pub max_ios: Option<u64>,
}

/// What the task is in the middle of.
#[derive(Debug, Clone, Copy)]
enum Syscall {
    Read { pos: u64, done: usize },
    Write { pos: u64, done: usize, pass: u64 },
}

impl Machine {
    /// Boots the machine: the kernel (with the batcher of the design's version for the bio-level
    /// designs), the runtime, the block device's mapping, the device.
    pub fn boot(cfg: DriverConfig) -> Result<Self, DriverError> {
        if cfg.io_bytes == 0 || !cfg.io_bytes.is_multiple_of(PAGE) {
            return Err(DriverError::Config(format!(
                "io size {} is not a positive multiple of 4096",
                cfg.io_bytes
            )));
        }
        if cfg.range_bytes < cfg.io_bytes as u64 {
            return Err(DriverError::Config(format!(
                "range {} is smaller than one syscall ({})",
                cfg.range_bytes, cfg.io_bytes
            )));
        }
        if cfg.task_cpu >= cfg.nr_cpus {
            return Err(DriverError::Config(format!(
                "task CPU{} does not exist ({} CPUs)",
                cfg.task_cpu, cfg.nr_cpus
            )));
        }
        if let CompletionIrq::OneVector(c) = cfg.device.irq {
            if c.0 >= cfg.nr_cpus {
                return Err(DriverError::Config(format!(
                    "the device's interrupt CPU{} does not exist ({} CPUs)",
                    c.0, cfg.nr_cpus
                )));
            }
        }
        let kconfig = KernelConfig {
            hz: cfg.hz,
            ..KernelConfig::default()
        };
        let hz = u64::from(kconfig.hz);
        let kernel =
            Kernel::new(kconfig, cfg.nr_cpus).map_err(|e| DriverError::Boot(e.to_string()))?;
        let deferred = Arc::new(DeferCount::default());
        let variant = cfg.design.boot_variant();
        let observer: Arc<dyn BatcherObserver> = deferred.clone();
        bio_complete_init(&kernel, variant, Some(observer))
            .map_err(|e| DriverError::Boot(e.to_string()))?;
        let rt = DetRuntime::new(
            Arc::clone(&kernel),
            DetConfig {
                seed: 0,
                record_steps: cfg.capture,
                capture_trace: cfg.capture,
                irq_window_chance: (0, 1),
            },
        );
        let mapping = kernel_calls::bdev_mapping(&kernel, &cfg)?;
        Ok(Self {
            dev: NvmeDevice::new(cfg.device),
            clocks: CpuClocks::new(cfg.nr_cpus as usize),
            rt,
            mapping,
            deferred,
            passes: BTreeMap::new(),
            last_pass: 0,
            jiffy_ns: 1_000_000_000 / hz,
            next_tick: 1_000_000_000 / hz,
            now: 0,
            merged_in_flight: BTreeSet::new(),
            merged_pending: BTreeMap::new(),
            merged_wait: MergedRegularWait::default(),
            last_writeback_end: 0,
            cfg,
        })
    }

    /// The page cache's counters now.
    pub fn stats(&self) -> PageCacheStats {
        kernel_calls::stats(&self.mapping)
    }

    /// Prices the work between two counter snapshots, in ns.
    fn price(&self, before: &PageCacheStats, after: &PageCacheStats) -> u64 {
        let c = &self.cfg.costs;
        let d = kernel_calls::work_delta(before, after);
        let ns = d.copied as f64 * c.copy_ns
            + d.added as f64 * c.alloc_add_ns
            + d.scanned as f64 * c.reclaim_scan_ns
            + d.evicted as f64 * c.reclaim_evict_ns
            + d.invalidated as f64 * c.invalidate_ns
            + d.written_back as f64 * c.writeback_submit_ns
            + d.reported as f64 * c.reported_touch_ns;
        ns.round() as u64
    }

    /// Submits `bios` to the device at `at` from `cpu`.
    fn submit(&mut self, bios: Vec<Box<Bio>>, cpu: u32, at: u64) {
        let mut bios = bios;
        if self.cfg.twin == Some(Twin::DropsCompleteInTask) {
            for bio in bios.iter_mut() {
                bio.clear_flag(BioFlag::CompleteInTask);
            }
        }
        for bio in bios.iter().filter(|b| b.flagged(BioFlag::CompleteInTask)) {
            // The ioend's regular folios: not dropbehind now, as iomap saw them in this step.
            let first = bio.bi_iter.bi_sector / (PAGE as u64 / 512);
            let pages = NvmeDevice::bio_bytes(bio).div_ceil(PAGE as u64);
            for index in first..first + pages {
                if self
                    .mapping
                    .folio(index)
                    .is_some_and(|f| f.writeback && !f.dropbehind)
                {
                    self.merged_in_flight.insert(index);
                }
            }
        }
        if !bios.is_empty() {
            self.dev.submit_plugged(bios, CpuId(cpu), at);
        }
    }

    /// Runs every kworker, softirq and due timer that can run now, each priced on its CPU. An
    /// unbound kworker (the flusher) runs on the CPU free first, after that CPU's backlog, and
    /// its bios go to the device as it builds them.
    fn run_deferred(&mut self) {
        self.run_deferred_after(0);
    }

    /// [`Self::run_deferred`] for work a syscall queued: none of it starts before `not_before`,
    /// the syscall's end (the flusher cannot run before reclaim or `balance_dirty_pages()` woke
    /// it, which the syscall's CPU time covers).
    fn run_deferred_after(&mut self, not_before: u64) {
        let at = self.now.max(not_before);
        loop {
            let enabled = self.rt.enabled();
            let next = enabled.iter().copied().find(|e| {
                matches!(
                    e,
                    Event::Worker { .. }
                        | Event::Rescuer { .. }
                        | Event::Softirq(_)
                        | Event::Timers(_)
                )
            });
            let Some(mut ev) = next else {
                return;
            };
            let mut unbound = false;
            if let Event::Worker {
                pool: PoolId::Unbound,
                ..
            } = ev
            {
                // The CPU free first; on a tie, not the task's.
                let task = self.cfg.task_cpu;
                let pick = enabled
                    .iter()
                    .filter_map(|e| match e {
                        Event::Worker {
                            pool: PoolId::Unbound,
                            on,
                        } => Some(on.0),
                        _ => None,
                    })
                    .min_by_key(|c| (self.clocks.free_at(*c as usize), *c == task));
                if let Some(c) = pick {
                    ev = Event::Worker {
                        pool: PoolId::Unbound,
                        on: CpuId(c),
                    };
                    unbound = true;
                }
            }
            let on = match ev {
                Event::Worker { on, .. } | Event::Rescuer { on, .. } => on.0,
                Event::Softirq(c) | Event::Timers(c) => c.0,
                _ => self.cfg.task_cpu,
            };
            let before = self.stats();
            // The trace's clock: a bound kworker or softirq preempts its CPU at `at`; an
            // unbound kworker starts when its CPU is free.
            self.rt.set_trace_clock(if unbound {
                self.clocks.free_at(on as usize).max(at)
            } else {
                at
            });
            if self.rt.step(ev).is_err() {
                return;
            }
            let after = self.stats();
            let ns = self.price(&before, &after)
                + if matches!(ev, Event::Worker { .. } | Event::Rescuer { .. }) {
                    self.cfg.costs.work_handoff_ns as u64
                } else {
                    0
                };
            let start = self.clocks.free_at(on as usize).max(at);
            if unbound {
                self.clocks.run(on as usize, at, ns, Runner::Worker);
            } else {
                self.clocks.preempt(on as usize, at, ns, Runner::Worker);
            }
            // The run's `bi_end_io` begins after the hand-off; it ends with the run.
            let handoff = if matches!(ev, Event::Worker { .. } | Event::Rescuer { .. }) {
                self.cfg.costs.work_handoff_ns as u64
            } else {
                0
            };
            self.writeback_ended_by(&before, &after, start + handoff.min(ns), start + ns);
            let bios = kernel_calls::flusher_bios(&self.mapping);
            self.submit_as_built(bios, on, start);
        }
    }

    /// Sends a kworker's writeback bios to the device as it builds them: each group of contiguous
    /// bios up to a request's size when its last page's `writeback submit` cost is paid (the
    /// plug merges them into one request there).
    fn submit_as_built(&mut self, bios: Vec<Box<Bio>>, cpu: u32, start: u64) {
        let per_page = self.cfg.costs.writeback_submit_ns;
        let max_pages = self.cfg.device.max_request_bytes / PAGE as u64;
        let mut group: Vec<Box<Bio>> = Vec::new();
        let (mut group_pages, mut pages) = (0u64, 0u64);
        for bio in bios {
            let bytes = NvmeDevice::bio_bytes;
            let n = bytes(&bio).div_ceil(PAGE as u64).max(1);
            let contiguous = group.last().is_some_and(|last| {
                last.bi_iter.bi_sector + bytes(last) / 512 == bio.bi_iter.bi_sector
            });
            if !group.is_empty() && (!contiguous || group_pages + n > max_pages) {
                let at = start + (pages as f64 * per_page).round() as u64;
                self.submit(std::mem::take(&mut group), cpu, at);
                group_pages = 0;
            }
            pages += n;
            group_pages += n;
            group.push(bio);
        }
        if !group.is_empty() {
            let at = start + (pages as f64 * per_page).round() as u64;
            self.submit(group, cpu, at);
        }
    }

    /// Delivers the completions due by `now` as interrupts on their CPUs.
    fn complete_due(&mut self) -> bool {
        let done = self.dev.complete_until(self.now);
        if done.is_empty() {
            return false;
        }
        // One interrupt per CPU per instant (what completed together shares the vector's
        // interrupt, as NVMe's completion-queue processing reaps every posted entry).
        let mut by_cpu: BTreeMap<u32, Vec<Vec<Box<Bio>>>> = BTreeMap::new();
        for f in done {
            by_cpu.entry(f.cpu.0).or_default().push(f.bios);
        }
        let irq = self.cfg.device.irq;
        let dev = self.mapping.config().dev;
        for bios in by_cpu.values().flatten() {
            self.merged_seen_at_irq(bios);
        }
        for (cpu, requests) in by_cpu {
            // blk_mq_end_request() → blk_update_request(): the request's block_rq_complete,
            // then each of its bios ends.
            let end = move |cx: &Cpu| {
                for bios in requests {
                    // The tracepoint's arguments only behind its static key, as the kernel's
                    // TP_fast_assign computes them.
                    if let Some(rq) = cx
                        .tracepoints_enabled()
                        .then(|| request_trace(dev, &bios))
                        .flatten()
                    {
                        block_rq_complete(&rq, 0, cx);
                    }
                    for bio in bios {
                        bio_endio(bio, cx);
                    }
                }
            };
            let handler: Box<dyn FnOnce(&Cpu) + Send> = match irq {
                // nvme_irq() → nvme_pci_complete_rq(): ended in the hardirq.
                CompletionIrq::SubmittingCpu => Box::new(end),
                // virtblk_done() → blk_mq_complete_request(): BLOCK_SOFTIRQ on this CPU, run at
                // irq_exit(), where blk_done_softirq() → virtblk_request_done() ends them.
                CompletionIrq::OneVector(_) => Box::new(move |cx: &Cpu| {
                    cx.kernel()
                        .raise_softirq(cx, SoftirqVec::Block, Box::new(end))
                }),
            };
            let before = self.stats();
            self.rt.set_trace_clock(self.now);
            if let Ok(target) = self.rt.kernel().raise_irq(CpuId(cpu), irq.name(), handler) {
                while self.rt.step(Event::Irq(target)).is_ok() {}
            }
            let after = self.stats();
            let ns = self.price(&before, &after) + self.cfg.costs.irq_ns as u64;
            let start = self.clocks.free_at(cpu as usize).max(self.now);
            self.clocks.preempt(cpu as usize, self.now, ns, Runner::Irq);
            self.writeback_ended_by(&before, &after, start, start + ns);
        }
        self.run_deferred();
        true
    }

    /// The regular folios the flagged bios of requests the device completes now carried (as
    /// [`Machine::submit`] recorded them): their wait for `folio_end_writeback()` starts with
    /// this interrupt.
    fn merged_seen_at_irq(&mut self, bios: &[Box<Bio>]) {
        for bio in bios.iter().filter(|b| b.flagged(BioFlag::CompleteInTask)) {
            let first = bio.bi_iter.bi_sector / (PAGE as u64 / 512);
            let pages = NvmeDevice::bio_bytes(bio).div_ceil(PAGE as u64);
            for index in first..first + pages {
                if self.merged_in_flight.remove(&index) {
                    self.merged_pending.insert(index, self.now);
                    self.merged_wait.seen_at_irq += 1;
                }
            }
        }
    }

    /// After a run (interrupt or kworker) from `lo` to `hi` that did the work between `before`
    /// and `after`: if it ended a writeback, the task waiting for one may go on from `hi`; every
    /// followed folio whose writeback it ended waited from its interrupt to between `lo` and
    /// `hi`.
    fn writeback_ended_by(
        &mut self,
        before: &PageCacheStats,
        after: &PageCacheStats,
        lo: u64,
        hi: u64,
    ) {
        let ended = |s: &PageCacheStats| s.writeback_ended_in_task + s.writeback_ended_in_irq;
        if ended(after) > ended(before) {
            self.last_writeback_end = self.last_writeback_end.max(hi);
        }
        if self.merged_pending.is_empty() {
            return;
        }
        let mapping = &self.mapping;
        let w = &mut self.merged_wait;
        self.merged_pending.retain(|&index, &mut irq_at| {
            if mapping.folio(index).is_some_and(|f| f.writeback) {
                return true;
            }
            // A run after the interrupt: the runs begin no earlier than the interrupt came.
            w.ended += 1;
            w.total_lo_ns += lo.saturating_sub(irq_at);
            w.total_hi_ns += hi.saturating_sub(irq_at);
            w.max_hi_ns = w.max_hi_ns.max(hi.saturating_sub(irq_at));
            false
        });
    }

    /// The time of the tick that makes `jiffies` reach `j` (now, if it already has).
    fn jiffy_time(&self, j: u64) -> u64 {
        let now = self.rt.kernel().jiffies();
        if j <= now {
            return self.now;
        }
        self.next_tick + (j - now - 1) * self.jiffy_ns
    }

    /// Advances jiffies to cover `now`, firing what is due.
    fn tick_until(&mut self, t: u64) {
        while self.next_tick <= t {
            self.now = self.now.max(self.next_tick);
            self.rt.set_trace_clock(self.now);
            if self.rt.step(Event::Tick).is_err() {
                // No timer armed: jiffies still advance (the tick runs whether or not anything
                // is due), so a later one-jiffy delayed work counts from the right jiffy.
                self.rt.kernel().advance_jiffies(1);
            }
            self.run_deferred();
            self.next_tick += self.jiffy_ns;
        }
    }

    /// Runs one phase of syscalls: `ph.workload` over `[0, ph.range)` in `io_bytes` steps,
    /// wrapping, until `ph.until_ns` or `ph.max_ios` syscalls. Bytes per simulated second (from
    /// the phase's start) and the footprint at each second's end go into `res`.
    pub fn run_phase(&mut self, ph: &Phase, res: &mut RunResult) -> Result<(), DriverError> {
        let cfg = self.cfg.clone();
        let cpu = cfg.task_cpu;
        let io = cfg.io_bytes;
        let range = ph.range - ph.range % io as u64;
        let start_ns = self.now;
        let mut next_pos = 0u64;
        let mut write_pass = self.last_pass + 1;
        let mut call: Option<Syscall> = None;
        let mut buf = vec![0u8; io];
        // The task is runnable at this time; None while it waits for a completion.
        let mut task_at: Option<u64> = Some(self.now);
        let mut second_end = start_ns + 1_000_000_000;
        let mut this_second = 0u64;
        let mut ios = 0u64;
        let mut idle_steps = 0u32;
        // The task's reclaim_throttle() sleep: it begins when the syscall that reached it ends
        // (`sleep_at`), and ends when __acct_reclaim_writeback() wakes it or its timer fires.
        let mut sleep_at: Option<u64> = None;
        let mut throttle: Option<ReclaimSleep> = None;
        loop {
            let stop = self.now >= ph.until_ns || ph.max_ios.is_some_and(|m| ios >= m);
            // A reclaim_throttle() sleep the last call reached is slept before the phase ends.
            if stop && call.is_none() && sleep_at.is_none() && throttle.is_none() {
                break;
            }
            let t_task = task_at.map(|t| t.max(self.clocks.free_at(cpu as usize)));
            let t_dev = self.dev.next_completion();
            // A waiting task with nothing in flight may wait for a delayed work (v5/v6's
            // one-jiffy batch): the next tick fires it.
            let t_tick = (task_at.is_none() && t_dev.is_none() && self.timers_pending() > 0)
                .then_some(self.next_tick);
            let t_wake = throttle.as_ref().map(|s| self.jiffy_time(s.fires_at));
            let Some(t) = [t_task, t_dev, t_tick, sleep_at, t_wake]
                .into_iter()
                .flatten()
                .min()
            else {
                return Err(DriverError::Stuck { at_ns: self.now });
            };
            while second_end <= t {
                res.per_second.push(this_second);
                res.footprint.push(self.stats().nr_cached);
                this_second = 0;
                second_end += 1_000_000_000;
            }
            self.tick_until(t);
            self.now = self.now.max(t);
            self.rt.set_trace_clock(self.now);
            let completions = t_dev == Some(t) || (t_tick == Some(t) && t_task.is_none());
            if completions {
                self.complete_due();
            }
            if let Some(at) = sleep_at {
                // What completed while the syscall still ran does not count towards the wake-up.
                if self.now >= at {
                    throttle = Some(self.mapping.reclaim_throttle_begin());
                    sleep_at = None;
                }
                continue;
            }
            if let Some(s) = &throttle {
                if self.mapping.reclaim_throttle_woken(s)
                    || self.rt.kernel().jiffies() >= s.fires_at
                {
                    let s = throttle.take().expect("asleep");
                    let mapping = Arc::clone(&self.mapping);
                    self.rt
                        .on_cpu(CpuId(cpu), "reclaim_throttle", |cx| {
                            mapping.reclaim_throttle_end(cx, s)
                        })
                        .expect("the task's CPU exists");
                    task_at = Some(self.now);
                }
                continue;
            }
            if completions {
                if task_at.is_none() {
                    task_at = Some(self.now);
                }
                continue;
            }
            // The task's turn: a new syscall, or the rest of one that waited.
            let c = *call.get_or_insert_with(|| {
                let pos = ph.start + next_pos;
                next_pos += io as u64;
                if next_pos >= range {
                    next_pos = 0;
                }
                match ph.workload {
                    Workload::Reads => Syscall::Read { pos, done: 0 },
                    Workload::Writes => {
                        let pass = write_pass;
                        if next_pos == 0 {
                            write_pass += 1;
                        }
                        Syscall::Write { pos, done: 0, pass }
                    }
                }
            });
            let before = self.stats();
            let mapping = Arc::clone(&self.mapping);
            let step = match c {
                Syscall::Read { pos, done } => self
                    .rt
                    .on_cpu(CpuId(cpu), "preadv2", |cx| {
                        kernel_calls::read(
                            &mapping,
                            cx,
                            pos + done as u64,
                            &mut buf[done..],
                            ph.dontcache,
                        )
                    })
                    .expect("the task's CPU exists"),
                Syscall::Write { pos, done, pass } => {
                    let data = range_pattern(pos + done as u64, io - done, |_| pass);
                    self.rt
                        .on_cpu(CpuId(cpu), "pwritev2", |cx| {
                            kernel_calls::write(
                                &mapping,
                                cx,
                                pos + done as u64,
                                &data,
                                ph.dontcache,
                            )
                        })
                        .expect("the task's CPU exists")
                }
            };
            let (progress, bios, blocked) = match step {
                Ok(s) => s,
                Err(e) => {
                    res.refused = Some(e);
                    return Ok(());
                }
            };
            let after = self.stats();
            let ns = self.price(&before, &after).max(1);
            let end = self.clocks.run(cpu as usize, t, ns, Runner::Task);
            self.submit(bios, cpu, end);
            // What the syscall woke (the flusher, from reclaim or balance_dirty_pages()), not
            // before the syscall that woke it ends.
            self.run_deferred_after(end);
            let done_now = match c {
                Syscall::Read { done, .. } | Syscall::Write { done, .. } => done + progress,
            };
            this_second += progress as u64;
            res.bytes += progress as u64;
            if done_now >= io {
                match c {
                    Syscall::Read { pos, .. } => {
                        let want = self.expected(pos, io);
                        res.corrupt_bytes +=
                            buf.iter().zip(&want).filter(|(a, b)| a != b).count() as u64;
                    }
                    Syscall::Write { pos, pass, .. } => {
                        for i in 0..(io / PAGE) as u64 {
                            self.passes.insert(pos / PAGE as u64 + i, pass);
                            self.last_pass = self.last_pass.max(pass);
                        }
                    }
                }
                call = None;
                ios += 1;
                res.ios += 1;
                res.elapsed_ns = end - start_ns;
            } else {
                call = Some(match c {
                    Syscall::Read { pos, .. } => Syscall::Read {
                        pos,
                        done: done_now,
                    },
                    Syscall::Write { pos, pass, .. } => Syscall::Write {
                        pos,
                        done: done_now,
                        pass,
                    },
                });
            }
            idle_steps = if progress == 0 { idle_steps + 1 } else { 0 };
            task_at = if let Some(Blocked::ReclaimThrottle) = blocked {
                // schedule_timeout(HZ/10) from the syscall's end, whatever it did before.
                if idle_steps > 10_000 {
                    return Err(DriverError::Stuck { at_ns: end });
                }
                sleep_at = Some(end);
                None
            } else if let Some(Blocked::DirtyThrottle { pause }) = blocked {
                // balance_dirty_pages()'s io_schedule_timeout(pause): asleep that long,
                // whatever completes meanwhile. Pauses without progress count as idle steps:
                // at the limit with writeback that cannot move, the loop never ends.
                if idle_steps > 10_000 {
                    return Err(DriverError::Stuck { at_ns: end });
                }
                Some(end + pause * self.jiffy_ns)
            } else if blocked.is_some() && progress == 0 {
                if self.dev.in_flight() == 0 && !self.work_pending() && self.timers_pending() == 0 {
                    return Err(DriverError::Stuck { at_ns: end });
                }
                None
            } else if idle_steps > 10_000 {
                return Err(DriverError::Stuck { at_ns: end });
            } else {
                Some(end)
            };
        }
        if this_second > 0 || res.per_second.is_empty() {
            res.per_second.push(this_second);
            res.footprint.push(self.stats().nr_cached);
        }
        // The table has one row per second of the phase: what the last syscall moved after the
        // end (it started before) is not a second of its own.
        if ph.until_ns != u64::MAX {
            let rows = (ph.until_ns.saturating_sub(start_ns))
                .div_ceil(1_000_000_000)
                .max(1) as usize;
            res.per_second.truncate(rows);
            res.footprint.truncate(rows);
        }
        Ok(())
    }

    /// `fsync()` of the whole device: start writeback of every dirty folio, then wait for it
    /// (step-wise: the bios go to the device, completions come in as interrupts).
    pub fn fsync(&mut self) -> Result<(), DriverError> {
        let cpu = self.cfg.task_cpu;
        let mapping = Arc::clone(&self.mapping);
        for _ in 0..1000 {
            let before = self.stats();
            self.rt.set_trace_clock(self.now);
            let (bios, waiting) = self
                .rt
                .on_cpu(CpuId(cpu), "fsync", |cx| kernel_calls::fsync(&mapping, cx))
                .expect("the task's CPU exists");
            let after = self.stats();
            let ns = self.price(&before, &after);
            let end = self.clocks.run(cpu as usize, self.now, ns, Runner::Task);
            self.submit(bios, cpu, end);
            self.drain()?;
            if !waiting {
                return Ok(());
            }
        }
        Err(DriverError::Stuck { at_ns: self.now })
    }

    /// `fsync()` of the device as the task lives it: `blkdev_fsync()` →
    /// `file_write_and_wait_range(0, LLONG_MAX)`, whose `WB_SYNC_ALL` pass may sleep on a folio
    /// under writeback in the middle (bio-core's `SyncPass`), asleep until a completion (or, with
    /// nothing in flight, the tick that runs a delayed work), woken when the run that ended a
    /// writeback ends, called again until the device is clean. Unlike [`Machine::fsync`] it does
    /// not wait for everything else to go idle. `blkdev_issue_flush()` is not modelled (the
    /// device has no volatile cache). Returns when the call returned (ns).
    pub fn fsync_wait(&mut self) -> Result<u64, DriverError> {
        let end = self.mapping.i_size().saturating_sub(1);
        self.write_and_wait_range(0, end, "fsync")
    }

    /// `file_write_and_wait_range()` of bytes `start..=end` as the task lives it, in a syscall
    /// named `name` (see [`Machine::fsync_wait`]).
    pub fn write_and_wait_range(
        &mut self,
        start: u64,
        end: u64,
        name: &'static str,
    ) -> Result<u64, DriverError> {
        let cpu = self.cfg.task_cpu;
        let mapping = Arc::clone(&self.mapping);
        let mut at = self.now.max(self.clocks.free_at(cpu as usize));
        for _ in 0..100_000 {
            self.tick_until(at);
            self.now = self.now.max(at);
            self.rt.set_trace_clock(self.now);
            let before = self.stats();
            let (bios, waiting) = self
                .rt
                .on_cpu(CpuId(cpu), name, |cx| {
                    kernel_calls::write_and_wait_range(&mapping, cx, start, end)
                })
                .expect("the task's CPU exists");
            let after = self.stats();
            let ns = self.price(&before, &after).max(1);
            let end = self.clocks.run(cpu as usize, self.now, ns, Runner::Task);
            self.submit(bios, cpu, end);
            self.run_deferred_after(end);
            if !waiting {
                return Ok(end);
            }
            let t = match self.dev.next_completion() {
                Some(t) => t,
                None if self.timers_pending() > 0 => self.next_tick,
                None => return Err(DriverError::Stuck { at_ns: self.now }),
            };
            self.tick_until(t);
            self.now = self.now.max(t);
            self.rt.set_trace_clock(self.now);
            self.complete_due();
            // Woken by the run that ended the writeback it waited for, when that run ends.
            at = self.now.max(end).max(self.last_writeback_end);
        }
        Err(DriverError::Stuck { at_ns: self.now })
    }

    /// `echo 1 > /proc/sys/vm/drop_caches` for the device's mapping: every clean, idle folio goes.
    pub fn drop_caches(&mut self) {
        let cpu = self.cfg.task_cpu;
        let mapping = Arc::clone(&self.mapping);
        self.rt.set_trace_clock(self.now);
        self.rt.on_cpu(CpuId(cpu), "drop_caches", |cx| {
            kernel_calls::drop_caches(&mapping, cx)
        });
    }

    /// The measurements at the end (after [`Machine::drain`]).
    pub fn finish(&mut self, res: &mut RunResult) {
        let stats = self.stats();
        res.final_cached = stats.nr_cached;
        res.peak_cached = stats.peak_cached;
        res.left_behind = kernel_calls::left_behind(&self.mapping);
        res.deferred = self.deferred.0.load(Ordering::Relaxed);
        res.stats = stats;
        res.cpu_time = self.clocks.time.clone();
        res.v3_hook = self.cfg.dropbehind_irq.is_some();
        res.hz = self.cfg.hz;
        res.page_reporting = self.mapping.page_reporting();
        res.merged_wait = self.merged_wait;
        if self.cfg.capture {
            res.trace = Some(self.rt.trace_text());
            res.ftrace = Some(crate::report::ftrace::record::write_trace(
                &self.rt.records(),
                self.cfg.nr_cpus,
            ));
        }
    }

    /// The configured run: the workload for the configured time (or syscalls), then all
    /// writeback completes.
    pub fn run(mut self) -> Result<RunResult, DriverError> {
        let mut res = RunResult {
            limit_pages: self.cfg.limit_bytes.map(|b| b / PAGE as u64),
            ..RunResult::default()
        };
        let ph = Phase {
            workload: self.cfg.workload,
            dontcache: self.cfg.dontcache,
            start: 0,
            range: self.cfg.range_bytes,
            until_ns: self.cfg.duration_ns,
            max_ios: self.cfg.max_ios,
        };
        self.run_phase(&ph, &mut res)?;
        self.drain()?;
        self.finish(&mut res);
        Ok(res)
    }

    fn work_pending(&self) -> bool {
        self.rt.enabled().iter().any(|e| !matches!(e, Event::Tick))
    }

    /// Lets every bio in flight complete and every deferred completion run (delayed work
    /// included: jiffies keep advancing).
    pub fn drain(&mut self) -> Result<(), DriverError> {
        for _ in 0..100_000 {
            if let Some(t) = self.dev.next_completion() {
                self.tick_until(t);
                self.now = self.now.max(t);
                self.complete_due();
                continue;
            }
            self.run_deferred();
            if !self.work_pending() && self.timers_pending() == 0 {
                return Ok(());
            }
            let t = self.next_tick;
            self.tick_until(t);
        }
        Err(DriverError::Stuck { at_ns: self.now })
    }

    fn timers_pending(&self) -> usize {
        self.rt.kernel().armed_timers()
    }

    /// What the device holds (or the workload wrote last) at `pos`.
    fn expected(&self, pos: u64, len: usize) -> Vec<u8> {
        range_pattern(pos, len, |i| self.passes.get(&i).copied().unwrap_or(0))
    }
}

/// One run.
pub fn run(cfg: DriverConfig) -> Result<RunResult, DriverError> {
    Machine::boot(cfg)?.run()
}

/// Data integrity through the cache: `cfg.workload`'s writes (`cfg.max_ios` syscalls, or twice
/// over the range), `fsync()`, drop the cache, read the range back with plain reads and compare
/// with what was written; with `cfg.dontcache`, drop the cache again and read it back with
/// `RWF_DONTCACHE` too. `corrupt_bytes` counts the differences, and the media is compared too.
pub fn integrity_run(cfg: DriverConfig) -> Result<RunResult, DriverError> {
    let io = cfg.io_bytes as u64;
    let range = cfg.range_bytes - cfg.range_bytes % io.max(1);
    let mut m = Machine::boot(cfg.clone())?;
    let mut res = RunResult {
        limit_pages: cfg.limit_bytes.map(|b| b / PAGE as u64),
        ..RunResult::default()
    };
    let writes = Phase {
        workload: Workload::Writes,
        dontcache: cfg.dontcache,
        start: 0,
        range,
        until_ns: u64::MAX,
        max_ios: Some(cfg.max_ios.unwrap_or(2 * range / io)),
    };
    m.run_phase(&writes, &mut res)?;
    if res.refused.is_some() {
        return Ok(res);
    }
    m.fsync()?;
    m.drop_caches();
    let reads = Phase {
        workload: Workload::Reads,
        dontcache: false,
        start: 0,
        range,
        until_ns: u64::MAX,
        max_ios: Some(range / io),
    };
    m.run_phase(&reads, &mut res)?;
    if cfg.dontcache {
        // Once more through RWF_DONTCACHE's own read path into an empty cache: readahead's
        // dropbehind folios, each dropped after its copy (`filemap_end_dropbehind_read()`).
        m.drop_caches();
        let dontcache_reads = Phase {
            dontcache: true,
            ..reads
        };
        m.run_phase(&dontcache_reads, &mut res)?;
    }
    m.drain()?;
    let media = m.dev.read_media(0, range as usize);
    let want = m.expected(0, range as usize);
    res.corrupt_bytes += media.iter().zip(&want).filter(|(a, b)| a != b).count() as u64;
    m.finish(&mut res);
    Ok(res)
}

/// The bdev mapping's page cache of a run: `cfg`'s design and path, sized to the range, under
/// its memcg limit, forced, with its v3 hook and machine memory (what the runtimes' drivers
/// share).
pub(super) fn page_cache_config(cfg: &DriverConfig) -> PageCacheConfig {
    let mut pc = PageCacheConfig::new(cfg.design, cfg.path)
        .with_nr_pages(cfg.range_bytes.div_ceil(PAGE as u64))
        .with_machine_memory(cfg.machine_memory_bytes);
    if let Some(l) = cfg.limit_bytes {
        pc = pc.with_limit(l / PAGE as u64);
    }
    if cfg.force_dontcache {
        pc = pc.with_force_dontcache();
    }
    if cfg.cgroup_v2 {
        pc = pc.with_cgroup_v2();
    }
    if let Some(order) = cfg.page_reporting_order {
        pc = pc.with_page_reporting(order);
    }
    if let Some(hook) = &cfg.dropbehind_irq {
        pc = pc.with_dropbehind_irq(Arc::clone(hook));
    }
    pc
}

/// The calls into bio-core's page cache (Seam 1), in one place.
mod kernel_calls {
    use super::*;
    use bio_core::block::fops::{blkdev_read_iter, blkdev_write_iter, RWF_DONTCACHE};

    /// Work counted between two snapshots, in units [`PageCosts`] prices.
    #[derive(Debug, Default)]
    pub struct Work {
        pub copied: u64,
        pub added: u64,
        pub scanned: u64,
        pub evicted: u64,
        pub invalidated: u64,
        pub written_back: u64,
        pub reported: u64,
    }

    /// The block device's own mapping (`bdev->bd_mapping`) of the run's design and path, sized to
    /// the range, under the run's memcg limit.
    pub fn bdev_mapping(
        kernel: &Arc<Kernel>,
        cfg: &DriverConfig,
    ) -> Result<Arc<AddressSpace>, DriverError> {
        Ok(AddressSpace::new(kernel, page_cache_config(cfg)))
    }

    pub fn stats(m: &AddressSpace) -> PageCacheStats {
        m.stats()
    }

    pub fn work_delta(a: &PageCacheStats, b: &PageCacheStats) -> Work {
        let d = b.since(a);
        Work {
            copied: d.copied_to_user_pages + d.copied_from_user_pages,
            added: d.folios_added,
            scanned: d.reclaim_scanned,
            evicted: d.reclaim_evicted,
            invalidated: d.dropbehind_invalidated + d.invalidated_pages,
            written_back: d.writeback_pages,
            reported: d.reported_pages_allocated,
        }
    }

    fn rwf(dontcache: bool) -> u32 {
        if dontcache {
            RWF_DONTCACHE
        } else {
            0
        }
    }

    /// One step of a syscall: (bytes moved, bios to submit, what it waits for).
    pub type Step = (usize, Vec<Box<Bio>>, Option<Blocked>);

    /// One step of `preadv2()`.
    pub fn read(
        m: &AddressSpace,
        cx: &Cpu,
        pos: u64,
        buf: &mut [u8],
        dontcache: bool,
    ) -> Result<Step, Errno> {
        let p = blkdev_read_iter(m, cx, pos, buf, rwf(dontcache))?;
        Ok((p.copied, p.submit, p.blocked))
    }

    /// One step of `pwritev2()`.
    pub fn write(
        m: &AddressSpace,
        cx: &Cpu,
        pos: u64,
        data: &[u8],
        dontcache: bool,
    ) -> Result<Step, Errno> {
        let p = blkdev_write_iter(m, cx, pos, data, rwf(dontcache))?;
        Ok((p.written, p.submit, p.blocked))
    }

    /// One step of `fsync()`: (bios to submit, still waiting).
    pub fn fsync(m: &AddressSpace, cx: &Cpu) -> (Vec<Box<Bio>>, bool) {
        let p = m.fsync(cx);
        (p.submit, p.blocked.is_some())
    }

    /// One step of `file_write_and_wait_range()` of bytes `start..=end`: (bios to submit, still
    /// waiting).
    pub fn write_and_wait_range(
        m: &AddressSpace,
        cx: &Cpu,
        start: u64,
        end: u64,
    ) -> (Vec<Box<Bio>>, bool) {
        let p = m.filemap_write_and_wait_range(cx, start, end);
        (p.submit, p.blocked.is_some())
    }

    /// The bios the flusher submitted in its last step.
    pub fn flusher_bios(m: &AddressSpace) -> Vec<Box<Bio>> {
        m.wb_take_submitted()
    }

    pub fn drop_caches(m: &AddressSpace, cx: &Cpu) {
        m.invalidate_mapping_pages(cx, 0, u64::MAX);
    }

    pub fn left_behind(m: &AddressSpace) -> u64 {
        m.dropbehind_left().len() as u64
    }
}

/// A request of the simulated device as the block tracepoints print it: its first bio's sector
/// and `bi_opf`, and every bio's sectors (the plug merged them, contiguous).
fn request_trace(dev: (u32, u32), bios: &[Box<Bio>]) -> Option<RqTrace> {
    let first = bios.first()?;
    let bytes: u64 = bios.iter().map(|b| NvmeDevice::bio_bytes(b)).sum();
    Some(RqTrace {
        dev,
        rwbs: first.bi_opf.rwbs_buf(),
        sector: first.bi_iter.bi_sector,
        nr_sector: bytes / 512,
    })
}
