//! The threaded runtime: smoke and stress tests with exact counts, IRQ masking, timers, nested
//! waits, the rescuer, hotplug and shutdown reporting. Each test finishes in seconds; none
//! measures time (latency is measured by `benches/threaded_latency.rs`).

use bio_core::kernel::{CpuId, ReportKind};
use bio_core::workqueue::{PoolId, WorkStruct, Workqueue, WQ_MEM_RECLAIM, WQ_PERCPU};
use bio_core::{Kernel, KernelConfig};
use bio_sim::runtime::threaded::{ThreadedConfig, ThreadedError, ThreadedRuntime};
use hotplug::{CPUHP_OFFLINE, CPUHP_ONLINE};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const QUIESCE: Duration = Duration::from_secs(20);

fn kernel(nr: u32) -> Arc<Kernel> {
    let config = KernelConfig {
        hz: 1000,
        ..KernelConfig::default()
    };
    Kernel::new(config, nr).unwrap()
}

fn start(k: &Arc<Kernel>) -> ThreadedRuntime {
    ThreadedRuntime::start(
        Arc::clone(k),
        ThreadedConfig {
            record_work: true,
            ..ThreadedConfig::default()
        },
    )
    .unwrap()
}

/// Where and in which context something ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ran {
    cpu: u32,
    hardirq: bool,
    task: bool,
    may_sleep: bool,
    cpu_online: bool,
}

fn ran_here(cx: &bio_core::Cpu) -> Ran {
    Ran {
        cpu: cx.id().0,
        hardirq: cx.in_hardirq(),
        task: cx.in_task(),
        may_sleep: cx.may_sleep(),
        cpu_online: cx.kernel().cpu_online(cx.id()),
    }
}

/// One record slot per event: every slot must be filled exactly once.
struct Slots {
    hits: Vec<AtomicU32>,
    ran: Vec<Mutex<Option<Ran>>>,
}

impl Slots {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Self {
            hits: (0..n).map(|_| AtomicU32::new(0)).collect(),
            ran: (0..n).map(|_| Mutex::new(None)).collect(),
        })
    }

    fn hit(&self, i: usize, cx: &bio_core::Cpu) {
        self.hits[i].fetch_add(1, Ordering::SeqCst);
        *self.ran[i].lock().unwrap() = Some(ran_here(cx));
    }

    fn get(&self, i: usize) -> (u32, Option<Ran>) {
        (
            self.hits[i].load(Ordering::SeqCst),
            *self.ran[i].lock().unwrap(),
        )
    }
}

/// IRQ `i` aimed at `target`: its handler records itself and queues the distinct work `i` on
/// `target`'s pool (which, if `target` is offline, is disassociated and runs elsewhere).
fn raise(
    k: &Kernel,
    target: CpuId,
    i: usize,
    wq: &Workqueue,
    works: &Arc<Vec<WorkStruct>>,
    irq_slots: &Arc<Slots>,
    queue_failures: &Arc<AtomicU32>,
) {
    let (wq, works, irq_slots, queue_failures) = (
        wq.clone(),
        Arc::clone(works),
        Arc::clone(irq_slots),
        Arc::clone(queue_failures),
    );
    let r = k.raise_irq(
        target,
        "biosim-test",
        Box::new(move |cx| {
            irq_slots.hit(i, cx);
            if !cx.kernel().queue_work_on(Some(target), &wq, works[i], cx) {
                queue_failures.fetch_add(1, Ordering::SeqCst);
            }
        }),
    );
    assert!(r.is_ok(), "raise_irq on {target} refused");
}

fn works(k: &Kernel, n: usize, slots: &Arc<Slots>) -> Arc<Vec<WorkStruct>> {
    Arc::new(
        (0..n)
            .map(|i| {
                let slots = Arc::clone(slots);
                k.init_work("threaded_test_work_fn", move |cx, _w| slots.hit(i, cx))
            })
            .collect(),
    )
}

