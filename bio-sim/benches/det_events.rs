//! Events per second of the deterministic runtime on one core: simple events (a tick with no
//! timer due; an IRQ raised and delivered with an empty handler) stepped explicitly, and the same
//! IRQ events chosen by the seeded scheduler (which computes the enabled set every step). Traces
//! are off, as in a large exploration.
//!
//! Run: `cargo bench -p bio-sim --bench det_events`

use bio_core::kernel::CpuId;
use bio_core::{Kernel, KernelConfig};
use bio_sim::runtime::deterministic::{DetConfig, DetRuntime};
use bio_sim::runtime::Event;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::sync::Arc;

const BATCH: u64 = 10_000;

fn runtime() -> (Arc<Kernel>, DetRuntime) {
    let k = Kernel::new(KernelConfig::default(), 2).expect("valid config");
    let rt = DetRuntime::new(
        Arc::clone(&k),
        DetConfig {
            record_steps: false,
            capture_trace: false,
            ..DetConfig::default()
        },
    );
    (k, rt)
}

fn det_events(c: &mut Criterion) {
    let mut g = c.benchmark_group("det_events");
    g.throughput(Throughput::Elements(BATCH));
    g.bench_function("tick_explicit", |b| {
        let (_k, rt) = runtime();
        b.iter(|| {
            for _ in 0..BATCH {
                rt.step(Event::Tick).expect("tick is always possible");
            }
        })
    });
    g.bench_function("irq_explicit", |b| {
        let (k, rt) = runtime();
        b.iter(|| {
            for _ in 0..BATCH {
                k.raise_irq(CpuId(1), "bench", Box::new(|_| {}))
                    .expect("CPU1 exists");
                rt.step(Event::Irq(CpuId(1))).expect("an IRQ is pending");
            }
        })
    });
    g.bench_function("irq_seeded", |b| {
        let (k, rt) = runtime();
        b.iter(|| {
            for _ in 0..BATCH {
                k.raise_irq(CpuId(1), "bench", Box::new(|_| {}))
                    .expect("CPU1 exists");
                rt.step_random().expect("not quiescent").expect("enabled");
            }
        })
    });
    g.finish();
}

criterion_group!(benches, det_events);
criterion_main!(benches);
