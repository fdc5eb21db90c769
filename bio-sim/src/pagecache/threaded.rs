//! The page cache of a block device on the [threaded runtime](crate::runtime::threaded), with
//! real work and real time: `block/fops.c`'s `blkdev_read_iter()` / `blkdev_write_iter()` over
//! `mm/filemap.c` (bio-core's `mm`: the mapping, reclaim of `mm/vmscan.c`,
//! `balance_dirty_pages()` of `mm/page-writeback.c`, the flusher of `fs/fs-writeback.c`,
//! DONTCACHE's dropbehind, writeback through `fs/iomap` or `fs/buffer.c`) above null_blk with
//! memory backing (`drivers/block/null_blk/main.c`).
//!
//! - The workload (1 MiB `preadv2()`/`pwritev2()`, with or without `RWF_DONTCACHE`, over the
//!   range from offset 0, wrapping) is one task on simulated CPU 0's thread. Copies between the
//!   user buffer and the folios, and between bios and null_blk's pages, are real `memcpy`s.
//! - The task submits the bios its syscalls build (readahead, DONTCACHE's writeback kick,
//!   `fsync`) with `submit_bio_noacct()`; the flusher (`wb_workfn`) is a kworker of the unbound
//!   `writeback` workqueue that submits its own ([`PageCacheConfig::bdev`]).
//! - null_blk completes each request in `BLOCK_SOFTIRQ` on the submitting CPU (`irqmode=1`) or
//!   in the submitter's context (`irqmode=0`), and `bio_endio()` runs there; a
//!   `BIO_COMPLETE_IN_TASK` bio goes to the design's per-CPU batch, whose worker ends it in task
//!   context. XFS's `xfs-conv` and RFC v3's batch work are kworkers too.
//! - jiffies follow the host clock (the runtime's ticker), so v5/v6's one-jiffy delayed work and
//!   the kupdate timer fire when they would.
//! - After each syscall step the task's CPU runs what became runnable on it: the softirqs the
//!   step's submissions raised (raised from task context, the kernel runs them in `ksoftirqd` or
//!   at the next `irq_exit()`; the model runs them there and then, the task still `current`), its due
//!   timers and the kworkers woken on it (the deferred completions' batch workers, which preempt
//!   the task at the next tick). Without that a task that never sleeps would starve its CPU's
//!   completions, which the runtime's CPU thread takes only between events.
//! - A task that waits (`folio_wait_locked()`, `folio_wait_writeback()`, reclaim's throttle,
//!   `balance_dirty_pages()`) sleeps in `wait_until`, its CPU running other events meanwhile.
//!   `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)` sleeps as the kernel's does, until
//!   `__acct_reclaim_writeback()` wakes it or `HZ/10` jiffies pass; `balance_dirty_pages()`
//!   pauses in `io_schedule_timeout()` and only its timeout ends the pause. A charge that found
//!   the memcg full with nothing to free (or, with `__GFP_FS`, a `PG_reclaim` folio under
//!   writeback) retries after a completion or a millisecond, whichever comes first: a
//!   simplification of the kernel's reclaim retries and `folio_wait_writeback()`.
//!
//! Measured: bytes per wall-clock second (the table's rows), the process's CPU time over the
//! timed part (`getrusage(RUSAGE_SELF)`: every thread, the simulated CPUs, kworkers and the ticker
//! included), the footprint at each second's end, peak and final, the dropbehind folios left once
//! all writeback completed, the completions deferred. The [oracle](super::dropbehind_oracle)
//! judges a run's [`RunResult`] as it judges the discrete-event driver's.
//!
//! Against the [discrete-event driver](super::driver): nothing is priced (the host's CPUs do the
//! work, so figures vary from run to run and with the host's load), the device is null_blk (no
//! device time: a completion costs a softirq) rather than the NVMe-like model, and the timed
//! part includes the workload's own buffer fill and read verification.

// Bios travel boxed everywhere in bio-core; a list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

