//! The checks biosim ships: each review finding as a check run on every posted version, the loop
//! driver's checks, and the `bio_in_atomic()` truth table.
//!
//! - [`verdict`]: [`Expect`] (what a cell must be) and [`Verdict`] (what it was).
//! - [`findings`]: the finding gallery of the task-completion series.
//! - [`loop_checks`]: the loop driver's NOWAIT-series checks.
//! - [`review`]: the gallery's review questions that run on any module (findings 12 and 13).
//! - [`contexts`]: `bio_in_atomic()` in every context under a kernel config.

pub mod contexts;
pub mod findings;
pub mod lockdep_usage;
pub mod loop_checks;
pub mod review;
pub mod verdict;

pub use verdict::{Expect, Verdict};
