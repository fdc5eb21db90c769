//! What biosim prints: the trace capture every run uses, the `tracing` subscriber the binary
//! installs, and the Perfetto timeline export.
//!
//! - [`capture`]: the process-wide capture layer that records the kernel-named trace events of one
//!   run.
//! - [`ftrace`]: the tracefs `trace` file format: its lines and the events' `format` files.
//! - [`trace`]: the subscriber (`RUST_LOG`-style filtering) with the capture layer beside it.
//! - [`perfetto`]: the kernel-style trace as a Chrome/Perfetto JSON timeline.
//! - [`knob_line`]: a variant's knobs as one trace-header line.

pub mod capture;
pub mod ftrace;
pub mod perfetto;
pub mod trace;

/// A variant's knobs as `name=value` pairs joined for one trace-header line.
pub fn knob_line(knobs: &[(&'static str, String)]) -> String {
    knobs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}
