//! The interleaving steps of the deterministic runtime, named after what a real CPU does next.

use bio_core::kernel::CpuId;
use bio_core::workqueue::PoolId;
use std::fmt;

/// One interleaving step of the deterministic runtime: something a real CPU would do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    /// Deliver one pending hard interrupt on the CPU (then `irq_exit()` softirqs).
    Irq(CpuId),
    /// Run the CPU's pending softirq work (`ksoftirqd`).
    Softirq(CpuId),
    /// Run the timer softirq on the CPU: fire its due timers.
    Timers(CpuId),
    /// A worker of `pool` runs one work item on CPU `on`.
    Worker {
        /// The pool.
        pool: PoolId,
        /// The CPU the worker runs on.
        on: CpuId,
    },
    /// The `WQ_MEM_RECLAIM` rescuer runs one item of a congested `pool` on CPU `on`.
    Rescuer {
        /// The pool.
        pool: PoolId,
        /// The CPU the rescuer runs on.
        on: CpuId,
    },
    /// Advance `jiffies` by one tick.
    Tick,
    /// Run the next step of the hotplug operation on the CPU.
    Hotplug(CpuId),
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Irq(c) => write!(f, "irq {c}"),
            Event::Softirq(c) => write!(f, "softirq {c}"),
            Event::Timers(c) => write!(f, "timers {c}"),
            Event::Worker { pool, on } => write!(f, "worker {} on {on}", pool_name(*pool)),
            Event::Rescuer { pool, on } => write!(f, "rescuer {} on {on}", pool_name(*pool)),
            Event::Tick => f.write_str("tick"),
            Event::Hotplug(c) => write!(f, "hotplug {c}"),
        }
    }
}

/// A short pool name: `pool/CPU1`, `pool/unbound`.
pub fn pool_name(p: PoolId) -> String {
    match p {
        PoolId::Cpu(c) => format!("pool/{c}"),
        PoolId::Unbound => "pool/unbound".to_owned(),
    }
}
