//! Freeze protection: `fs/super.c` (`freeze_super()`, `thaw_super()`, `sb_wait_write()`,
//! `lockdep_sb_freeze_release()`/`_acquire()`) and `include/linux/fs.h` (`sb_start_write()`,
//! `sb_start_write_trylock()`, `sb_end_write()`, `kiocb_start_write()`, `kiocb_end_write()`,
//! `__sb_writers_release()`/`__sb_writers_acquired()`), with the write path of `fs/aio.c` that
//! uses the kiocb pair (`aio_write()` → `aio_complete_rw()`).
//!
//! `sb->s_writers` is three per-CPU rw semaphores, one per level (`SB_FREEZE_WRITE`,
//! `SB_FREEZE_PAGEFAULT`, `SB_FREEZE_FS`): writers take a level for read, `freeze_super()`
//! takes them for write one after the other, each waiting for that level's readers to drain,
//! and keeps them until `thaw_super()`. Lockdep sees each level as a `percpu_rw_semaphore`
//! class named as lockdep prints it for one filesystem type (`sb_writers#3`, `sb_pagefaults#3`,
//! `sb_internal#3`: the kernel's `sb_writers_name[]` plus the `#N` lockdep adds to tell the
//! file system types' keys apart).
//!
//! A kiocb write may complete in another context (an IRQ, a worker), so `kiocb_start_write()`
//! tells lockdep the level is released right after taking it (`__sb_writers_release()`), and
//! `kiocb_end_write()` re-acquires it for lockdep before `sb_end_write()`. The count itself stays
//! up from start to end: a write path that forgets `kiocb_end_write()` leaves it up forever, and
//! `freeze_super()` then waits forever (the hung-task detector's report), and the superblock's
//! accounting check [`SuperBlock::check_writers`] reports the leaked writer (biosim's check; the
//! kernel has none, the freeze just hangs).

use crate::errno::Errno;
use crate::kernel::{Cpu, HeldLock, LockClass, LockRead, Report, ReportKind};
use crate::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::fmt;

/// `SB_UNFROZEN`: not frozen.
pub const SB_UNFROZEN: u8 = 0;
/// `SB_FREEZE_WRITE`: writes, dir operations and ioctls blocked.
pub const SB_FREEZE_WRITE: u8 = 1;
/// `SB_FREEZE_PAGEFAULT`: page faults stopped as well.
pub const SB_FREEZE_PAGEFAULT: u8 = 2;
/// `SB_FREEZE_FS`: the filesystem's internal writers (transactions) stopped too.
pub const SB_FREEZE_FS: u8 = 3;
/// `SB_FREEZE_COMPLETE`: `->freeze_fs` done, the filesystem is frozen.
pub const SB_FREEZE_COMPLETE: u8 = 4;
/// `SB_FREEZE_LEVELS`: the number of `s_writers` semaphores.
pub const SB_FREEZE_LEVELS: usize = 3;

/// The lockdep class names of the three levels of one filesystem type, as lockdep prints them.
pub const SB_WRITERS_CLASSES_3: [&str; SB_FREEZE_LEVELS] =
    ["sb_writers#3", "sb_pagefaults#3", "sb_internal#3"];

/// The kernel name of a freeze level.
pub fn sb_freeze_level_name(level: u8) -> &'static str {
    match level {
        SB_UNFROZEN => "SB_UNFROZEN",
        SB_FREEZE_WRITE => "SB_FREEZE_WRITE",
        SB_FREEZE_PAGEFAULT => "SB_FREEZE_PAGEFAULT",
        SB_FREEZE_FS => "SB_FREEZE_FS",
        SB_FREEZE_COMPLETE => "SB_FREEZE_COMPLETE",
        _ => "SB_FREEZE_?",
    }
}

/// One level of `sb->s_writers` (`struct percpu_rw_semaphore`): the readers inside, how many
/// of them are kiocb writes (for the accounting check's wording), and the writer (the freezer).
#[derive(Debug, Default)]
struct SbWritersLevel {
    readers: AtomicU32,
    kiocb_readers: AtomicU32,
    writer: AtomicBool,
}

/// Freeze protection a task holds for lockdep (an entry of `TaskState::sb_writers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SbWritersHeld {
    /// The superblock's `s_id`.
    pub s_id: &'static str,
    /// The level (`SB_FREEZE_WRITE`..`SB_FREEZE_FS`).
    pub level: u8,
    /// The lockdep acquisition.
    pub held: HeldLock,
}

