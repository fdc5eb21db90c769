//! The task-completion batcher driven by hand: deferral from atomic contexts, the worker, the
//! variants' scheduling, and the hotplug protocol's windows.

use bio_core::block::complete_in_task::{
    __bio_complete_in_task, bio_complete_in_task, bio_complete_init, end_io_in_task, InTask,
    Variant, LIVELOCK_PASSES, LIVELOCK_REPORT,
};
use bio_core::block::{bio_endio, BioEndIo, BioFlag, ReqOp};
use bio_core::kernel::{ContextKind, CpuId, PreemptModel, ReportKind};
use bio_core::workqueue::PoolId;
use bio_core::{Kernel, KernelConfig};
use std::sync::{Arc, Mutex};

type Seen = Arc<Mutex<Vec<(u64, u32, bool)>>>;

fn recorder(seen: &Seen) -> BioEndIo {
    let seen = Arc::clone(seen);
    BioEndIo::new("record_end_io", move |bio, cx| {
        seen.lock()
            .unwrap()
            .push((bio.id(), cx.id().0, cx.may_sleep()))
    })
}

fn setup(variant: Variant, config: KernelConfig) -> Arc<Kernel> {
    let k = Kernel::new(config, 2).unwrap();
    bio_complete_init(&k, variant, None).unwrap();
    k
}

#[test]
fn a_flagged_bio_completed_in_hardirq_runs_its_end_io_in_the_cpus_worker() {
    for variant in Variant::ALL {
        let k = setup(variant, KernelConfig::default());
        let cx = k.cpu(CpuId(1)).unwrap();
        let seen = Seen::default();
        let mut bio = k.bio_alloc(ReqOp::Write, 0).with_end_io(recorder(&seen));
        bio.set_flag(BioFlag::CompleteInTask);
        let id = bio.id();
        cx.with_hardirq(|cx| bio_endio(bio, cx));
        assert!(
            seen.lock().unwrap().is_empty(),
            "{variant}: deferred, not run in the IRQ"
        );
        assert_eq!(k.bio_complete().unwrap().pending(CpuId(1)), 1);
        // Delayed variants need the jiffy to pass and the timer to fire.
        k.advance_jiffies(1);
        k.run_timers(&cx);
        let ran = k
            .run_worker(PoolId::Cpu(CpuId(1)), &cx)
            .expect("the batch's work is queued on CPU1");
        // RFC v3's work is mm/filemap.c's dropbehind_work_fn(); the bio series' is block/bio.c's.
        let work_fn = if variant == Variant::V3 {
            "dropbehind_work_fn"
        } else {
            "bio_complete_work_fn"
        };
        assert_eq!(ran.function, work_fn, "{variant}");
        assert_eq!(*seen.lock().unwrap(), [(id, 1, true)], "{variant}");
        assert!(k.reports().is_empty(), "{variant}: {:?}", k.reports().all());
    }
}

#[test]
fn a_flagged_bio_completed_where_it_may_sleep_is_not_deferred() {
    let k = setup(Variant::V7, KernelConfig::default());
    let cx = k.cpu(CpuId(0)).unwrap();
    let seen = Seen::default();
    let mut bio = k.bio_alloc(ReqOp::Write, 0).with_end_io(recorder(&seen));
    bio.set_flag(BioFlag::CompleteInTask);
    bio_endio(bio, &cx);
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(k.bio_complete().unwrap().pending(CpuId(0)), 0);
}

