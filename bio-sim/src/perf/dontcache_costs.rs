//! The per-page costs the page-cache simulation charges (bio-sim `pagecache/`: a counter delta of
//! bio-core's `PageCacheStats` times one of these is simulated time), calibrated against this
//! machine's kernel (mm/filemap.c `filemap_read()` / `copy_folio_to_iter()`, mm/truncate.c
//! `mapping_try_invalidate()`, mm/vmscan.c `shrink_folio_list()`, mm/page-writeback.c
//! `do_writepages()`) with `biosim bench dontcache --calibrate`.
//!
//! Every cost is **CPU time per 4 KiB page** of the thread doing the system calls (in the
//! kernel: the user part of a loop of 1 MiB calls is negligible), not wall time, so waiting for
//! the shared disk does not count; except the work hand-off, a wake-up latency. The clock is
//! `CLOCK_THREAD_CPUTIME_ID`, exact, rather than `getrusage()`'s tick-sampled `ru_stime`. The
//! methods, on a real file of `--dir` (page-cache copies and invalidation do not touch the disk):
//!
//! - `copy_ns`: `pread()` of pages already cached, in 1 MiB calls.
//! - `invalidate_ns`: `POSIX_FADV_DONTNEED` of clean cached pages (`mapping_try_invalidate()`).
//! - `alloc_add_ns`: `pread()` of uncached pages minus `copy_ns`: folio allocation, insertion into
//!   the mapping (`filemap_add_folio()`), readahead and read-bio submission.
//! - `writeback_submit_ns`: `pwrite()` over cached clean pages + `fdatasync()`, minus `copy_ns`:
//!   dirtying and the writeback submission the syscall does (bio completion is in IRQ context,
//!   not charged to the writer).
//! - `reclaim_evict_ns`: a child process reads 2x the limit from a cold cache into a cgroup v1
//!   memory cgroup whose limit it never reaches, then biosim lowers `memory.limit_in_bytes` to the
//!   limit, which reclaims the excess synchronously in the writing thread
//!   (`mem_cgroup_resize_max()` → `try_to_free_mem_cgroup_pages()` → `shrink_folio_list()`): that
//!   write's sys time divided by the pages evicted (`pgsteal_direct` of `/proc/vmstat`) is scan +
//!   unmap + free of one clean page. `reclaim_scan_ns` is the same time divided by the pages
//!   scanned (`pgscan_direct`): equal when every scanned page could go, as clean file pages do.
//!   (A first method, the extra sys time of a cold read under the limit against one without,
//!   drowned in the cold reads' own noise: 0-345 ns.) Root and the memory controller only.
//! - `irq_ns`: not measurable from user space; taken from the deferral benchmark
//!   (docs/performance.md "Task-context completion"): direct completion, 14.1 M bios/s on this
//!   machine's threaded runtime = 71 ns per `bio_endio()` → `bi_end_io` in the interrupt.
//! - `reported_touch_ns`: on a VM guest with free page reporting (mm/page_reporting.c under a
//!   virtio-balloon, as this machine is), what a page allocated from memory the host took back
//!   costs more than one allocated from memory just freed: a cold `pread()` of a sparse file
//!   (holes: zeroed folios, no disk) whose cache was dropped [`PAGE_REPORTING_WAIT`] before (the
//!   reporting worker runs `2 * HZ` after a free, then the host discards what it reported), minus
//!   the same read right after the drop (the allocator hands the freed pages out again). The host
//!   page fault of the first touch; about 0 on bare metal or without reporting.
//! - `work_handoff_ns`: a futex wake-up (`thread::unpark` → the parked thread runs), half the
//!   round trip of a two-thread ping-pong, wall time: what queueing a work on an idle worker adds.

use super::bench_common::{io_err, BenchError};
use super::dontcache::scratch_file;
use super::dontcache_live::memcg::{self, run_in_child, Job, JobOp, Memcg, Stop};
use super::stats::median;
use crate::dev::aligned::AlignedBuf;
use crate::dev::backing::{BackingFile, RwFlags};
use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;

