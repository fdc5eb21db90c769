//! The counterexample as a scenario file (docs/scenarios/README.md): header lines that rebuild the
//! exact machine, one line per transition, `settle`, and an `expect` line per invariant violated,
//! written without overwriting anything and then run back through the scenario loader to check
//! that it reproduces what explore found.

use super::campaign::{Campaign, CaseSeed, SETTLE_STEPS};
use crate::machine::oracle::Invariant;
use crate::machine::sim::{Sim, SimConfig, SimError};
use crate::machine::transition::Transition;
use crate::scenario::{Expectation, Scenario, ScenarioRun};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub use crate::scenario::invariant_word;

/// Why a counterexample could not be written or does not reproduce.
#[derive(Debug, thiserror::Error)]
pub enum CounterexampleError {
    /// The machine could not be built.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// The file could not be written.
    #[error("cannot write the counterexample {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The written file, run back, does not reproduce the violation (a biosim bug).
    #[error("internal error: the counterexample {path} does not reproduce: {why}")]
    NotReproduced {
        /// The file.
        path: PathBuf,
        /// What differs.
        why: String,
    },
}

/// The transitions as a scenario file runs them (strictly, [`Sim::try_apply`]): a transition the
/// lenient run skipped is dropped (it changed nothing but the trace), a `cpu_down`/`cpu_up` whose
/// `hotplug/fail` value sysfs refused keeps the operation without the `fail=` (what the lenient
/// run did).
pub fn strict_steps(
    config: &SimConfig,
    campaign: &Campaign,
    ts: &[Transition],
) -> Result<Vec<Transition>, SimError> {
    let s = Sim::new(SimConfig {
        trace: false,
        ..*config
    })?;
    if let Some(setup) = campaign.loop_dev {
        s.attach_loop(setup);
    }
    let mut out = Vec::new();
    for t in ts {
        if s.try_apply(t).is_ok() {
            out.push(*t);
        } else if let Transition::Hotplug {
            cpu,
            up,
            fail_at: Some(_),
        } = *t
        {
            let plain = Transition::Hotplug {
                cpu,
                up,
                fail_at: None,
            };
            if s.try_apply(&plain).is_ok() {
                out.push(plain);
            }
        }
    }
    Ok(out)
}

/// The header lines that rebuild `config` (and the campaign's loop device): the preset (`module
/// NAME` for a registered module, which replays where the module is registered), then a `knob`
/// line per `--knob` given, in order (as the scenario parser applies them).
fn header(config: &SimConfig, campaign: &Campaign, preset: &str, knobs: &[String]) -> String {
    let mut h = String::new();
    match config.variant.module {
        Some(m) if config.variant.is_module() => {
            let _ = writeln!(h, "module {}", m.0.name());
        }
        _ => {
            let _ = writeln!(h, "variant {preset}");
        }
    }
    for k in knobs {
        let _ = writeln!(h, "knob {k}");
    }
    let k = &config.kernel;
    let _ = writeln!(h, "cpus {}", config.nr_cpus);
    if config.online != config.nr_cpus {
        let _ = writeln!(h, "online {}", config.online);
    }
    let yn = |b: bool| if b { "y" } else { "n" };
    let _ = writeln!(h, "preempt {}", k.preempt);
    let _ = writeln!(h, "preempt_count {}", yn(k.preempt_count));
    let _ = writeln!(h, "preempt_rcu {}", yn(k.preempt_rcu));
    let _ = writeln!(h, "hz {}", k.hz);
    let _ = writeln!(h, "seed {}", config.seed);
    if config.rescuer == bio_core::workqueue::RescuerAffinity::Unbound {
        let _ = writeln!(h, "rescuer unbound");
    }
    if let Some(l) = campaign.loop_dev {
        let _ = writeln!(h, "loop {} {}", l.variant.name, l.backing.name());
        // `--loop-knob`s: every knob whose value differs from the named preset's.
        let preset = bio_core::drivers::block::loop_drv::LoopVariant::by_name(l.variant.name)
            .map(|p| p.knobs())
            .unwrap_or_default();
        for (name, value) in l.variant.knobs() {
            if !preset.iter().any(|(n, v)| *n == name && *v == value) {
                let _ = writeln!(h, "loop_knob {name}={value}");
            }
        }
    }
    h
}

/// A counterexample, written and run back.
#[derive(Debug)]
pub struct Written {
    /// The file.
    pub path: PathBuf,
    /// Its transitions.
    pub transitions: Vec<Transition>,
    /// The invariants its `expect` lines name.
    pub expects: Vec<Invariant>,
    /// The file's run through [`Scenario::load`] and [`Scenario::run`] (what `biosim run FILE`
    /// prints the trace of).
    pub run: ScenarioRun,
}

/// Everything the counterexample needs to say where it came from.
#[derive(Debug, Clone)]
pub struct Provenance<'a> {
    /// The `biosim explore` command line that found it.
    pub command: &'a str,
    /// The preset variant's name (`--variant`).
    pub preset: &'a str,
    /// The knobs as given.
    pub knobs: &'a [String],
    /// The case index.
    pub index: u64,
    /// The transitions before shrinking.
    pub drawn: usize,
    /// The invariant kept while shrinking.
    pub invariant: Invariant,
}

