//! Lock sequences as `lib/locking-selftest.c` runs them: a few locks taken nested in one context
//! of one CPU (task, task with `local_irq_disable()` or `local_bh_disable()`, softirq, hardirq),
//! then released in reverse, each through bio-core's lockdep (`kernel/locking/lockdep.c`), so a
//! scenario line can state a lock order and get lockdep's verdict (`locks CPU CONTEXT LOCK...`).
//!
//! Each acquisition and release is traced as the kernel's `lock_acquire` / `lock_release`
//! tracepoints (`include/trace/events/lock.h`: `%p [try ][read ]name`), before lockdep runs, as
//! `lock_acquire()` fires its tracepoint first; a report lockdep prints follows its acquisition.
//!
//! One name is one lock (and so one lock class, as bio-core keys classes by name): the
//! selftests' `DEFINE_SPINLOCK(lock_A)` and its class.

use crate::machine::sim::Sim;
use bio_core::kernel::{Cpu, CpuId, HeldLock, LockClass, LockRead};
use std::collections::HashSet;
use std::fmt;
use std::sync::{Mutex, OnceLock};

/// The context a lock sequence runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockContext {
    /// A preemptible task, IRQs and BHs on.
    Task,
    /// A task inside `local_irq_disable()` / `local_irq_enable()`.
    IrqsOff,
    /// A task inside `local_bh_disable()` / `local_bh_enable()`.
    BhOff,
    /// A softirq handler (`handle_softirqs()`: serving a softirq, IRQs on).
    Softirq,
    /// A hard interrupt handler (`irq_enter()`: IRQs off).
    Hardirq,
}

impl LockContext {
    /// Every context, as the scenario line spells it.
    pub const ALL: [(&'static str, LockContext); 5] = [
        ("task", Self::Task),
        ("irqs-off", Self::IrqsOff),
        ("bh-off", Self::BhOff),
        ("softirq", Self::Softirq),
        ("hardirq", Self::Hardirq),
    ];

    /// The scenario word.
    pub fn word(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, c)| *c == self)
            .map_or("task", |(w, _)| w)
    }

    /// Runs `f` on `cx` in this context.
    fn run<R>(self, cx: &Cpu, f: impl FnOnce(&Cpu) -> R) -> R {
        match self {
            Self::Task => f(cx),
            Self::IrqsOff => cx.with_irqs_disabled(f),
            Self::BhOff => cx.with_bh_disabled(f),
            Self::Softirq => cx.with_softirq(f),
            Self::Hardirq => cx.with_hardirq(f),
        }
    }
}

/// How one lock of a sequence is taken: the kernel call, as lockdep sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// `spin_lock()`: a `spinlock_t`, write.
    Spin,
    /// `raw_spin_lock()`: a `raw_spinlock_t`, write.
    RawSpin,
    /// `spin_trylock()` that succeeds: a trylock (`lock_acquire(.., trylock = 1, ..)`).
    TrylockSpin,
    /// `local_lock()`: a `local_lock_t`.
    LocalLock,
    /// `mutex_lock()`.
    Mutex,
    /// `mutex_trylock()` that succeeds.
    TrylockMutex,
    /// `down_write()` on a `struct rw_semaphore`.
    Rwsem,
    /// `down_read()`: `rwsem_acquire_read()`, read == 1 (rwsem readers are not recursive).
    RwsemRead,
    /// `write_lock()` on an `rwlock_t`: an exclusive acquisition of a spinning lock.
    WriteLock,
    /// `read_lock()` on an `rwlock_t`: `rwlock_acquire_read()`, which is a recursive read
    /// (read == 2) only where `read_lock_is_recursive()` says so. With queued rwlocks (x86, the
    /// model's kernel) that is `in_interrupt()`: hardirq, softirq or BHs disabled; in a plain
    /// task (IRQs off or not) it is a non-recursive read (read == 1), because a queued reader
    /// waits behind a queued writer there.
    ReadLock,
    /// `srcu_read_lock()`: a recursive read of the `srcu_struct`'s map.
    SrcuRead,
}

