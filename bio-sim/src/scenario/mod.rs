//! Scenario files: a machine and a sequence of transitions as plain text, so a counterexample is a
//! file a reviewer can run (`biosim run FILE`) and read, with its kernel-style trace.
//!
//! ```text
//! # finding 1 on v6: a hotplug rollback strands a deferred bio
//! variant v6
//! cpus 2
//! cpu_down 1 fail=187        # hotplug/fail at workqueue:online
//! complete 1 hardirq flag    # a BIO_COMPLETE_IN_TASK bio completes on CPU1
//! settle
//! expect stranded
//! ```
//!
//! Header lines (before the first transition): `variant NAME`, `knob NAME=VALUE`, `cpus N`,
//! `online N`, `preempt MODEL`, `preempt_count y|n`, `preempt_rcu y|n`, `hz N`, `seed N`,
//! `rescuer pool|unbound`. Transitions: `complete CPU hardirq|softirq|atomic|task plain|flag|dynamic` (all three words required),
//! `worker CPU`, `tick`, `cpu_down CPU [fail=STATE]`, `cpu_up CPU [fail=STATE]`, `step`,
//! `need_resched CPU`. Then `settle [STEPS]` (also implied at the end) and any number of
//! `expect clean` / `expect INVARIANT` lines, where INVARIANT is one of `once`, `task`,
//! `stranded`, `off-cpu`, `hotplug-context`, `bug`, `warn`, `sleep-in-atomic`,
//! `invalid-wait-context`, `no-quiescence`, `dropbehind`, `data`.
//!
//! A loop device (`drivers/block/loop.c`): header `loop base|v5-no-hint|v4|v5
//! sparse|prealloc|refusing|blockdev [offset=BYTES]` and `loop_knob NAME=VALUE`; transitions
//! `io CPU read|write|discard BLOCK [fill=BYTE]` and `loop_worker CPU`. At the end every block
//! written is read back through the device and compared (`expect data` for a mismatch).

use crate::machine::loop_rig::{BackingKind, LoopOp, LoopSetup};
use crate::machine::oracle::{Invariant, Need, Violation};
use crate::machine::sim::{CompletionContext, Sim, SimConfig, SimError};
use crate::machine::transition::Transition;
use bio_core::block::complete_in_task::Variant;
use bio_core::drivers::block::loop_drv::LoopVariant;
use bio_core::kernel::{PreemptModel, ReportKind};
use bio_core::workqueue::RescuerAffinity;
use std::fmt;
use std::path::Path;

/// A parse or validation error, naming the file, the line and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {message}", if *line > 0 { format!(":{line}") } else { String::new() })]
pub struct ScenarioError {
    /// The file (or `<string>`).
    pub file: String,
    /// The 1-based line (0 for the file as a whole).
    pub line: usize,
    /// What was wrong.
    pub message: String,
}

/// What a scenario expects at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expectation {
    /// No violation at all.
    Clean,
    /// At least one violation of this invariant.
    Violates(Invariant),
}

/// A parsed scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The machine.
    pub config: SimConfig,
    /// The transitions, with their line numbers.
    pub transitions: Vec<(usize, Transition)>,
    /// The step budget of the final settle.
    pub settle: u64,
    /// The expectations.
    pub expect: Vec<(usize, Expectation)>,
    /// The loop device, if the scenario has one (`loop` header).
    pub loop_dev: Option<LoopSetup>,
}

/// The outcome of running a scenario.
#[derive(Debug)]
pub struct ScenarioRun {
    /// The kernel-style trace.
    pub trace: String,
    /// Every violation found.
    pub violations: Vec<Violation>,
    /// Expectations that did not hold, as messages naming their line.
    pub failed_expectations: Vec<String>,
}

