//! The `biosim` binary.

use bio_core::KernelConfig;
use bio_sim::cli::{Cli, Command};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The gallery provokes kernel splats on purpose and reports them itself.
    let quiet = matches!(
        cli.command,
        Command::Findings(_) | Command::Run(_) | Command::Loop(_)
    );
    bio_sim::trace::init(if quiet { "error" } else { "warn" });
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("biosim: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    match cli.command {
        Command::Contexts(args) => {
            let configs = if args.all {
                KernelConfig::matrix()
            } else {
                vec![args.config.config()?]
            };
            for (i, config) in configs.into_iter().enumerate() {
                if i > 0 {
                    println!();
                }
                print!("{}", bio_sim::contexts::render(config)?);
            }
        }
        Command::Run(args) => return run_scenario(args),
        Command::Variants => print!("{}", variants()),
        Command::Findings(args) => return findings(args),
        Command::Loop(args) => return loop_checks(args),
        Command::Bench(b) => return bench(b),
        Command::States(args) => {
            use bio_core::block::complete_in_task::{bio_complete_init, Variant};
            let kernel = bio_core::Kernel::new(KernelConfig::default(), args.cpus)?;
            // The table after boot: the batcher's init registers its two dynamic states.
            bio_complete_init(&kernel, Variant::DEFAULT, None)?;
            print!("{}", kernel.hotplug().states_listing());
        }
    }
    Ok(())
}

fn variants() -> String {
    use bio_core::block::complete_in_task::Variant;
    let mut out = String::new();
    for v in Variant::ALL {
        out.push_str(&format!(
            "{}{}\n",
            v.name,
            if v == Variant::DEFAULT {
                " (default)"
            } else {
                ""
            }
        ));
        let provenance = v.provenance();
        for (k, val) in v.knobs() {
            let mark = match provenance {
                Some((knobs, _)) if knobs.contains(&k) => " *",
                _ => "",
            };
            out.push_str(&format!("    {k:<22} {val}{mark}\n"));
        }
        if let Some((_, why)) = provenance {
            out.push_str(&format!("    * {why}\n"));
        }
    }
    out
}

fn figure8() -> String {
    use bio_core::block::complete_in_task::Variant;
    use bio_sim::measure::{completion_latency, LatencyConfig};
    let mut parts = Vec::new();
    for v in [Variant::V6, Variant::V7] {
        match completion_latency(v, LatencyConfig::default()) {
            Ok(r) => parts.push(format!(
                "{}: light median {:.2} ms p99 {:.2} ms, {:.2} wake-ups/bio; bursty median {:.2} ms, {:.2} wake-ups/bio",
                v.name,
                r.light.median.as_secs_f64() * 1e3,
                r.light.p99.as_secs_f64() * 1e3,
                r.light.worker_wakeups_per_bio(),
                r.bursty.median.as_secs_f64() * 1e3,
                r.bursty.worker_wakeups_per_bio()
            )),
            Err(e) => parts.push(format!("{}: not measured ({e})", v.name)),
        }
    }
    format!(
        "threaded runtime, HZ={}: {}",
        LatencyConfig::default().kernel.hz,
        parts.join(" | ")
    )
}

fn findings(args: bio_sim::cli::FindingsArgs) -> Result<(), Box<dyn std::error::Error>> {
    use bio_core::block::complete_in_task::Variant;
    use bio_core::workqueue::RescuerAffinity;
    use bio_sim::findings::{self, Verdict};
    if let Some(id) = args.finding {
        let f = findings::finding(id).ok_or_else(|| format!("no finding {id}"))?;
        let (variant, rescuer) = if args.variant == "twin" {
            match f.kind {
                findings::FindingKind::Check { twin: Some(t), .. } => findings::twin_machine(&t),
                _ => return Err(format!("finding {id} has no buggy twin").into()),
            }
        } else {
            let v = Variant::by_name(&args.variant).ok_or_else(|| {
                format!(
                    "unknown variant `{}` (expected v5, v6, v6-review, v7 or twin)",
                    args.variant
                )
            })?;
            (v, RescuerAffinity::PoolCpu)
        };
        let Some(run) = findings::run_check(id, variant, rescuer, true) else {
            println!(
                "finding {id} ({}) is a measurement: run `biosim findings` for its figures",
                f.title
            );
            return Ok(());
        };
        let run = run?;
        print!("{}", run.trace);
        if let Some(p) = &args.perfetto {
            bio_sim::perfetto::write(p, &run.trace, &format!("finding {id} on {}", variant.name))?;
        }
        println!(
            "== finding {id}: {} on {}: {}",
            f.title, variant.name, run.verdict
        );
        if let Verdict::Caught(v) = &run.verdict {
            for x in v {
                println!("   {x}");
            }
        }
        println!("   (chapter: {})", f.chapter);
        return Ok(());
    }
    let fig8: Box<dyn Fn() -> String> = if args.no_figures {
        Box::new(|| "(skipped: --no-figures)".to_owned())
    } else {
        Box::new(figure8)
    };
    let rows = findings::matrix(&*fig8)?;
    print!("{}", findings::render(&rows));
    if args.check {
        let mut bad = Vec::new();
        for r in &rows {
            for (col, got, want) in r.mismatches() {
                bad.push(format!(
                    "finding {} on {col}: {got}, expected {want:?}",
                    r.finding.id
                ));
            }
        }
        if !bad.is_empty() {
            eprintln!(
                "biosim findings --check: {} cells differ:\n  {}",
                bad.len(),
                bad.join("\n  ")
            );
            std::process::exit(1);
        }
        println!("all cells as expected");
    }
    Ok(())
}

