//! Temporary files that are removed however the process ends: normally (the guard's `Drop`), on
//! an error or a panic that unwinds (`Drop` again), and on `SIGINT` (Ctrl-C), `SIGTERM` or
//! `SIGHUP`, where a signal handler installed with `sigaction(2)` unlinks every registered path,
//! resets the signal's disposition to `SIG_DFL` and re-raises it with `raise(3)`, so the process
//! dies of that signal and its parent sees `WIFSIGNALED` (a shell reports 130 for Ctrl-C, 143
//! for `kill`; a `while` loop in bash stops on Ctrl-C, which it would not for a plain
//! `exit(130)`). A signal the process inherited as ignored (`SIG_IGN`, e.g. `SIGHUP` under
//! `nohup`) is left ignored: the handler is installed only where the old action (read with
//! `sigaction(sig, NULL, &old)`) is not `SIG_IGN`.
//!
//! The handler does only async-signal-safe things: it reads a fixed table of pointers to
//! NUL-terminated paths (made before registration, never freed while registered), calls
//! `unlink(2)` on each, then `sigaction(2)` and `raise(3)`. A path's string is leaked when its
//! guard drops (a few bytes per temporary file), so a handler running on another thread at that
//! moment never reads freed memory.
//!
//! The same handler first undoes what a live-kernel run changed ([`Restore`]): it writes a value to
//! a sysfs/tracefs file (`1` to `cpuN/online`, `-1` to `cpuN/hotplug/fail`, `0` to `tracing_on`),
//! detaches a loop device (`ioctl(LOOP_CLR_FD)`), removes a tracefs instance or a cgroup
//! (`rmdir(2)`) or unmounts a file system (`umount2(2)`), newest first, with `open(2)`, `write(2)`,
//! `ioctl(2)`, `rmdir(2)`, `umount2(2)` and `close(2)` only. A [`Restore`] also runs its action when it drops, so an error or
//! an unwinding panic restores the machine too.
//!
//! [`TempFile::create_in`] registers a name *before* it creates the file with `O_CREAT|O_EXCL`
//! (never someone else's file), so there is no moment at which the file exists unregistered,
//! whichever thread the signal is delivered to: a process-directed signal goes to any thread that
//! does not block it (signal(7)), and the simulator's threads exist when per-job scratch files and
//! outputs are made, so blocking signals on the creating thread alone would not close that window.
//! A signal between registration and creation unlinks a name that does not exist yet, which is
//! harmless. Before registering, the name is checked to be absent (`lstat(2)`); it carries our pid
//! and a per-process counter, so it can exist only as a stale file of a dead process that had our
//! pid. If `O_EXCL` then still finds it (such a file appeared in the few instructions between),
//! the name is unregistered and the next one tried; only a signal in that instant could unlink it.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Once;

/// How many temporary files can be registered at once.
const SLOTS: usize = 32;

/// The registered paths: null or a leaked `CString`.
static PATHS: [AtomicPtr<libc::c_char>; SLOTS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];

/// The signals that remove the registered files and end the process.
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

static INSTALL: Once = Once::new();

/// The `sigaction` handler: unlink every registered path, then reset `signo` to `SIG_DFL` and
/// `raise()` it, so the process ends killed by it (it is delivered when the handler returns and
/// the signal mask is restored).
extern "C" fn on_signal(signo: libc::c_int) {
    run_restores();
    for slot in &PATHS {
        let p = slot.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: a registered pointer is a leaked, NUL-terminated CString, never freed.
            unsafe {
                libc::unlink(p);
            }
        }
    }
    // SAFETY: sigaction and raise are async-signal-safe; a zeroed sigaction with SIG_DFL and an
    // empty mask is valid.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(signo, &sa, std::ptr::null_mut());
        libc::raise(signo);
    }
}

/// Installs the handler for [`SIGNALS`] once per process, except for a signal inherited as
/// ignored (`SIG_IGN`), which stays ignored.
fn install() {
    INSTALL.call_once(|| {
        for sig in SIGNALS {
            // SAFETY: sigaction with a null new action only reads the old one; a zeroed
            // sigaction with a plain handler and an empty mask is valid; the handler only calls
            // async-signal-safe functions.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                    && old.sa_sigaction == libc::SIG_IGN
                {
                    continue;
                }
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    });
}

/// What a [`Restore`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreAction {
    /// Write `value` to the file `path` (opened `O_WRONLY`, no create, no truncate: a sysfs or
    /// tracefs attribute).
    Write {
        /// The attribute.
        path: PathBuf,
        /// What to write (e.g. `"1"`, `"-1"`).
        value: String,
    },
    /// `ioctl(LOOP_CLR_FD)` on the loop device `path` (drivers/block/loop.c `loop_clr_fd()`).
    LoopClrFd {
        /// `/dev/loopN`.
        path: PathBuf,
    },
    /// `rmdir(2)` of `path`: a tracefs instance (`instances/NAME`), which takes its ring buffer
    /// and its event enables with it (kernel/trace/trace.c `instance_rmdir()`).
    Rmdir {
        /// The directory.
        path: PathBuf,
    },
    /// `umount2(path, MNT_DETACH)`: a file system a live run mounted (fs/namespace.c
    /// `do_umount()`; lazy, so a busy mount is still detached from the tree at once).
    Umount {
        /// The mount point.
        path: PathBuf,
    },
}

