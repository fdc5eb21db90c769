//! `struct bio_complete_batch`: one CPU's list of deferred bios and its work item, with the three
//! ways the posted versions protect the list.
//!
//! The list is an [`UnsafeCell`] that only this CPU touches, with IRQs off (`local_irq_save()`
//! variants) or under the local lock (`local_lock` variant), exactly as the kernel's per-CPU data.
//! The dead-CPU drain touches it with neither: it relies on the hotplug protocol (the CPU is dead,
//! its work disabled). Under loom that reliance is checked by the causality checker.

use super::variant::{ListKind, Variant};
use crate::block::{Bio, BioList};
use crate::kernel::llist::{llist_add, llist_del_all, llist_reverse_order, LlistHead};
use crate::kernel::{Cpu, CpuId, HeldLock, IrqFlags, LockClass};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::UnsafeCell;
use crate::workqueue::{DelayedWork, WorkStruct};

/// The batch's work item.
#[derive(Debug, Clone, Copy)]
pub(crate) enum BatchWork {
    /// `struct work_struct` (v7).
    Plain(WorkStruct),
    /// `struct delayed_work` (v5, v6), with the variant's delay in jiffies.
    Delayed(DelayedWork, u64),
}

impl BatchWork {
    /// The `work_struct` (of the `delayed_work`, for v5/v6).
    pub(crate) fn work_struct(self) -> WorkStruct {
        match self {
            BatchWork::Plain(w) => w,
            BatchWork::Delayed(d, _) => d.work,
        }
    }
}

/// `struct bio_complete_batch`.
pub(crate) struct BioCompleteBatch {
    /// `batch->cpu`.
    pub(crate) cpu: CpuId,
    /// `batch->list` (bio_list variants).
    list: UnsafeCell<BioList>,
    /// `batch->list` as an `llist_head` (v5).
    llist: LlistHead,
    /// `batch->lock` on PREEMPT_RT, where `local_lock_t` is a per-CPU `spinlock_t`.
    rt_lock: AtomicBool,
    /// `batch->work`.
    pub(crate) work: BatchWork,
}

// SAFETY: the UnsafeCell'd list is only reached under the per-CPU exclusion described in the
// module docs; bios are Send.
unsafe impl Send for BioCompleteBatch {}
// SAFETY: as above.
unsafe impl Sync for BioCompleteBatch {}

/// Proof of holding the batch's list exclusively: IRQs off on its CPU, or the local lock.
pub(crate) struct ListGuard<'a> {
    batch: &'a BioCompleteBatch,
    cx: &'a Cpu,
    how: Held<'a>,
}

enum Held<'a> {
    IrqSave(IrqFlags),
    IrqDisable,
    LocalLockIrqSave(IrqFlags, HeldLock),
    LocalLockIrq(HeldLock),
    RtLock(HeldLock, &'a AtomicBool),
    /// The `bug-worker-list-no-irq-off` twin: the worker holds nothing.
    #[cfg(feature = "bug-worker-list-no-irq-off")]
    Nothing,
}

const LOCK_NAME: &str = "bio_complete_batch.lock";

impl BioCompleteBatch {
    pub(crate) fn new(cpu: CpuId, work: BatchWork) -> Self {
        Self {
            cpu,
            list: UnsafeCell::new(BioList::new()),
            llist: LlistHead::new(),
            rt_lock: AtomicBool::new(false),
            work,
        }
    }

