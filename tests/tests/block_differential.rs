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
//! A second property runs the same devices concurrently: rounds of single-block reads and writes
//! on disjoint blocks, each CPU submitting its share back to back so several bios are in flight
//! per CPU; null_blk's `hw_queue_depth=2` then fills, so submitters sleep in `blk_mq_get_tag()`
//! and `REQ_NOWAIT` bios end `BLK_STS_AGAIN` (and change nothing).
//!
//! The buggy twins: one stored byte flipped behind the device's back
//! (`NullBlk::corrupt_stored_byte`, or a read-modify-write of the backing file) after the first
//! write must be caught by the read that follows it; in a block no op reads, by the final read
//! of the whole device; after that final read, by the comparison of the store; a short read by
//! the length check. Each names where, on every engine and runtime.
//!
//! Skips, each with a one-line reason: the two file engines when the temporary directory's
//! filesystem refuses `O_DIRECT` with `EINVAL` (no silent fallback to buffered I/O), and the
//! io_uring engine when a direct `io_uring_setup(2)` fails with `ENOSYS` or `EPERM`.

use bio_core::block::BlockDriver;
use bio_core::block::{submit_bio_noacct, BioEndIo, BlkStatus, ReqFlags, ReqOp};
use bio_core::block::{BLK_STS_AGAIN, BLK_STS_NOTSUPP, BLK_STS_OK};
use bio_core::drivers::block::loop_drv::{
    LoopBacking, LoopDevice, LoopVariant, MemBacking, LO_FLAGS_DIRECT_IO,
};
use bio_core::drivers::block::null_blk::{HrtimerClock, NullBlk, NullBlkConfig};
use bio_core::{Cpu, CpuId, Kernel, KernelConfig};
use bio_sim::dev::backing::{BackingError, BackingFile, OpenOptions};
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
        // O_DIRECT only: skip() has already skipped a filesystem that refuses it.
        let f = open(true).map_err(|e| e.to_string())?;
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
    submit_flags(op, false, dev, cx, done)
}

/// [`submit`], with `REQ_NOWAIT` when `nowait`.
fn submit_flags(op: Op, nowait: bool, dev: &dyn BlockDriver, cx: &Cpu, done: &Done) {
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
    let bio = if nowait {
        bio.with_flags(ReqFlags::REQ_NOWAIT)
    } else {
        bio
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

impl Runner {
    /// One concurrent round: each CPU submits its `(op, nowait)` list back to back, every bio
    /// still in flight when the next is submitted, then waits for all of them; both CPUs at once
    /// on the threaded runtime. Returns the ends in the order of `per_cpu`, flattened.
    fn burst(
        &self,
        rig: &Rig,
        per_cpu: &[Vec<(Op, bool)>],
    ) -> Result<Vec<(BlkStatus, Vec<u8>)>, String> {
        let dones: Vec<Vec<Done>> = per_cpu
            .iter()
            .map(|ops| ops.iter().map(|_| Done::default()).collect())
            .collect();
        match self {
            Runner::Threaded(rt) => {
                let mut handles = Vec::new();
                for (cpu, ops) in per_cpu.iter().enumerate() {
                    let (dev, ds, ops) = (Arc::clone(&rig.dev), dones[cpu].clone(), ops.clone());
                    handles.push(
                        rt.post_on(CpuId(cpu as u32), move |cx| {
                            for (&(op, nowait), d) in ops.iter().zip(&ds) {
                                submit_flags(op, nowait, &*dev, cx, d);
                            }
                            cx.wait_until("diff: the round's ends", &|| {
                                ds.iter().all(|d| d.lock().unwrap().is_some())
                            })
                        })
                        .map_err(|e| e.to_string())?,
                    );
                }
                for h in handles {
                    if !h.wait().map_err(|e| e.to_string())? {
                        return Err(format!("{per_cpu:?}: a bio never ended"));
                    }
                }
            }
            Runner::Det(rt) => {
                for (cpu, ops) in per_cpu.iter().enumerate() {
                    rt.on_cpu(CpuId(cpu as u32), "diff: submit a round", |cx| {
                        for (&(op, nowait), d) in ops.iter().zip(&dones[cpu]) {
                            submit_flags(op, nowait, &*rig.dev, cx, d);
                        }
                    });
                }
                let all_done = || dones.iter().flatten().all(|d| d.lock().unwrap().is_some());
                for _ in 0..400 {
                    if all_done() {
                        break;
                    }
                    if let Some(nb) = &rig.nullb {
                        nb.fire_next_hrtimer();
                    }
                    rt.run(50);
                }
            }
        }
        dones
            .iter()
            .flatten()
            .map(|d| {
                d.lock()
                    .unwrap()
                    .take()
                    .ok_or_else(|| format!("{per_cpu:?}: a bio never ended"))
            })
            .collect()
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

/// The first byte where `got` differs from `want`, after their lengths (a short or empty read
/// must not pass because `zip` stops at the shorter one).
fn first_diff(got: &[u8], want: &[u8], base_block: u32) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!(
            "from block {base_block}: {} bytes, want {}",
            got.len(),
            want.len()
        ));
    }
    let i = got.iter().zip(want).position(|(a, b)| a != b)?;
    Some(format!(
        "block {} byte {}: got {:#x}, want {:#x}",
        base_block as usize + i / BS,
        i % BS,
        got[i],
        want[i]
    ))
}

/// Where a twin corrupts the store (`Fault::None`: the sound run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// The first write's first block, right after it completes.
    AfterFirstWrite,
    /// Block 5, after the final read of the device: only the store comparison can see it.
    AfterFinalRead,
}

