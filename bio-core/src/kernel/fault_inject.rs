//! Fault injection: `lib/fault-inject.c` (`struct fault_attr`, `should_fail_ex()`,
//! `fail_dump()`), its two block/mm instances `failslab` (`mm/failslab.c`,
//! `should_failslab()`) and `fail_make_request` (`block/blk-core.c`, `should_fail_request()`),
//! the per-task `fail_nth` (`/proc/<pid>/fail-nth`), and biosim's one-shot form for scenarios:
//! `fail_alloc SITE` (the next allocation at a named call site fails, once) and `fail_io DEV`
//! (the next bio submitted to a device fails with `BLK_STS_IOERR`, once).
//!
//! Randomness is a PRNG seeded per [`Kernel`](super::Kernel) ([`FaultInject::reseed`], default
//! [`DEFAULT_FAULT_SEED`]), never the OS: a seed reproduces every injected fault.
//!
//! An injected fault is not a kernel bug, so it is never a `Report`: `fail_dump()`'s printk is a
//! line in the kernel's fault log ([`FaultInject::log`]) and a `tracing` event on target
//! `biosim::fault_inject`. Left out: `task-filter`/`make-it-fail` per task, the stack-trace
//! filter (`require-start`/`require-end`), the printk rate limit (`ratelimit_state` is disabled
//! by `FAULT_ATTR_INITIALIZER` anyway) and `dump_stack()` at `verbose` 2 (the two lines print).

use super::Cpu;
use crate::mm::gfp::GfpFlags;
use crate::sync::Mutex;
use std::fmt;

/// The seed of a kernel's fault-injection PRNG until [`FaultInject::reseed`] changes it.
pub const DEFAULT_FAULT_SEED: u64 = 0x5eed_f417_0000_0001;

/// Every allocation call site the model has, by the static name each allocation passes to
/// `kmalloc()`/`kmem_cache_alloc()` (mm/slab.rs). A one-shot or a site filter naming anything
/// else is refused with this list.
pub const ALLOC_SITES: &[&str] = &[
    // block/bio.c: bio_alloc_bioset() -> mempool_alloc(&bs->bio_pool) -> the bio slab.
    "bio_alloc_bioset",
    // block/bio.c: bvec_alloc() for more than BIO_INLINE_VECS vectors -> a biovec slab.
    "bvec_alloc",
    // drivers/block/loop.c: lo_rw_aio_prep() (6.18's lo_rw_aio()) -> kmalloc_array() of the
    // bio_vec array for a request of more than one bio (GFP_NOIO).
    "lo_rw_aio_prep",
];

/// `FAULT_NOWARN` (`include/linux/fault-inject.h`): the caller asked for no printk
/// (`should_failslab()` passes it for `__GFP_NOWARN`).
pub const FAULT_NOWARN: u32 = 1 << 0;

/// `struct fault_attr` (`include/linux/fault-inject.h`), as its debugfs files show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultAttr {
    /// The debugfs directory name (`%pd` of `fail_dump()`): `failslab`, `fail_make_request`.
    pub dname: &'static str,
    /// `probability`: percent of the calls that pass the other checks which fail.
    pub probability: u64,
    /// `interval`: only every `interval`-th such call may fail.
    pub interval: u64,
    /// `times`: how many failures are left; -1 is unlimited, 0 stops injection.
    pub times: i32,
    /// `space`: bytes to let through before failing starts.
    pub space: i32,
    /// `verbose`: 0 prints nothing, 1 the two lines, 2 also a stack (not modelled).
    pub verbose: u32,
    /// `count`: the calls seen by the interval check.
    pub count: u64,
}

impl FaultAttr {
    /// `FAULT_ATTR_INITIALIZER`: interval 1, times 1, verbose 2, probability 0 (off).
    pub fn new(dname: &'static str) -> Self {
        Self {
            dname,
            probability: 0,
            interval: 1,
            times: 1,
            space: 0,
            verbose: 2,
            count: 0,
        }
    }

    /// `fail_dump()`'s two printk lines (`KERN_NOTICE`), before `times` is decremented.
    pub fn fail_dump_lines(&self) -> [String; 2] {
        [
            "FAULT_INJECTION: forcing a failure.".to_owned(),
            format!(
                "name {}, interval {}, probability {}, space {}, times {}",
                self.dname, self.interval, self.probability, self.space, self.times
            ),
        ]
    }
}

