//! `biosim bench loop`: the loop driver model (`drivers/block/loop.c` with the NOWAIT series) on
//! the threaded runtime over a real `O_DIRECT` file, for each posted version, against raw
//! `pread`/`pwrite` of the same offsets from the same number of threads; reported as medians of
//! interleaved rounds and as ratios measured side by side in one run (never timed tests).
//! Workloads: random writes into a sparse file (the patch 6/6 case), random overwrites, random
//! reads.
//!
//! The figures measure biosim's model: its NOWAIT attempt and its worker path are synchronous
//! `preadv2`/`pwritev2` calls on simulated CPU threads, where the kernel's direct I/O would return
//! `-EIOCBQUEUED` and complete from the disk's interrupt. What carries over is the cost the
//! filesystem charges for a refused `RWF_NOWAIT` attempt and the serialisation of a single loop
//! worker; docs/performance.md says how to read them.

use super::bench_common::{io_err, BenchError};
use super::sim_submit::{first_splat, loop_device, never, start_runtime, Window};
use super::stats::median;
use crate::dev::backing::{BackingFile, RwFlags};
use crate::dev::loop_file::{FileBacking, UringBacking};
use crate::dev::uring::{UringEngine, UringOp};
use crate::runtime::threaded::ThreadedRuntime;
use bio_core::block::{submit_bio_noacct, BioEndIo, ReqOp, BLK_STS_OK};
use bio_core::drivers::block::loop_drv::{
    LoopBacking, LoopDevice, LoopStats, LoopVariant, LO_FLAGS_DIRECT_IO,
};
use bio_core::kernel::CpuId;
use bio_core::{Cpu, Kernel, KernelConfig};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A loop workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// 4 KiB random writes into a file whose blocks are holes (re-punched before every round).
    RandWriteSparse,
    /// 4 KiB random writes over blocks written before.
    RandWriteOverwrite,
    /// 4 KiB random reads of written blocks.
    RandRead,
}

impl Workload {
    /// Every workload.
    pub const ALL: [Workload; 3] = [
        Self::RandWriteSparse,
        Self::RandWriteOverwrite,
        Self::RandRead,
    ];

    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Self::RandWriteSparse => "randwrite-sparse",
            Self::RandWriteOverwrite => "randwrite-overwrite",
            Self::RandRead => "randread",
        }
    }

    /// Parses a CLI name.
    pub fn parse(s: &str) -> Result<Vec<Workload>, BenchError> {
        if s == "all" {
            return Ok(Self::ALL.to_vec());
        }
        Self::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .map(|w| vec![w])
            .ok_or_else(|| {
                BenchError::Param(format!(
                    "unknown workload `{s}` (expected randwrite-sparse, randwrite-overwrite, randread or all)"
                ))
            })
    }

    fn write(self) -> bool {
        !matches!(self, Self::RandRead)
    }
}

/// The loop benchmark's parameters.
#[derive(Debug, Clone)]
pub struct LoopBenchConfig {
    /// Where to create the backing file (it is removed afterwards).
    pub dir: PathBuf,
    /// The backing file's size.
    pub file_size: u64,
    /// I/Os per submitting CPU per round.
    pub ios_per_cpu: usize,
    /// Simulated CPUs, each submitting from its own thread (and raw threads for the baseline).
    pub cpus: u32,
    /// Rounds; each runs every design once, interleaved.
    pub rounds: usize,
    /// The workloads.
    pub workloads: Vec<Workload>,
    /// How the loop device's backing does its I/O.
    pub engine: Engine,
    /// Whether the simulated kernel's tracepoints are on (`Kernel::set_tracepoints_enabled`):
    /// the default leaves them on; `biosim bench loop` turns them off unless `RUST_LOG` is set
    /// ([`crate::perf::job::run::bench_tracepoints`]), as on the real kernel raw runs on.
    pub tracepoints: bool,
}

/// The I/O engine under the loop model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Synchronous `preadv2`/`pwritev2` on the submitting CPU or the worker ([`FileBacking`]);
    /// the raw baseline is as many threads doing `pread`/`pwrite`.
    Sync,
    /// Asynchronous io_uring, completions as interrupts ([`crate::dev::loop_file::UringBacking`]);
    /// the raw baseline is one io_uring at the same depth.
    Uring,
}