use super::driver::{page_cache_config, DeferCount, DriverConfig, DriverError, RunResult};
use super::seed_presets::Workload;
use super::workload_pattern::{range_pattern, PAGE};
use crate::perf::job::cpu::CpuSnapshot;
use crate::runtime::threaded::{ThreadedConfig, ThreadedRuntime};
use bio_core::block::complete_in_task::{bio_complete_init, BatcherObserver};
use bio_core::block::fops::{blkdev_read_iter, blkdev_write_iter, RWF_DONTCACHE};
use bio_core::block::{submit_bio_noacct, Bio, BioEndIo, BlockDriver, ReqOp, BLK_STS_OK};
use bio_core::drivers::block::null_blk::{NullBlk, NullBlkConfig, NullIrqMode};
use bio_core::errno::Errno;
use bio_core::kernel::CpuId;
use bio_core::mm::filemap::{AddressSpace, Blocked, PageCacheStats};
use bio_core::workqueue::PoolId;
use bio_core::{Cpu, Kernel, KernelConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The device of a threaded run: null_blk's `irqmode` and `hw_queue_depth` (memory backing is
/// always on: reads must return what was written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NullBlkDevice {
    /// `irqmode`: `Softirq` (1, the module's default) or `None` (0). `Timer` is refused: its
    /// hrtimer thread is not what this run measures.
    pub irqmode: NullIrqMode,
    /// `hw_queue_depth`.
    pub hw_queue_depth: u32,
}

impl Default for NullBlkDevice {
    fn default() -> Self {
        Self {
            irqmode: NullIrqMode::Softirq,
            hw_queue_depth: 64,
        }
    }
}

/// What one threaded run measured: the discrete-event driver's [`RunResult`] (its seconds are
/// wall-clock seconds, its `cpu_time` empty) and the host's figures.
#[derive(Debug, Clone, Default)]
pub struct ThreadedRun {
    /// The run's figures, as the oracle reads them.
    pub run: RunResult,
    /// Wall-clock time of the timed part, ns.
    pub wall_ns: u64,
    /// CPU time of the whole process over the timed part, ns (`getrusage(RUSAGE_SELF)`).
    pub cpu_ns: u64,
    /// Requests null_blk completed in `BLOCK_SOFTIRQ`.
    pub softirqs: u64,
    /// Submissions that slept for a null_blk tag.
    pub tag_waits: u64,
}

impl ThreadedRun {
    /// Process CPU time per MiB moved by the task, ns (`None` if it moved nothing).
    pub fn cpu_ns_per_mib(&self) -> Option<f64> {
        (self.run.bytes > 0)
            .then(|| self.cpu_ns as f64 / (self.run.bytes as f64 / (1 << 20) as f64))
    }
}

/// How long a throttled task sleeps at most before it retries (see the module docs).
const THROTTLE_RETRY: Duration = Duration::from_millis(1);

/// A task that makes no progress for this long is stuck (a lost completion).
const STALL: Duration = Duration::from_secs(20);

/// How long the machine may take to finish its writeback after the workload.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// What the device holds, or the workload last wrote: each page is its pass-0 pattern
/// ([`range_pattern`]) with the pass stamped into its first 8 bytes, so a write buffer is one copy
/// of the base and a stamp per page (as fio refills a buffer), and every read is checked.
struct Expected {
    base: Vec<u8>,
    passes: Vec<u64>,
}

impl Expected {
    fn new(range: u64) -> Self {
        Self {
            base: range_pattern(0, range as usize, |_| 0),
            passes: vec![0; (range / PAGE as u64) as usize],
        }
    }

    fn stamp(pass: u64) -> [u8; 8] {
        pass.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes()
    }

    /// The bytes of `[pos, pos + out.len())` with page `i` at pass `pass_of(i)`.
    fn fill(&self, pos: u64, out: &mut [u8], pass_of: impl Fn(usize) -> u64) {
        let at = pos as usize;
        out.copy_from_slice(&self.base[at..at + out.len()]);
        for (k, page) in out.chunks_mut(PAGE).enumerate() {
            let pass = pass_of(at / PAGE + k);
            if pass != 0 {
                for (b, s) in page.iter_mut().zip(Self::stamp(pass)) {
                    *b ^= s;
                }
            }
        }
    }

    /// Bytes of `got` (read at `pos`) that differ from what must be there.
    fn differing(&self, pos: u64, got: &[u8]) -> u64 {
        self.differing_where(pos, got, |_| true)
    }

