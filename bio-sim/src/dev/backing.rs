//! The backing file of `drivers/block/loop.c`: the `struct file` (`lo->lo_backing_file`) that
//! `lo_rw_aio()` reads and writes with `call_read_iter()`/`call_write_iter()` (the `->read_iter`
//! and `->write_iter` of the backing filesystem or block device), that `lo_req_flush()` syncs with
//! `vfs_fsync()` and that `lo_fallocate()` punches and zeroes.
//!
//! The userspace stand-in for a `kiocb` with `ki_flags` is one `preadv2(2)`/`pwritev2(2)` with
//! `RWF_*` flags: `RWF_NOWAIT` becomes `IOCB_NOWAIT`, `RWF_DONTCACHE` becomes `IOCB_DONTCACHE`,
//! through the same `kiocb_set_rw_flags()` the loop driver's kiocbs go through
//! (kernel-semantics.md §6.2, §6.3). `O_DIRECT` is `LO_FLAGS_DIRECT_IO` (`use_aio`). (The loop
//! driver sets `IOCB_NOWAIT` directly, without the `IOCB_NOIO` that §6.2 says `RWF_NOWAIT` adds
//! for reads; see below for what a `RWF_NOWAIT` read really did here.)
//!
//! What an item models is said on the item. The probes ([`BackingFile::supports_nowait`],
//! [`BackingFile::supports_dontcache`]) ask the running kernel rather than assume, and
//! [`BackingFile::cachestat`] reads the page cache so tests and benchmarks can see what
//! `RWF_DONTCACHE` and a cold cache really did.
//!
//! ## What Linux 6.18 did on ext4 (measured by `bio-sim/tests/backing_file.rs`)
//!
//! - `preadv2(RWF_NOWAIT)` of an uncached range fails with `EAGAIN`, but the range's folios are in
//!   the page cache right after the call: the read I/O was started anyway, so kernel-semantics.md
//!   §6.2 item 1 ("no readahead is started") does not hold here. Rarely (about once in 350 runs
//!   through io_uring on a loaded 2-CPU machine) that I/O finishes before the call looks again and
//!   the `NOWAIT` read succeeds. Of a partly cached range it returns a short count (the cached
//!   prefix); of a cached range, all of it.
//! - `pwritev2(RWF_NOWAIT)` on a *buffered* ext4 file fails with `EOPNOTSUPP`, not the generic
//!   `EINVAL` of §6.2: `ext4_buffered_write_iter()` refuses `IOCB_NOWAIT` itself (ext4 has no
//!   `FOP_BUFFER_WASYNC`). On an `O_DIRECT` file a `NOWAIT` overwrite of allocated blocks
//!   succeeds, while a `NOWAIT` write into a hole or past the end of file fails with `EAGAIN`
//!   (it would have to allocate): the sparse-file case of the loop NOWAIT series (§6.1).
//! - `RWF_DONTCACHE` is supported (`FOP_DONTCACHE`). After `fdatasync`, a `DONTCACHE` write into a
//!   hole leaves none of its pages cached; a `DONTCACHE` *overwrite* of allocated blocks leaves
//!   all of them cached, like a plain write. \[inferred\] ext4 ends overwrite writeback from the
//!   bio's IRQ-context completion (`ext4_end_bio()`), where `folio_end_dropbehind()` skips the
//!   invalidation (`!in_task()`), while writes into holes complete through the unwritten-extent
//!   conversion worker, in task context: the gap of §6.3 that the task-context completion series
//!   (§7) closes. A cold `DONTCACHE` read leaves the pages it read uncached.
//! - `RWF_DONTCACHE` on an `O_DIRECT` file is accepted (`kiocb_set_rw_flags()` checks only
//!   `FOP_DONTCACHE` and DAX, not `IOCB_DIRECT`) and has no effect: direct I/O bypasses the cache.
//! - `statx(STATX_DIOALIGN)` on ext4 over virtio-blk reports `stx_dio_mem_align = 512` and
//!   `stx_dio_offset_align = 512` (the disk's 512-byte logical blocks); a misaligned `O_DIRECT`
//!   offset or length over allocated blocks fails with `EINVAL` (over a hole, ext4 zero-fills
//!   and succeeds without checking).
//! - A zero-length `preadv2` returns 0 without looking at the flags (even unknown ones), so the
//!   probes read one block, at end of file, where no I/O is done.

use super::aligned::AlignedBuf;
use std::fmt;
use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------------
// RWF_* flags
// ---------------------------------------------------------------------------------------------

/// The per-I/O flags of `preadv2(2)`/`pwritev2(2)` (`rwf_t`, `include/uapi/linux/fs.h`), which
/// `kiocb_set_rw_flags()` (`include/linux/fs.h`) turns into a kiocb's `IOCB_*` flags.
///
/// A small bitflags-like set: combine with `|` or [`RwFlags::union`], test with
/// [`RwFlags::contains`]. `Debug` prints the names, e.g. `NOWAIT|DONTCACHE`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RwFlags(u32);

