//! `biosim bench dontcache --live`: `RWF_DONTCACHE` (mm/filemap.c, include/linux/fs.h
//! `kiocb_set_rw_flags()`) on the running kernel, side by side with what the simulation of 6.18's
//! code leaves ([`simulated_6_18`]):
//!
//! - [`bdev`]: a loop device opened buffered (block/fops.c `def_blk_fops`): refused without
//!   patch 4/4's `FOP_DONTCACHE`.
//! - ext4 (the `--dir` file system) and a scratch [`xfs`] on a loop device: DONTCACHE writes into
//!   holes and over written blocks, pages left cached after `fdatasync()` (`cachestat(2)`).
//! - [`seed`]: the seed's write and read experiments under a cgroup v1 memory limit ([`memcg`]).
//! - [`reported`]: reads of a sparse file from memory the host took back (free page reporting).
//! - the live tracepoint formats of [`FORMAT_EVENTS`] (filemap's, `writeback_dirty_folio`,
//!   `balance_dirty_pages`, `mm_vmscan_throttled`), read (not enabled) from tracefs.
//!
//! A run is a [`LiveReport`]; [`LiveReport::to_json`] / [`LiveReport::from_json`] make and read the
//! committed recording (`tests/recordings/dontcache-live-6.18.json`), and `--replay FILE` prints a
//! recording exactly as the live run printed it. Parts that need root print a one-line skip.

pub mod bdev;
pub mod memcg;
pub mod reclaim_throttle;
pub mod reported;
pub mod seed;
pub mod xfs;

use super::bench_common::BenchError;
use super::dontcache::{dontcache_bench, DontcacheConfig, DontcacheReport};
use bdev::{errno_name, parse_errno, BdevProbe};
use bio_core::mm::dontcache::{DontcacheDesign, WritebackPath};
use bio_core::mm::filemap::{IocbFlags, PAGE_SIZE};
use bio_core::mm::testing::Rig;
use reclaim_throttle::{DiskBusy, Interrupts, LegTrace};
use reported::ReportedReads;
use seed::{Leg, SeedRun};
use serde_json::{json, Value};
use std::fmt;
use std::path::{Path, PathBuf};

/// The tracepoints whose live formats a run reads: `(system, event)`.
pub const FORMAT_EVENTS: [(&str, &str); 5] = [
    ("filemap", "mm_filemap_add_to_page_cache"),
    ("filemap", "mm_filemap_delete_from_page_cache"),
    ("writeback", "writeback_dirty_folio"),
    ("writeback", "balance_dirty_pages"),
    ("vmscan", "mm_vmscan_throttled"),
];

/// `--live`'s parameters.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// The ext4 (or other) directory of the real-file rows and the backing files.
    pub dir: PathBuf,
    /// Bytes written per file-system row.
    pub size: u64,
    /// Rounds of the file-system rows.
    pub rounds: usize,
    /// The cgroup's memory limit of the seed experiment.
    pub limit: u64,
    /// Seconds per seed-experiment leg.
    pub seconds: u32,
}

/// One part of a live run: done, or skipped with a one-line reason.
#[derive(Debug, Clone, PartialEq)]
pub enum Part<T> {
    /// Measured.
    Done(T),
    /// Not measured, and why.
    Skipped(String),
}

/// One file system's holes/overwrite rows.
#[derive(Debug, Clone, PartialEq)]
pub struct FsRows {
    /// `ext4`, `xfs`.
    pub fs: String,
    /// Where it ran (the directory, or the loop device for the scratch XFS).
    pub on: String,
    /// Pages per write.
    pub pages: u64,
    /// `(mode, holes, MB/s median, cached pages median)`.
    pub rows: Vec<FsRow>,
}

/// A row of [`FsRows`].
#[derive(Debug, Clone, PartialEq)]
pub struct FsRow {
    /// `buffered` or `dontcache`.
    pub mode: String,
    /// Holes (allocating writes) or overwrites.
    pub holes: bool,
    /// Median MB/s of write + fdatasync.
    pub mbps: f64,
    /// Median pages cached after fdatasync.
    pub cached: u64,
}