    /// [`Expected::differing`] over the pages the workload wrote (the others of a device that
    /// was not prefilled hold whatever it held: null_blk's zeros).
    fn differing_written(&self, pos: u64, got: &[u8]) -> u64 {
        self.differing_where(pos, got, |i| self.passes[i] != 0)
    }

    fn differing_where(&self, pos: u64, got: &[u8], check: impl Fn(usize) -> bool) -> u64 {
        let at = pos as usize;
        let mut bad = 0;
        for (k, page) in got.chunks(PAGE).enumerate() {
            let i = at / PAGE + k;
            if !check(i) {
                continue;
            }
            let base = &self.base[i * PAGE..i * PAGE + page.len()];
            let stamp = Self::stamp(self.passes[i]);
            if page[8..] != base[8..]
                || page[..8]
                    .iter()
                    .zip(&base[..8])
                    .zip(stamp)
                    .any(|((g, b), s)| *g != b ^ s)
            {
                bad += page
                    .iter()
                    .zip(base)
                    .enumerate()
                    .filter(|(j, (g, b))| **g != if *j < 8 { *b ^ stamp[*j] } else { **b })
                    .count() as u64;
            }
        }
        bad
    }
}

/// One phase of the task: what it does, for how long.
#[derive(Debug, Clone, Copy)]
struct Phase {
    workload: Workload,
    dontcache: bool,
    /// The range in bytes from offset 0 (a multiple of the syscall size).
    range: u64,
    /// Wall-clock seconds (the table's rows); the task starts no syscall after them.
    seconds: Option<u64>,
    /// Stop after this many syscalls.
    max_ios: Option<u64>,
}

/// What the task reports back from a phase.
#[derive(Debug, Default)]
struct PhaseOut {
    per_second: Vec<u64>,
    footprint: Vec<u64>,
    bytes: u64,
    ios: u64,
    corrupt_bytes: u64,
    refused: Option<Errno>,
    elapsed_ns: u64,
    /// The counters and the dropbehind folios left as the last syscall returned (the final
    /// counts of the `bug-pagecache-threaded-no-settle` twin).
    at_end: (PageCacheStats, u64),
    error: Option<String>,
}

/// What the task needs on its CPU.
#[derive(Clone)]
struct TaskCtx {
    mapping: Arc<AddressSpace>,
    dev: Arc<dyn BlockDriver>,
    io_bytes: usize,
    expected: Arc<Mutex<Expected>>,
}

/// The completions a throttled task waits for (by anyone but itself): writeback and reads
/// ended, flusher steps, RFC v3's work on the folios it took.
fn completions(s: &PageCacheStats) -> [u64; 4] {
    [
        s.writeback_ended_in_task + s.writeback_ended_in_irq,
        s.reads_ended_in_task + s.reads_ended_in_irq,
        s.flusher_runs,
        s.v3_invalidated + s.v3_skipped_locked + s.v3_skipped_dirty_or_writeback + s.v3_gone,
    ]
}

/// Sleeps in task context until what `b` waits for may have happened.
fn wait_blocked(cx: &Cpu, mapping: &AddressSpace, b: Blocked, before: [u64; 4]) {
    match b {
        Blocked::FolioLocked(i) => {
            cx.wait_until("folio_wait_locked", &|| {
                !mapping.folio(i).is_some_and(|f| f.locked)
            });
        }
        Blocked::Writeback(i) => {
            cx.wait_until("folio_wait_writeback", &|| {
                !mapping.folio(i).is_some_and(|f| f.writeback)
            });
        }
        Blocked::DirtyThrottle { pause } => {
            // io_schedule_timeout(pause): a sleep of `pause` jiffies, whatever completes
            // meanwhile. The page cache's runtime always runs the ticker (the flusher's delayed
            // work needs it too), so jiffies move, at `tick_scale` times CONFIG_HZ real time.
            let k = cx.kernel();
            let target = k.jiffies() + pause;
            cx.wait_until("balance_dirty_pages", &|| k.jiffies() >= target);
        }
        Blocked::ReclaimThrottle => {
            // schedule_timeout(HZ/10) on the reclaim wait queue.
            let sleep = mapping.reclaim_throttle_begin();
            let k = cx.kernel();
            cx.wait_until("reclaim_throttle", &|| {
                mapping.reclaim_throttle_woken(&sleep) || k.jiffies() >= sleep.fires_at
            });
            mapping.reclaim_throttle_end(cx, sleep);
        }
        Blocked::Memcg => {
            let until = Instant::now() + THROTTLE_RETRY;
            cx.wait_until("mem_cgroup_charge", &|| {
                completions(&mapping.stats()) != before || Instant::now() >= until
            });
        }
    }
}

