//! proptest-state-machine test of the hotplug crate against an independent
//! reference model.
//!
//! The reference is written as a direct transcription of the call structure
//! of kernel/cpu.c (`_cpu_up`, `cpuhp_up_callbacks`, `bringup_cpu`,
//! `cpuhp_kick_ap`, `_cpu_down`, `cpuhp_down_callbacks`, `takedown_cpu`,
//! `cpuhp_invoke_callback_range[_nofail]`, `__cpuhp_setup_state_cpuslocked`,
//! ...) as plain recursive functions over plain data, with its own state
//! numbers. It shares no code with the crate, which runs the same semantics as
//! a resumable frame machine. Random sequences of setup/remove (invoking and
//! `_nocalls`, fixed and dynamic), `cpu_up`/`cpu_down` to random targets (run
//! to completion, stepped, or two-phase with a `hotplug/fail` write in the
//! middle), fail injection and one-shot callback errors are applied to both;
//! after each transition the exact callback sequence (cpu, state, direction,
//! rollback flag), the return value, every CPU's state/target/fail/online bit,
//! the registered states and the number of WARNs must agree.
//!
//! Buggy twin: with `--features bug-rollback-calls-failed-state` the crate's
//! rollback also calls the failed step's opposite callback, and this test
//! must fail (it is `should_panic` under that feature).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use hotplug::{Callback, CpuId, Cpuhp, Errno, HotplugError, Invocation, StateId, StepOutcome};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, FileFailurePersistence};
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};

// ---- the reference's own numbers (checked against the crate once) --------

const OFFLINE: i32 = 0;
const CREATE_THREADS: i32 = 1;
const BP_DYN: i32 = 61;
const BP_DYN_END: i32 = 81;
const KICK_AP: i32 = 82;
const BRINGUP: i32 = 83;
const IDLE_DEAD: i32 = 84;
const AP_OFFLINE: i32 = 85;
const AP_ONLINE: i32 = 143;
const TEARDOWN: i32 = 144;
const ONLINE_IDLE: i32 = 145;
const AP_DYN: i32 = 192;
const AP_DYN_END: i32 = 232;
const ONLINE: i32 = 236;
const EAGAIN: i32 = 11;
const EIO: i32 = 5;
const EBUSY: i32 = 16;
const EINVAL: i32 = 22;

/// Fixed states the test registers on: two DEAD/PREPARE, two STARTING/DYING,
/// three ONLINE-section.
const FIXED: &[i32] = &[21, 36, 58, 87, 88, 187, 189, 235];

fn is_ap(s: i32) -> bool {
    s > BRINGUP && s != TEARDOWN
}
fn is_atomic(s: i32) -> bool {
    (IDLE_DEAD..AP_ONLINE).contains(&s)
}

/// One observed callback: (cpu, state, startup?, rollback?).
type Call = (u32, i32, bool, bool);

// ---- reference model -----------------------------------------------------

#[derive(Clone, Debug)]
struct RefCpu {
    state: i32,
    target: i32,
    fail: i32,
    online: bool,
    bringup: bool,
    rollback: bool,
}

#[derive(Clone, Debug)]
struct Model {
    cpus: Vec<RefCpu>,
    /// Registered states → (has startup, has teardown).
    user: BTreeMap<i32, (bool, bool)>,
    /// One-shot callback errors (state, bringup), any CPU.
    armed: Vec<(i32, bool)>,
    // Expectations of the last transition.
    calls: Vec<Call>,
    result: Option<i32>,
    warnings: usize,
    /// Mid-operation `hotplug/fail` write: (after n invokes, cpu, value).
    mid_fail: Option<(usize, usize, i32)>,
    invokes: usize,
}

impl Model {
    fn has(&self, s: i32, up: bool) -> bool {
        let core = if up {
            [CREATE_THREADS, KICK_AP, BRINGUP].contains(&s)
        } else {
            [BRINGUP, TEARDOWN].contains(&s)
        };
        core || self
            .user
            .get(&s)
            .is_some_and(|&(u, d)| if up { u } else { d })
    }

