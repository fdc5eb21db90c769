//! A test rig for the page cache, not a kernel model: [`IrqDisk`], a memory-backed disk whose
//! completions arrive as the device's hard IRQ on a chosen CPU (as an NVMe's `nvme_irq()` →
//! `blk_mq_end_request()` → `bio_endio()` do), and [`Rig`], which boots a kernel for a design,
//! drives the step-wise page-cache calls to completion and runs the deferred work
//! (`bio_complete_work_fn`, `xfs_end_io`, RFC v3's work) the way the kernel's workers would.

// Bios travel boxed everywhere in bio-core (`Box<Bio>` moves from submitter to driver to
// `bio_endio()`); a list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

use super::dontcache::{DontcacheDesign, PageCacheConfig, WritebackPath};
use super::filemap::{AddressSpace, Blocked, IocbFlags, PAGE_SECTORS, PAGE_SIZE};
use crate::block::complete_in_task::bio_complete_init;
use crate::block::{bio_endio, Bio, ReqOp, BLK_STS_IOERR};
use crate::errno::Errno;
use crate::kernel::{Cpu, CpuId, Kernel, KernelConfig};
use crate::sync::{Mutex, UntrackedArc};
use crate::workqueue::PoolId;
use std::collections::{HashMap, VecDeque};

/// A memory disk: bios queue until [`IrqDisk::complete_all`] completes them in hardirq.
#[derive(Debug)]
pub struct IrqDisk {
    pages: Mutex<HashMap<u64, Vec<u8>>>,
    queue: Mutex<VecDeque<Box<Bio>>>,
    /// Fail the next this-many bios with `BLK_STS_IOERR`.
    fail_next: Mutex<u32>,
}

impl IrqDisk {
    /// An empty (zeroed) disk.
    pub fn new() -> Self {
        Self {
            pages: Mutex::new(HashMap::new()),
            queue: Mutex::new(VecDeque::new()),
            fail_next: Mutex::new(0),
        }
    }

    /// Queues bios (`submit_bio()`).
    pub fn submit(&self, bios: impl IntoIterator<Item = Box<Bio>>) {
        self.queue.lock().extend(bios);
    }

    /// Bios submitted and not completed.
    pub fn in_flight(&self) -> usize {
        self.queue.lock().len()
    }

    /// Makes the next `n` bios fail.
    pub fn fail_next(&self, n: u32) {
        *self.fail_next.lock() = n;
    }

    /// The bytes of page `index` on the disk.
    pub fn page(&self, index: u64) -> Vec<u8> {
        self.pages
            .lock()
            .get(&index)
            .cloned()
            .unwrap_or_else(|| vec![0; PAGE_SIZE])
    }

    /// Completes every queued bio in submission order from hard-IRQ context on `cx`'s CPU:
    /// a write stores its pages, a read gets them; then `bio_endio()`. Returns how many.
    pub fn complete_all(&self, cx: &Cpu) -> usize {
        self.complete_all_in(cx, Completion::Hardirq)
    }

    /// [`IrqDisk::complete_all`] with `bio_endio()` called in `ctx`.
    pub fn complete_all_in(&self, cx: &Cpu, ctx: Completion) -> usize {
        self.complete_some_in(cx, ctx, usize::MAX)
    }

    /// Completes at most `max` queued bios, oldest first, with `bio_endio()` in `ctx`.
    pub fn complete_some_in(&self, cx: &Cpu, ctx: Completion, max: usize) -> usize {
        let mut n = 0;
        loop {
            if n == max {
                return n;
            }
            let Some(mut bio) = self.queue.lock().pop_front() else {
                return n;
            };
            n += 1;
            let fail = {
                let mut f = self.fail_next.lock();
                let fail = *f > 0;
                *f = f.saturating_sub(1);
                fail
            };
            if fail {
                bio.set_status(BLK_STS_IOERR);
            } else {
                let first = bio.bi_iter.bi_sector / PAGE_SECTORS;
                let mut pages = self.pages.lock();
                for (i, seg) in bio.bi_io_vec.iter_mut().enumerate() {
                    let index = first + i as u64;
                    match bio.bi_opf.op {
                        ReqOp::Write => {
                            pages.insert(index, seg.data.clone());
                        }
                        ReqOp::Read => {
                            seg.data = pages
                                .get(&index)
                                .cloned()
                                .unwrap_or_else(|| vec![0; PAGE_SIZE]);
                        }
                        _ => {}
                    }
                }
            }
            match ctx {
                Completion::Hardirq => cx.with_hardirq(|cx| bio_endio(bio, cx)),
                Completion::AtomicTask => cx.with_preempt_disabled(|cx| bio_endio(bio, cx)),
                Completion::Task => bio_endio(bio, cx),
            }
        }
    }
}

