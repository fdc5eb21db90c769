//! Fault injection: each knob of `should_fail_ex()`/`should_failslab()` in isolation, the
//! determinism of the seeded PRNG, the one-shots and `fail_make_request`.

use super::*;
use crate::block::{bio_endio, Bio};
use crate::block::{
    submit_bio_noacct, BioEndIo, BlkStatus, BlockDriver, QueueLimits, ReqOp, Submission,
    BLK_STS_IOERR, BLK_STS_OK,
};
use crate::kernel::{CpuId, KernelConfig};
use crate::mm::slab::{kmalloc, kmem_cache_alloc, KmemCache, SLAB_FAILSLAB};
use crate::sync::{Arc, Mutex, UntrackedArc};
use crate::Kernel;

fn kernel() -> UntrackedArc<Kernel> {
    Kernel::new(KernelConfig::default(), 1).unwrap()
}

/// failslab on every candidate, unlimited, printing.
fn always(k: &Kernel) {
    k.fault_inject().set_failslab(|f| {
        f.attr.probability = 100;
        f.attr.times = -1;
        f.attr.verbose = 1;
    });
}

/// `n` GFP_ATOMIC kmallocs at `site`: which failed.
fn pattern(k: &UntrackedArc<Kernel>, site: &'static str, n: usize) -> Vec<bool> {
    let cx = k.cpu(CpuId(0)).unwrap();
    (0..n)
        .map(|_| kmalloc(site, 64, GfpFlags::GFP_ATOMIC, &cx).is_err())
        .collect()
}

#[test]
fn probability_100_fails_every_candidate_and_0_none() {
    let k = kernel();
    assert_eq!(pattern(&k, "bvec_alloc", 5), vec![false; 5]);
    always(&k);
    assert_eq!(pattern(&k, "bvec_alloc", 5), vec![true; 5]);
    let k = kernel();
    k.fault_inject().set_failslab(|f| {
        f.attr.probability = 50;
        f.attr.times = -1;
    });
    let failed = pattern(&k, "bvec_alloc", 1000)
        .into_iter()
        .filter(|f| *f)
        .count();
    assert!((400..=600).contains(&failed), "50% gave {failed}/1000");
}

#[test]
fn interval_lets_only_every_nth_candidate_fail() {
    let k = kernel();
    always(&k);
    k.fault_inject().set_failslab(|f| f.attr.interval = 3);
    assert_eq!(
        pattern(&k, "bvec_alloc", 7),
        vec![false, false, true, false, false, true, false]
    );
}

#[test]
fn times_limits_the_failures_and_counts_down() {
    let k = kernel();
    always(&k);
    k.fault_inject().set_failslab(|f| f.attr.times = 2);
    assert_eq!(pattern(&k, "bvec_alloc", 4), vec![true, true, false, false]);
    assert_eq!(k.fault_inject().failslab().attr.times, 0);
}

#[test]
fn space_lets_bytes_through_first() {
    let k = kernel();
    always(&k);
    k.fault_inject().set_failslab(|f| f.attr.space = 150);
    // 64 + 64 bytes pass (space 150 -> 86 -> 22), the third is bigger than what is left.
    assert_eq!(pattern(&k, "bvec_alloc", 3), vec![false, false, true]);
}

#[test]
fn fail_nth_fails_exactly_the_nth_check_of_the_task() {
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    // probability 0: only fail_nth can fail anything.
    set_fail_nth(&cx, 3);
    let got: Vec<bool> = (0..5)
        .map(|_| kmalloc("bvec_alloc", 8, GfpFlags::GFP_ATOMIC, &cx).is_err())
        .collect();
    assert_eq!(got, vec![false, false, true, false, false]);
    assert_eq!(fail_nth(&cx), 0);
    assert_eq!(k.fault_inject().log().len(), 2, "fail_dump() printed");
}

#[test]
fn the_site_filter_restricts_failslab_to_one_site_and_refuses_unknown_ones() {
    let k = kernel();
    always(&k);
    k.fault_inject()
        .set_site_filter(Some("bvec_alloc"))
        .unwrap();
    assert_eq!(pattern(&k, "bio_alloc_bioset", 2), vec![false, false]);
    assert_eq!(pattern(&k, "bvec_alloc", 2), vec![true, true]);
    let err = k
        .fault_inject()
        .set_site_filter(Some("nosuch"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown allocation site `nosuch` (known sites: bio_alloc_bioset, bvec_alloc, lo_rw_aio_prep)"
    );
}

#[test]
#[cfg_attr(
    feature = "bug-failslab-fails-nofail",
    should_panic(expected = "__GFP_NOFAIL cannot fail")
)]
fn gfp_nofail_never_fails_not_even_a_one_shot() {
    let k = kernel();
    always(&k);
    k.fault_inject().fail_alloc_once("bvec_alloc").unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let nofail = GfpFlags::GFP_ATOMIC.union(GfpFlags::__GFP_NOFAIL);
    for _ in 0..3 {
        assert!(
            kmalloc("bvec_alloc", 64, nofail, &cx).is_ok(),
            "__GFP_NOFAIL cannot fail"
        );
    }
    // The one-shot is still armed for the next failable allocation.
    assert!(kmalloc("bvec_alloc", 64, GfpFlags::GFP_ATOMIC, &cx).is_err());
}

