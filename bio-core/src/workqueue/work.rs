//! `struct work_struct` and `struct delayed_work` with the queue, cancel, disable, enable and
//! flush operations of `kernel/workqueue.c`.
//!
//! The rules (kernel-semantics.md §2): a queue call returns `true` only if it set PENDING itself,
//! `false` if the work was already pending *or is disabled*; the disable count nests (up to
//! `WORK_OFFQ_DISABLE_MAX`, warning on overflow and underflow) and `enable_work()` never
//! requeues; `mod_delayed_work_on()` steals a pending work and re-arms it with the new delay and
//! CPU; a work still running in one pool is queued behind itself there (non-reentrancy).

use super::{Queued, Workqueue, WqState};
use crate::kernel::{Cpu, CpuId, Kernel, ReportKind};
use crate::sync::UntrackedArc;
use crate::time::{TimerAction, TimerList};
use std::fmt;

/// `work_func_t`: the work function, run in task context by a worker. It receives the work it
/// runs for (the kernel passes the `work_struct *` and the function finds its container).
pub type WorkFn = dyn Fn(&Cpu, &WorkStruct) + Send + Sync;

/// Identity of a work item within its kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkId(pub(crate) usize);

/// `struct work_struct`: a handle to a work item (`INIT_WORK()` creates it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WorkStruct {
    pub(crate) id: WorkId,
}

impl WorkStruct {
    /// The work item's identity.
    pub fn id(self) -> WorkId {
        self.id
    }
}

/// `struct delayed_work`: a work item plus the timer that queues it (`INIT_DELAYED_WORK()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DelayedWork {
    /// `dwork->work`.
    pub work: WorkStruct,
    pub(crate) timer: TimerList,
}

/// `WORK_CPU_UNBOUND` (include/linux/workqueue.h): no CPU requested. biosim's queue calls take
/// `Option<CpuId>`, so it is `None` there; the kernel's value is `NR_CPUS`
/// ([`WORK_CPU_UNBOUND_NR`]), which is what `workqueue_queue_work` prints as `req_cpu`.
pub const WORK_CPU_UNBOUND: Option<CpuId> = None;

/// The number `WORK_CPU_UNBOUND` stands for in the kernel: `NR_CPUS` (`CONFIG_NR_CPUS`), 256 on
/// the reference kernel (`req_cpu=256` in tracefs-6.18/loop-dio-2writes-2reads.trace), whatever
/// the number of CPUs the machine has.
pub const WORK_CPU_UNBOUND_NR: u32 = 256;

/// `WORK_OFFQ_DISABLE_MAX`: the disable count lives in 16 off-queue bits.
pub const WORK_OFFQ_DISABLE_MAX: u32 = (1 << 16) - 1;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Running {
    pub(crate) pool: usize,
    pub(crate) wq: usize,
    pub(crate) ctx: u64,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct DelayedInfo {
    pub(crate) timer: TimerList,
    /// `dwork->cpu`.
    pub(crate) cpu: Option<CpuId>,
    /// `dwork->wq`.
    pub(crate) wq: Option<usize>,
}

pub(crate) struct WorkEntry {
    pub(crate) name: &'static str,
    pub(crate) func: UntrackedArc<WorkFn>,
    /// `WORK_STRUCT_PENDING`.
    pub(crate) pending: bool,
    /// The off-queue disable count.
    pub(crate) disable: u32,
    /// The pool whose worklist holds it.
    pub(crate) queued: Option<usize>,
    pub(crate) running: Option<Running>,
    /// Executions finished, for `flush_work()`.
    pub(crate) completed: u64,
    pub(crate) delayed: Option<DelayedInfo>,
}

impl fmt::Debug for WorkEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkEntry")
            .field("name", &self.name)
            .field("pending", &self.pending)
            .field("disable", &self.disable)
            .field("queued", &self.queued)
            .field("running", &self.running)
            .finish()
    }
}

/// `work_busy()` bits.
pub const WORK_BUSY_PENDING: u32 = 1;
/// `work_busy()` bits.
pub const WORK_BUSY_RUNNING: u32 = 2;

const CANCEL_DISABLE: u32 = 1;

impl Kernel {
    /// `INIT_WORK()`: a work item running `func`.
    pub fn init_work(
        &self,
        name: &'static str,
        func: impl Fn(&Cpu, &WorkStruct) + Send + Sync + 'static,
    ) -> WorkStruct {
        let mut st = self.workqueues.state.lock();
        st.works.push(WorkEntry {
            name,
            func: UntrackedArc::new(func),
            pending: false,
            disable: 0,
            queued: None,
            running: None,
            completed: 0,
            delayed: None,
        });
        WorkStruct {
            id: WorkId(st.works.len() - 1),
        }
    }

