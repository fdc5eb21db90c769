//! `block/blk-core.c`: the checks `submit_bio_noacct()` makes before a bio reaches its driver, and
//! the driver interface it hands the bio to (`block_device_operations->submit_bio`, or blk-mq's
//! `->queue_rq` for one-bio requests).
//!
//! The order is the kernel's (kernel-semantics.md §4.5, `block/blk-core.c`): `REQ_NOWAIT` on a
//! queue without `BLK_FEAT_NOWAIT` fails with `BLK_STS_NOTSUPP`; `should_fail_bio()`
//! (`fail_make_request` fault injection, `kernel/fault_inject.rs`) fails with `BLK_STS_IOERR`;
//! `bio_check_ro()` only warns;
//! `bio_check_eod()` fails an access beyond the end of the device with `BLK_STS_IOERR` (quietly
//! for a 0-capacity device); a flush (`op_is_flush()`: `REQ_PREFLUSH` or `REQ_FUA`) must be a
//! write, and on a queue without a volatile write cache the flags are stripped and an empty flush
//! completes `BLK_STS_OK` at once; then per op: `REQ_OP_FLUSH` itself cannot be submitted as a bio
//! (the flush state machine synthesises it), and discard / write-zeroes need the queue's support —
//! all three fail with `BLK_STS_NOTSUPP`. A read or write whose size is not a multiple of the
//! logical block size fails: `bio_split_rw_at()` returns `-EINVAL` and `bio_submit_split()` ends
//! the bio with `errno_to_blk_status(-EINVAL)`, which is `BLK_STS_IOERR` with the status table of
//! kernel-semantics.md §4.4 (it has no `-EINVAL` entry).
//!
//! Also here: `kblockd_workqueue` (`blk_dev_init()`) and `kblockd_mod_delayed_work_on()`, where
//! blk-mq runs a hardware queue asynchronously.

use super::bio::{bio_endio, bio_endio_status};
use super::blk_status::{errno_to_blk_status, BLK_STS_IOERR, BLK_STS_NOTSUPP};
use super::blk_types::{Bio, ReqFlags, ReqOp, SECTOR_SHIFT};
use super::trace;
use crate::kernel::Cpu;
use crate::sync::UntrackedArc;
use std::collections::VecDeque;
use std::fmt;

/// `kblockd_workqueue`: `blk_dev_init()`'s `alloc_workqueue("kblockd", WQ_MEM_RECLAIM |
/// WQ_HIGHPRI | WQ_PERCPU, 0)`, allocated on first use so that a kernel without blk-mq work
/// shows no extra workqueue. Its work runs on the CPU's highpri pool (`kworker/N:1H`).
pub fn kblockd_workqueue(kernel: &crate::kernel::Kernel) -> crate::workqueue::Workqueue {
    use crate::workqueue::{WQ_HIGHPRI, WQ_MEM_RECLAIM, WQ_PERCPU};
    kernel
        .kblockd
        .get_or_init(|| {
            kernel
                .alloc_workqueue("kblockd", WQ_MEM_RECLAIM | WQ_HIGHPRI | WQ_PERCPU, 0)
                .expect("kblockd's flags are valid")
        })
        .clone()
}

/// `kblockd_mod_delayed_work_on(cpu, dwork, delay)`: `mod_delayed_work_on()` on kblockd
/// (`None` is `WORK_CPU_UNBOUND`: the local CPU for this per-CPU workqueue).
pub fn kblockd_mod_delayed_work_on(
    cpu: Option<crate::kernel::CpuId>,
    dwork: crate::workqueue::DelayedWork,
    delay: u64,
    cx: &Cpu,
) -> bool {
    let wq = kblockd_workqueue(cx.kernel());
    cx.kernel().mod_delayed_work_on(cpu, &wq, dwork, delay, cx)
}

