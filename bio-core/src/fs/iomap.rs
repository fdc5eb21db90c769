//! `fs/iomap/buffered-io.c` and `fs/iomap/ioend.c`: the block device's mapping without buffer
//! heads (`CONFIG_BUFFER_HEAD=n`): `iomap_writepages()` builds ioends, `iomap_readahead()` and
//! `iomap_read_folio()` the read bios; with patch 2/4 of the series ("iomap: use
//! BIO_COMPLETE_IN_TASK for dropbehind writeback").
//!
//! `iomap_add_to_ioend()` starts a new ioend unless the folio is contiguous with the current one
//! and has the same `IOMAP_IOEND_NOMERGE_FLAGS` (`iomap_can_add_to_ioend()`):
//!
//! - before the patch (baseline, XFS, RFC v3) a dropbehind folio gets `IOMAP_IOEND_DONTCACHE`,
//!   which is in the NOMERGE flags: dontcache and regular folios never share a bio; XFS sends a
//!   `DONTCACHE` ioend to its workqueue ([`crate::fs::xfs_aops`]), the block device completes it in
//!   the IRQ;
//! - after it, `IOMAP_IOEND_DONTCACHE` is gone and the ioend's bio gets `BIO_COMPLETE_IN_TASK`
//!   when a dropbehind folio is added: regular folios merged into that bio are deferred with it
//!   (counted: `merged_regular_folios`).
//!
//! `IOMAP_IOEND_UNWRITTEN` (a write into a hole of the file model) is a NOMERGE flag in every
//! kernel and always completes on the filesystem's workqueue (unwritten extent conversion).

// Bios travel boxed everywhere in bio-core (`Box<Bio>` moves from submitter to driver to
// `bio_endio()`); a list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

use crate::block::{Bio, BioEndIo, BioFlag, BioSet, ReqOp, BIO_MAX_VECS};
use crate::kernel::{Cpu, Kernel};
use crate::mm::filemap::{AddressSpace, Mapping, PAGE_SECTORS};
use crate::mm::gfp::GfpFlags;
use crate::mm::page_writeback::WbFolio;

/// `IOMAP_IOEND_SHARED`.
pub const IOMAP_IOEND_SHARED: u16 = 1 << 0;
/// `IOMAP_IOEND_UNWRITTEN`: the ioend covers unwritten extents (needs conversion at completion).
pub const IOMAP_IOEND_UNWRITTEN: u16 = 1 << 1;
/// `IOMAP_IOEND_BOUNDARY`.
pub const IOMAP_IOEND_BOUNDARY: u16 = 1 << 2;
/// `IOMAP_IOEND_DIRECT`.
pub const IOMAP_IOEND_DIRECT: u16 = 1 << 3;
/// `IOMAP_IOEND_DONTCACHE`: the ioend holds dropbehind folios (6.15 to the series' patch 2/4).
pub const IOMAP_IOEND_DONTCACHE: u16 = 1 << 4;

/// `IOMAP_IOEND_NOMERGE_FLAGS` before patch 2/4.
pub const IOMAP_IOEND_NOMERGE_FLAGS: u16 =
    IOMAP_IOEND_SHARED | IOMAP_IOEND_UNWRITTEN | IOMAP_IOEND_DIRECT | IOMAP_IOEND_DONTCACHE;

/// `IOMAP_IOEND_NOMERGE_FLAGS` after patch 2/4 (`IOMAP_IOEND_DONTCACHE` removed).
pub const IOMAP_IOEND_NOMERGE_FLAGS_SERIES: u16 =
    IOMAP_IOEND_SHARED | IOMAP_IOEND_UNWRITTEN | IOMAP_IOEND_DIRECT;

/// `struct iomap_ioend` being built: its bio and folios.
struct Ioend {
    bio: Box<Bio>,
    io_flags: u16,
    folios: Vec<(u64, u64)>,
    regular: u64,
    last: u64,
}

/// `iomap_ioend_bioset`: `iomap_ioend_init()`'s `bioset_init(&iomap_ioend_bioset, 4 * (PAGE_SIZE
/// / SECTOR_SIZE), offsetof(struct iomap_ioend, io_bio), BIOSET_NEED_BVECS)`, one per kernel.
fn iomap_ioend_bioset(kernel: &Kernel) -> &BioSet {
    kernel
        .iomap_ioend_bioset
        .get_or_init(|| BioSet::new(4 * (crate::mm::filemap::PAGE_SIZE / 512)))
}

