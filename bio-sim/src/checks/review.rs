//! The review questions of issue 11 the gallery asks as findings that run on any [`Variant`]
//! (a posted version or a reviewer's [`Variant::module`]): finding 12, a completion from a
//! threaded IRQ handler on PREEMPT_RT (`kernel/irq/manage.c`: `irq_forced_thread_fn()`), and
//! finding 13, CPU monopolization by the worker under a sustained stream of same-CPU completions
//! on PREEMPT_NONE (`kernel/watchdog.c`'s soft-lockup threshold). The gallery
//! ([`super::findings`]) lists them and their expected verdicts; the scenarios and their twins'
//! modules are here.

use super::verdict::Verdict;
use crate::machine::oracle::Violation;
use crate::machine::oracle::{Invariant, Need};
use crate::machine::sim::{Sim, SimConfig, SimError};
use crate::machine::transition::Transition;
use bio_core::block::complete_in_task::module::prelude::*;
use bio_core::block::{bio_endio, BioEndIo, ReqOp};
use bio_core::irq::FIRST_DEVICE_IRQ;
use bio_core::kernel::PreemptModel;
use bio_core::workqueue::RescuerAffinity;
use std::sync::{Arc, Mutex, OnceLock};

/// The interrupt source of finding 12's handler: an NVMe completion queue, IRQ
/// [`FIRST_DEVICE_IRQ`], so its thread is `irq/24-nvme0q1`.
const NVME_IRQ: (u32, &str) = (FIRST_DEVICE_IRQ, "nvme0q1");

fn machine(
    variant: Variant,
    kernel: KernelConfig,
    rescuer: RescuerAffinity,
    trace: bool,
) -> Result<Sim, SimError> {
    Sim::new(SimConfig {
        kernel,
        nr_cpus: 2,
        online: 2,
        variant,
        rescuer,
        seed: 1,
        trace,
    })
}

/// What one of these checks ran: its verdict and its machine (for the trace).
pub(super) struct Ran {
    pub(super) verdict: Verdict,
    pub(super) sim: Sim,
}

/// Finding 12: on PREEMPT_RT every device handler not flagged `IRQF_NO_THREAD` runs forced into
/// its `irq/N-NAME` thread (`force_irqthreads()`), so `bio_endio()` of a `BIO_COMPLETE_IN_TASK`
/// bio runs in a task: `in_task()` is true and the thread is preemptible, but
/// `irq_forced_thread_fn()`'s `local_bh_disable()` is, on RT, an RCU read-side section, so the
/// bio may not sleep there. `bio_in_atomic()` sees `rcu_preempt_depth()` and defers it. A bio of a
/// `request_threaded_irq()` thread function (no BH section) may sleep and completes in place. The
/// oracle checks every flagged bio ended where it could sleep and none was stranded.
pub(super) fn check_12_threaded_irq(
    variant: Variant,
    rescuer: RescuerAffinity,
    trace: bool,
) -> Result<Ran, SimError> {
    let s = machine(
        variant,
        KernelConfig::for_model(PreemptModel::Rt),
        rescuer,
        trace,
    )?;
    let (nr, name) = NVME_IRQ;
    let forced = s.oracle.bio(&s.kernel, ReqOp::Write, Need::Flag);
    s.rt.on_cpu(
        CpuId(0),
        "irq/24-nvme0q1 (forced-threaded, PREEMPT_RT): bio_endio(flagged write bio)",
        |cx| cx.irq_forced_thread_fn(nr, name, |cx| bio_endio(forced, cx)),
    );
    let threaded = s.oracle.bio(&s.kernel, ReqOp::Write, Need::Flag);
    s.rt.on_cpu(
        CpuId(0),
        "irq/24-nvme0q1 (request_threaded_irq() thread_fn): bio_endio(flagged write bio)",
        |cx| cx.irq_thread_fn(nr, name, |cx| bio_endio(threaded, cx)),
    );
    let v = s.settle(super::findings::BUDGET);
    let verdict = Verdict::of(
        v.into_iter()
            .filter(|x| matches!(x.invariant, Invariant::TaskContext | Invariant::Stranded))
            .collect(),
    );
    Ok(Ran { verdict, sim: s })
}

/// Finding 12's twin: a module whose producer second-guesses `bio_in_atomic()` with the predicate
/// it replaced, `!in_task() || irqs_disabled()` (erofs' before "fix atomic context detection
/// when !CONFIG_DEBUG_LOCK_ALLOC", whose `rcu_read_lock_any_held()` term is `!preemptible()`
/// without lockdep): a bio in a preemptible task is completed in place, RCU section or not. It
/// misses exactly the forced irq thread of PREEMPT_RT. Otherwise v6-review's protocol on an
/// llist, without hotplug callbacks (the check keeps every CPU online).
#[derive(Debug)]
pub struct InTaskShortcut;