/// Publishes `raw` in the first free (null) slot of `table`; its index, or `None` if all are taken.
fn claim_slot<T>(table: &[AtomicPtr<T>], raw: *mut T) -> Option<usize> {
    table.iter().position(|slot| {
        slot.compare_exchange(
            std::ptr::null_mut(),
            raw,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_ok()
    })
}

/// `LOOP_CLR_FD` from include/uapi/linux/loop.h.
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;

/// A registered action as the handler reads it: NUL-terminated strings, never freed.
struct RawRestore {
    /// Registration order: the handler runs the newest first.
    seq: u64,
    path: *mut libc::c_char,
    /// The bytes to write, or null for `LOOP_CLR_FD`, `rmdir` and `umount2`.
    value: *mut libc::c_char,
    /// `rmdir(path)` instead of opening it.
    rmdir: bool,
    /// `umount2(path, MNT_DETACH)` instead of opening it.
    umount: bool,
}

static RESTORES: [AtomicPtr<RawRestore>; SLOTS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];
static RESTORE_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Performs one raw action with async-signal-safe calls only; returns whether it succeeded.
///
/// # Safety
/// `r` points to a live `RawRestore` whose strings are NUL-terminated.
unsafe fn perform(r: *const RawRestore) -> bool {
    // SAFETY: the caller's contract; open/ioctl/strlen/write/close are async-signal-safe.
    unsafe {
        let r = &*r;
        if r.rmdir {
            return libc::rmdir(r.path) == 0;
        }
        if r.umount {
            return libc::umount2(r.path, libc::MNT_DETACH) == 0;
        }
        let fd = libc::open(r.path, libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let ok = if r.value.is_null() {
            libc::ioctl(fd, LOOP_CLR_FD as _, 0) == 0
        } else {
            let len = libc::strlen(r.value);
            libc::write(fd, r.value.cast(), len) == len as isize
        };
        libc::close(fd);
        ok
    }
}

/// Runs every registered restore, newest first (from the signal handler).
fn run_restores() {
    let mut done = 0u64;
    loop {
        // The registered action with the highest sequence number not above the last one run.
        let mut best: Option<&AtomicPtr<RawRestore>> = None;
        let mut best_seq = 0;
        for slot in &RESTORES {
            let p = slot.load(Ordering::Acquire);
            // SAFETY: a registered pointer is a leaked RawRestore, never freed.
            let seq = if p.is_null() { 0 } else { unsafe { (*p).seq } };
            if seq > best_seq && (done == 0 || seq < done) {
                best_seq = seq;
                best = Some(slot);
            }
        }
        let Some(slot) = best else { return };
        done = best_seq;
        let p = slot.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: as above.
            unsafe {
                perform(p);
            }
        }
    }
}

/// Something a live-kernel run must undo however the process ends: performed when the guard
/// drops (normal end, error, unwinding panic) and by the `SIGINT`/`SIGTERM`/`SIGHUP` handler.
#[derive(Debug)]
pub struct Restore {
    action: RestoreAction,
    slot: usize,
    raw: *mut RawRestore,
}

// SAFETY: `raw` is only read (by the handler and by `perform`), never mutated after registration.
unsafe impl Send for Restore {}

impl Restore {
    /// Registers `action`. Errors if the path or value has a NUL byte or every slot is taken.
    pub fn register(action: RestoreAction) -> io::Result<Restore> {
        install();
        let (path, value) = match &action {
            RestoreAction::Write { path, value } => (path, Some(value.as_str())),
            RestoreAction::LoopClrFd { path }
            | RestoreAction::Rmdir { path }
            | RestoreAction::Umount { path } => (path, None),
        };
        let rmdir = matches!(action, RestoreAction::Rmdir { .. });
        let umount = matches!(action, RestoreAction::Umount { .. });
        let nul = |what: &str| io::Error::other(format!("{what} with a NUL byte: {action:?}"));
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| nul("a path"))?;
        let c_value = match value {
            Some(v) => CString::new(v).map_err(|_| nul("a value"))?.into_raw(),
            None => std::ptr::null_mut(),
        };
        let raw = Box::into_raw(Box::new(RawRestore {
            seq: RESTORE_SEQ.fetch_add(1, Ordering::Relaxed),
            path: c_path.into_raw(),
            value: c_value,
            rmdir,
            umount,
        }));
        if let Some(i) = claim_slot(&RESTORES, raw) {
            return Ok(Restore {
                action,
                slot: i,
                raw,
            });
        }
        Err(io::Error::other(format!(
            "too many restore actions registered at once: {action:?}"
        )))
    }

    /// What it does.
    pub fn action(&self) -> &RestoreAction {
        &self.action
    }

    /// Performs the action now (it stays registered until the guard drops). Errors name it.
    pub fn run(&self) -> io::Result<()> {
        // SAFETY: `raw` is this guard's live, registered action.
        if unsafe { perform(self.raw) } {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "could not restore {:?}: {}",
                self.action,
                io::Error::last_os_error()
            )))
        }
    }
}

