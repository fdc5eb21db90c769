//! The posted versions of "block: add task-context bio completion infrastructure", each a named
//! preset of a few orthogonal knobs, plus the knobs that turn a version into a buggy twin.
//!
//! What each version did comes from the seed thread (v6 as posted, its review, the v5/v6
//! changelogs) and kernel-semantics.md §7 (v7 as landed). Where a version's code is not in the
//! seeds, the knob's value is marked *inferred* in its doc line and in `biosim variants`.

use super::module::{BioCompleteModule, ModuleRef};
use crate::sync::untracked::Mutex;
use std::fmt;

/// How the per-CPU batch list is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListKind {
    /// v5: a lock-less `struct llist_head` (`llist_add()` reports whether it was empty;
    /// the worker takes it with `llist_del_all()` and reverses it).
    Llist,
    /// v6 as posted: `struct bio_list` under `local_lock_t` (`local_lock_irqsave()` in the
    /// producer, `local_lock_irq()` in the worker). On PREEMPT_RT the local lock is a sleeping
    /// per-CPU `spinlock_t`.
    BioListLocalLock,
    /// v6 after review, v7: `struct bio_list` under `local_irq_save()`.
    BioListIrqSave,
}

/// How the worker is scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkKind {
    /// `struct delayed_work`, armed with `mod_delayed_work_on(cpu, wq, dwork, delay)` when the
    /// list was empty.
    Delayed {
        /// The delay in jiffies (1 in v5/v6).
        delay: u64,
    },
    /// `struct work_struct`, queued with `queue_work_on()` when the list was empty (v7: "block:
    /// don't delay bio task completions").
    Plain,
}

/// A version of the batcher: its knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Variant {
    /// The preset's name (`v6`, `v7`, ...), or a twin's.
    pub name: &'static str,
    /// How the per-CPU list is protected.
    pub list: ListKind,
    /// How the worker is scheduled.
    pub work: WorkKind,
    /// The work function stops after a batch when `need_resched()` and requeues itself if the
    /// list is not empty (v4–v6, dropped after review: "lazy preempt ... should remove the need").
    pub need_resched_yield: bool,
    /// The `need_resched()` path requeues the work when bios remain (true in every posted
    /// version).
    pub yield_requeues: bool,
    /// The `need_resched()` check runs only after the whole local batch is completed (true in every
    /// posted version). Off, the buggy twin of finding 7 checks after each bio and abandons the
    /// rest of the local batch when it yields.
    pub yield_keeps_batch: bool,
    /// The online callback requeues the work when the list is not empty (the fix for finding 1,
    /// agreed in the v6 review).
    pub requeue_on_online: bool,
    /// `bio_complete_in_task()` exists (the dynamic helper; added in v6).
    pub dynamic_helper: bool,
    /// `bio_complete_in_task()` refuses a bio already flagged `BIO_COMPLETE_IN_TASK` and sets the
    /// flag when it defers (the fix for finding 2, agreed in the v6 review).
    pub in_task_guard: bool,
    /// `bio_complete_batch_init()` disables the work of CPUs offline at init, as mm/vmstat.c does
    /// (finding 10; off in its buggy twin).
    pub init_disables_offline: bool,
    /// The `CPUHP_BP_PREPARE_DYN` dead callback drains the dead CPU's list (finding 9; off in its
    /// buggy twin).
    pub dead_drains: bool,
    /// The worker and the dead drain check `bi_end_io` before calling it, as `bio_endio()` does
    /// (the automated review's suggestion for finding 3; no posted version has it — the reviewers
    /// made "never defer a bio without `bi_end_io`" a caller contract instead).
    pub end_io_null_check: bool,
    /// The buffer_head submitter sets `BIO_COMPLETE_IN_TASK` only for writes (`op_is_write()`,
    /// agreed in the v6 review of patch 3/4; finding 6).
    pub gate_reads: bool,
    /// Patches 2-3/4: iomap and buffer_head writeback set `BIO_COMPLETE_IN_TASK` on bios of
    /// dropbehind folios (every posted version: the changelog lists the iomap patch in v4 and v5
    /// too). Off is finding 11's regression twin: patch 2/4's removal of XFS's own
    /// `IOMAP_IOEND_DONTCACHE` workqueue completion without the flag that replaces it.
    pub fs_flag: bool,
    /// A reviewer's own module instead of the posted one ([`Variant::module`]). With a module
    /// only [`Variant::fs_flag`] and [`Variant::gate_reads`] mean anything (they configure the
    /// submitters of patches 2-3/4, not the completion code); the other knobs are the posted
    /// module's.
    pub module: Option<ModuleRef>,
}

