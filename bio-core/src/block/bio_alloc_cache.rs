//! block/bio.c's per-CPU bio cache (`BIOSET_PERCPU_CACHE`): `struct bio_alloc_cache`,
//! `bio_alloc_percpu_cache()`, `bio_put_percpu_cache()`, `bio_alloc_irq_cache_splice()`,
//! `bio_alloc_cache_prune()` and the `CPUHP_BIO_DEAD` teardown `bio_cpu_dead()`.
//!
//! A bio allocated with `REQ_ALLOC_CACHE` (in the kernel: io_uring's and the iocb paths'
//! `IOCB_ALLOC_CACHE` bios of `blkdev_direct_IO()`/iomap) comes from the allocating CPU's cache
//! and goes back to the freeing CPU's cache at `bio_put()`, so a steady stream of I/O allocates
//! nothing. In the model only `fs_bio_set` has a cache, and only once
//! [`Kernel::bioset_percpu_cache_init`] made it (the bench's kernels): the scenario kernels keep
//! `bs->cache == NULL`, so their hotplug steps stay those of the table in `kernel/boot_states.rs`.

use super::blk_types::{BiPrivate, Bio, ReqFlags, ReqOp};
use crate::kernel::{Cpu, Kernel};
use crate::sync::untracked::Mutex;
use crate::sync::UntrackedArc;
use hotplug::{Errno, Invocation, CPUHP_BIO_DEAD};

/// `ALLOC_CACHE_THRESHOLD`: bios freed in hardirq context are spliced into the task list once
/// this many wait there.
pub const ALLOC_CACHE_THRESHOLD: usize = 16;
/// `ALLOC_CACHE_MAX`: a cache holding more than this many (both lists) frees further bios
/// instead (the check is `nr_irq + nr > ALLOC_CACHE_MAX` before the push, so it tops out one
/// above).
pub const ALLOC_CACHE_MAX: usize = 256;

/// `struct bio_alloc_cache`: the task-context free list and the hardirq one (`free_list_irq`,
/// reached only with IRQs off). `nr`/`nr_irq` are the lists' lengths.
#[derive(Debug, Default)]
// The boxes are the bios' own allocations: keeping them is what the cache is for.
#[allow(clippy::vec_box)]
pub struct BioAllocCache {
    /// `free_list`.
    free_list: Vec<Box<Bio>>,
    /// `free_list_irq`.
    free_list_irq: Vec<Box<Bio>>,
}

impl BioAllocCache {
    /// `cache->nr`.
    pub fn nr(&self) -> usize {
        self.free_list.len()
    }

    /// `cache->nr_irq`.
    pub fn nr_irq(&self) -> usize {
        self.free_list_irq.len()
    }

    /// `bio_alloc_irq_cache_splice()`: the hardirq list joins the task list (the kernel does it
    /// with IRQs off; here the cache's lock covers it).
    fn bio_alloc_irq_cache_splice(&mut self) {
        self.free_list.append(&mut self.free_list_irq);
    }

    /// `bio_alloc_cache_prune(cache, nr)`: frees up to `nr` bios, the task list first, then
    /// (the irq list spliced in) the rest. Returns how many were freed.
    fn bio_alloc_cache_prune(&mut self, nr: usize) -> usize {
        let mut freed = 0;
        for _ in 0..2 {
            while freed < nr {
                let Some(bio) = self.free_list.pop() else {
                    break;
                };
                drop(bio); // bio_free()
                freed += 1;
            }
            if freed >= nr {
                break;
            }
            self.bio_alloc_irq_cache_splice();
        }
        freed
    }
}

