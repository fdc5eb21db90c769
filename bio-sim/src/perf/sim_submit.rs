//! What the benches that drive a simulated block device from task context share: `biosim bench
//! loop`'s CPUs ([`super::loop_bench`]) and `biosim bench JOBFILE`'s clones and verify pass
//! ([`super::job::run`]). The threaded runtime they run on, the loop device
//! (`drivers/block/loop.c`'s `loop_add()` and `LOOP_CONFIGURE`) over a real file, the kernel
//! reports that void a run, and a submitter's [`Window`]: `submit_bio()` from a task that keeps
//! at most a depth of bios outstanding, as a process doing `io_submit()` at a queue depth.

use super::bench_common::BenchError;
use crate::dev::loop_file::UringBacking;
use crate::runtime::threaded::{ThreadedConfig, ThreadedRuntime};
use bio_core::drivers::block::loop_drv::{LoopBacking, LoopDevice, LoopVariant};
use bio_core::{Cpu, Kernel};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a wait of a bench's submitter may last before the runtime gives it up (the run then
/// fails as "did not complete": a lost completion, not a slow one).
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(120);

/// The threaded runtime a bench runs `kernel` on, its waits bounded by [`WAIT_TIMEOUT`].
pub fn start_runtime(kernel: &Arc<Kernel>) -> Result<ThreadedRuntime, BenchError> {
    Ok(ThreadedRuntime::start(
        Arc::clone(kernel),
        ThreadedConfig {
            wait_timeout: WAIT_TIMEOUT,
            ..ThreadedConfig::default()
        },
    )?)
}

/// `loop_add()` and `LOOP_CONFIGURE` of loop0 at `variant` over `backing` with `lo_flags`; an
/// io_uring backing (`uring`, the same object as `backing`) is attached to the device, which
/// its completions are delivered to.
pub fn loop_device(
    kernel: &Arc<Kernel>,
    backing: Arc<dyn LoopBacking>,
    uring: Option<&Arc<UringBacking>>,
    lo_flags: u32,
    variant: LoopVariant,
) -> Result<Arc<LoopDevice>, BenchError> {
    let lo = LoopDevice::new(kernel, 0, backing, lo_flags, 0, variant);
    if let Some(u) = uring {
        u.attach(&lo, kernel).map_err(BenchError::Machine)?;
    }
    Ok(lo)
}

/// The first report the simulated kernel printed during a run, other than V4's
/// `lockdep_assert_held()` splat (which every V4 run prints, and which costs what the
/// benchmark measures): a run with any other report is void.
pub fn first_splat(kernel: &Kernel) -> Option<String> {
    kernel
        .reports()
        .all()
        .into_iter()
        .find(|r| !r.message.contains("lockdep_assert_held"))
        .map(|r| r.message)
}

/// One submitter's bios in flight: those it submitted ([`Window::submitted`]) less those whose
/// `bi_end_io` counted themselves in `done`, kept below `depth` by sleeping in the runtime
/// (`Cpu::wait_until`, which runs other work meanwhile) before each submission.
#[derive(Debug)]
pub struct Window<'a> {
    done: &'a AtomicU64,
    depth: u64,
    submitted: u64,
}

impl<'a> Window<'a> {
    /// A window of `depth` (at least 1) over the completion counter `done`.
    pub fn new(done: &'a AtomicU64, depth: u64) -> Window<'a> {
        Window {
            done,
            depth: depth.max(1),
            submitted: 0,
        }
    }

    /// Sleeps until fewer than `depth` bios are in flight, or `wake()` holds; `false` if the
    /// wait gave up.
    pub fn wait_slot(&self, cx: &Cpu, what: &str, wake: &dyn Fn() -> bool) -> bool {
        let (done, depth, n) = (self.done, self.depth, self.submitted);
        cx.wait_until(what, &|| n < done.load(Ordering::Acquire) + depth || wake())
    }

    /// Counts one more bio submitted.
    pub fn submitted(&mut self) {
        self.submitted += 1;
    }

    /// Bios submitted so far.
    pub fn count(&self) -> u64 {
        self.submitted
    }

    /// Sleeps until every bio submitted has completed, or `wake()` holds; `false` if the wait
    /// gave up.
    pub fn wait_all(&self, cx: &Cpu, what: &str, wake: &dyn Fn() -> bool) -> bool {
        let (done, n) = (self.done, self.submitted);
        cx.wait_until(what, &|| done.load(Ordering::Acquire) >= n || wake())
    }
}

/// Never: a [`Window`] wait that only ends on its completions.
pub fn never() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use bio_core::kernel::CpuId;
    use bio_core::KernelConfig;

    /// With no runtime behind the CPU, `wait_until` only checks its condition once: a full
    /// window refuses, a completion frees a slot, `wake` ends a wait early, and `wait_all`
    /// holds exactly when every submitted bio completed.
    #[test]
    fn a_window_keeps_depth_in_flight_and_drains_on_the_last_completion() {
        let k = Kernel::new(KernelConfig::default(), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        let done = AtomicU64::new(0);
        let mut w = Window::new(&done, 2);
        assert!(w.wait_slot(&cx, "t", &never));
        w.submitted();
        w.submitted();
        assert_eq!(w.count(), 2);
        assert!(!w.wait_slot(&cx, "t", &never), "2 of depth 2 in flight");
        assert!(w.wait_slot(&cx, "t", &|| true), "woken");
        assert!(!w.wait_all(&cx, "t", &never));
        done.fetch_add(1, Ordering::Release);
        assert!(w.wait_slot(&cx, "t", &never), "one completed: a slot");
        assert!(!w.wait_all(&cx, "t", &never));
        done.fetch_add(1, Ordering::Release);
        assert!(w.wait_all(&cx, "t", &never));
        assert!(
            Window::new(&done, 0).wait_slot(&cx, "t", &never),
            "depth 0 is 1"
        );
    }
}
