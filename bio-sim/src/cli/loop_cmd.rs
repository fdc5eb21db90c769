//! `biosim loop`: the loop driver's checks.

use super::args::LoopArgs;

/// Runs `biosim loop`.
pub fn loop_checks(args: LoopArgs) -> Result<(), Box<dyn std::error::Error>> {
    match &args.finding {
        Some(id) => one_check(id, &args),
        None => loop_gallery(&args),
    }
}

/// `--finding L`: one check's trace, verdict and counters on the version `--variant` and
/// `--knob` name.
fn one_check(id: &str, args: &LoopArgs) -> Result<(), Box<dyn std::error::Error>> {
    use crate::checks::loop_checks::{loop_check, loop_variant_for, run_loop_check, LOOP_CHECKS};
    use crate::checks::Verdict;
    let c = loop_check(id).ok_or_else(|| {
        format!(
            "no loop check `{id}` (expected {})",
            LOOP_CHECKS
                .iter()
                .map(|c| c.id)
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let variant = loop_variant_for(c, &args.variant, &args.knobs)?;
    let (trace_out, perfetto) = super::output::check_pair_with(
        args.trace_out.as_deref(),
        args.perfetto.as_deref(),
        &[],
        args.force,
    )?;
    let run = run_loop_check(c.id, variant, true)?;
    let say = super::output::Say::for_trace(trace_out.as_ref());
    if !say.to_stderr {
        print!("{}", run.trace);
    }
    let mut verdict = vec![format!(
        "== loop check {}: {} on {}: {}",
        c.id, c.title, variant.name, run.verdict
    )];
    if let Verdict::Caught(v) = &run.verdict {
        verdict.extend(v.iter().map(|x| format!("   {x}")));
    }
    super::output::write_trace_outputs(
        &run.ftrace,
        &verdict,
        trace_out.as_ref(),
        perfetto.as_ref(),
        &format!("loop check {} on {}", c.id, variant.name),
    )?;
    for l in &verdict {
        say.line(l);
    }
    say.line(&format!("   counters: {:?}", run.stats));
    say.line("   (chapter: docs/loop.md)");
    Ok(())
}

/// The matrix, and with `--check` the exit status of its comparison with the expectations.
fn loop_gallery(args: &LoopArgs) -> Result<(), Box<dyn std::error::Error>> {
    use crate::checks::loop_checks::{loop_matrix, render_loop};
    let rows = loop_matrix()?;
    print!("{}", render_loop(&rows));
    if args.check {
        let bad: Vec<String> = rows
            .iter()
            .flat_map(|r| {
                r.mismatches().into_iter().map(move |(col, got, want)| {
                    format!(
                        "{} on {col}: {got}, expected {}",
                        r.check.id,
                        super::expected_word(want)
                    )
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
