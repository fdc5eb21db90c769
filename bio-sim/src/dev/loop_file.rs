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
use super::uring::{UringCompletion, UringEngine, UringOp};
use bio_core::drivers::block::loop_drv::{AioRequest, Fallocate, LoopBacking, LoopDevice};
use bio_core::errno::Errno;
use bio_core::kernel::CpuId;
use bio_core::{Cpu, Kernel};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

/// The loop driver's backing file, over a real file.
#[derive(Debug)]
pub struct FileBacking {
    file: Arc<BackingFile>,
    /// `RWF_*` flags added to every read and write (e.g. `RWF_DONTCACHE` for a buffered backing).
    extra: RwFlags,
    syscalls: AtomicU64,
}

/// The errno of an I/O error (`EIO` when it has none).
fn errno(e: &io::Error) -> Errno {
    e.raw_os_error()
        .and_then(Errno::from_i32)
        .unwrap_or(Errno::EIO)
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

    fn rw(&self, write: bool, pos: u64, buf: &mut [u8], nowait: bool) -> Result<usize, Errno> {
        let mut flags = self.extra;
        if nowait {
            flags |= RwFlags::NOWAIT;
        }
        // A NOWAIT call is one attempt; the worker's blocking call completes the segment.
        let all = !nowait;
        if self.needs_bounce(buf) {
            // A length O_DIRECT cannot take is the kernel's EINVAL, not a panic.
            let mut bounce =
                AlignedBuf::try_with_alignment(buf.len(), 4096).map_err(|_| Errno::EINVAL)?;
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

    fn fsync(&self) -> Result<(), Errno> {
        self.file.sync_data().map_err(|e| errno(&e))
    }

    fn fallocate(&self, mode: Fallocate, pos: u64, len: u64) -> Result<(), Errno> {
        match mode {
            Fallocate::PunchHole => self.file.punch_hole(pos, len),
            Fallocate::ZeroRange => self.file.zero_range(pos, len),
        }
        .map_err(|e| errno(&e))
    }
}

/// The loop driver's backing file over a real file with **asynchronous** direct I/O: reads and
/// writes go to an [`UringEngine`] (`IORING_OP_READ`/`WRITE` with `RWF_NOWAIT` for the NOWAIT
/// attempt), `submit_aio` returns at once (`-EIOCBQUEUED`), and each completion is delivered as a
/// hard interrupt on the submitting CPU whose handler calls the loop device's `ki_complete()`
/// ([`LoopDevice::lo_rw_aio_complete_async`]). This is the kernel's shape: direct I/O completes
/// from the disk interrupt, and `blk_mq_complete_request()` then ends the loop bio in
/// `BLOCK_SOFTIRQ`.
///
/// One `UringBacking` serves one loop device: call [`UringBacking::attach`] with it before its
/// first I/O (until then asynchronous submissions are refused with `EIO`, so nothing can be lost
/// in a completion with nowhere to go).
pub struct UringBacking {
    file: Arc<BackingFile>,
    /// The synchronous paths (non-aio commands, flush, fallocate).
    sync: FileBacking,
    engine: UringEngine,
    target: Arc<OnceLock<Target>>,
    cpus: Arc<Mutex<HashMap<u64, CpuId>>>,
}

struct Target {
    lo: Weak<LoopDevice>,
    kernel: Arc<Kernel>,
}

impl fmt::Debug for UringBacking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UringBacking")
            .field("file", &self.file.path())
            .field("in_flight", &self.engine.in_flight())
            .finish()
    }
}