    /// `INIT_DELAYED_WORK()`: a work item with a timer that queues it.
    pub fn init_delayed_work(
        &self,
        name: &'static str,
        func: impl Fn(&Cpu, &WorkStruct) + Send + Sync + 'static,
    ) -> DelayedWork {
        let work = self.init_work(name, func);
        let timer = self
            .timers
            .setup("delayed_work_timer_fn", TimerAction::DelayedWork(work.id));
        self.workqueues.state.lock().works[work.id.0].delayed = Some(DelayedInfo {
            timer,
            cpu: None,
            wq: None,
        });
        DelayedWork { work, timer }
    }

    /// The work function's name.
    pub fn work_name(&self, work: WorkStruct) -> &'static str {
        self.workqueues.state.lock().works[work.id.0].name
    }

    /// `queue_work_on()`: queues `work` on `wq` for `cpu` (or the local CPU for
    /// [`WORK_CPU_UNBOUND`] on a per-CPU workqueue). `true` only if this call set PENDING;
    /// `false` if the work was pending or is disabled.
    pub fn queue_work_on(
        &self,
        cpu: Option<CpuId>,
        wq: &Workqueue,
        work: WorkStruct,
        cx: &Cpu,
    ) -> bool {
        let wake = {
            let mut st = self.workqueues.state.lock();
            let e = &mut st.works[work.id.0];
            if e.pending || e.disable > 0 {
                return false;
            }
            e.pending = true;
            self.queue_work_locked(&mut st, cpu, wq.id, work.id, cx)
        };
        self.wake_pool(wake);
        true
    }

    /// `queue_work()`: [`Kernel::queue_work_on`] with [`WORK_CPU_UNBOUND`].
    pub fn queue_work(&self, wq: &Workqueue, work: WorkStruct, cx: &Cpu) -> bool {
        self.queue_work_on(WORK_CPU_UNBOUND, wq, work, cx)
    }

    /// `__queue_work()`: puts the (PENDING) work on a pool's worklist and returns the pool.
    pub(crate) fn queue_work_locked(
        &self,
        st: &mut WqState,
        req_cpu: Option<CpuId>,
        wq: usize,
        work: WorkId,
        cx: &Cpu,
    ) -> usize {
        let info = UntrackedArc::clone(&st.wqs[wq]);
        let unbound_pool = st.pools.len() - 1;
        let mut pool = if info.flags.is_percpu() {
            let cpu = req_cpu.unwrap_or(cx.id());
            if cpu.index() >= unbound_pool {
                // The kernel would index past per_cpu_ptr(); biosim reports it and keeps the work
                // on the local CPU rather than lose it.
                cx.report(
                    ReportKind::Bug,
                    format!("kernel/workqueue.c: __queue_work: {cpu} is not a possible CPU (nr_cpu_ids={unbound_pool})"),
                );
                cx.id().index()
            } else {
                cpu.index()
            }
        } else {
            unbound_pool
        };
        // Non-reentrancy: still running in another pool of the same wq → queue it there.
        if let Some(r) = st.works[work.0].running {
            if r.pool != pool && r.wq == wq {
                pool = r.pool;
            }
        }
        // kick_pool() wakes an idle worker only when this is the first work it has to do: a busy
        // worker picks the work up itself, and a worker already woken is not woken again
        // (try_to_wake_up() on a running task traces nothing).
        let wakes_worker = !st.pools[pool].busy && st.pools[pool].worklist.is_empty();
        st.pools[pool].worklist.push_back(Queued { work, wq });
        let e = &mut st.works[work.0];
        e.queued = Some(pool);
        let name = e.name;
        // __queue_work(): IRQs are off (queue_work_on()'s local_irq_save()) and pool->lock is
        // held at both tracepoints; rcu_read_lock() counts too on a non-preemptible RCU.
        let flags = cx.trace_flags_under(true, self.pool_lock_depth(cx));
        crate::ktrace!(
            cx,
            target: "workqueue",
            "workqueue_queue_work",
            flags: flags,
            "work struct={} function={} workqueue={} req_cpu={} cpu={}",
            crate::kernel::work_ptr(work.0),
            name,
            info.name,
            req_cpu.map_or(WORK_CPU_UNBOUND_NR, |c| c.0),
            st.pools[pool].cpu.map_or(-1, |c| i64::from(c.0))
        );
        // No max_active limit is modelled: every queued work is activated at once.
        crate::ktrace!(
            cx,
            target: "workqueue",
            "workqueue_activate_work",
            flags: flags,
            "work struct {} function={} ",
            crate::kernel::work_ptr(work.0),
            name
        );
        if wakes_worker {
            let worker = self.pool_worker_task(pool, &info);
            let target = st.pools[pool]
                .cpu
                .filter(|_| !st.pools[pool].disassociated)
                .unwrap_or(cx.id());
            cx.trace_sched_wakeup(&worker, target, self.pool_lock_depth(cx));
        }
        pool
    }

    /// What `__queue_work()` holds at its tracepoints beyond the caller's count: `pool->lock`,
    /// and `rcu_read_lock()` when it is `preempt_disable()` (no `CONFIG_PREEMPT_RCU`).
    pub(crate) fn pool_lock_depth(&self, cx: &Cpu) -> u32 {
        let c = cx.config();
        1 + u32::from(!c.preempt_rcu && c.preempt_count)
    }

    /// `queue_delayed_work_on()`: like `queue_work_on()` but the work is queued `delay` jiffies
    /// from now by a timer on `cpu` (immediately for `delay == 0`).
    pub fn queue_delayed_work_on(
        &self,
        cpu: Option<CpuId>,
        wq: &Workqueue,
        dwork: DelayedWork,
        delay: u64,
        cx: &Cpu,
    ) -> bool {
        let wake = {
            let mut st = self.workqueues.state.lock();
            let e = &mut st.works[dwork.work.id.0];
            if e.pending || e.disable > 0 {
                return false;
            }
            e.pending = true;
            self.queue_delayed_work_locked(&mut st, cpu, wq.id, dwork, delay, cx)
        };
        self.wake_target(wake);
        true
    }

    /// `mod_delayed_work_on()`: steals the work if pending and re-arms it with the new `delay`
    /// and `cpu`, or queues it if idle. Returns `true` if it was pending (now modified), `false`
    /// if it was idle (now queued) or is disabled (not queued).
    pub fn mod_delayed_work_on(
        &self,
        cpu: Option<CpuId>,
        wq: &Workqueue,
        dwork: DelayedWork,
        delay: u64,
        cx: &Cpu,
    ) -> bool {
        let (ret, wake) = {
            let mut st = self.workqueues.state.lock();
            let ret = self
                .grab_pending(&mut st, dwork.work.id, Some(cx))
                .was_pending();
            let e = &mut st.works[dwork.work.id.0];
            if e.disable > 0 {
                // clear_pending_if_disabled()
                e.pending = false;
                return ret;
            }
            (
                ret,
                self.queue_delayed_work_locked(&mut st, cpu, wq.id, dwork, delay, cx),
            )
        };
        self.wake_target(wake);
        ret
    }

    /// `__queue_delayed_work()`.
    fn queue_delayed_work_locked(
        &self,
        st: &mut WqState,
        cpu: Option<CpuId>,
        wq: usize,
        dwork: DelayedWork,
        delay: u64,
        cx: &Cpu,
    ) -> Target {
        if delay == 0 {
            return Target::Pool(self.queue_work_locked(st, cpu, wq, dwork.work.id, cx));
        }
        if let Some(c) = cpu {
            if !self.cpu_online(c) {
                self.warn_once(
                    cx,
                    "__queue_delayed_work",
                    "kernel/workqueue.c: __queue_delayed_work: WARN_ON_ONCE(cpu != WORK_CPU_UNBOUND && !cpu_online(cpu))",
                );
            }
        }
        let e = &mut st.works[dwork.work.id.0];
        if let Some(d) = e.delayed.as_mut() {
            d.cpu = cpu;
            d.wq = Some(wq);
        }
        let base = cpu.unwrap_or(cx.id());
        let expires = self.jiffies() + delay;
        let name = e.name;
        // add_timer_on() for a CPU (TIMER_PINNED), add_timer_global() for WORK_CPU_UNBOUND.
        self.timers
            .arm(dwork.timer, base, expires, Some(cpu.is_some()));
        self.trace_timer_start(cx, dwork.timer);
        // The kernel has no tracepoint naming the work a delayed-work timer is for.
        crate::ktrace!(
            cx,
            target: "workqueue",
            "biosim_queue_delayed_work",
            flags: cx.trace_flags_under(true, 0),
            "work struct {} function={name} delay={delay} timer={} timer_cpu={}",
            crate::kernel::work_ptr(dwork.work.id.0),
            crate::kernel::timer_ptr(dwork.timer.id),
            base.0
        );
        Target::Cpu(base)
    }

    /// `delayed_work_timer_fn()`, called with the workqueue lock held from the timer softirq:
    /// queues the work the timer was armed for.
    pub(crate) fn delayed_work_timer_fn_locked(
        &self,
        st: &mut WqState,
        work: WorkId,
        cx: &Cpu,
    ) -> Option<usize> {
        let d = st.works[work.0].delayed?;
        let wq = d.wq?;
        Some(self.queue_work_locked(st, d.cpu, wq, work, cx))
    }

    /// `try_to_grab_pending()`: takes ownership of PENDING and says where the work was: on its
    /// timer (deleted with `timer_delete()`, which traces `timer_cancel`), on a worklist, or
    /// idle (PENDING is now set by us).
    fn grab_pending(&self, st: &mut WqState, work: WorkId, cx: Option<&Cpu>) -> Grabbed {
        let e = &st.works[work.0];
        if let Some(d) = e.delayed {
            if self.timer_delete_from(cx, d.timer) {
                return Grabbed::Timer;
            }
        }
        if let Some(pool) = e.queued {
            let list = &mut st.pools[pool].worklist;
            if let Some(pos) = list.iter().position(|q| q.work == work) {
                list.remove(pos);
            }
            st.works[work.0].queued = None;
            return Grabbed::Worklist;
        }
        let e = &mut st.works[work.0];
        let was = e.pending;
        e.pending = true;
        if was {
            Grabbed::Pending
        } else {
            Grabbed::Idle
        }
    }

    /// The annotation of a cancel, disable or enable (`site`, e.g. `disable_delayed_work_sync`):
    /// the kernel traces only the timer it deletes (`timer_cancel`), not which work was
    /// cancelled, whether it was pending, nor the disable count that now rejects every queue
    /// attempt; finding 1's causal step is one of these.
    fn trace_cancel(
        &self,
        cx: Option<&Cpu>,
        site: &str,
        work: WorkId,
        grabbed: Grabbed,
        disable: u32,
    ) {
        let event = if site.starts_with("disable") {
            "biosim_disable_work"
        } else if site.starts_with("enable") {
            "biosim_enable_work"
        } else {
            "biosim_cancel_work"
        };
        if !self.tracepoints_enabled()
            || !tracing::enabled!(target: "workqueue", tracing::Level::TRACE)
        {
            return;
        }
        let name = self.workqueues.state.lock().works[work.0].name;
        let ptr = crate::kernel::work_ptr(work.0);
        let what = grabbed.describe();
        match cx {
            Some(cx) => crate::ktrace!(
                cx,
                target: "workqueue",
                event,
                "{site}: work struct {ptr} function={name} {what}, disable count {disable}"
            ),
            None => tracing::trace!(
                target: "workqueue",
                tracepoint = event,
                "{event}: {site}: work struct {ptr} function={name} {what}, disable count {disable}"
            ),
        }
    }

    /// `__cancel_work()`: grabs PENDING, optionally bumps the disable count, clears PENDING.
    /// Returns where the work was and the disable count after.
    fn cancel_work_flags(&self, work: WorkId, flags: u32, cx: Option<&Cpu>) -> (Grabbed, u32) {
        let mut st = self.workqueues.state.lock();
        let ret = self.grab_pending(&mut st, work, cx);
        let e = &mut st.works[work.0];
        let mut overflowed = false;
        if flags & CANCEL_DISABLE != 0 {
            if e.disable < WORK_OFFQ_DISABLE_MAX {
                e.disable += 1;
            } else {
                overflowed = true;
            }
        }
        // set_work_pool_and_clear_pending(), overflow or not.
        e.pending = false;
        let disable = e.disable;
        drop(st);
        if let (true, Some(cx)) = (overflowed, cx) {
            self.warn_once(
                cx,
                "work_offqd_disable",
                "kernel/workqueue.c: workqueue: work disable count overflowed",
            );
        }
        (ret, disable)
    }

    /// A non-waiting cancel or disable, annotated.
    fn cancel_work_traced(&self, work: WorkId, flags: u32, cx: Option<&Cpu>, site: &str) -> bool {
        let (grabbed, disable) = self.cancel_work_flags(work, flags, cx);
        self.trace_cancel(cx, site, work, grabbed, disable);
        grabbed.was_pending()
    }

    /// `__cancel_work_sync()`: cancels with the work disabled meanwhile, then waits for a running
    /// instance; re-enables unless asked to keep it disabled.
    fn cancel_work_sync_flags(&self, work: WorkId, flags: u32, cx: &Cpu, site: &str) -> bool {
        let _ = cx.might_sleep_at(format!("kernel/workqueue.c: {site}"));
        let (grabbed, mut disable) = self.cancel_work_flags(work, flags | CANCEL_DISABLE, Some(cx));
        self.wait_not_running(work, cx, site);
        if flags & CANCEL_DISABLE == 0 {
            disable = self.enable_work_inner(WorkStruct { id: work }, cx).1;
        }
        self.trace_cancel(Some(cx), site, work, grabbed, disable);
        grabbed.was_pending()
    }

    fn wait_not_running(&self, work: WorkId, cx: &Cpu, site: &str) {
        let running = self.workqueues.state.lock().works[work.0].running;
        match running {
            None => {}
            Some(r) if r.ctx == cx.ctx_id() => {
                cx.report(
                    ReportKind::Bug,
                    format!("kernel/workqueue.c: {site}() on the work it is called from: it would wait for itself forever"),
                );
            }
            Some(_) => {
                let ok = cx.wait_until(site, &|| {
                    self.workqueues.state.lock().works[work.0].running.is_none()
                });
                if !ok {
                    cx.report(
                        ReportKind::Bug,
                        format!("kernel/workqueue.c: {site}() waits forever for a running work"),
                    );
                }
            }
        }
    }

    /// `cancel_work()`: cancels a pending work; returns whether it was pending.
    pub fn cancel_work(&self, work: WorkStruct) -> bool {
        self.cancel_work_traced(work.id, 0, None, "cancel_work")
    }

    /// `cancel_work_sync()`: cancels and waits for a running instance; returns whether it was
    /// pending. Queue attempts while it waits are rejected (the work is disabled meanwhile).
    pub fn cancel_work_sync(&self, work: WorkStruct, cx: &Cpu) -> bool {
        self.cancel_work_sync_flags(work.id, 0, cx, "cancel_work_sync")
    }

    /// `cancel_delayed_work()`: also stops the timer.
    pub fn cancel_delayed_work(&self, dwork: DelayedWork) -> bool {
        self.cancel_work_traced(dwork.work.id, 0, None, "cancel_delayed_work")
    }

    /// `cancel_delayed_work_sync()`.
    pub fn cancel_delayed_work_sync(&self, dwork: DelayedWork, cx: &Cpu) -> bool {
        self.cancel_work_sync_flags(dwork.work.id, 0, cx, "cancel_delayed_work_sync")
    }

    /// `disable_work()`: cancels and increments the disable count; returns whether it was
    /// pending. Until a matching enable, every queue attempt fails.
    pub fn disable_work(&self, work: WorkStruct, cx: &Cpu) -> bool {
        self.cancel_work_traced(work.id, CANCEL_DISABLE, Some(cx), "disable_work")
    }

    /// `disable_work_sync()`: [`Kernel::disable_work`] and waits for a running instance.
    pub fn disable_work_sync(&self, work: WorkStruct, cx: &Cpu) -> bool {
        self.cancel_work_sync_flags(work.id, CANCEL_DISABLE, cx, "disable_work_sync")
    }

    /// `disable_delayed_work()`.
    pub fn disable_delayed_work(&self, dwork: DelayedWork, cx: &Cpu) -> bool {
        self.cancel_work_traced(
            dwork.work.id,
            CANCEL_DISABLE,
            Some(cx),
            "disable_delayed_work",
        )
    }

    /// `disable_delayed_work_sync()`.
    pub fn disable_delayed_work_sync(&self, dwork: DelayedWork, cx: &Cpu) -> bool {
        self.cancel_work_sync_flags(
            dwork.work.id,
            CANCEL_DISABLE,
            cx,
            "disable_delayed_work_sync",
        )
    }

    /// `enable_work()`: decrements the disable count; returns `true` when it reaches 0. Never
    /// queues anything. Like the kernel's, it grabs PENDING first (`work_grab_pending()`) and
    /// clears it, so an unbalanced enable of a pending work cancels it; enabling a work that is not
    /// disabled warns "work disable count underflowed".
    pub fn enable_work(&self, work: WorkStruct, cx: &Cpu) -> bool {
        self.enable_work_site(work, cx, "enable_work")
    }

    /// [`Kernel::enable_work`] annotated as `site`.
    fn enable_work_site(&self, work: WorkStruct, cx: &Cpu, site: &str) -> bool {
        let (grabbed, disable) = self.enable_work_inner(work, cx);
        self.trace_cancel(Some(cx), site, work.id, grabbed, disable);
        disable == 0
    }

    /// `enable_work()` without the annotation (the re-enable inside `cancel_*_sync()`): where
    /// the work was and the disable count after.
    fn enable_work_inner(&self, work: WorkStruct, cx: &Cpu) -> (Grabbed, u32) {
        let mut st = self.workqueues.state.lock();
        // work_grab_pending(): an unbalanced enable of a pending work steals it, as the kernel's does.
        let grabbed = self.grab_pending(&mut st, work.id, Some(cx));
        let e = &mut st.works[work.id.0];
        let underflow = e.disable == 0;
        if !underflow {
            e.disable -= 1;
        }
        e.pending = false;
        let disable = e.disable;
        drop(st);
        if underflow {
            self.warn_once(
                cx,
                "work_offqd_enable",
                "kernel/workqueue.c: workqueue: work disable count underflowed",
            );
        }
        (grabbed, disable)
    }

    /// `enable_delayed_work()`: `enable_work(&dwork->work)`.
    pub fn enable_delayed_work(&self, dwork: DelayedWork, cx: &Cpu) -> bool {
        self.enable_work_site(dwork.work, cx, "enable_delayed_work")
    }

    /// `enable_and_queue_work()`: enables, and queues only if the count reached 0. Returns whether
    /// it was enabled.
    pub fn enable_and_queue_work(&self, wq: &Workqueue, work: WorkStruct, cx: &Cpu) -> bool {
        if self.enable_work(work, cx) {
            self.queue_work(wq, work, cx);
            return true;
        }
        false
    }

    /// `flush_work()`: waits for the queued instance (if any) and the running one to finish.
    /// Returns `true` if it waited. Flushing a work from itself is reported as a deadlock.
    pub fn flush_work(&self, work: WorkStruct, cx: &Cpu) -> bool {
        let _ = cx.might_sleep_at("kernel/workqueue.c: __flush_work");
        // Nothing queued and nothing running: nothing to wait for.
        let (target, running) = {
            let st = self.workqueues.state.lock();
            let e = &st.works[work.id.0];
            let n = u64::from(e.queued.is_some()) + u64::from(e.running.is_some());
            if n == 0 {
                return false;
            }
            (e.completed + n, e.running)
        };
        if running.is_some_and(|r| r.ctx == cx.ctx_id()) {
            cx.report(
                ReportKind::Bug,
                "kernel/workqueue.c: flush_work() on the work it is called from: deadlock"
                    .to_owned(),
            );
            return false;
        }
        let ok = cx.wait_until("flush_work", &|| {
            self.workqueues.state.lock().works[work.id.0].completed >= target
        });
        if !ok {
            cx.report(
                ReportKind::Bug,
                "kernel/workqueue.c: flush_work() waits forever: the work cannot run".to_owned(),
            );
        }
        true
    }

    /// `flush_delayed_work()`: queues a delayed work whose timer is pending now, then flushes.
    pub fn flush_delayed_work(&self, dwork: DelayedWork, cx: &Cpu) -> bool {
        let wake = {
            let mut st = self.workqueues.state.lock();
            // If the timer was armed, run what it would have: delayed_work_timer_fn()
            // (`timer_delete()` first, which traces `timer_cancel`).
            if self.timer_delete_from(Some(cx), dwork.timer) {
                self.delayed_work_timer_fn_locked(&mut st, dwork.work.id, cx)
            } else {
                None
            }
        };
        if let Some(p) = wake {
            self.wake_pool(p);
        }
        self.flush_work(dwork.work, cx)
    }

    /// `work_pending()`.
    pub fn work_pending(&self, work: WorkStruct) -> bool {
        self.workqueues.state.lock().works[work.id.0].pending
    }

    /// `delayed_work_pending()`.
    pub fn delayed_work_pending(&self, dwork: DelayedWork) -> bool {
        self.work_pending(dwork.work)
    }

    /// `work_busy()`: [`WORK_BUSY_PENDING`] | [`WORK_BUSY_RUNNING`].
    pub fn work_busy(&self, work: WorkStruct) -> u32 {
        let st = self.workqueues.state.lock();
        let e = &st.works[work.id.0];
        (if e.pending { WORK_BUSY_PENDING } else { 0 })
            | (if e.running.is_some() {
                WORK_BUSY_RUNNING
            } else {
                0
            })
    }

    /// The disable count of a work (for tests and traces; the kernel keeps it in `data`).
    pub fn work_disable_count(&self, work: WorkStruct) -> u32 {
        self.workqueues.state.lock().works[work.id.0].disable
    }

    /// Which CPU's timer base holds a delayed work's timer, if it is armed, and when it expires.
    pub fn delayed_work_timer(&self, dwork: DelayedWork) -> Option<CpuId> {
        self.timers.base_of(dwork.timer)
    }

    fn wake_target(&self, t: Target) {
        match t {
            Target::Pool(p) => self.wake_pool(p),
            Target::Cpu(c) => self.wake(c),
        }
    }
}

