//! A partition of a disk: `block/partitions/core.c` (`add_partition()`, `bdev_add_partition()`
//! behind `ioctl(BLKPG_ADD_PARTITION)`, `block/ioctl.c`'s `blkpg_do_ioctl()`), the partition
//! fields of `struct block_device` (`bd_start_sect`, `bdev_nr_sectors()`, `bdev_is_partition()`)
//! and its devt (`part_devt()`: the disk's own minors if it has room, else a minor of
//! `BLOCK_EXT_MAJOR`).
//!
//! A bio for a partition is checked against the partition's size by `submit_bio_noacct()`'s
//! `bio_check_eod()` and then remapped onto the whole disk by `blk_partition_remap()`
//! (`block/blk-core.c`, modelled in [`super::blk_core`]): its sector gains `bd_start_sect`, the
//! remap is traced as `block_bio_remap`, and the bio goes on to the disk's driver.
//!
//! Left out: the partition table scan (`blk_add_partitions()`: a partition here is added by
//! hand, as `BLKPG_ADD_PARTITION` or `parted` would), the overlap check against other
//! partitions (one partition per disk in the model), per-partition read-only and statistics.

use super::blk_core::{BlockDriver, QueueLimits};
use super::blk_status::BLK_STS_IOERR;
use super::blk_types::{Bio, SECTOR_SHIFT};
use crate::errno::Errno;
use crate::kernel::Cpu;
use crate::sync::{UntrackedArc, UntrackedWeak};
use std::fmt;

/// `BLOCK_EXT_MAJOR`: the major of partitions that do not fit in their disk's minors.
pub const BLOCK_EXT_MAJOR: u32 = 259;

/// `DISK_MAX_PARTS`.
pub const DISK_MAX_PARTS: u32 = 256;

/// `part_devt()` as `add_partition()` picks it: `MKDEV(major, first_minor + partno)` while
/// `partno < disk->minors`, else `MKDEV(BLOCK_EXT_MAJOR, blk_alloc_ext_minor())`, for which the
/// caller passes the first free extended minor.
pub fn part_devt(disk: (u32, u32), minors: u32, partno: u32, ext_minor: u32) -> (u32, u32) {
    if partno < minors {
        (disk.0, disk.1 + partno)
    } else {
        (BLOCK_EXT_MAJOR, ext_minor)
    }
}

/// The partition's name (`add_partition()`'s `dev_set_name()`): `nullb0p1` after a disk name
/// ending in a digit, `sda1` otherwise.
pub fn part_name(disk: &str, partno: u32) -> String {
    if disk.ends_with(|c: char| c.is_ascii_digit()) {
        format!("{disk}p{partno}")
    } else {
        format!("{disk}{partno}")
    }
}

/// A partition's `struct block_device`.
pub struct Partition {
    whole: UntrackedArc<dyn BlockDriver>,
    partno: u32,
    /// `bd_start_sect`.
    start_sect: u64,
    /// `bdev_nr_sectors()`.
    nr_sects: u64,
    /// `bd_dev`.
    devt: (u32, u32),
    me: UntrackedWeak<Partition>,
}

impl fmt::Debug for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Partition({} start={} sectors={})",
            self.disk_name(),
            self.start_sect,
            self.nr_sects
        )
    }
}

/// `bdev_add_partition(disk, partno, start, length)` after `blkpg_do_ioctl()`'s checks, in
/// sectors: `partno` 1..`DISK_MAX_PARTS` (`-EINVAL`), `start` aligned to the logical block
/// size (`-EINVAL`), and a non-empty partition of whole logical blocks inside the disk
/// (`-EINVAL`: `blkpg_do_ioctl()`'s length, alignment and `start >= capacity || end > capacity`
/// checks).
pub fn bdev_add_partition(
    whole: UntrackedArc<dyn BlockDriver>,
    partno: u32,
    start: u64,
    length: u64,
    devt: (u32, u32),
) -> Result<UntrackedArc<Partition>, Errno> {
    let lim = whole.limits();
    let lbs_sectors = u64::from(lim.logical_block_size.max(512)) >> SECTOR_SHIFT;
    if partno == 0 || partno >= DISK_MAX_PARTS {
        return Err(Errno::EINVAL);
    }
    if !start.is_multiple_of(lbs_sectors) || !length.is_multiple_of(lbs_sectors) || length == 0 {
        return Err(Errno::EINVAL);
    }
    if start
        .checked_add(length)
        .is_none_or(|end| end > lim.capacity_sectors)
    {
        return Err(Errno::EINVAL);
    }
    Ok(UntrackedArc::new_cyclic(|me| Partition {
        whole,
        partno,
        start_sect: start,
        nr_sects: length,
        devt,
        me: me.clone(),
    }))
}

