//! Multi-instance states of kernel/cpu.c: `cpuhp_setup_state_multi()`,
//! `cpuhp_state_add_instance[_nocalls]()` (`__cpuhp_state_add_instance_cpuslocked()`),
//! `cpuhp_state_remove_instance[_nocalls]()` (`__cpuhp_state_remove_instance()`) and
//! `cpuhp_remove_multi_state()`.
//!
//! A multi-instance state has one pair of callbacks and a list of instances (`sp->list`, one
//! `struct hlist_node` per device or queue, newest first). During `cpu_up()`/`cpu_down()`
//! `cpuhp_invoke_callback()` calls the callback once per instance, each call traced as a
//! `cpuhp_multi_enter` / `cpuhp_exit` pair (the live trace shows `block/mq:dead` nine times);
//! the model makes each instance call one step. A failure on instance k: in the AP thread the
//! failed node is kept in `st->last` and the rollback first undoes instances 0..k of the same
//! state (`cpuhp_reset_state()` does not move the state then); on the BP side the call undoes
//! them itself with the opposite callback and returns the error. A state whose list is empty
//! still is a step when it has a callback (so `hotplug/fail` accepts it and fires there), but
//! calls nothing and traces nothing.

use crate::errno::Errno;
use crate::error::HotplugError;
use crate::invoke::{Callback, InstanceId, InvokeFn, Origin};
use crate::state::*;
use crate::Cpuhp;

