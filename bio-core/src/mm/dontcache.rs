//! The `RWF_DONTCACHE` designs biosim runs side by side (`mm/filemap.c`, `fs/iomap/ioend.c`,
//! `fs/buffer.c`, `block/fops.c` of each kernel), and the page cache's configuration.
//!
//! - [`DontcacheDesign`]: which kernel: before the series (6.18), XFS's own workqueue completion
//!   (what patch 2/4 removes), RFC v3's per-CPU folio batch, or a bio-level version
//!   (`BIO_COMPLETE_IN_TASK`, a posted [`Variant`] or a module).
//! - [`WritebackPath`]: `CONFIG_BUFFER_HEAD` for the block device's mapping (`def_blk_aops`).
//! - [`DropbehindIrq`]: the seam of RFC v3's `folio_end_dropbehind_irq()` (implemented in
//!   `mm/dropbehind_v3.rs`), with [`FolioRef`], a folio reference it may keep for later.
//! - [`PageCacheConfig`]: the mapping's size, memcg limit, readahead window and the above.

use super::dropbehind_v3::{DropbehindBatchV3, DropbehindFolio, DropbehindV3Counts};
use super::filemap::AddressSpace;
use crate::block::complete_in_task::Variant;
use crate::block::BlockDriver;
use crate::kernel::{Cpu, Kernel};
use crate::sync::UntrackedArc;
use std::fmt;

/// A kernel's way of dropping `RWF_DONTCACHE` folios after writeback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DontcacheDesign {
    /// The kernel before the series (6.18): no `BIO_COMPLETE_IN_TASK` anywhere, iomap keeps
    /// `IOMAP_IOEND_DONTCACHE` in its NOMERGE flags but the block device completes the ioend in
    /// the device IRQ; `def_blk_fops` has no `FOP_DONTCACHE` (`EOPNOTSUPP`) unless
    /// [`PageCacheConfig::force_dontcache`], and then IRQ completions leave the folios cached.
    Baseline,
    /// XFS before patch 2/4: an ioend with a dropbehind folio gets `IOMAP_IOEND_DONTCACHE` (in
    /// `IOMAP_IOEND_NOMERGE_FLAGS`: a dontcache and a regular folio never share an ioend), and
    /// `xfs_end_bio()` sends it to the per-CPU `xfs-conv` workqueue
    /// (`xfs_ioend_needs_wq_completion()`), where `folio_end_writeback()` runs in task context.
    /// On the buffer_head path (XFS has none) it behaves as [`DontcacheDesign::Baseline`].
    XfsWorkqueue,
    /// RFC v3 ("filemap: defer dropbehind invalidation from IRQ context"): `folio_end_writeback()`
    /// outside task context calls `folio_end_dropbehind_irq()` ([`DropbehindIrq`]); its patch 2/2
    /// sets `FOP_DONTCACHE` on `def_blk_fops`. iomap keeps `IOMAP_IOEND_DONTCACHE`.
    V3,
    /// The bio-level series (v5, v6, v6-review, v7 or a module): iomap sets
    /// `BIO_COMPLETE_IN_TASK` on an ioend's bio when a dropbehind folio is added, with
    /// `IOMAP_IOEND_DONTCACHE` gone (regular folios merged into that bio are deferred too);
    /// `submit_bh_wbc()` sets it for dropbehind folios (reads too unless
    /// [`Variant::gate_reads`]); patch 4/4 sets `FOP_DONTCACHE` on `def_blk_fops`.
    Bio(Variant),
}

impl DontcacheDesign {
    /// The designs without a bio-level variant, in the order tables list them.
    pub const NON_BIO: [DontcacheDesign; 3] = [Self::Baseline, Self::XfsWorkqueue, Self::V3];

    /// Every design: baseline, xfs-wq, v3, then every bio-level variant ([`Variant::all`]: the
    /// presets and the registered modules) except the gallery's [`Variant::V3`], which stands
    /// for RFC v3 on the bio seam: the page cache has the folio-level [`DontcacheDesign::V3`]
    /// itself, so there is one `v3`.
    pub fn all() -> Vec<DontcacheDesign> {
        let mut v = Self::NON_BIO.to_vec();
        v.extend(
            Variant::all()
                .into_iter()
                .filter(|v| v.name != Variant::V3.name)
                .map(Self::Bio),
        );
        v
    }

