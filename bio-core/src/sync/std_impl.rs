//! Normal build: parking_lot locks and std atomics.

pub use parking_lot::{Mutex, MutexGuard};
pub use std::sync::Arc;

/// The identity of a thread, for [`super::LockOwner`].
pub type ThreadId = std::thread::ThreadId;

/// The calling thread's identity.
pub fn current_thread_id() -> ThreadId {
    std::thread::current().id()
}

/// A number naming the calling thread for [`super::LockOwner`], never 0 and never reused within
/// the process: drawn once per thread from a counter, then read from a thread-local (no
/// `std::thread::current()`, which clones and drops an `Arc` on every call). Not kernel state and
/// not in loom builds.
pub(super) fn thread_tag() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    thread_local! {
        static TAG: u64 = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    TAG.with(|t| *t)
}

/// Atomics, re-exported so callers never name `std::sync::atomic`.
pub mod atomic {
    pub use std::sync::atomic::{
        fence, AtomicBool, AtomicI32, AtomicPtr, AtomicU16, AtomicU32, AtomicU64, AtomicU8,
        AtomicUsize, Ordering,
    };
}

/// A cell whose accesses are checked by loom in loom builds and free here.
///
/// Mirrors `loom::cell::UnsafeCell`: all access goes through closures receiving raw pointers,
/// so the loom build can record every access for its causality checker.
#[derive(Debug, Default)]
pub struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

impl<T> UnsafeCell<T> {
    /// Wraps `value`.
    pub const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Calls `f` with a shared raw pointer to the contents.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Calls `f` with a mutable raw pointer to the contents.
    #[inline]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }

    /// Consumes the cell and returns its contents.
    pub fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

/// Hint inside retry loops; a loom scheduling point in loom builds.
#[inline]
pub fn spin_loop() {
    std::hint::spin_loop();
}

/// A lock taken and released by separate calls (not a guard), for the per-CPU IRQ flag: a
/// test-and-set spin lock. Within one runtime it is never contended (one thread per CPU), so the
/// fast path is a single compare-and-swap.
#[derive(Debug, Default)]
pub struct RawLock(std::sync::atomic::AtomicBool);

impl RawLock {
    /// An unlocked lock.
    pub fn new() -> Self {
        Self(std::sync::atomic::AtomicBool::new(false))
    }

    /// Takes the lock, spinning while another flow holds it.
    pub fn lock(&self) {
        use std::sync::atomic::Ordering;
        while self
            .0
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
    }

    /// Releases the lock.
    pub fn unlock(&self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}
