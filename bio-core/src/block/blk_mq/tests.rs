//! The submission path end to end: `current->bio_list` order, the plug, tags, the rq-qos
//! throttle, `BLK_MQ_F_BLOCKING` dispatch and a request completed twice.

use super::*;
use crate::block::blk_core::submit_bio_noacct;
use crate::block::blk_plug::{blk_finish_plug, blk_start_plug, BLK_MAX_REQUEST_COUNT};
use crate::block::{
    BioEndIo, BlockDriver, QueueLimits, ReqFlags, ReqOp, BLK_STS_AGAIN, BLK_STS_RESOURCE,
};
use crate::kernel::trace::tests::capture;
use crate::kernel::{CpuId, KernelConfig, Runtime};
use crate::sync::untracked::AtomicBool as UAtomicBool;
use crate::sync::untracked::Ordering as UOrdering;
use crate::Kernel;
use std::cell::RefCell;

/// A runtime whose `wait_until` runs queued events (other tasks' work, interrupts) one at a
/// time until the condition holds, and gives up when none is left: the deterministic runtime's
/// contract, reduced to a list.
#[derive(Default)]
pub(crate) struct EventRuntime {
    events: RefCell<VecDeque<Box<dyn FnOnce()>>>,
}

impl EventRuntime {
    pub(crate) fn push(&self, f: impl FnOnce() + 'static) {
        self.events.borrow_mut().push_back(Box::new(f));
    }
}

/// A context on `cpu` run by a fresh [`EventRuntime`]. (`Runtime` is deliberately neither
/// `Send` nor `Sync`: a context and its runtime live on one thread.)
#[allow(clippy::arc_with_non_send_sync)]
fn event_cpu(k: &UntrackedArc<Kernel>, cpu: CpuId) -> (UntrackedArc<EventRuntime>, Cpu) {
    let rt = UntrackedArc::new(EventRuntime::default());
    let cx = k
        .cpu_with_runtime(cpu, UntrackedArc::clone(&rt) as UntrackedArc<dyn Runtime>)
        .unwrap();
    (rt, cx)
}

impl Runtime for EventRuntime {
    fn irq_window(&self, _cpu: &Cpu) {}
    fn wait_until(&self, _cpu: &Cpu, _what: &str, cond: &dyn Fn() -> bool) -> bool {
        loop {
            if cond() {
                return true;
            }
            let next = self.events.borrow_mut().pop_front();
            match next {
                Some(f) => f(),
                None => return false,
            }
        }
    }
}

/// What a test driver's `->queue_rq()` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Start and end the request at once.
    Complete,
    /// Start it and keep it in flight (ended later by the test).
    Hold,
}

/// A blk-mq test driver: logs each `->queue_rq()`, optionally sleeps in it, submits a bio to
/// `lower` for each request (a stacking driver), or answers `BLK_STS_RESOURCE` once.
pub(crate) struct MqDev {
    name: &'static str,
    q: UntrackedArc<RequestQueue>,
    me: UntrackedWeak<MqDev>,
    mode: Mode,
    sleep_in_queue_rq: bool,
    resource_once: UAtomicBool,
    lower: Option<UntrackedArc<dyn BlockDriver>>,
    pub(crate) log: UntrackedArc<Mutex<Vec<String>>>,
    held: Mutex<VecDeque<Rq>>,
}

impl fmt::Debug for MqDev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MqDev({})", self.name)
    }
}

pub(crate) struct MqDevCfg {
    name: &'static str,
    minor: u32,
    depth: usize,
    flags: u32,
    mode: Mode,
    sleep_in_queue_rq: bool,
    wbt: Option<u32>,
    lower: Option<UntrackedArc<dyn BlockDriver>>,
    log: UntrackedArc<Mutex<Vec<String>>>,
    /// The queue's `max_sectors`.
    max_sectors: u64,
    /// The queue's `max_segments`.
    max_segments: u32,
}

impl MqDevCfg {
    pub(crate) fn new(
        name: &'static str,
        minor: u32,
        log: &UntrackedArc<Mutex<Vec<String>>>,
    ) -> Self {
        MqDevCfg {
            name,
            minor,
            depth: 64,
            flags: 0,
            mode: Mode::Complete,
            sleep_in_queue_rq: false,
            wbt: None,
            lower: None,
            log: UntrackedArc::clone(log),
            max_sectors: BLK_DEF_MAX_SECTORS_CAP,
            max_segments: crate::block::blk_mq::BLK_MAX_SEGMENTS,
        }
    }

    pub(crate) fn build(self) -> UntrackedArc<MqDev> {
        UntrackedArc::new_cyclic(|me: &UntrackedWeak<MqDev>| {
            let ops: UntrackedWeak<dyn BlkMqOps> = me.clone();
            let mut q = RequestQueue::new((250, self.minor), self.depth, self.flags, ops);
            q.max_sectors = self.max_sectors;
            q.max_segments = self.max_segments;
            if let Some(l) = self.wbt {
                q = q.with_wbt(l);
            }
            MqDev {
                name: self.name,
                q: UntrackedArc::new(q),
                me: me.clone(),
                mode: self.mode,
                sleep_in_queue_rq: self.sleep_in_queue_rq,
                resource_once: UAtomicBool::new(false),
                lower: self.lower,
                log: self.log,
                held: Mutex::new(VecDeque::new()),
            }
        })
    }
}

impl MqDev {
    /// Ends the oldest held request `BLK_STS_OK`.
    fn complete_one(&self, cx: &Cpu) -> bool {
        let rq = self.held.lock().pop_front();
        match rq {
            Some(rq) => {
                blk_mq_end_request(&rq, BLK_STS_OK, cx);
                true
            }
            None => false,
        }
    }
}

impl BlkMqOps for MqDev {
    fn queue_rq(&self, rq: &Rq, cx: &Cpu) -> BlkStatus {
        if self.resource_once.swap(false, UOrdering::Relaxed) {
            self.log
                .lock()
                .push(format!("{}: BLK_STS_RESOURCE", self.name));
            return BLK_STS_RESOURCE;
        }
        blk_mq_start_request(rq, cx);
        let t = rq.trace();
        self.log
            .lock()
            .push(format!("{}: queue_rq {}", self.name, t.sector));
        if self.sleep_in_queue_rq {
            let _ = cx.might_sleep_at("test: queue_rq sleeps");
        }
        if let Some(lower) = &self.lower {
            let bio = cx
                .kernel()
                .bio_alloc(ReqOp::Write, t.sector)
                .with_data(vec![0; 512]);
            submit_bio_noacct(bio, &**lower, cx);
            self.log
                .lock()
                .push(format!("{}: queue_rq {} returns", self.name, t.sector));
        }
        match self.mode {
            Mode::Complete => blk_mq_end_request(rq, BLK_STS_OK, cx),
            Mode::Hold => self.held.lock().push_back(rq.clone()),
        }
        BLK_STS_OK
    }
}

