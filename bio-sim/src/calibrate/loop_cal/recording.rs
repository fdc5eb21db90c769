//! A live loop calibration on disk: `setup.txt` (what the traces need to be read) and one
//! `NN-CASE.trace` per case, the kernel's `trace` buffer exactly as read.
//!
//! `setup.txt`, one `key value` per line (`#` comments):
//!
//! ```text
//! kernel 6.18.44-fc-v1045
//! loop 0
//! lower 254,0
//! nr_blocking_writes absent
//! extent 64 41107520 8
//! ```
//!
//! `loop N`: the device was `/dev/loopN` (7,N), its workqueue `loopN`. `lower MAJ,MIN`: the
//! backing file's `st_dev`. `extent FILE_SECTOR DEV_SECTOR SECTORS`: one written extent of the
//! backing file (`FS_IOC_FIEMAP`), repeatable. Every key but `extent` exactly once; anything else
//! is an error naming the line.

use super::{CalibrateError, Case, LiveCase, Recording, Setup, CASES};
use std::fmt::Write as _;
use std::path::Path;

/// The file name of a case: `01-write-hole.trace`.
pub fn case_file(case: &Case) -> String {
    let i = CASES.iter().position(|c| c == case).unwrap_or(0);
    format!("{:02}-{}.trace", i + 1, case.name)
}

/// `setup.txt`'s text.
pub fn setup_text(s: &Setup) -> String {
    let mut t =
        String::from("# biosim calibrate loop: the live run's setup (docs/live-kernel.md)\n");
    let _ = writeln!(t, "kernel {}", s.kernel);
    let _ = writeln!(t, "loop {}", s.loop_number);
    let _ = writeln!(t, "lower {},{}", s.lower.0, s.lower.1);
    let _ = writeln!(
        t,
        "nr_blocking_writes {}",
        if s.nr_blocking_writes {
            "present"
        } else {
            "absent"
        }
    );
    for (l, p, n) in &s.extents {
        let _ = writeln!(t, "extent {l} {p} {n}");
    }
    t
}

/// Parses `setup.txt`'s text (`path` names it in errors).
pub fn parse_setup(text: &str, path: &Path) -> Result<Setup, CalibrateError> {
    let err = |line: usize, what: String| CalibrateError::Recording {
        path: path.to_owned(),
        line,
        what,
    };
    let (mut kernel, mut number, mut lower, mut nrbw) = (None, None, None, None);
    let mut extents = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line
            .split_once(' ')
            .ok_or_else(|| err(n, format!("expected `KEY VALUE`, got `{line}`")))?;
        if key != "extent" && seen.contains(&key) {
            return Err(err(n, format!("`{key}` given twice")));
        }
        seen.push(key);
        match key {
            "kernel" => {
                kernel = Some(value.to_owned());
            }
            "loop" => {
                number =
                    Some(value.parse::<u32>().map_err(|_| {
                        err(n, format!("loop `{value}`: expected a device number"))
                    })?);
            }
            "lower" => {
                let dev = value
                    .split_once(',')
                    .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
                    .ok_or_else(|| err(n, format!("lower `{value}`: expected MAJOR,MINOR")))?;
                lower = Some(dev);
            }
            "nr_blocking_writes" => {
                nrbw = Some(match value {
                    "present" => true,
                    "absent" => false,
                    _ => {
                        return Err(err(
                            n,
                            format!("nr_blocking_writes `{value}`: expected present or absent"),
                        ))
                    }
                });
            }
            "extent" => {
                let v: Vec<u64> = value
                    .split_whitespace()
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .map_err(|_| err(n, format!("extent `{value}`: expected three numbers")))?;
                let [l, p, s] = v[..] else {
                    return Err(err(
                        n,
                        format!("extent `{value}`: expected FILE_SECTOR DEV_SECTOR SECTORS"),
                    ));
                };
                extents.push((l, p, s));
            }
            _ => {
                return Err(err(
                    n,
                    format!(
                    "unknown key `{key}` (known: kernel, loop, lower, nr_blocking_writes, extent)"
                ),
                ))
            }
        }
    }
    let missing = |k: &str| err(0, format!("no `{k}` line"));
    Ok(Setup {
        kernel: kernel.ok_or_else(|| missing("kernel"))?,
        loop_number: number.ok_or_else(|| missing("loop"))?,
        lower: lower.ok_or_else(|| missing("lower"))?,
        nr_blocking_writes: nrbw.ok_or_else(|| missing("nr_blocking_writes"))?,
        extents,
    })
}

/// Writes `rec` into `dir` (created if missing).
pub fn write(dir: &Path, rec: &Recording) -> Result<(), CalibrateError> {
    let io = |what: String| move |source| CalibrateError::Io { what, source };
    std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
    let p = dir.join("setup.txt");
    std::fs::write(&p, setup_text(&rec.setup)).map_err(io(format!("write {}", p.display())))?;
    for lc in &rec.cases {
        let p = dir.join(case_file(lc.case));
        std::fs::write(&p, &lc.trace).map_err(io(format!("write {}", p.display())))?;
    }
    Ok(())
}

/// Reads a recording from `dir`: `setup.txt` and every case's trace.
pub fn read(dir: &Path) -> Result<Recording, CalibrateError> {
    let io = |what: String| move |source| CalibrateError::Io { what, source };
    let p = dir.join("setup.txt");
    let text = std::fs::read_to_string(&p).map_err(io(format!("read {}", p.display())))?;
    let setup = parse_setup(&text, &p)?;
    let mut cases = Vec::new();
    for case in &CASES {
        let p = dir.join(case_file(case));
        let trace = std::fs::read_to_string(&p).map_err(io(format!("read {}", p.display())))?;
        cases.push(LiveCase { case, trace });
    }
    Ok(Recording { setup, cases })
}
