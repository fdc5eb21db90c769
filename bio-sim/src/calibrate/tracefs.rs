//! The kernel's tracefs (kernel/trace/trace.c, trace_events.c) as a live calibration uses it:
//! find or mount it (`mount -t tracefs nodev /sys/kernel/tracing`), enable single events
//! (`events/<system>/<event>/enable`), clear and read the `trace` buffer, `tracing_on`.
//!
//! A [`Tracefs`] session traces into its own instance (`instances/biosim-PID`, a ring buffer with
//! its own `tracing_on` and event enables, kernel/trace/trace.c `instance_mkdir()`), never into the
//! top-level buffer: a user's own tracing (its `tracing_on`, its enabled events, its buffer) is left
//! as it was. Dropping the session (or a signal) switches its events and `tracing_on` off and
//! removes the instance.

use std::io;
use std::path::{Path, PathBuf};

use crate::dev::cleanup::{Restore, RestoreAction};

/// Where tracefs is mounted on a current kernel.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// The lock file that serialises live sessions: tracefs has one ring buffer and CPU hotplug one
/// machine, so two calibrations (or two tests) at once would read each other's events.
pub const LIVE_LOCK: &str = "/run/biosim-live.lock";

/// Takes the exclusive `flock(2)` on [`LIVE_LOCK`], waiting for another session to end.
pub fn lock_live() -> io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LIVE_LOCK)
        .map_err(|e| io::Error::new(e.kind(), format!("{LIVE_LOCK}: {e}")))?;
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io::Error::other(format!(
            "flock {LIVE_LOCK}: {}",
            io::Error::last_os_error()
        )));
    }
    Ok(f)
}

/// A tracing session on the live kernel.
#[derive(Debug)]
pub struct Tracefs {
    /// The session's instance directory (`TRACEFS/instances/biosim-PID`).
    root: PathBuf,
    /// The exclusive lock on [`LIVE_LOCK`], held while the session lives.
    _lock: std::fs::File,
    /// Undone newest first when dropped: each event's `enable`, `tracing_on`, then the instance.
    restores: Vec<Restore>,
}

/// Why the live kernel cannot be used, in one line.
pub fn why_not_live() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (tracefs and CPU hotplug are root-only)".into());
    }
    None
}

impl Tracefs {
    /// Opens a session: takes [`LIVE_LOCK`], mounts tracefs at [`TRACEFS`] if it is not mounted
    /// (as root; left mounted, as the kernel's own tools leave it) and creates the session's
    /// instance, its tracing off and its buffer empty.
    pub fn open() -> io::Result<Tracefs> {
        let lock = lock_live()?;
        let top = PathBuf::from(TRACEFS);
        if !top.join("trace").exists() {
            let status = std::process::Command::new("mount")
                .args(["-t", "tracefs", "nodev", TRACEFS])
                .status()?;
            if !status.success() || !top.join("trace").exists() {
                return Err(io::Error::other(format!(
                    "tracefs is not mounted at {TRACEFS} and `mount -t tracefs nodev {TRACEFS}` failed"
                )));
            }
        }
        let root = top.join(format!("instances/biosim-{}", std::process::id()));
        // Registered before the mkdir, with signals left to the handler: a signal between the
        // two finds no directory to remove, which is harmless.
        let rmdir = Restore::register(RestoreAction::Rmdir { path: root.clone() })?;
        std::fs::create_dir(&root)
            .map_err(|e| io::Error::new(e.kind(), format!("mkdir {}: {e}", root.display())))?;
        let mut t = Tracefs {
            root,
            _lock: lock,
            restores: vec![rmdir],
        };
        t.restores.push(Restore::register(RestoreAction::Write {
            path: t.root.join("tracing_on"),
            value: "0".into(),
        })?);
        t.write("tracing_on", "0")?;
        t.clear()?;
        Ok(t)
    }

