//! `biosim diff A B FILE`: one scenario on two variants of the task-completion batcher, both
//! verdicts, and the two traces side by side from their first divergence, aligned on the
//! scenario's transitions.
//!
//! Each trace is cut into blocks: the machine setup (before the first transition), one block per
//! transition (what applying it printed, from its `>>>` line on) and the final settle. Block `k`
//! of A is shown against block `k` of B; within a block the lines are aligned by a longest common
//! subsequence ([`align`]), so a line only one side printed does not shift the rest. The first
//! trace line, the machine line naming the variant, is printed above and not compared.

use super::args::DiffArgs;
use crate::machine::sim::Sim;
use crate::scenario::{Scenario, ScenarioRun};
use bio_core::block::complete_in_task::{Knob, Variant};
use std::error::Error;
use std::fmt::Write as _;

/// `biosim diff A`'s help: the names of [`Variant::ALL`] and [`Knob::SPECS`].
pub fn variant_help() -> String {
    format!(
        "Side A: a variant of the task-completion batcher, NAME or NAME,KNOB=VALUE,... (e.g. v6 or v7,requeue_on_online=false; NAME: {}; KNOB: {}). It replaces the file's `variant` (or `module`) and `knob` lines; in a loop scenario it names the batcher, the file's `loop` line stays",
        Variant::names_or(&[]),
        Knob::names().collect::<Vec<_>>().join(", ")
    )
}

/// One side of `biosim diff`: the words given and the variant they name.
#[derive(Debug, Clone)]
pub struct VariantSpec {
    /// As given on the command line.
    pub spec: String,
    /// The preset with the knobs applied.
    pub variant: Variant,
}

/// `biosim diff`'s A and B: a preset name of [`Variant::ALL`] or a registered module's, then
/// `,KNOB=VALUE` assignments through [`Variant::set_knob`] (a module takes only `gate_reads` and
/// `fs_flag`).
pub fn parse_variant_spec(spec: &str) -> Result<VariantSpec, String> {
    let mut parts = spec.split(',');
    let name = parts.next().unwrap_or_default();
    let mut variant = Variant::parse_name(name, &[])?;
    for kv in parts {
        variant = crate::machine::modules::with_knob(variant, kv)?;
    }
    Ok(VariantSpec {
        spec: spec.to_owned(),
        variant,
    })
}

/// One side: the run and its trace cut into blocks.
struct Side {
    spec: String,
    run: ScenarioRun,
    /// The machine line (`# biosim: variant ...`), if the trace starts with one.
    machine: Option<String>,
    /// The trace's lines per block (setup, each transition, settle).
    blocks: Vec<Vec<String>>,
}

/// Runs `scenario` with `spec`'s variant, and replays its transitions on a fresh machine to find
/// where each transition's lines start (the runtime is deterministic: the same lines).
fn run_side(scenario: &Scenario, spec: &VariantSpec) -> Result<Side, Box<dyn Error>> {
    let mut s = scenario.clone();
    s.config.variant = spec.variant;
    let run = s.run()?;
    let sim = Sim::new(s.config)?;
    if let Some(setup) = s.loop_dev {
        sim.attach_loop(setup);
    }
    let count = |sim: &Sim| sim.trace().lines().count();
    let mut starts = vec![0, count(&sim)];
    for (_, t) in &s.transitions {
        sim.apply(t);
        starts.push(count(&sim));
    }
    let lines: Vec<String> = run.trace.lines().map(str::to_owned).collect();
    let mut machine = None;
    if lines.first().is_some_and(|l| l.starts_with("# biosim: ")) {
        machine = Some(lines[0].clone());
    }
    // The replay printed what the run printed up to its settle, or the blocks would be misplaced.
    if !run.trace.starts_with(&sim.trace()) {
        return Err(format!(
            "{}: replaying the transitions printed a different trace from the run: cannot align it",
            spec.spec
        )
        .into());
    }
    starts.push(lines.len());
    let mut blocks: Vec<Vec<String>> = starts
        .windows(2)
        .map(|w| lines[w[0].min(lines.len())..w[1].min(lines.len())].to_vec())
        .collect();
    if machine.is_some() && !blocks[0].is_empty() {
        blocks[0].remove(0);
    }
    Ok(Side {
        spec: spec.spec.clone(),
        run,
        machine,
        blocks,
    })
}

