//! A reviewer's own module (issue 11) through the toolchain, in process: the `biosim` binary
//! registers no module, so this file writes two small ones against the kernel API a module uses
//! (`module::prelude`), registers them as `bio_sim::cli::main_with` does, and calls what the
//! commands call: the gallery's matrix and its rendering, `--module`/`--knob` parsing, scenario
//! files with a `module` line, `biosim variants`, `diff` sides and explore's counterexample writer.
//!
//! The modules (block/bio.c's task-completion part, as a reviewer might rewrite it):
//! - `llist-test`: v7's producer and dynamic helper on an `llist` with a deliberately simple
//!   hotplug protocol: the work is never disabled; `online` requeues a non-empty batch and `dead`
//!   drains the dead CPU's list.
//! - `llist-nodead`: mm/vmstat.c's protocol as v7 has it (`down_prep` disables the work, `online`
//!   enables and requeues it) but no dead callback, and no disabling of the CPUs offline at init:
//!   a bio completed between `down_prep` and the CPU's death is stranded (finding 9, which explore
//!   finds too), and an online of a CPU offline at boot underflows the disable count (finding 10).

use bio_core::block::complete_in_task::module::prelude::*;
use bio_core::block::complete_in_task::register_module;
use bio_sim::checks::findings::{self, FindingKind};
use bio_sim::checks::Verdict;
use bio_sim::cli::args::Cli;
use bio_sim::scenario::Scenario;
use clap::Parser as _;
use std::sync::{Arc, OnceLock};

/// One CPU's batch: an `llist_head` and its `work_struct`.
struct Batch {
    list: LlistHead,
    work: WorkStruct,
}

/// The running module: the per-CPU batches and the `bio_complete` workqueue.
struct Llist {
    batches: PerCpu<Batch>,
    wq: Workqueue,
}

impl BioCompleteOps for Llist {
    /// `__bio_complete_in_task()`: `llist_add()`, and `queue_work_on()` when the list was empty.
    fn __bio_complete_in_task(&self, bio: Box<Bio>, cx: &Cpu) {
        let batch = this_cpu_ptr(&self.batches, cx);
        if llist_add(bio, &batch.list) {
            queue_work_on(cx.id(), &self.wq, batch.work, cx);
        }
    }

    /// `bio_complete_in_task()` with v7's guard: a bio already flagged runs here; one completed in
    /// atomic context is flagged and deferred.
    fn bio_complete_in_task(&self, mut bio: Box<Bio>, cx: &Cpu) -> InTask {
        if bio.flagged(BioFlag::CompleteInTask) || !bio_in_atomic(cx) {
            return InTask::Run(bio);
        }
        bio.set_flag(BioFlag::CompleteInTask);
        __bio_complete_in_task(bio, cx);
        InTask::Deferred
    }

    fn pending(&self, cpu: CpuId) -> usize {
        per_cpu_ptr(&self.batches, cpu).list.len_unlocked()
    }
}

/// `bio_complete_work_fn()`: takes the whole list, oldest first, and ends every bio.
fn bio_complete_work_fn(m: &Llist, cpu: CpuId, cx: &Cpu) {
    let mut list = llist_reverse_order(llist_del_all(&per_cpu_ptr(&m.batches, cpu).list));
    while let Some(bio) = list.pop() {
        bi_end_io(bio, cx);
    }
}

/// `bio_complete_batch_cpu_online()`: requeues a batch that is not empty.
fn bio_complete_batch_cpu_online(m: &Llist, cx: &Cpu, cpu: CpuId) -> Result<(), Errno> {
    let batch = per_cpu_ptr(&m.batches, cpu);
    if batch.list.len_unlocked() > 0 {
        queue_work_on(cpu, &m.wq, batch.work, cx);
    }
    Ok(())
}

