//! The finding gallery: each review finding of the seed thread as a check that runs a scenario on a
//! [`Sim`] and asks the [`oracle`](crate::machine::oracle). A check is **caught** on every variant that has
//! the bug and **clean** on every variant that fixed it; where no posted version has the bug, the
//! *twin* column runs the same check on a version with one knob flipped, to show the check can
//! fail. Findings 6 and 8 are measurements, reported as figures.
//!
//! What each posted variant must get is its row of [`EXPECTED`], keyed by finding: adding a
//! variant to [`Variant::ALL`] means adding its row here, nothing else in this file.

use super::verdict::{Expect, Verdict};
use crate::machine::modules::{customised, with_knob};
use crate::machine::oracle::{Invariant, Need, Violation};
use crate::machine::sim::{CompletionContext, Sim, SimConfig, SimError};
use crate::machine::transition::Transition;
use bio_core::block::complete_in_task::{Knob, ListKind, ModuleRef, Variant};
use bio_core::block::{bio_endio, BioFlag, ReqOp};
use bio_core::fs::buffer::submit_bh_wbc_set_flags;
use bio_core::kernel::{CpuId, PreemptModel, ReportKind};
use bio_core::mm::dontcache::{DontcacheDesign, PageCacheConfig, WritebackPath};
use bio_core::mm::dropbehind_v3::PAGEVEC_SIZE;
use bio_core::mm::filemap::{AddressSpace, IocbFlags, PAGE_SIZE};
use bio_core::workqueue::{PoolId, RescuerAffinity};
use bio_core::KernelConfig;
use hotplug::{CPUHP_AP_WORKQUEUE_ONLINE, CPUHP_TEARDOWN_CPU};
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
    /// A check, with an expected verdict per posted variant in [`EXPECTED`], and its buggy twin if
    /// it has one.
    Check {
        /// The twin, if the finding has one: a base variant with one knob flipped (or a machine
        /// knob), expected to be caught.
        twin: Option<Twin>,
    },
    /// A measured figure.
    Figure,
}

/// A buggy twin: a posted version with one typed change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Twin {
    /// The verdict it must get: caught for a buggy twin, clean for a fixed one (finding 3, whose
    /// bug every posted version has).
    pub expect: Expect,
    /// The posted version it starts from.
    pub base: Variant,
    /// What differs from `base`.
    pub change: Change,
}

/// What a twin changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// One of the batcher's knobs.
    Knob(Knob),
    /// The machine's rescuer affinity (not a knob of any version).
    Rescuer(RescuerAffinity),
    /// Another module in place of the base's code (a bug no knob of the posted module has).
    Module(ModuleRef),
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Knob(k) => k.fmt(f),
            Change::Rescuer(RescuerAffinity::Unbound) => f.write_str("machine: rescuer unbound"),
            Change::Rescuer(RescuerAffinity::PoolCpu) => f.write_str("machine: rescuer pool"),
            Change::Module(m) => write!(f, "module={}", m.0.name()),
        }
    }
}

impl Twin {
    /// The machine the twin runs on: its variant (named `twin`) and rescuer affinity.
    pub fn machine(&self) -> (Variant, RescuerAffinity) {
        let v = Variant {
            name: "twin",
            ..self.base
        };
        match self.change {
            Change::Knob(k) => (v.with(k), RescuerAffinity::PoolCpu),
            Change::Rescuer(r) => (v, r),
            Change::Module(m) => (
                Variant {
                    name: "twin",
                    ..Variant::module(m.0)
                },
                RescuerAffinity::PoolCpu,
            ),
        }
    }
}

use Expect::{Caught as C, Clean as K, NotApplicable as NA};

const fn twin(expect: Expect, base: Variant, knob: Knob) -> Option<Twin> {
    Some(Twin {
        expect,
        base,
        change: Change::Knob(knob),
    })
}

