//! The `biosim` binary: help and version, the main commands, and bad input (a clear message naming
//! what and where, a non-zero exit, never a panic).

use std::process::Command;

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

fn scenarios_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/scenarios")
}

#[test]
fn help_and_version() {
    let (code, out, _) = biosim(&["--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("run Linux block-layer bio completion patches"),
        "{out}"
    );
    for cmd in [
        "findings", "run", "variants", "contexts", "states", "loop", "bench",
    ] {
        assert!(out.contains(cmd), "--help lists {cmd}: {out}");
    }
    let (code, out, _) = biosim(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("biosim "), "{out}");
}

#[test]
fn states_lists_the_batchers_dynamic_states() {
    let (code, out, err) = biosim(&["states"]);
    assert_eq!(code, 0, "{err}");
    // After the early dynamic users (kvmclock, fork; x86/kvm, mm/writeback, mm/vmstat, padata,
    // pci/amd_bus).
    assert!(out.contains(" 63: block/bio:complete:dead\n"), "{out}");
    assert!(out.contains("197: block/bio:complete:online\n"), "{out}");
}

#[test]
fn findings_check_passes() {
    let (code, out, err) = biosim(&["findings", "--check", "--no-figures"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("all cells as expected"), "{out}");
}

#[test]
fn every_scenario_in_the_docs_holds_its_expectations() {
    let mut n = 0;
    for entry in std::fs::read_dir(scenarios_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("scn") {
            continue;
        }
        let (code, out, err) = biosim(&["run", "--quiet", path.to_str().unwrap()]);
        assert_eq!(code, 0, "{}:\n{out}\n{err}", path.display());
        assert!(
            out.contains("every expectation holds"),
            "{}: {out}",
            path.display()
        );
        n += 1;
    }
    assert!(n >= 5, "only {n} scenarios");
}

#[test]
fn the_scenarios_readme_lists_every_file() {
    let readme = std::fs::read_to_string(scenarios_dir().join("README.md")).unwrap();
    let listed: Vec<&str> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(name, _)| name)
        .filter(|name| name.ends_with(".scn"))
        .collect();
    // The top-level files and the detectors' (listed as `detectors/NAME.scn`).
    let mut files: Vec<String> = Vec::new();
    for (dir, prefix) in [
        (scenarios_dir(), ""),
        (scenarios_dir().join("detectors"), "detectors/"),
    ] {
        files.extend(
            std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".scn"))
                .map(|n| format!("{prefix}{n}")),
        );
    }
    files.sort();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(
        sorted, files,
        "docs/scenarios/README.md's table against the files"
    );
}

