//! The `bio_in_atomic()` truth table for a kernel configuration: what every predicate of
//! `include/linux/preempt.h` answers in each execution context, and what the simulator knows to
//! be true (`may_sleep`).

use bio_core::block::bio_in_atomic;
use bio_core::kernel::ContextKind;
use bio_core::{CpuId, Kernel, KernelConfig};
use std::fmt::Write;

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextRow {
    /// The context.
    pub context: ContextKind,
    /// `preempt_count()`.
    pub preempt_count: u32,
    /// `in_task()`.
    pub in_task: bool,
    /// `in_atomic()`.
    pub in_atomic: bool,
    /// `irqs_disabled()`.
    pub irqs_disabled: bool,
    /// `rcu_preempt_depth()`.
    pub rcu_depth: u32,
    /// `preemptible()`.
    pub preemptible: bool,
    /// `bio_in_atomic()`.
    pub bio_in_atomic: bool,
    /// Ground truth: a sleeping `bi_end_io` would be legal here.
    pub may_sleep: bool,
}

/// Computes the table by entering each context on a fresh simulated CPU.
pub fn table(config: KernelConfig) -> Result<Vec<ContextRow>, bio_core::kernel::ConfigError> {
    let kernel = Kernel::new(config, 1)?;
    let cpu = kernel.cpu(CpuId(0)).expect("CPU0 exists");
    Ok(ContextKind::ALL
        .into_iter()
        .map(|context| {
            context.run(&cpu, |c| ContextRow {
                context,
                preempt_count: c.preempt_count(),
                in_task: c.in_task(),
                in_atomic: c.in_atomic(),
                irqs_disabled: c.irqs_disabled(),
                rcu_depth: c.rcu_preempt_depth(),
                preemptible: c.preemptible(),
                bio_in_atomic: bio_in_atomic(c),
                may_sleep: c.may_sleep(),
            })
        })
        .collect())
}

/// Renders the table as text, with a marker on rows where `bio_in_atomic()` defers although the
/// context could sleep (needless deferral) or would not defer although it cannot (a bug).
pub fn render(config: KernelConfig) -> Result<String, bio_core::kernel::ConfigError> {
    let rows = table(config)?;
    let b = |v: bool| if v { "1" } else { "0" };
    let mut out = String::new();
    let _ = writeln!(out, "# {config}");
    let _ = writeln!(
        out,
        "{:<22} {:>13} {:>7} {:>9} {:>13} {:>9} {:>11} {:>13} {:>9}",
        "context",
        "preempt_count",
        "in_task",
        "in_atomic",
        "irqs_disabled",
        "rcu_depth",
        "preemptible",
        "bio_in_atomic",
        "may_sleep"
    );
    for r in rows {
        let note = match (r.bio_in_atomic, r.may_sleep) {
            (true, true) => "  <- defers although it could sleep",
            (false, false) => "  <- BUG: would run a sleeping bi_end_io in atomic context",
            _ => "",
        };
        let _ = writeln!(
            out,
            "{:<22} {:>13} {:>7} {:>9} {:>13} {:>9} {:>11} {:>13} {:>9}{note}",
            r.context.name(),
            format!("{:#x}", r.preempt_count),
            b(r.in_task),
            b(r.in_atomic),
            b(r.irqs_disabled),
            r.rcu_depth,
            b(r.preemptible),
            b(r.bio_in_atomic),
            b(r.may_sleep),
        );
    }
    Ok(out)
}
