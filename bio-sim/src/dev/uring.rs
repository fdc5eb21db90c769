//! An asynchronous I/O engine over `io_uring(7)`: the userspace stand-in for the loop driver's
//! `use_aio` path, where `lo_rw_aio()` submits a kiocb with `ki_complete = lo_rw_aio_complete`
//! to the backing file and the completion arrives later, from another context (in the kernel, the
//! backing device's IRQ; here, the engine's reaper thread), as a real device IRQ would.
//!
//! - [`UringOp::Read`] / [`UringOp::Write`] are `IORING_OP_READ` / `IORING_OP_WRITE` at an offset
//!   with the `RWF_*` flags of [`RwFlags`] in `sqe->rw_flags`, so `RWF_NOWAIT` (a `-EAGAIN`
//!   completion instead of blocking; io_uring does not retry it in io-wq) and `RWF_DONTCACHE`
//!   apply exactly as for `preadv2`/`pwritev2`.
//! - [`UringOp::Fsync`] is `IORING_OP_FSYNC` with `IORING_FSYNC_DATASYNC`: `REQ_OP_FLUSH`.
//!
//! ## Design
//!
//! One thread, the *reaper*, owns the ring: it alone pushes SQEs, enters the kernel and reaps
//! CQEs, so nothing about the ring is shared. [`UringEngine::submit`] hands an op to it over a
//! channel and wakes it through an `eventfd`, on which the reaper always keeps an
//! `IORING_OP_POLL_ADD` armed; the reaper therefore sleeps in one place,
//! `io_uring_enter(GETEVENTS, min_complete = 1)`, and wakes for either a completed I/O or new work.
//! It never spins.
//!
//! An op owns its buffer; while the op is in the kernel the buffer lives in the reaper's slab
//! (keyed by the SQE's `user_data`), and it is handed back in the [`UringCompletion`]. At most
//! `entries` ops are in the ring at once (the queue depth); more wait in the reaper's queue, like
//! requests waiting for a tag. Every accepted op gets exactly one completion callback, also at
//! shutdown, which waits for everything in flight. A panicking callback does not lose the other
//! completions: the panic is caught, the reaper carries on, and [`UringEngine::shutdown`]
//! re-raises the first one.
//!
//! ## Batches
//!
//! Each time the reaper wakes it takes every CQE the ring holds in one go (liburing's
//! `io_uring_peek_batch_cqe()`), a *batch*. [`UringEngine::new_batched`] hands the whole batch to
//! one callback, so a consumer can raise one interrupt per batch instead of one per completion,
//! as an NVMe controller's interrupt coalescing (the "Interrupt Coalescing" feature, FID 08h:
//! Aggregation Threshold and Time) or a NIC's NAPI poll does. [`UringStats`] counts the batches
//! and their sizes ([`UringEngine::stats`] reads them while the engine runs).

use super::aligned::AlignedBuf;
use super::backing::{BackingFile, RwFlags};
use crossbeam_channel::{Receiver, Sender};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use parking_lot::{Condvar, Mutex, RwLock};
use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle, ThreadId};

/// One I/O for the engine. It owns its buffer while in flight; the completion hands it back.
#[derive(Debug)]
pub enum UringOp {
    /// `IORING_OP_READ` of `buf.len()` bytes at `off` into `buf` (a bio's `REQ_OP_READ`).
    Read {
        /// Where the data goes.
        buf: AlignedBuf,
        /// The byte offset in the backing file.
        off: u64,
    },
    /// `IORING_OP_WRITE` of `buf` at `off` (a bio's `REQ_OP_WRITE`).
    Write {
        /// The data.
        buf: AlignedBuf,
        /// The byte offset in the backing file.
        off: u64,
    },
    /// `IORING_OP_FSYNC` with `IORING_FSYNC_DATASYNC` (`REQ_OP_FLUSH`, `fdatasync`).
    Fsync,
}

impl UringOp {
    /// `"read"`, `"write"` or `"fsync"`.
    pub fn name(&self) -> &'static str {
        match self {
            UringOp::Read { .. } => "read",
            UringOp::Write { .. } => "write",
            UringOp::Fsync => "fsync",
        }
    }

    /// The op's buffer, if it has one.
    pub fn buf(&self) -> Option<&AlignedBuf> {
        match self {
            UringOp::Read { buf, .. } | UringOp::Write { buf, .. } => Some(buf),
            UringOp::Fsync => None,
        }
    }

    /// Takes the op's buffer, if it has one.
    pub fn into_buf(self) -> Option<AlignedBuf> {
        match self {
            UringOp::Read { buf, .. } | UringOp::Write { buf, .. } => Some(buf),
            UringOp::Fsync => None,
        }
    }
}

/// The completion of one op (a CQE): what `lo_rw_aio_complete()` receives as `ret`.
#[derive(Debug)]
pub struct UringCompletion {
    /// The token given to [`UringEngine::submit`].
    pub token: u64,
    /// The byte count (`cqe->res >= 0`; possibly short: a read at end of file is `Ok(0)`), or the
    /// error (`-cqe->res` as an OS error, e.g. `EAGAIN` for `RWF_NOWAIT`, `EBADF` for a write to a
    /// read-only file).
    pub result: io::Result<usize>,
    /// The op, with its buffer handed back (a read's data is in it).
    pub op: UringOp,
}

/// Why [`UringEngine::submit`] refused an op. The op is handed back inside: nothing is lost.
#[derive(Debug, thiserror::Error)]
#[error("io_uring engine refused {} op (token {token}): {reason}", op.name())]
pub struct SubmitError {
    /// The token of the refused op.
    pub token: u64,
    /// The refused op, with its buffer.
    pub op: UringOp,
    /// Why.
    pub reason: SubmitErrorReason,
}

