//! A loop device (`drivers/block/loop.c`, bio-core's model) attached to a machine, so scenario
//! files can drive it: `loop v5 sparse offset=65536`, then `io 0 write 3`, `loop_worker 1`, and
//! the oracle's usual invariants plus "data read back equals data written", checked by reading
//! every block the scenario touched back through the device at the end, and then that the
//! backing file system's freeze protection is balanced (`freeze_backing`/`thaw_backing` lines
//! freeze and thaw it as `fsfreeze` would).
//!
//! The reference for the data check keeps, per block, what the last completed write or discard
//! left there, or, where writes to a block overlapped in flight (a block device orders nothing
//! between them), every value one of them may have left.

use crate::machine::oracle::{Invariant, Oracle, Violation};
use crate::runtime::deterministic::DetRuntime;
use bio_core::block::partition::{bdev_add_partition, part_devt};
use bio_core::block::BlockDriver;
use bio_core::block::{submit_bio_noacct, BioEndIo, ReqOp};
use bio_core::drivers::block::loop_drv::{
    BdevBacking, LoopBacking, LoopDevice, LoopVariant, MemBacking, LO_FLAGS_DIRECT_IO,
};
use bio_core::drivers::block::null_blk::{HrtimerClock, NullBlk, NullBlkConfig};
use bio_core::kernel::CpuId;
use bio_core::workqueue::PoolId;
use bio_core::Kernel;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Bytes per block of a loop scenario.
pub const BLOCK: usize = 4096;
/// The backing file's size.
pub const BACKING_BYTES: u64 = 1 << 20;
/// The partition of nullb0 a `start=SECTORS` backing uses.
pub const NULLB_PART: &str = "nullb0p1";

/// The backing file of a loop scenario (an in-memory [`MemBacking`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackingKind {
    /// Every block a hole: NOWAIT writes fall back (the sparse-file case of patch 6/6).
    Sparse,
    /// Every block allocated: NOWAIT never blocks.
    Prealloc,
    /// Allocated, but every NOWAIT call is refused with `-EOPNOTSUPP` (check L3).
    Refusing,
    /// A block device (`S_ISBLK`), allocated.
    BlockDevice,
    /// A simulated block device: `nullb0` (null_blk, memory-backed, softirq completion) as the
    /// loop's backing, through `BdevBacking` (`losetup /dev/loop0 /dev/nullb0`).
    Nullb,
    /// A simulated block device: `loop1` (V5, direct I/O over a preallocated file) as loop0's
    /// backing, through `BdevBacking` (loop over loop).
    Loop,
}

impl BackingKind {
    /// The scenario-file word.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sparse => "sparse",
            Self::Prealloc => "prealloc",
            Self::Refusing => "refusing",
            Self::BlockDevice => "blockdev",
            Self::Nullb => "nullb",
            Self::Loop => "loop",
        }
    }

    /// Parses a scenario-file word.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Sparse,
            Self::Prealloc,
            Self::Refusing,
            Self::BlockDevice,
            Self::Nullb,
            Self::Loop,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }

    fn backing(self) -> MemBacking {
        match self {
            Self::Sparse => MemBacking::sparse(BACKING_BYTES),
            Self::Prealloc => MemBacking::preallocated(BACKING_BYTES),
            Self::Refusing => MemBacking::preallocated(BACKING_BYTES).refusing_nowait(),
            Self::BlockDevice => MemBacking::preallocated(BACKING_BYTES).as_block_device(),
            // The stacked kinds' lowest level (loop1's file); nullb keeps its own pages.
            Self::Nullb | Self::Loop => MemBacking::preallocated(BACKING_BYTES),
        }
    }

    /// The lower device's disk name when the backing is a simulated block device.
    pub fn lower_disk(self) -> Option<&'static str> {
        match self {
            Self::Nullb => Some("nullb0"),
            Self::Loop => Some("loop1"),
            _ => None,
        }
    }
}