impl Partition {
    /// `bd_start_sect`.
    pub fn start_sect(&self) -> u64 {
        self.start_sect
    }

    /// The disk (`bdev_whole()`).
    pub fn whole(&self) -> &UntrackedArc<dyn BlockDriver> {
        &self.whole
    }
}

impl BlockDriver for Partition {
    fn disk_name(&self) -> String {
        part_name(&self.whole.disk_name(), self.partno)
    }

    fn devt(&self) -> (u32, u32) {
        self.devt
    }

    /// The disk's queue limits; the capacity is the partition's (`bdev_nr_sectors()`).
    fn limits(&self) -> QueueLimits {
        QueueLimits {
            capacity_sectors: self.nr_sects,
            ..self.whole.limits()
        }
    }

    /// Never reached in the kernel: `submit_bio_noacct()` remaps a partition's bio onto the
    /// disk first. A bio that gets here skipped the remap; it is a WARN and the bio fails.
    fn submit_bio(&self, bio: Box<Bio>, cx: &Cpu) {
        cx.warn(&format!(
            "block/blk-core.c: a bio for {} reached the driver without blk_partition_remap()",
            self.disk_name()
        ));
        super::bio_endio_status(bio, BLK_STS_IOERR, cx);
    }

    fn bdev(&self) -> Option<UntrackedArc<dyn BlockDriver>> {
        self.me
            .upgrade()
            .map(|p| p as UntrackedArc<dyn BlockDriver>)
    }