impl BlockDriver for MqDev {
    fn disk_name(&self) -> String {
        self.name.into()
    }
    fn devt(&self) -> (u32, u32) {
        self.q.devt
    }
    fn limits(&self) -> QueueLimits {
        QueueLimits {
            nowait: true,
            ..QueueLimits::new(1 << 30)
        }
    }
    fn submit_bio(&self, bio: Box<Bio>, cx: &Cpu) {
        // Never called: a blk-mq queue goes through blk_mq_submit_bio().
        cx.warn("test: MqDev::submit_bio called for a blk-mq queue");
        bio_endio_status(bio, BLK_STS_IOERR, cx);
    }
    fn bdev(&self) -> Option<UntrackedArc<dyn BlockDriver>> {
        self.me
            .upgrade()
            .map(|a| a as UntrackedArc<dyn BlockDriver>)
    }
    fn mq_queue(&self) -> Option<UntrackedArc<RequestQueue>> {
        Some(UntrackedArc::clone(&self.q))
    }
}

/// Submits a 512-byte bio at `sector` with `flags`, recording its end status in `ends`.
fn submit(
    dev: &dyn BlockDriver,
    op: ReqOp,
    sector: u64,
    flags: ReqFlags,
    ends: &UntrackedArc<Mutex<Vec<(u64, BlkStatus)>>>,
    cx: &Cpu,
) {
    let e = UntrackedArc::clone(ends);
    let bio = cx
        .kernel()
        .bio_alloc(op, sector)
        .with_flags(flags)
        .with_data(vec![0; 512])
        .with_end_io(BioEndIo::new("test_end_io", move |b, _| {
            e.lock().push((b.bi_iter.bi_sector, b.status()))
        }));
    submit_bio_noacct(bio, dev, cx);
}

/// Fires the plug tracepoints once outside any capture, so their callsites are registered
/// before a test's `capture()` installs its subscriber (whose creation rebuilds every
/// registered callsite's interest): a callsite first hit by a parallel test without a
/// subscriber while another test's subscriber is being created can otherwise keep a stale
/// "never" interest (tracing-core's registration race).
fn register_plug_callsites(cx: &Cpu) {
    crate::block::blk_plug::block_plug(cx);
    crate::block::blk_plug::block_unplug(0, true, cx);
}

fn log() -> UntrackedArc<Mutex<Vec<String>>> {
    UntrackedArc::new(Mutex::new(Vec::new()))
}

fn ends() -> UntrackedArc<Mutex<Vec<(u64, BlkStatus)>>> {
    UntrackedArc::new(Mutex::new(Vec::new()))
}

mod bio_list {
    use super::*;

    /// A bio-based driver that, for a bio at sector 0, submits one bio to itself (sector 100)
    /// and two to `lower` (sectors 1, 2), and for the bio at sector 100 one more to `lower`
    /// (sector 3): a stacked driver remapping to a lower device and splitting to itself.
    #[derive(Debug)]
    struct Stacker {
        me: UntrackedWeak<Stacker>,
        lower: UntrackedArc<dyn BlockDriver>,
        log: UntrackedArc<Mutex<Vec<String>>>,
    }

    impl BlockDriver for Stacker {
        fn disk_name(&self) -> String {
            "md0".into()
        }
        fn devt(&self) -> (u32, u32) {
            (9, 0)
        }
        fn limits(&self) -> QueueLimits {
            QueueLimits::new(1 << 30)
        }
        fn submit_bio(&self, bio: Box<Bio>, cx: &Cpu) {
            let s = bio.bi_iter.bi_sector;
            self.log.lock().push(format!("md0: submit_bio {s}"));
            let k = cx.kernel();
            let mk = |sector| k.bio_alloc(ReqOp::Write, sector).with_data(vec![0; 512]);
            if s == 0 {
                submit_bio_noacct(mk(100), self, cx);
                submit_bio_noacct(mk(1), &*self.lower, cx);
                submit_bio_noacct(mk(2), &*self.lower, cx);
            } else if s == 100 {
                submit_bio_noacct(mk(3), &*self.lower, cx);
            }
            self.log.lock().push(format!("md0: submit_bio {s} returns"));
            bio_endio_status(bio, BLK_STS_OK, cx);
        }
        fn bdev(&self) -> Option<UntrackedArc<dyn BlockDriver>> {
            self.me
                .upgrade()
                .map(|a| a as UntrackedArc<dyn BlockDriver>)
        }
    }

    /// `__submit_bio_noacct()`: nothing recurses; after `md0`'s bio, its lower bios (1, 2, in
    /// submission order) run before its own split (100), whose lower bio (3) runs last.
    #[test]
    #[cfg_attr(feature = "bug-bio-list-lifo", should_panic)]
    fn a_stacked_submit_runs_lower_bios_first_then_the_same_queues() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let lower: UntrackedArc<dyn BlockDriver> = MqDevCfg::new("sda", 0, &log).build();
        let md = UntrackedArc::new_cyclic(|me: &UntrackedWeak<Stacker>| Stacker {
            me: me.clone(),
            lower,
            log: UntrackedArc::clone(&log),
        });
        let bio = k.bio_alloc(ReqOp::Write, 0).with_data(vec![0; 512]);
        submit_bio_noacct(bio, &*md, &cx);
        assert_eq!(
            *log.lock(),
            [
                "md0: submit_bio 0",
                "md0: submit_bio 0 returns",
                "sda: queue_rq 1",
                "sda: queue_rq 2",
                "md0: submit_bio 100",
                "md0: submit_bio 100 returns",
                "sda: queue_rq 3",
            ]
        );
        assert!(cx.task_state().bio_list.borrow().is_none());
        assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    }

    /// `__submit_bio_noacct_mq()`: a stacking blk-mq driver's `->queue_rq()` submits to its
    /// lower device; the lower bio waits on `current->bio_list` until `->queue_rq()` returns.
    #[test]
    fn a_blk_mq_stacking_driver_s_lower_bio_runs_after_its_queue_rq() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let lower: UntrackedArc<dyn BlockDriver> = MqDevCfg::new("sda", 0, &log).build();
        let upper = MqDevCfg {
            lower: Some(lower),
            ..MqDevCfg::new("loop0", 1, &log)
        }
        .build();
        let e = ends();
        submit(&*upper, ReqOp::Write, 8, ReqFlags::NONE, &e, &cx);
        assert_eq!(
            *log.lock(),
            [
                "loop0: queue_rq 8",
                "loop0: queue_rq 8 returns",
                "sda: queue_rq 8"
            ]
        );
        assert_eq!(*e.lock(), [(8, BLK_STS_OK)]);
    }
}

