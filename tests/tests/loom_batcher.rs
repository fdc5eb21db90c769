//! loom models of the task-context completion batcher: the real bio-core code (`bio_endio` →
//! `__bio_complete_in_task` → per-CPU batch → `bio_complete_work_fn`, and the three hotplug
//! callbacks driven through the kernel's hotplug glue), never a re-implementation.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p biosim-tests --test loom_batcher --profile loom
//! -- --nocapture` (CI: `LOOM_MAX_PREEMPTIONS=2`). Every model prints its iteration count.
//!
//! Each execution flow of a CPU (its interrupts, its kworker, its `cpuhp/N` thread) is one loom
//! thread with its own `Cpu` context; the per-CPU IRQ lock makes flows of one CPU exclude each
//! other while one has IRQs off, so the batch list's `UnsafeCell` is checked by loom's causality
//! checker exactly where the kernel relies on IRQ-off or on the hotplug protocol. Main plays the
//! hotplug control side and, after the joins, eventual execution (timers fire, workers run).
//!
//! Two rules keep loom's exploration finite. A CPU's hardirqs run in one flow, in sequence (they
//! never nest or overlap on a real CPU). And at most two flows of a CPU ever spin for its IRQ
//! lock: after a `yield_now()` loom may pick any runnable thread without spending a preemption,
//! so two spinners can starve the lock holder indefinitely (two hardirq flows plus the worker on
//! one CPU ran into "Model exceeded maximum number of branches" at bound 2). A flow that must
//! sleep (`disable_work_sync()`) blocks on a loom condvar instead of spinning.
//!
//! Buggy twins (Cargo features of this crate; each must be caught at the CI bound, 2; minimum
//! catching bound measured with loom 0.7.3):
//! - `bug-worker-list-no-irq-off` (bio-core): the worker takes the list with IRQs on →
//!   "Causality violation" in model a, v7 and v6-review (bound 0: no preemption needed, nothing
//!   orders a later hardirq's `bio_list_add()` before the worker's take).
//! - `bug-down-prep-no-sync` (bio-core): `down_prep` uses `disable_work()`, so a running worker
//!   outlives it, is unbound with its pool and races the dead drain → "Causality violation" in
//!   model b (bound 2; missed at 0 and 1).
//! - `bug-drain-before-death` (model): the dead drain runs before the dying CPU's last flows are
//!   known to have finished → "Causality violation" in model c (bound 0).
//! - `bug-online-no-requeue` (model: finding 1's knob off, as in v5/v6): a hotplug rollback
//!   re-enables the work without requeueing it for a bio deferred while it was disabled → a
//!   lost wakeup, the oracle's "nothing stranded" invariant in model d (bound 1; missed at 0).
//! - `bug-module-online-no-requeue` (a module): model d on the v6-llist example runs its broken
//!   twin (tests/src/broken_module.rs, v6's online callback) → "stranded" in model d (bound 1;
//!   missed at 0, as the knob's twin).
//!
//! `bug-drain-before-death` breaks model c on v3 as well ("Causality violation" on the dead CPU's
//! `folio_batch`, bound 2 as CI runs it). `bug-drain-before-death` breaks the model for the example modules too: hillf's `bio_list` gets
//! a "Causality violation"; v6-llist's llist, all atomics, none, but the late bios land after the
//! drain and are "stranded".
//!
//! The example modules of docs/own-patch.md run every model at the same bound (the `_v6_llist`
//! and `_hillf` tests): a reviewer's module is a [`Variant`] like the posted ones.
//!
//! Every model asserts through the product's oracle (`bio_sim::machine::oracle::Oracle`), the one
//! the deterministic and threaded runtimes and the proptest machines use: the machine comes from
//! `biosim_tests::MachineBuilder` with the oracle as the batcher's observer, its bios are the
//! oracle's (`Oracle::bio`, flagged `BIO_COMPLETE_IN_TASK`), and after the joins and the settle
//! `Oracle::check_quiescent` must find nothing: every `bi_end_io` ran exactly once and where it may
//! sleep, no bio is stranded, no kernel report; and, as the batcher reported it while the flows
//! ran, `bio_complete_work_fn` never ran off its online CPU and the hotplug callbacks ran where
//! kernel/cpu.c runs them. The oracle is bookkeeping loom does not see (a plain mutex never held
//! across a kernel call), so it adds no interleavings.
#![cfg(loom)]

