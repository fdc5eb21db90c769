//! `biosim bench explore`: how fast `biosim explore` searches (the real campaign code path:
//! generator, fresh machine per case, oracle after every step, settle), on one core and two, side
//! by side in interleaved rounds; how long it takes to find and shrink finding 1 (a hotplug
//! rollback in `kernel/cpu.c` strands a deferred bio of `block/bio.c`'s batcher on v6); and the
//! long clean campaigns on v7 and v6-review.

use super::stats::{human, median};
use crate::explore::campaign::{Budget, Campaign, Shard};
use crate::explore::counterexample::strict_steps;
use crate::explore::shrink::shrink;
use crate::machine::oracle::Invariant;
use crate::machine::sim::SimConfig;
use bio_core::block::complete_in_task::Variant;
use std::fmt::Write as _;
use std::time::Instant;

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub struct ExploreBenchConfig {
    /// Rounds of the throughput pair and of find-and-shrink.
    pub rounds: usize,
    /// Cases per throughput run.
    pub cases: u64,
    /// Transitions per case at most.
    pub steps: usize,
    /// Cases of each long campaign (0: skipped).
    pub long_cases: u64,
}

/// The campaign `biosim explore --variant V --cpus 3 --steps K --jobs J --seed S --cases N` runs.
pub fn campaign(variant: Variant, cases: u64, steps: usize, jobs: usize, seed: u64) -> Campaign {
    Campaign {
        config: SimConfig {
            nr_cpus: 3,
            online: 3,
            variant,
            trace: false,
            ..SimConfig::default()
        },
        loop_dev: None,
        seed,
        steps,
        budget: Budget::Cases(cases),
        jobs,
        shard: Shard::ALL,
        inject: false,
    }
}

