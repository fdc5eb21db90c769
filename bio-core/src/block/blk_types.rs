//! `include/linux/blk_types.h`: `struct bio`, its operation and flags (`bi_opf`: `enum req_op`
//! plus `REQ_*`), its state flags (`bi_flags`: `BIO_*`) and its iterator (`struct bvec_iter`).
//!
//! Ownership stands in for the kernel's pointers: a bio is a `Box<Bio>` that moves from submitter
//! to driver to `bio_endio()` to `bi_end_io`, so completing a bio twice cannot be written by
//! accident. Where the kernel shares a bio (a chain parent, `bio_inc_remaining()`), the shared part
//! (`__bi_remaining` and `bi_status`) moves into an `Arc` ([`ChainShared`]).

use super::blk_status::{BlkStatus, BLK_STS_OK};
use crate::kernel::Cpu;
use crate::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use crate::sync::{Arc, Mutex, UntrackedArc};
use std::any::Any;
use std::fmt;

/// `enum req_op`: the operation of a bio (low 8 bits of `bi_opf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ReqOp {
    /// `REQ_OP_READ`.
    Read = 0,
    /// `REQ_OP_WRITE`.
    Write = 1,
    /// `REQ_OP_FLUSH`: flush the volatile write cache.
    Flush = 2,
    /// `REQ_OP_DISCARD`.
    Discard = 3,
    /// `REQ_OP_WRITE_ZEROES`.
    WriteZeroes = 9,
}

impl ReqOp {
    /// `op_is_write()`: the low bit of the op.
    pub fn is_write(self) -> bool {
        (self as u8) & 1 == 1
    }

    /// The kernel's name, `REQ_OP_READ` etc.
    pub fn name(self) -> &'static str {
        match self {
            Self::Read => "REQ_OP_READ",
            Self::Write => "REQ_OP_WRITE",
            Self::Flush => "REQ_OP_FLUSH",
            Self::Discard => "REQ_OP_DISCARD",
            Self::WriteZeroes => "REQ_OP_WRITE_ZEROES",
        }
    }
}

/// The `REQ_*` operation flags of `bi_opf` (bits above the op, `enum req_flag_bits`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ReqFlags(pub u32);

impl ReqFlags {
    /// No flags.
    pub const NONE: ReqFlags = ReqFlags(0);
    /// `REQ_SYNC`: a synchronous I/O the submitter waits for.
    pub const REQ_SYNC: ReqFlags = ReqFlags(1 << 11);
    /// `REQ_META`: metadata I/O.
    pub const REQ_META: ReqFlags = ReqFlags(1 << 12);
    /// `REQ_FUA`: forced unit access, the data is on stable media at completion.
    pub const REQ_FUA: ReqFlags = ReqFlags(1 << 17);
    /// `REQ_PREFLUSH`: flush the volatile cache before this I/O.
    pub const REQ_PREFLUSH: ReqFlags = ReqFlags(1 << 18);
    /// `REQ_RAHEAD`: readahead, may fail.
    pub const REQ_RAHEAD: ReqFlags = ReqFlags(1 << 19);
    /// `REQ_NOWAIT`: do not block; fail with `BLK_STS_AGAIN` instead.
    pub const REQ_NOWAIT: ReqFlags = ReqFlags(1 << 21);
    /// `REQ_ALLOC_CACHE`: the bio comes from, and goes back to, its bio_set's per-CPU cache
    /// (`bio_alloc_percpu_cache()` / `bio_put_percpu_cache()`, block/bio_alloc_cache.rs).
    pub const REQ_ALLOC_CACHE: ReqFlags = ReqFlags(1 << 23);
    /// `REQ_NOMERGE`: the bio (or request) must not be merged with another one.
    pub const REQ_NOMERGE: ReqFlags = ReqFlags(1 << 14);
    /// `REQ_NOMERGE_FLAGS` (`REQ_NOMERGE | REQ_PREFLUSH | REQ_FUA`): what keeps a bio or a request
    /// out of every merge (`bio_mergeable()`, `rq_mergeable()`).
    pub const REQ_NOMERGE_FLAGS: ReqFlags = ReqFlags((1 << 14) | (1 << 18) | (1 << 17));