use bio_core::block::complete_in_task::{Variant, WorkKind};
use bio_core::block::{bio_endio, Bio, ReqOp};
use bio_core::kernel::{HotplugStep, Runtime};
use bio_core::sync::UntrackedArc;
use bio_core::workqueue::PoolId;
use bio_core::{Cpu, CpuId, Kernel};
use bio_sim::machine::oracle::{Need, Oracle};
use biosim_tests::{assert_clean, MachineBuilder};
use hotplug::{StateId, StepOutcome, CPUHP_OFFLINE, CPUHP_TEARDOWN_CPU};
use loom::thread;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

const CPU0: CpuId = CpuId(0);
const CPU1: CpuId = CpuId(1);

// Model sizes (see the iteration counts each test prints).
const A_BIOS: usize = 3;
const A_WORKER_RUNS: usize = 2;
const B_WORKER_RUNS: usize = 2;

/// Runs `f` as a loom model: `default_bound` preemptions unless `LOOM_MAX_PREEMPTIONS` says
/// otherwise; prints the iteration count (a std counter: loom objects cannot outlive a model).
fn run(name: &str, default_bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = Some(default_bound);
    }
    let iterations = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&iterations);
    let t0 = Instant::now();
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    let bound = builder
        .preemption_bound
        .map_or("unbounded".to_owned(), |b| b.to_string());
    println!(
        "{name}: {} iterations in {:.2} s (bound {bound})",
        iterations.load(Ordering::Relaxed),
        t0.elapsed().as_secs_f64()
    );
}

/// How many work executions the kworker flow has finished: bumped by the worker flow, awaited by
/// a sleeping flow.
#[derive(Default)]
struct WorkerRuns {
    runs: loom::sync::Mutex<u32>,
    cv: loom::sync::Condvar,
}

impl WorkerRuns {
    fn bump(&self) {
        *self.runs.lock().unwrap() += 1;
        self.cv.notify_all();
    }
}

/// The runtime of the `cpuhp/N` flow, which may sleep in `disable_work_sync()` until the running
/// work returns. It blocks on the worker flow's [`WorkerRuns`] rather than spinning: a thread
/// that waits by `yield_now()` lets loom pick another yielding thread for free after every yield,
/// and at bound 3 loom starved the worker (holding CPU1's IRQ lock) through 1,000 yields of this
/// flow and of a CPU1 IRQ spinning for that lock.
struct SleepOnWorker(loom::sync::Arc<WorkerRuns>);

impl Runtime for SleepOnWorker {
    fn irq_window(&self, _cpu: &Cpu) {}

    fn wait_until(&self, _cpu: &Cpu, _what: &str, cond: &dyn Fn() -> bool) -> bool {
        // The worker flow is the only one running work concurrently: whatever `cond` waits for
        // changes only when one of its executions ends. Bounded: it runs at most a few.
        for _ in 0..8 {
            let seen = *self.0.runs.lock().unwrap();
            if cond() {
                return true;
            }
            let mut runs = self.0.runs.lock().unwrap();
            while *runs == seen {
                runs = self.0.cv.wait(runs).unwrap();
            }
        }
        cond()
    }
}

/// One model's machine: a kernel (all CPUs online, the default config) with the batcher of
/// `variant`, observed by the oracle.
struct Machine {
    k: UntrackedArc<Kernel>,
    oracle: Arc<Oracle>,
}

impl Machine {
    fn boot(variant: Variant, nr_cpus: u32) -> Self {
        let parts = MachineBuilder::new().cpus(nr_cpus).variant(variant).boot();
        Machine {
            k: parts.kernel,
            oracle: parts.oracle,
        }
    }

