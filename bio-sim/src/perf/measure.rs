//! Measurements of the bio completion paths on the threaded runtime (deferral throughput, completion
//! latency and worker wake-ups per bio), shared by `biosim findings` and the benchmarks.
//!
//! Everything here runs on the [threaded runtime](crate::runtime::threaded): one OS thread per
//! simulated CPU, real time, a real-time jiffies ticker at the kernel config's `CONFIG_HZ`. Bios
//! are completed the way a driver completes them: a hard interrupt is raised on a simulated CPU
//! (`Kernel::raise_irq`) and its handler calls [`bio_endio`] on a batch of bios in hardirq
//! context on that CPU's thread. The functions return plain result structs and print nothing;
//! the structs implement `Display` for whoever wants to print them.
//!
//! # Deferral throughput ([`deferral_throughput`], issue 5 "Performance")
//!
//! Bios per second from `bio_endio()` to `bi_end_io` having run, for three designs on the same
//! producer pattern and the same number of bios, rounds interleaved so a noisy host hurts all three
//! alike:
//!
//! - [`Design::Batched`]: the real task-completion batcher (`BIO_COMPLETE_IN_TASK` bios, variant
//!   v7 by default): `bio_endio()` → `__bio_complete_in_task()` → per-CPU batch →
//!   `bio_complete_work_fn` on the CPU's worker → `bi_end_io` in task context.
//! - [`Design::Direct`]: unflagged bios, `bi_end_io` called by `bio_endio()` in the interrupt: no
//!   deferral at all, the lower bound on cost.
//! - [`Design::Channel`]: the naive hand-off: every bio is sent over a crossbeam channel to one
//!   dedicated worker OS thread that calls its `bi_end_io` in task context (the `bi_end_io` sees
//!   it runs in atomic context and sends itself, as a `bio_complete_in_task()` user would).
//!
//! The producer is closed-loop, like a device with a fixed queue depth: each CPU starts with
//! [`ThroughputConfig::irqs_in_flight`] interrupts of [`ThroughputConfig::bios_per_irq`] bios
//! each, and every `bios_per_irq` completions of bios from CPU n raise the next interrupt on CPU n
//! until the round's bios are used up. Bios are allocated before the clock starts; a round is
//! timed from raising the first interrupt to the last `bi_end_io` returning.
//!
//! # Completion latency ([`completion_latency`], finding 8)
//!
//! The time from the interrupt handler calling `bio_endio()` to the bio's `bi_end_io` starting in
//! the worker, for one batcher variant (v6: 1-jiffy delayed work; v7: plain work), under a light
//! load (one bio per interrupt, one at a time, an idle gap between) and a bursty one (bursts of
//! interrupts a little apart, an idle gap between bursts). With the delay, a bio waits for the
//! next tick: up to one jiffy, 4 ms at `CONFIG_HZ=250`.
//!
//! # What a "wake-up" is
//!
//! - **Worker wake-ups** ([`RoundStats::worker_wakeups`], [`LoadLatency::worker_wakeups`]): for
//!   the batcher, the runs of `bio_complete_work_fn` (from [`BatcherObserver::work_fn`]): each is
//!   a kworker being woken and switched to in the kernel, and here the CPU's thread switching from
//!   interrupt delivery to the worker. For the channel design, the times the dedicated worker
//!   thread found the channel empty and blocked until a send woke it. The direct design has no
//!   worker. The target: at most one per interrupt (one batch), i.e. at most
//!   `1 / bios_per_irq` per bio.
//! - **Work queued** ([`RoundStats::work_queued`]): `queue_work_on()`/`mod_delayed_work_on()`
//!   calls of the batcher that queued the work (from [`BatcherObserver::scheduled`]).
//! - **CPU-thread wake-ups** ([`RoundStats::cpu_thread_wakeups`]): OS-level wake-ups of the
//!   simulated CPUs' threads from idle sleep (the runtime's counters).

