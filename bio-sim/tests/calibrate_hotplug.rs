//! `biosim calibrate hotplug`: the recording of this machine's kernel (tests/data/calibrate/
//! hotplug-6.18) replays against the model with every row agreeing, instance counts included
//! (docs/live-kernel.md), buggy models are caught (departure D1 among them), and — with
//! `BIOSIM_LIVE_KERNEL=1`, as root — a live calibration agrees the same way and leaves the machine
//! as it found it.

use std::path::{Path, PathBuf};
use std::process::Command;

use bio_sim::calibrate::hotplug::compare::{compare, CaseResult, Report};
use bio_sim::calibrate::hotplug::model::Twin;
use bio_sim::calibrate::hotplug::recording::Recording;
use bio_sim::calibrate::hotplug::{live, Op, COMPARE_INSTANCES};
use bio_sim::calibrate::tracefs::{live_test_skip_reason, Tracefs};
use bio_sim::dev::cleanup::{Restore, RestoreAction};

fn recorded() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/calibrate/hotplug-6.18")
}

/// What departure D1 of docs/live-kernel.md was: when an online fails in the ONLINE section (the
/// AP's `cpuhp/N` thread, states above `CPUHP_TEARDOWN_CPU`), the kernel's `cpuhp_bringup_ap()`
/// returns the AP's error (its `cpuhp_exit` says `ret: -11`); the model logged the
/// `CPUHP_BRINGUP_CPU` startup as returning 0. The model now logs it as the kernel returns it;
/// [`Twin::ExitBeforeApPart`] brings the departure back.
const D1: &str = "callback errors: live step 83 returned -11, model none";

fn is_d1_case(c: &CaseResult) -> bool {
    c.case.op == Op::Up && c.case.fail > 144 && c.live.observed.fail == -1
}

/// Every row agrees, callbacks, instance counts and outcome.
fn assert_every_row_agrees(r: &Report) {
    for s in &r.sweeps {
        assert!(
            s.diffs.is_empty(),
            "fail sweep (online={}): {:?}",
            s.online,
            s.diffs
        );
    }
    for c in &r.cases {
        assert!(c.diffs.is_empty(), "{}: {:?}", c.case, c.diffs);
    }
    assert!(r.agrees());
    assert!(r.render().ends_with(&format!(
        "total: {n} rows (2 fail sweeps, {} cases): {n} agree, 0 differ\n",
        r.cases.len(),
        n = r.cases.len() + 2
    )));
}

#[test]
fn the_recorded_kernel_replays_with_every_row_agreeing() {
    let rec = Recording::read(&recorded()).unwrap();
    let r = compare(&rec, Twin::None).unwrap();
    assert_every_row_agrees(&r);
    assert_eq!(r.cases.len() + r.sweeps.len(), 93);
    // Cases of every kind are in the recording: rolled back, completed with `fail` still armed,
    // and both directions.
    let kinds = |op: Op, consumed: bool| {
        r.cases
            .iter()
            .filter(|c| c.case.op == op && (c.live.observed.fail == -1) == consumed)
            .count()
    };
    for op in [Op::Down, Op::Up] {
        assert!(kinds(op, true) > 0 && kinds(op, false) > 0, "{op:?}");
    }
    // The former D1 rows are there, and agree because the model's step 83 fails as the kernel's.
    let d1: Vec<&CaseResult> = r.cases.iter().filter(|c| is_d1_case(c)).collect();
    assert_eq!(d1.len(), 26);
    for c in d1 {
        assert_eq!(c.model.failed, vec![(83, -11)], "{}", c.case);
    }
    // Multi-instance steps ran with more than one instance, and the counts were compared.
    const { assert!(COMPARE_INSTANCES) };
    assert!(r
        .cases
        .iter()
        .any(|c| c.model.callbacks.iter().any(|cb| cb.instances > 1)));
}

#[test]
fn a_model_that_reads_step_83_before_the_ap_part_shows_departure_d1() {
    let rec = Recording::read(&recorded()).unwrap();
    let r = compare(&rec, Twin::ExitBeforeApPart).unwrap();
    assert!(r.sweeps.iter().all(|s| s.diffs.is_empty()));
    let mut d1 = 0;
    for c in &r.cases {
        if is_d1_case(c) {
            assert_eq!(c.diffs, vec![D1.to_owned()], "{}", c.case);
            d1 += 1;
        } else {
            assert!(c.diffs.is_empty(), "{}: {:?}", c.case, c.diffs);
        }
    }
    assert_eq!((d1, r.differing()), (26, 26));
}

#[test]
fn a_table_with_one_instance_fewer_is_caught() {
    let rec = Recording::read(&recorded()).unwrap();
    // blk_mq_hctx_notify_dead() runs for 9 hardware queues; the twin has 8.
    let r = compare(&rec, Twin::DropInstance(24)).unwrap();
    let c = r
        .cases
        .iter()
        .find(|c| c.case.op == Op::Down && c.case.fail == 188)
        .unwrap();
    assert!(
        c.diffs.iter().any(|d| d.contains(
            "live 24 teardown blk_mq_hctx_notify_dead x9, model 24 teardown blk_mq_hctx_notify_dead x8"
        )),
        "{:?}",
        c.diffs
    );
    assert!(r.differing() > 0);
}

