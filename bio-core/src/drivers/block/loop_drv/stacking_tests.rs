//! Loop devices on the blk-mq path, stacked: a loop device over a simulated block device
//! ([`BdevBacking`]) submits its direct I/O with `submit_bio_noacct()` from inside its
//! `->queue_rq()`, so the lower bio waits on `current->bio_list` and runs after it.

use super::*;
use crate::block::{submit_bio_noacct, BioEndIo, BlkStatus};
use crate::drivers::block::null_blk::NullBlkConfig;
use crate::drivers::block::null_blk::{HrtimerClock, NullBlk};
use crate::kernel::trace::tests::capture;
use crate::kernel::{CpuId, KernelConfig};
use crate::sync::UntrackedArc;

type Ends = UntrackedArc<Mutex<Vec<(BlkStatus, Vec<u8>)>>>;

fn io(dev: &dyn BlockDriver, op: ReqOp, sector: u64, data: Vec<u8>, ends: &Ends, cx: &Cpu) {
    let e = UntrackedArc::clone(ends);
    let bio = cx
        .kernel()
        .bio_alloc(op, sector)
        .with_data(data)
        .with_end_io(BioEndIo::new("test_end_io", move |b, _| {
            e.lock().push((b.status(), b.data()))
        }));
    submit_bio_noacct(bio, dev, cx);
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..4096u32)
        .map(|i| (i as u8).wrapping_mul(7) ^ seed)
        .collect()
}

/// `loop<number>` on the blk-mq path, direct I/O, V5, over `lower`.
fn loop_over(
    k: &Kernel,
    number: u32,
    lower: UntrackedArc<dyn BlockDriver>,
) -> UntrackedArc<LoopDevice> {
    let backing = UntrackedArc::new(BdevBacking::new(lower));
    let lo = LoopDevice::new_blk_mq(
        k,
        number,
        UntrackedArc::clone(&backing) as UntrackedArc<dyn LoopBacking>,
        LO_FLAGS_DIRECT_IO,
        0,
        LoopVariant::V5,
    );
    assert!(backing.attach(&lo));
    lo
}

/// Writes two blocks through `top`, reads them back, and checks the data and that every bio
/// ended `BLK_STS_OK` once.
fn write_then_read_back(top: &dyn BlockDriver, cx: &Cpu) {
    let ends: Ends = UntrackedArc::new(Mutex::new(Vec::new()));
    io(top, ReqOp::Write, 8, pattern(1), &ends, cx);
    io(top, ReqOp::Write, 64, pattern(2), &ends, cx);
    io(top, ReqOp::Read, 64, vec![0; 4096], &ends, cx);
    io(top, ReqOp::Read, 8, vec![0; 4096], &ends, cx);
    let got = ends.lock().clone();
    assert_eq!(got.len(), 4, "each bio ends once");
    assert!(
        got.iter().all(|(s, _)| s.is_ok()),
        "{:?}",
        got.iter().map(|e| e.0).collect::<Vec<_>>()
    );
    assert_eq!(got[2].1, pattern(2));
    assert_eq!(got[3].1, pattern(1));
}

/// [`write_then_read_back`] through loop0 over a 1 MiB memory-backed nullb0 (`irqmode=0`) on
/// `k`: the events it fired and loop0's NOWAIT successes.
fn round_trip_over_null_blk(
    k: &UntrackedArc<Kernel>,
) -> (Vec<crate::kernel::trace::tests::Captured>, usize) {
    let cx = k.cpu(CpuId(0)).unwrap();
    let mut cfg = NullBlkConfig {
        clock: HrtimerClock::Explicit,
        size_bytes: 1 << 20,
        memory_backed: true,
        ..NullBlkConfig::default()
    };
    cfg.parse_param("irqmode", "0").unwrap();
    let nullb = NullBlk::new(k, 0, cfg).unwrap();
    let lo = loop_over(k, 0, nullb as UntrackedArc<dyn BlockDriver>);
    let ev = capture(|| write_then_read_back(&*lo, &cx));
    (ev, lo.stats().nowait_done)
}

