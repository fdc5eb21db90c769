//! `biosim bench null-blk`: the whole simulated stack over null_blk
//! (`drivers/block/null_blk/main.c`) on the threaded runtime — `submit_bio_noacct()` → blk-mq's tag
//! → `null_queue_rq()` → the `irqmode`'s completion → `blk_mq_end_request()` → `bio_endio()` →
//! `bi_end_io` — with no device time in the way (except `irqmode=2`'s `completion_nsec`).
//!
//! Per `irqmode`, two paths: **direct** (plain bios: `bio_endio()` runs `bi_end_io` where the
//! driver completes) and **deferred** (`BIO_COMPLETE_IN_TASK` bios on a kernel with the
//! task-completion batcher of one variant: a completion in interrupt context goes to the
//! per-CPU batch and its worker runs `bi_end_io`). With `irqmode=0` completion happens in the
//! submitter's task context, so the flag defers nothing there and the row measures what the
//! flag's check costs.
//!
//! Every round runs every row once, interleaved, each on a fresh machine (booted outside the
//! timed part): every CPU submits its 4 KiB reads back to back from task context with at most
//! `hw_queue_depth / cpus` in flight, and waits for them. Figures: bios/s (wall clock of the timed
//! part) and CPU ns per bio (`getrusage(RUSAGE_SELF)` user + system over the same part, divided
//! by the bios: every thread of the process, the simulated CPUs, workers and the hrtimer thread
//! included); each as median and min–max over the rounds.

use super::bench_common::BenchError;
use super::rig::{boot, stop_runtime};
use super::stats::median;
use bio_core::block::complete_in_task::Variant;
use bio_core::block::{submit_bio_noacct, BioEndIo, BioFlag, ReqOp, BLK_STS_OK};
use bio_core::drivers::block::null_blk::{NullBlk, NullBlkConfig, NullIrqMode};
use bio_core::{Cpu, CpuId, KernelConfig};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes per bio.
const BS: usize = 4096;

/// What `biosim bench null-blk` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NullBlkBenchConfig {
    /// Simulated CPUs, each submitting.
    pub cpus: u32,
    /// Bios per CPU per round.
    pub bios_per_cpu: u64,
    /// Rounds.
    pub rounds: usize,
    /// The `irqmode`s to run, in order.
    pub irqmodes: Vec<NullIrqMode>,
    /// `completion_nsec` (timer mode).
    pub completion_nsec: u64,
    /// `hw_queue_depth`.
    pub hw_queue_depth: u32,
    /// The batcher variant of the deferred path.
    pub variant: Variant,
}

impl Default for NullBlkBenchConfig {
    fn default() -> Self {
        NullBlkBenchConfig {
            cpus: 2,
            bios_per_cpu: 20_000,
            rounds: 5,
            irqmodes: vec![NullIrqMode::None, NullIrqMode::Softirq, NullIrqMode::Timer],
            completion_nsec: 10_000,
            hw_queue_depth: 64,
            variant: Variant::DEFAULT,
        }
    }
}

/// Parses `--irqmode`: `all`, or a comma list of `none`/`softirq`/`timer` (or 0/1/2).
pub fn parse_irqmodes(s: &str) -> Result<Vec<NullIrqMode>, String> {
    if s == "all" {
        return Ok(NullBlkBenchConfig::default().irqmodes);
    }
    s.split(',')
        .map(|m| match m {
            "none" | "0" => Ok(NullIrqMode::None),
            "softirq" | "1" => Ok(NullIrqMode::Softirq),
            "timer" | "2" => Ok(NullIrqMode::Timer),
            _ => Err(format!(
                "--irqmode {m}: expected none, softirq, timer (0, 1, 2) or all"
            )),
        })
        .collect()
}

/// One row's figures over the rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct NullBlkRow {
    /// The `irqmode`.
    pub irqmode: NullIrqMode,
    /// Deferred (`BIO_COMPLETE_IN_TASK`) or direct.
    pub deferred: bool,
    /// Bios/s of each round.
    pub bios_per_sec: Vec<f64>,
    /// CPU ns per bio of each round.
    pub cpu_ns_per_bio: Vec<f64>,
    /// Bios the batcher deferred, over all rounds.
    pub bios_deferred: u64,
    /// Bios, over all rounds.
    pub bios: u64,
    /// Submissions that slept for a tag, over all rounds.
    pub tag_waits: u64,
}

/// The report.
#[derive(Debug, Clone, PartialEq)]
pub struct NullBlkBenchReport {
    /// The configuration.
    pub cfg: NullBlkBenchConfig,
    /// One row per `irqmode` and path, direct first.
    pub rows: Vec<NullBlkRow>,
}

