//! A calibration kept in a directory (`--record DIR`), so `--replay DIR` can check the model
//! against it on any machine, without root. Text files only:
//!
//! | file | what |
//! |---|---|
//! | `machine.txt` | `kernel=` (`uname -r`), `cpu=` (the CPU plugged), `cpus=` (possible CPUs) |
//! | `states.txt` | `/sys/devices/system/cpu/hotplug/states`, verbatim |
//! | `clean-down.trace`, `clean-up.trace` | the cpuhp events of a clean offline and online |
//! | `callbacks.txt` | the callback map learned from them (`STEP startup/teardown FUNCTION [multi xN]`), for the reader; a replay checks it |
//! | `fail-writes.txt` | `fail=V online=R offline=R`: what writing V to `hotplug/fail` returned (0 or -errno) with the CPU online and offline |
//! | `cases.txt` | one line per case: `OP fail=V write=R ret=R state= target= fail= online= mask=` |
//! | `cases/OP-fail-V.trace` | the cpuhp events of that case |
//!
//! Trace files hold the event lines of tracefs `trace` (no header), exactly as the kernel printed
//! them.

use std::fmt::Write as _;
use std::path::Path;

use hotplug::Errno;

use super::{Case, Observed, Op, WriteResult};

/// What `fail_store()` answered to one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailWrite {
    /// The value written.
    pub value: i32,
    /// With the CPU online.
    pub online: WriteResult,
    /// With the CPU offline.
    pub offline: WriteResult,
}

/// One recorded case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCase {
    /// The case.
    pub case: Case,
    /// Its outcome.
    pub observed: Observed,
    /// Its cpuhp event lines.
    pub trace: String,
}

/// A whole recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recording {
    /// `uname -r` of the live kernel.
    pub kernel: String,
    /// The CPU plugged.
    pub cpu: u32,
    /// Possible CPUs of the machine.
    pub nr_cpus: u32,
    /// The `states` listing.
    pub listing: String,
    /// The clean offline's cpuhp events.
    pub clean_down: String,
    /// The clean online's cpuhp events.
    pub clean_up: String,
    /// The learned callback map as [`super::learn::render_map`] writes it.
    pub callbacks: String,
    /// Every `fail` value written, online and offline.
    pub fail_writes: Vec<FailWrite>,
    /// The cases, in the order they ran.
    pub cases: Vec<RecordedCase>,
}

/// `0` or the negative errno.
pub fn ret_str(r: &WriteResult) -> String {
    match r {
        Ok(()) => "0".into(),
        Err(e) => e.as_neg_i32().to_string(),
    }
}

fn parse_ret(s: &str) -> Option<WriteResult> {
    let n: i32 = s.parse().ok()?;
    if n == 0 {
        return Some(Ok(()));
    }
    if n > 0 {
        return None;
    }
    Errno::from_i32(n).map(Err)
}

fn bool_str(b: bool) -> &'static str {
    if b {
        "1"
    } else {
        "0"
    }
}

fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// The trace file of a case.
pub fn case_file(case: &Case) -> String {
    format!("cases/{}-fail-{}.trace", case.op.name(), case.fail)
}

/// `key=value` words of a line, which must be exactly `keys` in order.
fn kv<'a>(line: &'a str, keys: &[&str]) -> Option<Vec<&'a str>> {
    let words: Vec<&str> = line.split_whitespace().collect();
    if words.len() != keys.len() {
        return None;
    }
    words
        .iter()
        .zip(keys)
        .map(|(w, k)| w.strip_prefix(k)?.strip_prefix('='))
        .collect()
}

