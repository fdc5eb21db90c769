//! The `biosim` command line: [`args`] holds the clap definitions, one file per subcommand holds
//! what it runs and prints, and [`main`] dispatches.

pub mod args;
pub mod bench;
pub mod calibrate;
pub mod diff;
pub mod explore;
pub mod findings;
pub mod loop_cmd;
pub mod output;
pub mod run;
pub mod variants;

use args::{BenchCommand, Cli, Command};
use bio_core::KernelConfig;
use clap::Parser;
use std::process::ExitCode;

/// The `biosim` binary: parses the command line, installs the trace subscriber, runs the command
/// and maps an error to exit status 2, or 1 for a device failure ([`exit_status`]).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // The gallery provokes kernel splats on purpose and reports them itself.
    let quiet = matches!(
        cli.command,
        Command::Findings(_)
            | Command::Run(_)
            | Command::Loop(_)
            | Command::Diff(_)
            | Command::Explore(_)
            | Command::Calibrate(_)
            | Command::Bench(BenchCommand::Explore(_))
    );
    crate::trace::init(if quiet { "error" } else { "warn" });
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("biosim: error: {}", error_chain(&*e));
            ExitCode::from(exit_status(&*e))
        }
    }
}

/// The exit status of a failed command: 1 when a real file or device failed under the run (an
/// I/O error somewhere in the error's chain with `EIO`, `ENOSPC`, `EDQUOT` or `EFBIG`: the disk,
/// the quota or `RLIMIT_FSIZE` ran out), 2 for everything the user can fix in the command line
/// or its inputs (a missing file, a refused size or directory).
pub fn exit_status(e: &(dyn std::error::Error + 'static)) -> u8 {
    const DEVICE: [i32; 4] = [libc::EIO, libc::ENOSPC, libc::EDQUOT, libc::EFBIG];
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.raw_os_error().is_some_and(|n| DEVICE.contains(&n)) {
                return 1;
            }
        }
        cur = err.source();
    }
    2
}

/// `biosim` with a reviewer's modules beside the posted versions: registers each module (so every
/// command's `--variant`/`--module`, every scenario's `module` line and the gallery's columns know
/// it), then runs [`main`]. What an `examples/` binary or a reviewer's own crate calls; each
/// example's `main.rs` (bio-sim/examples/v6_llist/main.rs, compiled with the tests) is exactly:
///
/// ```text
/// fn main() -> ExitCode {
///     bio_sim::cli::main_with(&[&module::MODULE])
/// }
/// ```
pub fn main_with(
    modules: &[&'static dyn bio_core::block::complete_in_task::BioCompleteModule],
) -> ExitCode {
    for m in modules {
        if let Err(e) = bio_core::block::complete_in_task::register_module(*m) {
            eprintln!("biosim: error: {e}");
            return ExitCode::from(2);
        }
    }
    main()
}

/// An error and its sources, `outer: inner: ...`; a source whose text the message already
/// carries (a `#[from]` error formatted into its wrapper) is not repeated.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

/// How `--check` names an expected cell: `Caught`, `Clean`, `NotApplicable`, or that the
/// variant's row has none.
fn expected_word(e: Option<crate::checks::Expect>) -> String {
    e.map_or_else(
        || "a cell in its row of expectations (none)".to_owned(),
        |e| format!("{e:?}"),
    )
}

/// Runs a parsed command line as [`main`] does, without the trace subscriber and the exit status
/// mapping (in-process callers: tests of a registered module, with `Cli::try_parse_from`). A
/// command that finds what it looks for (a violation, differing verdicts, a failed `--check`)
/// still exits the process with status 1, as the binary does.
pub fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
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
        Command::Diff(args) => return diff::diff(args),
        Command::Explore(args) => return explore::explore(args),
        Command::Calibrate(c) => return calibrate::calibrate(c),
        Command::States(args) => {
            use bio_core::block::complete_in_task::{bio_complete_init, Variant};
            let kernel = bio_core::Kernel::new(KernelConfig::default(), args.cpus)?;
            // The table after boot: the batcher's init registers its dynamic states (v7: two; a
            // module: whatever its init registers).
            bio_complete_init(&kernel, args.module.unwrap_or(Variant::DEFAULT), None)?;
            print!("{}", kernel.hotplug().states_listing());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::error_chain;
    use bio_core::block::complete_in_task::{bio_complete_init, InitError, Variant};
    use bio_core::{Kernel, KernelConfig};

    #[test]
    fn the_error_chain_names_each_cause_once() {
        // Exhaust CPUHP_AP_ONLINE_DYN so the batcher's registration fails with a hotplug error.
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        for _ in 0..64 {
            let _ = k.hotplug().cpuhp_setup_state_nocalls(
                hotplug::CPUHP_AP_ONLINE_DYN,
                "test/fill",
                None,
                None,
            );
        }
        let e = bio_complete_init(&k, Variant::V7, None).unwrap_err();
        assert!(matches!(e, InitError::Hotplug { .. }), "{e:?}");
        let chain = error_chain(&e);
        let source = std::error::Error::source(&e)
            .expect("the hotplug error")
            .to_string();
        assert!(chain.starts_with("cpuhp_setup_state_nocalls("), "{chain}");
        assert_eq!(chain.matches(&source).count(), 1, "{chain}");
    }

    #[test]
    fn a_device_failure_exits_1_and_a_bad_input_2() {
        use super::exit_status;
        use crate::perf::bench_common::BenchError;
        let io = |errno| BenchError::Io {
            what: "writing".into(),
            path: "/x".into(),
            source: std::io::Error::from_raw_os_error(errno),
        };
        assert_eq!(exit_status(&io(libc::EFBIG)), 1);
        assert_eq!(exit_status(&io(libc::ENOSPC)), 1);
        // The twin: a missing input is the user's to fix.
        assert_eq!(exit_status(&io(libc::ENOENT)), 2);
        assert_eq!(exit_status(&BenchError::Param("--size".into())), 2);
        let resize = BenchError::Backing(crate::dev::backing::BackingError::Resize {
            path: "/x".into(),
            from: 0,
            to: 1,
            source: std::io::Error::from_raw_os_error(libc::EFBIG),
        });
        assert_eq!(exit_status(&resize), 1, "found through the chain");
    }
}
