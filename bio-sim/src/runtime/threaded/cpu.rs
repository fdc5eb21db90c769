//! One simulated CPU's thread: its event loop (mailbox, hard IRQs, softirqs, timers, workers),
//! the IRQ windows and waits of the code it runs ([`Hook`]), and its idle sleep.

use super::shared::{Msg, Shared};
use super::stats::bump;
use bio_core::kernel::{CpuId, Runtime};
use bio_core::workqueue::PoolId;
use bio_core::Cpu;
use crossbeam_channel::Receiver;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How deep [`Runtime::wait_until`] may nest (a waiting task running an event that waits in turn)
/// before a wait only sleeps instead of running further events.
const MAX_NESTED_WAITS: u32 = 8;

/// The first and the longest sleep of a [`Hook::wait_until`] that finds nothing to run: it
/// polls its condition (nothing signals most of them), from the first slice doubling up to the
/// longest.
pub(super) const WAIT_SLICE_FIRST: Duration = Duration::from_micros(50);
/// See [`WAIT_SLICE_FIRST`].
pub(super) const WAIT_SLICE_MAX: Duration = Duration::from_millis(1);

/// Runs one event on `cx`'s CPU, if there is one: a mailbox message (when `rx` is given), then
/// (online only) one IRQ, the softirq backlog, due timers, one item of the CPU's own pool, of the
/// unbound pool, or of another CPU's disassociated pool. Returns whether something ran.
///
/// The caller holds `cx`'s execution lock (the main loop takes it; nested calls from
/// [`Runtime::wait_until`] run inside an event that holds it).
pub(super) fn run_one(sh: &Shared, cx: &Cpu, rx: Option<&Receiver<Msg>>) -> bool {
    let k = &*sh.kernel;
    let me = cx.id();
    let c = &sh.counters[me.index()];
    let online = k.cpu_online(me);
    if let Some(msg) = rx.and_then(|rx| rx.try_recv().ok()) {
        match msg {
            Msg::Hotplug(f) => {
                f(Some(cx));
                bump(&c.hotplug_steps, 1);
            }
            Msg::Task(f) if online => {
                f(Some(cx));
                bump(&c.tasks, 1);
            }
            Msg::Task(f) => {
                f(None);
                bump(&c.refused, 1);
            }
        }
        return true;
    }
    if !online {
        return false;
    }
    if k.deliver_irq(cx) {
        bump(&c.irqs, 1);
        return true;
    }
    let n = k.run_softirqs(cx);
    if n > 0 {
        bump(&c.softirq_items, n as u64);
        return true;
    }
    let n = k.run_timers(cx);
    if n > 0 {
        bump(&c.timers_fired, n as u64);
        return true;
    }
    // The CPU's own pool: bound to it, or disassociated (then any CPU may run it).
    for pool in [PoolId::Cpu(me), PoolId::Unbound] {
        if let Some(x) = k.run_worker(pool, cx).or_else(|| k.run_rescuer(pool, cx)) {
            sh.record_work(&x, me);
            return true;
        }
    }
    run_disassociated(sh, cx)
}

/// Runs one item of another CPU's disassociated pool (an offline CPU's work, run unbound), if
/// one is runnable and no other CPU is running that pool; returns whether something ran.
fn run_disassociated(sh: &Shared, cx: &Cpu) -> bool {
    let k = &*sh.kernel;
    let me = cx.id();
    if !k.any_pool_disassociated() {
        return false;
    }
    for p in k.pools() {
        let PoolId::Cpu(m) = p.id else { continue };
        if m == me || !p.disassociated || !(p.worker_runnable() || p.rescuer_runnable()) {
            continue;
        }
        let Some(lock) = sh.exec.get(m.index()) else {
            continue;
        };
        let ran = {
            let Some(_guard) = lock.try_lock() else {
                continue;
            };
            // Rebinding happens only in a hotplug step of CPU m, which holds this lock: the pool
            // stays disassociated until we are done.
            if !k.pool(p.id).is_some_and(|now| now.disassociated) {
                None
            } else {
                k.run_worker(p.id, cx).or_else(|| k.run_rescuer(p.id, cx))
            }
        };
        // CPU m's own thread may have found its lock taken and parked (see `cpu_loop`): it
        // takes it again now.
        if sh.exec_missed[m.index()].swap(false, Ordering::SeqCst) {
            sh.kick(m);
        }
        if let Some(x) = ran {
            sh.record_work(&x, me);
            return true;
        }
    }
    false
}

