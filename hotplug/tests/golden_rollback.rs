//! Golden tests for the rollback orders of kernel-semantics.md §1.4: the exact
//! callback sequence, final state, online mask and recorded warnings.
//!
//! The tests that observe a rollback are `should_panic` under the
//! `bug-rollback-calls-failed-state` twin: they are oracles that catch it.

mod common;

use common::*;
use hotplug::*;

/// Startup of S fails on the way up (AP side, nested in `bringup_cpu()`):
/// teardowns S-1 down to prev_state+1 in reverse, S's own teardown not called;
/// the AP rolls back to `CPUHP_AP_ONLINE_IDLE`, the BP tears down the rest.
#[test]
#[cfg_attr(
    feature = "bug-rollback-calls-failed-state",
    should_panic(expected = "assertion")
)]
fn startup_fails_on_up_tears_down_below_in_reverse() {
    let Std {
        mut hp,
        env,
        bp_dyn,
        d1,
        d2,
        ..
    } = std_machine(1);
    env.arm(Some(1), d2, true, Errno::EIO);
    let err = hp.cpu_up(CpuId(1), CPUHP_ONLINE, &env).unwrap_err();
    assert_eq!(err.errno(), Errno::EIO);
    assert!(
        matches!(err, HotplugError::CallbackFailed { state, bringup: true, injected: false, .. } if state == d2)
    );
    assert_eq!(
        env.take(),
        vec![
            up(1, WQ_PREP),
            up(1, bp_dyn),
            up(1, SCHED),
            up(1, WQ_ONLINE),
            up(1, d1),
            up(1, d2),
            // AP rollback (cpuhp_kick_ap), then the BP tears down the rest.
            down_rb(1, d1),
            down_rb(1, WQ_ONLINE),
            down_rb(1, SCHED),
            down_rb(1, bp_dyn),
            down_rb(1, WQ_PREP),
        ]
    );
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_OFFLINE);
    assert!(!hp.cpu_online(CpuId(1)));
    assert!(hp.warnings().is_empty());
}

/// Startup of a PREPARE state fails: only the PREPARE teardowns below it run.
#[test]
#[cfg_attr(
    feature = "bug-rollback-calls-failed-state",
    should_panic(expected = "assertion")
)]
fn prepare_startup_fails_on_up() {
    let Std {
        mut hp,
        env,
        bp_dyn,
        ..
    } = std_machine(1);
    env.arm(None, bp_dyn, true, Errno::ENOMEM);
    let err = hp.cpu_up(CpuId(1), CPUHP_ONLINE, &env).unwrap_err();
    assert_eq!(err.errno(), Errno::ENOMEM);
    assert_eq!(
        env.take(),
        vec![up(1, WQ_PREP), up(1, bp_dyn), down_rb(1, WQ_PREP)]
    );
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_OFFLINE);
    assert!(!hp.cpu_online(CpuId(1)));
}

/// Teardown of S fails on the way down (AP side): startups S+1 up to
/// prev_state, S's own startup not called; the CPU stays online.
#[test]
#[cfg_attr(
    feature = "bug-rollback-calls-failed-state",
    should_panic(expected = "assertion")
)]
fn teardown_fails_on_down_starts_up_above() {
    let Std {
        mut hp,
        env,
        d2,
        d3,
        ..
    } = std_machine(2);
    env.arm(Some(1), d2, false, Errno::EBUSY);
    let err = hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap_err();
    assert_eq!(err.errno(), Errno::EBUSY);
    assert_eq!(env.take(), vec![down(1, d3), down(1, d2), up_rb(1, d3)]);
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_ONLINE);
    assert_eq!(hp.target(CpuId(1)).unwrap(), CPUHP_ONLINE);
    assert!(hp.cpu_online(CpuId(1)));
    assert!(hp.warnings().is_empty());
}

