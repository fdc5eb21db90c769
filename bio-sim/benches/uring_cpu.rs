//! CPU per I/O of the loop model's io_uring backing against a raw io_uring (issue 13's target:
//! 4 KiB O_DIRECT randread, iodepth 32, ≥ 0.95× raw IOPS and ≤ 1.3× raw's CPU per I/O).
//!
//! Per round, interleaved: `raw` (one [`UringEngine`] kept `DEPTH` deep by one submitting thread)
//! and the loop model (`LoopVariant::V5` and `BASE` over a [`UringBacking`] of depth `DEPTH`, two
//! simulated CPUs each keeping `DEPTH / 2` bios in flight) on a production kernel configuration
//! (lockdep and `might_sleep()` checks off), and `V5` again on the debug default (`v5-debug`), so
//! the cost of the checkers is visible apart from the model's. Each design's CPU time is the
//! `getrusage(RUSAGE_SELF)` delta around its run (every thread of the process), and per thread
//! kind from `/proc/self/task/*/schedstat` (nanoseconds on CPU), so the table says where the time
//! goes. Medians with min–max.
//!
//! Run: `cargo bench -p bio-sim --bench uring_cpu` (env `URING_CPU_IOS`, `URING_CPU_ROUNDS`,
//! `URING_CPU_DIR`; a 64 MiB file, removed afterwards).

use bio_core::block::{submit_bio_noacct, BioEndIo, ReqOp, BLK_STS_OK};
use bio_core::drivers::block::loop_drv::{
    LoopBacking, LoopDevice, LoopVariant, LO_FLAGS_DIRECT_IO,
};
use bio_core::kernel::{CpuId, PreemptModel};
use bio_core::{Cpu, Kernel, KernelConfig};
use bio_sim::dev::aligned::AlignedBuf;
use bio_sim::dev::backing::{BackingFile, OpenOptions, RwFlags};
use bio_sim::dev::loop_file::UringBacking;
use bio_sim::dev::uring::{UringEngine, UringOp};
use bio_sim::runtime::threaded::{ThreadedConfig, ThreadedRuntime};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BS: u64 = 4096;
const DEPTH: u64 = 32;
const FILE: u64 = 64 << 20;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// User + system CPU of the whole process, and voluntary context switches.
fn rusage() -> (Duration, i64) {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we pass, which lives across the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(ru.ru_utime) + tv(ru.ru_stime), ru.ru_nvcsw)
}

/// Nanoseconds on CPU per live thread: tid → (comm, ns).
fn threads() -> HashMap<u64, (String, u64)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(tid) = e.file_name().to_string_lossy().parse::<u64>() else {
            continue;
        };
        let p = e.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
            .unwrap_or(0);
        out.insert(tid, (comm.trim().to_owned(), ns));
    }
    out
}

/// Per thread kind (the name without its digits), ns on CPU between the snapshots.
fn by_kind(
    before: &HashMap<u64, (String, u64)>,
    after: &HashMap<u64, (String, u64)>,
) -> Vec<(String, u64)> {
    let mut m: HashMap<String, u64> = HashMap::new();
    for (tid, (comm, ns)) in after {
        let base = before.get(tid).map_or(0, |b| b.1);
        let kind: String = comm
            .trim_end_matches(|c: char| c.is_ascii_digit())
            .to_owned();
        *m.entry(kind).or_default() += ns.saturating_sub(base);
    }
    let mut v: Vec<_> = m.into_iter().filter(|(_, ns)| *ns > 0).collect();
    v.sort();
    v
}

fn offsets(n: u64, seed: u64) -> Vec<u64> {
    let blocks = FILE / BS;
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) % blocks) * BS
        })
        .collect()
}

struct Sample {
    iops: f64,
    cpu_us: f64,
    csw: f64,
    kinds: Vec<(String, u64)>,
    extra: String,
}

fn measure(n: u64, run: impl FnOnce(&mut dyn FnMut()) -> String) -> Sample {
    let t_before = threads();
    let (cpu0, csw0) = rusage();
    let t0 = Instant::now();
    let mut snap = None;
    let extra = run(&mut || {
        snap = Some((t0.elapsed(), rusage(), threads()));
    });
    let (elapsed, (cpu1, csw1), t_after) = snap.expect("the run takes its snapshot");
    Sample {
        iops: n as f64 / elapsed.as_secs_f64(),
        cpu_us: (cpu1 - cpu0).as_secs_f64() * 1e6 / n as f64,
        csw: (csw1 - csw0) as f64 / n as f64,
        kinds: by_kind(&t_before, &t_after),
        extra,
    }
}