    fn bd_partition(&self) -> Option<(UntrackedArc<dyn BlockDriver>, u64)> {
        Some((UntrackedArc::clone(&self.whole), self.start_sect))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{submit_bio_noacct, BioEndIo, BlkStatus, ReqOp, Submission, BLK_STS_OK};
    use crate::drivers::block::null_blk::{NullBlk, NullBlkConfig};
    use crate::kernel::trace::tests::{capture, check_formats};
    use crate::kernel::{CpuId, KernelConfig};
    use crate::sync::{Arc, Mutex};
    use crate::Kernel;

    type Ended = Arc<Mutex<Vec<(BlkStatus, Vec<u8>)>>>;

    /// nullb0 (2 MiB: 4096 sectors, memory-backed, 4 KiB blocks, completions inline) and
    /// nullb0p1 from sector 2048 to the end.
    fn setup() -> (
        crate::sync::UntrackedArc<Kernel>,
        UntrackedArc<NullBlk>,
        UntrackedArc<Partition>,
    ) {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let mut cfg = NullBlkConfig::default();
        for (key, v) in [
            ("irqmode", "0"),
            ("memory_backed", "1"),
            ("size", "2"),
            ("bs", "4096"),
        ] {
            cfg.parse_param(key, v).unwrap();
        }
        let nb = NullBlk::new(&k, 0, cfg).unwrap();
        let whole: UntrackedArc<dyn BlockDriver> = UntrackedArc::clone(&nb) as _;
        let devt = part_devt(whole.devt(), 1, 1, 0);
        let p = bdev_add_partition(whole, 1, 2048, 2048, devt).unwrap();
        (k, nb, p)
    }

    fn io(
        k: &crate::sync::UntrackedArc<Kernel>,
        dev: &dyn BlockDriver,
        op: ReqOp,
        sector: u64,
        data: Vec<u8>,
        e: &Ended,
    ) -> Submission {
        let e = Arc::clone(e);
        let cx = k.cpu(CpuId(0)).unwrap();
        let bio = k
            .bio_alloc(op, sector)
            .with_data(data)
            .with_end_io(BioEndIo::new("test_end_io", move |b, _| {
                e.lock().push((b.status(), b.data()))
            }));
        submit_bio_noacct(bio, dev, &cx)
    }

    #[test]
    fn a_partition_s_bio_is_remapped_traced_and_lands_at_the_partition_offset() {
        let (k, nb, p) = setup();
        assert_eq!(p.disk_name(), "nullb0p1");
        assert_eq!(
            p.devt(),
            (BLOCK_EXT_MAJOR, 0),
            "null_blk's disk has one minor"
        );
        let e: Ended = Arc::default();
        let ev = capture(|| {
            assert_eq!(
                io(&k, &*p, ReqOp::Write, 8, vec![0x5a; 4096], &e),
                Submission::Submitted
            );
        });
        let bio_events: Vec<_> = ev
            .iter()
            .filter(|e| e.tracepoint.starts_with("block_bio_"))
            .cloned()
            .collect();
        assert_eq!(check_formats(&bio_events), Vec::<String>::new());
        let (maj, min) = nb.devt();
        let msgs: Vec<&str> = ev.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            msgs[0],
            format!("block_bio_remap: {maj},{min} W 2056 + 8 <- (259,0) 8"),
            "{msgs:?}"
        );
        assert!(
            msgs.contains(&format!("block_bio_queue: {maj},{min} W 2056 + 8 [biosim/0]").as_str()),
            "{msgs:?}"
        );
        assert_eq!(e.lock()[0].0, BLK_STS_OK);
        // On the disk: at 2056 sectors, nothing at 8.
        assert_eq!(nb.read_backing(2056 * 512, 4096), Some(vec![0x5a; 4096]));
        assert_ne!(nb.read_backing(8 * 512, 4096), Some(vec![0x5a; 4096]));
        // Read back through the partition.
        io(&k, &*p, ReqOp::Read, 8, vec![0; 4096], &e);
        assert_eq!(e.lock()[1], (BLK_STS_OK, vec![0x5a; 4096]));
        assert!(k.reports().is_empty(), "{:?}", k.reports().all());
    }

    #[test]
    #[cfg_attr(
        feature = "bug-partition-eod-whole-disk",
        should_panic(expected = "one past the partition's end fails")
    )]
    fn bio_check_eod_uses_the_partition_s_size() {
        let (k, nb, p) = setup();
        let e: Ended = Arc::default();
        // The partition's last block is fine; one past its end fails although the disk has
        // room there (the partition is nullb0's second half).
        assert_eq!(
            io(&k, &*p, ReqOp::Write, 2040, vec![1; 4096], &e),
            Submission::Submitted
        );
        assert_eq!(nb.read_backing(4088 * 512, 4096), Some(vec![1; 4096]));
        assert_eq!(
            io(&k, &*p, ReqOp::Write, 2048, vec![2; 4096], &e),
            Submission::Failed(crate::block::BLK_STS_IOERR),
            "one past the partition's end fails"
        );
        let (k2, nb2, _) = setup();
        assert_eq!(
            io(&k2, &*nb2, ReqOp::Write, 2048, vec![2; 4096], &e),
            Submission::Submitted,
            "the disk itself takes sector 2048"
        );
        drop(k);
    }

    #[test]
    fn bad_partitions_are_refused_with_einval() {
        let (_k, nb, _) = setup();
        let whole = || UntrackedArc::clone(&nb) as UntrackedArc<dyn BlockDriver>;
        let devt = (BLOCK_EXT_MAJOR, 1);
        // Not aligned to the 4 KiB logical block, partno 0, empty, beyond the disk.
        for (partno, start, len) in [(1, 2049, 8), (0, 8, 8), (1, 8, 0), (1, 2048, 4096)] {
            assert_eq!(
                bdev_add_partition(whole(), partno, start, len, devt).map(|_| ()),
                Err(Errno::EINVAL),
                "partno={partno} start={start} len={len}"
            );
        }
        assert_eq!(part_name("sda", 2), "sda2");
        assert_eq!(part_devt((8, 0), 16, 2, 0), (8, 2));
    }
}
