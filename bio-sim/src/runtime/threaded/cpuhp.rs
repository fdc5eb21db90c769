//! CPU hotplug driven from the caller's thread: each step of the [`hotplug`] machine runs on the
//! thread of the CPU it names and is finished on the caller's thread, the way
//! `cpuhp_invoke_ap_callback()` in `kernel/cpu.c` hands an AP step to the target CPU's `cpuhp/N`
//! thread and waits for it.

use super::error::ThreadedError;
use super::shared::{panic_message, Msg, Shared};
use bio_core::kernel::{CpuId, HotplugStep};
use bio_core::Cpu;
use crossbeam_channel::RecvTimeoutError;
use hotplug::{Errno, StateId, StepOutcome};
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Takes `cpu` up or down to `target`, one step at a time, until the operation finishes or fails
/// (then rolled back by the hotplug machine, as the kernel does). The caller has checked that
/// `cpu` exists and that it is not a CPU thread.
pub(super) fn drive(
    sh: &Shared,
    cpu: CpuId,
    target: StateId,
    up: bool,
) -> Result<(), ThreadedError> {
    let k = &sh.kernel;
    // cpus_write_lock(): one hotplug operation at a time.
    let _ctl = sh.hotplug_ctl.lock();
    if up {
        k.cpu_up_start(cpu, target)?;
    } else {
        k.cpu_down_start(cpu, target)?;
    }
    loop {
        let step = k.hotplug_begin_step(cpu)?;
        let (step, result) = run_step_on_its_cpu(sh, step)?;
        let out = {
            // The step may change `cpu`'s online bit: not in the middle of one of its events.
            let _exec = sh.exec[cpu.index()].lock();
            k.hotplug_finish_step(step, result)?
        };
        sh.kick(cpu);
        match out {
            StepOutcome::Ran {
                finished: Some(r), ..
            } => return r.map_err(ThreadedError::Hotplug),
            StepOutcome::Ran { finished: None, .. } => {}
            StepOutcome::Done => return Ok(()),
        }
    }
}

/// Executes `step` on the thread of the CPU it names and waits (bounded by
/// `hotplug_step_timeout`) for its result; a step that panicked there is recorded and returned as
/// [`ThreadedError::Panicked`].
fn run_step_on_its_cpu(
    sh: &Shared,
    step: HotplugStep,
) -> Result<(HotplugStep, Result<(), Errno>), ThreadedError> {
    let on = step.run_on();
    let desc = step.invocation().to_string();
    let (tx, rx) = crossbeam_channel::bounded::<(HotplugStep, Result<(), Errno>)>(1);
    let (ptx, prx) = crossbeam_channel::bounded::<String>(1);
    let kernel = Arc::clone(&sh.kernel);
    let msg = Msg::Hotplug(Box::new(move |cx: Option<&Cpu>| {
        let Some(cx) = cx else { return };
        match catch_unwind(AssertUnwindSafe(|| kernel.hotplug_run_step(&step, cx))) {
            Ok(r) => {
                let _ = tx.send((step, r));
            }
            Err(p) => {
                let _ = ptx.send(panic_message(&*p));
            }
        }
    }));
    sh.post(on, msg);
    match rx.recv_timeout(sh.config.hotplug_step_timeout) {
        Ok(r) => Ok(r),
        Err(RecvTimeoutError::Timeout) => Err(ThreadedError::StepTimeout {
            step: desc,
            on,
            timeout: sh.config.hotplug_step_timeout,
        }),
        // The message was dropped unanswered: the step panicked, or the thread is gone.
        Err(RecvTimeoutError::Disconnected) => Err(match prx.try_recv() {
            Ok(message) => {
                sh.record_panic(on, "hotplug step", &message.clone() as &(dyn Any + Send));
                ThreadedError::Panicked {
                    cpu: on,
                    message: format!("{desc}: {message}"),
                }
            }
            Err(_) => ThreadedError::Stopped,
        }),
    }
}
