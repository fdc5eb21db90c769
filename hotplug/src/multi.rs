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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use crate::tracefs::record;
    use crate::*;

    /// (cpu, state, bringup, instance)
    type Call = (u32, i32, bool, Option<u64>);

    #[derive(Default)]
    struct Env {
        calls: Mutex<Vec<Call>>,
        /// One-shot failures: (cpu, state, bringup, instance).
        armed: Mutex<Vec<Call>>,
    }

    impl Env {
        fn take(&self) -> Vec<Call> {
            std::mem::take(&mut *self.calls.lock().unwrap())
        }
    }

    fn cb() -> Option<Callback<Env>> {
        Some(Arc::new(|e: &Env, inv: &Invocation| {
            let call = (
                inv.cpu.0,
                inv.state.0,
                inv.bringup,
                inv.instance.map(|i| i.0),
            );
            e.calls.lock().unwrap().push(call);
            let mut armed = e.armed.lock().unwrap();
            if let Some(i) = armed.iter().position(|a| *a == call) {
                armed.remove(i);
                return Err(Errno::EIO);
            }
            Ok(())
        }))
    }

    const M: StateId = CPUHP_AP_BLK_MQ_ONLINE;
    const P: StateId = CPUHP_BIO_DEAD;

    /// Two CPUs; `M` an ONLINE multi-instance state with instances 0, 1, 2 (visited 2, 1, 0),
    /// `P` a PREPARE one likewise with instances 3, 4, 5 (visited 5, 4, 3), and a single state
    /// above `M`.
    fn machine() -> Cpuhp<Env> {
        let mut hp: Cpuhp<Env> = Cpuhp::new(2, 2).unwrap();
        hp.cpuhp_setup_state_multi(M, "block/mq:online", cb(), cb())
            .unwrap();
        hp.cpuhp_setup_state_multi(P, "block/bio:dead", cb(), cb())
            .unwrap();
        for s in [M, M, M, P, P, P] {
            hp.cpuhp_state_add_instance_nocalls(s).unwrap();
        }
        hp.cpuhp_setup_state_nocalls(CPUHP_AP_WORKQUEUE_ONLINE, "workqueue:online", cb(), cb())
            .unwrap();
        hp
    }

    #[test]
    fn each_instance_is_one_call_and_one_traced_pair_newest_first() {
        let mut hp = machine();
        assert_eq!(
            hp.instances(M),
            vec![InstanceId(2), InstanceId(1), InstanceId(0)]
        );
        let env = Env::default();
        let ((), lines) = record(|| hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap());
        assert_eq!(
            env.take(),
            vec![
                (1, 187, false, None),
                (1, 151, false, Some(2)),
                (1, 151, false, Some(1)),
                (1, 151, false, Some(0)),
                (1, 21, false, Some(5)),
                (1, 21, false, Some(4)),
                (1, 21, false, Some(3)),
            ]
        );
        let multi: Vec<String> = lines
            .iter()
            .filter(|l| l.event != "cpuhp_enter")
            .map(|l| format!("{}: {}", l.event, l.fields))
            .collect();
        assert_eq!(
            &multi[1..4],
            [
                "cpuhp_multi_enter: cpu: 0001 target: 144 step: 151 (blk_mq_hctx_notify_offline)",
                "cpuhp_exit:  cpu: 0001  state: 150 step: 151 ret: 0",
                "cpuhp_multi_enter: cpu: 0001 target: 144 step: 151 (blk_mq_hctx_notify_offline)",
            ]
        );
    }

    /// In the AP thread (`lastp`): instance 1 fails, `st->last` keeps it, and the rollback first
    /// undoes instance 2 of the same state (the one done before), then the states above.
    #[test]
    fn an_ap_instance_failure_rolls_back_the_instances_done_then_the_states_above() {
        let mut hp = machine();
        let env = Env::default();
        env.armed.lock().unwrap().push((1, 151, false, Some(1)));
        let err = hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap_err();
        assert_eq!(err.errno(), Errno::EIO);
        assert_eq!(
            env.take(),
            vec![
                (1, 187, false, None),
                (1, 151, false, Some(2)),
                (1, 151, false, Some(1)),
                // cpuhp_reset_state() with st->last: the same state, up to the failed node.
                (1, 151, true, Some(2)),
                (1, 187, true, None),
            ]
        );
        assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_ONLINE);
        assert!(hp.warnings().is_empty());
        // st->last was consumed: the next offline is a plain one.
        hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap();
        assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_OFFLINE);
    }

    /// On the BP (no `lastp`): instance 4's startup fails during cpu_up, the call undoes
    /// instance 5 with the teardown, returns the error, and cpuhp_up_callbacks() rolls back
    /// below (nothing else here).
    #[test]
    #[cfg_attr(
        feature = "bug-rollback-calls-failed-state",
        should_panic(expected = "assertion")
    )]
    fn a_bp_instance_failure_is_undone_inside_the_call() {
        let mut hp = machine();
        let env = Env::default();
        hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap();
        env.take();
        env.armed.lock().unwrap().push((1, 21, true, Some(4)));
        let (r, lines) = record(|| hp.cpu_up(CpuId(1), CPUHP_ONLINE, &env));
        assert_eq!(r.unwrap_err().errno(), Errno::EIO);
        assert_eq!(
            env.take(),
            vec![
                (1, 21, true, Some(5)),
                (1, 21, true, Some(4)),
                (1, 21, false, Some(5))
            ]
        );
        let t: Vec<String> = lines
            .iter()
            .map(|l| format!("{}: {}", l.event, l.fields))
            .collect();
        assert_eq!(
            &t[2..],
            [
                "cpuhp_multi_enter: cpu: 0001 target: 236 step:  21 (block/bio:dead)",
                "cpuhp_exit:  cpu: 0001  state:  21 step:  21 ret: 0",
                "cpuhp_multi_enter: cpu: 0001 target: 236 step:  21 (block/bio:dead)",
                "cpuhp_exit:  cpu: 0001  state:  21 step:  21 ret: -5",
                // The undo of instance 5, the BP's teardown under the same step.
                "cpuhp_multi_enter: cpu: 0001 target: 236 step:  21 (bio_cpu_dead)",
                "cpuhp_exit:  cpu: 0001  state:  21 step:  21 ret: 0",
            ]
        );
        assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_OFFLINE);
    }

    #[test]
    fn adding_an_instance_calls_its_startup_and_rolls_back_on_failure() {
        let mut hp = machine();
        let env = Env::default();
        let id = hp.cpuhp_state_add_instance(M, &env).unwrap();
        assert_eq!(
            env.take(),
            vec![(0, 151, true, Some(id.0)), (1, 151, true, Some(id.0))]
        );
        assert_eq!(hp.instances(M)[0], id);
        let next = InstanceId(id.0 + 1);
        env.armed.lock().unwrap().push((1, 151, true, Some(next.0)));
        let err = hp.cpuhp_state_add_instance(M, &env).unwrap_err();
        assert_eq!(err.errno(), Errno::EIO);
        assert_eq!(
            env.take(),
            vec![
                (0, 151, true, Some(next.0)),
                (1, 151, true, Some(next.0)),
                (0, 151, false, Some(next.0)),
            ]
        );
        assert!(!hp.instances(M).contains(&next));
        hp.cpuhp_state_remove_instance(M, id, &env).unwrap();
        assert_eq!(
            env.take(),
            vec![(0, 151, false, Some(id.0)), (1, 151, false, Some(id.0))]
        );
        assert_eq!(
            hp.cpuhp_state_remove_instance(M, id, &env)
                .unwrap_err()
                .errno(),
            Errno::EINVAL
        );
        assert_eq!(
            hp.cpuhp_state_add_instance_nocalls(CPUHP_AP_WORKQUEUE_ONLINE)
                .unwrap_err()
                .errno(),
            Errno::EINVAL
        );
        hp.cpuhp_remove_multi_state(M).unwrap();
        assert_eq!(
            hp.warnings(),
            &[Warning::RemovingStateWithInstances { state: M }]
        );
        assert!(hp.instances(M).is_empty());
    }

    /// A multi-instance state without instances calls nothing and costs no step, but
    /// `hotplug/fail` accepts it and fires there, as on the live kernel (padata:online).
    #[test]
    fn an_empty_multi_state_is_passed_over_unless_the_fail_is_armed_there() {
        let mut hp: Cpuhp<Env> = Cpuhp::new(2, 2).unwrap();
        let padata = hp
            .cpuhp_setup_state_multi(CPUHP_AP_ONLINE_DYN, "padata:online", cb(), None)
            .unwrap();
        let env = Env::default();
        hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap();
        hp.start_cpu_up(CpuId(1), CPUHP_ONLINE).unwrap();
        let mut steps = Vec::new();
        while let StepOutcome::Ran { executed, .. } = hp.step(CpuId(1), &env).unwrap() {
            steps.push(executed.invocation.state.0);
        }
        assert!(!steps.contains(&padata.0), "{steps:?}");
        hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &env).unwrap();
        hp.set_fail(CpuId(1), padata.0).unwrap();
        let (r, lines) = record(|| hp.cpu_up(CpuId(1), CPUHP_ONLINE, &env));
        let err = r.unwrap_err();
        assert!(
            matches!(err, HotplugError::CallbackFailed { state, injected: true, .. } if state == padata)
        );
        assert!(lines
            .iter()
            .all(|l| !l.fields.contains("padata") || l.event == "tracing_mark_write"));
        assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_OFFLINE);
        assert!(env.take().is_empty());
    }
}