fn raw(file: &Arc<BackingFile>, offs: &[u64]) -> Sample {
    let n = offs.len() as u64;
    measure(n, |snap| {
        let done = Arc::new((parking_lot::Mutex::new(0u64), parking_lot::Condvar::new()));
        let d = Arc::clone(&done);
        let engine = UringEngine::new(Arc::clone(file), DEPTH as u32, RwFlags::empty(), move |c| {
            assert!(c.result.is_ok());
            *d.0.lock() += 1;
            d.1.notify_all();
        })
        .expect("io_uring");
        for (i, &off) in offs.iter().enumerate() {
            let mut g = done.0.lock();
            while i as u64 >= *g + DEPTH {
                done.1.wait(&mut g);
            }
            drop(g);
            engine
                .submit(
                    i as u64,
                    UringOp::Read {
                        buf: AlignedBuf::new(BS as usize),
                        off,
                    },
                )
                .expect("submit");
        }
        let mut g = done.0.lock();
        while *g < n {
            done.1.wait(&mut g);
        }
        drop(g);
        snap();
        let s = engine.shutdown();
        format!("{s}")
    })
}

fn submit_and_wait(cx: &Cpu, lo: &Arc<LoopDevice>, offs: Vec<u64>, window: u64) -> bool {
    let done = Arc::new(AtomicU64::new(0));
    let n = offs.len() as u64;
    for (i, off) in offs.into_iter().enumerate() {
        let d = Arc::clone(&done);
        if !cx.wait_until("bench: a free tag", &|| {
            (i as u64) < d.load(Ordering::Acquire) + window
        }) {
            return false;
        }
        let d = Arc::clone(&done);
        let bio = cx
            .kernel()
            .bio_alloc(ReqOp::Read, off >> 9)
            .with_data(vec![0; BS as usize])
            .with_end_io(BioEndIo::new("bench_end_io", move |bio, _| {
                assert_eq!(bio.status(), BLK_STS_OK);
                d.fetch_add(1, Ordering::Release);
            }));
        submit_bio_noacct(bio, &**lo, cx);
    }
    cx.wait_until("bench: all I/Os completed", &|| {
        done.load(Ordering::Acquire) >= n
    })
}

/// The kernel a storage engineer measures: a distribution's `PREEMPT_VOLUNTARY` build without
/// the debug options (`CONFIG_PROVE_LOCKING` and `CONFIG_DEBUG_ATOMIC_SLEEP` off, so no lockdep
/// bookkeeping and no `might_sleep()` checks on the hot path). `KernelConfig::default()` (what
/// the tests and scenarios run) has both on, as a reviewer's kernel; the `-debug` rows show it.
fn production_config() -> KernelConfig {
    KernelConfig {
        prove_locking: false,
        debug_atomic_sleep: false,
        ..KernelConfig::for_model(PreemptModel::Voluntary)
    }
}

fn model(file: &Arc<BackingFile>, variant: LoopVariant, cfg: KernelConfig, offs: &[u64]) -> Sample {
    let n = offs.len() as u64;
    measure(n, |snap| {
        let kernel = Kernel::boot(cfg, 2, 2).expect("boot");
        let backing =
            Arc::new(UringBacking::new(Arc::clone(file), DEPTH as u32).expect("io_uring"));
        let lo = LoopDevice::new(
            &kernel,
            0,
            Arc::clone(&backing) as Arc<dyn LoopBacking>,
            LO_FLAGS_DIRECT_IO,
            0,
            variant,
        );
        backing.attach(&lo, &kernel).expect("attach");
        let rt = ThreadedRuntime::start(
            Arc::clone(&kernel),
            ThreadedConfig {
                wait_timeout: Duration::from_secs(120),
                ..ThreadedConfig::default()
            },
        )
        .expect("runtime");
        // As the job runner does: one reaper wake-up per burst, rung when a CPU parks.
        backing.defer_doorbell();
        let b = Arc::clone(&backing);
        rt.on_park(move || {
            b.ring_doorbell();
        });
        let half = offs.len() / 2;
        let hs: Vec<_> = [offs[..half].to_vec(), offs[half..].to_vec()]
            .into_iter()
            .enumerate()
            .map(|(c, o)| {
                let lo = Arc::clone(&lo);
                rt.post_on(CpuId(c as u32), move |cx| {
                    submit_and_wait(cx, &lo, o, DEPTH / 2)
                })
                .expect("post")
            })
            .collect();
        for h in hs {
            assert!(h.wait().expect("ran"), "completed");
        }
        snap();
        let extra = format!(
            "{:?} {:?}",
            lo.stats(),
            rt.stats()
                .cpus
                .iter()
                .map(|c| (c.irqs, c.wakeups, c.parks))
                .collect::<Vec<_>>()
        );
        let extra = format!("{extra} {}", backing_stats(&backing));
        drop(rt.shutdown());
        extra
    })
}

