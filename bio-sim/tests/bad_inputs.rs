//! Bad inputs, each with a clear error that names what and where, a non-zero exit (2 for an input
//! the user can fix, 1 for a file that failed under the run) and nothing left behind: the
//! directory the run used lists the same before and after. The commands run the real binary;
//! what no command can reach yet (a bio the user shapes) goes through the library.

use bio_core::block::{submit_bio_noacct, BioEndIo, BlkStatus, ReqOp, BLK_STS_OK};
use bio_core::drivers::block::loop_drv::{
    LoopBacking, LoopDevice, LoopVariant, LO_FLAGS_DIRECT_IO,
};
use bio_core::kernel::CpuId;
use bio_core::{Kernel, KernelConfig};
use bio_sim::dev::backing::{BackingFile, OpenOptions};
use bio_sim::dev::loop_file::{FileBacking, UringBacking};
use bio_sim::runtime::threaded::{ThreadedConfig, ThreadedRuntime};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_biosim");

/// A scratch directory on the target's filesystem (a disk filesystem with O_DIRECT).
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn biosim(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `args`, expects exit `code` with every `needles` in stderr, and `dir` as it was.
fn refused(args: &[&str], code: i32, needles: &[&str], dir: &Path) -> String {
    let before = listing(dir);
    let o = biosim(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: `{n}` not in: {err}");
    }
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert_eq!(
        listing(dir),
        before,
        "{args:?} left something in {}",
        dir.display()
    );
    err
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn missing_inputs_are_refused_naming_them() {
    let d = scratch();
    let missing = d.path().join("missing.scn");
    refused(&["run", s(&missing)], 2, &[s(&missing)], d.path());
    let nodir = d.path().join("nodir");
    refused(
        &["bench", "loop", "--dir", s(&nodir), "--size", "1M"],
        2,
        &["--dir", s(&nodir), "not a directory"],
        d.path(),
    );
    // A backing file that does not exist, opened without create_size: the open names the path
    // and its flags, and creates nothing.
    let img = d.path().join("missing.img");
    let e = BackingFile::open(
        &img,
        &OpenOptions {
            direct: true,
            ..OpenOptions::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains(s(&img)) && e.contains("O_RDWR|O_DIRECT"), "{e}");
    let e = bio_sim::dev::kernel_loop::KernelLoop::attach(&img, true).unwrap_err();
    assert!(e.contains(s(&img)), "{e}");
    assert!(listing(d.path()).is_empty());
}

/// `FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS` (include/uapi/linux/fs.h, `_IOR/_IOW('f', 1/2, long)`).
const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
/// `FS_IMMUTABLE_FL`: no write, rename, unlink or new entry, even for root.
const FS_IMMUTABLE_FL: libc::c_int = 0x10;

/// Makes `path` read-only for this process: `FS_IMMUTABLE_FL` as root (root ignores mode bits),
/// mode 0444/0555 otherwise; undone on drop. `None` (with the reason) where neither works.
struct ReadOnly {
    path: PathBuf,
    immutable: bool,
}

fn set_flags(path: &Path, on: bool) -> std::io::Result<()> {
    let f = std::fs::File::open(path)?;
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS/SETFLAGS read and write one int we own, on an fd we own.
    unsafe {
        if libc::ioctl(f.as_raw_fd(), FS_IOC_GETFLAGS as _, &mut flags) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        flags = if on {
            flags | FS_IMMUTABLE_FL
        } else {
            flags & !FS_IMMUTABLE_FL
        };
        if libc::ioctl(f.as_raw_fd(), FS_IOC_SETFLAGS as _, &flags) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

impl ReadOnly {
    fn new(path: &Path) -> Result<ReadOnly, String> {
        use std::os::unix::fs::PermissionsExt;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            set_flags(path, true)
                .map_err(|e| format!("FS_IMMUTABLE_FL on {}: {e}", path.display()))?;
            return Ok(ReadOnly {
                path: path.to_owned(),
                immutable: true,
            });
        }
        let mode = if path.is_dir() { 0o555 } else { 0o444 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        Ok(ReadOnly {
            path: path.to_owned(),
            immutable: false,
        })
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if self.immutable {
            let _ = set_flags(&self.path, false);
        } else {
            let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o755));
        }
    }
}

#[test]
fn a_read_only_file_or_directory_refuses_writes_and_stays_as_it_was() {
    let d = scratch();
    let scn = d.path().join("in.scn");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/scenarios/rollback-cpu1-v7.scn"
        ),
        &scn,
    )
    .unwrap();
    let out = d.path().join("old.trace");
    std::fs::write(&out, "keep me\n").unwrap();
    let ro = match ReadOnly::new(&out) {
        Ok(r) => r,
        Err(why) => {
            eprintln!("skipped: cannot make a read-only file here: {why}");
            return;
        }
    };
    // The backing opened for writes: refused by the kernel, named with its flags.
    let e = BackingFile::open(&out, &OpenOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains(s(&out)) && e.contains("O_RDWR"), "{e}");
    // --force over a read-only output: the replace fails, the file keeps its bytes, and the
    // temporary written beside it is gone. (Non-root: the file is 0444 in a writable directory,
    // which rename(2) may replace; then only the immutable flag can refuse it.)
    if ro.immutable {
        refused(
            &["run", s(&scn), "--quiet", "--trace", s(&out), "--force"],
            2,
            &["--trace", s(&out), "cannot write"],
            d.path(),
        );
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me\n");
    }
    drop(ro);
    // A read-only directory: the bench's file cannot be created in it.
    let sub = d.path().join("ro");
    std::fs::create_dir(&sub).unwrap();
    let ro = ReadOnly::new(&sub).unwrap();
    refused(
        &["bench", "loop", "--dir", s(&sub), "--size", "1M"],
        2,
        &["--dir", s(&sub)],
        &sub,
    );
    drop(ro);
    assert!(listing(&sub).is_empty());
}

/// One bio of `len` bytes at `sector` through the loop model (v5, `LO_FLAGS_DIRECT_IO`) over a
/// 64-block O_DIRECT file: its status, and whether it ended exactly once.
fn one_bio(dir: &Path, op: ReqOp, sector: u64, len: usize) -> (BlkStatus, u64) {
    let file = Arc::new(
        BackingFile::open(
            &dir.join("lo.img"),
            &OpenOptions {
                direct: true,
                read_only: false,
                create_size: Some(64 * 4096),
            },
        )
        .unwrap(),
    );
    let kernel = Kernel::boot(KernelConfig::default(), 1, 1).unwrap();
    let backing = Arc::new(FileBacking::new(Arc::clone(&file)));
    let lo = LoopDevice::new(
        &kernel,
        0,
        backing as Arc<dyn LoopBacking>,
        LO_FLAGS_DIRECT_IO,
        0,
        LoopVariant::V5,
    );
    let rt = ThreadedRuntime::start(Arc::clone(&kernel), ThreadedConfig::default()).unwrap();
    let status = Arc::new(Mutex::new(None));
    let ends = Arc::new(AtomicU64::new(0));
    let (st, n, lo2) = (Arc::clone(&status), Arc::clone(&ends), Arc::clone(&lo));
    rt.run_on(CpuId(0), move |cx| {
        let bio = cx
            .kernel()
            .bio_alloc(op, sector)
            .with_data(vec![0x5a; len])
            .with_end_io(BioEndIo::new("bad_input_end_io", move |bio, _| {
                *st.lock().unwrap() = Some(bio.status());
                n.fetch_add(1, Ordering::SeqCst);
            }));
        submit_bio_noacct(bio, &*lo2, cx);
    })
    .unwrap();
    let t0 = Instant::now();
    while ends.load(Ordering::SeqCst) == 0 && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(rt.quiesce(Duration::from_secs(20)));
    assert!(rt.shutdown().is_clean());
    let got = status.lock().unwrap().expect("the bio ended");
    (got, ends.load(Ordering::SeqCst))
}

#[test]
fn an_unaligned_direct_bio_and_a_bio_beyond_the_end_fail_without_a_panic() {
    let d = scratch();
    // Beyond the end: bio_check_eod() ends it with BLK_STS_IOERR before the driver sees it.
    let (st, n) = one_bio(d.path(), ReqOp::Write, 64 * 8, 4096);
    assert_ne!(st, BLK_STS_OK, "a write past the last sector");
    assert_eq!(n, 1, "ended once");
    // Straddling the end: also refused whole.
    let (st, _) = one_bio(d.path(), ReqOp::Read, 63 * 8 + 4, 4096);
    assert_ne!(st, BLK_STS_OK);
    // Unaligned for O_DIRECT: a length that is no whole sector; the file refuses it (EINVAL)
    // or the block layer does, and the bio ends with an error once.
    let (st, n) = one_bio(d.path(), ReqOp::Write, 8, 100);
    assert_ne!(st, BLK_STS_OK, "a 100-byte direct write");
    assert_eq!(n, 1);
    // The aligned twin of each goes through: the failures above are the inputs', not the rig's.
    let (st, _) = one_bio(d.path(), ReqOp::Write, 63 * 8, 4096);
    assert_eq!(st, BLK_STS_OK);
    assert_eq!(listing(d.path()), ["lo.img"]);
}

#[test]
fn a_backing_that_runs_out_of_space_is_a_device_error_and_its_file_is_removed() {
    let d = scratch();
    let before = listing(d.path());
    let mut cmd = Command::new(BIN);
    cmd.args([
        "bench",
        "loop",
        "--dir",
        s(d.path()),
        "--size",
        "8M",
        "--rounds",
        "1",
        "--ios",
        "16",
    ]);
    // SAFETY: signal and setrlimit are async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // EFBIG instead of death by SIGXFSZ, so biosim sees the error and cleans up.
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 4 << 20,
                rlim_max: 4 << 20,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("File too large") && err.contains(s(d.path())),
        "{err}"
    );
    assert_eq!(listing(d.path()), before, "the backing file was removed");
}