impl Variant {
    /// v5: llist, delayed work with a 1-jiffy delay, scheduled only when the list was empty, a
    /// dedicated workqueue. No dynamic helper yet. Its hotplug code is not in the seeds: biosim
    /// gives it v6's vmstat-style protocol without the online requeue (*inferred*), and the
    /// `need_resched()` yield of v4 (*inferred*).
    pub const V5: Variant = Variant {
        name: "v5",
        list: ListKind::Llist,
        work: WorkKind::Delayed { delay: 1 },
        need_resched_yield: true,
        yield_requeues: true,
        yield_keeps_batch: true,
        end_io_null_check: false,
        requeue_on_online: false,
        dynamic_helper: false,
        in_task_guard: false,
        init_disables_offline: true,
        dead_drains: true,
        gate_reads: false,
        fs_flag: true,
        module: None,
    };

    /// v6 exactly as posted in the seed: v5 with `bio_list` under `local_lock` and the dynamic
    /// helper (1-jiffy delayed work on a `WQ_MEM_RECLAIM | WQ_PERCPU` workqueue, the
    /// `need_resched()` yield, online/down_prep/dead, as v5).
    pub const V6: Variant = Variant {
        name: "v6",
        list: ListKind::BioListLocalLock,
        dynamic_helper: true,
        ..Self::V5
    };

    /// v6 with the fixes its review agreed: requeue on online, the `BIO_COMPLETE_IN_TASK` guard
    /// in `bio_complete_in_task()`, `local_irq_save()` instead of `local_lock`, no
    /// `need_resched()` yield, reads not deferred by the buffer_head submitter.
    pub const V6_REVIEW: Variant = Variant {
        name: "v6-review",
        list: ListKind::BioListIrqSave,
        need_resched_yield: false,
        requeue_on_online: true,
        in_task_guard: true,
        gate_reads: true,
        ..Self::V6
    };

    /// v7 as landed (`for-7.3/block`): v6-review with plain work and no delay ("block: don't
    /// delay bio task completions").
    pub const V7: Variant = Variant {
        name: "v7",
        work: WorkKind::Plain,
        ..Self::V6_REVIEW
    };

    /// RFC v3 of the DONTCACHE series (mm/filemap.c): not a version of the bio series but the
    /// design before it, on the same seam as a built-in module ([`super::v3`]): a flagged bio
    /// stands for its dropbehind folio, `folio_end_dropbehind_irq()` batches it per CPU under a
    /// local lock (a full batch of 31 skips the invalidation), per-CPU work on `system_wq` ends
    /// it, `page_alloc_cpu_dead()` drains a dead CPU's batch. Submitters as v7's (dropbehind
    /// writes only).
    pub const V3: Variant = Variant {
        name: "v3",
        module: Some(ModuleRef(&super::v3::V3Module)),
        dynamic_helper: false,
        work: WorkKind::Plain,
        ..Self::V7
    };

    /// Every posted design, oldest first (RFC v3 of the DONTCACHE series, then the bio series'
    /// versions): the one list of variant names the CLI, scenario files, the finding gallery, the
    /// fuzzer and the proptest machines read.
    pub const ALL: [Variant; 5] = [Self::V3, Self::V5, Self::V6, Self::V6_REVIEW, Self::V7];

    /// The default: v7, as landed.
    pub const DEFAULT: Variant = Self::V7;

    /// A reviewer's module as a variant: its code instead of the posted module's, with v7's
    /// submitters (patches 2-3/4 as landed: flag dropbehind writes only). `dynamic_helper` says
    /// whether the module declares `bio_complete_in_task()`
    /// ([`BioCompleteModule::dynamic_helper`]) and `work` how it schedules its worker
    /// ([`BioCompleteModule::work`]), which the tools read.
    pub fn module(module: &'static dyn BioCompleteModule) -> Variant {
        Variant {
            name: module.name(),
            module: Some(ModuleRef(module)),
            dynamic_helper: module.dynamic_helper(),
            work: module.work(),
            ..Self::V7
        }
    }

