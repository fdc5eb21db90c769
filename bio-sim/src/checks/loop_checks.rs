//! The loop driver's NOWAIT series (seed 004, `drivers/block/loop.c`) as checks, the way the
//! finding gallery does it for the completion batcher: each check runs a scenario on the
//! deterministic runtime, with a loop device over an in-memory backing file attached to a [`Sim`]
//! ([`crate::machine::loop_rig`], the same machinery scenario files use), and must be **caught** on the
//! versions with the problem and **clean** on the ones without. `biosim loop` prints the matrix;
//! `biosim loop --check` fails when a cell differs.

use crate::checks::verdict::{Expect, Verdict};
use crate::machine::loop_rig::{BackingKind, LoopOp, LoopSetup};
use crate::machine::oracle::{Invariant, Violation};
use crate::machine::sim::{Sim, SimConfig, SimError};
use crate::machine::transition::Transition;
use bio_core::drivers::block::loop_drv::{LoopKnob, LoopStats, LoopVariant};
use bio_core::kernel::ReportKind;

/// One loop check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopCheck {
    /// `L1`, `L2`, ...
    pub id: &'static str,
    /// A one-line title.
    pub title: &'static str,
    /// A twin (a knob flipped on a posted version) and its expected verdict: caught for a check no
    /// posted version fails, clean for one every NOWAIT version fails (the fix, shown to pass).
    pub twin: Option<LoopTwin>,
}

/// A loop check's twin: a posted version with one typed knob change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopTwin {
    /// The posted version it starts from.
    pub base: LoopVariant,
    /// What differs from `base`.
    pub knob: LoopKnob,
    /// The verdict it must get.
    pub expect: Expect,
}

impl LoopTwin {
    /// The variant the twin runs (named `twin`).
    pub fn variant(&self) -> LoopVariant {
        LoopVariant {
            name: "twin",
            ..self.base.with(self.knob)
        }
    }
}

use Expect::{Caught as C, Clean as K};

/// The checks.
pub const LOOP_CHECKS: [LoopCheck; 7] = [
    LoopCheck {
        id: "L1",
        title: "NOWAIT-first wastes an attempt per write to a sparse file",
        twin: None,
    },
    LoopCheck {
        id: "L2",
        title: "lockdep_assert_held() of a lock the caller does not hold (syzbot)",
        twin: None,
    },
    LoopCheck {
        id: "L3",
        title: "a backing that refuses IOCB_NOWAIT (-EOPNOTSUPP)",
        twin: Some(LoopTwin {
            base: LoopVariant::V5,
            knob: LoopKnob::NowaitCompletesOnEopnotsupp(false),
            expect: K,
        }),
    },
    LoopCheck {
        id: "L4",
        title: "data read back equals data written, each bio ends once",
        twin: Some(LoopTwin {
            base: LoopVariant::V5,
            knob: LoopKnob::NowaitAddsLoOffset(false),
            expect: C,
        }),
    },
    LoopCheck {
        id: "L5",
        title: "a backing without FMODE_NOWAIT: no NOWAIT attempt",
        twin: Some(LoopTwin {
            base: LoopVariant::V5,
            knob: LoopKnob::CheckFmodeNowait(false),
            expect: C,
        }),
    },
    LoopCheck {
        id: "L6",
        title: "NOWAIT fallback leaks kiocb_start_write(): fsfreeze hangs",
        twin: Some(LoopTwin {
            base: LoopVariant::V5,
            knob: LoopKnob::NowaitEndsWriteOnEagain(true),
            expect: K,
        }),
    },
    LoopCheck {
        id: "L7",
        title: "a failed bvec allocation (lo_rw_aio_prep) completes once",
        twin: Some(LoopTwin {
            base: LoopVariant::V5,
            knob: LoopKnob::RefArmedBeforePrep(true),
            expect: K,
        }),
    },
];

/// One loop version's row of expectations, by check id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopExpectRow {
    /// The version (one of [`LoopVariant::ALL`]).
    pub variant: LoopVariant,
    /// `(check id, expected verdict)` for every check of [`LOOP_CHECKS`].
    pub cells: &'static [(&'static str, Expect)],
}

