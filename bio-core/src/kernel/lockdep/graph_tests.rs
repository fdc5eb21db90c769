//! Tests of the dependency graph ([`super::graph`]), the pseudo-locks (`fs_reclaim`, SRCU,
//! `q_usage_counter`, sb freeze percpu rwsems) and `lockdep_assert_held()`.

use super::graph::{DEP_EN_MASK, DEP_ER_MASK, DEP_SN_MASK, DEP_SR_MASK};
use super::*;
use crate::kernel::srcu::SrcuStruct;
use crate::kernel::{memalloc_noio_restore, memalloc_noio_save, CpuId, KernelConfig};
use crate::mm::gfp::{fs_reclaim_scope, might_alloc, GfpFlags};
use crate::sync::UntrackedArc;

fn kernel() -> UntrackedArc<Kernel> {
    Kernel::new(KernelConfig::default(), 2).unwrap()
}

/// Takes `names` in order on `cx` (each with `read`), releases them innermost first, and
/// returns the first report.
fn nest(cx: &Cpu, class: LockClass, names: &[(&'static str, LockRead)]) -> Option<Report> {
    let mut held = Vec::new();
    let mut first = None;
    for &(name, read) in names {
        let (h, r) = cx.lock_acquire_mode(class, name, read);
        held.push(h);
        first = first.or(r);
    }
    while let Some(h) = held.pop() {
        cx.lock_release(h);
    }
    first
}

fn w(name: &'static str) -> (&'static str, LockRead) {
    (name, LockRead::Write)
}

fn r(name: &'static str) -> (&'static str, LockRead) {
    (name, LockRead::Read)
}

/// The module docs' second `text` block: the circular dependency example.
/// docs/detectors/lockdep.md quotes these reports verbatim in ```text blocks (`[..]` elides
/// part of a line, as in the console examples): a report that changes must change the page too.
pub(super) fn assert_quoted_in_lockdep_md(message: &str) {
    const PAGE: &str = include_str!("../../../../docs/detectors/lockdep.md");
    let line_matches = |want: &str, got: &str| {
        let mut parts = want.split("[..]");
        let first = parts.next().unwrap_or("");
        let Some(mut rest) = got.strip_prefix(first) else {
            return false;
        };
        let parts: Vec<&str> = parts.collect();
        for (i, part) in parts.iter().enumerate() {
            if i + 1 == parts.len() {
                return rest.ends_with(part);
            }
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        rest.is_empty()
    };
    let quoted = PAGE.split("```text\n").skip(1).any(|block| {
        let block = block.split("\n```").next().unwrap_or("");
        block.lines().count() == message.lines().count()
            && block
                .lines()
                .zip(message.lines())
                .all(|(w, g)| line_matches(w, g))
    });
    assert!(
        quoted,
        "docs/detectors/lockdep.md does not quote this report verbatim:\n{message}"
    );
}

#[test]
fn the_lockdep_md_matcher_elides_only_where_the_page_says_so() {
    // The matcher itself must be able to fail: a report the page does not quote.
    let r = std::panic::catch_unwind(|| assert_quoted_in_lockdep_md("WARNING: not on the page"));
    assert!(r.is_err());
}

fn documented_circular_splat() -> String {
    let src = include_str!("mod.rs");
    let fence = "//! ```text\n";
    let first = src.find(fence).unwrap() + fence.len();
    let start = first + src[first..].find(fence).unwrap() + fence.len();
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

fn dep(k: &Kernel, prev: &str, next: &str) -> Option<u8> {
    k.lockdep.with_state(|s| s.graph.dependency(prev, next))
}

/// CPU0 takes A then B, CPU1 B then A: the report of CPU1's second acquisition.
fn abba(k: &UntrackedArc<Kernel>) -> Option<Report> {
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    assert!(nest(&cx0, LockClass::Mutex, &[w("lock_A"), w("lock_B")]).is_none());
    let (b, r) = cx1.lock_acquire(LockClass::Mutex, "lock_B");
    assert!(r.is_none());
    let (a, r) = cx1.lock_acquire(LockClass::Mutex, "lock_A");
    cx1.lock_release(a);
    cx1.lock_release(b);
    r
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "must be reported")
)]
#[cfg_attr(
    feature = "bug-lockdep-every-splat",
    should_panic(expected = "turned lockdep off")
)]
fn abba_on_two_flows_is_a_circular_dependency_in_lockdeps_layout() {
    let k = kernel();
    let r = abba(&k).expect("ABBA must be reported");
    assert_eq!(r.kind, ReportKind::CircularLockDependency);
    let expected = [
        "WARNING: possible circular locking dependency detected",
        "------------------------------------------------------",
        "biosim/1/1001 is trying to acquire lock:",
        "(lock_A){+.+.}",
        "but task is already holding lock:",
        "(lock_B){+.+.}",
        "which lock already depends on the new lock.",
        "the existing dependency chain (in reverse order) is:",
        "-> #1 (lock_B){+.+.}:",
        "       biosim/0/1000 on CPU0 [HC0[0]:SC0[0]:HE1:SE1]",
        "-> #0 (lock_A){+.+.}:",
        "       biosim/1/1001 on CPU1 [HC0[0]:SC0[0]:HE1:SE1]",
        "other info that might help us debug this:",
        " Possible unsafe locking scenario:",
        "       CPU0                    CPU1",
        "       ----                    ----",
        "  lock(lock_B);",
        "                               lock(lock_A);",
        "                               lock(lock_B);",
        "  lock(lock_A);",
        " *** DEADLOCK ***",
        "1 lock held by biosim/1/1001:",
        " #0: (lock_B){+.+.}",
    ];
    let lines: Vec<&str> = r.message.lines().collect();
    for (i, (got, want)) in lines.iter().zip(expected.iter()).enumerate() {
        assert_eq!(got, want, "line {i} of\n{}", r.message);
    }
    assert_eq!(lines.len(), expected.len(), "{}", r.message);
    assert_eq!(
        r.message,
        documented_circular_splat(),
        "the module docs quote it"
    );
    assert_quoted_in_lockdep_md(&r.message);
    assert_eq!(k.reports().len(), 1);
    assert!(!k.debug_locks(), "the splat turned lockdep off");
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "must be reported")
)]
fn a_three_class_chain_prints_chain_exists_of() {
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    assert!(nest(&cx0, LockClass::Mutex, &[w("A"), w("B")]).is_none());
    assert!(nest(&cx0, LockClass::Mutex, &[w("B"), w("C")]).is_none());
    let r = nest(&cx1, LockClass::Mutex, &[w("C"), w("A")]).expect("C -> A must be reported");
    assert_eq!(r.kind, ReportKind::CircularLockDependency);
    let m = &r.message;
    assert!(
        m.contains(
            "the existing dependency chain (in reverse order) is:\n\
             -> #2 (C){+.+.}:\n       biosim/0/1000 on CPU0 [HC0[0]:SC0[0]:HE1:SE1]\n\
             -> #1 (B){+.+.}:\n       biosim/0/1000 on CPU0 [HC0[0]:SC0[0]:HE1:SE1]\n\
             -> #0 (A){+.+.}:\n       biosim/1/1001 on CPU1 [HC0[0]:SC0[0]:HE1:SE1]\n"
        ),
        "{m}"
    );
    assert!(
        m.contains(
            "other info that might help us debug this:\n\
             Chain exists of:\n  A --> B --> C\n \
             Possible unsafe locking scenario:\n"
        ),
        "{m}"
    );
    assert!(
        m.contains(
            "  lock(C);\n                               lock(B);\n\
             \x20                              lock(C);\n  lock(A);\n *** DEADLOCK ***"
        ),
        "{m}"
    );
}