mod plug {
    use super::*;

    /// Requests wait in the plug (`block_plug` once) and `blk_finish_plug()` issues them
    /// (`block_unplug` with their number).
    #[test]
    fn a_plug_holds_requests_until_blk_finish_plug() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg::new("nullb0", 0, &log).build();
        let e = ends();
        register_plug_callsites(&cx);
        let ev = capture(|| {
            let plug = blk_start_plug(&cx);
            for s in [0, 8, 16] {
                submit(&*dev, ReqOp::Write, s, ReqFlags::NONE, &e, &cx);
            }
            assert!(log.lock().is_empty(), "nothing issued while plugged");
            assert_eq!(dev.q.tags.busy(), 3);
            blk_finish_plug(plug, &cx);
        });
        assert_eq!(log.lock().len(), 3);
        assert_eq!(e.lock().len(), 3);
        let msgs: Vec<&str> = ev.iter().map(|e| e.message.as_str()).collect();
        let plugs: Vec<&&str> = msgs
            .iter()
            .filter(|m| m.starts_with("block_plug"))
            .collect();
        let unplugs: Vec<&&str> = msgs
            .iter()
            .filter(|m| m.starts_with("block_unplug"))
            .collect();
        assert_eq!(plugs, [&"block_plug: [biosim/0]"]);
        assert_eq!(unplugs, [&"block_unplug: [biosim/0] 3"], "{msgs:?}");
        // block_getrq/rq_* are checked by blk_mq_trace's own tests.
        let plug_events: Vec<_> = ev
            .iter()
            .filter(|e| e.tracepoint.contains("plug"))
            .cloned()
            .collect();
        assert_eq!(plug_events.len(), 2);
        assert_eq!(
            crate::kernel::trace::tests::check_formats(&plug_events),
            Vec::<String>::new()
        );
        assert!(cx.task_state().plug.borrow().is_none());
    }

    /// With the tracepoints' static keys off (`Kernel::set_tracepoints_enabled(false)`: no probe
    /// attached), the same plugged I/O completes alike and fires no event at all: not the
    /// `ktrace!` ones (`block_bio_queue`, `block_plug`, `block_unplug`), not the request ones
    /// whose arguments `blk_mq` reads from the tag slot (`block_getrq`, `block_rq_issue`,
    /// `block_rq_complete`). On again, they all come back.
    #[test]
    fn with_the_tracepoints_off_a_request_fires_no_event() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg::new("nullb0", 0, &log).build();
        let e = ends();
        register_plug_callsites(&cx);
        let run = |sector: u64| {
            let plug = blk_start_plug(&cx);
            submit(&*dev, ReqOp::Write, sector, ReqFlags::NONE, &e, &cx);
            blk_finish_plug(plug, &cx);
            while dev.complete_one(&cx) {}
        };
        assert!(k.tracepoints_enabled(), "on by default");
        k.set_tracepoints_enabled(false);
        assert!(!cx.tracepoints_enabled());
        let off = capture(|| run(0));
        assert_eq!(e.lock().len(), 1, "the I/O completed");
        let names: Vec<&str> = off.iter().map(|c| c.tracepoint.as_str()).collect();
        assert!(names.is_empty(), "{names:?}");
        k.set_tracepoints_enabled(true);
        let on = capture(|| run(8));
        assert_eq!(e.lock().len(), 2);
        let names: Vec<&str> = on.iter().map(|c| c.tracepoint.as_str()).collect();
        for want in [
            "block_bio_queue",
            "block_getrq",
            "block_plug",
            "block_unplug",
            "block_rq_issue",
            "block_rq_complete",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
    }

    /// `blk_add_rq_to_plug()`: the request after `BLK_MAX_REQUEST_COUNT` flushes the plug first.
    #[test]
    fn a_full_plug_is_flushed_at_blk_max_request_count() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg::new("nullb0", 0, &log).build();
        let e = ends();
        let plug = blk_start_plug(&cx);
        for s in 0..BLK_MAX_REQUEST_COUNT as u64 {
            submit(&*dev, ReqOp::Read, s * 8, ReqFlags::NONE, &e, &cx);
        }
        assert_eq!(log.lock().len(), 0);
        submit(&*dev, ReqOp::Read, 4096, ReqFlags::NONE, &e, &cx);
        assert_eq!(log.lock().len(), BLK_MAX_REQUEST_COUNT);
        blk_finish_plug(plug, &cx);
        assert_eq!(log.lock().len(), BLK_MAX_REQUEST_COUNT + 1);
    }

    /// The plug's list allocates nothing after the task's first plug (the kernel's is on the
    /// stack): the next `blk_start_plug()` gets the buffer back, empty, so a plug never
    /// re-issues a request of an earlier one.
    #[test]
    fn a_new_plug_reuses_the_last_plug_s_list_empty() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg::new("nullb0", 0, &log).build();
        let e = ends();
        let plug = blk_start_plug(&cx);
        for s in 0..4u64 {
            submit(&*dev, ReqOp::Read, s * 8, ReqFlags::NONE, &e, &cx);
        }
        blk_finish_plug(plug, &cx);
        assert_eq!(log.lock().len(), 4);
        let kept = cx.task_state().plug_storage.borrow().capacity();
        assert!(kept >= 4, "the flushed list's buffer is kept ({kept})");
        let plug = blk_start_plug(&cx);
        {
            let g = cx.task_state().plug.borrow();
            let p = g.as_ref().unwrap();
            assert!(p.mq_list.is_empty() && p.rq_count == 0);
            assert_eq!(
                p.mq_list.capacity(),
                kept,
                "the same buffer, no new allocation"
            );
        }
        submit(&*dev, ReqOp::Read, 64, ReqFlags::NONE, &e, &cx);
        blk_finish_plug(plug, &cx);
        assert_eq!(log.lock().len(), 5, "only the new request is issued");
        assert_eq!(e.lock().len(), 5);
    }

    /// `schedule()` flushes the plug: a task that sleeps waiting for its own plugged I/O does
    /// not wait forever. The flush skips the direct issue: the requests are inserted and the
    /// queue runs on kblockd, so `->queue_rq()` runs in `kworker/0:1H`, not in the sleeper.
    #[test]
    fn sleeping_flushes_the_plug_to_kblockd() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let (rt, cx) = event_cpu(&k, CpuId(0));
        let log = log();
        let dev = MqDevCfg::new("nullb0", 0, &log).build();
        let e = ends();
        let plug = blk_start_plug(&cx);
        submit(&*dev, ReqOp::Write, 0, ReqFlags::NONE, &e, &cx);
        submit(&*dev, ReqOp::Write, 8, ReqFlags::NONE, &e, &cx);
        // The one other event: CPU 0's highpri worker runs what is queued on kblockd.
        let (k2, log2) = (UntrackedArc::clone(&k), UntrackedArc::clone(&log));
        let seen = UntrackedArc::new(Mutex::new(None));
        let seen2 = UntrackedArc::clone(&seen);
        rt.push(move || {
            let w = k2.cpu(CpuId(0)).unwrap();
            let before = log2.lock().len();
            let ran = k2.run_worker(crate::workqueue::PoolId::Cpu(CpuId(0)), &w);
            *seen2.lock() = Some((before, ran.map(|r| (r.function, r.workqueue))));
        });
        let e2 = UntrackedArc::clone(&e);
        register_plug_callsites(&cx);
        let ev = capture(|| assert!(cx.wait_until("test_wait", &|| e2.lock().len() == 2)));
        assert_eq!(
            *seen.lock(),
            Some((0, Some(("blk_mq_run_work_fn", "kblockd".to_owned())))),
            "nothing reached the driver before kblockd's work ran it"
        );
        for e in &ev {
            let comm = e.comm.as_deref().unwrap_or("?");
            println!("{comm}-{} {}", e.pid.unwrap_or(0), e.message);
        }
        let msgs: Vec<&str> = ev.iter().map(|e| e.message.as_str()).collect();
        let at = |p: &str| msgs.iter().position(|m| m.starts_with(p));
        let unplug = at("block_unplug: [biosim/0] 2").expect("unplug");
        let insert = at("block_rq_insert: 250,0 W 512 () 0 + 1").expect("insert");
        let queued = at("workqueue_queue_work: ").expect("queued");
        assert!(msgs[queued].contains("function=blk_mq_run_work_fn workqueue=kblockd"));
        let issue = at("block_rq_issue: 250,0 W 512 () 0 + 1").expect("issue");
        assert!(
            unplug < insert && insert < queued && queued < issue,
            "{msgs:?}"
        );
        assert_eq!(ev[issue].comm.as_deref(), Some("kworker/0:1H"), "{msgs:?}");
        blk_finish_plug(plug, &cx);
        assert_eq!(e.lock().len(), 2);
        assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    }

    /// With the post-6.18 fix, a stacking driver's `->queue_rq()` during an explicit flush
    /// submits to its lower queue: that request goes to a fresh plug batch, flushed by the same
    /// `blk_finish_plug()`.
    #[test]
    #[cfg_attr(feature = "bug-plug-flush-no-splice", should_panic)]
    fn a_queue_rq_that_submits_during_a_flush_gets_a_fresh_batch() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        k.set_blk_plug_list_fix(true);
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let lower: UntrackedArc<dyn BlockDriver> = MqDevCfg::new("sda", 0, &log).build();
        let upper = MqDevCfg {
            lower: Some(lower),
            ..MqDevCfg::new("loop0", 1, &log)
        }
        .build();
        let e = ends();
        let plug = blk_start_plug(&cx);
        submit(&*upper, ReqOp::Write, 0, ReqFlags::NONE, &e, &cx);
        submit(&*upper, ReqOp::Write, 8, ReqFlags::NONE, &e, &cx);
        blk_finish_plug(plug, &cx);
        assert_eq!(
            *log.lock(),
            [
                "loop0: queue_rq 0",
                "loop0: queue_rq 0 returns",
                "loop0: queue_rq 8",
                "loop0: queue_rq 8 returns",
                "sda: queue_rq 0",
                "sda: queue_rq 8",
            ]
        );
        assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    }
}

