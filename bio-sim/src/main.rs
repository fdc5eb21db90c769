//! The `biosim` binary.

use bio_core::KernelConfig;
use bio_sim::cli::{Cli, Command};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    bio_sim::trace::init("warn");
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
        Command::States(args) => {
            let kernel = bio_core::Kernel::new(KernelConfig::default(), args.cpus)?;
            print!("{}", kernel.hotplug().states_listing());
        }
    }
    Ok(())
}