/// Builds the counterexample of `ts` (a shrunk failing case with seeds `seed`), writes it to
/// `path` (never over an existing file: through a temporary file in the same directory, linked
/// into place), loads and runs it, and checks that every `expect` line holds and the invariant
/// shrunk for is among them. On any error no file is left.
pub fn write(
    campaign: &Campaign,
    seed: &CaseSeed,
    ts: &[Transition],
    prov: &Provenance<'_>,
    path: &Path,
) -> Result<Written, CounterexampleError> {
    let config = SimConfig {
        trace: true,
        ..campaign.machine(seed)
    };
    let steps = strict_steps(&config, campaign, ts)?;
    // The invariants the scenario violates, run in memory first for its `expect` lines.
    let body: String = steps.iter().map(|t| t.to_scenario_line() + "\n").collect();
    let mut text = String::new();
    let _ = writeln!(text, "# found by: {}", prov.command);
    let _ = writeln!(
        text,
        "# case {} ({} transitions drawn, shrunk to {} keeping [{}] violated)",
        prov.index,
        prov.drawn,
        steps.len(),
        prov.invariant
    );
    text.push_str(&header(&config, campaign, prov.preset, prov.knobs));
    text.push_str(&body);
    let _ = writeln!(text, "settle {SETTLE_STEPS}");
    let not = |why: String| CounterexampleError::NotReproduced {
        path: path.to_owned(),
        why,
    };
    let draft = Scenario::parse(&text, &path.display().to_string())
        .map_err(|e| not(format!("the scenario does not parse: {e}\n{text}")))?;
    if draft.config != config {
        return Err(not(format!(
            "its header builds {:?}, explore ran {:?}",
            draft.config, config
        )));
    }
    let run = draft
        .run()
        .map_err(|e| not(format!("it does not run: {e}")))?;
    let mut expects: Vec<Invariant> = Vec::new();
    for v in &run.violations {
        if !expects.contains(&v.invariant) && invariant_word(v.invariant).is_some() {
            expects.push(v.invariant);
        }
    }
    if !expects.contains(&prov.invariant) {
        return Err(not(format!(
            "[{}] is not violated (got {:?})",
            prov.invariant,
            run.violations
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
        )));
    }
    for inv in &expects {
        let _ = writeln!(text, "expect {}", invariant_word(*inv).unwrap_or_default());
    }
    write_new(path, &text)?;
    let checked = (|| {
        let s = Scenario::load(path).map_err(|e| not(format!("it does not load: {e}")))?;
        let want: Vec<Expectation> = expects.iter().map(|i| Expectation::Violates(*i)).collect();
        let got: Vec<Expectation> = s.expect.iter().map(|(_, e)| *e).collect();
        if got != want {
            return Err(not(format!("its expect lines read {got:?}, not {want:?}")));
        }
        let run = s.run().map_err(|e| not(format!("it does not run: {e}")))?;
        if !run.failed_expectations.is_empty() {
            return Err(not(run.failed_expectations.join("; ")));
        }
        Ok(run)
    })();
    match checked {
        Ok(run) => Ok(Written {
            path: path.to_owned(),
            transitions: steps,
            expects,
            run,
        }),
        Err(e) => {
            let _ = std::fs::remove_file(path);
            Err(e)
        }
    }
}

/// Writes `text` to `path` unless it exists: to a temporary file in the same directory, then
/// hard-linked to `path` (which fails if `path` exists) and the temporary removed (a
/// [`crate::dev::cleanup::TempFile`], so also on Ctrl-C), so an interrupted or refused write
/// leaves neither. Where the filesystem has no hard links, `path` is
/// created exclusively (`O_EXCL`) and written, and removed if the write fails.
pub fn write_new(path: &Path, text: &str) -> Result<(), CounterexampleError> {
    let io = |source| CounterexampleError::Io {
        path: path.to_owned(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().map_or_else(
        || "counterexample".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    // A registered temporary: Ctrl-C or SIGTERM between the write and the link removes it too.
    let r = crate::dev::cleanup::TempFile::create_in(&dir, &format!(".{name}")).and_then(|tmp| {
        std::fs::write(tmp.path(), text)?;
        std::fs::hard_link(tmp.path(), path)
    });
    match r {
        Err(e)
            if e.kind() != std::io::ErrorKind::AlreadyExists
                && path.symlink_metadata().is_err() =>
        {
            // A filesystem without hard links: create the file exclusively instead (removed again
            // if the write fails).
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(io)?;
            f.write_all(text.as_bytes()).map_err(|e| {
                let _ = std::fs::remove_file(path);
                io(e)
            })
        }
        r => r.map_err(io),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every invariant with a scenario name parses back to itself through an `expect` line.
    #[test]
    fn invariant_words_are_the_scenario_languages() {
        use bio_core::kernel::ReportKind::*;
        let all = [
            Invariant::EndIoOnce,
            Invariant::TaskContext,
            Invariant::Stranded,
            Invariant::WorkOffCpu,
            Invariant::HotplugContext,
            Invariant::KernelReport(Bug),
            Invariant::KernelReport(Warn),
            Invariant::KernelReport(SleepInAtomic),
            Invariant::KernelReport(InvalidWaitContext),
            Invariant::KernelReport(InconsistentLockState),
            Invariant::NoQuiescence,
            Invariant::DropbehindCached,
            Invariant::DataMismatch,
        ];
        for inv in all {
            let w = invariant_word(inv).unwrap();
            let s = Scenario::parse(&format!("tick\nexpect {w}\n"), "t").unwrap();
            assert_eq!(s.expect[0].1, Expectation::Violates(inv), "{w}");
        }
    }

    #[test]
    fn write_new_never_overwrites_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("biosim-cx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.scn");
        write_new(&p, "tick\n").unwrap();
        assert!(write_new(&p, "step\n").is_err());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "tick\n");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
