//! `biosim bench JOBFILE`: runs each job of an fio job file ([`crate::fio`]) on biosim's
//! simulated devices and, side by side in the same run, on the baselines a storage engineer
//! compares against: the same job directly on the file (`raw`) and through the running kernel's
//! own loop device (`kernel-loop`). Every round runs every design once, in an order rotated
//! from round to round; each figure is reported as median (min–max) over the rounds, and the
//! ratios to raw are taken within a round, pair by pair, so a neighbour's load on the shared
//! disk moves both sides of a ratio together.
//!
//! The file is prepared as fio prepares it: a temporary file in `--dir` (after a free-space
//! check) or the job's `filename`, laid out (every block written) for jobs that read and for
//! `overwrite=1`, its holes punched again before every design's run for a write job with
//! `fallocate=none`, so every design starts from the same sparse file. Both only for a file
//! biosim created: a user's file (written only with `--force`) gets the job's own writes and
//! nothing else.
//!
//! - [`design`]: the designs and the `--variant`/`--compare`/`--device` names.
//! - [`run`]: one design running one job once, and its figures.
//! - [`cpu`]: CPU time per I/O (`getrusage`, `/proc/stat`).
//! - [`pattern`]: offsets and directions per clone (`rw`, `rwmixread`, `randseed`).
//! - [`vstate`]: `verify=crc32c`'s expected generations and `verify_state_save`.
//! - [`report`]: medians, ratios, the table and `--json`.
//! - [`progress`]: the progress bar (a terminal only).

pub mod cpu;
pub mod design;
pub mod pattern;
pub mod progress;
pub mod report;
pub mod run;
pub mod vstate;

use crate::dev::aligned::AlignedBuf;
use crate::dev::backing::{BackingFile, OpenOptions, RwFlags};
use crate::dev::cleanup::TempFile;
use crate::fio::job::{FallocateMode, JobSpec};
use crate::fio::verify;
use crate::perf::bench_common::BenchError;
use design::{BenchKernel, Compare, Design, DeviceKind};
use report::{DesignReport, JobReport, RoundFigures};
use run::{RunCtx, RunStop, SimEngine};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vstate::{VerifyFailure, VerifyState};

/// What `biosim bench JOBFILE` was asked for.
#[derive(Debug, Clone)]
pub struct JobBenchConfig {
    /// The simulated device.
    pub device: DeviceKind,
    /// The loop versions (`--device loop`).
    pub variants: Vec<bio_core::drivers::block::loop_drv::LoopVariant>,
    /// The baselines.
    pub compare: Vec<Compare>,
    /// Overrides the simulated loop's backing engine (default: from `ioengine`).
    pub engine: Option<SimEngine>,
    /// Rounds.
    pub rounds: usize,
    /// Where a temporary file is created (jobs without `filename`).
    pub dir: PathBuf,
    /// Lets a job write into an existing file biosim did not create.
    pub force: bool,
    /// null_blk module parameters (`--nullb KEY=VAL`).
    pub nullb: Vec<(String, String)>,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
    /// The simulated kernel's configuration (`--kernel-config`).
    pub kernel: BenchKernel,
}

impl Default for JobBenchConfig {
    fn default() -> Self {
        JobBenchConfig {
            device: DeviceKind::Loop,
            variants: design::DEFAULT_VARIANTS.to_vec(),
            compare: vec![Compare::Raw],
            engine: None,
            rounds: 5,
            dir: std::env::temp_dir(),
            force: false,
            nullb: Vec::new(),
            progress: true,
            kernel: BenchKernel::default(),
        }
    }
}

/// What stops a job.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The machine, the file or the parameters (exit 2).
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// A block failed verification: the device under test lost or damaged data (exit 1).
    #[error("verify failed: job `{job}`, design {design}: block at offset {} (byte {}): {}", failure.offset, failure.offset, failure.found)]
    Verify {
        /// The job.
        job: String,
        /// The design that read it.
        design: String,
        /// The block and what it held.
        failure: VerifyFailure,
    },
}

impl JobError {
    /// The exit status: 1 when the device failed verification, 2 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            JobError::Verify { .. } => 1,
            JobError::Bench(_) => 2,
        }
    }
}

fn param(msg: String) -> JobError {
    JobError::Bench(BenchError::Param(msg))
}

/// The job's file, ready for the designs.
struct Prepared {
    file: Arc<BackingFile>,
    /// The temporary file's guard (removed when this drops).
    _temp: Option<TempFile>,
    /// Whether biosim created it in this run (its unwritten blocks are zeroes).
    created: bool,
    region: u64,
    blocks: u64,
}

/// The designs a job runs on, in table order, and one-line reasons for those left out.
fn designs(cfg: &JobBenchConfig) -> (Vec<Design>, Vec<String>) {
    let mut out: Vec<Design> = match cfg.device {
        DeviceKind::Loop => cfg.variants.iter().map(|&v| Design::Loop(v)).collect(),
        DeviceKind::NullBlk => vec![Design::NullBlk],
    };
    let mut skipped = Vec::new();
    for c in &cfg.compare {
        match c {
            Compare::Raw if cfg.device == DeviceKind::Loop => out.push(Design::Raw),
            Compare::Raw => {
                skipped.push("raw: null_blk has no backing file to compare with".into())
            }
            Compare::KernelLoop => match kernel_loop_unavailable() {
                None => out.push(Design::KernelLoop),
                Some(why) => skipped.push(format!("kernel-loop: {why}")),
            },
        }
    }
    (out, skipped)
}