/// A live run.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveReport {
    /// `uname -r`.
    pub kernel: String,
    /// CPUs and memory.
    pub machine: String,
    /// The block-device probe.
    pub bdev: Part<BdevProbe>,
    /// ext4, XFS.
    pub fs: Vec<Part<FsRows>>,
    /// The seed experiments.
    pub seed: Vec<Part<SeedRun>>,
    /// The read experiment from memory the host took back ([`reported`]); `None` in a recording
    /// made before it existed.
    pub reported: Option<Part<ReportedReads>>,
}

/// Why 6.18 leaves what it leaves after a write + `fdatasync()`: the completion context of each
/// row, printed beside the live figure and the simulation's.
pub fn why_6_18(fs: &str, mode: &str, holes: bool) -> &'static str {
    match (fs, mode, holes) {
        (_, "buffered", _) => "no dropbehind",
        ("ext4", _, true) => "unwritten-extent conversion worker: folio_end_writeback() in task",
        ("ext4", _, false) => "ext4_end_bio() in IRQ: folio_end_dropbehind() skips (!in_task())",
        ("xfs", _, _) => "IOMAP_IOEND_DONTCACHE -> xfs_end_io() on the xfs-conv workqueue",
        _ => "no model for this file system",
    }
}

/// Pages of a [`SIM_PAGES`]-page file the simulation leaves cached after the live row's
/// workload: bio-core's page cache ([`Rig`]) on the 6.18 design of the file system (`ext4`:
/// `baseline`, whose unwritten-extent ioends complete on the conversion workqueue and the rest in
/// the interrupt; `xfs`: `xfs-wq`, XFS's own `IOMAP_IOEND_DONTCACHE` completion), a write of the
/// whole file in `mode` into holes or over blocks written and dropped before, `fsync()`, the
/// device's completions in hardirq. `None` for a file system the model has no design for.
pub fn simulated_6_18(fs: &str, mode: &str, holes: bool) -> Option<u64> {
    let design = match fs {
        "ext4" => DontcacheDesign::Baseline,
        "xfs" => DontcacheDesign::XfsWorkqueue,
        _ => return None,
    };
    let flags = if mode == "buffered" {
        IocbFlags::NONE
    } else {
        IocbFlags::IOCB_DONTCACHE
    };
    // Both file systems set FOP_DONTCACHE themselves; `force_dontcache` stands for it.
    let rig = Rig::with(design, WritebackPath::Iomap, |c| {
        c.with_nr_pages(SIM_PAGES)
            .with_unwritten()
            .with_force_dontcache()
    });
    let data = vec![0x5a; SIM_PAGES as usize * PAGE_SIZE];
    if !holes {
        rig.pwrite(0, &data, IocbFlags::NONE).ok()?;
        rig.fsync();
        rig.settle();
        rig.drop_caches();
    }
    rig.pwrite(0, &data, flags).ok()?;
    rig.try_fsync().ok()?;
    rig.settle();
    Some(rig.mapping.stats().nr_cached)
}

/// The size of the file [`simulated_6_18`] writes, in pages.
pub const SIM_PAGES: u64 = 64;

/// [`simulated_6_18`] as the table prints it: `none`, `all` or `k/64`.
fn simulated_cell(fs: &str, mode: &str, holes: bool) -> String {
    match simulated_6_18(fs, mode, holes) {
        Some(0) => "none".into(),
        Some(n) if n == SIM_PAGES => "all".into(),
        Some(n) => format!("{n}/{SIM_PAGES}"),
        None => "?".into(),
    }
}

