//! `include/linux/gfp_types.h` and `include/linux/gfp.h`: the allocation flags the modelled kernel
//! code passes, `gfpflags_allow_blocking()`, `current_gfp_context()` (`include/linux/sched/mm.h`)
//! and `might_alloc()` with lockdep's `fs_reclaim` pseudo-lock (`fs_reclaim_acquire()`/
//! `fs_reclaim_release()`, `mm/page_alloc.c`).
//!
//! Only the bits the block and writeback paths use are modelled. The composite masks are the
//! kernel's: `GFP_KERNEL` = `__GFP_RECLAIM | __GFP_IO | __GFP_FS`, `GFP_NOIO` =
//! `__GFP_RECLAIM`, `GFP_NOWAIT` = `__GFP_KSWAPD_RECLAIM | __GFP_NOWARN`, `GFP_ATOMIC` =
//! `__GFP_HIGH | __GFP_KSWAPD_RECLAIM`.

use crate::kernel::{memalloc_noreclaim_restore, memalloc_noreclaim_save, Cpu, LockClass, Report};
use std::fmt;

/// `gfp_t`: a set of `__GFP_*` bits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GfpFlags(pub u32);

impl GfpFlags {
    /// `__GFP_HIGH`: may use the emergency reserves.
    pub const __GFP_HIGH: Self = Self(1 << 0);
    /// `__GFP_IO`: may start physical I/O.
    pub const __GFP_IO: Self = Self(1 << 1);
    /// `__GFP_FS`: may call into the filesystem.
    pub const __GFP_FS: Self = Self(1 << 2);
    /// `__GFP_DIRECT_RECLAIM`: may enter direct reclaim, i.e. sleep.
    pub const __GFP_DIRECT_RECLAIM: Self = Self(1 << 3);
    /// `__GFP_KSWAPD_RECLAIM`: may wake kswapd.
    pub const __GFP_KSWAPD_RECLAIM: Self = Self(1 << 4);
    /// `__GFP_NOWARN`: no allocation-failure warning.
    pub const __GFP_NOWARN: Self = Self(1 << 5);
    /// `__GFP_NORETRY`: fail rather than retry hard.
    pub const __GFP_NORETRY: Self = Self(1 << 6);
    /// `__GFP_NOFAIL`: the allocation cannot fail (and so is never failed by fault injection:
    /// `should_failslab()` skips it).
    pub const __GFP_NOFAIL: Self = Self(1 << 7);
    /// `__GFP_RECLAIM` = `__GFP_DIRECT_RECLAIM | __GFP_KSWAPD_RECLAIM`.
    pub const __GFP_RECLAIM: Self =
        Self(Self::__GFP_DIRECT_RECLAIM.0 | Self::__GFP_KSWAPD_RECLAIM.0);
    /// `GFP_KERNEL`: may sleep, do I/O and call into the filesystem.
    pub const GFP_KERNEL: Self = Self(Self::__GFP_RECLAIM.0 | Self::__GFP_IO.0 | Self::__GFP_FS.0);
    /// `GFP_NOFS`: may sleep and do I/O, not call into the filesystem.
    pub const GFP_NOFS: Self = Self(Self::__GFP_RECLAIM.0 | Self::__GFP_IO.0);
    /// `GFP_NOIO`: may sleep, neither I/O nor filesystem (block layer allocations under I/O).
    pub const GFP_NOIO: Self = Self(Self::__GFP_RECLAIM.0);
    /// `GFP_NOWAIT`: never sleeps.
    pub const GFP_NOWAIT: Self = Self(Self::__GFP_KSWAPD_RECLAIM.0 | Self::__GFP_NOWARN.0);
    /// `GFP_ATOMIC`: never sleeps, may use reserves.
    pub const GFP_ATOMIC: Self = Self(Self::__GFP_HIGH.0 | Self::__GFP_KSWAPD_RECLAIM.0);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// `self | other`.
    pub fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// `self & ~other`.
    pub fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }
}

impl fmt::Debug for GfpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for GfpFlags {
    /// As `show_gfp_flags()` prints a mask: the composite name when it is one, else the bits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMED: [(GfpFlags, &str); 5] = [
            (GfpFlags::GFP_KERNEL, "GFP_KERNEL"),
            (GfpFlags::GFP_NOFS, "GFP_NOFS"),
            (GfpFlags::GFP_NOIO, "GFP_NOIO"),
            (GfpFlags::GFP_NOWAIT, "GFP_NOWAIT"),
            (GfpFlags::GFP_ATOMIC, "GFP_ATOMIC"),
        ];
        const BITS: [(GfpFlags, &str); 8] = [
            (GfpFlags::__GFP_HIGH, "__GFP_HIGH"),
            (GfpFlags::__GFP_IO, "__GFP_IO"),
            (GfpFlags::__GFP_FS, "__GFP_FS"),
            (GfpFlags::__GFP_DIRECT_RECLAIM, "__GFP_DIRECT_RECLAIM"),
            (GfpFlags::__GFP_KSWAPD_RECLAIM, "__GFP_KSWAPD_RECLAIM"),
            (GfpFlags::__GFP_NOWARN, "__GFP_NOWARN"),
            (GfpFlags::__GFP_NORETRY, "__GFP_NORETRY"),
            (GfpFlags::__GFP_NOFAIL, "__GFP_NOFAIL"),
        ];
        // The longest composite that is wholly contained, then the remaining bits.
        let mut rest = *self;
        let mut parts = Vec::new();
        if let Some((mask, name)) = NAMED.iter().find(|(m, _)| self.contains(*m)) {
            parts.push(*name);
            rest = rest.without(*mask);
        }
        for (bit, name) in BITS {
            if rest.contains(bit) {
                parts.push(name);
            }
        }
        if parts.is_empty() {
            write!(f, "0x0")
        } else {
            write!(f, "{}", parts.join("|"))
        }
    }
}