/// `llist-nodead`'s `bio_complete_batch_cpu_online()`: `enable_work()`, then requeues a batch
/// that is not empty (v7's online).
fn vmstat_cpu_online(m: &Llist, cx: &Cpu, cpu: CpuId) -> Result<(), Errno> {
    let batch = per_cpu_ptr(&m.batches, cpu);
    enable_work(batch.work, cx);
    if batch.list.len_unlocked() > 0 {
        queue_work_on(cpu, &m.wq, batch.work, cx);
    }
    Ok(())
}

/// `llist-nodead`'s `bio_complete_batch_cpu_down_prep()`: `disable_work_sync()`.
fn vmstat_cpu_down_prep(m: &Llist, cx: &Cpu, cpu: CpuId) -> Result<(), Errno> {
    disable_work_sync(per_cpu_ptr(&m.batches, cpu).work, cx);
    Ok(())
}

/// `bio_complete_batch_cpu_dead()`: ends the dead CPU's bios on the control CPU.
fn bio_complete_batch_cpu_dead(m: &Llist, cx: &Cpu, cpu: CpuId) -> Result<(), Errno> {
    let mut list = llist_reverse_order(llist_del_all(&per_cpu_ptr(&m.batches, cpu).list));
    while let Some(bio) = list.pop() {
        bi_end_io(bio, cx);
    }
    Ok(())
}

/// The module: `vmstat` chooses `llist-nodead`'s protocol (disable/enable, no dead callback)
/// over `llist-test`'s (never disabled, dead drains).
struct LlistModule {
    name: &'static str,
    vmstat: bool,
}

impl BioCompleteModule for LlistModule {
    fn name(&self) -> &'static str {
        self.name
    }

    fn summary(&self) -> &'static str {
        if self.vmstat {
            "test: v7 on an llist, down_prep disables, online enables and requeues, no dead callback"
        } else {
            "test: v7 on an llist, work never disabled, online requeues, dead drains"
        }
    }

    fn dynamic_helper(&self) -> bool {
        true
    }

    fn init(&self, m: &ModuleInit<'_>) -> Result<Box<dyn BioCompleteOps>, InitError> {
        let wq = m.alloc_workqueue("bio_complete", WQ_MEM_RECLAIM | WQ_PERCPU, 0)?;
        let me = Arc::new(OnceLock::<Arc<Llist>>::new());
        let batches = PerCpu::new(m.kernel(), |cpu| {
            let me = Arc::clone(&me);
            Batch {
                list: LlistHead::new(),
                work: m.init_work(cpu, "bio_complete_work_fn", move |cx| {
                    if let Some(l) = me.get() {
                        bio_complete_work_fn(l, cpu, cx);
                    }
                }),
            }
        });
        let ops = Arc::new(Llist { batches, wq });
        let _ = me.set(Arc::clone(&ops));
        let cb = |name, f: fn(&Llist, &Cpu, CpuId) -> Result<(), Errno>| {
            let ops = Arc::clone(&ops);
            CpuhpCallback::new(name, move |cx, cpu| f(&ops, cx, cpu))
        };
        if self.vmstat {
            m.cpuhp_setup_state_nocalls(
                CPUHP_AP_ONLINE_DYN,
                "block/bio:complete:online",
                Some(cb("bio_complete_batch_cpu_online", vmstat_cpu_online)),
                Some(cb("bio_complete_batch_cpu_down_prep", vmstat_cpu_down_prep)),
            )?;
        } else {
            m.cpuhp_setup_state_nocalls(
                CPUHP_AP_ONLINE_DYN,
                "block/bio:complete:online",
                Some(cb(
                    "bio_complete_batch_cpu_online",
                    bio_complete_batch_cpu_online,
                )),
                None,
            )?;
            m.cpuhp_setup_state_nocalls(
                CPUHP_BP_PREPARE_DYN,
                "block/bio:complete:dead",
                None,
                Some(cb(
                    "bio_complete_batch_cpu_dead",
                    bio_complete_batch_cpu_dead,
                )),
            )?;
        }
        Ok(Box::new(Shared(ops)))
    }
}