    /// Every posted version, then every registered module ([`register_module`]): the columns of
    /// the gallery and the names the CLI and scenario files accept.
    pub fn all() -> Vec<Variant> {
        let mut all = Self::ALL.to_vec();
        all.extend(registered().into_iter().map(Self::module));
        all
    }

    /// Looks a preset or a registered module up by name.
    pub fn by_name(name: &str) -> Option<Variant> {
        Self::all()
            .into_iter()
            .find(|v| v.name.eq_ignore_ascii_case(name))
    }

    /// The preset and module names, oldest preset first.
    pub fn names() -> impl Iterator<Item = &'static str> {
        Self::all().into_iter().map(|v| v.name)
    }

    /// Whether this is a reviewer's (registered) module rather than a posted design (the posted
    /// module's presets, or a built-in module such as v3's).
    pub fn is_module(&self) -> bool {
        self.module.is_some() && !self.is_builtin_module()
    }

    /// Whether this is a posted design whose code is a built-in module rather than the posted
    /// module's knobs ([`Variant::V3`]): named as a variant, judged by the gallery.
    pub fn is_builtin_module(&self) -> bool {
        self.module.is_some()
            && Self::ALL
                .iter()
                .any(|p| p.module.is_some() && p.name == self.name)
    }

    /// The preset names and then `extra`, as an error message lists them: `v5, v6, v6-review or
    /// v7` (`extra = ["twin"]`: `v5, v6, v6-review, v7 or twin`).
    pub fn names_or(extra: &[&str]) -> String {
        let mut names: Vec<&str> = Self::names().collect();
        names.extend_from_slice(extra);
        or_list(names)
    }

    /// Looks a preset up by name; the error names every preset (and `extra`, the other words the
    /// caller accepts).
    pub fn parse_name(name: &str, extra: &[&str]) -> Result<Variant, String> {
        Self::by_name(name).ok_or_else(|| {
            format!(
                "unknown variant `{name}` (expected {})",
                Self::names_or(extra)
            )
        })
    }

    /// The knobs whose value is not read from the posted code but inferred (v5, whose hotplug and
    /// work-function code is not in the seeds) or derived from a secondary description (v7, as
    /// kernel-semantics.md §7 reports the landed commits), with why.
    pub fn provenance(&self) -> Option<(&'static [&'static str], &'static str)> {
        match self.name {
            "v5" => Some((
                &["need_resched_yield", "requeue_on_online", "init_disables_offline", "dead_drains", "gate_reads"],
                "inferred: v5's hotplug and work-function code is not in the seeds (v6's changelog says v6 adopted the mm/vmstat.c protocol)",
            )),
            "v3" => Some((
                &["module"],
                "derived: the seeds hold only RFC v3's cover letter; its code is re-expressed from a summary of the posted patch (lkml 2026-02-27)",
            )),
            "v7" => Some((
                &["list", "work", "requeue_on_online", "in_task_guard", "gate_reads"],
                "derived: the landed code was not available, only a description of it (kernel-semantics.md §7)",
            )),
            _ => None,
        }
    }

    /// The knobs as `name=value` pairs, for `biosim variants` and trace headers. A module has
    /// its name and the submitters' two knobs.
    pub fn knobs(&self) -> Vec<(&'static str, String)> {
        if let Some(m) = self.module {
            return vec![
                ("module", m.0.name().to_owned()),
                ("gate_reads", self.gate_reads.to_string()),
                ("fs_flag", self.fs_flag.to_string()),
            ];
        }
        vec![
            (
                "list",
                match self.list {
                    ListKind::Llist => "llist".to_owned(),
                    ListKind::BioListLocalLock => "bio_list+local_lock".to_owned(),
                    ListKind::BioListIrqSave => "bio_list+local_irq_save".to_owned(),
                },
            ),
            (
                "work",
                match self.work {
                    WorkKind::Delayed { delay } => format!("delayed_work({delay} jiffy)"),
                    WorkKind::Plain => "work_struct(no delay)".to_owned(),
                },
            ),
            ("need_resched_yield", self.need_resched_yield.to_string()),
            ("requeue_on_online", self.requeue_on_online.to_string()),
            ("dynamic_helper", self.dynamic_helper.to_string()),
            ("in_task_guard", self.in_task_guard.to_string()),
            (
                "init_disables_offline",
                self.init_disables_offline.to_string(),
            ),
            ("dead_drains", self.dead_drains.to_string()),
            ("yield_requeues", self.yield_requeues.to_string()),
            ("yield_keeps_batch", self.yield_keeps_batch.to_string()),
            ("end_io_null_check", self.end_io_null_check.to_string()),
            ("gate_reads", self.gate_reads.to_string()),
            ("fs_flag", self.fs_flag.to_string()),
        ]
    }

    /// This variant with `knob` applied (the name is kept).
    pub const fn with(self, knob: Knob) -> Variant {
        knob.apply(self)
    }

    /// Sets one knob by name (`requeue_on_online=false`), through [`Knob::parse`]. A module
    /// takes only the submitters' knobs (`gate_reads`, `fs_flag`): the others configure code it
    /// does not run.
    pub fn set_knob(&mut self, knob: &str, value: &str) -> Result<(), String> {
        let k = Knob::parse(knob, value)?;
        if let Some(m) = self.module {
            if !matches!(k, Knob::GateReads(_) | Knob::FsFlag(_)) {
                return Err(format!(
                    "knob {knob} configures the posted versions; module {} has its own code (it takes only gate_reads and fs_flag)",
                    m.0.name()
                ));
            }
        }
        *self = k.apply(*self);
        Ok(())
    }
}