/// Why an op was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubmitErrorReason {
    /// The reaper thread has stopped (after a fatal io_uring error).
    #[error("the engine has stopped")]
    Stopped,
    /// The buffer is longer than an SQE's 32-bit length.
    #[error("the buffer is longer than 4 GiB - 1")]
    TooLarge,
    /// The offset does not fit in a signed 64-bit file offset.
    #[error("the offset does not fit in off_t")]
    BadOffset,
}

/// The buckets of [`UringStats::batch_hist`]: batch sizes 1, 2–3, 4–7, ..., 64–127, ≥ 128.
pub const BATCH_BUCKETS: usize = 8;

/// What an engine did, returned by [`UringEngine::shutdown`] (and read live by
/// [`UringEngine::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UringStats {
    /// Ops accepted by [`UringEngine::submit`].
    pub submitted: u64,
    /// Ops completed (equal to `submitted` after shutdown).
    pub completed: u64,
    /// Of those, completions with an error.
    pub failed: u64,
    /// Batches of I/O CQEs reaped from the ring: each is one wake-up of the reaper that found
    /// completions, and one call of a [`UringEngine::new_batched`] callback.
    pub batches: u64,
    /// I/O CQEs reaped in those batches (not counting the engine's own eventfd poll, nor ops
    /// failed without reaching the ring after a fatal error).
    pub cqes: u64,
    /// The largest batch.
    pub max_batch: u64,
    /// Batches by size: bucket `i` counts sizes `2^i ..= 2^(i+1) - 1`, the last one everything
    /// from 128 up.
    pub batch_hist: [u64; BATCH_BUCKETS],
    /// Reaper wake-ups asked for by submitters: one per [`UringEngine::submit`], one per
    /// [`UringEngine::ring_doorbell`] that found deferred ops (an eventfd `write(2)` unless one
    /// was already pending).
    pub doorbells: u64,
}

impl UringStats {
    /// CQEs per batch (0 before the first batch).
    pub fn mean_batch(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            self.cqes as f64 / self.batches as f64
        }
    }

    /// The histogram bucket of a batch of `n` (≥ 1) CQEs.
    pub fn bucket(n: usize) -> usize {
        (usize::BITS - 1 - n.max(1).leading_zeros()).min(BATCH_BUCKETS as u32 - 1) as usize
    }
}

impl fmt::Display for UringStats {
    /// `4096 CQEs in 1201 batches (mean 3.4, max 17)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} CQEs in {} batches (mean {:.1}, max {})",
            self.cqes,
            self.batches,
            self.mean_batch(),
            self.max_batch
        )
    }
}

type Callback = Box<dyn Fn(UringCompletion) + Send + Sync + 'static>;
type BatchCallback = Box<dyn Fn(Vec<UringCompletion>) + Send + Sync + 'static>;

/// How the reaper hands completions over.
enum Deliver {
    /// One call per completion ([`UringEngine::new`]); a panic loses only its own completion.
    Each(Callback),
    /// One call per reaped batch ([`UringEngine::new_batched`]).
    Batch(BatchCallback),
}
type PanicPayload = Box<dyn Any + Send + 'static>;

/// The largest queue depth: the ring has `entries + 1` SQEs, rounded up to a power of two, and the
/// kernel allows at most 32768 (`IORING_MAX_ENTRIES`).
pub const MAX_ENTRIES: u32 = 32767;

/// `user_data` of the eventfd poll; I/O ops use their slab index.
pub(super) const WAKE_TOKEN: u64 = u64::MAX;

enum Msg {
    Op {
        token: u64,
        op: UringOp,
        flags: RwFlags,
    },
    Shutdown,
}

/// State shared between the handle and the reaper.
struct Shared {
    /// Accepted ops whose callback has not returned yet.
    in_flight: AtomicUsize,
    submitted: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    batches: AtomicU64,
    cqes: AtomicU64,
    max_batch: AtomicU64,
    batch_hist: [AtomicU64; BATCH_BUCKETS],
    /// Set by the submitter that writes the eventfd, cleared by the reaper after reading it:
    /// submitters skip the `write(2)` while a wake-up is already pending.
    wake_pending: AtomicBool,
    /// Ops were queued by [`UringEngine::submit_deferred`] since the last
    /// [`UringEngine::ring_doorbell`].
    doorbell_owed: AtomicBool,
    /// Eventfd wake-ups asked for (each submission's, or each doorbell's), for [`UringStats`].
    doorbells: AtomicU64,
    /// `true` while the reaper accepts ops. Submitters hold it shared across their send; the
    /// reaper closes it (exclusively) before its last drain of the channel, so no accepted op can
    /// be left in the channel when the reaper exits.
    gate: RwLock<bool>,
    idle_lock: Mutex<()>,
    idle: Condvar,
}

/// An asynchronous I/O engine for one [`BackingFile`]: a ring of `entries` SQEs and one reaper
/// thread that calls the completion callback for each CQE (or for each batch of CQEs), in completion order. See the
/// [module documentation](self) for the design.
///
/// `Send + Sync`: any thread may [`submit`](UringEngine::submit). Dropping the engine is
/// [`shutdown`](UringEngine::shutdown) without the stats.
pub struct UringEngine {
    tx: Sender<Msg>,
    wake: Arc<OwnedFd>,
    shared: Arc<Shared>,
    file: Arc<BackingFile>,
    rw_flags: RwFlags,
    entries: u32,
    reaper: Option<JoinHandle<Option<PanicPayload>>>,
    reaper_id: ThreadId,
}