static LLIST: LlistModule = LlistModule {
    name: "llist-test",
    vmstat: false,
};
static NODEAD: LlistModule = LlistModule {
    name: "llist-nodead",
    vmstat: true,
};

/// Registers both modules, as `bio_sim::cli::main_with(&[&LLIST, &NODEAD])` does (registering the
/// same module again is not an error, so every test calls it).
fn setup() {
    register_module(&LLIST).unwrap();
    register_module(&NODEAD).unwrap();
}

/// `biosim ARGS...` parsed as the binary parses it.
fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("biosim").chain(args.iter().copied()))
}

/// A refused command line: exit status 2 and clap's rendered message.
fn refused(args: &[&str]) -> String {
    let e = parse(args).expect_err("refused");
    assert_eq!(e.exit_code(), 2, "{e}");
    e.to_string()
}

/// The gallery has a column per registered module after v7, with its verdicts; the footer says
/// those columns have no expectation, and the posted cells and twins are judged as without them.
#[test]
fn the_gallery_has_a_column_per_module_reported_not_judged() {
    setup();
    let rows = findings::matrix(&|| "(not measured)".to_owned()).unwrap();
    let text = findings::render(&rows);
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "finding",
            "v3",
            "v5",
            "v6",
            "v6-review",
            "v7",
            "llist-test",
            "llist-nodead",
            "twin"
        ]
    );
    assert!(
        text.ends_with("columns after v7 are registered modules: no expectation (`--check` reports their verdicts, it does not judge them)\n"),
        "{text}"
    );
    for r in &rows {
        if let FindingKind::Check { .. } = r.finding.kind {
            assert_eq!(r.cells.len(), 7, "finding {}", r.finding.id);
            let modules = r.module_cells();
            assert_eq!(modules.len(), 2, "finding {}", r.finding.id);
            // The posted versions and twins judge exactly as without modules.
            assert_eq!(r.mismatches(), Vec::new(), "finding {}", r.finding.id);
        }
    }
    let cell = |id: u32, m: &str| {
        rows.iter()
            .find(|r| r.finding.id == id)
            .unwrap()
            .module_cells()
            .into_iter()
            .find(|(n, _)| *n == m)
            .unwrap()
            .1
    };
    // Both call bi_end_io unconditionally, as every posted version does: finding 3's NULL
    // dereference. No local_lock: finding 4 is clean. Without a dead callback the bio that
    // completes between down_prep and the CPU's death is stranded (finding 9); without the init
    // disable, online's enable underflows (finding 10). llist-test never disables its work, so
    // neither bites it.
    for m in ["llist-test", "llist-nodead"] {
        assert_eq!(cell(3, m), "caught", "{m}");
        assert_eq!(cell(4, m), "clean", "{m}");
        assert_eq!(cell(11, m), "clean", "{m}");
    }
    assert_eq!(cell(9, "llist-nodead"), "caught");
    assert_eq!(cell(10, "llist-nodead"), "caught");
    assert_eq!(cell(9, "llist-test"), "clean");
    assert_eq!(cell(10, "llist-test"), "clean");
    // Finding 6's figure has the modules too.
    let fig6 = rows.iter().find(|r| r.finding.id == 6).unwrap();
    let fig6 = fig6.figure.as_deref().unwrap();
    assert!(fig6.contains("; llist-test: "), "{fig6}");
    // `findings --check` passes with the modules' columns present (it would exit 1 on a posted
    // cell or twin that differs from its expectation).
    let cli = parse(&["findings", "--check", "--no-figures"]).unwrap();
    bio_sim::cli::run(cli).unwrap();
}

