//! The dynamic hotplug states that other subsystems of a 6.18 x86_64 kernel take before the subsys
//! initcalls run (`setup_arch()`, `start_kernel()`, `kernel_init_freeable()`, postcore
//! initcalls), so that a subsystem registering later, like the batcher's `init_bio()`-time
//! (`subsys_initcall`, block/bio.c) `cpuhp_setup_state_nocalls()`, gets the slot it would get on
//! that kernel. `io-wq/online` (197 in the reference table) is a subsys initcall of `io_uring/`,
//! which links after `block/`, so the batcher takes its slot.
//!
//! Their callbacks are modelled by presence only: a step has a startup and/or a teardown where the
//! live 6.18 kernel's trace shows one (`shared/reference/tracefs-6.18/down-up-clean.trace`), each
//! named as that trace's `cpuhp_enter` prints it (61 `kvmclock_setup_percpu`, 62
//! `free_vm_stack_cache`, 192 `kvm_cpu_online`/`kvm_cpu_down_prepare`, 193
//! `page_writeback_cpu_online`, 194 `vmstat_cpu_online`/`vmstat_cpu_down_prep`, 196
//! `amd_bus_cpu_online`), and each does nothing biosim models (returns 0). So a hotplug operation
//! takes the steps the kernel's takes, prints the kernel's function names, and `hotplug/fail`
//! accepts the states the kernel's accepts (194 is an `AP_ONLINE_DYN` state whose teardown runs
//! after the batcher's down_prep: failing there rolls an offline back through the batcher's online
//! callback).
//!
//! `padata:online` (195) is a multi-instance state (`cpuhp_setup_state_multi(..., padata_cpu_online,
//! NULL)` in kernel/padata.c) without instances on this machine: it has a startup callback, so
//! `hotplug/fail` accepts 195 as on the live kernel, but its calls invoke and trace nothing, as in
//! the trace. It is the one multi-instance state among the model's: the live kernel's others
//! (8 `virtio/net:dead`, 21 `block/bio:dead`, 24 `block/mq:dead`, 54 `trace/RB:prepare`, 151
//! `block/mq:online`, 202 `virtio/net:online`) belong to devices and subsystems the model does not
//! have, and each of their instance calls would be a step the scenarios would have to count; the
//! hotplug crate's `tests/live_traces.rs` runs the live table with all of them. Slots as in
//! `shared/reference/cpuhp-states-linux-6.18.txt`.

use super::{Cpu, Kernel};
use crate::sync::UntrackedArc;
use hotplug::{CPUHP_AP_ONLINE_DYN, CPUHP_BP_PREPARE_DYN};

/// The early dynamic users, in the order their `__init` code registers them, with the range each
/// asks for and the kernel functions of its startup and teardown callbacks (`None`: no callback).
pub const EARLY_DYNAMIC_STATES: [EarlyState; 7] = [
    // arch/x86/kernel/kvmclock.c, kvmclock_init() from setup_arch(): slot 61.
    EarlyState::new(
        "kvmclock:setup_percpu",
        CPUHP_BP_PREPARE_DYN,
        Some("kvmclock_setup_percpu"),
        None,
    ),
    // kernel/fork.c, fork_init() from start_kernel(): slot 62.
    EarlyState::new(
        "fork:vm_stack_cache",
        CPUHP_BP_PREPARE_DYN,
        None,
        Some("free_vm_stack_cache"),
    ),
    // arch/x86/kernel/kvm.c, kvm_guest_init() from setup_arch(): slot 192.
    EarlyState::new(
        "x86/kvm:online",
        CPUHP_AP_ONLINE_DYN,
        Some("kvm_cpu_online"),
        Some("kvm_cpu_down_prepare"),
    ),
    // mm/page-writeback.c, page_writeback_init() from start_kernel(): slot 193.
    EarlyState::new(
        "mm/writeback:online",
        CPUHP_AP_ONLINE_DYN,
        Some("page_writeback_cpu_online"),
        None,
    ),
    // mm/vmstat.c, init_mm_internals() from kernel_init_freeable(), before any initcall: 194.
    EarlyState::new(
        "mm/vmstat:online",
        CPUHP_AP_ONLINE_DYN,
        Some("vmstat_cpu_online"),
        Some("vmstat_cpu_down_prep"),
    ),
    // kernel/padata.c, padata_init() from kernel_init_freeable(), before any initcall: 195
    // (multi-instance, no instance: its calls invoke nothing).
    EarlyState::multi(
        "padata:online",
        CPUHP_AP_ONLINE_DYN,
        Some("padata_cpu_online"),
        None,
    ),
    // arch/x86/pci/amd_bus.c, amd_postcore_init() (postcore_initcall; AMD and Hygon CPUs, as on
    // the machine the reference table was read from): 196.
    EarlyState::new(
        "pci/amd_bus:online",
        CPUHP_AP_ONLINE_DYN,
        Some("amd_bus_cpu_online"),
        None,
    ),
];

