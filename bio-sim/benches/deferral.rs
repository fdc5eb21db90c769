//! The deferral path on the threaded runtime (issue 5 "Performance", finding 8), with the machines
//! of `bio_sim::perf::deferral` and `bio_sim::perf::latency`:
//!
//! - `deferral/{batched (v7),direct,channel}`: bios per second from `bio_endio()` in a hardirq
//!   handler to `bi_end_io` having run, for the task-completion batcher, a direct `bi_end_io` in
//!   the interrupt, and a per-bio crossbeam-channel hand-off to a dedicated worker thread. One
//!   iteration is one closed-loop round of 32768 bios (2 CPUs, IRQs of 16 bios, 4 IRQs in flight
//!   per CPU); criterion reports elements/s side by side.
//! - `deferral_latency/light_{v6,v7}`: one bio per IRQ, back to back (the next IRQ right after the
//!   previous `bi_end_io`, like a synchronous submitter); the time measured is the completion
//!   latency (`bio_endio()` in the IRQ → `bi_end_io` in the worker) at `CONFIG_HZ=250`. With the
//!   1-jiffy delay (v6) the worker runs on a tick, so the next IRQ arrives just after one and its
//!   bio waits almost a whole jiffy: this is the delay's worst case, not its median (the summary's
//!   light load, with random gaps, gives the median of about half a jiffy).
//! - Then, once, a printed summary: `deferral::deferral_throughput` (medians, ratios, worker
//!   wake-ups per bio and per IRQ) and `latency::completion_latency` for v6 and v7 (median, p99,
//!   worker wake-ups per bio under a light and a bursty load).
//!
//! Run: `cargo bench -p bio-sim --bench deferral -- --warm-up-time 1 --measurement-time 3`
//! Criterion writes the medians to `target/criterion/<group>/<name>/new/estimates.json`.

use bio_core::block::complete_in_task::Variant;
use bio_sim::perf::deferral::{deferral_throughput, DeferralMachine, Design, ThroughputConfig};
use bio_sim::perf::latency::{completion_latency, LatencyConfig, LatencyProbe, Load};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::time::Duration;

fn throughput(c: &mut Criterion) {
    let cfg = ThroughputConfig::default();
    let mut g = c.benchmark_group("deferral");
    g.throughput(Throughput::Elements(cfg.bios_per_round()));
    g.sample_size(10);
    for design in Design::ALL {
        let mut m = DeferralMachine::start(design, cfg.clone()).expect("the machine starts");
        let label = m.label();
        g.bench_function(label.as_str(), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let r = m.run_round().expect("the round completes");
                        assert!(r.is_exact(), "{r:?}");
                        r.elapsed
                    })
                    .sum()
            })
        });
        m.shutdown().expect("clean shutdown");
    }
    g.finish();
}

fn latency(c: &mut Criterion) {
    let mut g = c.benchmark_group("deferral_latency");
    g.sample_size(10);
    for v in [Variant::V6, Variant::V7] {
        let mut probe = LatencyProbe::start(v, LatencyConfig::default()).expect("the probe starts");
        g.bench_function(format!("light_{}", v.name), |b| {
            b.iter_custom(|iters| {
                let load = Load::Light {
                    bios: iters,
                    gap: Duration::ZERO,
                };
                let l = probe.run(load).expect("the load completes");
                l.samples.iter().sum()
            })
        });
        probe.shutdown().expect("clean shutdown");
    }
    g.finish();
}

fn summary(_c: &mut Criterion) {
    match deferral_throughput(ThroughputConfig::default()) {
        Ok(r) => println!("\n{r}"),
        Err(e) => println!("\ndeferral throughput failed: {e}"),
    }
    for v in [Variant::V6, Variant::V7] {
        match completion_latency(v, LatencyConfig::default()) {
            Ok(r) => println!("{r}"),
            Err(e) => println!("completion latency of {v} failed: {e}"),
        }
    }
}

criterion_group!(benches, throughput, latency, summary);
criterion_main!(benches);