/// What the verdict compares: the invariants violated and the expectations that failed.
fn verdict(run: &ScenarioRun) -> (Vec<String>, &[String]) {
    let mut inv: Vec<String> = run
        .violations
        .iter()
        .map(|v| v.invariant.to_string())
        .collect();
    inv.sort();
    inv.dedup();
    (inv, &run.failed_expectations)
}

/// `biosim run`'s verdict lines for one side.
fn write_verdict(out: &mut String, label: &str, side: &Side, has_expect: bool) {
    let v = &side.run.violations;
    if v.is_empty() {
        let _ = writeln!(out, "== {label} {}: no invariant violated", side.spec);
    } else {
        let _ = writeln!(out, "== {label} {}: {} violation(s)", side.spec, v.len());
        for v in v {
            let _ = writeln!(out, "   {v}");
        }
    }
    if has_expect {
        for f in &side.run.failed_expectations {
            let _ = writeln!(out, "   expectation failed: {f}");
        }
        if side.run.failed_expectations.is_empty() {
            let _ = writeln!(out, "   every expectation holds");
        }
    }
}

/// `--trace DIR`: DIR is a directory, or a new name in one; `DIR/A.trace` and `DIR/B.trace`
/// do not exist (checked before anything runs, as [`super::output::Output::check`]).
fn check_trace_dir(
    dir: &std::path::Path,
    input: &std::path::Path,
    force: bool,
) -> Result<std::path::PathBuf, String> {
    if dir.as_os_str() == "-" {
        // Every other `--trace -` is stdout; two traces cannot share it, so say so.
        return Err(
            "--trace -: diff writes two traces, DIR/A.trace and DIR/B.trace; give a directory"
                .to_owned(),
        );
    }
    if dir.symlink_metadata().is_ok() {
        if !dir.is_dir() {
            return Err(format!("--trace {}: not a directory", dir.display()));
        }
        for side in ["A", "B"] {
            super::output::Output::check_with(
                "--trace",
                &dir.join(format!("{side}.trace")),
                &[input],
                force,
            )?;
        }
    } else {
        // A new directory: its parent must exist (the check of a file in it says so).
        super::output::Output::check("--trace", dir, &[input])?;
    }
    Ok(dir.to_owned())
}

/// Writes each side's trace to `DIR/<label>.trace`, its verdict lines as the markers at its end.
fn write_traces(
    dir: &std::path::Path,
    sides: &[(&str, &Side)],
    has_expect: bool,
    force: bool,
) -> Result<(), String> {
    if !dir.is_dir() {
        std::fs::create_dir(dir)
            .map_err(|e| format!("--trace {}: cannot create it: {e}", dir.display()))?;
    }
    for (label, side) in sides {
        let mut verdict = String::new();
        write_verdict(&mut verdict, label, side, has_expect);
        let text = side
            .run
            .ftrace
            .clone()
            .with_verdicts(verdict.lines())
            .text();
        super::output::Output::check_with(
            "--trace",
            &dir.join(format!("{label}.trace")),
            &[],
            force,
        )?
        .write(&text)?;
    }
    Ok(())
}

/// `s` in exactly `w` columns: cut with `…` or padded with blanks.
fn cell(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n > w {
        let mut c: String = s.chars().take(w - 1).collect();
        c.push('…');
        c
    } else {
        format!("{s}{}", " ".repeat(w - n))
    }
}

/// A row of the side-by-side listing.
enum Row<'a> {
    /// The start of a block, labelled.
    Block(String),
    /// A line of a block on each side, or on one side only.
    Pair(Option<&'a str>, Option<&'a str>),
}