/// CPU time (user + system) the process has used so far, from `getrusage(RUSAGE_SELF)`.
fn cpu_seconds() -> f64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `u` is a valid, writable `rusage`; getrusage only writes into it.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
    if r != 0 {
        return 0.0;
    }
    // SAFETY: getrusage succeeded and filled the struct (it was zeroed before anyway).
    let u = unsafe { u.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn spread(xs: &[f64], unit: &str, digits: usize) -> String {
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!(
        "{:.digits$}{unit} ({:.digits$}–{:.digits$})",
        median(xs),
        lo,
        hi
    )
}

/// Runs the benchmark and renders its report.
pub fn explore_bench(cfg: &ExploreBenchConfig) -> Result<String, Box<dyn std::error::Error>> {
    let mut out = String::new();
    let (mut one, mut two, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    // Cases per CPU-second: what each thread achieves, whatever else the machine runs.
    let mut per_cpu: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for r in 0..cfg.rounds {
        let mut cps = [0.0; 2];
        // Interleaved: the order of the pair alternates between rounds.
        let order: [usize; 2] = if r % 2 == 0 { [1, 2] } else { [2, 1] };
        for jobs in order {
            let cpu0 = cpu_seconds();
            let o = campaign(Variant::V7, cfg.cases, cfg.steps, jobs, 1000 + r as u64).run(None)?;
            let cpu = cpu_seconds() - cpu0;
            if cpu > 0.0 {
                per_cpu[jobs - 1].push(o.cases as f64 / cpu);
            }
            if let Some(f) = o.found {
                return Err(format!(
                    "v7 violated an invariant in case {}: {}",
                    f.index, f.failure.violations[0]
                )
                .into());
            }
            cps[jobs - 1] = o.cases as f64 / o.elapsed.as_secs_f64();
        }
        one.push(cps[0]);
        two.push(cps[1]);
        ratio.push(cps[1] / cps[0]);
    }
    let _ = writeln!(
        out,
        "explore on v7, 3 CPUs, 1..={} transitions per case, {} cases per run, {} rounds (jobs 1 and 2 interleaved); median (min–max):",
        cfg.steps, cfg.cases, cfg.rounds
    );
    let _ = writeln!(out, "  --jobs 1: {} cases/s", spread(&one, "", 0));
    let _ = writeln!(out, "  --jobs 2: {} cases/s", spread(&two, "", 0));
    let _ = writeln!(out, "  jobs 2 / jobs 1: {}", spread(&ratio, "x", 2));
    let _ = writeln!(
        out,
        "  cases per CPU-second (getrusage): jobs 1 {}, jobs 2 {}",
        spread(&per_cpu[0], "", 0),
        spread(&per_cpu[1], "", 0)
    );

    // What the kernel's debug facilities cost explore (issue 14: at least half the throughput
    // with them on): lockdep (CONFIG_PROVE_LOCKING: wait context, IRQ usage, the dependency
    // graph) against a kernel built without it, jobs 1, interleaved in each round.
    let (mut on, mut off, mut kept) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..cfg.rounds {
        let mut cps = [0.0; 2];
        let order: [bool; 2] = if r % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for prove_locking in order {
            let mut c = campaign(Variant::V7, cfg.cases, cfg.steps, 1, 2000 + r as u64);
            c.config.kernel.prove_locking = prove_locking;
            let o = c.run(None)?;
            if let Some(f) = o.found {
                return Err(format!(
                    "v7 (PROVE_LOCKING={prove_locking}) violated an invariant in case {}: {}",
                    f.index, f.failure.violations[0]
                )
                .into());
            }
            cps[usize::from(!prove_locking)] = o.cases as f64 / o.elapsed.as_secs_f64();
        }
        on.push(cps[0]);
        off.push(cps[1]);
        kept.push(cps[0] / cps[1]);
    }
    let _ = writeln!(
        out,
        "detectors on (CONFIG_PROVE_LOCKING=y, lockdep's graph) against off, v7, --jobs 1, {} rounds interleaved:",
        cfg.rounds
    );
    let _ = writeln!(out, "  on:  {} cases/s", spread(&on, "", 0));
    let _ = writeln!(out, "  off: {} cases/s", spread(&off, "", 0));
    let _ = writeln!(out, "  on / off (per round): {}", spread(&kept, "x", 2));

    let (mut times, mut sizes, mut found_at) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..cfg.rounds {
        let seed = r as u64 + 1;
        let start = Instant::now();
        let c = campaign(Variant::V6, 1_000_000, cfg.steps, 1, seed);
        let o = c.run(None)?;
        let Some(f) = o.found else {
            let _ = writeln!(out, "  seed {seed}: finding 1 not found in 1,000,000 cases");
            continue;
        };
        let s = shrink(&c, &f)?;
        let steps = strict_steps(&c.machine(&f.seed), &c, &s.case)?;
        times.push(start.elapsed().as_secs_f64());
        sizes.push(steps.len() as f64);
        found_at.push(f.index as f64);
        if s.invariant != Invariant::Stranded {
            let _ = writeln!(
                out,
                "  seed {seed}: found [{}], not finding 1's stranded bio",
                s.invariant
            );
        }
    }
    let _ = writeln!(
        out,
        "find and shrink finding 1 on v6 from scratch (--jobs 1, seeds 1..={}): {} s, case index {}, shrunk to {} transitions",
        cfg.rounds,
        spread(&times, "", 3),
        spread(&found_at, "", 0),
        spread(&sizes, "", 0)
    );
    if cfg.long_cases > 0 {
        for v in [Variant::V7, Variant::V6_REVIEW] {
            let o = campaign(v, cfg.long_cases, cfg.steps, 2, 1).run(None)?;
            let _ = writeln!(
                out,
                "{} cases on {} (--jobs 2, seed 1): {}, {:.0} cases/s, {}",
                o.cases,
                v.name,
                human(o.elapsed),
                o.cases as f64 / o.elapsed.as_secs_f64().max(1e-9),
                match &o.found {
                    None => "no violation".to_owned(),
                    Some(f) =>
                        format!("VIOLATION in case {}: {}", f.index, f.failure.violations[0]),
                }
            );
        }
    }
    Ok(out)
}
