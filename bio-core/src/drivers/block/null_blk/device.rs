//! The device half of `drivers/block/null_blk/main.c`: `null_add_dev()`, `null_queue_rq()`,
//! `null_handle_cmd()`, `nullb_complete_cmd()`, `end_cmd()`, `null_cmd_timer_expired()`, and
//! blk-mq's tag allocation (`blk_mq_get_tag()`) for the device's one hardware queue.
//!
//! Tracepoints: blk-mq's request events for each request, as for loop (`block_getrq` when
//! `blk_mq_submit_bio()` gets the request, `block_rq_issue` from `blk_mq_start_request()` in
//! `null_queue_rq()`, `block_rq_complete` from `blk_mq_end_request()`), through
//! [`super::super::blk_mq_trace`]; `block_bio_queue` is `submit_bio_noacct()`'s.
//!
//! Timer mode (`NULL_IRQ_TIMER`): each request's `hrtimer_start(&cmd->timer, completion_nsec,
//! HRTIMER_MODE_REL)` is an entry in the device's timer queue; when it expires, an interrupt is
//! raised on the submitting CPU and `null_cmd_timer_expired()` ends the request in hardirq
//! context there. [`HrtimerClock::Thread`] (the threaded runtime) expires entries on a timer
//! thread in real time; [`HrtimerClock::Explicit`] (the deterministic runtime) never expires
//! anything by itself: [`NullBlk::fire_next_hrtimer`] is the explicit event, at the device's
//! simulated clock, which it advances to the expiry. The kernel's hrtimer interrupt is the
//! local APIC timer (`local_timer_entry`), not a device IRQ; biosim's interrupt is traced as a
//! device IRQ named `nullb-hrtimer` (the IRQ core has no timer vector).
//!
//! Its trace is the kernel's: `hrtimer_start` (mode `REL`, function `null_cmd_timer_expired`)
//! in `null_queue_rq()`, then, in the interrupt, `hrtimer_expire_entry` and `hrtimer_expire_exit`
//! around the callback, in the 6.18 formats recorded from this machine's tracefs (`was_armed`
//! included). One departure: the kernel enters through the local APIC timer vector
//! (`local_timer_entry vector=236`), biosim through `irq_handler_entry name=nullb-hrtimer`.
//! On PREEMPT_RT an hrtimer not marked `HRTIMER_MODE_HARD` expires in softirq context; biosim
//! keeps hardirq on every model.

use super::memory::NullbPages;
use super::{NullBlkConfig, NullIrqMode, NullQueueMode, BLK_MQ_MAX_DEPTH};
use crate::block::{
    bio_endio_status, bio_wouldblock_error, blk_status_to_errno, Bio, BlkStatus, BlockDriver,
    QueueLimits, ReqFlags, ReqOp, BLK_STS_IOERR, BLK_STS_OK, SECTOR_SHIFT,
};
use crate::drivers::block::blk_mq_trace::{
    block_getrq, block_rq_complete, block_rq_issue, RqTrace,
};
use crate::irq::{IrqHandler, SoftirqVec};
use crate::kernel::{Cpu, CpuId};
use crate::sync::untracked::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use crate::sync::{Mutex, UntrackedArc};
use crate::Kernel;
use std::fmt;
use std::time::{Duration, Instant};

/// `null_major = register_blkdev(0, "nullb")`: a dynamic major. `register_blkdev(0)` takes the
/// highest free slot of `major_names[]` from 254 down; biosim registers no other dynamic block
/// major, so nullb gets 254 (on a distribution kernel, device-mapper or zram often took it first
/// and nullb shows 251–253).
pub const NULL_MAJOR: u32 = 254;

/// The name of the interrupt a timer-mode completion is delivered by.
const HRTIMER_IRQ: &str = "nullb-hrtimer";

/// Who expires the timer mode's hrtimers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HrtimerClock {
    /// A timer thread, in real time (the threaded runtime).
    Thread,
    /// Nobody: [`NullBlk::fire_next_hrtimer`] is an explicit event (the deterministic runtime).
    Explicit,
}

