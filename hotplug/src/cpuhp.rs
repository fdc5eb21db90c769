//! The machine: the per-CPU `struct cpuhp_cpu_state`, `cpu_online_mask` /
//! `cpu_dying_mask`, and state registration (`__cpuhp_setup_state_cpuslocked()`,
//! `__cpuhp_remove_state_cpuslocked()`, `cpuhp_issue_call()`,
//! `cpuhp_rollback_install()`, `cpuhp_reserve_state()`, `cpuhp_store_callbacks()`)
//! of kernel/cpu.c.
//!
//! Transitions (`cpu_up()`/`cpu_down()` and the stepping API) live in
//! [`crate::step`], the sysfs knobs in [`crate::sysfs`].

use std::fmt;
use std::sync::Arc;

use crate::errno::Errno;
use crate::error::HotplugError;
use crate::invoke::{Callback, InstanceId, Invocation, InvokeFn, Origin, RunsOn};
use crate::state::*;
use crate::step::Operation;
use crate::table::{default_steps, Step, StepInfo, StepKind};
use crate::task::Task;
use crate::trace::{self, LogRecord, TpContext, Warning};

/// Kernel configuration knobs that change the hotplug core's behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuhpConfig {
    /// `CONFIG_CPU_HOTPLUG_STATE_CONTROL`: `hotplug/target` accepts any state in
    /// `[0, CPUHP_ONLINE]` instead of only 0 and `CPUHP_ONLINE`.
    pub state_control: bool,
    /// `cpu_hotplug_offline_disabled` (`CC_ATTR_HOTPLUG_DISABLED`):
    /// `cpu_down()` returns `-EOPNOTSUPP`.
    pub offline_disabled: bool,
    /// Reproduce the pre-6.10 bug of `__cpuhp_setup_state_cpuslocked()`
    /// (`dynstate = state == CPUHP_AP_ONLINE_DYN;`): a `CPUHP_BP_PREPARE_DYN`
    /// setup returns the allocated slot but skips the startup invocations.
    /// Off by default: the model follows the fixed code
    /// ("cpu/hotplug: Fix dynstate assignment in __cpuhp_setup_state_cpuslocked()").
    pub legacy_bp_dynstate: bool,
    /// What the ftrace flags column's preempt depth shows on top of the callback's own context:
    /// 1 on a kernel with `CONFIG_PREEMPT_COUNT` but not `CONFIG_PREEMPTION`, where the
    /// tracepoint's own `preempt_disable_notrace()` is counted (`tracing_gen_ctx_dec()` takes it
    /// off only under `CONFIG_PREEMPTION`); 0 otherwise (the live 6.18 kernel is PREEMPT_DYNAMIC).
    pub tracepoint_preempt_depth: u8,
}

/// Per-CPU hotplug state: models `struct cpuhp_cpu_state` (kernel/cpu.c) plus
/// the CPU's bits in `cpu_online_mask` and `cpu_dying_mask`.
#[derive(Debug)]
pub(crate) struct CpuhpCpuState {
    /// `st->state`.
    pub(crate) state: StateId,
    /// `st->target`.
    pub(crate) target: StateId,
    /// `st->fail` (`CPUHP_INVALID` when clear).
    pub(crate) fail: StateId,
    /// `st->bringup`.
    pub(crate) bringup: bool,
    /// `st->rollback`.
    pub(crate) rollback: bool,
    /// `cpu_online(cpu)`.
    pub(crate) online: bool,
    /// `cpu_dying(cpu)`.
    pub(crate) dying: bool,
    /// `st->last`: the instance of a multi-instance state whose callback failed in the AP
    /// thread; the rollback undoes the instances before it first.
    pub(crate) last: Option<InstanceId>,
    /// The `cpu_up()`/`cpu_down()` in progress, if any.
    pub(crate) op: Option<Operation>,
    /// The result of the last finished operation.
    pub(crate) last_result: Option<Result<(), HotplugError>>,
}

/// The CPU-hotplug state machine of kernel/cpu.c for `nr_cpus` simulated CPUs.
///
/// `E` is the environment the runtime passes to callbacks; the crate never
/// looks inside it. Hotplug operations are serialised as in the kernel
/// (`cpu_hotplug_lock`): while one CPU's operation is in progress, other
/// transitions and (de)registrations return [`HotplugError::Busy`], and a
/// `hotplug/target` write [`HotplugError::RestartSyscall`] (`device_hotplug_lock`).
pub struct Cpuhp<E> {
    pub(crate) steps: Vec<Step<E>>,
    pub(crate) cpus: Vec<CpuhpCpuState>,
    pub(crate) config: CpuhpConfig,
    /// `cpu_hotplug_disabled` depth.
    pub(crate) hotplug_disabled: u32,
    /// The CPU whose operation holds `cpu_hotplug_lock` (and, from sysfs or
    /// `remove_cpu()`/`add_cpu()`, `device_hotplug_lock`).
    pub(crate) lock_holder: Option<CpuId>,
    pub(crate) log: Vec<LogRecord>,
    pub(crate) warnings: Vec<Warning>,
    pub(crate) step_seq: u64,
    /// The next [`InstanceId`] `cpuhp_state_add_instance*()` hands out.
    pub(crate) next_instance: u64,
}

