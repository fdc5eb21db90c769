//! Interrupts: hard IRQs delivered to a CPU (`kernel/irq/handle.c`), softirqs
//! (`kernel/softirq.c`: `raise_softirq()`, `irq_exit()` → `invoke_softirq()`, `ksoftirqd`) and
//! IPIs for remote completion (`kernel/smp.c`: `smp_call_function_single_async()`).
//!
//! A device (or a test) raises an IRQ on a CPU; it waits in that CPU's pending queue until the
//! runtime delivers it in a context of that CPU whose IRQs are enabled, where the handler runs in
//! hardirq context. Softirq work raised by a handler runs on the way out of the interrupt
//! (`irq_exit()`), unless the interrupted context is itself in interrupt or BH-disabled, in which
//! case it waits for the runtime's softirq step (the `ksoftirqd` path).
//!
//! Threaded handlers (`kernel/irq/manage.c`): [`Cpu::irq_thread_fn`] runs a handler as its
//! `irq/N-NAME` thread does, and [`Cpu::irq_forced_thread_fn`] as a handler forced into a thread
//! does ([`Kernel::force_irqthreads`]: always on PREEMPT_RT, where every handler not flagged
//! `IRQF_NO_THREAD` runs so). [`Kernel::raise_irq`]'s handlers still run in hardirq on every
//! model, as an `IRQF_NO_THREAD` handler would: code that means a threaded handler enters one of
//! the two explicitly.

use crate::kernel::{Cpu, CpuId, Kernel};
use crate::sync::Mutex;
use std::collections::VecDeque;
use std::fmt;

/// A hard interrupt handler (`irq_handler_t`, `include/linux/interrupt.h`): runs once, in hardirq
/// context on the CPU it was raised on.
pub type IrqHandler = Box<dyn FnOnce(&Cpu) + Send>;

/// A unit of softirq work (what a softirq action such as `blk_done_softirq()` processes for one
/// `BLOCK_SOFTIRQ` completion), run in softirq context.
pub type SoftirqWork = Box<dyn FnOnce(&Cpu) + Send>;

/// The softirq vectors biosim uses (`enum { HI_SOFTIRQ, TIMER_SOFTIRQ, ... }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SoftirqVec {
    /// `TIMER_SOFTIRQ`.
    Timer,
    /// `BLOCK_SOFTIRQ`: request completions (`blk_complete_reqs()`).
    Block,
}

impl SoftirqVec {
    /// The kernel name printed by the softirq tracepoints (`softirq_to_name[]`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Timer => "TIMER",
            Self::Block => "BLOCK",
        }
    }

    /// The vector number (`TIMER_SOFTIRQ` = 1, `BLOCK_SOFTIRQ` = 4 in
    /// `include/linux/interrupt.h`), the `vec=%u` of the softirq tracepoints.
    pub fn nr(self) -> u32 {
        match self {
            Self::Timer => 1,
            Self::Block => 4,
        }
    }
}

/// `CALL_FUNCTION_SINGLE_VECTOR` (arch/x86/include/asm/irq_vectors.h): the x86 system vector of
/// `smp_call_function_single_async()`'s IPI, printed by `call_function_single_entry/exit`.
pub const CALL_FUNCTION_SINGLE_VECTOR: u32 = 0xfb;

/// The Linux IRQ number the first named interrupt source gets: device IRQs (MSIs) are allocated
/// above the IO-APIC's 24 GSIs, as on the reference machine (`irq=36 name=virtio1-req.0`).
pub const FIRST_DEVICE_IRQ: u32 = 24;

/// How an interrupt enters the kernel, which decides its tracepoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IrqEntry {
    /// A device IRQ through `handle_irq_event()`: `irq_handler_entry`/`exit` with its number.
    Device(u32),
    /// The call-function-single IPI, an x86 system vector (`sysvec_call_function_single()`):
    /// `call_function_single_entry`/`exit`, no `irq_handler_*`.
    CallFunctionSingle,
}

