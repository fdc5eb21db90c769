//! Tests of the `locks` line (`lib/locking-selftest.c`-style sequences through lockdep): the
//! parser's round trip and refusals, and each `docs/scenarios/detectors/lockdep-*.scn` run to
//! its report.

use super::*;
use crate::machine::locks::{LockContext, LockKind};
use crate::machine::oracle::Invariant;
use bio_core::kernel::ReportKind;

/// A scenario file of `docs/scenarios/detectors/`, loaded.
fn detector_scenario(name: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/scenarios/detectors")
        .join(name);
    Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// The kernel report kinds a run found.
fn report_kinds(run: &ScenarioRun) -> Vec<ReportKind> {
    run.violations
        .iter()
        .filter_map(|v| match v.invariant {
            Invariant::KernelReport(k) => Some(k),
            _ => None,
        })
        .collect()
}

/// Runs a lockdep scenario file and asserts its expectations hold and that lockdep printed
/// exactly the report `kind` (one splat: lockdep turns itself off after it).
fn runs_to(name: &str, kind: ReportKind, banner: &str) -> ScenarioRun {
    let run = detector_scenario(name).run().unwrap();
    assert!(
        run.failed_expectations.is_empty(),
        "{name}: {:?}\n{}",
        run.failed_expectations,
        run.trace
    );
    assert_eq!(report_kinds(&run), vec![kind], "{name}:\n{}", run.trace);
    assert!(
        run.trace.contains(&format!("] {banner}\n")),
        "{name}: the banner in the trace:\n{}",
        run.trace
    );
    run
}

/// Every kind and context parses, and the transition writes back the line it was read from.
#[test]
fn locks_lines_round_trip() {
    for (ctx_word, ctx) in LockContext::ALL {
        for (kind_word, kind) in LockKind::ALL {
            let line = format!("locks 1 {ctx_word} {kind_word}:&q->queue_lock spin:lock_B");
            let s = Scenario::parse(&format!("cpus 2\n{line}\n"), "t.scn").unwrap();
            let got: Vec<Transition> = s.transitions.iter().map(|(_, t)| *t).collect();
            let [Transition::LockSeq { cpu, ctx: c, steps }] = got[..] else {
                panic!("{line}: {got:?}");
            };
            assert_eq!((cpu, c), (1, ctx), "{line}");
            assert_eq!(steps.len(), 2, "{line}");
            assert_eq!(
                (steps[0].kind, steps[0].name),
                (kind, "&q->queue_lock"),
                "{line}"
            );
            assert_eq!(
                (steps[1].kind, steps[1].name),
                (LockKind::Spin, "lock_B"),
                "{line}"
            );
            assert_eq!(got[0].to_scenario_line(), line);
        }
    }
    // A repeated lock is the AA case, not an error; the line needs no device header.
    let s = Scenario::parse("locks 0 task mutex:m mutex:m\n", "t.scn").unwrap();
    assert_eq!(
        s.transitions[0].1.to_scenario_line(),
        "locks 0 task mutex:m mutex:m"
    );
}

/// Every bad form is refused with file:line:column and says what was expected.
#[test]
fn bad_locks_lines_are_refused() {
    let many: String = (0..49).map(|i| format!(" spin:l{i}")).collect();
    let many_col =
        "locks 0 task".len() + (0..48).map(|i| format!(" spin:l{i}").len()).sum::<usize>() + 2;
    for (text, want) in [
        ("locks\n", "t.scn:1:6: `locks` needs a CPU number".to_owned()),
        ("locks 2 task spin:a\n", "t.scn:1:7: CPU2 does not exist (the machine has 2 CPUs: 0..1)".to_owned()),
        ("locks x task spin:a\n", "t.scn:1:7: `locks`: a CPU number must be a number, got `x`".to_owned()),
        ("locks 0\n", "t.scn:1:8: `locks` needs a context (task, irqs-off, bh-off, softirq, hardirq)".to_owned()),
        ("locks 0 nmi spin:a\n", "t.scn:1:9: locks: unknown context `nmi` (expected task, irqs-off, bh-off, softirq, hardirq)".to_owned()),
        ("locks 0 task\n", "t.scn:1:13: `locks` needs at least one lock, KIND:NAME (KIND: spin, raw_spin, trylock_spin, local_lock, mutex, trylock_mutex, rwsem, rwsem_read, write_lock, read_lock, srcu)".to_owned()),
        ("locks 0 task spin:a hardirq spin:b\n", "t.scn:1:21: locks: a second context `hardirq` (the line runs in `task`): write one `locks` line per context".to_owned()),
        ("locks 0 task lock_A\n", "t.scn:1:14: locks: `lock_A` is not KIND:NAME (KIND: spin,".to_owned()),
        ("locks 0 task seqlock:a\n", "t.scn:1:14: locks: unknown lock kind `seqlock` (expected spin,".to_owned()),
        ("locks 0 task spin:a mutex:\n", "t.scn:1:21: locks: `mutex:` names no lock".to_owned()),
        (&format!("locks 0 task{many}\n"), format!("t.scn:1:{many_col}: locks: more than 48 locks held at once (MAX_LOCK_DEPTH)")),
        ("prove_locking maybe\nlocks 0 task spin:a\n", "t.scn:1:15: `prove_locking`: expected y or n, got `maybe`".to_owned()),
        ("prove_locking n\nprove_locking n\nlocks 0 task spin:a\n", "t.scn:2:1: a second `prove_locking` line (the first is line 1)".to_owned()),
        ("preempt_count n\nprove_locking y\nlocks 0 task spin:a\n", "t.scn:2: unsupported kernel config: CONFIG_PROVE_LOCKING selects CONFIG_PREEMPT_COUNT".to_owned()),
    ] {
        let e = Scenario::parse(text, "t.scn").unwrap_err().to_string();
        assert!(e.starts_with(&want), "{text:?}:\n got {e}\nwant {want}");
    }
}

/// A `locks` line on an offline CPU cannot happen: a refusal naming file:line:column, unless
/// written `try` (then skipped, and nothing is taken).
#[test]
fn locks_on_an_offline_cpu_is_refused_at_run_time() {
    let s = Scenario::parse("cpus 2\nonline 1\nlocks 1 task spin:a\n", "t.scn").unwrap();
    let Err(RunError::Refused(e)) = s.run() else {
        panic!("an offline CPU must refuse the line");
    };
    assert_eq!(
        e.to_string(),
        "t.scn:3:1: `locks 1 task spin:a`: CPU1 is offline (write `try locks 1 task spin:a` if that may happen)"
    );
    let s = Scenario::parse(
        "cpus 2\nonline 1\ntry locks 1 task spin:a\nexpect clean\n",
        "t.scn",
    )
    .unwrap();
    let run = s.run().unwrap();
    assert_eq!(run.skipped.len(), 1, "{:?}", run.skipped);
    assert!(run.failed_expectations.is_empty());
    assert!(!run.trace.contains("lock_acquire"), "{}", run.trace);
}

/// The trace shows the context, each `lock_acquire` (with `try`/`read` as the kernel's
/// tracepoint prints them) before lockdep's report, and each `lock_release` in reverse.
#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "lockdep-abba.scn")
)]
fn the_trace_shows_each_acquisition_then_the_report() {
    let run = runs_to(
        "lockdep-abba.scn",
        ReportKind::CircularLockDependency,
        "WARNING: possible circular locking dependency detected",
    );
    let t = &run.trace;
    let line = |s: &str| {
        t.find(s)
            .unwrap_or_else(|| panic!("`{s}` not in the trace:\n{t}"))
    };
    let cpu1 = line("       CPU1: mutex_lock(lock_B), mutex_lock(lock_A) in task\n");
    let b = line("[001] lock_acquire: 00000000b2022a4c lock_B\n");
    let a = line("[001] lock_acquire: 00000000d7e0ae78 lock_A\n");
    let splat = line("[001] WARNING: possible circular locking dependency detected\n");
    let rel_a = t
        .rfind("[001] lock_release: 00000000d7e0ae78 lock_A\n")
        .unwrap();
    let rel_b = t
        .rfind("[001] lock_release: 00000000b2022a4c lock_B\n")
        .unwrap();
    assert!(
        cpu1 < b && b < a && a < splat && splat < rel_a && rel_a < rel_b,
        "{t}"
    );
    let s = Scenario::parse(
        "locks 0 hardirq read_lock:l trylock_spin:t\nlocks 0 task read_lock:l\n",
        "t.scn",
    )
    .unwrap();
    let t = s.run().unwrap().trace;
    assert!(
        t.contains("       CPU0: read_lock(l), spin_trylock(t) in hardirq\n"),
        "{t}"
    );
    assert!(
        t.contains("] lock_acquire: ") && t.contains(" read l\n"),
        "{t}"
    );
    assert!(t.contains(" try t\n"), "{t}");
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "lockdep-abba.scn")
)]
fn abba_scenario_is_a_circular_dependency() {
    runs_to(
        "lockdep-abba.scn",
        ReportKind::CircularLockDependency,
        "WARNING: possible circular locking dependency detected",
    );
}

