//! The job runner's figures: each design's rounds reduced to median (min–max), the ratios to raw
//! taken pair by pair within a round, the table `biosim bench JOBFILE` prints and its `--json`.

use super::run::RunFigures;
use crate::perf::stats::median;
use serde_json::{json, Value};
use std::fmt;

/// A figure over the rounds: median with min and max.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The median.
    pub median: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
}

impl Spread {
    /// Of `xs` (all zero for none).
    pub fn of(xs: &[f64]) -> Spread {
        if xs.is_empty() {
            return Spread {
                median: 0.0,
                min: 0.0,
                max: 0.0,
            };
        }
        Spread {
            median: median(xs),
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }

    fn json(&self) -> Value {
        json!({ "median": self.median, "min": self.min, "max": self.max })
    }

    /// `median (min–max)` with `prec` decimals.
    pub fn show(&self, prec: usize) -> String {
        format!(
            "{:.p$} ({:.p$}–{:.p$})",
            self.median,
            self.min,
            self.max,
            p = prec
        )
    }
}

/// A ratio to raw over the rounds that have one.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ratio {
    spread: Spread,
    /// The rounds it was taken over.
    rounds: usize,
}

impl Ratio {
    /// `{median, min, max, rounds}`, or `null` for no ratio.
    fn json(r: Option<Ratio>) -> Value {
        r.map_or(Value::Null, |r| {
            let mut v = r.spread.json();
            v["rounds"] = json!(r.rounds);
            v
        })
    }

    /// `median (min–max)`, or `-` for no ratio.
    fn show(r: Option<Ratio>) -> String {
        r.map_or_else(|| "-".to_owned(), |r| r.spread.show(2))
    }
}

/// One round of one design, reduced to what the report shows.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundFigures {
    /// I/Os completed.
    pub ios: u64,
    /// I/Os per second.
    pub iops: f64,
    /// MB/s.
    pub mbps: f64,
    /// Latency percentiles, µs: p50, p99, p99.9.
    pub lat_us: [f64; 3],
    /// Process CPU µs per I/O (getrusage).
    pub cpu_us: f64,
    /// The system-time part of `cpu_us` (`ru_stime`): the kernel's work for the process.
    pub sys_us: f64,
    /// Machine CPU µs per I/O (/proc/stat).
    pub machine_us: Option<f64>,
    /// The counters, as `name value` pairs (NOWAIT, worker, IRQs, flushes).
    pub counters: Vec<(&'static str, u64)>,
    /// The simulated loop's backing engine as it ran ([`RunFigures::sim_engine`]).
    pub engine: Option<&'static str>,
}

impl RoundFigures {
    /// Reduces a run's figures.
    pub fn from_run(f: &RunFigures) -> RoundFigures {
        let q = |p: f64| f.latency.value_at_quantile(p) as f64 / 1e3;
        let mut counters = Vec::new();
        if let Some(s) = f.loop_stats {
            counters.push(("nowait_tried", s.nowait_tried as u64));
            counters.push(("nowait_done", s.nowait_done as u64));
            counters.push(("nowait_eagain", s.nowait_eagain as u64));
            counters.push(("hint_skipped", s.hint_skipped as u64));
            counters.push(("worker_cmds", s.worker_cmds as u64));
            counters.push(("work_queued", s.work_queued as u64));
        }
        if let Some((t, d, e)) = f.raw_nowait {
            counters.push(("nowait_tried", t));
            counters.push(("nowait_done", d));
            counters.push(("nowait_eagain", e));
        }
        if let Some((t, d, e)) = f.bio_nowait {
            counters.push(("req_nowait_tried", t));
            counters.push(("req_nowait_done", d));
            counters.push(("req_nowait_again", e));
        }
        if let Some(i) = f.irqs {
            counters.push(("irqs", i));
        }
        if let Some((c, b)) = f.cqe_batches {
            counters.push(("cqes", c));
            counters.push(("cqe_batches", b));
        }
        counters.extend(f.extra.iter().copied());
        if f.flushes > 0 {
            counters.push(("flushes", f.flushes));
        }
        // The process's threads' sleeps (each a wake-up paid for), every design.
        counters.push(("nvcsw", f.cpu.nvcsw));
        RoundFigures {
            ios: f.ios,
            iops: f.iops(),
            mbps: f.mbps(),
            lat_us: [q(0.5), q(0.99), q(0.999)],
            cpu_us: f.cpu_us_per_io(),
            sys_us: f.sys_us_per_io(),
            machine_us: f.machine_us_per_io(),
            counters,
            engine: f.sim_engine,
        }
    }
}

