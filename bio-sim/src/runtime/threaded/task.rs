//! The pending result of a closure posted to a CPU thread: [`TaskHandle`].

use super::error::ThreadedError;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// The pending result of a closure posted with `ThreadedRuntime::post_on`.
#[derive(Debug)]
pub struct TaskHandle<R> {
    pub(super) rx: Receiver<Result<R, ThreadedError>>,
}

impl<R> TaskHandle<R> {
    /// Waits for the closure's result. [`ThreadedError::Stopped`] if the runtime stopped first,
    /// [`ThreadedError::CpuOffline`] if the CPU went offline before it ran,
    /// [`ThreadedError::Panicked`] if it panicked.
    pub fn wait(self) -> Result<R, ThreadedError> {
        self.rx.recv().unwrap_or(Err(ThreadedError::Stopped))
    }

    /// Like [`TaskHandle::wait`], giving up after `timeout` (`Err(self)` to wait again later).
    pub fn wait_timeout(self, timeout: Duration) -> Result<Result<R, ThreadedError>, Self> {
        match self.rx.recv_timeout(timeout) {
            Ok(r) => Ok(r),
            Err(RecvTimeoutError::Timeout) => Err(self),
            Err(RecvTimeoutError::Disconnected) => Ok(Err(ThreadedError::Stopped)),
        }
    }
}
