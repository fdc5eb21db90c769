//! What a live write leg waited for, read from the kernel's own tracepoints: mm/vmscan.c's
//! `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)` (`vmscan:mm_vmscan_throttled`, one line per sleep
//! with the time actually slept, `usect_delayed`, as the kernel spells it), and when the device's
//! completions reached the guest: `block:block_rq_complete` lines in interrupt context (the
//! handler's own, or the `BLOCK_SOFTIRQ` that follows it), each attributed to the latest
//! `irq:irq_handler_entry` of the disk's virtio interrupt (`virtioN-req.0` on PCI, `virtioN` on
//! MMIO) on its CPU. And how fast the disk moved data while it had work: the union of the
//! `block:block_rq_issue` to `block:block_rq_complete` intervals of the requests whose both ends
//! were traced (matched by start sector, oldest issue first; `block:block_rq_requeue` drops an
//! issue that will be made again), against those requests' bytes.
//!
//! Why: on cgroup v1, when memcg reclaim isolates a batch of folios that are all dirty and not
//! yet under writeback, `shrink_inactive_list()` wakes the flusher and sleeps in
//! `reclaim_throttle()` up to `HZ/10`, or until more than 32 pages per sleeper have ended their
//! writeback on the node since the first sleeper came (`__acct_reclaim_writeback()`). How long it
//! sleeps depends on when the device reports the flusher's completions. `usect_delayed` is
//! `jiffies_to_usecs()` of the jiffies slept: 4 ms steps at HZ=250, so short sleeps round to 0 or
//! 4 ms; and a writer waiting in `shrink_folio_list()` for one folio's writeback (case 3) is not
//! seen here, so the total is a lower bound of its waits. Only the classic LRU throttles this way
//! (this kernel is built without MGLRU). On this machine's virtio-blk they come many to an interrupt:
//! `biosim bench dontcache --preset seed-writes --device virtio-blk` models a device that reports
//! a busy period's completions at its end, and these figures are the live kernel's side of it.

use crate::calibrate::tracefs::Tracefs;
use hotplug::tracefs::TraceLine;

/// The events a traced write leg enables.
pub const EVENTS: [&str; 5] = [
    "vmscan/mm_vmscan_throttled",
    "block/block_rq_issue",
    "block/block_rq_requeue",
    "block/block_rq_complete",
    "irq/irq_handler_entry",
];

/// Per-CPU ring buffer of the session's instance, KiB per second of a leg (at least 4 MiB): a
/// second of a write leg traced about 0.5 MiB here (some 5,000 completions of 1 MiB requests,
/// their interrupts, the throttles; the issues add about as many lines as the completions, and
/// the recorded legs fit: no overrun). An overrun is an error, never a short count.
pub const BUFFER_KB_PER_SEC: u64 = 1 << 10;

/// The disk's interrupts during a leg.
#[derive(Debug, Clone, PartialEq)]
pub struct Interrupts {
    /// The handler's name (`/proc/interrupts`: `virtio1-req.0`).
    pub irq: String,
    /// Its handler runs that ended at least one request.
    pub count: u64,
    /// The median number of requests one of them ended.
    pub median_per_interrupt: f64,
    /// Completions of the device outside its interrupts (task context, or after another
    /// handler on that CPU).
    pub outside: u64,
}

/// How long the disk had work during a leg, and what it moved: the device's speed while busy,
/// which `--preset`'s `--device-gbps` takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiskBusy {
    /// The union of the matched requests' intervals from `block_rq_issue` to `block_rq_complete`,
    /// ms: the time the disk had at least one of them outstanding, as iostat's `%util` counts
    /// (not a saturated device; the kernel's own counter, `io_ticks` from `update_io_ticks()`,
    /// counts in jiffies from `blk_account_io_start()`, when the request is allocated, not
    /// issued). The guest's share is in it: the issue is traced before the
    /// virtqueue is kicked, and the completions of one interrupt are traced one after another,
    /// each after the end-I/O work of the ones before it.
    pub busy_ms: f64,
    /// Bytes of the requests whose issue and completion were both traced.
    pub bytes: u64,
    /// How many such requests.
    pub requests: u64,
    /// Issues with no completion in the trace (in flight when tracing stopped).
    pub unmatched_issues: u64,
    /// Completions with no issue in the trace (issued before tracing began).
    pub unmatched_completions: u64,
}

