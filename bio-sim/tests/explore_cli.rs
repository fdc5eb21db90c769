//! `biosim explore`, the real binary: a v6 counterexample that `biosim run` reproduces with a
//! byte-identical trace, nothing found on v7, shards that add up to the unsharded campaign, and
//! bad flags refused with exit status 2 leaving no file.

use std::path::Path;
use std::process::Command;

fn biosim_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_biosim"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("one JSON object ({e}): {out}"))
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The trace part of `biosim run`'s output: everything before its verdict line.
fn run_trace<'a>(out: &'a str, file: &str) -> &'a str {
    let at = out
        .find(&format!("== {file}: "))
        .unwrap_or_else(|| panic!("a verdict line for {file}: {out}"));
    &out[..at]
}

#[test]
fn explore_v6_writes_a_counterexample_that_run_reproduces_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (code, out, err) = biosim_in(
        d,
        &[
            "explore",
            "--variant",
            "v6",
            "--seed",
            "1",
            "--cases",
            "2000",
            "--out",
            "cx.scn",
            "--json",
        ],
    );
    assert_eq!(code, 1, "a violation found: {out}\n{err}");
    let j = json(&out);
    let cx = &j["counterexample"];
    assert_eq!(cx["file"], "cx.scn", "{j}");
    assert_eq!(cx["reproduce"], "biosim run cx.scn", "{j}");
    assert_eq!(files(d), ["cx.scn"], "only the counterexample is left");
    let text = std::fs::read_to_string(d.join("cx.scn")).unwrap();
    // The file's expect lines name the violation found: finding 1's stranded bio.
    let expects: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("expect "))
        .collect();
    assert!(expects.contains(&"stranded"), "{text}");
    assert_eq!(
        serde_json::json!(expects),
        cx["expect"],
        "the JSON names the file's expect lines: {text}"
    );
    assert!(
        cx["violation"]
            .as_str()
            .unwrap()
            .starts_with("[nothing stranded at quiescence]"),
        "{j}"
    );
    let n = text
        .lines()
        .filter(|l| {
            [
                "complete",
                "worker",
                "tick",
                "cpu_",
                "step",
                "need_resched",
                "fail ",
                "target ",
                "try ",
            ]
            .iter()
            .any(|w| l.starts_with(w))
        })
        .count();
    assert!(
        (1..=3).contains(&n),
        "shrunk to at most 3 transitions: {text}"
    );
    assert_eq!(n, cx["transitions"].as_array().unwrap().len(), "{text}");

    let (code, run_out, err) = biosim_in(d, &["run", "cx.scn"]);
    assert_eq!(code, 0, "every expectation holds: {run_out}\n{err}");
    assert!(run_out.contains("every expectation holds"), "{run_out}");
    assert!(
        run_out.contains("   [nothing stranded at quiescence] bio#"),
        "{run_out}"
    );
    assert_eq!(
        run_trace(&run_out, "cx.scn"),
        cx["trace"].as_str().unwrap(),
        "byte-identical trace"
    );

    // The text report prints the same trace and the command.
    let (code, txt, _) = biosim_in(
        d,
        &[
            "explore",
            "--variant",
            "v6",
            "--seed",
            "1",
            "--cases",
            "2000",
            "--out",
            "cx2.scn",
        ],
    );
    assert_eq!(code, 1, "{txt}");
    assert!(txt.ends_with("reproduce: biosim run cx2.scn\n"), "{txt}");
    let start = txt.find("---\n").unwrap() + 4;
    let end = txt.find("--- end of trace ---\n").unwrap();
    let (_, run2, _) = biosim_in(d, &["run", "cx2.scn"]);
    assert_eq!(&txt[start..end], run_trace(&run2, "cx2.scn"));
    // The comparison's twin: a file that no longer reproduces (its completion removed) fails
    // its expect line, and its trace differs.
    let broken: String = text
        .lines()
        .filter(|l| !l.starts_with("complete"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(d.join("broken.scn"), broken).unwrap();
    let (code, b, _) = biosim_in(d, &["run", "broken.scn"]);
    assert_eq!(code, 1, "{b}");
    assert_ne!(run_trace(&b, "broken.scn"), cx["trace"].as_str().unwrap());
}

#[test]
fn explore_v7_finds_nothing_in_its_budget_and_its_twin_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (code, out, err) = biosim_in(
        d,
        &["explore", "--variant", "v7", "--cases", "2000", "--json"],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(err, "", "no progress bar when stderr is not a terminal");
    let j = json(&out);
    assert_eq!(j["cases"], 2000, "{j}");
    assert_eq!(j["violations"], 0, "{j}");
    assert!(j["counterexample"].is_null(), "{j}");
    assert!(files(d).is_empty(), "{:?}", files(d));
    // The same budget finds finding 1 on v7's buggy twin (no requeue on online), so "nothing"
    // above is the variant's, not the budget's.
    let (code, out, err) = biosim_in(
        d,
        &[
            "explore",
            "--variant",
            "v7",
            "--knob",
            "requeue_on_online=false",
            "--cases",
            "2000",
            "--json",
        ],
    );
    assert_eq!(code, 1, "{out}\n{err}");
    let j = json(&out);
    let file = j["counterexample"]["file"].as_str().unwrap().to_owned();
    assert!(
        file.starts_with("explore-v7-seed1-case") && file.ends_with(".scn"),
        "{file}"
    );
    let text = std::fs::read_to_string(d.join(&file)).unwrap();
    assert!(
        text.contains("variant v7\nknob requeue_on_online=false\n"),
        "{text}"
    );
    assert!(text.contains("\nexpect stranded\n"), "{text}");
    let (code, run, _) = biosim_in(d, &["run", &file]);
    assert_eq!(code, 0, "{run}");
}

fn campaign(d: &Path, extra: &[&str]) -> (u64, u64) {
    let mut args = vec![
        "explore",
        "--variant",
        "v7",
        "--cases",
        "301",
        "--seed",
        "9",
        "--json",
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = biosim_in(d, &args);
    assert_eq!(code, 0, "{args:?}: {out}\n{err}");
    let j = json(&out);
    let fp = u64::from_str_radix(j["fingerprint"].as_str().unwrap(), 16).unwrap();
    (j["cases"].as_u64().unwrap(), fp)
}

/// The shards' case counts add up to the unsharded run's, and so do their fingerprints (a sum of
/// one hash per case run, of its index and transitions): every case run once, none twice. The
/// checks' twins: a shard counted twice, or a shard missing, does not add up.
#[test]
fn two_shards_cover_exactly_the_unsharded_cases() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let whole = campaign(d, &["--jobs", "2"]);
    assert_eq!(whole.0, 301);
    assert_eq!(
        campaign(d, &["--jobs", "1"]),
        whole,
        "--jobs changes nothing"
    );
    let a = campaign(d, &["--shard", "1/2"]);
    let b = campaign(d, &["--shard", "2/2", "--jobs", "2"]);
    assert_eq!((a.0, b.0), (151, 150));
    let sum = |xs: &[(u64, u64)]| {
        xs.iter()
            .fold((0u64, 0u64), |(n, f), x| (n + x.0, f.wrapping_add(x.1)))
    };
    assert_eq!(sum(&[a, b]), whole);
    assert_ne!(sum(&[a, a]).1, whole.1, "a duplicate shard shows");
    let t: Vec<_> = ["1/3", "2/3", "3/3"]
        .iter()
        .map(|s| campaign(d, &["--shard", s]))
        .collect();
    assert_eq!(sum(&t), whole);
    assert_ne!(sum(&t[..2]), whole, "a missing shard shows");
    assert!(files(d).is_empty());
}

#[test]
fn bad_flags_exit_2_with_a_clear_message_and_leave_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("taken.scn"), "keep me\n").unwrap();
    let cases: [(&[&str], &str); 9] = [
        (&["--knob", "bogus=1"], "unknown knob `bogus`"),
        (
            &["--knob", "requeue_on_online=maybe"],
            "expected true or false",
        ),
        (&["--shard", "3/2"], "I must be 1..=2"),
        (&["--shard", "0/2"], "numbered from 1"),
        (&["--shard", "1/0"], "N must be at least 1"),
        (&["--out", "taken.scn"], "the file exists"),
        (&["--cases", "0"], "--cases"),
        (&["--time", "0s"], "more than 0"),
        (&["--variant", "v9"], "v9"),
    ];
    for (flags, want) in cases {
        let mut args = vec![
            "explore",
            "--variant",
            "v6",
            "--cases",
            "50",
            "--out",
            "new.scn",
        ];
        if flags[0] == "--out" || flags[0] == "--cases" || flags[0] == "--variant" {
            args = vec!["explore"];
        }
        args.extend_from_slice(flags);
        let (code, out, err) = biosim_in(d, &args);
        assert_eq!(code, 2, "{args:?}: {out}\n{err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(files(d), ["taken.scn"], "{args:?}");
    }
    assert_eq!(
        std::fs::read_to_string(d.join("taken.scn")).unwrap(),
        "keep me\n"
    );
    // A kernel config Kconfig refuses, at run time: exit 2 too.
    let (code, _, err) = biosim_in(
        d,
        &[
            "explore",
            "--preempt",
            "full",
            "--no-preempt-count",
            "--out",
            "x.scn",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("CONFIG_PREEMPT"), "{err}");
    assert_eq!(files(d), ["taken.scn"]);
}

/// docs/explore/finding-1-v6.scn is what the command docs/explore.md quotes writes today, byte for
/// byte (its twin: any other case, e.g. another seed, writes another file).
#[test]
fn the_documented_counterexample_is_what_explore_writes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let want = std::fs::read_to_string(root.join("docs/explore/finding-1-v6.scn")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("docs/explore")).unwrap();
    let out = "docs/explore/finding-1-v6.scn";
    let (code, _, err) = biosim_in(
        d,
        &[
            "explore",
            "--variant",
            "v6",
            "--cases",
            "1000",
            "--out",
            out,
        ],
    );
    assert_eq!(code, 1, "{err}");
    let got = std::fs::read_to_string(d.join(out)).unwrap();
    assert_eq!(
        got, want,
        "regenerate docs/explore/finding-1-v6.scn with the command in its first line"
    );
    let doc = std::fs::read_to_string(root.join("docs/explore.md")).unwrap();
    assert!(
        doc.contains("```scn file=docs/explore/finding-1-v6.scn\n"),
        "docs/explore.md quotes the file (doc_examples checks the quote equals it)"
    );
    std::fs::remove_file(d.join(out)).unwrap();
    let (code, _, _) = biosim_in(
        d,
        &[
            "explore",
            "--variant",
            "v6",
            "--cases",
            "1000",
            "--seed",
            "2",
            "--out",
            out,
        ],
    );
    assert_eq!(code, 1);
    assert_ne!(std::fs::read_to_string(d.join(out)).unwrap(), want);
}