impl Engine {
    /// Parses a CLI name.
    pub fn parse(s: &str) -> Result<Engine, BenchError> {
        match s {
            "sync" => Ok(Engine::Sync),
            "uring" | "io_uring" => Ok(Engine::Uring),
            _ => Err(BenchError::Param(format!(
                "unknown engine `{s}` (expected sync or uring)"
            ))),
        }
    }

    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Sync => "sync",
            Engine::Uring => "uring",
        }
    }
}

impl Default for LoopBenchConfig {
    fn default() -> Self {
        LoopBenchConfig {
            dir: std::env::temp_dir(),
            file_size: 64 << 20,
            ios_per_cpu: 2048,
            cpus: 2,
            rounds: 5,
            workloads: Workload::ALL.to_vec(),
            engine: Engine::Sync,
            tracepoints: true,
        }
    }
}

const BS: usize = 4096;

/// One design's results for one workload.
#[derive(Debug, Clone)]
pub struct DesignResult {
    /// `raw` or a loop version's name.
    pub design: String,
    /// IOPS of each round.
    pub iops: Vec<f64>,
    /// The loop device's counters of the last round (none for raw).
    pub stats: Option<LoopStats>,
}

impl DesignResult {
    /// The median IOPS.
    pub fn median(&self) -> f64 {
        median(&self.iops)
    }
}

/// The loop benchmark's report.
#[derive(Debug, Clone)]
pub struct LoopBenchReport {
    /// The configuration.
    pub config: LoopBenchConfig,
    /// Per workload, every design.
    pub results: Vec<(Workload, Vec<DesignResult>)>,
    /// Whether the backing file supported `RWF_NOWAIT`.
    pub nowait: bool,
}

impl fmt::Display for LoopBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "loop over a real O_DIRECT file in {} ({} MiB, FMODE_NOWAIT={}), engine {}: {} CPUs x {} I/Os of 4 KiB per round, {} rounds, medians",
            c.dir.display(),
            c.file_size >> 20,
            self.nowait,
            c.engine.name(),
            c.cpus,
            c.ios_per_cpu,
            c.rounds
        )?;
        for (w, designs) in &self.results {
            let raw = designs
                .iter()
                .find(|d| d.design == "raw")
                .map_or(0.0, DesignResult::median);
            writeln!(f, "\n{}:", w.name())?;
            writeln!(
                f,
                "  {:<12} {:>10} {:>8}  counters (last round)",
                "design", "IOPS", "vs raw"
            )?;
            for d in designs {
                let m = d.median();
                let ratio = if raw > 0.0 { m / raw } else { 0.0 };
                let counters = d.stats.map_or(String::new(), |s| {
                    format!(
                        "NOWAIT tried {} done {} EAGAIN {}; hint skipped {}; worker {}",
                        s.nowait_tried,
                        s.nowait_done,
                        s.nowait_eagain,
                        s.hint_skipped,
                        s.worker_cmds
                    )
                });
                writeln!(
                    f,
                    "  {:<12} {:>10.0} {:>8.2}  {counters}",
                    d.design, m, ratio
                )?;
            }
        }
        Ok(())
    }
}

/// CPU `cpu`'s share of a reproducible random permutation of the file's blocks (Fisher-Yates
/// driven by an LCG): CPUs get disjoint blocks, and no block repeats until every block was used.
fn offsets(cpu: u32, n: usize, blocks: u64) -> Vec<u64> {
    let mut perm: Vec<u64> = (0..blocks).collect();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in (1..perm.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = ((x >> 33) % (i as u64 + 1)) as usize;
        perm.swap(i, j);
    }
    let start = cpu as usize * n;
    (0..n)
        .map(|k| perm[(start + k) % perm.len()] * BS as u64)
        .collect()
}
/// Writes every block once (so overwrites and reads find allocated, written blocks).
fn fill(file: &BackingFile) -> Result<(), BenchError> {
    let buf = crate::dev::aligned::AlignedBuf::from_slice(&vec![0x5a; 1 << 20]);
    let mut off = 0;
    while off < file.size() {
        // The file size is a whole number of blocks (the caller rounds it), so is the tail.
        let n = (file.size() - off).min(buf.len() as u64) as usize;
        file.write_all_at(&buf[..n], off, RwFlags::empty())
            .map_err(io_err("filling", file.path()))?;
        off += n as u64;
    }
    Ok(())
}

