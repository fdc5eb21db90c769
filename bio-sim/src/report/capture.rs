//! Captures the kernel-named `tracing` events (`block_bio_complete`, `workqueue_execute_start`,
//! `cpuhp_enter`, ...) into a runtime's trace, so a deterministic run's trace shows what the
//! kernel model did inside each step.
//!
//! Why one process-wide subscriber and a thread-local sink, not a scoped `Dispatch` per run:
//! `tracing` caches each callsite's interest once per process, and while exactly one dispatcher
//! is registered it computes that interest from the *registering thread's* default
//! (tokio-rs/tracing#3611). A test thread without a subscriber that reaches
//! `bio_complete_defer` first caches "never", and a capturing run on another thread then loses
//! that line: CI saw exactly this. With [`layer()`] installed globally every callsite is
//! "sometimes" and the per-event check is a thread-local read.
//!
//! Why the capture layer filters *globally* for "inside a capture, or what its inner filter
//! enables": a layer's [`Layer::enabled`] decides for the whole subscriber, so a capture layer
//! answering only "is this thread capturing?" disabled every event outside a capture for every
//! other layer too (the `fmt` layer of [`crate::report::trace::init`] under `RUST_LOG`, a user's
//! own layer). A per-layer filter would hide nothing, but `tracing-subscriber` 0.3's registry
//! still builds an event unless *every one of its 64 filter slots* disabled it, so every event
//! everywhere would be built, formatted arguments and all. [`CaptureLayer`] therefore wraps the
//! filter of the rest of the subscriber: [`layer_or`] with the `RUST_LOG` filter (what
//! `trace::init` installs), [`layer()`] with "everything" beside a user's layers, and
//! `LevelFilter::OFF` alone (the subscriber [`capture`] installs on first use, where an event
//! outside a capture is never built). Its callsite interest stays "sometimes" unless the inner
//! filter always wants the callsite, so the fix above holds.
//!
//! Where events go:
//! - outside a capture: to the thread's subscriber as if biosim were not there (the global one's
//!   `fmt` or user layers, a user's scoped subscriber);
//! - inside a capture, when the thread's subscriber contains a [`CaptureLayer`] (the global one
//!   biosim installs, `trace::init`'s, or a user's that includes [`layer()`]): to the capture, and
//!   to that subscriber's other layers as their own filters decide;
//! - inside a capture on a thread whose subscriber has no capture layer (a user's own global or
//!   scoped subscriber): to the capture only, through one process-wide fallback dispatcher
//!   (subject to the callsite-cache race above, the best `tracing` allows).

use parking_lot::Mutex;
use std::any::TypeId;
use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{span, Dispatch, Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Identity, Layer};
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

/// Whether this thread is inside a [`capture`] that wants events of `level`.
fn sink_wants(level: &Level) -> bool {
    SINK.with(|s| s.borrow().as_ref().is_some_and(|sink| level <= &sink.level))
}

/// The layer that appends the events of a thread inside [`capture`] to that capture's lines.
/// As a filter it enables, for the whole subscriber, an event that a capture on its thread wants
/// *or* that its inner filter `F` enables, and it forwards the span callbacks to `F` (so an
/// `EnvFilter` with span directives works as the inner filter). Made by [`layer`], [`layer_or`].
#[derive(Debug, Clone)]
pub struct CaptureLayer<F = Identity> {
    inner: F,
}

/// What [`current_dispatch_captures`] asks a subscriber for: any [`CaptureLayer<F>`] answers it.
struct CaptureMarker;

/// The capture layer beside other layers of a user's subscriber: it hides nothing (every event is
/// enabled as far as it is concerned; the other layers' own filters decide the rest).
pub fn layer() -> CaptureLayer<Identity> {
    layer_or(Identity::new())
}

/// The capture layer as the subscriber's global filter: an event is built when a capture on its
/// thread wants it or when `filter` enables it (e.g. the `RUST_LOG` `EnvFilter`, which the other
/// layers then also use per layer so captures do not flood them).
pub fn layer_or<F>(filter: F) -> CaptureLayer<F> {
    CaptureLayer { inner: filter }
}

/// Whether the subscriber this thread dispatches to now contains a [`CaptureLayer`].
fn current_dispatch_captures() -> bool {
    tracing::dispatcher::get_default(|d| d.is::<CaptureMarker>())
}

/// Installs `registry + layer_or(OFF)` as the global subscriber unless one exists (at most one
/// attempt per process). Nothing else is in it, so its filter hides nothing from anyone.
fn ensure_global() {
    static TRIED: OnceLock<()> = OnceLock::new();
    TRIED.get_or_init(|| {
        let _ = tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(layer_or(LevelFilter::OFF)),
        );
    });
}

/// The dispatcher of captures on threads whose subscriber has no capture layer: made once, so
/// callsite interests are rebuilt once, not on every capture.
fn fallback_dispatch() -> &'static Dispatch {
    static FALLBACK: OnceLock<Dispatch> = OnceLock::new();
    FALLBACK.get_or_init(|| {
        Dispatch::new(tracing_subscriber::registry().with(layer_or(LevelFilter::OFF)))
    })
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

impl<S: Subscriber, F: Layer<S>> Layer<S> for CaptureLayer<F> {
    fn on_layer(&mut self, subscriber: &mut S) {
        self.inner.on_layer(subscriber);
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        // Whether a capture wants a callsite depends on the thread, so never cache "never"; only
        // a callsite the inner filter always wants is "always".
        let inner = self.inner.register_callsite(metadata);
        if inner.is_always() {
            inner
        } else {
            Interest::sometimes()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        sink_wants(metadata.level()) || self.inner.enabled(metadata, ctx)
    }

    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        sink_wants(event.metadata().level()) || self.inner.event_enabled(event, ctx)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        // A capture may want any level.
        Some(LevelFilter::TRACE)
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_new_span(attrs, id, ctx);
    }

