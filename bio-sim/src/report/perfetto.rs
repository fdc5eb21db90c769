//! The kernel-style trace as a Chrome/Perfetto trace (the JSON "Trace Event Format" that
//! ui.perfetto.dev and chrome://tracing open): one track per simulated CPU, the deterministic
//! runtime's steps as slices, interrupt / softirq / work-item execution as nested slices (from
//! the `irq_handler_entry`/`exit`, `softirq_entry`/`exit`, `workqueue_execute_start`/`end`
//! tracepoints), every other tracepoint as an instant on its CPU, and the scenario's transitions
//! (`>>>` lines) as global markers.
//!
//! Time is the trace's line number in microseconds: the deterministic runtime has no wall clock,
//! only an order, so the timeline shows order and nesting, not duration. Jiffies are in each
//! step's arguments.

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

/// The CPU a step line names (`... CPU1 ...`), if any.
fn cpu_in(s: &str) -> Option<u32> {
    let i = s.find("CPU")?;
    let digits: String = s[i + 3..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// One parsed line.
enum Line<'a> {
    /// `   >>> transition`
    Transition(&'a str),
    /// `  12 j=3     kind ...: outcome`
    Step {
        n: &'a str,
        jiffies: &'a str,
        desc: &'a str,
    },
    /// `       [001] name: args` (cpu `None` for `[   ]`)
    Tracepoint {
        cpu: Option<u32>,
        name: &'a str,
        args: &'a str,
    },
    /// `       CPU1: what the scenario ran there`
    OnCpu { cpu: u32, what: &'a str },
    /// Anything else (headers, notes).
    Other,
}

fn parse(line: &str) -> Line<'_> {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix(">>> ") {
        return Line::Transition(rest);
    }
    if let Some(rest) = t.strip_prefix('[') {
        if let Some((cpu, tail)) = rest.split_once("] ") {
            let (name, args) = tail.split_once(": ").unwrap_or((tail, ""));
            let name = name.split_whitespace().next().unwrap_or(name);
            return Line::Tracepoint {
                cpu: cpu.trim().parse().ok(),
                name,
                args,
            };
        }
    }
    if let Some(rest) = t.strip_prefix("CPU") {
        if let Some((n, what)) = rest.split_once(": ") {
            if let Ok(cpu) = n.parse() {
                return Line::OnCpu { cpu, what };
            }
        }
    }
    let mut parts = t.splitn(2, ' ');
    if let (Some(n), Some(rest)) = (parts.next(), parts.next()) {
        if n.chars().all(|c| c.is_ascii_digit()) && !n.is_empty() {
            if let Some(rest) = rest.strip_prefix("j=") {
                let (jiffies, desc) = rest.split_once(' ').unwrap_or((rest, ""));
                return Line::Step {
                    n,
                    jiffies,
                    desc: desc.trim_start(),
                };
            }
        }
    }
    Line::Other
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

/// Converts a biosim trace to Trace Event Format JSON.
pub fn chrome_trace_json(trace: &str, title: &str) -> String {
    let mut tl = Timeline::default();
    let lines: Vec<&str> = trace.lines().collect();
    for (ts, line) in lines.iter().enumerate() {
        tl.line(ts, parse(line));
    }
    tl.finish(lines.len(), title)
}

/// The timeline being built; an event's `ts` is the index of its trace line.
#[derive(Default)]
struct Timeline {
    ev: Vec<String>,
    cpus: std::collections::BTreeSet<u32>,
    /// Open slices per CPU, to close any left open at the end (a trace cut mid-handler).
    open: std::collections::BTreeMap<u32, Vec<&'static str>>,
    /// The step slice in progress: (cpu, begin ts, name, args).
    step: Option<(u32, usize, String, String)>,
}

impl Timeline {
    /// Ends the step slice in progress, if any, at `ts`.
    fn close_step(&mut self, ts: usize) {
        if let Some((cpu, t0, name, args)) = self.step.take() {
            self.ev.push(format!(
                r#"{{"name":"{}","cat":"step","ph":"X","ts":{t0},"dur":{},"pid":1,"tid":{cpu},"args":{{"step":"{}"}}}}"#,
                esc(&name),
                ts.saturating_sub(t0).max(1),
                esc(&args)
            ));
        }
    }

    /// The events of the trace line at `ts`.
    fn line(&mut self, ts: usize, line: Line<'_>) {
        match line {
            Line::Transition(t) => {
                self.close_step(ts);
                self.ev.push(format!(
                    r#"{{"name":"{}","cat":"transition","ph":"i","s":"g","ts":{ts},"pid":1,"tid":0}}"#,
                    esc(t)
                ));
            }
            Line::Step { n, jiffies, desc } => {
                self.close_step(ts);
                let cpu = cpu_in(desc).unwrap_or(0);
                self.cpus.insert(cpu);
                // The step's kind is its first word: worker, rescuer, irq, softirq, timers,
                // tick, hotplug.
                let name = desc.split_whitespace().next().unwrap_or("step").to_owned();
                self.step = Some((cpu, ts, name, format!("#{n} j={jiffies} {desc}")));
            }
            Line::Tracepoint { cpu, name, args } => {
                let cpu = cpu.unwrap_or(0);
                self.cpus.insert(cpu);
                self.tracepoint(ts, cpu, name, args);
            }
            Line::OnCpu { cpu, what } => {
                self.cpus.insert(cpu);
                self.ev.push(format!(
                    r#"{{"name":"{}","cat":"scenario","ph":"i","s":"t","ts":{ts},"pid":1,"tid":{cpu}}}"#,
                    esc(what)
                ));
            }
            Line::Other => {}
        }
    }

    /// A tracepoint: the begin or end of a paired slice, or an instant.
    fn tracepoint(&mut self, ts: usize, cpu: u32, name: &str, args: &str) {
        match paired(name) {
            Some((true, slice)) => {
                self.open.entry(cpu).or_default().push(slice);
                self.ev.push(format!(
                    r#"{{"name":"{slice}: {}","cat":"{slice}","ph":"B","ts":{ts},"pid":1,"tid":{cpu}}}"#,
                    esc(args)
                ));
            }
            Some((false, slice)) => {
                let stack = self.open.entry(cpu).or_default();
                if stack.last() == Some(&slice) {
                    stack.pop();
                    self.ev.push(format!(
                        r#"{{"ph":"E","ts":{ts},"pid":1,"tid":{cpu}}}"#
                    ));
                }
            }
            None => self.ev.push(format!(
                r#"{{"name":"{}","cat":"tracepoint","ph":"i","s":"t","ts":{ts},"pid":1,"tid":{cpu},"args":{{"args":"{}"}}}}"#,
                esc(name),
                esc(args)
            )),
        }
    }

    /// Closes what is still open at `end`, names the process and the CPU tracks, and joins the
    /// events into the JSON document.
    fn finish(mut self, end: usize, title: &str) -> String {
        self.close_step(end);
        for (cpu, stack) in std::mem::take(&mut self.open) {
            for _ in stack {
                self.ev
                    .push(format!(r#"{{"ph":"E","ts":{end},"pid":1,"tid":{cpu}}}"#));
            }
        }
        self.ev.push(format!(
            r#"{{"name":"process_name","ph":"M","pid":1,"args":{{"name":"{}"}}}}"#,
            esc(title)
        ));
        for cpu in std::mem::take(&mut self.cpus) {
            self.ev.push(format!(
                r#"{{"name":"thread_name","ph":"M","pid":1,"tid":{cpu},"args":{{"name":"CPU{cpu}"}}}}"#
            ));
        }
        format!(
            "{{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n{}\n]}}\n",
            self.ev.join(",\n")
        )
    }
}

/// Writes `trace` as Trace Event Format JSON to `path`.
pub fn write(path: &std::path::Path, trace: &str, title: &str) -> Result<(), String> {
    std::fs::write(path, chrome_trace_json(trace, title))
        .map_err(|e| format!("--perfetto {}: cannot write: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "# biosim: header
   >>> complete a BIO_COMPLETE_IN_TASK bio on CPU1 from hardirq
       CPU1: bio_endio(bio#1) from hardirq
       [001] bio_complete_defer: bio#1 to the batch of CPU1
     1 j=0     worker pool/CPU1 on CPU1: worker ran bio_complete_work_fn
       [001] workqueue_execute_start: work=1 function=bio_complete_work_fn pool=Cpu(CpuId(1))
       [001] workqueue_execute_end: work=1 function=bio_complete_work_fn
     2 j=1     irq CPU0: delivered
       [000] irq_handler_entry: name=\"quoted\"
       [   ] tick
";

    #[test]
    fn lines_become_tracks_slices_and_instants() {
        let j = chrome_trace_json(TRACE, "t");
        let v: serde_json::Value = serde_json::from_str(&j).expect("valid JSON");
        let ev = v["traceEvents"].as_array().unwrap();
        let find = |ph: &str, tid: u64| {
            ev.iter()
                .filter(|e| e["ph"] == ph && e["tid"] == tid)
                .map(|e| e["ts"].as_u64().unwrap())
                .collect::<Vec<_>>()
        };
        // The work item on CPU1 (lines 5-6), the IRQ on CPU0 left open and closed at the end.
        assert_eq!(find("B", 1), [5]);
        assert_eq!(find("E", 1), [6]);
        assert_eq!((find("B", 0), find("E", 0)), (vec![8], vec![10]));
        let names: Vec<&str> = ev
            .iter()
            .filter_map(|e| e["args"]["name"].as_str())
            .collect();
        assert!(
            names.contains(&"CPU0") && names.contains(&"CPU1"),
            "{names:?}"
        );
        let step = ev
            .iter()
            .find(|e| e["cat"] == "step" && e["tid"] == 1)
            .unwrap();
        assert_eq!(step["name"], "worker");
        assert!(step["args"]["step"]
            .as_str()
            .unwrap()
            .starts_with("#1 j=0 worker"));
        let irq = ev.iter().find(|e| e["cat"] == "hardirq").unwrap();
        assert_eq!(irq["name"], "hardirq: name=\"quoted\"");
        assert!(ev.iter().any(|e| e["cat"] == "transition"));
    }

    #[test]
    fn escaping_covers_control_characters() {
        assert_eq!(esc("a\"b\\c\nd\u{1}"), "a\\\"b\\\\c\\nd\\u0001");
    }
}