/// Boots a kernel, builds `dev` and the runtime `rt`.
fn setup(dev: Dev, rt: Rt) -> Result<(Arc<Kernel>, Rig, Runner), String> {
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
    Ok((kernel, rig, runner))
}

/// The final read of the whole device through bios, then the store behind it, against
/// `reference`; with [`Fault::AfterFinalRead`] the store is corrupted between the two.
fn final_checks(rig: &Rig, runner: &Runner, reference: &[u8], fault: Fault) -> Result<(), String> {
    let (_, all) = runner.run(
        rig,
        0,
        Op::Read {
            block: 0,
            n: BLOCKS,
        },
    )?;
    if let Some(d) = first_diff(&all, reference, 0) {
        return Err(format!("the final read of the device: {d}"));
    }
    if fault == Fault::AfterFinalRead {
        corrupt(rig, 5);
    }
    let store = if let Some(nb) = &rig.nullb {
        nb.read_backing(0, SIZE as usize).expect("memory backed")
    } else {
        let mut buf = vec![0; SIZE as usize];
        let b = rig.backing.as_ref().expect("a loop backing");
        let n = b
            .rw(false, 0, &mut buf, false)
            .map_err(|e| format!("{e:?}"))?;
        buf.truncate(n);
        buf
    };
    match first_diff(&store, reference, 0) {
        Some(d) => Err(format!("the backing store: {d}")),
        None => Ok(()),
    }
}

/// Shuts the runtime down and turns an unclean shutdown or a kernel report into an error when
/// `result` is otherwise fine.
fn finish(kernel: &Kernel, runner: Runner, result: Result<(), String>) -> Result<(), String> {
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

/// Runs `ops` through `dev` on `rt`, corrupting the store where `fault` says. `Err` names the
/// first divergence.
fn check(dev: Dev, rt: Rt, ops: &[Op], fault: Fault) -> Result<(), String> {
    let (kernel, rig, runner) = setup(dev, rt)?;
    let mut reference = vec![0u8; SIZE as usize];
    let mut faulted = fault != Fault::AfterFirstWrite;
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
        final_checks(&rig, &runner, &reference, fault)
    })();
    finish(&kernel, runner, result)
}

/// One op of a concurrent round: a single-block read or write, maybe `REQ_NOWAIT`.
fn round_op() -> impl Strategy<Value = (Op, bool)> {
    let op = prop_oneof![
        3 => (0..BLOCKS, 1..=255u8).prop_map(|(block, fill)| Op::Write { block, n: 1, fill }),
        2 => (0..BLOCKS).prop_map(|block| Op::Read { block, n: 1 }),
    ];
    (op, prop::bool::weighted(0.3))
}

fn op_block(op: Op) -> u32 {
    match op {
        Op::Write { block, .. }
        | Op::Read { block, .. }
        | Op::Discard { block, .. }
        | Op::WriteZeroes { block, .. } => block,
        Op::Flush => 0,
    }
}

/// Splits a round between the two CPUs, dropping an op whose block an earlier op of the round
/// uses: ops in flight together touch disjoint blocks, so the reference needs no order.
fn split_round(round: &[(Op, bool)]) -> Vec<Vec<(Op, bool)>> {
    let mut used = Vec::new();
    let mut per_cpu = vec![Vec::new(), Vec::new()];
    for &(op, nowait) in round {
        if used.contains(&op_block(op)) {
            continue;
        }
        used.push(op_block(op));
        per_cpu[used.len() % 2].push((op, nowait));
    }
    per_cpu
}

/// Timer-mode null_blk on the deterministic runtime (`HrtimerClock::Explicit`).
fn explicit_timer(dev: Dev, rt: Rt) -> bool {
    dev == Dev::NullBlk(2) && rt == Rt::Deterministic
}

