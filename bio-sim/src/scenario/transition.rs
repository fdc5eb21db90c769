//! The transition-line parser (`complete`, `worker`, `tick`, `cpu_down`, `cpu_up`, `step`,
//! `fail`, `target`, `need_resched`, `io`, `loop_worker`, `nullb_timer`, `fail_alloc`, `fail_io`,
//! `plug`, `unplug`, `freeze_backing`, `thaw_backing`, `freeze_queue`; `locks` is in `locks.rs`)
//! and its inverse, [`Transition::to_scenario_line`].

use super::line::{Line, ScenarioError};
use crate::machine::loop_rig::{LoopOp, LoopSetup};
use crate::machine::oracle::Need;
use crate::machine::sim::CompletionContext;
use crate::machine::transition::Transition;
use bio_core::kernel::fault_inject::ALLOC_SITES;

/// Parses `l` if it is a transition line (`Ok(None)` if it is not) on a machine of `nr_cpus`
/// CPUs with the loop device `loop_dev`.
pub(super) fn parse_transition(
    l: &Line<'_>,
    nr_cpus: u32,
    loop_dev: Option<LoopSetup>,
) -> Result<Option<Transition>, ScenarioError> {
    Ok(Some(match l.keyword() {
        "io" => io_line(l, nr_cpus, loop_dev)?,
        "loop_worker" => {
            if loop_dev.is_none() {
                return Err(l.err("`loop_worker` needs a `loop` header line".to_owned()));
            }
            let cpu = l.cpu(1, nr_cpus)?;
            l.done(2, "one CPU")?;
            Transition::LoopWorker { cpu }
        }
        "nullb_timer" => {
            if loop_dev.is_none_or(|d| d.nullb.is_none()) {
                return Err(l.err("`nullb_timer` needs a `null_blk` header line".to_owned()));
            }
            l.done(1, "nothing")?;
            Transition::NullbTimer
        }
        "fail_alloc" => {
            let w = l.arg(1, "an allocation site")?;
            let site = ALLOC_SITES
                .iter()
                .copied()
                .find(|s| *s == w)
                .ok_or_else(|| {
                    l.err_at(
                        1,
                        format!(
                            "fail_alloc: unknown allocation site `{w}` (known sites: {})",
                            ALLOC_SITES.join(", ")
                        ),
                    )
                })?;
            l.done(2, "one allocation site")?;
            Transition::FailAlloc { site }
        }
        "fail_io" => {
            let Some(setup) = loop_dev else {
                return Err(l.err("`fail_io` needs a `loop` or `null_blk` header line".to_owned()));
            };
            let w = l.arg(1, "a device of the scenario")?;
            let devs = setup.disk_names();
            let dev = devs.iter().copied().find(|d| *d == w).ok_or_else(|| {
                l.err_at(
                    1,
                    format!(
                        "fail_io: `{w}` is not a device of this scenario (its devices: {})",
                        devs.join(", ")
                    ),
                )
            })?;
            l.done(2, "one device")?;
            Transition::FailIo { dev }
        }
        "plug" | "unplug" => {
            if loop_dev.is_none() {
                return Err(l.err(format!(
                    "`{}` needs a `loop` or `null_blk` header line",
                    l.keyword()
                )));
            }
            let cpu = l.cpu(1, nr_cpus)?;
            l.done(2, "one CPU")?;
            if l.keyword() == "plug" {
                Transition::Plug { cpu }
            } else {
                Transition::Unplug { cpu }
            }
        }
        "freeze_queue" => {
            if loop_dev.is_none_or(|d| d.nullb.is_some()) {
                return Err(l.err("`freeze_queue` needs a `loop` header line".to_owned()));
            }
            l.done(1, "nothing")?;
            Transition::FreezeLoopQueue
        }
        "freeze_backing" | "thaw_backing" => {
            if loop_dev.is_none_or(|d| d.nullb.is_some()) {
                return Err(l.err(format!("`{}` needs a `loop` header line", l.keyword())));
            }
            l.done(1, "nothing")?;
            if l.keyword() == "freeze_backing" {
                Transition::FreezeBacking
            } else {
                Transition::ThawBacking
            }
        }
        "complete" => complete_line(l, nr_cpus)?,
        "locks" => super::locks::locks_line(l, nr_cpus)?,
        "worker" => {
            let cpu = l.cpu(1, nr_cpus)?;
            l.done(
                2,
                "one CPU: one item of that CPU's pool; write a line per run",
            )?;
            Transition::RunWorker { cpu }
        }
        "tick" => {
            l.done(1, "nothing: one jiffy; write a line per tick")?;
            Transition::Tick
        }
        "step" => {
            l.done(1, "nothing: one hotplug step; write a line per step")?;
            Transition::HotplugStep
        }
        "need_resched" => {
            let cpu = l.cpu(1, nr_cpus)?;
            l.done(2, "one CPU")?;
            Transition::NeedResched { cpu }
        }
        "cpu_down" | "cpu_up" => hotplug_line(l, nr_cpus)?,
        "fail" => {
            let cpu = l.cpu(1, nr_cpus)?;
            let state = state_arg(l, 2, -1)?;
            l.done(3, "a CPU and a state (-1 disarms)")?;
            Transition::Fail { cpu, state }
        }
        "target" => {
            let cpu = l.cpu(1, nr_cpus)?;
            let state = state_arg(l, 2, 0)?;
            l.done(3, "a CPU and a state")?;
            Transition::Target { cpu, state }
        }
        _ => return Ok(None),
    }))
}