/// One design's rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct DesignReport {
    /// The design's name.
    pub design: String,
    /// Its rounds, in round order.
    pub rounds: Vec<RoundFigures>,
}

impl DesignReport {
    fn spread(&self, f: impl Fn(&RoundFigures) -> f64) -> Spread {
        Spread::of(&self.rounds.iter().map(f).collect::<Vec<_>>())
    }

    fn machine(&self) -> Option<Spread> {
        let xs: Option<Vec<f64>> = self.rounds.iter().map(|r| r.machine_us).collect();
        xs.map(|xs| Spread::of(&xs))
    }

    /// Ratios to `raw` taken round by round (`f(self) / f(raw)` of the same round), over the
    /// rounds where raw's figure is not zero (a job too short for `getrusage` to see system
    /// time has none); `None` when no round has one, rather than a ratio of 0 over no rounds.
    fn ratio(&self, raw: &DesignReport, f: impl Fn(&RoundFigures) -> f64) -> Option<Ratio> {
        let xs: Vec<f64> = self
            .rounds
            .iter()
            .zip(&raw.rounds)
            .filter(|(_, r)| f(r) > 0.0)
            .map(|(d, r)| f(d) / f(r))
            .collect();
        (!xs.is_empty()).then(|| Ratio {
            spread: Spread::of(&xs),
            rounds: xs.len(),
        })
    }

    /// The engines its rounds ran on, each once in first-seen order, joined with ` / ` (one
    /// unless the per-CPU rings failed to start in some rounds only); `None` if it names none.
    fn engine(&self) -> Option<String> {
        let mut seen: Vec<&str> = Vec::new();
        for e in self.rounds.iter().filter_map(|r| r.engine) {
            if !seen.contains(&e) {
                seen.push(e);
            }
        }
        (!seen.is_empty()).then(|| seen.join(" / "))
    }

    /// Each counter's median over the rounds, in first-seen order.
    fn counters(&self) -> Vec<(&'static str, f64)> {
        let mut names: Vec<&'static str> = Vec::new();
        for r in &self.rounds {
            for (n, _) in &r.counters {
                if !names.contains(n) {
                    names.push(n);
                }
            }
        }
        names
            .into_iter()
            .map(|n| {
                let xs: Vec<f64> = self
                    .rounds
                    .iter()
                    .map(|r| {
                        r.counters
                            .iter()
                            .find(|(m, _)| *m == n)
                            .map_or(0.0, |(_, v)| *v as f64)
                    })
                    .collect();
                (n, median(&xs))
            })
            .collect()
    }
}

/// One job's report.
#[derive(Debug, Clone, PartialEq)]
pub struct JobReport {
    /// The job's name.
    pub job: String,
    /// The header printed before the run (job, file, filesystem, designs, rounds).
    pub header: String,
    /// Every design, in the order given.
    pub designs: Vec<DesignReport>,
    /// Why a design was left out (kernel-loop without root, ...), one line each.
    pub skipped: Vec<String>,
    /// The verify pass's summary, if the job verified.
    pub verified: Option<String>,
}

impl JobReport {
    fn raw(&self) -> Option<&DesignReport> {
        self.designs.iter().find(|d| d.design == "raw")
    }

