//! One fio job as biosim runs it: fio's option names, fio's defaults, fio's units (HOWTO
//! "Job parameters"). Built by [`super::parse`]; every field here is an option the parser
//! accepts, and nothing else is.

use std::path::PathBuf;
use std::time::Duration;

/// A parsed job file: its jobs in file order (`[global]` already folded into each).
#[derive(Debug, Clone, PartialEq)]
pub struct JobFile {
    /// Where it was read from (for messages; `<string>` when parsed from text).
    pub path: PathBuf,
    /// The job sections, in order.
    pub jobs: Vec<JobSpec>,
}

/// `rw=` (`readwrite=`): the I/O pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RwPattern {
    /// `read`: sequential reads.
    Read,
    /// `write`: sequential writes.
    Write,
    /// `randread`.
    RandRead,
    /// `randwrite`.
    RandWrite,
    /// `randrw`: random mixed reads and writes, `rwmixread` percent reads.
    RandRw,
}

impl RwPattern {
    /// fio's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::RandRead => "randread",
            Self::RandWrite => "randwrite",
            Self::RandRw => "randrw",
        }
    }

    /// Whether offsets are random.
    pub fn is_random(self) -> bool {
        matches!(self, Self::RandRead | Self::RandWrite | Self::RandRw)
    }

    /// Whether the job writes at all.
    pub fn writes(self) -> bool {
        matches!(self, Self::Write | Self::RandWrite | Self::RandRw)
    }

    /// Whether the job reads at all.
    pub fn reads(self) -> bool {
        matches!(self, Self::Read | Self::RandRead | Self::RandRw)
    }
}

/// `ioengine=`: how the job issues its I/O, mapped to biosim's engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoEngine {
    /// `psync`: `pread(2)`/`pwrite(2)`, one I/O at a time (`iodepth` must be 1).
    Psync,
    /// `pvsync2`: `preadv2(2)`/`pwritev2(2)` with `RWF_*` flags (`nowait`, `uncached`), one at a time.
    Pvsync2,
    /// `io_uring`: `IORING_OP_READ`/`IORING_OP_WRITE` at `iodepth`.
    IoUring,
}

impl IoEngine {
    /// fio's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Psync => "psync",
            Self::Pvsync2 => "pvsync2",
            Self::IoUring => "io_uring",
        }
    }

    /// Whether it is synchronous (one I/O in flight per job).
    pub fn is_sync(self) -> bool {
        !matches!(self, Self::IoUring)
    }
}

/// `verify=`: the only method biosim implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyKind {
    /// `verify=crc32c`: every written block carries a header (magic, offset, generation, length)
    /// and a CRC-32C of the block; every read checks it ([`super::verify`]).
    Crc32c,
}

/// `fallocate=`: how fio lays out a file it creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallocateMode {
    /// `none`: no preallocation; a file a write-only job creates stays sparse (holes), the
    /// loop seed's patch 6/6 case.
    None,
    /// `native` or `posix`: biosim calls `fallocate(fd, 0, 0, size)` (unwritten extents) on a
    /// file it creates and does nothing where the filesystem answers `EOPNOTSUPP`. That is fio's
    /// `native`; fio's `posix` calls `posix_fallocate(3)`, which glibc emulates there by writing
    /// zeroes, so on such a filesystem biosim's `posix` leaves the file sparse where fio's does not.
    Posix,
}

