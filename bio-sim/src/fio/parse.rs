//! The job-file reader: fio's INI syntax as fio's `init.c` (`__parse_jobs_ini()`), `parse.c`
//! (`str_to_decimal()`, `strip_blank_end()`, `__handle_option()`) and `options.c` (the option
//! table: names, aliases, types, defaults) read it, for the subset of options in [`SUPPORTED`].
//!
//! What carries over from fio, and where biosim is stricter (it refuses, never guesses):
//!
//! - Lines: `[section]` headers, `key=value` (blanks around `=` ignored), and a bare key for
//!   fio's no-argument options (`time_based`, `stonewall`); fio refuses a bare `direct` ("Option
//!   direct requires an argument"), and so does biosim. Everything from the first `;` or `#` on a
//!   line is a comment (fio's `strip_blank_end()` cuts there too, so `bs=4k ; note` is `bs=4k`).
//! - Sections: `[global]` sets defaults for the jobs *after* it (fio copies its `def_thread` into
//!   each job when the job's header is read), so a second `[global]` changes only later jobs. An
//!   option before any section is refused, as fio refuses it.
//! - One option twice in one section is refused naming both lines (fio lets the last win; a
//!   repeated line in a benchmark description is a mistake more often than an intent). A job
//!   redefining a `[global]` option is the point of `[global]` and is fine.
//! - Units (HOWTO "Parameter types", fio's default `kb_base=1024`): sizes take `k`/`m`/`g`/`t`/`p`
//!   (with or without `b`, any case) as powers of 1024. fio reads the IEC spellings (`KiB`,
//!   `MiB`) as powers of *1000* under that default, "to provide compatibility with old scripts";
//!   biosim refuses them rather than either surprise. Times take `us`/`usec`, `ms`/`msec`, `s`,
//!   `m`, `h`, `d`; a bare number is seconds for `runtime`, microseconds for `thinktime`, as in
//!   fio. A value fio would cut short (`1.5g` is 1 byte to fio's `strtoll()`), a per-direction
//!   list (`bs=4k,8k`), a range, `${VAR}` expansion and `(...)` arithmetic are refused by name.
//! - Every job after the first must say `stonewall`: fio runs the jobs of a file at the same
//!   time unless told otherwise, biosim runs them one after another.

use super::job::{FallocateMode, IoEngine, JobFile, JobSpec, RwPattern, VerifyKind};
use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A job file that could not be read: the file, the 1-based line, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}:{line}: {message}")]
pub struct JobFileError {
    /// The file (`<string>` for text).
    pub path: String,
    /// The line (0 when the error is about the whole file).
    pub line: usize,
    /// What is wrong, naming the option or section.
    pub message: String,
}

/// The fio options biosim reads (fio's names; the aliases fio accepts for them are accepted too:
/// `readwrite`, `blocksize`, `timeout`, `io_limit`, `wait_for_previous`).
pub const SUPPORTED: &[&str] = &[
    "filename",
    "size",
    "rw",
    "rwmixread",
    "rwmixwrite",
    "bs",
    "iodepth",
    "numjobs",
    "runtime",
    "time_based",
    "number_ios",
    "io_size",
    "direct",
    "buffered",
    "ioengine",
    "nowait",
    "uncached",
    "verify",
    "rate_iops",
    "thinktime",
    "fsync",
    "overwrite",
    "fallocate",
    "randseed",
    "name",
    "description",
    "stonewall",
];

/// Most simulated CPUs a job may ask for with `numjobs` (one clone per simulated CPU).
pub const MAX_NUMJOBS: u32 = 64;

/// Most I/Os in flight per job: io_uring's `IORING_MAX_ENTRIES` (32768), the largest ring.
pub const MAX_IODEPTH: u32 = 32768;

/// One option of the subset. Aliases map to the same variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Opt {
    Filename,
    Size,
    Rw,
    RwmixRead,
    RwmixWrite,
    Bs,
    Iodepth,
    Numjobs,
    Runtime,
    TimeBased,
    NumberIos,
    IoSize,
    Direct,
    Buffered,
    Ioengine,
    Nowait,
    Uncached,
    Verify,
    RateIops,
    Thinktime,
    Fsync,
    Overwrite,
    Fallocate,
    Randseed,
    Name,
    Description,
    Stonewall,
}

