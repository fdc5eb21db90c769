//! Per-CPU timers of `kernel/time/timer.c`: `timer_setup()`, `add_timer_on()`, `mod_timer()`,
//! `timer_delete_sync()` (`del_timer_sync()`), `timer_pending()`, the `TIMER_SOFTIRQ` that runs
//! expired timers on their CPU, and the `timers:prepare` hotplug state whose teardown
//! (`timers_dead_cpu()`) migrates a dead CPU's timers to the CPU running it.
//!
//! All timer state sits behind one lock. Lock order: the workqueue lock may be held while the
//! timer lock is taken (`mod_delayed_work_on()` stealing a timer), never the reverse: timer
//! functions run with no lock held.

use crate::kernel::{Cpu, CpuId, Kernel, ReportKind};
use crate::sync::{Mutex, UntrackedArc};
use crate::workqueue::WorkId;
use hotplug::{Errno, Invocation, CPUHP_TIMERS_PREPARE};
use std::fmt;

/// A timer callback: `void (*function)(struct timer_list *)`, run in softirq context on the CPU
/// whose base the timer was on.
pub type TimerFn = dyn Fn(&Cpu) + Send + Sync;

/// What a timer does when it fires.
#[derive(Clone)]
pub(crate) enum TimerAction {
    /// A plain callback.
    Callback(UntrackedArc<TimerFn>),
    /// `delayed_work_timer_fn()`: queue the delayed work's work item.
    DelayedWork(WorkId),
}

/// `struct timer_list`: a handle to one timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerList {
    pub(crate) id: usize,
}

struct TimerEntry {
    name: &'static str,
    action: TimerAction,
    expires: u64,
    /// The CPU whose base holds it while pending (`timer_pending()` iff `Some`).
    base: Option<CpuId>,
    /// The execution flow running its function, for `timer_delete_sync()`.
    running: Option<u64>,
    /// Arm order, to fire timers with equal expiry in the order they were armed.
    seq: u64,
}

#[derive(Default)]
struct TimerState {
    timers: Vec<TimerEntry>,
    seq: u64,
}

/// The timer subsystem of one kernel.
pub(crate) struct Timers {
    state: Mutex<TimerState>,
}

impl fmt::Debug for Timers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Timers")
    }
}

impl Timers {
    pub(crate) fn new(_nr_cpus: u32) -> Self {
        Self {
            state: Mutex::new(TimerState::default()),
        }
    }

    /// Whether `cpu`'s base holds a timer due at `now`.
    pub(crate) fn due(&self, cpu: CpuId, now: u64) -> bool {
        self.state
            .lock()
            .timers
            .iter()
            .any(|t| t.base == Some(cpu) && t.expires <= now)
    }

    pub(crate) fn setup(&self, name: &'static str, action: TimerAction) -> TimerList {
        let mut st = self.state.lock();
        st.timers.push(TimerEntry {
            name,
            action,
            expires: 0,
            base: None,
            running: None,
            seq: 0,
        });
        TimerList {
            id: st.timers.len() - 1,
        }
    }

    /// Arms (or re-arms) `t` on `cpu` at `expires`; returns whether it was pending.
    pub(crate) fn arm(&self, t: TimerList, cpu: CpuId, expires: u64) -> bool {
        let mut st = self.state.lock();
        st.seq += 1;
        let seq = st.seq;
        let e = &mut st.timers[t.id];
        let was = e.base.is_some();
        e.expires = expires;
        e.base = Some(cpu);
        e.seq = seq;
        was
    }

    /// Removes `t` from its base; returns whether it was pending.
    pub(crate) fn disarm(&self, t: TimerList) -> bool {
        self.state.lock().timers[t.id].base.take().is_some()
    }

    pub(crate) fn pending(&self, t: TimerList) -> bool {
        self.state.lock().timers[t.id].base.is_some()
    }

    pub(crate) fn base_of(&self, t: TimerList) -> Option<CpuId> {
        self.state.lock().timers[t.id].base
    }

    fn running(&self, t: TimerList) -> Option<u64> {
        self.state.lock().timers[t.id].running
    }

    /// One pass over all timers: which of `cpus` have a timer due at `now`, and whether any timer
    /// is pending on one of them.
    pub(crate) fn scan(&self, cpus: &[CpuId], now: u64) -> (Vec<CpuId>, bool) {
        let st = self.state.lock();
        let mut due = Vec::new();
        let mut any = false;
        for t in &st.timers {
            let Some(b) = t.base else { continue };
            if !cpus.contains(&b) {
                continue;
            }
            any = true;
            if t.expires <= now && !due.contains(&b) {
                due.push(b);
            }
        }
        due.sort_unstable();
        (due, any)
    }

