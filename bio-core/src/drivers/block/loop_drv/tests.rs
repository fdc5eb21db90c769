//! The loop driver on an in-memory backing file: the test plays the runtime (it runs the
//! workqueue's worker when it wants).

use super::*;
use crate::block::blk_core::{submit_bio_noacct, Submission};
use crate::block::{BioEndIo, BlkStatus, BLK_STS_NOTSUPP};
use crate::kernel::{CpuId, KernelConfig, ReportKind};
use crate::workqueue::PoolId;

/// What each `bi_end_io` saw: (bio id, status, data, ran in task context).
type Ended = UntrackedArc<Mutex<Vec<(u64, BlkStatus, Vec<u8>, bool)>>>;

struct Rig {
    k: UntrackedArc<Kernel>,
    cx: Cpu,
    lo: UntrackedArc<LoopDevice>,
    mem: UntrackedArc<MemBacking>,
    ended: Ended,
}

fn rig(mem: MemBacking, variant: LoopVariant, lo_flags: u32) -> Rig {
    let k = Kernel::new(KernelConfig::default(), 2).unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let mem = UntrackedArc::new(mem);
    let backing: UntrackedArc<dyn LoopBacking> = mem.clone();
    let lo = LoopDevice::new(&k, 0, backing, lo_flags, 0, variant);
    Rig {
        k,
        cx,
        lo,
        mem,
        ended: Ended::default(),
    }
}

impl Rig {
    fn submit(&self, op: ReqOp, sector: u64, data: Option<Vec<u8>>) -> Submission {
        let e = UntrackedArc::clone(&self.ended);
        let mut bio =
            self.k
                .bio_alloc(op, sector)
                .with_end_io(BioEndIo::new("t_end_io", move |b, cx| {
                    e.lock().push((b.id(), b.status(), b.data(), cx.in_task()));
                }));
        if let Some(d) = data {
            bio.add_data(d);
        }
        let r = submit_bio_noacct(bio, &*self.lo, &self.cx);
        self.softirqs();
        r
    }

    /// Runs every CPU's pending softirqs (where `lo_complete_rq()` ends the bios).
    fn softirqs(&self) {
        for c in 0..2 {
            let cx = self.k.cpu(CpuId(c)).unwrap();
            self.k.run_softirqs(&cx);
        }
    }

    /// Runs the loop workqueue's worker until it has nothing left.
    fn run_worker(&self) -> usize {
        let worker = self.k.cpu(CpuId(1)).unwrap();
        let mut n = 0;
        while self.k.run_worker(PoolId::Unbound, &worker).is_some() {
            n += 1;
        }
        self.softirqs();
        n
    }

    fn statuses(&self) -> Vec<BlkStatus> {
        self.ended.lock().iter().map(|e| e.1).collect()
    }
}

fn block(fill: u8) -> Vec<u8> {
    vec![fill; MEM_BLOCK as usize]
}

#[test]
fn data_read_back_equals_data_written_on_every_variant() {
    for v in LoopVariant::ALL {
        for mem in [
            MemBacking::sparse(1 << 20),
            MemBacking::preallocated(1 << 20),
        ] {
            let r = rig(mem, v, LO_FLAGS_DIRECT_IO);
            for i in 0..8u8 {
                r.submit(ReqOp::Write, u64::from(i) * 8, Some(block(i + 1)));
                r.run_worker();
            }
            for i in 0..8u8 {
                r.submit(ReqOp::Read, u64::from(i) * 8, Some(block(0)));
            }
            r.run_worker();
            let ended = r.ended.lock();
            assert_eq!(ended.len(), 16, "{}: every bio ends once", v.name);
            for (i, e) in ended[8..].iter().enumerate() {
                assert_eq!(e.1, BLK_STS_OK);
                assert_eq!(e.2, block(i as u8 + 1), "{}: block {i}", v.name);
            }
            assert!(
                r.k.reports().is_empty() || v.name == "v4",
                "{}: {:?}",
                v.name,
                r.k.reports().all()
            );
        }
    }
}

