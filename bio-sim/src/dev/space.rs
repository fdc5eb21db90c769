//! Room on the filesystem a backing file is created on: `statvfs(3)`'s `f_bavail * f_frsize`
//! (what an unprivileged writer may still use), checked before biosim creates or fills a file,
//! so a bench never writes the disk full; the filesystem's type from `statfs(2)`'s `f_type`
//! (the `*_MAGIC` numbers of include/uapi/linux/magic.h), so a refusal can say which filesystem
//! lacks what; and sizes that must be whole blocks.

use crate::dev::backing::{BackingError, BackingFile, OpenOptions};
use crate::dev::cleanup::TempFile;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Space left on the filesystem a run needs to keep free beyond its own file: 1 GiB or 5% of the
/// filesystem, whichever is smaller, so the machine stays usable.
pub fn reserve(total: u64) -> u64 {
    (1u64 << 30).min(total / 20)
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

/// Bytes available to this process on the filesystem holding `dir`, and the filesystem's size.
pub fn available(dir: &Path) -> io::Result<(u64, u64)> {
    let c = c_path(dir)?;
    // SAFETY: `st` is plain old data; statvfs fills it and reads only the NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `st` a valid out-pointer for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok((st.f_bavail as u64 * frsize, st.f_blocks as u64 * frsize))
}

/// `bytes` with a binary unit, for messages: `200 GiB`, `1.5 MiB`, `512 B`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Whether `bytes` fit in `avail` with [`reserve`]`(total)` to spare: `Err(keep)` if not.
fn fits(bytes: u64, avail: u64, total: u64) -> Result<(), u64> {
    let keep = reserve(total);
    if bytes.saturating_add(keep) > avail {
        Err(keep)
    } else {
        Ok(())
    }
}

/// Refuses a file of `bytes` in `dir` (named `what` in the message) unless it fits with
/// [`reserve`] to spare. Called before the file is created, so a refusal leaves nothing behind.
pub fn ensure_fits(dir: &Path, bytes: u64, what: &str) -> Result<(), String> {
    let (avail, total) =
        available(dir).map_err(|e| format!("{what}: statvfs {}: {e}", dir.display()))?;
    fits(bytes, avail, total).map_err(|keep| {
        format!(
            "{what}: {} does not fit in {}: {} free on its filesystem, and biosim keeps {} of it free",
            human(bytes),
            dir.display(),
            human(avail),
            human(keep)
        )
    })
}

/// [`ensure_fits`] for growing the file `path` to `size` bytes: only the growth must fit (an
/// existing file's blocks are counted at its apparent size, an upper bound for a sparse one). A
/// missing directory passes: creating the file there fails with open(2)'s own error.
pub fn ensure_file_fits(path: &Path, size: u64, what: &str) -> Result<(), String> {
    let have = std::fs::metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map_or(0, |m| m.len());
    if size <= have {
        return Ok(());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Ok(()); // nothing can be created there: left to open(2) to report
    }
    ensure_fits(dir, size - have, what)
}

/// Refuses `bytes` (given as `given` for `flag`) unless it is a whole number of `block`-byte
/// blocks: a size is never rounded behind the user's back.
pub fn ensure_block_multiple(
    bytes: u64,
    block: u64,
    flag: &str,
    given: &str,
) -> Result<(), String> {
    if block == 0 || bytes.is_multiple_of(block) {
        return Ok(());
    }
    let down = bytes / block * block;
    let up = down + block;
    Err(format!(
        "{flag} {given}: {bytes} bytes is not a multiple of the {block}-byte block size \
         ({} blocks and {} bytes); use {down} or {up}",
        bytes / block,
        bytes % block
    ))
}

/// Parses `text` given for `flag` (`64M`, `1G`, `4096`) and refuses it unless it is a whole
/// number of `block`-byte blocks ([`ensure_block_multiple`]).
pub fn parse_block_multiple(text: &str, flag: &str, block: u64) -> Result<u64, String> {
    let bytes = crate::perf::bench_common::parse_size(text).map_err(|e| format!("{flag}: {e}"))?;
    ensure_block_multiple(bytes, block, flag, text)?;
    Ok(bytes)
}

/// `statfs(2)`'s `f_type` of the filesystem holding `path`.
pub fn fs_magic(path: &Path) -> io::Result<u64> {
    let c = c_path(path)?;
    // SAFETY: `st` is plain old data that statfs fills.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `st` a valid out-pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // f_type is signed on some targets; the magic numbers are 32-bit patterns.
    Ok(st.f_type as u64 & 0xffff_ffff)
}

/// The name of a filesystem `f_type` (include/uapi/linux/magic.h), or `None` if unknown here.
pub fn fs_name(magic: u64) -> Option<&'static str> {
    Some(match magic {
        0xEF53 => "ext4",           // EXT4_SUPER_MAGIC (ext2/ext3 share it)
        0x5846_5342 => "xfs",       // XFS_SUPER_MAGIC
        0x9123_683E => "btrfs",     // BTRFS_SUPER_MAGIC
        0x0102_1994 => "tmpfs",     // TMPFS_MAGIC
        0x8584_58F6 => "ramfs",     // RAMFS_MAGIC
        0x794C_7630 => "overlayfs", // OVERLAYFS_SUPER_MAGIC
        0x6969 => "nfs",            // NFS_SUPER_MAGIC
        0x6573_5546 => "fuse",      // FUSE_SUPER_MAGIC
        0xF2F5_2010 => "f2fs",      // F2FS_SUPER_MAGIC
        0x0102_1997 => "9p",        // V9FS_MAGIC
        0x4d44 => "vfat",           // MSDOS_SUPER_MAGIC
        0x7371_7368 => "squashfs",  // SQUASHFS_MAGIC
        0x2FC1_2FC1 => "zfs",       // ZFS_SUPER_MAGIC (out of tree)
        0x9FA0 => "proc",           // PROC_SUPER_MAGIC
        0x6265_6572 => "sysfs",     // SYSFS_MAGIC
        _ => return None,
    })
}

