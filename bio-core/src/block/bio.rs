//! `block/bio.c` and the inline helpers of `include/linux/bio.h`: `bio_endio()` with its chain
//! walk, `bio_chain()`, `bio_inc_remaining()`, `bio_io_error()`, `bio_wouldblock_error()` and
//! `bio_in_atomic()`; `bio_alloc_bioset()` and `bvec_alloc()` on a `struct bio_set`'s mempools
//! (the allocations go through `mm/slab.rs`, so fault injection reaches them).
//!
//! `bio_endio()` includes the task-completion series: after the chain walk, a
//! `BIO_COMPLETE_IN_TASK` bio completing where `bio_in_atomic()` is true goes to
//! `__bio_complete_in_task()` (module [`complete_in_task`](super::complete_in_task)).

use super::blk_status::{BlkStatus, BLK_STS_AGAIN, BLK_STS_IOERR, BLK_STS_OK};
use super::blk_types::{BiPrivate, Bio, BioEndIo, BioFlag, ChainShared, ReqOp};
use super::trace;
use crate::kernel::{Cpu, Kernel, Report, ReportKind};
use crate::mm::gfp::GfpFlags;
use crate::mm::mempool::{Mempool, MempoolElement};
use crate::mm::slab::{kmem_cache_alloc, KmemCache};
use crate::sync::atomic::Ordering;
use crate::sync::Arc;

impl Kernel {
    /// A fresh bio with a unique simulator id, from nowhere: the bio of a submitter the model
    /// does not model (the workload's `dd`/`fio`, a test), so no mempool, no GFP mask, no
    /// `might_alloc()` and no fault injection. Kernel code under model that allocates a bio
    /// (`blkdev_direct_IO()`'s lower bio in `drivers/block/loop_drv/bdev_backing.rs`) goes
    /// through [`BioSet::bio_alloc_bioset`] with the kernel's mask instead.
    pub fn bio_alloc(&self, op: ReqOp, sector: u64) -> Box<Bio> {
        Bio::new(self.alloc_bio_id(), op, sector)
    }
}

/// `BIO_INLINE_VECS`: vectors a bio carries inline; more need [`bvec_alloc`].
pub const BIO_INLINE_VECS: u16 = 4;
/// `BIO_MAX_VECS`: the most vectors a bio can have.
pub const BIO_MAX_VECS: u16 = 256;
/// `BIO_POOL_SIZE`: elements reserved in a bioset's mempools.
pub const BIO_POOL_SIZE: usize = 2;

/// `struct bio_set` (`include/linux/bio.h`): the mempool of bios and the mempool of
/// `BIO_MAX_VECS` bvec arrays behind `bio_alloc_bioset()`.
///
/// A bio keeps what it took from the pools (`bio->bi_pool`, [`BiPool`]) and gives it back when it
/// is freed (`bio_put()` → `bio_free()` → `mempool_free()`: the model's `Drop`), so a reserve
/// element taken by an allocation returns with the bio.
///
/// The per-CPU bio cache (`BIOSET_PERCPU_CACHE`, `REQ_ALLOC_CACHE`) is `fs_bio_set`'s only, in
/// `block/bio_alloc_cache.rs`. Left out: `front_pad` and the rescuer that
/// `punt_bios_to_rescuer()` hands `current->bio_list` to (the first attempt under a non-empty
/// bio_list drops `__GFP_DIRECT_RECLAIM`; `blkdev_dio_pool` has no rescuer anyway).
#[derive(Debug)]
pub struct BioSet {
    /// `bs->bio_pool`.
    pub bio_pool: Arc<Mempool>,
    /// `bs->bvec_pool` (`BIOSET_NEED_BVECS`).
    pub bvec_pool: Arc<Mempool>,
}

/// What a bio allocated from a [`BioSet`] holds of it (`bio->bi_pool`, the bvec array of
/// `bi_io_vec`): an element of one of its mempools, freed with the bio.
#[derive(Debug)]
pub(crate) struct BiPool {
    pool: Arc<Mempool>,
    elem: MempoolElement,
}

impl BiPool {
    /// `mempool_free()` of the element (from `bio_free()`).
    pub(crate) fn free(self) {
        self.pool.mempool_free(self.elem);
    }
}

