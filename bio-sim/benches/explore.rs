//! Exploration speed: how many 40-transition hotplug-rollback scenarios per second the
//! deterministic runtime checks on one core, as the proptest state machine runs them (a fresh
//! machine with the batcher and the oracle, 40 transitions with the oracle checked after each, then
//! settling and the stranded check). Transitions come from a seeded generator with the proptest's
//! weights, so every iteration is a different scenario.
//!
//! Run: `cargo bench -p bio-sim --bench explore`

use bio_core::block::complete_in_task::Variant;
use bio_sim::machine::oracle::Need;
use bio_sim::machine::sim::{CompletionContext, Sim, SimConfig};
use bio_sim::machine::transition::Transition;
use bio_sim::runtime::rng::SplitMix64;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const TRANSITIONS: usize = 40;
const CPUS: u32 = 3;

fn transition(rng: &mut SplitMix64) -> Transition {
    let cpu = rng.below(CPUS as usize) as u32;
    match rng.below(20) {
        0..=5 => Transition::Complete {
            cpu,
            ctx: CompletionContext::ALL[rng.below(4)],
            need: [Need::Flag, Need::Flag, Need::Dynamic, Need::Any][rng.below(4)],
        },
        6..=8 => Transition::RunWorker { cpu },
        9..=10 => Transition::Tick,
        11..=12 => Transition::Hotplug {
            cpu,
            up: rng.below(2) == 0,
            fail_at: [
                None,
                None,
                None,
                Some(197),
                Some(187),
                Some(144),
                Some(83),
                Some(63),
            ][rng.below(8)],
        },
        13..=18 => Transition::HotplugStep,
        _ => Transition::NeedResched { cpu },
    }
}

fn scenario(variant: Variant, rng: &mut SplitMix64) -> usize {
    let s = Sim::new(SimConfig {
        nr_cpus: CPUS,
        online: CPUS,
        variant,
        trace: false,
        ..SimConfig::default()
    })
    .expect("a valid machine");
    let mut violations = 0;
    for _ in 0..TRANSITIONS {
        s.apply(&transition(rng));
        violations += s.check().len();
    }
    violations + s.settle(20_000).len()
}

fn explore(c: &mut Criterion) {
    let mut g = c.benchmark_group("explore");
    g.throughput(Throughput::Elements(1));
    for variant in [Variant::V7, Variant::V6] {
        let mut rng = SplitMix64::new(7);
        g.bench_function(format!("scenario40_{}", variant.name), |b| {
            b.iter(|| scenario(variant, &mut rng))
        });
    }
    g.finish();
}

criterion_group!(benches, explore);
criterion_main!(benches);