/// 6.18 as released: the same stacked submit during an explicit flush adds to the plug list
/// being walked (the kernel's list corruption), and the WARN says so.
#[test]
fn on_6_18_a_queue_rq_that_submits_during_a_flush_corrupts_the_plug_list() {
    let k = Kernel::new(KernelConfig::default(), 1).unwrap();
    assert!(!k.blk_plug_list_fix());
    let cx = k.cpu(CpuId(0)).unwrap();
    let log = log();
    let lower: UntrackedArc<dyn BlockDriver> = MqDevCfg::new("sda", 0, &log).build();
    let upper = MqDevCfg {
        lower: Some(lower),
        ..MqDevCfg::new("loop0", 1, &log)
    }
    .build();
    let e = ends();
    let plug = blk_start_plug(&cx);
    submit(&*upper, ReqOp::Write, 0, ReqFlags::NONE, &e, &cx);
    blk_finish_plug(plug, &cx);
    let warns = k.reports().of_kind(ReportKind::Warn);
    assert_eq!(warns.len(), 1, "{:?}", k.reports().all());
    assert!(
        warns[0]
            .message
            .contains("request added to plug->mq_list while blk_mq_flush_plug_list() walks it"),
        "{}",
        warns[0].message
    );
}

mod tags {
    use super::*;

    /// Every tag busy: a `REQ_NOWAIT` bio ends `BLK_STS_AGAIN`; a blocking one sleeps until a
    /// completion frees a tag.
    #[test]
    fn nowait_gets_blk_sts_again_and_a_sleeper_gets_the_freed_tag() {
        let k = Kernel::new(KernelConfig::default(), 2).unwrap();
        let (rt, cx) = event_cpu(&k, CpuId(0));
        let log = log();
        let dev = MqDevCfg {
            depth: 1,
            mode: Mode::Hold,
            ..MqDevCfg::new("nullb0", 0, &log)
        }
        .build();
        let e = ends();
        submit(&*dev, ReqOp::Write, 0, ReqFlags::NONE, &e, &cx);
        assert_eq!(dev.q.tags.busy(), 1);
        submit(&*dev, ReqOp::Write, 8, ReqFlags::REQ_NOWAIT, &e, &cx);
        assert_eq!(*e.lock(), [(8, BLK_STS_AGAIN)]);
        // The interrupt that completes the first request, on the other CPU.
        let (d2, k2) = (UntrackedArc::clone(&dev), UntrackedArc::clone(&k));
        rt.push(move || {
            let cx1 = k2.cpu(CpuId(1)).unwrap();
            assert!(d2.complete_one(&cx1));
        });
        submit(&*dev, ReqOp::Write, 16, ReqFlags::NONE, &e, &cx);
        assert_eq!(*e.lock(), [(8, BLK_STS_AGAIN), (0, BLK_STS_OK)]);
        assert_eq!(*log.lock(), ["nullb0: queue_rq 0", "nullb0: queue_rq 16"]);
        assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    }

