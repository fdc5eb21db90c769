//! Golden tests for the sysfs rules of kernel-semantics.md §1.5:
//! `hotplug/fail` validation and semantics, `hotplug/target` validation, and
//! the `hotplug/states` listing.

mod common;

use common::*;
use hotplug::*;

fn einval(r: Result<(), HotplugError>) {
    assert_eq!(r.unwrap_err().errno(), Errno::EINVAL);
}

#[test]
fn fail_rejects_out_of_range() {
    let Std { mut hp, .. } = std_machine(2);
    einval(hp.set_fail(CpuId(1), CPUHP_ONLINE.0 + 1));
    einval(hp.set_fail(CpuId(1), -2));
    assert_eq!(hp.set_fail(CpuId(5), 0).unwrap_err().errno(), Errno::ENODEV);
}

#[test]
fn fail_rejects_starting_dying_states_even_with_callbacks() {
    let Std { mut hp, .. } = std_machine(1);
    // sched:starting has callbacks but is atomic; CPU1 is offline.
    assert!(hp.step_info(SCHED).unwrap().has_startup);
    einval(hp.set_fail(CpuId(1), SCHED.0));
    einval(hp.set_fail(CpuId(1), CPUHP_AP_IDLE_DEAD.0));
    einval(hp.set_fail(CpuId(1), CPUHP_AP_TICK_DYING.0));
}

#[test]
fn fail_rejects_dead_and_bringup_states_while_the_cpu_is_up() {
    let Std { mut hp, bp_dyn, .. } = std_machine(1);
    // CPU0 is up: PREPARE/DEAD states and CPUHP_BRINGUP_CPU are refused.
    einval(hp.set_fail(CpuId(0), bp_dyn.0));
    einval(hp.set_fail(CpuId(0), WQ_PREP.0));
    einval(hp.set_fail(CpuId(0), CPUHP_BRINGUP_CPU.0));
    // CPU1 is offline (state 0): allowed.
    hp.set_fail(CpuId(1), bp_dyn.0).unwrap();
    hp.set_fail(CpuId(1), CPUHP_BRINGUP_CPU.0).unwrap();
    assert_eq!(hp.fail(CpuId(1)).unwrap(), CPUHP_BRINGUP_CPU.0);
    // TEARDOWN_CPU is above BRINGUP_CPU and has a teardown: allowed while up.
    hp.set_fail(CpuId(0), CPUHP_TEARDOWN_CPU.0).unwrap();
}

#[test]
fn fail_rejects_steps_without_callbacks() {
    let Std { mut hp, .. } = std_machine(2);
    // A named builtin step nobody registered, a free dynamic slot, "online".
    einval(hp.set_fail(CpuId(1), CPUHP_AP_BLK_MQ_ONLINE.0));
    einval(hp.set_fail(CpuId(1), CPUHP_AP_ONLINE_DYN_END.0));
    einval(hp.set_fail(CpuId(1), CPUHP_ONLINE.0));
    einval(hp.set_fail(CpuId(1), CPUHP_AP_ONLINE_IDLE.0));
}

#[test]
fn fail_minus_one_clears() {
    let Std {
        mut hp, env, d2, ..
    } = std_machine(2);
    hp.set_fail(CpuId(1), d2.0).unwrap();
    hp.set_fail(CpuId(1), -1).unwrap();
    assert_eq!(hp.fail(CpuId(1)).unwrap(), -1);
    hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap();
}

#[test]
#[cfg_attr(
    feature = "bug-rollback-calls-failed-state",
    should_panic(expected = "assertion")
)]
fn fail_is_one_shot_and_does_not_run_the_callback() {
    let Std {
        mut hp,
        env,
        d2,
        d3,
        ..
    } = std_machine(2);
    hp.set_fail(CpuId(1), d2.0).unwrap();
    let err = hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap_err();
    assert_eq!(err.errno(), Errno::EAGAIN);
    assert_eq!(err.errno().as_neg_i32(), -11);
    // d2's teardown never ran: only d3 down and its rollback startup.
    assert_eq!(env.take(), vec![down(1, d3), up_rb(1, d3)]);
    let injected: Vec<_> = hp
        .invocations()
        .into_iter()
        .filter(|(_, _, inj)| *inj)
        .map(|(i, r, _)| (i.state, r))
        .collect();
    assert_eq!(injected, vec![(d2, Err(Errno::EAGAIN))]);
    assert_eq!(hp.fail(CpuId(1)).unwrap(), -1, "one-shot");
    hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap();
    assert!(env.take().contains(&down(1, d2)));
}

