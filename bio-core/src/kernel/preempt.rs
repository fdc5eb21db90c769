//! `include/linux/preempt.h`: the `preempt_count` bit layout and the context predicates built on
//! it (`in_task()`, `in_atomic()`, `preemptible()`, ...), plus the entry/exit of hardirq, softirq
//! and NMI context (`irq_enter()`/`irq_exit()`, `handle_softirqs()`, `nmi_enter()`).
//!
//! The simulator keeps two views of every counter: what the kernel can observe under the current
//! [`KernelConfig`](super::KernelConfig) (without `CONFIG_PREEMPT_COUNT`, `preempt_disable()` is a
//! compiler barrier and leaves no trace) and the ground truth, which the oracle uses to decide
//! whether code really ran where it may sleep.

use super::{Cpu, CpuId, ReportKind};
use std::fmt;

/// `PREEMPT_MASK`: bits 0-7 count `preempt_disable()` nesting.
pub const PREEMPT_MASK: u32 = 0x0000_00ff;
/// `SOFTIRQ_MASK`: bits 8-15 count softirq serving / BH disabling.
pub const SOFTIRQ_MASK: u32 = 0x0000_ff00;
/// `HARDIRQ_MASK`: bits 16-19 count hardirq nesting.
pub const HARDIRQ_MASK: u32 = 0x000f_0000;
/// `NMI_MASK`: bits 20-23 count NMI nesting.
pub const NMI_MASK: u32 = 0x00f0_0000;
/// `PREEMPT_OFFSET`.
pub const PREEMPT_OFFSET: u32 = 1;
/// `SOFTIRQ_OFFSET`: "serving softirq".
pub const SOFTIRQ_OFFSET: u32 = 1 << 8;
/// `SOFTIRQ_DISABLE_OFFSET`: what `local_bh_disable()` adds, so that a BH-disabled task is not
/// mistaken for one serving a softirq.
pub const SOFTIRQ_DISABLE_OFFSET: u32 = 2 * SOFTIRQ_OFFSET;
/// `HARDIRQ_OFFSET`.
pub const HARDIRQ_OFFSET: u32 = 1 << 16;
/// `NMI_OFFSET`.
pub const NMI_OFFSET: u32 = 1 << 20;

/// The execution contexts a reviewer asks about, each entered by the kernel primitive that creates
/// it. Used by the `bio_in_atomic()` truth table and by scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContextKind {
    /// Plain process context: a kworker or a syscall, preemption and IRQs enabled.
    Task,
    /// Task context inside `preempt_disable()` (or a `spin_lock()` on !RT).
    TaskPreemptDisabled,
    /// Task context inside `local_irq_save()`.
    TaskIrqsDisabled,
    /// Task context inside `local_bh_disable()`.
    TaskBhDisabled,
    /// Task context inside `rcu_read_lock()`.
    RcuReadSide,
    /// Serving a softirq (`BLOCK_SOFTIRQ` completions).
    Softirq,
    /// A hard interrupt handler (`irq_enter()`..`irq_exit()`).
    Hardirq,
    /// A non-maskable interrupt (`nmi_enter()`).
    Nmi,
}

impl ContextKind {
    /// Every context, in the order of the truth table.
    pub const ALL: [ContextKind; 8] = [
        Self::Task,
        Self::TaskPreemptDisabled,
        Self::TaskIrqsDisabled,
        Self::TaskBhDisabled,
        Self::RcuReadSide,
        Self::Softirq,
        Self::Hardirq,
        Self::Nmi,
    ];

