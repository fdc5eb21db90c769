//! The header-line parser: the machine a scenario runs on (`variant`, `module`, `knob`, `cpus`, `online`,
//! `preempt`, `preempt_count`, `preempt_rcu`, `hz`, `hotplug_state_control`, `prove_locking`, `seed`, `rescuer`,
//! `loop`, `loop_knob`), all before the first transition.

use super::line::{error_at, yes_no, Line, ScenarioError};
use crate::machine::loop_rig::{BackingKind, LoopSetup};
use crate::machine::modules::{customised, parse_module, with_knob};
use crate::machine::sim::SimConfig;
use bio_core::block::complete_in_task::Variant;
use bio_core::drivers::block::loop_drv::{LoopKnob, LoopVariant};
use bio_core::drivers::block::null_blk::NullBlkConfig;
use bio_core::kernel::PreemptModel;
use bio_core::workqueue::RescuerAffinity;

/// The header keywords.
const KEYWORDS: [&str; 16] = [
    "variant",
    "module",
    "knob",
    "cpus",
    "online",
    "preempt",
    "preempt_count",
    "preempt_rcu",
    "hz",
    "hotplug_state_control",
    "prove_locking",
    "seed",
    "rescuer",
    "loop",
    "loop_knob",
    "null_blk",
];

/// The machine as the header lines so far describe it.
#[derive(Debug)]
pub(super) struct Header {
    /// The machine (its kernel config is built by [`Header::finish`]).
    pub config: SimConfig,
    /// The loop device, if a `loop` line made one.
    pub loop_dev: Option<LoopSetup>,
    preempt: Option<PreemptModel>,
    preempt_count: Option<bool>,
    preempt_rcu: Option<bool>,
    hz: Option<u32>,
    /// `hotplug_state_control y|n`: `CONFIG_CPU_HOTPLUG_STATE_CONTROL`.
    hotplug_state_control: Option<bool>,
    /// `prove_locking y|n`: `CONFIG_PROVE_LOCKING` (lockdep).
    prove_locking: Option<bool>,
    online: Option<(u64, usize, usize)>,
    /// The line of the first `knob` line, if any: a `variant` or `module` after it would discard
    /// it.
    knob_line: Option<usize>,
    /// The last line that set part of the kernel config, where a Kconfig error is reported.
    kconfig_line: usize,
    /// The line each header keyword that may be given once was first given on.
    seen: Vec<(&'static str, usize)>,
}

/// The header keywords a second line of would override the first.
const ONCE: [&str; 14] = [
    "variant",
    "module",
    "cpus",
    "online",
    "preempt",
    "preempt_count",
    "preempt_rcu",
    "hz",
    "hotplug_state_control",
    "prove_locking",
    "seed",
    "rescuer",
    "loop",
    "null_blk",
];

impl Header {
    /// The defaults: a traced 2-CPU machine with seed 1, no loop device.
    pub fn new() -> Self {
        Header {
            config: SimConfig {
                trace: true,
                seed: 1,
                ..SimConfig::default()
            },
            loop_dev: None,
            preempt: None,
            preempt_count: None,
            preempt_rcu: None,
            hz: None,
            hotplug_state_control: None,
            prove_locking: None,
            online: None,
            knob_line: None,
            kconfig_line: 0,
            seen: Vec::new(),
        }
    }

