//! The step table: `struct cpuhp_step` and the static `cpuhp_hp_states[]` of
//! kernel/cpu.c, plus the names a 6.18 kernel shows in
//! `/sys/devices/system/cpu/hotplug/states` for its fixed states.
//!
//! Three kinds of step exist in the default table ([`StepKind`]):
//! - **core** steps are kernel/cpu.c's own machinery (`bringup_cpu()`,
//!   `takedown_cpu()`, ...). Their callbacks are built in and do nothing in the
//!   model except exist, so they are stepped, traced and can be failed through
//!   `hotplug/fail` exactly like the kernel's; they cannot be registered over.
//! - **builtin** steps are named, fixed states of the 6.18 table whose
//!   callbacks belong to a subsystem (`workqueue:prepare`, `block/bio:dead`).
//!   They start without callbacks; the simulator's subsystems attach theirs with
//!   `cpuhp_setup_state*()` on the fixed state (once; a second setup is `-EBUSY`).
//! - **free** steps are unnamed: the dynamic slots and unused enum values.

use std::sync::Arc;

use crate::invoke::Callback;
use crate::state::*;

/// What kind of step a table entry is; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// kernel/cpu.c's own step (`cpu:bringup`, `cpu:teardown`, ...): built-in
    /// callbacks, not registrable.
    Core,
    /// A named fixed state whose subsystem registers the callbacks later.
    Builtin,
    /// An unnamed state (dynamic slot or unused number).
    Free,
}

/// Read-only view of one table entry (`struct cpuhp_step`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepInfo {
    /// The state number.
    pub state: StateId,
    /// `sp->name`, if the step is named.
    pub name: Option<Arc<str>>,
    /// Whether a startup callback is installed.
    pub has_startup: bool,
    /// Whether a teardown callback is installed.
    pub has_teardown: bool,
    /// `sp->cant_stop`: not a valid `hotplug/target`.
    pub cant_stop: bool,
    /// Core, builtin or free.
    pub kind: StepKind,
    /// Whether a `cpuhp_setup_state*()` call currently owns the step.
    pub registered: bool,
}

/// One step of the table: models `struct cpuhp_step` in kernel/cpu.c.
pub(crate) struct Step<E> {
    pub(crate) name: Option<Arc<str>>,
    pub(crate) default_name: Option<&'static str>,
    pub(crate) startup: Option<Callback<E>>,
    pub(crate) teardown: Option<Callback<E>>,
    pub(crate) cant_stop: bool,
    pub(crate) kind: StepKind,
    pub(crate) registered: bool,
}

impl<E> Step<E> {
    fn free() -> Self {
        Step {
            name: None,
            default_name: None,
            startup: None,
            teardown: None,
            cant_stop: false,
            kind: StepKind::Free,
            registered: false,
        }
    }

    /// `!cpuhp_step_empty(bringup, step)`.
    pub(crate) fn has(&self, bringup: bool) -> bool {
        if bringup {
            self.startup.is_some()
        } else {
            self.teardown.is_some()
        }
    }

    pub(crate) fn callback(&self, bringup: bool) -> Option<&Callback<E>> {
        if bringup {
            self.startup.as_ref()
        } else {
            self.teardown.as_ref()
        }
    }

    /// Back to the default-table entry (what `cpuhp_store_callbacks(state,
    /// NULL, ...)` leaves, keeping a builtin step's name for the listing).
    pub(crate) fn uninstall(&mut self) {
        self.name = self.default_name.map(Arc::from);
        self.startup = None;
        self.teardown = None;
        self.registered = false;
    }
}