/// Per-page costs in ns (see the module docs for how each is measured).
#[derive(Debug, Clone, PartialEq)]
pub struct PageCosts {
    /// Copying one cached page to or from the user (`copy_folio_to_iter()`).
    pub copy_ns: f64,
    /// Allocating a folio and adding it to the mapping, with its read submission.
    pub alloc_add_ns: f64,
    /// Reclaiming (evicting) one clean page under a memcg limit.
    pub reclaim_evict_ns: f64,
    /// Reclaim's cost per page scanned.
    pub reclaim_scan_ns: f64,
    /// Invalidating one clean cached page (the dropbehind invalidation).
    pub invalidate_ns: f64,
    /// Dirtying and submitting one page's writeback.
    pub writeback_submit_ns: f64,
    /// One bio completion in the interrupt.
    pub irq_ns: f64,
    /// Handing work to another thread (a wake-up).
    pub work_handoff_ns: f64,
    /// Allocating a page from free memory the guest reported to the host (its host fault);
    /// charged only with free page reporting (`--page-reporting`).
    pub reported_touch_ns: f64,
    /// Where the figures come from.
    pub source: Cow<'static, str>,
}

impl PageCosts {
    /// Measured on this machine with `biosim bench dontcache --calibrate --rounds 7 --size 512M`
    /// (2026-12-01, medians of 7 interleaved rounds; min-max in docs/performance.md): Linux
    /// 6.18.44 on a 2-vCPU VM with 24 GiB, ext4 on virtio-blk, a disk and cores shared with other
    /// jobs. `irq_ns` is the deferral benchmark's direct completion (14.1 M bios/s), not measured
    /// by `--calibrate`; `reported_touch_ns` was measured on 2026-12-04 ([`REPORTED_TOUCH_NS`]).
    pub const MEASURED: PageCosts = PageCosts {
        copy_ns: 448.0,
        alloc_add_ns: 170.0,
        reclaim_evict_ns: 44.0,
        reclaim_scan_ns: 44.0,
        invalidate_ns: 343.0,
        writeback_submit_ns: 811.0,
        irq_ns: 71.0,
        work_handoff_ns: 3311.0,
        reported_touch_ns: REPORTED_TOUCH_NS,
        source: Cow::Borrowed(
            "measured 2026-12-01 on Linux 6.18.44 (2-vCPU VM, 24 GiB, ext4 on virtio-blk) with \
                 `biosim bench dontcache --calibrate --rounds 7 --size 512M`, medians; irq_ns from \
                 the deferral bench; reported_touch_ns measured 2026-12-04",
        ),
    };

    /// The fields as `(name, value)`, in declaration order.
    pub fn fields(&self) -> [(&'static str, f64); 9] {
        [
            ("copy_ns", self.copy_ns),
            ("alloc_add_ns", self.alloc_add_ns),
            ("reclaim_evict_ns", self.reclaim_evict_ns),
            ("reclaim_scan_ns", self.reclaim_scan_ns),
            ("invalidate_ns", self.invalidate_ns),
            ("writeback_submit_ns", self.writeback_submit_ns),
            ("irq_ns", self.irq_ns),
            ("work_handoff_ns", self.work_handoff_ns),
            ("reported_touch_ns", self.reported_touch_ns),
        ]
    }

    /// A costs file (`--costs FILE`, what `--calibrate --save-costs FILE` writes): one
    /// `NAME NS` line per field of [`PageCosts::fields`], each exactly once, in any order; blank
    /// lines and lines starting with `#` are comments. Anything else (an unknown name, a repeated
    /// or missing one, an extra word, a value that is not a finite number of ns from 0 to 1 s) is
    /// an error naming `origin` and the line. `source` says the file.
    pub fn parse_file(text: &str, origin: &str) -> Result<PageCosts, String> {
        let mut costs = PageCosts::MEASURED;
        let known = costs.fields().map(|(n, _)| n);
        let mut seen: Vec<(&str, usize)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let at = format!("{origin}:{}", i + 1);
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let [name, value] = words[..] else {
                return Err(format!(
                    "{at}: `{line}`: expected `NAME NS` (two words; comments start a line with #)"
                ));
            };
            let Some(&name) = known.iter().find(|k| **k == name) else {
                return Err(format!(
                    "{at}: unknown cost `{name}` (known: {})",
                    known.join(", ")
                ));
            };
            if let Some((_, first)) = seen.iter().find(|(n, _)| *n == name) {
                return Err(format!("{at}: `{name}` repeated (first on line {first})"));
            }
            seen.push((name, i + 1));
            let ns: f64 = value
                .parse()
                .ok()
                .filter(|v: &f64| {
                    !value.starts_with('-') && v.is_finite() && (0.0..=1e9).contains(v)
                })
                .ok_or_else(|| {
                    format!("{at}: {name} `{value}`: not a number of ns from 0 to 1000000000")
                })?;
            *costs.field_mut(name) = ns;
        }
        let missing: Vec<&str> = known
            .iter()
            .copied()
            .filter(|k| !seen.iter().any(|(n, _)| n == k))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{origin}: missing {} (a costs file names every cost once)",
                missing.join(", ")
            ));
        }
        // The file's first comment says where its figures come from (what --save-costs wrote).
        let first = text
            .lines()
            .find_map(|l| l.trim().strip_prefix('#'))
            .map(|c| format!(": {}", c.trim()))
            .unwrap_or_default();
        costs.source = Cow::Owned(format!("{origin} (--costs){first}"));
        Ok(costs)
    }

    /// The field called `name` (one of [`PageCosts::fields`]'s names).
    fn field_mut(&mut self, name: &str) -> &mut f64 {
        match name {
            "copy_ns" => &mut self.copy_ns,
            "alloc_add_ns" => &mut self.alloc_add_ns,
            "reclaim_evict_ns" => &mut self.reclaim_evict_ns,
            "reclaim_scan_ns" => &mut self.reclaim_scan_ns,
            "invalidate_ns" => &mut self.invalidate_ns,
            "writeback_submit_ns" => &mut self.writeback_submit_ns,
            "irq_ns" => &mut self.irq_ns,
            "work_handoff_ns" => &mut self.work_handoff_ns,
            "reported_touch_ns" => &mut self.reported_touch_ns,
            other => unreachable!("not a PageCosts field: {other}"),
        }
    }
}

