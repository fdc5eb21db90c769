//! The model's cpuhp tracepoints against the live 6.18 kernel's (the repository's `tests/data/tracefs-6.18/`):
//! a machine whose table is the live kernel's (every state with a callback in the recordings,
//! with its function names, single or multi-instance and its instance count, plus the
//! STARTING/DYING states the kernel has, which never show) must print the same cpuhp event
//! sequence — event kind, step, target, `%ps` name, `state:`, `ret:` and the kind of task —
//! for a clean offline/online of CPU1, an offline with `hotplug/fail` = 187 and an online with
//! `hotplug/fail` = 61. Timestamps, pids and the CPU column are the machine's own and not
//! compared.
//!
//! The checker's buggy twins: sequences with one fidelity bug each (an injected failure traced,
//! a `state:` off by one, the `cpuhp_kick_ap_work` pair missing, one exit per multi-instance
//! state) must not compare equal; and under the `bug-trace-injected-fail` /
//! `bug-trace-exit-before-ap-part` features the model itself has the bug and the comparisons
//! fail (`should_panic`).

use std::sync::Arc;

use hotplug::tracefs::{record, CpuhpEvent, TraceLine};
use hotplug::*;

/// The kind of task an event comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// `cpuhp/N`.
    ApThread,
    /// The `work_on_cpu()` kworker running `_cpu_down()`.
    DownWorker,
    /// The writer (`sh` live, `biosim` in the model) running `_cpu_up()`.
    Writer,
}

fn role(l: &TraceLine) -> Role {
    if l.comm.starts_with("cpuhp/") {
        Role::ApThread
    } else if l.comm.starts_with("kworker/") {
        Role::DownWorker
    } else if l.comm == "sh" || l.comm == task::WRITER_COMM {
        Role::Writer
    } else {
        panic!("unexpected task {} in {l}", l.comm)
    }
}

type Seq = Vec<(Role, CpuhpEvent)>;

/// The cpuhp events of `lines` (other events, like `biosim_` annotations, dropped).
fn seq(lines: &[TraceLine]) -> Seq {
    lines
        .iter()
        .filter_map(|l| l.cpuhp().map(|e| (role(l), e.unwrap())))
        .collect()
}

