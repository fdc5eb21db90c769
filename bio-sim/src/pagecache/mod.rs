//! The page cache of a block device in the simulation (issue 12): a discrete-event
//! [driver](driver) running 1 MiB `preadv2()`/`pwritev2()`, with or without `RWF_DONTCACHE`,
//! through bio-core's `mm` (mm/filemap.c, mm/vmscan.c, mm/readahead.c, fs/iomap, fs/buffer.c,
//! block/fops.c) over an [NVMe-like device](nvme_device), on the deterministic runtime, priced by
//! [per-page costs](crate::perf::dontcache_costs); the [seed's experiment](seed_bench) on it; the
//! [oracle's checks](dropbehind_oracle) on its runs; the same page cache on the
//! [threaded runtime](threaded) over null_blk, with real copies in real time.

pub mod cpu_time;
pub mod driver;
pub mod dropbehind_oracle;
pub mod nomerge_bench;
pub mod nvme_device;
pub mod seed_bench;
pub mod seed_machine;
pub mod seed_presets;
pub mod seed_table;
pub mod threaded;
pub mod threaded_seed_bench;
pub mod workload_pattern;