/// `--calibrate`'s parameters.
#[derive(Debug, Clone)]
pub struct CalibrateConfig {
    /// Where the file goes.
    pub dir: PathBuf,
    /// The file's size.
    pub size: u64,
    /// Interleaved rounds.
    pub rounds: usize,
    /// The memcg limit of the reclaim measurement.
    pub limit: u64,
    /// Whether to measure reclaim (a child cgroup on the live kernel; root only).
    pub reclaim: bool,
    /// How long dropped pages stay free before the `reported_touch_ns` read
    /// ([`PAGE_REPORTING_WAIT`] from the CLI).
    pub reporting_wait: std::time::Duration,
}

/// What `--calibrate` measured: every round's value of each cost.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The configuration.
    pub config: CalibrateConfig,
    /// Per field of [`PageCosts::fields`]: the rounds' values (empty: not measured here).
    pub rounds: Vec<(&'static str, Vec<f64>)>,
    /// Why reclaim was not measured, if it was not.
    pub reclaim_skipped: Option<String>,
}

impl Calibration {
    /// The medians as a [`PageCosts`] (unmeasured fields: the committed value).
    pub fn medians(&self) -> PageCosts {
        let mut costs = PageCosts::MEASURED;
        for (name, v) in self.rounds.iter().filter(|(_, v)| !v.is_empty()) {
            *costs.field_mut(name) = median(v);
        }
        costs.source = Cow::Borrowed("this run");
        costs
    }

    /// The medians as a costs file ([`PageCosts::parse_file`]), headed by `header` (the kernel
    /// and the command, as comments); a cost not measured here carries the committed value and
    /// a comment saying so.
    pub fn costs_file(&self, header: &str) -> String {
        let mut out = String::new();
        for line in header.lines() {
            out.push_str(&format!("# {line}\n"));
        }
        out.push_str("# ns per 4 KiB page, medians of the rounds (biosim bench dontcache --preset ... --costs FILE)\n");
        for (name, ns) in self.medians().fields() {
            let measured = self.rounds.iter().any(|(k, v)| *k == name && !v.is_empty());
            if !measured {
                out.push_str(&format!(
                    "# {name}: not measured by this run: PageCosts::MEASURED's\n"
                ));
            }
            // reported_touch_ns is a difference of two reads: noise around 0 can be negative
            // where no page was reported, and no cost is.
            let ns = ns.round();
            if ns < 0.0 {
                out.push_str(&format!(
                    "# {name}: measured {ns:.0} (noise around 0), saved as 0\n"
                ));
            }
            out.push_str(&format!("{name} {:.0}\n", if ns > 0.0 { ns } else { 0.0 }));
        }
        out
    }
}

