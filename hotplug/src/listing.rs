//! A step table read from a live kernel instead of the built-in 6.18 one: the
//! `/sys/devices/system/cpu/hotplug/states` listing (`states_show()` in
//! kernel/cpu.c, one `"%3d: %s\n"` line per named `struct cpuhp_step`) plus a
//! map of which steps have a startup and a teardown callback, as a traced
//! offline/online shows them (`cpuhp_enter`/`cpuhp_multi_enter` name the
//! function with `%ps`).
//!
//! [`Cpuhp::from_listing`] builds a machine whose steps carry the listing's
//! names and, where the map says so, callbacks that succeed. The machine's
//! own stepping code is compiled against the fixed numbers of kernel/cpu.c's
//! core steps (`CPUHP_BRINGUP_CPU` = 83, `CPUHP_TEARDOWN_CPU` = 144, ...), so a
//! listing that puts them elsewhere is refused rather than half-modelled.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cpuhp::Cpuhp;
use crate::invoke::{Callback, InstanceId, Invocation};
use crate::state::*;
use crate::table::{StepKind, CORE_STEPS};

/// One callback of a step, as a live trace shows it: the function `%ps`
/// printed, whether it was a multi-instance step (`cpuhp_multi_enter`, one
/// event per instance) and how many instances ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackInfo {
    /// The kernel function (`workqueue_online_cpu`).
    pub function: String,
    /// `struct cpuhp_step.multi_instance`: the trace showed `cpuhp_multi_enter`.
    pub multi_instance: bool,
    /// How many instances ran (1 for a single-instance step). A multi-instance
    /// step with 0 instances still has its function pointer, so
    /// `cpuhp_next_state()` does not skip it and `hotplug/fail` can fire there,
    /// but no callback runs and nothing is traced.
    pub instances: u32,
}

/// The callbacks of one step (`struct cpuhp_step`'s `startup` and `teardown`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StepCallbacks {
    /// The startup callback, if the step has one.
    pub startup: Option<CallbackInfo>,
    /// The teardown callback, if the step has one.
    pub teardown: Option<CallbackInfo>,
}

impl StepCallbacks {
    /// The callback for a direction (`true`: startup).
    pub fn get(&self, bringup: bool) -> Option<&CallbackInfo> {
        if bringup {
            self.startup.as_ref()
        } else {
            self.teardown.as_ref()
        }
    }
}

/// Which steps have callbacks, by state number.
pub type CallbackMap = BTreeMap<StateId, StepCallbacks>;

/// A parsed `/sys/devices/system/cpu/hotplug/states` (`states_show()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatesListing {
    /// `(state, name)` in listing order (ascending state numbers).
    pub entries: Vec<(StateId, String)>,
}

/// Why a listing or a callback map cannot make a table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListingError {
    /// A line of the listing is not `"%3d: %s"`.
    #[error("states listing line {line}: {reason}: {text:?}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: &'static str,
        /// The line.
        text: String,
    },
    /// A core step of kernel/cpu.c is missing or elsewhere: the model's stepping code assumes
    /// the 6.18 numbering of its own steps.
    #[error("states listing: the model's stepping code needs `{name}` at state {state} (kernel/cpu.c's own step); {found}")]
    CoreStep {
        /// The state number the model uses.
        state: i32,
        /// The name the model expects there.
        name: &'static str,
        /// What the listing has instead.
        found: String,
    },
    /// The callback map names a state the table cannot give a callback to.
    #[error("callback map: state {state}: {reason}")]
    Callback {
        /// The state.
        state: i32,
        /// Why.
        reason: String,
    },
}

impl StatesListing {
    /// Parses the text of `/sys/devices/system/cpu/hotplug/states`: one
    /// `"%3d: %s"` line per named step, state numbers ascending and within
    /// `CPUHP_OFFLINE..=CPUHP_ONLINE`. Anything else is an error naming the line.
    pub fn parse(text: &str) -> Result<StatesListing, ListingError> {
        let mut entries: Vec<(StateId, String)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let bad = |reason| ListingError::Line {
                line: i + 1,
                reason,
                text: line.to_owned(),
            };
            let (num, name) = line.split_once(": ").ok_or_else(|| bad("no `N: name`"))?;
            let num = num.trim_start();
            if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("the state is not a number"));
            }
            let state = StateId(num.parse().map_err(|_| bad("the state is not a number"))?);
            if !state.in_table() {
                return Err(bad("the state is outside 0..=CPUHP_ONLINE"));
            }
            if name.is_empty() {
                return Err(bad("a step without a name"));
            }
            if entries.last().is_some_and(|(s, _)| *s >= state) {
                return Err(bad("state numbers do not ascend"));
            }
            entries.push((state, name.to_owned()));
        }
        Ok(StatesListing { entries })
    }

    /// The name the listing gives `state`.
    pub fn name(&self, state: StateId) -> Option<&str> {
        self.entries
            .iter()
            .find(|(s, _)| *s == state)
            .map(|(_, n)| n.as_str())
    }
}

