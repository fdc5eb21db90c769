//! `biosim bench dontcache --preset nomerge`: what patch 2/4's removal of `IOMAP_IOEND_DONTCACHE`
//! from `IOMAP_IOEND_NOMERGE_FLAGS` (fs/iomap/ioend.c, `iomap_can_add_to_ioend()`) costs the
//! regular data written beside DONTCACHE data.
//!
//! The seed's workloads never merge: each run is all DONTCACHE or all regular, and a DONTCACHE
//! write starts writeback of its own range before it returns. A merge needs one writeback pass
//! that finds a dirty dropbehind folio contiguous with a dirty regular one, so each round here
//! makes one:
//!
//! 1. `pwritev2()` of 32 KiB, buffered: 8 regular dirty folios;
//! 2. `pwritev2(RWF_DONTCACHE)` of the 32 KiB right after them: 8 dropbehind folios whose
//!    writeback the syscall kicks (`filemap_fdatawrite_range_kick()`, `WB_SYNC_NONE`);
//! 3. the same 32 KiB again with `RWF_DONTCACHE` while that writeback is in flight: the folios
//!    are dirty again, and the kick skips them (`WB_SYNC_NONE` does not wait on `PG_writeback`);
//! 4. `fsync()` of the device (`blkdev_fsync()` → `file_write_and_wait_range()`,
//!    `WB_SYNC_ALL`): one pass over the 16 dirty folios, which starts writeback of the 8 regular
//!    ones, then sleeps on the first dropbehind one until the kick's writeback ends
//!    (`folio_prepare_writeback()` → `folio_wait_writeback()`) with iomap's ioend still open,
//!    and adds the 8 to it. After the patch that is one ioend (its bio flagged
//!    `BIO_COMPLETE_IN_TASK`, the 8 regular folios ending in the kworker with the rest); before
//!    it, two (the regular one ended in the interrupt). On buffer_head every folio is a bio of its
//!    own, flagged only if dropbehind: nothing merges.
//!
//! The rounds go on for the run's simulated seconds (or a number of rounds), each 64 KiB further
//! over the range. The
//! driver follows every regular folio the device completes inside a flagged bio, from that
//! interrupt to its `folio_end_writeback()` ([`MergedRegularWait`]): the time it spends under
//! writeback that it would not have spent before the patch. Then the cache is dropped and what
//! the rounds wrote is read back and compared.

use super::driver::{DriverError, Machine, MergedRegularWait, Phase, RunResult};
use super::dropbehind_oracle::{
    check_dropbehind, data_integrity, merged_regular_end_with_their_bio, verdict_lines, Verdict,
};
use super::seed_bench::{
    check_deterministic_size_on, design_name, driver_config, kernel_config_lines, mib, path_name,
    SeedBenchConfig,
};
use super::seed_presets::{Workload, NOMERGE};
use super::workload_pattern::PAGE;
use bio_core::mm::dontcache::{DontcacheDesign, WritebackPath};
use std::fmt::Write as _;

/// Pages each of a round's writes covers (32 KiB: [`NOMERGE`]'s `io_bytes`).
pub const ROUND_WRITE_PAGES: u64 = (NOMERGE.io_bytes / PAGE) as u64;

/// One design x path: the rounds it ran and what they measured.
#[derive(Debug, Clone)]
pub struct NomergeRow {
    /// The design.
    pub design: DontcacheDesign,
    /// The path.
    pub path: WritebackPath,
    /// Rounds run.
    pub rounds: u64,
    /// Simulated time the rounds took (ns).
    pub elapsed_ns: u64,
    /// The run: counters, the merged folios' waits, the read-back's corrupt bytes.
    pub run: RunResult,
}

impl NomergeRow {
    /// Writeback bios per round (the kick's and the fsync's).
    pub fn bios_per_round(&self) -> f64 {
        per(self.run.stats.writeback_bios, self.rounds)
    }

    /// Regular folios merged into a flagged bio per round (iomap's count).
    pub fn merged_per_round(&self) -> f64 {
        per(self.run.stats.merged_regular_folios, self.rounds)
    }

    /// Simulated µs per round (three writes and the fsync).
    pub fn us_per_round(&self) -> f64 {
        per(self.elapsed_ns, self.rounds) / 1e3
    }