    /// Whether any flag of `other` is set.
    pub fn intersects(self, other: ReqFlags) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: ReqFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for ReqFlags {
    type Output = ReqFlags;
    fn bitor(self, rhs: ReqFlags) -> ReqFlags {
        ReqFlags(self.0 | rhs.0)
    }
}

impl fmt::Debug for ReqFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Self::REQ_SYNC, "REQ_SYNC"),
            (Self::REQ_META, "REQ_META"),
            (Self::REQ_FUA, "REQ_FUA"),
            (Self::REQ_PREFLUSH, "REQ_PREFLUSH"),
            (Self::REQ_RAHEAD, "REQ_RAHEAD"),
            (Self::REQ_NOWAIT, "REQ_NOWAIT"),
            (Self::REQ_NOMERGE, "REQ_NOMERGE"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(fl, _)| self.contains(*fl))
            .map(|(_, n)| *n)
            .collect();
        write!(
            f,
            "{}",
            if set.is_empty() {
                "0".to_owned()
            } else {
                set.join("|")
            }
        )
    }
}

/// `bi_opf`: operation plus flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlkOpf {
    /// `bio_op()`.
    pub op: ReqOp,
    /// The `REQ_*` flags.
    pub flags: ReqFlags,
}

impl BlkOpf {
    /// `bio->bi_opf` as the kernel's integer: the op in the low bits, the `REQ_*` flag bits above
    /// (what `rw=%d` prints).
    pub fn raw(self) -> u32 {
        self.op as u32 | self.flags.0
    }

    /// `blk_fill_rwbs()` (`kernel/trace/blktrace.c`): the RWBS string of blktrace and the block
    /// tracepoints, e.g. `WS`, `FWF`, `R`.
    pub fn rwbs(self) -> String {
        self.rwbs_buf().to_string()
    }

    /// [`BlkOpf::rwbs`] into a fixed buffer, as the kernel's `char rwbs[RWBS_LEN]` of the
    /// tracepoint entry: no allocation, so a request's trace record costs nothing on the heap.
    pub fn rwbs_buf(self) -> Rwbs {
        let mut s = Rwbs::default();
        if self.flags.contains(ReqFlags::REQ_PREFLUSH) {
            s.push(b'F');
        }
        s.push(match self.op {
            ReqOp::Write => b'W',
            ReqOp::Discard => b'D',
            ReqOp::Flush => b'F',
            ReqOp::Read => b'R',
            ReqOp::WriteZeroes => b'N',
        });
        for (flag, c) in [
            (ReqFlags::REQ_FUA, b'F'),
            (ReqFlags::REQ_RAHEAD, b'A'),
            (ReqFlags::REQ_SYNC, b'S'),
            (ReqFlags::REQ_META, b'M'),
        ] {
            if self.flags.contains(flag) {
                s.push(c);
            }
        }
        s
    }
}

/// `RWBS_LEN` (`include/trace/events/block.h`): the size of a tracepoint's `rwbs` field.
pub const RWBS_LEN: usize = 8;

/// A filled `char rwbs[RWBS_LEN]` ([`BlkOpf::rwbs_buf`]): at most 6 letters (`F`, the op, then
/// `F`, `A`, `S`, `M`), ASCII.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Rwbs {
    buf: [u8; RWBS_LEN],
    len: u8,
}

impl Rwbs {
    fn push(&mut self, c: u8) {
        // At most 6 of the RWBS_LEN - 1 letters (the kernel keeps the NUL).
        self.buf[usize::from(self.len)] = c;
        self.len += 1;
    }

    /// The letters.
    pub fn as_str(&self) -> &str {
        // Only ASCII letters are pushed.
        std::str::from_utf8(&self.buf[..usize::from(self.len)]).unwrap_or("")
    }
}

