//! `biosim explore`: a search over what `block/bio.c`'s task-completion batcher meets on a machine
//! whose CPUs go down and up (`kernel/cpu.c`, with `hotplug/fail` armed at any state and the
//! operation stepped so completions land mid-operation), with the invariant oracle after every
//! step, to a minimal counterexample as a scenario file `biosim run` reproduces.
//!
//! - [`generator`]: the one proptest strategy over the scenario language's transitions (the
//!   proptest state machine of `tests/tests/hotplug_rollback.rs` uses it too).
//! - [`campaign`]: cases `0..N` of a seed over threads and shards, the lowest failing case, the
//!   count and fingerprint of what ran.
//! - [`shrink`]: proptest's shrinking loop on the failing case, keeping its invariant broken.
//! - [`counterexample`]: the scenario file, written without overwriting and run back.

pub mod campaign;
pub mod counterexample;
pub mod generator;
pub mod shrink;

pub use campaign::{Budget, Campaign, Outcome, Shard};
pub use generator::Space;

#[cfg(test)]
mod inject_tests;
