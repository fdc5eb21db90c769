//! One io_uring per simulated CPU, submitted to and reaped by that CPU's own thread: the loop
//! driver's `lo_rw_aio()` (drivers/block/loop.c) issuing the kiocb on the submitting CPU, and the
//! completion interrupt (`lo_rw_aio_complete()` via `blk_mq_complete_request()`) raised on that
//! same CPU, without a thread hand-off in between.
//!
//! ## Design
//!
//! A [`CpuRing`] belongs to one simulated CPU. Submissions queue their op ([`CpuRing::submit`]);
//! when the CPU's thread parks it runs the ring's [`IdleWait`]: it moves the queued ops into the SQ
//! and makes **one** `io_uring_enter(to_submit = n, min_complete = 1, GETEVENTS | EXT_ARG)` with
//! the park's timeout, so the doorbell and the sleep are a single system call, as a raw io_uring
//! application does (`io_uring_submit_and_wait_timeout()`). An `O_DIRECT` read completes through
//! task work to the task that submitted it, which is exactly the thread asleep in the ring.
//!
//! The CPU's ordinary wake-ups (a raised IRQ, queued work, a mailbox message) must reach a thread
//! asleep in the ring: the ring always keeps an `IORING_OP_POLL_ADD` armed on an `eventfd`, which
//! [`IdleWait::wake`] writes (the runtime calls it only while the thread is in the wait, see
//! `runtime::threaded::idle_wait`). A submission from another thread than the CPU's writes it too.
//!
//! The CQEs reaped by one wait form a *batch*; [`IdleWait::deliver`] hands it to the batch callback
//! after the thread has left the ring (for the loop backing: one `loop-aio` interrupt on this CPU),
//! counted in the set's [`UringStats`] as [`crate::dev::uring::UringEngine`] counts its batches.
//!
//! When the runtime stops, each CPU's thread detaches from its ring ([`IdleWait::detach`]): the
//! ring refuses new submissions ([`SubmitErrorReason::Stopped`], the op handed back) and drains
//! what it had accepted. An `io_uring_enter()` that keeps failing with an error other than the
//! transient ones is retried [`MAX_ENTER_FAILURES`] times with a growing pause, then the ring
//! stops: its queued ops complete with `EIO`, new ones are refused, and [`CpuRings::error`] says
//! why (the bench ends the run with that message).
//!
//! What it does not do: it needs `IORING_FEAT_EXT_ARG` (Linux 5.11) for the timed wait, and the
//! set fails to start without it (the caller falls back to the reaper engine). Ops submitted to a
//! CPU's ring complete only when that CPU's thread parks (as deferred doorbells do today).

use super::backing::{BackingFile, RwFlags};
use super::uring::{
    build_sqe, new_eventfd, setup_ring, SubmitError, SubmitErrorReason, UringCompletion, UringOp,
    UringStats, BATCH_BUCKETS, WAKE_TOKEN,
};
use crate::runtime::threaded::IdleWait;
use io_uring::{opcode, types, IoUring};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::ThreadId;
use std::time::Duration;

/// Consecutive failures of `io_uring_enter()` (other than `ETIME`, `EINTR`, `EAGAIN`, `EBUSY`)
/// after which a ring gives up: its queued ops fail with `EIO` and it refuses new ones.
pub const MAX_ENTER_FAILURES: u32 = 6;

/// The pause after the `n`th `io_uring_enter()` failure in a row (from 1): 1, 2, 4, ... ms, at
/// most 64 ms.
fn enter_retry_pause(n: u32) -> Duration {
    Duration::from_millis(1 << n.saturating_sub(1).min(6))
}

/// The batch callback of a [`CpuRings`] set: every CQE one wait of one CPU reaped.
pub type RingBatchFn = Arc<dyn Fn(Vec<UringCompletion>) + Send + Sync>;

/// The counters of a [`CpuRings`] set (all its rings together).
#[derive(Default)]
struct Counters {
    in_flight: AtomicUsize,
    submitted: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    batches: AtomicU64,
    cqes: AtomicU64,
    max_batch: AtomicU64,
    batch_hist: [AtomicU64; BATCH_BUCKETS],
    /// `io_uring_enter()` calls that carried new SQEs, plus eventfd writes by foreign submitters.
    doorbells: AtomicU64,
    idle_lock: Mutex<()>,
    idle: Condvar,
}

/// An op accepted, not yet in the SQ.
struct Queued {
    token: u64,
    op: UringOp,
    flags: RwFlags,
}

/// What only the waiting thread touches (under [`CpuRing::ring`]).
struct RingState {
    ring: IoUring,
    /// Ops in the kernel, by `user_data`: their buffers stay put until the CQE.
    slab: Vec<Option<(u64, UringOp)>>,
    free: Vec<usize>,
    in_ring: usize,
    wake_armed: bool,
    /// The batch the last wait reaped, for [`IdleWait::deliver`].
    ready: Vec<UringCompletion>,
    /// `io_uring_enter()` failures in a row (see [`MAX_ENTER_FAILURES`]).
    enter_failures: u32,
}

/// One simulated CPU's io_uring (see the [module documentation](self)).
pub struct CpuRing {
    fd: types::Fd,
    /// Keeps `fd` open while ops are in flight.
    file: Arc<BackingFile>,
    depth: usize,
    wake: OwnedFd,
    queued: Mutex<VecDeque<Queued>>,
    ring: Mutex<RingState>,
    /// The thread that waits in this ring (the first to call [`IdleWait::wait`]).
    owner: OnceLock<ThreadId>,
    /// That thread's [`thread_tag`] (0 until it waits): what [`CpuRing::submit`] compares with,
    /// per I/O, instead of cloning the current thread's handle for its id.
    owner_tag: AtomicU64,
    /// The threads that reaped CQEs of this ring, each once (for tests: which thread completes
    /// I/O).
    reaped_by: Mutex<Vec<ThreadId>>,
    /// Waits entered (parks of the CPU thread in this ring).
    waits: AtomicU64,
    /// The owner submits at once when this many ops are queued (0: only when it parks).
    submit_batch: AtomicUsize,
    /// No thread will reap this ring any more (its CPU's thread stopped, or `io_uring_enter()`
    /// kept failing): submissions are refused. Set and read under `queued`'s lock.
    detached: AtomicBool,
    /// Why the ring stopped after `io_uring_enter()` kept failing.
    broken: OnceLock<String>,
    /// This ring's ops accepted and not yet delivered (the set's [`Counters`] count every
    /// ring's): what [`IdleWait::in_flight`] answers, without the ring's lock, which its thread
    /// holds while it sleeps in `io_uring_enter()`.
    own_in_flight: AtomicUsize,
    /// Test seam: a fake `io_uring_enter()` result (an errno) instead of the system call.
    #[cfg(test)]
    fake_enter_errno: std::sync::atomic::AtomicI32,
    on_batch: RingBatchFn,
    counters: Arc<Counters>,
}

