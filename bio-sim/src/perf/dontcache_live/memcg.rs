//! A cgroup v1 memory controller limit (mm/memcontrol-v1.c: `memory.limit_in_bytes`,
//! `memory.max_usage_in_bytes`, `cgroup.procs`) around a child process of biosim that reads or
//! writes one real file, as the seed's write experiment ran in a 244 MB memcg.
//!
//! Why a child process and not a thread: a page-cache folio is charged to the memcg of
//! `current->mm->owner` (`get_mem_cgroup_from_mm()`), the thread group's, so only a whole process
//! can be put under the limit. The child is made with `fork(2)` and does only system calls on
//! memory prepared before the fork (no allocation, no locks: another thread of the parent may
//! have held the allocator's), moves itself into the cgroup (`echo 0 > cgroup.procs`), runs the
//! job, sends a fixed-size result through a pipe and `_exit(2)`s. It ignores `SIGINT`, `SIGTERM`
//! and `SIGHUP`; `PR_SET_PDEATHSIG(SIGKILL)` ends it when biosim dies.
//!
//! Cleanup however the run ends: the cgroup's `rmdir(2)` is a [`Restore`], and so is moving the
//! child back to biosim's own cgroup (registered later, so run first), so a Ctrl-C leaves no
//! cgroup behind even while the child still runs.

use crate::dev::aligned::AlignedBuf;
use crate::dev::backing::RwFlags;
use crate::dev::cleanup::{Blocked, Restore, RestoreAction};
use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where the cgroup v1 memory controller is mounted.
pub const MEMCG_V1: &str = "/sys/fs/cgroup/memory";

/// Seconds a timed child job can report, at most.
pub const MAX_SECS: usize = 120;

/// biosim's own memory cgroup directory (from `/proc/self/cgroup`'s `memory` line), or why there
/// is none: not root, no v1 memory controller mounted.
pub fn own_memcg() -> Result<PathBuf, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (cgroup v1 memory controller)".into());
    }
    if !Path::new(MEMCG_V1).join("memory.limit_in_bytes").exists() {
        return Err(format!(
            "no cgroup v1 memory controller at {MEMCG_V1} (memory.limit_in_bytes missing)"
        ));
    }
    let text = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    for line in text.lines() {
        let mut it = line.splitn(3, ':');
        let (_, ctrl, path) = (it.next(), it.next(), it.next());
        if ctrl.is_some_and(|c| c.split(',').any(|c| c == "memory")) {
            let rel = path.unwrap_or("/").trim_start_matches('/');
            let dir = Path::new(MEMCG_V1).join(rel);
            return if dir.join("cgroup.procs").exists() {
                Ok(dir)
            } else {
                Err(format!("{}: no cgroup.procs", dir.display()))
            };
        }
    }
    Err("/proc/self/cgroup has no memory controller line".into())
}

/// A child memory cgroup with a limit, removed when dropped (or on a signal).
#[derive(Debug)]
pub struct Memcg {
    dir: PathBuf,
    parent: PathBuf,
    limit: u64,
    _rmdir: Restore,
}

fn write_attr(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("write `{value}` to {}: {e}", path.display()))
}

fn read_u64(path: &Path) -> Result<u64, String> {
    let s = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    s.trim()
        .parse()
        .map_err(|_| format!("{}: not a number: `{}`", path.display(), s.trim()))
}

impl Memcg {
    /// Creates `PARENT/biosim-dontcache-PID-N` under biosim's own memory cgroup with
    /// `memory.limit_in_bytes = limit`.
    pub fn create(limit: u64) -> Result<Memcg, String> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let parent = own_memcg()?;
        let dir = parent.join(format!(
            "biosim-dontcache-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let blocked = Blocked::new();
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let rmdir = Restore::register(RestoreAction::Rmdir { path: dir.clone() });
        drop(blocked);
        let rmdir = rmdir.map_err(|e| {
            let _ = std::fs::remove_dir(&dir);
            e.to_string()
        })?;
        let cg = Memcg {
            dir,
            parent,
            limit,
            _rmdir: rmdir,
        };
        write_attr(&cg.dir.join("memory.limit_in_bytes"), &limit.to_string())?;
        let got = read_u64(&cg.dir.join("memory.limit_in_bytes"))?;
        if got != limit {
            return Err(format!(
                "{}: memory.limit_in_bytes reads {got} after writing {limit}",
                cg.dir.display()
            ));
        }
        Ok(cg)
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// `memory.max_usage_in_bytes`: the peak charge (page cache and the child's own memory).
    pub fn max_usage(&self) -> Result<u64, String> {
        read_u64(&self.dir.join("memory.max_usage_in_bytes"))
    }

    /// `memory.usage_in_bytes`: the current charge.
    pub fn usage(&self) -> Result<u64, String> {
        read_u64(&self.dir.join("memory.usage_in_bytes"))
    }

    /// Writes a new `memory.limit_in_bytes`. Lowering it below the usage reclaims in the
    /// writer's own context (`mem_cgroup_resize_max()` → `try_to_free_mem_cgroup_pages()`)
    /// until the usage fits.
    pub fn set_limit(&mut self, limit: u64) -> Result<(), String> {
        write_attr(&self.dir.join("memory.limit_in_bytes"), &limit.to_string())?;
        self.limit = limit;
        Ok(())
    }

    /// `memory.failcnt`: how often a charge hit the limit (each one entered reclaim).
    pub fn failcnt(&self) -> Result<u64, String> {
        read_u64(&self.dir.join("memory.failcnt"))
    }
}

/// What the child does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOp {
    /// `pwritev2()` of the range, wrapping around, then `fdatasync()`.
    Write,
    /// `preadv2()` of the range, wrapping around.
    Read,
}

/// When the child stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// After this many seconds (per-second figures are kept).
    Seconds(u32),
    /// After this many bytes.
    Bytes(u64),
}

