//! Requests of more than one bio on the loop device: blk-mq's plug merge, `lo_rw_aio_prep()`'s
//! `bvec` allocation (fault site `lo_rw_aio_prep`) and what each version does when it fails
//! (check L7, and the base's twin `bug-loop-prep-fail-completes-twice`).

use super::*;
use crate::block::blk_core::submit_bio_noacct;
use crate::block::blk_plug::{blk_finish_plug, blk_start_plug};
use crate::block::{BioEndIo, BlkStatus};
use crate::kernel::trace::tests::capture;
use crate::kernel::{CpuId, KernelConfig};
use crate::workqueue::PoolId;

/// What each `bi_end_io` saw: (sector, status, data).
type Ended = UntrackedArc<Mutex<Vec<(u64, BlkStatus, Vec<u8>)>>>;

struct Rig {
    k: UntrackedArc<Kernel>,
    cx: Cpu,
    lo: UntrackedArc<LoopDevice>,
    ended: Ended,
}

fn rig(mem: MemBacking, variant: LoopVariant) -> Rig {
    let k = Kernel::new(KernelConfig::default(), 2).unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let backing: UntrackedArc<dyn LoopBacking> = UntrackedArc::new(mem);
    let lo = LoopDevice::new(&k, 0, backing, LO_FLAGS_DIRECT_IO, 0, variant);
    Rig {
        k,
        cx,
        lo,
        ended: Ended::default(),
    }
}

fn block(fill: u8) -> Vec<u8> {
    vec![fill; MEM_BLOCK as usize]
}

impl Rig {
    fn submit(&self, op: ReqOp, sector: u64, data: Vec<u8>) {
        let e = UntrackedArc::clone(&self.ended);
        let mut bio =
            self.k
                .bio_alloc(op, sector)
                .with_end_io(BioEndIo::new("t_end_io", move |b, _| {
                    e.lock().push((b.bi_iter.bi_sector, b.status(), b.data()));
                }));
        bio.add_data(data);
        let _ = submit_bio_noacct(bio, &*self.lo, &self.cx);
    }

    /// `blk_start_plug()`, a write of block `fill` at sectors 8 and 16, `blk_finish_plug()`,
    /// then the worker and every softirq.
    fn two_plugged_writes(&self) {
        let plug = blk_start_plug(&self.cx);
        self.submit(ReqOp::Write, 8, block(1));
        self.submit(ReqOp::Write, 16, block(2));
        blk_finish_plug(plug, &self.cx);
        self.settle();
    }

    fn settle(&self) {
        let worker = self.k.cpu(CpuId(1)).unwrap();
        loop {
            for c in 0..2 {
                let cx = self.k.cpu(CpuId(c)).unwrap();
                self.k.run_softirqs(&cx);
            }
            if self.k.run_worker(PoolId::Unbound, &worker).is_none() {
                break;
            }
        }
        for c in 0..2 {
            let cx = self.k.cpu(CpuId(c)).unwrap();
            self.k.run_softirqs(&cx);
        }
    }

    fn busy_tags(&self) -> usize {
        self.lo.mq_queue().map_or(0, |q| q.tags.busy())
    }
}

/// Two contiguous plugged writes reach the loop driver as one request of two bios (one
/// `block_rq_issue` of 16 sectors after a `block_bio_backmerge`), on every version and both
/// backings; every bio ends once, and reading each block back gives what was written.
#[test]
fn two_plugged_writes_are_one_loop_request_and_read_back_on_every_version() {
    for v in LoopVariant::ALL {
        for sparse in [false, true] {
            let mem = if sparse {
                MemBacking::sparse(1 << 20)
            } else {
                MemBacking::preallocated(1 << 20)
            };
            let r = rig(mem, v);
            let ev = capture(|| r.two_plugged_writes());
            let msgs: Vec<&str> = ev.iter().map(|e| e.message.as_str()).collect();
            let what = format!("{} sparse={sparse}", v.name);
            assert!(
                msgs.contains(&"block_bio_backmerge: 7,0 W 16 + 8 [biosim/0]"),
                "{what}: {msgs:?}"
            );
            let issues: Vec<&&str> = msgs
                .iter()
                .filter(|m| m.starts_with("block_rq_issue: 7,0"))
                .collect();
            assert_eq!(
                issues,
                [&"block_rq_issue: 7,0 W 8192 () 8 + 16 be,0,4 [biosim/0]"],
                "{what}"
            );
            r.submit(ReqOp::Read, 8, block(0));
            r.submit(ReqOp::Read, 16, block(0));
            r.settle();
            let ended = r.ended.lock().clone();
            assert_eq!(
                ended,
                [
                    (8, BLK_STS_OK, block(1)),
                    (16, BLK_STS_OK, block(2)),
                    (8, BLK_STS_OK, block(1)),
                    (16, BLK_STS_OK, block(2)),
                ],
                "{what}"
            );
            assert_eq!(r.busy_tags(), 0, "{what}");
            assert!(
                r.k.reports().is_empty() || v.name == "v4",
                "{what}: {:?}",
                r.k.reports().all()
            );
        }
    }
}

