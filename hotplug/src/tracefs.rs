//! The text of a tracefs `trace` file (kernel/trace/trace_output.c): parsing the lines the live
//! kernel prints and the cpuhp events of include/trace/events/cpuhp.h in them, and a recorder
//! that renders the model's `tracing` tracepoints as the same lines, so a run of the model can
//! be compared with a recording of the kernel (`tests/live_traces.rs`, bio-core's boot-table
//! test).
//!
//! Line grammar (the default `trace` output without the header): `TASK-PID [CPU] FLAGS
//! TIMESTAMP: EVENT: FIELDS`, with `TASK` right-aligned in 16 columns, `PID` left-aligned in 7,
//! `CPU` three digits, `FLAGS` five characters.

use std::fmt;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span;
use tracing::{Event, Metadata, Subscriber};

/// One line of a tracefs `trace` file, as `print_trace_fmt()` → `trace_print_context()` and
/// `trace_print_lat_fmt()` print it with the default options:
///
/// ```text
///      kworker/0:2-15074   [000] .....  1086.770677: cpuhp_enter: cpu: 0001 target: 144 step: 236 (cpuhp_kick_ap_work)
/// ```
///
/// `comm` right-aligned in 16 columns, `-`, the pid left-aligned in 7, `[CPU]` as three digits,
/// the five flag characters, the timestamp as `%5lu.%06lu`, `: `, the event name, `: `, and the
/// fields exactly as the event's `print fmt` rendered them (which may start or end with a space:
/// `cpuhp_exit`'s and `workqueue_activate_work`'s do). The comm may contain `-` and spaces; the
/// pid is the digits after its last `-`. This is the one line grammar of the workspace: bio-sim's
/// ftrace writer prints through its `Display`, the live-kernel calibrations parse with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceLine {
    /// `current->comm` of the task the event fired in (`<idle>` for pid 0).
    pub comm: String,
    /// `current->pid`.
    pub pid: u32,
    /// The CPU column.
    pub cpu: u32,
    /// The five flag characters of `trace_print_lat_fmt()` (irqs-off/BH, need-resched,
    /// hardirq/softirq, preempt depth, migrate-disable).
    pub flags: String,
    /// Seconds of the timestamp.
    pub secs: u64,
    /// Microseconds of the timestamp (0..1,000,000).
    pub usecs: u32,
    /// The event name (`cpuhp_enter`, `tracing_mark_write`, ...).
    pub event: String,
    /// What follows `EVENT: `, verbatim.
    pub fields: String,
}

/// A line that does not follow the grammar, with the part that did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a tracefs trace line ({reason}): {line:?}")]
pub struct ParseError {
    /// The offending line.
    pub line: String,
    /// What part did not parse.
    pub reason: &'static str,
}

fn perr(line: &str, reason: &'static str) -> ParseError {
    ParseError {
        line: line.to_owned(),
        reason,
    }
}

/// The characters each of the five flag columns may show (`trace_print_lat_fmt()`): irqs-off/BH
/// `D d b X`; need-resched `B N L b n p l` (the lazy and preempt-resched combinations included);
/// hardirq/softirq `Z z H h s`; the preempt depth and the migrate-disable count as one hex digit
/// each (`%x`).
const FLAG_COLUMNS: [&str; 5] = [
    ".dDbX",
    ".BNLbnpl",
    ".hHszZ",
    ".0123456789abcdef",
    ".0123456789abcdef",
];

