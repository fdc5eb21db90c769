//! Scenario files are user input: whatever the text, `Scenario::parse` either accepts it or returns
//! an error naming the file (and the line, for a line's mistake), and an accepted scenario runs to
//! a verdict. Nothing panics. The generator mixes the real grammar with boundary numbers (0, the
//! last CPU, 64/65 CPUs, the hotplug state range and its ends for `fail=`, `fail` and `target`,
//! values that wrap a `u32` or an `i32`) and free junk.
//!
//! The checker's own power is shown by `the_harness_reports_a_panic`: the same harness, given a
//! runner that panics, fails.

use bio_core::block::complete_in_task::{Knob, Variant};
use bio_core::drivers::block::loop_drv::{LoopKnob, LoopVariant};
use bio_sim::machine::transition::Transition;
use bio_sim::scenario::{RunError, Scenario, ScenarioError};
use proptest::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

const FILE: &str = "fuzz.scn";

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..4).prop_map(|n| n.to_string()),
        Just("63".to_owned()),
        Just("64".to_owned()),
        Just("65".to_owned()),
        Just("187".to_owned()),
        Just("192".to_owned()),
        Just("197".to_owned()),
        Just("236".to_owned()),
        Just("237".to_owned()),
        Just("250".to_owned()),
        Just("-1".to_owned()),
        Just("4294967297".to_owned()),
        Just("4294967546".to_owned()),
        Just("18446744073709551615".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("0x10".to_owned()),
    ]
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        number(),
        prop::sample::select(
            Variant::names()
                .chain(LoopVariant::names())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        ),
        prop::sample::select(vec![
            "v8",
            "none",
            "voluntary",
            "full",
            "lazy",
            "rt",
            "y",
            "n",
            "maybe",
            "hardirq",
            "softirq",
            "atomic",
            "task",
            "nmi",
            "plain",
            "flag",
            "dynamic",
            "pool",
            "unbound",
            "clean",
            "once",
            "stranded",
            "bug",
            "warn",
            "no-quiescence",
            "requeue_on_online=true",
            "delay=0",
            "list=llist",
            "x=y",
            "=",
            "fail=",
            "fail=187",
            "fail=-1",
            "fail=999",
            "fail=abc",
        ])
        .prop_map(str::to_owned),
        "\\PC{0,8}",
    ]
}

/// A grammatical line whose values are mostly in range.
fn header_line() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(Variant::names().collect::<Vec<_>>())
            .prop_map(|v| format!("variant {v}")),
        (
            prop::sample::select(Knob::SPECS.to_vec()),
            any::<prop::sample::Index>()
        )
            .prop_map(|((k, values), i)| format!("knob {k}={}", i.get(values.examples()))),
        (
            prop::sample::select(LoopVariant::names().collect::<Vec<_>>()),
            prop::sample::select(vec!["sparse", "prealloc", "refusing", "blockdev"]),
            prop::sample::select(vec![0u64, 4096, 65536, 1 << 20]),
        )
            .prop_map(|(v, b, o)| format!("loop {v} {b} offset={o}")),
        (
            prop::sample::select(LoopKnob::NAMES.to_vec()),
            any::<bool>()
        )
            .prop_map(|(k, b)| format!("loop_knob {k}={b}")),
        (1u32..5).prop_map(|n| format!("online {n}")),
        prop::sample::select(vec!["none", "voluntary", "full", "lazy", "rt"])
            .prop_map(|m| format!("preempt {m}")),
        prop::sample::select(vec![
            "preempt_count y",
            "preempt_count n",
            "preempt_rcu y",
            "preempt_rcu n"
        ])
        .prop_map(str::to_owned),
        prop::sample::select(vec![100u32, 250, 300, 1000]).prop_map(|h| format!("hz {h}")),
        any::<u64>().prop_map(|n| format!("seed {n}")),
        prop::sample::select(vec!["pool", "unbound"]).prop_map(|r| format!("rescuer {r}")),
    ]
}

/// A transition line, a quarter of the time written `try …`.
fn transition_line(nr_cpus: u32) -> impl Strategy<Value = String> {
    (bare_transition_line(nr_cpus), 0u8..4).prop_map(
        |(t, p)| {
            if p == 0 {
                format!("try {t}")
            } else {
                t
            }
        },
    )
}