use crate::runtime::rng::SplitMix64;
use crate::runtime::threaded::{ThreadedConfig, ThreadedError, ThreadedRuntime};
use bio_core::block::complete_in_task::{
    bio_complete_init, BatcherObserver, InitError, Variant, WorkKind,
};
use bio_core::block::{bio_endio, bio_in_atomic, Bio, BioEndIo, BioFlag, ReqOp};
use bio_core::kernel::{ConfigError, CpuId};
use bio_core::{Cpu, Kernel, KernelConfig};
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Why a measurement could not be made. The machine it ran on is stopped before this is returned.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// The measurement's own configuration is unusable.
    #[error("invalid measurement config: {0}")]
    Config(String),
    /// The kernel config was rejected.
    #[error("kernel config: {0}")]
    Kernel(#[from] ConfigError),
    /// The task-completion batcher could not be initialised.
    #[error("batcher init: {0}")]
    Init(#[from] InitError),
    /// The threaded runtime could not start (or refused an operation).
    #[error("threaded runtime: {0}")]
    Runtime(#[from] ThreadedError),
    /// The channel design's worker thread could not be spawned.
    #[error("spawning the channel worker thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// An interrupt could not be raised.
    #[error("raising an IRQ on {cpu}: {reason}")]
    Raise {
        /// The CPU aimed at.
        cpu: CpuId,
        /// Why the kernel refused it.
        reason: &'static str,
    },
    /// Not every bio completed in time (a stranded bio, or a hopelessly overloaded host).
    #[error("{what}: {completed} of {expected} bios completed within {timeout:?}")]
    Timeout {
        /// What was being measured.
        what: String,
        /// Bios whose `bi_end_io` ran.
        completed: u64,
        /// Bios submitted.
        expected: u64,
        /// The timeout.
        timeout: Duration,
    },
    /// Work was still runnable long after the last completion.
    #[error("{what}: the machine did not quiesce within {timeout:?}")]
    NotQuiescent {
        /// What was being measured.
        what: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The runtime stopped with something still in flight.
    #[error("{what}: unclean shutdown of the threaded runtime:\n{report}")]
    Unclean {
        /// What was being measured.
        what: String,
        /// The runtime's shutdown report.
        report: String,
    },
    /// The machine was already shut down.
    #[error("the measurement machine is already shut down")]
    Stopped,
}

// ---------------------------------------------------------------------------------------------
// Shared pieces
// ---------------------------------------------------------------------------------------------

/// The bios one interrupt handler completes, boxed because `bio_endio()` takes `Box<Bio>`.
#[allow(clippy::vec_box)]
type Batch = Vec<Box<Bio>>;

/// An atomic counter on its own cache line (per-CPU counters bumped once per bio).
#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

/// The batcher observer of a measurement: counts work-function runs, queueing calls and
/// deferrals (per CPU, so the per-bio count does not bounce a cache line between CPUs).
struct BatchCounters {
    work_fn: AtomicU64,
    queued: AtomicU64,
    deferred: Box<[Padded]>,
}

impl BatchCounters {
    fn new(nr_cpus: u32) -> Self {
        Self {
            work_fn: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            deferred: (0..nr_cpus).map(|_| Padded::default()).collect(),
        }
    }

    fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.work_fn.load(Ordering::Acquire),
            self.queued.load(Ordering::Acquire),
            self.deferred
                .iter()
                .map(|p| p.0.load(Ordering::Acquire))
                .sum(),
        )
    }
}

impl BatcherObserver for BatchCounters {
    fn deferred(&self, _bio: u64, cx: &Cpu) {
        if let Some(p) = self.deferred.get(cx.id().index()) {
            p.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn work_fn(&self, _batch_cpu: CpuId, _cx: &Cpu) {
        self.work_fn.fetch_add(1, Ordering::Relaxed);
    }

    fn scheduled(&self, _batch_cpu: CpuId, queued: bool) {
        if queued {
            self.queued.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Boots a kernel and starts the threaded runtime on it, with the batcher if `variant` is given.
fn boot(
    kernel_config: KernelConfig,
    nr_cpus: u32,
    variant: Option<Variant>,
) -> Result<(Arc<Kernel>, ThreadedRuntime, Arc<BatchCounters>), MeasureError> {
    let kernel = Kernel::new(kernel_config, nr_cpus)?;
    let counters = Arc::new(BatchCounters::new(nr_cpus));
    if let Some(v) = variant {
        let observer: Arc<dyn BatcherObserver> = counters.clone();
        bio_complete_init(&kernel, v, Some(observer))?;
    }
    let rt = ThreadedRuntime::start(Arc::clone(&kernel), ThreadedConfig::default())?;
    Ok((kernel, rt, counters))
}

/// Drains the runtime (delayed work included) and stops it, reporting anything left in flight.
fn stop_runtime(rt: ThreadedRuntime, timeout: Duration, what: &str) -> Result<(), MeasureError> {
    let drained = rt.drain(timeout);
    let report = rt.shutdown();
    if !drained || !report.is_clean() {
        return Err(MeasureError::Unclean {
            what: what.to_owned(),
            report: report.to_string(),
        });
    }
    Ok(())
}

/// Total OS-level wake-ups of the CPU threads so far.
fn cpu_thread_wakeups(rt: &ThreadedRuntime) -> u64 {
    rt.stats().total().wakeups
}

/// The median of `xs` (0 for none); shared by the benchmarks.
pub(crate) fn median_f64(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Nearest-rank percentile of sorted samples (`p` in 0..=1); zero for no samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let n = sorted.len();
    let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

/// A duration as a short human figure (`812 ns`, `37.4 µs`, `2.10 ms`).
fn human(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.2} s", ns as f64 / 1e9)
    }
}

// ---------------------------------------------------------------------------------------------
// Deferral throughput
// ---------------------------------------------------------------------------------------------

/// One of the three completion designs compared by [`deferral_throughput`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Design {
    /// The task-completion batcher: flagged bios, per-CPU batch, `bio_complete_work_fn`.
    Batched,
    /// `bi_end_io` called directly by `bio_endio()` in the interrupt (no deferral).
    Direct,
    /// Each bio sent over a crossbeam channel to one dedicated worker thread.
    Channel,
}

impl Design {
    /// The three designs, in report order.
    pub const ALL: [Design; 3] = [Design::Batched, Design::Direct, Design::Channel];

    /// A short name: `batched`, `direct`, `channel`.
    pub fn name(self) -> &'static str {
        match self {
            Design::Batched => "batched",
            Design::Direct => "direct",
            Design::Channel => "channel",
        }
    }
}

impl fmt::Display for Design {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The parameters of [`deferral_throughput`] (and of one [`DeferralMachine`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThroughputConfig {
    /// The batcher variant of [`Design::Batched`] (default v7).
    pub variant: Variant,
    /// The kernel config (default: a distribution kernel, HZ=250).
    pub kernel: KernelConfig,
    /// Simulated CPUs, each one OS thread (default 2).
    pub nr_cpus: u32,
    /// Bios per round, rounded up to a whole number of interrupts per CPU (default 32768).
    pub bios: u64,
    /// Bios completed by one interrupt handler (the batch `k`; default 16).
    pub bios_per_irq: u32,
    /// Interrupts in flight per CPU: the closed loop's queue depth (default 4).
    pub irqs_in_flight: u32,
    /// Rounds per design; the report gives medians (default 11).
    pub rounds: u32,
    /// How long one round may take before it is declared stuck (default 10 s).
    pub timeout: Duration,
}

impl Default for ThroughputConfig {
    fn default() -> Self {
        Self {
            variant: Variant::V7,
            kernel: KernelConfig::default(),
            nr_cpus: 2,
            bios: 32768,
            bios_per_irq: 16,
            irqs_in_flight: 4,
            rounds: 11,
            timeout: Duration::from_secs(10),
        }
    }
}

impl ThroughputConfig {
    fn validate(&self) -> Result<(), MeasureError> {
        let bad = |m: &str| Err(MeasureError::Config(m.to_owned()));
        if self.nr_cpus == 0 {
            return bad("nr_cpus must be at least 1");
        }
        if self.bios == 0 {
            return bad("bios must be at least 1");
        }
        if self.bios_per_irq == 0 {
            return bad("bios_per_irq must be at least 1");
        }
        if self.irqs_in_flight == 0 {
            return bad("irqs_in_flight must be at least 1");
        }
        if self.rounds == 0 {
            return bad("rounds must be at least 1");
        }
        if self.timeout.is_zero() {
            return bad("timeout must not be zero");
        }
        Ok(())
    }

    /// Interrupts each CPU takes in one round.
    pub fn irqs_per_cpu(&self) -> u64 {
        let per_irq_all = u64::from(self.nr_cpus.max(1)) * u64::from(self.bios_per_irq.max(1));
        self.bios.div_ceil(per_irq_all).max(1)
    }

    /// Bios actually completed in one round: [`ThroughputConfig::bios`] rounded up to whole
    /// interrupts on every CPU.
    pub fn bios_per_round(&self) -> u64 {
        self.irqs_per_cpu() * u64::from(self.bios_per_irq.max(1)) * u64::from(self.nr_cpus.max(1))
    }

    /// Interrupts raised in one round, all CPUs together.
    pub fn irqs_per_round(&self) -> u64 {
        self.irqs_per_cpu() * u64::from(self.nr_cpus.max(1))
    }
}

/// What one round of one design did.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundStats {
    /// The design.
    pub design: Design,
    /// Bios submitted (completed by the interrupt handlers' `bio_endio()`).
    pub bios: u64,
    /// Interrupts raised.
    pub irqs: u64,
    /// From raising the first interrupt to the last `bi_end_io` returning.
    pub elapsed: Duration,
    /// Bios whose `bi_end_io` ran exactly once.
    pub completed_once: u64,
    /// Bios whose `bi_end_io` never ran.
    pub missing: u64,
    /// Extra runs of a `bi_end_io` that had already run.
    pub duplicates: u64,
    /// `bi_end_io` runs of a design that promises task context (batched, channel) that found
    /// themselves where `bio_in_atomic()` is true.
    pub wrong_context: u64,
    /// Worker wake-ups (see the module docs): batcher work-function runs, or blocking receives of
    /// the channel worker; 0 for the direct design.
    pub worker_wakeups: u64,
    /// Batcher queueing calls that queued the work (0 for the other designs).
    pub work_queued: u64,
    /// Bios the batcher put on a per-CPU batch (0 for the other designs).
    pub deferred: u64,
    /// OS-level wake-ups of the simulated CPUs' threads from idle.
    pub cpu_thread_wakeups: u64,
    /// BUGs and WARNs the kernel model reported during the round.
    pub kernel_reports: u64,
    /// Harness faults: `bi_end_io` runs of bios that are not this round's, and interrupts the
    /// kernel refused to raise.
    pub harness_errors: u64,
}

impl RoundStats {
    /// Bios per second of this round.
    pub fn bios_per_sec(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.bios as f64 / s
        } else {
            0.0
        }
    }

    /// Worker wake-ups per bio.
    pub fn worker_wakeups_per_bio(&self) -> f64 {
        ratio(self.worker_wakeups, self.bios)
    }

    /// Worker wake-ups per interrupt (per batch): the target is at most 1.
    pub fn worker_wakeups_per_irq(&self) -> f64 {
        ratio(self.worker_wakeups, self.irqs)
    }

    /// Every bio completed exactly once, in the context its design promises, without a kernel
    /// report.
    pub fn is_exact(&self) -> bool {
        self.completed_once == self.bios
            && self.missing == 0
            && self.duplicates == 0
            && self.wrong_context == 0
            && self.kernel_reports == 0
            && self.harness_errors == 0
    }
}

/// One design's rounds and their medians.
#[derive(Debug, Clone, PartialEq)]
pub struct DesignThroughput {
    /// The design.
    pub design: Design,
    /// Its label in reports and benchmarks (`batched (v7)`, `direct`, `channel`).
    pub label: String,
    /// Every round, in order.
    pub rounds: Vec<RoundStats>,
    /// The median over rounds of bios per second.
    pub median_bios_per_sec: f64,
}

impl DesignThroughput {
    fn new(design: Design, label: String, rounds: Vec<RoundStats>) -> Self {
        let median_bios_per_sec = median_f64(rounds.iter().map(RoundStats::bios_per_sec).collect());
        Self {
            design,
            label,
            rounds,
            median_bios_per_sec,
        }
    }

    fn total(&self, f: impl Fn(&RoundStats) -> u64) -> u64 {
        self.rounds.iter().map(f).sum()
    }

    /// Bios over all rounds.
    pub fn bios(&self) -> u64 {
        self.total(|r| r.bios)
    }

    /// Interrupts over all rounds.
    pub fn irqs(&self) -> u64 {
        self.total(|r| r.irqs)
    }

    /// Worker wake-ups over all rounds.
    pub fn worker_wakeups(&self) -> u64 {
        self.total(|r| r.worker_wakeups)
    }

    /// Worker wake-ups per bio over all rounds.
    pub fn worker_wakeups_per_bio(&self) -> f64 {
        ratio(self.worker_wakeups(), self.bios())
    }

    /// Worker wake-ups per interrupt (batch) over all rounds.
    pub fn worker_wakeups_per_irq(&self) -> f64 {
        ratio(self.worker_wakeups(), self.irqs())
    }

    /// CPU-thread wake-ups per bio over all rounds.
    pub fn cpu_thread_wakeups_per_bio(&self) -> f64 {
        ratio(self.total(|r| r.cpu_thread_wakeups), self.bios())
    }

    /// Every round was [exact](RoundStats::is_exact).
    pub fn all_exact(&self) -> bool {
        self.rounds.iter().all(RoundStats::is_exact)
    }
}

/// The result of [`deferral_throughput`]: the three designs side by side.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputReport {
    /// The configuration measured.
    pub config: ThroughputConfig,
    /// The batcher.
    pub batched: DesignThroughput,
    /// Direct `bi_end_io` in the interrupt.
    pub direct: DesignThroughput,
    /// Per-bio channel hand-off.
    pub channel: DesignThroughput,
    /// Median bios/s of batched over channel (issue target: at least 2).
    pub batched_over_channel: f64,
    /// Median bios/s of direct over batched (the cost of deferring).
    pub direct_over_batched: f64,
}

impl ThroughputReport {
    /// Batched is at least twice the channel hand-off (median bios/s).
    pub fn meets_throughput_target(&self) -> bool {
        self.batched_over_channel >= 2.0
    }

    /// In every round, the batcher's worker woke at most once per interrupt (batch).
    pub fn meets_wakeup_target(&self) -> bool {
        self.batched
            .rounds
            .iter()
            .all(|r| r.worker_wakeups <= r.irqs)
    }
}

impl fmt::Display for ThroughputReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "deferral throughput, threaded runtime: {} CPUs, {} bios per round in IRQs of {} bios, {} IRQs in flight per CPU, {} rounds (medians)",
            c.nr_cpus,
            c.bios_per_round(),
            c.bios_per_irq,
            c.irqs_in_flight,
            c.rounds
        )?;
        for d in [&self.batched, &self.direct, &self.channel] {
            writeln!(
                f,
                "  {:<14} {:>8.3} M bios/s   worker wake-ups {:.4}/bio ({:.3}/IRQ)   CPU-thread wake-ups {:.4}/bio{}",
                d.label,
                d.median_bios_per_sec / 1e6,
                d.worker_wakeups_per_bio(),
                d.worker_wakeups_per_irq(),
                d.cpu_thread_wakeups_per_bio(),
                if d.all_exact() { "" } else { "   NOT EXACT" }
            )?;
        }
        writeln!(
            f,
            "  batched/channel {:.2}x (target >= 2: {})   direct/batched {:.2}x   batched worker <= 1 wake-up per IRQ: {}",
            self.batched_over_channel,
            if self.meets_throughput_target() { "met" } else { "NOT met" },
            self.direct_over_batched,
            if self.meets_wakeup_target() { "yes" } else { "NO" }
        )
    }
}

