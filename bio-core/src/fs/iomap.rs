//! `fs/iomap/ioend.c`: the writeback bio of a buffered-write filesystem, with patch 2/4 of the
//! series ("iomap: use BIO_COMPLETE_IN_TASK for dropbehind writeback").
//!
//! `iomap_add_to_ioend()` adds each dirty folio to the ioend's bio and, after the patch, sets
//! `BIO_COMPLETE_IN_TASK` when the folio is dropbehind, so the completion
//! (`iomap_finish_ioend_buffered()` → `folio_end_writeback()`) runs where
//! `folio_end_dropbehind()` can invalidate. The patch also removes XFS's own
//! `IOMAP_IOEND_DONTCACHE` workqueue detour, which the block layer now provides for everyone.

use crate::block::complete_in_task::Variant;
use crate::block::{Bio, BioEndIo, BioFlag, ReqOp};
use crate::mm::filemap::{AddressSpace, PAGE_SIZE};
use crate::sync::UntrackedArc;
use crate::Kernel;

/// Sectors per page.
const PAGE_SECTORS: u64 = (PAGE_SIZE / 512) as u64;

/// Writeback of `mapping`'s dirty folios in `[first, last]` (`iomap_writepages()`): each run of
/// consecutive folios becomes one write bio at sector `index * 8` (the file's blocks map 1:1 onto
/// the device, as for a block device's own page cache), flagged `BIO_COMPLETE_IN_TASK` when a
/// folio in it is dropbehind and the variant has the patch ([`Variant::fs_flag`]). Each bio's
/// `bi_end_io` ends writeback on its folios. The caller submits the bios.
pub fn iomap_writepages(
    kernel: &Kernel,
    mapping: &UntrackedArc<AddressSpace>,
    first: u64,
    last: u64,
    variant: &Variant,
) -> Vec<Box<Bio>> {
    let mut bios: Vec<(Box<Bio>, Vec<u64>)> = Vec::new();
    for (index, data, dropbehind) in mapping.start_writeback(first, last) {
        let contiguous = bios
            .last()
            .is_some_and(|(_, idx)| idx.last() == Some(&(index - 1)));
        if !contiguous {
            bios.push((
                kernel.bio_alloc(ReqOp::Write, index * PAGE_SECTORS),
                Vec::new(),
            ));
        }
        let (bio, idx) = bios.last_mut().expect("pushed above");
        bio.add_data(data); // bio_add_folio()
        idx.push(index);
        if dropbehind && variant.fs_flag {
            bio.set_flag(BioFlag::CompleteInTask);
        }
    }
    bios.into_iter()
        .map(|(bio, idx)| {
            let m = UntrackedArc::clone(mapping);
            bio.with_end_io(BioEndIo::new("iomap_writepage_end_bio", move |_bio, cx| {
                // iomap_finish_ioend_buffered(): every folio of the ioend.
                for i in &idx {
                    m.folio_end_writeback(*i, cx);
                }
            }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::bio_endio;
    use crate::kernel::{CpuId, KernelConfig};

    #[test]
    fn runs_become_bios_and_only_dropbehind_bios_are_flagged() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let m = UntrackedArc::new(AddressSpace::new());
        for i in [0, 1, 2, 5] {
            m.write_page(i, &[1], i != 5);
        }
        let bios = iomap_writepages(&k, &m, 0, 10, &Variant::V7);
        let shape: Vec<(u64, u32, bool)> = bios
            .iter()
            .map(|b| {
                (
                    b.bi_iter.bi_sector,
                    b.bi_iter.bi_size,
                    b.flagged(BioFlag::CompleteInTask),
                )
            })
            .collect();
        assert_eq!(shape, [(0, 3 * 4096, true), (40, 4096, false)]);
        let cx = k.cpu(CpuId(0)).unwrap();
        for b in bios {
            bio_endio(b, &cx);
        }
        assert_eq!(
            m.stats().dropped,
            3,
            "ended in task context: the dropbehind folios went"
        );
        assert_eq!(m.nr_cached(), 1);
        // Before the series: no flag, and the device IRQ ends writeback in hardirq.
        let mut before = Variant::V7;
        before.fs_flag = false;
        for i in [0, 1] {
            m.write_page(i, &[2], true);
        }
        let bios = iomap_writepages(&k, &m, 0, 1, &before);
        assert!(!bios[0].flagged(BioFlag::CompleteInTask));
        for b in bios {
            cx.with_hardirq(|cx| bio_endio(b, cx));
        }
        assert_eq!(m.dropbehind_left(), [0, 1], "left in the cache");
        assert_eq!(m.stats().skipped_not_in_task, 2);
    }
}