fn fs_rows(fs: &str, on: String, r: &DontcacheReport) -> FsRows {
    FsRows {
        fs: fs.into(),
        on,
        pages: r.config.size.div_ceil(4096),
        rows: r
            .results
            .iter()
            .map(|x| FsRow {
                mode: x.mode.into(),
                holes: x.fresh,
                mbps: super::stats::median(&x.mbps),
                cached: r.cached(x.mode, x.fresh).unwrap_or(0.0) as u64,
            })
            .collect(),
    }
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    format!("{cpus} CPUs, {} MiB RAM", mem / 1024)
}

/// Why the live parts cannot run here (not root), or `None`.
pub fn why_not_root() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    (unsafe { libc::geteuid() } != 0).then(|| "needs root".to_string())
}

/// Runs everything live. Parts that cannot run are [`Part::Skipped`]; a failure of a part that
/// ran is an error (after its cleanup).
pub fn live_run(cfg: &LiveConfig) -> Result<LiveReport, BenchError> {
    if cfg.seconds == 0 || cfg.seconds as usize > memcg::MAX_SECS {
        return Err(BenchError::Param(format!(
            "--seconds {}: must be 1..={}",
            cfg.seconds,
            memcg::MAX_SECS
        )));
    }
    if cfg.limit < (16 << 20) || !cfg.limit.is_multiple_of(1 << 20) {
        return Err(BenchError::Param(format!(
            "--limit {}: must be a whole number of MiB, at least 16M",
            cfg.limit
        )));
    }
    let root = why_not_root();
    let fail = |what: &str| {
        let what = what.to_owned();
        move |e: String| BenchError::Machine(format!("{what}: {e}"))
    };
    // One live session at a time (tracefs, loop devices, cgroups): the tracing session holds the
    // lock the calibrations use, and traces the seed's write legs in its own instance. Without
    // tracefs the run goes on untraced, under the lock alone.
    let live_lock = || {
        crate::calibrate::tracefs::lock_live().map_err(|e| BenchError::Io {
            what: "take the live lock".into(),
            path: crate::calibrate::tracefs::LIVE_LOCK.into(),
            source: e,
        })
    };
    let (session, _lock) = match root {
        None => match crate::calibrate::tracefs::Tracefs::open().map_err(|e| e.to_string()) {
            Ok(mut t) => match reclaim_throttle::prepare(&mut t, cfg.seconds) {
                Ok(()) => (Some(t), None),
                Err(why) => {
                    drop(t);
                    eprintln!("skipped: tracing the seed's write legs: {why}");
                    (None, Some(live_lock()?))
                }
            },
            Err(why) => {
                eprintln!("skipped: tracing the seed's write legs: {why}");
                (None, Some(live_lock()?))
            }
        },
        Some(_) => (None, None),
    };
    let bdev = match &root {
        Some(why) => Part::Skipped(format!("block device: {why} (loop devices)")),
        None => Part::Done(bdev::probe(&cfg.dir).map_err(fail("block device probe"))?),
    };
    let fcfg = |dir: PathBuf| DontcacheConfig {
        dir,
        size: cfg.size,
        rounds: cfg.rounds,
    };
    let ext4 = dontcache_bench(&fcfg(cfg.dir.clone()))?;
    let mut fs = vec![Part::Done(fs_rows(
        "ext4",
        cfg.dir.display().to_string(),
        &ext4,
    ))];
    let mut seed = Vec::new();
    let memcg_ok = memcg::own_memcg();
    match &memcg_ok {
        Ok(_) => {
            for r in seed::seed_runs(&cfg.dir, "ext4", cfg.limit, cfg.seconds, session.as_ref())
                .map_err(fail("seed experiment on ext4"))?
            {
                seed.push(Part::Done(r));
            }
        }
        Err(why) => seed.push(Part::Skipped(format!("seed experiment: {why}"))),
    }
    let reported = Some(
        match reported::reported_reads(&cfg.dir, "ext4", cfg.seconds) {
            Ok(r) => Part::Done(r),
            Err(why) => Part::Skipped(format!("reads from reported memory: {why}")),
        },
    );
    let xfs_ok = root
        .clone()
        .map_or_else(xfs::mkfs_available, |w| Err(format!("{w} (mkfs, mount)")));
    match xfs_ok {
        Ok(()) => {
            // Room for the seed's 4x-limit file and the rows' file, plus the log.
            let bytes = (4 * cfg.limit + cfg.size + (512 << 20)).max(1 << 30);
            let x = xfs::ScratchXfs::create(&cfg.dir, bytes).map_err(fail("scratch XFS"))?;
            let dev = x.device();
            let r = dontcache_bench(&fcfg(x.dir().to_owned()))?;
            fs.push(Part::Done(fs_rows("xfs", format!("{dev} (mkfs.xfs)"), &r)));
            if memcg_ok.is_ok() {
                for r in seed::seed_runs(x.dir(), "xfs", cfg.limit, cfg.seconds, session.as_ref())
                    .map_err(fail("seed experiment on XFS"))?
                {
                    seed.push(Part::Done(r));
                }
            }
            x.finish().map_err(fail("scratch XFS"))?;
        }
        Err(why) => fs.push(Part::Skipped(format!("xfs: {why}"))),
    }
    Ok(LiveReport {
        kernel: kernel_release(),
        machine: machine(),
        bdev,
        fs,
        seed,
        reported,
    })
}