impl RwFlags {
    /// `RWF_HIPRI` (0x1): high-priority, polled I/O (`IOCB_HIPRI`).
    pub const HIPRI: RwFlags = RwFlags(0x0000_0001);
    /// `RWF_DSYNC` (0x2): per-I/O `O_DSYNC` (`IOCB_DSYNC`); the write is `REQ_FUA`-like.
    pub const DSYNC: RwFlags = RwFlags(0x0000_0002);
    /// `RWF_SYNC` (0x4): per-I/O `O_SYNC` (`IOCB_SYNC | IOCB_DSYNC`).
    pub const SYNC: RwFlags = RwFlags(0x0000_0004);
    /// `RWF_NOWAIT` (0x8): do not block (`IOCB_NOWAIT`); fails with `EAGAIN` where it would
    /// (kernel-semantics.md §6.2), or `EOPNOTSUPP` without `FMODE_NOWAIT` (and, on ext4, for a
    /// buffered write).
    pub const NOWAIT: RwFlags = RwFlags(0x0000_0008);
    /// `RWF_APPEND` (0x10): per-I/O `O_APPEND` (`IOCB_APPEND`).
    pub const APPEND: RwFlags = RwFlags(0x0000_0010);
    /// `RWF_DONTCACHE` (0x80): buffered I/O that drops its page-cache folios once read or written
    /// back (`IOCB_DONTCACHE`, dropbehind folios); `EOPNOTSUPP` without `FOP_DONTCACHE`
    /// (kernel-semantics.md §6.3).
    pub const DONTCACHE: RwFlags = RwFlags(0x0000_0080);

    const NAMES: [(RwFlags, &'static str); 6] = [
        (RwFlags::HIPRI, "HIPRI"),
        (RwFlags::DSYNC, "DSYNC"),
        (RwFlags::SYNC, "SYNC"),
        (RwFlags::NOWAIT, "NOWAIT"),
        (RwFlags::APPEND, "APPEND"),
        (RwFlags::DONTCACHE, "DONTCACHE"),
    ];

    /// No flags (a plain `pread`/`pwrite`).
    pub const fn empty() -> RwFlags {
        RwFlags(0)
    }

    /// The flags with exactly these bits, including bits this type has no name for (they are
    /// passed to the kernel as they are, which refuses unknown ones with `EOPNOTSUPP`).
    pub const fn from_bits_retain(bits: u32) -> RwFlags {
        RwFlags(bits)
    }

    /// The raw `rwf_t` bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every flag of `other` is set in `self`.
    pub const fn contains(self, other: RwFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag of `other` is set in `self`.
    pub const fn intersects(self, other: RwFlags) -> bool {
        self.0 & other.0 != 0
    }

    /// The flags of `self` and of `other`.
    pub const fn union(self, other: RwFlags) -> RwFlags {
        RwFlags(self.0 | other.0)
    }

    /// The flags of `self` that are not in `other`.
    pub const fn difference(self, other: RwFlags) -> RwFlags {
        RwFlags(self.0 & !other.0)
    }

    /// Sets the flags of `other`.
    pub fn insert(&mut self, other: RwFlags) {
        self.0 |= other.0;
    }

    /// Clears the flags of `other`.
    pub fn remove(&mut self, other: RwFlags) {
        self.0 &= !other.0;
    }
}

impl std::ops::BitOr for RwFlags {
    type Output = RwFlags;

    fn bitor(self, rhs: RwFlags) -> RwFlags {
        self.union(rhs)
    }
}

impl std::ops::BitOrAssign for RwFlags {
    fn bitor_assign(&mut self, rhs: RwFlags) {
        self.insert(rhs);
    }
}

impl fmt::Debug for RwFlags {
    /// `NOWAIT|DONTCACHE`; `(empty)` for no flags; bits without a name as hex, e.g. `NOWAIT|0x100`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(empty)");
        }
        let mut rest = self.0;
        let mut first = true;
        for (flag, name) in RwFlags::NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
                rest &= !flag.0;
            }
        }
        if rest != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(f, "{rest:#x}")?;
        }
        Ok(())
    }
}

impl fmt::Display for RwFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

// ---------------------------------------------------------------------------------------------
// Opening
// ---------------------------------------------------------------------------------------------

/// How to open a [`BackingFile`]: what `losetup` / `LOOP_CONFIGURE` decide (`lo_flags`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Open with `O_DIRECT`: the loop driver's `LO_FLAGS_DIRECT_IO` (`use_aio`), bypassing the
    /// page cache. Buffers, lengths and offsets must then be aligned (see
    /// [`BackingFile::logical_block_size`]); the kernel's `EINVAL` is returned as it is otherwise.
    pub direct: bool,
    /// Open `O_RDONLY` (`LO_FLAGS_READ_ONLY`); otherwise `O_RDWR`.
    pub read_only: bool,
    /// Create the file if it does not exist and extend it (`ftruncate`, so the new part is sparse)
    /// to this many bytes if it is smaller. A larger file is left as it is. A block device is
    /// never resized: one smaller than this is an error. Not allowed with `read_only`.
    pub create_size: Option<u64>,
}

/// What `statx(2)` reports with `STATX_DIOALIGN` (Linux 6.1+): the alignment `O_DIRECT` needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DioAlign {
    /// `stx_dio_mem_align`: the alignment of a user buffer's address (and segment lengths).
    pub mem_align: u32,
    /// `stx_dio_offset_align`: the alignment of file offsets and I/O lengths.
    pub offset_align: u32,
}

