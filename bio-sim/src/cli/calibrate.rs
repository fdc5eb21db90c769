//! `biosim calibrate`: the model compared with the live kernel it runs on, or with a recording of
//! one (`--replay`, no root needed).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::calibrate::hotplug::{compare, live, model::Twin, recording::Recording};

/// `biosim calibrate`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum CalibrateCommand {
    /// Compare the hotplug model (kernel/cpu.c) with this machine's CPU hotplug, or with a
    /// recording of it (docs/live-kernel.md).
    ///
    /// Learns the step table from the `states` listing and a traced clean offline/online, then
    /// injects every `hotplug/fail` the kernel accepts, with the CPU online (offline fails) and
    /// offline (online fails), live and in the model, and compares the callbacks run, the errno,
    /// the state, `online` and whether `fail` was consumed; and every `fail` write from -2 to
    /// CPUHP_ONLINE. Live runs need root and tracefs, never touch CPU0, and leave the CPU online,
    /// `fail` at -1 and tracing off. Exit status 0 if everything agrees, 1 if a row differs, 2 for
    /// a refusal or bad input.
    Hotplug(HotplugArgs),
    /// Compare the model's loop driver (drivers/block/loop.c) with this machine's, or with a
    /// recording of it (docs/live-kernel.md).
    ///
    /// Attaches a loop device (LOOP_CONFIGURE, direct I/O) over a sparse temporary file, traces
    /// O_DIRECT writes and reads into holes and over written blocks (block and workqueue events),
    /// runs the same I/O through the model's loop driver in every variant, and says which variant
    /// the kernel behaves like and whether `base` gives the same event sequence (pointers, pids and
    /// times ignored). Live runs need root; the device is detached, the file removed and tracing
    /// switched off however the run ends. Exit status 0 if `base` agrees on every case, 1 if not,
    /// 2 for a refusal or bad input.
    Loop(crate::calibrate::loop_cal::LoopCalibrateArgs),
}

/// `biosim calibrate hotplug`.
#[derive(Debug, Args)]
pub struct HotplugArgs {
    /// The CPU to take offline and online (never 0).
    #[arg(long, default_value_t = 1, conflicts_with = "replay")]
    pub cpu: u32,
    /// Keep the live traces and outcomes in DIR (created), for a later --replay.
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    pub record: Option<PathBuf>,
    /// Compare the model with a recorded directory instead of the live kernel (no root needed).
    #[arg(long, value_name = "DIR")]
    pub replay: Option<PathBuf>,
}

/// Runs `biosim calibrate`.
pub fn calibrate(cmd: CalibrateCommand) -> Result<(), Box<dyn std::error::Error>> {
    match cmd {
        CalibrateCommand::Hotplug(args) => hotplug(args),
        CalibrateCommand::Loop(args) => {
            let agree = crate::calibrate::loop_cal::run(&args, &mut std::io::stdout().lock())?;
            if !agree {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

fn hotplug(args: HotplugArgs) -> Result<(), Box<dyn std::error::Error>> {
    let (rec, took) = match &args.replay {
        Some(dir) => {
            println!("replaying {}", dir.display());
            (Recording::read(dir)?, None)
        }
        None => {
            let (rec, took) = live::record(args.cpu)?;
            if let Some(dir) = &args.record {
                rec.write(dir)?;
            }
            (rec, Some(took))
        }
    };
    let report = compare::compare(&rec, Twin::None)?;
    print!("{}", report.render());
    if let Some(took) = took {
        println!(
            "live run: {:.1} s{}",
            took.as_secs_f64(),
            args.record
                .as_ref()
                .map(|d| format!(", recorded in {}", d.display()))
                .unwrap_or_default()
        );
    }
    if !report.agrees() {
        std::process::exit(1);
    }
    Ok(())
}