/// How requests went through a device (simulator counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NullBlkStats {
    /// Requests that got a tag and reached `null_queue_rq()`.
    pub submitted: u64,
    /// Requests ended by `end_cmd()`.
    pub completed: u64,
    /// Hard interrupts handled (timer mode's expiries, delivered on the submitting CPU).
    pub irqs: u64,
    /// `BLOCK_SOFTIRQ` raises (softirq mode on a machine of more than one CPU).
    pub softirqs: u64,
    /// hrtimers that expired.
    pub timer_fires: u64,
    /// Submissions that found no free tag and slept in `blk_mq_get_tag()`.
    pub tag_waits: u64,
    /// `REQ_NOWAIT` submissions that found no free tag (`BLK_STS_AGAIN`).
    pub tag_nowait_fails: u64,
}

#[derive(Debug, Default)]
struct Counters {
    submitted: AtomicU64,
    completed: AtomicU64,
    irqs: AtomicU64,
    softirqs: AtomicU64,
    timer_fires: AtomicU64,
    tag_waits: AtomicU64,
    tag_nowait_fails: AtomicU64,
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// The hardware queue's tags (`struct blk_mq_tags` of depth `hw_queue_depth`): a count is
/// enough, since nothing looks a request up by its tag.
#[derive(Debug)]
struct Tags {
    depth: usize,
    in_use: AtomicUsize,
}

impl Tags {
    /// `__blk_mq_get_tag()`: one free tag, or none.
    fn try_get(&self) -> bool {
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.depth).then_some(n + 1)
            })
            .is_ok()
    }

    /// `blk_mq_put_tag()`.
    fn put(&self) {
        self.in_use.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the completion paths share with the device (they run in interrupts that outlive the
/// submitting call).
#[derive(Debug)]
struct Shared {
    tags: Tags,
    counters: Counters,
}

struct PendingTimer {
    expires_ns: u64,
    seq: u64,
    cpu: CpuId,
    handler: IrqHandler,
}

#[derive(Default)]
struct HrState {
    pending: Vec<PendingTimer>,
    seq: u64,
    /// The explicit clock's time, in ns since the device was added.
    now_ns: u64,
}

/// The timer mode's hrtimers (the timer hardware, outside the kernel model: std locks).
struct Hrtimers {
    clock: HrtimerClock,
    epoch: Instant,
    state: std::sync::Mutex<HrState>,
    stop: AtomicBool,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl fmt::Debug for Hrtimers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hrtimers")
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Hrtimers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HrState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ns(&self, st: &HrState) -> u64 {
        match self.clock {
            HrtimerClock::Thread => self.epoch.elapsed().as_nanos() as u64,
            HrtimerClock::Explicit => st.now_ns,
        }
    }

    /// `hrtimer_start(&cmd->timer, ns_to_ktime(completion_nsec), HRTIMER_MODE_REL)` from `cx`,
    /// traced as `hrtimer_start`.
    fn start(&self, delay_ns: u64, cx: &Cpu, handler: IrqHandler) {
        let cpu = cx.id();
        {
            let mut st = self.lock();
            let expires_ns = self.now_ns(&st) + delay_ns;
            st.seq += 1;
            let seq = st.seq;
            trace_hrtimer_start(cx, seq, expires_ns);
            st.pending.push(PendingTimer {
                expires_ns,
                seq,
                cpu,
                handler,
            });
        }
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            t.thread().unpark();
        }
    }

    /// Takes the earliest timer if it is due at `now` (any, with `force`), with the clock's time
    /// at its expiry (`hrtimer_interrupt()`'s `now`).
    fn take_due(&self, force: bool) -> Option<(PendingTimer, u64)> {
        let mut st = self.lock();
        let now = self.now_ns(&st);
        let i =
            (0..st.pending.len()).min_by_key(|&i| (st.pending[i].expires_ns, st.pending[i].seq))?;
        if !force && st.pending[i].expires_ns > now {
            return None;
        }
        let t = st.pending.swap_remove(i);
        st.now_ns = st.now_ns.max(t.expires_ns);
        let fired = match self.clock {
            HrtimerClock::Thread => now,
            HrtimerClock::Explicit => st.now_ns,
        };
        Some((t, fired))
    }

    /// How long the timer thread may sleep.
    fn sleep_for(&self) -> Duration {
        let st = self.lock();
        let now = self.now_ns(&st);
        st.pending
            .iter()
            .map(|t| t.expires_ns.saturating_sub(now))
            .min()
            .map_or(Duration::from_millis(10), Duration::from_nanos)
            .min(Duration::from_millis(10))
    }
}

/// `hrtimer_interrupt()` → `__run_hrtimer()`: the expired timer's callback, delivered as an
/// interrupt on the CPU the request was submitted on (or, if it went offline, the first online
/// CPU, as the kernel migrates a dead CPU's hrtimers), between `hrtimer_expire_entry` (with the
/// clock's time `now` at the expiry) and `hrtimer_expire_exit`.
fn expire(kernel: &Kernel, (t, now): (PendingTimer, u64), shared: &Shared) {
    bump(&shared.counters.timer_fires);
    let PendingTimer {
        seq, cpu, handler, ..
    } = t;
    let run: IrqHandler = Box::new(move |cx: &Cpu| {
        trace_hrtimer_expire_entry(cx, seq, now);
        handler(cx);
        trace_hrtimer_expire_exit(cx, seq);
    });
    if let Err(e) = kernel.raise_irq(cpu, HRTIMER_IRQ, run) {
        if let Some(&other) = kernel.online_cpus().first() {
            let _ = kernel.raise_irq(other, HRTIMER_IRQ, e.handler);
        }
    }
}

/// `%p` of a command's `struct hrtimer` (`cmd->timer`). The kernel's command is per tag and
/// its timer reused; biosim's timer is keyed by its start's sequence number.
fn hrtimer_ptr(seq: u64) -> String {
    crate::kernel::hashed_ptr(crate::kernel::PtrKind::Hrtimer, seq)
}

/// `trace_hrtimer_start()` in `hrtimer_start_range_ns()`, under the base lock with IRQs off:
/// `expires` and `softexpires` are absolute (the clock's ns; biosim's clock starts when the
/// device is added), equal because `hrtimer_start()` passes no slack; `was_armed=0` because a
/// command's timer is started once per request.
fn trace_hrtimer_start(cx: &Cpu, seq: u64, expires_ns: u64) {
    crate::ktrace!(
        cx,
        target: "timer",
        "hrtimer_start",
        flags: cx.trace_flags_under(true, 1),
        "hrtimer={} function=null_cmd_timer_expired expires={} softexpires={} mode=REL was_armed=0",
        hrtimer_ptr(seq),
        expires_ns,
        expires_ns
    );
}

/// `trace_hrtimer_expire_entry()` in `__run_hrtimer()`: `now=%llu` is the clock at the expiry.
fn trace_hrtimer_expire_entry(cx: &Cpu, seq: u64, now_ns: u64) {
    crate::ktrace!(
        cx,
        target: "timer",
        "hrtimer_expire_entry",
        "hrtimer={} function=null_cmd_timer_expired now={}",
        hrtimer_ptr(seq),
        now_ns
    );
}

/// `trace_hrtimer_expire_exit()` after the callback returned `HRTIMER_NORESTART`.
fn trace_hrtimer_expire_exit(cx: &Cpu, seq: u64) {
    crate::ktrace!(
        cx,
        target: "timer",
        "hrtimer_expire_exit",
        "hrtimer={}",
        hrtimer_ptr(seq)
    );
}

/// `struct nullb` with its `struct nullb_device`: one `/dev/nullbN`.
pub struct NullBlk {
    /// The device's own reference, for [`BlockDriver::bdev`].
    me: crate::sync::UntrackedWeak<NullBlk>,
    index: u32,
    cfg: NullBlkConfig,
    blocksize: u32,
    kernel: UntrackedArc<Kernel>,
    shared: UntrackedArc<Shared>,
    /// `dev->data` (memory backing only), under `nullb->lock`.
    pages: Option<Mutex<NullbPages>>,
    hrtimers: UntrackedArc<Hrtimers>,
}

impl fmt::Debug for NullBlk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NullBlk")
            .field("index", &self.index)
            .field("cfg", &self.cfg.to_string())
            .finish_non_exhaustive()
    }
}