/// An interrupt that could not be raised, with its handler handed back so nothing is lost.
pub struct IrqError {
    /// The CPU it was aimed at.
    pub cpu: CpuId,
    /// Why it was refused.
    pub reason: &'static str,
    /// The handler, returned to the caller.
    pub handler: IrqHandler,
}

impl fmt::Debug for IrqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IrqError")
            .field("cpu", &self.cpu)
            .field("reason", &self.reason)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for IrqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot raise an IRQ on {}: {}", self.cpu, self.reason)
    }
}

impl std::error::Error for IrqError {}

struct PendingIrq {
    name: &'static str,
    entry: IrqEntry,
    handler: IrqHandler,
}

#[derive(Default)]
struct CpuIrqs {
    hardirqs: VecDeque<PendingIrq>,
    softirqs: VecDeque<(SoftirqVec, SoftirqWork)>,
}

/// The per-CPU interrupt queues of one kernel.
pub(crate) struct Irqs {
    per_cpu: Vec<Mutex<CpuIrqs>>,
    /// The interrupt sources by name, in the order they first raised an IRQ: source `i` is
    /// IRQ `FIRST_DEVICE_IRQ + i` (`request_irq()` order), the same in every run.
    numbers: crate::sync::untracked::Mutex<Vec<&'static str>>,
}

impl fmt::Debug for Irqs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Irqs")
    }
}

impl Irqs {
    pub(crate) fn new(nr_cpus: u32) -> Self {
        Self {
            per_cpu: (0..nr_cpus)
                .map(|_| Mutex::new(CpuIrqs::default()))
                .collect(),
            numbers: crate::sync::untracked::Mutex::new(Vec::new()),
        }
    }

    /// The IRQ number of source `name`, allocating the next one for a new source.
    fn irq_number(&self, name: &'static str) -> u32 {
        let mut n = self.numbers.lock().unwrap_or_else(|e| e.into_inner());
        let i = n.iter().position(|x| *x == name).unwrap_or_else(|| {
            n.push(name);
            n.len() - 1
        });
        FIRST_DEVICE_IRQ + i as u32
    }
}

impl Kernel {
    /// `force_irqthreads()` (`kernel/irq/manage.c`): whether handlers not flagged
    /// `IRQF_NO_THREAD` are forced into their irq thread. Always true on PREEMPT_RT
    /// (`CONFIG_PREEMPT_RT` selects forced threading unconditionally); the `threadirqs` boot
    /// parameter that does the same on other models is not modelled (false).
    pub fn force_irqthreads(&self) -> bool {
        self.config().preempt_rt()
    }

    /// Raises a hard interrupt on `cpu`: `handler` runs there in hardirq context when the runtime
    /// delivers it. An interrupt aimed at an offline CPU goes to the lowest online CPU instead, as
    /// the IRQ core's affinity handling does. For a CPU that does not exist the handler is handed
    /// back, not dropped.
    pub fn raise_irq(
        &self,
        cpu: CpuId,
        name: &'static str,
        handler: IrqHandler,
    ) -> Result<CpuId, IrqError> {
        let entry = IrqEntry::Device(self.irqs.irq_number(name));
        self.raise(cpu, name, entry, handler)
    }

    fn raise(
        &self,
        cpu: CpuId,
        name: &'static str,
        entry: IrqEntry,
        handler: IrqHandler,
    ) -> Result<CpuId, IrqError> {
        if cpu.index() >= self.irqs.per_cpu.len() {
            return Err(IrqError {
                cpu,
                reason: "no such CPU",
                handler,
            });
        }
        // The online check is made under the target's queue lock: a CPU going offline clears
        // its online bit and then migrates its queue under that lock, so an interrupt queued
        // while the bit was still set is migrated, never stranded on a dead CPU.
        // The fallback list is only built when the target is offline (not per interrupt).
        let fallback = || self.online_cpus().into_iter();
        let mut candidates = std::iter::once(cpu).chain(std::iter::once_with(fallback).flatten());
        loop {
            let Some(target) = candidates.next() else {
                return Err(IrqError {
                    cpu,
                    reason: "no CPU is online",
                    handler,
                });
            };
            let mut q = self.irqs.per_cpu[target.index()].lock();
            if !self.cpu_online(target) {
                continue;
            }
            q.hardirqs.push_back(PendingIrq {
                name,
                entry,
                handler,
            });
            drop(q);
            self.wake(target);
            return Ok(target);
        }
    }

