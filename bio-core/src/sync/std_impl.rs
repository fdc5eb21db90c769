//! Normal build: parking_lot locks and std atomics.

pub use parking_lot::{Mutex, MutexGuard};
pub use std::sync::Arc;

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
