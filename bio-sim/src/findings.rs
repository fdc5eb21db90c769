//! The finding gallery: each review finding of the seed thread as a check that runs a scenario on a
//! [`Sim`] and asks the [`oracle`](crate::oracle). A check is **caught** on every variant that has
//! the bug and **clean** on every variant that fixed it; where no posted version has the bug, the
//! *twin* column runs the same check on a version with one knob flipped, to show the check can
//! fail. Findings 6 and 8 are measurements, reported as figures.

use crate::oracle::{Invariant, Need, Violation};
use crate::scenario::Transition;
use crate::sim::{CompletionContext, Sim, SimConfig, SimError};
use bio_core::block::complete_in_task::Variant;
use bio_core::block::{bio_endio, BioFlag, ReqOp};
use bio_core::fs::buffer::submit_bh_wbc_set_flags;
use bio_core::fs::iomap::iomap_writepages;
use bio_core::kernel::{CpuId, PreemptModel, ReportKind};
use bio_core::mm::filemap::AddressSpace;
use bio_core::sync::UntrackedArc;
use bio_core::workqueue::{PoolId, RescuerAffinity};
use bio_core::KernelConfig;
use hotplug::CPUHP_AP_WORKQUEUE_ONLINE;
use std::fmt;

/// A finding of the gallery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finding {
    /// Its number in DESIGN.md.
    pub id: u32,
    /// A one-line title.
    pub title: &'static str,
    /// The docs chapter explaining it.
    pub chapter: &'static str,
    /// A check (caught/clean per variant) or a measurement.
    pub kind: FindingKind,
}

/// What a finding produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingKind {
    /// A check with an expected verdict per posted variant, and its buggy twin if it has one.
    Check {
        /// Expected verdicts for v5, v6, v6-review, v7.
        expected: [Expect; 4],
        /// The twin, if the finding has one: a base variant with one knob flipped (or a machine
        /// knob), expected to be caught.
        twin: Option<Twin>,
    },
    /// A measured figure.
    Figure,
}

/// The verdict a cell should have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The check must catch the bug.
    Caught,
    /// The check must pass.
    Clean,
    /// The variant does not have the mechanism (v5 has no `bio_complete_in_task()`).
    NotApplicable,
}

/// A buggy twin: what differs from a posted version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Twin {
    /// The verdict it must get: caught for a buggy twin, clean for a fixed one (finding 3, whose
    /// bug every posted version has).
    pub expect: Expect,
    /// The posted version it starts from.
    pub base: &'static str,
    /// The knob flipped, `name=value`, or a machine knob.
    pub knob: &'static str,
}

/// The verdict of one cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The oracle reported the finding's violation.
    Caught(Vec<Violation>),
    /// No violation of the finding's kind.
    Clean,
    /// Not applicable to this variant.
    NotApplicable(&'static str),
}

