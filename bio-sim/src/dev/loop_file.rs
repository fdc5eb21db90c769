//! A real file as the loop driver's backing file: [`LoopBacking`] (bio-core's model of
//! `lo->lo_backing_file`) over a [`BackingFile`] (preadv2/pwritev2 with `RWF_*` flags).
//!
//! The `IOCB_NOWAIT` attempt of `lo_rw_aio_nowait()` becomes one `preadv2`/`pwritev2` with
//! `RWF_NOWAIT`, so `-EAGAIN` comes from this machine's filesystem, not from a model: ext4's
//! direct-I/O write checks refuse a NOWAIT write into a hole, exactly the sparse-file case of patch
//! 6/6. The worker's blocking path loops until the whole segment is done, as `lo_rw_aio()` would
//! with a complete iov_iter.
//!
//! With `O_DIRECT` (`LO_FLAGS_DIRECT_IO`) a bio segment that is not aligned to the file's DIO
//! alignment is bounced through an [`AlignedBuf`]; positions and lengths must be aligned (the
//! loop device's logical block size says how), else the kernel's `EINVAL` is the result, as it
//! would be for a misaligned bio on a real loop device.

use super::aligned::AlignedBuf;
use super::backing::{BackingFile, RwFlags};
use super::uring::{UringCompletion, UringEngine, UringOp, UringStats};
use super::uring_cpu::CpuRings;
use bio_core::drivers::block::loop_drv::{AioRequest, Fallocate, LoopBacking, LoopDevice};
use bio_core::errno::Errno;
use bio_core::kernel::CpuId;
use bio_core::{Cpu, Kernel};
use parking_lot::Mutex;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

/// The loop driver's backing file, over a real file.
#[derive(Debug)]
pub struct FileBacking {
    file: Arc<BackingFile>,
    /// `RWF_*` flags added to every read and write (e.g. `RWF_DONTCACHE` for a buffered backing).
    extra: RwFlags,
    syscalls: AtomicU64,
    /// Of `syscalls`, those whose flags carried `RWF_DONTCACHE` (fio's `uncached=1`).
    dontcache: AtomicU64,
}

/// The errno of an I/O error (`EIO` when it has none).
fn errno(e: &io::Error) -> Errno {
    e.raw_os_error()
        .and_then(Errno::from_i32)
        .unwrap_or(Errno::EIO)
}

impl FileBacking {
    /// A backing over `file`.
    pub fn new(file: Arc<BackingFile>) -> Self {
        Self::with_flags(file, RwFlags::empty())
    }

    /// A backing over `file` whose every read and write also carries `extra`.
    pub fn with_flags(file: Arc<BackingFile>, extra: RwFlags) -> Self {
        FileBacking {
            file,
            extra,
            syscalls: AtomicU64::new(0),
            dontcache: AtomicU64::new(0),
        }
    }

    /// The file.
    pub fn file(&self) -> &Arc<BackingFile> {
        &self.file
    }

    /// preadv2/pwritev2 calls made so far (NOWAIT attempts included).
    pub fn syscalls(&self) -> u64 {
        self.syscalls.load(Ordering::Relaxed)
    }

    /// Of [`FileBacking::syscalls`], those that carried `RWF_DONTCACHE`.
    pub fn dontcache_syscalls(&self) -> u64 {
        self.dontcache.load(Ordering::Relaxed)
    }

    /// The memory alignment a buffer needs for this file: `statx(STATX_DIOALIGN)`'s
    /// `stx_dio_mem_align` (a page where the kernel does not say) with `O_DIRECT`, none without.
    fn mem_align(&self) -> usize {
        if !self.file.direct() {
            return 1;
        }
        self.file
            .dio_align()
            .map_or(4096, |a| a.mem_align.max(1) as usize)
    }

    fn needs_bounce(&self, buf: &[u8]) -> bool {
        !(buf.as_ptr() as usize).is_multiple_of(self.mem_align())
    }

    /// One call, or until done (`all`); returns bytes done.
    fn io(
        &self,
        write: bool,
        pos: u64,
        buf: &mut [u8],
        flags: RwFlags,
        all: bool,
    ) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            self.syscalls.fetch_add(1, Ordering::Relaxed);
            if flags.contains(RwFlags::DONTCACHE) {
                self.dontcache.fetch_add(1, Ordering::Relaxed);
            }
            let off = pos + done as u64;
            let n = if write {
                self.file.write_at(&buf[done..], off, flags)?
            } else {
                self.file.read_at(&mut buf[done..], off, flags)?
            };
            done += n;
            if n == 0 || !all {
                break;
            }
        }
        Ok(done)
    }
}

impl LoopBacking for FileBacking {
    fn size(&self) -> u64 {
        self.file.size()
    }

    fn is_block_device(&self) -> bool {
        self.file.is_block_device()
    }

    fn fmode_nowait(&self) -> bool {
        self.file.supports_nowait()
    }