#[test]
fn a_scenario_prints_its_kernel_style_trace() {
    let f = scenarios_dir().join("finding-01-rollback-v6.scn");
    let (code, out, _) = biosim(&["run", f.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("cpuhp_enter"), "{out}");
    assert!(
        out.contains("block/bio:complete:online startup (rollback)"),
        "{out}"
    );
    assert!(out.contains("bio#1 never completed"), "{out}");
}

#[test]
fn bad_input_is_a_clear_message_and_exit_2() {
    let (code, _, err) = biosim(&["run", "/nonexistent/x.scn"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("/nonexistent/x.scn") && err.contains("cannot read"),
        "{err}"
    );
    let dir = std::env::temp_dir().join(format!("biosim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.scn");
    std::fs::write(&bad, "variant v6\ncpus 2\ncomplete 7 hardirq flag\n").unwrap();
    let (code, _, err) = biosim(&["run", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.scn:3:") && err.contains("CPU7 does not exist"),
        "{err}"
    );
    let (code, _, err) = biosim(&["contexts", "--preempt", "full", "--no-preempt-count"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("CONFIG_PREEMPTION selects CONFIG_PREEMPT_COUNT"),
        "{err}"
    );
    let (code, _, err) = biosim(&["findings", "--finding", "99"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = biosim(&["states", "--cpus", "0"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = biosim(&["findings", "--finding", "1", "--variant", "v9"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown variant `v9`"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_failed_expectation_exits_1() {
    let dir = std::env::temp_dir().join(format!("biosim-cli-exp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("wrong.scn");
    std::fs::write(&f, "variant v7\ncpus 2\ncpu_down 1 fail=187\ncomplete 1 hardirq flag\nsettle\nexpect stranded\n").unwrap();
    let (code, out, _) = biosim(&["run", "--quiet", f.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("expectation failed: line 6"), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_trace_can_be_written_for_perfetto_and_a_bad_path_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("f1.json");
    let scn = scenarios_dir().join("finding-01-rollback-v6.scn");
    let (code, _, err) = biosim(&[
        "run",
        "--quiet",
        scn.to_str().unwrap(),
        "--perfetto",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    // A hotplug callback is a span on the hotplug track of its CPU, on the simulated clock: the
    // offline runs at jiffy 3, i.e. from 12,000 µs on at HZ=250 (it would be near 0 on the old
    // line-order axis).
    assert!(
        ev.iter().any(|e| e["cat"] == "cpuhp"
            && e["tid"] == 1001
            && e["name"] == "197 bio_complete_batch_cpu_down_prep"
            && e["ph"] == "B"
            && (12_000..16_000).contains(&e["ts"].as_u64().unwrap_or(0))),
        "{v}"
    );
    let (code, _, err) = biosim(&[
        "findings",
        "--finding",
        "1",
        "--variant",
        "v6",
        "--perfetto",
        "/nonexistent/dir/t.json",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--perfetto /nonexistent/dir/t.json: /nonexistent/dir is not a directory"),
        "{err}"
    );
}

/// Writes `text` to a fresh file `name` in a directory of its own and runs `biosim run --quiet` on
/// it: (exit code, stdout, stderr).
fn run_text(name: &str, text: &[u8]) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!("biosim-cli-strict-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join(name);
    std::fs::write(&f, text).unwrap();
    let r = biosim(&["run", "--quiet", f.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).ok();
    r
}

/// Every class of bad scenario input is refused with exit 2, naming the file, the line and the
/// column of the word at fault, and what was expected there.
#[test]
fn every_bad_scenario_token_is_refused_with_file_line_and_column() {
    for (name, text, place, says) in [
        // An extra word.
        (
            "extra.scn",
            "cpus 2\ncomplete 1 hardirq flag extra\n",
            "extra.scn:2:25:",
            "unexpected `extra`",
        ),
        (
            "tick.scn",
            "cpus 2\ntick 5\n",
            "tick.scn:2:6:",
            "unexpected `5`",
        ),
        (
            "worker.scn",
            "cpus 3\nworker 0 1 2\n",
            "worker.scn:2:10:",
            "unexpected `1`",
        ),
        (
            "settle.scn",
            "cpus 2\ntick\nsettle 10 20\n",
            "settle.scn:3:11:",
            "unexpected `20`",
        ),
        // A repeated header line, for each keyword a second line would override.
        (
            "cpus.scn",
            "cpus 2\ncpus 4\ntick\n",
            "cpus.scn:2:1:",
            "a second `cpus` line (the first is line 1)",
        ),
        (
            "seed.scn",
            "seed 1\nseed 2\ntick\n",
            "seed.scn:2:1:",
            "a second `seed` line",
        ),
        (
            "online.scn",
            "online 1\nonline 2\ntick\n",
            "online.scn:2:1:",
            "a second `online` line",
        ),
        (
            "preempt.scn",
            "preempt full\npreempt none\ntick\n",
            "preempt.scn:2:1:",
            "a second `preempt` line",
        ),
        (
            "pc.scn",
            "preempt_count y\npreempt_count y\ntick\n",
            "pc.scn:2:1:",
            "a second `preempt_count` line",
        ),
        (
            "prcu.scn",
            "preempt_rcu y\npreempt_rcu n\ntick\n",
            "prcu.scn:2:1:",
            "a second `preempt_rcu` line",
        ),
        (
            "hz.scn",
            "hz 250\nhz 1000\ntick\n",
            "hz.scn:2:1:",
            "a second `hz` line",
        ),
        (
            "rescuer.scn",
            "rescuer pool\nrescuer unbound\ntick\n",
            "rescuer.scn:2:1:",
            "a second `rescuer` line",
        ),
        (
            "loop.scn",
            "loop v5 sparse\nloop v4 sparse\ntick\n",
            "loop.scn:2:1:",
            "a second `loop` line",
        ),
        (
            "variant.scn",
            "variant v6\nvariant v7\ntick\n",
            "variant.scn:2:1:",
            "a second `variant` line",
        ),
        // An option the transition does not take.
        (
            "fill.scn",
            "loop v5 sparse\nio 0 discard 3 fill=7\n",
            "fill.scn:2:16:",
            "only a write takes fill=BYTE",
        ),
        (
            "fillr.scn",
            "loop v5 sparse\nio 0 read 3 fill=7\n",
            "fillr.scn:2:13:",
            "only a write takes fill=BYTE",
        ),
        (
            "opt.scn",
            "cpus 2\ncpu_down 1 fail=187 fail=144\n",
            "opt.scn:2:21:",
            "unexpected `fail=144`",
        ),
        // Two verdicts on one line.
        (
            "two.scn",
            "cpus 2\ntick\nexpect clean stranded\n",
            "two.scn:3:14:",
            "write one `expect` line each",
        ),
        // `try` before what is not a transition.
        (
            "tryh.scn",
            "try cpus 2\ntick\n",
            "tryh.scn:1:5:",
            "`try` (column 1) may only prefix a transition",
        ),
        // An empty file, and one with no transition and no expectation.
        (
            "empty.scn",
            "",
            "empty.scn:1:1:",
            "no transition and no `expect` line",
        ),
        (
            "header.scn",
            "# only a header\nvariant v6\ncpus 2\n",
            "header.scn:4:1:",
            "no transition and no `expect` line",
        ),
        // A NUL byte.
        ("nul.scn", "cpus 2\nti\0ck\n", "nul.scn:2:3:", "a NUL byte"),
    ] {
        let (code, out, err) = run_text(name, text.as_bytes());
        assert_eq!(code, 2, "{name}: {out}{err}");
        assert!(err.contains(place) && err.contains(says), "{name}: {err}");
    }
    let (code, _, err) = run_text("utf8.scn", b"cpus 2\ntick \xff\n");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("utf8.scn:2:6: not UTF-8"), "{err}");
}

/// A transition that cannot happen at that moment is an error with its place unless written
/// `try …`; a `fail=` sysfs refuses likewise.
#[test]
fn an_impossible_transition_or_a_refused_fail_is_an_error_unless_tried() {
    for (name, text, says) in [
        (
            "offline.scn",
            "cpus 2\nonline 1\ncomplete 1 hardirq flag\n",
            "offline.scn:3:1: `complete 1 hardirq flag`: CPU1 is offline",
        ),
        (
            "second.scn",
            "cpus 3\ncpu_down 1\ncpu_down 2\n",
            "second.scn:3:1: `cpu_down 2`: ",
        ),
        (
            "step.scn",
            "cpus 2\nstep\n",
            "step.scn:2:1: `step`: no hotplug operation is in progress",
        ),
        (
            "worker.scn",
            "cpus 2\nworker 1\n",
            "worker.scn:2:1: `worker 1`: CPU1's worker pool has nothing to run",
        ),
        (
            "fail.scn",
            "cpus 2\ncpu_down 1 fail=50\n",
            "fail.scn:2:1: `cpu_down 1 fail=50`: hotplug/fail=50 refused",
        ),
    ] {
        let (code, out, err) = run_text(name, text.as_bytes());
        assert_eq!(code, 2, "{name}: {out}{err}");
        assert!(err.contains(says), "{name}: {err}");
    }
    // The same with `try`: skipped, and said so in the trace and the verdict.
    let f = std::env::temp_dir().join(format!("biosim-cli-try-{}.scn", std::process::id()));
    std::fs::write(
        &f,
        "cpus 2\nonline 1\ntry complete 1 hardirq flag   # CPU1 is down\ntry cpu_down 1 fail=50\ncomplete 0 hardirq flag\nexpect clean\n",
    )
    .unwrap();
    let (code, out, err) = biosim(&["run", f.to_str().unwrap()]);
    std::fs::remove_file(&f).ok();
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("   (try: skipped: CPU1 is offline)"), "{out}");
    assert!(
        out.contains("   (try: skipped: hotplug/fail=50 refused"),
        "{out}"
    );
    assert!(
        out.contains("   try: line 3: `try complete 1 hardirq flag` skipped: CPU1 is offline"),
        "{out}"
    );
    assert!(
        out.contains("   try: line 4: `try cpu_down 1 fail=50` skipped"),
        "{out}"
    );
    assert!(out.contains("every expectation holds"), "{out}");
}

/// `fail CPU STATE` and `target CPU STATE`: a value sysfs refuses is an error naming
/// file:line:column unless written `try`, which records the skip; a bad word is a parse error.
#[test]
fn a_refused_fail_or_target_line_is_an_error_unless_tried() {
    for (name, text, says) in [
        (
            "fail0.scn",
            "cpus 2\ncomplete 0 hardirq flag\n   fail 1 0\n",
            "fail0.scn:3:4: `fail 1 0`: hotplug/fail=0 refused: fail_store: state 0 rejected: DEAD callbacks (and CPUHP_BRINGUP_CPU) cannot fail while the CPU is up",
        ),
        (
            "target144.scn",
            "cpus 2\ntarget 1 144\n",
            "target144.scn:2:1: `target 1 144`: hotplug/target=144 refused",
        ),
        (
            "targetbusy.scn",
            "cpus 3\ncpu_down 2\ntarget 1 186\n",
            "targetbusy.scn:3:1: `target 1 186`: hotplug/target=186 refused",
        ),
        (
            "failword.scn",
            "cpus 2\nfail 1 online\n",
            "failword.scn:2:8: `fail`: a state number (-1 disarms; `biosim states` lists them) is expected, got `online`",
        ),
        (
            "targetextra.scn",
            "cpus 2\ntarget 1 186 now\n",
            "targetextra.scn:2:14: unexpected `now`",
        ),
    ] {
        let (code, out, err) = run_text(name, text.as_bytes());
        assert_eq!(code, 2, "{name}: {out}{err}");
        assert!(err.contains(says), "{name}: {err}");
    }
    let f = std::env::temp_dir().join(format!("biosim-cli-tryfail-{}.scn", std::process::id()));
    std::fs::write(
        &f,
        "cpus 2\ntry fail 1 0\ntry target 1 144\nfail 1 187\ncpu_down 1\nsettle\nexpect clean\n",
    )
    .unwrap();
    let (code, out, err) = biosim(&["run", f.to_str().unwrap()]);
    std::fs::remove_file(&f).ok();
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("   (try: skipped: hotplug/fail=0 refused: fail_store: state 0 rejected"),
        "{out}"
    );
    assert!(
        out.contains("   try: line 2: `try fail 1 0` skipped: hotplug/fail=0 refused"),
        "{out}"
    );
    assert!(
        out.contains("   try: line 3: `try target 1 144` skipped: hotplug/target=144 refused"),
        "{out}"
    );
    assert!(
        out.contains("echo 187 > /sys/devices/system/cpu/cpu1/hotplug/fail"),
        "{out}"
    );
    assert!(out.contains("every expectation holds"), "{out}");
}

/// Input is read as a capped stream: `/dev/zero` and an oversize file are refused at once, and an
/// error quotes at most ~100 characters of a long line.
#[test]
fn oversize_input_is_refused_fast_and_long_lines_are_quoted_short() {
    let t = std::time::Instant::now();
    let (code, _, err) = biosim(&["run", "/dev/zero"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/dev/zero: larger than 16 MiB"), "{err}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        t.elapsed()
    );
    let mut big = b"cpus 2\ntick\n".to_vec();
    big.resize((16 << 20) + 1, b'\n');
    let (code, _, err) = run_text("big.scn", &big);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("big.scn: larger than 16 MiB"), "{err}");
    let long = format!("cpus 2\ncomplete {} hardirq flag\n", "7".repeat(5_000_000));
    let (code, _, err) = run_text("long.scn", long.as_bytes());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("long.scn:2:10:"), "{err}");
    assert!(
        err.len() < 400,
        "{} bytes: {}",
        err.len(),
        &err[..400.min(err.len())]
    );
    assert!(err.contains('…'), "{err}");
}