impl Kernel {
    /// `bioset_init(&fs_bio_set, ..., BIOSET_PERCPU_CACHE)`'s cache part: `bs->cache =
    /// alloc_percpu(struct bio_alloc_cache)` and `cpuhp_state_add_instance_nocalls(CPUHP_BIO_DEAD,
    /// ...)` (here `cpuhp_setup_state_nocalls()` of the one bio_set with a cache, teardown
    /// `bio_cpu_dead()`). Idempotent: a second call finds the cache made.
    pub fn bioset_percpu_cache_init(self: &UntrackedArc<Self>) {
        let mut made = false;
        self.bio_alloc_cache.get_or_init(|| {
            made = true;
            self.possible_cpus()
                .map(|_| Mutex::new(BioAllocCache::default()))
                .collect()
        });
        if !made {
            return;
        }
        let teardown: hotplug::Callback<Cpu> =
            UntrackedArc::new(|cx: &Cpu, inv: &Invocation| -> Result<(), Errno> {
                cx.kernel().bio_cpu_dead(inv.cpu);
                Ok(())
            });
        self.hotplug()
            .cpuhp_setup_state_nocalls(CPUHP_BIO_DEAD, "block/bio:dead", None, Some(teardown))
            .expect("the default state table has CPUHP_BIO_DEAD");
    }

    /// `bio_cpu_dead()` (`CPUHP_BIO_DEAD` teardown, on the control CPU once `cpu` is dead):
    /// `bio_alloc_cache_prune(cache, -1U)` of the dead CPU's cache, so its bios are freed
    /// rather than stranded until it comes back. Returns how many were freed.
    pub fn bio_cpu_dead(&self, cpu: crate::CpuId) -> usize {
        self.bio_alloc_cache
            .get()
            .and_then(|c| c.get(cpu.index()))
            .map_or(0, |c| lock(c).bio_alloc_cache_prune(usize::MAX))
    }

    /// `(nr, nr_irq)` of `cpu`'s bio cache; `None` without a cache (`bs->cache == NULL`).
    pub fn bio_alloc_cache_counts(&self, cpu: crate::CpuId) -> Option<(usize, usize)> {
        let c = lock(self.bio_alloc_cache.get()?.get(cpu.index())?);
        Some((c.nr(), c.nr_irq()))
    }

    /// `bio_alloc_bioset(bdev, 0/1 vecs, opf | REQ_ALLOC_CACHE, gfp, &fs_bio_set)`: with a cache,
    /// `bio_alloc_percpu_cache()` takes a bio from this CPU's `free_list` (splicing the
    /// hardirq list in when it holds `ALLOC_CACHE_THRESHOLD` or more) and `bio_init()`s it: new
    /// id, `op`, `sector`, `REQ_ALLOC_CACHE`, no data, status OK, no callback, its `bi_io_vec`
    /// (the inline vecs) kept for reuse. An empty cache gives a fresh bio that still carries
    /// `REQ_ALLOC_CACHE` (so it joins the cache at its `bio_put()`); no cache at all (`bs->cache
    /// == NULL`) clears the flag: a plain [`Kernel::bio_alloc`].
    pub fn bio_alloc_percpu_cache(&self, op: ReqOp, sector: u64, cx: &Cpu) -> Box<Bio> {
        let Some(caches) = self.bio_alloc_cache.get() else {
            return self.bio_alloc(op, sector);
        };
        let cached = {
            let mut c = lock(&caches[cx.id().index()]);
            if c.free_list.is_empty() && c.nr_irq() >= ALLOC_CACHE_THRESHOLD {
                c.bio_alloc_irq_cache_splice();
            }
            c.free_list.pop()
        };
        let id = self.alloc_bio_id();
        let bio = match cached {
            Some(mut bio) => {
                let mut vecs = std::mem::take(&mut bio.bi_io_vec);
                vecs.clear();
                *bio = Bio::new_unboxed(id, op, sector);
                bio.bi_io_vec = vecs;
                bio
            }
            None => Bio::new(id, op, sector),
        };
        bio.with_flags(ReqFlags::REQ_ALLOC_CACHE)
    }
}

/// `bio_put()`: a `REQ_ALLOC_CACHE` bio goes to `bio_put_percpu_cache()`, any other is freed
/// (`bio_free()`: dropping the box). The model has no `BIO_REFFED` count: a bio here has one
/// owner.
pub fn bio_put(bio: Box<Bio>, cx: &Cpu) {
    if bio.bi_opf.flags.contains(ReqFlags::REQ_ALLOC_CACHE) {
        bio_put_percpu_cache(bio, cx);
    }
}

