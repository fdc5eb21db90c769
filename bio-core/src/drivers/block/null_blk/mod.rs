//! `drivers/block/null_blk/main.c` of Linux 6.18: the null block device, `/dev/nullbN`, a blk-mq
//! driver that completes every request without doing I/O (or, with `memory_backed`, by copying
//! to and from pages it keeps in memory). It exists to measure the block layer itself.
//!
//! The module parameters modelled ([`NullBlkConfig::parse_param`], by their kernel names):
//! `irqmode` (`NULL_IRQ_NONE` 0, `NULL_IRQ_SOFTIRQ` 1, the default, `NULL_IRQ_TIMER` 2),
//! `completion_nsec` (10000), `queue_mode` (`NULL_Q_MQ` 2; see [`NullQueueMode`]),
//! `hw_queue_depth` (64), `memory_backed` (false), `discard` (false; only with memory backing),
//! `bs` (512; since Linux 6.10 `null_validate_conf()` refuses with `-EINVAL` what
//! `blk_validate_block_size()` refuses: not a power of two in 512..=`BLK_MAX_BLOCK_SIZE`, 64 KiB in
//! 6.18), `gb` (250), and the configfs attributes `size` (MiB, overrides `gb`) and `blocksize`
//! (= `bs`). The bool parameters (`memory_backed`, `discard`) take what `kstrtobool()` takes, and a
//! bare name sets them, as `param_set_bool()` does on a modprobe line.
//!
//! `BLK_MQ_F_BLOCKING`: `null_validate_conf()` sets `dev->blocking` when `memory_backed` is on,
//! because `->queue_rq()` then allocates pages (`null_insert_page()`) and may sleep; blk-mq then
//! runs the hardware queue only where sleeping is allowed (task context under SRCU, or the
//! `kblockd` work item), never from the submitter's atomic section. This model's `->queue_rq()`
//! runs in the submitter's task context in both modes and allocates nothing that sleeps, so
//! [`NullBlkConfig::blocking`] reports the flag but changes no path: completion still happens where `irqmode` says (softirq and
//! hrtimer completions never sleep, with or without the flag).
//!
//! Completion (`nullb_complete_cmd()`): `irqmode=0` ends the request in the submitter's context
//! (`end_cmd()` inside `->queue_rq()`); `irqmode=1` calls `blk_mq_complete_request()`, which on a
//! one-queue device raises `BLOCK_SOFTIRQ` on the submitting CPU (`blk_mq_raise_softirq()`); and
//! `irqmode=2` starts a `completion_nsec` hrtimer whose callback `null_cmd_timer_expired()` ends the
//! request in hardirq context on the submitting CPU (see [`device`] for how the two runtimes fire
//! it).
//!
//! What differs from the kernel, on purpose: one bio is one request (no merging, no plug); one
//! hardware queue (`submit_queues=1`, the default); no zoned mode, no `cache_size` write cache
//! (so flushes and FUA are stripped by `submit_bio_noacct()`, as on the kernel's device without a
//! cache), no `mbps` throttling, no bad blocks, no fault injection.

pub mod device;
pub mod memory;
#[cfg(test)]
mod tests;

pub use device::{HrtimerClock, NullBlk, NullBlkStats, NULL_MAJOR};
pub use memory::NullbPages;

use std::fmt;

/// `NULL_IRQ_*`: how `nullb_complete_cmd()` completes a request (module parameter `irqmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NullIrqMode {
    /// `NULL_IRQ_NONE` (0): `end_cmd()` at once, in the submitter's context.
    None,
    /// `NULL_IRQ_SOFTIRQ` (1, the default): `blk_mq_complete_request()` → `BLOCK_SOFTIRQ`.
    Softirq,
    /// `NULL_IRQ_TIMER` (2): an hrtimer of `completion_nsec`, firing in hardirq context.
    Timer,
}

impl NullIrqMode {
    /// The parameter's number.
    pub fn nr(self) -> u32 {
        match self {
            NullIrqMode::None => 0,
            NullIrqMode::Softirq => 1,
            NullIrqMode::Timer => 2,
        }
    }

    /// A short name: `none`, `softirq`, `timer`.
    pub fn name(self) -> &'static str {
        match self {
            NullIrqMode::None => "none",
            NullIrqMode::Softirq => "softirq",
            NullIrqMode::Timer => "timer",
        }
    }
}

