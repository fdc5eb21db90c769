//! loom build: instrumented locks, atomics and cells, wrapped into the parking_lot shape.

pub use loom::sync::Arc;

/// The identity of a loom thread, for [`super::LockOwner`].
pub type ThreadId = loom::thread::ThreadId;

/// The calling loom thread's identity.
pub fn current_thread_id() -> ThreadId {
    loom::thread::current().id()
}

/// Atomics, re-exported so callers never name `loom::sync::atomic`.
pub mod atomic {
    pub use loom::sync::atomic::{
        fence, AtomicBool, AtomicI32, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicU8,
        AtomicUsize, Ordering,
    };
}

pub use loom::cell::UnsafeCell;

/// A loom mutex whose `lock()` returns the guard directly (no poisoning), like parking_lot.
#[derive(Debug, Default)]
pub struct Mutex<T>(loom::sync::Mutex<T>);

/// Guard of [`Mutex`].
pub type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Self {
        Self(loom::sync::Mutex::new(value))
    }

    /// Locks, never reporting poisoning (a panicking model already failed).
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tries to lock without blocking.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.0.try_lock().ok()
    }

    /// Consumes the mutex and returns its contents.
    pub fn into_inner(self) -> T {
        self.0.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

/// A loom scheduling point inside retry loops.
#[inline]
pub fn spin_loop() {
    loom::thread::yield_now();
}

/// A lock taken and released by separate calls (not a guard), for the per-CPU IRQ flag. Under loom
/// a waiter blocks on a condition variable instead of spinning: a spinning waiter can be scheduled
/// forever without loom counting a preemption, which explodes the branch count of models where
/// several flows of one CPU contend.
#[derive(Debug, Default)]
pub struct RawLock {
    held: loom::sync::Mutex<bool>,
    released: loom::sync::Condvar,
}

impl RawLock {
    /// An unlocked lock.
    pub fn new() -> Self {
        Self {
            held: loom::sync::Mutex::new(false),
            released: loom::sync::Condvar::new(),
        }
    }

    /// Takes the lock, blocking while another flow holds it.
    pub fn lock(&self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        while *held {
            held = self.released.wait(held).unwrap_or_else(|e| e.into_inner());
        }
        *held = true;
    }

    /// Releases the lock and wakes a waiter.
    pub fn unlock(&self) {
        *self.held.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.released.notify_one();
    }
}