/// `bio_put_percpu_cache()`: on the freeing CPU's cache, unless it holds more than
/// `ALLOC_CACHE_MAX` already. In task context onto `free_list`, in hardirq context (IRQs off) onto
/// `free_list_irq`; in softirq context the bio is freed (neither list is safe there).
/// `bio_uninit()` first: the callback, private data, chain state and data segments go (the
/// segments' buffers belong to the submitter, who took them back in `bi_end_io`).
fn bio_put_percpu_cache(mut bio: Box<Bio>, cx: &Cpu) {
    let Some(caches) = cx.kernel().bio_alloc_cache.get() else {
        return; // bio_free()
    };
    let hardirq = cx.in_hardirq();
    if !hardirq && !cx.in_task() {
        return; // out_free: softirq or NMI
    }
    let mut c = lock(&caches[cx.id().index()]);
    if c.nr() + c.nr_irq() > ALLOC_CACHE_MAX && !cfg!(feature = "bug-bio-cache-unbounded") {
        return; // out_free
    }
    // bio_uninit()
    bio.bi_end_io = None;
    bio.bi_private = BiPrivate::None;
    bio.shared = None;
    bio.bi_io_vec.clear();
    bio.bi_bdev = None;
    if hardirq {
        c.free_list_irq.push(bio);
    } else {
        c.free_list.push(bio);
    }
}