impl NullBlk {
    /// `null_add_dev()` after `null_validate_conf()`: device `nullb<index>`. `queue_mode=0` runs
    /// as blk-mq with the kernel's message; `queue_mode=1` and a zero `hw_queue_depth` (which
    /// `blk_mq_alloc_tag_set()` refuses) are errors. In timer mode with
    /// [`HrtimerClock::Thread`], the timer thread starts here and stops when the device drops.
    pub fn new(
        kernel: &UntrackedArc<Kernel>,
        index: u32,
        mut cfg: NullBlkConfig,
    ) -> Result<UntrackedArc<NullBlk>, String> {
        match cfg.queue_mode {
            NullQueueMode::Rq => {
                return Err("null_blk: legacy IO path is no longer available (queue_mode=1)".into())
            }
            NullQueueMode::Bio => {
                tracing::warn!(target: "null_blk", "null_blk: BIO-based IO path is no longer available, using blk-mq instead.");
                cfg.queue_mode = NullQueueMode::Mq;
            }
            NullQueueMode::Mq => {}
        }
        if cfg.hw_queue_depth == 0 {
            return Err("null_blk: hw_queue_depth=0: blk_mq_alloc_tag_set() needs at least one tag (-EINVAL)".into());
        }
        let blocksize = cfg.validated_blocksize()?;
        if cfg.hw_queue_depth > BLK_MQ_MAX_DEPTH {
            // blk_mq_alloc_tag_set().
            tracing::info!(target: "null_blk", "blk-mq: reduced tag depth to {BLK_MQ_MAX_DEPTH}");
            cfg.hw_queue_depth = cfg.tag_set_depth();
        }
        if cfg.discard && !cfg.memory_backed {
            // null_config_discard().
            tracing::info!(target: "null_blk", "null_blk: discard option is ignored without memory backing");
            cfg.discard = false;
        }
        let shared = UntrackedArc::new(Shared {
            tags: Tags {
                depth: cfg.hw_queue_depth as usize,
                in_use: AtomicUsize::new(0),
            },
            counters: Counters::default(),
        });
        let hrtimers = UntrackedArc::new(Hrtimers {
            clock: cfg.clock,
            epoch: Instant::now(),
            state: std::sync::Mutex::new(HrState::default()),
            stop: AtomicBool::new(false),
            thread: std::sync::Mutex::new(None),
        });
        if cfg.irqmode == NullIrqMode::Timer && cfg.clock == HrtimerClock::Thread {
            let (h, k, s) = (
                UntrackedArc::clone(&hrtimers),
                UntrackedArc::clone(kernel),
                UntrackedArc::clone(&shared),
            );
            let t = std::thread::Builder::new()
                .name(format!("nullb{index}-hrtimer"))
                .spawn(move || {
                    while !h.stop.load(Ordering::Acquire) {
                        match h.take_due(false) {
                            Some(t) => expire(&k, t, &s),
                            None => std::thread::park_timeout(h.sleep_for()),
                        }
                    }
                })
                .map_err(|e| format!("null_blk: cannot start the hrtimer thread: {e}"))?;
            *hrtimers.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
        }
        Ok(UntrackedArc::new_cyclic(|me| NullBlk {
            me: me.clone(),
            index,
            pages: cfg
                .memory_backed
                .then(|| Mutex::new(NullbPages::new(blocksize))),
            blocksize,
            cfg,
            kernel: UntrackedArc::clone(kernel),
            shared,
            hrtimers,
        }))
    }