/// fio's spellings (names and aliases, as in `options.c`) and the option each names.
const TABLE: &[(&str, Opt)] = &[
    ("filename", Opt::Filename),
    ("size", Opt::Size),
    ("rw", Opt::Rw),
    ("readwrite", Opt::Rw),
    ("rwmixread", Opt::RwmixRead),
    ("rwmixwrite", Opt::RwmixWrite),
    ("bs", Opt::Bs),
    ("blocksize", Opt::Bs),
    ("iodepth", Opt::Iodepth),
    ("numjobs", Opt::Numjobs),
    ("runtime", Opt::Runtime),
    ("timeout", Opt::Runtime),
    ("time_based", Opt::TimeBased),
    ("number_ios", Opt::NumberIos),
    ("io_size", Opt::IoSize),
    ("io_limit", Opt::IoSize),
    ("direct", Opt::Direct),
    ("buffered", Opt::Buffered),
    ("ioengine", Opt::Ioengine),
    ("nowait", Opt::Nowait),
    ("uncached", Opt::Uncached),
    ("verify", Opt::Verify),
    ("rate_iops", Opt::RateIops),
    ("thinktime", Opt::Thinktime),
    ("fsync", Opt::Fsync),
    ("overwrite", Opt::Overwrite),
    ("fallocate", Opt::Fallocate),
    ("randseed", Opt::Randseed),
    ("name", Opt::Name),
    ("description", Opt::Description),
    ("stonewall", Opt::Stonewall),
    ("wait_for_previous", Opt::Stonewall),
];

impl Opt {
    fn lookup(key: &str) -> Option<Opt> {
        TABLE.iter().find(|(k, _)| *k == key).map(|&(_, o)| o)
    }

    /// The fio field the option writes: `direct` and `buffered` are one field (`odirect`, one
    /// the inverse of the other), as are `rwmixread` and `rwmixwrite` (`rwmix[]`). A job that
    /// sets one of a pair replaces what `[global]` said about both.
    fn field(self) -> Opt {
        match self {
            Opt::Buffered => Opt::Direct,
            Opt::RwmixWrite => Opt::RwmixRead,
            o => o,
        }
    }

    /// fio's `FIO_OPT_STR_SET` options: a bare key means 1.
    fn may_stand_alone(self) -> bool {
        matches!(self, Opt::TimeBased | Opt::Stonewall)
    }
}

/// One `key[=value]` line.
#[derive(Debug, Clone)]
struct Setting {
    opt: Opt,
    /// The key as written (an alias stays an alias in messages).
    key: String,
    value: Option<String>,
    line: usize,
}

impl Setting {
    /// `key=value` (or `key`) as written, for messages.
    fn shown(&self) -> String {
        match &self.value {
            Some(v) => format!("`{}={v}`", self.key),
            None => format!("`{}`", self.key),
        }
    }
}

/// A section's settings, by the fio field they write.
type Fields = BTreeMap<Opt, Vec<Setting>>;

/// A `[section]` as read, before folding.
#[derive(Debug)]
struct Section {
    name: String,
    line: usize,
    global: bool,
    fields: Fields,
}

/// Reads and parses the job file at `path`.
pub fn parse_file(path: &Path) -> Result<JobFile, JobFileError> {
    let text = std::fs::read_to_string(path).map_err(|e| JobFileError {
        path: path.display().to_string(),
        line: 0,
        message: format!("cannot read the job file: {e}"),
    })?;
    parse_str(&text, path)
}

/// Parses job-file `text` (read from `path`, for messages). A job with a `filename=` and no
/// `size=` takes the file's size, as fio does, so that file is opened (read-only) to measure it.
pub fn parse_str(text: &str, path: &Path) -> Result<JobFile, JobFileError> {
    let p = Reader {
        path: path.display().to_string(),
    };
    let sections = p.sections(text)?;
    let mut global = Fields::new();
    let mut jobs: Vec<JobSpec> = Vec::new();
    let mut trailing_global: Option<usize> = None;
    for s in sections {
        if s.global {
            // Every value is checked where it is written, even one each job overrides.
            p.job(&s, &s.fields, true)?;
            // A later [global] overrides an earlier one field by field, for the jobs after it.
            global.extend(s.fields);
            trailing_global = Some(s.line);
            continue;
        }
        trailing_global = None;
        let mut eff = global.clone();
        eff.extend(s.fields.clone());
        let job = p.job(&s, &eff, false)?;
        if let Some(prev) = jobs.iter().find(|j| j.name == job.name) {
            return Err(p.err(
                job.line,
                format!(
                    "job `{}` is named twice (line {} and line {}): fio allows it, but biosim \
                     reports results by job name; rename one",
                    job.name, prev.line, job.line
                ),
            ));
        }
        if !jobs.is_empty() && !job.stonewall {
            return Err(p.err(
                job.line,
                format!(
                    "job `{}` has no `stonewall`: fio would run it at the same time as the job \
                     before it, biosim runs jobs one after another; add `stonewall` to this job \
                     (or to [global] for every job)",
                    job.name
                ),
            ));
        }
        jobs.push(job);
    }
    if let Some(line) = trailing_global {
        if !jobs.is_empty() {
            return Err(p.err(
                line,
                "this [global] section comes after the last job, so it applies to no job \
                 ([global] sets options for the jobs after it)"
                    .into(),
            ));
        }
    }
    if jobs.is_empty() {
        return Err(p.err(
            0,
            "no job section: a job file needs at least one `[name]` section besides [global]"
                .into(),
        ));
    }
    Ok(JobFile {
        path: path.to_path_buf(),
        jobs,
    })
}