fn invariant_name(s: &str) -> Option<Invariant> {
    Some(match s {
        "once" => Invariant::EndIoOnce,
        "task" => Invariant::TaskContext,
        "stranded" => Invariant::Stranded,
        "off-cpu" => Invariant::WorkOffCpu,
        "hotplug-context" => Invariant::HotplugContext,
        "bug" => Invariant::KernelReport(ReportKind::Bug),
        "warn" => Invariant::KernelReport(ReportKind::Warn),
        "sleep-in-atomic" => Invariant::KernelReport(ReportKind::SleepInAtomic),
        "invalid-wait-context" => Invariant::KernelReport(ReportKind::InvalidWaitContext),
        "no-quiescence" => Invariant::NoQuiescence,
        "dropbehind" => Invariant::DropbehindCached,
        "data" => Invariant::DataMismatch,
        _ => return None,
    })
}

fn yes_no(v: &str) -> Option<bool> {
    match v {
        "y" | "yes" | "true" | "1" => Some(true),
        "n" | "no" | "false" | "0" => Some(false),
        _ => None,
    }
}

impl Scenario {
    /// Parses scenario text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Self, ScenarioError> {
        let mut config = SimConfig {
            trace: true,
            seed: 1,
            ..SimConfig::default()
        };
        let (mut preempt, mut preempt_count, mut preempt_rcu, mut hz) = (None, None, None, None);
        let mut online = None;
        let mut loop_dev: Option<LoopSetup> = None;
        let mut transitions = Vec::new();
        let mut settle = 5_000;
        let mut settled = false;
        let mut expect = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let err = |message: String| ScenarioError {
                file: file.to_owned(),
                line,
                message,
            };
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let words: Vec<&str> = content.split_whitespace().collect();
            let arg = |n: usize, what: &str| -> Result<&str, ScenarioError> {
                words
                    .get(n)
                    .copied()
                    .ok_or_else(|| err(format!("`{}` needs {what}", words[0])))
            };
            let num = |n: usize, what: &str| -> Result<u64, ScenarioError> {
                let w = arg(n, what)?;
                w.parse().map_err(|_| {
                    err(format!(
                        "`{}`: {what} must be a number, got `{w}`",
                        words[0]
                    ))
                })
            };
            let header = transitions.is_empty() && !settled;
            let header_only = |what: &str| -> Result<(), ScenarioError> {
                if header {
                    Ok(())
                } else {
                    Err(err(format!(
                        "`{what}` must come before the first transition"
                    )))
                }
            };
            let cpu = |n: usize| -> Result<u32, ScenarioError> {
                let c = num(n, "a CPU number")?;
                let nr = u64::from(config.nr_cpus);
                if c >= nr {
                    return Err(err(format!(
                        "CPU{c} does not exist (the machine has {nr} CPUs: 0..{})",
                        nr - 1
                    )));
                }
                Ok(c as u32)
            };
            if settled && !matches!(words[0], "expect") {
                return Err(err(format!(
                    "`{}` after `settle`: only `expect` lines may follow",
                    words[0]
                )));
            }
            match words[0] {
                "variant" => {
                    header_only("variant")?;
                    let name = arg(1, "a variant name")?;
                    config.variant = Variant::by_name(name)
                        .ok_or_else(|| err(format!("unknown variant `{name}` (expected v5, v6, v6-review or v7)")))?;
                }
                "knob" => {
                    header_only("knob")?;
                    let kv = arg(1, "NAME=VALUE")?;
                    let (k, v) = kv.split_once('=').ok_or_else(|| err(format!("knob `{kv}`: expected NAME=VALUE")))?;
                    config.variant.set_knob(k, v).map_err(err)?;
                    config.variant.name = "custom";
                }
                "cpus" => {
                    header_only("cpus")?;
                    let n = num(1, "a CPU count")?;
                    if !(1..=64).contains(&n) {
                        return Err(err(format!("cpus {n}: biosim scenarios take 1 to 64 CPUs")));
                    }
                    config.nr_cpus = n as u32;
                    config.online = config.nr_cpus;
                }
                "online" => {
                    header_only("online")?;
                    online = Some((num(1, "a CPU count")?, line));
                }
                "preempt" => {
                    header_only("preempt")?;
                    let m = arg(1, "a preemption model")?;
                    preempt = Some(m.parse::<PreemptModel>().map_err(|e| err(e.to_string()))?);
                }
                "preempt_count" | "preempt_rcu" => {
                    header_only(words[0])?;
                    let v = arg(1, "y or n")?;
                    let b = yes_no(v).ok_or_else(|| err(format!("`{}`: expected y or n, got `{v}`", words[0])))?;
                    if words[0] == "preempt_count" { preempt_count = Some(b) } else { preempt_rcu = Some(b) }
                }
                "hz" => {
                    header_only("hz")?;
                    let h = num(1, "a tick rate")?;
                    // Out-of-range values must not wrap into a valid one (`hz 4294967546` is not 250).
                    hz = Some(u32::try_from(h).map_err(|_| {
                        err(format!("unsupported CONFIG_HZ={h} (kernel/Kconfig.hz offers 100, 250, 300 or 1000)"))
                    })?);
                }
                "seed" => {
                    header_only("seed")?;
                    config.seed = num(1, "a seed")?;
                }
                "rescuer" => {
                    header_only("rescuer")?;
                    config.rescuer = match arg(1, "pool or unbound")? {
                        "pool" => RescuerAffinity::PoolCpu,
                        "unbound" => RescuerAffinity::Unbound,
                        w => return Err(err(format!("rescuer: expected pool or unbound, got `{w}`"))),
                    };
                }
                "loop" => {
                    header_only("loop")?;
                    let name = arg(1, "a loop version (base, v5-no-hint, v4, v5)")?;
                    let variant = LoopVariant::by_name(name).ok_or_else(|| {
                        err(format!("unknown loop version `{name}` (expected base, v5-no-hint, v4 or v5)"))
                    })?;
                    let kind = arg(2, "a backing: sparse, prealloc, refusing or blockdev")?;
                    let backing = BackingKind::parse(kind).ok_or_else(|| {
                        err(format!("loop: unknown backing `{kind}` (expected sparse, prealloc, refusing or blockdev)"))
                    })?;
                    let mut offset = 0;
                    for w in &words[3..] {
                        let v = w.strip_prefix("offset=").ok_or_else(|| err(format!("loop: unexpected `{w}` (expected offset=BYTES)")))?;
                        offset = v.parse().map_err(|_| err(format!("offset={v}: a byte count is expected")))?;
                    }
                    let setup = LoopSetup { variant, backing, offset };
                    crate::machine::loop_rig::validate(&setup).map_err(err)?;
                    loop_dev = Some(setup);
                }
                "loop_knob" => {
                    header_only("loop_knob")?;
                    let Some(setup) = loop_dev.as_mut() else {
                        return Err(err("`loop_knob` needs a `loop` line before it".to_owned()));
                    };
                    let kv = arg(1, "NAME=VALUE")?;
                    let (k, v) = kv.split_once('=').ok_or_else(|| err(format!("loop_knob `{kv}`: expected NAME=VALUE")))?;
                    let b = yes_no(v).ok_or_else(|| err(format!("loop_knob {k}: expected true or false, got `{v}`")))?;
                    let var = &mut setup.variant;
                    match k {
                        "nowait_first" => var.nowait_first = b,
                        "hint" => var.hint = b,
                        "check_fmode_nowait" => var.check_fmode_nowait = b,
                        "eopnotsupp_falls_back" => var.eopnotsupp_falls_back = b,
                        "nowait_completes_on_eopnotsupp" => var.nowait_completes_on_eopnotsupp = b,
                        "nowait_adds_lo_offset" => var.nowait_adds_lo_offset = b,
                        _ => return Err(err(format!("unknown loop_knob `{k}` (known: nowait_first, hint, check_fmode_nowait, eopnotsupp_falls_back, nowait_completes_on_eopnotsupp, nowait_adds_lo_offset)"))),
                    }
                    var.name = "custom";
                }
                "io" => {
                    let Some(setup) = loop_dev else {
                        return Err(err("`io` needs a `loop` header line".to_owned()));
                    };
                    let c = cpu(1)?;
                    let o = arg(2, "read, write or discard")?;
                    let op = LoopOp::parse(o).ok_or_else(|| err(format!("io: unknown operation `{o}` (expected read, write or discard)")))?;
                    let block = num(3, "a block number")?;
                    if block >= setup.blocks() {
                        return Err(err(format!("io: block {block} is beyond loop0 ({} blocks of 4 KiB)", setup.blocks())));
                    }
                    let mut fill = 0x5a;
                    for w in &words[4..] {
                        let v = w.strip_prefix("fill=").ok_or_else(|| err(format!("io: unexpected `{w}` (expected fill=BYTE)")))?;
                        fill = v.parse().map_err(|_| err(format!("fill={v}: a byte 0..=255 is expected")))?;
                    }
                    transitions.push((line, Transition::LoopIo { cpu: c, op, block: block as u32, fill }));
                }
                "loop_worker" => {
                    if loop_dev.is_none() {
                        return Err(err("`loop_worker` needs a `loop` header line".to_owned()));
                    }
                    transitions.push((line, Transition::LoopWorker { cpu: cpu(1)? }));
                }
                "complete" => {
                    let c = cpu(1)?;
                    let ctx = match arg(2, "a context")? {
                        "hardirq" => CompletionContext::Hardirq,
                        "softirq" => CompletionContext::Softirq,
                        "atomic" => CompletionContext::AtomicTask,
                        "task" => CompletionContext::Task,
                        w => return Err(err(format!("complete: unknown context `{w}` (expected hardirq, softirq, atomic or task)"))),
                    };
                    let need = match arg(3, "a kind: plain, flag or dynamic")? {
                        "plain" => Need::Any,
                        "flag" => Need::Flag,
                        "dynamic" => Need::Dynamic,
                        w => return Err(err(format!("complete: unknown kind `{w}` (expected plain, flag or dynamic)"))),
                    };
                    transitions.push((line, Transition::Complete { cpu: c, ctx, need }));
                }
                "worker" => transitions.push((line, Transition::RunWorker { cpu: cpu(1)? })),
                "tick" => transitions.push((line, Transition::Tick)),
                "step" => transitions.push((line, Transition::HotplugStep)),
                "need_resched" => transitions.push((line, Transition::NeedResched { cpu: cpu(1)? })),
                "cpu_down" | "cpu_up" => {
                    let c = cpu(1)?;
                    let mut fail_at = None;
                    for w in &words[2..] {
                        let v = w.strip_prefix("fail=").ok_or_else(|| err(format!("`{}`: unexpected `{w}` (expected fail=STATE)", words[0])))?;
                        let s: i32 = v.parse().map_err(|_| err(format!("fail={v}: a state number is expected")))?;
                        if !(0..=hotplug::CPUHP_ONLINE.0).contains(&s) {
                            return Err(err(format!("fail={s}: out of range 0..={}", hotplug::CPUHP_ONLINE.0)));
                        }
                        fail_at = Some(s);
                    }
                    transitions.push((line, Transition::Hotplug { cpu: c, up: words[0] == "cpu_up", fail_at }));
                }
                "settle" => {
                    if let Some(_w) = words.get(1) {
                        settle = num(1, "a step budget")?;
                    }
                    settled = true;
                }
                "expect" => {
                    let w = arg(1, "clean or an invariant")?;
                    let e = if w == "clean" {
                        Expectation::Clean
                    } else {
                        Expectation::Violates(invariant_name(w).ok_or_else(|| {
                            err(format!("expect: unknown invariant `{w}` (expected clean, once, task, stranded, off-cpu, hotplug-context, bug, warn, sleep-in-atomic, invalid-wait-context, no-quiescence, dropbehind, data)"))
                        })?)
                    };
                    expect.push((line, e));
                }
                other => {
                    return Err(err(format!(
                        "unknown line `{other}` (expected a header: variant, knob, cpus, online, preempt, preempt_count, preempt_rcu, hz, seed, rescuer, loop, loop_knob; a transition: complete, worker, tick, cpu_down, cpu_up, step, need_resched, io, loop_worker; or settle / expect)"
                    )))
                }
            }
        }
        if let Some((o, line)) = online {
            if o == 0 || o > u64::from(config.nr_cpus) {
                return Err(ScenarioError {
                    file: file.to_owned(),
                    line,
                    message: format!(
                        "online {o}: must be 1..={} (the machine's CPU count)",
                        config.nr_cpus
                    ),
                });
            }
            config.online = o as u32;
        }
        let model = preempt.unwrap_or(config.kernel.preempt);
        let mut k = if preempt_count == Some(false) {
            bio_core::KernelConfig::without_preempt_count(model)
        } else {
            bio_core::KernelConfig::for_model(model)
        };
        if let Some(r) = preempt_rcu {
            k.preempt_rcu = r;
        }
        if let Some(h) = hz {
            k.hz = h;
        }
        k.validate().map_err(|e| ScenarioError {
            file: file.to_owned(),
            line: 0,
            message: e.to_string(),
        })?;
        config.kernel = k;
        Ok(Scenario {
            config,
            transitions,
            settle,
            expect,
            loop_dev,
        })
    }

    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: file.clone(),
            line: 0,
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(&text, &file)
    }

    /// Runs it: builds the machine, applies each transition with the oracle checked after it,
    /// settles, and checks the expectations.
    pub fn run(&self) -> Result<ScenarioRun, SimError> {
        let s = Sim::new(self.config)?;
        if let Some(setup) = self.loop_dev {
            s.attach_loop(setup);
        }
        for (_, t) in &self.transitions {
            s.apply(t);
        }
        let mut violations = s.settle(self.settle);
        violations.extend(s.verify_devices(self.settle));
        let mut failed = Vec::new();
        for (line, e) in &self.expect {
            let ok = match e {
                Expectation::Clean => violations.is_empty(),
                Expectation::Violates(inv) => violations.iter().any(|v| v.invariant == *inv),
            };
            if !ok {
                failed.push(format!(
                    "line {line}: expected {e}, got {}",
                    if violations.is_empty() {
                        "no violation".to_owned()
                    } else {
                        violations
                            .iter()
                            .map(|v| v.invariant.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ));
            }
        }
        Ok(ScenarioRun {
            trace: s.trace(),
            violations,
            failed_expectations: failed,
        })
    }
}

impl fmt::Display for Expectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expectation::Clean => f.write_str("clean"),
            Expectation::Violates(i) => write!(f, "a violation of [{i}]"),
        }
    }
}