impl std::ops::Deref for Rwbs {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<&str> for Rwbs {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for Rwbs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Rwbs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// The `BIO_*` state flags of `bi_flags` (`unsigned short`), numbered as the latest layout
/// (with `BIO_COMPLETE_IN_TASK` of the task-completion series at 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BioFlag {
    /// `BIO_PAGE_PINNED`: pages were pinned and must be unpinned.
    PagePinned = 0,
    /// `BIO_CLONED`: does not own its data.
    Cloned = 1,
    /// `BIO_QUIET`: do not print errors for this bio.
    Quiet = 2,
    /// `BIO_CHAIN`: `__bi_remaining` is in use (a chain parent).
    Chain = 3,
    /// `BIO_REFFED`: `bi_cnt` is in use.
    Reffed = 4,
    /// `BIO_BPS_THROTTLED`.
    BpsThrottled = 5,
    /// `BIO_TRACE_COMPLETION`: `bio_endio()` emits `block_bio_complete` for this bio.
    TraceCompletion = 6,
    /// `BIO_CGROUP_ACCT`.
    CgroupAcct = 7,
    /// `BIO_QOS_THROTTLED`.
    QosThrottled = 8,
    /// `BIO_QOS_MERGED`.
    QosMerged = 9,
    /// `BIO_REMAPPED`.
    Remapped = 10,
    /// `BIO_ZONE_WRITE_PLUGGING`.
    ZoneWritePlugging = 11,
    /// `BIO_EMULATES_ZONE_APPEND`.
    EmulatesZoneAppend = 12,
    /// `BIO_COMPLETE_IN_TASK`: `bi_end_io` must run in preemptible task context; `bio_endio()`
    /// defers it to the per-CPU completion worker when called from atomic context.
    CompleteInTask = 13,
}

/// `BIO_FLAG_LAST`.
pub const BIO_FLAG_LAST: u8 = 14;
const _: () = assert!(BIO_FLAG_LAST as usize <= 8 * std::mem::size_of::<u16>());

/// `struct bvec_iter`: where the bio is in its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BvecIter {
    /// `bi_sector`: device address in 512-byte sectors.
    pub bi_sector: u64,
    /// `bi_size`: residual I/O count in bytes.
    pub bi_size: u32,
    /// `bi_idx`: current index into `bi_io_vec`.
    pub bi_idx: u16,
    /// `bi_bvec_done`: bytes completed in the current bvec.
    pub bi_bvec_done: u32,
}

/// `SECTOR_SHIFT`.
pub const SECTOR_SHIFT: u32 = 9;
/// `SECTOR_SIZE`.
pub const SECTOR_SIZE: usize = 1 << SECTOR_SHIFT;

/// `struct bio_vec`: one data segment. The simulator's segment owns its buffer instead of
/// pointing into a page.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct BioVec {
    /// The segment's bytes (`bv_page` + `bv_offset`, `bv_len` = `data.len()`).
    pub data: Vec<u8>,
}

impl fmt::Debug for BioVec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BioVec(len={})", self.data.len())
    }
}

/// `bio_end_io_t`: the completion callback. It receives the bio by value (the kernel callback
/// usually ends with `bio_put()`; here dropping the box does) and the context it runs in.
pub type BioEndIoFn = dyn Fn(Box<Bio>, &Cpu) + Send + Sync;

/// `bi_end_io`.
#[derive(Clone)]
pub enum BioEndIo {
    /// A completion callback with a name for traces (the kernel's symbol name).
    Fn {
        /// The function, e.g. `end_bio_bh_io_sync`.
        name: &'static str,
        /// The callback.
        f: UntrackedArc<BioEndIoFn>,
    },
    /// `bio_chain_endio`: the marker `bio_chain()` installs on a child. `bio_endio()` recognises
    /// it and walks to the parent instead of calling it; calling it directly is a `BUG()`.
    ChainEndio,
}

impl BioEndIo {
    /// A named callback.
    pub fn new(name: &'static str, f: impl Fn(Box<Bio>, &Cpu) + Send + Sync + 'static) -> Self {
        Self::Fn {
            name,
            f: UntrackedArc::new(f),
        }
    }

    /// The callback's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Fn { name, .. } => name,
            Self::ChainEndio => "bio_chain_endio",
        }
    }
}

