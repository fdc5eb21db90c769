//! The `biosim` command line.

use bio_core::block::complete_in_task::{Knob, Variant};
use bio_core::drivers::block::loop_drv::{LoopKnob, LoopVariant};
use bio_core::kernel::{KernelConfig, PreemptModel};
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;

/// `--variant`'s help: the names of [`Variant::ALL`].
fn variant_help() -> String {
    format!(
        "With --finding: the variant to run it on ({})",
        Variant::names_or(&["twin"])
    )
}

/// `--module`'s help: `what`, then the registered modules (or how to register one).
fn module_help(what: &str) -> String {
    format!(
        "{what} ({}; a module takes only the knobs gate_reads and fs_flag)",
        crate::machine::modules::registered_text()
    )
}

/// `--module NAME`: a registered module ([`crate::machine::modules::parse_module`]).
fn parse_module_arg(s: &str) -> Result<Variant, String> {
    crate::machine::modules::parse_module(s)
}

/// `--knob`'s help: the names of [`Knob::SPECS`].
fn knob_help() -> String {
    format!(
        "With --finding: a knob set on the variant, NAME=VALUE, repeatable (NAME: {})",
        Knob::names().collect::<Vec<_>>().join(", ")
    )
}

/// `biosim loop`'s description, naming [`LoopVariant::ALL`].
fn loop_about() -> String {
    format!(
        "Run the loop driver's NOWAIT-series checks (drivers/block/loop.c, seed 004) on every posted version ({}): caught/clean, with the NOWAIT counters",
        LoopVariant::names().collect::<Vec<_>>().join(", ")
    )
}

/// `biosim loop --variant`'s help: the names of [`LoopVariant::ALL`].
fn loop_variant_help() -> String {
    format!(
        "With --finding: the version ({})",
        LoopVariant::names_or(&["twin"])
    )
}

/// `biosim loop --knob`'s help: [`LoopKnob::NAMES`].
fn loop_knob_help() -> String {
    format!(
        "With --finding: a loop knob set on the version, NAME=true|false, repeatable (NAME: {})",
        LoopKnob::NAMES.join(", ")
    )
}

/// biosim: run Linux block-layer bio completion patches instead of only reading them.
///
/// biosim simulates bio, bio_list and bio_endio, IRQ/softirq/task contexts under different kernel
/// configs, CPU hotplug with rollback, the task-context completion batcher of the
/// BIO_COMPLETE_IN_TASK series, the loop driver's NOWAIT series and the RWF_DONTCACHE page-cache
/// path, over simulated or real file-backed devices, so a block-layer reviewer can check a patch's
/// claims by running them.
#[derive(Debug, Parser)]
#[command(name = "biosim", version, about, long_about)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print what preempt.h's predicates and bio_in_atomic() answer in every execution context
    /// (task, preempt-disabled, IRQs off, BH off, RCU, softirq, hardirq, NMI) under a kernel config.
    Contexts(ContextsArgs),
    /// Run a scenario file (a machine and its transitions) and print its kernel-style trace and
    /// the oracle's verdict; without FILE, the built-in default scenario and its summary. Exit status 1 if an `expect` line does not hold (or, without
    /// `expect` lines, if any invariant was violated); 2 for a bad file.
    Run(RunArgs),
    /// List the posted versions of the task-completion batcher and their knobs, then the registered
    /// modules (a binary calling `bio_sim::cli::main_with`) with their summaries.
    Variants,
    /// Run the finding gallery: every review finding as a check on every variant (caught/clean),
    /// its buggy twin, and the measured figures of findings 6 and 8.
    Findings(FindingsArgs),
    /// Print the CPU-hotplug state table as /sys/devices/system/cpu/hotplug/states does, with the
    /// states biosim's subsystems register (workqueue, timers, ...) and the batcher's dynamic states.
    States(StatesArgs),
    /// Run the loop driver's NOWAIT-series checks (drivers/block/loop.c, seed 004) on every posted
    /// version: caught/clean, with the NOWAIT counters.
    #[command(about = loop_about())]
    Loop(LoopArgs),
    /// Measure: `biosim bench JOBFILE` runs an fio job file (docs/jobs/) on the simulated loop
    /// device (or null_blk) beside raw I/O and the kernel's loop (`--compare raw,kernel-loop`,
    /// `biosim bench JOBFILE --help`); `bench loop`, `bench dontcache`, `bench null-blk` and
    /// `bench explore` are the built-in benches. Medians of interleaved rounds, ratios side by side.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Run one scenario file (same machine, same seed) on two variants of the task-completion
    /// batcher and print both verdicts and the two traces side by side from their first
    /// divergence, aligned on the scenario's transitions. Exit status 0 if the verdicts are the
    /// same, 1 if they differ, 2 for bad input.
    Diff(DiffArgs),
    /// Search for a counterexample: cases of generated transitions (completions from every
    /// context, worker runs, ticks, cpu_down/cpu_up with hotplug/fail armed at any state, hotplug
    /// steps, need_resched) on fresh machines, the oracle checked after every step. A violation is
    /// shrunk and written as a scenario file that `biosim run` reproduces. Exit status 0 if no
    /// invariant was violated, 1 if one was (the file is written), 2 for bad input.
    Explore(ExploreArgs),
    /// Compare the model with the live kernel this runs on (root), or with a recording of one.
    #[command(subcommand)]
    Calibrate(super::calibrate::CalibrateCommand),
}