/// A failure during the rollback stops it: WARN, CPU left in the
/// intermediate state (the kernel does not loop).
#[test]
#[cfg_attr(
    feature = "bug-rollback-calls-failed-state",
    should_panic(expected = "assertion")
)]
fn failure_during_rollback_stops_with_warning() {
    let Std {
        mut hp,
        env,
        d1,
        d2,
        d3,
        ..
    } = std_machine(2);
    env.arm(Some(1), d2, false, Errno::EBUSY);
    env.arm(Some(1), d3, true, Errno::ENOMEM);
    let err = hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap_err();
    assert_eq!(err.errno(), Errno::EBUSY, "the first failure is returned");
    assert_eq!(env.take(), vec![down(1, d3), down(1, d2), up_rb(1, d3)]);
    // cpuhp_next_state() had already moved to d3 when its startup failed.
    assert_eq!(hp.state(CpuId(1)).unwrap(), d3);
    assert_eq!(hp.target(CpuId(1)).unwrap(), CPUHP_ONLINE);
    assert!(hp.cpu_online(CpuId(1)));
    assert_eq!(
        hp.warnings(),
        &[Warning::RollbackFailed {
            cpu: CpuId(1),
            state: d3,
            name: "t/d3:online".into(),
            bringup: true,
            errno: Errno::ENOMEM,
            state_left: d3,
        }]
    );
    // A later cpu_up() carries on from the intermediate state.
    hp.cpu_up(CpuId(1), CPUHP_ONLINE, &env).unwrap();
    assert_eq!(env.take(), vec![]);
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_ONLINE);
    let _ = d1;
}

/// STARTING/DYING callbacks must not fail: an error is warned about and the
/// transition carries on (`cpuhp_invoke_callback_range_nofail()`).
#[test]
fn starting_and_dying_failures_are_warned_and_ignored() {
    let Std { mut hp, env, .. } = std_machine(2);
    env.arm(Some(1), SCHED, false, Errno::EIO);
    hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap();
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_OFFLINE);
    assert!(env.take().contains(&down(1, SCHED)));
    env.arm(Some(1), SCHED, true, Errno::EIO);
    hp.cpu_up(CpuId(1), CPUHP_ONLINE, &env).unwrap();
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_ONLINE);
    let w = hp.warnings();
    assert_eq!(w.len(), 2);
    assert!(
        matches!(&w[0], Warning::AtomicCallbackFailed { bringup: false, state, .. } if *state == SCHED)
    );
    assert!(
        matches!(&w[1], Warning::AtomicCallbackFailed { bringup: true, state, .. } if *state == SCHED)
    );
    assert_eq!(
        w[0].to_string(),
        "CPU 1 DOWN state sched:starting (87) failed (-5)"
    );
}

/// The DYING callbacks run on the target with IRQs off after the CPU left the
/// online mask; PREPARE teardowns run on the control CPU.
#[test]
fn where_callbacks_run_on_offline() {
    let Std {
        mut hp,
        env,
        bp_dyn,
        d3,
        ..
    } = std_machine(2);
    hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap();
    let inv = hp.invocations();
    let find = |s: StateId| inv.iter().find(|(i, ..)| i.state == s).unwrap().0.clone();
    assert_eq!(find(d3).runs_on, RunsOn::Target { irqs_off: false });
    assert_eq!(find(SCHED).runs_on, RunsOn::Target { irqs_off: true });
    assert_eq!(find(bp_dyn).runs_on, RunsOn::Control { cpu: CpuId(0) });
    assert_eq!(
        find(CPUHP_TEARDOWN_CPU).runs_on,
        RunsOn::Control { cpu: CpuId(0) }
    );
    assert!(find(CPUHP_TEARDOWN_CPU).core);
    // Online-mask change sits between takedown_cpu and the DYING callbacks.
    let pos_off = hp
        .log()
        .iter()
        .position(|r| matches!(r, LogRecord::Online { online: false, .. }))
        .unwrap();
    let pos_td = hp
        .log()
        .iter()
        .position(|r| matches!(r, LogRecord::Call { invocation, .. } if invocation.state == CPUHP_TEARDOWN_CPU))
        .unwrap();
    let pos_sched = hp
        .log()
        .iter()
        .position(|r| matches!(r, LogRecord::Call { invocation, .. } if invocation.state == SCHED))
        .unwrap();
    assert!(pos_td < pos_off && pos_off < pos_sched);
    assert!(hp.cpu_dying(CpuId(1)));
}

