//! One captured trace event with its ftrace context, as `trace_print_context()`
//! (kernel/trace/trace_output.c) needs it: the task, the CPU, the flags and the timestamp, then the
//! event's name and the fields its `print fmt` rendered. biosim's own events (`biosim_*`, what the
//! kernel has no tracepoint for) are written the way `tracing_mark_write()` (kernel/trace/trace.c,
//! the `trace_marker` file) writes a user's text: `tracing_mark_write: biosim_x: text`.

use super::line::TraceLine;

/// The comm ftrace prints for pid 0 (`trace_find_cmdline()`: `<idle>`, whatever the swapper's
/// own comm `swapper/N`).
pub const IDLE_COMM: &str = "<idle>";

/// The writer task of the scenario driver (the `echo` to sysfs, the `cpu_up()` caller): `biosim`,
/// pid 999, on the control CPU (the interface of issue 10).
pub const WRITER_COMM: &str = "biosim";
/// Its pid.
pub const WRITER_PID: u32 = 999;

/// The kernel's event for a `trace_marker` write (`ftrace/print`, printed as `tracing_mark_write`).
pub const MARKER_EVENT: &str = "tracing_mark_write";

/// The flags column when nothing says otherwise: irqs on, no resched, task context, preempt 0.
pub const NO_FLAGS: &str = ".....";

/// One event of a run's trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRecord {
    /// Microseconds since the run's clock started (the deterministic runtime: `jiffies / HZ`
    /// plus one µs per event within a jiffy).
    pub ts_us: u64,
    /// The CPU column (`None`: nothing names one; written as CPU 0, the boot CPU, which is never
    /// offline).
    pub cpu: Option<u32>,
    /// `current->comm` (for pid 0 the writer prints `<idle>`).
    pub comm: String,
    /// `current->pid`.
    pub pid: u32,
    /// The five flag characters of `trace_print_lat_fmt()`.
    pub flags: String,
    /// The tracepoint (`cpuhp_enter`, ..., or `biosim_<name>` for biosim's own).
    pub event: String,
    /// The text after `event: `.
    pub fields: String,
    /// The bio the event is about (its `bio` field), for the timeline's flows; not printed.
    pub bio: Option<u64>,
    /// The event as biosim's step-by-step trace shows it: its message, and for an event without
    /// a `tracepoint` field its other fields as `key=value` (`None`: `event: fields`).
    pub text: Option<String>,
}

impl TraceRecord {
    /// Whether this is biosim's own event (written as a `trace_marker` line).
    pub fn is_marker(&self) -> bool {
        self.event.starts_with("biosim_")
    }

    /// The tracefs line: `biosim_*` events as `tracing_mark_write: biosim_x: text`, pid 0 as
    /// `<idle>`.
    pub fn line(&self) -> TraceLine {
        let (event, fields) = if self.is_marker() {
            (
                MARKER_EVENT.to_owned(),
                format!("{}: {}", self.event, self.fields),
            )
        } else {
            (self.event.clone(), self.fields.clone())
        };
        TraceLine {
            comm: if self.pid == 0 {
                IDLE_COMM.to_owned()
            } else {
                self.comm.clone()
            },
            pid: self.pid,
            cpu: self.cpu.unwrap_or(0),
            flags: self.flags.clone(),
            secs: self.ts_us / 1_000_000,
            usecs: (self.ts_us % 1_000_000) as u32,
            event,
            fields,
        }
    }

    /// The tracefs lines: [`TraceRecord::line`], one per line of a multi-line text (a kernel
    /// splat), each with the same context, so every line of the file is a trace line.
    pub fn lines(&self) -> Vec<TraceLine> {
        if !self.fields.contains('\n') {
            return vec![self.line()];
        }
        self.fields
            .lines()
            .map(|part| {
                TraceRecord {
                    fields: part.to_owned(),
                    ..self.clone()
                }
                .line()
            })
            .collect()
    }

    /// The line of biosim's step-by-step trace: `[001] ` and the event's message (`[   ]`
    /// without a CPU); `[001] event: fields` for an event made without one.
    pub fn human(&self) -> String {
        let cpu = self
            .cpu
            .map_or_else(|| "   ".to_owned(), |c| format!("{c:03}"));
        let line = match &self.text {
            Some(t) => format!("[{cpu}] {t}"),
            None => format!("[{cpu}] {}: {}", self.event, self.fields),
        };
        line.trim_end().to_owned()
    }
}