    /// With nothing that could free a tag, the sleep is reported and the bio failed, once.
    #[test]
    fn a_tag_sleep_that_cannot_end_is_reported() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg {
            depth: 1,
            mode: Mode::Hold,
            ..MqDevCfg::new("nullb0", 0, &log)
        }
        .build();
        let e = ends();
        submit(&*dev, ReqOp::Write, 0, ReqFlags::NONE, &e, &cx);
        submit(&*dev, ReqOp::Write, 8, ReqFlags::NONE, &e, &cx);
        assert_eq!(*e.lock(), [(8, BLK_STS_IOERR)]);
        let r = k.reports().of_kind(ReportKind::Bug);
        assert_eq!(r.len(), 1);
        assert!(r[0].message.contains("blk_mq_get_tag"), "{}", r[0].message);
        println!("{}", r[0]);
    }
}

mod wbt {
    use super::*;

    type Throttled = (
        UntrackedArc<Kernel>,
        UntrackedArc<EventRuntime>,
        Cpu,
        UntrackedArc<MqDev>,
        UntrackedArc<Mutex<Vec<String>>>,
    );

    fn throttled(limit: u32) -> Throttled {
        let k = Kernel::new(KernelConfig::default(), 2).unwrap();
        let (rt, cx) = event_cpu(&k, CpuId(0));
        let log = log();
        let dev = MqDevCfg {
            mode: Mode::Hold,
            wbt: Some(limit),
            ..MqDevCfg::new("nullb0", 0, &log)
        }
        .build();
        (k, rt, cx, dev, log)
    }

    /// A write over the limit sleeps in `wbt_wait()` and goes on when a completion's
    /// `wbt_done()` hands it the slot.
    #[test]
    #[cfg_attr(feature = "bug-wbt-no-wakeup", should_panic)]
    fn a_writer_over_the_limit_waits_for_a_completion() {
        let (k, rt, cx, dev, log) = throttled(1);
        let e = ends();
        submit(&*dev, ReqOp::Write, 0, ReqFlags::NONE, &e, &cx);
        let (d2, k2) = (UntrackedArc::clone(&dev), UntrackedArc::clone(&k));
        rt.push(move || {
            let cx1 = k2.cpu(CpuId(1)).unwrap();
            assert!(d2.complete_one(&cx1));
        });
        submit(&*dev, ReqOp::Write, 8, ReqFlags::NONE, &e, &cx);
        assert_eq!(*log.lock(), ["nullb0: queue_rq 0", "nullb0: queue_rq 8"]);
        assert_eq!(dev.q.rq_qos.as_ref().map(|w| w.inflight()), Some(1));
        assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    }

    /// The twin's failure mode made explicit: without the wake-up the writer is left blocked
    /// and its sleep can never end.
    #[test]
    fn without_a_completion_the_throttled_writer_stays_blocked() {
        let (k, _rt, cx, dev, log) = throttled(1);
        let e = ends();
        submit(&*dev, ReqOp::Write, 0, ReqFlags::NONE, &e, &cx);
        submit(&*dev, ReqOp::Write, 8, ReqFlags::NONE, &e, &cx);
        assert_eq!(*log.lock(), ["nullb0: queue_rq 0"]);
        let r = k.reports().of_kind(ReportKind::Bug);
        assert_eq!(r.len(), 1);
        assert!(r[0].message.contains("wbt_wait"), "{}", r[0].message);
        println!("{}", r[0]);
    }

    /// Reads and `REQ_NOWAIT` writes are never throttled.
    #[test]
    fn reads_and_nowait_writes_pass_the_throttle() {
        let (k, _rt, cx, dev, log) = throttled(1);
        let e = ends();
        submit(&*dev, ReqOp::Write, 0, ReqFlags::NONE, &e, &cx);
        submit(&*dev, ReqOp::Read, 8, ReqFlags::NONE, &e, &cx);
        submit(&*dev, ReqOp::Write, 16, ReqFlags::REQ_NOWAIT, &e, &cx);
        assert_eq!(log.lock().len(), 3);
        assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    }
}

mod dispatch {
    use super::*;

    fn sleeper(flags: u32) -> (UntrackedArc<Kernel>, Vec<Report>) {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg {
            flags,
            sleep_in_queue_rq: true,
            ..MqDevCfg::new("nullb0", 0, &log)
        }
        .build();
        let e = ends();
        submit(&*dev, ReqOp::Write, 0, ReqFlags::NONE, &e, &cx);
        assert_eq!(*e.lock(), [(0, BLK_STS_OK)]);
        let r = k.reports().all();
        (k, r)
    }

    use crate::kernel::Report;

    /// `->queue_rq()` runs under `rcu_read_lock()` unless the tag set is `BLK_MQ_F_BLOCKING`
    /// (then under its SRCU): sleeping there is a splat only in the first case.
    #[test]
    fn sleeping_in_queue_rq_is_reported_only_without_blk_mq_f_blocking() {
        let (_k, r) = sleeper(0);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].kind, ReportKind::SleepInAtomic);
        println!("{}", r[0]);
        let (_k, r) = sleeper(BLK_MQ_F_BLOCKING);
        assert!(r.is_empty(), "{r:?}");
    }

    /// `BLK_STS_RESOURCE`: the request goes on the dispatch list (`block_rq_insert`) and is
    /// dispatched again when another request completes.
    #[test]
    fn blk_sts_resource_requeues_until_a_completion() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg {
            mode: Mode::Hold,
            ..MqDevCfg::new("nullb0", 0, &log)
        }
        .build();
        let e = ends();
        submit(&*dev, ReqOp::Write, 0, ReqFlags::NONE, &e, &cx);
        dev.resource_once.store(true, UOrdering::Relaxed);
        submit(&*dev, ReqOp::Write, 8, ReqFlags::NONE, &e, &cx);
        assert_eq!(dev.q.dispatch_len(), 1);
        assert!(dev.complete_one(&cx));
        assert_eq!(
            *log.lock(),
            [
                "nullb0: queue_rq 0",
                "nullb0: BLK_STS_RESOURCE",
                "nullb0: queue_rq 8"
            ]
        );
        assert!(dev.complete_one(&cx));
        assert_eq!(*e.lock(), [(0, BLK_STS_OK), (8, BLK_STS_OK)]);
        assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    }

    /// Ending a request twice: the second `blk_mq_end_request()` finds `rq->ref` at zero,
    /// the kernel's WARN; the bio ended once.
    #[test]
    fn a_request_completed_twice_is_warned() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg {
            mode: Mode::Hold,
            ..MqDevCfg::new("nullb0", 0, &log)
        }
        .build();
        let e = ends();
        submit(&*dev, ReqOp::Write, 0, ReqFlags::NONE, &e, &cx);
        let rq = dev.held.lock().front().cloned().unwrap();
        assert_eq!(rq.state(), MqRqState::InFlight);
        blk_mq_end_request(&rq, BLK_STS_OK, &cx);
        assert_eq!(rq.state(), MqRqState::Idle);
        blk_mq_end_request(&rq, BLK_STS_OK, &cx);
        assert_eq!(*e.lock(), [(0, BLK_STS_OK)]);
        let r = k.reports().all();
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].kind, ReportKind::Warn);
        assert!(
            r[0].message.contains("WARN_ON_ONCE(req_ref_zero(rq))"),
            "{}",
            r[0].message
        );
        println!("{}", r[0]);
    }
}