    /// How many timers are armed on `cpus`.
    pub(crate) fn armed(&self, cpus: &[CpuId]) -> usize {
        self.state
            .lock()
            .timers
            .iter()
            .filter(|t| t.base.is_some_and(|b| cpus.contains(&b)))
            .count()
    }

    /// The earliest expiry among pending timers on `cpus`.
    pub(crate) fn next_expiry(&self, cpus: &[CpuId]) -> Option<u64> {
        self.state
            .lock()
            .timers
            .iter()
            .filter(|t| t.base.is_some_and(|b| cpus.contains(&b)))
            .map(|t| t.expires)
            .min()
    }

    /// Takes the timers due at `now` off `cpu`'s base, in expiry order, marking them running.
    fn take_due(
        &self,
        cpu: CpuId,
        now: u64,
        ctx: u64,
    ) -> Vec<(TimerList, &'static str, TimerAction)> {
        let mut st = self.state.lock();
        let mut due: Vec<(u64, u64, usize)> = st
            .timers
            .iter()
            .enumerate()
            .filter(|(_, t)| t.base == Some(cpu) && t.expires <= now)
            .map(|(i, t)| (t.expires, t.seq, i))
            .collect();
        due.sort_unstable();
        due.into_iter()
            .map(|(_, _, i)| {
                let t = &mut st.timers[i];
                t.base = None;
                t.running = Some(ctx);
                (TimerList { id: i }, t.name, t.action.clone())
            })
            .collect()
    }

    fn done_running(&self, t: TimerList) {
        self.state.lock().timers[t.id].running = None;
    }

    /// `timers_dead_cpu()`: moves every timer of `dead`'s base to `to`'s base.
    fn migrate(&self, dead: CpuId, to: CpuId) -> usize {
        let mut st = self.state.lock();
        let mut n = 0;
        for t in st.timers.iter_mut().filter(|t| t.base == Some(dead)) {
            t.base = Some(to);
            n += 1;
        }
        n
    }
}

impl Kernel {
    /// `timer_setup()`: a timer running `function` when it expires.
    pub fn timer_setup(
        &self,
        name: &'static str,
        function: impl Fn(&Cpu) + Send + Sync + 'static,
    ) -> TimerList {
        self.timers
            .setup(name, TimerAction::Callback(UntrackedArc::new(function)))
    }

    /// `add_timer_on()`: arms `timer` to expire at `expires` (jiffies) on `cpu`'s base. The
    /// kernel `BUG_ON(timer_pending(timer))`s; here re-arming a pending timer is reported and
    /// it is moved.
    pub fn add_timer_on(&self, cx: &Cpu, timer: TimerList, expires: u64, cpu: CpuId) {
        if self.timers.arm(timer, cpu, expires) {
            cx.report(
                ReportKind::Bug,
                "kernel BUG at kernel/time/timer.c: add_timer_on: BUG_ON(timer_pending(timer))"
                    .to_owned(),
            );
        }
        tracing::trace!(target: "timer", tracepoint = "timer_start", cpu = cpu.0, expires, "timer_start: timer={} expires={expires} cpu={}", timer.id, cpu.0);
        self.wake(cpu);
    }

    /// `mod_timer()`: (re)arms `timer` at `expires`, on its current base if pending, else on
    /// the calling CPU. Returns whether it was pending.
    pub fn mod_timer(&self, cx: &Cpu, timer: TimerList, expires: u64) -> bool {
        let cpu = self.timers.base_of(timer).unwrap_or(cx.id());
        let was = self.timers.arm(timer, cpu, expires);
        self.wake(cpu);
        was
    }

    /// `timer_delete()` / `del_timer()`: deactivates a pending timer; returns whether it was.
    pub fn timer_delete(&self, timer: TimerList) -> bool {
        self.timers.disarm(timer)
    }

    /// `timer_delete_sync()` / `del_timer_sync()`: deactivates the timer and waits for a
    /// running callback to finish. Waiting for itself from its own callback is a deadlock,
    /// reported as a BUG.
    pub fn timer_delete_sync(&self, cx: &Cpu, timer: TimerList) -> bool {
        let was = self.timers.disarm(timer);
        match self.timers.running(timer) {
            Some(ctx) if ctx == cx.ctx_id() => {
                cx.report(
                    ReportKind::Bug,
                    "kernel/time/timer.c: timer_delete_sync() called from the timer's own callback (deadlock)".to_owned(),
                );
            }
            Some(_) => {
                let ok = cx.wait_until("timer_delete_sync", &|| {
                    self.timers.running(timer).is_none()
                });
                if !ok {
                    cx.report(
                        ReportKind::Bug,
                        "kernel/time/timer.c: timer_delete_sync() waits forever".to_owned(),
                    );
                }
            }
            None => {}
        }
        was
    }