/// The sector size a buffered backing file reports as its logical block size (`SECTOR_SIZE`).
const BUFFERED_LOGICAL_BLOCK_SIZE: u32 = 512;

/// The `O_DIRECT` alignment assumed when `statx(STATX_DIOALIGN)` cannot tell (older kernels, or a
/// filesystem that does not report it): one page, which every Linux filesystem accepts.
const FALLBACK_DIO_ALIGNMENT: u32 = 4096;

/// A real file (or block device) that a simulated block device reads and writes: the loop
/// driver's `lo->lo_backing_file`.
///
/// All I/O is positional (`preadv2`/`pwritev2` at an offset), so one `BackingFile` can be shared
/// between threads (`Send + Sync`, usually behind an `Arc`), as the loop driver's workers and its
/// `->queue_rq` share one `struct file`.
pub struct BackingFile {
    file: File,
    path: PathBuf,
    size: u64,
    direct: bool,
    read_only: bool,
    block_device: bool,
    dio_align: Option<DioAlign>,
    logical_block_size: u32,
    nowait: bool,
    dontcache: bool,
}

impl fmt::Debug for BackingFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackingFile")
            .field("path", &self.path)
            .field("fd", &self.file.as_raw_fd())
            .field("size", &self.size)
            .field("direct", &self.direct)
            .field("read_only", &self.read_only)
            .field("block_device", &self.block_device)
            .field("logical_block_size", &self.logical_block_size)
            .field("dio_align", &self.dio_align)
            .field("nowait", &self.nowait)
            .field("dontcache", &self.dontcache)
            .finish()
    }
}

/// Why a [`BackingFile`] could not be opened. Every message names the path and what was
/// attempted.
#[derive(Debug, thiserror::Error)]
pub enum BackingError {
    /// `open(2)` failed.
    #[error("cannot open backing file {} ({mode}): {source}", path.display())]
    Open {
        /// The path.
        path: PathBuf,
        /// The open flags tried, e.g. `O_RDWR|O_DIRECT`.
        mode: String,
        /// The OS error.
        source: io::Error,
    },
    /// The path is neither a regular file nor a block device (loop's `loop_validate_file()`
    /// refuses the same with `-EINVAL`).
    #[error(
        "cannot use {} as a backing file: it is a {kind}, not a regular file or a block device",
        path.display()
    )]
    NotRegularOrBlock {
        /// The path.
        path: PathBuf,
        /// What it is instead: `directory`, `fifo`, `socket`, `character device`, ...
        kind: &'static str,
    },
    /// `stat(2)`/`fstat(2)` or finding the size failed.
    #[error("cannot stat backing file {} ({what}): {source}", path.display())]
    Stat {
        /// The path.
        path: PathBuf,
        /// What was attempted, e.g. `fstat` or `lseek(SEEK_END)`.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// Extending the file with `ftruncate(2)` failed.
    #[error(
        "cannot extend backing file {} from {from} to {to} bytes (ftruncate): {source}",
        path.display()
    )]
    Resize {
        /// The path.
        path: PathBuf,
        /// The size before.
        from: u64,
        /// The size asked for.
        to: u64,
        /// The OS error.
        source: io::Error,
    },
    /// Growing a regular file to [`OpenOptions::create_size`] would not leave its filesystem
    /// the space biosim keeps free ([`crate::dev::space::ensure_fits`], `statvfs(3)`).
    #[error("cannot extend backing file {} to {to} bytes: {reason}", path.display())]
    NoSpace {
        /// The path.
        path: PathBuf,
        /// The size asked for.
        to: u64,
        /// What statvfs said.
        reason: String,
    },
    /// A block device smaller than [`OpenOptions::create_size`] (block devices are not resized).
    #[error(
        "backing block device {} has {size} bytes, fewer than the {requested} asked for (a block device cannot be resized)",
        path.display()
    )]
    DeviceTooSmall {
        /// The path.
        path: PathBuf,
        /// The device's size.
        size: u64,
        /// The size asked for.
        requested: u64,
    },
    /// The options contradict each other.
    #[error("cannot open backing file {}: {reason}", path.display())]
    InvalidOptions {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        reason: &'static str,
    },
}

/// Page-cache residency of a file range, in pages: `struct cachestat` of `cachestat(2)`
/// (`include/uapi/linux/mman.h`, Linux 6.5+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStat {
    /// `nr_cache`: pages of the range in the page cache.
    pub nr_cache: u64,
    /// `nr_dirty`: cached pages that are dirty.
    pub nr_dirty: u64,
    /// `nr_writeback`: cached pages under writeback.
    pub nr_writeback: u64,
    /// `nr_evicted`: pages of the range evicted from the cache (shadow entries).
    pub nr_evicted: u64,
    /// `nr_recently_evicted`: evicted pages that would still be resident with a larger cache.
    pub nr_recently_evicted: u64,
    /// Where the numbers come from.
    pub source: CacheStatSource,
}

/// Where a [`CacheStat`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheStatSource {
    /// `cachestat(2)`: every field is the kernel's.
    #[default]
    Cachestat,
    /// `mmap(2)` + `mincore(2)` (the kernel has no `cachestat`, `ENOSYS`): only `nr_cache` is
    /// measured, the other fields are 0.
    Mincore,
}