/// A run's trace as ftrace will write it: the records, and the machine's CPU count (the header's
/// `#P:`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ftrace {
    /// The events in the order they happened (their timestamps never decrease).
    pub records: Vec<TraceRecord>,
    /// Possible CPUs.
    pub nr_cpus: u32,
    /// The CPU the writer task runs on.
    pub control_cpu: u32,
}

impl Ftrace {
    /// Appends a `biosim_<name>` marker from the writer task on the control CPU, one µs after the
    /// last event.
    pub fn marker(&mut self, name: &str, text: &str) {
        let ts_us = self.records.last().map_or(0, |r| r.ts_us + 1);
        self.records.push(TraceRecord {
            ts_us,
            cpu: Some(self.control_cpu),
            comm: WRITER_COMM.to_owned(),
            pid: WRITER_PID,
            flags: NO_FLAGS.to_owned(),
            event: format!("biosim_{name}"),
            fields: text.to_owned(),
            bio: None,
            text: None,
        });
    }

    /// This trace with one `biosim_verdict` marker per line of `verdicts` at its end.
    pub fn with_verdicts<S: AsRef<str>>(mut self, verdicts: impl IntoIterator<Item = S>) -> Self {
        for v in verdicts {
            self.marker("verdict", v.as_ref().trim());
        }
        self
    }

    /// The tracefs `trace` file ([`write_trace`]).
    pub fn text(&self) -> String {
        write_trace(&self.records, self.nr_cpus)
    }
}

/// A tracefs `trace` file of the `nop` tracer: `print_trace_header()`'s `# tracer: nop`, `#`,
/// `# entries-in-buffer/entries-written: N/N   #P:CPUS`, the legend, then one line per record.
pub fn write_trace(records: &[TraceRecord], nr_cpus: u32) -> String {
    use std::fmt::Write as _;
    let lines: Vec<TraceLine> = records.iter().flat_map(TraceRecord::lines).collect();
    let n = lines.len();
    let mut out = format!(
        "# tracer: nop\n#\n# entries-in-buffer/entries-written: {n}/{n}   #P:{nr_cpus}\n{}",
        super::line::HEADER_LEGEND
    );
    for l in lines {
        let _ = writeln!(out, "{l}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(event: &str, fields: &str, pid: u32) -> TraceRecord {
        TraceRecord {
            ts_us: 4_000_001,
            cpu: Some(1),
            comm: "swapper/1".to_owned(),
            pid,
            flags: "d.h1.".to_owned(),
            event: event.to_owned(),
            fields: fields.to_owned(),
            bio: None,
            text: None,
        }
    }

    #[test]
    fn markers_idle_and_the_header_are_written_as_the_kernel_writes_them() {
        let mut t = Ftrace {
            records: vec![
                rec("irq_handler_entry", "irq=36 name=virtio1-req.0", 0),
                rec("biosim_bio_complete_defer", "bio#1 to the batch of CPU1", 0),
            ],
            nr_cpus: 2,
            control_cpu: 0,
        };
        t.marker("scenario", "tick");
        let text = t.with_verdicts(["  no invariant violated"]).text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "# tracer: nop");
        assert_eq!(lines[2], "# entries-in-buffer/entries-written: 4/4   #P:2");
        assert_eq!(
            lines[12],
            "          <idle>-0       [001] d.h1.     4.000001: irq_handler_entry: irq=36 name=virtio1-req.0"
        );
        assert!(lines[13].ends_with(
            "tracing_mark_write: biosim_bio_complete_defer: bio#1 to the batch of CPU1"
        ));
        assert_eq!(
            lines[14],
            "          biosim-999     [000] .....     4.000002: tracing_mark_write: biosim_scenario: tick"
        );
        assert!(lines[15]
            .ends_with("4.000003: tracing_mark_write: biosim_verdict: no invariant violated"));
        let parsed = super::super::line::parse_trace(&text).unwrap();
        assert_eq!(parsed.len(), 4);
        assert_eq!(rec("e", "", 5).human(), "[001] e:");
        let splat = rec("biosim_report", "BUG: x\n  held: y", 7).lines();
        assert_eq!(splat.len(), 2);
        assert_eq!(splat[1].fields, "biosim_report:   held: y");
    }
}
