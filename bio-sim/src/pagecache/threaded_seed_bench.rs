//! `biosim bench dontcache --preset seed-reads|seed-writes --runtime threaded`: the seed's
//! experiment (`[PATCH v6 0/4]`'s cover letter) on the [threaded runtime](super::threaded), over
//! null_blk with memory backing, with real copies in real time: the same tables as the
//! [discrete-event bench](super::seed_bench), per wall-clock second, with the process's CPU time
//! per MiB beside them and the oracle's verdicts on each DONTCACHE write run.

use super::driver::DriverError;
use super::dropbehind_oracle::{check_dontcache_run, data_integrity, verdict_lines, Verdict};
use super::seed_bench::{
    design_name, driver_config, kernel_config_lines, mib, path_name, row_text, summary_text,
    syscall_name, DesignRow, SeedBenchConfig,
};
use super::seed_presets::Workload;
use super::threaded::{run_threaded, NullBlkDevice, ThreadedRun};
use std::fmt::Write as _;

/// The largest range a threaded run keeps in memory (null_blk's pages, the expected bytes).
pub const MAX_THREADED_RANGE: u64 = 4 << 30;

/// One design x path: the two runs' [`DesignRow`] and their host figures.
#[derive(Debug, Clone)]
pub struct ThreadedRow {
    /// The runs, as the discrete-event bench keeps them.
    pub row: DesignRow,
    /// Process CPU ns per MiB of the normal run.
    pub normal_cpu_ns_per_mib: Option<f64>,
    /// ... of the DONTCACHE run.
    pub dontcache_cpu_ns_per_mib: Option<f64>,
    /// The oracle's verdicts: data integrity of the normal run (every byte read, or the device
    /// against every page written), then the DONTCACHE run's: its integrity, and for writes the
    /// dropbehind checks (reads leave the readahead window past the last read, which no check
    /// covers).
    pub verdicts: Vec<(&'static str, Verdict)>,
}

/// The bench's results.
#[derive(Debug, Clone)]
pub struct ThreadedSeedReport {
    /// The configuration (`seconds` are wall-clock seconds; the costs are not used).
    pub config: SeedBenchConfig,
    /// The device.
    pub device: NullBlkDevice,
    /// One per design x path.
    pub rows: Vec<ThreadedRow>,
    /// The host's CPUs and its load average when the bench started (`/proc/loadavg`).
    pub host: String,
    /// Simulated CPUs of each run.
    pub nr_cpus: u32,
}

impl ThreadedSeedReport {
    /// Whether every oracle verdict passed.
    pub fn oracle_ok(&self) -> bool {
        self.rows
            .iter()
            .all(|r| r.verdicts.iter().all(|(_, v)| v.is_ok()))
    }
}

fn host() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned());
    format!("{cpus} host CPUs, load average {load}")
}

/// The host memory a threaded run needs at its peak, in bytes: the range three times (null_blk's
/// memory-backed pages, the expected bytes the workload checks against, and the copy of the
/// media read back for the final comparison), one `u64` pass counter per page, and the page
/// cache up to its limit.
pub fn threaded_memory_need(cfg: &SeedBenchConfig) -> u64 {
    let range = cfg.limit_bytes.saturating_mul(cfg.preset.range_limits);
    range
        .saturating_mul(3)
        .saturating_add(range / 512)
        .saturating_add(cfg.limit_bytes)
}

/// The host's `MemAvailable` (`/proc/meminfo`, kB), in bytes; `None` where it cannot be read.
pub fn host_mem_available() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = m
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()?;
    Some(kb.saturating_mul(1024))
}

/// Refuses a configuration a threaded run cannot hold: the range (the limit times the preset's
/// multiple) lives in memory three times, which must fit the host's available memory (a run
/// that cannot would make the machine swap or the OOM killer pick a process, perhaps another's),
/// and is capped at [`MAX_THREADED_RANGE`] whatever the host.
pub fn check_threaded_size(cfg: &SeedBenchConfig) -> Result<(), String> {
    check_threaded_size_on(cfg, host_mem_available())
}