/// One child job over `[0, range)` of an open file in 1 MiB calls.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    /// Read or write.
    pub op: JobOp,
    /// `0` or [`RwFlags::DONTCACHE`].
    pub flags: RwFlags,
    /// The range's length (a multiple of 1 MiB).
    pub range: u64,
    /// When to stop.
    pub stop: Stop,
}

/// What the child measured.
#[derive(Debug, Clone, PartialEq)]
pub struct JobResult {
    /// Bytes moved in each whole second (timed jobs; empty for [`Stop::Bytes`]).
    pub per_sec: Vec<u64>,
    /// Bytes moved in total.
    pub bytes: u64,
    /// The child's system CPU time (`getrusage(RUSAGE_SELF).ru_stime`), ns.
    pub stime_ns: u64,
    /// The child's user CPU time, ns.
    pub utime_ns: u64,
    /// Wall time of the job, ns.
    pub wall_ns: u64,
    /// The child's pid (the `TASK-PID` its tracepoint lines carry).
    pub pid: u32,
}

/// The fixed-size record the child writes to the pipe.
#[repr(C)]
#[derive(Clone, Copy)]
struct ChildOut {
    /// 0, or the errno of the failed step.
    errno: i32,
    /// Which step failed (1 cgroup open, 2 cgroup write, 3 I/O, 4 fdatasync).
    step: i32,
    secs: u64,
    bytes: u64,
    stime_ns: u64,
    utime_ns: u64,
    wall_ns: u64,
    per_sec: [u64; MAX_SECS],
}

fn now_ns() -> u64 {
    // SAFETY: all-zero is a valid timespec.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn tv_ns(tv: libc::timeval) -> u64 {
    tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000
}

/// The child's body: system calls only, on memory prepared before the fork.
///
/// # Safety
/// Runs in a freshly forked child; `procs` is a NUL-terminated path, `buf` valid for `len` bytes.
unsafe fn child_body(
    procs: Option<&CString>,
    fd: libc::c_int,
    job: Job,
    buf: *mut u8,
    len: usize,
) -> ChildOut {
    // SAFETY: the caller's contract; every call below is a plain system call.
    unsafe {
        let mut out: ChildOut = std::mem::zeroed();
        if let Some(p) = procs {
            let cfd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if cfd < 0 {
                out.errno = *libc::__errno_location();
                out.step = 1;
                return out;
            }
            let ok = libc::write(cfd, b"0".as_ptr().cast(), 1) == 1;
            if !ok {
                out.errno = *libc::__errno_location();
                out.step = 2;
            }
            libc::close(cfd);
            if !ok {
                return out;
            }
        }
        let t0 = now_ns();
        let mut pos: u64 = 0;
        let mut total: u64 = 0;
        loop {
            let elapsed = now_ns() - t0;
            match job.stop {
                Stop::Seconds(s) if elapsed >= u64::from(s) * 1_000_000_000 => break,
                Stop::Bytes(b) if total >= b => break,
                _ => {}
            }
            if pos >= job.range {
                pos = 0;
            }
            let n = (job.range - pos).min(len as u64) as usize;
            let iov = libc::iovec {
                iov_base: buf.cast(),
                iov_len: n,
            };
            let flags = job.flags.bits() as libc::c_int;
            let r = match job.op {
                JobOp::Write => libc::pwritev2(fd, &iov, 1, pos as libc::off_t, flags),
                JobOp::Read => libc::preadv2(fd, &iov, 1, pos as libc::off_t, flags),
            };
            if r < 0 {
                let e = *libc::__errno_location();
                if e == libc::EINTR {
                    continue;
                }
                out.errno = e;
                out.step = 3;
                return out;
            }
            if r == 0 {
                pos = job.range; // end of file: wrap
                continue;
            }
            pos += r as u64;
            total += r as u64;
            let sec = ((now_ns() - t0) / 1_000_000_000) as usize;
            if let Some(slot) = out.per_sec.get_mut(sec) {
                *slot += r as u64;
            }
        }
        let mut secs = (now_ns() - t0) / 1_000_000_000;
        if job.op == JobOp::Write && libc::fdatasync(fd) != 0 {
            out.errno = *libc::__errno_location();
            out.step = 4;
            return out;
        }
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        if let Stop::Seconds(s) = job.stop {
            secs = secs.min(u64::from(s));
        } else {
            secs = 0;
        }
        out.secs = secs.min(MAX_SECS as u64);
        out.bytes = total;
        out.stime_ns = tv_ns(ru.ru_stime);
        out.utime_ns = tv_ns(ru.ru_utime);
        out.wall_ns = now_ns() - t0;
        out
    }
}