/// Named fixed states of the default table: `(state, name)` as a 6.18 x86_64
/// kernel lists them, without the dynamically allocated ones. Core steps are
/// listed separately in [`CORE_STEPS`].
pub const BUILTIN_STEPS: &[(StateId, &str)] = &[
    (StateId(3), "perf/x86/amd/uncore:prepare"),
    (StateId(8), "virtio/net:dead"),
    (StateId(10), "slub:dead"),
    (CPUHP_MM_WRITEBACK_DEAD, "mm/writeback:dead"),
    (CPUHP_MM_VMSTAT_DEAD, "mm/vmstat:dead"),
    (CPUHP_SOFTIRQ_DEAD, "softirq:dead"),
    (CPUHP_IRQ_POLL_DEAD, "irq_poll:dead"),
    (CPUHP_BLOCK_SOFTIRQ_DEAD, "block/softirq:dead"),
    (CPUHP_BIO_DEAD, "block/bio:dead"),
    (StateId(22), "acpi/cpu-drv:dead"),
    (CPUHP_BLK_MQ_DEAD, "block/mq:dead"),
    (StateId(25), "fs/buffer:dead"),
    (StateId(26), "printk:dead"),
    (StateId(27), "mm/memctrl:dead"),
    (StateId(28), "lib/percpu_cnt:dead"),
    (StateId(29), "lib/radix:dead"),
    (CPUHP_PAGE_ALLOC, "mm/page_alloc:pcp"),
    (StateId(31), "net/dev:dead"),
    (StateId(32), "iommu/iova:dead"),
    (CPUHP_RANDOM_PREPARE, "random:prepare"),
    (CPUHP_WORKQUEUE_PREP, "workqueue:prepare"),
    (CPUHP_HRTIMERS_PREPARE, "hrtimers:prepare"),
    (CPUHP_SMPCFD_PREPARE, "smpcfd:prepare"),
    (StateId(41), "relay:prepare"),
    (CPUHP_RCUTREE_PREP, "RCU/tree:prepare"),
    (StateId(51), "base/topology:prepare"),
    (StateId(54), "trace/RB:prepare"),
    (StateId(57), "block/zram:prepare"),
    (CPUHP_TIMERS_PREPARE, "timers:prepare"),
    (CPUHP_TMIGR_PREPARE, "tmigr:prepare"),
    (CPUHP_AP_CACHECTRL_STARTING, "x86/cachectrl:starting"),
    (CPUHP_AP_SCHED_STARTING, "sched:starting"),
    (CPUHP_AP_RCUTREE_DYING, "RCU/tree:dying"),
    (StateId(103), "perf/x86/amd/uncore:starting"),
    (CPUHP_AP_SMPCFD_DYING, "smpcfd:dying"),
    (CPUHP_AP_HRTIMERS_DYING, "hrtimers:dying"),
    (CPUHP_AP_TICK_DYING, "tick:dying"),
    (CPUHP_AP_KVM_ONLINE, "kvm/cpu:online"),
    (CPUHP_AP_SCHED_WAIT_EMPTY, "sched:waitempty"),
    (CPUHP_AP_SMPBOOT_THREADS, "smpboot/threads:online"),
    (CPUHP_AP_IRQ_AFFINITY_ONLINE, "irq/affinity:online"),
    (CPUHP_AP_BLK_MQ_ONLINE, "block/mq:online"),
    (CPUHP_AP_PERF_ONLINE, "perf:online"),
    (StateId(157), "perf/x86/amd/uncore:online"),
    (CPUHP_AP_TMIGR_ONLINE, "tmigr:online"),
    (CPUHP_AP_WATCHDOG_ONLINE, "lockup_detector:online"),
    (CPUHP_AP_WORKQUEUE_ONLINE, "workqueue:online"),
    (CPUHP_AP_RANDOM_ONLINE, "random:online"),
    (CPUHP_AP_RCUTREE_ONLINE, "RCU/tree:online"),
    (CPUHP_AP_KTHREADS_ONLINE, "kthreads:online"),
    (CPUHP_AP_BASE_CACHEINFO_ONLINE, "base/cacheinfo:online"),
    (CPUHP_AP_ACTIVE, "sched:active"),
];

/// One of kernel/cpu.c's own steps in `cpuhp_hp_states[]`. The function
/// names are the kernel's and only documentary: the model's callbacks for
/// them do nothing, the machine applies their effects itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreStep {
    /// The state.
    pub state: StateId,
    /// Its name in the listing, if any.
    pub name: Option<&'static str>,
    /// The kernel's startup function, if the step has one.
    pub startup: Option<&'static str>,
    /// The kernel's teardown function, if the step has one.
    pub teardown: Option<&'static str>,
    /// `cant_stop`.
    pub cant_stop: bool,
}