    /// Reads `l` if it is a header line (`Ok(false)` if it is not); `in_header` says whether the
    /// first transition is still to come.
    pub fn line(&mut self, l: &Line<'_>, in_header: bool) -> Result<bool, ScenarioError> {
        let kw = l.keyword();
        if !KEYWORDS.contains(&kw) {
            return Ok(false);
        }
        if !in_header {
            return Err(l.err(format!("`{kw}` must come before the first transition")));
        }
        if let Some(c) = l.try_col {
            return Err(l.err_at(
                0,
                format!("`try` (column {c}) may only prefix a transition, not `{kw}`"),
            ));
        }
        if let Some(&once) = ONCE.iter().find(|k| **k == kw) {
            if let Some((_, first)) = self.seen.iter().find(|(k, _)| *k == once) {
                return Err(l.err(format!(
                    "a second `{kw}` line (the first is line {first}): a header line may be given once"
                )));
            }
            self.seen.push((once, l.number));
        }
        match kw {
            "variant" => {
                if let Some((_, m)) = self.seen.iter().find(|(k, _)| *k == "module") {
                    return Err(l.err(format!(
                        "`variant` and the `module` on line {m}: a scenario runs one batcher, give one of them"
                    )));
                }
                if let Some(k) = self.knob_line {
                    return Err(l.err(format!(
                        "`variant` after the `knob` on line {k} would discard it: put `variant` first"
                    )));
                }
                let name = l.arg(1, "a variant name")?;
                self.config.variant = Variant::parse_name(name, &[]).map_err(|e| l.err_at(1, e))?;
                l.done(2, "one variant name")?;
            }
            "module" => {
                // `module NAME` is `variant NAME` for a registered module; one line names the batcher.
                if let Some((_, v)) = self.seen.iter().find(|(k, _)| *k == "variant") {
                    return Err(l.err(format!(
                        "`module` and the `variant` on line {v}: a scenario runs one batcher, give one of them"
                    )));
                }
                if let Some(k) = self.knob_line {
                    return Err(l.err(format!(
                        "`module` after the `knob` on line {k} would discard it: put `module` first"
                    )));
                }
                let name = l.arg(1, "a module name")?;
                self.config.variant = parse_module(name).map_err(|e| l.err_at(1, e))?;
                l.done(2, "one module name")?;
            }
            "knob" => {
                let kv = l.arg(1, "NAME=VALUE")?;
                // Through `Variant::set_knob`: a module takes only gate_reads and fs_flag.
                let variant = with_knob(self.config.variant, kv).map_err(|e| l.err_at(1, e))?;
                l.done(2, "one NAME=VALUE")?;
                self.knob_line.get_or_insert(l.number);
                self.config.variant = customised(variant);
            }
            "cpus" => {
                let n = l.num(1, "a CPU count")?;
                l.done(2, "one CPU count")?;
                if !(1..=64).contains(&n) {
                    return Err(
                        l.err_at(1, format!("cpus {n}: biosim scenarios take 1 to 64 CPUs"))
                    );
                }
                self.config.nr_cpus = n as u32;
                self.config.online = self.config.nr_cpus;
            }
            "online" => {
                self.online = Some((l.num(1, "a CPU count")?, l.number, l.col(1)));
                l.done(2, "one CPU count")?;
            }
            "preempt" => {
                self.kconfig_line = l.number;
                let m = l.arg(1, "a preemption model")?;
                self.preempt = Some(
                    m.parse::<PreemptModel>()
                        .map_err(|e| l.err_at(1, e.to_string()))?,
                );
                l.done(2, "one preemption model")?;
            }
            "preempt_count" | "preempt_rcu" | "hotplug_state_control" | "prove_locking" => {
                self.kconfig_line = l.number;
                let v = l.arg(1, "y or n")?;
                let b = yes_no(v)
                    .ok_or_else(|| l.err_at(1, format!("`{kw}`: expected y or n, got `{v}`")))?;
                l.done(2, "y or n")?;
                match kw {
                    "preempt_count" => self.preempt_count = Some(b),
                    "preempt_rcu" => self.preempt_rcu = Some(b),
                    "prove_locking" => self.prove_locking = Some(b),
                    _ => self.hotplug_state_control = Some(b),
                }
            }
            "hz" => {
                self.kconfig_line = l.number;
                let h = l.num(1, "a tick rate")?;
                l.done(2, "one tick rate")?;
                // Out-of-range values must not wrap into a valid one (`hz 4294967546` is not 250).
                self.hz = Some(u32::try_from(h).map_err(|_| {
                    l.err_at(1, format!("unsupported CONFIG_HZ={h} (kernel/Kconfig.hz offers 100, 250, 300 or 1000)"))
                })?);
            }
            "seed" => {
                self.config.seed = l.num(1, "a seed")?;
                l.done(2, "one seed")?;
            }
            "rescuer" => {
                self.config.rescuer = match l.arg(1, "pool or unbound")? {
                    "pool" => RescuerAffinity::PoolCpu,
                    "unbound" => RescuerAffinity::Unbound,
                    w => {
                        return Err(
                            l.err_at(1, format!("rescuer: expected pool or unbound, got `{w}`"))
                        )
                    }
                };
                l.done(2, "pool or unbound")?;
            }
            "loop" | "null_blk" if self.loop_dev.is_some() => {
                return Err(l.err(
                    "one block device per scenario: a `loop` or a `null_blk` line, not both"
                        .to_owned(),
                ))
            }
            "loop" => self.loop_dev = Some(loop_line(l)?),
            "null_blk" => self.loop_dev = Some(null_blk_line(l)?),
            _ => {
                let Some(setup) = self.loop_dev.as_mut() else {
                    return Err(l.err("`loop_knob` needs a `loop` line before it".to_owned()));
                };
                let knob = LoopKnob::parse_assignment(l.arg(1, "NAME=VALUE")?)
                    .map_err(|e| l.err_at(1, e))?;
                l.done(2, "one NAME=VALUE")?;
                setup.variant = setup.variant.with(knob);
                setup.variant.name = "custom";
            }
        }
        Ok(true)
    }