/// This thread's CPU time, ns (`CLOCK_THREAD_CPUTIME_ID`: the scheduler's exact
/// `sum_exec_runtime`). `getrusage(RUSAGE_THREAD).ru_stime` splits that sum by tick samples, so
/// an operation of a few ms reads as 0 or one whole tick (measured: a reclaim read as 3.9 ms in
/// one round and as 0 in the other); the user part of a loop of 1 MiB system calls is negligible.
fn thread_stime_ns() -> u64 {
    // SAFETY: all-zero is a valid timespec.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sys ns per page of `f` over `pages` pages.
fn per_page(pages: u64, f: impl FnOnce() -> Result<(), BenchError>) -> Result<f64, BenchError> {
    let t0 = thread_stime_ns();
    f()?;
    Ok((thread_stime_ns() - t0) as f64 / pages as f64)
}

fn vmstat(key: &str) -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Half the round trip of a park/unpark ping-pong (futex wake-ups), median of 2000, ns.
fn futex_handoff_ns() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let turn = Arc::new(AtomicU64::new(0));
    let main = std::thread::current();
    let t2 = turn.clone();
    let n = 2000u64;
    let peer = std::thread::spawn(move || {
        for i in 0..n {
            while t2.load(Ordering::Acquire) != 2 * i + 1 {
                std::thread::park();
            }
            t2.store(2 * i + 2, Ordering::Release);
            main.unpark();
        }
    });
    let mut trips = Vec::with_capacity(n as usize);
    for i in 0..n {
        let t0 = std::time::Instant::now();
        turn.store(2 * i + 1, Ordering::Release);
        peer.thread().unpark();
        while turn.load(Ordering::Acquire) != 2 * i + 2 {
            std::thread::park();
        }
        trips.push(t0.elapsed().as_nanos() as f64 / 2.0);
    }
    let _ = peer.join();
    median(&trips)
}

