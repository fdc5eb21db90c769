//! Where an idle CPU thread sleeps when something else than its condition variable must wake it:
//! the [`IdleWait`] of a CPU (`kernel/sched/idle.c`'s `do_idle()` waiting in `cpuidle_idle_call()`
//! until an interrupt or a reschedule IPI; here until an I/O completion in the CPU's own io_uring
//! or an ordinary wake-up of the runtime).
//!
//! A CPU thread with an [`IdleWait`] installed ([`super::ThreadedRuntime::set_idle_wait`]) parks
//! in [`IdleWait::wait`] instead of on its condition variable; the runtime's wake-up of that CPU
//! (the kernel's waker, a mailbox message, a hotplug step) calls [`IdleWait::wake`] while the
//! thread is in there, so a wake-up is never lost: the parker's kick flag is set first, under the
//! same lock that says whether the thread is in the wait, and a wait entered after the kick returns
//! at once (see `Parker::park`).

use std::time::Duration;

/// A CPU thread's idle sleep with its own wake-up sources (e.g. one io_uring per CPU, see
/// [`crate::dev::uring_cpu::CpuRing`]). Called only on the CPU's own thread, except
/// [`IdleWait::wake`].
pub trait IdleWait: Send + Sync {
    /// Sleeps until something of this waiter's own is ready (an I/O completion), [`IdleWait::wake`]
    /// is called (also if it was called since the last `wait`), or `timeout` passes. Collects what
    /// is ready for [`IdleWait::deliver`]; must not raise interrupts itself.
    fn wait(&self, timeout: Duration);

    /// Makes the current (or the next) [`IdleWait::wait`] return.
    fn wake(&self);

    /// Hands work queued for this waiter's own source on without sleeping (an io_uring: submits
    /// queued SQEs); called by a park that returns at once because a wake-up was pending.
    fn flush(&self) {}

    /// The CPU's thread will never wait here again (the runtime stopped): the waiter must refuse
    /// new work from now on and finish or hand back what it already accepted, since nobody else
    /// reaps it. Called once, on the CPU's own thread, after its last park.
    fn detach(&self) {}

    /// Whether an event of its own is on its way (an I/O in the kernel), which ends the current
    /// or next [`IdleWait::wait`] by itself: a thread that polls a condition while waiting may
    /// then sleep its longest slice, since polling sooner only wakes it for nothing.
    fn in_flight(&self) -> bool {
        false
    }

    /// Hands over what the last [`IdleWait::wait`] collected (e.g. raises the completion
    /// interrupt on this CPU); called after the thread has left the wait, so the wake-ups it
    /// causes on its own CPU need no [`IdleWait::wake`]. Returns whether there was anything.
    fn deliver(&self) -> bool;
}