/// How a scenario's loop device is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopSetup {
    /// The version (with any knob flipped).
    pub variant: LoopVariant,
    /// The backing file.
    pub backing: BackingKind,
    /// `lo_offset` in bytes.
    pub offset: u64,
    /// Whether the backing file's `f_mode` has `FMODE_NOWAIT` (`nowait=off` in a scenario: a
    /// file system that does not set it, whose I/O ignores `IOCB_NOWAIT` and simply blocks).
    pub fmode_nowait: bool,
    /// Instead of the loop device, `nullb0` (`drivers/block/null_blk/main.c`) with these
    /// parameters: a scenario's `null_blk KEY=VALUE ...` line. The loop fields are then unused.
    pub nullb: Option<NullBlkConfig>,
    /// `start=SECTORS` on a `nullb` backing: loop0's backing is `nullb0p1`, a partition of
    /// nullb0 from this sector to the disk's end (`BLKPG_ADD_PARTITION`), so every lower bio is
    /// remapped (`block_bio_remap`). `None`: the whole disk.
    pub part_start: Option<u64>,
}

impl LoopSetup {
    /// A device over `backing` at `lo_offset` `offset`, the backing with `FMODE_NOWAIT`.
    pub fn new(variant: LoopVariant, backing: BackingKind, offset: u64) -> Self {
        Self {
            variant,
            backing,
            offset,
            fmode_nowait: true,
            nullb: None,
            part_start: None,
        }
    }

    /// `nullb0` with `cfg` (its hrtimers fired by `nullb_timer` transitions).
    pub fn null_blk(cfg: NullBlkConfig) -> Self {
        Self {
            nullb: Some(NullBlkConfig {
                clock: HrtimerClock::Explicit,
                ..cfg
            }),
            ..Self::new(LoopVariant::V5, BackingKind::Sparse, 0)
        }
    }

    /// The disk's name: `loop0` or `nullb0`.
    pub fn disk_name(&self) -> &'static str {
        if self.nullb.is_some() {
            "nullb0"
        } else {
            "loop0"
        }
    }

    /// Every device of the scenario: the one its I/O goes to, then a stacked lower device.
    pub fn disk_names(&self) -> Vec<&'static str> {
        let mut v = vec![self.disk_name()];
        if self.nullb.is_none() {
            v.extend(self.backing.lower_disk());
            if self.part_start.is_some() {
                v.push(NULLB_PART);
            }
        }
        v
    }

    /// Blocks the device has.
    pub fn blocks(&self) -> u64 {
        match &self.nullb {
            Some(c) => c.size_bytes / BLOCK as u64,
            None => {
                let part = self.part_start.unwrap_or(0).saturating_mul(512);
                BACKING_BYTES
                    .saturating_sub(part)
                    .saturating_sub(self.offset)
                    / BLOCK as u64
            }
        }
    }
}

/// A loop operation of a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LoopOp {
    /// `REQ_OP_READ` of one block.
    Read,
    /// `REQ_OP_WRITE` of one block filled with a byte.
    Write,
    /// `REQ_OP_DISCARD` of one block.
    Discard,
}

impl LoopOp {
    /// The scenario-file word.
    pub fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Discard => "discard",
        }
    }

    /// Parses a scenario-file word.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Read, Self::Write, Self::Discard]
            .into_iter()
            .find(|o| o.name() == s)
    }
}

impl fmt::Display for LoopOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What each read-back returned: block → (status, data).
type ReadBack = Arc<Mutex<BTreeMap<u64, (bio_core::block::BlkStatus, Vec<u8>)>>>;

/// The reference's view of one block.
#[derive(Debug, Default)]
struct Slot {
    in_flight: u32,
    overlapped: bool,
    possible: Vec<Vec<u8>>,
}

/// What a device rig takes of the machine it is attached to: the kernel, the deterministic
/// runtime that runs its steps, and the oracle that tracks its bios.
#[derive(Debug, Clone, Copy)]
pub struct RigParts<'a> {
    /// The kernel.
    pub kernel: &'a Arc<Kernel>,
    /// The runtime.
    pub rt: &'a DetRuntime,
    /// The oracle.
    pub oracle: &'a Arc<Oracle>,
}

/// A loop device on a machine and the reference of what it holds.
pub(crate) struct LoopRig {
    /// The loop device (none when the setup is null_blk's).
    lo: Option<Arc<LoopDevice>>,
    /// `nullb0` when the setup asks for it: then the device the I/O goes to.
    nullb: Option<Arc<NullBlk>>,
    setup: LoopSetup,
    slots: Arc<Mutex<BTreeMap<u64, Slot>>>,
    /// I/Os of the scenario that ended with an error status.
    failed: Arc<std::sync::atomic::AtomicUsize>,
}