/// The parts of `struct queue_limits` and the gendisk that the submit path reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// `get_capacity()`: the device size in 512-byte sectors.
    pub capacity_sectors: u64,
    /// `logical_block_size`: every bio's size is a multiple of it.
    pub logical_block_size: u32,
    /// `BLK_FEAT_NOWAIT`: the driver honours `REQ_NOWAIT`.
    pub nowait: bool,
    /// `BLK_FEAT_WRITE_CACHE`: a volatile write cache, so flushes mean something.
    pub write_cache: bool,
    /// `BLK_FEAT_FUA`: the device implements `REQ_FUA` natively.
    pub fua: bool,
    /// `bdev_read_only()`.
    pub read_only: bool,
    /// `bdev_max_discard_sectors() != 0`.
    pub discard: bool,
    /// `limits.max_write_zeroes_sectors != 0`.
    pub write_zeroes: bool,
}

impl QueueLimits {
    /// A queue of `bytes` (rounded down to whole logical blocks) with 512-byte blocks, no NOWAIT,
    /// a write cache, no native FUA, writable.
    pub fn new(bytes: u64) -> Self {
        QueueLimits {
            capacity_sectors: bytes >> SECTOR_SHIFT,
            logical_block_size: 512,
            nowait: false,
            write_cache: true,
            fua: false,
            read_only: false,
            discard: true,
            write_zeroes: true,
        }
    }

    /// The capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_sectors << SECTOR_SHIFT
    }
}

/// A block driver: what `submit_bio_noacct()` hands a checked bio to. The driver owns the bio
/// from here and must end it exactly once (`bio_endio()`), in whatever context its completion
/// path runs.
pub trait BlockDriver: Send + Sync + fmt::Debug {
    /// The disk name (`loop0`, `nullb0`).
    fn disk_name(&self) -> String;
    /// `(major, minor)` for the block tracepoints.
    fn devt(&self) -> (u32, u32);
    /// The queue limits.
    fn limits(&self) -> QueueLimits;
    /// `->submit_bio()` / `->queue_rq()`: take the bio.
    fn submit_bio(&self, bio: Box<Bio>, cx: &Cpu);
    /// An owned reference to this device (what `bio->bi_bdev` holds), so a bio submitted to it
    /// from inside another submission can wait on `current->bio_list`. `None` for a driver
    /// that cannot give one (such a nested submission is a WARN and runs recursively).
    fn bdev(&self) -> Option<UntrackedArc<dyn BlockDriver>> {
        None
    }
    /// The blk-mq request queue (`!BD_HAS_SUBMIT_BIO`): `__submit_bio()` then calls
    /// `blk_mq_submit_bio()` instead of [`BlockDriver::submit_bio`]. `None`: a bio-based driver.
    fn mq_queue(&self) -> Option<UntrackedArc<super::blk_mq::RequestQueue>> {
        None
    }
    /// `bdev_is_partition()`: for a partition, its disk (`bdev_whole()`) and `bd_start_sect`,
    /// for `blk_partition_remap()` ([`super::partition::Partition`]). `None`: a whole disk.
    fn bd_partition(&self) -> Option<(UntrackedArc<dyn BlockDriver>, u64)> {
        None
    }
}

/// What `submit_bio_noacct()` did with a bio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submission {
    /// Handed to the driver.
    Submitted,
    /// Ended at once without reaching the driver (an empty flush on a queue without a write
    /// cache), with `BLK_STS_OK`.
    Completed,
    /// Ended at once with an error status; the reason is in the status.
    Failed(super::BlkStatus),
}

/// `should_fail_bio()` → `should_fail_request(bdev_whole(bio->bi_bdev), bi_size)`
/// (`CONFIG_FAIL_MAKE_REQUEST`): the device's `make-it-fail` and the `fail_make_request` attr,
/// or biosim's one-shot `fail_io DEV`. A failed bio ends with `BLK_STS_IOERR`.
fn should_fail_bio(bio: &Bio, dev: &dyn BlockDriver, cx: &Cpu) -> bool {
    let fi = cx.kernel().fault_inject();
    fi.io_armed() && fi.should_fail_request(&dev.disk_name(), bio.bi_iter.bi_size, cx)
}

