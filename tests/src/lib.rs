//! Shared helpers for biosim cross-crate tests: one way to build a machine, one way to assert.
//!
//! Every test that needs a kernel with the task-completion batcher and the invariant oracle builds
//! it with a [`MachineBuilder`]: the kernel config, the CPUs (possible and online at boot), the
//! batcher's [`Variant`] and what observes the batcher (the [`Oracle`] by default). It hands back
//! the parts for a test that drives the kernel itself ([`MachineBuilder::boot`]: the loom models,
//! which run the kernel's code on loom threads), the parts with the threaded runtime over them
//! ([`MachineBuilder::threaded`]), or the product's deterministic machine
//! ([`MachineBuilder::sim`], a [`Sim`], which always observes with its own oracle).
//!
//! ```
//! use bio_core::block::complete_in_task::Variant;
//! use biosim_tests::MachineBuilder;
//!
//! let m = MachineBuilder::new().cpus(2).variant(Variant::V7).boot();
//! assert!(m.kernel.cpu_online(bio_core::CpuId(1)));
//! biosim_tests::assert_clean("a fresh machine", &m.check_quiescent());
//! ```
//!
//! Violations are asserted through [`assert_clean`], so every test reports them the same way.

/// The v6-llist example module of docs/own-patch.md (bio-sim/examples/v6_llist/module.rs), for the
/// loom models and the proptest machines.
#[path = "../../bio-sim/examples/v6_llist/module.rs"]
pub mod v6_llist;

/// The hillf example module of docs/own-patch.md (bio-sim/examples/hillf/module.rs).
#[path = "../../bio-sim/examples/hillf/module.rs"]
pub mod hillf;

pub mod broken_module;

use bio_core::block::complete_in_task::{
    bio_complete_init, BatcherObserver, BioCompleteBatcher, Variant,
};
use bio_core::{Kernel, KernelConfig};
use bio_sim::machine::oracle::{Oracle, Violation};
use bio_sim::machine::{Sim, SimConfig, SimError};
use bio_sim::runtime::threaded::{ThreadedConfig, ThreadedRuntime};
use std::fmt;
use std::sync::Arc;

/// What observes the batcher ([`bio_complete_init()`]'s observer).
#[derive(Clone, Default)]
pub enum Observer {
    /// The machine's [`Oracle`] (the default): every invariant is checked.
    #[default]
    Oracle,
    /// Nothing: the batcher reports to no one. The oracle still checks the bios made through it
    /// and the kernel's log, not where the work and the hotplug callbacks ran.
    None,
    /// Another observer instead of the oracle (same caveat as [`Observer::None`]).
    Custom(Arc<dyn BatcherObserver>),
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Observer::Oracle => "Oracle",
            Observer::None => "None",
            Observer::Custom(_) => "Custom(..)",
        })
    }
}

/// How to build a machine. Starts from [`SimConfig::default()`]'s machine: the default kernel
/// config, 2 CPUs all online, [`Variant::DEFAULT`], observed by the oracle.
#[derive(Debug, Clone)]
pub struct MachineBuilder {
    kernel: KernelConfig,
    nr_cpus: u32,
    online: Option<u32>,
    variant: Variant,
    observer: Observer,
}

impl Default for MachineBuilder {
    fn default() -> Self {
        let d = SimConfig::default();
        Self {
            kernel: d.kernel,
            nr_cpus: d.nr_cpus,
            online: None,
            variant: d.variant,
            observer: Observer::Oracle,
        }
    }
}

/// A booted machine: the kernel, its batcher, and the oracle. Nothing runs it: the test drives the
/// kernel (or starts a runtime over it).
#[derive(Debug)]
pub struct Parts {
    /// The kernel.
    pub kernel: Arc<Kernel>,
    /// Its task-completion batcher.
    pub batcher: Arc<BioCompleteBatcher>,
    /// The oracle: make tracked bios with [`Oracle::bio`], ask it with [`Parts::check`].
    pub oracle: Arc<Oracle>,
}

impl Parts {
    /// Every violation so far (the oracle's records plus new kernel splats).
    pub fn check(&self) -> Vec<Violation> {
        self.oracle.check(&self.kernel)
    }

