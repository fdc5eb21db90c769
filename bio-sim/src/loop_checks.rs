//! The loop driver's NOWAIT series (seed 004, `drivers/block/loop.c`) as checks, the way the
//! finding gallery does it for the completion batcher: each check runs a scenario on the
//! deterministic runtime over an in-memory backing file ([`MemBacking`]) and must be **caught** on
//! the versions with the problem and **clean** on the ones without. `biosim loop` prints the
//! matrix; `biosim loop --check` fails when a cell differs.

use crate::findings::{Expect, Verdict};
use crate::oracle::{Invariant, Violation};
use crate::sim::{Sim, SimConfig, SimError};
use bio_core::block::{submit_bio_noacct, BioEndIo, ReqOp};
use bio_core::drivers::block::loop_drv::{
    LoopBacking, LoopDevice, LoopStats, LoopVariant, MemBacking, LO_FLAGS_DIRECT_IO,
};
use bio_core::kernel::{CpuId, ReportKind};
use bio_core::sync::UntrackedArc;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

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
const BLOCK: usize = 4096;

/// A 4 KiB block whose bytes name it, so a misplaced block is visible.
fn pattern(n: u64) -> Vec<u8> {
    (0..BLOCK)
        .map(|i| (n as usize * 131 + i / 512) as u8)
        .collect()
}

/// The machine of a loop check: a 2-CPU kernel with the default batcher, a loop device over
/// `mem` with `LO_FLAGS_DIRECT_IO`.
struct Rig {
    s: Sim,
    lo: UntrackedArc<LoopDevice>,
    /// bio id → data its read returned.
    reads: Arc<Mutex<BTreeMap<u64, Vec<u8>>>>,
    /// (bio id, status) of every completion.
    statuses: Arc<Mutex<Vec<(u64, bio_core::block::BlkStatus)>>>,
}

impl Rig {
    fn new(
        variant: LoopVariant,
        mem: MemBacking,
        lo_offset: u64,
        trace: bool,
    ) -> Result<Rig, SimError> {
        let s = Sim::new(SimConfig {
            trace,
            ..SimConfig::default()
        })?;
        let backing: UntrackedArc<dyn LoopBacking> = UntrackedArc::new(mem);
        let lo = LoopDevice::new(
            &s.kernel,
            0,
            backing,
            LO_FLAGS_DIRECT_IO,
            lo_offset,
            variant,
        );
        s.rt.note(format!(
            "# loop0: variant {} ({}), LO_FLAGS_DIRECT_IO, lo_offset={lo_offset}",
            variant.name,
            crate::sim::knob_line(&variant.knobs())
        ));
        Ok(Rig {
            s,
            lo,
            reads: Arc::default(),
            statuses: Arc::default(),
        })
    }

    /// `submit_bio()` of one 4 KiB bio at `sector` from CPU0's task context, tracked by the
    /// oracle; a read's data is kept.
    fn submit(&self, op: ReqOp, sector: u64, data: Vec<u8>) -> u64 {
        let bio = self.s.kernel.bio_alloc(op, sector);
        let id = bio.id();
        self.s.oracle.track(id, false);
        let (oracle, reads) = (Arc::clone(&self.s.oracle), Arc::clone(&self.reads));
        let statuses = Arc::clone(&self.statuses);
        let bio =
            bio.with_data(data)
                .with_end_io(BioEndIo::new("loop_check_end_io", move |bio, cx| {
                    statuses.lock().push((bio.id(), bio.status()));
                    if bio.op() == ReqOp::Read {
                        reads.lock().insert(bio.id(), bio.data());
                    }
                    oracle.completed(bio.id(), cx);
                }));
        self.s.rt.on_cpu(
            CpuId(0),
            &format!("submit_bio({} sector {sector}) to loop0", op.name()),
            |cx| submit_bio_noacct(bio, &*self.lo, cx),
        );
        id
    }

    fn done(self, verdict: Verdict) -> LoopRun {
        LoopRun {
            verdict,
            stats: self.lo.stats(),
            trace: self.s.trace(),
        }
    }
}