/// Every loop version's row, in [`LoopVariant::ALL`]'s order (a test checks both agree).
#[rustfmt::skip]
pub const LOOP_EXPECTED: &[LoopExpectRow] = &[
    LoopExpectRow { variant: LoopVariant::BASE,       cells: &[("L1", K), ("L2", K), ("L3", K), ("L4", K), ("L5", K), ("L6", K), ("L7", K)] },
    LoopExpectRow { variant: LoopVariant::V5_NO_HINT, cells: &[("L1", C), ("L2", K), ("L3", C), ("L4", K), ("L5", K), ("L6", C), ("L7", C)] },
    LoopExpectRow { variant: LoopVariant::V4,         cells: &[("L1", K), ("L2", C), ("L3", C), ("L4", K), ("L5", C), ("L6", C), ("L7", C)] },
    LoopExpectRow { variant: LoopVariant::V5,         cells: &[("L1", K), ("L2", K), ("L3", C), ("L4", K), ("L5", K), ("L6", C), ("L7", C)] },
];

/// What check `id` must get on the loop version called `variant` (`None`: no row or cell).
pub fn loop_expected(id: &str, variant: &str) -> Option<Expect> {
    LOOP_EXPECTED
        .iter()
        .find(|r| r.variant.name == variant)?
        .cells
        .iter()
        .find(|(c, _)| *c == id)
        .map(|&(_, e)| e)
}

/// Looks a check up by id (`L2` or `2`).
pub fn loop_check(id: &str) -> Option<&'static LoopCheck> {
    let id = id.trim_start_matches(['L', 'l']);
    LOOP_CHECKS.iter().find(|c| &c.id[1..] == id)
}

/// The variant a check's twin runs, if it has one.
pub fn twin_variant(c: &LoopCheck) -> Option<LoopVariant> {
    c.twin.map(|t| t.variant())
}

/// The version `biosim loop --finding L --variant NAME [--knob K=V]...` runs check `c` on: `twin`
/// or a posted version by name, with the knobs applied in order (through
/// [`LoopKnob::parse_assignment`]). The error names the known versions or knobs.
pub fn loop_variant_for(
    c: &LoopCheck,
    name: &str,
    knobs: &[String],
) -> Result<LoopVariant, String> {
    let mut v = if name == "twin" {
        twin_variant(c).ok_or_else(|| format!("loop check {} has no twin", c.id))?
    } else {
        LoopVariant::parse_name(name, &["twin"])?
    };
    for kv in knobs {
        v = v.with(LoopKnob::parse_assignment(kv)?);
        v.name = "custom";
    }
    Ok(v)
}

/// One run: the verdict, the device's counters, the trace.
#[derive(Debug)]
pub struct LoopRun {
    /// The verdict.
    pub verdict: Verdict,
    /// The loop device's counters at the end.
    pub stats: LoopStats,
    /// The kernel-style trace.
    pub trace: String,
    /// The same trace as ftrace records (`--trace FILE`).
    pub ftrace: crate::report::ftrace::Ftrace,
}

const BUDGET: u64 = 20_000;

/// A scenario machine (2 CPUs, the default batcher) with a loop device over `backing`.
fn machine(
    variant: LoopVariant,
    backing: BackingKind,
    offset: u64,
    trace: bool,
) -> Result<Sim, SimError> {
    machine_with(LoopSetup::new(variant, backing, offset), trace)
}

/// A scenario machine (2 CPUs, the default batcher) with the loop device `setup` describes.
fn machine_with(setup: LoopSetup, trace: bool) -> Result<Sim, SimError> {
    let s = Sim::new(SimConfig {
        trace,
        ..SimConfig::default()
    })?;
    s.attach_loop(setup);
    Ok(s)
}

/// One block's I/O from CPU0 (the submitter of every check).
fn io(s: &Sim, op: LoopOp, block: u32) {
    s.apply(&Transition::LoopIo {
        cpu: 0,
        op,
        block,
        fill: block as u8 ^ 0xa5,
    });
}

fn done(s: &Sim, verdict: Verdict) -> LoopRun {
    LoopRun {
        verdict,
        stats: s.loop_outcome().map(|o| o.0).unwrap_or_default(),
        trace: s.trace(),
        ftrace: s.ftrace(),
    }
}

/// Keeps the violations of `kinds` only.
fn keep(v: &mut Vec<Violation>, kinds: &[Invariant]) {
    v.retain(|x| kinds.contains(&x.invariant));
}

