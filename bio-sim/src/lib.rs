//! bio-sim: the machine that runs bio-core, and the `biosim` command line.
//!
//! - [`cli`]: the command-line interface (`biosim --help`).
//! - [`contexts`]: the `bio_in_atomic()` truth table a reviewer can print for any kernel config.
//! - [`measure`]: measurements of the completion paths on the threaded runtime.
//! - [`runtime`]: the deterministic and threaded runtimes.
//! - [`trace`]: the `tracing` subscriber the binary installs (`RUST_LOG`-style filtering).

#![warn(missing_docs)]

pub mod cli;
pub mod contexts;
pub mod measure;
pub mod runtime;
pub mod trace;