/// Raw `pread`/`pwrite` of the same offsets from `cpus` threads: the ceiling.
fn run_raw(file: &Arc<BackingFile>, w: Workload, cfg: &LoopBenchConfig) -> Result<f64, BenchError> {
    let blocks = file.size() / BS as u64;
    let t0 = Instant::now();
    let handles: Vec<_> = (0..cfg.cpus)
        .map(|cpu| {
            let file = Arc::clone(file);
            let offs = offsets(cpu, cfg.ios_per_cpu, blocks);
            std::thread::spawn(move || -> std::io::Result<()> {
                let mut buf = crate::dev::aligned::AlignedBuf::new(BS);
                for off in offs {
                    if w.write() {
                        file.write_all_at(&buf, off, RwFlags::empty())?;
                    } else {
                        file.read_exact_at(&mut buf, off, RwFlags::empty())?;
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join()
            .map_err(|_| BenchError::Machine("a raw I/O thread panicked".into()))?
            .map_err(io_err("raw I/O", file.path()))?;
    }
    Ok((cfg.cpus as usize * cfg.ios_per_cpu) as f64 / t0.elapsed().as_secs_f64())
}

/// One io_uring at the loop queue's depth doing the same I/Os: the asynchronous ceiling.
fn run_raw_uring(
    file: &Arc<BackingFile>,
    w: Workload,
    cfg: &LoopBenchConfig,
) -> Result<f64, BenchError> {
    let blocks = file.size() / BS as u64;
    let done = Arc::new((parking_lot::Mutex::new(0u64), parking_lot::Condvar::new()));
    let errors = Arc::new(AtomicUsize::new(0));
    let (d, e) = (Arc::clone(&done), Arc::clone(&errors));
    let engine = UringEngine::new(
        Arc::clone(file),
        LOOP_QUEUE_DEPTH as u32,
        RwFlags::empty(),
        move |c| {
            if c.result.is_err() {
                e.fetch_add(1, Ordering::Relaxed);
            }
            *d.0.lock() += 1;
            d.1.notify_all();
        },
    )
    .map_err(io_err("starting io_uring", file.path()))?;
    let offs: Vec<u64> = (0..cfg.cpus)
        .flat_map(|c| offsets(c, cfg.ios_per_cpu, blocks))
        .collect();
    let n = offs.len() as u64;
    let t0 = Instant::now();
    for (i, off) in offs.into_iter().enumerate() {
        {
            let mut g = done.0.lock();
            while (i as u64) >= *g + LOOP_QUEUE_DEPTH {
                done.1.wait(&mut g);
            }
        }
        let buf = crate::dev::aligned::AlignedBuf::new(BS);
        let op = if w.write() {
            UringOp::Write { buf, off }
        } else {
            UringOp::Read { buf, off }
        };
        engine
            .submit(i as u64, op)
            .map_err(|e| BenchError::Machine(format!("io_uring refused an op: {e}")))?;
    }
    {
        let mut g = done.0.lock();
        while *g < n {
            done.1.wait(&mut g);
        }
    }
    let elapsed = t0.elapsed();
    engine.shutdown();
    if errors.load(Ordering::Relaxed) > 0 {
        return Err(BenchError::Machine(format!(
            "{} raw io_uring I/Os failed",
            errors.load(Ordering::Relaxed)
        )));
    }
    Ok(n as f64 / elapsed.as_secs_f64())
}

/// The loop device of `variant` on the threaded runtime: every CPU submits its I/Os from task
/// context back to back and waits for their completions.
fn run_loop(
    file: &Arc<BackingFile>,
    variant: LoopVariant,
    w: Workload,
    cfg: &LoopBenchConfig,
) -> Result<(f64, LoopStats), BenchError> {
    let (kernel, lo, rt) = boot_loop(file, variant, cfg)?;
    let blocks = file.size() / BS as u64;
    let errors = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for cpu in 0..cfg.cpus {
        let (lo, errors) = (Arc::clone(&lo), Arc::clone(&errors));
        let offs = offsets(cpu, cfg.ios_per_cpu, blocks);
        let window = (LOOP_QUEUE_DEPTH / u64::from(cfg.cpus)).max(1);
        handles.push(rt.post_on(CpuId(cpu), move |cx| {
            submit_and_wait(cx, &lo, offs, window, w, &errors)
        })?);
    }
    for h in handles {
        if !h.wait()? {
            return Err(BenchError::Machine("I/Os did not complete in 120 s".into()));
        }
    }
    let elapsed = t0.elapsed();
    let stats = lo.stats();
    let report = rt.shutdown();
    if !report.is_clean() {
        return Err(BenchError::Machine(format!("unclean shutdown: {report:?}")));
    }
    if errors.load(Ordering::Relaxed) > 0 {
        return Err(BenchError::Machine(format!(
            "{} I/Os failed on {}",
            errors.load(Ordering::Relaxed),
            variant.name
        )));
    }
    if let Some(r) = first_splat(&kernel) {
        return Err(BenchError::Machine(format!(
            "kernel splat during the benchmark: {r}"
        )));
    }
    Ok((
        (cfg.cpus as usize * cfg.ios_per_cpu) as f64 / elapsed.as_secs_f64(),
        stats,
    ))
}

/// A booted kernel with a loop device of `variant` over `file` (through the configured engine)
/// and the threaded runtime running it.
fn boot_loop(
    file: &Arc<BackingFile>,
    variant: LoopVariant,
    cfg: &LoopBenchConfig,
) -> Result<(Arc<Kernel>, Arc<LoopDevice>, ThreadedRuntime), BenchError> {
    let kernel = Kernel::boot(KernelConfig::default(), cfg.cpus, cfg.cpus)
        .map_err(|e| BenchError::Machine(e.to_string()))?;
    kernel.set_tracepoints_enabled(cfg.tracepoints);
    let uring = match cfg.engine {
        Engine::Sync => None,
        Engine::Uring => Some(Arc::new(
            UringBacking::new(Arc::clone(file), LOOP_QUEUE_DEPTH as u32)
                .map_err(io_err("starting io_uring", file.path()))?,
        )),
    };
    let backing: Arc<dyn LoopBacking> = match &uring {
        Some(u) => Arc::clone(u) as Arc<dyn LoopBacking>,
        None => Arc::new(FileBacking::new(Arc::clone(file))),
    };
    let lo = loop_device(
        &kernel,
        backing,
        uring.as_ref(),
        LO_FLAGS_DIRECT_IO,
        variant,
    )?;
    let rt = start_runtime(&kernel)?;
    Ok((kernel, lo, rt))
}

/// One CPU's share, in task context on that CPU: submits a bio per offset with at most `window`
/// in flight (the tag set's depth, shared), then waits for all of them; `false` if a wait gave
/// up. Failed bios are counted in `errors`.
fn submit_and_wait(
    cx: &Cpu,
    lo: &Arc<LoopDevice>,
    offs: Vec<u64>,
    window: u64,
    w: Workload,
    errors: &Arc<AtomicUsize>,
) -> bool {
    let done = Arc::new(AtomicU64::new(0));
    let mut win = Window::new(&done, window);
    for off in offs {
        if !win.wait_slot(cx, "bench: a free tag", &never) {
            return false;
        }
        let (d, e) = (Arc::clone(&done), Arc::clone(errors));
        let op = if w.write() { ReqOp::Write } else { ReqOp::Read };
        let bio = cx
            .kernel()
            .bio_alloc(op, off >> 9)
            .with_data(vec![0xa5; BS])
            .with_end_io(BioEndIo::new("bench_end_io", move |bio, _| {
                if bio.status() != BLK_STS_OK {
                    e.fetch_add(1, Ordering::Relaxed);
                }
                d.fetch_add(1, Ordering::Release);
            }));
        win.submitted();
        submit_bio_noacct(bio, &**lo, cx);
    }
    win.wait_all(cx, "bench: all I/Os completed", &never)
}

/// `LOOP_DEFAULT_HW_Q_DEPTH`: the loop tag set's depth, shared by the submitting CPUs.
const LOOP_QUEUE_DEPTH: u64 = 128;

/// The versions the loop benchmark compares (v4 differs from v5 only in what its splat and its
/// FMODE_NOWAIT check cost, which a regular file does not show).
pub const LOOP_BENCH_VERSIONS: [LoopVariant; 3] =
    [LoopVariant::BASE, LoopVariant::V5_NO_HINT, LoopVariant::V5];

/// Runs the loop benchmark.
pub fn loop_bench(cfg: &LoopBenchConfig) -> Result<LoopBenchReport, BenchError> {
    if cfg.cpus == 0 || cfg.cpus > 64 || cfg.rounds == 0 || cfg.ios_per_cpu == 0 {
        return Err(BenchError::Param(
            "cpus must be 1..=64, rounds and ios at least 1".into(),
        ));
    }
    if cfg.file_size < (1 << 20) {
        return Err(BenchError::Param("the file must be at least 1 MiB".into()));
    }
    // No damage: a whole number of blocks (never rounded), room on the disk, a TempFile
    // (removed on Ctrl-C/SIGTERM too), O_DIRECT and RWF_NOWAIT where the file lives.
    let file_size = cfg.file_size;
    crate::dev::space::ensure_block_multiple(
        file_size,
        BS as u64,
        "--size",
        &file_size.to_string(),
    )
    .map_err(BenchError::Param)?;
    let (tmp, file) =
        crate::dev::space::scratch_file(&cfg.dir, "biosim-loop-bench", file_size, true)?;
    crate::dev::space::ensure_nowait(&file, &cfg.dir).map_err(BenchError::Param)?;
    let (path, file) = (tmp.path().to_owned(), Arc::new(file));
    let mut results = Vec::new();
    for &w in &cfg.workloads {
        if w == Workload::RandWriteSparse {
            file.punch_hole(0, file.size())
                .map_err(io_err("punching holes", &path))?;
        } else {
            fill(&file)?;
        }
        let mut designs: Vec<DesignResult> = std::iter::once("raw")
            .chain(LOOP_BENCH_VERSIONS.iter().map(|v| v.name))
            .map(|d| DesignResult {
                design: d.to_owned(),
                iops: Vec::new(),
                stats: None,
            })
            .collect();
        for _ in 0..cfg.rounds {
            for d in designs.iter_mut() {
                if w == Workload::RandWriteSparse {
                    // Every design starts from the same holes.
                    file.punch_hole(0, file.size())
                        .map_err(io_err("punching holes", &path))?;
                }
                if d.design == "raw" {
                    d.iops.push(match cfg.engine {
                        Engine::Sync => run_raw(&file, w, cfg)?,
                        Engine::Uring => run_raw_uring(&file, w, cfg)?,
                    });
                } else {
                    let v = LoopVariant::by_name(&d.design).expect("a preset's own name");
                    let (iops, stats) = run_loop(&file, v, w, cfg)?;
                    d.iops.push(iops);
                    d.stats = Some(stats);
                }
            }
        }
        results.push((w, designs));
    }
    Ok(LoopBenchReport {
        config: cfg.clone(),
        results,
        nowait: file.supports_nowait(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_a_permutation_split_between_cpus() {
        let (a, b) = (offsets(0, 128, 256), offsets(1, 128, 256));
        assert!(a.iter().chain(&b).all(|&x| x % 4096 == 0 && x < 256 * 4096));
        let mut all: Vec<u64> = a.iter().chain(&b).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 256, "every block once");
        assert_eq!(a, offsets(0, 128, 256), "reproducible");
    }

    /// The loop bench's kernel boots with the configuration's tracepoint switch (off for
    /// `biosim bench loop` without `RUST_LOG`), as `biosim bench JOBFILE`'s does.
    #[test]
    fn the_loop_bench_kernel_follows_the_tracepoint_switch() {
        let dir = tempfile::tempdir().unwrap();
        let (_tmp, file) =
            crate::dev::space::scratch_file(dir.path(), "biosim-loop-bench", 1 << 20, true)
                .unwrap();
        let file = Arc::new(file);
        for on in [true, false] {
            let cfg = LoopBenchConfig {
                tracepoints: on,
                ..LoopBenchConfig::default()
            };
            let (kernel, _lo, rt) = match boot_loop(&file, LOOP_BENCH_VERSIONS[0], &cfg) {
                Ok(x) => x,
                Err(e) => panic!("{e}"),
            };
            assert_eq!(kernel.tracepoints_enabled(), on);
            assert!(rt.shutdown().is_clean());
        }
    }
}