impl Default for IrqDisk {
    fn default() -> Self {
        Self::new()
    }
}

/// Where [`IrqDisk`] calls `bio_endio()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Completion {
    /// The device's hard IRQ handler (the default: NVMe, virtio-blk).
    #[default]
    Hardirq,
    /// Task context with preemption disabled (`in_task()` is true, sleeping is not allowed).
    AtomicTask,
    /// Preemptible task context (a polled or threaded completion).
    Task,
}

/// Runs timers and workers on every CPU until nothing is left to run (advancing jiffies when only
/// timers remain, for the 1-jiffy delayed work of v5/v6). Returns the work items run.
pub fn run_deferred(kernel: &UntrackedArc<Kernel>) -> usize {
    let mut ran = 0;
    let mut idle_rounds = 0;
    while idle_rounds < 3 {
        let mut round = 0;
        for c in kernel.online_cpus() {
            let Some(cx) = kernel.cpu(c) else { continue };
            round += kernel.run_timers(&cx);
            while kernel.run_worker(PoolId::Cpu(c), &cx).is_some() {
                round += 1;
                ran += 1;
            }
            while kernel.run_worker(PoolId::Unbound, &cx).is_some() {
                round += 1;
                ran += 1;
            }
        }
        if round == 0 {
            idle_rounds += 1;
            kernel.advance_jiffies(1);
        } else {
            idle_rounds = 0;
        }
    }
    ran
}

/// A kernel booted for a design, one mapping on an [`IrqDisk`], a task CPU (0) and an IRQ CPU.
#[derive(Debug)]
pub struct Rig {
    /// The kernel.
    pub kernel: UntrackedArc<Kernel>,
    /// The block device's page cache.
    pub mapping: UntrackedArc<AddressSpace>,
    /// The disk.
    pub disk: IrqDisk,
    /// Where the reader/writer task runs.
    pub task_cpu: CpuId,
    /// Where the device IRQ arrives.
    pub irq_cpu: CpuId,
    /// Where the disk calls `bio_endio()`.
    pub completion: Completion,
}

/// A bound on the steps of one call, so a driver bug fails a test instead of hanging it.
const MAX_STEPS: usize = 10_000;

impl Rig {
    /// Boots 2 CPUs with `design`'s variant (`bio_complete_init()`) and makes the mapping.
    pub fn new(config: PageCacheConfig) -> Rig {
        let kernel = Kernel::new(KernelConfig::default(), 2).expect("the default config is valid");
        bio_complete_init(&kernel, config.design.boot_variant(), None)
            .expect("a fresh kernel initialises the batcher");
        let mapping = AddressSpace::new(&kernel, config);
        Rig {
            kernel,
            mapping,
            disk: IrqDisk::new(),
            task_cpu: CpuId(0),
            irq_cpu: CpuId(1),
            completion: Completion::Hardirq,
        }
    }

    /// [`Rig::new`] of `PageCacheConfig::new(design, path)` changed by `f`.
    pub fn with(
        design: DontcacheDesign,
        path: WritebackPath,
        f: impl FnOnce(PageCacheConfig) -> PageCacheConfig,
    ) -> Rig {
        Rig::new(f(PageCacheConfig::new(design, path)))
    }

    /// The task CPU's context.
    pub fn task(&self) -> Cpu {
        self.kernel.cpu(self.task_cpu).expect("CPU0 exists")
    }

