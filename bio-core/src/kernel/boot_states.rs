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
}
