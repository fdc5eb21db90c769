//! The posted versions of "block: add task-context bio completion infrastructure", each a named
//! preset of a few orthogonal knobs, plus the knobs that turn a version into a buggy twin.
//!
//! What each version did comes from the seed thread (v6 as posted, its review, the v5/v6
//! changelogs) and kernel-semantics.md §7 (v7 as landed). Where a version's code is not in the
//! seeds, the knob's value is marked *inferred* in its doc line and in `biosim variants`.

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
    };

    /// v6 exactly as posted in the seed: `bio_list` under `local_lock`, 1-jiffy delayed work on a
    /// `WQ_MEM_RECLAIM | WQ_PERCPU` workqueue, the `need_resched()` yield, online/down_prep/dead.
    pub const V6: Variant = Variant {
        name: "v6",
        list: ListKind::BioListLocalLock,
        work: WorkKind::Delayed { delay: 1 },
        need_resched_yield: true,
        yield_requeues: true,
        yield_keeps_batch: true,
        end_io_null_check: false,
        requeue_on_online: false,
        dynamic_helper: true,
        in_task_guard: false,
        init_disables_offline: true,
        dead_drains: true,
        gate_reads: false,
        fs_flag: true,
    };

    /// v6 with the fixes its review agreed: requeue on online, the `BIO_COMPLETE_IN_TASK` guard
    /// in `bio_complete_in_task()`, `local_irq_save()` instead of `local_lock`, no
    /// `need_resched()` yield, reads not deferred by the buffer_head submitter.
    pub const V6_REVIEW: Variant = Variant {
        name: "v6-review",
        list: ListKind::BioListIrqSave,
        work: WorkKind::Delayed { delay: 1 },
        need_resched_yield: false,
        yield_requeues: true,
        yield_keeps_batch: true,
        end_io_null_check: false,
        requeue_on_online: true,
        dynamic_helper: true,
        in_task_guard: true,
        init_disables_offline: true,
        dead_drains: true,
        gate_reads: true,
        fs_flag: true,
    };

    /// v7 as landed (`for-7.3/block`): plain work with no delay, `local_irq_save()`, requeue on
    /// online, the guard, no yield, writes only.
    pub const V7: Variant = Variant {
        name: "v7",
        list: ListKind::BioListIrqSave,
        work: WorkKind::Plain,
        need_resched_yield: false,
        yield_requeues: true,
        yield_keeps_batch: true,
        end_io_null_check: false,
        requeue_on_online: true,
        dynamic_helper: true,
        in_task_guard: true,
        init_disables_offline: true,
        dead_drains: true,
        gate_reads: true,
        fs_flag: true,
    };

    /// Every posted version, oldest first.
    pub const ALL: [Variant; 4] = [Self::V5, Self::V6, Self::V6_REVIEW, Self::V7];

    /// The default: v7, as landed.
    pub const DEFAULT: Variant = Self::V7;

    /// Looks a preset up by name.
    pub fn by_name(name: &str) -> Option<Variant> {
        Self::ALL
            .into_iter()
            .find(|v| v.name.eq_ignore_ascii_case(name))
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
            "v7" => Some((
                &["list", "work", "requeue_on_online", "in_task_guard", "gate_reads"],
                "derived: the landed code was not available, only a description of it (kernel-semantics.md §7)",
            )),
            _ => None,
        }
    }

    /// The knobs as `name=value` pairs, for `biosim variants` and trace headers.
    pub fn knobs(&self) -> Vec<(&'static str, String)> {
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

    /// Sets one knob by name (`requeue_on_online=false`), for scenario files and the CLI.
    pub fn set_knob(&mut self, knob: &str, value: &str) -> Result<(), String> {
        let b = || match value {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(format!(
                "knob {knob}: expected true or false, got `{value}`"
            )),
        };
        match knob {
            "need_resched_yield" => self.need_resched_yield = b()?,
            "yield_requeues" => self.yield_requeues = b()?,
            "yield_keeps_batch" => self.yield_keeps_batch = b()?,
            "requeue_on_online" => self.requeue_on_online = b()?,
            "dynamic_helper" => self.dynamic_helper = b()?,
            "in_task_guard" => self.in_task_guard = b()?,
            "init_disables_offline" => self.init_disables_offline = b()?,
            "dead_drains" => self.dead_drains = b()?,
            "gate_reads" => self.gate_reads = b()?,
            "end_io_null_check" => self.end_io_null_check = b()?,
            "fs_flag" => self.fs_flag = b()?,
            "list" => {
                self.list = match value {
                    "llist" => ListKind::Llist,
                    "local_lock" | "bio_list+local_lock" => ListKind::BioListLocalLock,
                    "irq_save" | "local_irq_save" | "bio_list+local_irq_save" => ListKind::BioListIrqSave,
                    _ => return Err(format!("knob list: expected llist, local_lock or irq_save, got `{value}`")),
                }
            }
            "delay" => {
                self.work = match value.parse::<u64>() {
                    Ok(0) => WorkKind::Plain,
                    Ok(d) => WorkKind::Delayed { delay: d },
                    Err(_) => return Err(format!("knob delay: expected a number of jiffies, got `{value}`")),
                }
            }
            _ => return Err(format!("unknown knob `{knob}` (known: list, delay, need_resched_yield, yield_requeues, yield_keeps_batch, requeue_on_online, dynamic_helper, in_task_guard, init_disables_offline, dead_drains, end_io_null_check, gate_reads, fs_flag)")),
        }
        Ok(())
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
}
