//! biosim with the `v6-llist` example module registered: every command (`findings`,
//! `explore --variant v6-llist`, `run` with a scenario's `module` line, `variants`) knows it.
//! The module is in module.rs; docs/own-patch.md walks through it.
//!
//! Run: `cargo run -p bio-sim --example v6_llist -- variants`

use std::process::ExitCode;

mod module;

fn main() -> ExitCode {
    bio_sim::cli::main_with(&[&module::MODULE])
}