/// `biosim explore --variant`'s help.
fn explore_variant_help() -> String {
    format!(
        "The variant of the task-completion batcher ({})",
        Variant::names_or(&[])
    )
}

/// `biosim explore --knob`'s help.
fn explore_knob_help() -> String {
    format!(
        "A knob set on the variant, NAME=VALUE, repeatable (NAME: {}; see `biosim variants`)",
        Knob::names().collect::<Vec<_>>().join(", ")
    )
}

/// `biosim explore --loop`'s help.
fn explore_loop_help() -> String {
    format!(
        "Give every machine a loop device (drivers/block/loop.c) of this version over a sparse in-memory file, and draw its I/O and worker runs too ({})",
        LoopVariant::names().collect::<Vec<_>>().join(", ")
    )
}

/// `--knob` of `biosim explore`: checked by the one knob parser, kept as written (the
/// counterexample's `knob` lines).
fn parse_knob_text(s: &str) -> Result<String, String> {
    Knob::parse_assignment(s).map(|_| s.to_owned())
}

/// `biosim explore`.
#[derive(Debug, Args)]
pub struct ExploreArgs {
    /// The variant.
    #[arg(long, default_value = "v7", value_parser = |s: &str| Variant::parse_name(s, &[]), help = explore_variant_help())]
    pub variant: Variant,
    /// A registered module instead of --variant.
    #[arg(long, value_name = "NAME", conflicts_with = "variant", value_parser = parse_module_arg, help = module_help("A registered module to explore instead of --variant"))]
    pub module: Option<Variant>,
    /// A knob, NAME=VALUE (repeatable).
    #[arg(long = "knob", value_name = "NAME=VALUE", value_parser = parse_knob_text, help = explore_knob_help())]
    pub knobs: Vec<String>,
    /// The kernel configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Possible CPUs of each machine (all online at boot).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub cpus: u32,
    /// Run the cases 0..N of the seed [default: 10000].
    #[arg(long, value_name = "N", value_parser = super::explore::parse_cases, conflicts_with = "time")]
    pub cases: Option<u64>,
    /// Run for this long instead (e.g. 30s, 5m, 500ms); the cases run are then not a fixed set.
    #[arg(long, value_name = "T", value_parser = super::explore::parse_duration)]
    pub time: Option<std::time::Duration>,
    /// The campaign's seed: case i is drawn from (seed, i) alone.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// At most this many transitions per case (each case draws 1..=K).
    #[arg(long, value_name = "K", default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub steps: u64,
    /// Threads.
    #[arg(long, value_name = "J", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub jobs: u64,
    /// Run only shard I of N (I counted from 1): the case indices i with i mod N = I-1. The N
    /// shards together run exactly the cases of the unsharded campaign (their counts add up, and
    /// so do their fingerprints, modulo 2^64).
    #[arg(long, value_name = "I/N", default_value = "1/1", value_parser = crate::explore::Shard::parse)]
    pub shard: crate::explore::Shard,
    /// Where to write the counterexample (refused if it exists) [default:
    /// explore-VARIANT-seedS-caseI.scn in the current directory].
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// On a violation, also write the counterexample's trace as a tracefs `trace` file (`-`:
    /// stdout, the report then on stderr; refused if FILE exists; see docs/trace.md).
    #[arg(long = "trace", value_name = "FILE")]
    pub trace_out: Option<std::path::PathBuf>,
    /// Replace an existing output file (never an input file, such as the scenario).
    #[arg(long)]
    pub force: bool,
    /// Print one JSON object on stdout instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// A loop device on every machine.
    #[arg(long = "loop", value_name = "VERSION", value_parser = |s: &str| LoopVariant::by_name(s).ok_or_else(|| format!("unknown loop version `{s}` (expected {})", LoopVariant::names_or(&[]))), help = explore_loop_help())]
    pub loop_dev: Option<LoopVariant>,
    /// With --loop: loop0's backing (a scenario's `loop VERSION BACKING` word): sparse (the
    /// default), prealloc, refusing, blockdev, or the stacked nullb (null_blk) and loop (loop1).
    #[arg(long, value_name = "BACKING", requires = "loop_dev", value_parser = |s: &str| crate::machine::loop_rig::BackingKind::parse(s).ok_or_else(|| format!("unknown backing `{s}` (expected sparse, prealloc, refusing, blockdev, nullb or loop)")))]
    pub backing: Option<crate::machine::loop_rig::BackingKind>,
    /// With --loop: also draw one-shot fault injection (`fail_io` on loop0 or its stacked lower
    /// device, `fail_alloc SITE`) and `plug`/`unplug` pairs.
    #[arg(long, requires = "loop_dev")]
    pub inject: bool,
    /// With --loop: a loop knob set on the version (a scenario's `loop_knob` line), repeatable.
    #[arg(long = "loop-knob", value_name = "NAME=VALUE", requires = "loop_dev", value_parser = parse_loop_knob, help = explore_loop_knob_help())]
    pub loop_knobs: Vec<LoopKnob>,
}

