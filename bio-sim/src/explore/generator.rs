//! The transition generator for `block/bio.c`'s task-completion batcher under `kernel/cpu.c`'s
//! hotplug (and `drivers/block/loop.c` when a loop device is attached): the one proptest strategy
//! over every [`Transition`] a scenario can take, used by `biosim explore` and by the proptest state machine of
//! `tests/tests/hotplug_rollback.rs` (whose `Reference::transitions` calls [`transition`]).
//!
//! What it draws, with the weights the state machine has always used: a completion on any CPU from
//! every context (`hardirq`, `softirq`, atomic task, preemptible task) of every kind (plain,
//! `BIO_COMPLETE_IN_TASK`, `bio_complete_in_task()`), a run of a CPU's worker pool, a jiffy,
//! `cpu_down`/`cpu_up` of any CPU with `hotplug/fail` armed at any state `0..=CPUHP_ONLINE` (weighted
//! toward the states where a failure changes what the batcher sees), one step of the hotplug
//! operation in progress (so completions and failures land mid-operation), `need_resched` on a CPU,
//! `hotplug/fail` written at any moment (mid-operation too; `-1` disarms), `hotplug/target` (a
//! stepped partial `cpu_up`/`cpu_down` that stops at a state), and with a loop device (`drivers/block/loop.c`) its I/O and its worker,
//! and, when the campaign asks ([`Space::inject`]), one-shot fault injection (`fail_io` on loop0
//! or its stacked lower device, `fail_alloc` at an allocation site) and `plug`/`unplug`.
//!
//! Each kind of transition is one arm of [`arms`] (a [`Kind`] and its weight) and one arm of
//! [`build`]: adding a transition to the scenario language adds one arm to each.
//!
//! The strategy is flat for speed (`biosim explore` draws tens of thousands of cases a second): one
//! value tree of plain integers per transition, the arm index weighted by a cumulative table, then
//! mapped. It shrinks as proptest's unions do: the arm toward the first (a completion), each part
//! toward its first value (CPU0, hardirq, a flagged bio, `cpu_down`, no `hotplug/fail`).

use crate::machine::loop_rig::LoopOp;
use crate::machine::oracle::Need;
use crate::machine::sim::CompletionContext;
use crate::machine::transition::Transition;
use bio_core::kernel::fault_inject::ALLOC_SITES;
use hotplug::{
    CPUHP_AP_ONLINE_DYN, CPUHP_AP_WORKQUEUE_ONLINE, CPUHP_BP_PREPARE_DYN, CPUHP_BRINGUP_CPU,
    CPUHP_ONLINE, CPUHP_TEARDOWN_CPU, CPUHP_TIMERS_PREPARE,
};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

/// The machine a generator draws transitions for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Possible CPUs (`nr_cpu_ids`): transitions name CPUs `0..nr_cpus`.
    pub nr_cpus: u32,
    /// Whether the variant has `bio_complete_in_task()` (`Variant::dynamic_helper`). Without it
    /// (v5) a bio whose `bi_end_io` would call it is submitted with `BIO_COMPLETE_IN_TASK` instead.
    pub dynamic_helper: bool,
    /// Blocks of the loop device, if the machine has one (then `io` and `loop_worker` are drawn).
    pub loop_blocks: Option<u32>,
    /// With a loop device: also draw `fail_alloc`, `fail_io`, `plug` and `unplug` (off by
    /// default, so every existing campaign draws the cases it always drew).
    pub inject: bool,
    /// The stacked lower device under loop0 (`nullb0`, `loop1`), which `fail_io` may name too.
    pub lower: Option<&'static str>,
}

/// A kind of transition: one arm of the generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// [`Transition::Complete`].
    Complete,
    /// [`Transition::RunWorker`].
    RunWorker,
    /// [`Transition::Tick`].
    Tick,
    /// [`Transition::Hotplug`].
    Hotplug,
    /// [`Transition::HotplugStep`].
    HotplugStep,
    /// [`Transition::NeedResched`].
    NeedResched,
    /// [`Transition::Fail`]: `hotplug/fail` written at any moment, mid-operation too.
    Fail,
    /// [`Transition::Target`]: `hotplug/target` written, a stepped partial `cpu_up`/`cpu_down`.
    Target,
    /// [`Transition::LoopIo`].
    LoopIo,
    /// [`Transition::LoopWorker`].
    LoopWorker,
    /// [`Transition::FailIo`] (with [`Space::inject`]).
    FailIo,
    /// [`Transition::FailAlloc`] (with [`Space::inject`]).
    FailAlloc,
    /// [`Transition::Plug`] (with [`Space::inject`]).
    Plug,
    /// [`Transition::Unplug`] (with [`Space::inject`]).
    Unplug,
}

