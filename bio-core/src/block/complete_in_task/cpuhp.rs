//! The batcher's CPU-hotplug protocol, modelled on mm/vmstat.c:
//!
//! - `bio_complete_batch_cpu_online()` (startup at `CPUHP_AP_ONLINE_DYN`, on the CPU): enables the
//!   work; the review's fix (v6-review, v7) also requeues it when the list is not empty.
//! - `bio_complete_batch_cpu_down_prep()` (teardown at `CPUHP_AP_ONLINE_DYN`, on the CPU while it
//!   is still online and its kworkers still bound): `disable_[delayed_]work_sync()`, so the work
//!   cannot run on an unbound worker after `workqueue:online` is torn down.
//! - `bio_complete_batch_cpu_dead()` (teardown at `CPUHP_BP_PREPARE_DYN`, on a control CPU): drains
//!   the bios completed between `down_prep` and the CPU's death, calling `bi_end_io` directly.
//! - At init, the work of CPUs offline then is disabled, so the online callback's enable balances.

use super::batch::{BatchWork, BioCompleteBatch};
use super::{call_end_io, BatchCallback, InitError};
use crate::kernel::{Cpu, Kernel};
use crate::sync::UntrackedArc;
use hotplug::{Callback, Errno, Invocation, StateId, CPUHP_AP_ONLINE_DYN, CPUHP_BP_PREPARE_DYN};

/// `disable_[delayed_]work_sync(&batch->work)`.
pub(super) fn disable_sync(kernel: &Kernel, batch: &BioCompleteBatch, cx: &Cpu) {
    match batch.work {
        BatchWork::Plain(w) => {
            kernel.disable_work_sync(w, cx);
        }
        BatchWork::Delayed(d, _) => {
            kernel.disable_delayed_work_sync(d, cx);
        }
    }
}

/// `bio_complete_batch_cpu_online()` (block/bio.c, startup at `CPUHP_AP_ONLINE_DYN`, on the CPU):
/// enables the batch's work; with the review's fix (`requeue_on_online`) also requeues it when
/// bios arrived while it was disabled.
fn bio_complete_batch_cpu_online(cx: &Cpu, inv: &Invocation) -> Result<(), Errno> {
    let Some(b) = cx.kernel().bio_complete() else {
        return Ok(());
    };
    if let Some(o) = &b.observer {
        o.hotplug(BatchCallback::Online, inv.cpu, cx);
    }
    let batch = b.batch(inv.cpu);
    match batch.work {
        BatchWork::Plain(w) => {
            cx.kernel().enable_work(w, cx);
        }
        BatchWork::Delayed(d, _) => {
            cx.kernel().enable_delayed_work(d, cx);
        }
    }
    // The review's fix for finding 1: bios that arrived while the work was disabled.
    if b.variant.requeue_on_online && !b.list_empty(batch, cx, true) {
        b.schedule(batch, cx, true);
    }
    Ok(())
}

/// `bio_complete_batch_cpu_down_prep()` (block/bio.c, teardown at `CPUHP_AP_ONLINE_DYN`, on the
/// CPU while its kworkers are still bound): `disable_[delayed_]work_sync()`.
fn bio_complete_batch_cpu_down_prep(cx: &Cpu, inv: &Invocation) -> Result<(), Errno> {
    let Some(b) = cx.kernel().bio_complete() else {
        return Ok(());
    };
    if let Some(o) = &b.observer {
        o.hotplug(BatchCallback::DownPrep, inv.cpu, cx);
    }
    if cfg!(feature = "bug-down-prep-no-sync") {
        // Twin: no wait for a running worker, which then outlives down_prep.
        match b.batch(inv.cpu).work {
            BatchWork::Plain(w) => cx.kernel().disable_work(w, cx),
            BatchWork::Delayed(d, _) => cx.kernel().disable_delayed_work(d, cx),
        };
        return Ok(());
    }
    disable_sync(cx.kernel(), b.batch(inv.cpu), cx);
    Ok(())
}

/// `bio_complete_batch_cpu_dead()` (block/bio.c, teardown at `CPUHP_BP_PREPARE_DYN`, on a control
/// CPU): drains the dead CPU's batch, calling `bi_end_io` directly.
fn bio_complete_batch_cpu_dead(cx: &Cpu, inv: &Invocation) -> Result<(), Errno> {
    let Some(b) = cx.kernel().bio_complete() else {
        return Ok(());
    };
    if let Some(o) = &b.observer {
        o.hotplug(BatchCallback::Dead, inv.cpu, cx);
    }
    if !b.variant.dead_drains {
        return Ok(());
    }
    let mut list = b.batch(inv.cpu).take_unlocked(&b.variant);
    let n = list.size();
    tracing::trace!(target: "block", tracepoint = "biosim_bio_complete_dead_drain", cpu = cx.id().0, "biosim_bio_complete_dead_drain: bio_complete_batch_cpu_dead: draining {n} bios of dead CPU{}", inv.cpu.0);
    while let Some(bio) = list.pop() {
        call_end_io(
            bio,
            cx,
            "bio_complete_batch_cpu_dead",
            b.variant.end_io_null_check,
        );
    }
    Ok(())
}

/// Registers `block/bio:complete:online` and `block/bio:complete:dead` with
/// `cpuhp_setup_state_nocalls()`, returning the dynamic states they got.
pub(super) fn register(kernel: &Kernel) -> Result<(StateId, StateId), InitError> {
    let mut hp = kernel.hotplug();
    let on: Callback<Cpu> = UntrackedArc::new(bio_complete_batch_cpu_online);
    let prep: Callback<Cpu> = UntrackedArc::new(bio_complete_batch_cpu_down_prep);
    let d: Callback<Cpu> = UntrackedArc::new(bio_complete_batch_cpu_dead);
    let a = hp
        .cpuhp_setup_state_nocalls(
            CPUHP_AP_ONLINE_DYN,
            "block/bio:complete:online",
            Some(on),
            Some(prep),
        )
        .map_err(|error| InitError::Hotplug {
            state: "block/bio:complete:online",
            error,
        })?;
    let b = hp
        .cpuhp_setup_state_nocalls(
            CPUHP_BP_PREPARE_DYN,
            "block/bio:complete:dead",
            None,
            Some(d),
        )
        .map_err(|error| InitError::Hotplug {
            state: "block/bio:complete:dead",
            error,
        })?;
    // The seed patches' function names, which `cpuhp_enter` prints (%ps); the same in every
    // variant.
    hp.set_callback_fns(
        a,
        Some("bio_complete_batch_cpu_online"),
        Some("bio_complete_batch_cpu_down_prep"),
    )
    .and_then(|()| hp.set_callback_fns(b, None, Some("bio_complete_batch_cpu_dead")))
    .map_err(|error| InitError::Hotplug {
        state: "block/bio:complete:online",
        error,
    })?;
    Ok((a, b))
}