/// What the kernel runs on the task's CPU right after a syscall step, before the task's next
/// one: the softirqs its submissions raised (null_blk's `BLOCK_SOFTIRQ` completions, raised from
/// task context, which the kernel hands to `ksoftirqd` or runs at the next `irq_exit()`: the
/// model runs them here, with the task still `current`), the timers due on it, and the
/// kworkers woken on it (its per-CPU pool: the batch workers of deferred completions, which
/// preempt the task at the next tick). The runtime's CPU thread would run them only between
/// events or while the task sleeps; a task that never sleeps would starve them.
fn run_pending_here(cx: &Cpu) {
    let k = cx.kernel();
    cx.cond_resched();
    loop {
        let mut n = k.run_softirqs(cx) + k.run_timers(cx);
        while k.run_worker(PoolId::Cpu(cx.id()), cx).is_some() {
            n += 1;
        }
        if n == 0 {
            return;
        }
    }
}

fn end_counts(mapping: &AddressSpace) -> (PageCacheStats, u64) {
    (mapping.stats(), mapping.dropbehind_left().len() as u64)
}

fn submit_all(cx: &Cpu, dev: &Arc<dyn BlockDriver>, bios: Vec<Box<Bio>>) {
    for bio in bios {
        submit_bio_noacct(bio, &**dev, cx);
    }
}

/// The task of one phase, on its CPU's thread.
fn task_phase(cx: &Cpu, t: &TaskCtx, ph: &Phase) -> PhaseOut {
    let mut out = PhaseOut::default();
    let mut exp = t.expected.lock().unwrap_or_else(|e| e.into_inner());
    let io = t.io_bytes;
    let range = ph.range - ph.range % io as u64;
    let rwf = if ph.dontcache { RWF_DONTCACHE } else { 0 };
    let rows = ph.seconds.map(|s| s as usize);
    let start = Instant::now();
    let deadline = ph.seconds.map(|s| start + Duration::from_secs(s));
    let mut next_pos = 0u64;
    let mut write_pass = exp.passes.iter().copied().max().unwrap_or(0) + 1;
    let mut buf = vec![0u8; io];
    loop {
        if ph.max_ios.is_some_and(|m| out.ios >= m) || deadline.is_some_and(|d| Instant::now() >= d)
        {
            break;
        }
        let pos = next_pos;
        next_pos += io as u64;
        if next_pos >= range {
            next_pos = 0;
        }
        let pass = write_pass;
        if ph.workload == Workload::Writes {
            if next_pos == 0 {
                write_pass += 1;
            }
            exp.fill(pos, &mut buf, |_| pass);
        }
        let mut done = 0usize;
        let mut last_progress = Instant::now();
        while done < io {
            let step = match ph.workload {
                Workload::Reads => {
                    blkdev_read_iter(&t.mapping, cx, pos + done as u64, &mut buf[done..], rwf)
                        .map(|p| (p.copied, p.submit, p.blocked))
                }
                Workload::Writes => {
                    blkdev_write_iter(&t.mapping, cx, pos + done as u64, &buf[done..], rwf)
                        .map(|p| (p.written, p.submit, p.blocked))
                }
            };
            let (progress, bios, blocked) = match step {
                Ok(s) => s,
                Err(e) => {
                    out.refused = Some(e);
                    out.at_end = end_counts(&t.mapping);
                    return out;
                }
            };
            submit_all(cx, &t.dev, bios);
            run_pending_here(cx);
            // Sampled after the task ran its own CPU's completions: a throttled wait ends on
            // completions by anyone but itself (or its timeout).
            let before = completions(&t.mapping.stats());
            done += progress;
            let sec = start.elapsed().as_secs() as usize;
            if rows.is_none_or(|r| sec < r) {
                if out.per_second.len() <= sec {
                    out.per_second.resize(sec + 1, 0);
                    out.footprint.resize(sec + 1, 0);
                }
                out.per_second[sec] += progress as u64;
                out.footprint[sec] = t.mapping.stats().nr_cached;
            }
            out.bytes += progress as u64;
            if done >= io {
                // A call that finished its bytes may still have reached reclaim_throttle()
                // (a read's async readahead): it sleeps before the syscall returns.
                if blocked == Some(Blocked::ReclaimThrottle) {
                    wait_blocked(cx, &t.mapping, Blocked::ReclaimThrottle, before);
                }
                break;
            }
            if progress > 0 {
                last_progress = Instant::now();
            } else if last_progress.elapsed() > STALL {
                out.error = Some(format!(
                    "the task made no progress for {STALL:?} at byte {} ({blocked:?})",
                    pos + done as u64
                ));
                out.at_end = end_counts(&t.mapping);
                return out;
            }
            match blocked {
                Some(b) => wait_blocked(cx, &t.mapping, b, before),
                None => cx.cond_resched(),
            }
        }
        match ph.workload {
            Workload::Reads => out.corrupt_bytes += exp.differing(pos, &buf),
            Workload::Writes => {
                let first = (pos / PAGE as u64) as usize;
                for p in &mut exp.passes[first..first + io / PAGE] {
                    *p = pass;
                }
            }
        }
        out.ios += 1;
        out.elapsed_ns = start.elapsed().as_nanos() as u64;
    }
    out.at_end = end_counts(&t.mapping);
    // A timed phase has one row per second, also for seconds in which nothing completed.
    if let Some(r) = rows {
        out.per_second.resize(r, 0);
        out.footprint.resize(r, out.at_end.0.nr_cached);
    }
    out
}