    /// A short name for tables and scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Self::Task => "task",
            Self::TaskPreemptDisabled => "task+preempt_disable",
            Self::TaskIrqsDisabled => "task+local_irq_save",
            Self::TaskBhDisabled => "task+local_bh_disable",
            Self::RcuReadSide => "task+rcu_read_lock",
            Self::Softirq => "softirq",
            Self::Hardirq => "hardirq",
            Self::Nmi => "nmi",
        }
    }

    /// Parses [`ContextKind::name`].
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Runs `f` on `cpu` inside this context, entering and leaving it with the kernel primitives.
    pub fn run<R>(self, cpu: &Cpu, f: impl FnOnce(&Cpu) -> R) -> R {
        match self {
            Self::Task => f(cpu),
            Self::TaskPreemptDisabled => cpu.with_preempt_disabled(f),
            Self::TaskIrqsDisabled => cpu.with_irqs_disabled(f),
            Self::TaskBhDisabled => cpu.with_bh_disabled(f),
            Self::RcuReadSide => cpu.with_rcu_read_lock(f),
            Self::Softirq => cpu.with_softirq(f),
            Self::Hardirq => cpu.with_hardirq(f),
            Self::Nmi => cpu.with_nmi(f),
        }
    }
}

impl fmt::Display for ContextKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything a kernel splat prints about the context, plus the simulator's ground truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextSnapshot {
    /// The CPU.
    pub cpu: CpuId,
    /// `preempt_count()` as the kernel reads it.
    pub preempt_count: u32,
    /// `irqs_disabled()`.
    pub irqs_disabled: bool,
    /// `rcu_preempt_depth()`.
    pub rcu_preempt_depth: u32,
    /// `in_task()`.
    pub in_task: bool,
    /// `in_atomic()`.
    pub in_atomic: bool,
    /// `preemptible()` as the kernel computes it.
    pub preemptible: bool,
    /// Ground truth: the code could legally sleep here (task context, no preemption, IRQ, BH or
    /// RCU read-side section of any kind), whatever the config lets the kernel see.
    pub may_sleep: bool,
}

impl fmt::Display for ContextSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CPU{} preempt_count={:#x} irqs_disabled={} rcu_depth={} in_task={} in_atomic={} preemptible={} may_sleep={}",
            self.cpu.0,
            self.preempt_count,
            self.irqs_disabled as u8,
            self.rcu_preempt_depth,
            self.in_task as u8,
            self.in_atomic as u8,
            self.preemptible as u8,
            self.may_sleep as u8
        )
    }
}

impl Cpu {
    /// `preempt_count()`: the count as the kernel reads it. Softirq bits are included on !RT only;
    /// on RT they live in `current->softirq_disable_cnt`.
    pub fn preempt_count(&self) -> u32 {
        if self.config().preempt_rt() {
            self.pc.get()
        } else {
            self.pc.get() | self.softirq.get()
        }
    }

    /// `softirq_count()`.
    pub fn softirq_count(&self) -> u32 {
        self.softirq.get() & SOFTIRQ_MASK
    }

    /// `hardirq_count()`.
    pub fn hardirq_count(&self) -> u32 {
        self.pc.get() & HARDIRQ_MASK
    }

    /// `in_nmi()`.
    pub fn in_nmi(&self) -> bool {
        self.pc.get() & NMI_MASK != 0
    }

    /// `in_hardirq()`.
    pub fn in_hardirq(&self) -> bool {
        self.hardirq_count() != 0
    }

    /// `in_serving_softirq()`.
    pub fn in_serving_softirq(&self) -> bool {
        self.softirq_count() & SOFTIRQ_OFFSET != 0
    }

    /// `in_softirq()`: serving a softirq or with BH disabled.
    pub fn in_softirq(&self) -> bool {
        self.softirq_count() != 0
    }

    /// `in_task()`: not in NMI, hardirq or softirq serving. A BH-disabled task is still in task.
    pub fn in_task(&self) -> bool {
        !(self.in_nmi() || self.in_hardirq() || self.in_serving_softirq())
    }

    /// `in_atomic()`: `preempt_count() != 0`. Blind to spinlocks without `CONFIG_PREEMPT_COUNT`.
    pub fn in_atomic(&self) -> bool {
        self.preempt_count() != 0
    }

    /// `irqs_disabled()`.
    pub fn irqs_disabled(&self) -> bool {
        self.irqs_off.get()
    }