/// `bio_check_ro()`: a write to a read-only device is a warning only ("Trying to write to
/// read-only block-device"), as in the kernel.
fn bio_check_ro(bio: &Bio, lim: &QueueLimits, dev: &dyn BlockDriver, cx: &Cpu) {
    if lim.read_only && bio.op().is_write() && bio.bi_iter.bi_size > 0 {
        cx.kernel().warn_once(
            cx,
            "block/blk-core.c:bio_check_ro",
            &format!(
                "block/blk-core.c: Trying to write to read-only block-device {}",
                dev.disk_name()
            ),
        );
    }
}

/// `bio_check_eod()`: whether the bio lies inside the device (only a bio with sectors can be
/// beyond the end); if not, the kernel's "attempt to access beyond end of device" message
/// (`current->comm`, then `%pg` of the bio's bdev with `rw=%d`, the raw `bi_opf`).
fn bio_check_eod(bio: &Bio, lim: &QueueLimits, dev: &dyn BlockDriver, cx: &Cpu) -> bool {
    let nr = bio.sectors();
    let max = lim.capacity_sectors;
    if nr == 0 || (nr <= max && bio.bi_iter.bi_sector <= max - nr) {
        return true;
    }
    if max > 0 {
        tracing::info!(
            target: "block",
            cpu = cx.id().0,
            "{}: attempt to access beyond end of device\n{}: rw={}, sector={}, nr_sectors = {} limit={}",
            cx.current().comm,
            dev.disk_name(),
            bio.bi_opf.raw(),
            bio.bi_iter.bi_sector,
            nr,
            max
        );
    }
    false
}

/// `blk_partition_remap()`: a partition's bio moves onto its disk. `should_fail_request()` on
/// the partition (`fail_make_request`, the one-shot `fail_io` naming it) fails it; a bio with
/// sectors gains `bd_start_sect` and is traced as `block_bio_remap` (`bio_dev()` is the disk's
/// devt, the old one the partition's). Returns `false` for a failed bio (not ended here).
fn blk_partition_remap(
    bio: &mut Bio,
    part: &dyn BlockDriver,
    start: u64,
    whole: (u32, u32),
    cx: &Cpu,
) -> bool {
    let fi = cx.kernel().fault_inject();
    if fi.io_armed() && fi.should_fail_request(&part.disk_name(), bio.bi_iter.bi_size, cx) {
        return false;
    }
    // bio_dev(): the disk's devt, whichever block_device the bio names.
    bio.bi_bdev = Some(whole);
    if bio.sectors() > 0 {
        bio.bi_iter.bi_sector += start;
        trace::block_bio_remap(bio, part.devt(), bio.bi_iter.bi_sector - start, cx);
    }
    true
}