/// [`check_threaded_size`] against `mem_available` bytes (`None`: unknown, only the cap
/// applies).
pub fn check_threaded_size_on(
    cfg: &SeedBenchConfig,
    mem_available: Option<u64>,
) -> Result<(), String> {
    let range = cfg.limit_bytes.saturating_mul(cfg.preset.range_limits);
    let what = format!(
        "--limit {}: {} makes a range of {}",
        mib(cfg.limit_bytes),
        cfg.preset.name,
        mib(range)
    );
    let need = threaded_memory_need(cfg);
    if let Some(avail) = mem_available.filter(|&a| need > a) {
        return Err(format!(
            "{what}, and a threaded run needs {} of host memory (the range three times: \
             null_blk's memory backing, the expected data and the final read-back; plus the \
             cache limit), more than the host's MemAvailable of {}",
            mib(need),
            mib(avail)
        ));
    }
    if range > MAX_THREADED_RANGE {
        return Err(format!(
            "{what}, more than the {} the threaded runtime keeps in memory (null_blk \
             memory_backed)",
            mib(MAX_THREADED_RANGE)
        ));
    }
    Ok(())
}

/// Runs the bench: per design x path a normal and a DONTCACHE run (forced where the bdev
/// refuses it), each on a fresh machine.
pub fn seed_bench_threaded(
    cfg: &SeedBenchConfig,
    device: NullBlkDevice,
) -> Result<ThreadedSeedReport, DriverError> {
    check_threaded_size(cfg).map_err(DriverError::Config)?;
    let host = host();
    let mut nr_cpus = 0;
    let mut rows = Vec::new();
    for &design in &cfg.designs {
        for &path in &cfg.paths {
            let base = driver_config(cfg, design, path);
            nr_cpus = base.nr_cpus;
            let normal = run_threaded(base.clone(), device)?;
            let mut dc = base.clone();
            dc.dontcache = true;
            let mut dontcache = run_threaded(dc.clone(), device)?;
            let refused = dontcache.run.refused;
            if refused.is_some() {
                dc.force_dontcache = true;
                dontcache = run_threaded(dc, device)?;
            }
            let mut verdicts = vec![("data integrity (normal)", data_integrity(&normal.run))];
            match cfg.preset.workload {
                Workload::Writes => {
                    verdicts.extend(check_dontcache_run(&design, path, &dontcache.run))
                }
                Workload::Reads => {
                    verdicts.push(("data integrity", data_integrity(&dontcache.run)))
                }
            }
            let (n, d): (ThreadedRun, ThreadedRun) = (normal, dontcache);
            rows.push(ThreadedRow {
                normal_cpu_ns_per_mib: n.cpu_ns_per_mib(),
                dontcache_cpu_ns_per_mib: d.cpu_ns_per_mib(),
                verdicts,
                row: DesignRow {
                    design,
                    path,
                    normal: n.run,
                    dontcache: d.run,
                    refused,
                },
            });
        }
    }
    Ok(ThreadedSeedReport {
        config: cfg.clone(),
        device,
        rows,
        host,
        nr_cpus,
    })
}

fn us(ns: Option<f64>) -> String {
    ns.map(|n| format!("{:.0}", n / 1000.0))
        .unwrap_or_else(|| "-".to_owned())
}