impl<E> fmt::Debug for Cpuhp<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cpuhp")
            .field("nr_cpus", &self.cpus.len())
            .field("cpus", &self.cpus)
            .field("config", &self.config)
            .field("lock_holder", &self.lock_holder)
            .field("warnings", &self.warnings.len())
            .finish_non_exhaustive()
    }
}

impl<E: 'static> Cpuhp<E> {
    /// A machine with `nr_cpus` CPUs of which the first `online_at_boot` are
    /// online (state `CPUHP_ONLINE`, like the boot CPU and the CPUs
    /// `bringup_nonboot_cpus()` brought up); the others are at `CPUHP_OFFLINE`.
    /// Uses the default table and configuration.
    ///
    /// `-EINVAL` if `nr_cpus` is 0 or `online_at_boot` is not in `1..=nr_cpus`.
    pub fn new(nr_cpus: u32, online_at_boot: u32) -> Result<Self, HotplugError> {
        Self::with_config(nr_cpus, online_at_boot, CpuhpConfig::default())
    }

    /// Like [`Cpuhp::new`] with an explicit [`CpuhpConfig`].
    pub fn with_config(
        nr_cpus: u32,
        online_at_boot: u32,
        config: CpuhpConfig,
    ) -> Result<Self, HotplugError> {
        if nr_cpus == 0 {
            return Err(HotplugError::invalid(
                "Cpuhp::new",
                "nr_cpus must be at least 1",
            ));
        }
        if online_at_boot == 0 || online_at_boot > nr_cpus {
            return Err(HotplugError::invalid(
                "Cpuhp::new",
                format!("online_at_boot must be in 1..={nr_cpus} (the boot CPU is always online), got {online_at_boot}"),
            ));
        }
        let cpus = (0..nr_cpus)
            .map(|i| {
                let up = i < online_at_boot;
                let s = if up { CPUHP_ONLINE } else { CPUHP_OFFLINE };
                CpuhpCpuState {
                    state: s,
                    target: s,
                    fail: CPUHP_INVALID,
                    bringup: up,
                    rollback: false,
                    online: up,
                    dying: false,
                    last: None,
                    op: None,
                    last_result: None,
                }
            })
            .collect();
        Ok(Cpuhp {
            steps: default_steps(),
            cpus,
            config,
            hotplug_disabled: 0,
            lock_holder: None,
            log: Vec::new(),
            warnings: Vec::new(),
            step_seq: 0,
            next_instance: 0,
        })
    }

    /// The configuration this machine was built with.
    pub fn config(&self) -> CpuhpConfig {
        self.config
    }

    /// Number of CPUs (`nr_cpu_ids`; all are possible and present).
    pub fn nr_cpus(&self) -> u32 {
        self.cpus.len() as u32
    }

    /// `cpu_online(cpu)`; `false` for a CPU that does not exist.
    ///
    /// A CPU joins `cpu_online_mask` on the way up when the STARTING section
    /// has run (the AP's `set_cpu_online(cpu, true)` after
    /// `notify_cpu_starting()`, just before `cpuhp_online_idle()` moves it to
    /// `CPUHP_AP_ONLINE_IDLE`), and leaves it on the way down when the
    /// `CPUHP_TEARDOWN_CPU` teardown (`takedown_cpu()` → `__cpu_disable()`)
    /// succeeds, before any DYING callback runs.
    pub fn cpu_online(&self, cpu: CpuId) -> bool {
        self.cpus.get(cpu.index()).is_some_and(|c| c.online)
    }

    /// `cpu_dying(cpu)`: set by `cpuhp_set_state()` when a takedown starts, before
    /// its first (ONLINE-section) teardown, and cleared when a bringup starts
    /// (`cpuhp_set_state()`, or `cpuhp_reset_state()` for a rollback).
    pub fn cpu_dying(&self, cpu: CpuId) -> bool {
        self.cpus.get(cpu.index()).is_some_and(|c| c.dying)
    }

    /// The online CPUs in ascending order (`for_each_online_cpu`).
    pub fn online_cpus(&self) -> Vec<CpuId> {
        (0..self.nr_cpus())
            .map(CpuId)
            .filter(|&c| self.cpu_online(c))
            .collect()
    }

    /// `num_online_cpus()`.
    pub fn num_online_cpus(&self) -> u32 {
        self.cpus.iter().filter(|c| c.online).count() as u32
    }

    /// `cpumask_any_but(cpu_online_mask, cpu)`: the lowest online CPU other than
    /// `cpu`, used as the control CPU of BP-side callbacks.
    pub fn cpumask_any_but_online(&self, cpu: CpuId) -> Option<CpuId> {
        self.online_cpus().into_iter().find(|&c| c != cpu)
    }

    /// The in-memory log of operations, callbacks, mask changes and warnings.
    pub fn log(&self) -> &[LogRecord] {
        &self.log
    }

    /// Takes the log, leaving it empty.
    pub fn take_log(&mut self) -> Vec<LogRecord> {
        std::mem::take(&mut self.log)
    }

    /// The callback invocations of the log, in order (`Call` records only).
    pub fn invocations(&self) -> Vec<(Invocation, Result<(), Errno>, bool)> {
        self.log
            .iter()
            .filter_map(|r| match r {
                LogRecord::Call {
                    invocation,
                    result,
                    injected,
                    ..
                } => Some((invocation.clone(), *result, *injected)),
                _ => None,
            })
            .collect()
    }

    /// Every WARN/BUG recorded so far.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// The table entry of `state`, or `None` outside `CPUHP_OFFLINE..=CPUHP_ONLINE`.
    pub fn step_info(&self, state: StateId) -> Option<StepInfo> {
        let step = self.step_ref(state)?;
        Some(StepInfo {
            state,
            name: step.name.clone(),
            has_startup: step.startup.is_some(),
            has_teardown: step.teardown.is_some(),
            cant_stop: step.cant_stop,
            kind: step.kind,
            registered: step.registered,
            startup_fn: step.startup.as_ref().map(|_| step.fun(true, state)),
            teardown_fn: step.teardown.as_ref().map(|_| step.fun(false, state)),
            multi_instance: step.multi_instance,
            instances: step.instances.clone(),
        })
    }

    /// Names the kernel functions of a registered state's callbacks, as `%ps` prints them in
    /// `cpuhp_enter` (`bio_complete_batch_cpu_online`). `None` keeps a direction's current name:
    /// the default table's for a fixed state ([`crate::table::BUILTIN_FNS`]), else none, and a
    /// callback without a function name prints the state's name.
    ///
    /// `-EINVAL` for a state outside the table, one no `cpuhp_setup_state*()` owns, or a name
    /// for a direction without a callback.
    pub fn set_callback_fns(
        &mut self,
        state: StateId,
        startup: Option<&str>,
        teardown: Option<&str>,
    ) -> Result<(), HotplugError> {
        let op = "set_callback_fns";
        let Some(step) = (if state.in_table() {
            self.steps.get_mut(state.0 as usize)
        } else {
            None
        }) else {
            return Err(HotplugError::invalid_state(op, state.0, "out of range"));
        };
        if !step.registered {
            return Err(HotplugError::invalid_state(
                op,
                state.0,
                "no cpuhp_setup_state*() registration to name",
            ));
        }
        if (startup.is_some() && step.startup.is_none())
            || (teardown.is_some() && step.teardown.is_none())
        {
            return Err(HotplugError::invalid_state(
                op,
                state.0,
                "a function name for a direction without a callback",
            ));
        }
        if let Some(f) = startup {
            step.startup_fn = Some(Arc::from(f));
        }
        if let Some(f) = teardown {
            step.teardown_fn = Some(Arc::from(f));
        }
        Ok(())
    }

    /// `cpu_hotplug_disable()`: further `cpu_up()`/`cpu_down()` return `-EBUSY`
    /// until the matching [`Cpuhp::cpu_hotplug_enable`]. Counted.
    pub fn cpu_hotplug_disable(&mut self) {
        self.hotplug_disabled += 1;
    }

    /// `cpu_hotplug_enable()`; an unbalanced call records
    /// [`Warning::UnbalancedHotplugEnable`].
    pub fn cpu_hotplug_enable(&mut self) {
        if self.hotplug_disabled == 0 {
            self.warn(Warning::UnbalancedHotplugEnable);
        } else {
            self.hotplug_disabled -= 1;
        }
    }

    // ---- registration -------------------------------------------------

    /// Models `cpuhp_setup_state()` (include/linux/cpuhotplug.h →
    /// `__cpuhp_setup_state(state, name, true, ...)`): installs the callbacks
    /// and invokes `startup` on every CPU whose state is at or above the new
    /// state, in ascending CPU order, calling callbacks directly with `env`.
    ///
    /// `state` is a fixed state or `CPUHP_AP_ONLINE_DYN` / `CPUHP_BP_PREPARE_DYN`
    /// to allocate the lowest free slot of that range. Returns the state used:
    /// the allocated slot for a dynamic request (as the kernel does) and the
    /// fixed state itself otherwise (the kernel returns 0 there).
    ///
    /// AP states are invoked only on online CPUs (`cpuhp_invoke_ap_callback()`),
    /// on the CPU itself; PREPARE states on a control CPU. If startup fails on
    /// CPU N, teardown runs on the CPUs below N that were set up
    /// (`cpuhp_rollback_install()`), the state is uninstalled and the error is
    /// returned. `hotplug/fail` applies to each single invocation.
    pub fn cpuhp_setup_state(
        &mut self,
        state: StateId,
        name: &str,
        startup: Option<Callback<E>>,
        teardown: Option<Callback<E>>,
        env: &E,
    ) -> Result<StateId, HotplugError> {
        self.cpuhp_setup_state_via(state, name, startup, teardown, &mut |inv, cb| cb(env, inv))
    }

    /// [`Cpuhp::cpuhp_setup_state`] with the invocations handed to `run`
    /// instead of being called directly, so a runtime can execute each one in
    /// the context its [`Invocation::runs_on`] names. `run` must call the
    /// callback (or decide the result) and return what it returned.
    pub fn cpuhp_setup_state_via(
        &mut self,
        state: StateId,
        name: &str,
        startup: Option<Callback<E>>,
        teardown: Option<Callback<E>>,
        run: &mut InvokeFn<'_, E>,
    ) -> Result<StateId, HotplugError> {
        self.setup_state(
            "cpuhp_setup_state",
            state,
            name,
            true,
            false,
            startup,
            teardown,
            run,
        )
    }

    /// Models `cpuhp_setup_state_nocalls()`: installs the callbacks without
    /// invoking anything, so CPUs that are already up never see `startup`.
    /// Returns the state used (the allocated slot for a dynamic request).
    pub fn cpuhp_setup_state_nocalls(
        &mut self,
        state: StateId,
        name: &str,
        startup: Option<Callback<E>>,
        teardown: Option<Callback<E>>,
    ) -> Result<StateId, HotplugError> {
        self.setup_state(
            "cpuhp_setup_state_nocalls",
            state,
            name,
            false,
            false,
            startup,
            teardown,
            &mut |_, _| Ok(()),
        )
    }

    /// Models `cpuhp_remove_state()`: invokes `teardown` on every CPU whose
    /// state is at or above `state` (ascending CPU order; AP states only on
    /// online CPUs), then uninstalls. A failing teardown is the kernel's
    /// `BUG_ON(ret && !bringup)`: recorded as [`Warning::TeardownBug`], and the
    /// removal carries on.
    pub fn cpuhp_remove_state(&mut self, state: StateId, env: &E) -> Result<(), HotplugError> {
        self.cpuhp_remove_state_via(state, &mut |inv, cb| cb(env, inv))
    }

    /// [`Cpuhp::cpuhp_remove_state`] with the invocations handed to `run`.
    pub fn cpuhp_remove_state_via(
        &mut self,
        state: StateId,
        run: &mut InvokeFn<'_, E>,
    ) -> Result<(), HotplugError> {
        self.remove_state("cpuhp_remove_state", state, true, run)
    }

    /// Models `cpuhp_remove_state_nocalls()`: uninstalls without invoking.
    pub fn cpuhp_remove_state_nocalls(&mut self, state: StateId) -> Result<(), HotplugError> {
        self.remove_state("cpuhp_remove_state_nocalls", state, false, &mut |_, _| {
            Ok(())
        })
    }

    /// What setup and removal check first: no hotplug operation holds `cpus_write_lock()`
    /// (`-EBUSY`), and `cpuhp_cb_check()` (the kernel's `BUG_ON` on removal becomes an error).
    fn registration_check(&self, op: &'static str, state: StateId) -> Result<(), HotplugError> {
        if let Some(holder) = self.lock_holder {
            return Err(HotplugError::Busy {
                op,
                holder,
                errno: Errno::EBUSY,
            });
        }
        if state.0 <= CPUHP_OFFLINE.0 || state.0 >= CPUHP_ONLINE.0 {
            return Err(HotplugError::invalid_state(
                op,
                state.0,
                "not a valid callback state (must be in CPUHP_OFFLINE+1..CPUHP_ONLINE)",
            ));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn setup_state(
        &mut self,
        op: &'static str,
        state: StateId,
        name: &str,
        invoke: bool,
        multi: bool,
        startup: Option<Callback<E>>,
        teardown: Option<Callback<E>>,
        run: &mut InvokeFn<'_, E>,
    ) -> Result<StateId, HotplugError> {
        self.registration_check(op, state)?;
        if name.is_empty() {
            return Err(HotplugError::invalid_state(
                op,
                state.0,
                "a state needs a name",
            ));
        }
        let has_teardown = teardown.is_some();
        let has_startup = startup.is_some();
        let slot = self.cpuhp_store_callbacks(op, state, name, startup, teardown)?;
        self.steps[slot.0 as usize].multi_instance = multi;

        // Pre-6.10 kernels only treated CPUHP_AP_ONLINE_DYN as dynamic here, so
        // a positive slot from CPUHP_BP_PREPARE_DYN looked like an error code
        // and skipped the invocations.
        if self.config.legacy_bp_dynstate && state == CPUHP_BP_PREPARE_DYN {
            return Ok(slot);
        }
        if !invoke || !has_startup {
            return Ok(slot);
        }
        for i in 0..self.cpus.len() {
            let cpu = CpuId(i as u32);
            if self.cpus[i].state < slot {
                continue;
            }
            if let Err((errno, injected)) =
                self.cpuhp_issue_call(cpu, slot, true, None, Origin::Setup, run)
            {
                if has_teardown {
                    self.cpuhp_rollback_install(cpu, slot, None, run);
                }
                let name = self.step_name(slot);
                self.steps[slot.0 as usize].uninstall();
                return Err(HotplugError::CallbackFailed {
                    op,
                    cpu,
                    state: slot,
                    name,
                    bringup: true,
                    errno,
                    injected,
                });
            }
        }
        Ok(slot)
    }

    fn remove_state(
        &mut self,
        op: &'static str,
        state: StateId,
        invoke: bool,
        run: &mut InvokeFn<'_, E>,
    ) -> Result<(), HotplugError> {
        self.registration_check(op, state)?;
        if !self.steps[state.0 as usize].registered {
            return Err(HotplugError::invalid_state(
                op,
                state.0,
                "no cpuhp_setup_state*() registration to remove",
            ));
        }
        if self.steps[state.0 as usize].multi_instance {
            // A multi-instance state invokes nothing on removal; its instances should be gone.
            if !self.steps[state.0 as usize].instances.is_empty() {
                self.warn(Warning::RemovingStateWithInstances { state });
            }
        } else if invoke && self.steps[state.0 as usize].teardown.is_some() {
            for i in 0..self.cpus.len() {
                if self.cpus[i].state >= state {
                    // Teardown failures are recorded as TeardownBug inside.
                    let _ = self.cpuhp_issue_call(
                        CpuId(i as u32),
                        state,
                        false,
                        None,
                        Origin::Remove,
                        run,
                    );
                }
            }
        }
        self.steps[state.0 as usize].uninstall();
        Ok(())
    }

    /// Models `cpuhp_store_callbacks()` + `cpuhp_reserve_state()`: returns the
    /// slot the callbacks were stored in.
    fn cpuhp_store_callbacks(
        &mut self,
        op: &'static str,
        state: StateId,
        name: &str,
        startup: Option<Callback<E>>,
        teardown: Option<Callback<E>>,
    ) -> Result<StateId, HotplugError> {
        let slot = if state == CPUHP_AP_ONLINE_DYN || state == CPUHP_BP_PREPARE_DYN {
            self.cpuhp_reserve_state(op, state)?
        } else {
            let step = &self.steps[state.0 as usize];
            if step.kind == StepKind::Core {
                return Err(HotplugError::InvalidState {
                    op,
                    state: state.0,
                    reason: "the step belongs to kernel/cpu.c itself".into(),
                    errno: Errno::EBUSY,
                });
            }
            if step.registered {
                return Err(HotplugError::InvalidState {
                    op,
                    state: state.0,
                    reason: format!(
                        "already set up as \"{}\"",
                        step.name.as_deref().unwrap_or("")
                    ),
                    errno: Errno::EBUSY,
                });
            }
            state
        };
        let step = &mut self.steps[slot.0 as usize];
        step.name = Some(Arc::from(name));
        step.startup_fn = startup
            .as_ref()
            .and(step.default_fns.0)
            .map(|f| crate::table::default_fn_arc(slot, true, f));
        step.teardown_fn = teardown
            .as_ref()
            .and(step.default_fns.1)
            .map(|f| crate::table::default_fn_arc(slot, false, f));
        step.startup = startup;
        step.teardown = teardown;
        step.registered = true;
        Ok(slot)
    }

    /// Models `cpuhp_reserve_state()`: the lowest slot without a name in the
    /// requested dynamic range, or `-ENOSPC` (with the kernel's WARN).
    fn cpuhp_reserve_state(
        &mut self,
        op: &'static str,
        state: StateId,
    ) -> Result<StateId, HotplugError> {
        let (end, range) = if state == CPUHP_AP_ONLINE_DYN {
            (CPUHP_AP_ONLINE_DYN_END, "CPUHP_AP_ONLINE_DYN")
        } else {
            (CPUHP_BP_PREPARE_DYN_END, "CPUHP_BP_PREPARE_DYN")
        };
        match (state.0..=end.0).find(|&s| self.steps[s as usize].name.is_none()) {
            Some(s) => Ok(StateId(s)),
            None => {
                self.warn(Warning::NoDynamicStates { range });
                Err(HotplugError::NoSpace {
                    op,
                    range,
                    errno: Errno::ENOSPC,
                })
            }
        }
    }

    /// Models `cpuhp_rollback_install()`: teardown on the CPUs below
    /// `failed_cpu` that had the startup invoked (for one instance of a multi-instance state).
    pub(crate) fn cpuhp_rollback_install(
        &mut self,
        failed_cpu: CpuId,
        state: StateId,
        instance: Option<InstanceId>,
        run: &mut InvokeFn<'_, E>,
    ) {
        for i in 0..failed_cpu.index() {
            if self.cpus[i].state >= state {
                let _ = self.cpuhp_issue_call(
                    CpuId(i as u32),
                    state,
                    false,
                    instance,
                    Origin::SetupRollback,
                    run,
                );
            }
        }
    }

    /// Models `cpuhp_issue_call()` (with `cpuhp_invoke_ap_callback()` and the
    /// fail check of `cpuhp_invoke_callback()`): one single invocation for
    /// setup/remove (for `instance` of a multi-instance state: the "single invocation for
    /// instance add/remove" branch, traced as `cpuhp_multi_enter`). Returns the error and
    /// whether it was injected.
    pub(crate) fn cpuhp_issue_call(
        &mut self,
        cpu: CpuId,
        state: StateId,
        bringup: bool,
        instance: Option<InstanceId>,
        origin: Origin,
        run: &mut InvokeFn<'_, E>,
    ) -> Result<(), (Errno, bool)> {
        let Some(cb) = self.steps[state.0 as usize].callback(bringup).cloned() else {
            return Ok(());
        };
        let (runs_on, task) = if state.cpuhp_is_ap_state() {
            // cpuhp_invoke_ap_callback() returns 0 for an offline CPU.
            if !self.cpu_online(cpu) {
                return Ok(());
            }
            // ... and otherwise has the CPU's hotplug thread run it (cpuhp_thread_fun()).
            let runs_on = RunsOn::Target {
                irqs_off: state.cpuhp_is_atomic_state(),
            };
            (runs_on, Task::CpuhpThread(cpu))
        } else {
            // PREPARE callbacks run directly in the caller's context.
            let runs_on = RunsOn::Control {
                cpu: self.cpumask_any_but_online(cpu).unwrap_or(cpu),
            };
            (runs_on, Task::Writer)
        };
        let inv = Invocation {
            cpu,
            state,
            name: self.step_name(state),
            bringup,
            rollback: origin == Origin::SetupRollback,
            runs_on,
            target: self.cpus[cpu.index()].target,
            origin,
            core: false,
            fun: self.steps[state.0 as usize].fun(bringup, state),
            instance,
            task,
        };
        let ctx = TpContext::of(&inv, self.config.tracepoint_preempt_depth);
        let online = self.cpu_online(ctx.exec_cpu);
        let st = &mut self.cpus[cpu.index()];
        let injected = st.fail == state;
        let result = if injected {
            st.fail = CPUHP_INVALID;
            trace::tp_fail_injected(online, ctx, &inv);
            Err(Errno::EAGAIN)
        } else {
            trace::tp_enter(
                online,
                ctx,
                instance.is_some(),
                cpu,
                inv.target,
                state,
                &inv.fun,
            );
            run(&inv, &cb)
        };
        // Not a hotplug operation: nothing nests in the call, its exit is not deferred.
        let _ = self.cpuhp_invoke_callback_exit(cpu, &inv, result, injected);
        let Err(errno) = result else {
            return Ok(());
        };
        if !bringup {
            self.warn(Warning::TeardownBug {
                cpu,
                state,
                name: inv.name.clone(),
                errno,
                origin,
            });
            return Ok(());
        }
        if state.cpuhp_is_atomic_state() {
            self.warn(Warning::AtomicCallbackFailed {
                cpu,
                state,
                name: inv.name.clone(),
                bringup,
                errno,
            });
        }
        Err((errno, injected))
    }

    // ---- helpers shared with step.rs / sysfs.rs ----------------------

    pub(crate) fn step_ref(&self, state: StateId) -> Option<&Step<E>> {
        if state.in_table() {
            self.steps.get(state.0 as usize)
        } else {
            None
        }
    }

    pub(crate) fn step_fun(&self, state: StateId, bringup: bool) -> Arc<str> {
        match self.step_ref(state) {
            Some(s) => s.fun(bringup, state),
            None => Arc::from(format!("state{}", state.0)),
        }
    }

    pub(crate) fn step_name(&self, state: StateId) -> Arc<str> {
        self.step_ref(state)
            .and_then(|s| s.name.clone())
            .unwrap_or_else(|| Arc::from(format!("state{}", state.0)))
    }

    pub(crate) fn has_cb(&self, state: StateId, bringup: bool) -> bool {
        self.step_ref(state).is_some_and(|s| s.has(bringup))
    }

    pub(crate) fn warn(&mut self, w: Warning) {
        trace::trace_warning(&w);
        self.log.push(LogRecord::Warning(w.clone()));
        self.warnings.push(w);
    }

    pub(crate) fn check_cpu(
        &self,
        op: &'static str,
        cpu: CpuId,
        errno: Errno,
    ) -> Result<(), HotplugError> {
        if cpu.index() < self.cpus.len() {
            Ok(())
        } else {
            Err(HotplugError::NoSuchCpu {
                op,
                cpu,
                nr_cpus: self.nr_cpus(),
                errno,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Rec {
        calls: Mutex<Vec<(u32, i32, bool)>>,
        fail_on: Mutex<Option<(u32, bool)>>,
    }

    fn cb() -> Option<Callback<Rec>> {
        Some(Arc::new(|r: &Rec, inv: &Invocation| {
            r.calls
                .lock()
                .unwrap()
                .push((inv.cpu.0, inv.state.0, inv.bringup));
            if *r.fail_on.lock().unwrap() == Some((inv.cpu.0, inv.bringup)) {
                return Err(Errno::EIO);
            }
            Ok(())
        }))
    }

    #[test]
    fn dyn_allocation_takes_the_lowest_free_slot_and_reuses_it() {
        let mut hp: Cpuhp<Rec> = Cpuhp::new(2, 2).unwrap();
        let a = hp
            .cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "a", cb(), cb())
            .unwrap();
        let b = hp
            .cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "b", cb(), None)
            .unwrap();
        let c = hp
            .cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "c", None, None)
            .unwrap();
        assert_eq!((a.0, b.0, c.0), (192, 193, 194));
        hp.cpuhp_remove_state_nocalls(b).unwrap();
        let d = hp
            .cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "d", None, cb())
            .unwrap();
        assert_eq!(d, b, "the freed slot is the lowest free one");
        let p = hp
            .cpuhp_setup_state_nocalls(CPUHP_BP_PREPARE_DYN, "p", None, cb())
            .unwrap();
        assert_eq!(p, CPUHP_BP_PREPARE_DYN);
        assert_eq!(hp.step_info(d).unwrap().name.as_deref(), Some("d"));
    }

    #[test]
    fn dyn_ranges_run_out_with_enospc() {
        let mut hp: Cpuhp<Rec> = Cpuhp::new(1, 1).unwrap();
        for i in 0..=40 {
            let s = hp
                .cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "x", None, None)
                .unwrap();
            assert_eq!(s.0, CPUHP_AP_ONLINE_DYN.0 + i);
        }
        let err = hp
            .cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "x", None, None)
            .unwrap_err();
        assert_eq!(err.errno(), Errno::ENOSPC);
        for i in 0..=20 {
            let s = hp
                .cpuhp_setup_state_nocalls(CPUHP_BP_PREPARE_DYN, "y", None, None)
                .unwrap();
            assert_eq!(s.0, CPUHP_BP_PREPARE_DYN.0 + i);
        }
        let err = hp
            .cpuhp_setup_state(CPUHP_BP_PREPARE_DYN, "y", cb(), None, &Rec::default())
            .unwrap_err();
        assert_eq!(err.errno(), Errno::ENOSPC);
        assert_eq!(
            hp.warnings(),
            &[
                Warning::NoDynamicStates {
                    range: "CPUHP_AP_ONLINE_DYN"
                },
                Warning::NoDynamicStates {
                    range: "CPUHP_BP_PREPARE_DYN"
                }
            ]
        );
    }

    #[test]
    fn invoking_setup_calls_startup_on_cpus_at_or_above_the_state_nocalls_does_not() {
        // CPU0,1 online; CPU2 offline.
        let mut hp: Cpuhp<Rec> = Cpuhp::new(3, 2).unwrap();
        let r = Rec::default();
        hp.cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "quiet", cb(), cb())
            .unwrap();
        assert!(r.calls.lock().unwrap().is_empty());
        let s = hp
            .cpuhp_setup_state(CPUHP_AP_ONLINE_DYN, "loud", cb(), cb(), &r)
            .unwrap();
        assert_eq!(
            *r.calls.lock().unwrap(),
            vec![(0, s.0, true), (1, s.0, true)]
        );
        // A PREPARE state: also only CPUs whose state is >= it (CPU2 is at 0).
        r.calls.lock().unwrap().clear();
        hp.cpuhp_setup_state(CPUHP_BIO_DEAD, "block/bio:dead", cb(), cb(), &r)
            .unwrap();
        assert_eq!(
            *r.calls.lock().unwrap(),
            vec![(0, CPUHP_BIO_DEAD.0, true), (1, CPUHP_BIO_DEAD.0, true)]
        );
        let inv = hp.invocations();
        assert_eq!(
            inv.last().unwrap().0.runs_on,
            RunsOn::Control { cpu: CpuId(0) }
        );
        assert_eq!(inv[0].0.runs_on, RunsOn::Target { irqs_off: false });
        // Setup without a startup invokes nothing.
        r.calls.lock().unwrap().clear();
        hp.cpuhp_setup_state(CPUHP_AP_ONLINE_DYN, "teardown-only", None, cb(), &r)
            .unwrap();
        assert!(r.calls.lock().unwrap().is_empty());
        // Invoking remove runs teardowns on CPUs at or above; nocalls does not.
        hp.cpuhp_remove_state(s, &r).unwrap();
        assert_eq!(
            *r.calls.lock().unwrap(),
            vec![(0, s.0, false), (1, s.0, false)]
        );
        r.calls.lock().unwrap().clear();
        hp.cpuhp_remove_state_nocalls(CPUHP_BIO_DEAD).unwrap();
        assert!(r.calls.lock().unwrap().is_empty());
        // Removing restores the builtin name.
        assert_eq!(
            hp.step_info(CPUHP_BIO_DEAD).unwrap().name.as_deref(),
            Some("block/bio:dead")
        );
        assert!(!hp.step_info(CPUHP_BIO_DEAD).unwrap().registered);
    }

    #[test]
    fn invoking_setup_rolls_back_across_cpus_on_failure() {
        let mut hp: Cpuhp<Rec> = Cpuhp::new(4, 4).unwrap();
        let r = Rec::default();
        *r.fail_on.lock().unwrap() = Some((2, true));
        let err = hp
            .cpuhp_setup_state(CPUHP_WORKQUEUE_PREP, "workqueue:prepare", cb(), cb(), &r)
            .unwrap_err();
        assert!(matches!(
            err,
            HotplugError::CallbackFailed {
                cpu: CpuId(2),
                errno: Errno::EIO,
                ..
            }
        ));
        let s = CPUHP_WORKQUEUE_PREP.0;
        assert_eq!(
            *r.calls.lock().unwrap(),
            vec![
                (0, s, true),
                (1, s, true),
                (2, s, true),
                (0, s, false),
                (1, s, false)
            ]
        );
        let rb: Vec<bool> = hp.invocations().iter().map(|(i, ..)| i.rollback).collect();
        assert_eq!(rb, vec![false, false, false, true, true]);
        assert!(!hp.step_info(CPUHP_WORKQUEUE_PREP).unwrap().registered);
        // Without a teardown there is nothing to roll back.
        r.calls.lock().unwrap().clear();
        hp.cpuhp_setup_state(CPUHP_WORKQUEUE_PREP, "workqueue:prepare", cb(), None, &r)
            .unwrap_err();
        assert_eq!(
            *r.calls.lock().unwrap(),
            vec![(0, s, true), (1, s, true), (2, s, true)]
        );
    }

    #[test]
    fn registration_errors() {
        let mut hp: Cpuhp<Rec> = Cpuhp::new(1, 1).unwrap();
        let e = |r: Result<StateId, HotplugError>| r.unwrap_err().errno();
        assert_eq!(
            e(hp.cpuhp_setup_state_nocalls(CPUHP_OFFLINE, "x", cb(), None)),
            Errno::EINVAL
        );
        assert_eq!(
            e(hp.cpuhp_setup_state_nocalls(CPUHP_ONLINE, "x", cb(), None)),
            Errno::EINVAL
        );
        assert_eq!(
            e(hp.cpuhp_setup_state_nocalls(StateId(-5), "x", cb(), None)),
            Errno::EINVAL
        );
        assert_eq!(
            e(hp.cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "", cb(), None)),
            Errno::EINVAL
        );
        assert_eq!(
            e(hp.cpuhp_setup_state_nocalls(CPUHP_BRINGUP_CPU, "x", cb(), None)),
            Errno::EBUSY
        );
        assert_eq!(
            e(hp.cpuhp_setup_state_nocalls(CPUHP_TEARDOWN_CPU, "x", cb(), None)),
            Errno::EBUSY
        );
        hp.cpuhp_setup_state_nocalls(CPUHP_TIMERS_PREPARE, "timers:prepare", cb(), cb())
            .unwrap();
        assert_eq!(
            e(hp.cpuhp_setup_state_nocalls(CPUHP_TIMERS_PREPARE, "again", cb(), None)),
            Errno::EBUSY
        );
        assert_eq!(
            hp.cpuhp_remove_state_nocalls(CPUHP_BIO_DEAD)
                .unwrap_err()
                .errno(),
            Errno::EINVAL
        );
        assert_eq!(
            hp.cpuhp_remove_state_nocalls(CPUHP_ONLINE)
                .unwrap_err()
                .errno(),
            Errno::EINVAL
        );
    }

    #[test]
    fn legacy_bp_dynstate_skips_the_startup_invocations() {
        let r = Rec::default();
        let mut fixed: Cpuhp<Rec> = Cpuhp::new(2, 2).unwrap();
        let s = fixed
            .cpuhp_setup_state(CPUHP_BP_PREPARE_DYN, "fork:vm_stack_cache", cb(), None, &r)
            .unwrap();
        assert_eq!(s, CPUHP_BP_PREPARE_DYN);
        assert_eq!(r.calls.lock().unwrap().len(), 2);
        r.calls.lock().unwrap().clear();
        let cfg = CpuhpConfig {
            legacy_bp_dynstate: true,
            ..CpuhpConfig::default()
        };
        let mut old: Cpuhp<Rec> = Cpuhp::with_config(2, 2, cfg).unwrap();
        let s = old
            .cpuhp_setup_state(CPUHP_BP_PREPARE_DYN, "fork:vm_stack_cache", cb(), None, &r)
            .unwrap();
        assert_eq!(s, CPUHP_BP_PREPARE_DYN);
        assert!(
            r.calls.lock().unwrap().is_empty(),
            "pre-6.10: startup never invoked"
        );
        // CPUHP_AP_ONLINE_DYN was always handled.
        old.cpuhp_setup_state(CPUHP_AP_ONLINE_DYN, "x", cb(), None, &r)
            .unwrap();
        assert_eq!(r.calls.lock().unwrap().len(), 2);
    }

    #[test]
    fn boot_state() {
        let hp: Cpuhp<()> = Cpuhp::new(4, 2).unwrap();
        assert_eq!(hp.online_cpus(), vec![CpuId(0), CpuId(1)]);
        assert_eq!(hp.num_online_cpus(), 2);
        assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_ONLINE);
        assert_eq!(hp.state(CpuId(2)).unwrap(), CPUHP_OFFLINE);
        assert_eq!(hp.fail(CpuId(2)).unwrap(), -1);
        assert_eq!(hp.cpumask_any_but_online(CpuId(0)), Some(CpuId(1)));
        assert!(!hp.cpu_online(CpuId(9)));
    }
}