    /// `irq_migrate_all_off_this_cpu()`: moves the interrupts pending on a CPU that left the
    /// online mask to the lowest online CPU.
    pub(crate) fn migrate_irqs_off(&self, cpu: CpuId) {
        let Some(to) = self.online_cpus().first().copied() else {
            return;
        };
        let moved: Vec<PendingIrq> = self.irqs.per_cpu[cpu.index()]
            .lock()
            .hardirqs
            .drain(..)
            .collect();
        if moved.is_empty() {
            return;
        }
        tracing::debug!(target: "irq", cpu = cpu.0, "migrated {} pending IRQs from CPU{} to CPU{}", moved.len(), cpu.0, to.0);
        self.irqs.per_cpu[to.index()].lock().hardirqs.extend(moved);
        self.wake(to);
    }

    /// `smp_call_function_single_async()`: runs `f` on `cpu` from its IPI handler (hardirq
    /// context), the remote-completion path of blk-mq.
    ///
    /// Traces `ipi_send_cpu: cpu=%u callsite=%pS callback=%pS` as `send_call_function_single_ipi()`
    /// does, inside `smp_call_function_single_async()`'s `preempt_disable()`. biosim has no code
    /// addresses: `%pS` prints the symbol at offset 0 (`+0x0/0x0`, size unknown). The callsite is
    /// `generic_exec_single()` (the `_RET_IP_` of the inlined queueing), the callback the IPI's
    /// handler `generic_smp_call_function_single_interrupt()`, as on the live kernel.
    pub fn send_ipi(&self, from: &Cpu, cpu: CpuId, f: IrqHandler) -> Result<CpuId, IrqError> {
        crate::ktrace!(
            from,
            target: "ipi",
            "ipi_send_cpu",
            flags: from.trace_flags_under(from.irqs_disabled(), 1),
            "cpu={} callsite=generic_exec_single+0x0/0x0 callback=generic_smp_call_function_single_interrupt+0x0/0x0",
            cpu.0
        );
        self.raise(cpu, "IPI:CSD", IrqEntry::CallFunctionSingle, f)
    }

    /// `raise_softirq()` from `cx`: queues `work` for `vec` on `cx`'s CPU. `softirq_raise` is
    /// traced inside its `local_irq_save()`.
    pub fn raise_softirq(&self, cx: &Cpu, vec: SoftirqVec, work: SoftirqWork) {
        self.irqs.per_cpu[cx.id().index()]
            .lock()
            .softirqs
            .push_back((vec, work));
        crate::ktrace!(
            cx,
            target: "irq",
            "softirq_raise",
            flags: cx.trace_flags_under(true, 0),
            "vec={} [action={}]",
            vec.nr(),
            vec.name()
        );
        self.wake(cx.id());
    }

    /// How many hard interrupts wait on `cpu`.
    pub fn pending_irqs(&self, cpu: CpuId) -> usize {
        self.irqs
            .per_cpu
            .get(cpu.index())
            .map_or(0, |q| q.lock().hardirqs.len())
    }

    /// `(hardirqs, softirq items)` waiting on `cpu`, under one lock.
    pub fn pending_interrupts(&self, cpu: CpuId) -> (usize, usize) {
        self.irqs.per_cpu.get(cpu.index()).map_or((0, 0), |q| {
            let q = q.lock();
            (q.hardirqs.len(), q.softirqs.len())
        })
    }

