//! Why a threaded-runtime operation failed: [`ThreadedError`].

use bio_core::kernel::CpuId;
use hotplug::HotplugError;
use std::time::Duration;

/// Why a threaded-runtime operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ThreadedError {
    /// The configuration is unusable.
    #[error("invalid threaded runtime config: {0}")]
    Config(&'static str),
    /// The CPU does not exist.
    #[error("{cpu} does not exist (the machine has {nr_cpus} CPUs)")]
    NoSuchCpu {
        /// The CPU asked for.
        cpu: CpuId,
        /// How many CPUs the machine has.
        nr_cpus: u32,
    },
    /// The CPU is offline: its thread runs nothing but hotplug steps.
    #[error("{0} is offline: its thread runs only the hotplug steps addressed to it")]
    CpuOffline(CpuId),
    /// The kernel already has a waker installed (a runtime ran on it before): one threaded
    /// runtime per kernel.
    #[error("this kernel already has a runtime waker installed: start the threaded runtime on a fresh kernel")]
    WakerInstalled,
    /// An OS thread could not be spawned.
    #[error("spawning thread {name}: {source}")]
    Spawn {
        /// The thread's name.
        name: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The call was made from one of the runtime's own CPU threads, where waiting for a CPU
    /// thread could deadlock.
    #[error("called from the thread of {0}: run_on, cpu_up and cpu_down must be called from outside the simulated CPUs")]
    FromCpuThread(CpuId),
    /// The runtime is stopping or stopped, or the CPU thread is gone.
    #[error("the threaded runtime is stopped")]
    Stopped,
    /// The code run on a CPU panicked.
    #[error("code run on {cpu} panicked: {message}")]
    Panicked {
        /// The CPU.
        cpu: CpuId,
        /// The panic message.
        message: String,
    },
    /// A hotplug step was not executed in time; the operation is left in progress.
    #[error("hotplug step `{step}` got no answer from the thread of {on} within {timeout:?}; the operation is left in progress")]
    StepTimeout {
        /// The step.
        step: String,
        /// The CPU that should have run it.
        on: CpuId,
        /// The timeout.
        timeout: Duration,
    },
    /// The hotplug machine refused the operation, or the operation failed (and was rolled back
    /// as the kernel does).
    #[error(transparent)]
    Hotplug(#[from] HotplugError),
}