    fn rw(&self, write: bool, pos: u64, buf: &mut [u8], nowait: bool) -> Result<usize, Errno> {
        let mut flags = self.extra;
        if nowait {
            flags |= RwFlags::NOWAIT;
        }
        // A NOWAIT call is one attempt; the worker's blocking call completes the segment.
        let all = !nowait;
        if self.needs_bounce(buf) {
            // A length O_DIRECT cannot take is the kernel's EINVAL, not a panic.
            let mut bounce =
                AlignedBuf::try_with_alignment(buf.len(), 4096).map_err(|_| Errno::EINVAL)?;
            bounce.copy_from_slice(buf);
            let n = self
                .io(write, pos, &mut bounce, flags, all)
                .map_err(|e| errno(&e))?;
            if !write {
                buf[..n].copy_from_slice(&bounce[..n]);
            }
            return Ok(n);
        }
        self.io(write, pos, buf, flags, all).map_err(|e| errno(&e))
    }

    fn fsync(&self) -> Result<(), Errno> {
        self.file.sync_data().map_err(|e| errno(&e))
    }

    fn fallocate(&self, mode: Fallocate, pos: u64, len: u64) -> Result<(), Errno> {
        match mode {
            Fallocate::PunchHole => self.file.punch_hole(pos, len),
            Fallocate::ZeroRange => self.file.zero_range(pos, len),
        }
        .map_err(|e| errno(&e))
    }
}

/// The loop driver's backing file over a real file with **asynchronous** direct I/O: reads and
/// writes go to an [`UringEngine`] (`IORING_OP_READ`/`WRITE` with `RWF_NOWAIT` for the NOWAIT
/// attempt), `submit_aio` returns at once (`-EIOCBQUEUED`), and completions are delivered as hard
/// interrupts on the submitting CPU whose handler calls the loop device's `ki_complete()`
/// ([`LoopDevice::lo_rw_aio_complete_async`]). This is the kernel's shape: direct I/O completes
/// from the disk interrupt, and `blk_mq_complete_request()` then ends the loop bio in
/// `BLOCK_SOFTIRQ`.
///
/// Completions are **coalesced**: every batch of CQEs the engine reaps at once
/// ([`UringEngine::new_batched`]) raises *one* `loop-aio` interrupt per submitting CPU, whose
/// handler completes each of that CPU's commands in turn, as an NVMe controller's interrupt
/// coalescing or a NIC's NAPI poll serves several completions from one interrupt. Each command
/// is still completed on its own (its result, an `-EAGAIN` requeued by `ki_complete()`), exactly
/// once. [`UringBacking::uring_stats`] reports the batches, [`UringBacking::irqs`] the interrupts.
///
/// One `UringBacking` serves one loop device: call [`UringBacking::attach`] with it before its
/// first I/O (until then asynchronous submissions are refused with `EIO`, so nothing can be lost
/// in a completion with nowhere to go).
pub struct UringBacking {
    file: Arc<BackingFile>,
    /// The synchronous paths (non-aio commands, flush, fallocate).
    sync: FileBacking,
    engine: Engine,
    /// The `RWF_*` flags of every read and write.
    extra: RwFlags,
    target: Arc<OnceLock<Target>>,
    state: Arc<AioState>,
    /// Submissions wait for [`UringBacking::ring_doorbell`] ([`UringBacking::defer_doorbell`]).
    deferred: AtomicBool,
}

/// Who submits to and reaps the ring(s).
enum Engine {
    /// One ring and its reaper thread ([`UringEngine`]).
    Reaper(UringEngine),
    /// One ring per simulated CPU, reaped by that CPU's thread when it parks ([`CpuRings`]);
    /// `installed` once [`UringBacking::install_cpu_rings`] made them the CPUs' idle waits.
    PerCpu {
        rings: CpuRings,
        installed: AtomicBool,
    },
}

struct Target {
    lo: Weak<LoopDevice>,
    kernel: Arc<Kernel>,
}

/// One command in the ring: the engine's token is its slot in [`Slots`].
struct Pending {
    /// The loop device's token (`AioRequest::token`).
    token: u64,
    /// The submitting CPU: its completion interrupt goes there.
    cpu: CpuId,
    write: bool,
    /// The command's own buffer when it was bounced (the data written, or the buffer a read's
    /// bytes are copied into): handed back to `ki_complete()`, so a completion allocates
    /// nothing. Empty when the buffer itself went to the ring ([`AlignedBuf::from_vec`]).
    data: Vec<u8>,
}

/// The commands in the ring, by engine token (a slab: no hashing, slots reused).
#[derive(Default)]
struct Slots {
    slot: Vec<Option<Pending>>,
    free: Vec<usize>,
}

impl Slots {
    fn insert(&mut self, p: Pending) -> u64 {
        match self.free.pop() {
            Some(i) => {
                self.slot[i] = Some(p);
                i as u64
            }
            None => {
                self.slot.push(Some(p));
                (self.slot.len() - 1) as u64
            }
        }
    }

    fn take(&mut self, token: u64) -> Option<Pending> {
        let i = usize::try_from(token).ok()?;
        let p = self.slot.get_mut(i)?.take()?;
        self.free.push(i);
        Some(p)
    }
}

/// What the submit side and the completion side share.
#[derive(Default)]
struct AioState {
    slots: Mutex<Slots>,
    /// Aligned buffers of completed ops, reused by the next submissions (at most `pool_max`).
    pool: Mutex<Vec<AlignedBuf>>,
    pool_max: usize,
    /// `loop-aio` interrupts raised.
    irqs: AtomicU64,
}

