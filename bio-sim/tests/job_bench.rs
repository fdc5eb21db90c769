//! `biosim bench JOBFILE` end to end on tiny jobs (never timed: the figures live in
//! docs/performance.md): the header and the table with every design, `--json`, names refused
//! by name, the kernel's loop device skipped or (with BIOSIM_LIVE_KERNEL=1, as root) run and
//! torn down, verify catching a corrupted block, and the durability test: a verify job killed
//! with SIGKILL mid-run, then `--verify-only` over the same file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn biosim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_biosim"))
        .args(args)
        .output()
        .expect("run biosim")
}

fn text(o: &Output) -> (i32, String, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A scratch directory on the target's filesystem (O_DIRECT works there; tmpfs may refuse it).
fn dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn job_file(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

/// Why a run could not happen on this machine (no O_DIRECT, no io_uring), if that is why it
/// failed.
fn unsupported(err: &str) -> bool {
    [
        "O_DIRECT",
        "Operation not permitted",
        "Function not implemented",
    ]
    .iter()
    .any(|m| err.contains(m))
}

const TINY: &str = "[global]\nbs=4k\ndirect=1\nsize=1m\nio_size=128k\nstonewall\n\n";

#[test]
fn a_job_prints_its_header_then_a_row_with_cpu_per_io_for_every_design_and_engine() {
    let d = dir();
    let jobs = job_file(
        d.path(),
        "tiny.fio",
        &format!(
            "{TINY}[read-psync]\nrw=randread\nioengine=psync\n\n[write-uring]\nrw=randwrite\nioengine=io_uring\niodepth=4\nfallocate=none\n"
        ),
    );
    let out = biosim(&[
        "bench",
        jobs.to_str().unwrap(),
        "--rounds",
        "2",
        "--dir",
        d.path().to_str().unwrap(),
    ]);
    let (code, stdout, stderr) = text(&out);
    if code != 0 && unsupported(&stderr) {
        eprintln!("skipped: {stderr}");
        return;
    }
    assert_eq!(code, 0, "{stderr}");
    for job in ["read-psync", "write-uring"] {
        let at = stdout
            .find(&format!("job `{job}`"))
            .unwrap_or_else(|| panic!("{job}: {stdout}"));
        let section = &stdout[at..];
        let lines: Vec<&str> = section.lines().collect();
        assert!(lines[1].starts_with("file ") && lines[1].contains("FMODE_NOWAIT="));
        assert!(lines[2].starts_with("designs: base, v5-no-hint, v5, raw"));
        assert!(lines[3].starts_with("design") && lines[3].contains("CPU µs/IO (proc)"));
        for (i, design) in ["base", "v5-no-hint", "v5", "raw"].iter().enumerate() {
            let row = lines[4 + i];
            assert!(row.starts_with(design), "{row}");
            // IOPS, MB/s, CPU proc and machine: median (min–max) each.
            assert!(row.matches('–').count() >= 4, "{row}");
            if *design != "raw" {
                assert!(row.contains("worker_cmds") && row.contains("irqs"), "{row}");
            }
        }
        // The engine the simulated designs actually ran on, after the rows (the io_uring one
        // may have fallen back to a reaper thread: then the line says so).
        let engine = lines[8];
        assert!(
            engine.starts_with("engine of base, v5-no-hint, v5: "),
            "{job}: {engine}"
        );
        if job == "read-psync" {
            assert!(engine.ends_with(": sync (preadv2/pwritev2 on the loop's threads)"));
        } else {
            assert!(
                engine.ends_with(": io_uring, one ring per simulated CPU")
                    || engine.contains("one ring and a reaper thread"),
                "{engine}"
            );
        }
    }
    assert!(
        std::fs::read_dir(d.path()).unwrap().count() == 1,
        "only the job file is left"
    );
}

#[test]
fn json_parses_and_holds_every_design_s_figures_and_ratios() {
    let d = dir();
    let jobs = job_file(
        d.path(),
        "j.fio",
        &format!("{TINY}[r]\nrw=randread\nioengine=pvsync2\n"),
    );
    let out = biosim(&[
        "bench",
        jobs.to_str().unwrap(),
        "--rounds",
        "1",
        "--variant",
        "v5",
        "--json",
        "-",
        "--dir",
        d.path().to_str().unwrap(),
    ]);
    let (code, stdout, stderr) = text(&out);
    if code != 0 && unsupported(&stderr) {
        eprintln!("skipped: {stderr}");
        return;
    }
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("job `r`"),
        "the table goes to stderr: {stderr}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("stdout is the JSON alone");
    // The default: the machine's own kernel configuration, without lockdep.
    assert_eq!(v["kernel_config"]["name"], "machine", "{v}");
    assert!(
        v["kernel_config"]["kconfig"]
            .as_str()
            .unwrap()
            .contains("PROVE_LOCKING=n"),
        "{v}"
    );
    assert!(
        stderr.contains("kernel config machine"),
        "the header names it: {stderr}"
    );
    let designs = v["jobs"][0]["designs"].as_array().unwrap();
    assert_eq!(designs.len(), 2);
    assert_eq!(designs[0]["design"], "v5");
    assert_eq!(designs[1]["design"], "raw");
    for d in designs {
        for k in ["iops", "mb_per_s", "lat_p99_us", "cpu_us_per_io_process"] {
            assert!(d[k]["median"].as_f64().unwrap() > 0.0, "{k}: {d}");
        }
        // The kernel's share (ru_stime), per design and per round. The kernel splits a thread's
        // exact runtime into user and system by tick samples, so a 32-I/O round may show 0: only
        // its bounds are checked here.
        let (sys, all) = (
            d["cpu_us_per_io_system"]["median"].as_f64().unwrap(),
            d["cpu_us_per_io_process"]["median"].as_f64().unwrap(),
        );
        assert!((0.0..=all).contains(&sys), "system {sys} of {all}: {d}");
        for r in d["per_round"].as_array().unwrap() {
            assert!(r["cpu_us_per_io_system"].as_f64().is_some(), "{r}");
        }
    }
    // A ratio over the rounds where raw's system time is not zero, or null when a job this
    // short gave raw none in every round.
    let sys_ratio = &designs[0]["vs_raw"]["cpu_per_io_system"];
    assert!(
        sys_ratio.is_null()
            || (sys_ratio["median"].as_f64().is_some_and(|m| m >= 0.0)
                && sys_ratio["rounds"].as_u64().is_some_and(|n| n >= 1)),
        "{}",
        designs[0]
    );
    assert!(
        designs[0]["vs_raw"]["cpu_per_io_process"]["median"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert_eq!(designs[0]["counters"]["nowait_tried"], 32.0);
    // An existing --json file (here: the job file itself) is refused before anything runs.
    let (code, _, stderr) = text(&biosim(&[
        "bench",
        jobs.to_str().unwrap(),
        "--json",
        jobs.to_str().unwrap(),
    ]));
    assert_eq!(code, 2);
    assert!(stderr.contains("input file"), "{stderr}");
}

#[test]
fn unknown_names_are_refused_by_name_with_exit_2() {
    let d = dir();
    let jobs = job_file(d.path(), "j.fio", &format!("{TINY}[r]\nrw=randread\n"));
    let j = jobs.to_str().unwrap();
    for (args, name) in [
        (vec!["--compare", "fio"], "`fio`"),
        (vec!["--variant", "v9"], "`v9`"),
        (vec!["--device", "nvme"], "`nvme`"),
        (vec!["--engine", "aio"], "`aio`"),
        (vec!["--nullb", "irqmode"], "KEY=VAL"),
        (vec!["--rounds", "0"], "--rounds"),
        (vec!["--kernel-config", "lockdep"], "`lockdep`"),
    ] {
        let mut a = vec!["bench", j];
        a.extend(&args);
        let (code, stdout, stderr) = text(&biosim(&a));
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(name), "{args:?}: {stderr}");
    }
    let (code, _, stderr) = text(&biosim(&["bench", "lop"]));
    assert_eq!(code, 2);
    assert!(stderr.contains("neither a bench"), "{stderr}");
    // A write into an existing file biosim did not create needs --force.
    let user = d.path().join("user.img");
    std::fs::write(&user, vec![7u8; 1 << 20]).unwrap();
    let w = job_file(
        d.path(),
        "w.fio",
        &format!("{TINY}[w]\nrw=randwrite\nfilename={}\n", user.display()),
    );
    let (code, _, stderr) = text(&biosim(&["bench", w.to_str().unwrap()]));
    assert_eq!(code, 2);
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(
        std::fs::read(&user).unwrap(),
        vec![7u8; 1 << 20],
        "untouched"
    );
}

fn live_kernel() -> bool {
    std::env::var_os("BIOSIM_LIVE_KERNEL").is_some_and(|v| v == "1")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Loop devices bound to a file under `dir` (sysfs' `loop/backing_file`).
fn loops_over(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    rd.filter_map(|e| {
        let p = e.ok()?.path().join("loop/backing_file");
        let f = std::fs::read_to_string(p).ok()?;
        f.trim()
            .starts_with(dir.to_str()?)
            .then(|| f.trim().to_owned())
    })
    .collect()
}

#[test]
fn kernel_loop_is_skipped_with_a_reason_or_run_live_and_torn_down() {
    let d = dir();
    let jobs = job_file(
        d.path(),
        "j.fio",
        &format!("{TINY}[r]\nrw=randread\nioengine=io_uring\niodepth=4\n"),
    );
    let args = [
        "bench",
        jobs.to_str().unwrap(),
        "--rounds",
        "1",
        "--variant",
        "v5",
        "--compare",
        "raw,kernel-loop",
        "--dir",
        d.path().to_str().unwrap(),
    ];
    if is_root() && !live_kernel() {
        eprintln!(
            "skipped: running as root, the kernel's loop device only with BIOSIM_LIVE_KERNEL=1"
        );
        return;
    }
    let (code, stdout, stderr) = text(&biosim(&args));
    if code != 0 && unsupported(&stderr) {
        eprintln!("skipped: {stderr}");
        return;
    }
    assert_eq!(code, 0, "{stderr}");
    if is_root() {
        assert!(
            stdout.lines().any(|l| l.starts_with("kernel-loop ")),
            "{stdout}"
        );
        assert!(
            loops_over(d.path()).is_empty(),
            "a loop device left attached"
        );
    } else {
        let skip: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with("skipped: "))
            .collect();
        assert_eq!(skip.len(), 1, "{stdout}");
        assert!(
            skip[0].contains("kernel-loop") && skip[0].contains("root"),
            "{stdout}"
        );
        assert!(stdout.lines().any(|l| l.starts_with("raw ")), "{stdout}");
    }
}

#[test]
fn verify_only_catches_a_block_corrupted_after_a_verified_run() {
    let d = dir();
    let file = d.path().join("data.img");
    let jobs = job_file(
        d.path(),
        "v.fio",
        &format!(
            "{TINY}[v]\nrw=randwrite\nioengine=psync\nverify=crc32c\nfsync=4\nfilename={}\n",
            file.display()
        ),
    );
    let j = jobs.to_str().unwrap();
    let (code, stdout, stderr) = text(&biosim(&[
        "bench",
        j,
        "--rounds",
        "1",
        "--variant",
        "v5",
        "--compare",
        "none",
    ]));
    if code != 0 && unsupported(&stderr) {
        eprintln!("skipped: {stderr}");
        return;
    }
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("verify: "), "{stdout}");
    assert!(
        !d.path().join("data.img.biosim-verify.state").exists(),
        "the state file is removed after a run that ended well"
    );
    let (code, stdout, stderr) = text(&biosim(&["bench", j, "--verify-only"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("32 sound"), "{stdout}");
    // Flip one bit in the middle of a written block.
    let mut bytes = std::fs::read(&file).unwrap();
    let block = (0..bytes.len() / 4096)
        .find(|b| bytes[b * 4096..b * 4096 + 4] == *b"bsvf")
        .expect("a written block");
    bytes[block * 4096 + 2000] ^= 0x10;
    std::fs::write(&file, &bytes).unwrap();
    let (code, _, stderr) = text(&biosim(&["bench", j, "--verify-only"]));
    assert_eq!(code, 1, "a device failure, not bad input: {stderr}");
    assert!(
        stderr.contains(&format!("offset {}", block * 4096)) && stderr.contains("crc32c"),
        "{stderr}"
    );
}

/// Writes the block at `off` of `file` as `data`.
fn write_block(file: &Path, off: u64, data: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.write_all_at(data, off).unwrap();
}

#[test]
fn durability_every_block_flushed_before_a_kill_9_survives_with_at_least_its_generation() {
    let d = dir();
    let file = d.path().join("durable.img");
    let state = d.path().join("durable.img.biosim-verify.state");
    let jobs = job_file(
        d.path(),
        "dur.fio",
        &format!(
            "[dur]\nrw=randwrite\nbs=4k\ndirect=1\nsize=2m\nioengine=io_uring\niodepth=4\nnumjobs=2\nverify=crc32c\nfsync=8\ntime_based\nruntime=60\nfilename={}\n",
            file.display()
        ),
    );
    let j = jobs.to_str().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_biosim"))
        .args([
            "bench",
            j,
            "--rounds",
            "1",
            "--variant",
            "v5",
            "--compare",
            "none",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until a few flushes have been saved, then SIGKILL: no handler runs.
    let t0 = Instant::now();
    let mut saves = 0;
    let mut last = None;
    while saves < 5 && t0.elapsed() < Duration::from_secs(50) {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            if unsupported(&err) {
                eprintln!("skipped: {err}");
                return;
            }
            panic!("biosim ended before the kill: {status}: {err}");
        }
        let m = std::fs::metadata(&state).and_then(|m| m.modified()).ok();
        if m.is_some() && m != last {
            saves += 1;
            last = m;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(saves > 0, "no verify state saved before the kill");
    let saved = std::fs::read(&state).expect("the killed run's state is left");
    let data_before = std::fs::read(&file).unwrap();

    let (code, stdout, stderr) = text(&biosim(&["bench", j, "--verify-only"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let held: u64 = stdout
        .split("; ")
        .find(|s| s.contains("blocks flushed"))
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(held > 0, "flushed blocks were checked: {stdout}");
    assert!(
        !state.exists(),
        "the state file is removed once the file passed"
    );

    // The checker's twins: a flushed block rolled back to an older generation, a sound block of
    // another run, and a torn block (two blocks' halves) are each caught.
    let header_end = saved.iter().position(|&b| b == b'\n').unwrap() + 1;
    let gens: Vec<u64> = saved[header_end..]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let (b, &g) = gens
        .iter()
        .enumerate()
        .find(|(_, &g)| g > 1)
        .expect("a flushed block");
    let off = b as u64 * 4096;
    let mut old = vec![0u8; 4096];
    bio_sim::fio::verify::stamp(&mut old, off, g - 1);
    for (twin, data, what) in [
        ("rolled back", old.clone(), "older than"),
        (
            // A sound block of another run (its id in the generation's high 32 bits) with a
            // counter as high as the flushed one's: not this run's write.
            "another run",
            {
                let mut other = vec![0u8; 4096];
                let other_run = (((g >> 32) ^ 0x5a5a) << 32) | (g & 0xffff_ffff);
                bio_sim::fio::verify::stamp(&mut other, off, other_run.max(g + (1 << 32)));
                other
            },
            "another run",
        ),
        (
            "torn",
            {
                let mut t = data_before[b * 4096..b * 4096 + 4096].to_vec();
                t[2048..].copy_from_slice(&old[2048..]);
                t
            },
            "crc32c",
        ),
    ] {
        std::fs::write(&state, &saved).unwrap();
        write_block(&file, off, &data);
        let (code, _, stderr) = text(&biosim(&["bench", j, "--verify-only"]));
        assert_eq!(code, 1, "{twin}: {stderr}");
        assert!(
            stderr.contains(&format!("offset {off}")) && stderr.contains(what),
            "{twin}: {stderr}"
        );
        write_block(&file, off, &data_before[b * 4096..b * 4096 + 4096]);
    }
    let _ = std::fs::remove_file(&state);
}

#[test]
fn null_blk_runs_a_verify_job_memory_backed_and_refuses_an_unknown_parameter_by_name() {
    let d = dir();
    let jobs = job_file(
        d.path(),
        "nb.fio",
        "[global]\nbs=4k\nsize=1m\nio_size=64k\nstonewall\n[rw]\nrw=randrw\nioengine=io_uring\niodepth=4\nnumjobs=2\nverify=crc32c\n",
    );
    let j = jobs.to_str().unwrap();
    for irqmode in ["0", "1", "2"] {
        let (code, stdout, stderr) = text(&biosim(&[
            "bench",
            j,
            "--device",
            "null_blk",
            "--compare",
            "none",
            "--rounds",
            "1",
            "--nullb",
            &format!("irqmode={irqmode}"),
        ]));
        assert_eq!(code, 0, "irqmode={irqmode}: {stderr}");
        let row = stdout
            .lines()
            .find(|l| l.starts_with("null_blk "))
            .unwrap_or_else(|| panic!("{stdout}"));
        assert!(row.contains("tag_waits"), "{row}");
        assert!(stdout.contains("verify: every read checked"), "{stdout}");
        // randrw writes: the region is read back through null_blk itself after the run.
        assert!(
            stdout.contains("blocks read back through the device"),
            "{stdout}"
        );
    }
    let (code, _, stderr) = text(&biosim(&[
        "bench", j, "--device", "null_blk", "--nullb", "bogus=1",
    ]));
    assert_eq!(code, 2);
    assert!(stderr.contains("`bogus`"), "{stderr}");
}

/// `--force` on a user's file: neither `overwrite=1` (fio lays out only a missing or short
/// file) nor a sparse write job's hole punching may touch blocks the job's writes do not reach.
#[test]
fn forced_writes_into_a_user_file_leave_every_block_outside_the_io_alone() {
    let d = dir();
    for (name, opts) in [
        ("overwrite", "overwrite=1\n"),
        ("sparse", "fallocate=none\n"),
    ] {
        let user = d.path().join(format!("{name}.img"));
        std::fs::write(&user, vec![7u8; 1 << 20]).unwrap();
        let w = job_file(
            d.path(),
            &format!("{name}.fio"),
            &format!(
                "{TINY}[w]\nrw=randwrite\nioengine=psync\n{opts}filename={}\n",
                user.display()
            ),
        );
        let (code, stdout, stderr) = text(&biosim(&[
            "bench",
            w.to_str().unwrap(),
            "--force",
            "--rounds",
            "1",
            "--variant",
            "base",
            "--compare",
            "none",
        ]));
        if code != 0 && unsupported(&stderr) {
            eprintln!("skipped: {stderr}");
            return;
        }
        assert_eq!(code, 0, "{name}: {stdout}{stderr}");
        // 128 KiB of 4 KiB writes reach at most 32 of the 256 blocks.
        let data = std::fs::read(&user).unwrap();
        assert_eq!(data.len(), 1 << 20, "{name}");
        let untouched = data
            .chunks(4096)
            .filter(|b| b.iter().all(|&x| x == 7))
            .count();
        assert!(
            untouched >= 256 - 32,
            "{name}: only {untouched} blocks untouched"
        );
    }
}

/// fio gives each clone of `numjobs` its own file when no `filename=` is given; biosim's clones
/// share one, so it refuses rather than run a different footprint (and leaves no file behind).
#[test]
fn numjobs_above_one_without_a_filename_is_refused_with_the_reason() {
    let d = dir();
    let jobs = job_file(
        d.path(),
        "n.fio",
        &format!("{TINY}[clones]\nrw=randwrite\nnumjobs=2\n"),
    );
    let scratch = d.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let (code, stdout, stderr) = text(&biosim(&[
        "bench",
        jobs.to_str().unwrap(),
        "--dir",
        scratch.to_str().unwrap(),
        "--compare",
        "none",
    ]));
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("numjobs=2 without filename=") && stderr.contains("clones.N.0"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&scratch).unwrap().count(),
        0,
        "no file left"
    );
}