/// Runs check `id` on `variant`.
pub fn run_loop_check(id: &str, variant: LoopVariant, trace: bool) -> Result<LoopRun, SimError> {
    match id {
        "L1" => check_l1_wasted_nowait(variant, trace),
        "L2" => check_l2_lockdep(variant, trace),
        "L3" => check_l3_refusing_backing(variant, trace),
        "L4" => check_l4_data(variant, trace),
        "L5" => check_l5_no_fmode_nowait(variant, trace),
        "L6" => check_l6_freeze_after_fallback(variant, trace),
        "L7" => check_l7_prep_allocation_failure(variant, trace),
        _ => Ok(LoopRun {
            verdict: Verdict::NotApplicable("no such check"),
            stats: LoopStats::default(),
            trace: String::new(),
            ftrace: Default::default(),
        }),
    }
}

/// L1: 32 random-order 4 KiB writes to a sparse file, submitted back to back (a queue depth of
/// 32), then the worker drains.
fn check_l1_wasted_nowait(variant: LoopVariant, trace: bool) -> Result<LoopRun, SimError> {
    let s = machine(variant, BackingKind::Sparse, 0, trace)?;
    let n = 32u32;
    for i in 0..n {
        io(&s, LoopOp::Write, (i * 37) % 256); // a permutation of 0..256, first 32 of it
    }
    let mut v = s.settle(BUDGET);
    // Anything stranded or ended twice is reported as such, beside the count.
    keep(&mut v, &[Invariant::Stranded, Invariant::EndIoOnce]);
    let (st, _) = s.loop_outcome().unwrap_or_default();
    if st.nowait_eagain > 1 {
        v.push(Violation {
            invariant: Invariant::WastedOrFailedAttempt,
            message: format!(
                "{} of {n} writes tried IOCB_NOWAIT on a hole and got -EAGAIN before going to the worker ({} skipped by the hint)",
                st.nowait_eagain, st.hint_skipped
            ),
            trace: Vec::new(),
        });
    }
    Ok(done(&s, Verdict::of(v)))
}

/// L2: one write into a hole falls back to the worker, whose accounting asserts a lock.
fn check_l2_lockdep(variant: LoopVariant, trace: bool) -> Result<LoopRun, SimError> {
    let s = machine(variant, BackingKind::Sparse, 0, trace)?;
    io(&s, LoopOp::Write, 0);
    let v = s.settle(BUDGET);
    let hits = v
        .into_iter()
        .filter(|x| x.message.contains("lockdep_assert_held"))
        .collect();
    Ok(done(&s, Verdict::of(hits)))
}

/// L3: a backing whose every IOCB_NOWAIT call returns -EOPNOTSUPP synchronously (an ext4 file
/// whose direct I/O falls back to buffered I/O refuses a NOWAIT write so), four writes; what the
/// submitter sees and what the kernel logs.
fn check_l3_refusing_backing(variant: LoopVariant, trace: bool) -> Result<LoopRun, SimError> {
    let s = machine(variant, BackingKind::Refusing, 0, trace)?;
    for b in 0..4 {
        io(&s, LoopOp::Write, b);
    }
    let mut v = s.settle(BUDGET);
    // The double completion is a kernel BUG the oracle already reports.
    keep(
        &mut v,
        &[
            Invariant::KernelReport(ReportKind::Bug),
            Invariant::Stranded,
            Invariant::EndIoOnce,
        ],
    );
    let (_, failed) = s.loop_outcome().unwrap_or_default();
    if failed > 0 {
        v.push(Violation {
            invariant: Invariant::WastedOrFailedAttempt,
            message: format!(
                "{failed} of 4 writes ended with BLK_STS_NOTSUPP: the NOWAIT refusal reached the submitter instead of falling back to the worker"
            ),
            trace: Vec::new(),
        });
    }
    Ok(done(&s, Verdict::of(v)))
}