/// The core steps of the default table: the statically initialised entries of `kernel/cpu.c`'s
/// `cpuhp_hp_states[]` that the table keeps.
pub const CORE_STEPS: &[CoreStep] = &[
    CoreStep {
        state: CPUHP_OFFLINE,
        name: Some("offline"),
        startup: None,
        teardown: None,
        cant_stop: false,
    },
    CoreStep {
        state: CPUHP_CREATE_THREADS,
        name: Some("threads:prepare"),
        startup: Some("smpboot_create_threads"),
        teardown: None,
        cant_stop: true,
    },
    CoreStep {
        state: CPUHP_BP_KICK_AP,
        name: Some("cpu:kick_ap"),
        startup: Some("cpuhp_kick_ap_alive"),
        teardown: None,
        cant_stop: false,
    },
    CoreStep {
        state: CPUHP_BRINGUP_CPU,
        name: Some("cpu:bringup"),
        startup: Some("bringup_cpu"),
        teardown: Some("finish_cpu"),
        cant_stop: true,
    },
    CoreStep {
        state: CPUHP_AP_IDLE_DEAD,
        name: Some("idle:dead"),
        startup: None,
        teardown: None,
        cant_stop: false,
    },
    CoreStep {
        state: CPUHP_AP_OFFLINE,
        name: Some("ap:offline"),
        startup: None,
        teardown: None,
        cant_stop: true,
    },
    CoreStep {
        state: CPUHP_AP_ONLINE,
        name: Some("ap:online"),
        startup: None,
        teardown: None,
        cant_stop: false,
    },
    CoreStep {
        state: CPUHP_TEARDOWN_CPU,
        name: Some("cpu:teardown"),
        startup: None,
        teardown: Some("takedown_cpu"),
        cant_stop: true,
    },
    CoreStep {
        state: CPUHP_AP_ONLINE_IDLE,
        name: None,
        startup: None,
        teardown: None,
        cant_stop: false,
    },
    CoreStep {
        state: CPUHP_ONLINE,
        name: Some("online"),
        startup: None,
        teardown: None,
        cant_stop: false,
    },
];

/// Builds the default table (`cpuhp_hp_states[]`), indexed by state number.
pub(crate) fn default_steps<E: 'static>() -> Vec<Step<E>> {
    let mut steps: Vec<Step<E>> = (CPUHP_OFFLINE.0..=CPUHP_ONLINE.0)
        .map(|_| Step::free())
        .collect();
    for &(state, name) in BUILTIN_STEPS {
        let step = &mut steps[state.0 as usize];
        step.default_name = Some(name);
        step.name = Some(Arc::from(name));
        step.kind = StepKind::Builtin;
    }
    for core in CORE_STEPS {
        let step = &mut steps[core.state.0 as usize];
        step.default_name = core.name;
        step.name = core.name.map(Arc::from);
        step.kind = StepKind::Core;
        step.cant_stop = core.cant_stop;
        // The kernel functions behind core steps have no simulated effect of
        // their own; the machine applies their side effects (online mask,
        // nested STARTING/DYING ranges) when they succeed.
        if core.startup.is_some() {
            step.startup = Some(noop());
        }
        if core.teardown.is_some() {
            step.teardown = Some(noop());
        }
    }
    steps
}

fn noop<E: 'static>() -> Callback<E> {
    Arc::new(|_: &E, _| Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_table_shape() {
        let steps = default_steps::<()>();
        assert_eq!(steps.len(), (CPUHP_ONLINE.0 + 1) as usize);
        let cant_stop: Vec<i32> = steps
            .iter()
            .enumerate()
            .filter(|(_, s)| s.cant_stop)
            .map(|(i, _)| i as i32)
            .collect();
        assert_eq!(
            cant_stop,
            vec![
                CPUHP_CREATE_THREADS.0,
                CPUHP_BRINGUP_CPU.0,
                CPUHP_AP_OFFLINE.0,
                CPUHP_TEARDOWN_CPU.0
            ]
        );
        for s in CPUHP_BP_PREPARE_DYN.0..=CPUHP_BP_PREPARE_DYN_END.0 {
            assert!(steps[s as usize].name.is_none());
        }
        for s in CPUHP_AP_ONLINE_DYN.0..=CPUHP_AP_ONLINE_DYN_END.0 {
            assert!(steps[s as usize].name.is_none());
        }
        assert!(BUILTIN_STEPS.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(steps[CPUHP_BRINGUP_CPU.0 as usize].has(true));
        assert!(steps[CPUHP_BRINGUP_CPU.0 as usize].has(false));
        assert!(!steps[CPUHP_TEARDOWN_CPU.0 as usize].has(true));
        assert!(steps[CPUHP_TEARDOWN_CPU.0 as usize].has(false));
        assert!(!steps[CPUHP_BIO_DEAD.0 as usize].has(false));
    }
}