/// `--module` takes a registered module only, never with `--variant`: both refused with exit 2,
/// the error naming the registered modules.
#[test]
fn module_is_resolved_through_the_registry_and_excludes_variant() {
    setup();
    for cmd in [
        &["findings", "--finding", "1", "--module"][..],
        &["explore", "--module"],
        &["run", "--module"],
    ] {
        let args: Vec<&str> = cmd.iter().copied().chain(["nope"]).collect();
        let e = refused(&args);
        assert!(
            e.contains("unknown module `nope` (registered modules: llist-test, llist-nodead)"),
            "{e}"
        );
        let args: Vec<&str> = cmd.iter().copied().chain(["v7"]).collect();
        let e = refused(&args);
        assert!(e.contains("`v7` is a posted version, not a module"), "{e}");
    }
    for cmd in [
        &[
            "findings",
            "--finding",
            "1",
            "--variant",
            "v7",
            "--module",
            "llist-test",
        ][..],
        &["explore", "--variant", "v7", "--module", "llist-test"],
    ] {
        let e = refused(cmd);
        assert!(e.contains("cannot be used with"), "{e}");
    }
    let cli = parse(&["findings", "--finding", "9", "--module", "llist-nodead"]).unwrap();
    let bio_sim::cli::args::Command::Findings(a) = cli.command else {
        panic!("not findings")
    };
    assert_eq!(a.module.map(|m| m.name), Some("llist-nodead"));
    // What `biosim findings --finding 9 --module llist-nodead` runs: the check on the module.
    let f9 = findings::finding(9).unwrap();
    let (v, r) = findings::machine_for(f9, a.module.unwrap().name, &a.knobs).unwrap();
    let run = findings::run_check(9, v, r, true).unwrap().unwrap();
    assert!(
        matches!(run.verdict, Verdict::Caught(_)),
        "{:?}",
        run.verdict
    );
    assert!(
        run.trace
            .starts_with("# biosim: variant llist-nodead (module=llist-nodead "),
        "{}",
        run.trace
    );
    let cli = parse(&["explore", "--module", "llist-test", "--cases", "3"]).unwrap();
    let bio_sim::cli::args::Command::Explore(a) = cli.command else {
        panic!("not explore")
    };
    assert_eq!(a.preset().name, "llist-test");
    assert!(a.preset().is_module());
}

/// `--knob` on a module goes through `Variant::set_knob`: the submitters' knobs are taken (the
/// module kept, with its name), any other is refused naming the module.
#[test]
fn a_module_takes_only_the_submitters_knobs() {
    setup();
    let f11 = findings::finding(11).unwrap();
    let (v, _) = findings::machine_for(f11, "llist-test", &["fs_flag=false".to_owned()]).unwrap();
    assert_eq!(v.name, "llist-test");
    assert!(v.is_module() && !v.fs_flag);
    let run = findings::run_check(11, v, Default::default(), false)
        .unwrap()
        .unwrap();
    assert!(
        matches!(run.verdict, Verdict::Caught(_)),
        "{:?}",
        run.verdict
    );
    let e = findings::machine_for(f11, "llist-test", &["requeue_on_online=false".to_owned()])
        .unwrap_err();
    assert!(
        e.contains("knob requeue_on_online configures the posted versions; module llist-test"),
        "{e}"
    );
    let e = bio_sim::cli::diff::parse_variant_spec("llist-test,dead_drains=false").unwrap_err();
    assert!(e.contains("module llist-test has its own code"), "{e}");
    let e = Scenario::parse("module llist-test\nknob delay=1\ntick\n", "t.scn").unwrap_err();
    assert_eq!((e.line, e.column), (2, 6), "{e}");
    assert!(
        e.message.contains("module llist-test has its own code"),
        "{e}"
    );
}

