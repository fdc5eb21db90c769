//! A real loop device of the running kernel (drivers/block/loop.c) over a file: the anchor a
//! storage engineer compares biosim's loop model with. Attached the way `losetup --direct-io=on`
//! does it, but in one ioctl: `LOOP_CTL_GET_FREE` on `/dev/loop-control` names a free device,
//! `LOOP_CONFIGURE` (include/uapi/linux/loop.h, `struct loop_config`) binds the backing file with
//! its flags and block size at once, so no request ever runs with other flags.
//!
//! Nothing is left attached however the process ends:
//! - `LO_FLAGS_AUTOCLEAR` makes the kernel detach the device at its last close (`lo_release()`),
//!   so even a `SIGKILL`, which no handler sees, leaves nothing once the process's descriptors
//!   close;
//! - a [`Restore`] with `LOOP_CLR_FD` runs from the `SIGINT`/`SIGTERM`/`SIGHUP` handler
//!   ([`crate::dev::cleanup`]) while the process still holds the device open, so the device is
//!   still ours when the handler names it;
//! - [`Drop`] issues `LOOP_CLR_FD` on the guard's own open descriptor and then closes it
//!   (`loop_clr_fd()` marks the device `Lo_rundown`, which also keeps new openers out, and the
//!   last close tears it down), and disarms the restore: opening `/dev/loopN` by name after our
//!   close could reach a device someone else attached meanwhile.
//!
//! Whether the kernel really runs the device with direct I/O is read back from
//! `/sys/block/loopN/loop/dio`: `loop_configure()` drops `LO_FLAGS_DIRECT_IO` without an error
//! when the backing file cannot do it (`lo_can_use_dio()`).

use crate::dev::cleanup::{Blocked, Restore, RestoreAction};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `LOOP_CTL_GET_FREE` (include/uapi/linux/loop.h): the number of a free loop device, created
/// if none is free (`loop_control_get_free()`).
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
/// `LOOP_CONFIGURE`: bind a backing fd with a `struct loop_config` in one call (Linux 5.8+).
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
/// `LOOP_CLR_FD`: unbind the backing file (`loop_clr_fd()`).
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
/// `LO_FLAGS_AUTOCLEAR`: detach at the last close.
pub const LO_FLAGS_AUTOCLEAR: u32 = 4;
/// `LO_FLAGS_DIRECT_IO`: the loop driver submits to the backing file with `IOCB_DIRECT`
/// (bio-core's model names the same bit).
pub const LO_FLAGS_DIRECT_IO: u32 = bio_core::drivers::block::loop_drv::LO_FLAGS_DIRECT_IO;
/// `LO_NAME_SIZE`: the length of `lo_file_name`.
const LO_NAME_SIZE: usize = 64;
/// The control device `LOOP_CTL_GET_FREE` is asked on.
pub const LOOP_CONTROL: &str = "/dev/loop-control";
/// How often `LOOP_CTL_GET_FREE` may name a device another process took first before giving up:
/// `LOOP_CONFIGURE` met `EBUSY` (bound meanwhile) or opening `/dev/loopN` met `ENXIO`/`ENOENT`
/// (removed meanwhile with `LOOP_CTL_REMOVE`).
const EBUSY_RETRIES: u32 = 8;

