//! `biosim bench dontcache`: buffered writes with and without `RWF_DONTCACHE`
//! (kernel-semantics.md §6.3) on this machine's filesystem: throughput and what `cachestat(2)`
//! says is left in the page cache after `fdatasync()`, as medians of interleaved rounds.
//! `--live` runs it on ext4 and on a scratch XFS beside the block device and the seed's
//! experiment ([`super::dontcache_live`]); `--calibrate` measures the page cache's per-page costs
//! ([`super::dontcache_costs`]).

use super::bench_common::{io_err, BenchError};
use super::stats::median;
use crate::dev::aligned::AlignedBuf;
use crate::dev::backing::{BackingFile, RwFlags};
use crate::dev::cleanup::TempFile;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The DONTCACHE benchmark's parameters.
#[derive(Debug, Clone)]
pub struct DontcacheConfig {
    /// Where to create the file.
    pub dir: PathBuf,
    /// Bytes written per run.
    pub size: u64,
    /// Rounds (each writes plain and DONTCACHE once, interleaved).
    pub rounds: usize,
}

impl Default for DontcacheConfig {
    fn default() -> Self {
        DontcacheConfig {
            dir: std::env::temp_dir(),
            size: 256 << 20,
            rounds: 3,
        }
    }
}

/// One row's results.
#[derive(Debug, Clone)]
pub struct DontcacheResult {
    /// `buffered` or `dontcache`.
    pub mode: &'static str,
    /// Whether the blocks were holes before the write (allocating writes) or written before
    /// (overwrites).
    pub fresh: bool,
    /// MB/s (write + fdatasync) per round.
    pub mbps: Vec<f64>,
    /// Pages of the file still cached after fdatasync, per round.
    pub cached_pages: Vec<u64>,
    /// Pages cached just before the timed write (after dropping the cache): should be 0, so the
    /// figure after it is the write's own doing.
    pub cached_before: Vec<u64>,
}

/// The DONTCACHE benchmark's report.
#[derive(Debug, Clone)]
pub struct DontcacheReport {
    /// The configuration.
    pub config: DontcacheConfig,
    /// Whether `RWF_DONTCACHE` is supported here (else only the buffered rows).
    pub supported: bool,
    /// The rows.
    pub results: Vec<DontcacheResult>,
}

impl DontcacheReport {
    /// The median of cached pages of a row.
    pub fn cached(&self, mode: &str, fresh: bool) -> Option<f64> {
        self.results
            .iter()
            .find(|r| r.mode == mode && r.fresh == fresh)
            .map(|r| median(&r.cached_pages.iter().map(|&p| p as f64).collect::<Vec<_>>()))
    }
}

impl fmt::Display for DontcacheReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "buffered writes of {} MiB in 1 MiB pwritev2() calls + fdatasync() in {}, {} rounds, medians (RWF_DONTCACHE supported: {})",
            c.size >> 20,
            c.dir.display(),
            c.rounds,
            self.supported
        )?;
        writeln!(
            f,
            "  {:<10} {:<10} {:>9} {:>9} {:>14} {:>7} {:>8}",
            "mode", "blocks", "MB/s", "vs buf", "cached pages", "of", "before"
        )?;
        for r in &self.results {
            let base = self
                .results
                .iter()
                .find(|b| b.mode == "buffered" && b.fresh == r.fresh)
                .map_or(0.0, |b| median(&b.mbps));
            let cached = median(&r.cached_pages.iter().map(|&p| p as f64).collect::<Vec<_>>());
            let before = r.cached_before.iter().max().copied().unwrap_or(0);
            writeln!(
                f,
                "  {:<10} {:<10} {:>9.0} {:>9.2} {:>14.0} {:>7} {:>8}",
                r.mode,
                if r.fresh { "holes" } else { "overwrite" },
                median(&r.mbps),
                if base > 0.0 {
                    median(&r.mbps) / base
                } else {
                    0.0
                },
                cached,
                c.size.div_ceil(4096),
                before
            )?;
        }
        Ok(())
    }
}

