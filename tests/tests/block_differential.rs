//! A differential proptest of the block devices against an in-memory reference: random streams
//! of read / write / flush / discard / write-zeroes bios, submitted one after another from
//! alternating CPUs through `submit_bio_noacct()`, into
//!
//! - the loop driver (`drivers/block/loop.c`, V5) over each backing engine: `FileBacking`
//!   (synchronous preadv2/pwritev2 on a real temporary file), `UringBacking` (io_uring on one),
//!   and bio-core's `MemBacking`;
//! - null_blk (`drivers/block/null_blk/main.c`) with `memory_backed=1 discard=1`, in each
//!   `irqmode` (none, softirq, timer);
//!
//! each on the threaded runtime and, where the device runs there (everything but io_uring, whose
//! completions come from a real reaper thread), on the deterministic one. Every bio's status is
//! what the device's queue limits say (null_blk has no write-zeroes: `BLK_STS_NOTSUPP`, data
//! untouched), every read buffer equals the reference, and at the end the whole device (read back
//! through bios) and its backing store (the file, the memory backing) equal it too.
//!
//! The buggy twin: the same check with one stored byte flipped behind the device's back after the
//! first write (`NullBlk::corrupt_stored_byte`, or a read-modify-write of the backing file) must
//! fail, naming the block, on every engine and runtime.

use bio_core::block::BlockDriver;
use bio_core::block::{submit_bio_noacct, BioEndIo, BlkStatus, ReqFlags, ReqOp};
use bio_core::block::{BLK_STS_NOTSUPP, BLK_STS_OK};
use bio_core::drivers::block::loop_drv::{
    LoopBacking, LoopDevice, LoopVariant, MemBacking, LO_FLAGS_DIRECT_IO,
};
use bio_core::drivers::block::null_blk::{HrtimerClock, NullBlk, NullBlkConfig};
use bio_core::{Cpu, CpuId, Kernel, KernelConfig};
use bio_sim::dev::backing::{BackingFile, OpenOptions};
use bio_sim::dev::cleanup::TempFile;
use bio_sim::dev::loop_file::{FileBacking, UringBacking};
use bio_sim::runtime::deterministic::{DetConfig, DetRuntime};
use bio_sim::runtime::threaded::{ThreadedConfig, ThreadedRuntime};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BS: usize = 4096;
const BLOCKS: u32 = 16;
const SIZE: u64 = BLOCKS as u64 * BS as u64;

#[derive(Debug, Clone, Copy)]
enum Op {
    Write { block: u32, n: u32, fill: u8 },
    Read { block: u32, n: u32 },
    Flush,
    Discard { block: u32, n: u32 },
    WriteZeroes { block: u32, n: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    let range = (0..BLOCKS).prop_flat_map(|b| (Just(b), 1..=(BLOCKS - b).min(3)));
    prop_oneof![
        4 => (range.clone(), 1..=255u8).prop_map(|((block, n), fill)| Op::Write { block, n, fill }),
        3 => range.clone().prop_map(|(block, n)| Op::Read { block, n }),
        1 => Just(Op::Flush),
        1 => range.clone().prop_map(|(block, n)| Op::Discard { block, n }),
        1 => range.prop_map(|(block, n)| Op::WriteZeroes { block, n }),
    ]
}

/// The engines and devices under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dev {
    LoopSync,
    LoopUring,
    LoopMem,
    NullBlk(u32),
}