impl fmt::Debug for BioEndIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `bi_private`.
#[derive(Clone, Default)]
pub enum BiPrivate {
    /// `NULL`.
    #[default]
    None,
    /// A chain child's parent (`bio_chain()` stores the parent here).
    Chain(Arc<ChainShared>),
    /// The submitter's data.
    Data(UntrackedArc<dyn Any + Send + Sync>),
}

impl BiPrivate {
    /// Whether it is `NULL`.
    pub fn is_none(&self) -> bool {
        matches!(self, Self::None)
    }

    /// The submitter's data, if it is of type `T`.
    pub fn data<T: Any + Send + Sync>(&self) -> Option<&T> {
        match self {
            Self::Data(d) => d.downcast_ref(),
            _ => None,
        }
    }
}

impl fmt::Debug for BiPrivate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("NULL"),
            Self::Chain(c) => write!(f, "parent(bio#{})", c.parent_id),
            Self::Data(_) => f.write_str("data"),
        }
    }
}

/// The part of a bio that chain children and extra references share: `__bi_remaining`, the
/// `bi_status` children write into ("first error wins"), and the parked bio while its own
/// `bio_endio()` has run but the count has not reached zero.
pub struct ChainShared {
    pub(crate) parent_id: u64,
    pub(crate) remaining: AtomicI32,
    pub(crate) status: AtomicU8,
    pub(crate) parked: Mutex<Option<Box<Bio>>>,
}

impl fmt::Debug for ChainShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChainShared")
            .field("parent_id", &self.parent_id)
            .field("remaining", &self.remaining.load(Ordering::Relaxed))
            .finish()
    }
}

/// `struct bio`.
pub struct Bio {
    /// `bi_next`: the link `bio_list` uses. An owning raw pointer (null when unlinked): the
    /// list and chain code keep bios as raw pointers from `add` to `pop`, and make a `Box` again
    /// only when one leaves, so no `Box` is ever moved while a raw alias to its bio is live.
    pub(crate) bi_next: *mut Bio,
    /// `bi_opf`.
    pub bi_opf: BlkOpf,
    pub(crate) bi_flags: u16,
    bi_status: BlkStatus,
    /// `bi_iter`.
    pub bi_iter: BvecIter,
    /// `bi_io_vec`: the data segments.
    pub bi_io_vec: Vec<BioVec>,
    /// `bi_end_io`.
    pub bi_end_io: Option<BioEndIo>,
    /// `bi_private`.
    pub bi_private: BiPrivate,
    /// `bi_bdev`, as a device number `(major, minor)`; `None` before the bio is aimed at a device.
    pub bi_bdev: Option<(u32, u32)>,
    /// Set while this bio shares `__bi_remaining`/`bi_status` (chain parent or extra reference).
    pub(crate) shared: Option<Arc<ChainShared>>,
    id: u64,
    /// `bi_pool`: the bio_set elements this bio holds (none for [`Kernel::bio_alloc`]'s), given
    /// back when it is freed.
    ///
    /// [`Kernel::bio_alloc`]: crate::Kernel::bio_alloc
    pub(crate) bi_pool: Vec<super::bio::BiPool>,
}

impl fmt::Debug for Bio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bio")
            .field("id", &self.id)
            .field("op", &self.bi_opf.op)
            .field("flags", &self.bi_opf.flags)
            .field("sector", &self.bi_iter.bi_sector)
            .field("size", &self.bi_iter.bi_size)
            .field("bi_flags", &format_args!("{:#06x}", self.bi_flags))
            .field("status", &self.status())
            .field("remaining", &self.remaining())
            .field("bi_end_io", &self.bi_end_io)
            .field("bi_private", &self.bi_private)
            .finish()
    }
}

impl Bio {
    /// `bio_init()`: a bio for `op` at `sector` with no data, `__bi_remaining == 1`,
    /// `BLK_STS_OK`, no callback. `id` is the simulator's identity of the bio in traces.
    pub fn new(id: u64, op: ReqOp, sector: u64) -> Box<Bio> {
        Box::new(Bio::new_unboxed(id, op, sector))
    }

