//! A split write, as `bio_split()` + `bio_chain()` produce it, completed out of order with an
//! error in one child: the parent's `bi_end_io` runs once, last, with the first error.
//!
//! Run: `RUST_LOG=block=trace cargo run -p bio-core --example bio_chain`

use bio_core::block::{
    bio_chain, bio_endio, BioEndIo, BioFlag, BioList, ReqFlags, ReqOp, BLK_STS_MEDIUM,
};
use bio_core::{CpuId, Kernel, KernelConfig};

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .without_time()
        .with_ansi(false)
        .init();

    let kernel = Kernel::new(KernelConfig::default(), 2).expect("valid config");
    let cpu = kernel.cpu(CpuId(0)).expect("CPU0");

    // The original 16 KiB write, with the submitter's completion callback.
    let mut parent = kernel
        .bio_alloc(ReqOp::Write, 2048)
        .with_flags(ReqFlags::REQ_SYNC)
        .with_data(vec![0xab; 4096])
        .with_end_io(BioEndIo::new("submitter_end_io", |bio, cpu| {
            println!(
                "bi_end_io(bio#{}) on CPU{}: status={} remaining={} in_task={}",
                bio.id(),
                cpu.id().0,
                bio.status(),
                bio.remaining(),
                cpu.in_task()
            );
        }));
    parent.bi_bdev = Some((8, 0));
    parent.set_flag(BioFlag::TraceCompletion);

    // Three split-off children chained to it.
    let mut children = BioList::new();
    for i in 0..3u64 {
        let mut child = kernel
            .bio_alloc(ReqOp::Write, 2056 + 8 * i)
            .with_data(vec![0xcd; 4096]);
        child.bi_bdev = Some((8, 0));
        child.set_flag(BioFlag::TraceCompletion);
        bio_chain(&mut child, &mut parent, &cpu).expect("fresh child");
        children.add(child);
    }
    println!(
        "parent bio#{} __bi_remaining={} after chaining {} children",
        parent.id(),
        parent.remaining(),
        children.size()
    );

    // The device finishes the parent first, then the children; the middle one fails.
    bio_endio(parent, &cpu);
    println!("parent's own bio_endio() done; nothing completed yet");
    let mut n = 0;
    while let Some(mut child) = children.pop() {
        if n == 1 {
            child.set_status(BLK_STS_MEDIUM);
        }
        println!(
            "completing child bio#{} with {}",
            child.id(),
            child.status()
        );
        // Completions arrive from the device's interrupt handler.
        cpu.with_hardirq(|cpu| bio_endio(child, cpu));
        n += 1;
    }
    assert!(kernel.reports().is_empty());
}