    /// The page-cache design for a gallery [`Variant`]: [`DontcacheDesign::V3`] for the
    /// gallery's `v3` module (RFC v3 is a folio-level design), else [`DontcacheDesign::Bio`].
    pub fn of_variant(v: Variant) -> DontcacheDesign {
        if v.name == Variant::V3.name {
            Self::V3
        } else {
            Self::Bio(v)
        }
    }

    /// The design's name: `baseline`, `xfs-wq`, `v3`, or the variant's (`v7`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Baseline => "baseline",
            Self::XfsWorkqueue => "xfs-wq",
            Self::V3 => "v3",
            Self::Bio(v) => v.name,
        }
    }

    /// Looks a design up by [`DontcacheDesign::name`] (case-insensitive); the error lists them.
    pub fn parse(name: &str) -> Result<DontcacheDesign, String> {
        Self::all()
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                let names: Vec<&str> = Self::all().iter().map(|d| d.name()).collect();
                format!(
                    "unknown design `{name}` (expected one of {})",
                    names.join(", ")
                )
            })
    }

    /// The [`Variant`] the kernel is booted with (`bio_complete_init()`): the design's own for
    /// [`DontcacheDesign::Bio`], else v7, whose batcher no bio of these designs reaches (they
    /// set no `BIO_COMPLETE_IN_TASK`).
    pub fn boot_variant(&self) -> Variant {
        match self {
            Self::Bio(v) => *v,
            _ => Variant::V7,
        }
    }

    /// Patches 2-3/4: writeback (and, without the gate, buffer_head reads) of dropbehind folios
    /// set `BIO_COMPLETE_IN_TASK` ([`Variant::fs_flag`] of a bio-level design; never otherwise).
    pub fn fs_flag(&self) -> bool {
        matches!(self, Self::Bio(v) if v.fs_flag)
    }

    /// `IOMAP_IOEND_DONTCACHE` exists and is in `IOMAP_IOEND_NOMERGE_FLAGS` (every kernel but the
    /// bio-level series, whose patch 2/4 removes it).
    pub fn ioend_dontcache(&self) -> bool {
        !matches!(self, Self::Bio(_))
    }

    /// `xfs_ioend_needs_wq_completion()` sends `IOMAP_IOEND_DONTCACHE` ioends to the
    /// filesystem's workqueue (XFS before patch 2/4).
    pub fn xfs_wq_completion(&self) -> bool {
        matches!(self, Self::XfsWorkqueue)
    }

    /// `FOP_DONTCACHE` in `def_blk_fops.fop_flags`: patch 4/4 of the series, or RFC v3's 2/2.
    pub fn bdev_fop_dontcache(&self) -> bool {
        matches!(self, Self::V3 | Self::Bio(_))
    }

    /// Whether the kernel's `blkdev_write_begin()` calls `block_write_begin_iocb()` (patches
    /// 3-4/4 of the series, RFC v3's 2/2) rather than `block_write_begin()`. Informational only:
    /// the page cache does not consult it, because block device writes never reach
    /// `->write_begin` (`blkdev_write_iter()` → `blkdev_buffered_write()` →
    /// `iomap_file_buffered_write()` → `iomap_get_folio()` passes `FGP_DONTCACHE` with
    /// `CONFIG_BUFFER_HEAD` on or off; seed 000, patch 4/4's review).
    pub fn block_write_begin_iocb(&self) -> bool {
        matches!(self, Self::V3 | Self::Bio(_))
    }

    /// Whether this is a fixed design on `path`: one where no DONTCACHE folio is left behind by
    /// a writeback completed in IRQ context. Not [`DontcacheDesign::Baseline`]; XFS's workqueue
    /// only on iomap (XFS has no buffer_head path); never RFC v3, whose full batch skips the
    /// invalidation ([`crate::mm::dropbehind_v3`]); a bio-level variant without [`Variant::fs_flag`]
    /// is finding 11's regression twin, not fixed.
    pub fn is_fixed(&self, path: WritebackPath) -> bool {
        match self {
            Self::Baseline => false,
            Self::XfsWorkqueue => path == WritebackPath::Iomap,
            // RFC v3 drops a folio only while its CPU's 31-slot batch has room: one interrupt
            // ending a merged request (buffer_head) or an ioend (iomap) of more dropbehind folios
            // skips the rest, so it is fixed on neither path in general.
            Self::V3 => false,
            Self::Bio(v) => v.fs_flag,
        }
    }
}