    /// [`Bio::new`]'s fields, for a bio `bio_init()` reuses in place (the per-CPU bio cache).
    pub(crate) fn new_unboxed(id: u64, op: ReqOp, sector: u64) -> Bio {
        Bio {
            bi_next: std::ptr::null_mut(),
            bi_opf: BlkOpf {
                op,
                flags: ReqFlags::NONE,
            },
            bi_flags: 0,
            bi_status: BLK_STS_OK,
            bi_iter: BvecIter {
                bi_sector: sector,
                ..BvecIter::default()
            },
            bi_io_vec: Vec::new(),
            bi_end_io: None,
            bi_private: BiPrivate::None,
            bi_bdev: None,
            shared: None,
            id,
            bi_pool: Vec::new(),
        }
    }

    /// The simulator's identity of this bio (not a kernel field).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Sets the `REQ_*` flags (builder style).
    pub fn with_flags(mut self: Box<Self>, flags: ReqFlags) -> Box<Self> {
        self.bi_opf.flags = self.bi_opf.flags | flags;
        self
    }

    /// Sets `bi_end_io` (builder style).
    pub fn with_end_io(mut self: Box<Self>, end_io: BioEndIo) -> Box<Self> {
        self.bi_end_io = Some(end_io);
        self
    }

    /// Sets `bi_private` to submitter data (builder style).
    pub fn with_private(
        mut self: Box<Self>,
        data: UntrackedArc<dyn Any + Send + Sync>,
    ) -> Box<Self> {
        self.bi_private = BiPrivate::Data(data);
        self
    }

    /// `bio_add_page()`-like: appends a segment owning `data` and grows `bi_size`.
    pub fn add_data(&mut self, data: Vec<u8>) {
        self.bi_iter.bi_size += u32::try_from(data.len()).expect("a bio segment is below 4 GiB");
        self.bi_io_vec.push(BioVec { data });
    }

    /// Builder form of [`Bio::add_data`].
    pub fn with_data(mut self: Box<Self>, data: Vec<u8>) -> Box<Self> {
        self.add_data(data);
        self
    }

    /// Sets the size of a data-less bio (discard, write-zeroes) in bytes.
    pub fn with_size(mut self: Box<Self>, bytes: u32) -> Box<Self> {
        self.bi_iter.bi_size = bytes;
        self
    }

    /// `bio_op()`.
    pub fn op(&self) -> ReqOp {
        self.bi_opf.op
    }

    /// `bio_sectors()`.
    pub fn sectors(&self) -> u64 {
        u64::from(self.bi_iter.bi_size >> SECTOR_SHIFT)
    }

    /// `bio_end_sector()`.
    pub fn end_sector(&self) -> u64 {
        self.bi_iter.bi_sector + self.sectors()
    }

    /// `bio_flagged()`.
    pub fn flagged(&self, flag: BioFlag) -> bool {
        self.bi_flags & (1 << flag as u8) != 0
    }

    /// `bio_set_flag()`.
    pub fn set_flag(&mut self, flag: BioFlag) {
        self.bi_flags |= 1 << flag as u8;
    }

    /// `bio_clear_flag()`.
    pub fn clear_flag(&mut self, flag: BioFlag) {
        self.bi_flags &= !(1 << flag as u8);
    }

    /// The raw `bi_flags` word.
    pub fn bi_flags(&self) -> u16 {
        self.bi_flags
    }

    /// `bio->bi_status`. For a chain parent this is the status its children write into.
    pub fn status(&self) -> BlkStatus {
        match &self.shared {
            Some(s) => BlkStatus(s.status.load(Ordering::Acquire)),
            None => self.bi_status,
        }
    }

    /// `bio->bi_status = status`: a plain store, which (as in the kernel) can overwrite an
    /// error a chain child recorded earlier.
    pub fn set_status(&mut self, status: BlkStatus) {
        match &self.shared {
            Some(s) => s.status.store(status.0, Ordering::Release),
            None => self.bi_status = status,
        }
    }