/// Reads the live formats of [`FORMAT_EVENTS`] from tracefs (reading only: nothing is enabled)
/// and writes each to `out/EVENT.format`. Skips (with the reason) when tracefs is not mounted.
pub fn save_formats(out: &Path) -> Result<Vec<PathBuf>, String> {
    let top = Path::new(crate::calibrate::tracefs::TRACEFS).join("events");
    if !top.is_dir() {
        return Err(format!("{} not found (tracefs not mounted)", top.display()));
    }
    std::fs::create_dir_all(out).map_err(|e| format!("mkdir {}: {e}", out.display()))?;
    let mut written = Vec::new();
    for (sys, ev) in FORMAT_EVENTS {
        let src = top.join(sys).join(ev).join("format");
        let Ok(text) = std::fs::read_to_string(&src) else {
            continue; // not in this kernel: nothing to record
        };
        let dst = out.join(format!("{ev}.format"));
        std::fs::write(&dst, text).map_err(|e| format!("write {}: {e}", dst.display()))?;
        written.push(dst);
    }
    Ok(written)
}

// ---------------------------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------------------------

fn mib(b: u64) -> u64 {
    b >> 20
}

fn write_leg_table(f: &mut fmt::Formatter<'_>, r: &SeedRun) -> fmt::Result {
    writeln!(
        f,
        "===== {} ({}, memcg v1 limit {} MiB, range {} MiB) =====",
        r.op.to_uppercase(),
        r.fs,
        mib(r.limit),
        mib(r.range)
    )?;
    write_legs(f, r, true)
}

/// The reads from reported memory: the table, the legs, and how the guest reports.
fn write_reported(f: &mut fmt::Formatter<'_>, r: &ReportedReads) -> fmt::Result {
    writeln!(
        f,
        "===== {} ({} holes, no memcg, range {} MiB, pages free {} s before each leg) =====",
        r.run.op.to_uppercase(),
        r.run.fs,
        mib(r.run.range),
        r.wait_secs
    )?;
    write_legs(f, &r.run, false)?;
    writeln!(f, "  free page reporting: {}", r.reporting)
}

