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
    /// `TIMER_IRQSAFE`: the callback runs with IRQs still disabled (delayed work's timers,
    /// `__INIT_DELAYED_WORK()`).
    irqsafe: bool,
    /// `TIMER_PINNED`: set by `add_timer_on()`, cleared by `add_timer_global()`.
    pinned: bool,
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
        let irqsafe = matches!(action, TimerAction::DelayedWork(_));
        st.timers.push(TimerEntry {
            name,
            action,
            irqsafe,
            pinned: false,
            expires: 0,
            base: None,
            running: None,
            seq: 0,
        });
        TimerList {
            id: st.timers.len() - 1,
        }
    }

    /// Arms (or re-arms) `t` on `cpu` at `expires`; returns whether it was pending. `pinned`
    /// sets or clears `TIMER_PINNED` (`add_timer_on()` / `add_timer_global()`), `None` keeps it
    /// (`mod_timer()`).
    pub(crate) fn arm(&self, t: TimerList, cpu: CpuId, expires: u64, pinned: Option<bool>) -> bool {
        let mut st = self.state.lock();
        st.seq += 1;
        let seq = st.seq;
        let e = &mut st.timers[t.id];
        if let Some(p) = pinned {
            e.pinned = p;
        }
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

    /// What `timer_start` prints of `t`: function, expires, base CPU, `TIMER_*` flags.
    fn start_info(&self, t: TimerList) -> (&'static str, u64, Option<CpuId>, bool, bool) {
        let st = self.state.lock();
        let e = &st.timers[t.id];
        (e.name, e.expires, e.base, e.pinned, e.irqsafe)
    }

    fn irqsafe(&self, t: TimerList) -> bool {
        self.state.lock().timers[t.id].irqsafe
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
    /// Returns the timers moved.
    fn migrate(&self, dead: CpuId, to: CpuId) -> Vec<TimerList> {
        let mut st = self.state.lock();
        let mut moved = Vec::new();
        for (id, t) in st.timers.iter_mut().enumerate() {
            if t.base == Some(dead) {
                t.base = Some(to);
                moved.push(TimerList { id });
            }
        }
        moved
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
        if self.timers.arm(timer, cpu, expires, Some(true)) {
            cx.report(
                ReportKind::Bug,
                "kernel BUG at kernel/time/timer.c: add_timer_on: BUG_ON(timer_pending(timer))"
                    .to_owned(),
            );
        }
        self.trace_timer_start(cx, timer);
        self.wake(cpu);
    }

    /// `mod_timer()`: (re)arms `timer` at `expires`, on its current base if pending, else on
    /// the calling CPU. Returns whether it was pending.
    /// A pending timer is detached first (`detach_if_pending()`: `timer_cancel`), then enqueued
    /// (`timer_start`); re-arming a pending timer at the same expiry changes nothing and traces
    /// nothing (the `timer_pending() && timer->expires == expires` shortcut).
    pub fn mod_timer(&self, cx: &Cpu, timer: TimerList, expires: u64) -> bool {
        let (_, old_expires, base, _, _) = self.timers.start_info(timer);
        if base.is_some() && old_expires == expires {
            return true;
        }
        if base.is_some() {
            self.trace_timer_cancel(Some(cx), timer);
        }
        let cpu = base.unwrap_or(cx.id());
        let was = self.timers.arm(timer, cpu, expires, None);
        self.trace_timer_start(cx, timer);
        self.wake(cpu);
        was
    }

    /// `timer_delete()` / `del_timer()`: deactivates a pending timer; returns whether it was.
    /// Detaching a pending timer fires `timer_cancel` (`detach_timer()` → `debug_deactivate()`).
    pub fn timer_delete(&self, timer: TimerList) -> bool {
        let was = self.timers.disarm(timer);
        if was {
            self.trace_timer_cancel(None, timer);
        }
        was
    }

    /// `timer_delete()` from a known context, as `try_to_grab_pending()` calls it: the
    /// `timer_cancel` line then carries that context.
    pub(crate) fn timer_delete_from(&self, cx: Option<&Cpu>, timer: TimerList) -> bool {
        let was = self.timers.disarm(timer);
        if was {
            self.trace_timer_cancel(cx, timer);
        }
        was
    }

    /// `trace_timer_start()` (`enqueue_timer()`, under the base's `raw_spin_lock_irqsave()`):
    /// `timer=%p function=%ps expires=%lu [timeout=%ld] bucket_expiry=%lu cpu=%u idx=%u
    /// flags=%s`, with the wheel bucket `calc_wheel_index()` picks. biosim's base clock is
    /// jiffies (the kernel's `base->clk` trails it only while a CPU idles with its tick stopped).
    pub(crate) fn trace_timer_start(&self, cx: &Cpu, timer: TimerList) {
        self.trace_timer_start_locked(cx, timer, 1);
    }

    /// `trace_timer_start()` with `locks` base locks held (two in `migrate_timer_list()`).
    fn trace_timer_start_locked(&self, cx: &Cpu, timer: TimerList, locks: u32) {
        if !cx.tracepoints_enabled() || !tracing::enabled!(target: "timer", tracing::Level::TRACE) {
            return;
        }
        let (function, expires, base, pinned, irqsafe) = self.timers.start_info(timer);
        let now = self.jiffies();
        let (idx, bucket_expiry) = calc_wheel_index(expires, now, self.config().hz);
        let flags = match (pinned, irqsafe) {
            (true, true) => "P|I",
            (true, false) => "P",
            (false, true) => "I",
            (false, false) => "",
        };
        crate::ktrace!(
            cx,
            target: "timer",
            "timer_start",
            flags: cx.trace_flags_under(true, locks),
            "timer={} function={} expires={} [timeout={}] bucket_expiry={} cpu={} idx={} flags={}",
            crate::kernel::timer_ptr(timer.id),
            function,
            expires,
            expires as i64 - now as i64,
            bucket_expiry,
            base.unwrap_or(cx.id()).0,
            idx,
            flags
        );
    }

    /// `trace_timer_cancel()` (`detach_timer()`): `timer=%p`, under the base lock with IRQs off.
    /// Without a context (`timer_delete()` called without one) the capture supplies it.
    pub(crate) fn trace_timer_cancel(&self, cx: Option<&Cpu>, timer: TimerList) {
        match cx {
            Some(cx) => crate::ktrace!(
                cx,
                target: "timer",
                "timer_cancel",
                flags: cx.trace_flags_under(true, 1),
                "timer={}",
                crate::kernel::timer_ptr(timer.id)
            ),
            // The same static-key switch as every other tracepoint: off, nothing is built or
            // sent (`trace_timer_cancel()` is a patched-out jump in the kernel).
            None if self.tracepoints_enabled() => tracing::trace!(
                target: "timer",
                tracepoint = "timer_cancel",
                "timer_cancel: timer={}",
                crate::kernel::timer_ptr(timer.id)
            ),
            None => {}
        }
    }

    /// `timer_delete_sync()` / `del_timer_sync()`: deactivates the timer and waits for a
    /// running callback to finish. Waiting for itself from its own callback is a deadlock,
    /// reported as a BUG.
    pub fn timer_delete_sync(&self, cx: &Cpu, timer: TimerList) -> bool {
        let was = self.timer_delete_from(Some(cx), timer);
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
            crate::irq::trace_softirq_entry(cx, crate::irq::SoftirqVec::Timer);
            let (callbacks, pools, n) = {
                let mut wq = self.workqueues.state.lock();
                let due = self.timers.take_due(cx.id(), self.jiffies(), cx.ctx_id());
                let n = due.len();
                let mut callbacks = Vec::new();
                let mut pools = Vec::new();
                for (t, name, action) in due {
                    match action {
                        TimerAction::DelayedWork(work) => {
                            // TIMER_IRQSAFE: call_timer_fn() runs with IRQs still off.
                            self.trace_timer_expire_entry(cx, t, name);
                            pools.extend(self.delayed_work_timer_fn_locked(&mut wq, work, cx));
                            self.timers.done_running(t);
                            self.trace_timer_expire_exit(cx, t);
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
                self.trace_timer_expire_entry(cx, t, name);
                f(cx);
                self.timers.done_running(t);
                self.trace_timer_expire_exit(cx, t);
            }
            crate::irq::trace_softirq_exit(cx, crate::irq::SoftirqVec::Timer);
            n
        })
    }

    /// `trace_timer_expire_entry()` in `call_timer_fn()`: `timer=%p function=%ps now=%lu
    /// baseclk=%lu`. biosim expires a timer at the jiffy its `expires` names (not the bucket's
    /// rounded-up expiry) and its base clock is jiffies, so `baseclk` equals `now`.
    fn trace_timer_expire_entry(&self, cx: &Cpu, t: TimerList, function: &str) {
        let now = self.jiffies();
        crate::ktrace!(
            cx,
            target: "timer",
            "timer_expire_entry",
            flags: cx.trace_flags_under(cx.irqs_disabled() || self.timers.irqsafe(t), 0),
            "timer={} function={} now={} baseclk={}",
            crate::kernel::timer_ptr(t.id),
            function,
            now,
            now
        );
    }

    /// `trace_timer_expire_exit()`: `timer=%p`.
    fn trace_timer_expire_exit(&self, cx: &Cpu, t: TimerList) {
        crate::ktrace!(
            cx,
            target: "timer",
            "timer_expire_exit",
            flags: cx.trace_flags_under(cx.irqs_disabled() || self.timers.irqsafe(t), 0),
            "timer={}",
            crate::kernel::timer_ptr(t.id)
        );
    }
}

/// `LVL_CLK_SHIFT`: each wheel level is 8 times coarser than the one below.
const LVL_CLK_SHIFT: u32 = 3;
/// `LVL_BITS`: 64 buckets per level.
const LVL_BITS: u32 = 6;
const LVL_SIZE: u64 = 1 << LVL_BITS;
const LVL_MASK: u64 = LVL_SIZE - 1;

/// `calc_wheel_index()` (kernel/time/timer.c): the bucket (`idx`, printed by `timer_start`) and
/// the bucket's expiry (`bucket_expiry`) of a timer expiring at `expires` when the base clock is
/// `clk`. Level `n` covers deltas below `LVL_START(n + 1)` = 63 << 3n with granularity 8^n; the
/// expiry is rounded up to the next granule (`calc_index()`: `(expires >> LVL_SHIFT(lvl)) + 1`) so
/// a timer never fires early. `LVL_DEPTH` is 9 above HZ=100, else 8.
pub(crate) fn calc_wheel_index(expires: u64, clk: u64, hz: u32) -> (u64, u64) {
    let depth: u32 = if hz > 100 { 9 } else { 8 };
    let lvl_shift = |lvl: u32| lvl * LVL_CLK_SHIFT;
    let lvl_start = |n: u32| (LVL_SIZE - 1) << ((n - 1) * LVL_CLK_SHIFT);
    let calc_index = |expires: u64, lvl: u32| {
        let e = (expires >> lvl_shift(lvl)) + 1;
        (
            u64::from(lvl) * LVL_SIZE + (e & LVL_MASK),
            e << lvl_shift(lvl),
        )
    };
    let delta = expires.wrapping_sub(clk);
    if (delta as i64) < 0 {
        // Already expired: the current bucket (`idx = clk & LVL_MASK`, bucket_expiry = clk).
        return (clk & LVL_MASK, clk);
    }
    for lvl in 0..depth - 1 {
        if delta < lvl_start(lvl + 1) {
            return calc_index(expires, lvl);
        }
    }
    // WHEEL_TIMEOUT_CUTOFF = LVL_START(LVL_DEPTH): longer timeouts expire at the wheel's
    // capacity, WHEEL_TIMEOUT_MAX = the cutoff less one granule of the last level.
    let cutoff = lvl_start(depth);
    let max = cutoff - (1 << lvl_shift(depth - 1));
    let expires = if delta >= cutoff { clk + max } else { expires };
    calc_index(expires, depth - 1)
}

/// Registers `timers:prepare` at `CPUHP_TIMERS_PREPARE` (`timers_prepare_cpu()` /
/// `timers_dead_cpu()`), as the kernel's static `cpuhp_hp_states[]` entry does.
pub(crate) fn register_hotplug_states(kernel: &Kernel) {
    let startup: hotplug::Callback<Cpu> = UntrackedArc::new(|_cx: &Cpu, _inv: &Invocation| Ok(()));
    let teardown: hotplug::Callback<Cpu> = UntrackedArc::new(
        |cx: &Cpu, inv: &Invocation| -> Result<(), Errno> {
            // timers_dead_cpu() runs on the control CPU and pulls the dead CPU's timers to it:
            // migrate_timer_list() detaches each (`timer_cancel`) and enqueues it on the new
            // base (`timer_start`), with both bases locked and IRQs off.
            let k = cx.kernel();
            let moved = k.timers.migrate(inv.cpu, cx.id());
            for &t in &moved {
                crate::ktrace!(
                    cx,
                    target: "timer",
                    "timer_cancel",
                    flags: cx.trace_flags_under(true, 2),
                    "timer={}",
                    crate::kernel::timer_ptr(t.id)
                );
                k.trace_timer_start_locked(cx, t, 2);
            }
            let n = moved.len();
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

#[cfg(test)]
mod tests {
    use super::calc_wheel_index;
    use crate::kernel::trace::tests::{capture, check_formats};
    use crate::kernel::{timer_ptr, Kernel, KernelConfig, PreemptModel};
    use crate::CpuId;

    #[test]
    fn the_wheel_index_follows_calc_wheel_index() {
        // Level 0 (delta < 63): granularity 1, rounded up one jiffy.
        assert_eq!(calc_wheel_index(1, 0, 250), (2, 2));
        assert_eq!(calc_wheel_index(100, 90, 250), (37, 101), "101 & 63");
        // Level 1 (63 <= delta < 504): granularity 8, offset 64: (100 >> 3) + 1 = 13.
        assert_eq!(calc_wheel_index(100, 0, 250), (64 + 13, 13 << 3));
        // Level 2 (504 <= delta < 4032): granularity 64, offset 128: (1000 >> 6) + 1 = 16.
        assert_eq!(calc_wheel_index(1000, 0, 250), (128 + 16, 16 << 6));
        // Already expired: the current bucket.
        assert_eq!(calc_wheel_index(5, 9, 250), (9, 9));
        // Beyond the wheel's capacity (LVL_DEPTH 9 above HZ=100; 8 at HZ=100): the last level,
        // capped at WHEEL_TIMEOUT_MAX.
        let (idx, _) = calc_wheel_index(u64::MAX / 4, 0, 250);
        assert!((8 * 64..9 * 64).contains(&idx), "{idx}");
        let (idx, _) = calc_wheel_index(u64::MAX / 4, 0, 100);
        assert!((7 * 64..8 * 64).contains(&idx), "{idx}");
    }

    #[test]
    fn timers_trace_start_cancel_and_expiry_in_their_formats() {
        let k = Kernel::new(KernelConfig::for_model(PreemptModel::Full), 2).unwrap();
        let cx = k.cpu(CpuId(1)).unwrap();
        let t = k.timer_setup("my_timer_fn", |_| {});
        let ev = capture(|| {
            k.add_timer_on(&cx, t, 3, CpuId(1));
            // mod_timer() of a pending timer: detached, then enqueued again.
            k.mod_timer(&cx, t, 5);
            k.advance_jiffies(5);
            assert_eq!(k.run_timers(&cx), 1);
            k.mod_timer(&cx, t, 9);
            assert!(k.timer_delete_sync(&cx, t));
        });
        assert_eq!(check_formats(&ev), Vec::<String>::new());
        let p = timer_ptr(t.id);
        let msgs: Vec<&str> = ev.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            msgs,
            [
                format!("timer_start: timer={p} function=my_timer_fn expires=3 [timeout=3] bucket_expiry=4 cpu=1 idx=4 flags=P"),
                format!("timer_cancel: timer={p}"),
                format!("timer_start: timer={p} function=my_timer_fn expires=5 [timeout=5] bucket_expiry=6 cpu=1 idx=6 flags=P"),
                "softirq_entry: vec=1 [action=TIMER]".to_owned(),
                format!("timer_expire_entry: timer={p} function=my_timer_fn now=5 baseclk=5"),
                format!("timer_expire_exit: timer={p}"),
                "softirq_exit: vec=1 [action=TIMER]".to_owned(),
                format!("timer_start: timer={p} function=my_timer_fn expires=9 [timeout=4] bucket_expiry=10 cpu=1 idx=10 flags=P"),
                format!("timer_cancel: timer={p}"),
            ]
        );
        let flags: Vec<&str> = ev.iter().map(|e| e.flags.as_deref().unwrap()).collect();
        assert_eq!(
            flags,
            ["d..1.", "d..1.", "d..1.", "..s..", "..s..", "..s..", "..s..", "d..1.", "d..1."]
        );
    }

    #[test]
    fn the_tracepoint_switch_silences_a_contextless_timer_cancel() {
        // timer_delete() without a context takes the capture's context for its `timer_cancel`;
        // it obeys Kernel::set_tracepoints_enabled() as every other tracepoint does.
        let k = Kernel::new(KernelConfig::for_model(PreemptModel::Full), 2).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let t = k.timer_setup("my_timer_fn", |_| {});
        let cancels = |ev: &[crate::kernel::trace::tests::Captured]| {
            ev.iter().filter(|e| e.tracepoint == "timer_cancel").count()
        };
        k.set_tracepoints_enabled(false);
        let off = capture(|| {
            k.add_timer_on(&cx, t, 3, CpuId(0));
            assert!(k.timer_delete(t));
        });
        assert_eq!(off.len(), 0, "tracepoints off, yet: {off:?}");
        k.set_tracepoints_enabled(true);
        let on = capture(|| {
            k.add_timer_on(&cx, t, 3, CpuId(0));
            assert!(k.timer_delete(t));
        });
        assert_eq!(cancels(&on), 1, "tracepoints on: {on:?}");
    }
}
