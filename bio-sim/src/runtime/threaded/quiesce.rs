//! When the machine is quiescent: nothing runnable on the online CPUs, every CPU thread idle (for
//! `ThreadedRuntime::quiesce`, `drain` and the start of `shutdown`).

use super::shared::Shared;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Whether nothing is runnable right now, and no CPU thread made progress while this looked.
fn quiescent_now(sh: &Shared) -> bool {
    let k = &*sh.kernel;
    let before = sh.progress.load(Ordering::SeqCst);
    if sh.mailboxes.iter().any(|m| !m.is_empty()) {
        return false;
    }
    let online = k.online_cpus();
    for &c in &online {
        if k.pending_irqs(c) > 0 || k.pending_softirqs(c) > 0 || k.timers_due(c) {
            return false;
        }
    }
    if k.possible_cpus().any(|c| k.hotplug_in_progress(c)) {
        return false;
    }
    for p in k.pools() {
        if p.busy {
            return false;
        }
        if p.worker_runnable() || p.rescuer_runnable() {
            let runnable_here = match p.bound_cpu() {
                Some(c) => online.contains(&c),
                None => !online.is_empty(),
            };
            if runnable_here {
                return false;
            }
        }
    }
    if sh.active.iter().any(|a| a.load(Ordering::SeqCst)) {
        return false;
    }
    sh.progress.load(Ordering::SeqCst) == before
}

/// Waits up to `timeout` for two quiescent looks in a row (with no armed timer on an online CPU
/// if `no_timers`); `false` at once on a CPU thread, which is itself busy.
pub(super) fn wait_quiescent(sh: &Shared, timeout: Duration, no_timers: bool) -> bool {
    if sh.current_cpu_thread().is_some() {
        return false;
    }
    let deadline = Instant::now() + timeout;
    let mut streak = 0;
    loop {
        let q = quiescent_now(sh) && (!no_timers || sh.kernel.next_timer_expiry().is_none());
        if q {
            streak += 1;
            if streak >= 2 {
                return true;
            }
        } else {
            streak = 0;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}
