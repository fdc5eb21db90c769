//! `biosim bench`: the benchmarks on real files, and `biosim explore`'s speed.

use super::args::BenchCommand;

/// Runs `biosim bench`.
pub fn bench(cmd: BenchCommand) -> Result<(), Box<dyn std::error::Error>> {
    use crate::perf::loop_bench::{loop_bench, Engine, LoopBenchConfig, Workload};
    match cmd {
        BenchCommand::Loop(a) => {
            let cfg = LoopBenchConfig {
                dir: a.dir,
                file_size: crate::dev::space::parse_block_multiple(&a.size, "--size", 4096)?,
                ios_per_cpu: a.ios as usize,
                cpus: a.cpus,
                rounds: a.rounds as usize,
                workloads: Workload::parse(&a.workload)?,
                engine: Engine::parse(&a.engine)?,
                tracepoints: crate::perf::job::run::bench_tracepoints(),
            };
            print!("{}", loop_bench(&cfg)?);
        }
        BenchCommand::Dontcache(a) if a.preset.is_some() => seed_preset_bench(&a)?,
        BenchCommand::Dontcache(a) => dontcache(*a)?,
        BenchCommand::Job(argv) => job_bench(argv)?,
        BenchCommand::NullBlk(a) => null_blk(a)?,
        BenchCommand::Explore(a) => {
            use crate::perf::explore_bench::{explore_bench, ExploreBenchConfig};
            print!(
                "{}",
                explore_bench(&ExploreBenchConfig {
                    rounds: a.rounds as usize,
                    cases: a.cases,
                    steps: a.steps as usize,
                    long_cases: a.long_cases,
                })?
            );
        }
    }
    Ok(())
}

/// `biosim bench null-blk`.
fn null_blk(a: super::args::BenchNullBlkArgs) -> Result<(), Box<dyn std::error::Error>> {
    use crate::perf::null_blk_bench::{null_blk_bench, parse_irqmodes, NullBlkBenchConfig};
    use bio_core::block::complete_in_task::Variant;
    let cfg = NullBlkBenchConfig {
        cpus: a.cpus,
        bios_per_cpu: a.bios,
        rounds: a.rounds as usize,
        irqmodes: parse_irqmodes(&a.irqmode)?,
        completion_nsec: a.completion_nsec,
        hw_queue_depth: a.hw_queue_depth,
        variant: Variant::parse_name(&a.variant, &[]).map_err(|e| format!("--variant: {e}"))?,
    };
    print!("{}", null_blk_bench(&cfg)?);
    Ok(())
}

