//! `biosim calibrate loop`: bio-core's model of `drivers/block/loop.c` checked against the loop
//! driver of the live kernel.
//!
//! A real loop device over a temporary sparse file ([`live`]) and the model's loop driver over an
//! in-memory one ([`model`]) get the same `O_DIRECT` I/O ([`CASES`]: writes into a hole and over
//! a written block, reads of a written block and of a hole). The kernel's block and workqueue
//! events of each case are reduced to tuples ([`normalize`]: event, device role, rwbs, sector,
//! sectors, work function and workqueue; pointers, pids, CPUs and times dropped) and compared
//! with the model's, for every posted version of the NOWAIT series: which version the kernel
//! behaves like, and whether the model's `base` gives the same sequence.
//!
//! `--record DIR` keeps what the live run saw ([`recording`]: the kernel's `trace` buffer of each
//! case, unedited, and the setup it needs to be read); `--replay DIR` compares the model with such
//! a directory without root (CI replays tests/data/calibrate/loop-6.18/).

pub mod live;
pub mod model;
pub mod normalize;
pub mod recording;

use bio_core::drivers::block::loop_drv::LoopVariant;
use normalize::Ev;
use std::io::Write;
use std::path::PathBuf;

/// The tracepoints a live run enables (`events/<system>/<event>`): the path of a request through
/// the loop device, its worker, and the backing file's I/O on the device under it.
pub const TRACED_EVENTS: [&str; 9] = [
    "block/block_bio_queue",
    "block/block_getrq",
    "block/block_rq_insert",
    "block/block_rq_issue",
    "block/block_rq_complete",
    "workqueue/workqueue_queue_work",
    "workqueue/workqueue_activate_work",
    "workqueue/workqueue_execute_start",
    "workqueue/workqueue_execute_end",
];

/// One case: a single `O_DIRECT` read or write of whole 4 KiB blocks through the loop device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    /// Its name (and the recording's file name).
    pub name: &'static str,
    /// A write (else a read).
    pub write: bool,
    /// The first 4 KiB block.
    pub block: u32,
    /// How many blocks.
    pub blocks: u32,
    /// The byte a write fills its blocks with.
    pub fill: u8,
    /// The byte a read must find (0: a hole).
    pub expect_fill: u8,
}

/// The cases, run in this order on one device (each sees what the earlier ones wrote).
pub const CASES: [Case; 4] = [
    Case {
        name: "write-hole",
        write: true,
        block: 8,
        blocks: 1,
        fill: 0x5a,
        expect_fill: 0,
    },
    Case {
        name: "overwrite",
        write: true,
        block: 8,
        blocks: 1,
        fill: 0xa5,
        expect_fill: 0,
    },
    Case {
        name: "read-written",
        write: false,
        block: 8,
        blocks: 1,
        fill: 0,
        expect_fill: 0xa5,
    },
    Case {
        name: "read-hole",
        write: false,
        block: 16,
        blocks: 1,
        fill: 0,
        expect_fill: 0,
    },
];

/// What a recording needs besides the traces to be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// `uname -r`.
    pub kernel: String,
    /// N of `/dev/loopN` (major 7).
    pub loop_number: u32,
    /// `major,minor` of the block device under the backing file (its `st_dev`).
    pub lower: (u32, u32),
    /// Whether `/sys/block/loopN/loop/nr_blocking_writes` exists (patch 6/6 of the NOWAIT
    /// series adds it).
    pub nr_blocking_writes: bool,
    /// The backing file's written extents after the run, `(file sector, device sector,
    /// sectors)`: which of the lower device's requests are the backing file's I/O.
    pub extents: Vec<(u64, u64, u64)>,
}

/// One live case: the kernel's `trace` buffer, verbatim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveCase {
    /// The case.
    pub case: &'static Case,
    /// The `trace` file read after it.
    pub trace: String,
}

/// A live run (or one read back from a directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recording {
    /// The setup.
    pub setup: Setup,
    /// One entry per [`CASES`] entry, in order.
    pub cases: Vec<LiveCase>,
}

/// Why the calibration could not run (not: the model differs, which is a result).
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// The live kernel cannot be used.
    #[error("calibrate loop: {0}")]
    NotLive(String),
    /// A system call failed.
    #[error("calibrate loop: {what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The kernel did something the calibration cannot work with.
    #[error("calibrate loop: {0}")]
    Kernel(String),
    /// A recording that does not parse.
    #[error("calibrate loop: {path}:{line}: {what}")]
    Recording {
        /// The file.
        path: PathBuf,
        /// 1-based line (0: the file as a whole).
        line: usize,
        /// What is wrong.
        what: String,
    },
    /// The options do not go together.
    #[error("calibrate loop: {0}")]
    Usage(String),
}