/// `biosim explore --loop-knob`'s help: [`LoopKnob::NAMES`].
fn explore_loop_knob_help() -> String {
    format!(
        "With --loop: a knob set on the loop version, NAME=true|false, repeatable; a counterexample writes it as a `loop_knob` line (NAME: {})",
        LoopKnob::NAMES.join(", ")
    )
}

/// `--loop-knob NAME=VALUE`: the one loop-knob parser (an unknown name or value is refused).
fn parse_loop_knob(s: &str) -> Result<LoopKnob, String> {
    LoopKnob::parse_assignment(s)
}

impl ExploreArgs {
    /// The variant explored before any `--knob`: `--module`'s, else `--variant`'s.
    pub fn preset(&self) -> Variant {
        self.module.unwrap_or(self.variant)
    }
}

/// `biosim diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Side A: a variant of the task-completion batcher ([`super::diff::variant_help`]).
    #[arg(value_parser = super::diff::parse_variant_spec, value_name = "A", help = super::diff::variant_help())]
    pub a: super::diff::VariantSpec,
    /// Side B, as A.
    #[arg(value_parser = super::diff::parse_variant_spec, value_name = "B")]
    pub b: super::diff::VariantSpec,
    /// The scenario file (see docs/scenarios/).
    pub file: std::path::PathBuf,
    /// Width of each side's column; longer lines are cut with `…`.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(20..=1000))]
    pub width: u16,
    /// Lines of common trace shown before the first divergence.
    #[arg(long, default_value_t = 3)]
    pub context: usize,
    /// Also write both runs' traces as tracefs `trace` files DIR/A.trace and DIR/B.trace (DIR is
    /// created if missing; refused if either file exists; see docs/trace.md).
    #[arg(long = "trace", value_name = "DIR")]
    pub trace_dir: Option<std::path::PathBuf>,
    /// Replace an existing output file (never an input file, such as the scenario).
    #[arg(long)]
    pub force: bool,
}