    /// The configuration after validation.
    pub fn config(&self) -> &NullBlkConfig {
        &self.cfg
    }

    /// The counters so far.
    pub fn stats(&self) -> NullBlkStats {
        let c = &self.shared.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        NullBlkStats {
            submitted: g(&c.submitted),
            completed: g(&c.completed),
            irqs: g(&c.irqs),
            softirqs: g(&c.softirqs),
            timer_fires: g(&c.timer_fires),
            tag_waits: g(&c.tag_waits),
            tag_nowait_fails: g(&c.tag_nowait_fails),
        }
    }

    /// Tags in use: requests between `blk_mq_get_tag()` and `end_cmd()`.
    pub fn tags_in_use(&self) -> usize {
        self.shared.tags.in_use.load(Ordering::Acquire)
    }

    /// Timer-mode requests whose hrtimer has not expired.
    pub fn hrtimers_pending(&self) -> usize {
        self.hrtimers.lock().pending.len()
    }

    /// The hrtimers' clock now, in ns since the device was added: with
    /// [`HrtimerClock::Explicit`], the simulated time, which only [`NullBlk::fire_next_hrtimer`]
    /// moves (to the expiry it fires); with [`HrtimerClock::Thread`], real time.
    pub fn hrtimer_clock_ns(&self) -> u64 {
        let st = self.hrtimers.lock();
        self.hrtimers.now_ns(&st)
    }

    /// The explicit clock's next expiry, in ns since the device was added.
    pub fn next_hrtimer_expiry(&self) -> Option<u64> {
        self.hrtimers
            .lock()
            .pending
            .iter()
            .map(|t| t.expires_ns)
            .min()
    }

