//! Tests of the IRQ-usage checks over the dependency graph (`irq_usage.rs`:
//! `check_irq_usage()`, `check_usage_forwards()`/`check_usage_backwards()`) and of trylocks
//! (`Cpu::lock_acquire_try()`: no dependency of its own, a `prev` while held).

use super::*;
use crate::kernel::{CpuId, KernelConfig};
use crate::sync::UntrackedArc;

fn kernel() -> UntrackedArc<Kernel> {
    Kernel::new(KernelConfig::default(), 2).unwrap()
}

/// Takes `name` (`read`) in `cx`'s current context and releases it; returns the report.
fn take(cx: &Cpu, class: LockClass, name: &'static str, read: LockRead) -> Option<Report> {
    let (h, r) = cx.lock_acquire_mode(class, name, read);
    cx.lock_release(h);
    r
}

/// Takes `outer` then `inner` (each `read`), releases both; returns the first report.
fn nest2(
    cx: &Cpu,
    class: LockClass,
    outer: (&'static str, LockRead),
    inner: (&'static str, LockRead),
) -> Option<Report> {
    let (o, r1) = cx.lock_acquire_mode(class, outer.0, outer.1);
    let (i, r2) = cx.lock_acquire_mode(class, inner.0, inner.1);
    cx.lock_release(i);
    cx.lock_release(o);
    r1.or(r2)
}

/// The `n`-th ```text block of `irq_usage.rs`'s module docs, so that the docs quote exactly
/// what the checks print.
fn documented(n: usize) -> String {
    let src = include_str!("irq_usage.rs");
    let fence = "//! ```text\n";
    let mut start = 0;
    for _ in 0..=n {
        start += src[start..].find(fence).unwrap() + fence.len();
    }
    let end = start + src[start..].find("//! ```\n").unwrap();
    src[start..end]
        .lines()
        .map(|l| {
            l.strip_prefix("//! ")
                .unwrap_or(l.trim_start_matches("//!"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

const W: LockRead = LockRead::Write;

fn dep(k: &Kernel, prev: &str, next: &str) -> Option<u8> {
    k.lockdep.with_state(|s| s.graph.dependency(prev, next))
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-irq-usage",
    should_panic(expected = "must be reported")
)]
#[cfg_attr(
    feature = "bug-lockdep-every-splat",
    should_panic(expected = "turned lockdep off")
)]
#[cfg_attr(
    feature = "bug-lockdep-enabled-ignores-irqs-off",
    should_panic(expected = "IRQs off")
)]
fn hardirq_safe_then_a_new_dependency_on_a_hardirq_unsafe_lock_is_reported() {
    // A is taken in hardirq (HARDIRQ-safe), B with IRQs on (HARDIRQ-unsafe); then a task
    // with IRQs off takes B under A: the new A -> B is check_irq_usage()'s report.
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    assert!(cx0
        .with_hardirq(|c| take(c, LockClass::Spinlock, "&dev->lock", W))
        .is_none());
    assert!(take(&cx1, LockClass::Spinlock, "&q->queue_lock", W).is_none());
    let rep = cx0
        .with_irqs_disabled(|c| {
            nest2(
                c,
                LockClass::Spinlock,
                ("&dev->lock", W),
                ("&q->queue_lock", W),
            )
        })
        .expect("HARDIRQ-safe -> HARDIRQ-unsafe must be reported");
    assert_eq!(
        rep.kind,
        ReportKind::BadIrqDependency,
        "IRQs off marks no HARDIRQ-ON: {}",
        rep.message
    );
    assert_eq!(rep.message, documented(0), "{}", rep.message);
    super::graph_tests::assert_quoted_in_lockdep_md(&rep.message);
    assert!(!k.debug_locks(), "the splat turned lockdep off");
    assert_eq!(k.reports().len(), 1);
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-irq-usage",
    should_panic(expected = "must be reported")
)]
#[cfg_attr(
    feature = "bug-lockdep-enabled-ignores-irqs-off",
    should_panic(expected = "IRQs off")
)]
fn a_chain_through_a_middle_lock_prints_chain_exists_of() {
    // safe -> mid recorded first (IRQs off), unsafe taken with IRQs on, then mid -> unsafe.
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    assert!(cx
        .with_hardirq(|c| take(c, LockClass::Spinlock, "safe", W))
        .is_none());
    let r = cx.with_irqs_disabled(|c| nest2(c, LockClass::Spinlock, ("safe", W), ("mid", W)));
    assert!(r.is_none(), "IRQs off is no usage conflict: {r:?}");
    assert!(take(&cx, LockClass::Spinlock, "unsafe", W).is_none());
    let rep = cx
        .with_irqs_disabled(|c| nest2(c, LockClass::Spinlock, ("mid", W), ("unsafe", W)))
        .expect("safe -> mid -> unsafe must be reported");
    assert_eq!(rep.kind, ReportKind::BadIrqDependency);
    assert!(
        rep.message
            .contains("Chain exists of:\n  safe --> mid --> unsafe\n"),
        "{}",
        rep.message
    );
    assert!(
        rep.message
            .contains("but this new dependency connects a HARDIRQ-irq-safe lock:\n(safe)"),
        "{}",
        rep.message
    );
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-irq-usage",
    should_panic(expected = "must be reported")
)]
#[cfg_attr(
    feature = "bug-lockdep-enabled-ignores-irqs-off",
    should_panic(expected = "IRQs off")
)]
fn the_usage_set_after_the_dependency_is_an_irq_lock_inversion_both_ways() {
    // Backwards: A in hardirq, then A -> B with IRQs off, then B with IRQs on.
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    assert!(cx
        .with_hardirq(|c| take(c, LockClass::Spinlock, "lock_A", W))
        .is_none());
    let r = cx.with_irqs_disabled(|c| nest2(c, LockClass::Spinlock, ("lock_A", W), ("lock_B", W)));
    assert!(r.is_none(), "IRQs off is no usage conflict: {r:?}");
    let rep = take(&cx, LockClass::Spinlock, "lock_B", W)
        .expect("HARDIRQ-ON on B after A -> B must be reported");
    assert_eq!(rep.kind, ReportKind::IrqLockInversion);
    assert_eq!(rep.message, documented(1), "{}", rep.message);
    super::graph_tests::assert_quoted_in_lockdep_md(&rep.message);

    // Forwards: A -> B with IRQs off, B with IRQs on, then A in hardirq.
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    assert!(cx
        .with_irqs_disabled(|c| nest2(c, LockClass::Spinlock, ("lock_A", W), ("lock_B", W)))
        .is_none());
    assert!(take(&cx, LockClass::Spinlock, "lock_B", W).is_none());
    let rep = cx
        .with_hardirq(|c| take(c, LockClass::Spinlock, "lock_A", W))
        .expect("IN-HARDIRQ on A before B must be reported");
    assert_eq!(rep.kind, ReportKind::IrqLockInversion);
    let lines: Vec<&str> = rep.message.lines().collect();
    assert_eq!(lines[2], "biosim/0/1000 just changed the state of lock:");
    assert_eq!(lines[3], "(lock_A){-...}");
    assert_eq!(
        lines[4],
        "but this lock took another, HARDIRQ-unsafe lock in the past:"
    );
    assert_eq!(lines[5], "(lock_B){+.+.}");
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-irq-usage",
    should_panic(expected = "must be reported")
)]
#[cfg_attr(
    feature = "bug-lockdep-enabled-ignores-irqs-off",
    should_panic(expected = "IRQs off")
)]
#[cfg_attr(
    feature = "bug-lockdep-read-as-write",
    should_panic(expected = "reader under reader is no inversion")
)]
fn read_rules_readers_share_but_a_write_under_a_hardirq_reader_does_not() {
    // rwlock_t: read_lock() in hardirq (IN-HARDIRQ-R) and read_lock() with IRQs on elsewhere
    // (HARDIRQ-ON-R). A task nesting the two as readers with IRQs off is fine: a reader in the
    // interrupt never waits for another reader.
    const R2: LockRead = LockRead::RecursiveRead;
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    assert!(cx
        .with_hardirq(|c| take(c, LockClass::Spinlock, "&l1", R2))
        .is_none());
    assert!(take(&cx, LockClass::Spinlock, "&l2", R2).is_none());
    let r = cx.with_irqs_disabled(|c| nest2(c, LockClass::Spinlock, ("&l1", R2), ("&l2", R2)));
    assert!(r.is_none(), "reader under reader is no inversion: {r:?}");
    assert!(
        dep(&k, "&l1", "&l2").is_some(),
        "the dependency is recorded"
    );
    // write_lock(l1); write_lock(l2) with IRQs off: the interrupt's read_lock(l1) waits for
    // the writer, who waits for the IRQs-on reader of l2 (the kernel's exclusive_mask() case).
    let rep = cx
        .with_irqs_disabled(|c| nest2(c, LockClass::Spinlock, ("&l1", W), ("&l2", W)))
        .expect("HARDIRQ-READ-safe -> HARDIRQ-READ-unsafe must be reported");
    assert_eq!(
        rep.kind,
        ReportKind::BadIrqDependency,
        "IRQs off marks no HARDIRQ-ON"
    );
    let lines: Vec<&str> = rep.message.lines().collect();
    assert_eq!(
        lines[0], "WARNING: HARDIRQ-READ-safe -> HARDIRQ-READ-unsafe lock order detected",
        "IRQs off marks no HARDIRQ-ON"
    );
    assert!(
        rep.message
            .contains("... which became HARDIRQ-READ-irq-safe at:\n  biosim/0/1000 on CPU0 [HC1[1]:SC0[0]:HE0:SE1]"),
        "{}",
        rep.message
    );
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-irq-usage",
    should_panic(expected = "must be reported")
)]
fn softirq_safe_then_softirq_unsafe_is_reported_and_hardirq_is_not_involved() {
    // A taken in a softirq (SOFTIRQ-safe, and HARDIRQ-ON: softirqs run with IRQs on), B
    // with BHs on; a task with BHs off (spin_lock_bh()) takes B under A.
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    assert!(cx
        .with_softirq(|c| take(c, LockClass::Spinlock, "&sk->lock", W))
        .is_none());
    assert!(take(&cx, LockClass::Spinlock, "&table->lock", W).is_none());
    let rep = cx
        .with_bh_disabled(|c| {
            nest2(
                c,
                LockClass::Spinlock,
                ("&sk->lock", W),
                ("&table->lock", W),
            )
        })
        .expect("SOFTIRQ-safe -> SOFTIRQ-unsafe must be reported");
    let lines: Vec<&str> = rep.message.lines().collect();
    assert_eq!(
        lines[0],
        "WARNING: SOFTIRQ-safe -> SOFTIRQ-unsafe lock order detected"
    );
    assert_eq!(
        lines[2],
        "biosim/0/1000 [HC0[0]:SC0[2]:HE1:SE0] is trying to acquire:"
    );
    assert_eq!(lines[3], "(&table->lock){+.+.}");
    assert_eq!(lines[5], "(&sk->lock){+.-.}");
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-irq-usage",
    should_panic(expected = "must be reported")
)]
#[cfg_attr(
    feature = "bug-lockdep-enabled-ignores-irqs-off",
    should_panic(expected = "IRQs off")
)]
fn local_locks_are_skipped_but_a_spinlock_in_their_place_is_not() {
    // v6's batcher: local_lock_irqsave() in hardirq, local_lock_irq() in the worker, which
    // then takes a lock taken elsewhere with IRQs on. usage_skip(): a local_lock_t is never
    // the safe end of an inversion.
    for (class, reported) in [(LockClass::LocalLock, false), (LockClass::Spinlock, true)] {
        let k = kernel();
        let cx = k.cpu(CpuId(0)).unwrap();
        let batch = "bio_complete_batch.lock";
        let (h, r) = cx.with_hardirq(|c| c.lockdep_acquire(class, batch));
        cx.with_hardirq(|c| c.lock_release(h));
        assert!(r.is_none());
        assert!(take(&cx, LockClass::Spinlock, "&wq->lock", W).is_none());
        cx.local_irq_disable();
        let (b, r1) = cx.lockdep_acquire(class, batch);
        let (w, r2) = cx.lock_acquire(LockClass::Spinlock, "&wq->lock");
        cx.lock_release(w);
        cx.lock_release(b);
        cx.local_irq_enable();
        assert!(r1.is_none(), "IRQs off is no usage conflict: {r1:?}");
        if reported {
            let rep = r2.expect("a spinlock in the local_lock's place must be reported");
            assert_eq!(rep.kind, ReportKind::BadIrqDependency);
        } else {
            assert!(r2.is_none(), "a local_lock_t is skipped: {r2:?}");
            assert!(k.reports().is_empty(), "{:#?}", k.reports().all());
        }
    }
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-trylock-as-lock",
    should_panic(expected = "a trylock adds no dependency")
)]
fn an_abba_whose_second_side_is_a_trylock_is_no_report() {
    // CPU0: A then B. CPU1: holds B and trylocks A: a trylock cannot wait, so no cycle.
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    assert!(nest2(&cx0, LockClass::Mutex, ("lock_A", W), ("lock_B", W)).is_none());
    let (b, r) = cx1.lock_acquire(LockClass::Mutex, "lock_B");
    assert!(r.is_none());
    let (a, r) = cx1.lock_acquire_try(LockClass::Mutex, "lock_A", W);
    cx1.lock_release(a);
    cx1.lock_release(b);
    assert!(r.is_none(), "a trylock adds no dependency: {r:?}");
    assert_eq!(
        dep(&k, "lock_B", "lock_A"),
        None,
        "a trylock adds no dependency"
    );
    assert!(k.reports().is_empty());
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "must be reported")
)]
#[cfg_attr(
    feature = "bug-lockdep-trylock-as-lock",
    should_panic(expected = "through the trylock")
)]
fn a_held_trylock_is_a_prev_of_what_is_taken_under_it() {
    // CPU0: A then B. CPU1: trylocks B, then takes A (a full acquisition): B -> A closes the
    // cycle. And check_prevs_add() walks through the trylock to the full lock below it.
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    let (x, _) = cx1.lock_acquire(LockClass::Mutex, "lock_X");
    let (t, r) = cx1.lock_acquire_try(LockClass::Mutex, "lock_T", W);
    assert!(r.is_none());
    let (y, r) = cx1.lock_acquire(LockClass::Mutex, "lock_Y");
    assert!(r.is_none());
    for h in [y, t, x] {
        cx1.lock_release(h);
    }
    assert!(
        dep(&k, "lock_T", "lock_Y").is_some(),
        "the held trylock -> Y"
    );
    assert!(
        dep(&k, "lock_X", "lock_Y").is_some(),
        "through the trylock to X -> Y"
    );
    assert_eq!(
        dep(&k, "lock_X", "lock_T"),
        None,
        "nothing into the trylock"
    );

    assert!(nest2(&cx0, LockClass::Mutex, ("lock_A", W), ("lock_B", W)).is_none());
    let (b, r) = cx1.lock_acquire_try(LockClass::Mutex, "lock_B", W);
    assert!(r.is_none());
    let (a, r) = cx1.lock_acquire(LockClass::Mutex, "lock_A");
    cx1.lock_release(a);
    cx1.lock_release(b);
    let rep = r.expect("B (trylocked, held) -> A against A -> B must be reported");
    assert_eq!(rep.kind, ReportKind::CircularLockDependency);
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-trylock-as-lock",
    should_panic(expected = "a trylock marks no USED_IN")
)]
fn a_trylock_in_hardirq_marks_no_used_in_and_checks_no_wait_context() {
    // spin_trylock() in an interrupt, spin_lock() with IRQs on in a task: the trylock never
    // spins, so no IN-HARDIRQ bit and no inconsistent state.
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    let r = cx.with_hardirq(|c| {
        let (h, r) = c.lock_acquire_try(LockClass::Spinlock, "&port->lock", W);
        c.lock_release(h);
        r
    });
    assert!(r.is_none());
    let r = take(&cx, LockClass::Spinlock, "&port->lock", W);
    assert!(r.is_none(), "a trylock marks no USED_IN: {r:?}");
    // mutex_trylock() in an interrupt: no sleep, no invalid wait context.
    let r = cx.with_hardirq(|c| {
        let (h, r) = c.lock_acquire_try(LockClass::Mutex, "&dev->mutex", W);
        c.lock_release(h);
        r
    });
    assert!(
        r.is_none(),
        "a trylock marks no USED_IN and never waits: {r:?}"
    );
    assert!(k.reports().is_empty(), "{:#?}", k.reports().all());
}

