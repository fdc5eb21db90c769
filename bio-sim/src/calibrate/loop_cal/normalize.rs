//! Block and workqueue events (`include/trace/events/block.h`, `include/trace/events/workqueue.h`)
//! reduced to what the loop calibration compares: the event name, the device's role (`loop`: the
//! loop device; `lower`: the device under the backing file, its sector turned into the backing
//! file's sector), rwbs, sector and sectors, and for work items the function and workqueue
//! (`loop` for `loopN`). Pointers, pids, comms, CPUs, times, byte counts and ioprio are dropped.
//!
//! Kept: block events of the loop device; block events of the lower device inside the backing
//! file's extents (the rest is other I/O of that disk: the journal, metadata, other programs);
//! workqueue events of the loop device's workqueue, the later ones of a work item found by the
//! pointer its `workqueue_queue_work` printed. Everything else (irqs, softirqs, the backing file
//! system's own work items such as `iomap_dio_complete_work`, biosim's `biosim_*` annotations) is
//! not loop.c's and is left out.
//!
//! The same function reads the kernel's lines (ftrace's `TASK-PID [CPU] FLAGS TS: event: fields`)
//! and the model's captured ones (`[CPU] event: fields`), so both sides go through one filter.

use super::Setup;
use crate::report::ftrace::TraceLine;
use std::fmt;

/// One normalized event.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ev {
    /// The tracepoint.
    pub event: String,
    /// The rest: `loop WS 64+8`, `lower RS 64+8`, `loop_rootcg_workfn loop req_cpu=256 cpu=-1`.
    pub what: String,
}

impl fmt::Display for Ev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.event, self.what)
    }
}

/// Splits a line into event name and fields: an ftrace line, or a model capture line
/// (`[000] event: fields`, `[   ] event: fields`). `None` for anything else.
pub fn split_event(line: &str) -> Option<(String, String)> {
    split_line(line).map(|(e, f, _)| (e, f))
}

/// [`split_event`] and the task's pid, which only an ftrace line has.
fn split_line(line: &str) -> Option<(String, String, Option<u32>)> {
    if let Ok(t) = TraceLine::parse(line) {
        return Some((t.event, t.fields, Some(t.pid)));
    }
    let rest = line.trim_start();
    let rest = rest.strip_prefix('[')?;
    let (_, rest) = rest.split_once("] ")?;
    let (event, fields) = rest.split_once(':')?;
    if event.is_empty()
        || !event
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return None;
    }
    Some((
        event.to_owned(),
        fields.strip_prefix(' ').unwrap_or(fields).to_owned(),
        None,
    ))
}

/// `dev rwbs ... sector + n ...` of a block event: `(major, minor, rwbs, sector, n)`.
fn block_fields(fields: &str) -> Option<((u32, u32), String, u64, u64)> {
    let t: Vec<&str> = fields.split_whitespace().collect();
    let (ma, mi) = t.first()?.split_once(',')?;
    let dev = (ma.parse().ok()?, mi.parse().ok()?);
    let rwbs = (*t.get(1)?).to_owned();
    let plus = t.iter().position(|&x| x == "+")?;
    let sector = t.get(plus.checked_sub(1)?)?.parse().ok()?;
    let n = t.get(plus + 1)?.parse().ok()?;
    Some((dev, rwbs, sector, n))
}

/// The value after `key` (`key=` or `key `) up to a space, `:` or the end.
fn value_after<'a>(fields: &'a str, keys: &[&str]) -> Option<&'a str> {
    for k in keys {
        if let Some(i) = fields.find(k) {
            let v = &fields[i + k.len()..];
            let end = v.find([' ', ':']).unwrap_or(v.len());
            return Some(&v[..end]);
        }
    }
    None
}

/// The work item's identity: the `%p` of `work struct` (kernel) or biosim's `work=N`.
fn work_token(fields: &str) -> Option<&str> {
    value_after(fields, &["work struct=", "work struct ", "work="])
}

/// Normalizes a trace (a tracefs `trace` file or a model capture, one event per line) for a
/// loop device set up as `setup` says. Errors: `(line, what)` for a kept event whose fields do not
/// parse.
pub fn events(text: &str, setup: &Setup) -> Result<Vec<Ev>, (usize, String)> {
    let loop_dev = (7u32, setup.loop_number);
    let wq = format!("loop{}", setup.loop_number);
    let mut works: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') {
            continue;
        }
        let Some((event, fields, pid)) = split_line(line) else {
            continue;
        };
        let bad = |what: &str| (i + 1, format!("{event}: {what}: {fields:?}"));
        let what = if event.starts_with("block_") {
            if !super::TRACED_EVENTS.iter().any(|e| e.ends_with(&event)) {
                continue;
            }
            let (dev, rwbs, sector, n) =
                block_fields(&fields).ok_or_else(|| bad("no DEV RWBS SECTOR + N"))?;
            // A completion's `[error]` is compared: shown when it is not 0, so a request that
            // fails on one side only differs.
            let err = if event.ends_with("_complete") {
                let e = fields
                    .trim_end()
                    .rsplit_once('[')
                    .and_then(|(_, e)| e.strip_suffix(']'))
                    .ok_or_else(|| bad("no [error]"))?;
                if e == "0" {
                    String::new()
                } else {
                    format!(" error={e}")
                }
            } else {
                String::new()
            };
            if dev == loop_dev {
                format!("loop {rwbs} {sector}+{n}{err}")
            } else if dev == setup.lower {
                let Some(fs) = setup.extents.iter().find_map(|&(logical, phys, len)| {
                    (sector >= phys && sector + n <= phys + len).then(|| logical + sector - phys)
                }) else {
                    continue;
                };
                format!("lower {rwbs} {fs}+{n}{err}")
            } else {
                continue;
            }
        } else if event.starts_with("workqueue_") {
            let token = work_token(&fields).ok_or_else(|| bad("no work struct"))?;
            let function = value_after(&fields, &["function=", "function "])
                .ok_or_else(|| bad("no function"))?;
            if event == "workqueue_queue_work" {
                let name =
                    value_after(&fields, &["workqueue="]).ok_or_else(|| bad("no workqueue"))?;
                if name != wq {
                    continue;
                }
                if !works.iter().any(|w| w == token) {
                    works.push(token.to_owned());
                }
                let req_cpu =
                    value_after(&fields, &["req_cpu="]).ok_or_else(|| bad("no req_cpu"))?;
                let cpu = value_after(&fields, &[" cpu="]).ok_or_else(|| bad("no cpu"))?;
                format!("{function} loop req_cpu={req_cpu} cpu={cpu}")
            } else if works.iter().any(|w| w == token) {
                function.to_owned()
            } else {
                continue;
            }
        } else {
            continue;
        };
        out.push((Ev { event, what }, pid));
    }
    Ok(worker_exit_first(out))
}