impl Verdict {
    /// The matrix word.
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Caught(_) => "caught",
            Verdict::Clean => "clean",
            Verdict::NotApplicable(_) => "n/a",
        }
    }

    /// Caught with `v`, or clean if `v` is empty.
    pub fn of(v: Vec<Violation>) -> Verdict {
        if v.is_empty() {
            Verdict::Clean
        } else {
            Verdict::Caught(v)
        }
    }

    /// Whether this verdict is the expected one.
    pub fn matches(&self, e: Expect) -> bool {
        matches!(
            (self, e),
            (Verdict::Caught(_), Expect::Caught)
                | (Verdict::Clean, Expect::Clean)
                | (Verdict::NotApplicable(_), Expect::NotApplicable)
        )
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

use Expect::{Caught as C, Clean as K, NotApplicable as NA};

/// The gallery, in DESIGN.md's order.
pub const FINDINGS: [Finding; 11] = [
    Finding {
        id: 1,
        title: "hotplug rollback strands deferred bios",
        chapter: "docs/findings/01-rollback-strands.md",
        kind: FindingKind::Check {
            expected: [C, C, K, K],
            twin: Some(Twin {
                expect: C,
                base: "v7",
                knob: "requeue_on_online=false",
            }),
        },
    },
    Finding {
        id: 2,
        title: "bio_complete_in_task() re-defers forever without PREEMPT_COUNT",
        chapter: "docs/findings/02-endless-redeferral.md",
        kind: FindingKind::Check {
            expected: [NA, C, K, K],
            twin: Some(Twin {
                expect: C,
                base: "v7",
                knob: "in_task_guard=false",
            }),
        },
    },
    Finding {
        id: 3,
        title: "a deferred bio without bi_end_io",
        chapter: "docs/findings/03-no-end-io.md",
        kind: FindingKind::Check {
            expected: [C, C, C, C],
            twin: Some(Twin {
                expect: K,
                base: "v7",
                knob: "end_io_null_check=true",
            }),
        },
    },
    Finding {
        id: 4,
        title: "local_lock on PREEMPT_RT taken from hardirq",
        chapter: "docs/findings/04-rt-local-lock.md",
        kind: FindingKind::Check {
            expected: [K, C, K, K],
            twin: Some(Twin {
                expect: C,
                base: "v7",
                knob: "list=local_lock",
            }),
        },
    },
    Finding {
        id: 5,
        title: "the WQ_MEM_RECLAIM rescuer must run on the pool's CPU",
        chapter: "docs/findings/05-rescuer.md",
        kind: FindingKind::Check {
            expected: [K, K, K, K],
            twin: Some(Twin {
                expect: C,
                base: "v7",
                knob: "machine: rescuer unbound",
            }),
        },
    },
    Finding {
        id: 6,
        title: "read completions deferred for nothing",
        chapter: "docs/findings/06-deferred-reads.md",
        kind: FindingKind::Figure,
    },
    Finding {
        id: 7,
        title: "the need_resched() yield must not strand bios",
        chapter: "docs/findings/07-need-resched-yield.md",
        kind: FindingKind::Check {
            expected: [K, K, K, K],
            twin: Some(Twin {
                expect: C,
                base: "v6",
                knob: "yield_keeps_batch=false",
            }),
        },
    },
    Finding {
        id: 8,
        title: "the 1-jiffy delay: latency and wake-ups",
        chapter: "docs/findings/08-delay.md",
        kind: FindingKind::Figure,
    },
    Finding {
        id: 9,
        title: "bios completed between down_prep and dead are drained",
        chapter: "docs/findings/09-dead-drain.md",
        kind: FindingKind::Check {
            expected: [K, K, K, K],
            twin: Some(Twin {
                expect: C,
                base: "v7",
                knob: "dead_drains=false",
            }),
        },
    },
    Finding {
        id: 10,
        title: "offline CPUs disabled at init (vmstat protocol)",
        chapter: "docs/findings/10-init-protocol.md",
        kind: FindingKind::Check {
            expected: [K, K, K, K],
            twin: Some(Twin {
                expect: C,
                base: "v7",
                knob: "init_disables_offline=false",
            }),
        },
    },
    Finding {
        id: 11,
        title: "DONTCACHE writeback ended in IRQ leaves folios cached (the gap)",
        chapter: "docs/findings/11-dontcache-gap.md",
        kind: FindingKind::Check {
            expected: [K, K, K, K],
            twin: Some(Twin {
                expect: C,
                base: "v7",
                knob: "fs_flag=false",
            }),
        },
    },
];

/// Looks a finding up.
pub fn finding(id: u32) -> Option<&'static Finding> {
    FINDINGS.iter().find(|f| f.id == id)
}

/// The machine a twin runs on: its variant and rescuer affinity.
pub fn twin_machine(t: &Twin) -> (Variant, RescuerAffinity) {
    let mut v = Variant::by_name(t.base).unwrap_or_default();
    v.name = "twin";
    if let Some(rest) = t.knob.strip_prefix("machine: ") {
        let affinity = if rest == "rescuer unbound" {
            RescuerAffinity::Unbound
        } else {
            RescuerAffinity::PoolCpu
        };
        return (v, affinity);
    }
    if let Some((k, val)) = t.knob.split_once('=') {
        // The gallery's own knobs are valid by construction; a typo shows as a clean twin.
        let _ = v.set_knob(k, val);
    }
    (v, RescuerAffinity::PoolCpu)
}

/// One check run: the verdict and the machine it ran on (for its trace).
#[derive(Debug)]
pub struct CheckRun {
    /// The verdict.
    pub verdict: Verdict,
    /// The trace of the scenario.
    pub trace: String,
}

fn sim(
    variant: Variant,
    kernel: KernelConfig,
    online: u32,
    rescuer: RescuerAffinity,
    trace: bool,
) -> Result<Sim, SimError> {
    Sim::new(SimConfig {
        kernel,
        nr_cpus: 2,
        online,
        variant,
        rescuer,
        seed: 1,
        trace,
    })
}

fn verdict(v: Vec<Violation>, wanted: impl Fn(&Violation) -> bool) -> Verdict {
    Verdict::of(v.into_iter().filter(|x| wanted(x)).collect())
}

const BUDGET: u64 = 5_000;