#[test]
fn ignore_gfp_reclaim_spares_blocking_allocations() {
    let k = kernel();
    always(&k);
    let cx = k.cpu(CpuId(0)).unwrap();
    assert!(kmalloc("bvec_alloc", 64, GfpFlags::GFP_NOIO, &cx).is_ok());
    assert!(kmalloc("bvec_alloc", 64, GfpFlags::GFP_KERNEL, &cx).is_ok());
    k.fault_inject()
        .set_failslab(|f| f.ignore_gfp_reclaim = false);
    assert_eq!(
        kmalloc("bvec_alloc", 64, GfpFlags::GFP_NOIO, &cx),
        Err(crate::errno::Errno::ENOMEM)
    );
}

#[test]
fn cache_filter_fails_only_slab_failslab_caches() {
    let k = kernel();
    always(&k);
    k.fault_inject().set_failslab(|f| f.cache_filter = true);
    let cx = k.cpu(CpuId(0)).unwrap();
    let marked = KmemCache::new("bvec_alloc", 64, SLAB_FAILSLAB);
    let plain = KmemCache::new("bvec_alloc", 64, 0);
    assert!(kmem_cache_alloc(&plain, GfpFlags::GFP_ATOMIC, &cx).is_ok());
    assert!(kmem_cache_alloc(&marked, GfpFlags::GFP_ATOMIC, &cx).is_err());
}

#[test]
fn fail_dump_prints_the_kernels_two_lines_unless_nowarn() {
    let k = kernel();
    always(&k);
    let cx = k.cpu(CpuId(0)).unwrap();
    let nowarn = GfpFlags::GFP_ATOMIC.union(GfpFlags::__GFP_NOWARN);
    assert!(kmalloc("bvec_alloc", 64, nowarn, &cx).is_err());
    assert!(
        k.fault_inject().log().is_empty(),
        "FAULT_NOWARN prints nothing"
    );
    assert!(kmalloc("bvec_alloc", 64, GfpFlags::GFP_ATOMIC, &cx).is_err());
    let log = k.fault_inject().log();
    println!("{}", log.join("\n"));
    assert_eq!(
        log,
        vec![
            "FAULT_INJECTION: forcing a failure.".to_owned(),
            "name failslab, interval 1, probability 100, space 0, times -1".to_owned(),
        ]
    );
    assert!(
        k.reports().is_empty(),
        "an injected fault is not a kernel bug"
    );
}

/// 200 allocations at 30% under `seed`: which failed, and the fault log.
fn run_seeded(seed: Option<u64>) -> (Vec<bool>, Vec<String>) {
    let k = kernel();
    if let Some(s) = seed {
        k.fault_inject().reseed(s);
    }
    k.fault_inject().set_failslab(|f| {
        f.attr.probability = 30;
        f.attr.times = -1;
        f.attr.interval = 2;
    });
    let p = pattern(&k, "bio_alloc_bioset", 200);
    (p, k.fault_inject().log())
}

#[test]
fn a_seed_reproduces_every_fault_and_another_seed_differs() {
    let a = run_seeded(None);
    let b = run_seeded(Some(DEFAULT_FAULT_SEED));
    assert_eq!(a, b);
    assert_eq!(a.1.join("\n").into_bytes(), b.1.join("\n").into_bytes());
    assert!(a.0.iter().any(|f| *f));
    let c = run_seeded(Some(42));
    assert_ne!(a.0, c.0);
}

#[test]
#[cfg_attr(
    feature = "bug-fault-oneshot-rearms",
    should_panic(expected = "fires once")
)]
fn fail_alloc_once_fires_exactly_once_at_its_site() {
    let k = kernel();
    let cx = k.cpu(CpuId(0)).unwrap();
    k.fault_inject()
        .fail_alloc_once("bio_alloc_bioset")
        .unwrap();
    // Another site is not touched; GFP_NOIO is (the one-shot ignores ignore_gfp_reclaim).
    assert!(kmalloc("bvec_alloc", 64, GfpFlags::GFP_NOIO, &cx).is_ok());
    assert!(kmalloc("bio_alloc_bioset", 64, GfpFlags::GFP_NOIO, &cx).is_err());
    for _ in 0..3 {
        assert!(
            kmalloc("bio_alloc_bioset", 64, GfpFlags::GFP_NOIO, &cx).is_ok(),
            "a one-shot fires once"
        );
    }
    assert_eq!(
        k.fault_inject().log(),
        vec!["biosim: fail_alloc bio_alloc_bioset: one-shot allocation failure (GFP_NOIO)"]
    );
}

