//! A campaign: cases `0..N` of a seed, each a sequence of generated transitions run on a fresh
//! machine with the oracle checked after every step, split over threads (`--jobs`) and over
//! machines (`--shard I/N`).
//!
//! Case `i` is drawn from its own generator, seeded from `(seed, i)` alone, so a case is the same
//! whichever thread, shard or run draws it. Threads take chunks of indices from one counter; a
//! failing case at index `k` lowers a shared limit to `k`, and indices below the limit are still
//! run: the case reported is the lowest failing index whatever `--jobs` is. With a time budget the
//! campaign stops claiming cases when the time is up (the count is then whatever ran).
//!
//! What ran is summed up order-independently: the count and a fingerprint, the wrapping sum of
//! one 64-bit hash per case (of its index and its transitions). The shards of a campaign add up to
//! the unsharded run, and a case run twice shows (its hash counted twice).

use super::generator::{arms, case, draw_case, Kind, Space};
use crate::machine::loop_rig::LoopSetup;
use crate::machine::oracle::{Invariant, Violation};
use crate::machine::sim::{Sim, SimConfig, SimError};
use crate::machine::transition::Transition;
use crate::runtime::rng::SplitMix64;
use proptest::strategy::{BoxedStrategy, Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The step budget of the settle that ends every case (and of the counterexample's `settle`).
pub const SETTLE_STEPS: u64 = 20_000;

/// How many indices a thread claims at once.
const CHUNK: u64 = 16;

/// One shard of a campaign: `--shard I/N` runs the case indices `i` with `i % N == I - 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// `I - 1` (0-based).
    pub index: u64,
    /// `N`.
    pub count: u64,
}

impl Shard {
    /// The whole campaign (`1/1`).
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Parses `I/N` (1-based `I`, `1 <= I <= N`).
    pub fn parse(s: &str) -> Result<Shard, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("shard `{s}`: expected I/N (e.g. 1/4)"))?;
        let num = |w: &str, what: &str| {
            w.trim().parse::<u64>().map_err(|_| {
                format!("shard `{s}`: {what} `{w}` is not a number (expected I/N, e.g. 1/4)")
            })
        };
        let (i, n) = (num(i, "I")?, num(n, "N")?);
        if n == 0 {
            return Err(format!("shard `{s}`: N must be at least 1"));
        }
        if i == 0 || i > n {
            return Err(format!(
                "shard `{s}`: I must be 1..={n} (shards are numbered from 1)"
            ));
        }
        Ok(Shard {
            index: i - 1,
            count: n,
        })
    }

    /// The campaign index of this shard's `j`-th case.
    pub fn global(self, j: u64) -> u64 {
        self.index + j * self.count
    }

    /// How many of the campaign's cases `0..cases` are this shard's.
    pub fn local_count(self, cases: u64) -> u64 {
        if cases <= self.index {
            0
        } else {
            (cases - self.index).div_ceil(self.count)
        }
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index + 1, self.count)
    }
}

/// How long a campaign runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// The cases `0..N` (this shard's part of them).
    Cases(u64),
    /// Until the time is up (the cases run are then not a fixed set).
    Time(Duration),
}

/// A campaign.
#[derive(Debug, Clone)]
pub struct Campaign {
    /// The machine every case runs on (`trace` off; `seed` is replaced per case).
    pub config: SimConfig,
    /// The loop device each case's machine gets, if any.
    pub loop_dev: Option<LoopSetup>,
    /// The campaign's seed.
    pub seed: u64,
    /// At most this many transitions per case (at least 1).
    pub steps: usize,
    /// How long.
    pub budget: Budget,
    /// Threads.
    pub jobs: usize,
    /// Which shard.
    pub shard: Shard,
    /// With a loop device: also draw fault injection and plugging ([`Space::inject`]).
    pub inject: bool,
}

/// What a case drew: its generator's seed and the deterministic runtime's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaseSeed {
    /// The 16 bytes of the case's `TestRng` (XorShift).
    pub rng: [u8; 16],
    /// The machine's seed (`SimConfig::seed`, the `seed` line of a counterexample).
    pub sim: u64,
}