impl AioState {
    fn buffer(&self, len: usize) -> Option<AlignedBuf> {
        let mut pool = self.pool.lock();
        if let Some(i) = pool.iter().rposition(|b| b.len() == len) {
            return Some(pool.swap_remove(i));
        }
        drop(pool);
        AlignedBuf::try_with_alignment(len, 4096).ok()
    }

    fn recycle(&self, buf: AlignedBuf) {
        let mut pool = self.pool.lock();
        if pool.len() < self.pool_max && !buf.is_empty() {
            pool.push(buf);
        }
    }
}

/// One completed command, on its way to `ki_complete()` on its CPU.
struct AioDone {
    token: u64,
    cpu: CpuId,
    res: Result<usize, Errno>,
    data: Vec<u8>,
}

/// Where [`raise_batch`]'s handlers send each completion: the loop device's `ki_complete()`.
type Sink = Arc<dyn Fn(AioDone, &Cpu) + Send + Sync>;

/// Raises one `loop-aio` interrupt per target CPU for a reaped batch, in the order the CPUs first
/// appear; each handler completes its CPU's commands in completion order. A CPU that cannot take
/// it (gone offline: the IRQ core already moves it to the lowest online CPU; no CPU online at
/// all) hands its handler back, which goes to the first online CPU as the kernel migrates a
/// dying CPU's interrupts. Returns the interrupts raised.
fn raise_batch(kernel: &Kernel, batch: Vec<AioDone>, sink: &Sink) -> u64 {
    let mut groups: Vec<(CpuId, Vec<AioDone>)> = Vec::with_capacity(1);
    match batch.first().map(|d| d.cpu) {
        // The common case, every command of the batch from one CPU: the batch is the group.
        Some(cpu) if batch.iter().all(|d| d.cpu == cpu) => groups.push((cpu, batch)),
        _ => {
            for d in batch {
                match groups.iter_mut().find(|(c, _)| *c == d.cpu) {
                    Some((_, g)) => g.push(d),
                    None => groups.push((d.cpu, vec![d])),
                }
            }
        }
    }
    let mut raised = 0;
    for (cpu, mut group) in groups {
        if cfg!(feature = "bug-uring-drop-last-cqe") && group.len() > 1 {
            // The buggy twin: the last completion of a coalesced interrupt is lost.
            group.pop();
        }
        let sink = Arc::clone(sink);
        let handler: bio_core::irq::IrqHandler = Box::new(move |cx: &Cpu| {
            for d in group {
                sink(d, cx);
            }
        });
        raised += 1;
        if let Err(e) = kernel.raise_irq(cpu, "loop-aio", handler) {
            match kernel.online_cpus().first() {
                Some(&other) => {
                    let _ = kernel.raise_irq(other, "loop-aio", e.handler);
                }
                None => {
                    tracing::error!("loop-aio: no CPU online for {} completions", e.cpu);
                    raised -= 1;
                }
            }
        }
    }
    raised
}

/// The batch callback of an io_uring backing (either engine): each reaped CQE back to its
/// command (its data copied out of a bounce buffer), then one `loop-aio` interrupt per CPU
/// ([`raise_batch`]).
fn batch_handler(
    target: &Arc<OnceLock<Target>>,
    state: &Arc<AioState>,
) -> impl Fn(Vec<UringCompletion>) + Send + Sync + 'static {
    let (t, st) = (Arc::clone(target), Arc::clone(state));
    let sink: Arc<OnceLock<Sink>> = Arc::default();
    move |batch: Vec<UringCompletion>| {
        // Submissions are refused until attached, so a batch always has a target.
        let Some(t) = t.get() else { return };
        let mut done = Vec::with_capacity(batch.len());
        {
            let mut slots = st.slots.lock();
            for c in batch {
                let Some(p) = slots.take(c.token) else {
                    tracing::error!("loop-aio: completion for unknown token {}", c.token);
                    continue;
                };
                let res = c.result.map_err(|e| errno(&e));
                let mut data = p.data;
                match c.op.into_buf() {
                    // The command's own buffer went to the ring: it comes back as is.
                    Some(buf) if buf.is_adopted_vec() => data = buf.into_vec(),
                    Some(buf) => {
                        if !p.write {
                            let n = res.map_or(0, |n| n.min(data.len()).min(buf.len()));
                            data[..n].copy_from_slice(&buf[..n]);
                        }
                        st.recycle(buf);
                    }
                    None => {}
                }
                done.push(AioDone {
                    token: p.token,
                    cpu: p.cpu,
                    res,
                    data,
                });
            }
        }
        let sink = sink.get_or_init(|| {
            let lo = t.lo.clone();
            Arc::new(move |d: AioDone, cx: &Cpu| {
                if let Some(lo) = lo.upgrade() {
                    lo.lo_rw_aio_complete_async(d.token, d.res, d.data, cx);
                }
            })
        });
        let n = raise_batch(&t.kernel, done, sink);
        st.irqs.fetch_add(n, Ordering::Relaxed);
    }
}

impl fmt::Debug for UringBacking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringBacking")
            .field("file", &self.file.path())
            .field("in_flight", &self.in_flight())
            .field("irqs", &self.irqs())
            .finish()
    }
}

