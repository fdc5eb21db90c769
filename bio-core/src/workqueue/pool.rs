//! Worker pools (`struct worker_pool`): `process_one_work()`, the per-CPU pools and their
//! disassociation on CPU offline (`workqueue_offline_cpu()` → `unbind_workers()`,
//! `workqueue_online_cpu()` → `rebind_workers()`), and the `WQ_MEM_RECLAIM` rescuer
//! (`send_mayday()`, `rescuer_thread()`, `worker_attach_to_pool()`).
//!
//! The runtime decides *when* and *on which CPU* a pool's worker runs; the pool decides what runs
//! and checks the kernel's own assertion that an associated per-CPU pool only ever executes on its
//! CPU (`WARN_ON_ONCE(!(pool->flags & POOL_DISASSOCIATED) && raw_smp_processor_id() != pool->cpu)`).

use super::work::{Running, WorkStruct};
use super::WQ_MEM_RECLAIM;
use crate::kernel::{Cpu, CpuId, Kernel, PrevState, ReportKind, Task};
use crate::sync::UntrackedArc;
use hotplug::{Callback, Errno, Invocation, CPUHP_AP_WORKQUEUE_ONLINE, CPUHP_WORKQUEUE_PREP};

/// Identity of a worker pool: `PoolId::Cpu(n)` for CPU n's normal-priority pool, or the unbound
/// pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolId {
    /// A per-CPU pool.
    Cpu(CpuId),
    /// The unbound pool.
    Unbound,
}

/// A snapshot of a pool, for a runtime choosing what to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolInfo {
    /// The pool.
    pub id: PoolId,
    /// `POOL_DISASSOCIATED`: its work may run on any online CPU.
    pub disassociated: bool,
    /// The congestion knob is set: only a rescuer can make progress.
    pub congested: bool,
    /// A worker is executing a work item right now.
    pub busy: bool,
    /// Work items on the worklist.
    pub queued: usize,
    /// The rescuer runs this pool's work unbound ([`super::RescuerAffinity::Unbound`]).
    pub rescuer_unbound: bool,
    /// Work items on the worklist of a congested pool whose workqueue has a rescuer
    /// (`WQ_MEM_RECLAIM`): what the rescuer may run. Zero while the pool is not congested.
    pub rescuable: usize,
}

impl PoolInfo {
    /// The CPU a worker of this pool must run on, or `None` if any online CPU may run it.
    pub fn bound_cpu(&self) -> Option<CpuId> {
        match self.id {
            PoolId::Cpu(c) if !self.disassociated => Some(c),
            _ => None,
        }
    }

    /// The CPU the rescuer must run this pool's work on, or `None` if any online CPU may.
    pub fn rescuer_cpu(&self) -> Option<CpuId> {
        if self.rescuer_unbound {
            None
        } else {
            self.bound_cpu()
        }
    }

    /// Whether a normal worker can run something now.
    pub fn worker_runnable(&self) -> bool {
        self.queued > 0 && !self.busy && !self.congested
    }

    /// Whether the rescuer can run something now (mayday raised).
    pub fn rescuer_runnable(&self) -> bool {
        self.rescuable > 0 && !self.busy && self.congested
    }
}

/// One execution of a work item, as `process_one_work()` saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkExecution {
    /// The work.
    pub work: WorkStruct,
    /// Its function's name.
    pub function: &'static str,
    /// The workqueue it was queued on.
    pub workqueue: String,
    /// The pool.
    pub pool: PoolId,
    /// The CPU it ran on.
    pub ran_on: CpuId,
    /// Whether the pool was disassociated (its work running unbound).
    pub disassociated: bool,
    /// Whether a rescuer ran it.
    pub rescuer: bool,
}

impl Kernel {
    /// The index of pool `id`, or `None` for a CPU that does not exist.
    fn pool_index(&self, id: PoolId) -> Option<usize> {
        match id {
            PoolId::Cpu(c) if c.index() < self.nr_cpus() as usize => Some(c.index()),
            PoolId::Cpu(_) => None,
            PoolId::Unbound => Some(self.nr_cpus() as usize),
        }
    }

    fn pool_id(&self, index: usize) -> PoolId {
        if index == self.nr_cpus() as usize {
            PoolId::Unbound
        } else {
            PoolId::Cpu(CpuId(index as u32))
        }
    }