/// Moves each `workqueue_execute_end` up to right after the worker's own last event before it.
/// Between the two, other tasks may run (ksoftirqd ending the loop request when the worker's
/// `cond_resched()` lets it): which goes first is the scheduler's choice, not loop.c's, so the
/// canonical order is "the worker returns first". Only lines with a pid (ftrace lines) are
/// reordered; the model's worker runs as one step, so its end already comes right after its own
/// events.
fn worker_exit_first(mut evs: Vec<(Ev, Option<u32>)>) -> Vec<Ev> {
    let mut i = 0;
    while i < evs.len() {
        if let (Some(pid), "workqueue_execute_end") = (evs[i].1, evs[i].0.event.as_str()) {
            let start = (0..i)
                .rev()
                .find(|&j| evs[j].1 == Some(pid) && evs[j].0.event == "workqueue_execute_start");
            if let Some(s) = start {
                let last_own = (s..i).rev().find(|&j| evs[j].1 == Some(pid)).unwrap_or(s);
                let end = evs.remove(i);
                evs.insert(last_own + 1, end);
            }
        }
        i += 1;
    }
    evs.into_iter().map(|(e, _)| e).collect()
}

/// [`events`] of a live case's `trace` file, which must be one (its `# tracer:` header first).
pub fn live_events(text: &str, setup: &Setup) -> Result<Vec<Ev>, (usize, String)> {
    crate::report::ftrace::parse_trace(text).map_err(|(line, e)| (line, e.to_string()))?;
    events(text, setup)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> Setup {
        Setup {
            kernel: "6.18".into(),
            loop_number: 0,
            lower: (254, 0),
            nr_blocking_writes: false,
            extents: vec![(64, 41107520, 16)],
        }
    }

    /// The committed live trace of two writes and two reads (tests/data/tracefs-6.18/).
    #[test]
    fn the_reference_trace_normalizes_to_the_loop_path_only() {
        let text =
            include_str!("../../../../tests/data/tracefs-6.18/loop-dio-2writes-2reads.trace");
        let evs = live_events(text, &setup()).unwrap();
        let lines: Vec<String> = evs.iter().map(Ev::to_string).collect();
        let first_write = [
            "block_bio_queue loop WS 64+8",
            "block_rq_issue loop WS 64+8",
            "workqueue_queue_work loop_rootcg_workfn loop req_cpu=256 cpu=-1",
            "workqueue_activate_work loop_rootcg_workfn",
            "workqueue_execute_start loop_rootcg_workfn",
            "block_bio_queue lower WS 64+8",
            "block_rq_insert lower WS 64+8",
            "block_rq_issue lower WS 64+8",
            "workqueue_execute_end loop_rootcg_workfn",
            "block_rq_complete lower WS 64+8",
            "block_rq_complete loop WS 64+8",
        ];
        assert_eq!(&lines[..11], &first_write[..]);
        // dd's own reads of its binary (254,0 RA 12581400 ...) and iomap_dio_complete_work on
        // dio/vda are not the loop path.
        assert!(lines
            .iter()
            .all(|l| !l.contains("RA") && !l.contains("iomap")));
        assert_eq!(lines.len(), 44, "{lines:#?}");
    }

    #[test]
    fn model_capture_lines_split_like_kernel_lines() {
        assert_eq!(
            split_event(
                "[001] workqueue_execute_start: work=2 function=loop_rootcg_workfn pool=Unbound"
            ),
            Some((
                "workqueue_execute_start".into(),
                "work=2 function=loop_rootcg_workfn pool=Unbound".into()
            ))
        );
        assert_eq!(
            split_event("     1 j=0     worker pool/unbound on CPU1: ran"),
            None
        );
    }

    #[test]
    fn a_completion_that_failed_on_one_side_differs() {
        let ok = "[000] block_rq_complete: 7,0 WS () 64 + 8 be,0,4 [0]";
        let failed = "[000] block_rq_complete: 7,0 WS () 64 + 8 be,0,4 [-95]";
        let s = setup();
        let a = events(ok, &s).unwrap();
        let b = events(failed, &s).unwrap();
        assert_eq!(a[0].to_string(), "block_rq_complete loop WS 64+8");
        assert_eq!(b[0].to_string(), "block_rq_complete loop WS 64+8 error=-95");
    }

    #[test]
    fn a_kept_event_with_bad_fields_is_an_error_naming_the_line() {
        let text =
            "# tracer: nop\n              dd-1   [000] .....  1.000001: block_rq_issue: 7,0 WS\n";
        let (line, what) = live_events(text, &setup()).unwrap_err();
        assert_eq!(line, 2);
        assert!(what.contains("block_rq_issue"), "{what}");
    }
}