impl UringBacking {
    /// An io_uring engine of `entries` over `file`.
    pub fn new(file: Arc<BackingFile>, entries: u32) -> io::Result<Self> {
        Self::with_flags(file, entries, RwFlags::empty())
    }

    /// [`UringBacking::new`] whose every read and write also carries `extra`: in each SQE's
    /// `rw_flags` and on the synchronous path (a buffered loop device's reads and writes), as
    /// [`FileBacking::with_flags`] does; e.g. `RWF_DONTCACHE` for fio's `uncached=1`.
    pub fn with_flags(file: Arc<BackingFile>, entries: u32, extra: RwFlags) -> io::Result<Self> {
        let target: Arc<OnceLock<Target>> = Arc::default();
        let state = Arc::new(AioState {
            pool_max: 2 * entries as usize,
            ..AioState::default()
        });
        let engine = Engine::Reaper(UringEngine::new_batched(
            Arc::clone(&file),
            entries,
            extra,
            batch_handler(&target, &state),
        )?);
        Ok(UringBacking {
            sync: FileBacking::with_flags(Arc::clone(&file), extra),
            file,
            engine,
            extra,
            target,
            state,
            deferred: AtomicBool::new(false),
        })
    }

    /// [`UringBacking::with_flags`] with **one ring per simulated CPU** ([`CpuRings`], `nr_cpus`
    /// of them, each of depth `entries`) instead of one ring and a reaper thread: a CPU's
    /// submissions go to its own ring, its thread submits them and waits for their completions
    /// in one `io_uring_enter()` when it parks, and raises the `loop-aio` interrupt on itself.
    /// Needs a threaded runtime: call [`UringBacking::install_cpu_rings`] before the first I/O
    /// (until then asynchronous submissions are refused with `EIO`).
    ///
    /// Fails when io_uring, or its timed wait (`IORING_FEAT_EXT_ARG`), is unavailable; the caller
    /// may then fall back to [`UringBacking::with_flags`].
    pub fn per_cpu_rings(
        file: Arc<BackingFile>,
        nr_cpus: usize,
        entries: u32,
        extra: RwFlags,
    ) -> io::Result<Self> {
        let target: Arc<OnceLock<Target>> = Arc::default();
        let state = Arc::new(AioState {
            pool_max: 2 * entries as usize,
            ..AioState::default()
        });
        let rings = CpuRings::new(
            &file,
            nr_cpus,
            entries,
            Arc::new(batch_handler(&target, &state)),
        )?;
        Ok(UringBacking {
            sync: FileBacking::with_flags(Arc::clone(&file), extra),
            file,
            engine: Engine::PerCpu {
                rings,
                installed: AtomicBool::new(false),
            },
            extra,
            target,
            state,
            deferred: AtomicBool::new(false),
        })
    }

    /// Makes each CPU's ring that CPU's idle wait on `rt`
    /// ([`ThreadedRuntime::set_idle_wait`](crate::runtime::threaded::ThreadedRuntime::set_idle_wait)),
    /// so its thread reaps it; then asynchronous submissions are accepted. An error for a
    /// backing with one ring (nothing to install) or a runtime of another size.
    pub fn install_cpu_rings(
        &self,
        rt: &crate::runtime::threaded::ThreadedRuntime,
    ) -> Result<(), String> {
        let Engine::PerCpu { rings, installed } = &self.engine else {
            return Err("this io_uring backing has one ring and a reaper thread".into());
        };
        let n = rt.kernel().nr_cpus() as usize;
        if n != rings.len() {
            return Err(format!(
                "the runtime has {n} CPUs, the backing {} rings",
                rings.len()
            ));
        }
        for i in 0..n {
            let w: Arc<dyn crate::runtime::threaded::IdleWait> = rings.ring(i).clone();
            rt.set_idle_wait(CpuId(i as u32), Arc::downgrade(&w))
                .map_err(|e| e.to_string())?;
        }
        installed.store(true, Ordering::Release);
        Ok(())
    }

    /// The per-CPU rings, if this backing has them ([`UringBacking::per_cpu_rings`]).
    pub fn cpu_rings(&self) -> Option<&CpuRings> {
        match &self.engine {
            Engine::PerCpu { rings, .. } => Some(rings),
            Engine::Reaper(_) => None,
        }
    }

    /// From now on a submission does not wake the engine's reaper itself: the submissions of a
    /// burst wait in the engine ([`UringEngine::submit_deferred`]) until
    /// [`UringBacking::ring_doorbell`], which the caller must run before any submitting CPU
    /// sleeps: register it with [`ThreadedRuntime::on_park`](crate::runtime::threaded::ThreadedRuntime::on_park).
    /// One eventfd wake-up then serves every bio a CPU submitted between two sleeps, as an NVMe
    /// driver rings its doorbell once per batch (`bd->last`); without this, one per bio.
    pub fn defer_doorbell(&self) {
        self.deferred.store(true, Ordering::Release);
    }

    /// Hands every deferred submission to the ring now (see [`UringBacking::defer_doorbell`]);
    /// returns whether there were any.
    pub fn ring_doorbell(&self) -> bool {
        match &self.engine {
            Engine::Reaper(e) => e.ring_doorbell(),
            // Each CPU's own wait submits its queue: nothing to ring.
            Engine::PerCpu { .. } => false,
        }
    }

