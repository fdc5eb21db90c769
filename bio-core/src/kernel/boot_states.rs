//! The dynamic hotplug states that other subsystems of a 6.18 x86_64 kernel take before the subsys
//! initcalls run (`setup_arch()`, `start_kernel()`, `kernel_init_freeable()`, postcore
//! initcalls), so that a subsystem registering later, like the batcher's `init_bio()`-time
//! (`subsys_initcall`, block/bio.c) `cpuhp_setup_state_nocalls()`, gets the slot it would get on
//! that kernel. `io-wq/online` (197 in the reference table) is a subsys initcall of `io_uring/`,
//! which links after `block/`, so the batcher takes its slot.
//!
//! Their callbacks are modelled by presence only: a step has a startup and/or a teardown where the
//! live 6.18 kernel's trace shows one (`shared/reference/tracefs-6.18/down-up-clean.trace`: 61
//! `kvmclock_setup_percpu`, 62 `free_vm_stack_cache`, 192 `kvm_cpu_online`/`kvm_cpu_down_prepare`,
//! 193 `page_writeback_cpu_online`, 194 `vmstat_cpu_online`/`vmstat_cpu_down_prep`, 196
//! `amd_bus_cpu_online`), and each does nothing biosim models (returns 0). So a hotplug operation
//! takes the steps the kernel's takes, and `hotplug/fail` accepts the states the kernel's accepts
//! (194 is an `AP_ONLINE_DYN` state whose teardown runs after the batcher's down_prep: failing there
//! rolls an offline back through the batcher's online callback). `padata:online` (195) is a
//! multi-instance state (`cpuhp_setup_state_multi()`); with no instance added it runs nothing,
//! as in the trace, so it is registered without callbacks. Slots as in
//! `shared/reference/cpuhp-states-linux-6.18.txt`.

use super::{Cpu, Kernel};
use crate::sync::UntrackedArc;
use hotplug::{CPUHP_AP_ONLINE_DYN, CPUHP_BP_PREPARE_DYN};

/// The early dynamic users, in the order their `__init` code registers them, with the range each
/// asks for.
/// asks for and whether it has a startup and a teardown callback.
pub const EARLY_DYNAMIC_STATES: [EarlyState; 7] = [
    // arch/x86/kernel/kvmclock.c, kvmclock_init() from setup_arch(): slot 61.
    EarlyState::new("kvmclock:setup_percpu", CPUHP_BP_PREPARE_DYN, true, false),
    // kernel/fork.c, fork_init() from start_kernel(): slot 62.
    EarlyState::new("fork:vm_stack_cache", CPUHP_BP_PREPARE_DYN, false, true),
    // arch/x86/kernel/kvm.c, kvm_guest_init() from setup_arch(): slot 192.
    EarlyState::new("x86/kvm:online", CPUHP_AP_ONLINE_DYN, true, true),
    // mm/page-writeback.c, page_writeback_init() from start_kernel(): slot 193.
    EarlyState::new("mm/writeback:online", CPUHP_AP_ONLINE_DYN, true, false),
    // mm/vmstat.c, init_mm_internals() from kernel_init_freeable(), before any initcall: 194.
    EarlyState::new("mm/vmstat:online", CPUHP_AP_ONLINE_DYN, true, true),
    // kernel/padata.c, padata_init() from kernel_init_freeable(), before any initcall: 195
    // (multi-instance, no instance: no calls).
    EarlyState::new("padata:online", CPUHP_AP_ONLINE_DYN, false, false),
    // arch/x86/pci/amd_bus.c, amd_postcore_init() (postcore_initcall; AMD and Hygon CPUs, as on
    // the machine the reference table was read from): 196.
    EarlyState::new("pci/amd_bus:online", CPUHP_AP_ONLINE_DYN, true, false),
];

/// One early dynamic state: its name, the range it asks for, which callbacks it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EarlyState {
    /// The name `/sys/devices/system/cpu/hotplug/states` lists.
    pub name: &'static str,
    /// `CPUHP_BP_PREPARE_DYN` or `CPUHP_AP_ONLINE_DYN`.
    pub range: hotplug::StateId,
    /// Whether it has a startup callback (the kernel's does nothing biosim models).
    pub startup: bool,
    /// Whether it has a teardown callback.
    pub teardown: bool,
}

impl EarlyState {
    const fn new(
        name: &'static str,
        range: hotplug::StateId,
        startup: bool,
        teardown: bool,
    ) -> Self {
        Self {
            name,
            range,
            startup,
            teardown,
        }
    }
}

/// Registers [`EARLY_DYNAMIC_STATES`] with `cpuhp_setup_state_nocalls()`, each callback it has a
/// no-op (returns 0).
pub(crate) fn register_early_dynamic_states(kernel: &Kernel) {
    let mut hp = kernel.hotplug();
    for st in EARLY_DYNAMIC_STATES {
        let noop = || -> hotplug::Callback<Cpu> { UntrackedArc::new(|_: &Cpu, _: &_| Ok(())) };
        hp.cpuhp_setup_state_nocalls(
            st.range,
            st.name,
            st.startup.then(noop),
            st.teardown.then(noop),
        )
        .expect("a fresh state table has free dynamic slots");
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

    /// `hotplug/fail` accepts the early states that have a callback and refuses the one without
    /// (fail_store(): "Cannot fail anything that doesn't have callbacks"), as the live kernel does.
    #[test]
    fn fail_is_accepted_where_the_kernel_has_a_callback() {
        let k = Kernel::new(KernelConfig::default(), 2).unwrap();
        let mut hp = k.hotplug();
        for st in [192, 193, 194, 196] {
            assert!(hp.set_fail(crate::CpuId(1), st).is_ok(), "{st}");
        }
        assert!(
            hp.set_fail(crate::CpuId(1), 195).is_err(),
            "padata:online has no instance"
        );
    }
}