/// Runs `--calibrate`: `rounds` interleaved rounds of every measurement.
pub fn calibrate(cfg: &CalibrateConfig) -> Result<Calibration, BenchError> {
    if cfg.rounds == 0 || cfg.size < (4 << 20) || !cfg.size.is_multiple_of(1 << 20) {
        return Err(BenchError::Param(
            "--calibrate: rounds must be at least 1 and --size a whole number of MiB, at least 4M"
                .into(),
        ));
    }
    let (tmp, file) = scratch_file(&cfg.dir, "biosim-dontcache-calibrate", cfg.size)?;
    let path = tmp.path().to_owned();
    let pages = cfg.size / 4096;
    // Page-aligned buffers: a misaligned one makes the copy several times slower (measured here:
    // 2,200 vs 480 ns per cached page), which an application with aligned buffers never pays.
    let mut chunk = AlignedBuf::new(1 << 20);
    chunk.fill(0x6b);
    let mut rbuf = AlignedBuf::new(1 << 20);
    let mut rbuf2 = AlignedBuf::new(1 << 20);
    let write_all = |flags: RwFlags| -> Result<(), BenchError> {
        let mut off = 0;
        while off < cfg.size {
            file.write_all_at(&chunk, off, flags)
                .map_err(io_err("writing", &path))?;
            off += chunk.len() as u64;
        }
        Ok(())
    };
    let mut read_all = || -> Result<(), BenchError> {
        let mut off = 0;
        while off < cfg.size {
            file.read_exact_at(&mut rbuf, off, RwFlags::empty())
                .map_err(io_err("reading", &path))?;
            off += 1 << 20;
        }
        Ok(())
    };
    write_all(RwFlags::empty())?;
    file.sync_data().map_err(io_err("fdatasync", &path))?;
    // Never written: its reads are zeroed folios, so only the page allocation differs.
    let (holes_tmp, holes) = scratch_file(&cfg.dir, "biosim-dontcache-calibrate-holes", cfg.size)?;
    let reclaim_skipped = if cfg.reclaim {
        memcg::own_memcg().err()
    } else {
        Some("not asked for (it makes a memory cgroup on the live kernel)".into())
    };
    let names = [
        "copy_ns",
        "alloc_add_ns",
        "reclaim_evict_ns",
        "reclaim_scan_ns",
        "invalidate_ns",
        "writeback_submit_ns",
        "work_handoff_ns",
        "reported_touch_ns",
    ];
    let mut vals: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..cfg.rounds {
        // Cached: copy only (the file is cached and clean here).
        read_all()?;
        let copy = per_page(pages, &mut read_all)?;
        // Overwrite of cached clean pages + fdatasync: copy + dirtying + writeback submission.
        let wb = per_page(pages, || {
            write_all(RwFlags::empty())?;
            file.sync_data().map_err(io_err("fdatasync", &path))
        })?;
        // Invalidation of clean cached pages.
        let inval = per_page(pages, || {
            // SAFETY: posix_fadvise takes no pointers.
            let rc = unsafe { libc::posix_fadvise(file.fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            if rc != 0 {
                return Err(io_err("POSIX_FADV_DONTNEED", &path)(
                    std::io::Error::from_raw_os_error(rc),
                ));
            }
            Ok(())
        })?;
        // Cold read: allocation, insertion, readahead submission, copy.
        let cold = per_page(pages, &mut read_all)?;
        vals[0].push(copy);
        vals[1].push((cold - copy).max(0.0));
        vals[4].push(inval);
        vals[5].push((wb - copy).max(0.0));
        vals[6].push(futex_handoff_ns());
        vals[7].push(reported_touch_round(
            &holes,
            &mut rbuf2,
            cfg.reporting_wait,
        )?);
        if reclaim_skipped.is_none() {
            let (evict, scan) = reclaim_round(&file, cfg.limit)?;
            vals[2].push(evict);
            vals[3].push(scan);
        }
    }
    let mut rounds: Vec<(&'static str, Vec<f64>)> = names.iter().copied().zip(vals).collect();
    rounds.insert(6, ("irq_ns", Vec::new()));
    drop((file, holes));
    drop((tmp, holes_tmp));
    Ok(Calibration {
        config: cfg.clone(),
        rounds,
        reclaim_skipped,
    })
}

/// How long `--calibrate` leaves dropped pages free before the read that should find them
/// reported: the live companion's wait (the worker's `PAGE_REPORTING_DELAY` of 2 s, its passes,
/// the host's discard; 4 s measured about 65% of the 12 s figure here).
pub const PAGE_REPORTING_WAIT: std::time::Duration = super::dontcache_live::reported::REPORTED_WAIT;

/// `reported_touch_ns`, measured later than the rest (2026-12-04, the same command, median of
/// 7 rounds, min-max 7,175-7,843, pages left free 12 s). A per-page average over the file's
/// pages: if some had not reached the host yet, the fault itself costs more. (Runs leaving the
/// pages free only 4 s measured 4,942, 3,038-5,721.)
const REPORTED_TOUCH_NS: f64 = 7555.0;

/// One `reported_touch_ns` measurement on the never-written `holes`: wait `wait`
/// ([`PAGE_REPORTING_WAIT`]) for the worker passes the round's earlier drops requested, populate,
/// drop and read at once (pages reused: well inside the 2 s before the worker can report them),
/// then drop, wait `wait` and read (pages the host took back); the difference per page, unclamped
/// (about 0, either sign, on a machine that does not report).
fn reported_touch_round(
    holes: &BackingFile,
    buf: &mut [u8],
    wait: std::time::Duration,
) -> Result<f64, BenchError> {
    let path = holes.path().to_owned();
    let pages = holes.size() / 4096;
    let mut read_all = || -> Result<(), BenchError> {
        let mut off = 0;
        while off < holes.size() {
            holes
                .read_exact_at(buf, off, RwFlags::empty())
                .map_err(io_err("reading", &path))?;
            off += buf.len() as u64;
        }
        Ok(())
    };
    let drop_cache = || {
        holes
            .drop_cache()
            .map_err(io_err("POSIX_FADV_DONTNEED", &path))
    };
    std::thread::sleep(wait);
    read_all()?;
    drop_cache()?;
    let reused = per_page(pages, &mut read_all)?;
    drop_cache()?;
    std::thread::sleep(wait);
    let reported = per_page(pages, &mut read_all)?;
    drop_cache()?;
    Ok(reported - reused)
}

/// One reclaim measurement: a child reads 2x `limit` from a cold cache into a cgroup whose limit
/// it never reaches (the pages are charged to it), then this thread lowers the limit to `limit`,
/// which reclaims in this thread's context (`mem_cgroup_resize_max()`); its sys time over the
/// pages evicted and over the pages scanned (`pgsteal_direct`, `pgscan_direct`).
fn reclaim_round(file: &BackingFile, limit: u64) -> Result<(f64, f64), BenchError> {
    let fail = |e: String| BenchError::Machine(format!("reclaim measurement: {e}"));
    let range = 2 * limit;
    if range > file.size() {
        return Err(BenchError::Param(format!(
            "--calibrate: --size must be at least 2x --limit ({} MiB) for the reclaim measurement",
            range >> 20
        )));
    }
    let raw = std::fs::File::open(file.path()).map_err(|e| fail(e.to_string()))?;
    let job = Job {
        op: JobOp::Read,
        flags: RwFlags::empty(),
        range,
        stop: Stop::Bytes(range),
    };
    file.drop_cache().map_err(|e| fail(e.to_string()))?;
    let mut cg = Memcg::create(4 * range).map_err(fail)?;
    run_in_child(Some(&cg), &raw, job).map_err(fail)?;
    let before = cg.usage().map_err(fail)?;
    let (scan0, steal0) = (vmstat("pgscan_direct"), vmstat("pgsteal_direct"));
    let t0 = thread_stime_ns();
    cg.set_limit(limit).map_err(fail)?;
    let sys = (thread_stime_ns() - t0) as f64;
    let (scanned, stolen) = (
        vmstat("pgscan_direct") - scan0,
        vmstat("pgsteal_direct") - steal0,
    );
    let after = cg.usage().map_err(fail)?;
    file.drop_cache().map_err(|e| fail(e.to_string()))?;
    drop(cg);
    // If the global counters did not move (another accounting), the usage drop says how many
    // pages went.
    let dropped = before.saturating_sub(after) / 4096;
    let stolen = if stolen == 0 { dropped } else { stolen };
    if stolen == 0 {
        return Err(fail(format!(
            "lowering the limit to {} MiB evicted nothing (usage {before} -> {after} bytes)",
            limit >> 20
        )));
    }
    let scanned = scanned.max(stolen);
    Ok((sys / stolen as f64, sys / scanned as f64))
}

impl fmt::Display for Calibration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "per-page costs: thread CPU time per 4 KiB page (system calls) on a {} MiB file in {}, medians of {} interleaved rounds (min-max), beside PageCosts::MEASURED",
            c.size >> 20,
            c.dir.display(),
            c.rounds
        )?;
        writeln!(
            f,
            "  {:<20} {:>9} {:>17} {:>10}",
            "cost", "measured", "min-max", "committed"
        )?;
        let committed = PageCosts::MEASURED;
        for (name, want) in committed.fields() {
            let v = self
                .rounds
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.as_slice())
                .unwrap_or(&[]);
            if v.is_empty() {
                let why = if name == "irq_ns" {
                    "not measurable from user space: the deferral bench's figure"
                } else {
                    "not measured here"
                };
                writeln!(
                    f,
                    "  {name:<20} {:>9} {:>17} {want:>10.0}  ({why})",
                    "-", "-"
                )?;
            } else {
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                writeln!(
                    f,
                    "  {name:<20} {:>9.0} {:>17} {want:>10.0}",
                    median(v),
                    format!("{lo:.0}-{hi:.0}")
                )?;
            }
        }
        if let Some(why) = &self.reclaim_skipped {
            writeln!(f, "  reclaim not measured: {why}")?;
        }
        writeln!(f, "  committed: {}", committed.source)
    }
}