#[test]
fn aa_scenario_is_recursive_locking() {
    runs_to(
        "lockdep-aa.scn",
        ReportKind::RecursiveLocking,
        "WARNING: possible recursive locking detected",
    );
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-valid-state",
    should_panic(expected = "lockdep-irq-inconsistent.scn")
)]
fn irq_inconsistent_scenario_is_an_inconsistent_lock_state() {
    runs_to(
        "lockdep-irq-inconsistent.scn",
        ReportKind::InconsistentLockState,
        "WARNING: inconsistent lock state",
    );
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-irq-usage",
    should_panic(expected = "lockdep-hardirq-safe-unsafe.scn")
)]
fn hardirq_safe_unsafe_scenario_is_a_bad_irq_dependency() {
    runs_to(
        "lockdep-hardirq-safe-unsafe.scn",
        ReportKind::BadIrqDependency,
        "WARNING: HARDIRQ-safe -> HARDIRQ-unsafe lock order detected",
    );
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-irq-usage",
    should_panic(expected = "lockdep-irq-inversion.scn")
)]
fn irq_inversion_scenario_is_an_irq_lock_inversion() {
    runs_to(
        "lockdep-irq-inversion.scn",
        ReportKind::IrqLockInversion,
        "WARNING: possible irq lock inversion dependency detected",
    );
}