/// The rows measured: buffered (and, where supported, DONTCACHE) writes, each over written
/// blocks and over holes, with the write flags of each.
fn dontcache_rows(supported: bool) -> Vec<(DontcacheResult, RwFlags)> {
    let mut rows: Vec<(DontcacheResult, RwFlags)> = Vec::new();
    for fresh in [false, true] {
        rows.push((DontcacheResult::empty("buffered", fresh), RwFlags::empty()));
        if supported {
            rows.push((
                DontcacheResult::empty("dontcache", fresh),
                RwFlags::DONTCACHE,
            ));
        }
    }
    rows
}

impl DontcacheResult {
    /// A row of `mode` with no rounds yet.
    fn empty(mode: &'static str, fresh: bool) -> Self {
        DontcacheResult {
            mode,
            fresh,
            mbps: Vec::new(),
            cached_pages: Vec::new(),
            cached_before: Vec::new(),
        }
    }
}

/// A sparse scratch file of `size` bytes in `dir`, opened buffered: a [`TempFile`], so it is
/// removed on an error, a panic and on Ctrl-C too; refused before it exists if it does not fit
/// ([`crate::dev::space::scratch_file`]). `dir` must be a directory (`--dir`).
pub(crate) fn scratch_file(
    dir: &Path,
    name: &str,
    size: u64,
) -> Result<(TempFile, BackingFile), BenchError> {
    Ok(crate::dev::space::scratch_file(dir, name, size, false)?)
}

/// Runs the DONTCACHE benchmark: for blocks that are holes (allocating writes) and for blocks
/// written before (overwrites), a buffered and a `RWF_DONTCACHE` write of the whole size, each
/// followed by `fdatasync()` and `cachestat()`, starting from a dropped cache; rounds interleave.
pub fn dontcache_bench(cfg: &DontcacheConfig) -> Result<DontcacheReport, BenchError> {
    if cfg.rounds == 0 || cfg.size < (1 << 20) {
        return Err(BenchError::Param(
            "rounds must be at least 1 and the size at least 1 MiB".into(),
        ));
    }
    crate::dev::space::ensure_block_multiple(cfg.size, 4096, "--size", &cfg.size.to_string())
        .map_err(BenchError::Param)?;
    let (tmp, file) = scratch_file(&cfg.dir, "biosim-dontcache-bench", cfg.size)?;
    let path = tmp.path().to_owned();
    let supported = file.supports_dontcache();
    let mut rows = dontcache_rows(supported);
    // Page-aligned, as an application's buffer is (a misaligned one slows the kernel's copy).
    let mut chunk = AlignedBuf::new(1 << 20);
    chunk.fill(0x3c);
    let write_all = |flags: RwFlags| -> Result<(), BenchError> {
        let mut off = 0;
        while off < cfg.size {
            let n = (cfg.size - off).min(chunk.len() as u64) as usize;
            file.write_all_at(&chunk[..n], off, flags)
                .map_err(io_err("writing", &path))?;
            off += n as u64;
        }
        Ok(())
    };
    for _ in 0..cfg.rounds {
        for (r, flags) in rows.iter_mut() {
            if r.fresh {
                file.punch_hole(0, cfg.size)
                    .map_err(io_err("punching holes", &path))?;
            } else {
                write_all(RwFlags::empty())?; // the blocks exist and hold data
            }
            file.drop_cache()
                .map_err(io_err("dropping the cache", &path))?;
            let t0 = Instant::now();
            write_all(*flags)?;
            file.sync_data().map_err(io_err("fdatasync", &path))?;
            let secs = t0.elapsed().as_secs_f64();
            r.mbps.push(cfg.size as f64 / 1e6 / secs);
            let st = file
                .cachestat(0, cfg.size)
                .map_err(io_err("cachestat", &path))?;
            r.cached_pages.push(st.nr_cache);
        }
    }
    Ok(DontcacheReport {
        config: cfg.clone(),
        supported,
        results: rows.into_iter().map(|(r, _)| r).collect(),
    })
}