/// Where `try_to_grab_pending()` found a work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grabbed {
    /// Its delayed-work timer was pending and is deleted.
    Timer,
    /// It was on a pool's worklist and is taken off.
    Worklist,
    /// PENDING was set with the work on neither (between a timer firing and queueing).
    Pending,
    /// It was not pending.
    Idle,
}

impl Grabbed {
    /// `try_to_grab_pending()`'s return value: 1 if the work was pending.
    pub(crate) fn was_pending(self) -> bool {
        self != Self::Idle
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Timer => "was pending on its timer (timer deleted)",
            Self::Worklist => "was pending on a worklist (taken off)",
            Self::Pending => "was pending",
            Self::Idle => "was not pending",
        }
    }
}

/// Who to wake after a queue operation.
pub(crate) enum Target {
    Pool(usize),
    Cpu(CpuId),
}

#[cfg(test)]
mod tests {
    use crate::kernel::trace::tests::{capture, check_formats, Captured};
    use crate::kernel::{work_ptr, Kernel, KernelConfig, PreemptModel, Task};
    use crate::workqueue::{PoolId, WQ_HIGHPRI, WQ_PERCPU, WQ_UNBOUND};
    use crate::CpuId;

    fn full() -> crate::sync::UntrackedArc<Kernel> {
        Kernel::new(KernelConfig::for_model(PreemptModel::Full), 2).unwrap()
    }

