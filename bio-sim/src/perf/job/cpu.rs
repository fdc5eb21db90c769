//! CPU time per I/O: the process's own threads from `getrusage(2)` (`RUSAGE_SELF`: user + system
//! time of every thread, the simulated CPUs, the loop workers and the io_uring reapers
//! included), and the whole machine's busy time from `/proc/stat` (`fs/proc/stat.c`'s first
//! `cpu` line), which also counts the kernel's own threads doing the design's work (a real loop
//! device's `kworker`s, io_uring's `iou-wrk`s) that `getrusage` cannot see. The machine figure
//! also counts every other process running meanwhile: it is an upper bound on a shared machine.

use std::time::Duration;

/// One reading of both clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSnapshot {
    /// `ru_utime + ru_stime` of `getrusage(RUSAGE_SELF)`, ns.
    pub process_ns: u64,
    /// `ru_stime` alone, ns: the process's time in the kernel (system calls, the I/O path, the
    /// interrupts' task work), the part a simulated design and raw I/O should share.
    pub system_ns: u64,
    /// Busy time of all CPUs from `/proc/stat` (user + nice + system + irq + softirq + steal),
    /// ns; `None` where `/proc/stat` cannot be read.
    pub machine_ns: Option<u64>,
    /// `ru_nvcsw`: voluntary context switches of every thread (the kernel's `nvcsw`), each a
    /// thread going to sleep, whose wake-up the process pays for.
    pub nvcsw: u64,
}

/// The CPU time used between two snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuUsed {
    /// This process's threads.
    pub process: Duration,
    /// The part of `process` spent in the kernel (`ru_stime`).
    pub system: Duration,
    /// The machine (every CPU), if known.
    pub machine: Option<Duration>,
    /// The process's threads' sleeps (`ru_nvcsw`).
    pub nvcsw: u64,
}

impl CpuSnapshot {
    /// Reads both clocks now.
    pub fn now() -> CpuSnapshot {
        let (process_ns, system_ns, nvcsw) = rusage_self();
        CpuSnapshot {
            process_ns,
            system_ns,
            machine_ns: proc_stat_busy_ns(),
            nvcsw,
        }
    }

    /// What was used from `self` to `later`.
    pub fn until(&self, later: &CpuSnapshot) -> CpuUsed {
        CpuUsed {
            process: Duration::from_nanos(later.process_ns.saturating_sub(self.process_ns)),
            system: Duration::from_nanos(later.system_ns.saturating_sub(self.system_ns)),
            machine: match (self.machine_ns, later.machine_ns) {
                (Some(a), Some(b)) => Some(Duration::from_nanos(b.saturating_sub(a))),
                _ => None,
            },
            nvcsw: later.nvcsw.saturating_sub(self.nvcsw),
        }
    }
}

/// `getrusage(RUSAGE_SELF)`: user + system time of every thread of the process, the system
/// time alone (ns), and the voluntary context switches.
fn rusage_self() -> (u64, u64, u64) {
    // SAFETY: `ru` is plain old data, and getrusage only writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid `who` and a valid out-pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0, 0, 0);
    }
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    (
        tv(ru.ru_utime) + tv(ru.ru_stime),
        tv(ru.ru_stime),
        ru.ru_nvcsw.max(0) as u64,
    )
}

/// The first line of `/proc/stat` (`cpu  user nice system idle iowait irq softirq steal ...`,
/// in `USER_HZ` ticks) as busy ns: everything but idle and iowait. Guest time is already in
/// user (the kernel adds it there), so it is not counted twice.
fn proc_stat_busy_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    parse_proc_stat_busy_ticks(&text).map(|ticks| ticks * (1_000_000_000 / user_hz()))
}

/// `sysconf(_SC_CLK_TCK)`: the unit of `/proc/stat` (100 on every Linux architecture biosim
/// runs on).
fn user_hz() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

/// Busy ticks of `/proc/stat`'s aggregate `cpu` line.
fn parse_proc_stat_busy_ticks(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    if v.len() < 4 {
        return None;
    }
    let field = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system [idle] [iowait] irq softirq steal
    Some(field(0) + field(1) + field(2) + field(5) + field(6) + field(7))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_busy_leaves_out_idle_and_iowait() {
        let text = "cpu  10 1 5 1000 50 2 3 4 0 0\ncpu0 5 0 2 500 25 1 1 2 0 0\n";
        assert_eq!(
            parse_proc_stat_busy_ticks(text),
            Some(10 + 1 + 5 + 2 + 3 + 4)
        );
        assert_eq!(parse_proc_stat_busy_ticks("intr 1 2\n"), None);
    }

    #[test]
    fn process_time_moves_forward_when_this_thread_computes() {
        let a = CpuSnapshot::now();
        let mut x = 0u64;
        let t0 = std::time::Instant::now();
        // Computes until getrusage saw 5 ms (or 10 s passed on a starved machine).
        while a.until(&CpuSnapshot::now()).process < Duration::from_millis(5)
            && t0.elapsed() < Duration::from_secs(10)
        {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
        let used = a.until(&CpuSnapshot::now());
        assert!(used.process >= Duration::from_millis(5), "{used:?} {x}");
    }

    /// Every sleep of a thread of the process is one voluntary context switch; a thread that
    /// only computes makes none.
    #[test]
    fn each_sleep_of_a_thread_is_counted_in_nvcsw() {
        let a = CpuSnapshot::now();
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let slept = a.until(&CpuSnapshot::now()).nvcsw;
        // Other test threads of this process may sleep meanwhile too: at least ours.
        assert!(slept >= 20, "20 sleeps, {slept} voluntary context switches");
    }

    #[test]
    fn system_time_is_the_kernels_share_of_process_time() {
        let a = CpuSnapshot::now();
        let t0 = std::time::Instant::now();
        // System calls until getrusage saw 5 ms of system time (or 10 s passed).
        while a.until(&CpuSnapshot::now()).system < Duration::from_millis(5)
            && t0.elapsed() < Duration::from_secs(10)
        {
            for _ in 0..1_000 {
                // SAFETY: getppid has no preconditions; a real system call each time.
                std::hint::black_box(unsafe { libc::syscall(libc::SYS_getppid) });
            }
        }
        let used = a.until(&CpuSnapshot::now());
        assert!(used.system >= Duration::from_millis(5), "{used:?}");
    }
}