/// `fsync()` of the whole device in task context: start writeback, wait for it, until clean.
/// A stall is [`STALL`] without one I/O completion (the flusher's runs do not count: its kupdate
/// timer fires every 5 s while anything is dirty): a long fsync that keeps completing goes on.
fn task_fsync(cx: &Cpu, t: &TaskCtx) -> Result<(), String> {
    let io_done = |c: [u64; 4]| c[0] + c[1];
    let mut last_progress = Instant::now();
    let mut seen = io_done(completions(&t.mapping.stats()));
    loop {
        let before = completions(&t.mapping.stats());
        if io_done(before) != seen {
            (seen, last_progress) = (io_done(before), Instant::now());
        }
        let p = t.mapping.fsync(cx);
        submit_all(cx, &t.dev, p.submit);
        match p.blocked {
            None => return p.error.map_or(Ok(()), |e| Err(format!("fsync: {e:?}"))),
            Some(_) if last_progress.elapsed() > STALL => {
                return Err(format!("fsync made no progress for {STALL:?}"))
            }
            Some(b) => wait_blocked(cx, &t.mapping, b, before),
        }
    }
}

/// Fills `[0, range)` of the device with the pass-0 pattern (the disk as it was before the run),
/// 128 KiB write bios from task context, at most 32 in flight.
fn task_prefill(cx: &Cpu, t: &TaskCtx, range: u64) -> bool {
    const CHUNK: usize = 128 << 10;
    let exp = t.expected.lock().unwrap_or_else(|e| e.into_inner());
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let (d, f) = (Arc::clone(&done), Arc::clone(&failed));
    let end = BioEndIo::new("prefill_end_io", move |bio, _| {
        if bio.status() != BLK_STS_OK {
            f.fetch_add(1, Ordering::Relaxed);
        }
        d.fetch_add(1, Ordering::Release);
    });
    let mut n = 0u64;
    let mut pos = 0usize;
    while (pos as u64) < range {
        let len = CHUNK.min(range as usize - pos);
        let d = Arc::clone(&done);
        let sent = n;
        if !cx.wait_until("prefill: window", &|| sent < d.load(Ordering::Acquire) + 32) {
            return false;
        }
        let bio = cx
            .kernel()
            .bio_alloc(ReqOp::Write, pos as u64 / 512)
            .with_data(exp.base[pos..pos + len].to_vec())
            .with_end_io(end.clone());
        submit_bio_noacct(bio, &*t.dev, cx);
        n += 1;
        pos += len;
    }
    cx.wait_until("prefill: all written", &|| {
        done.load(Ordering::Acquire) >= n
    }) && failed.load(Ordering::Relaxed) == 0
}