/// `biosim bench`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The loop driver model (base, v5-no-hint, v5) on the threaded runtime over a real O_DIRECT
    /// file, against raw pread/pwrite from as many threads.
    Loop(BenchLoopArgs),
    /// Buffered writes with and without RWF_DONTCACHE: MB/s and pages left cached (cachestat).
    Dontcache(Box<BenchDontcacheArgs>),
    /// `biosim explore`'s speed: cases/s on v7 with 1 and 2 jobs side by side, with the kernel's detectors on and off, the time to find
    /// and shrink finding 1 on v6, and the long clean campaigns on v7 and v6-review.
    Explore(BenchExploreArgs),
    /// null_blk (irqmode none, softirq, timer) through the whole simulated stack on the threaded
    /// runtime: bios/s and CPU ns per bio, direct beside BIO_COMPLETE_IN_TASK deferral.
    #[command(name = "null-blk")]
    NullBlk(BenchNullBlkArgs),
    /// `biosim bench JOBFILE [OPTIONS]`: an fio job file on the simulated loop (or null_blk)
    /// beside raw I/O and the kernel's loop device (see [`BenchJobArgs`]).
    #[command(external_subcommand)]
    Job(Vec<OsString>),
}

/// `biosim bench JOBFILE`: each job of an fio job file on the simulated devices and the
/// baselines, interleaved rounds, medians (min–max), CPU per I/O.
#[derive(Debug, Parser)]
#[command(name = "biosim bench", no_binary_name = false)]
pub struct BenchJobArgs {
    /// The fio job file (docs/jobs/*.fio).
    pub jobfile: std::path::PathBuf,
    /// The simulated device: loop (the loop model over the job's file) or null_blk.
    #[arg(long, default_value = "loop")]
    pub device: String,
    /// The loop versions, comma-separated (base, v5-no-hint, v4, v5) or all (base, v5-no-hint, v5).
    #[arg(long, default_value = "all")]
    pub variant: String,
    /// The simulated loop's backing engine: sync or uring (default: from the job's ioengine).
    #[arg(long)]
    pub engine: Option<String>,
    /// Baselines, comma-separated: raw (the job on the file itself), kernel-loop (the kernel's
    /// loop device over the file; root), or none.
    #[arg(long, default_value = "raw")]
    pub compare: String,
    /// Rounds (each runs every design once, interleaved, order rotated).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: u64,
    /// Directory for the temporary file of a job without filename= (removed afterwards).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    pub dir: std::path::PathBuf,
    /// Also write the figures as JSON to FILE (- for standard output; the table then goes to
    /// standard error). An existing file is refused.
    #[arg(long, value_name = "FILE|-")]
    pub json: Option<std::path::PathBuf>,
    /// Let a job write into an existing file biosim did not create.
    #[arg(long)]
    pub force: bool,
    /// A null_blk module parameter (--device null_blk), KEY=VAL, repeatable.
    #[arg(long, value_name = "KEY=VAL")]
    pub nullb: Vec<String>,
    /// The simulated kernel's configuration: machine (this machine's 6.18 kernel, no lockdep,
    /// no DEBUG_ATOMIC_SLEEP: what raw and kernel-loop run on) or debug (biosim's default
    /// kernel, lockdep on).
    #[arg(long, default_value = "machine")]
    pub kernel_config: String,
    /// Run nothing: check every block of each job's existing file (verify=crc32c blocks),
    /// against the state a killed run saved after its last completed flush.
    #[arg(long, conflicts_with_all = ["compare", "variant", "json"])]
    pub verify_only: bool,
}

/// `biosim bench null-blk`.
#[derive(Debug, Args)]
pub struct BenchNullBlkArgs {
    /// Simulated CPUs, each submitting.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub cpus: u32,
    /// 4 KiB reads per CPU per round.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub bios: u64,
    /// Rounds (each runs every row once, interleaved).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: u64,
    /// none, softirq, timer (or 0, 1, 2), comma-separated, or all.
    #[arg(long, default_value = "all")]
    pub irqmode: String,
    /// null_blk's completion_nsec (the timer mode's delay).
    #[arg(long, default_value_t = 10_000)]
    pub completion_nsec: u64,
    /// null_blk's hw_queue_depth.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub hw_queue_depth: u32,
    /// The batcher variant of the deferred rows.
    #[arg(long, default_value = "v7")]
    pub variant: String,
}