impl Transition {
    /// The transition as a scenario-file line.
    pub fn to_scenario_line(&self) -> String {
        match *self {
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_are_named_with_their_line() {
        let e = Scenario::parse("variant v6\ncpus 2\ncomplet 1 hardirq\n", "t.scn").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(
            e.to_string().starts_with("t.scn:3: unknown line `complet`"),
            "{e}"
        );
        let e = Scenario::parse("cpus 2\ncomplete 5 hardirq flag\n", "t.scn").unwrap_err();
        assert!(e.message.contains("CPU5 does not exist"), "{e}");
        let e = Scenario::parse("complete 0 hardirq flag\nvariant v6\n", "t.scn").unwrap_err();
        assert!(e.message.contains("before the first transition"), "{e}");
        let e = Scenario::parse("complete 0 hardirq\n", "t.scn").unwrap_err();
        assert!(e.message.contains("needs a kind"), "{e}");
        let e = Scenario::parse("preempt full\npreempt_count n\n", "t.scn").unwrap_err();
        assert!(
            e.message
                .contains("CONFIG_PREEMPTION selects CONFIG_PREEMPT_COUNT"),
            "{e}"
        );
        let e = Scenario::parse("cpu_down 1 fail=999\n", "t.scn").unwrap_err();
        assert!(e.message.contains("out of range"), "{e}");
        let e = Scenario::parse("knob bogus=1\n", "t.scn").unwrap_err();
        assert!(e.message.contains("unknown knob"), "{e}");
        let e = Scenario::parse("settle\ntick\n", "t.scn").unwrap_err();
        assert!(e.message.contains("after `settle`"), "{e}");
    }

    #[test]
    fn loop_lines_round_trip_and_need_a_loop_header() {
        let ts = [
            Transition::LoopIo {
                cpu: 1,
                op: LoopOp::Write,
                block: 7,
                fill: 42,
            },
            Transition::LoopIo {
                cpu: 0,
                op: LoopOp::Discard,
                block: 7,
                fill: 0x5a,
            },
            Transition::LoopWorker { cpu: 1 },
        ];
        let body: String = ts.iter().map(|t| t.to_scenario_line() + "\n").collect();
        let s = Scenario::parse(&format!("loop v5 sparse offset=4096\n{body}"), "t").unwrap();
        assert_eq!(
            s.transitions.iter().map(|(_, t)| *t).collect::<Vec<_>>(),
            ts
        );
        assert_eq!(s.loop_dev.map(|l| l.blocks()), Some(255));
        let e = Scenario::parse(&body, "t").unwrap_err();
        assert!(
            e.to_string()
                .contains("t:1: `io` needs a `loop` header line"),
            "{e}"
        );
        let e = Scenario::parse("loop v5 sparse\nio 0 write 256\n", "t").unwrap_err();
        assert!(
            e.to_string()
                .contains("block 256 is beyond loop0 (256 blocks"),
            "{e}"
        );
        let e = Scenario::parse("loop v5 sparse offset=100\n", "t").unwrap_err();
        assert!(e.to_string().contains("multiple of 512"), "{e}");
    }

    #[test]
    fn lines_round_trip() {
        let ts = [
            Transition::Complete {
                cpu: 1,
                ctx: CompletionContext::Softirq,
                need: Need::Dynamic,
            },
            Transition::RunWorker { cpu: 0 },
            Transition::Tick,
            Transition::Hotplug {
                cpu: 1,
                up: false,
                fail_at: Some(187),
            },
            Transition::Hotplug {
                cpu: 1,
                up: true,
                fail_at: None,
            },
            Transition::HotplugStep,
            Transition::NeedResched { cpu: 1 },
        ];
        let text: String = ts.iter().map(|t| t.to_scenario_line() + "\n").collect();
        let s = Scenario::parse(&text, "t").unwrap();
        assert_eq!(
            s.transitions.iter().map(|(_, t)| *t).collect::<Vec<_>>(),
            ts
        );
    }

    #[test]
    fn the_finding_1_counterexample_runs_from_text() {
        let text = "variant v6\ncpus 2\ncpu_down 1 fail=187\ncomplete 1 hardirq flag\nsettle\nexpect stranded\n";
        let run = Scenario::parse(text, "f1").unwrap().run().unwrap();
        assert!(
            run.failed_expectations.is_empty(),
            "{:?}",
            run.failed_expectations
        );
        let text = text
            .replace("v6", "v7")
            .replace("expect stranded", "expect clean");
        let run = Scenario::parse(&text, "f1").unwrap().run().unwrap();
        assert!(
            run.failed_expectations.is_empty(),
            "{:?}",
            run.failed_expectations
        );
    }
}