/// The machine of one threaded run.
struct Machine {
    cfg: DriverConfig,
    rt: ThreadedRuntime,
    kernel: Arc<Kernel>,
    nb: Arc<NullBlk>,
    task: TaskCtx,
    deferred: Arc<DeferCount>,
}

fn threaded_err(e: impl std::fmt::Display) -> DriverError {
    DriverError::Threaded(e.to_string())
}

impl Machine {
    fn boot(cfg: DriverConfig, dev: NullBlkDevice) -> Result<Self, DriverError> {
        if cfg.io_bytes == 0 || !cfg.io_bytes.is_multiple_of(PAGE) {
            return Err(DriverError::Config(format!(
                "io size {} is not a positive multiple of 4096",
                cfg.io_bytes
            )));
        }
        if cfg.range_bytes < cfg.io_bytes as u64 || !cfg.range_bytes.is_multiple_of(PAGE as u64) {
            return Err(DriverError::Config(format!(
                "range {} is not a multiple of 4096 of at least one syscall ({})",
                cfg.range_bytes, cfg.io_bytes
            )));
        }
        if cfg.task_cpu >= cfg.nr_cpus {
            return Err(DriverError::Config(format!(
                "task CPU{} does not exist ({} CPUs)",
                cfg.task_cpu, cfg.nr_cpus
            )));
        }
        if cfg.capture || cfg.twin.is_some() {
            return Err(DriverError::Config(
                "the threaded run has no trace capture and no device twin (deterministic \
                 runtime only)"
                    .into(),
            ));
        }
        if dev.irqmode == NullIrqMode::Timer {
            return Err(DriverError::Config(
                "null_blk irqmode=2 (timer) is not a device of this run: use none or softirq"
                    .into(),
            ));
        }
        let kconfig = KernelConfig {
            hz: cfg.hz,
            ..KernelConfig::default()
        };
        let kernel =
            Kernel::new(kconfig, cfg.nr_cpus).map_err(|e| DriverError::Boot(e.to_string()))?;
        let deferred = Arc::new(DeferCount::default());
        let observer: Arc<dyn BatcherObserver> = deferred.clone();
        bio_complete_init(&kernel, cfg.design.boot_variant(), Some(observer))
            .map_err(|e| DriverError::Boot(e.to_string()))?;
        let nb = NullBlk::new(
            &kernel,
            0,
            NullBlkConfig {
                size_bytes: cfg.range_bytes,
                irqmode: dev.irqmode,
                hw_queue_depth: dev.hw_queue_depth,
                memory_backed: true,
                ..NullBlkConfig::default()
            },
        )
        .map_err(DriverError::Boot)?;
        let bdev: Arc<dyn BlockDriver> = nb.clone();
        let mapping = AddressSpace::try_new(
            &kernel,
            page_cache_config(&cfg)
                .with_bdev(Arc::clone(&bdev))
                .without_filemap_events(),
        )
        .map_err(DriverError::Boot)?;
        let rt = ThreadedRuntime::start(Arc::clone(&kernel), ThreadedConfig::default())
            .map_err(|e| DriverError::Boot(e.to_string()))?;
        let task = TaskCtx {
            mapping,
            dev: bdev,
            io_bytes: cfg.io_bytes,
            expected: Arc::new(Mutex::new(Expected::new(cfg.range_bytes))),
        };
        Ok(Self {
            cfg,
            rt,
            kernel,
            nb,
            task,
            deferred,
        })
    }

