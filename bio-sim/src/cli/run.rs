//! `biosim run FILE`: a scenario file; `biosim run`: the built-in default scenario
//! ([`crate::demo`]).

use super::args::RunArgs;

/// Runs `biosim run`.
pub fn run_scenario(args: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let Some(file) = args.file.clone() else {
        return default_run(&args);
    };
    let scenario = crate::scenario::Scenario::load(&file)?;
    let run = scenario.run()?;
    if !args.quiet {
        print!("{}", run.trace);
    }
    if let Some(p) = &args.perfetto {
        crate::report::perfetto::write(p, &run.trace, &file.display().to_string())?;
    }
    if run.violations.is_empty() {
        println!("== {}: no invariant violated", file.display());
    } else {
        println!(
            "== {}: {} violation(s)",
            file.display(),
            run.violations.len()
        );
        for v in &run.violations {
            println!("   {v}");
        }
    }
    for sk in &run.skipped {
        println!("   try: {sk}");
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

/// `biosim run` without FILE: the default scenario, its summary (or with `--quiet` only the
/// verdict), exit 1 on any violation. The temporary file is gone before this returns or exits.
fn default_run(args: &RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let out = crate::demo::run(&args.knobs)?;
    if args.trace {
        print!("{}", out.trace);
    }
    if let Some(p) = &args.perfetto {
        crate::report::perfetto::write(p, &out.trace, "biosim run (default scenario)")?;
    }
    if args.quiet {
        match (out.violations.len(), out.uncovered.len()) {
            (0, 0) => println!("== default scenario: no invariant violated"),
            (n, 0) => println!("== default scenario: {n} violation(s)"),
            (n, u) => println!("== default scenario: {n} violation(s), {u} untested path(s)"),
        }
    } else {
        print!("{}", out.summary());
    }
    if out.failed() {
        std::process::exit(1);
    }
    Ok(())
}