const fn check(id: u32, title: &'static str, chapter: &'static str, twin: Option<Twin>) -> Finding {
    Finding {
        id,
        title,
        chapter,
        kind: FindingKind::Check { twin },
    }
}

const fn figure(id: u32, title: &'static str, chapter: &'static str) -> Finding {
    Finding {
        id,
        title,
        chapter,
        kind: FindingKind::Figure,
    }
}

/// The gallery, in DESIGN.md's order (15 and 16 are RFC v3's own, docs/findings/15-v3-folio-batch.md).
pub const FINDINGS: [Finding; 16] = [
    check(
        1,
        "hotplug rollback strands deferred bios",
        "docs/findings/01-rollback-strands.md",
        twin(C, Variant::V7, Knob::RequeueOnOnline(false)),
    ),
    check(
        2,
        "bio_complete_in_task() re-defers forever without PREEMPT_COUNT",
        "docs/findings/02-endless-redeferral.md",
        twin(C, Variant::V7, Knob::InTaskGuard(false)),
    ),
    check(
        3,
        "a deferred bio without bi_end_io",
        "docs/findings/03-no-end-io.md",
        twin(K, Variant::V7, Knob::EndIoNullCheck(true)),
    ),
    check(
        4,
        "local_lock on PREEMPT_RT taken from hardirq",
        "docs/findings/04-rt-local-lock.md",
        twin(C, Variant::V7, Knob::List(ListKind::BioListLocalLock)),
    ),
    check(
        5,
        "the WQ_MEM_RECLAIM rescuer must run on the pool's CPU",
        "docs/findings/05-rescuer.md",
        Some(Twin {
            expect: C,
            base: Variant::V7,
            change: Change::Rescuer(RescuerAffinity::Unbound),
        }),
    ),
    figure(
        6,
        "read completions deferred for nothing",
        "docs/findings/06-deferred-reads.md",
    ),
    check(
        7,
        "the need_resched() yield must not strand bios",
        "docs/findings/07-need-resched-yield.md",
        twin(C, Variant::V6, Knob::YieldKeepsBatch(false)),
    ),
    figure(
        8,
        "the 1-jiffy delay: latency and wake-ups",
        "docs/findings/08-delay.md",
    ),
    check(
        9,
        "bios completed between down_prep and dead are drained",
        "docs/findings/09-dead-drain.md",
        twin(C, Variant::V7, Knob::DeadDrains(false)),
    ),
    check(
        10,
        "offline CPUs disabled at init (vmstat protocol)",
        "docs/findings/10-init-protocol.md",
        twin(C, Variant::V7, Knob::InitDisablesOffline(false)),
    ),
    check(
        11,
        "DONTCACHE writeback ended in IRQ leaves folios cached (the gap)",
        "docs/findings/11-dontcache-gap.md",
        twin(C, Variant::V7, Knob::FsFlag(false)),
    ),
    check(
        12,
        "a threaded IRQ handler on PREEMPT_RT completes a flagged bio",
        "docs/findings/12-threaded-irq.md",
        Some(Twin {
            expect: C,
            base: Variant::V7,
            change: Change::Module(ModuleRef(&super::review::IN_TASK_SHORTCUT)),
        }),
    ),
    check(
        13,
        "a completion stream on PREEMPT_NONE: the worker holds the CPU",
        "docs/findings/13-cpu-monopolization.md",
        twin(C, Variant::V6, Knob::NeedReschedYield(false)),
    ),
    check(
        14,
        "lockdep: the list lock taken in hardirq and with IRQs on",
        "docs/findings/14-lockdep-irq-usage.md",
        Some(Twin {
            expect: C,
            base: Variant::V6,
            change: Change::Module(ModuleRef(&super::lockdep_usage::V6_IRQS_ON)),
        }),
    ),
    // RFC v3's bounded batch: no version of the bio series has a bound, so no twin; v3 is the
    // caught column.
    check(
        15,
        "a completion burst past PAGEVEC_SIZE skips the invalidation",
        "docs/findings/15-v3-folio-batch.md",
        None,
    ),
    check(
        16,
        "a rollback after workqueue:online strands a batch",
        "docs/findings/15-v3-folio-batch.md",
        twin(C, Variant::V7, Knob::RequeueOnOnline(false)),
    ),
];