/// `tmpfs (f_type 0x01021994)` for the filesystem holding `path`; `an unknown filesystem` if
/// `statfs` fails.
pub fn describe_fs(path: &Path) -> String {
    match fs_magic(path) {
        Ok(m) => format!(
            "{} (f_type {m:#010x})",
            fs_name(m).unwrap_or("an unknown filesystem")
        ),
        Err(e) => format!("an unknown filesystem (statfs: {e})"),
    }
}

/// A bench's scratch file of `size` bytes in `dir` (`--dir`), opened `O_DIRECT` with `direct`:
/// checked before anything is created (`dir` a directory, `size` fits with [`reserve`] to
/// spare), then a [`TempFile`] (removed on drop, error, panic, Ctrl-C and SIGTERM) opened as a
/// [`BackingFile`] with `create_size`. An `O_DIRECT` open the filesystem refuses (`EINVAL`) is a
/// refusal naming the directory and the filesystem's type.
pub fn scratch_file(
    dir: &Path,
    prefix: &str,
    size: u64,
    direct: bool,
) -> Result<(TempFile, BackingFile), ScratchError> {
    let refused = ScratchError::Refused;
    if !dir.is_dir() {
        return Err(refused(format!("--dir {}: not a directory", dir.display())));
    }
    ensure_fits(dir, size, "--size").map_err(refused)?;
    let tmp = TempFile::create_in(dir, prefix)
        .map_err(|e| refused(format!("--dir {}: {e}", dir.display())))?;
    let opts = OpenOptions {
        direct,
        read_only: false,
        create_size: Some(size),
    };
    match BackingFile::open(tmp.path(), &opts) {
        Ok(f) => Ok((tmp, f)),
        Err(BackingError::Open { source, .. })
            if direct && source.raw_os_error() == Some(libc::EINVAL) =>
        {
            Err(refused(format!(
                "--dir {}: {} does not support O_DIRECT (open with O_DIRECT: {source}); use a \
                 directory on a disk filesystem (ext4, xfs, btrfs)",
                dir.display(),
                describe_fs(dir)
            )))
        }
        Err(e) => Err(ScratchError::Backing(e)),
    }
}