impl Recording {
    /// Writes the recording into `dir` (created; files already there are overwritten).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let io = |p: &Path, e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("{}: {e}", p.display()))
        };
        let cases = dir.join("cases");
        std::fs::create_dir_all(&cases).map_err(|e| io(&cases, e))?;
        let put = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(|e| io(&p, e))
        };
        put(
            "machine.txt",
            &format!(
                "kernel={}\ncpu={}\ncpus={}\n",
                self.kernel, self.cpu, self.nr_cpus
            ),
        )?;
        put("states.txt", &self.listing)?;
        put("clean-down.trace", &self.clean_down)?;
        put("clean-up.trace", &self.clean_up)?;
        put("callbacks.txt", &self.callbacks)?;
        let mut fw = String::new();
        for w in &self.fail_writes {
            let _ = writeln!(
                fw,
                "fail={} online={} offline={}",
                w.value,
                ret_str(&w.online),
                ret_str(&w.offline)
            );
        }
        put("fail-writes.txt", &fw)?;
        let mut cs = String::new();
        for c in &self.cases {
            let o = &c.observed;
            let _ = writeln!(
                cs,
                "{} fail={} write={} ret={} state={} target={} fail={} online={} mask={}",
                c.case.op.name(),
                c.case.fail,
                ret_str(&o.fail_write),
                ret_str(&o.ret),
                o.state,
                o.target,
                o.fail,
                bool_str(o.online),
                bool_str(o.in_mask)
            );
            put(&case_file(&c.case), &c.trace)?;
        }
        put("cases.txt", &cs)
    }

    /// Reads a recording from `dir`. Errors name the file and line.
    pub fn read(dir: &Path) -> Result<Recording, String> {
        let get = |name: &str| {
            let p = dir.join(name);
            std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
        };
        let at = |name: &str, i: usize, what: &str| {
            format!("{}:{}: {what}", dir.join(name).display(), i + 1)
        };
        let machine = get("machine.txt")?;
        let lines: Vec<&str> = machine.lines().collect();
        let val = |i: usize, key: &str| {
            lines
                .get(i)
                .and_then(|l| l.strip_prefix(key)?.strip_prefix('='))
                .ok_or_else(|| at("machine.txt", i, &format!("expected `{key}=...`")))
        };
        let kernel = val(0, "kernel")?.to_owned();
        let cpu = val(1, "cpu")?
            .parse()
            .map_err(|_| at("machine.txt", 1, "cpu= is not a number"))?;
        let nr_cpus = val(2, "cpus")?
            .parse()
            .map_err(|_| at("machine.txt", 2, "cpus= is not a number"))?;
        if lines.len() != 3 {
            return Err(at("machine.txt", 3, "unexpected line"));
        }
        let mut fail_writes = Vec::new();
        let fw = get("fail-writes.txt")?;
        for (i, line) in fw.lines().enumerate() {
            let bad = || at("fail-writes.txt", i, "expected `fail=V online=R offline=R`");
            let v = kv(line, &["fail", "online", "offline"]).ok_or_else(bad)?;
            fail_writes.push(FailWrite {
                value: v[0].parse().map_err(|_| bad())?,
                online: parse_ret(v[1]).ok_or_else(bad)?,
                offline: parse_ret(v[2]).ok_or_else(bad)?,
            });
        }
        let mut cases = Vec::new();
        let cs = get("cases.txt")?;
        for (i, line) in cs.lines().enumerate() {
            let bad = || {
                at(
                    "cases.txt",
                    i,
                    "expected `OP fail=V write=R ret=R state=S target=T fail=F online=0|1 mask=0|1`",
                )
            };
            let (op, rest) = line.split_once(' ').ok_or_else(bad)?;
            let op = Op::parse(op).ok_or_else(bad)?;
            let v = kv(
                rest,
                &[
                    "fail", "write", "ret", "state", "target", "fail", "online", "mask",
                ],
            )
            .ok_or_else(bad)?;
            let int = |s: &str| s.parse::<i32>().map_err(|_| bad());
            let case = Case {
                op,
                fail: int(v[0])?,
            };
            let observed = Observed {
                fail_write: parse_ret(v[1]).ok_or_else(bad)?,
                ret: parse_ret(v[2]).ok_or_else(bad)?,
                state: int(v[3])?,
                target: int(v[4])?,
                fail: int(v[5])?,
                online: parse_bool(v[6]).ok_or_else(bad)?,
                in_mask: parse_bool(v[7]).ok_or_else(bad)?,
            };
            let trace = get(&case_file(&case))?;
            cases.push(RecordedCase {
                case,
                observed,
                trace,
            });
        }
        Ok(Recording {
            kernel,
            cpu,
            nr_cpus,
            listing: get("states.txt")?,
            clean_down: get("clean-down.trace")?,
            clean_up: get("clean-up.trace")?,
            callbacks: get("callbacks.txt")?,
            fail_writes,
            cases,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_reads_back_as_written_and_bad_lines_name_their_place() {
        let rec = Recording {
            kernel: "6.18.44-fc".into(),
            cpu: 1,
            nr_cpus: 2,
            listing: "  0: offline\n".into(),
            clean_down: "a\n".into(),
            clean_up: "b\n".into(),
            callbacks: " 83 startup cpuhp_bringup_ap\n".into(),
            fail_writes: vec![FailWrite {
                value: -2,
                online: Err(Errno::EINVAL),
                offline: Ok(()),
            }],
            cases: vec![RecordedCase {
                case: Case {
                    op: Op::Down,
                    fail: 187,
                },
                observed: Observed {
                    fail_write: Ok(()),
                    ret: Err(Errno::EAGAIN),
                    state: 236,
                    target: 236,
                    fail: -1,
                    online: true,
                    in_mask: true,
                },
                trace: "t\n".into(),
            }],
        };
        let dir = tempfile::tempdir().unwrap();
        rec.write(dir.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("cases.txt")).unwrap(),
            "down fail=187 write=0 ret=-11 state=236 target=236 fail=-1 online=1 mask=1\n"
        );
        assert_eq!(Recording::read(dir.path()).unwrap(), rec);
        std::fs::write(dir.path().join("cases.txt"), "sideways fail=1\n").unwrap();
        let e = Recording::read(dir.path()).unwrap_err();
        assert!(e.ends_with("cases.txt:1: expected `OP fail=V write=R ret=R state=S target=T fail=F online=0|1 mask=0|1`"), "{e}");
        std::fs::write(
            dir.path().join("fail-writes.txt"),
            "fail=3 online=7 offline=0\n",
        )
        .unwrap();
        let e = Recording::read(dir.path()).unwrap_err();
        assert!(e.contains("fail-writes.txt:1:"), "{e}");
    }
}