#[test]
fn fail_only_fires_in_a_direction_that_has_a_callback() {
    let mut hp: Cpuhp<Env> = Cpuhp::new(2, 2).unwrap();
    let env = Env::default();
    let s = hp
        .cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "t/up-only", rec(), None)
        .unwrap();
    hp.set_fail(CpuId(1), s.0).unwrap();
    // Going down, the step has no teardown: skipped, the fail stays armed.
    hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap();
    assert_eq!(hp.fail(CpuId(1)).unwrap(), s.0);
    assert!(env.take().is_empty());
    // Going up, it fires at the startup, and the bringup is rolled back.
    let err = hp.cpu_up(CpuId(1), CPUHP_ONLINE, &env).unwrap_err();
    assert!(
        matches!(err, HotplugError::CallbackFailed { injected: true, bringup: true, state, .. } if state == s)
    );
    assert!(env.take().is_empty(), "the startup itself never ran");
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_OFFLINE);
    hp.cpu_up(CpuId(1), CPUHP_ONLINE, &env).unwrap();
    assert_eq!(env.take(), vec![up(1, s)]);
}

#[test]
fn fail_applies_to_setup_and_remove_invocations() {
    let mut hp: Cpuhp<Env> = Cpuhp::new(2, 2).unwrap();
    let env = Env::default();
    let s = CPUHP_AP_BLK_MQ_ONLINE;
    hp.cpuhp_setup_state_nocalls(s, "block/mq:online", rec(), rec())
        .unwrap();
    hp.set_fail(CpuId(1), s.0).unwrap();
    hp.cpuhp_remove_state_nocalls(s).unwrap();
    // Invoking setup: CPU0 ok, CPU1 injected, CPU0 rolled back.
    let err = hp
        .cpuhp_setup_state(s, "block/mq:online", rec(), rec(), &env)
        .unwrap_err();
    assert!(matches!(
        err,
        HotplugError::CallbackFailed {
            cpu: CpuId(1),
            injected: true,
            ..
        }
    ));
    assert_eq!(env.take(), vec![up(0, s), down_rb(0, s)]);
    assert_eq!(hp.fail(CpuId(1)).unwrap(), -1);
    // Invoking remove with a fail armed: the kernel's BUG_ON, recorded.
    hp.cpuhp_setup_state(s, "block/mq:online", rec(), rec(), &env)
        .unwrap();
    env.take();
    hp.set_fail(CpuId(0), s.0).unwrap();
    hp.cpuhp_remove_state(s, &env).unwrap();
    assert_eq!(env.take(), vec![down(1, s)]);
    assert!(matches!(
        hp.warnings(),
        [Warning::TeardownBug {
            cpu: CpuId(0),
            origin: Origin::Remove,
            errno: Errno::EAGAIN,
            ..
        }]
    ));
}

#[test]
fn target_accepts_only_offline_and_online_without_state_control() {
    let Std { mut hp, env, .. } = std_machine(2);
    einval(hp.set_target(CpuId(1), WQ_ONLINE.0, &env));
    einval(hp.set_target(CpuId(1), -1, &env));
    einval(hp.set_target(CpuId(1), CPUHP_ONLINE.0 + 1, &env));
    hp.set_target(CpuId(1), 0, &env).unwrap();
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_OFFLINE);
    assert_eq!(hp.target(CpuId(1)).unwrap(), CPUHP_OFFLINE);
    hp.set_target(CpuId(1), CPUHP_ONLINE.0, &env).unwrap();
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_ONLINE);
    // Writing the current state is a no-op.
    hp.set_target(CpuId(1), CPUHP_ONLINE.0, &env).unwrap();
    assert!(hp.warnings().is_empty());
}

#[test]
fn target_with_state_control_needs_a_named_stoppable_step() {
    let mut hp: Cpuhp<Env> = Cpuhp::with_config(
        2,
        2,
        CpuhpConfig {
            state_control: true,
            ..CpuhpConfig::default()
        },
    )
    .unwrap();
    let env = Env::default();
    // Unnamed (a free dynamic slot, AP_ONLINE_IDLE).
    einval(hp.set_target(CpuId(1), CPUHP_AP_ONLINE_DYN.0, &env));
    einval(hp.set_target(CpuId(1), CPUHP_AP_ONLINE_IDLE.0, &env));
    // cant_stop.
    for s in [
        CPUHP_CREATE_THREADS,
        CPUHP_BRINGUP_CPU,
        CPUHP_AP_OFFLINE,
        CPUHP_TEARDOWN_CPU,
    ] {
        einval(hp.set_target(CpuId(1), s.0, &env));
    }
    einval(hp.set_target(CpuId(1), CPUHP_ONLINE.0 + 1, &env));
    // Named and stoppable: down to workqueue:online, then back up.
    hp.set_target(CpuId(1), WQ_ONLINE.0, &env).unwrap();
    assert_eq!(hp.state(CpuId(1)).unwrap(), WQ_ONLINE);
    assert!(hp.cpu_online(CpuId(1)));
    hp.set_target(CpuId(1), CPUHP_ONLINE.0, &env).unwrap();
    // Into the PREPARE section and back.
    hp.set_target(CpuId(1), CPUHP_TIMERS_PREPARE.0, &env)
        .unwrap();
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_TIMERS_PREPARE);
    assert!(!hp.cpu_online(CpuId(1)));
    hp.set_target(CpuId(1), CPUHP_ONLINE.0, &env).unwrap();
    assert!(hp.cpu_online(CpuId(1)));
}