    /// `preemptible()`: `preempt_count() == 0 && !irqs_disabled()` with `CONFIG_PREEMPT_COUNT`,
    /// the constant `0` without it.
    pub fn preemptible(&self) -> bool {
        self.config().preempt_count && self.preempt_count() == 0 && !self.irqs_disabled()
    }

    /// Ground truth (not a kernel function): could the code running here legally sleep?
    pub fn may_sleep(&self) -> bool {
        self.in_task()
            && self.pc.get() & PREEMPT_MASK == 0
            && self.hidden_preempt.get() == 0
            && self.softirq.get() == 0
            && !self.irqs_off.get()
            && self.rcu_nesting.get() == 0
            && self.rcu_sched_depth.get() == 0
            && self
                .held_locks
                .borrow()
                .iter()
                .all(|l| !l.class.disables_preemption(self.config()))
    }

    /// The context as a splat would print it, plus the ground truth.
    pub fn snapshot(&self) -> ContextSnapshot {
        ContextSnapshot {
            cpu: self.id(),
            preempt_count: self.preempt_count(),
            irqs_disabled: self.irqs_disabled(),
            rcu_preempt_depth: self.rcu_preempt_depth(),
            in_task: self.in_task(),
            in_atomic: self.in_atomic(),
            preemptible: self.preemptible(),
            may_sleep: self.may_sleep(),
        }
    }

    /// `preempt_disable()`: bumps the count with `CONFIG_PREEMPT_COUNT`, is a barrier without.
    pub fn preempt_disable(&self) {
        if self.config().preempt_count {
            self.pc.set(self.pc.get() + PREEMPT_OFFSET);
        } else {
            self.hidden_preempt.set(self.hidden_preempt.get() + 1);
        }
    }

    /// `preempt_enable()`. An unbalanced enable is the kernel's "preempt count underflow" WARN;
    /// it is reported and the count stays at zero.
    pub fn preempt_enable(&self) {
        if self.config().preempt_count {
            if self.pc.get() & PREEMPT_MASK == 0 {
                self.warn("kernel/sched/core.c: preempt_count_sub: DEBUG_LOCKS_WARN_ON(val > preempt_count())");
                return;
            }
            self.pc.set(self.pc.get() - PREEMPT_OFFSET);
        } else if self.hidden_preempt.get() == 0 {
            self.warn(
                "preempt_enable() without preempt_disable() (invisible to a !PREEMPT_COUNT kernel)",
            );
        } else {
            self.hidden_preempt.set(self.hidden_preempt.get() - 1);
        }
    }

    /// `local_bh_disable()`. On !RT it adds `SOFTIRQ_DISABLE_OFFSET` to `preempt_count`; on RT it
    /// takes the per-CPU softirq local lock and enters an RCU read-side section instead of
    /// disabling preemption (`kernel/softirq.c`, `__local_bh_disable_ip()` for RT).
    pub fn local_bh_disable(&self) {
        self.softirq_add(SOFTIRQ_DISABLE_OFFSET);
    }

    /// `local_bh_enable()`.
    pub fn local_bh_enable(&self) {
        self.softirq_sub(SOFTIRQ_DISABLE_OFFSET, "local_bh_enable");
    }

    /// Entering softirq processing (`handle_softirqs()`: `__local_bh_disable_ip(.., SOFTIRQ_OFFSET)`).
    pub fn softirq_enter(&self) {
        self.softirq_add(SOFTIRQ_OFFSET);
    }

    /// Leaving softirq processing (`__local_bh_enable(SOFTIRQ_OFFSET)`).
    pub fn softirq_exit(&self) {
        self.softirq_sub(SOFTIRQ_OFFSET, "softirq_exit");
    }

    fn softirq_add(&self, offset: u32) {
        if self.config().preempt_rt() && self.softirq.get() == 0 {
            self.rcu_read_lock();
        }
        self.softirq.set(self.softirq.get() + offset);
    }