#[test]
fn a_table_without_one_callback_is_caught() {
    let rec = Recording::read(&recorded()).unwrap();
    // workqueue:online without workqueue_offline_cpu(): an offline runs one teardown fewer, and a
    // failure armed there no longer fires.
    let r = compare(&rec, Twin::DropCallback(187, false)).unwrap();
    let c = r
        .cases
        .iter()
        .find(|c| c.case.op == Op::Down && c.case.fail == 187)
        .unwrap();
    assert!(
        c.diffs
            .iter()
            .any(|d| d.starts_with("fail left: live -1, model 187")),
        "{:?}",
        c.diffs
    );
    assert!(
        c.diffs
            .iter()
            .any(|d| d.starts_with("errno: live -11, model 0")),
        "{:?}",
        c.diffs
    );
    let clean_down_cases = r
        .cases
        .iter()
        .filter(|c| c.case.op == Op::Down && c.case.fail == 188)
        .collect::<Vec<_>>();
    assert!(
        clean_down_cases[0]
            .diffs
            .iter()
            .any(|d| d.contains("first difference")
                && d.contains("187 teardown workqueue_offline_cpu")),
        "{:?}",
        clean_down_cases[0].diffs
    );
    assert!(r.differing() > 0);
}

#[test]
fn a_fail_that_stays_armed_is_caught() {
    let rec = Recording::read(&recorded()).unwrap();
    let r = compare(&rec, Twin::FailNotConsumed).unwrap();
    let consumed: Vec<&CaseResult> = r
        .cases
        .iter()
        .filter(|c| c.live.observed.fail == -1)
        .collect();
    assert!(!consumed.is_empty());
    for c in consumed {
        assert!(
            c.diffs
                .iter()
                .any(|d| d == &format!("fail left: live -1, model {}", c.case.fail)),
            "{}: {:?}",
            c.case,
            c.diffs
        );
    }
}

#[test]
fn a_tampered_recording_is_refused_or_caught() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = Recording::read(&recorded()).unwrap();
    // The learned table must be the one the traces give.
    rec.callbacks = rec
        .callbacks
        .replace("187 teardown workqueue_offline_cpu\n", "");
    rec.write(dir.path()).unwrap();
    let e = compare(&Recording::read(dir.path()).unwrap(), Twin::None).unwrap_err();
    assert!(
        e.starts_with("callbacks.txt is not the callback map"),
        "{e}"
    );
    // A live outcome the model does not reproduce is a differing row.
    let mut rec = Recording::read(&recorded()).unwrap();
    rec.cases[0].observed.state = 0;
    let r = compare(&rec, Twin::None).unwrap();
    assert!(r.cases[0]
        .diffs
        .iter()
        .any(|d| d.starts_with("state: live 0, model 236")));
}

fn biosim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_biosim"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_replay_command_exits_0_when_every_row_agrees_and_bad_input_exits_2() {
    let dir = recorded();
    let out = biosim(&["calibrate", "hotplug", "--replay", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("\ndown fail=187  workqueue:online"), "{text}");
    assert!(text.ends_with(": 93 agree, 0 differ\n"), "{text}");
    let out = biosim(&["calibrate", "hotplug", "--replay", "/nonexistent/rec"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("/nonexistent/rec/machine.txt"), "{err}");
}

#[test]
fn cpu0_and_missing_cpus_are_refused_before_anything_changes() {
    // Refused before any lock is taken or file written, root or not.
    let out = biosim(&["calibrate", "hotplug", "--cpu", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("biosim: error: refusing to calibrate: "),
        "{err}"
    );
    assert!(err.contains("CPU0") || err.contains("root"), "{err}");
    let out = biosim(&["calibrate", "hotplug", "--cpu", "4095"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("CPU4095 does not exist") || err.contains("root"),
        "{err}"
    );
}

fn read(p: &str) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .to_owned()
}

#[test]
fn live_calibration_of_cpu1_agrees_on_every_row() {
    if let Some(why) = live_test_skip_reason() {
        eprintln!("{why}");
        return;
    }
    // A CPU with a failure already armed is refused before anything changes. (One test, so the
    // calibration below never runs while this one holds the live session.)
    {
        let _session = Tracefs::open().unwrap();
        let fail = "/sys/devices/system/cpu/cpu1/hotplug/fail";
        let _online = Restore::register(RestoreAction::Write {
            path: "/sys/devices/system/cpu/cpu1/online".into(),
            value: "1".into(),
        })
        .unwrap();
        let _fail = Restore::register(RestoreAction::Write {
            path: fail.into(),
            value: "-1".into(),
        })
        .unwrap();
        std::fs::write(fail, "187").unwrap();
        match live::record(1) {
            Err(live::LiveError::Refused(why)) => {
                assert!(why.contains("hotplug/fail is 187"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(read(fail), "187", "the refusal changed nothing");
    }
    assert_eq!(read("/sys/devices/system/cpu/cpu1/hotplug/fail"), "-1");
    let (rec, _took) = live::record(1).unwrap();
    assert_eq!(read("/sys/devices/system/cpu/cpu1/online"), "1");
    assert_eq!(read("/sys/devices/system/cpu/cpu1/hotplug/state"), "236");
    assert_eq!(read("/sys/devices/system/cpu/cpu1/hotplug/fail"), "-1");
    assert_eq!(read("/sys/kernel/tracing/tracing_on"), "0");
    assert_eq!(read("/sys/kernel/tracing/events/cpuhp/enable"), "0");
    let r = compare(&rec, Twin::None).unwrap();
    assert_every_row_agrees(&r);
}