/// A deliberate departure: `target_store()` takes a named STARTING/DYING state (it checks only
/// the name and `cant_stop`), but there the kernel's CPU does not stop at the target
/// (`notify_cpu_starting()` / `cpuhp_online_idle()` going up, `take_cpu_down()` /
/// `cpuhp_report_idle_dead()` going down). The model refuses it with `-EINVAL`, saying where the
/// kernel's CPU would end, and changes nothing; `cant_stop` (`CPUHP_AP_OFFLINE`) is reported first.
#[test]
fn target_inside_the_starting_dying_section_is_refused_naming_the_kernel_effect() {
    let mut hp: Cpuhp<Env> = Cpuhp::with_config(
        2,
        2,
        CpuhpConfig {
            state_control: true,
            ..CpuhpConfig::default()
        },
    )
    .unwrap();
    // sched:starting may be a static name already; register it if it is not.
    let _ = hp.cpuhp_setup_state_nocalls(SCHED, "sched:starting", rec(), rec());
    let listing = hp.states_listing();
    for name in ["idle:dead", "sched:starting", "ap:online"] {
        assert!(listing.contains(name), "{name} is named:\n{listing}");
    }
    let env = Env::default();
    for online in [true, false] {
        for s in [CPUHP_AP_IDLE_DEAD, SCHED, CPUHP_AP_ONLINE] {
            let e = hp.start_target(CpuId(1), s.0).unwrap_err();
            assert_eq!(e.errno(), Errno::EINVAL, "{e}");
            let m = e.to_string();
            assert!(m.contains("STARTING/DYING"), "{m}");
            assert!(
                m.contains("CPUHP_AP_ONLINE_IDLE") && m.contains("CPUHP_AP_IDLE_DEAD"),
                "{m}"
            );
            assert!(!hp.in_progress(CpuId(1)));
        }
        let e = hp.start_target(CpuId(1), CPUHP_AP_OFFLINE.0).unwrap_err();
        assert!(e.to_string().contains("cant_stop"), "{e}");
        if online {
            assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_ONLINE);
            hp.set_target(CpuId(1), 0, &env).unwrap();
        } else {
            assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_OFFLINE);
        }
    }
}

/// `start_target()` is `target_store()` with the operation only started: the same validation
/// (`target_store_check()`), then steps; while any operation is in progress the write would
/// wait (`lock_device_hotplug_sysfs()` restarts the syscall).
#[test]
fn start_target_validates_like_set_target_and_leaves_the_operation_stepped() {
    let mut hp: Cpuhp<Env> = Cpuhp::with_config(
        3,
        3,
        CpuhpConfig {
            state_control: true,
            ..CpuhpConfig::default()
        },
    )
    .unwrap();
    hp.cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "t/d1:online", rec(), rec())
        .unwrap();
    let env = Env::default();
    for s in [CPUHP_AP_ONLINE_IDLE, CPUHP_TEARDOWN_CPU] {
        assert!(hp.target_store_check(CpuId(1), s.0).is_err());
        einval(hp.start_target(CpuId(1), s.0));
    }
    assert_eq!(
        hp.target_store_check(CpuId(1), WQ_ONLINE.0).unwrap(),
        WQ_ONLINE
    );
    hp.start_target(CpuId(1), WQ_ONLINE.0).unwrap();
    assert!(hp.in_progress(CpuId(1)));
    // lock_device_hotplug_sysfs() finds device_hotplug_lock held: the write would wait (the
    // syscall restarts), on another CPU's knob as on this one's; no errno for the writer.
    for cpu in [CpuId(2), CpuId(1)] {
        let e = hp.start_target(cpu, WQ_ONLINE.0).unwrap_err();
        assert!(
            matches!(
                e,
                HotplugError::RestartSyscall {
                    holder: CpuId(1),
                    errno: Errno::ERESTARTNOINTR,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("device_hotplug_lock"), "{e}");
        assert!(!e.to_string().contains("EBUSY"), "{e}");
    }
    // The validation before the lock still comes first (kernel order).
    einval(hp.start_target(CpuId(2), CPUHP_ONLINE.0 + 1));
    hp.run_to_completion(CpuId(1), &env).unwrap();
    assert_eq!(hp.state(CpuId(1)).unwrap(), WQ_ONLINE);
    // The current state: nothing starts.
    hp.start_target(CpuId(1), WQ_ONLINE.0).unwrap();
    assert!(!hp.in_progress(CpuId(1)));
    // Without state control only 0 and CPUHP_ONLINE.
    let Std { mut hp, .. } = std_machine(2);
    einval(hp.start_target(CpuId(1), WQ_ONLINE.0));
    hp.start_target(CpuId(1), 0).unwrap();
    assert!(hp.in_progress(CpuId(1)));
    hp.run_to_completion(CpuId(1), &env).unwrap();
    assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_OFFLINE);
}