/// The runtime hook of one CPU thread's context.
struct Hook {
    sh: Arc<Shared>,
    /// Nesting depth of waits (only this CPU's thread touches it).
    depth: AtomicU32,
}

impl Runtime for Hook {
    fn irq_window(&self, cpu: &Cpu) {
        let c = &self.sh.counters[cpu.id().index()];
        while self.sh.kernel.deliver_irq(cpu) {
            bump(&c.irqs, 1);
            bump(&c.irqs_in_windows, 1);
        }
    }

    fn wait_until(&self, cpu: &Cpu, what: &str, cond: &dyn Fn() -> bool) -> bool {
        self.wait(cpu, what, None, cond)
    }

    fn wait_until_at(&self, cpu: &Cpu, what: &str, at: Instant, cond: &dyn Fn() -> bool) -> bool {
        self.wait(cpu, what, Some(at), cond)
    }
}

impl Hook {
    /// Both waits: run what there is, else park for a slice (see [`WAIT_SLICE_FIRST`]), never
    /// past `at`, when the condition turns true by itself.
    fn wait(&self, cpu: &Cpu, what: &str, at: Option<Instant>, cond: &dyn Fn() -> bool) -> bool {
        if cond() {
            return true;
        }
        let sh = &*self.sh;
        let i = cpu.id().index();
        let c = &sh.counters[i];
        bump(&c.waits, 1);
        let deadline = Instant::now() + sh.config.wait_timeout;
        let nested_ok = self.depth.fetch_add(1, Ordering::Relaxed) < MAX_NESTED_WAITS;
        let mut slice = WAIT_SLICE_FIRST;
        // The clock is read before every park and every 32nd item run, not per item: a wait that
        // keeps running work still gives up within 32 items of its deadline.
        let mut ran_since_clock = 0u32;
        let ok = loop {
            if cond() {
                break true;
            }
            if sh.stop.load(Ordering::SeqCst) {
                break false;
            }
            if ran_since_clock == 0 && Instant::now() >= deadline {
                bump(&c.wait_timeouts, 1);
                tracing::warn!(target: "biosim::threaded", cpu = cpu.id().0, "{} waited {:?} in {what} and gives up", cpu.id(), sh.config.wait_timeout);
                break false;
            }
            // A sleeping task lets its CPU run other things; a context that may not sleep can
            // only take interrupts (if it has them enabled).
            let ran = if nested_ok && cpu.may_sleep() {
                run_one(sh, cpu, None)
            } else if sh.kernel.deliver_irq(cpu) {
                bump(&c.irqs, 1);
                bump(&c.irqs_in_windows, 1);
                true
            } else {
                false
            };
            if ran {
                slice = WAIT_SLICE_FIRST;
                ran_since_clock = (ran_since_clock + 1) % 32;
            } else {
                ran_since_clock = 0;
                sh.before_park();
                // With this CPU's own I/O in flight its completion ends the park: a short slice
                // would only time out first (at qd32, one wake-up for nothing per batch of
                // completions; docs/performance.md).
                let own_io = sh.parkers[i].waiter().is_some_and(|w| w.in_flight());
                let mut t = if own_io { WAIT_SLICE_MAX } else { slice };
                if let Some(at) = at {
                    t = t.min(at.saturating_duration_since(Instant::now()));
                }
                sh.parkers[i].park(t);
                slice = (slice * 2).min(WAIT_SLICE_MAX);
            }
        };
        self.depth.fetch_sub(1, Ordering::Relaxed);
        ok
    }
}