    /// Whether any per-CPU pool is disassociated (its CPU offline, `POOL_DISASSOCIATED`): what
    /// an idle CPU checks before it looks for such a pool's work, without snapshotting them all.
    pub fn any_pool_disassociated(&self) -> bool {
        let st = self.workqueues.state.lock();
        st.pools
            .iter()
            .take(self.nr_cpus() as usize)
            .any(|p| p.disassociated)
    }

    /// Snapshots of every pool.
    pub fn pools(&self) -> Vec<PoolInfo> {
        let st = self.workqueues.state.lock();
        st.pools
            .iter()
            .enumerate()
            .map(|(i, p)| PoolInfo {
                id: self.pool_id(i),
                disassociated: p.disassociated,
                congested: p.congested,
                busy: p.busy,
                queued: p.worklist.len(),
                rescuer_unbound: st.rescuer_affinity == super::RescuerAffinity::Unbound,
                rescuable: if p.congested {
                    p.worklist
                        .iter()
                        .filter(|q| st.wqs[q.wq].flags.contains(WQ_MEM_RECLAIM))
                        .count()
                } else {
                    0
                },
            })
            .collect()
    }

    /// One pool's snapshot, or `None` if `id` names a CPU that does not exist.
    pub fn pool(&self, id: PoolId) -> Option<PoolInfo> {
        let i = self.pool_index(id)?;
        Some(self.pools().swap_remove(i))
    }

    /// Sets the congestion knob of a pool: while set, no normal worker runs (as when the pool
    /// cannot create workers under memory pressure) and `WQ_MEM_RECLAIM` work waits for the
    /// rescuer (`pool_mayday_timeout()` → `send_mayday()`).
    /// Returns `false` (and changes nothing) if `id` names a CPU that does not exist.
    #[must_use = "false means there is no such pool"]
    pub fn set_pool_congested(&self, id: PoolId, congested: bool) -> bool {
        let Some(i) = self.pool_index(id) else {
            return false;
        };
        self.workqueues.state.lock().pools[i].congested = congested;
        self.wake_pool(i);
        true
    }

    /// Sets where rescuers run bound pools' work (the kernel's [`super::RescuerAffinity::PoolCpu`] by
    /// default).
    pub fn set_rescuer_affinity(&self, affinity: super::RescuerAffinity) {
        self.workqueues.state.lock().rescuer_affinity = affinity;
    }

    /// Wakes whoever can run pool `index`: its CPU when associated, every online CPU otherwise.
    pub(crate) fn wake_pool(&self, index: usize) {
        match self.pool_id(index) {
            PoolId::Cpu(c) if !self.workqueues.state.lock().pools[index].disassociated => {
                self.wake(c)
            }
            _ => {
                for c in self.online_cpus() {
                    self.wake(c);
                }
            }
        }
    }

    /// A worker of `pool` runs one work item on `cx`'s CPU (`worker_thread()` →
    /// `process_one_work()`), in task context. Returns what ran, or `None` if the pool has
    /// nothing a worker may run now (empty, busy or congested).
    pub fn run_worker(&self, pool: PoolId, cx: &Cpu) -> Option<WorkExecution> {
        self.process_one_work(pool, cx, false)
    }

    /// The rescuer of the `WQ_MEM_RECLAIM` workqueues runs one of their items from a congested
    /// `pool` on `cx`'s CPU. `worker_attach_to_pool()` binds it to the pool's CPU while the pool is
    /// associated, so `cx` must be that CPU then (else the kernel's WARN fires); a disassociated
    /// pool's rescuer runs unbound.
    pub fn run_rescuer(&self, pool: PoolId, cx: &Cpu) -> Option<WorkExecution> {
        self.process_one_work(pool, cx, true)
    }

