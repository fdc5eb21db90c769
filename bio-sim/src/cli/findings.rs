//! `biosim findings`: the gallery matrix, one finding's counterexample, `--check`.

use super::args::FindingsArgs;

/// Finding 8's figure: v6 (the 1-jiffy delay) against v7 (none), then every registered module.
fn figure8() -> String {
    use crate::perf::latency::{completion_latency, LatencyConfig};
    use bio_core::block::complete_in_task::Variant;
    let mut parts = Vec::new();
    let columns = [Variant::V6, Variant::V7]
        .into_iter()
        .chain(crate::machine::modules::registered());
    for v in columns {
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

/// Runs `biosim findings`.
pub fn findings(args: FindingsArgs) -> Result<(), Box<dyn std::error::Error>> {
    match args.finding {
        Some(id) => one_finding(id, &args),
        None => gallery(&args),
    }
}

/// `--finding N`: one check's trace and verdict on the variant `--variant` and `--knob` name.
fn one_finding(id: u32, args: &FindingsArgs) -> Result<(), Box<dyn std::error::Error>> {
    use crate::checks::findings;
    use crate::checks::Verdict;
    let f = findings::finding(id).ok_or_else(|| format!("no finding {id}"))?;
    let (trace_out, perfetto) = super::output::check_pair_with(
        args.trace_out.as_deref(),
        args.perfetto.as_deref(),
        &[],
        args.force,
    )?;
    let name = args.module.map_or(args.variant.as_str(), |m| m.name);
    let (variant, rescuer) = findings::machine_for(f, name, &args.knobs)?;
    let Some(run) = findings::run_check(id, variant, rescuer, true) else {
        println!(
            "finding {id} ({}) is a measurement: run `biosim findings` for its figures",
            f.title
        );
        return Ok(());
    };
    let run = run?;
    let say = super::output::Say::for_trace(trace_out.as_ref());
    if !say.to_stderr {
        print!("{}", run.trace);
    }
    let mut verdict = vec![format!(
        "== finding {id}: {} on {}: {}",
        f.title, variant.name, run.verdict
    )];
    if let Verdict::Caught(v) = &run.verdict {
        verdict.extend(v.iter().map(|x| format!("   {x}")));
    }
    super::output::write_trace_outputs(
        &run.ftrace,
        &verdict,
        trace_out.as_ref(),
        perfetto.as_ref(),
        &format!("finding {id} on {}", variant.name),
    )?;
    for l in &verdict {
        say.line(l);
    }
    say.line(&format!("   (chapter: {})", f.chapter));
    Ok(())
}

/// The matrix, and with `--check` the exit status of its comparison with the expectations.
fn gallery(args: &FindingsArgs) -> Result<(), Box<dyn std::error::Error>> {
    use crate::checks::findings;
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
                    "finding {} on {col}: {got}, expected {}",
                    r.finding.id,
                    super::expected_word(want)
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
        let modules = crate::machine::modules::registered();
        if modules.is_empty() {
            println!("all cells as expected");
        } else {
            let names: Vec<&str> = modules.iter().map(|v| v.name).collect();
            println!(
                "all cells of the posted versions and twins as expected; module columns reported, not judged: {}",
                names.join(", ")
            );
        }
    }
    Ok(())
}