fn bench(cmd: bio_sim::cli::BenchCommand) -> Result<(), Box<dyn std::error::Error>> {
    use bio_sim::bench::{
        dontcache_bench, loop_bench, parse_size, DontcacheConfig, Engine, LoopBenchConfig, Workload,
    };
    use bio_sim::cli::BenchCommand;
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
    }
    Ok(())
}

fn loop_checks(args: bio_sim::cli::LoopArgs) -> Result<(), Box<dyn std::error::Error>> {
    use bio_core::drivers::block::loop_drv::LoopVariant;
    use bio_sim::findings::Verdict;
    use bio_sim::loop_checks::{
        loop_check, loop_matrix, render_loop, run_loop_check, twin_variant,
    };
    if let Some(id) = &args.finding {
        let c = loop_check(id).ok_or_else(|| format!("no loop check `{id}` (expected L1..L4)"))?;
        let variant = if args.variant == "twin" {
            twin_variant(
                c.twin
                    .ok_or_else(|| format!("loop check {} has no twin", c.id))?
                    .0,
            )
        } else {
            LoopVariant::by_name(&args.variant).ok_or_else(|| {
                format!(
                    "unknown loop variant `{}` (expected base, v5-no-hint, v4, v5 or twin)",
                    args.variant
                )
            })?
        };
        let run = run_loop_check(c.id, variant, true)?;
        print!("{}", run.trace);
        if let Some(p) = &args.perfetto {
            bio_sim::perfetto::write(
                p,
                &run.trace,
                &format!("loop check {} on {}", c.id, variant.name),
            )?;
        }
        println!(
            "== loop check {}: {} on {}: {}",
            c.id, c.title, variant.name, run.verdict
        );
        if let Verdict::Caught(v) = &run.verdict {
            for x in v {
                println!("   {x}");
            }
        }
        println!("   counters: {:?}", run.stats);
        println!("   (chapter: docs/loop.md)");
        return Ok(());
    }
    let rows = loop_matrix()?;
    print!("{}", render_loop(&rows));
    if args.check {
        let bad: Vec<String> = rows
            .iter()
            .flat_map(|r| {
                r.mismatches().into_iter().map(move |(col, got, want)| {
                    format!("{} on {col}: {got}, expected {want:?}", r.check.id)
                })
            })
            .collect();
        if !bad.is_empty() {
            eprintln!(
                "biosim loop --check: {} cells differ:\n  {}",
                bad.len(),
                bad.join("\n  ")
            );
            std::process::exit(1);
        }
        println!("all cells as expected");
    }
    Ok(())
}

fn run_scenario(args: bio_sim::cli::RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let scenario = bio_sim::scenario_file::Scenario::load(&args.file)?;
    let run = scenario.run()?;
    if !args.quiet {
        print!("{}", run.trace);
    }
    if let Some(p) = &args.perfetto {
        bio_sim::perfetto::write(p, &run.trace, &args.file.display().to_string())?;
    }
    if run.violations.is_empty() {
        println!("== {}: no invariant violated", args.file.display());
    } else {
        println!(
            "== {}: {} violation(s)",
            args.file.display(),
            run.violations.len()
        );
        for v in &run.violations {
            println!("   {v}");
        }
    }
    let failed = if scenario.expect.is_empty() {
        !run.violations.is_empty()
    } else {
        for f in &run.failed_expectations {
            println!("   expectation failed: {f}");
        }
        if run.failed_expectations.is_empty() {
            println!("   every expectation holds");
        }
        !run.failed_expectations.is_empty()
    };
    if failed {
        std::process::exit(1);
    }
    Ok(())
}
