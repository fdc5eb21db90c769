//! The simulated page cache under the discrete-event driver (bio-sim/src/pagecache): data
//! integrity through the cache on every design and path (also under a limit that forces
//! reclaim), the dropbehind oracle and its buggy twins, the seed bench's output shape, and the
//! CLI's bad input.

use bio_core::mm::dontcache::{DontcacheDesign, WritebackPath};
use bio_sim::pagecache::driver::{integrity_run, run, DriverConfig, RunResult, Twin};
use bio_sim::pagecache::dropbehind_oracle::{
    baseline_leaves_irq_completed, check_dontcache_run, end_dropbehind_in_task_only, fixed_in_run,
    no_dropbehind_survives_writeback, v3_leaves_only_what_its_batch_skipped,
};
use bio_sim::pagecache::seed_bench::{all_designs, design_name, path_name};
use bio_sim::pagecache::seed_presets::Workload;
use std::process::Command;

const PATHS: [WritebackPath; 2] = [WritebackPath::Iomap, WritebackPath::BufferHead];

/// A small run: 64 KiB syscalls over `range` bytes.
fn small(
    design: DontcacheDesign,
    path: WritebackPath,
    workload: Workload,
    range: u64,
) -> DriverConfig {
    let mut c = DriverConfig::new(design, path, workload);
    c.io_bytes = 64 << 10;
    c.range_bytes = range;
    c
}

fn dontcache_writes(design: DontcacheDesign, path: WritebackPath, twin: Option<Twin>) -> RunResult {
    let mut c = small(design, path, Workload::Writes, 2 << 20);
    c.dontcache = true;
    c.force_dontcache = true;
    c.max_ios = Some(64);
    c.twin = twin;
    run(c).expect("the run completes")
}

#[test]
fn integrity_on_every_design_and_path_without_and_with_dontcache() {
    for design in all_designs() {
        for path in PATHS {
            for dontcache in [false, true] {
                let mut c = small(design, path, Workload::Writes, 1 << 20);
                c.dontcache = dontcache;
                c.force_dontcache = true;
                let r = integrity_run(c).expect("the run completes");
                let what = format!(
                    "{} {} dontcache={dontcache}",
                    design_name(&design),
                    path_name(path)
                );
                assert_eq!(r.refused, None, "{what}");
                assert_eq!(r.corrupt_bytes, 0, "{what}: data read back differs");
                let read_passes = if dontcache { 2 } else { 1 };
                assert_eq!(
                    r.ios,
                    2 * 16 + read_passes * 16,
                    "{what}: 2 write passes + {read_passes} read passes (plain, then DONTCACHE)"
                );
                if dontcache {
                    assert!(
                        r.stats.dropbehind_invalidated_read >= 16 * 16,
                        "{what}: the DONTCACHE read-back dropped its folios: {:?}",
                        r.stats
                    );
                }
            }
        }
    }
}

#[test]
fn integrity_under_a_limit_that_forces_reclaim() {
    for design in all_designs() {
        for path in PATHS {
            for dontcache in [false, true] {
                // 4 MiB written twice through a 1 MiB cache.
                let mut c = small(design, path, Workload::Writes, 4 << 20);
                c.limit_bytes = Some(1 << 20);
                c.dontcache = dontcache;
                c.force_dontcache = true;
                let what = format!(
                    "{} {} dontcache={dontcache}",
                    design_name(&design),
                    path_name(path)
                );
                let r = integrity_run(c).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(r.corrupt_bytes, 0, "{what}: data read back differs");
                assert!(
                    r.peak_cached <= 256,
                    "{what}: peak {} over the limit",
                    r.peak_cached
                );
                if !dontcache {
                    assert!(
                        r.stats.reclaim_evicted > 0,
                        "{what}: reclaim ran: {:?}",
                        r.stats
                    );
                }
            }
        }
    }
}

/// v7's normal 64 KiB writes over 8 MiB in a 2 MiB memcg, on cgroup v2 or v1.
fn v7_writes_in_a_2mib_memcg(path: WritebackPath, v2: bool) -> DriverConfig {
    let mut c = small(
        DontcacheDesign::Bio(bio_core::block::complete_in_task::Variant::V7),
        path,
        Workload::Writes,
        8 << 20,
    );
    c.limit_bytes = Some(2 << 20);
    c.cgroup_v2 = v2;
    c
}

/// On cgroup v2 the dirty throttling is traced where the kernel traces it: the captured
/// ftrace-format trace has a `writeback:balance_dirty_pages` line before every pause (and one for
/// each pause too short to sleep), each matching the live kernel's `print fmt`
/// (tests/data/tracefs-6.18/formats/balance_dirty_pages.format), and their `pause=` (ms) add up
/// to the jiffies paused. Catches a pause without its line, a line in another format, and a pause
/// printed in jiffies.
#[test]
fn on_cgroup_v2_each_pause_is_a_balance_dirty_pages_line_in_the_kernels_format() {
    let mut c = v7_writes_in_a_2mib_memcg(WritebackPath::Iomap, true);
    c.capture = true;
    c.max_ios = Some(256);
    let r = run(c).expect("the run completes");
    let text = r.ftrace.expect("captured");
    let pauses: Vec<i64> = checked_lines(&text, "balance_dirty_pages")
        .into_iter()
        .map(|l| {
            let w = l
                .fields
                .split_whitespace()
                .find(|w| w.starts_with("pause="))
                .unwrap();
            w["pause=".len()..].parse().unwrap()
        })
        .collect();
    let s = &r.stats;
    assert!(s.dirty_throttled > 0, "{s:?}");
    let slept: Vec<&i64> = pauses.iter().filter(|p| **p > 0).collect();
    assert_eq!(slept.len() as u64, s.dirty_throttled, "{pauses:?}");
    let hz = u64::from(bio_core::KernelConfig::default().hz);
    let ms: i64 = slept.iter().copied().sum();
    assert_eq!(ms as u64, s.dirty_paused_jiffies * 1000 / hz, "{pauses:?}");
}

/// `--cgroup v2` through the driver: normal writes over a 2 MiB memcg are paused past the
/// memcg's freerun ceiling (15% of it), which cgroup v1 never does (its global limits are 20% of
/// 24 GiB), reclaim then finds only clean folios, and the data is intact either way.
#[test]
fn on_cgroup_v2_normal_writes_are_throttled_by_their_memcg() {
    for path in PATHS {
        for v2 in [false, true] {
            let c = v7_writes_in_a_2mib_memcg(path, v2);
            let what = format!("{} cgroup v2 {v2}", path_name(path));
            let r = integrity_run(c).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(r.corrupt_bytes, 0, "{what}: data read back differs");
            let s = &r.stats;
            if v2 {
                assert!(s.dirty_throttled > 0, "{what}: {s:?}");
                assert_eq!(
                    s.reclaim_dirty_marked, 0,
                    "{what}: reclaim saw only clean: {s:?}"
                );
            } else {
                assert_eq!(s.dirty_throttled, 0, "{what}: {s:?}");
                assert!(
                    s.reclaim_dirty_marked > 0,
                    "{what}: reclaim met dirty folios: {s:?}"
                );
            }
        }
    }
}