    /// `process_one_work()` (kernel/workqueue.c): takes the next item a worker (or the rescuer)
    /// of `pool_id` may run, runs its function on `cx` as the worker's task, and marks it done.
    fn process_one_work(&self, pool_id: PoolId, cx: &Cpu, rescuer: bool) -> Option<WorkExecution> {
        let p = self.pool_index(pool_id)?;
        let (exec, func, worker) = self.assign_work(p, pool_id, cx, rescuer)?;
        self.check_worker_context(&exec, cx);
        let saved = cx.current();
        // The worker is switched in: whatever ran on this CPU was preempted by it (the idle task
        // just yields, runnable). A runtime that already made the worker `current` switched it
        // in itself.
        let switches = saved != worker;
        if switches {
            cx.trace_sched_switch(
                &worker,
                if saved.is_idle() {
                    PrevState::Running
                } else {
                    PrevState::Preempted
                },
            );
            cx.set_current(worker.clone());
        }
        crate::ktrace!(
            cx,
            target: "workqueue",
            "workqueue_execute_start",
            "work struct {}: function {}",
            crate::kernel::work_ptr(exec.work.id.0),
            exec.function
        );
        func(cx, &exec.work);
        crate::ktrace!(
            cx,
            target: "workqueue",
            "workqueue_execute_end",
            "work struct {}: function {}",
            crate::kernel::work_ptr(exec.work.id.0),
            exec.function
        );
        // The worker returns to worker_thread(), which schedules if asked to: TIF_NEED_RESCHED is
        // consumed here.
        cx.set_need_resched(false);
        let more = {
            let mut st = self.workqueues.state.lock();
            st.pools[p].busy = false;
            let e = &mut st.works[exec.work.id.0];
            e.running = None;
            e.completed += 1;
            !st.pools[p].worklist.is_empty()
        };
        // biosim runs one item per call and gives the CPU back: with more work queued the worker
        // is still runnable (preempted), else it sleeps in worker_thread() (TASK_IDLE).
        if switches {
            cx.trace_sched_switch(
                &saved,
                if more {
                    PrevState::Preempted
                } else {
                    PrevState::Idle
                },
            );
            cx.set_current(saved);
        }
        if more {
            self.wake_pool(p);
        }
        Some(exec)
    }

    /// The start of `process_one_work()`, with the choice `worker_thread()` (the first item) or
    /// `rescuer_thread()` (the first item of a `WQ_MEM_RECLAIM` workqueue) makes: under the lock,
    /// takes the item off pool `p`'s worklist, marks the pool busy and the work running, and clears
    /// PENDING (`set_work_pool_and_clear_pending()`). `None` if nothing may run now.
    fn assign_work(
        &self,
        p: usize,
        pool_id: PoolId,
        cx: &Cpu,
        rescuer: bool,
    ) -> Option<(WorkExecution, UntrackedArc<super::WorkFn>, Task)> {
        let mut guard = self.workqueues.state.lock();
        let st = &mut *guard;
        let pool = &st.pools[p];
        if pool.busy || (pool.congested != rescuer) {
            return None;
        }
        let pos = if rescuer {
            pool.worklist
                .iter()
                .position(|q| st.wqs[q.wq].flags.contains(WQ_MEM_RECLAIM))?
        } else if pool.worklist.is_empty() {
            return None;
        } else {
            0
        };
        let disassociated = pool.disassociated;
        let q = st.pools[p]
            .worklist
            .remove(pos)
            .expect("position is in range");
        st.pools[p].busy = true;
        let e = &mut st.works[q.work.0];
        // set_work_pool_and_clear_pending(): PENDING clears before the function runs, so the
        // work may be queued again while it runs.
        e.queued = None;
        e.pending = false;
        e.running = Some(Running {
            pool: p,
            wq: q.wq,
            ctx: cx.ctx_id(),
        });
        let exec = WorkExecution {
            work: WorkStruct { id: q.work },
            function: e.name,
            workqueue: st.wqs[q.wq].name.clone(),
            pool: pool_id,
            ran_on: cx.id(),
            disassociated,
            rescuer,
        };
        let func = UntrackedArc::clone(&e.func);
        let worker = self.pool_worker_task_locked(st, p, q.wq, rescuer);
        Some((exec, func, worker))
    }

    /// `process_one_work()`'s `WARN_ON_ONCE()` for an associated pool's work on another CPU, and
    /// biosim's check that a worker runs in plain task context.
    fn check_worker_context(&self, exec: &WorkExecution, cx: &Cpu) {
        if let PoolId::Cpu(c) = exec.pool {
            if !exec.disassociated && c != cx.id() {
                self.warn_once(
                    cx,
                    "process_one_work",
                    "kernel/workqueue.c: process_one_work: WARN_ON_ONCE(!(pool->flags & POOL_DISASSOCIATED) && raw_smp_processor_id() != pool->cpu)",
                );
            }
        }
        if !cx.may_sleep() {
            cx.report(
                ReportKind::Warn,
                format!(
                    "WARNING: a worker ran {} outside plain task context",
                    exec.function
                ),
            );
        }
    }