/// The per-second table of `r` and its legs' lines (`memcg`: with the cgroup's peak and
/// limit hits).
fn write_legs(f: &mut fmt::Formatter<'_>, r: &SeedRun, memcg: bool) -> fmt::Result {
    writeln!(f, " sec   normal MB/s  dontcache MB/s")?;
    writeln!(f, "----  ------------  --------------")?;
    let n = r.normal.per_sec.len().max(r.dontcache.per_sec.len());
    let cell = |v: Option<&f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
    for i in 0..n {
        writeln!(
            f,
            "{:>4}  {:>12}  {:>14}",
            i + 1,
            cell(r.normal.per_sec.get(i)),
            cell(r.dontcache.per_sec.get(i))
        )?;
    }
    writeln!(f, "----  ------------  --------------")?;
    let pct = (r.ratio() - 1.0) * 100.0;
    writeln!(
        f,
        " avg  {:>12.1}  {:>14.1}  ({pct:+.0}%, ratio {:.2})",
        r.normal.avg(),
        r.dontcache.avg(),
        r.ratio()
    )?;
    let leg = |l: &Leg| {
        if memcg {
            format!(
                "{:.0} ns sys/page, peak {} MiB, limit hit {}x, {} pages cached after",
                l.sys_ns_per_page,
                mib(l.peak_bytes),
                l.failcnt,
                l.cached_after
            )
        } else {
            format!(
                "{:.0} ns sys/page, {} pages read, {} pages cached after",
                l.sys_ns_per_page, l.pages, l.cached_after
            )
        }
    };
    writeln!(f, "  normal:    {}", leg(&r.normal))?;
    writeln!(f, "  dontcache: {}", leg(&r.dontcache))?;
    for (name, l) in [("normal", &r.normal), ("dontcache", &r.dontcache)] {
        if let Some(t) = &l.trace {
            let secs = l.per_sec.len().max(1);
            let irqs = match &t.interrupts {
                Some(i) => format!(
                    "in {} interrupts of {} (median {:.1} each; {} outside them)",
                    i.count, i.irq, i.median_per_interrupt, i.outside
                ),
                None => "(not a virtio disk: not attributed to interrupts)".into(),
            };
            writeln!(
                f,
                "  {:<10} reclaim_throttle(WRITEBACK) {}x, {:.0} ms asleep ({:.0}% of {secs} s); \
                 {} completions {irqs}",
                format!("{name}:"),
                t.throttled,
                t.throttled_ms,
                t.throttled_ms / 10.0 / secs as f64,
                t.completions,
            )?;
            if let Some(d) = &t.disk {
                writeln!(
                    f,
                    "  {:<10} disk busy {:.0} ms ({:.0}% of {secs} s) for {} MiB in {} requests: \
                     {:.2} GB/s while busy ({} issued before the trace, {} still in flight after it)",
                    "",
                    d.busy_ms,
                    d.busy_ms / 10.0 / secs as f64,
                    d.bytes >> 20,
                    d.requests,
                    d.gbps(),
                    d.unmatched_completions,
                    d.unmatched_issues
                )?;
            }
        }
    }
    let sys = if r.normal.sys_ns_per_page > 0.0 {
        r.dontcache.sys_ns_per_page / r.normal.sys_ns_per_page
    } else {
        0.0
    };
    writeln!(f, "  sys CPU per page, dontcache / normal: {sys:.2}")
}

