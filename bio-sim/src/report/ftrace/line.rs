//! One line of a tracefs `trace` file, as `print_trace_fmt()` → `trace_print_context()` and
//! `trace_print_lat_fmt()` (kernel/trace/trace_output.c) print it with the default options:
//!
//! ```text
//!      kworker/0:2-15074   [000] .....  1086.770677: cpuhp_enter: cpu: 0001 target: 144 step: 236 (cpuhp_kick_ap_work)
//! ```
//!
//! `comm` right-aligned in 16 columns, `-`, the pid left-aligned in 7, `[CPU]` as three digits,
//! the five flag characters, the timestamp as `%5lu.%06lu`, `: `, the event name, `: `, and the
//! fields exactly as the event's `print fmt` rendered them (which may start or end with a space:
//! `cpuhp_exit`'s and `workqueue_activate_work`'s do). The comm may contain `-` and spaces; the pid
//! is the digits after its last `-`.

use std::fmt;

/// The header of a tracefs `trace` file for the `nop` tracer (`print_trace_header()` with
/// `print_lat_help_header()`'s legend): `{entries}` is replaced by
/// `entries-in-buffer/entries-written: N/N   #P:CPUS`.
pub const HEADER_LEGEND: &str = "\
#
#                                _-----=> irqs-off/BH-disabled
#                               / _----=> need-resched
#                              | / _---=> hardirq/softirq
#                              || / _--=> preempt-depth
#                              ||| / _-=> migrate-disable
#                              |||| /     delay
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
";

/// One event line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceLine {
    /// `current->comm` of the task the event fired in (`<idle>` for pid 0).
    pub comm: String,
    /// Its pid.
    pub pid: u32,
    /// The CPU the event fired on.
    pub cpu: u32,
    /// The five flag characters (irqs-off/BH, need-resched, hardirq/softirq, preempt depth,
    /// migrate-disable).
    pub flags: String,
    /// Seconds of the timestamp.
    pub secs: u64,
    /// Microseconds of the timestamp (0..1,000,000).
    pub usecs: u32,
    /// The event's name (`cpuhp_enter`, `tracing_mark_write`, ...).
    pub event: String,
    /// The fields as the event's `print fmt` rendered them, verbatim.
    pub fields: String,
}

/// Why a line is not a tracefs trace line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a tracefs trace line ({what}): {line:?}")]
pub struct LineError {
    /// What part did not parse.
    pub what: &'static str,
    /// The line.
    pub line: String,
}

/// The flag characters each of the five columns may show (trace_print_lat_fmt()).
const FLAG_COLUMNS: [&str; 5] = [
    ".dDbX",
    ".NnLpBb",
    ".hHszZ",
    ".0123456789abcdef",
    ".0123456789",
];

fn err(what: &'static str, line: &str) -> LineError {
    LineError {
        what,
        line: line.to_owned(),
    }
}

