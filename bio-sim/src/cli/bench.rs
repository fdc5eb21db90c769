//! `biosim bench`: the benchmarks on real files, and `biosim explore`'s speed.

use super::args::BenchCommand;

/// Runs `biosim bench`.
pub fn bench(cmd: BenchCommand) -> Result<(), Box<dyn std::error::Error>> {
    use crate::perf::bench_common::parse_size;
    use crate::perf::dontcache::{dontcache_bench, DontcacheConfig};
    use crate::perf::loop_bench::{loop_bench, Engine, LoopBenchConfig, Workload};
    match cmd {
        BenchCommand::Loop(a) => {
            let cfg = LoopBenchConfig {
                dir: a.dir,
                file_size: parse_size(&a.size).map_err(|e| format!("--size: {e}"))?,
                ios_per_cpu: a.ios as usize,
                cpus: a.cpus,
                rounds: a.rounds as usize,
                workloads: Workload::parse(&a.workload)?,
                engine: Engine::parse(&a.engine)?,
            };
            print!("{}", loop_bench(&cfg)?);
        }
        BenchCommand::Dontcache(a) => {
            let cfg = DontcacheConfig {
                dir: a.dir,
                size: parse_size(&a.size).map_err(|e| format!("--size: {e}"))?,
                rounds: a.rounds as usize,
            };
            print!("{}", dontcache_bench(&cfg)?);
        }
        BenchCommand::Explore(a) => {
            use crate::perf::explore_bench::{explore_bench, ExploreBenchConfig};
            print!(
                "{}",
                explore_bench(&ExploreBenchConfig {
                    rounds: a.rounds as usize,
                    cases: a.cases,
                    steps: a.steps as usize,
                    long_cases: a.long_cases,
                })?
            );
        }
    }
    Ok(())
}
