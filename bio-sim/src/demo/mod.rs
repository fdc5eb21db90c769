//! `biosim run` with no FILE: the built-in default scenario, a ten-second answer to "what does
//! this tool do?".
//!
//! It models, on one machine, the paths of `block/bio.c` (`bio_endio()`, the
//! `BIO_COMPLETE_IN_TASK` batcher `__bio_complete_in_task()`/`bio_complete_work_fn()` of variant
//! v7), `drivers/block/loop.c` (`loop_queue_rq()`, `loop_process_work()`, `lo_rw_aio()`,
//! `lo_complete_rq()` ending bios in `BLOCK_SOFTIRQ`) and `kernel/cpu.c` (`cpu_down()` with
//! `hotplug/fail` and its rollback, a clean `cpu_down()`, a `cpu_up()` rolled back the same way,
//! a clean `cpu_up()`, the batcher's `block/bio:complete:online` and `:dead` callbacks):
//!
//! 1. boots 4 CPUs with the batcher's v7 (or `--module`'s module; with any `--knob` applied) on the deterministic runtime
//!    (seed [`SEED`]), its oracle watching every bio and callback;
//! 2. attaches `loop0` (the mainline `base` loop driver, `LO_FLAGS_DIRECT_IO` when the file
//!    system takes `O_DIRECT`) over a temporary sparse file of [`BACKING_BYTES`] in
//!    `std::env::temp_dir()`, registered with [`crate::dev::cleanup`] so it is removed also on
//!    Ctrl-C or `SIGTERM`;
//! 3. runs a mixed workload: from every CPU, writes flagged `BIO_COMPLETE_IN_TASK` (each block a
//!    pattern of its number and generation) and reads of blocks no write is in flight to (each
//!    compared with what the block holds); the loop worker does the I/O on the real file and
//!    ends each bio in `BLOCK_SOFTIRQ`, where `bio_endio()` defers the flagged writes to the
//!    batch of that CPU;
//! 4. ends flagged writes on CPU2 while it is fully online (its batch holds them, its work
//!    queued), then takes CPU2 down with `hotplug/fail` set at the highest `CPUHP_AP_ONLINE_DYN`
//!    state below the batcher's `block/bio:complete:online` (197) that has a teardown, found in
//!    the state table at run time: `mm/vmstat:online` (194, `vmstat_cpu_down_prep()`; the early
//!    dynamic users of `bio-core/src/kernel/boot_states.rs`). The batcher's down_prep runs first
//!    and disables the work with the bios on the batch (on a real 6.18 kernel the first teardown
//!    of an offline is `sched_cpu_deactivate()` at 235; the model's reduced table has nothing
//!    between 236 and 197), then the injected `-EAGAIN` at 194 makes `cpuhp_kick_ap()` reset the
//!    state and kick the AP again (its second `__cpuhp_kick_ap()`), and `cpuhp_thread_fun()` on
//!    CPU2 runs the rollback's startups up to online: the batcher's 197 startup must re-enable
//!    and requeue the work (`requeue_on_online`), and the bios on the batch must complete, once;
//! 5. more workload, a clean offline of CPU1 in the middle of it, with flagged writes submitted
//!    and started by the loop worker on CPU1 while it is fully online and their interrupts taken
//!    on CPU1 after the batcher's down_prep disabled its work (the `:dead` callback must drain
//!    them to another CPU); then an online of CPU1 rolled back by the same `hotplug/fail`, with
//!    flagged writes ended on CPU1 just before the failing step, its work still disabled (the
//!    rollback's teardown runs the `:dead` callback, which must drain them); the stranded check
//!    at quiescence while CPU1 is offline; a clean online of CPU1, with flagged writes ended on
//!    CPU1 just before the batcher's online callback, its work still disabled (the callback must
//!    re-enable and requeue it: `requeue_on_online`); more workload. Task-context I/O is only
//!    ever submitted from a CPU that is fully online (`CPUHP_ONLINE`) at that moment: on a real
//!    kernel a task that is not a kthread cannot run on a CPU that is not active, and a regular
//!    kthread (the unbound loop worker) not on a dying one, so the loop worker runs on a CPU
//!    being taken down only before the operation starts, and on a CPU coming up (allowed:
//!    `is_cpu_allowed()`) with its I/O submitted from CPU0;
//! 6. reads every written block back through `loop0` and compares it with what was written, and
//!    checks every invariant of the [`Oracle`](crate::machine::oracle::Oracle) at quiescence.
//!
//! Every figure of the summary is counted during the run: bios from the oracle, deferrals, batch
//! runs and wake-ups from a batcher observer, hotplug operations and rollbacks from the kernel's
//! hotplug log (`cpuhp_enter`/`cpuhp_exit` records; an operation counts as rolled back when a
//! rollback invocation ran in it), latencies from each bio's submission to its
//! `bi_end_io`, in scheduler steps (the deterministic runtime's unit of time) and in host time.
//!
//! `BIOSIM_DEFAULT_RUN_PAUSE_MS` (for the signal tests only) sleeps that long once the temporary
//! file exists.

use crate::dev::backing::{BackingFile, OpenOptions};
use crate::dev::cleanup::TempFile;
use crate::dev::loop_file::FileBacking;
use crate::machine::oracle::{Invariant, Violation};
use crate::machine::{Sim, SimConfig};
use crate::runtime::event::Event;
use bio_core::block::complete_in_task::{BatcherObserver, Variant};
use bio_core::block::{submit_bio_noacct, BioEndIo, BioFlag, ReqOp};
use bio_core::drivers::block::loop_drv::{
    LoopBacking, LoopDevice, LoopVariant, LO_FLAGS_DIRECT_IO,
};
use bio_core::kernel::CpuId;
use bio_core::workqueue::PoolId;
use bio_core::Cpu;
use hotplug::{LogRecord, StateId, CPUHP_AP_ONLINE_DYN, CPUHP_AP_ONLINE_DYN_END, CPUHP_ONLINE};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// CPUs of the machine.
pub const NR_CPUS: u32 = 4;
/// The deterministic scheduler's seed.
pub const SEED: u64 = 7;
/// Bytes per block.
pub const BLOCK: usize = 4096;
/// The backing file's size (sparse: `ftruncate`).
pub const BACKING_BYTES: u64 = 1 << 20;
/// The CPU whose offline is rolled back.
const ROLLBACK_CPU: u32 = 2;
/// The CPU taken cleanly offline and back.
const CLEAN_CPU: u32 = 1;
/// Violations the summary lists (the rest are counted).
const MAX_SHOWN: usize = 10;
/// Step budget of each settling.
const BUDGET: u64 = 200_000;