    fn softirq_sub(&self, offset: u32, what: &str) {
        if self.softirq.get() < offset {
            self.warn(&format!(
                "kernel/softirq.c: {what}: softirq count underflow"
            ));
            return;
        }
        self.softirq.set(self.softirq.get() - offset);
        if self.config().preempt_rt() && self.softirq.get() == 0 {
            self.rcu_read_unlock();
        }
    }

    /// `irq_enter()` as the IRQ entry code runs it: the CPU has disabled interrupts, and
    /// `HARDIRQ_OFFSET` is added. Delivering a hardirq to a CPU with IRQs disabled is a runtime
    /// bug, reported as a WARN (the hardware would not have delivered it).
    pub fn hardirq_enter(&self) {
        if self.irqs_off.get() {
            self.warn("hardirq delivered while IRQs are disabled on this CPU");
        }
        self.set_irqs_off(true);
        self.pc.set(self.pc.get() + HARDIRQ_OFFSET);
    }

    /// `irq_exit()` and the return from interrupt, which re-enables IRQs.
    pub fn hardirq_exit(&self) {
        if self.pc.get() & HARDIRQ_MASK == 0 {
            self.warn("kernel/softirq.c: irq_exit() without irq_enter()");
            return;
        }
        self.pc.set(self.pc.get() - HARDIRQ_OFFSET);
        if self.pc.get() & HARDIRQ_MASK == 0 {
            self.set_irqs_off(false);
        }
    }

    /// `nmi_enter()`: adds `NMI_OFFSET + HARDIRQ_OFFSET`. An NMI arrives whatever the IRQ flag
    /// says, and its handler runs with IRQs off (x86 enters it through an interrupt gate); the
    /// interrupted state is restored by [`Cpu::nmi_exit`]. The IRQ lock is not taken: nothing
    /// can hold an NMI off.
    pub fn nmi_enter(&self) {
        self.nmi_saved_irqs.borrow_mut().push(self.irqs_off.get());
        self.irqs_off.set(true);
        self.pc.set(self.pc.get() + NMI_OFFSET + HARDIRQ_OFFSET);
    }

    /// `nmi_exit()`.
    pub fn nmi_exit(&self) {
        if self.pc.get() & NMI_MASK == 0 {
            self.warn("kernel/entry: nmi_exit() without nmi_enter()");
            return;
        }
        self.pc.set(self.pc.get() - NMI_OFFSET - HARDIRQ_OFFSET);
        let saved = self.nmi_saved_irqs.borrow_mut().pop().unwrap_or(false);
        self.irqs_off.set(saved);
    }

    /// Runs `f` inside `preempt_disable()`/`preempt_enable()`.
    pub fn with_preempt_disabled<R>(&self, f: impl FnOnce(&Self) -> R) -> R {
        self.preempt_disable();
        let r = f(self);
        self.preempt_enable();
        r
    }

    /// Runs `f` inside `local_bh_disable()`/`local_bh_enable()`.
    pub fn with_bh_disabled<R>(&self, f: impl FnOnce(&Self) -> R) -> R {
        self.local_bh_disable();
        let r = f(self);
        self.local_bh_enable();
        r
    }

    /// Runs `f` as a softirq handler.
    pub fn with_softirq<R>(&self, f: impl FnOnce(&Self) -> R) -> R {
        self.softirq_enter();
        let r = f(self);
        self.softirq_exit();
        r
    }

    /// Runs `f` as a hardirq handler.
    pub fn with_hardirq<R>(&self, f: impl FnOnce(&Self) -> R) -> R {
        self.hardirq_enter();
        let r = f(self);
        self.hardirq_exit();
        r
    }

    /// Runs `f` as an NMI handler.
    pub fn with_nmi<R>(&self, f: impl FnOnce(&Self) -> R) -> R {
        self.nmi_enter();
        let r = f(self);
        self.nmi_exit();
        r
    }

    pub(crate) fn warn(&self, what: &str) {
        self.report(
            ReportKind::Warn,
            format!("WARNING: CPU: {} at {what}", self.id().0),
        );
    }
}
