//! The model half of `biosim calibrate loop`: bio-core's `drivers/block/loop.c`
//! ([`LoopDevice`]) on a 2-CPU kernel and the deterministic runtime, over an in-memory sparse file
//! that sits on a traced lower device ([`MemBacking::with_lower_device`]) and completes its I/O
//! asynchronously, in an interrupt, as the kernel's direct I/O does. The same [`CASES`] as the
//! live run, in order, on one device; each case's events are captured and normalized like the
//! kernel's.
//!
//! Each case runs until nothing is left: the runtime's own steps first (the loop worker, the
//! softirqs), then the backing device's completion interrupt, since a disk answers in tens of
//! microseconds, after the worker has returned (what every live recording shows).

use super::normalize::{self, Ev};
use super::{Setup, CASES};
use crate::report::capture;
use crate::runtime::deterministic::{DetConfig, DetRuntime};
use bio_core::block::{submit_bio_noacct, ReqFlags, ReqOp};
use bio_core::drivers::block::loop_drv::{
    LoopBacking, LoopDevice, LoopVariant, MemBacking, LO_FLAGS_DIRECT_IO,
};
use bio_core::kernel::{CpuId, KernelConfig};
use bio_core::Kernel;
use std::sync::Arc;

/// The device the model's backing file sits on (the live machine's virtio disk is 254,0; the
/// normalization only looks at the role, so any number other than the loop major does).
pub const MODEL_LOWER: (u32, u32) = (254, 0);

/// The setup the model's events are normalized with: loop0, the backing file mapped onto
/// [`MODEL_LOWER`] from sector 0.
pub fn model_setup() -> Setup {
    Setup {
        kernel: "biosim".into(),
        loop_number: 0,
        lower: MODEL_LOWER,
        nr_blocking_writes: false,
        extents: vec![(0, 0, u64::MAX / 2)],
    }
}

/// Steps a case may take before it is declared stuck.
const BUDGET: usize = 1000;

/// Runs every case on `variant` and returns each one's captured lines (the raw capture).
pub fn capture_cases(variant: LoopVariant) -> Vec<String> {
    let kernel = Kernel::new(KernelConfig::default(), 2).expect("2 CPUs boot");
    let rt = DetRuntime::new(
        Arc::clone(&kernel),
        DetConfig {
            record_steps: false,
            capture_trace: false,
            ..DetConfig::default()
        },
    );
    let mem = Arc::new(
        MemBacking::sparse(super::live::BACKING_BYTES)
            .asynchronous()
            .with_lower_device(MODEL_LOWER),
    );
    let backing: Arc<dyn LoopBacking> = mem.clone();
    let lo = LoopDevice::new(&kernel, 0, backing, LO_FLAGS_DIRECT_IO, 0, variant);
    let mut out = Vec::new();
    for case in &CASES {
        let lines = capture::Lines::default();
        let exec = Arc::new(std::sync::atomic::AtomicI64::new(-1));
        // Times and tasks are not compared: a monotonic clock and the idle task will do.
        let context: std::rc::Rc<dyn capture::CaptureContext> =
            std::rc::Rc::new(capture::Monotonic::since(std::time::Instant::now()));
        capture::capture(&lines, &exec, tracing::Level::TRACE, context, || {
            let (op, flags) = if case.write {
                // blkdev_direct_IO(): dio_bio_write_op() is REQ_OP_WRITE | REQ_SYNC | REQ_IDLE.
                (ReqOp::Write, ReqFlags::REQ_SYNC)
            } else {
                // The live kernel's O_DIRECT reads print RS too.
                (ReqOp::Read, ReqFlags::REQ_SYNC)
            };
            let sector = u64::from(case.block) * 8;
            let len = case.blocks as usize * 4096;
            let data = if case.write {
                vec![case.fill; len]
            } else {
                vec![0xee; len]
            };
            let bio = kernel
                .bio_alloc(op, sector)
                .with_flags(flags)
                .with_data(data);
            rt.on_cpu(CpuId(0), case.name, |cx| submit_bio_noacct(bio, &*lo, cx));
            for _ in 0..BUDGET {
                if let Some(&ev) = rt.enabled().first() {
                    let _ = rt.step(ev);
                } else if mem.pending() > 0 {
                    rt.on_cpu(CpuId(0), "the backing device's interrupt", |cx| {
                        cx.with_hardirq(|cx| mem.complete_next(&lo, cx))
                    });
                } else {
                    break;
                }
            }
        });
        let text = lines
            .lock()
            .iter()
            .map(|r| r.human())
            .collect::<Vec<_>>()
            .join("\n");
        out.push(text);
    }
    out
}

/// The model's normalized events per case on `variant`. A line the normalization cannot read is
/// an error (the model printed a kept tracepoint in a form the kernel does not).
pub fn run(variant: LoopVariant) -> Result<Vec<Vec<Ev>>, super::CalibrateError> {
    let setup = model_setup();
    capture_cases(variant)
        .iter()
        .zip(&CASES)
        .map(|(t, case)| {
            normalize::events(t, &setup).map_err(|(line, what)| {
                super::CalibrateError::Kernel(format!(
                    "the model's trace of {} on {}, line {line}: {what}",
                    case.name, variant.name
                ))
            })
        })
        .collect()
}