/// The registered modules (see [`register_module`]).
static MODULES: Mutex<Vec<&'static dyn BioCompleteModule>> = Mutex::new(Vec::new());

fn registered() -> Vec<&'static dyn BioCompleteModule> {
    MODULES.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Registers a reviewer's module with this process, so that every name lookup (the CLI's
/// `--variant`/`--module`, a scenario's `module` line) and every list of versions (the gallery's
/// columns) includes it. A name already taken (by a preset or another module) is refused; the same
/// module registered twice is not an error.
pub fn register_module(module: &'static dyn BioCompleteModule) -> Result<(), String> {
    let name = module.name();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(format!(
            "module name `{name}`: expected letters, digits, `-`, `_` or `.`"
        ));
    }
    let mut modules = MODULES.lock().unwrap_or_else(|e| e.into_inner());
    if modules
        .iter()
        .any(|m| std::ptr::addr_eq(*m as *const dyn BioCompleteModule, module))
    {
        return Ok(());
    }
    // The presets, and the words the CLI gives a meaning of its own: `twin` (a finding's twin),
    // `custom` (a preset with knobs changed), `all`.
    let taken = Variant::ALL
        .iter()
        .map(|v| v.name)
        .chain(["twin", "custom", "all"])
        .chain(modules.iter().map(|m| m.name()))
        .any(|n| n.eq_ignore_ascii_case(name));
    if taken {
        return Err(format!("module name `{name}` is already taken"));
    }
    modules.push(module);
    Ok(())
}

/// `a, b, c or d` (`a` for one item, empty for none).
fn or_list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<&str> = items.into_iter().collect();
    match items.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// The values a knob takes, as its parser accepts them and its errors name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnobValues {
    /// `true`/`1`/`yes`/`on` or `false`/`0`/`no`/`off`.
    Bool,
    /// One of these words (the list's first spelling of each [`ListKind`]).
    List,
    /// A number of jiffies (0: plain work).
    Jiffies,
}

impl KnobValues {
    /// What an error says is expected.
    pub fn expected(self) -> &'static str {
        match self {
            KnobValues::Bool => "true or false",
            KnobValues::List => "llist, local_lock or irq_save",
            KnobValues::Jiffies => "a number of jiffies",
        }
    }

    /// Some values the parser accepts (every one, where there are few), for generators.
    pub fn examples(self) -> &'static [&'static str] {
        match self {
            KnobValues::Bool => &["true", "false"],
            KnobValues::List => &["llist", "local_lock", "irq_save"],
            KnobValues::Jiffies => &["0", "1", "2"],
        }
    }
}

