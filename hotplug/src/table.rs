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

use crate::invoke::{Callback, InstanceId};
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
    /// The kernel function of the startup callback (`%ps` in `cpuhp_enter`), if known.
    pub startup_fn: Option<Arc<str>>,
    /// The kernel function of the teardown callback, if known.
    pub teardown_fn: Option<Arc<str>>,
    /// `sp->multi_instance`: registered with `cpuhp_setup_state_multi()`.
    pub multi_instance: bool,
    /// The instances of a multi-instance state, in the order its callbacks visit them (`sp->list`,
    /// newest first: `cpuhp_state_add_instance()` does `hlist_add_head()`).
    pub instances: Vec<InstanceId>,
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
    /// `%ps` of the callbacks: given at registration or the default table's.
    pub(crate) startup_fn: Option<Arc<str>>,
    pub(crate) teardown_fn: Option<Arc<str>>,
    /// The default table's function names ([`BUILTIN_FNS`], [`CORE_STEPS`]).
    pub(crate) default_fns: (Option<&'static str>, Option<&'static str>),
    /// `sp->multi_instance` and `sp->list` (head first).
    pub(crate) multi_instance: bool,
    pub(crate) instances: Vec<InstanceId>,
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
            startup_fn: None,
            teardown_fn: None,
            default_fns: (None, None),
            multi_instance: false,
            instances: Vec::new(),
        }
    }

    /// The `%ps` name of the callback of a direction: its kernel function, or the state's name
    /// when registered without one.
    pub(crate) fn fun(&self, bringup: bool, state: StateId) -> Arc<str> {
        let f = if bringup {
            &self.startup_fn
        } else {
            &self.teardown_fn
        };
        f.clone()
            .or_else(|| self.name.clone())
            .unwrap_or_else(|| Arc::from(format!("state{}", state.0)))
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
        self.startup_fn = None;
        self.teardown_fn = None;
        self.multi_instance = false;
        self.instances.clear();
    }
}

/// The kernel functions behind the named fixed states of [`BUILTIN_STEPS`], as the live 6.18
/// kernel's `cpuhp_enter` events print them (`shared/reference/tracefs-6.18/down-up-clean.trace`;
/// the STARTING/DYING ones, which never show in a trace, from kernel/cpu.c's `cpuhp_hp_states[]`
/// and their subsystems). A subsystem that registers one of these states gets these names for
/// its callbacks unless it names its own ([`crate::Cpuhp::set_callback_fns`]); a name is only
/// used for a direction that has a callback.
pub const BUILTIN_FNS: &[BuiltinFns] = &[
    BuiltinFns::new(3, None, Some("amd_uncore_cpu_dead")),
    BuiltinFns::new(8, None, Some("virtnet_cpu_dead")),
    BuiltinFns::new(10, None, Some("slub_cpu_dead")),
    // The live kernel's mm/writeback:dead teardown is page_writeback_cpu_online().
    BuiltinFns::new(12, None, Some("page_writeback_cpu_online")),
    BuiltinFns::new(13, None, Some("vmstat_cpu_dead")),
    BuiltinFns::new(14, None, Some("takeover_tasklets")),
    BuiltinFns::new(19, None, Some("irq_poll_cpu_dead")),
    BuiltinFns::new(20, None, Some("blk_softirq_cpu_dead")),
    BuiltinFns::new(21, None, Some("bio_cpu_dead")),
    BuiltinFns::new(22, None, Some("acpi_soft_cpu_dead")),
    BuiltinFns::new(24, None, Some("blk_mq_hctx_notify_dead")),
    BuiltinFns::new(25, None, Some("buffer_exit_cpu_dead")),
    BuiltinFns::new(26, None, Some("console_cpu_notify")),
    BuiltinFns::new(27, None, Some("memcg_hotplug_cpu_dead")),
    BuiltinFns::new(28, None, Some("percpu_counter_cpu_dead")),
    BuiltinFns::new(29, None, Some("radix_tree_cpu_dead")),
    BuiltinFns::new(
        30,
        Some("page_alloc_cpu_online"),
        Some("page_alloc_cpu_dead"),
    ),
    BuiltinFns::new(31, None, Some("dev_cpu_dead")),
    BuiltinFns::new(32, None, Some("iova_cpuhp_dead")),
    BuiltinFns::new(35, Some("random_prepare_cpu"), None),
    BuiltinFns::new(36, Some("workqueue_prepare_cpu"), None),
    BuiltinFns::new(38, Some("hrtimers_prepare_cpu"), None),
    BuiltinFns::new(40, Some("smpcfd_prepare_cpu"), Some("smpcfd_dead_cpu")),
    BuiltinFns::new(41, Some("relay_prepare_cpu"), None),
    BuiltinFns::new(43, Some("rcutree_prepare_cpu"), Some("rcutree_dead_cpu")),
    BuiltinFns::new(51, Some("topology_add_dev"), Some("topology_remove_dev")),
    BuiltinFns::new(54, Some("trace_rb_cpu_prepare"), None),
    BuiltinFns::new(57, Some("zcomp_cpu_up_prepare"), Some("zcomp_cpu_dead")),
    BuiltinFns::new(58, Some("timers_prepare_cpu"), Some("timers_dead_cpu")),
    BuiltinFns::new(59, Some("tmigr_cpu_prepare"), None),
    BuiltinFns::new(86, Some("cache_ap_online"), Some("cache_ap_offline")),
    BuiltinFns::new(87, Some("sched_cpu_starting"), Some("sched_cpu_dying")),
    BuiltinFns::new(88, None, Some("rcutree_dying_cpu")),
    BuiltinFns::new(
        103,
        Some("amd_uncore_cpu_starting"),
        Some("amd_uncore_cpu_dying"),
    ),
    BuiltinFns::new(138, None, Some("smpcfd_dying_cpu")),
    BuiltinFns::new(139, None, Some("hrtimers_cpu_dying")),
    BuiltinFns::new(140, None, Some("tick_cpu_dying")),
    BuiltinFns::new(147, Some("kvm_online_cpu"), Some("kvm_offline_cpu")),
    BuiltinFns::new(148, None, Some("sched_cpu_wait_empty")),
    BuiltinFns::new(
        149,
        Some("smpboot_unpark_threads"),
        Some("smpboot_park_threads"),
    ),
    BuiltinFns::new(150, Some("irq_affinity_online_cpu"), None),
    BuiltinFns::new(
        151,
        Some("blk_mq_hctx_notify_online"),
        Some("blk_mq_hctx_notify_offline"),
    ),
    BuiltinFns::new(
        154,
        Some("perf_event_init_cpu"),
        Some("perf_event_exit_cpu"),
    ),
    BuiltinFns::new(
        157,
        Some("amd_uncore_cpu_online"),
        Some("amd_uncore_cpu_down_prepare"),
    ),
    BuiltinFns::new(185, Some("tmigr_cpu_online"), Some("tmigr_cpu_offline")),
    BuiltinFns::new(
        186,
        Some("lockup_detector_online_cpu"),
        Some("lockup_detector_offline_cpu"),
    ),
    BuiltinFns::new(
        187,
        Some("workqueue_online_cpu"),
        Some("workqueue_offline_cpu"),
    ),
    BuiltinFns::new(188, Some("random_online_cpu"), None),
    BuiltinFns::new(189, Some("rcutree_online_cpu"), Some("rcutree_offline_cpu")),
    BuiltinFns::new(190, Some("kthreads_online_cpu"), None),
    BuiltinFns::new(
        191,
        Some("cacheinfo_cpu_online"),
        Some("cacheinfo_cpu_pre_down"),
    ),
    BuiltinFns::new(
        235,
        Some("sched_cpu_activate"),
        Some("sched_cpu_deactivate"),
    ),
];

