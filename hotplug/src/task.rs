//! The tasks kernel/cpu.c runs hotplug callbacks in, with the deterministic names and pids biosim
//! gives them (one place defines each; bio-core builds its `Task` from [`Task::comm`] and
//! [`Task::pid`]):
//!
//! | task | comm | pid | what runs in it |
//! |---|---|---|---|
//! | [`Task::CpuhpThread`] | `cpuhp/N` | `100 + N` | the ONLINE section of CPU N (`cpuhp_thread_fun()`, the smpboot thread `cpuhp_threads`), and single AP invocations of `cpuhp_setup_state()` / `cpuhp_remove_state()` (`cpuhp_invoke_ap_callback()`) |
//! | [`Task::CpuDownWorker`] | `kworker/C:0` | `200 + C` | the BP side of `cpu_down()`: `cpu_down_maps_locked()` runs `_cpu_down()` through `work_on_cpu(cpumask_any_but(cpu_online_mask, cpu), ...)`, i.e. in a per-CPU kworker of the control CPU C (the live trace shows `kworker/0:2`) |
//! | [`Task::Writer`] | `biosim` | `999` | the BP side of `cpu_up()`, run by the task that wrote `cpuN/online` or `hotplug/target` (`sh` in the live trace), and the BP-side single invocations of `cpuhp_setup_state*()` / `cpuhp_remove_state()` / instance add/remove, run by their caller |
//! | [`Task::Idle`] | `swapper/N` | `0` | `notify_cpu_starting()`: the STARTING callbacks, run by the booting AP's idle task in `start_secondary()` with IRQs off (ftrace prints pid 0 as `<idle>`) |
//! | [`Task::Stopper`] | `migration/N` | `600 + N` | `take_cpu_down()`: the DYING callbacks, run by CPU N's stopper thread under `stop_machine_cpuslocked()` with IRQs off |
//!
//! STARTING and DYING callbacks never show in a trace: a tracepoint only fires on a CPU in
//! `cpu_online_mask` (`DECLARE_TRACE()`'s condition `cpu_online(raw_smp_processor_id())` in
//! include/linux/tracepoint.h), and the AP is not in it then (not yet set online during
//! `notify_cpu_starting()`, already cleared by `__cpu_disable()` in `take_cpu_down()`).

use std::fmt;

use crate::state::CpuId;

/// `pid` of `cpuhp/0`; `cpuhp/N` is this plus N.
pub const CPUHP_THREAD_PID_BASE: u32 = 100;
/// `pid` of `kworker/0:0`; the `work_on_cpu()` worker of control CPU C is this plus C.
pub const CPU_DOWN_WORKER_PID_BASE: u32 = 200;
/// `pid` of the writer task `biosim` (the sysfs writer, `cpu_up()`'s caller).
pub const WRITER_PID: u32 = 999;
/// `comm` of the writer task.
pub const WRITER_COMM: &str = "biosim";
/// `pid` of `migration/0`; CPU N's stopper is this plus N.
pub const STOPPER_PID_BASE: u32 = 600;

/// A task that runs hotplug code; see the module documentation for names and pids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Task {
    /// `cpuhp/N`, the AP hotplug thread of CPU N.
    CpuhpThread(CpuId),
    /// `kworker/C:0`, the `work_on_cpu()` worker on control CPU C that runs `_cpu_down()`.
    CpuDownWorker(CpuId),
    /// `biosim`, the writer task (`cpu_up()`, sysfs writes, state registration).
    Writer,
    /// `swapper/N`, CPU N's idle task (`notify_cpu_starting()`).
    Idle(CpuId),
    /// `migration/N`, CPU N's stopper thread (`take_cpu_down()`).
    Stopper(CpuId),
}

impl Task {
    /// `current->comm`.
    pub fn comm(&self) -> String {
        match self {
            Task::CpuhpThread(c) => format!("cpuhp/{}", c.0),
            Task::CpuDownWorker(c) => format!("kworker/{}:0", c.0),
            Task::Writer => WRITER_COMM.to_owned(),
            Task::Idle(c) => format!("swapper/{}", c.0),
            Task::Stopper(c) => format!("migration/{}", c.0),
        }
    }

    /// `current->pid`.
    pub fn pid(&self) -> u32 {
        match self {
            Task::CpuhpThread(c) => CPUHP_THREAD_PID_BASE + c.0,
            Task::CpuDownWorker(c) => CPU_DOWN_WORKER_PID_BASE + c.0,
            Task::Writer => WRITER_PID,
            Task::Idle(_) => 0,
            Task::Stopper(c) => STOPPER_PID_BASE + c.0,
        }
    }

    /// The `TASK-PID` column of an ftrace line (`<idle>-0` for an idle task, as ftrace prints
    /// pid 0).
    pub fn ftrace_name(&self) -> String {
        match self {
            Task::Idle(_) => "<idle>-0".to_owned(),
            t => format!("{}-{}", t.comm(), t.pid()),
        }
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.ftrace_name())
    }
}

/// The ftrace `flags` column (`trace_print_lat_fmt()`) of task context with IRQs and preemption
/// enabled: what every traced hotplug callback shows in the live traces.
pub const FLAGS_TASK: &str = ".....";
/// The `flags` column of a STARTING/DYING callback: IRQs off (`d`), preempt depth 1 (the idle
/// task and the stopper run with preemption disabled).
pub const FLAGS_ATOMIC: &str = "d..1.";
/// The `flags` column of an atomic-state callback run by `cpuhp/N` for a single invocation
/// (`cpuhp_thread_fun()` disables IRQs around it).
pub const FLAGS_IRQS_OFF: &str = "d....";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_pids_follow_the_interface() {
        assert_eq!(Task::CpuhpThread(CpuId(1)).ftrace_name(), "cpuhp/1-101");
        assert_eq!(
            Task::CpuDownWorker(CpuId(0)).ftrace_name(),
            "kworker/0:0-200"
        );
        assert_eq!(Task::Writer.ftrace_name(), "biosim-999");
        assert_eq!(Task::Idle(CpuId(1)).ftrace_name(), "<idle>-0");
        assert_eq!(Task::Idle(CpuId(1)).comm(), "swapper/1");
        assert_eq!(Task::Stopper(CpuId(1)).ftrace_name(), "migration/1-601");
        for f in [FLAGS_TASK, FLAGS_ATOMIC, FLAGS_IRQS_OFF] {
            assert_eq!(f.len(), 5);
        }
    }
}
