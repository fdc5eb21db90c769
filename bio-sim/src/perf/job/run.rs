//! One design running one job once (one round): the clones (fio's `numjobs`), each issuing its
//! I/Os as the job says, and the figures of that run. Three executors:
//!
//! - [`run_sim_loop`]: biosim's loop model on the threaded runtime, one simulated CPU per clone,
//!   bios submitted from task context with at most `iodepth` in flight per clone (as
//!   `submit_bio()` from a process doing `io_submit`), completed by `bi_end_io`;
//! - [`run_raw_sync`]: `psync`/`pvsync2` on the file itself, one thread per clone;
//! - [`run_raw_uring`]: `io_uring` on the file itself, one ring of `iodepth` per clone.
//!
//! The per-I/O path takes no lock shared between clones and allocates nothing the I/O does not
//! need (a bio owns its data buffer, so the simulated path allocates one per bio; the raw paths
//! reuse one buffer per slot). Latencies go into a histogram per clone, merged at the end.

use super::cpu::{CpuSnapshot, CpuUsed};
use super::pattern::Pattern;
use super::vstate::{FlushSnapshot, VerifyFailure, VerifyState};
use crate::dev::aligned::AlignedBuf;
use crate::dev::backing::{BackingFile, RwFlags};
use crate::dev::loop_file::{FileBacking, UringBacking};
use crate::dev::uring::{UringEngine, UringOp};
use crate::fio::job::{IoEngine, JobSpec};
use crate::fio::verify;
use crate::perf::bench_common::BenchError;
use crate::perf::sim_submit::{first_splat, loop_device, never, start_runtime, Window};
use crate::runtime::threaded::ThreadedRuntime;
use bio_core::block::{
    bio_put, submit_bio_noacct, BioEndIo, BlockDriver, ReqFlags, ReqOp, BLK_STS_AGAIN, BLK_STS_OK,
};
use bio_core::drivers::block::loop_drv::{LoopBacking, LoopStats, LoopVariant, LO_FLAGS_DIRECT_IO};
use bio_core::kernel::CpuId;
use bio_core::{Cpu, Kernel, KernelConfig};
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The figures of one design's run.
#[derive(Debug, Clone)]
pub struct RunFigures {
    /// Reads and writes completed (flushes not counted).
    pub ios: u64,
    /// Bytes read and written.
    pub bytes: u64,
    /// Wall time from the first submission to the last completion.
    pub elapsed: Duration,
    /// Submit-to-completion latency of every read and write, ns.
    pub latency: Histogram<u64>,
    /// CPU time used meanwhile.
    pub cpu: CpuUsed,
    /// The loop model's counters (simulated loop only).
    pub loop_stats: Option<LoopStats>,
    /// Hard interrupts the simulated machine delivered (simulated designs only).
    pub irqs: Option<u64>,
    /// `RWF_NOWAIT` attempts on the raw path: tried, done, `EAGAIN` (retried blocking).
    pub raw_nowait: Option<(u64, u64, u64)>,
    /// `REQ_NOWAIT` bios of a `nowait=1` job on a simulated device: tried, done, and
    /// `BLK_STS_AGAIN` (no tag free; resubmitted without the flag, as the raw path retries).
    pub bio_nowait: Option<(u64, u64, u64)>,
    /// Flushes completed.
    pub flushes: u64,
    /// io_uring CQEs reaped and the batches they came in (io_uring designs).
    pub cqe_batches: Option<(u64, u64)>,
    /// The simulated loop's backing engine as it actually ran ([`SimEngine::SYNC_NAME`],
    /// [`SimEngine::PER_CPU_NAME`] or, where the per-CPU rings could not start,
    /// [`SimEngine::REAPER_NAME`]); `None` for the other designs.
    pub sim_engine: Option<&'static str>,
    /// Other counters of the device (null_blk's).
    pub extra: Vec<(&'static str, u64)>,
    /// Blocks the verify pass after a write job read back through the device the job wrote
    /// through and found sound (the simulated one: [`sim_verify_pass`]; the kernel's loop
    /// device: [`device_verify_pass`]); `None` where no such pass ran (the caller then reads
    /// the file).
    pub device_verified: Option<u64>,
}

impl RunFigures {
    /// I/Os per second.
    pub fn iops(&self) -> f64 {
        self.ios as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// MB/s (10^6 bytes, as fio's `MB/s`).
    pub fn mbps(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Process CPU µs per I/O.
    pub fn cpu_us_per_io(&self) -> f64 {
        self.cpu.process.as_secs_f64() * 1e6 / self.ios.max(1) as f64
    }

    /// The kernel's share of [`RunFigures::cpu_us_per_io`] (`ru_stime`), µs per I/O.
    pub fn sys_us_per_io(&self) -> f64 {
        self.cpu.system.as_secs_f64() * 1e6 / self.ios.max(1) as f64
    }

    /// Machine CPU µs per I/O.
    pub fn machine_us_per_io(&self) -> Option<f64> {
        self.cpu
            .machine
            .map(|m| m.as_secs_f64() * 1e6 / self.ios.max(1) as f64)
    }
}

/// What stops a run early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStop {
    /// A block failed its verify check (the device failed: exit 1).
    Verify(VerifyFailure),
    /// An I/O failed or the machine misbehaved.
    Failed(String),
}

/// Whether `biosim bench` runs its simulated kernel with tracepoints on: only when `RUST_LOG` is
/// set (someone may be reading events). Otherwise they are off, as on the real kernel the raw and
/// kernel-loop columns run on (tracing off: every `trace_<event>()` a patched-out jump), so the
/// model's CPU per I/O does not pay for events nobody reads.
pub fn bench_tracepoints() -> bool {
    std::env::var_os("RUST_LOG").is_some()
}

/// Boots the kernel of one simulated run: `ctx`'s configuration and tracepoints, `cpus` CPUs.
fn boot_run_kernel(ctx: &RunCtx, cpus: u32) -> Result<Arc<Kernel>, BenchError> {
    let kernel = Kernel::boot(ctx.kernel_config, cpus, cpus)
        .map_err(|e| BenchError::Machine(e.to_string()))?;
    kernel.set_tracepoints_enabled(ctx.tracepoints);
    // init_bio()'s fs_bio_set is BIOSET_PERCPU_CACHE: io_uring's bios (REQ_ALLOC_CACHE, see
    // submit_io()) are recycled per CPU, as on the machine the raw column runs on.
    kernel.bioset_percpu_cache_init();
    Ok(kernel)
}

/// What every clone of one run shares.
#[derive(Debug)]
pub struct RunCtx {
    /// The job.
    pub job: JobSpec,
    /// Blocks of `job.bs` in the region.
    pub blocks: u64,
    /// `verify=`'s state.
    pub verify: Option<Arc<VerifyState>>,
    /// I/Os completed by all clones (the progress bar reads it).
    pub completed: Arc<AtomicU64>,
    /// The configuration the simulated designs' kernel boots (`--kernel-config`; [`RunCtx::new`]
    /// gives biosim's default, the debug kernel).
    pub kernel_config: KernelConfig,
    /// Whether the simulated kernel's tracepoints are on (`Kernel::set_tracepoints_enabled`):
    /// [`RunCtx::new`] leaves them on; `biosim bench` turns them off ([`bench_tracepoints`]).
    pub tracepoints: bool,
    stop: AtomicBool,
    first_stop: Mutex<Option<RunStop>>,
}

impl RunCtx {
    /// A context for one run.
    pub fn new(
        job: &JobSpec,
        blocks: u64,
        verify: Option<Arc<VerifyState>>,
        completed: Arc<AtomicU64>,
    ) -> RunCtx {
        RunCtx {
            job: job.clone(),
            blocks,
            verify,
            completed,
            kernel_config: KernelConfig::default(),
            tracepoints: true,
            stop: AtomicBool::new(false),
            first_stop: Mutex::new(None),
        }
    }