/// `cpu_dying(cpu)` is set by `cpuhp_set_state()` when `_cpu_down()` starts,
/// before the first ONLINE-section teardown runs, and cleared by the rollback's
/// `cpuhp_reset_state()` when that teardown fails.
#[test]
fn cpu_dying_is_set_before_the_first_online_teardown() {
    let Std { mut hp, d3, .. } = std_machine(2);
    assert!(!hp.cpu_dying(CpuId(1)));
    hp.start_cpu_down(CpuId(1), CPUHP_OFFLINE).unwrap();
    assert!(hp.cpu_dying(CpuId(1)), "set as the operation starts");
    let call = hp.begin_step(CpuId(1)).unwrap();
    assert_eq!(
        call.invocation.state, d3,
        "the first teardown is ONLINE_DYN's"
    );
    assert!(!call.invocation.bringup);
    assert!(hp.cpu_online(CpuId(1)));
    assert!(hp.cpu_dying(CpuId(1)), "while the first teardown runs");
    hp.finish_step(call, Err(Errno::EBUSY)).unwrap();
    assert!(!hp.cpu_dying(CpuId(1)), "the rollback is a bringup");
}

/// A BP-side teardown below `CPUHP_TEARDOWN_CPU` fails: the BP runs the
/// startups back up, `bringup_cpu()` re-boots the AP, which lands at
/// `CPUHP_AP_ONLINE_IDLE`, and `_cpu_down()` WARNs "DEAD callback error".
#[test]
#[cfg_attr(
    feature = "bug-rollback-calls-failed-state",
    should_panic(expected = "assertion")
)]
fn bp_side_dead_callback_error() {
    let Std {
        mut hp,
        env,
        bp_dyn,
        ..
    } = std_machine(2);
    env.arm(Some(1), bp_dyn, false, Errno::EIO);
    let err = hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap_err();
    assert_eq!(err.errno(), Errno::EIO);
    let calls = env.take();
    let tail: Vec<Call> = calls[calls.len() - 3..].to_vec();
    assert_eq!(tail, vec![down(1, SCHED), down(1, bp_dyn), up_rb(1, SCHED)]);
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_AP_ONLINE_IDLE);
    assert!(hp.cpu_online(CpuId(1)));
    assert_eq!(
        hp.warnings(),
        &[Warning::DeadCallbackError {
            cpu: CpuId(1),
            state_left: CPUHP_AP_ONLINE_IDLE
        }]
    );
    assert_eq!(
        hp.warnings()[0].to_string(),
        "WARNING: DEAD callback error for CPU1 (left at state 145)"
    );
}

/// `takedown_cpu()` fails ("CPU refused to die"): the AP re-ups itself to
/// where the offline started, running the ONLINE startups as a rollback.
/// (`CPUHP_TEARDOWN_CPU` has no startup, so the buggy twin is invisible here.)
#[test]
fn cpu_refused_to_die_reups_the_ap() {
    let Std {
        mut hp,
        env,
        d1,
        d2,
        d3,
        ..
    } = std_machine(2);
    hp.set_fail(CpuId(1), CPUHP_TEARDOWN_CPU.0).unwrap();
    let err = hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap_err();
    assert_eq!(err.errno(), Errno::EAGAIN);
    assert!(
        matches!(err, HotplugError::CallbackFailed { injected: true, state, .. } if state == CPUHP_TEARDOWN_CPU)
    );
    assert_eq!(
        env.take(),
        vec![
            down(1, d3),
            down(1, d2),
            down(1, d1),
            down(1, WQ_ONLINE),
            up_rb(1, WQ_ONLINE),
            up_rb(1, d1),
            up_rb(1, d2),
            up_rb(1, d3),
        ]
    );
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_ONLINE);
    assert!(hp.cpu_online(CpuId(1)));
    assert!(hp.warnings().is_empty());
}

