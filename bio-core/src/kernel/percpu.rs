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
use crate::sync::untracked::{AtomicBool, Ordering};
use crate::sync::{LockOwner, UnsafeCell};
use std::fmt;

/// biosim's own exclusion of the accesses to one per-CPU cell ([`IrqLocal`], `LocalLock`'s data),
/// outside loom: never contended while a module keeps the kernel's per-CPU rule, so it changes
/// nothing then; a module that breaks the rule is reported and serialised rather than racing on
/// memory (a Rust data race is undefined behaviour, the kernel's a corrupted list). An access made
/// from inside an access of the same cell on the same flow is a misuse that panics, as a second
/// `RefCell::borrow_mut()` does (in the kernel: a self-deadlock on the lock, or a list corrupted
/// under the holder). Under loom the cell is left to loom's causality checker, which sees the
/// accesses this would serialise.
#[derive(Debug, Default)]
pub(crate) struct Exclusive {
    busy: AtomicBool,
    owner: LockOwner,
}

impl Exclusive {
    /// Runs `f` as the only access of the cell; `what` names the cell for a report.
    pub(crate) fn run<R>(
        &self,
        cx: Option<&Cpu>,
        what: &dyn Fn() -> String,
        f: impl FnOnce() -> R,
    ) -> R {
        if cfg!(loom) {
            return f();
        }
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            if self.owner.held_by_current() {
                panic!(
                    "biosim: {} accessed again from inside its own access (a module that takes its per-CPU list while holding it)",
                    what()
                );
            }
            if let Some(cx) = cx {
                cx.report(
                    ReportKind::Bug,
                    format!(
                        "BUG: biosim: concurrent access to {} [{}]: a data race no kernel splat reports (KCSAN would); serialised",
                        what(),
                        cx.current().comm
                    ),
                );
            }
            while self
                .busy
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                std::hint::spin_loop();
                std::thread::yield_now();
            }
        }
        self.owner.set_current();
        let r = f();
        self.owner.clear();
        self.busy.store(false, Ordering::Release);
        r
    }
}

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
    exclusive: Exclusive,
}

// SAFETY: `data` is reached only through `with`/`peek`, each inside `Exclusive::run` (outside
// loom): one access at a time whatever the module does; under loom the per-CPU rule the kernel
// relies on (the owner CPU with IRQs off, or anyone once the owner is dead) is what loom checks.
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
            exclusive: Exclusive::default(),
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
        let what = || format!("per-CPU data of {}", self.cpu);
        let Some(how) = broken else {
            // Why sound: one access at a time (Exclusive), within the per-CPU rule.
            return self.exclusive.run(Some(cx), &what, || {
                // SAFETY: one access at a time (Exclusive), see the comment above.
                self.data.with_mut(|d| f(unsafe { &mut *d }))
            });
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
        // Why sound: reported above; one access at a time (Exclusive), and this CPU's own flows are
        // held off by the IRQ-off section.
        let r = self.exclusive.run(Some(cx), &what, || {
            // SAFETY: one access at a time (Exclusive), see the comment above.
            self.data.with_mut(|d| f(unsafe { &mut *d }))
        });
        cx.local_irq_restore(flags);
        r
    }

    /// Reads the data, for tests and the oracle between steps (when nothing runs; the read is
    /// still one access at a time, so a read that races a flow is serialised, not a data race).
    pub fn peek<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        let what = || format!("per-CPU data of {}", self.cpu);
        // Why sound: one access at a time (Exclusive).
        self.exclusive
            // SAFETY: one access at a time (Exclusive), see the comment above.
            .run(None, &what, || self.data.with(|d| f(unsafe { &*d })))
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

    /// Two OS threads breaking the rule on one cell at once (the threaded runtime's CPUs): the
    /// breaks are reported and the accesses serialised, so no increment is lost.
    #[test]
    fn concurrent_breaks_are_serialised_not_racing() {
        let k = Kernel::new(KernelConfig::default(), 2).unwrap();
        let data = std::sync::Arc::new(PerCpu::new(&k, |cpu| IrqLocal::new(cpu, 0u64)));
        let threads: Vec<_> = [CpuId(0), CpuId(1)]
            .into_iter()
            .map(|c| {
                let (k, data) = (std::sync::Arc::clone(&k), std::sync::Arc::clone(&data));
                std::thread::spawn(move || {
                    let cx = k.cpu(c).unwrap();
                    for _ in 0..2_000 {
                        per_cpu_ptr(&data, CpuId(1)).with(&cx, |n| {
                            let v = *n;
                            std::hint::spin_loop();
                            *n = v + 1;
                        });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(per_cpu_ptr(&data, CpuId(1)).peek(|n| *n), 4_000);
        assert!(!k.reports().all().is_empty(), "the breaks are reported");
    }

    #[test]
    #[should_panic(expected = "accessed again from inside its own access")]
    fn a_nested_access_of_one_cell_panics_like_a_second_borrow_mut() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cell = IrqLocal::new(CpuId(0), 0u32);
        let cx = k.cpu(CpuId(0)).unwrap();
        let flags = cx.local_irq_save();
        cell.with(&cx, |_| cell.with(&cx, |n| *n += 1));
        cx.local_irq_restore(flags);
    }
}