/// The kernel function names of one fixed state's callbacks ([`BUILTIN_FNS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinFns {
    /// The state.
    pub state: StateId,
    /// Its startup function, if the kernel's state has one.
    pub startup: Option<&'static str>,
    /// Its teardown function, if the kernel's state has one.
    pub teardown: Option<&'static str>,
}

impl BuiltinFns {
    const fn new(
        state: i32,
        startup: Option<&'static str>,
        teardown: Option<&'static str>,
    ) -> Self {
        Self {
            state: StateId(state),
            startup,
            teardown,
        }
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
/// names are the kernel's, printed by `cpuhp_enter`; the model's callbacks for
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
        // CONFIG_HOTPLUG_SPLIT_STARTUP (x86_64): cpuhp_bringup_ap(), as the live trace shows;
        // bringup_cpu() on other configurations.
        startup: Some("cpuhp_bringup_ap"),
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

/// A state's startup and teardown function names.
type FnNames = (Option<Arc<str>>, Option<Arc<str>>);

/// The default table's names and `%ps` function names ([`BUILTIN_STEPS`], [`BUILTIN_FNS`],
/// [`CORE_STEPS`]) as shared strings, indexed by state number.
///
/// Every machine boots a fresh table, and `biosim explore` boots one per case: made once per
/// thread, the strings are only reference-counted into each table rather than allocated and
/// freed again (some 80 strings a boot). Per thread, so that two explore threads never share a
/// reference count.
struct DefaultArcs {
    /// `sp->name` of each state.
    name: Vec<Option<Arc<str>>>,
    /// The startup and teardown function names of each state.
    fns: Vec<FnNames>,
}

impl DefaultArcs {
    fn new() -> Self {
        let n = (CPUHP_ONLINE.0 + 1) as usize;
        let mut arcs = DefaultArcs {
            name: vec![None; n],
            fns: vec![(None, None); n],
        };
        for &(state, name) in BUILTIN_STEPS {
            arcs.name[state.0 as usize] = Some(Arc::from(name));
        }
        for f in BUILTIN_FNS {
            arcs.fns[f.state.0 as usize] = (f.startup.map(Arc::from), f.teardown.map(Arc::from));
        }
        for core in CORE_STEPS {
            let i = core.state.0 as usize;
            arcs.name[i] = core.name.map(Arc::from);
            arcs.fns[i] = (core.startup.map(Arc::from), core.teardown.map(Arc::from));
        }
        arcs
    }
}

thread_local! {
    static DEFAULT_ARCS: DefaultArcs = DefaultArcs::new();
}

/// `f`, the default table's function name of `state`'s startup (`bringup`) or teardown callback
/// (a [`Step::default_fns`] entry), as a shared string: the thread's copy, or a new one if `f` is
/// not the default table's.
pub(crate) fn default_fn_arc(state: StateId, bringup: bool, f: &'static str) -> Arc<str> {
    DEFAULT_ARCS.with(|a| {
        let shared =
            a.fns.get(state.0 as usize).and_then(
                |(up, down)| {
                    if bringup {
                        up.as_ref()
                    } else {
                        down.as_ref()
                    }
                },
            );
        match shared {
            Some(arc) if **arc == *f => Arc::clone(arc),
            _ => Arc::from(f),
        }
    })
}

/// Builds the default table (`cpuhp_hp_states[]`), indexed by state number.
pub(crate) fn default_steps<E: 'static>() -> Vec<Step<E>> {
    let mut steps: Vec<Step<E>> = (CPUHP_OFFLINE.0..=CPUHP_ONLINE.0)
        .map(|_| Step::free())
        .collect();
    DEFAULT_ARCS.with(|arcs| {
        for &(state, name) in BUILTIN_STEPS {
            let step = &mut steps[state.0 as usize];
            step.default_name = Some(name);
            step.name = arcs.name[state.0 as usize].clone();
            step.kind = StepKind::Builtin;
        }
        for core in CORE_STEPS {
            let i = core.state.0 as usize;
            let step = &mut steps[i];
            step.name = arcs.name[i].clone();
            step.startup_fn = arcs.fns[i].0.clone();
            step.teardown_fn = arcs.fns[i].1.clone();
        }
    });
    for f in BUILTIN_FNS {
        steps[f.state.0 as usize].default_fns = (f.startup, f.teardown);
    }
    for core in CORE_STEPS {
        let step = &mut steps[core.state.0 as usize];
        step.default_name = core.name;
        step.kind = StepKind::Core;
        step.cant_stop = core.cant_stop;
        step.default_fns = (core.startup, core.teardown);
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

    /// The names of every state as (name, startup fn, teardown fn).
    fn names<E>(steps: &[Step<E>]) -> Vec<[Option<String>; 3]> {
        steps
            .iter()
            .map(|s| {
                [&s.name, &s.startup_fn, &s.teardown_fn].map(|n| n.as_deref().map(str::to_owned))
            })
            .collect()
    }

    /// The shared strings change nothing a table shows: a second table on the same thread (what
    /// the next explore case boots) names every state as a table built on a fresh thread does,
    /// and shares its strings with the first; a registration's function name for a state is the
    /// table's, and a name that is not the default table's is its own.
    #[test]
    fn tables_share_their_names_and_show_the_same_as_a_fresh_threads() {
        let first = default_steps::<()>();
        let second = default_steps::<()>();
        let fresh = std::thread::spawn(|| names(&default_steps::<()>()))
            .join()
            .unwrap();
        assert_eq!(names(&second), fresh);
        assert_eq!(names(&first), fresh);
        let bringup = CPUHP_BRINGUP_CPU.0 as usize;
        assert!(Arc::ptr_eq(
            first[bringup].startup_fn.as_ref().unwrap(),
            second[bringup].startup_fn.as_ref().unwrap()
        ));
        assert_eq!(fresh[bringup][1].as_deref(), Some("cpuhp_bringup_ap"));
        let wq = CPUHP_AP_WORKQUEUE_ONLINE;
        assert_eq!(
            &*default_fn_arc(wq, true, "workqueue_online_cpu"),
            "workqueue_online_cpu"
        );
        assert_eq!(
            &*default_fn_arc(wq, false, "workqueue_offline_cpu"),
            "workqueue_offline_cpu"
        );
        assert_eq!(&*default_fn_arc(wq, true, "my_online"), "my_online");
        assert_eq!(&*default_fn_arc(StateId(500), true, "x"), "x");
    }

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
        assert!(BUILTIN_FNS.windows(2).all(|w| w[0].state < w[1].state));
        for f in BUILTIN_FNS {
            assert_eq!(steps[f.state.0 as usize].kind, StepKind::Builtin, "{:?}", f);
        }
        assert_eq!(
            &*steps[CPUHP_BRINGUP_CPU.0 as usize].fun(true, CPUHP_BRINGUP_CPU),
            "cpuhp_bringup_ap"
        );
        assert_eq!(
            &*steps[CPUHP_BIO_DEAD.0 as usize].fun(false, CPUHP_BIO_DEAD),
            "block/bio:dead",
            "a state without a function name prints its name"
        );
    }
}