/// A case's seeds, from the campaign seed and the case index alone.
pub fn case_seed(seed: u64, index: u64) -> CaseSeed {
    let mut r = SplitMix64::new(seed ^ SplitMix64::new(index).next_u64());
    let (a, b) = (r.next_u64(), r.next_u64());
    let mut rng = [0; 16];
    rng[..8].copy_from_slice(&a.to_le_bytes());
    rng[8..].copy_from_slice(&b.to_le_bytes());
    CaseSeed {
        rng,
        sim: r.next_u64() >> 1,
    }
}

/// A failing case's outcome.
#[derive(Debug, Clone)]
pub struct CaseFailure {
    /// The violations the oracle reported at the first check that found any.
    pub violations: Vec<Violation>,
    /// How many transitions had been applied then (the whole case if found at the settle).
    pub at_step: usize,
}

impl CaseFailure {
    /// Whether one of the violations breaks `inv`.
    pub fn breaks(&self, inv: Invariant) -> bool {
        self.violations.iter().any(|v| v.invariant == inv)
    }
}

/// How a case that broke no invariant ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaseEnd {
    /// Every transition ran, the machine settled, every invariant held.
    Held,
    /// The case was cut where `kernel/cpu.c` gave up on a CPU ([`Sim::hotplug_gave_up`]: an
    /// injected failure hit a rollback or a DEAD callback, and the kernel WARNs "no way forward,
    /// no way back"); what follows is outside the batcher's contract. Not a violation: counted
    /// apart ([`Outcome::voided`]). The kernel's message.
    Void(String),
}

/// Runs one case on a fresh machine: each transition applied leniently (`Sim::apply`: one that
/// cannot happen now is skipped), the oracle checked after each, then the settle of
/// [`SETTLE_STEPS`] with the quiescent check (and, with a loop device, the read-back). A case in
/// which the hotplug core gives up on a CPU ends there, [`CaseEnd::Void`], unless a violation was
/// found before (in the settle: whatever it found, as the order of the settle's violations is not
/// the order they happened in).
pub fn run_case(
    config: &SimConfig,
    loop_dev: Option<LoopSetup>,
    ts: &[Transition],
) -> Result<Result<CaseEnd, CaseFailure>, SimError> {
    let s = Sim::new(*config)?;
    if let Some(setup) = loop_dev {
        s.attach_loop(setup);
    }
    for (i, t) in ts.iter().enumerate() {
        s.apply(t);
        // The gave-up WARN is itself a kernel report: the cut comes before it counts.
        if let Some(why) = s.hotplug_gave_up() {
            return Ok(Ok(CaseEnd::Void(why)));
        }
        let v = s.check();
        if !v.is_empty() {
            return Ok(Err(CaseFailure {
                violations: v,
                at_step: i + 1,
            }));
        }
    }
    let mut v = s.settle(SETTLE_STEPS);
    if let Some(why) = s.hotplug_gave_up() {
        // Given up during the settle: what the settle found after it is its consequence.
        return Ok(Ok(CaseEnd::Void(why)));
    }
    if v.is_empty() {
        v = s.verify_devices(SETTLE_STEPS);
    }
    Ok(if v.is_empty() {
        Ok(CaseEnd::Held)
    } else {
        Err(CaseFailure {
            violations: v,
            at_step: ts.len(),
        })
    })
}

/// The lowest failing case of a campaign.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its campaign index.
    pub index: u64,
    /// Its seeds.
    pub seed: CaseSeed,
    /// Its transitions, as drawn.
    pub case: Vec<Transition>,
    /// What the oracle said.
    pub failure: CaseFailure,
}

/// What a campaign ran.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Cases run (with a violation found: the shard's cases up to and including the failing one).
    pub cases: u64,
    /// The order-independent fingerprint of the cases counted in [`Outcome::cases`].
    pub fingerprint: u64,
    /// Of [`Outcome::cases`], those cut where the hotplug core gave up on a CPU
    /// ([`CaseEnd::Void`]): neither a violation nor a pass.
    pub voided: u64,
    /// The lowest failing case, if any.
    pub found: Option<Found>,
    /// Wall-clock time.
    pub elapsed: Duration,
}

/// FNV-1a, as a [`std::hash::Hasher`]: a case's hash does not depend on the standard library's
/// choice of hasher.
#[derive(Debug)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }
}

/// One case's contribution to the fingerprint: a hash of its index and transitions, mixed.
pub fn case_hash(index: u64, ts: &[Transition]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    index.hash(&mut h);
    ts.hash(&mut h);
    SplitMix64::new(h.finish()).next_u64()
}