    fn on_record(&self, span: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        self.inner.on_record(span, values, ctx);
    }

    fn on_follows_from(&self, span: &span::Id, follows: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_follows_from(span, follows, ctx);
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_exit(id, ctx);
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        self.inner.on_close(id, ctx);
    }

    fn on_id_change(&self, old: &span::Id, new: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_id_change(old, new, ctx);
    }

    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() || id == TypeId::of::<CaptureMarker>() {
            // `CaptureMarker` is a private zero-sized type, only ever asked for with `is`.
            Some(self as *const Self as *const ())
        } else {
            // SAFETY: forwarded as asked; the inner layer answers for its own types.
            unsafe { self.inner.downcast_raw(id) }
        }
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
///
/// The events also reach the other layers of the thread's subscriber when it contains
/// a [`CaptureLayer`]; when it does not (a user's own subscriber), they are captured through a
/// fallback dispatcher instead (see the module docs).
pub fn capture<R>(lines: &Lines, exec_cpu: &ExecCpu, level: Level, f: impl FnOnce() -> R) -> R {
    let sink = Sink {
        lines: Arc::clone(lines),
        exec_cpu: Arc::clone(exec_cpu),
        level,
    };
    if !current_dispatch_captures() {
        ensure_global();
        if !current_dispatch_captures() {
            return tracing::dispatcher::with_default(fallback_dispatch(), || with_sink(sink, f));
        }
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

    /// A user layer counting the events it sees.
    struct Counting(Arc<std::sync::atomic::AtomicUsize>);

    impl<S: Subscriber> Layer<S> for Counting {
        fn on_event(&self, _event: &Event<'_>, _ctx: Context<'_, S>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_users_scoped_subscriber_sees_events_outside_a_capture_and_captures_still_capture() {
        let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let user = tracing_subscriber::registry().with(Counting(Arc::clone(&seen)));
        let lines: Lines = Arc::default();
        let exec: ExecCpu = Arc::new(AtomicI64::new(0));
        tracing::subscriber::with_default(user, || {
            tracing::trace!(target: "block", "outside");
            capture(
                &lines,
                &exec,
                Level::TRACE,
                || tracing::trace!(target: "block", "inside"),
            );
        });
        assert_eq!(
            seen.load(Ordering::Relaxed),
            1,
            "the user's layer saw the event outside"
        );
        assert_eq!(*lines.lock(), vec!["[000] inside".to_owned()]);
    }

    #[test]
    fn beside_other_layers_the_capture_hides_nothing_and_alone_it_builds_nothing_outside() {
        let built = std::sync::atomic::AtomicUsize::new(0);
        let arg = || {
            built.fetch_add(1, Ordering::Relaxed);
            0
        };
        let lines: Lines = Arc::default();
        let exec: ExecCpu = Arc::new(AtomicI64::new(1));
        // The capture layer alone: an event outside a capture is not even built.
        let alone = tracing_subscriber::registry().with(layer_or(LevelFilter::OFF));
        tracing::subscriber::with_default(alone, || {
            tracing::trace!(target: "block", "outside {}", arg());
            capture(
                &lines,
                &exec,
                Level::TRACE,
                || tracing::trace!(target: "block", "inside {}", arg()),
            );
        });
        assert_eq!(
            built.load(Ordering::Relaxed),
            1,
            "only the captured event was built"
        );
        assert_eq!(*lines.lock(), vec!["[001] inside 0".to_owned()]);
        // Beside a user's layer: that layer sees both events, the capture still only its own.
        let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let both = tracing_subscriber::registry()
            .with(layer())
            .with(Counting(Arc::clone(&seen)));
        lines.lock().clear();
        tracing::subscriber::with_default(both, || {
            tracing::trace!(target: "block", "outside");
            capture(
                &lines,
                &exec,
                Level::TRACE,
                || tracing::trace!(target: "block", "inside"),
            );
        });
        assert_eq!(seen.load(Ordering::Relaxed), 2);
        assert_eq!(*lines.lock(), vec!["[001] inside".to_owned()]);
    }

    #[test]
    fn as_trace_init_composes_it_the_users_filter_decides_outside_and_the_capture_inside() {
        let built = std::sync::atomic::AtomicUsize::new(0);
        let arg = || {
            built.fetch_add(1, Ordering::Relaxed);
            0
        };
        let filter = || {
            "block=trace"
                .parse::<tracing_subscriber::filter::Targets>()
                .unwrap()
        };
        let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let sub = tracing_subscriber::registry()
            .with(layer_or(filter()))
            .with(Counting(Arc::clone(&seen)).with_filter(filter()));
        let lines: Lines = Arc::default();
        let exec: ExecCpu = Arc::new(AtomicI64::new(3));
        tracing::subscriber::with_default(sub, || {
            tracing::trace!(target: "block", "wanted {}", arg());
            tracing::trace!(target: "workqueue", "unwanted {}", arg());
            capture(
                &lines,
                &exec,
                Level::TRACE,
                || tracing::trace!(target: "workqueue", "captured {}", arg()),
            );
        });
        assert_eq!(
            built.load(Ordering::Relaxed),
            2,
            "the unwanted event was not built"
        );
        assert_eq!(
            seen.load(Ordering::Relaxed),
            1,
            "the user's layer saw its target only"
        );
        assert_eq!(*lines.lock(), vec!["[003] captured 0".to_owned()]);
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