/// The readers' scenario is quiet, and its locks were really taken: every one is in its trace
/// (with `read` where lockdep saw a read).
#[test]
#[cfg_attr(
    feature = "bug-lockdep-read-as-write",
    should_panic(expected = "readers-clean")
)]
fn readers_scenario_is_clean() {
    let run = detector_scenario("lockdep-readers-clean.scn")
        .run()
        .unwrap();
    assert!(
        run.failed_expectations.is_empty(),
        "readers-clean: {:?}",
        run.failed_expectations
    );
    assert!(run.violations.is_empty(), "{:?}", run.violations);
    for l in [
        "read &set->srcu",
        "&q->sysfs_lock",
        "read &tasklist_lock",
        "&dev->lock",
    ] {
        assert!(
            run.trace.contains(&format!(" {l}\n")),
            "{l}:\n{}",
            run.trace
        );
    }
}

/// With `prove_locking n` (no `CONFIG_PROVE_LOCKING`) none of the lockdep scenarios reports:
/// the locks are still taken (traced), lockdep does not look.
#[test]
fn without_prove_locking_no_scenario_reports() {
    for name in [
        "lockdep-abba.scn",
        "lockdep-aa.scn",
        "lockdep-irq-inconsistent.scn",
        "lockdep-hardirq-safe-unsafe.scn",
        "lockdep-irq-inversion.scn",
    ] {
        let mut s = detector_scenario(name);
        s.config.kernel.prove_locking = false;
        let run = s.run().unwrap();
        assert!(run.violations.is_empty(), "{name}: {:?}", run.violations);
        assert!(run.trace.contains("lock_acquire"), "{name}");
        assert!(run.trace.contains("PROVE_LOCKING=n"), "{name}");
        // The header says the same.
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../docs/scenarios/detectors")
                .join(name),
        )
        .unwrap();
        let without = Scenario::parse(&format!("prove_locking n\n{text}"), name).unwrap();
        assert!(!without.config.kernel.prove_locking);
        let run = without.run().unwrap();
        assert!(run.violations.is_empty(), "{name}: {:?}", run.violations);
        assert!(
            !run.failed_expectations.is_empty(),
            "{name}: its expect line fails"
        );
    }
}