    /// The oracle's verdicts: the read-back, what the DONTCACHE folios left
    /// ([`check_dropbehind`]), and that every merged regular folio came back in a flagged bio
    /// and ended with it in task context ([`merged_regular_end_with_their_bio`]).
    pub fn verdicts(&self) -> Vec<(&'static str, Verdict)> {
        let mut v = vec![(
            "every byte read back is the rounds'",
            data_integrity(&self.run),
        )];
        v.extend(check_dropbehind(&self.design, self.path, &self.run));
        v.push((
            "the rounds merge as the design's NOMERGE flags say",
            self.merges_as_designed(),
        ));
        v.push((
            "merged regular folios end with their bio, in task context",
            merged_regular_end_with_their_bio(&self.run),
        ));
        v
    }

    /// Each round's sync writes its 16 folios in one pass. On iomap after patch 2/4 (no
    /// `IOMAP_IOEND_DONTCACHE`) that is one ioend, flagged when the design sets
    /// `BIO_COMPLETE_IN_TASK` for dropbehind folios: 8 regular folios merged, 2 bios a round with
    /// the kick's; before it, two ioends (3 bios a round) and none merged; on buffer_head a bio per
    /// folio and pass (24 a round), none merged.
    pub fn merges_as_designed(&self) -> Verdict {
        let s = &self.run.stats;
        let (merged, bios) = match self.path {
            WritebackPath::Iomap if !self.design.ioend_dontcache() => {
                (if self.design.fs_flag() { 8 } else { 0 }, 2)
            }
            WritebackPath::Iomap => (0, 3),
            WritebackPath::BufferHead => (0, 24),
        };
        let want = (merged * self.rounds, bios * self.rounds);
        if (s.merged_regular_folios, s.writeback_bios) == want {
            return Ok(());
        }
        Err(format!(
            "{} rounds merged {} regular folios in {} writeback bios; the design's flags make \
             it {} in {}",
            self.rounds, s.merged_regular_folios, s.writeback_bios, want.0, want.1
        ))
    }
}

fn per(n: u64, rounds: u64) -> f64 {
    if rounds == 0 {
        0.0
    } else {
        n as f64 / rounds as f64
    }
}

/// The bench's results.
#[derive(Debug, Clone)]
pub struct NomergeReport {
    /// The configuration.
    pub config: SeedBenchConfig,
    /// `--rounds`: the most rounds per design, if given.
    pub max_rounds: Option<u64>,
    /// One per design x path.
    pub rows: Vec<NomergeRow>,
}

impl NomergeReport {
    /// Whether every verdict on every row passed.
    pub fn oracle_ok(&self) -> bool {
        self.rows
            .iter()
            .all(|r| r.verdicts().iter().all(|(_, v)| v.is_ok()))
    }
}

/// Runs the rounds on every design and path of `cfg` (whose preset is [`NOMERGE`]) for its
/// seconds, or `max_rounds` rounds if that comes first (`--rounds`).
pub fn nomerge_bench(
    cfg: &SeedBenchConfig,
    max_rounds: Option<u64>,
) -> Result<NomergeReport, DriverError> {
    if cfg.preset != NOMERGE {
        return Err(DriverError::Config(format!(
            "the nomerge bench runs the nomerge preset, not {}",
            cfg.preset.name
        )));
    }
    check_deterministic_size_on(cfg, super::threaded_seed_bench::host_mem_available())
        .map_err(DriverError::Config)?;
    let mut rows = Vec::new();
    for &design in &cfg.designs {
        for &path in &cfg.paths {
            rows.push(run_rounds(cfg, design, path, max_rounds, None)?);
        }
    }
    Ok(NomergeReport {
        config: cfg.clone(),
        max_rounds,
        rows,
    })
}