fn bare_transition_line(nr_cpus: u32) -> impl Strategy<Value = String> {
    let cpu = 0..nr_cpus;
    let state = prop::sample::select(vec![0i32, 58, 61, 63, 83, 144, 187, 192, 197, 236]);
    prop_oneof![
        4 => (cpu.clone(), prop::sample::select(vec!["hardirq", "softirq", "atomic", "task"]),
              prop::sample::select(vec!["plain", "flag", "dynamic"]))
            .prop_map(|(c, x, k)| format!("complete {c} {x} {k}")),
        2 => cpu.clone().prop_map(|c| format!("worker {c}")),
        2 => Just("tick".to_owned()),
        2 => (cpu.clone(), any::<bool>(), prop::option::of(state))
            .prop_map(|(c, up, f)| format!(
                "{} {c}{}",
                if up { "cpu_up" } else { "cpu_down" },
                f.map(|s| format!(" fail={s}")).unwrap_or_default()
            )),
        3 => Just("step".to_owned()),
        2 => (cpu.clone(), hotplug_state()).prop_map(|(c, s)| format!("fail {c} {s}")),
        2 => (cpu.clone(), hotplug_state()).prop_map(|(c, s)| format!("target {c} {s}")),
        1 => cpu.clone().prop_map(|c| format!("need_resched {c}")),
        3 => (cpu.clone(), prop::sample::select(vec!["read", "write", "discard"]), 0u32..20, any::<u8>())
            .prop_map(|(c, o, b, f)| if o == "write" { format!("io {c} {o} {b} fill={f}") } else { format!("io {c} {o} {b}") }),
        2 => cpu.prop_map(|c| format!("loop_worker {c}")),
    ]
}

/// A `fail`/`target` state: the range's ends and just past them (-2, -1, 0, 236, 237), the atomic
/// section and `CPUHP_BRINGUP_CPU` (83..=143, refused by both), `cant_stop` `cpu:teardown` (144), an
/// unnamed state without callbacks (160), the named states around the batcher's online state
/// (186, 187, 196, 197), values past `i32`, and not a number.
fn hotplug_state() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(vec![
            -2i64, -1, 0, 1, 58, 63, 83, 87, 143, 144, 150, 160, 186, 187, 196, 197, 235, 236,
            237, 2147483647, 2147483648, -2147483649,
        ])
        .prop_map(|n| n.to_string()),
        1 => prop::sample::select(vec!["workqueue:online", "x", "0x10", "+1", "", "1.5"])
            .prop_map(str::to_owned),
    ]
}

/// A line with the grammar's keywords and arbitrary words, or free text.
fn junk_line() -> impl Strategy<Value = String> {
    let keyword = prop::sample::select(vec![
        "variant",
        "knob",
        "cpus",
        "online",
        "preempt",
        "preempt_count",
        "preempt_rcu",
        "hz",
        "seed",
        "rescuer",
        "complete",
        "worker",
        "tick",
        "cpu_down",
        "cpu_up",
        "step",
        "fail",
        "target",
        "try fail",
        "try target",
        "need_resched",
        "settle",
        "expect",
        "loop",
        "loop_knob",
        "io",
        "loop_worker",
        "try",
        "try complete",
        "try cpus",
        "try expect",
        "#",
        "",
    ]);
    prop_oneof![
        4 => (keyword, prop::collection::vec(word(), 0..4))
            .prop_map(|(k, ws)| format!("{k} {}", ws.join(" "))),
        1 => "\\PC{0,30}",
        1 => prop::sample::select(vec!["ti\0ck", "try", "try try tick", "tick\u{feff}", "complete 0\thardirq  flag"]).prop_map(str::to_owned),
    ]
}

/// A scenario in the file's order (header, transitions, settle, expectations), then, half the
/// time, one junk line put anywhere.
fn scenario_text() -> impl Strategy<Value = String> {
    let tail = prop_oneof![
        Just(String::new()),
        (0u64..3000).prop_map(|n| format!("settle {n}")),
        Just("settle\nexpect clean".to_owned()),
        prop::sample::select(vec![
            "once",
            "task",
            "stranded",
            "off-cpu",
            "bug",
            "no-quiescence"
        ])
        .prop_map(|i| format!("expect {i}")),
    ];
    (1u32..5)
        .prop_flat_map(move |n| {
            (
                Just(n),
                prop::collection::vec(header_line(), 0..4),
                prop::collection::vec(transition_line(n), 0..24),
                tail.clone(),
                prop::option::of((junk_line(), any::<prop::sample::Index>())),
            )
        })
        .prop_map(|(n, header, transitions, tail, junk)| {
            let mut lines = vec![format!("cpus {n}")];
            lines.extend(header.into_iter().chain(transitions));
            lines.push(tail);
            if let Some((j, at)) = junk {
                let i = at.index(lines.len() + 1);
                lines.insert(i, j);
            }
            lines.join("\n")
        })
}