    /// How many softirq work items wait on `cpu`.
    pub fn pending_softirqs(&self, cpu: CpuId) -> usize {
        self.irqs
            .per_cpu
            .get(cpu.index())
            .map_or(0, |q| q.lock().softirqs.len())
    }

    /// Delivers one pending hard interrupt to `cx` if its IRQs are enabled: the handler runs in
    /// hardirq context, then `irq_exit()` runs pending softirqs if the interrupted context allows.
    /// Returns whether an interrupt was delivered.
    pub fn deliver_irq(&self, cx: &Cpu) -> bool {
        if cx.irqs_disabled() || !self.cpu_online(cx.id()) {
            return false;
        }
        let Some(irq) = self.irqs.per_cpu[cx.id().index()]
            .lock()
            .hardirqs
            .pop_front()
        else {
            return false;
        };
        cx.hardirq_enter();
        match irq.entry {
            IrqEntry::Device(nr) => {
                crate::ktrace!(cx, target: "irq", "irq_handler_entry", "irq={} name={}", nr, irq.name);
                (irq.handler)(cx);
                crate::ktrace!(cx, target: "irq", "irq_handler_exit", "irq={} ret=handled", nr);
            }
            IrqEntry::CallFunctionSingle => {
                crate::ktrace!(
                    cx,
                    target: "irq_vectors",
                    "call_function_single_entry",
                    "vector={}",
                    CALL_FUNCTION_SINGLE_VECTOR
                );
                (irq.handler)(cx);
                crate::ktrace!(
                    cx,
                    target: "irq_vectors",
                    "call_function_single_exit",
                    "vector={}",
                    CALL_FUNCTION_SINGLE_VECTOR
                );
            }
        }
        cx.hardirq_exit();
        // irq_exit() -> invoke_softirq(): only if not interrupting an interrupt or a BH-off section.
        if cx.preempt_count()
            & (crate::kernel::SOFTIRQ_MASK | crate::kernel::HARDIRQ_MASK | crate::kernel::NMI_MASK)
            == 0
            && cx.softirq_count() == 0
        {
            self.run_softirqs(cx);
        }
        true
    }

    /// `__do_softirq()`/`ksoftirqd` on `cx`'s CPU: runs every pending softirq work item in softirq
    /// context. Returns how many ran.
    pub fn run_softirqs(&self, cx: &Cpu) -> usize {
        let mut n = 0;
        loop {
            let Some((vec, work)) = self.irqs.per_cpu[cx.id().index()]
                .lock()
                .softirqs
                .pop_front()
            else {
                break;
            };
            cx.with_softirq(|cx| {
                trace_softirq_entry(cx, vec);
                work(cx);
                trace_softirq_exit(cx, vec);
            });
            n += 1;
        }
        n
    }
}

/// `trace_softirq_entry()` in `handle_softirqs()`: `vec=%u [action=%s]`.
pub(crate) fn trace_softirq_entry(cx: &Cpu, vec: SoftirqVec) {
    crate::ktrace!(cx, target: "irq", "softirq_entry", "vec={} [action={}]", vec.nr(), vec.name());
}

/// `trace_softirq_exit()`: `vec=%u [action=%s]`.
pub(crate) fn trace_softirq_exit(cx: &Cpu, vec: SoftirqVec) {
    crate::ktrace!(cx, target: "irq", "softirq_exit", "vec={} [action={}]", vec.nr(), vec.name());
}

impl Cpu {
    /// `irq_thread()` running a `request_threaded_irq()` thread function (`irq_thread_fn()`):
    /// `current` is the `irq/NR-NAME` thread for the call, in plain task context (preemptible,
    /// IRQs on, no BH or RCU section). Restores `current` afterwards.
    pub fn irq_thread_fn<R>(&self, nr: u32, name: &str, f: impl FnOnce(&Cpu) -> R) -> R {
        let prev = self.current();
        self.set_current(crate::kernel::Task::irq_thread(nr, name));
        let r = f(self);
        self.set_current(prev);
        r
    }

