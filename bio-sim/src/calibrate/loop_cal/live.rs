//! The live half of `biosim calibrate loop`: a real loop device (drivers/block/loop.c of the
//! running kernel) over a temporary sparse file, attached with the `LOOP_CONFIGURE` ioctl
//! (`include/uapi/linux/loop.h`) and `LO_FLAGS_DIRECT_IO`, the cases' `O_DIRECT` reads and writes
//! through it with block and workqueue tracing on, one `trace` buffer per case.
//!
//! Why `LOOP_CONFIGURE` and not `losetup --direct-io=on`: no dependency on util-linux; the device
//! is one we asked `LOOP_CTL_GET_FREE` for and attached ourselves in one ioctl (an `EBUSY` means
//! someone else got it first, and we try the next free one, never touching theirs); the flags
//! (`LO_FLAGS_DIRECT_IO | LO_FLAGS_AUTOCLEAR`) are set atomically with the attach, so no request
//! ever runs buffered. `LO_FLAGS_AUTOCLEAR` detaches the device when its last opener closes it, so
//! even a `SIGKILL` (which no handler sees) leaves no device attached once the process is gone.
//!
//! Every change is undone however the run ends: the tracing session's guards switch tracing and
//! the events off, a [`Restore`] with `LOOP_CLR_FD` detaches the device, and the backing file is a
//! [`TempFile`].

use super::{CalibrateError, Case, LiveCase, Recording, Setup, CASES, TRACED_EVENTS};
use crate::calibrate::tracefs::Tracefs;
use crate::dev::aligned::AlignedBuf;
use crate::dev::cleanup::{Restore, RestoreAction, TempFile};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `LOOP_CTL_GET_FREE` (`include/uapi/linux/loop.h`): the number of a free loop device, made if
/// needed.
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
/// `LOOP_CONFIGURE`: attach a backing fd with a `struct loop_config` in one call.
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
/// `LO_FLAGS_AUTOCLEAR`: detach on last close.
const LO_FLAGS_AUTOCLEAR: u32 = 4;
/// `LO_FLAGS_DIRECT_IO` (bio-core's model names the same bit).
const LO_FLAGS_DIRECT_IO: u32 = bio_core::drivers::block::loop_drv::LO_FLAGS_DIRECT_IO;
/// `FS_IOC_FIEMAP` (`include/uapi/linux/fs.h`): `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
/// `FIEMAP_EXTENT_UNWRITTEN`: allocated but reads as zeros.
const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;

/// `struct loop_info64`.
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
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// `struct fiemap` with room for [`FIEMAP_SLOTS`] extents.
#[repr(C)]
struct Fiemap {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
    fm_extents: [FiemapExtent; FIEMAP_SLOTS],
}

