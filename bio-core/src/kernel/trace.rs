//! What `kernel/trace/` records with every event: the context columns of a tracefs line
//! (`tracing_gen_ctx_irq_test()` in `kernel/trace/trace.c`, printed by `trace_print_lat_fmt()` in
//! `kernel/trace/trace_output.c`), the hashed pointers `%p` prints (`lib/vsprintf.c`
//! `ptr_to_id()`), and [`ktrace!`](crate::ktrace), the one way bio-core fires a tracepoint.
//!
//! A tracepoint is a `tracing` TRACE event with `tracepoint = "<event>"`, the context fields
//! `exec_cpu`, `comm`, `pid`, `flags`, and the message `"<event>: <fields>"` rendered as the
//! event's `print fmt` renders them (tracefs-6.18/formats/). Annotations the kernel has no
//! tracepoint for are `biosim_<name>` events of the same shape (written as `tracing_mark_write`
//! lines by the ftrace writer).

use super::{Cpu, LockClass, HARDIRQ_MASK, NMI_MASK, PREEMPT_MASK, SOFTIRQ_OFFSET};
use std::fmt;

/// `SOFTIRQ_SHIFT`: where the softirq count starts in `preempt_count`.
const SOFTIRQ_SHIFT: u32 = 8;

/// The 5-character context column of a tracefs line (`irqs-off/BH-disabled`, `need-resched`,
/// `hardirq/softirq`, `preempt-depth`, `migrate-disable`), exactly as `trace_print_lat_fmt()`
/// prints it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceFlags([u8; 5]);

impl TraceFlags {
    /// The column from the raw inputs of `tracing_gen_ctx_irq_test()`:
    ///
    /// - `irqs_off` (`TRACE_FLAG_IRQS_OFF`) and `bh_off` (`TRACE_FLAG_BH_OFF`:
    ///   `softirq_count() >> (SOFTIRQ_SHIFT + 1)`, a BH-disable count, not softirq serving) give
    ///   `D` (both), `d`, `b` or `.`;
    /// - `need_resched` (`TIF_NEED_RESCHED`, which x86 also folds into `PREEMPT_NEED_RESCHED`, so
    ///   both flags are set together) gives `N`;
    /// - `nmi`, `hardirq`, `softirq` (serving) give `Z`/`z`/`H`/`h`/`s`/`.`;
    /// - `depth` and `migrate` are printed as one hex digit each, `.` for 0, capped at 15.
    #[allow(clippy::too_many_arguments)] // the eight inputs of tracing_gen_ctx_irq_test()
    pub fn from_parts(
        irqs_off: bool,
        bh_off: bool,
        need_resched: bool,
        nmi: bool,
        hardirq: bool,
        softirq: bool,
        depth: u32,
        migrate: u32,
    ) -> Self {
        let irq = match (irqs_off, bh_off) {
            (true, true) => b'D',
            (true, false) => b'd',
            (false, true) => b'b',
            (false, false) => b'.',
        };
        let nr = if need_resched { b'N' } else { b'.' };
        let hs = match (nmi, hardirq, softirq) {
            (true, true, _) => b'Z',
            (true, false, _) => b'z',
            (false, true, true) => b'H',
            (false, true, false) => b'h',
            (false, false, true) => b's',
            (false, false, false) => b'.',
        };
        let digit = |n: u32| match n.min(0xf) {
            0 => b'.',
            n => b"0123456789abcdef"[n as usize],
        };
        Self([irq, nr, hs, digit(depth), digit(migrate)])
    }

    /// The column as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII bytes are ever stored.
        std::str::from_utf8(&self.0).unwrap_or(".....")
    }
}

impl fmt::Display for TraceFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for TraceFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceFlags({})", self.as_str())
    }
}