/// `cachestat(2)`'s syscall number: 451 in the unified syscall table every 64-bit Linux
/// architecture Rust targets uses (x86_64, aarch64, riscv64, ...).
const SYS_CACHESTAT: libc::c_long = 451;

/// `struct cachestat_range` (`include/uapi/linux/mman.h`).
#[repr(C)]
struct RawCachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` (`include/uapi/linux/mman.h`).
#[repr(C)]
#[derive(Default)]
struct RawCachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

fn file_kind(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "fifo"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

fn to_off_t(off: u64) -> io::Result<libc::off_t> {
    libc::off_t::try_from(off).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file offset {off} does not fit in off_t"),
        )
    })
}

/// Retries `f` while it fails with `EINTR`; a negative return is `errno`.
fn retry_eintr(mut f: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let n = f();
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN)`; `None` when the kernel or filesystem does not
/// report it (or reports 0: direct I/O unsupported).
fn statx_dioalign(fd: RawFd) -> Option<DioAlign> {
    // SAFETY: `statx` is a plain C struct of integers; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is an open descriptor, the path is a valid NUL-terminated empty string (with
    // AT_EMPTY_PATH it names `fd` itself) and `stx` is a writable `struct statx`.
    let rc = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    if stx.stx_dio_mem_align == 0 || stx.stx_dio_offset_align == 0 {
        return None;
    }
    Some(DioAlign {
        mem_align: stx.stx_dio_mem_align,
        offset_align: stx.stx_dio_offset_align,
    })
}

/// What a probe I/O said about a flag.
fn probe_says_supported(result: io::Result<usize>, what: &str, path: &Path) -> bool {
    match result {
        Ok(_) => true,
        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => true,
        Err(e)
            if e.raw_os_error() == Some(libc::EOPNOTSUPP)
                || e.raw_os_error() == Some(libc::EINVAL) =>
        {
            false
        }
        Err(e) => {
            tracing::warn!(
                path = %path.display(),
                "probe of {what} failed unexpectedly ({e}); treating it as unsupported"
            );
            false
        }
    }
}

/// What `open` refuses before open(2): contradictory options, and a path that exists but is
/// neither a regular file nor a block device.
fn check_before_open(path: &Path, opts: &OpenOptions) -> Result<(), BackingError> {
    if opts.read_only && opts.create_size.is_some() {
        return Err(BackingError::InvalidOptions {
            path: path.to_path_buf(),
            reason: "create_size needs a writable file, but read_only was asked for",
        });
    }
    // The growth is sparse at first, but benches fill it: it must fit before the file is even
    // created (a block device is never grown; `ensure_file_fits` counts a missing file as 0).
    if let Some(want) = opts.create_size {
        let is_bdev = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device());
        if !is_bdev {
            crate::dev::space::ensure_file_fits(path, want, "free space").map_err(|reason| {
                BackingError::NoSpace {
                    path: path.to_path_buf(),
                    to: want,
                    reason,
                }
            })?;
        }
    }
    // Refuse directories, fifos and sockets before open(2): opening a fifo could block.
    // A missing (about to be created) or unreadable path is left to open(2) to report.
    if let Ok(md) = std::fs::metadata(path) {
        let ft = md.file_type();
        if !ft.is_file() && !ft.is_block_device() {
            return Err(BackingError::NotRegularOrBlock {
                path: path.to_path_buf(),
                kind: file_kind(ft),
            });
        }
    }
    Ok(())
}

/// open(2) with the flags `opts` asks for; the error names them (`O_RDWR|O_CREAT|O_DIRECT`).
fn open_file(path: &Path, opts: &OpenOptions) -> Result<File, BackingError> {
    let mut mode = String::from(if opts.read_only { "O_RDONLY" } else { "O_RDWR" });
    let mut oo = std::fs::OpenOptions::new();
    oo.read(true).write(!opts.read_only);
    if opts.create_size.is_some() {
        oo.create(true);
        mode.push_str("|O_CREAT");
    }
    let mut custom = 0;
    if opts.direct {
        custom |= libc::O_DIRECT;
        mode.push_str("|O_DIRECT");
    }
    oo.custom_flags(custom);
    oo.open(path).map_err(|source| BackingError::Open {
        path: path.to_path_buf(),
        mode,
        source,
    })
}

/// Whether the open file is a block device, and its size, extended to
/// [`OpenOptions::create_size`] for a regular file (a block device must be that large already).
/// The type is checked again on the open file: the path may have changed since the first look.
fn size_file(file: &File, path: &Path, opts: &OpenOptions) -> Result<(bool, u64), BackingError> {
    let md = file.metadata().map_err(|source| BackingError::Stat {
        path: path.to_path_buf(),
        what: "fstat",
        source,
    })?;
    let ft = md.file_type();
    let block_device = ft.is_block_device();
    if !ft.is_file() && !block_device {
        return Err(BackingError::NotRegularOrBlock {
            path: path.to_path_buf(),
            kind: file_kind(ft),
        });
    }

    let mut size = if block_device {
        // A block device's st_size is 0; its size is where SEEK_END lands (the
        // BLKGETSIZE64 value, without an arch-specific ioctl number).
        (&*file)
            .seek(SeekFrom::End(0))
            .map_err(|source| BackingError::Stat {
                path: path.to_path_buf(),
                what: "lseek(SEEK_END)",
                source,
            })?
    } else {
        md.len()
    };
    if let Some(want) = opts.create_size {
        if block_device {
            if size < want {
                return Err(BackingError::DeviceTooSmall {
                    path: path.to_path_buf(),
                    size,
                    requested: want,
                });
            }
        } else if size < want {
            file.set_len(want).map_err(|source| BackingError::Resize {
                path: path.to_path_buf(),
                from: size,
                to: want,
                source,
            })?;
            size = want;
        }
    }
    Ok((block_device, size))
}

