//! `biosim run` with no FILE (the built-in default scenario, bio-sim/src/demo/mod.rs), through the
//! real binary: it succeeds with a summary whose figures agree with each other, leaves nothing in
//! its temporary directory (also when stopped by SIGTERM or SIGINT mid-run, when it dies of
//! that signal; an inherited ignored SIGHUP stays ignored), and its verdict is
//! not a constant (a knob that breaks the batcher makes it fail).

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `biosim ARGS` with `TMPDIR` set to `tmp`.
fn biosim(tmp: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_biosim"))
        .args(args)
        .env("TMPDIR", tmp)
        .output()
        .expect("the binary runs")
}

fn text(o: &Output) -> (i32, String, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// The number before `word` on the summary line starting with `label` (the first such number
/// after `label`).
fn figure(out: &str, label: &str, word: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(label) && l.contains(word))
        .unwrap_or_else(|| panic!("no `{label}` line with `{word}` in:\n{out}"));
    let before = &line[..line.find(word).unwrap()];
    before
        .split(|c: char| !c.is_ascii_digit())
        .rfind(|w| !w.is_empty())
        .unwrap_or_else(|| panic!("no number before `{word}` in {line:?}"))
        .parse()
        .unwrap()
}

#[test]
fn the_default_run_succeeds_with_figures_that_agree_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out, err) = text(&biosim(tmp.path(), &["run"]));
    assert_eq!(code, 0, "{out}\n{err}");
    for section in [
        "machine ",
        "device ",
        "bios ",
        "per CPU ",
        "hotplug ",
        "latency ",
        "data ",
        "verdict ",
        "trace ",
        "your own ",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(section)),
            "no {section:?} section:\n{out}"
        );
    }
    let submitted = figure(&out, "bios ", " submitted");
    let completed = figure(&out, "  ", " completed");
    let deferred = figure(&out, "  ", " deferred to task context");
    let writes = figure(&out, "bios ", " writes flagged");
    assert_eq!(completed, submitted, "{out}");
    assert!(deferred <= completed && deferred > 0, "{out}");
    assert!(deferred <= writes, "only the flagged writes defer: {out}");
    let ops = figure(&out, "hotplug ", " operations");
    let rollbacks = figure(&out, "hotplug ", " rolled back");
    assert!(ops >= 3 && rollbacks >= 1, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.ends_with("; rolled back")).count() as u64,
        rollbacks,
        "{out}"
    );
    // The per-CPU deferrals add up to the total.
    let per_cpu: u64 = out
        .lines()
        .filter(|l| l.contains(" deferred, ") && l.contains(" batches"))
        .map(|l| figure(l, l, " deferred,"))
        .sum();
    assert_eq!(per_cpu, deferred, "{out}");
    assert!(
        out.contains("verdict   clean: every invariant holds"),
        "{out}"
    );
    assert!(out.contains("each holds what was written"), "{out}");
    assert!(out.contains("docs/scenarios/README.md"), "{out}");
    // The temporary file was in TMPDIR, and is gone.
    assert!(
        out.contains(&format!("{}/biosim-default-run-", tmp.path().display())),
        "{out}"
    );
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
}

#[test]
fn a_knob_that_breaks_the_dead_callback_makes_the_default_run_fail() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out, err) = text(&biosim(tmp.path(), &["run", "--knob", "dead_drains=false"]));
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("batcher v7 with dead_drains=false"), "{out}");
    assert!(
        out.contains("[nothing stranded at quiescence] while CPU1 was offline: bio#"),
        "{out}"
    );
    assert!(!out.contains("verdict   clean"), "{out}");
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
}

#[test]
fn a_knob_that_breaks_the_online_requeue_strands_the_bios_of_the_rolled_back_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out, err) = text(&biosim(
        tmp.path(),
        &["run", "--knob", "requeue_on_online=false"],
    ));
    assert_eq!(code, 1, "{out}\n{err}");
    // CPU2's offline fails below the batcher's state, after its down_prep disabled the work with
    // bios on the batch: the rollback's startup re-enables the work without requeueing it.
    assert!(
        out.contains("failed at 194 mm/vmstat:online teardown -EAGAIN (injected by hotplug/fail); rolled back"),
        "{out}"
    );
    let waiting = figure(&out, "  ", " on CPU2's at its failed offline");
    assert!(waiting > 0, "{out}");
    let stranded = out
        .lines()
        .filter(|l| {
            l.contains("[nothing stranded at quiescence] after CPU2's rolled-back offline: bio#")
                && l.contains("CPU2 batch")
        })
        .count() as u64;
    assert_eq!(stranded, waiting, "{out}");
    assert!(!out.contains("verdict   clean"), "{out}");
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
}