/// `gfpflags_allow_blocking()`: the allocation may sleep (direct reclaim).
pub fn gfpflags_allow_blocking(gfp: GfpFlags) -> bool {
    gfp.contains(GfpFlags::__GFP_DIRECT_RECLAIM)
}

/// `current_gfp_context()` (`include/linux/sched/mm.h`): the task's `memalloc_noio_save()` /
/// `memalloc_nofs_save()` scopes strip `__GFP_IO | __GFP_FS` / `__GFP_FS` from a mask.
pub fn current_gfp_context(gfp: GfpFlags, cx: &Cpu) -> GfpFlags {
    let flags = cx.task_state().pf_flags.get();
    if flags & crate::kernel::PF_MEMALLOC_NOIO != 0 {
        gfp.without(GfpFlags::__GFP_IO.union(GfpFlags::__GFP_FS))
    } else if flags & crate::kernel::PF_MEMALLOC_NOFS != 0 {
        gfp.without(GfpFlags::__GFP_FS)
    } else {
        gfp
    }
}

/// The name of lockdep's `__fs_reclaim_map` (`mm/page_alloc.c`), the pseudo-lock that stands
/// for "this context may enter filesystem reclaim".
pub const FS_RECLAIM_MAP: &str = "fs_reclaim";

/// `__need_reclaim()` (`mm/page_alloc.c`, 6.18): the allocation may wait on direct reclaim and
/// the task is not reclaiming already (`PF_MEMALLOC`). `__GFP_NOLOCKDEP` is not modelled.
fn __need_reclaim(gfp: GfpFlags, cx: &Cpu) -> bool {
    gfp.contains(GfpFlags::__GFP_DIRECT_RECLAIM)
        && cx.task_state().pf_flags.get() & crate::kernel::PF_MEMALLOC == 0
}

/// Whether `fs_reclaim_acquire(gfp)` takes the map: `current_gfp_context()` first (the
/// memalloc scopes), then `__need_reclaim()` and `__GFP_FS`.
fn fs_reclaim_taken(gfp: GfpFlags, cx: &Cpu) -> bool {
    // Twin: the memalloc_noio scope and a mask without __GFP_FS are ignored.
    if cfg!(feature = "bug-fs-reclaim-ignores-noio") {
        return __need_reclaim(gfp, cx);
    }
    let gfp = current_gfp_context(gfp, cx);
    __need_reclaim(gfp, cx) && gfp.contains(GfpFlags::__GFP_FS)
}

/// `fs_reclaim_acquire()` (`mm/page_alloc.c`): an exclusive acquisition of the `fs_reclaim`
/// map if an allocation with `gfp` could enter filesystem reclaim here, so that lockdep
/// records `L -> fs_reclaim` for every lock `L` held. `GFP_NOIO`, `GFP_NOFS`, non-blocking
/// masks and allocations under `memalloc_noio_save()`/`memalloc_nofs_save()` take nothing.
/// Returns lockdep's report, if any (also logged). The mmu_notifier map is not modelled.
pub fn fs_reclaim_acquire(gfp: GfpFlags, cx: &Cpu) -> Option<Report> {
    if !fs_reclaim_taken(gfp, cx) {
        return None;
    }
    let (held, report) = cx.lockdep_acquire(LockClass::Map, FS_RECLAIM_MAP);
    // Released by fs_reclaim_release() by name, as the kernel's lock_map_release().
    drop(held);
    report
}

/// `fs_reclaim_release()`: releases what [`fs_reclaim_acquire`] with the same mask took.
pub fn fs_reclaim_release(gfp: GfpFlags, cx: &Cpu) {
    if fs_reclaim_taken(gfp, cx) {
        cx.lock_map_release(FS_RECLAIM_MAP);
    }
}