#[test]
fn the_same_order_twice_is_quiet_and_walks_the_graph_once() {
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    for _ in 0..1000 {
        assert!(nest(&cx0, LockClass::Mutex, &[w("A"), w("B")]).is_none());
        assert!(nest(&cx1, LockClass::Mutex, &[w("A"), w("B")]).is_none());
    }
    assert!(k.reports().is_empty(), "{:#?}", k.reports().all());
    assert_eq!(dep(&k, "A", "B"), Some(DEP_EN_MASK));
    assert_eq!(dep(&k, "B", "A"), None);
    // Chains [A] and [A, B]; one check_noncircular() walk, for the new A -> B. Every later
    // acquisition was a lock_chains hit.
    let (chains, walks) = k
        .lockdep
        .with_state(|s| (s.graph.nr_lock_chains(), s.graph.bfs_walks));
    assert_eq!(chains, 2);
    if cfg!(feature = "bug-lockdep-no-graph") {
        assert_eq!(walks, 0);
    } else {
        assert_eq!(walks, 1);
    }
}

#[test]
fn locks_of_a_hardirq_do_not_depend_on_the_task_locks_it_interrupted() {
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    let (a, r) = cx.lock_acquire(LockClass::Spinlock, "task.lock");
    assert!(r.is_none());
    assert!(cx
        .with_hardirq(|c| nest(c, LockClass::RawSpinlock, &[w("irq.lock"), w("irq.inner")]))
        .is_none());
    cx.lock_release(a);
    assert_eq!(dep(&k, "task.lock", "irq.lock"), None);
    assert_eq!(dep(&k, "irq.lock", "irq.inner"), Some(DEP_EN_MASK));
    assert!(k.reports().is_empty(), "{:#?}", k.reports().all());
}

