//! `fs/buffer.c` and `fs/mpage.c`: the block device's mapping with buffer heads
//! (`CONFIG_BUFFER_HEAD=y`), with patch 3/4 of the series ("fs/buffer: use BIO_COMPLETE_IN_TASK
//! for dropbehind folios").
//!
//! - Writeback: `block_write_full_folio()` → `submit_bh_wbc()` for each buffer; with 4 KiB blocks
//!   that is one bio per folio, ended by `end_bio_bh_io_sync()` → `end_buffer_async_write()` →
//!   `folio_end_writeback()`.
//! - Reads: `blkdev_readahead()` → `mpage_readahead()` (its own bios, `mpage_read_end_io`, never
//!   flagged), and `blkdev_read_folio()` → `block_read_full_folio()` → `submit_bh_wbc()` (a
//!   mapping without readahead, a failed read retried).
//!
//! As posted (v6), `submit_bh_wbc()` flags a bio for a dropbehind folio whatever its direction.
//! The review noted that read dropbehind invalidation already runs in the reader's task
//! (`filemap_end_dropbehind_read()`), so deferring read completions costs a worker hand-off for
//! nothing, and agreed to gate the flag on `op_is_write()` (finding 6).

// Bios travel boxed everywhere in bio-core (`Box<Bio>` moves from submitter to driver to
// `bio_endio()`); a list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

use crate::block::complete_in_task::Variant;
use crate::block::{fs_bio_set, Bio, BioEndIo, BioFlag, ReqOp};
use crate::kernel::Cpu;
use crate::mm::dontcache::DontcacheDesign;
use crate::mm::filemap::{AddressSpace, Mapping, PAGE_SECTORS};
use crate::mm::gfp::GfpFlags;
use crate::mm::page_writeback::WbFolio;

/// The flag decision of `submit_bh_wbc()` for a buffer_head on a folio with `dropbehind` set:
/// `if (folio_test_dropbehind(bh->b_folio)) bio_set_flag(bio, BIO_COMPLETE_IN_TASK);`, with the
/// review's `op_is_write()` gate when the variant has it, and nothing before the series
/// ([`Variant::fs_flag`] off). Returns whether the flag was set.
pub fn submit_bh_wbc_set_flags(bio: &mut Bio, folio_dropbehind: bool, variant: &Variant) -> bool {
    if variant.fs_flag && folio_dropbehind && (!variant.gate_reads || bio.op().is_write()) {
        bio.set_flag(BioFlag::CompleteInTask);
        return true;
    }
    false
}

/// [`submit_bh_wbc_set_flags`] for a design: only the bio-level series has patch 3/4.
pub fn submit_bh_wbc_design(
    bio: &mut Bio,
    folio_dropbehind: bool,
    design: &DontcacheDesign,
) -> bool {
    match design {
        DontcacheDesign::Bio(v) => submit_bh_wbc_set_flags(bio, folio_dropbehind, v),
        _ => false,
    }
}

/// `block_write_full_folio()` for each folio: one write bio each (`submit_bh_wbc()`, flagged per
/// the design), ended by `end_bio_bh_io_sync`.
pub(crate) fn block_write_full_folios(
    mapping: &AddressSpace,
    m: &mut Mapping,
    cx: &Cpu,
    folios: Vec<WbFolio>,
) -> Vec<Box<Bio>> {
    let design = mapping.config.design;
    let this = mapping.arc();
    folios
        .into_iter()
        .map(|f| {
            // submit_bh_wbc(): bio_alloc(bdev, 1, opf, GFP_NOIO), from fs_bio_set; the sleeping
            // mask never gets NULL in the kernel (see iomap_writepages() for the model's give-up).
            let sector = f.index * PAGE_SECTORS;
            let mut bio = fs_bio_set(&mapping.kernel)
                .bio_alloc_bioset(ReqOp::Write, sector, 1, GfpFlags::GFP_NOIO, cx)
                .unwrap_or_else(|| mapping.kernel.bio_alloc(ReqOp::Write, sector));
            bio.bi_bdev = Some(mapping.config.dev);
            bio.add_data(f.data);
            let flagged = submit_bh_wbc_design(&mut bio, f.dropbehind, &design);
            m.stats.writeback_bios += 1;
            if flagged {
                m.stats.writeback_bios_flagged += 1;
            }
            if f.unwritten {
                m.stats.unwritten_ioends += 1;
            }
            let mapping = this.clone();
            let (index, pfn, unwritten) = (f.index, f.pfn, f.unwritten);
            bio.with_end_io(BioEndIo::new("end_bio_bh_io_sync", move |bio, cx| {
                // end_buffer_async_write(): the folio's only buffer is done.
                mapping.finish_ioend(cx, &[(index, pfn)], bio.status().is_ok(), unwritten, 0)
            }))
        })
        .collect()
}

/// `mpage_readahead()`: the run's read bios (`mpage_read_end_io`); mpage builds its own bios,
/// not through `submit_bh_wbc()`, so they are never flagged.
pub(crate) fn mpage_readahead(
    mapping: &AddressSpace,
    m: &mut Mapping,
    cx: &Cpu,
    run: &[(u64, u64)],
) -> Vec<Box<Bio>> {
    crate::fs::iomap::read_bios(mapping, m, cx, run, "mpage_read_end_io")
}

/// `block_read_full_folio()`: the folio's one buffer read through `submit_bh_wbc()`
/// (`end_bio_bh_io_sync`), flagged for a dropbehind folio per the design — reads too on v6 as
/// posted (counted: `read_bios_flagged`).
pub(crate) fn block_read_full_folio(
    mapping: &AddressSpace,
    m: &mut Mapping,
    cx: &Cpu,
    index: u64,
    pfn: u64,
    dropbehind: bool,
) -> Box<Bio> {
    let mut bio = crate::fs::iomap::read_bio(
        mapping,
        m,
        cx,
        vec![(index, pfn)],
        "end_bio_bh_io_sync",
        true,
    );
    if submit_bh_wbc_design(&mut bio, dropbehind, &mapping.config.design) {
        m.stats.read_bios_flagged += 1;
    }
    bio
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::ReqOp;

    #[test]
    fn reads_are_flagged_only_without_the_gate() {
        for (variant, read_flagged) in [(Variant::V6, true), (Variant::V7, false)] {
            let mut r = Bio::new(1, ReqOp::Read, 0);
            let mut w = Bio::new(2, ReqOp::Write, 0);
            let mut plain = Bio::new(3, ReqOp::Write, 0);
            assert_eq!(
                submit_bh_wbc_set_flags(&mut r, true, &variant),
                read_flagged
            );
            assert!(submit_bh_wbc_set_flags(&mut w, true, &variant));
            assert!(!submit_bh_wbc_set_flags(&mut plain, false, &variant));
            assert!(w.flagged(BioFlag::CompleteInTask));
        }
    }
}