fn live(name: &str) -> Seq {
    let path = format!(
        "{}/../tests/data/tracefs-6.18/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let lines: Vec<TraceLine> = text
        .lines()
        .map(|l| TraceLine::parse(l).unwrap_or_else(|e| panic!("{path}: {e}")))
        .collect();
    seq(&lines)
}

fn same(model: &Seq, live: &Seq) -> bool {
    model == live
}

fn assert_same(what: &str, model: &Seq, live: &Seq) {
    if same(model, live) {
        return;
    }
    let n = model.iter().zip(live).take_while(|(a, b)| a == b).count();
    panic!(
        "assertion failed: {what}: the model's cpuhp events differ from the live kernel's at \
         event {n} (model has {}, live {}):\n  model: {:?}\n  live:  {:?}",
        model.len(),
        live.len(),
        model.get(n),
        live.get(n)
    );
}

/// One state of the live table: number, name, startup / teardown function, instances
/// (`None`: single-instance).
type Spec = (
    i32,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    Option<usize>,
);

/// The fixed states with callbacks of the live kernel (`down-up-clean.trace`, and the
/// STARTING/DYING ones kernel/cpu.c has, which the trace cannot show). Their function names
/// come from the model's default table (`BUILTIN_FNS`); the names here check it.
const FIXED: &[Spec] = &[
    (
        3,
        "perf/x86/amd/uncore:prepare",
        None,
        Some("amd_uncore_cpu_dead"),
        None,
    ),
    (
        8,
        "virtio/net:dead",
        None,
        Some("virtnet_cpu_dead"),
        Some(1),
    ),
    (10, "slub:dead", None, Some("slub_cpu_dead"), None),
    (
        12,
        "mm/writeback:dead",
        None,
        Some("page_writeback_cpu_online"),
        None,
    ),
    (13, "mm/vmstat:dead", None, Some("vmstat_cpu_dead"), None),
    (14, "softirq:dead", None, Some("takeover_tasklets"), None),
    (19, "irq_poll:dead", None, Some("irq_poll_cpu_dead"), None),
    (
        20,
        "block/softirq:dead",
        None,
        Some("blk_softirq_cpu_dead"),
        None,
    ),
    (21, "block/bio:dead", None, Some("bio_cpu_dead"), Some(2)),
    (
        22,
        "acpi/cpu-drv:dead",
        None,
        Some("acpi_soft_cpu_dead"),
        None,
    ),
    (
        24,
        "block/mq:dead",
        None,
        Some("blk_mq_hctx_notify_dead"),
        Some(9),
    ),
    (
        25,
        "fs/buffer:dead",
        None,
        Some("buffer_exit_cpu_dead"),
        None,
    ),
    (26, "printk:dead", None, Some("console_cpu_notify"), None),
    (
        27,
        "mm/memctrl:dead",
        None,
        Some("memcg_hotplug_cpu_dead"),
        None,
    ),
    (
        28,
        "lib/percpu_cnt:dead",
        None,
        Some("percpu_counter_cpu_dead"),
        None,
    ),
    (
        29,
        "lib/radix:dead",
        None,
        Some("radix_tree_cpu_dead"),
        None,
    ),
    (
        30,
        "mm/page_alloc:pcp",
        Some("page_alloc_cpu_online"),
        Some("page_alloc_cpu_dead"),
        None,
    ),
    (31, "net/dev:dead", None, Some("dev_cpu_dead"), None),
    (
        32,
        "iommu/iova:dead",
        None,
        Some("iova_cpuhp_dead"),
        Some(0),
    ),
    (35, "random:prepare", Some("random_prepare_cpu"), None, None),
    (
        36,
        "workqueue:prepare",
        Some("workqueue_prepare_cpu"),
        None,
        None,
    ),
    (
        38,
        "hrtimers:prepare",
        Some("hrtimers_prepare_cpu"),
        None,
        None,
    ),
    (
        40,
        "smpcfd:prepare",
        Some("smpcfd_prepare_cpu"),
        Some("smpcfd_dead_cpu"),
        None,
    ),
    (41, "relay:prepare", Some("relay_prepare_cpu"), None, None),
    (
        43,
        "RCU/tree:prepare",
        Some("rcutree_prepare_cpu"),
        Some("rcutree_dead_cpu"),
        None,
    ),
    (
        51,
        "base/topology:prepare",
        Some("topology_add_dev"),
        Some("topology_remove_dev"),
        None,
    ),
    (
        54,
        "trace/RB:prepare",
        Some("trace_rb_cpu_prepare"),
        None,
        Some(2),
    ),
    (
        57,
        "block/zram:prepare",
        Some("zcomp_cpu_up_prepare"),
        Some("zcomp_cpu_dead"),
        Some(0),
    ),
    (
        58,
        "timers:prepare",
        Some("timers_prepare_cpu"),
        Some("timers_dead_cpu"),
        None,
    ),
    (59, "tmigr:prepare", Some("tmigr_cpu_prepare"), None, None),
    (
        86,
        "x86/cachectrl:starting",
        Some("cache_ap_online"),
        Some("cache_ap_offline"),
        None,
    ),
    (
        87,
        "sched:starting",
        Some("sched_cpu_starting"),
        Some("sched_cpu_dying"),
        None,
    ),
    (88, "RCU/tree:dying", None, Some("rcutree_dying_cpu"), None),
    (
        103,
        "perf/x86/amd/uncore:starting",
        Some("amd_uncore_cpu_starting"),
        Some("amd_uncore_cpu_dying"),
        None,
    ),
    (138, "smpcfd:dying", None, Some("smpcfd_dying_cpu"), None),
    (
        139,
        "hrtimers:dying",
        None,
        Some("hrtimers_cpu_dying"),
        None,
    ),
    (140, "tick:dying", None, Some("tick_cpu_dying"), None),
    (
        147,
        "kvm/cpu:online",
        Some("kvm_online_cpu"),
        Some("kvm_offline_cpu"),
        None,
    ),
    (
        148,
        "sched:waitempty",
        None,
        Some("sched_cpu_wait_empty"),
        None,
    ),
    (
        149,
        "smpboot/threads:online",
        Some("smpboot_unpark_threads"),
        Some("smpboot_park_threads"),
        None,
    ),
    (
        150,
        "irq/affinity:online",
        Some("irq_affinity_online_cpu"),
        None,
        None,
    ),
    (
        151,
        "block/mq:online",
        Some("blk_mq_hctx_notify_online"),
        Some("blk_mq_hctx_notify_offline"),
        Some(1),
    ),
    (
        154,
        "perf:online",
        Some("perf_event_init_cpu"),
        Some("perf_event_exit_cpu"),
        None,
    ),
    (
        157,
        "perf/x86/amd/uncore:online",
        Some("amd_uncore_cpu_online"),
        Some("amd_uncore_cpu_down_prepare"),
        None,
    ),
    (
        185,
        "tmigr:online",
        Some("tmigr_cpu_online"),
        Some("tmigr_cpu_offline"),
        None,
    ),
    (
        186,
        "lockup_detector:online",
        Some("lockup_detector_online_cpu"),
        Some("lockup_detector_offline_cpu"),
        None,
    ),
    (
        187,
        "workqueue:online",
        Some("workqueue_online_cpu"),
        Some("workqueue_offline_cpu"),
        None,
    ),
    (188, "random:online", Some("random_online_cpu"), None, None),
    (
        189,
        "RCU/tree:online",
        Some("rcutree_online_cpu"),
        Some("rcutree_offline_cpu"),
        None,
    ),
    (
        190,
        "kthreads:online",
        Some("kthreads_online_cpu"),
        None,
        None,
    ),
    (
        191,
        "base/cacheinfo:online",
        Some("cacheinfo_cpu_online"),
        Some("cacheinfo_cpu_pre_down"),
        None,
    ),
    (
        235,
        "sched:active",
        Some("sched_cpu_activate"),
        Some("sched_cpu_deactivate"),
        None,
    ),
];

/// The dynamic states in registration order (`CPUHP_BP_PREPARE_DYN` gives 61, 62;
/// `CPUHP_AP_ONLINE_DYN` 192..=203), with their function names from the trace.
const DYNAMIC: &[Spec] = &[
    (
        61,
        "kvmclock:setup_percpu",
        Some("kvmclock_setup_percpu"),
        None,
        None,
    ),
    (
        62,
        "fork:vm_stack_cache",
        None,
        Some("free_vm_stack_cache"),
        None,
    ),
    (
        192,
        "x86/kvm:online",
        Some("kvm_cpu_online"),
        Some("kvm_cpu_down_prepare"),
        None,
    ),
    (
        193,
        "mm/writeback:online",
        Some("page_writeback_cpu_online"),
        None,
        None,
    ),
    (
        194,
        "mm/vmstat:online",
        Some("vmstat_cpu_online"),
        Some("vmstat_cpu_down_prep"),
        None,
    ),
    (
        195,
        "padata:online",
        Some("padata_cpu_online"),
        None,
        Some(0),
    ),
    (
        196,
        "pci/amd_bus:online",
        Some("amd_bus_cpu_online"),
        None,
        None,
    ),
    (
        197,
        "io-wq/online",
        Some("io_wq_cpu_online"),
        Some("io_wq_cpu_offline"),
        Some(0),
    ),
    (
        198,
        "topology/cpu-capacity",
        Some("cpu_capacity_sysctl_add"),
        Some("cpu_capacity_sysctl_remove"),
        None,
    ),
    (
        199,
        "x86/cpuid:online",
        Some("cpuid_device_create"),
        Some("cpuid_device_destroy"),
        None,
    ),
    (
        200,
        "lib/percpu_cnt:online",
        Some("compute_batch_value"),
        None,
        None,
    ),
    (
        201,
        "acpi/cpu-drv:online",
        Some("acpi_soft_cpu_online"),
        None,
        None,
    ),
    (
        202,
        "virtio/net:online",
        Some("virtnet_cpu_online"),
        Some("virtnet_cpu_down_prep"),
        Some(1),
    ),
    (203, "printk:online", Some("console_cpu_notify"), None, None),
];

fn noop() -> Callback<()> {
    Arc::new(|_: &(), _: &Invocation| Ok(()))
}

fn register(hp: &mut Cpuhp<()>, spec: &Spec, state: StateId, dynamic: bool) {
    let &(want, name, startup, teardown, instances) = spec;
    let (s, t) = (startup.map(|_| noop()), teardown.map(|_| noop()));
    let got = match instances {
        None => hp.cpuhp_setup_state_nocalls(state, name, s, t),
        Some(_) => hp.cpuhp_setup_state_multi(state, name, s, t),
    }
    .unwrap();
    assert_eq!(got.0, want, "{name} got slot {got}");
    if dynamic {
        hp.set_callback_fns(got, startup, teardown).unwrap();
    }
    for _ in 0..instances.unwrap_or(0) {
        hp.cpuhp_state_add_instance_nocalls(got).unwrap();
    }
    let info = hp.step_info(got).unwrap();
    assert_eq!(info.startup_fn.as_deref(), startup, "{name}");
    assert_eq!(info.teardown_fn.as_deref(), teardown, "{name}");
}

/// A 2-CPU machine with the live kernel's table.
fn live_machine() -> Cpuhp<()> {
    let mut hp: Cpuhp<()> = Cpuhp::new(2, 2).unwrap();
    for spec in FIXED {
        register(&mut hp, spec, StateId(spec.0), false);
    }
    for spec in DYNAMIC {
        let range = if spec.0 < CPUHP_BRINGUP_CPU.0 {
            CPUHP_BP_PREPARE_DYN
        } else {
            CPUHP_AP_ONLINE_DYN
        };
        register(&mut hp, spec, range, true);
    }
    hp
}

const CPU1: CpuId = CpuId(1);

fn model_clean() -> Seq {
    let mut hp = live_machine();
    let (r, lines) = record(|| {
        hp.cpu_down(CPU1, CPUHP_OFFLINE, &()).unwrap();
        hp.cpu_up(CPU1, CPUHP_ONLINE, &())
    });
    r.unwrap();
    seq(&lines)
}

fn model_fail_187() -> (Seq, Vec<TraceLine>) {
    let mut hp = live_machine();
    hp.set_fail(CPU1, 187).unwrap();
    let (r, lines) = record(|| hp.cpu_down(CPU1, CPUHP_OFFLINE, &()));
    // down-fail-187.rc: EAGAIN, state=236 target=236 fail=-1 online=1.
    assert_eq!(r.unwrap_err().errno(), Errno::EAGAIN);
    assert_eq!(hp.state(CPU1).unwrap(), CPUHP_ONLINE);
    assert_eq!(hp.target(CPU1).unwrap(), CPUHP_ONLINE);
    assert_eq!(hp.fail(CPU1).unwrap(), -1);
    assert!(hp.cpu_online(CPU1));
    (seq(&lines), lines)
}

fn model_fail_61() -> Seq {
    let mut hp = live_machine();
    hp.cpu_down(CPU1, CPUHP_OFFLINE, &()).unwrap();
    hp.set_fail(CPU1, 61).unwrap();
    let (r, lines) = record(|| hp.cpu_up(CPU1, CPUHP_ONLINE, &()));
    // up-fail-61.rc: EAGAIN, state=0 target=0 fail=-1 online=0.
    assert_eq!(r.unwrap_err().errno(), Errno::EAGAIN);
    assert_eq!(hp.state(CPU1).unwrap(), CPUHP_OFFLINE);
    assert_eq!(hp.target(CPU1).unwrap(), CPUHP_OFFLINE);
    assert_eq!(hp.fail(CPU1).unwrap(), -1);
    assert!(!hp.cpu_online(CPU1));
    seq(&lines)
}

#[test]
fn the_live_table_lists_as_the_live_kernel() {
    let hp = live_machine();
    let path = format!(
        "{}/../tests/data/tracefs-6.18/states.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    let want = std::fs::read_to_string(path).unwrap();
    assert_eq!(hp.states_listing(), want);
}

#[test]
#[cfg_attr(
    feature = "bug-trace-exit-before-ap-part",
    should_panic(expected = "assertion")
)]
fn a_clean_offline_and_online_trace_as_on_the_live_kernel() {
    assert_same(
        "down-up-clean",
        &model_clean(),
        &live("down-up-clean.trace"),
    );
}