    fn user_call(&mut self, cpu: usize, s: i32, up: bool, rollback: bool) -> Result<(), i32> {
        self.calls.push((cpu as u32, s, up, rollback));
        if let Some(i) = self.armed.iter().position(|&a| a == (s, up)) {
            self.armed.remove(i);
            return Err(EIO);
        }
        Ok(())
    }

    fn fail_store(&mut self, cpu: usize, v: i32) -> Option<i32> {
        if v == -1 {
            self.cpus[cpu].fail = -1;
            return None;
        }
        if !(OFFLINE..=ONLINE).contains(&v)
            || is_atomic(v)
            || (v <= BRINGUP && self.cpus[cpu].state > BRINGUP)
            || (!self.has(v, true) && !self.has(v, false))
        {
            return Some(EINVAL);
        }
        self.cpus[cpu].fail = v;
        None
    }

    /// `cpuhp_invoke_callback()` plus the effects of the core callbacks.
    fn invoke(&mut self, cpu: usize, s: i32, up: bool) -> Result<(), i32> {
        if let Some((n, fcpu, v)) = self.mid_fail {
            if n == self.invokes {
                let _ = self.fail_store(fcpu, v);
                self.mid_fail = None;
            }
        }
        self.invokes += 1;
        if self.cpus[cpu].fail == s {
            self.cpus[cpu].fail = -1;
            return Err(EAGAIN);
        }
        if self.user.contains_key(&s) {
            let rb = self.cpus[cpu].rollback;
            return self.user_call(cpu, s, up, rb);
        }
        match (s, up) {
            (BRINGUP, true) => self.bringup_cpu(cpu),
            (TEARDOWN, false) => {
                // takedown_cpu(): __cpu_disable(), DYING under stop_machine, dead.
                self.cpus[cpu].online = false;
                let t = self.cpus[cpu].target.max(AP_OFFLINE);
                self.range_nofail(cpu, false, t);
                self.cpus[cpu].state = IDLE_DEAD;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn bringup_cpu(&mut self, cpu: usize) -> Result<(), i32> {
        let t = self.cpus[cpu].target.min(AP_ONLINE);
        self.range_nofail(cpu, true, t);
        self.cpus[cpu].online = true;
        self.cpus[cpu].state = ONLINE_IDLE;
        let target = self.cpus[cpu].target;
        if target <= ONLINE_IDLE {
            return Ok(());
        }
        self.kick_ap(cpu, target)
    }

    /// `cpuhp_next_state()`.
    fn next(&mut self, cpu: usize, up: bool, target: i32) -> Option<i32> {
        loop {
            let st = &mut self.cpus[cpu];
            let s = if up {
                if st.state >= target {
                    return None;
                }
                st.state += 1;
                st.state
            } else {
                if st.state <= target {
                    return None;
                }
                st.state -= 1;
                st.state + 1
            };
            if self.has(s, up) {
                return Some(s);
            }
        }
    }

    fn range(&mut self, cpu: usize, up: bool, target: i32) -> Result<(), i32> {
        while let Some(s) = self.next(cpu, up, target) {
            self.invoke(cpu, s, up)?;
        }
        Ok(())
    }

    fn range_nofail(&mut self, cpu: usize, up: bool, target: i32) {
        while let Some(s) = self.next(cpu, up, target) {
            if self.invoke(cpu, s, up).is_err() {
                self.warnings += 1;
            }
        }
    }

    fn set_state(&mut self, cpu: usize, target: i32) -> i32 {
        let st = &mut self.cpus[cpu];
        let prev = st.state;
        st.bringup = st.state < target;
        st.rollback = false;
        st.target = target;
        prev
    }

    fn reset_state(&mut self, cpu: usize, prev: i32) {
        let st = &mut self.cpus[cpu];
        st.target = prev;
        if st.rollback {
            return;
        }
        st.rollback = true;
        if st.bringup {
            st.state -= 1;
        } else {
            st.state += 1;
        }
        st.bringup = !st.bringup;
    }

    fn kick_ap(&mut self, cpu: usize, target: i32) -> Result<(), i32> {
        let prev = self.set_state(cpu, target);
        let (up, t) = (self.cpus[cpu].bringup, self.cpus[cpu].target);
        if let Err(e) = self.range(cpu, up, t) {
            self.reset_state(cpu, prev);
            let (up, t) = (self.cpus[cpu].bringup, self.cpus[cpu].target);
            if self.range(cpu, up, t).is_err() {
                self.warnings += 1;
            }
            return Err(e);
        }
        Ok(())
    }

    fn cpu_up(&mut self, cpu: usize, target: i32) -> Result<(), i32> {
        if !(OFFLINE..=ONLINE).contains(&target) || (IDLE_DEAD..=AP_ONLINE).contains(&target) {
            return Err(EINVAL);
        }
        if self.cpus[cpu].state >= target {
            return Ok(());
        }
        self.set_state(cpu, target);
        if self.cpus[cpu].state > BRINGUP {
            return self.kick_ap(cpu, target);
        }
        let prev = self.cpus[cpu].state;
        if let Err(e) = self.range(cpu, true, target.min(BRINGUP)) {
            self.reset_state(cpu, prev);
            if self.range(cpu, false, prev).is_err() {
                self.warnings += 1;
            }
            return Err(e);
        }
        Ok(())
    }

    fn cpu_down(&mut self, cpu: usize, target: i32) -> Result<(), i32> {
        if !(OFFLINE..=ONLINE).contains(&target) || (IDLE_DEAD..=AP_ONLINE).contains(&target) {
            return Err(EINVAL);
        }
        let online: Vec<usize> = (0..self.cpus.len())
            .filter(|&c| self.cpus[c].online)
            .collect();
        if !online.iter().any(|&c| c != cpu) || online.len() == 1 {
            return Err(EBUSY);
        }
        if self.cpus[cpu].state <= target {
            return Ok(());
        }
        let prev = self.set_state(cpu, target);
        if self.cpus[cpu].state > TEARDOWN {
            let t = target.max(TEARDOWN);
            self.cpus[cpu].target = t;
            self.kick_ap(cpu, t)?;
            if self.cpus[cpu].state > TEARDOWN {
                return Ok(());
            }
            self.cpus[cpu].target = target;
        }
        // cpuhp_down_callbacks()
        let bp_prev = self.cpus[cpu].state;
        let ret = self.range(cpu, false, target);
        if ret.is_err() {
            self.reset_state(cpu, bp_prev);
            if self.cpus[cpu].state < bp_prev && self.range(cpu, true, bp_prev).is_err() {
                self.warnings += 1;
            }
            if self.cpus[cpu].state < prev {
                if self.cpus[cpu].state == TEARDOWN {
                    self.reset_state(cpu, prev);
                    let (up, t) = (self.cpus[cpu].bringup, self.cpus[cpu].target);
                    if self.range(cpu, up, t).is_err() {
                        self.warnings += 1;
                    }
                } else {
                    self.warnings += 1; // DEAD callback error
                }
            }
        }
        ret
    }

    /// `cpuhp_issue_call()` for setup/remove.
    fn issue(&mut self, cpu: usize, s: i32, up: bool, rollback: bool) -> Result<(), i32> {
        let Some(&(u, d)) = self.user.get(&s) else {
            return Ok(());
        };
        if !(if up { u } else { d }) {
            return Ok(());
        }
        if is_ap(s) && !self.cpus[cpu].online {
            return Ok(());
        }
        let r = if self.cpus[cpu].fail == s {
            self.cpus[cpu].fail = -1;
            Err(EAGAIN)
        } else {
            self.user_call(cpu, s, up, rollback)
        };
        if r.is_err() && (!up || is_atomic(s)) {
            self.warnings += 1; // BUG_ON(ret && !bringup) / WARN_ON_ONCE(st->result)
        }
        if up {
            r
        } else {
            Ok(())
        }
    }

    fn setup(&mut self, which: Which, up: bool, down: bool, invoke: bool) -> Result<i32, i32> {
        let slot = match which {
            Which::Fixed(s) => {
                if self.user.contains_key(&s) {
                    return Err(EBUSY);
                }
                s
            }
            Which::BpDyn | Which::ApDyn => {
                let (a, b) = if which == Which::BpDyn {
                    (BP_DYN, BP_DYN_END)
                } else {
                    (AP_DYN, AP_DYN_END)
                };
                match (a..=b).find(|s| !self.user.contains_key(s)) {
                    Some(s) => s,
                    None => {
                        self.warnings += 1;
                        return Err(28);
                    }
                }
            }
        };
        self.user.insert(slot, (up, down));
        if !invoke || !up {
            return Ok(slot);
        }
        for cpu in 0..self.cpus.len() {
            if self.cpus[cpu].state < slot {
                continue;
            }
            if let Err(e) = self.issue(cpu, slot, true, false) {
                if down {
                    for c in 0..cpu {
                        if self.cpus[c].state >= slot {
                            let _ = self.issue(c, slot, false, true);
                        }
                    }
                }
                self.user.remove(&slot);
                return Err(e);
            }
        }
        Ok(slot)
    }

    fn remove(&mut self, s: i32, invoke: bool) {
        if invoke {
            for cpu in 0..self.cpus.len() {
                if self.cpus[cpu].state >= s {
                    let _ = self.issue(cpu, s, false, false);
                }
            }
        }
        self.user.remove(&s);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Fixed(i32),
    BpDyn,
    ApDyn,
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    /// `cpu_up()` / `cpu_down()`.
    Run,
    /// `start_*` then `step()` until done.
    Step,
    /// `begin_step` / `callback_for` / `finish_step`, with a `hotplug/fail`
    /// write on `cpu` after `after` steps.
    TwoPhase { after: usize, fail: i32 },
}

#[derive(Clone, Debug)]
enum Transition {
    Setup {
        which: Which,
        up: bool,
        down: bool,
        invoke: bool,
    },
    Remove {
        state: i32,
        invoke: bool,
    },
    Up {
        cpu: usize,
        target: i32,
        mode: Mode,
    },
    Down {
        cpu: usize,
        target: i32,
        mode: Mode,
    },
    SetFail {
        cpu: usize,
        value: i32,
    },
    Arm {
        state: i32,
        bringup: bool,
    },
}

struct RefMachine;

impl ReferenceStateMachine for RefMachine {
    type State = Model;
    type Transition = Transition;

    fn init_state() -> BoxedStrategy<Model> {
        (2usize..=3)
            .prop_flat_map(|n| (Just(n), 1..=n))
            .prop_map(|(n, online)| Model {
                cpus: (0..n)
                    .map(|i| {
                        let s = if i < online { ONLINE } else { OFFLINE };
                        RefCpu {
                            state: s,
                            target: s,
                            fail: -1,
                            online: i < online,
                            bringup: i < online,
                            rollback: false,
                        }
                    })
                    .collect(),
                user: BTreeMap::new(),
                armed: Vec::new(),
                calls: Vec::new(),
                result: None,
                warnings: 0,
                mid_fail: None,
                invokes: 0,
            })
            .boxed()
    }

    fn transitions(m: &Model) -> BoxedStrategy<Transition> {
        let n = m.cpus.len();
        let registered: Vec<i32> = m.user.keys().copied().collect();
        let mut interesting: Vec<i32> = registered.clone();
        interesting.extend([0, 1, 21, 83, 87, 144, 145, 200, 236, 237, -1]);
        let mut targets: Vec<i32> = vec![0, 0, 36, 83, 144, 187, 236, 236, 236, 87, 237];
        targets.extend(registered.iter().copied());
        let mid: Vec<i32> = interesting
            .iter()
            .copied()
            .filter(|&s| s >= TEARDOWN)
            .collect();
        let mode = prop_oneof![
            Just(Mode::Run),
            Just(Mode::Step),
            (0usize..12, select(mid)).prop_map(|(after, fail)| Mode::TwoPhase { after, fail }),
        ];
        let which = prop_oneof![
            select(FIXED).prop_map(Which::Fixed),
            Just(Which::BpDyn),
            Just(Which::ApDyn),
        ];
        let setup = (which, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(which, up, down, invoke)| Transition::Setup {
                which,
                up,
                down,
                invoke,
            },
        );
        let cpu = 0..n;
        let up = (cpu.clone(), select(targets.clone()), mode.clone())
            .prop_map(|(cpu, target, mode)| Transition::Up { cpu, target, mode });
        let down = (cpu.clone(), select(targets), mode)
            .prop_map(|(cpu, target, mode)| Transition::Down { cpu, target, mode });
        let fail =
            (cpu, select(interesting)).prop_map(|(cpu, value)| Transition::SetFail { cpu, value });
        if registered.is_empty() {
            prop_oneof![3 => setup, 3 => up, 3 => down, 1 => fail].boxed()
        } else {
            let remove = (select(registered.clone()), any::<bool>())
                .prop_map(|(state, invoke)| Transition::Remove { state, invoke });
            let arm = (select(registered), any::<bool>())
                .prop_map(|(state, bringup)| Transition::Arm { state, bringup });
            prop_oneof![2 => setup, 1 => remove, 3 => up, 3 => down, 2 => fail, 2 => arm].boxed()
        }
    }

    fn preconditions(m: &Model, t: &Transition) -> bool {
        match t {
            Transition::Remove { state, .. } => m.user.contains_key(state),
            Transition::Up { cpu, .. }
            | Transition::Down { cpu, .. }
            | Transition::SetFail { cpu, .. } => *cpu < m.cpus.len(),
            _ => true,
        }
    }

    fn apply(mut m: Model, t: &Transition) -> Model {
        m.calls.clear();
        m.result = None;
        m.warnings = 0;
        m.invokes = 0;
        m.mid_fail = None;
        match *t {
            Transition::Setup {
                which,
                up,
                down,
                invoke,
            } => m.result = m.setup(which, up, down, invoke).err(),
            Transition::Remove { state, invoke } => m.remove(state, invoke),
            Transition::Up { cpu, target, mode } | Transition::Down { cpu, target, mode } => {
                if let Mode::TwoPhase { after, fail } = mode {
                    m.mid_fail = Some((after, cpu, fail));
                }
                let r = if matches!(t, Transition::Up { .. }) {
                    m.cpu_up(cpu, target)
                } else {
                    m.cpu_down(cpu, target)
                };
                m.result = r.err();
            }
            Transition::SetFail { cpu, value } => m.result = m.fail_store(cpu, value),
            Transition::Arm { state, bringup } => m.armed.push((state, bringup)),
        }
        m
    }
}

// ---- system under test ---------------------------------------------------

#[derive(Default)]
struct Env {
    calls: Mutex<Vec<Call>>,
    armed: Mutex<Vec<(i32, bool)>>,
}

fn cb() -> Option<Callback<Env>> {
    Some(Arc::new(|env: &Env, inv: &Invocation| {
        env.calls
            .lock()
            .unwrap()
            .push((inv.cpu.0, inv.state.0, inv.bringup, inv.rollback));
        let mut armed = env.armed.lock().unwrap();
        if let Some(i) = armed.iter().position(|&a| a == (inv.state.0, inv.bringup)) {
            armed.remove(i);
            return Err(Errno::EIO);
        }
        Ok(())
    }))
}

struct Sut {
    hp: Cpuhp<Env>,
    env: Env,
}

fn errno(r: Result<(), HotplugError>) -> Option<i32> {
    r.err().map(|e| e.errno().as_i32())
}

fn drive(sut: &mut Sut, cpu: usize, mode: Mode) -> Option<i32> {
    let c = CpuId(cpu as u32);
    let mut result = Ok(());
    let mut steps = 0usize;
    while sut.hp.in_progress(c) {
        if let Mode::TwoPhase { after, fail } = mode {
            if steps == after {
                let _ = sut.hp.set_fail(c, fail);
            }
        }
        let out = match mode {
            Mode::Run | Mode::Step => sut.hp.step(c, &sut.env).unwrap(),
            Mode::TwoPhase { .. } => {
                let call = sut.hp.begin_step(c).unwrap();
                let r = match sut.hp.callback_for(&call) {
                    Some(cb) => cb(&sut.env, &call.invocation),
                    None => {
                        assert!(call.injected_fail);
                        Err(Errno::EIO) // ignored for an injected failure
                    }
                };
                sut.hp.finish_step(call, r).unwrap()
            }
        };
        steps += 1;
        match out {
            StepOutcome::Ran {
                finished: Some(r), ..
            } => result = r,
            StepOutcome::Ran { .. } => {}
            StepOutcome::Done => panic!("Done while in progress"),
        }
    }
    errno(result)
}

impl StateMachineTest for Sut {
    type SystemUnderTest = Sut;
    type Reference = RefMachine;

    fn init_test(m: &Model) -> Sut {
        let n = m.cpus.len() as u32;
        let online = m.cpus.iter().filter(|c| c.online).count() as u32;
        Sut {
            hp: Cpuhp::new(n, online).unwrap(),
            env: Env::default(),
        }
    }

    fn apply(mut sut: Sut, m: &Model, t: Transition) -> Sut {
        sut.env.calls.lock().unwrap().clear();
        let warnings_before = sut.hp.warnings().len();
        let result = match t {
            Transition::Setup {
                which,
                up,
                down,
                invoke,
            } => {
                let state = StateId(match which {
                    Which::Fixed(s) => s,
                    Which::BpDyn => BP_DYN,
                    Which::ApDyn => AP_DYN,
                });
                let (su, td) = (if up { cb() } else { None }, if down { cb() } else { None });
                let r = if invoke {
                    sut.hp.cpuhp_setup_state(state, "t/s", su, td, &sut.env)
                } else {
                    sut.hp.cpuhp_setup_state_nocalls(state, "t/s", su, td)
                };
                r.err().map(|e| e.errno().as_i32())
            }
            Transition::Remove { state, invoke } => {
                let r = if invoke {
                    sut.hp.cpuhp_remove_state(StateId(state), &sut.env)
                } else {
                    sut.hp.cpuhp_remove_state_nocalls(StateId(state))
                };
                r.unwrap();
                None
            }
            Transition::Up { cpu, target, mode } | Transition::Down { cpu, target, mode } => {
                let c = CpuId(cpu as u32);
                let is_up = matches!(t, Transition::Up { .. });
                match mode {
                    Mode::Run if is_up => errno(sut.hp.cpu_up(c, StateId(target), &sut.env)),
                    Mode::Run => errno(sut.hp.cpu_down(c, StateId(target), &sut.env)),
                    _ => {
                        let started = if is_up {
                            sut.hp.start_cpu_up(c, StateId(target))
                        } else {
                            sut.hp.start_cpu_down(c, StateId(target))
                        };
                        match started {
                            Err(e) => Some(e.errno().as_i32()),
                            Ok(()) => drive(&mut sut, cpu, mode),
                        }
                    }
                }
            }
            Transition::SetFail { cpu, value } => errno(sut.hp.set_fail(CpuId(cpu as u32), value)),
            Transition::Arm { state, bringup } => {
                sut.env.armed.lock().unwrap().push((state, bringup));
                None
            }
        };
        assert_eq!(result, m.result, "return value");
        assert_eq!(*sut.env.calls.lock().unwrap(), m.calls, "callback sequence");
        assert_eq!(
            sut.hp.warnings().len() - warnings_before,
            m.warnings_delta(),
            "WARNs"
        );
        sut
    }

    fn check_invariants(sut: &Sut, m: &Model) {
        for (i, c) in m.cpus.iter().enumerate() {
            let cpu = CpuId(i as u32);
            assert!(!sut.hp.in_progress(cpu));
            assert_eq!(sut.hp.state(cpu).unwrap().0, c.state, "state of {cpu}");
            assert_eq!(sut.hp.target(cpu).unwrap().0, c.target, "target of {cpu}");
            assert_eq!(sut.hp.fail(cpu).unwrap(), c.fail, "fail of {cpu}");
            assert_eq!(sut.hp.cpu_online(cpu), c.online, "online bit of {cpu}");
        }
        // After a failed rollback the kernel is "up a creek" (a CPU can be
        // left in the STARTING/DYING range, still in the online mask, and a
        // later operation on it can take down the last online CPU); the model
        // must agree with the reference there too, but the invariant only
        // holds while no rollback has failed.
        if sut
            .hp
            .warnings()
            .iter()
            .all(|w| !matches!(w, hotplug::Warning::RollbackFailed { .. }))
        {
            assert!(sut.hp.num_online_cpus() >= 1);
        }
        for s in 1..ONLINE {
            let info = sut.hp.step_info(StateId(s)).unwrap();
            assert_eq!(
                info.registered,
                m.user.contains_key(&s),
                "registration of {s}"
            );
        }
        assert_eq!(*sut.env.armed.lock().unwrap(), m.armed, "armed errors");
    }
}

impl Model {
    /// WARNs of the last transition (the model counts from zero each time).
    fn warnings_delta(&self) -> usize {
        self.warnings
    }
}

fn config() -> Config {
    Config {
        max_shrink_iters: 4096,
        failure_persistence: if cfg!(feature = "bug-rollback-calls-failed-state") {
            // Seeds that only fail under the twin must not land in the
            // committed regressions file.
            None
        } else {
            Some(Box::new(FileFailurePersistence::WithSource(
                "proptest-regressions",
            )))
        },
        ..Config::default()
    }
}

prop_state_machine! {
    #![proptest_config(config())]

    /// Random hotplug sequences against the reference model.
    #[test]
    #[cfg_attr(feature = "bug-rollback-calls-failed-state", should_panic)]
    fn hotplug_matches_reference(sequential 1..30 => Sut);
}

/// The reference's numbers are the crate's.
#[test]
fn reference_numbers_match_the_crate() {
    use hotplug::*;
    assert_eq!(
        [
            CPUHP_CREATE_THREADS,
            CPUHP_BP_PREPARE_DYN,
            CPUHP_BP_PREPARE_DYN_END,
            CPUHP_BP_KICK_AP,
            CPUHP_BRINGUP_CPU,
            CPUHP_AP_IDLE_DEAD,
            CPUHP_AP_OFFLINE,
            CPUHP_AP_ONLINE,
            CPUHP_TEARDOWN_CPU,
            CPUHP_AP_ONLINE_IDLE,
            CPUHP_AP_ONLINE_DYN,
            CPUHP_AP_ONLINE_DYN_END,
            CPUHP_ONLINE,
        ]
        .map(|s| s.0),
        [
            CREATE_THREADS,
            BP_DYN,
            BP_DYN_END,
            KICK_AP,
            BRINGUP,
            IDLE_DEAD,
            AP_OFFLINE,
            AP_ONLINE,
            TEARDOWN,
            ONLINE_IDLE,
            AP_DYN,
            AP_DYN_END,
            ONLINE,
        ]
    );
    assert_eq!(Errno::EAGAIN.as_i32(), EAGAIN);
}

/// The counterexample proptest shrinks the buggy twin to (three transitions),
/// kept as a plain test because stored seeds go stale when strategies change:
/// a PREPARE startup fails during `cpu_up`, and its own teardown must not run.
#[test]
#[cfg_attr(
    feature = "bug-rollback-calls-failed-state",
    should_panic(expected = "assertion")
)]
fn twin_counterexample_prepare_startup_failure() {
    let mut sut = Sut {
        hp: Cpuhp::new(2, 1).unwrap(),
        env: Env::default(),
    };
    let timers = StateId(58);
    sut.hp
        .cpuhp_setup_state_nocalls(timers, "timers:prepare", cb(), cb())
        .unwrap();
    sut.env.armed.lock().unwrap().push((58, true));
    let err = sut
        .hp
        .cpu_up(CpuId(1), StateId(BRINGUP), &sut.env)
        .unwrap_err();
    assert_eq!(err.errno(), Errno::EIO);
    assert_eq!(*sut.env.calls.lock().unwrap(), vec![(1, 58, true, false)]);
    assert_eq!(sut.hp.state(CpuId(1)).unwrap().0, OFFLINE);
}