/// `struct failslab` (`mm/failslab.c`): the attr and its two filters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailSlab {
    /// The `fault_attr`.
    pub attr: FaultAttr,
    /// `ignore-gfp-wait` (`ignore_gfp_reclaim`, default Y): allocations that may enter direct
    /// reclaim are never failed.
    pub ignore_gfp_reclaim: bool,
    /// `cache-filter` (default N): only caches created with `SLAB_FAILSLAB` fail.
    pub cache_filter: bool,
}

/// Why a fault-injection command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultInjectError {
    /// `fail_alloc SITE` or a site filter with a site the model does not have.
    #[error("unknown allocation site `{0}` (known sites: {known})", known = ALLOC_SITES.join(", "))]
    UnknownSite(String),
    /// `fail_io DEV` with an empty device name.
    #[error("fail_io needs a device name (e.g. loop0, nullb0)")]
    NoDevice,
}

/// A small deterministic PRNG (SplitMix64): `get_random_u32_below()` of the injection checks.
#[derive(Debug, Clone)]
struct FaultRng(u64);

impl FaultRng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `get_random_u32_below(n)`.
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[derive(Debug)]
struct State {
    rng: FaultRng,
    failslab: FailSlab,
    fail_make_request: FaultAttr,
    /// Devices with `/sys/block/DEV/make-it-fail` set.
    make_it_fail: Vec<String>,
    /// biosim's site filter: only allocations at this site are candidates.
    site_filter: Option<&'static str>,
    /// Armed one-shots: the next allocation at each site fails.
    oneshot_alloc: Vec<&'static str>,
    /// Armed one-shots: the next bio to each device fails.
    oneshot_io: Vec<String>,
    log: Vec<String>,
}

/// A kernel's fault-injection state: the `failslab` and `fail_make_request` attrs, the
/// devices' `make-it-fail`, the one-shots, the PRNG and the fault log.
#[derive(Debug)]
pub struct FaultInject {
    state: Mutex<State>,
    /// Whether any device is a `fail_make_request` candidate (`make-it-fail` set or a
    /// `fail_io` one-shot armed), kept with `state`: `should_fail_bio()` looks here first, as
    /// the kernel tests `bd_make_it_fail` before anything else, so an unarmed kernel pays one
    /// load per bio.
    io_armed: crate::sync::untracked::AtomicBool,
}

impl Default for FaultInject {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                rng: FaultRng(DEFAULT_FAULT_SEED),
                failslab: FailSlab {
                    attr: FaultAttr::new("failslab"),
                    ignore_gfp_reclaim: true,
                    cache_filter: false,
                },
                fail_make_request: FaultAttr::new("fail_make_request"),
                make_it_fail: Vec::new(),
                site_filter: None,
                oneshot_alloc: Vec::new(),
                oneshot_io: Vec::new(),
                log: Vec::new(),
            }),
            io_armed: crate::sync::untracked::AtomicBool::new(false),
        }
    }
}

/// The registered name for `site`, or the refusal listing the known ones.
fn known_site(site: &str) -> Result<&'static str, FaultInjectError> {
    ALLOC_SITES
        .iter()
        .copied()
        .find(|s| *s == site)
        .ok_or_else(|| FaultInjectError::UnknownSite(site.to_owned()))
}

impl FaultInject {
    /// Restarts the PRNG from `seed` (the runtime passes its own seed).
    pub fn reseed(&self, seed: u64) {
        self.state.lock().rng = FaultRng(seed);
    }

    /// The `failslab` settings (a copy).
    pub fn failslab(&self) -> FailSlab {
        self.state.lock().failslab.clone()
    }

    /// Changes the `failslab` settings, as writes to `/sys/kernel/debug/failslab/*` do.
    pub fn set_failslab(&self, f: impl FnOnce(&mut FailSlab)) {
        f(&mut self.state.lock().failslab);
    }

    /// The `fail_make_request` attr (a copy).
    pub fn fail_make_request(&self) -> FaultAttr {
        self.state.lock().fail_make_request.clone()
    }

    /// Changes the `fail_make_request` attr (`/sys/kernel/debug/fail_make_request/*`).
    pub fn set_fail_make_request(&self, f: impl FnOnce(&mut FaultAttr)) {
        f(&mut self.state.lock().fail_make_request);
    }

    /// `/sys/block/DEV/make-it-fail` (`part_fail_store()`): whether bios to `dev` are
    /// candidates for `fail_make_request`.
    pub fn set_make_it_fail(&self, dev: &str, on: bool) {
        let mut st = self.state.lock();
        st.make_it_fail.retain(|d| d != dev);
        if on {
            st.make_it_fail.push(dev.to_owned());
        }
        self.sync_io_armed(&st);
    }