/// Why the kernel's loop device cannot be used here, if it cannot.
fn kernel_loop_unavailable() -> Option<String> {
    crate::dev::kernel_loop::why_unavailable()
}

/// The raw job through the running kernel's loop device over the job's file: attached for this
/// run only (outside the timed part), so every run starts with the device's page cache empty
/// and nothing stays attached between runs.
fn run_kernel_loop(
    p: &Prepared,
    job: &JobSpec,
    ctx: &Arc<RunCtx>,
) -> Result<run::RunFigures, BenchError> {
    let lo = crate::dev::kernel_loop::KernelLoop::attach(p.file.path(), job.direct)
        .map_err(BenchError::Machine)?;
    if job.direct && lo.direct_io() == Some(false) {
        return Err(BenchError::Machine(format!(
            "{}: the kernel did not enable direct I/O on it (lo_can_use_dio() refused {})",
            lo.dev_path().display(),
            p.file.path().display()
        )));
    }
    let dev = Arc::new(BackingFile::open(
        lo.dev_path(),
        &OpenOptions {
            direct: job.direct,
            read_only: !(job.rw.writes()),
            create_size: None,
        },
    )?);
    let fig = run_through_device(&dev, ctx);
    drop(dev);
    drop(lo);
    fig
}

/// The raw job through `dev`, a device of the host over the job's file, then (a write job under
/// verify) the verify pass through the same descriptor while the device is still there
/// ([`run::device_verify_pass`]): fio's verify reads what it wrote where it wrote it.
fn run_through_device(
    dev: &Arc<BackingFile>,
    ctx: &Arc<RunCtx>,
) -> Result<run::RunFigures, BenchError> {
    let mut fig = if ctx.job.ioengine.is_sync() {
        run::run_raw_sync(dev, ctx)
    } else {
        run::run_raw_uring(dev, ctx)
    }?;
    fig.device_verified = run::device_verify_pass(dev, ctx);
    Ok(fig)
}

/// The filesystem type of `path`'s filesystem (`statfs(2)`'s `f_type`), by name.
fn fs_name(path: &Path) -> String {
    use crate::dev::space::{fs_magic, fs_name};
    match fs_magic(path) {
        Ok(m) => fs_name(m).map_or_else(|| format!("f_type {m:#x}"), str::to_owned),
        Err(_) => "an unknown filesystem".into(),
    }
}

/// Checks `job` before anything is created: what biosim runs and what it refuses.
fn check_job(job: &JobSpec) -> Result<(), JobError> {
    let name = &job.name;
    if job.bs == 0 || !job.bs.is_multiple_of(512) {
        return Err(param(format!(
            "job `{name}`: bs={} is not a multiple of 512",
            job.bs
        )));
    }
    if job.numjobs == 0 || job.numjobs > 64 {
        return Err(param(format!(
            "job `{name}`: numjobs={} (biosim runs 1..=64)",
            job.numjobs
        )));
    }
    if job.iodepth == 0 || job.iodepth > 4096 {
        return Err(param(format!(
            "job `{name}`: iodepth={} (biosim runs 1..=4096)",
            job.iodepth
        )));
    }
    if job.ioengine.is_sync() && job.iodepth != 1 {
        return Err(param(format!(
            "job `{name}`: iodepth={} with ioengine={}: a synchronous engine has one I/O in flight (use io_uring)",
            job.iodepth,
            job.ioengine.name()
        )));
    }
    if job.time_based && job.runtime.is_none() {
        return Err(param(format!("job `{name}`: time_based needs runtime=")));
    }
    if job.verify.is_some() && job.rw.writes() && job.size != 0 {
        let per_clone = job.size / u64::from(job.bs) / u64::from(job.numjobs);
        if per_clone <= u64::from(job.iodepth) {
            return Err(param(format!(
                "job `{name}`: verify with writes needs more than iodepth={} blocks per clone (size={} gives {per_clone}): a block is written by one clone, one write at a time",
                job.iodepth, job.size
            )));
        }
    }
    if job.size != 0 && !job.size.is_multiple_of(u64::from(job.bs)) {
        return Err(param(format!(
            "job `{name}`: size={} is not a multiple of bs={}",
            job.size, job.bs
        )));
    }
    Ok(())
}