impl DiskBusy {
    /// GB/s (10^9 bytes) while busy; 0 when it never was.
    pub fn gbps(&self) -> f64 {
        if self.busy_ms > 0.0 {
            self.bytes as f64 / (self.busy_ms * 1e6)
        } else {
            0.0
        }
    }
}

/// One traced write leg.
#[derive(Debug, Clone, PartialEq)]
pub struct LegTrace {
    /// `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)` sleeps of the leg's writer.
    pub throttled: u64,
    /// Their total `usect_delayed`, ms.
    pub throttled_ms: f64,
    /// `block_rq_complete` lines of the file's device.
    pub completions: u64,
    /// The interrupts they came in with; `None` when the device is not a virtio disk (a loop
    /// device ends its requests from its worker; other disks are not attributed).
    pub interrupts: Option<Interrupts>,
    /// The disk's busy time and bytes (`None` in recordings made before it was traced).
    pub disk: Option<DiskBusy>,
}

/// The session's instance set up for traced legs of `seconds`: [`EVENTS`] enabled, tracing off,
/// [`BUFFER_KB_PER_SEC`] per second per CPU.
pub fn prepare(t: &mut Tracefs, seconds: u32) -> Result<(), String> {
    t.set_buffer_kb((BUFFER_KB_PER_SEC * u64::from(seconds)).max(4 << 10))
        .map_err(|e| e.to_string())?;
    for e in EVENTS {
        t.enable(e).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The disk `(major, minor)` a block device is on: itself, or a partition's parent
/// (`/sys/dev/block/MAJ:MIN/partition` exists; the parent directory's `dev`), which is the device
/// `block_rq_complete` names.
pub fn disk_of(dev: (u32, u32)) -> (u32, u32) {
    let sys = std::path::PathBuf::from(format!("/sys/dev/block/{}:{}", dev.0, dev.1));
    if !sys.join("partition").exists() {
        return dev;
    }
    let parent = std::fs::canonicalize(&sys)
        .ok()
        .and_then(|p| std::fs::read_to_string(p.parent()?.join("dev")).ok());
    parent.and_then(|d| parse_dev(&d)).unwrap_or(dev)
}

/// A sysfs `dev` file's `MAJ:MIN`.
fn parse_dev(text: &str) -> Option<(u32, u32)> {
    let (ma, mi) = text.trim().split_once(':')?;
    Some((ma.parse().ok()?, mi.parse().ok()?))
}

/// The virtio device (`virtioN`) under the block device `dev` (`(major, minor)`), from its sysfs
/// path (`/sys/dev/block/MAJ:MIN` → `.../virtio1/block/vda`); `None` for another kind.
pub fn virtio_of(dev: (u32, u32)) -> Option<String> {
    virtio_in(&std::fs::canonicalize(format!("/sys/dev/block/{}:{}", dev.0, dev.1)).ok()?)
}

/// The `virtioN` component of a sysfs device path.
fn virtio_in(path: &std::path::Path) -> Option<String> {
    path.components().find_map(|c| {
        let name = c.as_os_str().to_str()?;
        let n = name.strip_prefix("virtio")?;
        (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| name.to_owned())
    })
}

/// Runs `job` with tracing on (from an empty buffer) and sums up what the trace shows for the
/// writer `pid_of(result)` and the device `dev` (`(major, minor)`). A buffer that overran is an
/// error: the figures would be short.
pub fn traced<R>(
    t: &Tracefs,
    dev: (u32, u32),
    job: impl FnOnce() -> Result<R, String>,
    pid_of: impl Fn(&R) -> u32,
) -> Result<(R, LegTrace), String> {
    t.clear().map_err(|e| e.to_string())?;
    t.set_on(true).map_err(|e| e.to_string())?;
    let r = job();
    let off = t.set_on(false).map_err(|e| e.to_string());
    // The job's own error first: it says more than a tracefs write after it.
    let r = r?;
    off?;
    let lost = t.overrun().map_err(|e| e.to_string())?;
    if lost > 0 {
        return Err(format!(
            "the trace buffer lost {lost} events (overrun or dropped): the figures would be short"
        ));
    }
    let text = t.read().map_err(|e| e.to_string())?;
    let disk = disk_of(dev);
    let lt = summarize(&text, disk, pid_of(&r), virtio_of(disk).as_deref())?;
    Ok((r, lt))
}

/// Sums up a `trace` file: the throttles of `pid`, the completions of `dev` and, for a virtio
/// disk (`virtio`: `virtioN`), the interrupts of its request queue they ran in. A line that does
/// not parse, or a throttle or handler line without its fields, is an error naming it.
pub fn summarize(
    text: &str,
    dev: (u32, u32),
    pid: u32,
    virtio: Option<&str>,
) -> Result<LegTrace, String> {
    let want_dev = format!("{},{} ", dev.0, dev.1);
    // PCI names the request queue's vector `virtioN-req.0`; MMIO names the one IRQ `virtioN`.
    let is_disk_irq = |name: &str| {
        virtio.is_some_and(|v| {
            name == v
                || name
                    .strip_prefix(v)
                    .is_some_and(|rest| rest.starts_with("-req"))
        })
    };
    let (mut throttled, mut delayed_us, mut completions) = (0u64, 0u64, 0u64);
    // The disk's interrupt each CPU last entered (its index in `ended`), from its
    // irq_handler_entry until the CPU enters another handler or runs a line in task context.
    let mut current: std::collections::HashMap<u32, usize> = Default::default();
    let mut ended: Vec<u64> = Vec::new();
    let (mut outside, mut irq_name) = (0u64, None::<String>);
    // The disk's requests issued and not yet completed, by start sector, oldest issue first (µs),
    // and the [issue, completion] interval of each request whose both ends were traced.
    let mut issued: std::collections::HashMap<u64, std::collections::VecDeque<u64>> =
        Default::default();
    let mut spans: Vec<(u64, u64)> = Vec::new();
    let mut busy = DiskBusy {
        busy_ms: 0.0,
        bytes: 0,
        requests: 0,
        unmatched_issues: 0,
        unmatched_completions: 0,
    };
    let extent = |l: &TraceLine, i: usize| {
        rq_extent(&l.fields).ok_or_else(|| format!("trace line {}: no `SECTOR + NR`", i + 1))
    };
    let field = |l: &TraceLine, key: &str, i: usize| {
        l.fields
            .split_whitespace()
            .find_map(|f| f.strip_prefix(key))
            .map(str::to_owned)
            .ok_or_else(|| format!("trace line {}: no {key}", i + 1))
    };
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let l = TraceLine::parse(line).map_err(|e| format!("trace line {}: {e}", i + 1))?;
        // The third flag: `h` hardirq, `s` softirq, `H` hardirq in a softirq, `.` neither.
        let in_irq = matches!(l.flags.as_bytes().get(2), Some(b'h' | b'H' | b's'));
        if !in_irq {
            current.remove(&l.cpu);
        }
        match l.event.as_str() {
            "mm_vmscan_throttled" if l.pid == pid => {
                if !l.fields.contains("reason=VMSCAN_THROTTLE_WRITEBACK") {
                    continue;
                }
                let us = field(&l, "usect_delayed=", i)?
                    .parse::<u64>()
                    .map_err(|_| format!("trace line {}: usect_delayed is not a number", i + 1))?;
                throttled += 1;
                delayed_us += us;
            }
            "irq_handler_entry" => {
                let name = field(&l, "name=", i)?;
                if is_disk_irq(&name) {
                    current.insert(l.cpu, ended.len());
                    ended.push(0);
                    irq_name.get_or_insert(name);
                } else {
                    current.remove(&l.cpu);
                }
            }
            "block_rq_issue" if l.fields.trim_start().starts_with(&want_dev) => {
                let (sector, _) = extent(&l, i)?;
                issued.entry(sector).or_default().push_back(now_us(&l));
            }
            // Requeued: it will be issued again; the wait in between is not the device's. The
            // requeue undoes the latest issue of that sector (a driver refusing a request it has
            // just started: virtio_queue_rq() returning BLK_STS_DEV_RESOURCE).
            "block_rq_requeue" if l.fields.trim_start().starts_with(&want_dev) => {
                let (sector, _) = extent(&l, i)?;
                issued.get_mut(&sector).and_then(|q| q.pop_back());
            }
            "block_rq_complete" if l.fields.trim_start().starts_with(&want_dev) => {
                completions += 1;
                match current.get(&l.cpu) {
                    // Only a CPU in interrupt context still has one (task lines end it above).
                    Some(&run) => ended[run] += 1,
                    _ => outside += 1,
                }
                let (sector, nr) = extent(&l, i)?;
                match issued.get_mut(&sector).and_then(|q| q.pop_front()) {
                    Some(t0) => {
                        spans.push((t0, now_us(&l)));
                        busy.bytes += nr * 512;
                        busy.requests += 1;
                    }
                    // Issued before the trace began: not timed.
                    None => busy.unmatched_completions += 1,
                }
            }
            _ => {}
        }
    }
    // Still in flight when tracing stopped: not timed (an interval needs both ends).
    busy.unmatched_issues = issued.values().map(|q| q.len() as u64).sum();
    busy.busy_ms = union_us(spans) as f64 / 1e3;
    let interrupts = virtio.map(|v| {
        let runs: Vec<u64> = ended.into_iter().filter(|&n| n > 0).collect();
        Interrupts {
            irq: irq_name.unwrap_or(format!("{v} (no interrupt seen)")),
            count: runs.len() as u64,
            median_per_interrupt: median(&runs),
            outside,
        }
    });
    Ok(LegTrace {
        throttled,
        throttled_ms: delayed_us as f64 / 1e3,
        completions,
        interrupts,
        disk: Some(busy),
    })
}

/// A trace line's timestamp in µs.
fn now_us(l: &TraceLine) -> u64 {
    l.secs * 1_000_000 + u64::from(l.usecs)
}

/// `SECTOR + NR` of a `block_rq_issue`, `block_rq_requeue` or `block_rq_complete` line: what
/// follows the `(CMD)` (`254,0 W 4194304 () 531234816 + 8192 be,0,4 [dd]`). A request with no
/// position (a flush) is issued as sector 0 (`blk_rq_trace_sector()`) but completes as the raw
/// `blk_rq_pos()`, `(sector_t)-1`: both read as 0.
fn rq_extent(fields: &str) -> Option<(u64, u64)> {
    let mut w = fields.split_once(") ")?.1.split_whitespace();
    let sector: u64 = w.next()?.parse().ok()?;
    (w.next()? == "+").then_some(())?;
    let sector = if sector == u64::MAX { 0 } else { sector };
    Some((sector, w.next()?.parse().ok()?))
}

/// The total length of the union of `spans` (`[start, end]`, any order; an end before its start,
/// from CPUs' clocks apart, counts as empty).
fn union_us(mut spans: Vec<(u64, u64)>) -> u64 {
    spans.sort_unstable();
    let (mut total, mut cur) = (0u64, None::<(u64, u64)>);
    for (a, b) in spans {
        let b = b.max(a);
        cur = match cur {
            Some((ca, cb)) if a <= cb => Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    total + cur.map_or(0, |(a, b)| b - a)
}

fn median(v: &[u64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2] as f64
    } else {
        (s[n / 2 - 1] + s[n / 2]) as f64 / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as this machine's 6.18 printed them in a normal write leg (ext4 on /dev/vda, 254:0,
    /// virtio1; the writer was pid 32553), trimmed to a few, with one other IRQ and one
    /// completion outside an interrupt added, and the requests' issues (made up in the live
    /// format; one request issued before the trace began, one still in flight at its end).
    const LIVE: &str = "\
# tracer: nop
#
    kworker/u8:2-15869   [000] ..... 34569.540000: block_rq_issue: 254,0 W 4194304 () 531234816 + 8192 be,0,4 [kworker/u8:2]
    kworker/u8:2-15869   [000] ..... 34569.540000: block_rq_issue: 254,0 W 4194304 () 531243008 + 8192 be,0,4 [kworker/u8:2]
    kworker/u8:2-15869   [000] ..... 34569.540000: block_rq_issue: 254,0 W 4194304 () 531251200 + 8192 be,0,4 [kworker/u8:2]
    kworker/u8:2-15869   [000] ..... 34569.541000: block_rq_issue: 254,0 W 4194304 () 531382272 + 8192 be,0,4 [kworker/u8:2]
    kworker/u8:2-15869   [000] ..... 34569.541000: block_rq_issue: 254,0 W 4194304 () 531390464 + 8192 be,0,4 [kworker/u8:2]
          <idle>-0       [001] d.h1. 34569.541840: irq_handler_entry: irq=36 name=virtio1-req.0
          <idle>-0       [001] d.h1. 34569.541847: block_rq_complete: 254,0 W () 531234816 + 8192 be,0,4 [0]
          <idle>-0       [001] d.h1. 34569.541957: block_rq_complete: 254,0 W () 531243008 + 8192 be,0,4 [0]
          <idle>-0       [001] d.h1. 34569.542067: block_rq_complete: 254,0 W () 531251200 + 8192 be,0,4 [0]
         python3-32553   [000] ..... 34569.542024: mm_vmscan_throttled: nid=0 usec_timeout=100000 usect_delayed=36000 reason=VMSCAN_THROTTLE_WRITEBACK
          <idle>-0       [001] d.h1. 34569.543640: irq_handler_entry: irq=36 name=virtio1-req.0
          <idle>-0       [001] d.h1. 34569.543647: block_rq_complete: 254,0 W () 531382272 + 8192 be,0,4 [0]
          <idle>-0       [001] d.h1. 34569.543657: block_rq_complete: 254,0 W () 531390464 + 8192 be,0,4 [0]
          <idle>-0       [000] d.h1. 34569.543660: block_rq_complete: 7,0 W () 1024 + 8 be,0,4 [0]
         python3-40000   [000] ..... 34569.600000: mm_vmscan_throttled: nid=0 usec_timeout=100000 usect_delayed=8000 reason=VMSCAN_THROTTLE_WRITEBACK
         python3-32553   [000] ..... 34569.634099: mm_vmscan_throttled: nid=0 usec_timeout=100000 usect_delayed=40000 reason=VMSCAN_THROTTLE_WRITEBACK
         python3-32553   [000] ..... 34569.640000: mm_vmscan_throttled: nid=0 usec_timeout=20000 usect_delayed=4000 reason=VMSCAN_THROTTLE_ISOLATED
          <idle>-0       [001] d.h1. 34569.669990: irq_handler_entry: irq=34 name=virtio4-input
          <idle>-0       [001] d.h1. 34569.670000: block_rq_complete: 254,0 W () 531398656 + 8192 be,0,4 [0]
    kworker/u8:2-15869   [000] ..... 34569.675000: block_rq_issue: 254,0 W 4194304 () 531406848 + 8192 be,0,4 [kworker/u8:2]
          <idle>-0       [001] d.h1. 34569.675000: irq_handler_entry: irq=36 name=virtio1-req.0
          <idle>-0       [001] d.h1. 34569.680000: irq_handler_entry: irq=36 name=virtio1-req.0
          <idle>-0       [001] d.h1. 34569.680010: block_rq_complete: 254,0 W () 531406848 + 8192 be,0,4 [0]
    kworker/u8:2-15869   [000] ..... 34569.685000: block_rq_issue: 254,0 W 4194304 () 531415040 + 8192 be,0,4 [kworker/u8:2]
    kworker/u8:2-15869   [000] ..... 34569.685000: block_rq_issue: 254,0 W 4194304 () 531423232 + 8192 be,0,4 [kworker/u8:2]
    kworker/1:1H-46      [001] ..... 34569.690000: block_rq_complete: 254,0 W () 531415040 + 8192 be,0,4 [0]
          <idle>-0       [000] d.h1. 34569.700000: irq_handler_entry: irq=36 name=virtio1-req.0
          <idle>-0       [000] ..s1. 34569.700020: block_rq_complete: 254,0 W () 531423232 + 8192 be,0,4 [0]
    kworker/u8:2-15869   [001] ..... 34569.700025: block_rq_issue: 254,0 W 4194304 () 531431424 + 8192 be,0,4 [kworker/u8:2]
          <idle>-0       [000] ..s1. 34569.700030: block_rq_complete: 254,0 W () 531431424 + 8192 be,0,4 [0]
    kworker/u8:2-15869   [000] ..... 34569.710000: block_rq_issue: 254,0 W 4194304 () 531439616 + 8192 be,0,4 [kworker/u8:2]
";

    #[test]
    fn the_writers_throttles_and_the_disks_interrupts_are_counted() {
        let t = summarize(LIVE, (254, 0), 32553, Some("virtio1")).unwrap();
        // Two WRITEBACK sleeps of the writer (another task's and an ISOLATED one left out).
        assert_eq!((t.throttled, t.throttled_ms), (2, 76.0));
        // 254,0's ten completions (7,0's left out): three, two, one in virtio1-req.0's handler
        // (a run that ended none is not an interrupt of its completions)
        // on CPU1, two in the BLOCK softirq after it on CPU0; one under another IRQ's handler and
        // one from a kworker are outside.
        assert_eq!(t.completions, 10);
        assert_eq!(
            t.interrupts,
            Some(Interrupts {
                irq: "virtio1-req.0".into(),
                count: 4,
                median_per_interrupt: 2.0,
                outside: 2,
            })
        );
        // On MMIO the one IRQ is named after the device.
        let mmio = LIVE.replace("name=virtio1-req.0", "name=virtio1");
        let m = summarize(&mmio, (254, 0), 32553, Some("virtio1")).unwrap();
        assert_eq!(
            m.interrupts.map(|i| (i.irq, i.count)),
            Some(("virtio1".into(), 4))
        );
        // virtio10 is another device.
        let other = summarize(LIVE, (254, 0), 32553, Some("virtio")).unwrap();
        assert_eq!(other.interrupts.map(|i| i.count), Some(0));
        let loop_dev = summarize(LIVE, (7, 0), 32553, None).unwrap();
        assert_eq!((loop_dev.completions, loop_dev.interrupts), (1, None));
    }

    /// The disk figures of a trace of vda (254,0) on virtio1, writer pid 32553.
    fn vda_disk(text: &str) -> DiskBusy {
        summarize(text, (254, 0), 32553, Some("virtio1"))
            .unwrap()
            .disk
            .unwrap()
    }

    #[test]
    fn the_disks_busy_time_is_the_union_of_its_matched_requests() {
        let t = summarize(LIVE, (254, 0), 32553, Some("virtio1")).unwrap();
        // Busy .540000-.543657 (five requests), .675000-.680010, .685000-.700020 (two),
        // .700025-.700030; the completion at .670000 was issued before the trace, the issue at
        // .710000 never completes: neither is timed.
        let d = t.disk.unwrap();
        assert_eq!((d.requests, d.bytes), (9, 9 * (4 << 20)));
        assert_eq!((d.unmatched_issues, d.unmatched_completions), (1, 1));
        assert!((d.busy_ms - 23.692).abs() < 1e-9, "{d:?}");
        assert!((d.gbps() - 9.0 * 4194304.0 / 23.692e6).abs() < 1e-9);
        // An issue that never completes adds no time, even inside another request's interval
        // (a count of requests in flight would stay above 0 from then on).
        let issue = "34569.700025: block_rq_issue: 254,0 W 4194304 () 531431424 + 8192 be,0,4 [kworker/u8:2]\n";
        let second = issue.replace("531431424", "531447808");
        let early = issue
            .replace("34569.700025", "34569.541500")
            .replace("531431424", "1");
        let open = LIVE
            .replace(issue, &format!("{issue}    kworker/u8:2-15869   [001] ..... {second}"))
            .replace(
                "          <idle>-0       [001] d.h1. 34569.541840",
                &format!("    kworker/u8:2-15869   [000] ..... {early}          <idle>-0       [001] d.h1. 34569.541840"),
            );
        let o = vda_disk(&open);
        assert_eq!((o.requests, o.unmatched_issues), (9, 3));
        assert!((o.busy_ms - 23.692).abs() < 1e-9, "{o:?}");
        // A completion of another sector is not this request's.
        let none = open.replace(
            "34569.700030: block_rq_complete: 254,0 W () 531431424",
            "34569.700030: block_rq_complete: 254,0 W () 999",
        );
        let n = vda_disk(&none);
        assert_eq!((n.requests, n.unmatched_completions), (8, 2));
        assert!((n.busy_ms - 23.687).abs() < 1e-9, "{n:?}");
        // A requeued request is timed from its last issue: .677000-.680010 instead of .675000.
        let requeued = LIVE.replace(
            "          <idle>-0       [001] d.h1. 34569.675000: irq_handler_entry",
            "    kworker/1:1H-46      [001] ..... 34569.676000: block_rq_requeue: 254,0 W () 531406848 + 8192 be,0,4 [0]\n    kworker/1:1H-46      [001] ..... 34569.677000: block_rq_issue: 254,0 W 4194304 () 531406848 + 8192 be,0,4 [kworker/1:1H]\n          <idle>-0       [001] d.h1. 34569.675000: irq_handler_entry",
        );
        let r = vda_disk(&requeued);
        assert_eq!((r.requests, r.unmatched_issues), (9, 1));
        assert!((r.busy_ms - 21.692).abs() < 1e-9, "{r:?}");
        // A flush issues as sector 0 and completes as (sector_t)-1: one request, no bytes.
        let flush = format!(
            "{LIVE}    kworker/u8:2-15869   [000] ..... 34569.720000: block_rq_issue: 254,0 FF 0 () 0 + 0 be,0,4 [kworker/u8:2]\n          <idle>-0       [001] d.h1. 34569.720100: block_rq_complete: 254,0 FF () 18446744073709551615 + 0 be,0,4 [0]\n"
        );
        let f = vda_disk(&flush);
        assert_eq!(
            (f.requests, f.bytes, f.unmatched_issues),
            (10, 9 * (4 << 20), 1)
        );
        assert!((f.busy_ms - 23.792).abs() < 1e-9, "{f:?}");
        // Another disk's issue and requeue of the same sector are not this disk's.
        let mixed = LIVE.replace(
            "          <idle>-0       [001] d.h1. 34569.675000: irq_handler_entry",
            "         loop0-900     [000] ..... 34569.674000: block_rq_issue: 7,0 W 4194304 () 531406848 + 8192 be,0,4 [loop0]\n         loop0-900     [000] ..... 34569.676000: block_rq_requeue: 7,0 W () 531406848 + 8192 be,0,4 [0]\n          <idle>-0       [001] d.h1. 34569.675000: irq_handler_entry",
        );
        let m = vda_disk(&mixed);
        assert_eq!(m, d, "7,0's lines changed 254,0's figures");
        // Another disk's requests are not this one's.
        let other = summarize(LIVE, (7, 0), 32553, None).unwrap().disk.unwrap();
        assert_eq!((other.requests, other.busy_ms, other.gbps()), (0, 0.0, 0.0));
        assert_eq!(rq_extent("254,0 W 4096 () 8 + 8 be,0,4 [dd]"), Some((8, 8)));
        assert_eq!(
            rq_extent("254,0 FF () 18446744073709551615 + 0 be,0,4 [0]"),
            Some((0, 0))
        );
        assert_eq!(rq_extent("254,0 W () 8 - 8 be,0,4 [0]"), None);
        assert_eq!(rq_extent("254,0 W 8 + 8"), None);
    }

    #[test]
    fn the_union_of_spans_counts_overlaps_once() {
        assert_eq!(union_us(vec![]), 0);
        assert_eq!(union_us(vec![(10, 20)]), 10);
        // Overlapping, nested, touching, apart, out of order; an end before its start is empty.
        assert_eq!(
            union_us(vec![
                (30, 40),
                (10, 20),
                (15, 25),
                (12, 13),
                (25, 27),
                (50, 45),
                (60, 61)
            ]),
            17 + 10 + 1
        );
    }

    #[test]
    fn a_bad_line_is_an_error_naming_it() {
        let bad = LIVE.replace("usect_delayed=36000 ", "");
        assert!(summarize(&bad, (254, 0), 32553, None)
            .unwrap_err()
            .contains("trace line 12: no usect_delayed="));
        let nameless = LIVE.replace("irq=34 name=virtio4-input", "irq=34");
        assert!(summarize(&nameless, (254, 0), 1, Some("virtio1"))
            .unwrap_err()
            .contains("trace line 20: no name="));
        let garbled = format!("{LIVE}not a trace line\n");
        assert!(summarize(&garbled, (254, 0), 1, None)
            .unwrap_err()
            .starts_with("trace line 34:"));
        let extentless = LIVE.replace("() 531406848 + 8192", "() 531406848");
        assert!(summarize(&extentless, (254, 0), 1, None)
            .unwrap_err()
            .contains("trace line 22: no `SECTOR + NR`"));
    }

    #[test]
    fn a_disk_is_found_in_its_sysfs_path() {
        use std::path::Path;
        let vda = Path::new("/sys/devices/pci0000:00/0000:00:02.0/virtio1/block/vda/vda1");
        assert_eq!(virtio_in(vda).as_deref(), Some("virtio1"));
        assert_eq!(
            virtio_in(Path::new("/sys/devices/virtual/block/loop0")),
            None
        );
        assert_eq!(
            virtio_in(Path::new("/sys/devices/x/virtio/block/vdb")),
            None
        );
        assert_eq!(
            virtio_in(Path::new("/sys/devices/x/virtio2a/block/vdb")),
            None
        );
        assert_eq!(parse_dev("254:0\n"), Some((254, 0)));
        assert_eq!(parse_dev("254"), None);
        assert_eq!(parse_dev("a:0"), None);
    }

    #[test]
    fn the_median_of_odd_and_even_runs() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[7]), 7.0);
        assert_eq!(median(&[5, 1, 3]), 3.0);
        assert_eq!(median(&[9, 1, 5, 3, 7]), 5.0);
        assert_eq!(median(&[4, 1, 3, 8]), 3.5);
    }
}