    /// Recomputes [`FaultInject::io_armed`] from `st` (called with the state locked).
    fn sync_io_armed(&self, st: &State) {
        let armed = !st.make_it_fail.is_empty() || !st.oneshot_io.is_empty();
        self.io_armed
            .store(armed, crate::sync::untracked::Ordering::Release);
    }

    /// Whether any bio can be failed by `fail_make_request` or a `fail_io` one-shot now.
    pub fn io_armed(&self) -> bool {
        self.io_armed
            .load(crate::sync::untracked::Ordering::Acquire)
    }

    /// biosim's site filter for `failslab`: only allocations at `site` are candidates (`None`
    /// clears it). An unknown site is refused with the list of known ones.
    pub fn set_site_filter(&self, site: Option<&str>) -> Result<(), FaultInjectError> {
        let site = site.map(known_site).transpose()?;
        self.state.lock().site_filter = site;
        Ok(())
    }

    /// `fail_alloc SITE`: the next allocation at `site` fails with `-ENOMEM`, once (unless it
    /// is `__GFP_NOFAIL`, which cannot fail). An unknown site is refused with the known ones.
    pub fn fail_alloc_once(&self, site: &str) -> Result<(), FaultInjectError> {
        let site = known_site(site)?;
        self.state.lock().oneshot_alloc.push(site);
        Ok(())
    }

    /// `fail_io DEV`: the next bio submitted to `dev` fails with `BLK_STS_IOERR`, once.
    pub fn fail_io_once(&self, dev: &str) -> Result<(), FaultInjectError> {
        if dev.is_empty() {
            return Err(FaultInjectError::NoDevice);
        }
        let mut st = self.state.lock();
        st.oneshot_io.push(dev.to_owned());
        self.sync_io_armed(&st);
        Ok(())
    }

    /// Whether one-shots are still armed (allocation sites, devices).
    pub fn armed(&self) -> (Vec<&'static str>, Vec<String>) {
        let st = self.state.lock();
        (st.oneshot_alloc.clone(), st.oneshot_io.clone())
    }

    /// Disarms every one-shot still armed and returns them (allocation sites, devices): a
    /// harness ending a run clears what the run armed but never reached, so its own checks
    /// (a read-back) do not meet it.
    pub fn disarm_oneshots(&self) -> (Vec<&'static str>, Vec<String>) {
        let mut st = self.state.lock();
        let disarmed = (
            std::mem::take(&mut st.oneshot_alloc),
            std::mem::take(&mut st.oneshot_io),
        );
        self.sync_io_armed(&st);
        disarmed
    }

    /// The fault log: every printk line of `fail_dump()` and every one-shot that fired, in
    /// order.
    pub fn log(&self) -> Vec<String> {
        self.state.lock().log.clone()
    }

    fn print(st: &mut State, cx: &Cpu, line: String) {
        tracing::info!(target: "biosim::fault_inject", cpu = cx.id().0, "{line}");
        st.log.push(line);
    }

    /// Consumes an armed one-shot for `site`. The twin `bug-fault-oneshot-rearms` leaves it
    /// armed, so it fires on every later allocation there.
    fn take_oneshot_alloc(st: &mut State, site: &str) -> bool {
        let Some(i) = st.oneshot_alloc.iter().position(|s| *s == site) else {
            return false;
        };
        if !cfg!(feature = "bug-fault-oneshot-rearms") {
            st.oneshot_alloc.remove(i);
        }
        true
    }

