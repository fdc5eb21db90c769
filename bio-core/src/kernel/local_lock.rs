//! `include/linux/local_lock.h` (`local_lock_t`, `local_lock_irqsave()`, `local_lock_irq()`,
//! `local_lock()`), with the data the lock protects, as Rust wants it beside the lock.
//!
//! On a non-RT kernel a local lock is `preempt_disable()` (or `local_irq_save()` /
//! `local_irq_disable()` for the `_irqsave`/`_irq` forms) plus a lockdep map: it excludes the other
//! tasks of its CPU, and its interrupts only in the IRQ forms. On PREEMPT_RT it is a per-CPU
//! `spinlock_t`, a sleeping lock that leaves interrupts on (the RT side of finding 4).
//!
//! Lockdep sees every acquisition under the lock's name, so a lock taken in hardirq and elsewhere
//! with interrupts on is reported the way the kernel's lockdep reports it. The data is reached
//! through the guard; when the form taken leaves interrupts on (`local_lock()` on !RT), biosim still
//! makes the access itself with interrupts off, so a buggy module is reported by lockdep rather
//! than corrupting the simulator.
//!
//! ```
//! use bio_core::kernel::local_lock::LocalLock;
//! use bio_core::block::BioList;
//! use bio_core::{CpuId, Kernel, KernelConfig};
//!
//! let k = Kernel::new(KernelConfig::default(), 1).unwrap();
//! let cx = k.cpu(CpuId(0)).unwrap();
//! let list = LocalLock::new(CpuId(0), "bio_complete_batch.lock", BioList::new());
//! let guard = list.local_lock_irqsave(&cx);
//! assert!(cx.irqs_disabled());
//! assert!(guard.with(|l| l.empty()));
//! drop(guard); // local_unlock_irqrestore()
//! assert!(!cx.irqs_disabled());
//! ```

use super::percpu::Exclusive;
use super::{Cpu, CpuId, HeldLock, IrqFlags, LockClass, ReportKind};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::UnsafeCell;
use std::fmt;

/// A `local_lock_t` of `cpu`'s per-CPU data, with the data.
pub struct LocalLock<T> {
    cpu: CpuId,
    name: &'static str,
    /// The per-CPU `spinlock_t` a local lock is on PREEMPT_RT.
    rt_lock: AtomicBool,
    data: UnsafeCell<T>,
    exclusive: Exclusive,
}

// SAFETY: `data` is reached only inside `Exclusive::run` (outside loom: one access at a time,
// whatever the module does); under loom the lock's own exclusion is what loom checks.
unsafe impl<T: Send> Sync for LocalLock<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for LocalLock<T> {}

impl<T> fmt::Debug for LocalLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalLock")
            .field("cpu", &self.cpu)
            .field("name", &self.name)
            .finish()
    }
}

/// How the guard holds the lock.
enum Held {
    IrqSave(IrqFlags, HeldLock),
    Irq(HeldLock),
    Preempt(HeldLock),
    Rt(HeldLock),
}

/// A held local lock: `local_unlock_irqrestore()` / `local_unlock_irq()` / `local_unlock()` when
/// dropped.
#[must_use = "dropping the guard unlocks at once"]
pub struct LocalLockGuard<'a, T> {
    lock: &'a LocalLock<T>,
    cx: &'a Cpu,
    held: Option<Held>,
}

impl<T> fmt::Debug for LocalLockGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalLockGuard")
            .field("lock", &self.lock.name)
            .finish()
    }
}

impl<T> LocalLock<T> {
    /// `INIT_LOCAL_LOCK(name)` for `cpu`'s instance, protecting `value`.
    pub fn new(cpu: CpuId, name: &'static str, value: T) -> Self {
        Self {
            cpu,
            name,
            rt_lock: AtomicBool::new(false),
            data: UnsafeCell::new(value),
            exclusive: Exclusive::default(),
        }
    }

