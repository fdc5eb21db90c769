//! The allocation function, the mempool in front of it and `bio_alloc_bioset()` on top.

use super::*;
use crate::block::{BioSet, ReqOp, BIO_SLAB};
use crate::kernel::{CpuId, KernelConfig, ReportKind};
use crate::mm::mempool::{Mempool, MEMPOOL_TIMED_RETRIES};
use crate::sync::UntrackedArc;
use crate::Kernel;

fn kernel() -> UntrackedArc<Kernel> {
    Kernel::new(KernelConfig::default(), 1).unwrap()
}

/// The slab always fails, blocking masks included.
fn slab_fails(k: &Kernel) {
    k.fault_inject().set_failslab(|f| {
        f.attr.probability = 100;
        f.attr.times = -1;
        f.attr.verbose = 0;
        f.ignore_gfp_reclaim = false;
    });
}

#[test]
fn kmalloc_succeeds_without_injection_and_overflow_is_enomem() {
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    assert_eq!(
        kmalloc("bvec_alloc", 64, GfpFlags::GFP_KERNEL, &cx),
        Ok(SlabObject {
            site: "bvec_alloc",
            size: 64
        })
    );
    assert_eq!(
        kmalloc_array("bvec_alloc", usize::MAX, 2, GfpFlags::GFP_KERNEL, &cx),
        Err(Errno::ENOMEM)
    );
    assert!(k.reports().is_empty());
}

#[test]
fn a_blocking_kmalloc_in_atomic_context_is_might_sleeps_report() {
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    cx.preempt_disable();
    let _ = kmalloc("bvec_alloc", 64, GfpFlags::GFP_NOIO, &cx);
    let _ = kmalloc("bvec_alloc", 64, GfpFlags::GFP_ATOMIC, &cx);
    cx.preempt_enable();
    assert_eq!(k.reports().of_kind(ReportKind::SleepInAtomic).len(), 1);
}

#[test]
fn an_unregistered_site_is_a_warn() {
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    assert!(kmalloc("nosuch", 8, GfpFlags::GFP_KERNEL, &cx).is_ok());
    let w = k.reports().of_kind(ReportKind::Warn);
    assert_eq!(w.len(), 1);
    assert!(w[0].message.contains("unregistered site `nosuch`"));
}

#[test]
fn mempool_blocking_alloc_with_the_slab_failing_gets_the_reserve() {
    let k = kernel();
    slab_fails(&k);
    let cx = k.cpu(CpuId(0)).unwrap();
    let pool = Mempool::new(2, BIO_SLAB);
    let a = pool.mempool_alloc(GfpFlags::GFP_NOIO, &cx).unwrap();
    assert!(a.from_reserve);
    assert_eq!(pool.curr_nr(), 1);
    pool.mempool_free(a);
    assert_eq!(pool.curr_nr(), 2, "mempool_free() refills the reserve");
    assert!(k.reports().is_empty());
}

#[test]
fn mempool_non_blocking_alloc_takes_the_reserve_then_returns_none() {
    let k = kernel();
    slab_fails(&k);
    let cx = k.cpu(CpuId(0)).unwrap();
    let pool = Mempool::new(1, BIO_SLAB);
    let a = pool.mempool_alloc(GfpFlags::GFP_NOWAIT, &cx);
    assert!(a.as_ref().is_some_and(|e| e.from_reserve));
    assert_eq!(pool.mempool_alloc(GfpFlags::GFP_ATOMIC, &cx), None);
    assert!(k.reports().is_empty(), "GFP_NOWAIT returns NULL quietly");
}

#[test]
#[cfg_attr(
    feature = "bug-mempool-wait-untimed",
    should_panic(expected = "no hung-task report for a task that wakes every 5 s")
)]
fn mempool_blocking_alloc_with_nothing_to_wait_for_retries_forever_unreported() {
    let k = kernel();
    slab_fails(&k);
    k.set_hung_task_timeout_secs(120);
    let cx = k.cpu(CpuId(0)).unwrap();
    let pool = Mempool::new(1, BIO_SLAB);
    let _held = pool.mempool_alloc(GfpFlags::GFP_NOIO, &cx).unwrap();
    // The reserve is gone and nothing will free an element: the kernel loops in
    // io_schedule_timeout(5*HZ) forever, switching every 5 s, so khungtaskd never reports it.
    assert_eq!(pool.mempool_alloc(GfpFlags::GFP_NOIO, &cx), None);
    assert!(
        k.reports().of_kind(ReportKind::HungTask).is_empty(),
        "no hung-task report for a task that wakes every 5 s"
    );
    let endless = k.reports().of_kind(ReportKind::EndlessRetry);
    assert_eq!(endless.len(), 1, "biosim says the loop never ends");
    println!("{}", endless[0]);
    assert_eq!(
        endless[0].message,
        "biosim: task biosim/0:1000 retries mempool_alloc() from bio_alloc_bioset forever: io_schedule_timeout(5*HZ) timed out 4 times and no event can free an element (the kernel prints nothing)"
    );
}