    fn halt(&self, why: RunStop) {
        let mut g = self.first_stop.lock();
        if g.is_none() {
            *g = Some(why);
        }
        self.stop.store(true, Ordering::Release);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Why the run stopped early, if it did.
    pub fn stop_reason(&self) -> Option<RunStop> {
        self.first_stop.lock().clone()
    }
}

/// One step of a clone.
enum Step {
    Io {
        write: bool,
        off: u64,
        /// A write's generation, or the generation a read must reach (verify only).
        gen: u64,
    },
    Flush(Option<FlushSnapshot>),
}

/// One clone's issuing side: what comes next and when it may be issued.
struct Issuer {
    pattern: Pattern,
    issued: u64,
    limit: Option<u64>,
    deadline: Option<Instant>,
    fsync_every: Option<u64>,
    writes: u64,
    flush_due: bool,
    start: Instant,
    rate_interval: Option<Duration>,
    thinktime: Option<Duration>,
    next_at: Option<Instant>,
}

impl Issuer {
    fn new(ctx: &RunCtx, clone: u32, start: Instant) -> Issuer {
        let job = &ctx.job;
        // A verify job's clones write disjoint blocks (fio's serialize_overlap for clones).
        let pattern = if ctx.verify.is_some() && job.rw.writes() {
            Pattern::strided(
                job,
                clone,
                ctx.blocks,
                u64::from(clone),
                u64::from(job.numjobs),
            )
        } else {
            Pattern::new(job, clone, ctx.blocks)
        };
        Issuer {
            pattern,
            issued: 0,
            limit: (!job.time_based).then(|| job.ios_per_clone()),
            deadline: job.runtime.map(|r| start + r),
            fsync_every: job.fsync.filter(|&n| n > 0),
            writes: 0,
            flush_due: false,
            start,
            rate_interval: job
                .rate_iops
                .filter(|&r| r > 0)
                .map(|r| Duration::from_secs_f64(1.0 / r as f64)),
            thinktime: job.thinktime.filter(|t| !t.is_zero()),
            next_at: None,
        }
    }

    /// When the next I/O may be issued (`rate_iops`, `thinktime`), if later than now.
    fn not_before(&self) -> Option<Instant> {
        let rate = self
            .rate_interval
            .map(|iv| self.start + iv.mul_f64(self.issued as f64));
        match (rate, self.next_at) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next step, or `None` when the clone is done.
    fn next(&mut self, ctx: &RunCtx) -> Option<Step> {
        if self.flush_due {
            self.flush_due = false;
            return Some(Step::Flush(
                ctx.verify.as_ref().and_then(|v| v.begin_flush()),
            ));
        }
        if ctx.stopped()
            || self.limit.is_some_and(|l| self.issued >= l)
            || self.deadline.is_some_and(|d| Instant::now() >= d)
        {
            return None;
        }
        let (mut write, mut off) = self.pattern.next_io();
        if let Some(v) = &ctx.verify {
            // Never two writes in flight to one block: skip to one without (the caller has a
            // free slot, so fewer than iodepth of this clone's blocks are busy; check_job makes
            // every clone own more blocks than that).
            let mut tries = self.pattern.blocks();
            while write && v.write_in_flight(off) && tries > 0 {
                (write, off) = self.pattern.next_io();
                tries -= 1;
            }
        }
        self.issued += 1;
        if let Some(t) = self.thinktime {
            self.next_at = Some(Instant::now() + t);
        }
        let gen = match &ctx.verify {
            Some(v) if write => v.begin_write(off),
            Some(v) => v.begin_read(off),
            None => 0,
        };
        if write {
            self.writes += 1;
            if self
                .fsync_every
                .is_some_and(|n| self.writes.is_multiple_of(n))
            {
                self.flush_due = true;
            }
        }
        Some(Step::Io { write, off, gen })
    }
}

/// One clone's completion side.
struct CloneSink {
    hist: Mutex<Histogram<u64>>,
    done: AtomicU64,
    bytes: AtomicU64,
    flushes: AtomicU64,
    /// `REQ_NOWAIT` bios: tried, done, `BLK_STS_AGAIN`.
    nowait: [AtomicU64; 3],
    /// I/Os whose `REQ_NOWAIT` bio met `BLK_STS_AGAIN`, for the clone to resubmit blocking:
    /// (write, offset, generation, submit time).
    again: Mutex<Vec<(bool, u64, u64, Instant)>>,
    /// Data buffers of completed bios, for the clone's next I/Os: fio allocates its `io_u`
    /// buffers once per job (and raw reuses its slots), so the simulated submitter does too
    /// instead of allocating and filling a block per I/O. At most `iodepth` of them are out.
    bufs: Mutex<Vec<Vec<u8>>>,
}

impl CloneSink {
    /// A data buffer of `bs` bytes for the next I/O: a completed one if there is one (its bytes
    /// are the last I/O's, as fio's reused `io_u` buffers are), else a new one.
    fn take_buf(&self, bs: usize) -> Vec<u8> {
        let mut free = self.bufs.lock();
        loop {
            match free.pop() {
                Some(b) if b.len() == bs => return b,
                Some(_) => continue,
                None => return vec![0xa5; bs],
            }
        }
    }