    /// Completes every bio in flight in hardirq on the IRQ CPU and runs the deferred work, until
    /// nothing is in flight.
    pub fn settle(&self) {
        let irq = self.kernel.cpu(self.irq_cpu).expect("CPU1 exists");
        for _ in 0..MAX_STEPS {
            let n = self.disk.complete_all_in(&irq, self.completion);
            let w = run_deferred(&self.kernel);
            // The flusher's bios (wb_workfn ran in run_deferred()).
            self.disk.submit(self.mapping.wb_take_submitted());
            if n == 0 && w == 0 && self.disk.in_flight() == 0 {
                return;
            }
        }
        panic!("the rig did not settle");
    }

    /// Completes at most `n` bios in flight (in the rig's context on the IRQ CPU) and runs the
    /// deferred work once.
    pub fn settle_some(&self, n: usize) {
        let irq = self.kernel.cpu(self.irq_cpu).expect("CPU1 exists");
        self.disk.complete_some_in(&irq, self.completion, n);
        run_deferred(&self.kernel);
        self.disk.submit(self.mapping.wb_take_submitted());
    }

    /// `pread()` of `len` bytes at `pos` with `flags`, driven to the end (short at the end of
    /// the device).
    pub fn pread(&self, pos: u64, len: usize, flags: IocbFlags) -> Result<Vec<u8>, Errno> {
        let cx = self.task();
        let mut buf = vec![0; len];
        let mut done = 0;
        for _ in 0..MAX_STEPS {
            let p = self
                .mapping
                .filemap_read(&cx, pos + done as u64, &mut buf[done..], flags)?;
            done += p.copied;
            self.disk.submit(p.submit);
            match p.blocked {
                None => {
                    buf.truncate(done);
                    return Ok(buf);
                }
                Some(Blocked::ReclaimThrottle) => self.reclaim_throttle(&cx),
                Some(_) => self.settle(),
            }
        }
        panic!("pread did not finish");
    }

    /// A `reclaim_throttle()` sleep: what is in flight completes (the rig has no clock, so the
    /// sleep lasts no jiffy), then the sleep ends.
    fn reclaim_throttle(&self, cx: &Cpu) {
        let sleep = self.mapping.reclaim_throttle_begin();
        self.settle();
        self.mapping.reclaim_throttle_end(cx, sleep);
    }

    /// `pwrite()` of `data` at `pos` with `flags`, driven to the end. The bios it starts
    /// (DONTCACHE's kick, reclaim) are submitted, not completed: call [`Rig::settle`].
    pub fn pwrite(&self, pos: u64, data: &[u8], flags: IocbFlags) -> Result<usize, Errno> {
        let cx = self.task();
        let mut done = 0;
        for _ in 0..MAX_STEPS {
            let p =
                self.mapping
                    .generic_perform_write(&cx, pos + done as u64, &data[done..], flags)?;
            done += p.written;
            self.disk.submit(p.submit);
            match p.blocked {
                None => return Ok(done),
                Some(Blocked::ReclaimThrottle) => self.reclaim_throttle(&cx),
                Some(
                    Blocked::FolioLocked(_)
                    | Blocked::Memcg
                    | Blocked::Writeback(_)
                    | Blocked::DirtyThrottle { .. },
                ) => self.settle(),
            }
        }
        panic!("pwrite did not finish");
    }

    /// `fsync()`, driven until the whole device is clean and on the disk; `EIO` if writeback
    /// failed.
    pub fn try_fsync(&self) -> Result<(), Errno> {
        let cx = self.task();
        for _ in 0..MAX_STEPS {
            let p = self.mapping.fsync(&cx);
            self.disk.submit(p.submit);
            if p.blocked.is_none() {
                return p.error.map_or(Ok(()), Err);
            }
            self.settle();
        }
        panic!("fsync did not finish");
    }

    /// [`Rig::try_fsync`] that must succeed.
    pub fn fsync(&self) {
        if let Err(e) = self.try_fsync() {
            panic!("fsync failed: {e}");
        }
    }

    /// `POSIX_FADV_DONTNEED` of the whole device.
    pub fn drop_caches(&self) -> u64 {
        let cx = self.task();
        self.mapping
            .invalidate_mapping_pages(&cx, 0, self.mapping.config().nr_pages)
    }
}
