//! Latency of the threaded runtime (issue 4): how long from the bench thread raising an IRQ on a
//! simulated CPU until its handler runs on that CPU's thread, and from `queue_work_on()` until the
//! work function runs on the CPU's thread. Each iteration is one round trip: the handler or work
//! function answers on a channel the bench thread waits on, so the figure includes waking an idle
//! CPU thread (condition variable) and waking the bench thread back.
//!
//! Run: `cargo bench -p bio-sim --bench threaded_latency -- --warm-up-time 1 --measurement-time 3`
//! Criterion writes the median of each benchmark to
//! `target/criterion/threaded_latency/<name>/new/estimates.json`.

use bio_core::kernel::CpuId;
use bio_core::workqueue::WQ_PERCPU;
use bio_core::{Kernel, KernelConfig};
use bio_sim::runtime::threaded::{ThreadedConfig, ThreadedRuntime};
use criterion::{criterion_group, criterion_main, Criterion};
use std::sync::Arc;
use std::time::Duration;

fn machine(nr: u32) -> (Arc<Kernel>, ThreadedRuntime) {
    let config = KernelConfig {
        hz: 1000,
        ..KernelConfig::default()
    };
    let k = Kernel::new(config, nr).expect("a valid kernel config");
    let rt = ThreadedRuntime::start(Arc::clone(&k), ThreadedConfig::default())
        .expect("the threaded runtime starts");
    (k, rt)
}

fn latency(c: &mut Criterion) {
    let mut g = c.benchmark_group("threaded_latency");

    // IRQ raised from the bench thread -> handler runs in hardirq context on CPU1's thread.
    {
        let (k, rt) = machine(2);
        let (tx, rx) = crossbeam_channel::bounded::<()>(1);
        g.bench_function("irq_to_handler", |b| {
            b.iter(|| {
                let tx = tx.clone();
                let raised = k.raise_irq(
                    CpuId(1),
                    "bench",
                    Box::new(move |_cx| {
                        let _ = tx.send(());
                    }),
                );
                assert!(raised.is_ok(), "CPU1 exists");
                rx.recv_timeout(Duration::from_secs(5))
                    .expect("the handler ran");
            })
        });
        let report = rt.shutdown();
        assert!(report.pending_irqs.is_empty(), "{report}");
    }

    // queue_work_on() from the bench thread -> the work function runs on CPU1's thread.
    {
        let (k, rt) = machine(2);
        let wq = k
            .alloc_workqueue("bench_wq", WQ_PERCPU, 0)
            .expect("a per-CPU workqueue");
        let (tx, rx) = crossbeam_channel::bounded::<()>(1);
        let work = k.init_work("bench_work_fn", move |_cx, _w| {
            let _ = tx.send(());
        });
        // The bench thread's own context: a task on CPU0 (only used to name the caller).
        let cx = k.cpu(CpuId(0)).expect("CPU0 exists");
        g.bench_function("queue_to_run", |b| {
            b.iter(|| {
                assert!(k.queue_work_on(Some(CpuId(1)), &wq, work, &cx));
                rx.recv_timeout(Duration::from_secs(5))
                    .expect("the work ran");
            })
        });
        drop(cx);
        let report = rt.shutdown();
        assert!(report.pools.is_empty(), "{report}");
    }
    g.finish();
}

criterion_group!(benches, latency);
criterion_main!(benches);