/// One posted variant's row of expectations: the verdict each check must get on it, by finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpectRow {
    /// The variant (one of [`Variant::ALL`]).
    pub variant: Variant,
    /// `(finding id, expected verdict)` for every check of [`FINDINGS`].
    pub cells: &'static [(u32, Expect)],
}

/// Every posted variant's row, in [`Variant::ALL`]'s order (a test checks both lists agree and
/// that every row covers every check).
#[rustfmt::skip]
pub const EXPECTED: &[ExpectRow] = &[
    ExpectRow { variant: Variant::V3,        cells: &[(1, K), (2, NA), (3, K), (4, C), (5, NA), (7, K), (9, K), (10, K), (11, K), (12, C), (13, C), (14, K), (15, C), (16, C)] },
    ExpectRow { variant: Variant::V5,        cells: &[(1, C), (2, NA), (3, C), (4, K), (5, K), (7, K), (9, K), (10, K), (11, K), (12, K), (13, K), (14, K), (15, K), (16, C)] },
    ExpectRow { variant: Variant::V6,        cells: &[(1, C), (2, C),  (3, C), (4, C), (5, K), (7, K), (9, K), (10, K), (11, K), (12, K), (13, K), (14, K), (15, K), (16, C)] },
    ExpectRow { variant: Variant::V6_REVIEW, cells: &[(1, K), (2, K),  (3, C), (4, K), (5, K), (7, K), (9, K), (10, K), (11, K), (12, K), (13, C), (14, K), (15, K), (16, K)] },
    ExpectRow { variant: Variant::V7,        cells: &[(1, K), (2, K),  (3, C), (4, K), (5, K), (7, K), (9, K), (10, K), (11, K), (12, K), (13, C), (14, K), (15, K), (16, K)] },
];

/// What finding `id`'s check must get on the posted variant called `variant` (`None`: no row or no
/// cell for it, itself a mismatch).
pub fn expected(id: u32, variant: &str) -> Option<Expect> {
    EXPECTED
        .iter()
        .find(|r| r.variant.name == variant)?
        .cells
        .iter()
        .find(|(f, _)| *f == id)
        .map(|&(_, e)| e)
}

/// Looks a finding up.
pub fn finding(id: u32) -> Option<&'static Finding> {
    FINDINGS.iter().find(|f| f.id == id)
}

/// The machine a twin runs on: its variant and rescuer affinity.
pub fn twin_machine(t: &Twin) -> (Variant, RescuerAffinity) {
    t.machine()
}

/// The machine `biosim findings --finding N --variant NAME [--knob K=V]...` runs finding `f` on:
/// `twin` (the finding's twin), a posted variant or a registered module by name, with the knobs
/// applied in order (through [`Variant::set_knob`], which refuses a module every knob but
/// `gate_reads` and `fs_flag`). Knobs name a posted variant `custom`; a module keeps its name. The
/// error names the known variants or knobs.
pub fn machine_for(
    f: &Finding,
    name: &str,
    knobs: &[String],
) -> Result<(Variant, RescuerAffinity), String> {
    let (mut variant, rescuer) = if name == "twin" {
        match f.kind {
            FindingKind::Check { twin: Some(t) } => t.machine(),
            _ => return Err(format!("finding {} has no buggy twin", f.id)),
        }
    } else {
        (
            Variant::parse_name(name, &["twin"])?,
            RescuerAffinity::PoolCpu,
        )
    };
    for kv in knobs {
        variant = customised(with_knob(variant, kv)?);
    }
    Ok((variant, rescuer))
}