/// Opens or creates the job's file and lays it out.
fn prepare(cfg: &JobBenchConfig, job: &JobSpec, read_only: bool) -> Result<Prepared, JobError> {
    let name = &job.name;
    let bs = u64::from(job.bs);
    let (path, temp, created) = match &job.filename {
        None => {
            // fio gives each clone its own file (`name.N.0`, `size` bytes each); biosim's clones
            // share one file, which would change the footprint and what verify means.
            if job.numjobs > 1 {
                return Err(param(format!(
                    "job `{name}`: numjobs={} without filename=: fio gives each clone its own file ({name}.N.0, size= bytes each) but biosim runs the clones over one file; give filename= (all clones share it, as in fio) or numjobs=1",
                    job.numjobs
                )));
            }
            if job.size == 0 {
                return Err(param(format!(
                    "job `{name}`: no size= and no filename= (biosim needs to know how large a file to create)"
                )));
            }
            if !cfg.dir.is_dir() {
                return Err(param(format!(
                    "--dir {}: not a directory",
                    cfg.dir.display()
                )));
            }
            crate::dev::space::ensure_fits(&cfg.dir, job.size, &format!("job `{name}`"))
                .map_err(param)?;
            let t = TempFile::create_in(&cfg.dir, "biosim-job")
                .map_err(|e| param(format!("job `{name}`: {e}")))?;
            (t.path().to_owned(), Some(t), true)
        }
        Some(p) if p.symlink_metadata().is_ok() => (p.clone(), None, false),
        Some(p) => {
            if read_only {
                return Err(param(format!(
                    "job `{name}`: {}: no such file",
                    p.display()
                )));
            }
            if job.size == 0 {
                return Err(param(format!(
                    "job `{name}`: {} does not exist and the job has no size=",
                    p.display()
                )));
            }
            let dir = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            crate::dev::space::ensure_fits(dir, job.size, &format!("job `{name}`"))
                .map_err(param)?;
            (p.clone(), None, true)
        }
    };
    let writes = job.rw.writes() || job.overwrite;
    if !created && writes && !read_only && !cfg.force {
        return Err(param(format!(
            "job `{name}`: {} exists and the job writes to it; biosim never writes into a file it did not create: pass --force to let it",
            path.display()
        )));
    }
    let file = BackingFile::open(
        &path,
        &OpenOptions {
            direct: job.direct,
            read_only: read_only || (!writes && !created),
            create_size: created.then_some(job.size),
        },
    )
    .map_err(|e| match e {
        crate::dev::backing::BackingError::Open { source, .. }
            if job.direct && source.raw_os_error() == Some(libc::EINVAL) =>
        {
            param(format!(
                "job `{name}`: {}: {} does not support O_DIRECT (direct=1); use --dir or a filename= on a disk filesystem (ext4, xfs, btrfs)",
                path.display(),
                crate::dev::space::describe_fs(path.parent().unwrap_or(Path::new(".")))
            ))
        }
        e => JobError::Bench(e.into()),
    })?;
    let region = if job.size == 0 {
        file.size() / bs * bs
    } else {
        job.size
    };
    if region == 0 {
        return Err(param(format!("job `{name}`: {} is empty", path.display())));
    }
    if file.size() < region {
        return Err(param(format!(
            "job `{name}`: {} has {} bytes, fewer than size={region}",
            path.display(),
            file.size()
        )));
    }
    if created && job.fallocate == FallocateMode::Posix {
        // fallocate=native/posix: the blocks are allocated (unwritten extents) before the job.
        // SAFETY: a valid fd; fallocate writes nothing to memory.
        let r = unsafe { libc::fallocate(file.fd(), 0, 0, region as libc::off_t) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(JobError::Bench(BenchError::Io {
                    what: "fallocate".into(),
                    path: path.clone(),
                    source: e,
                }));
            }
        }
    }
    Ok(Prepared {
        file: Arc::new(file),
        _temp: temp,
        created,
        region,
        blocks: region / bs,
    })
}

/// Writes every block of the region (fio's layout), stamped with one generation under verify.
fn lay_out(p: &Prepared, job: &JobSpec, verify: Option<&VerifyState>) -> Result<(), JobError> {
    let bs = job.bs as usize;
    let chunk_blocks = ((1usize << 20) / bs).max(1);
    let mut buf = AlignedBuf::new(chunk_blocks * bs);
    buf.fill(0x5a);
    let gen = verify.map(VerifyState::take_generation);
    let mut off = 0u64;
    while off < p.region {
        let n = ((p.region - off) as usize).min(buf.len());
        if let Some(g) = gen {
            for (i, b) in buf[..n].chunks_mut(bs).enumerate() {
                verify::stamp(b, off + (i * bs) as u64, g);
            }
        }
        p.file
            .write_all_at(&buf[..n], off, RwFlags::empty())
            .map_err(|e| {
                JobError::Bench(BenchError::Io {
                    what: "laying out".into(),
                    path: p.file.path().to_owned(),
                    source: e,
                })
            })?;
        off += n as u64;
    }
    if let (Some(v), Some(g)) = (verify, gen) {
        v.laid_out(g);
    }
    Ok(())
}

/// Reads every block of the job's file back after a write job's run and checks it against the
/// last acknowledged write (fio's verify pass after the writes), for the designs that wrote the
/// file directly (raw).
fn verify_pass(p: &Prepared, job: &JobSpec, v: &VerifyState) -> Result<u64, VerifyFailure> {
    run::read_back(&p.file, p.blocks, job.bs, v)
}

/// The header printed before a job runs.
fn header(
    cfg: &JobBenchConfig,
    job: &JobSpec,
    p: &Prepared,
    designs: &[Design],
    engine: SimEngine,
) -> String {
    let mut h = String::new();
    let n = if job.time_based {
        format!("time_based runtime={:?}", job.runtime.unwrap_or_default())
    } else {
        format!("{} I/Os per clone", job.ios_per_clone())
    };
    let _ = writeln!(
        h,
        "job `{}`: rw={} bs={} iodepth={} numjobs={} ioengine={} direct={} {n}{}{}{}",
        job.name,
        job.rw.name(),
        job.bs,
        job.iodepth,
        job.numjobs,
        job.ioengine.name(),
        u8::from(job.direct),
        job.fsync.map_or(String::new(), |n| format!(" fsync={n}")),
        job.verify.map_or("", |_| " verify=crc32c"),
        if job.uncached { " uncached=1" } else { "" },
    );
    let _ = writeln!(
        h,
        "file {} ({} MiB of it{}) on {}, FMODE_NOWAIT={}",
        p.file.path().display(),
        p.region >> 20,
        if p.created { ", created by biosim" } else { "" },
        fs_name(p.file.path()),
        p.file.supports_nowait()
    );
    if !p.file.supports_nowait() {
        let _ = writeln!(
            h,
            "warning: the file refuses RWF_NOWAIT, so the NOWAIT-first versions (v5-no-hint, v5) always fall back to the worker here: their comparison with base does not apply"
        );
    }
    let _ = writeln!(
        h,
        "designs: {} (simulated loop backing: {}, kernel config {}); {} rounds, interleaved, order rotated; medians (min–max)",
        designs.iter().map(Design::name).collect::<Vec<_>>().join(", "),
        engine.name(),
        cfg.kernel.name(),
        cfg.rounds
    );
    h
}