impl fmt::Debug for LoopRig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoopRig")
            .field("setup", &self.setup)
            .finish()
    }
}

impl LoopRig {
    pub(crate) fn new(s: RigParts<'_>, setup: LoopSetup) -> Self {
        let (backing, bdev) = Self::stacked_backing(s, setup);
        let nullb = setup.nullb.map(|cfg| {
            let nb = NullBlk::new(s.kernel, 0, cfg)
                .unwrap_or_else(|e| panic!("null_blk parameters were validated: {e}"));
            s.rt.note_with(|| format!("# nullb0: null_blk {cfg}"));
            nb
        });
        if nullb.is_some() {
            return LoopRig {
                lo: None,
                nullb,
                setup,
                slots: Arc::default(),
                failed: Arc::default(),
            };
        }
        let lo = LoopDevice::new(
            s.kernel,
            0,
            backing,
            LO_FLAGS_DIRECT_IO,
            setup.offset,
            setup.variant,
        );
        if let Some(b) = bdev {
            // A fresh backing: the only binding it gets.
            b.attach(&lo);
        }
        let lo = Some(lo);
        s.rt.note_with(|| {
            format!(
            "# loop0: variant {} ({}), {} backing of {} KiB{}, LO_FLAGS_DIRECT_IO, lo_offset={}",
            setup.variant.name,
            crate::report::knob_line(&setup.variant.knobs()),
            setup.backing.name(),
            (BACKING_BYTES - setup.part_start.unwrap_or(0) * 512) >> 10,
            if setup.fmode_nowait {
                ""
            } else {
                " without FMODE_NOWAIT"
            },
            setup.offset
        )
        });
        LoopRig {
            lo,
            nullb: None,
            setup,
            slots: Arc::default(),
            failed: Arc::default(),
        }
    }