#[test]
#[cfg_attr(
    any(
        feature = "bug-trace-injected-fail",
        feature = "bug-rollback-calls-failed-state"
    ),
    should_panic(expected = "assertion")
)]
fn an_offline_failed_at_187_traces_as_on_the_live_kernel() {
    let (model, lines) = model_fail_187();
    assert_same("down-fail-187", &model, &live("down-fail-187.trace"));
    // biosim's note of the injected failure is there, as an annotation only.
    let marks: Vec<String> = lines
        .iter()
        .filter(|l| l.event == "tracing_mark_write")
        .map(|l| format!("{}-{} [{:03}] {}", l.comm, l.pid, l.cpu, l.fields))
        .collect();
    assert_eq!(
        marks,
        vec![
            "cpuhp/1-101 [001] biosim_cpuhp_fail_injected: cpu: 0001 step: 187 \
             (workqueue_offline_cpu teardown): -EAGAIN before the callback, no cpuhp event"
        ]
    );
}

#[test]
#[cfg_attr(
    feature = "bug-trace-injected-fail",
    should_panic(expected = "assertion")
)]
fn an_online_failed_at_61_traces_as_on_the_live_kernel() {
    assert_same("up-fail-61", &model_fail_61(), &live("up-fail-61.trace"));
}

/// The comparison's twins: each sequence has one of the fidelity bugs the model had or could
/// have, and must not compare equal to the live one.
#[test]
fn the_comparison_catches_each_fidelity_bug() {
    let clean = live("down-up-clean.trace");
    let f187 = live("down-fail-187.trace");
    let f61 = live("up-fail-61.trace");
    assert!(same(&clean, &clean) && same(&f187, &f187) && same(&f61, &f61));
    let mut bugs: Vec<(&str, Seq, &Seq)> = Vec::new();

    // An injected failure traced as a pair (what the model printed before).
    let mut s = f187.clone();
    let at = s
        .iter()
        .position(|(_, e)| matches!(e, CpuhpEvent::Enter { target: 236, .. }) && e.step() == 188)
        .unwrap();
    s.insert(
        at,
        (
            Role::ApThread,
            CpuhpEvent::Exit {
                cpu: 1,
                state: 186,
                step: 187,
                ret: -11,
            },
        ),
    );
    s.insert(
        at,
        (
            Role::ApThread,
            CpuhpEvent::Enter {
                multi: false,
                cpu: 1,
                target: 144,
                step: 187,
                fun: "workqueue_offline_cpu".into(),
            },
        ),
    );
    bugs.push(("injected fail traced", s, &f187));

    // A teardown's exit reporting the step instead of step - 1.
    let mut s = clean.clone();
    if let Some((_, CpuhpEvent::Exit { state, .. })) = s.get_mut(2) {
        *state += 1;
    }
    bugs.push(("state: off by one", s, &clean));

    // No cpuhp_kick_ap_work pair.
    let s: Seq = clean
        .iter()
        .filter(|(_, e)| e.step() != 236)
        .cloned()
        .collect();
    bugs.push(("no kick_ap_work", s, &clean));

    // One cpuhp_exit per multi-instance state instead of one per instance.
    let mut s = clean.clone();
    let first = s
        .iter()
        .position(|(_, e)| matches!(e, CpuhpEvent::Exit { step: 24, .. }))
        .unwrap();
    s.remove(first);
    bugs.push(("one exit per multi state", s, &clean));

    // The exit of cpuhp_bringup_ap() before the AP part.
    let mut s = clean.clone();
    let exit83 = s
        .iter()
        .rposition(|(_, e)| matches!(e, CpuhpEvent::Exit { step: 83, .. }))
        .unwrap();
    let e = s.remove(exit83);
    let enter83 = s
        .iter()
        .rposition(|(_, e)| matches!(e, CpuhpEvent::Enter { step: 83, .. }))
        .unwrap();
    s.insert(enter83 + 1, e);
    bugs.push(("exit before the AP part", s, &clean));

    // The rollback of fail-61 running the failed state's own teardown.
    let mut s = f61.clone();
    let at = s
        .iter()
        .position(|(_, e)| matches!(e, CpuhpEvent::Enter { target: 0, .. }))
        .unwrap();
    s.insert(
        at,
        (
            Role::Writer,
            CpuhpEvent::Enter {
                multi: false,
                cpu: 1,
                target: 0,
                step: 61,
                fun: "kvmclock_setup_percpu".into(),
            },
        ),
    );
    bugs.push(("rollback calls the failed state", s, &f61));

    for (what, buggy, live) in bugs {
        assert!(!same(&buggy, live), "the comparison misses: {what}");
    }
}

