//! The loop driver's NOWAIT series (seed 004, `drivers/block/loop.c`) as checks, the way the
//! finding gallery does it for the completion batcher: each check runs a scenario on the
//! deterministic runtime, with a loop device over an in-memory backing file attached to a [`Sim`]
//! ([`crate::loop_sim`], the same machinery scenario files use), and must be **caught** on the
//! versions with the problem and **clean** on the ones without. `biosim loop` prints the matrix;
//! `biosim loop --check` fails when a cell differs.

use crate::checks::verdict::{Expect, Verdict};
use crate::machine::loop_rig::{BackingKind, LoopOp, LoopSetup};
use crate::machine::oracle::{Invariant, Violation};
use crate::machine::sim::{Sim, SimConfig, SimError};
use crate::machine::transition::Transition;
use bio_core::drivers::block::loop_drv::{LoopStats, LoopVariant};
use bio_core::kernel::ReportKind;

/// One loop check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopCheck {
    /// `L1`, `L2`, ...
    pub id: &'static str,
    /// A one-line title.
    pub title: &'static str,
    /// Expected verdicts for base, v5-no-hint, v4, v5 ([`LoopVariant::ALL`]'s order).
    pub expected: [Expect; 4],
    /// A twin (a knob flipped on v5) and its expected verdict: caught for a check no posted
    /// version fails, clean for one every NOWAIT version fails (the fix, shown to pass).
    pub twin: Option<(&'static str, Expect)>,
}

use Expect::{Caught as C, Clean as K};

/// The checks.
pub const LOOP_CHECKS: [LoopCheck; 4] = [
    LoopCheck {
        id: "L1",
        title: "NOWAIT-first wastes an attempt per write to a sparse file",
        expected: [K, C, K, K],
        twin: None,
    },
    LoopCheck {
        id: "L2",
        title: "lockdep_assert_held() of a lock the caller does not hold (syzbot)",
        expected: [K, K, C, K],
        twin: None,
    },
    LoopCheck {
        id: "L3",
        title: "a backing that refuses IOCB_NOWAIT (-EOPNOTSUPP)",
        expected: [K, C, C, C],
        twin: Some(("nowait_completes_on_eopnotsupp=false", K)),
    },
    LoopCheck {
        id: "L4",
        title: "data read back equals data written, each bio ends once",
        expected: [K, K, K, K],
        twin: Some(("nowait_adds_lo_offset=false", C)),
    },
];

/// Looks a check up by id (`L2` or `2`).
pub fn loop_check(id: &str) -> Option<&'static LoopCheck> {
    let id = id.trim_start_matches(['L', 'l']);
    LOOP_CHECKS.iter().find(|c| &c.id[1..] == id)
}

/// The variant a twin runs: v5 with the knob flipped.
pub fn twin_variant(knob: &str) -> LoopVariant {
    let mut v = LoopVariant::V5;
    v.name = "twin";
    match knob {
        "nowait_adds_lo_offset=false" => v.nowait_adds_lo_offset = false,
        "nowait_completes_on_eopnotsupp=false" => v.nowait_completes_on_eopnotsupp = false,
        _ => {}
    }
    v
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
}

const BUDGET: u64 = 20_000;

/// A scenario machine (2 CPUs, the default batcher) with a loop device over `backing`.
fn machine(
    variant: LoopVariant,
    backing: BackingKind,
    offset: u64,
    trace: bool,
) -> Result<Sim, SimError> {
    let s = Sim::new(SimConfig {
        trace,
        ..SimConfig::default()
    })?;
    s.attach_loop(LoopSetup {
        variant,
        backing,
        offset,
    });
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
    }
}

/// Runs check `id` on `variant`.
pub fn run_loop_check(id: &str, variant: LoopVariant, trace: bool) -> Result<LoopRun, SimError> {
    let keep =
        |v: &mut Vec<Violation>, kinds: &[Invariant]| v.retain(|x| kinds.contains(&x.invariant));
    match id {
        "L1" => {
            // 32 random-order 4 KiB writes to a sparse file, submitted back to back (a queue
            // depth of 32), then the worker drains.
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
        "L2" => {
            let s = machine(variant, BackingKind::Sparse, 0, trace)?;
            io(&s, LoopOp::Write, 0);
            let v = s.settle(BUDGET);
            let hits = v
                .into_iter()
                .filter(|x| x.message.contains("lockdep_assert_held"))
                .collect();
            Ok(done(&s, Verdict::of(hits)))
        }
        "L3" => {
            // A backing whose every IOCB_NOWAIT call returns -EOPNOTSUPP synchronously (an ext4
            // file whose direct I/O falls back to buffered I/O refuses a NOWAIT write so), four
            // writes; what the submitter sees and what the kernel logs.
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
        "L4" => {
            // A device 64 KiB into a sparse file. Each of 8 blocks is written twice: the first
            // write into the hole falls back to the worker, the second (after the worker
            // allocated the block) is a NOWAIT hit; then every block is read back (NOWAIT).
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
        _ => Ok(LoopRun {
            verdict: Verdict::NotApplicable("no such check"),
            stats: LoopStats::default(),
            trace: String::new(),
        }),
    }
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
    /// Cells that differ from the expectation, as `(column, got, expected)`.
    pub fn mismatches(&self) -> Vec<(String, &'static str, Expect)> {
        let mut out = Vec::new();
        for ((v, (cell, _)), e) in LoopVariant::ALL
            .iter()
            .zip(&self.cells)
            .zip(self.check.expected)
        {
            if !cell.matches(e) {
                out.push((v.name.to_owned(), cell.word(), e));
            }
        }
        if let (Some(t), Some((_, want))) = (&self.twin, self.check.twin) {
            if !t.matches(want) {
                out.push(("twin".to_owned(), t.word(), want));
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
        let twin = match c.twin {
            Some((k, _)) => Some(run_loop_check(c.id, twin_variant(k), false)?.verdict),
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

/// The matrix as text, with L1's wasted-attempt counts.
pub fn render_loop(rows: &[LoopRow]) -> String {
    let mut out = format!(
        "{:<66} {:<7} {:<11} {:<7} {:<7} {}\n",
        "loop check (seed 004)", "base", "v5-no-hint", "v4", "v5", "twin"
    );
    for r in rows {
        let w = |i: usize| r.cells.get(i).map_or("-", |c| c.0.word());
        let title = format!("{} {}", r.check.id, r.check.title);
        let twin = match (&r.twin, r.check.twin) {
            (Some(t), Some((k, _))) => format!("{} (v5 {k})", t.word()),
            _ => "-".to_owned(),
        };
        out.push_str(&format!(
            "{title:<66} {:<7} {:<11} {:<7} {:<7} {twin}\n",
            w(0),
            w(1),
            w(2),
            w(3)
        ));
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
