//! A run's trace as a Chrome/Perfetto trace (the JSON "Trace Event Format" that ui.perfetto.dev
//! and chrome://tracing open), on the simulated clock of the ftrace records
//! ([`crate::report::ftrace::Ftrace`]: `jiffies / HZ` plus 1 µs per event within a jiffy):
//!
//! - one track per CPU (`CPU0`, ...): interrupt, softirq and work-item execution as nested slices
//!   (`irq_handler_entry`/`exit`, `softirq_entry`/`exit`, `workqueue_execute_start`/`end`),
//!   every other event as an instant with its task, flags and fields;
//! - one track per CPU being hotplugged (`hotplug CPU1`): each callback a span from its
//!   `cpuhp_enter`/`cpuhp_multi_enter` to its `cpuhp_exit` (the state machine walking its
//!   states);
//! - each bio's life as a flow (flow events `ph: s/t/f`, id = the bio's id) through its events:
//!   submission, deferral to a batch, completion, `bi_end_io`; each such event is a 1 µs slice so
//!   the arrow has something to bind to;
//! - the scenario's transitions (`biosim_scenario`) as global markers.

use crate::report::ftrace::{Ftrace, TraceRecord};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Escapes `s` as a JSON string body.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Which slice a begin/end tracepoint pair opens or closes.
fn paired(name: &str) -> Option<(bool, &'static str)> {
    Some(match name {
        "irq_handler_entry" => (true, "hardirq"),
        "irq_handler_exit" => (false, "hardirq"),
        "softirq_entry" => (true, "softirq"),
        "softirq_exit" => (false, "softirq"),
        "workqueue_execute_start" => (true, "work"),
        "workqueue_execute_end" => (false, "work"),
        _ => return None,
    })
}

/// The track of CPU `cpu`'s hotplug spans.
const HOTPLUG_TID: u32 = 1000;

