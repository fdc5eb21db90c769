//! The finding gallery's expectations: every check is caught on the variants that have the bug,
//! clean on those that fixed it, and every twin is caught.

use bio_core::block::complete_in_task::Variant;
use bio_core::workqueue::RescuerAffinity;
use bio_sim::checks::findings::{matrix, render, run_check, FINDINGS};

#[test]
fn every_cell_of_the_matrix_matches_its_expectation() {
    let rows = matrix(&|| "(not measured in this test)".to_owned()).unwrap();
    let text = render(&rows);
    println!("{text}");
    let mut bad = Vec::new();
    for r in &rows {
        for (col, got, want) in r.mismatches() {
            bad.push(format!(
                "finding {} {col}: got {got}, expected {want:?}",
                r.finding.id
            ));
        }
    }
    assert!(bad.is_empty(), "{}\n{text}", bad.join("\n"));
    assert_eq!(rows.len(), FINDINGS.len());
}

#[test]
fn finding_1_on_v6_strands_the_bio_and_the_trace_shows_the_rollback() {
    let run = run_check(1, Variant::V6, RescuerAffinity::PoolCpu, true)
        .unwrap()
        .unwrap();
    let text = run.trace;
    assert!(
        text.contains("block/bio:complete:online teardown"),
        "{text}"
    );
    assert!(text.contains("(injected)"), "{text}");
    assert!(
        text.contains("block/bio:complete:online startup"),
        "rollback re-ran online:\n{text}"
    );
    match run.verdict {
        bio_sim::checks::Verdict::Caught(v) => {
            assert!(v[0].message.contains("never completed"), "{v:?}")
        }
        other => panic!("expected caught, got {other}\n{text}"),
    }
}

#[test]
fn a_violation_carries_the_trace_that_led_to_it() {
    use bio_sim::machine::sim::{Sim, SimConfig};
    use bio_sim::machine::transition::Transition;
    let s = Sim::new(SimConfig {
        variant: Variant::V6,
        ..SimConfig::default()
    })
    .unwrap();
    s.apply(&Transition::Hotplug {
        cpu: 1,
        up: false,
        fail_at: Some(187),
    });
    s.apply(&Transition::Complete {
        cpu: 1,
        ctx: bio_sim::machine::sim::CompletionContext::Hardirq,
        need: bio_sim::machine::oracle::Need::Flag,
    });
    let v = s.settle(5_000);
    assert_eq!(v.len(), 1);
    let trace = v[0].trace.join("\n");
    assert!(
        trace.contains("block/bio:complete:online startup (rollback)"),
        "{trace}"
    );
    assert!(
        trace.contains("biosim_bio_complete_defer: bio#1"),
        "{trace}"
    );
}
