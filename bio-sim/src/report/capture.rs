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

use crate::report::ftrace::record::{TraceRecord, IDLE_COMM, NO_FLAGS};
use parking_lot::Mutex;
use std::any::TypeId;
use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{span, Dispatch, Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Identity, Layer};
use tracing_subscriber::prelude::*;

/// The records a capture appends to.
pub type Lines = Arc<Mutex<Vec<TraceRecord>>>;

/// The CPU whose context is executing, as the runtime sets it (`-1`: none, e.g. a tick): the
/// CPU column of an event that does not name its own `exec_cpu`.
pub type ExecCpu = Arc<AtomicI64>;

/// What the runtime knows of the moment an event fires: its clock and the task each CPU runs.
/// Used for every context column an event leaves out (`comm`, `pid`) and for the timestamp.
pub trait CaptureContext {
    /// The timestamp of the next record, in µs since the run started (never decreasing).
    fn now_us(&self) -> u64;
    /// `(comm, pid)` of what runs on `cpu` now (`None`: no CPU known).
    fn task(&self, cpu: Option<u32>) -> (String, u32);
}

/// The threaded runtime's clock: monotonic time since the run started; every CPU shows the idle
/// task unless the event names its own.
#[derive(Debug)]
pub struct Monotonic {
    start: std::time::Instant,
    last: Cell<u64>,
}

impl Monotonic {
    /// A clock started at `start` (the run's start, shared by the runtime's threads).
    pub fn since(start: std::time::Instant) -> Self {
        Self {
            start,
            last: Cell::new(0),
        }
    }
}

impl CaptureContext for Monotonic {
    fn now_us(&self) -> u64 {
        let t = (self.start.elapsed().as_micros() as u64).max(self.last.get());
        self.last.set(t);
        t
    }

    fn task(&self, _cpu: Option<u32>) -> (String, u32) {
        (IDLE_COMM.to_owned(), 0)
    }
}

/// Where this thread's events go while a capture is active.
struct Sink {
    lines: Lines,
    exec_cpu: ExecCpu,
    level: Level,
    context: Rc<dyn CaptureContext>,
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

/// Collects the message, the `tracepoint` name, the context fields (`exec_cpu`, `comm`, `pid`,
/// `flags`), the `cpu` field, and the other fields as ` key=value`. Events that carry a
/// `tracepoint` field already format everything into their message (biosim's own convention),
/// so their other fields are left out.
#[derive(Default)]
struct MessageVisitor {
    message: String,
    fields: String,
    cpu: Option<u64>,
    tracepoint: Option<String>,
    exec_cpu: Option<u64>,
    comm: Option<String>,
    pid: Option<u64>,
    flags: Option<String>,
    bio: Option<u64>,
}

impl MessageVisitor {
    /// A context or name field given as text; false for any other field.
    fn text(&mut self, name: &str, value: &str) -> bool {
        let slot = match name {
            "tracepoint" => &mut self.tracepoint,
            "comm" => &mut self.comm,
            "flags" => &mut self.flags,
            "exec_cpu" | "pid" | "cpu" | "bio" => {
                let Ok(n) = value.parse::<u64>() else {
                    return false;
                };
                return self.number(name, n);
            }
            _ => return false,
        };
        *slot = Some(value.to_owned());
        true
    }

