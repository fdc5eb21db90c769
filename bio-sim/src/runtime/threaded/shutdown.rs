//! Stopping the threaded runtime: stopping and joining its threads within the join timeout, and
//! the [`ShutdownReport`] of everything still in flight.

use super::shared::Shared;
use super::stats::RuntimeStats;
use crate::runtime::event::pool_name;
use bio_core::kernel::CpuId;
use bio_core::workqueue::PoolInfo;
use std::fmt;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What is still in flight when the runtime stops, and what it did. Nothing the machine held is
/// dropped silently: everything that did not run is listed here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Whether the machine quiesced within `ThreadedConfig::shutdown_quiesce_timeout` before the
    /// threads were stopped.
    pub quiesced: bool,
    /// CPUs with hard interrupts never delivered, and how many.
    pub pending_irqs: Vec<(CpuId, usize)>,
    /// CPUs with softirq work never run, and how many items.
    pub pending_softirqs: Vec<(CpuId, usize)>,
    /// Pools with queued work or a worker still busy (e.g. work queued on a congested pool that
    /// no rescuer can serve).
    pub pools: Vec<PoolInfo>,
    /// The earliest expiry of a timer still armed on an online CPU (`None`: no timer armed).
    pub next_timer_expiry: Option<u64>,
    /// Timers still armed on any CPU's base, offline ones included.
    pub armed_timers: usize,
    /// CPUs with a hotplug operation left in progress.
    pub hotplug_in_progress: Vec<CpuId>,
    /// Mailbox messages (`run_on` closures) refused because the runtime was stopping.
    pub refused_messages: u64,
    /// Panics caught on the CPU threads.
    pub panics: Vec<String>,
    /// Threads that did not exit within `ThreadedConfig::join_timeout` (detached).
    pub stuck_threads: Vec<String>,
    /// `jiffies` when the runtime stopped.
    pub jiffies: u64,
    /// The runtime's counters.
    pub stats: RuntimeStats,
}

impl ShutdownReport {
    /// Whether nothing at all was left in flight (no IRQ, softirq, queued or running work, armed
    /// timer, hotplug operation, refused message, panic or stuck thread).
    pub fn is_clean(&self) -> bool {
        self.quiesced
            && self.pending_irqs.is_empty()
            && self.pending_softirqs.is_empty()
            && self.pools.is_empty()
            && self.next_timer_expiry.is_none()
            && self.hotplug_in_progress.is_empty()
            && self.refused_messages == 0
            && self.panics.is_empty()
            && self.stuck_threads.is_empty()
    }
}

impl fmt::Display for ShutdownReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "threaded runtime stopped at jiffies={} ({})",
            self.jiffies,
            if self.quiesced {
                "quiesced"
            } else {
                "did NOT quiesce"
            }
        )?;
        if self.is_clean() {
            return writeln!(f, "  nothing in flight");
        }
        for (c, n) in &self.pending_irqs {
            writeln!(f, "  {c}: {n} hard IRQs never delivered")?;
        }
        for (c, n) in &self.pending_softirqs {
            writeln!(f, "  {c}: {n} softirq items never run")?;
        }
        for p in &self.pools {
            writeln!(
                f,
                "  {}: {} queued{}{}{}",
                pool_name(p.id),
                p.queued,
                if p.busy { ", a worker still busy" } else { "" },
                if p.congested { ", congested" } else { "" },
                if p.disassociated {
                    ", disassociated"
                } else {
                    ""
                }
            )?;
        }
        if let Some(e) = self.next_timer_expiry {
            writeln!(
                f,
                "  {} timers still armed (next on an online CPU expires at jiffies={e})",
                self.armed_timers
            )?;
        } else if self.armed_timers > 0 {
            writeln!(
                f,
                "  {} timers armed on offline CPUs' bases",
                self.armed_timers
            )?;
        }
        for c in &self.hotplug_in_progress {
            writeln!(f, "  {c}: hotplug operation left in progress")?;
        }
        if self.refused_messages > 0 {
            writeln!(
                f,
                "  {} run_on closures refused while stopping",
                self.refused_messages
            )?;
        }
        for p in &self.panics {
            writeln!(f, "  panic: {p}")?;
        }
        for t in &self.stuck_threads {
            writeln!(f, "  thread {t} did not exit (detached)")?;
        }
        Ok(())
    }
}

/// What is left in flight on a stopped machine (`quiesced` and `stuck_threads` say how it
/// stopped).
pub(super) fn report(sh: &Shared, quiesced: bool, stuck_threads: Vec<String>) -> ShutdownReport {
    let k = &*sh.kernel;
    let per_cpu = |f: &dyn Fn(CpuId) -> usize| -> Vec<(CpuId, usize)> {
        k.possible_cpus()
            .map(|c| (c, f(c)))
            .filter(|(_, n)| *n > 0)
            .collect()
    };
    let stats = sh.stats();
    ShutdownReport {
        quiesced,
        pending_irqs: per_cpu(&|c| k.pending_irqs(c)),
        pending_softirqs: per_cpu(&|c| k.pending_softirqs(c)),
        pools: k
            .pools()
            .into_iter()
            .filter(|p| p.queued > 0 || p.busy)
            .collect(),
        next_timer_expiry: k.next_timer_expiry(),
        armed_timers: k.armed_timers(),
        hotplug_in_progress: k
            .possible_cpus()
            .filter(|&c| k.hotplug_in_progress(c))
            .collect(),
        refused_messages: stats.total().refused,
        panics: sh.panics.lock().clone(),
        stuck_threads,
        jiffies: k.jiffies(),
        stats,
    }
}

/// Sets the stop flag, wakes every thread and joins them within the join timeout. Returns the
/// names of the threads that did not exit (detached).
pub(super) fn stop_threads(
    sh: &Shared,
    threads: &mut Vec<(String, JoinHandle<()>)>,
) -> Vec<String> {
    sh.stop.store(true, Ordering::SeqCst);
    for p in sh.parkers.iter() {
        p.kick();
    }
    sh.ticker_parker.kick();
    let deadline = Instant::now() + sh.config.join_timeout;
    let mut stuck = Vec::new();
    for (name, h) in threads.drain(..) {
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        if h.is_finished() {
            if h.join().is_err() {
                sh.panics
                    .lock()
                    .push(format!("thread {name} died of a panic"));
            }
        } else {
            tracing::error!(target: "biosim::threaded", "thread {name} did not stop within {:?}; detached", sh.config.join_timeout);
            stuck.push(name);
        }
    }
    stuck
}