/// `_cpu_down()` returns `-EBUSY` for the last online CPU, running nothing.
#[test]
fn last_online_cpu_is_ebusy() {
    let Std { mut hp, env, .. } = std_machine(1);
    let err = hp.cpu_down(CpuId(0), CPUHP_OFFLINE, &env).unwrap_err();
    assert_eq!(err.errno(), Errno::EBUSY);
    assert_eq!(err.errno().as_neg_i32(), -16);
    assert!(env.take().is_empty());
    assert_eq!(hp.state(CpuId(0)).unwrap(), CPUHP_ONLINE);

    let mut one: Cpuhp<()> = Cpuhp::new(1, 1).unwrap();
    assert_eq!(
        one.cpu_down(CpuId(0), CPUHP_OFFLINE, &())
            .unwrap_err()
            .errno(),
        Errno::EBUSY
    );
    // Offlining the other of two leaves CPU0 as the last one.
    let Std { mut hp, env, .. } = std_machine(2);
    hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap();
    assert_eq!(
        hp.cpu_down(CpuId(0), CPUHP_OFFLINE, &env)
            .unwrap_err()
            .errno(),
        Errno::EBUSY
    );
}

/// `cpuhp_setup_state()` fails on CPU N: teardown on CPUs < N that ran the
/// startup, ascending, then the state is uninstalled.
#[test]
fn setup_failure_rolls_back_installed_cpus() {
    let mut hp: Cpuhp<Env> = Cpuhp::new(3, 3).unwrap();
    let env = Env::default();
    env.arm(Some(2), CPUHP_AP_ONLINE_DYN, true, Errno::ENOMEM);
    let err = hp
        .cpuhp_setup_state(CPUHP_AP_ONLINE_DYN, "t/x:online", rec(), rec(), &env)
        .unwrap_err();
    assert_eq!(err.errno(), Errno::ENOMEM);
    let s = CPUHP_AP_ONLINE_DYN;
    assert_eq!(
        env.take(),
        vec![up(0, s), up(1, s), up(2, s), down_rb(0, s), down_rb(1, s)]
    );
    assert!(hp.step_info(s).unwrap().name.is_none(), "uninstalled");
}

/// Other transitions and registrations are refused while an operation holds
/// the hotplug lock; stepping exposes the kernel's intermediate states.
#[test]
fn stepping_interleaves_and_serialises() {
    let Std {
        mut hp, env, d3, ..
    } = std_machine(2);
    hp.start_cpu_down(CpuId(1), CPUHP_OFFLINE).unwrap();
    assert!(hp.in_progress(CpuId(1)));
    let next = hp.next_invocation(CpuId(1)).unwrap();
    assert_eq!((next.state, next.bringup), (d3, false));
    assert_eq!(
        hp.state(CpuId(1)).unwrap(),
        CPUHP_ONLINE,
        "peeking changes nothing"
    );
    assert_eq!(
        hp.cpu_down(CpuId(0), CPUHP_OFFLINE, &env)
            .unwrap_err()
            .errno(),
        Errno::EBUSY
    );
    assert!(matches!(
        hp.cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "t/late", rec(), None),
        Err(HotplugError::Busy {
            holder: CpuId(1),
            ..
        })
    ));
    // Two-phase: begin, run elsewhere, finish.
    let call = hp.begin_step(CpuId(1)).unwrap();
    assert_eq!(call.invocation, next);
    assert_eq!(
        hp.state(CpuId(1)).unwrap(),
        StateId(d3.0 - 1),
        "st->state during a teardown"
    );
    assert!(hp.begin_step(CpuId(1)).is_err(), "one step at a time");
    let cb = hp.callback_for(&call).unwrap();
    let r = cb(&env, &call.invocation);
    let out = hp.finish_step(call.clone(), r).unwrap();
    assert!(matches!(out, StepOutcome::Ran { finished: None, .. }));
    assert!(hp.finish_step(call, Ok(())).is_err(), "stale token");
    // Step until the DYING callback: the CPU is already out of the online mask.
    loop {
        let next = hp.next_invocation(CpuId(1)).unwrap();
        if next.state == SCHED {
            assert!(!hp.cpu_online(CpuId(1)));
            assert_eq!(next.runs_on, RunsOn::Target { irqs_off: true });
            break;
        }
        assert!(hp.cpu_online(CpuId(1)) || next.state < CPUHP_TEARDOWN_CPU);
        hp.step(CpuId(1), &env).unwrap();
    }
    let mut finished = None;
    while hp.in_progress(CpuId(1)) {
        if let StepOutcome::Ran {
            finished: Some(r), ..
        } = hp.step(CpuId(1), &env).unwrap()
        {
            finished = Some(r);
        }
    }
    assert_eq!(finished, Some(Ok(())));
    assert_eq!(hp.step(CpuId(1), &env).unwrap(), StepOutcome::Done);
    assert_eq!(hp.next_invocation(CpuId(1)), None);
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_OFFLINE);
}