/// Above this many lines on either side (after the common head and tail are taken off), a block
/// is not aligned by [`lcs`] (its table is `n·m` cells) but paired by position.
const LCS_MAX_LINES: usize = 4000;

/// Aligns two blocks: the index pairs of the rows, in order. `(Some(i), Some(j))` is a row
/// showing `a[i]` against `b[j]`: the same line, or, in a run of lines only A has next to a run
/// only B has at the same place, a changed line (the runs paired row by row); `(Some(i), None)`
/// is a line only in A, `(None, Some(j))` one only in B. Equal lines are paired along a longest
/// common subsequence; the common head and tail are paired first.
fn align<T: PartialEq>(a: &[T], b: &[T]) -> Vec<(Option<usize>, Option<usize>)> {
    let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let mut rows: Vec<_> = (0..head).map(|i| (Some(i), Some(i))).collect();
    if ma.len() > LCS_MAX_LINES || mb.len() > LCS_MAX_LINES {
        // Too large for the quadratic table: by position, the shorter side padded.
        rows.extend((0..ma.len().max(mb.len())).map(|i| {
            (
                (i < ma.len()).then_some(head + i),
                (i < mb.len()).then_some(head + i),
            )
        }));
    } else {
        let mut del = Vec::new();
        let mut ins = Vec::new();
        let flush = |rows: &mut Vec<_>, del: &mut Vec<usize>, ins: &mut Vec<usize>| {
            for k in 0..del.len().max(ins.len()) {
                rows.push((del.get(k).copied(), ins.get(k).copied()));
            }
            del.clear();
            ins.clear();
        };
        for step in lcs(ma, mb) {
            match step {
                (Some(i), Some(j)) => {
                    flush(&mut rows, &mut del, &mut ins);
                    rows.push((Some(head + i), Some(head + j)));
                }
                (Some(i), None) => del.push(head + i),
                (None, Some(j)) => ins.push(head + j),
                (None, None) => {}
            }
        }
        flush(&mut rows, &mut del, &mut ins);
    }
    let (ta, tb) = (a.len() - tail, b.len() - tail);
    rows.extend((0..tail).map(|k| (Some(ta + k), Some(tb + k))));
    rows
}

/// The edit script of a longest common subsequence of `a` and `b`: matches `(Some(i), Some(j))`,
/// lines of A only `(Some(i), None)` and of B only `(None, Some(j))`, in order. O(n·m) time and
/// cells (`u16`: at most [`LCS_MAX_LINES`] lines a side).
fn lcs<T: PartialEq>(a: &[T], b: &[T]) -> Vec<(Option<usize>, Option<usize>)> {
    let (n, m) = (a.len(), b.len());
    let w = m + 1;
    // t[i * w + j]: the length of a longest common subsequence of a[i..] and b[j..].
    let mut t = vec![0u16; (n + 1) * w];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[i * w + j] = if a[i] == b[j] {
                t[(i + 1) * w + j + 1] + 1
            } else {
                t[(i + 1) * w + j].max(t[i * w + j + 1])
            };
        }
    }
    let mut out = Vec::with_capacity(n + m);
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push((Some(i), Some(j)));
            i += 1;
            j += 1;
        } else if j == m || (i < n && t[(i + 1) * w + j] >= t[i * w + j + 1]) {
            out.push((Some(i), None));
            i += 1;
        } else {
            out.push((None, Some(j)));
            j += 1;
        }
    }
    out
}