mod freeze {
    use super::*;

    /// `blk_mq_freeze_queue()` waits for the request in flight and holds `q_usage_counter(io)`
    /// for write while frozen; a `REQ_NOWAIT` bio meanwhile gets `BLK_STS_AGAIN`; after the
    /// unfreeze bios go through, and a submitter's read of the map is released at once.
    #[test]
    fn a_freeze_drains_requests_and_keeps_submitters_out() {
        let k = Kernel::new(KernelConfig::default(), 2).unwrap();
        let (rt, cx) = event_cpu(&k, CpuId(0));
        let log = log();
        let dev = MqDevCfg {
            mode: Mode::Hold,
            ..MqDevCfg::new("nullb0", 0, &log)
        }
        .build();
        let e = ends();
        submit(&*dev, ReqOp::Write, 0, ReqFlags::NONE, &e, &cx);
        assert!(
            cx.held_locks().is_empty(),
            "bio_queue_enter() releases at once"
        );
        let (d2, k2) = (UntrackedArc::clone(&dev), UntrackedArc::clone(&k));
        rt.push(move || {
            let cx1 = k2.cpu(CpuId(1)).unwrap();
            assert!(d2.complete_one(&cx1));
        });
        let (frozen, drained) = blk_mq_freeze_queue(&dev.q, &cx);
        assert!(drained);
        assert_eq!(*e.lock(), [(0, BLK_STS_OK)]);
        assert_eq!(
            cx.held_locks().iter().map(|h| h.name).collect::<Vec<_>>(),
            [Q_USAGE_COUNTER_IO]
        );
        submit(&*dev, ReqOp::Write, 8, ReqFlags::REQ_NOWAIT, &e, &cx);
        assert_eq!(e.lock().last(), Some(&(8, BLK_STS_AGAIN)));
        blk_mq_unfreeze_queue(&dev.q, frozen, &cx);
        assert!(cx.held_locks().is_empty());
        submit(&*dev, ReqOp::Write, 16, ReqFlags::NONE, &e, &cx);
        assert_eq!(*log.lock(), ["nullb0: queue_rq 0", "nullb0: queue_rq 16"]);
        assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    }

    /// A blocking submitter to a queue that is never unfrozen: reported, the bio failed once.
    #[test]
    fn entering_a_queue_that_stays_frozen_is_reported() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg::new("nullb0", 0, &log).build();
        let (frozen, drained) = blk_mq_freeze_queue(&dev.q, &cx);
        assert!(drained);
        let e = ends();
        submit(&*dev, ReqOp::Read, 0, ReqFlags::NONE, &e, &cx);
        assert_eq!(*e.lock(), [(0, BLK_STS_IOERR)]);
        let r = k.reports().of_kind(ReportKind::Bug);
        assert_eq!(r.len(), 1);
        assert!(r[0].message.contains("never unfrozen"), "{}", r[0].message);
        blk_mq_unfreeze_queue(&dev.q, frozen, &cx);
        assert!(log.lock().is_empty());
    }

    /// With the hung-task detector on, the same hang is one report: the detector's, naming the
    /// wait, and not blk-mq's own as well.
    #[test]
    #[cfg_attr(feature = "bug-hung-task-detector-off", ignore)]
    fn with_the_hung_task_detector_on_a_frozen_queue_is_one_hung_task_report() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        k.set_hung_task_timeout_secs(120);
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg::new("nullb0", 0, &log).build();
        let (frozen, _) = blk_mq_freeze_queue(&dev.q, &cx);
        let e = ends();
        submit(&*dev, ReqOp::Read, 0, ReqFlags::NONE, &e, &cx);
        assert_eq!(*e.lock(), [(0, BLK_STS_IOERR)]);
        let all = k.reports().all();
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all[0].kind, ReportKind::HungTask);
        assert!(
            all[0]
                .message
                .starts_with("INFO: task biosim/0:1000 blocked for more than 120 seconds."),
            "{}",
            all[0].message
        );
        blk_mq_unfreeze_queue(&dev.q, frozen, &cx);
    }
}

/// `blk_attempt_plug_merge()` (block/blk_merge.rs) and 6.18's `blk_add_rq_to_plug()` flush test.
mod merge {
    use super::*;
    use crate::block::blk_plug::BLK_PLUG_FLUSH_SIZE;

    /// Submits a bio of `bytes` at `sector` with `flags`, recording `(sector, status, data)` at
    /// its end.
    #[allow(clippy::type_complexity)]
    fn submit_len(
        dev: &dyn BlockDriver,
        op: ReqOp,
        sector: u64,
        bytes: usize,
        flags: ReqFlags,
        ends: &UntrackedArc<Mutex<Vec<(u64, BlkStatus, Vec<u8>)>>>,
        cx: &Cpu,
    ) {
        let e = UntrackedArc::clone(ends);
        let bio = cx
            .kernel()
            .bio_alloc(op, sector)
            .with_flags(flags)
            .with_data(vec![sector as u8; bytes])
            .with_end_io(BioEndIo::new("test_end_io", move |b, _| {
                e.lock().push((b.bi_iter.bi_sector, b.status(), b.data()))
            }));
        submit_bio_noacct(bio, dev, cx);
    }

    #[allow(clippy::type_complexity)]
    fn data_ends() -> UntrackedArc<Mutex<Vec<(u64, BlkStatus, Vec<u8>)>>> {
        UntrackedArc::new(Mutex::new(Vec::new()))
    }

    /// Runs `f` (bios submitted inside a plug) and returns the block events it traced.
    fn plugged(cx: &Cpu, f: impl FnOnce()) -> Vec<String> {
        register_plug_callsites(cx);
        let ev = capture(|| {
            let plug = blk_start_plug(cx);
            f();
            blk_finish_plug(plug, cx);
        });
        // The request events are checked by blk_mq_trace's own tests.
        let bio_and_plug: Vec<_> = ev
            .iter()
            .filter(|e| e.tracepoint.starts_with("block_bio") || e.tracepoint.contains("plug"))
            .cloned()
            .collect();
        assert_eq!(
            crate::kernel::trace::tests::check_formats(&bio_and_plug),
            Vec::<String>::new()
        );
        ev.into_iter()
            .filter(|e| e.tracepoint.starts_with("block_"))
            .map(|e| e.message)
            .collect()
    }