#[test]
#[cfg_attr(
    feature = "bug-hung-task-detector-off",
    should_panic(expected = "a timeout shorter than the sleep sees it")
)]
fn a_hung_task_timeout_shorter_than_the_mempool_sleep_reports_it() {
    // khungtaskd checking every 3 s with a 3 s timeout finds a window with no switch in each
    // 5 s sleep: the kernel reports the task in every one, and so does the model.
    let k = kernel();
    slab_fails(&k);
    k.set_hung_task_timeout_secs(3);
    let cx = k.cpu(CpuId(0)).unwrap();
    let pool = Mempool::new(0, BIO_SLAB);
    assert_eq!(pool.mempool_alloc(GfpFlags::GFP_NOIO, &cx), None);
    let hung = k.reports().of_kind(ReportKind::HungTask);
    assert_eq!(
        hung.len(),
        MEMPOOL_TIMED_RETRIES as usize,
        "a timeout shorter than the sleep sees it"
    );
    assert_eq!(k.reports().of_kind(ReportKind::EndlessRetry).len(), 1);
    let lines: Vec<&str> = hung[0].message.lines().collect();
    assert_eq!(
        lines[0],
        "INFO: task biosim/0:1000 blocked for more than 3 seconds."
    );
    assert!(
        lines[4].starts_with("biosim: waiting in mempool_alloc: no event can make it true"),
        "{}",
        lines[4]
    );
}

#[test]
#[cfg_attr(
    feature = "bug-hung-task-detector-off",
    should_panic(expected = "a forever wait is still reported")
)]
fn a_forever_wait_is_still_a_hung_task_with_the_mempool_timed() {
    let k = kernel();
    k.set_hung_task_timeout_secs(120);
    let cx = k.cpu(CpuId(0)).unwrap();
    assert!(!cx.wait_until("test: never", &|| false));
    assert_eq!(
        k.reports().of_kind(ReportKind::HungTask).len(),
        1,
        "a forever wait is still reported"
    );
}

#[test]
#[cfg_attr(
    feature = "bug-fault-oneshot-rearms",
    should_panic(expected = "the one-shot is spent")
)]
fn bio_alloc_bioset_absorbs_an_injected_failure_with_gfp_noio() {
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    let bs = BioSet::new(2);
    k.fault_inject()
        .fail_alloc_once("bio_alloc_bioset")
        .unwrap();
    let bio = bs.bio_alloc_bioset(ReqOp::Write, 8, 1, GfpFlags::GFP_NOIO, &cx);
    assert!(bio.as_ref().is_some_and(|b| b.bi_iter.bi_sector == 8));
    assert_eq!(bs.bio_pool.curr_nr(), 1, "the reserve answered");
    // bio_put() → bio_free(): the element goes back to the reserve.
    drop(bio);
    assert_eq!(
        bs.bio_pool.curr_nr(),
        2,
        "freeing the bio refills the reserve"
    );
    assert_eq!(
        k.fault_inject().armed().0,
        Vec::<&str>::new(),
        "the one-shot is spent"
    );
}

#[test]
#[cfg_attr(
    feature = "bug-fault-oneshot-rearms",
    should_panic(expected = "the one-shot is spent")
)]
fn bio_alloc_bioset_without_direct_reclaim_fails_on_a_bvec_failure() {
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    let bs = BioSet::new(0);
    k.fault_inject().fail_alloc_once("bvec_alloc").unwrap();
    assert!(bs
        .bio_alloc_bioset(ReqOp::Read, 0, 16, GfpFlags::GFP_NOWAIT, &cx)
        .is_none());
    // A bio with inline vecs needs no bvec allocation.
    k.fault_inject().fail_alloc_once("bvec_alloc").unwrap();
    assert!(bs
        .bio_alloc_bioset(ReqOp::Read, 0, 4, GfpFlags::GFP_NOWAIT, &cx)
        .is_some());
    assert_eq!(
        k.fault_inject().armed().0,
        vec!["bvec_alloc"],
        "the one-shot is spent at the first bvec_alloc, not the inline bio"
    );
    // With GFP_NOIO the bvec mempool's second attempt (full mask) succeeds.
    assert!(bs
        .bio_alloc_bioset(ReqOp::Read, 0, 16, GfpFlags::GFP_NOIO, &cx)
        .is_some());
}

/// `mempool_alloc()` after a wait: `goto repeat_alloc` keeps the full mask, so each later round is
/// one slab try, then the reserve. The first round is two (the reduced mask, then the full one).
#[test]
fn mempool_retries_after_a_wait_with_one_full_mask_slab_try_a_round() {
    let k = kernel();
    slab_fails(&k);
    // mempool_alloc() adds __GFP_NOWARN (no fail_dump() line): count the failures by `times`.
    k.fault_inject().set_failslab(|f| f.attr.times = 1000);
    let cx = k.cpu(CpuId(0)).unwrap();
    let pool = Mempool::new(0, BIO_SLAB);
    assert_eq!(pool.mempool_alloc(GfpFlags::GFP_NOIO, &cx), None);
    let tries = (1000 - k.fault_inject().failslab().attr.times) as usize;
    // 2 in the first round, then one after each of the timed waits but the last (which gives up).
    assert_eq!(tries, 2 + (MEMPOOL_TIMED_RETRIES as usize - 1));
}