struct Reader {
    path: String,
}

impl Reader {
    fn err(&self, line: usize, message: String) -> JobFileError {
        JobFileError {
            path: self.path.clone(),
            line,
            message,
        }
    }

    /// An error about setting `s`'s value: the line, `key=value`, and why.
    fn bad(&self, s: &Setting, why: impl std::fmt::Display) -> JobFileError {
        self.err(s.line, format!("{}: {why}", s.shown()))
    }

    /// Splits the text into sections (fio's `__parse_jobs_ini()`), checking each line's syntax
    /// and refusing unknown and repeated options.
    fn sections(&self, text: &str) -> Result<Vec<Section>, JobFileError> {
        let mut out: Vec<Section> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            // fio's strip_blank_end(): the line ends at the first ';' or '#'.
            let body = match raw.find([';', '#']) {
                Some(k) => &raw[..k],
                None => raw,
            };
            let body = body.trim();
            if body.is_empty() {
                continue;
            }
            if let Some(rest) = body.strip_prefix('[') {
                let Some(name) = rest.strip_suffix(']') else {
                    return Err(self.err(
                        line,
                        format!("section header `{body}` does not end with `]`"),
                    ));
                };
                let name = name.trim();
                if name.is_empty() {
                    return Err(self.err(line, "a section with no name (`[]`)".into()));
                }
                if name.contains(['[', ']']) {
                    return Err(self.err(line, format!("section name `{name}` contains a bracket")));
                }
                // fio's test is strncmp(name, "global", 6): [global2] would be a global section.
                let global = name == "global";
                if !global && name.starts_with("global") {
                    return Err(self.err(
                        line,
                        format!(
                            "section `[{name}]`: fio treats every section whose name starts with \
                             `global` as [global]; call it [global] or rename the job"
                        ),
                    ));
                }
                out.push(Section {
                    name: name.to_owned(),
                    line,
                    global,
                    fields: Fields::new(),
                });
                continue;
            }
            let Some(sec) = out.last_mut() else {
                return Err(self.err(
                    line,
                    format!(
                        "`{body}` comes before any section; options belong in [global] or a \
                         `[job]` section (fio refuses this too)"
                    ),
                ));
            };
            let (key, value) = match body.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (body, None),
            };
            if value.is_none() && (key.starts_with("include ") || key.starts_with("include\t")) {
                return Err(self.err(
                    line,
                    "`include` of another job file is not supported; put the options here".into(),
                ));
            }
            if key.is_empty() {
                return Err(self.err(line, format!("`{body}` has no option name before `=`")));
            }
            let Some(opt) = Opt::lookup(key) else {
                return Err(self.err(
                    line,
                    format!(
                        "unknown option `{key}` (biosim reads this subset of fio: {}); an option \
                         biosim would not honour is refused rather than ignored",
                        SUPPORTED.join(", ")
                    ),
                ));
            };
            let setting = Setting {
                opt,
                key: key.to_owned(),
                value: value.map(str::to_owned),
                line,
            };
            let field = sec.fields.entry(opt.field()).or_default();
            if let Some(prev) = field.iter().find(|s| s.opt == opt) {
                return Err(self.err(
                    line,
                    format!(
                        "{} repeats `{}` of line {} in section [{}] ({}): fio would take the \
                         last one, biosim refuses a repeated option; keep one line",
                        setting.shown(),
                        prev.key,
                        prev.line,
                        sec.name,
                        prev.shown()
                    ),
                ));
            }
            field.push(setting);
        }
        Ok(out)
    }

    /// The value of `s`, which this option needs.
    fn value<'a>(&self, s: &'a Setting) -> Result<&'a str, JobFileError> {
        match s.value.as_deref() {
            None => Err(self.err(
                s.line,
                format!(
                    "`{}` needs a value (`{}=...`): fio refuses it bare too (only `time_based` \
                     and `stonewall` stand alone)",
                    s.key, s.key
                ),
            )),
            Some("") => Err(self.err(s.line, format!("`{}=` has an empty value", s.key))),
            Some(v) => {
                if v.contains("${") {
                    return Err(self.bad(
                        s,
                        "fio would expand `${...}` from the environment; biosim does not, write \
                         the value itself",
                    ));
                }
                Ok(v)
            }
        }
    }

    /// A boolean (fio's `FIO_OPT_BOOL` is 0 or 1; a bare key only for `FIO_OPT_STR_SET`).
    fn boolean(&self, s: &Setting) -> Result<bool, JobFileError> {
        if s.value.is_none() && s.opt.may_stand_alone() {
            return Ok(true);
        }
        match self.value(s)? {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(self.bad(s, "expected 0 or 1")),
        }
    }

    fn bytes(&self, s: &Setting) -> Result<u64, JobFileError> {
        let v = self.value(s)?;
        parse_bytes(v).map_err(|why| self.bad(s, why))
    }

    /// Why a `bs` that is not a multiple of 512 is refused. Direct I/O: `O_DIRECT` on a device
    /// of 512-byte logical blocks needs every length a multiple of 512 (the kernel fails each
    /// I/O with `EINVAL`), so fio's job could not run either. Buffered: fio accepts it (the page
    /// cache is byte-granular), but biosim runs the same job on its simulated devices, which take
    /// bios in whole sectors with no page cache between the job and the device to
    /// read-modify-write a partial block, so it could not run the job as written on every design.
    fn unaligned_bs(&self, direct: bool, d: Option<&Setting>, b: Option<&Setting>) -> String {
        let why = match (direct, d.or(b)) {
            (true, Some(s)) => format!("direct I/O ({} of line {})", s.shown(), s.line),
            (true, None) => "direct I/O".to_owned(),
            (false, Some(s)) => format!("buffered I/O ({} of line {})", s.shown(), s.line),
            (false, None) => "buffered I/O (fio's default)".to_owned(),
        };
        if direct {
            format!(
                "the block size must be a multiple of 512 for {why}: O_DIRECT on 512-byte \
                 sectors fails any other length with EINVAL"
            )
        } else {
            format!(
                "the block size must be a multiple of 512, also for {why}: fio accepts any bs \
                 for buffered I/O, but biosim runs the job on its simulated devices too, which \
                 take bios in whole 512-byte sectors with no page cache to read-modify-write a \
                 partial block"
            )
        }
    }

    fn int(&self, s: &Setting) -> Result<u64, JobFileError> {
        let v = self.value(s)?;
        parse_int(v).map_err(|why| self.bad(s, why))
    }

    fn time_us(&self, s: &Setting, bare_unit_us: u64) -> Result<u64, JobFileError> {
        let v = self.value(s)?;
        parse_time_us(v, bare_unit_us).map_err(|why| self.bad(s, why))
    }

    /// One job: fio's defaults, then the folded settings, then (unless `values_only`, for a
    /// [global] section's own values) the cross-checks.
    fn job(&self, sec: &Section, eff: &Fields, values_only: bool) -> Result<JobSpec, JobFileError> {
        let mut j = JobSpec::with_defaults(&sec.name, sec.line);
        let get = |o: Opt| -> Option<&Setting> {
            eff.get(&o.field())
                .and_then(|v| v.iter().find(|s| s.opt == o))
        };

        if let Some(s) = get(Opt::Name) {
            let own = sec.fields.get(&Opt::Name).and_then(|v| v.first());
            if let Some(g) = own.filter(|_| !sec.global) {
                j.name = self.value(g)?.to_owned();
            } else {
                return Err(self.bad(
                    s,
                    "`name=` in [global] would name every job alike; name each job by its \
                     section header (or `name=` inside it)",
                ));
            }
        }
        if let Some(s) = get(Opt::Description) {
            j.description = Some(self.value(s)?.to_owned());
        }
        if let Some(s) = get(Opt::Filename) {
            j.filename = Some(self.filename(s)?);
        }
        if let Some(s) = get(Opt::Rw) {
            j.rw = self.rw(s)?;
        }
        if let Some(s) = get(Opt::Bs) {
            let bs = self.bytes(s)?;
            if bs == 0 {
                return Err(self.bad(s, "the block size must be a positive multiple of 512"));
            }
            j.bs = u32::try_from(bs).map_err(|_| self.bad(s, "block size too large"))?;
        }
        if let Some(s) = get(Opt::Ioengine) {
            j.ioengine = self.ioengine(s)?;
        }
        if let Some(s) = get(Opt::Iodepth) {
            let d = self.int(s)?;
            if d == 0 || d > u64::from(MAX_IODEPTH) {
                return Err(self.bad(
                    s,
                    format!("iodepth must be 1..={MAX_IODEPTH} (io_uring's IORING_MAX_ENTRIES)"),
                ));
            }
            j.iodepth = d as u32;
        }
        if let Some(s) = get(Opt::Numjobs) {
            let n = self.int(s)?;
            if n == 0 || n > u64::from(MAX_NUMJOBS) {
                return Err(self.bad(
                    s,
                    format!(
                        "numjobs must be 1..={MAX_NUMJOBS} (each clone runs on its own \
                         simulated CPU)"
                    ),
                ));
            }
            j.numjobs = n as u32;
        }
        let runtime = match get(Opt::Runtime) {
            Some(s) => Some((s, self.time_us(s, 1_000_000)?)),
            None => None,
        };
        // fio's runtime=0 (its default) means no limit.
        j.runtime = runtime.and_then(|(_, us)| (us > 0).then(|| Duration::from_micros(us)));
        let time_based = get(Opt::TimeBased);
        if let Some(s) = time_based {
            j.time_based = self.boolean(s)?;
        }
        if let Some(s) = get(Opt::NumberIos) {
            let n = self.int(s)?;
            j.number_ios = (n > 0).then_some(n);
        }
        let io_size = get(Opt::IoSize);
        if let Some(s) = io_size {
            let n = self.bytes(s)?;
            j.io_size = (n > 0).then_some(n);
        }
        let (direct, buffered) = (get(Opt::Direct), get(Opt::Buffered));
        match (direct, buffered) {
            (Some(d), Some(b)) => {
                let (dv, bv) = (self.boolean(d)?, self.boolean(b)?);
                if dv == bv {
                    return Err(self.err(
                        b.line,
                        format!(
                            "{} contradicts {} of line {}: buffered is the inverse of direct",
                            b.shown(),
                            d.shown(),
                            d.line
                        ),
                    ));
                }
                j.direct = dv;
            }
            (Some(d), None) => j.direct = self.boolean(d)?,
            (None, Some(b)) => j.direct = !self.boolean(b)?,
            (None, None) => {}
        }
        if let Some(s) = get(Opt::Bs).filter(|_| !j.bs.is_multiple_of(512)) {
            return Err(self.bad(s, self.unaligned_bs(j.direct, direct, buffered)));
        }
        let nowait = get(Opt::Nowait);
        if let Some(s) = nowait {
            j.nowait = self.boolean(s)?;
        }
        let uncached = get(Opt::Uncached);
        if let Some(s) = uncached {
            j.uncached = self.boolean(s)?;
        }
        if let Some(s) = get(Opt::Verify) {
            j.verify = self.verify(s)?;
        }
        if let Some(s) = get(Opt::RateIops) {
            let n = self.int(s)?;
            j.rate_iops = (n > 0).then_some(n);
        }
        if let Some(s) = get(Opt::Thinktime) {
            let us = self.time_us(s, 1)?;
            j.thinktime = (us > 0).then(|| Duration::from_micros(us));
        }
        let fsync = get(Opt::Fsync);
        if let Some(s) = fsync {
            let n = self.int(s)?;
            j.fsync = (n > 0).then_some(n);
        }
        if let Some(s) = get(Opt::Overwrite) {
            j.overwrite = self.boolean(s)?;
        }
        if let Some(s) = get(Opt::Fallocate) {
            j.fallocate = self.fallocate(s)?;
        }
        if let Some(s) = get(Opt::Randseed) {
            j.randseed = self.int(s)?;
        }
        if let Some(s) = get(Opt::Stonewall) {
            j.stonewall = self.boolean(s)?;
        }
        self.rwmix(
            &mut j,
            get(Opt::RwmixRead),
            get(Opt::RwmixWrite),
            values_only,
        )?;
        if values_only {
            for s in [get(Opt::Size), io_size].into_iter().flatten() {
                self.bytes(s)?;
            }
            return Ok(j);
        }

        // Cross-checks, each naming the line that set the option at fault.
        if j.iodepth > 1 && j.ioengine.is_sync() {
            let s = get(Opt::Iodepth).expect("iodepth > 1 was set");
            return Err(self.bad(
                s,
                format!(
                    "ioengine={} issues one I/O at a time, whatever iodepth says (fio notes \
                     \"queue depth will be capped at 1\" and runs it at depth 1); use \
                     ioengine=io_uring for depth {}, or iodepth=1",
                    j.ioengine.name(),
                    j.iodepth
                ),
            ));
        }
        // fio's nowait and uncached are engine options of pvsync2 and io_uring: under psync fio
        // does not know them at all, whatever their value.
        for (s, flag) in [(nowait, "RWF_NOWAIT"), (uncached, "RWF_DONTCACHE")] {
            if let Some(s) = s {
                if j.ioengine == IoEngine::Psync {
                    return Err(self.bad(
                        s,
                        format!(
                            "ioengine=psync has no `{}` option (pread/pwrite take no flags; fio \
                             refuses it as an unknown option for that engine): {flag} needs \
                             ioengine=pvsync2 or io_uring",
                            s.key
                        ),
                    ));
                }
            }
        }
        if j.uncached && j.direct {
            let s = uncached.expect("uncached was set");
            return Err(self.bad(
                s,
                "uncached=1 (RWF_DONTCACHE) is for buffered I/O, and this job is direct=1: \
                 O_DIRECT bypasses the page cache already, so the flag would change nothing",
            ));
        }
        if let Some(s) = fsync {
            if j.fsync.is_some() && !j.rw.writes() {
                return Err(self.bad(
                    s,
                    format!(
                        "rw={} never writes, so it would never fsync; drop fsync or write",
                        j.rw.name()
                    ),
                ));
            }
        }
        if j.time_based && j.runtime.is_none() {
            let s = time_based.expect("time_based was set");
            return Err(self.bad(
                s,
                match runtime {
                    Some((r, _)) => format!(
                        "time_based needs a runtime, and {} of line {} is zero (fio warns and \
                         turns time_based off)",
                        r.shown(),
                        r.line
                    ),
                    None => {
                        "time_based needs `runtime=` (fio warns and turns time_based off)".into()
                    }
                },
            ));
        }
        self.size(&mut j, get(Opt::Size), get(Opt::Bs), io_size, sec)?;
        Ok(j)
    }

    /// `size=` (or the file's size), checked against `bs` and `io_size`.
    fn size(
        &self,
        j: &mut JobSpec,
        size: Option<&Setting>,
        bs: Option<&Setting>,
        io_size: Option<&Setting>,
        sec: &Section,
    ) -> Result<(), JobFileError> {
        let bs_from = match bs {
            Some(s) => format!("bs={} of line {}", j.bs, s.line),
            None => format!("bs={}, fio's default", j.bs),
        };
        match size {
            Some(s) => {
                let n = self.bytes(s)?;
                if n == 0 {
                    return Err(self.bad(s, "size must be positive"));
                }
                if n < u64::from(j.bs) {
                    return Err(self.bad(s, format!("size is smaller than one block ({bs_from})")));
                }
                if n % u64::from(j.bs) != 0 {
                    return Err(self.bad(
                        s,
                        format!(
                            "size is not a whole number of blocks ({bs_from}); biosim refuses \
                             rather than rounds: use {} or {}",
                            n / u64::from(j.bs) * u64::from(j.bs),
                            (n / u64::from(j.bs) + 1) * u64::from(j.bs)
                        ),
                    ));
                }
                j.size = n;
            }
            None => {
                let Some(file) = &j.filename else {
                    return Err(self.err(
                        sec.line,
                        format!(
                            "job `{}` has no `size=` and no `filename=` to take a size from \
                             (fio: \"you need to specify size=\")",
                            j.name
                        ),
                    ));
                };
                let n = file_size(file).map_err(|e| {
                    self.err(
                        sec.line,
                        format!(
                            "job `{}` has no `size=`, and its file {} cannot be measured: {e}",
                            j.name,
                            file.display()
                        ),
                    )
                })?;
                if n < u64::from(j.bs) || n % u64::from(j.bs) != 0 {
                    return Err(self.err(
                        sec.line,
                        format!(
                            "job `{}` has no `size=`, and its file {} is {n} bytes, not a whole \
                             number of blocks ({bs_from}); set size=",
                            j.name,
                            file.display()
                        ),
                    ));
                }
                j.size = n;
            }
        }
        if let (Some(s), Some(n)) = (io_size, j.io_size) {
            if n % u64::from(j.bs) != 0 {
                return Err(self.bad(
                    s,
                    format!("io_size is not a whole number of blocks ({bs_from})"),
                ));
            }
        }
        Ok(())
    }

    fn filename(&self, s: &Setting) -> Result<PathBuf, JobFileError> {
        let v = self.value(s)?;
        if v == "-" {
            return Err(self.bad(s, "fio's `-` (stdin/stdout) is not a file biosim can use"));
        }
        // fio splits filename= at ':' into several files; `\:` is a literal colon.
        let mut out = String::with_capacity(v.len());
        let mut chars = v.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.as_str().starts_with(':') => {
                    out.push(':');
                    chars.next();
                }
                ':' => {
                    return Err(self.bad(
                        s,
                        "fio reads `a:b` as several files; biosim runs a job on one file (write \
                         a literal colon as `\\:`)",
                    ))
                }
                c => out.push(c),
            }
        }
        Ok(PathBuf::from(out))
    }

    fn rw(&self, s: &Setting) -> Result<RwPattern, JobFileError> {
        let v = self.value(s)?;
        let supported = "read, write, randread, randwrite, randrw";
        Ok(match v {
            "read" => RwPattern::Read,
            "write" => RwPattern::Write,
            "randread" => RwPattern::RandRead,
            "randwrite" => RwPattern::RandWrite,
            "randrw" => RwPattern::RandRw,
            _ if v.contains(':') => {
                return Err(self.bad(
                    s,
                    format!(
                        "fio's `:N` postfix (I/Os before a new offset) is not supported; write \
                         one of {supported}"
                    ),
                ))
            }
            "rw" | "readwrite" => {
                return Err(self.bad(
                    s,
                    format!(
                        "fio's sequential read/write mix is not in biosim's subset ({supported})"
                    ),
                ))
            }
            "trim" | "randtrim" | "trimwrite" | "randtrimwrite" => {
                return Err(self.bad(
                    s,
                    format!("fio's trims (discards) are not in biosim's subset ({supported})"),
                ))
            }
            _ => return Err(self.bad(s, format!("not an I/O pattern biosim reads ({supported})"))),
        })
    }

    fn ioengine(&self, s: &Setting) -> Result<IoEngine, JobFileError> {
        Ok(match self.value(s)? {
            "psync" => IoEngine::Psync,
            "pvsync2" => IoEngine::Pvsync2,
            "io_uring" => IoEngine::IoUring,
            v => {
                return Err(self.bad(
                    s,
                    format!(
                        "ioengine={v} is not one biosim maps to its engines (psync, pvsync2, \
                         io_uring)"
                    ),
                ))
            }
        })
    }

    fn verify(&self, s: &Setting) -> Result<Option<VerifyKind>, JobFileError> {
        Ok(match self.value(s)? {
            "0" => None,
            // fio's crc32c-intel is its alias for crc32c (hardware-assisted where available).
            "crc32c" | "crc32c-intel" => Some(VerifyKind::Crc32c),
            v @ ("md5" | "crc64" | "crc32" | "crc16" | "crc7" | "sha1" | "sha256" | "sha512"
            | "sha3-224" | "sha3-256" | "sha3-384" | "sha3-512" | "xxhash" | "meta"
            | "pattern" | "null") => {
                return Err(self.bad(
                    s,
                    format!(
                        "verify={v} is one of fio's methods, but biosim implements only crc32c \
                         (blocks carrying their offset, generation and CRC-32C)"
                    ),
                ))
            }
            v => {
                return Err(self.bad(
                    s,
                    format!("`{v}` is not a verify method (biosim implements verify=crc32c)"),
                ))
            }
        })
    }

    fn fallocate(&self, s: &Setting) -> Result<FallocateMode, JobFileError> {
        Ok(match self.value(s)? {
            // "0" and "1" are fio's aliases from when fallocate was a boolean. biosim runs
            // `posix` as fio's `native` (see FallocateMode::Posix).
            "none" | "0" => FallocateMode::None,
            "native" | "posix" | "1" => FallocateMode::Posix,
            v @ ("keep" | "truncate") => {
                return Err(self.bad(
                    s,
                    format!("fallocate={v} is fio's, but biosim supports none, native, posix"),
                ))
            }
            v => {
                return Err(self.bad(
                    s,
                    format!("`{v}` is not a fallocate mode (none, native, posix)"),
                ))
            }
        })
    }

    /// `rwmixread`/`rwmixwrite`: each sets both (`str_rwmix_read_cb()`); given both, they must
    /// add up to 100, and only `randrw` mixes.
    fn rwmix(
        &self,
        j: &mut JobSpec,
        read: Option<&Setting>,
        write: Option<&Setting>,
        values_only: bool,
    ) -> Result<(), JobFileError> {
        let pct = |s: &Setting| -> Result<u8, JobFileError> {
            let n = self.int(s)?;
            if n > 100 {
                return Err(self.bad(s, "a percentage is 0..=100"));
            }
            Ok(n as u8)
        };
        let r = read.map(|s| pct(s).map(|n| (s, n))).transpose()?;
        let w = write.map(|s| pct(s).map(|n| (s, n))).transpose()?;
        let at = match (r, w) {
            (Some((rs, rn)), Some((ws, wn))) => {
                if u32::from(rn) + u32::from(wn) != 100 {
                    return Err(self.err(
                        ws.line,
                        format!(
                            "{} and {} of line {} do not add up to 100 (fio would keep only the \
                             later one)",
                            ws.shown(),
                            rs.shown(),
                            rs.line
                        ),
                    ));
                }
                j.rwmixread = rn;
                rs
            }
            (Some((rs, rn)), None) => {
                j.rwmixread = rn;
                rs
            }
            (None, Some((ws, wn))) => {
                j.rwmixread = 100 - wn;
                ws
            }
            (None, None) => return Ok(()),
        };
        if j.rw != RwPattern::RandRw && !values_only {
            return Err(self.bad(
                at,
                format!(
                    "rw={} does not mix reads and writes, so the mix would be ignored; it \
                     applies to rw=randrw",
                    j.rw.name()
                ),
            ));
        }
        Ok(())
    }
}

