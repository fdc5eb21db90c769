//! What a live trace of the `cpuhp` events (include/trace/events/cpuhp.h) says: the callbacks run,
//! in order, and from a clean offline and online the callback map of the model's table.
//!
//! - `cpuhp_enter` / `cpuhp_multi_enter`: `" cpu: %04u target: %3d step: %3d (%ps)"`, fired by
//!   `cpuhp_invoke_callback()` before a callback (once per instance for a multi-instance step);
//!   the direction is `target >= step` (up to a target, down below it).
//! - `cpuhp_exit`: `" cpu: %04u  state: %3d step: %3d ret: %d"`.
//! - `cpuhp_kick_ap_work()` traces itself as a `cpuhp_enter` of the BP side (`step` is the state the
//!   offline started from, its exit carries the operation's result); it is no callback and is left
//!   out.
//!
//! What the trace cannot show: an injected `hotplug/fail` returns before `trace_cpuhp_enter()`;
//! the STARTING/DYING callbacks run while the CPU is not in `cpu_online_mask`, where tracepoints do
//! not fire (`DECLARE_TRACE()`'s `cpu_online(raw_smp_processor_id())` condition); a multi-instance
//! step with no instances runs nothing.

use hotplug::{CallbackInfo, CallbackMap, StateId, StepCallbacks};

use super::recording::Recording;
use super::{Case, Op, Ran};
use crate::report::ftrace::line::TraceLine;

/// The function `cpuhp_kick_ap_work()` names in its own `cpuhp_enter`.
pub const KICK_AP_WORK: &str = "cpuhp_kick_ap_work";

/// One `cpuhp` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `cpuhp_enter` (`multi: false`) or `cpuhp_multi_enter`.
    Enter {
        /// `cpuhp_multi_enter`.
        multi: bool,
        /// The CPU being plugged.
        cpu: u32,
        /// `st->target`.
        target: i32,
        /// The step.
        step: i32,
        /// The callback's function.
        function: String,
    },
    /// `cpuhp_exit`.
    Exit {
        /// The CPU being plugged.
        cpu: u32,
        /// `st->state` after the callback.
        state: i32,
        /// The step.
        step: i32,
        /// What it returned.
        ret: i32,
    },
}

/// Reads `key: value` pairs of a cpuhp event's fields in order.
fn fields<'a>(text: &'a str, keys: &[&str]) -> Option<Vec<&'a str>> {
    let mut w = text.split_whitespace();
    let mut out = Vec::new();
    for k in keys {
        if w.next()? != *k {
            return None;
        }
        out.push(w.next()?);
    }
    out.extend(w);
    Some(out)
}

fn num<T: std::str::FromStr>(s: &str) -> Option<T> {
    s.parse().ok()
}

impl Event {
    /// The event of a trace line; an error for a cpuhp event whose fields do not read as its
    /// print fmt and for any other event (a calibration enables the cpuhp events only).
    pub fn from_line(l: &TraceLine) -> Result<Event, String> {
        let bad = || format!("cpuhp event fields not as its print fmt: {l}");
        match l.event.as_str() {
            "cpuhp_enter" | "cpuhp_multi_enter" => {
                let f = fields(&l.fields, &["cpu:", "target:", "step:"]).ok_or_else(bad)?;
                let [cpu, target, step, func] = f[..] else {
                    return Err(bad());
                };
                let function = func
                    .strip_prefix('(')
                    .and_then(|f| f.strip_suffix(')'))
                    .ok_or_else(bad)?;
                Ok(Event::Enter {
                    multi: l.event == "cpuhp_multi_enter",
                    cpu: num(cpu).ok_or_else(bad)?,
                    target: num(target).ok_or_else(bad)?,
                    step: num(step).ok_or_else(bad)?,
                    function: function.to_owned(),
                })
            }
            "cpuhp_exit" => {
                let f = fields(&l.fields, &["cpu:", "state:", "step:", "ret:"]).ok_or_else(bad)?;
                let [cpu, state, step, ret] = f[..] else {
                    return Err(bad());
                };
                Ok(Event::Exit {
                    cpu: num(cpu).ok_or_else(bad)?,
                    state: num(state).ok_or_else(bad)?,
                    step: num(step).ok_or_else(bad)?,
                    ret: num(ret).ok_or_else(bad)?,
                })
            }
            e if e.starts_with("cpuhp_") => Err(format!("unknown cpuhp event `{e}`: {l}")),
            e => Err(format!(
                "a `{e}` event: a calibration trace holds the cpuhp events only: {l}"
            )),
        }
    }
}

