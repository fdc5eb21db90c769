//! `fs/buffer.c`: the part of `submit_bh_wbc()` that patch 3/4 of the series changes.
//!
//! As posted (v6), a bio for a dropbehind folio gets `BIO_COMPLETE_IN_TASK` whatever its
//! direction. The review noted that read dropbehind invalidation already runs in the reader's task
//! (`filemap_end_dropbehind_read()`), so deferring read completions costs a worker hand-off for
//! nothing, and agreed to gate the flag on `op_is_write()` (finding 6).

use crate::block::complete_in_task::Variant;
use crate::block::{Bio, BioFlag};

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