#[test]
fn taking_a_held_mutex_again_is_recursive_locking() {
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    let r = nest(
        &cx,
        LockClass::Mutex,
        &[w("&q->sysfs_lock"), w("&q->sysfs_lock")],
    )
    .expect("a held mutex taken again must be reported");
    assert_eq!(r.kind, ReportKind::RecursiveLocking);
    let expected = "WARNING: possible recursive locking detected\n\
        --------------------------------------------\n\
        biosim/0/1000 is trying to acquire lock:\n\
        (&q->sysfs_lock){+.+.}\n\
        but task is already holding lock:\n\
        (&q->sysfs_lock){+.+.}\n\
        other info that might help us debug this:\n \
        Possible unsafe locking scenario:\n       \
        CPU0\n       \
        ----\n  \
        lock(&q->sysfs_lock);\n  \
        lock(&q->sysfs_lock);\n \
        *** DEADLOCK ***\n \
        May be due to missing lock nesting notation\n\
        1 lock held by biosim/0/1000:\n \
        #0: (&q->sysfs_lock){+.+.}";
    assert_eq!(r.message, expected);
    assert_quoted_in_lockdep_md(&r.message);
}

#[test]
fn a_nested_down_read_of_one_rwsem_is_recursive_locking_with_read_usage() {
    // rwsem readers are not recursive (read == 1): a writer waiting in between blocks the
    // second down_read().
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    let r = nest(
        &cx,
        LockClass::RwSemaphore,
        &[r("&sb->s_umount"), r("&sb->s_umount")],
    )
    .expect("down_read() nested must be reported");
    assert_eq!(r.kind, ReportKind::RecursiveLocking);
    // get_usage_chars(): only the _READ halves are set (HARDIRQ-ON-R, SOFTIRQ-ON-R).
    assert!(
        r.message.ends_with(" #0: (&sb->s_umount){.+.+}"),
        "{}",
        r.message
    );
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "must be reported")
)]
fn srcu_read_then_gfp_kernel_against_synchronize_srcu_in_reclaim_is_a_cycle() {
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    let srcu = SrcuStruct::new("&set->srcu");
    // A blocking dispatch allocates with GFP_KERNEL inside the SRCU read section.
    let (idx, r) = srcu.srcu_read_lock(&cx0);
    assert!(r.is_none());
    might_alloc(GfpFlags::GFP_KERNEL, &cx0);
    srcu.srcu_read_unlock(idx, &cx0);
    assert!(k.reports().is_empty(), "{:#?}", k.reports().all());
    assert!(dep(&k, "&set->srcu", "fs_reclaim").is_some());
    // Reclaim waits for the SRCU readers.
    let (r, acq) = fs_reclaim_scope(GfpFlags::GFP_KERNEL, &cx1, |c| srcu.synchronize_srcu(c));
    assert!(acq.is_none());
    let r = r.expect("srcu -> fs_reclaim -> srcu must be reported");
    assert_eq!(r.kind, ReportKind::CircularLockDependency);
    assert_quoted_in_lockdep_md(&r.message);
    let lines: Vec<&str> = r.message.lines().collect();
    assert_eq!(lines[3], "(&set->srcu){.+.+}");
    assert_eq!(lines[5], "(fs_reclaim){+.+.}");
    assert_eq!(lines[8], "-> #1 (fs_reclaim){+.+.}:");
    assert_eq!(lines[10], "-> #0 (&set->srcu){.+.+}:");
    let scenario = lines
        .iter()
        .position(|l| l.starts_with("  lock(fs_reclaim)"));
    let s = scenario.unwrap_or_else(|| panic!("{}", r.message));
    assert_eq!(
        lines[s + 1],
        "                               lock(&set->srcu);"
    );
    assert_eq!(
        lines[s + 2],
        "                               lock(fs_reclaim);"
    );
    // lock_sync(): the scenario says sync(), and nothing stays held.
    assert_eq!(lines[s + 3], "  sync(&set->srcu);");
    assert!(cx1.held_locks().is_empty());
}

