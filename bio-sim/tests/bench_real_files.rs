//! The real-file benchmarks run end to end at a tiny size: not timed (figures live in
//! docs/performance.md), but every counter they report is checked exactly, so a benchmark that
//! measured the wrong path would fail here.

use bio_sim::perf::dontcache::{dontcache_bench, DontcacheConfig};
use bio_sim::perf::loop_bench::{loop_bench, Engine, LoopBenchConfig, Workload};

fn dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

#[test]
fn the_loop_benchmark_runs_each_path_it_claims_to() {
    for engine in [Engine::Sync, Engine::Uring] {
        loop_bench_runs_each_path(engine);
    }
}

fn loop_bench_runs_each_path(engine: Engine) {
    let d = dir();
    let cfg = LoopBenchConfig {
        dir: d.path().to_owned(),
        file_size: 4 << 20,
        ios_per_cpu: 32,
        cpus: 2,
        rounds: 1,
        workloads: Workload::ALL.to_vec(),
        engine,
        tracepoints: false,
    };
    let r = match loop_bench(&cfg) {
        Ok(r) => r,
        // No O_DIRECT on this filesystem, or io_uring disabled (seccomp, io_uring_disabled).
        Err(e)
            if [
                "Invalid argument",
                "not supported",
                "Operation not permitted",
                "Permission denied",
                "Function not implemented",
            ]
            .iter()
            .any(|m| e.to_string().contains(m)) =>
        {
            eprintln!("skipped: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert!(r.nowait, "ext4 files support RWF_NOWAIT");
    for (w, designs) in &r.results {
        let get = |n: &str| designs.iter().find(|d| d.design == n).unwrap();
        assert!(get("raw").median() > 0.0);
        let base = get("base").stats.unwrap();
        assert_eq!(
            (base.nowait_tried, base.worker_cmds),
            (0, 64),
            "{w:?}: base uses only the worker"
        );
        let v5 = get("v5").stats.unwrap();
        match w {
            Workload::RandWriteOverwrite | Workload::RandRead => {
                assert_eq!(
                    (v5.nowait_done, v5.worker_cmds),
                    (64, 0),
                    "{w:?}: every NOWAIT attempt hits"
                );
            }
            Workload::RandWriteSparse => {
                let nh = get("v5-no-hint").stats.unwrap();
                assert!(
                    nh.nowait_eagain >= 32,
                    "{w:?}: holes refuse NOWAIT writes: {nh:?}"
                );
                assert_eq!(
                    v5.worker_cmds, 64,
                    "{w:?}: every write into a hole ends in the worker"
                );
                match engine {
                    // A synchronous refusal raises the count at once: the hint skips the rest.
                    Engine::Sync => assert!(
                        v5.hint_skipped > 0 && v5.nowait_eagain < nh.nowait_eagain,
                        "{w:?}: {v5:?}"
                    ),
                    // Through io_uring the refusal arrives with the completion, after the next
                    // writes were already tried: the hint reacts late.
                    Engine::Uring => assert!(v5.nowait_eagain >= 1, "{w:?}: {v5:?}"),
                }
            }
        }
    }
    let text = r.to_string();
    assert!(
        text.contains("randwrite-sparse:") && text.contains("vs raw"),
        "{text}"
    );
}

#[test]
fn the_dontcache_benchmark_reports_what_cachestat_sees() {
    let d = dir();
    let r = dontcache_bench(&DontcacheConfig {
        dir: d.path().to_owned(),
        size: 4 << 20,
        rounds: 1,
    })
    .unwrap();
    let pages = (4 << 20) / 4096;
    for row in &r.results {
        assert!(
            row.cached_before.iter().all(|&p| p == 0),
            "the cache was dropped before {}: {row:?}",
            row.mode
        );
    }
    assert_eq!(
        r.cached("buffered", false),
        Some(pages as f64),
        "a buffered write stays cached"
    );
    assert_eq!(r.cached("buffered", true), Some(pages as f64));
    if r.supported {
        // Allocating writes: ext4 converts unwritten extents in a workqueue, so writeback ends in
        // task context and folio_end_dropbehind() drops the folios.
        assert!(
            r.cached("dontcache", true).unwrap() < pages as f64 / 2.0,
            "{r}"
        );
    }
}

#[test]
fn bad_parameters_are_refused_with_their_name() {
    let e = loop_bench(&LoopBenchConfig {
        dir: "/nonexistent/biosim".into(),
        ..LoopBenchConfig::default()
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("--dir /nonexistent/biosim: not a directory"),
        "{e}"
    );
    let e = dontcache_bench(&DontcacheConfig {
        size: 1000,
        ..DontcacheConfig::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("at least 1 MiB"), "{e}");
    assert!(Workload::parse("seqwrite")
        .unwrap_err()
        .to_string()
        .contains("unknown workload `seqwrite`"));
}

#[test]
fn the_calibration_measures_every_cost_it_prints() {
    use bio_sim::perf::dontcache_costs::{calibrate, CalibrateConfig, PageCosts};
    let d = dir();
    let c = calibrate(&CalibrateConfig {
        dir: d.path().to_owned(),
        size: 8 << 20,
        rounds: 2,
        limit: 16 << 20,
        reclaim: false, // the live part is bio-sim/tests/dontcache_live.rs's (opt-in)
        // Not waiting for the host's discard: reported_touch_ns is then ~0; the plumbing only.
        reporting_wait: std::time::Duration::ZERO,
    })
    .unwrap();
    for (name, v) in &c.rounds {
        match *name {
            "irq_ns" | "reclaim_evict_ns" | "reclaim_scan_ns" => {
                assert!(v.is_empty(), "{name} is not measured here: {v:?}")
            }
            // A difference of two reads, unclamped: about 0 without waiting for the host.
            "reported_touch_ns" => {
                assert_eq!(v.len(), 2, "{name}: one value per round");
                assert!(v.iter().all(|x| x.is_finite()), "{name}: {v:?}");
            }
            _ => {
                assert_eq!(v.len(), 2, "{name}: one value per round");
                assert!(
                    v.iter().all(|x| x.is_finite() && *x >= 0.0),
                    "{name}: {v:?}"
                );
            }
        }
    }
    // A cached read copies: it costs something (a measurement that timed nothing would be 0 in
    // every round).
    assert!(
        c.rounds[0].1.iter().any(|&x| x > 0.0),
        "copy_ns: {:?}",
        c.rounds[0]
    );
    let text = c.to_string();
    for (name, committed) in PageCosts::MEASURED.fields() {
        assert!(committed > 0.0, "PageCosts::MEASURED.{name} is committed");
        assert!(text.contains(name), "{text}");
    }
    assert!(
        text.contains("reclaim not measured: not asked for"),
        "{text}"
    );
    assert_eq!(c.medians().irq_ns, PageCosts::MEASURED.irq_ns);
    // What --save-costs writes is what --costs reads: the medians, to the ns.
    let saved = PageCosts::parse_file(&c.costs_file("test run"), "saved").unwrap();
    for ((name, got), (_, want)) in saved.fields().into_iter().zip(c.medians().fields()) {
        assert_eq!(got, want.round().max(0.0), "{name}");
    }
    assert_eq!(
        std::fs::read_dir(d.path()).unwrap().count(),
        0,
        "the file is removed"
    );
    let e = calibrate(&CalibrateConfig {
        dir: d.path().to_owned(),
        size: 1 << 20,
        rounds: 1,
        limit: 16 << 20,
        reclaim: false,
        // Not waiting for the host: the figure is ~0, and this checks the plumbing only.
        reporting_wait: std::time::Duration::ZERO,
    })
    .unwrap_err();
    assert!(e.to_string().contains("at least 4M"), "{e}");
}