impl std::fmt::Display for ThreadedSeedReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cfg = &self.config;
        let p = &cfg.preset;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}: {} over {} with a cache limit of {}, {} s per run, normal vs RWF_DONTCACHE \
             (threaded runtime: {} simulated CPUs as OS threads, null_blk irqmode={} ({}) with \
             memory backing, real copies, real time)",
            p.name,
            syscall_name(p),
            mib(cfg.limit_bytes * p.range_limits),
            mib(cfg.limit_bytes),
            cfg.seconds,
            self.nr_cpus,
            self.device.irqmode.nr(),
            self.device.irqmode.name()
        );
        kernel_config_lines(cfg, &mut out);
        let _ = writeln!(out, "host: {} at the start", self.host);
        for r in &self.rows {
            let _ = writeln!(out);
            out.push_str(&row_text(p, &r.row, ", threaded"));
            let _ = writeln!(
                out,
                "CPU per MiB (getrusage, whole process): normal {} us, dontcache {} us",
                us(r.normal_cpu_ns_per_mib),
                us(r.dontcache_cpu_ns_per_mib)
            );
            verdict_lines(&r.verdicts, &mut out);
        }
        let rows: Vec<DesignRow> = self.rows.iter().map(|r| r.row.clone()).collect();
        let _ = writeln!(out);
        out.push_str(&summary_text(&rows));
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "design      path          CPU us/MiB normal  dontcache"
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "{:<10}  {:<11}  {:>17}  {:>9}",
                design_name(&r.row.design),
                path_name(r.row.path),
                us(r.normal_cpu_ns_per_mib),
                us(r.dontcache_cpu_ns_per_mib)
            );
        }
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pagecache::seed_presets::{SEED_READS, SEED_WRITES};
    use bio_core::mm::dontcache::{DontcacheDesign, WritebackPath};

    /// The report's shape on a tiny limit and one second (no figure is checked: performance is
    /// for benches): the threaded header, one table per design x path with a row per second, CPU
    /// per MiB, the oracle's verdicts on writes (all passing), and the summary tables.
    #[test]
    fn the_threaded_seed_tables() {
        for preset in [SEED_WRITES, SEED_READS] {
            let mut cfg = SeedBenchConfig::new(preset);
            cfg.designs = vec![
                DontcacheDesign::Baseline,
                DontcacheDesign::parse("v7").unwrap(),
            ];
            cfg.paths = vec![WritebackPath::Iomap];
            cfg.seconds = 1;
            cfg.limit_bytes = 4 << 20;
            let rep = seed_bench_threaded(&cfg, NullBlkDevice::default()).unwrap();
            let text = rep.to_string();
            assert!(text.contains("(threaded runtime: 2 simulated CPUs as OS threads, null_blk irqmode=1 (softirq) with memory backing, real copies, real time)"), "{text}");
            assert!(
                text.contains("(baseline, iomap, dontcache forced, threaded) ====="),
                "{text}"
            );
            assert!(text.contains("(v7, iomap, threaded) ====="), "{text}");
            assert_eq!(rep.rows.len(), 2);
            for r in &rep.rows {
                assert_eq!(r.row.normal.per_second.len(), 1, "{text}");
                assert_eq!(r.row.dontcache.corrupt_bytes, 0, "{text}");
                assert!(r.row.dontcache.bytes > 0, "{text}");
                assert_eq!(r.row.normal.corrupt_bytes, 0, "{text}");
                let names: Vec<&str> = r.verdicts.iter().map(|(n, _)| *n).collect();
                assert_eq!(names[..2], ["data integrity (normal)", "data integrity"]);
                assert_eq!(
                    names.len() > 2,
                    preset.workload == Workload::Writes,
                    "{names:?}"
                );
            }
            assert!(rep.oracle_ok(), "{text}");
            assert!(text.contains("CPU us/MiB normal  dontcache"), "{text}");
        }
        let mut big = SeedBenchConfig::new(SEED_READS);
        big.limit_bytes = 4 << 30;
        let e = check_threaded_size_on(&big, Some(u64::MAX)).unwrap_err();
        assert!(e.contains("more than the 4096 MiB"), "{e}");
    }

    /// A run that cannot fit the host's available memory is refused before anything is
    /// allocated, naming the option and the sizes; the cap holds whatever the host.
    #[test]
    fn a_threaded_run_bigger_than_the_host_is_refused() {
        let avail = host_mem_available().expect("/proc/meminfo has MemAvailable");
        assert!(avail > 0);
        // The limit alone as large as the host's available memory: the run needs four times it.
        let mut huge = SeedBenchConfig::new(SEED_READS);
        huge.limit_bytes = (avail >> 20).saturating_add(1) << 20;
        let e = check_threaded_size(&huge).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "--limit {} MiB: seed-reads makes a range of",
                huge.limit_bytes >> 20
            )),
            "{e}"
        );
        assert!(e.contains("more than the host's MemAvailable of"), "{e}");
        match seed_bench_threaded(&huge, NullBlkDevice::default()) {
            // The same refusal; MemAvailable itself may have moved between the two reads.
            Err(DriverError::Config(m)) => {
                let upto = |t: &str| {
                    t.split("MemAvailable of")
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                };
                assert_eq!(upto(&m), upto(&e))
            }
            other => panic!("not refused: {other:?}"),
        }
        // seed-writes' defaults: a 61 MiB limit, a 244 MiB range, 3 x 244 + 61 + 244/512 MiB.
        let writes = SeedBenchConfig::new(SEED_WRITES);
        assert_eq!(
            threaded_memory_need(&writes),
            ((3 * 244 + 61) << 20) + (244 << 20) / 512
        );
        let e = check_threaded_size_on(&writes, Some(512 << 20)).unwrap_err();
        assert_eq!(
            e,
            "--limit 61 MiB: seed-writes makes a range of 244 MiB, and a threaded run needs 793 MiB \
             of host memory (the range three times: null_blk's memory backing, the expected data \
             and the final read-back; plus the cache limit), more than the host's MemAvailable \
             of 512 MiB"
        );
        assert_eq!(check_threaded_size_on(&writes, Some(1 << 30)), Ok(()));
        assert_eq!(check_threaded_size_on(&writes, None), Ok(()));
    }
}
