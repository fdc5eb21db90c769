//! The kernel side of CPU hotplug (`kernel/cpu.c`): the `cpu_online_mask` the rest of the kernel
//! reads, and the glue that runs each step of the [`hotplug`] machine in the simulated context its
//! side names: AP steps on the target CPU (the `cpuhp/N` thread in task context, or with IRQs off
//! for STARTING/DYING in the AP's idle task or stopper), BP steps on the control CPU (the
//! `work_on_cpu()` kworker of `cpu_down()`, the writer task of `cpu_up()`); the task each runs as
//! comes from [`hotplug::task`].
//!
//! A runtime drives an operation with [`Kernel::hotplug_begin_step`], executes the step on the CPU
//! it names with [`Kernel::hotplug_run_step`], and applies the result with
//! [`Kernel::hotplug_finish_step`]. Between two steps it may run anything else: that is how a
//! completion lands between `down_prep` and `dead`.

use super::{Cpu, CpuId, Kernel, Task};
use crate::sync::atomic::Ordering;
use crate::sync::MutexGuard;
use hotplug::{Callback, Cpuhp, Errno, HotplugError, RunsOn, StateId, StepCall, StepOutcome};
use std::ops::{Deref, DerefMut};

/// One begun hotplug step: where it must run and what it runs.
pub struct HotplugStep {
    call: StepCall,
    callback: Option<Callback<Cpu>>,
}

impl std::fmt::Debug for HotplugStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HotplugStep({})", self.call.invocation)
    }
}

impl HotplugStep {
    /// The CPU whose context must execute the step.
    pub fn run_on(&self) -> CpuId {
        match self.call.invocation.runs_on {
            RunsOn::Target { .. } => self.call.invocation.cpu,
            RunsOn::Control { cpu } => cpu,
        }
    }

    /// What the step is.
    pub fn invocation(&self) -> &hotplug::Invocation {
        &self.call.invocation
    }

    /// Whether `hotplug/fail` stands in for the callback.
    pub fn injected_fail(&self) -> bool {
        self.call.injected_fail
    }
}

/// The hotplug machine, locked (`cpu_hotplug_lock` and `cpuhp_state_mutex` in one): what
/// [`Kernel::hotplug`] returns. Dropping it unlocks.
pub struct HotplugGuard<'a> {
    guard: MutexGuard<'a, Cpuhp<Cpu>>,
    kernel: &'a Kernel,
}

impl std::fmt::Debug for HotplugGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotplugGuard").finish_non_exhaustive()
    }
}

impl Deref for HotplugGuard<'_> {
    type Target = Cpuhp<Cpu>;

    fn deref(&self) -> &Self::Target {
        &self.guard
    }
}

impl DerefMut for HotplugGuard<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.guard
    }
}

impl Drop for HotplugGuard<'_> {
    fn drop(&mut self) {
        // Before the lock itself is released (the guard field drops after this).
        self.kernel.hotplug_owner.clear();
    }
}