/// The state of one throughput round, shared by the interrupt handlers and `bi_end_io`s.
struct Round {
    k: u64,
    per_cpu_bios: u64,
    nr_cpus: u32,
    /// Whether `bi_end_io` must find itself in task context.
    expect_task: bool,
    /// `bi_end_io` runs per bio; the bio's slot is its sector.
    seen: Box<[AtomicU32]>,
    cpus: Box<[CpuRound]>,
    done_cpus: AtomicU32,
    end: Mutex<Option<Instant>>,
    done_tx: Sender<()>,
    wrong_context: AtomicU64,
    stray: AtomicU64,
    raise_failures: AtomicU64,
}

/// One CPU's share of a round: its completions and the interrupts it has yet to take.
#[repr(align(128))]
struct CpuRound {
    completed: AtomicU64,
    /// The batches of the interrupts not raised yet, the next one last.
    batches: Mutex<Vec<Batch>>,
}

impl Round {
    fn completions(&self) -> u64 {
        self.cpus
            .iter()
            .map(|c| c.completed.load(Ordering::Acquire))
            .sum()
    }

    /// Drops the bios of interrupts never raised (a failed round), breaking the
    /// round → bio → `bi_end_io` → round cycle.
    fn discard(&self) {
        for c in self.cpus.iter() {
            c.batches.lock().clear();
        }
    }

