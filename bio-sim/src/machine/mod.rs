//! The machine under test: a booted [`Kernel`](bio_core::Kernel) with the task-completion
//! batcher, the deterministic runtime over it and the invariant [`oracle`], plus the device rigs a
//! scenario can attach.
//!
//! - [`sim`]: [`Sim`], the machine, and its configuration.
//! - [`oracle`]: the invariants every run is checked against.
//! - [`transition`]: the steps a scenario applies to a [`Sim`] ([`Transition`], `Sim::apply`).
//! - [`loop_rig`]: a loop device (`drivers/block/loop.c`) over an in-memory backing file with a
//!   reference of what it must hold; it takes the kernel, runtime and oracle it needs, not the
//!   `Sim`.
//! - [`locks`]: lock sequences in one context of one CPU, as `lib/locking-selftest.c` runs
//!   them (the `locks` scenario line).
//! - [`modules`]: a reviewer's registered modules as `--module` and a scenario's `module` line
//!   name them, and the knobs they take.

pub mod locks;
pub mod loop_rig;
pub mod modules;
pub mod oracle;
pub mod sim;
pub mod transition;

pub use sim::{CompletionContext, Sim, SimConfig, SimError};
pub use transition::Transition;