#[test]
fn the_parent_flag_decides_after_the_chain_walk() {
    let k = setup(Variant::V7, KernelConfig::default());
    let cx = k.cpu(CpuId(0)).unwrap();
    let seen = Seen::default();
    let mut parent = k.bio_alloc(ReqOp::Write, 0).with_end_io(recorder(&seen));
    parent.set_flag(BioFlag::CompleteInTask);
    let mut child = k.bio_alloc(ReqOp::Write, 8);
    bio_core::block::bio_chain(&mut child, &mut parent, &cx).unwrap();
    bio_endio(parent, &cx);
    cx.with_hardirq(|cx| bio_endio(child, cx));
    assert!(
        seen.lock().unwrap().is_empty(),
        "the unflagged child's completion defers the flagged parent"
    );
    k.run_worker(PoolId::Cpu(CpuId(0)), &cx).unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[test]
fn bio_complete_in_task_defers_from_atomic_and_runs_in_task() {
    let k = setup(Variant::V7, KernelConfig::default());
    let cx = k.cpu(CpuId(0)).unwrap();
    let seen = Seen::default();
    let s = Arc::clone(&seen);
    let end = end_io_in_task("fserror_end_io", move |bio, cx| {
        s.lock()
            .unwrap()
            .push((bio.id(), cx.id().0, cx.may_sleep()))
    });
    cx.with_softirq(|cx| bio_endio(k.bio_alloc(ReqOp::Write, 0).with_end_io(end.clone()), cx));
    assert!(seen.lock().unwrap().is_empty());
    k.run_worker(PoolId::Cpu(CpuId(0)), &cx).unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert!(seen.lock().unwrap()[0].2, "ran where it may sleep");
    // From task context it runs at once.
    let bio = k.bio_alloc(ReqOp::Write, 0);
    assert!(matches!(bio_complete_in_task(bio, &cx), InTask::Run(_)));
}

#[test]
fn without_preempt_count_v6_re_defers_forever_and_the_guard_stops_it() {
    let config = KernelConfig::without_preempt_count(PreemptModel::None);
    for variant in [Variant::V6, Variant::V6_REVIEW] {
        let k = setup(variant, config);
        let cx = k.cpu(CpuId(0)).unwrap();
        let seen = Seen::default();
        let s = Arc::clone(&seen);
        let end = end_io_in_task("fserror_end_io", move |bio, cx| {
            s.lock()
                .unwrap()
                .push((bio.id(), cx.id().0, cx.may_sleep()))
        });
        ContextKind::Hardirq.run(&cx, |cx| {
            bio_endio(k.bio_alloc(ReqOp::Write, 0).with_end_io(end), cx)
        });
        k.advance_jiffies(1);
        k.run_timers(&cx);
        k.run_worker(PoolId::Cpu(CpuId(0)), &cx).unwrap();
        if variant == Variant::V6 {
            // No guard: the worker's bi_end_io finds bio_in_atomic() true again (no PREEMPT_COUNT)
            // and defers the bio onto the list the worker is draining, forever.
            assert!(seen.lock().unwrap().is_empty(), "v6: never completes");
            let bugs = k.reports().of_kind(ReportKind::Bug);
            assert_eq!(bugs.len(), 1, "{bugs:?}");
            assert!(
                bugs[0]
                    .message
                    .starts_with("biosim: livelock: CPU#0 bio_complete_work_fn [kworker/0:1]"),
                "{}",
                bugs[0].message
            );
            assert_eq!(
                k.bio_complete().unwrap().pending(CpuId(0)),
                1,
                "the bio is kept, not lost"
            );
        } else {
            assert_eq!(
                seen.lock().unwrap().len(),
                1,
                "v6-review: completes on the first worker run"
            );
            assert!(k.reports().is_empty());
        }
    }
}

#[test]
fn with_need_resched_v6_yields_and_requeues_so_the_re_deferral_never_ends() {
    let config = KernelConfig::without_preempt_count(PreemptModel::None);
    let k = setup(Variant::V6, config);
    let cx = k.cpu(CpuId(0)).unwrap();
    let end = end_io_in_task("fserror_end_io", |_, _| {});
    ContextKind::Hardirq.run(&cx, |cx| {
        bio_endio(k.bio_alloc(ReqOp::Write, 0).with_end_io(end), cx)
    });
    let mut runs = 0;
    for _ in 0..20 {
        k.advance_jiffies(1);
        k.run_timers(&cx);
        cx.set_need_resched(true);
        if k.run_worker(PoolId::Cpu(CpuId(0)), &cx).is_some() {
            runs += 1;
        }
    }
    assert_eq!(
        runs, 20,
        "every run yields after one pass and requeues itself for the same bio"
    );
    assert_eq!(k.bio_complete().unwrap().pending(CpuId(0)), 1);
    assert!(k.reports().is_empty());
}

#[test]
fn local_lock_on_rt_from_hardirq_is_an_invalid_wait_context_only_in_v6() {
    for (variant, caught) in [
        (Variant::V5, false),
        (Variant::V6, true),
        (Variant::V6_REVIEW, false),
        (Variant::V7, false),
    ] {
        let k = setup(variant, KernelConfig::for_model(PreemptModel::Rt));
        let cx = k.cpu(CpuId(0)).unwrap();
        let mut bio = k
            .bio_alloc(ReqOp::Write, 0)
            .with_end_io(BioEndIo::new("e", |_, _| {}));
        bio.set_flag(BioFlag::CompleteInTask);
        cx.with_hardirq(|cx| bio_endio(bio, cx));
        let n = k.reports().of_kind(ReportKind::InvalidWaitContext).len();
        assert_eq!(n > 0, caught, "{variant}: {:?}", k.reports().all());
    }
}

#[test]
fn a_deferred_bio_without_end_io_is_a_null_dereference_in_the_worker() {
    let k = setup(Variant::V7, KernelConfig::default());
    let cx = k.cpu(CpuId(0)).unwrap();
    let mut bio = k.bio_alloc(ReqOp::Flush, 0);
    bio.set_flag(BioFlag::CompleteInTask);
    cx.with_hardirq(|cx| bio_endio(bio, cx));
    k.run_worker(PoolId::Cpu(CpuId(0)), &cx).unwrap();
    let bugs = k.reports().of_kind(ReportKind::Bug);
    assert_eq!(bugs.len(), 1);
    assert!(bugs[0]
        .message
        .starts_with("BUG: kernel NULL pointer dereference"));
}

#[test]
fn init_disables_offline_cpus_so_online_enable_balances() {
    for (disable, warns) in [(true, 0), (false, 1)] {
        let k = Kernel::boot(KernelConfig::default(), 2, 1).unwrap();
        let mut v = Variant::V7;
        v.init_disables_offline = disable;
        bio_complete_init(&k, v, None).unwrap();
        k.cpu_hotplug_to(CpuId(1), hotplug::CPUHP_ONLINE, true)
            .unwrap();
        let under = k
            .reports()
            .all()
            .iter()
            .filter(|r| r.message.contains("disable count underflowed"))
            .count();
        assert_eq!(under, warns, "init_disables_offline={disable}");
        assert_eq!(
            k.work_disable_count(k.bio_complete().unwrap().work_of(CpuId(1)).unwrap()),
            0
        );
    }
}

#[test]
fn the_dynamic_states_are_registered_nocalls() {
    let k = setup(Variant::V7, KernelConfig::default());
    let [online, dead] = k.bio_complete().unwrap().hotplug_states() else {
        panic!("the posted module registers two states")
    };
    let listing = k.hotplug().states_listing();
    assert!(
        listing.contains(&format!("{:3}: block/bio:complete:online", online.0)),
        "{listing}"
    );
    assert!(
        listing.contains(&format!("{:3}: block/bio:complete:dead", dead.0)),
        "{listing}"
    );
    assert!(
        bio_complete_init(&k, Variant::V7, None).is_err(),
        "init once"
    );
}

#[test]
fn the_last_reference_ending_in_hardirq_defers_a_flagged_bio_too() {
    let k = setup(Variant::V7, KernelConfig::default());
    let cx = k.cpu(CpuId(0)).unwrap();
    let seen = Seen::default();
    let mut bio = k.bio_alloc(ReqOp::Write, 0).with_end_io(recorder(&seen));
    bio.set_flag(BioFlag::CompleteInTask);
    let extra = bio_core::block::bio_inc_remaining(&mut bio);
    bio_endio(bio, &cx);
    cx.with_hardirq(|cx| bio_core::block::bio_endio_ref(extra, cx));
    assert!(
        seen.lock().unwrap().is_empty(),
        "deferred, not run in the IRQ"
    );
    k.run_worker(PoolId::Cpu(CpuId(0)), &cx).unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert!(seen.lock().unwrap()[0].2);
}

#[test]
fn v6_on_rt_completing_from_softirq_is_clean() {
    let k = setup(Variant::V6, KernelConfig::for_model(PreemptModel::Rt));
    let cx = k.cpu(CpuId(0)).unwrap();
    let seen = Seen::default();
    let mut bio = k.bio_alloc(ReqOp::Write, 0).with_end_io(recorder(&seen));
    bio.set_flag(BioFlag::CompleteInTask);
    cx.with_softirq(|cx| bio_endio(bio, cx));
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    assert_eq!(
        k.bio_complete().unwrap().pending(CpuId(0)),
        1,
        "deferred: RCU read side on RT"
    );
}

/// A stream of fresh bios on CPU0 under v7: the `n`-th `bi_end_io` call ends its bio and, when
/// `n` is a multiple of `every`, completes `every` NEW flagged bios from a (nested) hardirq on the
/// same CPU (a device IRQ arriving while the worker drains), until `total` bios have completed.
/// Every call completes a bio; `every` = 1 defers a fresh bio inside every call. Returns how many
/// completed in the worker's one run, how many wait, and the kernel's reports.
fn fresh_bio_stream(total: usize, every: usize) -> (usize, usize, Vec<String>) {
    fn stream(k: &Arc<Kernel>, done: &Arc<Mutex<usize>>, total: usize, every: usize) -> BioEndIo {
        let (k2, done2) = (Arc::clone(k), Arc::clone(done));
        BioEndIo::new("stream_end_io", move |_bio, cx| {
            let n = {
                let mut d = done2.lock().unwrap();
                *d += 1;
                *d
            };
            if n % every == 0 && n + every <= total {
                for _ in 0..every {
                    let mut next = k2
                        .bio_alloc(ReqOp::Write, 0)
                        .with_end_io(stream(&k2, &done2, total, every));
                    next.set_flag(BioFlag::CompleteInTask);
                    cx.with_hardirq(|cx| bio_endio(next, cx));
                }
            }
        })
    }
    let k = setup(Variant::V7, KernelConfig::default());
    let cx = k.cpu(CpuId(0)).unwrap();
    let done = Arc::new(Mutex::new(0usize));
    for _ in 0..every {
        let mut first = k
            .bio_alloc(ReqOp::Write, 0)
            .with_end_io(stream(&k, &done, total, every));
        first.set_flag(BioFlag::CompleteInTask);
        cx.with_hardirq(|cx| bio_endio(first, cx));
    }
    k.run_worker(PoolId::Cpu(CpuId(0)), &cx)
        .expect("the batch's work is queued");
    let n = *done.lock().unwrap();
    let reports = k
        .reports()
        .all()
        .iter()
        .map(|r| r.message.clone())
        .collect();
    (n, k.bio_complete().unwrap().pending(CpuId(0)), reports)
}

/// biosim's livelock detector ([`LIVELOCK_PASSES`]) must tell a worker that makes progress from
/// the endless re-deferral: a stream of fresh bios completed by 3 x LIVELOCK_PASSES `bi_end_io`
/// calls in one work-function run, a fresh bio deferred by every other call, is not reported,
/// while the same bio deferred again by every call (v6 without `CONFIG_PREEMPT_COUNT`) still is.
/// Breaking the detector's progress test either way fails one half.
#[test]
fn the_livelock_detector_spares_a_stream_of_fresh_bios_and_still_reports_the_re_deferral() {
    let total = 3 * LIVELOCK_PASSES;
    let (done, left, reports) = fresh_bio_stream(total, 2);
    assert_eq!(
        (done, left),
        (total, 0),
        "the whole stream completes in one run: {reports:?}"
    );
    assert!(reports.is_empty(), "{reports:?}");
    // The endless re-deferral: the same bio, deferred again by every bi_end_io.
    let k = setup(
        Variant::V6,
        KernelConfig::without_preempt_count(PreemptModel::None),
    );
    let cx = k.cpu(CpuId(0)).unwrap();
    let end = end_io_in_task("fserror_end_io", |_, _| {});
    ContextKind::Hardirq.run(&cx, |cx| {
        bio_endio(k.bio_alloc(ReqOp::Write, 0).with_end_io(end), cx)
    });
    k.advance_jiffies(1);
    k.run_timers(&cx);
    k.run_worker(PoolId::Cpu(CpuId(0)), &cx).unwrap();
    let bugs = k.reports().of_kind(ReportKind::Bug);
    assert_eq!(bugs.len(), 1, "{bugs:?}");
    assert!(
        bugs[0].message.starts_with(&format!(
            "{LIVELOCK_REPORT}: CPU#0 bio_complete_work_fn [kworker/0:1] ran {LIVELOCK_PASSES} passes"
        )),
        "{}",
        bugs[0].message
    );
}

/// The same stream with a fresh bio deferred by EVERY `bi_end_io` call (a device IRQ per
/// completion): every call completes a bio, so nothing may be reported. The detector's progress
/// test is the ended bio not coming back; one that counted any deferral on the CPU during the call
/// would report "completed no bio" after LIVELOCK_PASSES calls (having completed that many).
#[test]
fn the_livelock_detector_spares_a_fresh_bio_deferred_by_every_call() {
    let total = 3 * LIVELOCK_PASSES;
    let (done, left, reports) = fresh_bio_stream(total, 1);
    assert_eq!((done, left), (total, 0), "{reports:?}");
    assert!(reports.is_empty(), "{reports:?}");
}

/// A forced-threaded handler (`irq_forced_thread_fn()`) on PREEMPT_RT is a task in an RCU
/// read-side section (RT's `local_bh_disable()`): `bio_in_atomic()` defers the flagged bio. A
/// `request_threaded_irq()` thread function is plain task context: the bio completes in place.
/// On !RT (the `threadirqs` case) the forced thread also has IRQs off: deferred.
#[test]
fn a_threaded_handler_defers_only_where_it_may_not_sleep() {
    for (model, forced, deferred) in [
        (PreemptModel::Rt, true, true),
        (PreemptModel::Rt, false, false),
        (PreemptModel::Full, true, true),
        (PreemptModel::Full, false, false),
    ] {
        let k = setup(Variant::V7, KernelConfig::for_model(model));
        assert_eq!(k.force_irqthreads(), model == PreemptModel::Rt);
        let cx = k.cpu(CpuId(0)).unwrap();
        let seen = Seen::default();
        let mut bio = k.bio_alloc(ReqOp::Write, 0).with_end_io(recorder(&seen));
        bio.set_flag(BioFlag::CompleteInTask);
        let comm = if forced {
            cx.irq_forced_thread_fn(24, "nvme0q1", |cx| {
                assert!(cx.in_task() && !cx.may_sleep(), "{model:?}");
                bio_endio(bio, cx);
                cx.current().comm
            })
        } else {
            cx.irq_thread_fn(24, "nvme0q1", |cx| {
                assert!(cx.may_sleep(), "{model:?}");
                bio_endio(bio, cx);
                cx.current().comm
            })
        };
        assert_eq!(comm, "irq/24-nvme0q1");
        assert_ne!(cx.current().comm, comm, "current is restored");
        assert_eq!(
            k.bio_complete().unwrap().pending(CpuId(0)),
            usize::from(deferred),
            "{model:?} forced={forced}"
        );
        if !deferred {
            assert_eq!(seen.lock().unwrap().len(), 1);
            assert!(seen.lock().unwrap()[0].2, "completed where it may sleep");
        }
        assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    }
}

/// A bio whose `bi_end_io` defers the same bio again `times` times (through the exported
/// `__bio_complete_in_task()`, as an end_io re-deferring itself would), then completes it;
/// run by v7's worker once. Returns whether it completed and the livelock reports.
fn re_deferred(times: usize) -> (bool, usize) {
    let k = setup(Variant::V7, KernelConfig::default());
    let cx = k.cpu(CpuId(0)).unwrap();
    let calls = Arc::new(Mutex::new(0usize));
    let done = Arc::new(Mutex::new(false));
    let (c, d) = (Arc::clone(&calls), Arc::clone(&done));
    let mut bio = k.bio_alloc(ReqOp::Write, 0).with_end_io(BioEndIo::new(
        "redefer_end_io",
        move |bio, cx| {
            let mut n = c.lock().unwrap();
            *n += 1;
            if *n <= times {
                drop(n);
                __bio_complete_in_task(bio, cx);
            } else {
                *d.lock().unwrap() = true;
            }
        },
    ));
    bio.set_flag(BioFlag::CompleteInTask);
    cx.with_hardirq(|cx| bio_endio(bio, cx));
    k.run_worker(PoolId::Cpu(CpuId(0)), &cx).unwrap();
    let livelocks = k
        .reports()
        .all()
        .iter()
        .filter(|r| r.message.starts_with(LIVELOCK_REPORT))
        .count();
    let completed = *done.lock().unwrap();
    (completed, livelocks)
}

/// The detector's threshold is exactly LIVELOCK_PASSES consecutive re-deferrals: one fewer, and
/// the bio's next `bi_end_io` completes it unreported; that many, and the run is stopped.
#[test]
fn the_livelock_detector_fires_at_exactly_livelock_passes_re_deferrals() {
    assert_eq!(re_deferred(LIVELOCK_PASSES - 1), (true, 0));
    assert_eq!(re_deferred(LIVELOCK_PASSES), (false, 1));
}

/// The count starts afresh with every work-function run: v6 yielding on `need_resched()` after
/// each pass re-defers the bio once per run, for more runs than LIVELOCK_PASSES, unreported.
#[test]
fn the_livelock_count_restarts_with_every_run() {
    let config = KernelConfig::without_preempt_count(PreemptModel::None);
    let k = setup(Variant::V6, config);
    let cx = k.cpu(CpuId(0)).unwrap();
    let end = end_io_in_task("fserror_end_io", |_, _| {});
    ContextKind::Hardirq.run(&cx, |cx| {
        bio_endio(k.bio_alloc(ReqOp::Write, 0).with_end_io(end), cx)
    });
    let mut runs = 0;
    for _ in 0..LIVELOCK_PASSES + 100 {
        k.advance_jiffies(1);
        k.run_timers(&cx);
        cx.set_need_resched(true);
        if k.run_worker(PoolId::Cpu(CpuId(0)), &cx).is_some() {
            runs += 1;
        }
    }
    assert_eq!(runs, LIVELOCK_PASSES + 100);
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
}