/// A case run: its local index, its hash, whether it was void.
type Ran = (u64, u64, bool);

/// One thread's count and fingerprint of the cases it ran: folded totals of the chunks known to
/// count, and the chunks not yet known to (a failure found later cuts them), with each case's
/// index and hash. Memory stays bounded however long the campaign runs.
#[derive(Debug, Default)]
struct Tally {
    count: u64,
    sum: u64,
    voided: u64,
    pending: std::collections::VecDeque<(u64, Vec<Ran>)>,
}

impl Tally {
    /// Folds the pending chunks that end at or below `bound` into the totals.
    fn fold_below(&mut self, bound: u64) {
        while let Some((first, _)) = self.pending.front() {
            if first.saturating_add(CHUNK) > bound {
                break;
            }
            let (_, chunk) = self.pending.pop_front().unwrap_or_default();
            for (_, h, void) in chunk {
                self.count += 1;
                self.sum = self.sum.wrapping_add(h);
                self.voided += u64::from(void);
            }
        }
    }
}

/// A generator for one thread: the case strategy and a runner whose RNG is replaced per case.
pub struct Drawer {
    strategy: BoxedStrategy<Vec<Transition>>,
    runner: TestRunner,
    space: Space,
    arms: Vec<(u32, Kind)>,
    steps: usize,
}

impl std::fmt::Debug for Drawer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Drawer")
    }
}

impl Drawer {
    /// The generator of `space`'s cases of 1 to `steps` transitions.
    pub fn new(space: &Space, steps: usize) -> Self {
        Drawer {
            strategy: case(space, steps),
            runner: TestRunner::new_with_rng(
                Config {
                    failure_persistence: None,
                    ..Config::default()
                },
                TestRng::from_seed(RngAlgorithm::XorShift, &[0; 16]),
            ),
            space: *space,
            arms: arms(space),
            steps,
        }
    }

    /// The case with these seeds: `tree(seed).current()`, drawn without the value tree
    /// ([`draw_case`]); what a campaign runs.
    pub fn case(&mut self, seed: &CaseSeed) -> Vec<Transition> {
        *self.runner.rng() = TestRng::from_seed(RngAlgorithm::XorShift, &seed.rng);
        draw_case(&self.space, &self.arms, self.steps, &mut self.runner)
    }

    /// The value tree of the case with these seeds (its `current()` is the case; it shrinks).
    pub fn tree(&mut self, seed: &CaseSeed) -> Box<dyn ValueTree<Value = Vec<Transition>>> {
        *self.runner.rng() = TestRng::from_seed(RngAlgorithm::XorShift, &seed.rng);
        match self.strategy.new_tree(&mut self.runner) {
            Ok(t) => t,
            // A vec of unfiltered strategies never rejects.
            Err(e) => unreachable!("the case strategy rejected a value: {e}"),
        }
    }
}

impl Campaign {
    /// The generator's view of the machine.
    pub fn space(&self) -> Space {
        Space {
            nr_cpus: self.config.nr_cpus,
            dynamic_helper: self.config.variant.dynamic_helper,
            loop_blocks: self.loop_dev.map(|l| l.blocks() as u32),
            inject: self.inject && self.loop_dev.is_some(),
            lower: self.loop_dev.and_then(|l| l.backing.lower_disk()),
        }
    }

    /// The machine case `seed` runs on.
    pub fn machine(&self, seed: &CaseSeed) -> SimConfig {
        SimConfig {
            seed: seed.sim,
            trace: false,
            ..self.config
        }
    }