/// Runs `job` on `file` in a child process, inside `memcg` when given (else in biosim's own
/// cgroup, for the comparison run), and waits for it.
pub fn run_in_child(
    memcg: Option<&Memcg>,
    file: &std::fs::File,
    job: Job,
) -> Result<JobResult, String> {
    if let Stop::Seconds(s) = job.stop {
        if s == 0 || s as usize > MAX_SECS {
            return Err(format!("a timed job runs 1..={MAX_SECS} seconds, not {s}"));
        }
    }
    let procs = memcg
        .map(|m| CString::new(m.dir.join("cgroup.procs").as_os_str().as_bytes()))
        .transpose()
        .map_err(|_| "a cgroup path with a NUL byte".to_string())?;
    // Page-aligned, as an application's I/O buffer is: a misaligned buffer makes the kernel's
    // copy several times slower here (measured: 2,200 vs 480 ns per cached page).
    let mut buf = AlignedBuf::new(1 << 20);
    buf.fill(0x5a);
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills the two fds we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe2: {}", std::io::Error::last_os_error()));
    }
    let (rfd, wfd) = (fds[0], fds[1]);
    // SAFETY: getpid has no preconditions.
    let ppid = unsafe { libc::getpid() };
    let blocked = Blocked::new();
    // SAFETY: the child runs only `child_body` (system calls on memory made above) and _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the child: ignore the signals the parent handles (the parent's handler
        // must not run here; and a terminal's Ctrl-C, sent to the whole process group, must not
        // end the child before the parent's handler moved it out of the cgroup, or the rmdir
        // could find it still exiting there), die with the parent (PR_SET_PDEATHSIG), unblock,
        // run, report, exit without running anything of the parent's.
        unsafe {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_IGN);
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != ppid {
                libc::_exit(1);
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            libc::close(rfd);
            let out = child_body(
                procs.as_ref(),
                file.as_raw_fd(),
                job,
                buf.as_mut_ptr(),
                1 << 20,
            );
            let size = std::mem::size_of::<ChildOut>();
            let p = (&out as *const ChildOut).cast::<u8>();
            let mut off = 0;
            while off < size {
                let r = libc::write(wfd, p.add(off).cast(), size - off);
                if r <= 0 {
                    break;
                }
                off += r as usize;
            }
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(wfd) };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        drop(blocked);
        // SAFETY: closing the read end we own.
        unsafe { libc::close(rfd) };
        return Err(format!("fork: {e}"));
    }
    // Moves the child back to biosim's cgroup if we are interrupted, so the rmdir can succeed.
    let move_back = memcg.map(|m| {
        Restore::register(RestoreAction::Write {
            path: m.parent.join("cgroup.procs"),
            value: pid.to_string(),
        })
    });
    drop(blocked);
    let mut raw = [0u8; std::mem::size_of::<ChildOut>()];
    let mut got = 0;
    while got < raw.len() {
        // SAFETY: reading into the part of `raw` not yet filled.
        let r = unsafe { libc::read(rfd, raw[got..].as_mut_ptr().cast(), raw.len() - got) };
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if r <= 0 {
            break;
        }
        got += r as usize;
    }
    // SAFETY: closing the read end we own.
    unsafe { libc::close(rfd) };
    // Before the child is reaped (its pid cannot be reused while it is a zombie).
    drop(move_back);
    let mut status = 0;
    // SAFETY: waiting for our own child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    if got < raw.len() {
        return Err(format!(
            "the child process ended without a result (wait status {status:#x})"
        ));
    }
    // SAFETY: `raw` holds a whole ChildOut written by the child (plain integers).
    let out: ChildOut = unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) };
    if out.errno != 0 {
        let step = match out.step {
            1 => "open cgroup.procs",
            2 => "write 0 to cgroup.procs",
            3 => "the I/O",
            _ => "fdatasync",
        };
        return Err(format!(
            "child process: {step}: {}",
            std::io::Error::from_raw_os_error(out.errno)
        ));
    }
    Ok(JobResult {
        per_sec: out.per_sec[..out.secs as usize].to_vec(),
        bytes: out.bytes,
        stime_ns: out.stime_ns,
        utime_ns: out.utime_ns,
        wall_ns: out.wall_ns,
        pid: pid as u32,
    })
}