/// The life of `id`'s thread: run one event at a time under the CPU's execution lock, sleep
/// when there is none, and answer what is left in the mailbox when the runtime stops.
pub(super) fn cpu_thread_main(sh: Arc<Shared>, id: CpuId, rx: Receiver<Msg>) {
    let i = id.index();
    let _ = sh.thread_ids[i].set(std::thread::current().id());
    let hook: Arc<dyn Runtime> = Arc::new(Hook {
        sh: Arc::clone(&sh),
        depth: AtomicU32::new(0),
    });
    let Some(cx) = sh.kernel.cpu_with_runtime(id, hook) else {
        return;
    };
    match sh.trace.clone() {
        // The whole life of the thread inside one capture: every event it runs is recorded, with
        // this CPU as its column and the runtime's monotonic clock.
        Some(lines) => {
            let exec: crate::report::capture::ExecCpu =
                Arc::new(std::sync::atomic::AtomicI64::new(i64::from(id.0)));
            let clock = std::rc::Rc::new(crate::report::capture::Monotonic::since(sh.started));
            crate::report::capture::capture(&lines, &exec, tracing::Level::TRACE, clock, || {
                cpu_loop(&sh, id, &cx, &rx)
            });
        }
        None => cpu_loop(&sh, id, &cx, &rx),
    }
}

/// [`cpu_thread_main`]'s loop, until the runtime stops.
fn cpu_loop(sh: &Arc<Shared>, id: CpuId, cx: &Cpu, rx: &Receiver<Msg>) {
    let i = id.index();
    let c = &sh.counters[i];
    while !sh.stop.load(Ordering::SeqCst) {
        sh.active[i].store(true, Ordering::SeqCst);
        // Raised before the attempt, so a holder that lets go after a failed one always sees it.
        sh.exec_missed[i].store(true, Ordering::SeqCst);
        let exec = if cfg!(feature = "bug-cpu-ring-exec-blocks") {
            // The buggy twin: the thread blocks on its lock, its idle wait (its io_uring) unreaped
            // as long as another thread holds it.
            Some(sh.exec[i].lock())
        } else {
            sh.exec[i].try_lock()
        };
        let Some(exec) = exec else {
            // Another thread holds this CPU's execution lock: a CPU running its disassociated
            // pool (it is offline) or the hotplug controller finishing one of its steps. Its
            // thread sleeps in its idle wait meanwhile, so the I/O in its own ring is still
            // reaped and completed (a work item of that pool may be waiting for it); the holder
            // kicks it when it lets go. (Here the host thread stands for the io_uring task,
            // which the kernel would migrate to an online CPU.)
            sh.active[i].store(false, Ordering::SeqCst);
            sh.before_park();
            sh.parkers[i].park(sh.config.idle_timeout);
            continue;
        };
        sh.exec_missed[i].store(false, Ordering::SeqCst);
        let did = {
            let _exec = exec;
            match catch_unwind(AssertUnwindSafe(|| run_one(sh, cx, Some(rx)))) {
                Ok(did) => did,
                Err(payload) => {
                    sh.record_panic(id, "event", &*payload);
                    true
                }
            }
        };
        if did {
            sh.progress.fetch_add(1, Ordering::SeqCst);
            continue;
        }
        sh.active[i].store(false, Ordering::SeqCst);
        bump(&c.parks, 1);
        sh.before_park();
        if sh.parkers[i].park(sh.config.idle_timeout) {
            bump(&c.wakeups, 1);
        } else {
            bump(&c.idle_timeouts, 1);
        }
    }
    sh.active[i].store(false, Ordering::SeqCst);
    // Nobody parks in this CPU's idle wait any more: it must not take work it cannot finish.
    if let Some(w) = sh.parkers[i].waiter() {
        w.detach();
    }
    // Answer everything still in the mailbox: nothing is dropped silently.
    while let Ok(msg) = rx.try_recv() {
        bump(&c.refused, 1);
        msg.refuse();
    }
}