    /// The lock's name, its lockdep class.
    pub fn name(&self) -> &'static str {
        self.name
    }

    fn check_cpu(&self, cx: &Cpu) {
        if cx.id() != self.cpu && cx.kernel().cpu_online(self.cpu) {
            cx.report(
                ReportKind::Bug,
                format!(
                    "BUG: biosim: {} of {} taken on {} while {} is online: a local lock excludes only its own CPU",
                    self.name,
                    self.cpu,
                    cx.id(),
                    self.cpu
                ),
            );
        }
    }

    fn rt_acquire(&'_ self, cx: &'_ Cpu) -> Held {
        let (held, _report) = cx.lockdep_acquire(LockClass::LocalLock, self.name);
        while self
            .rt_lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            crate::sync::spin_loop();
        }
        Held::Rt(held)
    }

    /// `local_lock_irqsave(&lock, flags)`.
    pub fn local_lock_irqsave<'a>(&'a self, cx: &'a Cpu) -> LocalLockGuard<'a, T> {
        self.check_cpu(cx);
        let held = if cx.config().preempt_rt() {
            self.rt_acquire(cx)
        } else {
            let flags = cx.local_irq_save();
            let (held, _report) = cx.lockdep_acquire(LockClass::LocalLock, self.name);
            Held::IrqSave(flags, held)
        };
        LocalLockGuard {
            lock: self,
            cx,
            held: Some(held),
        }
    }

    /// `local_lock_irq(&lock)`.
    pub fn local_lock_irq<'a>(&'a self, cx: &'a Cpu) -> LocalLockGuard<'a, T> {
        self.check_cpu(cx);
        let held = if cx.config().preempt_rt() {
            self.rt_acquire(cx)
        } else {
            cx.local_irq_disable();
            let (held, _report) = cx.lockdep_acquire(LockClass::LocalLock, self.name);
            Held::Irq(held)
        };
        LocalLockGuard {
            lock: self,
            cx,
            held: Some(held),
        }
    }

    /// `local_lock(&lock)`: on !RT `preempt_disable()` and the lockdep map only; interrupts stay
    /// on, so the CPU's hardirq handlers are not excluded.
    pub fn local_lock<'a>(&'a self, cx: &'a Cpu) -> LocalLockGuard<'a, T> {
        self.check_cpu(cx);
        let held = if cx.config().preempt_rt() {
            self.rt_acquire(cx)
        } else {
            cx.preempt_disable();
            let (held, _report) = cx.lockdep_acquire(LockClass::LocalLock, self.name);
            Held::Preempt(held)
        };
        LocalLockGuard {
            lock: self,
            cx,
            held: Some(held),
        }
    }

    /// The data of a dead CPU, without the lock: what a `CPUHP_*_DEAD` callback does ("the CPU is
    /// dead ... so no locking is needed"). Reported as a BUG while the owner is online.
    pub fn with_dead<R>(&self, cx: &Cpu, f: impl FnOnce(&mut T) -> R) -> R {
        if cx.kernel().cpu_online(self.cpu) {
            cx.report(
                ReportKind::Bug,
                format!(
                    "BUG: biosim: {} data of {} touched without the lock while it is online",
                    self.name, self.cpu
                ),
            );
        }
        let what = || format!("{} data of {}", self.name, self.cpu);
        // Why sound: one access at a time (Exclusive); the owner is offline or it was reported.
        self.exclusive.run(Some(cx), &what, || {
            // SAFETY: one access at a time (Exclusive), see the comment above.
            self.data.with_mut(|d| f(unsafe { &mut *d }))
        })
    }

    /// Reads the data, for tests and the oracle between steps (one access at a time all the
    /// same, so a read racing a flow is serialised, not a data race).
    pub fn peek<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        let what = || format!("{} data of {}", self.name, self.cpu);
        // Why sound: one access at a time (Exclusive).
        self.exclusive
            // SAFETY: one access at a time (Exclusive), see the comment above.
            .run(None, &what, || self.data.with(|d| f(unsafe { &*d })))
    }
}

impl<T> LocalLockGuard<'_, T> {
    /// Runs `f` on the protected data.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let cx = self.cx;
        let what = || format!("{} data of {}", self.lock.name, self.lock.cpu);
        // Why sound: one access at a time (Exclusive); the guard holds this CPU's exclusion (IRQs
        // off or the RT lock), or the caller below adds the IRQ-off section `local_lock()` lacks.
        let access = || {
            self.lock.exclusive.run(Some(cx), &what, || {
                // SAFETY: one access at a time (Exclusive), see the comment above.
                self.lock.data.with_mut(|d| f(unsafe { &mut *d }))
            })
        };
        if matches!(self.held, Some(Held::Preempt(_))) && !cx.irqs_disabled() {
            // `local_lock()` leaves interrupts on: a hardirq user would race the holder for real.
            // biosim serialises the access and leaves the report to lockdep's usage check.
            let flags = cx.local_irq_save();
            let r = access();
            cx.local_irq_restore(flags);
            return r;
        }
        access()
    }
}

impl<T> Drop for LocalLockGuard<'_, T> {
    fn drop(&mut self) {
        let cx = self.cx;
        match self.held.take() {
            Some(Held::IrqSave(flags, held)) => {
                cx.lock_release(held);
                cx.local_irq_restore(flags);
            }
            Some(Held::Irq(held)) => {
                cx.lock_release(held);
                cx.local_irq_enable();
            }
            Some(Held::Preempt(held)) => {
                cx.lock_release(held);
                cx.preempt_enable();
            }
            Some(Held::Rt(held)) => {
                self.lock.rt_lock.store(false, Ordering::Release);
                cx.lock_release(held);
            }
            None => {}
        }
    }
}