    /// Raises the next interrupt of `cpu`, if it has one left.
    fn raise_next(&self, kernel: &Kernel, cpu: usize) {
        let Some(c) = self.cpus.get(cpu) else {
            return;
        };
        let next = c.batches.lock().pop();
        if let Some(batch) = next {
            if raise_batch(kernel, CpuId(cpu as u32), batch).is_err() {
                self.raise_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Raises an interrupt on `cpu` whose handler completes `batch` with `bio_endio()`.
fn raise_batch(kernel: &Kernel, cpu: CpuId, batch: Batch) -> Result<(), MeasureError> {
    let handler = Box::new(move |cx: &Cpu| {
        for bio in batch {
            bio_endio(bio, cx);
        }
    });
    kernel
        .raise_irq(cpu, "measure_completion_irq", handler)
        .map(|_| ())
        .map_err(|e| MeasureError::Raise {
            cpu: e.cpu,
            reason: e.reason,
        })
}

/// The measured completion: what every design's `bi_end_io` finally does.
fn complete(r: &Round, bio: Box<Bio>, cx: &Cpu) {
    if r.expect_task && bio_in_atomic(cx) {
        r.wrong_context.fetch_add(1, Ordering::Relaxed);
    }
    let slot = bio.bi_iter.bi_sector;
    drop(bio);
    let seen = usize::try_from(slot).ok().and_then(|s| r.seen.get(s));
    let cpu = (slot / r.per_cpu_bios.max(1)) as usize;
    let (Some(seen), Some(c)) = (seen, r.cpus.get(cpu)) else {
        r.stray.fetch_add(1, Ordering::Relaxed);
        return;
    };
    seen.fetch_add(1, Ordering::Relaxed);
    let n = c.completed.fetch_add(1, Ordering::AcqRel) + 1;
    if n % r.k == 0 {
        r.raise_next(cx.kernel(), cpu);
    }
    if n == r.per_cpu_bios && r.done_cpus.fetch_add(1, Ordering::AcqRel) + 1 == r.nr_cpus {
        *r.end.lock() = Some(Instant::now());
        let _ = r.done_tx.send(());
    }
}

/// A message to the channel design's worker thread.
enum ChanMsg {
    Bio(Box<Bio>),
    Stop,
}

/// The channel design's dedicated worker thread.
struct ChannelWorker {
    tx: Sender<ChanMsg>,
    handle: Option<JoinHandle<()>>,
    /// Blocking receives that returned a bio: the worker's wake-ups.
    wakeups: Arc<AtomicU64>,
}

impl ChannelWorker {
    fn spawn(kernel: &Arc<Kernel>) -> Result<Self, MeasureError> {
        let (tx, rx) = crossbeam_channel::unbounded::<ChanMsg>();
        let wakeups = Arc::new(AtomicU64::new(0));
        let w = Arc::clone(&wakeups);
        let k = Arc::clone(kernel);
        let handle = std::thread::Builder::new()
            .name("biosim-chan-worker".to_owned())
            .spawn(move || channel_worker_main(k, rx, w))
            .map_err(MeasureError::Spawn)?;
        Ok(Self {
            tx,
            handle: Some(handle),
            wakeups,
        })
    }

    /// Asks the worker to stop and waits (bounded) for it; `false` if it did not exit.
    fn stop(&mut self, timeout: Duration) -> bool {
        let _ = self.tx.send(ChanMsg::Stop);
        let Some(h) = self.handle.take() else {
            return true;
        };
        let deadline = Instant::now() + timeout;
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        h.is_finished() && h.join().is_ok()
    }
}

fn channel_worker_main(kernel: Arc<Kernel>, rx: Receiver<ChanMsg>, wakeups: Arc<AtomicU64>) {
    // A plain, preemptible task context: the worker is a kthread.
    let Some(cx) = kernel.cpu(CpuId(0)) else {
        return;
    };
    loop {
        let msg = match rx.try_recv() {
            Ok(m) => m,
            Err(TryRecvError::Empty) => match rx.recv() {
                Ok(m) => {
                    wakeups.fetch_add(1, Ordering::Relaxed);
                    m
                }
                Err(_) => return,
            },
            Err(TryRecvError::Disconnected) => return,
        };
        match msg {
            ChanMsg::Stop => return,
            ChanMsg::Bio(bio) => {
                // Call bi_end_io again, now in task context (the dynamic helper's pattern).
                if let Some(BioEndIo::Fn { f, .. }) = bio.bi_end_io.clone() {
                    f(bio, &cx);
                }
            }
        }
    }
}

/// One design on its own simulated machine (kernel + threaded runtime, plus the batcher or the
/// channel worker), able to run timed rounds: the building block of [`deferral_throughput`] and
/// of the `deferral` benchmark. Stop it with [`DeferralMachine::shutdown`] to check nothing was
/// left in flight; dropping it stops it too, without the check.
pub struct DeferralMachine {
    design: Design,
    cfg: ThroughputConfig,
    kernel: Arc<Kernel>,
    rt: Option<ThreadedRuntime>,
    counters: Arc<BatchCounters>,
    channel: Option<ChannelWorker>,
}

impl fmt::Debug for DeferralMachine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeferralMachine")
            .field("design", &self.design)
            .field("config", &self.cfg)
            .field("running", &self.rt.is_some())
            .finish()
    }
}

impl DeferralMachine {
    /// Boots a fresh kernel with `cfg.nr_cpus` CPUs, initialises the batcher (variant
    /// `cfg.variant`) for [`Design::Batched`] or spawns the worker thread for
    /// [`Design::Channel`], and starts the threaded runtime.
    pub fn start(design: Design, cfg: ThroughputConfig) -> Result<Self, MeasureError> {
        cfg.validate()?;
        let variant = (design == Design::Batched).then_some(cfg.variant);
        let (kernel, rt, counters) = boot(cfg.kernel, cfg.nr_cpus, variant)?;
        let channel = match design {
            Design::Channel => Some(ChannelWorker::spawn(&kernel)?),
            _ => None,
        };
        Ok(Self {
            design,
            cfg,
            kernel,
            rt: Some(rt),
            counters,
            channel,
        })
    }

    /// The design it runs.
    pub fn design(&self) -> Design {
        self.design
    }

    /// Its label: `batched (v7)`, `direct`, `channel`.
    pub fn label(&self) -> String {
        match self.design {
            Design::Batched => format!("batched ({})", self.cfg.variant.name),
            d => d.name().to_owned(),
        }
    }

    /// The configuration it was started with.
    pub fn config(&self) -> &ThroughputConfig {
        &self.cfg
    }

    /// The `bi_end_io` of one CPU's bios in this design (one instance per CPU, so the reference
    /// count `bio_endio()` takes on it stays on that CPU's cache line).
    fn end_io(&self, round: &Arc<Round>) -> BioEndIo {
        let r = Arc::clone(round);
        match (self.design, &self.channel) {
            (Design::Channel, Some(ch)) => {
                let tx = ch.tx.clone();
                BioEndIo::new("measure_channel_end_io", move |bio, cx| {
                    if !bio_in_atomic(cx) {
                        complete(&r, bio, cx);
                    } else if let Err(crossbeam_channel::SendError(ChanMsg::Bio(bio))) =
                        tx.send(ChanMsg::Bio(bio))
                    {
                        // The worker is gone: the bio is lost to it; count it where it is.
                        complete(&r, bio, cx);
                    }
                })
            }
            _ => BioEndIo::new("measure_end_io", move |bio, cx| complete(&r, bio, cx)),
        }
    }

    /// Runs one timed round of [`ThroughputConfig::bios_per_round`] bios and checks that each
    /// completed exactly once. The bios are allocated before the clock starts; after the last
    /// completion the machine is drained (untimed) so late work is counted in this round.
    pub fn run_round(&mut self) -> Result<RoundStats, MeasureError> {
        let rt = self.rt.as_ref().ok_or(MeasureError::Stopped)?;
        let cfg = &self.cfg;
        let nr = cfg.nr_cpus as usize;
        let k = u64::from(cfg.bios_per_irq);
        let irqs_per_cpu = cfg.irqs_per_cpu();
        let per_cpu_bios = irqs_per_cpu * k;
        let total = cfg.bios_per_round();
        let slots = usize::try_from(total)
            .map_err(|_| MeasureError::Config("too many bios for this machine".to_owned()))?;
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let round = Arc::new(Round {
            k,
            per_cpu_bios,
            nr_cpus: cfg.nr_cpus,
            expect_task: self.design != Design::Direct,
            seen: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            cpus: (0..nr)
                .map(|_| CpuRound {
                    completed: AtomicU64::new(0),
                    batches: Mutex::new(Vec::new()),
                })
                .collect(),
            done_cpus: AtomicU32::new(0),
            end: Mutex::new(None),
            done_tx,
            wrong_context: AtomicU64::new(0),
            stray: AtomicU64::new(0),
            raise_failures: AtomicU64::new(0),
        });
        let flag = self.design == Design::Batched;
        for (cpu, c) in round.cpus.iter().enumerate() {
            let end_io = self.end_io(&round);
            let base = cpu as u64 * per_cpu_bios;
            let mut batches: Vec<Batch> = (0..irqs_per_cpu)
                .map(|i| {
                    (0..k)
                        .map(|j| {
                            let mut bio = self
                                .kernel
                                .bio_alloc(ReqOp::Write, base + i * k + j)
                                .with_end_io(end_io.clone());
                            if flag {
                                bio.set_flag(BioFlag::CompleteInTask);
                            }
                            bio
                        })
                        .collect()
                })
                .collect();
            batches.reverse();
            *c.batches.lock() = batches;
        }
        let what = || format!("deferral round, {}", self.label());
        let before_counters = self.counters.snapshot();
        let before_chan = self
            .channel
            .as_ref()
            .map_or(0, |c| c.wakeups.load(Ordering::Acquire));
        let before_wakeups = cpu_thread_wakeups(rt);
        let before_reports = self.kernel.reports().len();

        let start = Instant::now();
        for _ in 0..cfg
            .irqs_in_flight
            .min(u32::try_from(irqs_per_cpu).unwrap_or(u32::MAX))
        {
            for cpu in 0..nr {
                let next = round.cpus[cpu].batches.lock().pop();
                if let Some(batch) = next {
                    if let Err(e) = raise_batch(&self.kernel, CpuId(cpu as u32), batch) {
                        round.discard();
                        return Err(e);
                    }
                }
            }
        }
        let waited = done_rx.recv_timeout(cfg.timeout);
        let end = round.end.lock().unwrap_or_else(Instant::now);
        if waited.is_err() {
            round.discard();
            return Err(MeasureError::Timeout {
                what: what(),
                completed: round.completions(),
                expected: total,
                timeout: cfg.timeout,
            });
        }
        let elapsed = end.saturating_duration_since(start);
        if !rt.drain(cfg.timeout) {
            round.discard();
            return Err(MeasureError::NotQuiescent {
                what: what(),
                timeout: cfg.timeout,
            });
        }
        let after_counters = self.counters.snapshot();
        let (mut completed_once, mut missing, mut duplicates) = (0, 0, 0);
        for s in round.seen.iter() {
            match u64::from(s.load(Ordering::Acquire)) {
                0 => missing += 1,
                1 => completed_once += 1,
                n => {
                    completed_once += 1;
                    duplicates += n - 1;
                }
            }
        }
        let chan_wakeups = self
            .channel
            .as_ref()
            .map_or(0, |c| c.wakeups.load(Ordering::Acquire))
            - before_chan;
        let worker_wakeups = match self.design {
            Design::Batched => after_counters.0 - before_counters.0,
            Design::Channel => chan_wakeups,
            Design::Direct => 0,
        };
        let kernel_reports = self.kernel.reports().len().saturating_sub(before_reports) as u64;
        let harness_errors =
            round.stray.load(Ordering::Acquire) + round.raise_failures.load(Ordering::Acquire);
        Ok(RoundStats {
            design: self.design,
            bios: total,
            irqs: irqs_per_cpu * nr as u64,
            elapsed,
            completed_once,
            missing,
            duplicates,
            wrong_context: round.wrong_context.load(Ordering::Acquire),
            worker_wakeups,
            work_queued: after_counters.1 - before_counters.1,
            deferred: after_counters.2 - before_counters.2,
            cpu_thread_wakeups: cpu_thread_wakeups(rt) - before_wakeups,
            kernel_reports,
            harness_errors,
        })
    }

    /// Stops the machine: the channel worker (if any), then the runtime after draining it.
    /// Errors if anything was left in flight or a thread did not stop.
    pub fn shutdown(mut self) -> Result<(), MeasureError> {
        let what = format!("shutdown of {}", self.label());
        let timeout = self.cfg.timeout;
        if let Some(mut ch) = self.channel.take() {
            if !ch.stop(timeout) {
                return Err(MeasureError::Unclean {
                    what,
                    report: "the channel worker thread did not stop".to_owned(),
                });
            }
        }
        let rt = self.rt.take().ok_or(MeasureError::Stopped)?;
        stop_runtime(rt, timeout, &what)
    }
}

impl Drop for DeferralMachine {
    fn drop(&mut self) {
        if let Some(mut ch) = self.channel.take() {
            ch.stop(Duration::from_secs(1));
        }
        // The runtime's own Drop stops its threads.
    }
}

/// Measures bios/second through the three [`Design`]s side by side: one machine per design, the
/// same closed-loop producer and number of bios, `cfg.rounds` rounds interleaved
/// (batched, direct, channel, batched, ...), medians and ratios in the report. Every machine is
/// shut down cleanly (or the error says what was left in flight).
pub fn deferral_throughput(cfg: ThroughputConfig) -> Result<ThroughputReport, MeasureError> {
    cfg.validate()?;
    let mut machines = Vec::with_capacity(Design::ALL.len());
    for d in Design::ALL {
        machines.push(DeferralMachine::start(d, cfg.clone())?);
    }
    let mut rounds: Vec<Vec<RoundStats>> = vec![Vec::new(); machines.len()];
    for _ in 0..cfg.rounds {
        for (m, rs) in machines.iter_mut().zip(rounds.iter_mut()) {
            rs.push(m.run_round()?);
        }
    }
    let labels: Vec<String> = machines.iter().map(DeferralMachine::label).collect();
    for m in machines {
        m.shutdown()?;
    }
    let mut it = Design::ALL
        .into_iter()
        .zip(labels)
        .zip(rounds)
        .map(|((d, l), r)| DesignThroughput::new(d, l, r));
    let (Some(batched), Some(direct), Some(channel)) = (it.next(), it.next(), it.next()) else {
        return Err(MeasureError::Config("three designs expected".to_owned()));
    };
    let over = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    Ok(ThroughputReport {
        batched_over_channel: over(batched.median_bios_per_sec, channel.median_bios_per_sec),
        direct_over_batched: over(direct.median_bios_per_sec, batched.median_bios_per_sec),
        config: cfg,
        batched,
        direct,
        channel,
    })
}

// ---------------------------------------------------------------------------------------------
// Completion latency
// ---------------------------------------------------------------------------------------------

/// A load pattern of [`completion_latency`]. Idle gaps are drawn uniformly from `[0, 2 × gap)`
/// (mean `gap`): the load waits for completions, which the delayed variants finish right after a
/// tick, so a fixed gap would put every interrupt at the same phase of the jiffy. With `2 × gap` a
/// multiple of the jiffy (the defaults at `CONFIG_HZ=250`), the phase is uniform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// One bio per interrupt, one at a time: raise, wait for its `bi_end_io`, pause `gap`.
    Light {
        /// Bios (and interrupts).
        bios: u64,
        /// Mean idle pause after each completion (drawn from `[0, 2 × gap)`).
        gap: Duration,
    },
    /// Bursts of interrupts `spacing` apart on one CPU (the bursts rotate over the CPUs); after
    /// the whole burst completed, an idle pause of `gap`.
    Bursty {
        /// Bursts.
        bursts: u64,
        /// Interrupts per burst.
        irqs: u32,
        /// Bios per interrupt.
        bios_per_irq: u32,
        /// Time between two interrupts of a burst (a sleep: at least this long).
        spacing: Duration,
        /// Mean idle pause after each burst (drawn from `[0, 2 × gap)`).
        gap: Duration,
    },
}

impl Load {
    fn bios(&self) -> u64 {
        match *self {
            Load::Light { bios, .. } => bios,
            Load::Bursty {
                bursts,
                irqs,
                bios_per_irq,
                ..
            } => bursts * u64::from(irqs) * u64::from(bios_per_irq),
        }
    }