/// One job (a section, with `[global]` and fio's defaults applied).
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// The section name (`[randread-qd32]`).
    pub name: String,
    /// 1-based line of the section header, for messages.
    pub line: usize,
    /// `filename=`: the file (or block device) to do I/O on; `None`: a temporary file biosim
    /// creates in `--dir` and removes afterwards.
    pub filename: Option<PathBuf>,
    /// `size=`: the region of the file the job uses, in bytes; a whole number of `bs`.
    pub size: u64,
    /// `rw=`.
    pub rw: RwPattern,
    /// `rwmixread=`: percent of reads in `randrw` (fio's default 50).
    pub rwmixread: u8,
    /// `bs=`: the block size in bytes (fio's default 4k); a multiple of 512 (fio takes any `bs`
    /// buffered, but biosim's simulated devices take bios in whole sectors).
    pub bs: u32,
    /// `iodepth=` (default 1): I/Os in flight per job; must be 1 for a synchronous engine.
    pub iodepth: u32,
    /// `numjobs=` (default 1): clones of the job, each on its own simulated CPU (and its own
    /// thread for `raw`), all over the same file.
    pub numjobs: u32,
    /// `runtime=`: with `time_based`, how long to run; without, a cap.
    pub runtime: Option<Duration>,
    /// `time_based`: run for `runtime`, wrapping around the region.
    pub time_based: bool,
    /// `number_ios=`: I/Os per clone (stops before `io_size` if reached first).
    pub number_ios: Option<u64>,
    /// `io_size=` (`io_limit=`): bytes per clone (default: `size`).
    pub io_size: Option<u64>,
    /// `direct=1` (`O_DIRECT`); `buffered=1` is its inverse (default buffered, as fio).
    pub direct: bool,
    /// `ioengine=` (default `psync`).
    pub ioengine: IoEngine,
    /// `nowait=1`: `RWF_NOWAIT` on every I/O (`pvsync2`, `io_uring` only).
    pub nowait: bool,
    /// `uncached=1`: `RWF_DONTCACHE` (0x80; fio 3.33 sends 0x40, `RWF_ATOMIC`, instead) on every
    /// I/O (`pvsync2`, `io_uring`, buffered only).
    pub uncached: bool,
    /// `verify=`.
    pub verify: Option<VerifyKind>,
    /// `rate_iops=`: a cap per clone.
    pub rate_iops: Option<u64>,
    /// `thinktime=`: idle time between I/Os (fio's unit: microseconds).
    pub thinktime: Option<Duration>,
    /// `fsync=N`: an `fsync(2)` (a `REQ_OP_FLUSH` through a device) after every N writes.
    pub fsync: Option<u64>,
    /// `overwrite=1`: lay the file out (write every block) before a write job, so writes land on
    /// allocated blocks (fio lays out files for read jobs always). As in fio, only a file the run
    /// creates is laid out: an existing file large enough is left as it is.
    pub overwrite: bool,
    /// `fallocate=` (fio's default `native`).
    pub fallocate: FallocateMode,
    /// `randseed=`: the seed of the random offsets (fio's default 0x89).
    pub randseed: u64,
    /// `description=`: free text about the job (fio prints it when the job starts; it is not parsed).
    pub description: Option<String>,
    /// `stonewall` (`wait_for_previous`): wait for the jobs before this one to finish. biosim
    /// runs the jobs of a file one after another, so the parser requires it on every job after
    /// the first (fio would otherwise run them at the same time and measure something else).
    pub stonewall: bool,
}

impl JobSpec {
    /// A job with fio's defaults: `rw=read`, `bs=4k`, `iodepth=1`, `numjobs=1`, buffered,
    /// `ioengine=psync`, `rwmixread=50`, `fallocate=native`, `randseed=0x89`.
    pub fn with_defaults(name: &str, line: usize) -> JobSpec {
        JobSpec {
            name: name.to_owned(),
            line,
            filename: None,
            size: 0,
            rw: RwPattern::Read,
            rwmixread: 50,
            bs: 4096,
            iodepth: 1,
            numjobs: 1,
            runtime: None,
            time_based: false,
            number_ios: None,
            io_size: None,
            direct: false,
            ioengine: IoEngine::Psync,
            nowait: false,
            uncached: false,
            verify: None,
            rate_iops: None,
            thinktime: None,
            fsync: None,
            overwrite: false,
            fallocate: FallocateMode::Posix,
            randseed: 0x89,
            description: None,
            stonewall: false,
        }
    }

    /// Bytes each clone transfers when not `time_based`: `io_size`, else `size`.
    pub fn bytes_per_clone(&self) -> u64 {
        self.io_size.unwrap_or(self.size)
    }

    /// I/Os each clone issues when not `time_based`: `number_ios` if smaller.
    pub fn ios_per_clone(&self) -> u64 {
        let by_size = self.bytes_per_clone() / u64::from(self.bs.max(1));
        self.number_ios.map_or(by_size, |n| n.min(by_size))
    }
}