    /// [`Parts::check`] plus the stranded-bio check, for a machine that reached quiescence.
    pub fn check_quiescent(&self) -> Vec<Violation> {
        self.oracle.check_quiescent(&self.kernel)
    }
}

impl MachineBuilder {
    /// The default machine (see [`MachineBuilder`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// The kernel configuration.
    pub fn kernel(mut self, config: KernelConfig) -> Self {
        self.kernel = config;
        self
    }

    /// Possible CPUs (`nr_cpu_ids`); all online at boot unless [`MachineBuilder::online`] says
    /// otherwise.
    pub fn cpus(mut self, nr_cpus: u32) -> Self {
        self.nr_cpus = nr_cpus;
        self
    }

    /// CPUs online at boot (the first `online`; `maxcpus=online`).
    pub fn online(mut self, online: u32) -> Self {
        self.online = Some(online);
        self
    }

    /// The batcher version.
    pub fn variant(mut self, variant: Variant) -> Self {
        self.variant = variant;
        self
    }

    /// What observes the batcher (the oracle unless set).
    pub fn observer(mut self, observer: Observer) -> Self {
        self.observer = observer;
        self
    }

    fn online_cpus(&self) -> u32 {
        self.online.unwrap_or(self.nr_cpus)
    }

    /// The [`SimConfig`] of this machine, for [`Sim::new`] (the rescuer affinity, seed and trace
    /// are [`SimConfig::default()`]'s).
    pub fn sim_config(&self) -> SimConfig {
        SimConfig {
            kernel: self.kernel,
            nr_cpus: self.nr_cpus,
            online: self.online_cpus(),
            variant: self.variant,
            ..SimConfig::default()
        }
    }

    /// Boots the kernel and initialises the batcher with the chosen observer.
    pub fn try_boot(self) -> Result<Parts, SimError> {
        let kernel = Kernel::boot(self.kernel, self.nr_cpus, self.online_cpus())?;
        let oracle = Arc::new(Oracle::new());
        let observer: Option<Arc<dyn BatcherObserver>> = match self.observer {
            Observer::Oracle => Some(oracle.clone()),
            Observer::None => None,
            Observer::Custom(o) => Some(o),
        };
        let batcher = bio_complete_init(&kernel, self.variant, observer)?;
        Ok(Parts {
            kernel,
            batcher,
            oracle,
        })
    }

    /// [`MachineBuilder::try_boot`], panicking with the reason if the machine is refused.
    pub fn boot(self) -> Parts {
        let what = self.clone();
        self.try_boot()
            .unwrap_or_else(|e| panic!("machine {what:?} does not boot: {e}"))
    }

    /// Boots the machine and starts the threaded runtime over it.
    pub fn threaded(self, config: ThreadedConfig) -> (Parts, ThreadedRuntime) {
        let parts = self.boot();
        let rt = ThreadedRuntime::start(Arc::clone(&parts.kernel), config)
            .unwrap_or_else(|e| panic!("the threaded runtime starts: {e}"));
        (parts, rt)
    }

    /// The product's deterministic machine ([`Sim::new`] over [`MachineBuilder::sim_config`]),
    /// keeping a trace if `trace`. A `Sim` observes its batcher with its own oracle
    /// (`Sim::oracle`), so the observer must be the default.
    pub fn sim(self, trace: bool) -> Sim {
        assert!(
            matches!(self.observer, Observer::Oracle),
            "a Sim observes its batcher with its own oracle, not {:?}",
            self.observer
        );
        let config = SimConfig {
            trace,
            ..self.sim_config()
        };
        Sim::new(config).unwrap_or_else(|e| panic!("machine {config:?} does not boot: {e}"))
    }
}

/// Panics, naming `what` and every violation, unless `violations` is empty. The message contains
/// each violation's invariant and text (`[nothing stranded at quiescence] bio#3 never completed
/// ...`), which `should_panic(expected = ...)` twins match on.
pub fn assert_clean(what: &str, violations: &[Violation]) {
    assert!(
        violations.is_empty(),
        "oracle, {what}: {}",
        violations
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    );
}