impl TraceLine {
    /// Parses one event line (not a `#` header line, without its newline).
    pub fn parse(line: &str) -> Result<Self, ParseError> {
        // The CPU column is the first ` [` after the task: a comm may contain brackets only
        // after that, never a space followed by one before the pid.
        let open = line.find(" [").ok_or_else(|| perr(line, "no [CPU]"))?;
        let (task, rest) = line.split_at(open);
        let task = task.trim_start();
        let dash = task.rfind('-').ok_or_else(|| perr(line, "no TASK-PID"))?;
        let comm = &task[..dash];
        let pid_str = task[dash + 1..].trim_end();
        if comm.is_empty() || pid_str.is_empty() || !pid_str.bytes().all(|b| b.is_ascii_digit()) {
            return Err(perr(line, "TASK-PID"));
        }
        let pid = pid_str.parse().map_err(|_| perr(line, "pid"))?;
        let rest = &rest[2..];
        let close = rest.find("] ").ok_or_else(|| perr(line, "[CPU]"))?;
        let cpu_str = &rest[..close];
        if cpu_str.len() < 3 || !cpu_str.bytes().all(|b| b.is_ascii_digit()) {
            return Err(perr(line, "CPU"));
        }
        let cpu = cpu_str.parse().map_err(|_| perr(line, "CPU"))?;
        let rest = &rest[close + 2..];
        let flags: String = rest.chars().take(5).collect();
        if flags.len() != 5
            || !flags
                .chars()
                .zip(FLAG_COLUMNS)
                .all(|(c, allowed)| allowed.contains(c))
        {
            return Err(perr(line, "FLAGS"));
        }
        let rest = rest[5..]
            .strip_prefix(' ')
            .ok_or_else(|| perr(line, "FLAGS"))?;
        let colon = rest.find(": ").ok_or_else(|| perr(line, "TIMESTAMP"))?;
        let ts = rest[..colon].trim_start();
        let (s, us) = ts.split_once('.').ok_or_else(|| perr(line, "TIMESTAMP"))?;
        if s.is_empty() || us.len() != 6 || !s.bytes().chain(us.bytes()).all(|b| b.is_ascii_digit())
        {
            return Err(perr(line, "TIMESTAMP"));
        }
        let rest = &rest[colon + 2..];
        let colon = rest.find(':').ok_or_else(|| perr(line, "event name"))?;
        let event = &rest[..colon];
        if event.is_empty()
            || !event
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(perr(line, "event name"));
        }
        // One space follows the colon; a print fmt may start with more (cpuhp_exit's does).
        let fields = rest[colon + 1..]
            .strip_prefix(' ')
            .unwrap_or(&rest[colon + 1..]);
        Ok(TraceLine {
            comm: comm.to_owned(),
            pid,
            cpu,
            flags,
            secs: s.parse().map_err(|_| perr(line, "TIMESTAMP"))?,
            usecs: us.parse().map_err(|_| perr(line, "TIMESTAMP"))?,
            event: event.to_owned(),
            fields: fields.to_owned(),
        })
    }

    /// The timestamp in microseconds.
    pub fn micros(&self) -> u64 {
        self.secs * 1_000_000 + u64::from(self.usecs)
    }

    /// The cpuhp event of this line, if it is one.
    pub fn cpuhp(&self) -> Option<Result<CpuhpEvent, ParseError>> {
        CpuhpEvent::parse(&self.event, &self.fields)
    }
}

impl fmt::Display for TraceLine {
    /// The line as tracefs prints it (`%16s-%-7d [%03d] %s %5lu.%06lu: %s: %s`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>16}-{:<7} [{:03}] {} {:5}.{:06}: {}: {}",
            self.comm,
            self.pid,
            self.cpu,
            self.flags,
            self.secs,
            self.usecs,
            self.event,
            self.fields
        )
    }
}

/// A cpuhp tracepoint's fields, parsed from its print fmt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuhpEvent {
    /// `cpuhp_enter` (`multi: false`) or `cpuhp_multi_enter` (`multi: true`):
    /// `cpu: %04u target: %3d step: %3d (%ps)`.
    Enter {
        /// Which of the two.
        multi: bool,
        /// The hotplugged CPU.
        cpu: u32,
        /// `st->target`.
        target: i32,
        /// The state whose callback runs.
        step: i32,
        /// The callback's function name.
        fun: String,
    },
    /// `cpuhp_exit`: ` cpu: %04u  state: %3d step: %3d ret: %d`.
    Exit {
        /// The hotplugged CPU.
        cpu: u32,
        /// `st->state` after the call.
        state: i32,
        /// The state whose callback ran.
        step: i32,
        /// What it returned.
        ret: i32,
    },
}

impl CpuhpEvent {
    /// Parses the fields of a cpuhp event; `None` for another event.
    pub fn parse(event: &str, fields: &str) -> Option<Result<Self, ParseError>> {
        let multi = match event {
            "cpuhp_enter" => false,
            "cpuhp_multi_enter" => true,
            "cpuhp_exit" => return Some(Self::parse_exit(fields)),
            _ => return None,
        };
        Some(Self::parse_enter(multi, fields))
    }

