//! What a live write leg waited for, read from the kernel's own tracepoints: mm/vmscan.c's
//! `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)` (`vmscan:mm_vmscan_throttled`, one line per sleep
//! with the time actually slept, `usect_delayed`, as the kernel spells it), and when the device's
//! completions reached the guest (`block:block_rq_complete`, grouped into interrupts).
//!
//! Why: on cgroup v1 a buffered writer whose memcg is full of dirty folios is throttled in
//! reclaim (`shrink_inactive_list()` wakes the flusher and sleeps up to `HZ/10`, or until 32 pages
//! per sleeper end their writeback). How long it sleeps depends on when the device reports the
//! flusher's first completions. On this machine's virtio-blk (Firecracker's `Sync` engine) they
//! come only when the whole queue is done, so the writer sleeps through the flusher's pass:
//! `biosim bench dontcache --preset seed-writes --device virtio-blk` models that, and these
//! figures are the live kernel's side of it.

use crate::calibrate::tracefs::Tracefs;
use hotplug::tracefs::TraceLine;

/// The events a traced write leg enables.
pub const EVENTS: [&str; 2] = ["vmscan/mm_vmscan_throttled", "block/block_rq_complete"];

/// Completions on one CPU less than this apart (µs) came in with the same interrupt: the guest's
/// handler ends the requests it finds one after another, microseconds apart, while the device's
/// transfer of one request (1 MiB at a few GB/s) takes hundreds of µs.
pub const SAME_INTERRUPT_US: u64 = 100;

/// Per-CPU ring buffer of the session's instance while a leg is traced, KiB: a leg's completions
/// (up to ~4,500 a second with 1 MiB requests) and throttles fit many times over.
pub const BUFFER_KB: u64 = 32 << 10;

/// One traced write leg.
#[derive(Debug, Clone, PartialEq)]
pub struct LegTrace {
    /// `reclaim_throttle(VMSCAN_THROTTLE_WRITEBACK)` sleeps of the leg's writer.
    pub throttled: u64,
    /// Their total `usect_delayed`, ms.
    pub throttled_ms: f64,
    /// `block_rq_complete` lines of the file's device.
    pub completions: u64,
    /// The interrupts they came in with (runs on one CPU under [`SAME_INTERRUPT_US`] apart).
    pub interrupts: u64,
    /// The median number of completions per interrupt.
    pub median_per_interrupt: f64,
}

/// The session's instance set up for traced legs: [`EVENTS`] enabled, tracing off,
/// [`BUFFER_KB`] per CPU.
pub fn prepare(t: &mut Tracefs) -> Result<(), String> {
    t.set_buffer_kb(BUFFER_KB).map_err(|e| e.to_string())?;
    for e in EVENTS {
        t.enable(e).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Runs `job` with tracing on (from an empty buffer) and sums up what the trace shows for the
/// writer `pid` of `job`'s result and the device `dev` (`(major, minor)`). A buffer that overran
/// is an error: the figures would be short.
pub fn traced<R>(
    t: &Tracefs,
    dev: (u32, u32),
    job: impl FnOnce() -> Result<R, String>,
    pid_of: impl Fn(&R) -> u32,
) -> Result<(R, LegTrace), String> {
    t.clear().map_err(|e| e.to_string())?;
    t.set_on(true).map_err(|e| e.to_string())?;
    let r = job();
    t.set_on(false).map_err(|e| e.to_string())?;
    let r = r?;
    let lost = t.overrun().map_err(|e| e.to_string())?;
    if lost > 0 {
        return Err(format!(
            "the trace buffer overran: {lost} events lost ({} KiB per CPU)",
            BUFFER_KB
        ));
    }
    let text = t.read().map_err(|e| e.to_string())?;
    let lt = summarize(&text, dev, pid_of(&r))?;
    Ok((r, lt))
}

/// Sums up a `trace` file: the throttles of `pid`, the completions of `dev` and their interrupts.
/// A line that does not parse, or a throttle line without its fields, is an error naming it.
pub fn summarize(text: &str, dev: (u32, u32), pid: u32) -> Result<LegTrace, String> {
    let want_dev = format!("{},{} ", dev.0, dev.1);
    let (mut throttled, mut delayed_us) = (0u64, 0u64);
    let mut done: Vec<(u32, u64)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let l = TraceLine::parse(line).map_err(|e| format!("trace line {}: {e}", i + 1))?;
        match l.event.as_str() {
            "mm_vmscan_throttled" if l.pid == pid => {
                if !l.fields.contains("reason=VMSCAN_THROTTLE_WRITEBACK") {
                    continue;
                }
                let us = l
                    .fields
                    .split_whitespace()
                    .find_map(|f| f.strip_prefix("usect_delayed="))
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| format!("trace line {}: no usect_delayed=N", i + 1))?;
                throttled += 1;
                delayed_us += us;
            }
            "block_rq_complete" if l.fields.trim_start().starts_with(&want_dev) => {
                done.push((l.cpu, l.micros()));
            }
            _ => {}
        }
    }
    let (interrupts, sizes) = interrupts(&mut done);
    Ok(LegTrace {
        throttled,
        throttled_ms: delayed_us as f64 / 1e3,
        completions: done.len() as u64,
        interrupts,
        median_per_interrupt: median(&sizes),
    })
}