/// `--time` runs until the time is up and says so; `biosim --help` lists `explore`.
#[test]
fn a_time_budget_runs_some_cases_and_help_lists_explore() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = biosim_in(dir.path(), &["explore", "--time", "300ms", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let j = json(&out);
    assert_eq!(j["budget"]["seconds"], 0.3, "{j}");
    assert!(j["cases"].as_u64().unwrap() > 0, "{j}");
    let (code, _, _) = biosim_in(dir.path(), &["explore", "--time", "1s", "--cases", "5"]);
    assert_eq!(code, 2, "--time and --cases conflict");
    let (_, help, _) = biosim_in(dir.path(), &["--help"]);
    assert!(help.contains("explore"), "{help}");
    assert!(files(dir.path()).is_empty());
}

/// `--inject` and `--backing` (with `--loop`): a campaign drawing fault injection and plugging
/// over a stacked loop device runs clean on base (one CPU); on v5 it finds 6.18's plug-list
/// corruption (its NOWAIT I/O in `->queue_rq()` adds to the plug list being flushed) and exits
/// 1; either flag without `--loop` is refused with exit status 2.
#[test]
fn explore_inject_and_backing_need_loop_and_run() {
    let d = std::env::temp_dir();
    let run = |dir: &std::path::Path, version: &str| {
        biosim_in(
            dir,
            &[
                "explore",
                "--loop",
                version,
                "--inject",
                "--backing",
                "loop",
                "--cpus",
                "1",
                "--cases",
                "100",
            ],
        )
    };
    let (code, out, err) = run(&d, "base");
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("no invariant violated"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = run(dir.path(), "v5");
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("request added to plug->mq_list while blk_mq_flush_plug_list() walks it"),
        "{out}"
    );
    for flags in [&["--inject"][..], &["--backing", "nullb"][..]] {
        let mut args = vec!["explore", "--cases", "1"];
        args.extend_from_slice(flags);
        let (code, _, err) = biosim_in(&d, &args);
        assert_eq!(code, 2, "{flags:?}: {err}");
        assert!(err.contains("--loop"), "{err}");
    }
    let (code, _, err) = biosim_in(&d, &["explore", "--loop", "v5", "--backing", "tape"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown backing `tape`"), "{err}");
}

/// `--loop-knob` (a reviewer's own fix, explored): v5 with L6's fix
/// (`nowait_ends_write_on_eagain=true`) and `--inject` finds loop check L7 (a merged request
/// whose `lo_rw_aio_prep` allocation fails is never completed); the counterexample carries the
/// knob as a `loop_knob` line, so `biosim run` reproduces it; with L7's fix too, the same cases
/// are clean; an unknown knob or one without `--loop` is refused with exit status 2.
#[test]
fn explore_loop_knob_explores_a_fixed_version_and_writes_the_knob() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("l7.scn");
    let args = |extra: &[&str], out: Option<&str>| -> Vec<String> {
        let a = vec![
            "explore",
            "--loop",
            "v5",
            "--cpus",
            "1",
            "--seed",
            "9",
            "--cases",
            "1000",
            "--inject",
            "--loop-knob",
            "nowait_ends_write_on_eagain=true",
        ];
        let mut a: Vec<String> = a.into_iter().map(str::to_owned).collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        if let Some(o) = out {
            a.extend(["--out".to_owned(), o.to_owned()]);
        }
        a
    };
    let a = args(&[], Some(out_file.to_str().unwrap()));
    let (code, out, err) = biosim_in(
        dir.path(),
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("cmd->ref 0 -> -1, the request is never completed"),
        "{out}"
    );
    let scn = std::fs::read_to_string(&out_file).unwrap();
    assert!(
        scn.contains("loop v5 sparse\nloop_knob nowait_ends_write_on_eagain=true\n"),
        "{scn}"
    );
    assert!(scn.contains("fail_alloc lo_rw_aio_prep"), "{scn}");
    let (code, out, err) = biosim_in(dir.path(), &["run", out_file.to_str().unwrap()]);
    assert_eq!(code, 0, "the file's expect lines hold: {out}\n{err}");
    let a = args(&["--loop-knob", "ref_armed_before_prep=true"], None);
    let (code, out, err) = biosim_in(
        dir.path(),
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("no invariant violated"), "{out}");
    let (code, _, err) = biosim_in(
        dir.path(),
        &["explore", "--loop", "v5", "--loop-knob", "bogus=true"],
    );
    assert_eq!(code, 2);
    assert!(err.contains("unknown loop_knob `bogus`"), "{err}");
    let (code, _, err) = biosim_in(dir.path(), &["explore", "--loop-knob", "hint=false"]);
    assert_eq!(code, 2);
    assert!(err.contains("--loop"), "{err}");
}

/// `--json` with `--trace -`: the trace alone on standard output, the JSON report on standard
/// error, each whole (the two never share a stream).
#[test]
fn json_with_the_trace_on_stdout_goes_to_stderr_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = biosim_in(
        dir.path(),
        &[
            "explore",
            "--variant",
            "v6",
            "--seed",
            "1",
            "--cases",
            "2000",
            "--json",
            "--trace",
            "-",
        ],
    );
    assert_eq!(code, 1, "a violation found: {err}");
    let j = json(&err);
    assert!(j["counterexample"].is_object(), "{j}");
    assert!(out.starts_with("# tracer: nop"), "a trace file: {out}");
    assert!(
        !out.contains("\"counterexample\""),
        "no JSON in the trace: {out}"
    );
}