/// `iomap_writepages()` → `iomap_add_to_ioend()` for each folio (ascending), then
/// `iomap_ioend_writeback_submit()`: the bios to submit, one per ioend, each at most
/// `max_bio_pages` long. Each bio's `bi_end_io` is `iomap_writepage_end_bio` (ends writeback in
/// its context) or, for an ioend that needs it, `xfs_end_bio` (queues it to the workqueue).
pub(crate) fn iomap_writepages(
    mapping: &AddressSpace,
    m: &mut Mapping,
    cx: &Cpu,
    folios: Vec<WbFolio>,
) -> Vec<Box<Bio>> {
    let design = mapping.config.design;
    let nomerge = if design.ioend_dontcache() {
        IOMAP_IOEND_NOMERGE_FLAGS
    } else {
        IOMAP_IOEND_NOMERGE_FLAGS_SERIES
    };
    let max = mapping.config.max_bio_pages.max(1) as usize;
    let mut ioends: Vec<Ioend> = Vec::new();
    for f in folios {
        let mut io_flags = 0;
        if f.unwritten {
            io_flags |= IOMAP_IOEND_UNWRITTEN;
        }
        if f.dropbehind && design.ioend_dontcache() {
            io_flags |= IOMAP_IOEND_DONTCACHE;
        }
        // iomap_can_add_to_ioend().
        let can_add = ioends.last().is_some_and(|e| {
            (e.io_flags & nomerge) == (io_flags & nomerge)
                && e.last + 1 == f.index
                && e.folios.len() < max
        });
        if !can_add {
            // iomap_alloc_ioend(): bio_alloc_bioset(bdev, BIO_MAX_VECS, REQ_OP_WRITE | ..,
            // GFP_NOFS, &iomap_ioend_bioset). GFP_NOFS sleeps for the mempool, so the kernel
            // never sees NULL; the model's mempool gives up only after its endless-retry report,
            // and then an unpooled bio lets the run end.
            let sector = f.index * PAGE_SECTORS;
            let mut bio = iomap_ioend_bioset(&mapping.kernel)
                .bio_alloc_bioset(ReqOp::Write, sector, BIO_MAX_VECS, GfpFlags::GFP_NOFS, cx)
                .unwrap_or_else(|| mapping.kernel.bio_alloc(ReqOp::Write, sector));
            bio.bi_bdev = Some(mapping.config.dev);
            ioends.push(Ioend {
                bio,
                io_flags,
                folios: Vec::new(),
                regular: 0,
                last: f.index,
            });
        }
        let e = ioends.last_mut().expect("pushed above");
        e.io_flags |= io_flags;
        e.bio.add_data(f.data); // bio_add_folio()
        e.folios.push((f.index, f.pfn));
        e.last = f.index;
        if f.dropbehind {
            // Patch 2/4: `if (folio_test_dropbehind(folio)) bio_set_flag(bio, BIO_COMPLETE_IN_TASK)`.
            if design.fs_flag() {
                e.bio.set_flag(BioFlag::CompleteInTask);
            }
        } else {
            e.regular += 1;
        }
    }
    let this = mapping.arc();
    ioends
        .into_iter()
        .map(|e| {
            let flagged = e.bio.flagged(BioFlag::CompleteInTask);
            let merged_regular = if flagged { e.regular } else { 0 };
            m.stats.writeback_bios += 1;
            if flagged {
                m.stats.writeback_bios_flagged += 1;
                m.stats.merged_regular_folios += merged_regular;
            }
            let unwritten = e.io_flags & IOMAP_IOEND_UNWRITTEN != 0;
            if unwritten {
                m.stats.unwritten_ioends += 1;
            }
            // xfs_ioend_needs_wq_completion(): unwritten, or (before patch 2/4) dontcache.
            let needs_wq = unwritten
                || (e.io_flags & IOMAP_IOEND_DONTCACHE != 0 && design.xfs_wq_completion());
            let mapping = this.clone();
            let folios = e.folios;
            let end_io = if needs_wq {
                BioEndIo::new("xfs_end_bio", move |bio, cx| {
                    mapping.xfs_end_bio(
                        cx,
                        folios.clone(),
                        bio.status().is_ok(),
                        unwritten,
                        merged_regular,
                    )
                })
            } else {
                BioEndIo::new("iomap_writepage_end_bio", move |bio, cx| {
                    mapping.finish_ioend(
                        cx,
                        &folios,
                        bio.status().is_ok(),
                        unwritten,
                        merged_regular,
                    )
                })
            };
            e.bio.with_end_io(end_io)
        })
        .collect()
}