impl fmt::Debug for UringEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringEngine")
            .field("path", &self.file.path())
            .field("entries", &self.entries)
            .field("rw_flags", &self.rw_flags)
            .field("in_flight", &self.in_flight())
            .field("submitted", &self.shared.submitted.load(Ordering::Relaxed))
            .field("completed", &self.shared.completed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn wake_reaper(shared: &Shared, wake: &OwnedFd) {
    if shared.wake_pending.swap(true, Ordering::AcqRel) {
        // A wake-up is pending: the reaper will clear the flag (synchronising with this swap)
        // and then drain the channel, which holds our message.
        return;
    }
    signal_eventfd(wake, "io_uring engine");
}

/// Adds 1 to eventfd `fd` (a wake-up of whoever polls it); `who` names the writer in an error.
/// A saturated counter (`EAGAIN`) is fine: a wake-up is pending anyway.
pub(super) fn signal_eventfd(fd: &OwnedFd, who: &str) {
    let one: u64 = 1;
    loop {
        // SAFETY: writes 8 bytes from a live u64 to an eventfd we own.
        let n = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        if n == 8 {
            return;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return,
            _ => {
                tracing::error!("{who}: cannot write its eventfd: {e}");
                return;
            }
        }
    }
}

/// The ring of an engine of depth `entries` for `file`; the error says why io_uring is
/// unavailable where the errno tells.
pub(super) fn setup_ring(file: &BackingFile, entries: u32) -> io::Result<IoUring> {
    // One more SQE than the depth, for the eventfd poll; the CQ is twice the SQ, so at most
    // entries + 1 outstanding requests can never overflow it.
    IoUring::new(entries + 1).map_err(|e| {
        let hint = match e.raw_os_error() {
            Some(libc::ENOSYS) => " (this kernel has no io_uring)",
            Some(libc::EPERM) => {
                " (io_uring is disabled: see /proc/sys/kernel/io_uring_disabled, or a seccomp filter)"
            }
            Some(libc::ENOMEM) => " (locked-memory limit too low? see ulimit -l)",
            _ => "",
        };
        io::Error::new(
            e.kind(),
            format!(
                "cannot set up an io_uring of {} entries for {}: {e}{hint}",
                entries + 1,
                file.path().display()
            ),
        )
    })
}

/// The SQE of `op` on `fd` with `flags` in `rw_flags` (no `user_data` yet).
pub(super) fn build_sqe(fd: types::Fd, op: &UringOp, flags: RwFlags) -> squeue::Entry {
    match op {
        UringOp::Read { buf, off } => {
            opcode::Read::new(fd, buf.as_ptr().cast_mut(), buf.len() as u32)
                .offset(*off)
                .rw_flags(flags.bits() as i32)
                .build()
        }
        UringOp::Write { buf, off } => opcode::Write::new(fd, buf.as_ptr(), buf.len() as u32)
            .offset(*off)
            .rw_flags(flags.bits() as i32)
            .build(),
        UringOp::Fsync => opcode::Fsync::new(fd)
            .flags(types::FsyncFlags::DATASYNC)
            .build(),
    }
}

/// The engine's wake-up eventfd (non-blocking: a saturated counter must not block a submitter).
pub(super) fn new_eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if efd < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("io_uring engine: cannot create its eventfd: {e}"),
        ));
    }
    // SAFETY: `efd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(efd) })
}

impl UringEngine {
    /// Sets up a ring for `file` with a queue depth of `entries` (1 to [`MAX_ENTRIES`]: at most
    /// that many ops in the kernel at once), and starts the reaper thread, which calls
    /// `on_complete` for each completion, in completion order. `rw_flags` go into every read and write SQE (see
    /// [`UringEngine::submit_with_flags`] to choose per op).
    ///
    /// Fails when io_uring is unavailable (`ENOSYS`: a kernel without it, kind `Unsupported`;
    /// `EPERM`: `kernel.io_uring_disabled` or a seccomp filter, kind `PermissionDenied`), with a
    /// message saying so.
    pub fn new(
        file: Arc<BackingFile>,
        entries: u32,
        rw_flags: RwFlags,
        on_complete: impl Fn(UringCompletion) + Send + Sync + 'static,
    ) -> io::Result<UringEngine> {
        Self::start(
            file,
            entries,
            rw_flags,
            Deliver::Each(Box::new(on_complete)),
        )
    }

    /// [`UringEngine::new`] with one callback per *batch*: every CQE the reaper found in the ring
    /// at one wake-up, in completion order (see the [module documentation](self#batches)). Every
    /// accepted op is in exactly one batch. A panicking callback loses nothing either: the ops of
    /// its batch count as completed (the callback owned them), and the panic is re-raised by
    /// [`UringEngine::shutdown`].
    pub fn new_batched(
        file: Arc<BackingFile>,
        entries: u32,
        rw_flags: RwFlags,
        on_batch: impl Fn(Vec<UringCompletion>) + Send + Sync + 'static,
    ) -> io::Result<UringEngine> {
        Self::start(file, entries, rw_flags, Deliver::Batch(Box::new(on_batch)))
    }