    /// `del_timer_sync()`: the name `timer_delete_sync()` had before 6.2.
    pub fn del_timer_sync(&self, cx: &Cpu, timer: TimerList) -> bool {
        self.timer_delete_sync(cx, timer)
    }

    /// `timer_pending()`.
    pub fn timer_pending(&self, timer: TimerList) -> bool {
        self.timers.pending(timer)
    }

    /// The online CPUs with a timer due now, and whether any timer is armed on an online CPU
    /// (one pass, for a runtime computing what can happen next).
    pub fn timer_scan(&self) -> (Vec<CpuId>, bool) {
        self.timers.scan(&self.online_cpus(), self.jiffies())
    }

    /// Whether `cpu`'s timer base holds a timer due now.
    pub fn timers_due(&self, cpu: CpuId) -> bool {
        self.timers.due(cpu, self.jiffies())
    }

    /// How many timers are armed on any CPU's base (online or not: a timer on an offline CPU's base
    /// waits for it to come back).
    pub fn armed_timers(&self) -> usize {
        self.timers.armed(&self.possible_cpus().collect::<Vec<_>>())
    }

    /// The earliest expiry of a pending timer on an online CPU, for a runtime deciding how far to
    /// advance or how long to sleep.
    pub fn next_timer_expiry(&self) -> Option<u64> {
        self.timers.next_expiry(&self.online_cpus())
    }

    /// `run_timer_softirq()` on the CPU of `cx`: fires every timer of its base due at the current
    /// jiffies, in expiry order, in softirq context. Returns how many fired.
    ///
    /// Delayed-work timers (`delayed_work_timer_fn()`) queue their work with the workqueue lock
    /// held across taking them off the base, so a concurrent `mod_delayed_work_on()` always sees
    /// the work either on its timer or on a worklist (the kernel gets the same guarantee from
    /// PENDING and `try_to_grab_pending()` retrying).
    pub fn run_timers(&self, cx: &Cpu) -> usize {
        if !self.timers.due(cx.id(), self.jiffies()) {
            return 0;
        }
        cx.with_softirq(|cx| {
            let (callbacks, pools, n) = {
                let mut wq = self.workqueues.state.lock();
                let due = self.timers.take_due(cx.id(), self.jiffies(), cx.ctx_id());
                let n = due.len();
                let mut callbacks = Vec::new();
                let mut pools = Vec::new();
                for (t, name, action) in due {
                    match action {
                        TimerAction::DelayedWork(work) => {
                            tracing::trace!(target: "timer", tracepoint = "timer_expire_entry", cpu = cx.id().0, "timer_expire_entry: timer={} function={name} now={}", t.id, self.jiffies());
                            pools.extend(self.delayed_work_timer_fn_locked(&mut wq, work, cx));
                            self.timers.done_running(t);
                        }
                        TimerAction::Callback(f) => callbacks.push((t, name, f)),
                    }
                }
                (callbacks, pools, n)
            };
            for p in pools {
                self.wake_pool(p);
            }
            for (t, name, f) in callbacks {
                tracing::trace!(target: "timer", tracepoint = "timer_expire_entry", cpu = cx.id().0, "timer_expire_entry: timer={} function={name} now={}", t.id, self.jiffies());
                f(cx);
                self.timers.done_running(t);
                tracing::trace!(target: "timer", tracepoint = "timer_expire_exit", cpu = cx.id().0, "timer_expire_exit: timer={}", t.id);
            }
            n
        })
    }
}

/// Registers `timers:prepare` at `CPUHP_TIMERS_PREPARE` (`timers_prepare_cpu()` /
/// `timers_dead_cpu()`), as the kernel's static `cpuhp_hp_states[]` entry does.
pub(crate) fn register_hotplug_states(kernel: &Kernel) {
    let startup: hotplug::Callback<Cpu> = UntrackedArc::new(|_cx: &Cpu, _inv: &Invocation| Ok(()));
    let teardown: hotplug::Callback<Cpu> = UntrackedArc::new(
        |cx: &Cpu, inv: &Invocation| -> Result<(), Errno> {
            // timers_dead_cpu() runs on the control CPU and pulls the dead CPU's timers to it.
            let n = cx.kernel().timers.migrate(inv.cpu, cx.id());
            tracing::debug!(target: "timer", cpu = cx.id().0, "biosim_timers_dead_cpu: migrated {n} timers from CPU{}", inv.cpu.0);
            if n > 0 {
                cx.kernel().wake(cx.id());
            }
            Ok(())
        },
    );
    kernel
        .hotplug()
        .cpuhp_setup_state_nocalls(
            CPUHP_TIMERS_PREPARE,
            "timers:prepare",
            Some(startup),
            Some(teardown),
        )
        .expect("the default state table has CPUHP_TIMERS_PREPARE");
}
