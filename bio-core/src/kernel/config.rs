//! The kernel configuration a simulated machine runs under: `kernel/Kconfig.preempt`,
//! `kernel/rcu/Kconfig`, `kernel/Kconfig.hz` and `lib/Kconfig.debug`.
//!
//! Only the options that change the answers of `include/linux/preempt.h` and of `bio_in_atomic()`
//! are modelled, plus `CONFIG_CPU_HOTPLUG_STATE_CONTROL` (what `cpuN/hotplug/target` accepts). [`KernelConfig::validate`] applies the Kconfig `select`/`depends on` rules, so an
//! impossible combination (say `PREEMPT_RT` without `PREEMPT_COUNT`) is rejected with a message
//! naming the rule instead of being simulated.

use std::fmt;
use std::str::FromStr;

/// The preemption model: the `choice` of `kernel/Kconfig.preempt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PreemptModel {
    /// `CONFIG_PREEMPT_NONE`: no forced preemption (server).
    None,
    /// `CONFIG_PREEMPT_VOLUNTARY`: explicit preemption points only (desktop).
    Voluntary,
    /// `CONFIG_PREEMPT`: fully preemptible kernel (low-latency desktop).
    Full,
    /// `CONFIG_PREEMPT_LAZY`: fully preemptible, but the scheduler defers preemption of
    /// SCHED_NORMAL tasks to the next tick.
    Lazy,
    /// `CONFIG_PREEMPT_RT`: real-time; `spinlock_t` and `local_lock_t` become sleeping locks.
    Rt,
}

impl PreemptModel {
    /// Every model, in Kconfig order.
    pub const ALL: [PreemptModel; 5] = [
        Self::None,
        Self::Voluntary,
        Self::Full,
        Self::Lazy,
        Self::Rt,
    ];

    /// `CONFIG_PREEMPTION`: selected by `PREEMPT`, `PREEMPT_LAZY` and `PREEMPT_RT`.
    pub fn preemption(self) -> bool {
        matches!(self, Self::Full | Self::Lazy | Self::Rt)
    }

    /// The Kconfig symbol of this choice.
    pub fn kconfig(self) -> &'static str {
        match self {
            Self::None => "CONFIG_PREEMPT_NONE",
            Self::Voluntary => "CONFIG_PREEMPT_VOLUNTARY",
            Self::Full => "CONFIG_PREEMPT",
            Self::Lazy => "CONFIG_PREEMPT_LAZY",
            Self::Rt => "CONFIG_PREEMPT_RT",
        }
    }

    /// The short name used on the command line and in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Voluntary => "voluntary",
            Self::Full => "full",
            Self::Lazy => "lazy",
            Self::Rt => "rt",
        }
    }
}

impl fmt::Display for PreemptModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PreemptModel {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s) || m.kconfig().eq_ignore_ascii_case(s))
            .ok_or_else(|| ConfigError::UnknownPreemptModel(s.to_owned()))
    }
}

/// A kernel configuration that was rejected, with the Kconfig rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A preemption model name that is not one of none/voluntary/full/lazy/rt.
    #[error("unknown preemption model `{0}` (expected one of: none, voluntary, full, lazy, rt)")]
    UnknownPreemptModel(String),
    /// A Kconfig dependency or select rule is violated.
    #[error("unsupported kernel config: {0}")]
    Unsupported(&'static str),
    /// `CONFIG_HZ` outside the values `kernel/Kconfig.hz` offers.
    #[error("unsupported CONFIG_HZ={0} (kernel/Kconfig.hz offers 100, 250, 300 or 1000)")]
    Hz(u32),
}

