//! The dynamic hotplug states that other subsystems of a 6.18 x86_64 kernel take before the subsys
//! initcalls run (`setup_arch()`, `start_kernel()`, `kernel_init_freeable()`, postcore
//! initcalls), so that a subsystem registering later, like the batcher's `init_bio()`-time
//! (`subsys_initcall`, block/bio.c) `cpuhp_setup_state_nocalls()`, gets the slot it would get on
//! that kernel. `io-wq/online` (197 in the reference table) is a subsys initcall of `io_uring/`,
//! which links after `block/`, so the batcher takes its slot.
//!
//! Their callbacks are not modelled: each is registered by name only, so it holds its slot in
//! `/sys/devices/system/cpu/hotplug/states` and no hotplug step runs for it (the kernel's would
//! run, touching nothing biosim models). Slots as in
//! `shared/reference/cpuhp-states-linux-6.18.txt`.

use super::Kernel;
use hotplug::{CPUHP_AP_ONLINE_DYN, CPUHP_BP_PREPARE_DYN};

/// The early dynamic users, in the order their `__init` code registers them, with the range each
/// asks for.
pub const EARLY_DYNAMIC_STATES: [(&str, hotplug::StateId); 7] = [
    // arch/x86/kernel/kvmclock.c, kvmclock_init() from setup_arch(): slot 61.
    ("kvmclock:setup_percpu", CPUHP_BP_PREPARE_DYN),
    // kernel/fork.c, fork_init() from start_kernel(): slot 62.
    ("fork:vm_stack_cache", CPUHP_BP_PREPARE_DYN),
    // arch/x86/kernel/kvm.c, kvm_guest_init() from setup_arch(): slot 192.
    ("x86/kvm:online", CPUHP_AP_ONLINE_DYN),
    // mm/page-writeback.c, page_writeback_init() from start_kernel(): slot 193.
    ("mm/writeback:online", CPUHP_AP_ONLINE_DYN),
    // mm/vmstat.c, init_mm_internals() from kernel_init_freeable(), before any initcall: 194.
    ("mm/vmstat:online", CPUHP_AP_ONLINE_DYN),
    // kernel/padata.c, padata_init() from kernel_init_freeable(), before any initcall: 195.
    ("padata:online", CPUHP_AP_ONLINE_DYN),
    // arch/x86/pci/amd_bus.c, amd_postcore_init() (postcore_initcall; AMD and Hygon CPUs, as on
    // the machine the reference table was read from): 196.
    ("pci/amd_bus:online", CPUHP_AP_ONLINE_DYN),
];

/// Registers [`EARLY_DYNAMIC_STATES`] with `cpuhp_setup_state_nocalls()` and no callbacks.
pub(crate) fn register_early_dynamic_states(kernel: &Kernel) {
    let mut hp = kernel.hotplug();
    for (name, range) in EARLY_DYNAMIC_STATES {
        hp.cpuhp_setup_state_nocalls(range, name, None, None)
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
}