    /// A write bio flagged `BIO_COMPLETE_IN_TASK`, tracked by the oracle.
    fn flagged_bio(&mut self) -> Box<Bio> {
        self.oracle.bio(&self.k, ReqOp::Write, Need::Flag)
    }

    /// `cpu`'s interrupts: one hardirq per bio, each completing it (`bio_endio()` defers it).
    /// Hardirqs of one CPU never overlap, so one flow delivers them in sequence.
    #[allow(clippy::vec_box)] // bios live boxed, as `bio_alloc()` returns and `bio_endio()` takes them
    fn spawn_irqs(&self, cpu: CpuId, bios: Vec<Box<Bio>>) -> thread::JoinHandle<()> {
        let k = UntrackedArc::clone(&self.k);
        thread::spawn(move || {
            let cx = k.cpu(cpu).expect("CPU exists");
            for bio in bios {
                cx.with_hardirq(|cx| bio_endio(bio, cx));
            }
        })
    }

    /// A flow on `cpu` completing `bio` from softirq (IRQs on: it excludes IRQ flows only while
    /// the batcher's `local_irq_save()` is held).
    fn spawn_softirq(&self, cpu: CpuId, bio: Box<Bio>) -> thread::JoinHandle<()> {
        let k = UntrackedArc::clone(&self.k);
        thread::spawn(move || {
            let cx = k.cpu(cpu).expect("CPU exists");
            cx.with_softirq(|cx| bio_endio(bio, cx));
        })
    }

    /// `cpu`'s kworker: `runs` times, fires a due delayed-work timer (the tick that interrupted
    /// it) and runs one queued work item, if any, counting executions on `done`.
    fn spawn_worker(
        &self,
        cpu: CpuId,
        runs: usize,
        tick: bool,
        done: loom::sync::Arc<WorkerRuns>,
    ) -> thread::JoinHandle<()> {
        let k = UntrackedArc::clone(&self.k);
        thread::spawn(move || {
            let cx = k.cpu(cpu).expect("CPU exists");
            for _ in 0..runs {
                if tick {
                    k.advance_jiffies(1);
                    k.run_timers(&cx);
                }
                if k.run_worker(PoolId::Cpu(cpu), &cx).is_some() {
                    done.bump();
                }
            }
        })
    }

    /// Eventual execution, single-threaded after the joins: time passes, timers fire and `cpu`'s
    /// worker runs until nothing is queued (bounded).
    fn settle(&self, cpu: CpuId) {
        let cx = self.k.cpu(cpu).expect("CPU exists");
        for _ in 0..4 {
            self.k.advance_jiffies(1);
            self.k.run_timers(&cx);
            while self.k.run_worker(PoolId::Cpu(cpu), &cx).is_some() {}
        }
    }

    /// The oracle, at quiescence (see the module docs for what it checks).
    fn check(&self) {
        assert_clean(
            "at the model's quiescence",
            &self.oracle.check_quiescent(&self.k),
        );
    }

    /// Runs hotplug steps of `cpu`'s operation, each on a fresh context of the CPU it names,
    /// until the next one is `state` (returned begun, not run) or the operation ends (`None`).
    fn steps_until(&self, cpu: CpuId, state: Option<StateId>) -> Option<HotplugStep> {
        while self.k.hotplug_in_progress(cpu) {
            let step = self.k.hotplug_begin_step(cpu).expect("step begins");
            if Some(step.invocation().state) == state {
                return Some(step);
            }
            let cx = self.k.cpu(step.run_on()).expect("CPU exists");
            self.finish(step, &cx);
        }
        assert!(state.is_none(), "the operation ended before {state:?}");
        None
    }

    /// Runs a begun step on `cx` and applies its result.
    fn finish(&self, step: HotplugStep, cx: &Cpu) -> StepOutcome {
        assert_eq!(cx.id(), step.run_on(), "{step:?} runs on its CPU");
        let r = self.k.hotplug_run_step(&step, cx);
        self.k.hotplug_finish_step(step, r).expect("step finishes")
    }

