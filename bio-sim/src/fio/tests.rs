//! Job-file parser tests: one per option (its value, fio's units, a bad value refused naming the
//! option and its line), the unknown-option refusal, every cross-check, the INI structure
//! (comments, sections, `[global]` folding, repeated lines), and every file in docs/jobs/.

use super::job::{FallocateMode, IoEngine, JobFile, JobSpec, RwPattern, VerifyKind};
use super::parse::{parse_file, parse_str, JobFileError, SUPPORTED};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn parse(text: &str) -> Result<JobFile, JobFileError> {
    parse_str(text, Path::new("t.fio"))
}

/// The one job `[j]` (header on line 3, after a `[global]` with `size=1m`); `body` starts on
/// line 4.
fn job(body: &str) -> JobSpec {
    let f = parse(&format!("[global]\nsize=1m\n[j]\n{body}\n")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.jobs.len(), 1);
    f.jobs.into_iter().next().expect("one job")
}

/// The refusal of `body` in that job: at `line`, its message containing every one of `needles`.
fn refused(body: &str, line: usize, needles: &[&str]) -> JobFileError {
    let e = parse(&format!("[global]\nsize=1m\n[j]\n{body}\n"))
        .expect_err(&format!("`{body}` should be refused"));
    assert_eq!(e.line, line, "{e}");
    for n in needles {
        assert!(e.message.contains(n), "`{n}` is not in: {e}");
    }
    e
}

fn refused_text(text: &str, line: usize, needles: &[&str]) -> JobFileError {
    let e = parse(text).expect_err("should be refused");
    assert_eq!(e.line, line, "{e}");
    for n in needles {
        assert!(e.message.contains(n), "`{n}` is not in: {e}");
    }
    e
}

// ---- one test per option ----

#[test]
fn filename_is_a_path_with_fios_colon_escape() {
    assert_eq!(
        job("filename=/tmp/x.img").filename,
        Some(PathBuf::from("/tmp/x.img"))
    );
    assert_eq!(
        job(r"filename=/dev/dsk/a\:b").filename,
        Some(PathBuf::from("/dev/dsk/a:b"))
    );
    assert_eq!(job("").filename, None);
    refused("filename=/a:/b", 4, &["`filename=/a:/b`", "several files"]);
    refused("filename=-", 4, &["`filename=-`", "stdin"]);
    refused("filename=", 4, &["`filename=`", "empty value"]);
}

#[test]
fn size_takes_fios_base_2_suffixes_and_refuses_what_fio_reads_otherwise() {
    let size = |v: &str| {
        parse(&format!("[j]\nsize={v}\n"))
            .unwrap_or_else(|e| panic!("{e}"))
            .jobs[0]
            .size
    };
    assert_eq!(size("64m"), 64 << 20);
    assert_eq!(size("64M"), 64 << 20);
    assert_eq!(size("64MB"), 64 << 20);
    assert_eq!(size("1g"), 1 << 30);
    assert_eq!(size("2Gb"), 2 << 30);
    assert_eq!(size("1t"), 1 << 40);
    assert_eq!(size("8k"), 8192);
    assert_eq!(size("8192"), 8192);
    assert_eq!(size("8192b"), 8192);
    assert_eq!(size("0x10000"), 0x10000);
    let bad =
        |v: &str, needle: &str| refused_text(&format!("[j]\nsize={v}\n"), 2, &["size", needle]);
    bad("4KiB", "power of 1000");
    bad("1MiB", "power of 1000");
    bad("1.5g", "whole numbers");
    bad("50%", "percentage");
    bad("12x", "unknown unit `x`");
    bad("99999999p", "too large");
    bad("999999999999999999999", "too large");
    bad("0", "positive");
    bad("-4k", "expected a number");
    bad("1025k", "whole number of blocks");
    bad("64 m", "unknown unit");
}

