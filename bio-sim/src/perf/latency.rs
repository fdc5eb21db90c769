//! Completion latency (finding 8): the time from the interrupt handler calling `bio_endio()` to
//! the bio's `bi_end_io` starting in the worker, on the [measurement machine](super::rig).
//!
//! One batcher variant at a time (v6: 1-jiffy delayed work; v7: plain work), under a light load
//! (one bio per interrupt, one at a time, an idle gap between) and a bursty one (bursts of
//! interrupts a little apart, an idle gap between bursts). With the delay, a bio waits for the
//! next tick: up to one jiffy, 4 ms at `CONFIG_HZ=250`.

use super::rig::{boot, cpu_thread_wakeups, stop_runtime, Batch, BatchCounters, MeasureError};
use super::stats::{human, percentile, ratio};
use crate::runtime::rng::SplitMix64;
use crate::runtime::threaded::ThreadedRuntime;
use bio_core::block::complete_in_task::{Variant, WorkKind};
use bio_core::block::{bio_endio, bio_in_atomic, BioEndIo, BioFlag, ReqOp};
use bio_core::kernel::CpuId;
use bio_core::{Cpu, Kernel, KernelConfig};
use crossbeam_channel::{Receiver, Sender};
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// A round of `slots` bios, its clock starting now.
    fn new(slots: usize, done_tx: Sender<()>) -> Self {
        Self {
            base: Instant::now(),
            start_ns: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            lat_ns: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            seen: (0..slots).map(|_| AtomicU32::new(0)).collect(),
            wrong_context: AtomicU64::new(0),
            done_tx,
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The latencies of the bios whose `bi_end_io` ran exactly once, sorted, and how many bios
    /// did not run it exactly once.
    fn sorted_samples(&self) -> (Vec<Duration>, u64) {
        let mut samples: Vec<Duration> = Vec::with_capacity(self.seen.len());
        let mut not_once = 0;
        for (seen, lat) in self.seen.iter().zip(self.lat_ns.iter()) {
            if seen.load(Ordering::Acquire) == 1 {
                samples.push(Duration::from_nanos(lat.load(Ordering::Acquire)));
            } else {
                not_once += 1;
            }
        }
        samples.sort_unstable();
        (samples, not_once)
    }
}

/// The `bi_end_io` of a latency round: records the bio's latency in its slot (its sector) and
/// whether it ran in atomic context, then signals one completion.
fn latency_end_io(round: &Arc<LatRound>) -> BioEndIo {
    let r = Arc::clone(round);
    BioEndIo::new("measure_latency_end_io", move |bio, cx| {
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
    })
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
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        let round = Arc::new(LatRound::new(slots, done_tx));
        let batches = self.alloc_batches(load, &round);

        let before = self.counters.snapshot();
        let before_wakeups = cpu_thread_wakeups(rt);
        let before_reports = self.kernel.reports().len();
        let started = Instant::now();
        let result = self.drive(load, batches, &round, &done_rx);
        let elapsed = started.elapsed();
        result?;
        let rt = self.rt.as_ref().ok_or(MeasureError::Stopped)?;
        if !rt.drain(timeout) {
            return Err(MeasureError::NotQuiescent {
                what: self.what(load),
                timeout,
            });
        }
        let after = self.counters.snapshot();
        let (samples, not_once) = round.sorted_samples();
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

    /// What an error of `load` says was being measured.
    fn what(&self, load: Load) -> String {
        format!("{} load on {}", load.name(), self.variant.name)
    }

    /// The load's flagged write bios, one batch per interrupt, the next one to raise last; each
    /// bio's sector is its slot in `round`. Allocated before the clock starts.
    fn alloc_batches(&self, load: Load, round: &Arc<LatRound>) -> Vec<Batch> {
        let end_io = latency_end_io(round);
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
        batches
    }

    /// The timed part of a load: raises its interrupts from `batches` in the load's pattern and
    /// waits for each interrupt's (light) or burst's (bursty) completions before the idle gap.
    fn drive(
        &mut self,
        load: Load,
        mut batches: Vec<Batch>,
        round: &Arc<LatRound>,
        done_rx: &Receiver<()>,
    ) -> Result<(), MeasureError> {
        let nr = u64::from(self.cfg.nr_cpus);
        let mut completed = 0u64;
        match load {
            Load::Light { bios, gap } => {
                for i in 0..bios {
                    if let Some(batch) = batches.pop() {
                        raise_timed(&self.kernel, CpuId((i % nr) as u32), batch, round)?;
                    }
                    self.wait_done(load, done_rx, 1, &mut completed)?;
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
                            raise_timed(&self.kernel, cpu, batch, round)?;
                        }
                        if j + 1 < irqs {
                            std::thread::sleep(spacing);
                        }
                    }
                    let n = u64::from(irqs) * u64::from(bios_per_irq);
                    self.wait_done(load, done_rx, n, &mut completed)?;
                    let g = self.jitter(gap);
                    std::thread::sleep(g);
                }
            }
        }
        Ok(())
    }

    /// Waits for `n` more `bi_end_io` runs, each within the timeout, counting them in `completed`.
    fn wait_done(
        &self,
        load: Load,
        done_rx: &Receiver<()>,
        n: u64,
        completed: &mut u64,
    ) -> Result<(), MeasureError> {
        let timeout = self.cfg.timeout;
        for _ in 0..n {
            match done_rx.recv_timeout(timeout) {
                Ok(()) => *completed += 1,
                Err(_) => {
                    return Err(MeasureError::Timeout {
                        what: self.what(load),
                        completed: *completed,
                        expected: load.bios(),
                        timeout,
                    })
                }
            }
        }
        Ok(())
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
        .map_err(MeasureError::from)
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
        let mut probe = LatencyProbe::start(Variant::V7, LatencyConfig::default()).expect("starts");
        let empty = Load::Light {
            bios: 0,
            gap: Duration::ZERO,
        };
        assert!(matches!(probe.run(empty), Err(MeasureError::Config(_))));
        probe.shutdown().expect("clean shutdown");
    }

    /// Finding 8 with the default config. Run with
    /// `cargo test -p bio-sim --release --lib latency::tests::report -- --ignored --nocapture`.
    #[test]
    #[ignore = "prints measurements; run explicitly"]
    fn report() {
        for v in [Variant::V6, Variant::V7] {
            let rep = completion_latency(v, LatencyConfig::default()).expect("latency");
            println!("{rep}");
        }
    }
}