    fn irqs(&self) -> u64 {
        match *self {
            Load::Light { bios, .. } => bios,
            Load::Bursty { bursts, irqs, .. } => bursts * u64::from(irqs),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Load::Light { .. } => "light",
            Load::Bursty { .. } => "bursty",
        }
    }
}

impl fmt::Display for Load {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Load::Light { bios, gap } => write!(
                f,
                "light: {bios} bios, 1 per IRQ, one at a time, ~{} idle between",
                human(gap)
            ),
            Load::Bursty {
                bursts,
                irqs,
                bios_per_irq,
                spacing,
                gap,
            } => write!(
                f,
                "bursty: {bursts} bursts of {irqs} IRQs x {bios_per_irq} bios, IRQs >= {} apart, ~{} idle between bursts",
                human(spacing),
                human(gap)
            ),
        }
    }
}

/// The parameters of [`completion_latency`]. The defaults finish in well under a second per
/// variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencyConfig {
    /// The kernel config; its `hz` sets the jiffy (default 250: 4 ms, like a distro kernel).
    pub kernel: KernelConfig,
    /// Simulated CPUs (default 2).
    pub nr_cpus: u32,
    /// The light load (default 100 bios, gaps of 2 ms on average).
    pub light: Load,
    /// The bursty load (default 20 bursts of 8 IRQs x 4 bios, >= 100 µs apart, gaps of 2 ms on
    /// average between bursts).
    pub bursty: Load,
    /// How long one wait for completions may take before the run is declared stuck.
    pub timeout: Duration,
    /// Seed of the gap jitter.
    pub seed: u64,
}

