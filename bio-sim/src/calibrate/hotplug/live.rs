//! The live side of a calibration: CPU hotplug of the running kernel through sysfs
//! (drivers/base/cpu.c's `cpuN/online`, kernel/cpu.c's `cpuN/hotplug/{state,target,fail}` and
//! `hotplug/states`), traced with the `cpuhp` events in a [`Tracefs`] session.
//!
//! It refuses (one line each) without root, without tracefs, for CPU0 or a CPU that does not
//! exist, or when the CPU is not online at `CPUHP_ONLINE` with `fail` at -1 to begin with. Before it
//! changes anything it registers the restores (`cpuN/online` ← 1 first, then `cpuN/hotplug/fail`
//! ← -1, so the newest-first undo clears `fail` before it brings the CPU up); the session switches
//! tracing off. They run however the run ends: normally, on an error, on Ctrl-C.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hotplug::{Errno, CPUHP_ONLINE};

use super::learn;
use super::model::SWEEP_FROM;
use super::recording::{FailWrite, RecordedCase, Recording};
use super::{Case, Observed, Op, WriteResult};
use crate::calibrate::tracefs::{why_not_live, Tracefs};
use crate::dev::cleanup::{Restore, RestoreAction};

/// `/sys/devices/system/cpu`.
pub const SYS_CPU: &str = "/sys/devices/system/cpu";

/// Why the live run will not start (exit status 2), or what went wrong during it.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// A precondition does not hold; nothing was changed.
    #[error("refusing to calibrate: {0}")]
    Refused(String),
    /// Something failed during the run (the machine is restored all the same).
    #[error("live calibration: {0}")]
    Failed(String),
}

fn failed(e: impl std::fmt::Display) -> LiveError {
    LiveError::Failed(e.to_string())
}

/// The sysfs files of one CPU.
#[derive(Debug)]
struct CpuFiles {
    cpu: u32,
    online: PathBuf,
    state: PathBuf,
    target: PathBuf,
    fail: PathBuf,
}

impl CpuFiles {
    fn new(cpu: u32) -> CpuFiles {
        let d = Path::new(SYS_CPU).join(format!("cpu{cpu}"));
        CpuFiles {
            cpu,
            online: d.join("online"),
            state: d.join("hotplug/state"),
            target: d.join("hotplug/target"),
            fail: d.join("hotplug/fail"),
        }
    }

    fn read_int(p: &Path) -> Result<i32, LiveError> {
        let s = std::fs::read_to_string(p).map_err(|e| failed(format!("{}: {e}", p.display())))?;
        s.trim()
            .parse()
            .map_err(|_| failed(format!("{}: not a number: {s:?}", p.display())))
    }

    /// Everything a case leaves (the `fail` write's and the operation's results given).
    fn observe(&self, fail_write: WriteResult, ret: WriteResult) -> Result<Observed, LiveError> {
        Ok(Observed {
            fail_write,
            ret,
            state: Self::read_int(&self.state)?,
            target: Self::read_int(&self.target)?,
            fail: Self::read_int(&self.fail)?,
            online: Self::read_int(&self.online)? == 1,
            in_mask: online_mask()?.contains(&self.cpu),
        })
    }
}

/// `/sys/devices/system/cpu/online`: `cpu_online_mask` as a list of ranges (`0-1`, `0,2-3`).
fn online_mask() -> Result<Vec<u32>, LiveError> {
    let p = Path::new(SYS_CPU).join("online");
    let s = std::fs::read_to_string(&p).map_err(|e| failed(format!("{}: {e}", p.display())))?;
    parse_cpu_list(s.trim())
        .ok_or_else(|| failed(format!("{}: not a CPU list: {s:?}", p.display())))
}