impl fmt::Display for DontcacheDesign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which address-space operations the block device's mapping uses (`block/fops.c`:
/// `def_blk_aops` is built one way or the other by `CONFIG_BUFFER_HEAD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WritebackPath {
    /// `CONFIG_BUFFER_HEAD=n`: `blkdev_writepages()` → `iomap_writepages()` (ioends, merged
    /// bios), `blkdev_readahead()` → `iomap_readahead()`.
    Iomap,
    /// `CONFIG_BUFFER_HEAD=y`: `blkdev_writepages()` → `block_write_full_folio()` →
    /// `submit_bh_wbc()` (one bio per 4 KiB block, so per folio), `blkdev_readahead()` →
    /// `mpage_readahead()`, `blkdev_read_folio()` → `block_read_full_folio()`.
    BufferHead,
}

impl WritebackPath {
    /// Both, iomap first.
    pub const ALL: [WritebackPath; 2] = [Self::Iomap, Self::BufferHead];

    /// `iomap` or `buffer_head`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Iomap => "iomap",
            Self::BufferHead => "buffer_head",
        }
    }

    /// Looks a path up by [`WritebackPath::name`] (`bh` is accepted for `buffer_head`).
    pub fn parse(name: &str) -> Result<WritebackPath, String> {
        match name {
            "iomap" => Ok(Self::Iomap),
            "buffer_head" | "bh" => Ok(Self::BufferHead),
            _ => Err(format!(
                "unknown writeback path `{name}` (expected iomap or buffer_head)"
            )),
        }
    }
}

impl fmt::Display for WritebackPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// RFC v3's `folio_end_dropbehind_irq()`: what `folio_end_writeback()` calls instead of
/// `folio_end_dropbehind()` when `!in_task()` on [`DontcacheDesign::V3`]. The implementation
/// (`mm/dropbehind_v3.rs`) keeps the reference in a per-CPU `folio_batch` and later calls
/// [`FolioRef::end_dropbehind`] from its work; dropping the reference is `folio_put()`.
pub trait DropbehindIrq: Send + Sync {
    /// `folio_end_dropbehind_irq(folio)`, in the completion's (atomic) context `cx`.
    fn folio_end_dropbehind_irq(&self, folio: FolioRef, cx: &Cpu);

    /// The batch's counters (RFC v3's [`DropbehindBatchV3`]: `skipped_full` is the folios a full
    /// batch left cached), if the hook keeps them.
    fn v3_counts(&self) -> Option<DropbehindV3Counts> {
        None
    }
}

/// The page cache's item in RFC v3's batch: the folio with the reference `folio_get()` took.
impl DropbehindFolio for FolioRef {
    /// `dropbehind_work_fn()`'s body: `folio_trylock()`, `filemap_end_dropbehind()`,
    /// `folio_unlock()`, `folio_put()` ([`FolioRef::end_dropbehind`]).
    fn end(self, cx: &Cpu) {
        self.end_dropbehind(cx);
    }

    /// A full batch: `folio_end_dropbehind_irq()` returns, the folio stays cached; only the
    /// reference `folio_end_writeback()` held is dropped (`folio_put()`).
    fn skip(self, _cx: &Cpu) {
        drop(self);
    }
}

/// RFC v3's `folio_end_dropbehind_irq()` over the page cache's folios.
impl DropbehindIrq for DropbehindBatchV3<FolioRef> {
    fn folio_end_dropbehind_irq(&self, folio: FolioRef, cx: &Cpu) {
        DropbehindBatchV3::folio_end_dropbehind_irq(self, folio, cx);
    }

    fn v3_counts(&self) -> Option<DropbehindV3Counts> {
        Some(self.counts())
    }
}

/// A folio with an extra reference (`folio_get()`): reclaim never frees it while the reference
/// is held. Dropping it is `folio_put()`.
pub struct FolioRef {
    pub(crate) mapping: UntrackedArc<AddressSpace>,
    pub(crate) index: u64,
    pub(crate) pfn: u64,
}

impl FolioRef {
    /// The folio's page index in its mapping.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The folio's simulated pfn (its identity: a folio dropped and re-created at the same index
    /// has another).
    pub fn pfn(&self) -> u64 {
        self.pfn
    }

    /// The mapping the folio belongs (or belonged) to.
    pub fn mapping(&self) -> &UntrackedArc<AddressSpace> {
        &self.mapping
    }