    /// Runs `f` in task context on the task's CPU and waits for it.
    fn on_task_cpu<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Cpu, &TaskCtx) -> R + Send + 'static,
    ) -> Result<R, DriverError> {
        let t = self.task.clone();
        self.rt
            .run_on(CpuId(self.cfg.task_cpu), move |cx| f(cx, &t))
            .map_err(threaded_err)
    }

    fn prefill(&self) -> Result<(), DriverError> {
        let range = self.cfg.range_bytes;
        if self.on_task_cpu(move |cx, t| task_prefill(cx, t, range))? {
            Ok(())
        } else {
            Err(threaded_err("prefilling null_blk failed"))
        }
    }

    /// One phase, its figures added to `res`; returns the counters as its last syscall returned.
    fn phase(&self, ph: Phase, res: &mut RunResult) -> Result<(PageCacheStats, u64), DriverError> {
        let out = self.on_task_cpu(move |cx, t| task_phase(cx, t, &ph))?;
        if let Some(e) = out.error {
            return Err(threaded_err(e));
        }
        res.per_second.extend(out.per_second);
        res.footprint.extend(out.footprint);
        res.bytes += out.bytes;
        res.ios += out.ios;
        res.corrupt_bytes += out.corrupt_bytes;
        res.elapsed_ns += out.elapsed_ns;
        res.refused = res.refused.or(out.refused);
        Ok(out.at_end)
    }

    /// Waits until every bio in flight completed and the deferred completions, the flusher's
    /// work and the delayed work ran: the machine quiesces and the counters stay the same over a
    /// few jiffies with no folio under writeback.
    fn settle(&self) -> Result<(), DriverError> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        let hz = u64::from(self.kernel.config().hz).max(1);
        let jiffies3 = Duration::from_micros(3_000_000 / hz);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.rt.quiesce(left) {
                return Err(threaded_err(format!(
                    "the machine did not settle within {SETTLE_TIMEOUT:?}: {:?}",
                    self.task.mapping.stats()
                )));
            }
            let before = self.task.mapping.stats();
            std::thread::sleep(jiffies3);
            if !self.rt.quiesce(left) {
                continue;
            }
            let after = self.task.mapping.stats();
            if after == before && after.nr_writeback == 0 {
                return Ok(());
            }
        }
    }

    /// Bytes of null_blk's memory in `[0, range)` that differ from what the workload last wrote
    /// there (or the pass-0 pattern), over the written pages only with `written_only`.
    fn media_differing(&self, range: u64, written_only: bool) -> Result<u64, DriverError> {
        let exp = self.task.expected.lock().unwrap_or_else(|e| e.into_inner());
        match self.nb.read_backing(0, range as usize) {
            Some(media) if written_only => Ok(exp.differing_written(0, &media)),
            Some(media) => Ok(exp.differing(0, &media)),
            None => Err(threaded_err("null_blk has no memory backing")),
        }
    }

    /// The end-of-run counts (after [`Machine::settle`], or `at_end` under the twin).
    fn finish(&self, res: &mut RunResult, at_end: (PageCacheStats, u64)) {
        // The twin counts when the last syscall returned, its folios still under writeback.
        let (stats, left) = if cfg!(feature = "bug-pagecache-threaded-no-settle") {
            at_end
        } else {
            end_counts(&self.task.mapping)
        };
        res.final_cached = stats.nr_cached;
        res.peak_cached = stats.peak_cached;
        res.left_behind = left;
        res.deferred = self.deferred.0.load(Ordering::Relaxed);
        res.stats = stats;
        res.limit_pages = self.cfg.limit_bytes.map(|b| b / PAGE as u64);
        res.v3_hook = self.cfg.dropbehind_irq.is_some();
        res.hz = self.cfg.hz;
    }

    /// Stops the machine: anything left but the flusher's kupdate timer (dirty folios stay
    /// dirty after a normal write run, as they would on the kernel), or a kernel report, is an
    /// error.
    fn shutdown(self, out: &mut ThreadedRun) -> Result<(), DriverError> {
        let st = self.nb.stats();
        out.softirqs = st.softirqs;
        out.tag_waits = st.tag_waits;
        let kernel = Arc::clone(&self.kernel);
        let report = self.rt.shutdown();
        let left = !report.quiesced
            || !report.pending_irqs.is_empty()
            || !report.pending_softirqs.is_empty()
            || !report.pools.is_empty()
            || !report.panics.is_empty()
            || !report.stuck_threads.is_empty()
            || report.refused_messages > 0;
        if left {
            return Err(threaded_err(format!("unclean shutdown:\n{report}")));
        }
        if let Some(r) = kernel.reports().all().first() {
            return Err(threaded_err(format!("kernel report: {}", r.message)));
        }
        Ok(())
    }
}