/// L4: a device 64 KiB into a sparse file. Each of 8 blocks is written twice: the first write into
/// the hole falls back to the worker, the second (after the worker allocated the block) is a
/// NOWAIT hit; then every block is read back (NOWAIT).
fn check_l4_data(variant: LoopVariant, trace: bool) -> Result<LoopRun, SimError> {
    let s = machine(variant, BackingKind::Sparse, 64 << 10, trace)?;
    let blocks: Vec<u32> = (0..8).map(|i| i * 5).collect();
    for &b in &blocks {
        io(&s, LoopOp::Write, b);
    }
    s.settle(BUDGET);
    for &b in &blocks {
        io(&s, LoopOp::Write, b);
    }
    let mut v = s.settle(BUDGET);
    v.extend(s.verify_devices(BUDGET));
    // L2 covers the splats; this check is about the data and the bios.
    keep(
        &mut v,
        &[
            Invariant::DataMismatch,
            Invariant::Stranded,
            Invariant::EndIoOnce,
        ],
    );
    Ok(done(&s, Verdict::of(v)))
}

/// L5: the backing file's `f_mode` lacks `FMODE_NOWAIT` (a file system that does not set it; a
/// scenario's `loop NAME prealloc nowait=off`): 4 writes and 4 reads of allocated blocks. Such a
/// file ignores `IOCB_NOWAIT`, so a "NOWAIT attempt" is blocking I/O in `loop_queue_rq()`, the
/// submitter's context: `lo_backfile_support_nowait()` must send every command to the worker
/// instead. Every attempt that reached the file is reported; the data must still read back.
fn check_l5_no_fmode_nowait(variant: LoopVariant, trace: bool) -> Result<LoopRun, SimError> {
    let setup = LoopSetup {
        fmode_nowait: false,
        ..LoopSetup::new(variant, BackingKind::Prealloc, 0)
    };
    let s = machine_with(setup, trace)?;
    for b in 0..4 {
        io(&s, LoopOp::Write, b);
    }
    s.settle(BUDGET);
    for b in 0..4 {
        io(&s, LoopOp::Read, b);
    }
    let mut v = s.settle(BUDGET);
    v.extend(s.verify_devices(BUDGET));
    keep(
        &mut v,
        &[
            Invariant::DataMismatch,
            Invariant::Stranded,
            Invariant::EndIoOnce,
        ],
    );
    let (st, _) = s.loop_outcome().unwrap_or_default();
    if st.nowait_tried > 0 {
        v.push(Violation {
            invariant: Invariant::WastedOrFailedAttempt,
            message: format!(
                "{} commands (the 8 I/Os and the read-back) tried IOCB_NOWAIT on a backing without FMODE_NOWAIT: blocking I/O in loop_queue_rq() ({} completed there, {} via the worker)",
                st.nowait_tried, st.nowait_done, st.worker_cmds
            ),
            trace: Vec::new(),
        });
    }
    Ok(done(&s, Verdict::of(v)))
}

/// L6: one write into a hole of the sparse backing file (the NOWAIT attempt, where the version
/// makes one, gets -EAGAIN and falls back), the worker writes it; then `fsfreeze -f` on the
/// backing file system (`freeze_backing`), with the hung-task detector on (120 s). A write
/// whose attempt's `kiocb_start_write()` was never ended keeps `SB_FREEZE_WRITE` up: the freeze
/// waits forever (`HungTask`) and the accounting check at the end reports the writer
/// (`SbWritersUnbalanced`). The data must still read back.
fn check_l6_freeze_after_fallback(variant: LoopVariant, trace: bool) -> Result<LoopRun, SimError> {
    let s = machine(variant, BackingKind::Sparse, 0, trace)?;
    s.kernel.set_hung_task_timeout_secs(120);
    io(&s, LoopOp::Write, 0);
    s.settle(BUDGET);
    s.apply(&Transition::FreezeBacking);
    let mut v = s.settle(BUDGET);
    v.extend(s.verify_devices(BUDGET));
    keep(
        &mut v,
        &[
            Invariant::KernelReport(ReportKind::HungTask),
            Invariant::KernelReport(ReportKind::SbWritersUnbalanced),
            Invariant::DataMismatch,
            Invariant::Stranded,
            Invariant::EndIoOnce,
        ],
    );
    Ok(done(&s, Verdict::of(v)))
}