/// The one instance [`Variant::module`] takes.
pub static IN_TASK_SHORTCUT: InTaskShortcut = InTaskShortcut;

struct ShortcutBatch {
    list: LlistHead,
    work: WorkStruct,
}

struct Shortcut {
    batches: PerCpu<ShortcutBatch>,
    wq: Workqueue,
}

impl BioCompleteOps for Shortcut {
    fn __bio_complete_in_task(&self, bio: Box<Bio>, cx: &Cpu) {
        // The bug: "a task with IRQs on may sleep".
        if cx.in_task() && !cx.irqs_disabled() {
            bi_end_io(bio, cx);
            return;
        }
        let batch = this_cpu_ptr(&self.batches, cx);
        if llist_add(bio, &batch.list) {
            queue_work_on(cx.id(), &self.wq, batch.work, cx);
        }
    }

    fn pending(&self, cpu: CpuId) -> usize {
        per_cpu_ptr(&self.batches, cpu).list.len_unlocked()
    }
}

/// `bio_complete_work_fn()` of the twin: drains the CPU's llist until it is empty.
fn shortcut_work_fn(m: &Shortcut, cpu: CpuId, cx: &Cpu) {
    loop {
        let mut list = llist_reverse_order(llist_del_all(&per_cpu_ptr(&m.batches, cpu).list));
        if list.is_empty() {
            break;
        }
        while let Some(bio) = list.pop() {
            bi_end_io(bio, cx);
        }
    }
}

impl BioCompleteModule for InTaskShortcut {
    fn name(&self) -> &'static str {
        "in-task-shortcut"
    }

    fn summary(&self) -> &'static str {
        "finding 12's twin: completes in place when in_task() && !irqs_disabled()"
    }

    fn init(&self, m: &ModuleInit<'_>) -> Result<Box<dyn BioCompleteOps>, InitError> {
        let wq = m.alloc_workqueue("bio_complete", WQ_MEM_RECLAIM | WQ_PERCPU, 0)?;
        let me = Arc::new(OnceLock::<Arc<Shortcut>>::new());
        let batches = PerCpu::new(m.kernel(), |cpu| {
            let me = Arc::clone(&me);
            ShortcutBatch {
                list: LlistHead::new(),
                work: m.init_work(cpu, "bio_complete_work_fn", move |cx| {
                    if let Some(ops) = me.get() {
                        shortcut_work_fn(ops, cpu, cx);
                    }
                }),
            }
        });
        let ops = Arc::new(Shortcut { batches, wq });
        let _ = me.set(Arc::clone(&ops));
        Ok(Box::new(Shared(ops)))
    }
}

/// Finding 13's model parameters: biosim's, stated, not kernel values (the deterministic runtime
/// has no time inside a work item: jiffies move only between steps, and `bi_end_io` costs
/// nothing; this check keeps its own clock of CPU0's time in the worker).
pub mod stream {
    /// Simulated CPU time of one `bi_end_io` in the worker: a 64 KiB DONTCACHE writeback bio,
    /// 16 folios ended and invalidated (`folio_end_writeback()` + `folio_end_dropbehind()`).
    pub const END_IO_NS: u64 = 10_000;
    /// The producer: one flagged bio completes in hardirq on CPU0 every this many ns (125,000
    /// bios/s, 8 GB/s of 64 KiB bios from one NVMe queue whose IRQ is affine to CPU0, submitted
    /// from other CPUs), 1.25 x what the worker completes: the list never drains by itself.
    pub const ARRIVAL_NS: u64 = 8_000;
    /// Bios waiting when the worker starts.
    pub const BACKLOG: usize = 8;
    /// When `TIF_NEED_RESCHED` is set on CPU0: another task is runnable there (the submitter, a
    /// kthread; with none, the soft-lockup watchdog's own stopper thread, woken by its hrtimer
    /// every `2 * watchdog_thresh / 5` = 4 s), and the scheduler tick after the kworker's slice
    /// sets it (`resched_curr()`); the first tick at `CONFIG_HZ=250`: 4 ms. On PREEMPT_NONE and
    /// PREEMPT_VOLUNTARY nothing preempts a kworker in the kernel: the work function's own
    /// `need_resched()` test is its only way off the CPU.
    pub const NEED_RESCHED_NS: u64 = 4_000_000;
    /// How long the stream lasts (a sustained write, e.g. `dd oflag=dontcache` for 30 s).
    pub const STREAM_NS: u64 = 30_000_000_000;
    /// `kernel/watchdog.c`: a soft lockup is reported once a CPU's stopper thread has not run for
    /// `get_softlockup_thresh()` = 2 * `watchdog_thresh` (default 10 s).
    pub const SOFTLOCKUP_THRESH_NS: u64 = 2 * 10_000_000_000;
    /// How much of the stream the check simulates: under 1,000 `bi_end_io` calls (biosim's
    /// livelock detector counts a fresh bio deferred inside a `bi_end_io` as a re-deferral, see
    /// docs/findings/13-cpu-monopolization.md). A worker still in its loop at the window's end,
    /// with a backlog that grew, never finds its list empty while the stream lasts: its hold is
    /// the stream's length.
    pub const WINDOW_NS: u64 = 8_000_000;
}