impl BackingFile {
    /// Opens (and with [`OpenOptions::create_size`], creates or extends) a backing file, as
    /// `loop_configure()` takes `lo_backing_file`: the path must be a regular file or a block
    /// device (`loop_validate_file()`).
    ///
    /// At open it also asks the kernel, once, for `O_DIRECT` alignment (`statx(STATX_DIOALIGN)`),
    /// and probes `RWF_NOWAIT` and `RWF_DONTCACHE` with a one-block read at the end of the file
    /// (rounded up to 4096): `kiocb_set_rw_flags()` refuses an unsupported flag before the read
    /// starts, and a read at end of file does no I/O and leaves the page cache as it was. (A
    /// zero-length `preadv2` returns 0 before the kernel looks at the flags, so it cannot probe.)
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<BackingFile, BackingError> {
        check_before_open(path, opts)?;
        let file = open_file(path, opts)?;
        let (block_device, size) = size_file(&file, path, opts)?;
        let dio_align = statx_dioalign(file.as_raw_fd());
        let logical_block_size = if opts.direct {
            dio_align.map_or(FALLBACK_DIO_ALIGNMENT, |a| a.offset_align)
        } else {
            BUFFERED_LOGICAL_BLOCK_SIZE
        };

        let mut backing = BackingFile {
            file,
            path: path.to_path_buf(),
            size,
            direct: opts.direct,
            read_only: opts.read_only,
            block_device,
            dio_align,
            logical_block_size,
            nowait: false,
            dontcache: false,
        };
        backing.nowait = probe_says_supported(
            backing.probe_read(RwFlags::NOWAIT),
            "RWF_NOWAIT",
            &backing.path,
        );
        backing.dontcache = probe_says_supported(
            backing.probe_read(RwFlags::DONTCACHE),
            "RWF_DONTCACHE",
            &backing.path,
        );
        tracing::debug!(target: "block", backing = ?backing, "loop backing file opened");
        Ok(backing)
    }

    /// One read of one logical block at the end of the file with `flags`, to see whether the
    /// kernel accepts them without doing any I/O.
    fn probe_read(&self, flags: RwFlags) -> io::Result<usize> {
        let eof = self.current_size().unwrap_or(self.size);
        let off = eof
            .checked_next_multiple_of(FALLBACK_DIO_ALIGNMENT as u64)
            .unwrap_or(0);
        let lbs = self.logical_block_size as usize;
        let align = self
            .dio_align
            .map_or(FALLBACK_DIO_ALIGNMENT as usize, |a| a.mem_align as usize)
            .max(crate::dev::aligned::DEFAULT_ALIGNMENT);
        let len = lbs.next_multiple_of(crate::dev::aligned::SECTOR_SIZE);
        let mut buf = AlignedBuf::with_alignment(len, align);
        self.read_at(&mut buf[..lbs], off, flags)
    }

    /// The path the file was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The size in bytes at open (after [`OpenOptions::create_size`]): the capacity of the
    /// device it backs, as the loop driver fixes `lo_sizelimit`/the capacity at configure time.
    /// Writes past it grow a regular file without changing this; see
    /// [`BackingFile::current_size`].
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The file's size now (`fstat`, or `lseek(SEEK_END)` for a block device).
    pub fn current_size(&self) -> io::Result<u64> {
        if self.block_device {
            (&self.file).seek(SeekFrom::End(0))
        } else {
            Ok(self.file.metadata()?.len())
        }
    }

    /// Whether the file was opened `O_DIRECT` (`LO_FLAGS_DIRECT_IO`).
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// Whether the file was opened read-only (`LO_FLAGS_READ_ONLY`).
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Whether the backing file is a block device (`S_ISBLK`), which the loop driver's hint policy
    /// `lo_aio_try_nowait()` always lets try `NOWAIT` first (kernel-semantics.md §6.1).
    pub fn is_block_device(&self) -> bool {
        self.block_device
    }

    /// The granularity of I/O offsets and lengths: the loop device's logical block size
    /// (`loop_update_limits()` / `blk_queue_logical_block_size`).
    ///
    /// - Buffered: 512 (`SECTOR_SIZE`): the page cache accepts any size, loop exposes sectors.
    /// - `O_DIRECT`: `stx_dio_offset_align` from `statx(STATX_DIOALIGN)` (Linux 6.1+, what loop
    ///   itself uses since 6.12 via `kstat.dio_offset_align`); when the kernel or filesystem does
    ///   not report it, 4096, which every filesystem accepts. The buffer address must in addition
    ///   be aligned to [`DioAlign::mem_align`]; an [`AlignedBuf`] (4096) always is.
    pub fn logical_block_size(&self) -> u32 {
        self.logical_block_size
    }