    /// Runs the campaign; `progress`, if any, is called every 100 ms with the cases done so far
    /// (from a thread of its own).
    pub fn run(&self, progress: Option<&(dyn Fn(u64) + Sync)>) -> Result<Outcome, SimError> {
        // Fail early on a machine that does not boot.
        Sim::new(self.config)?;
        let start = Instant::now();
        let total = match self.budget {
            Budget::Cases(n) => self.shard.local_count(n),
            Budget::Time(_) => u64::MAX,
        };
        let deadline = match self.budget {
            Budget::Time(t) => Some(start + t),
            Budget::Cases(_) => None,
        };
        let next = AtomicU64::new(0);
        let limit = AtomicU64::new(total);
        let done = AtomicU64::new(0);
        let finished = AtomicBool::new(false);
        let found: Mutex<Option<(u64, Found)>> = Mutex::new(None);
        let error: Mutex<Option<SimError>> = Mutex::new(None);
        let space = self.space();
        let mut elapsed = Duration::ZERO;
        // Where each thread is: the first index of the chunk it runs (u64::MAX once it stopped).
        let inflight: Vec<AtomicU64> = (0..self.jobs.max(1)).map(|_| AtomicU64::new(0)).collect();
        let tallies: Vec<Tally> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..self.jobs.max(1))
                .map(|me| {
                    let (inflight, next, limit, done) = (&inflight, &next, &limit, &done);
                    let (found, error, space) = (&found, &error, &space);
                    scope.spawn(move || {
                        let mut drawer = Drawer::new(space, self.steps);
                        let mut tally = Tally::default();
                        loop {
                            if deadline.is_some_and(|d| Instant::now() >= d) {
                                break;
                            }
                            let first = next.fetch_add(CHUNK, Ordering::SeqCst);
                            inflight[me].store(first, Ordering::SeqCst);
                            let mut chunk = Vec::with_capacity(CHUNK as usize);
                            let mut stop = false;
                            for j in first..first.saturating_add(CHUNK) {
                                if j >= limit.load(Ordering::SeqCst) {
                                    stop = true;
                                    break;
                                }
                                let index = self.shard.global(j);
                                let seed = case_seed(self.seed, index);
                                let ts = drawer.case(&seed);
                                let hash = case_hash(index, &ts);
                                match run_case(&self.machine(&seed), self.loop_dev, &ts) {
                                    Ok(Ok(end)) => {
                                        chunk.push((j, hash, matches!(end, CaseEnd::Void(_))))
                                    }
                                    Ok(Err(failure)) => {
                                        chunk.push((j, hash, false));
                                        let mut f = found.lock().unwrap_or_else(|p| p.into_inner());
                                        if f.as_ref().is_none_or(|(k, _)| j < *k) {
                                            *f = Some((
                                                j,
                                                Found {
                                                    index,
                                                    seed,
                                                    case: ts,
                                                    failure,
                                                },
                                            ));
                                        }
                                        limit.fetch_min(j, Ordering::SeqCst);
                                        stop = true;
                                        break;
                                    }
                                    Err(e) => {
                                        chunk.push((j, hash, false));
                                        *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                                        limit.store(0, Ordering::SeqCst);
                                        stop = true;
                                        break;
                                    }
                                }
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                            tally.pending.push_back((first, chunk));
                            if stop {
                                break;
                            }
                            // Every chunk below the lowest one in flight is finished, and a
                            // failure still to be found lies at or above it: the chunks below it
                            // (and below the limit) count whatever happens next.
                            let low = inflight
                                .iter()
                                .map(|a| a.load(Ordering::SeqCst))
                                .min()
                                .unwrap_or(0);
                            tally.fold_below(low.min(limit.load(Ordering::SeqCst)));
                        }
                        inflight[me].store(u64::MAX, Ordering::SeqCst);
                        tally
                    })
                })
                .collect();
            let (finished, done) = (&finished, &done);
            let ticker = progress.map(|progress| {
                scope.spawn(move || {
                    while !finished.load(Ordering::Relaxed) {
                        progress(done.load(Ordering::Relaxed));
                        std::thread::park_timeout(Duration::from_millis(100));
                    }
                })
            });
            let recs = workers
                .into_iter()
                .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect();
            elapsed = start.elapsed();
            finished.store(true, Ordering::Relaxed);
            if let Some(t) = ticker {
                t.thread().unpark();
                let _ = t.join();
            }
            recs
        });
        if let Some(e) = error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        let found = found.into_inner().unwrap_or_else(|p| p.into_inner());
        let upto = found.as_ref().map_or(u64::MAX, |(k, _)| *k);
        let (mut cases, mut fingerprint, mut voided) = (0u64, 0u64, 0u64);
        for t in &tallies {
            cases += t.count;
            fingerprint = fingerprint.wrapping_add(t.sum);
            voided += t.voided;
            for (j, h, void) in t.pending.iter().flat_map(|(_, c)| c) {
                if *j <= upto {
                    cases += 1;
                    fingerprint = fingerprint.wrapping_add(*h);
                    voided += u64::from(*void);
                }
            }
        }
        if let Some(p) = progress {
            p(cases);
        }
        Ok(Outcome {
            cases,
            fingerprint,
            voided,
            found: found.map(|(_, f)| f),
            elapsed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bio_core::block::complete_in_task::Variant;

    fn campaign(variant: Variant, cases: u64, jobs: usize, shard: Shard) -> Campaign {
        Campaign {
            shard,
            inject: false,
            ..crate::perf::explore_bench::campaign(variant, cases, 40, jobs, 3)
        }
    }

    /// A failure injected into a rollback (docs/scenarios/rollback-fails-warn-v7.scn): the case
    /// is void, and without the cut (the twin: the same case with the WARN left to the oracle)
    /// the oracle reports the kernel's WARN.
    #[test]
    fn a_failure_injected_into_a_rollback_voids_the_case() {
        use crate::machine::oracle::Need;
        use crate::machine::sim::CompletionContext;
        let mut ts = vec![Transition::Hotplug {
            cpu: 1,
            up: false,
            fail_at: Some(144),
        }];
        ts.extend([Transition::HotplugStep; 5]);
        ts.push(Transition::Fail { cpu: 1, state: 187 });
        ts.push(Transition::Complete {
            cpu: 0,
            ctx: CompletionContext::Hardirq,
            need: Need::Flag,
        });
        let config = SimConfig {
            nr_cpus: 2,
            online: 2,
            trace: false,
            ..SimConfig::default()
        };
        match run_case(&config, None, &ts).unwrap() {
            Ok(CaseEnd::Void(why)) => assert!(why.contains("rollback failed"), "{why}"),
            other => panic!("not void: {other:?}"),
        }
        let s = Sim::new(config).unwrap();
        for t in &ts {
            s.apply(t);
        }
        let v = s.settle(SETTLE_STEPS);
        assert!(
            v.iter()
                .any(|x| x.invariant == Invariant::KernelReport(bio_core::kernel::ReportKind::Warn)),
            "{v:?}"
        );
        // Without the failure mid-rollback the same case holds.
        ts.retain(|t| !matches!(t, Transition::Fail { .. }));
        assert_eq!(
            run_case(&config, None, &ts).unwrap().unwrap(),
            CaseEnd::Held
        );
    }

    #[test]
    fn shards_parse_and_partition_the_indices() {
        assert_eq!(Shard::parse("2/3"), Ok(Shard { index: 1, count: 3 }));
        for bad in ["3/2", "0/2", "1/0", "x/2", "12", "1/2/3"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        assert!(Shard::parse("0/2").unwrap_err().contains("numbered from 1"));
        for n in [1, 2, 3, 7] {
            let mut seen = Vec::new();
            for i in 0..n {
                let s = Shard { index: i, count: n };
                seen.extend((0..s.local_count(10)).map(|j| s.global(j)));
            }
            seen.sort();
            assert_eq!(seen, (0..10).collect::<Vec<_>>(), "{n} shards");
        }
    }

    /// The campaign's cases (drawn without value trees) are the value trees' cases, which the
    /// shrink walks: the same transitions for every seed, on machines with and without a loop
    /// device, fault injection, a stacked lower device or the dynamic helper, and for short and
    /// long cases.
    #[test]
    fn a_case_drawn_without_its_tree_is_the_trees_case() {
        let plain = Space {
            nr_cpus: 3,
            dynamic_helper: true,
            loop_blocks: None,
            inject: false,
            lower: None,
        };
        let spaces = [
            plain,
            Space {
                nr_cpus: 2,
                dynamic_helper: false,
                ..plain
            },
            Space {
                loop_blocks: Some(8),
                ..plain
            },
            Space {
                nr_cpus: 4,
                loop_blocks: Some(5),
                inject: true,
                lower: Some("nullb0"),
                ..plain
            },
        ];
        let mut transitions = 0;
        for space in spaces {
            for steps in [1, 40, 120] {
                let mut drawer = Drawer::new(&space, steps);
                for i in 0..300 {
                    let seed = case_seed(11, i);
                    let drawn = drawer.case(&seed);
                    assert_eq!(drawn, drawer.tree(&seed).current(), "{space:?} {steps} {i}");
                    assert!((1..=steps).contains(&drawn.len()));
                    transitions += drawn.len();
                }
            }
        }
        assert!(transitions > 50_000, "{transitions}");
    }

    /// A campaign thread boots one machine per case, and what the thread keeps between them (the
    /// hotplug table's shared strings, the lock owner's tag) changes nothing: each case, run
    /// after the others on one thread, ends as it does alone on a fresh thread, with the same
    /// violations and the same trace.
    #[test]
    fn a_case_run_after_others_runs_as_on_a_fresh_thread() {
        let mut cases = Vec::new();
        for variant in [Variant::V7, Variant::V6] {
            let c = campaign(variant, 0, 1, Shard::ALL);
            let mut drawer = Drawer::new(&c.space(), c.steps);
            for i in 0..12 {
                let seed = case_seed(c.seed, i);
                cases.push((c.machine(&seed), drawer.tree(&seed).current()));
            }
        }
        let run = |config: &SimConfig, ts: &[Transition]| {
            let ended = format!("{:?}", run_case(config, None, ts).unwrap());
            let s = Sim::new(SimConfig {
                trace: true,
                ..*config
            })
            .unwrap();
            for t in ts {
                s.apply(t);
            }
            let v = s.settle(SETTLE_STEPS);
            (ended, format!("{v:?}"), s.trace())
        };
        let in_sequence: Vec<_> = cases.iter().map(|(c, ts)| run(c, ts)).collect();
        assert!(
            in_sequence.iter().any(|(e, _, _)| e.starts_with("Err")),
            "some v6 case fails: {in_sequence:?}"
        );
        for (i, (config, ts)) in cases.iter().enumerate() {
            let fresh = std::thread::scope(|s| s.spawn(|| run(config, ts)).join().unwrap());
            assert_eq!(fresh, in_sequence[i], "case {i}");
        }
    }

    /// The shards' counts and fingerprints add up to the unsharded run's, whatever `--jobs`; a
    /// shard run twice (its twin: the other shard's cases replaced by this one's) does not.
    #[test]
    fn shards_add_up_to_the_whole_and_a_duplicate_shows() {
        let whole = campaign(Variant::V7, 60, 2, Shard::ALL).run(None).unwrap();
        assert!(whole.found.is_none());
        assert_eq!(whole.cases, 60);
        let a = campaign(Variant::V7, 60, 1, Shard::parse("1/2").unwrap())
            .run(None)
            .unwrap();
        let b = campaign(Variant::V7, 60, 2, Shard::parse("2/2").unwrap())
            .run(None)
            .unwrap();
        assert_eq!((a.cases, b.cases), (30, 30));
        assert_eq!(a.fingerprint.wrapping_add(b.fingerprint), whole.fingerprint);
        assert_ne!(a.fingerprint.wrapping_add(a.fingerprint), whole.fingerprint);
    }

    /// The failing case reported is the lowest failing index, with one thread or two.
    #[test]
    fn the_lowest_failing_case_is_found_whatever_the_jobs() {
        for seed in [3, 4, 5] {
            let run = |jobs| {
                let mut c = campaign(Variant::V6, 3000, jobs, Shard::ALL);
                c.seed = seed;
                c.run(None).unwrap()
            };
            let one = run(1);
            let f1 = one.found.clone().unwrap();
            assert_eq!(
                one.cases,
                f1.index + 1,
                "every case up to the failing one counts"
            );
            for jobs in [2, 3] {
                let o = run(jobs);
                let f = o.found.unwrap();
                assert_eq!((f.index, &f.case), (f1.index, &f1.case), "seed {seed}");
                assert_eq!((o.cases, o.fingerprint), (one.cases, one.fingerprint));
            }
        }
    }

    /// Chunks fold into the totals only when they end at or below the bound; the rest stay
    /// pending with their cases.
    #[test]
    fn a_tally_folds_only_what_is_known_to_count() {
        let mut t = Tally::default();
        t.pending
            .push_back((0, (0..CHUNK).map(|j| (j, 1, j == 0)).collect()));
        t.pending.push_back((CHUNK, vec![(CHUNK, 10, false)]));
        t.fold_below(CHUNK + 1);
        assert_eq!(
            (t.count, t.sum, t.voided, t.pending.len()),
            (CHUNK, CHUNK, 1, 1)
        );
        t.fold_below(2 * CHUNK);
        assert_eq!(
            (t.count, t.sum, t.pending.len()),
            (CHUNK + 1, CHUNK + 10, 0)
        );
    }
}