/// Bad requests are errors, never panics.
#[test]
fn bad_requests_are_errors() {
    let Std { mut hp, env, .. } = std_machine(2);
    assert!(matches!(
        hp.cpu_up(CpuId(9), CPUHP_ONLINE, &env),
        Err(HotplugError::NoSuchCpu {
            errno: Errno::EINVAL,
            ..
        })
    ));
    assert_eq!(
        hp.cpu_down(CpuId(1), StateId(237), &env)
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
    assert_eq!(
        hp.cpu_down(CpuId(1), CPUHP_AP_SCHED_STARTING, &env)
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
    assert_eq!(hp.state(CpuId(7)).unwrap_err().errno(), Errno::ENODEV);
    assert!(hp.begin_step(CpuId(0)).is_err());
    assert!(hp.step(CpuId(5), &env).is_err());
    assert!(Cpuhp::<()>::new(0, 0).is_err());
    assert!(Cpuhp::<()>::new(2, 3).is_err());
    hp.cpu_hotplug_disable();
    assert_eq!(
        hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env)
            .unwrap_err()
            .errno(),
        Errno::EBUSY
    );
    hp.cpu_hotplug_enable();
    hp.cpu_hotplug_enable();
    assert_eq!(hp.warnings(), &[Warning::UnbalancedHotplugEnable]);
    hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap();
}

/// `bringup_cpu()` always lets the AP run on to `CPUHP_AP_ONLINE_IDLE`
/// (`cpuhp_online_idle()`), so an up to `CPUHP_BRINGUP_CPU` or
/// `CPUHP_TEARDOWN_CPU` from offline ends at 145, online, as in the kernel.
#[test]
fn bringup_lands_at_ap_online_idle() {
    for target in [CPUHP_BRINGUP_CPU, CPUHP_TEARDOWN_CPU] {
        let Std { mut hp, env, .. } = std_machine(1);
        hp.cpu_up(CpuId(1), target, &env).unwrap();
        assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_AP_ONLINE_IDLE);
        assert_eq!(hp.target(CpuId(1)).unwrap(), target);
        assert!(hp.cpu_online(CpuId(1)));
        assert!(!hp.cpu_dying(CpuId(1)));
        // notify_cpu_starting() runs to min(target, CPUHP_AP_ONLINE): for a
        // target of CPUHP_BRINGUP_CPU no STARTING callback runs at all.
        let mut expected = vec![up(1, WQ_PREP), up(1, StateId(61))];
        if target == CPUHP_TEARDOWN_CPU {
            expected.push(up(1, SCHED));
        }
        assert_eq!(env.take(), expected);
        hp.cpu_up(CpuId(1), CPUHP_ONLINE, &env).unwrap();
        assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_ONLINE);
    }
}
