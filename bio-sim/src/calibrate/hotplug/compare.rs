//! The live kernel and the model side by side: per case, the callbacks run (step, direction,
//! rollback, function) and the outcome (`write(2)`'s errno, `state`, `target`, `fail` consumed or
//! still armed, `online`, `cpu_online_mask`); per sweep, what `fail_store()` answered to each
//! value. A recording replays through [`compare`] whether it was just made or read from a
//! directory.

use std::fmt::Write as _;

use hotplug::{StateId, StatesListing};

use super::learn;
use super::model::{Model, Twin};
use super::recording::{ret_str, FailWrite, Recording};
use super::{Case, Outcome, Ran, COMPARE_INSTANCES};

/// One case compared.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// The case.
    pub case: Case,
    /// The name the listing gives the failed state.
    pub step_name: String,
    /// What the live kernel did.
    pub live: Outcome,
    /// What the model did.
    pub model: Outcome,
    /// What differs, one line each (empty: they agree).
    pub diffs: Vec<String>,
}

/// One `fail` sweep compared (the CPU online or offline).
#[derive(Debug, Clone)]
pub struct SweepResult {
    /// `true`: the CPU was online.
    pub online: bool,
    /// Values written.
    pub values: usize,
    /// Values the live kernel accepted (other than -1).
    pub live_accepts: Vec<i32>,
    /// `(value, live, model)` where they differ.
    pub diffs: Vec<(i32, String, String)>,
}

/// A whole comparison.
#[derive(Debug, Clone)]
pub struct Report {
    /// The recording's kernel.
    pub kernel: String,
    /// The CPU.
    pub cpu: u32,
    /// The two sweeps: online, offline.
    pub sweeps: Vec<SweepResult>,
    /// The cases.
    pub cases: Vec<CaseResult>,
}

impl Report {
    /// How many rows differ.
    pub fn differing(&self) -> usize {
        self.sweeps.iter().filter(|s| !s.diffs.is_empty()).count()
            + self.cases.iter().filter(|c| !c.diffs.is_empty()).count()
    }

    /// Whether every row agrees.
    pub fn agrees(&self) -> bool {
        self.differing() == 0
    }

    /// The table: one row per sweep and per case, details under a differing row, the total.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "CPU{} on Linux {}: {} fail writes, {} cases",
            self.cpu,
            self.kernel,
            self.sweeps.iter().map(|s| s.values).sum::<usize>(),
            self.cases.len()
        );
        for s in &self.sweeps {
            let _ = writeln!(
                out,
                "fail writes, CPU {:<7}  live accepts {} of {}: {}  model: {}",
                if s.online { "online" } else { "offline" },
                s.live_accepts.len(),
                s.values,
                ranges(&s.live_accepts),
                if s.diffs.is_empty() {
                    "same  agree".to_owned()
                } else {
                    format!("{} differ  DIFFER", s.diffs.len())
                }
            );
            for (v, live, model) in &s.diffs {
                let _ = writeln!(out, "    fail={v}: live {live}, model {model}");
            }
        }
        for c in &self.cases {
            let live = summary(&c.live);
            let model = summary(&c.model);
            let _ = writeln!(
                out,
                "{:<14} {:<27} live: {:<66} model: {}",
                c.case.to_string(),
                c.step_name,
                live,
                if c.diffs.is_empty() {
                    "same  agree".to_owned()
                } else if live == model {
                    "same outcome  DIFFER".to_owned()
                } else {
                    format!("{model}  DIFFER")
                }
            );
            for d in &c.diffs {
                let _ = writeln!(out, "    {d}");
            }
        }
        let rows = self.sweeps.len() + self.cases.len();
        let _ = writeln!(
            out,
            "total: {rows} rows ({} fail sweeps, {} cases): {} agree, {} differ",
            self.sweeps.len(),
            self.cases.len(),
            rows - self.differing(),
            self.differing()
        );
        out
    }
}