    /// What RFC v3's `dropbehind_work_fn()` does with each folio of its batch:
    /// `if (folio_trylock(folio)) { filemap_end_dropbehind(folio); folio_unlock(folio); }
    /// folio_put(folio);`. Returns whether the folio was invalidated (counted in
    /// [`PageCacheStats`](super::filemap::PageCacheStats): `v3_invalidated`, `v3_skipped_locked`,
    /// `v3_skipped_dirty_or_writeback`, `v3_gone`).
    pub fn end_dropbehind(self, cx: &Cpu) -> bool {
        self.mapping.folio_ref_end_dropbehind(&self, cx)
        // `self` drops here: folio_put().
    }
}

impl Drop for FolioRef {
    fn drop(&mut self) {
        self.mapping.folio_put(self.index, self.pfn);
    }
}

impl fmt::Debug for FolioRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FolioRef(index={}, pfn={:#x})", self.index, self.pfn)
    }
}

/// `RA_PAGES` default: `VM_READAHEAD_PAGES` = 128 KiB / `PAGE_SIZE`.
pub const VM_READAHEAD_PAGES: u64 = 32;

/// `BIO_MAX_VECS`: the segments one bio holds (256 pages = 1 MiB).
pub const BIO_MAX_VECS: u64 = 256;

/// The page cache of one block device: its mapping, memcg limit, readahead and design.
#[derive(Clone)]
pub struct PageCacheConfig {
    /// The design.
    pub design: DontcacheDesign,
    /// The address-space operations (`CONFIG_BUFFER_HEAD`).
    pub path: WritebackPath,
    /// The device size in pages (`i_size` of the bdev inode / `PAGE_SIZE`): reads stop there.
    pub nr_pages: u64,
    /// The memcg's `memory.limit_in_bytes` in pages (cgroup v1); `None`: unlimited.
    pub limit_pages: Option<u64>,
    /// `bdi->ra_pages` (`file_ra_state.ra_pages`): the readahead window's maximum. 0 disables
    /// readahead: every missing folio is read with `->read_folio()`.
    pub ra_pages: u64,
    /// `bdi->io_pages`: a sync readahead may grow to the request up to this (`max_sectors_kb`).
    pub io_pages: u64,
    /// Pages per bio ([`BIO_MAX_VECS`]); longer runs become several bios (iomap) or are split
    /// (mpage).
    pub max_bio_pages: u64,
    /// Accept `RWF_DONTCACHE` on the block device even without `FOP_DONTCACHE` (a measurement
    /// knob for [`DontcacheDesign::Baseline`]: what the kernel would do if the check were not
    /// there). For [`DontcacheDesign::XfsWorkqueue`] it stands for XFS's own file operations,
    /// which have `FOP_DONTCACHE` since 6.15 (`xfs_file_operations`).
    pub force_dontcache: bool,
    /// A file model's holes: blocks are unwritten extents until their first writeback completes;
    /// an ioend over them is `IOMAP_IOEND_UNWRITTEN` (not merged with written blocks) and completes
    /// on the filesystem's workqueue (extent conversion, as XFS and ext4 do), and reads of them
    /// are zero-filled without I/O. `false`: a block device, every block is written.
    pub track_unwritten: bool,
    /// The `dev` the filemap tracepoints print (`inode->i_sb->s_dev`). A simplification: the
    /// bdev inode's superblock is `blockdev_superblock`, whose `s_dev` is an anonymous dev
    /// (major 0, a minor of the boot's choosing); biosim prints the device's own number instead.
    pub dev: (u32, u32),
    /// The `ino` the filemap tracepoints print: `bdev_add()` sets the bdev inode's `i_ino` to
    /// the `dev_t` (`MKDEV(7, 0)` = `0x700000` for `/dev/loop0`, printed `%lx`).
    pub ino: u64,
    /// `/sys/kernel/tracing/events/filemap/enable`: the mapping fires
    /// `mm_filemap_add_to_page_cache` / `mm_filemap_delete_from_page_cache` (default on).
    pub filemap_events: bool,
    /// The `folio_end_dropbehind_irq()` of [`DontcacheDesign::V3`]. Left `None`,
    /// [`AddressSpace::new`] sets up RFC v3's batch on the mapping's kernel
    /// ([`PageCacheConfig::with_v3_batch`]); a test may put its own hook here.
    pub dropbehind_irq: Option<UntrackedArc<dyn DropbehindIrq>>,
    /// `global_dirtyable_memory()` in pages: the configured machine's memory that the global
    /// dirty limits are percentages of ([`DEFAULT_MACHINE_MEMORY_BYTES`] by default).
    pub dirtyable_pages: u64,
    /// `vm.dirty_ratio` (percent; default 20).
    pub dirty_ratio: u64,
    /// `vm.dirty_background_ratio` (percent; default 10).
    pub dirty_background_ratio: u64,
    /// The memory controller on cgroup v2 (`cgroup_subsys_on_dfl(memory_cgrp_subsys)`): the memcg
    /// is a dirty domain of its own (`mdtc`), whose limits are the same ratios of the memcg's
    /// available memory ([`AddressSpace::memcg_dirty_limits`](super::filemap::AddressSpace::memcg_dirty_limits)).
    /// `false` (default): cgroup v1, as this project's machine, where only the global domain
    /// throttles.
    pub cgroup_v2: bool,
    /// The machine is a VM guest with free page reporting (mm/page_reporting.c under a
    /// virtio-balloon, [`super::page_reporting`]) at this `page_reporting_order`; its free memory
    /// (the memcg limit, else [`PageCacheConfig::dirtyable_pages`]) starts reported to the host,
    /// and [`PageCacheStats::reported_pages_allocated`](super::filemap::PageCacheStats::reported_pages_allocated)
    /// counts the pages allocated from it. `None` (default): no reporting, as on bare metal.
    pub page_reporting_order: Option<u32>,
    /// The device under the mapping (`I_BDEV(mapping->host)`), for the flusher's own
    /// `submit_bio()`: with it, `wb_workfn()` submits the bios it builds to this driver from its
    /// kworker, as the kernel's flusher does; without it (a driver that moves bios itself, the
    /// discrete-event one) they wait in [`AddressSpace::wb_take_submitted`] for the caller.
    pub bdev: Option<UntrackedArc<dyn BlockDriver>>,
}