#[test]
fn states_listing_is_the_sysfs_format() {
    let Std { hp, bp_dyn, d1, .. } = std_machine(2);
    let listing = hp.states_listing();
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines[0], "  0: offline");
    assert_eq!(lines[1], "  1: threads:prepare");
    assert_eq!(*lines.last().unwrap(), "236: online");
    assert!(lines.contains(&" 21: block/bio:dead"));
    assert!(lines.contains(&" 83: cpu:bringup"));
    assert!(lines.contains(&"144: cpu:teardown"));
    assert!(lines.contains(&"235: sched:active"));
    assert!(lines.contains(&format!("{:3}: t/bp:dead", bp_dyn.0).as_str()));
    assert!(lines.contains(&format!("{:3}: t/d1:online", d1.0).as_str()));
    assert!(listing.ends_with('\n'));
    // Every builtin/core name of a fresh machine matches the 6.18 listing.
    let fresh: Cpuhp<()> = Cpuhp::new(1, 1).unwrap();
    let reference = include_str!("data/cpuhp-states-linux-6.18.txt");
    let real: Vec<&str> = reference.lines().filter(|l| !l.starts_with('#')).collect();
    for line in fresh.states_listing().lines() {
        assert!(real.contains(&line), "{line:?} is not in the 6.18 listing");
    }
}

/// A `hotplug/fail` armed for a state the operation in progress has already passed does not
/// fire on the way forward, but stays armed: when a lower callback fails and the operation rolls
/// back through the armed state, it fires there, during the rollback. The kernel's
/// `cpuhp_thread_fun()` then hits `WARN_ON_ONCE(st->rollback)` ("no way forward, no way back"):
/// the rollback stops and the CPU is left in between, at the armed state.
#[test]
fn fail_armed_at_a_passed_state_fires_during_the_rollback_and_strands_the_cpu() {
    let Std {
        mut hp,
        env,
        d1,
        d3,
        ..
    } = std_machine(2);
    assert!(d1 < d3);
    hp.start_cpu_down(CpuId(1), CPUHP_OFFLINE).unwrap();
    // Tear down to below d3 (the highest dynamic state, the first teardown).
    while hp.state(CpuId(1)).unwrap() >= d3 {
        hp.step(CpuId(1), &env).unwrap();
    }
    // Fail a lower teardown: d1.
    hp.set_fail(CpuId(1), d1.0).unwrap();
    while hp.fail(CpuId(1)).unwrap() != -1 {
        hp.step(CpuId(1), &env).unwrap();
    }
    assert!(hp.in_progress(CpuId(1)), "rolling back");
    assert!(hp.warnings().is_empty());
    // d3 was passed on the way down; the rollback's startups will invoke it.
    hp.set_fail(CpuId(1), d3.0).unwrap();
    let r = hp.run_to_completion(CpuId(1), &env);
    let e = r.unwrap_err();
    assert_eq!(e.errno(), Errno::EAGAIN, "{e}");
    assert!(
        e.to_string().contains(&format!("step {d1}")),
        "the first failure: {e}"
    );
    assert_eq!(hp.fail(CpuId(1)).unwrap(), -1, "one-shot");
    assert_eq!(
        hp.state(CpuId(1)).unwrap(),
        d3,
        "left in between, not back at CPUHP_ONLINE"
    );
    assert!(
        hp.warnings().iter().any(|w| matches!(
            w,
            Warning::RollbackFailed {
                state,
                bringup: true,
                errno: Errno::EAGAIN,
                ..
            } if *state == d3
        )),
        "{:?}",
        hp.warnings()
    );
}