/// The configuration options that decide what `preempt.h` and `bio_in_atomic()` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelConfig {
    /// The preemption model choice.
    pub preempt: PreemptModel,
    /// `CONFIG_PREEMPT_COUNT`: whether `preempt_disable()` (and spinlocks) maintain the preempt
    /// counter. Without it `preemptible()` is constant 0 and `in_atomic()` cannot see spinlocks.
    pub preempt_count: bool,
    /// `CONFIG_PREEMPT_RCU`: `rcu_read_lock()` nests a per-task counter instead of disabling
    /// preemption, and `rcu_preempt_depth()` reads it.
    pub preempt_rcu: bool,
    /// `CONFIG_DEBUG_ATOMIC_SLEEP`: `might_sleep()` checks the context. Selects `PREEMPT_COUNT`.
    pub debug_atomic_sleep: bool,
    /// `CONFIG_PROVE_LOCKING`: lockdep, including the wait-context check. Selects
    /// `PREEMPT_COUNT` (lib/Kconfig.debug).
    pub prove_locking: bool,
    /// `CONFIG_HZ`: jiffies per second.
    pub hz: u32,
    /// `CONFIG_CPU_HOTPLUG_STATE_CONTROL` (lib/Kconfig.debug, `depends on DEBUG_KERNEL`,
    /// default n in the kernel): `cpuN/hotplug/target` (`target_store()`) takes any named,
    /// stoppable state in `[0, CPUHP_ONLINE]`; without it only 0 and `CPUHP_ONLINE`.
    /// On in biosim's configurations (a kernel built for hotplug testing), because a scenario's
    /// `target CPU STATE` to a partial state needs it; a scenario turns it off with
    /// `hotplug_state_control n`.
    pub cpu_hotplug_state_control: bool,
}

impl Default for KernelConfig {
    /// A typical distribution kernel: `PREEMPT_VOLUNTARY` with the debug options a reviewer
    /// would turn on (`DEBUG_ATOMIC_SLEEP`, hence `PREEMPT_COUNT`; lockdep), HZ=250.
    fn default() -> Self {
        Self::for_model(PreemptModel::Voluntary)
    }
}

impl KernelConfig {
    /// The natural configuration of `model`: `PREEMPT_COUNT` and `PREEMPT_RCU` as Kconfig defaults
    /// them, debugging on, HZ=250.
    pub fn for_model(model: PreemptModel) -> Self {
        Self {
            preempt: model,
            preempt_count: true,
            preempt_rcu: model.preemption(),
            debug_atomic_sleep: true,
            prove_locking: true,
            hz: 250,
            cpu_hotplug_state_control: true,
        }
    }

    /// A non-preemptible production kernel without `CONFIG_PREEMPT_COUNT` (and so without
    /// `DEBUG_ATOMIC_SLEEP` and `PROVE_LOCKING`, which both select it): the configuration of
    /// finding 2.
    pub fn without_preempt_count(model: PreemptModel) -> Self {
        Self {
            preempt_count: false,
            debug_atomic_sleep: false,
            prove_locking: false,
            ..Self::for_model(model)
        }
    }

    /// A distribution kernel built without the debug options, as this project's bench machine
    /// runs (Linux 6.18, `/proc/config.gz`): `PREEMPT_DYNAMIC` booted as `none`,
    /// `PREEMPT_COUNT=y`, no `DEBUG_ATOMIC_SLEEP`, no `PROVE_LOCKING`, HZ=250, no
    /// `CPU_HOTPLUG_STATE_CONTROL`. `biosim bench JOBFILE` boots it by default so that the
    /// model is compared with the raw I/O and the kernel's loop of that same kernel.
    ///
    /// Not modelled: `PREEMPT_DYNAMIC` itself. The machine's kernel is built with
    /// `CONFIG_PREEMPTION` (hence `PREEMPT_RCU=y`) and chooses `none` at boot; biosim has no
    /// boot-time choice, so this is `PREEMPT_NONE` with `PREEMPT_RCU=n` (what [`Self::validate`]
    /// requires of a non-preemptible model). The difference is only where `rcu_read_lock()`
    /// counts (the preempt count or the task's RCU nesting), which nothing checks without
    /// `DEBUG_ATOMIC_SLEEP`.
    pub fn distro_6_18() -> Self {
        Self {
            debug_atomic_sleep: false,
            prove_locking: false,
            cpu_hotplug_state_control: false,
            ..Self::for_model(PreemptModel::None)
        }
    }

