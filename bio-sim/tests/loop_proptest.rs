//! A proptest of the loop driver (`drivers/block/loop.c` with the NOWAIT series) on the
//! deterministic runtime: random interleavings of reads, writes and discards submitted from two
//! CPUs into a partly sparse backing file, and runs of the loop worker. After every transition
//! `lo_nr_blocking_writes` must equal the `use_aio` writes waiting for the worker; at the end every
//! bio has ended exactly once and every block reads back what the last completed write or
//! discard left there — or, where writes to a block overlapped in flight (a block device orders
//! nothing between them), what one of them left. The proptest found the reference's first
//! version wrong exactly there once completions moved to `BLOCK_SOFTIRQ`.
//!
//! The property is shown to fail where it should: on the twin (`nowait_adds_lo_offset=false`: the
//! NOWAIT path forgets `lo_offset`), shrunk to one write; and on V4, whose
//! `lockdep_assert_held(&lo->lo_mutex)` splat the oracle reports on the first write that falls
//! back to the worker.

use bio_core::block::{submit_bio_noacct, BioEndIo, ReqOp};
use bio_core::drivers::block::loop_drv::{
    Fallocate, LoopBacking, LoopDevice, LoopVariant, MemBacking, LO_FLAGS_DIRECT_IO,
};
use bio_core::kernel::CpuId;
use bio_core::sync::UntrackedArc;
use bio_core::workqueue::PoolId;
use bio_sim::runtime::Event;
use bio_sim::sim::{Sim, SimConfig};
use parking_lot::Mutex;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestError, TestRunner};
use std::collections::BTreeMap;
use std::sync::Arc;

const BLOCKS: u64 = 16;
const BLOCK: usize = 4096;

/// The reference's view of one block.
#[derive(Debug, Default)]
struct Slot {
    in_flight: u32,
    overlapped: bool,
    possible: Vec<Vec<u8>>,
}

#[derive(Debug, Clone, Copy)]
enum T {
    Write { block: u64, cpu: u32, fill: u8 },
    Read { block: u64, cpu: u32 },
    Discard { block: u64, cpu: u32 },
    Worker { on: u32 },
}

fn transition() -> impl Strategy<Value = T> {
    prop_oneof![
        4 => (0..BLOCKS, 0..2u32, 1..=255u8).prop_map(|(block, cpu, fill)| T::Write { block, cpu, fill }),
        2 => (0..BLOCKS, 0..2u32).prop_map(|(block, cpu)| T::Read { block, cpu }),
        1 => (0..BLOCKS, 0..2u32).prop_map(|(block, cpu)| T::Discard { block, cpu }),
        3 => (0..2u32).prop_map(|on| T::Worker { on }),
    ]
}