#[test]
fn loop_over_null_blk_stores_through_the_stack_and_the_lower_bio_follows_queue_rq() {
    let k = Kernel::new(KernelConfig::default(), 1).unwrap();
    let (ev, nowait_done) = round_trip_over_null_blk(&k);
    // The first write: loop0's request is issued; its queue_rq submits the lower bio
    // (block_bio_queue is traced on submission) which waits on current->bio_list while
    // lo_rw_aio_nowait() returns -EIOCBQUEUED; only then does nullb0 get a request for it.
    let block: Vec<&str> = ev
        .iter()
        .filter(|e| e.tracepoint.starts_with("block_") || e.tracepoint == "biosim_loop_nowait")
        .map(|e| e.message.as_str())
        .take(10)
        .collect();
    assert_eq!(
        block,
        [
            "block_bio_queue: 7,0 W 8 + 8 [biosim/0]",
            "block_getrq: 7,0 W 8 + 8 [biosim/0]",
            "block_plug: [biosim/0]",
            "block_unplug: [biosim/0] 1",
            "block_rq_issue: 7,0 W 4096 () 8 + 8 be,0,4 [biosim/0]",
            "block_bio_queue: 254,0 WS 8 + 8 [biosim/0]",
            "biosim_loop_nowait: loop0: IOCB_NOWAIT W 8 + 8 -> -EIOCBQUEUED",
            "block_getrq: 254,0 WS 8 + 8 [biosim/0]",
            "block_rq_issue: 254,0 WS 4096 () 8 + 8 be,0,4 [biosim/0]",
            "block_rq_complete: 254,0 WS () 8 + 8 be,0,4 [0]",
        ]
    );
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    assert_eq!(nowait_done, 4);
}

/// The same stack with the tracepoints' static keys on, then off: on, the loop's
/// `biosim_loop_nowait`/`biosim_loop_aio_complete` and both devices' bio, plug and request
/// events fire; off, the data still round-trips and not one event fires, as a kernel with no
/// probe attached traces nothing.
#[test]
fn loop_over_null_blk_with_the_tracepoints_off_fires_no_event() {
    for on in [true, false] {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        k.set_tracepoints_enabled(on);
        let (ev, nowait_done) = round_trip_over_null_blk(&k);
        let names: std::collections::BTreeSet<&str> =
            ev.iter().map(|e| e.tracepoint.as_str()).collect();
        if on {
            for want in [
                "biosim_loop_nowait",
                "biosim_loop_aio_complete",
                "block_bio_queue",
                "block_plug",
                "block_rq_issue",
                "block_rq_complete",
            ] {
                assert!(names.contains(want), "on: no {want} in {names:?}");
            }
        } else {
            assert!(names.is_empty(), "off: {names:?}");
        }
        assert!(k.reports().is_empty(), "{:?}", k.reports().all());
        assert_eq!(nowait_done, 4, "the I/O ran");
    }
}

/// loop0 over nullb0p1 (a partition of nullb0 from sector 1024): loop0's lower bio is for the
/// partition; `blk_partition_remap()` moves it to nullb0 at `bd_start_sect` and traces
/// `block_bio_remap`; the data lands at the partition's offset on nullb0.
#[test]
fn loop_over_a_partition_remaps_its_lower_bio_to_the_disk() {
    use crate::block::partition::{bdev_add_partition, part_devt};
    let k = Kernel::new(KernelConfig::default(), 1).unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let mut cfg = NullBlkConfig {
        clock: HrtimerClock::Explicit,
        size_bytes: 1 << 20,
        memory_backed: true,
        ..NullBlkConfig::default()
    };
    cfg.parse_param("irqmode", "0").unwrap();
    let nullb = NullBlk::new(&k, 0, cfg).unwrap();
    let whole = UntrackedArc::clone(&nullb) as UntrackedArc<dyn BlockDriver>;
    let devt = part_devt(whole.devt(), 1, 1, 0);
    let part = bdev_add_partition(whole, 1, 1024, 1024, devt).unwrap();
    let lo = loop_over(&k, 0, part as UntrackedArc<dyn BlockDriver>);
    assert_eq!(
        lo.limits().capacity_sectors,
        1024,
        "loop0 is the partition's size"
    );
    let ev = capture(|| write_then_read_back(&*lo, &cx));
    let remaps: Vec<&str> = ev
        .iter()
        .filter(|e| e.tracepoint == "block_bio_remap")
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(
        remaps,
        [
            "block_bio_remap: 254,0 WS 1032 + 8 <- (259,0) 8",
            "block_bio_remap: 254,0 WS 1088 + 8 <- (259,0) 64",
            "block_bio_remap: 254,0 RS 1088 + 8 <- (259,0) 64",
            "block_bio_remap: 254,0 RS 1032 + 8 <- (259,0) 8",
        ]
    );
    assert_eq!(nullb.read_backing(1032 * 512, 4096), Some(pattern(1)));
    assert_eq!(nullb.read_backing(1088 * 512, 4096), Some(pattern(2)));
    assert_ne!(nullb.read_backing(8 * 512, 4096), Some(pattern(1)));
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
}

