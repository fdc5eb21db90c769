//! `drivers/block/loop.c` with Ming Lei's NOWAIT series (seed 004, "[PATCH V5 0/6] loop: improve
//! loop aio perf by IOCB_NOWAIT"; kernel-semantics.md §6.1).
//!
//! A loop device turns bios into reads and writes of a backing file. With `LO_FLAGS_DIRECT_IO`
//! (`use_aio`), `loop_queue_rq()` first tries the I/O with `IOCB_NOWAIT` in the submitter's
//! context (`lo_rw_aio_nowait()`); on `-EAGAIN` or `-EOPNOTSUPP` it falls back to the device's
//! workqueue (`loop_queue_work()`), whose worker (`loop_process_work()`) does the blocking I/O.
//! Patch 6/6 adds the hint `lo_aio_try_nowait()`: try NOWAIT only for a backing block device, a
//! read, or while no blocking write is queued (`lo_nr_blocking_writes == 0`), so a sparse backing
//! file's random writes stop paying a failed NOWAIT attempt each.
//!
//! The backing file is a trait ([`LoopBacking`]): bio-sim provides a real file (preadv2/pwritev2
//! with `RWF_NOWAIT`), tests and the deterministic runtime an in-memory one whose `-EAGAIN` rules
//! are those of a filesystem's direct I/O (see [`MemBacking`]).
//!
//! Freeze protection (`include/linux/fs.h`): `lo_submit_rw_aio()` sets `cmd->ref` to 2 and takes
//! `kiocb_start_write()` on the backing file's superblock ([`LoopBacking::superblock`]) for a
//! write; `lo_rw_aio_do_completion()` ends it with `kiocb_end_write()` when the count reaches 0.
//! A NOWAIT attempt that falls back on `-EAGAIN` never reaches that end work, and the worker
//! starts the write again: one `SB_FREEZE_WRITE` writer leaks per fallen-back write (check L6;
//! the fix is [`LoopVariant::nowait_ends_write_on_eagain`]).
//!
//! Trace events: blk-mq's request tracepoints for the loop device's requests (`block_getrq`,
//! `block_rq_issue`, `block_rq_complete`, see [`super::blk_mq_trace`]), the backing file's own
//! requests on its device when the backing names one ([`LoopBacking::lower_device`]), and the
//! driver's internal steps as `biosim_loop_*` annotations (the kernel has no tracepoint there):
//! `biosim_loop_nowait`, `biosim_loop_handle_cmd`, `biosim_loop_aio_complete`. `biosim calibrate
//! loop` compares the kernel events with the live kernel's (docs/live-kernel.md).
//!
//! The device is a blk-mq queue (block/blk_mq): `submit_bio_noacct()` → `__submit_bio()`'s plug
//! → `blk_mq_submit_bio()` (tag, `block_getrq`, `block_plug`) → `blk_finish_plug()`
//! (`block_unplug`) → `loop_queue_rq()`, which starts the request (`block_rq_issue`); the
//! completion ends it with `blk_mq_end_request()` (`block_rq_complete`). A backing that is
//! itself a simulated block device ([`BdevBacking`]) stacks for real through
//! `current->bio_list`.
//!
//! A request may carry several bios (blk-mq's plug merge): `lo_rw_aio_prep()` then allocates the
//! `bio_vec` array at the fault-injection site [`LO_RW_AIO_PREP`], and a failure takes each
//! version's posted error path (check L7).
//!
//! Simplifications, each documented where it matters (docs/loop.md): a synchronous backing completes inline where the I/O was issued, an
//! asynchronous one (`-EIOCBQUEUED`) through `ki_complete()` in an interrupt on the submitting
//! CPU; bios end in `BLOCK_SOFTIRQ` on the CPU that completed them (the kernel sends them back
//! to the submitting CPU); there is one root cgroup worker (`lo->rootcg_work`).

// Bios travel boxed everywhere in bio-core (`Box<Bio>` moves from submitter to driver to
// `bio_endio()`); a request's list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

use crate::block::blk_mq::{
    blk_mq_end_request, blk_mq_start_request, BlkMqOps, RequestQueue, Rq, BLK_MQ_F_BLOCKING,
    BLK_MQ_F_STACKING,
};
use crate::block::Bio;
use crate::block::{
    bio_endio_status, errno_to_blk_status, BioVec, BlkOpf, BlockDriver, QueueLimits, ReqFlags,
    ReqOp, BLK_STS_IOERR, BLK_STS_OK, SECTOR_SHIFT,
};
use crate::drivers::block::blk_mq_trace::{
    block_getrq, block_rq_complete, block_rq_insert, block_rq_issue, RqTrace,
};
use crate::errno::Errno;
use crate::fs::super_block::{KiocbWrite, SuperBlock, SB_WRITERS_CLASSES_3};
use crate::irq::SoftirqVec;
use crate::kernel::{Cpu, LockClass, ReportKind};
use crate::mm::gfp::GfpFlags;
use crate::mm::slab::{kfree, kmalloc_array, SlabObject};
use crate::sync::untracked::{AtomicUsize, Ordering};
use crate::sync::{Mutex, UntrackedArc, UntrackedWeak};
use crate::workqueue::{WorkStruct, Workqueue, WQ_UNBOUND};
use crate::Kernel;
use std::collections::VecDeque;
use std::fmt;

/// `LO_FLAGS_READ_ONLY` (`include/uapi/linux/loop.h`).
pub const LO_FLAGS_READ_ONLY: u32 = 1;
/// `LO_FLAGS_DIRECT_IO`: the backing file is opened `O_DIRECT` and reads/writes go through
/// `lo_rw_aio()` (`cmd->use_aio`).
pub const LO_FLAGS_DIRECT_IO: u32 = 16;

/// The `fallocate()` modes `lo_fallocate()` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallocate {
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`: `REQ_OP_DISCARD`.
    PunchHole,
    /// `FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE`: `REQ_OP_WRITE_ZEROES`.
    ZeroRange,
}

/// The backing file (`lo->lo_backing_file`). Errors are [`Errno`]s (the kernel returns them
/// negated).
pub trait LoopBacking: Send + Sync + fmt::Debug {
    /// `i_size_read()` of the backing inode, in bytes.
    fn size(&self) -> u64;
    /// `S_ISBLK(inode->i_mode)`: a block device rather than a regular file.
    fn is_block_device(&self) -> bool;
    /// `f_mode & FMODE_NOWAIT`: the file honours `IOCB_NOWAIT`.
    fn fmode_nowait(&self) -> bool;
    /// One read (into `buf`) or write (from `buf`) at byte `pos`: `lo_submit_rw_aio()` →
    /// `call_read_iter()`/`call_write_iter()`, with `IOCB_NOWAIT` when `nowait`. Returns the
    /// bytes done; a NOWAIT call that would block returns `Err(Errno::EAGAIN)` and does nothing.
    fn rw(&self, write: bool, pos: u64, buf: &mut [u8], nowait: bool) -> Result<usize, Errno>;
    /// `vfs_fsync()` (`lo_req_flush()`).
    fn fsync(&self) -> Result<(), Errno>;
    /// `vfs_fallocate()` (`lo_fallocate()`).
    fn fallocate(&self, mode: Fallocate, pos: u64, len: u64) -> Result<(), Errno>;
    /// Whether reads and writes are asynchronous, as the kernel's direct I/O is: [`submit_aio`]
    /// starts one and returns (`-EIOCBQUEUED`), and the completion comes back later, in the
    /// backing device's interrupt on `req.cpu`, through [`LoopDevice::lo_rw_aio_complete_async`].
    ///
    /// [`submit_aio`]: LoopBacking::submit_aio
    fn is_async(&self) -> bool {
        false
    }
    /// Starts an asynchronous read or write (`call_read_iter()`/`call_write_iter()` returning
    /// `-EIOCBQUEUED`). An immediate failure hands the request back with an errno.
    fn submit_aio(&self, req: AioRequest) -> Result<(), (AioRequest, Errno)> {
        Err((req, Errno::EOPNOTSUPP))
    }
    /// [`LoopBacking::submit_aio`] from the context `cx` that starts it: a backing that submits
    /// bios itself (a block device, [`BdevBacking`]) needs the submitter's context. The default
    /// is `submit_aio`.
    fn submit_aio_cx(&self, req: AioRequest, cx: &Cpu) -> Result<(), (AioRequest, Errno)> {
        let _ = cx;
        self.submit_aio(req)
    }
    /// The block device under the backing file (`file_inode()->i_sb->s_bdev`'s `disk_devt()`),
    /// when its requests are modelled: each asynchronous read or write [`submit_aio`] starts is
    /// then one request on it, traced as the kernel traces the backing file's direct I/O
    /// (`block_bio_queue`, `block_getrq`, `block_rq_insert`, `block_rq_issue`, and
    /// `block_rq_complete` before `ki_complete()`), at sector `pos >> 9` (the file mapped onto
    /// the device from sector 0).
    ///
    /// [`submit_aio`]: LoopBacking::submit_aio
    fn lower_device(&self) -> Option<(u32, u32)> {
        None
    }
    /// Whether an asynchronous read or write of `len` bytes at `pos` completes inside
    /// `->read_iter()`/`->write_iter()` without reaching the device: iomap's direct I/O reads a
    /// hole by zero-filling the buffer (`iomap_dio_hole_iter()`) and returns the byte count, not
    /// `-EIOCBQUEUED`, so `lo_rw_aio()` calls `lo_rw_aio_complete()` itself.
    fn completes_inline(&self, _write: bool, _pos: u64, _len: usize) -> bool {
        false
    }
    /// `file_inode(lo->lo_backing_file)->i_sb`: the superblock whose freeze protection
    /// (`sb->s_writers`) a write to the backing file takes (`kiocb_start_write()` in
    /// `lo_submit_rw_aio()`, `file_start_write()` in `lo_write_simple()`'s `vfs_iter_write()`).
    /// `None`: the backing's freeze protection is not modelled.
    fn superblock(&self) -> Option<&SuperBlock> {
        None
    }
}

/// One asynchronous read or write given to an asynchronous [`LoopBacking`]: the command's data
/// travels with it (the kiocb's iov_iter over the request's pages) and comes back in the
/// completion.
#[derive(Debug)]
pub struct AioRequest {
    /// Identifies the command at completion.
    pub token: u64,
    /// A write (else a read).
    pub write: bool,
    /// Byte position in the backing file.
    pub pos: u64,
    /// The data to write, or a buffer of the length to read. It must come back whole in the
    /// completion, writes included: a one-segment command lends its bio's own segment here, and a
    /// buffer handed back at another length is a `biosim:` WARN.
    pub data: Vec<u8>,
    /// `IOCB_NOWAIT`.
    pub nowait: bool,
    /// The CPU that submitted it: its completion interrupt is delivered there.
    pub cpu: crate::kernel::CpuId,
}

/// Which of the posted designs runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopVariant {
    /// The name shown by the CLI.
    pub name: &'static str,
    /// Patch 5/6: try `IOCB_NOWAIT` before queueing `use_aio` commands to the worker.
    pub nowait_first: bool,
    /// Patch 6/6: `lo_aio_try_nowait()`.
    pub hint: bool,
    /// V5: only if `lo_backfile_support_nowait()` (`FMODE_NOWAIT`, Yu Kuai's comment); V4 tried
    /// NOWAIT on any backing file.
    pub check_fmode_nowait: bool,
    /// `loop_queue_rq()` falls back to the worker on `-EOPNOTSUPP` as well as `-EAGAIN` (V5's
    /// `if (res != -EAGAIN && res != -EOPNOTSUPP)`); V4 fell back on `-EAGAIN` only.
    pub eopnotsupp_falls_back: bool,
    /// `lo_rw_aio_nowait()` completes the request on any result but `-EIOCBQUEUED`/`-EAGAIN`, so
    /// on `-EOPNOTSUPP` too (every posted version). With V5's fallback the request is then
    /// completed and queued; off is the fixed twin of check L3.
    pub nowait_completes_on_eopnotsupp: bool,
    /// The lock `loop_{inc,dec}_blocking_writes()` asserts with `lockdep_assert_held()`. V5 asserts
    /// `lo_work_lock`, the lock held there; V4 asserted `lo_mutex`, which syzbot caught firing.
    pub asserted_lock: &'static str,
    /// `lo_rw_aio_nowait()` computes the file position itself, `(blk_rq_pos(rq) << 9) +
    /// lo->lo_offset`, apart from `do_req_filebacked()`'s. True in every posted version; off is the
    /// buggy twin of the data check (the NOWAIT path forgets `lo_offset`).
    pub nowait_adds_lo_offset: bool,
    /// The fix of check L6 (no posted version has it): when the NOWAIT attempt of a write comes
    /// back `-EAGAIN` (from `->write_iter()`, or from a bdev's `ki_complete()`; also
    /// `-EOPNOTSUPP` when L3's fix leaves that to the fallback too), end the
    /// attempt's freeze protection with `kiocb_end_write()` before falling back to the worker,
    /// whose `lo_submit_rw_aio()` takes it again (what io_uring does before it retries a NOWAIT
    /// write). Off in every posted version: the attempt's `kiocb_start_write()` is never ended.
    pub nowait_ends_write_on_eagain: bool,
    /// The fix of check L7 (no posted version has it): `cmd->ref` is armed (set to 1, the
    /// completion's reference) before `lo_rw_aio_prep()`, so a `goto fail` after a failed
    /// `bvec` allocation completes the request instead of taking the stale `cmd->ref` to -1.
    /// Off in every version (the base has no such path: its failure returns `-EIO`).
    pub ref_armed_before_prep: bool,
    /// Upstream's fix of check L7 ("loop: fix error handling in aio functions", Ming Lei, November
    /// 2025, `Fixes: 0ba93a906dda`): both `goto fail`s after a failed `lo_rw_aio_prep()` become
    /// `return ret`. The worker's `lo_rw_aio()` then returns `-EIO` to `loop_handle_cmd()`, which
    /// completes the request once (the base's behaviour); `lo_rw_aio_nowait()` returns `-EIO` to
    /// V5's `loop_queue_rq()`, which answers `BLK_STS_OK` for anything but `-EAGAIN`/`-EOPNOTSUPP`
    /// and completes nothing. Off in every posted version.
    pub prep_fail_returns_error: bool,
}