    /// Routes completions to `lo` on `kernel`'s CPUs. A second call for another device is an
    /// error: completions are routed per backing.
    pub fn attach(&self, lo: &Arc<LoopDevice>, kernel: &Arc<Kernel>) -> Result<(), String> {
        let t = self.target.get_or_init(|| Target {
            lo: Arc::downgrade(lo),
            kernel: Arc::clone(kernel),
        });
        if t.lo.ptr_eq(&Arc::downgrade(lo)) {
            Ok(())
        } else {
            Err(format!(
                "{}: this io_uring backing already serves another loop device",
                self.file.path().display()
            ))
        }
    }

    /// Waits until every submitted I/O has completed (its interrupt raised); rings the doorbell
    /// for deferred ones first.
    pub fn wait_idle(&self) {
        match &self.engine {
            Engine::Reaper(e) => {
                e.ring_doorbell();
                e.wait_idle();
            }
            Engine::PerCpu { rings, .. } => {
                if !rings.wait_idle(std::time::Duration::from_secs(60)) {
                    if let Some(e) = rings.error() {
                        tracing::error!("{}: {e}", self.file.path().display());
                        return;
                    }
                    tracing::error!(
                        "{}: io_uring CPU rings still have {} I/Os in flight after 60 s (are \
                         the CPU threads parking?)",
                        self.file.path().display(),
                        rings.in_flight()
                    );
                }
            }
        }
    }

    /// I/Os in flight in the ring.
    pub fn in_flight(&self) -> usize {
        match &self.engine {
            Engine::Reaper(e) => e.in_flight(),
            Engine::PerCpu { rings, .. } => rings.in_flight(),
        }
    }

    /// The engine's counters so far: submissions, completions and the CQE batches
    /// ([`UringStats::batches`], [`UringStats::cqes`], [`UringStats::max_batch`],
    /// [`UringStats::batch_hist`], [`UringStats::mean_batch`]). Each batch raised one interrupt
    /// per CPU it had completions for ([`UringBacking::irqs`]).
    pub fn uring_stats(&self) -> UringStats {
        match &self.engine {
            Engine::Reaper(e) => e.stats(),
            Engine::PerCpu { rings, .. } => rings.stats(),
        }
    }

    /// The `RWF_*` flags every read and write carries (besides the NOWAIT attempt's own).
    pub fn rw_flags(&self) -> RwFlags {
        self.extra
    }

    /// Synchronous-path reads and writes (preadv2/pwritev2) that carried `RWF_DONTCACHE`.
    pub fn dontcache_syscalls(&self) -> u64 {
        self.sync.dontcache_syscalls()
    }

    /// `loop-aio` interrupts raised so far (at most one per CPU per batch).
    pub fn irqs(&self) -> u64 {
        self.state.irqs.load(Ordering::Relaxed)
    }
}

impl LoopBacking for UringBacking {
    fn size(&self) -> u64 {
        self.sync.size()
    }

    fn is_block_device(&self) -> bool {
        self.sync.is_block_device()
    }

    fn fmode_nowait(&self) -> bool {
        self.sync.fmode_nowait()
    }

    /// Non-aio commands (a buffered loop device, the flush sequence) stay synchronous.
    fn rw(&self, write: bool, pos: u64, buf: &mut [u8], nowait: bool) -> Result<usize, Errno> {
        self.sync.rw(write, pos, buf, nowait)
    }

    fn fsync(&self) -> Result<(), Errno> {
        self.sync.fsync()
    }

    fn fallocate(&self, mode: Fallocate, pos: u64, len: u64) -> Result<(), Errno> {
        self.sync.fallocate(mode, pos, len)
    }

    fn is_async(&self) -> bool {
        true
    }

