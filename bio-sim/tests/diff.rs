//! `biosim diff A B FILE`, through the real binary: a golden of the v6 review's fix on finding 1,
//! identical variants, knobs, and bad input (exit 2).
//!
//! Bless the golden: `BIOSIM_BLESS=1 cargo test -p bio-sim --test diff`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bio-sim lives in the workspace")
        .to_path_buf()
}

fn biosim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_biosim"))
        .args(args)
        .current_dir(workspace_root())
        .env_remove("RUST_LOG")
        .output()
        .expect("run biosim")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8")
}

/// What the v6 review's fix changes in finding 1's interleaving: the verdicts differ (exit 1) and
/// the traces part in the final settle, where v6-review's rollback requeues the batch.
#[test]
fn finding_01_v6_against_v6_review_matches_its_golden() {
    let o = biosim(&[
        "diff",
        "v6",
        "v6-review",
        "docs/scenarios/finding-01-rollback-v6.scn",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    let golden =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/diff-finding-01-v6-v6-review.txt");
    if std::env::var_os("BIOSIM_BLESS").is_some() {
        std::fs::write(&golden, &out).expect("write the golden");
    }
    let want = std::fs::read_to_string(&golden).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (bless it: BIOSIM_BLESS=1 cargo test -p bio-sim --test diff)",
            golden.display()
        )
    });
    assert_eq!(
        out, want,
        "the output changed; if that is intended, bless it: BIOSIM_BLESS=1 cargo test -p bio-sim --test diff"
    );
    assert!(out.contains("== verdicts differ\n"), "{out}");
    assert!(
        out.contains("== the traces diverge in the final settle"),
        "{out}"
    );
}

#[test]
fn identical_variants_report_no_divergence_and_exit_0() {
    let o = biosim(&[
        "diff",
        "v7",
        "v7",
        "docs/scenarios/finding-01-rollback-v7.scn",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("== verdicts are the same\n"), "{out}");
    assert!(out.contains("== the traces are identical ("), "{out}");
    assert!(!out.contains("diverge"), "{out}");
}

/// A knob after the name: v6-review without `requeue_on_online` strands finding 1's bio again.
#[test]
fn a_knob_after_the_name_changes_the_variant() {
    let o = biosim(&[
        "diff",
        "v6-review",
        "v6-review,requeue_on_online=false",
        "docs/scenarios/finding-01-rollback-v6.scn",
        "--width",
        "60",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("B: # biosim: variant v6-review ("), "{out}");
    assert!(out.contains("requeue_on_online=false"), "{out}");
    assert!(
        out.contains("== B v6-review,requeue_on_online=false: 1 violation(s)"),
        "{out}"
    );
    assert!(out.contains("== the traces diverge in "), "{out}");
    // Each side's column is 60 wide: the marker sits at column 63.
    let listing = out
        .lines()
        .skip_while(|l| !l.starts_with("  A: "))
        .skip(1)
        .filter(|l| !l.starts_with("-- ") && l.chars().count() > 63);
    let mut rows = 0;
    for l in listing {
        let mark = l.chars().nth(63).unwrap();
        assert!("|<>*".contains(mark), "{l:?}");
        assert!(l.chars().count() <= 2 + 60 + 3 + 60, "{l:?}");
        rows += 1;
    }
    assert!(rows > 3, "{out}");
}

#[test]
fn bad_variant_and_knob_names_exit_2_naming_the_known_ones() {
    let file = "docs/scenarios/finding-01-rollback-v6.scn";
    let o = biosim(&["diff", "v8", "v6", file]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("unknown variant `v8`"), "{err}");
    for n in ["v5", "v6", "v6-review", "v7"] {
        assert!(err.contains(n), "{err}");
    }
    let o = biosim(&["diff", "v6", "v7,bogus=1", file]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("unknown knob `bogus`"), "{err}");
    for n in ["requeue_on_online", "gate_reads", "list", "delay"] {
        assert!(err.contains(n), "{err}");
    }
    let o = biosim(&["diff", "v6", "v7,gate_reads=maybe", file]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("expected true or false, got `maybe`"),
        "{}",
        stderr(&o)
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn a_missing_file_exits_2() {
    let o = biosim(&["diff", "v6", "v7", "docs/scenarios/no-such-file.scn"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("no-such-file.scn"), "{err}");
    assert!(err.contains("cannot read"), "{err}");
    assert!(o.stdout.is_empty());
}