/// Runs finding `id`'s check on `variant` (with the machine's `rescuer` affinity). Figures are not
/// checks: `None`.
pub fn run_check(
    id: u32,
    variant: Variant,
    rescuer: RescuerAffinity,
    trace: bool,
) -> Option<Result<CheckRun, SimError>> {
    let f = finding(id)?;
    if f.kind == FindingKind::Figure {
        return None;
    }
    Some(run_check_inner(id, variant, rescuer, trace))
}

fn run_check_inner(
    id: u32,
    variant: Variant,
    rescuer: RescuerAffinity,
    trace: bool,
) -> Result<CheckRun, SimError> {
    let default = KernelConfig::default();
    let one = CpuId(1);
    let done = |s: &Sim, verdict: Verdict| CheckRun {
        verdict,
        trace: s.trace(),
    };
    match id {
        1 => {
            // Offline CPU1 with the workqueue:online teardown failing, so the offline rolls back
            // after the batcher's down_prep disabled the work; a bio completes in between.
            let s = sim(variant, default, 2, rescuer, trace)?;
            let v = offline_with_completion_after_down_prep(&s, Some(CPUHP_AP_WORKQUEUE_ONLINE.0));
            Ok(done(&s, verdict(v, |x| x.invariant == Invariant::Stranded)))
        }
        2 => {
            if !variant.dynamic_helper {
                return Ok(CheckRun {
                    verdict: Verdict::NotApplicable("no bio_complete_in_task() in this version"),
                    trace: String::new(),
                });
            }
            let s = sim(
                variant,
                KernelConfig::without_preempt_count(PreemptModel::None),
                2,
                rescuer,
                trace,
            )?;
            s.apply(&Transition::Complete {
                cpu: 0,
                ctx: CompletionContext::Hardirq,
                need: Need::Dynamic,
            });
            let v = s.settle(BUDGET);
            Ok(done(
                &s,
                verdict(v, |x| {
                    matches!(x.invariant, Invariant::Stranded | Invariant::NoQuiescence)
                        || x.message.contains("biosim: livelock")
                }),
            ))
        }
        3 => {
            // A flush bio flagged BIO_COMPLETE_IN_TASK but without bi_end_io, completed in hardirq.
            let s = sim(variant, default, 2, rescuer, trace)?;
            let mut bio = s.kernel.bio_alloc(ReqOp::Flush, 0);
            bio.set_flag(BioFlag::CompleteInTask);
            s.rt.on_cpu(
                CpuId(0),
                "bio_endio(flush bio, BIO_COMPLETE_IN_TASK, no bi_end_io) from hardirq",
                |cx| cx.with_hardirq(|cx| bio_endio(bio, cx)),
            );
            let v = s.settle(BUDGET);
            Ok(done(
                &s,
                verdict(v, |x| {
                    x.invariant == Invariant::KernelReport(ReportKind::Bug)
                        && x.message.contains("NULL pointer")
                }),
            ))
        }
        4 => {
            let s = sim(
                variant,
                KernelConfig::for_model(PreemptModel::Rt),
                2,
                rescuer,
                trace,
            )?;
            s.apply(&Transition::Complete {
                cpu: 0,
                ctx: CompletionContext::Hardirq,
                need: Need::Flag,
            });
            let v = s.settle(BUDGET);
            Ok(done(
                &s,
                verdict(v, |x| {
                    x.invariant == Invariant::KernelReport(ReportKind::InvalidWaitContext)
                }),
            ))
        }
        5 => {
            // CPU1's pool is congested: only the rescuer can run the batch's work. Offer it on the
            // other CPU first: the kernel never does (the rescuer attaches to the pool's CPU).
            let s = sim(variant, default, 2, rescuer, trace)?;
            let congested = s.kernel.set_pool_congested(PoolId::Cpu(one), true);
            debug_assert!(congested, "the machine has CPU1");
            s.apply(&Transition::Complete {
                cpu: 1,
                ctx: CompletionContext::Hardirq,
                need: Need::Flag,
            });
            for _ in 0..3 {
                s.apply(&Transition::Tick);
            }
            let off_cpu = crate::runtime::Event::Rescuer {
                pool: PoolId::Cpu(one),
                on: CpuId(0),
            };
            if s.rt.enabled().contains(&off_cpu) {
                let _ = s.rt.step(off_cpu);
            }
            let v = s.settle(BUDGET);
            Ok(done(
                &s,
                verdict(v, |x| x.invariant == Invariant::WorkOffCpu),
            ))
        }
        7 => {
            // Three bios wait when the worker runs with need_resched() set.
            let s = sim(variant, default, 2, rescuer, trace)?;
            for _ in 0..3 {
                s.apply(&Transition::Complete {
                    cpu: 0,
                    ctx: CompletionContext::Hardirq,
                    need: Need::Flag,
                });
            }
            s.apply(&Transition::Tick);
            s.apply(&Transition::NeedResched { cpu: 0 });
            s.apply(&Transition::RunWorker { cpu: 0 });
            let v = s.settle(BUDGET);
            Ok(done(&s, verdict(v, |x| x.invariant == Invariant::Stranded)))
        }
        9 => {
            // A bio completes on CPU1 after down_prep disabled the work, before CPU1 dies.
            let s = sim(variant, default, 2, rescuer, trace)?;
            let v = offline_with_completion_after_down_prep(&s, None);
            Ok(done(&s, verdict(v, |x| x.invariant == Invariant::Stranded)))
        }
        10 => {
            // CPU1 is offline at boot and comes up once: online's enable must balance.
            let s = sim(variant, default, 1, rescuer, trace)?;
            s.apply(&Transition::Hotplug {
                cpu: 1,
                up: true,
                fail_at: None,
            });
            while s.apply(&Transition::HotplugStep) {}
            s.apply(&Transition::Complete {
                cpu: 1,
                ctx: CompletionContext::Hardirq,
                need: Need::Flag,
            });
            let v = s.settle(BUDGET);
            Ok(done(
                &s,
                verdict(v, |x| x.message.contains("disable count underflowed")),
            ))
        }
        11 => {
            // RWF_DONTCACHE writes of 8 pages, written back by iomap, the device IRQ on CPU1 ends
            // the bios; at quiescence no dropbehind folio may be left in the page cache.
            let s = sim(variant, default, 2, rescuer, trace)?;
            let mapping = UntrackedArc::new(AddressSpace::new());
            for i in 0..8u64 {
                mapping.write_page(i, &[i as u8; 64], true);
            }
            for bio in iomap_writepages(&s.kernel, &mapping, 0, 7, &variant) {
                let what = format!(
                    "device IRQ: bio_endio(writeback bio#{}{}) from hardirq",
                    bio.id(),
                    if bio.flagged(BioFlag::CompleteInTask) {
                        ", BIO_COMPLETE_IN_TASK"
                    } else {
                        ""
                    }
                );
                s.rt.on_cpu(one, &what, |cx| cx.with_hardirq(|cx| bio_endio(bio, cx)));
            }
            let mut v = s.settle(BUDGET);
            let left = mapping.dropbehind_left();
            if !left.is_empty() {
                let st = mapping.stats();
                v.push(Violation {
                    invariant: Invariant::DropbehindCached,
                    message: format!(
                        "{} of 8 DONTCACHE folios still cached after writeback (pages {left:?}; folio_end_dropbehind() skipped {} outside task context)",
                        left.len(),
                        st.skipped_not_in_task
                    ),
                    trace: Vec::new(),
                });
            }
            Ok(done(
                &s,
                verdict(v, |x| x.invariant == Invariant::DropbehindCached),
            ))
        }
        _ => Ok(CheckRun {
            verdict: Verdict::NotApplicable("no such check"),
            trace: String::new(),
        }),
    }
}

