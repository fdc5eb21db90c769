//! The expectation parser: `expect clean` and `expect INVARIANT` lines.

use super::line::{Line, ScenarioError};
use crate::machine::oracle::Invariant;
use bio_core::kernel::ReportKind;
use std::fmt;

/// What a scenario expects at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expectation {
    /// No violation at all.
    Clean,
    /// At least one violation of this invariant.
    Violates(Invariant),
}

impl fmt::Display for Expectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expectation::Clean => f.write_str("clean"),
            Expectation::Violates(i) => write!(f, "a violation of [{i}]"),
        }
    }
}

/// The scenario language's name of every invariant an `expect` line can name, both ways: the
/// parser reads it, a written counterexample (`biosim explore`) writes it.
const INVARIANT_NAMES: [(&str, Invariant); 20] = [
    ("once", Invariant::EndIoOnce),
    ("task", Invariant::TaskContext),
    ("stranded", Invariant::Stranded),
    ("off-cpu", Invariant::WorkOffCpu),
    ("hotplug-context", Invariant::HotplugContext),
    ("bug", Invariant::KernelReport(ReportKind::Bug)),
    ("warn", Invariant::KernelReport(ReportKind::Warn)),
    (
        "sleep-in-atomic",
        Invariant::KernelReport(ReportKind::SleepInAtomic),
    ),
    (
        "invalid-wait-context",
        Invariant::KernelReport(ReportKind::InvalidWaitContext),
    ),
    (
        "inconsistent-lock-state",
        Invariant::KernelReport(ReportKind::InconsistentLockState),
    ),
    ("no-quiescence", Invariant::NoQuiescence),
    ("dropbehind", Invariant::DropbehindCached),
    ("data", Invariant::DataMismatch),
    ("hung-task", Invariant::KernelReport(ReportKind::HungTask)),
    (
        "circular-locking",
        Invariant::KernelReport(ReportKind::CircularLockDependency),
    ),
    (
        "recursive-locking",
        Invariant::KernelReport(ReportKind::RecursiveLocking),
    ),
    (
        "sb-writers",
        Invariant::KernelReport(ReportKind::SbWritersUnbalanced),
    ),
    (
        "bad-irq-dependency",
        Invariant::KernelReport(ReportKind::BadIrqDependency),
    ),
    (
        "irq-lock-inversion",
        Invariant::KernelReport(ReportKind::IrqLockInversion),
    ),
    (
        "endless-retry",
        Invariant::KernelReport(ReportKind::EndlessRetry),
    ),
];

fn invariant_name(s: &str) -> Option<Invariant> {
    INVARIANT_NAMES
        .iter()
        .find(|(n, _)| *n == s)
        .map(|(_, i)| *i)
}

/// The scenario language's name of an invariant (`expect NAME`), if an `expect` line can name it.
pub fn invariant_word(inv: Invariant) -> Option<&'static str> {
    INVARIANT_NAMES
        .iter()
        .find(|(_, i)| *i == inv)
        .map(|(n, _)| *n)
}

/// Parses an `expect` line.
pub(super) fn parse_expect(l: &Line<'_>) -> Result<Expectation, ScenarioError> {
    let w = l.arg(1, "clean or an invariant")?;
    if let Some(second) = l.words.get(2) {
        return Err(l.err_at(
            2,
            format!("`expect` names one verdict, got a second, `{second}`: write one `expect` line each (all must hold)"),
        ));
    }
    if w == "clean" {
        return Ok(Expectation::Clean);
    }
    invariant_name(w).map(Expectation::Violates).ok_or_else(|| {
        l.err_at(1, format!("expect: unknown invariant `{w}` (expected clean, once, task, stranded, off-cpu, hotplug-context, bug, warn, sleep-in-atomic, invalid-wait-context, inconsistent-lock-state, no-quiescence, dropbehind, data)"))
    })
}
