//! The invariant oracle (DESIGN.md, "Invariants"), checked in both runtimes:
//!
//! 1. every submitted bio's `bi_end_io` runs exactly once;
//! 2. a bio that needs task context completes in preemptible task context (the simulator's
//!    ground truth, [`Cpu::may_sleep`], not what the configured kernel can see);
//! 3. at quiescence no bio is stranded;
//! 4. per-CPU batch work never runs off its CPU while that CPU is online;
//! 5. the batcher's hotplug callbacks run where kernel/cpu.c runs them (online/down_prep on the
//!    CPU itself in task context, dead on another CPU after the CPU died);
//! 6. the kernel logged no splat (BUG, WARN, "sleeping function called from invalid context",
//!    "Invalid wait context").
//!
//! A violation is a [`Violation`] value with the invariant it breaks and what was seen; the caller
//! attaches the trace that led to it.
//!
//! One checker for every runtime: the deterministic runtime ([`Sim`](crate::machine::Sim)), the
//! threaded runtime, the proptest machines and the loom models of `tests/tests/loom_batcher.rs` all
//! assert through an [`Oracle`] installed as the batcher's observer (the tests build it with
//! `biosim_tests::MachineBuilder`).
//!
//! Under loom the oracle is bookkeeping loom does not see: its lock is a plain (parking_lot) mutex,
//! so it adds no interleavings, and it is never held while calling into the kernel. Every kernel
//! read (`cpu_online()`, the batch lengths, the report log) is a loom scheduling point under
//! `--cfg loom`, and a thread switched out while holding a lock loom does not know about would
//! deadlock loom's scheduler as soon as another thread asked for it.

use bio_core::block::complete_in_task::{end_io_in_task, BatchCallback, BatcherObserver};
use bio_core::block::{Bio, BioEndIo, BioFlag, ReqOp};
use bio_core::kernel::{CpuId, ReportKind};
use bio_core::{Cpu, Kernel};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt;

/// Which invariant a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Invariant {
    /// `bi_end_io` ran more than once for one bio.
    EndIoOnce,
    /// A bio that needs task context completed where it could not sleep.
    TaskContext,
    /// At quiescence a bio never completed.
    Stranded,
    /// A CPU's batch work ran on another CPU while its CPU was online.
    WorkOffCpu,
    /// A hotplug callback ran on the wrong CPU or in the wrong context.
    HotplugContext,
    /// The kernel logged a splat.
    KernelReport(ReportKind),
    /// The machine did not reach quiescence within its step budget.
    NoQuiescence,
    /// A DONTCACHE (dropbehind) folio is still cached after its writeback ended
    /// (`folio_end_dropbehind()` could not invalidate it).
    DropbehindCached,
    /// Data read back from a device differs from what was written there.
    DataMismatch,
    /// A driver paid for I/O attempts that could not succeed (the loop driver's refused
    /// `IOCB_NOWAIT` attempts), or surfaced a refusal it should have absorbed as an I/O error.
    WastedOrFailedAttempt,
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invariant::EndIoOnce => f.write_str("bi_end_io exactly once"),
            Invariant::TaskContext => f.write_str("task-context completion"),
            Invariant::Stranded => f.write_str("nothing stranded at quiescence"),
            Invariant::WorkOffCpu => f.write_str("per-CPU work on its CPU while online"),
            Invariant::HotplugContext => f.write_str("hotplug callbacks in their context"),
            Invariant::KernelReport(k) => write!(f, "no kernel splat ({k:?})"),
            Invariant::NoQuiescence => f.write_str("quiescence reached"),
            Invariant::DropbehindCached => f.write_str("DONTCACHE folios dropped after writeback"),
            Invariant::DataMismatch => f.write_str("data read back equals data written"),
            Invariant::WastedOrFailedAttempt => {
                f.write_str("no wasted or user-visible NOWAIT attempts")
            }
        }
    }
}

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The invariant.
    pub invariant: Invariant,
    /// What was seen, in a line or a kernel splat.
    pub message: String,
    /// The trace that led to it (the deterministic runtime's, when the machine keeps one).
    pub trace: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.invariant, self.message)
    }
}

/// How a tracked bio asks for task context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Need {
    /// An ordinary bio: its `bi_end_io` may run anywhere.
    Any,
    /// Submitted with `BIO_COMPLETE_IN_TASK`.
    Flag,
    /// Its `bi_end_io` calls `bio_complete_in_task()` first.
    Dynamic,
}

