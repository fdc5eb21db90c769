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
    let mut files: Vec<String> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".scn"))
        .collect();
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
    let (code, _, err) = biosim(&["findings", "--finding", "12"]);
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
    assert!(
        ev.iter()
            .any(|e| e["cat"] == "step" && e["name"] == "hotplug"),
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
        err.contains("--perfetto /nonexistent/dir/t.json: cannot write"),
        "{err}"
    );
}