/// `struct loop_info64` (include/uapi/linux/loop.h).
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; LO_NAME_SIZE],
    lo_crypt_name: [u8; LO_NAME_SIZE],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config` (include/uapi/linux/loop.h).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

// The UAPI sizes: a wrong layout would make LOOP_CONFIGURE read garbage flags.
const _: () = assert!(std::mem::size_of::<LoopInfo64>() == 232);
const _: () = assert!(std::mem::size_of::<LoopConfig>() == 304);

/// Why a kernel loop device cannot be attached here, as one line; `None` when it can be tried:
/// Linux, and [`LOOP_CONTROL`] opens read-write. No uid or capability is asked for: in 6.18
/// neither `loop_control_ioctl()`/`loop_control_get_free()` nor `lo_ioctl()`'s `LOOP_CONFIGURE`
/// calls `capable()`; access is decided by the device nodes' permissions (`crw-rw---- root disk`
/// on most distributions), so a member of group `disk` may attach too. The `/dev/loopN` node's
/// permission is checked when [`KernelLoop::attach`] opens it (its number is known only then).
pub fn why_unavailable() -> Option<String> {
    if !cfg!(target_os = "linux") {
        return Some("the kernel's loop device needs Linux".into());
    }
    why_unavailable_at(Path::new(LOOP_CONTROL))
}

/// [`why_unavailable`] for a control device at `control` (tests give a path of their own).
fn why_unavailable_at(control: &Path) -> Option<String> {
    let e = File::options().read(true).write(true).open(control).err()?;
    let shown = control.display();
    Some(match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENXIO) | Some(libc::ENODEV) => {
            format!("cannot open {shown}: {e} (the loop driver is not loaded: modprobe loop)")
        }
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "cannot open {shown} read-write: {e} (access is by the device node's permissions: \
             run as its owner or a member of its group, usually root or group disk)"
        ),
        _ => format!("cannot open {shown} read-write: {e}"),
    })
}

/// Whether opening `/dev/loopN` right after `LOOP_CTL_GET_FREE` named it failed because the device
/// went away meanwhile (another process's `LOOP_CTL_REMOVE`: `ENXIO` from `lo_open()` of a
/// device being deleted, `ENOENT` once devtmpfs removed the node), so asking again is right.
fn vanished(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENXIO) | Some(libc::ENOENT))
}

/// A loop device of the running kernel bound to a file; detached when dropped and on
/// `SIGINT`/`SIGTERM`/`SIGHUP` (see the module docs).
#[derive(Debug)]
pub struct KernelLoop {
    /// The open device: held so the device is ours until we detach it, and for
    /// `LOOP_CLR_FD` on our own descriptor. `None` once detached.
    dev: Option<File>,
    /// The backing file (the kernel holds its own reference once bound).
    backing: Option<File>,
    index: u32,
    dev_path: PathBuf,
    file: PathBuf,
    dio: Option<bool>,
    /// Unregistered (disarmed) once [`KernelLoop::detach`] ran.
    restore: Option<Restore>,
}

fn sys_attr(index: u32, attr: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/block/loop{index}/{attr}"))
        .ok()
        .map(|s| s.trim().to_owned())
}

impl KernelLoop {
    /// Binds `file` to a free loop device with `LO_FLAGS_AUTOCLEAR`, and with `direct_io`
    /// `LO_FLAGS_DIRECT_IO` too (the backing file is then opened `O_DIRECT`, as
    /// `losetup --direct-io=on` opens it). The block size is the kernel's default
    /// (`loop_default_blocksize()`). Errors are one line naming the file or the device.
    pub fn attach(file: &Path, direct_io: bool) -> Result<KernelLoop, String> {
        let shown = file.display();
        if let Some(why) = why_unavailable() {
            return Err(format!("kernel loop device over {shown}: {why}"));
        }
        let mut oo = File::options();
        oo.read(true).write(true);
        if direct_io {
            oo.custom_flags(libc::O_DIRECT);
        }
        let backing = oo.open(file).map_err(|e| {
            let mode = if direct_io {
                "O_RDWR|O_DIRECT"
            } else {
                "O_RDWR"
            };
            format!("kernel loop device: cannot open {shown} ({mode}): {e}")
        })?;
        let ctl = File::options()
            .read(true)
            .write(true)
            .open(LOOP_CONTROL)
            .map_err(|e| format!("kernel loop device: cannot open {LOOP_CONTROL}: {e}"))?;
        for _ in 0..EBUSY_RETRIES {
            // SAFETY: an ioctl without an argument on a descriptor we own.
            let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
            if n < 0 {
                return Err(format!(
                    "kernel loop device: ioctl({LOOP_CONTROL}, LOOP_CTL_GET_FREE): {}",
                    std::io::Error::last_os_error()
                ));
            }
            let index = n as u32;
            let dev_path = PathBuf::from(format!("/dev/loop{index}"));
            let dev = match File::options().read(true).write(true).open(&dev_path) {
                Ok(f) => f,
                Err(e) if vanished(&e) => continue, // removed meanwhile: ask for another
                Err(e) => {
                    let why = if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) {
                        " (access is by the device node's permissions: usually root or group disk)"
                    } else {
                        ""
                    };
                    return Err(format!(
                        "kernel loop device: cannot open {} read-write: {e}{why}",
                        dev_path.display()
                    ));
                }
            };
            // SAFETY: all-zero is a valid loop_config (no offset, no size limit, no name).
            let mut cfg: LoopConfig = unsafe { std::mem::zeroed() };
            cfg.fd = backing.as_raw_fd() as u32;
            cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR | if direct_io { LO_FLAGS_DIRECT_IO } else { 0 };
            // What `losetup -a` shows when sysfs has no backing_file (cut to LO_NAME_SIZE - 1).
            let name = file.as_os_str().as_bytes();
            let len = name.len().min(LO_NAME_SIZE - 1);
            cfg.info.lo_file_name[..len].copy_from_slice(&name[..len]);
            // Signals wait until the restore is registered, so a Ctrl-C never falls between the
            // bind and the registration (on this thread; another thread's signal still finds
            // LO_FLAGS_AUTOCLEAR, which detaches at the process's last close).
            let blocked = Blocked::new();
            // SAFETY: LOOP_CONFIGURE reads a struct loop_config we own.
            let rc = unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CONFIGURE as _, &cfg) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                drop(blocked);
                if e.raw_os_error() == Some(libc::EBUSY) {
                    continue; // bound by someone else meanwhile: theirs, leave it
                }
                return Err(format!(
                    "kernel loop device: ioctl({}, LOOP_CONFIGURE) over {shown}: {e}",
                    dev_path.display()
                ));
            }
            let restore = Restore::register(RestoreAction::LoopClrFd {
                path: dev_path.clone(),
            });
            drop(blocked);
            let mut lo = KernelLoop {
                dev: Some(dev),
                backing: Some(backing),
                index,
                dev_path,
                file: file.to_owned(),
                dio: None,
                restore: None,
            };
            match restore {
                Ok(r) => lo.restore = Some(r),
                Err(e) => {
                    let _ = lo.detach();
                    return Err(format!(
                        "kernel loop device {}: cannot register its detach: {e}",
                        lo.dev_path.display()
                    ));
                }
            }
            lo.dio = sys_attr(index, "loop/dio").map(|s| s == "1");
            return Ok(lo);
        }
        Err(format!(
            "kernel loop device over {shown}: LOOP_CTL_GET_FREE named a device another process \
             bound (EBUSY) or removed (ENXIO/ENOENT) first {EBUSY_RETRIES} times"
        ))
    }

    /// `/dev/loopN`.
    pub fn dev_path(&self) -> &Path {
        &self.dev_path
    }

    /// `N` of `/dev/loopN` (`lo_number`).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The backing file's path.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Whether the kernel runs the device with direct I/O, as `/sys/block/loopN/loop/dio` read
    /// right after the attach says (`None`: the attribute could not be read).
    pub fn direct_io(&self) -> Option<bool> {
        self.dio
    }

    /// The device's logical block size (`/sys/block/loopN/queue/logical_block_size`).
    pub fn logical_block_size(&self) -> Option<u32> {
        sys_attr(self.index, "queue/logical_block_size").and_then(|s| s.parse().ok())
    }

    /// Whether the device is still bound to a file (`/sys/block/loopN/loop/backing_file`
    /// exists only while it is).
    pub fn is_bound(index: u32) -> bool {
        Path::new(&format!("/sys/block/loop{index}/loop/backing_file")).exists()
    }

    /// Detaches now: `LOOP_CLR_FD` on our descriptor, then our last close tears the device down
    /// (it stays bound until every other opener, e.g. a child process, has closed it too).
    /// Errors name the device.
    pub fn detach(&mut self) -> Result<(), String> {
        let Some(dev) = self.dev.take() else {
            return Ok(());
        };
        let _blocked = Blocked::new();
        // SAFETY: LOOP_CLR_FD takes no argument; the descriptor is ours and open.
        let rc = unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CLR_FD as _, 0) };
        let err = (rc != 0).then(std::io::Error::last_os_error);
        // Disarmed either way: a second LOOP_CLR_FD by name would fail as ours did, and after
        // our close the name may be someone else's device.
        if let Some(r) = self.restore.take() {
            r.disarm();
        }
        drop(dev);
        drop(self.backing.take());
        match err {
            None => Ok(()),
            Some(e) => Err(format!(
                "kernel loop device {}: ioctl(LOOP_CLR_FD): {e}",
                self.dev_path.display()
            )),
        }
    }
}

impl Drop for KernelLoop {
    fn drop(&mut self) {
        let _ = self.detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::tracefs::live_test_skip_reason;
    use crate::dev::aligned::AlignedBuf;
    use crate::dev::cleanup::TempFile;
    use std::io::BufRead as _;
    use std::os::unix::fs::FileExt;
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};

    /// The child's environment variable: the directory to attach a device in, then wait.
    const CHILD_ENV: &str = "BIOSIM_KERNEL_LOOP_CHILD";

    #[test]
    fn the_uapi_layout_matches_loop_h() {
        // Offsets from include/uapi/linux/loop.h: a shifted lo_flags would send other flags.
        assert_eq!(std::mem::offset_of!(LoopInfo64, lo_flags), 52);
        assert_eq!(std::mem::offset_of!(LoopInfo64, lo_file_name), 56);
        assert_eq!(std::mem::offset_of!(LoopConfig, info), 8);
        assert_eq!(std::mem::offset_of!(LoopConfig, reserved), 240);
    }

    #[test]
    fn an_unopenable_control_device_is_refused_with_its_errno_and_a_vanished_device_is_retried() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("loop-control");
        let why = why_unavailable_at(&missing).unwrap();
        assert!(
            why.contains("No such file")
                && why.contains("modprobe loop")
                && why.contains("loop-control"),
            "{why}"
        );
        // A directory cannot be opened read-write: EISDIR, named as is.
        let why = why_unavailable_at(dir.path()).unwrap();
        assert!(why.contains("Is a directory"), "{why}");
        // A file that opens read-write is a usable control node as far as access goes.
        std::fs::write(&missing, "").unwrap();
        assert_eq!(why_unavailable_at(&missing), None);
        let os = std::io::Error::from_raw_os_error;
        assert!(vanished(&os(libc::ENXIO)) && vanished(&os(libc::ENOENT)));
        assert!(!vanished(&os(libc::EACCES)) && !vanished(&os(libc::EBUSY)));
    }

    #[test]
    fn without_access_or_the_driver_attach_refuses_in_one_line() {
        match why_unavailable() {
            Some(why) => {
                let e = KernelLoop::attach(Path::new("/nonexistent/file"), true).unwrap_err();
                assert!(e.contains(&why) && e.contains("/nonexistent/file"), "{e}");
                assert!(!e.contains('\n'), "{e}");
            }
            None => {
                // Access to the driver: a missing file is refused before any device is touched.
                let e = KernelLoop::attach(Path::new("/nonexistent/file"), true).unwrap_err();
                assert!(e.contains("cannot open /nonexistent/file"), "{e}");
            }
        }
    }

    fn wait_unbound(index: u32) -> bool {
        let t0 = Instant::now();
        while KernelLoop::is_bound(index) {
            if t0.elapsed() > Duration::from_secs(5) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    #[test]
    fn a_block_written_through_the_device_reads_back_and_drop_detaches() {
        if let Some(why) = live_test_skip_reason() {
            eprintln!("{why}");
            return;
        }
        let _lock = crate::calibrate::tracefs::lock_live().unwrap();
        let dir = std::env::temp_dir();
        let tmp = TempFile::create_in(&dir, "biosim-kernel-loop-test").unwrap();
        std::fs::File::options()
            .write(true)
            .open(tmp.path())
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let lo = KernelLoop::attach(tmp.path(), true).unwrap();
        let index = lo.index();
        assert!(KernelLoop::is_bound(index));
        assert_eq!(
            lo.direct_io(),
            Some(true),
            "dio readback on {}",
            dir.display()
        );
        eprintln!(
            "{} over {}: dio={:?} logical_block_size={:?}",
            lo.dev_path().display(),
            tmp.path().display(),
            lo.direct_io(),
            lo.logical_block_size()
        );
        let dev = File::options()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(lo.dev_path())
            .unwrap();
        let mut w = AlignedBuf::new(4096);
        w.fill(0x5a);
        dev.write_all_at(&w, 8192).unwrap();
        let mut r = AlignedBuf::new(4096);
        dev.read_exact_at(&mut r, 8192).unwrap();
        assert_eq!(&r[..], &w[..]);
        drop(dev);
        // Through the device to the file: the block is in the backing file at the same offset.
        let mut f = vec![0u8; 4096];
        File::open(tmp.path())
            .unwrap()
            .read_exact_at(&mut f, 8192)
            .unwrap();
        assert!(f.iter().all(|&b| b == 0x5a));
        drop(lo);
        assert!(
            wait_unbound(index),
            "/dev/loop{index} still bound after drop"
        );
        // The twin: without LO_FLAGS_DIRECT_IO the readback says buffered.
        let mut lo = KernelLoop::attach(tmp.path(), false).unwrap();
        assert_eq!(lo.direct_io(), Some(false));
        let index = lo.index();
        lo.detach().unwrap();
        assert!(
            wait_unbound(index),
            "/dev/loop{index} still bound after detach"
        );
    }

    /// Not a test on its own: the child the SIGTERM test spawns (ignored, and it does nothing
    /// without [`CHILD_ENV`]). Attaches, says which device, and waits to be killed.
    #[test]
    #[ignore = "the child process of the SIGTERM test"]
    fn child_holding_a_device() {
        let Ok(dir) = std::env::var(CHILD_ENV) else {
            return;
        };
        let tmp = TempFile::create_in(Path::new(&dir), "biosim-kernel-loop-child").unwrap();
        File::options()
            .write(true)
            .open(tmp.path())
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let lo = KernelLoop::attach(tmp.path(), true).unwrap();
        println!("attached {} {}", lo.index(), tmp.path().display());
        std::thread::sleep(Duration::from_secs(30));
        panic!("the parent did not kill the child within 30 s");
    }

    #[test]
    fn sigterm_or_sigint_of_a_process_holding_a_device_detaches_it_and_removes_its_file() {
        if let Some(why) = live_test_skip_reason() {
            eprintln!("{why}");
            return;
        }
        let _lock = crate::calibrate::tracefs::lock_live().unwrap();
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        for sig in [libc::SIGTERM, libc::SIGINT] {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--ignored",
                    "--exact",
                    "dev::kernel_loop::tests::child_holding_a_device",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, dir.path())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let out = std::io::BufReader::new(child.stdout.take().unwrap());
            // libtest prints `test NAME ... ` before the child's own line, on the same line.
            let line = out
                .lines()
                .map_while(Result::ok)
                .find_map(|l| l.split_once("attached ").map(|(_, rest)| rest.to_owned()));
            let Some(line) = line else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the child did not attach a device");
            };
            let mut words = line.split(' ');
            let index: u32 = words.next().unwrap().parse().unwrap();
            let file = PathBuf::from(words.next().unwrap());
            assert!(KernelLoop::is_bound(index) && file.exists());
            // SAFETY: kill on the child's pid.
            unsafe { libc::kill(child.id() as i32, sig) };
            let status = child.wait().unwrap();
            assert_eq!(status.signal(), Some(sig), "{status:?}");
            assert!(
                wait_unbound(index),
                "/dev/loop{index} still bound after signal {sig}"
            );
            assert!(!file.exists(), "{} left behind", file.display());
        }
    }
}