/// Why the default run could not run (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum DefaultRunError {
    /// A `--knob` was refused.
    #[error("--knob {0}")]
    Knob(String),
    /// The machine could not be built.
    #[error("the default machine: {0}")]
    Sim(#[from] crate::machine::SimError),
    /// The temporary file could not be made.
    #[error("the default run's backing file: {0}")]
    Temp(#[from] std::io::Error),
    /// The backing file could not be opened.
    #[error(transparent)]
    Backing(#[from] crate::dev::backing::BackingError),
    /// A hotplug operation was refused where the scenario needs it.
    #[error("{0}")]
    Hotplug(String),
}

/// The batcher observer of the summary: distinct bios deferred (`__bio_complete_in_task()`), per
/// CPU; `bio_complete_work_fn()` runs per batch CPU; work queueings that queued, per batch CPU.
#[derive(Default)]
struct Counters {
    deferred: Mutex<BTreeMap<u32, BTreeSet<u64>>>,
    batches: Mutex<BTreeMap<u32, u64>>,
    wakeups: Mutex<BTreeMap<u32, u64>>,
}

impl BatcherObserver for Counters {
    fn deferred(&self, bio: u64, cx: &Cpu) {
        self.deferred
            .lock()
            .entry(cx.id().0)
            .or_default()
            .insert(bio);
    }

    fn work_fn(&self, batch_cpu: CpuId, _cx: &Cpu) {
        *self.batches.lock().entry(batch_cpu.0).or_default() += 1;
    }

    fn scheduled(&self, batch_cpu: CpuId, queued: bool) {
        if queued {
            *self.wakeups.lock().entry(batch_cpu.0).or_default() += 1;
        }
    }
}

/// What one block may hold: every value a write in flight to it may leave, or its last value.
#[derive(Debug, Clone)]
struct Slot {
    possible: Vec<Vec<u8>>,
    in_flight: bool,
}

/// The content a write of generation `gen` leaves in `block`.
fn pattern(block: u64, gen: u8) -> Vec<u8> {
    (0..BLOCK)
        .map(|i| (block as usize * 31 + usize::from(gen) * 101 + i / 8) as u8)
        .collect()
}

/// The summary's figures (all measured) and the verdict.
#[derive(Debug)]
pub struct Outcome {
    /// The batcher's variant and the knobs set on it.
    pub variant: String,
    /// The kernel config line.
    pub kernel: String,
    /// The temporary file (already removed when the outcome is returned).
    pub temp_path: PathBuf,
    /// Whether the file was opened `O_DIRECT`.
    pub direct: bool,
    /// Bios submitted (every one tracked by the oracle).
    pub submitted: usize,
    /// Tracked bios whose `bi_end_io` ran.
    pub completed: usize,
    /// Workload writes (all flagged `BIO_COMPLETE_IN_TASK`).
    pub writes: u64,
    /// Workload reads.
    pub reads: u64,
    /// Read-backs.
    pub read_back: u64,
    /// Distinct bios deferred to task context.
    pub deferred: usize,
    /// Per CPU: (CPU, bios deferred there, `bio_complete_work_fn()` runs of its batch, work
    /// queueings that queued its work).
    pub per_cpu: Vec<(u32, usize, u64, u64)>,
    /// One line per hotplug operation, from the hotplug log.
    pub hotplug_ops: Vec<String>,
    /// Operations that rolled back.
    pub rollbacks: usize,
    /// The injected failure state and its name.
    pub fail_state: (StateId, String),
    /// Bios on CPU2's batch when its offline failed.
    pub on_batch_at_fail: usize,
    /// Bios on CPU1's batch, its work disabled by down_prep, before it died.
    pub on_dead_batch: usize,
    /// Bios on CPU1's batch, its work not yet enabled, when its online failed.
    pub on_failed_online: usize,
    /// Bios on CPU1's batch, its work not yet enabled, before its online callback.
    pub on_online: usize,
    /// Latency percentiles in steps: p50, p90, p99, max.
    pub steps: [u64; 4],
    /// Latency percentiles in host time: p50, p99, max.
    pub host: [Duration; 3],
    /// Blocks read back at the end.
    pub blocks_checked: usize,
    /// Scheduler steps of the whole run.
    pub total_steps: u64,
    /// Every violation: the oracle's and data mismatches.
    pub violations: Vec<Violation>,
    /// Paths the run meant to test but did not (no bio on a batch where one should wait, e.g.
    /// with a knob that stops deferring): each fails the run like a violation.
    pub uncovered: Vec<String>,
    /// The kernel-style trace.
    pub trace: String,
    /// The same trace as ftrace records (`--trace FILE`).
    pub ftrace: crate::report::ftrace::Ftrace,
    /// Host time of the whole run.
    pub elapsed: Duration,
}

/// Runs the default scenario with `knobs` set on v7.
pub fn run(knobs: &[String]) -> Result<Outcome, DefaultRunError> {
    run_with(Variant::V7, knobs, Tamper::None)
}

/// Runs the default scenario with `knobs` set on `base` (v7, or a registered module: `biosim run
/// --module NAME`, whose knobs go through [`Variant::set_knob`]).
pub fn run_on(base: Variant, knobs: &[String]) -> Result<Outcome, DefaultRunError> {
    run_with(base, knobs, Tamper::None)
}

/// The buggy twins of the run's own checks (tests only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code, reason = "only the unit tests tamper"))]
enum Tamper {
    /// The scenario as shipped.
    None,
    /// Overwrite this block of the backing file behind the loop device's back before the
    /// read-back: the data check must see it.
    Block(u64),
    /// Do not run CPU2's loop worker before its offline, so no bio waits on CPU2's batch: the
    /// coverage check must see it.
    NoDrainBeforeFail,
}

/// [`run`] with one of the run's own checks deliberately defeated.
fn run_with(base: Variant, knobs: &[String], tamper: Tamper) -> Result<Outcome, DefaultRunError> {
    let started = Instant::now();
    let mut variant = base;
    for k in knobs {
        variant = crate::machine::modules::with_knob(variant, k).map_err(DefaultRunError::Knob)?;
    }
    let counters = Arc::new(Counters::default());
    let observer: Arc<dyn BatcherObserver> = counters.clone();
    let sim = Sim::with_observer(
        SimConfig {
            nr_cpus: NR_CPUS,
            online: NR_CPUS,
            variant,
            seed: SEED,
            trace: true,
            ..SimConfig::default()
        },
        Some(observer),
    )?;

    let temp = TempFile::create_in(&std::env::temp_dir(), "biosim-default-run")?;
    if let Some(ms) = std::env::var("BIOSIM_DEFAULT_RUN_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
    let open = |direct| {
        BackingFile::open(
            temp.path(),
            &OpenOptions {
                direct,
                read_only: false,
                create_size: Some(BACKING_BYTES),
            },
        )
    };
    // A file system without O_DIRECT (tmpfs before 6.6) gets the buffered loop device.
    let (file, direct) = match open(true) {
        Ok(f) => (f, true),
        Err(_) => (open(false)?, false),
    };
    let file = Arc::new(file);
    let backing: Arc<dyn LoopBacking> = Arc::new(FileBacking::new(Arc::clone(&file)));
    let lo = LoopDevice::new(
        &sim.kernel,
        0,
        backing,
        if direct { LO_FLAGS_DIRECT_IO } else { 0 },
        0,
        LoopVariant::BASE,
    );
    sim.rt.note(format!(
        "# loop0: loop.c {} over the sparse file {} ({} KiB){}",
        LoopVariant::BASE.name,
        temp.path().display(),
        BACKING_BYTES >> 10,
        if direct { ", LO_FLAGS_DIRECT_IO" } else { "" }
    ));
    let mut d = Driver {
        sim: &sim,
        lo,
        slots: Arc::new(Mutex::new(BTreeMap::new())),
        clock: Arc::new(AtomicU64::new(0)),
        latencies: Arc::new(Mutex::new(Vec::new())),
        violations: Arc::new(Mutex::new(Vec::new())),
        writes: 0,
        reads: 0,
        read_back: 0,
        gen: 0,
    };

    // 3. The mixed workload on every CPU.
    d.workload(&[0, 1, 2, 3], 0..48, 1);
    d.run(BUDGET);

    // 4. The offline of CPU2 rolled back by hotplug/fail at the highest CPUHP_AP_ONLINE_DYN state
    // below the batcher's online state that has a teardown, while flagged writes ended on CPU2
    // wait on its batch: the batcher's down_prep runs (and disables the work with them on the
    // batch), the failure rolls back, and the rollback's startup of the batcher's state must
    // re-enable and requeue the work.
    let online_state = sim
        .kernel
        .bio_complete()
        .and_then(|b| b.hotplug_states().first().copied())
        .ok_or_else(|| {
            DefaultRunError::Hotplug("the batcher registered no hotplug state".into())
        })?;
    let fail_state = {
        let hp = sim.kernel.hotplug();
        let online_name = hp
            .step_info(online_state)
            .and_then(|i| i.name)
            .map_or_else(|| "?".to_owned(), |n| n.to_string());
        (CPUHP_AP_ONLINE_DYN.0..online_state.0.min(CPUHP_AP_ONLINE_DYN_END.0 + 1))
            .rev()
            .map(StateId)
            .find_map(|s| {
                hp.step_info(s)
                    .filter(|i| i.has_teardown)
                    .map(|i| (s, i.name.as_deref().unwrap_or("?").to_owned()))
            })
            .ok_or_else(|| {
                DefaultRunError::Hotplug(format!(
                    "no CPUHP_AP_ONLINE_DYN state ({}..={}) below the batcher's {} {online_name} \
                     has a teardown callback: nowhere to fail CPU{ROLLBACK_CPU}'s offline after \
                     the batcher's down_prep",
                    CPUHP_AP_ONLINE_DYN.0, CPUHP_AP_ONLINE_DYN_END.0, online_state.0
                ))
            })?
    };
    let next_is = |cpu: CpuId, state: StateId| {
        sim.kernel
            .hotplug()
            .next_invocation(cpu)
            .is_some_and(|i| i.state == state)
    };
    let cpu2 = CpuId(ROLLBACK_CPU);
    // CPU2 is fully online: the writes are submitted from it and the loop worker runs there.
    d.workload(&[ROLLBACK_CPU], 48..64, 0);
    if tamper != Tamper::NoDrainBeforeFail {
        d.drain_loop_on(cpu2);
    }
    sim.hotplug_start(cpu2, false, Some(fail_state.0))
        .map_err(|e| DefaultRunError::Hotplug(format!("cpu_down({cpu2}): {e}")))?;
    // Up to the failing step: the batcher's down_prep has run and disabled the work.
    while !next_is(cpu2, fail_state.0) && d.hotplug_step() {}
    let on_batch_at_fail = d.pending(cpu2);
    while d.hotplug_step() {}
    d.run(BUDGET);
    // Quiescent after the rollback: a bio still on CPU2's batch is stranded (the rollback's
    // startup of the batcher's state did not requeue the work).
    let mut reported = BTreeSet::new();
    let mut violations = stranded(
        &sim,
        &format!("after {cpu2}'s rolled-back offline"),
        &mut reported,
    );

    // 5. More workload; a clean offline of CPU1 with flagged writes ended on CPU1 after the
    // batcher's down_prep disabled its work (the :dead callback must drain them); an online of
    // CPU1 rolled back by the same hotplug/fail, with flagged writes ended on CPU1 just before
    // the failing step (its work still disabled: the rollback's :dead must drain them); a clean
    // online; more workload.
    let cpu1 = CpuId(CLEAN_CPU);
    d.workload(&[0, 1, 2, 3], 0..40, 1);
    d.run(12);
    // While CPU1 is fully online: the writes are submitted from it and the loop worker starts
    // them there; their completions (the interrupt, BLOCK_SOFTIRQ) stay pending on CPU1. A CPU
    // going down is dying: neither a task nor the unbound loop worker may run there.
    d.workload(&[CLEAN_CPU], 40..56, 0);
    d.start_loop_on(cpu1);
    sim.hotplug_start(cpu1, false, None)
        .map_err(|e| DefaultRunError::Hotplug(format!("cpu_down({cpu1}): {e}")))?;
    let below = |s: StateId| sim.kernel.hotplug().state(cpu1).is_ok_and(|st| st.0 < s.0);
    while !below(online_state) && d.hotplug_step() {}
    // Interrupts still reach CPU1 until takedown_cpu() migrates them away.
    d.interrupts_on(cpu1);
    let on_dead_batch = d.pending(cpu1);
    while d.hotplug_step() {}
    d.run(BUDGET);

    sim.hotplug_start(cpu1, true, Some(fail_state.0))
        .map_err(|e| DefaultRunError::Hotplug(format!("cpu_up({cpu1}): {e}")))?;
    while !next_is(cpu1, fail_state.0) && d.hotplug_step() {}
    // CPU1 is coming up, not fully online: the writes are submitted from CPU0; the unbound loop
    // worker (a kthread, allowed on a CPU coming online) runs them on CPU1.
    d.workload_from(0, &[CLEAN_CPU], 56..72);
    d.drain_loop_on(cpu1);
    let on_failed_online = d.pending(cpu1);
    while d.hotplug_step() {}
    d.run(BUDGET);
    // Quiescent with CPU1 offline: a bio not completed now is stranded (CPU1's return must not
    // be what completes it).
    violations.extend(stranded(
        &sim,
        &format!("while {cpu1} was offline"),
        &mut reported,
    ));
    // The clean online, with flagged writes ended on CPU1 just before the batcher's online
    // callback (its work still disabled): the callback must re-enable and requeue it.
    sim.hotplug_start(cpu1, true, None)
        .map_err(|e| DefaultRunError::Hotplug(format!("cpu_up({cpu1}): {e}")))?;
    while !next_is(cpu1, online_state) && d.hotplug_step() {}
    d.workload_from(0, &[CLEAN_CPU], 72..88);
    d.drain_loop_on(cpu1);
    let on_online = d.pending(cpu1);
    while d.hotplug_step() {}
    d.run(BUDGET);
    d.workload(&[0, 1, 2, 3], 88..112, 1);
    d.run(BUDGET);

    // 6. Read back, then every invariant at quiescence.
    if let Tamper::Block(block) = tamper {
        d.run(BUDGET);
        let mut buf = crate::dev::aligned::AlignedBuf::new(BLOCK);
        buf.copy_from_slice(&pattern(block, d.gen.wrapping_add(1)));
        file.write_at(
            &buf,
            block * BLOCK as u64,
            crate::dev::backing::RwFlags::empty(),
        )?;
    }
    let blocks_checked = d.read_back_all();
    d.run(BUDGET);
    violations.extend(sim.settle(BUDGET).into_iter().filter(|v| {
        v.invariant != Invariant::Stranded || reported.insert(stranded_bio(&v.message))
    }));
    violations.extend(d.violations.lock().drain(..));
    // A scenario that did not put bios where it means to test nothing there: say so, and fail.
    let uncovered: Vec<String> = [
        (
            on_batch_at_fail,
            format!("{cpu2}'s batch at its failed offline"),
        ),
        (
            on_dead_batch,
            format!("{cpu1}'s disabled batch before it died"),
        ),
        (
            on_failed_online,
            format!("{cpu1}'s batch at its failed online"),
        ),
        (
            on_online,
            format!("{cpu1}'s batch before its online callback"),
        ),
    ]
    .into_iter()
    .filter(|(n, _)| *n == 0)
    .map(|(_, what)| format!("no bio waited on {what}: that path was not tested"))
    .collect();

    // The figures.
    let (submitted, completed) = sim.oracle.counts();
    let deferred_map = counters.deferred.lock();
    let (batches, wakeups) = (counters.batches.lock(), counters.wakeups.lock());
    let per_cpu = (0..NR_CPUS)
        .map(|c| {
            (
                c,
                deferred_map.get(&c).map_or(0, BTreeSet::len),
                batches.get(&c).copied().unwrap_or(0),
                wakeups.get(&c).copied().unwrap_or(0),
            )
        })
        .collect();
    let deferred = deferred_map.values().map(BTreeSet::len).sum();
    let (hotplug_ops, rollbacks) = hotplug_summary(sim.kernel.hotplug().log());
    let lat = d.latencies.lock();
    let mut steps: Vec<u64> = lat.iter().map(|l| l.0).collect();
    let mut host: Vec<Duration> = lat.iter().map(|l| l.1).collect();
    steps.sort_unstable();
    host.sort_unstable();
    let p = |q: f64| crate::perf::stats::percentile(&host, q);
    let sp = |q: f64| -> u64 {
        if steps.is_empty() {
            return 0;
        }
        let rank = ((q * steps.len() as f64).ceil() as usize).clamp(1, steps.len());
        steps[rank - 1]
    };
    let temp_path = temp.path().to_path_buf();
    drop(temp);
    Ok(Outcome {
        variant: if knobs.is_empty() {
            variant.name.to_owned()
        } else {
            format!("{} with {}", variant.name, knobs.join(" "))
        },
        kernel: sim.config().kernel.to_string(),
        temp_path,
        direct,
        submitted,
        completed,
        writes: d.writes,
        reads: d.reads,
        read_back: d.read_back,
        deferred,
        per_cpu,
        hotplug_ops,
        rollbacks,
        fail_state,
        on_batch_at_fail,
        on_dead_batch,
        on_failed_online,
        on_online,
        steps: [sp(0.5), sp(0.9), sp(0.99), sp(1.0)],
        host: [p(0.5), p(0.99), p(1.0)],
        blocks_checked,
        total_steps: sim.rt.steps(),
        violations,
        uncovered,
        trace: sim.trace(),
        ftrace: sim.ftrace(),
        elapsed: started.elapsed(),
    })
}

/// The bios stranded at quiescence now (after [`Sim::settle`]), each prefixed with `when`; a bio
/// already in `reported` is left out (it is reported once, at the first check that saw it).
fn stranded(sim: &Sim, when: &str, reported: &mut BTreeSet<String>) -> Vec<Violation> {
    sim.settle(BUDGET)
        .into_iter()
        .filter(|v| v.invariant == Invariant::Stranded && reported.insert(stranded_bio(&v.message)))
        .map(|mut v| {
            v.message = format!("{when}: {}", v.message);
            v
        })
        .collect()
}

/// The bio a stranded-bio message names (`bio#12 never completed ...` → `bio#12`; the whole
/// message if it names none).
fn stranded_bio(message: &str) -> String {
    message
        .split_whitespace()
        .find(|w| w.starts_with("bio#"))
        .unwrap_or(message)
        .to_owned()
}

/// One line per `cpu_up()`/`cpu_down()` of the hotplug log, and how many rolled back: an
/// operation counts as rolled back only when a rollback invocation (`st->rollback` set by
/// `cpuhp_reset_state()`) ran in it, not merely because it failed. `failed at` names the first
/// failing call of the operation (the original cause), never a later rollback step that failed.
fn hotplug_summary(log: &[LogRecord]) -> (Vec<String>, usize) {
    let mut lines = Vec::new();
    let mut rollbacks = 0;
    let mut from = StateId(-1);
    let mut failed_at: Option<String> = None;
    let mut rolled_back = false;
    for r in log {
        match r {
            LogRecord::OpStart { from: f, .. } => {
                from = *f;
                failed_at = None;
                rolled_back = false;
            }
            LogRecord::Call {
                invocation,
                result,
                injected,
                nests_ap_part,
                ..
            } => {
                rolled_back |= invocation.rollback;
                // A call nesting the AP part returns the AP's error, recorded before it.
                if let (Err(e), None, false) = (result, &failed_at, nests_ap_part) {
                    failed_at = Some(format!(
                        "{} {} {} {}{}",
                        invocation.state.0,
                        invocation.name,
                        invocation.direction(),
                        e.neg_str(),
                        if *injected {
                            " (injected by hotplug/fail)"
                        } else {
                            ""
                        }
                    ));
                }
            }
            LogRecord::OpEnd {
                cpu,
                op,
                result,
                state,
            } => {
                let res = match result {
                    Ok(()) => "0".to_owned(),
                    Err(e) => e.neg_str(),
                };
                let mut line = format!("{op}({cpu}) = {res}, state {} -> {}", from.0, state.0);
                if let Some(f) = failed_at.take() {
                    let _ = write!(line, "; failed at {f}");
                }
                if rolled_back {
                    rollbacks += 1;
                    line.push_str("; rolled back");
                }
                rolled_back = false;
                lines.push(line);
            }
            _ => {}
        }
    }
    (lines, rollbacks)
}

/// The run's driver: the loop device, the reference of what each block holds, the clock.
struct Driver<'a> {
    sim: &'a Sim,
    lo: Arc<LoopDevice>,
    slots: Arc<Mutex<BTreeMap<u64, Slot>>>,
    /// Scheduler steps taken, as the bios' end_io sees it.
    clock: Arc<AtomicU64>,
    /// (steps, host time) from submission to `bi_end_io` of each workload bio.
    latencies: Arc<Mutex<Vec<(u64, Duration)>>>,
    violations: Arc<Mutex<Vec<Violation>>>,
    writes: u64,
    reads: u64,
    read_back: u64,
    gen: u8,
}

impl Driver<'_> {
    /// Runs seeded steps until quiescent or `max` taken, keeping the clock.
    fn run(&self, max: u64) {
        for _ in 0..max {
            if self.sim.rt.step_random().is_none() {
                break;
            }
            self.clock.store(self.sim.rt.steps(), Ordering::Relaxed);
        }
    }

    /// One step of the hotplug operation in progress.
    fn hotplug_step(&self) -> bool {
        let r = self.sim.hotplug_step();
        self.clock.store(self.sim.rt.steps(), Ordering::Relaxed);
        r
    }

    /// Runs the loop worker and the block softirq on `cpu` until neither has anything left.
    fn drain_loop_on(&self, cpu: CpuId) {
        self.drain(&[
            Event::Worker {
                pool: PoolId::Unbound,
                on: cpu,
            },
            Event::Softirq(cpu),
            Event::Irq(cpu),
        ]);
    }

    /// Runs the unbound loop worker on `cpu` until it has nothing left, leaving the completions
    /// it raises (the interrupt of an asynchronous I/O, `BLOCK_SOFTIRQ`) pending on `cpu`.
    fn start_loop_on(&self, cpu: CpuId) {
        self.drain(&[Event::Worker {
            pool: PoolId::Unbound,
            on: cpu,
        }]);
    }

    /// Takes the interrupts and softirqs pending on `cpu` until none is left.
    fn interrupts_on(&self, cpu: CpuId) {
        self.drain(&[Event::Softirq(cpu), Event::Irq(cpu)]);
    }

    /// Runs the first enabled event of `events` until none is.
    fn drain(&self, events: &[Event]) {
        for _ in 0..BUDGET {
            let enabled = self.sim.rt.enabled();
            let Some(&e) = events.iter().find(|e| enabled.contains(e)) else {
                return;
            };
            let _ = self.sim.rt.step(e);
            self.clock.store(self.sim.rt.steps(), Ordering::Relaxed);
        }
    }

    /// Whether `cpu` is fully online at this moment: at `CPUHP_ONLINE` with no hotplug
    /// operation in progress (a task that is not a kthread runs only on an active CPU).
    fn fully_online(&self, cpu: CpuId) -> bool {
        let hp = self.sim.kernel.hotplug();
        hp.state(cpu).is_ok_and(|s| s == CPUHP_ONLINE) && !hp.in_progress(cpu)
    }

    /// From each fully online CPU of `cpus` in turn (task-context I/O only from a CPU at
    /// `CPUHP_ONLINE`, see [`Driver::fully_online`]), for each block of `blocks` that CPU owns
    /// (block % 4 == CPU) and no write is in flight to: a read of every third block, a flagged
    /// write of the next generation of the others; `interleave` seeded steps after each.
    fn workload(&mut self, cpus: &[u32], blocks: std::ops::Range<u64>, interleave: u64) {
        self.gen = self.gen.wrapping_add(1);
        for &cpu in cpus {
            if self.fully_online(CpuId(cpu)) {
                self.submit_blocks(cpu, cpu, blocks.clone(), interleave);
            }
        }
    }

    /// [`Driver::workload`] of the blocks `owners` own, all submitted from the fully online CPU
    /// `from` (for a CPU that is not fully online itself), without interleaved steps.
    fn workload_from(&mut self, from: u32, owners: &[u32], blocks: std::ops::Range<u64>) {
        self.gen = self.gen.wrapping_add(1);
        if !self.fully_online(CpuId(from)) {
            return;
        }
        for &owner in owners {
            self.submit_blocks(from, owner, blocks.clone(), 0);
        }
    }

    /// Submits from `from` a read or a flagged write of each block of `blocks` that `owner`
    /// owns and no write is in flight to.
    fn submit_blocks(
        &mut self,
        from: u32,
        owner: u32,
        blocks: std::ops::Range<u64>,
        interleave: u64,
    ) {
        for block in blocks.filter(|b| b % u64::from(NR_CPUS) == u64::from(owner)) {
            if self.slots.lock().get(&block).is_some_and(|s| s.in_flight) {
                continue;
            }
            let data = (block % 3 != 0).then(|| pattern(block, self.gen));
            self.submit(from, block, data, true);
            self.run(interleave);
        }
    }

    /// The bios waiting on `cpu`'s batch.
    fn pending(&self, cpu: CpuId) -> usize {
        self.sim.kernel.bio_complete().map_or(0, |b| b.pending(cpu))
    }

    /// Reads every block written back through loop0 from CPU0 and compares each with the
    /// reference. Returns how many blocks were read.
    fn read_back_all(&mut self) -> usize {
        self.run(BUDGET);
        self.sim
            .rt
            .note("   >>> read every written block back through loop0".to_owned());
        let blocks: Vec<u64> = self.slots.lock().keys().copied().collect();
        for &b in &blocks {
            self.submit(0, b, None, false);
        }
        blocks.len()
    }

    /// Submits one block's write (`data`) or read from `cpu`'s task context.
    fn submit(&mut self, cpu: u32, block: u64, data: Option<Vec<u8>>, workload: bool) {
        let k = &self.sim.kernel;
        let write = data.is_some();
        let op = if write { ReqOp::Write } else { ReqOp::Read };
        let mut bio = k.bio_alloc(op, block * (BLOCK as u64 / 512));
        self.sim.oracle.track(bio.id(), write);
        let want = {
            let mut slots = self.slots.lock();
            let slot = slots.entry(block).or_insert_with(|| Slot {
                possible: vec![vec![0; BLOCK]],
                in_flight: false,
            });
            match &data {
                Some(d) => {
                    slot.possible.push(d.clone());
                    slot.in_flight = true;
                    Vec::new()
                }
                None => slot.possible.clone(),
            }
        };
        match data {
            Some(d) => {
                bio.add_data(d);
                // The submitter asks for task-context completion (BIO_COMPLETE_IN_TASK).
                bio.set_flag(BioFlag::CompleteInTask);
                if workload {
                    self.writes += 1;
                }
            }
            None => {
                bio.add_data(vec![0xee; BLOCK]);
                if workload {
                    self.reads += 1;
                } else {
                    self.read_back += 1;
                }
            }
        }
        let (oracle, slots, violations) = (
            Arc::clone(&self.sim.oracle),
            Arc::clone(&self.slots),
            Arc::clone(&self.violations),
        );
        let (clock, latencies) = (Arc::clone(&self.clock), Arc::clone(&self.latencies));
        let (t0, s0) = (Instant::now(), clock.load(Ordering::Relaxed));
        let bio = bio.with_end_io(BioEndIo::new("default_run_end_io", move |bio, cx| {
            if workload {
                let steps = clock.load(Ordering::Relaxed).saturating_sub(s0) + 1;
                latencies.lock().push((steps, t0.elapsed()));
            }
            let status = bio.status();
            let got = bio.data();
            if write {
                let mut slots = slots.lock();
                if let Some(slot) = slots.get_mut(&block) {
                    slot.in_flight = false;
                    if status.is_ok() {
                        slot.possible = vec![got.clone()];
                    }
                }
            }
            let message = if !status.is_ok() {
                Some(format!(
                    "loop0 block {block}: {} failed with {status}",
                    if write { "a write" } else { "a read" }
                ))
            } else if !write && !want.contains(&got) {
                Some(format!(
                    "loop0 block {block} reads {:#04x} {:#04x}.., what was written there is {}",
                    got[0],
                    got[1],
                    want.iter()
                        .map(|w| format!("{:#04x} {:#04x}..", w[0], w[1]))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ))
            } else {
                None
            };
            if let Some(message) = message {
                violations.lock().push(Violation {
                    invariant: Invariant::DataMismatch,
                    message,
                    trace: Vec::new(),
                });
            }
            oracle.completed(bio.id(), cx);
        }));
        let what = format!(
            "submit_bio({}{} block {block}) to loop0",
            op.name(),
            if write { ", BIO_COMPLETE_IN_TASK" } else { "" }
        );
        let lo = Arc::clone(&self.lo);
        self.sim
            .rt
            .on_cpu(CpuId(cpu), &what, |cx| submit_bio_noacct(bio, &*lo, cx));
    }
}

impl Outcome {
    /// Whether the run failed: a violation, or a path it did not test.
    pub fn failed(&self) -> bool {
        !self.violations.is_empty() || !self.uncovered.is_empty()
    }

    /// The ten-second summary.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let w = &mut s;
        let _ = writeln!(w, "biosim: the built-in default scenario (no FILE given)");
        let _ = writeln!(
            w,
            "machine   {NR_CPUS} CPUs, batcher {}, {}; deterministic scheduler, seed {SEED}",
            self.variant, self.kernel
        );
        let _ = writeln!(
            w,
            "device    loop0 over a sparse {} KiB file {}{} (removed)",
            BACKING_BYTES >> 10,
            self.temp_path.display(),
            if self.direct {
                ", O_DIRECT"
            } else {
                ", buffered"
            }
        );
        let _ = writeln!(
            w,
            "bios      {} submitted ({} writes flagged BIO_COMPLETE_IN_TASK, {} reads, {} read back)",
            self.submitted, self.writes, self.reads, self.read_back
        );
        let _ = writeln!(
            w,
            "          {} completed, {} deferred to task context",
            self.completed, self.deferred
        );
        for (i, (cpu, deferred, batches, wakeups)) in self.per_cpu.iter().enumerate() {
            let _ = writeln!(
                w,
                "{}CPU{cpu}: {deferred} deferred, {batches} batches (bio_complete_work_fn runs), {wakeups} worker wake-ups (work queued)",
                if i == 0 { "per CPU   " } else { "          " }
            );
        }
        let _ = writeln!(
            w,
            "hotplug   {} operations, {} rolled back",
            self.hotplug_ops.len(),
            self.rollbacks
        );
        for op in &self.hotplug_ops {
            let _ = writeln!(w, "          {op}");
        }
        let _ = writeln!(
            w,
            "          bios on a batch: {} on CPU{ROLLBACK_CPU}'s at its failed offline; on CPU{CLEAN_CPU}'s {} at its :dead callback, {} at its failed online, {} at its online callback",
            self.on_batch_at_fail, self.on_dead_batch, self.on_failed_online, self.on_online
        );
        let h = crate::perf::stats::human;
        let _ = writeln!(
            w,
            "latency   submit_bio -> bi_end_io: p50 {} p90 {} p99 {} max {} scheduler steps",
            self.steps[0], self.steps[1], self.steps[2], self.steps[3]
        );
        let _ = writeln!(
            w,
            "          host time (with the real file I/O): p50 {} p99 {} max {}",
            h(self.host[0]),
            h(self.host[1]),
            h(self.host[2])
        );
        let mismatches = self
            .violations
            .iter()
            .filter(|v| v.invariant == Invariant::DataMismatch)
            .count();
        let _ = writeln!(
            w,
            "data      {} blocks read back through loop0: {}",
            self.blocks_checked,
            if mismatches == 0 {
                "each holds what was written".to_owned()
            } else {
                format!("{mismatches} differ")
            }
        );
        if !self.failed() {
            let _ = writeln!(
                w,
                "verdict   clean: every invariant holds ({} steps, {})",
                self.total_steps,
                h(self.elapsed)
            );
        } else {
            let _ = writeln!(
                w,
                "verdict   {} violation(s){}:",
                self.violations.len(),
                match self.uncovered.len() {
                    0 => String::new(),
                    n => format!(", {n} untested path(s)"),
                }
            );
            for v in self.violations.iter().take(MAX_SHOWN) {
                let _ = writeln!(w, "          {v}");
            }
            if self.violations.len() > MAX_SHOWN {
                let _ = writeln!(
                    w,
                    "          ... and {} more",
                    self.violations.len() - MAX_SHOWN
                );
            }
            for u in &self.uncovered {
                let _ = writeln!(w, "          [untested] {u}");
            }
        }
        let checked = [
            Invariant::EndIoOnce,
            Invariant::TaskContext,
            Invariant::Stranded,
            Invariant::WorkOffCpu,
            Invariant::HotplugContext,
        ]
        .map(|i| i.to_string())
        .join(", ");
        let _ = writeln!(
            w,
            "          checked after CPU{ROLLBACK_CPU}'s rollback, with CPU{CLEAN_CPU} offline and at the end: {checked}, no kernel splat, data read back"
        );
        let _ = writeln!(
            w,
            "trace     biosim run --steps (step by step), --trace FILE (ftrace text), --perfetto FILE.json (ui.perfetto.dev)"
        );
        let _ = writeln!(
            w,
            "your own  write a scenario (docs/scenarios/README.md), then biosim run FILE"
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotplug::Errno;

    #[test]
    fn the_default_run_is_clean_and_its_figures_agree() {
        let out = run(&[]).unwrap();
        assert!(!out.failed(), "{}", out.summary());
        assert_eq!(out.submitted, out.completed);
        assert_eq!(out.submitted as u64, out.writes + out.reads + out.read_back);
        // Every flagged write ends in BLOCK_SOFTIRQ, where bio_endio() defers it.
        assert_eq!(out.deferred as u64, out.writes);
        assert_eq!(out.per_cpu.iter().map(|c| c.1).sum::<usize>(), out.deferred);
        assert_eq!(out.rollbacks, 2, "{:?}", out.hotplug_ops);
        assert_eq!(out.hotplug_ops.len(), 4);
        assert!(out.on_batch_at_fail > 0 && out.on_dead_batch > 0);
        assert!(out.on_failed_online > 0 && out.on_online > 0);
        assert!(!out.temp_path.exists());
    }

    #[test]
    fn a_block_changed_behind_the_loop_device_is_a_data_mismatch() {
        // Block 1 is written (block % 3 != 0) and read back.
        let out = run_with(Variant::V7, &[], Tamper::Block(1)).unwrap();
        let bad: Vec<_> = out
            .violations
            .iter()
            .filter(|v| v.invariant == Invariant::DataMismatch)
            .collect();
        assert_eq!(bad.len(), 1, "{}", out.summary());
        assert!(bad[0].message.contains("loop0 block 1 "), "{}", bad[0]);
        assert!(out.summary().contains("1 differ"), "{}", out.summary());
    }

    #[test]
    fn a_run_that_leaves_a_path_untested_fails_and_says_which() {
        let out = run_with(Variant::V7, &[], Tamper::NoDrainBeforeFail).unwrap();
        assert_eq!(out.on_batch_at_fail, 0);
        assert!(out.failed());
        assert_eq!(
            out.uncovered,
            ["no bio waited on CPU2's batch at its failed offline: that path was not tested"]
        );
        assert!(
            out.summary().contains("1 untested path(s)"),
            "{}",
            out.summary()
        );
    }

    #[test]
    fn the_dead_callback_twin_strands_bios_while_the_cpu_is_offline() {
        let out = run(&["dead_drains=false".to_owned()]).unwrap();
        let stranded = out
            .violations
            .iter()
            .filter(|v| v.invariant == Invariant::Stranded)
            .count();
        // Nothing drains CPU1's batch: the bios of its offline are still there at its failed
        // online, and every one on it then is stranded.
        assert!(
            out.on_failed_online > out.on_dead_batch,
            "{}",
            out.summary()
        );
        assert_eq!(stranded, out.on_failed_online, "{}", out.summary());
        assert!(out.summary().contains("while CPU1 was offline"));
    }

    #[test]
    fn the_online_requeue_twin_strands_the_bios_of_both_rollback_and_online() {
        let out = run(&["requeue_on_online=false".to_owned()]).unwrap();
        assert!(out.failed());
        let stranded: Vec<_> = out
            .violations
            .iter()
            .filter(|v| v.invariant == Invariant::Stranded)
            .collect();
        // CPU2's offline rolled back after the batcher's down_prep disabled its work: the
        // rollback's startup re-enables it but does not requeue it, so every bio waiting on
        // CPU2's batch then is stranded right after the rollback.
        let after_rollback: Vec<_> = stranded
            .iter()
            .filter(|v| v.message.contains("after CPU2's rolled-back offline: "))
            .collect();
        assert_eq!(
            after_rollback.len(),
            out.on_batch_at_fail,
            "{}",
            out.summary()
        );
        assert!(
            after_rollback
                .iter()
                .all(|v| v.message.contains("CPU2 batch")),
            "{}",
            out.summary()
        );
        // And the bios of CPU1's online, and every later one deferred on CPU1 behind them (the
        // work is enabled but never queued again), at the end.
        let at_end = stranded
            .iter()
            .filter(|v| !v.message.contains("offline") && v.message.contains("CPU1 batch"))
            .count();
        assert!(at_end >= out.on_online, "{}", out.summary());
        // Each stranded bio is reported once.
        let mut bios: Vec<_> = stranded.iter().map(|v| stranded_bio(&v.message)).collect();
        let n = bios.len();
        bios.sort();
        bios.dedup();
        assert_eq!(bios.len(), n, "{}", out.summary());
    }

    /// A `Call` record of `state` in `cpu_down(CPU1)`.
    fn call(state: i32, bringup: bool, rollback: bool, result: Result<(), Errno>) -> LogRecord {
        LogRecord::Call {
            invocation: hotplug::Invocation {
                cpu: CpuId(1),
                state: StateId(state),
                name: format!("test/{state}").into(),
                bringup,
                rollback,
                runs_on: hotplug::RunsOn::Target { irqs_off: false },
                target: StateId(0),
                origin: hotplug::Origin::Hotplug,
                core: false,
                fun: format!("test/{state}").into(),
                instance: None,
                task: hotplug::Task::CpuhpThread(CpuId(1)),
            },
            result,
            injected: false,
            state_after: StateId(state),
            nests_ap_part: false,
        }
    }

    #[test]
    fn the_hotplug_summary_counts_rollback_invocations_and_keeps_the_first_failure() {
        let start = LogRecord::OpStart {
            cpu: CpuId(1),
            op: "cpu_down",
            from: StateId(236),
            target: StateId(0),
        };
        let end = |state| LogRecord::OpEnd {
            cpu: CpuId(1),
            op: "cpu_down",
            result: Err(Errno::EAGAIN),
            state: StateId(state),
        };
        // A failure whose rollback ran a startup, which failed too: rolled back, and the
        // original cause is the one named.
        let log = [
            start.clone(),
            call(197, false, false, Ok(())),
            call(194, false, false, Err(Errno::EAGAIN)),
            call(196, true, true, Err(Errno::EBUSY)),
            end(196),
        ];
        let (lines, rollbacks) = hotplug_summary(&log);
        assert_eq!(rollbacks, 1, "{lines:?}");
        assert!(
            lines[0].contains("failed at 194 test/194 teardown -EAGAIN;"),
            "{lines:?}"
        );
        assert!(!lines[0].contains("EBUSY"), "{lines:?}");
        // A failed operation in which no rollback invocation ran (nothing to undo above the
        // failing state) is no rollback, though it ends where it started.
        let log = [start, call(197, false, false, Err(Errno::EAGAIN)), end(236)];
        let (lines, rollbacks) = hotplug_summary(&log);
        assert_eq!(rollbacks, 0, "{lines:?}");
        assert!(!lines[0].contains("rolled back"), "{lines:?}");
    }

    #[test]
    fn the_rollback_failure_state_is_below_the_batcher_and_has_a_teardown() {
        let out = run(&[]).unwrap();
        let sim = Sim::new(SimConfig::default()).unwrap();
        let on = sim.kernel.bio_complete().unwrap().hotplug_states()[0];
        let hp = sim.kernel.hotplug();
        let (fail, _) = &out.fail_state;
        assert!(
            CPUHP_AP_ONLINE_DYN.0 <= fail.0 && fail.0 < on.0,
            "{fail:?} {on:?}"
        );
        assert!(hp.step_info(*fail).unwrap().has_teardown);
        // The highest such state: none between it and the batcher's has a teardown.
        assert!(
            (fail.0 + 1..on.0).all(|s| !hp.step_info(StateId(s)).is_some_and(|i| i.has_teardown))
        );
    }

    #[test]
    fn the_hotplug_summary_reads_a_rollback_from_the_log() {
        let sim = Sim::new(SimConfig::default()).unwrap();
        let on = sim.kernel.bio_complete().unwrap().hotplug_states()[0];
        // Failing at the batcher's own state replaces its down_prep: nothing above it has a
        // startup to run again, so no rollback invocation runs.
        sim.hotplug_start(CpuId(1), false, Some(on)).unwrap();
        while sim.hotplug_step() {}
        let (lines, rollbacks) = hotplug_summary(sim.kernel.hotplug().log());
        assert_eq!(rollbacks, 0, "{lines:?}");
        assert!(lines[0].contains("injected by hotplug/fail"), "{lines:?}");
        // Failing below it: the rollback runs the batcher's startup.
        let fail = (CPUHP_AP_ONLINE_DYN.0..on.0)
            .rev()
            .map(StateId)
            .find(|&s| {
                sim.kernel
                    .hotplug()
                    .step_info(s)
                    .is_some_and(|i| i.has_teardown)
            })
            .unwrap();
        sim.hotplug_start(CpuId(1), false, Some(fail)).unwrap();
        while sim.hotplug_step() {}
        let (lines, rollbacks) = hotplug_summary(sim.kernel.hotplug().log());
        assert_eq!(rollbacks, 1, "{lines:?}");
        assert!(lines[1].ends_with("; rolled back"), "{lines:?}");
        // A clean operation is no rollback.
        sim.hotplug_start(CpuId(1), false, None).unwrap();
        while sim.hotplug_step() {}
        let (lines, rollbacks) = hotplug_summary(sim.kernel.hotplug().log());
        assert_eq!((lines.len(), rollbacks), (3, 1), "{lines:?}");
        assert!(lines[2].ends_with("state 236 -> 0"), "{lines:?}");
    }
}