impl Cpu {
    /// `trace_<event>_enabled()` for every event: whether this CPU's kernel has its tracepoints'
    /// static keys on ([`Kernel::set_tracepoints_enabled`](super::Kernel::set_tracepoints_enabled)).
    /// [`ktrace!`](crate::ktrace) checks it first; a caller that computes a tracepoint's
    /// arguments (a request's `rwbs`, sector and size) checks it before, as the kernel computes
    /// them inside the tracepoint's `TP_fast_assign`, behind its static key.
    #[inline]
    pub fn tracepoints_enabled(&self) -> bool {
        self.kernel.tracepoints_enabled()
    }

    /// The flags column of an event fired here now, as `tracing_gen_ctx_dec()` records it and
    /// `trace_print_lat_fmt()` prints it.
    ///
    /// The preempt-depth digit is the low byte of `preempt_count()` (`pc & 0xff`: the
    /// `preempt_disable()`/spinlock nesting; hardirq, softirq and NMI live in higher bits and
    /// never show there), plus what the simulated context does not hold in its counter:
    ///
    /// - The idle task runs `do_idle()` with preemption disabled (`init_idle_preempt_count()` sets
    ///   `PREEMPT_DISABLED`), so whatever is traced while `<idle>` is current counts one more. That
    ///   is why the live kernel shows `d.h1.` for an interrupt and `..s1.` for the softirq it
    ///   raised when they hit an idle CPU, and `d.h..` / `..s..` when they hit a task (the
    ///   reference traces' `dd` and `ksoftirqd/0` lines). Without `CONFIG_PREEMPT_COUNT` the
    ///   offset is 0 and nothing shows.
    /// - The tracepoint itself runs its probes under `preempt_disable_notrace()`, and
    ///   `tracing_gen_ctx_dec()` subtracts that one only `if (IS_ENABLED(CONFIG_PREEMPTION))`;
    ///   so a `!PREEMPTION` kernel with `CONFIG_PREEMPT_COUNT` (biosim's default `voluntary` with
    ///   `DEBUG_ATOMIC_SLEEP`) prints every event one deeper than its caller's count.
    ///
    /// The migrate-disable digit counts `migrate_disable()` sections: on PREEMPT_RT every held
    /// `spinlock_t` and `local_lock_t` (`rt_spin_lock()`, `__local_lock()`), none elsewhere.
    pub fn trace_flags(&self) -> TraceFlags {
        self.trace_flags_under(self.irqs_disabled(), 0)
    }

    /// [`Cpu::trace_flags`] of code that holds `extra_depth` more `raw_spinlock_t`s than the model
    /// takes for real, with IRQs `irqs_off`: the kernel's internal locks at the tracepoint
    /// (`pool->lock` in `__queue_work()`, `p->pi_lock` and the runqueue lock in
    /// `try_to_wake_up()`, the runqueue lock in `__schedule()`), which biosim's one subsystem
    /// lock stands for without touching the context's counters.
    pub fn trace_flags_under(&self, irqs_off: bool, extra_depth: u32) -> TraceFlags {
        let pc = self.pc.get();
        let softirq = self.softirq.get();
        let config = self.config();
        let mut depth = (self.preempt_count() & PREEMPT_MASK) + extra_depth;
        if config.preempt_count {
            if self.current.borrow().is_idle() {
                depth += 1;
            }
            if !config.preemption() {
                depth += 1;
            }
        }
        let migrate = if config.preempt_rt() {
            self.held_locks
                .borrow()
                .iter()
                .filter(|l| matches!(l.class, LockClass::Spinlock | LockClass::LocalLock))
                .count() as u32
        } else {
            0
        };
        TraceFlags::from_parts(
            irqs_off,
            (softirq & super::SOFTIRQ_MASK) >> (SOFTIRQ_SHIFT + 1) != 0,
            self.need_resched(),
            pc & NMI_MASK != 0,
            pc & HARDIRQ_MASK != 0,
            softirq & SOFTIRQ_OFFSET != 0,
            depth,
            migrate,
        )
    }
}