/// `NULL_Q_*` (module parameter `queue_mode`). 6.18's `null_set_queue_mode()` still accepts
/// 0..=2, but the bio-based path was removed in Linux 6.9 (commit 8b631f9cf0b8, "null_blk: remove
/// the bio based I/O path"): `null_validate_conf()` then prints "BIO-based IO path is no longer
/// available, using blk-mq instead." and uses blk-mq, and refuses 1 (`NULL_Q_RQ`, the legacy
/// request path removed earlier) with "legacy IO path is no longer available" (`-EINVAL`).
/// [`NullBlk::new`] does both, as 6.18 does; so [`NullQueueMode::Bio`] runs as `Mq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NullQueueMode {
    /// `NULL_Q_BIO` (0): accepted, run as blk-mq (6.9+).
    Bio,
    /// `NULL_Q_RQ` (1): refused by `null_validate_conf()`.
    Rq,
    /// `NULL_Q_MQ` (2, the default).
    Mq,
}

/// One null_blk device's configuration (`struct nullb_device`, filled from the module
/// parameters by `null_alloc_dev()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NullBlkConfig {
    /// `dev->size` in bytes (`gb` × 1 GiB, or the configfs `size` in MiB).
    pub size_bytes: u64,
    /// `irqmode`.
    pub irqmode: NullIrqMode,
    /// `completion_nsec`: the timer mode's delay.
    pub completion_nsec: u64,
    /// `queue_mode`.
    pub queue_mode: NullQueueMode,
    /// `hw_queue_depth`: tags of the one hardware queue.
    pub hw_queue_depth: u32,
    /// `memory_backed`: keep written data in pages.
    pub memory_backed: bool,
    /// `discard`: support `REQ_OP_DISCARD` (ignored without memory backing, as
    /// `null_config_discard()` does).
    pub discard: bool,
    /// `bs` / `blocksize`: the logical (and physical) block size, as given; [`NullBlk::new`]
    /// applies `null_validate_conf()`'s rounding.
    pub blocksize: u32,
    /// How timer-mode completions are fired (not a kernel parameter: the runtime's choice).
    pub clock: HrtimerClock,
}

impl Default for NullBlkConfig {
    /// The module's defaults: 250 GB, softirq completion, 10 µs, blk-mq, depth 64, no memory
    /// backing, 512-byte blocks.
    fn default() -> Self {
        NullBlkConfig {
            size_bytes: 250 << 30,
            irqmode: NullIrqMode::Softirq,
            completion_nsec: 10_000,
            queue_mode: NullQueueMode::Mq,
            hw_queue_depth: 64,
            memory_backed: false,
            discard: false,
            blocksize: 512,
            clock: HrtimerClock::Thread,
        }
    }
}

/// The parameter names [`NullBlkConfig::parse_param`] takes.
pub const NULL_BLK_PARAMS: [&str; 10] = [
    "irqmode",
    "completion_nsec",
    "queue_mode",
    "hw_queue_depth",
    "memory_backed",
    "discard",
    "bs",
    "blocksize",
    "gb",
    "size",
];

/// `kstrtobool()` (lib/kstrtox.c) as `param_set_bool()` uses it: only the first character counts
/// (`y`/`Y`/`t`/`T`/`1` true, `n`/`N`/`f`/`F`/`0` false), except that `o`/`O` needs a second,
/// `n`/`N` (on) or `f`/`F` (off); anything else is `-EINVAL`. So `yes`, `true`, `no` and `1x` are
/// accepted, as the kernel accepts them.
fn kstrtobool(key: &str, v: &str) -> Result<bool, String> {
    let b = v.as_bytes();
    match b.first() {
        Some(b'y' | b'Y' | b't' | b'T' | b'1') => Ok(true),
        Some(b'n' | b'N' | b'f' | b'F' | b'0') => Ok(false),
        Some(b'o' | b'O') => match b.get(1) {
            Some(b'n' | b'N') => Ok(true),
            Some(b'f' | b'F') => Ok(false),
            _ => Err(format!(
                "null_blk {key}={v}: kstrtobool() refuses it (-EINVAL): expected on/off"
            )),
        },
        _ => Err(format!(
            "null_blk {key}={v}: kstrtobool() refuses it (-EINVAL): expected y/n/1/0/t/f/on/off"
        )),
    }
}