impl TraceLine {
    /// Parses one event line (not a `#` header line).
    pub fn parse(line: &str) -> Result<TraceLine, LineError> {
        // The CPU column is the first ` [ddd] ` after the task: search from the pid's end, since
        // a comm may contain brackets.
        let open = line.find(" [").ok_or_else(|| err("no [CPU]", line))?;
        let (task, rest) = line.split_at(open);
        let task = task.trim_start();
        let dash = task.rfind('-').ok_or_else(|| err("no TASK-PID", line))?;
        let comm = &task[..dash];
        let pid_str = task[dash + 1..].trim_end();
        if comm.is_empty() || pid_str.is_empty() || !pid_str.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err("TASK-PID", line));
        }
        let pid = pid_str.parse().map_err(|_| err("pid", line))?;
        let rest = &rest[2..];
        let close = rest.find("] ").ok_or_else(|| err("[CPU]", line))?;
        let cpu_str = &rest[..close];
        if cpu_str.len() < 3 || !cpu_str.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err("CPU", line));
        }
        let cpu = cpu_str.parse().map_err(|_| err("CPU", line))?;
        let rest = &rest[close + 2..];
        let flags: String = rest.chars().take(5).collect();
        if flags.len() != 5
            || !flags
                .chars()
                .zip(FLAG_COLUMNS)
                .all(|(c, allowed)| allowed.contains(c))
        {
            return Err(err("FLAGS", line));
        }
        let rest = rest[5..]
            .strip_prefix(' ')
            .ok_or_else(|| err("FLAGS", line))?;
        let colon = rest.find(": ").ok_or_else(|| err("TIMESTAMP", line))?;
        let ts = rest[..colon].trim_start();
        let (s, us) = ts.split_once('.').ok_or_else(|| err("TIMESTAMP", line))?;
        if s.is_empty() || us.len() != 6 || !s.bytes().chain(us.bytes()).all(|b| b.is_ascii_digit())
        {
            return Err(err("TIMESTAMP", line));
        }
        let rest = &rest[colon + 2..];
        let colon = rest.find(':').ok_or_else(|| err("event name", line))?;
        let event = &rest[..colon];
        if event.is_empty()
            || !event
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(err("event name", line));
        }
        let fields = rest[colon + 1..]
            .strip_prefix(' ')
            .unwrap_or(&rest[colon + 1..]);
        Ok(TraceLine {
            comm: comm.to_owned(),
            pid,
            cpu,
            flags,
            secs: s.parse().map_err(|_| err("TIMESTAMP", line))?,
            usecs: us.parse().map_err(|_| err("TIMESTAMP", line))?,
            event: event.to_owned(),
            fields: fields.to_owned(),
        })
    }

    /// The timestamp in microseconds.
    pub fn micros(&self) -> u64 {
        self.secs * 1_000_000 + u64::from(self.usecs)
    }
}

impl fmt::Display for TraceLine {
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

/// Parses a whole `trace` file: `#` lines are the header (it must start with `# tracer: `), every
/// other non-empty line an event. Errors name the 1-based line number.
pub fn parse_trace(text: &str) -> Result<Vec<TraceLine>, (usize, LineError)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if i == 0 && !line.starts_with("# tracer: ") {
            return Err((1, err("no `# tracer:` header", line)));
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        out.push(TraceLine::parse(line).map_err(|e| (i + 1, e))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIVE: &[&str] = &[
        "     kworker/0:2-15074   [000] .....  1086.770677: cpuhp_enter: cpu: 0001 target: 144 step: 236 (cpuhp_kick_ap_work)",
        "         cpuhp/1-20      [001] .....  1086.778704: cpuhp_exit:  cpu: 0001  state: 234 step: 235 ret: 0",
        "          <idle>-0       [000] d.h1.  1190.560768: irq_handler_entry: irq=36 name=virtio1-req.0",
        "          <idle>-0       [000] .Ns1.  1190.560783: softirq_exit: vec=4 [action=BLOCK]",
        "              dd-25585   [000] d..2.  1190.561712: workqueue_activate_work: work struct 00000000785947f3 function=loop_rootcg_workfn ",
    ];

    #[test]
    fn live_kernel_lines_parse_and_print_back_byte_for_byte() {
        for l in LIVE {
            let t = TraceLine::parse(l).unwrap();
            assert_eq!(&t.to_string(), l);
        }
        let t = TraceLine::parse(LIVE[1]).unwrap();
        assert_eq!((t.comm.as_str(), t.pid, t.cpu), ("cpuhp/1", 20, 1));
        assert_eq!(t.fields, " cpu: 0001  state: 234 step: 235 ret: 0");
        assert_eq!(t.micros(), 1_086_778_704);
    }

    #[test]
    fn malformed_lines_are_refused_with_the_part_named() {
        let bad = [
            ("[001] cpuhp_enter target=144", "no [CPU]"),
            ("   biosim [001] .....  1.000000: e: f", "no TASK-PID"),
            ("   cpuhp/1-x  [001] .....  1.000000: e: f", "TASK-PID"),
            ("   cpuhp/1-2  [01] .....  1.000000: e: f", "CPU"),
            ("   cpuhp/1-2  [001] ..q..  1.000000: e: f", "FLAGS"),
            ("   cpuhp/1-2  [001] .....  1.00000: e: f", "TIMESTAMP"),
            (
                "   cpuhp/1-2  [001] .....  1.000000: Bad Name: f",
                "event name",
            ),
        ];
        for (l, what) in bad {
            assert_eq!(TraceLine::parse(l).unwrap_err().what, what, "{l}");
        }
        assert_eq!(parse_trace("x\n").unwrap_err().0, 1);
    }
}
