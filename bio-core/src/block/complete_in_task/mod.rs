//! Task-context bio completion: the infrastructure of "block: add task-context bio completion
//! infrastructure" (block/bio.c, include/linux/bio.h), in every posted version.
//!
//! - `BIO_COMPLETE_IN_TASK` in [`bio_endio`](crate::block::bio_endio): after the chain walk, a
//!   flagged bio whose completion runs where [`bio_in_atomic`] is true is handed to
//!   [`__bio_complete_in_task`] instead of calling `bi_end_io` there.
//! - [`bio_complete_in_task`]: the dynamic form a `bi_end_io` calls itself.
//! - The per-CPU `bio_complete_batch` ([`batch`]), drained by `bio_complete_work_fn` on the
//!   `bio_complete` workqueue (`WQ_MEM_RECLAIM | WQ_PERCPU`).
//! - The init protocol and the three hotplug callbacks ([`cpuhp`]): online/down_prep at
//!   `CPUHP_AP_ONLINE_DYN`, dead at `CPUHP_BP_PREPARE_DYN`, registered with
//!   `cpuhp_setup_state_nocalls()`.
//!
//! The code is a loadable module ([`module`]: the seam `bio_endio()` calls through). Which one runs
//! is a [`Variant`]: a preset of knobs of the posted module ([`posted`]: `v5`, `v6`, `v6-review`,
//! `v7` and their twins), or a reviewer's own module ([`Variant::module`]).

mod batch;
mod cpuhp;
pub mod module;
mod posted;
pub mod v3;
mod variant;

pub use module::{
    __bio_complete_in_task, bi_end_io, bio_complete_in_task, bio_complete_init, BatchCallback,
    BatcherObserver, BioCompleteBatcher, BioCompleteModule, BioCompleteOps, ModuleRef,
    LIVELOCK_PASSES, LIVELOCK_REPORT,
};
pub use variant::{register_module, Knob, KnobValues, ListKind, Variant, WorkKind};

use super::{Bio, BioEndIo};
use crate::kernel::Cpu;
use crate::workqueue::WqError;

/// Why the batcher could not be initialised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InitError {
    /// `init_bio()` already ran on this kernel.
    #[error("the task-completion batcher is already initialised on this kernel")]
    AlreadyInitialised,
    /// `alloc_workqueue()` failed (the kernel panics: "bio: can't allocate bio_complete workqueue").
    #[error("bio: can't allocate bio_complete workqueue: {0}")]
    Workqueue(#[from] WqError),
    /// A hotplug state could not be registered (`cpuhp_setup_state_nocalls()` failed).
    #[error("cpuhp_setup_state_nocalls({state}) failed")]
    Hotplug {
        /// The state's name.
        state: &'static str,
        /// The hotplug machine's error.
        #[source]
        error: ::hotplug::HotplugError,
    },
}

/// What [`bio_complete_in_task`] did with the bio.
#[derive(Debug)]
pub enum InTask {
    /// Offloaded to the worker (the kernel's `true`): the caller must not touch the bio again.
    Deferred,
    /// Not offloaded (`false`): the caller runs its completion here, with the bio handed back.
    Run(Box<Bio>),
}

/// A `bi_end_io` that calls [`bio_complete_in_task`] first and runs `f` only where it may sleep:
/// the pattern of the series' dynamic users (fserror reporting).
pub fn end_io_in_task(
    name: &'static str,
    f: impl Fn(Box<Bio>, &Cpu) + Send + Sync + 'static,
) -> BioEndIo {
    BioEndIo::new(name, move |bio, cx| {
        if let InTask::Run(bio) = bio_complete_in_task(bio, cx) {
            f(bio, cx);
        }
    })
}