/// failslab's default `ignore-gfp-wait` spares `lo_rw_aio_prep()`'s `GFP_NOIO` allocation
/// (it may enter direct reclaim); with it off, failslab fails it like the one-shot does.
#[test]
fn failslab_spares_the_gfp_noio_bvec_allocation_unless_ignore_gfp_wait_is_off() {
    for ignore in [true, false] {
        let r = rig(MemBacking::preallocated(1 << 20), LoopVariant::BASE);
        let fi = r.k.fault_inject();
        fi.set_site_filter(Some(LO_RW_AIO_PREP)).unwrap();
        fi.set_failslab(|f| {
            f.attr.probability = 100;
            f.attr.times = -1;
            f.ignore_gfp_reclaim = ignore;
        });
        r.two_plugged_writes();
        let st: Vec<BlkStatus> = r.ended.lock().iter().map(|e| e.1).collect();
        let want = if ignore { BLK_STS_OK } else { BLK_STS_IOERR };
        assert_eq!(st, [want, want], "ignore_gfp_reclaim={ignore}");
    }
}

/// Base (6.18 `lo_rw_aio()`): the failed `bvec` allocation returns `-EIO` and
/// `loop_handle_cmd()` completes the request once: both bios end `BLK_STS_IOERR`, exactly once,
/// and nothing is reported. The twin `bug-loop-prep-fail-completes-twice` also completes it in
/// `lo_rw_aio()`: blk-mq's `WARN_ON_ONCE(req_ref_zero(rq))` reports the second completion.
#[test]
#[cfg_attr(feature = "bug-loop-prep-fail-completes-twice", should_panic)]
fn base_completes_a_request_whose_bvec_allocation_failed_once_with_ioerr() {
    let r = rig(MemBacking::preallocated(1 << 20), LoopVariant::BASE);
    r.k.fault_inject().fail_alloc_once(LO_RW_AIO_PREP).unwrap();
    r.two_plugged_writes();
    let ended = r.ended.lock().clone();
    assert_eq!(
        ended,
        [(8, BLK_STS_IOERR, block(1)), (16, BLK_STS_IOERR, block(2))]
    );
    assert_eq!((r.busy_tags(), r.lo.stranded()), (0, 0));
    assert!(r.k.reports().is_empty(), "{:?}", r.k.reports().all());
    assert_eq!(
        r.k.fault_inject().log(),
        ["biosim: fail_alloc lo_rw_aio_prep: one-shot allocation failure (GFP_NOIO)"]
    );
    // The data was not written: the read-back finds the preallocated zeros.
    r.ended.lock().clear();
    r.submit(ReqOp::Read, 8, block(9));
    r.settle();
    assert_eq!(r.ended.lock()[0].2, block(0));
}

/// The blk-mq detector the twin trips, on its own: a request ended twice is the kernel's
/// `WARN_ON_ONCE(req_ref_zero(rq))`, and its bios end only once.
#[test]
fn a_loop_request_completed_twice_is_blk_mqs_req_ref_zero_warning() {
    let r = rig(MemBacking::preallocated(1 << 20), LoopVariant::BASE);
    let q = r.lo.mq_queue().unwrap();
    let rq = Rq {
        q: UntrackedArc::clone(&q),
        tag: q.tags.blk_mq_get_tag(false, &r.cx).unwrap(),
    };
    // blk_mq_submit_bio()'s request: rq->ref 1.
    q.tags.slot_mut(rq.tag, |s| s.refcount = 1);
    blk_mq_end_request(&rq, BLK_STS_IOERR, &r.cx);
    assert!(r.k.reports().is_empty());
    blk_mq_end_request(&rq, BLK_STS_IOERR, &r.cx);
    let all = r.k.reports().all();
    assert_eq!(all.len(), 1, "{all:?}");
    assert!(
        all[0]
            .message
            .contains("WARN_ON_ONCE(req_ref_zero(rq)) (7,0 tag 0: request completed twice)"),
        "{all:?}"
    );
}