/// A scenario's `module NAME` runs the module (its name and knobs in the trace's machine line); it
/// and `variant` exclude each other, a second one is refused, and an unknown one names the
/// registered modules.
#[test]
fn a_scenario_names_its_module_with_a_module_line() {
    setup();
    let s = Scenario::parse(
        "module llist-test\nknob gate_reads=false\ncpus 2\ncomplete 1 hardirq flag\ncomplete 1 hardirq dynamic\nsettle\nexpect clean\n",
        "t.scn",
    )
    .unwrap();
    assert_eq!(s.config.variant.name, "llist-test");
    assert!(s.config.variant.is_module() && !s.config.variant.gate_reads);
    let run = s.run().unwrap();
    assert!(
        run.failed_expectations.is_empty(),
        "{:?}",
        run.failed_expectations
    );
    let first = run.trace.lines().next().unwrap();
    assert!(
        first.starts_with(
            "# biosim: variant llist-test (module=llist-test gate_reads=false fs_flag=true)"
        ),
        "{first}"
    );
    assert!(run.trace.contains("bio_complete_work_fn"), "{}", run.trace);
    for (text, line, what) in [
        (
            "variant v7\nmodule llist-test\ntick\n",
            2,
            "`module` and the `variant` on line 1",
        ),
        (
            "module llist-test\nvariant v7\ntick\n",
            2,
            "`variant` and the `module` on line 1",
        ),
        (
            "module llist-test\nmodule llist-nodead\ntick\n",
            2,
            "a second `module` line (the first is line 1)",
        ),
        (
            "knob fs_flag=false\nmodule llist-test\ntick\n",
            2,
            "`module` after the `knob` on line 1",
        ),
        (
            "module nope\ntick\n",
            1,
            "unknown module `nope` (registered modules: llist-test, llist-nodead)",
        ),
        (
            "module v6\ntick\n",
            1,
            "`v6` is a posted version, not a module",
        ),
    ] {
        let e = Scenario::parse(text, "t.scn").unwrap_err();
        assert_eq!(e.line, line, "{text}: {e}");
        assert!(e.message.contains(what), "{text}: {e}");
    }
}

/// `biosim variants` lists the modules after the presets, each with its summary and knobs.
#[test]
fn variants_lists_the_modules_after_the_presets() {
    setup();
    let out = bio_sim::cli::variants::variants();
    let v7 = out.find("\nv7 (default)\n").expect("v7");
    let m = out
        .find("\nllist-test (module): test: v7 on an llist, work never disabled, online requeues, dead drains\n    module                 llist-test\n    gate_reads             true\n    fs_flag                true\n")
        .unwrap_or_else(|| panic!("{out}"));
    assert!(v7 < m, "{out}");
    assert!(out.contains("\nllist-nodead (module): "), "{out}");
}

