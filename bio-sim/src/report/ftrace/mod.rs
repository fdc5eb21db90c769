//! ftrace's text format, as `kernel/trace/trace.c` and `kernel/trace/trace_output.c` print a
//! tracefs `trace` file: the header (`print_trace_header()`, `print_lat_help_header()`), one line
//! per event (`TASK-PID [CPU] FLAGS TIMESTAMP: event: fields`), and the `format` file of each
//! event (`events/<system>/<event>/format`) whose `print fmt` renders the fields.
//!
//! - [`line`]: one trace line: parse it, print it (the two are inverses).
//! - [`format`]: an event's `format` file and a matcher that parses a line's fields back with
//!   its `print fmt`.
//! - [`check`]: the checker of a whole `trace` file biosim wrote (layout, order, markers, each
//!   event's fields against its `print fmt`).
//! - [`record`]: one captured event with its context ([`TraceRecord`]), a run's trace
//!   ([`Ftrace`]) and the writer of the `trace` file ([`write_trace`]).
//!
//! biosim's own trace writer prints through [`line::TraceLine`]'s `Display`; the live-kernel
//! calibration parses what the kernel printed with [`line::TraceLine::parse`]; tests check that
//! every line biosim prints parses and that each event's fields match its `print fmt`.

pub mod check;
pub mod format;
pub mod line;
pub mod record;

pub use check::check_trace;
pub use format::{EventFormat, FormatError};
pub use line::{parse_trace, LineError, TraceLine, HEADER_LEGEND};
pub use record::{write_trace, Ftrace, TraceRecord};