    /// The machine: `online` checked against the CPU count, the kernel config built from the
    /// preemption lines and validated against the Kconfig rules.
    pub fn finish(self, file: &str) -> Result<(SimConfig, Option<LoopSetup>), ScenarioError> {
        let mut config = self.config;
        if let Some((o, line, column)) = self.online {
            if o == 0 || o > u64::from(config.nr_cpus) {
                return Err(ScenarioError {
                    column,
                    ..error_at(
                        file,
                        line,
                        format!(
                            "online {o}: must be 1..={} (the machine's CPU count)",
                            config.nr_cpus
                        ),
                    )
                });
            }
            config.online = o as u32;
        }
        let model = self.preempt.unwrap_or(config.kernel.preempt);
        let mut k = if self.preempt_count == Some(false) {
            bio_core::KernelConfig::without_preempt_count(model)
        } else {
            bio_core::KernelConfig::for_model(model)
        };
        if let Some(r) = self.preempt_rcu {
            k.preempt_rcu = r;
        }
        if let Some(h) = self.hz {
            k.hz = h;
        }
        if let Some(c) = self.hotplug_state_control {
            k.cpu_hotplug_state_control = c;
        }
        if let Some(p) = self.prove_locking {
            k.prove_locking = p;
        }
        k.validate()
            .map_err(|e| error_at(file, self.kconfig_line, e.to_string()))?;
        config.kernel = k;
        Ok((config, self.loop_dev))
    }
}

/// `null_blk KEY=VALUE ...`: `nullb0` with `modprobe null_blk`'s parameters, by their kernel
/// names ([`NullBlkConfig::parse_param`]); an unknown or repeated key is an error at its word.
fn null_blk_line(l: &Line<'_>) -> Result<LoopSetup, ScenarioError> {
    let mut seen: Vec<&str> = Vec::new();
    let mut cfg = NullBlkConfig::default();
    for (i, kv) in l.words.iter().enumerate().skip(1) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| l.err_at(i, format!("null_blk: `{kv}`: expected KEY=VALUE")))?;
        // `bs`/`blocksize` and `gb`/`size` set one field each.
        let canon = match k {
            "blocksize" => "bs",
            "size" => "gb",
            k => k,
        };
        cfg.parse_param(k, v).map_err(|e| l.err_at(i, e))?;
        if seen.contains(&canon) {
            return Err(l.err_at(i, format!("null_blk parameter `{k}` given twice")));
        }
        seen.push(canon);
    }
    if cfg.queue_mode == bio_core::drivers::block::null_blk::NullQueueMode::Rq {
        return Err(
            l.err("null_blk: legacy IO path is no longer available (queue_mode=1)".to_owned())
        );
    }
    if cfg.hw_queue_depth == 0 {
        return Err(l.err("null_blk: hw_queue_depth=0 leaves no tag".to_owned()));
    }
    Ok(LoopSetup::null_blk(cfg))
}

/// `loop NAME BACKING [offset=BYTES] [nowait=on|off] [start=SECTORS]`: `nowait=off` is a backing
/// file without `FMODE_NOWAIT`; `start=SECTORS` (with `nullb`) backs loop0 with `nullb0p1`, a
/// partition of nullb0 from that sector.
fn loop_line(l: &Line<'_>) -> Result<LoopSetup, ScenarioError> {
    let names = LoopVariant::names().collect::<Vec<_>>().join(", ");
    let name = l.arg(1, &format!("a loop version ({names})"))?;
    let variant = LoopVariant::by_name(name).ok_or_else(|| {
        l.err_at(
            1,
            format!(
                "unknown loop version `{name}` (expected {})",
                LoopVariant::names_or(&[])
            ),
        )
    })?;
    let kind = l.arg(
        2,
        "a backing: sparse, prealloc, refusing, blockdev, nullb or loop",
    )?;
    let backing = BackingKind::parse(kind).ok_or_else(|| {
        l.err_at(
            2,
            format!(
                "loop: unknown backing `{kind}` (expected sparse, prealloc, refusing, blockdev, nullb or loop)"
            ),
        )
    })?;
    let mut setup = LoopSetup::new(variant, backing, 0);
    let (mut offset_seen, mut nowait_seen) = (false, false);
    for n in 3..6 {
        let Some(w) = l.words.get(n) else { break };
        if let Some(v) = w.strip_prefix("offset=").filter(|_| !offset_seen) {
            offset_seen = true;
            setup.offset = v
                .parse()
                .map_err(|_| l.err_at(n, format!("`offset={v}`: a byte count is expected")))?;
        } else if let Some(v) = w
            .strip_prefix("start=")
            .filter(|_| setup.part_start.is_none())
        {
            let start: u64 = v
                .parse()
                .map_err(|_| l.err_at(n, format!("`start={v}`: a sector number is expected")))?;
            if backing != BackingKind::Nullb {
                return Err(l.err_at(
                    n,
                    format!("`start={v}`: a partition needs the nullb backing (got {kind})"),
                ));
            }
            setup.part_start = Some(start);
        } else if let Some(v) = w.strip_prefix("nowait=").filter(|_| !nowait_seen) {
            nowait_seen = true;
            setup.fmode_nowait = match v {
                "on" => true,
                "off" => false,
                _ => {
                    return Err(l.err_at(
                        n,
                        format!("`nowait={v}`: expected on or off (the backing's FMODE_NOWAIT)"),
                    ))
                }
            };
        } else {
            return Err(l.err_at(
                n,
                format!("loop: unexpected `{w}` (expected offset=BYTES, nowait=on|off or start=SECTORS, each at most once)"),
            ));
        }
    }
    l.done(
        6,
        "a version, a backing, and at most one offset=BYTES, one nowait=on|off and one start=SECTORS",
    )?;
    let start_at = (3..6).find(|&n| l.words.get(n).is_some_and(|w| w.starts_with("start=")));
    crate::machine::loop_rig::validate(&setup).map_err(|e| match start_at {
        Some(n) if e.starts_with("start=") => l.err_at(n, e),
        _ => l.err(e),
    })?;
    Ok(setup)
}