/// `submit_bio_noacct()`: the generic checks, then the driver. Every bio given here is ended
/// exactly once: by this function on a failed check, or by the driver. A bio for a partition
/// is checked against the partition's size, then remapped onto the disk
/// (`blk_partition_remap()`), whose driver gets it.
pub fn submit_bio_noacct(mut bio: Box<Bio>, dev: &dyn BlockDriver, cx: &Cpu) -> Submission {
    let lim = dev.limits();
    bio.bi_bdev = Some(dev.devt());
    if bio.bi_opf.flags.contains(ReqFlags::REQ_NOWAIT) && !lim.nowait {
        bio_endio_status(bio, BLK_STS_NOTSUPP, cx);
        return Submission::Failed(BLK_STS_NOTSUPP);
    }
    let part = dev.bd_partition();
    // should_fail_request(bdev_whole(bio->bi_bdev), ..): the disk's make-it-fail.
    let fail_dev = part.as_ref().map_or(dev, |(whole, _)| &**whole);
    if should_fail_bio(&bio, fail_dev, cx) {
        bio_endio_status(bio, BLK_STS_IOERR, cx);
        return Submission::Failed(BLK_STS_IOERR);
    }
    bio_check_ro(&bio, &lim, dev, cx);
    // bdev_nr_sectors(bio->bi_bdev): a partition's own size. Twin:
    // `bug-partition-eod-whole-disk` checks against the whole disk's.
    let eod_lim = match &part {
        Some((whole, _)) if cfg!(feature = "bug-partition-eod-whole-disk") => whole.limits(),
        _ => lim,
    };
    if !bio_check_eod(&bio, &eod_lim, dev, cx) {
        bio_endio_status(bio, BLK_STS_IOERR, cx);
        return Submission::Failed(BLK_STS_IOERR);
    }
    let dev = match &part {
        Some((whole, start)) => {
            if !blk_partition_remap(&mut bio, dev, *start, whole.devt(), cx) {
                bio_endio_status(bio, BLK_STS_IOERR, cx);
                return Submission::Failed(BLK_STS_IOERR);
            }
            &**whole
        }
        None => dev,
    };
    let flags = bio.bi_opf.flags;
    if flags.contains(ReqFlags::REQ_PREFLUSH) || flags.contains(ReqFlags::REQ_FUA) {
        if bio.op() != ReqOp::Write {
            cx.kernel().warn_once(
                cx,
                "block/blk-core.c:submit_bio_noacct(op_is_flush)",
                "block/blk-core.c: WARN_ON_ONCE(bio_op(bio) != REQ_OP_WRITE) for a flush bio",
            );
            bio_endio_status(bio, BLK_STS_IOERR, cx);
            return Submission::Failed(BLK_STS_IOERR);
        }
        if !lim.write_cache {
            // No volatile write cache: flush and FUA mean nothing; an empty flush is done.
            bio.bi_opf.flags.0 &= !(ReqFlags::REQ_PREFLUSH.0 | ReqFlags::REQ_FUA.0);
            if bio.sectors() == 0 {
                trace::block_bio_queue(&bio, cx);
                bio_endio(bio, cx);
                return Submission::Completed;
            }
        }
    }
    let supported = match bio.op() {
        ReqOp::Read | ReqOp::Write => true,
        // "REQ_OP_FLUSH can't be submitted through bios".
        ReqOp::Flush => false,
        ReqOp::Discard => lim.discard,
        ReqOp::WriteZeroes => lim.write_zeroes,
    };
    if !supported {
        bio_endio_status(bio, BLK_STS_NOTSUPP, cx);
        return Submission::Failed(BLK_STS_NOTSUPP);
    }
    let lbs = lim.logical_block_size.max(1);
    if matches!(bio.op(), ReqOp::Read | ReqOp::Write) && !bio.bi_iter.bi_size.is_multiple_of(lbs) {
        let status = errno_to_blk_status(crate::errno::Errno::EINVAL.as_neg_i32());
        bio_endio_status(bio, status, cx);
        return Submission::Failed(status);
    }
    submit_bio_noacct_nocheck(bio, dev, cx);
    Submission::Submitted
}

/// A bio waiting on `current->bio_list` with the device it is for (`bio->bi_bdev`): the model's
/// bios name their device by `dev_t` only, so the list keeps the driver reference the kernel
/// reaches through `bi_bdev->bd_disk`.
#[derive(Debug)]
pub struct PendingBio {
    /// The bio.
    pub bio: Box<Bio>,
    /// Its device.
    pub dev: UntrackedArc<dyn BlockDriver>,
}

/// `current->bio_list`: `[0]` collects the bios submitted while one is being handled, `[1]` holds
/// the ones still pending from before (`bio_list_on_stack[2]` of `__submit_bio_noacct()`).
#[derive(Debug, Default)]
pub struct CurrentBioList {
    /// `bio_list_on_stack[0]`.
    pub on_stack0: VecDeque<PendingBio>,
    /// `bio_list_on_stack[1]`.
    pub on_stack1: VecDeque<PendingBio>,
}