    fn parse_enter(multi: bool, fields: &str) -> Result<Self, ParseError> {
        let bad = |r| perr(fields, r);
        let open = fields.find(" (").ok_or_else(|| bad("no (%ps)"))?;
        let fun = fields[open + 2..]
            .strip_suffix(')')
            .ok_or_else(|| bad("no ')'"))?
            .to_owned();
        let n = numbers(&fields[..open], &["cpu:", "target:", "step:"])
            .ok_or_else(|| bad("expected 'cpu: %04u target: %3d step: %3d'"))?;
        Ok(CpuhpEvent::Enter {
            multi,
            cpu: n[0] as u32,
            target: n[1],
            step: n[2],
            fun,
        })
    }

    fn parse_exit(fields: &str) -> Result<Self, ParseError> {
        let n = numbers(fields, &["cpu:", "state:", "step:", "ret:"]).ok_or_else(|| {
            perr(
                fields,
                "expected ' cpu: %04u  state: %3d step: %3d ret: %d'",
            )
        })?;
        Ok(CpuhpEvent::Exit {
            cpu: n[0] as u32,
            state: n[1],
            step: n[2],
            ret: n[3],
        })
    }

    /// The step of the event.
    pub fn step(&self) -> i32 {
        match self {
            CpuhpEvent::Enter { step, .. } | CpuhpEvent::Exit { step, .. } => *step,
        }
    }
}

/// `label value label value ...` with exactly the labels given, in order.
fn numbers(text: &str, labels: &[&str]) -> Option<Vec<i32>> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() != labels.len() * 2 {
        return None;
    }
    labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if words[2 * i] != *l {
                return None;
            }
            words[2 * i + 1].parse().ok()
        })
        .collect()
}

/// A `tracing` subscriber that renders the tracepoint events (those with a `tracepoint` field)
/// as tracefs lines, with a counter as timestamp; `biosim_*` annotations become
/// `tracing_mark_write` lines as the ftrace writer prints them. Missing context fields default
/// to `<idle>-0`, `.....` and the event's `cpu` field, as the interface says. For tests: use
/// [`record`].
#[derive(Debug, Default, Clone)]
pub struct Recorder {
    lines: Arc<Mutex<Vec<TraceLine>>>,
}

impl Recorder {
    /// The lines recorded so far.
    pub fn lines(&self) -> Vec<TraceLine> {
        self.lines.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

#[derive(Default)]
struct Fields {
    tracepoint: Option<String>,
    message: Option<String>,
    comm: Option<String>,
    flags: Option<String>,
    pid: Option<u64>,
    exec_cpu: Option<u64>,
    cpu: Option<u64>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "tracepoint" => self.tracepoint = Some(value.to_owned()),
            "comm" => self.comm = Some(value.to_owned()),
            "flags" => self.flags = Some(value.to_owned()),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "pid" => self.pid = Some(value),
            "exec_cpu" => self.exec_cpu = Some(value),
            "cpu" => self.cpu = Some(value),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => self.message = Some(format!("{value:?}")),
            "comm" => self.comm = Some(format!("{value}", value = DebugAsDisplay(value))),
            "tracepoint" => self.tracepoint = Some(format!("{value:?}").trim_matches('"').into()),
            "flags" => self.flags = Some(format!("{value:?}").trim_matches('"').into()),
            _ => {}
        }
    }
}

struct DebugAsDisplay<'a>(&'a dyn fmt::Debug);

impl fmt::Display for DebugAsDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = format!("{:?}", self.0);
        f.write_str(s.trim_matches('"'))
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let (Some(tp), Some(msg)) = (f.tracepoint, f.message) else {
            return;
        };
        let (event_name, fields) = if tp.starts_with("biosim_") {
            ("tracing_mark_write".to_owned(), msg)
        } else {
            match msg.split_once(": ") {
                Some((e, rest)) => (e.to_owned(), rest.to_owned()),
                None => (tp, msg),
            }
        };
        let Ok(mut lines) = self.lines.lock() else {
            return;
        };
        let n = lines.len() + 1;
        lines.push(TraceLine {
            comm: f.comm.unwrap_or_else(|| "<idle>".to_owned()),
            pid: f.pid.unwrap_or(0) as u32,
            cpu: f.exec_cpu.or(f.cpu).unwrap_or(0) as u32,
            flags: f.flags.unwrap_or_else(|| ".....".to_owned()),
            secs: (n / 1_000_000) as u64,
            usecs: (n % 1_000_000) as u32,
            event: event_name,
            fields,
        });
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

thread_local! {
    /// The recorder of this thread's [`record`], if one is running.
    static SINK: std::cell::RefCell<Option<Recorder>> = const { std::cell::RefCell::new(None) };
}

