//! `biosim bench dontcache --live`: the committed recording of the live run replays without root
//! (its shape: the block device refuses RWF_DONTCACHE, ext4 keeps DONTCACHE overwrites, XFS drops
//! them, the seed tables have their rows) and prints exactly as the report does; a tampered
//! recording is refused naming the field; bad flags exit 2. With `BIOSIM_LIVE_KERNEL=1`, as root,
//! the real thing runs and leaves no loop device, mount, cgroup or temporary file behind.

use bio_sim::perf::dontcache_live::seed::SeedRun;
use bio_sim::perf::dontcache_live::{live_run, LiveConfig, LiveReport, Part};
use std::path::PathBuf;
use std::process::Command;

fn recording() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/recordings/dontcache-live-6.18.json")
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

fn seed<'a>(r: &'a LiveReport, fs: &str, op: &str) -> &'a SeedRun {
    r.seed
        .iter()
        .find_map(|p| match p {
            Part::Done(s) if s.fs == fs && s.op == op => Some(s),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {op} on {fs} in the recording"))
}

/// The facts of 6.18 a recording must show; `Err` names the first that does not hold.
fn check_shape(r: &LiveReport) -> Result<(), String> {
    check_shape_on(r, true)
}

/// [`check_shape`], with the reads from reported memory required (the recording, made on this
/// VM) or allowed to be skipped with a reason (a live run on a machine without the free memory).
fn check_shape_on(r: &LiveReport, need_reported: bool) -> Result<(), String> {
    let Part::Done(b) = &r.bdev else {
        return Err("the block device was not probed".into());
    };
    if b.plain_read.is_some() {
        return Err(format!(
            "a plain read of {} failed: {:?}",
            b.dev, b.plain_read
        ));
    }
    if b.dontcache_read != Some(libc::EOPNOTSUPP) || b.dontcache_write != Some(libc::EOPNOTSUPP) {
        return Err(format!("{} accepted RWF_DONTCACHE: {b:?}", b.dev));
    }
    for p in &r.fs {
        let Part::Done(f) = p else {
            return Err(format!("a file system was skipped: {p:?}"));
        };
        for row in &f.rows {
            let want = match (f.fs.as_str(), row.mode.as_str(), row.holes) {
                (_, "buffered", _) => f.pages,
                ("ext4", _, false) => f.pages, // IRQ completion keeps the folios
                _ => 0,                        // worker/workqueue completion drops them
            };
            if row.cached != want {
                return Err(format!(
                    "{} {} holes={}: {} pages cached, 6.18 leaves {want}",
                    f.fs, row.mode, row.holes, row.cached
                ));
            }
        }
    }
    match &r.reported {
        Some(Part::Done(x)) => {
            let s = &x.run;
            for l in [&s.normal, &s.dontcache] {
                if l.per_sec.is_empty() || l.pages == 0 || l.sys_ns_per_page <= 0.0 {
                    return Err(format!("reported reads: an empty leg {l:?}"));
                }
            }
            // No reclaim: normal reads keep every page they read (and the readahead window past
            // it); DONTCACHE keeps what is in flight, under 5% of that (none at the end of the
            // recording's 5 s legs; 3.1% in a live test's 1 s legs, 2,816 of 90,112 pages).
            if s.normal.cached_after < s.normal.pages.min(s.range / 4096) {
                return Err(format!(
                    "reported reads: normal kept {} of {} pages read (reclaim ran?)",
                    s.normal.cached_after, s.normal.pages
                ));
            }
            if s.dontcache.cached_after * 20 > s.normal.cached_after {
                return Err(format!(
                    "reported reads: DONTCACHE kept {} pages, normal {}",
                    s.dontcache.cached_after, s.normal.cached_after
                ));
            }
            // What the docs conclude from it: this guest reports, and a normal page costs the
            // host's fault (several times DONTCACHE's system time per page).
            if !x.reporting.contains("VIRTIO_BALLOON_F_REPORTING") {
                return Err(format!(
                    "reported reads: the guest does not report: {}",
                    x.reporting
                ));
            }
            if s.normal.sys_ns_per_page < 3.0 * s.dontcache.sys_ns_per_page {
                return Err(format!(
                    "reported reads: normal {:.0} ns sys/page is not 3x DONTCACHE's {:.0}",
                    s.normal.sys_ns_per_page, s.dontcache.sys_ns_per_page
                ));
            }
        }
        Some(Part::Skipped(why)) if !need_reported => eprintln!("skipped: {why}"),
        other => return Err(format!("the reported-memory reads were not run: {other:?}")),
    }
    for p in &r.seed {
        let Part::Done(s) = p else {
            return Err(format!("a seed experiment was skipped: {p:?}"));
        };
        for l in [&s.normal, &s.dontcache] {
            if l.per_sec.is_empty() || l.pages == 0 || l.sys_ns_per_page <= 0.0 {
                return Err(format!("{} {}: an empty leg {l:?}", s.fs, s.op));
            }
            if l.peak_bytes > s.limit + (1 << 20) {
                return Err(format!(
                    "{} {}: peak {} over the limit",
                    s.fs, s.op, l.peak_bytes
                ));
            }
            if s.op == "writes" {
                let Some(t) = &l.trace else {
                    return Err(format!("{} writes: a leg without its trace", s.fs));
                };
                check_the_disk_moved_what_was_written(s, l, t)?;
            }
        }
        if s.fs == "ext4" && s.op == "writes" {
            check_writes_wait_for_the_device(s, need_reported)?;
        }
    }
    Ok(())
}

/// A write leg's disk (`block_rq_issue` to `block_rq_complete`) moved what the writer wrote: at
/// least that less the memcg's limit (dirty at the end) and 5%, at most half as much again and
/// the limit (the file system's other dirty data, written back from before the leg: 181 MiB over
/// 1,674 in a live test's 1 s leg); and was busy no longer than the leg (10% and 100 ms of slack
/// for the trace's edges). A busy time that is not the disk's, or bytes of another device, would
/// be off by far more.
fn check_the_disk_moved_what_was_written(
    s: &SeedRun,
    l: &bio_sim::perf::dontcache_live::seed::Leg,
    t: &bio_sim::perf::dontcache_live::reclaim_throttle::LegTrace,
) -> Result<(), String> {
    let Some(d) = &t.disk else {
        return Err(format!("{} writes: no disk busy time traced", s.fs));
    };
    let written = l.pages * 4096;
    if d.bytes + s.limit + written / 20 < written || d.bytes > written * 3 / 2 + s.limit {
        return Err(format!(
            "{} writes: the disk moved {} MiB, the writer wrote {} MiB",
            s.fs,
            d.bytes >> 20,
            written >> 20
        ));
    }
    let leg_ms = l.per_sec.len() as f64 * 1e3;
    // From below: no disk of this machine kind moves 25 GB/s (a busy time cut short would).
    if d.requests == 0 || d.busy_ms > 1.1 * leg_ms + 100.0 || d.gbps() > 25.0 {
        return Err(format!(
            "{} writes: the disk was busy {:.0} ms of a {leg_ms:.0} ms leg ({} requests, {:.1} GB/s)",
            s.fs,
            d.busy_ms,
            d.requests,
            d.gbps()
        ));
    }
    // Only the trace's edges leave a request half seen: at most a queue's worth (virtio-blk's
    // 256) and 1% at each end. More means issues and completions that do not pair up.
    let edge = 256 + d.requests / 100;
    if d.unmatched_issues > edge || d.unmatched_completions > edge {
        return Err(format!(
            "{} writes: {} issues and {} completions unmatched of {} requests",
            s.fs, d.unmatched_issues, d.unmatched_completions, d.requests
        ));
    }
    Ok(())
}

/// ext4's writes go to this machine's virtio-blk disk: the normal writer sleeps in
/// `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)` for at least a fifth of its leg, the DONTCACHE
/// writer a tenth of that at most, and the normal leg's completions come at least two per
/// interrupt of the disk on average (the device ends a busy period's requests together; one that ended each at its
/// own end would report the flusher's 4 MiB requests one by one, a transfer apart). What
/// `--device virtio-blk` models. A live run on a machine whose disk is not virtio (`recorded`
/// false) skips the check with the reason.
fn check_writes_wait_for_the_device(s: &SeedRun, recorded: bool) -> Result<(), String> {
    let (Some(n), Some(d)) = (&s.normal.trace, &s.dontcache.trace) else {
        return Err("ext4 writes: no trace".into());
    };
    if !recorded && n.interrupts.is_none() {
        eprintln!(
            "skipped: ext4 writes: the disk is not virtio-blk, the device check is this machine's"
        );
        return Ok(());
    }
    let leg_ms = s.normal.per_sec.len() as f64 * 1e3;
    if n.throttled == 0 || n.throttled_ms < 0.2 * leg_ms {
        return Err(format!(
            "ext4 writes: the normal writer was throttled {}x for {:.0} ms of {leg_ms:.0}",
            n.throttled, n.throttled_ms
        ));
    }
    if d.throttled_ms * 10.0 > n.throttled_ms {
        return Err(format!(
            "ext4 writes: DONTCACHE throttled {:.0} ms, normal {:.0}",
            d.throttled_ms, n.throttled_ms
        ));
    }
    let Some(irqs) = &n.interrupts else {
        return Err("ext4 writes: no interrupts of the disk traced".into());
    };
    // On average: a small memcg's passes are short, and the median interrupt may end one
    // request (the live test's 32 MiB legs: 906 in 191, median 1; the recording: 4,491 in 143,
    // median 23).
    let inside = n.completions.saturating_sub(irqs.outside);
    if irqs.count == 0 || inside < 2 * irqs.count || irqs.outside * 10 > n.completions {
        return Err(format!(
            "ext4 writes: the normal leg's completions came {inside} in {} interrupts ({} of {} \
             outside the disk's handler)",
            irqs.count, irqs.outside, n.completions
        ));
    }
    Ok(())
}

#[test]
fn the_recorded_live_run_has_the_shape_of_6_18() {
    let r = LiveReport::load(&recording()).unwrap();
    assert!(r.kernel.starts_with("6.18"), "{}", r.kernel);
    check_shape(&r).unwrap();
    assert_eq!(r.fs.len(), 2, "ext4 and xfs");
    // XFS drops DONTCACHE overwrites after fdatasync; the seed writes on XFS leave nothing.
    assert_eq!(seed(&r, "xfs", "writes").dontcache.cached_after, 0);
    for fs in ["ext4", "xfs"] {
        for op in ["writes", "reads"] {
            let s = seed(&r, fs, op);
            assert_eq!(s.range, if op == "writes" { 4 } else { 2 } * s.limit);
        }
    }
}

#[test]
fn a_recording_that_departs_from_6_18_is_caught() {
    // The buggy twins of the shape check: each tampering must be caught.
    let good = LiveReport::load(&recording()).unwrap();
    let mut accepted = good.clone();
    if let Part::Done(b) = &mut accepted.bdev {
        b.dontcache_write = None;
    }
    assert!(check_shape(&accepted).unwrap_err().contains("accepted"));
    let mut kept = good.clone();
    if let Part::Done(f) = &mut kept.fs[1] {
        let row = f
            .rows
            .iter_mut()
            .find(|r| r.mode == "dontcache" && !r.holes)
            .unwrap();
        row.cached = f.pages;
    }
    assert!(check_shape(&kept)
        .unwrap_err()
        .contains("xfs dontcache holes=false"));
    let mut empty = good.clone();
    if let Part::Done(s) = &mut empty.seed[0] {
        s.dontcache.per_sec.clear();
    }
    assert!(check_shape(&empty).unwrap_err().contains("empty leg"));
    let mut reclaimed = good.clone();
    if let Some(Part::Done(x)) = &mut reclaimed.reported {
        x.run.normal.cached_after /= 2;
    }
    assert!(check_shape(&reclaimed)
        .unwrap_err()
        .contains("reclaim ran?"));
    let mut bare_metal = good.clone();
    if let Some(Part::Done(x)) = &mut bare_metal.reported {
        x.reporting = "none found (no /sys/module/page_reporting)".into();
        x.run.normal.sys_ns_per_page = x.run.dontcache.sys_ns_per_page;
    }
    assert!(check_shape(&bare_metal)
        .unwrap_err()
        .contains("does not report"));
    let mut cheap = good.clone();
    if let Some(Part::Done(x)) = &mut cheap.reported {
        x.run.normal.sys_ns_per_page = 2.0 * x.run.dontcache.sys_ns_per_page;
    }
    assert!(check_shape(&cheap).unwrap_err().contains("not 3x"));
    let ext4_writes = good
        .seed
        .iter()
        .position(|p| matches!(p, Part::Done(s) if s.fs == "ext4" && s.op == "writes"))
        .unwrap();
    let tamper = |f: &dyn Fn(&mut SeedRun)| {
        let mut r = good.clone();
        if let Part::Done(s) = &mut r.seed[ext4_writes] {
            f(s);
        }
        check_shape(&r).unwrap_err()
    };
    assert!(
        tamper(&|s| s.normal.trace.as_mut().unwrap().throttled_ms = 0.0)
            .contains("the normal writer was throttled")
    );
    assert!(tamper(&|s| {
        let n = s.normal.trace.clone().unwrap();
        let d = s.dontcache.trace.as_mut().unwrap();
        (d.throttled, d.throttled_ms) = (n.throttled, n.throttled_ms);
    })
    .contains("DONTCACHE throttled"));
    fn irqs(s: &mut SeedRun) -> &mut bio_sim::perf::dontcache_live::reclaim_throttle::Interrupts {
        s.normal
            .trace
            .as_mut()
            .unwrap()
            .interrupts
            .as_mut()
            .unwrap()
    }
    assert!(tamper(&|s| {
        let all = s.normal.trace.as_ref().unwrap().completions;
        irqs(s).count = all;
    })
    .contains("interrupts ("));
    assert!(tamper(&|s| {
        let all = s.normal.trace.as_ref().unwrap().completions;
        irqs(s).outside = all;
    })
    .contains("outside"));
    assert!(
        tamper(&|s| s.normal.trace.as_mut().unwrap().interrupts = None).contains("no interrupts")
    );
    assert!(tamper(&|s| s.normal.trace = None).contains("without its trace"));
    fn disk(s: &mut SeedRun) -> &mut bio_sim::perf::dontcache_live::reclaim_throttle::DiskBusy {
        s.dontcache.trace.as_mut().unwrap().disk.as_mut().unwrap()
    }
    assert!(tamper(&|s| disk(s).bytes /= 2).contains("the disk moved"));
    assert!(tamper(&|s| disk(s).bytes *= 2).contains("the disk moved"));
    assert!(tamper(&|s| disk(s).busy_ms *= 2.0).contains("the disk was busy"));
    assert!(tamper(&|s| disk(s).requests = 0).contains("the disk was busy"));
    assert!(tamper(&|s| disk(s).busy_ms /= 10.0).contains("the disk was busy"));
    assert!(tamper(&|s| disk(s).unmatched_issues = disk(s).requests).contains("unmatched"));
    assert!(tamper(&|s| disk(s).unmatched_completions = disk(s).requests).contains("unmatched"));
    assert!(tamper(&|s| s.dontcache.trace.as_mut().unwrap().disk = None)
        .contains("no disk busy time traced"));
    let mut missing = good;
    missing.reported = None;
    assert!(check_shape(&missing).unwrap_err().contains("not run"));
}

#[test]
fn a_recording_with_a_key_the_reader_does_not_know_is_refused() {
    let text = std::fs::read_to_string(recording()).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(LiveReport::from_json(&v).is_ok());
    v["seed"][0]["normal"]["trace"]["disk_busy"] = serde_json::json!(1);
    assert_eq!(
        LiveReport::from_json(&v).unwrap_err(),
        "`seed[0].normal.trace.disk_busy`: unknown key (not read by this biosim)"
    );
    let mut top: serde_json::Value = serde_json::from_str(&text).unwrap();
    top["kernal"] = serde_json::json!("6.18");
    assert_eq!(
        LiveReport::from_json(&top).unwrap_err(),
        "`kernal`: unknown key (not read by this biosim)"
    );
}

#[test]
fn the_replay_prints_the_recording_as_the_report_does() {
    let r = LiveReport::load(&recording()).unwrap();
    let back = LiveReport::from_json(&r.to_json()).unwrap();
    assert_eq!(back, r, "to_json/from_json round trip");
    let (code, out, err) = biosim(&[
        "bench",
        "dontcache",
        "--replay",
        recording().to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, r.to_string());
    assert!(
        out.contains("DONTCACHE read EOPNOTSUPP, DONTCACHE write EOPNOTSUPP"),
        "{out}"
    );
    assert!(
        out.contains("===== WRITES (ext4, memcg v1 limit 256 MiB"),
        "{out}"
    );
}

#[test]
fn a_tampered_recording_is_refused_naming_the_field() {
    let text = std::fs::read_to_string(recording()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        text.replacen("\"sys_ns_per_page\"", "\"sys_per_page\"", 1),
    )
    .unwrap();
    let (code, _, err) = biosim(&["bench", "dontcache", "--replay", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`sys_ns_per_page`: missing"), "{err}");
    std::fs::write(&bad, "{ not json").unwrap();
    let (code, _, err) = biosim(&["bench", "dontcache", "--replay", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.json"), "{err}");
}

#[test]
fn bad_flags_exit_2_with_a_message_naming_them() {
    for (args, want) in [
        (
            &["--replay", "/nonexistent/rec.json"][..],
            "/nonexistent/rec.json",
        ),
        (&["--live", "--seconds", "0"][..], "--seconds"),
        (&["--live", "--limit", "1M"][..], "--limit 1M"),
        (&["--calibrate", "--limit", "lots"][..], "--limit"),
        (&["--record", "/tmp"][..], "--live"),
        (&["--live", "--calibrate"][..], "--calibrate"),
        (
            &["--live", "--record", "/nonexistent/dir"][..],
            "--record /nonexistent/dir",
        ),
    ] {
        let mut all = vec!["bench", "dontcache"];
        all.extend_from_slice(args);
        let (code, out, err) = biosim(&all);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// What a live run could leave behind, as lines naming each thing (empty: nothing).
fn leftovers(dir: &std::path::Path) -> Vec<String> {
    let mut left = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/sys/block") {
        for e in rd.flatten() {
            let f = e.path().join("loop/backing_file");
            if let Ok(b) = std::fs::read_to_string(&f) {
                if b.contains("biosim-dontcache") {
                    left.push(format!("attached: {} -> {}", e.path().display(), b.trim()));
                }
            }
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    left.extend(
        mounts
            .lines()
            .filter(|l| l.contains("biosim-dontcache"))
            .map(|l| format!("mounted: {l}")),
    );
    if let Ok(cg) = bio_sim::perf::dontcache_live::memcg::own_memcg() {
        for e in std::fs::read_dir(cg).into_iter().flatten().flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with("biosim-dontcache")
            {
                left.push(format!("cgroup: {}", e.path().display()));
            }
        }
    }
    for d in [dir.to_path_buf(), std::env::temp_dir()] {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("biosim-dontcache") && n.contains(&format!("-{}-", std::process::id()))
            {
                left.push(format!("file: {}", e.path().display()));
            }
        }
    }
    left
}

#[test]
fn live_run_measures_6_18_and_leaves_the_machine_as_found() {
    if let Some(why) = bio_sim::calibrate::tracefs::live_test_skip_reason() {
        eprintln!("{why}");
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let r = live_run(&LiveConfig {
        dir: dir.path().to_owned(),
        size: 16 << 20,
        rounds: 1,
        limit: 32 << 20,
        seconds: 1,
    })
    .unwrap();
    println!("{r}");
    assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    assert_eq!(
        std::fs::read_to_string("/sys/kernel/tracing/tracing_on")
            .unwrap_or_else(|_| "0".into())
            .trim(),
        "0"
    );
    // The reads from reported memory need 9 GiB free: skipped with a reason where there is not.
    check_shape_on(&r, false).unwrap();
}

#[test]
fn skipped_parts_print_one_line_each_and_round_trip() {
    // What a run without root records: the parts that need it are one-line skips.
    let r = LiveReport {
        kernel: "6.18.0".into(),
        machine: "2 CPUs, 1024 MiB RAM".into(),
        bdev: Part::Skipped("block device: needs root (loop devices)".into()),
        fs: vec![Part::Skipped("xfs: needs root (mkfs, mount)".into())],
        seed: vec![Part::Skipped(
            "seed experiment: needs root (cgroup v1 memory controller)".into(),
        )],
        reported: Some(Part::Skipped(
            "reads from reported memory: 900 MiB free, the 8192 MiB range and 1 GiB to spare \
             needed"
                .into(),
        )),
    };
    let text = r.to_string();
    assert_eq!(
        text.lines().filter(|l| l.starts_with("skipped: ")).count(),
        4,
        "{text}"
    );
    assert_eq!(
        text.lines().count(),
        5,
        "a header and one line per skip: {text}"
    );
    assert_eq!(LiveReport::from_json(&r.to_json()).unwrap(), r);
    // The shape check refuses such a recording as evidence of 6.18's behaviour.
    assert!(check_shape(&r).unwrap_err().contains("not probed"));
}
