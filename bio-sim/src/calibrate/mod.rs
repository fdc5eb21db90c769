//! `biosim calibrate`: the model checked against the live kernel it runs on.
//!
//! - [`tracefs`]: the kernel's tracefs (`/sys/kernel/tracing`) driven from Rust: events on and
//!   off, the buffer read and cleared, everything switched off again however the run ends.
//!
//! Live runs need root and change machine state (CPU hotplug, loop devices, tracing): every change
//! is registered as a [`crate::dev::cleanup::Restore`] before it is made, so it is undone on a
//! normal end, an error, a panic that unwinds, and on `SIGINT`/`SIGTERM`/`SIGHUP`.

pub mod hotplug;
pub mod loop_cal;
pub mod tracefs;