impl<E: 'static> Cpuhp<E> {
    /// Models `cpuhp_setup_state_multi()`: installs the callbacks of a multi-instance state
    /// without invoking anything (there are no instances yet). Returns the state used (the
    /// allocated slot for `CPUHP_AP_ONLINE_DYN` / `CPUHP_BP_PREPARE_DYN`).
    pub fn cpuhp_setup_state_multi(
        &mut self,
        state: StateId,
        name: &str,
        startup: Option<Callback<E>>,
        teardown: Option<Callback<E>>,
    ) -> Result<StateId, HotplugError> {
        self.setup_state(
            "cpuhp_setup_state_multi",
            state,
            name,
            false,
            true,
            startup,
            teardown,
            &mut |_, _| Ok(()),
        )
    }

    /// Models `cpuhp_state_add_instance()`: adds an instance to a multi-instance state and calls
    /// its startup on every CPU at or above the state (ascending CPU order, AP states only on
    /// online CPUs, each traced as `cpuhp_multi_enter`), calling callbacks directly with `env`.
    /// If a startup fails on CPU N the teardown runs for this instance on the CPUs below N
    /// (`cpuhp_rollback_install()`), the instance is not added and the error is returned.
    ///
    /// `-EINVAL` if `state` is not a registered multi-instance state.
    pub fn cpuhp_state_add_instance(
        &mut self,
        state: StateId,
        env: &E,
    ) -> Result<InstanceId, HotplugError> {
        self.cpuhp_state_add_instance_via(state, &mut |inv, cb| cb(env, inv))
    }

    /// [`Cpuhp::cpuhp_state_add_instance`] with the invocations handed to `run`.
    pub fn cpuhp_state_add_instance_via(
        &mut self,
        state: StateId,
        run: &mut InvokeFn<'_, E>,
    ) -> Result<InstanceId, HotplugError> {
        self.add_instance("cpuhp_state_add_instance", state, true, run)
    }

    /// Models `cpuhp_state_add_instance_nocalls()`: adds the instance without invoking.
    pub fn cpuhp_state_add_instance_nocalls(
        &mut self,
        state: StateId,
    ) -> Result<InstanceId, HotplugError> {
        self.add_instance(
            "cpuhp_state_add_instance_nocalls",
            state,
            false,
            &mut |_, _| Ok(()),
        )
    }

    /// Models `cpuhp_state_remove_instance()`: calls the teardown for this instance on every CPU
    /// at or above the state, then removes it. A failing teardown is the kernel's
    /// `BUG_ON(ret && !bringup)`, recorded as [`crate::Warning::TeardownBug`].
    ///
    /// `-EINVAL` if `state` is not a multi-instance state or `instance` is not on its list.
    pub fn cpuhp_state_remove_instance(
        &mut self,
        state: StateId,
        instance: InstanceId,
        env: &E,
    ) -> Result<(), HotplugError> {
        self.cpuhp_state_remove_instance_via(state, instance, &mut |inv, cb| cb(env, inv))
    }

    /// [`Cpuhp::cpuhp_state_remove_instance`] with the invocations handed to `run`.
    pub fn cpuhp_state_remove_instance_via(
        &mut self,
        state: StateId,
        instance: InstanceId,
        run: &mut InvokeFn<'_, E>,
    ) -> Result<(), HotplugError> {
        self.remove_instance("cpuhp_state_remove_instance", state, instance, true, run)
    }

    /// Models `cpuhp_state_remove_instance_nocalls()`: removes the instance without invoking.
    pub fn cpuhp_state_remove_instance_nocalls(
        &mut self,
        state: StateId,
        instance: InstanceId,
    ) -> Result<(), HotplugError> {
        self.remove_instance(
            "cpuhp_state_remove_instance_nocalls",
            state,
            instance,
            false,
            &mut |_, _| Ok(()),
        )
    }

    /// Models `cpuhp_remove_multi_state()`: uninstalls a multi-instance state without invoking
    /// anything. With instances left the kernel WARNs ("Removing state %d which has instances
    /// left", [`crate::Warning::RemovingStateWithInstances`]) and removes it anyway.
    pub fn cpuhp_remove_multi_state(&mut self, state: StateId) -> Result<(), HotplugError> {
        self.multi_check("cpuhp_remove_multi_state", state)?;
        self.cpuhp_remove_state_nocalls(state)
    }

    /// The instances of a multi-instance state in the order its callbacks visit them (newest
    /// first); empty for any other state.
    pub fn instances(&self, state: StateId) -> Vec<InstanceId> {
        self.step_ref(state)
            .map(|s| s.instances.clone())
            .unwrap_or_default()
    }

    fn multi_check(&self, op: &'static str, state: StateId) -> Result<(), HotplugError> {
        if let Some(holder) = self.lock_holder {
            return Err(HotplugError::Busy {
                op,
                holder,
                errno: Errno::EBUSY,
            });
        }
        match self.step_ref(state) {
            Some(s) if s.registered && s.multi_instance => Ok(()),
            _ => Err(HotplugError::invalid_state(
                op,
                state.0,
                "not a multi-instance state (cpuhp_setup_state_multi())",
            )),
        }
    }

    fn add_instance(
        &mut self,
        op: &'static str,
        state: StateId,
        invoke: bool,
        run: &mut InvokeFn<'_, E>,
    ) -> Result<InstanceId, HotplugError> {
        self.multi_check(op, state)?;
        let id = InstanceId(self.next_instance);
        self.next_instance += 1;
        let step = &self.steps[state.0 as usize];
        let has_teardown = step.teardown.is_some();
        if invoke && step.startup.is_some() {
            for i in 0..self.cpus.len() {
                let cpu = CpuId(i as u32);
                if self.cpus[i].state < state {
                    continue;
                }
                if let Err((errno, injected)) =
                    self.cpuhp_issue_call(cpu, state, true, Some(id), Origin::Setup, run)
                {
                    if has_teardown {
                        self.cpuhp_rollback_install(cpu, state, Some(id), run);
                    }
                    return Err(HotplugError::CallbackFailed {
                        op,
                        cpu,
                        state,
                        name: self.step_name(state),
                        bringup: true,
                        errno,
                        injected,
                    });
                }
            }
        }
        // hlist_add_head(): the newest instance is visited first.
        self.steps[state.0 as usize].instances.insert(0, id);
        Ok(id)
    }

    fn remove_instance(
        &mut self,
        op: &'static str,
        state: StateId,
        instance: InstanceId,
        invoke: bool,
        run: &mut InvokeFn<'_, E>,
    ) -> Result<(), HotplugError> {
        self.multi_check(op, state)?;
        let Some(pos) = self.steps[state.0 as usize]
            .instances
            .iter()
            .position(|&i| i == instance)
        else {
            return Err(HotplugError::invalid_state(
                op,
                state.0,
                format!("{instance} is not an instance of this state"),
            ));
        };
        if invoke && self.steps[state.0 as usize].teardown.is_some() {
            for i in 0..self.cpus.len() {
                if self.cpus[i].state >= state {
                    // Teardown failures are recorded as TeardownBug inside.
                    let _ = self.cpuhp_issue_call(
                        CpuId(i as u32),
                        state,
                        false,
                        Some(instance),
                        Origin::Remove,
                        run,
                    );
                }
            }
        }
        self.steps[state.0 as usize].instances.remove(pos);
        Ok(())
    }
}