/// The cpuhp events of a trace's text (`#` header lines and blank lines skipped), all of `cpu`.
/// Errors name the 1-based line.
pub fn events(text: &str, cpu: u32) -> Result<Vec<Event>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let at = |e: String| format!("line {}: {e}", i + 1);
        let l = TraceLine::parse(line).map_err(|e| at(e.to_string()))?;
        let ev = Event::from_line(&l).map_err(at)?;
        let c = match &ev {
            Event::Enter { cpu, .. } | Event::Exit { cpu, .. } => *cpu,
        };
        if c != cpu {
            return Err(at(format!(
                "an event of CPU{c}, not of CPU{cpu} (another hotplug operation ran meanwhile)"
            )));
        }
        out.push(ev);
    }
    Ok(out)
}

/// The callbacks a trace of `op` shows, in the order they were entered (consecutive
/// `cpuhp_multi_enter`s of one step and direction are one [`Ran`] with their count), and the
/// callbacks that returned an error themselves (`(step, ret)` of a `cpuhp_exit` with `ret` != 0
/// that is not `cpuhp_kick_ap_work()`'s).
pub fn callbacks(events: &[Event], op: Op) -> (Vec<Ran>, Vec<(i32, i32)>) {
    let mut ran: Vec<Ran> = Vec::new();
    let mut failed = Vec::new();
    let mut kick_steps = Vec::new();
    let mut last_multi = false;
    for ev in events {
        match ev {
            Event::Enter { function, step, .. } if function == KICK_AP_WORK => {
                kick_steps.push(*step);
                last_multi = false;
            }
            Event::Enter {
                multi,
                target,
                step,
                function,
                ..
            } => {
                let bringup = target >= step;
                if let Some(prev) = ran.last_mut().filter(|p| {
                    *multi
                        && last_multi
                        && p.step == *step
                        && p.bringup == bringup
                        && p.function == *function
                }) {
                    prev.instances += 1;
                    continue;
                }
                last_multi = *multi;
                ran.push(Ran {
                    step: *step,
                    bringup,
                    rollback: bringup != op.bringup(),
                    function: function.clone(),
                    instances: 1,
                });
            }
            Event::Exit { step, ret, .. } => {
                if *ret != 0 && !kick_steps.contains(step) {
                    failed.push((*step, *ret));
                }
            }
        }
    }
    (ran, failed)
}

/// The callback map of the model's table from a clean offline (`down`, every callback a teardown)
/// and a clean online (`up`, every one a startup) of the CPU. Errors: a clean run that rolled
/// back or had a callback fail, or one step and direction with two functions.
pub fn callback_map(down: &[Event], up: &[Event]) -> Result<CallbackMap, String> {
    let mut map = CallbackMap::new();
    for (op, evs) in [(Op::Down, down), (Op::Up, up)] {
        let (ran, failed) = callbacks(evs, op);
        if let Some((step, ret)) = failed.first() {
            return Err(format!(
                "the clean {} had step {step} fail ({ret}); it is not a clean run",
                op.name()
            ));
        }
        for r in ran {
            if r.rollback {
                return Err(format!(
                    "the clean {} rolled back (step {} {}); it is not a clean run",
                    op.name(),
                    r.step,
                    if r.bringup { "startup" } else { "teardown" }
                ));
            }
            let entry: &mut StepCallbacks = map.entry(StateId(r.step)).or_default();
            let slot = if r.bringup {
                &mut entry.startup
            } else {
                &mut entry.teardown
            };
            if let Some(old) = slot {
                return Err(format!(
                    "step {} ran its {} twice in the clean {} ({} and {})",
                    r.step,
                    if r.bringup { "startup" } else { "teardown" },
                    op.name(),
                    old.function,
                    r.function
                ));
            }
            *slot = Some(CallbackInfo {
                function: r.function,
                multi_instance: r.instances > 1 || is_multi(evs, r.step),
                instances: r.instances,
            });
        }
    }
    Ok(map)
}