/// The size of a file or block device (seeking to its end works for both).
fn file_size(path: &Path) -> std::io::Result<u64> {
    std::fs::File::open(path)?.seek(SeekFrom::End(0))
}

/// Refuses the value forms fio reads differently or biosim does not take.
fn plain(v: &str) -> Result<(), String> {
    if v.starts_with('(') {
        return Err("fio's arithmetic expressions are not supported; write the number".into());
    }
    if v.contains(',') {
        return Err(
            "a comma gives fio one value per direction (read,write,trim); biosim takes one \
             value for all"
                .into(),
        );
    }
    // A leading '-' is a negative number (refused as not a number); a later one is a range.
    if v.contains(':') || v.char_indices().any(|(i, c)| i > 0 && c == '-') {
        return Err("a range is not supported; write one value".into());
    }
    if v.contains('.') {
        return Err(format!(
            "fio reads whole numbers only (it would take `{v}` as the digits before the dot); \
             write a whole number with a smaller unit"
        ));
    }
    Ok(())
}

/// The leading digits of `v` as a number, and the rest.
fn leading(v: &str) -> Result<(u64, &str), String> {
    let end = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    if end == 0 {
        return Err("expected a number".into());
    }
    let n = v[..end]
        .parse::<u64>()
        .map_err(|_| "the number is too large".to_string())?;
    Ok((n, &v[end..]))
}