impl Restore {
    /// Unregisters the action without performing it: for a caller that has undone the change
    /// itself in a way only it can do safely (a loop device detached through the caller's own
    /// open descriptor, where opening `/dev/loopN` again could reach a device someone else
    /// attached meanwhile).
    pub fn disarm(self) {
        let _blocked = Blocked::new();
        RESTORES[self.slot].store(std::ptr::null_mut(), Ordering::Release);
        std::mem::forget(self);
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        let _blocked = Blocked::new();
        let _ = self.run();
        // Leaked on purpose, as the temp-file paths are (see the module docs).
        RESTORES[self.slot].store(std::ptr::null_mut(), Ordering::Release);
    }
}

/// Blocks [`SIGNALS`] on this thread until dropped (a signal that arrives meanwhile is delivered
/// when they are unblocked).
pub(crate) struct Blocked(libc::sigset_t);

impl Blocked {
    pub(crate) fn new() -> Self {
        // SAFETY: plain sigset manipulation on owned values.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in SIGNALS {
                libc::sigaddset(&mut set, sig);
            }
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            Blocked(old)
        }
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `new`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut());
        }
    }
}

/// A temporary file, removed when this guard drops or when the process gets `SIGINT`, `SIGTERM`
/// or `SIGHUP` (see the module docs).
#[derive(Debug)]
pub struct TempFile {
    path: PathBuf,
    slot: usize,
}