    /// `CONFIG_PREEMPTION`.
    pub fn preemption(&self) -> bool {
        self.preempt.preemption()
    }

    /// `CONFIG_PREEMPT_RT`.
    pub fn preempt_rt(&self) -> bool {
        self.preempt == PreemptModel::Rt
    }

    /// Checks the Kconfig rules that tie these options together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.preemption() && !self.preempt_count {
            return Err(ConfigError::Unsupported(
                "CONFIG_PREEMPTION selects CONFIG_PREEMPT_COUNT (preempt full/lazy/rt need preempt_count)",
            ));
        }
        if self.debug_atomic_sleep && !self.preempt_count {
            return Err(ConfigError::Unsupported(
                "CONFIG_DEBUG_ATOMIC_SLEEP selects CONFIG_PREEMPT_COUNT",
            ));
        }
        if self.prove_locking && !self.preempt_count {
            return Err(ConfigError::Unsupported(
                "CONFIG_PROVE_LOCKING selects CONFIG_PREEMPT_COUNT (lib/Kconfig.debug)",
            ));
        }
        if self.preempt_rcu && !self.preemption() {
            return Err(ConfigError::Unsupported(
                "CONFIG_PREEMPT_RCU depends on CONFIG_PREEMPTION (none/voluntary use non-preemptible RCU)",
            ));
        }
        if !self.preempt_rcu && matches!(self.preempt, PreemptModel::Full | PreemptModel::Rt) {
            return Err(ConfigError::Unsupported(
                "CONFIG_PREEMPT and CONFIG_PREEMPT_RT force CONFIG_PREEMPT_RCU (only PREEMPT_LAZY may turn it off)",
            ));
        }
        if !matches!(self.hz, 100 | 250 | 300 | 1000) {
            return Err(ConfigError::Hz(self.hz));
        }
        Ok(())
    }

    /// Every valid configuration that differs in what `bio_in_atomic()` can answer: each model
    /// with and without `PREEMPT_COUNT` where Kconfig allows it, and LAZY with and without
    /// `PREEMPT_RCU`.
    pub fn matrix() -> Vec<KernelConfig> {
        let mut out = Vec::new();
        for model in PreemptModel::ALL {
            out.push(Self::for_model(model));
            if !model.preemption() {
                out.push(Self::without_preempt_count(model));
            }
            if model == PreemptModel::Lazy {
                out.push(Self {
                    preempt_rcu: false,
                    ..Self::for_model(model)
                });
            }
        }
        debug_assert!(out.iter().all(|c| c.validate().is_ok()));
        out
    }

    /// A one-line description in Kconfig terms, e.g. `PREEMPT_NONE PREEMPT_COUNT=n HZ=250`.
    /// `CPU_HOTPLUG_STATE_CONTROL=n` is appended only when that option is off: biosim's
    /// configurations all have it on, and the line predates it.
    pub fn describe(&self) -> String {
        let yn = |b: bool| if b { 'y' } else { 'n' };
        format!(
            "{} PREEMPT_COUNT={} PREEMPT_RCU={} DEBUG_ATOMIC_SLEEP={} PROVE_LOCKING={} HZ={}{}",
            self.preempt.kconfig().trim_start_matches("CONFIG_"),
            yn(self.preempt_count),
            yn(self.preempt_rcu),
            yn(self.debug_atomic_sleep),
            yn(self.prove_locking),
            self.hz,
            if self.cpu_hotplug_state_control {
                ""
            } else {
                " CPU_HOTPLUG_STATE_CONTROL=n"
            }
        )
    }
}