    /// `cpu`'s `cpuhp/N` thread, which may sleep in `disable_work_sync()` until `worker` returns.
    fn cpuhp_thread(&self, cpu: CpuId, worker: &loom::sync::Arc<WorkerRuns>) -> Cpu {
        let rt = SleepOnWorker(loom::sync::Arc::clone(worker));
        self.k
            .cpu_with_runtime(cpu, UntrackedArc::new(rt))
            .expect("CPU exists")
    }

    /// The first step of `cpu_down(cpu)` the producers race, begun, not run: the module's
    /// down_prep (the teardown of its online state, the first it registered), or, for a design
    /// without an online state (v3: only `page_alloc_cpu_dead()` at the fixed `CPUHP_PAGE_ALLOC`),
    /// the first teardown of the offline, whoever's it is.
    fn first_step(&self, cpu: CpuId) -> HotplugStep {
        let states = self.k.bio_complete().expect("initialised").hotplug_states();
        match states {
            [online, _, ..] => self
                .steps_until(cpu, Some(*online))
                .expect("down_prep step"),
            [only] if *only == hotplug::CPUHP_PAGE_ALLOC => self
                .k
                .hotplug_begin_step(cpu)
                .expect("the first step begins"),
            _ => panic!("the models need an online and a dead state, got {states:?}"),
        }
    }
}

/// Whether the kworker flow fires a due delayed-work timer before each run: for a version with
/// delayed work (a posted version's knob, or what a module declares with
/// `BioCompleteModule::work()`).
fn ticks(variant: Variant) -> bool {
    !matches!(variant.work, WorkKind::Plain)
}

fn join(handles: Vec<thread::JoinHandle<()>>) {
    for h in handles {
        h.join().expect("flow finished");
    }
}

// ---- a. IRQ producers and the worker on one CPU -----------------------------------------------

/// `A_BIOS` hardirqs on CPU0 each complete a flagged bio while CPU0's kworker runs the batch's
/// work (up to `A_WORKER_RUNS` times). The producers touch the list under `local_irq_save()`, the
/// worker under `local_irq_disable()`; the workqueue's PENDING rule must leave no bio behind.
fn irq_producers_and_worker(variant: Variant) {
    let mut m = Machine::boot(variant, 1);
    let bios = (0..A_BIOS).map(|_| m.flagged_bio()).collect();
    let tick = ticks(variant);
    let done = loom::sync::Arc::new(WorkerRuns::default());
    let flows = vec![
        m.spawn_irqs(CPU0, bios),
        m.spawn_worker(CPU0, A_WORKER_RUNS, tick, done),
    ];
    join(flows);
    m.settle(CPU0);
    m.check();
}

#[test]
#[cfg_attr(
    feature = "bug-worker-list-no-irq-off",
    should_panic(expected = "Causality violation")
)]
fn a_irq_producers_and_worker_v7() {
    run("a_irq_producers_and_worker_v7", 2, || {
        irq_producers_and_worker(Variant::V7)
    });
}

/// The delayed variant: the producer arms a 1-jiffy timer; the worker flow ticks first.
#[test]
#[cfg_attr(
    feature = "bug-worker-list-no-irq-off",
    should_panic(expected = "Causality violation")
)]
fn a_irq_producers_and_worker_v6_review() {
    run("a_irq_producers_and_worker_v6_review", 2, || {
        irq_producers_and_worker(Variant::V6_REVIEW)
    });
}

/// v6 as posted: `local_lock_irqsave()`/`local_lock_irq()` (IRQs off on !RT) and the delay.
#[test]
fn a_irq_producers_and_worker_v6() {
    run("a_irq_producers_and_worker_v6", 2, || {
        irq_producers_and_worker(Variant::V6)
    });
}

/// v5: the lock-less llist (`llist_add()` reports "was empty"; the worker `llist_del_all()`s).
#[test]
fn a_irq_producers_and_worker_v5() {
    run("a_irq_producers_and_worker_v5", 2, || {
        irq_producers_and_worker(Variant::V5)
    });
}