const DEVS: [Dev; 6] = [
    Dev::LoopSync,
    Dev::LoopUring,
    Dev::LoopMem,
    Dev::NullBlk(0),
    Dev::NullBlk(1),
    Dev::NullBlk(2),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rt {
    Threaded,
    Deterministic,
}

/// One device on one booted kernel, with what the check needs to reach its backing store.
struct Rig {
    dev: Arc<dyn BlockDriver>,
    nullb: Option<Arc<NullBlk>>,
    backing: Option<Arc<dyn LoopBacking>>,
    _uring: Option<Arc<UringBacking>>,
    _file: Option<TempFile>,
}

fn build(kernel: &Arc<Kernel>, dev: Dev, rt: Rt) -> Result<Rig, String> {
    let real_file = || -> Result<(TempFile, Arc<BackingFile>), String> {
        let tmp =
            TempFile::create_in(&std::env::temp_dir(), "biosim-diff").map_err(|e| e.to_string())?;
        let open = |direct| {
            BackingFile::open(
                tmp.path(),
                &OpenOptions {
                    direct,
                    read_only: false,
                    create_size: Some(SIZE),
                },
            )
        };
        // O_DIRECT where the temporary directory has it (not on tmpfs).
        let f = open(true)
            .or_else(|_| open(false))
            .map_err(|e| e.to_string())?;
        Ok((tmp, Arc::new(f)))
    };
    let lo = |backing: Arc<dyn LoopBacking>| {
        LoopDevice::new(kernel, 0, backing, LO_FLAGS_DIRECT_IO, 0, LoopVariant::V5)
    };
    Ok(match dev {
        Dev::LoopSync => {
            let (tmp, f) = real_file()?;
            let b: Arc<dyn LoopBacking> = Arc::new(FileBacking::new(f));
            Rig {
                dev: lo(Arc::clone(&b)),
                nullb: None,
                backing: Some(b),
                _uring: None,
                _file: Some(tmp),
            }
        }
        Dev::LoopUring => {
            let (tmp, f) = real_file()?;
            let u = Arc::new(UringBacking::new(f, 32).map_err(|e| e.to_string())?);
            let d = lo(Arc::clone(&u) as Arc<dyn LoopBacking>);
            u.attach(&d, kernel)?;
            Rig {
                dev: d,
                nullb: None,
                backing: Some(Arc::clone(&u) as Arc<dyn LoopBacking>),
                _uring: Some(u),
                _file: Some(tmp),
            }
        }
        Dev::LoopMem => {
            let b: Arc<dyn LoopBacking> = Arc::new(MemBacking::sparse(SIZE));
            Rig {
                dev: lo(Arc::clone(&b)),
                nullb: None,
                backing: Some(b),
                _uring: None,
                _file: None,
            }
        }
        Dev::NullBlk(irqmode) => {
            let mut cfg = NullBlkConfig {
                clock: match rt {
                    Rt::Threaded => HrtimerClock::Thread,
                    Rt::Deterministic => HrtimerClock::Explicit,
                },
                ..NullBlkConfig::default()
            };
            for kv in [
                format!("irqmode={irqmode}"),
                "memory_backed=1".into(),
                "discard=1".into(),
                "hw_queue_depth=2".into(),
                format!("size={}", SIZE >> 20),
            ] {
                cfg.parse_assignment(&kv)?;
            }
            // size is in MiB: 64 KiB needs the byte field.
            cfg.size_bytes = SIZE;
            let nb = NullBlk::new(kernel, 0, cfg)?;
            Rig {
                dev: Arc::clone(&nb) as Arc<dyn BlockDriver>,
                nullb: Some(nb),
                backing: None,
                _uring: None,
                _file: None,
            }
        }
    })
}

type Done = Arc<Mutex<Option<(BlkStatus, Vec<u8>)>>>;

/// Builds and submits the bio of `op` on `cx`; its end fills `done`.
fn submit(op: Op, dev: &dyn BlockDriver, cx: &Cpu, done: &Done) {
    let d = Arc::clone(done);
    let end = BioEndIo::new("diff_end_io", move |b, _| {
        *d.lock().unwrap() = Some((b.status(), b.data()))
    });
    let k = cx.kernel();
    let bio = match op {
        Op::Write { block, n, fill } => k
            .bio_alloc(ReqOp::Write, u64::from(block) * 8)
            .with_data(vec![fill; n as usize * BS]),
        Op::Read { block, n } => k
            .bio_alloc(ReqOp::Read, u64::from(block) * 8)
            .with_data(vec![0xee; n as usize * BS]),
        Op::Flush => k
            .bio_alloc(ReqOp::Write, 0)
            .with_flags(ReqFlags::REQ_PREFLUSH),
        Op::Discard { block, n } => k
            .bio_alloc(ReqOp::Discard, u64::from(block) * 8)
            .with_size(n * BS as u32),
        Op::WriteZeroes { block, n } => k
            .bio_alloc(ReqOp::WriteZeroes, u64::from(block) * 8)
            .with_size(n * BS as u32),
    };
    submit_bio_noacct(bio.with_end_io(end), dev, cx);
}

/// A runtime to run one bio at a time on.
enum Runner {
    Threaded(ThreadedRuntime),
    Det(DetRuntime),
}

impl Runner {
    /// Submits `op` on `cpu` and waits for its end.
    fn run(&self, rig: &Rig, cpu: u32, op: Op) -> Result<(BlkStatus, Vec<u8>), String> {
        let done: Done = Arc::default();
        match self {
            Runner::Threaded(rt) => {
                let (dev, d) = (Arc::clone(&rig.dev), Arc::clone(&done));
                let ok = rt
                    .run_on(CpuId(cpu), move |cx| {
                        submit(op, &*dev, cx, &d);
                        cx.wait_until("diff: the bio's end", &|| d.lock().unwrap().is_some())
                    })
                    .map_err(|e| e.to_string())?;
                if !ok {
                    return Err(format!("{op:?}: never ended"));
                }
            }
            Runner::Det(rt) => {
                rt.on_cpu(CpuId(cpu), "diff: submit", |cx| {
                    submit(op, &*rig.dev, cx, &done)
                });
                for _ in 0..200 {
                    if done.lock().unwrap().is_some() {
                        break;
                    }
                    // The timer mode's expiry is an explicit event.
                    if let Some(nb) = &rig.nullb {
                        nb.fire_next_hrtimer();
                    }
                    rt.run(50);
                }
            }
        }
        let r = done.lock().unwrap().take();
        r.ok_or_else(|| format!("{op:?}: never ended"))
    }
}

/// What the device's queue limits make of `op`.
fn expected_status(dev: Dev, op: Op) -> BlkStatus {
    match (dev, op) {
        (Dev::NullBlk(_), Op::WriteZeroes { .. }) => BLK_STS_NOTSUPP,
        _ => BLK_STS_OK,
    }
}

/// Flips one stored byte of `block` behind the device's back.
fn corrupt(rig: &Rig, block: u32) {
    let pos = u64::from(block) * BS as u64 + 100;
    if let Some(nb) = &rig.nullb {
        assert!(nb.corrupt_stored_byte(pos), "block {block} holds data");
    } else if let Some(b) = &rig.backing {
        let base = u64::from(block) * BS as u64;
        let mut buf = vec![0; BS];
        b.rw(false, base, &mut buf, false).unwrap();
        buf[100] ^= 0xff;
        b.rw(true, base, &mut buf, false).unwrap();
    }
}

fn first_diff(got: &[u8], want: &[u8], base_block: u32) -> Option<String> {
    let i = got.iter().zip(want).position(|(a, b)| a != b)?;
    Some(format!(
        "block {} byte {}: got {:#x}, want {:#x}",
        base_block as usize + i / BS,
        i % BS,
        got[i],
        want[i]
    ))
}

/// Runs `ops` through `dev` on `rt`; with `fault`, the first write's first block is corrupted
/// right after it completes. `Err` names the first divergence.
fn check(dev: Dev, rt: Rt, ops: &[Op], fault: bool) -> Result<(), String> {
    let kernel = Kernel::boot(KernelConfig::default(), 2, 2).map_err(|e| e.to_string())?;
    let rig = build(&kernel, dev, rt)?;
    let runner = match rt {
        Rt::Threaded => Runner::Threaded(
            ThreadedRuntime::start(
                Arc::clone(&kernel),
                ThreadedConfig {
                    wait_timeout: Duration::from_secs(20),
                    ..ThreadedConfig::default()
                },
            )
            .map_err(|e| e.to_string())?,
        ),
        Rt::Deterministic => Runner::Det(DetRuntime::new(
            Arc::clone(&kernel),
            DetConfig {
                record_steps: false,
                ..DetConfig::default()
            },
        )),
    };
    let mut reference = vec![0u8; SIZE as usize];
    let mut faulted = !fault;
    let result = (|| {
        for (i, &op) in ops.iter().enumerate() {
            let (status, data) = runner.run(&rig, i as u32 % 2, op)?;
            let want = expected_status(dev, op);
            if status != want {
                return Err(format!("op {i} {op:?}: status {status:?}, want {want:?}"));
            }
            let range = |block: u32, n: u32| block as usize * BS..(block + n) as usize * BS;
            match op {
                Op::Write { block, n, fill } => {
                    reference[range(block, n)].fill(fill);
                    if !faulted {
                        corrupt(&rig, block);
                        faulted = true;
                    }
                }
                Op::Read { block, n } => {
                    if let Some(d) = first_diff(&data, &reference[range(block, n)], block) {
                        return Err(format!("op {i} {op:?} reads {d}"));
                    }
                }
                Op::Discard { block, n } => reference[range(block, n)].fill(0),
                Op::WriteZeroes { block, n } if want == BLK_STS_OK => {
                    reference[range(block, n)].fill(0)
                }
                Op::WriteZeroes { .. } | Op::Flush => {}
            }
        }
        // The whole device through bios, then the store behind it.
        let (_, all) = runner.run(
            &rig,
            0,
            Op::Read {
                block: 0,
                n: BLOCKS,
            },
        )?;
        if let Some(d) = first_diff(&all, &reference, 0) {
            return Err(format!("the final read of the device: {d}"));
        }
        let store = if let Some(nb) = &rig.nullb {
            nb.read_backing(0, SIZE as usize).expect("memory backed")
        } else {
            let mut buf = vec![0; SIZE as usize];
            let b = rig.backing.as_ref().expect("a loop backing");
            b.rw(false, 0, &mut buf, false)
                .map_err(|e| format!("{e:?}"))?;
            buf
        };
        match first_diff(&store, &reference, 0) {
            Some(d) => Err(format!("the backing store: {d}")),
            None => Ok(()),
        }
    })();
    if let Runner::Threaded(rt) = runner {
        let report = rt.shutdown();
        if !report.is_clean() && result.is_ok() {
            return Err(format!("unclean shutdown: {report:?}"));
        }
    }
    if let Some(r) = kernel.reports().all().first() {
        if result.is_ok() {
            return Err(format!("kernel report: {}", r.message));
        }
    }
    result
}

fn combos() -> Vec<(Dev, Rt)> {
    let mut v = Vec::new();
    for dev in DEVS {
        v.push((dev, Rt::Threaded));
        if dev != Dev::LoopUring {
            v.push((dev, Rt::Deterministic));
        }
    }
    v
}

fn uring_available() -> bool {
    io_uring_probe().is_ok()
}

fn io_uring_probe() -> Result<(), String> {
    let tmp = TempFile::create_in(&std::env::temp_dir(), "biosim-diff-probe")
        .map_err(|e| e.to_string())?;
    let f = BackingFile::open(
        tmp.path(),
        &OpenOptions {
            direct: false,
            read_only: false,
            create_size: Some(4096),
        },
    )
    .map_err(|e| e.to_string())?;
    UringBacking::new(Arc::new(f), 4)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn skip(dev: Dev) -> bool {
    if dev == Dev::LoopUring && !uring_available() {
        eprintln!("skipping the io_uring engine: io_uring is not available here");
        return true;
    }
    false
}

#[test]
fn every_engine_and_null_blk_match_the_reference_on_both_runtimes() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(16);
    let mut bad = Vec::new();
    for (dev, rt) in combos() {
        if skip(dev) {
            continue;
        }
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let r = runner.run(&prop::collection::vec(op(), 1..20), |ops| {
            check(dev, rt, &ops, false).map_err(proptest::test_runner::TestCaseError::fail)
        });
        if let Err(e) = r {
            bad.push(format!("{dev:?} on {rt:?}: {e}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The buggy twin: a byte flipped in the store after the first write is caught, on the read that
/// follows it, on every engine and runtime.
#[test]
fn a_corrupted_block_is_caught_on_every_engine_and_runtime() {
    let ops = [
        Op::Write {
            block: 5,
            n: 2,
            fill: 0x3c,
        },
        Op::Read { block: 4, n: 3 },
    ];
    for (dev, rt) in combos() {
        if skip(dev) {
            continue;
        }
        check(dev, rt, &ops, false).unwrap_or_else(|e| panic!("{dev:?} on {rt:?}: {e}"));
        let e = check(dev, rt, &ops, true).expect_err("the corruption must be caught");
        assert!(
            e.contains("op 1") && e.contains("block 5 byte 100"),
            "{dev:?} on {rt:?}: {e}"
        );
    }
}