/// Why `freeze_super()`/`thaw_super()` failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FreezeError {
    /// The kernel's `-EBUSY` (already frozen or freezing) or `-EINVAL` (thaw of an unfrozen sb).
    #[error("{0}")]
    Errno(Errno),
    /// `sb_wait_write()` could never finish: the level's writers never drain. The kernel would
    /// hang here for good; the model leaves the sb at that level (new writers still block) and
    /// returns.
    #[error("freeze_super: {level_name}: {readers} writer(s) never drain", level_name = sb_freeze_level_name(*level))]
    NeverDrained {
        /// The level that does not drain.
        level: u8,
        /// Its writers still inside.
        readers: u32,
    },
}

/// `struct super_block`: its `s_id`, the `s_writers` levels and the freeze state.
#[derive(Debug)]
pub struct SuperBlock {
    s_id: &'static str,
    classes: [&'static str; SB_FREEZE_LEVELS],
    levels: [SbWritersLevel; SB_FREEZE_LEVELS],
    /// `sb->s_writers.frozen`.
    frozen: AtomicU8,
}

/// A `struct kiocb` with `IOCB_WRITE` whose freeze protection was taken by
/// [`SuperBlock::kiocb_start_write`]: hand it to [`SuperBlock::kiocb_end_write`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a started kiocb write must end with kiocb_end_write()"]
pub struct KiocbWrite {
    s_id: &'static str,
}

impl SuperBlock {
    /// A superblock `s_id` (e.g. `loop0`) of a filesystem type whose lockdep classes are
    /// `classes` ([`SB_WRITERS_CLASSES_3`]), unfrozen.
    pub fn new(s_id: &'static str, classes: [&'static str; SB_FREEZE_LEVELS]) -> Self {
        Self {
            s_id,
            classes,
            levels: Default::default(),
            frozen: AtomicU8::new(SB_UNFROZEN),
        }
    }