/// Runs `biosim diff`.
pub fn diff(args: DiffArgs) -> Result<(), Box<dyn Error>> {
    let trace_dir = args
        .trace_dir
        .as_deref()
        .map(|d| check_trace_dir(d, &args.file, args.force))
        .transpose()?;
    let scenario = Scenario::load(&args.file)?;
    let text = std::fs::read_to_string(&args.file)?;
    let source: Vec<&str> = text.lines().collect();
    let a = run_side(&scenario, &args.a)?;
    let b = run_side(&scenario, &args.b)?;
    if let Some(dir) = &trace_dir {
        write_traces(
            dir,
            &[("A", &a), ("B", &b)],
            !scenario.expect.is_empty(),
            args.force,
        )?;
    }
    let w = usize::from(args.width);
    let file = args.file.display();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "biosim diff: {file} on A = {} and B = {}",
        a.spec, b.spec
    );
    for (label, side) in [("A", &a), ("B", &b)] {
        if let Some(m) = &side.machine {
            let _ = writeln!(out, "{label}: {m}");
        }
    }
    let has_expect = !scenario.expect.is_empty();
    write_verdict(&mut out, "A", &a, has_expect);
    write_verdict(&mut out, "B", &b, has_expect);
    let same = verdict(&a.run) == verdict(&b.run);
    let _ = writeln!(
        out,
        "== verdicts {}",
        if same { "are the same" } else { "differ" }
    );

    // The blocks' labels, and the rows of the whole listing.
    let n = scenario.transitions.len();
    let label = |k: usize| -> String {
        if k == 0 {
            "the machine setup".to_owned()
        } else if k <= n {
            let line = scenario.transitions[k - 1].0;
            let src = source
                .get(line - 1)
                .map_or("", |l| l.split('#').next().unwrap_or("").trim());
            format!("transition {k} (line {line}: {src})")
        } else {
            format!("the final settle (budget {} steps)", scenario.settle)
        }
    };
    let mut rows = Vec::new();
    let mut first = None;
    for (k, (ba, bb)) in a.blocks.iter().zip(&b.blocks).enumerate() {
        rows.push((k, Row::Block(label(k))));
        // The lines of A and of B before the row: where the first divergence is on each side.
        let (mut na, mut nb) = (0, 0);
        for (ia, ib) in align(ba, bb) {
            let (la, lb) = (ia.map(|i| ba[i].as_str()), ib.map(|j| bb[j].as_str()));
            if la != lb && first.is_none() {
                first = Some((rows.len(), k, na, nb));
            }
            na += usize::from(ia.is_some());
            nb += usize::from(ib.is_some());
            rows.push((k, Row::Pair(la, lb)));
        }
    }
    let lines: usize = a.blocks.iter().map(Vec::len).sum();
    match first {
        None => {
            let _ = writeln!(
                out,
                "== the traces are identical ({lines} lines after the machine line)"
            );
        }
        Some((row, k, ia, ib)) => {
            // Every row before the first divergence pairs a line with the same line, so the two
            // sides are at the same line of the block: `ia == ib`.
            let _ = writeln!(
                out,
                "== the traces diverge in {}, at its line {} (trace line {} of A, {} of B)",
                label(k),
                ia + 1,
                trace_line(&a, k, ia),
                trace_line(&b, k, ib),
            );
            // Back over `context` lines, then to the label of the block they start in.
            let mut start = row;
            let mut ctx = 0;
            while start > 0 && ctx < args.context {
                start -= 1;
                if matches!(rows[start].1, Row::Pair(..)) {
                    ctx += 1;
                }
            }
            let (k0, _) = rows[start];
            let head = rows.iter().position(|(k, _)| *k == k0).unwrap_or(0);
            let _ = writeln!(
                out,
                "  {}   B: {}",
                cell(&format!("A: {}", a.spec), w),
                b.spec
            );
            if head < start {
                if let Row::Block(l) = &rows[head].1 {
                    let _ = writeln!(out, "-- {l}");
                }
                if head + 1 < start {
                    let _ = writeln!(out, "  ... {} common line(s)", start - head - 1);
                }
            }
            for (_, r) in &rows[start..] {
                match r {
                    Row::Block(l) => {
                        let _ = writeln!(out, "-- {l}");
                    }
                    Row::Pair(la, lb) => {
                        let mark = match (la, lb) {
                            (Some(x), Some(y)) if x == y => '|',
                            (Some(_), Some(_)) => '*',
                            (Some(_), None) => '<',
                            _ => '>',
                        };
                        let right = lb.map_or(String::new(), |l| cell(l, w));
                        let row = format!("  {} {mark} {right}", cell(la.unwrap_or(""), w));
                        let _ = writeln!(out, "{}", row.trim_end());
                    }
                }
            }
        }
    }
    print!("{out}");
    if !same {
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        std::process::exit(1);
    }
    Ok(())
}

