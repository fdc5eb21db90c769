//! The seed's experiment on a real file of this machine's kernel (the cover letter of the
//! RWF_DONTCACHE series, seed `000_5a1b29d76b8057ac`): writes in a small memory cgroup
//! (`memory.limit_in_bytes`, cgroup v1) over a range 4x the limit, and reads of a range 2x the
//! limit from a cold cache, each buffered and with `RWF_DONTCACHE`, in per-second MB/s, with the
//! system CPU time per page (which a shared, noisy disk does not distort the way it does MB/s).
//!
//! Each leg runs in a fresh child cgroup (so its `memory.max_usage_in_bytes` is the leg's own
//! peak) in a child process of biosim ([`super::memcg`]). The file exists and is written through
//! before the first leg, so every write is an overwrite of allocated blocks, as on the seed's
//! block device; its cache is dropped (`POSIX_FADV_DONTNEED`) before each leg.

use super::memcg::{run_in_child, Job, JobOp, JobResult, Memcg, Stop};
use super::reclaim_throttle::{self, LegTrace};
use crate::calibrate::tracefs::Tracefs;
use crate::dev::aligned::AlignedBuf;
use crate::dev::backing::{BackingFile, OpenOptions, RwFlags};
use crate::dev::cleanup::TempFile;
use std::path::Path;

/// One leg (normal or DONTCACHE) of a seed experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct Leg {
    /// MB/s (10^6 bytes) in each whole second.
    pub per_sec: Vec<f64>,
    /// Pages (4 KiB) moved in total.
    pub pages: u64,
    /// System CPU time per page moved, ns (the child's `ru_stime`; for writes it includes the
    /// final `fdatasync()`).
    pub sys_ns_per_page: f64,
    /// Peak charge of the leg's cgroup (`memory.max_usage_in_bytes`), bytes.
    pub peak_bytes: u64,
    /// How often a charge hit the limit (`memory.failcnt`).
    pub failcnt: u64,
    /// Pages of the file still cached when the leg ended (`cachestat(2)`).
    pub cached_after: u64,
    /// What the writer waited for (traced write legs: root with tracefs; `None` otherwise and
    /// in recordings made before it was traced).
    pub trace: Option<LegTrace>,
}

impl Leg {
    /// The leg a child's job measured, with its cgroup's peak and limit hits and what stayed
    /// cached.
    pub(super) fn of_job(r: &JobResult, peak_bytes: u64, failcnt: u64, cached_after: u64) -> Leg {
        let pages = r.bytes / 4096;
        Leg {
            per_sec: r.per_sec.iter().map(|&b| b as f64 / 1e6).collect(),
            pages,
            sys_ns_per_page: if pages > 0 {
                r.stime_ns as f64 / pages as f64
            } else {
                0.0
            },
            peak_bytes,
            failcnt,
            cached_after,
            trace: None,
        }
    }

    /// The mean of the per-second MB/s.
    pub fn avg(&self) -> f64 {
        if self.per_sec.is_empty() {
            0.0
        } else {
            self.per_sec.iter().sum::<f64>() / self.per_sec.len() as f64
        }
    }
}

/// One seed experiment: writes or reads, normal and DONTCACHE.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedRun {
    /// `ext4` or `xfs`.
    pub fs: String,
    /// `writes` or `reads`.
    pub op: String,
    /// The cgroup's limit, bytes.
    pub limit: u64,
    /// The range written or read, bytes.
    pub range: u64,
    /// Buffered.
    pub normal: Leg,
    /// `RWF_DONTCACHE`.
    pub dontcache: Leg,
}

impl SeedRun {
    /// DONTCACHE's average over normal's.
    pub fn ratio(&self) -> f64 {
        let n = self.normal.avg();
        if n > 0.0 {
            self.dontcache.avg() / n
        } else {
            0.0
        }
    }
}

/// `(major, minor)` of the device `path`'s file system is on.
fn device_of(path: &Path) -> Result<(u32, u32), String> {
    use std::os::unix::fs::MetadataExt as _;
    let dev = std::fs::metadata(path)
        .map_err(|e| format!("stat {}: {e}", path.display()))?
        .dev();
    Ok((libc::major(dev), libc::minor(dev)))
}