    /// Takes a completed bio's one segment back for [`CloneSink::take_buf`]. A bio with any other
    /// shape (a driver that split or kept its segment) gives nothing back.
    fn give_back_buf(&self, bio: &mut bio_core::block::Bio) {
        if bio.bi_io_vec.len() == 1 {
            if let Some(v) = bio.bi_io_vec.pop() {
                self.bufs.lock().push(v.data);
            }
        }
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

impl CloneSink {
    fn new() -> CloneSink {
        CloneSink {
            hist: Mutex::new(new_histogram()),
            done: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            nowait: Default::default(),
            again: Mutex::new(Vec::new()),
            bufs: Mutex::new(Vec::new()),
        }
    }

    /// A read or write completed `t0` ago; `data` is a read's buffer (checked under verify).
    fn io_done(
        &self,
        ctx: &RunCtx,
        t0: Instant,
        write: bool,
        off: u64,
        gen: u64,
        data: Option<&[u8]>,
    ) {
        let ns = t0.elapsed().as_nanos() as u64;
        let _ = self.hist.lock().record(ns.max(1));
        self.done.fetch_add(1, Ordering::Release);
        self.bytes
            .fetch_add(u64::from(ctx.job.bs), Ordering::Relaxed);
        ctx.completed.fetch_add(1, Ordering::Relaxed);
        if let Some(v) = &ctx.verify {
            if write {
                v.write_done(off, gen);
            } else if let Some(buf) = data {
                if let Err(f) = v.check_read(buf, off, gen) {
                    ctx.halt(RunStop::Verify(f));
                }
            }
        }
    }

    fn flush_done(&self, ctx: &RunCtx, snap: Option<FlushSnapshot>) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.done.fetch_add(1, Ordering::Release);
        if let (Some(v), Some(s)) = (&ctx.verify, snap) {
            if let Err(e) = v.flush_done(s) {
                ctx.halt(RunStop::Failed(format!(
                    "cannot save the verify state {}: {e}",
                    v.state_path()
                        .map_or(String::new(), |p| p.display().to_string())
                )));
            }
        }
    }
}

/// Sums the clones' sinks into figures.
fn collect(sinks: &[Arc<CloneSink>], elapsed: Duration, cpu: CpuUsed) -> RunFigures {
    let mut latency = new_histogram();
    let (mut ios, mut bytes, mut flushes) = (0, 0, 0);
    for s in sinks {
        let h = s.hist.lock();
        ios += h.len();
        let _ = latency.add(&*h);
        bytes += s.bytes.load(Ordering::Relaxed);
        flushes += s.flushes.load(Ordering::Relaxed);
    }
    RunFigures {
        ios,
        bytes,
        elapsed,
        latency,
        cpu,
        loop_stats: None,
        irqs: None,
        raw_nowait: None,
        bio_nowait: None,
        flushes,
        cqe_batches: None,
        sim_engine: None,
        extra: Vec::new(),
        device_verified: None,
    }
}

/// The `RWF_*` flags the job puts on every raw read and write (`pvsync2`, `io_uring`).
pub fn raw_flags(job: &JobSpec) -> RwFlags {
    let mut f = RwFlags::empty();
    if job.ioengine != IoEngine::Psync {
        if job.nowait {
            f |= RwFlags::NOWAIT;
        }
        if job.uncached {
            f |= RwFlags::DONTCACHE;
        }
    }
    f
}

fn stamp_or_fill(buf: &mut [u8], write: bool, off: u64, gen: u64, verify: bool) {
    if write && verify {
        verify::stamp(buf, off, gen);
    }
}

/// `psync`/`pvsync2` directly on `file`: one thread per clone, one I/O at a time.
pub fn run_raw_sync(file: &Arc<BackingFile>, ctx: &Arc<RunCtx>) -> Result<RunFigures, BenchError> {
    let job = &ctx.job;
    let flags = raw_flags(job);
    let tried = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let sinks: Vec<Arc<CloneSink>> = (0..job.numjobs)
        .map(|_| Arc::new(CloneSink::new()))
        .collect();
    let cpu0 = CpuSnapshot::now();
    let start = Instant::now();
    let handles: Vec<_> = (0..job.numjobs)
        .map(|c| {
            let (file, ctx, sink, tried) = (
                Arc::clone(file),
                Arc::clone(ctx),
                Arc::clone(&sinks[c as usize]),
                Arc::clone(&tried),
            );
            std::thread::Builder::new()
                .name(format!("biosim-raw{c}"))
                .spawn(move || raw_sync_clone(&file, &ctx, c, start, flags, &sink, &tried))
        })
        .collect::<Result<_, _>>()
        .map_err(|e| BenchError::Machine(format!("cannot start a raw I/O thread: {e}")))?;
    for h in handles {
        h.join()
            .map_err(|_| BenchError::Machine("a raw I/O thread panicked".into()))?;
    }
    let elapsed = start.elapsed();
    let cpu = cpu0.until(&CpuSnapshot::now());
    let mut fig = collect(&sinks, elapsed, cpu);
    if flags.contains(RwFlags::NOWAIT) {
        fig.raw_nowait = Some((
            tried[0].load(Ordering::Relaxed),
            tried[1].load(Ordering::Relaxed),
            tried[2].load(Ordering::Relaxed),
        ));
    }
    Ok(fig)
}

fn raw_sync_clone(
    file: &BackingFile,
    ctx: &RunCtx,
    clone: u32,
    start: Instant,
    flags: RwFlags,
    sink: &CloneSink,
    tried: &[AtomicU64; 3],
) {
    let mut iss = Issuer::new(ctx, clone, start);
    let mut buf = AlignedBuf::new(ctx.job.bs as usize);
    buf.fill(0xa5);
    let verify = ctx.verify.is_some();
    loop {
        if let Some(t) = iss.not_before() {
            let now = Instant::now();
            if t > now {
                std::thread::sleep(t - now);
            }
        }
        let Some(step) = iss.next(ctx) else { break };
        match step {
            Step::Flush(snap) => {
                if let Err(e) = file.sync_data() {
                    ctx.halt(RunStop::Failed(format!(
                        "fsync {}: {e}",
                        file.path().display()
                    )));
                    break;
                }
                sink.flush_done(ctx, snap);
            }
            Step::Io { write, off, gen } => {
                stamp_or_fill(&mut buf, write, off, gen, verify);
                let t0 = Instant::now();
                let mut r = raw_io(file, &mut buf, write, off, flags);
                if flags.contains(RwFlags::NOWAIT) {
                    tried[0].fetch_add(1, Ordering::Relaxed);
                    if matches!(&r, Err(e) if e.raw_os_error() == Some(libc::EAGAIN)) {
                        tried[2].fetch_add(1, Ordering::Relaxed);
                        r = raw_io(
                            file,
                            &mut buf,
                            write,
                            off,
                            flags.difference(RwFlags::NOWAIT),
                        );
                    } else {
                        tried[1].fetch_add(1, Ordering::Relaxed);
                    }
                }
                if let Err(e) = r {
                    ctx.halt(RunStop::Failed(format!(
                        "{} of {} at offset {off} on {}: {e}",
                        if write { "write" } else { "read" },
                        ctx.job.bs,
                        file.path().display()
                    )));
                    break;
                }
                sink.io_done(ctx, t0, write, off, gen, (!write).then_some(&buf[..]));
            }
        }
    }
}

fn raw_io(
    file: &BackingFile,
    buf: &mut [u8],
    write: bool,
    off: u64,
    flags: RwFlags,
) -> std::io::Result<()> {
    if write {
        file.write_all_at(buf, off, flags)
    } else {
        file.read_exact_at(buf, off, flags)
    }
}

/// What a raw io_uring slot holds while its op is in the ring.
#[derive(Default)]
struct Slot {
    t0: Option<Instant>,
    write: bool,
    off: u64,
    gen: u64,
    flush: Option<Option<FlushSnapshot>>,
    /// A flush's slot keeps its buffer here (the op has none).
    parked: Option<AlignedBuf>,
}

/// A slot coming back to its clone's submitter.
enum Back {
    Free(usize, AlignedBuf),
    /// A `RWF_NOWAIT` op that returned `EAGAIN`: submit it again without the flag.
    Retry(usize, AlignedBuf),
    Failed(String),
}

/// `io_uring` directly on `file`: one ring of `iodepth` per clone; the clone's thread submits,
/// the ring's reaper completes.
pub fn run_raw_uring(file: &Arc<BackingFile>, ctx: &Arc<RunCtx>) -> Result<RunFigures, BenchError> {
    let job = &ctx.job;
    let flags = raw_flags(job);
    let depth = job.iodepth.max(1) as usize;
    let tried = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let sinks: Vec<Arc<CloneSink>> = (0..job.numjobs)
        .map(|_| Arc::new(CloneSink::new()))
        .collect();
    let mut engines = Vec::new();
    let mut backs = Vec::new();
    let mut slot_sets = Vec::new();
    for sink in &sinks {
        let slots: Arc<Vec<Mutex<Slot>>> =
            Arc::new((0..depth).map(|_| Mutex::new(Slot::default())).collect());
        let (tx, rx) = crossbeam_channel::bounded::<Back>(2 * depth);
        for i in 0..depth {
            let mut b = AlignedBuf::new(job.bs as usize);
            b.fill(0xa5);
            let _ = tx.send(Back::Free(i, b));
        }
        let (sink, ctx2, slots2, tried2) = (
            Arc::clone(sink),
            Arc::clone(ctx),
            Arc::clone(&slots),
            Arc::clone(&tried),
        );
        let nowait = flags.contains(RwFlags::NOWAIT);
        let engine = UringEngine::new(Arc::clone(file), depth as u32, flags, move |done| {
            let i = done.token as usize;
            let mut s = slots2[i].lock();
            if let Some(snap) = s.flush.take() {
                let buf = s.parked.take().expect("a flush slot parks its buffer");
                drop(s);
                if let Err(e) = done.result {
                    let _ = tx.send(Back::Failed(format!("fsync: {e}")));
                } else {
                    sink.flush_done(&ctx2, snap);
                }
                let _ = tx.send(Back::Free(i, buf));
                return;
            }
            let (t0, write, off, gen) = (s.t0, s.write, s.off, s.gen);
            drop(s);
            let buf = done.op.into_buf().expect("a read or write has its buffer");
            match done.result {
                Err(e) if nowait && e.raw_os_error() == Some(libc::EAGAIN) => {
                    tried2[2].fetch_add(1, Ordering::Relaxed);
                    let _ = tx.send(Back::Retry(i, buf));
                }
                Err(e) => {
                    let _ = tx.send(Back::Failed(format!(
                        "{} at offset {off}: {e}",
                        if write { "write" } else { "read" }
                    )));
                    let _ = tx.send(Back::Free(i, buf));
                }
                Ok(_) => {
                    if nowait {
                        tried2[1].fetch_add(1, Ordering::Relaxed);
                    }
                    if let Some(t0) = t0 {
                        sink.io_done(&ctx2, t0, write, off, gen, (!write).then_some(&buf[..]));
                    }
                    let _ = tx.send(Back::Free(i, buf));
                }
            }
        })
        .map_err(|e| {
            BenchError::Machine(format!(
                "starting io_uring on {}: {e}",
                file.path().display()
            ))
        })?;
        engines.push(Arc::new(engine));
        backs.push(rx);
        slot_sets.push(slots);
    }
    let cpu0 = CpuSnapshot::now();
    let start = Instant::now();
    let mut handles = Vec::new();
    for (c, ((engine, rx), slots)) in engines.iter().zip(backs).zip(slot_sets).enumerate() {
        let (engine, ctx, tried) = (Arc::clone(engine), Arc::clone(ctx), Arc::clone(&tried));
        handles.push(
            std::thread::Builder::new()
                .name(format!("biosim-rawq{c}"))
                .spawn(move || {
                    raw_uring_clone(&engine, &ctx, c as u32, start, depth, &rx, &slots, &tried)
                })
                .map_err(|e| BenchError::Machine(format!("cannot start a raw I/O thread: {e}")))?,
        );
    }
    for h in handles {
        h.join()
            .map_err(|_| BenchError::Machine("a raw io_uring thread panicked".into()))?;
    }
    let elapsed = start.elapsed();
    let cpu = cpu0.until(&CpuSnapshot::now());
    let (mut cqes, mut batches) = (0, 0);
    for e in engines {
        if let Ok(e) = Arc::try_unwrap(e) {
            let st = e.shutdown();
            cqes += st.cqes;
            batches += st.batches;
        }
    }
    let mut fig = collect(&sinks, elapsed, cpu);
    fig.cqe_batches = Some((cqes, batches));
    if flags.contains(RwFlags::NOWAIT) {
        fig.raw_nowait = Some((
            tried[0].load(Ordering::Relaxed),
            tried[1].load(Ordering::Relaxed),
            tried[2].load(Ordering::Relaxed),
        ));
    }
    Ok(fig)
}

#[allow(clippy::too_many_arguments)]
fn raw_uring_clone(
    engine: &UringEngine,
    ctx: &RunCtx,
    clone: u32,
    start: Instant,
    depth: usize,
    rx: &crossbeam_channel::Receiver<Back>,
    slots: &[Mutex<Slot>],
    tried: &[AtomicU64; 3],
) {
    let mut iss = Issuer::new(ctx, clone, start);
    let verify = ctx.verify.is_some();
    let nowait = engine.rw_flags().contains(RwFlags::NOWAIT);
    let mut free_slots = 0usize;
    let mut finished = false;
    // Every slot comes back exactly once per op; the clone ends when all `depth` are free and
    // nothing is left to issue.
    while !(finished && free_slots == depth) {
        let back = match rx.recv() {
            Ok(b) => b,
            Err(_) => break,
        };
        let (i, mut buf) = match back {
            Back::Failed(why) => {
                ctx.halt(RunStop::Failed(format!(
                    "raw io_uring on {}: {why}",
                    engine.file().path().display()
                )));
                continue;
            }
            Back::Retry(i, buf) => {
                let s = slots[i].lock();
                let (write, off) = (s.write, s.off);
                drop(s);
                let op = if write {
                    UringOp::Write { buf, off }
                } else {
                    UringOp::Read { buf, off }
                };
                let flags = engine.rw_flags().difference(RwFlags::NOWAIT);
                if let Err(e) = engine.submit_with_flags(i as u64, op, flags) {
                    ctx.halt(RunStop::Failed(e.to_string()));
                    free_slots += 1;
                    finished = true;
                }
                continue;
            }
            Back::Free(i, buf) => (i, buf),
        };
        if finished {
            free_slots += 1;
            continue;
        }
        if let Some(t) = iss.not_before() {
            let now = Instant::now();
            if t > now {
                std::thread::sleep(t - now);
            }
        }
        let Some(step) = iss.next(ctx) else {
            finished = true;
            free_slots += 1;
            continue;
        };
        let op = match step {
            Step::Flush(snap) => {
                let mut s = slots[i].lock();
                s.flush = Some(snap);
                s.parked = Some(buf);
                UringOp::Fsync
            }
            Step::Io { write, off, gen } => {
                stamp_or_fill(&mut buf, write, off, gen, verify);
                let mut s = slots[i].lock();
                *s = Slot {
                    t0: Some(Instant::now()),
                    write,
                    off,
                    gen,
                    flush: None,
                    parked: None,
                };
                drop(s);
                if nowait {
                    tried[0].fetch_add(1, Ordering::Relaxed);
                }
                if write {
                    UringOp::Write { buf, off }
                } else {
                    UringOp::Read { buf, off }
                }
            }
        };
        if let Err(e) = engine.submit(i as u64, op) {
            ctx.halt(RunStop::Failed(e.to_string()));
            finished = true;
            free_slots += 1;
        }
    }
}

/// How the simulated loop device's backing does its I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimEngine {
    /// [`FileBacking`]: `preadv2`/`pwritev2` where the model issues the I/O.
    Sync,
    /// [`UringBacking`]: asynchronous io_uring, completions as interrupts.
    Uring,
}

impl SimEngine {
    /// The engine a job's `ioengine` maps to.
    pub fn for_job(job: &JobSpec) -> SimEngine {
        if job.ioengine.is_sync() {
            SimEngine::Sync
        } else {
            SimEngine::Uring
        }
    }