/// Tag pressure seen in a concurrent run (null_blk only).
#[derive(Debug, Default, Clone, Copy)]
struct Pressure {
    tag_waits: u64,
    again: u64,
}

/// Runs concurrent `rounds` through `dev` on `rt`: every status is `BLK_STS_OK`, or
/// `BLK_STS_AGAIN` for a `REQ_NOWAIT` bio (which then changes nothing); reads equal the
/// reference; then [`final_checks`].
fn check_concurrent(dev: Dev, rt: Rt, rounds: &[Vec<(Op, bool)>]) -> Result<Pressure, String> {
    let (kernel, rig, runner) = setup(dev, rt)?;
    let mut reference = vec![0u8; SIZE as usize];
    let mut again = 0;
    let result = (|| {
        for (r, round) in rounds.iter().enumerate() {
            let mut per_cpu = split_round(round);
            if explicit_timer(dev, rt) {
                // The deterministic runtime's hrtimer expires only as an explicit event, which a
                // submitter asleep in blk_mq_get_tag() cannot trigger: it would sleep forever
                // (the kernel's wakes when the timer fires). Such rounds are REQ_NOWAIT only.
                per_cpu
                    .iter_mut()
                    .flatten()
                    .for_each(|(_, nowait)| *nowait = true);
            }
            let ends = runner.burst(&rig, &per_cpu)?;
            for ((op, nowait), (status, data)) in per_cpu.iter().flatten().zip(ends) {
                if status == BLK_STS_AGAIN && *nowait {
                    again += 1;
                    continue;
                }
                if status != BLK_STS_OK {
                    return Err(format!(
                        "round {r} {op:?} nowait={nowait}: status {status:?}"
                    ));
                }
                let at = |b: u32| b as usize * BS..(b as usize + 1) * BS;
                match *op {
                    Op::Write { block, fill, .. } => reference[at(block)].fill(fill),
                    Op::Read { block, .. } => {
                        if let Some(d) = first_diff(&data, &reference[at(block)], block) {
                            return Err(format!("round {r} {op:?} reads {d}"));
                        }
                    }
                    _ => unreachable!("rounds hold reads and writes only"),
                }
            }
        }
        final_checks(&rig, &runner, &reference, Fault::None)
    })();
    let tag_waits = rig.nullb.as_ref().map_or(0, |nb| nb.stats().tag_waits);
    finish(&kernel, runner, result).map(|()| Pressure { tag_waits, again })
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

/// `io_uring_setup(2)` called directly (not through the engine under test): `Some(reason)` to
/// skip on `ENOSYS` (no io_uring in this kernel) or `EPERM` (`kernel.io_uring_disabled`, a
/// seccomp filter); any other failure is the test's failure.
fn io_uring_refused() -> Option<String> {
    // struct io_uring_params is 120 bytes; all zero asks for nothing special.
    let mut params = [0u32; 30];
    // SAFETY: io_uring_setup reads and writes `params`, which outlives the call; the fd it
    // returns is closed at once.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if fd >= 0 {
        // SAFETY: `fd` is the descriptor just returned, owned here.
        unsafe { libc::close(fd as libc::c_int) };
        return None;
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::EPERM) => Some(format!("io_uring_setup(2): {e}")),
        _ => panic!("io_uring_setup(2) failed other than ENOSYS/EPERM: {e}"),
    }
}