/// Runs `job` on every design for `cfg.rounds` rounds; `on_header` gets the header before the
/// first I/O.
pub fn run_job(
    cfg: &JobBenchConfig,
    job: &JobSpec,
    on_header: &mut dyn FnMut(&str),
) -> Result<JobReport, JobError> {
    check_job(job)?;
    if cfg.rounds == 0 {
        return Err(param("--rounds must be at least 1".into()));
    }
    let (designs, skipped) = designs(cfg);
    if cfg.device == DeviceKind::NullBlk {
        return run_null_blk_job(cfg, job, skipped, on_header);
    }
    let p = prepare(cfg, job, false)?;
    let engine = cfg.engine.unwrap_or_else(|| SimEngine::for_job(job));
    let bs = u64::from(job.bs);
    // fio's verify_state_save: only a file that outlives the run needs one.
    let state_path = (job.verify.is_some() && job.rw.writes() && job.filename.is_some())
        .then(|| vstate::state_path_for(p.file.path()));
    let vst = job
        .verify
        .map(|_| Arc::new(VerifyState::new(bs, p.blocks, p.created, state_path)));
    let sparse_writes = job.rw.writes() && !job.overwrite && job.fallocate == FallocateMode::None;
    // fio lays out only a file it creates (missing or short: a short existing file is refused
    // above); with overwrite=1 on an existing, large enough file it writes nothing, so biosim
    // never writes a user's blocks outside the job's own I/O.
    if (job.rw.reads() || job.overwrite) && p.created {
        lay_out(&p, job, vst.as_deref())?;
    }
    on_header(&header(cfg, job, &p, &designs, engine));
    let progress = progress::Progress::new((designs.len() * cfg.rounds) as u64, cfg.progress);
    let mut reports: Vec<DesignReport> = designs
        .iter()
        .map(|d| DesignReport {
            design: d.name().to_owned(),
            rounds: Vec::new(),
        })
        .collect();
    let mut verified = None;
    for round in 0..cfg.rounds {
        for k in 0..designs.len() {
            let i = (k + round) % designs.len();
            let d = designs[i];
            progress.start(&format!("round {}/{}: {d}", round + 1, cfg.rounds));
            // Only a file biosim created: punching a user's file (--force) would drop its
            // blocks that this job's writes do not reach.
            if sparse_writes && p.created {
                p.file.punch_hole(0, p.region).map_err(|e| {
                    JobError::Bench(BenchError::Io {
                        what: "punching holes".into(),
                        path: p.file.path().to_owned(),
                        source: e,
                    })
                })?;
                if let Some(v) = &vst {
                    v.reset_to_holes();
                }
            }
            let mut ctx = RunCtx::new(job, p.blocks, vst.clone(), progress.io_counter());
            ctx.kernel_config = cfg.kernel.config();
            ctx.tracepoints = run::bench_tracepoints();
            let ctx = Arc::new(ctx);
            let fig = match d {
                Design::Loop(v) => run::run_sim_loop(&p.file, v, engine, &ctx),
                Design::Raw if job.ioengine.is_sync() => run::run_raw_sync(&p.file, &ctx),
                Design::Raw => run::run_raw_uring(&p.file, &ctx),
                Design::KernelLoop => run_kernel_loop(&p, job, &ctx),
                Design::NullBlk => Err(BenchError::Param(format!(
                    "design {d} is not available in this build"
                ))),
            };
            let stop = ctx.stop_reason();
            match stop {
                Some(RunStop::Verify(failure)) => {
                    progress.finish();
                    return Err(JobError::Verify {
                        job: job.name.clone(),
                        design: d.name().to_owned(),
                        failure,
                    });
                }
                Some(RunStop::Failed(why)) => {
                    progress.finish();
                    return Err(JobError::Bench(BenchError::Machine(format!(
                        "job `{}` on {d}: {why}",
                        job.name
                    ))));
                }
                None => {}
            }
            let fig = fig.inspect_err(|_| progress.finish())?;
            if let (Some(v), true) = (&vst, job.rw.writes()) {
                // The simulated designs and kernel-loop were read back through their device
                // (run.rs); raw through the file.
                let n = match fig.device_verified {
                    Some(n) => n,
                    None => verify_pass(&p, job, v).map_err(|failure| {
                        progress.finish();
                        JobError::Verify {
                            job: job.name.clone(),
                            design: d.name().to_owned(),
                            failure,
                        }
                    })?,
                };
                verified = Some(format!(
                    "every read checked; after each design's writes all {n} blocks read back with the generation last acknowledged"
                ));
            } else if vst.is_some() {
                verified = Some("every read checked (crc32c, offset, generation)".into());
            }
            reports[i].rounds.push(RoundFigures::from_run(&fig));
            progress.step();
        }
    }
    progress.finish();
    if let Some(v) = &vst {
        v.remove_state();
    }
    Ok(JobReport {
        job: job.name.clone(),
        header: header(cfg, job, &p, &designs, engine),
        designs: reports,
        skipped,
        verified,
    })
}