    /// Takes the list exclusively as the producer does (`local_irq_save()` or
    /// `local_lock_irqsave()`), or as the worker does (`local_irq_disable()` or
    /// `local_lock_irq()`) when `irq` is false... `producer` selects the irqsave forms.
    ///
    /// `this_cpu` is the batch of the CPU running `cx`: `local_lock(&bio_complete_batch.lock)`
    /// takes `this_cpu_ptr()`'s lock, whichever batch's list the code then touches.
    pub(crate) fn lock<'a>(
        &'a self,
        this_cpu: &'a BioCompleteBatch,
        cx: &'a Cpu,
        variant: &Variant,
        producer: bool,
    ) -> ListGuard<'a> {
        let how = match variant.list {
            // Twin: the worker takes the list with IRQs on, racing this CPU's IRQ producers.
            #[cfg(feature = "bug-worker-list-no-irq-off")]
            ListKind::BioListIrqSave if !producer => Held::Nothing,
            ListKind::BioListIrqSave | ListKind::Llist => {
                if producer {
                    Held::IrqSave(cx.local_irq_save())
                } else {
                    cx.local_irq_disable();
                    Held::IrqDisable
                }
            }
            ListKind::BioListLocalLock if cx.config().preempt_rt() => {
                // RT: local_lock_t is a per-CPU spinlock_t (an rtmutex): a sleeping lock that does
                // not disable interrupts. Lockdep checks the wait context; the lock excludes.
                let (held, _report) = cx.lockdep_acquire(LockClass::LocalLock, LOCK_NAME);
                while this_cpu
                    .rt_lock
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
                {
                    crate::sync::spin_loop();
                }
                Held::RtLock(held, &this_cpu.rt_lock)
            }
            ListKind::BioListLocalLock => {
                if producer {
                    let flags = cx.local_irq_save();
                    let (held, _report) = cx.lockdep_acquire(LockClass::LocalLock, LOCK_NAME);
                    Held::LocalLockIrqSave(flags, held)
                } else {
                    cx.local_irq_disable();
                    let (held, _report) = cx.lockdep_acquire(LockClass::LocalLock, LOCK_NAME);
                    Held::LocalLockIrq(held)
                }
            }
        };
        ListGuard {
            batch: self,
            cx,
            how,
        }
    }

    /// `llist_add()`: pushes a bio; returns whether the list was empty.
    pub(crate) fn llist_add(&self, bio: Box<Bio>) -> bool {
        llist_add(bio, &self.llist)
    }

    /// `llist_del_all()` + `llist_reverse_order()`: takes every bio, oldest first.
    pub(crate) fn llist_del_all(&self) -> BioList {
        llist_reverse_order(llist_del_all(&self.llist)).into_bio_list()
    }

    /// `llist_empty()`.
    pub(crate) fn llist_empty(&self) -> bool {
        self.llist.empty()
    }

    /// Counts the bios without taking them, and without any lock (see [`Self::take_unlocked`]).
    pub(crate) fn len_unlocked(&self, variant: &Variant) -> usize {
        match variant.list {
            ListKind::Llist => self.llist.len_unlocked(),
            // SAFETY: a read between steps, see the method docs.
            _ => self.list.with(|l| unsafe { (*l).size() }),
        }
    }

    /// The dead-CPU drain's access: no lock at all. Sound only once the CPU is dead and its work
    /// disabled, which the hotplug protocol guarantees and loom checks.
    pub(crate) fn take_unlocked(&self, variant: &Variant) -> BioList {
        match variant.list {
            ListKind::Llist => self.llist_del_all(),
            // SAFETY: see the method docs; loom's UnsafeCell records the access.
            _ => self.list.with_mut(|l| unsafe { std::mem::take(&mut *l) }),
        }
    }
}

impl ListGuard<'_> {
    /// `bio_list_empty(&batch->list)`.
    pub(crate) fn empty(&self) -> bool {
        // SAFETY: the guard proves exclusive access.
        self.batch.list.with(|l| unsafe { (*l).empty() })
    }

    /// `bio_list_add(&batch->list, bio)`.
    pub(crate) fn add(&self, bio: Box<Bio>) {
        // SAFETY: the guard proves exclusive access.
        self.batch.list.with_mut(|l| unsafe { (*l).add(bio) });
    }

    /// `list = batch->list; bio_list_init(&batch->list)`.
    pub(crate) fn take(&self) -> BioList {
        // SAFETY: the guard proves exclusive access.
        self.batch
            .list
            .with_mut(|l| unsafe { std::mem::take(&mut *l) })
    }
}

impl Drop for ListGuard<'_> {
    fn drop(&mut self) {
        let cx = self.cx;
        match std::mem::replace(&mut self.how, Held::IrqDisable) {
            Held::IrqSave(flags) => cx.local_irq_restore(flags),
            Held::IrqDisable => cx.local_irq_enable(),
            Held::LocalLockIrqSave(flags, held) => {
                cx.lock_release(held);
                cx.local_irq_restore(flags);
            }
            Held::LocalLockIrq(held) => {
                cx.lock_release(held);
                cx.local_irq_enable();
            }
            Held::RtLock(held, lock) => {
                lock.store(false, Ordering::Release);
                cx.lock_release(held);
            }
            #[cfg(feature = "bug-worker-list-no-irq-off")]
            Held::Nothing => {}
        }
    }
}
