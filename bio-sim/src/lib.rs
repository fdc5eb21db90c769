//! bio-sim: the machine that runs bio-core, and the `biosim` command line.
//!
//! The modules depend on each other in one direction only, from the top of this list down
//! (docs/design.md draws it):
//!
//! - [`cli`]: the command line (`biosim --help`) and what each subcommand prints.
//! - [`demo`]: the built-in default scenario of `biosim run` (no FILE) and its summary.
//! - [`perf`]: measurements and benchmarks: deferral throughput, completion latency, the loop and
//!   DONTCACHE benches over real files, and the statistics they share.
//! - [`explore`]: `biosim explore`: the transition generator, campaigns over threads and shards,
//!   shrinking, and the counterexample as a scenario file.
//! - [`calibrate`]: `biosim calibrate`: the model compared with the live kernel it runs on.
//! - [`scenario`]: runnable scenario files (`*.scn`): their format, parser and runner.
//! - [`checks`]: the finding gallery, the loop checks, the `bio_in_atomic()` truth table, and the
//!   `Expect`/`Verdict` of a cell.
//! - [`machine`]: the machine under test (`Sim`), its invariant oracle, the transitions scenarios
//!   apply and the device rigs they attach.
//! - [`runtime`]: the deterministic and threaded runtimes that execute bio-core's kernel model.
//! - [`dev`]: real-file backings and I/O engines (`O_DIRECT` files, io_uring) under simulated
//!   devices.
//! - [`report`]: the trace capture, the `tracing` subscriber and the Perfetto export.

#![warn(missing_docs)]

pub mod calibrate;
pub mod checks;
pub mod cli;
pub mod demo;
pub mod dev;
pub mod explore;
pub mod fio;
pub mod machine;
pub mod pagecache;
pub mod perf;
pub mod report;
pub mod runtime;
pub mod scenario;

pub use report::trace;