/// `--device null_blk`: the job on the null_blk model alone (no file, so no raw or kernel-loop
/// to compare with).
fn run_null_blk_job(
    cfg: &JobBenchConfig,
    job: &JobSpec,
    skipped: Vec<String>,
    on_header: &mut dyn FnMut(&str),
) -> Result<JobReport, JobError> {
    if job.size == 0 || job.filename.is_some() {
        return Err(param(format!(
            "job `{}`: --device null_blk needs size= and no filename= (null_blk has no file)",
            job.name
        )));
    }
    let bs = u64::from(job.bs);
    let blocks = job.size / bs;
    let vst = job
        .verify
        .map(|_| Arc::new(VerifyState::new(bs, blocks, true, None)));
    let mut header = format!(
        "job `{}`: rw={} bs={} iodepth={} numjobs={} on null_blk ({} MiB{}); kernel config {}; {} rounds\n",
        job.name,
        job.rw.name(),
        job.bs,
        job.iodepth,
        job.numjobs,
        job.size >> 20,
        cfg.nullb
            .iter()
            .map(|(k, v)| format!(" {k}={v}"))
            .collect::<String>(),
        cfg.kernel.name(),
        cfg.rounds
    );
    if job.verify.is_some() {
        header.push_str("verify=crc32c on a memory-backed null_blk\n");
    }
    on_header(&header);
    let progress = progress::Progress::new(cfg.rounds as u64, cfg.progress);
    let mut rep = DesignReport {
        design: Design::NullBlk.name().to_owned(),
        rounds: Vec::new(),
    };
    let mut device_verified = None;
    for round in 0..cfg.rounds {
        progress.start(&format!("round {}/{}: null_blk", round + 1, cfg.rounds));
        let mut ctx = RunCtx::new(job, blocks, vst.clone(), progress.io_counter());
        ctx.kernel_config = cfg.kernel.config();
        ctx.tracepoints = run::bench_tracepoints();
        let ctx = Arc::new(ctx);
        let fig = run::run_sim_null_blk(&cfg.nullb, job.size, &ctx);
        match ctx.stop_reason() {
            Some(RunStop::Verify(failure)) => {
                progress.finish();
                return Err(JobError::Verify {
                    job: job.name.clone(),
                    design: "null_blk".into(),
                    failure,
                });
            }
            Some(RunStop::Failed(why)) => {
                progress.finish();
                return Err(JobError::Bench(BenchError::Machine(format!(
                    "job `{}` on null_blk: {why}",
                    job.name
                ))));
            }
            None => {}
        }
        let fig = fig.inspect_err(|_| progress.finish())?;
        device_verified = fig.device_verified.or(device_verified);
        rep.rounds.push(RoundFigures::from_run(&fig));
        progress.step();
    }
    progress.finish();
    Ok(JobReport {
        job: job.name.clone(),
        header,
        designs: vec![rep],
        skipped,
        verified: vst.map(|_| match device_verified {
            Some(n) => format!(
                "every read checked; after each round's writes all {n} blocks read back through the device with the generation last acknowledged"
            ),
            None => "every read checked (crc32c, offset, generation)".into(),
        }),
    })
}

