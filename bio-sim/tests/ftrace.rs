//! `--trace FILE`, through the real binary: every trace biosim writes (the default run, every
//! docs/scenarios/*.scn, each gallery finding, each loop check, an explore counterexample, both
//! sides of a diff) is a tracefs `trace` file line for line, each event's fields matching its
//! committed `print fmt` (tests/data/tracefs-6.18/formats); a golden of finding 1's scenario on
//! v6, byte-identical across runs; and the refusals that keep every existing file intact.
//!
//! Bless the golden: `BIOSIM_BLESS=1 cargo test -p bio-sim --test ftrace`.

use bio_sim::report::ftrace::{check_trace, EventFormat};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Events biosim prints in its own words rather than with the kernel's `print fmt` (their lines
/// only have to parse). Empty: every kernel event biosim fires matches its format. A new event
/// may be listed while it is converted; a listed event whose every line matches its format fails
/// the test until it is taken off, so the list cannot go stale.
const UNCONVERTED: &[&str] = &[];

/// Kernel events biosim prints that have no format file under tests/data (their lines only have
/// to parse). lockdep's `lock:lock_acquire`/`lock_release` (include/trace/events/lock.h,
/// `"%p %s%s%s"` and `"%p %s"`) exist only on a kernel with CONFIG_LOCKDEP; this machine's has
/// only `contention_begin`/`contention_end` under events/lock, so there is no format to record.
const WITHOUT_FORMAT: &[&str] = &["lock_acquire", "lock_release"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bio-sim lives in the workspace")
        .to_path_buf()
}

fn formats() -> Vec<EventFormat> {
    let dir = workspace_root().join("tests/data/tracefs-6.18/formats");
    let mut v: Vec<EventFormat> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| EventFormat::read(&e.unwrap().path()).unwrap())
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// Runs biosim in the workspace root; (status, stdout, stderr).
fn biosim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_biosim"))
        .args(args)
        .current_dir(workspace_root())
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `args` with `--trace DIR/NAME.trace` added and returns the file's text.
fn traced(dir: &Path, name: &str, args: &[&str]) -> String {
    let path = dir.join(format!("{name}.trace"));
    let p = path.to_str().unwrap();
    let mut a = args.to_vec();
    a.extend(["--trace", p]);
    let (code, out, err) = biosim(&a);
    assert!(code == 0 || code == 1, "{a:?}: exit {code}\n{out}\n{err}");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{a:?} wrote no trace ({e}): {err}"))
}

/// Every problem of `text`, prefixed with `what`.
fn problems(what: &str, text: &str, formats: &[EventFormat]) -> Vec<String> {
    check_trace(text, formats, WITHOUT_FORMAT, UNCONVERTED)
        .into_iter()
        .map(|p| format!("{what}: {p}"))
        .collect()
}