/// A number for the calling thread, unique in the process and never 0.
fn thread_tag() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TAG: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TAG.with(|t| *t)
}

fn write_eventfd(fd: &OwnedFd) {
    super::uring::signal_eventfd(fd, "io_uring CPU ring");
}

impl CpuRing {
    fn new(
        file: &Arc<BackingFile>,
        entries: u32,
        on_batch: RingBatchFn,
        counters: Arc<Counters>,
    ) -> io::Result<CpuRing> {
        let ring = setup_ring(file, entries)?;
        if !ring.params().is_feature_ext_arg() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this kernel's io_uring has no IORING_FEAT_EXT_ARG (Linux 5.11): no timed wait",
            ));
        }
        Ok(CpuRing {
            fd: types::Fd(file.as_raw_fd()),
            file: Arc::clone(file),
            depth: entries as usize,
            wake: new_eventfd()?,
            queued: Mutex::new(VecDeque::new()),
            ring: Mutex::new(RingState {
                ring,
                slab: Vec::new(),
                free: Vec::new(),
                in_ring: 0,
                wake_armed: false,
                ready: Vec::new(),
                enter_failures: 0,
            }),
            owner: OnceLock::new(),
            owner_tag: AtomicU64::new(0),
            reaped_by: Mutex::new(Vec::new()),
            waits: AtomicU64::new(0),
            submit_batch: AtomicUsize::new(0),
            detached: AtomicBool::new(false),
            broken: OnceLock::new(),
            own_in_flight: AtomicUsize::new(0),
            #[cfg(test)]
            fake_enter_errno: std::sync::atomic::AtomicI32::new(0),
            on_batch,
            counters,
        })
    }

    /// Queues `op` for this CPU's next wait (which submits it). From another thread than the
    /// CPU's own, also wakes that thread so it is not left asleep in the ring with the op queued.
    ///
    /// Refused with the op handed back ([`SubmitErrorReason::Stopped`]) once no thread reaps the
    /// ring: its CPU's thread has stopped ([`IdleWait::detach`]) or the ring gave up after
    /// `io_uring_enter()` kept failing ([`CpuRing::error`]).
    pub fn submit(&self, token: u64, op: UringOp, flags: RwFlags) -> Result<(), SubmitError> {
        let refuse = |op, reason| Err(SubmitError { token, op, reason });
        if let UringOp::Read { buf, off } | UringOp::Write { buf, off } = &op {
            if u32::try_from(buf.len()).is_err() {
                return refuse(op, SubmitErrorReason::TooLarge);
            }
            if i64::try_from(*off).is_err() {
                return refuse(op, SubmitErrorReason::BadOffset);
            }
        }
        let c = &self.counters;
        let queued = {
            let mut q = self.queued.lock();
            // Under the lock `detach` sets the flag with: an op is either refused here or
            // queued before the detaching thread drains the queue.
            // (The buggy twin accepts them once the CPU's thread stopped.)
            let twin = cfg!(feature = "bug-cpu-ring-submit-after-stop") && self.error().is_none();
            if self.detached.load(Ordering::Acquire) && !twin {
                drop(q);
                return refuse(op, SubmitErrorReason::Stopped);
            }
            c.in_flight.fetch_add(1, Ordering::AcqRel);
            self.own_in_flight.fetch_add(1, Ordering::AcqRel);
            c.submitted.fetch_add(1, Ordering::AcqRel);
            q.push_back(Queued { token, op, flags });
            q.len()
        };
        if self.owner_tag.load(Ordering::Relaxed) != thread_tag() {
            c.doorbells.fetch_add(1, Ordering::Relaxed);
            write_eventfd(&self.wake);
            return Ok(());
        }
        let batch = self.submit_batch.load(Ordering::Relaxed);
        if batch > 0 && queued >= batch {
            // The owner hands a full batch to the kernel now, without waiting, so the device
            // works while the CPU goes on (an NVMe doorbell per `batch` requests).
            self.submit_queued();
        }
        Ok(())
    }

    /// Makes the ring's own thread submit as soon as `n` ops are queued instead of only when it
    /// parks (`0`, the default): the device starts on the first ops of a burst while the CPU
    /// produces the rest, at the cost of one more `io_uring_enter()` per `n` ops.
    pub fn set_submit_batch(&self, n: usize) {
        self.submit_batch.store(n, Ordering::Relaxed);
    }

    /// Ops queued, not yet handed to the kernel.
    pub fn queued(&self) -> usize {
        self.queued.lock().len()
    }

    /// How many times a thread has waited in this ring.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Acquire)
    }

    /// The thread that waits in this ring (its CPU's), once it has.
    pub fn waiter_thread(&self) -> Option<ThreadId> {
        self.owner.get().copied()
    }

    /// Why the ring stopped, if `io_uring_enter()` kept failing ([`MAX_ENTER_FAILURES`]).
    pub fn error(&self) -> Option<&str> {
        self.broken.get().map(String::as_str)
    }

    /// Makes the next `io_uring_enter()` calls of this ring fail with `errno` (0: the real call
    /// again), as a kernel that keeps refusing them would.
    #[cfg(test)]
    fn fake_enter_error(&self, errno: i32) {
        self.fake_enter_errno.store(errno, Ordering::Relaxed);
    }

    /// `io_uring_enter(to_submit, min_complete = want, GETEVENTS | EXT_ARG)` with `timeout`, or
    /// the test seam's fake error.
    fn enter(&self, st: &mut RingState, want: usize, timeout: Duration) -> io::Result<usize> {
        #[cfg(test)]
        {
            let errno = self.fake_enter_errno.load(Ordering::Relaxed);
            if errno != 0 {
                return Err(io::Error::from_raw_os_error(errno));
            }
        }
        // Clamped: a huge Duration would be a negative tv_sec and EINVAL on every wait.
        let ts = types::Timespec::from(timeout.min(Duration::from_secs(3600)));
        let args = types::SubmitArgs::new().timespec(&ts);
        st.ring.submitter().submit_with_args(want, &args)
    }

    /// One more `io_uring_enter()` failure `e` that is not transient: pauses (1, 2, 4, ... ms)
    /// and lets the next wait retry, or after [`MAX_ENTER_FAILURES`] in a row stops the ring:
    /// refuses new ops and fails the queued ones with `EIO` (delivered as usual); the ops already
    /// in the kernel are reaped by the stopped ring's later waits, and SQEs the failing enter never
    /// submitted are left to [`Drop`].
    fn enter_failed(&self, st: &mut RingState, e: &io::Error) {
        st.enter_failures += 1;
        let n = st.enter_failures;
        if n < MAX_ENTER_FAILURES || cfg!(feature = "bug-cpu-ring-enter-spins") {
            if !cfg!(feature = "bug-cpu-ring-enter-spins") {
                tracing::warn!("io_uring CPU ring: io_uring_enter failed ({e}), retry {n}");
                std::thread::sleep(enter_retry_pause(n));
            }
            return;
        }
        let failed: Vec<Queued> = {
            let mut q = self.queued.lock();
            self.detached.store(true, Ordering::Release);
            q.drain(..).collect()
        };
        let msg = format!(
            "io_uring CPU ring: io_uring_enter failed {n} times in a row ({e}): the ring stops; \
             {} queued I/Os failed with EIO, {} left in the SQ or the kernel",
            failed.len(),
            st.in_ring
        );
        tracing::error!("{msg}");
        let _ = self.broken.set(msg);
        for Queued { token, op, .. } in failed {
            st.ready.push(UringCompletion {
                token,
                result: Err(io::Error::from_raw_os_error(libc::EIO)),
                op,
            });
        }
        let _g = self.counters.idle_lock.lock();
        self.counters.idle.notify_all();
    }

    /// A stopped ring's idle sleep: on its eventfd alone, so [`IdleWait::wake`] still ends it.
    fn sleep_on_eventfd(&self, timeout: Duration) {
        let mut pfd = libc::pollfd {
            fd: self.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Rounded up: a sub-millisecond park slice must sleep, not poll(0) and spin.
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        if unsafe { libc::poll(&mut pfd, 1, ms) } > 0 {
            let mut n: u64 = 0;
            // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
            let _ = unsafe { libc::read(self.wake.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
        }
    }

    /// The threads that reaped CQEs of this ring, each once, in the order they first did.
    pub fn reaped_by(&self) -> Vec<ThreadId> {
        self.reaped_by.lock().clone()
    }

    /// Hands the queued ops to the kernel without waiting (one `io_uring_enter`), if there are any.
    fn submit_queued(&self) {
        let mut st = self.ring.lock();
        if self.fill(&mut st) > 0 {
            self.counters.doorbells.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = st.ring.submit() {
                tracing::error!("io_uring CPU ring: io_uring_enter failed: {e}");
            }
        }
    }

    /// Moves queued ops into the SQ (up to the depth) and arms the eventfd poll; returns the
    /// number of SQEs pushed.
    fn fill(&self, st: &mut RingState) -> usize {
        let mut pushed = 0;
        if !st.wake_armed {
            let sqe = opcode::PollAdd::new(types::Fd(self.wake.as_raw_fd()), libc::POLLIN as u32)
                .build()
                .user_data(WAKE_TOKEN);
            // SAFETY: a poll SQE references no memory; the eventfd outlives the ring.
            if unsafe { st.ring.submission().push(&sqe) }.is_err() {
                return pushed;
            }
            st.wake_armed = true;
            pushed += 1;
        }
        let mut q = self.queued.lock();
        while st.in_ring < self.depth {
            let Some(Queued { token, op, flags }) = q.pop_front() else {
                break;
            };
            let slot = st.free.pop().unwrap_or_else(|| {
                st.slab.push(None);
                st.slab.len() - 1
            });
            let sqe = build_sqe(self.fd, &op, flags).user_data(slot as u64);
            st.slab[slot] = Some((token, op));
            // SAFETY: the SQE points into the buffer now owned by `st.slab[slot]`, which stays
            // there until its CQE is reaped (or is leaked, see Drop); `self.file` keeps the fd.
            if unsafe { st.ring.submission().push(&sqe) }.is_err() {
                let (token, op) = st.slab[slot].take().expect("just stored");
                st.free.push(slot);
                q.push_front(Queued { token, op, flags });
                break;
            }
            st.in_ring += 1;
            pushed += 1;
        }
        pushed
    }

    /// Takes every CQE into `st.ready`: straight off the completion queue (no copy of the CQEs),
    /// into a batch sized once for all of them, as `deliver()` hands each batch away whole.
    fn reap(&self, st: &mut RingState) {
        let RingState {
            ring,
            slab,
            free,
            in_ring,
            wake_armed,
            ready,
            ..
        } = st;
        let mut cq = ring.completion();
        ready.reserve(cq.len());
        for c in &mut cq {
            let (user_data, res) = (c.user_data(), c.result());
            if user_data == WAKE_TOKEN {
                *wake_armed = false;
                let mut n: u64 = 0;
                // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
                let _ =
                    unsafe { libc::read(self.wake.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
                continue;
            }
            let Some((token, op)) = slab.get_mut(user_data as usize).and_then(Option::take) else {
                tracing::error!("io_uring CPU ring: CQE for unknown user_data {user_data}");
                continue;
            };
            free.push(user_data as usize);
            *in_ring -= 1;
            let result = if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else {
                Ok(res as usize)
            };
            ready.push(UringCompletion { token, result, op });
        }
    }
}

impl IdleWait for CpuRing {
    fn wait(&self, timeout: Duration) {
        if self.owner.get().is_none() && self.owner.set(std::thread::current().id()).is_ok() {
            self.owner_tag.store(thread_tag(), Ordering::Relaxed);
        }
        self.waits.fetch_add(1, Ordering::AcqRel);
        let mut st = self.ring.lock();
        if self.broken.get().is_some() {
            drop(st);
            self.sleep_on_eventfd(timeout);
            // The ops already in the kernel still complete: their CQEs need no io_uring_enter()
            // (the poll() above returned to user space, running any completion task work), so
            // each is reaped and delivered once, with its own result.
            let mut st = self.ring.lock();
            self.reap(&mut st);
            return;
        }
        let was_armed = st.wake_armed;
        let pushed = self.fill(&mut st);
        // Sleep only when nothing is waiting to be delivered; submit in the same call.
        let want = usize::from(st.ready.is_empty() && st.ring.completion().is_empty());
        if want > 0 || pushed > 0 {
            if pushed > usize::from(!was_armed && st.wake_armed) {
                self.counters.doorbells.fetch_add(1, Ordering::Relaxed);
            }
            match self.enter(&mut st, want, timeout) {
                Ok(_) => st.enter_failures = 0,
                // The timeout, a signal, or the kernel short of resources: reap what there is.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ETIME | libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) =>
                {
                    st.enter_failures = 0
                }
                Err(e) => self.enter_failed(&mut st, &e),
            }
        }
        self.reap(&mut st);
    }

    fn wake(&self) {
        write_eventfd(&self.wake);
    }

    fn flush(&self) {
        if !self.queued.lock().is_empty() {
            self.submit_queued();
        }
    }

    /// Refuses new submissions, then submits and reaps what was accepted before (bounded by
    /// 5 s) and delivers it, since no park of the stopped thread will.
    fn detach(&self) {
        {
            let _q = self.queued.lock();
            self.detached.store(true, Ordering::Release);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let left = self.ring.lock().in_ring + self.queued.lock().len();
            if left == 0 || self.broken.get().is_some() {
                break;
            }
            if std::time::Instant::now() >= deadline {
                tracing::error!(
                    path = %self.file.path().display(),
                    "io_uring CPU ring: {left} I/Os still pending 5 s after its CPU's thread stopped"
                );
                break;
            }
            self.wait(Duration::from_millis(10));
            self.deliver();
        }
    }

    /// This ring's own ops, queued or in the kernel: the wait submits the queued ones first, and
    /// a CQE of any of them ends it. Not the set's counter, which counts every CPU's ring; and
    /// never once the ring is broken (its queued ops are failed, and nothing comes back).
    fn in_flight(&self) -> bool {
        self.broken.get().is_none() && self.own_in_flight.load(Ordering::Acquire) > 0
    }

    fn deliver(&self) -> bool {
        let batch = std::mem::take(&mut self.ring.lock().ready);
        if batch.is_empty() {
            return false;
        }
        let n = batch.len();
        let c = &self.counters;
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.cqes.fetch_add(n as u64, Ordering::Relaxed);
        c.max_batch.fetch_max(n as u64, Ordering::Relaxed);
        c.batch_hist[UringStats::bucket(n)].fetch_add(1, Ordering::Relaxed);
        let failed = batch.iter().filter(|x| x.result.is_err()).count();
        c.failed.fetch_add(failed as u64, Ordering::Relaxed);
        // Each thread once: bounded by the threads there are, not by the batches.
        let me = std::thread::current().id();
        let mut by = self.reaped_by.lock();
        if !by.contains(&me) {
            by.push(me);
        }
        drop(by);
        if panic::catch_unwind(AssertUnwindSafe(|| (self.on_batch)(batch))).is_err() {
            tracing::error!("io_uring CPU ring: the batch callback panicked");
        }
        c.completed.fetch_add(n as u64, Ordering::AcqRel);
        self.own_in_flight.fetch_sub(n, Ordering::AcqRel);
        if c.in_flight.fetch_sub(n, Ordering::AcqRel) == n {
            let _g = c.idle_lock.lock();
            c.idle.notify_all();
        }
        true
    }
}

impl Drop for CpuRing {
    /// Waits (bounded) for the ops still in the kernel; their completions go nowhere. Buffers of
    /// ops that never complete are leaked, as the kernel may still write into them.
    fn drop(&mut self) {
        let st = self.ring.get_mut();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while st.in_ring > 0 && std::time::Instant::now() < deadline {
            let ts = types::Timespec::new().nsec(10_000_000);
            let args = types::SubmitArgs::new().timespec(&ts);
            if let Err(e) = st.ring.submitter().submit_with_args(1, &args) {
                // Only a transient error is worth the rest of the 5 s; any other would spin.
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) {
                    break;
                }
            }
            let done: Vec<u64> = st.ring.completion().map(|c| c.user_data()).collect();
            for u in done {
                if let Some(slot) = st.slab.get_mut(u as usize) {
                    if slot.take().is_some() {
                        st.in_ring -= 1;
                    }
                }
            }
        }
        if st.in_ring > 0 {
            tracing::error!(path = %self.file.path().display(), "io_uring CPU ring: {} ops never completed; their buffers are leaked", st.in_ring);
            for e in st.slab.drain(..).flatten() {
                std::mem::forget(e);
            }
        }
    }
}

impl std::fmt::Debug for CpuRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuRing")
            .field("path", &self.file.path())
            .field("depth", &self.depth)
            .field("queued", &self.queued.lock().len())
            .finish_non_exhaustive()
    }
}

/// One [`CpuRing`] per simulated CPU over one file, with one set of counters.
pub struct CpuRings {
    rings: Vec<Arc<CpuRing>>,
    counters: Arc<Counters>,
}

impl CpuRings {
    /// `nr_cpus` rings of queue depth `entries` (1 to [`super::uring::MAX_ENTRIES`]) over
    /// `file`; `on_batch` gets each wait's CQEs, on the CPU thread that reaped them.
    ///
    /// Fails when io_uring (or its `EXT_ARG` timed wait) is unavailable, saying why.
    pub fn new(
        file: &Arc<BackingFile>,
        nr_cpus: usize,
        entries: u32,
        on_batch: RingBatchFn,
    ) -> io::Result<CpuRings> {
        let counters = Arc::new(Counters::default());
        let rings = (0..nr_cpus.max(1))
            .map(|_| {
                CpuRing::new(file, entries, Arc::clone(&on_batch), Arc::clone(&counters))
                    .map(Arc::new)
            })
            .collect::<io::Result<_>>()?;
        Ok(CpuRings { rings, counters })
    }

    /// The ring of CPU `i` (the last one for a higher index).
    pub fn ring(&self, i: usize) -> &Arc<CpuRing> {
        &self.rings[i.min(self.rings.len() - 1)]
    }

    /// [`CpuRing::set_submit_batch`] on every ring.
    pub fn set_submit_batch(&self, n: usize) {
        for r in &self.rings {
            r.set_submit_batch(n);
        }
    }

    /// How many rings (CPUs).
    pub fn len(&self) -> usize {
        self.rings.len()
    }

    /// Never: a set has at least one ring.
    pub fn is_empty(&self) -> bool {
        self.rings.is_empty()
    }

    /// Ops accepted whose batch callback has not returned yet.
    pub fn in_flight(&self) -> usize {
        self.counters.in_flight.load(Ordering::Acquire)
    }

    /// The first ring's [`CpuRing::error`]: why it stopped.
    pub fn error(&self) -> Option<String> {
        self.rings
            .iter()
            .enumerate()
            .find_map(|(i, r)| r.error().map(|e| format!("CPU{i}: {e}")))
    }

    /// Waits until nothing is in flight: the CPUs' threads must be parking (a threaded runtime
    /// with each ring installed as its CPU's [`IdleWait`]), so never call it from one of them.
    /// Gives up after `timeout`, or at once when a ring has stopped ([`CpuRings::error`]: its
    /// ops in the kernel will never be reaped); returns whether everything completed.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let c = &self.counters;
        let deadline = std::time::Instant::now() + timeout;
        let mut g = c.idle_lock.lock();
        while c.in_flight.load(Ordering::Acquire) != 0 {
            if self.rings.iter().any(|r| r.error().is_some()) {
                return false;
            }
            if c.idle.wait_until(&mut g, deadline).timed_out() {
                return c.in_flight.load(Ordering::Acquire) == 0;
            }
        }
        true
    }

    /// The set's counters (all rings together), in [`UringStats`]' terms.
    pub fn stats(&self) -> UringStats {
        let c = &self.counters;
        UringStats {
            submitted: c.submitted.load(Ordering::Acquire),
            completed: c.completed.load(Ordering::Acquire),
            failed: c.failed.load(Ordering::Acquire),
            batches: c.batches.load(Ordering::Acquire),
            cqes: c.cqes.load(Ordering::Acquire),
            max_batch: c.max_batch.load(Ordering::Acquire),
            batch_hist: std::array::from_fn(|i| c.batch_hist[i].load(Ordering::Acquire)),
            doorbells: c.doorbells.load(Ordering::Acquire),
        }
    }
}

