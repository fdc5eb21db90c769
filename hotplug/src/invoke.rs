//! What one callback invocation is: `cpuhp_invoke_callback()` in kernel/cpu.c
//! and the context it runs in (`cpuhp_thread_fun()` on the AP, the control
//! task on the BP, `notify_cpu_starting()`/`take_cpu_down()` with IRQs off).
//!
//! The crate never decides *how* a callback is executed: it hands the runtime
//! an [`Invocation`] describing where the kernel would run it ([`RunsOn`]) and
//! the [`Callback`] to run, so a deterministic or threaded runtime can run it
//! in the right simulated context.

use std::fmt;
use std::sync::Arc;

use crate::errno::Errno;
use crate::state::{CpuId, StateId};
use crate::task::{Task, FLAGS_ATOMIC, FLAGS_IRQS_OFF, FLAGS_TASK};

/// One instance of a multi-instance state: the `struct hlist_node` a driver passes to
/// `cpuhp_state_add_instance()` (one per device, queue, ...). Numbered by the machine in the
/// order instances are added; the callback receives it in [`Invocation::instance`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceId(pub u64);

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "instance{}", self.0)
    }
}

/// A hotplug startup or teardown callback: `int (*)(unsigned int cpu)` in the
/// kernel (`int (*)(unsigned int cpu, struct hlist_node *node)` for a multi-instance state, the
/// node being [`Invocation::instance`]). It receives the runtime's environment `E` and the [`Invocation`]
/// (whose `cpu` is the CPU being plugged, as the kernel's `cpu` argument) and
/// returns `Ok(())` or the errno the kernel callback would return.
pub type Callback<E> = Arc<dyn Fn(&E, &Invocation) -> Result<(), Errno> + Send + Sync>;

/// Where the kernel runs a callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunsOn {
    /// On the hotplugged CPU itself. `irqs_off: false` is the per-CPU hotplug
    /// thread `cpuhp/N` in task context (ONLINE section, `cpuhp_thread_fun()`);
    /// `irqs_off: true` is a STARTING/DYING callback run from
    /// `notify_cpu_starting()` / `take_cpu_down()` (under `stop_machine`).
    Target {
        /// Whether interrupts are disabled (STARTING/DYING states).
        irqs_off: bool,
    },
    /// On a control CPU, in task context: the BP side. For `cpu_down()` the
    /// kernel uses `work_on_cpu(cpumask_any_but(cpu_online_mask, cpu), ...)`,
    /// so this is the lowest online CPU other than the target, chosen when the
    /// operation starts.
    Control {
        /// The control CPU.
        cpu: CpuId,
    },
}

/// Why a callback is being invoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// A step of `cpu_up()`/`cpu_down()` (or of its rollback).
    Hotplug,
    /// `cpuhp_setup_state()` invoking startup on a CPU already at or above the state.
    Setup,
    /// `cpuhp_rollback_install()`: teardown on the CPUs set up before a setup failure.
    SetupRollback,
    /// `cpuhp_remove_state()` invoking teardown.
    Remove,
}

/// One callback invocation, as the runtime must execute it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The CPU being plugged (the `cpu` argument of the kernel callback).
    pub cpu: CpuId,
    /// The step whose callback runs.
    pub state: StateId,
    /// The step's name (`"block/bio:dead"`).
    pub name: Arc<str>,
    /// `true` for the startup callback, `false` for the teardown.
    pub bringup: bool,
    /// `true` while the machine is rolling back a failed operation (and for
    /// the teardowns of `cpuhp_rollback_install()`).
    pub rollback: bool,
    /// Where the kernel runs it.
    pub runs_on: RunsOn,
    /// `st->target` of the CPU when the callback runs (as in the
    /// `cpuhp_enter` tracepoint); for setup/remove invocations, the state itself.
    pub target: StateId,
    /// Why it runs.
    pub origin: Origin,
    /// Whether this is one of kernel/cpu.c's own steps (`bringup_cpu()`,
    /// `takedown_cpu()`, ...), whose callback in the model does nothing.
    pub core: bool,
    /// The kernel function the callback is, as `%ps` prints it in `cpuhp_enter`
    /// (`workqueue_offline_cpu`); the state's name when it was registered without one
    /// ([`crate::Cpuhp::set_callback_fns`]).
    pub fun: Arc<str>,
    /// For a multi-instance state, the instance this call is for (one call per instance, each
    /// traced as `cpuhp_multi_enter`); `None` for a single-instance state.
    pub instance: Option<InstanceId>,
    /// The task the kernel runs the callback in ([`crate::task`]).
    pub task: Task,
}

impl Invocation {
    /// The CPU the callback executes on: the hotplugged CPU for AP states, the control CPU for
    /// BP states (the ftrace CPU column).
    pub fn exec_cpu(&self) -> CpuId {
        match self.runs_on {
            RunsOn::Target { .. } => self.cpu,
            RunsOn::Control { cpu } => cpu,
        }
    }

    /// The ftrace `flags` column of the context the callback runs in.
    pub fn flags(&self) -> &'static str {
        match (self.runs_on, self.task) {
            (RunsOn::Target { irqs_off: true }, Task::CpuhpThread(_)) => FLAGS_IRQS_OFF,
            (RunsOn::Target { irqs_off: true }, _) => FLAGS_ATOMIC,
            _ => FLAGS_TASK,
        }
    }

    /// `"startup"` or `"teardown"`.
    pub fn direction(&self) -> &'static str {
        if self.bringup {
            "startup"
        } else {
            "teardown"
        }
    }
}

impl fmt::Display for Invocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:3} {} {}",
            self.cpu,
            self.state.0,
            self.name,
            self.direction()
        )?;
        if let Some(i) = self.instance {
            write!(f, " {i}")?;
        }
        if self.rollback {
            f.write_str(" (rollback)")?;
        }
        match self.runs_on {
            RunsOn::Target { irqs_off: true } => f.write_str(" [on target, irqs off]"),
            RunsOn::Target { irqs_off: false } => f.write_str(" [on target, cpuhp thread]"),
            RunsOn::Control { cpu } => write!(f, " [on control {cpu}]"),
        }
    }
}

/// How a runtime executes the single invocations of `cpuhp_setup_state_via()` /
/// `cpuhp_remove_state_via()`: given the [`Invocation`] (which says where it
/// must run) and the [`Callback`], run it and return its result.
pub type InvokeFn<'a, E> = dyn FnMut(&Invocation, &Callback<E>) -> Result<(), Errno> + 'a;