#[test]
fn smoke_every_irq_and_work_runs_once_on_its_cpu_in_the_right_context() {
    const CPUS: u32 = 4;
    const PER_CPU: usize = 50;
    let n = CPUS as usize * PER_CPU;
    let k = kernel(CPUS);
    let wq = k.alloc_workqueue("smoke_wq", WQ_PERCPU, 0).unwrap();
    let irq_slots = Slots::new(n);
    let work_slots = Slots::new(n);
    let works = works(&k, n, &work_slots);
    let failures = Arc::new(AtomicU32::new(0));
    let rt = start(&k);
    for i in 0..n {
        let target = CpuId((i % CPUS as usize) as u32);
        raise(&k, target, i, &wq, &works, &irq_slots, &failures);
    }
    assert!(rt.quiesce(QUIESCE), "the machine did not quiesce");
    assert_eq!(failures.load(Ordering::SeqCst), 0, "a queue_work_on failed");
    for i in 0..n {
        let cpu = (i % CPUS as usize) as u32;
        let (hits, ran) = irq_slots.get(i);
        assert_eq!(hits, 1, "IRQ {i} handled {hits} times");
        let ran = ran.unwrap();
        assert_eq!(ran.cpu, cpu, "IRQ {i} ran on the wrong CPU");
        assert!(
            ran.hardirq && !ran.task,
            "IRQ {i} not in hardirq context: {ran:?}"
        );
        let (hits, ran) = work_slots.get(i);
        assert_eq!(hits, 1, "work {i} ran {hits} times");
        let ran = ran.unwrap();
        assert_eq!(ran.cpu, cpu, "work {i} ran on the wrong CPU");
        assert!(
            ran.task && ran.may_sleep && !ran.hardirq,
            "work {i}: {ran:?}"
        );
    }
    let stats = rt.stats();
    for c in &stats.cpus {
        assert_eq!(c.irqs, PER_CPU as u64, "{:?}", c);
        assert_eq!(c.works, PER_CPU as u64, "{:?}", c);
        assert_eq!(c.foreign_works, 0);
    }
    let log = rt.take_work_log();
    assert_eq!(log.len(), n);
    assert!(log
        .iter()
        .all(|x| x.pool == PoolId::Cpu(x.ran_on) && !x.disassociated));
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    let report = rt.shutdown();
    assert!(
        report.pools.is_empty() && report.pending_irqs.is_empty(),
        "{report}"
    );
    assert!(
        report.panics.is_empty() && report.stuck_threads.is_empty(),
        "{report}"
    );
}