#[test]
fn a_size_that_does_not_fit_or_is_no_whole_block_is_refused_and_nothing_is_created() {
    let d = scratch();
    let (avail, _) = bio_sim::dev::space::available(d.path()).unwrap();
    let gib = (avail >> 30) + 2;
    let size = format!("{gib}G");
    refused(
        &["bench", "loop", "--dir", s(d.path()), "--size", &size],
        2,
        &["--size", "does not fit", s(d.path())],
        d.path(),
    );
    refused(
        &[
            "bench",
            "dontcache",
            "--dir",
            s(d.path()),
            "--size",
            &size,
            "--rounds",
            "1",
        ],
        2,
        &["--size", "does not fit"],
        d.path(),
    );
    for cmd in ["loop", "dontcache"] {
        refused(
            &["bench", cmd, "--dir", s(d.path()), "--size", "1025K"],
            2,
            &["--size 1025K", "4096-byte block size"],
            d.path(),
        );
    }
}

/// Sets `sig` to `SIG_DFL` in the child before the exec: a test must not depend on what the test
/// harness inherited (a background job of a non-interactive shell starts with `SIGINT` ignored,
/// and biosim leaves an inherited `SIG_IGN` alone, as a shell expects).
fn default_disposition(cmd: &mut Command, sig: libc::c_int) {
    // SAFETY: between fork and exec the closure only calls signal(2), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Waits for `child` after it was sent `sig`, at most 60 s (then kills it and fails), so a
/// signal that is not acted on fails the test instead of hanging it. Not a timing assertion.
fn wait_bounded(child: &mut std::process::Child, sig: libc::c_int) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("biosim did not end within 60 s of signal {sig}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sigint_and_sigterm_mid_run_remove_the_temporary_file() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let d = scratch();
        let mut cmd = Command::new(BIN);
        cmd.args([
            "bench",
            "loop",
            "--dir",
            s(d.path()),
            "--size",
            "4M",
            "--rounds",
            "100",
            "--ios",
            "100000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        default_disposition(&mut cmd, sig);
        let mut child = cmd.spawn().unwrap();
        let t0 = Instant::now();
        while listing(d.path()).is_empty() {
            assert!(t0.elapsed() < Duration::from_secs(30), "no temporary file");
            assert!(child.try_wait().unwrap().is_none(), "the bench ended early");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(300)); // well into the run
                                                        // SAFETY: kill on our child's pid.
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = wait_bounded(&mut child, sig);
        assert_eq!(status.signal(), Some(sig), "{status:?}");
        assert!(
            listing(d.path()).is_empty(),
            "left: {:?}",
            listing(d.path())
        );
    }
}

#[test]
fn sigterm_at_any_moment_of_a_bench_leaves_no_temporary_file() {
    // From before the handler is installed to mid-run, while simulator threads exist: the temp
    // file is registered before it is created, so no moment leaves it behind.
    for delay_ms in [0u64, 5, 20, 60, 150] {
        let d = scratch();
        let mut cmd = Command::new(BIN);
        cmd.args([
            "bench",
            "loop",
            "--dir",
            s(d.path()),
            "--size",
            "4M",
            "--rounds",
            "100",
            "--ios",
            "100000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        default_disposition(&mut cmd, libc::SIGTERM);
        let mut child = cmd.spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: kill on our child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = wait_bounded(&mut child, libc::SIGTERM);
        assert_eq!(
            status.signal(),
            Some(libc::SIGTERM),
            "{delay_ms} ms: {status:?}"
        );
        assert!(
            listing(d.path()).is_empty(),
            "{delay_ms} ms: left {:?}",
            listing(d.path())
        );
    }
}

#[test]
fn two_spellings_of_one_output_file_are_refused() {
    let d = scratch();
    let scn = d.path().join("in.scn");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/scenarios/rollback-cpu1-v7.scn"
        ),
        &scn,
    )
    .unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    std::os::unix::fs::symlink(d.path().join("sub"), d.path().join("alias")).unwrap();
    let a = d.path().join("sub/out");
    let b = d.path().join("alias/out");
    let dot = d.path().join("sub/./out");
    for other in [&b, &dot] {
        for force in [false, true] {
            let mut args = vec!["run", s(&scn), "--trace", s(&a), "--perfetto", s(other)];
            if force {
                args.push("--force");
            }
            refused(
                &args,
                2,
                &["--trace and --perfetto", "give each its own file"],
                d.path(),
            );
        }
    }
}

#[test]
fn outputs_that_are_inputs_or_exist_are_refused_and_left_byte_identical() {
    let d = scratch();
    let scn = d.path().join("in.scn");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/scenarios/rollback-cpu1-v7.scn"
        ),
        &scn,
    )
    .unwrap();
    let text = std::fs::read(&scn).unwrap();
    for flag in ["--trace", "--perfetto"] {
        refused(
            &["run", s(&scn), flag, s(&scn)],
            2,
            &[flag, "input file"],
            d.path(),
        );
        refused(
            &["run", s(&scn), flag, s(&scn), "--force"],
            2,
            &["input file", "even with --force"],
            d.path(),
        );
        assert_eq!(
            std::fs::read(&scn).unwrap(),
            text,
            "{flag}: the input is untouched"
        );
    }
    let out = d.path().join("out.json");
    std::fs::write(&out, "old\n").unwrap();
    refused(
        &["run", s(&scn), "--quiet", "--perfetto", s(&out)],
        2,
        &["--perfetto", s(&out), "the file exists", "--force"],
        d.path(),
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "old\n");
    let before = listing(d.path());
    let o = biosim(&["run", s(&scn), "--quiet", "--perfetto", s(&out), "--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&out).unwrap().starts_with('{'));
    assert_eq!(
        listing(d.path()),
        before,
        "replaced in place, no temporary left"
    );
    assert_eq!(std::fs::read(&scn).unwrap(), text);
}

#[test]
fn io_uring_unavailable_says_why_and_agrees_with_the_sysctl() {
    // kernel.io_uring_disabled (never changed here): 2 refuses everyone (EPERM), 1 only lets
    // root and io_uring_group in, 0 everyone. The engine's error must say which, or it works.
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let d = scratch();
    let file = Arc::new(
        BackingFile::open(
            &d.path().join("u.img"),
            &OpenOptions {
                direct: true,
                read_only: false,
                create_size: Some(1 << 20),
            },
        )
        .unwrap(),
    );
    match UringBacking::new(file, 8) {
        Ok(_) => {
            assert_ne!(
                disabled,
                Some(2),
                "io_uring_disabled=2 yet a ring was set up"
            );
            eprintln!(
                "skipped: io_uring works here (io_uring_disabled={disabled:?}); its unavailable \
                 path needs a kernel without it or the sysctl set, which tests never change"
            );
        }
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("io_uring") && e.contains("u.img"), "{e}");
            if disabled == Some(2) {
                assert!(e.contains("io_uring_disabled"), "{e}");
            }
            eprintln!("skipped: io_uring unavailable: {e}");
        }
    }
}