impl Default for LatencyConfig {
    fn default() -> Self {
        Self {
            kernel: KernelConfig::default(),
            nr_cpus: 2,
            light: Load::Light {
                bios: 100,
                gap: Duration::from_millis(2),
            },
            bursty: Load::Bursty {
                bursts: 20,
                irqs: 8,
                bios_per_irq: 4,
                spacing: Duration::from_micros(100),
                gap: Duration::from_millis(2),
            },
            timeout: Duration::from_secs(10),
            seed: 1,
        }
    }
}

/// Completion latency and wake-ups of one load.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadLatency {
    /// The load.
    pub load: Load,
    /// Bios completed.
    pub bios: u64,
    /// Interrupts raised.
    pub irqs: u64,
    /// Every bio's latency from `bio_endio()` in the interrupt to its `bi_end_io` starting,
    /// sorted ascending.
    pub samples: Vec<Duration>,
    /// The median latency.
    pub median: Duration,
    /// The 99th percentile (nearest rank).
    pub p99: Duration,
    /// The largest latency.
    pub max: Duration,
    /// Runs of the batcher's work function (worker wake-ups).
    pub worker_wakeups: u64,
    /// Batcher queueing calls that queued the work.
    pub work_queued: u64,
    /// OS-level wake-ups of the CPU threads from idle.
    pub cpu_thread_wakeups: u64,
    /// `bi_end_io` runs that found themselves in atomic context (must be 0).
    pub wrong_context: u64,
    /// Bios whose `bi_end_io` did not run exactly once (must be 0).
    pub not_once: u64,
    /// BUGs and WARNs the kernel model reported during the load (must be 0).
    pub kernel_reports: u64,
    /// Wall time of the whole load, gaps included.
    pub elapsed: Duration,
}

impl LoadLatency {
    /// Worker wake-ups per bio.
    pub fn worker_wakeups_per_bio(&self) -> f64 {
        ratio(self.worker_wakeups, self.bios)
    }

    /// The mean latency.
    pub fn mean(&self) -> Duration {
        if self.samples.is_empty() {
            return Duration::ZERO;
        }
        let sum: u128 = self.samples.iter().map(Duration::as_nanos).sum();
        let mean = sum / self.samples.len() as u128;
        Duration::from_nanos(u64::try_from(mean).unwrap_or(u64::MAX))
    }
}

/// The result of [`completion_latency`] for one variant.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyReport {
    /// The variant measured.
    pub variant: Variant,
    /// `CONFIG_HZ` of the run.
    pub hz: u32,
    /// The light load.
    pub light: LoadLatency,
    /// The bursty load.
    pub bursty: LoadLatency,
}

impl LatencyReport {
    /// The length of one jiffy at [`LatencyReport::hz`].
    pub fn jiffy(&self) -> Duration {
        Duration::from_secs(1) / self.hz.max(1)
    }
}

impl fmt::Display for LatencyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let work = match self.variant.work {
            WorkKind::Delayed { delay } => format!("delayed_work, {delay} jiffy delay"),
            WorkKind::Plain => "work_struct, no delay".to_owned(),
        };
        writeln!(
            f,
            "completion latency {} ({work}), threaded runtime, HZ={} (1 jiffy = {})",
            self.variant.name,
            self.hz,
            human(self.jiffy())
        )?;
        for l in [&self.light, &self.bursty] {
            writeln!(
                f,
                "  {:<6} {:>4} bios: median {:>9}  p99 {:>9}  max {:>9}  worker wake-ups {:.3}/bio ({} runs / {} IRQs){}",
                l.load.name(),
                l.bios,
                human(l.median),
                human(l.p99),
                human(l.max),
                l.worker_wakeups_per_bio(),
                l.worker_wakeups,
                l.irqs,
                if l.wrong_context == 0 && l.not_once == 0 && l.kernel_reports == 0 { "" } else { "  NOT EXACT" }
            )?;
        }
        Ok(())
    }
}

/// The state of one latency load, shared by the interrupt handlers and `bi_end_io`.
struct LatRound {
    base: Instant,
    /// Nanoseconds since `base` when the handler called `bio_endio()`, per slot (the sector).
    start_ns: Box<[AtomicU64]>,
    /// Latency in nanoseconds, per slot.
    lat_ns: Box<[AtomicU64]>,
    seen: Box<[AtomicU32]>,
    wrong_context: AtomicU64,
    done_tx: Sender<()>,
}

impl LatRound {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A batcher variant on its own machine, ready to run latency loads: the building block of
/// [`completion_latency`] and of the latency part of the `deferral` benchmark. Stop it with
/// [`LatencyProbe::shutdown`]; dropping it stops it too, without the check.
pub struct LatencyProbe {
    variant: Variant,
    cfg: LatencyConfig,
    kernel: Arc<Kernel>,
    rt: Option<ThreadedRuntime>,
    counters: Arc<BatchCounters>,
    rng: SplitMix64,
}

impl fmt::Debug for LatencyProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyProbe")
            .field("variant", &self.variant.name)
            .field("config", &self.cfg)
            .field("running", &self.rt.is_some())
            .finish()
    }
}

