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
//! Header lines (before the first transition): `variant NAME` (or `module NAME`), `knob NAME=VALUE`, `cpus N`,
//! `online N`, `preempt MODEL`, `preempt_count y|n`, `preempt_rcu y|n`, `prove_locking y|n`, `hz N`,
//! `hotplug_state_control y|n`, `seed N`, `rescuer pool|unbound`. Transitions: `complete CPU hardirq|softirq|atomic|task plain|flag|dynamic` (all three words required),
//! `worker CPU`, `tick`, `cpu_down CPU [fail=STATE]`, `cpu_up CPU [fail=STATE]`, `step`,
//! `fail CPU STATE` (write `hotplug/fail` now, also mid-operation), `target CPU STATE` (start a
//! stepped operation to that state, as writing `hotplug/target` does), `need_resched CPU`, each
//! optionally after `try`. Then `settle [STEPS]` (also implied at the end) and any number of
//! `expect clean` / `expect INVARIANT` lines, where INVARIANT is one of `once`, `task`,
//! `stranded`, `off-cpu`, `hotplug-context`, `bug`, `warn`, `sleep-in-atomic`,
//! `invalid-wait-context`, `inconsistent-lock-state`, `no-quiescence`, `dropbehind`, `data`.
//!
//! `variant NAME` takes a name of [`Variant::ALL`](bio_core::block::complete_in_task::Variant::ALL)
//! (or of a registered module), `module NAME` a registered module's name only
//! ([`crate::machine::modules`]), `knob` one of [`Knob`](bio_core::block::complete_in_task::Knob)'s
//! (the parser the CLI's `--knob` uses; a module takes only `gate_reads` and `fs_flag`).
//!
//! A loop device (`drivers/block/loop.c`): header `loop NAME sparse|prealloc|refusing|blockdev|nullb|loop
//! [offset=BYTES] [nowait=on|off] [start=SECTORS]` (`nowait=off`: the backing file lacks `FMODE_NOWAIT`;
//! `start=SECTORS`, with `nullb` only: loop0's backing is `nullb0p1`, a partition of nullb0 from
//! that sector to its end, so each lower bio is remapped (`block_bio_remap`); NAME: one of [`LoopVariant::ALL`](bio_core::drivers::block::loop_drv::LoopVariant::ALL))
//! and `loop_knob NAME=VALUE` (one of [`LoopKnob`](bio_core::drivers::block::loop_drv::LoopKnob)'s); transitions
//! `io CPU read|discard BLOCK`, `io CPU write BLOCK [fill=BYTE]` and `loop_worker CPU`. At the end every block
//! written is read back through the device and compared (`expect data` for a mismatch). The
//! backings `nullb` and `loop` stack loop0 on a simulated block device (`nullb0`, memory-backed;
//! `loop1` over an in-memory file) through `BdevBacking`; the read-back goes through the stack.
//!
//! Fault injection and plugging, with a device header: `fail_alloc SITE` (a one-shot allocation
//! failure at one of `ALLOC_SITES`), `fail_io DEV` (the next bio to DEV, a device of the
//! scenario, fails with `BLK_STS_IOERR`), `plug CPU` / `unplug CPU` (`blk_start_plug()` /
//! `blk_finish_plug()` in CPU's submitter: the `io` lines between them are dispatched at
//! `unplug`). A second `plug` on a CPU whose plug is open, or `unplug` without one, is refused at
//! run time like any impossible transition; a plug still open when the scenario settles is
//! finished by `settle` (noted in the trace). The run's seed also seeds fault injection
//! ([`Sim::fault_seed`]); every injected fault is in the trace where it strikes (the fault
//! log's event, captured), and the whole log is listed again after `settle` (`fault_inject: ...`).
//!
//! Lock sequences, with no device header needed: `locks CPU CONTEXT KIND:NAME...` takes the locks
//! nested in order on CPU in CONTEXT (`task`, `irqs-off`, `bh-off`, `softirq`, `hardirq`), then
//! releases them in reverse, each through lockdep, as a `lib/locking-selftest.c` case does
//! ([`crate::machine::locks`]); the header `prove_locking y|n` sets `CONFIG_PROVE_LOCKING`.
//!
//! Nothing passes by accident: a word a line does not take, a header line given twice, two
//! verdicts on one `expect` line, an empty scenario, or input over [`INPUT_CAP`] are
//! [`ScenarioError`]s naming the file, line and column; a transition that cannot happen at that
//! moment is a [`RunError::Refused`] unless its line starts with `try` (then it is skipped and the
//! skip recorded). `docs/scenarios/README.md` has the grammar.