/// Runs `ts` on `variant`; `Err` names the broken invariant.
fn check(variant: LoopVariant, ts: &[T]) -> Result<(), String> {
    let s = Sim::new(SimConfig {
        trace: false,
        ..SimConfig::default()
    })
    .map_err(|e| e.to_string())?;
    // Blocks 0..8 allocated (NOWAIT writes hit), 8..16 holes (they fall back to the worker).
    let mem = MemBacking::sparse(1 << 20);
    for b in 0..8 {
        mem.fallocate(Fallocate::ZeroRange, (16 + b) * 4096, 4096)
            .map_err(|e| e.to_string())?;
    }
    let backing: UntrackedArc<dyn LoopBacking> = UntrackedArc::new(mem);
    let lo = LoopDevice::new(&s.kernel, 0, backing, LO_FLAGS_DIRECT_IO, 64 << 10, variant);
    // What the device may hold: block -> (writes in flight, overlapped?, possible contents).
    let expect: Arc<Mutex<BTreeMap<u64, Slot>>> = Arc::default();
    let submit = |op: ReqOp, block: u64, cpu: u32, data: Option<Vec<u8>>| {
        let bio = s.kernel.bio_alloc(op, block * 8);
        s.oracle.track(bio.id(), false);
        if op != ReqOp::Read {
            let mut e = expect.lock();
            let slot = e.entry(block).or_default();
            slot.in_flight += 1;
            slot.overlapped |= slot.in_flight > 1;
        }
        let (oracle, expect) = (Arc::clone(&s.oracle), Arc::clone(&expect));
        let mut bio = bio.with_end_io(BioEndIo::new("prop_end_io", move |bio, cx| {
            let content = match bio.op() {
                ReqOp::Write => Some(bio.data()),
                ReqOp::Discard => Some(vec![0; BLOCK]),
                _ => None,
            };
            if let Some(c) = content {
                let mut e = expect.lock();
                let slot = e.entry(block).or_default();
                if bio.status().is_ok() {
                    if slot.overlapped {
                        slot.possible.push(c);
                    } else {
                        slot.possible = vec![c];
                    }
                }
                slot.in_flight -= 1;
                if slot.in_flight == 0 {
                    slot.overlapped = false;
                }
            }
            oracle.completed(bio.id(), cx);
        }));
        match data {
            Some(d) => bio.add_data(d),
            None if op == ReqOp::Discard => bio.bi_iter.bi_size = BLOCK as u32,
            None => bio.add_data(vec![0; BLOCK]),
        }
        s.rt.on_cpu(CpuId(cpu), "submit", |cx| submit_bio_noacct(bio, &*lo, cx));
    };
    for (i, t) in ts.iter().enumerate() {
        match *t {
            T::Write { block, cpu, fill } => {
                submit(ReqOp::Write, block, cpu, Some(vec![fill; BLOCK]))
            }
            T::Read { block, cpu } => submit(ReqOp::Read, block, cpu, None),
            T::Discard { block, cpu } => submit(ReqOp::Discard, block, cpu, None),
            T::Worker { on } => {
                let _ = s.rt.step(Event::Worker {
                    pool: PoolId::Unbound,
                    on: CpuId(on),
                });
            }
        }
        let (n, q) = (lo.nr_blocking_writes() as usize, lo.queued_aio_writes());
        if n != q {
            return Err(format!("after transition {i} ({t:?}): lo_nr_blocking_writes={n} but {q} aio writes are queued"));
        }
    }
    let v = s.settle(50_000);
    if let Some(x) = v.first() {
        return Err(format!("oracle: {x}"));
    }
    // Read back every block through the device.
    let got: Arc<Mutex<BTreeMap<u64, Vec<u8>>>> = Arc::default();
    for block in 0..BLOCKS {
        let bio = s
            .kernel
            .bio_alloc(ReqOp::Read, block * 8)
            .with_data(vec![0xee; BLOCK]);
        let g = Arc::clone(&got);
        let bio = bio.with_end_io(BioEndIo::new("readback", move |bio, _| {
            g.lock().insert(block, bio.data());
        }));
        s.rt.on_cpu(CpuId(0), "read back", |cx| submit_bio_noacct(bio, &*lo, cx));
    }
    s.settle(50_000);
    let (got, expect) = (got.lock(), expect.lock());
    for block in 0..BLOCKS {
        let want = match expect.get(&block) {
            Some(slot) if !slot.possible.is_empty() => slot.possible.clone(),
            _ => vec![vec![0; BLOCK]],
        };
        match got.get(&block) {
            Some(d) if want.contains(d) => {}
            Some(d) => {
                let firsts: Vec<String> = want.iter().map(|w| format!("{:#x}", w[0])).collect();
                return Err(format!(
                    "block {block} reads {:#x}.., expected one of {firsts:?}",
                    d[0]
                ));
            }
            None => return Err(format!("the read of block {block} never ended")),
        }
    }
    Ok(())
}

fn run(variant: LoopVariant, cases: u32) -> Result<(), TestError<Vec<T>>> {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner.run(&prop::collection::vec(transition(), 1..40), |ts| {
        check(variant, &ts).map_err(proptest::test_runner::TestCaseError::fail)
    })
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256)
}

#[test]
fn every_posted_version_keeps_the_data_and_the_count() {
    for v in [LoopVariant::BASE, LoopVariant::V5_NO_HINT, LoopVariant::V5] {
        if let Err(e) = run(v, cases()) {
            panic!("{}: {e}", v.name);
        }
    }
}

#[test]
fn v4_is_caught_by_its_lockdep_splat_on_the_first_fallback_write() {
    match run(LoopVariant::V4, 256) {
        Err(TestError::Fail(why, ts)) => {
            assert!(
                why.to_string()
                    .contains("lockdep_assert_held(&lo->lo_mutex)"),
                "{why}"
            );
            // Shrinking is local: it ends at one write into a hole, or at a discard that makes
            // the hole, the worker run that punches it, and the write.
            assert!(ts.len() <= 3, "shrunk to a few transitions: {ts:?}");
            assert!(
                matches!(ts.last(), Some(T::Write { .. })),
                "ends with the write: {ts:?}"
            );
        }
        other => panic!("v4's splat was not found: {other:?}"),
    }
}

#[test]
fn the_offset_twin_is_caught_and_shrunk() {
    let twin = LoopVariant {
        nowait_adds_lo_offset: false,
        ..LoopVariant::V5
    };
    match run(twin, 256) {
        Err(TestError::Fail(why, ts)) => {
            assert!(why.to_string().contains("reads"), "{why}");
            assert!(ts.len() <= 3, "shrunk to a few transitions: {ts:?}");
            eprintln!("twin caught: {why}\nminimal: {ts:?}");
        }
        other => panic!("the twin was not caught: {other:?}"),
    }
}
