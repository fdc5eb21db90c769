//! A checker for the `trace` files biosim writes: what a tool reading tracefs output
//! (trace-cmd, Perfetto's ftrace text importer, a script) relies on, checked line by line against
//! the live 6.18 kernel's layout ([`super::line`]) and each event's `print fmt` ([`super::format`]).
//!
//! The rules:
//! - the header is `# tracer: nop`, `#`, `# entries-in-buffer/entries-written: N/N   #P:CPUS`
//!   with N the number of event lines, then [`super::line::HEADER_LEGEND`];
//! - every other line parses as a [`TraceLine`], its CPU below `#P`, pid 0 exactly when the task
//!   is `<idle>`, timestamps never decreasing;
//! - `tracing_mark_write` lines (biosim's own events) carry `biosim_<name>: text`;
//! - an event with a committed `format` file has fields its `print fmt` can produce; an event
//!   without one is a kernel event known to exist (`without_format`);
//! - except the events named in `unconverted`: biosim still prints them in its own words (their
//!   lines only have to parse). A name in that list whose every line now matches its format is
//!   itself an error, so the list can only shrink.

use super::format::EventFormat;
use super::line::{TraceLine, HEADER_LEGEND};
use std::collections::{BTreeMap, BTreeSet};

/// Every problem of `text` as a trace file, each naming its line (empty: none).
pub fn check_trace(
    text: &str,
    formats: &[EventFormat],
    without_format: &[&str],
    unconverted: &[&str],
) -> Vec<String> {
    let mut bad = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let header_len = 3 + HEADER_LEGEND.lines().count();
    if lines.len() < header_len {
        return vec![format!("only {} lines: no complete header", lines.len())];
    }
    if lines[0] != "# tracer: nop" || lines[1] != "#" {
        bad.push(format!(
            "line 1-2: not `# tracer: nop` and `#`: {:?}",
            &lines[..2]
        ));
    }
    let events: Vec<(usize, &str)> = lines
        .iter()
        .enumerate()
        .skip(header_len)
        .map(|(i, l)| (i + 1, *l))
        .collect();
    let (mut nr_cpus, n) = (u32::MAX, events.len());
    match lines[2]
        .strip_prefix("# entries-in-buffer/entries-written: ")
        .and_then(|r| r.split_once("   #P:"))
    {
        Some((counts, cpus)) if counts == format!("{n}/{n}") => {
            nr_cpus = cpus.parse().unwrap_or(u32::MAX);
        }
        _ => bad.push(format!(
            "line 3: expected `# entries-in-buffer/entries-written: {n}/{n}   #P:CPUS`, got {:?}",
            lines[2]
        )),
    }
    if lines[3..header_len].join("\n") + "\n" != HEADER_LEGEND {
        bad.push("lines 4..: not the kernel's legend".to_owned());
    }
    let mut last_ts = 0;
    // Per unconverted event: (lines seen, lines matching their format).
    let mut listed: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut unknown = BTreeSet::new();
    for (no, l) in events {
        let t = match TraceLine::parse(l) {
            Ok(t) => t,
            Err(e) => {
                bad.push(format!("line {no}: {e}"));
                continue;
            }
        };
        if t.to_string() != l {
            bad.push(format!(
                "line {no}: not in the kernel's column layout: {l:?}"
            ));
        }
        if t.cpu >= nr_cpus {
            bad.push(format!(
                "line {no}: CPU {} of a {nr_cpus}-CPU machine",
                t.cpu
            ));
        }
        if (t.pid == 0) != (t.comm == "<idle>") {
            bad.push(format!(
                "line {no}: pid {} with task {} (pid 0 is `<idle>`, only it)",
                t.pid, t.comm
            ));
        }
        if t.micros() < last_ts {
            bad.push(format!("line {no}: the timestamp goes back: {l}"));
        }
        last_ts = t.micros();
        if t.event == "tracing_mark_write" {
            let ok = t.fields.split_once(": ").is_some_and(|(name, _)| {
                name.strip_prefix("biosim_").is_some_and(|n| {
                    !n.is_empty()
                        && n.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                })
            });
            if !ok {
                bad.push(format!(
                    "line {no}: a marker that is not `biosim_<name>: text`: {l}"
                ));
            }
            continue;
        }
        let format = formats.iter().find(|f| f.name == t.event);
        let matches = format.map(|f| f.parse_fields(&t.fields).is_some());
        if let Some(name) = unconverted.iter().find(|u| **u == t.event) {
            let e = listed.entry(name).or_default();
            e.0 += 1;
            e.1 += usize::from(matches == Some(true));
            continue;
        }
        match matches {
            Some(true) => {}
            Some(false) => bad.push(format!(
                "line {no}: {}'s fields do not match its print fmt {:?}: {:?}",
                t.event,
                format.map_or("", |f| f.print_fmt.as_str()),
                t.fields
            )),
            None if without_format.contains(&t.event.as_str()) => {}
            None => {
                if unknown.insert(t.event.clone()) {
                    bad.push(format!(
                        "line {no}: event {} has no committed format file and is not a known kernel event",
                        t.event
                    ));
                }
            }
        }
    }
    for (name, (seen, ok)) in listed {
        if seen > 0 && seen == ok {
            bad.push(format!(
                "{name} is listed as unconverted but all {seen} of its lines match its format: take it off the list"
            ));
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ftrace::record::{write_trace, TraceRecord};

    fn formats() -> Vec<EventFormat> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/data/tracefs-6.18/formats");
        ["cpuhp_exit", "sched_switch"]
            .iter()
            .map(|n| EventFormat::read(&dir.join(format!("{n}.format"))).unwrap())
            .collect()
    }

    fn rec(ts_us: u64, comm: &str, pid: u32, event: &str, fields: &str) -> TraceRecord {
        TraceRecord {
            ts_us,
            cpu: Some(1),
            comm: comm.to_owned(),
            pid,
            flags: ".....".to_owned(),
            event: event.to_owned(),
            fields: fields.to_owned(),
            bio: None,
            text: None,
        }
    }

    fn good() -> Vec<TraceRecord> {
        vec![
            rec(
                10,
                "cpuhp/1",
                101,
                "cpuhp_exit",
                " cpu: 0001  state: 234 step: 235 ret: 0",
            ),
            rec(11, "swapper/1", 0, "biosim_note", "echo 1"),
            rec(12, "x", 7, "ipi_send_cpu", "cpu=1 callsite=f"),
            rec(13, "x", 7, "cpuhp_enter", "target=144 step=197"),
        ]
    }

    #[test]
    fn a_good_trace_passes_and_each_broken_rule_is_named() {
        let f = formats();
        let check = |t: &str| check_trace(t, &f, &["ipi_send_cpu"], &["cpuhp_enter"]);
        let text = write_trace(&good(), 2);
        assert_eq!(check(&text), Vec::<String>::new());

        // The buggy twins, one rule each.
        let swapped = text.replace("cpuhp/1-101    ", "101-cpuhp/1    ");
        assert!(
            check(&swapped)[0].contains("TASK-PID"),
            "{:?}",
            check(&swapped)
        );
        let squeezed = text.replace("cpu: 0001  state", "cpu: 0001 state");
        assert!(check(&squeezed)[0].contains("print fmt"));
        let mut r = good();
        r[1].ts_us = 5;
        assert!(check(&write_trace(&r, 2))[0].contains("goes back"));
        let idle5 = text.replace("<idle>-0 ", "<idle>-5 ");
        assert!(check(&idle5)[0].contains("pid 5"), "{:?}", check(&idle5));
        assert!(check(&write_trace(&good(), 1))[0].contains("CPU 1 of a 1-CPU"));
        assert!(check(&text.replace("4/4", "3/3"))[0].contains("line 3"));
        let unmarked = text.replace("biosim_note: echo", "note: echo");
        assert!(check(&unmarked)[0].contains("marker"));
        let mut r = good();
        r[2].event = "loop_nowait".to_owned();
        assert!(check(&write_trace(&r, 2))[0].contains("no committed format"));
        // A listed event that now matches its format must leave the list.
        let mut r = good();
        r[3].event = "cpuhp_exit".to_owned();
        r[3].fields = " cpu: 0001  state: 1 step: 2 ret: 0".to_owned();
        let e = check_trace(&write_trace(&r, 2), &f, &["ipi_send_cpu"], &["cpuhp_exit"]);
        assert!(e[0].contains("take it off the list"), "{e:?}");
    }
}