/// The kinds of object a `%p` prints, each hashed apart so that work 1 and timer 1 differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PtrKind {
    /// A `struct work_struct *`.
    Work,
    /// A `struct timer_list *`.
    Timer,
    /// A `struct hrtimer *`.
    Hrtimer,
}

/// `%p` of object `id` of `kind`: the kernel prints pointers hashed (`ptr_to_id()`: siphash of the
/// address keyed at boot, truncated to 32 bits on 64-bit, so the live traces show
/// `00000000785947f3`). biosim has no addresses; a fixed 32-bit mix of (kind, id) gives the same
/// look, distinct per object and identical in every run.
pub fn hashed_ptr(kind: PtrKind, id: u64) -> String {
    let tag: u64 = match kind {
        PtrKind::Work => 0x776f_726b,
        PtrKind::Timer => 0x7469_6d72,
        PtrKind::Hrtimer => 0x6872_746d,
    };
    // splitmix64's finalizer: a bijection on u64, so distinct inputs stay distinct before the
    // truncation.
    let mut z = (tag << 32 | (id & 0xffff_ffff)).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    format!("{:016x}", z & 0xffff_ffff)
}

/// `%p` of a work item (`struct work_struct *`).
pub fn work_ptr(id: usize) -> String {
    hashed_ptr(PtrKind::Work, id as u64)
}

/// `%p` of a timer (`struct timer_list *`).
pub fn timer_ptr(id: usize) -> String {
    hashed_ptr(PtrKind::Timer, id as u64)
}