/// One early dynamic state: its name, the range it asks for, the kernel functions of its
/// callbacks, whether it is multi-instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EarlyState {
    /// The name `/sys/devices/system/cpu/hotplug/states` lists.
    pub name: &'static str,
    /// `CPUHP_BP_PREPARE_DYN` or `CPUHP_AP_ONLINE_DYN`.
    pub range: hotplug::StateId,
    /// The startup callback's kernel function, if it has one (it does nothing biosim models).
    pub startup: Option<&'static str>,
    /// The teardown callback's kernel function, if it has one.
    pub teardown: Option<&'static str>,
    /// Registered with `cpuhp_setup_state_multi()` (and no instance added).
    pub multi_instance: bool,
}

impl EarlyState {
    const fn new(
        name: &'static str,
        range: hotplug::StateId,
        startup: Option<&'static str>,
        teardown: Option<&'static str>,
    ) -> Self {
        Self {
            name,
            range,
            startup,
            teardown,
            multi_instance: false,
        }
    }

    const fn multi(
        name: &'static str,
        range: hotplug::StateId,
        startup: Option<&'static str>,
        teardown: Option<&'static str>,
    ) -> Self {
        Self {
            multi_instance: true,
            ..Self::new(name, range, startup, teardown)
        }
    }
}

