//! The seed's two experiments (`[PATCH v6 0/4]`'s cover letter), scaled to a simulation:
//!
//! - **seed-reads**: "Reads were tested on the root partition with a 45GB range (~2x RAM)": 1 MiB
//!   preads sequentially over a range twice the cache limit, so the cache is full after the first
//!   half and every further folio is either reclaimed (normal) or invalidated after its copy
//!   (DONTCACHE).
//! - **seed-writes**: "Writes were tested on a disabled swap partition (~1GB) in a memcg of size
//!   244MB": 1 MiB pwrites sequentially over a range about four times the memcg limit, wrapping,
//!   so normal writes fill the limit with dirty folios, then reclaim marks them `PG_reclaim`,
//!   wakes the flusher and waits for its writeback (cgroup v1), while DONTCACHE writes start
//!   writeback as they go.
//!
//! The limits are scaled down from the seed's RAM and memcg so that a simulated second costs a
//! real second or less; the ratios do not depend on the scale once the limit is reached in the
//! first simulated second (they depend on the per-page costs and the device, see
//! docs/performance.md), except where filling the limit costs more than reusing it (free page
//! reporting: the first fill faults in host memory, so the ratio depends on how much of the run
//! it is). The footprint in percent of the limit does depend on the scale: what a design holds
//! for a fixed time (v5's and v6's one-jiffy delayed work) is a fixed number of folios, four
//! times the percentage in `seed-writes`' 61 MiB that it is in the seed's 244 MB, as long as
//! DONTCACHE writes run at the same rate in both. A named machine ([`super::seed_machine`])
//! runs `seed-reads` over a range twice its RAM, as the seed did.

/// What the task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// `preadv2()` of `io_bytes` at a time, sequentially over the range, wrapping.
    Reads,
    /// `pwritev2()` of `io_bytes` at a time, sequentially over the range, wrapping.
    Writes,
}

/// One of the seed's experiments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeedPreset {
    /// `seed-reads` / `seed-writes`.
    pub name: &'static str,
    /// Reads or writes.
    pub workload: Workload,
    /// The cache (memcg) limit in bytes.
    pub limit_bytes: u64,
    /// The range the task goes over, in multiples of the limit.
    pub range_limits: u64,
    /// Bytes per syscall (the seed's 1 MiB).
    pub io_bytes: usize,
    /// Simulated seconds per run (the table's rows).
    pub seconds: u64,
    /// The table's title, as the cover letter's.
    pub title: &'static str,
}

/// `seed-reads`: the range twice the cache limit.
pub const SEED_READS: SeedPreset = SeedPreset {
    name: "seed-reads",
    workload: Workload::Reads,
    limit_bytes: 256 << 20,
    range_limits: 2,
    io_bytes: 1 << 20,
    seconds: 5,
    title: "READS",
};

/// `seed-writes`: the seed's 244 MB memcg over its ~1 GB partition, scaled by 1/4.
pub const SEED_WRITES: SeedPreset = SeedPreset {
    name: "seed-writes",
    workload: Workload::Writes,
    limit_bytes: 61 << 20,
    range_limits: 4,
    io_bytes: 1 << 20,
    seconds: 5,
    title: "WRITES",
};

/// `nomerge`: not the seed's; rounds that make iomap merge regular folios into a dropbehind
/// folio's bio ([`super::nomerge_bench`]), with 32 KiB writes over four times `seed-writes`'
/// limit, to measure what patch 2/4's removal of `IOMAP_IOEND_DONTCACHE` from the NOMERGE
/// flags costs.
pub const NOMERGE: SeedPreset = SeedPreset {
    name: "nomerge",
    workload: Workload::Writes,
    limit_bytes: 61 << 20,
    range_limits: 4,
    io_bytes: 32 << 10,
    seconds: 5,
    title: "NOMERGE",
};

/// Every preset.
pub const PRESETS: [SeedPreset; 3] = [SEED_READS, SEED_WRITES, NOMERGE];

impl SeedPreset {
    /// The preset called `name`, or an error naming the known ones.
    pub fn by_name(name: &str) -> Result<SeedPreset, String> {
        PRESETS
            .iter()
            .find(|p| p.name == name)
            .copied()
            .ok_or_else(|| {
                format!(
                    "unknown preset '{name}' (known: {})",
                    PRESETS.map(|p| p.name).join(", ")
                )
            })
    }

    /// The range in bytes.
    pub fn range_bytes(&self) -> u64 {
        self.limit_bytes * self.range_limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_by_name() {
        assert_eq!(SeedPreset::by_name("seed-reads").unwrap(), SEED_READS);
        assert_eq!(SEED_READS.range_bytes(), 2 * SEED_READS.limit_bytes);
        let e = SeedPreset::by_name("seed-x").unwrap_err();
        assert!(e.contains("seed-reads, seed-writes, nomerge"), "{e}");
    }
}