/// The bio slab (`bio_find_or_create_slab()`), allocation site `bio_alloc_bioset`.
pub const BIO_SLAB: KmemCache = KmemCache::new("bio_alloc_bioset", 136, 0);
/// The biovec slabs (`bvec_slabs[]`, here one for every size), allocation site `bvec_alloc`.
pub const BVEC_SLAB: KmemCache = KmemCache::new("bvec_alloc", 16 * BIO_MAX_VECS as usize, 0);

impl BioSet {
    /// `bioset_init(bs, pool_size, 0, BIOSET_NEED_BVECS)`; `fs_bio_set` is
    /// `BioSet::new(BIO_POOL_SIZE)`.
    pub fn new(pool_size: usize) -> Self {
        Self {
            bio_pool: Arc::new(Mempool::new(pool_size, BIO_SLAB)),
            bvec_pool: Arc::new(Mempool::new(pool_size, BVEC_SLAB)),
        }
    }

    /// `bio_alloc_bioset(bdev, nr_vecs, opf, gfp_mask, bs)`: a bio from the bio mempool and,
    /// for more than [`BIO_INLINE_VECS`] vectors, a bvec array from [`bvec_alloc`]; if that fails
    /// the bio goes back (`mempool_free()`) and the result is `None`. With a blocking mask
    /// (`GFP_NOIO`) neither mempool fails: injection at `bio_alloc_bioset` or `bvec_alloc` is
    /// absorbed by the reserves. `nr_vecs` above [`BIO_MAX_VECS`] is the kernel's WARN and `None`.
    pub fn bio_alloc_bioset(
        &self,
        op: ReqOp,
        sector: u64,
        nr_vecs: u16,
        gfp_mask: GfpFlags,
        cx: &Cpu,
    ) -> Option<Box<Bio>> {
        let p = self.bio_pool.mempool_alloc(gfp_mask, cx)?;
        let mut held = vec![BiPool {
            pool: Arc::clone(&self.bio_pool),
            elem: p,
        }];
        if nr_vecs > BIO_INLINE_VECS {
            match bvec_alloc(&self.bvec_pool, nr_vecs, gfp_mask, cx) {
                Some(bvl) => held.push(BiPool {
                    pool: Arc::clone(&self.bvec_pool),
                    elem: bvl,
                }),
                None => {
                    // err_free: the bio goes back.
                    held.into_iter().for_each(BiPool::free);
                    return None;
                }
            }
        }
        let mut bio = cx.kernel().bio_alloc(op, sector);
        bio.bi_pool = held;
        Some(bio)
    }
}

/// `fs_bio_set`: `init_bio()`'s `bioset_init(&fs_bio_set, BIO_POOL_SIZE, 0, BIOSET_NEED_BVECS |
/// BIOSET_PERCPU_CACHE)`, the bio_set of `bio_alloc()`; one per kernel, made on first use (the
/// per-CPU cache, made by `Kernel::bioset_percpu_cache_init()`, lives beside it:
/// `block/bio_alloc_cache.rs`).
pub fn fs_bio_set(kernel: &crate::kernel::Kernel) -> &BioSet {
    kernel.fs_bio_set.get_or_init(|| BioSet::new(BIO_POOL_SIZE))
}

/// `bvec_alloc(pool, &nr_vecs, gfp_mask)`: below `BIO_MAX_VECS` first the biovec slab with
/// `bvec_alloc_gfp()` (no direct reclaim or I/O, `__GFP_NORETRY | __GFP_NOWARN`); on failure
/// without `__GFP_DIRECT_RECLAIM` that is the answer, else the mempool with the caller's mask.
/// More than `BIO_MAX_VECS` is the kernel's `WARN_ON_ONCE(!bvs)` and `None`.
pub fn bvec_alloc(
    pool: &Mempool,
    nr_vecs: u16,
    gfp_mask: GfpFlags,
    cx: &Cpu,
) -> Option<MempoolElement> {
    if nr_vecs > BIO_MAX_VECS {
        cx.kernel().warn_once(
            cx,
            "block/bio.c:bvec_alloc",
            "block/bio.c: bvec_alloc(): WARN_ON_ONCE(!bvs)",
        );
        return None;
    }
    if nr_vecs < BIO_MAX_VECS {
        let gfp = gfp_mask
            .without(GfpFlags(
                GfpFlags::__GFP_DIRECT_RECLAIM.0 | GfpFlags::__GFP_IO.0,
            ))
            .union(GfpFlags(
                GfpFlags::__GFP_NORETRY.0 | GfpFlags::__GFP_NOWARN.0,
            ));
        let slab = KmemCache::new(BVEC_SLAB.name, 16 * usize::from(nr_vecs), 0);
        match kmem_cache_alloc(&slab, gfp, cx) {
            Ok(obj) => {
                return Some(MempoolElement {
                    obj,
                    from_reserve: false,
                })
            }
            Err(_) if !gfp_mask.contains(GfpFlags::__GFP_DIRECT_RECLAIM) => return None,
            Err(_) => {}
        }
    }
    pool.mempool_alloc(gfp_mask, cx)
}