/// A kernel CPU list (`lib/bitmap-str.c` `bitmap_parselist()` form: `0-1,3`).
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    if s.is_empty() {
        return Some(out);
    }
    for part in s.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
        if a > b {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

/// One `write(2)` of `value` to a sysfs attribute: `Ok`, or the errno the store method returned.
/// An attribute that cannot be opened is an error of the run, not a result.
fn write_attr(p: &Path, value: &str) -> Result<WriteResult, LiveError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(p)
        .map_err(|e| failed(format!("{}: {e}", p.display())))?;
    Ok(match f.write(value.as_bytes()) {
        Ok(_) => Ok(()),
        Err(e) => Err(e
            .raw_os_error()
            .and_then(Errno::from_i32)
            .unwrap_or(Errno::EIO)),
    })
}

/// A write that must succeed.
fn must_write(p: &Path, value: &str) -> Result<(), LiveError> {
    write_attr(p, value)?
        .map_err(|e| failed(format!("echo {value} > {}: {}", p.display(), e.neg_str())))
}

/// The running session: the tracefs session, the restores, the CPU.
struct Session {
    t: Tracefs,
    cpu: CpuFiles,
    /// Held for the whole run; undone newest first (`fail`, then `online`) by `Drop`.
    restores: Vec<Restore>,
}

impl Drop for Session {
    fn drop(&mut self) {
        // A Vec would drop its elements oldest first; the restores must run newest first. The
        // tracefs session (tracing off, events disabled) drops after them.
        while let Some(r) = self.restores.pop() {
            drop(r);
        }
    }
}

impl Session {
    /// The CPU back at `CPUHP_ONLINE`, online, `fail` -1. A CPU whose `online` reads 1 but whose
    /// state is not `CPUHP_ONLINE` (a failed online leaves `dev->offline` alone) goes through
    /// `hotplug/target`.
    fn ensure_online(&self) -> Result<(), LiveError> {
        let c = &self.cpu;
        must_write(&c.fail, "-1")?;
        if CpuFiles::read_int(&c.online)? == 0 {
            must_write(&c.online, "1")?;
        }
        if CpuFiles::read_int(&c.state)? != CPUHP_ONLINE.0 {
            must_write(&c.target, &CPUHP_ONLINE.0.to_string())?;
            if CpuFiles::read_int(&c.online)? == 0 {
                must_write(&c.online, "1")?;
            }
        }
        let o = c.observe(Ok(()), Ok(()))?;
        if o.state != CPUHP_ONLINE.0 || !o.online || !o.in_mask || o.fail != -1 {
            return Err(failed(format!(
                "could not bring CPU{} back online: state={} online={} in cpu_online_mask={} fail={}",
                c.cpu, o.state, o.online, o.in_mask, o.fail
            )));
        }
        Ok(())
    }

    /// The CPU offline at `CPUHP_OFFLINE`, `fail` -1 (through [`Self::ensure_online`] if it was
    /// left anywhere else).
    fn ensure_offline(&self) -> Result<(), LiveError> {
        let c = &self.cpu;
        must_write(&c.fail, "-1")?;
        let o = c.observe(Ok(()), Ok(()))?;
        if o.state == 0 && !o.online && !o.in_mask {
            return Ok(());
        }
        self.ensure_online()?;
        must_write(&c.online, "0")?;
        let o = c.observe(Ok(()), Ok(()))?;
        if o.state != 0 || o.online || o.in_mask {
            return Err(failed(format!(
                "could not take CPU{} offline: state={} online={} in cpu_online_mask={}",
                c.cpu, o.state, o.online, o.in_mask
            )));
        }
        Ok(())
    }

    /// Every value of `SWEEP_FROM..=CPUHP_ONLINE` written to `fail` (an accepted one cleared again).
    fn sweep(&self) -> Result<Vec<WriteResult>, LiveError> {
        let mut out = Vec::new();
        for v in SWEEP_FROM..=CPUHP_ONLINE.0 {
            let r = write_attr(&self.cpu.fail, &v.to_string())?;
            if r.is_ok() {
                must_write(&self.cpu.fail, "-1")?;
            }
            out.push(r);
        }
        Ok(out)
    }