/// One run of `cfg` on the threaded runtime over null_blk: the workload for `cfg.duration_ns`
/// of wall-clock time rounded up to whole seconds (or `cfg.max_ios` syscalls), then all
/// writeback completes. Reads go over a device filled with the pass-0 pattern first (untimed).
pub fn run_threaded(cfg: DriverConfig, dev: NullBlkDevice) -> Result<ThreadedRun, DriverError> {
    let seconds = cfg.duration_ns.div_ceil(1_000_000_000).max(1);
    let ph = Phase {
        workload: cfg.workload,
        dontcache: cfg.dontcache,
        range: cfg.range_bytes,
        seconds: cfg.max_ios.is_none().then_some(seconds),
        max_ios: cfg.max_ios,
    };
    let m = Machine::boot(cfg, dev)?;
    if ph.workload == Workload::Reads {
        m.prefill()?;
    }
    let mut out = ThreadedRun::default();
    let c0 = CpuSnapshot::now();
    let t0 = Instant::now();
    let at_end = m.phase(ph, &mut out.run)?;
    out.wall_ns = t0.elapsed().as_nanos() as u64;
    out.cpu_ns = c0.until(&CpuSnapshot::now()).process.as_nanos() as u64;
    if !cfg!(feature = "bug-pagecache-threaded-no-settle") {
        m.settle()?;
    }
    m.finish(&mut out.run, at_end);
    if ph.workload == Workload::Writes && out.run.refused.is_none() {
        // The device against what the writes wrote, after the figures are taken: fsync() what
        // a normal run left dirty, then null_blk's memory must hold every page's last pass.
        m.on_task_cpu(task_fsync)?.map_err(threaded_err)?;
        m.settle()?;
        out.run.corrupt_bytes += m.media_differing(ph.range, true)?;
    }
    m.shutdown(&mut out)?;
    Ok(out)
}

/// Data integrity through the cache on the threaded runtime: `cfg`'s writes (with or without
/// DONTCACHE; `cfg.max_ios` syscalls, or twice over the range), `fsync()`, drop the cache, read
/// the range back with plain reads and compare with what was written; `corrupt_bytes` counts the
/// differences, null_blk's memory compared too.
pub fn integrity_run_threaded(
    cfg: DriverConfig,
    dev: NullBlkDevice,
) -> Result<ThreadedRun, DriverError> {
    let io = cfg.io_bytes.max(1) as u64;
    let range = cfg.range_bytes - cfg.range_bytes % io;
    let writes = Phase {
        workload: Workload::Writes,
        dontcache: cfg.dontcache,
        range,
        seconds: None,
        max_ios: Some(cfg.max_ios.unwrap_or(2 * range / io)),
    };
    let reads = Phase {
        workload: Workload::Reads,
        dontcache: false,
        range,
        seconds: None,
        max_ios: Some(range / io),
    };
    let partial = writes.max_ios.is_some_and(|n| n < range / io);
    let m = Machine::boot(cfg, dev)?;
    if partial {
        // Writes that do not cover the range leave pages the read-back and the media check
        // compare too: they hold the pass-0 pattern, as a disk holds what it held before.
        m.prefill()?;
    }
    let mut out = ThreadedRun::default();
    let t0 = Instant::now();
    let c0 = CpuSnapshot::now();
    m.phase(writes, &mut out.run)?;
    if out.run.refused.is_some() {
        m.shutdown(&mut out)?;
        return Ok(out);
    }
    m.on_task_cpu(task_fsync)?.map_err(threaded_err)?;
    m.on_task_cpu(|cx, t| t.mapping.invalidate_mapping_pages(cx, 0, u64::MAX))?;
    let at_end = m.phase(reads, &mut out.run)?;
    out.wall_ns = t0.elapsed().as_nanos() as u64;
    out.cpu_ns = c0.until(&CpuSnapshot::now()).process.as_nanos() as u64;
    m.settle()?;
    out.run.corrupt_bytes += m.media_differing(range, false)?;
    m.finish(&mut out.run, at_end);
    m.shutdown(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests;