/// `diff` takes a module on either side and runs it beside a posted version.
#[test]
fn diff_takes_a_module_as_a_side() {
    setup();
    let a = bio_sim::cli::diff::parse_variant_spec("llist-test,fs_flag=false").unwrap();
    assert_eq!(a.variant.name, "llist-test");
    assert!(a.variant.is_module() && !a.variant.fs_flag);
    let dir = std::env::temp_dir().join(format!("biosim-own-module-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("clean.scn");
    std::fs::write(
        &file,
        "variant v7\ncpus 2\ncomplete 0 hardirq flag\nsettle\n",
    )
    .unwrap();
    let trace = dir.join("traces");
    let cli = parse(&[
        "diff",
        "v7",
        "llist-test",
        file.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
    ])
    .unwrap();
    // Same verdicts (both clean): `diff` returns (a difference would exit 1).
    bio_sim::cli::run(cli).unwrap();
    let b = std::fs::read_to_string(trace.join("B.trace")).unwrap();
    assert!(b.contains("bio_complete_work_fn"), "{b}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Explore on a module explores that module, and the counterexample it writes names it with a
/// `module` line, so the file replays (where the module is registered).
#[test]
fn explore_on_a_module_writes_a_module_counterexample() {
    use bio_sim::explore::campaign::{Budget, Campaign};
    use bio_sim::explore::counterexample::{self, Provenance};
    use bio_sim::explore::shrink::shrink;
    use bio_sim::explore::Shard;
    use bio_sim::machine::SimConfig;
    setup();
    let cli = parse(&["explore", "--module", "llist-nodead"]).unwrap();
    let bio_sim::cli::args::Command::Explore(a) = cli.command else {
        panic!("not explore")
    };
    let campaign = Campaign {
        config: SimConfig {
            kernel: a.config.config().unwrap(),
            nr_cpus: 2,
            online: 2,
            variant: a.preset(),
            rescuer: Default::default(),
            seed: 0,
            trace: false,
        },
        loop_dev: None,
        seed: 1,
        steps: 40,
        budget: Budget::Cases(2_000),
        jobs: 1,
        shard: Shard::ALL,
        inject: false,
    };
    let outcome = campaign.run(None).unwrap();
    let found = outcome
        .found
        .expect("a bio stranded by the missing dead callback");
    let shrunk = shrink(&campaign, &found).unwrap();
    let dir = std::env::temp_dir().join(format!("biosim-own-explore-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cx.scn");
    let w = counterexample::write(
        &campaign,
        &found.seed,
        &shrunk.case,
        &Provenance {
            command: "biosim explore --module llist-nodead",
            preset: "llist-nodead",
            knobs: &[],
            index: found.index,
            drawn: found.case.len(),
            invariant: shrunk.invariant,
        },
        &path,
    )
    .unwrap();
    let text = std::fs::read_to_string(&w.path).unwrap();
    assert!(text.contains("\nmodule llist-nodead\n"), "{text}");
    assert!(!text.contains("\nvariant "), "{text}");
    let replay = Scenario::load(&w.path).unwrap();
    assert_eq!(replay.config.variant.name, "llist-nodead");
    let run = replay.run().unwrap();
    assert!(
        run.failed_expectations.is_empty(),
        "{:?}",
        run.failed_expectations
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `biosim states --module NAME` parses to the module (the table after its init: what it
/// registered); the module's hotplug states are the ones its init asked for.
#[test]
fn states_takes_a_module() {
    setup();
    let cli = parse(&["states", "--module", "llist-nodead"]).unwrap();
    let bio_sim::cli::args::Command::States(a) = &cli.command else {
        panic!("not states")
    };
    assert_eq!(a.module.map(|m| m.name), Some("llist-nodead"));
    bio_sim::cli::run(cli).unwrap();
    let k = Kernel::new(KernelConfig::default(), 2).unwrap();
    let b = bio_complete_init(&k, Variant::module(&NODEAD), None).unwrap();
    assert_eq!(b.hotplug_states().len(), 1);
    let listing = k.hotplug().states_listing();
    assert!(listing.contains("block/bio:complete:online"), "{listing}");
    assert!(!listing.contains("block/bio:complete:dead"), "{listing}");
}

/// `biosim run --module NAME`: the default scenario on the module.
#[test]
fn the_default_run_takes_a_module() {
    setup();
    let cli = parse(&[
        "run",
        "--module",
        "llist-test",
        "--knob",
        "gate_reads=false",
    ])
    .unwrap();
    let bio_sim::cli::args::Command::Run(a) = &cli.command else {
        panic!("not run")
    };
    assert_eq!(a.module.map(|m| m.name), Some("llist-test"));
    let out =
        bio_sim::demo::run_on(Variant::module(&LLIST), &["gate_reads=false".to_owned()]).unwrap();
    let summary = out.summary();
    assert!(
        summary.contains("batcher llist-test with gate_reads=false, "),
        "{summary}"
    );
    assert!(!out.failed(), "{summary}");
    assert!(summary.contains("bio_complete_work_fn runs"), "{summary}");
    let e = bio_sim::demo::run_on(Variant::module(&LLIST), &["dead_drains=false".to_owned()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("module llist-test has its own code"), "{e}");
}