/// Fires tracepoint `$event` (a `&'static str`, usually a literal) from context `$cx` (a
/// `&Cpu`): a `tracing` TRACE event on `target: $target` with `tracepoint = $event`, the context
/// fields `exec_cpu` (and `cpu`, the same, for readers of the older convention), `comm`, `pid` and
/// `flags` ([`Cpu::trace_flags`], or `flags: EXPR` to pass a [`TraceFlags`]), extra fields with
/// `fields(key = value, ...)`, and the message
/// `"$event: <format>"`. The format must render the event's `print fmt`. Nothing is computed
/// unless the kernel's tracepoints are on ([`Cpu::tracepoints_enabled`]) and the event is enabled.
///
/// ```ignore
/// ktrace!(cx, target: "irq", "softirq_raise", "vec={} [action={}]", vec.nr(), vec.name());
/// ```
#[macro_export]
macro_rules! ktrace {
    ($cx:expr, target: $target:literal, $event:expr, flags: $flags:expr, fields($($k:ident = $v:expr),* $(,)?), $($fmt:tt)+) => {
        $crate::ktrace!(@emit $cx, $target, $event, |_cx: &$crate::kernel::Cpu| $flags, ($($k = $v),*); $($fmt)+)
    };
    ($cx:expr, target: $target:literal, $event:expr, fields($($k:ident = $v:expr),* $(,)?), $($fmt:tt)+) => {
        $crate::ktrace!(@emit $cx, $target, $event, |cx: &$crate::kernel::Cpu| cx.trace_flags(), ($($k = $v),*); $($fmt)+)
    };
    ($cx:expr, target: $target:literal, $event:expr, flags: $flags:expr, $($fmt:tt)+) => {
        $crate::ktrace!(@emit $cx, $target, $event, |_cx: &$crate::kernel::Cpu| $flags, (); $($fmt)+)
    };
    ($cx:expr, target: $target:literal, $event:expr, $($fmt:tt)+) => {
        $crate::ktrace!(@emit $cx, $target, $event, |cx: &$crate::kernel::Cpu| cx.trace_flags(), (); $($fmt)+)
    };
    // `$cx` is evaluated exactly once, before the switch is read (an expression with a side
    // effect, or a costly one, must not run twice); the default flags reach the bound context
    // through the `$flags_of` closure, since macro hygiene keeps the caller's arms from naming
    // this arm's binding.
    (@emit $cx:expr, $target:literal, $event:expr, $flags_of:expr, ($($k:ident = $v:expr),*); $fmt:literal $(, $arg:expr)* $(,)?) => {{
        let cx: &$crate::kernel::Cpu = $cx;
        if cx.tracepoints_enabled() && ::tracing::enabled!(target: $target, ::tracing::Level::TRACE) {
            let event: &'static str = $event;
            let flags: $crate::kernel::TraceFlags = ($flags_of)(cx);
            let task = cx.current();
            ::tracing::trace!(
                target: $target,
                tracepoint = event,
                cpu = u64::from(cx.id().0),
                exec_cpu = u64::from(cx.id().0),
                comm = task.trace_comm(),
                pid = u64::from(task.pid),
                flags = flags.as_str(),
                $($k = $v,)*
                "{}: {}",
                event,
                format_args!($fmt $(, $arg)*)
            );
        }
    }};
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::kernel::{Kernel, KernelConfig, PreemptModel, Task};
    use crate::CpuId;
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::Layer;

    /// One tracepoint event as a test sees it.
    #[derive(Debug, Clone, Default)]
    pub(crate) struct Captured {
        pub(crate) tracepoint: String,
        pub(crate) message: String,
        pub(crate) flags: Option<String>,
        pub(crate) comm: Option<String>,
        pub(crate) pid: Option<u64>,
        pub(crate) exec_cpu: Option<u64>,
    }

    impl Visit for Captured {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                self.message = format!("{value:?}");
            }
        }

        fn record_str(&mut self, field: &Field, value: &str) {
            match field.name() {
                "tracepoint" => self.tracepoint = value.to_owned(),
                "flags" => self.flags = Some(value.to_owned()),
                "comm" => self.comm = Some(value.to_owned()),
                "message" => self.message = value.to_owned(),
                _ => {}
            }
        }

        fn record_u64(&mut self, field: &Field, value: u64) {
            match field.name() {
                "pid" => self.pid = Some(value),
                "exec_cpu" => self.exec_cpu = Some(value),
                _ => {}
            }
        }
    }

    struct CaptureLayer(Arc<Mutex<Vec<Captured>>>);

    impl<S: tracing::Subscriber> Layer<S> for CaptureLayer {
        fn on_event(&self, event: &tracing::Event<'_>, _cx: Context<'_, S>) {
            let mut c = Captured::default();
            event.record(&mut c);
            if !c.tracepoint.is_empty() {
                self.0.lock().unwrap().push(c);
            }
        }
    }

    /// The process-wide subscriber of bio-core's tests: interested in every callsite
    /// "sometimes" and enabling nothing. Without it, a callsite first hit on a thread with no
    /// capture (the global default is then "no subscriber": interest never) may keep that cached
    /// interest while another thread's capture is being registered, and the capture misses the
    /// event (seen as a flaky missing `block_unplug`). With it, interest is never cached as
    /// never: each event asks the dispatcher of its own thread.
    struct SometimesNothing;

    impl tracing::Subscriber for SometimesNothing {
        fn register_callsite(
            &self,
            _: &'static tracing::Metadata<'static>,
        ) -> tracing::subscriber::Interest {
            tracing::subscriber::Interest::sometimes()
        }
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            false
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, _: &tracing::Event<'_>) {}
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    /// Serialises every capture of the crate's tests: a capture's subscriber dropped while
    /// another test's is being created can leave a callsite's interest stale in tracing-core,
    /// and then the other capture misses events.
    static CAPTURES: Mutex<()> = Mutex::new(());

    /// The tracepoint events `f` fires on this thread; one capture at a time in the process.
    pub(crate) fn capture(f: impl FnOnce()) -> Vec<Captured> {
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            let _ = tracing::subscriber::set_global_default(SometimesNothing);
        });
        let _one_at_a_time = CAPTURES.lock().unwrap_or_else(|e| e.into_inner());
        let events = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(CaptureLayer(Arc::clone(&events)));
        tracing::subscriber::with_default(subscriber, || {
            // With this capture's subscriber in place, recompute every callsite's interest: one
            // computed stale by a registration on another thread is corrected.
            tracing::callsite::rebuild_interest_cache();
            f()
        });
        let v = events.lock().unwrap().clone();
        v
    }

    /// The `print fmt` of every kernel tracepoint bio-core fires, from
    /// tracefs-6.18/formats/*.format with the C arguments dropped. `sched_switch`'s
    /// `prev_state=%s%s` (the state letter, then `+` if preempted) is read as one `%s`.
    pub(crate) const PRINT_FMTS: &[(&str, &str)] = &[
        ("workqueue_queue_work", "work struct=%p function=%ps workqueue=%s req_cpu=%d cpu=%d"),
        ("workqueue_activate_work", "work struct %p function=%ps "),
        ("workqueue_execute_start", "work struct %p: function %ps"),
        ("workqueue_execute_end", "work struct %p: function %ps"),
        ("irq_handler_entry", "irq=%d name=%s"),
        ("irq_handler_exit", "irq=%d ret=%s"),
        ("softirq_raise", "vec=%u [action=%s]"),
        ("softirq_entry", "vec=%u [action=%s]"),
        ("softirq_exit", "vec=%u [action=%s]"),
        ("timer_start", "timer=%p function=%ps expires=%lu [timeout=%ld] bucket_expiry=%lu cpu=%u idx=%u flags=%s"),
        ("timer_cancel", "timer=%p"),
        ("timer_expire_entry", "timer=%p function=%ps now=%lu baseclk=%lu"),
        ("timer_expire_exit", "timer=%p"),
        ("hrtimer_start", "hrtimer=%p function=%ps expires=%llu softexpires=%llu mode=%s was_armed=%d"),
        ("hrtimer_expire_entry", "hrtimer=%p function=%ps now=%llu"),
        ("hrtimer_expire_exit", "hrtimer=%p"),
        ("block_bio_queue", "%d,%d %s %llu + %u [%s]"),
        // No .format file was recorded for the merge events: they are block_bio_queue's
        // DECLARE_EVENT_CLASS(block_bio), so they share its print fmt.
        ("block_bio_backmerge", "%d,%d %s %llu + %u [%s]"),
        ("block_bio_frontmerge", "%d,%d %s %llu + %u [%s]"),
        ("block_bio_complete", "%d,%d %s %llu + %u [%d]"),
        ("block_bio_remap", "%d,%d %s %llu + %u <- (%d,%d) %llu"),
        ("block_plug", "[%s]"),
        ("block_unplug", "[%s] %d"),
        ("sched_switch", "prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s ==> next_comm=%s next_pid=%d next_prio=%d"),
        ("sched_wakeup", "comm=%s pid=%d prio=%d target_cpu=%03d"),
        ("ipi_send_cpu", "cpu=%u callsite=%s callback=%s"),
        ("call_function_single_entry", "vector=%d"),
        ("call_function_single_exit", "vector=%d"),
        ("mm_vmscan_throttled", "nid=%d usec_timeout=%d usect_delayed=%d reason=%s"),
    ];

    /// Checks every captured event: a kernel tracepoint's message is `"<event>: "` and its print
    /// fmt, with all four context fields; a biosim annotation is `"biosim_<name>: <text>"`.
    /// Returns the problems found.
    pub(crate) fn check_formats(events: &[Captured]) -> Vec<String> {
        let mut bad = Vec::new();
        for e in events {
            let Some(body) = e.message.strip_prefix(&format!("{}: ", e.tracepoint)) else {
                bad.push(format!(
                    "{}: message does not start with its name: {}",
                    e.tracepoint, e.message
                ));
                continue;
            };
            if e.tracepoint.starts_with("biosim_") {
                if body.is_empty() {
                    bad.push(format!("{}: empty annotation", e.tracepoint));
                }
                continue;
            }
            match PRINT_FMTS.iter().find(|(n, _)| *n == e.tracepoint) {
                None => bad.push(format!(
                    "{}: not a kernel tracepoint biosim knows",
                    e.tracepoint
                )),
                Some((_, fmt)) if !renders(fmt, body) => bad.push(format!(
                    "{}: `{body}` does not render `{fmt}`",
                    e.tracepoint
                )),
                Some(_) => {}
            }
            if e.flags.as_ref().is_none_or(|f| f.len() != 5)
                || e.comm.is_none()
                || e.pid.is_none()
                || e.exec_cpu.is_none()
            {
                bad.push(format!("{}: context fields missing: {e:?}", e.tracepoint));
            }
        }
        bad
    }

    #[test]
    fn ktrace_evaluates_its_context_once() {
        let k = Kernel::new(KernelConfig::for_model(PreemptModel::Full), 1).unwrap();
        let cpu = k.cpu(CpuId(0)).unwrap();
        for on in [true, false] {
            k.set_tracepoints_enabled(on);
            let mut evals = 0;
            let ev = capture(|| {
                // Default flags (read from the context) and explicit ones: both arms.
                crate::ktrace!({ evals += 1; &cpu }, target: "timer", "timer_expire_exit", "timer={}", timer_ptr(1));
                crate::ktrace!({ evals += 1; &cpu }, target: "timer", "timer_expire_exit", flags: cpu.trace_flags(), "timer={}", timer_ptr(2));
            });
            assert_eq!(evals, 2, "tracepoints on: {on}");
            assert_eq!(ev.len(), if on { 2 } else { 0 });
        }
        k.set_tracepoints_enabled(true);
    }

    #[test]
    fn the_format_check_catches_a_message_in_the_old_format() {
        let ok = Captured {
            tracepoint: "workqueue_execute_end".into(),
            message: format!(
                "workqueue_execute_end: work struct {}: function f",
                work_ptr(1)
            ),
            flags: Some(".....".into()),
            comm: Some("kworker/0:1".into()),
            pid: Some(300),
            exec_cpu: Some(0),
        };
        assert!(check_formats(std::slice::from_ref(&ok)).is_empty());
        // The buggy twins: biosim's pre-issue-10 message, an invented event, missing context.
        let old = Captured {
            message: "workqueue_execute_end: work=1 function=f".into(),
            ..ok.clone()
        };
        let invented = Captured {
            tracepoint: "workqueue_cancel_work".into(),
            message: "workqueue_cancel_work: work=1".into(),
            ..ok.clone()
        };
        let bare = Captured {
            flags: None,
            ..ok.clone()
        };
        for e in [old, invented, bare] {
            assert_eq!(check_formats(&[e]).len(), 1);
        }
    }

    /// A test-only reading of a `print fmt`: does `line` render `fmt` (the C conversions
    /// `%d %u %ld %lu %llu %s %p %ps %03d %04u %3d` and literal text)? Each conversion matches
    /// what the kernel prints for it (digits with an optional sign, 16 hex digits for `%p`, and
    /// for `%s`/`%ps` a non-empty text up to the fmt's next literal).
    pub(crate) fn renders(fmt: &str, line: &str) -> bool {
        fn digits(s: &str, signed: bool) -> usize {
            let b = s.as_bytes();
            let start = usize::from(signed && b.first() == Some(&b'-'));
            let n = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
            if n == 0 {
                0
            } else {
                start + n
            }
        }
        let (mut f, mut l) = (fmt, line);
        while !f.is_empty() {
            if let Some(rest) = f.strip_prefix('%') {
                let conv_len = rest
                    .find(|c: char| c.is_ascii_alphabetic() && c != 'l')
                    .map_or(rest.len(), |i| i + 1);
                let mut conv = &rest[..conv_len];
                let mut after = &rest[conv_len..];
                if conv.ends_with('p') && after.starts_with('s') {
                    conv = "ps";
                    after = &after[1..];
                }
                let width: String = conv.chars().filter(|c| c.is_ascii_digit()).collect();
                let taken = match conv.trim_start_matches(|c: char| c.is_ascii_digit()) {
                    "d" | "ld" | "lld" => {
                        let pad = l.len() - l.trim_start_matches(' ').len();
                        let n = digits(&l[pad..], true);
                        (n > 0).then_some(pad + n)
                    }
                    "u" | "lu" | "llu" => {
                        let pad = l.len() - l.trim_start_matches(' ').len();
                        let n = digits(&l[pad..], false);
                        let ok = n > 0
                            && (width.is_empty() || pad + n >= width.parse::<usize>().unwrap_or(0));
                        ok.then_some(pad + n)
                    }
                    "p" => (l.len() >= 16 && l[..16].bytes().all(|c| c.is_ascii_hexdigit()))
                        .then_some(16),
                    "ps" | "s" => {
                        // Non-greedy: up to the literal text that follows in the fmt (a comm
                        // such as `kworker/0:1` holds `:`), the rest of the line at the end.
                        let next = &after[..after.find('%').unwrap_or(after.len())];
                        let n = if next.is_empty() {
                            l.len()
                        } else {
                            l.find(next).unwrap_or(0)
                        };
                        (n > 0).then_some(n)
                    }
                    _ => None,
                };
                let Some(n) = taken else { return false };
                l = &l[n..];
                f = after;
            } else {
                let lit = f.find('%').unwrap_or(f.len());
                let Some(rest) = l.strip_prefix(&f[..lit]) else {
                    return false;
                };
                l = rest;
                f = &f[lit..];
            }
        }
        l.is_empty()
    }

    #[test]
    fn the_matcher_reads_print_fmts_and_rejects_what_they_do_not_print() {
        let fmt = "work struct=%p function=%ps workqueue=%s req_cpu=%d cpu=%d";
        assert!(renders(fmt, "work struct=00000000785947f3 function=loop_rootcg_workfn workqueue=loop0 req_cpu=256 cpu=-1"));
        // The buggy twin: the message biosim printed before issue 10.
        assert!(!renders(
            fmt,
            "work=3 function=f workqueue=w req_cpu=256 cpu=-1"
        ));
        assert!(!renders("irq=%d ret=handled", "irq=x ret=handled"));
        assert!(renders("vec=%u [action=%s]", "vec=4 [action=BLOCK]"));
        assert!(!renders("vec=%u [action=%s]", "vec=BLOCK"));
        assert!(renders(
            "work struct %p function=%ps ",
            "work struct 00000000785947f3 function=f "
        ));
        assert!(!renders(
            "work struct %p function=%ps ",
            "work struct 00000000785947f3 function=f"
        ));
    }

    fn cpu(model: PreemptModel) -> Cpu {
        let k = Kernel::new(KernelConfig::for_model(model), 2).unwrap();
        k.cpu(CpuId(0)).unwrap()
    }

    #[test]
    fn flags_per_context_match_the_live_kernel() {
        // The reference kernel is CONFIG_PREEMPTION (PREEMPT_DYNAMIC): model `full`.
        let cx = cpu(PreemptModel::Full);
        assert_eq!(cx.trace_flags().as_str(), ".....", "task context");
        cx.with_preempt_disabled(|cx| assert_eq!(cx.trace_flags().as_str(), "...1.", "spinlock"));
        cx.with_irqs_disabled(|cx| {
            cx.with_preempt_disabled(|cx| {
                cx.with_preempt_disabled(|cx| {
                    assert_eq!(cx.trace_flags().as_str(), "d..2.", "raw spinlock, IRQs off")
                })
            })
        });
        assert_eq!(
            cx.trace_flags_under(true, 2).as_str(),
            "d..2.",
            "the same through trace_flags_under"
        );
        cx.with_bh_disabled(|cx| assert_eq!(cx.trace_flags().as_str(), "b....", "BH off"));
        cx.with_irqs_disabled(|cx| {
            cx.with_bh_disabled(|cx| {
                assert_eq!(cx.trace_flags().as_str(), "D....", "IRQs and BH off")
            })
        });
        // A hardirq hitting a task: the task's count is 0 (the dd lines of the live trace).
        cx.with_hardirq(|cx| assert_eq!(cx.trace_flags().as_str(), "d.h..", "hardirq on a task"));
        cx.with_softirq(|cx| assert_eq!(cx.trace_flags().as_str(), "..s..", "softirq on a task"));
        cx.with_softirq(|cx| {
            cx.with_hardirq(|cx| {
                assert_eq!(cx.trace_flags().as_str(), "d.H..", "hardirq in softirq")
            })
        });
        cx.with_nmi(|cx| assert_eq!(cx.trace_flags().as_str(), "d.Z..", "NMI"));
        // The same contexts hitting the idle task: the live trace's <idle>-0 lines.
        cx.set_current(Task::idle(CpuId(0)));
        cx.with_hardirq(|cx| {
            assert_eq!(
                cx.trace_flags().as_str(),
                "d.h1.",
                "hardirq handler on idle"
            );
            // blk_mq_raise_softirq(): the virtio vq lock and preempt_disable() around
            // raise_softirq().
            cx.with_preempt_disabled(|cx| {
                cx.with_preempt_disabled(|cx| {
                    assert_eq!(
                        cx.trace_flags().as_str(),
                        "d.h3.",
                        "softirq_raise in hardirq"
                    )
                })
            })
        });
        cx.with_softirq(|cx| {
            assert_eq!(
                cx.trace_flags().as_str(),
                "..s1.",
                "softirq handler on idle"
            );
            cx.set_need_resched(true);
            assert_eq!(cx.trace_flags().as_str(), ".Ns1.", "need_resched set");
            cx.set_need_resched(false);
        });
    }

    #[test]
    fn a_non_preemptible_kernel_counts_the_tracepoint_own_preempt_disable() {
        let cx = cpu(PreemptModel::Voluntary);
        assert_eq!(cx.trace_flags().as_str(), "...1.");
        let k = Kernel::new(KernelConfig::without_preempt_count(PreemptModel::None), 1).unwrap();
        let cx = k.cpu(CpuId(0)).unwrap();
        cx.with_preempt_disabled(|cx| {
            assert_eq!(
                cx.trace_flags().as_str(),
                ".....",
                "no PREEMPT_COUNT: nothing to see"
            )
        });
        cx.set_current(Task::idle(CpuId(0)));
        assert_eq!(cx.trace_flags().as_str(), ".....");
    }

    #[test]
    fn rt_sleeping_locks_show_as_migrate_disable() {
        let cx = cpu(PreemptModel::Rt);
        let (held, _) = cx.lock_acquire(LockClass::Spinlock, "test.lock");
        // softirq bits are per task on RT, and a spinlock_t is an rtmutex: no preempt count,
        // one migrate_disable().
        assert_eq!(cx.trace_flags().as_str(), "....1");
        cx.lock_release(held);
        assert_eq!(cx.trace_flags().as_str(), ".....");
    }

    #[test]
    fn hashed_pointers_are_stable_and_distinct() {
        assert_eq!(work_ptr(3), work_ptr(3));
        assert_ne!(work_ptr(3), work_ptr(4));
        assert_ne!(work_ptr(3), timer_ptr(3));
        assert!(renders("%p", &work_ptr(3)));
        assert!(work_ptr(3).starts_with("00000000"));
    }
}
