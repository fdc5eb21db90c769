//! Deferral throughput (issue 5 "Performance"): bios per second from `bio_endio()` to
//! `bi_end_io` having run, for three completion designs on the [measurement machine](super::rig).
//!
//! The designs run on the same producer pattern and the same number of bios, rounds interleaved so
//! a noisy host hurts all three alike:
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
//! timed from raising the first interrupt to the last `bi_end_io` returning. The functions return
//! plain result structs and print nothing; the structs implement `Display`.

use super::rig::{boot, cpu_thread_wakeups, stop_runtime, Batch, BatchCounters, MeasureError};
use super::stats::{median, ratio};
use crate::runtime::threaded::ThreadedRuntime;
use bio_core::block::complete_in_task::Variant;
use bio_core::block::{bio_endio, bio_in_atomic, Bio, BioEndIo, BioFlag, ReqOp};
use bio_core::kernel::CpuId;
use bio_core::{Cpu, Kernel, KernelConfig};
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    /// Worker wake-ups (see [what a wake-up is](super::rig): batcher work-function runs, or blocking receives of
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
        let median_bios_per_sec = median(
            &rounds
                .iter()
                .map(RoundStats::bios_per_sec)
                .collect::<Vec<_>>(),
        );
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
    /// A round of `slots` bios of `design` under `cfg`, nothing completed yet.
    fn new(cfg: &ThroughputConfig, design: Design, slots: usize, done_tx: Sender<()>) -> Self {
        let k = u64::from(cfg.bios_per_irq);
        Self {
            k,
            per_cpu_bios: cfg.irqs_per_cpu() * k,
            nr_cpus: cfg.nr_cpus,
            expect_task: design != Design::Direct,
            seen: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            cpus: (0..cfg.nr_cpus as usize)
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
        }
    }

    /// (bios completed at least once, bios never completed, extra completions).
    fn tally(&self) -> (u64, u64, u64) {
        let (mut completed_once, mut missing, mut duplicates) = (0, 0, 0);
        for s in self.seen.iter() {
            match u64::from(s.load(Ordering::Acquire)) {
                0 => missing += 1,
                1 => completed_once += 1,
                n => {
                    completed_once += 1;
                    duplicates += n - 1;
                }
            }
        }
        (completed_once, missing, duplicates)
    }

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
        .map_err(MeasureError::from)
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
        let irqs_per_cpu = cfg.irqs_per_cpu();
        let total = cfg.bios_per_round();
        let slots = usize::try_from(total)
            .map_err(|_| MeasureError::Config("too many bios for this machine".to_owned()))?;
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let round = Arc::new(Round::new(cfg, self.design, slots, done_tx));
        self.load_batches(&round);
        let what = || format!("deferral round, {}", self.label());
        let before_counters = self.counters.snapshot();
        let before_chan = self.channel_wakeups();
        let before_wakeups = cpu_thread_wakeups(rt);
        let before_reports = self.kernel.reports().len();

        let start = Instant::now();
        if let Err(e) = self.raise_first(&round) {
            round.discard();
            return Err(e);
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
        let (completed_once, missing, duplicates) = round.tally();
        let chan_wakeups = self.channel_wakeups() - before_chan;
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

    /// Allocates every CPU's bios of `round` (flagged for [`Design::Batched`]), one batch per
    /// interrupt, the next one to raise last; each bio's sector is its slot.
    fn load_batches(&self, round: &Arc<Round>) {
        let k = round.k;
        let flag = self.design == Design::Batched;
        for (cpu, c) in round.cpus.iter().enumerate() {
            let end_io = self.end_io(round);
            let base = cpu as u64 * round.per_cpu_bios;
            let mut batches: Vec<Batch> = (0..self.cfg.irqs_per_cpu())
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
    }

    /// Starts the closed loop: [`ThroughputConfig::irqs_in_flight`] interrupts on every CPU,
    /// round-robin over the CPUs.
    fn raise_first(&self, round: &Round) -> Result<(), MeasureError> {
        let cfg = &self.cfg;
        let in_flight = cfg
            .irqs_in_flight
            .min(u32::try_from(cfg.irqs_per_cpu()).unwrap_or(u32::MAX));
        for _ in 0..in_flight {
            for cpu in 0..cfg.nr_cpus as usize {
                let next = round.cpus[cpu].batches.lock().pop();
                if let Some(batch) = next {
                    raise_batch(&self.kernel, CpuId(cpu as u32), batch)?;
                }
            }
        }
        Ok(())
    }

    /// The channel worker's wake-ups so far (0 without one).
    fn channel_wakeups(&self) -> u64 {
        self.channel
            .as_ref()
            .map_or(0, |c| c.wakeups.load(Ordering::Acquire))
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
    }

    #[test]
    fn rounding() {
        let cfg = ThroughputConfig {
            bios: 100,
            bios_per_irq: 16,
            nr_cpus: 2,
            ..ThroughputConfig::default()
        };
        assert_eq!(cfg.irqs_per_cpu(), 4);
        assert_eq!(cfg.bios_per_round(), 128);
        assert_eq!(cfg.irqs_per_round(), 8);
    }

    /// The deferral figures with the default config. Run with
    /// `cargo test -p bio-sim --release --lib deferral::tests::report -- --ignored --nocapture`.
    #[test]
    #[ignore = "prints measurements; run explicitly"]
    fn report() {
        let rep = deferral_throughput(ThroughputConfig::default()).expect("throughput");
        println!("{rep}");
    }
}