    fn submit_aio(&self, req: AioRequest) -> Result<(), (AioRequest, Errno)> {
        if self.target.get().is_none() {
            return Err((req, Errno::EIO)); // not attached: its completion would have nowhere to go
        }
        if let Engine::PerCpu { installed, .. } = &self.engine {
            if !installed.load(Ordering::Acquire) {
                return Err((req, Errno::EIO)); // no CPU thread would ever reap it
            }
        }
        let AioRequest {
            token,
            write,
            pos,
            nowait,
            cpu,
            data,
        } = req;
        // The request handed back with an error: its buffer comes back in it.
        let back = |data| AioRequest {
            token,
            write,
            pos,
            data,
            nowait,
            cpu,
        };
        // O_DIRECT straight from/into the command's buffer when it is aligned (a page-aligned bio
        // segment, crate::dev::page_alloc); else through an aligned bounce buffer.
        let (buf, data) = match AlignedBuf::from_vec(data, self.sync.mem_align()) {
            Ok(buf) => (buf, Vec::new()),
            Err(data) => {
                let Some(mut buf) = self.state.buffer(data.len()) else {
                    return Err((back(data), Errno::EINVAL));
                };
                if write {
                    buf.copy_from_slice(&data);
                }
                (buf, data)
            }
        };
        let op = if write {
            UringOp::Write { buf, off: pos }
        } else {
            UringOp::Read { buf, off: pos }
        };
        // The backing's own flags (RWF_DONTCACHE) go in every SQE, NOWAIT only in the attempt.
        let mut flags = self.extra;
        if nowait {
            flags |= RwFlags::NOWAIT;
        }
        let slot = self.state.slots.lock().insert(Pending {
            token,
            cpu,
            write,
            data,
        });
        let submitted = match &self.engine {
            Engine::Reaper(e) if self.deferred.load(Ordering::Acquire) => {
                e.submit_deferred(slot, op, flags)
            }
            Engine::Reaper(e) => e.submit_with_flags(slot, op, flags),
            Engine::PerCpu { rings, .. } => rings.ring(cpu.index()).submit(slot, op, flags),
        };
        submitted.map_err(|e| {
            let mut data = self
                .state
                .slots
                .lock()
                .take(slot)
                .map(|p| p.data)
                .unwrap_or_default();
            match e.op.into_buf() {
                Some(buf) if buf.is_adopted_vec() => data = buf.into_vec(),
                Some(buf) => self.state.recycle(buf),
                None => {}
            }
            (back(data), Errno::EIO)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::backing::OpenOptions;
    use crate::dev::uring::tests::unavailable;

    /// A sparse 1 MiB file in the temp dir, or `None` where its filesystem has no O_DIRECT
    /// (tmpfs before 6.6).
    fn file(direct: bool, name: &str) -> Option<(tempfile::TempDir, Arc<BackingFile>)> {
        let dir = tempfile::tempdir().unwrap();
        match BackingFile::open(
            &dir.path().join(name),
            &OpenOptions {
                direct,
                read_only: false,
                create_size: Some(1 << 20),
            },
        ) {
            Ok(f) => Some((dir, Arc::new(f))),
            Err(e) => {
                eprintln!("skipped: {e}");
                None
            }
        }
    }

    /// What a coalesced interrupt's handler did with each completion: (token, result, CPU it
    /// ran on, in hardirq).
    type Seen = Arc<Mutex<Vec<(u64, Result<usize, Errno>, u32, bool)>>>;

    fn recording_sink() -> (Seen, Sink) {
        let seen: Seen = Arc::default();
        let s = Arc::clone(&seen);
        let sink: Sink = Arc::new(move |d: AioDone, cx: &Cpu| {
            s.lock().push((d.token, d.res, cx.id().0, cx.in_hardirq()));
        });
        (seen, sink)
    }

    fn done(token: u64, cpu: u32, res: Result<usize, Errno>) -> AioDone {
        AioDone {
            token,
            cpu: CpuId(cpu),
            res,
            data: vec![0; 4096],
        }
    }

    /// Runs every pending interrupt of `cpu`; returns how many.
    fn deliver_all(kernel: &Arc<Kernel>, cpu: u32) -> usize {
        let cx = kernel.cpu(CpuId(cpu)).unwrap();
        let mut n = 0;
        while kernel.deliver_irq(&cx) {
            n += 1;
        }
        n
    }

    /// A batch of 10 completions reaped at once, for CPUs 0 and 1 of three: one interrupt each
    /// (none for CPU 2), and their handlers complete every command exactly once, on its own
    /// CPU, in hardirq, in completion order, each with its own result (an `EAGAIN` among them,
    /// for `ki_complete()` to requeue). The buggy twin loses a completion and is caught.
    #[test]
    #[cfg_attr(
        feature = "bug-uring-drop-last-cqe",
        should_panic(expected = "every command completed exactly once")
    )]
    fn a_batch_raises_one_interrupt_per_cpu_and_completes_every_command_once() {
        let kernel = bio_core::Kernel::boot(bio_core::KernelConfig::default(), 3, 3).unwrap();
        let (seen, sink) = recording_sink();
        let res = |t: u64| {
            if t == 4 {
                Err(Errno::EAGAIN)
            } else {
                Ok(4096)
            }
        };
        let batch: Vec<AioDone> = (0..10).map(|t| done(t, (t % 2) as u32, res(t))).collect();
        assert_eq!(raise_batch(&kernel, batch, &sink), 2, "one IRQ per CPU");
        assert_eq!(kernel.pending_irqs(CpuId(0)), 1);
        assert_eq!(kernel.pending_irqs(CpuId(1)), 1);
        assert_eq!(kernel.pending_irqs(CpuId(2)), 0, "no completion for CPU 2");
        assert!(seen.lock().is_empty(), "nothing completes before delivery");
        assert_eq!(deliver_all(&kernel, 1), 1);
        assert_eq!(deliver_all(&kernel, 0), 1);
        let seen = seen.lock().clone();
        let mut tokens: Vec<u64> = seen.iter().map(|s| s.0).collect();
        tokens.sort_unstable();
        assert_eq!(
            tokens,
            (0..10).collect::<Vec<_>>(),
            "every command completed exactly once"
        );
        for &(t, r, cpu, hardirq) in &seen {
            assert_eq!(
                cpu as u64,
                t % 2,
                "token {t} completes on its submitting CPU"
            );
            assert!(hardirq, "token {t} completes in hardirq");
            assert_eq!(r, res(t), "token {t} keeps its own result");
        }
        let cpu0: Vec<u64> = seen.iter().filter(|s| s.2 == 0).map(|s| s.0).collect();
        assert_eq!(cpu0, [0, 2, 4, 6, 8], "completion order within a CPU");
    }

    /// A completion for an offline CPU goes to the lowest online CPU (the IRQ core's affinity
    /// fallback), still one interrupt for the batch's commands of that CPU. The buggy twin loses
    /// CPU 2's second completion and is caught.
    #[test]
    #[cfg_attr(
        feature = "bug-uring-drop-last-cqe",
        should_panic(expected = "assertion")
    )]
    fn a_batch_for_an_offline_cpu_is_served_by_the_first_online_one() {
        // CPUs 0 and 1 online, 2 offline from boot.
        let kernel = bio_core::Kernel::boot(bio_core::KernelConfig::default(), 3, 2).unwrap();
        let (seen, sink) = recording_sink();
        let batch = vec![
            done(7, 2, Ok(4096)),
            done(8, 2, Ok(4096)),
            done(9, 1, Ok(0)),
        ];
        assert_eq!(raise_batch(&kernel, batch, &sink), 2);
        assert_eq!(kernel.pending_irqs(CpuId(2)), 0);
        assert_eq!(
            deliver_all(&kernel, 0),
            1,
            "CPU 2's interrupt moved to CPU 0"
        );
        assert_eq!(deliver_all(&kernel, 1), 1);
        let seen = seen.lock().clone();
        let on: Vec<(u64, u32)> = seen.iter().map(|s| (s.0, s.2)).collect();
        assert_eq!(on, [(7, 0), (8, 0), (9, 1)]);
    }

    #[test]
    fn slots_reuse_freed_tokens_and_refuse_unknown_ones() {
        let mut s = Slots::default();
        let p = |token| Pending {
            token,
            cpu: CpuId(0),
            write: false,
            data: Vec::new(),
        };
        let (a, b) = (s.insert(p(10)), s.insert(p(11)));
        assert_ne!(a, b);
        assert_eq!(s.take(a).map(|p| p.token), Some(10));
        assert!(s.take(a).is_none(), "a token completes once");
        assert!(s.take(99).is_none());
        assert_eq!(s.insert(p(12)), a, "the freed slot is reused");
        assert_eq!(s.take(b).map(|p| p.token), Some(11));
    }

    #[test]
    fn a_nowait_direct_write_into_a_hole_is_eagain_and_the_blocking_path_writes_it() {
        let Some((_d, f)) = file(true, "sparse.img") else {
            return;
        };
        let b = FileBacking::new(Arc::clone(&f));
        let mut data = vec![7u8; 4096]; // a Vec: not 4096-aligned in general, so maybe bounced
        match b.rw(true, 8192, &mut data, true) {
            Err(e) => assert_eq!(
                e,
                Errno::EAGAIN,
                "ext4 refuses a NOWAIT DIO write that allocates"
            ),
            Ok(n) => assert_eq!(n, 4096, "a filesystem that can: the write is done"),
        }
        assert_eq!(b.rw(true, 8192, &mut data, false), Ok(4096));
        let mut back = vec![0u8; 4096];
        assert_eq!(
            b.rw(false, 8192, &mut back, true),
            Ok(4096),
            "a NOWAIT read of written blocks"
        );
        assert_eq!(back, data);
        assert_eq!(
            b.rw(true, 8192, &mut data, true),
            Ok(4096),
            "an overwrite does not block"
        );
    }

    /// fio's `uncached=1` on the io_uring backing: a buffered loop device's reads and writes
    /// (the synchronous path) carry `RWF_DONTCACHE`, and the flag is the engine's `rw_flags`
    /// (every SQE's); a backing made without it sends none.
    #[test]
    fn an_uncached_uring_backing_sends_rwf_dontcache_on_every_read_and_write() {
        let Some((_d, f)) = file(false, "uncached.img") else {
            return;
        };
        let b = match UringBacking::with_flags(Arc::clone(&f), 4, RwFlags::DONTCACHE) {
            Ok(b) => b,
            Err(e) if unavailable(&e) => {
                eprintln!("skipped: io_uring unavailable: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(b.rw_flags(), RwFlags::DONTCACHE);
        let mut data = vec![0x5au8; 4096];
        match b.rw(true, 4096, &mut data, false) {
            Err(Errno::EOPNOTSUPP) => {
                eprintln!("skipped: this filesystem has no RWF_DONTCACHE (FOP_DONTCACHE)");
                return;
            }
            r => assert_eq!(r, Ok(4096)),
        }
        let mut back = vec![0u8; 4096];
        assert_eq!(b.rw(false, 4096, &mut back, false), Ok(4096));
        assert_eq!(back, data);
        assert_eq!(b.dontcache_syscalls(), 2, "the write and the read");
        let plain = UringBacking::new(Arc::clone(&f), 4).unwrap();
        assert_eq!(plain.rw(false, 4096, &mut back, false), Ok(4096));
        assert_eq!(plain.rw_flags(), RwFlags::empty());
        assert_eq!(plain.dontcache_syscalls(), 0);
    }

    /// The loop model over per-CPU rings on the threaded runtime: bios submitted on CPUs 0 and 1
    /// are read by each CPU's own ring, reaped by that CPU's thread when it parks, and completed
    /// through the `loop-aio` interrupt on that CPU (counted: one interrupt per batch, each
    /// CPU's interrupts in its runtime counters), every bio once with its block's data. After the
    /// runtime's shutdown a command is refused with its data (the twin queues it for nobody).
    #[test]
    #[cfg_attr(
        feature = "bug-cpu-ring-submit-after-stop",
        should_panic(expected = "a command after the shutdown comes back with its data")
    )]
    fn per_cpu_rings_complete_through_the_irq_on_the_submitting_cpu() {
        use crate::runtime::threaded::{ThreadedConfig, ThreadedRuntime};
        use bio_core::block::{submit_bio_noacct, BioEndIo, BlkStatus, ReqOp, BLK_STS_OK};
        use bio_core::drivers::block::loop_drv::{LoopVariant, LO_FLAGS_DIRECT_IO};
        let Some((_d, f)) = file(true, "percpu.img") else {
            return;
        };
        for b in 0..16u64 {
            let mut blk = AlignedBuf::new(4096);
            blk.fill(b as u8 + 1);
            f.write_all_at(&blk, b * 4096, RwFlags::empty()).unwrap();
        }
        // Skips only where io_uring (or its EXT_ARG timed wait) is missing; any other error fails.
        let backing = match UringBacking::per_cpu_rings(Arc::clone(&f), 2, 16, RwFlags::empty()) {
            Ok(b) => Arc::new(b),
            Err(e) if unavailable(&e) => {
                eprintln!("skipped: io_uring unavailable: {e}");
                return;
            }
            Err(e) => panic!("per-CPU rings: {e}"),
        };
        let kernel = bio_core::Kernel::boot(bio_core::KernelConfig::default(), 2, 2).unwrap();
        let lo = LoopDevice::new(
            &kernel,
            0,
            backing.clone() as Arc<dyn LoopBacking>,
            LO_FLAGS_DIRECT_IO,
            0,
            LoopVariant::V5,
        );
        backing.attach(&lo, &kernel).unwrap();
        let rt = ThreadedRuntime::start(Arc::clone(&kernel), ThreadedConfig::default()).unwrap();
        backing.install_cpu_rings(&rt).unwrap();
        // (block, status, first byte, CPU it ended on, submitting CPU)
        type Ended = Arc<Mutex<Vec<(u64, BlkStatus, u8, u32, u32)>>>;
        let ended: Ended = Arc::default();
        for i in 0..32u64 {
            let (lo, ended) = (Arc::clone(&lo), Arc::clone(&ended));
            let cpu = (i % 2) as u32;
            let block = i % 16;
            rt.run_on(CpuId(cpu), move |cx| {
                let bio = cx
                    .kernel()
                    .bio_alloc(ReqOp::Read, block * 8)
                    .with_data(vec![0xee; 4096])
                    .with_end_io(BioEndIo::new("test_end_io", move |bio, cx| {
                        ended
                            .lock()
                            .push((block, bio.status(), bio.data()[0], cx.id().0, cpu));
                    }));
                submit_bio_noacct(bio, &*lo, cx);
            })
            .unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while ended.lock().len() < 32 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        backing.wait_idle();
        assert!(rt.quiesce(std::time::Duration::from_secs(20)));
        let ended = ended.lock().clone();
        assert_eq!(ended.len(), 32, "every bio ended once");
        for &(block, status, byte, on, from) in &ended {
            assert_eq!(status, BLK_STS_OK, "block {block}");
            assert_eq!(byte, block as u8 + 1, "block {block} read its own data");
            assert_eq!(on, from, "block {block} completes on its submitting CPU");
        }
        let rings = backing.cpu_rings().expect("per-CPU rings");
        let st = backing.uring_stats();
        assert_eq!((st.submitted, st.completed), (st.cqes, st.cqes));
        assert!(st.cqes >= 32, "every read went through a ring");
        assert_eq!(
            backing.irqs(),
            st.batches,
            "one loop-aio interrupt per batch"
        );
        let stats = rt.stats();
        for cpu in 0..2u32 {
            let tid = rt
                .run_on(CpuId(cpu), |_| std::thread::current().id())
                .unwrap();
            let ring = rings.ring(cpu as usize);
            let reaped = ring.reaped_by();
            assert!(!reaped.is_empty(), "CPU {cpu} reaped its ring");
            assert!(
                reaped.iter().all(|&t| t == tid),
                "CPU {cpu}'s ring is reaped by CPU {cpu}'s thread only"
            );
            // (Interrupts per batch are checked above for all rings together.)
            assert!(
                stats.cpus[cpu as usize].irqs > 0,
                "CPU {cpu} took its ring's interrupts"
            );
        }
        assert!(rt.shutdown().is_clean());
        assert!(kernel.reports().is_empty(), "{:?}", kernel.reports().all());
        // After the shutdown no CPU thread reaps the rings: a command is refused, its data
        // handed back with it, never queued where nobody completes it.
        let req = AioRequest {
            token: 77,
            write: true,
            pos: 4096,
            nowait: false,
            cpu: CpuId(1),
            data: vec![0xab; 4096],
        };
        let before = backing.in_flight();
        let r = backing.submit_aio(req);
        assert!(
            matches!(&r, Err((req, Errno::EIO)) if req.token == 77 && req.data == vec![0xab; 4096]),
            "a command after the shutdown comes back with its data: {:?}",
            r.as_ref().map_err(|(q, e)| (q.token, q.data.len(), *e))
        );
        assert_eq!(backing.in_flight(), before, "nothing left in flight");
    }
}