/// The number after `key` in `s` (`cpu: 0001` or `cpu=1`).
fn number_after(s: &str, key: &str) -> Option<u32> {
    let i = s.find(key)?;
    let digits: String = s[i + key.len()..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The CPU a cpuhp event is about: its `cpu: NNNN` (the kernel's print fmt) or `cpu=N` field,
/// else the CPU it ran on.
fn hotplug_cpu(r: &TraceRecord) -> u32 {
    number_after(&r.fields, "cpu:")
        .or_else(|| number_after(&r.fields, "cpu="))
        .or(r.cpu)
        .unwrap_or(0)
}

/// A cpuhp_enter's span name: `step (callback)` as the kernel prints it, or biosim's older
/// `step=N callback=NAME`.
fn hotplug_span_name(r: &TraceRecord) -> String {
    let step = number_after(&r.fields, "step:").or_else(|| number_after(&r.fields, "step="));
    let callback = match (r.fields.rfind('('), r.fields.ends_with(')')) {
        (Some(i), true) => Some(r.fields[i + 1..r.fields.len() - 1].to_owned()),
        _ => r
            .fields
            .split_whitespace()
            .find_map(|w| w.strip_prefix("callback=").map(str::to_owned)),
    };
    match (step, callback) {
        (Some(s), Some(c)) => format!("{s} {c}"),
        (Some(s), None) => format!("step {s}"),
        (None, Some(c)) => c,
        (None, None) => r.event.clone(),
    }
}

/// The bio an event is about: its `bio` field, else a `bio#N` in its text (not in the writer
/// task's notes and verdicts, which are about the scenario, not a step of the bio's life).
fn bio_of(r: &TraceRecord) -> Option<u64> {
    if r.pid == crate::report::ftrace::record::WRITER_PID {
        return None;
    }
    r.bio.or_else(|| {
        let i = r.fields.find("bio#")?;
        let digits: String = r.fields[i + 4..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

/// Converts a run's trace to Trace Event Format JSON.
pub fn chrome_trace_json(trace: &Ftrace, title: &str) -> String {
    let mut tl = Timeline::default();
    // Each bio's last event, where its flow ends.
    let mut last_of: BTreeMap<u64, usize> = BTreeMap::new();
    for (i, r) in trace.records.iter().enumerate() {
        if let Some(b) = bio_of(r) {
            last_of.insert(b, i);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, r) in trace.records.iter().enumerate() {
        let flow = bio_of(r).map(|b| {
            let ph = if seen.insert(b) {
                if last_of[&b] == i {
                    None
                } else {
                    Some("s")
                }
            } else if last_of[&b] == i {
                Some("f")
            } else {
                Some("t")
            };
            (b, ph)
        });
        tl.record(r, flow);
    }
    let end = trace.records.last().map_or(0, |r| r.ts_us + 1);
    tl.finish(end, title)
}

/// The timeline being built.
#[derive(Default)]
struct Timeline {
    ev: Vec<String>,
    /// Tracks by tid, with their names.
    tracks: BTreeMap<u32, String>,
    /// Open slices per track, to close any left open at the end (a trace cut mid-handler).
    open: BTreeMap<u32, Vec<&'static str>>,
}

impl Timeline {
    fn track(&mut self, tid: u32, name: impl FnOnce() -> String) {
        self.tracks.entry(tid).or_insert_with(name);
    }

    /// The events of one record; `flow` is its bio and its place in the bio's flow.
    fn record(&mut self, r: &TraceRecord, flow: Option<(u64, Option<&'static str>)>) {
        let ts = r.ts_us;
        let cpu = r.cpu.unwrap_or(0);
        self.track(cpu, || format!("CPU{cpu}"));
        let args = format!(
            r#"{{"task":"{}-{}","flags":"{}","fields":"{}"}}"#,
            esc(&r.line().comm),
            r.pid,
            esc(&r.flags),
            esc(&r.fields)
        );
        match (r.event.as_str(), paired(&r.event)) {
            (_, Some((true, slice))) => {
                self.open.entry(cpu).or_default().push(slice);
                self.ev.push(format!(
                    r#"{{"name":"{slice}: {}","cat":"{slice}","ph":"B","ts":{ts},"pid":1,"tid":{cpu},"args":{args}}}"#,
                    esc(&r.fields)
                ));
            }
            (_, Some((false, slice))) => {
                let stack = self.open.entry(cpu).or_default();
                if stack.last() == Some(&slice) {
                    stack.pop();
                    self.ev
                        .push(format!(r#"{{"ph":"E","ts":{ts},"pid":1,"tid":{cpu}}}"#));
                }
            }
            ("cpuhp_enter" | "cpuhp_multi_enter", _) => {
                let target = hotplug_cpu(r);
                let tid = HOTPLUG_TID + target;
                self.track(tid, || format!("hotplug CPU{target}"));
                self.open.entry(tid).or_default().push("cpuhp");
                self.ev.push(format!(
                    r#"{{"name":"{}","cat":"cpuhp","ph":"B","ts":{ts},"pid":1,"tid":{tid},"args":{args}}}"#,
                    esc(&hotplug_span_name(r))
                ));
            }
            ("cpuhp_exit", _) => {
                let tid = HOTPLUG_TID + hotplug_cpu(r);
                let stack = self.open.entry(tid).or_default();
                if stack.last() == Some(&"cpuhp") {
                    stack.pop();
                    self.ev.push(format!(
                        r#"{{"ph":"E","ts":{ts},"pid":1,"tid":{tid},"args":{args}}}"#
                    ));
                }
            }
            ("biosim_scenario", _) => self.ev.push(format!(
                r#"{{"name":"{}","cat":"scenario","ph":"i","s":"g","ts":{ts},"pid":1,"tid":{cpu}}}"#,
                esc(&r.fields)
            )),
            _ => match flow {
                // A bio's event: a 1 µs slice the flow arrow binds to.
                Some((bio, ph)) => {
                    self.ev.push(format!(
                        r#"{{"name":"{}","cat":"bio","ph":"X","ts":{ts},"dur":1,"pid":1,"tid":{cpu},"args":{args}}}"#,
                        esc(&r.event)
                    ));
                    if let Some(ph) = ph {
                        self.ev.push(format!(
                            r#"{{"name":"bio#{bio}","cat":"bio","ph":"{ph}","id":{bio},"bp":"e","ts":{ts},"pid":1,"tid":{cpu}}}"#
                        ));
                    }
                }
                None => self.ev.push(format!(
                    r#"{{"name":"{}","cat":"{}","ph":"i","s":"t","ts":{ts},"pid":1,"tid":{cpu},"args":{args}}}"#,
                    esc(&r.event),
                    if r.is_marker() { "biosim" } else { "tracepoint" }
                )),
            },
        }
    }

    /// Closes what is still open at `end`, names the process and the tracks, and joins the
    /// events into the JSON document.
    fn finish(mut self, end: u64, title: &str) -> String {
        for (tid, stack) in std::mem::take(&mut self.open) {
            for _ in stack {
                self.ev
                    .push(format!(r#"{{"ph":"E","ts":{end},"pid":1,"tid":{tid}}}"#));
            }
        }
        self.ev.push(format!(
            r#"{{"name":"process_name","ph":"M","pid":1,"args":{{"name":"{}"}}}}"#,
            esc(title)
        ));
        for (tid, name) in std::mem::take(&mut self.tracks) {
            self.ev.push(format!(
                r#"{{"name":"thread_name","ph":"M","pid":1,"tid":{tid},"args":{{"name":"{}"}}}}"#,
                esc(&name)
            ));
            self.ev.push(format!(
                r#"{{"name":"thread_sort_index","ph":"M","pid":1,"tid":{tid},"args":{{"sort_index":{tid}}}}}"#
            ));
        }
        format!(
            "{{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n{}\n]}}\n",
            self.ev.join(",\n")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ts_us: u64, cpu: u32, event: &str, fields: &str, bio: Option<u64>) -> TraceRecord {
        TraceRecord {
            ts_us,
            cpu: Some(cpu),
            comm: "kworker/1:1".to_owned(),
            pid: 301,
            flags: ".....".to_owned(),
            event: event.to_owned(),
            fields: fields.to_owned(),
            bio,
            text: None,
        }
    }

    #[test]
    fn records_become_cpu_and_hotplug_tracks_slices_flows_and_markers() {
        let t = Ftrace {
            records: vec![
                rec(0, 0, "biosim_scenario", "complete a bio", None),
                rec(
                    4000,
                    1,
                    "block_bio_queue",
                    "7,0 W 8 + 8 [biosim/1]",
                    Some(1),
                ),
                rec(
                    4001,
                    1,
                    "biosim_bio_complete_defer",
                    "bio#1 to the batch of CPU1",
                    None,
                ),
                rec(
                    4002,
                    1,
                    "workqueue_execute_start",
                    "work struct 0000000000000001: function f",
                    None,
                ),
                rec(4003, 1, "block_bio_complete", "7,0 W 8 + 8 [0]", Some(1)),
                rec(
                    4004,
                    1,
                    "workqueue_execute_end",
                    "work struct 0000000000000001: function f",
                    None,
                ),
                rec(
                    8000,
                    1,
                    "cpuhp_enter",
                    "cpu: 0001 target: 144 step: 197 (bio_complete_cpu_offline)",
                    None,
                ),
                rec(
                    8001,
                    1,
                    "cpuhp_exit",
                    " cpu: 0001  state: 196 step: 197 ret: 0",
                    None,
                ),
                rec(8002, 0, "irq_handler_entry", "irq=36 name=\"q\"", None),
            ],
            nr_cpus: 2,
            control_cpu: 0,
        };
        let j = chrome_trace_json(&t, "t");
        let v: serde_json::Value = serde_json::from_str(&j).expect("valid JSON");
        let ev = v["traceEvents"].as_array().unwrap();
        let find = |ph: &str, tid: u64| {
            ev.iter()
                .filter(|e| e["ph"] == ph && e["tid"] == tid)
                .map(|e| e["ts"].as_u64().unwrap())
                .collect::<Vec<_>>()
        };
        // The work item on CPU1, the hotplug span on CPU1's hotplug track, the IRQ on CPU0 left
        // open and closed at the end.
        assert_eq!((find("B", 1), find("E", 1)), (vec![4002], vec![4004]));
        assert_eq!((find("B", 1001), find("E", 1001)), (vec![8000], vec![8001]));
        assert_eq!((find("B", 0), find("E", 0)), (vec![8002], vec![8003]));
        let span = ev.iter().find(|e| e["cat"] == "cpuhp").unwrap();
        assert_eq!(span["name"], "197 bio_complete_cpu_offline");
        // bio#1's flow: queued, deferred, completed.
        let flow: Vec<&str> = ev
            .iter()
            .filter(|e| e["id"] == 1)
            .map(|e| e["ph"].as_str().unwrap())
            .collect();
        assert_eq!(flow, ["s", "t", "f"]);
        let names: Vec<&str> = ev
            .iter()
            .filter_map(|e| e["args"]["name"].as_str())
            .collect();
        assert!(
            names.contains(&"CPU0") && names.contains(&"hotplug CPU1"),
            "{names:?}"
        );
        assert!(ev.iter().any(|e| e["cat"] == "scenario" && e["s"] == "g"));
    }

    #[test]
    fn escaping_covers_control_characters() {
        assert_eq!(esc("a\"b\\c\nd\u{1}"), "a\\\"b\\\\c\\nd\\u0001");
    }
}
