//! `struct task_struct` as far as traces and splats print it (`include/linux/sched.h`: `pid`,
//! `comm`, `prio`), and the one place that names the simulated tasks bio-core runs code as.
//!
//! Names and pids follow the ftrace interface of issue 10 (deterministic, one constructor per kind):
//!
//! | task | comm | pid |
//! |---|---|---|
//! | idle (the swapper) | `swapper/N` (ftrace prints pid 0 as `<idle>`) | 0 |
//! | bound per-CPU pool worker | `kworker/N:1` | 300 + N |
//! | its highpri pool's worker | `kworker/N:1H` | 400 + N |
//! | unbound pool worker K | `kworker/uM:K` (M = 2 * nr_cpus) | 500 + K |
//! | the I/O submitter of CPU N | `biosim/N` | 1000 + N |
//! | the irq thread of IRQ N (`irq_thread()`) | `irq/N-NAME` | 700 + N |
//!
//! The hotplug threads (`cpuhp/N`, the BP's `kworker/C:0`, the `biosim` writer) are named by the
//! hotplug crate, which owns them.

use super::CpuId;

/// `MAX_RT_PRIO` + `NICE_TO_PRIO(0)`: the `prio` of a `SCHED_NORMAL` task at nice 0, as
/// `sched_switch`/`sched_wakeup` print it.
pub const DEFAULT_PRIO: i32 = 120;

/// `prio` at nice -20: the highpri kworkers (`alloc_workqueue(WQ_HIGHPRI)` pools, `HIGHPRI_NICE_LEVEL`
/// = `MIN_NICE`).
pub const HIGHPRI_PRIO: i32 = 100;

/// The task a CPU is running: `current`'s pid and comm, as a BUG report or a trace line prints
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// `current->pid`.
    pub pid: u32,
    /// `current->comm`, e.g. `kworker/0:1H` or `irq/54-ufshcd`.
    pub comm: String,
}

impl Task {
    /// The idle task of `cpu` (`init_idle()`: comm `swapper/N`, pid 0). ftrace prints it as
    /// `<idle>-0` (`trace_find_cmdline()` special-cases pid 0).
    pub fn idle(cpu: CpuId) -> Self {
        Self {
            pid: 0,
            comm: format!("swapper/{}", cpu.0),
        }
    }

    /// The worker of `cpu`'s bound normal-priority pool: `kworker/N:1`, pid 300 + N.
    pub fn kworker(cpu: CpuId) -> Self {
        Self {
            pid: 300 + cpu.0,
            comm: format!("kworker/{}:1", cpu.0),
        }
    }

    /// The worker of `cpu`'s highpri pool: `kworker/N:1H`, pid 400 + N.
    pub fn kworker_highpri(cpu: CpuId) -> Self {
        Self {
            pid: 400 + cpu.0,
            comm: format!("kworker/{}:1H", cpu.0),
        }
    }

    /// Worker `k` of the unbound pool on a machine of `nr_cpus` CPUs: `kworker/uM:K` with
    /// M = 4 * nr_cpus, the first unbound pool's id: since Linux 6.9 `workqueue_init_early()`
    /// first creates 2 BH and 2 normal pools per possible CPU (`kworker/u8:3` on 2 CPUs),
    /// pid 500 + K.
    pub fn kworker_unbound(nr_cpus: u32, k: u32) -> Self {
        Self {
            pid: 500 + k,
            comm: format!("kworker/u{}:{k}", 4 * nr_cpus),
        }
    }

    /// The I/O submitter of `cpu` (the model's `dd`/`fio`): `biosim/N`, pid 1000 + N. A fresh
    /// context's default `current`.
    pub fn submitter(cpu: CpuId) -> Self {
        Self {
            pid: 1000 + cpu.0,
            comm: format!("biosim/{}", cpu.0),
        }
    }

    /// The irq thread of IRQ `nr` (`setup_irq_thread()`: `kthread_create(irq_thread, ...,
    /// "irq/%d-%s", irq, action->name)`), pid 700 + `nr`: where a threaded (or, on PREEMPT_RT,
    /// force-threaded) handler runs.
    pub fn irq_thread(nr: u32, name: &str) -> Self {
        Self {
            pid: 700 + nr,
            comm: format!("irq/{nr}-{name}"),
        }
    }