/// The machine the model stands for: 24 GiB (this project's host), whose dirtyable memory sets
/// the global dirty limits.
pub const DEFAULT_MACHINE_MEMORY_BYTES: u64 = 24 << 30;

impl fmt::Debug for PageCacheConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageCacheConfig")
            .field("design", &self.design.name())
            .field("path", &self.path)
            .field("nr_pages", &self.nr_pages)
            .field("limit_pages", &self.limit_pages)
            .field("ra_pages", &self.ra_pages)
            .field("io_pages", &self.io_pages)
            .field("max_bio_pages", &self.max_bio_pages)
            .field("force_dontcache", &self.force_dontcache)
            .field("track_unwritten", &self.track_unwritten)
            .field("dev", &self.dev)
            .field("ino", &self.ino)
            .field("filemap_events", &self.filemap_events)
            .field("dropbehind_irq", &self.dropbehind_irq.is_some())
            .field("dirtyable_pages", &self.dirtyable_pages)
            .field("dirty_ratio", &self.dirty_ratio)
            .field("dirty_background_ratio", &self.dirty_background_ratio)
            .field("cgroup_v2", &self.cgroup_v2)
            .field("page_reporting_order", &self.page_reporting_order)
            .field("bdev", &self.bdev.as_ref().map(|b| b.disk_name()))
            .finish()
    }
}

impl PageCacheConfig {
    /// A block device of 4 GiB (1 Mi pages), no memcg limit, 128 KiB readahead, `io_pages` 256,
    /// 256-page bios, no forcing, no holes, `dev` 7:0 (`/dev/loop0`'s `i_rdev`), `ino`
    /// `0x700000` (its `dev_t`, as `bdev_add()` sets it).
    pub fn new(design: DontcacheDesign, path: WritebackPath) -> Self {
        Self {
            design,
            path,
            nr_pages: 1 << 20,
            limit_pages: None,
            ra_pages: VM_READAHEAD_PAGES,
            io_pages: 256,
            max_bio_pages: BIO_MAX_VECS,
            force_dontcache: false,
            track_unwritten: false,
            dev: (7, 0),
            // MKDEV(7, 0): the kernel's dev_t has a 20-bit minor (MINORBITS).
            ino: 7 << 20,
            filemap_events: true,
            dropbehind_irq: None,
            dirtyable_pages: DEFAULT_MACHINE_MEMORY_BYTES / 4096,
            dirty_ratio: 20,
            dirty_background_ratio: 10,
            cgroup_v2: false,
            page_reporting_order: None,
            bdev: None,
        }
    }

    /// On cgroup v2 ([`PageCacheConfig::cgroup_v2`]): the memcg is a dirty domain too.
    pub fn with_cgroup_v2(mut self) -> Self {
        self.cgroup_v2 = true;
        self
    }

    /// On a VM guest with free page reporting at `order` ([`PageCacheConfig::page_reporting_order`]).
    pub fn with_page_reporting(mut self, order: u32) -> Self {
        self.page_reporting_order = Some(order);
        self
    }