/// The core steps whose callbacks the model's stepping code cannot do without:
/// `bringup_cpu()`/`cpuhp_bringup_ap()` and `finish_cpu()` at `CPUHP_BRINGUP_CPU`,
/// `takedown_cpu()` at `CPUHP_TEARDOWN_CPU` (they nest the STARTING/DYING ranges).
const REQUIRED_CORE_CALLBACKS: &[(StateId, bool)] = &[
    (CPUHP_BRINGUP_CPU, true),
    (CPUHP_BRINGUP_CPU, false),
    (CPUHP_TEARDOWN_CPU, false),
];

/// `multi x9` / `single-instance`, for [`ListingError::Callback`].
fn describe((multi, instances): (bool, Option<u32>)) -> String {
    match (multi, instances) {
        (true, Some(n)) => format!("multi-instance x{n}"),
        _ => "single-instance".to_owned(),
    }
}

fn succeed<E: 'static>() -> Callback<E> {
    Arc::new(|_: &E, _: &Invocation| Ok(()))
}

impl<E: 'static> Cpuhp<E> {
    /// A machine of `nr_cpus` CPUs (the first `online_at_boot` online, as in
    /// [`Cpuhp::new`]) whose table is `listing` with the callbacks of
    /// `callbacks`: every step the listing names gets its name, and a callback
    /// that succeeds for each direction the map gives it (the map's function
    /// names stay with the caller). A step the map marks multi-instance is one
    /// (`cpuhp_setup_state_multi()`) with as many instances as the map counts
    /// (`cpuhp_state_add_instance_nocalls()`), so an offline or online calls its
    /// callback once per instance, and none for a step with no instance.
    ///
    /// Refused: a listing without kernel/cpu.c's own steps at the model's numbers
    /// ([`CORE_STEPS`]), a map entry for a state the listing does not name (the
    /// kernel only has callbacks on named steps) or for `CPUHP_OFFLINE` /
    /// `CPUHP_ONLINE`, a map without the `CPUHP_BRINGUP_CPU` startup and
    /// teardown and the `CPUHP_TEARDOWN_CPU` teardown, a multi-instance core step,
    /// and a step whose startup and teardown disagree on being multi-instance or
    /// on the instance count (the kernel's step has one list for both).
    pub fn from_listing(
        nr_cpus: u32,
        online_at_boot: u32,
        listing: &StatesListing,
        callbacks: &CallbackMap,
    ) -> Result<Self, ListingError> {
        for core in CORE_STEPS {
            let Some(name) = core.name else { continue };
            match listing.name(core.state) {
                Some(n) if n == name => {}
                other => {
                    return Err(ListingError::CoreStep {
                        state: core.state.0,
                        name,
                        found: match other {
                            Some(n) => format!("the listing names it `{n}`"),
                            None => "the listing does not name it".to_owned(),
                        },
                    })
                }
            }
        }
        for (&state, cbs) in callbacks {
            let multi = |c: &Option<CallbackInfo>| {
                c.as_ref()
                    .map(|c| (c.multi_instance, c.multi_instance.then_some(c.instances)))
            };
            let reason = if !state.in_table() || state == CPUHP_OFFLINE || state == CPUHP_ONLINE {
                Some("not a state with callbacks (CPUHP_OFFLINE+1..CPUHP_ONLINE)".to_owned())
            } else if let (Some(up), Some(down)) = (multi(&cbs.startup), multi(&cbs.teardown)) {
                (up != down).then(|| {
                    format!(
                        "the startup is {} and the teardown {} (one instance list for both)",
                        describe(up),
                        describe(down)
                    )
                })
            } else if CORE_STEPS.iter().any(|c| c.state == state)
                && [&cbs.startup, &cbs.teardown]
                    .into_iter()
                    .any(|c| c.as_ref().is_some_and(|c| c.multi_instance))
            {
                Some("kernel/cpu.c's own step is not multi-instance".to_owned())
            } else if listing.name(state).is_none() {
                Some("the states listing does not name it (the kernel only runs callbacks of named steps)".to_owned())
            } else if cbs.startup.is_none() && cbs.teardown.is_none() {
                Some("an entry with neither a startup nor a teardown".to_owned())
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(ListingError::Callback {
                    state: state.0,
                    reason,
                });
            }
        }
        for &(state, bringup) in REQUIRED_CORE_CALLBACKS {
            if callbacks.get(&state).and_then(|c| c.get(bringup)).is_none() {
                return Err(ListingError::Callback {
                    state: state.0,
                    reason: format!(
                        "kernel/cpu.c's `{}` needs a {} callback for the model to step through it",
                        listing.name(state).unwrap_or("?"),
                        if bringup { "startup" } else { "teardown" }
                    ),
                });
            }
        }
        let mut hp = Cpuhp::new(nr_cpus, online_at_boot).map_err(|e| ListingError::Callback {
            state: -1,
            reason: e.to_string(),
        })?;
        for (i, step) in hp.steps.iter_mut().enumerate() {
            let state = StateId(i as i32);
            let core = CORE_STEPS.iter().any(|c| c.state == state);
            step.default_name = None;
            step.name = listing.name(state).map(Arc::from);
            let cbs = callbacks.get(&state);
            step.startup = cbs.and_then(|c| c.startup.as_ref()).map(|_| succeed());
            step.teardown = cbs.and_then(|c| c.teardown.as_ref()).map(|_| succeed());
            step.kind = if core {
                StepKind::Core
            } else if step.name.is_some() {
                StepKind::Builtin
            } else {
                StepKind::Free
            };
            step.registered = !core && cbs.is_some();
            let multi = cbs
                .into_iter()
                .flat_map(|c| [&c.startup, &c.teardown])
                .flatten()
                .find(|c| c.multi_instance);
            step.multi_instance = multi.is_some();
            step.instances.clear();
            for _ in 0..multi.map_or(0, |c| c.instances) {
                // hlist_add_head(): the newest first, as cpuhp_state_add_instance_nocalls() does.
                step.instances.insert(0, InstanceId(hp.next_instance));
                hp.next_instance += 1;
            }
        }
        Ok(hp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "  0: offline\n  1: threads:prepare\n 36: workqueue:prepare\n 82: cpu:kick_ap\n 83: cpu:bringup\n 84: idle:dead\n 85: ap:offline\n143: ap:online\n144: cpu:teardown\n187: workqueue:online\n236: online\n";

    fn cb(f: &str) -> Option<CallbackInfo> {
        Some(CallbackInfo {
            function: f.into(),
            multi_instance: false,
            instances: 1,
        })
    }

    fn map() -> CallbackMap {
        let mut m = CallbackMap::new();
        m.insert(
            CPUHP_BRINGUP_CPU,
            StepCallbacks {
                startup: cb("cpuhp_bringup_ap"),
                teardown: cb("finish_cpu"),
            },
        );
        m.insert(
            CPUHP_TEARDOWN_CPU,
            StepCallbacks {
                startup: None,
                teardown: cb("takedown_cpu"),
            },
        );
        m.insert(
            CPUHP_AP_WORKQUEUE_ONLINE,
            StepCallbacks {
                startup: cb("workqueue_online_cpu"),
                teardown: None,
            },
        );
        m
    }

    #[test]
    fn a_listing_and_a_map_make_the_table_the_machine_steps_through() {
        let l = StatesListing::parse(LISTING).unwrap();
        assert_eq!(l.entries.len(), 11);
        let mut hp: Cpuhp<()> = Cpuhp::from_listing(2, 2, &l, &map()).unwrap();
        assert_eq!(hp.states_listing(), LISTING);
        let wq = hp.step_info(CPUHP_AP_WORKQUEUE_ONLINE).unwrap();
        assert!(wq.has_startup && !wq.has_teardown);
        // 36 is named but has no callback here: fail_store refuses it, 187 it takes.
        hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &()).unwrap();
        assert_eq!(
            hp.set_fail(CpuId(1), 36).unwrap_err().errno(),
            crate::Errno::EINVAL
        );
        hp.set_fail(CpuId(1), 187).unwrap();
        let err = hp.cpu_up(CpuId(1), CPUHP_ONLINE, &()).unwrap_err();
        assert_eq!(err.errno(), crate::Errno::EAGAIN);
        let steps: Vec<(i32, bool)> = hp
            .invocations()
            .iter()
            .map(|(i, ..)| (i.state.0, i.bringup))
            .collect();
        assert_eq!(
            steps,
            vec![
                (144, false),
                (83, false),
                (83, true),
                (187, true),
                (144, false),
                (83, false)
            ]
        );
    }

    fn multi(f: &str, instances: u32) -> Option<CallbackInfo> {
        Some(CallbackInfo {
            function: f.into(),
            multi_instance: true,
            instances,
        })
    }

    #[test]
    fn a_multi_instance_step_of_the_map_calls_each_of_its_instances() {
        let l = StatesListing::parse(LISTING).unwrap();
        let mut m = map();
        m.insert(
            CPUHP_AP_WORKQUEUE_ONLINE,
            StepCallbacks {
                startup: multi("workqueue_online_cpu", 3),
                teardown: multi("workqueue_offline_cpu", 3),
            },
        );
        let mut hp: Cpuhp<()> = Cpuhp::from_listing(2, 2, &l, &m).unwrap();
        assert_eq!(hp.instances(CPUHP_AP_WORKQUEUE_ONLINE).len(), 3);
        hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &()).unwrap();
        let calls = |hp: &Cpuhp<()>| {
            hp.invocations()
                .iter()
                .filter(|(i, ..)| i.state == CPUHP_AP_WORKQUEUE_ONLINE)
                .map(|(i, ..)| i.instance)
                .collect::<Vec<_>>()
        };
        let down = calls(&hp);
        assert_eq!(down.len(), 3);
        assert!(down.iter().all(|i| i.is_some()));
        // No instance: the step calls nothing, though fail_store() accepts it and it fires there.
        m.get_mut(&CPUHP_AP_WORKQUEUE_ONLINE).unwrap().startup = multi("-", 0);
        m.get_mut(&CPUHP_AP_WORKQUEUE_ONLINE).unwrap().teardown = multi("-", 0);
        let mut hp: Cpuhp<()> = Cpuhp::from_listing(2, 2, &l, &m).unwrap();
        hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &()).unwrap();
        assert!(calls(&hp).is_empty());
        hp.set_fail(CpuId(1), 187).unwrap();
        let err = hp.cpu_up(CpuId(1), CPUHP_ONLINE, &()).unwrap_err();
        assert_eq!(err.errno(), crate::Errno::EAGAIN);
        // The two directions of one step share its list.
        m.get_mut(&CPUHP_AP_WORKQUEUE_ONLINE).unwrap().teardown = multi("-", 2);
        let e = Cpuhp::<()>::from_listing(2, 2, &l, &m).unwrap_err();
        assert!(
            e.to_string()
                .contains("multi-instance x0 and the teardown multi-instance x2"),
            "{e}"
        );
        let mut m = map();
        m.get_mut(&CPUHP_TEARDOWN_CPU).unwrap().teardown = multi("takedown_cpu", 1);
        let e = Cpuhp::<()>::from_listing(2, 2, &l, &m).unwrap_err();
        assert!(e.to_string().contains("not multi-instance"), "{e}");
    }

    #[test]
    fn bad_listings_and_maps_are_refused_with_the_reason() {
        for (text, reason) in [
            ("  1 threads:prepare\n", "no `N: name`"),
            (" x1: a\n", "the state is not a number"),
            ("237: a\n", "the state is outside 0..=CPUHP_ONLINE"),
            ("  2: a\n  1: b\n", "state numbers do not ascend"),
        ] {
            match StatesListing::parse(text).unwrap_err() {
                ListingError::Line { reason: r, .. } => assert_eq!(r, reason, "{text}"),
                e => panic!("{e}"),
            }
        }
        let l = StatesListing::parse(&LISTING.replace("144: cpu:teardown\n", "")).unwrap();
        let e = Cpuhp::<()>::from_listing(2, 2, &l, &map()).unwrap_err();
        assert!(e.to_string().contains("`cpu:teardown` at state 144"), "{e}");
        let l = StatesListing::parse(LISTING).unwrap();
        let mut m = map();
        m.insert(
            StateId(40),
            StepCallbacks {
                startup: cb("x"),
                teardown: None,
            },
        );
        let e = Cpuhp::<()>::from_listing(2, 2, &l, &m).unwrap_err();
        assert!(e.to_string().contains("state 40"), "{e}");
        let mut m = map();
        m.remove(&CPUHP_TEARDOWN_CPU);
        let e = Cpuhp::<()>::from_listing(2, 2, &l, &m).unwrap_err();
        assert!(e.to_string().contains("teardown callback"), "{e}");
    }
}
