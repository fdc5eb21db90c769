//! The live half of `biosim calibrate loop`: a real loop device (drivers/block/loop.c of the
//! running kernel) over a temporary sparse file, attached by [`KernelLoop`] (`LOOP_CONFIGURE`,
//! `include/uapi/linux/loop.h`, with `LO_FLAGS_DIRECT_IO | LO_FLAGS_AUTOCLEAR`), the cases'
//! `O_DIRECT` reads and writes through it with block and workqueue tracing on, one `trace`
//! buffer per case.
//!
//! Why `LOOP_CONFIGURE` and not `losetup --direct-io=on`: no dependency on util-linux; the device
//! is one `LOOP_CTL_GET_FREE` named and we attached ourselves in one ioctl (an `EBUSY` means
//! someone else got it first, and the next free one is tried, never touching theirs); the flags
//! are set atomically with the attach, so no request ever runs buffered. How the device is
//! detached however the process ends (drop, `SIGINT`/`SIGTERM`/`SIGHUP`, `SIGKILL`) is
//! [`crate::dev::kernel_loop`]'s.
//!
//! Every change is undone however the run ends: the tracing session's guards switch tracing and
//! the events off, the [`KernelLoop`] detaches the device, and the backing file is a
//! [`TempFile`].

use super::{CalibrateError, Case, LiveCase, Recording, Setup, CASES, TRACED_EVENTS};
use crate::calibrate::tracefs::Tracefs;
use crate::dev::aligned::AlignedBuf;
use crate::dev::cleanup::TempFile;
use crate::dev::kernel_loop::KernelLoop;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

/// `FS_IOC_FIEMAP` (`include/uapi/linux/fs.h`): `_IOWR('f', 11, struct fiemap)`.
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
/// `FIEMAP_EXTENT_UNWRITTEN`: allocated but reads as zeros.
const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;

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

/// Attaches `file` to a free loop device of the running kernel with `LO_FLAGS_DIRECT_IO`
/// ([`KernelLoop`]; its backing descriptor is opened `O_DIRECT`).
pub(crate) fn attach(file: &Path) -> Result<KernelLoop, CalibrateError> {
    KernelLoop::attach(file, true).map_err(CalibrateError::Kernel)
}

/// Opens `/dev/loopN` of `lo` with `O_DIRECT`, as the cases do their I/O.
pub(crate) fn open_direct(lo: &KernelLoop) -> Result<File, CalibrateError> {
    File::options()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(lo.dev_path())
        .map_err(io_err(format!("open {} O_DIRECT", lo.dev_path().display())))
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
    let lo = attach(tmp.path())?;
    let sys = format!("/sys/block/loop{}", lo.index());
    // loop_configure() drops LO_FLAGS_DIRECT_IO silently when the file cannot do it.
    if lo.direct_io() != Some(true) {
        let dio = read_attr(&format!("{sys}/loop/dio")).unwrap_or_default();
        return Err(CalibrateError::Kernel(format!(
            "{sys}/loop/dio is `{dio}` after LOOP_CONFIGURE with LO_FLAGS_DIRECT_IO: the kernel runs this loop device buffered"
        )));
    }
    let dev = open_direct(&lo)?;
    let setup = Setup {
        kernel: read_attr("/proc/sys/kernel/osrelease").unwrap_or_else(|| "?".into()),
        loop_number: lo.index(),
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
        let trace = run_case(&tr, &dev, case)?;
        cases.push(LiveCase { case, trace });
    }
    let extents = fiemap(&backing, tmp.path())?;
    drop(tr); // tracing and the events off first
    drop(dev); // then our I/O descriptor, so the detach's close is the device's last
    drop(lo); // LOOP_CLR_FD
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
