//! A tour of the simulated machine: an interrupt on CPU1 arms a per-CPU delayed work, CPU1 goes
//! offline one hotplug step at a time, and the timer and the work end up running elsewhere.
//!
//! Run: `cargo run -p bio-sim --example machine_tour [seed]`

use bio_core::kernel::CpuId;
use bio_core::workqueue::{WQ_MEM_RECLAIM, WQ_PERCPU};
use bio_core::{Kernel, KernelConfig};
use bio_sim::runtime::deterministic::{DetConfig, DetRuntime};
use bio_sim::runtime::Event;
use hotplug::CPUHP_OFFLINE;
use std::sync::Arc;

fn main() {
    let seed = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let kernel = Kernel::new(KernelConfig::default(), 2).expect("valid config");
    let rt = DetRuntime::new(
        Arc::clone(&kernel),
        DetConfig {
            seed,
            ..DetConfig::default()
        },
    );
    let wq = kernel
        .alloc_workqueue("tour_wq", WQ_MEM_RECLAIM | WQ_PERCPU, 0)
        .expect("valid flags");
    let dwork = kernel.init_delayed_work("tour_work_fn", |cx, _| {
        tracing::info!(
            cpu = u64::from(cx.id().0),
            "tour_work_fn runs as {} (in_task={})",
            cx.current().comm,
            cx.in_task()
        );
    });

    // A device interrupt on CPU1 arms the delayed work on CPU1, 1 jiffy out.
    let wq2 = wq.clone();
    kernel
        .raise_irq(
            CpuId(1),
            "tour_dev",
            Box::new(move |cx| {
                cx.kernel()
                    .queue_delayed_work_on(Some(cx.id()), &wq2, dwork, 1, cx);
            }),
        )
        .expect("CPU1 exists");
    rt.step(Event::Irq(CpuId(1))).expect("the IRQ is pending");

    // CPU1 goes offline before the jiffy passes: the timer is still on CPU1's base.
    kernel
        .cpu_down_start(CpuId(1), CPUHP_OFFLINE)
        .expect("CPU1 can go offline");
    while kernel.hotplug_in_progress(CpuId(1)) {
        rt.step(Event::Hotplug(CpuId(1))).expect("a hotplug step");
    }
    // timers_dead_cpu() moved the timer to CPU0; let the seeded scheduler finish.
    let summary = rt.run(100);
    print!("{}", rt.trace_text());
    println!(
        "-- {} steps, quiescent: {}, reports: {}",
        rt.steps(),
        summary.quiescent,
        kernel.reports().len()
    );
}