/// `bio_in_atomic()` (include/linux/bio.h of the series; the predicate of erofs'
/// `z_erofs_in_atomic()`, commit c99fab6e80b7): true wherever a sleeping `bi_end_io` is unsafe.
///
/// 1. Under `CONFIG_PREEMPTION`, any preemptible-RCU read-side nesting makes it atomic (the
///    threaded-IRQ case `!in_task() || irqs_disabled()` missed).
/// 2. Without `CONFIG_PREEMPT_COUNT` the kernel cannot tell, so it answers "atomic".
/// 3. Otherwise it is `!preemptible()`.
pub fn bio_in_atomic(cpu: &Cpu) -> bool {
    let config = cpu.config();
    if config.preemption() && cpu.rcu_preempt_depth() != 0 {
        return true;
    }
    if !config.preempt_count {
        return true;
    }
    !cpu.preemptible()
}

/// An extra reference to a bio's `__bi_remaining`, taken with [`bio_inc_remaining`] and spent with
/// [`bio_endio_ref`]: the kernel pattern where a driver calls `bio_endio()` once more per
/// increment. It can be cloned like the pointer it stands for, so the misuse the kernel's
/// `BUG_ON` catches (one `bio_endio()` too many) can be written and is reported.
#[derive(Debug, Clone)]
pub struct BioRef {
    shared: Arc<ChainShared>,
}

/// `bio_inc_remaining()`: sets `BIO_CHAIN` and increments `__bi_remaining`, so the bio completes
/// only after one more `bio_endio()` (through the returned reference) than before.
pub fn bio_inc_remaining(bio: &mut Bio) -> BioRef {
    let shared = bio.shared();
    bio.set_flag(BioFlag::Chain);
    shared.remaining.fetch_add(1, Ordering::AcqRel);
    BioRef { shared }
}

/// `bio_chain(bio, parent)`: `parent` completes only after `bio` does. Sets the child's
/// `bi_private` to the parent and `bi_end_io` to `bio_chain_endio`, and increments the parent's
/// remaining count (setting `BIO_CHAIN` on the parent).
///
/// The kernel's `BUG_ON(bio->bi_private || bio->bi_end_io)` becomes a BUG report, and the child
/// is left unchanged.
pub fn bio_chain(bio: &mut Bio, parent: &mut Bio, cpu: &Cpu) -> Result<(), Report> {
    if !bio.bi_private.is_none() || bio.bi_end_io.is_some() {
        return Err(cpu.report(
            ReportKind::Bug,
            format!(
                "kernel BUG at block/bio.c: bio_chain: BUG_ON(bio->bi_private || bio->bi_end_io) (bio#{} has {:?}/{:?})",
                bio.id(),
                bio.bi_private,
                bio.bi_end_io
            ),
        ));
    }
    let parent_ref = bio_inc_remaining(parent);
    bio.bi_private = BiPrivate::Chain(parent_ref.shared);
    bio.bi_end_io = Some(BioEndIo::ChainEndio);
    Ok(())
}