/// Runs check `id` on `variant`.
pub fn run_loop_check(id: &str, variant: LoopVariant, trace: bool) -> Result<LoopRun, SimError> {
    match id {
        "L1" => {
            // 32 random-order 4 KiB writes to a sparse file, submitted back to back (a queue
            // depth of 32), then the worker drains.
            let r = Rig::new(variant, MemBacking::sparse(1 << 20), 0, trace)?;
            let n = 32u64;
            for i in 0..n {
                let block = (i * 37) % 256; // a permutation of 0..256, first 32 of it
                r.submit(ReqOp::Write, block * 8, pattern(block));
            }
            let mut v = r.s.settle(BUDGET);
            let st = r.lo.stats();
            // Anything stranded or ended twice is reported as such, beside the count.
            v.retain(|x| matches!(x.invariant, Invariant::Stranded | Invariant::EndIoOnce));
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
            let verdict = Verdict::of(v);
            Ok(r.done(verdict))
        }
        "L2" => {
            let r = Rig::new(variant, MemBacking::sparse(1 << 20), 0, trace)?;
            r.submit(ReqOp::Write, 0, pattern(0));
            let v = r.s.settle(BUDGET);
            let verdict = Verdict::of(
                v.into_iter()
                    .filter(|x| x.message.contains("lockdep_assert_held"))
                    .collect(),
            );
            Ok(r.done(verdict))
        }
        "L3" => {
            // A backing whose every IOCB_NOWAIT call returns -EOPNOTSUPP synchronously (an ext4
            // file whose direct I/O falls back to buffered I/O refuses a NOWAIT write so), four
            // writes; what the submitter sees and what the kernel logs.
            let mem = MemBacking::preallocated(1 << 20).refusing_nowait();
            let r = Rig::new(variant, mem, 0, trace)?;
            let ids: Vec<u64> = (0..4)
                .map(|i| r.submit(ReqOp::Write, i * 8, pattern(i)))
                .collect();
            let mut v = r.s.settle(BUDGET);
            // The double completion is a kernel BUG the oracle already reports.
            v.retain(|x| {
                matches!(
                    x.invariant,
                    Invariant::KernelReport(ReportKind::Bug)
                        | Invariant::Stranded
                        | Invariant::EndIoOnce
                )
            });
            let failed = r
                .statuses
                .lock()
                .iter()
                .filter(|(id, st)| ids.contains(id) && !st.is_ok())
                .count();
            if failed > 0 {
                v.push(Violation {
                    invariant: Invariant::WastedOrFailedAttempt,
                    message: format!(
                        "{failed} of 4 writes ended with BLK_STS_NOTSUPP: the NOWAIT refusal reached the submitter instead of falling back to the worker"
                    ),
                    trace: Vec::new(),
                });
            }
            let verdict = Verdict::of(v);
            Ok(r.done(verdict))
        }
        "L4" => {
            // A device at lo_offset 64 KiB into a file whose first half is allocated (NOWAIT
            // writes hit) and second half sparse (NOWAIT writes fall back): write 16 blocks in both
            // halves, drain, read them all back.
            let mem = MemBacking::sparse(2 << 20);
            for b in 0..256u64 {
                // Preallocate the first MiB (as fallocate would).
                let _ = mem.fallocate(
                    bio_core::drivers::block::loop_drv::Fallocate::ZeroRange,
                    b * 4096,
                    4096,
                );
            }
            let r = Rig::new(variant, mem, 64 << 10, trace)?;
            let blocks: Vec<u64> = (0..8)
                .map(|i| i * 5)
                .chain((0..8).map(|i| 300 + i * 3))
                .collect();
            for &b in &blocks {
                r.submit(ReqOp::Write, b * 8, pattern(b));
            }
            r.s.settle(BUDGET);
            let ids: Vec<(u64, u64)> = blocks
                .iter()
                .map(|&b| (b, r.submit(ReqOp::Read, b * 8, vec![0; BLOCK])))
                .collect();
            let mut v = r.s.settle(BUDGET);
            let reads = r.reads.lock().clone();
            for (b, id) in ids {
                match reads.get(&id) {
                    Some(d) if *d == pattern(b) => {}
                    Some(_) => v.push(Violation {
                        invariant: Invariant::DataMismatch,
                        message: format!(
                            "loop0 block {b}: read back differs from what was written"
                        ),
                        trace: Vec::new(),
                    }),
                    None => {} // the oracle reports it stranded
                }
            }
            // L2 covers the splats; this check is about the data and the bios.
            v.retain(|x| {
                matches!(
                    x.invariant,
                    Invariant::DataMismatch | Invariant::Stranded | Invariant::EndIoOnce
                )
            });
            let verdict = Verdict::of(v);
            Ok(r.done(verdict))
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