/// Groups completions `(cpu, µs)` into interrupts; returns their number and sizes.
fn interrupts(done: &mut [(u32, u64)]) -> (u64, Vec<u64>) {
    done.sort_unstable();
    let mut sizes: Vec<u64> = Vec::new();
    let mut prev: Option<(u32, u64)> = None;
    for &(cpu, us) in done.iter() {
        match prev {
            Some((c, t)) if c == cpu && us - t < SAME_INTERRUPT_US => {
                *sizes.last_mut().expect("a run is open") += 1;
            }
            _ => sizes.push(1),
        }
        prev = Some((cpu, us));
    }
    (sizes.len() as u64, sizes)
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

    /// Lines as this machine's 6.18 printed them in a normal write leg (ext4 on /dev/vda, 254:0;
    /// the writer was pid 32553), trimmed to a few.
    const LIVE: &str = "\
# tracer: nop
#
          <idle>-0       [001] d.h1. 34569.541847: block_rq_complete: 254,0 W () 531234816 + 8192 be,0,4 [0]
          <idle>-0       [001] d.h1. 34569.541857: block_rq_complete: 254,0 W () 531243008 + 8192 be,0,4 [0]
          <idle>-0       [001] d.h1. 34569.541867: block_rq_complete: 254,0 W () 531251200 + 8192 be,0,4 [0]
         python3-32553   [000] ..... 34569.542024: mm_vmscan_throttled: nid=0 usec_timeout=100000 usect_delayed=36000 reason=VMSCAN_THROTTLE_WRITEBACK
          <idle>-0       [001] d.h1. 34569.543647: block_rq_complete: 254,0 W () 531382272 + 8192 be,0,4 [0]
          <idle>-0       [001] d.h1. 34569.543657: block_rq_complete: 254,0 W () 531390464 + 8192 be,0,4 [0]
          <idle>-0       [000] d.h1. 34569.543660: block_rq_complete: 7,0 W () 1024 + 8 be,0,4 [0]
         python3-40000   [000] ..... 34569.600000: mm_vmscan_throttled: nid=0 usec_timeout=100000 usect_delayed=8000 reason=VMSCAN_THROTTLE_WRITEBACK
         python3-32553   [000] ..... 34569.634099: mm_vmscan_throttled: nid=0 usec_timeout=100000 usect_delayed=40000 reason=VMSCAN_THROTTLE_WRITEBACK
         python3-32553   [000] ..... 34569.640000: mm_vmscan_throttled: nid=0 usec_timeout=20000 usect_delayed=4000 reason=VMSCAN_THROTTLE_ISOLATED
          <idle>-0       [001] d.h1. 34569.670000: block_rq_complete: 254,0 W () 531398656 + 8192 be,0,4 [0]
";

    #[test]
    fn the_writers_writeback_throttles_and_the_devices_interrupts_are_counted() {
        let t = summarize(LIVE, (254, 0), 32553).unwrap();
        // Two WRITEBACK sleeps of the writer (another task's and an ISOLATED one left out).
        assert_eq!((t.throttled, t.throttled_ms), (2, 76.0));
        // 254,0's six completions (7,0's left out) in three interrupts: 3, 2, 1.
        assert_eq!((t.completions, t.interrupts), (6, 3));
        assert_eq!(t.median_per_interrupt, 2.0);
        let other = summarize(LIVE, (7, 0), 32553).unwrap();
        assert_eq!((other.completions, other.interrupts), (1, 1));
    }

    #[test]
    fn a_bad_line_is_an_error_naming_it() {
        let bad = LIVE.replace("usect_delayed=36000 ", "");
        assert!(summarize(&bad, (254, 0), 32553)
            .unwrap_err()
            .contains("trace line 6: no usect_delayed=N"));
        let garbled = format!("{LIVE}not a trace line\n");
        assert!(summarize(&garbled, (254, 0), 1)
            .unwrap_err()
            .starts_with("trace line 14:"));
    }

    #[test]
    fn the_median_of_odd_and_even_runs() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[5, 1, 3]), 3.0);
        assert_eq!(median(&[4, 1, 3, 8]), 3.5);
        let mut d = vec![(1, 100), (0, 10), (0, 50), (0, 200), (1, 150)];
        // CPU0: 10, 50 (40 apart: one), 200 (150 later: another); CPU1: 100, 150 (one).
        assert_eq!(interrupts(&mut d), (3, vec![2, 1, 2]));
    }
}
