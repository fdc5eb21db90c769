//! The two runtimes that execute bio-core's kernel model. They differ only in who decides what
//! runs next:
//!
//! - [`deterministic`]: a seeded, single-threaded event loop on virtual time. Every runnable event
//!   is explicit ([`Event`]); a caller can choose each next step or let the seeded scheduler
//!   choose, and the same seed gives a byte-identical trace.
//! - [`threaded`]: one OS thread per simulated CPU on real time; IRQs are delivered to the CPU's
//!   thread, so "IRQs off on this CPU" really holds them off.

pub mod deterministic;
pub mod event;
pub mod rng;
pub mod threaded;

pub use event::{pool_name, Event};
