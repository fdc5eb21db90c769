//! The `biosim` command line: [`args`] holds the clap definitions, one file per subcommand holds
//! what it runs and prints, and [`main`] dispatches.

pub mod args;
pub mod bench;
pub mod findings;
pub mod loop_cmd;
pub mod run;
pub mod variants;

use args::{Cli, Command};
use bio_core::KernelConfig;
use clap::Parser;
use std::process::ExitCode;

/// The `biosim` binary: parses the command line, installs the trace subscriber, runs the command
/// and maps an error to exit status 2.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // The gallery provokes kernel splats on purpose and reports them itself.
    let quiet = matches!(
        cli.command,
        Command::Findings(_) | Command::Run(_) | Command::Loop(_)
    );
    crate::trace::init(if quiet { "error" } else { "warn" });
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("biosim: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// How `--check` names an expected cell: `Caught`, `Clean`, `NotApplicable`, or that the
/// variant's row has none.
fn expected_word(e: Option<crate::checks::Expect>) -> String {
    e.map_or_else(
        || "a cell in its row of expectations (none)".to_owned(),
        |e| format!("{e:?}"),
    )
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
                print!("{}", crate::checks::contexts::render(config)?);
            }
        }
        Command::Run(args) => return run::run_scenario(args),
        Command::Variants => print!("{}", variants::variants()),
        Command::Findings(args) => return findings::findings(args),
        Command::Loop(args) => return loop_cmd::loop_checks(args),
        Command::Bench(b) => return bench::bench(b),
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