/// `calc_depb()` for a plain reader (read 1): A (hardirq-safe) -> R (down_read-style read) with
/// IRQs off, U taken with IRQs on, then R (read) -> U. Backwards from the read-held R, the edge
/// A -> R is `-(EN)->` (`__calc_dep_bitb()`: R is not a recursive reader, A is exclusive), so
/// A's IN-HARDIRQ is found: the kernel reports it. With the forward formula applied backwards
/// the edge would be `-(SN)->`, dropped under a read-held root, and nothing reported.
#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-irq-usage",
    should_panic(expected = "must be reported")
)]
#[cfg_attr(
    feature = "bug-lockdep-enabled-ignores-irqs-off",
    should_panic(expected = "IRQs off")
)]
fn a_plain_reader_as_the_backward_root_still_finds_the_hardirq_safe_writer() {
    const R1: LockRead = LockRead::Read;
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    assert!(cx
        .with_hardirq(|c| take(c, LockClass::Spinlock, "lock_A", W))
        .is_none());
    let r = cx.with_irqs_disabled(|c| nest2(c, LockClass::Spinlock, ("lock_A", W), ("lock_R", R1)));
    assert!(r.is_none(), "IRQs off: {r:?}");
    assert!(take(&cx, LockClass::Spinlock, "lock_U", W).is_none());
    let rep = cx
        .with_irqs_disabled(|c| nest2(c, LockClass::Spinlock, ("lock_R", R1), ("lock_U", W)))
        .expect("A -(EN)-> R, R -> U: HARDIRQ-safe -> HARDIRQ-unsafe must be reported");
    assert_eq!(rep.kind, ReportKind::BadIrqDependency, "{}", rep.message);
    assert_eq!(
        rep.message.lines().next(),
        Some("WARNING: HARDIRQ-safe -> HARDIRQ-unsafe lock order detected")
    );
}