    /// With the device the flusher submits its bios to ([`PageCacheConfig::bdev`]).
    pub fn with_bdev(mut self, dev: UntrackedArc<dyn BlockDriver>) -> Self {
        self.bdev = Some(dev);
        self
    }

    /// With a machine of `bytes` of memory: the global dirty limits' base
    /// ([`PageCacheConfig::dirtyable_pages`]).
    pub fn with_machine_memory(mut self, bytes: u64) -> Self {
        self.dirtyable_pages = bytes / 4096;
        self
    }

    /// With a memcg limit of `pages` pages.
    pub fn with_limit(mut self, pages: u64) -> Self {
        self.limit_pages = Some(pages);
        self
    }

    /// With a device of `pages` pages.
    pub fn with_nr_pages(mut self, pages: u64) -> Self {
        self.nr_pages = pages;
        self
    }

    /// With `ra_pages` (0: no readahead).
    pub fn with_ra_pages(mut self, pages: u64) -> Self {
        self.ra_pages = pages;
        self
    }

    /// With holes ([`PageCacheConfig::track_unwritten`]).
    pub fn with_unwritten(mut self) -> Self {
        self.track_unwritten = true;
        self
    }

    /// With [`PageCacheConfig::force_dontcache`].
    pub fn with_force_dontcache(mut self) -> Self {
        self.force_dontcache = true;
        self
    }

    /// With the filemap tracepoints off (`events/filemap/enable` = 0).
    pub fn without_filemap_events(mut self) -> Self {
        self.filemap_events = false;
        self
    }

    /// With RFC v3's batch on `kernel`: `dropbehind_init()` from `pagecache_init()`
    /// ([`DropbehindBatchV3::dropbehind_init_on`]: `system_wq` and `page_alloc_cpu_dead()`'s
    /// drain at the fixed state `CPUHP_PAGE_ALLOC`). What [`AddressSpace::new`] does for a V3
    /// mapping without a hook. The batch is the kernel's, one per kernel: a second call on the
    /// same kernel, or one on a kernel booted with the gallery's `v3` module (which registers
    /// the state itself), fails with the state's error.
    pub fn with_v3_batch(self, kernel: &UntrackedArc<Kernel>) -> Result<Self, String> {
        let batch = DropbehindBatchV3::<FolioRef>::dropbehind_init_on(kernel)?;
        Ok(self.with_dropbehind_irq(batch))
    }

    /// With RFC v3's `folio_end_dropbehind_irq()`.
    pub fn with_dropbehind_irq(mut self, hook: UntrackedArc<dyn DropbehindIrq>) -> Self {
        self.dropbehind_irq = Some(hook);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn designs_parse_by_name_and_say_what_they_set() {
        assert_eq!(
            DontcacheDesign::parse("v7"),
            Ok(DontcacheDesign::Bio(Variant::V7))
        );
        assert_eq!(
            DontcacheDesign::parse("XFS-WQ"),
            Ok(DontcacheDesign::XfsWorkqueue)
        );
        let e = DontcacheDesign::parse("v2").unwrap_err();
        assert!(e.contains("baseline, xfs-wq, v3, v5"), "{e}");
        let b = DontcacheDesign::Baseline;
        assert!(
            !b.fs_flag()
                && b.ioend_dontcache()
                && !b.bdev_fop_dontcache()
                && !b.is_fixed(WritebackPath::Iomap)
        );
        let x = DontcacheDesign::XfsWorkqueue;
        assert!(x.xfs_wq_completion() && x.ioend_dontcache() && !x.bdev_fop_dontcache());
        let v7 = DontcacheDesign::Bio(Variant::V7);
        assert!(
            v7.fs_flag()
                && !v7.ioend_dontcache()
                && v7.bdev_fop_dontcache()
                && v7.is_fixed(WritebackPath::BufferHead)
        );
        let twin = DontcacheDesign::Bio(Variant {
            fs_flag: false,
            ..Variant::V7
        });
        assert!(!twin.fs_flag() && !twin.is_fixed(WritebackPath::Iomap));
        assert!(x.is_fixed(WritebackPath::Iomap) && !x.is_fixed(WritebackPath::BufferHead));
        assert_eq!(DontcacheDesign::V3.boot_variant(), Variant::V7);
        assert_eq!(WritebackPath::parse("bh"), Ok(WritebackPath::BufferHead));
        assert!(WritebackPath::parse("ext4").is_err());
    }
}