/// `biosim bench explore`.
#[derive(Debug, Args)]
pub struct BenchExploreArgs {
    /// Rounds (each runs jobs 1 and jobs 2 once, interleaved, and one find-and-shrink).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: u64,
    /// Cases per throughput run.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub cases: u64,
    /// Transitions per case at most.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub steps: u64,
    /// Cases of each long clean campaign (v7, v6-review; --jobs 2); 0 skips them.
    #[arg(long, default_value_t = 1_000_000)]
    pub long_cases: u64,
}

/// `biosim bench loop`.
#[derive(Debug, Args)]
pub struct BenchLoopArgs {
    /// Directory for the backing file (a real filesystem with O_DIRECT; removed afterwards).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    pub dir: std::path::PathBuf,
    /// Backing file size (K, M, G suffixes).
    #[arg(long, default_value = "64M")]
    pub size: String,
    /// 4 KiB I/Os per submitting CPU per round.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub ios: u64,
    /// Simulated CPUs submitting (and raw threads).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub cpus: u32,
    /// Rounds (each runs every design once, interleaved).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: u64,
    /// randwrite-sparse, randwrite-overwrite, randread or all.
    #[arg(long, default_value = "all")]
    pub workload: String,
    /// sync (preadv2/pwritev2 where the model issues the I/O) or uring (asynchronous io_uring,
    /// completions as interrupts on the submitting CPU).
    #[arg(long, default_value = "sync")]
    pub engine: String,
}

