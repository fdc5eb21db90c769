//! Captures the kernel-named `tracing` events (`block_bio_complete`, `workqueue_execute_start`,
//! `cpuhp_enter`, ...) into a runtime's trace, so a deterministic run's trace shows what the
//! kernel model did inside each step.
//!
//! Why one process-wide subscriber and a thread-local sink, not a scoped `Dispatch` per run:
//! `tracing` caches each callsite's interest once per process, and while exactly one dispatcher
//! is registered it computes that interest from the *registering thread's* default
//! (tokio-rs/tracing#3611). A test thread without a subscriber that reaches
//! `bio_complete_defer` first caches "never", and a capturing run on another thread then loses
//! that line: CI saw exactly this. With [`CaptureLayer`] installed globally every callsite is
//! "sometimes" and the per-event check is a thread-local read.

use parking_lot::Mutex;
use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

/// A line buffer the capture layer appends to.
pub type Lines = Arc<Mutex<Vec<String>>>;

/// The CPU whose context is executing, as the runtime sets it (`-1`: none, e.g. a tick). The
/// capture layer prints it as ftrace's CPU column; an event whose own `cpu` field names another CPU
/// (the target of a hotplug callback run on the control CPU) keeps it as `cpu=N`.
pub type ExecCpu = Arc<AtomicI64>;

/// Where this thread's events go while a capture is active.
struct Sink {
    lines: Lines,
    exec_cpu: ExecCpu,
    level: Level,
}

thread_local! {
    static SINK: RefCell<Option<Sink>> = const { RefCell::new(None) };
}

/// The layer that appends the events of a thread inside [`capture`] to that capture's lines.
/// Part of the process-wide subscriber (the binary's, see [`crate::report::trace::init`], or the one
/// [`capture`] installs on first use); events of threads outside a capture are not built.
#[derive(Debug, Default, Clone, Copy)]
pub struct CaptureLayer;

/// Set once the global subscriber is known to contain a [`CaptureLayer`].
static GLOBAL_HAS_CAPTURE: AtomicBool = AtomicBool::new(false);

/// Records that the process-wide subscriber contains a [`CaptureLayer`] (for a binary that
/// installs its own subscriber).
pub fn mark_global_capture_installed() {
    GLOBAL_HAS_CAPTURE.store(true, Ordering::Release);
}

/// Installs `registry + CaptureLayer` as the global subscriber unless one exists; returns
/// whether the global subscriber captures.
fn ensure_global() -> bool {
    static TRIED: OnceLock<()> = OnceLock::new();
    TRIED.get_or_init(|| {
        if GLOBAL_HAS_CAPTURE.load(Ordering::Acquire) {
            return;
        }
        if tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(CaptureLayer),
        )
        .is_ok()
        {
            mark_global_capture_installed();
        }
    });
    GLOBAL_HAS_CAPTURE.load(Ordering::Acquire)
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
    fn register_callsite(&self, _metadata: &'static Metadata<'static>) -> Interest {
        // Whether a callsite is wanted depends on the thread, so never cache a verdict.
        Interest::sometimes()
    }

    fn enabled(&self, metadata: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        SINK.with(|s| {
            s.borrow()
                .as_ref()
                .is_some_and(|sink| metadata.level() <= &sink.level)
        })
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        // Only reads the sink: formatting under the borrow is fine (nothing here emits events).
        SINK.with(|s| {
            let s = s.borrow();
            let Some(sink) = s.as_ref() else { return };
            if event.metadata().level() > &sink.level {
                return;
            }
            let mut v = MessageVisitor::default();
            event.record(&mut v);
            let exec = sink.exec_cpu.load(Ordering::Relaxed);
            let column = if exec >= 0 { Some(exec as u64) } else { v.cpu };
            let cpu = column.map_or_else(|| "   ".to_owned(), |c| format!("{c:03}"));
            let mut extra = if v.tracepoint {
                String::new()
            } else {
                v.fields
            };
            if let (Some(own), Some(col)) = (v.cpu, column) {
                if own != col {
                    let _ = write!(extra, " cpu={own}");
                }
            }
            sink.lines
                .lock()
                .push(format!("[{cpu}] {}{extra}", v.message));
        });
    }
}

/// Runs `f` with every event of this thread at or above `level` appended to `lines`, with
/// `exec_cpu` as the CPU column. Nests: the outer capture resumes when `f` returns.
pub fn capture<R>(lines: &Lines, exec_cpu: &ExecCpu, level: Level, f: impl FnOnce() -> R) -> R {
    let sink = Sink {
        lines: Arc::clone(lines),
        exec_cpu: Arc::clone(exec_cpu),
        level,
    };
    if !ensure_global() {
        // Someone else owns the global subscriber: fall back to a scoped one (subject to the
        // callsite-cache race above, the best `tracing` allows).
        let d = tracing::Dispatch::new(tracing_subscriber::registry().with(CaptureLayer));
        return tracing::dispatcher::with_default(&d, || with_sink(sink, f));
    }
    with_sink(sink, f)
}

fn with_sink<R>(sink: Sink, f: impl FnOnce() -> R) -> R {
    /// Restores the previous sink even if `f` unwinds.
    struct Restore(Option<Sink>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            SINK.with(|s| *s.borrow_mut() = prev);
        }
    }
    let _restore = Restore(SINK.with(|s| s.borrow_mut().replace(sink)));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callsite_first_reached_outside_any_capture_is_still_captured_later() {
        fn emit(n: u32) {
            tracing::trace!(target: "block", tracepoint = "t", "line {n}");
        }
        // Another thread, with no capture, reaches the callsite first.
        std::thread::spawn(|| emit(0)).join().unwrap();
        let lines: Lines = Arc::default();
        let exec: ExecCpu = Arc::new(AtomicI64::new(2));
        capture(&lines, &exec, Level::TRACE, || emit(1));
        emit(2); // outside: not captured
        assert_eq!(*lines.lock(), vec!["[002] line 1".to_owned()]);
    }

    #[test]
    fn nested_captures_restore_the_outer_sink() {
        let outer: Lines = Arc::default();
        let inner: Lines = Arc::default();
        let exec: ExecCpu = Arc::new(AtomicI64::new(-1));
        capture(&outer, &exec, Level::TRACE, || {
            tracing::debug!(target: "x", cpu = 1u64, "a");
            capture(
                &inner,
                &exec,
                Level::TRACE,
                || tracing::debug!(target: "x", "b"),
            );
            tracing::debug!(target: "x", "c");
        });
        assert_eq!(
            *outer.lock(),
            vec!["[001] a".to_owned(), "[   ] c".to_owned()]
        );
        assert_eq!(*inner.lock(), vec!["[   ] b".to_owned()]);
    }
}