/// One design x path of the bench (`twin`: a broken machine, for the tests).
pub(crate) fn run_rounds(
    cfg: &SeedBenchConfig,
    design: DontcacheDesign,
    path: WritebackPath,
    max_rounds: Option<u64>,
    twin: Option<super::driver::Twin>,
) -> Result<NomergeRow, DriverError> {
    let mut dc = driver_config(cfg, design, path);
    dc.twin = twin;
    // On a bdev that refuses RWF_DONTCACHE (no FOP_DONTCACHE without patch 4/4) the rounds
    // measure what its writeback paths would do with the flag.
    dc.force_dontcache = true;
    let (range, until) = (dc.range_bytes, dc.duration_ns);
    let write_bytes = ROUND_WRITE_PAGES * PAGE as u64;
    let mut m = Machine::boot(dc)?;
    let mut res = RunResult::default();
    let (mut rounds, mut last_return) = (0u64, 0u64);
    while last_return < until && max_rounds.is_none_or(|n| rounds < n) {
        let base = (rounds * 2 * write_bytes) % range;
        for (start, dontcache) in [
            (base, false),
            (base + write_bytes, true),
            (base + write_bytes, true),
        ] {
            let ph = Phase {
                workload: Workload::Writes,
                dontcache,
                start,
                range: write_bytes,
                until_ns: u64::MAX,
                max_ios: Some(1),
            };
            let mut one = RunResult::default();
            m.run_phase(&ph, &mut one)?;
            if let Some(e) = one.refused {
                return Err(DriverError::Config(format!(
                    "{} ({}): the round's write failed: {e:?}",
                    design_name(&design),
                    path_name(path)
                )));
            }
            res.bytes += one.bytes;
            res.ios += one.ios;
        }
        last_return = m.fsync_wait()?;
        rounds += 1;
    }
    let elapsed_ns = last_return;
    m.drain()?;
    m.finish(&mut res);
    // Read back what the rounds wrote, through an empty cache.
    let written = (rounds * 2 * write_bytes).min(range);
    if written > 0 {
        m.drop_caches();
        let reads = Phase {
            workload: Workload::Reads,
            dontcache: false,
            start: 0,
            range: written,
            until_ns: u64::MAX,
            max_ios: Some(written / write_bytes),
        };
        let mut check = RunResult::default();
        m.run_phase(&reads, &mut check)?;
        res.corrupt_bytes = check.corrupt_bytes;
    }
    Ok(NomergeRow {
        design,
        path,
        rounds,
        elapsed_ns,
        run: res,
    })
}

/// `MergedRegularWait`'s mean and max as `mean (max)` µs, or `-` when no folio waited.
fn wait_text(w: &MergedRegularWait) -> String {
    match w.mean_ns() {
        Some((lo, hi)) => format!(
            "{:.1}-{:.1} ({:.1})",
            lo / 1e3,
            hi / 1e3,
            w.max_hi_ns as f64 / 1e3
        ),
        None => "-".to_owned(),
    }
}