impl LoopVariant {
    /// Before the series: every `use_aio` command goes through the workqueue.
    pub const BASE: LoopVariant = LoopVariant {
        name: "base",
        nowait_first: false,
        hint: false,
        check_fmode_nowait: true,
        eopnotsupp_falls_back: true,
        nowait_completes_on_eopnotsupp: true,
        asserted_lock: LO_WORK_LOCK,
        nowait_adds_lo_offset: true,
        nowait_ends_write_on_eagain: false,
        ref_armed_before_prep: false,
        prep_fail_returns_error: false,
    };
    /// V5 up to patch 5/6: V5 without the hint (the sparse-file randwrite regression).
    pub const V5_NO_HINT: LoopVariant = LoopVariant {
        name: "v5-no-hint",
        hint: false,
        ..Self::V5
    };
    /// V4 as posted (0ba93a906dda, the commit 5/6 got in linux-next, is V5's): the base with
    /// NOWAIT first and the hint,
    /// asserting the wrong lock, trying NOWAIT on any backing file, falling back on `-EAGAIN` only.
    pub const V4: LoopVariant = LoopVariant {
        name: "v4",
        nowait_first: true,
        hint: true,
        check_fmode_nowait: false,
        eopnotsupp_falls_back: false,
        asserted_lock: LO_MUTEX,
        ..Self::BASE
    };
    /// V5 as posted (seed 004), the default: V4 with the `FMODE_NOWAIT` check, the
    /// `-EOPNOTSUPP` fallback and the right lock asserted.
    pub const V5: LoopVariant = LoopVariant {
        name: "v5",
        check_fmode_nowait: true,
        eopnotsupp_falls_back: true,
        asserted_lock: LO_WORK_LOCK,
        ..Self::V4
    };
    /// Every preset: the one list of loop version names the CLI, scenario files, the loop checks,
    /// the fuzzer and the loop proptest read.
    pub const ALL: [LoopVariant; 4] = [Self::BASE, Self::V5_NO_HINT, Self::V4, Self::V5];

    /// The preset called `name`.
    pub fn by_name(name: &str) -> Option<LoopVariant> {
        Self::ALL.into_iter().find(|v| v.name == name)
    }

    /// The preset names, in [`LoopVariant::ALL`]'s order.
    pub fn names() -> impl Iterator<Item = &'static str> {
        Self::ALL.into_iter().map(|v| v.name)
    }

    /// The preset names and then `extra`, as an error lists them: `base, v5-no-hint, v4 or v5`.
    pub fn names_or(extra: &[&str]) -> String {
        let mut names: Vec<&str> = Self::names().collect();
        names.extend_from_slice(extra);
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.join(""),
        }
    }

    /// Looks a preset up by name; the error names every preset (and `extra`).
    pub fn parse_name(name: &str, extra: &[&str]) -> Result<LoopVariant, String> {
        Self::by_name(name).ok_or_else(|| {
            format!(
                "unknown loop variant `{name}` (expected {})",
                Self::names_or(extra)
            )
        })
    }

    /// This variant with `knob` applied (the name is kept).
    pub const fn with(self, knob: LoopKnob) -> LoopVariant {
        knob.apply(self)
    }

    /// The knobs as `name=value` pairs.
    pub fn knobs(&self) -> Vec<(&'static str, String)> {
        vec![
            ("nowait_first", self.nowait_first.to_string()),
            ("hint", self.hint.to_string()),
            ("check_fmode_nowait", self.check_fmode_nowait.to_string()),
            (
                "eopnotsupp_falls_back",
                self.eopnotsupp_falls_back.to_string(),
            ),
            (
                "nowait_completes_on_eopnotsupp",
                self.nowait_completes_on_eopnotsupp.to_string(),
            ),
            ("asserted_lock", self.asserted_lock.to_owned()),
            (
                "nowait_adds_lo_offset",
                self.nowait_adds_lo_offset.to_string(),
            ),
            (
                "nowait_ends_write_on_eagain",
                self.nowait_ends_write_on_eagain.to_string(),
            ),
            (
                "ref_armed_before_prep",
                self.ref_armed_before_prep.to_string(),
            ),
            (
                "prep_fail_returns_error",
                self.prep_fail_returns_error.to_string(),
            ),
        ]
    }
}

/// One loop knob set to one value: the typed form of a scenario's `loop_knob NAME=VALUE` line, of
/// the CLI's `biosim loop --knob`, and of a loop check's twin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LoopKnob {
    /// [`LoopVariant::nowait_first`].
    NowaitFirst(bool),
    /// [`LoopVariant::hint`].
    Hint(bool),
    /// [`LoopVariant::check_fmode_nowait`].
    CheckFmodeNowait(bool),
    /// [`LoopVariant::eopnotsupp_falls_back`].
    EopnotsuppFallsBack(bool),
    /// [`LoopVariant::nowait_completes_on_eopnotsupp`].
    NowaitCompletesOnEopnotsupp(bool),
    /// [`LoopVariant::nowait_adds_lo_offset`].
    NowaitAddsLoOffset(bool),
    /// [`LoopVariant::nowait_ends_write_on_eagain`].
    NowaitEndsWriteOnEagain(bool),
    /// [`LoopVariant::ref_armed_before_prep`].
    RefArmedBeforePrep(bool),
    /// [`LoopVariant::prep_fail_returns_error`].
    PrepFailReturnsError(bool),
}

impl LoopKnob {
    /// Every loop knob's name (each takes `true` or `false`).
    pub const NAMES: [&'static str; 9] = [
        "nowait_first",
        "hint",
        "check_fmode_nowait",
        "eopnotsupp_falls_back",
        "nowait_completes_on_eopnotsupp",
        "nowait_adds_lo_offset",
        "nowait_ends_write_on_eagain",
        "ref_armed_before_prep",
        "prep_fail_returns_error",
    ];

    /// The one loop knob parser. An unknown name is refused with the known ones, a bad value with
    /// the valid ones.
    pub fn parse(name: &str, value: &str) -> Result<LoopKnob, String> {
        let b = match value {
            "y" | "yes" | "true" | "1" => true,
            "n" | "no" | "false" | "0" => false,
            _ if !Self::NAMES.contains(&name) => return Err(Self::unknown(name)),
            _ => {
                return Err(format!(
                    "loop_knob {name}: expected true or false, got `{value}`"
                ))
            }
        };
        Ok(match name {
            "nowait_first" => LoopKnob::NowaitFirst(b),
            "hint" => LoopKnob::Hint(b),
            "check_fmode_nowait" => LoopKnob::CheckFmodeNowait(b),
            "eopnotsupp_falls_back" => LoopKnob::EopnotsuppFallsBack(b),
            "nowait_completes_on_eopnotsupp" => LoopKnob::NowaitCompletesOnEopnotsupp(b),
            "nowait_adds_lo_offset" => LoopKnob::NowaitAddsLoOffset(b),
            "nowait_ends_write_on_eagain" => LoopKnob::NowaitEndsWriteOnEagain(b),
            "ref_armed_before_prep" => LoopKnob::RefArmedBeforePrep(b),
            "prep_fail_returns_error" => LoopKnob::PrepFailReturnsError(b),
            _ => return Err(Self::unknown(name)),
        })
    }

    fn unknown(name: &str) -> String {
        format!(
            "unknown loop_knob `{name}` (known: {})",
            Self::NAMES.join(", ")
        )
    }

    /// Parses `NAME=VALUE`.
    pub fn parse_assignment(kv: &str) -> Result<LoopKnob, String> {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("loop_knob `{kv}`: expected NAME=VALUE"))?;
        Self::parse(k, v)
    }

    /// `v` with this knob set.
    pub const fn apply(self, v: LoopVariant) -> LoopVariant {
        match self {
            LoopKnob::NowaitFirst(nowait_first) => LoopVariant { nowait_first, ..v },
            LoopKnob::Hint(hint) => LoopVariant { hint, ..v },
            LoopKnob::CheckFmodeNowait(check_fmode_nowait) => LoopVariant {
                check_fmode_nowait,
                ..v
            },
            LoopKnob::EopnotsuppFallsBack(eopnotsupp_falls_back) => LoopVariant {
                eopnotsupp_falls_back,
                ..v
            },
            LoopKnob::NowaitCompletesOnEopnotsupp(nowait_completes_on_eopnotsupp) => LoopVariant {
                nowait_completes_on_eopnotsupp,
                ..v
            },
            LoopKnob::NowaitAddsLoOffset(nowait_adds_lo_offset) => LoopVariant {
                nowait_adds_lo_offset,
                ..v
            },
            LoopKnob::NowaitEndsWriteOnEagain(nowait_ends_write_on_eagain) => LoopVariant {
                nowait_ends_write_on_eagain,
                ..v
            },
            LoopKnob::RefArmedBeforePrep(ref_armed_before_prep) => LoopVariant {
                ref_armed_before_prep,
                ..v
            },
            LoopKnob::PrepFailReturnsError(prep_fail_returns_error) => LoopVariant {
                prep_fail_returns_error,
                ..v
            },
        }
    }
}

/// `name=value`, in the spelling [`LoopKnob::parse`] reads back.
impl fmt::Display for LoopKnob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, b) = match *self {
            LoopKnob::NowaitFirst(b) => ("nowait_first", b),
            LoopKnob::Hint(b) => ("hint", b),
            LoopKnob::CheckFmodeNowait(b) => ("check_fmode_nowait", b),
            LoopKnob::EopnotsuppFallsBack(b) => ("eopnotsupp_falls_back", b),
            LoopKnob::NowaitCompletesOnEopnotsupp(b) => ("nowait_completes_on_eopnotsupp", b),
            LoopKnob::NowaitAddsLoOffset(b) => ("nowait_adds_lo_offset", b),
            LoopKnob::NowaitEndsWriteOnEagain(b) => ("nowait_ends_write_on_eagain", b),
            LoopKnob::RefArmedBeforePrep(b) => ("ref_armed_before_prep", b),
            LoopKnob::PrepFailReturnsError(b) => ("prep_fail_returns_error", b),
        };
        write!(f, "{name}={b}")
    }
}