//!
//! The parser is split by kind of line: [`line`] (the words of a line and the argument readers,
//! shared), [`header`], [`transition`] and [`expect`]; this file drives them and runs the result.

mod expect;
#[cfg(test)]
mod fault_plug_tests;
mod header;
mod line;
mod locks;
#[cfg(test)]
mod locks_tests;
mod transition;

pub use expect::{invariant_word, Expectation};
pub use line::{ScenarioError, QUOTE_MAX};

use crate::machine::loop_rig::LoopSetup;
use crate::machine::oracle::Violation;
use crate::machine::sim::{Sim, SimConfig, SimError};
use crate::machine::transition::Transition;
use line::Line;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;

/// The largest scenario file read (16 MiB); a longer input is refused after reading one byte more.
pub const INPUT_CAP: u64 = 16 << 20;

/// Why a parsed scenario could not run to its verdict.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The machine could not be built.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// A transition not written `try …` could not happen at that moment (`file:line: …`).
    #[error(transparent)]
    Refused(ScenarioError),
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
    /// The lines of the transitions written `try …`: one that cannot happen is skipped and
    /// recorded, not an error.
    pub tried: BTreeSet<usize>,
    /// The column of each transition's first word, by line (where a refusal is reported).
    pub columns: BTreeMap<usize, usize>,
    /// The file, as errors name it.
    pub file: String,
}

/// The outcome of running a scenario.
#[derive(Debug)]
pub struct ScenarioRun {
    /// The kernel-style trace.
    pub trace: String,
    /// The same trace as ftrace records (`--trace FILE`).
    pub ftrace: crate::report::ftrace::Ftrace,
    /// Every violation found.
    pub violations: Vec<Violation>,
    /// Expectations that did not hold, as messages naming their line.
    pub failed_expectations: Vec<String>,
    /// The `try` transitions that could not happen and were skipped, as messages naming their
    /// line (`line 7: `complete 1 hardirq flag`: CPU1 is offline`).
    pub skipped: Vec<String>,
}

