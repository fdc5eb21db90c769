//! `biosim run FILE`: a scenario file.

use super::args::RunArgs;

/// Runs `biosim run`.
pub fn run_scenario(args: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let scenario = crate::scenario::Scenario::load(&args.file)?;
    let run = scenario.run()?;
    if !args.quiet {
        print!("{}", run.trace);
    }
    if let Some(p) = &args.perfetto {
        crate::report::perfetto::write(p, &run.trace, &args.file.display().to_string())?;
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