#[cfg(test)]
mod variant_tests {
    use super::*;

    /// Each preset's knob listing, as it was when the presets were written out field by field.
    #[test]
    fn each_loop_presets_knob_listing_is_pinned() {
        let pinned = [
            ("base", "nowait_first=false hint=false check_fmode_nowait=true eopnotsupp_falls_back=true nowait_completes_on_eopnotsupp=true asserted_lock=&lo->lo_work_lock nowait_adds_lo_offset=true nowait_ends_write_on_eagain=false ref_armed_before_prep=false prep_fail_returns_error=false"),
            ("v5-no-hint", "nowait_first=true hint=false check_fmode_nowait=true eopnotsupp_falls_back=true nowait_completes_on_eopnotsupp=true asserted_lock=&lo->lo_work_lock nowait_adds_lo_offset=true nowait_ends_write_on_eagain=false ref_armed_before_prep=false prep_fail_returns_error=false"),
            ("v4", "nowait_first=true hint=true check_fmode_nowait=false eopnotsupp_falls_back=false nowait_completes_on_eopnotsupp=true asserted_lock=&lo->lo_mutex nowait_adds_lo_offset=true nowait_ends_write_on_eagain=false ref_armed_before_prep=false prep_fail_returns_error=false"),
            ("v5", "nowait_first=true hint=true check_fmode_nowait=true eopnotsupp_falls_back=true nowait_completes_on_eopnotsupp=true asserted_lock=&lo->lo_work_lock nowait_adds_lo_offset=true nowait_ends_write_on_eagain=false ref_armed_before_prep=false prep_fail_returns_error=false"),
        ];
        for (name, knobs) in pinned {
            let v = LoopVariant::by_name(name).unwrap_or_else(|| panic!("{name} is gone"));
            let listing: Vec<String> = v
                .knobs()
                .into_iter()
                .map(|(k, x)| format!("{k}={x}"))
                .collect();
            assert_eq!((v.name, listing.join(" ").as_str()), (name, knobs));
        }
    }

    #[test]
    fn the_loop_knob_parser_names_the_known_knobs_and_values() {
        let e = LoopKnob::parse("bogus", "1").unwrap_err();
        for n in LoopKnob::NAMES {
            assert!(e.contains(n), "{e} lacks {n}");
            let bad = LoopKnob::parse(n, "maybe").unwrap_err();
            assert!(bad.contains("expected true or false, got `maybe`"), "{bad}");
            for b in [true, false] {
                let k = LoopKnob::parse(n, &b.to_string()).unwrap();
                assert_eq!(LoopKnob::parse_assignment(&k.to_string()), Ok(k));
            }
        }
        assert!(LoopKnob::parse("bogus", "maybe")
            .unwrap_err()
            .contains("unknown loop_knob"));
        assert_eq!(
            LoopVariant::parse_name("v6", &["twin"]).unwrap_err(),
            "unknown loop variant `v6` (expected base, v5-no-hint, v4, v5 or twin)"
        );
    }
}

/// `lo->lo_work_lock`'s lockdep name.
pub const LO_WORK_LOCK: &str = "&lo->lo_work_lock";
/// `lo->lo_mutex`'s lockdep name.
pub const LO_MUTEX: &str = "&lo->lo_mutex";

/// A command on its way through the driver (`struct loop_cmd` and its request). `bios` is
/// `None` once the request has been completed while the command lives on: the double completion
/// of V5's `-EOPNOTSUPP` path (check L3), which the worker then reports instead of ending
/// anything.
#[derive(Debug)]
struct LoopCmd {
    /// The request's bios, `rq->bio` … `rq->biotail` (more than one when blk-mq merged bios
    /// into the request in the submitter's plug).
    bios: Option<Vec<Box<Bio>>>,
    /// The request's op: `REQ_OP_FLUSH` for an empty `REQ_PREFLUSH` write (the flush state
    /// machine turns it into a flush request).
    op: ReqOp,
    /// `REQ_PREFLUSH` / `REQ_FUA` on a data write: the flush sequence PREFLUSH → DATA →
    /// POSTFLUSH (loop has no native FUA), which biosim runs whole in the worker.
    preflush: bool,
    postflush: bool,
    sector: u64,
    sectors: u64,
    /// The bio's `bi_opf`, for the trace's RWBS column (kept so a command without its bio
    /// can still be named).
    opf: BlkOpf,
    use_aio: bool,
    /// The blk-mq request the command belongs to (`blk_mq_rq_to_pdu()`), on a device created
    /// with [`LoopDevice::new_blk_mq`]; `None` on the direct path.
    mq_rq: Option<Rq>,
    /// `cmd->ref` (an `atomic_t`): `lo_submit_rw_aio()` sets it to 2 (the submitter's and the
    /// completion's reference); `lo_rw_aio_do_completion()` drops one and does the end work at
    /// 0. Before `lo_submit_rw_aio()` it holds what the request's previous use left, 0 (blk-mq
    /// allocates the pdus zeroed, and every completed use ends at 0): a completion then takes it
    /// to -1, and the end work never runs (check L7).
    aio_ref: i32,
    /// The freeze protection `kiocb_start_write()` took for this command's write
    /// (`cmd->iocb`'s `IOCB_WRITE` state); `kiocb_end_write()` in `lo_rw_aio_do_completion()`
    /// ends it. Overwriting it without ending it is the leak of check L6.
    kiocb: Option<KiocbWrite>,
    /// `cmd->bvec`: the `bio_vec` array `lo_rw_aio_prep()` allocated for a request of more
    /// than one bio (`kmalloc_array(nr_bvec, sizeof(struct bio_vec), GFP_NOIO)`), freed by
    /// `lo_rw_aio_do_completion()`'s `kfree(cmd->bvec)`.
    bvec: Option<SlabObject>,
}

impl LoopCmd {
    /// The request as blk-mq's tracepoints print it on `loop<number>`.
    fn rq(&self, number: u32) -> RqTrace {
        RqTrace {
            dev: (LOOP_MAJOR, number),
            rwbs: self.opf.rwbs_buf(),
            sector: self.sector,
            nr_sector: self.sectors,
        }
    }

    /// The command of a request whose bios are `bios` (at least one: the request's flags and
    /// position are its first bio's, its size all of theirs).
    fn new(bios: Vec<Box<Bio>>, use_aio: bool) -> Self {
        let (opf, sector, op) = bios.first().map_or(
            (
                BlkOpf {
                    op: ReqOp::Read,
                    flags: ReqFlags::NONE,
                },
                0,
                ReqOp::Read,
            ),
            |b| (b.bi_opf, b.bi_iter.bi_sector, b.op()),
        );
        let f = opf.flags;
        let (preflush, fua) = (
            f.contains(ReqFlags::REQ_PREFLUSH),
            f.contains(ReqFlags::REQ_FUA),
        );
        let sectors: u64 = bios.iter().map(|b| b.sectors()).sum();
        let empty = sectors == 0;
        LoopCmd {
            op: if op == ReqOp::Write && empty && preflush {
                ReqOp::Flush
            } else {
                op
            },
            preflush: preflush && !empty,
            postflush: fua && !empty,
            sector,
            sectors,
            opf,
            bios: Some(bios),
            use_aio,
            mq_rq: None,
            aio_ref: 0,
            kiocb: None,
            bvec: None,
        }
    }

    /// `blk_rq_bytes()` of the bios the command still holds.
    fn data_len(&self) -> usize {
        self.bios
            .as_ref()
            .map_or(0, |v| v.iter().map(|b| b.data_len()).sum())
    }

    /// `lo_cmd_nr_bvec()`: `rq_for_each_bvec()` over every bio of the request.
    fn nr_bvec(&self) -> usize {
        self.bios
            .as_ref()
            .map_or(0, |v| v.iter().map(|b| b.bi_io_vec.len()).sum())
    }

    /// `rq->bio != rq->biotail`.
    fn multi_bio(&self) -> bool {
        self.bios.as_ref().is_some_and(|v| v.len() > 1)
    }

    /// Every segment of every bio, in order (the iov_iter over `cmd->bvec` or the one bio's).
    fn segments_mut(&mut self) -> impl Iterator<Item = &mut BioVec> {
        self.bios
            .iter_mut()
            .flat_map(|v| v.iter_mut())
            .flat_map(|b| b.bi_io_vec.iter_mut())
    }

    /// `bi_iter.bi_size` of every bio (a discard's or write-zeroes' has no data).
    fn bytes(&self) -> u32 {
        self.bios
            .as_ref()
            .map_or(0, |v| v.iter().map(|b| b.bi_iter.bi_size).sum())
    }

    /// The buffer of the request's only segment, when it has exactly one bio with exactly one
    /// segment: an asynchronous read or write can then go straight into (or out of) it, as the
    /// kernel's kiocb iterates the bio's own pages (`ITER_BVEC`), with no copy.
    fn single_segment_mut(&mut self) -> Option<&mut Vec<u8>> {
        match self.bios.as_deref_mut() {
            Some([bio]) => match bio.bi_io_vec.as_mut_slice() {
                [seg] => Some(&mut seg.data),
                _ => None,
            },
            _ => None,
        }
    }

    /// The data of every bio, in order.
    fn data(&self) -> Vec<u8> {
        self.bios
            .as_ref()
            .map_or_else(Vec::new, |v| v.iter().flat_map(|b| b.data()).collect())
    }

    fn is_aio_write(&self) -> bool {
        self.use_aio && self.op == ReqOp::Write
    }

    /// Moves everything the request owns (its bios, `cmd->ref`, the kiocb write, `cmd->bvec`)
    /// into a new command, leaving this one an empty shell: the command a completion or the
    /// stranded list takes over while the caller keeps the husk.
    fn take_all(&mut self) -> LoopCmd {
        LoopCmd {
            bios: self.bios.take(),
            aio_ref: std::mem::take(&mut self.aio_ref),
            kiocb: self.kiocb.take(),
            bvec: self.bvec.take(),
            ..self.shell()
        }
    }

    /// The command without its bio, its reference count or its kiocb write (whoever takes the
    /// bio moves those along explicitly).
    fn shell(&self) -> LoopCmd {
        LoopCmd {
            bios: None,
            op: self.op,
            preflush: self.preflush,
            postflush: self.postflush,
            sector: self.sector,
            sectors: self.sectors,
            opf: self.opf,
            use_aio: self.use_aio,
            mq_rq: self.mq_rq.clone(),
            aio_ref: 0,
            kiocb: None,
            bvec: None,
        }
    }
}

/// What `lo_work_lock` protects.
#[derive(Debug, Default)]
struct LoopWork {
    /// `lo->rootcg_cmd_list`.
    cmd_list: VecDeque<LoopCmd>,
    /// `lo->lo_nr_blocking_writes`: queued plus being-submitted `use_aio` writes.
    nr_blocking_writes: u32,
}

/// How commands went through a device (simulator counters; the kernel has only
/// `nr_blocking_writes` in sysfs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopStats {
    /// NOWAIT attempts that reached the backing file.
    pub nowait_tried: usize,
    /// ... and completed there (no worker involved).
    pub nowait_done: usize,
    /// ... and returned `-EAGAIN` (a wasted attempt).
    pub nowait_eagain: usize,
    /// ... and returned `-EOPNOTSUPP` (a backing that refuses `IOCB_NOWAIT`).
    pub nowait_eopnotsupp: usize,
    /// `use_aio` commands the hint sent straight to the worker.
    pub hint_skipped: usize,
    /// Commands handled by the worker.
    pub worker_cmds: usize,
    /// Blocking reads that came back short (the file is shorter than the device).
    pub short_reads: usize,
    /// Times the work was queued (`queue_work()` returned true).
    pub work_queued: usize,
}