impl fmt::Display for LiveReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "RWF_DONTCACHE on the live kernel: Linux {} ({})",
            self.kernel, self.machine
        )?;
        match &self.bdev {
            Part::Done(b) => {
                writeln!(
                    f,
                    "block device {} opened buffered (def_blk_fops): plain read {}, DONTCACHE read {}, DONTCACHE write {}",
                    b.dev,
                    errno_name(b.plain_read),
                    errno_name(b.dontcache_read),
                    errno_name(b.dontcache_write)
                )?;
                if b.dontcache_read == Some(libc::EOPNOTSUPP) {
                    writeln!(
                        f,
                        "  no FOP_DONTCACHE in def_blk_fops: kiocb_set_rw_flags() refuses the flag (patch 4/4 adds it)"
                    )?;
                }
            }
            Part::Skipped(why) => writeln!(f, "skipped: {why}")?,
        }
        for p in &self.fs {
            match p {
                Part::Done(fr) => {
                    writeln!(
                        f,
                        "{} on {}: write + fdatasync, pages cached after (of {}), medians",
                        fr.fs, fr.on, fr.pages
                    )?;
                    writeln!(
                        f,
                        "  {:<10} {:<10} {:>7} {:>8}  {:<5} why (6.18)",
                        "mode", "blocks", "MB/s", "cached", "model"
                    )?;
                    for r in &fr.rows {
                        let pred = simulated_cell(&fr.fs, &r.mode, r.holes);
                        let why = why_6_18(&fr.fs, &r.mode, r.holes);
                        writeln!(
                            f,
                            "  {:<10} {:<10} {:>7.0} {:>8}  {:<5} {}",
                            r.mode,
                            if r.holes { "holes" } else { "overwrite" },
                            r.mbps,
                            r.cached,
                            pred,
                            why
                        )?;
                    }
                }
                Part::Skipped(why) => writeln!(f, "skipped: {why}")?,
            }
        }
        for p in &self.seed {
            match p {
                Part::Done(r) => write_leg_table(f, r)?,
                Part::Skipped(why) => writeln!(f, "skipped: {why}")?,
            }
        }
        match &self.reported {
            Some(Part::Done(r)) => write_reported(f, r)?,
            Some(Part::Skipped(why)) => writeln!(f, "skipped: {why}")?,
            None => {}
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The recording
// ---------------------------------------------------------------------------------------------

fn part_json<T>(p: &Part<T>, f: impl Fn(&T) -> Value) -> Value {
    match p {
        Part::Done(t) => f(t),
        Part::Skipped(why) => json!({ "skipped": why }),
    }
}

/// The first key of `input` (an object's key, at any depth; arrays element by element) that
/// `known` does not have at the same place, as a path (`seed[0].normal.trace.disk_busy`).
fn unknown_key(input: &Value, known: &Value, path: &str) -> Option<String> {
    match (input, known) {
        (Value::Object(a), Value::Object(b)) => a.iter().find_map(|(k, v)| {
            let here = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            match b.get(k) {
                None => Some(here),
                Some(w) => unknown_key(v, w, &here),
            }
        }),
        (Value::Array(a), Value::Array(b)) => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (v, w))| unknown_key(v, w, &format!("{path}[{i}]"))),
        _ => None,
    }
}

/// This machine's kernel release (`uname -r`, from `/proc/sys/kernel/osrelease`; `?` if
/// unreadable): what a recording and a saved costs file are labelled with.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map_or_else(|_| "?".into(), |s| s.trim().to_owned())
}

fn leg_json(l: &Leg) -> Value {
    let mut v = json!({
        "per_sec_mbps": l.per_sec,
        "pages": l.pages,
        "sys_ns_per_page": l.sys_ns_per_page,
        "peak_bytes": l.peak_bytes,
        "failcnt": l.failcnt,
        "cached_after": l.cached_after,
    });
    if let Some(t) = &l.trace {
        v["trace"] = json!({
            "throttled": t.throttled,
            "throttled_ms": t.throttled_ms,
            "completions": t.completions,
            "interrupts": t.interrupts.as_ref().map(|i| json!({
                "irq": i.irq,
                "count": i.count,
                "median_per_interrupt": i.median_per_interrupt,
                "outside": i.outside,
            })),
        });
        if let Some(d) = &t.disk {
            v["trace"]["disk"] = json!({
                "busy_ms": d.busy_ms,
                "bytes": d.bytes,
                "requests": d.requests,
                "unmatched_issues": d.unmatched_issues,
                "unmatched_completions": d.unmatched_completions,
            });
        }
    }
    v
}

fn seed_json(r: &SeedRun) -> Value {
    json!({
        "fs": r.fs, "op": r.op, "limit": r.limit, "range": r.range,
        "normal": leg_json(&r.normal), "dontcache": leg_json(&r.dontcache),
    })
}

