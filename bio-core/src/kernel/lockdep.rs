//! `kernel/locking/lockdep.c`'s wait-context check (`check_wait_context()`) and the lock classes
//! it knows, with the preemption side effects of taking each lock (`include/linux/spinlock.h`,
//! `include/linux/local_lock.h`, `kernel/locking/spinlock_rt.c`).
//!
//! On PREEMPT_RT `spinlock_t` and `local_lock_t` are sleeping locks (rtmutex based). Taking one
//! from a context that cannot sleep (a hard interrupt, inside a `raw_spinlock_t`) is lockdep's
//! "BUG: Invalid wait context", the bug class of finding 4.

use super::{Cpu, Report, ReportKind};
use std::fmt;

/// Lockdep's `enum lockdep_wait_type`, ordered from most to least restrictive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WaitType {
    /// `LD_WAIT_SPIN`: spinning locks only (`raw_spinlock_t`).
    Spin,
    /// `LD_WAIT_CONFIG`: spinning on !RT, sleeping on RT (`spinlock_t`, `local_lock_t`).
    Config,
    /// `LD_WAIT_SLEEP`: may sleep (`mutex`).
    Sleep,
}

/// A lock type, with the wait type lockdep gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockClass {
    /// `raw_spinlock_t`: always spins, disables preemption.
    RawSpinlock,
    /// `spinlock_t`: spins and disables preemption on !RT; an rtmutex on RT.
    Spinlock,
    /// `local_lock_t`: `preempt_disable()` on !RT; a per-CPU `spinlock_t` on RT.
    LocalLock,
    /// `struct mutex`: always sleeps.
    Mutex,
}

impl LockClass {
    /// The lock's wait type (`lockdep_map::wait_type_inner`).
    pub fn wait_type(self) -> WaitType {
        match self {
            Self::RawSpinlock => WaitType::Spin,
            Self::Spinlock | Self::LocalLock => WaitType::Config,
            Self::Mutex => WaitType::Sleep,
        }
    }

    /// Whether taking this lock may sleep under `config` (a sleeping lock does not make the
    /// holder atomic).
    pub fn sleeps(self, config: &super::KernelConfig) -> bool {
        match self.wait_type() {
            WaitType::Spin => false,
            WaitType::Config => config.preempt_rt(),
            WaitType::Sleep => true,
        }
    }

    /// The kernel type name.
    pub fn kernel_type(self) -> &'static str {
        match self {
            Self::RawSpinlock => "raw_spinlock_t",
            Self::Spinlock => "spinlock_t",
            Self::LocalLock => "local_lock_t",
            Self::Mutex => "struct mutex",
        }
    }
}

/// A lock the current context holds, returned by [`Cpu::lock_acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a held lock must be released with Cpu::lock_release"]
pub struct HeldLock {
    /// The lock type.
    pub class: LockClass,
    /// The lock's name, e.g. `bio_complete_batch.lock`.
    pub name: &'static str,
    disabled_preemption: bool,
}

impl fmt::Display for HeldLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.class.kernel_type())
    }
}

impl Cpu {
    /// The most a lock taken here may wait, lockdep's `curr_inner`: hardirq is `LD_WAIT_SPIN` on
    /// RT (only non-threaded handlers run there) and `LD_WAIT_CONFIG` on !RT (handlers that RT
    /// would thread); a held lock caps it at its own wait type.
    pub fn context_wait_type(&self) -> WaitType {
        let rt = self.config().preempt_rt();
        let mut ceiling = if self.in_nmi() {
            WaitType::Spin
        } else if self.in_hardirq() {
            if rt {
                WaitType::Spin
            } else {
                WaitType::Config
            }
        } else if self.in_serving_softirq() && !rt {
            WaitType::Config
        } else {
            WaitType::Sleep
        };
        for held in self.held_locks.borrow().iter() {
            ceiling = ceiling.min(held.class.wait_type());
        }
        ceiling
    }

