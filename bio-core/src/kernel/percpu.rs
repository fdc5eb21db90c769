//! `include/linux/percpu-defs.h`: per-CPU variables (`DEFINE_PER_CPU`, `per_cpu_ptr()`,
//! `this_cpu_ptr()`), and the kernel's convention for per-CPU data that only its own CPU touches,
//! with interrupts off ([`IrqLocal`]: what v6-review's `local_irq_save()` protects).
//!
//! A module keeps its per-CPU state in a [`PerCpu`] and reaches it as the C does:
//!
//! ```
//! use bio_core::kernel::percpu::{per_cpu_ptr, this_cpu_ptr, IrqLocal, PerCpu};
//! use bio_core::block::BioList;
//! use bio_core::{CpuId, Kernel, KernelConfig};
//!
//! struct Batch { list: IrqLocal<BioList> }
//! let k = Kernel::new(KernelConfig::default(), 2).unwrap();
//! let batches = PerCpu::new(&k, |cpu| Batch { list: IrqLocal::new(cpu, BioList::new()) });
//! let cx = k.cpu(CpuId(1)).unwrap();
//! let flags = cx.local_irq_save();
//! let empty = this_cpu_ptr(&batches, &cx).list.with(&cx, |l| l.empty());
//! cx.local_irq_restore(flags);
//! assert!(empty);
//! assert_eq!(per_cpu_ptr(&batches, CpuId(0)).list.cpu(), CpuId(0));
//! assert!(k.reports().all().is_empty());
//! ```

use super::{Cpu, CpuId, Kernel, ReportKind};
use crate::sync::UnsafeCell;
use std::fmt;

/// `DEFINE_PER_CPU(T, name)`: one `T` for every possible CPU.
pub struct PerCpu<T> {
    vars: Vec<T>,
}

impl<T> fmt::Debug for PerCpu<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerCpu")
            .field("cpus", &self.vars.len())
            .finish()
    }
}

impl<T> PerCpu<T> {
    /// One `T` per possible CPU of `kernel`, made by `init(cpu)` (the static initialiser and the
    /// `for_each_possible_cpu()` loop of an `__init` function in one).
    pub fn new(kernel: &Kernel, init: impl FnMut(CpuId) -> T) -> Self {
        Self {
            vars: kernel.possible_cpus().map(init).collect(),
        }
    }
}

/// `per_cpu_ptr(&var, cpu)`: `cpu`'s instance.
pub fn per_cpu_ptr<T>(var: &PerCpu<T>, cpu: CpuId) -> &T {
    &var.vars[cpu.index()]
}

/// `this_cpu_ptr(&var)`: the instance of the CPU running `cx`.
pub fn this_cpu_ptr<'a, T>(var: &'a PerCpu<T>, cx: &Cpu) -> &'a T {
    per_cpu_ptr(var, cx.id())
}

/// Per-CPU data that its own CPU touches only with interrupts off, so that task code and the
/// CPU's hardirq handlers exclude each other without a lock (`local_irq_save()` around every
/// access), and that another CPU touches only once the owner is dead (a CPUHP dead callback).
///
/// The rule is the kernel's convention, not a type the kernel has: breaking it is a data race no
/// kernel splat reports. biosim checks it at every access and reports a break as a BUG naming the
/// data and the context, then performs the access with this CPU's interrupts off, so a buggy module
/// is reported rather than corrupting the simulator. Under loom the cell is loom's `UnsafeCell`:
/// the accesses the rule allows are checked by its causality checker.
pub struct IrqLocal<T> {
    cpu: CpuId,
    data: UnsafeCell<T>,
}

// SAFETY: `data` is reached only through `with`/`with_dead`, whose rule (the owner CPU with IRQs
// off, or anyone once the owner is dead) is the per-CPU exclusion the kernel relies on; violations
// are reported and serialised on the accessing CPU.
unsafe impl<T: Send> Sync for IrqLocal<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for IrqLocal<T> {}

impl<T> fmt::Debug for IrqLocal<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IrqLocal").field("cpu", &self.cpu).finish()
    }
}

impl<T> IrqLocal<T> {
    /// `cpu`'s instance holding `value`.
    pub fn new(cpu: CpuId, value: T) -> Self {
        Self {
            cpu,
            data: UnsafeCell::new(value),
        }
    }

    /// The CPU that owns it.
    pub fn cpu(&self) -> CpuId {
        self.cpu
    }

    /// Runs `f` on the data from its own CPU with IRQs off (`local_irq_save()` held by the
    /// caller). From another CPU while the owner is online, or with IRQs on, it is reported.
    pub fn with<R>(&self, cx: &Cpu, f: impl FnOnce(&mut T) -> R) -> R {
        let broken = if cx.id() != self.cpu && cx.kernel().cpu_online(self.cpu) {
            Some(format!("on {} while {} is online", cx.id(), self.cpu))
        } else if cx.id() == self.cpu && !cx.irqs_disabled() {
            Some("with interrupts enabled".to_owned())
        } else {
            None
        };
        let Some(how) = broken else {
            // SAFETY: the owner with IRQs off, or the owner is offline: the per-CPU exclusion.
            return self.data.with_mut(|d| f(unsafe { &mut *d }));
        };
        cx.report(
            ReportKind::Bug,
            format!(
                "BUG: biosim: per-CPU data of {} (IRQ-protected) accessed {how} [{}]: a data race \
                 no kernel splat reports (KCSAN would)",
                self.cpu,
                cx.current().comm
            ),
        );
        let flags = cx.local_irq_save();
        // SAFETY: reported above; serialised against this CPU's own flows by the IRQ-off section.
        let r = self.data.with_mut(|d| f(unsafe { &mut *d }));
        cx.local_irq_restore(flags);
        r
    }

    /// Reads without any exclusion, for tests and the oracle between steps (nothing runs).
    pub fn peek<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        // SAFETY: the caller reads between steps, when no flow of the machine runs.
        self.data.with(|d| f(unsafe { &*d }))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{Kernel, KernelConfig};

    #[test]
    fn the_rule_holds_silently_and_a_break_is_reported() {
        let k = Kernel::new(KernelConfig::default(), 2).unwrap();
        let data = PerCpu::new(&k, |cpu| IrqLocal::new(cpu, 0u32));
        let cx = k.cpu(CpuId(1)).unwrap();
        let flags = cx.local_irq_save();
        this_cpu_ptr(&data, &cx).with(&cx, |n| *n += 1);
        cx.local_irq_restore(flags);
        assert!(k.reports().all().is_empty());
        // IRQs on: reported, and the access still happens (serialised).
        this_cpu_ptr(&data, &cx).with(&cx, |n| *n += 1);
        assert_eq!(per_cpu_ptr(&data, CpuId(1)).peek(|n| *n), 2);
        let reports = k.reports().all();
        assert_eq!(reports.len(), 1);
        assert!(
            reports[0].message.contains("with interrupts enabled"),
            "{}",
            reports[0].message
        );
        // Another CPU's data while it is online.
        let cx0 = k.cpu(CpuId(0)).unwrap();
        let flags = cx0.local_irq_save();
        per_cpu_ptr(&data, CpuId(1)).with(&cx0, |n| *n += 1);
        cx0.local_irq_restore(flags);
        let reports = k.reports().all();
        assert_eq!(reports.len(), 2);
        assert!(
            reports[1].message.contains("on CPU0 while CPU1 is online"),
            "{}",
            reports[1].message
        );
    }
}