#[test]
fn rw_and_readwrite_take_the_five_patterns_and_refuse_the_rest_by_name() {
    for (v, p) in [
        ("read", RwPattern::Read),
        ("write", RwPattern::Write),
        ("randread", RwPattern::RandRead),
        ("randwrite", RwPattern::RandWrite),
        ("randrw", RwPattern::RandRw),
    ] {
        assert_eq!(job(&format!("rw={v}")).rw, p);
        assert_eq!(job(&format!("readwrite={v}")).rw, p);
    }
    assert_eq!(job("").rw, RwPattern::Read, "fio's default");
    refused(
        "rw=rw",
        4,
        &["`rw=rw`", "sequential read/write mix", "randrw"],
    );
    refused(
        "readwrite=readwrite",
        4,
        &["`readwrite=readwrite`", "sequential"],
    );
    refused("rw=trim", 4, &["`rw=trim`", "trims"]);
    refused("rw=randread:8", 4, &["`rw=randread:8`", "postfix"]);
    refused(
        "rw=randomread",
        4,
        &["`rw=randomread`", "read, write, randread"],
    );
}

#[test]
fn rwmixread_and_rwmixwrite_set_the_read_percentage_of_randrw() {
    assert_eq!(job("rw=randrw").rwmixread, 50, "fio's default");
    assert_eq!(job("rw=randrw\nrwmixread=70").rwmixread, 70);
    assert_eq!(job("rw=randrw\nrwmixwrite=30").rwmixread, 70);
    assert_eq!(job("rw=randrw\nrwmixread=70\nrwmixwrite=30").rwmixread, 70);
    refused(
        "rw=randrw\nrwmixread=101",
        5,
        &["`rwmixread=101`", "0..=100"],
    );
    refused(
        "rw=randrw\nrwmixread=x",
        5,
        &["`rwmixread=x`", "expected a number"],
    );
    refused(
        "rw=randrw\nrwmixread=70\nrwmixwrite=40",
        6,
        &[
            "`rwmixwrite=40`",
            "`rwmixread=70` of line 5",
            "add up to 100",
        ],
    );
}

#[test]
fn bs_is_a_multiple_of_512_and_one_value_for_both_directions() {
    assert_eq!(job("").bs, 4096, "fio's default");
    assert_eq!(job("bs=512").bs, 512);
    assert_eq!(job("bs=64k").bs, 64 << 10);
    assert_eq!(job("blocksize=1m").bs, 1 << 20);
    refused("bs=4k,8k", 4, &["`bs=4k,8k`", "one value per direction"]);
    refused("bs=4k-16k", 4, &["`bs=4k-16k`", "range"]);
    refused(
        "bs=1000",
        4,
        &[
            "`bs=1000`",
            "multiple of 512, also for buffered I/O (fio's default)",
        ],
    );
    refused("bs=0", 4, &["`bs=0`", "multiple of 512"]);
    refused("bs=8g", 4, &["`bs=8g`", "too large"]);
}

#[test]
fn a_bs_off_the_sector_grid_is_refused_for_buffered_and_direct_io_alike() {
    // Buffered: fio would take it; biosim says why it does not, at the bs line, naming the
    // option that made the job buffered.
    refused(
        "buffered=1\nbs=1000",
        5,
        &[
            "`bs=1000`",
            "buffered I/O (`buffered=1` of line 4)",
            "fio accepts any bs for buffered I/O",
            "whole 512-byte sectors",
        ],
    );
    refused(
        "direct=0\nbs=1000",
        5,
        &["`bs=1000`", "buffered I/O (`direct=0` of line 4)"],
    );
    // Direct: refused for the kernel's reason, whichever line comes first.
    let e = refused(
        "bs=1000\ndirect=1",
        4,
        &["`bs=1000`", "direct I/O (`direct=1` of line 5)", "EINVAL"],
    );
    assert!(!e.message.contains("fio accepts"), "{e}");
    refused(
        "buffered=0\nbs=1500",
        5,
        &["direct I/O (`buffered=0` of line 4)"],
    );
    // From [global] too: the line is the bs line in [global].
    refused_text(
        "[global]\nsize=1m\nbs=2000\ndirect=1\n[j]\n",
        3,
        &["`bs=2000`", "direct I/O (`direct=1` of line 4)"],
    );
    // On the grid, both run.
    assert_eq!(job("buffered=1\nbs=2560\nsize=5m").bs, 2560);
    assert_eq!(job("direct=1\nbs=2560\nsize=5m").bs, 2560);
}