    /// Takes a lock of `class` named `name` in the current context (`lock_acquire()` plus the
    /// lock's own preemption effect).
    ///
    /// With `CONFIG_PROVE_LOCKING` a lock whose wait type exceeds what the context allows is
    /// reported as "BUG: Invalid wait context" (on !RT `LD_WAIT_CONFIG` spins, so only RT can hit
    /// it with `spinlock_t`/`local_lock_t`). On RT, taking a sleeping lock with IRQs disabled is
    /// the rtlock `might_sleep()` splat. Either way the lock is still taken, as the kernel would
    /// (it prints and carries on), so the caller can release it.
    pub fn lock_acquire(&self, class: LockClass, name: &'static str) -> (HeldLock, Option<Report>) {
        let (mut held, report) = self.lockdep_acquire(class, name);
        held.disabled_preemption = !class.sleeps(self.config());
        if held.disabled_preemption {
            self.preempt_disable();
            if let Some(h) = self.held_locks.borrow_mut().last_mut() {
                h.disabled_preemption = true;
            }
        }
        (held, report)
    }

    /// The lockdep half of taking a lock (`lock_acquire()` on its `lockdep_map`) with no effect on
    /// preemption: what `local_lock_irqsave()` does on !RT after `local_irq_save()`, and the
    /// check every lock type runs. Reports like [`Cpu::lock_acquire`].
    pub fn lockdep_acquire(
        &self,
        class: LockClass,
        name: &'static str,
    ) -> (HeldLock, Option<Report>) {
        let mut report = None;
        let rt = self.config().preempt_rt();
        let effective = match class.wait_type() {
            WaitType::Config if !rt => WaitType::Spin,
            w => w,
        };
        let ceiling = match self.context_wait_type() {
            WaitType::Config if !rt => WaitType::Spin,
            w => w,
        };
        if self.config().prove_locking && effective > ceiling {
            let task = self.current();
            let held: Vec<String> = self
                .held_locks
                .borrow()
                .iter()
                .map(|h| h.to_string())
                .collect();
            let message = format!(
                "BUG: Invalid wait context\n\
                 {} is trying to lock:\n {name} ({}) {{{:?}}}\n\
                 other info that might help us debug this:\n context-{{{:?}}}\n {} lock(s) held{}{}",
                task.comm,
                class.kernel_type(),
                class.wait_type(),
                self.context_wait_type(),
                held.len(),
                if held.is_empty() { "" } else { ": " },
                held.join(", ")
            );
            report = Some(self.report(ReportKind::InvalidWaitContext, message));
        } else if class.sleeps(self.config()) {
            // Formatted only if a report is made.
            let site = format_args!("kernel/locking/spinlock_rt.c ({name})");
            report = if class.wait_type() == WaitType::Config {
                // rt_spin_lock() → rtlock_might_resched(): __might_resched() with the RCU nesting
                // as the expected offset, so an rtlock inside rcu_read_lock() (every RT softirq)
                // is fine; preemption or IRQs off are not.
                self.might_resched_rtlock(site).err()
            } else {
                self.might_sleep_at(site).err()
            };
        }
        let held = HeldLock {
            class,
            name,
            disabled_preemption: false,
        };
        self.held_locks.borrow_mut().push(held.clone());
        (held, report)
    }

    /// Releases a lock taken with [`Cpu::lock_acquire`] (`lock_release()`). Releasing a lock the
    /// context does not hold is lockdep's "bad unlock balance", reported as a WARN.
    pub fn lock_release(&self, held: HeldLock) {
        let pos = self.held_locks.borrow().iter().rposition(|h| *h == held);
        match pos {
            Some(i) => {
                drop(self.held_locks.borrow_mut().remove(i));
                if held.disabled_preemption {
                    self.preempt_enable();
                }
            }
            None => self.warn(&format!(
                "kernel/locking/lockdep.c: WARNING: bad unlock balance detected! {held}"
            )),
        }
    }

    /// The locks the current context holds, innermost last.
    pub fn held_locks(&self) -> Vec<HeldLock> {
        self.held_locks.borrow().clone()
    }
}
