//! `include/linux/slab.h` and `mm/slub.c`'s entry points: the one allocation function every
//! allocation of the modelled kernel goes through, `kmalloc()` / `kmalloc_array()` /
//! `kmem_cache_alloc()`, with the kernel's GFP semantics.
//!
//! Each call first runs `might_alloc(gfp)` (`slab_pre_alloc_hook()`: might_sleep for a blocking
//! mask, and with lockdep the `fs_reclaim` annotation), then `should_failslab()`
//! (fault injection, [`crate::kernel::fault_inject`]). Memory itself never runs out in the model:
//! the only failures are injected ones, and `__GFP_NOFAIL` cannot fail. The object is a token
//! ([`SlabObject`]) naming its site and size, not bytes: what the model needs to know is whether
//! the allocation succeeded.
//!
//! Every allocation passes a static call-site name registered in
//! [`ALLOC_SITES`](crate::kernel::fault_inject::ALLOC_SITES); an unregistered name is a WARN
//! (a model bug: the scenario language could not target it).

use crate::errno::Errno;
use crate::kernel::fault_inject::ALLOC_SITES;
use crate::kernel::Cpu;
use crate::mm::gfp::{might_alloc, GfpFlags};

/// `SLAB_FAILSLAB` (`include/linux/slab.h`): the cache is a candidate when `failslab`'s
/// `cache-filter` is on.
pub const SLAB_FAILSLAB: u32 = 0x0200_0000;

/// `struct kmem_cache` as far as the model needs it: its name, object size and flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmemCache {
    /// `s->name`, and the call-site name its allocations pass to fault injection.
    pub name: &'static str,
    /// `s->object_size`.
    pub object_size: usize,
    /// `s->flags` (`SLAB_FAILSLAB` only).
    pub flags: u32,
}

impl KmemCache {
    /// `kmem_cache_create(name, size, ...)`. The name must be a registered allocation site.
    pub const fn new(name: &'static str, object_size: usize, flags: u32) -> Self {
        Self {
            name,
            object_size,
            flags,
        }
    }
}

/// An allocated object: which site allocated it and how big it is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an allocation is freed with kfree()"]
pub struct SlabObject {
    /// The call site.
    pub site: &'static str,
    /// The size in bytes.
    pub size: usize,
}

/// The common path of [`kmalloc`] and [`kmem_cache_alloc`] (`slab_alloc_node()`).
#[track_caller]
fn slab_alloc(
    site: &'static str,
    size: usize,
    slab_failslab: bool,
    gfp: GfpFlags,
    cx: &Cpu,
) -> Result<SlabObject, Errno> {
    might_alloc(gfp, cx);
    if !ALLOC_SITES.contains(&site) {
        cx.kernel().warn_once(
            cx,
            site,
            &format!(
                "mm/slab.rs: allocation at unregistered site `{site}` (add it to ALLOC_SITES)"
            ),
        );
    }
    if cx
        .kernel()
        .fault_inject()
        .should_failslab(site, size, slab_failslab, gfp, cx)
    {
        return Err(Errno::ENOMEM);
    }
    Ok(SlabObject { site, size })
}

/// `kmalloc(size, gfp)` at call site `site`: `-ENOMEM` only when fault injection fails it
/// (never for `__GFP_NOFAIL`).
#[track_caller]
pub fn kmalloc(
    site: &'static str,
    size: usize,
    gfp: GfpFlags,
    cx: &Cpu,
) -> Result<SlabObject, Errno> {
    // The kmalloc caches are not SLAB_FAILSLAB caches.
    slab_alloc(site, size, false, gfp, cx)
}

/// `kmalloc_array(n, size, gfp)`: `-ENOMEM` for an overflowing product, as the kernel's
/// `check_mul_overflow()`, else [`kmalloc`].
#[track_caller]
pub fn kmalloc_array(
    site: &'static str,
    n: usize,
    size: usize,
    gfp: GfpFlags,
    cx: &Cpu,
) -> Result<SlabObject, Errno> {
    let Some(bytes) = n.checked_mul(size) else {
        return Err(Errno::ENOMEM);
    };
    kmalloc(site, bytes, gfp, cx)
}

/// `kmem_cache_alloc(cache, gfp)`: an object of the cache's size; the site is the cache name.
#[track_caller]
pub fn kmem_cache_alloc(cache: &KmemCache, gfp: GfpFlags, cx: &Cpu) -> Result<SlabObject, Errno> {
    slab_alloc(
        cache.name,
        cache.object_size,
        cache.flags & SLAB_FAILSLAB != 0,
        gfp,
        cx,
    )
}

/// `kfree()` / `kmem_cache_free()`: the object is gone.
pub fn kfree(obj: SlabObject) {
    drop(obj);
}

#[cfg(test)]
mod tests;