    fn start(
        file: Arc<BackingFile>,
        entries: u32,
        rw_flags: RwFlags,
        deliver: Deliver,
    ) -> io::Result<UringEngine> {
        if entries == 0 || entries > MAX_ENTRIES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "io_uring engine for {}: entries must be 1..={MAX_ENTRIES}, not {entries}",
                    file.path().display()
                ),
            ));
        }
        let ring = setup_ring(&file, entries)?;
        let wake = Arc::new(new_eventfd()?);
        let shared = Arc::new(Shared {
            in_flight: AtomicUsize::new(0),
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            cqes: AtomicU64::new(0),
            max_batch: AtomicU64::new(0),
            batch_hist: Default::default(),
            wake_pending: AtomicBool::new(false),
            doorbell_owed: AtomicBool::new(false),
            doorbells: AtomicU64::new(0),
            gate: RwLock::new(true),
            idle_lock: Mutex::new(()),
            idle: Condvar::new(),
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let reaper = Reaper {
            ring,
            rx,
            wake: Arc::clone(&wake),
            fd: types::Fd(file.as_raw_fd()),
            file: Arc::clone(&file),
            shared: Arc::clone(&shared),
            deliver,
            slab: Vec::new(),
            free: Vec::new(),
            queued: VecDeque::new(),
            depth: entries as usize,
            in_ring: 0,
            wake_armed: false,
            shutting_down: false,
            cqes: Vec::new(),
            panic: None,
        };
        let handle = thread::Builder::new()
            .name("biosim-uring".into())
            .spawn(move || reaper.run())
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("io_uring engine: cannot start its reaper thread: {e}"),
                )
            })?;
        let reaper_id = handle.thread().id();
        Ok(UringEngine {
            tx,
            wake,
            shared,
            file,
            rw_flags,
            entries,
            reaper: Some(handle),
            reaper_id,
        })
    }

    /// The backing file.
    pub fn file(&self) -> &Arc<BackingFile> {
        &self.file
    }

    /// The flags every read and write gets from [`UringEngine::submit`].
    pub fn rw_flags(&self) -> RwFlags {
        self.rw_flags
    }

    /// The queue depth: the most ops in the kernel at once.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Queues one op with the engine's flags and returns at once; its completion comes later
    /// through the callback, on the reaper thread. May be called from the callback itself (a
    /// resubmission, as `lo_rw_aio_do_completion()` requeues an `-EAGAIN`). Ops beyond the queue
    /// depth wait in the engine (never dropped). Refused, with the op handed back, only if the
    /// engine has stopped or the op cannot be expressed as an SQE.
    pub fn submit(&self, token: u64, op: UringOp) -> Result<(), SubmitError> {
        self.submit_with_flags(token, op, self.rw_flags)
    }

    /// [`UringEngine::submit`] with this op's own `RWF_*` flags (ignored for
    /// [`UringOp::Fsync`]): e.g. `NOWAIT` for the loop driver's first, non-blocking attempt.
    pub fn submit_with_flags(
        &self,
        token: u64,
        op: UringOp,
        flags: RwFlags,
    ) -> Result<(), SubmitError> {
        self.queue(token, op, flags)?;
        self.shared.doorbells.fetch_add(1, Ordering::Relaxed);
        wake_reaper(&self.shared, &self.wake);
        Ok(())
    }

    /// [`UringEngine::submit_with_flags`] without waking the reaper: the op waits in the engine
    /// until [`UringEngine::ring_doorbell`] (or the reaper's next wake-up for a completion), so
    /// a burst of submissions costs one wake-up, as an NVMe driver writes its SQ tail doorbell
    /// once for the last request of a batch (`bd->last`, `->commit_rqs()`) and an io_uring
    /// application submits a batch of SQEs with one `io_uring_enter()`. The caller must ring the
    /// doorbell before it waits for these ops.
    pub fn submit_deferred(
        &self,
        token: u64,
        op: UringOp,
        flags: RwFlags,
    ) -> Result<(), SubmitError> {
        self.queue(token, op, flags)?;
        self.shared.doorbell_owed.store(true, Ordering::Release);
        Ok(())
    }

    /// Wakes the reaper for the ops [`UringEngine::submit_deferred`] queued since the last
    /// doorbell; nothing if there are none. Returns whether it rang.
    pub fn ring_doorbell(&self) -> bool {
        if !self.shared.doorbell_owed.load(Ordering::Acquire)
            || !self.shared.doorbell_owed.swap(false, Ordering::AcqRel)
        {
            return false;
        }
        if cfg!(feature = "bug-uring-doorbell-lost") {
            // The buggy twin: the doorbell is cleared but never rung.
            return true;
        }
        self.shared.doorbells.fetch_add(1, Ordering::Relaxed);
        wake_reaper(&self.shared, &self.wake);
        true
    }

    /// Queues an op for the reaper (counted as submitted), without waking it.
    fn queue(&self, token: u64, op: UringOp, flags: RwFlags) -> Result<(), SubmitError> {
        let refuse = |op, reason| Err(SubmitError { token, op, reason });
        match &op {
            UringOp::Read { buf, off } | UringOp::Write { buf, off } => {
                if u32::try_from(buf.len()).is_err() {
                    return refuse(op, SubmitErrorReason::TooLarge);
                }
                if i64::try_from(*off).is_err() {
                    return refuse(op, SubmitErrorReason::BadOffset);
                }
            }
            UringOp::Fsync => {}
        }
        let gate = self.shared.gate.read();
        if !*gate {
            drop(gate);
            return refuse(op, SubmitErrorReason::Stopped);
        }
        // Counted before the reaper can see it, so `completed` never runs ahead of `submitted`
        // and the in-flight count never goes below zero.
        self.shared.submitted.fetch_add(1, Ordering::AcqRel);
        self.shared.in_flight.fetch_add(1, Ordering::AcqRel);
        if let Err(crossbeam_channel::SendError(msg)) = self.tx.send(Msg::Op { token, op, flags }) {
            drop(gate);
            self.shared.submitted.fetch_sub(1, Ordering::AcqRel);
            self.finish_refused();
            let Msg::Op { op, .. } = msg else {
                unreachable!("we sent an Op")
            };
            return refuse(op, SubmitErrorReason::Stopped);
        }
        drop(gate);
        Ok(())
    }

    fn finish_refused(&self) {
        if self.shared.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _g = self.shared.idle_lock.lock();
            self.shared.idle.notify_all();
        }
    }

    /// Ops accepted whose completion callback has not returned yet.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }

    /// Blocks until every op accepted so far has completed (its callback has returned).
    ///
    /// # Panics
    ///
    /// If called from the completion callback (the reaper thread), which would wait for itself.
    pub fn wait_idle(&self) {
        assert_ne!(
            thread::current().id(),
            self.reaper_id,
            "UringEngine::wait_idle called from its own completion callback"
        );
        // Deferred submissions owe the reaper a wake-up; without it they would never complete.
        self.ring_doorbell();
        let mut g = self.shared.idle_lock.lock();
        while self.shared.in_flight.load(Ordering::Acquire) != 0 {
            if self.reaper.as_ref().is_none_or(|h| h.is_finished()) {
                break;
            }
            self.shared.idle.wait(&mut g);
        }
    }

    /// What the engine did so far (the batch counters are exact once the reaper is idle).
    pub fn stats(&self) -> UringStats {
        let sh = &self.shared;
        UringStats {
            submitted: sh.submitted.load(Ordering::Acquire),
            completed: sh.completed.load(Ordering::Acquire),
            failed: sh.failed.load(Ordering::Acquire),
            batches: sh.batches.load(Ordering::Acquire),
            cqes: sh.cqes.load(Ordering::Acquire),
            max_batch: sh.max_batch.load(Ordering::Acquire),
            batch_hist: std::array::from_fn(|i| sh.batch_hist[i].load(Ordering::Acquire)),
            doorbells: sh.doorbells.load(Ordering::Acquire),
        }
    }

    /// Tells the reaper to finish and waits for it: everything submitted completes (one callback
    /// each), then the thread exits and the ring is closed.
    fn stop(&mut self) -> Option<PanicPayload> {
        let handle = self.reaper.take()?;
        // If the reaper has already stopped, the send fails: nothing to tell it.
        let _ = self.tx.send(Msg::Shutdown);
        wake_reaper(&self.shared, &self.wake);
        if thread::current().id() == self.reaper_id {
            // Dropped from our own callback: the reaper finishes by itself; it cannot join itself.
            return None;
        }
        match handle.join() {
            Ok(callback_panic) => callback_panic,
            Err(reaper_panic) => Some(reaper_panic),
        }
    }

    /// Waits until everything submitted has completed (each op gets its one callback), stops the
    /// reaper thread and closes the ring. Returns what the engine did.
    ///
    /// # Panics
    ///
    /// Re-raises the first panic of a completion callback, after every other op has completed.
    pub fn shutdown(mut self) -> UringStats {
        let panic = self.stop();
        let stats = self.stats();
        if let Some(payload) = panic {
            panic::resume_unwind(payload);
        }
        stats
    }
}