    /// Runs `write` with tracing on and returns its result and the cpuhp event lines; without
    /// `ok_exits`, the `cpuhp_exit` lines with `ret: 0` are left out (see [`is_ok_exit`]).
    fn traced<T>(
        &self,
        ok_exits: bool,
        write: impl FnOnce() -> Result<T, LiveError>,
    ) -> Result<(T, String), LiveError> {
        self.t.clear().map_err(failed)?;
        self.t.set_on(true).map_err(failed)?;
        let r = write();
        self.t.set_on(false).map_err(failed)?;
        let r = r?;
        let text = self.t.read().map_err(failed)?;
        let events: String = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter(|l| ok_exits || !is_ok_exit(l))
            .map(|l| format!("{l}\n"))
            .collect();
        // Refuse what the parser would (a `LOST EVENTS` line, another CPU's events) now.
        learn::events(&events, self.cpu.cpu).map_err(failed)?;
        Ok((r, events))
    }

    /// One case: from the CPU's start state, `fail` then `online`, traced.
    fn case(&self, case: Case) -> Result<RecordedCase, LiveError> {
        match case.op {
            Op::Down => self.ensure_online()?,
            Op::Up => self.ensure_offline()?,
        }
        let c = &self.cpu;
        let ((fail_write, ret), trace) = self.traced(false, || {
            let fw = write_attr(&c.fail, &case.fail.to_string())?;
            let ret = write_attr(&c.online, if case.op == Op::Up { "1" } else { "0" })?;
            Ok((fw, ret))
        })?;
        let observed = c.observe(fail_write, ret)?;
        must_write(&c.fail, "-1")?;
        Ok(RecordedCase {
            case,
            observed,
            trace,
        })
    }
}

/// A `cpuhp_exit` of a callback that returned 0. The cases' traces leave these out, which halves a
/// recording: the comparison reads the enters (which callbacks ran) and the exits that carry an
/// error, and an exit with `ret: 0` only repeats its enter. The clean traces keep every line.
pub fn is_ok_exit(line: &str) -> bool {
    line.contains(": cpuhp_exit: ") && line.ends_with(" ret: 0")
}

fn read_text(p: &Path) -> Result<String, LiveError> {
    std::fs::read_to_string(p).map_err(|e| failed(format!("{}: {e}", p.display())))
}

/// The preconditions that need no lock: root, a CPU other than CPU0 that exists and can be
/// hotplugged.
fn check_cpu(cpu: u32) -> Result<CpuFiles, LiveError> {
    if let Some(why) = why_not_live() {
        return Err(LiveError::Refused(why));
    }
    if cpu == 0 {
        return Err(LiveError::Refused(
            "CPU0 is never taken offline; choose another CPU with --cpu".into(),
        ));
    }
    let files = CpuFiles::new(cpu);
    if !files.online.exists() || !files.fail.exists() {
        return Err(LiveError::Refused(format!(
            "CPU{cpu} does not exist or cannot be hotplugged (no {} or {})",
            files.online.display(),
            files.fail.display()
        )));
    }
    Ok(files)
}

/// The CPU must be online at `CPUHP_ONLINE` with `fail` at -1: the run starts from there and
/// leaves it there.
fn check_start(files: &CpuFiles) -> Result<(), LiveError> {
    let cpu = files.cpu;
    let start = files.observe(Ok(()), Ok(()))?;
    if start.state != CPUHP_ONLINE.0 || !start.online || !start.in_mask {
        return Err(LiveError::Refused(format!(
            "CPU{cpu} is not online at the start (state={} online={}); bring it online first",
            start.state, start.online
        )));
    }
    if start.fail != -1 {
        return Err(LiveError::Refused(format!(
            "CPU{cpu}'s hotplug/fail is {} at the start, not -1; clear it first",
            start.fail
        )));
    }
    Ok(())
}