/// Every arm of the generator with its weight, in shrinking order (the first is what a
/// transition shrinks toward).
pub fn arms(space: &Space) -> Vec<(u32, Kind)> {
    let mut arms = vec![
        (6, Kind::Complete),
        (3, Kind::RunWorker),
        (2, Kind::Tick),
        (2, Kind::Hotplug),
        (6, Kind::HotplugStep),
        (1, Kind::NeedResched),
        (2, Kind::Fail),
        (1, Kind::Target),
    ];
    if space.loop_blocks.is_some() {
        arms.push((3, Kind::LoopIo));
        arms.push((2, Kind::LoopWorker));
        // After every older arm, and only when asked: a campaign without `inject` keeps its
        // weights table, so its seeds draw what they always drew.
        if space.inject {
            arms.push((1, Kind::FailIo));
            arms.push((1, Kind::FailAlloc));
            arms.push((1, Kind::Plug));
            arms.push((1, Kind::Unplug));
        }
    }
    arms
}

/// The `hotplug/fail` values armed with a `cpu_down`/`cpu_up`, by weight: none, the states where a
/// failure changes what the batcher sees, or (`ANY_STATE`) any state `0..=CPUHP_ONLINE` (the
/// kernel refuses some, which the lenient `Sim::apply` leaves unarmed).
const FAIL_AT: [(u32, Option<i32>); 8] = [
    (3, None),
    (1, Some(CPUHP_AP_ONLINE_DYN.0)),
    (2, Some(CPUHP_AP_WORKQUEUE_ONLINE.0)),
    (1, Some(CPUHP_TEARDOWN_CPU.0)),
    (1, Some(CPUHP_BRINGUP_CPU.0)),
    (1, Some(CPUHP_BP_PREPARE_DYN.0)),
    (1, Some(CPUHP_TIMERS_PREPARE.0)),
    (1, Some(ANY_STATE)),
];

/// The marker in [`FAIL_AT`] for "any state", drawn uniformly.
const ANY_STATE: i32 = -1;

/// How a completed bio asks for task context, by weight (a `bio_complete_in_task()` user becomes
/// a flagged bio on a variant without the helper).
const NEEDS: [(u32, Need); 3] = [(2, Need::Flag), (1, Need::Dynamic), (1, Need::Any)];

/// The raw draw of one transition: the arm and every part any arm takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draw {
    /// A point in `0..` the arms' total weight.
    pub arm: u32,
    /// A CPU.
    pub cpu: u32,
    /// A completion context (index into [`CompletionContext::ALL`]).
    pub ctx: u32,
    /// A point in `0..` the needs' total weight.
    pub need: u32,
    /// `cpu_up` instead of `cpu_down`.
    pub up: bool,
    /// A point in `0..` the `hotplug/fail` table's total weight.
    pub fail: u32,
    /// The state when the fail table says any.
    pub state: i32,
    /// A loop I/O operation (0 read, 1 write, 2 discard).
    pub op: u32,
    /// A loop block.
    pub block: u32,
    /// A write's fill byte.
    pub fill: u8,
}

/// The entry of a weighted table a point falls in.
fn weighted<T: Copy>(table: &[(u32, T)], mut point: u32) -> T {
    for &(w, t) in table {
        if point < w {
            return t;
        }
        point -= w;
    }
    table[table.len() - 1].1
}

fn total<T>(table: &[(u32, T)]) -> u32 {
    table.iter().map(|(w, _)| w).sum()
}