impl TempFile {
    /// Creates a new empty file `DIR/PREFIX-PID-N.img` with `O_EXCL` and registers it for
    /// removal. `N` counts up for the whole process, so a name is never reused within it (a
    /// caller may check its file is gone after the guard dropped, while another thread makes
    /// one). Errors name the directory.
    pub fn create_in(dir: &Path, prefix: &str) -> io::Result<TempFile> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        install();
        let pid = std::process::id();
        for _ in 0..1000u32 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("{prefix}-{pid}-{n}.img"));
            if path.symlink_metadata().is_ok() {
                continue; // a stale file of a dead process with our pid: not ours to register
            }
            // Registered first (see the module docs): a signal from here on removes the file.
            let slot = Self::register(&path)?;
            match File::options().write(true).create_new(true).open(&path) {
                Ok(_) => return Ok(TempFile { path, slot }),
                Err(e) => {
                    // Not created by us: unregister without unlinking.
                    PATHS[slot].store(std::ptr::null_mut(), Ordering::Release);
                    if e.kind() == io::ErrorKind::AlreadyExists {
                        continue;
                    }
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot create a temporary file in {}: {e}", dir.display()),
                    ));
                }
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "no free temporary file name {prefix}-{pid}-N.img in {}",
                dir.display()
            ),
        ))
    }

    /// Publishes `path` for the signal handler; its slot. The string is leaked (never freed:
    /// see the module docs), also when the caller unregisters it again.
    fn register(path: &Path) -> io::Result<usize> {
        let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
            return Err(io::Error::other(format!(
                "{}: a temporary path with a NUL byte",
                path.display()
            )));
        };
        let raw = c.into_raw();
        if let Some(i) = claim_slot(&PATHS, raw) {
            return Ok(i);
        }
        // SAFETY: `raw` came from into_raw above and was never published.
        drop(unsafe { CString::from_raw(raw) });
        Err(io::Error::other(format!(
            "{}: too many temporary files registered at once",
            path.display()
        )))
    }

    /// Whether `path` is registered for removal by the signal handler (for tests).
    #[cfg(test)]
    fn is_registered(path: &Path) -> bool {
        let want = path.as_os_str().as_bytes();
        PATHS.iter().any(|slot| {
            let p = slot.load(Ordering::Acquire);
            // SAFETY: a registered pointer is a leaked, NUL-terminated CString, never freed.
            !p.is_null() && unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes() == want
        })
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        // Removed before it is unregistered: a signal in between unlinks a name that is gone.
        let _ = std::fs::remove_file(&self.path);
        // The string is leaked on purpose (see the module docs).
        PATHS[self.slot].store(std::ptr::null_mut(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::{Restore, RestoreAction, TempFile};

    #[test]
    fn a_restore_writes_its_value_on_drop_and_on_run() {
        let dir = tempfile::tempdir().unwrap();
        let attr = dir.path().join("online");
        std::fs::write(&attr, "0").unwrap();
        let r = Restore::register(RestoreAction::Write {
            path: attr.clone(),
            value: "1".into(),
        })
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(&attr).unwrap(),
            "0",
            "nothing before run/drop"
        );
        r.run().unwrap();
        assert_eq!(std::fs::read_to_string(&attr).unwrap(), "1");
        std::fs::write(&attr, "0").unwrap();
        drop(r);
        assert_eq!(std::fs::read_to_string(&attr).unwrap(), "1");
        let gone = Restore::register(RestoreAction::Write {
            path: dir.path().join("missing"),
            value: "1".into(),
        })
        .unwrap();
        let e = gone.run().unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        let inst = dir.path().join("instance");
        std::fs::create_dir(&inst).unwrap();
        drop(Restore::register(RestoreAction::Rmdir { path: inst.clone() }).unwrap());
        assert!(!inst.exists(), "the directory is removed on drop");
        std::fs::write(&attr, "0").unwrap();
        Restore::register(RestoreAction::Write {
            path: attr.clone(),
            value: "1".into(),
        })
        .unwrap()
        .disarm();
        assert_eq!(
            std::fs::read_to_string(&attr).unwrap(),
            "0",
            "a disarmed restore does nothing"
        );
    }

    #[test]
    fn an_umount_of_a_directory_that_is_no_mount_point_fails_naming_it() {
        // umount2() of a plain directory changes nothing (EINVAL as root, EPERM otherwise): the
        // action runs, reports the failure with its path, and the directory stays.
        let dir = tempfile::tempdir().unwrap();
        let r = Restore::register(RestoreAction::Umount {
            path: dir.path().to_owned(),
        })
        .unwrap();
        let e = r.run().unwrap_err();
        assert!(e.to_string().contains("Umount"), "{e}");
        assert!(
            e.to_string().contains(&dir.path().display().to_string()),
            "{e}"
        );
        drop(r);
        assert!(dir.path().is_dir());
    }

    #[test]
    fn a_temp_file_is_created_new_and_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let a = TempFile::create_in(dir.path(), "t").unwrap();
        let b = TempFile::create_in(dir.path(), "t").unwrap();
        assert_ne!(a.path(), b.path(), "O_EXCL picks the next free name");
        assert!(a.path().exists() && b.path().exists());
        let pa = a.path().to_path_buf();
        drop(a);
        assert!(!pa.exists());
        assert!(b.path().exists());
        drop(b);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_temp_file_is_registered_while_it_exists_and_a_stale_name_is_skipped_unregistered() {
        let dir = tempfile::tempdir().unwrap();
        let a = TempFile::create_in(dir.path(), "s").unwrap();
        assert!(TempFile::is_registered(a.path()));
        // A stale file with the next names (a dead process with our pid): skipped, not ours.
        let pid = std::process::id();
        let n: u32 = a
            .path()
            .to_str()
            .unwrap()
            .rsplit('-')
            .next()
            .unwrap()
            .trim_end_matches(".img")
            .parse()
            .unwrap();
        let stale: Vec<_> = (1..=3)
            .map(|k| dir.path().join(format!("s-{pid}-{}.img", n + k)))
            .collect();
        for p in &stale {
            std::fs::write(p, "theirs").unwrap();
        }
        let b = TempFile::create_in(dir.path(), "s").unwrap();
        assert!(!stale.contains(&b.path().to_path_buf()), "{:?}", b.path());
        for p in &stale {
            assert!(!TempFile::is_registered(p), "{p:?} is not ours");
            assert_eq!(std::fs::read_to_string(p).unwrap(), "theirs");
        }
        let pa = a.path().to_path_buf();
        drop(a);
        assert!(!TempFile::is_registered(&pa) && !pa.exists());
        drop(b);
    }

    #[test]
    fn an_unusable_directory_is_an_error_naming_it() {
        let e = TempFile::create_in(std::path::Path::new("/nonexistent/dir"), "t").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/dir"), "{e}");
    }
}