/// The `(state_after, ret)` of the log's records of step `step` nesting the AP part.
fn nested_records(hp: &Cpuhp<()>, step: StateId) -> Vec<(i32, i32)> {
    hp.log()
        .iter()
        .filter_map(|r| match r {
            LogRecord::Call {
                invocation,
                result,
                state_after,
                nests_ap_part: true,
                ..
            } if invocation.state == step => Some((
                state_after.0,
                result.map_or_else(|e| e.as_neg_i32(), |()| 0),
            )),
            _ => None,
        })
        .collect()
}

/// The log's record of `cpuhp_bringup_ap()` (83) and `takedown_cpu()` (144) holds what their
/// `cpuhp_exit` reports once the AP part ended, as the live kernel prints it: a clean offline
/// `state: 84 step: 144 ret: 0` and online `state: 236 step: 83 ret: 0`
/// (`tests/data/calibrate/hotplug-6.18/clean-*.trace`), an online failed at 187 `state: 145
/// step: 83 ret: -11` (`cases/up-fail-187.trace`), not the callback proper's return before
/// that part. The model's own tracepoint says the same. Under `bug-trace-exit-before-ap-part`
/// both keep the early values (`should_panic`).
#[test]
#[cfg_attr(
    feature = "bug-trace-exit-before-ap-part",
    should_panic(expected = "assertion")
)]
fn the_log_records_the_nesting_steps_exit_after_the_ap_part() {
    let mut hp = live_machine();
    hp.cpu_down(CPU1, CPUHP_OFFLINE, &()).unwrap();
    assert_eq!(nested_records(&hp, CPUHP_TEARDOWN_CPU), vec![(84, 0)]);
    hp.take_log();
    hp.cpu_up(CPU1, CPUHP_ONLINE, &()).unwrap();
    assert_eq!(nested_records(&hp, CPUHP_BRINGUP_CPU), vec![(236, 0)]);
    hp.cpu_down(CPU1, CPUHP_OFFLINE, &()).unwrap();
    hp.take_log();
    hp.set_fail(CPU1, 187).unwrap();
    let (r, lines) = record(|| hp.cpu_up(CPU1, CPUHP_ONLINE, &()));
    assert_eq!(r.unwrap_err().errno(), Errno::EAGAIN);
    assert_eq!(nested_records(&hp, CPUHP_BRINGUP_CPU), vec![(145, -11)]);
    let exits: Vec<(i32, i32)> = seq(&lines)
        .into_iter()
        .filter_map(|(_, e)| match e {
            CpuhpEvent::Exit {
                state,
                step: 83,
                ret,
                ..
            } if ret != 0 => Some((state, ret)),
            _ => None,
        })
        .collect();
    // The recording keeps the failing exits: the startup's, not the rollback's finish_cpu.
    assert_eq!(exits, vec![(145, -11)]);
}