/// `--verify-only`: reads every block of the job's existing file and checks it, against the
/// state file a killed run left (every block flushed before the crash holds at least the
/// generation recorded) if there is one; blocks never flushed may hold any sound block of
/// their own offset, or zeroes. The state file is removed when the file passes.
pub fn verify_only(job: &JobSpec) -> Result<String, JobError> {
    check_job(job)?;
    let Some(path) = &job.filename else {
        return Err(param(format!(
            "job `{}`: --verify-only needs filename= (the file a previous run wrote)",
            job.name
        )));
    };
    let cfg = JobBenchConfig::default();
    let p = prepare(&cfg, job, true)?;
    let state_path = vstate::state_path_for(path);
    let state = vstate::load_state(&state_path).map_err(param)?;
    let bs = job.bs as usize;
    if let Some(s) = &state {
        if s.bs != bs as u64 {
            return Err(param(format!(
                "{}: saved for bs={}, the job has bs={bs}",
                state_path.display(),
                s.bs
            )));
        }
    }
    let fail = |failure: VerifyFailure| JobError::Verify {
        job: job.name.clone(),
        design: "verify-only".into(),
        failure,
    };
    let mut buf = AlignedBuf::new(bs);
    let (mut sound, mut zero, mut held) = (0u64, 0u64, 0u64);
    for b in 0..p.blocks {
        let off = b * bs as u64;
        p.file
            .read_exact_at(&mut buf, off, RwFlags::empty())
            .map_err(|e| {
                fail(VerifyFailure {
                    offset: off,
                    found: format!("the read failed: {e}"),
                })
            })?;
        let want = state
            .as_ref()
            .and_then(|s| s.gens.get(b as usize).copied())
            .unwrap_or(0);
        match verify::check(&buf, off) {
            Ok(g) if want > 0 && vstate::run_of(g) != vstate::run_of(want) => {
                return Err(fail(VerifyFailure {
                    offset: off,
                    found: format!(
                        "generation {:#x}:{} was written by another run (run {:#010x}) than the one whose flush was saved (run {:#010x})",
                        vstate::run_of(g),
                        g as u32,
                        vstate::run_of(g),
                        vstate::run_of(want)
                    ),
                }))
            }
            Ok(g) if g >= want => {
                sound += 1;
                if want > 0 {
                    held += 1;
                }
            }
            Ok(g) => {
                return Err(fail(VerifyFailure {
                    offset: off,
                    found: format!(
                        "generation {g}, older than {want}, which was acknowledged before the last completed flush"
                    ),
                }))
            }
            Err(verify::VerifyError::NeverWritten) if want == 0 => zero += 1,
            Err(e) => {
                let found = if want > 0 {
                    format!("{e} (generation {want} was flushed)")
                } else {
                    e.to_string()
                };
                return Err(fail(VerifyFailure { offset: off, found }));
            }
        }
    }
    let mut out = format!(
        "verify-only {}: {} blocks of {bs} bytes: {sound} sound, {zero} never written",
        path.display(),
        p.blocks
    );
    match state {
        Some(_) => {
            let _ = write!(
                out,
                "; {held} blocks flushed before the last completed flush hold at least that generation (state {} removed)",
                state_path.display()
            );
            let _ = std::fs::remove_file(&state_path);
        }
        None => out.push_str("; no verify state file (the writing run ended normally)"),
    }
    out.push('\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fio::job::{IoEngine, RwPattern, VerifyKind};

    fn small_job(rw: RwPattern) -> JobSpec {
        let mut j = JobSpec::with_defaults("t", 1);
        j.rw = rw;
        j.size = 256 << 10;
        j.number_ios = Some(64);
        j.direct = true;
        j
    }

    fn cfg(dir: &Path) -> JobBenchConfig {
        JobBenchConfig {
            rounds: 1,
            dir: dir.to_owned(),
            progress: false,
            variants: vec![bio_core::drivers::block::loop_drv::LoopVariant::V5],
            ..JobBenchConfig::default()
        }
    }

    fn scratch() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    /// A random-write verify job (`small_job`, `verify=crc32c`) with `ioengine` and `direct`,
    /// its file prepared in `dir`, its verify state and run context; `None` (the reason printed)
    /// where the scratch directory cannot hold it.
    fn verify_job(
        dir: &Path,
        ioengine: IoEngine,
        direct: bool,
    ) -> Option<(JobSpec, Prepared, Arc<VerifyState>, Arc<RunCtx>)> {
        let mut job = small_job(RwPattern::RandWrite);
        job.verify = Some(VerifyKind::Crc32c);
        job.ioengine = ioengine;
        job.direct = direct;
        let p = prepare(&cfg(dir), &job, false)
            .inspect_err(|e| eprintln!("skipped: {e}"))
            .ok()?;
        let v = Arc::new(VerifyState::new(4096, p.blocks, true, None));
        let ctx = Arc::new(RunCtx::new(
            &job,
            p.blocks,
            Some(Arc::clone(&v)),
            Arc::default(),
        ));
        Some((job, p, v, ctx))
    }

    #[test]
    fn the_verify_pass_catches_a_block_corrupted_after_the_writes() {
        let dir = scratch();
        let Some((job, p, v, ctx)) = verify_job(dir.path(), IoEngine::Pvsync2, true) else {
            return;
        };
        run::run_raw_sync(&p.file, &ctx).unwrap();
        assert_eq!(ctx.stop_reason(), None);
        assert_eq!(verify_pass(&p, &job, &v), Ok(64), "sound before the damage");
        // Flip one byte of a block the job wrote.
        let mut b = AlignedBuf::new(4096);
        let written = (0..p.blocks)
            .map(|i| i * 4096)
            .find(|&off| {
                p.file.read_exact_at(&mut b, off, RwFlags::empty()).unwrap();
                verify::check(&b, off).is_ok()
            })
            .expect("a written block");
        b[100] ^= 0x40;
        p.file.write_all_at(&b, written, RwFlags::empty()).unwrap();
        let f = verify_pass(&p, &job, &v).unwrap_err();
        assert_eq!(f.offset, written);
        assert!(f.found.contains("crc32c"), "{f:?}");
    }

    /// A device of the host standing in for the kernel's `/dev/loopN` (which needs root): a copy
    /// of the job's file, opened as `run_kernel_loop()` opens the device. What the job writes
    /// through it never reaches the job's own file, as with a device whose writes the file does
    /// not see yet.
    fn stand_in_device(p: &Prepared, job: &JobSpec, dir: &Path) -> Arc<BackingFile> {
        let path = dir.join("loop-stand-in.img");
        std::fs::copy(p.file.path(), &path).unwrap();
        let opts = OpenOptions {
            direct: job.direct,
            read_only: false,
            create_size: None,
        };
        Arc::new(BackingFile::open(&path, &opts).unwrap())
    }

    /// kernel-loop's verify pass reads through the device the job wrote through, not the file:
    /// on a device whose writes the file has not seen, the pass through the device finds every
    /// block sound and reading the file would not. The twin `bug-verify-reads-file` runs no pass
    /// through the device.
    #[test]
    #[cfg_attr(
        feature = "bug-verify-reads-file",
        should_panic(expected = "no verify pass through the device")
    )]
    fn kernel_loops_verify_pass_reads_back_through_the_device_the_job_wrote() {
        let dir = scratch();
        for engine in [IoEngine::Pvsync2, IoEngine::IoUring] {
            let Some((job, p, v, ctx)) = verify_job(dir.path(), engine, true) else {
                return;
            };
            let dev = stand_in_device(&p, &job, dir.path());
            let fig = match run_through_device(&dev, &ctx) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("skipped {}: {e}", engine.name());
                    continue;
                }
            };
            assert_eq!(ctx.stop_reason(), None);
            assert_eq!(fig.ios, 64);
            assert_eq!(
                fig.device_verified,
                Some(p.blocks),
                "no verify pass through the device ({})",
                engine.name()
            );
            verify_pass(&p, &job, &v).expect_err("the file never saw the writes");
            std::fs::remove_file(dev.path()).unwrap();
        }
    }

    /// The same through the running kernel's `/dev/loopN` (opt-in: `BIOSIM_LIVE_KERNEL=1`, as
    /// root): direct and buffered, the verify pass reads every block back through the device,
    /// and after the detach the file holds the same.
    #[test]
    fn live_kernel_loops_verify_pass_reads_back_through_dev_loop() {
        if let Some(why) = crate::calibrate::tracefs::live_test_skip_reason() {
            eprintln!("{why}");
            return;
        }
        let _lock = crate::calibrate::tracefs::lock_live().unwrap();
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        for direct in [true, false] {
            let (job, p, v, ctx) = verify_job(dir.path(), IoEngine::Pvsync2, direct).unwrap();
            let fig = run_kernel_loop(&p, &job, &ctx).unwrap();
            assert_eq!(ctx.stop_reason(), None, "direct={direct}");
            assert_eq!(fig.device_verified, Some(p.blocks), "direct={direct}");
            assert_eq!(verify_pass(&p, &job, &v), Ok(p.blocks), "direct={direct}");
        }
    }

    /// A block that reads back wrong through the device stops the run with its offset (exit 1
    /// as `JobError::Verify`), and no count is reported. The twin `bug-verify-reads-file` runs
    /// no pass through the device.
    #[test]
    #[cfg_attr(
        feature = "bug-verify-reads-file",
        should_panic(expected = "a bad block on the device went unseen")
    )]
    fn a_block_read_back_wrong_through_the_device_stops_the_run_at_its_offset() {
        let dir = scratch();
        let Some((job, p, _, ctx)) = verify_job(dir.path(), IoEngine::Pvsync2, true) else {
            return;
        };
        let dev = stand_in_device(&p, &job, dir.path());
        run::run_raw_sync(&dev, &ctx).unwrap();
        let mut b = AlignedBuf::new(4096);
        let written = (0..p.blocks)
            .map(|i| i * 4096)
            .find(|&off| {
                dev.read_exact_at(&mut b, off, RwFlags::empty()).unwrap();
                verify::check(&b, off).is_ok()
            })
            .expect("a written block");
        b[100] ^= 0x40;
        dev.write_all_at(&b, written, RwFlags::empty()).unwrap();
        assert_eq!(run::device_verify_pass(&dev, &ctx), None);
        match ctx.stop_reason() {
            Some(RunStop::Verify(f)) => {
                assert_eq!(f.offset, written);
                assert!(f.found.contains("crc32c"), "{f:?}");
            }
            other => panic!("a bad block on the device went unseen: {other:?}"),
        }
        // A run that stopped runs no second pass.
        assert_eq!(run::device_verify_pass(&dev, &ctx), None);
    }

    /// `nowait=1` on the loop model (base: every command goes to the worker, so tags stay held
    /// until it runs): every read and write bio carries `REQ_NOWAIT`; with more in flight than
    /// the loop device's 128 tags blk-mq ends some `BLK_STS_AGAIN`, each counted
    /// and resubmitted blocking, so every I/O still completes; at a depth the tags cover none
    /// does.
    #[test]
    fn nowait_on_the_loop_model_sends_req_nowait_and_retries_blk_sts_again() {
        let dir = scratch();
        let mut job = small_job(RwPattern::RandRead);
        job.size = 1 << 20;
        job.number_ios = Some(256);
        job.ioengine = IoEngine::IoUring;
        job.nowait = true;
        let p = match prepare(&cfg(dir.path()), &job, false) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        let mut seen = Vec::new();
        for depth in [256, 4] {
            job.iodepth = depth;
            let ctx = Arc::new(RunCtx::new(&job, p.blocks, None, Arc::default()));
            let fig = run::run_sim_loop(
                &p.file,
                bio_core::drivers::block::loop_drv::LoopVariant::BASE,
                SimEngine::Sync,
                &ctx,
            )
            .unwrap();
            assert_eq!(ctx.stop_reason(), None);
            assert_eq!(fig.ios, 256, "iodepth={depth}: every I/O completed");
            let (tried, done, again) = fig.bio_nowait.expect("nowait=1 counts");
            assert_eq!(tried, 256, "iodepth={depth}: each I/O tried NOWAIT once");
            assert_eq!(done + again, tried);
            eprintln!("iodepth={depth}: req_nowait_tried={tried} req_nowait_done={done} req_nowait_again={again}");
            seen.push(again);
        }
        assert!(seen[0] > 0, "256 in flight on 128 tags: {seen:?}");
        assert_eq!(seen[1], 0, "4 in flight never run out of tags");
    }

    /// A loop backing whose writes are right but whose reads return the next block's bytes: a
    /// design with a wrong read path that leaves the file sound.
    #[derive(Debug)]
    struct NextBlockReads(crate::dev::loop_file::FileBacking);

    impl bio_core::drivers::block::loop_drv::LoopBacking for NextBlockReads {
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn is_block_device(&self) -> bool {
            false
        }
        fn fmode_nowait(&self) -> bool {
            self.0.fmode_nowait()
        }
        fn rw(
            &self,
            write: bool,
            pos: u64,
            buf: &mut [u8],
            nowait: bool,
        ) -> Result<usize, bio_core::errno::Errno> {
            let pos = if write {
                pos
            } else {
                (pos + buf.len() as u64) % self.size()
            };
            self.0.rw(write, pos, buf, nowait)
        }
        fn fsync(&self) -> Result<(), bio_core::errno::Errno> {
            self.0.fsync()
        }
        fn fallocate(
            &self,
            mode: bio_core::drivers::block::loop_drv::Fallocate,
            pos: u64,
            len: u64,
        ) -> Result<(), bio_core::errno::Errno> {
            self.0.fallocate(mode, pos, len)
        }
    }

    /// A write job on a loop design whose reads return the wrong block: the file is sound (a
    /// verify pass reading it passes), and the verify pass through the simulated loop device
    /// stops the run at a bad block. The twin `bug-verify-reads-file` reads the file instead.
    #[test]
    #[cfg_attr(
        feature = "bug-verify-reads-file",
        should_panic(expected = "the verify pass through the device missed")
    )]
    fn a_design_reading_the_wrong_block_is_caught_by_the_verify_pass_through_the_device() {
        let dir = scratch();
        let Some((job, p, v, ctx)) = verify_job(dir.path(), IoEngine::Pvsync2, true) else {
            return;
        };
        let kernel = bio_core::Kernel::boot(bio_core::KernelConfig::default(), 1, 1).unwrap();
        let backing = Arc::new(NextBlockReads(crate::dev::loop_file::FileBacking::new(
            Arc::clone(&p.file),
        )));
        let fig = run::run_sim_loop_on(
            kernel,
            backing,
            None,
            bio_core::drivers::block::loop_drv::LoopVariant::V5,
            &ctx,
        )
        .unwrap();
        assert_eq!(
            verify_pass(&p, &job, &v),
            Ok(64),
            "the writes reached the file right"
        );
        let f = match ctx.stop_reason() {
            Some(RunStop::Verify(f)) => f,
            other => panic!(
                "the verify pass through the device missed the wrong read path: {other:?}, {:?} blocks",
                fig.device_verified
            ),
        };
        eprintln!(
            "{}",
            JobError::Verify {
                job: job.name.clone(),
                design: "v5".into(),
                failure: f.clone()
            }
        );
        assert!(f.offset < p.region, "{f:?}");
        assert_eq!(fig.device_verified, None, "a failed pass counts nothing");
    }
}