/// L7: two contiguous writes in CPU0's plug (blk-mq merges them into one request of two bios),
/// a one-shot failure armed at `lo_rw_aio_prep` (the request's `bvec` array,
/// `kmalloc_array(.., GFP_NOIO)`), the unplug. The request must be completed exactly once, with
/// the error: the base's `lo_rw_aio()` returns `-EIO` and `loop_handle_cmd()` completes it; the
/// NOWAIT versions' `goto fail` completes it before `cmd->ref` is armed, the stale count goes to
/// -1, and neither bio ever ends (`Stranded`); `LOOP_SET_STATUS`'s queue freeze, next, waits for
/// it forever (`HungTask`). The blocks must read back as they were.
fn check_l7_prep_allocation_failure(
    variant: LoopVariant,
    trace: bool,
) -> Result<LoopRun, SimError> {
    let s = machine(variant, BackingKind::Prealloc, 0, trace)?;
    s.apply(&Transition::Plug { cpu: 0 });
    io(&s, LoopOp::Write, 1);
    io(&s, LoopOp::Write, 2);
    s.apply(&Transition::FailAlloc {
        site: "lo_rw_aio_prep",
    });
    s.apply(&Transition::Unplug { cpu: 0 });
    // LOOP_SET_STATUS: the queue freeze waits for the request.
    s.apply(&Transition::FreezeLoopQueue);
    let mut v = s.settle(BUDGET);
    v.extend(s.verify_devices(BUDGET));
    keep(
        &mut v,
        &[
            Invariant::KernelReport(ReportKind::HungTask),
            Invariant::KernelReport(ReportKind::Warn),
            Invariant::KernelReport(ReportKind::Bug),
            Invariant::DataMismatch,
            Invariant::Stranded,
            Invariant::EndIoOnce,
        ],
    );
    Ok(done(&s, Verdict::of(v)))
}

/// One row of the loop matrix.
#[derive(Debug)]
pub struct LoopRow {
    /// The check.
    pub check: &'static LoopCheck,
    /// Verdicts and counters per [`LoopVariant::ALL`].
    pub cells: Vec<(Verdict, LoopStats)>,
    /// The twin's verdict.
    pub twin: Option<Verdict>,
}

impl LoopRow {
    /// Cells that differ from the expectation, as `(column, got, expected)` (`None`: the version
    /// has no expectation for this check in [`LOOP_EXPECTED`]).
    pub fn mismatches(&self) -> Vec<(String, &'static str, Option<Expect>)> {
        let mut out = Vec::new();
        for (v, (cell, _)) in LoopVariant::ALL.iter().zip(&self.cells) {
            let e = loop_expected(self.check.id, v.name);
            if !e.is_some_and(|e| cell.matches(e)) {
                out.push((v.name.to_owned(), cell.word(), e));
            }
        }
        if let (Some(t), Some(tw)) = (&self.twin, self.check.twin) {
            if !t.matches(tw.expect) {
                out.push(("twin".to_owned(), t.word(), Some(tw.expect)));
            }
        }
        out
    }
}

/// Every check on every loop variant and its twin.
pub fn loop_matrix() -> Result<Vec<LoopRow>, SimError> {
    let mut rows = Vec::new();
    for c in &LOOP_CHECKS {
        let mut cells = Vec::new();
        for v in LoopVariant::ALL {
            let r = run_loop_check(c.id, v, false)?;
            cells.push((r.verdict, r.stats));
        }
        let twin = match twin_variant(c) {
            Some(v) => Some(run_loop_check(c.id, v, false)?.verdict),
            None => None,
        };
        rows.push(LoopRow {
            check: c,
            cells,
            twin,
        });
    }
    Ok(rows)
}