/// `biosim calibrate loop`'s options.
#[derive(Debug, Clone, clap::Args)]
pub struct LoopCalibrateArgs {
    /// Also write what the live run saw to DIR (created if missing): setup.txt and one
    /// `NN-CASE.trace` per case.
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    pub record: Option<PathBuf>,
    /// Compare the model with a recorded directory instead of the live kernel (no root needed).
    #[arg(long, value_name = "DIR")]
    pub replay: Option<PathBuf>,
    /// Where the live run's temporary backing file goes (a file system on a block device).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/tmp",
        conflicts_with = "replay"
    )]
    pub dir: PathBuf,
    /// Also print every case's normalized live sequence, and each model sequence that differs.
    #[arg(long)]
    pub show: bool,
}

/// Where the backing file goes by default: `/var/tmp`, on the root file system's disk (`/tmp`
/// may be a tmpfs, which has no device under it).
pub const DEFAULT_DIR: &str = "/var/tmp";

impl Default for LoopCalibrateArgs {
    /// A live run without recording, the backing file in [`DEFAULT_DIR`] (what the command line
    /// gives without options).
    fn default() -> Self {
        LoopCalibrateArgs {
            record: None,
            replay: None,
            dir: PathBuf::from(DEFAULT_DIR),
            show: false,
        }
    }
}

/// How one model version compares on one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    /// The same sequence.
    Agree,
    /// The first difference: index, live event, model event (`None`: that side ended).
    Differ(usize, Option<Ev>, Option<Ev>),
}

impl Cell {
    /// Whether it agrees.
    pub fn agrees(&self) -> bool {
        *self == Cell::Agree
    }
}

/// The comparison of a recording with every model version.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// The versions, in [`LoopVariant::ALL`]'s order.
    pub variants: Vec<LoopVariant>,
    /// Per case: its live sequence, and per version its model sequence and the cell.
    pub rows: Vec<Row>,
    /// Events the model never emits, in any case on any version, left out of both sides (a
    /// tracepoint the model does not have yet), each with the live count.
    pub not_compared: Vec<(String, usize)>,
    /// Whether the kernel has `nr_blocking_writes`.
    pub nr_blocking_writes: bool,
}

/// One case's comparison.
#[derive(Debug, Clone)]
pub struct Row {
    /// The case.
    pub case: &'static Case,
    /// What the kernel did.
    pub live: Vec<Ev>,
    /// Per version: what the model did and how it compares.
    pub model: Vec<(Vec<Ev>, Cell)>,
}

impl Comparison {
    /// The versions that agree on every case.
    pub fn agreeing(&self) -> Vec<&'static str> {
        self.variants
            .iter()
            .enumerate()
            .filter(|(i, _)| self.rows.iter().all(|r| r.model[*i].1.agrees()))
            .map(|(_, v)| v.name)
            .collect()
    }

    /// Whether `base` agrees on every case.
    pub fn base_agrees(&self) -> bool {
        self.agreeing().contains(&LoopVariant::BASE.name)
    }
}

/// The first difference of two sequences.
pub fn first_difference(live: &[Ev], model: &[Ev]) -> Cell {
    let n = live.len().max(model.len());
    (0..n)
        .find(|&i| live.get(i) != model.get(i))
        .map_or(Cell::Agree, |i| {
            Cell::Differ(i, live.get(i).cloned(), model.get(i).cloned())
        })
}

/// Compares a recording with every model version.
pub fn compare(rec: &Recording) -> Result<Comparison, CalibrateError> {
    compare_with(rec, &LoopVariant::ALL)
}