#[derive(Debug, Default)]
struct BioRecord {
    need_task: bool,
    completions: u32,
    deferrals: u32,
}

#[derive(Default)]
struct State {
    bios: BTreeMap<u64, BioRecord>,
    violations: Vec<Violation>,
    reports_seen: usize,
    /// How many of the hotplug core's WARN/BUG records (`Cpuhp::warnings()`) were turned into
    /// violations.
    hotplug_warnings_seen: usize,
}

/// The oracle: tracks every bio it made, observes the batcher, and reads the kernel's log.
#[derive(Default)]
pub struct Oracle {
    state: Mutex<State>,
}

impl fmt::Debug for Oracle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state.lock();
        f.debug_struct("Oracle")
            .field("bios", &st.bios.len())
            .field("violations", &st.violations.len())
            .finish()
    }
}

impl Oracle {
    /// A fresh oracle.
    pub fn new() -> Self {
        Self::default()
    }

    /// A tracked bio: allocated on `kernel`, with a `bi_end_io` that records where it ran (and, for
    /// [`Need::Dynamic`], calls `bio_complete_in_task()` first). With [`Need::Flag`] the bio carries
    /// `BIO_COMPLETE_IN_TASK`.
    pub fn bio(self: &std::sync::Arc<Self>, kernel: &Kernel, op: ReqOp, need: Need) -> Box<Bio> {
        let bio = kernel.bio_alloc(op, 0);
        self.track(bio.id(), need != Need::Any);
        let me = std::sync::Arc::clone(self);
        let record = move |bio: Box<Bio>, cx: &Cpu| me.completed(bio.id(), cx);
        let end_io = match need {
            Need::Dynamic => end_io_in_task("oracle_end_io_in_task", record),
            _ => BioEndIo::new("oracle_end_io", record),
        };
        let mut bio = bio.with_end_io(end_io);
        if need == Need::Flag {
            bio.set_flag(BioFlag::CompleteInTask);
        }
        bio
    }

    /// Registers a bio made elsewhere (e.g. flagged by `submit_bh_wbc()`), whose `bi_end_io` calls
    /// [`Oracle::completed`].
    pub fn track(&self, id: u64, need_task: bool) {
        self.state.lock().bios.insert(
            id,
            BioRecord {
                need_task,
                ..BioRecord::default()
            },
        );
    }

    /// Records that bio `id`'s completion work ran in `cx`.
    pub fn completed(&self, id: u64, cx: &Cpu) {
        let may_sleep = cx.may_sleep();
        let (n, need) = {
            let mut st = self.state.lock();
            let Some(rec) = st.bios.get_mut(&id) else {
                return;
            };
            rec.completions += 1;
            (rec.completions, rec.need_task)
        };
        // The messages read the context: made with the lock released (see the module docs).
        let mut found = Vec::new();
        if n > 1 {
            found.push(Violation {
                invariant: Invariant::EndIoOnce,
                message: format!("bio#{id}: bi_end_io ran {n} times (last on {})", cx.id()),
                trace: Vec::new(),
            });
        }
        if need && !may_sleep {
            found.push(Violation {
                invariant: Invariant::TaskContext,
                message: format!(
                    "bio#{id} needs task context but completed on {} in [{}]",
                    cx.id(),
                    cx.snapshot()
                ),
                trace: Vec::new(),
            });
        }
        if !found.is_empty() {
            self.state.lock().violations.extend(found);
        }
    }

    /// Pulls new kernel splats into the violations and returns every violation so far.
    pub fn check(&self, kernel: &Kernel) -> Vec<Violation> {
        let reports = kernel.reports().all();
        let mut st = self.state.lock();
        for r in &reports[st.reports_seen.min(reports.len())..] {
            st.violations.push(Violation {
                invariant: Invariant::KernelReport(r.kind),
                message: r.to_string(),
                trace: Vec::new(),
            });
        }
        st.reports_seen = reports.len();
        // kernel/cpu.c's own WARN/BUG splats (a failed rollback, a DEAD callback error, a
        // target_store mismatch, a teardown BUG_ON) are kernel reports like any other.
        let hp = kernel.hotplug();
        let warnings = hp.warnings();
        for w in &warnings[st.hotplug_warnings_seen.min(warnings.len())..] {
            let kind = match w {
                hotplug::Warning::TeardownBug { .. } => ReportKind::Bug,
                _ => ReportKind::Warn,
            };
            st.violations.push(Violation {
                invariant: Invariant::KernelReport(kind),
                message: w.to_string(),
                trace: Vec::new(),
            });
        }
        st.hotplug_warnings_seen = warnings.len();
        drop(hp);
        st.violations.clone()
    }