/// `Some(reason)` when the temporary directory's filesystem refuses `O_DIRECT` with `EINVAL`.
fn direct_io_refused() -> Option<String> {
    let dir = std::env::temp_dir();
    let tmp = TempFile::create_in(&dir, "biosim-diff-probe").expect("a temporary file");
    let r = BackingFile::open(
        tmp.path(),
        &OpenOptions {
            direct: true,
            read_only: false,
            create_size: Some(4096),
        },
    );
    match r {
        Ok(_) => None,
        Err(BackingError::Open { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
            Some(format!("{} refuses O_DIRECT (EINVAL)", dir.display()))
        }
        Err(e) => panic!(
            "opening a probe file with O_DIRECT in {}: {e}",
            dir.display()
        ),
    }
}

fn skip(dev: Dev) -> bool {
    let reason = match dev {
        Dev::LoopSync => direct_io_refused(),
        Dev::LoopUring => direct_io_refused().or_else(io_uring_refused),
        _ => None,
    };
    if let Some(r) = reason {
        eprintln!("skipping {dev:?}: {r}");
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
            check(dev, rt, &ops, Fault::None).map_err(proptest::test_runner::TestCaseError::fail)
        });
        if let Err(e) = r {
            bad.push(format!("{dev:?} on {rt:?}: {e}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn every_engine_and_null_blk_match_the_reference_with_bios_in_flight_together() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(8);
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
        let rounds = prop::collection::vec(prop::collection::vec(round_op(), 2..=8), 1..6);
        let r = runner.run(&rounds, |rounds| {
            check_concurrent(dev, rt, &rounds)
                .map(|_| ())
                .map_err(proptest::test_runner::TestCaseError::fail)
        });
        if let Err(e) = r {
            bad.push(format!("{dev:?} on {rt:?}: {e}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// With `hw_queue_depth=2`, four blocking writes and then three `REQ_NOWAIT` writes per CPU
/// fill the tags: in softirq and timer mode the completions wait for the softirq or the
/// hrtimer, so submitters sleep for a tag (softirq mode on both runtimes, timer mode on the
/// threaded one: see [`explicit_timer`]) and a `REQ_NOWAIT` bio ends `BLK_STS_AGAIN`; the data
/// still matches.
#[test]
fn null_blk_tags_fill_submitters_wait_and_nowait_ends_again() {
    let w = |block, fill| (Op::Write { block, n: 1, fill }, false);
    let nw = |block, fill| (Op::Write { block, n: 1, fill }, true);
    let waits = vec![(0..8).map(|b| w(b, b as u8 + 1)).collect::<Vec<_>>()];
    let nowaits = vec![(8..14).map(|b| nw(b, b as u8 + 1)).collect::<Vec<_>>()];
    let mut total = Pressure::default();
    for irqmode in [1, 2] {
        for rt in [Rt::Threaded, Rt::Deterministic] {
            let dev = Dev::NullBlk(irqmode);
            let p = check_concurrent(dev, rt, &waits)
                .unwrap_or_else(|e| panic!("{dev:?} on {rt:?}: {e}"));
            eprintln!("{dev:?} on {rt:?}, blocking: {p:?}");
            total.tag_waits += p.tag_waits;
            let p = check_concurrent(dev, rt, &nowaits)
                .unwrap_or_else(|e| panic!("{dev:?} on {rt:?}: {e}"));
            eprintln!("{dev:?} on {rt:?}, REQ_NOWAIT: {p:?}");
            // Deterministic: the completions wait for the next step or timer event, so the tags
            // are certainly full. Threaded: they usually are; counted in the total.
            total.again += p.again;
            assert!(
                rt == Rt::Threaded || p.again > 0,
                "{dev:?} on {rt:?}: no REQ_NOWAIT bio ended BLK_STS_AGAIN: {p:?}"
            );
        }
    }
    assert!(total.tag_waits > 0 && total.again > 0, "{total:?}");
}

/// The length check's twin: a short or empty read is a difference, though every byte it has
/// matches.
#[test]
fn a_short_read_is_caught_by_the_length_check() {
    let want = vec![7u8; 2 * BS];
    assert_eq!(first_diff(&want, &want, 3), None);
    let e = first_diff(&want[..BS], &want, 3).expect("a short read differs");
    assert!(e.contains("4096 bytes, want 8192"), "{e}");
    assert!(first_diff(&[], &want, 3).is_some());
}

/// The buggy twins: a byte flipped in the store is caught by the read that follows the first
/// write; in a block no op reads, by the final read of the device; after that final read, by
/// the store comparison; on every engine and runtime.
#[test]
fn a_corrupted_block_is_caught_on_every_engine_and_runtime() {
    let write = Op::Write {
        block: 5,
        n: 2,
        fill: 0x3c,
    };
    let read_after = [write, Op::Read { block: 4, n: 3 }];
    let unread = [write, Op::Read { block: 0, n: 2 }];
    for (dev, rt) in combos() {
        if skip(dev) {
            continue;
        }
        for ops in [&read_after[..], &unread[..]] {
            check(dev, rt, ops, Fault::None).unwrap_or_else(|e| panic!("{dev:?} on {rt:?}: {e}"));
        }
        let e = check(dev, rt, &read_after, Fault::AfterFirstWrite).expect_err("caught");
        assert!(
            e.contains("op 1") && e.contains("block 5 byte 100"),
            "{dev:?} on {rt:?}: {e}"
        );
        let e = check(dev, rt, &unread, Fault::AfterFirstWrite).expect_err("caught");
        assert!(
            e.contains("the final read of the device: block 5 byte 100"),
            "{dev:?} on {rt:?}: {e}"
        );
        let e = check(dev, rt, &unread, Fault::AfterFinalRead).expect_err("caught");
        assert!(
            e.contains("the backing store: block 5 byte 100"),
            "{dev:?} on {rt:?}: {e}"
        );
    }
}