/// CPU time (user + system) of the whole process so far, ns (`getrusage(RUSAGE_SELF)`).
fn cpu_ns() -> u64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `u` is a valid, writable `rusage`; getrusage only writes into it.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
    if r != 0 {
        return 0;
    }
    // SAFETY: getrusage succeeded and filled the struct (it was zeroed before anyway).
    let u = unsafe { u.assume_init() };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    ns(u.ru_utime) + ns(u.ru_stime)
}

/// What one run measured.
struct Run {
    bios_per_sec: f64,
    cpu_ns_per_bio: f64,
    deferred: u64,
    tag_waits: u64,
}

/// One CPU's share, in task context: `n` reads at its own sectors, at most `window` in flight.
fn submit_and_wait(
    cx: &Cpu,
    nb: &Arc<NullBlk>,
    n: u64,
    window: u64,
    flag: bool,
    errors: &Arc<AtomicU64>,
) -> bool {
    let done = Arc::new(AtomicU64::new(0));
    let base = u64::from(cx.id().0) * n * 8;
    let (d, e) = (Arc::clone(&done), Arc::clone(errors));
    let end = BioEndIo::new("bench_nullb_end_io", move |bio, _| {
        if bio.status() != BLK_STS_OK {
            e.fetch_add(1, Ordering::Relaxed);
        }
        d.fetch_add(1, Ordering::Release);
    });
    for i in 0..n {
        let d = Arc::clone(&done);
        if !cx.wait_until("bench: window", &|| i < d.load(Ordering::Acquire) + window) {
            return false;
        }
        let mut bio = cx
            .kernel()
            .bio_alloc(ReqOp::Read, base + i * 8)
            .with_data(vec![0; BS])
            .with_end_io(end.clone());
        if flag {
            bio.set_flag(BioFlag::CompleteInTask);
        }
        submit_bio_noacct(bio, &**nb, cx);
    }
    cx.wait_until("bench: all bios ended", &|| {
        done.load(Ordering::Acquire) >= n
    })
}

/// One row once, on a fresh machine.
fn run_once(
    cfg: &NullBlkBenchConfig,
    irqmode: NullIrqMode,
    deferred: bool,
) -> Result<Run, BenchError> {
    let m = |e: &dyn fmt::Display| BenchError::Machine(e.to_string());
    let (kernel, rt, counters) = boot(
        KernelConfig::default(),
        cfg.cpus,
        deferred.then_some(cfg.variant),
    )
    .map_err(|e| m(&e))?;
    let mut nc = NullBlkConfig {
        irqmode,
        completion_nsec: cfg.completion_nsec,
        hw_queue_depth: cfg.hw_queue_depth,
        ..NullBlkConfig::default()
    };
    // Room for every CPU's sectors.
    nc.size_bytes = nc
        .size_bytes
        .max(u64::from(cfg.cpus) * cfg.bios_per_cpu * BS as u64);
    let nb = NullBlk::new(&kernel, 0, nc).map_err(|e| m(&e))?;
    let errors = Arc::new(AtomicU64::new(0));
    let window = (u64::from(cfg.hw_queue_depth) / u64::from(cfg.cpus)).max(1);
    let before_deferred = counters.snapshot().2;
    let c0 = cpu_ns();
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for cpu in 0..cfg.cpus {
        let (nb, e, n) = (Arc::clone(&nb), Arc::clone(&errors), cfg.bios_per_cpu);
        handles.push(
            rt.post_on(CpuId(cpu), move |cx| {
                submit_and_wait(cx, &nb, n, window, deferred, &e)
            })
            .map_err(|e| m(&e))?,
        );
    }
    for h in handles {
        if !h.wait().map_err(|e| m(&e))? {
            return Err(BenchError::Machine("bios did not end in time".into()));
        }
    }
    let elapsed = t0.elapsed();
    let cpu = cpu_ns().saturating_sub(c0);
    let deferred_bios = counters.snapshot().2 - before_deferred;
    let tag_waits = nb.stats().tag_waits;
    drop(nb);
    stop_runtime(rt, Duration::from_secs(30), "bench null-blk").map_err(|e| m(&e))?;
    if errors.load(Ordering::Relaxed) > 0 {
        return Err(BenchError::Machine(format!(
            "{} bios failed on null_blk irqmode={}",
            errors.load(Ordering::Relaxed),
            irqmode.nr()
        )));
    }
    if let Some(r) = kernel.reports().all().first() {
        return Err(BenchError::Machine(format!(
            "kernel report during the bench: {}",
            r.message
        )));
    }
    let bios = u64::from(cfg.cpus) * cfg.bios_per_cpu;
    Ok(Run {
        bios_per_sec: bios as f64 / elapsed.as_secs_f64().max(1e-9),
        cpu_ns_per_bio: cpu as f64 / bios as f64,
        deferred: deferred_bios,
        tag_waits,
    })
}

