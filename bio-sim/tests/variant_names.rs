//! `Variant::ALL` and `LoopVariant::ALL` are the one source of variant names: every name in them
//! has its column in the finding matrix (or the loop matrix), its row of expectations, its row in
//! the docs tables and its column in the docs' matrix header; and every entry point that takes a
//! knob (scenario files, the CLI, the checks) refuses an unknown one or a bad value naming the
//! known ones. Nothing here lists a variant by hand.

use bio_core::block::complete_in_task::{Knob, Variant};
use bio_core::drivers::block::loop_drv::{LoopKnob, LoopVariant};
use bio_sim::checks::findings::{expected, matrix, render, FindingKind, FINDINGS};
use bio_sim::checks::loop_checks::{loop_expected, loop_matrix, render_loop, LOOP_CHECKS};
use std::process::Command;

fn doc(path: &str) -> String {
    let p = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// The first line of `text` starting with `prefix` and ending with the twin column, as its words.
fn header_row<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines()
        .find(|l| l.starts_with(prefix) && l.trim_end().ends_with("twin"))
        .unwrap_or_else(|| panic!("no line starting with `{prefix}`"))
        .split_whitespace()
        .collect()
}

/// The first cells of a markdown table's rows (`| \`v5\` | ...` gives `v5`).
fn table_first_cells(text: &str, header: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(header)).skip(2);
    let mut out = Vec::new();
    while let Some(l) = lines.next().filter(|l| l.starts_with('|')) {
        out.push(
            l.split('|')
                .nth(1)
                .unwrap()
                .trim()
                .trim_matches('`')
                .to_owned(),
        );
    }
    out
}

#[test]
fn every_variant_has_its_column_its_expectations_and_its_docs() {
    let rows = matrix(&|| "(not measured)".to_owned()).unwrap();
    let text = render(&rows);
    let header = header_row(&text, "finding");
    for r in &rows {
        if let FindingKind::Check { .. } = r.finding.kind {
            assert_eq!(
                r.cells.len(),
                Variant::ALL.len(),
                "finding {}",
                r.finding.id
            );
        }
    }
    let chapter = doc("docs/task-completion.md");
    let docs_header = header_row(&chapter, "finding ");
    let docs_rows = table_first_cells(&chapter, "| variant |");
    for v in Variant::ALL {
        assert!(
            header.contains(&v.name),
            "{} has no matrix column:\n{text}",
            v.name
        );
        for f in &FINDINGS {
            if let FindingKind::Check { .. } = f.kind {
                assert!(
                    expected(f.id, v.name).is_some(),
                    "{}: no expectation for finding {}",
                    v.name,
                    f.id
                );
            }
        }
        assert!(
            docs_header.contains(&v.name),
            "docs/task-completion.md's matrix header lacks {}",
            v.name
        );
        assert!(
            docs_rows.iter().any(|r| r == v.name),
            "docs/task-completion.md's variant table lacks {}: {docs_rows:?}",
            v.name
        );
    }
    assert_eq!(docs_rows.len(), Variant::ALL.len(), "{docs_rows:?}");
}

#[test]
fn every_loop_version_has_its_column_its_expectations_and_its_docs() {
    let rows = loop_matrix().unwrap();
    let text = render_loop(&rows);
    let header = header_row(&text, "loop check");
    let chapter = doc("docs/loop.md");
    let docs_header = header_row(&chapter, "loop check (seed 004)");
    let docs_rows = table_first_cells(&chapter, "| version |");
    for v in LoopVariant::ALL {
        assert!(
            header.contains(&v.name),
            "{} has no loop matrix column:\n{text}",
            v.name
        );
        for c in &LOOP_CHECKS {
            assert!(
                loop_expected(c.id, v.name).is_some(),
                "{}: no expectation for {}",
                v.name,
                c.id
            );
        }
        assert!(
            docs_header.contains(&v.name),
            "docs/loop.md's matrix header lacks {}",
            v.name
        );
        assert!(
            docs_rows.iter().any(|r| r == v.name),
            "docs/loop.md's version table lacks {}",
            v.name
        );
    }
    assert_eq!(docs_rows.len(), LoopVariant::ALL.len(), "{docs_rows:?}");
}

fn biosim(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_biosim"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_cli_refuses_unknown_knobs_bad_values_and_unknown_variants_naming_the_known_ones() {
    let (code, err) = biosim(&[
        "findings",
        "--finding",
        "1",
        "--variant",
        "v7",
        "--knob",
        "bogus=1",
    ]);
    assert_eq!(code, 2, "{err}");
    for n in Knob::names() {
        assert!(err.contains(n), "{err}");
    }
    let (code, err) = biosim(&["findings", "--finding", "1", "--knob", "list=tree"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("expected llist, local_lock or irq_save, got `tree`"),
        "{err}"
    );
    let (code, err) = biosim(&["findings", "--finding", "1", "--variant", "nope"]);
    assert_eq!(code, 2, "{err}");
    for n in Variant::names() {
        assert!(err.contains(n), "{err}");
    }
    let (code, err) = biosim(&["loop", "--finding", "L4", "--knob", "bogus=1"]);
    assert_eq!(code, 2, "{err}");
    for n in LoopKnob::NAMES {
        assert!(err.contains(n), "{err}");
    }
    let (code, err) = biosim(&["loop", "--finding", "L4", "--knob", "hint=maybe"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("expected true or false, got `maybe`"), "{err}");
    let (code, err) = biosim(&["loop", "--finding", "L4", "--variant", "nope"]);
    assert_eq!(code, 2, "{err}");
    for n in LoopVariant::names() {
        assert!(err.contains(n), "{err}");
    }
}

#[test]
fn the_cli_help_names_every_variant_and_knob() {
    let out = Command::new(env!("CARGO_BIN_EXE_biosim"))
        .args(["findings", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for n in Variant::names().chain(Knob::names()) {
        assert!(help.contains(n), "{n}:\n{help}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_biosim"))
        .args(["loop", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for n in LoopVariant::names().chain(LoopKnob::NAMES) {
        assert!(help.contains(n), "{n}:\n{help}");
    }
}

#[test]
fn a_knob_set_from_the_cli_runs_the_check_on_the_changed_variant() {
    // v7 with requeue_on_online=false is finding 1's twin: caught, like the twin.
    let out = Command::new(env!("CARGO_BIN_EXE_biosim"))
        .args([
            "findings",
            "--finding",
            "1",
            "--variant",
            "v7",
            "--knob",
            "requeue_on_online=false",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("on custom: caught"), "{text}");
}