    /// A context field given as a number; false for any other field.
    fn number(&mut self, name: &str, value: u64) -> bool {
        let slot = match name {
            "exec_cpu" => &mut self.exec_cpu,
            "pid" => &mut self.pid,
            "cpu" => &mut self.cpu,
            "bio" => &mut self.bio,
            _ => return false,
        };
        *slot = Some(value);
        true
    }
}

impl Visit for MessageVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        match field.name() {
            "message" => self.message.push_str(&text),
            name => {
                // `comm = "x"` arrives here quoted when given as a Debug value.
                let bare = text
                    .strip_prefix('"')
                    .and_then(|t| t.strip_suffix('"'))
                    .unwrap_or(&text);
                if !self.text(name, bare) {
                    let _ = write!(self.fields, " {name}={text}");
                }
            }
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if !self.number(field.name(), value) {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if value < 0 || !self.number(field.name(), value as u64) {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message.push_str(value),
            name => {
                if !self.text(name, value) {
                    let _ = write!(self.fields, " {name}={value}");
                }
            }
        }
    }
}

/// Whether `s` is a tracepoint-like name (`cpuhp_enter`, `biosim_cpuhp_op`: lower case, with an
/// underscore, so a report's `biosim: livelock: ...` is not one).
fn is_event_name(s: &str) -> bool {
    s.contains('_')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl MessageVisitor {
    /// The record of this event: the context columns from its own fields, else from the runtime
    /// (`exec_cpu`, `context`), else the event's `cpu` and `<idle>`/0/`.....`.
    fn into_record(self, level: Level, exec_cpu: i64, context: &dyn CaptureContext) -> TraceRecord {
        let runtime_cpu = u64::try_from(exec_cpu).ok();
        let column = self.exec_cpu.or(runtime_cpu).or(self.cpu);
        let column32 = column.and_then(|c| u32::try_from(c).ok());
        let (event, fields) = match &self.tracepoint {
            // The message is `event: fields`; one that is not keeps its whole text as the fields.
            Some(tp) => {
                let fields = match self.message.strip_prefix(tp.as_str()) {
                    Some("") => "",
                    Some(rest) => rest.strip_prefix(": ").unwrap_or(&self.message),
                    None => &self.message,
                };
                (tp.clone(), fields.to_owned())
            }
            // No `tracepoint` field: a message that is a name (`cpuhp_enter`, optionally followed
            // by `: text`) names the event, with the other fields as `key=value`; any other
            // message is a marker: `biosim_report` for a warning or error (a kernel splat, a
            // livelock report), `biosim_log` for any other log line.
            None => {
                let mut extra = self.fields.clone();
                if let (Some(own), Some(col)) = (self.cpu, column) {
                    if own != col {
                        let _ = write!(extra, " cpu={own}");
                    }
                }
                let (name, rest) = match self.message.split_once(": ") {
                    Some((n, r)) if is_event_name(n) => (n, r),
                    _ => (self.message.as_str(), ""),
                };
                if is_event_name(name) {
                    let text = format!("{rest}{extra}");
                    (name.to_owned(), text.trim_start().to_owned())
                } else {
                    let name = if level <= Level::WARN {
                        "biosim_report"
                    } else {
                        "biosim_log"
                    };
                    (name.to_owned(), format!("{}{extra}", self.message))
                }
            }
        };
        // The step-by-step trace's text, as biosim has always printed it: the message, the
        // other fields and the event's own CPU where the column shows another, for an event
        // without a `tracepoint` field (a tracepoint's message names its CPU as the kernel
        // does, `cpuhp_enter: cpu: 0001 ...`).
        let mut text = self.message.clone();
        if self.tracepoint.is_none() {
            text.push_str(&self.fields);
            if let (Some(own), Some(col)) = (self.cpu, column) {
                if own != col {
                    let _ = write!(text, " cpu={own}");
                }
            }
        }
        let (comm, pid) = match (self.comm, self.pid) {
            (Some(c), Some(p)) => (c, p),
            (c, p) => {
                let (rc, rp) = context.task(column32);
                (c.unwrap_or(rc), p.unwrap_or(u64::from(rp)))
            }
        };
        TraceRecord {
            ts_us: context.now_us(),
            cpu: column32,
            comm,
            pid: u32::try_from(pid).unwrap_or(u32::MAX),
            flags: self.flags.unwrap_or_else(|| NO_FLAGS.to_owned()),
            event,
            fields,
            bio: self.bio,
            text: Some(text),
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
            let rec = v.into_record(*event.metadata().level(), exec, &*sink.context);
            sink.lines.lock().push(rec);
        });
    }
}

/// Runs `f` with every event of this thread at or above `level` appended to `lines` as a
/// [`TraceRecord`], with `exec_cpu` as the CPU column and `context` for the timestamp and the
/// task of any event that does not name its own. Nests: the outer capture resumes when `f`
/// returns.
///
/// The events also reach the other layers of the thread's subscriber when it contains
/// a [`CaptureLayer`]; when it does not (a user's own subscriber), they are captured through a
/// fallback dispatcher instead (see the module docs).
pub fn capture<R>(
    lines: &Lines,
    exec_cpu: &ExecCpu,
    level: Level,
    context: Rc<dyn CaptureContext>,
    f: impl FnOnce() -> R,
) -> R {
    let sink = Sink {
        lines: Arc::clone(lines),
        exec_cpu: Arc::clone(exec_cpu),
        level,
        context,
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

    fn cx() -> Rc<dyn CaptureContext> {
        Rc::new(Monotonic::since(std::time::Instant::now()))
    }

    /// The captured records as the human-readable trace prints them.
    fn human(lines: &Lines) -> Vec<String> {
        lines.lock().iter().map(TraceRecord::human).collect()
    }

    #[test]
    fn a_callsite_first_reached_outside_any_capture_is_still_captured_later() {
        fn emit(n: u32) {
            tracing::trace!(target: "block", tracepoint = "t", "line {n}");
        }
        // Another thread, with no capture, reaches the callsite first.
        std::thread::spawn(|| emit(0)).join().unwrap();
        let lines: Lines = Arc::default();
        let exec: ExecCpu = Arc::new(AtomicI64::new(2));
        capture(&lines, &exec, Level::TRACE, cx(), || emit(1));
        emit(2); // outside: not captured
        assert_eq!(human(&lines), vec!["[002] line 1".to_owned()]);
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
                cx(),
                || tracing::trace!(target: "block", "inside"),
            );
        });
        assert_eq!(
            seen.load(Ordering::Relaxed),
            1,
            "the user's layer saw the event outside"
        );
        assert_eq!(human(&lines), vec!["[000] inside".to_owned()]);
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
                cx(),
                || tracing::trace!(target: "block", "inside {}", arg()),
            );
        });
        assert_eq!(
            built.load(Ordering::Relaxed),
            1,
            "only the captured event was built"
        );
        assert_eq!(human(&lines), vec!["[001] inside 0".to_owned()]);
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
                cx(),
                || tracing::trace!(target: "block", "inside"),
            );
        });
        assert_eq!(seen.load(Ordering::Relaxed), 2);
        assert_eq!(human(&lines), vec!["[001] inside".to_owned()]);
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
                cx(),
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
        assert_eq!(human(&lines), vec!["[003] captured 0".to_owned()]);
    }

    #[test]
    fn nested_captures_restore_the_outer_sink() {
        let outer: Lines = Arc::default();
        let inner: Lines = Arc::default();
        let exec: ExecCpu = Arc::new(AtomicI64::new(-1));
        capture(&outer, &exec, Level::TRACE, cx(), || {
            tracing::debug!(target: "x", cpu = 1u64, "a");
            capture(
                &inner,
                &exec,
                Level::TRACE,
                cx(),
                || tracing::debug!(target: "x", "b"),
            );
            tracing::debug!(target: "x", "c");
        });
        assert_eq!(
            human(&outer),
            vec!["[001] a".to_owned(), "[   ] c".to_owned()]
        );
        assert_eq!(human(&inner), vec!["[   ] b".to_owned()]);
    }

    /// A runtime context that says CPU n runs `task/n` (pid 10 + n) and counts time by 5 µs.
    struct Fixed(Cell<u64>);

    impl CaptureContext for Fixed {
        fn now_us(&self) -> u64 {
            self.0.set(self.0.get() + 5);
            self.0.get()
        }
        fn task(&self, cpu: Option<u32>) -> (String, u32) {
            cpu.map_or((IDLE_COMM.to_owned(), 0), |c| (format!("task/{c}"), 10 + c))
        }
    }

    #[test]
    fn context_fields_win_over_the_runtimes_and_the_message_loses_its_event_prefix() {
        let lines: Lines = Arc::default();
        let exec: ExecCpu = Arc::new(AtomicI64::new(1));
        capture(
            &lines,
            &exec,
            Level::TRACE,
            Rc::new(Fixed(Cell::new(0))),
            || {
                tracing::trace!(target: "cpuhp", tracepoint = "cpuhp_exit", cpu = 1u64,
                "cpuhp_exit:  cpu: 0001  state: 234 step: 235 ret: 0");
                tracing::trace!(target: "workqueue", tracepoint = "workqueue_execute_start",
                exec_cpu = 0u64, comm = "kworker/0:1", pid = 301u64, flags = "d.h1.",
                "workqueue_execute_start: work struct 0000000000000001: function f");
                tracing::debug!(target: "cpuhp", cpu = 0u64, op = "cpu_down", "biosim_cpuhp_op");
            },
        );
        let r = lines.lock().clone();
        assert_eq!(
            (
                r[0].cpu,
                r[0].comm.as_str(),
                r[0].pid,
                r[0].flags.as_str(),
                r[0].ts_us
            ),
            (Some(1), "task/1", 11, ".....", 5)
        );
        assert_eq!(r[0].event, "cpuhp_exit");
        assert_eq!(r[0].fields, " cpu: 0001  state: 234 step: 235 ret: 0");
        assert_eq!(
            (r[1].cpu, r[1].comm.as_str(), r[1].pid, r[1].flags.as_str()),
            (Some(0), "kworker/0:1", 301, "d.h1.")
        );
        assert_eq!(r[1].fields, "work struct 0000000000000001: function f");
        // No tracepoint field: the name is the message, the fields `key=value`, and the event's
        // own CPU is kept where the column shows another.
        assert_eq!(r[2].human(), "[001] biosim_cpuhp_op op=cpu_down cpu=0");
        assert_eq!(
            (r[2].event.as_str(), r[2].fields.as_str()),
            ("biosim_cpuhp_op", "op=cpu_down cpu=0")
        );
        assert_eq!(r[2].ts_us, 15);
    }

    #[test]
    fn the_threaded_runtimes_clock_counts_from_the_start_and_never_goes_back() {
        let start = std::time::Instant::now() - std::time::Duration::from_millis(5);
        let clock = Monotonic::since(start);
        let a = clock.now_us();
        let b = clock.now_us();
        assert!(a >= 5_000 && b >= a, "{a} {b}");
        assert_eq!(clock.task(Some(1)), (IDLE_COMM.to_owned(), 0));
    }
}