/// The matrix as text, one column per [`LoopVariant::ALL`], with L1's wasted-attempt counts.
pub fn render_loop(rows: &[LoopRow]) -> String {
    let width = crate::checks::findings::column_width;
    let mut out = format!("{:<66} ", "loop check (seed 004)");
    for v in LoopVariant::ALL {
        out.push_str(&format!("{:<w$} ", v.name, w = width(v.name)));
    }
    out.push_str("twin\n");
    for r in rows {
        out.push_str(&format!(
            "{:<66} ",
            format!("{} {}", r.check.id, r.check.title)
        ));
        for (i, v) in LoopVariant::ALL.iter().enumerate() {
            let word = r.cells.get(i).map_or("-", |c| c.0.word());
            out.push_str(&format!("{word:<w$} ", w = width(v.name)));
        }
        match (&r.twin, r.check.twin) {
            (Some(t), Some(tw)) => {
                out.push_str(&format!("{} ({} {})", t.word(), tw.base.name, tw.knob))
            }
            _ => out.push('-'),
        }
        out.push('\n');
        if r.check.id == "L1" {
            let counts: Vec<String> = LoopVariant::ALL
                .iter()
                .zip(&r.cells)
                .map(|(v, (_, s))| {
                    format!(
                        "{}: {} EAGAIN, {} hint-skipped, {} via worker",
                        v.name, s.nowait_eagain, s.hint_skipped, s.worker_cmds
                    )
                })
                .collect();
            out.push_str(&format!("   ({})\n", counts.join("; ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every loop version has exactly one row, in `LoopVariant::ALL`'s order, covering every check.
    #[test]
    fn every_loop_variant_has_one_row_covering_every_check() {
        let rows: Vec<&str> = LOOP_EXPECTED.iter().map(|r| r.variant.name).collect();
        assert_eq!(rows, LoopVariant::names().collect::<Vec<_>>());
        for r in LOOP_EXPECTED {
            assert_eq!(LoopVariant::by_name(r.variant.name), Some(r.variant));
            let ids: Vec<&str> = r.cells.iter().map(|(id, _)| *id).collect();
            assert_eq!(ids, LOOP_CHECKS.iter().map(|c| c.id).collect::<Vec<_>>());
        }
    }

    /// `freeze_backing` / `thaw_backing`: no arguments, only with a `loop` header, written back as
    /// read; a thaw of an unfrozen backing is the kernel's `-EINVAL` (refused), a second freeze
    /// its `-EBUSY`.
    #[test]
    fn freeze_and_thaw_lines_need_a_loop_and_follow_the_kernels_refusals() {
        use crate::scenario::Scenario;
        for (text, what) in [
            ("freeze_backing\n", "needs a `loop` header line"),
            (
                "null_blk irqmode=0\nthaw_backing\n",
                "needs a `loop` header line",
            ),
            ("loop v5 sparse\nfreeze_backing now\n", "nothing"),
        ] {
            let e = Scenario::parse(text, "t.scn").unwrap_err();
            assert!(e.message.contains(what), "{text}: {e}");
        }
        let sc =
            Scenario::parse("loop v5 sparse\nfreeze_backing\nthaw_backing\n", "t.scn").unwrap();
        let lines: Vec<String> = sc
            .transitions
            .iter()
            .map(|(_, t)| t.to_scenario_line())
            .collect();
        assert_eq!(lines, ["freeze_backing", "thaw_backing"]);
        let s = machine(LoopVariant::BASE, BackingKind::Sparse, 0, false).unwrap();
        let thaw = s.try_apply(&Transition::ThawBacking).unwrap_err();
        assert!(thaw.0.contains("thaw_super(vdb)"), "{thaw}");
        assert_eq!(s.try_apply(&Transition::FreezeBacking), Ok(()));
        let again = s.try_apply(&Transition::FreezeBacking).unwrap_err();
        assert!(again.0.contains("freeze_super(vdb)"), "{again}");
        assert_eq!(s.try_apply(&Transition::ThawBacking), Ok(()));
        assert!(s.settle(BUDGET).is_empty());
    }

    #[test]
    fn the_loop_checks_refuse_an_unknown_or_bad_knob_naming_the_known_ones() {
        let c = loop_check("L4").unwrap();
        let e = loop_variant_for(c, "v5", &["bogus=1".to_owned()]).unwrap_err();
        for n in LoopKnob::NAMES {
            assert!(e.contains(n), "{e}");
        }
        let e = loop_variant_for(c, "v5", &["hint=maybe".to_owned()]).unwrap_err();
        assert!(e.contains("expected true or false, got `maybe`"), "{e}");
        let e = loop_variant_for(c, "v6", &[]).unwrap_err();
        for n in LoopVariant::names() {
            assert!(e.contains(n), "{e}");
        }
        assert!(loop_variant_for(loop_check("L1").unwrap(), "twin", &[]).is_err());
        for c in &LOOP_CHECKS {
            if let Some(t) = c.twin {
                assert_eq!(LoopKnob::parse_assignment(&t.knob.to_string()), Ok(t.knob));
                assert_ne!(
                    t.variant(),
                    LoopVariant {
                        name: "twin",
                        ..t.base
                    }
                );
            }
        }
    }
}