/// The function name of a step known only from `hotplug/fail` (see [`add_silent_steps`]).
pub const SILENT: &str = "-";

/// Adds the steps the trace cannot show to `map`: multi-instance steps with no instance. Their
/// function pointer is set, so `fail_store()` accepts them and `cpuhp_next_state()` stops there
/// (an injected failure fires), but `cpuhp_invoke_callback()` runs and traces nothing
/// (`iommu/iova:dead`, `block/zram:prepare` without a zram device, `padata:online`,
/// `io-wq/online` without io_uring workers).
///
/// A value the live `fail_store()` accepted (`accepted`) at a step the clean traces did not show
/// is such a step. It has a startup if the online with the failure armed there consumed it
/// (`up_consumed`), a teardown if the offline did (`down_consumed`, only asked for AP states:
/// `fail_store()` refuses the others while the CPU is up), and a teardown if it has no startup
/// (`fail_store()` accepts only a step with a callback). A PREPARE step's teardown is unknown when
/// it has a startup: with no instance and the failure already consumed it is invisible either way.
pub fn add_silent_steps(
    map: &mut CallbackMap,
    accepted: &[i32],
    up_consumed: impl Fn(i32) -> bool,
    down_consumed: impl Fn(i32) -> bool,
) {
    let silent = || {
        Some(CallbackInfo {
            function: SILENT.to_owned(),
            multi_instance: true,
            instances: 0,
        })
    };
    for &v in accepted {
        let state = StateId(v);
        if v == -1 || map.contains_key(&state) {
            continue;
        }
        let startup = up_consumed(v);
        let teardown = down_consumed(v) || !startup;
        map.insert(
            state,
            StepCallbacks {
                startup: if startup { silent() } else { None },
                teardown: if teardown { silent() } else { None },
            },
        );
    }
}

/// The callback map of a recording's table: [`callback_map`] of its clean traces plus
/// [`add_silent_steps`] from its `fail` sweeps and cases.
pub fn recording_map(rec: &Recording) -> Result<CallbackMap, String> {
    let down = events(&rec.clean_down, rec.cpu).map_err(|e| format!("clean-down.trace: {e}"))?;
    let up = events(&rec.clean_up, rec.cpu).map_err(|e| format!("clean-up.trace: {e}"))?;
    let mut map = callback_map(&down, &up)?;
    let accepted: Vec<i32> = rec
        .fail_writes
        .iter()
        .filter(|w| w.online.is_ok() || w.offline.is_ok())
        .map(|w| w.value)
        .collect();
    let consumed = |op: Op, v: i32| {
        rec.cases.iter().any(|c| {
            c.case == Case { op, fail: v } && c.observed.fail_write.is_ok() && c.observed.fail == -1
        })
    };
    add_silent_steps(
        &mut map,
        &accepted,
        |v| consumed(Op::Up, v),
        |v| consumed(Op::Down, v),
    );
    Ok(map)
}

/// Whether `step` showed as `cpuhp_multi_enter` in `evs`.
fn is_multi(evs: &[Event], step: i32) -> bool {
    evs.iter()
        .any(|e| matches!(e, Event::Enter { multi: true, step: s, .. } if *s == step))
}