/// Records a calibration of CPU `cpu` on the live kernel; returns it and how long it took.
pub fn record(cpu: u32) -> Result<(Recording, Duration), LiveError> {
    let files = check_cpu(cpu)?;
    let started = Instant::now();
    // Checked before the session (which clears the trace buffer) and again under its lock.
    check_start(&files)?;
    let mut t = Tracefs::open().map_err(|e| LiveError::Refused(format!("no tracefs: {e}")))?;
    check_start(&files)?;
    // Restores before any change; newest first means `fail` is cleared before `online` is written.
    let restores = vec![
        Restore::register(RestoreAction::Write {
            path: files.online.clone(),
            value: "1".into(),
        })
        .map_err(failed)?,
        Restore::register(RestoreAction::Write {
            path: files.fail.clone(),
            value: "-1".into(),
        })
        .map_err(failed)?,
    ];
    t.enable("cpuhp").map_err(failed)?;
    let s = Session {
        t,
        cpu: files,
        restores,
    };
    let result = run(&s);
    // However the run went, the CPU goes back online before the session ends.
    let back = s.ensure_online();
    let rec = result?;
    back?;
    drop(s);
    Ok((rec, started.elapsed()))
}

/// The body of a live run (the session and its restores are in place).
fn run(s: &Session) -> Result<Recording, LiveError> {
    let cpu = s.cpu.cpu;
    let listing = read_text(&Path::new(SYS_CPU).join("hotplug/states"))?;
    let kernel = read_text(Path::new("/proc/sys/kernel/osrelease"))?
        .trim()
        .to_owned();
    let possible = read_text(&Path::new(SYS_CPU).join("possible"))?;
    let nr_cpus = parse_cpu_list(possible.trim())
        .and_then(|v| v.last().map(|l| l + 1))
        .ok_or_else(|| failed(format!("{SYS_CPU}/possible: not a CPU list: {possible:?}")))?;

    let online_sweep = s.sweep()?;
    let ((), clean_down) = s.traced(true, || must_write(&s.cpu.online, "0"))?;
    s.ensure_offline()?;
    let offline_sweep = s.sweep()?;
    let ((), clean_up) = s.traced(true, || must_write(&s.cpu.online, "1"))?;
    s.ensure_online()?;

    // Clean runs that are not clean (a rollback, a failing callback) stop the run here.
    learn::callback_map(
        &learn::events(&clean_down, cpu).map_err(failed)?,
        &learn::events(&clean_up, cpu).map_err(failed)?,
    )
    .map_err(failed)?;
    let fail_writes: Vec<FailWrite> = (SWEEP_FROM..=CPUHP_ONLINE.0)
        .zip(online_sweep.into_iter().zip(offline_sweep))
        .map(|(value, (online, offline))| FailWrite {
            value,
            online,
            offline,
        })
        .collect();
    let mut cases = Vec::new();
    for (op, pick) in [(Op::Down, true), (Op::Up, false)] {
        for w in &fail_writes {
            let accepted = if pick { w.online } else { w.offline };
            if w.value != -1 && accepted.is_ok() {
                cases.push(s.case(Case { op, fail: w.value })?);
            }
        }
    }
    let mut rec = Recording {
        kernel,
        cpu,
        nr_cpus,
        listing,
        clean_down,
        clean_up,
        callbacks: String::new(),
        fail_writes,
        cases,
    };
    rec.callbacks = learn::render_map(&learn::recording_map(&rec).map_err(failed)?);
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_the_kernel_prints_them() {
        assert_eq!(parse_cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-3"), Some(vec![0, 2, 3]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
    }

    #[test]
    fn only_exits_returning_0_are_left_out_of_case_traces() {
        let ok = "         cpuhp/1-20      [001] .....  1086.778704: cpuhp_exit:  cpu: 0001  state: 234 step: 235 ret: 0";
        assert!(is_ok_exit(ok));
        assert!(!is_ok_exit(&ok.replace("ret: 0", "ret: -11")));
        assert!(!is_ok_exit(&ok.replace("ret: 0", "ret: 0 x")));
        assert!(!is_ok_exit("     kworker/0:2-15074   [000] .....  1044.334650: cpuhp_enter: cpu: 0001 target: 144 step: 236 (cpuhp_kick_ap_work)"));
    }

    #[test]
    fn cpu0_is_refused_before_anything_is_touched() {
        match check_cpu(0) {
            Err(LiveError::Refused(why)) => {
                assert!(why.contains("root") || why.contains("CPU0"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }
}