/// `bio_remaining_done()` on a bio we hold: returns the bio to continue completing, or `None`
/// when others still hold references (it is parked in the shared state until they finish).
fn bio_remaining_done(mut bio: Box<Bio>, cpu: &Cpu) -> Option<Box<Bio>> {
    if !bio.flagged(BioFlag::Chain) {
        return Some(bio);
    }
    let shared = bio.shared();
    if shared.remaining.load(Ordering::Acquire) <= 0 {
        remaining_underflow(bio.id(), cpu);
        return None;
    }
    let id = bio.id();
    // Park before decrementing, so whoever brings the count to zero finds the bio.
    *shared.parked.lock() = Some(bio);
    if shared.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
        return None;
    }
    let Some(mut bio) = shared.parked.lock().take() else {
        remaining_underflow(id, cpu);
        return None;
    };
    bio.clear_flag(BioFlag::Chain);
    bio.unshare();
    Some(bio)
}

/// `bio_remaining_done()` reached through a reference (a chain child or a [`BioRef`]): the bio
/// itself is parked, or still with its owner.
fn shared_remaining_done(shared: &ChainShared, cpu: &Cpu) -> Option<Box<Bio>> {
    // Compare-and-swap so an underflow is reported without corrupting the count for others.
    let mut cur = shared.remaining.load(Ordering::Acquire);
    loop {
        if cur <= 0 {
            remaining_underflow(shared.parent_id, cpu);
            return None;
        }
        match shared
            .remaining
            .compare_exchange(cur, cur - 1, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => break,
            Err(now) => cur = now,
        }
        crate::sync::spin_loop();
    }
    if cur != 1 {
        return None;
    }
    // Zero: the owner's bio_endio() has parked the bio, or the owner still holds it, in which case
    // its own bio_endio() will find the count at zero and report the BUG.
    let mut bio = shared.parked.lock().take()?;
    bio.clear_flag(BioFlag::Chain);
    bio.unshare();
    Some(bio)
}

fn remaining_underflow(id: u64, cpu: &Cpu) {
    cpu.report(
        ReportKind::Bug,
        format!(
            "kernel BUG at block/bio.c: bio_remaining_done: BUG_ON(atomic_read(&bio->__bi_remaining) <= 0) (bio#{id})"
        ),
    );
}

/// `bio_endio()`: ends I/O on a bio.
///
/// 1. `bio_remaining_done()`: a chain parent or a bio with extra references completes only when
///    the last reference ends; a count already at zero is the kernel's `BUG_ON`, reported.
/// 2. `block_bio_complete` is traced for `BIO_TRACE_COMPLETION` bios, and the flag cleared.
/// 3. A chain child (`bi_end_io == bio_chain_endio`) passes its error to the parent if the
///    parent has none yet (first error wins), is put, and the walk continues at the parent,
///    iteratively rather than recursively.
/// 4. The final bio's `bi_end_io`, if any, is called in the caller's context.
pub fn bio_endio(bio: Box<Bio>, cpu: &Cpu) {
    if let Some(bio) = bio_remaining_done(bio, cpu) {
        bio_endio_done(bio, cpu);
    }
}

