//! `kernel/rcu/srcutree.c` and `include/linux/srcu.h`, as far as lockdep and a blocking
//! `blk_mq` dispatch see them: `srcu_read_lock()` / `srcu_read_unlock()` around a read-side
//! section that may sleep, and `synchronize_srcu()`, which waits for every reader that started
//! before it.
//!
//! Lockdep sees the read side as a recursive read of the `srcu_struct`'s `dep_map`
//! (`srcu_lock_acquire()` → `lock_acquire(map, 0, 0, 2, …)`) and `synchronize_srcu()` as
//! `srcu_lock_sync()` → `lock_sync()`: so a reader that waits for something the updater holds is
//! a dependency cycle lockdep can report. The grace period itself is step-wise: the model does
//! not sleep, it says whether readers are still inside ([`SrcuStruct::readers`]), and the caller
//! (a runtime or a test) waits as the kernel would.

use super::{Cpu, HeldLock, LockClass, LockRead, Report};
use crate::sync::atomic::{AtomicU32, Ordering};

/// `struct srcu_struct`: a named SRCU domain (the tag set's `srcu` of a `BLK_MQ_F_BLOCKING`
/// queue, for instance) with its count of readers inside a read-side section.
#[derive(Debug)]
pub struct SrcuStruct {
    name: &'static str,
    readers: AtomicU32,
}

/// What `srcu_read_lock()` returns: the index to hand back to `srcu_read_unlock()`, here with the
/// lockdep acquisition it made.
#[derive(Debug)]
#[must_use = "an SRCU read-side section must be ended with srcu_read_unlock()"]
pub struct SrcuIdx {
    held: HeldLock,
}

impl SrcuStruct {
    /// `DEFINE_SRCU(name)` / `init_srcu_struct()`: the name is the lockdep class's.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            readers: AtomicU32::new(0),
        }
    }

    /// The lockdep class name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// `srcu_read_lock()`: enters a read-side section (a recursive read of the dep_map). Returns
    /// the index and lockdep's report, if the acquisition made one.
    pub fn srcu_read_lock(&self, cx: &Cpu) -> (SrcuIdx, Option<Report>) {
        let (held, report) =
            cx.lock_acquire_mode(LockClass::Srcu, self.name, LockRead::RecursiveRead);
        self.readers.fetch_add(1, Ordering::AcqRel);
        (SrcuIdx { held }, report)
    }

    /// `srcu_read_unlock()`.
    pub fn srcu_read_unlock(&self, idx: SrcuIdx, cx: &Cpu) {
        self.readers.fetch_sub(1, Ordering::AcqRel);
        cx.lock_release(idx.held);
    }

    /// `synchronize_srcu()`: `might_sleep()` and lockdep's `lock_sync()` on the dep_map. The
    /// caller then waits while [`SrcuStruct::readers`] is non-zero. Returns the first report.
    #[track_caller]
    pub fn synchronize_srcu(&self, cx: &Cpu) -> Option<Report> {
        let slept = cx.might_sleep_at(std::panic::Location::caller()).err();
        let sync = cx.lock_sync(LockClass::Srcu, self.name);
        slept.or(sync)
    }

    /// The readers inside a read-side section now: `synchronize_srcu()` returns once a grace
    /// period has seen this reach zero.
    pub fn readers(&self) -> u32 {
        self.readers.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{CpuId, KernelConfig};
    use crate::Kernel;

    #[test]
    fn a_read_side_section_is_counted_and_neither_sleeps_nor_disables_preemption() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let srcu = SrcuStruct::new("tagset.srcu");
        let (idx, report) = srcu.srcu_read_lock(&cx);
        assert!(report.is_none());
        assert_eq!(srcu.readers(), 1);
        assert_eq!(cx.preempt_count(), 0);
        // Sleeping inside SRCU is allowed (unlike rcu_read_lock()): the kernel's check and the
        // oracle's ground truth agree.
        assert!(cx.might_sleep().is_ok());
        assert!(cx.may_sleep());
        srcu.srcu_read_unlock(idx, &cx);
        assert_eq!(srcu.readers(), 0);
        assert!(cx.held_locks().is_empty());
        assert!(srcu.synchronize_srcu(&cx).is_none());
        assert!(k.reports().is_empty());
    }
}