/// The stream's shared state: CPU0's clock in the worker, the next arrival, what was seen.
#[derive(Debug, Default)]
struct Stream {
    clock_ns: u64,
    next_arrival_ns: u64,
    stopped: bool,
    resched_set: bool,
    /// The backlog when the window ended with the worker still in its loop.
    backlog_at_window: Option<usize>,
}

/// Finding 13's figure on one variant: how long the first worker run held CPU0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Monopoly {
    /// The run's hold in simulated ns (the stream's length when it never left).
    pub held_ns: u64,
    /// Whether the run was still looping at the window's end with a grown backlog.
    pub unbounded: bool,
    /// The backlog at the window's end, if it was.
    pub backlog: usize,
}

impl Monopoly {
    /// The figure as text: `4.0 ms` or `>= 30 s (never empty)`.
    pub fn describe(&self) -> String {
        if self.unbounded {
            format!(
                ">= {} s (the stream's length: its list never empty, {} bios on it after {} ms)",
                self.held_ns / 1_000_000_000,
                self.backlog,
                stream::WINDOW_NS / 1_000_000
            )
        } else {
            format!("{:.1} ms", self.held_ns as f64 / 1e6)
        }
    }
}

type KernelRef = bio_core::sync::UntrackedArc<Kernel>;
type OracleRef = Arc<crate::machine::oracle::Oracle>;

/// A flagged bio of the stream, tracked by the oracle as needing task context.
fn stream_bio(k: &KernelRef, o: &OracleRef, st: &Arc<Mutex<Stream>>) -> Box<Bio> {
    let bio = k.bio_alloc(ReqOp::Write, 0);
    o.track(bio.id(), true);
    let (k2, o2, st2) = (KernelRef::clone(k), Arc::clone(o), Arc::clone(st));
    let mut bio = bio.with_end_io(BioEndIo::new("stream_end_io", move |bio, cx| {
        stream_end_io(&k2, &o2, &st2, bio, cx)
    }));
    bio.set_flag(BioFlag::CompleteInTask);
    bio
}

/// A stream bio's `bi_end_io`: tells the oracle, charges CPU0's clock [`stream::END_IO_NS`] (in
/// the worker only), delivers the IRQs due by then as nested hardirqs (IRQs are on in the
/// worker's `bi_end_io`), and sets `need_resched` at [`stream::NEED_RESCHED_NS`]. At
/// [`stream::WINDOW_NS`] the stream stops and the backlog is noted.
fn stream_end_io(k: &KernelRef, o: &OracleRef, st: &Arc<Mutex<Stream>>, bio: Box<Bio>, cx: &Cpu) {
    o.completed(bio.id(), cx);
    drop(bio);
    let mut due = 0;
    {
        let mut g = st.lock().unwrap_or_else(|e| e.into_inner());
        if g.stopped || cx.id() != CpuId(0) || !cx.in_task() {
            return;
        }
        g.clock_ns += stream::END_IO_NS;
        if g.clock_ns >= stream::WINDOW_NS {
            g.stopped = true;
            g.backlog_at_window = Some(k.bio_complete().map_or(0, |b| b.pending(CpuId(0))));
            return;
        }
        if !cx.irqs_disabled() {
            while g.next_arrival_ns <= g.clock_ns {
                g.next_arrival_ns += stream::ARRIVAL_NS;
                due += 1;
            }
        }
        if g.clock_ns >= stream::NEED_RESCHED_NS && !g.resched_set {
            g.resched_set = true;
            cx.set_need_resched(true);
        }
    }
    for _ in 0..due {
        let next = stream_bio(k, o, st);
        cx.with_hardirq(|cx| bio_endio(next, cx));
    }
}