impl UringBacking {
    /// An io_uring engine of `entries` over `file`.
    pub fn new(file: Arc<BackingFile>, entries: u32) -> io::Result<Self> {
        let target: Arc<OnceLock<Target>> = Arc::default();
        let cpus: Arc<Mutex<HashMap<u64, CpuId>>> = Arc::default();
        let (t, c) = (Arc::clone(&target), Arc::clone(&cpus));
        let engine = UringEngine::new(
            Arc::clone(&file),
            entries,
            RwFlags::empty(),
            move |done: UringCompletion| {
                let Some(t) = t.get() else { return };
                let token = done.token;
                let cpu = c.lock().remove(&token).unwrap_or(CpuId(0));
                let res = done.result.map_err(|e| errno(&e));
                let data = done.op.into_buf().map(|b| b.to_vec()).unwrap_or_default();
                let lo = t.lo.clone();
                let handler: bio_core::irq::IrqHandler = Box::new(move |cx: &Cpu| {
                    if let Some(lo) = lo.upgrade() {
                        lo.lo_rw_aio_complete_async(token, res, data, cx);
                    }
                });
                // The submitting CPU; if it went offline meanwhile, the first online one (as the
                // kernel migrates a dying CPU's interrupts).
                if let Err(e) = t.kernel.raise_irq(cpu, "loop-aio", handler) {
                    if let Some(&other) = t.kernel.online_cpus().first() {
                        let _ = t.kernel.raise_irq(other, "loop-aio", e.handler);
                    }
                }
            },
        )?;
        Ok(UringBacking {
            sync: FileBacking::new(Arc::clone(&file)),
            file,
            engine,
            target,
            cpus,
        })
    }

    /// Routes completions to `lo` on `kernel`'s CPUs. A second call for another device is an
    /// error: completions are routed per backing.
    pub fn attach(&self, lo: &Arc<LoopDevice>, kernel: &Arc<Kernel>) -> Result<(), String> {
        let t = self.target.get_or_init(|| Target {
            lo: Arc::downgrade(lo),
            kernel: Arc::clone(kernel),
        });
        if t.lo.ptr_eq(&Arc::downgrade(lo)) {
            Ok(())
        } else {
            Err(format!(
                "{}: this io_uring backing already serves another loop device",
                self.file.path().display()
            ))
        }
    }

    /// Waits until every submitted I/O has completed (its interrupt raised).
    pub fn wait_idle(&self) {
        self.engine.wait_idle();
    }

    /// I/Os in flight in the ring.
    pub fn in_flight(&self) -> usize {
        self.engine.in_flight()
    }
}

impl LoopBacking for UringBacking {
    fn size(&self) -> u64 {
        self.sync.size()
    }

    fn is_block_device(&self) -> bool {
        self.sync.is_block_device()
    }

    fn fmode_nowait(&self) -> bool {
        self.sync.fmode_nowait()
    }

    /// Non-aio commands (a buffered loop device, the flush sequence) stay synchronous.
    fn rw(&self, write: bool, pos: u64, buf: &mut [u8], nowait: bool) -> Result<usize, Errno> {
        self.sync.rw(write, pos, buf, nowait)
    }

    fn fsync(&self) -> Result<(), Errno> {
        self.sync.fsync()
    }

    fn fallocate(&self, mode: Fallocate, pos: u64, len: u64) -> Result<(), Errno> {
        self.sync.fallocate(mode, pos, len)
    }

    fn is_async(&self) -> bool {
        true
    }

    fn submit_aio(&self, req: AioRequest) -> Result<(), (AioRequest, Errno)> {
        if self.target.get().is_none() {
            return Err((req, Errno::EIO)); // not attached: its completion would have nowhere to go
        }
        let Ok(mut buf) = AlignedBuf::try_with_alignment(req.data.len(), 4096) else {
            return Err((req, Errno::EINVAL));
        };
        if req.write {
            buf.copy_from_slice(&req.data);
        }
        let AioRequest {
            token,
            write,
            pos,
            nowait,
            cpu,
            ..
        } = req;
        let op = if write {
            UringOp::Write { buf, off: pos }
        } else {
            UringOp::Read { buf, off: pos }
        };
        let flags = if nowait {
            RwFlags::NOWAIT
        } else {
            RwFlags::empty()
        };
        self.cpus.lock().insert(token, cpu);
        self.engine
            .submit_with_flags(token, op, flags)
            .map_err(|e| {
                self.cpus.lock().remove(&token);
                let data = e.op.into_buf().map(|b| b.to_vec()).unwrap_or_default();
                (
                    AioRequest {
                        token,
                        write,
                        pos,
                        data,
                        nowait,
                        cpu,
                    },
                    Errno::EIO,
                )
            })
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
            Err(e) => assert_eq!(
                e,
                Errno::EAGAIN,
                "ext4 refuses a NOWAIT DIO write that allocates"
            ),
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