/// One knob set to one value: the typed form of a scenario's `knob NAME=VALUE` line, of the CLI's
/// `--knob`, and of a buggy twin (a posted version with one knob changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Knob {
    /// [`Variant::list`].
    List(ListKind),
    /// [`Variant::work`]: `delay=0` is plain work, `delay=N` delayed work of N jiffies.
    Work(WorkKind),
    /// [`Variant::need_resched_yield`].
    NeedReschedYield(bool),
    /// [`Variant::yield_requeues`].
    YieldRequeues(bool),
    /// [`Variant::yield_keeps_batch`].
    YieldKeepsBatch(bool),
    /// [`Variant::requeue_on_online`].
    RequeueOnOnline(bool),
    /// [`Variant::dynamic_helper`].
    DynamicHelper(bool),
    /// [`Variant::in_task_guard`].
    InTaskGuard(bool),
    /// [`Variant::init_disables_offline`].
    InitDisablesOffline(bool),
    /// [`Variant::dead_drains`].
    DeadDrains(bool),
    /// [`Variant::end_io_null_check`].
    EndIoNullCheck(bool),
    /// [`Variant::gate_reads`].
    GateReads(bool),
    /// [`Variant::fs_flag`].
    FsFlag(bool),
}

impl Knob {
    /// Every knob's name and the values it takes, in the order errors list them.
    pub const SPECS: [(&'static str, KnobValues); 13] = [
        ("list", KnobValues::List),
        ("delay", KnobValues::Jiffies),
        ("need_resched_yield", KnobValues::Bool),
        ("yield_requeues", KnobValues::Bool),
        ("yield_keeps_batch", KnobValues::Bool),
        ("requeue_on_online", KnobValues::Bool),
        ("dynamic_helper", KnobValues::Bool),
        ("in_task_guard", KnobValues::Bool),
        ("init_disables_offline", KnobValues::Bool),
        ("dead_drains", KnobValues::Bool),
        ("end_io_null_check", KnobValues::Bool),
        ("gate_reads", KnobValues::Bool),
        ("fs_flag", KnobValues::Bool),
    ];

    /// The knobs' names.
    pub fn names() -> impl Iterator<Item = &'static str> {
        Self::SPECS.into_iter().map(|(n, _)| n)
    }

    /// The one knob parser: `name` and `value` as a scenario's `knob` line or the CLI's `--knob`
    /// give them. An unknown name is refused with the known ones, a bad value with the valid ones.
    pub fn parse(name: &str, value: &str) -> Result<Knob, String> {
        let Some(&(name, values)) = Self::SPECS.iter().find(|(n, _)| *n == name) else {
            return Err(format!(
                "unknown knob `{name}` (known: {})",
                Self::names().collect::<Vec<_>>().join(", ")
            ));
        };
        let bad = || format!("knob {name}: expected {}, got `{value}`", values.expected());
        let b = || match value {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(bad()),
        };
        Ok(match name {
            "list" => Knob::List(match value {
                "llist" => ListKind::Llist,
                "local_lock" | "bio_list+local_lock" => ListKind::BioListLocalLock,
                "irq_save" | "local_irq_save" | "bio_list+local_irq_save" => {
                    ListKind::BioListIrqSave
                }
                _ => return Err(bad()),
            }),
            "delay" => Knob::Work(match value.parse::<u64>() {
                Ok(0) => WorkKind::Plain,
                Ok(delay) => WorkKind::Delayed { delay },
                Err(_) => return Err(bad()),
            }),
            "need_resched_yield" => Knob::NeedReschedYield(b()?),
            "yield_requeues" => Knob::YieldRequeues(b()?),
            "yield_keeps_batch" => Knob::YieldKeepsBatch(b()?),
            "requeue_on_online" => Knob::RequeueOnOnline(b()?),
            "dynamic_helper" => Knob::DynamicHelper(b()?),
            "in_task_guard" => Knob::InTaskGuard(b()?),
            "init_disables_offline" => Knob::InitDisablesOffline(b()?),
            "dead_drains" => Knob::DeadDrains(b()?),
            "end_io_null_check" => Knob::EndIoNullCheck(b()?),
            "gate_reads" => Knob::GateReads(b()?),
            "fs_flag" => Knob::FsFlag(b()?),
            _ => unreachable!("every name of Knob::SPECS is parsed"),
        })
    }