#[derive(Debug, Default)]
struct Counters {
    nowait_tried: AtomicUsize,
    nowait_done: AtomicUsize,
    nowait_eagain: AtomicUsize,
    nowait_eopnotsupp: AtomicUsize,
    hint_skipped: AtomicUsize,
    worker_cmds: AtomicUsize,
    work_queued: AtomicUsize,
    short_reads: AtomicUsize,
}

/// An asynchronous command in flight: the command, whether it is the NOWAIT attempt, its
/// request on the backing file's device, and the length of its bio's segment when that
/// segment's own buffer went with the I/O ([`LoopCmd::single_segment_mut`]; `None`: the data
/// travels as a copy).
type InFlight = (LoopCmd, bool, Option<RqTrace>, Option<usize>);

/// The hash of [`LoopDevice`]'s in-flight map. The kernel finds the command of a completed kiocb
/// with `container_of()`, no lookup at all; the model keys commands by a token unique in the
/// kernel (sequential), so one multiply spreads them (Fibonacci hashing) instead of SipHash's
/// rounds on every I/O. Deterministic: no random state.
#[derive(Debug, Default, Clone, Copy)]
pub struct AioTokenHasher(u64);

impl std::hash::Hasher for AioTokenHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 tokens are hashed here; anything else still hashes correctly, byte by byte.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, token: u64) {
        self.0 = (self.0 ^ token).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// [`LoopDevice`]'s in-flight commands by token.
type InFlightMap =
    std::collections::HashMap<u64, InFlight, std::hash::BuildHasherDefault<AioTokenHasher>>;

/// `struct loop_device`.
pub struct LoopDevice {
    /// The device's own reference, for [`BlockDriver::bdev`] and the tag set's ops.
    me: UntrackedWeak<LoopDevice>,
    /// `lo->tag_set` + `lo->lo_queue` on a device created with [`LoopDevice::new_blk_mq`].
    mq: Option<UntrackedArc<RequestQueue>>,
    number: u32,
    backing: UntrackedArc<dyn LoopBacking>,
    lo_flags: u32,
    /// `lo->lo_offset`: where the device starts in the backing file.
    lo_offset: u64,
    variant: LoopVariant,
    /// `lo->workqueue`: `alloc_workqueue("loop%d", WQ_UNBOUND | WQ_FREEZABLE, 0)`.
    wq: Workqueue,
    /// `lo->rootcg_work`.
    work: WorkStruct,
    /// `lo->lo_work_lock` (a `spinlock_t` taken with `spin_lock_irq()`).
    lo_work_lock: Mutex<LoopWork>,
    counters: Counters,
    /// Commands whose asynchronous I/O is in flight (the kiocbs `ki_complete()` will end), with
    /// whether it was the NOWAIT attempt, and its request on the backing's device
    /// ([`LoopBacking::lower_device`]).
    inflight: Mutex<InFlightMap>,
    /// Token generator, shared by the kernel's devices.
    tokens: UntrackedArc<AtomicUsize>,
    /// Commands whose completion took `cmd->ref` below zero (check L7): the request is never
    /// completed and its bios never end; they stay here, as the kernel's stay in the request.
    stranded: Mutex<Vec<LoopCmd>>,
}

/// The allocation site of `lo_rw_aio_prep()`'s `kmalloc_array()` (mm/slab.rs, `fail_alloc`).
pub const LO_RW_AIO_PREP: &str = "lo_rw_aio_prep";
/// `sizeof(struct bio_vec)` on a 64-bit kernel (page pointer, length, offset).
pub const BIO_VEC_SIZE: usize = 16;

impl fmt::Debug for LoopDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoopDevice")
            .field("number", &self.number)
            .field("backing", &self.backing)
            .field("lo_flags", &self.lo_flags)
            .field("variant", &self.variant.name)
            .finish()
    }
}

/// `lo->tag_set.flags` in `loop_add()` for `variant`: `BLK_MQ_F_STACKING` (6.18), plus
/// `BLK_MQ_F_BLOCKING` when the variant tries NOWAIT from `->queue_rq()` (patch 5/6).
pub const fn loop_tag_set_flags(variant: LoopVariant) -> u32 {
    if variant.nowait_first {
        BLK_MQ_F_STACKING | BLK_MQ_F_BLOCKING
    } else {
        BLK_MQ_F_STACKING
    }
}

/// `hw_queue_depth`, the loop module parameter's default (`lo->tag_set.queue_depth`).
pub const LOOP_HW_QUEUE_DEPTH: usize = 128;

/// `LOOP_MAJOR`.
pub const LOOP_MAJOR: u32 = 7;

impl LoopDevice {
    /// `loop_add()` + `LOOP_CONFIGURE`: device `loop<number>` over `backing` from byte
    /// `lo_offset` on, with `lo_flags`, on the blk-mq path (see [`LoopDevice::new_blk_mq`]).
    ///
    /// [`LoopDevice::new_direct`] keeps the earlier model, where `->submit_bio()` stood for
    /// `blk_mq_submit_bio()` without a request layer.
    pub fn new(
        kernel: &Kernel,
        number: u32,
        backing: UntrackedArc<dyn LoopBacking>,
        lo_flags: u32,
        lo_offset: u64,
        variant: LoopVariant,
    ) -> UntrackedArc<LoopDevice> {
        Self::create(kernel, number, backing, lo_flags, lo_offset, variant, true)
    }

    /// The earlier model without a request layer: the device's [`BlockDriver::submit_bio`]
    /// traces `block_getrq` and calls `loop_queue_rq()` itself (no tag, no plug).
    pub fn new_direct(
        kernel: &Kernel,
        number: u32,
        backing: UntrackedArc<dyn LoopBacking>,
        lo_flags: u32,
        lo_offset: u64,
        variant: LoopVariant,
    ) -> UntrackedArc<LoopDevice> {
        Self::create(kernel, number, backing, lo_flags, lo_offset, variant, false)
    }

    /// [`LoopDevice::new`], spelled out: bios reach `loop_queue_rq()` through
    /// `blk_mq_submit_bio()` (tag, request, plug, `blk_mq_try_issue_directly()`), and the
    /// request ends with `blk_mq_end_request()`. The tag set is 6.18's `loop_add()`'s:
    /// `hw_queue_depth` (128) tags, `BLK_MQ_F_STACKING` (and `BLK_MQ_F_NO_SCHED_BY_DEFAULT`,
    /// which the model has no scheduler to need), not `BLK_MQ_F_BLOCKING`: `->queue_rq()` runs
    /// under `rcu_read_lock()` and must not sleep (the blocking I/O is the worker's). The NOWAIT
    /// versions (patch 5/6 as posted in V4 and V5) add `BLK_MQ_F_BLOCKING`, since the NOWAIT
    /// attempt calls `->write_iter()` from `->queue_rq()` and `kiocb_start_write()` may sleep:
    /// dispatch then runs under the tag set's SRCU ([`loop_tag_set_flags`]).
    pub fn new_blk_mq(
        kernel: &Kernel,
        number: u32,
        backing: UntrackedArc<dyn LoopBacking>,
        lo_flags: u32,
        lo_offset: u64,
        variant: LoopVariant,
    ) -> UntrackedArc<LoopDevice> {
        Self::create(kernel, number, backing, lo_flags, lo_offset, variant, true)
    }

    fn create(
        kernel: &Kernel,
        number: u32,
        backing: UntrackedArc<dyn LoopBacking>,
        lo_flags: u32,
        lo_offset: u64,
        variant: LoopVariant,
        blk_mq: bool,
    ) -> UntrackedArc<LoopDevice> {
        let wq = kernel
            .alloc_workqueue(&format!("loop{number}"), WQ_UNBOUND, 0)
            .expect("WQ_UNBOUND alone is a valid flag set");
        UntrackedArc::new_cyclic(|me: &UntrackedWeak<LoopDevice>| {
            let ops: UntrackedWeak<dyn BlkMqOps> = me.clone();
            let mq = blk_mq.then(|| {
                UntrackedArc::new(RequestQueue::new(
                    (LOOP_MAJOR, number),
                    LOOP_HW_QUEUE_DEPTH,
                    loop_tag_set_flags(variant),
                    ops,
                ))
            });
            let own = me.clone();
            let me = me.clone();
            let work = kernel.init_work("loop_rootcg_workfn", move |cx, _| {
                if let Some(lo) = me.upgrade() {
                    lo.loop_process_work(cx);
                }
            });
            LoopDevice {
                me: own,
                mq,
                number,
                backing,
                lo_flags,
                lo_offset,
                variant,
                wq,
                work,
                lo_work_lock: Mutex::new(LoopWork::default()),
                counters: Counters::default(),
                inflight: Mutex::new(InFlightMap::default()),
                tokens: kernel.aio_tokens(),
                stranded: Mutex::new(Vec::new()),
            }
        })
    }

    /// The variant.
    pub fn variant(&self) -> LoopVariant {
        self.variant
    }

    /// The backing file.
    pub fn backing(&self) -> &UntrackedArc<dyn LoopBacking> {
        &self.backing
    }

    /// `/sys/block/loopN/loop/nr_blocking_writes`.
    pub fn nr_blocking_writes(&self) -> u32 {
        self.lo_work_lock.lock().nr_blocking_writes
    }

    /// Commands waiting for the worker.
    pub fn queued(&self) -> usize {
        self.lo_work_lock.lock().cmd_list.len()
    }

    /// `use_aio` writes waiting for the worker: what `lo_nr_blocking_writes` must equal between
    /// two worker runs (simulator introspection, for invariant checks).
    pub fn queued_aio_writes(&self) -> usize {
        self.lo_work_lock
            .lock()
            .cmd_list
            .iter()
            .filter(|c| c.is_aio_write())
            .count()
    }

    /// The counters so far.
    pub fn stats(&self) -> LoopStats {
        let c = &self.counters;
        let g = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        LoopStats {
            nowait_tried: g(&c.nowait_tried),
            nowait_done: g(&c.nowait_done),
            nowait_eagain: g(&c.nowait_eagain),
            nowait_eopnotsupp: g(&c.nowait_eopnotsupp),
            hint_skipped: g(&c.hint_skipped),
            worker_cmds: g(&c.worker_cmds),
            work_queued: g(&c.work_queued),
            short_reads: g(&c.short_reads),
        }
    }