/// Ascending numbers as runs: `144 147-151 154`.
pub fn ranges(v: &[i32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    parts.join(" ")
}

/// `-EAGAIN, at 236, online, fail consumed, 24 callbacks (10 rollback)`.
pub fn summary(o: &Outcome) -> String {
    let ob = &o.observed;
    let mut s = String::new();
    if let Err(e) = ob.fail_write {
        let _ = write!(s, "fail write {}, ", e.neg_str());
    }
    let _ = write!(
        s,
        "{}, at {}",
        match ob.ret {
            Ok(()) => "ok".to_owned(),
            Err(e) => e.neg_str(),
        },
        ob.state
    );
    if ob.target != ob.state {
        let _ = write!(s, " (target {})", ob.target);
    }
    let _ = write!(s, ", {}", if ob.online { "online" } else { "offline" });
    if ob.in_mask != ob.online {
        s.push_str(if ob.in_mask {
            " (in cpu_online_mask)"
        } else {
            " (not in cpu_online_mask)"
        });
    }
    if ob.fail_write.is_ok() {
        s.push_str(if ob.fail == -1 {
            ", fail consumed"
        } else {
            ", fail armed"
        });
    }
    let rb = o.callbacks.iter().filter(|r| r.rollback).count();
    let _ = write!(s, ", {} callbacks", o.callbacks.len());
    if rb > 0 {
        let _ = write!(s, " ({rb} rollback)");
    }
    s
}

fn ran_str(r: &Ran) -> String {
    format!(
        "{} {} {}{}{}",
        r.step,
        if r.bringup { "startup" } else { "teardown" },
        r.function,
        if r.instances != 1 {
            format!(" x{}", r.instances)
        } else {
            String::new()
        },
        if r.rollback { " (rollback)" } else { "" }
    )
}

fn same_ran(a: &Ran, b: &Ran) -> bool {
    a.step == b.step
        && a.bringup == b.bringup
        && a.rollback == b.rollback
        && a.function == b.function
        && (!COMPARE_INSTANCES || a.instances == b.instances)
}

/// What differs between the live and the model outcome of a case, one line each.
pub fn diff(live: &Outcome, model: &Outcome) -> Vec<String> {
    let mut d = Vec::new();
    let (l, m) = (&live.observed, &model.observed);
    let mut field = |name: &str, a: String, b: String| {
        if a != b {
            d.push(format!("{name}: live {a}, model {b}"));
        }
    };
    field("fail write", ret_str(&l.fail_write), ret_str(&m.fail_write));
    field("errno", ret_str(&l.ret), ret_str(&m.ret));
    field("state", l.state.to_string(), m.state.to_string());
    field("target", l.target.to_string(), m.target.to_string());
    field("fail left", l.fail.to_string(), m.fail.to_string());
    field("online", l.online.to_string(), m.online.to_string());
    field(
        "in cpu_online_mask",
        l.in_mask.to_string(),
        m.in_mask.to_string(),
    );
    let errors = |f: &[(i32, i32)]| {
        if f.is_empty() {
            return "none".to_owned();
        }
        f.iter()
            .map(|(step, ret)| format!("step {step} returned {ret}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    field(
        "callback errors",
        errors(&live.failed),
        errors(&model.failed),
    );
    let (a, b) = (&live.callbacks, &model.callbacks);
    if a.len() != b.len() || a.iter().zip(b).any(|(x, y)| !same_ran(x, y)) {
        let at = a
            .iter()
            .zip(b)
            .position(|(x, y)| !same_ran(x, y))
            .unwrap_or(a.len().min(b.len()));
        let show = |v: &[Ran]| v.get(at).map_or("nothing".to_owned(), ran_str);
        d.push(format!(
            "callbacks: live {}, model {}; first difference at #{}: live {}, model {}",
            a.len(),
            b.len(),
            at + 1,
            show(a),
            show(b)
        ));
    }
    d
}

/// The recording checked against the model: the callback map learned from it
/// ([`learn::recording_map`], checked against its `callbacks.txt`), the model built from it (wrong on purpose with a
/// [`Twin`]), both sweeps and every case compared. Errors: a recording that does not read as
/// one.
pub fn compare(rec: &Recording, twin: Twin) -> Result<Report, String> {
    let map = learn::recording_map(rec)?;
    if learn::render_map(&map) != rec.callbacks {
        return Err(
            "callbacks.txt is not the callback map of the clean traces, the fail writes and the cases"
                .into(),
        );
    }
    let listing = StatesListing::parse(&rec.listing).map_err(|e| format!("states.txt: {e}"))?;
    let model = Model::new(&rec.listing, map, rec.cpu, rec.nr_cpus, twin)?;
    let sweeps = sweeps(&rec.fail_writes, &model.fail_writes()?)?;
    let mut cases = Vec::new();
    for rc in &rec.cases {
        let evs = learn::events(&rc.trace, rec.cpu)
            .map_err(|e| format!("{}: {e}", super::recording::case_file(&rc.case)))?;
        let (callbacks, failed) = learn::callbacks(&evs, rc.case.op);
        let live = Outcome {
            observed: rc.observed.clone(),
            callbacks,
            failed,
        };
        let model_out = model.run(rc.case)?;
        let diffs = diff(&live, &model_out);
        cases.push(CaseResult {
            case: rc.case,
            step_name: listing
                .name(StateId(rc.case.fail))
                .unwrap_or("(unnamed)")
                .to_owned(),
            live,
            model: model_out,
            diffs,
        });
    }
    Ok(Report {
        kernel: rec.kernel.clone(),
        cpu: rec.cpu,
        sweeps,
        cases,
    })
}

/// Both sweeps compared value by value; the recording must hold the values the model sweeps.
fn sweeps(live: &[FailWrite], model: &[FailWrite]) -> Result<Vec<SweepResult>, String> {
    let lv: Vec<i32> = live.iter().map(|w| w.value).collect();
    let mv: Vec<i32> = model.iter().map(|w| w.value).collect();
    if lv != mv {
        return Err(format!(
            "fail-writes.txt holds the values {}..={} ({} of them), the model sweeps {}..={}",
            lv.first().unwrap_or(&0),
            lv.last().unwrap_or(&0),
            lv.len(),
            mv[0],
            mv[mv.len() - 1]
        ));
    }
    Ok([true, false]
        .into_iter()
        .map(|online| {
            let pick = |w: &FailWrite| if online { w.online } else { w.offline };
            SweepResult {
                online,
                values: live.len(),
                live_accepts: live
                    .iter()
                    .filter(|w| w.value != -1 && pick(w).is_ok())
                    .map(|w| w.value)
                    .collect(),
                diffs: live
                    .iter()
                    .zip(model)
                    .filter(|(a, b)| pick(a) != pick(b))
                    .map(|(a, b)| (a.value, ret_str(&pick(a)), ret_str(&pick(b))))
                    .collect(),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn accepted_values_print_as_runs() {
        assert_eq!(ranges(&[144, 147, 148, 149, 154]), "144 147-149 154");
        assert_eq!(ranges(&[1]), "1");
        assert_eq!(ranges(&[]), "");
    }
}
