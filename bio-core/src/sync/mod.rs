//! The synchronisation facade of bio-core: the only module that names `std::sync`, `parking_lot`
//! or `loom`.
//!
//! Normal builds use parking_lot locks and std atomics; `RUSTFLAGS="--cfg loom"` swaps in loom's
//! instrumented types so the loom models in `tests/` explore the very code the simulator runs.
//! Both builds offer the same parking_lot-shaped API (no lock poisoning) and loom's
//! `UnsafeCell::with`/`with_mut` closure API, the way tokio's `loom` module does.

#[cfg(not(loom))]
mod std_impl;
#[cfg(not(loom))]
pub use std_impl::*;

#[cfg(loom)]
mod loom_impl;
#[cfg(loom)]
pub use loom_impl::*;

/// An `Arc` loom does not track, for immutable shared values that need unsized coercion
/// (`Arc<dyn Fn>` callbacks, `Arc<dyn Any>` private data): loom's `Arc` cannot hold trait objects,
/// and nothing about these values is a race loom should explore.
pub use std::sync::Arc as UntrackedArc;

/// The weak half of [`UntrackedArc`] (a work function's way back to the device that owns it).
pub use std::sync::Weak as UntrackedWeak;

/// A once-set cell loom does not track, for values fixed before any simulated execution starts
/// (a runtime's wake-up hook).
pub use std::sync::OnceLock as UntrackedOnceLock;

/// Atomics loom does not track, for heuristics and statistics that are not part of any protocol
/// loom should explore (the livelock detector's counters).
pub mod untracked {
    pub use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    /// For metadata no model checks (trace numbering), never for kernel state.
    pub use std::sync::Mutex;
}

/// Which thread holds a lock, so that taking it again on the same thread (a self-deadlock that
/// would hang without a word) panics with a message instead. A misuse check of biosim's API, not a
/// model of anything in the kernel (lockdep would report the kernel's recursive locking): loom does
/// not track it, and it is only touched with no loom operation in between.
///
/// Outside loom it is one untracked atomic holding the holder's [`thread_tag`] (0: none), read and
/// written only by the holder itself: the hotplug lock and every per-CPU access take it, and a
/// `Mutex<Option<ThreadId>>` with `std::thread::current()` per call was a tenth of an explore
/// case's time. A thread compares the slot with its own tag, which only it writes, so `Relaxed`
/// suffices (coherence: a thread reads its own last store or a later one).
#[derive(Debug, Default)]
pub struct LockOwner(
    #[cfg(not(loom))] std::sync::atomic::AtomicU64,
    #[cfg(loom)] std::sync::Mutex<Option<ThreadId>>,
);

#[cfg(not(loom))]
impl LockOwner {
    /// Whether the calling thread is the recorded holder.
    pub fn held_by_current(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed) == thread_tag()
    }

    /// Records the calling thread as the holder (right after it took the lock).
    pub fn set_current(&self) {
        self.0
            .store(thread_tag(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Forgets the holder (right before the lock is released).
    pub fn clear(&self) {
        self.0.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(loom)]
impl LockOwner {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<ThreadId>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the calling thread is the recorded holder.
    pub fn held_by_current(&self) -> bool {
        *self.slot() == Some(current_thread_id())
    }

    /// Records the calling thread as the holder (right after it took the lock).
    pub fn set_current(&self) {
        *self.slot() = Some(current_thread_id());
    }

    /// Forgets the holder (right before the lock is released).
    pub fn clear(&self) {
        *self.slot() = None;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::LockOwner;

    /// The holder is the thread that set it, and only that thread: another thread (as a second
    /// runtime thread contending for the hotplug lock would be) never reads itself as the holder,
    /// and neither does the holder once it cleared the slot.
    #[test]
    fn lock_owner_names_only_the_setting_thread() {
        let owner = LockOwner::default();
        assert!(!owner.held_by_current());
        owner.set_current();
        assert!(owner.held_by_current());
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(!owner.held_by_current());
                owner.set_current();
                assert!(owner.held_by_current());
            });
        });
        assert!(!owner.held_by_current(), "the other thread holds it now");
        owner.set_current();
        owner.clear();
        assert!(!owner.held_by_current());
    }

    /// `RawLock` (the per-CPU IRQ flag's lock) keeps a second taker out until it is released,
    /// then lets it in.
    #[test]
    fn raw_lock_keeps_a_second_taker_out_until_unlocked() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        let lock = super::std_impl::RawLock::new();
        let got_in = AtomicBool::new(false);
        lock.lock();
        std::thread::scope(|s| {
            s.spawn(|| {
                lock.lock();
                got_in.store(true, SeqCst);
                lock.unlock();
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!got_in.load(SeqCst), "a second lock() got in while held");
            lock.unlock();
        });
        assert!(
            got_in.load(SeqCst),
            "the second taker got in after the unlock"
        );
    }
}