    fn bump(a: &AtomicUsize) {
        a.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests whose completion never came because `cmd->ref` went below zero (check L7).
    pub fn stranded(&self) -> usize {
        self.stranded.lock().len()
    }

    /// Whether `loop_queue_rq()` tries `IOCB_NOWAIT` for a `use_aio` command (patch 5/6, and
    /// V5's `lo_backfile_support_nowait()`): then `lo_rw_aio_prep()` ran there, and V5's
    /// `lo_rw_aio()` does not run it again ("prepared already if we have tried nowait").
    fn tries_nowait(&self) -> bool {
        self.variant.nowait_first
            && (!self.variant.check_fmode_nowait || self.backing.fmode_nowait())
    }

    /// `lo_rw_aio_prep()` (V5 2/6; the first half of 6.18's `lo_rw_aio()`): for a request of more
    /// than one bio (`rq->bio != rq->biotail`), `cmd->bvec = kmalloc_array(nr_bvec,
    /// sizeof(struct bio_vec), GFP_NOIO)` at the allocation site [`LO_RW_AIO_PREP`], which fails
    /// with `-EIO` (`if (!bvec) return -EIO;`); a one-bio request iterates its bio in place
    /// (`cmd->bvec = NULL`). `GFP_NOIO` has `__GFP_DIRECT_RECLAIM`, so failslab's default
    /// `ignore-gfp-wait` spares it: only a one-shot `fail_alloc lo_rw_aio_prep`, `fail-nth`, or
    /// failslab with `ignore-gfp-wait` off fails it. With [`LoopVariant::ref_armed_before_prep`]
    /// `cmd->ref` is set to 1 first (L7's fix).
    fn lo_rw_aio_prep(&self, cmd: &mut LoopCmd, cx: &Cpu) -> Result<(), Errno> {
        if self.variant.ref_armed_before_prep {
            cmd.aio_ref = 1;
        }
        if !cmd.multi_bio() {
            cmd.bvec = None;
            return Ok(());
        }
        match kmalloc_array(
            LO_RW_AIO_PREP,
            cmd.nr_bvec(),
            BIO_VEC_SIZE,
            GfpFlags::GFP_NOIO,
            cx,
        ) {
            Ok(obj) => {
                if let Some(old) = cmd.bvec.replace(obj) {
                    kfree(old);
                }
                Ok(())
            }
            Err(_) => Err(Errno::EIO),
        }
    }

    /// `loop_queue_rq()`: the request's bios (more than one if blk-mq merged them).
    fn loop_queue_rq(&self, bios: Vec<Box<Bio>>, mq_rq: Option<Rq>, cx: &Cpu) {
        let mut cmd = LoopCmd::new(bios, false);
        // blk_mq_start_request(rq), first thing loop_queue_rq() does.
        match &mq_rq {
            Some(rq) => blk_mq_start_request(rq, cx),
            None => block_rq_issue(&cmd.rq(self.number), cx),
        }
        cmd.mq_rq = mq_rq;
        cmd.use_aio = match cmd.op {
            ReqOp::Flush | ReqOp::Discard | ReqOp::WriteZeroes => false,
            // A write in a flush sequence goes to the worker whole (see LoopCmd::preflush).
            ReqOp::Write if cmd.preflush || cmd.postflush => false,
            ReqOp::Read | ReqOp::Write => self.lo_flags & LO_FLAGS_DIRECT_IO != 0,
        };
        if cmd.use_aio && self.tries_nowait() {
            let res = self.lo_rw_aio_nowait(&mut cmd, cx);
            let falls_back = match res {
                Err(Errno::EAGAIN) => true,
                Err(Errno::EOPNOTSUPP) => self.variant.eopnotsupp_falls_back,
                _ => false,
            };
            if !falls_back {
                if cmd.bios.is_some() {
                    self.lo_rw_aio_complete(cmd, res, cx);
                }
                return; // BLK_STS_OK: the request is (being) completed
            }
        }
        self.loop_queue_work(cmd, cx);
    }

    /// `lo_aio_try_nowait()` (patch 6/6).
    fn lo_aio_try_nowait(&self, cmd: &LoopCmd) -> bool {
        if self.backing.is_block_device() || cmd.op == ReqOp::Read {
            return true;
        }
        // READ_ONCE(): read without the lock, as the kernel does.
        self.lo_work_lock.lock().nr_blocking_writes == 0
    }

    /// `lo_rw_aio_nowait()`: the hint, then one `IOCB_NOWAIT` attempt. As posted it completes
    /// the request itself on any result other than `-EIOCBQUEUED`/`-EAGAIN` (with
    /// [`LoopVariant::nowait_completes_on_eopnotsupp`], `-EOPNOTSUPP` included); the command then
    /// carries no bio. A short NOWAIT transfer is reported as `-EAGAIN` (the fallback does it all).
    ///
    /// `lo_rw_aio_prep()` runs first (patch 6/6 consults the hint after it); when it fails,
    /// V5 does `goto fail` → `lo_rw_aio_complete(&cmd->iocb, ret)` before `lo_submit_rw_aio()`
    /// has armed `cmd->ref` (check L7) and returns `-EIO`, which `loop_queue_rq()` answers with
    /// `BLK_STS_OK`.
    fn lo_rw_aio_nowait(&self, cmd: &mut LoopCmd, cx: &Cpu) -> Result<usize, Errno> {
        if let Err(e) = self.lo_rw_aio_prep(cmd, cx) {
            if self.variant.prep_fail_returns_error {
                // Upstream's fix: `return ret`. V5's loop_queue_rq() answers -EIO with
                // BLK_STS_OK and nobody completes the request: it keeps its bios forever.
                if cx.tracepoints_enabled() {
                    tracing::trace!(target: "loop", tracepoint = "biosim_loop_nowait", cpu = cx.id().0, "biosim_loop_nowait: loop{}: lo_rw_aio_prep() {} {} + {} -> {}: lo_rw_aio_nowait() returns it, loop_queue_rq() returns BLK_STS_OK, the request is never completed", self.number, cmd.opf.rwbs(), cmd.sector, cmd.sectors, e.neg_str());
                }
                let kept = cmd.take_all();
                self.stranded.lock().push(kept);
                return Err(e);
            }
            let done = cmd.take_all();
            self.lo_rw_aio_complete(done, Err(e), cx);
            return Err(e);
        }
        if self.variant.hint && !self.lo_aio_try_nowait(cmd) {
            Self::bump(&self.counters.hint_skipped);
            if cx.tracepoints_enabled() {
                tracing::trace!(target: "loop", tracepoint = "biosim_loop_nowait", cpu = cx.id().0, "biosim_loop_nowait: loop{}: lo_aio_try_nowait() false for {} {} + {} (nr_blocking_writes={}): to the worker", self.number, cmd.opf.rwbs(), cmd.sector, cmd.sectors, self.nr_blocking_writes());
            }
            return Err(Errno::EAGAIN);
        }
        Self::bump(&self.counters.nowait_tried);
        let offset = if self.variant.nowait_adds_lo_offset {
            self.lo_offset
        } else {
            0
        };
        let r = self.lo_submit_rw(cmd, offset, true, cx);
        if cx.tracepoints_enabled() {
            tracing::trace!(target: "loop", tracepoint = "biosim_loop_nowait", cpu = cx.id().0, "biosim_loop_nowait: loop{}: IOCB_NOWAIT {} {} + {} -> {}", self.number, cmd.opf.rwbs(), cmd.sector, cmd.sectors, match r { Ok(n) => format!("{n} bytes"), Err(e) => e.neg_str() });
        }
        match r {
            Err(Errno::EIOCBQUEUED) => {} // counted when it completes
            Err(Errno::EAGAIN) => {
                Self::bump(&self.counters.nowait_eagain);
                // `if (ret != -EIOCBQUEUED && ret != -EAGAIN) lo_rw_aio_complete(...)`: on
                // -EAGAIN nothing drops cmd->ref's second reference, so the end work of
                // lo_rw_aio_do_completion(), kiocb_end_write() included, never runs for this
                // attempt; the fallback's lo_submit_rw_aio() starts the write again.
                if self.variant.nowait_ends_write_on_eagain {
                    self.lo_nowait_end_write(cmd, cx);
                }
            }
            Err(Errno::EOPNOTSUPP) => {
                Self::bump(&self.counters.nowait_eopnotsupp);
                if !self.variant.nowait_completes_on_eopnotsupp
                    && self.variant.nowait_ends_write_on_eagain
                {
                    // L3's fix leaves -EOPNOTSUPP to the fallback like -EAGAIN: the attempt's
                    // write must then be ended as well (L6's fix covers both).
                    self.lo_nowait_end_write(cmd, cx);
                }
                if self.variant.nowait_completes_on_eopnotsupp {
                    // `if (ret != -EIOCBQUEUED && ret != -EAGAIN) lo_rw_aio_complete(...)`.
                    let done = cmd.take_all();
                    self.lo_rw_aio_complete(done, r, cx);
                }
            }
            _ => Self::bump(&self.counters.nowait_done),
        }
        r
    }

    /// `lo_submit_rw_aio()` over every segment of every bio of the request (`cmd->bvec`'s
    /// iov_iter), from `(blk_rq_pos(rq) << 9) + offset`.
    /// Returns the bytes done; a NOWAIT call stops at the first short segment and reports
    /// `-EAGAIN` (the fallback redoes the whole command; nothing was half-applied that a retry
    /// would not redo identically).
    fn lo_submit_rw(
        &self,
        cmd: &mut LoopCmd,
        offset: u64,
        nowait: bool,
        cx: &Cpu,
    ) -> Result<usize, Errno> {
        let write = cmd.op == ReqOp::Write;
        if cmd.bios.is_none() {
            return Err(Errno::EIO);
        }
        if !cmd.use_aio {
            // lo_write_simple() -> vfs_iter_write(): file_start_write() ... file_end_write()
            // around the write, balanced in the same context.
            let sb = self.backing.superblock().filter(|_| write);
            if sb.is_some_and(|sb| !sb.sb_start_write(cx)) {
                return Err(Errno::EIO); // the kernel never returns: see kiocb_start_write below
            }
            let r = self.lo_submit_rw_segments(cmd, offset, nowait, cx);
            if let Some(sb) = sb {
                sb.sb_end_write(cx);
            }
            return r;
        }
        // lo_submit_rw_aio(): atomic_set(&cmd->ref, 2), then for a write kiocb_start_write() on
        // the backing file's superblock (the same in the base's lo_rw_aio()).
        cmd.aio_ref = 2;
        // Twin `bug-loop-no-kiocb-start-write`: no freeze protection taken, nothing to leak.
        if write && !cfg!(feature = "bug-loop-no-kiocb-start-write") {
            if let Some(sb) = self.backing.superblock() {
                match sb.kiocb_start_write(cx) {
                    // A kiocb write still held from an earlier attempt is overwritten without
                    // kiocb_end_write(): the same iocb, its count taken twice (check L6).
                    Some(k) => cmd.kiocb = Some(k),
                    // The freeze never thaws: the kernel sleeps here forever (the hung-task
                    // detector's report); the model fails the command so the run can end
                    // (with the completion's reference, so the failure completes it).
                    None => {
                        cmd.aio_ref = 1;
                        return Err(Errno::EIO);
                    }
                }
            }
        }
        let r = self.lo_submit_rw_segments(cmd, offset, nowait, cx);
        if r != Err(Errno::EIOCBQUEUED) {
            // The submitter's lo_rw_aio_do_completion(): 2 -> 1 (the asynchronous path dropped
            // it when it parked the command).
            cmd.aio_ref -= 1;
        }
        r
    }

    /// The I/O of [`LoopDevice::lo_submit_rw`]: `->read_iter()`/`->write_iter()` over every
    /// segment, or the asynchronous submission.
    fn lo_submit_rw_segments(
        &self,
        cmd: &mut LoopCmd,
        offset: u64,
        nowait: bool,
        cx: &Cpu,
    ) -> Result<usize, Errno> {
        let write = cmd.op == ReqOp::Write;
        if cmd.bios.is_none() {
            return Err(Errno::EIO);
        }
        let mut pos = (cmd.sector << SECTOR_SHIFT) + offset;
        if self.backing.is_async()
            && cmd.use_aio
            && !self.backing.completes_inline(write, pos, cmd.data_len())
        {
            return self.lo_submit_aio(cmd, pos, nowait, cx);
        }
        let mut done = 0;
        let backing = &self.backing;
        for BioVec { data } in cmd.segments_mut() {
            let n = backing.rw(write, pos, data, nowait)?;
            done += n;
            if n < data.len() {
                if nowait {
                    return Err(Errno::EAGAIN);
                }
                return Ok(done);
            }
            pos += n as u64;
        }
        Ok(done)
    }

    /// The asynchronous half of `lo_submit_rw_aio()`: the command is parked until
    /// `ki_complete()` and the I/O handed to the backing; `-EIOCBQUEUED` tells the caller the
    /// command is no longer its own.
    fn lo_submit_aio(
        &self,
        cmd: &mut LoopCmd,
        pos: u64,
        nowait: bool,
        cx: &Cpu,
    ) -> Result<usize, Errno> {
        let cpu = cx.id();
        let bytes = cmd.bytes();
        // A one-segment request lends its segment's buffer to the I/O (it comes back in
        // ki_complete()), as 6.18's lo_rw_aio() iterates the bio's own bvec. A merged or
        // multi-segment one sends a copy: a model shortcut (the kernel uses the bio's bvec for any
        // single-bio request, and cmd->bvec, page references, not a copy, for a merged one).
        // Twin `bug-loop-aio-segment-not-returned`: the lent buffer is not put back at completion.
        let (data, lent) = match cmd.single_segment_mut().map(std::mem::take) {
            Some(seg) => {
                let n = seg.len();
                (seg, Some(n))
            }
            None if cmd.op == ReqOp::Write => (cmd.data(), None),
            None => (vec![0; cmd.data_len()], None),
        };
        let bios = cmd.bios.take();
        let lower = self.backing.lower_device().map(|dev| {
            let mut b = cx
                .kernel()
                .bio_alloc(cmd.op, pos >> SECTOR_SHIFT)
                .with_flags(ReqFlags::REQ_SYNC);
            b.bi_bdev = Some(dev);
            b.bi_iter.bi_size = bytes;
            b
        });
        // Unique across every device of the kernel, so several loop devices can share one
        // asynchronous backing (two partitions of one image at different lo_offsets).
        let token = self.kernel_token();
        let req = AioRequest {
            token,
            write: cmd.op == ReqOp::Write,
            pos,
            data,
            nowait,
            cpu,
        };
        // The submitter's lo_rw_aio_do_completion() (2 -> 1) happens before ki_complete() can
        // run here (the backing completes later, from its interrupt).
        let parked = LoopCmd {
            bios,
            aio_ref: cmd.aio_ref - 1,
            kiocb: cmd.kiocb.take(),
            bvec: cmd.bvec.take(),
            ..cmd.shell()
        };
        let lower_rq = lower.as_ref().map(|b| RqTrace {
            dev: b.bi_bdev.unwrap_or_default(),
            rwbs: b.bi_opf.rwbs_buf(),
            sector: b.bi_iter.bi_sector,
            nr_sector: b.sectors(),
        });
        self.inflight
            .lock()
            .insert(token, (parked, nowait, lower_rq.clone(), lent));
        match self.backing.submit_aio_cx(req, cx) {
            Ok(()) => {
                if let (Some(b), Some(rq)) = (&lower, &lower_rq) {
                    Self::lower_submit(b, rq, cx);
                }
                Err(Errno::EIOCBQUEUED)
            }
            Err((back_req, e)) => {
                // Not started: the command is the caller's again, with its lent buffer.
                if let Some((back, _, _, lent)) = self.inflight.lock().remove(&token) {
                    cmd.bios = back.bios;
                    cmd.kiocb = back.kiocb;
                    cmd.bvec = back.bvec;
                    if let Some(len) = lent {
                        self.lo_aio_return_segment(cmd, len, back_req.data, cx);
                    }
                }
                Err(e)
            }
        }
    }

    /// Puts the segment buffer a one-segment command lent to its asynchronous I/O
    /// ([`LoopCmd::single_segment_mut`]) back into its bio. A backing that hands back a buffer
    /// of another length broke [`LoopBacking::submit_aio`]'s contract: a WARN, and the segment
    /// keeps its length (the bytes it did hand back, zeros after them).
    fn lo_aio_return_segment(&self, cmd: &mut LoopCmd, len: usize, mut data: Vec<u8>, cx: &Cpu) {
        if cfg!(feature = "bug-loop-aio-segment-not-returned") {
            // The buggy twin: the bio keeps the emptied segment; a read's data never lands.
            return;
        }
        if data.len() != len {
            cx.warn(&format!(
                "biosim: loop{}: the backing handed back {} bytes for a {len}-byte segment (LoopBacking::submit_aio's contract)",
                self.number,
                data.len()
            ));
            data.resize(len, 0);
        }
        match cmd.single_segment_mut() {
            Some(seg) => *seg = data,
            None => cx.warn(&format!(
                "biosim: loop{}: a lent segment's command lost its bio",
                self.number
            )),
        }
    }

    /// `lo_rw_aio_complete()`, the `ki_complete()` of an asynchronous I/O, called by the backing
    /// in its completion interrupt on the submitting CPU: the read data lands in the bio;
    /// `lo_rw_aio_do_completion()` requeues a command whose result was `-EAGAIN` ("-EAGAIN could
    /// be returned from bdev's ->ki_complete") and completes the others. An unknown token is a
    /// WARN (nothing to complete).
    pub fn lo_rw_aio_complete_async(
        &self,
        token: u64,
        res: Result<usize, Errno>,
        data: Vec<u8>,
        cx: &Cpu,
    ) {
        let Some((mut cmd, nowait, lower, lent)) = self.inflight.lock().remove(&token) else {
            cx.warn(&format!(
                "drivers/block/loop.c: ki_complete() for unknown kiocb {token}"
            ));
            return;
        };
        if let Some(len) = lent {
            // The I/O went straight into (or out of) the bio's own segment: it comes back.
            self.lo_aio_return_segment(&mut cmd, len, data, cx);
        } else if let (ReqOp::Read, Ok(n)) = (cmd.op, res) {
            let mut at = 0;
            for v in cmd.segments_mut() {
                let end = (at + v.data.len()).min(n).min(data.len());
                if at < end {
                    v.data[..end - at].copy_from_slice(&data[at..end]);
                }
                at += v.data.len();
            }
        }
        if let Some(rq) = &lower {
            // The backing device's request ends before the file system calls ki_complete().
            block_rq_complete(rq, res.map_or_else(|e| e.as_neg_i32(), |_| 0), cx);
        }
        // A short NOWAIT transfer falls back like -EAGAIN, as on the synchronous path.
        let want = cmd.data_len();
        let again = res == Err(Errno::EAGAIN) || (nowait && matches!(res, Ok(n) if n < want));
        if nowait {
            match res {
                _ if again => Self::bump(&self.counters.nowait_eagain),
                Err(Errno::EOPNOTSUPP) => Self::bump(&self.counters.nowait_eopnotsupp),
                _ => Self::bump(&self.counters.nowait_done),
            }
        }
        if cx.tracepoints_enabled() {
            tracing::trace!(target: "loop", tracepoint = "biosim_loop_aio_complete", cpu = cx.id().0, "biosim_loop_aio_complete: loop{}: ki_complete {} {} + {} -> {}{}", self.number, cmd.opf.rwbs(), cmd.sector, cmd.sectors, match res { Ok(n) => format!("{n} bytes"), Err(e) => e.neg_str() }, if nowait { " (NOWAIT)" } else { "" });
        }
        if again {
            // lo_rw_aio_do_completion(): the last reference (1 -> 0), then V5's `cmd->ret ==
            // -EAGAIN` requeue, which returns before the end work: kiocb_end_write() does not run
            // and the worker's lo_submit_rw_aio() starts the write again. (For a block device
            // the superblock is the bdev pseudo file system's, which nobody freezes.)
            cmd.aio_ref -= 1;
            if self.variant.nowait_ends_write_on_eagain {
                self.lo_nowait_end_write(&mut cmd, cx);
            }
            self.loop_queue_work(cmd, cx);
            return;
        }
        self.lo_rw_aio_complete(cmd, res, cx);
    }

    /// The fix [`LoopVariant::nowait_ends_write_on_eagain`]: `kiocb_end_write()` for a write
    /// whose NOWAIT attempt came back `-EAGAIN`, before the fallback starts it again.
    fn lo_nowait_end_write(&self, cmd: &mut LoopCmd, cx: &Cpu) {
        if let (Some(k), Some(sb)) = (cmd.kiocb.take(), self.backing.superblock()) {
            sb.kiocb_end_write(k, cx);
        }
    }

    /// The backing file's direct I/O reaching its device (iomap's `submit_bio()`): the bio, its
    /// request, its insertion into the device's I/O scheduler (the live machine's disk runs
    /// mq-deadline; the loop device runs none, so it has no insert), the issue.
    /// The bio carries `REQ_SYNC` for reads and writes, as this kernel's iomap bios print (`RS`,
    /// `WS` in the live recording).
    fn lower_submit(bio: &Bio, rq: &RqTrace, cx: &Cpu) {
        crate::block::trace::block_bio_queue(bio, cx);
        block_getrq(rq, cx);
        block_rq_insert(rq, cx);
        block_rq_issue(rq, cx);
    }

    fn kernel_token(&self) -> u64 {
        self.tokens.fetch_add(1, Ordering::Relaxed) as u64
    }

    /// Asynchronous commands in flight (simulator introspection).
    pub fn aio_in_flight(&self) -> usize {
        self.inflight.lock().len()
    }

    /// `lo_rw_aio_complete()` → `lo_rw_aio_do_completion()` → `blk_mq_complete_request()`: a
    /// loop queue has one hardware queue, so `blk_mq_complete_request_remote()` raises
    /// `BLOCK_SOFTIRQ` and `lo_complete_rq()` ends the bio there (on a 1-CPU machine, inline).
    ///
    /// `lo_complete_rq()`: an error ends the bio with `errno_to_blk_status()`; a complete
    /// transfer, a non-read, or a short write ends it `BLK_STS_OK` (the kernel does not fail a
    /// short write); a read of nothing is zero-filled and fails with `BLK_STS_IOERR`. A short
    /// read with data is requeued for the rest in the kernel (`blk_update_request()` +
    /// `blk_mq_requeue_request()`); on a blocking read that only happens when the file is shorter
    /// than the device, where the requeued rest reads nothing and fails the same way, so biosim
    /// zero-fills the rest and fails it at once.
    fn lo_rw_aio_complete(&self, mut cmd: LoopCmd, res: Result<usize, Errno>, cx: &Cpu) {
        // lo_rw_aio_do_completion(): `if (!atomic_dec_and_test(&cmd->ref)) return;`.
        if cmd.use_aio {
            cmd.aio_ref -= 1;
            if cmd.aio_ref > 0 {
                // The submitter still holds its reference: never the case in the model, whose
                // submitter drops it before any completion can run.
                cx.warn(&format!(
                    "drivers/block/loop.c: loop{} lo_rw_aio_do_completion(): cmd->ref still {} at ki_complete()",
                    self.number, cmd.aio_ref
                ));
            } else if cmd.aio_ref < 0 {
                // The completion of a command whose cmd->ref was never armed (V5's `goto fail`
                // after lo_rw_aio_prep()): the stale 0 becomes -1, atomic_dec_and_test() is
                // false, and nothing ever completes the request (check L7).
                if cx.tracepoints_enabled() {
                    tracing::trace!(target: "loop", tracepoint = "biosim_loop_aio_complete", cpu = cx.id().0, "biosim_loop_aio_complete: loop{}: lo_rw_aio_do_completion() {} {} + {} -> {}: cmd->ref {} -> {}, the request is never completed", self.number, cmd.opf.rwbs(), cmd.sector, cmd.sectors, match res { Ok(n) => format!("{n} bytes"), Err(e) => e.neg_str() }, cmd.aio_ref + 1, cmd.aio_ref);
                }
                if cmd.bios.is_some() {
                    self.stranded.lock().push(cmd);
                }
                return;
            }
        }
        // The end work: kfree(cmd->bvec), and for a write kiocb_end_write().
        if let Some(b) = cmd.bvec.take() {
            kfree(b);
        }
        if let Some(k) = cmd.kiocb.take() {
            match self.backing.superblock() {
                Some(sb) => sb.kiocb_end_write(k, cx),
                None => drop(k),
            }
        }
        self.lo_complete_rq(cmd, res, cx);
    }

    /// `blk_mq_complete_request()` → `lo_complete_rq()`, without `cmd->ref`: what
    /// `loop_handle_cmd()` does for a command `do_req_filebacked()` did not hand to
    /// `lo_rw_aio_complete()` (a non-aio one, or 6.18's `lo_rw_aio()` returning `-EIO` when its
    /// `bvec` allocation failed). A command without bios has nothing left to end.
    fn lo_complete_rq(&self, mut cmd: LoopCmd, res: Result<usize, Errno>, cx: &Cpu) {
        let Some(mut bios) = cmd.bios.take() else {
            return;
        };
        let want: usize = bios.iter().map(|b| b.data_len()).sum();
        let status = match res {
            Err(e) => errno_to_blk_status(e.as_neg_i32()),
            Ok(n) if n >= want || cmd.op != ReqOp::Read => BLK_STS_OK,
            Ok(n) => {
                Self::bump(&self.counters.short_reads);
                let mut at = 0;
                for v in bios.iter_mut().flat_map(|b| b.bi_io_vec.iter_mut()) {
                    let keep = n.saturating_sub(at).min(v.data.len());
                    v.data[keep..].fill(0);
                    at += v.data.len();
                }
                BLK_STS_IOERR
            }
        };
        let rq = cmd.rq(self.number);
        let mq_rq = cmd.mq_rq.take();
        // lo_complete_rq() -> blk_mq_end_request() -> blk_update_request(): the request's
        // tracepoint, then every bio's end.
        self.blk_mq_complete_request(cx, move |cx: &Cpu| match mq_rq {
            Some(mq_rq) => {
                mq_rq.put_bios(bios);
                blk_mq_end_request(&mq_rq, status, cx);
            }
            None => {
                block_rq_complete(&rq, crate::block::blk_status_to_errno(status), cx);
                for bio in bios {
                    bio_endio_status(bio, status, cx);
                }
            }
        });
    }

    /// `blk_mq_complete_request()` of a loop queue (one hardware queue): with more than one CPU,
    /// `blk_mq_complete_request_remote()` raises `BLOCK_SOFTIRQ` and `end` runs there; on a
    /// 1-CPU machine, inline.
    fn blk_mq_complete_request(&self, cx: &Cpu, end: impl FnOnce(&Cpu) + Send + 'static) {
        if cx.kernel().nr_cpus() > 1 {
            cx.kernel()
                .raise_softirq(cx, SoftirqVec::Block, Box::new(end));
        } else {
            end(cx);
        }
    }

    /// `lockdep_assert_held()` of the variant's lock in `loop_{inc,dec}_blocking_writes()`: a
    /// WARN each time it does not hold, while lockdep is on.
    fn assert_blocking_writes_lock(&self, cx: &Cpu, site: &str) {
        // Logged as a report; the kernel WARNs and carries on.
        let _ = cx.lockdep_assert_held_at(
            self.variant.asserted_lock,
            format_args!("drivers/block/loop.c: {site}()"),
        );
    }

    /// `loop_queue_work()`: under `spin_lock_irq(&lo->lo_work_lock)`, count a blocking write,
    /// add the command to `rootcg_cmd_list`, `queue_work()`.
    fn loop_queue_work(&self, cmd: LoopCmd, cx: &Cpu) {
        let irq = cx.local_irq_save();
        let (held, report) = cx.lock_acquire(LockClass::Spinlock, LO_WORK_LOCK);
        drop(report); // the kernel prints and carries on; the report is already logged
        if cmd.use_aio {
            self.assert_blocking_writes_lock(cx, "loop_inc_blocking_writes");
        }
        {
            let mut w = self.lo_work_lock.lock();
            if cmd.is_aio_write() {
                w.nr_blocking_writes += 1;
            }
            w.cmd_list.push_back(cmd);
        }
        if cx.kernel().queue_work(&self.wq, self.work, cx) {
            Self::bump(&self.counters.work_queued);
        }
        cx.lock_release(held);
        cx.local_irq_restore(irq);
    }

    /// `loop_process_work()`: take one command at a time under the lock, handle it unlocked,
    /// `cond_resched()`, and uncount it under the lock again. (The kernel reads `cmd->use_aio`
    /// and the op after handling; the model keeps them from before, which is the same while the
    /// backing completes synchronously.)
    fn loop_process_work(&self, cx: &Cpu) {
        loop {
            let irq = cx.local_irq_save();
            let (held, _) = cx.lock_acquire(LockClass::Spinlock, LO_WORK_LOCK);
            let cmd = self.lo_work_lock.lock().cmd_list.pop_front();
            cx.lock_release(held);
            cx.local_irq_restore(irq);
            let Some(cmd) = cmd else { return };
            let (use_aio, aio_write) = (cmd.use_aio, cmd.is_aio_write());
            self.loop_handle_cmd(cmd, cx);
            cx.cond_resched();
            let irq = cx.local_irq_save();
            let (held, _) = cx.lock_acquire(LockClass::Spinlock, LO_WORK_LOCK);
            if use_aio {
                self.assert_blocking_writes_lock(cx, "loop_dec_blocking_writes");
            }
            if aio_write {
                let mut w = self.lo_work_lock.lock();
                match w.nr_blocking_writes.checked_sub(1) {
                    Some(n) => w.nr_blocking_writes = n,
                    None => {
                        drop(w);
                        cx.warn("drivers/block/loop.c: lo_nr_blocking_writes underflow in loop_dec_blocking_writes()");
                    }
                }
            }
            cx.lock_release(held);
            cx.local_irq_restore(irq);
        }
    }

    /// `loop_handle_cmd()` → `do_req_filebacked()`: the blocking I/O of one command. Errors of
    /// the non-aio operations become `-EIO` (except `-EOPNOTSUPP`), as `loop_handle_cmd()` does.
    fn loop_handle_cmd(&self, mut cmd: LoopCmd, cx: &Cpu) {
        Self::bump(&self.counters.worker_cmds);
        if cmd.bios.is_none() {
            cx.report(
                ReportKind::Bug,
                format!(
                    "block/blk-mq.c: loop{} request {} {} + {} completed twice: lo_rw_aio_nowait() completed it on -EOPNOTSUPP and loop_queue_rq() queued it to the worker",
                    self.number, cmd.opf.rwbs(), cmd.sector, cmd.sectors
                ),
            );
            return;
        }
        if cx.tracepoints_enabled() {
            tracing::trace!(target: "loop", tracepoint = "biosim_loop_handle_cmd", cpu = cx.id().0, "biosim_loop_handle_cmd: loop{}: worker: {} {} + {} (blocking)", self.number, cmd.opf.rwbs(), cmd.sector, cmd.sectors);
        }
        let _ = cx.might_sleep_at("drivers/block/loop.c:loop_handle_cmd");
        // do_req_filebacked(): pos = (blk_rq_pos(rq) << 9) + lo->lo_offset.
        let pos = (cmd.sector << SECTOR_SHIFT) + self.lo_offset;
        let len = u64::from(cmd.bytes());
        if cmd.use_aio && matches!(cmd.op, ReqOp::Read | ReqOp::Write) && !self.tries_nowait() {
            if let Err(e) = self.lo_rw_aio_prep(&mut cmd, cx) {
                return self.lo_rw_aio_prep_failed(cmd, e, cx);
            }
        }
        let res = match cmd.op {
            ReqOp::Read | ReqOp::Write => {
                let pre = if cmd.preflush {
                    self.backing.fsync()
                } else {
                    Ok(())
                };
                let r = pre.and_then(|()| self.lo_submit_rw(&mut cmd, self.lo_offset, false, cx));
                match r {
                    Ok(n) if cmd.postflush => self.backing.fsync().map(|()| n),
                    r => r,
                }
            }
            ReqOp::Flush => self.backing.fsync().map(|()| 0),
            ReqOp::Discard => self
                .backing
                .fallocate(Fallocate::PunchHole, pos, len)
                .map(|()| 0),
            ReqOp::WriteZeroes => self
                .backing
                .fallocate(Fallocate::ZeroRange, pos, len)
                .map(|()| 0),
        };
        if res == Err(Errno::EIOCBQUEUED) {
            return; // ki_complete() ends it
        }
        let res = match (cmd.op, cmd.use_aio, res) {
            (ReqOp::Read | ReqOp::Write, true, r) => r,
            (_, _, Err(Errno::EOPNOTSUPP)) => Err(Errno::EOPNOTSUPP),
            (_, _, Err(_)) => Err(Errno::EIO),
            (ReqOp::Read | ReqOp::Write, false, Ok(n)) => Ok(n),
            (_, _, Ok(_)) => Ok(cmd.data_len()),
        };
        self.lo_rw_aio_complete(cmd, res, cx);
    }

    /// The worker's `lo_rw_aio()` found `lo_rw_aio_prep()` failing (`-EIO`).
    ///
    /// Base (6.18): `lo_rw_aio()` returns `-EIO` before anything is submitted, and
    /// `loop_handle_cmd()` (`ret != -EIOCBQUEUED`) completes the request once:
    /// `cmd->ret = -EIO`, `blk_mq_complete_request()`, `BLK_STS_IOERR` for every bio. The twin
    /// `bug-loop-prep-fail-completes-twice` completes it in `lo_rw_aio()` as well and still
    /// returns the error: blk-mq's `WARN_ON_ONCE(req_ref_zero(rq))` catches the second end.
    ///
    /// V5 (and V4, v5-no-hint) on a backing it does not try NOWAIT on: `goto fail` →
    /// `lo_rw_aio_complete(&cmd->iocb, -EIO)` with `cmd->ref` never armed (check L7), and
    /// `lo_rw_aio()` returns `-EIOCBQUEUED`, so `loop_handle_cmd()` does nothing more. With
    /// [`LoopVariant::prep_fail_returns_error`] (upstream's fix) it is the base's path.
    fn lo_rw_aio_prep_failed(&self, cmd: LoopCmd, e: Errno, cx: &Cpu) {
        // Upstream's fix (`return ret`) makes the worker's failure the base's.
        if self.variant.nowait_first && !self.variant.prep_fail_returns_error {
            return self.lo_rw_aio_complete(cmd, Err(e), cx);
        }
        if cfg!(feature = "bug-loop-prep-fail-completes-twice") {
            let again = cmd.shell();
            self.lo_complete_rq(cmd, Err(e), cx);
            if let Some(rq) = again.mq_rq {
                // loop_handle_cmd(): the request is completed a second time, without bios.
                self.blk_mq_complete_request(cx, move |cx: &Cpu| {
                    blk_mq_end_request(&rq, BLK_STS_IOERR, cx)
                });
            }
            return;
        }
        // loop_handle_cmd(): `cmd->ret = ret ? -EIO : 0`.
        self.lo_complete_rq(cmd, Err(Errno::EIO), cx);
    }
}

impl BlockDriver for LoopDevice {
    fn disk_name(&self) -> String {
        format!("loop{}", self.number)
    }

