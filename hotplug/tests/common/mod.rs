//! Shared helpers for the golden tests: an environment whose callbacks record
//! every call and fail on demand.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use hotplug::*;

/// One recorded callback call: (cpu, state, startup?, rollback?).
pub type Call = (u32, i32, bool, bool);

/// A one-shot callback failure: (cpu or `None` for any, state, bringup, errno).
pub type Armed = (Option<u32>, i32, bool, Errno);

/// The environment passed to callbacks.
#[derive(Debug, Default)]
pub struct Env {
    pub calls: Mutex<Vec<Call>>,
    /// One-shot failures: (cpu or None for any, state, bringup, errno).
    pub armed: Mutex<Vec<Armed>>,
}

impl Env {
    pub fn arm(&self, cpu: Option<u32>, state: StateId, bringup: bool, errno: Errno) {
        self.armed
            .lock()
            .unwrap()
            .push((cpu, state.0, bringup, errno));
    }

    pub fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }

    fn call(&self, inv: &Invocation) -> Result<(), Errno> {
        self.calls
            .lock()
            .unwrap()
            .push((inv.cpu.0, inv.state.0, inv.bringup, inv.rollback));
        let mut armed = self.armed.lock().unwrap();
        if let Some(i) = armed.iter().position(|&(c, s, b, _)| {
            (c.is_none() || c == Some(inv.cpu.0)) && s == inv.state.0 && b == inv.bringup
        }) {
            let (.., e) = armed.remove(i);
            return Err(e);
        }
        Ok(())
    }
}

/// A recording callback.
pub fn rec() -> Option<Callback<Env>> {
    Some(Arc::new(|env: &Env, inv: &Invocation| env.call(inv)))
}

/// `(cpu, state, up, rollback)` shorthand.
pub fn up(cpu: u32, s: StateId) -> Call {
    (cpu, s.0, true, false)
}
pub fn down(cpu: u32, s: StateId) -> Call {
    (cpu, s.0, false, false)
}
pub fn up_rb(cpu: u32, s: StateId) -> Call {
    (cpu, s.0, true, true)
}
pub fn down_rb(cpu: u32, s: StateId) -> Call {
    (cpu, s.0, false, true)
}

/// The standard machine of the golden tests: 2 CPUs both online, recording
/// callbacks (startup + teardown) on a PREPARE state, a dynamic PREPARE slot,
/// a STARTING/DYING state, `workqueue:online` and three dynamic ONLINE slots.
pub struct Std {
    pub hp: Cpuhp<Env>,
    pub env: Env,
    pub bp_dyn: StateId,
    pub d1: StateId,
    pub d2: StateId,
    pub d3: StateId,
}

pub const WQ_PREP: StateId = CPUHP_WORKQUEUE_PREP;
pub const SCHED: StateId = CPUHP_AP_SCHED_STARTING;
pub const WQ_ONLINE: StateId = CPUHP_AP_WORKQUEUE_ONLINE;

pub fn std_machine(online: u32) -> Std {
    let mut hp = Cpuhp::new(2, online).unwrap();
    hp.cpuhp_setup_state_nocalls(WQ_PREP, "workqueue:prepare", rec(), rec())
        .unwrap();
    let bp_dyn = hp
        .cpuhp_setup_state_nocalls(CPUHP_BP_PREPARE_DYN, "t/bp:dead", rec(), rec())
        .unwrap();
    hp.cpuhp_setup_state_nocalls(SCHED, "sched:starting", rec(), rec())
        .unwrap();
    hp.cpuhp_setup_state_nocalls(WQ_ONLINE, "workqueue:online", rec(), rec())
        .unwrap();
    let d1 = hp
        .cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "t/d1:online", rec(), rec())
        .unwrap();
    let d2 = hp
        .cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "t/d2:online", rec(), rec())
        .unwrap();
    let d3 = hp
        .cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "t/d3:online", rec(), rec())
        .unwrap();
    Std {
        hp,
        env: Env::default(),
        bp_dyn,
        d1,
        d2,
        d3,
    }
}
