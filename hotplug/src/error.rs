//! The error type of the public API: a kernel errno ([`Errno`]) plus the
//! context a reader needs (which operation, which CPU, which state, why).
//!
//! The kernel returns bare negative errnos from `cpu_up()`, `cpu_down()`,
//! `cpuhp_setup_state()` and the sysfs `store` methods of kernel/cpu.c; every
//! variant here carries that errno ([`HotplugError::errno`]) so callers can
//! still compare with the kernel's value.

use std::sync::Arc;

use crate::errno::Errno;
use crate::state::{CpuId, StateId};

/// An error returned by the hotplug model. Each variant says which kernel
/// operation failed (`op`, a kernel function name such as `"cpu_down"` or
/// `"fail_store"`), and [`HotplugError::errno`] gives the kernel's return value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HotplugError {
    /// The CPU number does not exist (`!cpu_possible()` / no such sysfs device).
    #[error("{op}: {cpu} does not exist (nr_cpus = {nr_cpus}): {errno}")]
    NoSuchCpu {
        /// The kernel operation.
        op: &'static str,
        /// The CPU asked for.
        cpu: CpuId,
        /// How many CPUs the machine has.
        nr_cpus: u32,
        /// `EINVAL` for transitions, `ENODEV` for sysfs knobs.
        errno: Errno,
    },
    /// A state number was rejected (out of range, a STARTING/DYING state, a
    /// step without callbacks, a `cant_stop` target, ...).
    #[error("{op}: state {state} rejected: {reason}: {errno}")]
    InvalidState {
        /// The kernel operation.
        op: &'static str,
        /// The rejected state number as given.
        state: i32,
        /// Why, in the kernel's terms.
        reason: String,
        /// Usually `EINVAL`; `EBUSY` for a state that is already in use.
        errno: Errno,
    },
    /// A hotplug callback (or an injected `hotplug/fail`) returned an error;
    /// the operation has been rolled back as the kernel does.
    #[error(
        "{op} {cpu}: {} of step {state} ({name}) failed{}: {errno}",
        if *bringup { "startup" } else { "teardown" },
        if *injected { " (injected via hotplug/fail)" } else { "" }
    )]
    CallbackFailed {
        /// The kernel operation (`cpu_up`, `cpu_down`, `cpuhp_setup_state`).
        op: &'static str,
        /// The CPU whose callback failed.
        cpu: CpuId,
        /// The failing step.
        state: StateId,
        /// The failing step's name.
        name: Arc<str>,
        /// Startup (`true`) or teardown (`false`).
        bringup: bool,
        /// What the callback returned.
        errno: Errno,
        /// Whether the failure was injected through `hotplug/fail`.
        injected: bool,
    },
    /// The kernel refuses the request as such: the last online CPU, hotplug
    /// disabled, hotplug not supported.
    #[error("{op} {cpu}: {reason}: {errno}")]
    Refused {
        /// The kernel operation.
        op: &'static str,
        /// The CPU asked for.
        cpu: CpuId,
        /// Why, in the kernel's terms.
        reason: &'static str,
        /// `EBUSY` or `EOPNOTSUPP`.
        errno: Errno,
    },
    /// Another hotplug operation holds `cpu_hotplug_lock`. The kernel would
    /// sleep on the lock; the model reports it so the caller can finish the
    /// other operation (by stepping it) and retry.
    #[error("{op}: the hotplug operation on {holder} is still in progress (cpu_hotplug_lock held): {errno}")]
    Busy {
        /// The kernel operation that could not take the lock.
        op: &'static str,
        /// The CPU whose operation holds the lock.
        holder: CpuId,
        /// Always `EBUSY`.
        errno: Errno,
    },
    /// A `cpuN/hotplug/target` write found `device_hotplug_lock` held by another
    /// hotplug operation. The kernel's `target_store()` takes it with
    /// `lock_device_hotplug_sysfs()` (drivers/base/core.c): `mutex_trylock()`, else
    /// `msleep(5)` and `return restart_syscall()` (`-ERESTARTNOINTR`), so the syscall is
    /// restarted until the lock is free and then runs: the writer waits and never sees
    /// an errno. The model cannot block the writer, so it reports the wait instead;
    /// [`HotplugError::errno`] is the kernel-internal `ERESTARTNOINTR`.
    #[error("{op}: the write would wait: device_hotplug_lock is held by the hotplug operation on {holder} (lock_device_hotplug_sysfs() restarts the syscall until it is free; no errno reaches the writer)")]
    RestartSyscall {
        /// The sysfs store method (`target_store`).
        op: &'static str,
        /// The CPU whose operation holds `device_hotplug_lock`.
        holder: CpuId,
        /// Always `ERESTARTNOINTR`.
        errno: Errno,
    },
    /// A dynamic range has no free slot (`cpuhp_reserve_state()`).
    #[error("{op}: no more dynamic states available in {range}: {errno}")]
    NoSpace {
        /// The kernel operation.
        op: &'static str,
        /// `"CPUHP_AP_ONLINE_DYN"` or `"CPUHP_BP_PREPARE_DYN"`.
        range: &'static str,
        /// Always `ENOSPC`.
        errno: Errno,
    },
    /// A misuse of the model's own API (stepping a CPU with no operation in
    /// progress, a stale step token, an empty name).
    #[error("{op}: {reason}: {errno}")]
    Invalid {
        /// The operation.
        op: &'static str,
        /// What was wrong.
        reason: String,
        /// Usually `EINVAL`.
        errno: Errno,
    },
}

impl HotplugError {
    /// The kernel errno of this error; `as_neg_i32()` gives the return value.
    pub fn errno(&self) -> Errno {
        match self {
            HotplugError::NoSuchCpu { errno, .. }
            | HotplugError::InvalidState { errno, .. }
            | HotplugError::CallbackFailed { errno, .. }
            | HotplugError::Refused { errno, .. }
            | HotplugError::Busy { errno, .. }
            | HotplugError::RestartSyscall { errno, .. }
            | HotplugError::NoSpace { errno, .. }
            | HotplugError::Invalid { errno, .. } => *errno,
        }
    }

    pub(crate) fn invalid_state(op: &'static str, state: i32, reason: impl Into<String>) -> Self {
        HotplugError::InvalidState {
            op,
            state,
            reason: reason.into(),
            errno: Errno::EINVAL,
        }
    }

    pub(crate) fn invalid(op: &'static str, reason: impl Into<String>) -> Self {
        HotplugError::Invalid {
            op,
            reason: reason.into(),
            errno: Errno::EINVAL,
        }
    }
}