/// The parameters declared `bool` (`module_param_named(.., bool, ..)`): their
/// `param_ops_bool` has `KERNEL_PARAM_OPS_FL_NOARG`, so `parse_one()` lets a bare name through and
/// `param_set_bool()` reads it as `"1"`.
pub const NULL_BLK_BOOL_PARAMS: [&str; 2] = ["memory_backed", "discard"];

/// `BLK_MAX_BLOCK_SIZE` (include/linux/blkdev.h, 6.18): `SZ_64K`.
pub const BLK_MAX_BLOCK_SIZE: u32 = 64 << 10;

/// `BLK_MQ_MAX_DEPTH` (include/linux/blk-mq.h): `blk_mq_alloc_tag_set()` reduces a deeper
/// `queue_depth` to this, printing "blk-mq: reduced tag depth to 10240".
pub const BLK_MQ_MAX_DEPTH: u32 = 10240;

/// `blk_validate_block_size()` (include/linux/blkdev.h): `-EINVAL` unless `bsize` is a power of
/// two in 512..=[`BLK_MAX_BLOCK_SIZE`].
pub fn blk_validate_block_size(bsize: u32) -> Result<(), String> {
    if !(512..=BLK_MAX_BLOCK_SIZE).contains(&bsize) || !bsize.is_power_of_two() {
        return Err(format!(
            "null_blk: bs={bsize}: blk_validate_block_size() refuses it (-EINVAL): a power of two in 512..={BLK_MAX_BLOCK_SIZE} is needed"
        ));
    }
    Ok(())
}

/// Splits one modprobe word: `KEY=VALUE`, or a bare `KEY`, which only a bool parameter takes
/// (`parse_one()` refuses a missing value of any other with `-EINVAL`).
fn split_param(kv: &str) -> Result<(&str, &str), String> {
    match kv.split_once('=') {
        Some(p) => Ok(p),
        None if NULL_BLK_BOOL_PARAMS.contains(&kv) => Ok((kv, "1")),
        None => Err(format!(
            "null_blk parameter `{kv}`: expected KEY=VALUE (only the bool parameters {} may be given bare)",
            NULL_BLK_BOOL_PARAMS.join(", ")
        )),
    }
}

/// `kstrtoull()` base 10 (`kstrtoint()` for the int parameters, whose range the caller checks).
fn kstrtou64(key: &str, v: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .map_err(|_| format!("null_blk {key}={v}: expected a non-negative decimal integer"))
}