/// The rest of `bio_endio()` once `bio_remaining_done()` said yes: trace, chain walk, and the final
/// `bi_end_io` (or the task-context deferral).
fn bio_endio_done(mut bio: Box<Bio>, cpu: &Cpu) {
    loop {
        if bio.bi_bdev.is_some() && bio.flagged(BioFlag::TraceCompletion) {
            trace::block_bio_complete(&bio, cpu);
            bio.clear_flag(BioFlag::TraceCompletion);
        }
        if !matches!(bio.bi_end_io, Some(BioEndIo::ChainEndio)) {
            break;
        }
        // __bio_chain_endio(): the parent's error is kept if it has one.
        let BiPrivate::Chain(parent) = std::mem::take(&mut bio.bi_private) else {
            cpu.report(
                ReportKind::Bug,
                format!(
                    "kernel BUG at block/bio.c: bio_chain_endio on bio#{} without a parent",
                    bio.id()
                ),
            );
            return;
        };
        let status = bio.status();
        if !status.is_ok() {
            let _ = parent.status.compare_exchange(
                BLK_STS_OK.0,
                status.0,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        drop(bio); // bio_put(child)
        match shared_remaining_done(&parent, cpu) {
            Some(p) => bio = p,
            None => return,
        }
    }
    // The task-completion series: the final bio's flag decides.
    if bio.flagged(BioFlag::CompleteInTask) && bio_in_atomic(cpu) {
        super::complete_in_task::__bio_complete_in_task(bio, cpu);
        return;
    }
    end_io(bio, cpu);
}

/// The final `bio->bi_end_io(bio)` of `bio_endio()`.
pub(crate) fn end_io(bio: Box<Bio>, cpu: &Cpu) {
    match bio.bi_end_io.clone() {
        Some(BioEndIo::Fn { f, .. }) => f(bio, cpu),
        Some(BioEndIo::ChainEndio) => {
            // bio_chain_endio() itself is BUG(): only bio_endio() may see it.
            cpu.report(
                ReportKind::Bug,
                "kernel BUG at block/bio.c: bio_chain_endio".to_owned(),
            );
        }
        None => {}
    }
}

/// `bio_endio()` through an extra reference from [`bio_inc_remaining`]: one decrement of
/// `__bi_remaining`; the bio completes here if this was the last reference and its owner has
/// already called `bio_endio()`.
pub fn bio_endio_ref(r: BioRef, cpu: &Cpu) {
    if let Some(bio) = shared_remaining_done(&r.shared, cpu) {
        bio_endio_done(bio, cpu);
    }
}

/// `bio_io_error()`: `bi_status = BLK_STS_IOERR`, then `bio_endio()`.
pub fn bio_io_error(mut bio: Box<Bio>, cpu: &Cpu) {
    bio.set_status(BLK_STS_IOERR);
    bio_endio(bio, cpu);
}

/// `bio_wouldblock_error()`: sets `BIO_QUIET` and `BLK_STS_AGAIN`, then `bio_endio()`: what a
/// `REQ_NOWAIT` bio gets instead of waiting.
pub fn bio_wouldblock_error(mut bio: Box<Bio>, cpu: &Cpu) {
    bio.set_flag(BioFlag::Quiet);
    bio.set_status(BLK_STS_AGAIN);
    bio_endio(bio, cpu);
}

/// Convenience: `bio->bi_status = status; bio_endio(bio)`, the usual driver completion.
pub fn bio_endio_status(mut bio: Box<Bio>, status: BlkStatus, cpu: &Cpu) {
    bio.set_status(status);
    bio_endio(bio, cpu);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{BlkStatus, BLK_STS_MEDIUM, BLK_STS_NOSPC, BLK_STS_TIMEOUT};
    use crate::kernel::{CpuId, KernelConfig};
    use crate::sync::Mutex;

    /// What each bi_end_io call saw: (bio id, status).
    type Log = Arc<Mutex<Vec<(u64, BlkStatus)>>>;

    fn recorder(log: &Log) -> BioEndIo {
        let log = Arc::clone(log);
        BioEndIo::new("test_end_io", move |bio, _cpu| {
            log.lock().push((bio.id(), bio.status()))
        })
    }

    fn kernel() -> crate::sync::UntrackedArc<Kernel> {
        Kernel::new(KernelConfig::default(), 2).unwrap()
    }

    #[test]
    fn plain_bio_calls_end_io_once_with_its_status() {
        let k = kernel();
        let cpu = k.cpu(CpuId(0)).unwrap();
        let log = Log::default();
        let bio = k.bio_alloc(ReqOp::Write, 0).with_end_io(recorder(&log));
        let id = bio.id();
        bio_endio_status(bio, BLK_STS_NOSPC, &cpu);
        assert_eq!(*log.lock(), [(id, BLK_STS_NOSPC)]);
        assert!(k.reports().is_empty());
    }

    #[test]
    fn bio_endio_without_end_io_is_silent() {
        let k = kernel();
        let cpu = k.cpu(CpuId(0)).unwrap();
        bio_endio(k.bio_alloc(ReqOp::Read, 0), &cpu);
        assert!(k.reports().is_empty());
    }

    #[test]
    fn error_helpers_set_the_kernel_statuses() {
        let k = kernel();
        let cpu = k.cpu(CpuId(0)).unwrap();
        let quiet = Arc::new(Mutex::new(None));
        let q = Arc::clone(&quiet);
        let end = BioEndIo::new("q", move |bio, _| {
            *q.lock() = Some((bio.status(), bio.flagged(BioFlag::Quiet)))
        });
        bio_io_error(k.bio_alloc(ReqOp::Read, 0).with_end_io(end.clone()), &cpu);
        assert_eq!(quiet.lock().take(), Some((BLK_STS_IOERR, false)));
        bio_wouldblock_error(k.bio_alloc(ReqOp::Read, 0).with_end_io(end), &cpu);
        assert_eq!(quiet.lock().take(), Some((BLK_STS_AGAIN, true)));
    }

    /// Builds parent <- child_a, parent <- child_b <- grandchild and returns them.
    fn nested(k: &Kernel, cpu: &Cpu, log: &Log) -> [Box<Bio>; 4] {
        let mut parent = k.bio_alloc(ReqOp::Write, 0).with_end_io(recorder(log));
        let mut a = k.bio_alloc(ReqOp::Write, 8);
        let mut b = k.bio_alloc(ReqOp::Write, 16);
        let mut g = k.bio_alloc(ReqOp::Write, 24);
        bio_chain(&mut a, &mut parent, cpu).unwrap();
        bio_chain(&mut b, &mut parent, cpu).unwrap();
        bio_chain(&mut g, &mut b, cpu).unwrap();
        assert_eq!(parent.remaining(), 3);
        assert_eq!(b.remaining(), 2);
        assert!(parent.flagged(BioFlag::Chain) && b.flagged(BioFlag::Chain));
        [parent, a, b, g]
    }

    #[test]
    fn nested_chain_completes_parent_once_after_all_children_in_every_order() {
        // All 24 orders of ending the four bios.
        let orders = permutations(4);
        assert_eq!(orders.len(), 24);
        for order in orders {
            let k = kernel();
            let cpu = k.cpu(CpuId(1)).unwrap();
            let log = Log::default();
            let bios = nested(&k, &cpu, &log);
            let parent_id = bios[0].id();
            let mut slots: Vec<Option<Box<Bio>>> = bios.into_iter().map(Some).collect();
            for (step, &i) in order.iter().enumerate() {
                assert!(
                    log.lock().is_empty(),
                    "parent ended early in order {order:?} at step {step}"
                );
                bio_endio(slots[i].take().unwrap(), &cpu);
            }
            assert_eq!(*log.lock(), [(parent_id, BLK_STS_OK)], "order {order:?}");
            assert!(k.reports().is_empty(), "{:?}", k.reports().all());
        }
    }

    #[test]
    fn first_child_error_wins_and_is_not_overwritten_by_later_children() {
        let k = kernel();
        let cpu = k.cpu(CpuId(0)).unwrap();
        let log = Log::default();
        let [parent, mut a, mut b, mut g] = nested(&k, &cpu, &log);
        g.set_status(BLK_STS_MEDIUM);
        bio_endio(g, &cpu); // error reaches b
        a.set_status(BLK_STS_TIMEOUT);
        bio_endio(a, &cpu); // first error reaching the parent
        b.set_status(BLK_STS_OK);
        // b's own store of OK overwrites the grandchild's error on b, as a plain store does in C.
        bio_endio(b, &cpu);
        bio_endio(parent, &cpu);
        assert_eq!(log.lock()[0].1, BLK_STS_TIMEOUT);
    }

    #[test]
    fn grandchild_error_propagates_through_the_middle_bio() {
        let k = kernel();
        let cpu = k.cpu(CpuId(0)).unwrap();
        let log = Log::default();
        let [parent, a, b, mut g] = nested(&k, &cpu, &log);
        bio_endio(b, &cpu);
        bio_endio(parent, &cpu);
        g.set_status(BLK_STS_MEDIUM);
        bio_endio(g, &cpu);
        assert!(log.lock().is_empty());
        bio_endio(a, &cpu);
        assert_eq!(log.lock()[0].1, BLK_STS_MEDIUM);
    }

    #[test]
    fn parent_error_set_before_children_is_kept() {
        let k = kernel();
        let cpu = k.cpu(CpuId(0)).unwrap();
        let log = Log::default();
        let [mut parent, mut a, b, g] = nested(&k, &cpu, &log);
        parent.set_status(BLK_STS_NOSPC);
        bio_endio(parent, &cpu);
        a.set_status(BLK_STS_TIMEOUT);
        bio_endio(a, &cpu);
        bio_endio(g, &cpu);
        bio_endio(b, &cpu);
        assert_eq!(log.lock()[0].1, BLK_STS_NOSPC);
    }

    #[test]
    fn a_long_chain_is_walked_iteratively() {
        let k = kernel();
        let cpu = k.cpu(CpuId(0)).unwrap();
        let log = Log::default();
        // bios[0] <- bios[1] <- ... <- bios[n-1]; each parent ended before its child.
        let n = 100_000;
        let mut bios: Vec<Box<Bio>> = (0..n).map(|i| k.bio_alloc(ReqOp::Write, i)).collect();
        bios[0].bi_end_io = Some(recorder(&log));
        for i in 1..bios.len() {
            let (l, r) = bios.split_at_mut(i);
            bio_chain(&mut r[0], &mut l[i - 1], &cpu).unwrap();
        }
        let last = bios.pop().unwrap();
        for b in bios.into_iter() {
            bio_endio(b, &cpu);
        }
        assert!(log.lock().is_empty());
        bio_endio(last, &cpu);
        assert_eq!(log.lock().len(), 1);
    }

    #[test]
    fn extra_reference_delays_completion_and_one_too_many_is_the_kernel_bug() {
        let k = kernel();
        let cpu = k.cpu(CpuId(0)).unwrap();
        let log = Log::default();
        let mut bio = k.bio_alloc(ReqOp::Write, 0).with_end_io(recorder(&log));
        let r = bio_inc_remaining(&mut bio);
        assert_eq!(bio.remaining(), 2);
        let stale = r.clone();
        bio_endio(bio, &cpu);
        assert!(log.lock().is_empty(), "one reference is still out");
        bio_endio_ref(r, &cpu);
        assert_eq!(log.lock().len(), 1, "completes exactly once");
        assert!(k.reports().is_empty());
        // The same reference spent again: __bi_remaining is already 0.
        bio_endio_ref(stale, &cpu);
        assert_eq!(log.lock().len(), 1, "no second completion");
        let bugs = k.reports().of_kind(ReportKind::Bug);
        assert_eq!(bugs.len(), 1);
        assert!(
            bugs[0]
                .message
                .contains("BUG_ON(atomic_read(&bio->__bi_remaining) <= 0)"),
            "{}",
            bugs[0].message
        );
    }

    #[test]
    fn owner_ending_after_the_count_reached_zero_is_reported() {
        let k = kernel();
        let cpu = k.cpu(CpuId(0)).unwrap();
        let log = Log::default();
        let mut bio = k.bio_alloc(ReqOp::Write, 0).with_end_io(recorder(&log));
        let r = bio_inc_remaining(&mut bio);
        bio_endio_ref(r.clone(), &cpu);
        bio_endio_ref(r, &cpu); // count 2 -> 0 while the owner still holds the bio
        assert!(log.lock().is_empty());
        bio_endio(bio, &cpu);
        assert_eq!(k.reports().of_kind(ReportKind::Bug).len(), 1);
        assert!(log.lock().is_empty());
    }

    #[test]
    fn chaining_a_bio_that_has_an_end_io_is_bug_on() {
        let k = kernel();
        let cpu = k.cpu(CpuId(0)).unwrap();
        let log = Log::default();
        let mut parent = k.bio_alloc(ReqOp::Write, 0);
        let mut child = k.bio_alloc(ReqOp::Write, 8).with_end_io(recorder(&log));
        let err = bio_chain(&mut child, &mut parent, &cpu).unwrap_err();
        assert_eq!(err.kind, ReportKind::Bug);
        assert!(err
            .message
            .contains("BUG_ON(bio->bi_private || bio->bi_end_io)"));
        assert_eq!(parent.remaining(), 1, "nothing changed");
        assert!(!parent.flagged(BioFlag::Chain));
    }

    fn permutations(n: usize) -> Vec<Vec<usize>> {
        fn go(rest: &mut Vec<usize>, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
            if rest.is_empty() {
                out.push(cur.clone());
                return;
            }
            for i in 0..rest.len() {
                let x = rest.remove(i);
                cur.push(x);
                go(rest, cur, out);
                cur.pop();
                rest.insert(i, x);
            }
        }
        let mut out = Vec::new();
        go(&mut (0..n).collect(), &mut Vec::new(), &mut out);
        out
    }
}
