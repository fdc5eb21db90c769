//! A tracefs `trace` file (kernel/trace/trace.c `print_trace_header()`, trace_output.c): its
//! header and its lines. The line grammar, `TASK-PID [CPU] FLAGS TIMESTAMP: event: fields`, is
//! [`hotplug::tracefs::TraceLine`] (the lowest crate of the workspace, so the hotplug crate's own
//! tests parse with it too), re-exported here with its error.

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

pub use hotplug::tracefs::{ParseError as LineError, TraceLine};

/// Parses a whole `trace` file: `#` lines are the header (it must start with `# tracer: `), every
/// other non-empty line an event. Errors name the 1-based line number.
pub fn parse_trace(text: &str) -> Result<Vec<TraceLine>, (usize, LineError)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if i == 0 && !line.starts_with("# tracer: ") {
            return Err((
                1,
                LineError {
                    line: line.to_owned(),
                    reason: "no `# tracer:` header",
                },
            ));
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
            assert_eq!(TraceLine::parse(l).unwrap_err().reason, what, "{l}");
        }
        assert_eq!(parse_trace("x\n").unwrap_err().0, 1);
    }
}