/// `biosim bench dontcache`.
#[derive(Debug, Args)]
pub struct BenchDontcacheArgs {
    /// Directory for the file (removed afterwards).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    pub dir: std::path::PathBuf,
    /// Bytes written per run (K, M, G suffixes).
    #[arg(long, default_value = "256M")]
    pub size: String,
    /// Rounds of the real-file bench and --calibrate (default 3). With --preset nomerge: at most
    /// this many rounds per design and path (without it, rounds until --seconds).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: Option<u64>,
    /// The live companion (root for the block device, XFS and the memory cgroup; else one-line
    /// skips): RWF_DONTCACHE on /dev/loopN, ext4 and a scratch XFS, and the seed's experiment.
    #[arg(long, conflicts_with_all = ["calibrate", "replay"])]
    pub live: bool,
    /// Measure the page cache's per-page costs and print them beside PageCosts::MEASURED.
    #[arg(long, conflicts_with = "replay")]
    pub calibrate: bool,
    /// Print a recorded live run (tests/recordings/dontcache-live-6.18.json) as --live printed it.
    #[arg(long, value_name = "FILE.json")]
    pub replay: Option<std::path::PathBuf>,
    /// With --live: also write the run to DIR/dontcache-live-<kernel>.json and the tracepoint
    /// formats to DIR/tracefs-<kernel>-filemap/.
    #[arg(long, value_name = "DIR", requires = "live")]
    pub record: Option<std::path::PathBuf>,
    /// With --live or --calibrate: the cgroup v1 memory limit (K, M, G; at least 16M; default
    /// 256M for --live, half of --size for --calibrate). With --preset: the simulated cache
    /// (memcg) limit (at least 4M; the preset's own otherwise).
    #[arg(long)]
    pub limit: Option<String>,
    /// With --live: seconds per leg of the seed experiment. With --preset: simulated seconds per
    /// run (the table's rows).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=120))]
    pub seconds: u32,
    /// The seed's experiment in the simulation instead of the real file: seed-reads (a range
    /// twice the cache limit read in 1 MiB preads) or seed-writes (1 MiB pwrites under a small
    /// memcg limit), normal vs RWF_DONTCACHE, printed like the cover letter's tables; or nomerge
    /// (rounds of regular and RWF_DONTCACHE writes side by side, synced together: what the
    /// removal of IOMAP_IOEND_DONTCACHE from the NOMERGE flags costs the regular folios).
    #[arg(long, conflicts_with_all = ["dir", "size", "live", "calibrate", "replay"])]
    pub preset: Option<String>,
    /// With --preset: the design (baseline, xfs-wq, v3, v5, v6, v6-review, v7, a registered
    /// module), a comma-separated list of them, or all.
    #[arg(long, default_value = "all", requires = "preset")]
    pub design: String,
    /// With --preset: the bdev mapping's writeback path (iomap = CONFIG_BUFFER_HEAD=n,
    /// buffer-head = CONFIG_BUFFER_HEAD=y) or both.
    #[arg(long, default_value = "both", requires = "preset")]
    pub path: String,
    /// With --preset: the runtime, deterministic (the discrete-event driver: priced costs,
    /// simulated seconds, the NVMe-like device) or threaded (one OS thread per simulated CPU,
    /// null_blk with memory backing, real copies, wall-clock seconds).
    #[arg(long, default_value = "deterministic", requires = "preset")]
    pub runtime: String,
    /// With --preset: the memory controller's hierarchy, v1 (this machine's: only the global
    /// dirty limits throttle a writer, memcg reclaim throttles on writeback) or v2 (the memcg is
    /// a dirty domain of its own, 20% / 10% of its available memory, and its reclaim does not
    /// throttle on writeback).
    #[arg(long, default_value = "v1", requires = "preset")]
    pub cgroup: String,
    /// With --preset: the simulated kernel's CONFIG_HZ, one of Kconfig's choices (100, 250,
    /// 300, 1000; default 250, this machine's): the jiffy that delayed works, timers and
    /// balance_dirty_pages()'s pauses count in.
    #[arg(long, requires = "preset")]
    pub hz: Option<u32>,
    /// With --preset: the machine is a VM guest with free page reporting (a virtio-balloon, as
    /// this one): the cache limit's memory starts reported to the host, the reporting worker
    /// hands what stays free 2 s to the host again, and each page allocated from reported memory
    /// costs reported_touch_ns (its host fault). Deterministic runtime only.
    #[arg(long, requires = "preset")]
    pub page_reporting: bool,
    /// With --preset: the simulated device, nvme (each request completes, with its interrupt,
    /// when its transfer ends) or virtio-blk (as, we infer, this machine's Firecracker VMM
    /// emulates it with its Sync engine: a request posted while the device works joins its busy
    /// period, whose requests all complete, with one interrupt, when the queue is empty; the
    /// interrupt comes in on one CPU, see --irq-cpu). Both at 3.2 GB/s (see --device-gbps), 20
    /// us to start on an idle device. Deterministic runtime only.
    #[arg(long, default_value = "nvme", requires = "preset")]
    pub device: String,
    /// With --preset: the machine to simulate, instead of --device, --page-reporting, --cgroup
    /// and --hz: fc-guest (the Firecracker guest the live companion ran on, as measured on
    /// 2026-12-05: virtio-blk with its vector on CPU1, free page reporting, cgroup v1, HZ 250,
    /// 24105 MiB of RAM, which seed-reads takes as its cache limit: the seed read a range twice
    /// its VM's RAM and names no memcg for the reads). Deterministic runtime only.
    #[arg(
        long,
        value_name = "MACHINE",
        requires = "preset",
        conflicts_with_all = ["device", "page_reporting", "cgroup", "hz"]
    )]
    pub machine: Option<String>,
    /// With --device virtio-blk: the CPU its one request queue's interrupt (virtio1-req.0) comes
    /// in on, and where BLOCK_SOFTIRQ ends every request, whichever CPU submitted it (default 1,
    /// as /proc/interrupts of this machine showed on 2026-12-05: the kernel picks it at boot;
    /// the task runs on CPU0).
    #[arg(long, value_name = "CPU", requires = "preset")]
    pub irq_cpu: Option<String>,
    /// With --preset: the simulated device's transfer bandwidth in GB/s (10^9 bytes per second,
    /// reads and writes alike; default 3.2), e.g. a disk measured with O_DIRECT writes.
    /// Deterministic runtime only.
    #[arg(long, value_name = "GBPS", requires = "preset")]
    pub device_gbps: Option<String>,
    /// With --preset: price the simulation with the per-page costs of FILE (what
    /// --calibrate --save-costs wrote: `NAME NS` lines, every cost once) instead of
    /// PageCosts::MEASURED. Deterministic runtime only.
    #[arg(long, value_name = "FILE", requires = "preset")]
    pub costs: Option<std::path::PathBuf>,
    /// With --calibrate: also write the measured medians as a costs file for --costs (never over
    /// an existing file without --force).
    #[arg(long, value_name = "FILE", requires = "calibrate")]
    pub save_costs: Option<std::path::PathBuf>,
    /// With --preset, one --design and one --path: instead of the tables, one 16 KiB
    /// pwritev2(RWF_DONTCACHE) (forced on a bdev that refuses it) until its folios are gone or
    /// left, traced in the kernel's ftrace format, written to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE", requires = "preset")]
    pub trace: Option<std::path::PathBuf>,
    /// Replace an existing output file (never an input file, such as the scenario).
    #[arg(long)]
    pub force: bool,
}

