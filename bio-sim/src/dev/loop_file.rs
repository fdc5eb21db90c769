//! A real file as the loop driver's backing file: [`LoopBacking`] (bio-core's model of
//! `lo->lo_backing_file`) over a [`BackingFile`] (preadv2/pwritev2 with `RWF_*` flags).
//!
//! The `IOCB_NOWAIT` attempt of `lo_rw_aio_nowait()` becomes one `preadv2`/`pwritev2` with
//! `RWF_NOWAIT`, so `-EAGAIN` comes from this machine's filesystem, not from a model: ext4's
//! direct-I/O write checks refuse a NOWAIT write into a hole, exactly the sparse-file case of patch
//! 6/6. The worker's blocking path loops until the whole segment is done, as `lo_rw_aio()` would
//! with a complete iov_iter.
//!
//! With `O_DIRECT` (`LO_FLAGS_DIRECT_IO`) a bio segment that is not aligned to the file's DIO
//! alignment is bounced through an [`AlignedBuf`]; positions and lengths must be aligned (the
//! loop device's logical block size says how), else the kernel's `EINVAL` is the result, as it
//! would be for a misaligned bio on a real loop device.

use super::aligned::AlignedBuf;
use super::backing::{BackingFile, RwFlags};
#[cfg(test)]
use bio_core::drivers::block::loop_drv::EAGAIN;
use bio_core::drivers::block::loop_drv::{Fallocate, LoopBacking, EIO};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The loop driver's backing file, over a real file.
#[derive(Debug)]
pub struct FileBacking {
    file: Arc<BackingFile>,
    /// `RWF_*` flags added to every read and write (e.g. `RWF_DONTCACHE` for a buffered backing).
    extra: RwFlags,
    syscalls: AtomicU64,
}

/// The positive errno of an I/O error (`EIO` when it has none).
fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(EIO)
}

impl FileBacking {
    /// A backing over `file`.
    pub fn new(file: Arc<BackingFile>) -> Self {
        Self::with_flags(file, RwFlags::empty())
    }

    /// A backing over `file` whose every read and write also carries `extra`.
    pub fn with_flags(file: Arc<BackingFile>, extra: RwFlags) -> Self {
        FileBacking {
            file,
            extra,
            syscalls: AtomicU64::new(0),
        }
    }

    /// The file.
    pub fn file(&self) -> &Arc<BackingFile> {
        &self.file
    }

    /// preadv2/pwritev2 calls made so far (NOWAIT attempts included).
    pub fn syscalls(&self) -> u64 {
        self.syscalls.load(Ordering::Relaxed)
    }

    fn needs_bounce(&self, buf: &[u8]) -> bool {
        if !self.file.direct() {
            return false;
        }
        let align = self
            .file
            .dio_align()
            .map_or(4096, |a| a.mem_align.max(1) as usize);
        !(buf.as_ptr() as usize).is_multiple_of(align)
    }

    /// One call, or until done (`all`); returns bytes done.
    fn io(
        &self,
        write: bool,
        pos: u64,
        buf: &mut [u8],
        flags: RwFlags,
        all: bool,
    ) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            self.syscalls.fetch_add(1, Ordering::Relaxed);
            let off = pos + done as u64;
            let n = if write {
                self.file.write_at(&buf[done..], off, flags)?
            } else {
                self.file.read_at(&mut buf[done..], off, flags)?
            };
            done += n;
            if n == 0 || !all {
                break;
            }
        }
        Ok(done)
    }
}

impl LoopBacking for FileBacking {
    fn size(&self) -> u64 {
        self.file.size()
    }

    fn is_block_device(&self) -> bool {
        self.file.is_block_device()
    }

    fn fmode_nowait(&self) -> bool {
        self.file.supports_nowait()
    }

    fn rw(&self, write: bool, pos: u64, buf: &mut [u8], nowait: bool) -> Result<usize, i32> {
        let mut flags = self.extra;
        if nowait {
            flags |= RwFlags::NOWAIT;
        }
        // A NOWAIT call is one attempt; the worker's blocking call completes the segment.
        let all = !nowait;
        if self.needs_bounce(buf) {
            // A length O_DIRECT cannot take is the kernel's EINVAL, not a panic.
            const EINVAL: i32 = 22;
            let mut bounce = AlignedBuf::try_with_alignment(buf.len(), 4096).map_err(|_| EINVAL)?;
            bounce.copy_from_slice(buf);
            let n = self
                .io(write, pos, &mut bounce, flags, all)
                .map_err(|e| errno(&e))?;
            if !write {
                buf[..n].copy_from_slice(&bounce[..n]);
            }
            return Ok(n);
        }
        self.io(write, pos, buf, flags, all).map_err(|e| errno(&e))
    }

    fn fsync(&self) -> Result<(), i32> {
        self.file.sync_data().map_err(|e| errno(&e))
    }

    fn fallocate(&self, mode: Fallocate, pos: u64, len: u64) -> Result<(), i32> {
        match mode {
            Fallocate::PunchHole => self.file.punch_hole(pos, len),
            Fallocate::ZeroRange => self.file.zero_range(pos, len),
        }
        .map_err(|e| errno(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::backing::OpenOptions;

    /// A sparse 1 MiB file in the temp dir, or `None` where its filesystem has no O_DIRECT
    /// (tmpfs before 6.6).
    fn file(direct: bool, name: &str) -> Option<(tempfile::TempDir, Arc<BackingFile>)> {
        let dir = tempfile::tempdir().unwrap();
        match BackingFile::open(
            &dir.path().join(name),
            &OpenOptions {
                direct,
                read_only: false,
                create_size: Some(1 << 20),
            },
        ) {
            Ok(f) => Some((dir, Arc::new(f))),
            Err(e) => {
                eprintln!("skipped: {e}");
                None
            }
        }
    }

    #[test]
    fn a_nowait_direct_write_into_a_hole_is_eagain_and_the_blocking_path_writes_it() {
        let Some((_d, f)) = file(true, "sparse.img") else {
            return;
        };
        let b = FileBacking::new(Arc::clone(&f));
        let mut data = vec![7u8; 4096]; // a Vec: not 4096-aligned in general, so maybe bounced
        match b.rw(true, 8192, &mut data, true) {
            Err(e) => assert_eq!(e, EAGAIN, "ext4 refuses a NOWAIT DIO write that allocates"),
            Ok(n) => assert_eq!(n, 4096, "a filesystem that can: the write is done"),
        }
        assert_eq!(b.rw(true, 8192, &mut data, false), Ok(4096));
        let mut back = vec![0u8; 4096];
        assert_eq!(
            b.rw(false, 8192, &mut back, true),
            Ok(4096),
            "a NOWAIT read of written blocks"
        );
        assert_eq!(back, data);
        assert_eq!(
            b.rw(true, 8192, &mut data, true),
            Ok(4096),
            "an overwrite does not block"
        );
    }
}