/// Runs the benchmark: every row once per round, interleaved.
pub fn null_blk_bench(cfg: &NullBlkBenchConfig) -> Result<NullBlkBenchReport, BenchError> {
    if cfg.cpus == 0 || cfg.cpus > 64 || cfg.rounds == 0 || cfg.bios_per_cpu == 0 {
        return Err(BenchError::Param(
            "cpus must be 1..=64, rounds and bios at least 1".into(),
        ));
    }
    if cfg.hw_queue_depth == 0 || cfg.irqmodes.is_empty() {
        return Err(BenchError::Param(
            "--hw-queue-depth and --irqmode need at least one".into(),
        ));
    }
    let mut rows: Vec<NullBlkRow> = cfg
        .irqmodes
        .iter()
        .flat_map(|&irqmode| {
            [false, true].map(|deferred| NullBlkRow {
                irqmode,
                deferred,
                bios_per_sec: Vec::new(),
                cpu_ns_per_bio: Vec::new(),
                bios_deferred: 0,
                bios: 0,
                tag_waits: 0,
            })
        })
        .collect();
    for _ in 0..cfg.rounds {
        for row in rows.iter_mut() {
            let r = run_once(cfg, row.irqmode, row.deferred)?;
            row.bios_per_sec.push(r.bios_per_sec);
            row.cpu_ns_per_bio.push(r.cpu_ns_per_bio);
            row.bios_deferred += r.deferred;
            row.bios += u64::from(cfg.cpus) * cfg.bios_per_cpu;
            row.tag_waits += r.tag_waits;
        }
    }
    Ok(NullBlkBenchReport {
        cfg: cfg.clone(),
        rows,
    })
}

fn spread(xs: &[f64], digits: usize) -> String {
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.digits$} ({lo:.digits$}–{hi:.digits$})", median(xs))
}

impl fmt::Display for NullBlkBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.cfg;
        writeln!(
            f,
            "null_blk through the whole stack: {} CPUs x {} 4 KiB reads, hw_queue_depth={}, completion_nsec={}, {} rounds interleaved (median (min–max))",
            c.cpus, c.bios_per_cpu, c.hw_queue_depth, c.completion_nsec, c.rounds
        )?;
        writeln!(
            f,
            "{:<12} {:<16} {:>28} {:>24} {:>10}",
            "irqmode", "path", "bios/s", "CPU ns/bio", "deferred"
        )?;
        for r in &self.rows {
            let path = if r.deferred {
                format!("deferred ({})", c.variant.name)
            } else {
                "direct".to_owned()
            };
            writeln!(
                f,
                "{:<12} {:<16} {:>28} {:>24} {:>9.0}%",
                format!("{} ({})", r.irqmode.nr(), r.irqmode.name()),
                path,
                spread(&r.bios_per_sec, 0),
                spread(&r.cpu_ns_per_bio, 0),
                100.0 * r.bios_deferred as f64 / r.bios.max(1) as f64
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report's shape with tiny sizes (no figure is checked: performance is for benches).
    #[test]
    fn the_report_has_a_row_per_irqmode_and_path_and_the_deferred_rows_defer_in_interrupts() {
        let cfg = NullBlkBenchConfig {
            bios_per_cpu: 40,
            rounds: 2,
            completion_nsec: 1_000,
            ..NullBlkBenchConfig::default()
        };
        let rep = null_blk_bench(&cfg).unwrap();
        assert_eq!(rep.rows.len(), 6);
        for r in &rep.rows {
            assert_eq!(
                (r.bios_per_sec.len(), r.cpu_ns_per_bio.len(), r.bios),
                (2, 2, 160)
            );
            // Only an interrupt-context completion defers; irqmode=0 ends in task context.
            let defers = r.deferred && r.irqmode != NullIrqMode::None;
            assert_eq!(r.bios_deferred == r.bios, defers, "{r:?}");
            assert_eq!(r.bios_deferred, if defers { r.bios } else { 0 }, "{r:?}");
        }
        let text = rep.to_string();
        assert_eq!(text.lines().count(), 8, "{text}");
        assert!(text.contains("2 (timer)    deferred (v7)"), "{text}");
        assert_eq!(
            parse_irqmodes("none,2").unwrap(),
            [NullIrqMode::None, NullIrqMode::Timer]
        );
        assert!(parse_irqmodes("fast")
            .unwrap_err()
            .contains("--irqmode fast"));
        let bad = NullBlkBenchConfig { cpus: 0, ..cfg };
        assert!(matches!(null_blk_bench(&bad), Err(BenchError::Param(_))));
    }
}