    /// The `--json` form.
    pub fn to_json(&self) -> Value {
        let raw = self.raw();
        let designs: Vec<Value> = self
            .designs
            .iter()
            .map(|d| {
                let mut v = json!({
                    "design": d.design,
                    "rounds": d.rounds.len(),
                    "iops": d.spread(|r| r.iops).json(),
                    "mb_per_s": d.spread(|r| r.mbps).json(),
                    "lat_p50_us": d.spread(|r| r.lat_us[0]).json(),
                    "lat_p99_us": d.spread(|r| r.lat_us[1]).json(),
                    "lat_p999_us": d.spread(|r| r.lat_us[2]).json(),
                    "cpu_us_per_io_process": d.spread(|r| r.cpu_us).json(),
                    "cpu_us_per_io_system": d.spread(|r| r.sys_us).json(),
                    "cpu_us_per_io_machine": d.machine().map(|s| s.json()),
                    "engine": d.engine(),
                    "counters": d.counters().into_iter()
                        .map(|(n, v)| (n.to_owned(), json!(v)))
                        .collect::<serde_json::Map<_, _>>(),
                    "per_round": d.rounds.iter().map(|r| json!({
                        "ios": r.ios, "iops": r.iops, "mb_per_s": r.mbps,
                        "lat_us": r.lat_us, "cpu_us_per_io_process": r.cpu_us,
                        "cpu_us_per_io_system": r.sys_us,
                        "cpu_us_per_io_machine": r.machine_us,
                    })).collect::<Vec<_>>(),
                });
                if let Some(raw) = raw.filter(|r| r.design != d.design) {
                    v["vs_raw"] = json!({
                        "iops": Ratio::json(d.ratio(raw, |r| r.iops)),
                        "cpu_per_io_process": Ratio::json(d.ratio(raw, |r| r.cpu_us)),
                        "cpu_per_io_system": Ratio::json(d.ratio(raw, |r| r.sys_us)),
                        "cpu_per_io_machine":
                            Ratio::json(d.ratio(raw, |r| r.machine_us.unwrap_or(0.0))),
                    });
                }
                v
            })
            .collect();
        json!({
            "job": self.job,
            "header": self.header.lines().collect::<Vec<_>>(),
            "designs": designs,
            "skipped": self.skipped,
            "verified": self.verified,
        })
    }
}