    /// The name in the header.
    pub fn name(self) -> &'static str {
        match self {
            SimEngine::Sync => "sync",
            SimEngine::Uring => "uring",
        }
    }

    /// [`RunFigures::sim_engine`] of the synchronous backing.
    pub const SYNC_NAME: &'static str = "sync (preadv2/pwritev2 on the loop's threads)";
    /// [`RunFigures::sim_engine`] of the io_uring backing with one ring per simulated CPU.
    pub const PER_CPU_NAME: &'static str = "io_uring, one ring per simulated CPU";
    /// [`RunFigures::sim_engine`] of the io_uring backing's fallback (no `IORING_FEAT_EXT_ARG`).
    pub const REAPER_NAME: &'static str =
        "io_uring, one ring and a reaper thread (per-CPU rings unavailable)";

    /// The name [`RunFigures::sim_engine`] records for a backing that ran as `uring` (an io_uring
    /// backing, per-CPU or not) or synchronously (`None`).
    pub fn ran_as(uring: Option<&UringBacking>) -> &'static str {
        match uring {
            None => SimEngine::SYNC_NAME,
            Some(u) if u.cpu_rings().is_some() => SimEngine::PER_CPU_NAME,
            Some(_) => SimEngine::REAPER_NAME,
        }
    }
}

/// The queue depth of each per-CPU ring of a job: what one simulated CPU may carry at once (also
/// the depth of the one ring of the fallback, which carries every CPU's).
/// Every clone keeps at most `iodepth` bios in flight, but the loop's workqueue is `WQ_UNBOUND`,
/// so its worker may issue any clone's command on any CPU: one CPU can carry every clone's
/// `iodepth`, and no more than the loop's tags (`hw_queue_depth`, 128) allow in all. A 4 KiB
/// bio is one command (no split below `max_sectors`), and a command whose NOWAIT attempt ends
/// `-EAGAIN` is resubmitted only after its CQE is reaped.
pub fn ring_depth(job: &JobSpec) -> u32 {
    let want = u64::from(job.iodepth.max(1)) * u64::from(job.numjobs.max(1));
    want.min(bio_core::drivers::block::loop_drv::LOOP_HW_QUEUE_DEPTH as u64)
        .min(u64::from(crate::dev::uring::MAX_ENTRIES)) as u32
}

/// With per-CPU rings, a CPU hands its queued I/Os to the kernel once this many are queued,
/// without waiting to park: the device starts on the first I/Os of a burst while the CPU
/// produces the rest. Measured on qd32 randread (docs/performance.md): 4 beat 8, 16 and
/// submit-only-at-park (0) in IOPS and in CPU per I/O.
pub const RING_SUBMIT_BATCH: usize = 4;

/// biosim's loop model of `variant` over `file` on the threaded runtime, one simulated CPU per
/// clone.
pub fn run_sim_loop(
    file: &Arc<BackingFile>,
    variant: LoopVariant,
    engine: SimEngine,
    ctx: &Arc<RunCtx>,
) -> Result<RunFigures, BenchError> {
    let job = &ctx.job;
    let cpus = job.numjobs;
    let kernel = boot_run_kernel(ctx, cpus)?;
    // fio's uncached=1: RWF_DONTCACHE on buffered I/O (either engine).
    let extra = if job.uncached && !job.direct {
        RwFlags::DONTCACHE
    } else {
        RwFlags::empty()
    };
    let uring = match engine {
        SimEngine::Sync => None,
        SimEngine::Uring => {
            let depth = ring_depth(job);
            // One ring per simulated CPU, reaped by its own thread; the reaper engine where the
            // kernel cannot (no EXT_ARG timed wait): the figures name the engine that ran
            // (RunFigures::sim_engine).
            let b = UringBacking::per_cpu_rings(Arc::clone(file), cpus as usize, depth, extra)
                .or_else(|e| {
                    tracing::warn!("per-CPU io_uring rings unavailable ({e}); using one ring and a reaper thread");
                    UringBacking::with_flags(Arc::clone(file), depth, extra)
                })
                .map_err(|e| BenchError::Machine(format!("starting io_uring: {e}")))?;
            Some(Arc::new(b))
        }
    };
    let backing: Arc<dyn LoopBacking> = match &uring {
        Some(u) => Arc::clone(u) as Arc<dyn LoopBacking>,
        None => Arc::new(FileBacking::with_flags(Arc::clone(file), extra)),
    };
    run_sim_loop_on(kernel, backing, uring, variant, ctx)
}

/// [`run_sim_loop`] over a given `backing` (`uring` when it is that io_uring backing), on
/// `kernel`: the loop device, the clones, then the verify pass through the device.
pub fn run_sim_loop_on(
    kernel: Arc<Kernel>,
    backing: Arc<dyn LoopBacking>,
    uring: Option<Arc<UringBacking>>,
    variant: LoopVariant,
    ctx: &Arc<RunCtx>,
) -> Result<RunFigures, BenchError> {
    let job = &ctx.job;
    let lo_flags = if job.direct { LO_FLAGS_DIRECT_IO } else { 0 };
    let lo = loop_device(&kernel, backing, uring.as_ref(), lo_flags, variant)?;
    let rt = start_runtime(&kernel)?;
    match &uring {
        // Each CPU submits and reaps its own ring when it parks.
        Some(u) if u.cpu_rings().is_some() => {
            if let Some(r) = u.cpu_rings() {
                r.set_submit_batch(RING_SUBMIT_BATCH);
            }
            u.install_cpu_rings(&rt).map_err(BenchError::Machine)?;
        }
        Some(u) => {
            // One reaper wake-up per burst of submissions: the doorbell rings when a CPU sleeps.
            let u = Arc::clone(u);
            u.defer_doorbell();
            rt.on_park(move || {
                u.ring_doorbell();
            });
        }
        None => {}
    }
    let dev: Arc<dyn BlockDriver> = lo.clone();
    let fig = run_sim_clones(&rt, &dev, ctx).map(|mut f| {
        f.device_verified = sim_verify_pass(&rt, &dev, ctx);
        f
    });
    let stats = lo.stats();
    let irqs = rt.stats().total().irqs;
    let report = rt.shutdown();
    // A ring that stopped (io_uring_enter kept failing) is why the run went wrong: say so.
    if let Some(e) = uring.as_ref().and_then(|u| u.cpu_rings()?.error()) {
        return Err(BenchError::Machine(e));
    }
    let mut fig = fig?;
    if !report.is_clean() && ctx.stop_reason().is_none() {
        return Err(BenchError::Machine(format!("unclean shutdown: {report:?}")));
    }
    if let Some(r) = first_splat(&kernel) {
        return Err(BenchError::Machine(format!(
            "kernel splat during the run of {}: {r}",
            variant.name
        )));
    }
    fig.loop_stats = Some(stats);
    fig.irqs = Some(irqs);
    fig.sim_engine = Some(SimEngine::ran_as(uring.as_deref()));
    fig.cqe_batches = uring.as_ref().map(|u| {
        let st = u.uring_stats();
        (st.cqes, st.batches)
    });
    Ok(fig)
}

/// biosim's null_blk model (`drivers/block/null_blk/main.c`) of `region` bytes on the threaded
/// runtime, one simulated CPU per clone, with the module parameters `params` (by the kernel's
/// names). `verify=` needs `memory_backed=1` (set by default then), as null_blk without it does
/// not touch the pages and reads return zeroes.
pub fn run_sim_null_blk(
    params: &[(String, String)],
    region: u64,
    ctx: &Arc<RunCtx>,
) -> Result<RunFigures, BenchError> {
    use bio_core::drivers::block::null_blk::{NullBlk, NullBlkConfig};
    let job = &ctx.job;
    let cpus = job.numjobs;
    let kernel = boot_run_kernel(ctx, cpus)?;
    let mut nc = NullBlkConfig {
        size_bytes: region,
        memory_backed: ctx.verify.is_some(),
        ..NullBlkConfig::default()
    };
    for (k, v) in params {
        nc.parse_param(k, v)
            .map_err(|e| BenchError::Param(format!("--nullb {k}={v}: {e}")))?;
    }
    if ctx.verify.is_some() && !nc.memory_backed {
        return Err(BenchError::Param(
            "verify= on null_blk needs memory_backed=1 (without it reads return zeroes)".into(),
        ));
    }
    let nb = NullBlk::new(&kernel, 0, nc).map_err(BenchError::Param)?;
    let rt = start_runtime(&kernel)?;
    let dev: Arc<dyn BlockDriver> = nb.clone();
    let fig = run_sim_clones(&rt, &dev, ctx).map(|mut f| {
        f.device_verified = sim_verify_pass(&rt, &dev, ctx);
        f
    });
    let irqs = rt.stats().total().irqs;
    let st = nb.stats();
    let report = rt.shutdown();
    let mut fig = fig?;
    if !report.is_clean() && ctx.stop_reason().is_none() {
        return Err(BenchError::Machine(format!("unclean shutdown: {report:?}")));
    }
    fig.irqs = Some(irqs);
    fig.extra = vec![
        ("softirqs", st.softirqs),
        ("timer_fires", st.timer_fires),
        ("tag_waits", st.tag_waits),
    ];
    Ok(fig)
}

/// Runs the clones on the simulated CPUs of `rt` against `dev` (any simulated block device).
pub fn run_sim_clones(
    rt: &ThreadedRuntime,
    dev: &Arc<dyn BlockDriver>,
    ctx: &Arc<RunCtx>,
) -> Result<RunFigures, BenchError> {
    let job = &ctx.job;
    let sinks: Vec<Arc<CloneSink>> = (0..job.numjobs)
        .map(|_| Arc::new(CloneSink::new()))
        .collect();
    let cpu0 = CpuSnapshot::now();
    let start = Instant::now();
    let mut handles = Vec::new();
    for c in 0..job.numjobs {
        let (dev, ctx, sink) = (
            Arc::clone(dev),
            Arc::clone(ctx),
            Arc::clone(&sinks[c as usize]),
        );
        handles.push(rt.post_on(CpuId(c), move |cx| {
            sim_clone(cx, &dev, &ctx, c, start, &sink)
        })?);
    }
    let mut timed_out = false;
    for h in handles {
        if !h.wait()? {
            timed_out = true;
        }
    }
    let elapsed = start.elapsed();
    let cpu = cpu0.until(&CpuSnapshot::now());
    if timed_out && ctx.stop_reason().is_none() {
        return Err(BenchError::Machine(
            "I/Os did not complete within 120 s".into(),
        ));
    }
    let mut fig = collect(&sinks, elapsed, cpu);
    if raw_flags(job).contains(RwFlags::NOWAIT) {
        let sum = |i: usize| {
            sinks
                .iter()
                .map(|s| s.nowait[i].load(Ordering::Relaxed))
                .sum::<u64>()
        };
        fig.bio_nowait = Some((sum(0), sum(1), sum(2)));
    }
    Ok(fig)
}

/// Blocks the device-side verify pass keeps in flight.
const VERIFY_DEPTH: u64 = 32;

/// fio's verify pass after a write job, through the device the job ran on (`dev`: the loop
/// model, null_blk), not its backing file: every block of the region is read with a bio from
/// task context on CPU 0 and must hold the generation last acknowledged. A design whose reads
/// return the wrong data is caught even when its writes reached the file right. The first bad
/// block stops the run ([`RunStop::Verify`]); returns the blocks checked, or `None` when no pass
/// is due (no verify, a read-only job, a run already stopped).
///
/// Under the twin `bug-verify-reads-file` no device pass runs, so the caller falls back to
/// reading the file and the wrong read path goes unseen.
pub fn sim_verify_pass(
    rt: &ThreadedRuntime,
    dev: &Arc<dyn BlockDriver>,
    ctx: &Arc<RunCtx>,
) -> Option<u64> {
    let v = ctx.verify.clone()?;
    if cfg!(feature = "bug-verify-reads-file") || !ctx.job.rw.writes() || ctx.stopped() {
        return None;
    }
    let bs = u64::from(ctx.job.bs);
    let blocks = ctx.blocks;
    let done = Arc::new(AtomicU64::new(0));
    let checked = Arc::new(AtomicU64::new(0));
    let (dev2, ctx2, done2, checked2) = (
        Arc::clone(dev),
        Arc::clone(ctx),
        Arc::clone(&done),
        Arc::clone(&checked),
    );
    let posted = rt.post_on(CpuId(0), move |cx| {
        let mut win = Window::new(&done2, VERIFY_DEPTH);
        for b in 0..blocks {
            if !win.wait_slot(cx, "bench: verify pass, a free slot", &never) || ctx2.stopped() {
                break;
            }
            let off = b * bs;
            let (c, v, d, k) = (
                Arc::clone(&ctx2),
                Arc::clone(&v),
                Arc::clone(&done2),
                Arc::clone(&checked2),
            );
            let bio = cx
                .kernel()
                .bio_alloc(ReqOp::Read, off >> 9)
                .with_data(vec![0; bs as usize])
                .with_end_io(BioEndIo::new("verify_end_io", move |bio, _| {
                    let r = if bio.status() != BLK_STS_OK {
                        Err(VerifyFailure {
                            offset: off,
                            found: format!("the read failed: {:?}", bio.status()),
                        })
                    } else {
                        v.check_settled(&bio.data(), off)
                    };
                    match r {
                        Ok(()) => {
                            k.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(f) => c.halt(RunStop::Verify(f)),
                    }
                    d.fetch_add(1, Ordering::Release);
                }));
            win.submitted();
            submit_bio_noacct(bio, &*dev2, cx);
        }
        win.wait_all(cx, "bench: verify pass, all reads completed", &never)
    });
    let finished = match posted {
        Ok(h) => h.wait().unwrap_or(false),
        Err(_) => false,
    };
    if !finished && ctx.stop_reason().is_none() {
        ctx.halt(RunStop::Failed(
            "the verify pass through the device did not complete within 120 s".into(),
        ));
    }
    (ctx.stop_reason().is_none()).then(|| checked.load(Ordering::Relaxed))
}

/// Reads the `blocks` blocks of `bs` bytes of `file` back in 1 MiB chunks and checks each
/// against the generation last acknowledged (fio's verify pass after the writes); the blocks
/// checked, or the first bad one.
pub fn read_back(
    file: &BackingFile,
    blocks: u64,
    bs: u32,
    v: &VerifyState,
) -> Result<u64, VerifyFailure> {
    let bs = bs as usize;
    let region = blocks * bs as u64;
    let mut buf = AlignedBuf::new(((1usize << 20) / bs).max(1) * bs);
    let (mut off, mut checked) = (0u64, 0);
    while off < region {
        let n = ((region - off) as usize).min(buf.len());
        if let Err(e) = file.read_exact_at(&mut buf[..n], off, RwFlags::empty()) {
            return Err(VerifyFailure {
                offset: off,
                found: format!("the read failed: {e}"),
            });
        }
        for (i, b) in buf[..n].chunks(bs).enumerate() {
            v.check_settled(b, off + (i * bs) as u64)?;
            checked += 1;
        }
        off += n as u64;
    }
    Ok(checked)
}

/// The verify pass of a write job run through a device of the host, e.g. the kernel's
/// `/dev/loopN` ([`super::Design::KernelLoop`]): every block read back through `dev`, the
/// descriptor the job wrote through (same `O_DIRECT` or buffered mode), while the device is
/// still attached, so what is checked is what the device returns, not what reached its backing
/// file. The first bad block stops the run ([`RunStop::Verify`]); returns the blocks checked, or
/// `None` when no pass is due (no verify, a read-only job, a run already stopped) or it failed.
///
/// Under the twin `bug-verify-reads-file` no pass runs here, so the caller falls back to reading
/// the job's file and a device returning other data than its file holds goes unseen.
pub fn device_verify_pass(dev: &BackingFile, ctx: &RunCtx) -> Option<u64> {
    let v = ctx.verify.as_deref()?;
    if cfg!(feature = "bug-verify-reads-file") || !ctx.job.rw.writes() || ctx.stopped() {
        return None;
    }
    match read_back(dev, ctx.blocks, ctx.job.bs, v) {
        Ok(n) => Some(n),
        Err(f) => {
            ctx.halt(RunStop::Verify(f));
            None
        }
    }
}

/// One clone in task context on its simulated CPU: submits bios with at most `iodepth` in
/// flight, then waits for all of them; `false` if a wait gave up.
fn sim_clone(
    cx: &Cpu,
    dev: &Arc<dyn BlockDriver>,
    ctx: &Arc<RunCtx>,
    clone: u32,
    start: Instant,
    sink: &Arc<CloneSink>,
) -> bool {
    let job = &ctx.job;
    // nowait=1: REQ_NOWAIT on every read and write (blk-mq ends it BLK_STS_AGAIN when no tag
    // is free), as the kernel's block device direct I/O does for RWF_NOWAIT.
    let nowait = raw_flags(job).contains(RwFlags::NOWAIT);
    let mut iss = Issuer::new(ctx, clone, start);
    let mut win = Window::new(&sink.done, u64::from(job.iodepth));
    // A wait also ends when a NOWAIT attempt came back for its blocking retry.
    let retry_due = || !sink.again.lock().is_empty();
    loop {
        // The NOWAIT attempts that met BLK_STS_AGAIN, again without the flag (blocking).
        let again = std::mem::take(&mut *sink.again.lock());
        for (write, off, gen, t0) in again {
            submit_io(cx, dev, ctx, sink, (write, off, gen), t0, false);
        }
        if let Some(t) = iss.not_before() {
            if !cx.wait_until_at("bench: rate_iops/thinktime", t, &|| Instant::now() >= t) {
                return false;
            }
        }
        if !win.wait_slot(cx, "bench: a free slot of iodepth", &retry_due) {
            return false;
        }
        if retry_due() {
            continue;
        }
        let Some(step) = iss.next(ctx) else { break };
        win.submitted();
        match step {
            Step::Flush(snap) => {
                let (s, c) = (Arc::clone(sink), Arc::clone(ctx));
                let snap = Mutex::new(snap);
                // blkdev_issue_flush(): an empty REQ_OP_WRITE | REQ_PREFLUSH bio (REQ_OP_FLUSH
                // cannot be submitted as a bio; the flush state machine makes it a request).
                let bio = cx
                    .kernel()
                    .bio_alloc(ReqOp::Write, 0)
                    .with_flags(ReqFlags::REQ_PREFLUSH)
                    .with_end_io(BioEndIo::new("submit_bio_wait_endio", move |bio, _| {
                        if bio.status() != BLK_STS_OK {
                            c.halt(RunStop::Failed(format!(
                                "a REQ_PREFLUSH bio (fsync) failed: {:?}",
                                bio.status()
                            )));
                        }
                        s.flush_done(&c, snap.lock().take());
                    }));
                submit_bio_noacct(bio, &**dev, cx);
            }
            Step::Io { write, off, gen } => {
                submit_io(
                    cx,
                    dev,
                    ctx,
                    sink,
                    (write, off, gen),
                    Instant::now(),
                    nowait,
                );
            }
        }
    }
    loop {
        if !win.wait_all(cx, "bench: all I/Os completed", &retry_due) {
            return false;
        }
        let again = std::mem::take(&mut *sink.again.lock());
        if again.is_empty() {
            return true;
        }
        for (write, off, gen, t0) in again {
            submit_io(cx, dev, ctx, sink, (write, off, gen), t0, false);
        }
    }
}

/// Submits one read or write bio of a clone (`io`: write, offset, generation), `REQ_NOWAIT`
/// when `nowait`; its latency counts from `t0` (the first attempt's submission).
fn submit_io(
    cx: &Cpu,
    dev: &Arc<dyn BlockDriver>,
    ctx: &Arc<RunCtx>,
    sink: &Arc<CloneSink>,
    (write, off, gen): (bool, u64, u64),
    t0: Instant,
    nowait: bool,
) {
    let verify = ctx.verify.is_some();
    let bs = ctx.job.bs as usize;
    let mut data = sink.take_buf(bs);
    stamp_or_fill(&mut data, write, off, gen, verify);
    let op = if write { ReqOp::Write } else { ReqOp::Read };
    let (s, c) = (Arc::clone(sink), Arc::clone(ctx));
    // io_uring sets IOCB_ALLOC_CACHE on its kiocbs, so blkdev_direct_IO()'s bio is
    // bio_alloc_bioset(..., REQ_ALLOC_CACHE, &fs_bio_set): from this CPU's bio cache. The sync
    // engines' bios (psync, pvsync2) are not.
    let mut bio = if ctx.job.ioengine == IoEngine::IoUring {
        cx.kernel().bio_alloc_percpu_cache(op, off >> 9, cx)
    } else {
        cx.kernel().bio_alloc(op, off >> 9)
    }
    .with_data(data);
    if nowait {
        bio = bio.with_flags(ReqFlags::REQ_NOWAIT);
        sink.nowait[0].fetch_add(1, Ordering::Relaxed);
    }
    let bio = bio.with_end_io(BioEndIo::new("bench_end_io", move |bio, cx| {
        if nowait {
            if bio.status() == BLK_STS_AGAIN {
                s.nowait[2].fetch_add(1, Ordering::Relaxed);
                s.again.lock().push((write, off, gen, t0));
                bio_put(bio, cx);
                return;
            }
            s.nowait[1].fetch_add(1, Ordering::Relaxed);
        }
        if bio.status() != BLK_STS_OK {
            c.halt(RunStop::Failed(format!(
                "a {} bio at offset {off} failed: {:?}",
                if write { "write" } else { "read" },
                bio.status()
            )));
        }
        let data = (!write && verify).then(|| bio.data());
        s.io_done(&c, t0, write, off, gen, data.as_deref());
        // The buffer back to the clone (one segment: what submit_io() built; a driver that
        // kept or split it returns nothing, and the next I/O allocates).
        let mut bio = bio;
        s.give_back_buf(&mut bio);
        bio_put(bio, cx);
    }));
    submit_bio_noacct(bio, &**dev, cx);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fio::job::RwPattern;

    /// A run's kernel boots with the context's tracepoints: on for a plain `RunCtx` (tests
    /// capture events), off as `biosim bench` asks without `RUST_LOG`.
    #[test]
    fn a_run_kernel_has_the_contexts_tracepoints() {
        let job = JobSpec::with_defaults("t", 1);
        let mut ctx = RunCtx::new(&job, 64, None, Arc::default());
        assert!(boot_run_kernel(&ctx, 1).unwrap().tracepoints_enabled());
        ctx.tracepoints = false;
        let k = boot_run_kernel(&ctx, 2).unwrap();
        assert!(!k.tracepoints_enabled());
        assert_eq!(k.nr_cpus(), 2);
    }

    #[test]
    fn an_issuer_stops_at_number_ios_and_flushes_every_fsync_writes() {
        let mut job = JobSpec::with_defaults("t", 1);
        job.rw = RwPattern::RandWrite;
        job.size = 64 * 4096;
        job.number_ios = Some(10);
        job.fsync = Some(4);
        let ctx = RunCtx::new(&job, 64, None, Arc::default());
        let mut iss = Issuer::new(&ctx, 0, Instant::now());
        let mut steps = String::new();
        while let Some(s) = iss.next(&ctx) {
            steps.push(match s {
                Step::Io { .. } => 'w',
                Step::Flush(_) => 'F',
            });
        }
        assert_eq!(steps, "wwwwFwwwwFww");
    }

    /// A clone's completed bio gives its buffer back, and the next I/O takes that very buffer
    /// (no allocation per I/O); a buffer of another size is not handed out.
    #[test]
    fn a_completed_bios_buffer_is_the_next_ios_buffer() {
        let kernel = Kernel::boot(KernelConfig::default(), 1, 1).unwrap();
        let sink = CloneSink::new();
        let first = sink.take_buf(4096);
        assert_eq!(first, vec![0xa5; 4096], "a new buffer is filled");
        let ptr = first.as_ptr();
        let mut bio = kernel.bio_alloc(ReqOp::Read, 0).with_data(first);
        sink.give_back_buf(&mut bio);
        let again = sink.take_buf(4096);
        assert_eq!(again.as_ptr(), ptr, "the returned buffer is reused");
        let mut two = kernel
            .bio_alloc(ReqOp::Read, 0)
            .with_data(vec![1; 512])
            .with_data(vec![2; 512]);
        sink.give_back_buf(&mut two);
        sink.give_back_buf(&mut kernel.bio_alloc(ReqOp::Read, 0).with_data(vec![3; 512]));
        assert_eq!(
            sink.bufs.lock().len(),
            1,
            "a two-segment bio gives nothing back"
        );
        assert_eq!(
            sink.take_buf(4096),
            vec![0xa5; 4096],
            "a 512-byte buffer is not a 4 KiB one"
        );
        drop(again);
    }

    /// A per-CPU ring holds what one CPU may carry: every clone's `iodepth` (the loop's worker
    /// is unbound, so it may issue any clone's command on one CPU), capped by the loop's 128 tags.
    #[test]
    fn a_ring_is_as_deep_as_every_clones_iodepth_up_to_the_loops_tags() {
        let mut job = JobSpec::with_defaults("t", 1);
        for (iodepth, numjobs, want) in
            [(1, 1, 1), (32, 1, 32), (1, 2, 2), (16, 4, 64), (64, 4, 128)]
        {
            job.iodepth = iodepth;
            job.numjobs = numjobs;
            assert_eq!(
                ring_depth(&job),
                want,
                "iodepth={iodepth} numjobs={numjobs}"
            );
        }
    }
}