// ---- b. two CPUs, the hotplug drain on the main thread ----------------------------------------

/// Two hardirqs and the kworker on CPU1 while main offlines CPU1: `down_prep` on CPU1's cpuhp
/// thread (`disable_work_sync()`, which waits for a running worker), `workqueue:online` teardown
/// (the pool is unbound), the death handshake (the IRQ flows of CPU1 are joined: nothing runs on
/// a dead CPU), then `takedown_cpu` and the dead drain on CPU0. The kworker is joined only at the
/// end: once unbound it is no longer "on" CPU1, so only `disable_work_sync()` orders it before
/// the drain.
fn hotplug_drain_two_cpus(variant: Variant) {
    let mut m = Machine::boot(variant, 2);
    let bios = vec![m.flagged_bio(), m.flagged_bio()];
    m.k.cpu_down_start(CPU1, CPUHP_OFFLINE)
        .expect("cpu_down starts");
    let down_prep = m.first_step(CPU1);
    let done = loom::sync::Arc::new(WorkerRuns::default());
    let irqs = vec![m.spawn_irqs(CPU1, bios)];
    let tick = ticks(variant);
    let worker = m.spawn_worker(CPU1, B_WORKER_RUNS, tick, loom::sync::Arc::clone(&done));
    m.finish(down_prep, &m.cpuhp_thread(CPU1, &done));
    let takedown = m
        .steps_until(CPU1, Some(CPUHP_TEARDOWN_CPU))
        .expect("takedown_cpu step");
    join(irqs);
    m.finish(takedown, &m.k.cpu(CPU0).expect("CPU0"));
    m.steps_until(CPU1, None);
    assert!(!m.k.cpu_online(CPU1));
    join(vec![worker]);
    m.settle(CPU0);
    m.check();
}

#[test]
#[cfg_attr(
    feature = "bug-down-prep-no-sync",
    should_panic(expected = "Causality violation")
)]
fn b_hotplug_drain_two_cpus_v7() {
    run("b_hotplug_drain_two_cpus_v7", 2, || {
        hotplug_drain_two_cpus(Variant::V7)
    });
}

/// The delayed variant: `down_prep`'s `disable_delayed_work_sync()` also races the timer the
/// worker flow's tick fires.
#[test]
#[cfg_attr(
    feature = "bug-down-prep-no-sync",
    should_panic(expected = "Causality violation")
)]
fn b_hotplug_drain_two_cpus_v6_review() {
    run("b_hotplug_drain_two_cpus_v6_review", 2, || {
        hotplug_drain_two_cpus(Variant::V6_REVIEW)
    });
}

// ---- c. the dead-CPU drain racing a late producer ---------------------------------------------

/// After `down_prep` disabled CPU1's work, a hardirq and a softirq on CPU1 still complete flagged
/// bios (finding 9): they stay on the batch (the queue attempt fails) until the dead callback on
/// CPU0 drains it. The drain takes the list with no lock at all, so it is correct only after the
/// death handshake; `bug-drain-before-death` drains first and joins the flows afterwards.
fn late_producer_vs_dead_drain(variant: Variant) {
    let mut m = Machine::boot(variant, 2);
    let bios = [m.flagged_bio(), m.flagged_bio()];
    m.k.cpu_down_start(CPU1, CPUHP_OFFLINE)
        .expect("cpu_down starts");
    let down_prep = m.first_step(CPU1);
    m.finish(down_prep, &m.k.cpu(CPU1).expect("CPU1"));
    let [hard, soft] = bios;
    let flows = vec![m.spawn_irqs(CPU1, vec![hard]), m.spawn_softirq(CPU1, soft)];
    let takedown = m
        .steps_until(CPU1, Some(CPUHP_TEARDOWN_CPU))
        .expect("takedown_cpu step");
    let drain_before_death = cfg!(feature = "bug-drain-before-death");
    let mut flows = Some(flows);
    if !drain_before_death {
        join(flows.take().expect("not joined yet"));
    }
    m.finish(takedown, &m.k.cpu(CPU0).expect("CPU0"));
    m.steps_until(CPU1, None);
    if let Some(flows) = flows {
        join(flows);
    }
    m.check();
}