/// `biosim loop`.
#[derive(Debug, Args)]
pub struct LoopArgs {
    /// Exit non-zero when any cell differs from its expected value.
    #[arg(long)]
    pub check: bool,
    /// Run one check only (L1..L4), and print its kernel-style trace and counters.
    #[arg(long)]
    pub finding: Option<String>,
    /// With --finding: the version.
    #[arg(long, default_value = "v5", requires = "finding", help = loop_variant_help())]
    pub variant: String,
    /// With --finding: a loop knob set on the version, NAME=VALUE (repeatable).
    #[arg(long = "knob", value_name = "NAME=VALUE", requires = "finding", help = loop_knob_help())]
    pub knobs: Vec<String>,
    /// With --finding: also write its trace as a Chrome/Perfetto trace (ui.perfetto.dev).
    #[arg(long, value_name = "FILE.json", requires = "finding")]
    pub perfetto: Option<std::path::PathBuf>,
    /// With --finding: also write its trace as a tracefs `trace` file (`-`: stdout; see
    /// docs/trace.md).
    #[arg(long = "trace", value_name = "FILE", requires = "finding")]
    pub trace_out: Option<std::path::PathBuf>,
    /// Replace an existing output file (never an input file, such as the scenario).
    #[arg(long)]
    pub force: bool,
}

/// `biosim run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The scenario file (see docs/scenarios/). Without it, the built-in default scenario runs
    /// (4 CPUs, v7, a loop device over a temporary sparse file, a rolled-back offline) and prints
    /// a summary.
    pub file: Option<std::path::PathBuf>,
    /// Print only the verdict, not the trace (nor, without FILE, the summary).
    #[arg(long)]
    pub quiet: bool,
    /// Without FILE: also print the default scenario's step-by-step trace before the summary.
    #[arg(long, conflicts_with_all = ["file", "quiet"])]
    pub steps: bool,
    /// Also write the trace as a tracefs `trace` file, in the kernel's own format (`-`: on
    /// stdout instead of the step-by-step trace, the verdict then on stderr). Refused if FILE
    /// exists (see docs/trace.md).
    #[arg(long = "trace", value_name = "FILE")]
    pub trace_out: Option<std::path::PathBuf>,
    /// Without FILE: a knob set on the default scenario's v7, NAME=VALUE, repeatable (see
    /// `biosim variants`); e.g. dead_drains=false or requeue_on_online=false strands bios.
    #[arg(long = "knob", value_name = "NAME=VALUE", conflicts_with = "file")]
    pub knobs: Vec<String>,
    /// Without FILE: run the default scenario on a registered module instead of v7 (a scenario
    /// file names its module with a `module NAME` line).
    #[arg(long, value_name = "NAME", conflicts_with = "file", value_parser = parse_module_arg, help = module_help("Without FILE: the registered module to run the default scenario on, instead of v7 (a scenario file names it with a `module NAME` line)"))]
    pub module: Option<Variant>,
    /// Also write the trace as a Chrome/Perfetto trace (open it at ui.perfetto.dev).
    #[arg(long, value_name = "FILE.json")]
    pub perfetto: Option<std::path::PathBuf>,
    /// Replace an existing output file (never an input file, such as the scenario).
    #[arg(long)]
    pub force: bool,
}

