//! Workqueues: `kernel/workqueue.c` and `include/linux/workqueue.h`.
//!
//! - [`flags`]: `WQ_*` flags and `alloc_workqueue()` validation.
//! - [`work`]: `work_struct`/`delayed_work` and the queue/cancel/disable/enable/flush family, with
//!   the return values and rules of the kernel (PENDING bit, counted disable, enable that never
//!   requeues, `mod_delayed_work_on()` re-arming, non-reentrancy).
//! - [`pool`]: per-CPU worker pools and the unbound pool, `process_one_work()`, disassociation
//!   when `workqueue:online` is torn down, and the `WQ_MEM_RECLAIM` rescuer.
//!
//! All workqueue state sits behind one lock (the kernel spreads it over `pool->lock` and the
//! work's `data` word; one lock gives the same observable rules with far fewer places to get
//! wrong). Work functions run with no lock held. The timer lock may be taken under this one.

mod flags;
mod pool;
mod work;

pub use flags::{WqError, WqFlags, WQ_HIGHPRI, WQ_MEM_RECLAIM, WQ_PERCPU, WQ_UNBOUND};
pub(crate) use pool::register_hotplug_states;
pub use pool::{PoolId, PoolInfo, WorkExecution};

pub use work::{
    DelayedWork, WorkFn, WorkId, WorkStruct, WORK_CPU_UNBOUND, WORK_CPU_UNBOUND_NR,
    WORK_OFFQ_DISABLE_MAX,
};

use crate::kernel::CpuId;
use crate::sync::{Mutex, UntrackedArc};
use std::collections::VecDeque;
use std::fmt;

/// `struct workqueue_struct`: a handle to an allocated workqueue.
#[derive(Clone, PartialEq, Eq)]
pub struct Workqueue {
    pub(crate) id: usize,
    pub(crate) inner: UntrackedArc<WqInfo>,
}

impl fmt::Debug for Workqueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Workqueue({} {:?})", self.inner.name, self.inner.flags)
    }
}

impl Workqueue {
    /// The workqueue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Its flags.
    pub fn flags(&self) -> WqFlags {
        self.inner.flags
    }
}

/// What `alloc_workqueue()` recorded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct WqInfo {
    pub(crate) name: String,
    pub(crate) flags: WqFlags,
    pub(crate) max_active: u32,
}

/// One queued item: the work and the workqueue it was queued on (`pool_workqueue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Queued {
    pub(crate) work: WorkId,
    pub(crate) wq: usize,
}

/// A worker pool (`struct worker_pool`): per-CPU ones (`pool->cpu >= 0`) and one unbound pool.
#[derive(Debug)]
pub(crate) struct Pool {
    pub(crate) cpu: Option<CpuId>,
    /// `POOL_DISASSOCIATED`: its CPU's `workqueue:online` state was torn down; its work runs
    /// unbound until `rebind_workers()`.
    pub(crate) disassociated: bool,
    pub(crate) worklist: VecDeque<Queued>,
    /// The scenario knob for pool congestion: no new worker can be created, so only a rescuer can
    /// make progress (the `pool_mayday_timeout()` path).
    pub(crate) congested: bool,
    /// An execution is in progress (biosim runs one worker per pool at a time).
    pub(crate) busy: bool,
}

/// The workqueue subsystem of one kernel.
pub(crate) struct Workqueues {
    pub(crate) state: Mutex<WqState>,
}

impl fmt::Debug for Workqueues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Workqueues")
    }
}

pub(crate) struct WqState {
    pub(crate) wqs: Vec<UntrackedArc<WqInfo>>,
    pub(crate) works: Vec<work::WorkEntry>,
    /// `nr_cpus` per-CPU pools, then the unbound pool.
    pub(crate) pools: Vec<Pool>,
    /// Where the rescuer runs a bound pool's work.
    pub(crate) rescuer_affinity: RescuerAffinity,
}

/// Where a `WQ_MEM_RECLAIM` rescuer runs the work of an associated per-CPU pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RescuerAffinity {
    /// The kernel: `worker_attach_to_pool()` binds the rescuer to the pool's CPU.
    #[default]
    PoolCpu,
    /// What the automated review of v6 assumed ("this rescuer thread executes unbound"): any
    /// online CPU. Not the kernel's behaviour; the machine knob of finding 5's buggy twin.
    Unbound,
}

impl Workqueues {
    pub(crate) fn new(nr_cpus: u32) -> Self {
        let mut pools: Vec<Pool> = (0..nr_cpus)
            .map(|c| Pool {
                cpu: Some(CpuId(c)),
                disassociated: false,
                worklist: VecDeque::new(),
                congested: false,
                busy: false,
            })
            .collect();
        pools.push(Pool {
            cpu: None,
            disassociated: false,
            worklist: VecDeque::new(),
            congested: false,
            busy: false,
        });
        Self {
            state: Mutex::new(WqState {
                wqs: Vec::new(),
                works: Vec::new(),
                pools,
                rescuer_affinity: RescuerAffinity::PoolCpu,
            }),
        }
    }
}