fn hex(v: &str) -> Option<Result<u64, String>> {
    let h = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X"))?;
    Some(u64::from_str_radix(h, 16).map_err(|e| format!("not a hexadecimal number ({e})")))
}

/// A count: decimal, or hexadecimal with `0x` (fio's `check_int()` and `str_to_decimal()`).
fn parse_int(v: &str) -> Result<u64, String> {
    plain(v)?;
    if let Some(h) = hex(v) {
        return h;
    }
    match leading(v)? {
        (n, "") => Ok(n),
        (_, rest) => Err(format!("unexpected `{rest}` after the number")),
    }
}

/// A size in bytes with fio's suffixes under its default `kb_base=1024`.
fn parse_bytes(v: &str) -> Result<u64, String> {
    plain(v)?;
    if let Some(h) = hex(v) {
        return h;
    }
    let (n, suffix) = leading(v)?;
    let mult: u64 = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        "t" | "tb" => 1 << 40,
        "p" | "pb" => 1 << 50,
        "ki" | "kib" | "mi" | "mib" | "gi" | "gib" | "ti" | "tib" | "pi" | "pib" => {
            return Err(format!(
                "fio reads `{suffix}` as a power of 1000 under its default kb_base=1024 (the \
                 IEC prefixes are swapped there for old scripts: 4KiB is 4000 bytes); write \
                 `k`, `m`, `g` (powers of 1024) instead"
            ))
        }
        "%" => {
            return Err("a percentage of the file is not supported; write the size".into());
        }
        _ => {
            return Err(format!(
                "unknown unit `{suffix}` (sizes take k, m, g, t, p: powers of 1024)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| "the size is too large".to_string())
}

/// A time in microseconds (fio's `check_str_time()`): `bare_unit_us` is the unit of a bare
/// number (seconds for `runtime`, microseconds for `thinktime`).
fn parse_time_us(v: &str, bare_unit_us: u64) -> Result<u64, String> {
    plain(v)?;
    let (n, suffix) = leading(v)?;
    let mult: u64 = match suffix.to_ascii_lowercase().as_str() {
        "" => bare_unit_us,
        "us" | "usec" => 1,
        "ms" | "msec" => 1_000,
        "s" => 1_000_000,
        "m" => 60_000_000,
        "h" => 3_600_000_000,
        "d" => 86_400_000_000,
        _ => {
            return Err(format!(
                "unknown unit `{suffix}` (times take us, usec, ms, msec, s, m, h, d)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| "the time is too long".to_string())
}