    fn names(ev: &[Captured]) -> Vec<&str> {
        ev.iter().map(|e| e.tracepoint.as_str()).collect()
    }

    #[test]
    fn queueing_and_running_work_trace_the_kernel_events_in_their_formats() {
        let k = full();
        let cx = k.cpu(CpuId(0)).unwrap();
        let wq = k.alloc_workqueue("test_wq", WQ_PERCPU, 0).unwrap();
        let work = k.init_work("test_fn", |_, _| {});
        let ev = capture(|| {
            assert!(k.queue_work_on(Some(CpuId(0)), &wq, work, &cx));
            assert!(k.run_worker(PoolId::Cpu(CpuId(0)), &cx).is_some());
        });
        assert_eq!(check_formats(&ev), Vec::<String>::new());
        assert_eq!(
            names(&ev),
            [
                "workqueue_queue_work",
                "workqueue_activate_work",
                "sched_wakeup",
                "sched_switch",
                "workqueue_execute_start",
                "workqueue_execute_end",
                "sched_switch"
            ]
        );
        let p = work_ptr(work.id.0);
        assert_eq!(
            ev[0].message,
            format!("workqueue_queue_work: work struct={p} function=test_fn workqueue=test_wq req_cpu=0 cpu=0")
        );
        // __queue_work(): IRQs off, pool->lock held (PREEMPT_RCU: rcu_read_lock() counts nothing).
        assert_eq!(ev[0].flags.as_deref(), Some("d..1."));
        assert_eq!(
            ev[1].message,
            format!("workqueue_activate_work: work struct {p} function=test_fn ")
        );
        assert_eq!(
            ev[2].message,
            "sched_wakeup: comm=kworker/0:1 pid=300 prio=120 target_cpu=000"
        );
        assert_eq!(
            ev[2].flags.as_deref(),
            Some("d..3."),
            "pool->lock, pi_lock, rq lock"
        );
        assert_eq!(
            ev[3].message,
            "sched_switch: prev_comm=biosim/0 prev_pid=1000 prev_prio=120 prev_state=R+ ==> next_comm=kworker/0:1 next_pid=300 next_prio=120"
        );
        assert_eq!(
            (ev[3].comm.as_deref(), ev[3].pid),
            (Some("biosim/0"), Some(1000))
        );
        assert_eq!(ev[3].flags.as_deref(), Some("d..2."));
        assert_eq!(
            ev[4].message,
            format!("workqueue_execute_start: work struct {p}: function test_fn")
        );
        assert_eq!(
            (ev[4].comm.as_deref(), ev[4].pid, ev[4].flags.as_deref()),
            (Some("kworker/0:1"), Some(300), Some("....."))
        );
        assert_eq!(
            ev[6].message,
            "sched_switch: prev_comm=kworker/0:1 prev_pid=300 prev_prio=120 prev_state=I ==> next_comm=biosim/0 next_pid=1000 next_prio=120"
        );
        assert_eq!(
            cx.current(),
            Task::submitter(CpuId(0)),
            "the previous task is back"
        );
    }

