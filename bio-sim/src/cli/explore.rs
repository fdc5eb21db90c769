//! `biosim explore`: a campaign of generated cases on one variant, and on a violation the shrunk
//! counterexample as a scenario file, its trace, and the command that reproduces it.

use super::args::ExploreArgs;
use crate::explore::campaign::{Budget, Campaign, Outcome};
use crate::explore::counterexample::{self, invariant_word, Provenance, Written};
use crate::explore::shrink::{shrink, Shrunk};
use crate::machine::loop_rig::{BackingKind, LoopSetup};
use crate::machine::modules::{customised, with_knob};
use crate::machine::sim::SimConfig;
use bio_core::workqueue::RescuerAffinity;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The cases run without `--cases` or `--time`.
pub const DEFAULT_CASES: u64 = 10_000;

/// Parses `--cases`: a count of at least 1.
pub fn parse_cases(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("0 cases would pass by accident: give at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}`: expected a number of cases (at least 1)")),
    }
}

/// Parses `--time`: a number with an optional unit `ms`, `s`, `m` or `h` (seconds without one),
/// more than zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}`: expected a duration such as 30s, 5m, 500ms or 1h"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (use ms, s, m or h)")),
    };
    if !(secs > 0.0 && secs <= 7.0 * 86_400.0) {
        return Err(format!("`{s}`: must be more than 0 and at most a week"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The command line as typed, with `biosim` for the binary, quoted where a shell would need it.
fn command_line() -> String {
    let mut out = String::from("biosim");
    for a in std::env::args().skip(1) {
        out.push(' ');
        if !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_=/.,:+@%".contains(c))
        {
            out.push_str(&a);
        } else {
            out.push('\'');
            out.push_str(&a.replace('\'', "'\\''"));
            out.push('\'');
        }
    }
    out
}

/// Refuses an `--out` that exists or whose directory does not.
fn check_out(p: &Path) -> Result<(), String> {
    if p.symlink_metadata().is_ok() {
        return Err(format!(
            "--out {}: the file exists (explore never overwrites a file)",
            p.display()
        ));
    }
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "--out {}: {} is not a directory",
            p.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// The default counterexample file: `explore-VARIANT-seedS-caseI.scn` in the current directory,
/// with `-2`, `-3`, ... before `.scn` if that exists.
fn default_out(preset: &str, seed: u64, index: u64) -> PathBuf {
    let base = format!("explore-{preset}-seed{seed}-case{index}");
    let mut p = PathBuf::from(format!("{base}.scn"));
    let mut n = 2;
    while p.symlink_metadata().is_ok() {
        p = PathBuf::from(format!("{base}-{n}.scn"));
        n += 1;
    }
    p
}

/// What was found, shrunk and written.
struct Finding {
    index: u64,
    drawn: usize,
    first: String,
    shrunk: Shrunk,
    written: Written,
}

/// Runs `biosim explore`.
pub fn explore(args: ExploreArgs) -> Result<(), Box<dyn std::error::Error>> {
    let kernel = args.config.config()?;
    let preset = args.preset();
    let mut variant = preset;
    for k in &args.knobs {
        // Through `Variant::set_knob`: a module takes only gate_reads and fs_flag.
        variant = with_knob(variant, k)?;
    }
    if !args.knobs.is_empty() {
        // As the scenario parser names a variant with `knob` lines.
        variant = customised(variant);
    }
    if let Some(p) = &args.out {
        check_out(p)?;
    }
    // An `--out` named `-` is a file of that name. `--json` needs no place here: with
    // `--trace -` the report goes to standard error (`Say::for_trace`).
    let out = args.out.as_deref().map(|o| match o.as_os_str() == "-" {
        true => Path::new("./-"),
        false => o,
    });
    let given: Vec<(&str, &Path)> = [("--out", out), ("--trace", args.trace_out.as_deref())]
        .into_iter()
        .filter_map(|(f, p)| Some((f, p?)))
        .collect();
    super::output::check_distinct(&given)?;
    let trace_out = args
        .trace_out
        .as_deref()
        .map(|p| super::output::Output::check_with("--trace", p, &[], args.force))
        .transpose()?;
    let budget = match (args.cases, args.time) {
        (_, Some(t)) => Budget::Time(t),
        (n, None) => Budget::Cases(n.unwrap_or(DEFAULT_CASES)),
    };
    let campaign = Campaign {
        config: SimConfig {
            kernel,
            nr_cpus: args.cpus,
            online: args.cpus,
            variant,
            rescuer: RescuerAffinity::PoolCpu,
            seed: 0,
            trace: false,
        },
        loop_dev: args.loop_dev.map(|v| {
            let v = args.loop_knobs.iter().fold(v, |v, k| v.with(*k));
            LoopSetup::new(v, args.backing.unwrap_or(BackingKind::Sparse), 0)
        }),
        seed: args.seed,
        steps: args.steps as usize,
        budget,
        jobs: args.jobs as usize,
        shard: args.shard,
        inject: args.inject,
    };
    let bar = std::io::stderr()
        .is_terminal()
        .then(|| progress_bar(&campaign));
    let tick = |n| {
        if let Some(b) = &bar {
            b.set_position(n);
        }
    };
    let outcome = campaign.run(bar.is_some().then_some(&tick as &(dyn Fn(u64) + Sync)))?;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let finding = match &outcome.found {
        None => None,
        Some(found) => {
            let shrunk = shrink(&campaign, found)?;
            let path = args
                .out
                .clone()
                .unwrap_or_else(|| default_out(preset.name, args.seed, found.index));
            let command = command_line();
            let written = counterexample::write(
                &campaign,
                &found.seed,
                &shrunk.case,
                &Provenance {
                    command: &command,
                    preset: preset.name,
                    knobs: &args.knobs,
                    index: found.index,
                    drawn: found.case.len(),
                    invariant: shrunk.invariant,
                },
                &path,
            )?;
            Some(Finding {
                index: found.index,
                drawn: found.case.len(),
                first: found.failure.violations[0].to_string(),
                shrunk,
                written,
            })
        }
    };
    // The counterexample's trace, with the violations its run found as the verdict markers.
    if let (Some(o), Some(f)) = (&trace_out, &finding) {
        let run = &f.written.run;
        let verdict = run.violations.iter().map(ToString::to_string);
        o.write(&run.ftrace.clone().with_verdicts(verdict).text())?;
    }
    let say = super::output::Say::for_trace(trace_out.as_ref());
    if args.json {
        say.line(&json(&args, &campaign, &outcome, finding.as_ref()));
    } else {
        say.text(&text(&args, &campaign, &outcome, finding.as_ref()));
    }
    if finding.is_some() {
        std::process::exit(1);
    }
    Ok(())
}

fn progress_bar(c: &Campaign) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    let (bar, style) = match c.budget {
        Budget::Cases(n) => (
            ProgressBar::new(c.shard.local_count(n)),
            "{bar:30} {pos}/{len} cases, {cps} cases/s, {elapsed_precise}",
        ),
        Budget::Time(_) => (
            ProgressBar::new_spinner(),
            "{spinner} {pos} cases, {cps} cases/s, {elapsed_precise}",
        ),
    };
    bar.set_draw_target(ProgressDrawTarget::stderr());
    if let Ok(s) = ProgressStyle::with_template(style) {
        bar.set_style(s.with_key(
            "cps",
            |st: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}", st.per_sec());
            },
        ));
    }
    bar
}

fn per_sec(o: &Outcome) -> f64 {
    let s = o.elapsed.as_secs_f64();
    if s > 0.0 {
        o.cases as f64 / s
    } else {
        0.0
    }
}

fn budget_text(c: &Campaign) -> String {
    match c.budget {
        Budget::Cases(n) => format!("cases 0..{n}"),
        Budget::Time(t) => format!("for {:.1} s", t.as_secs_f64()),
    }
}

fn text(args: &ExploreArgs, c: &Campaign, o: &Outcome, f: Option<&Finding>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let knobs = if args.knobs.is_empty() {
        String::new()
    } else {
        format!(" with {}", args.knobs.join(", "))
    };
    let _ = writeln!(
        out,
        "biosim explore: {}{knobs} on {} CPUs ({}), seed {}, {} (shard {}), 1..={} transitions per case, {} job(s)",
        args.preset().name,
        c.config.nr_cpus,
        c.config.kernel,
        c.seed,
        budget_text(c),
        c.shard,
        c.steps,
        c.jobs
    );
    if let Some(f) = f {
        let w = &f.written;
        let _ = writeln!(out, "violation in case {}: {}", f.index, f.first);
        let _ = writeln!(
            out,
            "shrunk from {} to {} transitions ({} candidates run), keeping [{}] violated",
            f.drawn,
            w.transitions.len(),
            f.shrunk.iterations,
            f.shrunk.invariant
        );
        let _ = writeln!(out, "counterexample: {}", w.path.display());
        let _ = writeln!(out, "--- trace of `biosim run {}` ---", w.path.display());
        out.push_str(&w.run.trace);
        let _ = writeln!(out, "--- end of trace ---");
        for v in &w.run.violations {
            let _ = writeln!(out, "   {v}");
        }
    }
    let _ = writeln!(
        out,
        "cases run: {}, violations: {}, {:.0} cases/s, {:.2} s, fingerprint {:016x}",
        o.cases,
        usize::from(f.is_some()),
        per_sec(o),
        o.elapsed.as_secs_f64(),
        o.fingerprint
    );
    if o.voided > 0 {
        let _ = writeln!(
            out,
            "voided: {} case(s) cut where kernel/cpu.c gave up on a CPU (a failure injected into a rollback or a DEAD callback: WARN, \"no way forward, no way back\"); not counted as violations",
            o.voided
        );
    }
    match f {
        Some(f) => {
            let _ = writeln!(out, "reproduce: biosim run {}", f.written.path.display());
        }
        None => {
            let _ = writeln!(out, "no invariant violated");
        }
    }
    out
}

fn json(args: &ExploreArgs, c: &Campaign, o: &Outcome, f: Option<&Finding>) -> String {
    use serde_json::json;
    let violation = f.map(|f| {
        let w = &f.written;
        json!({
            "case": f.index,
            "violation": f.first,
            "invariant": f.shrunk.invariant.to_string(),
            "transitions_drawn": f.drawn,
            "transitions": w.transitions.iter().map(|t| t.to_scenario_line()).collect::<Vec<_>>(),
            "shrink_candidates": f.shrunk.iterations,
            "expect": w.expects.iter().filter_map(|i| invariant_word(*i)).collect::<Vec<_>>(),
            "file": w.path.display().to_string(),
            "reproduce": format!("biosim run {}", w.path.display()),
            "trace": w.run.trace,
        })
    });
    json!({
        "variant": args.preset().name,
        "knobs": args.knobs,
        "cpus": c.config.nr_cpus,
        "kernel": c.config.kernel.to_string(),
        "seed": c.seed,
        "steps": c.steps,
        "jobs": c.jobs,
        "shard": c.shard.to_string(),
        "budget": match c.budget {
            Budget::Cases(n) => json!({ "cases": n }),
            Budget::Time(t) => json!({ "seconds": t.as_secs_f64() }),
        },
        "cases": o.cases,
        "fingerprint": format!("{:016x}", o.fingerprint),
        "voided": o.voided,
        "elapsed_s": o.elapsed.as_secs_f64(),
        "cases_per_s": per_sec(o),
        "violations": usize::from(f.is_some()),
        "counterexample": violation,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_parse_or_say_what_is_wrong() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("0s").unwrap_err().contains("more than 0"));
        assert!(parse_duration("5x").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("s")
            .unwrap_err()
            .contains("expected a duration"));
    }
}
