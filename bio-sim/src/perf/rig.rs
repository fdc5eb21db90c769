//! The threaded measurement machine that the deferral and latency measurements share: booting a
//! kernel with the batcher on the threaded runtime, the batcher observer that counts wake-ups,
//! stopping the machine with a check, and [`MeasureError`].
//!
//! Everything measured on it runs on the [threaded runtime](crate::runtime::threaded): one OS
//! thread per simulated CPU, real time, a real-time jiffies ticker at the kernel config's
//! `CONFIG_HZ`. Bios are completed the way a driver completes them: a hard interrupt is raised on
//! a simulated CPU (`Kernel::raise_irq`) and its handler calls `bio_endio()` on a batch of bios in
//! hardirq context on that CPU's thread.
//!
//! # What a "wake-up" is
//!
//! - **Worker wake-ups** (`RoundStats::worker_wakeups`, `LoadLatency::worker_wakeups`): for
//!   the batcher, the runs of `bio_complete_work_fn` (from [`BatcherObserver::work_fn`]): each is
//!   a kworker being woken and switched to in the kernel, and here the CPU's thread switching from
//!   interrupt delivery to the worker. For the channel design, the times the dedicated worker
//!   thread found the channel empty and blocked until a send woke it. The direct design has no
//!   worker. The target: at most one per interrupt (one batch), i.e. at most
//!   `1 / bios_per_irq` per bio.
//! - **Work queued** (`RoundStats::work_queued`): `queue_work_on()`/`mod_delayed_work_on()`
//!   calls of the batcher that queued the work (from [`BatcherObserver::scheduled`]).
//! - **CPU-thread wake-ups** (`RoundStats::cpu_thread_wakeups`): OS-level wake-ups of the
//!   simulated CPUs' threads from idle sleep (the runtime's counters).

use crate::runtime::threaded::{ThreadedConfig, ThreadedError, ThreadedRuntime};
use bio_core::block::complete_in_task::{bio_complete_init, BatcherObserver, InitError, Variant};
use bio_core::block::Bio;
use bio_core::kernel::{ConfigError, CpuId};
use bio_core::{Cpu, Kernel, KernelConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Why a measurement could not be made. The machine it ran on is stopped before this is returned.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// The measurement's own configuration is unusable.
    #[error("invalid measurement config: {0}")]
    Config(String),
    /// The kernel config was rejected.
    #[error("kernel config: {0}")]
    Kernel(#[from] ConfigError),
    /// The task-completion batcher could not be initialised.
    #[error("batcher init: {0}")]
    Init(#[from] InitError),
    /// The threaded runtime could not start (or refused an operation).
    #[error("threaded runtime: {0}")]
    Runtime(#[from] ThreadedError),
    /// The channel design's worker thread could not be spawned.
    #[error("spawning the channel worker thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// An interrupt could not be raised.
    #[error("raising an IRQ on {cpu}: {reason}")]
    Raise {
        /// The CPU aimed at.
        cpu: CpuId,
        /// Why the kernel refused it.
        reason: &'static str,
    },
    /// Not every bio completed in time (a stranded bio, or a hopelessly overloaded host).
    #[error("{what}: {completed} of {expected} bios completed within {timeout:?}")]
    Timeout {
        /// What was being measured.
        what: String,
        /// Bios whose `bi_end_io` ran.
        completed: u64,
        /// Bios submitted.
        expected: u64,
        /// The timeout.
        timeout: Duration,
    },
    /// Work was still runnable long after the last completion.
    #[error("{what}: the machine did not quiesce within {timeout:?}")]
    NotQuiescent {
        /// What was being measured.
        what: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The runtime stopped with something still in flight.
    #[error("{what}: unclean shutdown of the threaded runtime:\n{report}")]
    Unclean {
        /// What was being measured.
        what: String,
        /// The runtime's shutdown report.
        report: String,
    },
    /// The machine was already shut down.
    #[error("the measurement machine is already shut down")]
    Stopped,
}

impl From<bio_core::irq::IrqError> for MeasureError {
    fn from(e: bio_core::irq::IrqError) -> Self {
        MeasureError::Raise {
            cpu: e.cpu,
            reason: e.reason,
        }
    }
}

/// The bios one interrupt handler completes, boxed because `bio_endio()` takes `Box<Bio>`.
#[allow(clippy::vec_box)]
pub(super) type Batch = Vec<Box<Bio>>;

/// An atomic counter on its own cache line (per-CPU counters bumped once per bio).
#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

/// The batcher observer of a measurement: counts work-function runs, queueing calls and
/// deferrals (per CPU, so the per-bio count does not bounce a cache line between CPUs).
pub(super) struct BatchCounters {
    work_fn: AtomicU64,
    queued: AtomicU64,
    deferred: Box<[Padded]>,
}

impl BatchCounters {
    fn new(nr_cpus: u32) -> Self {
        Self {
            work_fn: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            deferred: (0..nr_cpus).map(|_| Padded::default()).collect(),
        }
    }

    /// (work-function runs, queueing calls that queued, deferred bios) so far.
    pub(super) fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.work_fn.load(Ordering::Acquire),
            self.queued.load(Ordering::Acquire),
            self.deferred
                .iter()
                .map(|p| p.0.load(Ordering::Acquire))
                .sum(),
        )
    }
}

impl BatcherObserver for BatchCounters {
    fn deferred(&self, _bio: u64, cx: &Cpu) {
        if let Some(p) = self.deferred.get(cx.id().index()) {
            p.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn work_fn(&self, _batch_cpu: CpuId, _cx: &Cpu) {
        self.work_fn.fetch_add(1, Ordering::Relaxed);
    }

    fn scheduled(&self, _batch_cpu: CpuId, queued: bool) {
        if queued {
            self.queued.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Boots a kernel and starts the threaded runtime on it, with the batcher if `variant` is given.
pub(super) fn boot(
    kernel_config: KernelConfig,
    nr_cpus: u32,
    variant: Option<Variant>,
) -> Result<(Arc<Kernel>, ThreadedRuntime, Arc<BatchCounters>), MeasureError> {
    let kernel = Kernel::new(kernel_config, nr_cpus)?;
    let counters = Arc::new(BatchCounters::new(nr_cpus));
    if let Some(v) = variant {
        let observer: Arc<dyn BatcherObserver> = counters.clone();
        bio_complete_init(&kernel, v, Some(observer))?;
    }
    let rt = ThreadedRuntime::start(Arc::clone(&kernel), ThreadedConfig::default())?;
    Ok((kernel, rt, counters))
}

/// Drains the runtime (delayed work included) and stops it, reporting anything left in flight.
pub(super) fn stop_runtime(
    rt: ThreadedRuntime,
    timeout: Duration,
    what: &str,
) -> Result<(), MeasureError> {
    let drained = rt.drain(timeout);
    let report = rt.shutdown();
    if !drained || !report.is_clean() {
        return Err(MeasureError::Unclean {
            what: what.to_owned(),
            report: report.to_string(),
        });
    }
    Ok(())
}

/// Total OS-level wake-ups of the CPU threads so far.
pub(super) fn cpu_thread_wakeups(rt: &ThreadedRuntime) -> u64 {
    rt.stats().total().wakeups
}