/// Whether `e` names `text`'s file and a place in it: a line of the text (or the one past its
/// end, where a missing transition was expected), and a column within that line (or just past
/// its end), or none.
fn says_where(e: &ScenarioError, text: &str) -> Result<(), String> {
    let msg = e.to_string();
    if !msg.starts_with(FILE) || e.message.is_empty() {
        return Err(format!("an error that does not say where: {msg:?}"));
    }
    let lines: Vec<&str> = text.lines().collect();
    if e.line > lines.len() + 1 {
        return Err(format!(
            "line {} of a {}-line text: {msg:?}",
            e.line,
            lines.len()
        ));
    }
    if e.line > 0 && e.column > 0 {
        let width = lines.get(e.line - 1).map_or(0, |l| l.chars().count());
        if e.column > width + 1 {
            return Err(format!(
                "column {} of a {width}-character line: {msg:?}",
                e.column
            ));
        }
        let want = format!("{FILE}:{}:{}: ", e.line, e.column);
        if !msg.starts_with(&want) {
            return Err(format!("{msg:?} does not start with {want:?}"));
        }
    }
    Ok(())
}

/// Parses and, if accepted, runs `text`; `Err` describes a broken promise (a panic, an error that
/// does not name the file, the line and the column).
fn check(text: &str, run: impl FnOnce(&Scenario)) -> Result<(), String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| match Scenario::parse(text, FILE) {
        Ok(mut s) => {
            round_trips(&s)?;
            // The step budget is the user's to choose; keep the fuzzer fast.
            s.settle = s.settle.min(500);
            run(&s);
            Ok(())
        }
        Err(e) => says_where(&e, text),
    }));
    match outcome {
        Ok(r) => r,
        Err(p) => Err(format!(
            "panicked: {}",
            p.downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("?")
        )),
    }
}

/// Every accepted transition (but the loop device's, which need its header) written back with
/// `to_scenario_line` parses to itself.
fn round_trips(s: &Scenario) -> Result<(), String> {
    for (_, t) in &s.transitions {
        if matches!(t, Transition::LoopIo { .. } | Transition::LoopWorker { .. }) {
            continue;
        }
        let line = t.to_scenario_line();
        let text = format!("cpus {}\n{line}\n", s.config.nr_cpus);
        match Scenario::parse(&text, FILE) {
            Ok(back) if back.transitions.first().map(|(_, b)| b) == Some(t) => {}
            other => return Err(format!("{t:?} wrote `{line}`, which parses to {other:?}")),
        }
    }
    Ok(())
}

fn run_to_verdict(s: &Scenario) {
    // A `SimError` is a clear refusal (e.g. a machine the kernel config cannot build); a refused
    // transition names a line of the scenario that holds a transition not written `try`. Either
    // way no panic.
    match s.run() {
        Ok(r) => {
            assert!(
                r.trace.contains("# biosim"),
                "the trace opens with its header"
            );
            assert_eq!(
                r.skipped.len(),
                r.trace.matches("   (try: skipped: ").count(),
                "every skip is in the trace"
            );
            for sk in &r.skipped {
                let line: usize = sk["line ".len()..]
                    .split(':')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(
                    s.tried.contains(&line),
                    "{sk}: a skip of a line not written try"
                );
            }
        }
        Err(RunError::Refused(e)) => {
            assert!(
                e.to_string().starts_with(&format!("{FILE}:{}:", e.line)),
                "{e}"
            );
            assert!(
                s.transitions.iter().any(|(l, _)| *l == e.line) && !s.tried.contains(&e.line),
                "{e}: not a transition written without try"
            );
        }
        Err(RunError::Sim(_)) => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_text_is_accepted_or_refused_with_its_place_and_never_panics(text in scenario_text()) {
        if let Err(e) = check(&text, run_to_verdict) {
            prop_assert!(false, "{e}\n--- scenario ---\n{text}");
        }
    }
}

#[test]
fn the_harness_reports_a_panic() {
    // Hide the expected panic's message from the test output.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = check("cpus 2\ncomplete 1 hardirq flag\n", |_| {
        panic!("simulated crash")
    });
    std::panic::set_hook(hook);
    assert_eq!(r, Err("panicked: simulated crash".to_owned()));
    assert_eq!(
        check("cpus 2\ncomplete 1 hardirq flag\n", run_to_verdict),
        Ok(())
    );
}

#[test]
fn values_that_wrap_a_u32_are_refused_not_wrapped() {
    // `as u32` once turned `online 4294967297` into `online 1` and `hz 4294967546` into 250.
    for (text, says) in [
        ("online 4294967297\n", "fuzz.scn:1:8: online 4294967297"),
        (
            "hz 4294967546\n",
            "fuzz.scn:1:4: unsupported CONFIG_HZ=4294967546",
        ),
    ] {
        let e = Scenario::parse(text, FILE).unwrap_err().to_string();
        assert!(e.starts_with(says), "{e}");
    }
}