impl std::fmt::Debug for CpuRings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuRings")
            .field("rings", &self.rings.len())
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::backing::OpenOptions;
    use crate::dev::uring::tests::unavailable;
    use crate::runtime::threaded::{ThreadedConfig, ThreadedRuntime};
    use bio_core::kernel::CpuId;
    use bio_core::{Kernel, KernelConfig};
    use std::time::Instant;

    /// A buffered 64 KiB file whose block `b` is filled with `b`.
    fn file() -> (tempfile::TempDir, Arc<BackingFile>) {
        let dir = tempfile::tempdir().unwrap();
        let f = BackingFile::open(
            &dir.path().join("cpuring.img"),
            &OpenOptions {
                direct: false,
                read_only: false,
                create_size: Some(16 * 4096),
            },
        )
        .unwrap();
        for b in 0..16u64 {
            f.write_all_at(&[b as u8; 4096], b * 4096, RwFlags::empty())
                .unwrap();
        }
        (dir, Arc::new(f))
    }

    /// A one-CPU runtime whose CPU sleeps in its ring, with an idle timeout of 5 s (so only a
    /// real wake-up, not the timeout, can make it run something promptly).
    fn machine(on_batch: RingBatchFn) -> Option<(ThreadedRuntime, CpuRings, tempfile::TempDir)> {
        machine_of(1, on_batch)
    }

    /// [`machine`] with `n` CPUs, each asleep in its own ring.
    fn machine_of(
        n: u32,
        on_batch: RingBatchFn,
    ) -> Option<(ThreadedRuntime, CpuRings, tempfile::TempDir)> {
        let (dir, f) = file();
        let rings = or_skip(CpuRings::new(&f, n as usize, 8, on_batch))?;
        let kernel = Kernel::boot(KernelConfig::default(), n, n).unwrap();
        let config = ThreadedConfig {
            idle_timeout: Duration::from_secs(5),
            ..ThreadedConfig::default()
        };
        let rt = ThreadedRuntime::start(kernel, config).unwrap();
        for i in 0..n {
            let w: Arc<dyn IdleWait> = rings.ring(i as usize).clone();
            rt.set_idle_wait(CpuId(i), Arc::downgrade(&w)).unwrap();
        }
        // The CPUs go to sleep in their rings.
        let deadline = Instant::now() + Duration::from_secs(5);
        while (0..n as usize).any(|i| rings.ring(i).waits() == 0) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(50));
        Some((rt, rings, dir))
    }

    /// A CQE with a negative result comes back as that errno (here `EBADF`: a write on a file
    /// opened read-only), one completion per op, and a zero-length success is `Ok(0)`.
    #[test]
    fn a_failed_cqe_is_its_errno() {
        let (d, _f) = file();
        let ro = Arc::new(
            BackingFile::open(
                &d.path().join("cpuring.img"),
                &OpenOptions {
                    direct: false,
                    read_only: true,
                    create_size: None,
                },
            )
            .unwrap(),
        );
        type Seen = Arc<Mutex<Vec<(u64, Result<usize, Option<i32>>)>>>;
        let seen: Seen = Arc::default();
        let s = Arc::clone(&seen);
        let Some(rings) = or_skip(CpuRings::new(
            &ro,
            1,
            4,
            Arc::new(move |b: Vec<UringCompletion>| {
                s.lock().extend(b.iter().map(|c| {
                    (
                        c.token,
                        c.result.as_ref().map(|n| *n).map_err(|e| e.raw_os_error()),
                    )
                }));
            }),
        )) else {
            return;
        };
        let ring = rings.ring(0);
        let write = UringOp::Write {
            buf: crate::dev::aligned::AlignedBuf::new(4096),
            off: 0,
        };
        ring.submit(1, write, RwFlags::empty()).unwrap();
        // Past the end of the 16-page file: a read of nothing.
        let past_end = UringOp::Read {
            buf: crate::dev::aligned::AlignedBuf::new(4096),
            off: 16 * 4096,
        };
        ring.submit(2, past_end, RwFlags::empty()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while seen.lock().len() < 2 && Instant::now() < deadline {
            ring.wait(Duration::from_millis(5));
            ring.deliver();
        }
        let mut got = seen.lock().clone();
        got.sort_by_key(|x| x.0);
        assert_eq!(got, [(1, Err(Some(libc::EBADF))), (2, Ok(0))]);
    }

    /// `in_flight()` is the ring's own: an op queued on CPU0's ring makes CPU0's waits sleep
    /// their longest slice, not CPU1's, although the two share the set's counters; once the op
    /// completed, neither.
    #[test]
    fn a_rings_in_flight_is_its_own() {
        let read = |off| UringOp::Read {
            buf: crate::dev::aligned::AlignedBuf::new(4096),
            off,
        };
        // No CPU thread: a submitted op stays queued.
        let (_d, f) = file();
        let Some(rings) = or_skip(CpuRings::new(&f, 2, 8, Arc::new(|_| {}))) else {
            return;
        };
        assert!(!rings.ring(0).in_flight() && !rings.ring(1).in_flight());
        rings.ring(0).submit(1, read(0), RwFlags::empty()).unwrap();
        assert_eq!(rings.in_flight(), 1, "the set counts it");
        assert!(rings.ring(0).in_flight(), "queued on CPU0's ring");
        assert!(
            !rings.ring(1).in_flight(),
            "CPU1's ring has nothing of its own in flight while CPU0's has a read"
        );
        // With CPU threads: once the read completed, nothing is in flight.
        let Some((rt, rings, _d)) = machine_of(2, Arc::new(|_| {})) else {
            return;
        };
        rings
            .ring(0)
            .submit(1, read(4096), RwFlags::empty())
            .unwrap();
        assert!(
            rings.wait_idle(Duration::from_secs(5)),
            "the read completed"
        );
        assert!(!rings.ring(0).in_flight() && !rings.ring(1).in_flight());
        assert!(rt.shutdown().is_clean());
    }

    /// An ordinary wake-up (a `run_on` message) reaches a CPU thread asleep in
    /// `io_uring_enter()`: the closure runs at once, on the thread that waits in the ring, not
    /// after the 5 s idle timeout. The buggy twin never writes the ring's eventfd and is caught.
    #[test]
    #[cfg_attr(
        feature = "bug-cpu-ring-wake-lost",
        should_panic(expected = "the wake-up reaches the CPU asleep in its ring")
    )]
    fn an_unpark_reaches_a_cpu_asleep_in_its_ring() {
        let Some((rt, rings, _d)) = machine(Arc::new(|_| {})) else {
            return;
        };
        let ring = rings.ring(0);
        let waits = ring.waits();
        assert!(waits >= 1, "the idle CPU sleeps in its ring");
        let t0 = Instant::now();
        let tid = rt
            .run_on(CpuId(0), |_| std::thread::current().id())
            .unwrap();
        let took = t0.elapsed();
        assert!(
            took < Duration::from_secs(1),
            "the wake-up reaches the CPU asleep in its ring (took {took:?})"
        );
        assert_eq!(
            ring.waiter_thread(),
            Some(tid),
            "the CPU's own thread waits"
        );
        assert!(rt.shutdown().is_clean());
    }

    /// Reads submitted from the controller thread (not the CPU's) complete: the foreign
    /// submission wakes the CPU asleep in its ring, its thread submits them, reaps them and hands
    /// them to the batch callback itself, each with its own data; the counters agree.
    #[test]
    fn the_cpu_thread_submits_and_reaps_its_ring() {
        type Seen = Arc<Mutex<Vec<(ThreadId, u64, u8)>>>;
        let seen: Seen = Arc::default();
        let s = Arc::clone(&seen);
        let Some((rt, rings, _d)) = machine(Arc::new(move |b: Vec<UringCompletion>| {
            let me = std::thread::current().id();
            for c in b {
                assert_eq!(c.result.as_ref().ok(), Some(&4096), "token {}", c.token);
                s.lock().push((me, c.token, c.op.buf().expect("a read")[0]));
            }
        })) else {
            return;
        };
        for t in 0..12u64 {
            let op = UringOp::Read {
                buf: crate::dev::aligned::AlignedBuf::new(4096),
                off: (t % 16) * 4096,
            };
            rings.ring(0).submit(t, op, RwFlags::empty()).unwrap();
        }
        assert!(
            rings.wait_idle(Duration::from_secs(5)),
            "every read completed"
        );
        let cpu_thread = rt
            .run_on(CpuId(0), |_| std::thread::current().id())
            .unwrap();
        let seen = seen.lock().clone();
        let mut tokens: Vec<u64> = seen.iter().map(|x| x.1).collect();
        tokens.sort_unstable();
        assert_eq!(tokens, (0..12).collect::<Vec<_>>(), "each read once");
        for &(tid, t, byte) in &seen {
            assert_eq!(tid, cpu_thread, "token {t} reaped by the CPU's thread");
            assert_eq!(byte, (t % 16) as u8, "token {t} read its own block");
        }
        let st = rings.stats();
        assert_eq!((st.submitted, st.completed, st.cqes), (12, 12, 12));
        assert!(st.batches >= 1);
        assert_eq!(
            rings.ring(0).reaped_by(),
            [cpu_thread],
            "reaped by the CPU's thread only"
        );
        assert!(rt.shutdown().is_clean());
    }

    /// The ring's own thread queues its submissions until it parks (batch 0), or hands them to
    /// the kernel as soon as `n` are queued ([`CpuRing::set_submit_batch`]); either way every op
    /// completes once, reaped by that thread.
    #[test]
    fn the_owner_submits_at_park_or_once_a_batch_is_queued() {
        let done = Arc::new(AtomicUsize::new(0));
        let d = Arc::clone(&done);
        let Some((rt, rings, _d)) = machine(Arc::new(move |b: Vec<UringCompletion>| {
            d.fetch_add(b.len(), Ordering::SeqCst);
        })) else {
            return;
        };
        let ring = Arc::clone(rings.ring(0));
        // (batch, ops, queued after them): a batch short of `n` waits for the park.
        for (batch, n, want_queued) in [(0usize, 4u64, 4usize), (4, 4, 0), (4, 3, 3), (4, 6, 2)] {
            ring.set_submit_batch(batch);
            let r = Arc::clone(&ring);
            let queued = rt
                .run_on(CpuId(0), move |_| {
                    for t in 0..n {
                        let op = UringOp::Read {
                            buf: crate::dev::aligned::AlignedBuf::new(4096),
                            off: t * 4096,
                        };
                        r.submit(t, op, RwFlags::empty()).unwrap();
                    }
                    r.queued()
                })
                .unwrap();
            assert_eq!(queued, want_queued, "submit batch {batch}, {n} ops");
            assert!(
                rings.wait_idle(Duration::from_secs(5)),
                "batch {batch}: all completed"
            );
        }
        assert_eq!(done.load(Ordering::SeqCst), 4 + 4 + 3 + 6);
        assert!(rt.shutdown().is_clean());
    }

    /// The rings, or `None` (with the one-line reason) where io_uring is unavailable; any other
    /// error fails the test.
    fn or_skip(r: io::Result<CpuRings>) -> Option<CpuRings> {
        match r {
            Ok(r) => Some(r),
            Err(e) if unavailable(&e) => {
                eprintln!("skipped: io_uring unavailable: {e}");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// A read of block `t % 16` with token `t`.
    fn read(t: u64) -> UringOp {
        UringOp::Read {
            buf: crate::dev::aligned::AlignedBuf::new(4096),
            off: (t % 16) * 4096,
        }
    }

    /// After the runtime's shutdown no thread reaps the ring: a submission is refused as
    /// `Stopped`, the op (its buffer) handed back, nothing counted in flight. The buggy twin
    /// queues it where nobody ever completes it.
    #[test]
    #[cfg_attr(
        feature = "bug-cpu-ring-submit-after-stop",
        should_panic(expected = "refused after the shutdown")
    )]
    fn a_submission_after_the_shutdown_is_refused_with_its_op() {
        let Some((rt, rings, _d)) = machine(Arc::new(|_| {})) else {
            return;
        };
        assert!(rt.shutdown().is_clean());
        let r = rings.ring(0).submit(5, read(5), RwFlags::empty());
        match r {
            Err(SubmitError {
                token: 5,
                op,
                reason: SubmitErrorReason::Stopped,
            }) => assert_eq!(
                op.buf().map(|b| b.len()),
                Some(4096),
                "the buffer comes back"
            ),
            Err(e) => panic!("refused for another reason: {}", e.reason),
            Ok(()) => panic!("refused after the shutdown, not queued for nobody"),
        }
        assert_eq!(rings.in_flight(), 0);
        assert_eq!(rings.ring(0).queued(), 0);
    }

    /// Reads accepted just before the shutdown are not left behind: the stopping thread drains
    /// its ring (`IdleWait::detach`), each read completing once.
    #[test]
    fn reads_queued_before_the_shutdown_still_complete_once() {
        let done: Arc<Mutex<Vec<u64>>> = Arc::default();
        let d = Arc::clone(&done);
        let Some((rt, rings, _d)) = machine(Arc::new(move |b: Vec<UringCompletion>| {
            d.lock().extend(b.iter().map(|c| c.token));
        })) else {
            return;
        };
        let ring = Arc::clone(rings.ring(0));
        ring.set_submit_batch(0);
        // Queued by the CPU's own thread (no wake-up), then the machine stops.
        let r = Arc::clone(&ring);
        rt.run_on(CpuId(0), move |_| {
            for t in 0..6 {
                r.submit(t, read(t), RwFlags::empty()).unwrap();
            }
        })
        .unwrap();
        let _ = rt.shutdown();
        assert!(
            rings.wait_idle(Duration::from_secs(5)),
            "nothing left in flight"
        );
        let mut got = done.lock().clone();
        got.sort_unstable();
        assert_eq!(got, (0..6).collect::<Vec<_>>(), "each read once");
    }

    /// A kernel whose `io_uring_enter()` keeps failing (an injected `EBADF`) does not make the
    /// CPU spin: after [`MAX_ENTER_FAILURES`] tries with a pause between them the ring stops
    /// with a message, its queued reads complete with `EIO`, new ones are refused and
    /// `wait_idle` returns at once. The buggy twin retries forever.
    #[test]
    #[cfg_attr(
        feature = "bug-cpu-ring-enter-spins",
        should_panic(expected = "the ring stops after repeated io_uring_enter failures")
    )]
    fn a_persistent_io_uring_enter_error_stops_the_ring_with_a_message() {
        let (_d, f) = file();
        // (token, errno) of each completion.
        type Seen = Arc<Mutex<Vec<(u64, Option<i32>)>>>;
        let seen: Seen = Arc::default();
        let s = Arc::clone(&seen);
        // A ring of depth 2: two reads go to the kernel, the other two stay queued.
        let Some(rings) = or_skip(CpuRings::new(
            &f,
            1,
            2,
            Arc::new(move |b: Vec<UringCompletion>| {
                let mut s = s.lock();
                s.extend(b.iter().map(|c| {
                    (
                        c.token,
                        c.result.as_ref().err().and_then(|e| e.raw_os_error()),
                    )
                }));
            }),
        )) else {
            return;
        };
        let ring = rings.ring(0);
        ring.fake_enter_error(libc::EBADF);
        for t in 0..4 {
            ring.submit(t, read(t), RwFlags::empty()).unwrap();
        }
        assert!(ring.in_flight(), "four reads of its own");
        let t0 = Instant::now();
        let mut waits = 0;
        while ring.error().is_none() && waits < 2 * MAX_ENTER_FAILURES {
            ring.wait(Duration::from_millis(10));
            ring.deliver();
            waits += 1;
        }
        let msg = ring.error().map(str::to_owned);
        assert!(
            msg.is_some(),
            "the ring stops after repeated io_uring_enter failures ({waits} waits)"
        );
        let msg = msg.unwrap();
        assert_eq!(waits, MAX_ENTER_FAILURES, "stops at the bound: {msg}");
        assert_eq!(ring.waits(), u64::from(waits), "every wait counted");
        assert!(
            t0.elapsed() >= Duration::from_millis(31),
            "paused between the tries: {:?}",
            t0.elapsed()
        );
        assert_eq!(
            msg,
            format!(
                "io_uring CPU ring: io_uring_enter failed {MAX_ENTER_FAILURES} times in a row \
                 ({}): the ring stops; 2 queued I/Os failed with EIO, 2 left in the SQ or the kernel",
                io::Error::from_raw_os_error(libc::EBADF)
            )
        );
        assert_eq!(*seen.lock(), [(2, Some(libc::EIO)), (3, Some(libc::EIO))]);
        // The two reads left in the kernel may never come back: a wait on this CPU must not
        // count on them (it polls its condition again).
        assert!(!ring.in_flight(), "a stopped ring expects no completion");
        assert_eq!(rings.error(), Some(format!("CPU0: {msg}")));
        assert!(matches!(
            ring.submit(9, read(9), RwFlags::empty()),
            Err(SubmitError {
                reason: SubmitErrorReason::Stopped,
                ..
            })
        ));
        let t1 = Instant::now();
        assert!(
            !rings.wait_idle(Duration::from_secs(5)),
            "two reads never reaped"
        );
        assert!(
            t1.elapsed() < Duration::from_secs(1),
            "wait_idle gives up at once"
        );
        // A stopped ring's wait still sleeps (no spin) until its timeout or a wake-up (after
        // the one the submissions above left pending).
        ring.wait(Duration::ZERO);
        let t2 = Instant::now();
        ring.wait(Duration::from_millis(30));
        assert!(
            t2.elapsed() >= Duration::from_millis(25),
            "{:?}",
            t2.elapsed()
        );
        ring.wake();
        let t3 = Instant::now();
        ring.wait(Duration::from_secs(5));
        assert!(
            t3.elapsed() < Duration::from_secs(1),
            "woken: {:?}",
            t3.elapsed()
        );
        // Drop reaps the reads the kernel was given (the fake error is gone by then).
        ring.fake_enter_error(0);
    }

    /// The owner's batch submission rings the kernel only when it moved SQEs: with the ring at
    /// its depth the op stays queued and no `io_uring_enter()` is made; the next wait submits it
    /// once a slot is free, and every read completes once.
    #[test]
    fn a_full_ring_queues_without_an_empty_io_uring_enter() {
        let (_d, f) = file();
        let n = Arc::new(AtomicUsize::new(0));
        let m = Arc::clone(&n);
        let Some(rings) = or_skip(CpuRings::new(
            &f,
            1,
            2,
            Arc::new(move |b: Vec<UringCompletion>| {
                m.fetch_add(b.len(), Ordering::SeqCst);
            }),
        )) else {
            return;
        };
        let ring = rings.ring(0);
        // This thread becomes the ring's owner (and arms the eventfd poll).
        ring.wait(Duration::ZERO);
        ring.set_submit_batch(1);
        let before = rings.stats().doorbells;
        for t in 0..3 {
            ring.submit(t, read(t), RwFlags::empty()).unwrap();
        }
        assert_eq!(ring.queued(), 1, "the third read waits for a free slot");
        assert_eq!(
            rings.stats().doorbells,
            before + 2,
            "one io_uring_enter per read that went in, none for the one that did not"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while n.load(Ordering::SeqCst) < 3 && Instant::now() < deadline {
            ring.wait(Duration::from_millis(5));
            ring.deliver();
        }
        assert_eq!(n.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn the_pause_between_enter_retries_doubles_up_to_64_ms() {
        let ms: Vec<u128> = (1..=9).map(|n| enter_retry_pause(n).as_millis()).collect();
        assert_eq!(ms, [1, 2, 4, 8, 16, 32, 64, 64, 64]);
    }

    /// `IdleWait::flush` hands the queued ops to the kernel without sleeping: they complete
    /// although nothing else submits them; without queued ops it calls nothing.
    #[test]
    fn flush_submits_the_queued_ops_without_sleeping() {
        let (_d, f) = file();
        let n = Arc::new(AtomicUsize::new(0));
        let m = Arc::clone(&n);
        let Some(rings) = or_skip(CpuRings::new(
            &f,
            1,
            8,
            Arc::new(move |b: Vec<UringCompletion>| {
                m.fetch_add(b.len(), Ordering::SeqCst);
            }),
        )) else {
            return;
        };
        let ring = rings.ring(0);
        ring.flush();
        assert_eq!(
            rings.stats().doorbells,
            0,
            "nothing queued: no io_uring_enter"
        );
        for t in 0..3 {
            ring.submit(t, read(t), RwFlags::empty()).unwrap();
        }
        let foreign = rings.stats().doorbells;
        assert_eq!(ring.queued(), 3);
        ring.flush();
        assert_eq!(ring.queued(), 0, "flushed into the SQ");
        assert_eq!(rings.stats().doorbells, foreign + 1, "one io_uring_enter");
        // They are in the kernel already: a wait that does not sleep (timeout 0) soon reaps them.
        let deadline = Instant::now() + Duration::from_secs(5);
        while n.load(Ordering::SeqCst) < 3 && Instant::now() < deadline {
            ring.wait(Duration::from_millis(5));
            ring.deliver();
        }
        assert_eq!(n.load(Ordering::SeqCst), 3);
    }

    /// I/O in flight on a CPU's ring when that CPU goes offline: every read still completes
    /// exactly once (the offline CPU's thread keeps reaping its ring; the interrupt goes to an
    /// online CPU).
    #[test]
    fn reads_in_flight_when_their_cpu_goes_offline_complete_once() {
        let done: Arc<Mutex<Vec<u64>>> = Arc::default();
        let d = Arc::clone(&done);
        let Some((rt, rings, _d)) = machine_of(
            2,
            Arc::new(move |b: Vec<UringCompletion>| {
                d.lock().extend(b.iter().map(|c| c.token));
            }),
        ) else {
            return;
        };
        let ring = Arc::clone(rings.ring(1));
        ring.set_submit_batch(0);
        let r = Arc::clone(&ring);
        rt.run_on(CpuId(1), move |_| {
            for t in 0..24 {
                r.submit(t, read(t), RwFlags::empty()).unwrap();
            }
        })
        .unwrap();
        rt.cpu_down(CpuId(1), hotplug::CPUHP_OFFLINE).unwrap();
        assert!(!rt.kernel().cpu_online(CpuId(1)));
        assert!(
            rings.wait_idle(Duration::from_secs(10)),
            "every read completed"
        );
        let mut got = done.lock().clone();
        got.sort_unstable();
        assert_eq!(got, (0..24).collect::<Vec<_>>(), "each read exactly once");
        assert!(rt.shutdown().is_clean());
    }
}