impl fmt::Display for KernelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kconfig_rules_reject_impossible_combinations() {
        let rt_without_count = KernelConfig {
            preempt_count: false,
            debug_atomic_sleep: false,
            ..KernelConfig::for_model(PreemptModel::Rt)
        };
        assert!(rt_without_count.validate().is_err());
        let voluntary_with_prcu = KernelConfig {
            preempt_rcu: true,
            ..KernelConfig::for_model(PreemptModel::Voluntary)
        };
        assert!(voluntary_with_prcu.validate().is_err());
        let debug_without_count = KernelConfig {
            preempt_count: false,
            ..KernelConfig::for_model(PreemptModel::None)
        };
        assert!(debug_without_count.validate().is_err());
        let lockdep_without_count = KernelConfig {
            preempt_count: false,
            debug_atomic_sleep: false,
            ..KernelConfig::for_model(PreemptModel::None)
        };
        assert_eq!(
            lockdep_without_count.validate(),
            Err(ConfigError::Unsupported(
                "CONFIG_PROVE_LOCKING selects CONFIG_PREEMPT_COUNT (lib/Kconfig.debug)"
            ))
        );
        assert!(KernelConfig {
            prove_locking: false,
            ..lockdep_without_count
        }
        .validate()
        .is_ok());
        let bad_hz = KernelConfig {
            hz: 123,
            ..KernelConfig::default()
        };
        assert_eq!(bad_hz.validate(), Err(ConfigError::Hz(123)));
        assert!(KernelConfig::without_preempt_count(PreemptModel::None)
            .validate()
            .is_ok());
    }

    /// `CONFIG_CPU_HOTPLUG_STATE_CONTROL` is on in every biosim configuration, and the config
    /// line shows it only when it is off.
    #[test]
    fn hotplug_state_control_is_on_and_shown_only_when_off() {
        for c in KernelConfig::matrix() {
            assert!(c.cpu_hotplug_state_control, "{c}");
            assert!(!c.describe().contains("CPU_HOTPLUG_STATE_CONTROL"), "{c}");
        }
        let off = KernelConfig {
            cpu_hotplug_state_control: false,
            ..KernelConfig::default()
        };
        assert!(off.validate().is_ok());
        assert_eq!(
            off.describe(),
            "PREEMPT_VOLUNTARY PREEMPT_COUNT=y PREEMPT_RCU=n DEBUG_ATOMIC_SLEEP=y PROVE_LOCKING=y HZ=250 CPU_HOTPLUG_STATE_CONTROL=n"
        );
    }

    /// The bench machine's configuration is a valid one, with every debug option off and
    /// `PREEMPT_COUNT` on (PREEMPT_DYNAMIC builds it in).
    #[test]
    fn distro_6_18_is_valid_and_has_no_debug_options() {
        let c = KernelConfig::distro_6_18();
        assert_eq!(c.validate(), Ok(()));
        assert!(!c.prove_locking && !c.debug_atomic_sleep && !c.cpu_hotplug_state_control);
        assert!(c.preempt_count);
        assert_eq!(
            c.describe(),
            "PREEMPT_NONE PREEMPT_COUNT=y PREEMPT_RCU=n DEBUG_ATOMIC_SLEEP=n PROVE_LOCKING=n HZ=250 CPU_HOTPLUG_STATE_CONTROL=n"
        );
    }

    #[test]
    fn model_names_parse_both_ways() {
        for m in PreemptModel::ALL {
            assert_eq!(m.name().parse::<PreemptModel>().unwrap(), m);
            assert_eq!(m.kconfig().parse::<PreemptModel>().unwrap(), m);
        }
        assert!("preempt-ish".parse::<PreemptModel>().is_err());
    }

    #[test]
    fn matrix_is_valid_and_covers_every_model() {
        let m = KernelConfig::matrix();
        assert_eq!(m.len(), 8);
        for model in PreemptModel::ALL {
            assert!(m.iter().any(|c| c.preempt == model));
        }
    }
}
