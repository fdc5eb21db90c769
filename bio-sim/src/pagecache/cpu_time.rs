//! Per-CPU time accounting for the driver's ns clock: what each simulated CPU spent in the task,
//! in hard interrupts and in kworkers. Interrupts and kworkers run on a CPU ahead of the task
//! there (a hardirq preempts it; a woken per-CPU kworker is run before the task resumes, as the
//! scheduler's wakeup preemption would), so their time delays a task on the same CPU.

/// Where a CPU's time went (ns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTime {
    /// The workload task (`biosim/N`), syscalls included.
    pub task_ns: u64,
    /// Hard interrupts (the device's completions, `bio_endio()` in hardirq context).
    pub irq_ns: u64,
    /// kworkers (`bio_complete_work_fn`, the v3 drain, XFS's completion work).
    pub worker_ns: u64,
}

/// The clock of every CPU: when it is free next, and the time it accounted.
#[derive(Debug, Clone, Default)]
pub struct CpuClocks {
    free_at: Vec<u64>,
    /// Time per CPU.
    pub time: Vec<CpuTime>,
}

/// Who ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// The task.
    Task,
    /// A hard interrupt.
    Irq,
    /// A kworker.
    Worker,
}

impl CpuClocks {
    /// `nr_cpus` idle CPUs at time 0.
    pub fn new(nr_cpus: usize) -> Self {
        Self {
            free_at: vec![0; nr_cpus],
            time: vec![CpuTime::default(); nr_cpus],
        }
    }

    /// When `cpu` is free.
    pub fn free_at(&self, cpu: usize) -> u64 {
        self.free_at.get(cpu).copied().unwrap_or(0)
    }

    /// Runs `ns` of `who` on `cpu`, starting no earlier than `at` and after what the CPU already
    /// has to do; returns when it ends.
    pub fn run(&mut self, cpu: usize, at: u64, ns: u64, who: Runner) -> u64 {
        let (Some(free), Some(t)) = (self.free_at.get_mut(cpu), self.time.get_mut(cpu)) else {
            return at + ns;
        };
        let end = (*free).max(at) + ns;
        *free = end;
        match who {
            Runner::Task => t.task_ns += ns,
            Runner::Irq => t.irq_ns += ns,
            Runner::Worker => t.worker_ns += ns,
        }
        end
    }

    /// Interrupt time on `cpu` at `at`: it preempts whatever runs there, so it is added to the
    /// CPU's backlog (delaying a task running there) rather than waiting for it.
    pub fn preempt(&mut self, cpu: usize, at: u64, ns: u64, who: Runner) -> u64 {
        let (Some(free), Some(t)) = (self.free_at.get_mut(cpu), self.time.get_mut(cpu)) else {
            return at + ns;
        };
        *free = (*free).max(at) + ns;
        match who {
            Runner::Task => t.task_ns += ns,
            Runner::Irq => t.irq_ns += ns,
            Runner::Worker => t.worker_ns += ns,
        }
        at + ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupt_delays_the_task_on_its_cpu_only() {
        let mut c = CpuClocks::new(2);
        assert_eq!(c.run(0, 0, 100, Runner::Task), 100);
        // An IRQ at 50 on CPU0 while the task runs until 100: the task's CPU is busy until 110.
        assert_eq!(c.preempt(0, 50, 10, Runner::Irq), 60);
        assert_eq!(c.free_at(0), 110);
        assert_eq!(c.run(0, 100, 5, Runner::Task), 115);
        assert_eq!(c.preempt(1, 50, 10, Runner::Irq), 60);
        assert_eq!(c.free_at(1), 60);
        assert_eq!(c.time[0].irq_ns, 10);
        assert_eq!(c.time[0].task_ns, 105);
    }
}