impl LatencyProbe {
    /// Boots a fresh kernel (`cfg.kernel`, `cfg.nr_cpus` CPUs) with the batcher in `variant` and
    /// starts the threaded runtime with its real-time jiffies ticker.
    pub fn start(variant: Variant, cfg: LatencyConfig) -> Result<Self, MeasureError> {
        if cfg.nr_cpus == 0 {
            return Err(MeasureError::Config(
                "nr_cpus must be at least 1".to_owned(),
            ));
        }
        if cfg.timeout.is_zero() {
            return Err(MeasureError::Config("timeout must not be zero".to_owned()));
        }
        let (kernel, rt, counters) = boot(cfg.kernel, cfg.nr_cpus, Some(variant))?;
        let rng = SplitMix64::new(cfg.seed);
        Ok(Self {
            variant,
            cfg,
            kernel,
            rt: Some(rt),
            counters,
            rng,
        })
    }

    fn jitter(&mut self, d: Duration) -> Duration {
        let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        Duration::try_from_secs_f64(d.as_secs_f64() * 2.0 * u).unwrap_or(d)
    }

    /// Runs `load` (flagged write bios completed in interrupts, deferred by the batcher) and
    /// measures each bio's completion latency and the worker's wake-ups. The machine is drained
    /// afterwards (delayed work included), so the counts are this load's.
    pub fn run(&mut self, load: Load) -> Result<LoadLatency, MeasureError> {
        let bios = load.bios();
        if bios == 0 || load.irqs() == 0 {
            return Err(MeasureError::Config(format!(
                "{} load: needs at least one bio",
                load.name()
            )));
        }
        let slots = usize::try_from(bios)
            .map_err(|_| MeasureError::Config("too many bios for this machine".to_owned()))?;
        let rt = self.rt.as_ref().ok_or(MeasureError::Stopped)?;
        let timeout = self.cfg.timeout;
        let nr = u64::from(self.cfg.nr_cpus);
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        let round = Arc::new(LatRound {
            base: Instant::now(),
            start_ns: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            lat_ns: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            seen: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            wrong_context: AtomicU64::new(0),
            done_tx,
        });
        let r = Arc::clone(&round);
        let end_io = BioEndIo::new("measure_latency_end_io", move |bio, cx| {
            let now = r.now_ns();
            if bio_in_atomic(cx) {
                r.wrong_context.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(i) = usize::try_from(bio.bi_iter.bi_sector)
                .ok()
                .filter(|&i| i < r.seen.len())
            {
                let start = r.start_ns[i].load(Ordering::Acquire);
                r.lat_ns[i].store(now.saturating_sub(start), Ordering::Release);
                r.seen[i].fetch_add(1, Ordering::AcqRel);
            }
            drop(bio);
            let _ = r.done_tx.send(());
        });
        // The interrupts' batches, in raising order.
        let per_irq = match load {
            Load::Light { .. } => 1,
            Load::Bursty { bios_per_irq, .. } => u64::from(bios_per_irq),
        };
        let mut batches: Vec<Batch> = (0..load.irqs())
            .map(|i| {
                (0..per_irq)
                    .map(|j| {
                        let mut bio = self
                            .kernel
                            .bio_alloc(ReqOp::Write, i * per_irq + j)
                            .with_end_io(end_io.clone());
                        bio.set_flag(BioFlag::CompleteInTask);
                        bio
                    })
                    .collect()
            })
            .collect();
        drop(end_io);
        batches.reverse();

        let before = self.counters.snapshot();
        let before_wakeups = cpu_thread_wakeups(rt);
        let before_reports = self.kernel.reports().len();
        let started = Instant::now();
        let variant_name = self.variant.name;
        let what = move || format!("{} load on {variant_name}", load.name());
        let mut completed = 0u64;
        let result = (|| -> Result<(), MeasureError> {
            let wait = |n: u64, completed: &mut u64| -> Result<(), MeasureError> {
                for _ in 0..n {
                    match done_rx.recv_timeout(timeout) {
                        Ok(()) => *completed += 1,
                        Err(_) => {
                            return Err(MeasureError::Timeout {
                                what: what(),
                                completed: *completed,
                                expected: bios,
                                timeout,
                            })
                        }
                    }
                }
                Ok(())
            };
            match load {
                Load::Light { bios, gap } => {
                    for i in 0..bios {
                        if let Some(batch) = batches.pop() {
                            raise_timed(&self.kernel, CpuId((i % nr) as u32), batch, &round)?;
                        }
                        wait(1, &mut completed)?;
                        let g = self.jitter(gap);
                        std::thread::sleep(g);
                    }
                }
                Load::Bursty {
                    bursts,
                    irqs,
                    bios_per_irq,
                    spacing,
                    gap,
                } => {
                    for b in 0..bursts {
                        let cpu = CpuId((b % nr) as u32);
                        for j in 0..irqs {
                            if let Some(batch) = batches.pop() {
                                raise_timed(&self.kernel, cpu, batch, &round)?;
                            }
                            if j + 1 < irqs {
                                std::thread::sleep(spacing);
                            }
                        }
                        wait(u64::from(irqs) * u64::from(bios_per_irq), &mut completed)?;
                        let g = self.jitter(gap);
                        std::thread::sleep(g);
                    }
                }
            }
            Ok(())
        })();
        let elapsed = started.elapsed();
        result?;
        let rt = self.rt.as_ref().ok_or(MeasureError::Stopped)?;
        if !rt.drain(timeout) {
            return Err(MeasureError::NotQuiescent {
                what: what(),
                timeout,
            });
        }
        let after = self.counters.snapshot();
        let mut samples: Vec<Duration> = Vec::with_capacity(slots);
        let mut not_once = 0;
        for (seen, lat) in round.seen.iter().zip(round.lat_ns.iter()) {
            if seen.load(Ordering::Acquire) == 1 {
                samples.push(Duration::from_nanos(lat.load(Ordering::Acquire)));
            } else {
                not_once += 1;
            }
        }
        samples.sort_unstable();
        Ok(LoadLatency {
            load,
            bios,
            irqs: load.irqs(),
            median: percentile(&samples, 0.5),
            p99: percentile(&samples, 0.99),
            max: samples.last().copied().unwrap_or_default(),
            samples,
            worker_wakeups: after.0 - before.0,
            work_queued: after.1 - before.1,
            cpu_thread_wakeups: cpu_thread_wakeups(rt) - before_wakeups,
            wrong_context: round.wrong_context.load(Ordering::Acquire),
            not_once,
            kernel_reports: self.kernel.reports().len().saturating_sub(before_reports) as u64,
            elapsed,
        })
    }

    /// Stops the machine after draining it; errors if anything was left in flight.
    pub fn shutdown(mut self) -> Result<(), MeasureError> {
        let rt = self.rt.take().ok_or(MeasureError::Stopped)?;
        stop_runtime(
            rt,
            self.cfg.timeout,
            &format!("shutdown of the {} latency probe", self.variant.name),
        )
    }
}

/// Raises an interrupt on `cpu` whose handler stamps each bio's start time and calls
/// `bio_endio()` on it.
fn raise_timed(
    kernel: &Kernel,
    cpu: CpuId,
    batch: Batch,
    round: &Arc<LatRound>,
) -> Result<(), MeasureError> {
    let r = Arc::clone(round);
    let handler = Box::new(move |cx: &Cpu| {
        for bio in batch {
            if let Some(slot) = usize::try_from(bio.bi_iter.bi_sector)
                .ok()
                .and_then(|i| r.start_ns.get(i))
            {
                slot.store(r.now_ns(), Ordering::Release);
            }
            bio_endio(bio, cx);
        }
    });
    kernel
        .raise_irq(cpu, "measure_latency_irq", handler)
        .map(|_| ())
        .map_err(|e| MeasureError::Raise {
            cpu: e.cpu,
            reason: e.reason,
        })
}

/// Measures finding 8 for one batcher variant: completion latency (`bio_endio()` in the interrupt
/// → `bi_end_io` in the worker; median, p99) and worker wake-ups per bio under `cfg.light` and
/// `cfg.bursty`, on the threaded runtime at `cfg.kernel.hz`. Compare v6 (1-jiffy delay) with v7
/// (no delay) by calling it twice with the same config.
pub fn completion_latency(
    variant: Variant,
    cfg: LatencyConfig,
) -> Result<LatencyReport, MeasureError> {
    let hz = cfg.kernel.hz;
    let (light_load, bursty_load) = (cfg.light, cfg.bursty);
    let mut probe = LatencyProbe::start(variant, cfg)?;
    let light = probe.run(light_load)?;
    let bursty = probe.run(bursty_load)?;
    probe.shutdown()?;
    Ok(LatencyReport {
        variant,
        hz,
        light,
        bursty,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_throughput() -> ThroughputConfig {
        ThroughputConfig {
            bios: 2000,
            bios_per_irq: 8,
            irqs_in_flight: 2,
            rounds: 2,
            ..ThroughputConfig::default()
        }
    }

    fn check_design(d: &DesignThroughput, cfg: &ThroughputConfig) {
        assert_eq!(d.rounds.len(), cfg.rounds as usize, "{}", d.label);
        for r in &d.rounds {
            assert_eq!(r.bios, cfg.bios_per_round());
            assert_eq!(r.irqs, cfg.irqs_per_round());
            assert!(
                r.is_exact(),
                "{}: not every bio completed exactly once: {r:?}",
                d.label
            );
            assert!(r.elapsed > Duration::ZERO);
        }
    }

    #[test]
    fn every_bio_completes_once_in_each_design() {
        let cfg = small_throughput();
        let report = deferral_throughput(cfg.clone()).expect("the measurement runs");
        for d in [&report.batched, &report.direct, &report.channel] {
            check_design(d, &cfg);
        }
        assert_eq!(report.batched.label, "batched (v7)");
        for r in &report.batched.rounds {
            // Every flagged bio went through the batch, and the worker woke at most once per IRQ.
            assert_eq!(r.deferred, r.bios);
            assert!(r.worker_wakeups >= 1 && r.worker_wakeups <= r.irqs, "{r:?}");
            assert!(r.work_queued >= 1 && r.work_queued <= r.irqs, "{r:?}");
        }
        for r in &report.direct.rounds {
            assert_eq!((r.deferred, r.worker_wakeups, r.work_queued), (0, 0, 0));
        }
        for r in &report.channel.rounds {
            assert_eq!(r.deferred, 0);
            assert!(r.worker_wakeups <= r.bios);
        }
        assert!(report.meets_wakeup_target());
        assert!(report.batched_over_channel > 0.0 && report.direct_over_batched > 0.0);
        let text = report.to_string();
        assert!(text.contains("batched/channel"), "{text}");
    }

    #[test]
    fn delayed_variant_batches_within_a_jiffy() {
        // v6: the worker runs a jiffy after the first bio of an empty batch (HZ=1000 keeps it
        // short); the closed loop still completes every bio exactly once.
        let cfg = ThroughputConfig {
            variant: Variant::V6,
            kernel: KernelConfig {
                hz: 1000,
                ..KernelConfig::default()
            },
            bios: 256,
            bios_per_irq: 8,
            irqs_in_flight: 4,
            rounds: 1,
            ..ThroughputConfig::default()
        };
        let mut m = DeferralMachine::start(Design::Batched, cfg.clone()).expect("starts");
        assert_eq!(m.label(), "batched (v6)");
        let r = m.run_round().expect("the round completes");
        assert!(r.is_exact(), "{r:?}");
        assert_eq!(r.deferred, r.bios);
        assert!(r.worker_wakeups >= 1 && r.worker_wakeups <= r.irqs, "{r:?}");
        m.shutdown().expect("clean shutdown");
    }

    #[test]
    fn latency_reports_are_complete() {
        let cfg = LatencyConfig {
            light: Load::Light {
                bios: 6,
                gap: Duration::from_micros(100),
            },
            bursty: Load::Bursty {
                bursts: 2,
                irqs: 3,
                bios_per_irq: 2,
                spacing: Duration::from_micros(50),
                gap: Duration::from_micros(100),
            },
            ..LatencyConfig::default()
        };
        for v in [Variant::V6, Variant::V7] {
            let rep = completion_latency(v, cfg.clone()).expect("the measurement runs");
            assert_eq!(rep.hz, 250);
            assert_eq!(rep.jiffy(), Duration::from_millis(4));
            for (l, bios, irqs) in [(&rep.light, 6, 6), (&rep.bursty, 12, 6)] {
                assert_eq!((l.bios, l.irqs), (bios, irqs));
                assert_eq!(l.samples.len() as u64, bios, "{v}: {l:?}");
                assert_eq!(
                    (l.wrong_context, l.not_once, l.kernel_reports),
                    (0, 0, 0),
                    "{v}: {l:?}"
                );
                assert!(l.samples.windows(2).all(|w| w[0] <= w[1]));
                assert!(l.median <= l.p99 && l.p99 <= l.max && l.max > Duration::ZERO);
                assert!(
                    l.worker_wakeups >= 1 && l.worker_wakeups <= l.irqs,
                    "{v}: {l:?}"
                );
            }
            assert!(rep.to_string().contains(v.name));
        }
    }

    #[test]
    fn bad_configs_are_errors() {
        let zero = ThroughputConfig {
            bios_per_irq: 0,
            ..ThroughputConfig::default()
        };
        assert!(matches!(
            deferral_throughput(zero),
            Err(MeasureError::Config(_))
        ));
        let hz = ThroughputConfig {
            kernel: KernelConfig {
                hz: 123,
                ..KernelConfig::default()
            },
            ..ThroughputConfig::default()
        };
        assert!(matches!(
            deferral_throughput(hz),
            Err(MeasureError::Kernel(_))
        ));
        let mut probe = LatencyProbe::start(Variant::V7, LatencyConfig::default()).expect("starts");
        let empty = Load::Light {
            bios: 0,
            gap: Duration::ZERO,
        };
        assert!(matches!(probe.run(empty), Err(MeasureError::Config(_))));
        probe.shutdown().expect("clean shutdown");
    }

    #[test]
    fn rounding_and_percentiles() {
        let cfg = ThroughputConfig {
            bios: 100,
            bios_per_irq: 16,
            nr_cpus: 2,
            ..ThroughputConfig::default()
        };
        assert_eq!(cfg.irqs_per_cpu(), 4);
        assert_eq!(cfg.bios_per_round(), 128);
        assert_eq!(cfg.irqs_per_round(), 8);
        let s: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&s, 0.5), Duration::from_micros(50));
        assert_eq!(percentile(&s, 0.99), Duration::from_micros(99));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
        assert_eq!(median_f64(vec![3.0, 1.0, 2.0]), 2.0);
    }

    /// Finding 8 and the deferral figures with the default configs. Run with
    /// `cargo test -p bio-sim --release --lib measure::tests::report -- --ignored --nocapture`.
    #[test]
    #[ignore = "prints measurements; run explicitly"]
    fn report() {
        for v in [Variant::V6, Variant::V7] {
            let rep = completion_latency(v, LatencyConfig::default()).expect("latency");
            println!("{rep}");
        }
        let rep = deferral_throughput(ThroughputConfig::default()).expect("throughput");
        println!("{rep}");
    }
}