/// The other direction of the same formula: A held as a plain reader, used in hardirq only as a
/// reader (IN-HARDIRQ-R), A -> B (write) with IRQs off, then B -> U with U HARDIRQ-ON. Backwards
/// from B the edge A -> B is `-(ER)->` (A is not exclusive), so only A's write bits count and the
/// kernel reports nothing: an interrupt's read_lock(A) does not wait for a reader.
#[test]
fn a_plain_reader_behind_the_root_counts_with_its_write_bits_only() {
    const R1: LockRead = LockRead::Read;
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    assert!(cx
        .with_hardirq(|c| take(c, LockClass::Spinlock, "lock_A", R1))
        .is_none());
    let r = cx.with_irqs_disabled(|c| nest2(c, LockClass::Spinlock, ("lock_A", R1), ("lock_B", W)));
    assert!(r.is_none(), "IRQs off: {r:?}");
    assert!(take(&cx, LockClass::Spinlock, "lock_U", W).is_none());
    let r = cx.with_irqs_disabled(|c| nest2(c, LockClass::Spinlock, ("lock_B", W), ("lock_U", W)));
    assert!(
        r.is_none(),
        "A -(ER)-> B: A's read-only IRQ usage is no inversion: {}",
        r.map(|r| r.message).unwrap_or_default()
    );
    assert!(k.debug_locks());
}
