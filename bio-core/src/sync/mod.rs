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
#[derive(Debug, Default)]
pub struct LockOwner(std::sync::Mutex<Option<ThreadId>>);

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