fn leg(
    file: &BackingFile,
    op: JobOp,
    flags: RwFlags,
    limit: u64,
    range: u64,
    seconds: u32,
    trace: Option<&Tracefs>,
) -> Result<Leg, String> {
    file.drop_cache()
        .map_err(|e| format!("drop the cache of {}: {e}", file.path().display()))?;
    let cg = Memcg::create(limit)?;
    let raw = std::fs::File::options()
        .read(true)
        .write(true)
        .open(file.path())
        .map_err(|e| format!("open {}: {e}", file.path().display()))?;
    let job = || {
        run_in_child(
            Some(&cg),
            &raw,
            Job {
                op,
                flags,
                range,
                stop: Stop::Seconds(seconds),
            },
        )
    };
    // Only writes are traced: their writer is what reclaim throttles.
    let (r, traced): (JobResult, Option<LegTrace>) = match trace {
        Some(t) if op == JobOp::Write => {
            let dev = device_of(file.path())?;
            let (r, lt) = reclaim_throttle::traced(t, dev, job, |r: &JobResult| r.pid)?;
            (r, Some(lt))
        }
        _ => (job()?, None),
    };
    let cached_after = file
        .cachestat(0, range)
        .map_err(|e| format!("cachestat: {e}"))?
        .nr_cache;
    let peak_bytes = cg.max_usage()?;
    let failcnt = cg.failcnt()?;
    // Free the leg's pages before the cgroup goes, so no offline memcg lingers holding them.
    file.drop_cache()
        .map_err(|e| format!("drop the cache of {}: {e}", file.path().display()))?;
    drop(cg);
    Ok(Leg {
        trace: traced,
        ..Leg::of_job(&r, peak_bytes, failcnt, cached_after)
    })
}

/// A buffered scratch file of `size` bytes in `dir`, sparse (`ftruncate()`: no block allocated),
/// removed on drop, error and signal; refused if its file system (`fs`) refuses `RWF_DONTCACHE`.
pub(super) fn dontcache_file(
    dir: &Path,
    prefix: &str,
    size: u64,
    fs: &str,
) -> Result<(TempFile, BackingFile), String> {
    let tmp = TempFile::create_in(dir, prefix).map_err(|e| e.to_string())?;
    let file = BackingFile::open(
        tmp.path(),
        &OpenOptions {
            direct: false,
            read_only: false,
            create_size: Some(size),
        },
    )
    .map_err(|e| e.to_string())?;
    if !file.supports_dontcache() {
        return Err(format!(
            "{}: RWF_DONTCACHE refused on {fs}",
            tmp.path().display()
        ));
    }
    Ok((tmp, file))
}

/// Runs the write experiment (range 4x `limit`) and the read experiment (range 2x `limit`) on a
/// file in `dir` (`fs` names its file system), `seconds` per leg; with a tracing session, the
/// write legs are traced ([`reclaim_throttle`]).
pub fn seed_runs(
    dir: &Path,
    fs: &str,
    limit: u64,
    seconds: u32,
    trace: Option<&Tracefs>,
) -> Result<Vec<SeedRun>, String> {
    let wrange = 4 * limit;
    crate::dev::space::ensure_fits(dir, wrange, "seed experiment file")?;
    let (tmp, file) = dontcache_file(dir, "biosim-dontcache-seed", wrange, fs)?;
    // Allocate and write every block once, so the legs overwrite (as on a block device).
    let mut chunk = AlignedBuf::new(1 << 20);
    chunk.fill(0xa5);
    let mut off = 0;
    while off < wrange {
        file.write_all_at(&chunk, off, RwFlags::empty())
            .map_err(|e| format!("fill {}: {e}", tmp.path().display()))?;
        off += chunk.len() as u64;
    }
    let mut runs = Vec::new();
    for (op, name, range) in [
        (JobOp::Write, "writes", wrange),
        (JobOp::Read, "reads", 2 * limit),
    ] {
        let normal = leg(&file, op, RwFlags::empty(), limit, range, seconds, trace)?;
        let dontcache = leg(&file, op, RwFlags::DONTCACHE, limit, range, seconds, trace)?;
        runs.push(SeedRun {
            fs: fs.into(),
            op: name.into(),
            limit,
            range,
            normal,
            dontcache,
        });
    }
    drop(file);
    drop(tmp);
    Ok(runs)
}