impl NullBlkConfig {
    /// The defaults with `KEY=VALUE` parameters applied in order ([`NullBlkConfig::parse_param`]);
    /// a parameter given twice (`bs` and `blocksize`, `gb` and `size` count as one) is refused.
    pub fn from_params<'a>(params: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut cfg = NullBlkConfig::default();
        let mut seen: Vec<&str> = Vec::new();
        for kv in params {
            let (k, v) = split_param(kv)?;
            let canon = match k {
                "blocksize" => "bs",
                "size" => "gb",
                k => k,
            };
            cfg.parse_param(k, v)?;
            if seen.contains(&canon) {
                return Err(format!("null_blk parameter `{k}` given twice"));
            }
            seen.push(canon);
        }
        Ok(cfg)
    }

    /// Sets one module parameter (or configfs attribute) by its kernel name, as `modprobe
    /// null_blk KEY=VALUE` would. An unknown name or a value the kernel's setter refuses is an
    /// error naming it.
    pub fn parse_param(&mut self, key: &str, value: &str) -> Result<(), String> {
        if !NULL_BLK_PARAMS.contains(&key) {
            return Err(format!(
                "unknown null_blk parameter `{key}` (known: {})",
                NULL_BLK_PARAMS.join(", ")
            ));
        }
        let int = |max: u64| -> Result<u64, String> {
            let n = kstrtou64(key, value)?;
            if n > max {
                return Err(format!("null_blk {key}={value}: out of range (max {max})"));
            }
            Ok(n)
        };
        match key {
            // null_set_irqmode(): null_param_store_val(str, &g_irqmode, NULL_IRQ_NONE, NULL_IRQ_TIMER).
            "irqmode" => {
                self.irqmode = match value {
                    "0" => NullIrqMode::None,
                    "1" => NullIrqMode::Softirq,
                    "2" => NullIrqMode::Timer,
                    _ => {
                        return Err(format!(
                            "null_blk irqmode={value}: expected 0 (none), 1 (softirq) or 2 (timer)"
                        ))
                    }
                }
            }
            "completion_nsec" => self.completion_nsec = kstrtou64(key, value)?,
            // null_set_queue_mode(): null_param_store_val(str, &g_queue_mode, NULL_Q_BIO, NULL_Q_MQ).
            "queue_mode" => {
                self.queue_mode = match value {
                    "0" => NullQueueMode::Bio,
                    "1" => NullQueueMode::Rq,
                    "2" => NullQueueMode::Mq,
                    _ => {
                        return Err(format!(
                        "null_blk queue_mode={value}: expected 0 (bio), 1 (rq) or 2 (multiqueue)"
                    ))
                    }
                }
            }
            "hw_queue_depth" => self.hw_queue_depth = int(i32::MAX as u64)? as u32,
            "memory_backed" => self.memory_backed = kstrtobool(key, value)?,
            "discard" => self.discard = kstrtobool(key, value)?,
            "bs" | "blocksize" => self.blocksize = int(i32::MAX as u64)? as u32,
            "gb" => self.size_bytes = int(i32::MAX as u64)? << 30,
            "size" => self.size_bytes = int(u64::MAX >> 20)? << 20,
            _ => unreachable!("checked against NULL_BLK_PARAMS above"),
        }
        Ok(())
    }

    /// Parses `KEY=VALUE`, or a bare bool parameter's name ([`NullBlkConfig::parse_param`]).
    pub fn parse_assignment(&mut self, kv: &str) -> Result<(), String> {
        let (k, v) = split_param(kv)?;
        self.parse_param(k, v)
    }

    /// `null_validate_conf()`'s block size check (6.10+): `blk_validate_block_size()`, `-EINVAL`
    /// for anything but a power of two in 512..=[`BLK_MAX_BLOCK_SIZE`] (before 6.10 it rounded
    /// down to 512 and clamped to 512..=4096; it no longer does).
    pub fn validated_blocksize(&self) -> Result<u32, String> {
        blk_validate_block_size(self.blocksize)?;
        Ok(self.blocksize)
    }

    /// `blk_mq_alloc_tag_set()`'s depth: `hw_queue_depth` reduced to [`BLK_MQ_MAX_DEPTH`].
    pub fn tag_set_depth(&self) -> u32 {
        self.hw_queue_depth.min(BLK_MQ_MAX_DEPTH)
    }

    /// `dev->blocking` (`BLK_MQ_F_BLOCKING` on the tag set): set by `null_validate_conf()` when
    /// `memory_backed` is on (see the module docs for what it changes and what it does not here).
    pub fn blocking(&self) -> bool {
        self.memory_backed
    }
}

/// The parameters as `modprobe null_blk` would take them back, when they can be: the size prints
/// as `gb=` when it is a whole number of GiB; otherwise as the configfs attribute `size=` (MiB,
/// which modprobe does not take), or, below a MiB granule, as `size_bytes=` (this struct's field:
/// no kernel interface can make such a device).
impl fmt::Display for NullBlkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let qm = match self.queue_mode {
            NullQueueMode::Bio => 0,
            NullQueueMode::Rq => 1,
            NullQueueMode::Mq => 2,
        };
        write!(
            f,
            "irqmode={} completion_nsec={} queue_mode={qm} hw_queue_depth={} memory_backed={} discard={} bs={} ",
            self.irqmode.nr(),
            self.completion_nsec,
            self.hw_queue_depth,
            u8::from(self.memory_backed),
            u8::from(self.discard),
            self.blocksize,
        )?;
        let b = self.size_bytes;
        if b.is_multiple_of(1 << 30) {
            write!(f, "gb={}", b >> 30)
        } else if b.is_multiple_of(1 << 20) {
            write!(f, "size={}", b >> 20)
        } else {
            write!(f, "size_bytes={b}")
        }
    }
}