/// The transition a draw makes on `space`'s machine.
pub fn build(space: &Space, arms: &[(u32, Kind)], d: Draw) -> Transition {
    let cpu = d.cpu;
    match weighted(arms, d.arm) {
        Kind::Complete => Transition::Complete {
            cpu,
            ctx: CompletionContext::ALL[d.ctx as usize % 4],
            need: match weighted(&NEEDS, d.need) {
                Need::Dynamic if !space.dynamic_helper => Need::Flag,
                n => n,
            },
        },
        Kind::RunWorker => Transition::RunWorker { cpu },
        Kind::Tick => Transition::Tick,
        Kind::Hotplug => Transition::Hotplug {
            cpu,
            up: d.up,
            fail_at: weighted(&FAIL_AT, d.fail).map(|s| if s == ANY_STATE { d.state } else { s }),
        },
        Kind::HotplugStep => Transition::HotplugStep,
        Kind::NeedResched => Transition::NeedResched { cpu },
        // A write of the fail table's state, or -1 (disarm) where the table says none.
        Kind::Fail => Transition::Fail {
            cpu,
            state: weighted(&FAIL_AT, d.fail)
                .map(|s| if s == ANY_STATE { d.state } else { s })
                .unwrap_or(-1),
        },
        // A partial operation to the fail table's state (the states where stopping matters to the
        // batcher), or all the way (0 or CPUHP_ONLINE) where it says none.
        Kind::Target => Transition::Target {
            cpu,
            state: weighted(&FAIL_AT, d.fail)
                .map(|s| if s == ANY_STATE { d.state } else { s })
                .unwrap_or(if d.up { CPUHP_ONLINE.0 } else { 0 }),
        },
        Kind::LoopIo => {
            let op = [LoopOp::Read, LoopOp::Write, LoopOp::Discard][d.op as usize % 3];
            Transition::LoopIo {
                cpu,
                op,
                block: d.block,
                // A read or discard carries no fill (the scenario line has none).
                fill: if op == LoopOp::Write { d.fill } else { 0x5a },
            }
        }
        Kind::LoopWorker => Transition::LoopWorker { cpu },
        // loop0, or the stacked lower device on odd draws of `op`.
        Kind::FailIo => Transition::FailIo {
            dev: match space.lower {
                Some(lower) if d.op % 2 == 1 => lower,
                _ => "loop0",
            },
        },
        Kind::FailAlloc => Transition::FailAlloc {
            site: ALLOC_SITES[d.op as usize % ALLOC_SITES.len()],
        },
        Kind::Plug => Transition::Plug { cpu },
        Kind::Unplug => Transition::Unplug { cpu },
    }
}

/// The exclusive upper bounds of a [`Draw`]'s integer parts on `space`'s machine (each drawn from
/// `0..bound`; `state` from `0..=CPUHP_ONLINE`): shared by [`transition_strategy`] and
/// [`draw_case`], which must draw alike.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    arm: u32,
    cpu: u32,
    need: u32,
    fail: u32,
    block: u32,
}

impl Bounds {
    fn new(space: &Space, arms: &[(u32, Kind)]) -> Self {
        Bounds {
            arm: total(arms),
            cpu: space.nr_cpus.max(1),
            need: total(&NEEDS),
            fail: total(&FAIL_AT),
            block: space.loop_blocks.unwrap_or(1).max(1),
        }
    }
}

/// The draw of `0..bound` as proptest's `Range<u32>` strategy makes it (`Uniform::new(0, bound)`,
/// which is `Uniform::new_inclusive(0, bound - 1)`), without its value tree.
fn below(runner: &mut TestRunner, bound: u32) -> u32 {
    proptest::num::sample_uniform_incl(runner, 0, bound - 1)
}

/// The case [`case`]`(space, steps)` draws from `runner`'s RNG, drawn without proptest's value
/// trees: the same calls on the RNG in the same order (the vec's length
/// `sample_uniform_incl(1, steps)`, then per transition the ten parts in the tuple's order, each
/// as its strategy draws it: a range with `sample_uniform_incl`, `any::<bool>()` and
/// `any::<u8>()` with `random()`), so the same transitions. `biosim explore` draws each case this
/// way; only a failing case's shrink needs the tree ([`case`]). Building the trees (a boxed tree
/// per part, an `Arc` per transition) was a tenth of a case's time.
pub fn draw_case(
    space: &Space,
    arms: &[(u32, Kind)],
    steps: usize,
    runner: &mut TestRunner,
) -> Vec<Transition> {
    let b = Bounds::new(space, arms);
    let len: usize = proptest::num::sample_uniform_incl(runner, 1, steps.max(1));
    (0..len)
        .map(|_| {
            let arm = below(runner, b.arm);
            let cpu = below(runner, b.cpu);
            let ctx = below(runner, 4);
            let need = below(runner, b.need);
            let up: bool = runner.rng().random();
            let fail = below(runner, b.fail);
            let state: i32 = proptest::num::sample_uniform_incl(runner, 0, CPUHP_ONLINE.0);
            let op = below(runner, 3);
            let block = below(runner, b.block);
            let fill: u8 = runner.rng().random();
            build(
                space,
                arms,
                Draw {
                    arm,
                    cpu,
                    ctx,
                    need,
                    up,
                    fail,
                    state,
                    op,
                    block,
                    fill,
                },
            )
        })
        .collect()
}