    /// `submit_bio()` of one block from `cpu`'s task context. `false` if the block or CPU does
    /// not exist or the CPU is offline (skipped, as other impossible transitions are).
    pub(crate) fn submit(
        &self,
        s: RigParts<'_>,
        cpu: u32,
        op: LoopOp,
        block: u32,
        fill: u8,
    ) -> bool {
        let block = u64::from(block);
        if block >= self.setup.blocks() || !s.kernel.cpu_online(CpuId(cpu)) {
            return false;
        }
        let req = match op {
            LoopOp::Read => ReqOp::Read,
            LoopOp::Write => ReqOp::Write,
            LoopOp::Discard => ReqOp::Discard,
        };
        let mut bio = s.kernel.bio_alloc(req, block * (BLOCK as u64 / 512));
        s.oracle.track(bio.id(), false);
        match op {
            LoopOp::Read => bio.add_data(vec![0xee; BLOCK]),
            LoopOp::Write => bio.add_data(vec![fill; BLOCK]),
            LoopOp::Discard => bio.bi_iter.bi_size = BLOCK as u32,
        }
        if op != LoopOp::Read {
            let mut slots = self.slots.lock();
            let slot = slots.entry(block).or_default();
            slot.in_flight += 1;
            slot.overlapped |= slot.in_flight > 1;
        }
        let (oracle, slots) = (Arc::clone(s.oracle), Arc::clone(&self.slots));
        let failed = Arc::clone(&self.failed);
        let bio = bio.with_end_io(BioEndIo::new("loop_scenario_end_io", move |bio, cx| {
            if !bio.status().is_ok() {
                failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let content = match op {
                LoopOp::Write => Some(bio.data()),
                LoopOp::Discard => Some(vec![0; BLOCK]),
                LoopOp::Read => None,
            };
            if let Some(c) = content {
                let mut slots = slots.lock();
                let slot = slots.entry(block).or_default();
                // Twin `bug-rig-failed-io-as-data`: a failed write counts as written data.
                if bio.status().is_ok() || cfg!(feature = "bug-rig-failed-io-as-data") {
                    if slot.overlapped {
                        slot.possible.push(c);
                    } else {
                        slot.possible = vec![c];
                    }
                }
                slot.in_flight = slot.in_flight.saturating_sub(1);
                if slot.in_flight == 0 {
                    slot.overlapped = false;
                }
            }
            oracle.completed(bio.id(), cx);
        }));
        s.rt.on_cpu(
            CpuId(cpu),
            &format!(
                "submit_bio({} block {block}) to {}",
                req.name(),
                self.setup.disk_name()
            ),
            |cx| submit_bio_noacct(bio, self.dev(), cx),
        );
        true
    }

    /// The block device I/O goes to.
    fn dev(&self) -> &dyn BlockDriver {
        match (&self.nullb, &self.lo) {
            (Some(nb), _) => &**nb,
            (None, Some(lo)) => &**lo,
            (None, None) => unreachable!("a rig has a loop device or nullb0"),
        }
    }

    /// Whether the device is nullb0.
    pub(crate) fn is_nullb(&self) -> bool {
        self.nullb.is_some()
    }

    /// `nullb0`'s next hrtimer expires (the explicit event of the timer mode); `false` if none
    /// is pending or the device is not null_blk.
    pub(crate) fn fire_nullb_timer(&self) -> bool {
        self.nullb.as_ref().is_some_and(|nb| nb.fire_next_hrtimer())
    }

    /// `fsfreeze -f` (`freeze`) or `fsfreeze -u` on the backing file system: `freeze_super()` /
    /// `thaw_super()` on the backing's superblock, from task context on the lowest online CPU.
    /// A freeze that never drains is not refused: it happened, hung (the hung-task detector's
    /// report when it is on) and the superblock stays at that level; the kernel's own refusals
    /// (`-EBUSY`, `-EINVAL`) and a backing without a superblock are.
    pub(crate) fn freeze_backing(&self, s: RigParts<'_>, freeze: bool) -> Result<(), String> {
        use bio_core::fs::super_block::FreezeError;
        let Some(lo) = &self.lo else {
            return Err("there is no loop device".to_owned());
        };
        let Some(&cpu) = s.kernel.online_cpus().first() else {
            return Err("no CPU is online".to_owned());
        };
        let what = if freeze { "freeze_super" } else { "thaw_super" };
        let Some(sb) = lo.backing().superblock() else {
            return Err(format!("loop0's backing has no superblock to {what}"));
        };
        let r = s.rt.on_cpu(cpu, &format!("{what}({})", sb.s_id()), |cx| {
            if freeze {
                sb.freeze_super(cx)
            } else {
                sb.thaw_super(cx)
            }
        });
        match r {
            None => Err(format!("{cpu} cannot run {what} now")),
            Some(Ok(())) => Ok(()),
            Some(Err(e @ FreezeError::NeverDrained { .. })) => {
                s.rt.note_with(|| format!("   >>> {what}({}): {e}", sb.s_id()));
                Ok(())
            }
            Some(Err(e)) => Err(format!("{what}({}): {e}", sb.s_id())),
        }
    }

    /// `LOOP_SET_STATUS`'s `blk_mq_freeze_queue()` + `blk_mq_unfreeze_queue()` on loop0's queue
    /// from the lowest online CPU. A freeze that never drains (a request that is never
    /// completed) is the kernel's task stuck in `blk_mq_freeze_queue_wait()`: the hung-task
    /// detector reports it; the model then unfreezes so the run can end, and says so.
    pub(crate) fn freeze_loop_queue(&self, s: RigParts<'_>) -> Result<(), String> {
        use bio_core::block::blk_mq::{blk_mq_freeze_queue, blk_mq_unfreeze_queue};
        let Some(lo) = &self.lo else {
            return Err("there is no loop device".to_owned());
        };
        let Some(q) = lo.mq_queue() else {
            return Err("loop0 has no request queue".to_owned());
        };
        let Some(&cpu) = s.kernel.online_cpus().first() else {
            return Err("no CPU is online".to_owned());
        };
        let r = s.rt.on_cpu(cpu, "blk_mq_freeze_queue(loop0)", |cx| {
            let (frozen, drained) = blk_mq_freeze_queue(&q, cx);
            blk_mq_unfreeze_queue(&q, frozen, cx);
            drained
        });
        match r {
            None => Err(format!("{cpu} cannot run blk_mq_freeze_queue now")),
            Some(true) => Ok(()),
            Some(false) => {
                s.rt.note_with(|| format!(
                    "   >>> blk_mq_freeze_queue(loop0): {} request(s) never end; the model unfreezes so the run can go on",
                    q.tags.busy()
                ));
                Ok(())
            }
        }
    }

    /// The device.
    pub(crate) fn device(&self) -> Option<&Arc<LoopDevice>> {
        self.lo.as_ref()
    }

    /// The device's counters.
    pub(crate) fn stats(&self) -> bio_core::drivers::block::loop_drv::LoopStats {
        self.lo.as_ref().map(|l| l.stats()).unwrap_or_default()
    }

    /// How many of the scenario's I/Os ended with an error status.
    pub(crate) fn failed(&self) -> usize {
        self.failed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// One run of the loop workqueue's worker on `cpu`.
    pub(crate) fn run_worker(&self, s: RigParts<'_>, cpu: u32) -> bool {
        s.rt.step(crate::runtime::event::Event::Worker {
            pool: PoolId::Unbound,
            on: CpuId(cpu),
        })
        .is_ok()
    }

    /// Reads every block the scenario wrote or discarded back through the device (from the
    /// lowest online CPU) and compares it with the reference.
    pub(crate) fn verify(&self, s: RigParts<'_>, budget: u64) -> Vec<Violation> {
        let Some(&cpu) = s.kernel.online_cpus().first() else {
            return Vec::new();
        };
        let blocks: Vec<u64> = self.slots.lock().keys().copied().collect();
        let got: ReadBack = Arc::default();
        s.rt.note_with(|| {
            format!(
                "   >>> read every written block back through {}",
                self.setup.disk_name()
            )
        });
        for &block in &blocks {
            let g = Arc::clone(&got);
            let bio = s
                .kernel
                .bio_alloc(ReqOp::Read, block * (BLOCK as u64 / 512))
                .with_data(vec![0xee; BLOCK])
                .with_end_io(BioEndIo::new("loop_scenario_readback", move |bio, _| {
                    g.lock().insert(block, (bio.status(), bio.data()));
                }));
            s.rt.on_cpu(cpu, "read back", |cx| {
                submit_bio_noacct(bio, self.dev(), cx)
            });
        }
        let _ = s.rt.run(budget);
        // Timer-mode read-backs: their hrtimers expire, then their interrupts run.
        while self.fire_nullb_timer() {
            let _ = s.rt.run(budget);
        }
        // Quiescence: every write the backing file system saw must have ended its freeze
        // protection (SuperBlock::check_writers' report is a kernel report the oracle sees).
        let unbalanced = match self.lo.as_ref().and_then(|lo| lo.backing().superblock()) {
            Some(sb) => {
                s.rt.on_cpu(cpu, "check the backing's sb_writers", |cx| {
                    sb.check_writers(cx)
                })
                .unwrap_or_default()
            }
            None => Vec::new(),
        };
        let (got, slots) = (got.lock(), self.slots.lock());
        let mut v = Vec::new();
        for block in blocks {
            let want = match slots.get(&block) {
                Some(slot) if !slot.possible.is_empty() => slot.possible.clone(),
                _ => vec![vec![0; BLOCK]],
            };
            let message = match got.get(&block) {
                Some((st, _)) if !st.is_ok() => format!(
                    "{} block {block}: the read-back itself failed with {st}",
                    self.setup.disk_name()
                ),
                Some((_, d)) if want.contains(d) => continue,
                Some((_, d)) => format!(
                    "{} block {block} reads {:#04x}.., the last completed write left {}",
                    self.setup.disk_name(),
                    d[0],
                    want.iter()
                        .map(|w| format!("{:#04x}..", w[0]))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
                None => format!(
                    "{} block {block}: the read-back never ended",
                    self.setup.disk_name()
                ),
            };
            v.push(Violation {
                invariant: Invariant::DataMismatch,
                message,
                trace: Vec::new(),
            });
        }
        // The settle that pulls kernel reports into the oracle has run already: these are
        // handed over here.
        v.extend(unbalanced.into_iter().map(|r| Violation {
            invariant: Invariant::KernelReport(r.kind),
            message: r.to_string(),
            trace: Vec::new(),
        }));
        v
    }

    /// loop0's backing file: an in-memory file, or for the stacked kinds a `BdevBacking` over
    /// the lower device it builds (`nullb0`, or `loop1` over an in-memory file), returned too so
    /// it can be bound to loop0.
    fn stacked_backing(
        s: RigParts<'_>,
        setup: LoopSetup,
    ) -> (Arc<dyn LoopBacking>, Option<Arc<BdevBacking>>) {
        let lower: Arc<dyn BlockDriver> = match setup.backing {
            BackingKind::Nullb => {
                let cfg = NullBlkConfig {
                    size_bytes: BACKING_BYTES,
                    memory_backed: true,
                    discard: true,
                    blocksize: BLOCK as u32,
                    ..NullBlkConfig::default()
                };
                let nb = NullBlk::new(s.kernel, 0, cfg)
                    .unwrap_or_else(|e| panic!("fixed null_blk parameters are valid: {e}"));
                let Some(start) = setup.part_start else {
                    s.rt.note_with(|| format!("# nullb0: null_blk {cfg} (loop0's backing)"));
                    return Self::bdev_backing(nb);
                };
                s.rt.note_with(|| format!("# nullb0: null_blk {cfg}"));
                let whole: Arc<dyn BlockDriver> = nb;
                // null_blk's disk has one minor: the partition's devt is an extended one.
                let devt = part_devt(whole.devt(), 1, 1, 0);
                let nr = whole.limits().capacity_sectors - start;
                let p = bdev_add_partition(whole, 1, start, nr, devt)
                    .unwrap_or_else(|e| panic!("start={start} was validated: {e:?}"));
                s.rt.note_with(|| format!(
                    "# {NULLB_PART}: partition 1 of nullb0, {},{}, sectors {start}..{} (loop0's backing)",
                    devt.0,
                    devt.1,
                    start + nr
                ));
                p
            }
            BackingKind::Loop => {
                let file: Arc<dyn LoopBacking> = Arc::new(
                    MemBacking::preallocated(BACKING_BYTES).with_fmode_nowait(setup.fmode_nowait),
                );
                s.rt.note_with(|| format!(
                    "# loop1: variant {}, prealloc backing of {} KiB, LO_FLAGS_DIRECT_IO (loop0's backing)",
                    setup.variant.name,
                    BACKING_BYTES >> 10
                ));
                LoopDevice::new(s.kernel, 1, file, LO_FLAGS_DIRECT_IO, 0, setup.variant)
            }
            _ => {
                let file = setup
                    .backing
                    .backing()
                    .with_fmode_nowait(setup.fmode_nowait);
                return (Arc::new(file), None);
            }
        };
        Self::bdev_backing(lower)
    }

    /// `lower` as loop0's backing file.
    fn bdev_backing(
        lower: Arc<dyn BlockDriver>,
    ) -> (Arc<dyn LoopBacking>, Option<Arc<BdevBacking>>) {
        let b = Arc::new(BdevBacking::new(lower));
        (Arc::clone(&b) as Arc<dyn LoopBacking>, Some(b))
    }
}

/// Checks that a setup's `lo_offset` is sector-aligned and leaves blocks, or says why not.
pub fn validate(setup: &LoopSetup) -> Result<(), String> {
    if !setup.offset.is_multiple_of(512) {
        return Err(format!(
            "offset={}: lo_offset must be a multiple of 512",
            setup.offset
        ));
    }
    if let Some(start) = setup.part_start {
        if setup.backing != BackingKind::Nullb {
            return Err(format!(
                "start={start}: a partition needs the nullb backing (got {})",
                setup.backing.name()
            ));
        }
        let sectors = BACKING_BYTES / 512;
        let block = BLOCK as u64 / 512;
        if start == 0 || start >= sectors || !start.is_multiple_of(block) {
            return Err(format!(
                "start={start}: the partition's first sector must be a multiple of {block} (nullb0's 4096-byte logical block) between {block} and {}",
                sectors - block
            ));
        }
    }
    if setup.blocks() == 0 {
        return Err(format!(
            "offset={}: leaves no block of the {BACKING_BYTES}-byte backing file",
            setup.offset
        ));
    }
    Ok(())
}