    /// The session's instance directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn write(&self, rel: &str, value: &str) -> io::Result<()> {
        let path = self.root.join(rel);
        std::fs::write(&path, value).map_err(|e| {
            io::Error::new(e.kind(), format!("echo {value} > {}: {e}", path.display()))
        })
    }

    /// Enables `system/event` (e.g. `cpuhp/cpuhp_enter`, or `cpuhp` for the whole system); it is
    /// disabled again when the session ends.
    pub fn enable(&mut self, event: &str) -> io::Result<()> {
        let rel = format!("events/{event}/enable");
        if !self.root.join(&rel).exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "this kernel has no trace event {event} ({})",
                    self.root.join(&rel).display()
                ),
            ));
        }
        self.restores.push(Restore::register(RestoreAction::Write {
            path: self.root.join(&rel),
            value: "0".into(),
        })?);
        self.write(&rel, "1")
    }

    /// The instance's ring buffer per CPU (`buffer_size_kb`); it goes with the instance.
    pub fn set_buffer_kb(&self, kb: u64) -> io::Result<()> {
        self.write("buffer_size_kb", &kb.to_string())
    }

    /// Events lost since the buffer was last cleared: the `overrun:` (overwritten) and
    /// `dropped events:` (refused, in no-overwrite mode) lines of every CPU's
    /// `per_cpu/cpuN/stats`, summed.
    pub fn overrun(&self) -> io::Result<u64> {
        let mut lost = 0;
        for e in std::fs::read_dir(self.root.join("per_cpu"))? {
            let stats = std::fs::read_to_string(e?.path().join("stats"))?;
            for key in ["overrun:", "dropped events:"] {
                lost += stats
                    .lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or_else(|| io::Error::other(format!("per_cpu stats without `{key}`")))?;
            }
        }
        Ok(lost)
    }

    /// Empties the ring buffer (`echo > trace`).
    pub fn clear(&self) -> io::Result<()> {
        self.write("trace", "")
    }

    /// `tracing_on`.
    pub fn set_on(&self, on: bool) -> io::Result<()> {
        self.write("tracing_on", if on { "1" } else { "0" })
    }

    /// The whole `trace` file (header and events).
    pub fn read(&self) -> io::Result<String> {
        std::fs::read_to_string(self.root.join("trace"))
    }

    /// The `format` file of `system/event` (the top level's: formats are the same everywhere).
    pub fn format(&self, event: &str) -> io::Result<String> {
        std::fs::read_to_string(Path::new(TRACEFS).join(format!("events/{event}/format")))
    }
}

impl Drop for Tracefs {
    fn drop(&mut self) {
        // Newest first: the events, tracing_on, then the instance itself.
        while let Some(r) = self.restores.pop() {
            drop(r);
        }
    }
}

/// The environment variable that opts a test run into touching the live kernel.
pub const LIVE_ENV: &str = "BIOSIM_LIVE_KERNEL";

/// `None` when live-kernel tests may run (`BIOSIM_LIVE_KERNEL=1`, root); else the one-line reason
/// a test prints when it skips.
pub fn live_test_skip_reason() -> Option<String> {
    if std::env::var(LIVE_ENV).as_deref() != Ok("1") {
        return Some(format!(
            "skipped: set {LIVE_ENV}=1 to run against the live kernel"
        ));
    }
    why_not_live().map(|why| format!("skipped: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_traces_in_its_own_instance_and_removes_it() {
        if let Some(why) = live_test_skip_reason() {
            eprintln!("{why}");
            return;
        }
        let top = Path::new(TRACEFS);
        let read = |p: &Path| std::fs::read_to_string(p).unwrap().trim().to_owned();
        let top_on = read(&top.join("tracing_on"));
        let top_enable = read(&top.join("events/cpuhp/cpuhp_enter/enable"));
        let inst;
        {
            let mut t = Tracefs::open().unwrap();
            inst = t.root().to_path_buf();
            t.enable("cpuhp/cpuhp_enter").unwrap();
            t.set_on(true).unwrap();
            assert_eq!(read(&inst.join("events/cpuhp/cpuhp_enter/enable")), "1");
            assert!(t.read().unwrap().starts_with("# tracer: "));
            assert!(t.enable("cpuhp/no_such_event").is_err());
            assert!(t.format("cpuhp/cpuhp_enter").unwrap().contains("print fmt"));
        }
        assert!(!inst.exists(), "{} is removed", inst.display());
        assert_eq!(
            read(&top.join("tracing_on")),
            top_on,
            "the top level is untouched"
        );
        assert_eq!(
            read(&top.join("events/cpuhp/cpuhp_enter/enable")),
            top_enable
        );
    }
}