    /// The task that runs pool `p`'s work of workqueue `wq`: `kworker/N:1` of a per-CPU pool
    /// (`kworker/N:1H` for a `WQ_HIGHPRI` workqueue, whose work the kernel runs on the CPU's
    /// highpri pool: biosim keeps one pool per CPU and names the worker after the pool the kernel
    /// would use), `kworker/uM:1` of the unbound one, or the workqueue's rescuer, named after it
    /// (`rescuer->task` is `kthread_create(..., "%s", wq->name)`), pid 600 + the workqueue's index.
    pub(crate) fn pool_worker_task_locked(
        &self,
        st: &super::WqState,
        p: usize,
        wq: usize,
        rescuer: bool,
    ) -> Task {
        let info = &st.wqs[wq];
        if rescuer {
            return Task {
                pid: 600 + wq as u32,
                comm: info.name.clone(),
            };
        }
        self.pool_worker_task(p, info)
    }

    /// The normal worker of pool `p` for work of workqueue `wq` (see
    /// [`Kernel::pool_worker_task_locked`]).
    pub(crate) fn pool_worker_task(&self, p: usize, wq: &super::WqInfo) -> Task {
        match self.pool_id(p) {
            PoolId::Cpu(c) if wq.flags.contains(super::WQ_HIGHPRI) => Task::kworker_highpri(c),
            PoolId::Cpu(c) => Task::kworker(c),
            PoolId::Unbound => Task::kworker_unbound(self.nr_cpus(), 1),
        }
    }

    /// `workqueue_offline_cpu()` → `unbind_workers()`: the CPU's pool becomes disassociated.
    fn unbind_workers(&self, cpu: CpuId) {
        // The callback only runs for CPUs of the machine.
        let Some(i) = self.pool_index(PoolId::Cpu(cpu)) else {
            return;
        };
        self.workqueues.state.lock().pools[i].disassociated = true;
        tracing::debug!(target: "workqueue", cpu = cpu.0, "biosim_unbind_workers: pool of CPU{} is disassociated", cpu.0);
        self.wake_pool(i);
    }

    /// `workqueue_online_cpu()` → `rebind_workers()`.
    fn rebind_workers(&self, cpu: CpuId) {
        let Some(i) = self.pool_index(PoolId::Cpu(cpu)) else {
            return;
        };
        self.workqueues.state.lock().pools[i].disassociated = false;
        tracing::debug!(target: "workqueue", cpu = cpu.0, "biosim_rebind_workers: pool of CPU{} is bound again", cpu.0);
        self.wake(cpu);
    }
}

/// Registers `workqueue:prepare` (`CPUHP_WORKQUEUE_PREP`) and `workqueue:online`
/// (`CPUHP_AP_WORKQUEUE_ONLINE`), as the kernel's static hotplug table does, and marks the pools
/// of CPUs that are not up at boot disassociated (pools start `POOL_DISASSOCIATED` until
/// `workqueue_online_cpu()` binds them).
pub(crate) fn register_hotplug_states(kernel: &Kernel) {
    {
        let mut st = kernel.workqueues.state.lock();
        for c in kernel.possible_cpus() {
            st.pools[c.index()].disassociated = !kernel.cpu_online(c);
        }
    }
    let prepare: Callback<Cpu> = UntrackedArc::new(|_cx: &Cpu, _inv: &Invocation| Ok(()));
    let online: Callback<Cpu> =
        UntrackedArc::new(|cx: &Cpu, inv: &Invocation| -> Result<(), Errno> {
            cx.kernel().rebind_workers(inv.cpu);
            Ok(())
        });
    let offline: Callback<Cpu> =
        UntrackedArc::new(|cx: &Cpu, inv: &Invocation| -> Result<(), Errno> {
            cx.kernel().unbind_workers(inv.cpu);
            Ok(())
        });
    let mut hp = kernel.hotplug();
    hp.cpuhp_setup_state_nocalls(
        CPUHP_WORKQUEUE_PREP,
        "workqueue:prepare",
        Some(prepare),
        None,
    )
    .expect("the default state table has CPUHP_WORKQUEUE_PREP");
    hp.cpuhp_setup_state_nocalls(
        CPUHP_AP_WORKQUEUE_ONLINE,
        "workqueue:online",
        Some(online),
        Some(offline),
    )
    .expect("the default state table has CPUHP_AP_WORKQUEUE_ONLINE");
}