impl Kernel {
    /// The hotplug machine, locked: sysfs knobs (`set_fail`, `state`, `target`), the state table,
    /// registration. Do not hold it across [`Kernel::hotplug_run_step`].
    ///
    /// # Panics
    ///
    /// If the calling thread already holds it (a guard from an earlier call is still alive, or a
    /// hotplug callback run by [`Kernel::hotplug_run_step`] under it asks for it): taking the lock
    /// again would deadlock silently.
    pub fn hotplug(&self) -> HotplugGuard<'_> {
        self.lock_hotplug("Kernel::hotplug()")
    }

    /// Locks the hotplug machine for `op`, refusing loudly to self-deadlock (see
    /// [`Kernel::hotplug`]). Every use of the lock goes through here.
    pub(crate) fn lock_hotplug(&self, op: &str) -> HotplugGuard<'_> {
        assert!(
            !self.hotplug_owner.held_by_current(),
            "{op}: this thread already holds the hotplug machine (a HotplugGuard from \
             Kernel::hotplug() is still alive); taking it again would deadlock. Drop the first \
             guard before calling {op}."
        );
        let guard = self.hotplug.lock();
        self.hotplug_owner.set_current();
        HotplugGuard {
            guard,
            kernel: self,
        }
    }

    /// Starts `cpu_down(cpu, target)` (no step runs yet).
    pub fn cpu_down_start(&self, cpu: CpuId, target: StateId) -> Result<(), HotplugError> {
        self.lock_hotplug("Kernel::cpu_down_start()")
            .start_cpu_down(cpu, target)
    }

    /// Starts `cpu_up(cpu, target)` (no step runs yet).
    pub fn cpu_up_start(&self, cpu: CpuId, target: StateId) -> Result<(), HotplugError> {
        self.lock_hotplug("Kernel::cpu_up_start()")
            .start_cpu_up(cpu, target)
    }

    /// Whether a hotplug operation on `cpu` has steps left.
    pub fn hotplug_in_progress(&self, cpu: CpuId) -> bool {
        self.lock_hotplug("Kernel::hotplug_in_progress()")
            .in_progress(cpu)
    }

    /// The CPUs with a hotplug operation in progress (one lock for all of them).
    pub fn hotplug_ops_in_progress(&self) -> Vec<CpuId> {
        let hp = self.lock_hotplug("Kernel::hotplug_ops_in_progress()");
        self.possible_cpus()
            .filter(|&c| hp.in_progress(c))
            .collect()
    }

    /// Begins the next step of the operation on `cpu`.
    pub fn hotplug_begin_step(&self, cpu: CpuId) -> Result<HotplugStep, HotplugError> {
        let mut hp = self.lock_hotplug("Kernel::hotplug_begin_step()");
        let call = hp.begin_step(cpu)?;
        let callback = hp.callback_for(&call);
        Ok(HotplugStep { call, callback })
    }

    /// Executes a begun step in `cx`, which must be a context of [`HotplugStep::run_on`] in plain
    /// task context, as the task the invocation names ([`hotplug::Invocation::task`]): the AP
    /// thread `cpuhp/N`, with IRQs off for STARTING/DYING, or the control CPU's
    /// `work_on_cpu()` kworker / the writer. An injected failure returns `-EAGAIN` without
    /// running.
    pub fn hotplug_run_step(&self, step: &HotplugStep, cx: &Cpu) -> Result<(), Errno> {
        if step.call.injected_fail {
            return Err(Errno::EAGAIN);
        }
        let Some(cb) = step.callback.as_ref() else {
            return Ok(());
        };
        let inv = &step.call.invocation;
        // The task kernel/cpu.c runs it in (hotplug::task): cpuhp/N, the idle task or the
        // stopper of the AP, or the BP's work_on_cpu() kworker / the writer.
        let saved = cx.replace_current(Task {
            pid: inv.task.pid(),
            comm: inv.task.comm(),
        });
        let r = match inv.runs_on {
            RunsOn::Target { irqs_off: true } => cx.with_irqs_disabled(|cx| cb(cx, inv)),
            _ => cb(cx, inv),
        };
        cx.set_current(saved);
        r
    }

    /// Applies the result of a step, updates `cpu_online_mask`, and returns the outcome.
    pub fn hotplug_finish_step(
        &self,
        step: HotplugStep,
        result: Result<(), Errno>,
    ) -> Result<StepOutcome, HotplugError> {
        let cpu = step.call.invocation.cpu;
        let (out, online) = {
            let mut hp = self.lock_hotplug("Kernel::hotplug_finish_step()");
            let out = hp.finish_step(step.call, result)?;
            (out, hp.cpu_online(cpu))
        };
        let was = self.percpu[cpu.index()]
            .online
            .swap(online, Ordering::AcqRel);
        if was && !online {
            // irq_migrate_all_off_this_cpu(): interrupts aimed at the dying CPU move away.
            self.migrate_irqs_off(cpu);
        }
        if was != online {
            tracing::debug!(target: "cpuhp", cpu = cpu.0, "CPU{} is now {}", cpu.0, if online { "online" } else { "offline" });
        }
        Ok(out)
    }

    /// Runs one whole step on the context `cx_for(cpu)` returns: begin, run, finish.
    pub fn hotplug_step(
        &self,
        cpu: CpuId,
        cx_for: &dyn Fn(CpuId) -> Cpu,
    ) -> Result<StepOutcome, HotplugError> {
        let step = self.hotplug_begin_step(cpu)?;
        let cx = cx_for(step.run_on());
        let r = self.hotplug_run_step(&step, &cx);
        self.hotplug_finish_step(step, r)
    }

    /// `cpu_down()` or `cpu_up()` to completion with fresh contexts (no other events between
    /// steps). Returns the operation's result.
    pub fn cpu_hotplug_to(
        self: &crate::sync::UntrackedArc<Self>,
        cpu: CpuId,
        target: StateId,
        up: bool,
    ) -> Result<(), HotplugError> {
        if up {
            self.cpu_up_start(cpu, target)?;
        } else {
            self.cpu_down_start(cpu, target)?;
        }
        loop {
            match self.hotplug_step(cpu, &|c| {
                self.cpu(c).expect("the hotplug machine names a real CPU")
            })? {
                StepOutcome::Ran {
                    finished: Some(r), ..
                } => return r,
                StepOutcome::Ran { finished: None, .. } => {}
                StepOutcome::Done => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::KernelConfig;
    use super::*;

    #[test]
    #[should_panic(expected = "Kernel::hotplug(): this thread already holds the hotplug machine")]
    fn hotplug_taken_twice_on_one_thread_panics_instead_of_hanging() {
        let k = Kernel::new(KernelConfig::default(), 2).unwrap();
        let _first = k.hotplug();
        let _second = k.hotplug();
    }

    #[test]
    #[should_panic(expected = "Kernel::cpu_down_start(): this thread already holds")]
    fn a_kernel_hotplug_call_under_the_guard_panics_too() {
        let k = Kernel::new(KernelConfig::default(), 2).unwrap();
        let _guard = k.hotplug();
        let _ = k.cpu_down_start(CpuId(1), hotplug::CPUHP_OFFLINE);
    }

    #[test]
    fn hotplug_is_taken_again_after_the_guard_drops_and_waits_on_other_threads() {
        let k = Kernel::new(KernelConfig::default(), 2).unwrap();
        drop(k.hotplug());
        let guard = k.hotplug();
        let other = crate::sync::UntrackedArc::clone(&k);
        let t = std::thread::spawn(move || other.hotplug().nr_cpus());
        drop(guard);
        assert_eq!(t.join().unwrap(), 2);
        assert_eq!(k.hotplug().nr_cpus(), 2);
    }
}