/// `balance_dirty_pages()`'s pauses are sleeps of the writer: on cgroup v2 a normal writer
/// over a 2 MiB memcg is paused, and the run lasts at least the sum of its pauses (one task:
/// they do not overlap) plus its own CPU time, at `CONFIG_HZ` 250 and 1000 (`DriverConfig::hz`,
/// whose jiffy the pauses count in: the run is shorter at 1000). Catches a driver that lets
/// a paused task run on at once (the pauses would add up to more than the run), or one that
/// ignores the configured HZ.
#[test]
fn a_dirty_throttled_writer_sleeps_its_pauses() {
    for path in PATHS {
        let what = path_name(path);
        let mut paused = Vec::new();
        for hz in [250, 1000] {
            let mut c = v7_writes_in_a_2mib_memcg(path, true);
            c.max_ios = Some(512);
            c.hz = hz;
            let r = run(c).expect("the run completes");
            let s = &r.stats;
            assert!(s.dirty_throttled > 10, "{what} HZ={hz}: {s:?}");
            let paused_ns = s.dirty_paused_jiffies * 1_000_000_000 / u64::from(hz);
            let task_ns = r.cpu_time[0].task_ns;
            assert!(
                r.elapsed_ns >= paused_ns + task_ns,
                "{what} HZ={hz}: {} ns run, {paused_ns} ns paused, {task_ns} ns on the CPU",
                r.elapsed_ns
            );
            paused.push(r.elapsed_ns);
        }
        assert!(
            paused[1] < paused[0],
            "{what}: shorter jiffies, shorter pauses, a shorter run: {paused:?}"
        );
    }
}

#[test]
fn reads_under_a_limit_are_verified_and_reclaimed() {
    for path in PATHS {
        let mut c = small(DontcacheDesign::Baseline, path, Workload::Reads, 4 << 20);
        c.limit_bytes = Some(1 << 20);
        c.max_ios = Some(128);
        let r = run(c).expect("the run completes");
        assert_eq!(r.corrupt_bytes, 0);
        assert!(r.stats.reclaim_evicted > 0, "{:?}", r.stats);
        assert!(r.peak_cached <= 256);
    }
}

#[test]
fn the_oracle_passes_the_fixed_designs() {
    let mut fixed = 0;
    for design in all_designs() {
        for path in PATHS {
            let r = dontcache_writes(design, path, None);
            fixed += usize::from(fixed_in_run(&design, path, &r));
            for (name, v) in check_dontcache_run(&design, path, &r) {
                assert_eq!(
                    v,
                    Ok(()),
                    "{} {}: {name}",
                    design_name(&design),
                    path_name(path)
                );
            }
        }
    }
    assert!(fixed >= 9, "the fixed designs were checked: {fixed}");
}

#[test]
fn baseline_is_the_buggy_twin_of_the_fixed_designs() {
    // iomap: the folios are dropbehind and their IRQ completions leave them.
    let r = dontcache_writes(DontcacheDesign::Baseline, WritebackPath::Iomap, None);
    assert_eq!(baseline_leaves_irq_completed(&r), Ok(()));
    let e = no_dropbehind_survives_writeback(&r).unwrap_err();
    assert!(e.contains("survived their completed writeback"), "{e}");
    let e = end_dropbehind_in_task_only(&r).unwrap_err();
    assert!(e.contains("outside task context"), "{e}");
    // buffer_head: the same (bdev writes take iomap's write path, FGP_DONTCACHE included).
    let r = dontcache_writes(DontcacheDesign::Baseline, WritebackPath::BufferHead, None);
    assert_eq!(baseline_leaves_irq_completed(&r), Ok(()));
    assert!(no_dropbehind_survives_writeback(&r).is_err());
    // ... which a fixed design is not: its folios were dropbehind and are gone.
    let v7 = dontcache_writes(
        DontcacheDesign::parse("v7").unwrap(),
        WritebackPath::BufferHead,
        None,
    );
    assert!(baseline_leaves_irq_completed(&v7).is_err());
    // RFC v3 leaves at most the folios its batch took in and did not drop; baseline, whose
    // folios never reach a batch, fails that check.
    for path in PATHS {
        let v3 = dontcache_writes(DontcacheDesign::V3, path, None);
        assert_eq!(
            v3_leaves_only_what_its_batch_skipped(&v3),
            Ok(()),
            "{path:?}"
        );
    }
    assert!(v3_leaves_only_what_its_batch_skipped(&r).is_err());
}

#[test]
fn a_driver_that_drops_complete_in_task_is_caught() {
    let v7 = all_designs()
        .into_iter()
        .find(|d| design_name(d) == "v7")
        .expect("v7");
    for path in PATHS {
        let r = dontcache_writes(v7, path, Some(Twin::DropsCompleteInTask));
        assert!(no_dropbehind_survives_writeback(&r).is_err(), "{r:?}");
        assert!(end_dropbehind_in_task_only(&r).is_err());
        // ... and the baseline check, turned round, accepts it: it is the kernel's gap.
        assert_eq!(baseline_leaves_irq_completed(&r), Ok(()));
    }
}

#[test]
fn baseline_refuses_bdev_dontcache_unless_forced() {
    for workload in [Workload::Reads, Workload::Writes] {
        let mut c = small(
            DontcacheDesign::Baseline,
            WritebackPath::Iomap,
            workload,
            1 << 20,
        );
        c.dontcache = true;
        c.max_ios = Some(4);
        let r = run(c).expect("the run completes");
        assert_eq!(r.refused, Some(bio_core::errno::Errno::EOPNOTSUPP));
        assert_eq!(r.bytes, 0);
    }
}