/// The reader of the cycle test allocating under `noio`, then reclaim syncing the SRCU.
fn srcu_reader_allocates_then_reclaim_syncs(noio: bool, gfp: GfpFlags) -> UntrackedArc<Kernel> {
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    let srcu = SrcuStruct::new("&set->srcu");
    let saved = noio.then(|| memalloc_noio_save(&cx0));
    let (idx, _) = srcu.srcu_read_lock(&cx0);
    might_alloc(gfp, &cx0);
    srcu.srcu_read_unlock(idx, &cx0);
    if let Some(saved) = saved {
        memalloc_noio_restore(&cx0, saved);
    }
    let (r, _) = fs_reclaim_scope(GfpFlags::GFP_KERNEL, &cx1, |c| srcu.synchronize_srcu(c));
    assert!(r.is_none(), "GFP_NOIO takes no fs_reclaim, quiet: {r:?}");
    k
}

#[test]
#[cfg_attr(
    feature = "bug-fs-reclaim-ignores-noio",
    should_panic(expected = "takes no fs_reclaim")
)]
fn the_same_with_gfp_noio_is_quiet() {
    let k = srcu_reader_allocates_then_reclaim_syncs(false, GfpFlags::GFP_NOIO);
    assert_eq!(dep(&k, "&set->srcu", "fs_reclaim"), None);
    assert!(k.reports().is_empty(), "{:#?}", k.reports().all());
}

#[test]
#[cfg_attr(
    feature = "bug-fs-reclaim-ignores-noio",
    should_panic(expected = "takes no fs_reclaim")
)]
fn the_same_under_memalloc_noio_save_is_quiet() {
    let k = srcu_reader_allocates_then_reclaim_syncs(true, GfpFlags::GFP_KERNEL);
    assert_eq!(dep(&k, "&set->srcu", "fs_reclaim"), None);
    assert!(k.reports().is_empty(), "{:#?}", k.reports().all());
}