    /// `sb->s_id`.
    pub fn s_id(&self) -> &'static str {
        self.s_id
    }

    /// `sb->s_writers.frozen`.
    pub fn frozen(&self) -> u8 {
        self.frozen.load(Ordering::Acquire)
    }

    /// The writers inside `level` (1-based).
    pub fn writers(&self, level: u8) -> u32 {
        self.level(level).readers.load(Ordering::Acquire)
    }

    fn level(&self, level: u8) -> &SbWritersLevel {
        &self.levels[usize::from(level.clamp(1, 3)) - 1]
    }

    fn class(&self, level: u8) -> &'static str {
        self.classes[usize::from(level.clamp(1, 3)) - 1]
    }

    /// `percpu_down_read()`'s lockdep acquisition (a trylock for `percpu_down_read_trylock()`
    /// and `percpu_rwsem_acquire()`), recorded in the task's freeze protection.
    fn lockdep_read_acquire(&self, level: u8, cx: &Cpu, trylock: bool) {
        let (held, _) = if trylock {
            cx.lockdep_acquire_try(LockClass::PercpuRwsem, self.class(level), LockRead::Read)
        } else {
            cx.lockdep_acquire_mode(LockClass::PercpuRwsem, self.class(level), LockRead::Read)
        };
        cx.task_state().sb_writers.borrow_mut().push(SbWritersHeld {
            s_id: self.s_id,
            level,
            held,
        });
    }

    /// `percpu_rwsem_release()` of the task's innermost hold of `level`; `false` if it holds
    /// none.
    fn lockdep_read_release(&self, level: u8, cx: &Cpu) -> bool {
        let entry = {
            let mut held = cx.task_state().sb_writers.borrow_mut();
            let pos = held
                .iter()
                .rposition(|h| h.s_id == self.s_id && h.level == level);
            pos.map(|i| held.remove(i))
        };
        match entry {
            Some(e) => {
                cx.lock_release(e.held);
                true
            }
            None => false,
        }
    }

    /// `__sb_start_write(sb, level)` → `percpu_down_read()`: lockdep's read acquisition, then,
    /// while the freezer holds the level, sleep until it thaws. `false` only if that sleep can
    /// never end (the hung-task detector's case); the caller must not write then.
    pub fn __sb_start_write(&self, level: u8, cx: &Cpu) -> bool {
        let _ = cx.might_sleep_at("include/linux/fs.h:__sb_start_write");
        self.lockdep_read_acquire(level, cx, false);
        let lvl = self.level(level);
        if lvl.writer.load(Ordering::Acquire)
            && !cx.wait_until(self.class(level), &|| !lvl.writer.load(Ordering::Acquire))
        {
            self.lockdep_read_release(level, cx);
            return false;
        }
        lvl.readers.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// `__sb_end_write(sb, level)` → `percpu_up_read()`. Ending a level nobody started is a
    /// WARN (the count would underflow).
    pub fn __sb_end_write(&self, level: u8, cx: &Cpu) {
        let lvl = self.level(level);
        if lvl
            .readers
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_err()
        {
            cx.warn(&format!(
                "include/linux/fs.h: __sb_end_write(): {} {} has no writer to end",
                self.s_id,
                self.class(level)
            ));
            return;
        }
        if !self.lockdep_read_release(level, cx) {
            cx.warn(&format!(
                "include/linux/fs.h: __sb_end_write(): {} not held by this task for lockdep",
                self.class(level)
            ));
        }
    }

    /// `sb_start_write()`: freeze protection for a write (`SB_FREEZE_WRITE`).
    pub fn sb_start_write(&self, cx: &Cpu) -> bool {
        self.__sb_start_write(SB_FREEZE_WRITE, cx)
    }

    /// `sb_start_write_trylock()`: takes `SB_FREEZE_WRITE` only if no freezer holds it.
    pub fn sb_start_write_trylock(&self, cx: &Cpu) -> bool {
        let lvl = self.level(SB_FREEZE_WRITE);
        if lvl.writer.load(Ordering::Acquire) {
            return false;
        }
        self.lockdep_read_acquire(SB_FREEZE_WRITE, cx, true);
        lvl.readers.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// `sb_end_write()`.
    pub fn sb_end_write(&self, cx: &Cpu) {
        self.__sb_end_write(SB_FREEZE_WRITE, cx);
    }

    /// `kiocb_start_write()`: `sb_start_write()`, then `__sb_writers_release()` (lockdep forgets
    /// the level; the write completes elsewhere). `None` if the freeze never thaws.
    pub fn kiocb_start_write(&self, cx: &Cpu) -> Option<KiocbWrite> {
        if !self.sb_start_write(cx) {
            return None;
        }
        self.lockdep_read_release(SB_FREEZE_WRITE, cx);
        self.level(SB_FREEZE_WRITE)
            .kiocb_readers
            .fetch_add(1, Ordering::AcqRel);
        Some(KiocbWrite { s_id: self.s_id })
    }

    /// `kiocb_end_write()`: `__sb_writers_acquired()` (lockdep takes the level again, in the
    /// completing context, a lockdep trylock), then `sb_end_write()`. A kiocb of another
    /// superblock is a WARN. In an atomic context (an interrupt's `ki_complete()`) the trylock
    /// and its release bracket the count, outside the interrupted task's freeze protection.
    pub fn kiocb_end_write(&self, kiocb: KiocbWrite, cx: &Cpu) {
        if kiocb.s_id != self.s_id {
            cx.warn(&format!(
                "include/linux/fs.h: kiocb_end_write() of a {} kiocb on {}",
                kiocb.s_id, self.s_id
            ));
            return;
        }
        let _ = self.level(SB_FREEZE_WRITE).kiocb_readers.fetch_update(
            Ordering::AcqRel,
            Ordering::Acquire,
            |n| n.checked_sub(1),
        );
        if !cx.may_sleep() {
            // A completion interrupt (a bdev's bio end_io calling ki_complete()):
            // __sb_writers_acquired() is percpu_rwsem_acquire(), a lockdep trylock, which
            // check_wait_context(), the USED_IN marks and validate_chain() skip.
            let (held, _) = cx.lockdep_acquire_try(
                LockClass::PercpuRwsem,
                self.class(SB_FREEZE_WRITE),
                LockRead::Read,
            );
            let lvl = self.level(SB_FREEZE_WRITE);
            if lvl
                .readers
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_err()
            {
                cx.warn(&format!(
                    "include/linux/fs.h: kiocb_end_write(): {} {} has no writer to end",
                    self.s_id,
                    self.class(SB_FREEZE_WRITE)
                ));
            }
            cx.lock_release(held);
            return;
        }
        self.lockdep_read_acquire(SB_FREEZE_WRITE, cx, true);
        self.sb_end_write(cx);
    }

    /// `sb_wait_write(sb, level)` → `percpu_down_write()`: lockdep's write acquisition, the
    /// writer flag (new readers now block), then sleep until the level's readers drain.
    fn sb_wait_write(&self, level: u8, cx: &Cpu) -> (HeldLock, bool) {
        let (held, _) =
            cx.lockdep_acquire_mode(LockClass::PercpuRwsem, self.class(level), LockRead::Write);
        let lvl = self.level(level);
        lvl.writer.store(true, Ordering::Release);
        let what = format!("freeze_super: percpu_down_write({})", self.class(level));
        let ok = cx.wait_until(&what, &|| lvl.readers.load(Ordering::Acquire) == 0);
        (held, ok)
    }

    /// `freeze_super()`: `-EBUSY` unless unfrozen; then for each level in turn sets `frozen` to
    /// it and waits for its writers (`sb_wait_write()`); then `SB_FREEZE_COMPLETE` and
    /// `lockdep_sb_freeze_release()` (the task returns to user space holding the levels; lockdep
    /// must not see them as held). A level that never drains is [`FreezeError::NeverDrained`]
    /// (and the hung-task detector's report, if it is on).
    pub fn freeze_super(&self, cx: &Cpu) -> Result<(), FreezeError> {
        if self
            .frozen
            .compare_exchange(
                SB_UNFROZEN,
                SB_FREEZE_WRITE,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Err(FreezeError::Errno(Errno::EBUSY));
        }
        let mut held = Vec::with_capacity(SB_FREEZE_LEVELS);
        for level in SB_FREEZE_WRITE..=SB_FREEZE_FS {
            self.frozen.store(level, Ordering::Release);
            let (h, ok) = self.sb_wait_write(level, cx);
            held.push(h);
            if !ok {
                for h in held.into_iter().rev() {
                    cx.lock_release(h);
                }
                return Err(FreezeError::NeverDrained {
                    level,
                    readers: self.writers(level),
                });
            }
        }
        self.frozen.store(SB_FREEZE_COMPLETE, Ordering::Release);
        // lockdep_sb_freeze_release(): last level first.
        for h in held.into_iter().rev() {
            cx.lock_release(h);
        }
        Ok(())
    }

    /// `thaw_super()`: `-EINVAL` unless frozen; `lockdep_sb_freeze_acquire()`, then
    /// `sb_freeze_unlock()` (each level's `percpu_up_write()`, last first), waking the writers
    /// that wait; `SB_UNFROZEN`.
    pub fn thaw_super(&self, cx: &Cpu) -> Result<(), FreezeError> {
        if self.frozen() != SB_FREEZE_COMPLETE {
            return Err(FreezeError::Errno(Errno::EINVAL));
        }
        let held: Vec<HeldLock> = (SB_FREEZE_WRITE..=SB_FREEZE_FS)
            .map(|level| {
                // lockdep_sb_freeze_acquire(): percpu_rwsem_acquire(), a trylock.
                cx.lockdep_acquire_try(LockClass::PercpuRwsem, self.class(level), LockRead::Write)
                    .0
            })
            .collect();
        self.frozen.store(SB_UNFROZEN, Ordering::Release);
        for (i, h) in held.into_iter().enumerate().rev() {
            self.levels[i].writer.store(false, Ordering::Release);
            cx.lock_release(h);
        }
        Ok(())
    }

    /// biosim's accounting check at quiescence (nothing in flight): every level's writer count
    /// must be back to zero. Each level still up is a [`ReportKind::SbWritersUnbalanced`] report
    /// naming the pair that was not closed.
    pub fn check_writers(&self, cx: &Cpu) -> Vec<Report> {
        let mut out = Vec::new();
        for level in SB_FREEZE_WRITE..=SB_FREEZE_FS {
            let lvl = self.level(level);
            let n = lvl.readers.load(Ordering::Acquire);
            if n == 0 {
                continue;
            }
            let pair = if lvl.kiocb_readers.load(Ordering::Acquire) > 0 {
                "kiocb_start_write() without kiocb_end_write()"
            } else {
                "sb_start_write() without sb_end_write()"
            };
            out.push(cx.report(
                ReportKind::SbWritersUnbalanced,
                format!(
                    "biosim: {} {} level {level}: {n} writer{} never ended ({pair})",
                    self.s_id,
                    self.class(level),
                    if n == 1 { "" } else { "s" }
                ),
            ));
        }
        out
    }
}

impl fmt::Display for SuperBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}, writers {}/{}/{})",
            self.s_id,
            sb_freeze_level_name(self.frozen()),
            self.writers(1),
            self.writers(2),
            self.writers(3)
        )
    }
}

/// `aio_write()` (`fs/aio.c`) up to the handoff: `kiocb_start_write()` for a regular file, then
/// `->write_iter()` queues the I/O (-EIOCBQUEUED). `None` if the freeze never thaws.
pub fn aio_write(sb: &SuperBlock, cx: &Cpu) -> Option<KiocbWrite> {
    sb.kiocb_start_write(cx)
}

/// `aio_complete_rw()` (`fs/aio.c`, the kiocb's `ki_complete`, also reached through
/// `aio_rw_done()` for a synchronous error): `kiocb_end_write()` for a write, whatever `res`.
/// The twin `bug-kiocb-end-write-skipped` forgets it when `res` is an error.
pub fn aio_complete_rw(sb: &SuperBlock, kiocb: KiocbWrite, res: Result<usize, Errno>, cx: &Cpu) {
    if res.is_err() && cfg!(feature = "bug-kiocb-end-write-skipped") {
        // The kiocb goes away without kiocb_end_write(): the level's count stays up.
        drop(kiocb);
        return;
    }
    sb.kiocb_end_write(kiocb, cx);
}

#[cfg(test)]
mod tests;