impl Scenario {
    /// Parses scenario text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Self, ScenarioError> {
        let mut header = header::Header::new();
        let mut transitions = Vec::new();
        let mut tried = BTreeSet::new();
        let mut columns = BTreeMap::new();
        let mut settle = 5_000;
        let mut settled = false;
        let mut expect = Vec::new();
        let mut lines = 0;
        for (i, raw) in text.lines().enumerate() {
            lines = i + 1;
            if let Some(at) = raw.find('\0') {
                let mut e = line::error_at(
                    file,
                    i + 1,
                    "a NUL byte: a scenario is a text file".to_owned(),
                );
                e.column = raw[..at].chars().count() + 1;
                return Err(e);
            }
            let Some(l) = Line::new(file, i + 1, raw) else {
                continue;
            };
            let kw = l.keyword();
            if settled && kw != "expect" {
                return Err(l.err(format!(
                    "`{kw}` after `settle`: only `expect` lines may follow"
                )));
            }
            if header.line(&l, transitions.is_empty() && !settled)? {
                continue;
            }
            if let (Some(c), "settle" | "expect") = (l.try_col, kw) {
                return Err(l.err(format!(
                    "`try` (column {c}) may only prefix a transition, not `{kw}`"
                )));
            }
            match kw {
                "settle" => {
                    if l.words.len() > 1 {
                        settle = l.num(1, "a step budget")?;
                    }
                    l.done(2, "at most a step budget")?;
                    settled = true;
                }
                "expect" => expect.push((l.number, expect::parse_expect(&l)?)),
                _ => match transition::parse_transition(
                    &l,
                    header.config.nr_cpus,
                    header.loop_dev,
                )? {
                    Some(t) => {
                        if l.try_col.is_some() {
                            tried.insert(l.number);
                        }
                        columns.insert(l.number, l.col(0));
                        transitions.push((l.number, t))
                    }
                    None => return Err(l.err(format!(
                        "unknown line `{kw}` (expected a header: variant, module, knob, cpus, online, preempt, preempt_count, preempt_rcu, hz, hotplug_state_control, prove_locking, seed, rescuer, loop, loop_knob; a transition, optionally after `try`: complete, worker, tick, cpu_down, cpu_up, step, fail, target, need_resched, io, loop_worker, nullb_timer, fail_alloc, fail_io, plug, unplug, freeze_backing, thaw_backing, freeze_queue, locks; or settle / expect)"
                    ))),
                },
            }
        }
        let (config, loop_dev) = header.finish(file)?;
        if transitions.is_empty() && expect.is_empty() {
            let mut e = line::error_at(
                file,
                lines + 1,
                "no transition and no `expect` line: an empty scenario would pass by accident"
                    .to_owned(),
            );
            e.column = 1;
            return Err(e);
        }
        Ok(Scenario {
            config,
            transitions,
            settle,
            expect,
            loop_dev,
            tried,
            columns,
            file: file.to_owned(),
        })
    }

    /// Reads and parses a file: at most [`INPUT_CAP`] bytes, read as a stream (`/dev/zero` is
    /// refused as soon as the cap is passed), UTF-8 text.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let file = path.display().to_string();
        let cannot = |e: std::io::Error| line::error_at(&file, 0, format!("cannot read: {e}"));
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(INPUT_CAP + 1).read_to_end(&mut bytes))
            .map_err(cannot)?;
        if bytes.len() as u64 > INPUT_CAP {
            return Err(line::error_at(
                &file,
                0,
                format!("larger than {} MiB: not a scenario file", INPUT_CAP >> 20),
            ));
        }
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            let at = e.valid_up_to();
            let line_start = bytes[..at]
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |p| p + 1);
            let mut err = line::error_at(
                &file,
                bytes[..at].iter().filter(|b| **b == b'\n').count() + 1,
                "not UTF-8 text".to_owned(),
            );
            err.column = String::from_utf8_lossy(&bytes[line_start..at])
                .chars()
                .count()
                + 1;
            err
        })?;
        Self::parse(text, &file)
    }

    /// Runs it: builds the machine, applies each transition with the oracle checked after it,
    /// settles, and checks the expectations. A transition that cannot happen at that moment is
    /// an error ([`RunError::Refused`], naming its line) unless its line says `try`, which skips it
    /// and records the skip in the trace and in [`ScenarioRun::skipped`].
    pub fn run(&self) -> Result<ScenarioRun, RunError> {
        let s = Sim::new(self.config)?;
        if let Some(setup) = self.loop_dev {
            s.attach_loop(setup);
        }
        let mut skipped = Vec::new();
        for (line, t) in &self.transitions {
            if let Err(why) = s.try_apply(t) {
                let what = t.to_scenario_line();
                if !self.tried.contains(line) {
                    let mut e = line::error_at(
                        &self.file,
                        *line,
                        format!("`{what}`: {why} (write `try {what}` if that may happen)"),
                    );
                    e.column = self.columns.get(line).copied().unwrap_or(0);
                    return Err(RunError::Refused(e));
                }
                s.rt.note(format!("   (try: skipped: {why})"));
                skipped.push(format!("line {line}: `try {what}` skipped: {why}"));
            }
        }
        let mut violations = s.settle(self.settle);
        violations.extend(s.verify_devices(self.settle));
        let failed = self
            .expect
            .iter()
            .filter(|(_, e)| !holds(*e, &violations))
            .map(|(line, e)| format!("line {line}: expected {e}, got {}", got(&violations)))
            .collect();
        Ok(ScenarioRun {
            trace: s.trace(),
            ftrace: s.ftrace(),
            violations,
            failed_expectations: failed,
            skipped,
        })
    }
}