    /// The explicit event of [`HrtimerClock::Explicit`]: the earliest pending hrtimer expires
    /// now (the device's clock moves to its expiry) and its interrupt is raised on the
    /// submitting CPU, for the runtime to deliver. Returns whether there was one.
    pub fn fire_next_hrtimer(&self) -> bool {
        match self.hrtimers.take_due(true) {
            Some(t) => {
                expire(&self.kernel, t, &self.shared);
                true
            }
            None => false,
        }
    }

    /// Pages the memory backing holds.
    pub fn nr_pages(&self) -> usize {
        self.pages.as_ref().map_or(0, |p| p.lock().nr_pages())
    }

    /// Reads the memory backing directly (no request): `len` bytes at byte `pos`, zeroes where
    /// nothing was written. `None` without memory backing.
    pub fn read_backing(&self, pos: u64, len: usize) -> Option<Vec<u8>> {
        let pages = self.pages.as_ref()?;
        let mut buf = vec![0; len];
        pages.lock().copy_from_nullb(&mut buf, pos >> SECTOR_SHIFT);
        Some(buf)
    }

    /// Fault injection for checkers' buggy twins (the kernel's null_blk has none for data):
    /// flips every bit of the stored byte at `pos`, as silent media corruption would. Returns
    /// whether a stored block held it (nothing to corrupt in a hole or without memory backing).
    pub fn corrupt_stored_byte(&self, pos: u64) -> bool {
        let Some(pages) = self.pages.as_ref() else {
            return false;
        };
        pages.lock().flip_byte(pos)
    }

    fn rq(&self, bio: &Bio) -> RqTrace {
        RqTrace {
            dev: self.devt(),
            rwbs: bio.bi_opf.rwbs_buf(),
            sector: bio.bi_iter.bi_sector,
            nr_sector: bio.sectors(),
        }
    }

    /// `blk_mq_get_tag()`: a free tag, else sleep (`io_schedule()` on the tag wait queue) until
    /// one is freed; a `REQ_NOWAIT` bio does not sleep and ends `BLK_STS_AGAIN`
    /// (`blk_mq_submit_bio()` → `bio_wouldblock_error()`). Returns the bio when it got a tag.
    fn blk_mq_get_tag(&self, bio: Box<Bio>, cx: &Cpu) -> Option<Box<Bio>> {
        let tags = &self.shared.tags;
        if tags.try_get() {
            return Some(bio);
        }
        if bio.bi_opf.flags.contains(ReqFlags::REQ_NOWAIT) {
            bump(&self.shared.counters.tag_nowait_fails);
            bio_wouldblock_error(bio, cx);
            return None;
        }
        bump(&self.shared.counters.tag_waits);
        let _ = cx.might_sleep_at("block/blk-mq-tag.c:blk_mq_get_tag");
        if cx.wait_until("blk_mq_get_tag", &|| tags.try_get()) {
            return Some(bio);
        }
        // Without a runtime to run the completions, the kernel would sleep forever.
        cx.kernel().warn_once(
            cx,
            "block/blk-mq-tag.c:blk_mq_get_tag",
            &format!(
                "block/blk-mq-tag.c: nullb{}: no tag freed while waiting (hw_queue_depth={})",
                self.index, self.cfg.hw_queue_depth
            ),
        );
        bio_endio_status(bio, BLK_STS_IOERR, cx);
        None
    }

    /// `null_queue_rq()`: `blk_mq_start_request()`, `null_handle_cmd()`, then
    /// `nullb_complete_cmd()` by `irqmode`.
    fn null_queue_rq(&self, mut bio: Box<Bio>, cx: &Cpu) {
        bump(&self.shared.counters.submitted);
        let rq = self.rq(&bio);
        block_rq_issue(&rq, cx);
        let status = self.null_handle_cmd(&mut bio);
        let shared = UntrackedArc::clone(&self.shared);
        let end = move |cx: &Cpu| end_cmd(&shared, rq, bio, status, cx);
        match self.cfg.irqmode {
            NullIrqMode::None => end(cx),
            NullIrqMode::Softirq => {
                // blk_mq_complete_request() → blk_mq_complete_request_remote(): the submitting
                // CPU with a one-CPU context set completes inline; otherwise a one-queue device
                // raises BLOCK_SOFTIRQ here (blk_mq_raise_softirq()).
                if cx.kernel().nr_cpus() > 1 {
                    bump(&self.shared.counters.softirqs);
                    cx.kernel()
                        .raise_softirq(cx, SoftirqVec::Block, Box::new(end));
                } else {
                    end(cx);
                }
            }
            NullIrqMode::Timer => {
                let shared = UntrackedArc::clone(&self.shared);
                // null_cmd_timer_expired() → end_cmd(), in hardirq on the submitting CPU.
                let handler: IrqHandler = Box::new(move |cx: &Cpu| {
                    bump(&shared.counters.irqs);
                    end(cx)
                });
                self.hrtimers.start(self.cfg.completion_nsec, cx, handler);
            }
        }
    }