/// Finding 13 on `variant`: PREEMPT_NONE, [`stream::BACKLOG`] flagged bios wait on CPU0, its
/// worker runs once while the stream of [`stream::ARRIVAL_NS`] keeps completing bios in hardirq
/// there; the run's hold of CPU0, and a violation if it exceeds the soft-lockup threshold.
pub(super) fn check_13_cpu_monopolization(
    variant: Variant,
    rescuer: RescuerAffinity,
    trace: bool,
) -> Result<(Ran, Monopoly), SimError> {
    let s = machine(
        variant,
        KernelConfig::for_model(PreemptModel::None),
        rescuer,
        trace,
    )?;
    let st = Arc::new(Mutex::new(Stream::default()));
    let (k, o) = (KernelRef::clone(&s.kernel), Arc::clone(&s.oracle));
    for _ in 0..stream::BACKLOG {
        let bio = stream_bio(&k, &o, &st);
        s.rt.on_cpu(
            CpuId(0),
            "device IRQ: bio_endio(stream bio, BIO_COMPLETE_IN_TASK) from hardirq",
            |cx| cx.with_hardirq(|cx| bio_endio(bio, cx)),
        );
    }
    s.apply(&Transition::Tick);
    s.apply(&Transition::RunWorker { cpu: 0 });
    let (held, window_backlog) = {
        let mut g = st.lock().unwrap_or_else(|e| e.into_inner());
        g.stopped = true;
        (g.clock_ns, g.backlog_at_window)
    };
    let m = match window_backlog {
        Some(b) if b >= stream::BACKLOG => Monopoly {
            held_ns: stream::STREAM_NS,
            unbounded: true,
            backlog: b,
        },
        _ => Monopoly {
            held_ns: held,
            unbounded: false,
            backlog: window_backlog.unwrap_or(0),
        },
    };
    s.rt.note(format!(
        "# finding 13: the worker's first run held CPU0 {}",
        m.describe()
    ));
    let mut v: Vec<Violation> = s
        .settle(super::findings::BUDGET)
        .into_iter()
        .filter(|x| x.invariant == Invariant::Stranded)
        .collect();
    if m.held_ns > stream::SOFTLOCKUP_THRESH_NS {
        v.push(Violation {
            invariant: Invariant::KernelReport(bio_core::kernel::ReportKind::Bug),
            message: format!(
                "bio_complete_work_fn held CPU0 {} without scheduling, past kernel/watchdog.c's soft-lockup threshold (2 * watchdog_thresh = {} s: \"BUG: soft lockup - CPU#0 stuck for ...s! [kworker/0:1:300]\"); PREEMPT_NONE, one flagged bio per {} us in hardirq on CPU0, {} us per bi_end_io",
                m.describe(),
                stream::SOFTLOCKUP_THRESH_NS / 1_000_000_000,
                stream::ARRIVAL_NS / 1000,
                stream::END_IO_NS / 1000
            ),
            trace: Vec::new(),
        });
    }
    Ok((
        Ran {
            verdict: Verdict::of(v),
            sim: s,
        },
        m,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Finding 13's figure: v6 leaves at the first batch after `need_resched()` (4 ms, well under
    /// the threshold), v7 never finds its list empty; neither run trips biosim's livelock
    /// detector inside the window, and nothing is stranded.
    #[test]
    fn the_yield_bounds_the_hold_and_the_loop_until_empty_does_not() {
        let (r, m) =
            check_13_cpu_monopolization(Variant::V6, RescuerAffinity::PoolCpu, false).unwrap();
        assert!(!m.unbounded, "{m:?}");
        assert!(
            (stream::NEED_RESCHED_NS..stream::NEED_RESCHED_NS + 1_000_000).contains(&m.held_ns),
            "{m:?}"
        );
        assert!(r.verdict.matches(crate::checks::Expect::Clean));
        let (r, m) =
            check_13_cpu_monopolization(Variant::V7, RescuerAffinity::PoolCpu, false).unwrap();
        assert!(
            m.unbounded && m.held_ns > stream::SOFTLOCKUP_THRESH_NS,
            "{m:?}"
        );
        assert!(m.backlog > stream::BACKLOG, "{m:?}");
        assert!(r.verdict.matches(crate::checks::Expect::Caught));
        for report in r.sim.kernel.reports().all() {
            assert!(
                !report
                    .message
                    .starts_with(bio_core::block::complete_in_task::LIVELOCK_REPORT),
                "{report}"
            );
        }
    }

    // The window stays under the livelock detector's count of bi_end_io calls.
    const _: () = assert!(
        stream::WINDOW_NS / stream::END_IO_NS
            < bio_core::block::complete_in_task::LIVELOCK_PASSES as u64
    );

    /// Finding 12: the posted v7 defers the forced-threaded handler's bio; the twin module
    /// completes it in the thread, where the oracle sees it may not sleep.
    #[test]
    fn the_forced_irq_thread_defers_on_v7_and_the_shortcut_completes_in_place() {
        let r = check_12_threaded_irq(Variant::V7, RescuerAffinity::PoolCpu, false).unwrap();
        assert!(r.verdict.matches(crate::checks::Expect::Clean));
        let twin = Variant::module(&IN_TASK_SHORTCUT);
        let r = check_12_threaded_irq(twin, RescuerAffinity::PoolCpu, false).unwrap();
        assert!(r.verdict.matches(crate::checks::Expect::Caught));
    }
}