/// Starts `cpu_down(CPU1)` (with `hotplug/fail` at `fail_at`), runs its first step (the batcher's
/// `down_prep`: the highest state with a teardown), completes a flagged bio on CPU1 from hardirq,
/// finishes the operation (or its rollback) and settles.
fn offline_with_completion_after_down_prep(s: &Sim, fail_at: Option<i32>) -> Vec<Violation> {
    s.apply(&Transition::Hotplug {
        cpu: 1,
        up: false,
        fail_at,
    });
    s.apply(&Transition::HotplugStep);
    s.apply(&Transition::Complete {
        cpu: 1,
        ctx: CompletionContext::Hardirq,
        need: Need::Flag,
    });
    while s.apply(&Transition::HotplugStep) {}
    s.settle(BUDGET)
}

/// Finding 6's figure for one variant: of `n` reads and `n` writes on dropbehind folios submitted
/// through `submit_bh_wbc()` and completed in hardirq, how many reads went through the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeferredReads {
    /// Reads submitted.
    pub reads: u32,
    /// Reads whose completion was deferred to the worker.
    pub deferred_reads: u32,
    /// Writes deferred (all of them, in every version).
    pub deferred_writes: u32,
}

/// Measures finding 6 on `variant`.
pub fn deferred_reads(variant: Variant, n: u32) -> Result<DeferredReads, SimError> {
    let s = sim(
        variant,
        KernelConfig::default(),
        2,
        RescuerAffinity::PoolCpu,
        false,
    )?;
    let mut ids = Vec::new();
    for i in 0..2 * n {
        let op = if i % 2 == 0 {
            ReqOp::Read
        } else {
            ReqOp::Write
        };
        let mut bio = s.oracle.bio(&s.kernel, op, Need::Any);
        submit_bh_wbc_set_flags(&mut bio, true, &variant);
        ids.push((op, bio.id()));
        s.rt.on_cpu(CpuId(0), "end_bio_bh_io_sync from hardirq", |cx| {
            cx.with_hardirq(|cx| bio_endio(bio, cx))
        });
    }
    s.settle(BUDGET);
    let mut out = DeferredReads {
        reads: n,
        deferred_reads: 0,
        deferred_writes: 0,
    };
    for (op, id) in ids {
        if s.oracle.deferrals(id) > 0 {
            match op {
                ReqOp::Read => out.deferred_reads += 1,
                _ => out.deferred_writes += 1,
            }
        }
    }
    Ok(out)
}