/// The cache's lock: per-CPU data the kernel guards with `get_cpu()` (and IRQs off for the irq
/// list); here one owner at a time. A poisoned lock still holds valid lists.
fn lock(m: &Mutex<BioAllocCache>) -> std::sync::MutexGuard<'_, BioAllocCache> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{BioEndIo, BLK_STS_IOERR};
    use crate::kernel::KernelConfig;
    use crate::CpuId;

    fn kernel(cache: bool) -> UntrackedArc<Kernel> {
        let k = Kernel::new(KernelConfig::default(), 2).unwrap();
        if cache {
            k.bioset_percpu_cache_init();
        }
        k
    }

    /// A bio put in task context comes back from the same CPU's cache reset by `bio_init()`:
    /// new id, op and sector, no flags but `REQ_ALLOC_CACHE`, status OK, no callback, no data.
    #[test]
    fn a_cached_bio_comes_back_reset() {
        let k = kernel(true);
        let cx = k.cpu(CpuId(0)).unwrap();
        let mut bio = k
            .bio_alloc_percpu_cache(ReqOp::Write, 8, &cx)
            .with_flags(ReqFlags::REQ_NOWAIT)
            .with_data(vec![1; 4096])
            .with_end_io(BioEndIo::new("t", |_, _| {}));
        bio.set_status(BLK_STS_IOERR);
        let (old_id, ptr) = (bio.id(), &*bio as *const Bio);
        bio_put(bio, &cx);
        assert_eq!(k.bio_alloc_cache_counts(CpuId(0)), Some((1, 0)));
        let bio = k.bio_alloc_percpu_cache(ReqOp::Read, 16, &cx);
        assert_eq!(&*bio as *const Bio, ptr, "the cached bio is reused");
        assert_ne!(bio.id(), old_id);
        assert_eq!(bio.bi_opf.op, ReqOp::Read);
        assert_eq!(bio.bi_opf.flags, ReqFlags::REQ_ALLOC_CACHE);
        assert_eq!(bio.bi_iter.bi_sector, 16);
        assert_eq!(bio.bi_iter.bi_size, 0);
        assert!(bio.bi_io_vec.is_empty());
        assert!(bio.bi_end_io.is_none());
        assert!(bio.status().is_ok());
        assert_eq!(k.bio_alloc_cache_counts(CpuId(0)), Some((0, 0)));
    }

    /// Without `BIOSET_PERCPU_CACHE` the flag is dropped and `bio_put()` frees.
    #[test]
    fn without_a_cache_the_flag_is_cleared() {
        let k = kernel(false);
        let cx = k.cpu(CpuId(0)).unwrap();
        let bio = k.bio_alloc_percpu_cache(ReqOp::Read, 0, &cx);
        assert!(!bio.bi_opf.flags.contains(ReqFlags::REQ_ALLOC_CACHE));
        bio_put(bio, &cx);
        assert_eq!(k.bio_alloc_cache_counts(CpuId(0)), None);
    }

    /// Hardirq puts go to `free_list_irq` and are spliced in only from `ALLOC_CACHE_THRESHOLD`;
    /// softirq puts are freed.
    #[test]
    fn hardirq_puts_wait_for_the_threshold_and_softirq_puts_free() {
        let k = kernel(true);
        let cx = k.cpu(CpuId(1)).unwrap();
        let bios: Vec<_> = (0..ALLOC_CACHE_THRESHOLD)
            .map(|i| k.bio_alloc_percpu_cache(ReqOp::Read, i as u64, &cx))
            .collect();
        cx.with_softirq(|cx| bio_put(k.bio_alloc_percpu_cache(ReqOp::Read, 0, cx), cx));
        assert_eq!(k.bio_alloc_cache_counts(CpuId(1)), Some((0, 0)));
        cx.hardirq_enter();
        let mut it = bios.into_iter();
        for b in it.by_ref().take(ALLOC_CACHE_THRESHOLD - 1) {
            bio_put(b, &cx);
        }
        cx.hardirq_exit();
        assert_eq!(k.bio_alloc_cache_counts(CpuId(1)), Some((0, 15)));
        // Below the threshold the irq list is left alone: a fresh bio.
        let fresh = k.bio_alloc_percpu_cache(ReqOp::Read, 0, &cx);
        assert_eq!(k.bio_alloc_cache_counts(CpuId(1)), Some((0, 15)));
        cx.hardirq_enter();
        bio_put(it.next().unwrap(), &cx);
        cx.hardirq_exit();
        let _reused = k.bio_alloc_percpu_cache(ReqOp::Read, 0, &cx);
        assert_eq!(k.bio_alloc_cache_counts(CpuId(1)), Some((15, 0)));
        drop(fresh);
    }

    /// The cache never holds more than `ALLOC_CACHE_MAX + 1` bios (the kernel's `>` check).
    #[test]
    #[cfg_attr(
        feature = "bug-bio-cache-unbounded",
        should_panic(expected = "the cache is bounded")
    )]
    fn the_cache_is_bounded_by_alloc_cache_max() {
        let k = kernel(true);
        let cx = k.cpu(CpuId(0)).unwrap();
        let bios: Vec<_> = (0..ALLOC_CACHE_MAX + 10)
            .map(|i| k.bio_alloc_percpu_cache(ReqOp::Read, i as u64, &cx))
            .collect();
        for b in bios {
            bio_put(b, &cx);
        }
        assert_eq!(
            k.bio_alloc_cache_counts(CpuId(0)),
            Some((ALLOC_CACHE_MAX + 1, 0)),
            "the cache is bounded"
        );
    }

    /// Offlining a CPU runs `bio_cpu_dead()` at `CPUHP_BIO_DEAD`: its cache is emptied (both
    /// lists), the other CPU's is left alone.
    #[test]
    fn the_dead_cpus_cache_is_freed_by_cpuhp_bio_dead() {
        let k = kernel(true);
        let (c0, c1) = (k.cpu(CpuId(0)).unwrap(), k.cpu(CpuId(1)).unwrap());
        // Allocate `n` at once (the cache is empty: all fresh), then put `irq` of them from
        // hardirq context and the rest from task context.
        let put = |cx: &Cpu, n: usize, irq: usize| {
            let mut bios: Vec<_> = (0..n)
                .map(|_| k.bio_alloc_percpu_cache(ReqOp::Read, 0, cx))
                .collect();
            cx.hardirq_enter();
            bios.drain(..irq).for_each(|b| bio_put(b, cx));
            cx.hardirq_exit();
            bios.into_iter().for_each(|b| bio_put(b, cx));
        };
        put(&c0, 3, 0);
        put(&c1, 7, 2);
        assert_eq!(k.bio_alloc_cache_counts(CpuId(1)), Some((5, 2)));
        k.cpu_hotplug_to(CpuId(1), hotplug::CPUHP_OFFLINE, false)
            .unwrap();
        assert_eq!(k.bio_alloc_cache_counts(CpuId(1)), Some((0, 0)));
        assert_eq!(k.bio_alloc_cache_counts(CpuId(0)), Some((3, 0)));
        k.cpu_hotplug_to(CpuId(1), hotplug::CPUHP_ONLINE, true)
            .unwrap();
        k.bioset_percpu_cache_init(); // idempotent: no second registration
    }
}