    /// `null_handle_cmd()` → `null_handle_memory_backed()`: with memory backing, reads and
    /// writes copy between the bio's segments and the pages (`null_transfer()`), a discard
    /// frees sectors; without, nothing is touched (a read leaves its buffer as it was).
    fn null_handle_cmd(&self, bio: &mut Bio) -> BlkStatus {
        let Some(pages) = self.pages.as_ref() else {
            return BLK_STS_OK;
        };
        let mut sector = bio.bi_iter.bi_sector;
        let mut p = pages.lock();
        match bio.op() {
            ReqOp::Read => {
                for v in bio.bi_io_vec.iter_mut() {
                    p.copy_from_nullb(&mut v.data, sector);
                    sector += (v.data.len() as u64) >> SECTOR_SHIFT;
                }
            }
            ReqOp::Write => {
                for v in &bio.bi_io_vec {
                    p.copy_to_nullb(&v.data, sector);
                    sector += (v.data.len() as u64) >> SECTOR_SHIFT;
                }
            }
            ReqOp::Discard => p.discard(sector, bio.sectors()),
            // Neither reaches the driver: no write cache (flushes are stripped) and no
            // write-zeroes limit (submit_bio_noacct() refuses it).
            ReqOp::Flush | ReqOp::WriteZeroes => {}
        }
        BLK_STS_OK
    }
}

/// `end_cmd()` → `blk_mq_end_request()`: `block_rq_complete`, the bio's end, then the tag back
/// (`blk_mq_free_request()`).
fn end_cmd(shared: &Shared, rq: RqTrace, bio: Box<Bio>, status: BlkStatus, cx: &Cpu) {
    block_rq_complete(&rq, blk_status_to_errno(status), cx);
    bio_endio_status(bio, status, cx);
    bump(&shared.counters.completed);
    shared.tags.put();
}

impl Drop for NullBlk {
    /// `null_del_dev()`: stops the timer thread.
    fn drop(&mut self) {
        self.hrtimers.stop.store(true, Ordering::Release);
        let t = self
            .hrtimers
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = t {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl BlockDriver for NullBlk {
    fn bdev(&self) -> Option<UntrackedArc<dyn BlockDriver>> {
        self.me
            .upgrade()
            .map(|a| a as UntrackedArc<dyn BlockDriver>)
    }

    fn disk_name(&self) -> String {
        format!("nullb{}", self.index)
    }

    fn devt(&self) -> (u32, u32) {
        (NULL_MAJOR, self.index)
    }

    /// `null_add_dev()`'s limits: `logical_block_size = physical_block_size = blocksize`,
    /// `BLK_FEAT_NOWAIT` (every blk-mq queue), no write cache (`cache_size=0`), discard only with
    /// memory backing and `discard=1`, no write-zeroes.
    fn limits(&self) -> QueueLimits {
        QueueLimits {
            logical_block_size: self.blocksize,
            nowait: true,
            write_cache: false,
            fua: false,
            discard: self.cfg.discard,
            write_zeroes: false,
            ..QueueLimits::new(self.cfg.size_bytes)
        }
    }

    /// `blk_mq_submit_bio()`: a tag (`blk_mq_get_tag()`), the request (`block_getrq`), issued
    /// directly (no scheduler, no plug), so `->queue_rq()` runs in the submitter's context.
    fn submit_bio(&self, bio: Box<Bio>, cx: &Cpu) {
        let Some(bio) = self.blk_mq_get_tag(bio, cx) else {
            return;
        };
        block_getrq(&self.rq(&bio), cx);
        self.null_queue_rq(bio, cx);
    }
}