/// `io CPU read|write|discard BLOCK [fill=BYTE]`.
fn io_line(
    l: &Line<'_>,
    nr_cpus: u32,
    loop_dev: Option<LoopSetup>,
) -> Result<Transition, ScenarioError> {
    let Some(setup) = loop_dev else {
        return Err(l.err("`io` needs a `loop` or `null_blk` header line".to_owned()));
    };
    let cpu = l.cpu(1, nr_cpus)?;
    let o = l.arg(2, "read, write or discard")?;
    let op = LoopOp::parse(o).ok_or_else(|| {
        l.err_at(
            2,
            format!("io: unknown operation `{o}` (expected read, write or discard)"),
        )
    })?;
    let block = l.num(3, "a block number")?;
    if block >= setup.blocks() {
        return Err(l.err_at(
            3,
            format!(
                "io: block {block} is beyond {} ({} blocks of 4 KiB)",
                setup.disk_name(),
                setup.blocks()
            ),
        ));
    }
    let mut fill = 0x5a;
    if op == LoopOp::Write {
        if let Some(w) = l.words.get(4) {
            let v = w
                .strip_prefix("fill=")
                .ok_or_else(|| l.err_at(4, format!("io: unexpected `{w}` (expected fill=BYTE)")))?;
            fill = v
                .parse()
                .map_err(|_| l.err_at(4, format!("`fill={v}`: a byte 0..=255 is expected")))?;
        }
        l.done(5, "a CPU, an operation, a block and at most one fill=BYTE")?;
    } else if let Some(w) = l.words.get(4) {
        return Err(l.err_at(
            4,
            format!("io {op}: unexpected `{w}`: expected the end of the line (only a write takes fill=BYTE)"),
        ));
    }
    Ok(Transition::LoopIo {
        cpu,
        op,
        block: block as u32,
        fill,
    })
}

/// `complete CPU hardirq|softirq|atomic|task plain|flag|dynamic`.
fn complete_line(l: &Line<'_>, nr_cpus: u32) -> Result<Transition, ScenarioError> {
    let cpu = l.cpu(1, nr_cpus)?;
    let ctx = match l.arg(2, "a context: hardirq, softirq, atomic or task")? {
        "hardirq" => CompletionContext::Hardirq,
        "softirq" => CompletionContext::Softirq,
        "atomic" => CompletionContext::AtomicTask,
        "task" => CompletionContext::Task,
        w => {
            return Err(l.err_at(
                2,
                format!(
                    "complete: unknown context `{w}` (expected hardirq, softirq, atomic or task)"
                ),
            ))
        }
    };
    let need = match l.arg(3, "a kind: plain, flag or dynamic")? {
        "plain" => Need::Any,
        "flag" => Need::Flag,
        "dynamic" => Need::Dynamic,
        w => {
            return Err(l.err_at(
                3,
                format!("complete: unknown kind `{w}` (expected plain, flag or dynamic)"),
            ))
        }
    };
    l.done(4, "a CPU, a context and a kind")?;
    Ok(Transition::Complete { cpu, ctx, need })
}

