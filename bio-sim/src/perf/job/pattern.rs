//! Where each clone's next I/O goes and what it is, as fio's `rw=` says (HOWTO "I/O type"):
//! sequential offsets wrap around the region; random offsets visit every block once per pass in
//! an order drawn from `randseed` and the clone's number (fio's default random map: no block
//! repeats until every block was used), and `randrw` draws each I/O's direction with
//! `rwmixread` percent reads.

use crate::fio::job::{JobSpec, RwPattern};

/// One clone's offset and direction stream.
#[derive(Debug, Clone)]
pub struct Pattern {
    rw: RwPattern,
    rwmixread: u8,
    bs: u64,
    blocks: u64,
    /// The permutation's domain: the next power of two at or above `blocks`.
    mask: u64,
    bits: u32,
    key: [u64; 3],
    /// Position in the current pass.
    i: u64,
    /// This clone's blocks are `first + k * stride` (all blocks: 0 and 1).
    first: u64,
    stride: u64,
    /// The mix's generator (randrw's direction).
    rng: u64,
}

impl Pattern {
    /// Clone `clone`'s stream for `job` over `blocks` blocks of `job.bs`.
    pub fn new(job: &JobSpec, clone: u32, blocks: u64) -> Pattern {
        Self::strided(job, clone, blocks, 0, 1)
    }

    /// Clone `clone`'s stream over blocks `first, first + stride, ...` below `total` (a verify
    /// job's clones write disjoint blocks, so no two writes to one block are ever in flight:
    /// fio's `serialize_overlap`).
    pub fn strided(job: &JobSpec, clone: u32, total: u64, first: u64, stride: u64) -> Pattern {
        let stride = stride.max(1);
        let blocks = total.saturating_sub(first).div_ceil(stride).max(1);
        let bits = 64 - (blocks - 1).leading_zeros();
        let mask = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let mut s = job.randseed ^ (u64::from(clone) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut next = || {
            s = splitmix(s);
            s
        };
        let key = [next() | 1, next(), next() | 1];
        Pattern {
            rw: job.rw,
            rwmixread: job.rwmixread,
            bs: u64::from(job.bs),
            blocks,
            mask,
            bits: bits.max(1),
            key,
            i: 0,
            first,
            stride,
            rng: next(),
        }
    }

    /// The next I/O: `(write, byte offset)`.
    pub fn next_io(&mut self) -> (bool, u64) {
        let block = if self.rw.is_random() {
            self.permuted()
        } else {
            self.i % self.blocks
        };
        self.i = (self.i + 1) % self.blocks;
        let write = match self.rw {
            RwPattern::Read | RwPattern::RandRead => false,
            RwPattern::Write | RwPattern::RandWrite => true,
            RwPattern::RandRw => {
                self.rng = splitmix(self.rng);
                (self.rng % 100) >= u64::from(self.rwmixread)
            }
        };
        (write, (self.first + block * self.stride) * self.bs)
    }

    /// Blocks this stream visits.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Block `self.i` of this pass's permutation: a bijection on `bits` bits (odd multiplies,
    /// xor-shifts and a key add, each invertible modulo a power of two), walked until it lands
    /// inside the region (cycle walking keeps it a bijection on `0..blocks`).
    fn permuted(&self) -> u64 {
        let half = (self.bits / 2).max(1);
        let mut x = self.i;
        loop {
            x = x.wrapping_mul(self.key[0]) & self.mask;
            x ^= x >> half;
            x = x.wrapping_add(self.key[1]) & self.mask;
            x = x.wrapping_mul(self.key[2]) & self.mask;
            x ^= x >> half;
            if x < self.blocks {
                return x;
            }
        }
    }
}

/// splitmix64's step: a cheap, well-mixed 64-bit generator.
fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(rw: RwPattern) -> JobSpec {
        let mut j = JobSpec::with_defaults("t", 1);
        j.rw = rw;
        j.size = 1000 * 4096;
        j
    }

    #[test]
    fn random_offsets_visit_every_block_once_per_pass_and_clones_differ() {
        for blocks in [1u64, 2, 3, 1000, 1024, 1025] {
            let mut p = Pattern::new(&job(RwPattern::RandRead), 0, blocks);
            let mut seen: Vec<u64> = (0..blocks).map(|_| p.next_io().1 / 4096).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..blocks).collect::<Vec<_>>(), "{blocks} blocks");
        }
        let a: Vec<_> = {
            let mut p = Pattern::new(&job(RwPattern::RandWrite), 0, 1000);
            (0..50).map(|_| p.next_io()).collect()
        };
        let b: Vec<_> = {
            let mut p = Pattern::new(&job(RwPattern::RandWrite), 1, 1000);
            (0..50).map(|_| p.next_io()).collect()
        };
        assert_ne!(a, b, "clones draw their own order");
        assert!(a.iter().all(|&(w, _)| w), "randwrite only writes");
        let mut seq = Pattern::new(&job(RwPattern::Read), 0, 3);
        let offs: Vec<_> = (0..4).map(|_| seq.next_io()).collect();
        assert_eq!(
            offs,
            vec![(false, 0), (false, 4096), (false, 8192), (false, 0)]
        );
        let mut odd = Pattern::strided(&job(RwPattern::RandWrite), 1, 7, 1, 2);
        let mut got: Vec<u64> = (0..3).map(|_| odd.next_io().1 / 4096).collect();
        got.sort_unstable();
        assert_eq!(got, vec![1, 3, 5], "clone 1 of 2 over 7 blocks");
    }

    #[test]
    fn randrw_reads_about_rwmixread_percent() {
        let mut j = job(RwPattern::RandRw);
        j.rwmixread = 70;
        let mut p = Pattern::new(&j, 0, 1000);
        let reads = (0..10_000).filter(|_| !p.next_io().0).count();
        assert!((6_500..7_500).contains(&reads), "{reads} reads of 10000");
    }
}