impl LockKind {
    /// Every kind, as the scenario line spells it (`KIND:NAME`).
    pub const ALL: [(&'static str, LockKind); 11] = [
        ("spin", Self::Spin),
        ("raw_spin", Self::RawSpin),
        ("trylock_spin", Self::TrylockSpin),
        ("local_lock", Self::LocalLock),
        ("mutex", Self::Mutex),
        ("trylock_mutex", Self::TrylockMutex),
        ("rwsem", Self::Rwsem),
        ("rwsem_read", Self::RwsemRead),
        ("write_lock", Self::WriteLock),
        ("read_lock", Self::ReadLock),
        ("srcu", Self::SrcuRead),
    ];

    /// The scenario word.
    pub fn word(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("spin", |(w, _)| w)
    }

    /// The kernel function that takes it.
    pub fn kernel_call(self) -> &'static str {
        match self {
            Self::Spin => "spin_lock",
            Self::RawSpin => "raw_spin_lock",
            Self::TrylockSpin => "spin_trylock",
            Self::LocalLock => "local_lock",
            Self::Mutex => "mutex_lock",
            Self::TrylockMutex => "mutex_trylock",
            Self::Rwsem => "down_write",
            Self::RwsemRead => "down_read",
            Self::WriteLock => "write_lock",
            Self::ReadLock => "read_lock",
            Self::SrcuRead => "srcu_read_lock",
        }
    }

    /// The lock class. An `rwlock_t` is a spinning lock whose wait type is `spinlock_t`'s
    /// (`LD_WAIT_CONFIG`), so it is modelled as [`LockClass::Spinlock`].
    pub fn class(self) -> LockClass {
        match self {
            Self::Spin | Self::TrylockSpin | Self::WriteLock | Self::ReadLock => {
                LockClass::Spinlock
            }
            Self::RawSpin => LockClass::RawSpinlock,
            Self::LocalLock => LockClass::LocalLock,
            Self::Mutex | Self::TrylockMutex => LockClass::Mutex,
            Self::Rwsem | Self::RwsemRead => LockClass::RwSemaphore,
            Self::SrcuRead => LockClass::Srcu,
        }
    }

    /// The `read` argument of `lock_acquire()` on `cx` now (see [`LockKind::ReadLock`]).
    pub fn read_on(self, cx: &Cpu) -> LockRead {
        match self {
            Self::RwsemRead => LockRead::Read,
            Self::SrcuRead => LockRead::RecursiveRead,
            Self::ReadLock => {
                // read_lock_is_recursive(): !CONFIG_QUEUED_RWLOCKS || in_interrupt().
                if cx.in_nmi() || cx.in_hardirq() || cx.in_softirq() {
                    LockRead::RecursiveRead
                } else {
                    LockRead::Read
                }
            }
            _ => LockRead::Write,
        }
    }

    /// Whether it is a (successful) trylock.
    pub fn trylock(self) -> bool {
        matches!(self, Self::TrylockSpin | Self::TrylockMutex)
    }
}

/// One lock of a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockStep {
    /// How it is taken.
    pub kind: LockKind,
    /// The lock (and lock class) name, e.g. `&q->queue_lock`.
    pub name: &'static str,
}

impl fmt::Display for LockStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.word(), self.name)
    }
}

/// Lockdep keys classes by `&'static str` and a [`Transition`](super::Transition) is `Copy`:
/// lock names and sequences read from a scenario are interned, each distinct one leaked once,
/// so memory grows with the distinct names a process reads, not with the lines.
fn interned<T: ?Sized + Eq + std::hash::Hash + 'static>(
    set: &'static OnceLock<Mutex<HashSet<&'static T>>>,
    value: &T,
    leak: impl FnOnce() -> &'static T,
) -> &'static T {
    let mut set = set
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(v) = set.get(value) {
        return v;
    }
    let v = leak();
    set.insert(v);
    v
}

/// The `'static` copy of a lock name.
pub fn intern_name(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    interned(&NAMES, name, || Box::leak(name.to_owned().into_boxed_str()))
}

/// The `'static` copy of a lock sequence.
pub fn intern_steps(steps: &[LockStep]) -> &'static [LockStep] {
    static SEQS: OnceLock<Mutex<HashSet<&'static [LockStep]>>> = OnceLock::new();
    interned(&SEQS, steps, || {
        Box::leak(steps.to_vec().into_boxed_slice())
    })
}

/// `%p` of a lock's `lockdep_map`: biosim has no addresses, so a fixed 32-bit mix of the name
/// (FNV-1a, then splitmix64's finalizer), in the kernel's hashed-pointer look
/// (`00000000xxxxxxxx`), the same lock the same value in every run.
fn lock_ptr(name: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    format!("{:016x}", z & 0xffff_ffff)
}

