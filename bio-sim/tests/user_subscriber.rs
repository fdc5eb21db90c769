//! The kernel model's `tracing` events reach a user's own subscriber: a program embedding biosim
//! installs a global subscriber with biosim's capture layer beside its own layers (as
//! `bio_sim::trace::init()` does with its `RUST_LOG` fmt layer). Outside a capture a bio-core
//! operation's events reach the user's layer; inside one (a deterministic run keeping its trace)
//! they are captured, and the user's layer still sees them.
//!
//! Its own test binary: the global subscriber is per process.

use bio_core::block::complete_in_task::{bio_complete_init, Variant};
use bio_core::block::{bio_endio, BioEndIo, BioFlag, ReqOp};
use bio_core::{CpuId, Kernel, KernelConfig};
use bio_sim::machine::oracle::Need;
use bio_sim::machine::{CompletionContext, Sim, SimConfig};
use bio_sim::report::capture;
use parking_lot::Mutex;
use std::sync::Arc;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

/// The user's layer: records the `tracepoint` field of every event it sees, with the thread.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(std::thread::ThreadId, String)>>>);

impl Recorder {
    /// The tracepoints this thread's events carried.
    fn mine(&self) -> Vec<String> {
        let me = std::thread::current().id();
        self.0
            .lock()
            .iter()
            .filter(|(t, _)| *t == me)
            .map(|(_, tp)| tp.clone())
            .collect()
    }
}

struct Tracepoint(String);

impl Visit for Tracepoint {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "tracepoint" {
            self.0 = value.to_owned();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "tracepoint" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut tp = Tracepoint(String::new());
        event.record(&mut tp);
        self.0.lock().push((std::thread::current().id(), tp.0));
    }
}

fn install() -> Recorder {
    static RECORDER: std::sync::OnceLock<Recorder> = std::sync::OnceLock::new();
    RECORDER
        .get_or_init(|| {
            let recorder = Recorder::default();
            // The user's filter, as `RUST_LOG=block=trace` would set it, on the user's layer only.
            let filter: Targets = "block=trace".parse().expect("a valid filter");
            // Composed as `bio_sim::trace::init()` composes its fmt layer: the capture layer as
            // the global filter ("a capture, or the user's filter"), the user's layer filtered by
            // its own copy.
            tracing_subscriber::registry()
                .with(capture::layer_or(filter.clone()))
                .with(recorder.clone().with_filter(filter))
                .init();
            recorder
        })
        .clone()
}

#[test]
fn a_bio_core_operation_outside_a_capture_reaches_the_users_layer() {
    let recorder = install();
    let kernel = Kernel::new(KernelConfig::default(), 1).expect("boots");
    bio_complete_init(&kernel, Variant::V7, None).expect("initialises");
    let mut bio = kernel
        .bio_alloc(ReqOp::Write, 0)
        .with_end_io(BioEndIo::new("user_end_io", |_, _| {}));
    bio.set_flag(BioFlag::CompleteInTask);
    let cx = kernel.cpu(CpuId(0)).expect("CPU0");
    // From hardirq: bio_endio() defers the bio to CPU0's batch and schedules the worker.
    cx.with_hardirq(|cx| bio_endio(bio, cx));
    let seen = recorder.mine();
    assert!(
        seen.iter().any(|tp| tp == "biosim_bio_complete_defer"),
        "the user's layer saw: {seen:?}"
    );
    assert!(
        seen.iter().any(|tp| tp == "biosim_bio_complete_schedule"),
        "the user's layer saw: {seen:?}"
    );
}

#[test]
fn inside_a_capture_the_events_are_captured_and_the_users_layer_still_sees_them() {
    let recorder = install();
    let s = Sim::new(SimConfig {
        trace: true,
        ..SimConfig::default()
    })
    .expect("boots");
    s.complete(
        CpuId(1),
        CompletionContext::Hardirq,
        Need::Flag,
        ReqOp::Write,
    )
    .expect("CPU1 is online");
    let trace = s.trace();
    assert!(trace.contains("biosim_bio_complete_defer: bio#"), "{trace}");
    let seen = recorder.mine();
    assert!(
        seen.iter().any(|tp| tp == "biosim_bio_complete_defer"),
        "the user's layer saw: {seen:?}"
    );
}