/// `struct fiemap_extent`.
#[repr(C)]
#[derive(Clone, Copy)]
struct FiemapExtent {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

const FIEMAP_SLOTS: usize = 32;

/// The backing file's size: 1 MiB, all of it a hole to begin with.
pub const BACKING_BYTES: u64 = 1 << 20;

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> CalibrateError {
    move |source| CalibrateError::Io { what, source }
}

/// `major,minor` of a `dev_t`.
fn dev_pair(dev: u64) -> (u32, u32) {
    (libc::major(dev), libc::minor(dev))
}

/// An attached loop device: the `Restore` that detaches it (registered before anything else can
/// fail) and the open device, dropped first so the restore's `LOOP_CLR_FD` is the last close.
pub(crate) struct Attached {
    pub(crate) dev: File,
    pub(crate) number: u32,
    _detach: Restore,
}

/// Finds a free loop device and attaches `backing` to it, retrying on `EBUSY` (another process
/// took the number between the two ioctls).
pub(crate) fn attach(backing: &File) -> Result<Attached, CalibrateError> {
    let ctl = File::options()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .map_err(io_err("open /dev/loop-control".into()))?;
    for _ in 0..8 {
        // SAFETY: an ioctl without an argument on an fd we own.
        let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
        if n < 0 {
            return Err(CalibrateError::Io {
                what: "ioctl(/dev/loop-control, LOOP_CTL_GET_FREE)".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        let path = PathBuf::from(format!("/dev/loop{n}"));
        let dev = File::options()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .map_err(io_err(format!("open {} O_DIRECT", path.display())))?;
        // SAFETY: all-zero is a valid loop_config.
        let mut cfg: LoopConfig = unsafe { std::mem::zeroed() };
        cfg.fd = backing.as_raw_fd() as u32;
        cfg.info.lo_flags = LO_FLAGS_DIRECT_IO | LO_FLAGS_AUTOCLEAR;
        // Signals wait until the restore is registered: an attach is never left unregistered
        // by a Ctrl-C between the ioctl and the registration.
        let blocked = SignalsBlocked::new();
        // SAFETY: LOOP_CONFIGURE reads a struct loop_config we own.
        let r = unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CONFIGURE as _, &cfg) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            drop(blocked);
            if e.raw_os_error() == Some(libc::EBUSY) {
                continue; // someone else's now: leave it alone
            }
            return Err(CalibrateError::Io {
                what: format!(
                    "ioctl({}, LOOP_CONFIGURE, LO_FLAGS_DIRECT_IO)",
                    path.display()
                ),
                source: e,
            });
        }
        let detach = Restore::register(RestoreAction::LoopClrFd { path: path.clone() });
        drop(blocked);
        let detach = match detach {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: LOOP_CLR_FD on the device we just attached.
                unsafe { libc::ioctl(dev.as_raw_fd(), 0x4C01 as _, 0) };
                return Err(CalibrateError::Io {
                    what: format!("register the detach of {}", path.display()),
                    source: e,
                });
            }
        };
        return Ok(Attached {
            dev,
            number: n as u32,
            _detach: detach,
        });
    }
    Err(CalibrateError::Kernel(
        "LOOP_CTL_GET_FREE kept naming devices another process attached first (EBUSY 8 times)"
            .into(),
    ))
}

/// Blocks `SIGINT`/`SIGTERM`/`SIGHUP` on this thread until dropped.
struct SignalsBlocked(libc::sigset_t);

impl SignalsBlocked {
    fn new() -> Self {
        // SAFETY: plain sigset manipulation on owned values.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(&mut set, s);
            }
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            SignalsBlocked(old)
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

/// The file's extents as `(file sector, device sector, sectors)`, written ones only.
fn fiemap(file: &File, path: &Path) -> Result<Vec<(u64, u64, u64)>, CalibrateError> {
    // SAFETY: all-zero is a valid fiemap request.
    let mut fm: Fiemap = unsafe { std::mem::zeroed() };
    fm.fm_length = u64::MAX;
    fm.fm_flags = 1; // FIEMAP_FLAG_SYNC
    fm.fm_extent_count = FIEMAP_SLOTS as u32;
    // SAFETY: FS_IOC_FIEMAP fills the struct we own, at most fm_extent_count extents.
    if unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP as _, &mut fm) } != 0 {
        return Err(CalibrateError::Io {
            what: format!("ioctl({}, FS_IOC_FIEMAP)", path.display()),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(
        fm.fm_extents[..(fm.fm_mapped_extents as usize).min(FIEMAP_SLOTS)]
            .iter()
            .filter(|e| e.fe_flags & FIEMAP_EXTENT_UNWRITTEN == 0)
            .map(|e| (e.fe_logical >> 9, e.fe_physical >> 9, e.fe_length >> 9))
            .collect(),
    )
}

fn read_attr(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Runs every case on the live kernel, holding one tracing session (and so the live lock) for
/// the whole run. The backing file goes into `dir`.
pub fn record(dir: &Path) -> Result<Recording, CalibrateError> {
    if let Some(why) = crate::calibrate::tracefs::why_not_live() {
        return Err(CalibrateError::NotLive(why));
    }
    let mut tr = Tracefs::open().map_err(io_err("open a tracefs session".into()))?;
    let tmp = TempFile::create_in(dir, "biosim-calibrate-loop").map_err(io_err(format!(
        "create the backing file in {}",
        dir.display()
    )))?;
    let backing = File::options()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(tmp.path())
        .map_err(io_err(format!("open {} O_DIRECT", tmp.path().display())))?;
    backing
        .set_len(BACKING_BYTES)
        .map_err(io_err(format!("truncate {}", tmp.path().display())))?;
    let st_dev = backing
        .metadata()
        .map_err(io_err(format!("stat {}", tmp.path().display())))?
        .dev();
    let lower = dev_pair(st_dev);
    if lower.0 == 0 {
        return Err(CalibrateError::Kernel(format!(
            "{} is on a file system without a block device (st_dev {},{}): pass --dir on a disk file system",
            dir.display(),
            lower.0,
            lower.1
        )));
    }
    let lo = attach(&backing)?;
    let sys = format!("/sys/block/loop{}", lo.number);
    let dio = read_attr(&format!("{sys}/loop/dio")).unwrap_or_default();
    if dio != "1" {
        return Err(CalibrateError::Kernel(format!(
            "{sys}/loop/dio is `{dio}` after LOOP_CONFIGURE with LO_FLAGS_DIRECT_IO: the kernel runs this loop device buffered"
        )));
    }
    let setup = Setup {
        kernel: read_attr("/proc/sys/kernel/osrelease").unwrap_or_else(|| "?".into()),
        loop_number: lo.number,
        lower,
        nr_blocking_writes: std::path::Path::new(&format!("{sys}/loop/nr_blocking_writes"))
            .exists(),
        extents: Vec::new(),
    };
    for ev in TRACED_EVENTS {
        tr.enable(ev).map_err(io_err(format!("enable {ev}")))?;
    }
    let mut cases = Vec::new();
    for case in &CASES {
        let trace = run_case(&tr, &lo.dev, case)?;
        cases.push(LiveCase { case, trace });
    }
    let extents = fiemap(&backing, tmp.path())?;
    drop(tr); // tracing and the events off first
    drop(lo); // then the device detached (our fd closes before LOOP_CLR_FD's)
    drop(backing);
    drop(tmp);
    Ok(Recording {
        setup: Setup { extents, ..setup },
        cases,
    })
}

/// One case: an empty buffer, tracing on, the I/O, a moment for the worker to return, tracing
/// off, the buffer.
fn run_case(tr: &Tracefs, dev: &File, case: &Case) -> Result<String, CalibrateError> {
    let len = case.blocks as usize * 4096;
    let pos = u64::from(case.block) * 4096;
    let mut buf = AlignedBuf::new(len);
    if case.write {
        buf.fill(case.fill);
    }
    tr.clear()
        .map_err(io_err("clear the trace buffer".into()))?;
    tr.set_on(true).map_err(io_err("tracing_on 1".into()))?;
    let r = if case.write {
        dev.write_at(&buf, pos)
    } else {
        dev.read_at(&mut buf, pos)
    };
    // The syscall returns when the loop request completes, which can come before the worker's
    // workqueue_execute_end: give it time to return.
    std::thread::sleep(Duration::from_millis(20));
    tr.set_on(false).map_err(io_err("tracing_on 0".into()))?;
    let n = r.map_err(io_err(format!("{} through the loop device", case.name)))?;
    if n != len {
        return Err(CalibrateError::Kernel(format!(
            "{}: {n} of {len} bytes",
            case.name
        )));
    }
    if !case.write {
        let want = if case.expect_fill == 0 {
            0
        } else {
            case.expect_fill
        };
        if buf.iter().any(|&b| b != want) {
            return Err(CalibrateError::Kernel(format!(
                "{}: read back data that is not {want:#04x}",
                case.name
            )));
        }
    }
    tr.read().map_err(io_err("read the trace buffer".into()))
}
