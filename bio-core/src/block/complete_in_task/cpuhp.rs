//! The posted module's CPU-hotplug protocol, modelled on mm/vmstat.c:
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
use super::module::{kapi, CpuhpCallback, ModuleInit};
use super::posted::Posted;
use super::InitError;
use crate::kernel::{Cpu, CpuId};
use crate::sync::UntrackedArc;
use hotplug::{Errno, CPUHP_AP_ONLINE_DYN, CPUHP_BP_PREPARE_DYN};

/// `disable_[delayed_]work_sync(&batch->work)`.
pub(super) fn disable_sync(batch: &BioCompleteBatch, cx: &Cpu) {
    match batch.work {
        BatchWork::Plain(w) => {
            kapi::disable_work_sync(w, cx);
        }
        BatchWork::Delayed(d, _) => {
            kapi::disable_delayed_work_sync(d, cx);
        }
    }
}

/// `bio_complete_batch_cpu_online()` (block/bio.c, startup at `CPUHP_AP_ONLINE_DYN`, on the CPU):
/// enables the batch's work; with the review's fix (`requeue_on_online`) also requeues it when
/// bios arrived while it was disabled.
fn bio_complete_batch_cpu_online(p: &Posted, cx: &Cpu, cpu: CpuId) -> Result<(), Errno> {
    let batch = p.batch(cpu);
    match batch.work {
        BatchWork::Plain(w) => {
            kapi::enable_work(w, cx);
        }
        BatchWork::Delayed(d, _) => {
            kapi::enable_delayed_work(d, cx);
        }
    }
    // The review's fix for finding 1: bios that arrived while the work was disabled.
    if p.variant.requeue_on_online && !p.list_empty(batch, cx, true) {
        p.schedule(batch, cx, true);
    }
    Ok(())
}

/// `bio_complete_batch_cpu_down_prep()` (block/bio.c, teardown at `CPUHP_AP_ONLINE_DYN`, on the
/// CPU while its kworkers are still bound): `disable_[delayed_]work_sync()`.
fn bio_complete_batch_cpu_down_prep(p: &Posted, cx: &Cpu, cpu: CpuId) -> Result<(), Errno> {
    if cfg!(feature = "bug-down-prep-no-sync") {
        // Twin: no wait for a running worker, which then outlives down_prep.
        match p.batch(cpu).work {
            BatchWork::Plain(w) => cx.kernel().disable_work(w, cx),
            BatchWork::Delayed(d, _) => cx.kernel().disable_delayed_work(d, cx),
        };
        return Ok(());
    }
    disable_sync(p.batch(cpu), cx);
    Ok(())
}

/// `bio_complete_batch_cpu_dead()` (block/bio.c, teardown at `CPUHP_BP_PREPARE_DYN`, on a control
/// CPU): drains the dead CPU's batch, calling `bi_end_io` directly.
fn bio_complete_batch_cpu_dead(p: &Posted, cx: &Cpu, cpu: CpuId) -> Result<(), Errno> {
    if !p.variant.dead_drains {
        return Ok(());
    }
    let mut list = p.batch(cpu).take_unlocked(&p.variant);
    let n = list.size();
    if cx.tracepoints_enabled() {
        tracing::trace!(target: "block", tracepoint = "biosim_bio_complete_dead_drain", cpu = cx.id().0, "biosim_bio_complete_dead_drain: bio_complete_batch_cpu_dead: draining {n} bios of dead CPU{}", cpu.0);
    }
    while let Some(bio) = list.pop() {
        p.call_end_io(bio, cx);
    }
    Ok(())
}

/// Registers `block/bio:complete:online` and `block/bio:complete:dead` with
/// `cpuhp_setup_state_nocalls()`.
pub(super) fn register(m: &ModuleInit<'_>, p: &UntrackedArc<Posted>) -> Result<(), InitError> {
    let cb = |name: &'static str, f: fn(&Posted, &Cpu, CpuId) -> Result<(), Errno>| {
        let p = UntrackedArc::clone(p);
        CpuhpCallback::new(name, move |cx, cpu| f(&p, cx, cpu))
    };
    m.cpuhp_setup_state_nocalls(
        CPUHP_AP_ONLINE_DYN,
        "block/bio:complete:online",
        Some(cb(
            "bio_complete_batch_cpu_online",
            bio_complete_batch_cpu_online,
        )),
        Some(cb(
            "bio_complete_batch_cpu_down_prep",
            bio_complete_batch_cpu_down_prep,
        )),
    )?;
    m.cpuhp_setup_state_nocalls(
        CPUHP_BP_PREPARE_DYN,
        "block/bio:complete:dead",
        None,
        Some(cb(
            "bio_complete_batch_cpu_dead",
            bio_complete_batch_cpu_dead,
        )),
    )?;
    Ok(())
}