impl Sim {
    /// Runs a lock sequence on `cpu` in `ctx`: takes `steps` nested in order, then releases them
    /// in reverse, as a locking-selftest case does. Refused (`Err`) if the CPU is offline. Each
    /// acquisition goes through lockdep; its reports go to the kernel's report log (and the
    /// trace), where the oracle finds them.
    pub fn lock_seq(&self, cpu: CpuId, ctx: LockContext, steps: &[LockStep]) -> Result<(), String> {
        if !self.kernel.cpu_online(cpu) {
            return Err(format!("{cpu} is offline"));
        }
        let what = if self.rt.recording() {
            let calls: Vec<String> = steps
                .iter()
                .map(|s| format!("{}({})", s.kind.kernel_call(), s.name))
                .collect();
            format!("{} in {}", calls.join(", "), ctx.word())
        } else {
            String::new()
        };
        self.rt
            .on_cpu(cpu, &what, |cx| {
                ctx.run(cx, |cx| {
                    let mut held: Vec<HeldLock> = Vec::with_capacity(steps.len());
                    for s in steps {
                        let read = s.kind.read_on(cx);
                        // lock_acquire() fires trace_lock_acquire() before __lock_acquire().
                        bio_core::ktrace!(
                            cx,
                            target: "lock",
                            "lock_acquire",
                            "{} {}{}{}",
                            lock_ptr(s.name),
                            if s.kind.trylock() { "try " } else { "" },
                            if read == LockRead::Write { "" } else { "read " },
                            s.name
                        );
                        let (h, _report) = if s.kind.trylock() {
                            cx.lock_acquire_try(s.kind.class(), s.name, read)
                        } else {
                            cx.lock_acquire_mode(s.kind.class(), s.name, read)
                        };
                        held.push(h);
                    }
                    while let Some(h) = held.pop() {
                        bio_core::ktrace!(
                            cx,
                            target: "lock",
                            "lock_release",
                            "{} {}",
                            lock_ptr(h.name),
                            h.name
                        );
                        cx.lock_release(h);
                    }
                })
            })
            .ok_or_else(|| format!("{cpu} does not exist"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal names and sequences intern to the same `'static` value; different ones do not.
    #[test]
    fn interning_returns_one_static_copy_per_distinct_value() {
        let a = intern_name("&q->queue_lock");
        let b = intern_name(&String::from("&q->queue_lock"));
        assert!(std::ptr::eq(a, b));
        assert_ne!(intern_name("lock_A"), a);
        let s1 = intern_steps(&[LockStep {
            kind: LockKind::Spin,
            name: a,
        }]);
        let s2 = intern_steps(&[LockStep {
            kind: LockKind::Spin,
            name: b,
        }]);
        assert!(std::ptr::eq(s1, s2));
        let s3 = intern_steps(&[LockStep {
            kind: LockKind::Mutex,
            name: a,
        }]);
        assert!(!std::ptr::eq(s1, s3));
    }

    /// `read_lock()` is a recursive read only in interrupt context (queued rwlocks).
    #[test]
    fn read_lock_is_recursive_only_in_interrupt_context() {
        let k = bio_core::Kernel::boot(bio_core::KernelConfig::default(), 1, 1).unwrap();
        let cx = &k.cpu(CpuId(0)).unwrap();
        let read = |cx: &Cpu| LockKind::ReadLock.read_on(cx);
        assert_eq!(read(cx), LockRead::Read);
        assert_eq!(cx.with_irqs_disabled(read), LockRead::Read);
        assert_eq!(cx.with_bh_disabled(read), LockRead::RecursiveRead);
        assert_eq!(cx.with_softirq(read), LockRead::RecursiveRead);
        assert_eq!(cx.with_hardirq(read), LockRead::RecursiveRead);
        assert_eq!(LockKind::RwsemRead.read_on(cx), LockRead::Read);
        assert_eq!(LockKind::Spin.read_on(cx), LockRead::Write);
    }

    /// The hashed pointer is stable, 16 hex digits with the upper half zero, distinct by name.
    #[test]
    fn lock_pointers_look_hashed_and_are_stable() {
        let p = lock_ptr("lock_A");
        assert_eq!(p.len(), 16);
        assert!(p.starts_with("00000000"), "{p}");
        assert_eq!(p, lock_ptr("lock_A"));
        assert_ne!(p, lock_ptr("lock_B"));
    }
}