/// The map as a text table for the recording (`callbacks.txt`): one line per step and direction,
/// `STEP startup|teardown FUNCTION [multi xN]`.
pub fn render_map(map: &CallbackMap) -> String {
    let mut out = String::new();
    for (state, cbs) in map {
        for (dir, cb) in [("startup", &cbs.startup), ("teardown", &cbs.teardown)] {
            if let Some(cb) = cb {
                out.push_str(&format!("{:3} {dir} {}", state.0, cb.function));
                if cb.multi_instance {
                    out.push_str(&format!(" multi x{}", cb.instances));
                }
                if cb.instances == 0 {
                    out.push_str(" (no instance: not traced, found by hotplug/fail)");
                }
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/data/tracefs-6.18")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn the_reference_clean_trace_gives_the_callback_map() {
        let text = reference("down-up-clean.trace");
        let evs = events(&text, 1).unwrap();
        // The reference keeps the offline and the online in one file: split at the first startup.
        let split = evs
            .iter()
            .position(|e| {
                matches!(
                    e,
                    Event::Enter {
                        target: 236,
                        step: 1,
                        ..
                    }
                )
            })
            .unwrap();
        let map = callback_map(&evs[..split], &evs[split..]).unwrap();
        let m = |s: i32| map.get(&StateId(s)).unwrap();
        assert_eq!(m(83).startup.as_ref().unwrap().function, "cpuhp_bringup_ap");
        assert_eq!(m(83).teardown.as_ref().unwrap().function, "finish_cpu");
        assert_eq!(m(144).teardown.as_ref().unwrap().function, "takedown_cpu");
        assert!(
            m(188).teardown.is_none(),
            "random:online has a startup only"
        );
        let bmq = m(24).teardown.as_ref().unwrap();
        assert!(bmq.multi_instance);
        assert_eq!(bmq.instances, 9);
        assert!(
            !map.contains_key(&StateId(236)),
            "cpuhp_kick_ap_work is no callback"
        );
        assert!(render_map(&map).contains(" 24 teardown blk_mq_hctx_notify_dead multi x9\n"));
    }

    #[test]
    fn a_rolled_back_offline_shows_its_rollback_and_no_injected_step() {
        let evs = events(&reference("down-fail-187.trace"), 1).unwrap();
        let (ran, failed) = callbacks(&evs, Op::Down);
        assert!(
            failed.is_empty(),
            "the -11 of cpuhp_kick_ap_work is the operation's: {failed:?}"
        );
        assert!(!ran.iter().any(|r| r.step == 187));
        let first_rb = ran.iter().position(|r| r.rollback).unwrap();
        assert_eq!(
            (ran[first_rb].step, ran[first_rb].function.as_str()),
            (188, "random_online_cpu")
        );
        assert!(ran[..first_rb].iter().all(|r| !r.bringup));
        assert!(ran[first_rb..].iter().all(|r| r.bringup && r.rollback));
        // The clean map refuses a trace that rolled back.
        assert!(callback_map(&evs, &[]).unwrap_err().contains("rolled back"));
    }

    #[test]
    fn malformed_cpuhp_events_are_errors_naming_the_line() {
        let line = "         cpuhp/1-20      [001] .....  1044.354725: cpuhp_enter: cpu: 0001 target: x step: 202 (f)";
        assert!(events(line, 1)
            .unwrap_err()
            .starts_with("line 1: cpuhp event fields"));
        let other = "         cpuhp/1-20      [001] .....  1044.354725: cpuhp_enter: cpu: 0000 target: 1 step: 202 (f)";
        assert!(events(other, 1).unwrap_err().contains("an event of CPU0"));
        let unknown = "         cpuhp/1-20      [001] .....  1044.354725: cpuhp_leave: cpu: 0001";
        assert!(events(unknown, 1)
            .unwrap_err()
            .contains("unknown cpuhp event"));
    }
}