impl LiveReport {
    /// The recording: every figure the report prints.
    pub fn to_json(&self) -> Value {
        json!({
            "kernel": self.kernel,
            "machine": self.machine,
            "bdev": part_json(&self.bdev, |b| json!({
                "dev": b.dev,
                "plain_read": errno_name(b.plain_read),
                "dontcache_read": errno_name(b.dontcache_read),
                "dontcache_write": errno_name(b.dontcache_write),
            })),
            "fs": self.fs.iter().map(|p| part_json(p, |r| json!({
                "fs": r.fs, "on": r.on, "pages": r.pages,
                "rows": r.rows.iter().map(|x| json!({
                    "mode": x.mode, "holes": x.holes, "mbps": x.mbps, "cached": x.cached,
                })).collect::<Vec<_>>(),
            }))).collect::<Vec<_>>(),
            "seed": self.seed.iter().map(|p| part_json(p, seed_json)).collect::<Vec<_>>(),
            "reported": self.reported.as_ref().map(|p| part_json(p, |r| json!({
                "reporting": r.reporting, "wait_secs": r.wait_secs, "run": seed_json(&r.run),
            }))),
        })
    }

    /// Reads a recording made by [`LiveReport::to_json`]; errors name the missing or bad field.
    pub fn from_json(v: &Value) -> Result<LiveReport, String> {
        let s = |v: &Value, k: &str| -> Result<String, String> {
            v.get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("`{k}`: missing or not a string"))
        };
        let u = |v: &Value, k: &str| -> Result<u64, String> {
            v.get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("`{k}`: missing or not a whole number"))
        };
        let fl = |v: &Value, k: &str| -> Result<f64, String> {
            v.get(k)
                .and_then(Value::as_f64)
                .ok_or_else(|| format!("`{k}`: missing or not a number"))
        };
        let arr = |v: &Value, k: &str| -> Result<Vec<Value>, String> {
            v.get(k)
                .and_then(Value::as_array)
                .cloned()
                .ok_or_else(|| format!("`{k}`: missing or not a list"))
        };
        fn part<T>(v: &Value, f: impl Fn(&Value) -> Result<T, String>) -> Result<Part<T>, String> {
            match v.get("skipped").and_then(Value::as_str) {
                Some(why) => Ok(Part::Skipped(why.to_owned())),
                None => f(v).map(Part::Done),
            }
        }
        let errno = |v: &Value, k: &str| -> Result<Option<i32>, String> {
            let t = s(v, k)?;
            parse_errno(&t).ok_or_else(|| format!("`{k}`: `{t}` is not an errno name"))
        };
        let leg = |v: &Value| -> Result<Leg, String> {
            Ok(Leg {
                per_sec: arr(v, "per_sec_mbps")?
                    .iter()
                    .map(|x| x.as_f64().ok_or("`per_sec_mbps`: not a number"))
                    .collect::<Result<_, _>>()?,
                pages: u(v, "pages")?,
                sys_ns_per_page: fl(v, "sys_ns_per_page")?,
                peak_bytes: u(v, "peak_bytes")?,
                failcnt: u(v, "failcnt")?,
                cached_after: u(v, "cached_after")?,
                trace: match v.get("trace") {
                    None => None,
                    Some(t) => Some(LegTrace {
                        throttled: u(t, "throttled")?,
                        throttled_ms: fl(t, "throttled_ms")?,
                        completions: u(t, "completions")?,
                        interrupts: match t.get("interrupts") {
                            None => return Err("`interrupts`: missing".into()),
                            Some(Value::Null) => None,
                            Some(i) => Some(Interrupts {
                                irq: s(i, "irq")?,
                                count: u(i, "count")?,
                                median_per_interrupt: fl(i, "median_per_interrupt")?,
                                outside: u(i, "outside")?,
                            }),
                        },
                        // Recordings before 2026-12-05 did not trace the disk's busy time.
                        disk: match t.get("disk") {
                            None => None,
                            Some(d) => Some(DiskBusy {
                                busy_ms: fl(d, "busy_ms")?,
                                bytes: u(d, "bytes")?,
                                requests: u(d, "requests")?,
                                unmatched_issues: u(d, "unmatched_issues")?,
                                unmatched_completions: u(d, "unmatched_completions")?,
                            }),
                        },
                    }),
                },
            })
        };
        let sub = |v: &Value, k: &str| -> Result<Value, String> {
            v.get(k).cloned().ok_or_else(|| format!("`{k}`: missing"))
        };
        let seed_run = |r: &Value| -> Result<SeedRun, String> {
            Ok(SeedRun {
                fs: s(r, "fs")?,
                op: s(r, "op")?,
                limit: u(r, "limit")?,
                range: u(r, "range")?,
                normal: leg(&sub(r, "normal")?)?,
                dontcache: leg(&sub(r, "dontcache")?)?,
            })
        };
        let report = LiveReport {
            kernel: s(v, "kernel")?,
            machine: s(v, "machine")?,
            bdev: part(&sub(v, "bdev")?, |b| {
                Ok(BdevProbe {
                    dev: s(b, "dev")?,
                    plain_read: errno(b, "plain_read")?,
                    dontcache_read: errno(b, "dontcache_read")?,
                    dontcache_write: errno(b, "dontcache_write")?,
                })
            })?,
            fs: arr(v, "fs")?
                .iter()
                .map(|p| {
                    part(p, |r| {
                        Ok(FsRows {
                            fs: s(r, "fs")?,
                            on: s(r, "on")?,
                            pages: u(r, "pages")?,
                            rows: arr(r, "rows")?
                                .iter()
                                .map(|x| {
                                    Ok(FsRow {
                                        mode: s(x, "mode")?,
                                        holes: x
                                            .get("holes")
                                            .and_then(Value::as_bool)
                                            .ok_or("`holes`: missing or not true/false")?,
                                        mbps: fl(x, "mbps")?,
                                        cached: u(x, "cached")?,
                                    })
                                })
                                .collect::<Result<_, String>>()?,
                        })
                    })
                })
                .collect::<Result<_, _>>()?,
            seed: arr(v, "seed")?
                .iter()
                .map(|p| part(p, seed_run))
                .collect::<Result<_, _>>()?,
            reported: match v.get("reported") {
                None | Some(Value::Null) => None,
                Some(p) => Some(part(p, |r| {
                    Ok(ReportedReads {
                        reporting: s(r, "reporting")?,
                        wait_secs: u(r, "wait_secs")?,
                        run: seed_run(&sub(r, "run")?)?,
                    })
                })?),
            },
        };
        // A key this reader does not know (a typo, or a newer biosim's) is an error, not
        // ignored: what the report writes back is every key it read.
        match unknown_key(v, &report.to_json(), "") {
            Some(path) => Err(format!("`{path}`: unknown key (not read by this biosim)")),
            None => Ok(report),
        }
    }

    /// Reads a recording file; errors name the file.
    pub fn load(path: &Path) -> Result<LiveReport, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::Io {
            what: "reading the recording".into(),
            path: path.to_owned(),
            source: e,
        })?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| BenchError::Param(format!("--replay {}: {e}", path.display())))?;
        LiveReport::from_json(&v)
            .map_err(|e| BenchError::Param(format!("--replay {}: {e}", path.display())))
    }
}

#[cfg(test)]
mod simulated_tests {
    use super::*;

    /// The model's 6.18 predictions, as the live kernel measured them (the recording): ext4 drops
    /// DONTCACHE folios written into holes and keeps overwrites, XFS drops both, a buffered write
    /// keeps all. A model that ended writeback in task context everywhere (or nowhere) fails a row.
    #[test]
    fn the_model_predicts_ext4_and_xfs_as_the_live_kernel_left_them() {
        for (fs, mode, holes, want) in [
            ("ext4", "dontcache", true, "none"),
            ("ext4", "dontcache", false, "all"),
            ("ext4", "buffered", true, "all"),
            ("xfs", "dontcache", true, "none"),
            ("xfs", "dontcache", false, "none"),
            ("xfs", "buffered", false, "all"),
            ("btrfs", "dontcache", true, "?"),
        ] {
            assert_eq!(
                simulated_cell(fs, mode, holes),
                want,
                "{fs} {mode} holes={holes}"
            );
        }
    }
}