    /// What `statx(STATX_DIOALIGN)` reported, whether or not the file is open `O_DIRECT`; `None`
    /// when the kernel or filesystem does not report it.
    pub fn dio_align(&self) -> Option<DioAlign> {
        self.dio_align
    }

    /// The file descriptor (still owned by the `BackingFile`).
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// The `FMODE_NOWAIT` probe: whether `preadv2(RWF_NOWAIT)` is accepted on this file (answered
    /// `EAGAIN` or data, not `EOPNOTSUPP`). Asked once, at open. The loop driver's
    /// `lo_backfile_support_nowait()` checks the same `f_mode & FMODE_NOWAIT`.
    ///
    /// This says nothing about buffered `NOWAIT` *writes*: the generic code also wants
    /// `FOP_BUFFER_WASYNC` (`EINVAL` without it, kernel-semantics.md §6.2), and ext4 refuses them
    /// earlier, with `EOPNOTSUPP`. (The loop driver tries `NOWAIT` only for `O_DIRECT`.)
    pub fn supports_nowait(&self) -> bool {
        self.nowait
    }

    /// The `FOP_DONTCACHE` probe: whether `preadv2(RWF_DONTCACHE)` is accepted (not `EOPNOTSUPP`
    /// or `EINVAL`). Asked once, at open.
    ///
    /// `RWF_DONTCACHE` is meant for buffered I/O. On an `O_DIRECT` file, `kiocb_set_rw_flags()`
    /// checks only the filesystem's `FOP_DONTCACHE` (and DAX), so Linux 6.18 accepts the flag (this
    /// probe says `true` on ext4, and `DONTCACHE` reads and writes succeed) and it does nothing:
    /// direct I/O does not go through the page cache.
    pub fn supports_dontcache(&self) -> bool {
        self.dontcache
    }

    /// One `preadv2(2)` at `off` with `flags`: the backing file's `->read_iter` with a kiocb's
    /// `IOCB_*` flags.
    ///
    /// Returns the bytes read, which may be fewer than asked: at end of file, and for an
    /// `RWF_NOWAIT` read of a partly cached range (`filemap_read()` returns what it already read,
    /// kernel-semantics.md §6.2). Reading at or after end of file returns `Ok(0)`. `EINTR` is
    /// retried; any other error (`EAGAIN` for `NOWAIT`, `EINVAL` for a misaligned `O_DIRECT`
    /// read, ...) is returned as the kernel gave it. Short reads are not retried: see
    /// [`BackingFile::read_exact_at`].
    pub fn read_at(&self, buf: &mut [u8], off: u64, flags: RwFlags) -> io::Result<usize> {
        let off = to_off_t(off)?;
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        retry_eintr(|| {
            // SAFETY: `iov` describes `buf`, which is valid for writes of `buf.len()` bytes and
            // exclusively borrowed for the call; the descriptor is open while `self` lives.
            unsafe { libc::preadv2(self.fd(), &iov, 1, off, flags.bits() as libc::c_int) }
        })
    }

    /// One `pwritev2(2)` at `off` with `flags`: the backing file's `->write_iter`. Returns the
    /// bytes written (possibly fewer than asked). `EINTR` is retried; other errors are returned as
    /// they are (`EBADF` on a read-only file, `EINVAL` for a misaligned `O_DIRECT` write or a
    /// buffered `NOWAIT` write without `FOP_BUFFER_WASYNC` (`EOPNOTSUPP` on ext4), `EAGAIN` for an
    /// `O_DIRECT` `NOWAIT` write that would allocate, `ENOSPC`, ...).
    pub fn write_at(&self, buf: &[u8], off: u64, flags: RwFlags) -> io::Result<usize> {
        let off = to_off_t(off)?;
        let iov = libc::iovec {
            iov_base: buf.as_ptr().cast_mut().cast(),
            iov_len: buf.len(),
        };
        retry_eintr(|| {
            // SAFETY: `iov` describes `buf`, valid for reads of `buf.len()` bytes for the call (the
            // kernel only reads through it); the descriptor is open while `self` lives.
            unsafe { libc::pwritev2(self.fd(), &iov, 1, off, flags.bits() as libc::c_int) }
        })
    }