/// `biosim bench dontcache`: the real-file rows, or `--live`, `--calibrate`, `--replay`.
fn dontcache(a: super::args::BenchDontcacheArgs) -> Result<(), Box<dyn std::error::Error>> {
    use crate::perf::bench_common::parse_size;
    use crate::perf::dontcache::{dontcache_bench, DontcacheConfig};
    use crate::perf::dontcache_costs::{calibrate, CalibrateConfig};
    use crate::perf::dontcache_live::{live_run, save_formats, LiveConfig, LiveReport};
    if let Some(path) = &a.replay {
        print!("{}", LiveReport::load(path)?);
        return Ok(());
    }
    let size = crate::dev::space::parse_block_multiple(&a.size, "--size", 4096)?;
    let limit = match &a.limit {
        Some(l) => {
            let v = parse_size(l).map_err(|e| format!("--limit: {e}"))?;
            if v < (16 << 20) || !v.is_multiple_of(1 << 20) {
                return Err(
                    format!("--limit {l}: must be a whole number of MiB, at least 16M").into(),
                );
            }
            v
        }
        None if a.calibrate => (size / 2).max(16 << 20) / (1 << 20) * (1 << 20),
        None => 256 << 20,
    };
    if a.calibrate {
        if a.save_costs
            .as_deref()
            .is_some_and(|p| p.as_os_str() == "-")
        {
            // The table already goes to standard output.
            return Err(
                "--save-costs -: name a file (the table is printed on standard output)".into(),
            );
        }
        let save = a
            .save_costs
            .as_deref()
            .map(|p| super::output::Output::check_with("--save-costs", p, &[], a.force))
            .transpose()?;
        let cfg = CalibrateConfig {
            dir: a.dir,
            size,
            rounds: a.rounds.unwrap_or(3) as usize,
            limit,
            reclaim: true,
            reporting_wait: crate::perf::dontcache_costs::PAGE_REPORTING_WAIT,
        };
        let c = calibrate(&cfg)?;
        print!("{c}");
        if let (Some(out), Some(path)) = (save, &a.save_costs) {
            let header = format!(
                "measured {} on Linux {} with `biosim bench dontcache --calibrate --rounds {} --size {}M`",
                today_utc(),
                crate::perf::dontcache_live::kernel_release(),
                c.config.rounds,
                c.config.size >> 20
            );
            out.write(&c.costs_file(&header))?;
            println!("costs saved: {} (--costs {0})", path.display());
        }
        return Ok(());
    }
    if a.live {
        if let Some(dir) = &a.record {
            if !dir.is_dir() {
                return Err(format!("--record {}: not a directory", dir.display()).into());
            }
        }
        let report = live_run(&LiveConfig {
            dir: a.dir,
            size,
            rounds: a.rounds.unwrap_or(3) as usize,
            limit,
            seconds: a.seconds,
        })?;
        print!("{report}");
        if let Some(dir) = &a.record {
            let file = dir.join(format!(
                "dontcache-live-{}.json",
                kernel_series(&report.kernel)
            ));
            let text = serde_json::to_string_pretty(&report.to_json())? + "\n";
            std::fs::write(&file, text)
                .map_err(|e| format!("--record: write {}: {e}", file.display()))?;
            println!("recorded: {}", file.display());
            let fdir = dir.join(format!("tracefs-{}-filemap", kernel_series(&report.kernel)));
            match save_formats(&fdir) {
                Ok(files) => println!(
                    "tracepoint formats: {} files in {}",
                    files.len(),
                    fdir.display()
                ),
                Err(why) => println!("skipped: tracepoint formats: {why}"),
            }
        }
        return Ok(());
    }
    let cfg = DontcacheConfig {
        dir: a.dir,
        size,
        rounds: a.rounds.unwrap_or(3) as usize,
    };
    print!("{}", dontcache_bench(&cfg)?);
    Ok(())
}

/// `--irq-cpu`: a CPU of the preset's machine, as sysfs numbers it (`1`, not `+1` or `01`).
fn parse_irq_cpu(text: &str) -> Result<u32, String> {
    let n = crate::pagecache::driver::DEFAULT_NR_CPUS;
    match text.parse::<u32>() {
        Ok(cpu) if cpu < n && cpu.to_string() == text => Ok(cpu),
        _ => Err(format!(
            "--irq-cpu {text}: not a CPU of the simulated machine (0 to {}: it has {n} CPUs)",
            n - 1
        )),
    }
}

/// `--device-gbps`: a decimal number of GB/s (10^9 bytes/s), from 0.01 to 1000.
fn parse_gbps(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|g| g.is_finite() && (0.01..=1000.0).contains(g))
        .map(|g| g * 1e9)
        .ok_or_else(|| {
            format!("--device-gbps {text}: not a bandwidth in GB/s from 0.01 to 1000 (e.g. 5.7)")
        })
}

/// Today's date in UTC, `YYYY-MM-DD`.
fn today_utc() -> String {
    civil_date(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    )
}

