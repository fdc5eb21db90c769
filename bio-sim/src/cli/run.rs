//! `biosim run FILE`: a scenario file; `biosim run`: the built-in default scenario
//! ([`crate::demo`]).

use super::args::RunArgs;
use super::output::{check_pair_with, Say};

/// Runs `biosim run`.
pub fn run_scenario(args: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let Some(file) = args.file.clone() else {
        return default_run(&args);
    };
    let (trace_out, perfetto) = check_pair_with(
        args.trace_out.as_deref(),
        args.perfetto.as_deref(),
        &[&file],
        args.force,
    )?;
    let scenario = crate::scenario::Scenario::load(&file)?;
    let run = scenario.run()?;
    let say = Say::for_trace(trace_out.as_ref());
    if !args.quiet && !say.to_stderr {
        print!("{}", run.trace);
    }
    let mut verdict = Vec::new();
    if run.violations.is_empty() {
        verdict.push(format!("== {}: no invariant violated", file.display()));
    } else {
        verdict.push(format!(
            "== {}: {} violation(s)",
            file.display(),
            run.violations.len()
        ));
        verdict.extend(run.violations.iter().map(|v| format!("   {v}")));
    }
    verdict.extend(run.skipped.iter().map(|sk| format!("   try: {sk}")));
    let failed = if scenario.expect.is_empty() {
        !run.violations.is_empty()
    } else {
        verdict.extend(
            run.failed_expectations
                .iter()
                .map(|f| format!("   expectation failed: {f}")),
        );
        if run.failed_expectations.is_empty() {
            verdict.push("   every expectation holds".to_owned());
        }
        !run.failed_expectations.is_empty()
    };
    super::output::write_trace_outputs(
        &run.ftrace,
        &verdict,
        trace_out.as_ref(),
        perfetto.as_ref(),
        &file.display().to_string(),
    )?;
    for l in &verdict {
        say.line(l);
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

/// `biosim run` without FILE: the default scenario, its summary (or with `--quiet` only the
/// verdict), exit 1 on any violation. The temporary file is gone before this returns or exits.
fn default_run(args: &RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let (trace_out, perfetto) = check_pair_with(
        args.trace_out.as_deref(),
        args.perfetto.as_deref(),
        &[],
        args.force,
    )?;
    let out = match args.module {
        Some(m) => crate::demo::run_on(m, &args.knobs)?,
        None => crate::demo::run(&args.knobs)?,
    };
    let say = Say::for_trace(trace_out.as_ref());
    if args.steps {
        say.text(&out.trace);
    }
    let summary = if args.quiet {
        match (out.violations.len(), out.uncovered.len()) {
            (0, 0) => "== default scenario: no invariant violated\n".to_owned(),
            (n, 0) => format!("== default scenario: {n} violation(s)\n"),
            (n, u) => format!("== default scenario: {n} violation(s), {u} untested path(s)\n"),
        }
    } else {
        out.summary()
    };
    // The verdict markers: the summary's verdict line and what it lists under it.
    let verdict: Vec<String> = out
        .violations
        .iter()
        .map(ToString::to_string)
        .chain(out.uncovered.iter().map(|u| format!("untested: {u}")))
        .collect();
    let verdict = if verdict.is_empty() {
        vec!["no invariant violated".to_owned()]
    } else {
        verdict
    };
    super::output::write_trace_outputs(
        &out.ftrace,
        &verdict,
        trace_out.as_ref(),
        perfetto.as_ref(),
        "biosim run (default scenario)",
    )?;
    say.text(&summary);
    if out.failed() {
        std::process::exit(1);
    }
    Ok(())
}