/// For a run that can go on buffered (or without the NOWAIT-first path) where [`ensure_nowait`]
/// would refuse: the warning to print, naming the directory and the filesystem; `None` where
/// the kernel takes `RWF_NOWAIT`. (Measured on 6.18: ext4 takes it for direct reads and buffered
/// reads, answers `EAGAIN` for a direct write into a hole, and refuses buffered writes with
/// `EOPNOTSUPP` in `ext4_buffered_write_iter()`; tmpfs refuses every one.)
pub fn nowait_warning(file: &BackingFile, dir: &Path) -> Option<String> {
    (!file.supports_nowait()).then(|| {
        format!(
            "warning: --dir {}: {} refuses RWF_NOWAIT (FMODE_NOWAIT is off): every NOWAIT attempt \
             falls back at once, so the NOWAIT comparison does not apply to this run",
            dir.display(),
            describe_fs(dir)
        )
    })
}

/// Why [`scratch_file`] made no file.
#[derive(Debug, thiserror::Error)]
pub enum ScratchError {
    /// The request cannot be met here; the user can fix it (exit 2).
    #[error("{0}")]
    Refused(String),
    /// The file failed while it was opened or extended (`EFBIG` from `ftruncate`: exit 1).
    #[error(transparent)]
    Backing(#[from] BackingError),
}

impl From<ScratchError> for crate::perf::bench_common::BenchError {
    fn from(e: ScratchError) -> Self {
        match e {
            ScratchError::Refused(why) => Self::Param(why),
            ScratchError::Backing(b) => Self::Backing(b),
        }
    }
}

/// Refuses a bench whose comparison is about `RWF_NOWAIT` on a file where the kernel refuses the
/// flag (`FMODE_NOWAIT` off: `preadv2(RWF_NOWAIT)` fails `EOPNOTSUPP`, as on tmpfs), naming the
/// directory and the filesystem.
pub fn ensure_nowait(file: &BackingFile, dir: &Path) -> Result<(), String> {
    if file.supports_nowait() {
        return Ok(());
    }
    Err(format!(
        "--dir {}: {} refuses RWF_NOWAIT (FMODE_NOWAIT is off; preadv2 fails EOPNOTSUPP), so the \
         NOWAIT-first designs cannot be compared with the worker path here; use a directory on a \
         disk filesystem (ext4, xfs, btrfs)",
        dir.display(),
        describe_fs(dir)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_fits_only_with_the_reserve_to_spare() {
        let gib = 1u64 << 30;
        // 100 GiB filesystem: 1 GiB kept.
        assert_eq!(
            fits(9 * gib, 10 * gib, 100 * gib),
            Ok(()),
            "exactly avail - keep"
        );
        assert_eq!(
            fits(9 * gib + 1, 10 * gib, 100 * gib),
            Err(gib),
            "one byte more"
        );
        // 10 GiB filesystem: 5% kept.
        assert_eq!(fits(gib, gib, 10 * gib), Err(gib / 2));
        assert_eq!(fits(u64::MAX, 10 * gib, 100 * gib), Err(gib), "no overflow");
        assert_eq!(reserve(0), 0);
    }

    #[test]
    fn more_than_the_free_space_is_refused_naming_the_directory_and_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let (avail, _) = available(dir.path()).unwrap();
        let e = ensure_fits(dir.path(), avail + 1, "--size").unwrap_err();
        assert!(e.starts_with("--size: "), "{e}");
        assert!(e.contains(&dir.path().display().to_string()), "{e}");
        assert!(e.contains("free on its filesystem"), "{e}");
        let e = ensure_fits(Path::new("/nonexistent/dir"), 1, "--dir").unwrap_err();
        assert!(e.contains("statvfs /nonexistent/dir"), "{e}");
        // A file already as large needs no room; growing it only needs the growth.
        let f = dir.path().join("f");
        std::fs::write(&f, vec![0; 4096]).unwrap();
        assert_eq!(ensure_file_fits(&f, 4096, "x"), Ok(()));
        assert!(ensure_file_fits(&f, avail + 4096 + 1, "x").is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn sizes_that_are_not_whole_blocks_are_refused_not_rounded() {
        assert_eq!(ensure_block_multiple(1 << 20, 4096, "--size", "1M"), Ok(()));
        let e = ensure_block_multiple(1025 << 10, 4096, "--size", "1025K").unwrap_err();
        assert!(e.starts_with("--size 1025K: "), "{e}");
        assert!(e.contains("4096-byte block size"), "{e}");
        assert!(e.contains("use 1048576 or 1052672"), "{e}");
        assert_eq!(parse_block_multiple("8K", "--size", 4096), Ok(8192));
        assert!(parse_block_multiple("1025K", "--size", 4096)
            .unwrap_err()
            .starts_with("--size 1025K: "));
        assert!(parse_block_multiple("x", "--size", 4096)
            .unwrap_err()
            .starts_with("--size: size `x`"));
    }

    #[test]
    fn filesystems_are_named_by_their_magic() {
        assert_eq!(fs_name(0x0102_1994), Some("tmpfs"));
        assert_eq!(fs_name(0xEF53), Some("ext4"));
        assert_eq!(fs_name(1), None);
        assert!(describe_fs(Path::new("/proc")).starts_with("proc (f_type 0x00009fa0)"));
        assert!(describe_fs(Path::new("/nonexistent")).contains("statfs"));
        assert_eq!(human(200 << 30), "200 GiB");
        assert_eq!(human(1536 << 10), "1.5 MiB");
        assert_eq!(human(512), "512 B");
    }

    #[test]
    fn a_scratch_file_that_does_not_fit_is_refused_before_it_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let (avail, _) = available(dir.path()).unwrap();
        let big = (avail / 4096 + 1) * 4096;
        let e = scratch_file(dir.path(), "t", big, true)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--size: "), "{e}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "nothing created"
        );
        let e = scratch_file(&dir.path().join("no"), "t", 4096, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a directory"), "{e}");
        let (tmp, f) = scratch_file(dir.path(), "t", 1 << 20, true).unwrap();
        assert_eq!(f.size(), 1 << 20);
        // The twin of the tmpfs case: a filesystem that takes RWF_NOWAIT passes both checks.
        assert_eq!(ensure_nowait(&f, dir.path()).is_ok(), f.supports_nowait());
        assert_eq!(
            nowait_warning(&f, dir.path()).is_none(),
            f.supports_nowait()
        );
        drop((tmp, f));
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "removed on drop"
        );
    }

    #[test]
    fn tmpfs_refuses_nowait_naming_the_directory_and_the_filesystem() {
        // Measured on 6.18: tmpfs opens O_DIRECT (6.6's "trivial" direct I/O through the page
        // cache) but refuses RWF_NOWAIT with EOPNOTSUPP. A machine without /dev/shm on tmpfs
        // has nothing to show here.
        let shm = Path::new("/dev/shm");
        if fs_magic(shm).ok() != Some(0x0102_1994) {
            eprintln!("skipped: /dev/shm is not a tmpfs here");
            return;
        }
        match scratch_file(shm, "biosim-space-test", 1 << 20, true) {
            Ok((tmp, f)) => {
                let e = ensure_nowait(&f, shm).unwrap_err();
                let w = nowait_warning(&f, shm).expect("a warning on tmpfs");
                assert!(w.contains("does not apply") && w.contains("tmpfs"), "{w}");
                assert!(
                    e.contains("--dir /dev/shm: tmpfs (f_type 0x01021994)"),
                    "{e}"
                );
                let p = tmp.path().to_owned();
                drop((tmp, f));
                assert!(!p.exists());
            }
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("tmpfs") && e.contains("O_DIRECT"), "{e}");
            }
        }
    }
}