fn backing_stats(b: &UringBacking) -> String {
    let s = b.uring_stats();
    format!(
        "{s}; {} loop-aio IRQs; {} doorbells; batch sizes 1,2-3,4-7..: {:?}",
        b.irqs(),
        s.doorbells,
        s.batch_hist
    )
}

fn stat(v: &[f64]) -> String {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    format!("{:.1} ({:.1}–{:.1})", s[s.len() / 2], s[0], s[s.len() - 1])
}

fn main() {
    let ios = env_or("URING_CPU_IOS", 20000);
    let rounds = env_or("URING_CPU_ROUNDS", 5) as usize;
    let dir = std::env::var("URING_CPU_DIR").unwrap_or_else(|_| "/tmp".into());
    let path =
        std::path::Path::new(&dir).join(format!("biosim-uring-cpu-{}.img", std::process::id()));
    let file = Arc::new(
        BackingFile::open(
            &path,
            &OpenOptions {
                direct: true,
                read_only: false,
                create_size: Some(FILE),
            },
        )
        .expect("the backing file"),
    );
    let fillbuf = AlignedBuf::from_slice(&vec![0x5a; 1 << 20]);
    for off in (0..FILE).step_by(1 << 20) {
        file.write_all_at(&fillbuf, off, RwFlags::empty())
            .expect("fill");
    }
    let prod = production_config();
    let debug = KernelConfig::default();
    let designs: [(&str, Option<(LoopVariant, KernelConfig)>); 4] = [
        ("raw", None),
        ("v5", Some((LoopVariant::V5, prod))),
        ("base", Some((LoopVariant::BASE, prod))),
        ("v5-debug", Some((LoopVariant::V5, debug))),
    ];
    let mut res: Vec<Vec<Sample>> = designs.iter().map(|_| Vec::new()).collect();
    for r in 0..rounds {
        let offs = offsets(ios, 0x9E37_79B9 + r as u64);
        for (i, (_, v)) in designs.iter().enumerate() {
            let s = match v {
                None => raw(&file, &offs),
                Some((v, cfg)) => model(&file, *v, *cfg, &offs),
            };
            res[i].push(s);
        }
    }
    let _ = std::fs::remove_file(&path);
    println!("4 KiB O_DIRECT randread, iodepth {DEPTH}, {ios} I/Os per round, {rounds} rounds: median (min–max)");
    println!(
        "v5, base: kernel {}; v5-debug: kernel {}",
        prod.describe(),
        debug.describe()
    );
    let raw_iops: Vec<f64> = res[0].iter().map(|s| s.iops).collect();
    let raw_cpu: Vec<f64> = res[0].iter().map(|s| s.cpu_us).collect();
    for (i, (name, _)) in designs.iter().enumerate() {
        let iops: Vec<f64> = res[i].iter().map(|s| s.iops).collect();
        let cpu: Vec<f64> = res[i].iter().map(|s| s.cpu_us).collect();
        let csw: Vec<f64> = res[i].iter().map(|s| s.csw).collect();
        let ri: Vec<f64> = iops.iter().zip(&raw_iops).map(|(a, b)| a / b).collect();
        let rc: Vec<f64> = cpu.iter().zip(&raw_cpu).map(|(a, b)| a / b).collect();
        println!(
            "{name:<8} IOPS {}  CPU µs/IO {}  vcsw/IO {}  IOPS×raw {}  CPU×raw {}",
            stat(&iops),
            stat(&cpu),
            stat(&csw),
            stat(&ri.iter().map(|x| x * 100.0).collect::<Vec<_>>()),
            stat(&rc.iter().map(|x| x * 100.0).collect::<Vec<_>>()),
        );
        let last = res[i].last().expect("a round");
        let kinds: Vec<String> = last
            .kinds
            .iter()
            .map(|(k, ns)| format!("{k} {:.2}", *ns as f64 / 1e3 / ios as f64))
            .collect();
        println!("      last round µs/IO by thread: {}", kinds.join(", "));
        println!("      {}", last.extra);
    }
}