#[test]
fn an_unknown_site_is_refused_with_the_list() {
    let k = kernel();
    let err = k.fault_inject().fail_alloc_once("nosuch").unwrap_err();
    assert_eq!(err, FaultInjectError::UnknownSite("nosuch".into()));
    assert!(err.to_string().contains("bio_alloc_bioset, bvec_alloc"));
    assert_eq!(k.fault_inject().armed().0, Vec::<&str>::new());
    assert_eq!(
        k.fault_inject().fail_io_once(""),
        Err(FaultInjectError::NoDevice)
    );
}

#[derive(Debug)]
struct Sink {
    name: &'static str,
    got: Mutex<usize>,
}

impl BlockDriver for Sink {
    fn disk_name(&self) -> String {
        self.name.into()
    }
    fn devt(&self) -> (u32, u32) {
        (7, 0)
    }
    fn limits(&self) -> QueueLimits {
        QueueLimits::new(1 << 20)
    }
    fn submit_bio(&self, bio: Box<Bio>, cx: &Cpu) {
        *self.got.lock() += 1;
        bio_endio(bio, cx);
    }
}

/// Submits a 4 KiB write to `dev`: what submit_bio_noacct() said and every status its
/// `bi_end_io` saw.
fn submit(k: &UntrackedArc<Kernel>, dev: &Sink) -> (Submission, Vec<BlkStatus>) {
    let cx = k.cpu(CpuId(0)).unwrap();
    let ended: Arc<Mutex<Vec<BlkStatus>>> = Arc::default();
    let e2 = Arc::clone(&ended);
    let bio = k
        .bio_alloc(ReqOp::Write, 0)
        .with_data(vec![0; 4096])
        .with_end_io(BioEndIo::new("test_end_io", move |b, _| {
            e2.lock().push(b.status())
        }));
    let s = submit_bio_noacct(bio, dev, &cx);
    let e = ended.lock().clone();
    (s, e)
}

#[test]
#[cfg_attr(
    feature = "bug-fault-oneshot-rearms",
    should_panic(expected = "fires once")
)]
fn fail_io_once_fails_one_bio_with_ioerr_ended_once() {
    let k = kernel();
    let dev = Sink {
        name: "loop0",
        got: Mutex::new(0),
    };
    k.fault_inject().fail_io_once("loop0").unwrap();
    assert_eq!(
        submit(&k, &dev),
        (Submission::Failed(BLK_STS_IOERR), vec![BLK_STS_IOERR])
    );
    assert_eq!(*dev.got.lock(), 0, "the driver never saw it");
    assert_eq!(
        submit(&k, &dev),
        (Submission::Submitted, vec![BLK_STS_OK]),
        "a one-shot fires once"
    );
}

#[test]
fn fail_make_request_fails_bios_of_make_it_fail_devices_only() {
    let k = kernel();
    let (a, b) = (
        Sink {
            name: "nullb0",
            got: Mutex::new(0),
        },
        Sink {
            name: "nullb1",
            got: Mutex::new(0),
        },
    );
    k.fault_inject().set_fail_make_request(|f| {
        f.probability = 100;
        f.times = -1;
    });
    assert_eq!(
        submit(&k, &a).0,
        Submission::Submitted,
        "make-it-fail is off"
    );
    k.fault_inject().set_make_it_fail("nullb0", true);
    assert_eq!(
        submit(&k, &a),
        (Submission::Failed(BLK_STS_IOERR), vec![BLK_STS_IOERR])
    );
    assert_eq!(submit(&k, &b), (Submission::Submitted, vec![BLK_STS_OK]));
    assert_eq!(*a.got.lock(), 1);
    assert_eq!(
        k.fault_inject().log()[1],
        "name fail_make_request, interval 1, probability 100, space 0, times -1"
    );
    assert!(k.reports().is_empty());
}

/// `disarm_oneshots()` hands back every one-shot still armed and leaves none: the next
/// allocation and bio after it are not failed by them.
#[test]
fn disarm_oneshots_clears_what_is_armed() {
    let k = kernel();
    let fi = k.fault_inject();
    fi.fail_alloc_once("bvec_alloc").unwrap();
    assert!(!fi.io_armed());
    fi.fail_io_once("loop0").unwrap();
    assert!(fi.io_armed());
    assert_eq!(
        fi.disarm_oneshots(),
        (vec!["bvec_alloc"], vec!["loop0".to_owned()])
    );
    assert_eq!(fi.armed(), (Vec::new(), Vec::new()));
    assert!(!fi.io_armed());
    fi.set_make_it_fail("nullb0", true);
    assert!(fi.io_armed());
    fi.set_make_it_fail("nullb0", false);
    assert!(!fi.io_armed());
    let cx = k.cpu(CpuId(0)).unwrap();
    assert!(!fi.should_fail_request("loop0", 4096, &cx));
    assert!(fi.log().is_empty());
}