    fn devt(&self) -> (u32, u32) {
        (LOOP_MAJOR, self.number)
    }

    fn limits(&self) -> QueueLimits {
        QueueLimits {
            read_only: self.lo_flags & LO_FLAGS_READ_ONLY != 0,
            // blk_mq_alloc_queue() gives every blk-mq queue BLK_FEAT_NOWAIT.
            nowait: true,
            // 512-byte logical blocks; the kernel's loop_update_limits() would raise this to the
            // backing file's DIO alignment, which is 512 on this machine's ext4.
            ..QueueLimits::new(self.backing.size().saturating_sub(self.lo_offset))
        }
    }

    /// `blk_mq_submit_bio()`: a request for the bio (`block_getrq`), issued directly (a loop
    /// device has no I/O scheduler and the submitter no plug here: no `block_rq_insert`, as the
    /// live kernel shows), so `->queue_rq()` runs in the submitter's context.
    fn submit_bio(&self, bio: Box<Bio>, cx: &Cpu) {
        block_getrq(
            &RqTrace {
                dev: self.devt(),
                rwbs: bio.bi_opf.rwbs_buf(),
                sector: bio.bi_iter.bi_sector,
                nr_sector: bio.sectors(),
            },
            cx,
        );
        self.loop_queue_rq(vec![bio], None, cx);
    }