/// One transition on `space`'s machine (unboxed: the element strategy of [`case`]).
pub fn transition_strategy(space: &Space) -> impl Strategy<Value = Transition> + Clone {
    let space = *space;
    let arms = arms(&space);
    let b = Bounds::new(&space, &arms);
    // Drawn in this order; [`draw_case`] follows it.
    let parts = (
        (0..b.arm, 0..b.cpu, 0..4u32, 0..b.need),
        (
            any::<bool>(),
            0..b.fail,
            0..=CPUHP_ONLINE.0,
            0..3u32,
            0..b.block,
            any::<u8>(),
        ),
    );
    parts.prop_map(
        move |((arm, cpu, ctx, need), (up, fail, state, op, block, fill))| {
            build(
                &space,
                &arms,
                Draw {
                    arm,
                    cpu,
                    ctx,
                    need,
                    up,
                    fail,
                    state,
                    op,
                    block,
                    fill,
                },
            )
        },
    )
}

/// One transition on `space`'s machine.
pub fn transition(space: &Space) -> BoxedStrategy<Transition> {
    transition_strategy(space).boxed()
}

/// A case: 1 to `steps` transitions.
pub fn case(space: &Space, steps: usize) -> BoxedStrategy<Vec<Transition>> {
    proptest::collection::vec(transition_strategy(space), 1..=steps.max(1)).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{RngAlgorithm, TestRng, TestRunner};

    fn draw(space: &Space, n: usize) -> Vec<Transition> {
        let mut runner = TestRunner::new_with_rng(
            proptest::test_runner::Config::default(),
            TestRng::from_seed(RngAlgorithm::XorShift, &[7; 16]),
        );
        let s = transition(space);
        (0..n)
            .map(|_| s.new_tree(&mut runner).unwrap().current())
            .collect()
    }

    /// Every kind of transition is drawn, on every CPU, with failures at many states; v5 draws no
    /// `bio_complete_in_task()` bio; the loop arms only with a loop device.
    #[test]
    fn every_kind_is_drawn_and_only_where_it_exists() {
        let space = Space {
            nr_cpus: 3,
            dynamic_helper: true,
            loop_blocks: None,
            inject: false,
            lower: None,
        };
        let ts = draw(&space, 5000);
        let kinds: std::collections::BTreeSet<&str> = ts
            .iter()
            .map(|t| t.to_scenario_line().split(' ').next().unwrap().to_owned())
            .map(|w| match w.as_str() {
                "complete" => "complete",
                "worker" => "worker",
                "tick" => "tick",
                "cpu_down" => "cpu_down",
                "cpu_up" => "cpu_up",
                "step" => "step",
                "need_resched" => "need_resched",
                "fail" => "fail",
                "target" => "target",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds.len(), 9, "{kinds:?}");
        assert!(!kinds.contains("other"), "{kinds:?}");
        let fails: std::collections::BTreeSet<i32> = ts
            .iter()
            .filter_map(|t| match t {
                Transition::Hotplug {
                    fail_at: Some(s), ..
                } => Some(*s),
                _ => None,
            })
            .collect();
        assert!(fails.len() > 20, "{fails:?}");
        assert!(ts.iter().all(|t| !matches!(t, Transition::Complete { cpu, .. } | Transition::RunWorker { cpu } if *cpu >= 3)));
        let v5 = draw(
            &Space {
                dynamic_helper: false,
                ..space
            },
            2000,
        );
        assert!(!v5.iter().any(|t| matches!(
            t,
            Transition::Complete {
                need: Need::Dynamic,
                ..
            }
        )));
        assert!(ts.iter().any(|t| matches!(
            t,
            Transition::Complete {
                need: Need::Dynamic,
                ..
            }
        )));
        assert!(!ts
            .iter()
            .any(|t| matches!(t, Transition::LoopIo { .. } | Transition::LoopWorker { .. })));
        let lp = draw(
            &Space {
                loop_blocks: Some(4),
                ..space
            },
            2000,
        );
        assert!(lp
            .iter()
            .any(|t| matches!(t, Transition::LoopWorker { .. })));
        assert!(lp
            .iter()
            .any(|t| matches!(t, Transition::LoopIo { block, .. } if *block == 3)));
    }
}