/// The process-wide subscriber [`record`] installs: it hands each event to the recorder of the
/// thread it fires on. Why not a scoped `with_default` per call: `tracing` caches each callsite's
/// interest once per process, computed from the *registering thread's* subscriber while one
/// dispatcher exists (tokio-rs/tracing#3611), so a parallel test thread without a recorder that
/// reaches a tracepoint first caches "never" and a recording loses the event. This one answers
/// "sometimes" for every callsite and decides per event.
struct Router;

impl Subscriber for Router {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }

    fn enabled(&self, _: &Metadata<'_>) -> bool {
        SINK.with(|s| s.borrow().is_some())
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        SINK.with(|s| {
            if let Some(rec) = s.borrow().as_ref() {
                rec.event(event);
            }
        });
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

/// Runs `f` with a [`Recorder`] receiving this thread's tracepoints and returns what it returned
/// and the tracefs lines of the tracepoints it fired. The first call installs `Router` as the
/// global subscriber; where another global subscriber already exists, it falls back to a scoped
/// one (subject to the callsite-cache race above).
pub fn record<R>(f: impl FnOnce() -> R) -> (R, Vec<TraceLine>) {
    static ROUTER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let routed = *ROUTER.get_or_init(|| tracing::subscriber::set_global_default(Router).is_ok());
    let rec = Recorder::default();
    if !routed {
        let r = tracing::subscriber::with_default(rec.clone(), f);
        return (r, rec.lines());
    }
    /// Clears the thread's sink however `f` ends (an unwinding test assertion too).
    struct Clear(Option<Recorder>);
    impl Drop for Clear {
        fn drop(&mut self) {
            SINK.with(|s| *s.borrow_mut() = self.0.take());
        }
    }
    let prev = SINK.with(|s| s.borrow_mut().replace(rec.clone()));
    let _clear = Clear(prev);
    let r = f();
    (r, rec.lines())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_live_kernels_lines() {
        let l = TraceLine::parse(
            "     kworker/0:2-15074   [000] .....  1044.354725: cpuhp_exit:  cpu: 0001  state: 234 step: 235 ret: 0",
        )
        .unwrap();
        assert_eq!((l.comm.as_str(), l.pid, l.cpu), ("kworker/0:2", 15074, 0));
        assert_eq!(l.flags, ".....");
        assert_eq!((l.secs, l.usecs), (1044, 354_725));
        assert_eq!(l.event, "cpuhp_exit");
        assert_eq!(
            l.cpuhp().unwrap().unwrap(),
            CpuhpEvent::Exit {
                cpu: 1,
                state: 234,
                step: 235,
                ret: 0
            }
        );
        let l = TraceLine::parse(
            "              sh-23638   [000] .N...  1044.570738: cpuhp_multi_enter: cpu: 0001 target: 236 step:  54 (trace_rb_cpu_prepare)",
        )
        .unwrap();
        assert_eq!(l.flags, ".N...");
        assert_eq!(
            l.cpuhp().unwrap().unwrap(),
            CpuhpEvent::Enter {
                multi: true,
                cpu: 1,
                target: 236,
                step: 54,
                fun: "trace_rb_cpu_prepare".into()
            }
        );
        // The rendering gives back the line.
        let text = "         cpuhp/1-20      [001] .....  1044.354724: cpuhp_exit:  cpu: 0001  state: 234 step: 235 ret: -11";
        assert_eq!(TraceLine::parse(text).unwrap().to_string(), text);
    }

    #[test]
    fn rejects_what_is_not_a_trace_line() {
        for bad in [
            "",
            "# tracer: nop",
            "sh-1 [000] ..... 1.0 cpuhp_enter",
            "sh-x [000] .....  1.000000: cpuhp_enter: cpu: 0001 target: 1 step: 1 (f)",
        ] {
            assert!(TraceLine::parse(bad).is_err(), "{bad:?}");
        }
        let l = TraceLine::parse("sh-1 [000] .....  1.000000: cpuhp_exit:  cpu: 0001 state: 1")
            .unwrap();
        assert!(l.cpuhp().unwrap().is_err());
        let l = TraceLine::parse("sh-1 [000] .....  1.000000: cpuhp_enter: cpu: 0001 target: 1")
            .unwrap();
        assert!(l.cpuhp().unwrap().is_err());
    }
}