#[cfg(test)]
mod tests {
    use super::{CalibrateConfig, Calibration, PageCosts};

    fn file_of(costs: &PageCosts) -> String {
        costs
            .fields()
            .iter()
            .map(|(n, v)| format!("{n} {v}\n"))
            .collect()
    }

    #[test]
    fn a_costs_file_sets_every_field_and_names_itself() {
        let mut want = PageCosts::MEASURED;
        for (i, (name, _)) in PageCosts::MEASURED.fields().into_iter().enumerate() {
            *want.field_mut(name) = 100.0 + i as f64 + 0.5;
        }
        let text = format!(
            "# a comment\n\n{}",
            file_of(&want).replace("copy_ns", "  copy_ns")
        );
        let got = PageCosts::parse_file(&text, "c.txt").unwrap();
        assert_eq!(got.fields(), want.fields());
        assert_eq!(got.source, "c.txt (--costs): a comment");
        // Order does not matter.
        let reversed: String = file_of(&want)
            .lines()
            .rev()
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            PageCosts::parse_file(&reversed, "r").unwrap().fields(),
            want.fields()
        );
    }

    #[test]
    fn a_costs_file_refuses_what_it_does_not_understand_naming_the_line() {
        let good = file_of(&PageCosts::MEASURED);
        let cases: [(String, &str); 10] = [
            (
                format!("{good}copy_ns 1\n"),
                "c:10: `copy_ns` repeated (first on line 1)",
            ),
            (
                format!("{good}dirty_ns 1\n"),
                "c:10: unknown cost `dirty_ns`",
            ),
            (
                good.replacen("copy_ns 448", "copy_ns 448 ns", 1),
                "c:1: `copy_ns 448 ns`: expected `NAME NS`",
            ),
            (
                good.replacen("copy_ns 448", "copy_ns", 1),
                "c:1: `copy_ns`: expected `NAME NS`",
            ),
            (
                good.replacen("copy_ns 448", "copy_ns -1", 1),
                "c:1: copy_ns `-1`: not a number",
            ),
            (
                good.replacen("copy_ns 448", "copy_ns -0", 1),
                "c:1: copy_ns `-0`: not a number",
            ),
            (
                good.replacen("copy_ns 448", "copy_ns NaN", 1),
                "c:1: copy_ns `NaN`: not a number",
            ),
            (
                good.replacen("copy_ns 448", "copy_ns 1e10", 1),
                "c:1: copy_ns `1e10`: not a number",
            ),
            (good.replacen("copy_ns 448\n", "", 1), "c: missing copy_ns"),
            (
                String::new(),
                "c: missing copy_ns, alloc_add_ns, reclaim_evict_ns",
            ),
        ];
        for (text, want) in cases {
            let e = PageCosts::parse_file(&text, "c").unwrap_err();
            assert!(e.starts_with(want), "{e:?} should start with {want:?}");
        }
        // The bounds themselves are costs.
        let edge = good.replacen("copy_ns 448", "copy_ns 0", 1).replacen(
            "irq_ns 71",
            "irq_ns 1000000000",
            1,
        );
        let c = PageCosts::parse_file(&edge, "c").unwrap();
        assert_eq!((c.copy_ns, c.irq_ns), (0.0, 1e9));
    }

    #[test]
    fn a_calibration_saves_a_file_the_parser_reads_back() {
        let cal = Calibration {
            config: CalibrateConfig {
                dir: "/tmp".into(),
                size: 4 << 20,
                rounds: 3,
                limit: 16 << 20,
                reclaim: false,
                reporting_wait: std::time::Duration::ZERO,
            },
            rounds: vec![
                ("copy_ns", vec![200.0, 213.4, 230.0]),
                ("invalidate_ns", vec![180.0]),
                ("irq_ns", Vec::new()),
                ("reported_touch_ns", vec![-3.0, -2.0]),
            ],
            reclaim_skipped: Some("test".into()),
        };
        let text = cal.costs_file("measured today\non a test");
        assert!(
            text.starts_with("# measured today\n# on a test\n"),
            "{text}"
        );
        assert!(
            text.contains("# irq_ns: not measured by this run: PageCosts::MEASURED's\nirq_ns 71\n"),
            "{text}"
        );
        assert!(!text.contains("# copy_ns"), "{text}");
        let back = PageCosts::parse_file(&text, "saved").unwrap();
        assert_eq!((back.copy_ns, back.invalidate_ns), (213.0, 180.0));
        assert_eq!(back.reclaim_evict_ns, PageCosts::MEASURED.reclaim_evict_ns);
        assert!(text.contains("# reported_touch_ns: measured -3 (noise around 0), saved as 0\nreported_touch_ns 0\n"), "{text}");
        assert_eq!(back.reported_touch_ns, 0.0);
    }
}