    fn bdev(&self) -> Option<UntrackedArc<dyn BlockDriver>> {
        self.me
            .upgrade()
            .map(|a| a as UntrackedArc<dyn BlockDriver>)
    }

    fn mq_queue(&self) -> Option<UntrackedArc<RequestQueue>> {
        self.mq.clone()
    }
}

/// `loop_mq_ops.queue_rq` of a [`LoopDevice::new_blk_mq`] device.
impl BlkMqOps for LoopDevice {
    fn queue_rq(&self, rq: &Rq, cx: &Cpu) -> crate::block::BlkStatus {
        let bios = rq.take_bios();
        if bios.is_empty() {
            blk_mq_end_request(rq, BLK_STS_IOERR, cx);
        } else {
            self.loop_queue_rq(bios, Some(rq.clone()), cx);
        }
        BLK_STS_OK
    }
}

/// An in-memory backing file whose `IOCB_NOWAIT` answers follow a filesystem's direct I/O
/// (ext4's `ext4_dio_write_checks()`, XFS's `xfs_file_dio_write_aligned()`): a NOWAIT **write**
/// that would allocate blocks (any 4 KiB block of the range never written, i.e. a hole of a sparse
/// file) returns `-EAGAIN`; overwrites and reads do not block. The blocking path allocates.
///
/// Other backings: `with_fmode_nowait(false)` is a file without `FMODE_NOWAIT`, which ignores
/// `IOCB_NOWAIT` and simply does the I/O; `refusing_nowait()` returns `-EOPNOTSUPP` to every NOWAIT
/// call (an ext4 file whose direct I/O falls back to buffered I/O, e.g. under `data=journal`,
/// refuses a NOWAIT write that way); `as_block_device()` sets `S_ISBLK`.
#[derive(Debug)]
pub struct MemBacking {
    state: Mutex<MemState>,
    size: u64,
    fmode_nowait: bool,
    block_device: bool,
    refuse_nowait: bool,
    asynchronous: bool,
    full: bool,
    lower: Option<(u32, u32)>,
    /// The superblock of the file system the file lives on ([`MEM_BACKING_S_ID`]), or of the
    /// bdev pseudo file system for [`MemBacking::as_block_device`].
    sb: SuperBlock,
}

/// The `s_id` of the file system a [`MemBacking`] file lives on (a disk's name, as ext4 and XFS
/// set it).
pub const MEM_BACKING_S_ID: &str = "vdb";

/// The lockdep classes of the bdev pseudo file system's `s_writers` (`bd_type`, registered at
/// boot before any disk file system; the `#N` suffix is the model's choice).
pub const BDEV_SB_WRITERS_CLASSES: [&str; 3] = ["sb_writers#1", "sb_pagefaults#1", "sb_internal#1"];

#[derive(Debug, Default)]
struct MemState {
    /// Asynchronous I/O started and not yet completed (the "device queue").
    pending: VecDeque<AioRequest>,
    data: std::collections::HashMap<u64, Vec<u8>>, // 4 KiB block index → contents
    syncs: u64,
    /// The next NOWAIT call fails with this errno (one-shot contention).
    fail_next_nowait: Option<Errno>,
}

/// The allocation unit of [`MemBacking`].
pub const MEM_BLOCK: u64 = 4096;

impl MemBacking {
    /// A sparse file of `size` bytes (every block a hole), supporting NOWAIT.
    pub fn sparse(size: u64) -> Self {
        MemBacking {
            state: Mutex::new(MemState::default()),
            size,
            fmode_nowait: true,
            block_device: false,
            refuse_nowait: false,
            asynchronous: false,
            full: false,
            lower: None,
            sb: SuperBlock::new(MEM_BACKING_S_ID, SB_WRITERS_CLASSES_3),
        }
    }