#[test]
#[cfg_attr(
    feature = "bug-fs-reclaim-ignores-noio",
    should_panic(expected = "takes no fs_reclaim")
)]
fn gfp_nofs_and_nowait_take_no_fs_reclaim_and_reclaim_does_not_retake_it() {
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    let (m, _) = cx.lock_acquire(LockClass::Mutex, "m");
    might_alloc(GfpFlags::GFP_NOFS, &cx);
    let (m2, _) = cx.lockdep_acquire(LockClass::Spinlock, "s");
    might_alloc(GfpFlags::GFP_NOWAIT, &cx);
    cx.lock_release(m2);
    cx.lock_release(m);
    assert_eq!(
        dep(&k, "m", "fs_reclaim"),
        None,
        "GFP_NOFS takes no fs_reclaim"
    );
    assert_eq!(
        dep(&k, "s", "fs_reclaim"),
        None,
        "GFP_NOWAIT takes no fs_reclaim"
    );
    // In reclaim (PF_MEMALLOC) a GFP_KERNEL allocation does not enter reclaim again: no
    // fs_reclaim inside fs_reclaim, no recursive locking.
    let ((), r) = fs_reclaim_scope(GfpFlags::GFP_KERNEL, &cx, |c| {
        might_alloc(GfpFlags::GFP_KERNEL, c);
        assert_eq!(c.held_locks().len(), 1);
    });
    assert!(r.is_none());
    assert!(k.reports().is_empty(), "{:#?}", k.reports().all());
    assert!(cx.held_locks().is_empty());
    // A lock taken in reclaim records fs_reclaim -> L; GFP_KERNEL under L records L -> it.
    let ((), _) = fs_reclaim_scope(GfpFlags::GFP_KERNEL, &cx, |c| {
        assert!(nest(c, LockClass::Mutex, &[w("shrinker.lock")]).is_none());
    });
    assert_eq!(dep(&k, "fs_reclaim", "shrinker.lock"), Some(DEP_EN_MASK));
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "must be reported")
)]
fn gfp_kernel_under_a_lock_that_reclaim_takes_is_a_cycle() {
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    let ((), _) = fs_reclaim_scope(GfpFlags::GFP_KERNEL, &cx, |c| {
        assert!(nest(c, LockClass::Mutex, &[w("shrinker.lock")]).is_none());
    });
    let (m, _) = cx.lock_acquire(LockClass::Mutex, "shrinker.lock");
    might_alloc(GfpFlags::GFP_KERNEL, &cx);
    cx.lock_release(m);
    let r = k
        .reports()
        .of_kind(ReportKind::CircularLockDependency)
        .pop()
        .expect("shrinker.lock -> fs_reclaim -> shrinker.lock must be reported");
    assert!(
        r.message.contains("  lock(shrinker.lock);\n"),
        "{}",
        r.message
    );
    assert!(r.message.contains("  lock(fs_reclaim);\n"), "{}", r.message);
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-read-as-write",
    should_panic(expected = "quiet")
)]
fn srcu_readers_nest_freely() {
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    let s = SrcuStruct::new("&set->srcu");
    let t = SrcuStruct::new("&other->srcu");
    // The same srcu twice, and two srcus in opposite orders on two flows.
    let (i1, r1) = s.srcu_read_lock(&cx0);
    let (i2, r2) = s.srcu_read_lock(&cx0);
    assert!(r1.or(r2).is_none(), "nested readers of one srcu are quiet");
    let (j, r) = t.srcu_read_lock(&cx0);
    assert!(r.is_none(), "quiet");
    t.srcu_read_unlock(j, &cx0);
    s.srcu_read_unlock(i2, &cx0);
    s.srcu_read_unlock(i1, &cx0);
    let (j, _) = t.srcu_read_lock(&cx1);
    let (i, r) = s.srcu_read_lock(&cx1);
    assert!(
        r.is_none(),
        "recursive readers in opposite orders are quiet: {r:?}"
    );
    s.srcu_read_unlock(i, &cx1);
    t.srcu_read_unlock(j, &cx1);
    assert!(k.reports().is_empty(), "quiet: {:#?}", k.reports().all());
    assert_eq!(dep(&k, "&set->srcu", "&other->srcu"), Some(DEP_SR_MASK));
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-read-as-write",
    should_panic(expected = "quiet")
)]
fn srcu_readers_and_a_mutex_in_opposite_orders_are_quiet() {
    // An SRCU reader never waits for a mutex holder to leave a read section: srcu -(SN)-> m
    // then m -(ER)-> srcu is no strong cycle.
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    let s = SrcuStruct::new("&set->srcu");
    let (i, _) = s.srcu_read_lock(&cx0);
    assert!(nest(&cx0, LockClass::Mutex, &[w("&q->sysfs_lock")]).is_none());
    s.srcu_read_unlock(i, &cx0);
    let (m, _) = cx1.lock_acquire(LockClass::Mutex, "&q->sysfs_lock");
    let (i, r) = s.srcu_read_lock(&cx1);
    assert!(r.is_none(), "quiet: {r:?}");
    s.srcu_read_unlock(i, &cx1);
    cx1.lock_release(m);
    assert!(k.reports().is_empty(), "quiet: {:#?}", k.reports().all());
    assert_eq!(dep(&k, "&q->sysfs_lock", "&set->srcu"), Some(DEP_ER_MASK));
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "must be reported")
)]
fn synchronize_srcu_under_a_mutex_a_reader_takes_is_a_cycle() {
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    let s = SrcuStruct::new("&set->srcu");
    let (i, _) = s.srcu_read_lock(&cx0);
    assert!(nest(&cx0, LockClass::Mutex, &[w("&q->sysfs_lock")]).is_none());
    s.srcu_read_unlock(i, &cx0);
    let (m, _) = cx1.lock_acquire(LockClass::Mutex, "&q->sysfs_lock");
    let r = s.synchronize_srcu(&cx1);
    cx1.lock_release(m);
    let r = r.expect("synchronize_srcu() under a reader's mutex must be reported");
    assert_eq!(r.kind, ReportKind::CircularLockDependency);
    assert!(r.message.contains("  sync(&set->srcu);"), "{}", r.message);
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-read-as-write",
    should_panic(expected = "quiet")
)]
fn sb_writers_read_and_srcu_read_in_opposite_orders_are_quiet() {
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    let s = SrcuStruct::new("&set->srcu");
    let (sb, _) = cx0.lock_acquire_mode(LockClass::PercpuRwsem, "sb_writers#3", LockRead::Read);
    let (i, r) = s.srcu_read_lock(&cx0);
    assert!(r.is_none());
    s.srcu_read_unlock(i, &cx0);
    cx0.lock_release(sb);
    let (i, _) = s.srcu_read_lock(&cx1);
    let (sb, r) = cx1.lock_acquire_mode(LockClass::PercpuRwsem, "sb_writers#3", LockRead::Read);
    assert!(r.is_none(), "quiet: {r:?}");
    cx1.lock_release(sb);
    s.srcu_read_unlock(i, &cx1);
    assert!(k.reports().is_empty(), "quiet: {:#?}", k.reports().all());
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "must be reported")
)]
fn rwsem_read_read_abba_is_reported_as_rwsem_readers_are_not_recursive() {
    // lib/locking-selftest.c: rwsem readers (read == 1) block behind a waiting writer, so
    // down_read(A); down_read(B) against down_read(B); down_read(A) deadlocks once writers
    // queue on both: -(SN)-> -(SN)-> is a strong cycle.
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    let c = LockClass::RwSemaphore;
    assert!(nest(&cx0, c, &[r("rwsem_A"), r("rwsem_B")]).is_none());
    assert_eq!(dep(&k, "rwsem_A", "rwsem_B"), Some(DEP_SN_MASK));
    let rep = nest(&cx1, c, &[r("rwsem_B"), r("rwsem_A")])
        .expect("rwsem read-read ABBA must be reported");
    assert_eq!(rep.kind, ReportKind::CircularLockDependency);
    assert!(
        rep.message.contains(
            "  rlock(rwsem_B);\n                               lock(rwsem_A);\n\
             \x20                              lock(rwsem_B);\n  rlock(rwsem_A);\n"
        ),
        "{}",
        rep.message
    );
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "must be reported")
)]
fn rwsem_read_write_abba_is_reported() {
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    let c = LockClass::RwSemaphore;
    assert!(nest(&cx0, c, &[r("rwsem_A"), w("rwsem_B")]).is_none());
    let rep = nest(&cx1, c, &[w("rwsem_B"), r("rwsem_A")])
        .expect("rwsem read-write ABBA must be reported");
    assert!(
        rep.message.contains("  lock(rwsem_B);\n") && rep.message.contains("  rlock(rwsem_A);\n"),
        "{}",
        rep.message
    );
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "must be reported")
)]
fn sb_writers_read_under_i_mutex_against_freeze_is_reported() {
    // sb_start_write() (percpu_down_read) then inode_lock(); elsewhere inode_lock() then
    // freeze_super()'s percpu_down_write(): a cycle.
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    let (sb, _) = cx0.lock_acquire_mode(LockClass::PercpuRwsem, "sb_writers#3", LockRead::Read);
    assert!(nest(
        &cx0,
        LockClass::RwSemaphore,
        &[w("&sb->s_type->i_mutex_key#10")]
    )
    .is_none());
    cx0.lock_release(sb);
    let (i, _) = cx1.lock_acquire(LockClass::RwSemaphore, "&sb->s_type->i_mutex_key#10");
    let (sb, rep) = cx1.lock_acquire_mode(LockClass::PercpuRwsem, "sb_writers#3", LockRead::Write);
    cx1.lock_release(sb);
    cx1.lock_release(i);
    let rep = rep.expect("sb_writers write under i_mutex must be reported");
    assert_eq!(rep.kind, ReportKind::CircularLockDependency);
    assert!(
        rep.message.contains("  lock(sb_writers#3);\n"),
        "{}",
        rep.message
    );
}

