//! The threaded runtime's counters: per CPU thread ([`CpuStats`]) and for the whole machine
//! ([`RuntimeStats`]), and the atomics the threads bump.

use bio_core::kernel::CpuId;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one CPU thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuStats {
    /// The CPU.
    pub cpu: CpuId,
    /// Hard interrupts whose handler ran on this CPU.
    pub irqs: u64,
    /// Of those, interrupts delivered at an IRQ window inside running code (or while it waited).
    pub irqs_in_windows: u64,
    /// Softirq work items run by the `ksoftirqd` path (those run on `irq_exit()` are not counted).
    pub softirq_items: u64,
    /// Timers fired on this CPU.
    pub timers_fired: u64,
    /// Work items run on this CPU (workers and rescuers, all pools).
    pub works: u64,
    /// Of those, run by a rescuer.
    pub rescuer_works: u64,
    /// Of those, taken from another (offline, disassociated) CPU's pool.
    pub foreign_works: u64,
    /// Hotplug steps executed on this CPU.
    pub hotplug_steps: u64,
    /// Closures run with `ThreadedRuntime::run_on`.
    pub tasks: u64,
    /// Mailbox messages refused (the CPU was offline or the runtime stopping).
    pub refused: u64,
    /// Times the thread went to sleep idle.
    pub parks: u64,
    /// Idle sleeps ended by the waker.
    pub wakeups: u64,
    /// Idle sleeps ended by `ThreadedConfig::idle_timeout`.
    pub idle_timeouts: u64,
    /// `Runtime::wait_until` calls that had to wait.
    pub waits: u64,
    /// Waits that gave up after `ThreadedConfig::wait_timeout`.
    pub wait_timeouts: u64,
    /// Panics caught on this thread.
    pub panics: u64,
}

/// Counters of the whole runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeStats {
    /// One entry per CPU, by CPU number.
    pub cpus: Vec<CpuStats>,
    /// Jiffies the ticker advanced.
    pub ticks: u64,
}

impl RuntimeStats {
    /// The sum over all CPUs (its `cpu` field is CPU0's).
    pub fn total(&self) -> CpuStats {
        let mut t = Counters::default().snapshot(CpuId(0));
        for c in &self.cpus {
            t.irqs += c.irqs;
            t.irqs_in_windows += c.irqs_in_windows;
            t.softirq_items += c.softirq_items;
            t.timers_fired += c.timers_fired;
            t.works += c.works;
            t.rescuer_works += c.rescuer_works;
            t.foreign_works += c.foreign_works;
            t.hotplug_steps += c.hotplug_steps;
            t.tasks += c.tasks;
            t.refused += c.refused;
            t.parks += c.parks;
            t.wakeups += c.wakeups;
            t.idle_timeouts += c.idle_timeouts;
            t.waits += c.waits;
            t.wait_timeouts += c.wait_timeouts;
            t.panics += c.panics;
        }
        t
    }
}

/// The live counters of one CPU thread, bumped by that thread (and by the hotplug controller).
#[derive(Default)]
pub(super) struct Counters {
    pub(super) irqs: AtomicU64,
    pub(super) irqs_in_windows: AtomicU64,
    pub(super) softirq_items: AtomicU64,
    pub(super) timers_fired: AtomicU64,
    pub(super) works: AtomicU64,
    pub(super) rescuer_works: AtomicU64,
    pub(super) foreign_works: AtomicU64,
    pub(super) hotplug_steps: AtomicU64,
    pub(super) tasks: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) parks: AtomicU64,
    pub(super) wakeups: AtomicU64,
    pub(super) idle_timeouts: AtomicU64,
    pub(super) waits: AtomicU64,
    pub(super) wait_timeouts: AtomicU64,
    pub(super) panics: AtomicU64,
}

/// Adds `n` to a counter (relaxed: the counters order nothing).
pub(super) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// The counters now, as [`CpuStats`] of `cpu`.
    pub(super) fn snapshot(&self, cpu: CpuId) -> CpuStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CpuStats {
            cpu,
            irqs: g(&self.irqs),
            irqs_in_windows: g(&self.irqs_in_windows),
            softirq_items: g(&self.softirq_items),
            timers_fired: g(&self.timers_fired),
            works: g(&self.works),
            rescuer_works: g(&self.rescuer_works),
            foreign_works: g(&self.foreign_works),
            hotplug_steps: g(&self.hotplug_steps),
            tasks: g(&self.tasks),
            refused: g(&self.refused),
            parks: g(&self.parks),
            wakeups: g(&self.wakeups),
            idle_timeouts: g(&self.idle_timeouts),
            waits: g(&self.waits),
            wait_timeouts: g(&self.wait_timeouts),
            panics: g(&self.panics),
        }
    }
}