    /// Makes reads and writes asynchronous: `submit_aio` queues them, and
    /// [`MemBacking::complete_next`] performs the oldest and calls its `ki_complete()`.
    pub fn asynchronous(mut self) -> Self {
        self.asynchronous = true;
        self
    }

    /// Asynchronous requests waiting for [`MemBacking::complete_next`].
    pub fn pending(&self) -> usize {
        self.state.lock().pending.len()
    }

    /// Performs the oldest pending asynchronous request (with its `IOCB_NOWAIT` rules) and
    /// calls `lo`'s `ki_complete()` for it in `cx`'s context (the caller runs this in the
    /// device's interrupt). Returns whether there was one.
    pub fn complete_next(&self, lo: &LoopDevice, cx: &Cpu) -> bool {
        let Some(mut req) = self.state.lock().pending.pop_front() else {
            return false;
        };
        let res = self.rw(req.write, req.pos, &mut req.data, req.nowait);
        lo.lo_rw_aio_complete_async(req.token, res, req.data, cx);
        true
    }

    /// A fully allocated file of `size` bytes (zeros): NOWAIT never blocks.
    pub fn preallocated(size: u64) -> Self {
        let b = Self::sparse(size);
        {
            let mut st = b.state.lock();
            for i in 0..size.div_ceil(MEM_BLOCK) {
                st.data.insert(i, vec![0; MEM_BLOCK as usize]);
            }
        }
        b
    }

    /// Sets `FMODE_NOWAIT`.
    pub fn with_fmode_nowait(mut self, v: bool) -> Self {
        self.fmode_nowait = v;
        self
    }

    /// Every NOWAIT call returns `-EOPNOTSUPP`.
    pub fn refusing_nowait(mut self) -> Self {
        self.refuse_nowait = true;
        self
    }

    /// A full filesystem: a write that would allocate a block fails with `-ENOSPC`.
    pub fn full(mut self) -> Self {
        self.full = true;
        self
    }

    /// Puts the file on a block device `dev` whose requests are traced
    /// ([`LoopBacking::lower_device`]): a file on a disk file system, as the live calibration's
    /// backing file is. Its reads of holes then complete inline without reaching the device
    /// ([`LoopBacking::completes_inline`]).
    pub fn with_lower_device(mut self, dev: (u32, u32)) -> Self {
        self.lower = Some(dev);
        self
    }

    /// Makes it a block device (`S_ISBLK`).
    pub fn as_block_device(mut self) -> Self {
        self.block_device = true;
        // A block device file's inode lives on the bdev pseudo file system (`blockdev_superblock`),
        // whose sb nothing freezes (`fsfreeze` and `freeze_bdev()` freeze the file system
        // mounted on the device, another superblock).
        self.sb = SuperBlock::new("bdev", BDEV_SB_WRITERS_CLASSES);
        self
    }

    /// The next NOWAIT call returns `-EAGAIN` (lock contention), whatever it asks.
    pub fn refuse_nowait_once(&self) {
        self.state.lock().fail_next_nowait = Some(Errno::EAGAIN);
    }

    /// Allocated blocks.
    pub fn allocated_blocks(&self) -> usize {
        self.state.lock().data.len()
    }

    /// `fsync()` calls so far.
    pub fn syncs(&self) -> u64 {
        self.state.lock().syncs
    }
}

impl LoopBacking for MemBacking {
    fn size(&self) -> u64 {
        self.size
    }

    fn is_async(&self) -> bool {
        self.asynchronous
    }

    /// A filesystem refuses a NOWAIT request inside `->write_iter()`, before anything is queued
    /// (`-EAGAIN` for a write that would allocate, `-EOPNOTSUPP` from a refusing file): those
    /// answers are synchronous here too. Only a block device's one-shot refusal
    /// ([`MemBacking::refuse_nowait_once`]) arrives with the completion, as a bdev's
    /// `ki_complete(-EAGAIN)` can.
    fn submit_aio(&self, req: AioRequest) -> Result<(), (AioRequest, Errno)> {
        if !self.asynchronous {
            return Err((req, Errno::EOPNOTSUPP));
        }
        if req.nowait && self.fmode_nowait && !self.block_device {
            if self.refuse_nowait {
                return Err((req, Errno::EOPNOTSUPP));
            }
            let end = (req.pos + req.data.len() as u64).min(self.size);
            let st = self.state.lock();
            let hole = req.write
                && req.pos < end
                && (req.pos / MEM_BLOCK..=(end - 1) / MEM_BLOCK).any(|b| !st.data.contains_key(&b));
            if hole {
                return Err((req, Errno::EAGAIN));
            }
        }
        self.state.lock().pending.push_back(req);
        Ok(())
    }

    fn is_block_device(&self) -> bool {
        self.block_device
    }

    fn lower_device(&self) -> Option<(u32, u32)> {
        self.lower
    }

    /// On a lower device, a read of nothing but holes: iomap zero-fills it without a bio.
    fn completes_inline(&self, write: bool, pos: u64, len: usize) -> bool {
        if self.lower.is_none() || write || len == 0 {
            return false;
        }
        let end = (pos + len as u64).min(self.size);
        let st = self.state.lock();
        pos < end && (pos / MEM_BLOCK..=(end - 1) / MEM_BLOCK).all(|b| !st.data.contains_key(&b))
    }

    fn fmode_nowait(&self) -> bool {
        self.fmode_nowait
    }

    fn superblock(&self) -> Option<&SuperBlock> {
        Some(&self.sb)
    }

    fn rw(&self, write: bool, pos: u64, buf: &mut [u8], nowait: bool) -> Result<usize, Errno> {
        // A file without FMODE_NOWAIT does not look at IOCB_NOWAIT.
        let nowait = nowait && self.fmode_nowait;
        if nowait && self.refuse_nowait {
            return Err(Errno::EOPNOTSUPP);
        }
        let end = (pos + buf.len() as u64).min(self.size);
        if pos >= end {
            return if write && !buf.is_empty() {
                Err(Errno::ENOSPC)
            } else {
                Ok(0)
            };
        }
        let mut st = self.state.lock();
        if nowait {
            if let Some(e) = st.fail_next_nowait.take() {
                return Err(e);
            }
        }
        let (first, last) = (pos / MEM_BLOCK, (end - 1) / MEM_BLOCK);
        if write
            && nowait
            && !self.block_device
            && (first..=last).any(|b| !st.data.contains_key(&b))
        {
            return Err(Errno::EAGAIN);
        }
        if write && self.full && (first..=last).any(|b| !st.data.contains_key(&b)) {
            return Err(Errno::ENOSPC);
        }
        let mut off = pos;
        while off < end {
            let (b, within) = (off / MEM_BLOCK, (off % MEM_BLOCK) as usize);
            let n = ((MEM_BLOCK as usize) - within).min((end - off) as usize);
            let at = (off - pos) as usize;
            if write {
                let blk = st
                    .data
                    .entry(b)
                    .or_insert_with(|| vec![0; MEM_BLOCK as usize]);
                blk[within..within + n].copy_from_slice(&buf[at..at + n]);
            } else {
                match st.data.get(&b) {
                    Some(blk) => buf[at..at + n].copy_from_slice(&blk[within..within + n]),
                    None => buf[at..at + n].fill(0),
                }
            }
            off += n as u64;
        }
        Ok((end - pos) as usize)
    }

    fn fsync(&self) -> Result<(), Errno> {
        self.state.lock().syncs += 1;
        Ok(())
    }

    fn fallocate(&self, mode: Fallocate, pos: u64, len: u64) -> Result<(), Errno> {
        let mut st = self.state.lock();
        let end = (pos + len).min(self.size);
        let mut off = pos;
        while off < end {
            let (b, within) = (off / MEM_BLOCK, (off % MEM_BLOCK) as usize);
            let n = ((MEM_BLOCK as usize) - within).min((end - off) as usize);
            if within == 0 && n == MEM_BLOCK as usize && mode == Fallocate::PunchHole {
                st.data.remove(&b);
            } else if let Some(blk) = st.data.get_mut(&b) {
                blk[within..within + n].fill(0);
            } else if mode == Fallocate::ZeroRange {
                st.data.insert(b, vec![0; MEM_BLOCK as usize]);
            }
            off += n as u64;
        }
        Ok(())
    }
}

mod bdev_backing;
pub use bdev_backing::BdevBacking;

#[cfg(test)]
mod merge_tests;
#[cfg(test)]
mod stacking_tests;
#[cfg(test)]
mod tests;