impl std::fmt::Display for NomergeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cfg = &self.config;
        let mut out = String::new();
        let kib = ROUND_WRITE_PAGES * PAGE as u64 / 1024;
        let _ = writeln!(
            out,
            "nomerge: rounds of a {kib} KiB buffered pwritev2, a {kib} KiB pwritev2(RWF_DONTCACHE) \
             right after it, the same {kib} KiB with RWF_DONTCACHE again while its writeback is \
             in flight, and fsync(), each round {} KiB further over {} with a cache limit of {}, {}{} simulated s per design \
             (simulation: deterministic runtime, {} device; RWF_DONTCACHE forced where the bdev \
             refuses it)",
            2 * kib,
            mib(cfg.limit_bytes * cfg.preset.range_limits),
            mib(cfg.limit_bytes),
            self.max_rounds
                .map_or(String::new(), |n| format!("{n} rounds or ")),
            cfg.seconds,
            match cfg.device.completion {
                super::nvme_device::Completion::PerRequest => "NVMe-like",
                super::nvme_device::Completion::WhenQueueEmpty => "virtio-blk",
            }
        );
        kernel_config_lines(cfg, &mut out);
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<10} {:<11} {:>7} {:>9} {:>10} {:>14} {:>26}",
            "design",
            "path",
            "rounds",
            "us/round",
            "bios/round",
            "merged/round",
            "wait after irq us mean(max)"
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "{:<10} {:<11} {:>7} {:>9.1} {:>10.2} {:>14.2} {:>26}",
                design_name(&r.design),
                path_name(r.path),
                r.rounds,
                r.us_per_round(),
                r.bios_per_round(),
                r.merged_per_round(),
                wait_text(&r.run.merged_wait)
            );
        }
        let _ = writeln!(
            out,
            "merged/round: regular folios iomap put in a BIO_COMPLETE_IN_TASK bio; wait: from the \
             interrupt that completed that bio to the run (kworker or interrupt) that ended the \
             folio's writeback, its start-its end (the mean of each; the longest to its end)"
        );
        for r in &self.rows {
            let mut lines = String::new();
            verdict_lines(&r.verdicts(), &mut lines);
            for l in lines.lines() {
                let _ = writeln!(
                    out,
                    "{} ({}): {l}",
                    design_name(&r.design),
                    path_name(r.path)
                );
            }
        }
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pagecache::driver::Twin;
    use crate::pagecache::seed_bench::all_designs;
    use bio_core::block::complete_in_task::WorkKind;

    const ROUNDS: u64 = 3;

    /// A jiffy of the default `CONFIG_HZ` (250), in ns.
    const JIFFY_NS: f64 = 4e6;

    /// Every design on both paths: on iomap the series merges each round's 8 regular folios into
    /// the dropbehind folios' flagged bio (the kick's bio and one more per round) and they end
    /// in the kworker: after the hand-off on v7, after the one-jiffy delayed work on v5/v6;
    /// before the series (baseline, xfs-wq, RFC v3) the NOMERGE flag keeps them in an ioend of
    /// their own (three bios a round), and buffer_head never merges (a bio per folio and pass).
    #[test]
    fn the_series_defers_the_regular_folios_it_merges_and_nothing_else_merges() {
        let cfg = SeedBenchConfig::new(NOMERGE);
        for design in all_designs() {
            for path in WritebackPath::ALL {
                let r = run_rounds(&cfg, design, path, Some(ROUNDS), None).unwrap();
                let (s, w) = (&r.run.stats, &r.run.merged_wait);
                let at = format!("{} {}: {s:?} {w:?}", design_name(&design), path_name(path));
                assert_eq!(r.rounds, ROUNDS, "{at}");
                for (name, v) in r.verdicts() {
                    assert!(v.is_ok(), "{at}: {name}: {v:?}");
                }
                assert_eq!(r.run.bytes, ROUNDS * 3 * 32 * 1024, "{at}");
                match (path, design) {
                    (WritebackPath::Iomap, DontcacheDesign::Bio(v)) => {
                        assert_eq!(s.merged_regular_folios, 8 * ROUNDS, "{at}");
                        assert_eq!((w.seen_at_irq, w.ended), (8 * ROUNDS, 8 * ROUNDS), "{at}");
                        assert_eq!(s.writeback_bios, 2 * ROUNDS, "{at}");
                        let (lo, hi) = w.mean_ns().unwrap();
                        assert!(lo < hi && hi <= w.max_hi_ns as f64, "{at}");
                        match v.work {
                            WorkKind::Plain => {
                                // The interrupt, then the kworker after its hand-off: microseconds.
                                let c = &cfg.costs;
                                assert!(lo >= c.irq_ns + c.work_handoff_ns, "{at}");
                                assert!((w.max_hi_ns as f64) < 20_000.0, "{at}");
                            }
                            WorkKind::Delayed { delay } => {
                                // Until the tick that runs the delayed work.
                                assert!(lo > (delay as f64 - 0.5) * JIFFY_NS, "{at}");
                                assert!((w.max_hi_ns as f64) <= delay as f64 * JIFFY_NS, "{at}");
                            }
                        }
                    }
                    (WritebackPath::Iomap, _) => {
                        assert_eq!((s.merged_regular_folios, w.seen_at_irq), (0, 0), "{at}");
                        assert_eq!(s.writeback_bios, 3 * ROUNDS, "{at}: NOMERGE, two ioends");
                    }
                    (WritebackPath::BufferHead, _) => {
                        assert_eq!((s.merged_regular_folios, w.seen_at_irq), (0, 0), "{at}");
                        assert_eq!(s.writeback_bios, 24 * ROUNDS, "{at}: a bio per folio");
                    }
                }
            }
        }
    }

    /// The twin: a stacking driver that drops `BIO_COMPLETE_IN_TASK` on the way. iomap counted the
    /// merges, but the flagged bios never reach the interrupt and the regular folios end there:
    /// the merged-folio check fails (and the dropbehind checks with it).
    #[test]
    fn a_driver_that_drops_the_flag_fails_the_merged_folio_check() {
        let cfg = SeedBenchConfig::new(NOMERGE);
        let design = DontcacheDesign::parse("v7").unwrap();
        let r = run_rounds(
            &cfg,
            design,
            WritebackPath::Iomap,
            Some(ROUNDS),
            Some(Twin::DropsCompleteInTask),
        )
        .unwrap();
        assert_eq!(r.run.stats.merged_regular_folios, 8 * ROUNDS);
        assert_eq!(r.run.merged_wait, MergedRegularWait::default());
        let v = r.verdicts();
        let (_, merged) = v
            .iter()
            .find(|(n, _)| n.starts_with("merged regular folios"))
            .unwrap();
        let (_, left) = v
            .iter()
            .find(|(n, _)| *n == "no dropbehind folio survives writeback")
            .unwrap();
        assert!(
            left.is_err(),
            "the dropbehind folios ended in the interrupt"
        );
        let e = merged.as_ref().unwrap_err();
        assert!(
            e.contains("merged 24 regular folios") && e.contains("found 0 of them"),
            "{e}"
        );
        let report = NomergeReport {
            config: cfg,
            max_rounds: Some(ROUNDS),
            rows: vec![r],
        };
        assert!(!report.oracle_ok());
        assert!(
            report.rows[0].merges_as_designed().is_ok(),
            "iomap still merged"
        );
        assert!(report.to_string().contains("v7 (iomap): oracle: merged regular folios end with their bio, in task context: FAILED: iomap merged 24"));
    }

    /// The bench's own check fails a series design whose rounds did not merge (as when the pass
    /// wrote around the folio under writeback) and one before the series that merged.
    #[test]
    fn a_round_that_does_not_merge_as_designed_fails() {
        let cfg = SeedBenchConfig::new(NOMERGE);
        for (name, merged) in [("v7", 0), ("xfs-wq", 8)] {
            let design = DontcacheDesign::parse(name).unwrap();
            let mut r = run_rounds(&cfg, design, WritebackPath::Iomap, Some(1), None).unwrap();
            assert!(r.merges_as_designed().is_ok(), "{name}");
            r.run.stats.merged_regular_folios = merged;
            let e = r.merges_as_designed().unwrap_err();
            assert!(
                e.contains(&format!("merged {merged} regular folios")),
                "{name}: {e}"
            );
        }
    }

    /// The task sleeping in `fsync()` wakes when the run that ended the writeback it waits for
    /// ends, not at the interrupt: with the kworker's hand-off made 0.5 ms on this machine's disk
    /// (its interrupt and kworker on CPU1, the task on CPU0), each v7 round waits out two of them
    /// (the kick's completion, then the merged bio's).
    #[test]
    fn the_syncing_task_wakes_when_the_kworker_has_ended_the_writeback() {
        let mut cfg = SeedBenchConfig::new(NOMERGE);
        crate::pagecache::seed_machine::SeedMachine::by_name("fc-guest")
            .unwrap()
            .apply(&mut cfg);
        cfg.costs.work_handoff_ns = 500_000.0;
        let design = DontcacheDesign::parse("v7").unwrap();
        let r = run_rounds(&cfg, design, WritebackPath::Iomap, Some(3), None).unwrap();
        assert!(
            r.us_per_round() > 1_000.0,
            "{} us a round",
            r.us_per_round()
        );
        assert!(
            r.us_per_round() < 1_200.0,
            "{} us a round",
            r.us_per_round()
        );
    }

    /// Each of the merged-folio check's three agreements fails it alone: the interrupts saw
    /// fewer than iomap merged, fewer ended than were seen, fewer ended in task context.
    #[test]
    fn each_disagreement_fails_the_merged_folio_check() {
        let run = |seen, ended, in_task| {
            let mut r = RunResult::default();
            r.stats.merged_regular_folios = 8;
            r.stats.merged_regular_ended_in_task = in_task;
            r.merged_wait = MergedRegularWait {
                seen_at_irq: seen,
                ended,
                ..MergedRegularWait::default()
            };
            merged_regular_end_with_their_bio(&r)
        };
        assert!(run(8, 8, 8).is_ok());
        for (seen, ended, in_task) in [(0, 0, 8), (8, 7, 8), (8, 8, 0), (8, 8, 7)] {
            let e = run(seen, ended, in_task).unwrap_err();
            assert!(
                e.contains(&format!("found {seen} of them")),
                "{seen} {ended} {in_task}: {e}"
            );
        }
    }

    /// The wait's means and text: none without an ended folio, the two bounds' means and the
    /// longest otherwise.
    #[test]
    fn the_wait_is_printed_as_its_bounds_means_and_its_longest() {
        let w = MergedRegularWait::default();
        assert_eq!(w.mean_ns(), None);
        assert_eq!(wait_text(&w), "-");
        let w = MergedRegularWait {
            seen_at_irq: 2,
            ended: 2,
            total_lo_ns: 6_000,
            total_hi_ns: 10_000,
            max_hi_ns: 7_000,
        };
        assert_eq!(w.mean_ns(), Some((3_000.0, 5_000.0)));
        assert_eq!(wait_text(&w), "3.0-5.0 (7.0)");
    }

    /// The bench refuses another preset's configuration.
    #[test]
    fn only_the_nomerge_preset_runs_here() {
        let cfg = SeedBenchConfig::new(crate::pagecache::seed_presets::SEED_WRITES);
        let e = nomerge_bench(&cfg, Some(1)).unwrap_err().to_string();
        assert!(e.contains("not seed-writes"), "{e}");
        let e = crate::pagecache::seed_bench::seed_bench(&SeedBenchConfig::new(NOMERGE))
            .unwrap_err()
            .to_string();
        assert!(e.contains("nomerge preset prints its own table"), "{e}");
    }
}