#[test]
#[cfg_attr(
    feature = "bug-drain-before-death",
    should_panic(expected = "Causality violation")
)]
fn c_late_producer_vs_dead_drain_v7() {
    run("c_late_producer_vs_dead_drain_v7", 2, || {
        late_producer_vs_dead_drain(Variant::V7)
    });
}

/// The delayed variant: the late producer's `mod_delayed_work_on()` meets a disabled work.
#[test]
#[cfg_attr(
    feature = "bug-drain-before-death",
    should_panic(expected = "Causality violation")
)]
fn c_late_producer_vs_dead_drain_v6_review() {
    run("c_late_producer_vs_dead_drain_v6_review", 2, || {
        late_producer_vs_dead_drain(Variant::V6_REVIEW)
    });
}

// ---- d. a hotplug rollback racing a producer (finding 1, a lost wakeup) -----------------------

/// A hardirq on CPU1 completes a flagged bio while main offlines CPU1 and the step after
/// `down_prep` fails, so the rollback runs the online callback again. A bio deferred while the
/// work was disabled (or whose queued work `down_prep` cancelled) must be requeued by the online
/// callback (the review's fix, v6-review/v7); without the requeue it is stranded.
fn rollback_vs_producer(variant: Variant) {
    let mut m = Machine::boot(variant, 2);
    let bio = m.flagged_bio();
    m.k.cpu_down_start(CPU1, CPUHP_OFFLINE)
        .expect("cpu_down starts");
    let down_prep = m.first_step(CPU1);
    // Fail the step after down_prep (workqueue:online teardown): the rollback brings CPU1 back.
    m.k.hotplug()
        .set_fail(CPU1, hotplug::CPUHP_AP_WORKQUEUE_ONLINE.0)
        .expect("fail is settable");
    let irq = m.spawn_irqs(CPU1, vec![bio]);
    m.finish(down_prep, &m.k.cpu(CPU1).expect("CPU1"));
    loop {
        let step = m.k.hotplug_begin_step(CPU1).expect("step begins");
        let cx = m.k.cpu(step.run_on()).expect("CPU exists");
        if let StepOutcome::Ran {
            finished: Some(r), ..
        } = m.finish(step, &cx)
        {
            assert!(r.is_err(), "the injected failure rolls the offline back");
            break;
        }
    }
    assert!(m.k.cpu_online(CPU1));
    join(vec![irq]);
    m.settle(CPU1);
    m.check();
}

#[test]
#[cfg_attr(feature = "bug-online-no-requeue", should_panic(expected = "stranded"))]
fn d_rollback_vs_producer_v7() {
    run("d_rollback_vs_producer_v7", 2, || {
        let mut v = Variant::V7;
        // The twin: finding 1's knob off, as in v5/v6.
        v.requeue_on_online = !cfg!(feature = "bug-online-no-requeue");
        rollback_vs_producer(v)
    });
}

// ---- RFC v3 (mm/dropbehind_v3.rs through the v3 module) ------------------------------------------
//
// v3's batch is a `folio_batch` under `local_lock_t` (`local_lock_irqsave()` in the producer,
// `local_lock_irq()` in `dropbehind_work_fn()`), its work plain on `system_wq`, never disabled;
// `dropbehind_drain_cpu()` runs at `CPUHP_PAGE_ALLOC`, below the death. Models a, c and d run it
// (their `down_prep` step is the offline's first teardown: v3 has none). Model b does not: its
// kworker flow keeps CPU1's context after the pool is unbound, which for v3's work -- re-reading
// `this_cpu_ptr()` under the lock on every pass -- would be a worker that never migrates; the
// kernel's leaves CPU1 at `sched:waitempty`, before the death, and then drains the CPU it runs
// on. Model d fails `workqueue:online` itself, so the pool never unbinds and v3 holds; the
// rollback that strands v3's batch needs the unbound run (finding 16, which the proptest machine
// finds and tests/tests/hotplug_rollback.rs keeps).