#[test]
fn a_nowait_hit_completes_in_the_submitter_without_the_worker() {
    let r = rig(
        MemBacking::preallocated(1 << 20),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    r.submit(ReqOp::Write, 0, Some(block(7)));
    assert_eq!(
        r.statuses(),
        [BLK_STS_OK],
        "completed inside submit_bio_noacct()"
    );
    assert_eq!(r.run_worker(), 0);
    let s = r.lo.stats();
    assert_eq!((s.nowait_tried, s.nowait_done, s.worker_cmds), (1, 1, 0));
}

#[test]
fn before_the_series_every_aio_command_goes_through_the_worker() {
    let r = rig(
        MemBacking::preallocated(1 << 20),
        LoopVariant::BASE,
        LO_FLAGS_DIRECT_IO,
    );
    r.submit(ReqOp::Write, 0, Some(block(7)));
    r.submit(ReqOp::Read, 0, Some(block(0)));
    assert!(
        r.statuses().is_empty(),
        "nothing ends before the worker runs"
    );
    assert_eq!(r.lo.nr_blocking_writes(), 1, "one queued use_aio write");
    r.run_worker();
    assert_eq!(r.statuses(), [BLK_STS_OK, BLK_STS_OK]);
    assert_eq!(r.lo.nr_blocking_writes(), 0);
    assert_eq!(r.lo.stats().nowait_tried, 0);
    assert_eq!(r.lo.stats().worker_cmds, 2);
}

#[test]
fn without_the_hint_every_write_to_a_hole_wastes_a_nowait_attempt() {
    let r = rig(
        MemBacking::sparse(1 << 20),
        LoopVariant::V5_NO_HINT,
        LO_FLAGS_DIRECT_IO,
    );
    for i in 0..16 {
        r.submit(ReqOp::Write, i * 8, Some(block(1)));
    }
    let s = r.lo.stats();
    assert_eq!((s.nowait_tried, s.nowait_eagain), (16, 16));
    assert_eq!(r.lo.nr_blocking_writes(), 16);
    r.run_worker();
    assert_eq!(r.statuses(), vec![BLK_STS_OK; 16]);
    assert_eq!(r.mem.allocated_blocks(), 16);
}

#[test]
fn the_hint_stops_trying_nowait_writes_while_blocking_writes_are_queued() {
    let r = rig(
        MemBacking::sparse(1 << 20),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    for i in 0..16 {
        r.submit(ReqOp::Write, i * 8, Some(block(1)));
    }
    let s = r.lo.stats();
    assert_eq!(
        (s.nowait_tried, s.nowait_eagain, s.hint_skipped),
        (1, 1, 15)
    );
    // Reads still try NOWAIT: they do not contend with the blocking writes.
    r.submit(ReqOp::Read, 200 * 8, Some(block(9)));
    assert_eq!(r.lo.stats().nowait_done, 1);
    r.run_worker();
    assert_eq!(r.lo.nr_blocking_writes(), 0);
    // Now the blocks exist: an overwrite is a NOWAIT hit again.
    r.submit(ReqOp::Write, 0, Some(block(2)));
    assert_eq!(r.lo.stats().nowait_done, 2);
    assert_eq!(r.statuses(), vec![BLK_STS_OK; 18]);
}

#[test]
fn a_backing_block_device_tries_nowait_even_while_blocking_writes_are_queued() {
    // A regular sparse file first: one write falls back, so a blocking write is counted...
    let r = rig(
        MemBacking::sparse(1 << 20),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    r.submit(ReqOp::Write, 0, Some(block(1)));
    assert_eq!(r.lo.nr_blocking_writes(), 1);
    r.submit(ReqOp::Write, 8, Some(block(1)));
    assert_eq!(
        r.lo.stats().hint_skipped,
        1,
        "...and the hint keeps the next write off NOWAIT"
    );
    // ...whereas with a block device the S_ISBLK branch says yes regardless of the count.
    let r = rig(
        MemBacking::sparse(1 << 20).as_block_device(),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    let k = &r.k;
    let nowait_then_block = |sector| {
        let bio = k.bio_alloc(ReqOp::Write, sector).with_data(block(2));
        submit_bio_noacct(bio, &*r.lo, &r.cx);
    };
    // Fill the queue with a blocking write: a NOWAIT refusal from the device forces one.
    r.mem.refuse_nowait_once();
    nowait_then_block(0);
    assert_eq!(
        r.lo.nr_blocking_writes(),
        1,
        "one write waits for the worker"
    );
    nowait_then_block(8);
    let s = r.lo.stats();
    assert_eq!(
        (s.nowait_tried, s.hint_skipped, s.nowait_done),
        (2, 0, 1),
        "{s:?}"
    );
}

#[test]
fn v4_asserts_lo_mutex_where_lo_work_lock_is_held_and_v5_does_not() {
    let r = rig(
        MemBacking::sparse(1 << 20),
        LoopVariant::V4,
        LO_FLAGS_DIRECT_IO,
    );
    r.submit(ReqOp::Write, 0, Some(block(1)));
    let warns = r.k.reports().of_kind(ReportKind::Warn);
    assert_eq!(warns.len(), 1, "{warns:?}");
    assert!(
        warns[0]
            .message
            .contains("lockdep_assert_held(&lo->lo_mutex)"),
        "{}",
        warns[0].message
    );
    assert!(
        warns[0]
            .message
            .contains("held: set->srcu, &lo->lo_work_lock"),
        "{}",
        warns[0].message
    );
    let r = rig(
        MemBacking::sparse(1 << 20),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    r.submit(ReqOp::Write, 0, Some(block(1)));
    r.run_worker();
    assert!(r.k.reports().is_empty(), "{:?}", r.k.reports().all());
}

#[test]
fn without_fmode_nowait_v5_skips_the_attempt_and_v4_makes_it() {
    let v5 = rig(
        MemBacking::preallocated(1 << 20).with_fmode_nowait(false),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    v5.submit(ReqOp::Read, 0, Some(block(0)));
    assert_eq!(v5.lo.stats().nowait_tried, 0);
    assert_eq!(v5.lo.queued(), 1);
    // V4 sets IOCB_NOWAIT on a file that ignores it: the "attempt" is a blocking read in the
    // submitter, which succeeds.
    let v4 = rig(
        MemBacking::preallocated(1 << 20).with_fmode_nowait(false),
        LoopVariant::V4,
        LO_FLAGS_DIRECT_IO,
    );
    v4.submit(ReqOp::Read, 0, Some(block(0)));
    assert_eq!(
        (v4.lo.stats().nowait_tried, v4.lo.stats().nowait_done),
        (1, 1)
    );
    assert_eq!(v4.statuses(), [BLK_STS_OK]);
}

#[test]
fn a_nowait_refusal_is_completed_twice_by_v5_and_surfaces_as_an_error_on_v4() {
    // V5: lo_rw_aio_nowait() completes on -EOPNOTSUPP, loop_queue_rq() also queues it.
    let v5 = rig(
        MemBacking::preallocated(1 << 20).refusing_nowait(),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    v5.submit(ReqOp::Write, 0, Some(block(3)));
    assert_eq!(
        v5.statuses(),
        [BLK_STS_NOTSUPP],
        "completed once, with the refusal"
    );
    v5.run_worker();
    let bugs = v5.k.reports().of_kind(ReportKind::Bug);
    assert_eq!(bugs.len(), 1, "{bugs:?}");
    assert!(
        bugs[0].message.contains("completed twice"),
        "{}",
        bugs[0].message
    );
    assert_eq!(v5.lo.nr_blocking_writes(), 0, "the count still balances");
    // V4: no fallback on -EOPNOTSUPP; the submitter sees BLK_STS_NOTSUPP.
    let v4 = rig(
        MemBacking::preallocated(1 << 20).refusing_nowait(),
        LoopVariant::V4,
        LO_FLAGS_DIRECT_IO,
    );
    v4.submit(ReqOp::Write, 0, Some(block(3)));
    v4.run_worker();
    assert_eq!(v4.statuses(), [BLK_STS_NOTSUPP]);
    assert!(v4.k.reports().of_kind(ReportKind::Bug).is_empty());
    // The fixed twin leaves -EOPNOTSUPP to the fallback: one completion, OK, by the worker.
    let fixed = LoopVariant {
        nowait_completes_on_eopnotsupp: false,
        ..LoopVariant::V5
    };
    let f = rig(
        MemBacking::preallocated(1 << 20).refusing_nowait(),
        fixed,
        LO_FLAGS_DIRECT_IO,
    );
    f.submit(ReqOp::Write, 0, Some(block(3)));
    f.run_worker();
    assert_eq!(f.statuses(), [BLK_STS_OK]);
    assert!(f.k.reports().is_empty(), "{:?}", f.k.reports().all());
}

#[test]
fn buffered_loop_never_uses_aio_and_flush_discard_zeroes_go_to_the_worker() {
    let r = rig(MemBacking::preallocated(1 << 20), LoopVariant::V5, 0);
    r.submit(ReqOp::Write, 8, Some(block(5)));
    assert_eq!(
        r.lo.stats().nowait_tried,
        0,
        "no LO_FLAGS_DIRECT_IO: no use_aio"
    );
    assert_eq!(
        r.lo.nr_blocking_writes(),
        0,
        "only use_aio writes are counted"
    );
    r.run_worker();
    // An empty REQ_PREFLUSH write: the flush state machine makes it a REQ_OP_FLUSH request.
    let flush =
        r.k.bio_alloc(ReqOp::Write, 0)
            .with_flags(crate::block::ReqFlags::REQ_PREFLUSH);
    submit_bio_noacct(flush, &*r.lo, &r.cx);
    let zero = r.k.bio_alloc(ReqOp::Discard, 8).with_size(4096);
    submit_bio_noacct(zero, &*r.lo, &r.cx);
    r.run_worker();
    assert_eq!(r.mem.syncs(), 1);
    r.submit(ReqOp::Read, 8, Some(block(9)));
    r.run_worker();
    let ended = r.ended.lock();
    assert_eq!(ended.last().unwrap().2, block(0), "discarded: reads zeros");
    assert!(
        ended.iter().all(|e| e.1 == BLK_STS_OK && !e.3),
        "all ended in BLOCK_SOFTIRQ (lo_complete_rq), not in task context"
    );
}

#[test]
fn beyond_the_end_fails_before_the_driver_and_nowait_bios_reach_it() {
    let r = rig(
        MemBacking::preallocated(1 << 20),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    assert_eq!(
        r.submit(ReqOp::Read, 2048, Some(block(0))),
        Submission::Failed(BLK_STS_IOERR)
    );
    assert_eq!(r.lo.stats(), LoopStats::default(), "the driver saw nothing");
    // Every blk-mq queue has BLK_FEAT_NOWAIT: a REQ_NOWAIT bio reaches loop.
    let nowait =
        r.k.bio_alloc(ReqOp::Read, 0)
            .with_flags(crate::block::ReqFlags::REQ_NOWAIT)
            .with_data(block(0));
    assert_eq!(
        submit_bio_noacct(nowait, &*r.lo, &r.cx),
        Submission::Submitted
    );
}

#[test]
fn lo_offset_shifts_both_paths_and_the_twin_forgets_it_on_the_nowait_path() {
    for (v, consistent) in [
        (LoopVariant::V5, true),
        (
            LoopVariant {
                nowait_adds_lo_offset: false,
                ..LoopVariant::V5
            },
            false,
        ),
    ] {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        // The first 64 KiB preallocated (NOWAIT writes hit there), the rest sparse.
        let mem = UntrackedArc::new(MemBacking::sparse(1 << 20));
        mem.fallocate(Fallocate::ZeroRange, 0, 128 << 10).unwrap();
        let backing: UntrackedArc<dyn LoopBacking> = mem.clone();
        let lo = LoopDevice::new(&k, 0, backing, LO_FLAGS_DIRECT_IO, 64 << 10, v);
        assert_eq!(lo.limits().capacity_bytes(), (1 << 20) - (64 << 10));
        // NOWAIT path: sector 0 is allocated at lo_offset.
        submit_bio_noacct(k.bio_alloc(ReqOp::Write, 0).with_data(block(9)), &*lo, &cx);
        // Worker path: sector 256 (128 KiB in) is a hole, so the write falls back.
        submit_bio_noacct(
            k.bio_alloc(ReqOp::Write, 256).with_data(block(8)),
            &*lo,
            &cx,
        );
        while k.run_worker(PoolId::Unbound, &cx).is_some() {}
        assert_eq!(lo.stats().worker_cmds, 1, "one write each way");
        let at = |pos| {
            let mut b = vec![0; 4096];
            mem.rw(false, pos, &mut b, false).unwrap();
            b
        };
        assert_eq!(
            at(64 << 10) == block(9),
            consistent,
            "the NOWAIT write is at lo_offset"
        );
        assert_eq!(
            at((64 << 10) + (256 << 9)),
            block(8),
            "the worker's write is at lo_offset"
        );
    }
}

#[test]
fn a_preflush_fua_write_is_flush_data_flush_in_the_worker() {
    let r = rig(
        MemBacking::preallocated(1 << 20),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    let bio =
        r.k.bio_alloc(ReqOp::Write, 8)
            .with_flags(crate::block::ReqFlags::REQ_PREFLUSH | crate::block::ReqFlags::REQ_FUA)
            .with_data(block(4));
    submit_bio_noacct(bio, &*r.lo, &r.cx);
    assert_eq!(
        r.lo.stats().nowait_tried,
        0,
        "no NOWAIT attempt inside a flush sequence"
    );
    r.run_worker();
    assert_eq!(r.mem.syncs(), 2, "PREFLUSH and the FUA post-flush");
    let mut back = vec![0; 4096];
    r.mem.rw(false, 8 << 9, &mut back, false).unwrap();
    assert_eq!(back, block(4));
}

/// Completes every pending asynchronous request on CPU0 in hardirq, as the backing device's
/// interrupt would, then runs the softirqs.
fn complete_all(r: &Rig) -> usize {
    let mut n = 0;
    while r.cx.with_hardirq(|cx| r.mem.complete_next(&r.lo, cx)) {
        n += 1;
    }
    r.softirqs();
    n
}

#[test]
fn asynchronous_direct_io_completes_from_the_interrupt_and_the_bio_ends_in_softirq() {
    let r = rig(
        MemBacking::preallocated(1 << 20).asynchronous(),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    r.submit(ReqOp::Write, 8, Some(block(6)));
    assert!(r.statuses().is_empty(), "-EIOCBQUEUED: nothing ended yet");
    assert_eq!((r.mem.pending(), r.lo.aio_in_flight()), (1, 1));
    assert_eq!(complete_all(&r), 1);
    r.submit(ReqOp::Read, 8, Some(block(0)));
    assert_eq!(complete_all(&r), 1);
    let ended = r.ended.lock();
    assert_eq!(
        ended.iter().map(|e| e.1).collect::<Vec<_>>(),
        [BLK_STS_OK, BLK_STS_OK]
    );
    assert_eq!(
        ended[1].2,
        block(6),
        "the read's data came back through ki_complete()"
    );
    assert!(ended.iter().all(|e| !e.3), "ended in BLOCK_SOFTIRQ");
    assert_eq!(r.lo.stats().nowait_done, 2);
    assert_eq!(r.lo.stats().worker_cmds, 0);
}

/// A one-segment asynchronous command lends its bio's own segment to the I/O (no copy) and gets
/// it back in `ki_complete()`: the write's bio still holds what it wrote, the read's holds what
/// was read, both at their full length; while in flight the segment is with the backing. A
/// two-segment read still goes through a copy and lands the same. The buggy twin never puts
/// the lent segment back and is caught.
#[test]
#[cfg_attr(
    feature = "bug-loop-aio-segment-not-returned",
    should_panic(expected = "the write's bio got its segment back")
)]
fn a_one_segment_aio_lends_its_bio_segment_and_gets_it_back_at_completion() {
    let r = rig(
        MemBacking::preallocated(1 << 20).asynchronous(),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    r.submit(ReqOp::Write, 16, Some(block(0x3c)));
    assert_eq!(complete_all(&r), 1);
    r.submit(ReqOp::Read, 16, Some(block(0xee)));
    assert_eq!(r.lo.aio_in_flight(), 1);
    assert_eq!(complete_all(&r), 1);
    // Two segments of half a block each: the copy path.
    let e = UntrackedArc::clone(&r.ended);
    let two =
        r.k.bio_alloc(ReqOp::Read, 16)
            .with_data(vec![0xee; 2048])
            .with_data(vec![0xee; 2048])
            .with_end_io(BioEndIo::new("t_end_io", move |b, cx| {
                e.lock().push((b.id(), b.status(), b.data(), cx.in_task()));
            }));
    submit_bio_noacct(two, &*r.lo, &r.cx);
    assert_eq!(complete_all(&r), 1);
    let ended = r.ended.lock();
    assert_eq!(ended.len(), 3);
    assert!(ended.iter().all(|e| e.1 == BLK_STS_OK), "{ended:?}");
    assert_eq!(
        ended[0].2,
        block(0x3c),
        "the write's bio got its segment back"
    );
    assert_eq!(
        ended[1].2,
        block(0x3c),
        "the read landed in the bio's own segment"
    );
    assert_eq!(
        ended[2].2,
        block(0x3c),
        "a two-segment read lands through the copy"
    );
    assert_eq!(r.lo.aio_in_flight(), 0);
    assert!(r.k.reports().is_empty(), "{:?}", r.k.reports().all());
}

/// An asynchronous backing that keeps each request for the test to complete by hand.
#[derive(Debug, Default)]
struct HeldBacking {
    held: Mutex<Vec<AioRequest>>,
}

impl LoopBacking for HeldBacking {
    fn size(&self) -> u64 {
        1 << 20
    }
    fn is_block_device(&self) -> bool {
        false
    }
    fn fmode_nowait(&self) -> bool {
        true
    }
    fn rw(&self, _write: bool, _pos: u64, buf: &mut [u8], _nowait: bool) -> Result<usize, Errno> {
        Ok(buf.len())
    }
    fn fsync(&self) -> Result<(), Errno> {
        Ok(())
    }
    fn fallocate(&self, _mode: Fallocate, _pos: u64, _len: u64) -> Result<(), Errno> {
        Ok(())
    }
    fn is_async(&self) -> bool {
        true
    }
    fn submit_aio(&self, req: AioRequest) -> Result<(), (AioRequest, Errno)> {
        self.held.lock().push(req);
        Ok(())
    }
}

/// A backing that hands back a buffer of another length than the segment it was lent broke
/// `submit_aio()`'s contract: a WARN naming both lengths, and the bio's segment keeps its
/// length (the bytes handed back, zeros after them), so the bio still ends whole.
#[test]
fn a_lent_segment_handed_back_at_another_length_is_a_warn_and_keeps_its_length() {
    let k = Kernel::new(KernelConfig::default(), 1).unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let held = UntrackedArc::new(HeldBacking::default());
    let backing: UntrackedArc<dyn LoopBacking> = held.clone();
    let lo = LoopDevice::new(&k, 0, backing, LO_FLAGS_DIRECT_IO, 0, LoopVariant::V5);
    let ended: UntrackedArc<Mutex<Vec<Vec<u8>>>> = UntrackedArc::default();
    let e = UntrackedArc::clone(&ended);
    let bio = k
        .bio_alloc(ReqOp::Read, 0)
        .with_data(block(0xee))
        .with_end_io(BioEndIo::new("t_end_io", move |b, _| {
            e.lock().push(b.data())
        }));
    submit_bio_noacct(bio, &*lo, &cx);
    let req = held.held.lock().pop().expect("submitted to the backing");
    assert_eq!(
        req.data.len(),
        MEM_BLOCK as usize,
        "the bio's own segment went"
    );
    cx.with_hardirq(|cx| lo.lo_rw_aio_complete_async(req.token, Ok(4096), vec![7; 512], cx));
    k.run_softirqs(&cx);
    let warns = k.reports().of_kind(ReportKind::Warn);
    assert_eq!(warns.len(), 1, "{warns:?}");
    assert!(
        warns[0]
            .message
            .contains("the backing handed back 512 bytes for a 4096-byte segment"),
        "{}",
        warns[0].message
    );
    let ended = ended.lock();
    assert_eq!(ended.len(), 1);
    let mut want = vec![7u8; 512];
    want.resize(MEM_BLOCK as usize, 0);
    assert_eq!(ended[0], want);
}

#[test]
fn a_files_nowait_refusal_is_synchronous_and_the_worker_then_submits_without_nowait() {
    let r = rig(
        MemBacking::sparse(1 << 20).asynchronous(),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    r.submit(ReqOp::Write, 0, Some(block(5)));
    // ->write_iter() refused the NOWAIT write into a hole before queueing anything.
    assert_eq!(r.lo.stats().nowait_eagain, 1);
    assert_eq!((r.lo.nr_blocking_writes(), r.lo.aio_in_flight()), (1, 0));
    // The worker submits it without NOWAIT; the count drops once it is submitted.
    r.run_worker();
    assert_eq!(
        r.lo.nr_blocking_writes(),
        0,
        "queued plus being submitted, not in flight"
    );
    assert_eq!(r.lo.aio_in_flight(), 1);
    assert!(r.statuses().is_empty());
    complete_all(&r);
    assert_eq!(r.statuses(), [BLK_STS_OK]);
    assert_eq!(r.mem.allocated_blocks(), 1);
    assert!(r.k.reports().is_empty(), "{:?}", r.k.reports().all());
}

#[test]
fn an_eagain_from_a_block_devices_ki_complete_is_requeued_to_the_worker() {
    let r = rig(
        MemBacking::preallocated(1 << 20)
            .as_block_device()
            .asynchronous(),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    r.mem.refuse_nowait_once();
    r.submit(ReqOp::Write, 0, Some(block(5)));
    assert_eq!(
        (r.lo.aio_in_flight(), r.lo.nr_blocking_writes()),
        (1, 0),
        "queued to the device"
    );
    // The device answers -EAGAIN through ki_complete(): lo_rw_aio_do_completion() requeues it.
    complete_all(&r);
    assert_eq!(r.lo.stats().nowait_eagain, 1);
    assert_eq!(r.lo.nr_blocking_writes(), 1);
    r.run_worker();
    complete_all(&r);
    assert_eq!(r.statuses(), [BLK_STS_OK]);
    assert!(r.k.reports().is_empty(), "{:?}", r.k.reports().all());
}

#[test]
fn two_devices_on_one_asynchronous_backing_never_mix_their_completions() {
    let k = Kernel::new(KernelConfig::default(), 1).unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let mem = UntrackedArc::new(MemBacking::preallocated(1 << 20).asynchronous());
    let backing: UntrackedArc<dyn LoopBacking> = mem.clone();
    let a = LoopDevice::new(
        &k,
        0,
        UntrackedArc::clone(&backing),
        LO_FLAGS_DIRECT_IO,
        0,
        LoopVariant::V5,
    );
    let b = LoopDevice::new(
        &k,
        1,
        backing,
        LO_FLAGS_DIRECT_IO,
        512 << 10,
        LoopVariant::V5,
    );
    submit_bio_noacct(k.bio_alloc(ReqOp::Read, 0).with_data(block(0)), &*b, &cx);
    submit_bio_noacct(k.bio_alloc(ReqOp::Write, 0).with_data(block(1)), &*a, &cx);
    // B's completion misrouted to A: tokens are kernel-wide, so A does not take it for its own
    // write (with per-device numbering both would be token 1 and A's write would end unwritten).
    assert!(cx.with_hardirq(|cx| mem.complete_next(&a, cx)));
    assert_eq!(a.aio_in_flight(), 1, "A's own write is still in flight");
    let warns = k.reports().of_kind(ReportKind::Warn);
    assert!(
        warns.iter().any(|w| w.message.contains("unknown kiocb")),
        "{warns:?}"
    );
    // Routed right, A's completes.
    assert!(cx.with_hardirq(|cx| mem.complete_next(&a, cx)));
    assert_eq!(a.aio_in_flight(), 0);
}

#[test]
fn a_full_backing_file_maps_enospc_as_the_kernel_does_on_each_path() {
    // Direct I/O (use_aio): lo_complete_rq() maps the error with errno_to_blk_status().
    let r = rig(
        MemBacking::sparse(1 << 20).full(),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    r.submit(ReqOp::Write, 0, Some(block(1)));
    r.run_worker();
    assert_eq!(r.statuses(), [crate::block::BLK_STS_NOSPC]);
    // Buffered (no use_aio): loop_handle_cmd() turns every error but -EOPNOTSUPP into -EIO.
    let r = rig(MemBacking::sparse(1 << 20).full(), LoopVariant::V5, 0);
    r.submit(ReqOp::Write, 0, Some(block(1)));
    r.run_worker();
    assert_eq!(r.statuses(), [BLK_STS_IOERR]);
}

/// On a lower device, a read of a hole completes inside the file system (iomap zero-fills it)
/// and reaches no device; a read of a written block is one asynchronous device request. The twin:
/// the same backing without a lower device sends the hole read to the device too.
#[test]
fn on_a_lower_device_a_hole_read_completes_inline_and_a_written_block_goes_to_the_device() {
    let r = rig(
        MemBacking::sparse(1 << 20)
            .asynchronous()
            .with_lower_device((254, 0)),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    r.submit(ReqOp::Read, 64, Some(block(0xee)));
    assert_eq!(r.mem.pending(), 0, "no device request for a hole");
    assert_eq!(r.statuses(), [BLK_STS_OK]);
    assert_eq!(r.ended.lock()[0].2, vec![0; 4096], "zero-filled");
    r.mem.rw(true, 8 << 9, &mut block(3), false).unwrap();
    r.submit(ReqOp::Read, 8, Some(block(0xee)));
    assert_eq!(
        r.mem.pending(),
        1,
        "a written block is read from the device"
    );
    assert_eq!(complete_all(&r), 1);
    assert_eq!(r.ended.lock()[1].2, block(3));

    let twin = rig(
        MemBacking::sparse(1 << 20).asynchronous(),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    twin.submit(ReqOp::Read, 64, Some(block(0xee)));
    assert_eq!(twin.mem.pending(), 1);
}

// ---- Check L6: freeze protection after a NOWAIT fallback (`cmd->ref`, `kiocb_start_write()`).

/// The backing file system's `SB_FREEZE_WRITE` writers.
fn backing_writers(r: &Rig) -> u32 {
    r.mem
        .superblock()
        .expect("a MemBacking has a superblock")
        .writers(crate::fs::super_block::SB_FREEZE_WRITE)
}

/// V5 with the fix: the NOWAIT attempt's write is ended on `-EAGAIN`.
const V5_FIXED: LoopVariant = LoopVariant {
    name: "v5-fixed",
    ..LoopVariant::V5.with(LoopKnob::NowaitEndsWriteOnEagain(true))
};

/// One write into a hole of a sparse file: the NOWAIT attempt (where the version makes one) gets
/// `-EAGAIN` and falls back; the worker writes it. Every version reads the data back, and the
/// backing's writer count shows the attempt's `kiocb_start_write()` that was never ended: one on
/// every NOWAIT version, none on the base (no attempt) and on the fixed twin.
#[test]
#[cfg_attr(
    feature = "bug-loop-no-kiocb-start-write",
    should_panic(expected = "leaked")
)]
fn a_write_that_falls_back_after_nowait_eagain_leaks_one_sb_writer_per_version() {
    let table = [
        (LoopVariant::BASE, 0),
        (LoopVariant::V5_NO_HINT, 1),
        (LoopVariant::V4, 1),
        (LoopVariant::V5, 1),
        (V5_FIXED, 0),
    ];
    for (v, leaked) in table {
        let r = rig(MemBacking::sparse(1 << 20), v, LO_FLAGS_DIRECT_IO);
        r.submit(ReqOp::Write, 0, Some(block(3)));
        let attempts = r.lo.stats().nowait_eagain;
        assert_eq!(attempts, usize::from(v.nowait_first), "{}", v.name);
        r.run_worker();
        r.submit(ReqOp::Read, 0, Some(block(0)));
        r.run_worker();
        let ended = r.ended.lock().clone();
        assert_eq!(
            ended.iter().map(|e| e.1).collect::<Vec<_>>(),
            [BLK_STS_OK, BLK_STS_OK],
            "{}",
            v.name
        );
        assert_eq!(ended[1].2, block(3), "{}: the data reads back", v.name);
        assert_eq!(backing_writers(&r), leaked, "{}: writers leaked", v.name);
        let sb = r.mem.superblock().unwrap();
        let reports = sb.check_writers(&r.cx);
        assert_eq!(reports.len(), leaked as usize, "{}", v.name);
        if leaked > 0 {
            println!("{}: {}", v.name, reports[0]);
            assert_eq!(
                reports[0].message,
                "biosim: vdb sb_writers#3 level 1: 1 writer never ended (kiocb_start_write() without kiocb_end_write())"
            );
        }
    }
}

/// The hint (6/6) skips the NOWAIT attempt of a write while a blocking write is queued, so V5
/// leaks only on the first write into a hole; without the hint every fallen-back write leaks.
#[test]
#[cfg_attr(
    feature = "bug-loop-no-kiocb-start-write",
    should_panic(expected = "leaked")
)]
fn the_hint_limits_the_leak_to_the_first_write_into_a_hole() {
    for (v, leaked) in [(LoopVariant::V5, 1), (LoopVariant::V5_NO_HINT, 4)] {
        let r = rig(MemBacking::sparse(1 << 20), v, LO_FLAGS_DIRECT_IO);
        for i in 0..4u64 {
            r.submit(ReqOp::Write, i * 8, Some(block(i as u8 + 1)));
        }
        r.run_worker();
        assert_eq!(r.statuses(), [BLK_STS_OK; 4], "{}", v.name);
        assert_eq!(backing_writers(&r), leaked, "{}: writers leaked", v.name);
    }
}

/// A read that falls back (one-shot contention) takes no freeze protection, so leaks nothing; a
/// write that falls back for the same reason on an allocated file leaks like a hole's.
#[test]
#[cfg_attr(
    feature = "bug-loop-no-kiocb-start-write",
    should_panic(expected = "leaked")
)]
fn a_read_that_falls_back_leaks_nothing_and_a_contended_write_does() {
    let r = rig(
        MemBacking::preallocated(1 << 20),
        LoopVariant::V5,
        LO_FLAGS_DIRECT_IO,
    );
    r.mem.refuse_nowait_once();
    r.submit(ReqOp::Read, 0, Some(block(9)));
    r.run_worker();
    assert_eq!(r.lo.stats().nowait_eagain, 1);
    assert_eq!(backing_writers(&r), 0, "a read takes no freeze protection");
    r.mem.refuse_nowait_once();
    r.submit(ReqOp::Write, 0, Some(block(4)));
    r.run_worker();
    assert_eq!(r.lo.stats().nowait_eagain, 2);
    assert_eq!(r.statuses(), [BLK_STS_OK, BLK_STS_OK]);
    assert_eq!(backing_writers(&r), 1, "the contended write leaked");
}

/// The leaked writer makes `freeze_super()` on the backing wait forever: the hung-task report
/// (the detector on, 120 s) and `NeverDrained`; on the fixed twin the freeze completes and the
/// thaw undoes it. Also a catcher of `bug-hung-task-detector-off` (no report: "hangs" fails).
#[test]
#[cfg_attr(
    any(
        feature = "bug-loop-no-kiocb-start-write",
        feature = "bug-hung-task-detector-off"
    ),
    should_panic(expected = "hangs")
)]
fn a_leaked_writer_hangs_freeze_super_on_the_backing_and_the_fix_does_not() {
    use crate::fs::super_block::{FreezeError, SB_FREEZE_WRITE};
    for (v, hangs) in [(LoopVariant::V5, true), (V5_FIXED, false)] {
        let r = rig(MemBacking::sparse(1 << 20), v, LO_FLAGS_DIRECT_IO);
        r.k.set_hung_task_timeout_secs(120);
        r.submit(ReqOp::Write, 0, Some(block(3)));
        r.run_worker();
        let sb = r.mem.superblock().unwrap();
        let res = sb.freeze_super(&r.cx);
        let hung = r.k.reports().of_kind(ReportKind::HungTask);
        if hangs {
            assert_eq!(
                res,
                Err(FreezeError::NeverDrained {
                    level: SB_FREEZE_WRITE,
                    readers: 1
                }),
                "{}: the freeze hangs",
                v.name
            );
            assert_eq!(hung.len(), 1, "{}: the freeze hangs", v.name);
            println!("{}", hung[0]);
            assert!(hung[0]
                .message
                .contains("waiting in freeze_super: percpu_down_write(sb_writers#3)"));
        } else {
            assert_eq!(res, Ok(()), "{}: the freeze hangs", v.name);
            assert!(hung.is_empty());
            assert_eq!(sb.thaw_super(&r.cx), Ok(()));
            assert!(r.k.reports().is_empty(), "{:?}", r.k.reports().all());
        }
    }
}

/// 5/6's requeue of a bdev's `ki_complete(-EAGAIN)` returns before the end work too: the
/// NOWAIT attempt's write on the bdev pseudo file system's superblock is never ended (harmless in
/// practice: nothing freezes that superblock). The fix ends it before requeueing.
#[test]
#[cfg_attr(
    feature = "bug-loop-no-kiocb-start-write",
    should_panic(expected = "leaked")
)]
fn an_async_eagain_from_a_bdev_requeues_without_kiocb_end_write() {
    for (v, leaked) in [(LoopVariant::V5, 1), (V5_FIXED, 0)] {
        let r = rig(
            MemBacking::preallocated(1 << 20)
                .as_block_device()
                .asynchronous(),
            v,
            LO_FLAGS_DIRECT_IO,
        );
        assert_eq!(r.mem.superblock().unwrap().s_id(), "bdev");
        r.mem.refuse_nowait_once();
        r.submit(ReqOp::Write, 0, Some(block(5)));
        complete_all(&r);
        assert_eq!(r.lo.stats().nowait_eagain, 1);
        r.run_worker();
        complete_all(&r);
        assert_eq!(r.statuses(), [BLK_STS_OK], "{}", v.name);
        assert_eq!(backing_writers(&r), leaked, "{}: writers leaked", v.name);
    }
}

/// The tag set follows the version: the base's `->queue_rq()` runs under `rcu_read_lock()` (no
/// sleeping), the NOWAIT versions' under the tag set's SRCU (`BLK_MQ_F_BLOCKING`, patch 5/6).
#[test]
fn the_nowait_versions_tag_set_is_blocking_and_the_bases_is_not() {
    for v in LoopVariant::ALL {
        let r = rig(MemBacking::sparse(1 << 20), v, LO_FLAGS_DIRECT_IO);
        let q = r.lo.mq_queue().expect("a blk-mq device");
        assert_eq!(
            q.flags & BLK_MQ_F_BLOCKING != 0,
            v.nowait_first,
            "{}",
            v.name
        );
        let ctx = |cx: &Cpu| (cx.preempt_count(), cx.rcu_preempt_depth());
        let outside = ctx(&r.cx);
        let (inside, srcu) = q.blk_mq_run_dispatch_ops(&r.cx, || (ctx(&r.cx), q.srcu.readers()));
        let under_rcu = inside != outside;
        assert_eq!(
            (under_rcu, srcu),
            (!v.nowait_first, u32::from(v.nowait_first)),
            "{}: rcu_read_lock() or SRCU",
            v.name
        );
    }
}