/// Word `n` of `fail CPU STATE` / `target CPU STATE`: a state number in `min..=CPUHP_ONLINE`
/// (`fail` takes -1, which disarms). Whether sysfs takes it at that moment is decided at run time.
fn state_arg(l: &Line<'_>, n: usize, min: i32) -> Result<i32, ScenarioError> {
    let kw = l.keyword();
    let what = if min < 0 {
        "a state number (-1 disarms; `biosim states` lists them)"
    } else {
        "a state number (`biosim states` lists them)"
    };
    let w = l.arg(n, what)?;
    let s: i32 = w
        .parse()
        .map_err(|_| l.err_at(n, format!("`{kw}`: {what} is expected, got `{w}`")))?;
    if !(min..=hotplug::CPUHP_ONLINE.0).contains(&s) {
        return Err(l.err_at(
            n,
            format!(
                "`{kw}`: state {s} is out of range {min}..={}",
                hotplug::CPUHP_ONLINE.0
            ),
        ));
    }
    Ok(s)
}

/// `cpu_down CPU [fail=STATE]` / `cpu_up CPU [fail=STATE]`.
fn hotplug_line(l: &Line<'_>, nr_cpus: u32) -> Result<Transition, ScenarioError> {
    let cpu = l.cpu(1, nr_cpus)?;
    let mut fail_at = None;
    if let Some(w) = l.words.get(2) {
        let v = w.strip_prefix("fail=").ok_or_else(|| {
            l.err_at(
                2,
                format!("`{}`: unexpected `{w}` (expected fail=STATE)", l.keyword()),
            )
        })?;
        let s: i32 = v
            .parse()
            .map_err(|_| l.err_at(2, format!("`fail={v}`: a state number is expected")))?;
        if !(0..=hotplug::CPUHP_ONLINE.0).contains(&s) {
            return Err(l.err_at(
                2,
                format!("fail={s}: out of range 0..={}", hotplug::CPUHP_ONLINE.0),
            ));
        }
        fail_at = Some(s);
    }
    l.done(3, "a CPU and at most one fail=STATE")?;
    Ok(Transition::Hotplug {
        cpu,
        up: l.keyword() == "cpu_up",
        fail_at,
    })
}

impl Transition {
    /// The transition as a scenario-file line.
    pub fn to_scenario_line(&self) -> String {
        match *self {
            Transition::FailAlloc { site } => format!("fail_alloc {site}"),
            Transition::FailIo { dev } => format!("fail_io {dev}"),
            Transition::Plug { cpu } => format!("plug {cpu}"),
            Transition::Unplug { cpu } => format!("unplug {cpu}"),
            Transition::Complete { cpu, ctx, need } => format!(
                "complete {cpu} {} {}",
                match ctx {
                    CompletionContext::Hardirq => "hardirq",
                    CompletionContext::Softirq => "softirq",
                    CompletionContext::AtomicTask => "atomic",
                    CompletionContext::Task => "task",
                },
                match need {
                    Need::Any => "plain",
                    Need::Flag => "flag",
                    Need::Dynamic => "dynamic",
                }
            ),
            Transition::RunWorker { cpu } => format!("worker {cpu}"),
            Transition::Tick => "tick".to_owned(),
            Transition::Hotplug { cpu, up, fail_at } => format!(
                "{} {cpu}{}",
                if up { "cpu_up" } else { "cpu_down" },
                fail_at.map(|s| format!(" fail={s}")).unwrap_or_default()
            ),
            Transition::HotplugStep => "step".to_owned(),
            Transition::Fail { cpu, state } => format!("fail {cpu} {state}"),
            Transition::Target { cpu, state } => format!("target {cpu} {state}"),
            Transition::NeedResched { cpu } => format!("need_resched {cpu}"),
            Transition::LoopIo {
                cpu,
                op,
                block,
                fill,
            } => match op {
                LoopOp::Write => format!("io {cpu} write {block} fill={fill}"),
                _ => format!("io {cpu} {op} {block}"),
            },
            Transition::LoopWorker { cpu } => format!("loop_worker {cpu}"),
            Transition::NullbTimer => "nullb_timer".to_owned(),
            Transition::FreezeBacking => "freeze_backing".to_owned(),
            Transition::ThawBacking => "thaw_backing".to_owned(),
            Transition::FreezeLoopQueue => "freeze_queue".to_owned(),
            Transition::LockSeq { cpu, ctx, steps } => {
                let mut line = format!("locks {cpu} {}", ctx.word());
                for s in steps {
                    line.push_str(&format!(" {s}"));
                }
                line
            }
        }
    }
}
