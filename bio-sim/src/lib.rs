//! bio-sim: the machine that runs bio-core, and the `biosim` command line.
//!
//! - [`cli`]: the command-line interface (`biosim --help`).
//! - [`contexts`]: the `bio_in_atomic()` truth table a reviewer can print for any kernel config.
//! - [`findings`]: the review findings as checks and figures.
//! - [`measure`]: measurements of the completion paths on the threaded runtime.
//! - [`oracle`]: the invariants every run is checked against.
//! - [`sim`], [`scenario`]: a machine with the batcher, the runtime and the oracle, and the
//!   transitions scenarios apply to it; [`scenario_file`]: the same as a runnable text file.
//! - [`runtime`]: the deterministic and threaded runtimes.
//! - [`trace`]: the `tracing` subscriber the binary installs (`RUST_LOG`-style filtering).

#![warn(missing_docs)]

pub mod bench;
pub mod cli;
pub mod contexts;
pub mod dev;
pub mod findings;
pub mod loop_checks;
pub mod loop_sim;
pub mod measure;
pub mod oracle;
pub mod perfetto;
pub mod runtime;
pub mod scenario;
pub mod scenario_file;
pub mod sim;
pub mod trace;