impl Drop for UringEngine {
    fn drop(&mut self) {
        if self.stop().is_some() {
            tracing::error!(
                path = %self.file.path().display(),
                "io_uring engine: a completion callback panicked (dropped without shutdown())"
            );
        }
    }
}

/// An op in the kernel: its buffer must stay put until the CQE arrives.
struct InFlight {
    token: u64,
    op: UringOp,
}

/// An op accepted but not yet in the ring.
struct Queued {
    token: u64,
    op: UringOp,
    flags: RwFlags,
}

/// The reaper thread's state: it alone touches the ring.
struct Reaper {
    ring: IoUring,
    rx: Receiver<Msg>,
    wake: Arc<OwnedFd>,
    fd: types::Fd,
    /// Keeps the descriptor in `fd` open while ops are in flight.
    file: Arc<BackingFile>,
    shared: Arc<Shared>,
    deliver: Deliver,
    /// Ops in the kernel, indexed by `user_data`.
    slab: Vec<Option<InFlight>>,
    free: Vec<usize>,
    queued: VecDeque<Queued>,
    depth: usize,
    /// I/O ops in the ring (not counting the eventfd poll).
    in_ring: usize,
    wake_armed: bool,
    shutting_down: bool,
    cqes: Vec<(u64, i32)>,
    panic: Option<PanicPayload>,
}

impl Reaper {
    fn run(mut self) -> Option<PanicPayload> {
        if let Err(e) = self.event_loop() {
            tracing::error!(
                path = %self.file.path().display(),
                "io_uring engine: fatal ring error, failing every outstanding op: {e}"
            );
            self.fail_everything(&e);
        }
        self.panic.take()
    }