/// The UTC date of `secs` since the epoch (days to civil date, the proleptic Gregorian
/// calendar's 400-year eras starting in March).
fn civil_date(secs: u64) -> String {
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `6.18.44-fc` -> `6.18`: the series a recording is named after.
fn kernel_series(release: &str) -> String {
    release.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// `biosim bench dontcache --preset ...`: the seed's experiment in the simulation
/// ([`crate::pagecache::seed_bench`]).
fn seed_preset_bench(
    a: &super::args::BenchDontcacheArgs,
) -> Result<(), Box<dyn std::error::Error>> {
    use crate::pagecache::seed_bench::{parse_designs, parse_paths, seed_bench, SeedBenchConfig};
    use crate::pagecache::seed_presets::SeedPreset;
    use crate::pagecache::threaded::NullBlkDevice;
    use crate::pagecache::threaded_seed_bench::{check_threaded_size, seed_bench_threaded};
    use crate::perf::bench_common::parse_size;
    let threaded = match a.runtime.as_str() {
        "deterministic" => false,
        "threaded" => true,
        other => {
            return Err(format!(
                "--runtime {other}: unknown runtime (known: deterministic, threaded)"
            )
            .into())
        }
    };
    let name = a.preset.as_deref().unwrap_or_default();
    let preset = SeedPreset::by_name(name).map_err(|e| format!("--preset: {e}"))?;
    let nomerge = preset == crate::pagecache::seed_presets::NOMERGE;
    if nomerge && threaded {
        return Err(
            "--preset nomerge: needs --runtime deterministic (its waits are the driver's clock's)"
                .into(),
        );
    }
    if let (Some(n), false) = (a.rounds, nomerge) {
        return Err(format!(
            "--rounds {n}: counts the nomerge preset's rounds; {} runs for --seconds",
            preset.name
        )
        .into());
    }
    if nomerge && a.trace.is_some() {
        return Err("--trace: traces one write of seed-writes' design, not a nomerge round (without --preset nomerge)".into());
    }
    let mut cfg = SeedBenchConfig::new(preset);
    cfg.designs = parse_designs(&a.design).map_err(|e| format!("--design: {e}"))?;
    cfg.paths = parse_paths(&a.path).map_err(|e| format!("--path: {e}"))?;
    cfg.seconds = u64::from(a.seconds);
    cfg.cgroup_v2 = match a.cgroup.as_str() {
        "v1" => false,
        "v2" => true,
        other => {
            return Err(format!("--cgroup {other}: unknown cgroup version (known: v1, v2)").into())
        }
    };
    if let Some(hz) = a.hz {
        if ![100, 250, 300, 1000].contains(&hz) {
            return Err(
                format!("--hz {hz}: not a CONFIG_HZ choice (known: 100, 250, 300, 1000)").into(),
            );
        }
        cfg.hz = hz;
    }
    if let Some(name) = &a.machine {
        if threaded {
            return Err(format!(
                "--machine {name}: needs --runtime deterministic (the threaded runtime runs on this host's own hardware)"
            )
            .into());
        }
        crate::pagecache::seed_machine::SeedMachine::by_name(name)
            .map_err(|e| format!("--machine: {e}"))?
            .apply(&mut cfg);
    }
    if let Some(l) = &a.limit {
        let bytes = parse_size(l).map_err(|e| format!("--limit: {e}"))?;
        if bytes < 4 << 20 {
            return Err(format!(
                "--limit: {l} is below the 4M minimum (the 1 MiB syscalls of the seed's presets)"
            )
            .into());
        }
        if !bytes.is_multiple_of(1 << 20) {
            // The range is a multiple of the limit and is walked in 1 MiB syscalls.
            return Err(format!(
                "--limit: {l} is not a whole number of MiB (the range is walked in whole syscalls)"
            )
            .into());
        }
        cfg.limit_bytes = bytes;
    }
    if a.page_reporting {
        cfg.page_reporting_order = Some(bio_core::mm::page_reporting::PAGEBLOCK_ORDER);
    }
    use crate::pagecache::nvme_device::{Completion, CompletionIrq, NvmeModel};
    use bio_core::kernel::CpuId;
    if cfg.machine.is_none() {
        cfg.device = NvmeModel::for_device(
            Completion::parse(&a.device).map_err(|e| format!("--device: {e}"))?,
        );
    }
    let virtio = cfg.device.completion == Completion::WhenQueueEmpty;
    if let Some(text) = &a.irq_cpu {
        if !virtio {
            return Err(format!(
                "--irq-cpu {text}: needs --device virtio-blk (NVMe completes on the submitting CPU's own vector)"
            )
            .into());
        }
        cfg.device.irq = CompletionIrq::OneVector(CpuId(parse_irq_cpu(text)?));
    }
    if let (Some(g), false) = (&a.device_gbps, threaded) {
        cfg.device.bandwidth = parse_gbps(g)?;
    }
    if let (Some(path), false) = (&a.costs, threaded) {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--costs {}: {e}", path.display()))?;
        cfg.costs =
            crate::perf::dontcache_costs::PageCosts::parse_file(&text, &path.display().to_string())
                .map_err(|e| format!("--costs: {e}"))?;
    }
    if threaded {
        if virtio {
            return Err("--device virtio-blk: needs --runtime deterministic (the threaded runtime's device is null_blk)".into());
        }
        if a.device_gbps.is_some() {
            return Err("--device-gbps: needs --runtime deterministic (the threaded runtime's device is null_blk)".into());
        }
        if a.costs.is_some() {
            return Err("--costs: needs --runtime deterministic (the threaded runtime does real work, it prices nothing)".into());
        }
        if a.page_reporting {
            return Err("--page-reporting: needs --runtime deterministic (the threaded runtime's allocations are this machine's own, not priced)".into());
        }
        if a.trace.is_some() {
            return Err("--trace: needs --runtime deterministic (the threaded runtime records no trace of a preset run)".into());
        }
        check_threaded_size(&cfg)?;
        let report = seed_bench_threaded(&cfg, NullBlkDevice::default())?;
        print!("{report}");
        if !report.oracle_ok() {
            // A failed verdict is the model's result, not a usage error: exit 1 (main's errors
            // exit 2).
            eprintln!("biosim: the oracle failed on a threaded run (see the FAILED lines above)");
            std::process::exit(1);
        }
        return Ok(());
    }
    if let Some(out) = &a.trace {
        if cfg.cgroup_v2 {
            return Err("--trace: traces one write on cgroup v1 (without --cgroup v2)".into());
        }
        if a.hz.is_some() {
            return Err("--trace: traces one write at the default CONFIG_HZ (without --hz)".into());
        }
        if let Some(m) = &cfg.machine {
            return Err(format!(
                "--trace: traces one write without --machine ({} reports free pages; trace its disk with --device virtio-blk)",
                m.name
            )
            .into());
        }
        if a.page_reporting {
            return Err("--trace: traces one write without --page-reporting".into());
        }
        let out = super::output::Output::check_with("--trace", out, &[], a.force)?;
        let (Ok([design]), Ok([path])) = (
            <[_; 1]>::try_from(cfg.designs.clone()),
            <[_; 1]>::try_from(cfg.paths.clone()),
        ) else {
            return Err("--trace: needs one --design and one --path".into());
        };
        let trace =
            crate::pagecache::seed_bench::traced_write(design, path, &cfg.costs, cfg.device)?;
        out.write(&trace.to_string())?;
        return Ok(());
    }
    if nomerge {
        let report = crate::pagecache::nomerge_bench::nomerge_bench(&cfg, a.rounds)?;
        print!("{report}");
        if !report.oracle_ok() {
            eprintln!("biosim: the oracle failed on a nomerge run (see the FAILED lines above)");
            std::process::exit(1);
        }
        return Ok(());
    }
    let report = seed_bench(&cfg)?;
    print!("{report}");
    if !report.oracle_ok() {
        // As on the threaded runtime: the model's result, not a usage error (exit 1, not 2).
        eprintln!("biosim: the oracle failed on a run (see the FAILED lines above)");
        std::process::exit(1);
    }
    Ok(())
}

/// `biosim bench JOBFILE`: parses the rest of the command line, runs every job of the file and
/// prints its header before the run and its table after; a verify failure exits 1 (the device
/// failed, the input was fine), after everything the run made is removed.
fn job_bench(argv: Vec<std::ffi::OsString>) -> Result<(), Box<dyn std::error::Error>> {
    use super::args::BenchJobArgs;
    use crate::perf::job::{design, run::SimEngine, run_job, verify_only, JobBenchConfig};
    use clap::Parser as _;
    let a = match BenchJobArgs::try_parse_from(std::iter::once("biosim bench".into()).chain(argv)) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    let file = match crate::fio::parse::parse_file(&a.jobfile) {
        Ok(f) => f,
        Err(e) if !a.jobfile.exists() && !a.jobfile.to_string_lossy().contains(['/', '.']) => {
            return Err(format!(
                "`{}` is neither a bench (loop, dontcache, explore) nor a job file: {e}",
                a.jobfile.display()
            )
            .into())
        }
        Err(e) => return Err(e.into()),
    };
    if a.verify_only {
        for job in &file.jobs {
            match verify_only(job) {
                Ok(text) => print!("{text}"),
                Err(e) => return job_failed(e),
            }
        }
        return Ok(());
    }
    let nullb = a
        .nullb
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| format!("--nullb {kv}: expected KEY=VAL"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let engine = match a.engine.as_deref() {
        None => None,
        Some("sync") => Some(SimEngine::Sync),
        Some("uring" | "io_uring") => Some(SimEngine::Uring),
        Some(e) => {
            return Err(format!("--engine: unknown engine `{e}` (expected sync or uring)").into())
        }
    };
    let cfg = JobBenchConfig {
        device: design::parse_device(&a.device)?,
        variants: design::parse_variants(&a.variant)?,
        compare: design::parse_compare(&a.compare)?,
        engine,
        rounds: a.rounds as usize,
        dir: a.dir,
        force: a.force,
        nullb,
        progress: true,
        kernel: design::parse_kernel_config(&a.kernel_config)?,
    };
    let inputs: Vec<&std::path::Path> = std::iter::once(a.jobfile.as_path())
        .chain(file.jobs.iter().filter_map(|j| j.filename.as_deref()))
        .collect();
    let json = a
        .json
        .as_deref()
        .map(|p| super::output::Output::check("--json", p, &inputs))
        .transpose()?;
    // With `--json -` standard output is the JSON alone; the human text goes to stderr.
    let to_stderr = json.as_ref().is_some_and(super::output::Output::is_stdout);
    let say = |text: &str| {
        if to_stderr {
            eprint!("{text}");
        } else {
            print!("{text}");
            use std::io::Write as _;
            let _ = std::io::stdout().flush();
        }
    };
    let mut reports = Vec::new();
    for (i, job) in file.jobs.iter().enumerate() {
        if i > 0 {
            say("\n");
        }
        let mut head = |h: &str| say(h);
        match run_job(&cfg, job, &mut head) {
            Ok(r) => {
                say(&r.to_string());
                reports.push(r.to_json());
            }
            Err(e) => return job_failed(e),
        }
    }
    if let Some(out) = json {
        let text = serde_json::to_string_pretty(&serde_json::json!({
            "jobfile": a.jobfile.display().to_string(),
            "kernel_config": {
                "name": cfg.kernel.name(),
                "kconfig": cfg.kernel.config().describe(),
            },
            "jobs": reports,
        }))? + "\n";
        out.write(&text)?;
    }
    Ok(())
}

/// A job's error: a verify failure exits 1 here (everything the run made is already gone);
/// anything else goes back to `main` (exit 2).
fn job_failed(e: crate::perf::job::JobError) -> Result<(), Box<dyn std::error::Error>> {
    if e.exit_code() == 1 {
        eprintln!("biosim: {e}");
        std::process::exit(1);
    }
    Err(e.into())
}

#[cfg(test)]
mod tests {
    use super::{civil_date, parse_gbps, parse_irq_cpu};

    #[test]
    fn civil_date_counts_leap_days_and_eras() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(951_782_400), "2000-02-29");
        assert_eq!(civil_date(951_868_800), "2000-03-01");
        assert_eq!(civil_date(4_107_456_000), "2100-02-28");
        assert_eq!(civil_date(4_107_542_400), "2100-03-01");
        assert_eq!(civil_date(1_796_515_199), "2026-12-05");
        assert_eq!(civil_date(1_796_515_200), "2026-12-06");
    }

    #[test]
    fn irq_cpu_is_a_cpu_of_the_machine() {
        assert_eq!(parse_irq_cpu("0"), Ok(0));
        assert_eq!(parse_irq_cpu("1"), Ok(1));
        for bad in ["2", "-1", "cpu1", "", "1 ", "+1", "01"] {
            let e = parse_irq_cpu(bad).unwrap_err();
            assert!(e.starts_with(&format!("--irq-cpu {bad}: not a CPU")), "{e}");
        }
    }

    #[test]
    fn device_gbps_is_a_finite_bandwidth_in_range() {
        assert_eq!(parse_gbps("5.7"), Ok(5.7e9));
        assert_eq!(parse_gbps("0.01"), Ok(1e7));
        assert_eq!(parse_gbps("1000"), Ok(1e12));
        for bad in [
            "0", "0.009", "1000.5", "-3", "NaN", "inf", "3.2GB", "", "5,7",
        ] {
            let e = parse_gbps(bad).unwrap_err();
            assert!(e.starts_with(&format!("--device-gbps {bad}:")), "{e}");
        }
    }
}
