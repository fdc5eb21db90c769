//! Exploration speed: one case of `biosim explore` (the real code path: the case drawn by the
//! generator from its `(seed, index)`, a fresh machine with the batcher and the oracle, 1..=40
//! transitions with the oracle checked after each, then settling and the stranded check), on one
//! core. Every iteration is a different case. `biosim bench explore` measures whole campaigns,
//! with `--jobs 1` and `--jobs 2` side by side.
//!
//! Run: `cargo bench -p bio-sim --bench explore`

use bio_core::block::complete_in_task::Variant;
use bio_sim::explore::campaign::{case_seed, run_case, Drawer};
use bio_sim::perf::explore_bench::campaign;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use proptest::strategy::ValueTree;

fn explore(c: &mut Criterion) {
    let mut g = c.benchmark_group("explore");
    g.throughput(Throughput::Elements(1));
    for variant in [Variant::V7, Variant::V6] {
        let cmp = campaign(variant, u64::MAX, 40, 1, 7);
        let mut drawer = Drawer::new(&cmp.space(), cmp.steps);
        let mut index = 0;
        g.bench_function(format!("case_steps40_{}", variant.name), |b| {
            b.iter(|| {
                index += 1;
                let seed = case_seed(cmp.seed, index);
                let ts = drawer.tree(&seed).current();
                run_case(&cmp.machine(&seed), None, &ts)
                    .expect("a valid machine")
                    .is_err()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, explore);
criterion_main!(benches);