#[cfg(test)]
mod run_tests {
    use super::*;
    use crate::fio::job::{IoEngine, RwPattern, VerifyKind};
    use bio_core::drivers::block::loop_drv::LoopVariant;

    #[test]
    fn every_design_runs_every_engine_with_verify_and_reports_its_figures() {
        let dir = tempfile::tempdir().unwrap();
        // The jobs' own files (filename=), apart from --dir, which must end empty.
        let files = tempfile::tempdir().unwrap();
        let cfg = JobBenchConfig {
            rounds: 2,
            dir: dir.path().to_owned(),
            progress: false,
            variants: vec![LoopVariant::BASE, LoopVariant::V5],
            ..JobBenchConfig::default()
        };
        for engine in [IoEngine::Psync, IoEngine::IoUring] {
            for rw in [RwPattern::RandRead, RwPattern::RandWrite, RwPattern::RandRw] {
                let mut job = JobSpec::with_defaults("t", 1);
                job.rw = rw;
                job.size = 256 << 10;
                job.number_ios = Some(48);
                job.numjobs = 2;
                // numjobs > 1 needs filename= (one file for every clone).
                job.filename = Some(files.path().join(format!("{rw:?}-{engine:?}.img")));
                job.direct = true;
                job.ioengine = engine;
                job.iodepth = if engine == IoEngine::IoUring { 4 } else { 1 };
                job.verify = Some(VerifyKind::Crc32c);
                job.fsync = Some(8);
                let mut header = String::new();
                let r = match run_job(&cfg, &job, &mut |h| header.push_str(h)) {
                    Ok(r) => r,
                    Err(JobError::Bench(BenchError::Backing(e))) => {
                        eprintln!("skipped: {e}");
                        return;
                    }
                    Err(e) => panic!("{engine:?} {rw:?}: {e}"),
                };
                assert!(header.contains("FMODE_NOWAIT="), "{header}");
                let names: Vec<_> = r.designs.iter().map(|d| d.design.as_str()).collect();
                assert_eq!(names, ["base", "v5", "raw"]);
                for d in &r.designs {
                    assert_eq!(d.rounds.len(), 2);
                    for round in &d.rounds {
                        assert_eq!(round.ios, 96, "{engine:?} {rw:?} {}", d.design);
                        assert!(round.iops > 0.0 && round.lat_us[0] > 0.0);
                    }
                }
                let text = r.to_string();
                assert!(text.contains("CPU µs/IO (proc)"), "{text}");
                assert!(r.verified.is_some());
                let j = r.to_json();
                assert!(
                    j["designs"][0]["vs_raw"]["iops"]["median"]
                        .as_f64()
                        .unwrap()
                        > 0.0
                );
                assert!(j["designs"][0]["counters"]["irqs"].as_f64().is_some());
            }
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "temp file removed"
        );
    }
}