/// One check run: the verdict and the machine it ran on (for its trace).
#[derive(Debug)]
pub struct CheckRun {
    /// The verdict.
    pub verdict: Verdict,
    /// The trace of the scenario.
    pub trace: String,
    /// The same trace as ftrace records (`--trace FILE`).
    pub ftrace: crate::report::ftrace::Ftrace,
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

pub(super) const BUDGET: u64 = 5_000;

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

/// The machine a check runs on: the variant, the rescuer affinity, whether to record a trace.
#[derive(Debug, Clone, Copy)]
struct On {
    variant: Variant,
    rescuer: RescuerAffinity,
    trace: bool,
}

impl On {
    /// A 2-CPU machine with `online` CPUs up, under `kernel`.
    fn sim(&self, kernel: KernelConfig, online: u32) -> Result<Sim, SimError> {
        sim(self.variant, kernel, online, self.rescuer, self.trace)
    }
}

fn done(s: &Sim, verdict: Verdict) -> CheckRun {
    CheckRun {
        verdict,
        trace: s.trace(),
        ftrace: s.ftrace(),
    }
}

fn run_check_inner(
    id: u32,
    variant: Variant,
    rescuer: RescuerAffinity,
    trace: bool,
) -> Result<CheckRun, SimError> {
    let on = On {
        variant,
        rescuer,
        trace,
    };
    match id {
        1 => check_01_rollback(on),
        2 => check_02_redeferral(on),
        3 => check_03_no_end_io(on),
        4 => check_04_rt_local_lock(on),
        5 => check_05_rescuer(on),
        7 => check_07_need_resched_yield(on),
        9 => check_09_dead_drain(on),
        10 => check_10_init_protocol(on),
        11 => check_11_dontcache_gap(on),
        12 => super::review::check_12_threaded_irq(on.variant, on.rescuer, on.trace)
            .map(|r| done(&r.sim, r.verdict)),
        13 => super::review::check_13_cpu_monopolization(on.variant, on.rescuer, on.trace)
            .map(|(r, _)| done(&r.sim, r.verdict)),
        15 => check_15_burst(on),
        16 => check_16_rollback_unbound(on),
        14 => super::lockdep_usage::check_14_lockdep_usage(
            on.variant,
            KernelConfig::default(),
            on.rescuer,
            on.trace,
        )
        .map(|s| {
            let v = super::lockdep_usage::verdict_14(&s);
            done(&s, v)
        }),
        _ => Ok(CheckRun {
            verdict: Verdict::NotApplicable("no such check"),
            trace: String::new(),
            ftrace: Default::default(),
        }),
    }
}

/// Finding 1: offline CPU1 with the workqueue:online teardown failing, so the offline rolls back
/// after the batcher's down_prep disabled the work; a bio completes in between.
fn check_01_rollback(on: On) -> Result<CheckRun, SimError> {
    let s = on.sim(KernelConfig::default(), 2)?;
    let v = offline_with_completion_after_down_prep(&s, Some(CPUHP_AP_WORKQUEUE_ONLINE.0));
    Ok(done(&s, verdict(v, |x| x.invariant == Invariant::Stranded)))
}

/// Finding 2: a dynamic completion in hardirq without `CONFIG_PREEMPT_COUNT`.
fn check_02_redeferral(on: On) -> Result<CheckRun, SimError> {
    if !on.variant.dynamic_helper {
        return Ok(CheckRun {
            verdict: Verdict::NotApplicable("no bio_complete_in_task() in this version"),
            trace: String::new(),
            ftrace: Default::default(),
        });
    }
    let s = on.sim(KernelConfig::without_preempt_count(PreemptModel::None), 2)?;
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
                || x.message
                    .starts_with(bio_core::block::complete_in_task::LIVELOCK_REPORT)
        }),
    ))
}