#[test]
fn quiet_steps_and_perfetto_of_the_default_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out, _) = text(&biosim(tmp.path(), &["run", "--quiet"]));
    assert_eq!(code, 0);
    assert_eq!(out, "== default scenario: no invariant violated\n");
    let (code, out, _) = text(&biosim(tmp.path(), &["run", "--steps"]));
    assert_eq!(code, 0);
    assert!(out.contains("hotplug/fail"), "{out}");
    assert!(out.contains("biosim_cpuhp_fail_injected"), "{out}");
    assert!(out.contains("verdict   clean"), "{out}");
    let json = tmp.path().join("default.json");
    let (code, _, err) = text(&biosim(
        tmp.path(),
        &["run", "--quiet", "--perfetto", json.to_str().unwrap()],
    ));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(v.is_object() || v.is_array());
    std::fs::remove_file(&json).unwrap();
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
}

#[test]
fn bad_default_run_options_exit_2_and_leave_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, _, err) = text(&biosim(tmp.path(), &["run", "--knob", "nope=1"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--knob") && err.contains("nope"), "{err}");
    let (code, _, err) = text(&biosim(tmp.path(), &["run", "--knob", "dead_drains=maybe"]));
    assert_eq!(code, 2, "{err}");
    // --knob and --steps are for the default scenario only.
    let scn = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/scenarios/rollback-cpu1-v7.scn");
    for flag in [&["--knob", "dead_drains=false"][..], &["--steps"][..]] {
        let mut args = vec!["run", scn.to_str().unwrap()];
        args.extend_from_slice(flag);
        let (code, _, err) = text(&biosim(tmp.path(), &args));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("cannot be used with"), "{err}");
    }
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
    // A TMPDIR that cannot take the file is named.
    let missing = tmp.path().join("missing");
    let (code, _, err) = text(&biosim(&missing, &["run"]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "cannot create a temporary file in {}",
            missing.display()
        )),
        "{err}"
    );
}

/// The default run paused `pause_ms` once its temporary file exists, in a fresh `TMPDIR`, with
/// `disposition` (`SIG_DFL` or `SIG_IGN`) set for `signal` before the exec (so a test does not
/// depend on what the test harness inherited: a background job may start with `SIGINT` ignored).
fn paused(
    signal: libc::c_int,
    disposition: libc::sighandler_t,
    pause_ms: u64,
) -> (tempfile::TempDir, std::process::Child) {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_biosim"));
    cmd.arg("run")
        .env("TMPDIR", tmp.path())
        .env("BIOSIM_DEFAULT_RUN_PAUSE_MS", pause_ms.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: between fork and exec the closure only calls signal(2), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::signal(signal, disposition) == libc::SIG_ERR {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    (tmp, child)
}

/// Waits (bounded, so a broken binary fails the test instead of hanging it; not a timing
/// assertion) until `dir` holds a file, and returns its entries.
fn wait_for_file(dir: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let e = entries(dir);
        if !e.is_empty() || Instant::now() > deadline {
            break e.join(" ");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `signal` to `child`.
fn kill(child: &std::process::Child, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

/// Starts the default run paused once its temporary file exists, waits for the file, sends
/// `signal`, and returns the exit status and what is left in the directory.
fn interrupted(signal: libc::c_int) -> (ExitStatus, Vec<String>, String) {
    let (tmp, mut child) = paused(signal, libc::SIG_DFL, 60_000);
    let seen = wait_for_file(tmp.path());
    kill(&child, signal);
    let status = child.wait().unwrap();
    (status, entries(tmp.path()), seen)
}

#[test]
fn sigterm_mid_run_removes_the_temporary_file_and_dies_of_sigterm() {
    let (status, left, seen) = interrupted(libc::SIGTERM);
    assert!(seen.starts_with("biosim-default-run-"), "{seen:?}");
    // Killed by the signal (WIFSIGNALED, a shell's 143), not an exit(143).
    assert_eq!(
        (status.signal(), status.code()),
        (Some(libc::SIGTERM), None)
    );
    assert_eq!(left, Vec::<String>::new());
}

#[test]
fn sigint_mid_run_removes_the_temporary_file_and_dies_of_sigint() {
    let (status, left, seen) = interrupted(libc::SIGINT);
    assert!(seen.starts_with("biosim-default-run-"), "{seen:?}");
    // WIFSIGNALED with SIGINT: a bash loop running biosim stops on Ctrl-C.
    assert_eq!((status.signal(), status.code()), (Some(libc::SIGINT), None));
    assert_eq!(left, Vec::<String>::new());
}

#[test]
fn an_inherited_ignored_sighup_stays_ignored_as_under_nohup() {
    let (tmp, mut child) = paused(libc::SIGHUP, libc::SIG_IGN, 3_000);
    let seen = wait_for_file(tmp.path());
    assert!(seen.starts_with("biosim-default-run-"), "{seen:?}");
    kill(&child, libc::SIGHUP);
    // The file is still there after the SIGHUP was sent: the run was in progress then (a
    // handler would have removed it and killed the process).
    assert_eq!(entries(tmp.path()).join(" "), seen);
    let status = child.wait().unwrap();
    assert_eq!((status.signal(), status.code()), (None, Some(0)));
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
}