/// Registers [`EARLY_DYNAMIC_STATES`] with `cpuhp_setup_state_nocalls()` (or
/// `cpuhp_setup_state_multi()`), each callback it has a no-op (returns 0) named as the kernel's.
pub(crate) fn register_early_dynamic_states(kernel: &Kernel) {
    let mut hp = kernel.hotplug();
    for st in EARLY_DYNAMIC_STATES {
        let noop =
            |_: &str| -> hotplug::Callback<Cpu> { UntrackedArc::new(|_: &Cpu, _: &_| Ok(())) };
        let (startup, teardown) = (st.startup.map(noop), st.teardown.map(noop));
        let slot = if st.multi_instance {
            hp.cpuhp_setup_state_multi(st.range, st.name, startup, teardown)
        } else {
            hp.cpuhp_setup_state_nocalls(st.range, st.name, startup, teardown)
        }
        .expect("a fresh state table has free dynamic slots");
        hp.set_callback_fns(slot, st.startup, st.teardown)
            .expect("a name for each callback registered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KernelConfig;

    #[test]
    fn the_early_users_hold_the_slots_of_a_6_18_x86_64_kernel() {
        let k = Kernel::new(KernelConfig::default(), 2).unwrap();
        let listing = k.hotplug().states_listing();
        for line in [
            " 61: kvmclock:setup_percpu\n",
            " 62: fork:vm_stack_cache\n",
            "192: x86/kvm:online\n",
            "193: mm/writeback:online\n",
            "194: mm/vmstat:online\n",
            "195: padata:online\n",
            "196: pci/amd_bus:online\n",
        ] {
            assert!(listing.contains(line), "{line:?} missing in:\n{listing}");
        }
    }

    /// `hotplug/fail` accepts the early states, each of which has a callback, as the live kernel
    /// does (checked on it: `echo 195 > cpu1/hotplug/fail` succeeds though padata:online has no
    /// instance), and refuses a dynamic slot without one (fail_store(): "Cannot fail anything
    /// that doesn't have callbacks").
    #[test]
    fn fail_is_accepted_where_the_kernel_has_a_callback() {
        let k = Kernel::new(KernelConfig::default(), 2).unwrap();
        let mut hp = k.hotplug();
        for st in [192, 193, 194, 195, 196] {
            assert!(hp.set_fail(crate::CpuId(1), st).is_ok(), "{st}");
        }
        assert!(hp.set_fail(crate::CpuId(1), 197).is_err(), "a free slot");
        let padata = hp.step_info(hotplug::StateId(195)).unwrap();
        assert!(padata.multi_instance && padata.instances.is_empty());
        assert_eq!(padata.startup_fn.as_deref(), Some("padata_cpu_online"));
        assert_eq!(
            hp.step_info(hotplug::StateId(194))
                .unwrap()
                .teardown_fn
                .as_deref(),
            Some("vmstat_cpu_down_prep")
        );
    }

    /// The live 6.18 recordings, copied into the hotplug crate's test data.
    fn live_lines(name: &str) -> Vec<hotplug::tracefs::TraceLine> {
        let path = format!(
            "{}/../tests/data/tracefs-6.18/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .lines()
            .map(|l| hotplug::tracefs::TraceLine::parse(l).unwrap_or_else(|e| panic!("{e}")))
            .collect()
    }

    /// `(task kind, event)`: `'A'` for `cpuhp/N`, `'K'` for the `cpu_down()` kworker, `'W'` for
    /// the writer (`sh` live, `biosim` here).
    type Seq = Vec<(char, hotplug::tracefs::CpuhpEvent)>;

    /// The cpuhp events of `lines` at the states in `keep`.
    fn restricted(lines: &[hotplug::tracefs::TraceLine], keep: &[i32]) -> Seq {
        lines
            .iter()
            .filter_map(|l| {
                let e = l.cpuhp()?.unwrap();
                let who = match l.comm.as_str() {
                    c if c.starts_with("cpuhp/") => 'A',
                    c if c.starts_with("kworker/") => 'K',
                    _ => 'W',
                };
                keep.contains(&e.step()).then_some((who, e))
            })
            .collect()
    }

    /// The states this kernel's table shares with the live kernel's: a callback here, and the
    /// same name at the same number in the live `states.txt`; plus 236 for `cpuhp_kick_ap_work`.
    fn shared_states(k: &Kernel) -> Vec<i32> {
        let path = format!(
            "{}/../tests/data/tracefs-6.18/states.txt",
            env!("CARGO_MANIFEST_DIR")
        );
        let live = std::fs::read_to_string(path).unwrap();
        let hp = k.hotplug();
        let mut keep: Vec<i32> = (1..236)
            .filter(|&s| {
                let Some(info) = hp.step_info(hotplug::StateId(s)) else {
                    return false;
                };
                let line = format!("{s:3}: {}", info.name.as_deref().unwrap_or("-"));
                (info.has_startup || info.has_teardown) && live.lines().any(|l| l == line)
            })
            .collect();
        keep.push(236);
        keep
    }

    fn compare(what: &str, model: &Seq, live: &Seq) {
        let n = model.iter().zip(live).take_while(|(a, b)| a == b).count();
        assert!(
            model == live,
            "{what}: the model's cpuhp events differ from the live kernel's at event {n} of the \
             restricted sequence:\n  model: {:?}\n  live:  {:?}",
            model.get(n),
            live.get(n)
        );
    }

    /// This kernel's boot table against the live kernel: on the states they share, a clean
    /// offline/online of CPU1, an offline failed at 187 and an online failed at 61 print the live
    /// traces' cpuhp events (kind, step, target, function name, `state:`, `ret:`, kind of task).
    #[test]
    fn the_boot_table_traces_as_the_live_kernel_on_the_states_it_shares() {
        let cpu1 = crate::CpuId(1);
        let run = |fail: Option<i32>, down_first: bool, up: bool| {
            let k = Kernel::new(KernelConfig::default(), 2).unwrap();
            if down_first {
                k.cpu_hotplug_to(cpu1, hotplug::CPUHP_OFFLINE, false)
                    .unwrap();
            }
            if let Some(f) = fail {
                k.hotplug().set_fail(cpu1, f).unwrap();
            }
            let (r, lines) = hotplug::tracefs::record(|| {
                if up {
                    k.cpu_hotplug_to(cpu1, hotplug::CPUHP_ONLINE, true)
                } else {
                    let r = k.cpu_hotplug_to(cpu1, hotplug::CPUHP_OFFLINE, false);
                    if fail.is_none() {
                        r.unwrap();
                        return k.cpu_hotplug_to(cpu1, hotplug::CPUHP_ONLINE, true);
                    }
                    r
                }
            });
            let keep = shared_states(&k);
            (r, restricted(&lines, &keep), keep)
        };
        let (r, model, keep) = run(None, false, false);
        r.unwrap();
        // The shared states: kernel/cpu.c's own, the fixed ones the model's subsystems register
        // (workqueue, timers) and the early dynamic ones.
        assert_eq!(
            keep,
            vec![1, 36, 58, 61, 62, 82, 83, 144, 187, 192, 193, 194, 195, 196, 236]
        );
        let clean = restricted(&live_lines("down-up-clean.trace"), &keep);
        compare("down-up-clean", &model, &clean);

        let (r, model, keep) = run(Some(187), false, false);
        assert_eq!(r.unwrap_err().errno(), hotplug::Errno::EAGAIN);
        let f187 = restricted(&live_lines("down-fail-187.trace"), &keep);
        compare("down-fail-187", &model, &f187);

        let (r, model, keep) = run(Some(61), true, true);
        assert_eq!(r.unwrap_err().errno(), hotplug::Errno::EAGAIN);
        let f61 = restricted(&live_lines("up-fail-61.trace"), &keep);
        compare("up-fail-61", &model, &f61);

        // The comparison's twins: a function name off, and the injected failure traced.
        let mut wrong_name = clean.clone();
        if let Some((_, hotplug::tracefs::CpuhpEvent::Enter { fun, .. })) =
            wrong_name.iter_mut().find(|(_, e)| e.step() == 187)
        {
            *fun = "workqueue:online".into();
        }
        assert!(wrong_name != clean, "a wrong %ps name must differ");
        let mut traced_fail = f187.clone();
        traced_fail.insert(
            2,
            (
                'A',
                hotplug::tracefs::CpuhpEvent::Enter {
                    multi: false,
                    cpu: 1,
                    target: 144,
                    step: 187,
                    fun: "workqueue_offline_cpu".into(),
                },
            ),
        );
        assert!(traced_fail != f187, "a traced injected failure must differ");
    }
}