#[test]
fn iodepth_is_positive_and_bounded() {
    assert_eq!(job("").iodepth, 1);
    assert_eq!(job("ioengine=io_uring\niodepth=32").iodepth, 32);
    refused(
        "ioengine=io_uring\niodepth=0",
        5,
        &["`iodepth=0`", "1..=32768"],
    );
    refused(
        "ioengine=io_uring\niodepth=40000",
        5,
        &["`iodepth=40000`", "IORING_MAX_ENTRIES"],
    );
    refused(
        "ioengine=io_uring\niodepth=deep",
        5,
        &["`iodepth=deep`", "expected a number"],
    );
}

#[test]
fn numjobs_is_one_to_sixty_four_simulated_cpus() {
    assert_eq!(job("").numjobs, 1);
    assert_eq!(job("numjobs=4").numjobs, 4);
    assert_eq!(job("numjobs=64").numjobs, 64);
    refused("numjobs=0", 4, &["`numjobs=0`", "1..=64"]);
    refused("numjobs=65", 4, &["`numjobs=65`", "simulated CPU"]);
}

#[test]
fn runtime_is_in_seconds_unless_a_unit_says_otherwise() {
    let rt = |v: &str| job(&format!("runtime={v}")).runtime;
    assert_eq!(rt("10"), Some(Duration::from_secs(10)));
    assert_eq!(rt("10s"), Some(Duration::from_secs(10)));
    assert_eq!(rt("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(rt("500msec"), Some(Duration::from_millis(500)));
    assert_eq!(rt("250us"), Some(Duration::from_micros(250)));
    assert_eq!(rt("2m"), Some(Duration::from_secs(120)));
    assert_eq!(rt("1h"), Some(Duration::from_secs(3600)));
    assert_eq!(rt("0"), None, "fio's runtime=0 is no limit");
    assert_eq!(job("timeout=3").runtime, Some(Duration::from_secs(3)));
    refused("runtime=10x", 4, &["`runtime=10x`", "unknown unit `x`"]);
    refused("runtime=10sec", 4, &["`runtime=10sec`", "us, usec, ms"]);
    refused("runtime=1.5", 4, &["`runtime=1.5`", "whole numbers"]);
    refused(
        "runtime=99999999999999999d",
        4,
        &["`runtime=99999999999999999d`", "too long"],
    );
}

#[test]
fn time_based_stands_alone_or_takes_0_or_1_and_needs_a_runtime() {
    assert!(!job("runtime=5").time_based);
    assert!(job("runtime=5\ntime_based").time_based);
    assert!(job("runtime=5\ntime_based=1").time_based);
    assert!(!job("time_based=0").time_based);
    refused("runtime=5\ntime_based=2", 5, &["`time_based=2`", "0 or 1"]);
    refused("time_based", 4, &["`time_based`", "needs `runtime=`"]);
    refused(
        "runtime=0\ntime_based",
        5,
        &["`time_based`", "`runtime=0` of line 4 is zero"],
    );
}

#[test]
fn number_ios_caps_the_ios_per_clone() {
    let j = job("number_ios=100");
    assert_eq!(j.number_ios, Some(100));
    assert_eq!(j.ios_per_clone(), 100);
    assert_eq!(job("number_ios=0").number_ios, None, "fio's 0 is no cap");
    assert_eq!(
        job("number_ios=1000000").ios_per_clone(),
        256,
        "size=1m of 4k blocks"
    );
    refused(
        "number_ios=-1",
        4,
        &["`number_ios=-1`", "expected a number"],
    );
    refused("number_ios=1k", 4, &["`number_ios=1k`", "unexpected `k`"]);
}

#[test]
fn io_size_and_io_limit_set_the_bytes_per_clone() {
    let j = job("io_size=256k");
    assert_eq!(j.io_size, Some(256 << 10));
    assert_eq!(j.bytes_per_clone(), 256 << 10);
    assert_eq!(j.ios_per_clone(), 64);
    assert_eq!(
        job("io_limit=2m").io_size,
        Some(2 << 20),
        "more than size wraps, as fio"
    );
    assert_eq!(job("").bytes_per_clone(), 1 << 20, "default: size");
    refused(
        "io_size=1000",
        4,
        &["`io_size=1000`", "whole number of blocks"],
    );
    refused("io_size=lots", 4, &["`io_size=lots`", "expected a number"]);
}

#[test]
fn direct_is_o_direct_and_needs_a_value_as_in_fio() {
    assert!(!job("").direct, "fio's default is buffered");
    assert!(job("direct=1").direct);
    assert!(!job("direct=0").direct);
    refused(
        "direct",
        4,
        &["`direct` needs a value", "fio refuses it bare"],
    );
    refused("direct=yes", 4, &["`direct=yes`", "0 or 1"]);
}

#[test]
fn buffered_is_the_inverse_of_direct() {
    assert!(!job("buffered=1").direct);
    assert!(job("buffered=0").direct);
    assert!(job("direct=1\nbuffered=0").direct, "agreeing is fine");
    refused(
        "direct=1\nbuffered=1",
        5,
        &["`buffered=1` contradicts `direct=1` of line 4"],
    );
    refused("buffered=2", 4, &["`buffered=2`", "0 or 1"]);
}

#[test]
fn ioengine_maps_psync_pvsync2_and_io_uring_and_refuses_others_by_name() {
    assert_eq!(job("").ioengine, IoEngine::Psync, "fio's default on Linux");
    assert_eq!(job("ioengine=psync").ioengine, IoEngine::Psync);
    assert_eq!(job("ioengine=pvsync2").ioengine, IoEngine::Pvsync2);
    assert_eq!(job("ioengine=io_uring").ioengine, IoEngine::IoUring);
    for v in ["libaio", "sync", "posixaio", "mmap", "io_uring_cmd"] {
        refused(
            &format!("ioengine={v}"),
            4,
            &[&format!("`ioengine={v}`"), "psync, pvsync2, io_uring"],
        );
    }
}

#[test]
fn nowait_is_an_option_of_pvsync2_and_io_uring_only() {
    assert!(job("ioengine=pvsync2\nnowait=1").nowait);
    assert!(job("ioengine=io_uring\nnowait=1").nowait);
    assert!(!job("ioengine=io_uring\nnowait=0").nowait);
    refused(
        "ioengine=psync\nnowait=1",
        5,
        &["`nowait=1`", "psync has no `nowait`"],
    );
    refused(
        "nowait=1",
        4,
        &["`nowait=1`", "RWF_NOWAIT needs ioengine=pvsync2"],
    );
    refused("ioengine=psync\nnowait=0", 5, &["psync has no `nowait`"]);
    refused(
        "ioengine=io_uring\nnowait=on",
        5,
        &["`nowait=on`", "0 or 1"],
    );
}

#[test]
fn uncached_is_rwf_dontcache_for_buffered_pvsync2_and_io_uring() {
    assert!(job("ioengine=pvsync2\nuncached=1").uncached);
    assert!(job("ioengine=io_uring\nbuffered=1\nuncached=1").uncached);
    refused(
        "ioengine=psync\nuncached=1",
        5,
        &["psync has no `uncached`", "RWF_DONTCACHE"],
    );
    refused(
        "ioengine=pvsync2\ndirect=1\nuncached=1",
        6,
        &["`uncached=1`", "O_DIRECT bypasses the page cache"],
    );
    refused(
        "ioengine=pvsync2\nuncached=2",
        5,
        &["`uncached=2`", "0 or 1"],
    );
}

#[test]
fn verify_is_crc32c_only_and_fios_other_methods_are_refused_by_name() {
    assert_eq!(job("").verify, None);
    assert_eq!(job("verify=crc32c").verify, Some(VerifyKind::Crc32c));
    assert_eq!(job("verify=crc32c-intel").verify, Some(VerifyKind::Crc32c));
    assert_eq!(job("verify=0").verify, None);
    for v in ["md5", "sha256", "xxhash", "pattern", "crc32"] {
        refused(
            &format!("verify={v}"),
            4,
            &[
                &format!("`verify={v}`"),
                "one of fio's methods",
                "only crc32c",
            ],
        );
    }
    refused(
        "verify=crc33",
        4,
        &["`verify=crc33`", "not a verify method"],
    );
}

#[test]
fn rate_iops_is_one_cap_for_all_directions() {
    assert_eq!(job("rate_iops=500").rate_iops, Some(500));
    assert_eq!(job("rate_iops=0").rate_iops, None, "fio's 0 is no cap");
    refused(
        "rate_iops=100,200",
        4,
        &["`rate_iops=100,200`", "one value per direction"],
    );
    refused(
        "rate_iops=fast",
        4,
        &["`rate_iops=fast`", "expected a number"],
    );
}

#[test]
fn thinktime_is_in_microseconds_unless_a_unit_says_otherwise() {
    assert_eq!(
        job("thinktime=100").thinktime,
        Some(Duration::from_micros(100))
    );
    assert_eq!(
        job("thinktime=2ms").thinktime,
        Some(Duration::from_millis(2))
    );
    assert_eq!(job("thinktime=1s").thinktime, Some(Duration::from_secs(1)));
    assert_eq!(job("thinktime=0").thinktime, None);
    refused(
        "thinktime=1.5ms",
        4,
        &["`thinktime=1.5ms`", "whole numbers"],
    );
    refused(
        "thinktime=5ns",
        4,
        &["`thinktime=5ns`", "unknown unit `ns`"],
    );
}

#[test]
fn fsync_flushes_every_n_writes() {
    assert_eq!(job("rw=randwrite\nfsync=32").fsync, Some(32));
    assert_eq!(job("rw=randrw\nfsync=1").fsync, Some(1));
    assert_eq!(job("rw=randwrite\nfsync=0").fsync, None);
    refused(
        "rw=randwrite\nfsync=often",
        5,
        &["`fsync=often`", "expected a number"],
    );
}

#[test]
fn overwrite_lays_the_file_out_first() {
    assert!(!job("").overwrite);
    assert!(job("rw=randwrite\noverwrite=1").overwrite);
    refused("overwrite=true", 4, &["`overwrite=true`", "0 or 1"]);
}

#[test]
fn fallocate_takes_none_native_posix_and_fios_boolean_aliases() {
    assert_eq!(
        job("").fallocate,
        FallocateMode::Posix,
        "fio's default native"
    );
    assert_eq!(job("fallocate=none").fallocate, FallocateMode::None);
    assert_eq!(job("fallocate=0").fallocate, FallocateMode::None);
    assert_eq!(job("fallocate=native").fallocate, FallocateMode::Posix);
    assert_eq!(job("fallocate=posix").fallocate, FallocateMode::Posix);
    assert_eq!(job("fallocate=1").fallocate, FallocateMode::Posix);
    refused(
        "fallocate=keep",
        4,
        &["`fallocate=keep`", "none, native, posix"],
    );
    refused(
        "fallocate=sparse",
        4,
        &["`fallocate=sparse`", "not a fallocate mode"],
    );
}

#[test]
fn randseed_is_decimal_or_hex_with_fios_default() {
    assert_eq!(job("").randseed, 0x89);
    assert_eq!(job("randseed=1234").randseed, 1234);
    assert_eq!(job("randseed=0xdead").randseed, 0xdead);
    refused("randseed=0xzz", 4, &["`randseed=0xzz`", "hexadecimal"]);
    refused(
        "randseed=seed",
        4,
        &["`randseed=seed`", "expected a number"],
    );
}

#[test]
fn name_renames_a_job_but_not_every_job() {
    assert_eq!(job("").name, "j");
    assert_eq!(job("name=randread-qd1").name, "randread-qd1");
    refused_text(
        "[global]\nname=all\nsize=1m\n[j]\n",
        2,
        &["`name=all`", "in [global]"],
    );
    refused("name=", 4, &["`name=`", "empty value"]);
}

#[test]
fn description_is_kept_as_text() {
    assert_eq!(job("").description, None);
    assert_eq!(
        job("description=4k random reads = the seed's case 3")
            .description
            .as_deref(),
        Some("4k random reads = the seed's case 3")
    );
    refused("description=", 4, &["`description=`", "empty value"]);
}

#[test]
fn stonewall_and_wait_for_previous_are_required_after_the_first_job() {
    let f = parse("[global]\nsize=1m\nstonewall\n[a]\n[b]\n").expect("parses");
    assert!(f.jobs.iter().all(|j| j.stonewall));
    let f = parse("[global]\nsize=1m\n[a]\n[b]\nwait_for_previous\n").expect("parses");
    assert!(!f.jobs[0].stonewall && f.jobs[1].stonewall);
    assert!(!job("").stonewall, "a lone job needs none");
    refused_text(
        "[global]\nsize=1m\n[a]\n[b]\n",
        4,
        &["job `b` has no `stonewall`", "at the same time"],
    );
    refused("stonewall=3", 4, &["`stonewall=3`", "0 or 1"]);
}

#[test]
fn the_supported_list_names_each_option_once_and_each_is_accepted() {
    let mut seen = std::collections::BTreeSet::new();
    for o in SUPPORTED {
        assert!(seen.insert(*o), "{o} listed twice");
        // Each name is known to the parser: it never comes back as an unknown option.
        let e = parse(&format!("[j]\n{o}=@\n"));
        if let Err(e) = e {
            assert!(!e.message.contains("unknown option"), "{o}: {e}");
        }
    }
    assert_eq!(SUPPORTED.len(), 27);
}

// ---- unknown options, structure, folding ----

#[test]
fn an_unknown_option_is_refused_by_name_with_the_subset() {
    let e = refused(
        "ramp_time=2",
        4,
        &["unknown option `ramp_time`", "filename, size, rw,"],
    );
    assert_eq!(
        e.to_string().lines().next().expect("a line"),
        e.to_string(),
        "one line"
    );
    assert!(
        e.to_string()
            .starts_with("t.fio:4: unknown option `ramp_time`"),
        "{e}"
    );
    refused("norandommap", 4, &["unknown option `norandommap`"]);
    refused("Direct=1", 4, &["unknown option `Direct`"]);
}

#[test]
fn a_repeated_option_in_one_section_is_refused_naming_both_lines() {
    refused(
        "bs=4k\nbs=8k",
        5,
        &[
            "`bs=8k` repeats `bs` of line 4",
            "section [j]",
            "fio would take the last one",
        ],
    );
    refused("rw=read\nreadwrite=write", 5, &["repeats `rw` of line 4"]);
    refused_text(
        "[global]\nsize=1m\nsize=2m\n[j]\n",
        3,
        &["repeats `size` of line 2", "[global]"],
    );
}

#[test]
fn global_sections_fold_into_the_jobs_after_them_in_order() {
    let f = parse(
        "[global]\nsize=1m\nbs=8k\ndirect=1\nstonewall\n\
         [a]\n\
         [b]\nbs=16k\nbuffered=1\n\
         [global]\nbs=64k\n\
         [c]\n",
    )
    .expect("parses");
    let by: Vec<(&str, u32, bool)> = f
        .jobs
        .iter()
        .map(|j| (j.name.as_str(), j.bs, j.direct))
        .collect();
    assert_eq!(
        by,
        [("a", 8192, true), ("b", 16384, false), ("c", 65536, true)]
    );
    assert_eq!(f.jobs[0].line, 6);
    assert_eq!(f.jobs[2].line, 12);
    assert_eq!(f.path, PathBuf::from("t.fio"));
}

#[test]
fn a_global_value_is_checked_even_where_every_job_overrides_it() {
    refused_text(
        "[global]\nbs=huge\n[j]\nsize=1m\nbs=4k\n",
        2,
        &["`bs=huge`"],
    );
    refused_text("[global]\nsize=1.5g\n[j]\nsize=1m\n", 2, &["`size=1.5g`"]);
    refused_text(
        "[global]\nname=x\nsize=1m\n[j]\nname=y\n",
        2,
        &["`name=x`", "in [global]"],
    );
    // A [global] mix for randrw jobs is fine before the job says randrw.
    let f = parse("[global]\nrwmixread=30\nsize=1m\n[j]\nrw=randrw\n").expect("parses");
    assert_eq!(f.jobs[0].rwmixread, 30);
}

#[test]
fn comments_blank_lines_and_blanks_around_equals_are_fios() {
    let f = parse(
        "# a comment\n; another\n\n[global]   ; trailing\n  size = 1m # trailing\n\
         \t rw=randread;x\n\n[j]\nbs = 8k\n",
    )
    .expect("parses");
    let j = &f.jobs[0];
    assert_eq!((j.size, j.rw, j.bs), (1 << 20, RwPattern::RandRead, 8192));
}

#[test]
fn section_headers_are_checked() {
    refused_text("size=1m\n[j]\n", 1, &["`size=1m` comes before any section"]);
    refused_text("[]\nsize=1m\n", 1, &["no name"]);
    refused_text("[j\nsize=1m\n", 1, &["does not end with `]`"]);
    refused_text("[a]b]\nsize=1m\n", 1, &["bracket"]);
    refused_text("[global2]\nsize=1m\n[j]\n", 1, &["starts with `global`"]);
    refused_text("[global]\nsize=1m\n", 0, &["no job section"]);
    refused_text("", 0, &["no job section"]);
    refused_text(
        "[j]\nsize=1m\n[global]\nbs=8k\n",
        3,
        &["after the last job", "applies to no job"],
    );
}

#[test]
fn a_job_name_used_twice_is_refused() {
    refused_text(
        "[global]\nsize=1m\nstonewall\n[a]\n[a]\n",
        5,
        &["job `a` is named twice (line 4 and line 5)"],
    );
    refused_text(
        "[global]\nsize=1m\nstonewall\n[a]\n[b]\nname=a\n",
        5,
        &["job `a` is named twice"],
    );
}

#[test]
fn values_fio_would_expand_or_compute_are_refused() {
    refused(
        "filename=${HOME}/x",
        4,
        &["`filename=${HOME}/x`", "environment"],
    );
    refused("bs=(4*1024)", 4, &["`bs=(4*1024)`", "arithmetic"]);
    refused("include other.fio", 4, &["`include`"]);
    refused("iodepth=", 4, &["`iodepth=` has an empty value"]);
    refused("size", 4, &["`size` needs a value"]);
    refused("=4k", 4, &["`=4k` has no option name"]);
    refused("iodepth=99999999999999999999", 4, &["too large"]);
}

// ---- cross-checks ----

#[test]
fn iodepth_above_one_with_a_sync_engine_is_refused() {
    refused(
        "iodepth=32",
        4,
        &["`iodepth=32`", "ioengine=psync issues one I/O at a time"],
    );
    refused(
        "ioengine=pvsync2\niodepth=2",
        5,
        &["ioengine=pvsync2", "capped at 1"],
    );
    assert_eq!(job("ioengine=io_uring\niodepth=2").iodepth, 2);
}

#[test]
fn size_is_needed_without_a_filename_and_is_whole_blocks_of_at_least_one() {
    refused_text(
        "[j]\nrw=read\n",
        1,
        &["no `size=` and no `filename=`", "you need to specify size="],
    );
    refused(
        "bs=2m",
        2,
        &[
            "`size=1m`",
            "smaller than one block",
            "bs=2097152 of line 4",
        ],
    );
    refused_text(
        "[j]\nsize=6k\n",
        2,
        &["`size=6k`", "bs=4096, fio's default", "use 4096 or 8192"],
    );
}

#[test]
fn a_filename_without_size_takes_the_files_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("f.img");
    std::fs::write(&p, vec![0u8; 12288]).expect("write");
    let f = parse(&format!("[j]\nfilename={}\n", p.display())).expect("parses");
    assert_eq!(f.jobs[0].size, 12288);
    std::fs::write(&p, vec![0u8; 5000]).expect("write");
    refused_text(
        &format!("[j]\nfilename={}\n", p.display()),
        1,
        &["is 5000 bytes, not a whole number of blocks"],
    );
    refused_text(
        &format!("[j]\nfilename={}/missing\n", dir.path().display()),
        1,
        &["cannot be measured", "No such file"],
    );
}

#[test]
fn rwmixread_without_randrw_is_refused_as_it_would_be_ignored() {
    refused(
        "rw=randread\nrwmixread=70",
        5,
        &["`rwmixread=70`", "rw=randread does not mix"],
    );
    refused(
        "rwmixwrite=10",
        4,
        &["`rwmixwrite=10`", "rw=read does not mix"],
    );
}

#[test]
fn fsync_on_a_job_that_never_writes_is_refused() {
    refused("rw=randread\nfsync=8", 5, &["`fsync=8`", "never writes"]);
}

#[test]
fn a_job_overrides_global_direct_with_buffered() {
    let f = parse("[global]\nsize=1m\ndirect=1\n[j]\nbuffered=1\nioengine=pvsync2\nuncached=1\n")
        .expect("the job's buffered=1 replaces [global]'s direct=1");
    assert!(!f.jobs[0].direct && f.jobs[0].uncached);
}

#[test]
fn parse_file_names_the_file_in_errors() {
    let e = parse_file(Path::new("/nonexistent/x.fio")).expect_err("missing");
    assert_eq!(e.line, 0);
    assert!(
        e.to_string()
            .starts_with("/nonexistent/x.fio:0: cannot read the job file"),
        "{e}"
    );
}

// ---- docs/jobs ----

fn docs_jobs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/jobs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "fio"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_job_file_in_docs_jobs_parses() {
    let files = docs_jobs();
    assert!(files.len() >= 5, "{files:?}");
    for p in &files {
        let f = parse_file(p).unwrap_or_else(|e| panic!("{e}"));
        assert!(!f.jobs.is_empty());
        for j in &f.jobs {
            assert!(
                j.size >= u64::from(j.bs) && j.ios_per_clone() > 0,
                "{}: {j:?}",
                p.display()
            );
        }
    }
}

#[test]
fn the_loop_seeds_three_cases_are_in_docs_jobs_at_qd1_and_qd32() {
    let load = |name: &str| {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../docs/jobs")
            .join(name);
        parse_file(&p).unwrap_or_else(|e| panic!("{e}")).jobs
    };
    for (file, rw, overwrite, fallocate) in [
        (
            "loop-randwrite-sparse.fio",
            RwPattern::RandWrite,
            false,
            FallocateMode::None,
        ),
        (
            "loop-randwrite-overwrite.fio",
            RwPattern::RandWrite,
            true,
            FallocateMode::Posix,
        ),
        (
            "loop-randread.fio",
            RwPattern::RandRead,
            false,
            FallocateMode::Posix,
        ),
    ] {
        let jobs = load(file);
        let shape: Vec<(IoEngine, u32)> = jobs.iter().map(|j| (j.ioengine, j.iodepth)).collect();
        assert_eq!(
            shape,
            [(IoEngine::Psync, 1), (IoEngine::IoUring, 32)],
            "{file}"
        );
        for j in &jobs {
            assert_eq!(
                (j.rw, j.overwrite, j.fallocate),
                (rw, overwrite, fallocate),
                "{file}"
            );
            assert!(
                j.direct && j.bs == 4096 && j.size == 64 << 20,
                "{file}: {j:?}"
            );
            assert!(
                j.filename.is_none(),
                "{file}: a fresh temporary file per job"
            );
        }
    }
    let v = load("verify-crc32c.fio");
    assert!(v
        .iter()
        .all(|j| j.verify == Some(VerifyKind::Crc32c) && j.rw == RwPattern::RandRw));
    let d = load("dontcache-write.fio");
    let flags: Vec<(bool, bool)> = d.iter().map(|j| (j.direct, j.uncached)).collect();
    assert_eq!(flags, [(false, false), (false, true)]);
}