    /// Parses `NAME=VALUE`.
    pub fn parse_assignment(kv: &str) -> Result<Knob, String> {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("knob `{kv}`: expected NAME=VALUE"))?;
        Self::parse(k, v)
    }

    /// `v` with this knob set.
    pub const fn apply(self, v: Variant) -> Variant {
        match self {
            Knob::List(list) => Variant { list, ..v },
            Knob::Work(work) => Variant { work, ..v },
            Knob::NeedReschedYield(need_resched_yield) => Variant {
                need_resched_yield,
                ..v
            },
            Knob::YieldRequeues(yield_requeues) => Variant {
                yield_requeues,
                ..v
            },
            Knob::YieldKeepsBatch(yield_keeps_batch) => Variant {
                yield_keeps_batch,
                ..v
            },
            Knob::RequeueOnOnline(requeue_on_online) => Variant {
                requeue_on_online,
                ..v
            },
            Knob::DynamicHelper(dynamic_helper) => Variant {
                dynamic_helper,
                ..v
            },
            Knob::InTaskGuard(in_task_guard) => Variant { in_task_guard, ..v },
            Knob::InitDisablesOffline(init_disables_offline) => Variant {
                init_disables_offline,
                ..v
            },
            Knob::DeadDrains(dead_drains) => Variant { dead_drains, ..v },
            Knob::EndIoNullCheck(end_io_null_check) => Variant {
                end_io_null_check,
                ..v
            },
            Knob::GateReads(gate_reads) => Variant { gate_reads, ..v },
            Knob::FsFlag(fs_flag) => Variant { fs_flag, ..v },
        }
    }
}

/// `name=value`, in the spelling [`Knob::parse`] reads back.
impl fmt::Display for Knob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, b) = match *self {
            Knob::List(l) => {
                return write!(
                    f,
                    "list={}",
                    match l {
                        ListKind::Llist => "llist",
                        ListKind::BioListLocalLock => "local_lock",
                        ListKind::BioListIrqSave => "irq_save",
                    }
                )
            }
            Knob::Work(WorkKind::Plain) => return f.write_str("delay=0"),
            Knob::Work(WorkKind::Delayed { delay }) => return write!(f, "delay={delay}"),
            Knob::NeedReschedYield(b) => ("need_resched_yield", b),
            Knob::YieldRequeues(b) => ("yield_requeues", b),
            Knob::YieldKeepsBatch(b) => ("yield_keeps_batch", b),
            Knob::RequeueOnOnline(b) => ("requeue_on_online", b),
            Knob::DynamicHelper(b) => ("dynamic_helper", b),
            Knob::InTaskGuard(b) => ("in_task_guard", b),
            Knob::InitDisablesOffline(b) => ("init_disables_offline", b),
            Knob::DeadDrains(b) => ("dead_drains", b),
            Knob::EndIoNullCheck(b) => ("end_io_null_check", b),
            Knob::GateReads(b) => ("gate_reads", b),
            Knob::FsFlag(b) => ("fs_flag", b),
        };
        write!(f, "{name}={b}")
    }
}

impl Default for Variant {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_differ_where_the_posts_differ() {
        assert_eq!(Variant::by_name("v6-review"), Some(Variant::V6_REVIEW));
        assert_eq!(Variant::default(), Variant::V7);
        let by_name = |n| Variant::by_name(n).unwrap();
        assert!(!by_name("v6").requeue_on_online && by_name("v6-review").requeue_on_online);
        assert!(!by_name("v6").in_task_guard && by_name("v7").in_task_guard);
        assert_eq!(Variant::V6.list, ListKind::BioListLocalLock);
        assert_eq!(Variant::V7.work, WorkKind::Plain);
        let mut v = Variant::V7;
        v.set_knob("requeue_on_online", "false").unwrap();
        assert!(!v.requeue_on_online);
        assert!(v
            .set_knob("bogus", "1")
            .unwrap_err()
            .contains("unknown knob"));
        assert!(v.set_knob("delay", "x").is_err());
        v.set_knob("delay", "3").unwrap();
        assert_eq!(v.work, WorkKind::Delayed { delay: 3 });
    }