/// A model of direct reclaim (`__perform_reclaim()`): `fs_reclaim_acquire(gfp)`, then
/// `memalloc_noreclaim_save()` (`PF_MEMALLOC`, so allocations inside do not take the map
/// again), `f` (a shrinker, writeback from reclaim: every lock it takes records
/// `fs_reclaim -> L`), and the reverse. Returns `f`'s value and the acquisition's report.
pub fn fs_reclaim_scope<R>(
    gfp: GfpFlags,
    cx: &Cpu,
    f: impl FnOnce(&Cpu) -> R,
) -> (R, Option<Report>) {
    let report = fs_reclaim_acquire(gfp, cx);
    let noreclaim = memalloc_noreclaim_save(cx);
    let r = f(cx);
    memalloc_noreclaim_restore(cx, noreclaim);
    fs_reclaim_release(gfp, cx);
    (r, report)
}

/// `might_alloc()` (`include/linux/sched/mm.h`): `fs_reclaim_acquire()`/`fs_reclaim_release()`
/// for lockdep, then `might_sleep_if(gfpflags_allow_blocking())`. Every allocation the modelled
/// kernel code makes runs it first. Lockdep's reports land in the kernel's log.
#[track_caller]
pub fn might_alloc(gfp: GfpFlags, cx: &Cpu) {
    let _ = fs_reclaim_acquire(gfp, cx);
    fs_reclaim_release(gfp, cx);
    if gfpflags_allow_blocking(gfp) {
        let _ = cx.might_sleep_at(std::panic::Location::caller());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{memalloc_noio_restore, memalloc_noio_save, CpuId, KernelConfig};
    use crate::Kernel;

    #[test]
    fn composites_are_the_kernels() {
        assert_eq!(GfpFlags::GFP_KERNEL.to_string(), "GFP_KERNEL");
        assert_eq!(GfpFlags::GFP_NOIO.to_string(), "GFP_NOIO");
        assert_eq!(
            GfpFlags::GFP_KERNEL
                .union(GfpFlags::__GFP_NOFAIL)
                .to_string(),
            "GFP_KERNEL|__GFP_NOFAIL"
        );
        assert!(gfpflags_allow_blocking(GfpFlags::GFP_NOIO));
        assert!(!gfpflags_allow_blocking(GfpFlags::GFP_NOWAIT));
        assert!(!gfpflags_allow_blocking(GfpFlags::GFP_ATOMIC));
    }

    /// Whether `fs_reclaim_acquire(gfp)` leaves the map held (then releases it).
    fn takes_fs_reclaim(gfp: GfpFlags, cx: &Cpu) -> bool {
        let before = cx.held_locks();
        assert!(fs_reclaim_acquire(gfp, cx).is_none());
        let now = cx.held_locks();
        fs_reclaim_release(gfp, cx);
        assert_eq!(cx.held_locks(), before);
        now.len() > before.len() && now.last().is_some_and(|h| h.name == FS_RECLAIM_MAP)
    }

    #[test]
    #[cfg_attr(
        feature = "bug-fs-reclaim-ignores-noio",
        should_panic(expected = "takes no fs_reclaim")
    )]
    fn fs_reclaim_is_taken_only_for_blocking_fs_allocations() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        assert!(takes_fs_reclaim(GfpFlags::GFP_KERNEL, &cx));
        for gfp in [GfpFlags::GFP_ATOMIC, GfpFlags::GFP_NOWAIT] {
            assert!(!takes_fs_reclaim(gfp, &cx), "{gfp} never waits on reclaim");
        }
        for gfp in [GfpFlags::GFP_NOIO, GfpFlags::GFP_NOFS] {
            assert!(!takes_fs_reclaim(gfp, &cx), "{gfp} takes no fs_reclaim");
        }
        let saved = memalloc_noio_save(&cx);
        let under_noio = takes_fs_reclaim(GfpFlags::GFP_KERNEL, &cx);
        memalloc_noio_restore(&cx, saved);
        assert!(
            !under_noio,
            "GFP_KERNEL under memalloc_noio takes no fs_reclaim"
        );
        // Inside reclaim (PF_MEMALLOC) nothing enters reclaim again.
        let ((), r) = fs_reclaim_scope(GfpFlags::GFP_KERNEL, &cx, |c| {
            assert!(!takes_fs_reclaim(GfpFlags::GFP_KERNEL, c));
            assert_eq!(c.held_locks().len(), 1);
        });
        assert!(r.is_none());
        assert!(k.reports().is_empty(), "{:#?}", k.reports().all());
    }

    #[test]
    fn memalloc_noio_strips_io_and_fs() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        assert_eq!(
            current_gfp_context(GfpFlags::GFP_KERNEL, &cx),
            GfpFlags::GFP_KERNEL
        );
        let saved = memalloc_noio_save(&cx);
        assert_eq!(
            current_gfp_context(GfpFlags::GFP_KERNEL, &cx),
            GfpFlags::GFP_NOIO
        );
        memalloc_noio_restore(&cx, saved);
        assert_eq!(
            current_gfp_context(GfpFlags::GFP_KERNEL, &cx),
            GfpFlags::GFP_KERNEL
        );
    }
}