    /// Reads until `buf` is full, as the loop worker's blocking `lo_rw_aio()` path completes a
    /// whole request: short reads are continued; a read returning 0 before the end is
    /// `UnexpectedEof`. Errors (including `EAGAIN` when `flags` has `NOWAIT`) are returned.
    pub fn read_exact_at(
        &self,
        mut buf: &mut [u8],
        mut off: u64,
        flags: RwFlags,
    ) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, off, flags)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "{}: end of file at offset {off} with {} bytes still to read",
                            self.path.display(),
                            buf.len()
                        ),
                    ))
                }
                n => {
                    buf = &mut buf[n..];
                    off += n as u64;
                }
            }
        }
        Ok(())
    }

    /// Writes all of `buf`, continuing short writes; a write of 0 bytes is `WriteZero`.
    pub fn write_all_at(&self, mut buf: &[u8], mut off: u64, flags: RwFlags) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write_at(buf, off, flags)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!(
                            "{}: wrote 0 bytes at offset {off} with {} bytes still to write",
                            self.path.display(),
                            buf.len()
                        ),
                    ))
                }
                n => {
                    buf = &buf[n..];
                    off += n as u64;
                }
            }
        }
        Ok(())
    }

    /// `fdatasync(2)`: `REQ_OP_FLUSH`, and a write's `REQ_PREFLUSH`/`REQ_FUA` (the loop driver's
    /// `lo_req_flush()` calls `vfs_fsync(file, 0)`).
    pub fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// `REQ_OP_DISCARD`: `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)` over
    /// `[off, off + len)`, as loop's `lo_fallocate()` does (a block device backing turns it into a
    /// discard). The size is unchanged; the range reads back as zeroes. `len == 0` does nothing.
    pub fn punch_hole(&self, off: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.fallocate(
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        )
    }

    /// `REQ_OP_WRITE_ZEROES`: `fallocate(FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)` over
    /// `[off, off + len)`. (Loop's `lo_req_zeroout` picks `FALLOC_FL_ZERO_RANGE` when the bio has
    /// `REQ_NOUNMAP` and `FALLOC_FL_PUNCH_HOLE` otherwise; both read back as zeroes.) When the
    /// filesystem has no `ZERO_RANGE` (`EOPNOTSUPP`), zeroes are written instead, clamped to the
    /// current size (as `KEEP_SIZE` would). `len == 0` does nothing.
    pub fn zero_range(&self, off: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        match self.fallocate(
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        ) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => self.write_zeroes(off, len),
            other => other,
        }
    }

    fn write_zeroes(&self, off: u64, len: u64) -> io::Result<()> {
        const CHUNK: usize = 1 << 20;
        let end = off.saturating_add(len).min(self.current_size()?);
        if end <= off {
            return Ok(());
        }
        let zeroes = AlignedBuf::new(CHUNK);
        let mut pos = off;
        while pos < end {
            let n = (end - pos).min(CHUNK as u64) as usize;
            self.write_all_at(&zeroes[..n], pos, RwFlags::empty())?;
            pos += n as u64;
        }
        Ok(())
    }

    fn fallocate(&self, mode: libc::c_int, off: u64, len: u64) -> io::Result<()> {
        let off_t = to_off_t(off)?;
        let len_t = to_off_t(len)?;
        retry_eintr(|| {
            // SAFETY: fallocate takes no pointers; the descriptor is open while `self` lives.
            unsafe { libc::fallocate(self.fd(), mode, off_t, len_t) as isize }
        })
        .map(drop)
    }

    /// Empties the page cache of this file, for benchmarks that want a cold cache:
    /// `fdatasync(2)` (dirty pages cannot be dropped) then `posix_fadvise(POSIX_FADV_DONTNEED)`
    /// over the whole file. Pages mapped or locked by someone else may stay.
    pub fn drop_cache(&self) -> io::Result<()> {
        self.sync_data()?;
        // SAFETY: posix_fadvise takes no pointers; the descriptor is open while `self` lives.
        let rc = unsafe { libc::posix_fadvise(self.fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            // posix_fadvise returns the error number instead of setting errno.
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }

    /// Page-cache residency of `[off, off + len)` (every page that overlaps it; `len == 0` means
    /// "to the end of the file", as for `cachestat(2)`), in pages.
    ///
    /// Uses `cachestat(2)` (Linux 6.5+, syscall 451). If the kernel does not have it (`ENOSYS`),
    /// falls back to `mmap(2)` + `mincore(2)`, which measures only `nr_cache` (the other fields
    /// are 0, and [`CacheStat::source`] says [`CacheStatSource::Mincore`]); since Linux 5.2
    /// `mincore` reports the page cache of a file only to a caller that owns it or could write it.
    pub fn cachestat(&self, off: u64, len: u64) -> io::Result<CacheStat> {
        let range = RawCachestatRange { off, len };
        let mut cs = RawCachestat::default();
        // SAFETY: `range` and `cs` are valid `struct cachestat_range` / `struct cachestat`
        // (repr(C), u64 fields) living across the call; flags are 0; the fd is open.
        let rc = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                self.fd(),
                &range as *const RawCachestatRange,
                &mut cs as *mut RawCachestat,
                0 as libc::c_uint,
            )
        };
        if rc == 0 {
            return Ok(CacheStat {
                nr_cache: cs.nr_cache,
                nr_dirty: cs.nr_dirty,
                nr_writeback: cs.nr_writeback,
                nr_evicted: cs.nr_evicted,
                nr_recently_evicted: cs.nr_recently_evicted,
                source: CacheStatSource::Cachestat,
            });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOSYS) {
            return self.cachestat_mincore(off, len);
        }
        Err(e)
    }

    /// The `mincore(2)` fallback of [`BackingFile::cachestat`] (only `nr_cache`).
    pub(crate) fn cachestat_mincore(&self, off: u64, len: u64) -> io::Result<CacheStat> {
        let none = CacheStat {
            source: CacheStatSource::Mincore,
            ..CacheStat::default()
        };
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = u64::try_from(page).ok().filter(|p| *p > 0).unwrap_or(4096);
        let size = self.current_size()?;
        let start = off / page * page;
        let want_end = if len == 0 {
            size
        } else {
            off.saturating_add(len)
        };
        let end = want_end.min(size).next_multiple_of(page);
        if end <= start {
            return Ok(none);
        }
        let map_len = usize::try_from(end - start)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "range too large to map"))?;
        // SAFETY: a fresh shared read-only mapping of the open file at a page-aligned offset; no
        // existing memory is affected.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                self.fd(),
                to_off_t(start)?,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut vec = vec![0u8; map_len.div_ceil(page as usize)];
        // SAFETY: `addr` is a live mapping of `map_len` bytes and `vec` has one byte per page of
        // it; the pages are never touched, so no SIGBUS past EOF.
        let rc = unsafe { libc::mincore(addr, map_len, vec.as_mut_ptr()) };
        let err = (rc != 0).then(io::Error::last_os_error);
        // SAFETY: `addr`/`map_len` is exactly the mapping made above, unmapped once.
        unsafe { libc::munmap(addr, map_len) };
        if let Some(e) = err {
            return Err(e);
        }
        Ok(CacheStat {
            nr_cache: vec.iter().filter(|&&b| b & 1 != 0).count() as u64,
            ..none
        })
    }
}

