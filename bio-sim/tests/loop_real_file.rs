//! The loop driver model over a real `O_DIRECT` file with asynchronous I/O (io_uring) on the
//! threaded runtime: completions arrive as interrupts on the submitting CPU, `ki_complete()`
//! requeues a NOWAIT `-EAGAIN` to the worker, and every bio ends once, in `BLOCK_SOFTIRQ`, with
//! the data it should have.

use bio_core::block::{submit_bio_noacct, BioEndIo, BlkStatus, ReqOp};
use bio_core::drivers::block::loop_drv::{
    LoopBacking, LoopDevice, LoopVariant, LO_FLAGS_DIRECT_IO,
};
use bio_core::kernel::CpuId;
use bio_core::{Kernel, KernelConfig};
use bio_sim::dev::backing::{BackingFile, OpenOptions, RwFlags};
use bio_sim::dev::loop_file::UringBacking;
use bio_sim::runtime::threaded::{ThreadedConfig, ThreadedRuntime};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const BLOCKS: u64 = 64;

/// (bio id, status, data, serving a softirq, the CPU it ended on)
type Ended = Arc<Mutex<Vec<(u64, BlkStatus, Vec<u8>, bool, u32)>>>;

fn pattern(b: u64) -> Vec<u8> {
    (0..4096).map(|i| (b as usize * 7 + i / 64) as u8).collect()
}

/// Runs `ops` (write or read of a block) from both CPUs in turn; returns what ended, or `None`
/// where this machine cannot run it (no O_DIRECT on the temp filesystem, io_uring disabled).
fn run(
    sparse: bool,
    ops: &[(bool, u64)],
) -> Option<(Ended, bio_core::drivers::block::loop_drv::LoopStats)> {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = match BackingFile::open(
        &dir.path().join("lo.img"),
        &OpenOptions {
            direct: true,
            read_only: false,
            create_size: Some(BLOCKS * 4096),
        },
    ) {
        Ok(f) => Arc::new(f),
        Err(e) => {
            eprintln!("skipped: {e}");
            return None;
        }
    };
    if !sparse {
        let zeros = bio_sim::dev::aligned::AlignedBuf::new((BLOCKS * 4096) as usize);
        file.write_all_at(&zeros, 0, RwFlags::empty()).unwrap();
    }
    let kernel = Kernel::boot(KernelConfig::default(), 2, 2).unwrap();
    let backing = match UringBacking::new(Arc::clone(&file), 64) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            eprintln!("skipped: io_uring unavailable: {e}");
            return None;
        }
    };
    let lo = LoopDevice::new(
        &kernel,
        0,
        backing.clone() as Arc<dyn LoopBacking>,
        LO_FLAGS_DIRECT_IO,
        0,
        LoopVariant::V5,
    );
    backing.attach(&lo, &kernel).unwrap();
    let other = LoopDevice::new(
        &kernel,
        1,
        backing.clone() as Arc<dyn LoopBacking>,
        LO_FLAGS_DIRECT_IO,
        0,
        LoopVariant::V5,
    );
    assert!(
        backing.attach(&other, &kernel).is_err(),
        "one backing serves one device"
    );
    let rt = ThreadedRuntime::start(Arc::clone(&kernel), ThreadedConfig::default()).unwrap();
    let ended: Ended = Arc::default();
    let outstanding = Arc::new(AtomicU64::new(0));
    for (i, &(write, block)) in ops.iter().enumerate() {
        let (lo, ended, out) = (
            Arc::clone(&lo),
            Arc::clone(&ended),
            Arc::clone(&outstanding),
        );
        out.fetch_add(1, Ordering::SeqCst);
        rt.run_on(CpuId(i as u32 % 2), move |cx| {
            let op = if write { ReqOp::Write } else { ReqOp::Read };
            let data = if write {
                pattern(block)
            } else {
                vec![0xee; 4096]
            };
            let bio = cx
                .kernel()
                .bio_alloc(op, block * 8)
                .with_data(data)
                .with_end_io(BioEndIo::new("test_end_io", move |bio, cx| {
                    ended.lock().push((
                        bio.id(),
                        bio.status(),
                        bio.data(),
                        cx.in_serving_softirq(),
                        cx.id().0,
                    ));
                    out.fetch_sub(1, Ordering::SeqCst);
                }));
            submit_bio_noacct(bio, &*lo, cx);
        })
        .unwrap();
        // Writes complete before the reads of the same blocks are issued.
        if i + 1 == ops.len() / 2 || i + 1 == ops.len() {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while outstanding.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    assert_eq!(outstanding.load(Ordering::SeqCst), 0, "every bio ended");
    backing.wait_idle();
    assert!(rt.quiesce(Duration::from_secs(20)));
    let stats = lo.stats();
    assert!(rt.shutdown().is_clean());
    assert!(kernel.reports().is_empty(), "{:?}", kernel.reports().all());
    Some((ended, stats))
}

fn writes_then_reads() -> Vec<(bool, u64)> {
    let blocks: Vec<u64> = (0..32).map(|i| (i * 37) % BLOCKS).collect();
    blocks
        .iter()
        .map(|&b| (true, b))
        .chain(blocks.iter().map(|&b| (false, b)))
        .collect()
}

#[test]
fn async_nowait_hits_complete_from_the_interrupt_and_read_back_what_was_written() {
    let ops = writes_then_reads();
    let Some((ended, stats)) = run(false, &ops) else {
        return;
    };
    let ended = ended.lock();
    assert_eq!(ended.len(), ops.len());
    assert!(
        ended.iter().all(|e| e.1.is_ok()),
        "{:?}",
        ended.iter().map(|e| e.1).collect::<Vec<_>>()
    );
    assert!(
        ended.iter().all(|e| e.3),
        "every loop bio ends in BLOCK_SOFTIRQ"
    );
    // No worker here: each completion interrupt goes to the submitting CPU (op i on CPU i % 2),
    // and the bio ends there.
    let cpus: std::collections::BTreeSet<u32> = ended.iter().map(|e| e.4).collect();
    assert_eq!(cpus.into_iter().collect::<Vec<_>>(), [0, 1]);
    let reads: Vec<&Vec<u8>> = ended.iter().skip(32).map(|e| &e.2).collect();
    let mut want: Vec<Vec<u8>> = (0..32).map(|i| pattern((i * 37) % BLOCKS)).collect();
    let mut got: Vec<Vec<u8>> = reads.into_iter().cloned().collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "the reads return the written blocks");
    assert_eq!((stats.nowait_done, stats.worker_cmds), (64, 0), "{stats:?}");
}

#[test]
fn a_nowait_eagain_from_the_ring_is_requeued_to_the_worker() {
    // Writes into holes: ext4 refuses the NOWAIT direct write; through io_uring the -EAGAIN comes
    // back in the CQE (the kernel's loop would see it from ->write_iter(); see docs/loop.md).
    let ops = writes_then_reads();
    let Some((ended, stats)) = run(true, &ops) else {
        return;
    };
    let ended = ended.lock();
    assert!(ended.iter().all(|e| e.1.is_ok() && e.3));
    assert!(stats.nowait_eagain >= 1, "{stats:?}");
    assert!(stats.worker_cmds >= 1, "the fallback ran: {stats:?}");
    let mut got: Vec<Vec<u8>> = ended.iter().skip(32).map(|e| e.2.clone()).collect();
    let mut want: Vec<Vec<u8>> = (0..32).map(|i| pattern((i * 37) % BLOCKS)).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}