    /// `atomic_read(&bio->__bi_remaining)`.
    pub fn remaining(&self) -> i32 {
        match &self.shared {
            Some(s) => s.remaining.load(Ordering::Acquire),
            None => 1,
        }
    }

    /// The total bytes in the data segments.
    pub fn data_len(&self) -> usize {
        self.bi_io_vec.iter().map(|v| v.data.len()).sum()
    }

    /// Copies the data segments into one buffer.
    pub fn data(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.data_len());
        for v in &self.bi_io_vec {
            out.extend_from_slice(&v.data);
        }
        out
    }

    /// The shared part, created on first use with the bio's current status.
    pub(crate) fn shared(&mut self) -> Arc<ChainShared> {
        if self.shared.is_none() {
            self.shared = Some(Arc::new(ChainShared {
                parent_id: self.id,
                remaining: AtomicI32::new(1),
                status: AtomicU8::new(self.bi_status.0),
                parked: Mutex::new(None),
            }));
        }
        Arc::clone(self.shared.as_ref().expect("just created"))
    }

    /// Detaches the shared part once `__bi_remaining` reached zero: the status becomes the bio's
    /// own again.
    pub(crate) fn unshare(&mut self) {
        if let Some(s) = self.shared.take() {
            self.bi_status = BlkStatus(s.status.load(Ordering::Acquire));
        }
    }

    /// `bio_reset()`: back to the `bio_init()` state for `op`, keeping the data segments.
    pub fn reset(&mut self, op: ReqOp) {
        drop_chain(std::mem::replace(&mut self.bi_next, std::ptr::null_mut()));
        self.bi_opf = BlkOpf {
            op,
            flags: ReqFlags::NONE,
        };
        self.bi_flags = 0;
        self.bi_status = BLK_STS_OK;
        self.bi_iter = BvecIter {
            bi_size: self.data_len() as u32,
            ..BvecIter::default()
        };
        self.bi_end_io = None;
        self.bi_private = BiPrivate::None;
        self.shared = None;
    }
}

impl Drop for Bio {
    // A bio that still links others owns them; freeing them is iterative, so a long chain does not
    // recurse once per link.
    fn drop(&mut self) {
        drop_chain(std::mem::replace(&mut self.bi_next, std::ptr::null_mut()));
        // bio_free(): the elements go back to their mempools.
        for p in self.bi_pool.drain(..) {
            p.free();
        }
    }
}

/// Frees a chain of bios linked through `bi_next`, starting at `next` (null: nothing).
pub(crate) fn drop_chain(mut next: *mut Bio) {
    while !next.is_null() {
        // SAFETY: a non-null `bi_next` owns the bio it points to (it came from `Box::into_raw`
        // and nothing else refers to it).
        let mut b = unsafe { Box::from_raw(next) };
        next = std::mem::replace(&mut b.bi_next, std::ptr::null_mut());
    }
}

// SAFETY: `bi_next` is an owning link to other bios (which are Send); nothing else aliases it.
unsafe impl Send for Bio {}
// SAFETY: shared access never follows `bi_next` mutably; the lists that do need `&mut`.
unsafe impl Sync for Bio {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixed buffer holds every letter `blk_fill_rwbs()` can write (`F`, op, `FASM`) and
    /// reads as the String form.
    #[test]
    fn rwbs_buf_holds_the_longest_rwbs_and_matches_the_string() {
        let all = ReqFlags(
            ReqFlags::REQ_PREFLUSH.0
                | ReqFlags::REQ_FUA.0
                | ReqFlags::REQ_RAHEAD.0
                | ReqFlags::REQ_SYNC.0
                | ReqFlags::REQ_META.0,
        );
        let opf = BlkOpf {
            op: ReqOp::Write,
            flags: all,
        };
        assert_eq!(opf.rwbs_buf(), "FWFASM");
        assert!(opf.rwbs_buf().len() < RWBS_LEN);
        let read = BlkOpf {
            op: ReqOp::Read,
            flags: ReqFlags::NONE,
        };
        assert_eq!(read.rwbs_buf().to_string(), read.rwbs());
        assert_eq!(format!("{:?}", read.rwbs_buf()), "\"R\"");
    }
}