    /// [`Oracle::check`] plus the stranded-bio check, for a machine that reached quiescence.
    pub fn check_quiescent(&self, kernel: &Kernel) -> Vec<Violation> {
        let mut v = self.check(kernel);
        let stranded: Vec<(u64, u32)> = {
            let st = self.state.lock();
            st.bios
                .iter()
                .filter(|(_, rec)| rec.completions == 0)
                .map(|(id, rec)| (*id, rec.deferrals))
                .collect()
        };
        if stranded.is_empty() {
            return v;
        }
        // Where they wait, read from the batcher with the lock released (see the module docs).
        let where_ = kernel
            .bio_complete()
            .map(|b| {
                let cpus: Vec<String> = kernel
                    .possible_cpus()
                    .filter(|c| b.pending(*c) > 0)
                    .map(|c| format!("{c} batch holds {}", b.pending(c)))
                    .collect();
                if cpus.is_empty() {
                    "lost".to_owned()
                } else {
                    cpus.join(", ")
                }
            })
            .unwrap_or_default();
        for (id, deferrals) in stranded {
            v.push(Violation {
                invariant: Invariant::Stranded,
                message: format!("bio#{id} never completed (deferred {deferrals} times; {where_})"),
                trace: Vec::new(),
            });
        }
        v
    }

    /// Records a violation found outside the oracle (the runtime's step budget).
    pub fn push(&self, v: Violation) {
        self.state.lock().violations.push(v);
    }

    /// How many tracked bios exist and how many completed.
    pub fn counts(&self) -> (usize, usize) {
        let st = self.state.lock();
        (
            st.bios.len(),
            st.bios.values().filter(|r| r.completions > 0).count(),
        )
    }

    /// How often bio `id` was put on a batch.
    pub fn deferrals(&self, id: u64) -> u32 {
        self.state.lock().bios.get(&id).map_or(0, |r| r.deferrals)
    }
}

impl BatcherObserver for Oracle {
    fn deferred(&self, bio: u64, _cx: &Cpu) {
        let mut st = self.state.lock();
        if let Some(r) = st.bios.get_mut(&bio) {
            r.deferrals += 1;
        }
    }

    fn work_fn(&self, batch_cpu: CpuId, cx: &Cpu) {
        // `cpu_online()` only off the CPU: on it the invariant holds whatever the mask says (and
        // under loom the read would be one more scheduling point in every execution).
        if batch_cpu != cx.id() && cx.kernel().cpu_online(batch_cpu) {
            self.state.lock().violations.push(Violation {
                invariant: Invariant::WorkOffCpu,
                message: format!(
                    "bio_complete_work_fn of {batch_cpu}'s batch ran on {} while {batch_cpu} is online",
                    cx.id()
                ),
                trace: Vec::new(),
            });
        }
    }

    fn hotplug(&self, callback: BatchCallback, target: CpuId, cx: &Cpu) {
        let wrong = match callback {
            BatchCallback::Online | BatchCallback::DownPrep => (cx.id() != target
                || !cx.may_sleep())
            .then_some("on the CPU itself, in task context"),
            BatchCallback::Starting | BatchCallback::Dying => (cx.id() != target
                || !cx.irqs_disabled())
            .then_some("on the CPU itself, with IRQs off"),
            BatchCallback::Dead | BatchCallback::Prepare => (cx.id() == target
                || cx.kernel().cpu_online(target)
                || !cx.may_sleep())
            .then_some("on another CPU, after the CPU left the online mask, in task context"),
        };
        if let Some(expected) = wrong {
            self.state.lock().violations.push(Violation {
                invariant: Invariant::HotplugContext,
                message: format!(
                    "{callback:?} for {target} ran on {} [{}]; expected {expected}",
                    cx.id(),
                    cx.snapshot()
                ),
                trace: Vec::new(),
            });
        }
    }
}