    /// `should_failslab()` (`mm/failslab.c`) for an allocation of `size` bytes at `site` from a
    /// cache with (`slab_failslab`) or without `SLAB_FAILSLAB`, plus biosim's one-shot and site
    /// filter. Order: `__GFP_NOFAIL` never fails; an armed one-shot for the site fires; then
    /// `ignore_gfp_reclaim`, `cache_filter`, the site filter and `should_fail_ex()`
    /// (`__GFP_NOWARN` → `FAULT_NOWARN`).
    pub fn should_failslab(
        &self,
        site: &'static str,
        size: usize,
        slab_failslab: bool,
        gfp: GfpFlags,
        cx: &Cpu,
    ) -> bool {
        // Twin: `bug-failslab-fails-nofail` drops the __GFP_NOFAIL test.
        if gfp.contains(GfpFlags::__GFP_NOFAIL) && !cfg!(feature = "bug-failslab-fails-nofail") {
            return false;
        }
        let mut st = self.state.lock();
        if Self::take_oneshot_alloc(&mut st, site) {
            Self::print(
                &mut st,
                cx,
                format!("biosim: fail_alloc {site}: one-shot allocation failure ({gfp})"),
            );
            return true;
        }
        if st.failslab.ignore_gfp_reclaim && gfp.contains(GfpFlags::__GFP_DIRECT_RECLAIM) {
            return false;
        }
        if st.failslab.cache_filter && !slab_failslab {
            return false;
        }
        if st.site_filter.is_some_and(|s| s != site) {
            return false;
        }
        let flags = if gfp.contains(GfpFlags::__GFP_NOWARN) {
            FAULT_NOWARN
        } else {
            0
        };
        let st = &mut *st;
        should_fail_ex(
            &mut st.failslab.attr,
            &mut st.rng,
            &mut st.log,
            size as isize,
            flags,
            cx,
        )
    }

    /// `should_fail_request()` (`block/blk-core.c`): the device has `make-it-fail` and
    /// `should_fail(&fail_make_request, bytes)` says so; before it, biosim's one-shot for the
    /// device fires (once).
    pub fn should_fail_request(&self, dev: &str, bytes: u32, cx: &Cpu) -> bool {
        let mut st = self.state.lock();
        if let Some(i) = st.oneshot_io.iter().position(|d| d == dev) {
            if !cfg!(feature = "bug-fault-oneshot-rearms") {
                st.oneshot_io.remove(i);
                self.sync_io_armed(&st);
            }
            Self::print(
                &mut st,
                cx,
                format!("biosim: fail_io {dev}: one-shot I/O failure (BLK_STS_IOERR)"),
            );
            return true;
        }
        if !st.make_it_fail.iter().any(|d| d == dev) {
            return false;
        }
        let st = &mut *st;
        should_fail_ex(
            &mut st.fail_make_request,
            &mut st.rng,
            &mut st.log,
            bytes as isize,
            0,
            cx,
        )
    }
}

/// `should_fail_ex()` (`lib/fault-inject.c`) in the kernel's order: `current->fail_nth` (in task
/// context: counts down, the call that brings it to zero fails regardless of the attr),
/// `probability == 0`, `times == 0`, `space` (consumed by `size`), `interval`, then the random
/// draw against `probability`. A failure prints `fail_dump()` unless `FAULT_NOWARN` or
/// `verbose == 0`, and uses up one of `times` unless it is -1.
fn should_fail_ex(
    attr: &mut FaultAttr,
    rng: &mut FaultRng,
    log: &mut Vec<String>,
    size: isize,
    flags: u32,
    cx: &Cpu,
) -> bool {
    let mut nth_fired = false;
    if cx.in_task() {
        let nth = cx.task_state().fail_nth.get();
        if nth != 0 {
            cx.task_state().fail_nth.set(nth - 1);
            if nth - 1 != 0 {
                return false;
            }
            nth_fired = true;
        }
    }
    if !nth_fired {
        if attr.probability == 0 || attr.times == 0 {
            return false;
        }
        if attr.space as isize > size {
            attr.space -= size as i32;
            return false;
        }
        if attr.interval > 1 {
            attr.count += 1;
            if !attr.count.is_multiple_of(attr.interval) {
                return false;
            }
        }
        if attr.probability <= rng.below(100) {
            return false;
        }
    }
    if flags & FAULT_NOWARN == 0 && attr.verbose > 0 {
        for line in attr.fail_dump_lines() {
            tracing::info!(target: "biosim::fault_inject", cpu = cx.id().0, "{line}");
            log.push(line);
        }
    }
    if attr.times != -1 && attr.times != 0 {
        attr.times -= 1;
    }
    true
}

/// `/proc/self/fail-nth`: the `n`-th fault-injection check made by `current` from now on fails
/// (0 turns it off). Reads back the remaining count with [`fail_nth`].
pub fn set_fail_nth(cx: &Cpu, n: u32) {
    cx.task_state().fail_nth.set(n);
}

/// Reading `/proc/self/fail-nth`: the checks left before the injected one (0: none armed or
/// already fired).
pub fn fail_nth(cx: &Cpu) -> u32 {
    cx.task_state().fail_nth.get()
}

impl fmt::Display for FaultAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: probability={} interval={} times={} space={} verbose={}",
            self.dname, self.probability, self.interval, self.times, self.space, self.verbose
        )
    }
}

#[cfg(test)]
mod tests;