#[test]
fn a_irq_producers_and_worker_v3() {
    run("a_irq_producers_and_worker_v3", 2, || {
        irq_producers_and_worker(Variant::V3)
    });
}

/// `bug-drain-before-death` breaks v3's `dropbehind_drain_cpu()` as it breaks the posted dead
/// callback: the unlocked take of the dead CPU's `folio_batch` races its last producers.
#[test]
#[cfg_attr(
    feature = "bug-drain-before-death",
    should_panic(expected = "Causality violation")
)]
fn c_late_producer_vs_dead_drain_v3() {
    run("c_late_producer_vs_dead_drain_v3", 2, || {
        late_producer_vs_dead_drain(Variant::V3)
    });
}

#[test]
fn d_rollback_vs_producer_v3() {
    run("d_rollback_vs_producer_v3", 2, || {
        rollback_vs_producer(Variant::V3)
    });
}

// ---- the same models on the example modules of docs/own-patch.md --------------------------------
//
// bio-sim/examples/v6_llist (an llist added under local_irq_save(), delayed work, the
// need_resched() yield, enable_and_queue_work() on online) and bio-sim/examples/hillf (a bio_list
// under local_irq_save(), drained until empty), at the same bound. Under
// `bug-module-online-no-requeue` model d runs the broken twin of v6-llist instead
// (tests/src/broken_module.rs: online without the requeue) and must be caught.

fn v6_llist() -> Variant {
    Variant::module(&biosim_tests::v6_llist::MODULE)
}

fn hillf() -> Variant {
    Variant::module(&biosim_tests::hillf::MODULE)
}

#[test]
fn a_irq_producers_and_worker_v6_llist() {
    run("a_irq_producers_and_worker_v6_llist", 2, || {
        irq_producers_and_worker(v6_llist())
    });
}

#[test]
fn b_hotplug_drain_two_cpus_v6_llist() {
    run("b_hotplug_drain_two_cpus_v6_llist", 2, || {
        hotplug_drain_two_cpus(v6_llist())
    });
}

/// Under `bug-drain-before-death` the llist has no data race for loom to see (every access is
/// atomic), but the late bios land on the list after the drain: the oracle's "stranded".
#[test]
#[cfg_attr(
    feature = "bug-drain-before-death",
    should_panic(expected = "stranded")
)]
fn c_late_producer_vs_dead_drain_v6_llist() {
    run("c_late_producer_vs_dead_drain_v6_llist", 2, || {
        late_producer_vs_dead_drain(v6_llist())
    });
}

#[test]
#[cfg_attr(
    feature = "bug-module-online-no-requeue",
    should_panic(expected = "stranded")
)]
fn d_rollback_vs_producer_v6_llist() {
    run("d_rollback_vs_producer_v6_llist", 2, || {
        let v = if cfg!(feature = "bug-module-online-no-requeue") {
            Variant::module(&biosim_tests::broken_module::MODULE)
        } else {
            v6_llist()
        };
        rollback_vs_producer(v)
    });
}

#[test]
fn a_irq_producers_and_worker_hillf() {
    run("a_irq_producers_and_worker_hillf", 2, || {
        irq_producers_and_worker(hillf())
    });
}

#[test]
fn b_hotplug_drain_two_cpus_hillf() {
    run("b_hotplug_drain_two_cpus_hillf", 2, || {
        hotplug_drain_two_cpus(hillf())
    });
}

#[test]
#[cfg_attr(
    feature = "bug-drain-before-death",
    should_panic(expected = "Causality violation")
)]
fn c_late_producer_vs_dead_drain_hillf() {
    run("c_late_producer_vs_dead_drain_hillf", 2, || {
        late_producer_vs_dead_drain(hillf())
    });
}

#[test]
fn d_rollback_vs_producer_hillf() {
    run("d_rollback_vs_producer_hillf", 2, || {
        rollback_vs_producer(hillf())
    });
}