/// Whether `e` holds of `violations`.
fn holds(e: Expectation, violations: &[Violation]) -> bool {
    match e {
        Expectation::Clean => violations.is_empty(),
        Expectation::Violates(inv) => violations.iter().any(|v| v.invariant == inv),
    }
}

/// What a failed expectation got: the invariants violated, or none.
fn got(violations: &[Violation]) -> String {
    if violations.is_empty() {
        "no violation".to_owned()
    } else {
        violations
            .iter()
            .map(|v| v.invariant.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::loop_rig::LoopOp;
    use crate::machine::oracle::Need;
    use crate::machine::sim::CompletionContext;
    use bio_core::block::complete_in_task::{Knob, Variant};
    use bio_core::drivers::block::loop_drv::{LoopKnob, LoopVariant};

    /// `knob` and `loop_knob` lines go through the one parser of their kind: an unknown knob is
    /// refused naming the known ones, a bad value naming the valid ones; `variant` and `loop`
    /// name every preset.
    #[test]
    fn a_variant_after_a_knob_or_a_second_variant_is_refused() {
        // A `variant` after a `knob` would silently drop the knob: a clean twin by accident.
        let e = Scenario::parse(
            "knob requeue_on_online=false\nvariant v7\nexpect clean\n",
            "t.scn",
        )
        .unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("would discard it"), "{e}");
        let e = Scenario::parse("variant v6\nvariant v7\n", "t.scn").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("a second `variant` line"), "{e}");
        // The right order is accepted, and the knob holds.
        let s = Scenario::parse(
            "variant v7\nknob requeue_on_online=false\ncomplete 0 hardirq flag\n",
            "t.scn",
        )
        .unwrap();
        assert!(!s.config.variant.requeue_on_online);
    }

    /// A `null_blk` line takes the kernel's parameter names; an unknown or repeated key, a
    /// second device, `nullb_timer` without null_blk are refused at their line and word.
    #[test]
    fn null_blk_lines_take_kernel_parameters_and_refuse_unknown_and_repeated_keys() {
        let s = Scenario::parse(
            "null_blk irqmode=2 memory_backed=1 bs=4096\nio 0 write 1\nnullb_timer\n",
            "t.scn",
        )
        .unwrap();
        let nb = s.loop_dev.and_then(|d| d.nullb).expect("a null_blk setup");
        assert_eq!(
            (nb.irqmode.nr(), nb.memory_backed, nb.blocksize),
            (2, true, 4096)
        );
        for (text, line, column, what) in [
            (
                "null_blk irqmode=1 foo=2\n",
                1,
                20,
                "unknown null_blk parameter `foo`",
            ),
            ("null_blk gb=1 size=4\n", 1, 15, "`size` given twice"),
            ("null_blk irqmode=7\n", 1, 10, "irqmode=7"),
            ("null_blk queue_mode=1\n", 1, 1, "legacy IO path"),
            (
                "loop v5 sparse\nnull_blk irqmode=0\n",
                2,
                1,
                "one block device per scenario",
            ),
            (
                "loop v5 sparse\nnullb_timer\n",
                2,
                1,
                "needs a `null_blk` header line",
            ),
        ] {
            let e = Scenario::parse(text, "t.scn").unwrap_err();
            assert_eq!((e.line, e.column), (line, column), "{text}: {e}");
            assert!(e.message.contains(what), "{text}: {e}");
        }
    }

    #[test]
    fn a_kconfig_error_names_the_line_that_made_it() {
        let e = Scenario::parse(
            "variant v7\npreempt full\npreempt_count n\ncomplete 0 hardirq flag\n",
            "t.scn",
        )
        .unwrap_err();
        assert_eq!(e.line, 3, "{e}");
    }

    #[test]
    fn knob_lines_refuse_unknown_knobs_and_bad_values_naming_the_known_ones() {
        let e = Scenario::parse("knob bogus=1\n", "t.scn").unwrap_err();
        assert!(
            e.to_string().starts_with("t.scn:1:6: unknown knob `bogus`"),
            "{e}"
        );
        for n in Knob::names() {
            assert!(e.message.contains(n), "{e}");
        }
        let e = Scenario::parse("knob list=tree\n", "t.scn").unwrap_err();
        assert!(
            e.message
                .contains("expected llist, local_lock or irq_save, got `tree`"),
            "{e}"
        );
        let e = Scenario::parse("knob gate_reads=maybe\n", "t.scn").unwrap_err();
        assert!(
            e.message.contains("expected true or false, got `maybe`"),
            "{e}"
        );
        let e = Scenario::parse("loop v5 sparse\nloop_knob bogus=true\n", "t.scn").unwrap_err();
        assert_eq!(e.line, 2);
        for n in LoopKnob::NAMES {
            assert!(e.message.contains(n), "{e}");
        }
        let e = Scenario::parse("loop v5 sparse\nloop_knob hint=maybe\n", "t.scn").unwrap_err();
        assert!(
            e.message.contains("expected true or false, got `maybe`"),
            "{e}"
        );
        let e = Scenario::parse("variant v8\n", "t.scn").unwrap_err();
        for n in Variant::names() {
            assert!(e.message.contains(n), "{e}");
        }
        let e = Scenario::parse("loop v6 sparse\n", "t.scn").unwrap_err();
        for n in LoopVariant::names() {
            assert!(e.message.contains(n), "{e}");
        }
        let s =
            Scenario::parse("variant v7\nknob requeue_on_online=false\ntick\n", "t.scn").unwrap();
        assert_eq!(
            s.config.variant,
            Variant {
                name: "custom",
                ..Variant::V7.with(Knob::RequeueOnOnline(false))
            }
        );
    }

    #[test]
    fn bad_lines_are_named_with_their_line() {
        let e = Scenario::parse("variant v6\ncpus 2\ncomplet 1 hardirq\n", "t.scn").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(
            e.to_string()
                .starts_with("t.scn:3:1: unknown line `complet`"),
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
                .contains("t:1:1: `io` needs a `loop` or `null_blk` header line"),
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

    /// `start=SECTORS` on a `nullb` backing puts loop0 on `nullb0p1` from that sector: loop0
    /// shrinks by the partition's start and `fail_io` may name the partition; a start that is
    /// not a 4 KiB multiple inside the 1 MiB disk, a repeat, or another backing is refused at
    /// the word's column.
    #[test]
    fn the_loop_header_takes_a_partition_start_on_nullb() {
        let s = Scenario::parse(
            "loop v5 nullb start=1024
fail_io nullb0p1
",
            "t",
        )
        .unwrap();
        let l = s.loop_dev.unwrap();
        assert_eq!((l.part_start, l.blocks()), (Some(1024), 128));
        assert_eq!(l.disk_names(), ["loop0", "nullb0", "nullb0p1"]);
        for (header, said) in [
            (
                "loop v5 nullb start=x",
                "t:1:15: `start=x`: a sector number is expected",
            ),
            (
                "loop v5 nullb start=1020",
                "t:1:15: start=1020: the partition's first sector must be a multiple of 8",
            ),
            (
                "loop v5 nullb start=0",
                "t:1:15: start=0: the partition's first sector",
            ),
            (
                "loop v5 nullb start=2048",
                "t:1:15: start=2048: the partition's first sector",
            ),
            (
                "loop v5 sparse start=8",
                "t:1:16: `start=8`: a partition needs the nullb backing (got sparse)",
            ),
            (
                "loop v5 nullb start=8 start=16",
                "t:1:23: loop: unexpected `start=16`",
            ),
        ] {
            let e = Scenario::parse(&format!("{header}\n"), "t").unwrap_err();
            assert!(e.to_string().contains(said), "{header}: {e}");
        }
        let e = Scenario::parse("loop v5 nullb\nfail_io nullb0p1\n", "t").unwrap_err();
        assert!(e.to_string().contains("`nullb0p1` is not a device"), "{e}");
    }

    /// `nowait=off` takes `FMODE_NOWAIT` away from the backing, in either order with `offset=`;
    /// a bad value, a repeat or an unknown word is refused at its column.
    #[test]
    fn the_loop_header_takes_nowait_on_or_off() {
        let io = "io 0 write 1\n";
        for (header, fmode) in [
            ("loop v5 prealloc nowait=off", false),
            ("loop v5 prealloc nowait=on offset=4096", true),
            ("loop v5 prealloc offset=4096 nowait=off", false),
            ("loop v5 prealloc", true),
        ] {
            let s = Scenario::parse(&format!("{header}\n{io}"), "t").unwrap();
            assert_eq!(s.loop_dev.map(|l| l.fmode_nowait), Some(fmode), "{header}");
        }
        for (header, said) in [
            (
                "loop v5 prealloc nowait=maybe",
                "t:1:18: `nowait=maybe`: expected on or off",
            ),
            (
                "loop v5 prealloc nowait=off nowait=on",
                "t:1:29: loop: unexpected `nowait=on` (expected offset=BYTES, nowait=on|off or start=SECTORS, each at most once)",
            ),
            (
                "loop v5 prealloc fmode=off",
                "t:1:18: loop: unexpected `fmode=off`",
            ),
            (
                "loop v5 prealloc nowait=off offset=0 x",
                "t:1:38: loop: unexpected `x`",
            ),
            (
                "loop v5 nullb nowait=off offset=0 start=8 x",
                "t:1:43: unexpected `x`: expected the end of the line",
            ),
        ] {
            let e = Scenario::parse(&format!("{header}\n{io}"), "t").unwrap_err();
            assert!(e.to_string().contains(said), "{header}: {e}");
        }
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
            Transition::Fail { cpu: 1, state: 187 },
            Transition::Fail { cpu: 0, state: -1 },
            Transition::Target { cpu: 1, state: 0 },
            Transition::Target { cpu: 1, state: 236 },
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

    /// `try` prefixes a transition only, is remembered by line, and columns are 1-based
    /// characters; a long word is quoted cut to QUOTE_MAX characters.
    #[test]
    fn try_lines_and_columns() {
        let s = Scenario::parse("cpus 2\n  try worker 1\nworker 0\n", "t.scn").unwrap();
        assert_eq!(s.tried.iter().copied().collect::<Vec<_>>(), vec![2]);
        assert_eq!(s.columns.get(&2), Some(&7));
        let e = Scenario::parse("cpus 2\ntry expect clean\n", "t.scn").unwrap_err();
        assert_eq!((e.line, e.column), (2, 5), "{e}");
        let e = Scenario::parse("cpus 2\n\u{e9}\u{e9} tick\n", "t.scn").unwrap_err();
        assert_eq!((e.line, e.column), (2, 1), "{e}");
        let e = Scenario::parse("cpus 2\n\u{e9}tick 1\n", "t.scn").unwrap_err();
        assert_eq!(e.column, 1, "{e}");
        let e = Scenario::parse("cpus 2\ntick\u{a0}\u{a0}5\n", "t.scn").unwrap_err();
        assert_eq!(e.column, 7, "{e}");
        let long = "x".repeat(1000);
        let e = Scenario::parse(&format!("cpus 2\n{long}\n"), "t.scn").unwrap_err();
        assert!(
            e.message
                .contains(&format!("`{}…`", "x".repeat(QUOTE_MAX - 1))),
            "{e}"
        );
        assert!(e.message.len() < 700, "{e}");
        // A refused transition names its line and column at run time; `try` records the skip.
        let s = Scenario::parse("cpus 2\n step\n", "t.scn").unwrap();
        let RunError::Refused(e) = s.run().unwrap_err() else {
            panic!("a refusal")
        };
        assert_eq!(e.to_string(), "t.scn:2:2: `step`: no hotplug operation is in progress (write `try step` if that may happen)");
        let s = Scenario::parse("cpus 2\ntry step\nexpect clean\n", "t.scn").unwrap();
        let r = s.run().unwrap();
        assert_eq!(
            r.skipped,
            vec!["line 2: `try step` skipped: no hotplug operation is in progress"]
        );
        assert!(r
            .trace
            .contains("   (try: skipped: no hotplug operation is in progress)"));
    }

    /// `fail CPU STATE` and `target CPU STATE`: every word accounted for, each bad form named by
    /// line and column; whether sysfs takes the value is decided at run time.
    #[test]
    fn fail_and_target_lines() {
        let s = Scenario::parse(
            "cpus 2\ncpu_down 1\nfail 1 187\ntry fail 0 -1\ntarget 1 186\n  try target 0 236\n",
            "t.scn",
        )
        .unwrap();
        assert_eq!(
            s.transitions.iter().map(|(_, t)| *t).collect::<Vec<_>>(),
            vec![
                Transition::Hotplug {
                    cpu: 1,
                    up: false,
                    fail_at: None
                },
                Transition::Fail { cpu: 1, state: 187 },
                Transition::Fail { cpu: 0, state: -1 },
                Transition::Target { cpu: 1, state: 186 },
                Transition::Target { cpu: 0, state: 236 },
            ]
        );
        assert_eq!(s.tried.iter().copied().collect::<Vec<_>>(), vec![4, 6]);
        assert_eq!(s.columns.get(&6), Some(&7));
        let bad = |line: &str| {
            let e = Scenario::parse(&format!("cpus 2\n{line}\n"), "t.scn").unwrap_err();
            assert_eq!(e.line, 2, "{e}");
            e.to_string()
        };
        for (line, want) in [
            ("fail", "t.scn:2:5: `fail` needs a CPU number"),
            ("fail 1", "t.scn:2:7: `fail` needs a state number (-1 disarms"),
            ("fail 1 x", "t.scn:2:8: `fail`: a state number (-1 disarms; `biosim states` lists them) is expected, got `x`"),
            ("fail 1 workqueue:online", "t.scn:2:8: `fail`: a state number"),
            ("fail 1 187 extra", "t.scn:2:12: unexpected `extra`: expected the end of the line (`fail` takes a CPU and a state (-1 disarms))"),
            ("fail 1 237", "t.scn:2:8: `fail`: state 237 is out of range -1..=236"),
            ("fail 1 -2", "t.scn:2:8: `fail`: state -2 is out of range -1..=236"),
            ("fail 1 99999999999", "t.scn:2:8: `fail`: a state number"),
            ("fail 5 187", "t.scn:2:6: CPU5 does not exist"),
            ("try fail x 187", "t.scn:2:10: `fail`: a CPU number must be a number, got `x`"),
            ("target 1", "t.scn:2:9: `target` needs a state number (`biosim states` lists them)"),
            ("target 1 -1", "t.scn:2:10: `target`: state -1 is out of range 0..=236"),
            ("target 1 1.5", "t.scn:2:10: `target`: a state number (`biosim states` lists them) is expected, got `1.5`"),
            ("target 1 186 2", "t.scn:2:14: unexpected `2`: expected the end of the line (`target` takes a CPU and a state)"),
            ("target 2 186", "t.scn:2:8: CPU2 does not exist"),
            ("try  target 1 fail=186", "t.scn:2:15: `target`: a state number"),
        ] {
            let e = bad(line);
            assert!(e.starts_with(want), "{line}: {e}");
        }
        // At run time sysfs decides: `fail 1 0` with CPU1 up is refused, naming the line and
        // column; under `try` it is skipped and recorded.
        let s = Scenario::parse("cpus 2\n  fail 1 0\n", "t.scn").unwrap();
        let RunError::Refused(e) = s.run().unwrap_err() else {
            panic!("a refusal")
        };
        assert!(
            e.to_string().starts_with("t.scn:2:3: `fail 1 0`: hotplug/fail=0 refused: fail_store: state 0 rejected: DEAD callbacks"),
            "{e}"
        );
        let s = Scenario::parse("cpus 2\ntry target 1 144\nexpect clean\n", "t.scn").unwrap();
        let r = s.run().unwrap();
        assert_eq!(r.skipped.len(), 1);
        assert!(
            r.skipped[0]
                .starts_with("line 2: `try target 1 144` skipped: hotplug/target=144 refused:")
                && r.skipped[0].contains("cant_stop"),
            "{:?}",
            r.skipped
        );
    }
}