/// The 1-based line of the trace where line `i` of block `k` is (or would be) on `side`.
fn trace_line(side: &Side, k: usize, i: usize) -> usize {
    let before: usize = side.blocks[..k].iter().map(Vec::len).sum();
    before + i + 1 + usize::from(side.machine.is_some())
}

#[cfg(test)]
mod tests {
    use super::{align, LCS_MAX_LINES};

    /// The aligner's rows as `A-line mark B-line`, the way the listing shows them.
    fn rows(a: &[&str], b: &[&str]) -> Vec<String> {
        align(a, b)
            .into_iter()
            .map(|r| match r {
                (Some(i), Some(j)) if a[i] == b[j] => format!("{} | {}", a[i], b[j]),
                (Some(i), Some(j)) => format!("{} * {}", a[i], b[j]),
                (Some(i), None) => format!("{} <", a[i]),
                (None, Some(j)) => format!("> {}", b[j]),
                (None, None) => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn equal_lines_pair() {
        assert_eq!(
            rows(&["x", "y", "z"], &["x", "y", "z"]),
            ["x | x", "y | y", "z | z"]
        );
        assert!(rows(&[], &[]).is_empty());
    }

    #[test]
    fn a_line_inserted_in_b_shows_gt_and_the_following_equal_lines_pair() {
        assert_eq!(
            rows(&["a", "b", "c", "d"], &["a", "new", "b", "c", "d"]),
            ["a | a", "> new", "b | b", "c | c", "d | d"]
        );
        // And removed from B: `<`, the rest still pairs.
        assert_eq!(
            rows(&["a", "old", "b"], &["a", "b"]),
            ["a | a", "old <", "b | b"]
        );
        // Two inserted in the middle of a block, one at its end.
        assert_eq!(
            rows(&["p", "q", "r"], &["p", "n1", "n2", "q", "r", "n3"]),
            ["p | p", "> n1", "> n2", "q | q", "r | r", "> n3"]
        );
    }

    #[test]
    fn a_replaced_line_shows_star() {
        assert_eq!(
            rows(&["a", "b", "c"], &["a", "B", "c"]),
            ["a | a", "b * B", "c | c"]
        );
        // Two lines replaced by three: paired row by row, the extra one `>`.
        assert_eq!(
            rows(&["a", "b1", "b2", "c"], &["a", "x1", "x2", "x3", "c"]),
            ["a | a", "b1 * x1", "b2 * x2", "> x3", "c | c"]
        );
        // Nothing in common.
        assert_eq!(rows(&["a"], &["b", "c"]), ["a * b", "> c"]);
    }

    /// Above the cap the middle of a block is paired by position (here where an LCS would show
    /// one line inserted and one removed); the common head and tail still pair.
    #[test]
    fn a_block_over_the_cap_is_paired_by_position() {
        let m: Vec<String> = (0..=LCS_MAX_LINES).map(|i| format!("m{i}")).collect();
        let a: Vec<&str> = ["h"]
            .into_iter()
            .chain(m.iter().map(String::as_str))
            .chain(["x", "t"])
            .collect();
        let b: Vec<&str> = ["h", "y"]
            .into_iter()
            .chain(m.iter().map(String::as_str))
            .chain(["t"])
            .collect();
        let r = align(&a, &b);
        assert_eq!(r.len(), a.len());
        assert!(r.iter().enumerate().all(|(k, &p)| p == (Some(k), Some(k))));
        let small = align(&a[..4], &b[..4]);
        assert_eq!(small[1], (None, Some(1)), "{small:?}");
    }
}