/// `submit_bio_noacct_nocheck()`: `block_bio_queue`, then either onto `current->bio_list[0]`
/// (a submission from inside another one: handled after it, never recursively) or through
/// `__submit_bio_noacct()` (bio-based driver) / `__submit_bio_noacct_mq()` (blk-mq driver).
///
/// A nested submission needs an owned reference to its device ([`BlockDriver::bdev`]); a driver
/// without one is submitted recursively with a WARN, the model's own refusal to guess.
pub fn submit_bio_noacct_nocheck(bio: Box<Bio>, dev: &dyn BlockDriver, cx: &Cpu) {
    trace::block_bio_queue(&bio, cx);
    let active = cx.task_state().bio_list.borrow().is_some();
    if active {
        match dev.bdev() {
            Some(dev) => {
                if let Some(l) = cx.task_state().bio_list.borrow_mut().as_mut() {
                    l.on_stack0.push_back(PendingBio { bio, dev });
                }
            }
            None => {
                cx.warn(&format!(
                    "block/blk-core.c: submit_bio_noacct_nocheck: {} has no gendisk reference (BlockDriver::bdev): submitted recursively",
                    dev.disk_name()
                ));
                __submit_bio(bio, dev, cx);
            }
        }
    } else if dev.mq_queue().is_some() {
        __submit_bio_noacct_mq(bio, dev, cx);
    } else {
        __submit_bio_noacct(bio, dev, cx);
    }
}

/// `__submit_bio()`: the bio goes to the driver inside an on-stack plug (`blk_start_plug()` …
/// `blk_finish_plug()`): `blk_mq_submit_bio()` for a blk-mq queue, `->submit_bio()` otherwise.
fn __submit_bio(bio: Box<Bio>, dev: &dyn BlockDriver, cx: &Cpu) {
    let plug = super::blk_plug::blk_start_plug(cx);
    match dev.mq_queue() {
        Some(q) => super::blk_mq::blk_mq_submit_bio(&q, bio, cx),
        None => dev.submit_bio(bio, cx),
    }
    super::blk_plug::blk_finish_plug(plug, cx);
}

/// `bio_list_pop()` of `current->bio_list[0]` as `__submit_bio_noacct()` uses it: FIFO. The
/// buggy twin `bug-bio-list-lifo` pops the newest instead.
fn bio_list_pop(l: &mut VecDeque<PendingBio>) -> Option<PendingBio> {
    if cfg!(feature = "bug-bio-list-lifo") {
        l.pop_back()
    } else {
        l.pop_front()
    }
}

/// `__submit_bio_noacct()` (bio-based drivers): after each `__submit_bio()`, the bios it
/// submitted are sorted: those for a lower device first, then those for the same queue, then
/// the ones pending from before, so a stacked driver's lower I/O runs before more of its own.
fn __submit_bio_noacct(bio: Box<Bio>, dev: &dyn BlockDriver, cx: &Cpu) {
    let ts = cx.task_state();
    *ts.bio_list.borrow_mut() = Some(CurrentBioList::default());
    let mut next: Option<PendingBio> = None;
    let mut first = Some(bio);
    loop {
        let (bio, d): (Box<Bio>, Option<UntrackedArc<dyn BlockDriver>>) = match first.take() {
            Some(b) => (b, None),
            None => match next.take() {
                Some(p) => (p.bio, Some(p.dev)),
                None => break,
            },
        };
        let dev_now: &dyn BlockDriver = d.as_deref().unwrap_or(dev);
        let q = dev_now.devt();
        {
            let mut g = ts.bio_list.borrow_mut();
            let l = g.as_mut().expect("set above");
            l.on_stack1 = std::mem::take(&mut l.on_stack0);
        }
        __submit_bio(bio, dev_now, cx);
        let mut g = ts.bio_list.borrow_mut();
        let l = g.as_mut().expect("set above");
        let (same, lower): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut l.on_stack0)
            .into_iter()
            .partition(|p| p.dev.devt() == q);
        l.on_stack0 = lower;
        l.on_stack0.extend(same);
        let pending = std::mem::take(&mut l.on_stack1);
        l.on_stack0.extend(pending);
        next = bio_list_pop(&mut l.on_stack0);
    }
    *ts.bio_list.borrow_mut() = None;
}

