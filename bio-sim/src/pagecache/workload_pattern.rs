//! The bytes the workload writes and the device holds before the run, as a function of the page
//! and the write pass, so every read can be checked against what must be there without keeping a
//! second copy of the data.

/// Bytes per page.
pub const PAGE: usize = 4096;

/// The content of page `index` after write pass `pass` (pass 0: what the device held before the
/// run, as if the disk had been filled beforehand).
pub fn page_pattern(index: u64, pass: u64, out: &mut [u8]) {
    let seed = index
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(pass.wrapping_mul(0xbf58_476d_1ce4_e5b9));
    for (i, w) in out.chunks_mut(8).enumerate() {
        let v = seed ^ (i as u64).wrapping_mul(0x94d0_49bb_1331_11eb);
        let b = v.to_le_bytes();
        w.copy_from_slice(&b[..w.len()]);
    }
}

/// `len` bytes of the pattern starting at byte `pos`, page `p` at pass `pass_of(p)`.
pub fn range_pattern(pos: u64, len: usize, pass_of: impl Fn(u64) -> u64) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut page = [0u8; PAGE];
    let mut done = 0;
    while done < len {
        let at = pos + done as u64;
        let (index, off) = (at / PAGE as u64, (at % PAGE as u64) as usize);
        page_pattern(index, pass_of(index), &mut page);
        let n = (PAGE - off).min(len - done);
        out[done..done + n].copy_from_slice(&page[off..off + n]);
        done += n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_passes_differ() {
        let (mut a, mut b, mut c) = ([0u8; PAGE], [0u8; PAGE], [0u8; PAGE]);
        page_pattern(1, 0, &mut a);
        page_pattern(2, 0, &mut b);
        page_pattern(1, 1, &mut c);
        assert_ne!(a, b);
        assert_ne!(a, c);
        // A range across the boundary of pages 0 and 1 takes each page's own bytes.
        let mut p0 = [0u8; PAGE];
        page_pattern(0, 0, &mut p0);
        let r = range_pattern(PAGE as u64 - 4, 8, |_| 0);
        assert_eq!(&r[..4], &p0[PAGE - 4..]);
        assert_eq!(&r[4..], &a[..4]);
    }
}