    #[test]
    fn a_worker_the_runtime_already_switched_in_is_not_switched_again() {
        let k = full();
        let cx = k.cpu(CpuId(0)).unwrap();
        let wq = k.alloc_workqueue("test_wq", WQ_PERCPU, 0).unwrap();
        let work = k.init_work("test_fn", |_, _| {});
        k.queue_work_on(Some(CpuId(0)), &wq, work, &cx);
        cx.set_current(Task::kworker(CpuId(0)));
        let ev = capture(|| {
            k.run_worker(PoolId::Cpu(CpuId(0)), &cx);
        });
        assert_eq!(
            names(&ev),
            ["workqueue_execute_start", "workqueue_execute_end"]
        );
        assert_eq!(cx.current(), Task::kworker(CpuId(0)));
    }

    #[test]
    fn unbound_and_highpri_workers_have_their_kernel_names() {
        let k = full();
        let cx = k.cpu(CpuId(1)).unwrap();
        let uwq = k.alloc_workqueue("loop0", WQ_UNBOUND, 0).unwrap();
        let hwq = k
            .alloc_workqueue("kblockd", WQ_PERCPU | WQ_HIGHPRI, 0)
            .unwrap();
        let w1 = k.init_work("loop_rootcg_workfn", |_, _| {});
        let w2 = k.init_work("blk_mq_run_work_fn", |_, _| {});
        let ev = capture(|| {
            k.queue_work(&uwq, w1, &cx);
            k.run_worker(PoolId::Unbound, &cx);
            k.queue_work_on(Some(CpuId(1)), &hwq, w2, &cx);
            k.run_worker(PoolId::Cpu(CpuId(1)), &cx);
        });
        assert_eq!(check_formats(&ev), Vec::<String>::new());
        let msgs: Vec<&str> = ev.iter().map(|e| e.message.as_str()).collect();
        // req_cpu=256: WORK_CPU_UNBOUND is NR_CPUS, as on the live kernel.
        assert!(
            msgs[0].ends_with("workqueue=loop0 req_cpu=256 cpu=-1"),
            "{msgs:?}"
        );
        assert!(
            msgs.contains(&"sched_wakeup: comm=kworker/u8:1 pid=501 prio=120 target_cpu=001"),
            "{msgs:?}"
        );
        assert!(
            msgs.contains(&"sched_wakeup: comm=kworker/1:1H pid=401 prio=100 target_cpu=001"),
            "{msgs:?}"
        );
    }