/// One row of the matrix.
#[derive(Debug)]
pub struct Row {
    /// The finding.
    pub finding: &'static Finding,
    /// Verdicts for v5, v6, v6-review, v7 (checks) — empty for figures.
    pub cells: Vec<Verdict>,
    /// The twin's verdict.
    pub twin: Option<Verdict>,
    /// Figures, as text (figure rows).
    pub figure: Option<String>,
}

impl Row {
    /// Cells that differ from the expectation, as `(column, got, expected)`.
    pub fn mismatches(&self) -> Vec<(String, &'static str, Expect)> {
        let mut out = Vec::new();
        if let FindingKind::Check { expected, twin } = self.finding.kind {
            for ((v, cell), e) in Variant::ALL.iter().zip(&self.cells).zip(expected) {
                if !cell.matches(e) {
                    out.push((v.name.to_owned(), cell.word(), e));
                }
            }
            if let (Some(tw), Some(t)) = (twin, &self.twin) {
                if !t.matches(tw.expect) {
                    out.push(("twin".to_owned(), t.word(), tw.expect));
                }
            }
        }
        out
    }
}

/// Runs every check on every posted variant and its twin, and the figures (finding 8's figure
/// comes from `figure8`, which the caller supplies because it needs the threaded runtime).
pub fn matrix(figure8: &dyn Fn() -> String) -> Result<Vec<Row>, SimError> {
    let mut rows = Vec::new();
    for f in &FINDINGS {
        match f.kind {
            FindingKind::Check { twin, .. } => {
                let mut cells = Vec::new();
                for v in Variant::ALL {
                    cells.push(run_check_inner(f.id, v, RescuerAffinity::PoolCpu, false)?.verdict);
                }
                let twin = match twin {
                    Some(t) => {
                        let (v, r) = twin_machine(&t);
                        Some(run_check_inner(f.id, v, r, false)?.verdict)
                    }
                    None => None,
                };
                rows.push(Row {
                    finding: f,
                    cells,
                    twin,
                    figure: None,
                });
            }
            FindingKind::Figure => {
                let figure = if f.id == 6 {
                    let mut parts = Vec::new();
                    for v in Variant::ALL {
                        let d = deferred_reads(v, 8)?;
                        parts.push(format!(
                            "{}: {}/{} reads deferred",
                            v.name, d.deferred_reads, d.reads
                        ));
                    }
                    parts.join("; ")
                } else {
                    figure8()
                };
                rows.push(Row {
                    finding: f,
                    cells: Vec::new(),
                    twin: None,
                    figure: Some(figure),
                });
            }
        }
    }
    Ok(rows)
}

/// Renders the matrix as text.
pub fn render(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<66} {:<7} {:<7} {:<10} {:<7} {}\n",
        "finding", "v5", "v6", "v6-review", "v7", "twin"
    ));
    for r in rows {
        let title = format!("{:>2} {}", r.finding.id, r.finding.title);
        match &r.figure {
            Some(fig) => out.push_str(&format!("{title:<66} {fig}\n")),
            None => {
                let c = |i: usize| r.cells.get(i).map_or("-", |v| v.word());
                let twin = match (&r.twin, r.finding.kind) {
                    (Some(v), FindingKind::Check { twin: Some(t), .. }) => {
                        format!("{} ({} {})", v.word(), t.base, t.knob)
                    }
                    _ => "-".to_owned(),
                };
                out.push_str(&format!(
                    "{title:<66} {:<7} {:<7} {:<10} {:<7} {twin}\n",
                    c(0),
                    c(1),
                    c(2),
                    c(3)
                ));
            }
        }
    }
    out.push_str("v5's hotplug protocol and need_resched() yield are inferred (see `biosim variants`); v7 is derived from a description of the landed code.\n");
    out
}