impl fmt::Display for JobReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.skipped {
            writeln!(f, "skipped: {s}")?;
        }
        let raw = self.raw();
        writeln!(
            f,
            "{:<12} {:>26} {:>22} {:>18} {:>24} {:>24} {:>20} {:>20}  counters (medians)",
            "design",
            "IOPS",
            "MB/s",
            "p50/p99 µs",
            "CPU µs/IO (proc)",
            "CPU µs/IO (machine)",
            "vs raw IOPS",
            "vs raw CPU"
        )?;
        for d in &self.designs {
            let lat = format!(
                "{:.0}/{:.0}",
                d.spread(|r| r.lat_us[0]).median,
                d.spread(|r| r.lat_us[1]).median
            );
            let (vi, vc) = match raw.filter(|r| r.design != d.design) {
                Some(raw) => (
                    Ratio::show(d.ratio(raw, |r| r.iops)),
                    Ratio::show(d.ratio(raw, |r| r.cpu_us)),
                ),
                None => ("-".to_owned(), "-".to_owned()),
            };
            let counters = d
                .counters()
                .iter()
                .map(|(n, v)| format!("{n} {v:.0}"))
                .collect::<Vec<_>>()
                .join(", ");
            writeln!(
                f,
                "{:<12} {:>26} {:>22} {:>18} {:>24} {:>24} {:>20} {:>20}  {counters}",
                d.design,
                d.spread(|r| r.iops).show(0),
                d.spread(|r| r.mbps).show(1),
                lat,
                d.spread(|r| r.cpu_us).show(2),
                d.machine().map_or("-".to_owned(), |s| s.show(2)),
                vi,
                vc
            )?;
        }
        // Which engine produced the simulated rows' figures (the per-CPU rings may have fallen
        // back to a reaper thread on a kernel without IORING_FEAT_EXT_ARG).
        let mut engines: Vec<(String, Vec<&str>)> = Vec::new();
        for d in &self.designs {
            let Some(e) = d.engine() else { continue };
            match engines.iter_mut().find(|(x, _)| *x == e) {
                Some((_, ds)) => ds.push(&d.design),
                None => engines.push((e, vec![&d.design])),
            }
        }
        for (e, ds) in &engines {
            writeln!(f, "engine of {}: {e}", ds.join(", "))?;
        }
        if let Some(v) = &self.verified {
            writeln!(f, "verify: {v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(iops: f64, cpu: f64) -> RoundFigures {
        RoundFigures {
            ios: 100,
            iops,
            mbps: iops * 4096.0 / 1e6,
            lat_us: [10.0, 20.0, 30.0],
            cpu_us: cpu,
            sys_us: cpu / 4.0,
            machine_us: Some(cpu * 2.0),
            counters: vec![("irqs", 100)],
            engine: None,
        }
    }

    /// Raw with no system time in a round (a short job `getrusage` saw none in) gives no ratio
    /// for that round; with none in any round the ratio is `null` in the JSON, never 0.
    #[test]
    fn a_ratio_to_a_zero_raw_figure_is_left_out_and_none_is_null() {
        let zero_sys = |iops| RoundFigures {
            sys_us: 0.0,
            ..round(iops, 1.0)
        };
        let raw = DesignReport {
            design: "raw".into(),
            rounds: vec![zero_sys(100.0), round(100.0, 1.0)],
        };
        let d = DesignReport {
            design: "v5".into(),
            rounds: vec![round(50.0, 2.0), round(50.0, 2.0)],
        };
        let r = d.ratio(&raw, |r| r.sys_us).unwrap();
        assert_eq!((r.spread.median, r.rounds), (2.0, 1));
        let raw = DesignReport {
            design: "raw".into(),
            rounds: vec![zero_sys(100.0), zero_sys(100.0)],
        };
        assert_eq!(d.ratio(&raw, |r| r.sys_us), None);
        let report = JobReport {
            job: "j".into(),
            header: "h\n".into(),
            designs: vec![d, raw],
            skipped: vec![],
            verified: None,
        };
        let j = report.to_json();
        assert_eq!(j["designs"][0]["vs_raw"]["cpu_per_io_system"], Value::Null);
        assert_eq!(j["designs"][0]["vs_raw"]["iops"]["median"], json!(0.5));
        assert_eq!(j["designs"][0]["vs_raw"]["iops"]["rounds"], json!(2));
    }

    #[test]
    fn ratios_are_taken_pair_by_pair_within_a_round() {
        // Raw swings 100 -> 200 between rounds; the design is always half of it.
        let raw = DesignReport {
            design: "raw".into(),
            rounds: vec![round(100.0, 1.0), round(200.0, 1.0), round(150.0, 1.0)],
        };
        let d = DesignReport {
            design: "v5".into(),
            rounds: vec![round(50.0, 2.0), round(100.0, 2.0), round(75.0, 2.0)],
        };
        let r = d.ratio(&raw, |r| r.iops).unwrap().spread;
        assert_eq!((r.median, r.min, r.max), (0.5, 0.5, 0.5));
        let report = JobReport {
            job: "j".into(),
            header: "h\n".into(),
            designs: vec![d, raw],
            skipped: vec!["kernel-loop: not root".into()],
            verified: None,
        };
        let text = report.to_string();
        assert!(text.contains("0.50 (0.50–0.50)"), "{text}");
        assert!(text.contains("2.00 (2.00–2.00)"), "{text}");
        assert!(text.starts_with("skipped: kernel-loop"), "{text}");
        let j = report.to_json();
        assert_eq!(j["designs"][0]["vs_raw"]["iops"]["median"], json!(0.5));
        assert_eq!(j["designs"][1]["iops"]["min"], json!(100.0));
        assert_eq!(j["designs"][0]["engine"], Value::Null);
        assert!(!text.contains("engine of"), "{text}");
    }

    /// The engine a simulated design actually ran on is in the table and the JSON, per design:
    /// a fallback to the reaper thread (no `IORING_FEAT_EXT_ARG`) is visible beside the figures
    /// it produced, also when only some rounds fell back.
    #[test]
    fn the_engine_that_ran_is_named_in_the_table_and_the_json() {
        use crate::perf::job::run::SimEngine;
        let with = |e: Option<&'static str>| RoundFigures {
            engine: e,
            ..round(100.0, 1.0)
        };
        let report = JobReport {
            job: "j".into(),
            header: "h\n".into(),
            designs: vec![
                DesignReport {
                    design: "base".into(),
                    rounds: vec![with(Some(SimEngine::PER_CPU_NAME)); 2],
                },
                DesignReport {
                    design: "v5".into(),
                    rounds: vec![
                        with(Some(SimEngine::PER_CPU_NAME)),
                        with(Some(SimEngine::REAPER_NAME)),
                    ],
                },
                DesignReport {
                    design: "raw".into(),
                    rounds: vec![with(None); 2],
                },
            ],
            skipped: vec![],
            verified: None,
        };
        let text = report.to_string();
        assert!(
            text.contains(&format!("engine of base: {}\n", SimEngine::PER_CPU_NAME)),
            "{text}"
        );
        let both = format!("{} / {}", SimEngine::PER_CPU_NAME, SimEngine::REAPER_NAME);
        assert!(text.contains(&format!("engine of v5: {both}\n")), "{text}");
        assert!(!text.contains("engine of raw"), "{text}");
        let j = report.to_json();
        assert_eq!(j["designs"][0]["engine"], json!(SimEngine::PER_CPU_NAME));
        assert_eq!(j["designs"][1]["engine"], json!(both));
        assert_eq!(j["designs"][2]["engine"], Value::Null);
    }
}
