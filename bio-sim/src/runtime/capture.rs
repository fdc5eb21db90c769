//! Captures the kernel-named `tracing` events (`block_bio_complete`, `workqueue_execute_start`,
//! `cpuhp_enter`, ...) into a runtime's trace, so a deterministic run's trace shows what the
//! kernel model did inside each step.

use parking_lot::Mutex;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

/// A line buffer the capture layer appends to.
pub type Lines = Arc<Mutex<Vec<String>>>;

/// The CPU whose context is executing, as the runtime sets it (`-1`: none, e.g. a tick). The
/// capture layer prints it as ftrace's CPU column; an event whose own `cpu` field names another CPU
/// (the target of a hotplug callback run on the control CPU) keeps it as `cpu=N`.
pub type ExecCpu = Arc<AtomicI64>;

struct CaptureLayer {
    lines: Lines,
    exec_cpu: ExecCpu,
}

/// Collects the message, the `cpu` field, and the other fields as ` key=value`. Events that
/// carry a `tracepoint` field already format everything into their message (biosim's own
/// convention), so their extra fields are left out.
#[derive(Default)]
struct MessageVisitor {
    message: String,
    fields: String,
    cpu: Option<u64>,
    tracepoint: bool,
}

impl Visit for MessageVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => {
                let _ = write!(self.message, "{value:?}");
            }
            "tracepoint" => self.tracepoint = true,
            name => {
                let _ = write!(self.fields, " {name}={value:?}");
            }
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "cpu" {
            self.cpu = Some(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        let _ = write!(self.fields, " {}={value}", field.name());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message.push_str(value),
            "tracepoint" => self.tracepoint = true,
            name => {
                let _ = write!(self.fields, " {name}={value}");
            }
        }
    }
}

impl<S: Subscriber> Layer<S> for CaptureLayer {
    fn enabled(&self, metadata: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        *metadata.level() <= Level::TRACE
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut v = MessageVisitor::default();
        event.record(&mut v);
        let exec = self.exec_cpu.load(Ordering::Relaxed);
        let column = if exec >= 0 { Some(exec as u64) } else { v.cpu };
        let cpu = column.map_or_else(|| "   ".to_owned(), |c| format!("{c:03}"));
        let mut extra = if v.tracepoint {
            String::new()
        } else {
            v.fields.clone()
        };
        if let (Some(own), Some(col)) = (v.cpu, column) {
            if own != col {
                extra.push_str(&format!(" cpu={own}"));
            }
        }
        self.lines
            .lock()
            .push(format!("[{cpu}] {}{extra}", v.message));
    }
}

/// A dispatcher that appends every event at or above `level` to `lines`, with `exec_cpu` as the
/// CPU column.
pub fn dispatch(lines: Lines, exec_cpu: ExecCpu, level: Level) -> tracing::Dispatch {
    let filter = tracing_subscriber::filter::LevelFilter::from_level(level);
    let subscriber =
        tracing_subscriber::registry().with(CaptureLayer { lines, exec_cpu }.with_filter(filter));
    tracing::Dispatch::new(subscriber)
}