    /// Whether this is an idle task (`is_idle_task()`: pid 0).
    pub fn is_idle(&self) -> bool {
        self.pid == 0
    }

    /// `p->prio` as the sched tracepoints print it: 100 for a highpri kworker (nice -20), 120
    /// (nice 0) for every other simulated task; the idle task prints 120 too (`MAX_PRIO - 20`).
    pub fn prio(&self) -> i32 {
        if self.comm.starts_with("kworker/") && self.comm.ends_with('H') {
            HIGHPRI_PRIO
        } else {
            DEFAULT_PRIO
        }
    }

    /// The `TASK-PID` column of a trace line's comm: `<idle>` for pid 0, else the comm.
    pub fn trace_comm(&self) -> &str {
        if self.is_idle() {
            "<idle>"
        } else {
            &self.comm
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `replace_current()` switches `current` and hands back the task it was, as `current()`
    /// then `set_current()` do.
    #[test]
    fn replace_current_returns_the_task_switched_out() {
        let k = crate::Kernel::new(crate::KernelConfig::default(), 2).unwrap();
        let cx = k.cpu(CpuId(1)).unwrap();
        let before = cx.current();
        let was = cx.replace_current(Task::kworker(CpuId(1)));
        assert_eq!(was, before);
        assert_eq!(cx.current(), Task::kworker(CpuId(1)));
        assert_eq!(cx.replace_current(was.clone()), Task::kworker(CpuId(1)));
        assert_eq!(cx.current(), was);
    }

    #[test]
    fn constructors_follow_the_task_table() {
        assert_eq!(
            (Task::idle(CpuId(1)).pid, Task::idle(CpuId(1)).comm.as_str()),
            (0, "swapper/1")
        );
        assert_eq!(Task::idle(CpuId(1)).trace_comm(), "<idle>");
        assert_eq!(
            Task::kworker(CpuId(1)),
            Task {
                pid: 301,
                comm: "kworker/1:1".into()
            }
        );
        assert_eq!(
            Task::kworker_highpri(CpuId(0)),
            Task {
                pid: 400,
                comm: "kworker/0:1H".into()
            }
        );
        assert_eq!(
            Task::kworker_unbound(2, 3),
            Task {
                pid: 503,
                comm: "kworker/u8:3".into()
            }
        );
        assert_eq!(
            Task::submitter(CpuId(3)),
            Task {
                pid: 1003,
                comm: "biosim/3".into()
            }
        );
        assert_eq!(Task::submitter(CpuId(3)).trace_comm(), "biosim/3");
    }

    #[test]
    fn highpri_kworkers_print_prio_100() {
        assert_eq!(Task::kworker_highpri(CpuId(0)).prio(), 100);
        assert_eq!(Task::kworker(CpuId(0)).prio(), 120);
        assert_eq!(Task::submitter(CpuId(0)).prio(), 120);
        assert_eq!(Task::idle(CpuId(0)).prio(), 120);
    }
}

/// `PF_MEMALLOC` (`include/linux/sched.h`): set while the task reclaims memory
/// (`memalloc_noreclaim_save()`); its allocations do not enter reclaim again, so lockdep's
/// `fs_reclaim` map is not taken for them (`__need_reclaim()`).
pub const PF_MEMALLOC: u32 = 0x0000_0800;
/// `PF_MEMALLOC_NOFS` (`include/linux/sched.h`): set by `memalloc_nofs_save()`; allocations of
/// the task act as `GFP_NOFS`.
pub const PF_MEMALLOC_NOFS: u32 = 0x0004_0000;
/// `PF_MEMALLOC_NOIO` (`include/linux/sched.h`): set by `memalloc_noio_save()`; allocations of
/// the task act as `GFP_NOIO`.
pub const PF_MEMALLOC_NOIO: u32 = 0x0008_0000;

/// What `current` carries for the submission path beyond its name (`struct task_struct`):
/// `flags` (the memalloc scopes), `journal_info`, and the block layer's per-task state that the
/// block and fs modules add here (`bio_list`, `plug`, freeze protection held).
///
/// It lives on the [`super::Cpu`] flow that runs the task, like `held_locks`: only that flow
/// touches it, so plain cells do.
#[derive(Debug, Default)]
pub struct TaskState {
    /// `current->flags`, the `PF_MEMALLOC_*` bits only.
    pub pf_flags: std::cell::Cell<u32>,
    /// `current->journal_info`: a filesystem's running transaction handle (ext4's `handle_t`,
    /// XFS's transaction), named; `None` outside one.
    pub journal_info: std::cell::Cell<Option<&'static str>>,
    /// `current->fail_nth` (`/proc/<pid>/fail-nth`): the fault-injection check that brings it
    /// from 1 to 0 fails (`should_fail_ex()`); 0 is off.
    pub fail_nth: std::cell::Cell<u32>,
    /// The freeze protection the task holds for lockdep (`sb_start_write()` and friends,
    /// `fs/super_block.rs`): superblock, level and the lockdep acquisition, innermost last.
    /// A `kiocb_start_write()` drops its entry (`__sb_writers_release()`).
    pub sb_writers: std::cell::RefCell<Vec<crate::fs::super_block::SbWritersHeld>>,
    /// `current->bio_list`: the two on-stack lists of `__submit_bio_noacct()` while a bio is
    /// being submitted (`None` outside `submit_bio_noacct()`); a bio submitted meanwhile is added
    /// to list 0 and handled after the current one (block/blk-core.c).
    pub bio_list: std::cell::RefCell<Option<crate::block::blk_core::CurrentBioList>>,
    /// `current->plug`: the `struct blk_plug` between `blk_start_plug()` and `blk_finish_plug()`
    /// (`None` when the task has none), flushed by `schedule()` (block/blk_plug.rs).
    pub plug: std::cell::RefCell<Option<crate::block::blk_plug::BlkPlug>>,
    /// The storage of the task's on-stack `struct blk_plug` between plugs: the kernel's plug
    /// and its `rq_list` (linked through the requests) allocate nothing, so the model keeps the
    /// list's buffer, empty, from one `blk_finish_plug()` to the next `blk_start_plug()`
    /// (block/blk_plug.rs). Not a kernel field.
    pub(crate) plug_storage:
        std::cell::RefCell<std::collections::VecDeque<crate::block::blk_mq::Rq>>,
}

/// `memalloc_noio_save()` (`include/linux/sched/mm.h`): sets `PF_MEMALLOC_NOIO` and returns the
/// previous value for [`memalloc_noio_restore`].
pub fn memalloc_noio_save(cx: &super::Cpu) -> u32 {
    let t = cx.task_state();
    let old = t.pf_flags.get();
    t.pf_flags.set(old | PF_MEMALLOC_NOIO);
    old & PF_MEMALLOC_NOIO
}

/// `memalloc_noio_restore()`: puts back the `PF_MEMALLOC_NOIO` bit [`memalloc_noio_save`] saw.
pub fn memalloc_noio_restore(cx: &super::Cpu, flags: u32) {
    let t = cx.task_state();
    t.pf_flags
        .set((t.pf_flags.get() & !PF_MEMALLOC_NOIO) | (flags & PF_MEMALLOC_NOIO));
}

/// `memalloc_nofs_save()`: sets `PF_MEMALLOC_NOFS` and returns the previous value.
pub fn memalloc_nofs_save(cx: &super::Cpu) -> u32 {
    let t = cx.task_state();
    let old = t.pf_flags.get();
    t.pf_flags.set(old | PF_MEMALLOC_NOFS);
    old & PF_MEMALLOC_NOFS
}

/// `memalloc_nofs_restore()`.
pub fn memalloc_nofs_restore(cx: &super::Cpu, flags: u32) {
    let t = cx.task_state();
    t.pf_flags
        .set((t.pf_flags.get() & !PF_MEMALLOC_NOFS) | (flags & PF_MEMALLOC_NOFS));
}

/// `memalloc_noreclaim_save()` (`include/linux/sched/mm.h`): sets `PF_MEMALLOC` (the task is
/// reclaiming) and returns the previous value for [`memalloc_noreclaim_restore`].
pub fn memalloc_noreclaim_save(cx: &super::Cpu) -> u32 {
    let t = cx.task_state();
    let old = t.pf_flags.get();
    t.pf_flags.set(old | PF_MEMALLOC);
    old & PF_MEMALLOC
}

/// `memalloc_noreclaim_restore()`.
pub fn memalloc_noreclaim_restore(cx: &super::Cpu, flags: u32) {
    let t = cx.task_state();
    t.pf_flags
        .set((t.pf_flags.get() & !PF_MEMALLOC) | (flags & PF_MEMALLOC));
}