    /// Two contiguous plugged writes become one request of two bios: one `block_getrq`, a
    /// `block_bio_backmerge` for the second bio, one `block_rq_issue` and one
    /// `block_rq_complete` of 16 sectors, and each bio ends once with its own data.
    #[test]
    fn two_contiguous_plugged_writes_become_one_request_of_two_bios() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg::new("nullb0", 0, &log).build();
        let e = data_ends();
        let msgs = plugged(&cx, || {
            submit_len(&*dev, ReqOp::Write, 8, 4096, ReqFlags::NONE, &e, &cx);
            submit_len(&*dev, ReqOp::Write, 16, 4096, ReqFlags::NONE, &e, &cx);
            assert_eq!(dev.q.tags.busy(), 1, "one request, one tag");
        });
        assert_eq!(
            msgs,
            [
                "block_bio_queue: 250,0 W 8 + 8 [biosim/0]",
                "block_getrq: 250,0 W 8 + 8 [biosim/0]",
                "block_plug: [biosim/0]",
                "block_bio_queue: 250,0 W 16 + 8 [biosim/0]",
                "block_bio_backmerge: 250,0 W 16 + 8 [biosim/0]",
                "block_unplug: [biosim/0] 1",
                "block_rq_issue: 250,0 W 8192 () 8 + 16 be,0,4 [biosim/0]",
                "block_rq_complete: 250,0 W () 8 + 16 be,0,4 [0]",
            ]
        );
        assert_eq!(*log.lock(), ["nullb0: queue_rq 8"]);
        assert_eq!(
            *e.lock(),
            [
                (8, BLK_STS_OK, vec![8; 4096]),
                (16, BLK_STS_OK, vec![16; 4096])
            ]
        );
        assert_eq!(dev.q.tags.busy(), 0);
        assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    }

    /// A bio that ends where the plugged request starts is merged in front of it
    /// (`block_bio_frontmerge`); the request then starts at the bio's sector.
    #[test]
    fn a_bio_just_before_the_plugged_request_is_front_merged() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg::new("nullb0", 0, &log).build();
        let e = data_ends();
        let msgs = plugged(&cx, || {
            submit_len(&*dev, ReqOp::Read, 16, 4096, ReqFlags::NONE, &e, &cx);
            submit_len(&*dev, ReqOp::Read, 8, 4096, ReqFlags::NONE, &e, &cx);
        });
        assert!(
            msgs.contains(&"block_bio_frontmerge: 250,0 R 8 + 8 [biosim/0]".to_owned()),
            "{msgs:?}"
        );
        assert!(
            msgs.contains(&"block_rq_issue: 250,0 R 8192 () 8 + 16 be,0,4 [biosim/0]".to_owned()),
            "{msgs:?}"
        );
        // rq->bio is the front-merged bio now: the request ends it first.
        let order: Vec<u64> = e.lock().iter().map(|x| x.0).collect();
        assert_eq!(order, [8, 16]);
    }

    /// What must not merge: a gap, another op, a `REQ_FUA` bio (`REQ_NOMERGE_FLAGS`), and
    /// anything on a queue with `QUEUE_FLAG_NOMERGES`. Each case leaves two requests.
    #[test]
    fn a_gap_another_op_a_fua_bio_or_nomerges_leave_two_requests() {
        let cases: [(&str, ReqOp, u64, ReqFlags, bool); 4] = [
            ("gap", ReqOp::Write, 24, ReqFlags::NONE, false),
            ("other op", ReqOp::Read, 16, ReqFlags::NONE, false),
            ("REQ_FUA", ReqOp::Write, 16, ReqFlags::REQ_FUA, false),
            ("nomerges", ReqOp::Write, 16, ReqFlags::NONE, true),
        ];
        for (what, op, sector, flags, nomerges) in cases {
            let k = Kernel::new(KernelConfig::default(), 1).unwrap();
            let cx = k.cpu(CpuId(0)).unwrap();
            let log = log();
            let dev = MqDevCfg::new("nullb0", 0, &log).build();
            dev.q.set_nomerges(nomerges);
            let e = data_ends();
            let msgs = plugged(&cx, || {
                submit_len(&*dev, ReqOp::Write, 8, 4096, ReqFlags::NONE, &e, &cx);
                submit_len(&*dev, op, sector, 4096, flags, &e, &cx);
            });
            assert!(
                !msgs.iter().any(|m| m.contains("merge")),
                "{what}: {msgs:?}"
            );
            assert_eq!(log.lock().len(), 2, "{what}: two requests issued");
            assert_eq!(e.lock().len(), 2, "{what}: each bio ends once");
        }
    }

    /// `ll_back_merge_fn()`: a merge that would take the request past `max_sectors` fails and
    /// marks the request `REQ_NOMERGE` (`req_set_nomerge()`): the next contiguous bio does not
    /// merge either.
    #[test]
    fn a_merge_past_max_sectors_fails_and_marks_the_request_nomerge() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg {
            max_sectors: 16,
            ..MqDevCfg::new("nullb0", 0, &log)
        }
        .build();
        let e = data_ends();
        let msgs = plugged(&cx, || {
            submit_len(&*dev, ReqOp::Write, 0, 4096, ReqFlags::NONE, &e, &cx);
            submit_len(&*dev, ReqOp::Write, 8, 4096, ReqFlags::NONE, &e, &cx);
            submit_len(&*dev, ReqOp::Write, 16, 512, ReqFlags::NONE, &e, &cx);
            submit_len(&*dev, ReqOp::Write, 17, 512, ReqFlags::NONE, &e, &cx);
        });
        let merges = msgs.iter().filter(|m| m.contains("backmerge")).count();
        // 0+8 merge (16 sectors, the limit); 16 cannot join it, and starts a request that 17
        // joins.
        assert_eq!(merges, 2, "{msgs:?}");
        assert_eq!(e.lock().len(), 4);
    }

    /// `ll_back_merge_fn()` at the limit: a merge that makes the request exactly `max_sectors`
    /// long is allowed (the test is `>`), one sector more is not.
    #[test]
    fn a_merge_up_to_exactly_max_sectors_is_allowed() {
        for (second, merges) in [(4096, 1), (4096 + 512, 0)] {
            let k = Kernel::new(KernelConfig::default(), 1).unwrap();
            let cx = k.cpu(CpuId(0)).unwrap();
            let log = log();
            let dev = MqDevCfg {
                max_sectors: 16,
                ..MqDevCfg::new("nullb0", 0, &log)
            }
            .build();
            let e = data_ends();
            let msgs = plugged(&cx, || {
                submit_len(&*dev, ReqOp::Write, 0, 4096, ReqFlags::NONE, &e, &cx);
                submit_len(&*dev, ReqOp::Write, 8, second, ReqFlags::NONE, &e, &cx);
            });
            let n = msgs.iter().filter(|m| m.contains("backmerge")).count();
            assert_eq!(n, merges, "second bio of {second} bytes: {msgs:?}");
            assert_eq!(e.lock().len(), 2);
        }
    }

    /// `ll_new_hw_segment()`: the merged request's physical segments (one per bio vector in the
    /// model) stay within `max_segments`, and are summed. Bios of three vectors each on a queue of
    /// 9 segments: the second and third merge (6, then 9), the fourth does not (12).
    #[test]
    fn a_merge_past_max_segments_fails() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg {
            max_segments: 9,
            ..MqDevCfg::new("nullb0", 0, &log)
        }
        .build();
        let ends = data_ends();
        let three_vecs = |sector: u64| {
            let e = UntrackedArc::clone(&ends);
            let mut bio = cx.kernel().bio_alloc(ReqOp::Write, sector);
            for fill in 1..=3u8 {
                bio.add_data(vec![fill; 1024]);
            }
            assert_eq!(crate::block::blk_merge::bio_nr_segs(&bio), 3);
            let bio = bio.with_end_io(BioEndIo::new("test_end_io", move |b, _| {
                e.lock().push((b.bi_iter.bi_sector, b.status(), b.data()))
            }));
            submit_bio_noacct(bio, &*dev, &cx);
        };
        let msgs = plugged(&cx, || {
            for i in 0..4 {
                three_vecs(i * 6);
            }
        });
        let n = msgs.iter().filter(|m| m.contains("backmerge")).count();
        assert_eq!(n, 2, "{msgs:?}");
        assert_eq!(
            *log.lock(),
            ["nullb0: queue_rq 0", "nullb0: queue_rq 18"],
            "two requests issued"
        );
        assert_eq!(ends.lock().len(), 4, "each bio ends once");
    }

    /// `blk_attempt_plug_merge()` with a plug that spans queues (`plug->multiple_queues`): the
    /// tail is another queue's request, so the first request of the bio's queue, from the head,
    /// gets the one try: A's second write merges into A's request, which is not the tail.
    #[test]
    fn a_plug_spanning_two_queues_merges_into_the_bios_own_queue() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let a = MqDevCfg::new("nullb0", 0, &log).build();
        let b = MqDevCfg::new("nullb1", 1, &log).build();
        let e = data_ends();
        let msgs = plugged(&cx, || {
            submit_len(&*a, ReqOp::Write, 0, 4096, ReqFlags::NONE, &e, &cx);
            submit_len(&*b, ReqOp::Write, 100, 4096, ReqFlags::NONE, &e, &cx);
            submit_len(&*a, ReqOp::Write, 8, 4096, ReqFlags::NONE, &e, &cx);
        });
        let merges: Vec<&String> = msgs.iter().filter(|m| m.contains("merge")).collect();
        assert_eq!(merges.len(), 1, "{msgs:?}");
        assert!(merges[0].contains("250,0 W 8 + 8"), "{merges:?}");
        let mut issued = log.lock().clone();
        issued.sort();
        assert_eq!(issued, ["nullb0: queue_rq 0", "nullb1: queue_rq 100"]);
        assert_eq!(e.lock().len(), 3, "each bio ends once");
    }

    /// `rq_mergeable()`: a write-zeroes request takes no bio, even a contiguous write-zeroes one
    /// (`blk_rq_merge_ok()` is false before any position test).
    #[test]
    fn a_write_zeroes_request_is_not_mergeable() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg::new("nullb0", 0, &log).build();
        let msgs = plugged(&cx, || {
            for sector in [0, 8] {
                let bio = cx
                    .kernel()
                    .bio_alloc(ReqOp::WriteZeroes, sector)
                    .with_size(4096);
                submit_bio_noacct(bio, &*dev, &cx);
            }
        });
        assert!(!msgs.iter().any(|m| m.contains("merge")), "{msgs:?}");
        assert_eq!(log.lock().len(), 2, "two requests issued");
    }

    /// 6.18's `blk_add_rq_to_plug()`: `last` is `rq_list_peek()`, the oldest request. A small
    /// oldest request does not flush the plug even when a newer one is `BLK_PLUG_FLUSH_SIZE`;
    /// the twin `bug-plug-last-is-newest` (the newest) flushes at the third request.
    #[test]
    #[cfg_attr(feature = "bug-plug-last-is-newest", should_panic)]
    fn the_plug_flush_size_test_looks_at_the_oldest_request() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg::new("nullb0", 0, &log).build();
        let e = data_ends();
        let plug = blk_start_plug(&cx);
        submit_len(&*dev, ReqOp::Write, 0, 4096, ReqFlags::NONE, &e, &cx);
        submit_len(
            &*dev,
            ReqOp::Write,
            1000,
            BLK_PLUG_FLUSH_SIZE as usize,
            ReqFlags::NONE,
            &e,
            &cx,
        );
        submit_len(&*dev, ReqOp::Write, 5000, 4096, ReqFlags::NONE, &e, &cx);
        assert!(log.lock().is_empty(), "flushed early: {:?}", log.lock());
        blk_finish_plug(plug, &cx);
        assert_eq!(log.lock().len(), 3);
        // A big OLDEST request does flush the plug when the next request comes.
        let plug = blk_start_plug(&cx);
        submit_len(
            &*dev,
            ReqOp::Write,
            0,
            BLK_PLUG_FLUSH_SIZE as usize,
            ReqFlags::NONE,
            &e,
            &cx,
        );
        submit_len(&*dev, ReqOp::Write, 5000, 4096, ReqFlags::NONE, &e, &cx);
        assert_eq!(log.lock().len(), 4, "the big request was flushed");
        blk_finish_plug(plug, &cx);
        assert_eq!(e.lock().len(), 5);
    }

    /// ... and only on a queue without `QUEUE_FLAG_NOMERGES` (`!blk_queue_nomerges(rq->q) &&
    /// blk_rq_bytes(last) >= BLK_PLUG_FLUSH_SIZE`); the twin drops the gate.
    #[test]
    #[cfg_attr(feature = "bug-plug-last-is-newest", should_panic)]
    fn a_nomerges_queue_is_not_flushed_for_a_big_request() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let log = log();
        let dev = MqDevCfg::new("nullb0", 0, &log).build();
        dev.q.set_nomerges(true);
        let e = data_ends();
        let plug = blk_start_plug(&cx);
        submit_len(
            &*dev,
            ReqOp::Write,
            0,
            BLK_PLUG_FLUSH_SIZE as usize,
            ReqFlags::NONE,
            &e,
            &cx,
        );
        submit_len(&*dev, ReqOp::Write, 5000, 4096, ReqFlags::NONE, &e, &cx);
        assert!(log.lock().is_empty(), "flushed: {:?}", log.lock());
        blk_finish_plug(plug, &cx);
        assert_eq!(e.lock().len(), 2);
    }
}