#[cfg(test)]
mod tests {
    use crate::scenario::Scenario;

    /// `hotplug_state_control n` builds a kernel without `CONFIG_CPU_HOTPLUG_STATE_CONTROL`: the
    /// config line says so, `target` to a partial state is refused with `-EINVAL` naming the
    /// option, and `target 1 0` (a full offline) still runs. Without the line (biosim's default,
    /// `y`) the same partial target is taken.
    #[test]
    fn hotplug_state_control_n_leaves_target_only_0_and_online() {
        let text = "cpus 2\nhotplug_state_control n\ntry target 1 186\ntarget 1 0\nstep\n";
        let s = Scenario::parse(text, "t.scn").unwrap();
        assert!(!s.config.kernel.cpu_hotplug_state_control);
        let run = s.run().unwrap();
        assert!(
            run.trace
                .lines()
                .next()
                .unwrap()
                .ends_with(" CPU_HOTPLUG_STATE_CONTROL=n"),
            "{}",
            run.trace
        );
        assert_eq!(run.skipped.len(), 1, "{:?}", run.skipped);
        let why = &run.skipped[0];
        assert!(
            why.starts_with("line 3: `try target 1 186` skipped:"),
            "{why}"
        );
        assert!(why.contains("CONFIG_CPU_HOTPLUG_STATE_CONTROL"), "{why}");
        assert!(why.contains("-EINVAL"), "{why}");
        assert!(
            run.trace
                .contains("echo 0 > /sys/devices/system/cpu/cpu1/hotplug/target"),
            "{}",
            run.trace
        );
        // The default (and `hotplug_state_control y`) takes the partial target.
        for header in ["cpus 2\n", "cpus 2\nhotplug_state_control y\n"] {
            let s = Scenario::parse(&format!("{header}target 1 186\n"), "t.scn").unwrap();
            assert!(s.config.kernel.cpu_hotplug_state_control);
            let run = s.run().unwrap();
            assert!(run.skipped.is_empty(), "{:?}", run.skipped);
            assert!(
                !run.trace.contains("CPU_HOTPLUG_STATE_CONTROL"),
                "{}",
                run.trace
            );
            assert!(
                run.trace
                    .contains("echo 186 > /sys/devices/system/cpu/cpu1/hotplug/target"),
                "{}",
                run.trace
            );
        }
    }

    /// The line goes through the one y/n parser and may be given once.
    #[test]
    fn hotplug_state_control_is_a_once_only_y_or_n_line() {
        let e = Scenario::parse(
            "hotplug_state_control n\nhotplug_state_control y\ntick\n",
            "t.scn",
        )
        .unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        assert!(
            e.message
                .contains("a second `hotplug_state_control` line (the first is line 1)"),
            "{e}"
        );
        let e = Scenario::parse("hotplug_state_control maybe\ntick\n", "t.scn").unwrap_err();
        assert_eq!((e.line, e.column), (1, 23), "{e}");
        assert!(
            e.message
                .contains("`hotplug_state_control`: expected y or n, got `maybe`"),
            "{e}"
        );
        let e = Scenario::parse("tick\nhotplug_state_control n\n", "t.scn").unwrap_err();
        assert!(
            e.message.contains("must come before the first transition"),
            "{e}"
        );
    }
}