#[test]
#[cfg_attr(
    feature = "bug-fs-reclaim-ignores-noio",
    should_panic(expected = "takes no fs_reclaim")
)]
fn sb_writers_readers_on_two_flows_and_q_usage_counter_with_gfp_noio_are_quiet() {
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    for cx in [&cx0, &cx1] {
        let (sb, _) = cx.lock_acquire_mode(LockClass::PercpuRwsem, "sb_writers#3", LockRead::Read);
        // blk_queue_enter() under sb_start_write(), then a GFP_NOIO allocation in the queue.
        let (q, _) =
            cx.lock_acquire_mode(LockClass::Map, "&q->q_usage_counter(io)", LockRead::Read);
        might_alloc(GfpFlags::GFP_NOIO, cx);
        cx.lock_release(q);
        cx.lock_release(sb);
    }
    assert_eq!(
        dep(&k, "&q->q_usage_counter(io)", "fs_reclaim"),
        None,
        "GFP_NOIO takes no fs_reclaim"
    );
    assert!(k.reports().is_empty(), "{:#?}", k.reports().all());
    assert_eq!(
        dep(&k, "sb_writers#3", "&q->q_usage_counter(io)"),
        Some(DEP_SN_MASK)
    );
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "must be reported")
)]
fn q_usage_counter_entered_in_reclaim_against_gfp_kernel_inside_it_is_reported() {
    // The 6.x splat: a GFP_KERNEL allocation inside blk_queue_enter() (q_usage_counter(io) ->
    // fs_reclaim) and writeback from reclaim entering the queue (fs_reclaim ->
    // q_usage_counter(io)).
    let k = kernel();
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    const Q: &str = "&q->q_usage_counter(io)";
    let (q, _) = cx0.lock_acquire_mode(LockClass::Map, Q, LockRead::Read);
    might_alloc(GfpFlags::GFP_KERNEL, &cx0);
    cx0.lock_release(q);
    let (rep, _) = fs_reclaim_scope(GfpFlags::GFP_KERNEL, &cx1, |c| {
        let (q, rep) = c.lock_acquire_mode(LockClass::Map, Q, LockRead::Read);
        c.lock_release(q);
        rep
    });
    let rep = rep.expect("fs_reclaim -> q_usage_counter(io) -> fs_reclaim must be reported");
    assert!(
        rep.message.contains(
            "  lock(fs_reclaim);\n                               lock(&q->q_usage_counter(io));"
        ),
        "{}",
        rep.message
    );
    assert!(
        rep.message.contains("  rlock(&q->q_usage_counter(io));"),
        "{}",
        rep.message
    );
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "must be reported")
)]
#[cfg_attr(
    feature = "bug-lockdep-every-splat",
    should_panic(expected = "lockdep is off")
)]
fn only_the_first_circular_dependency_of_a_boot_prints() {
    let k = kernel();
    assert!(abba(&k).is_some(), "the first ABBA must be reported");
    let cx0 = k.cpu(CpuId(0)).unwrap();
    let cx1 = k.cpu(CpuId(1)).unwrap();
    assert!(nest(&cx0, LockClass::Mutex, &[w("C"), w("D")]).is_none());
    assert!(
        nest(&cx1, LockClass::Mutex, &[w("D"), w("C")]).is_none(),
        "lockdep is off"
    );
    assert!(
        nest(&cx1, LockClass::Mutex, &[w("E"), w("E")]).is_none(),
        "lockdep is off"
    );
    assert_eq!(k.reports().len(), 1, "{:#?}", k.reports().all());
    // Nor is anything recorded any more.
    assert_eq!(dep(&k, "C", "D"), None);
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "must be reported")
)]
fn the_same_sequence_gives_the_same_report_bytes() {
    let run = || {
        let k = kernel();
        let cx0 = k.cpu(CpuId(0)).unwrap();
        let cx1 = k.cpu(CpuId(1)).unwrap();
        for names in [["A", "B"], ["B", "C"], ["X", "C"], ["X", "A"]] {
            assert!(nest(&cx0, LockClass::Mutex, &[w(names[0]), w(names[1])]).is_none());
        }
        nest(&cx1, LockClass::Mutex, &[w("C"), w("X"), w("A")])
            .expect("C -> X must be reported")
            .to_string()
    };
    assert_eq!(run(), run());
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-every-splat",
    should_panic(expected = "lockdep is off")
)]
fn lockdep_assert_held_warns_only_when_not_held_and_lockdep_is_on() {
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    let (m, _) = cx.lock_acquire(LockClass::Mutex, "&q->sysfs_lock");
    assert!(cx.lockdep_assert_held("&q->sysfs_lock").is_none());
    cx.lock_release(m);
    let (other, _) = cx.lock_acquire(LockClass::Mutex, "&q->elevator_lock");
    let line = line!() + 1;
    let r = cx.lockdep_assert_held("&q->sysfs_lock");
    cx.lock_release(other);
    let r = r.expect("not held must warn");
    assert_eq!(r.kind, ReportKind::Warn);
    assert_eq!(
        r.message,
        format!(
            "WARNING: CPU: 0 at {}:{line}:{}: lockdep_assert_held(&q->sysfs_lock): \
             not held (held: &q->elevator_lock)",
            file!(),
            "    let r = cx.".len() + 1
        )
    );
    assert_quoted_in_lockdep_md(&r.message);
    // A WARN_ON, not a lockdep splat: lockdep stays on.
    assert!(k.debug_locks());
    assert!(k.debug_locks_off());
    assert!(
        cx.lockdep_assert_held("&q->sysfs_lock").is_none(),
        "silent once lockdep is off"
    );
    assert_eq!(k.reports().len(), 1);
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-valid-state",
    should_panic(expected = "must be reported")
)]
fn read_usage_in_hardirq_conflicts_with_a_write_not_a_read_with_irqs_on() {
    // mark_lock_irq(): IN-HARDIRQ-R against HARDIRQ-ON-R is fine (readers share), against
    // HARDIRQ-ON-W it is the "read in write" conflict.
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    let read = |c: &Cpu| nest(c, LockClass::Spinlock, &[r("&dev->rwlock")]);
    assert!(cx.with_hardirq(read).is_none());
    assert!(
        read(&cx).is_none(),
        "read with IRQs on after a read in hardirq is consistent"
    );
    let rep = nest(&cx, LockClass::Spinlock, &[w("&dev->rwlock")])
        .expect("a write with IRQs on after a read in hardirq must be reported");
    assert_eq!(rep.kind, ReportKind::InconsistentLockState);
    let lines: Vec<&str> = rep.message.lines().collect();
    assert_eq!(
        lines[2],
        "inconsistent {IN-HARDIRQ-R} -> {HARDIRQ-ON-W} usage."
    );
    // HARDIRQ: write '+' (ON-W), read '?' (IN-R and ON-R); SOFTIRQ: write '.' (mark_usage()
    // stopped at the conflict before SOFTIRQ-ON-W), read '+'.
    assert_eq!(lines[4], "(&dev->rwlock){+?.+}");
}

#[test]
#[cfg_attr(
    feature = "bug-lockdep-no-graph",
    should_panic(expected = "exactly one circular dependency")
)]
fn racing_abba_on_os_threads_reports_exactly_once() {
    // The threaded runtime: whichever CPU validates its edge second under graph_lock() sees
    // the other's and reports; the first never can.
    for _ in 0..20 {
        let k = kernel();
        let threads: Vec<_> = [0u32, 1]
            .into_iter()
            .map(|cpu| {
                let k = UntrackedArc::clone(&k);
                std::thread::spawn(move || {
                    let cx = k.cpu(CpuId(cpu)).unwrap();
                    let order = if cpu == 0 {
                        [w("lock_A"), w("lock_B")]
                    } else {
                        [w("lock_B"), w("lock_A")]
                    };
                    let _ = nest(&cx, LockClass::Mutex, &order);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            k.reports()
                .of_kind(ReportKind::CircularLockDependency)
                .len(),
            1,
            "exactly one circular dependency: {:#?}",
            k.reports().all()
        );
        assert_eq!(k.reports().len(), 1);
    }
}