/// How many event lines `text` has of an event that a committed format file checks.
fn checked_lines(text: &str, formats: &[EventFormat]) -> usize {
    bio_sim::report::ftrace::parse_trace(text)
        .map(|ls| {
            ls.iter()
                .filter(|l| {
                    formats.iter().any(|f| f.name == l.event)
                        && !UNCONVERTED.contains(&l.event.as_str())
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn every_trace_biosim_writes_is_a_tracefs_trace_file_with_the_kernels_fields() {
    let f = formats();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut bad = Vec::new();
    let mut traces = Vec::new();
    traces.push((
        "biosim run".to_owned(),
        traced(d, "default", &["run", "--quiet"]),
    ));
    // The detectors' scenarios too: their merge, remap and plug events are checked by format.
    let mut scns: Vec<PathBuf> = ["docs/scenarios", "docs/scenarios/detectors"]
        .iter()
        .flat_map(|d| std::fs::read_dir(workspace_root().join(d)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "scn"))
        .collect();
    scns.sort();
    assert!(scns.len() >= 10, "{scns:?}");
    for (i, scn) in scns.iter().enumerate() {
        let rel = scn
            .strip_prefix(workspace_root())
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let text = traced(d, &format!("scn{i}"), &["run", "--quiet", &rel]);
        traces.push((format!("biosim run {rel}"), text));
    }
    for f in bio_sim::checks::findings::FINDINGS {
        let n = f.id.to_string();
        let a = ["findings", "--finding", n.as_str()];
        if f.kind == bio_sim::checks::findings::FindingKind::Figure {
            continue;
        }
        traces.push((
            format!("findings --finding {n}"),
            traced(d, &format!("f{n}"), &a),
        ));
    }
    for c in bio_sim::checks::loop_checks::LOOP_CHECKS {
        let a = ["loop", "--finding", c.id];
        traces.push((format!("loop --finding {}", c.id), traced(d, c.id, &a)));
    }
    let cx = d.join("cx.scn");
    let a = [
        "explore",
        "--variant",
        "v6",
        "--seed",
        "1",
        "--cases",
        "2000",
        "--out",
        cx.to_str().unwrap(),
    ];
    traces.push((
        "explore's counterexample".to_owned(),
        traced(d, "explore", &a),
    ));
    for (what, text) in &traces {
        bad.extend(problems(what, text, &f));
    }
    assert!(
        bad.is_empty(),
        "{} problems:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // Not vacuous: every output has events, and some of them are checked against a format.
    for (what, text) in &traces {
        assert!(text.lines().count() > 15, "{what}: {text}");
    }
    let checked: usize = traces.iter().map(|(_, t)| checked_lines(t, &f)).sum();
    assert!(checked > 20, "{checked} lines checked against a print fmt");
    // The list names only what is still printed: an event no trace shows any more leaves it too.
    let seen: std::collections::BTreeSet<String> = traces
        .iter()
        .flat_map(|(_, t)| bio_sim::report::ftrace::parse_trace(t).unwrap())
        .map(|l| l.event)
        .collect();
    let gone: Vec<&&str> = UNCONVERTED.iter().filter(|u| !seen.contains(**u)).collect();
    assert!(
        gone.is_empty(),
        "no trace prints {gone:?} any more: take them off UNCONVERTED"
    );
}

/// null_blk's timer mode (`irqmode=2`) on the deterministic runtime, from its scenario's trace:
/// every nullb0 request issued is completed once, on the CPU that issued it, in hardirq (`h` in
/// the flags) inside a `nullb-hrtimer` interrupt; no completion comes before the `nullb_timer`
/// line that expires its hrtimer; each completion runs between the `hrtimer_expire_entry` and
/// `hrtimer_expire_exit` of a timer that `hrtimer_start` armed on the same CPU when the request was
/// issued, with `now` at least its `expires`; and every line passes its format check.
#[test]
fn nullblk_timer_mode_completes_in_the_hrtimers_hardirq_on_the_issuing_cpu() {
    let f = formats();
    let dir = tempfile::tempdir().unwrap();
    let scn = "docs/scenarios/nullblk-timer-v7.scn";
    let text = traced(dir.path(), "timer", &["run", "--quiet", scn]);
    let bad = problems(scn, &text, &f);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // (rwbs, sector) of a nullb0 request line: `254,0 W 4096 () 24 + 8 ...` (issue) or
    // `254,0 W () 24 + 8 ...` (complete).
    let key = |fields: &str| -> Option<(String, String)> {
        let w: Vec<&str> = fields.split_whitespace().collect();
        let at = w.iter().position(|x| *x == "()")?;
        if w.first() != Some(&"254,0") {
            return None;
        }
        Some((w.get(1)?.to_string(), w.get(at + 1)?.to_string()))
    };
    let (mut issued, mut expired, mut completed) = (Vec::new(), 0, 0);
    let (mut in_irq, mut read_back) = (None, false);
    // `name=value` of a trace line's fields.
    let field = |fields: &str, name: &str| -> String {
        let pre = format!("{name}=");
        let w = fields.split_whitespace().find(|w| w.starts_with(&pre));
        w.unwrap_or_else(|| panic!("no {name}= in {fields}"))[pre.len()..].to_string()
    };
    // hrtimer -> (CPU, expires, the request issued just before on that CPU), and the timer
    // whose callback runs now.
    let mut armed = std::collections::HashMap::new();
    let (mut last_issued, mut running) = (std::collections::HashMap::new(), None);
    let mut starts = 0;
    for l in bio_sim::report::ftrace::parse_trace(&text).unwrap() {
        match l.event.as_str() {
            "hrtimer_start" => {
                assert_eq!(field(&l.fields, "function"), "null_cmd_timer_expired");
                assert_eq!(field(&l.fields, "mode"), "REL");
                let expires: u64 = field(&l.fields, "expires").parse().unwrap();
                let k = last_issued
                    .remove(&l.cpu)
                    .expect("armed without a request issued");
                armed.insert(field(&l.fields, "hrtimer"), (l.cpu, expires, k));
                starts += 1;
            }
            "hrtimer_expire_entry" => {
                let t = field(&l.fields, "hrtimer");
                let (cpu, expires, _) = armed.get(&t).expect("expired, never started");
                assert_eq!(*cpu, l.cpu, "expired on another CPU: {l:?}");
                let now: u64 = field(&l.fields, "now").parse().unwrap();
                assert!(now >= *expires, "expired early: {l:?}");
                assert_eq!(in_irq, Some(l.cpu), "not in the hrtimer's interrupt: {l:?}");
                running = Some(t);
            }
            "hrtimer_expire_exit" => {
                let t = field(&l.fields, "hrtimer");
                assert_eq!(running.take(), Some(t.clone()), "exit without entry: {l:?}");
                armed.remove(&t);
            }
            "tracing_mark_write" if l.fields.contains("expire nullb0's next hrtimer") => {
                expired += 1
            }
            // The final read-back settles by firing every pending timer without a marker.
            "tracing_mark_write" if l.fields.contains("read every written block back") => {
                read_back = true
            }
            "block_rq_issue" => {
                let k = key(&l.fields).expect("a nullb0 line");
                last_issued.insert(l.cpu, k.clone());
                issued.push((k, l.cpu));
            }
            "irq_handler_entry" if l.fields.contains("name=nullb-hrtimer") => in_irq = Some(l.cpu),
            "irq_handler_exit" => in_irq = None,
            "block_rq_complete" => {
                let k = key(&l.fields).expect("a nullb0 line");
                let i = issued
                    .iter()
                    .position(|(ik, _)| *ik == k)
                    .unwrap_or_else(|| panic!("completed, never issued: {}", l.fields));
                let (_, cpu) = issued.remove(i);
                assert_eq!(l.cpu, cpu, "ended on another CPU than it was issued: {l:?}");
                let t = running
                    .as_ref()
                    .expect("completed outside an hrtimer callback");
                assert_eq!(
                    armed[t].2, k,
                    "completed by another request's hrtimer: {l:?}"
                );
                assert_eq!(in_irq, Some(l.cpu), "not in the hrtimer's interrupt: {l:?}");
                assert_eq!(l.flags.as_bytes()[2], b'h', "not in hardirq: {l:?}");
                completed += 1;
                assert!(
                    read_back || completed <= expired,
                    "completion {completed} before its hrtimer expired: {l:?}"
                );
            }
            _ => {}
        }
    }
    assert!(issued.is_empty(), "never completed: {issued:?}");
    assert!(armed.is_empty(), "hrtimers never expired: {armed:?}");
    assert_eq!(
        (expired, completed, starts),
        (2, 3, 3),
        "two scenario requests and the read-back"
    );
}

#[test]
fn finding_01s_scenario_on_v6_writes_its_golden_trace_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let scn = ["run", "docs/scenarios/finding-01-rollback-v6.scn"];
    let one = traced(dir.path(), "one", &scn);
    let two = traced(dir.path(), "two", &scn);
    assert_eq!(one, two, "two runs of one scenario wrote different traces");
    let (code, stdout, stderr) = biosim(&[scn[0], scn[1], "--trace", "-"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, one, "`--trace -` writes the same file on stdout");
    assert!(
        stderr.starts_with("== docs/scenarios/finding-01-rollback-v6.scn: 1 violation(s)"),
        "{stderr}"
    );
    let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/ftrace-finding-01-rollback-v6.trace");
    if std::env::var_os("BIOSIM_BLESS").is_some() {
        std::fs::write(&golden, &one).expect("write the golden");
    }
    let want = std::fs::read_to_string(&golden).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (bless it: BIOSIM_BLESS=1 cargo test -p bio-sim --test ftrace)",
            golden.display()
        )
    });
    assert!(
        one == want,
        "the trace changed; if that is intended, bless it: BIOSIM_BLESS=1 cargo test -p bio-sim --test ftrace"
    );
}

#[test]
fn diff_writes_both_sides_and_the_perfetto_timeline_has_simulated_time() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("traces");
    let (code, _, err) = biosim(&[
        "diff",
        "v6",
        "v6-review",
        "docs/scenarios/finding-01-rollback-v6.scn",
        "--trace",
        d.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "the verdicts differ: {err}");
    let f = formats();
    for side in ["A", "B"] {
        let text = std::fs::read_to_string(d.join(format!("{side}.trace"))).unwrap();
        let p = problems(side, &text, &f);
        assert!(p.is_empty(), "{p:?}");
        assert!(
            text.contains(&format!("biosim_verdict: == {side} ")),
            "{text}"
        );
    }
    let json = dir.path().join("f1.json");
    let (code, _, err) = biosim(&[
        "run",
        "docs/scenarios/finding-01-rollback-v6.scn",
        "--perfetto",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    // Jiffy 3 at HZ=250 is 12 ms: the timers fired there.
    assert!(ev
        .iter()
        .any(|e| e["ts"].as_u64().is_some_and(|t| t >= 12_000)));
    assert!(ev.iter().any(|e| e["cat"] == "cpuhp" && e["ph"] == "B"));
    assert!(ev.iter().any(|e| e["cat"] == "bio" && e["ph"] == "s"));
}

/// Every file under `dir`, with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = walk(dir)
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn an_existing_file_an_input_file_or_a_bad_path_is_refused_with_exit_2_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let scn = d.join("s.scn");
    std::fs::copy(
        workspace_root().join("docs/scenarios/finding-01-rollback-v6.scn"),
        &scn,
    )
    .unwrap();
    let old = d.join("old.trace");
    std::fs::write(&old, "precious\n").unwrap();
    std::fs::create_dir(d.join("out")).unwrap();
    std::fs::write(d.join("out/A.trace"), "precious A\n").unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    // `biosim explore --variant v6 --cases 2000` with `rest`.
    let explore = |rest: &[&str]| -> Vec<String> {
        ["explore", "--variant", "v6", "--cases", "2000"]
            .iter()
            .chain(rest)
            .map(|a| a.to_string())
            .collect()
    };
    let before = snapshot(d);
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["run".into(), s(&scn), "--trace".into(), s(&old)],
            "the file exists",
        ),
        (
            vec!["run".into(), s(&scn), "--trace".into(), s(&scn)],
            "input file",
        ),
        (
            vec!["run".into(), s(&scn), "--perfetto".into(), s(&scn)],
            "input file",
        ),
        (
            vec!["run".into(), s(&scn), "--perfetto".into(), s(&old)],
            "the file exists",
        ),
        (
            vec![
                "run".into(),
                s(&scn),
                "--trace".into(),
                s(&d.join("none/x.trace")),
            ],
            "is not a directory",
        ),
        (
            vec!["run".into(), "--trace".into(), s(&old)],
            "the file exists",
        ),
        (
            vec![
                "findings".into(),
                "--finding".into(),
                "1".into(),
                "--trace".into(),
                s(&old),
            ],
            "the file exists",
        ),
        (
            vec![
                "loop".into(),
                "--finding".into(),
                "L2".into(),
                "--trace".into(),
                s(&old),
            ],
            "the file exists",
        ),
        (
            explore(&["--out", &s(&d.join("new.scn")), "--trace", &s(&old)]),
            "the file exists",
        ),
        (
            vec![
                "diff".into(),
                "v6".into(),
                "v7".into(),
                s(&scn),
                "--trace".into(),
                s(&d.join("out")),
            ],
            "the file exists",
        ),
        (
            vec![
                "diff".into(),
                "v6".into(),
                "v7".into(),
                s(&scn),
                "--trace".into(),
                s(&old),
            ],
            "not a directory",
        ),
        (
            vec![
                "diff".into(),
                "v6".into(),
                "v7".into(),
                s(&scn),
                "--trace".into(),
                "-".into(),
            ],
            "give a directory",
        ),
        (
            vec![
                "run".into(),
                s(&scn),
                "--trace".into(),
                s(&d.join("t")),
                "--perfetto".into(),
                s(&d.join("t")),
            ],
            "both name",
        ),
        (
            vec![
                "run".into(),
                s(&scn),
                "--trace".into(),
                "-".into(),
                "--perfetto".into(),
                "-".into(),
            ],
            "--trace and --perfetto both write to standard output",
        ),
        (
            explore(&[
                "--out",
                &s(&d.join("new.scn")),
                "--trace",
                &s(&d.join("out/../new.scn")),
            ]),
            "--out and --trace both name",
        ),
    ];
    for (args, why) in cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = biosim(&a);
        assert_eq!(code, 2, "{a:?}: {out}\n{err}");
        assert!(err.contains(why), "{a:?}: expected {why:?} in: {err}");
        assert_eq!(snapshot(d), before, "{a:?} changed a file");
    }
}