#[test]
fn stress_8_cpus_producers_and_hotplug_exact_counts_no_work_on_offline_cpu() {
    const CPUS: u32 = 8;
    const PRODUCERS: usize = 4;
    const PER_PRODUCER: usize = 1000;
    const WHILE_OFFLINE: usize = 200;
    const VICTIM: CpuId = CpuId(3);
    let n = PRODUCERS * PER_PRODUCER + WHILE_OFFLINE;
    let k = kernel(CPUS);
    let wq = k.alloc_workqueue("stress_wq", WQ_PERCPU, 0).unwrap();
    let irq_slots = Slots::new(n);
    let work_slots = Slots::new(n);
    let works = works(&k, n, &work_slots);
    let failures = Arc::new(AtomicU32::new(0));
    let rt = start(&k);
    let t0 = Instant::now();

    let offline_window = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (k, wq, works, irq_slots, failures) = (
                Arc::clone(&k),
                wq.clone(),
                Arc::clone(&works),
                Arc::clone(&irq_slots),
                Arc::clone(&failures),
            );
            std::thread::spawn(move || {
                for j in 0..PER_PRODUCER {
                    let i = p * PER_PRODUCER + j;
                    let target = CpuId(((i * 7 + p) % CPUS as usize) as u32);
                    raise(&k, target, i, &wq, &works, &irq_slots, &failures);
                    if j % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();

    // In the middle of the storm: CPU3 goes offline, takes IRQs aimed at it elsewhere, its pool's
    // work runs unbound on the other CPUs, then it comes back.
    std::thread::sleep(Duration::from_millis(5));
    rt.cpu_down(VICTIM, CPUHP_OFFLINE).unwrap();
    assert!(!k.cpu_online(VICTIM));
    offline_window.store(true, Ordering::SeqCst);
    let base = PRODUCERS * PER_PRODUCER;
    for i in base..n {
        raise(&k, VICTIM, i, &wq, &works, &irq_slots, &failures);
    }
    // run_on an offline CPU is refused, not run.
    assert!(matches!(
        rt.run_on(VICTIM, |_| ()),
        Err(ThreadedError::CpuOffline(c)) if c == VICTIM
    ));
    assert!(rt.quiesce(QUIESCE) || producers.iter().any(|p| !p.is_finished()));
    // Wait until the IRQs aimed at the offline CPU have been handled and their work has run.
    let deadline = Instant::now() + QUIESCE;
    while (base..n).any(|i| work_slots.get(i).0 == 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        (base..n).all(|i| work_slots.get(i).0 == 1),
        "the offline CPU's work did not run while it was offline"
    );
    rt.cpu_up(VICTIM, CPUHP_ONLINE).unwrap();
    assert!(k.cpu_online(VICTIM));
    for p in producers {
        p.join().unwrap();
    }
    assert!(rt.quiesce(QUIESCE), "the machine did not quiesce");

    assert_eq!(failures.load(Ordering::SeqCst), 0, "a queue_work_on failed");
    for i in 0..n {
        let (hits, ran) = irq_slots.get(i);
        assert_eq!(hits, 1, "IRQ {i} handled {hits} times");
        let ran = ran.unwrap();
        assert!(ran.hardirq && ran.cpu_online, "IRQ {i}: {ran:?}");
        let (hits, ran) = work_slots.get(i);
        assert_eq!(hits, 1, "work {i} ran {hits} times");
        let ran = ran.unwrap();
        assert!(ran.cpu_online, "work {i} ran on offline CPU{}", ran.cpu);
        assert!(ran.task && ran.may_sleep, "work {i}: {ran:?}");
    }
    // The IRQs aimed at the offline CPU ran elsewhere, and so did the work they queued on its
    // (disassociated) pool.
    for i in base..n {
        assert_ne!(irq_slots.get(i).1.unwrap().cpu, VICTIM.0);
        assert_ne!(work_slots.get(i).1.unwrap().cpu, VICTIM.0);
    }
    let log = rt.take_work_log();
    assert_eq!(log.len(), n, "one execution per queued work");
    let mut unbound_runs = 0;
    for x in &log {
        let PoolId::Cpu(pool_cpu) = x.pool else {
            panic!("unexpected unbound execution {x:?}")
        };
        if x.ran_on != pool_cpu {
            assert!(
                x.disassociated,
                "per-CPU work ran off its CPU while bound: {x:?}"
            );
            assert_eq!(pool_cpu, VICTIM);
            unbound_runs += 1;
        }
        assert!(!x.rescuer);
    }
    assert!(unbound_runs >= WHILE_OFFLINE, "{unbound_runs}");
    assert_eq!(rt.stats().total().foreign_works, unbound_runs as u64);
    assert_eq!(rt.stats().total().irqs, n as u64);
    assert!(
        k.reports().of_kind(ReportKind::Warn).is_empty(),
        "{:?}",
        k.reports().all()
    );
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    let report = rt.shutdown();
    assert!(
        report.pools.is_empty() && report.panics.is_empty(),
        "{report}"
    );
    assert!(report.stats.total().hotplug_steps > 0);
    assert!(t0.elapsed() < Duration::from_secs(60));
}

#[test]
fn local_irq_save_really_holds_irqs_off_on_that_cpu() {
    let k = kernel(2);
    let rt = start(&k);
    let ran: Arc<Mutex<Option<Ran>>> = Arc::default();
    let (k2, ran2) = (Arc::clone(&k), Arc::clone(&ran));
    let (before, pending, after) = rt
        .run_on(CpuId(0), move |cx| {
            let flags = cx.local_irq_save();
            let (k3, ran3) = (Arc::clone(&k2), Arc::clone(&ran2));
            // Raised from another OS thread while CPU0 has IRQs off.
            std::thread::spawn(move || {
                k3.raise_irq(
                    CpuId(0),
                    "masked",
                    Box::new(move |cx| *ran3.lock().unwrap() = Some(ran_here(cx))),
                )
                .unwrap();
            })
            .join()
            .unwrap();
            std::thread::sleep(Duration::from_millis(50));
            let before = ran2.lock().unwrap().is_some();
            let pending = cx.kernel().pending_irqs(CpuId(0));
            cx.local_irq_restore(flags); // the IRQ window
            let after = *ran2.lock().unwrap();
            (before, pending, after)
        })
        .unwrap();
    assert!(!before, "the handler ran while CPU0 had IRQs disabled");
    assert_eq!(pending, 1);
    let after = after.expect("the IRQ was delivered at local_irq_restore()");
    assert_eq!(after.cpu, 0);
    assert!(after.hardirq);
    assert_eq!(rt.stats().cpus[0].irqs_in_windows, 1);
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    assert!(rt.shutdown().is_clean());
}

#[test]
fn delayed_work_fires_on_its_cpu_after_the_delay() {
    const DELAY: u64 = 5;
    let k = kernel(2);
    let wq = k.alloc_workqueue("delayed_wq", WQ_PERCPU, 0).unwrap();
    let ran: Arc<Mutex<Option<(Ran, u64, Instant)>>> = Arc::default();
    let r2 = Arc::clone(&ran);
    let dw = k.init_delayed_work("delayed_fn", move |cx, _| {
        *r2.lock().unwrap() = Some((ran_here(cx), cx.kernel().jiffies(), Instant::now()));
    });
    let t_start = Instant::now();
    let rt = start(&k);
    let (queued, j0, t0) = rt
        .run_on(CpuId(0), move |cx| {
            let j0 = cx.kernel().jiffies();
            let t0 = Instant::now();
            let q = cx
                .kernel()
                .queue_delayed_work_on(Some(CpuId(1)), &wq, dw, DELAY, cx);
            (q, j0, t0)
        })
        .unwrap();
    assert!(queued);
    assert!(rt.drain(QUIESCE), "the delayed work did not run");
    let (r, j, t) = ran.lock().unwrap().expect("the delayed work ran");
    assert_eq!(r.cpu, 1, "ran on the timer's CPU");
    assert!(r.task && r.may_sleep);
    assert!(
        j >= j0 + DELAY,
        "ran at jiffies {j}, queued at {j0} with delay {DELAY}"
    );
    // Never early: the ticker started after `t_start` and reaches jiffy j no sooner than j ms
    // (HZ=1000) after that. (It may be late, and it catches up in a burst if the host delays it,
    // so the time since queueing alone can be shorter than the delay.)
    assert!(
        t - t_start >= Duration::from_millis(j0 + DELAY),
        "ran {:?} after start, queued at jiffy {j0}",
        t - t_start
    );
    assert!(t - t0 < QUIESCE, "{:?}", t - t0);
    let stats = rt.stats();
    assert_eq!(stats.cpus[1].timers_fired, 1);
    assert_eq!(stats.cpus[0].timers_fired, 0);
    assert_eq!(stats.cpus[1].works, 1);
    assert!(stats.ticks >= DELAY);
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    assert!(rt.shutdown().is_clean());
}

#[test]
fn flush_work_in_task_context_sleeps_while_its_cpu_runs_the_work() {
    let k = kernel(2);
    let wq = k.alloc_workqueue("flush_wq", WQ_PERCPU, 0).unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let c2 = Arc::clone(&count);
    let w = k.init_work("flushed_fn", move |cx, _| {
        assert_eq!(cx.id(), CpuId(0));
        c2.fetch_add(1, Ordering::SeqCst);
    });
    let rt = start(&k);
    // The work is queued on CPU0 from CPU0's own task, which then flushes it: CPU0's thread must
    // run the worker while the task sleeps in flush_work().
    let (queued, waited, runs) = rt
        .run_on(CpuId(0), move |cx| {
            let k = cx.kernel();
            let q = k.queue_work_on(Some(CpuId(0)), &wq, w, cx);
            let waited = k.flush_work(w, cx);
            (q, waited, count.load(Ordering::SeqCst))
        })
        .unwrap();
    assert!(queued && waited);
    assert_eq!(runs, 1);
    assert_eq!(rt.stats().cpus[0].waits, 1);
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    assert!(rt.shutdown().is_clean());
}

#[test]
fn rescuer_serves_a_congested_reclaim_pool_on_the_pool_cpu() {
    let k = kernel(2);
    let wq = k
        .alloc_workqueue("reclaim_wq", WQ_PERCPU | WQ_MEM_RECLAIM, 0)
        .unwrap();
    let slots = Slots::new(1);
    let s2 = Arc::clone(&slots);
    let w = k.init_work("rescued_fn", move |cx, _| s2.hit(0, cx));
    let rt = start(&k);
    assert!(k.set_pool_congested(PoolId::Cpu(CpuId(1)), true));
    let k2 = Arc::clone(&k);
    assert!(rt
        .run_on(CpuId(0), move |cx| k2.queue_work_on(
            Some(CpuId(1)),
            &wq,
            w,
            cx
        ))
        .unwrap());
    assert!(rt.quiesce(QUIESCE));
    let (hits, ran) = slots.get(0);
    assert_eq!(hits, 1);
    assert_eq!(ran.unwrap().cpu, 1, "the rescuer binds to the pool's CPU");
    let log = rt.take_work_log();
    assert_eq!(log.len(), 1);
    assert!(log[0].rescuer && log[0].ran_on == CpuId(1));
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    let report = rt.shutdown();
    assert!(report.pools.is_empty(), "{report}");
}

#[test]
fn shutdown_reports_work_nothing_can_run_instead_of_hanging() {
    let k = kernel(2);
    // No WQ_MEM_RECLAIM: a congested pool has no rescuer, so the work can never run.
    let wq = k.alloc_workqueue("stuck_wq", WQ_PERCPU, 0).unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let r2 = Arc::clone(&ran);
    let w = k.init_work("never_runs_fn", move |_, _| {
        r2.store(true, Ordering::SeqCst)
    });
    let rt = ThreadedRuntime::start(
        Arc::clone(&k),
        ThreadedConfig {
            shutdown_quiesce_timeout: Duration::from_millis(500),
            ..ThreadedConfig::default()
        },
    )
    .unwrap();
    assert!(k.set_pool_congested(PoolId::Cpu(CpuId(1)), true));
    let k2 = Arc::clone(&k);
    assert!(rt
        .run_on(CpuId(1), move |cx| k2.queue_work_on(None, &wq, w, cx))
        .unwrap());
    let t0 = Instant::now();
    let report = rt.shutdown();
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "shutdown took {:?}",
        t0.elapsed()
    );
    assert!(!ran.load(Ordering::SeqCst));
    assert!(!report.is_clean());
    assert_eq!(report.pools.len(), 1, "{report}");
    let p = &report.pools[0];
    assert_eq!(p.id, PoolId::Cpu(CpuId(1)));
    assert_eq!(p.queued, 1);
    assert!(p.congested);
    assert!(report.stuck_threads.is_empty(), "{report}");
    let text = report.to_string();
    assert!(text.contains("pool/CPU1: 1 queued, congested"), "{text}");
}

#[test]
fn shutdown_reports_a_task_stuck_waiting_and_never_hangs() {
    let k = kernel(2);
    let wq = k.alloc_workqueue("stuck_wq", WQ_PERCPU, 0).unwrap();
    let w = k.init_work("never_runs_fn", |_, _| {});
    let rt = ThreadedRuntime::start(
        Arc::clone(&k),
        ThreadedConfig {
            shutdown_quiesce_timeout: Duration::from_millis(200),
            wait_timeout: Duration::from_secs(60),
            ..ThreadedConfig::default()
        },
    )
    .unwrap();
    assert!(k.set_pool_congested(PoolId::Cpu(CpuId(0)), true));
    // A task on CPU0 flushes a work that can never run: it sleeps in flush_work().
    let k2 = Arc::clone(&k);
    let handle = rt
        .post_on(CpuId(0), move |cx| {
            k2.queue_work_on(Some(CpuId(0)), &wq, w, cx);
            k2.flush_work(w, cx)
        })
        .unwrap();
    let deadline = Instant::now() + QUIESCE;
    while rt.stats().cpus[0].waits == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(rt.stats().cpus[0].waits, 1);
    assert!(
        !rt.quiesce(Duration::from_millis(100)),
        "a sleeping task is not quiescent"
    );
    // Shutdown does not wait the 60 s: stopping ends the wait, the kernel reports the stuck flush.
    let t0 = Instant::now();
    let report = rt.shutdown();
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "shutdown took {:?}",
        t0.elapsed()
    );
    assert!(!report.quiesced, "{report}");
    assert!(report.stuck_threads.is_empty(), "{report}");
    assert_eq!(report.pools.len(), 1, "{report}");
    assert_eq!(report.pools[0].id, PoolId::Cpu(CpuId(0)));
    assert_eq!(report.pools[0].queued, 1);
    assert!(handle.wait().unwrap(), "flush_work() waited");
    let bugs = k.reports().of_kind(ReportKind::Bug);
    assert_eq!(bugs.len(), 1, "{:?}", k.reports().all());
    assert!(
        bugs[0].message.contains("flush_work() waits forever"),
        "{}",
        bugs[0]
    );
}

#[test]
fn bad_input_is_an_error_value_not_a_panic() {
    let k = kernel(2);
    let rt = start(&k);
    assert!(matches!(
        rt.run_on(CpuId(7), |_| ()),
        Err(ThreadedError::NoSuchCpu {
            cpu: CpuId(7),
            nr_cpus: 2
        })
    ));
    assert!(matches!(
        rt.cpu_down(CpuId(9), CPUHP_OFFLINE),
        Err(ThreadedError::NoSuchCpu { .. })
    ));
    // The last online CPU cannot go down: the hotplug machine's error comes back.
    rt.cpu_down(CpuId(1), CPUHP_OFFLINE).unwrap();
    assert!(matches!(
        rt.cpu_down(CpuId(0), CPUHP_OFFLINE),
        Err(ThreadedError::Hotplug(_))
    ));
    rt.cpu_up(CpuId(1), CPUHP_ONLINE).unwrap();
    // A panic in code run on a CPU is returned, and the CPU carries on.
    let e = rt.run_on(CpuId(1), |_| panic!("boom")).unwrap_err();
    assert!(
        matches!(&e, ThreadedError::Panicked { cpu: CpuId(1), message } if message == "boom"),
        "{e}"
    );
    assert_eq!(rt.run_on(CpuId(1), |cx| cx.id()).unwrap(), CpuId(1));
    // One runtime per kernel.
    assert!(matches!(
        ThreadedRuntime::start(Arc::clone(&k), ThreadedConfig::default()),
        Err(ThreadedError::WakerInstalled)
    ));
    assert!(matches!(
        ThreadedRuntime::start(
            kernel(1),
            ThreadedConfig {
                tick_scale: 0,
                ..ThreadedConfig::default()
            }
        ),
        Err(ThreadedError::Config(_))
    ));
    // run_on from a CPU thread would deadlock: refused.
    let rt = Arc::new(rt);
    let rt2 = Arc::clone(&rt);
    let inner = rt.run_on(CpuId(0), move |_| {
        rt2.run_on(CpuId(1), |_| ()).map_err(|e| e.to_string())
    });
    assert!(inner
        .unwrap()
        .unwrap_err()
        .contains("called from the thread of CPU0"));
    let rt = Arc::try_unwrap(rt).unwrap();
    let report = rt.shutdown();
    assert_eq!(report.panics.len(), 1, "{report}");
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
}

#[test]
fn hotplug_fail_injection_rolls_back_and_the_cpu_keeps_running_work() {
    let k = kernel(2);
    let wq = k.alloc_workqueue("hp_wq", WQ_PERCPU, 0).unwrap();
    let rt = start(&k);
    // Inject a failure into the workqueue:online teardown of CPU1: cpu_down rolls back.
    k.hotplug()
        .set_fail(CpuId(1), hotplug::CPUHP_AP_WORKQUEUE_ONLINE.0)
        .unwrap();
    let e = rt.cpu_down(CpuId(1), CPUHP_OFFLINE).unwrap_err();
    assert!(e.to_string().contains("injected"), "{e}");
    assert!(k.cpu_online(CpuId(1)));
    let slots = Slots::new(1);
    let s2 = Arc::clone(&slots);
    let w = k.init_work("after_rollback_fn", move |cx, _| s2.hit(0, cx));
    let k2 = Arc::clone(&k);
    rt.run_on(CpuId(0), move |cx| {
        k2.queue_work_on(Some(CpuId(1)), &wq, w, cx)
    })
    .unwrap();
    assert!(rt.quiesce(QUIESCE));
    assert_eq!(slots.get(0).0, 1);
    assert_eq!(slots.get(0).1.unwrap().cpu, 1);
    let log = rt.take_work_log();
    assert!(
        !log[0].disassociated,
        "rolled back: the pool is bound again"
    );
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    assert!(rt.shutdown().is_clean());
}

#[test]
fn idle_cpus_sleep_instead_of_spinning() {
    let k = kernel(8);
    let rt = start(&k);
    assert!(rt.quiesce(QUIESCE));
    let before = rt.stats();
    std::thread::sleep(Duration::from_millis(300));
    let after = rt.stats();
    // With nothing runnable a CPU thread only wakes at its idle timeout (100 ms): a handful of
    // loop iterations in 300 ms, where a spinning thread would make millions.
    for (b, a) in before.cpus.iter().zip(&after.cpus) {
        let parks = a.parks - b.parks;
        assert!(parks <= 8, "{}: {parks} idle loops in 300 ms", a.cpu);
        // At most one wake-up left over from the last event before the snapshot.
        assert!(
            a.wakeups - b.wakeups <= 1,
            "{}: woken with nothing to do",
            a.cpu
        );
    }
    // The ticker kept jiffies moving meanwhile (HZ=1000).
    assert!(
        after.ticks >= before.ticks + 100,
        "{} -> {}",
        before.ticks,
        after.ticks
    );
    assert!(rt.shutdown().is_clean());
}

#[test]
fn interrupts_raised_from_outside_while_their_cpu_goes_offline_are_never_stranded() {
    // An I/O engine's reaper thread keeps raising completion interrupts at CPU1 while CPU1 goes
    // down and up, and CPU1 ends offline with the reaper still running. Every handler must run
    // exactly once (on some CPU): none may be left queued on the dead CPU.
    let k = kernel(2);
    let rt = start(&k);
    let (raised, ran) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let reaper = {
        let (k, raised, ran, stop) = (
            Arc::clone(&k),
            Arc::clone(&raised),
            Arc::clone(&ran),
            Arc::clone(&stop),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let ran = Arc::clone(&ran);
                k.raise_irq(
                    CpuId(1),
                    "reaper",
                    Box::new(move |_| {
                        ran.fetch_add(1, Ordering::SeqCst);
                    }),
                )
                .unwrap();
                raised.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    for _ in 0..20 {
        rt.cpu_down(CpuId(1), CPUHP_OFFLINE).unwrap();
        rt.cpu_up(CpuId(1), CPUHP_ONLINE).unwrap();
    }
    rt.cpu_down(CpuId(1), CPUHP_OFFLINE).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    stop.store(true, Ordering::SeqCst);
    reaper.join().unwrap();
    assert!(rt.quiesce(QUIESCE));
    let (r, n) = (raised.load(Ordering::SeqCst), ran.load(Ordering::SeqCst));
    assert!(r > 0);
    assert_eq!(n, r, "{} of {r} interrupts never ran", r - n);
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    assert!(rt.shutdown().is_clean());
}

/// With `capture_trace`, each CPU thread's tracepoints are records on the runtime's monotonic
/// clock, written as a tracefs `trace` file whose lines parse and whose timestamps only grow.
#[test]
fn a_captured_threaded_trace_is_on_monotonic_time_since_the_start() {
    let k = kernel(2);
    let wq = k.alloc_workqueue("traced_wq", WQ_PERCPU, 0).unwrap();
    let w = k.init_work("traced_fn", |_, _| {});
    let rt = ThreadedRuntime::start(
        Arc::clone(&k),
        ThreadedConfig {
            capture_trace: true,
            ..ThreadedConfig::default()
        },
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(2));
    assert!(rt
        .run_on(CpuId(1), move |cx| cx.kernel().queue_work_on(
            Some(CpuId(1)),
            &wq,
            w,
            cx
        ))
        .unwrap());
    assert!(rt.drain(QUIESCE));
    let t = rt.ftrace();
    assert!(rt.shutdown().is_clean());
    let start = t
        .records
        .iter()
        .find(|r| r.event == "workqueue_execute_start")
        .unwrap_or_else(|| panic!("the work ran: {:?}", t.records));
    assert_eq!(start.cpu, Some(1));
    assert!(start.ts_us >= 2_000, "{start:?}");
    assert!(t.records.windows(2).all(|w| w[0].ts_us <= w[1].ts_us));
    let text = t.text();
    let lines = bio_sim::report::ftrace::parse_trace(&text).unwrap();
    assert_eq!(lines.len(), t.records.len());
}

/// `on_park` hooks run on the CPU thread each time it is about to sleep: in `wait_until` with
/// nothing to run (a task waiting for another thread), so a hook there sees the waiter's flag
/// still unset, and every one of them runs before the task can be woken by what it waits for.
#[test]
fn park_hooks_run_on_the_cpu_thread_before_it_sleeps() {
    let k = kernel(1);
    let rt = start(&k);
    let parks_in_wait = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let thread = Arc::new(Mutex::new(None));
    let (p, d, t) = (
        Arc::clone(&parks_in_wait),
        Arc::clone(&done),
        Arc::clone(&thread),
    );
    rt.on_park(move || {
        if !d.load(Ordering::SeqCst) {
            p.fetch_add(1, Ordering::SeqCst);
        }
        *t.lock().unwrap() = Some(std::thread::current().name().map(str::to_owned));
    });
    let d = Arc::clone(&done);
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        d.store(true, Ordering::SeqCst);
    });
    let ok = rt
        .run_on(CpuId(0), move |cx| {
            cx.wait_until("test: the other thread's flag", &|| {
                done.load(Ordering::SeqCst)
            })
        })
        .unwrap();
    setter.join().unwrap();
    assert!(ok, "the wait ends when the flag is set");
    assert!(
        parks_in_wait.load(Ordering::SeqCst) >= 1,
        "the CPU parked while waiting, and ran the hook first"
    );
    assert_eq!(
        thread.lock().unwrap().clone(),
        Some(Some("biosim-cpu0".to_owned())),
        "on the CPU's own thread"
    );
    rt.shutdown();
}