/// Finding 3: a flush bio flagged BIO_COMPLETE_IN_TASK but without bi_end_io, completed in hardirq.
fn check_03_no_end_io(on: On) -> Result<CheckRun, SimError> {
    let s = on.sim(KernelConfig::default(), 2)?;
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

/// Finding 4: a flagged completion in hardirq on PREEMPT_RT.
fn check_04_rt_local_lock(on: On) -> Result<CheckRun, SimError> {
    let s = on.sim(KernelConfig::for_model(PreemptModel::Rt), 2)?;
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

/// Finding 5: CPU1's pool is congested: only the rescuer can run the batch's work. Offer it on the
/// other CPU first: the kernel never does (the rescuer attaches to the pool's CPU).
fn check_05_rescuer(on: On) -> Result<CheckRun, SimError> {
    let one = CpuId(1);
    let s = on.sim(KernelConfig::default(), 2)?;
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
    // A design whose work sits on a workqueue without WQ_MEM_RECLAIM (v3: system_wq) has no
    // rescuer at all: under the congestion the work waits for a new worker, and the question of
    // where a rescuer runs does not arise.
    if s.kernel
        .pool(PoolId::Cpu(one))
        .is_some_and(|p| p.queued > 0 && p.rescuable == 0)
    {
        let _ = s.settle(BUDGET);
        return Ok(CheckRun {
            verdict: Verdict::NotApplicable(
                "the batch's work is on a workqueue without WQ_MEM_RECLAIM: no rescuer",
            ),
            trace: s.trace(),
            ftrace: s.ftrace(),
        });
    }
    let off_cpu = crate::runtime::event::Event::Rescuer {
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

/// Finding 7: three bios wait when the worker runs with need_resched() set.
fn check_07_need_resched_yield(on: On) -> Result<CheckRun, SimError> {
    let s = on.sim(KernelConfig::default(), 2)?;
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

/// Finding 9: a bio completes on CPU1 after down_prep disabled the work, before CPU1 dies.
fn check_09_dead_drain(on: On) -> Result<CheckRun, SimError> {
    let s = on.sim(KernelConfig::default(), 2)?;
    let v = offline_with_completion_after_down_prep(&s, None);
    Ok(done(&s, verdict(v, |x| x.invariant == Invariant::Stranded)))
}

/// Finding 10: CPU1 is offline at boot and comes up once: online's enable must balance.
fn check_10_init_protocol(on: On) -> Result<CheckRun, SimError> {
    let s = on.sim(KernelConfig::default(), 1)?;
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

/// Finding 11: RWF_DONTCACHE writes of 8 pages, written back by iomap, the device IRQ on CPU1 ends
/// the bios; at quiescence no dropbehind folio may be left in the page cache.
fn check_11_dontcache_gap(on: On) -> Result<CheckRun, SimError> {
    // The gallery's `v3` column is RFC v3 as the page cache has it (the folio-level design, its
    // batch set up by AddressSpace::try_new()); its kernel boots without the gallery's v3 module,
    // which would hold CPUHP_PAGE_ALLOC itself.
    let design = DontcacheDesign::of_variant(on.variant);
    let s = sim(
        design.boot_variant(),
        KernelConfig::default(),
        2,
        on.rescuer,
        on.trace,
    )?;
    // The filemap events (formats in tests/data/tracefs-6.18/formats, from the live kernel) show
    // each folio added by the write and, where the design drops it, deleted after writeback.
    let config = PageCacheConfig::new(design, WritebackPath::Iomap);
    let mapping = match AddressSpace::try_new(&s.kernel, config) {
        Ok(m) => m,
        Err(message) => {
            let v = vec![Violation {
                invariant: Invariant::DropbehindCached,
                message,
                trace: Vec::new(),
            }];
            return Ok(done(
                &s,
                verdict(v, |x| x.invariant == Invariant::DropbehindCached),
            ));
        }
    };
    let data: Vec<u8> = (0..8u8).flat_map(|i| [i; PAGE_SIZE]).collect();
    // pwritev2(RWF_DONTCACHE): generic_write_sync() kicks writeback of the 8 pages.
    let written =
        s.rt.on_cpu(CpuId(0), "pwritev2(RWF_DONTCACHE) of 8 pages", |cx| {
            mapping.generic_perform_write(cx, 0, &data, IocbFlags::IOCB_DONTCACHE)
        });
    let (bios, write_error) = match written {
        Some(Ok(p)) => (p.submit, None),
        Some(Err(e)) => (
            Vec::new(),
            Some(format!("pwritev2(RWF_DONTCACHE) failed: {e}")),
        ),
        None => (Vec::new(), Some("CPU0 is missing".to_owned())),
    };
    for bio in bios {
        let what = format!(
            "device IRQ: bio_endio(writeback bio#{}{}) from hardirq",
            bio.id(),
            if bio.flagged(BioFlag::CompleteInTask) {
                ", BIO_COMPLETE_IN_TASK"
            } else {
                ""
            }
        );
        s.rt.on_cpu(CpuId(1), &what, |cx| {
            cx.with_hardirq(|cx| bio_endio(bio, cx))
        });
    }
    let mut v = s.settle(BUDGET);
    if let Some(message) = write_error {
        v.push(Violation {
            invariant: Invariant::DropbehindCached,
            message,
            trace: Vec::new(),
        });
    }
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

/// Finding 15: one interrupt burst of [`PAGEVEC_SIZE`]` + 1` flagged completions on CPU0 before
/// its worker runs. RFC v3's `folio_batch` holds [`PAGEVEC_SIZE`]: `folio_end_dropbehind_irq()`
/// skips the invalidation of the last folio, which the seam shows as its flagged bio completed in
/// the interrupt (the folio left cached); the bio series' lists have no bound.
fn check_15_burst(on: On) -> Result<CheckRun, SimError> {
    let s = on.sim(KernelConfig::default(), 2)?;
    for _ in 0..=PAGEVEC_SIZE {
        s.apply(&Transition::Complete {
            cpu: 0,
            ctx: CompletionContext::Hardirq,
            need: Need::Flag,
        });
    }
    let v = s.settle(BUDGET);
    Ok(done(
        &s,
        verdict(v, |x| x.invariant == Invariant::TaskContext),
    ))
}

/// Finding 16: `cpu_down(CPU1)` with `hotplug/fail` at `cpu:teardown` (`CPUHP_TEARDOWN_CPU`), below
/// `workqueue:online`: once `workqueue_offline_cpu()` disassociated CPU1's pool a flagged bio
/// completes on CPU1 (still online, taking interrupts), CPU1's worker runs -- unbound, on CPU0 --
/// and the failure rolls the offline back. v3's work drains the batch of the CPU it runs on
/// (`this_cpu_ptr()`), so CPU1's batch keeps the bio with no work queued; the posted versions
/// disabled the work at down_prep, so it is finding 1's rollback by another road.
fn check_16_rollback_unbound(on: On) -> Result<CheckRun, SimError> {
    let s = on.sim(KernelConfig::default(), 2)?;
    s.apply(&Transition::Hotplug {
        cpu: 1,
        up: false,
        fail_at: Some(CPUHP_TEARDOWN_CPU.0),
    });
    let unbound = |s: &Sim| {
        s.kernel
            .pool(PoolId::Cpu(CpuId(1)))
            .is_some_and(|p| p.disassociated)
    };
    while !unbound(&s) && s.apply(&Transition::HotplugStep) {}
    s.apply(&Transition::Complete {
        cpu: 1,
        ctx: CompletionContext::Hardirq,
        need: Need::Flag,
    });
    s.apply(&Transition::RunWorker { cpu: 1 });
    while s.apply(&Transition::HotplugStep) {}
    let v = s.settle(BUDGET);
    Ok(done(&s, verdict(v, |x| x.invariant == Invariant::Stranded)))
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
    /// Verdicts per [`Variant::all`]: the posted versions, then the registered modules (checks) —
    /// empty for figures.
    pub cells: Vec<Verdict>,
    /// The twin's verdict.
    pub twin: Option<Verdict>,
    /// Figures, as text (figure rows).
    pub figure: Option<String>,
}

impl Row {
    /// Cells that differ from the expectation, as `(column, got, expected)` (`None`: the posted
    /// variant has no expectation for this check in [`EXPECTED`]). A registered module's cell has
    /// no expectation and is not judged ([`Row::module_cells`]).
    pub fn mismatches(&self) -> Vec<(String, &'static str, Option<Expect>)> {
        let mut out = Vec::new();
        if let FindingKind::Check { twin } = self.finding.kind {
            for (v, cell) in Variant::all().iter().zip(&self.cells) {
                // A registered module has no row; a built-in one (v3) is a posted design and has.
                if v.is_module() {
                    continue;
                }
                let e = expected(self.finding.id, v.name);
                if !e.is_some_and(|e| cell.matches(e)) {
                    out.push((v.name.to_owned(), cell.word(), e));
                }
            }
            if let (Some(tw), Some(t)) = (twin, &self.twin) {
                if !t.matches(tw.expect) {
                    out.push(("twin".to_owned(), t.word(), Some(tw.expect)));
                }
            }
        }
        out
    }

    /// The registered modules' cells of a check's row, as `(module, verdict)`: reported, not
    /// judged (a reviewer's module has no row in [`EXPECTED`]).
    pub fn module_cells(&self) -> Vec<(&'static str, &'static str)> {
        Variant::all()
            .iter()
            .zip(&self.cells)
            .filter(|(v, _)| v.is_module())
            .map(|(v, c)| (v.name, c.word()))
            .collect()
    }
}

/// A check's row: every posted variant, every registered module, then the twin.
fn check_row(f: &'static Finding, twin: Option<Twin>) -> Result<Row, SimError> {
    let mut cells = Vec::new();
    for v in Variant::all() {
        cells.push(run_check_inner(f.id, v, RescuerAffinity::PoolCpu, false)?.verdict);
    }
    let twin = match twin {
        Some(t) => {
            let (v, r) = t.machine();
            Some(run_check_inner(f.id, v, r, false)?.verdict)
        }
        None => None,
    };
    Ok(Row {
        finding: f,
        cells,
        twin,
        figure: None,
    })
}

/// Finding 6's figure on every posted variant and registered module.
fn figure6() -> Result<String, SimError> {
    let mut parts = Vec::new();
    for v in Variant::all() {
        let d = deferred_reads(v, 8)?;
        parts.push(format!(
            "{}: {}/{} reads deferred",
            v.name, d.deferred_reads, d.reads
        ));
    }
    Ok(parts.join("; "))
}

/// Runs every check on every posted variant, every registered module and the twin, and the figures (finding 8's figure
/// comes from `figure8`, which the caller supplies because it needs the threaded runtime).
pub fn matrix(figure8: &dyn Fn() -> String) -> Result<Vec<Row>, SimError> {
    let mut rows = Vec::new();
    for f in &FINDINGS {
        rows.push(match f.kind {
            FindingKind::Check { twin } => check_row(f, twin)?,
            FindingKind::Figure => Row {
                finding: f,
                cells: Vec::new(),
                twin: None,
                figure: Some(if f.id == 6 { figure6()? } else { figure8() }),
            },
        });
    }
    Ok(rows)
}

/// A matrix column's width for a variant name: at least 7, one more than the name.
pub fn column_width(name: &str) -> usize {
    (name.len() + 1).max(7)
}

/// Renders the matrix as text, one column per [`Variant::all`] (the posted versions, then the
/// registered modules, which the footer says have no expectation).
pub fn render(rows: &[Row]) -> String {
    let columns = Variant::all();
    let mut out = format!("{:<66} ", "finding");
    for v in &columns {
        out.push_str(&format!("{:<w$} ", v.name, w = column_width(v.name)));
    }
    out.push_str("twin\n");
    for r in rows {
        let title = format!("{:>2} {}", r.finding.id, r.finding.title);
        match &r.figure {
            Some(fig) => out.push_str(&format!("{title:<66} {fig}\n")),
            None => {
                out.push_str(&format!("{title:<66} "));
                for (i, v) in columns.iter().enumerate() {
                    let word = r.cells.get(i).map_or("-", |c| c.word());
                    out.push_str(&format!("{word:<w$} ", w = column_width(v.name)));
                }
                let twin = match (&r.twin, r.finding.kind) {
                    (Some(v), FindingKind::Check { twin: Some(t) }) => {
                        format!("{} ({} {})", v.word(), t.base.name, t.change)
                    }
                    _ => "-".to_owned(),
                };
                out.push_str(&twin);
                out.push('\n');
            }
        }
    }
    out.push_str("v3 is RFC v3 of the DONTCACHE series (its folio batch; a flagged bio stands for a folio), re-expressed from a summary of its code; v5's hotplug protocol and need_resched() yield are inferred (see `biosim variants`); v7 is derived from a description of the landed code.\n");
    if columns.iter().any(Variant::is_module) {
        out.push_str(&format!(
            "columns after {} are registered modules: no expectation (`--check` reports their verdicts, it does not judge them)\n",
            Variant::ALL[Variant::ALL.len() - 1].name
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every posted variant has exactly one row, in `Variant::ALL`'s order, and every row covers
    /// every check exactly once (and nothing else).
    #[test]
    fn every_variant_has_one_row_covering_every_check() {
        let rows: Vec<&str> = EXPECTED.iter().map(|r| r.variant.name).collect();
        assert_eq!(rows, Variant::names().collect::<Vec<_>>());
        for r in EXPECTED {
            assert_eq!(Variant::by_name(r.variant.name), Some(r.variant));
            let mut ids: Vec<u32> = r.cells.iter().map(|(id, _)| *id).collect();
            ids.sort_unstable();
            let checks: Vec<u32> = FINDINGS
                .iter()
                .filter(|f| matches!(f.kind, FindingKind::Check { .. }))
                .map(|f| f.id)
                .collect();
            assert_eq!(ids, checks, "{}'s row", r.variant.name);
        }
    }

    /// A twin's description is what the one knob parser reads back to the same change.
    #[test]
    fn every_twin_description_parses_back_to_its_knob() {
        for f in &FINDINGS {
            if let FindingKind::Check {
                twin:
                    Some(
                        t @ Twin {
                            change: Change::Knob(k),
                            ..
                        },
                    ),
            } = f.kind
            {
                assert_eq!(Knob::parse_assignment(&k.to_string()), Ok(k));
                assert_ne!(
                    Variant {
                        name: "twin",
                        ..t.base
                    },
                    t.machine().0,
                    "finding {}'s twin changes nothing",
                    f.id
                );
            }
        }
    }

    #[test]
    fn the_checks_refuse_an_unknown_or_bad_knob_naming_the_known_ones() {
        let f = finding(1).unwrap();
        let e = machine_for(f, "v7", &["bogus=1".to_owned()]).unwrap_err();
        for n in Knob::names() {
            assert!(e.contains(n), "{e}");
        }
        let e = machine_for(f, "v7", &["requeue_on_online=maybe".to_owned()]).unwrap_err();
        assert!(e.contains("expected true or false, got `maybe`"), "{e}");
        let e = machine_for(f, "v8", &[]).unwrap_err();
        for n in Variant::names() {
            assert!(e.contains(n), "{e}");
        }
        let (v, _) = machine_for(f, "v7", &["requeue_on_online=false".to_owned()]).unwrap();
        assert_eq!(
            v,
            Variant {
                name: "custom",
                ..Variant::V7.with(Knob::RequeueOnOnline(false))
            }
        );
    }
}
