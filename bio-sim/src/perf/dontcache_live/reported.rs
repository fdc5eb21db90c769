//! The seed's read experiment from memory the host took back: on a VM guest with free page
//! reporting (mm/page_reporting.c under a virtio-balloon with `VIRTIO_BALLOON_F_REPORTING`, as
//! this machine is), a page the guest allocates from free memory it reported faults on the host
//! when first touched. Buffered reads fill the free memory, so each of their folios takes a
//! reported page; DONTCACHE reads drop each folio after its copy and allocate the same pages
//! again before the reporting worker (`2 * HZ` after a free) can hand them over. The seed's
//! normal reads moved about 16.4 GB on a VM of about 22 GB in their 14 s: a run that may never
//! have left this phase (the cover letter says neither how much was free nor whether it reported).
//!
//! The file is sparse, never written: its reads are zeroed folios, so the disk plays no part and
//! the legs differ only in where their pages come from. No memory cgroup: the limit is the
//! machine's free memory, which must exceed what a normal leg reads.

use super::memcg::{run_in_child, Job, JobOp, Stop};
use super::seed::{dontcache_file, Leg, SeedRun};
use crate::dev::backing::{BackingFile, RwFlags};
use std::path::Path;
use std::time::Duration;

/// The range read: larger than a normal leg reads in its seconds on this machine (about
/// 0.5 GB/s from reported memory), so it never rereads cached pages.
pub const REPORTED_RANGE: u64 = 8 << 30;

/// How long each leg's dropped pages stay free before it starts: the worker's
/// `PAGE_REPORTING_DELAY` (2 s), then passes of about a sixteenth of the free list each 2 s.
pub const REPORTED_WAIT: Duration = Duration::from_secs(12);

/// One reported-memory read experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportedReads {
    /// How this guest reports (`/sys/module/page_reporting/parameters/page_reporting_order`
    /// and the balloon's feature bit), or that it does not.
    pub reporting: String,
    /// Seconds the pages stayed free before each leg.
    pub wait_secs: u64,
    /// The two legs (`limit` 0: no memory cgroup).
    pub run: SeedRun,
}

/// `VIRTIO_BALLOON_F_REPORTING`: bit 5 of a balloon's features.
const VIRTIO_BALLOON_F_REPORTING: usize = 5;

/// Whether and how this guest reports its free pages.
pub fn reporting_state() -> String {
    let order =
        std::fs::read_to_string("/sys/module/page_reporting/parameters/page_reporting_order")
            .ok()
            .map(|s| s.trim().to_owned());
    let balloon = std::fs::read_dir("/sys/bus/virtio/drivers/virtio_balloon")
        .ok()
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("features")).ok())
        .any(|f| f.as_bytes().get(VIRTIO_BALLOON_F_REPORTING) == Some(&b'1'));
    match (balloon, order) {
        (true, Some(o)) => {
            format!("virtio_balloon with VIRTIO_BALLOON_F_REPORTING, page_reporting_order {o}")
        }
        (false, Some(o)) => {
            format!("CONFIG_PAGE_REPORTING (order {o}) but no reporting balloon found")
        }
        (_, None) => "none found (no /sys/module/page_reporting)".into(),
    }
}

fn mem_free() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("MemFree:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb << 10)
}

fn leg(file: &BackingFile, flags: RwFlags, seconds: u32) -> Result<Leg, String> {
    let drop = || {
        file.drop_cache()
            .map_err(|e| format!("drop the cache of {}: {e}", file.path().display()))
    };
    drop()?;
    std::thread::sleep(REPORTED_WAIT);
    let raw = std::fs::File::open(file.path())
        .map_err(|e| format!("open {}: {e}", file.path().display()))?;
    let r = run_in_child(
        None,
        &raw,
        Job {
            op: JobOp::Read,
            flags,
            range: REPORTED_RANGE,
            stop: Stop::Seconds(seconds),
        },
    )?;
    let cached_after = file
        .cachestat(0, REPORTED_RANGE)
        .map_err(|e| format!("cachestat: {e}"))?
        .nr_cache;
    drop()?;
    // No cgroup: no peak measured and no limit to hit (both 0, not printed).
    Ok(Leg::of_job(&r, 0, 0, cached_after))
}

/// Runs the experiment on a sparse file in `dir` (`fs` names its file system): a normal leg,
/// then a DONTCACHE one, `seconds` each, each after its pages stayed free [`REPORTED_WAIT`].
/// Refused (a reason) when the machine's free memory is below the range.
pub fn reported_reads(dir: &Path, fs: &str, seconds: u32) -> Result<ReportedReads, String> {
    let free = mem_free().ok_or("no MemFree in /proc/meminfo")?;
    if free < REPORTED_RANGE + (1 << 30) {
        return Err(format!(
            "{} MiB free, the {} MiB range and 1 GiB to spare needed (normal reads must not meet \
             reclaim)",
            free >> 20,
            REPORTED_RANGE >> 20
        ));
    }
    // Sparse: no block is allocated, so the disk is not filled.
    let (tmp, file) = dontcache_file(dir, "biosim-dontcache-reported", REPORTED_RANGE, fs)?;
    let normal = leg(&file, RwFlags::empty(), seconds)?;
    let dontcache = leg(&file, RwFlags::DONTCACHE, seconds)?;
    drop(file);
    drop(tmp);
    Ok(ReportedReads {
        reporting: reporting_state(),
        wait_secs: REPORTED_WAIT.as_secs(),
        run: SeedRun {
            fs: fs.into(),
            op: "reads".into(),
            limit: 0,
            range: REPORTED_RANGE,
            normal,
            dontcache,
        },
    })
}