/// V5 (and v5-no-hint, V4): `lo_rw_aio_nowait()` runs `lo_rw_aio_prep()` first; its failure
/// does `goto fail` → `lo_rw_aio_complete()` before `lo_submit_rw_aio()` armed `cmd->ref`,
/// which goes from 0 to -1: the request is never completed, no bio ends, its tag stays busy
/// (check L7). The same on V5 over a backing without `FMODE_NOWAIT`, where the worker's
/// `lo_rw_aio()` preps.
#[test]
fn the_nowait_versions_never_complete_a_request_whose_bvec_allocation_failed() {
    let cases = [
        (LoopVariant::V5, true),
        (LoopVariant::V5_NO_HINT, true),
        (LoopVariant::V4, true),
        (LoopVariant::V5, false),
    ];
    for (v, fmode_nowait) in cases {
        let mem = MemBacking::preallocated(1 << 20).with_fmode_nowait(fmode_nowait);
        let r = rig(mem, v);
        r.k.fault_inject().fail_alloc_once(LO_RW_AIO_PREP).unwrap();
        let ev = capture(|| r.two_plugged_writes());
        let what = format!("{} fmode_nowait={fmode_nowait}", v.name);
        assert!(r.ended.lock().is_empty(), "{what}: {:?}", r.ended.lock());
        assert_eq!((r.busy_tags(), r.lo.stranded()), (1, 1), "{what}");
        assert!(
            ev.iter().any(|e| e.message
                == "biosim_loop_aio_complete: loop0: lo_rw_aio_do_completion() W 8 + 16 -> -EIO: cmd->ref 0 -> -1, the request is never completed"),
            "{what}: {:?}",
            ev.iter().map(|e| &e.message).collect::<Vec<_>>()
        );
        assert!(
            !ev.iter()
                .any(|e| e.message.starts_with("block_rq_complete")),
            "{what}"
        );
    }
}

/// L7's fix ([`LoopVariant::ref_armed_before_prep`]): with `cmd->ref` armed before the prep,
/// V5's `goto fail` completes the request with the error: both bios end `BLK_STS_IOERR` once.
#[test]
fn with_the_ref_armed_before_the_prep_v5_fails_the_request_once() {
    let v = LoopVariant::V5.with(LoopKnob::RefArmedBeforePrep(true));
    let r = rig(MemBacking::preallocated(1 << 20), v);
    r.k.fault_inject().fail_alloc_once(LO_RW_AIO_PREP).unwrap();
    r.two_plugged_writes();
    let st: Vec<(u64, BlkStatus)> = r.ended.lock().iter().map(|e| (e.0, e.1)).collect();
    assert_eq!(st, [(8, BLK_STS_IOERR), (16, BLK_STS_IOERR)]);
    assert_eq!((r.busy_tags(), r.lo.stranded()), (0, 0));
    assert!(r.k.reports().is_empty(), "{:?}", r.k.reports().all());
}

/// Upstream's fix ([`LoopVariant::prep_fail_returns_error`]: `return ret` instead of `goto
/// fail`) applied to V5 as posted fixes the worker's half only. Over a backing without
/// `FMODE_NOWAIT` the worker's `lo_rw_aio()` returns `-EIO` and `loop_handle_cmd()` fails the
/// request once; over one with it, `lo_rw_aio_nowait()` returns `-EIO` to `loop_queue_rq()`,
/// which answers `BLK_STS_OK` and completes nothing: the request is still never completed.
#[test]
fn upstreams_return_ret_fix_on_v5_fixes_the_worker_but_not_the_nowait_path() {
    let v = LoopVariant::V5.with(LoopKnob::PrepFailReturnsError(true));
    // The worker's half: fixed.
    let r = rig(
        MemBacking::preallocated(1 << 20).with_fmode_nowait(false),
        v,
    );
    r.k.fault_inject().fail_alloc_once(LO_RW_AIO_PREP).unwrap();
    r.two_plugged_writes();
    let st: Vec<(u64, BlkStatus)> = r.ended.lock().iter().map(|e| (e.0, e.1)).collect();
    assert_eq!(st, [(8, BLK_STS_IOERR), (16, BLK_STS_IOERR)]);
    assert_eq!((r.busy_tags(), r.lo.stranded()), (0, 0));
    // The NOWAIT half: loop_queue_rq() returns BLK_STS_OK for -EIO.
    let r = rig(MemBacking::preallocated(1 << 20), v);
    r.k.fault_inject().fail_alloc_once(LO_RW_AIO_PREP).unwrap();
    let ev = capture(|| r.two_plugged_writes());
    assert!(r.ended.lock().is_empty(), "{:?}", r.ended.lock());
    assert_eq!((r.busy_tags(), r.lo.stranded()), (1, 1));
    assert!(
        ev.iter().any(|e| e.message
            == "biosim_loop_nowait: loop0: lo_rw_aio_prep() W 8 + 16 -> -EIO: lo_rw_aio_nowait() returns it, loop_queue_rq() returns BLK_STS_OK, the request is never completed"),
        "{:?}",
        ev.iter().map(|e| &e.message).collect::<Vec<_>>()
    );
}