    /// `irq_thread()` running a handler forced into its thread (`irq_forced_thread_fn()`, what
    /// [`Kernel::force_irqthreads`] makes of every handler on PREEMPT_RT): `local_bh_disable()`
    /// around the handler (on RT: the softirq local lock and an RCU read-side section, not a
    /// `preempt_count` change, so the thread stays preemptible) and, on !RT only,
    /// `local_irq_disable()` too, as the handler was written for hardirq context.
    pub fn irq_forced_thread_fn<R>(&self, nr: u32, name: &str, f: impl FnOnce(&Cpu) -> R) -> R {
        self.irq_thread_fn(nr, name, |cx| {
            cx.local_bh_disable();
            let rt = cx.config().preempt_rt();
            if !rt {
                cx.local_irq_disable();
            }
            let r = f(cx);
            if !rt {
                cx.local_irq_enable();
            }
            cx.local_bh_enable();
            r
        })
    }
}

#[cfg(test)]
mod tests {
    use super::SoftirqVec;
    use crate::kernel::trace::tests::{capture, check_formats};
    use crate::kernel::{Kernel, KernelConfig, PreemptModel, Task};
    use crate::CpuId;

    #[test]
    fn interrupts_trace_numbered_irqs_vectors_and_the_ipi() {
        let k = Kernel::new(KernelConfig::for_model(PreemptModel::Full), 2).unwrap();
        let c0 = k.cpu(CpuId(0)).unwrap();
        let c1 = k.cpu(CpuId(1)).unwrap();
        // CPU1 idles: the live trace's `<idle>-0 ... d.h1.` lines.
        c1.set_current(Task::idle(CpuId(1)));
        let ev = capture(|| {
            let kk = k.clone();
            k.raise_irq(
                CpuId(1),
                "virtio1-req.0",
                Box::new(move |cx| kk.raise_softirq(cx, SoftirqVec::Block, Box::new(|_| {}))),
            )
            .unwrap();
            k.raise_irq(CpuId(1), "nvme0q1", Box::new(|_| {})).unwrap();
            k.raise_irq(CpuId(1), "virtio1-req.0", Box::new(|_| {}))
                .unwrap();
            while k.deliver_irq(&c1) {}
            k.send_ipi(&c0, CpuId(1), Box::new(|_| {})).unwrap();
            assert!(k.deliver_irq(&c1));
        });
        assert_eq!(check_formats(&ev), Vec::<String>::new());
        let lines: Vec<String> = ev
            .iter()
            .map(|e| {
                format!(
                    "{} {}-{} {}",
                    e.flags.as_deref().unwrap(),
                    e.comm.as_deref().unwrap(),
                    e.pid.unwrap(),
                    e.message
                )
            })
            .collect();
        assert_eq!(
            lines,
            [
                "d.h1. <idle>-0 irq_handler_entry: irq=24 name=virtio1-req.0",
                "d.h1. <idle>-0 softirq_raise: vec=4 [action=BLOCK]",
                "d.h1. <idle>-0 irq_handler_exit: irq=24 ret=handled",
                "..s1. <idle>-0 softirq_entry: vec=4 [action=BLOCK]",
                "..s1. <idle>-0 softirq_exit: vec=4 [action=BLOCK]",
                "d.h1. <idle>-0 irq_handler_entry: irq=25 name=nvme0q1",
                "d.h1. <idle>-0 irq_handler_exit: irq=25 ret=handled",
                "d.h1. <idle>-0 irq_handler_entry: irq=24 name=virtio1-req.0",
                "d.h1. <idle>-0 irq_handler_exit: irq=24 ret=handled",
                "...1. biosim/0-1000 ipi_send_cpu: cpu=1 callsite=generic_exec_single+0x0/0x0 callback=generic_smp_call_function_single_interrupt+0x0/0x0",
                "d.h1. <idle>-0 call_function_single_entry: vector=251",
                "d.h1. <idle>-0 call_function_single_exit: vector=251",
            ]
        );
    }
}