/// `__submit_bio_noacct_mq()` (blk-mq drivers): one list, handled in order; a blk-mq driver's
/// `->queue_rq()` never submits to itself, so there is nothing to sort.
fn __submit_bio_noacct_mq(bio: Box<Bio>, dev: &dyn BlockDriver, cx: &Cpu) {
    let ts = cx.task_state();
    *ts.bio_list.borrow_mut() = Some(CurrentBioList::default());
    __submit_bio(bio, dev, cx);
    loop {
        let next = {
            let mut g = ts.bio_list.borrow_mut();
            bio_list_pop(&mut g.as_mut().expect("set above").on_stack0)
        };
        let Some(p) = next else { break };
        __submit_bio(p.bio, &*p.dev, cx);
    }
    *ts.bio_list.borrow_mut() = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{BioEndIo, BlkStatus, BLK_STS_OK};
    use crate::kernel::{CpuId, KernelConfig};
    use crate::sync::{Arc, Mutex};
    use crate::Kernel;

    #[derive(Debug)]
    struct Sink {
        lim: QueueLimits,
        got: Mutex<Vec<u64>>,
    }

    impl BlockDriver for Sink {
        fn disk_name(&self) -> String {
            "sink0".into()
        }
        fn devt(&self) -> (u32, u32) {
            (7, 0)
        }
        fn limits(&self) -> QueueLimits {
            self.lim
        }
        fn submit_bio(&self, bio: Box<Bio>, cx: &Cpu) {
            self.got.lock().push(bio.bi_iter.bi_sector);
            bio_endio(bio, cx);
        }
    }

    fn run(
        lim: QueueLimits,
        op: ReqOp,
        sector: u64,
        bytes: usize,
        flags: ReqFlags,
    ) -> (Submission, Vec<BlkStatus>, usize) {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let ended: Arc<Mutex<Vec<BlkStatus>>> = Arc::default();
        let e2 = Arc::clone(&ended);
        let mut bio = k
            .bio_alloc(op, sector)
            .with_flags(flags)
            .with_end_io(BioEndIo::new("test_end_io", move |b, _| {
                e2.lock().push(b.status())
            }));
        if bytes > 0 {
            bio.add_data(vec![0; bytes]);
        }
        let dev = Sink {
            lim,
            got: Mutex::new(Vec::new()),
        };
        let s = submit_bio_noacct(bio, &dev, &cx);
        let got = dev.got.lock().len();
        let e = ended.lock().clone();
        (s, e, got)
    }

    #[test]
    fn every_bio_ends_exactly_once_whatever_the_check_says() {
        let lim = QueueLimits::new(1 << 20); // 2048 sectors
        let cases = [
            (
                ReqOp::Write,
                0,
                4096,
                ReqFlags::NONE,
                Submission::Submitted,
                BLK_STS_OK,
                1,
            ),
            (
                ReqOp::Read,
                2040,
                4096,
                ReqFlags::NONE,
                Submission::Submitted,
                BLK_STS_OK,
                1,
            ),
            (
                ReqOp::Read,
                2041,
                4096,
                ReqFlags::NONE,
                Submission::Failed(BLK_STS_IOERR),
                BLK_STS_IOERR,
                0,
            ),
            (
                ReqOp::Read,
                u64::MAX - 2,
                4096,
                ReqFlags::NONE,
                Submission::Failed(BLK_STS_IOERR),
                BLK_STS_IOERR,
                0,
            ),
            // A zero-length bio is never beyond the end.
            (
                ReqOp::Write,
                5000,
                0,
                ReqFlags::REQ_PREFLUSH,
                Submission::Submitted,
                BLK_STS_OK,
                1,
            ),
            // REQ_OP_FLUSH is not a bio op; a flush flag on a read is refused.
            (
                ReqOp::Flush,
                0,
                0,
                ReqFlags::NONE,
                Submission::Failed(BLK_STS_NOTSUPP),
                BLK_STS_NOTSUPP,
                0,
            ),
            (
                ReqOp::Read,
                0,
                0,
                ReqFlags::REQ_PREFLUSH,
                Submission::Failed(BLK_STS_IOERR),
                BLK_STS_IOERR,
                0,
            ),
            (
                ReqOp::Write,
                0,
                4096,
                ReqFlags::REQ_NOWAIT,
                Submission::Failed(BLK_STS_NOTSUPP),
                BLK_STS_NOTSUPP,
                0,
            ),
            (
                ReqOp::Write,
                0,
                1000,
                ReqFlags::NONE,
                Submission::Failed(BLK_STS_IOERR),
                BLK_STS_IOERR,
                0,
            ),
        ];
        for (op, sector, bytes, flags, want, status, reached) in cases {
            let (s, ended, got) = run(lim, op, sector, bytes, flags);
            assert_eq!(s, want, "{op:?} at {sector}");
            assert_eq!(ended, vec![status], "{op:?} at {sector}: ended once");
            assert_eq!(got, reached, "{op:?} at {sector}");
        }
    }

    #[test]
    fn a_zero_capacity_device_fails_quietly_and_nowait_queues_accept_nowait() {
        let (s, _, _) = run(QueueLimits::new(0), ReqOp::Read, 0, 512, ReqFlags::NONE);
        assert_eq!(s, Submission::Failed(BLK_STS_IOERR));
        let lim = QueueLimits {
            nowait: true,
            ..QueueLimits::new(1 << 20)
        };
        let (s, e, got) = run(lim, ReqOp::Read, 0, 512, ReqFlags::REQ_NOWAIT);
        assert_eq!((s, e, got), (Submission::Submitted, vec![BLK_STS_OK], 1));
    }

    #[test]
    fn without_a_write_cache_an_empty_flush_completes_without_the_driver() {
        let lim = QueueLimits {
            write_cache: false,
            ..QueueLimits::new(1 << 20)
        };
        let (s, e, got) = run(lim, ReqOp::Write, 0, 0, ReqFlags::REQ_PREFLUSH);
        assert_eq!((s, e, got), (Submission::Completed, vec![BLK_STS_OK], 0));
        // An empty write without a flush flag is not a flush: it reaches the driver.
        let (s, _, got) = run(lim, ReqOp::Write, 0, 0, ReqFlags::NONE);
        assert_eq!((s, got), (Submission::Submitted, 1));
        let no_discard = QueueLimits {
            discard: false,
            ..QueueLimits::new(1 << 20)
        };
        let (s, _, got) = run(no_discard, ReqOp::Discard, 0, 0, ReqFlags::NONE);
        assert_eq!((s, got), (Submission::Failed(BLK_STS_NOTSUPP), 0));
        let (s, _, got) = run(
            lim,
            ReqOp::Write,
            0,
            512,
            ReqFlags::REQ_FUA | ReqFlags::REQ_PREFLUSH,
        );
        assert_eq!((s, got), (Submission::Submitted, 1));
    }

    #[test]
    fn writing_a_read_only_device_warns_and_goes_on() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let dev = Sink {
            lim: QueueLimits {
                read_only: true,
                ..QueueLimits::new(1 << 20)
            },
            got: Mutex::new(Vec::new()),
        };
        let bio = k.bio_alloc(ReqOp::Write, 0).with_data(vec![1; 512]);
        assert_eq!(submit_bio_noacct(bio, &dev, &cx), Submission::Submitted);
        let warns = k.reports().all();
        assert_eq!(warns.len(), 1);
        assert!(warns[0]
            .message
            .contains("Trying to write to read-only block-device sink0"));
    }
}