fn biosim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_biosim"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `biosim` with `args` then `extra`, which must exit 0: its stdout.
fn biosim_ok(args: &[&str], extra: &[&str]) -> String {
    let args = [args, extra].concat();
    let (code, out, err) = biosim(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

/// `--preset nomerge` through the CLI: a row per design and path, the series' iomap row merging 8
/// regular folios a round and its wait printed, the others none; every oracle line ok, exit 0.
#[test]
fn nomerge_prints_a_row_per_design_and_path_and_passes_the_oracle() {
    let out = biosim_ok(
        &["bench", "dontcache", "--preset", "nomerge"],
        &["--design", "v7,xfs-wq", "--rounds", "5"],
    );
    let row = |design: &str, path: &str| {
        out.lines()
            .find(|l| l.split_whitespace().take(2).eq([design, path]))
            .unwrap_or_else(|| panic!("no {design} {path} row in:\n{out}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let v7 = row("v7", "iomap");
    assert_eq!(v7[2], "5", "{out}");
    assert_eq!((v7[4].as_str(), v7[5].as_str()), ("2.00", "8.00"), "{out}");
    assert_ne!(v7[6], "-", "{out}");
    for (design, path, bios) in [
        ("v7", "buffer-head", "24.00"),
        ("xfs-wq", "iomap", "3.00"),
        ("xfs-wq", "buffer-head", "24.00"),
    ] {
        let r = row(design, path);
        assert_eq!(
            (r[4].as_str(), r[5].as_str(), r[6].as_str()),
            (bios, "0.00", "-"),
            "{out}"
        );
    }
    let oracle: Vec<&str> = out.lines().filter(|l| l.contains(": oracle: ")).collect();
    // Five checks a row; xfs-wq on buffer_head (which XFS lacks) is not a fixed design: one
    // dropbehind check instead of two.
    assert_eq!(oracle.len(), 4 * 5 - 1, "{out}");
    assert!(oracle.iter().all(|l| l.ends_with(": ok")), "{out}");
}

#[test]
fn the_bench_prints_the_seed_tables() {
    let (code, out, err) = biosim(&[
        "bench",
        "dontcache",
        "--preset",
        "seed-writes",
        "--design",
        "baseline",
        "--path",
        "buffer-head",
        "--seconds",
        "1",
        "--limit",
        "4M",
    ]);
    assert_eq!(code, 0, "{err}");
    for want in [
        "seed-writes: 1 MiB pwritev2 over 16 MiB with a cache limit of 4 MiB",
        "per-page costs:",
        "baseline (buffer-head): RWF_DONTCACHE on the block device: EOPNOTSUPP",
        "===== WRITES (baseline, buffer-head, dontcache forced) =====",
        " sec   normal MB/s  dontcache MB/s",
        "footprint (folios of 1024): normal peak",
        "footprint at each second's end (folios): normal 1024; dontcache ",
        "dropbehind folios left cached after writeback:",
        "completions deferred to task context:",
        "reclaim (normal): scanned",
        "oracle: IRQ-completed folios stay, as the kernel leaves them: ok",
        "design      path          normal MB/s  dontcache MB/s  ratio  dontcache peak  left",
    ] {
        assert!(out.contains(want), "missing {want:?}:\n{out}");
    }
    let table: Vec<&str> = out.lines().skip_while(|l| !l.starts_with(" sec")).collect();
    assert!(table[2].starts_with("   1  "), "{out}");
    assert!(
        table[3].starts_with("----"),
        "one row per simulated second: {out}"
    );
    assert!(
        table[4].starts_with(" avg  ") && table[4].contains("ratio"),
        "{out}"
    );
}

/// The "avg" row's two MB/s of a one-design seed table.
fn avg_mb(out: &str) -> (f64, f64) {
    let row = out
        .lines()
        .find(|l| l.starts_with(" avg  "))
        .unwrap_or_else(|| panic!("no avg row:\n{out}"));
    let mut w = row.split_whitespace().skip(1).map(|x| x.parse::<f64>());
    match (w.next(), w.next()) {
        (Some(Ok(n)), Some(Ok(d))) => (n, d),
        _ => panic!("avg row {row:?}"),
    }
}

/// `--costs FILE` and `--device-gbps` reach the driver. DONTCACHE writes on the NVMe-like device
/// are CPU-bound on the writer's CPU: with every committed cost times 10 they run twice as fast
/// as with every cost times 20 (costs this high keep the runs short). And a 0.05 GB/s device
/// binds both runs to its 50 MB/s and a 4 MiB cache's worth. The header prints the file's costs and names it and the bandwidth.
/// Catches a file parsed but not used, a bandwidth not passed to the device, or either not shown.
#[test]
fn a_costs_file_and_a_device_bandwidth_price_the_run() {
    use bio_sim::perf::dontcache_costs::PageCosts;
    let dir = tempfile::tempdir().unwrap();
    let costs_times = |k: f64| {
        let file = dir.path().join(format!("x{k}.txt"));
        let text: String = PageCosts::MEASURED
            .fields()
            .iter()
            .map(|(n, v)| format!("{n} {}\n", v * k))
            .collect();
        std::fs::write(&file, format!("# every committed cost times {k}\n{text}")).unwrap();
        file.display().to_string()
    };
    let run = |extra: &[&str]| {
        biosim_ok(
            &[
                "bench",
                "dontcache",
                "--preset",
                "seed-writes",
                "--design",
                "v7",
                "--path",
                "iomap",
                "--seconds",
                "1",
            ],
            extra,
        )
    };
    let (x20, x10) = (costs_times(20.0), costs_times(10.0));
    let slow_cpu = run(&["--costs", &x20]);
    let fast_cpu = run(&["--costs", &x10]);
    for want in [
        format!("  source: {x10} (--costs): every committed cost times 10"),
        "  copy_ns                 4480 ns".to_owned(),
        "  writeback_submit_ns     8110 ns".to_owned(),
    ] {
        assert!(fast_cpu.contains(&want), "missing {want:?}:\n{fast_cpu}");
    }
    assert!(!fast_cpu.contains("device bandwidth"), "{fast_cpu}");
    let ((_, d20), (_, d10)) = (avg_mb(&slow_cpu), avg_mb(&fast_cpu));
    assert!(
        (1.8..=2.2).contains(&(d10 / d20)),
        "DONTCACHE {d20} -> {d10} MB/s with the costs halved"
    );
    // A 4 MiB cache: the second's writes are the device's 50 MB and what the cache holds.
    let slow_dev = run(&["--device-gbps", "0.05", "--limit", "4M"]);
    assert!(
        slow_dev.contains("device bandwidth: 0.05 GB/s (--device-gbps; the default is 3.2 GB/s)"),
        "{slow_dev}"
    );
    let (n, d) = avg_mb(&slow_dev);
    for mb in [n, d] {
        assert!(
            (45.0..=50.0 + 4.2).contains(&mb),
            "{mb} MB/s on a 50 MB/s device under a 4 MiB cache"
        );
    }
}

/// `--machine fc-guest` is this machine's flags in one word: the same run, line for line, as
/// `--device virtio-blk --page-reporting` (cgroup v1 and HZ 250 being the defaults), plus the
/// line naming the machine; its device and reporting lines are there, so the runs are not both
/// the NVMe-like default. `--limit` and `--irq-cpu` still apply on top. (Its reads' 24105 MiB
/// limit is checked in seed_machine.rs: a run of it is too long for a debug build.)
/// Catches a machine that sets too little or too much, or `--limit`/`--irq-cpu` it overrides.
#[test]
fn fc_guest_is_this_machines_flags_in_one_word() {
    let run = |extra: &[&str]| {
        biosim_ok(
            &[
                "bench",
                "dontcache",
                "--design",
                "v6",
                "--path",
                "iomap",
                "--seconds",
                "1",
                "--limit",
                "8M",
                // A slow disk keeps the debug build's runs short (the flags' equality is the
                // point).
                "--device-gbps",
                "0.1",
            ],
            extra,
        )
    };
    let machine_line = "machine fc-guest: the Firecracker guest of the live companion (Linux \
                        6.18.44, measured 2026-12-05), 2 CPUs, 24105 MiB, CONFIG_HZ=250, cgroup \
                        v1, a one-queue virtio-blk disk, free page reporting\n";
    for (preset, irq) in [
        ("seed-writes", &[][..]),
        ("seed-writes", &["--irq-cpu", "0"][..]),
        ("seed-reads", &[][..]),
    ] {
        let named = run(&[&["--preset", preset, "--machine", "fc-guest"], irq].concat());
        let flags = run(&[
            &[
                "--preset",
                preset,
                "--device",
                "virtio-blk",
                "--page-reporting",
            ],
            irq,
        ]
        .concat());
        assert!(named.contains(machine_line), "{named}");
        for want in [
            "device: virtio-blk (Firecracker's Sync engine)",
            "free page reporting (a VM guest, page_reporting_order 9)",
            "with a cache limit of 8 MiB",
            if irq.is_empty() { "on CPU1" } else { "on CPU0" },
        ] {
            assert!(named.contains(want), "missing {want:?}:\n{named}");
        }
        assert_eq!(
            named.replacen(machine_line, "", 1),
            flags,
            "{preset} {irq:?}"
        );
    }
}

/// `--runtime threaded`: the same tables, per wall-clock second, on null_blk, with the oracle's
/// verdicts (no figure is checked).
#[test]
fn the_threaded_bench_prints_the_seed_tables() {
    let (code, out, err) = biosim(&[
        "bench",
        "dontcache",
        "--preset",
        "seed-writes",
        "--runtime",
        "threaded",
        "--design",
        "v7",
        "--path",
        "buffer-head",
        "--seconds",
        "1",
        "--limit",
        "4M",
    ]);
    assert_eq!(code, 0, "{err}");
    for want in [
        "seed-writes: 1 MiB pwritev2 over 16 MiB with a cache limit of 4 MiB, 1 s per run",
        "(threaded runtime: 2 simulated CPUs as OS threads, null_blk irqmode=1 (softirq) with memory backing, real copies, real time)",
        "===== WRITES (v7, buffer-head, threaded) =====",
        " avg  ",
        "CPU per MiB (getrusage, whole process): normal ",
        "oracle: no dropbehind folio survives writeback: ok",
        "oracle: folio_end_dropbehind in task context only: ok",
    ] {
        assert!(out.contains(want), "missing {want:?}:\n{out}");
    }
    assert!(!out.contains("per-page costs"), "{out}");
}

/// A read of four times the limit on a VM guest with free page reporting: each page allocated
/// from memory the host took back costs `reported_touch_ns` on the reading CPU. Normal reads pay
/// it for the whole limit (the memory they fill), DONTCACHE reads only for their peak; the run's
/// time grows by exactly that, and nothing else changes. Catches a driver that does not price the
/// host faults, prices them without reporting, or charges them to another CPU.
#[test]
fn with_page_reporting_a_read_pays_a_host_fault_per_page_it_takes_from_the_host() {
    let design = DontcacheDesign::Bio(bio_core::block::complete_in_task::Variant::V7);
    for dontcache in [false, true] {
        let go = |order: Option<u32>| {
            let mut c = small(design, WritebackPath::Iomap, Workload::Reads, 8 << 20);
            c.limit_bytes = Some(2 << 20);
            c.dontcache = dontcache;
            c.max_ios = Some(128);
            c.page_reporting_order = order;
            run(c).expect("the run completes")
        };
        let (plain, vm) = (go(None), go(Some(4)));
        let what = format!("dontcache={dontcache}: {:?}", vm.page_reporting);
        assert_eq!(plain.stats.reported_pages_allocated, 0, "{what}");
        let faults = vm.stats.reported_pages_allocated;
        let want = if dontcache { vm.peak_cached } else { 512 };
        assert_eq!(faults, want, "{what}");
        assert!(faults > 0 && (!dontcache || faults < 128), "{what}");
        // Only the price differs: the same I/O, the task's CPU longer by the faults.
        assert_eq!((vm.bytes, vm.ios), (plain.bytes, plain.ios), "{what}");
        let cost = bio_sim::perf::dontcache_costs::PageCosts::MEASURED.reported_touch_ns;
        let extra = vm.cpu_time[0].task_ns - plain.cpu_time[0].task_ns;
        assert!(
            (extra as f64 - faults as f64 * cost).abs() <= faults as f64,
            "{what}: {extra} ns for {faults} faults of {cost} ns"
        );
        assert_eq!(vm.cpu_time[1], plain.cpu_time[1], "{what}");
        assert!(vm.elapsed_ns > plain.elapsed_ns, "{what}");
    }
}

/// Normal writes under a cgroup v1 memcg, on a device that completes a busy period all at once
/// (Firecracker's virtio-blk, `Sync` engine), alternate: the task fills the memcg while the
/// device idles; reclaim meets only dirty folios, wakes the flusher and throttles; the first
/// completion, and so the task's wake-up, comes only when the flusher's whole pass is written.
/// Their time is the task's CPU time plus the device's, where on NVMe the two overlap. DONTCACHE
/// writes, whose requests reach an idle device, run the same on both once their completions
/// come on the same CPU (the task's; where virtio-blk's vector puts them is
/// `on_virtio_blk_the_vectors_cpu_takes_the_completion_work`; a call is one 1 MiB request there,
/// two of 512 KiB on NVMe, priced the same). Catches a
/// virtio-blk device that completes each request at its own end.
#[test]
#[cfg_attr(feature = "bug-virtio-blk-completes-per-request", should_panic)]
fn on_virtio_blk_normal_writes_wait_for_the_flushers_whole_pass() {
    use bio_sim::pagecache::nvme_device::{Completion, CompletionIrq, NvmeModel};
    let design = DontcacheDesign::Bio(bio_core::block::complete_in_task::Variant::V7);
    let go = |completion, dontcache| {
        let mut c = small(design, WritebackPath::Iomap, Workload::Writes, 16 << 20);
        c.io_bytes = 1 << 20;
        c.limit_bytes = Some(4 << 20);
        c.dontcache = dontcache;
        c.max_ios = Some(64);
        c.device = NvmeModel::for_device(completion);
        // Several requests to a flusher's pass over the 4 MiB memcg (one 4 MiB request would
        // complete at the same time either way).
        c.device.max_request_bytes = 512 << 10;
        if completion == Completion::WhenQueueEmpty && dontcache {
            // Its completions on the task's CPU, as NVMe's: only the queueing could differ.
            c.device.irq = CompletionIrq::OneVector(bio_core::kernel::CpuId(0));
        }
        run(c).expect("the run completes")
    };
    for dontcache in [false, true] {
        let (nvme, virtio) = (
            go(Completion::PerRequest, dontcache),
            go(Completion::WhenQueueEmpty, dontcache),
        );
        for r in [&nvme, &virtio] {
            assert_eq!(
                (r.corrupt_bytes, r.bytes),
                (0, 64 << 20),
                "dontcache={dontcache}"
            );
        }
        if dontcache {
            assert_eq!(virtio.elapsed_ns, nvme.elapsed_ns, "DONTCACHE never queues");
            assert_eq!(virtio.stats.flusher_pages, 0);
            continue;
        }
        let dev = NvmeModel::DEFAULT;
        let serial = |r: &RunResult| {
            let flushed = r.stats.flusher_pages * 4096;
            r.cpu_time[0].task_ns as f64 + dev.transfer_ns(flushed) as f64
        };
        let (tn, tv) = (nvme.elapsed_ns as f64, virtio.elapsed_ns as f64);
        assert!(
            tv >= 0.95 * serial(&virtio),
            "virtio-blk: {tv} ns, the task's CPU and the device's time add to {}",
            serial(&virtio)
        );
        assert!(
            tn <= 0.8 * serial(&nvme),
            "NVMe: {tn} ns, they overlap: {}",
            serial(&nvme)
        );
        assert!(
            virtio.stats.reclaim_throttled > 0
                && virtio.stats.reclaim_throttled < nvme.stats.reclaim_throttled
        );
    }
}

/// A captured page-cache run is stamped with the driver's simulated clock: in order, the first
/// completion no sooner than the device's command latency after the first write, and the last
/// invalidation within its last write's completion, though the run fires more events than it
/// lasts microseconds (a stamp per event, the runtime's rule without a driver clock, would run
/// past it).
#[test]
fn a_captured_run_is_stamped_with_the_simulated_clock() {
    use bio_sim::pagecache::nvme_device::NvmeModel;
    use bio_sim::report::ftrace::parse_trace;
    let v7 = DontcacheDesign::Bio(bio_core::block::complete_in_task::Variant::V7);
    let mut c = small(v7, WritebackPath::Iomap, Workload::Writes, 8 << 20);
    c.dontcache = true;
    c.max_ios = Some(128);
    c.capture = true;
    let r = run(c).expect("the run completes");
    let lines = parse_trace(r.ftrace.as_deref().expect("captured")).unwrap();
    let us = |l: &bio_sim::report::ftrace::TraceLine| l.secs * 1_000_000 + u64::from(l.usecs);
    assert!(lines.windows(2).all(|w| us(&w[0]) <= us(&w[1])), "in order");
    let first_write = lines
        .iter()
        .find(|l| l.fields.contains("biosim_on_cpu: pwritev2"))
        .map(us)
        .unwrap();
    let first_irq = lines
        .iter()
        .find(|l| l.event == "irq_handler_entry")
        .map(us)
        .unwrap();
    assert!(
        first_irq >= first_write + NvmeModel::DEFAULT.latency_ns / 1_000,
        "write at {first_write} us, completion at {first_irq} us"
    );
    let last_delete = lines
        .iter()
        .rev()
        .find(|l| l.event == "mm_filemap_delete_from_page_cache")
        .map(us)
        .unwrap();
    let run_us = r.elapsed_ns / 1_000;
    assert!(
        lines.len() as u64 > run_us + 1_000,
        "{} events in {run_us} us",
        lines.len()
    );
    // The last write's completion: the device's latency and transfer, the kworker.
    assert!(
        last_delete <= run_us + 200,
        "last invalidation at {last_delete} us, the run {run_us} us"
    );
}

/// Where a trace's requests complete: for each `block_rq_complete`, its CPU, its context (the
/// hardirq/softirq column: `h`, `s`, or `.` in a task), the name in the last `irq_handler_entry`
/// on that CPU before it (`-` if none), and whether it is in the `BLOCK_SOFTIRQ` that interrupt's
/// exit ran (`softirq_entry: vec=4` the next event on that CPU after the interrupt's own
/// `softirq_raise` and `irq_handler_exit`), not one run later. Enough for these traces (the live
/// recording has only these events); a trace with another softirq run first at the same exit
/// (TIMER's vector comes before BLOCK's) would need a finer rule.
fn completion_sites(
    lines: &[bio_sim::report::ftrace::TraceLine],
) -> std::collections::BTreeSet<(u32, char, String, bool)> {
    use std::collections::HashMap;
    let mut last_irq: HashMap<u32, String> = HashMap::new();
    // Per CPU: 0 nothing, 1 in an interrupt, 2 in the BLOCK_SOFTIRQ its exit ran.
    let mut state: HashMap<u32, u8> = HashMap::new();
    let mut sites = std::collections::BTreeSet::new();
    for l in lines {
        let st = state.entry(l.cpu).or_default();
        match l.event.as_str() {
            "irq_handler_entry" => {
                let name = l.fields.split("name=").nth(1).unwrap_or("?");
                last_irq.insert(l.cpu, name.to_owned());
                *st = 1;
            }
            "softirq_raise" | "irq_handler_exit" if *st == 1 => {}
            "softirq_entry" => {
                *st = if *st == 1 && l.fields.starts_with("vec=4 ") {
                    2
                } else {
                    0
                }
            }
            "block_rq_complete" => {
                let ctx = l.flags.chars().nth(2).unwrap();
                let irq = last_irq.get(&l.cpu).cloned().unwrap_or_else(|| "-".into());
                sites.insert((l.cpu, ctx, irq, *st == 2));
            }
            // The softirq's own work (v7's hand-off to the batch) keeps it in the softirq.
            _ if *st == 2 && l.flags.chars().nth(2) == Some('s') => {}
            _ => *st = 0,
        }
    }
    sites
}

/// The live kernel of this machine (tests/data/tracefs-6.18/virtio-blk-irq-cpu.trace: `dd
/// oflag=direct` pinned to CPU0 writing to ext4 on `vda`): every request, whichever CPU issued
/// it, completes in `BLOCK_SOFTIRQ` on CPU1 after `virtio1-req.0`'s interrupt there. The model's
/// `--device virtio-blk` completes a DONTCACHE write its task on CPU0 issued at the same site, and
/// v7's deferred completion runs in CPU1's kworker. The same check tells apart the model with the
/// vector on the task's CPU (`--irq-cpu 0`) and the NVMe-like device (the submitter's vector,
/// the hardirq).
#[test]
fn virtio_blk_completions_come_where_the_live_kernels_do() {
    use bio_core::kernel::CpuId;
    use bio_sim::pagecache::nvme_device::{Completion, CompletionIrq, NvmeModel};
    use bio_sim::pagecache::seed_bench::traced_write;
    use bio_sim::perf::dontcache_costs::PageCosts;
    use bio_sim::report::ftrace::parse_trace;
    let live = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/data/tracefs-6.18/virtio-blk-irq-cpu.trace"),
    )
    .unwrap();
    // docs/dontcache.md quotes an excerpt of it: every line of the excerpt is the recording's.
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/dontcache.md"),
    )
    .unwrap();
    let excerpt = doc
        .split("virtio-blk-irq-cpu.trace`):\n\n```text\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("docs/dontcache.md quotes the live trace");
    assert!(excerpt.lines().count() >= 4);
    for line in excerpt.lines() {
        assert!(
            live.lines().any(|l| l == line),
            "not in the recording: {line}"
        );
    }
    let live = parse_trace(&live).unwrap();
    assert!(
        live.iter().any(|l| l.event == "block_rq_issue"
            && l.cpu == 0
            && l.fields.starts_with("254,0 WS 1048576")),
        "the live trace has a 1 MiB write issued on CPU0"
    );
    let want = completion_sites(&live);
    assert_eq!(
        want,
        [(1, 's', "virtio1-req.0".to_owned(), true)].into(),
        "the live kernel: CPU1, BLOCK_SOFTIRQ"
    );
    let v7 = DontcacheDesign::Bio(bio_core::block::complete_in_task::Variant::V7);
    let model = |device: NvmeModel| {
        let text = traced_write(v7, WritebackPath::Iomap, &PageCosts::MEASURED, device).unwrap();
        let lines = checked_lines(&text, "block_rq_complete");
        assert!(!lines.is_empty());
        parse_trace(&text).unwrap()
    };
    let virtio = model(NvmeModel::for_device(Completion::WhenQueueEmpty));
    assert_eq!(completion_sites(&virtio), want);
    assert!(virtio
        .iter()
        .any(|l| l.cpu == 0 && l.comm == "biosim/0" && l.fields.contains("pwritev2")));
    let deletes: Vec<_> = virtio
        .iter()
        .filter(|l| l.event == "mm_filemap_delete_from_page_cache")
        .collect();
    assert_eq!(deletes.len(), 4);
    assert!(deletes
        .iter()
        .all(|l| l.cpu == 1 && l.comm.starts_with("kworker/1:")));
    // A BLOCK_SOFTIRQ run later than the interrupt's exit (here after a context switch on that
    // CPU) is told apart.
    let mut later = virtio.clone();
    let exit = later
        .iter()
        .position(|l| l.event == "irq_handler_exit")
        .unwrap();
    let mut switch = later[exit].clone();
    switch.event = "sched_switch".into();
    switch.flags = "d..3.".into();
    later.insert(exit + 1, switch);
    assert_eq!(
        completion_sites(&later),
        [(1, 's', "virtio1-req.0".to_owned(), false)].into()
    );
    // The same check fails the model with the vector on the task's CPU, and the NVMe-like device.
    let on_cpu0 = model(NvmeModel {
        irq: CompletionIrq::OneVector(CpuId(0)),
        ..NvmeModel::for_device(Completion::WhenQueueEmpty)
    });
    assert_eq!(
        completion_sites(&on_cpu0),
        [(0, 's', "virtio1-req.0".to_owned(), true)].into()
    );
    assert_eq!(
        completion_sites(&model(NvmeModel::DEFAULT)),
        [(0, 'h', "nvme0q1".to_owned(), false)].into()
    );
}

/// Where the vector's CPU puts the completion work: with `virtio1-req.0` on CPU1 a DONTCACHE
/// writer on CPU0 pays no interrupt and no completion work (v7's kworker invalidates on CPU1),
/// and the same writes end sooner than with the vector on CPU0, where both land on the writer's
/// CPU.
#[test]
fn on_virtio_blk_the_vectors_cpu_takes_the_completion_work() {
    use bio_core::kernel::CpuId;
    use bio_sim::pagecache::nvme_device::{Completion, CompletionIrq, NvmeModel};
    let v7 = DontcacheDesign::Bio(bio_core::block::complete_in_task::Variant::V7);
    let go = |irq_cpu: u32| {
        let mut c = small(v7, WritebackPath::Iomap, Workload::Writes, 16 << 20);
        c.io_bytes = 1 << 20;
        c.dontcache = true;
        c.max_ios = Some(32);
        c.device = NvmeModel {
            irq: CompletionIrq::OneVector(CpuId(irq_cpu)),
            ..NvmeModel::for_device(Completion::WhenQueueEmpty)
        };
        let r = run(c).expect("the run completes");
        assert_eq!((r.corrupt_bytes, r.bytes), (0, 32 << 20));
        assert_eq!(
            r.stats.dropbehind_invalidated,
            32 * 256,
            "irq on CPU{irq_cpu}"
        );
        r
    };
    let (apart, together) = (go(1), go(0));
    assert_eq!(
        (apart.cpu_time[0].irq_ns, apart.cpu_time[0].worker_ns),
        (0, 0)
    );
    assert_eq!(apart.stats.flusher_pages, 0);
    assert!(apart.cpu_time[1].irq_ns > 0 && apart.cpu_time[1].worker_ns > 0);
    assert_eq!(together.cpu_time[1].irq_ns, 0);
    assert!(together.cpu_time[0].irq_ns > 0 && together.cpu_time[0].worker_ns > 0);
    assert!(
        apart.elapsed_ns < together.elapsed_ns,
        "{} ns apart, {} ns together",
        apart.elapsed_ns,
        together.elapsed_ns
    );
}

/// The lines of `event` in a captured ftrace-format trace, once the whole trace has matched the
/// live kernel's formats (tests/data/tracefs-6.18/formats), which must have `event`'s.
fn checked_lines(text: &str, event: &str) -> Vec<bio_sim::report::ftrace::TraceLine> {
    use bio_sim::report::ftrace::{check_trace, parse_trace, EventFormat};
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/tracefs-6.18/formats");
    let formats: Vec<EventFormat> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| EventFormat::read(&e.unwrap().path()).unwrap())
        .collect();
    assert!(
        formats.iter().any(|f| f.name == event),
        "no format for {event}"
    );
    let bad = check_trace(text, &formats, &["lock_acquire", "lock_release"], &[]);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    parse_trace(text)
        .unwrap()
        .into_iter()
        .filter(|l| l.event == event)
        .collect()
}

/// The `mm_vmscan_throttled` lines of a captured run: `usec_timeout` and `usect_delayed` (us).
fn throttle_lines(r: &RunResult) -> Vec<(u64, u64)> {
    let text = r.ftrace.as_deref().expect("captured");
    let field = |fields: &str, name: &str| -> u64 {
        let w = fields
            .split_whitespace()
            .find(|w| w.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {fields}"));
        w[name.len()..].parse().unwrap()
    };
    checked_lines(text, "mm_vmscan_throttled")
        .into_iter()
        .map(|l| {
            assert!(
                l.fields.ends_with(" reason=VMSCAN_THROTTLE_WRITEBACK"),
                "{l}"
            );
            (
                field(&l.fields, "usec_timeout="),
                field(&l.fields, "usect_delayed="),
            )
        })
        .collect()
}

/// On cgroup v1 each `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)` sleep of the writer ends with
/// one `vmscan:mm_vmscan_throttled` line in the live kernel's format
/// (tests/data/tracefs-6.18/formats/mm_vmscan_throttled.format), `usec_timeout=100000` (HZ/10 at
/// HZ=250), and the `usect_delayed` of the lines add up to the jiffies slept. On virtio-blk the
/// writer sleeps through the flusher's pass (jiffies, not microseconds) and writeback wakes it;
/// on a device that writes 33 pages in more than 100 ms, the timeout ends the sleep first; no
/// sleeper is left at the end. Catches a sleep without its line, a line in another format, a
/// delay in jiffies, and a driver that ignores the timeout (every sleep would end woken).
#[test]
fn each_reclaim_throttle_sleep_is_an_mm_vmscan_throttled_line_and_the_timeout_ends_slow_ones() {
    use bio_sim::pagecache::nvme_device::{Completion, NvmeModel};
    let design = DontcacheDesign::Bio(bio_core::block::complete_in_task::Variant::V7);
    let go = |bandwidth: Option<f64>| {
        let mut c = small(design, WritebackPath::Iomap, Workload::Writes, 16 << 20);
        c.io_bytes = 1 << 20;
        c.limit_bytes = Some(4 << 20);
        c.max_ios = Some(if bandwidth.is_some() { 8 } else { 32 });
        c.device = NvmeModel::for_device(Completion::WhenQueueEmpty);
        if let Some(b) = bandwidth {
            c.device.bandwidth = b;
        }
        c.capture = true;
        run(c).expect("the run completes")
    };
    for (what, bandwidth) in [("virtio-blk", None), ("a 1 MB/s disk", Some(1e6))] {
        let r = go(bandwidth);
        let s = &r.stats;
        let lines = throttle_lines(&r);
        assert!(s.reclaim_throttle_sleeps > 0, "{what}: {s:?}");
        assert_eq!(lines.len() as u64, s.reclaim_throttle_sleeps, "{what}");
        assert_eq!(
            s.reclaim_throttle_sleeps, s.reclaim_throttled,
            "{what}: writers only sleep here"
        );
        assert!(
            lines.iter().all(|(t, d)| *t == 100_000 && *d <= 100_000),
            "{what}: {lines:?}"
        );
        let us: u64 = lines.iter().map(|(_, d)| d).sum();
        assert_eq!(us, s.reclaim_throttle_jiffies * 4000, "{what}");
        assert_eq!(s.nr_writeback_throttled, 0, "{what}: every sleep ended");
        if bandwidth.is_none() {
            assert_eq!(
                s.reclaim_throttle_woken, s.reclaim_throttle_sleeps,
                "{what}: {lines:?}"
            );
            assert!(
                us > 0,
                "{what}: the writer sleeps through the pass: {lines:?}"
            );
        } else {
            let timed_out = s.reclaim_throttle_sleeps - s.reclaim_throttle_woken;
            assert!(timed_out > 0, "{what}: {s:?}");
            // A timed-out sleep prints the whole timeout (a woken one may too, at its last
            // jiffy).
            assert!(
                lines.iter().filter(|(_, d)| *d == 100_000).count() as u64 >= timed_out,
                "{what}: {lines:?}"
            );
        }
    }
}

/// `--trace` takes the device options: a traced write on virtio-blk at 5.7 GB/s with its vector
/// on CPU0 completes there, in the softirq of `virtio1-req.0`, at the faster device's time.
#[test]
fn trace_follows_the_device_options() {
    let trace = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_biosim"))
            .args([
                "bench",
                "dontcache",
                "--preset",
                "seed-writes",
                "--design",
                "v7",
            ])
            .args(["--path", "iomap", "--trace", "-", "--device", "virtio-blk"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        bio_sim::report::ftrace::parse_trace(&text).unwrap()
    };
    let at = |lines: &[bio_sim::report::ftrace::TraceLine], event: &str| {
        let l = lines.iter().find(|l| l.event == event).unwrap();
        (l.cpu, l.secs * 1_000_000 + u64::from(l.usecs))
    };
    let slow = trace(&[]);
    let fast = trace(&["--device-gbps", "5.7", "--irq-cpu", "0"]);
    assert_eq!(at(&slow, "softirq_entry").0, 1);
    let (cpu, fast_us) = at(&fast, "block_rq_complete");
    assert_eq!(cpu, 0);
    assert!(fast_us < at(&slow, "block_rq_complete").1);
}

#[test]
fn bad_bench_input_is_exit_2_with_a_clear_message() {
    // `--trace` of one v7/iomap seed write, with `extra` options.
    let one_traced_write = |extra: &[&'static str]| {
        let mut v = vec![
            "--preset",
            "seed-writes",
            "--design",
            "v7",
            "--path",
            "iomap",
            "--trace",
            "-",
        ];
        v.extend_from_slice(extra);
        v
    };
    // `--preset nomerge` and `extra`.
    let on_nomerge = |extra: &[&'static str]| [&["--preset", "nomerge"][..], extra].concat();
    // `--preset seed-writes --machine fc-guest` and `extra`.
    let on_fc_guest = |extra: &[&'static str]| {
        let mut v = vec!["--preset", "seed-writes", "--machine", "fc-guest"];
        v.extend_from_slice(extra);
        v
    };
    for (args, want) in [
        (
            vec!["--preset", "seed-x"],
            "--preset: unknown preset 'seed-x' (known: seed-reads, seed-writes, nomerge)",
        ),
        (
            on_nomerge(&["--runtime", "threaded"]),
            "--preset nomerge: needs --runtime deterministic",
        ),
        (
            vec![
                "--preset", "nomerge", "--design", "v7", "--path", "iomap", "--trace", "-",
            ],
            "--trace: traces one write of seed-writes' design, not a nomerge round",
        ),
        (
            vec!["--preset", "seed-writes", "--rounds", "10"],
            "--rounds 10: counts the nomerge preset's rounds; seed-writes runs for --seconds",
        ),
        (
            on_nomerge(&["--rounds", "0"]),
            "invalid value '0' for '--rounds <ROUNDS>'",
        ),
        (
            on_nomerge(&["--rounds", "10", "--rounds", "20"]),
            "the argument '--rounds <ROUNDS>' cannot be used multiple times",
        ),
        (
            on_nomerge(&["--design", "v7,v7"]),
            "--design: 'v7' is named twice in 'v7,v7'",
        ),
        (
            on_nomerge(&["--design", "v7,all"]),
            "--design: 'all' cannot be part of a list ('v7,all')",
        ),
        (
            on_nomerge(&["--design", "v7,"]),
            "--design: unknown design ``",
        ),
        (
            vec!["--preset", "seed-reads", "--design", "v9"],
            "--design: unknown design `v9`",
        ),
        (
            vec!["--preset", "seed-reads", "--path", "nfs"],
            "--path: unknown path 'nfs' (known: iomap, buffer-head, both)",
        ),
        (
            vec!["--preset", "seed-reads", "--limit", "1M"],
            "--limit: 1M is below",
        ),
        (
            vec!["--preset", "seed-reads", "--size", "1M"],
            "cannot be used with",
        ),
        (vec!["--design", "v7"], "--preset"),
        (
            vec!["--preset", "seed-reads", "--seconds", "0"],
            "--seconds",
        ),
        (
            vec!["--preset", "seed-writes", "--runtime", "fast"],
            "--runtime fast: unknown runtime (known: deterministic, threaded)",
        ),
        (vec!["--runtime", "threaded"], "--preset"),
        (
            vec!["--preset", "seed-writes", "--cgroup", "v3"],
            "--cgroup v3: unknown cgroup version (known: v1, v2)",
        ),
        (vec!["--cgroup", "v2"], "--preset"),
        (
            vec!["--preset", "seed-writes", "--hz", "123"],
            "--hz 123: not a CONFIG_HZ choice (known: 100, 250, 300, 1000)",
        ),
        (vec!["--hz", "1000"], "--preset"),
        (vec!["--page-reporting"], "--preset"),
        (vec!["--device", "virtio-blk"], "--preset"),
        (
            vec!["--preset", "seed-writes", "--device", "virtio"],
            "--device: unknown device 'virtio' (known: nvme, virtio-blk)",
        ),
        (
            vec![
                "--preset",
                "seed-writes",
                "--runtime",
                "threaded",
                "--device",
                "virtio-blk",
            ],
            "--device virtio-blk: needs --runtime deterministic",
        ),
        (vec!["--irq-cpu", "1"], "--preset"),
        (vec!["--machine", "fc-guest"], "--preset"),
        (
            vec!["--preset", "seed-writes", "--machine", "nvme"],
            "--machine: unknown machine 'nvme' (known: fc-guest)",
        ),
        (
            on_fc_guest(&["--device", "nvme"]),
            "'--machine <MACHINE>' cannot be used with '--device <DEVICE>'",
        ),
        (
            on_fc_guest(&["--page-reporting"]),
            "'--machine <MACHINE>' cannot be used with '--page-reporting'",
        ),
        (
            on_fc_guest(&["--cgroup", "v1"]),
            "'--machine <MACHINE>' cannot be used with '--cgroup <CGROUP>'",
        ),
        (
            on_fc_guest(&["--hz", "250"]),
            "'--machine <MACHINE>' cannot be used with '--hz <HZ>'",
        ),
        (
            on_fc_guest(&["--machine", "fc-guest"]),
            "'--machine <MACHINE>' cannot be used multiple times",
        ),
        (
            on_fc_guest(&["--runtime", "threaded"]),
            "--machine fc-guest: needs --runtime deterministic",
        ),
        (
            on_fc_guest(&["--design", "v7", "--path", "iomap", "--trace", "-"]),
            "--trace: traces one write without --machine",
        ),
        (
            vec!["--preset", "seed-writes", "--irq-cpu", "0"],
            "--irq-cpu 0: needs --device virtio-blk",
        ),
        (
            vec![
                "--preset",
                "seed-writes",
                "--device",
                "virtio-blk",
                "--irq-cpu",
                "2",
            ],
            "--irq-cpu 2: not a CPU of the simulated machine (0 to 1: it has 2 CPUs)",
        ),
        (vec!["--device-gbps", "5.7"], "--preset"),
        (
            vec!["--preset", "seed-writes", "--device-gbps", "0"],
            "--device-gbps 0: not a bandwidth in GB/s from 0.01 to 1000",
        ),
        (
            vec!["--preset", "seed-writes", "--device-gbps", "5.7GB"],
            "--device-gbps 5.7GB: not a bandwidth",
        ),
        (
            vec![
                "--preset",
                "seed-writes",
                "--runtime",
                "threaded",
                "--device-gbps",
                "5.7",
            ],
            "--device-gbps: needs --runtime deterministic",
        ),
        (vec!["--costs", "Cargo.toml"], "--preset"),
        (
            vec!["--preset", "seed-writes", "--costs", "no-such-costs.txt"],
            "--costs no-such-costs.txt: No such file",
        ),
        (
            vec!["--preset", "seed-writes", "--costs", "Cargo.toml"],
            "--costs: Cargo.toml:1: `[package]`: expected `NAME NS`",
        ),
        (
            vec![
                "--preset",
                "seed-writes",
                "--runtime",
                "threaded",
                "--costs",
                "no-such-costs.txt",
            ],
            "--costs: needs --runtime deterministic",
        ),
        (vec!["--save-costs", "x.txt"], "--calibrate"),
        (
            vec!["--calibrate", "--save-costs", "Cargo.toml"],
            "--save-costs Cargo.toml: the file exists",
        ),
        (
            vec!["--calibrate", "--save-costs", "-"],
            "--save-costs -: name a file",
        ),
        (
            vec![
                "--preset",
                "seed-reads",
                "--runtime",
                "threaded",
                "--page-reporting",
            ],
            "--page-reporting: needs --runtime deterministic",
        ),
        (
            one_traced_write(&["--page-reporting"]),
            "--trace: traces one write without --page-reporting",
        ),
        (
            one_traced_write(&["--hz", "1000"]),
            "--trace: traces one write at the default CONFIG_HZ (without --hz)",
        ),
        (
            vec!["--preset", "seed-writes", "--limit", "4194305"],
            "--limit: 4194305 is not a whole number of MiB",
        ),
        (
            vec![
                "--preset",
                "seed-reads",
                "--runtime",
                "threaded",
                "--limit",
                "4G",
            ],
            // Refused by the cap, or first by the host's memory (it needs 28 GiB): either way
            // before it starts, naming the option and the range.
            "--limit 4096 MiB: seed-reads makes a range of 8192 MiB, ",
        ),
        (
            vec![
                "--preset",
                "seed-writes",
                "--runtime",
                "threaded",
                "--limit",
                "1048576G",
            ],
            "more than the host's MemAvailable of",
        ),
        (
            one_traced_write(&["--runtime", "threaded"]),
            "--trace: needs --runtime deterministic",
        ),
    ] {
        let mut full = vec!["bench", "dontcache"];
        full.extend(args.iter().copied());
        let (code, _, err) = biosim(&full);
        assert_eq!(code, 2, "{full:?}: {err}");
        assert!(err.contains(want), "{full:?}: want {want:?} in:\n{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
