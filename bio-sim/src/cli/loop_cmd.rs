//! `biosim loop`: the loop driver's checks.

use super::args::LoopArgs;

/// Runs `biosim loop`.
pub fn loop_checks(args: LoopArgs) -> Result<(), Box<dyn std::error::Error>> {
    use crate::checks::loop_checks::{
        loop_check, loop_matrix, render_loop, run_loop_check, twin_variant,
    };
    use crate::checks::Verdict;
    use bio_core::drivers::block::loop_drv::LoopVariant;
    if let Some(id) = &args.finding {
        let c = loop_check(id).ok_or_else(|| format!("no loop check `{id}` (expected L1..L4)"))?;
        let variant = if args.variant == "twin" {
            twin_variant(
                c.twin
                    .ok_or_else(|| format!("loop check {} has no twin", c.id))?
                    .0,
            )
        } else {
            LoopVariant::by_name(&args.variant).ok_or_else(|| {
                format!(
                    "unknown loop variant `{}` (expected base, v5-no-hint, v4, v5 or twin)",
                    args.variant
                )
            })?
        };
        let run = run_loop_check(c.id, variant, true)?;
        print!("{}", run.trace);
        if let Some(p) = &args.perfetto {
            crate::report::perfetto::write(
                p,
                &run.trace,
                &format!("loop check {} on {}", c.id, variant.name),
            )?;
        }
        println!(
            "== loop check {}: {} on {}: {}",
            c.id, c.title, variant.name, run.verdict
        );
        if let Verdict::Caught(v) = &run.verdict {
            for x in v {
                println!("   {x}");
            }
        }
        println!("   counters: {:?}", run.stats);
        println!("   (chapter: docs/loop.md)");
        return Ok(());
    }
    let rows = loop_matrix()?;
    print!("{}", render_loop(&rows));
    if args.check {
        let bad: Vec<String> = rows
            .iter()
            .flat_map(|r| {
                r.mismatches().into_iter().map(move |(col, got, want)| {
                    format!("{} on {col}: {got}, expected {want:?}", r.check.id)
                })
            })
            .collect();
        if !bad.is_empty() {
            eprintln!(
                "biosim loop --check: {} cells differ:\n  {}",
                bad.len(),
                bad.join("\n  ")
            );
            std::process::exit(1);
        }
        println!("all cells as expected");
    }
    Ok(())
}
