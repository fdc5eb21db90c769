//! biosim with the `hillf` example module registered: every command (`findings`,
//! `explore --variant hillf`, `run` with a scenario's `module` line, `variants`) knows it.
//! The module is in module.rs; docs/own-patch.md walks through it.
//!
//! Run: `cargo run -p bio-sim --example hillf -- variants`

use std::process::ExitCode;

mod module;

fn main() -> ExitCode {
    bio_sim::cli::main_with(&[&module::MODULE])
}
