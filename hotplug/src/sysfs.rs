//! The sysfs interface of kernel/cpu.c: `/sys/devices/system/cpu/cpuN/hotplug/`
//! `state` (`state_show()`), `target` (`target_show()`/`target_store()`),
//! `fail` (`fail_show()`/`fail_store()`), and
//! `/sys/devices/system/cpu/hotplug/states` (`states_show()`).
//!
//! `biosim states` prints [`Cpuhp::states_listing`].

use std::fmt::Write as _;

use crate::errno::Errno;
use crate::error::HotplugError;
use crate::state::*;
use crate::trace::Warning;
use crate::Cpuhp;

impl<E: 'static> Cpuhp<E> {
    /// `cpuN/hotplug/state` (`state_show()`): `st->state`. `-ENODEV` for a CPU
    /// that does not exist.
    pub fn state(&self, cpu: CpuId) -> Result<StateId, HotplugError> {
        self.check_cpu("state_show", cpu, Errno::ENODEV)?;
        Ok(self.cpus[cpu.index()].state)
    }

    /// `cpuN/hotplug/target` (`target_show()`): `st->target`.
    pub fn target(&self, cpu: CpuId) -> Result<StateId, HotplugError> {
        self.check_cpu("target_show", cpu, Errno::ENODEV)?;
        Ok(self.cpus[cpu.index()].target)
    }

    /// `cpuN/hotplug/fail` (`fail_show()`): `st->fail`, -1 when clear.
    pub fn fail(&self, cpu: CpuId) -> Result<i32, HotplugError> {
        self.check_cpu("fail_show", cpu, Errno::ENODEV)?;
        Ok(self.cpus[cpu.index()].fail.0)
    }

    /// Writes `cpuN/hotplug/fail` (`fail_store()`). `-1` clears it. Otherwise
    /// the value must be in `[CPUHP_OFFLINE, CPUHP_ONLINE]` and is `-EINVAL`:
    /// - for a STARTING/DYING state ("Cannot fail STARTING/DYING callbacks");
    /// - for a state `<= CPUHP_BRINGUP_CPU` while the CPU is past
    ///   `CPUHP_BRINGUP_CPU` ("DEAD callbacks cannot fail ... neither can
    ///   CPUHP_BRINGUP_CPU during hotunplug"), checked at write time only;
    /// - for a step with neither a startup nor a teardown callback.
    ///
    /// Once set, the next invocation of that step's callback on this CPU in
    /// any direction that has a callback — a `cpu_up()`/`cpu_down()` step or a
    /// single setup/remove invocation — returns `-EAGAIN` without running the
    /// callback, and the knob clears itself (one-shot).
    pub fn set_fail(&mut self, cpu: CpuId, value: i32) -> Result<(), HotplugError> {
        let op = "fail_store";
        self.check_cpu(op, cpu, Errno::ENODEV)?;
        if value == CPUHP_INVALID.0 {
            self.cpus[cpu.index()].fail = CPUHP_INVALID;
            return Ok(());
        }
        let fail = StateId(value);
        if !fail.in_table() {
            return Err(HotplugError::invalid_state(
                op,
                value,
                "out of range [0, CPUHP_ONLINE]",
            ));
        }
        if fail.cpuhp_is_atomic_state() {
            return Err(HotplugError::invalid_state(
                op,
                value,
                "cannot fail STARTING/DYING callbacks",
            ));
        }
        if fail <= CPUHP_BRINGUP_CPU && self.cpus[cpu.index()].state > CPUHP_BRINGUP_CPU {
            return Err(HotplugError::invalid_state(
                op,
                value,
                "DEAD callbacks (and CPUHP_BRINGUP_CPU) cannot fail while the CPU is up",
            ));
        }
        if !self.has_cb(fail, true) && !self.has_cb(fail, false) {
            return Err(HotplugError::invalid_state(
                op,
                value,
                "the step has no callbacks",
            ));
        }
        self.cpus[cpu.index()].fail = fail;
        Ok(())
    }

    /// Writes `cpuN/hotplug/target` (`target_store()`): validates the value
    /// ([`Cpuhp::target_store_check`]) and runs `cpu_up()`/`cpu_down()` to it
    /// with `env`: [`Cpuhp::start_target`], then [`Cpuhp::run_to_completion`].
    pub fn set_target(&mut self, cpu: CpuId, value: i32, env: &E) -> Result<(), HotplugError> {
        self.start_target(cpu, value)?;
        self.run_to_completion(cpu, env)
    }

    /// Writes `cpuN/hotplug/target` (`target_store()`) as a stepped operation:
    /// validates the value ([`Cpuhp::target_store_check`]) and *starts*
    /// `cpu_up(cpu, target)` (the CPU is below it) or `cpu_down(cpu, target)`
    /// (above it) without running a callback; drive it with [`Cpuhp::step`].
    /// A target equal to the current state starts nothing (the kernel's
    /// `WARN_ON(st->target != target)` branch: `st->target` is set to it).
    /// Then the transition's own errors apply ([`Cpuhp::start_cpu_up`],
    /// [`Cpuhp::start_cpu_down`]).
    pub fn start_target(&mut self, cpu: CpuId, value: i32) -> Result<(), HotplugError> {
        let target = self.target_store_check(cpu, value)?;
        let st = &self.cpus[cpu.index()];
        if st.state < target {
            self.start_cpu_up(cpu, target)
        } else if st.state > target {
            self.start_cpu_down(cpu, target)
        } else {
            if st.target != target {
                let was = st.target;
                self.warn(Warning::TargetMismatch { cpu, was, target });
                self.cpus[cpu.index()].target = target;
            }
            Ok(())
        }
    }

    /// The validation of `target_store()`, in the kernel's order, shared by
    /// [`Cpuhp::set_target`] and [`Cpuhp::start_target`]; returns the target.
    ///
    /// `-ENODEV` for a CPU that does not exist. `-EINVAL` unless the value is 0
    /// or `CPUHP_ONLINE` (any value in `[0, CPUHP_ONLINE]` with
    /// [`crate::CpuhpConfig::state_control`], `CONFIG_CPU_HOTPLUG_STATE_CONTROL`).
    /// While an operation is in progress, [`HotplugError::RestartSyscall`]: the
    /// kernel's `lock_device_hotplug_sysfs()` restarts the syscall until
    /// `device_hotplug_lock` is free, so the write would wait (no errno). Then
    /// `-EINVAL` unless the target step is named and not `cant_stop`.
    ///
    /// A deliberate departure: a named target in `CPUHP_AP_IDLE_DEAD..=CPUHP_AP_ONLINE`
    /// (the STARTING/DYING section; `CPUHP_AP_OFFLINE` is `cant_stop` anyway) is
    /// `-EINVAL` here, though the kernel takes it. There the CPU does not stop at the
    /// target: going up, `notify_cpu_starting()` runs the STARTING callbacks to
    /// `min(target, CPUHP_AP_ONLINE)` and `cpuhp_online_idle()` then sets the state to
    /// `CPUHP_AP_ONLINE_IDLE`, past the target, with the STARTING callbacks above the
    /// target never run; going down, `take_cpu_down()` runs the DYING callbacks to
    /// `max(target, CPUHP_AP_OFFLINE)` and the CPU reports `CPUHP_AP_IDLE_DEAD`, below
    /// the target (but for `CPUHP_AP_IDLE_DEAD` itself), with the DYING callbacks
    /// below the target never run.
    pub fn target_store_check(&self, cpu: CpuId, value: i32) -> Result<StateId, HotplugError> {
        let op = "target_store";
        self.check_cpu(op, cpu, Errno::ENODEV)?;
        let target = StateId(value);
        if self.config.state_control {
            if !target.in_table() {
                return Err(HotplugError::invalid_state(
                    op,
                    value,
                    "out of range [0, CPUHP_ONLINE]",
                ));
            }
        } else if target != CPUHP_OFFLINE && target != CPUHP_ONLINE {
            return Err(HotplugError::invalid_state(
                op,
                value,
                "only 0 and CPUHP_ONLINE are accepted without CONFIG_CPU_HOTPLUG_STATE_CONTROL",
            ));
        }
        // lock_device_hotplug_sysfs(): mutex_trylock(&device_hotplug_lock), else
        // restart_syscall(); the writer waits, it never sees an errno.
        if let Some(holder) = self.lock_holder {
            return Err(HotplugError::RestartSyscall {
                op,
                holder,
                errno: Errno::ERESTARTNOINTR,
            });
        }
        let Some(step) = self.step_ref(target) else {
            return Err(HotplugError::invalid_state(
                op,
                value,
                "out of range [0, CPUHP_ONLINE]",
            ));
        };
        if step.name.is_none() {
            return Err(HotplugError::invalid_state(
                op,
                value,
                "the step has no name",
            ));
        }
        if step.cant_stop {
            return Err(HotplugError::invalid_state(
                op,
                value,
                "the step is cant_stop",
            ));
        }
        // A deliberate departure: target_store() checks only the name and cant_stop, so
        // the kernel takes a named STARTING/DYING state (see the doc comment).
        if CPUHP_AP_IDLE_DEAD <= target && target <= CPUHP_AP_ONLINE {
            return Err(HotplugError::invalid_state(
                op,
                value,
                "biosim does not stop a CPU inside the STARTING/DYING section \
                 (the kernel accepts it: going up, notify_cpu_starting() runs to it and \
                 cpuhp_online_idle() puts the CPU at CPUHP_AP_ONLINE_IDLE; going down, \
                 take_cpu_down() runs to max(target, CPUHP_AP_OFFLINE) and the CPU \
                 reports CPUHP_AP_IDLE_DEAD; the atomic callbacks in between are skipped)",
            ));
        }
        Ok(target)
    }

    /// `/sys/devices/system/cpu/hotplug/states` (`states_show()`): one
    /// `"%3d: %s\n"` line per named step, in state order. `biosim states`
    /// prints this.
    pub fn states_listing(&self) -> String {
        let mut out = String::new();
        for (i, step) in self.steps.iter().enumerate() {
            if let Some(name) = &step.name {
                let _ = writeln!(out, "{i:3}: {name}");
            }
        }
        out
    }
}