impl AsRawFd for BackingFile {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl AsFd for BackingFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_debug_names() {
        assert_eq!(
            format!("{:?}", RwFlags::NOWAIT | RwFlags::DONTCACHE),
            "NOWAIT|DONTCACHE"
        );
        assert_eq!(format!("{:?}", RwFlags::empty()), "(empty)");
        assert_eq!(
            format!("{:?}", RwFlags::from_bits_retain(0x8 | 0x100)),
            "NOWAIT|0x100"
        );
        assert_eq!(format!("{}", RwFlags::HIPRI | RwFlags::SYNC), "HIPRI|SYNC");
    }

    #[test]
    fn flags_match_the_uapi() {
        assert_eq!(RwFlags::HIPRI.bits(), libc::RWF_HIPRI as u32);
        assert_eq!(RwFlags::DSYNC.bits(), libc::RWF_DSYNC as u32);
        assert_eq!(RwFlags::SYNC.bits(), libc::RWF_SYNC as u32);
        assert_eq!(RwFlags::NOWAIT.bits(), libc::RWF_NOWAIT as u32);
        assert_eq!(RwFlags::APPEND.bits(), libc::RWF_APPEND as u32);
        assert_eq!(RwFlags::DONTCACHE.bits(), libc::RWF_DONTCACHE as u32);
    }

    #[test]
    fn flags_set_operations() {
        let mut f = RwFlags::NOWAIT;
        assert!(f.contains(RwFlags::NOWAIT));
        assert!(!f.contains(RwFlags::NOWAIT | RwFlags::DSYNC));
        assert!(f.intersects(RwFlags::NOWAIT | RwFlags::DSYNC));
        f |= RwFlags::DSYNC;
        assert!(f.contains(RwFlags::NOWAIT | RwFlags::DSYNC));
        f.remove(RwFlags::NOWAIT);
        assert_eq!(f, RwFlags::DSYNC);
        assert_eq!(f.difference(RwFlags::DSYNC), RwFlags::empty());
        assert!(RwFlags::empty().is_empty());
        assert!(RwFlags::default().is_empty());
    }

    #[test]
    fn mincore_fallback_agrees_with_cachestat() {
        // Not tmpfs-specific: any filesystem with a page cache will do (cachestat and mincore
        // both see shmem pages too).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mincore");
        let f = BackingFile::open(
            &path,
            &OpenOptions {
                create_size: Some(64 * 1024),
                ..OpenOptions::default()
            },
        )
        .unwrap();
        f.write_all_at(&[0x5a; 16 * 1024], 8192, RwFlags::empty())
            .unwrap();
        f.drop_cache().unwrap();
        let mut buf = vec![0u8; 16 * 1024];
        f.read_exact_at(&mut buf, 8192, RwFlags::empty()).unwrap();
        let cs = f.cachestat(8192, 16 * 1024).unwrap();
        let mc = f.cachestat_mincore(8192, 16 * 1024).unwrap();
        assert_eq!(cs.source, CacheStatSource::Cachestat);
        assert_eq!(mc.source, CacheStatSource::Mincore);
        assert_eq!(mc.nr_cache, cs.nr_cache);
        assert_eq!(mc.nr_cache, 4);
        // Past the end of the file there is nothing to map.
        assert_eq!(f.cachestat_mincore(1 << 30, 4096).unwrap().nr_cache, 0);
    }

    #[test]
    fn a_size_that_does_not_fit_is_refused_before_the_file_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let (avail, _) = crate::dev::space::available(dir.path()).unwrap();
        let path = dir.path().join("big");
        let e = BackingFile::open(
            &path,
            &OpenOptions {
                create_size: Some(avail + (1 << 20)),
                ..OpenOptions::default()
            },
        )
        .unwrap_err();
        assert!(matches!(e, BackingError::NoSpace { .. }), "{e}");
        assert!(e.to_string().contains("does not fit"), "{e}");
        assert!(!path.exists(), "nothing created");
    }
}