    #[test]
    fn disable_delayed_work_sync_shows_the_cancelled_timer_and_the_disable() {
        let k = full();
        let cx = k.cpu(CpuId(1)).unwrap();
        let wq = k.alloc_workqueue("bio_complete", WQ_PERCPU, 0).unwrap();
        let dw = k.init_delayed_work("bio_complete_work_fn", |_, _| {});
        let ev = capture(|| {
            assert!(k.queue_delayed_work_on(Some(CpuId(1)), &wq, dw, 1, &cx));
            assert!(k.disable_delayed_work_sync(dw, &cx), "it was pending");
            assert!(
                !k.queue_delayed_work_on(Some(CpuId(1)), &wq, dw, 1, &cx),
                "disabled"
            );
        });
        assert_eq!(check_formats(&ev), Vec::<String>::new());
        assert_eq!(
            names(&ev),
            [
                "timer_start",
                "biosim_queue_delayed_work",
                "timer_cancel",
                "biosim_disable_work"
            ]
        );
        let t = crate::kernel::timer_ptr(dw.timer.id);
        assert_eq!(
            ev[0].message,
            format!("timer_start: timer={t} function=delayed_work_timer_fn expires=1 [timeout=1] bucket_expiry=2 cpu=1 idx=2 flags=P|I")
        );
        assert_eq!(ev[2].message, format!("timer_cancel: timer={t}"));
        assert_eq!(
            ev[2].flags.as_deref(),
            Some("d..1."),
            "lock_timer_base() with IRQs off"
        );
        assert_eq!(
            ev[3].message,
            format!(
                "biosim_disable_work: disable_delayed_work_sync: work struct {} function=bio_complete_work_fn was pending on its timer (timer deleted), disable count 1",
                work_ptr(dw.work.id.0)
            )
        );
    }