/// Compares a recording with the model versions `variants`.
pub fn compare_with(
    rec: &Recording,
    variants: &[LoopVariant],
) -> Result<Comparison, CalibrateError> {
    let mut live = Vec::new();
    for lc in &rec.cases {
        live.push(
            normalize::live_events(&lc.trace, &rec.setup).map_err(|(line, what)| {
                CalibrateError::Recording {
                    path: PathBuf::from(recording::case_file(lc.case)),
                    line,
                    what,
                }
            })?,
        );
    }
    let runs = variants
        .iter()
        .map(|&v| model::run(v))
        .collect::<Result<Vec<_>, _>>()?;
    // Event kinds no version of the model ever emits are not compared: say so rather than fail
    // every cell on a tracepoint the model does not have.
    let mut not_compared: Vec<(String, usize)> = Vec::new();
    for ev in TRACED_EVENTS {
        let name = ev.rsplit('/').next().unwrap_or(ev);
        let in_model = runs.iter().flatten().flatten().any(|e| e.event == name);
        let in_live = live.iter().flatten().filter(|e| e.event == name).count();
        if !in_model && in_live > 0 {
            not_compared.push((name.to_owned(), in_live));
        }
    }
    let keep = |evs: &Vec<Ev>| -> Vec<Ev> {
        evs.iter()
            .filter(|e| !not_compared.iter().any(|(n, _)| *n == e.event))
            .cloned()
            .collect()
    };
    let rows = rec
        .cases
        .iter()
        .enumerate()
        .map(|(i, lc)| {
            let l = keep(&live[i]);
            let model = runs
                .iter()
                .map(|r| {
                    let m = keep(&r[i]);
                    let cell = first_difference(&l, &m);
                    (m, cell)
                })
                .collect();
            Row {
                case: lc.case,
                live: l,
                model,
            }
        })
        .collect();
    Ok(Comparison {
        variants: variants.to_vec(),
        rows,
        not_compared,
        nr_blocking_writes: rec.setup.nr_blocking_writes,
    })
}

/// Prints a comparison: a row per case with each version's cell, then the verdict lines.
pub fn render(
    c: &Comparison,
    rec: &Recording,
    show: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let s = &rec.setup;
    writeln!(
        out,
        "# live kernel {}: loop{} (7,{}) over a sparse file on {},{}, LO_FLAGS_DIRECT_IO; nr_blocking_writes {}",
        s.kernel,
        s.loop_number,
        s.loop_number,
        s.lower.0,
        s.lower.1,
        if s.nr_blocking_writes { "present (NOWAIT series patch 6/6)" } else { "absent (no NOWAIT series)" }
    )?;
    write!(out, "{:<14} {:>6}", "case", "events")?;
    for v in &c.variants {
        write!(out, " {:>10}", v.name)?;
    }
    writeln!(out)?;
    for r in &c.rows {
        write!(out, "{:<14} {:>6}", r.case.name, r.live.len())?;
        for (_, cell) in &r.model {
            write!(
                out,
                " {:>10}",
                if cell.agrees() { "agree" } else { "differ" }
            )?;
        }
        writeln!(out)?;
    }
    for r in &c.rows {
        for (v, (m, cell)) in c.variants.iter().zip(&r.model) {
            if let Cell::Differ(i, l, mm) = cell {
                let show_ev =
                    |e: &Option<Ev>| e.as_ref().map_or("(nothing)".to_owned(), Ev::to_string);
                writeln!(
                    out,
                    "  {} on {}: event {}: live `{}`, model `{}` ({} live, {} model events)",
                    r.case.name,
                    v.name,
                    i + 1,
                    show_ev(l),
                    show_ev(mm),
                    r.live.len(),
                    m.len()
                )?;
            }
        }
    }
    for (name, n) in &c.not_compared {
        writeln!(
            out,
            "  not compared: {name} ({n} live events; the model does not emit it)"
        )?;
    }
    if show {
        for r in &c.rows {
            writeln!(out, "== {} live", r.case.name)?;
            for e in &r.live {
                writeln!(out, "   {e}")?;
            }
            for (v, (m, cell)) in c.variants.iter().zip(&r.model) {
                if cell.agrees() {
                    continue;
                }
                writeln!(out, "== {} model {}", r.case.name, v.name)?;
                for e in m {
                    writeln!(out, "   {e}")?;
                }
            }
        }
    }
    let agreeing = c.agreeing();
    writeln!(
        out,
        "the live kernel behaves like: {}",
        if agreeing.is_empty() {
            "no model version".to_owned()
        } else {
            agreeing.join(", ")
        }
    )?;
    writeln!(
        out,
        "model base: {}",
        if c.base_agrees() {
            "same sequence as the live kernel in every case"
        } else {
            "DIFFERS from the live kernel"
        }
    )?;
    Ok(())
}

/// Runs `biosim calibrate loop`: live (optionally recording) or replayed; the rows go to `out`.
/// `Ok(true)` when the model's `base` gives the live kernel's sequence in every case.
pub fn run(args: &LoopCalibrateArgs, out: &mut dyn Write) -> Result<bool, CalibrateError> {
    let rec = match &args.replay {
        Some(dir) => recording::read(dir)?,
        None => {
            let rec = live::record(&args.dir)?;
            if let Some(dir) = &args.record {
                recording::write(dir, &rec)?;
            }
            rec
        }
    };
    let c = compare(&rec)?;
    render(&c, &rec, args.show, out).map_err(|source| CalibrateError::Io {
        what: "write the comparison".into(),
        source,
    })?;
    Ok(c.base_agrees())
}

#[cfg(test)]
mod tests;