    fn event_loop(&mut self) -> io::Result<()> {
        loop {
            self.drain_channel();
            self.fill_ring()?;
            if self.shutting_down && self.queued.is_empty() && self.in_ring == 0 {
                // Close the gate, then look once more: an op sent just before it closed (say,
                // resubmitted by a callback) is still owed its completion.
                self.close_gate();
                self.drain_channel();
                if self.queued.is_empty() {
                    return Ok(());
                }
                continue;
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) => match e.raw_os_error() {
                    // A signal, or the kernel is short of resources / has CQEs to flush first:
                    // reap what there is and enter again.
                    Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY) => {
                        if self.ring.completion().is_empty() {
                            thread::sleep(std::time::Duration::from_millis(1));
                        }
                    }
                    _ => return Err(e),
                },
            }
            self.reap();
        }
    }

    fn close_gate(&self) {
        *self.shared.gate.write() = false;
    }

    fn drain_channel(&mut self) {
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                Msg::Op { token, op, flags } => self.queued.push_back(Queued { token, op, flags }),
                Msg::Shutdown => self.shutting_down = true,
            }
        }
    }

    /// Pushes the eventfd poll (if not armed) and queued ops (up to the depth) into the SQ.
    fn fill_ring(&mut self) -> io::Result<()> {
        if !self.wake_armed {
            let sqe = opcode::PollAdd::new(types::Fd(self.wake.as_raw_fd()), libc::POLLIN as u32)
                .build()
                .user_data(WAKE_TOKEN);
            // SAFETY: a poll SQE references no memory; the eventfd stays open (we hold an Arc,
            // and the kernel holds its own file reference while polling).
            if !unsafe { self.push(&sqe)? } {
                return Ok(());
            }
            self.wake_armed = true;
        }
        while self.in_ring < self.depth {
            let Some(q) = self.queued.pop_front() else {
                break;
            };
            let slot = self.free.pop().unwrap_or_else(|| {
                self.slab.push(None);
                self.slab.len() - 1
            });
            let sqe = build_sqe(self.fd, &q.op, q.flags).user_data(slot as u64);
            // The op (and its heap buffer, whose address the SQE holds) moves into the slab
            // before the SQE is pushed; an AlignedBuf's heap block does not move with it.
            self.slab[slot] = Some(InFlight {
                token: q.token,
                op: q.op,
            });
            // SAFETY: the SQE points into the buffer now owned by `self.slab[slot]`, which stays
            // there, untouched, until the CQE with this user_data is reaped (or, if the ring
            // fails, is leaked); the backing file's fd is kept open by `self.file`.
            match unsafe { self.push(&sqe) } {
                Ok(true) => self.in_ring += 1,
                Ok(false) => {
                    // SQ full and the kernel would not take more now: put it back, in order.
                    let InFlight { token, op } = self.slab[slot].take().expect("just stored");
                    self.free.push(slot);
                    self.queued.push_front(Queued {
                        token,
                        op,
                        flags: q.flags,
                    });
                    break;
                }
                Err(e) => {
                    let InFlight { token, op } = self.slab[slot].take().expect("just stored");
                    self.free.push(slot);
                    self.queued.push_front(Queued {
                        token,
                        op,
                        flags: q.flags,
                    });
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Pushes one SQE; if the SQ is full, submits and retries. `Ok(false)` if the kernel cannot
    /// take more right now (the caller waits for completions first).
    ///
    /// # Safety
    ///
    /// Whatever memory `sqe` references must stay valid until its CQE is reaped.
    unsafe fn push(&mut self, sqe: &squeue::Entry) -> io::Result<bool> {
        loop {
            // SAFETY: forwarded from the caller.
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return Ok(true);
            }
            match self.ring.submit() {
                Ok(0) => return Ok(false),
                Ok(_) => {}
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EAGAIN) | Some(libc::EBUSY) => return Ok(false),
                    _ => return Err(e),
                },
            }
        }
    }

    fn reap(&mut self) {
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.clear();
        cqes.extend(
            self.ring
                .completion()
                .map(|c: cqueue::Entry| (c.user_data(), c.result())),
        );
        let mut batch = Vec::with_capacity(cqes.len());
        for &(user_data, res) in &cqes {
            if user_data == WAKE_TOKEN {
                self.wake_armed = false;
                self.consume_wake();
                continue;
            }
            let slot = user_data as usize;
            let Some(InFlight { token, op }) = self.slab.get_mut(slot).and_then(Option::take)
            else {
                tracing::error!("io_uring engine: CQE for unknown user_data {user_data}");
                continue;
            };
            self.free.push(slot);
            self.in_ring -= 1;
            let result = if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else {
                Ok(res as usize)
            };
            batch.push(UringCompletion { token, result, op });
        }
        self.cqes = cqes;
        if !batch.is_empty() {
            let sh = &self.shared;
            let n = batch.len();
            sh.batches.fetch_add(1, Ordering::Relaxed);
            sh.cqes.fetch_add(n as u64, Ordering::Relaxed);
            sh.max_batch.fetch_max(n as u64, Ordering::Relaxed);
            sh.batch_hist[UringStats::bucket(n)].fetch_add(1, Ordering::Relaxed);
            self.complete(batch);
        }
    }

    /// Resets the eventfd, then clears `wake_pending`; the channel is drained after both.
    fn consume_wake(&mut self) {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our eventfd (non-blocking: EAGAIN if 0).
        let _ = unsafe { libc::read(self.wake.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        self.shared.wake_pending.swap(false, Ordering::AcqRel);
    }

    /// Hands a batch of completions to the callback(s) and accounts for them.
    fn complete(&mut self, batch: Vec<UringCompletion>) {
        let n = batch.len();
        let failed = batch.iter().filter(|c| c.result.is_err()).count();
        self.shared
            .failed
            .fetch_add(failed as u64, Ordering::Relaxed);
        let mut panicked = |payload| {
            tracing::error!("io_uring engine: a completion callback panicked");
            self.panic.get_or_insert(payload);
        };
        match &self.deliver {
            Deliver::Each(on_complete) => {
                for c in batch {
                    if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| on_complete(c))) {
                        panicked(p);
                    }
                }
            }
            Deliver::Batch(on_batch) => {
                if let Err(p) = panic::catch_unwind(AssertUnwindSafe(|| on_batch(batch))) {
                    panicked(p);
                }
            }
        }
        self.shared.completed.fetch_add(n as u64, Ordering::AcqRel);
        if self.shared.in_flight.fetch_sub(n, Ordering::AcqRel) == n {
            let _g = self.shared.idle_lock.lock();
            self.shared.idle.notify_all();
        }
    }

    /// After a fatal ring error: every op still owed a completion gets one, with the error. Ops
    /// still in the kernel may yet be written to, so their buffers are leaked (never reused) and
    /// an empty buffer is handed back in their place.
    fn fail_everything(&mut self, e: &io::Error) {
        let err = || io::Error::new(e.kind(), format!("io_uring engine stopped: {e}"));
        let mut failed = Vec::new();
        for slot in 0..self.slab.len() {
            if let Some(InFlight { token, op }) = self.slab[slot].take() {
                let op = match op {
                    UringOp::Read { buf, off } => {
                        std::mem::forget(buf);
                        UringOp::Read {
                            buf: AlignedBuf::new(0),
                            off,
                        }
                    }
                    UringOp::Write { buf, off } => {
                        std::mem::forget(buf);
                        UringOp::Write {
                            buf: AlignedBuf::new(0),
                            off,
                        }
                    }
                    UringOp::Fsync => UringOp::Fsync,
                };
                failed.push(UringCompletion {
                    token,
                    result: Err(err()),
                    op,
                });
            }
        }
        // Completed before the gate closes, as a callback may resubmit (it is then failed below).
        if !failed.is_empty() {
            self.complete(std::mem::take(&mut failed));
        }
        self.in_ring = 0;
        // Stop accepting (submitters are refused from here on), then fail what was accepted.
        self.close_gate();
        self.drain_channel();
        while let Some(Queued { token, op, .. }) = self.queued.pop_front() {
            failed.push(UringCompletion {
                token,
                result: Err(err()),
                op,
            });
        }
        if !failed.is_empty() {
            self.complete(failed);
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if self.in_ring > 0 {
            // Only on a bug (a panic in the reaper itself): the kernel may still write into these
            // buffers, so they must never be freed.
            for entry in self.slab.drain(..).flatten() {
                std::mem::forget(entry);
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn engine_is_send_sync_debug() {
        fn check<T: Send + Sync + fmt::Debug>() {}
        check::<UringEngine>();
        check::<UringCompletion>();
        check::<SubmitError>();
    }

    /// A buffered 1 MiB file in the temp dir and its 256 4 KiB blocks, each filled with its own
    /// number.
    fn file() -> (tempfile::TempDir, Arc<BackingFile>) {
        let dir = tempfile::tempdir().unwrap();
        let f = BackingFile::open(
            &dir.path().join("batches.img"),
            &crate::dev::backing::OpenOptions {
                direct: false,
                read_only: false,
                create_size: Some(1 << 20),
            },
        )
        .unwrap();
        for b in 0..256u64 {
            f.write_all_at(&[b as u8; 4096], b * 4096, RwFlags::empty())
                .unwrap();
        }
        (dir, Arc::new(f))
    }

    /// io_uring cannot be used here (not built in, forbidden by `io_uring_disabled`, or no
    /// locked memory for a ring): a test skips with a message. `setup_ring()` rebuilds its errors
    /// with a message, so an `ENOSYS` may arrive as `ErrorKind::Unsupported` only.
    pub(in crate::dev) fn unavailable(e: &io::Error) -> bool {
        matches!(
            e.raw_os_error(),
            Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::ENOMEM)
        ) || matches!(
            // setup_ring() rewraps the OS error with its context, keeping only the kind:
            // ENOSYS, EPERM (io_uring_disabled, a seccomp filter) and ENOMEM (locked memory).
            e.kind(),
            io::ErrorKind::Unsupported
                | io::ErrorKind::PermissionDenied
                | io::ErrorKind::OutOfMemory
        )
    }

    /// Every op lands in exactly one batch, with its own data; the stats count the batches, the
    /// CQEs, the largest batch and the histogram consistently with what the callback saw.
    #[test]
    fn batches_hold_every_completion_once_and_the_stats_agree() {
        let (_d, f) = file();
        // Per batch: (token, first byte read).
        type Batches = Arc<Mutex<Vec<Vec<(u64, u8)>>>>;
        let seen: Batches = Arc::default();
        let s = Arc::clone(&seen);
        let eng = match UringEngine::new_batched(Arc::clone(&f), 16, RwFlags::empty(), move |b| {
            let batch = b
                .into_iter()
                .map(|c| {
                    assert_eq!(c.result.as_ref().ok(), Some(&4096), "token {}", c.token);
                    (c.token, c.op.buf().expect("a read's buffer")[0])
                })
                .collect();
            s.lock().push(batch);
        }) {
            Ok(e) => e,
            Err(e) if unavailable(&e) => {
                eprintln!("skipped: io_uring unavailable: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        for t in 0..100u64 {
            let off = (t * 37 % 256) * 4096;
            let op = UringOp::Read {
                buf: AlignedBuf::new(4096),
                off,
            };
            eng.submit(t, op).unwrap();
        }
        let stats = eng.shutdown();
        let seen = seen.lock().clone();
        let mut tokens: Vec<u64> = seen.iter().flatten().map(|&(t, _)| t).collect();
        tokens.sort_unstable();
        assert_eq!(tokens, (0..100).collect::<Vec<_>>(), "each op once");
        for &(t, byte) in seen.iter().flatten() {
            assert_eq!(byte, (t * 37 % 256) as u8, "token {t} read its own block");
        }
        assert!(seen.iter().all(|b| !b.is_empty()), "no empty batch");
        assert_eq!(stats.batches, seen.len() as u64);
        assert_eq!(
            (stats.cqes, stats.submitted, stats.completed),
            (100, 100, 100)
        );
        let max = seen.iter().map(Vec::len).max().unwrap() as u64;
        assert_eq!(stats.max_batch, max);
        assert!(max <= 16, "never more than the depth in one batch");
        assert_eq!(stats.batch_hist.iter().sum::<u64>(), stats.batches);
        let mut hist = [0u64; BATCH_BUCKETS];
        for b in &seen {
            hist[UringStats::bucket(b.len())] += 1;
        }
        assert_eq!(stats.batch_hist, hist);
        assert!((stats.mean_batch() - 100.0 / seen.len() as f64).abs() < 1e-9);
    }

    /// Deferred submissions wait in the engine until the doorbell: with nothing else in flight
    /// the reaper is never woken, so none completes; one `ring_doorbell()` then hands the whole
    /// burst over (one doorbell, not eight) and every op completes with its own data. A second
    /// ring with nothing owed does nothing. The buggy twin loses the doorbell and is caught.
    #[test]
    #[cfg_attr(
        feature = "bug-uring-doorbell-lost",
        should_panic(expected = "the doorbell hands the burst over")
    )]
    fn deferred_submissions_wait_for_one_doorbell_then_all_complete() {
        let (_d, f) = file();
        let seen: Arc<Mutex<Vec<(u64, u8)>>> = Arc::default();
        let s = Arc::clone(&seen);
        let Some(eng) = engine_or_skip(&f, move |c| {
            assert_eq!(c.result.as_ref().ok(), Some(&4096), "token {}", c.token);
            s.lock()
                .push((c.token, c.op.buf().expect("a read's buffer")[0]));
        }) else {
            return;
        };
        assert!(!eng.ring_doorbell(), "nothing owed yet");
        // One ordinary op first, so the reaper has started and gone back to sleep in the ring.
        let warm = UringOp::Read {
            buf: AlignedBuf::new(4096),
            off: 0,
        };
        eng.submit(100, warm).unwrap();
        eng.wait_idle();
        std::thread::sleep(std::time::Duration::from_millis(20));
        seen.lock().clear();
        for t in 0..8u64 {
            let op = UringOp::Read {
                buf: AlignedBuf::new(4096),
                off: (t + 10) * 4096,
            };
            eng.submit_deferred(t, op, RwFlags::empty()).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert_eq!(eng.stats().submitted, 9);
        assert_eq!(eng.stats().completed, 1, "no doorbell, no wake-up, no I/O");
        assert!(eng.ring_doorbell());
        assert!(!eng.ring_doorbell(), "rung once for the burst");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while eng.stats().completed < 9 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            eng.stats().completed,
            9,
            "the doorbell hands the burst over"
        );
        let st = eng.shutdown();
        assert_eq!(st.doorbells, 2, "the ordinary submit's and the burst's");
        let mut got = seen.lock().clone();
        got.sort_unstable();
        let want: Vec<(u64, u8)> = (0..8).map(|t| (t, (t + 10) as u8)).collect();
        assert_eq!(got, want, "each op read its own block");
    }

    /// A 16-entry engine over `f` delivering each completion to `cb`, or `None` (said why) when
    /// io_uring is unavailable here.
    fn engine_or_skip(
        f: &Arc<BackingFile>,
        cb: impl Fn(UringCompletion) + Send + Sync + 'static,
    ) -> Option<UringEngine> {
        match UringEngine::new(Arc::clone(f), 16, RwFlags::empty(), cb) {
            Ok(e) => Some(e),
            Err(e) if unavailable(&e) => {
                eprintln!("skipped: io_uring unavailable: {e}");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// `wait_idle()` rings a doorbell still owed, so deferred submissions followed by a wait
    /// complete instead of waiting forever. (Not under the doorbell twin: there it would hang.)
    #[test]
    #[cfg(not(feature = "bug-uring-doorbell-lost"))]
    fn wait_idle_rings_an_owed_doorbell() {
        let (_d, f) = file();
        let Some(eng) = engine_or_skip(&f, |_| {}) else {
            return;
        };
        for t in 0..4u64 {
            let op = UringOp::Read {
                buf: AlignedBuf::new(4096),
                off: t * 4096,
            };
            eng.submit_deferred(t, op, RwFlags::empty()).unwrap();
        }
        eng.wait_idle();
        assert_eq!(eng.stats().completed, 4);
        assert!(!eng.ring_doorbell(), "wait_idle rang it");
        assert_eq!(eng.shutdown().doorbells, 1);
    }

    #[test]
    fn batch_buckets_are_powers_of_two() {
        let b: Vec<usize> = [1, 2, 3, 4, 7, 8, 127, 128, 100_000]
            .into_iter()
            .map(UringStats::bucket)
            .collect();
        assert_eq!(b, [0, 1, 1, 2, 2, 3, 6, 7, 7]);
        assert_eq!(UringStats::default().mean_batch(), 0.0);
    }

    /// A panicking batch callback loses nothing: its ops count as completed, the later batches
    /// are still delivered, and shutdown re-raises the panic.
    #[test]
    fn a_panicking_batch_callback_is_reraised_after_everything_completed() {
        let (_d, f) = file();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&calls);
        let eng = match UringEngine::new_batched(Arc::clone(&f), 4, RwFlags::empty(), move |_| {
            if c.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("first batch");
            }
        }) {
            Ok(e) => e,
            Err(e) if unavailable(&e) => {
                eprintln!("skipped: io_uring unavailable: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        for t in 0..20 {
            let op = UringOp::Read {
                buf: AlignedBuf::new(4096),
                off: 0,
            };
            eng.submit(t, op).unwrap();
        }
        eng.wait_idle();
        assert_eq!(eng.in_flight(), 0);
        assert_eq!(eng.stats().completed, 20);
        let r = panic::catch_unwind(AssertUnwindSafe(|| eng.shutdown()));
        assert!(r.is_err(), "the callback's panic is re-raised");
        assert!(
            calls.load(Ordering::SeqCst) >= 2,
            "later batches still delivered"
        );
    }

    #[test]
    fn op_accessors() {
        let op = UringOp::Read {
            buf: AlignedBuf::new(512),
            off: 0,
        };
        assert_eq!(op.name(), "read");
        assert_eq!(op.buf().map(|b| b.len()), Some(512));
        assert_eq!(op.into_buf().map(|b| b.len()), Some(512));
        assert!(UringOp::Fsync.buf().is_none());
        assert_eq!(UringOp::Fsync.name(), "fsync");
    }
}