    #[test]
    fn every_cancel_and_enable_is_annotated_with_what_it_found() {
        let k = full();
        let cx = k.cpu(CpuId(0)).unwrap();
        let wq = k.alloc_workqueue("test_wq", WQ_PERCPU, 0).unwrap();
        let w = k.init_work("test_fn", |_, _| {});
        let dw = k.init_delayed_work("dw_fn", |_, _| {});
        let ev = capture(|| {
            k.queue_work_on(Some(CpuId(0)), &wq, w, &cx);
            k.cancel_work_sync(w, &cx);
            k.disable_work(w, &cx);
            k.enable_work(w, &cx);
            k.queue_delayed_work_on(Some(CpuId(0)), &wq, dw, 5, &cx);
            // mod_delayed_work_on() steals the pending timer: timer_cancel, then timer_start.
            k.mod_delayed_work_on(Some(CpuId(0)), &wq, dw, 7, &cx);
            k.cancel_delayed_work(dw);
        });
        // cancel_delayed_work() has no context: its two events leave the columns to the capture.
        let (with_cx, without): (Vec<Captured>, Vec<Captured>) =
            ev.iter().cloned().partition(|e| e.flags.is_some());
        assert_eq!(names(&without), ["timer_cancel", "biosim_cancel_work"]);
        assert_eq!(check_formats(&with_cx), Vec::<String>::new());
        let notes: Vec<&str> = ev
            .iter()
            .filter(|e| e.tracepoint.starts_with("biosim_") && !e.tracepoint.contains("queue"))
            .map(|e| e.message.as_str())
            .collect();
        let p = work_ptr(w.id.0);
        let d = work_ptr(dw.work.id.0);
        assert_eq!(
            notes,
            [
                format!("biosim_cancel_work: cancel_work_sync: work struct {p} function=test_fn was pending on a worklist (taken off), disable count 0"),
                format!("biosim_disable_work: disable_work: work struct {p} function=test_fn was not pending, disable count 1"),
                format!("biosim_enable_work: enable_work: work struct {p} function=test_fn was not pending, disable count 0"),
                format!("biosim_cancel_work: cancel_delayed_work: work struct {d} function=dw_fn was pending on its timer (timer deleted), disable count 0"),
            ]
        );
        let timers: Vec<&str> = ev
            .iter()
            .filter(|e| e.tracepoint.starts_with("timer_"))
            .map(|e| e.tracepoint.as_str())
            .collect();
        assert_eq!(
            timers,
            ["timer_start", "timer_cancel", "timer_start", "timer_cancel"]
        );
    }
}
