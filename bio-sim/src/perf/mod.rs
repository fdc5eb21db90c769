//! Measurements of the completion paths and benchmarks on real files.
//!
//! - [`rig`]: the threaded measurement machine the deferral and latency measurements share.
//! - [`deferral`]: deferral throughput of the batcher against direct and channel completion.
//! - [`latency`]: completion latency and worker wake-ups per bio of one batcher variant.
//! - [`job`]: `biosim bench JOBFILE`: fio job files on the simulated devices beside raw I/O and
//!   the kernel's own loop device, with CPU per I/O, latency percentiles and verify.
//! - [`loop_bench`]: `biosim bench loop`: the loop model over a real `O_DIRECT` file against raw I/O.
//! - [`null_blk_bench`]: `biosim bench null-blk`: null_blk through the whole stack, direct and deferred.
//! - [`dontcache`]: `biosim bench dontcache`: buffered writes with and without `RWF_DONTCACHE`.
//! - [`dontcache_live`]: `bench dontcache --live`: the block device, ext4 and XFS, and the seed's
//!   experiment under a cgroup v1 memory limit, on the running kernel; recordings and replay.
//! - [`dontcache_costs`]: `bench dontcache --calibrate`: the page cache's per-page costs.
//! - [`explore_bench`]: `biosim bench explore`: `biosim explore`'s cases per second on one and two
//!   threads, time to find and shrink finding 1, the long clean campaigns.
//! - [`bench_common`]: the real-file benches' error, size parsing and scratch-file cleanup.
//! - [`sim_submit`]: what the benches driving a simulated device share: the runtime, the loop
//!   device, the reports that void a run, a submitter's window of bios in flight.
//! - [`stats`]: median, percentile, ratio and human-readable durations.

pub mod bench_common;
pub mod deferral;
pub mod dontcache;
pub mod dontcache_costs;
pub mod dontcache_live;
pub mod explore_bench;
pub mod job;
pub mod latency;
pub mod loop_bench;
pub mod null_blk_bench;
pub mod rig;
pub mod sim_submit;
pub mod stats;