/// `biosim findings`.
#[derive(Debug, Args)]
pub struct FindingsArgs {
    /// Exit non-zero when any cell differs from its expected value.
    #[arg(long)]
    pub check: bool,
    /// Run one finding only, and print its kernel-style trace and violations.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=crate::checks::findings::FINDINGS.len() as i64))]
    pub finding: Option<u32>,
    /// With --finding: the variant to run it on.
    #[arg(long, default_value = "v6", requires = "finding", help = variant_help())]
    pub variant: String,
    /// With --finding: a registered module to run it on instead of --variant.
    #[arg(long, value_name = "NAME", requires = "finding", conflicts_with = "variant", value_parser = parse_module_arg, help = module_help("With --finding: the registered module to run it on, instead of --variant"))]
    pub module: Option<Variant>,
    /// With --finding: a knob set on the variant, NAME=VALUE (repeatable; see `biosim variants`).
    #[arg(long = "knob", value_name = "NAME=VALUE", requires = "finding", help = knob_help())]
    pub knobs: Vec<String>,
    /// Skip the threaded-runtime measurement of finding 8 (seconds of real time).
    #[arg(long)]
    pub no_figures: bool,
    /// With --finding: also write its trace as a Chrome/Perfetto trace (ui.perfetto.dev).
    #[arg(long, value_name = "FILE.json", requires = "finding")]
    pub perfetto: Option<std::path::PathBuf>,
    /// With --finding: also write its trace as a tracefs `trace` file (`-`: stdout; see
    /// docs/trace.md).
    #[arg(long = "trace", value_name = "FILE", requires = "finding")]
    pub trace_out: Option<std::path::PathBuf>,
    /// Replace an existing output file (never an input file, such as the scenario).
    #[arg(long)]
    pub force: bool,
}

/// `biosim states`.
#[derive(Debug, Args)]
pub struct StatesArgs {
    /// Number of possible CPUs of the simulated machine.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub cpus: u32,
    /// The table after a registered module's init instead of v7's (the states it registers).
    #[arg(long, value_name = "NAME", value_parser = parse_module_arg, help = module_help("The table after this registered module's init instead of v7's"))]
    pub module: Option<Variant>,
}

/// Kernel configuration flags shared by the subcommands that simulate a kernel.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// Preemption model: none, voluntary, full, lazy or rt (CONFIG_PREEMPT_*).
    #[arg(long, default_value = "voluntary")]
    pub preempt: PreemptModel,
    /// Build without CONFIG_PREEMPT_COUNT (and so without CONFIG_DEBUG_ATOMIC_SLEEP).
    #[arg(long)]
    pub no_preempt_count: bool,
    /// Build without CONFIG_PREEMPT_RCU (allowed with PREEMPT_LAZY only).
    #[arg(long)]
    pub no_preempt_rcu: bool,
    /// CONFIG_HZ: 100, 250, 300 or 1000.
    #[arg(long, default_value_t = 250)]
    pub hz: u32,
    /// Build without CONFIG_PROVE_LOCKING: no lockdep (wait context, IRQ usage, dependency
    /// graph); might_sleep() still checks (CONFIG_DEBUG_ATOMIC_SLEEP).
    #[arg(long)]
    pub no_prove_locking: bool,
}

impl ConfigArgs {
    /// The kernel config these flags describe, validated against the Kconfig rules.
    pub fn config(&self) -> Result<KernelConfig, bio_core::kernel::ConfigError> {
        let mut c = if self.no_preempt_count {
            KernelConfig::without_preempt_count(self.preempt)
        } else {
            KernelConfig::for_model(self.preempt)
        };
        if self.no_preempt_rcu {
            c.preempt_rcu = false;
        }
        c.hz = self.hz;
        if self.no_prove_locking {
            c.prove_locking = false;
        }
        c.validate()?;
        Ok(c)
    }
}

/// `biosim contexts`.
#[derive(Debug, Args)]
pub struct ContextsArgs {
    /// The kernel configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Print the table for every configuration biosim accepts instead.
    #[arg(long)]
    pub all: bool,
}