    /// Each preset's knob listing, as it was when the presets were written out field by field:
    /// writing them as differences from the version they revise changed nothing.
    #[test]
    fn each_presets_knob_listing_is_pinned() {
        let listing = |v: Variant| {
            v.knobs()
                .into_iter()
                .map(|(k, val)| format!("{k}={val}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let pinned = [
            ("v5", "list=llist work=delayed_work(1 jiffy) need_resched_yield=true requeue_on_online=false dynamic_helper=false in_task_guard=false init_disables_offline=true dead_drains=true yield_requeues=true yield_keeps_batch=true end_io_null_check=false gate_reads=false fs_flag=true"),
            ("v6", "list=bio_list+local_lock work=delayed_work(1 jiffy) need_resched_yield=true requeue_on_online=false dynamic_helper=true in_task_guard=false init_disables_offline=true dead_drains=true yield_requeues=true yield_keeps_batch=true end_io_null_check=false gate_reads=false fs_flag=true"),
            ("v6-review", "list=bio_list+local_irq_save work=delayed_work(1 jiffy) need_resched_yield=false requeue_on_online=true dynamic_helper=true in_task_guard=true init_disables_offline=true dead_drains=true yield_requeues=true yield_keeps_batch=true end_io_null_check=false gate_reads=true fs_flag=true"),
            ("v7", "list=bio_list+local_irq_save work=work_struct(no delay) need_resched_yield=false requeue_on_online=true dynamic_helper=true in_task_guard=true init_disables_offline=true dead_drains=true yield_requeues=true yield_keeps_batch=true end_io_null_check=false gate_reads=true fs_flag=true"),
        ];
        for (name, knobs) in pinned {
            let v = Variant::by_name(name).unwrap_or_else(|| panic!("{name} is gone"));
            assert_eq!(v.name, name);
            assert_eq!(listing(v), knobs, "{name}");
        }
    }

    #[test]
    fn the_knob_parser_names_the_known_knobs_and_values() {
        let e = Knob::parse("bogus", "1").unwrap_err();
        for n in Knob::names() {
            assert!(e.contains(n), "{e} lacks {n}");
        }
        for (name, values) in Knob::SPECS {
            for x in values.examples() {
                assert!(Knob::parse(name, x).is_ok(), "{name}={x}");
            }
            let e = Knob::parse(name, "maybe").unwrap_err();
            assert!(e.contains(values.expected()), "{e}");
            assert!(e.contains("`maybe`"), "{e}");
        }
        assert!(Knob::parse_assignment("list")
            .unwrap_err()
            .contains("expected NAME=VALUE"));
        assert_eq!(
            Variant::parse_name("v8", &["twin"]).unwrap_err(),
            "unknown variant `v8` (expected v3, v5, v6, v6-review, v7 or twin)"
        );
    }

    #[test]
    fn a_knob_displays_as_what_parses_back_to_it() {
        let all = [
            Knob::List(ListKind::Llist),
            Knob::List(ListKind::BioListLocalLock),
            Knob::List(ListKind::BioListIrqSave),
            Knob::Work(WorkKind::Plain),
            Knob::Work(WorkKind::Delayed { delay: 3 }),
            Knob::NeedReschedYield(true),
            Knob::YieldRequeues(false),
            Knob::YieldKeepsBatch(false),
            Knob::RequeueOnOnline(false),
            Knob::DynamicHelper(true),
            Knob::InTaskGuard(false),
            Knob::InitDisablesOffline(false),
            Knob::DeadDrains(false),
            Knob::EndIoNullCheck(true),
            Knob::GateReads(false),
            Knob::FsFlag(false),
        ];
        for k in all {
            assert_eq!(Knob::parse_assignment(&k.to_string()), Ok(k), "{k}");
        }
        assert!(
            !Variant::V7
                .with(Knob::RequeueOnOnline(false))
                .requeue_on_online
        );
    }
}