/// The lower bio of loop0 over nullb0 is `blkdev_direct_IO()`'s, from `blkdev_dio_pool` with
/// `GFP_KERNEL`: a one-shot failslab at `bio_alloc_bioset` is absorbed by the pool's reserve
/// (the I/O goes on), and the element is back in the reserve once the bio is freed.
#[test]
#[cfg_attr(
    feature = "bug-fault-oneshot-rearms",
    should_panic(expected = "the one-shot is spent")
)]
fn the_lower_bio_comes_from_blkdev_dio_pool_whose_reserve_absorbs_a_failure() {
    use crate::block::fops::{blkdev_dio_pool, BLKDEV_DIO_POOL_SIZE};
    let k = Kernel::new(KernelConfig::default(), 1).unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let mut cfg = NullBlkConfig {
        clock: HrtimerClock::Explicit,
        size_bytes: 1 << 20,
        memory_backed: true,
        ..NullBlkConfig::default()
    };
    cfg.parse_param("irqmode", "0").unwrap();
    let nullb = NullBlk::new(&k, 0, cfg).unwrap();
    let lo = loop_over(&k, 0, nullb as UntrackedArc<dyn BlockDriver>);
    k.fault_inject()
        .fail_alloc_once("bio_alloc_bioset")
        .unwrap();
    write_then_read_back(&*lo, &cx);
    assert_eq!(
        k.fault_inject().armed().0,
        Vec::<&str>::new(),
        "the one-shot is spent"
    );
    assert_eq!(
        blkdev_dio_pool(&k).bio_pool.curr_nr(),
        BLKDEV_DIO_POOL_SIZE,
        "the reserve element came back with the bio"
    );
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
}

#[test]
fn loop_over_loop_over_memory_stores_through_the_stack() {
    let k = Kernel::new(KernelConfig::default(), 1).unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let bottom = LoopDevice::new_blk_mq(
        &k,
        1,
        UntrackedArc::new(MemBacking::preallocated(1 << 20)),
        LO_FLAGS_DIRECT_IO,
        0,
        LoopVariant::V5,
    );
    let top = loop_over(
        &k,
        0,
        UntrackedArc::clone(&bottom) as UntrackedArc<dyn BlockDriver>,
    );
    write_then_read_back(&*top, &cx);
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    assert_eq!(
        (top.stats().nowait_done, bottom.stats().nowait_done),
        (4, 4)
    );
    // Nothing left behind: every tag of both queues is free again.
    for lo in [&top, &bottom] {
        assert_eq!(lo.mq_queue().map(|q| q.tags.busy()), Some(0));
    }
}

/// The same stack with the loop devices on the direct (bio-based) path: the lower bio is sorted
/// by `__submit_bio_noacct()` and the data arrives all the same.
#[test]
fn a_bio_based_loop_over_a_bdev_stores_through_the_stack() {
    let k = Kernel::new(KernelConfig::default(), 1).unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let bottom = LoopDevice::new_direct(
        &k,
        1,
        UntrackedArc::new(MemBacking::preallocated(1 << 20)),
        LO_FLAGS_DIRECT_IO,
        0,
        LoopVariant::V5,
    );
    let backing = UntrackedArc::new(BdevBacking::new(bottom as UntrackedArc<dyn BlockDriver>));
    let top = LoopDevice::new_direct(
        &k,
        0,
        UntrackedArc::clone(&backing) as UntrackedArc<dyn LoopBacking>,
        LO_FLAGS_DIRECT_IO,
        0,
        LoopVariant::V5,
    );
    assert!(backing.attach(&top));
    assert!(!backing.attach(&top), "a backing backs one device");
    write_then_read_back(&*top, &cx);
    assert!(k.reports().is_empty(), "{:?}", k.reports().all());
}