/// Read bios for a run of new locked folios: one per `max_bio_pages`, each segment a page the
/// device fills; `bi_end_io` (`name`) ends the read of each folio.
pub(crate) fn read_bios(
    mapping: &AddressSpace,
    m: &mut Mapping,
    cx: &Cpu,
    run: &[(u64, u64)],
    name: &'static str,
) -> Vec<Box<Bio>> {
    let max = mapping.config.max_bio_pages.max(1) as usize;
    let mut out = Vec::new();
    let mut start = 0;
    while start < run.len() {
        // Split where the run is not contiguous or the bio is full.
        let mut end = start + 1;
        while end < run.len() && end - start < max && run[end].0 == run[end - 1].0 + 1 {
            end += 1;
        }
        let part: Vec<(u64, u64)> = run[start..end].to_vec();
        out.push(read_bio(mapping, m, cx, part, name, false));
        start = end;
    }
    out
}

/// One read bio over `folios` (contiguous), ending with `folio_end_read()` on each. `sync`: a
/// `->read_folio()` the reader waits for, whose failure is its `-EIO` (a readahead failure is
/// not an error: the reader retries with `->read_folio()`).
///
/// The bio is `bio_alloc()`'s, from `fs_bio_set`: for readahead with `readahead_gfp_mask()`'s
/// `__GFP_NORETRY | __GFP_NOWARN` added to `GFP_KERNEL` (the block device's mapping allows it),
/// for a `->read_folio()` with `GFP_KERNEL` (`block_read_full_folio()`'s `submit_bh()` asks
/// `GFP_NOIO`: both sleep for the reserve, so the model uses one). Neither gets NULL (iomap's
/// retry "for a single page" after a NULL never runs).
pub(crate) fn read_bio(
    mapping: &AddressSpace,
    m: &mut Mapping,
    cx: &Cpu,
    folios: Vec<(u64, u64)>,
    name: &'static str,
    sync: bool,
) -> Box<Bio> {
    let sector = folios[0].0 * PAGE_SECTORS;
    let gfp = if sync {
        GfpFlags::GFP_KERNEL
    } else {
        GfpFlags(GfpFlags::GFP_KERNEL.0 | GfpFlags::__GFP_NORETRY.0 | GfpFlags::__GFP_NOWARN.0)
    };
    let nr_vecs = u16::try_from(folios.len()).unwrap_or(BIO_MAX_VECS);
    let mut bio = crate::block::fs_bio_set(&mapping.kernel)
        .bio_alloc_bioset(ReqOp::Read, sector, nr_vecs, gfp, cx)
        .unwrap_or_else(|| mapping.kernel.bio_alloc(ReqOp::Read, sector));
    bio.bi_bdev = Some(mapping.config.dev);
    for _ in &folios {
        bio.add_data(vec![0; crate::mm::filemap::PAGE_SIZE]);
    }
    m.stats.read_bios += 1;
    m.stats.read_pages += folios.len() as u64;
    let this = mapping.arc();
    bio.with_end_io(BioEndIo::new(name, move |bio, cx| {
        let ok = bio.status().is_ok();
        for (seg, (index, pfn)) in bio.bi_io_vec.iter().zip(&folios) {
            this.folio_end_read(cx, *index, *pfn, ok.then_some(&seg.data[..]), sync);
        }
    }))
}

/// `iomap_readahead()`: the run's read bios (`iomap_read_end_io`). Reads never get
/// `BIO_COMPLETE_IN_TASK` (patch 2/4 is writeback only).
pub(crate) fn iomap_readahead(
    mapping: &AddressSpace,
    m: &mut Mapping,
    cx: &Cpu,
    run: &[(u64, u64)],
) -> Vec<Box<Bio>> {
    read_bios(mapping, m, cx, run, "iomap_read_end_io")
}

/// `iomap_read_folio()`: one folio's read bio.
pub(crate) fn iomap_read_folio(
    mapping: &AddressSpace,
    m: &mut Mapping,
    cx: &Cpu,
    index: u64,
    pfn: u64,
) -> Box<Bio> {
    read_bio(
        mapping,
        m,
        cx,
        vec![(index, pfn)],
        "iomap_read_end_io",
        true,
    )
}
