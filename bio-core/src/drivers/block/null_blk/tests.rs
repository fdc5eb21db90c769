//! Unit tests of the null_blk model without a runtime: the CPU contexts are driven by hand
//! (`deliver_irq`, `run_softirqs`), so every completion path is seen step by step.

use super::*;
use crate::block::{
    submit_bio_noacct, BioEndIo, BlkStatus, BlockDriver, ReqFlags, ReqOp, Submission,
    BLK_STS_AGAIN, BLK_STS_IOERR, BLK_STS_NOTSUPP, BLK_STS_OK,
};
use crate::kernel::trace::tests::{capture, check_formats};
use crate::kernel::{CpuId, KernelConfig};
use crate::sync::{Arc, Mutex, UntrackedArc};
use crate::{Cpu, Kernel};

type Ended = Arc<Mutex<Vec<(ReqOp, BlkStatus, Vec<u8>)>>>;

fn cfg(params: &[(&str, &str)]) -> NullBlkConfig {
    let mut c = NullBlkConfig {
        clock: HrtimerClock::Explicit,
        ..NullBlkConfig::default()
    };
    for (k, v) in params {
        c.parse_param(k, v).unwrap();
    }
    c
}

#[allow(clippy::too_many_arguments)] // one call per bio reads best with every field named at the call
fn submit(
    k: &UntrackedArc<Kernel>,
    dev: &NullBlk,
    cx: &Cpu,
    op: ReqOp,
    sector: u64,
    data: Vec<u8>,
    flags: ReqFlags,
    ended: &Ended,
) -> Submission {
    let e = Arc::clone(ended);
    let len = data.len() as u32;
    let mut bio = k
        .bio_alloc(op, sector)
        .with_flags(flags)
        .with_end_io(BioEndIo::new("test_end_io", move |b, _| {
            e.lock().push((b.op(), b.status(), b.data()))
        }));
    if matches!(op, ReqOp::Read | ReqOp::Write) {
        bio.add_data(data);
    } else {
        bio = bio.with_size(len);
    }
    submit_bio_noacct(bio, dev, cx)
}

#[test]
fn parameters_parse_by_kernel_name_and_refuse_unknown_repeated_and_bad_values() {
    let d = NullBlkConfig::default();
    assert_eq!(
        (
            d.irqmode,
            d.completion_nsec,
            d.queue_mode,
            d.hw_queue_depth,
            d.memory_backed,
            d.blocksize,
            d.size_bytes
        ),
        (
            NullIrqMode::Softirq,
            10_000,
            NullQueueMode::Mq,
            64,
            false,
            512,
            250 << 30
        )
    );
    let c = cfg(&[
        ("irqmode", "2"),
        ("completion_nsec", "5000"),
        ("hw_queue_depth", "4"),
        ("memory_backed", "1"),
        ("discard", "y"),
        ("bs", "4096"),
        ("size", "16"),
    ]);
    assert_eq!(
        c.to_string(),
        "irqmode=2 completion_nsec=5000 queue_mode=2 hw_queue_depth=4 memory_backed=1 discard=1 bs=4096 size=16"
    );
    // A whole number of GiB prints as the modprobe parameter gb=; below a MiB as the field.
    assert!(NullBlkConfig::default().to_string().ends_with(" gb=250"));
    let tiny = NullBlkConfig {
        size_bytes: 64 << 10,
        ..NullBlkConfig::default()
    };
    assert!(tiny.to_string().ends_with(" size_bytes=65536"), "{tiny}");
    // kstrtobool(): first character (o needs n/f after it); param_set_bool(): bare name = 1.
    for (v, want) in [
        ("Y", true),
        ("yes", true),
        ("t", true),
        ("True", true),
        ("1x", true),
        ("on", true),
        ("ON", true),
        ("N", false),
        ("f", false),
        ("0", false),
        ("off", false),
        ("oFf", false),
    ] {
        let mut c = NullBlkConfig::default();
        c.parse_param("memory_backed", v).unwrap();
        assert_eq!(c.memory_backed, want, "memory_backed={v}");
    }
    for bad in ["", "o", "ox", "2", "maybe"] {
        let mut c = NullBlkConfig::default();
        let e = c.parse_param("discard", bad).unwrap_err();
        assert!(
            e.contains("-EINVAL") && e.contains(&format!("discard={bad}")),
            "{e}"
        );
    }
    let c = NullBlkConfig::from_params(["memory_backed", "discard"]).unwrap();
    assert!(c.memory_backed && c.discard && c.blocking());
    let mut c = NullBlkConfig::default();
    c.parse_assignment("discard").unwrap();
    assert!(c.discard && !c.blocking());
    let e = NullBlkConfig::from_params(["gb=1", "size=5"]).unwrap_err();
    assert_eq!(e, "null_blk parameter `size` given twice");
    assert!(NullBlkConfig::from_params(["bs"])
        .unwrap_err()
        .contains("KEY=VALUE"));
    let mut c = NullBlkConfig::default();
    let e = c.parse_param("submit_queues", "2").unwrap_err();
    assert!(
        e.contains("unknown null_blk parameter `submit_queues`") && e.contains("irqmode"),
        "{e}"
    );
    assert!(c
        .parse_param("irqmode", "3")
        .unwrap_err()
        .contains("irqmode=3"));
    assert!(c
        .parse_param("queue_mode", "x")
        .unwrap_err()
        .contains("queue_mode=x"));
    assert!(c
        .parse_param("memory_backed", "maybe")
        .unwrap_err()
        .contains("memory_backed=maybe"));
    assert!(c.parse_assignment("bs").unwrap_err().contains("KEY=VALUE"));
    // null_validate_conf() (6.10+): blk_validate_block_size(), no rounding or clamping.
    for bs in [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536] {
        let c = NullBlkConfig {
            blocksize: bs,
            ..NullBlkConfig::default()
        };
        assert_eq!(c.validated_blocksize(), Ok(bs), "bs={bs}");
    }
    for bs in [0, 100, 256, 1000, 1536, 3072, 131072] {
        let c = NullBlkConfig {
            blocksize: bs,
            ..NullBlkConfig::default()
        };
        let e = c.validated_blocksize().unwrap_err();
        assert!(
            e.contains(&format!("bs={bs}")) && e.contains("-EINVAL"),
            "{e}"
        );
    }
}

#[test]
fn bs_1536_is_refused_and_depth_above_blk_mq_max_depth_is_reduced() {
    let k = Kernel::new(KernelConfig::default(), 1).unwrap();
    let e = NullBlk::new(&k, 0, cfg(&[("bs", "1536")])).unwrap_err();
    assert!(
        e.contains("bs=1536") && e.contains("blk_validate_block_size"),
        "{e}"
    );
    let nb = NullBlk::new(&k, 0, cfg(&[("bs", "65536")])).unwrap();
    assert_eq!(nb.limits().logical_block_size, 65536);
    let nb = NullBlk::new(&k, 1, cfg(&[("hw_queue_depth", "20000")])).unwrap();
    assert_eq!(nb.config().hw_queue_depth, super::BLK_MQ_MAX_DEPTH);
    let nb = NullBlk::new(&k, 2, cfg(&[("hw_queue_depth", "10240")])).unwrap();
    assert_eq!(nb.config().hw_queue_depth, 10240);
}

#[test]
fn queue_mode_bio_runs_as_blk_mq_and_rq_and_depth_zero_are_refused() {
    let k = Kernel::new(KernelConfig::default(), 1).unwrap();
    let nb = NullBlk::new(&k, 0, cfg(&[("queue_mode", "0")])).unwrap();
    assert_eq!(nb.config().queue_mode, NullQueueMode::Mq);
    let e = NullBlk::new(&k, 0, cfg(&[("queue_mode", "1")])).unwrap_err();
    assert!(e.contains("legacy IO path is no longer available"), "{e}");
    let e = NullBlk::new(&k, 0, cfg(&[("hw_queue_depth", "0")])).unwrap_err();
    assert!(e.contains("hw_queue_depth=0"), "{e}");
    // discard without memory backing is ignored (null_config_discard()).
    let nb = NullBlk::new(&k, 1, cfg(&[("discard", "1")])).unwrap();
    assert!(!nb.limits().discard);
    assert_eq!(
        (nb.disk_name(), nb.devt()),
        ("nullb1".into(), (NULL_MAJOR, 1))
    );
}

#[test]
fn memory_backed_irqmode_none_stores_reads_discards_and_refuses_write_zeroes_inline() {
    let k = Kernel::new(KernelConfig::default(), 1).unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let nb = NullBlk::new(
        &k,
        0,
        cfg(&[
            ("irqmode", "0"),
            ("memory_backed", "1"),
            ("discard", "1"),
            ("size", "1"),
        ]),
    )
    .unwrap();
    let ended: Ended = Arc::default();
    let n = ReqFlags::NONE;
    let mut data = vec![0u8; 8192];
    data[..4096].fill(0x5a);
    data[4096..].fill(0xa5);
    assert_eq!(
        submit(&k, &nb, &cx, ReqOp::Write, 8, data.clone(), n, &ended),
        Submission::Submitted
    );
    // Ended inline, in the submitter's context.
    assert_eq!(ended.lock().len(), 1);
    submit(&k, &nb, &cx, ReqOp::Read, 8, vec![0; 8192], n, &ended);
    assert_eq!(ended.lock()[1], (ReqOp::Read, BLK_STS_OK, data.clone()));
    // A hole reads as zeroes, whatever the buffer held.
    submit(&k, &nb, &cx, ReqOp::Read, 100, vec![7; 512], n, &ended);
    assert_eq!(ended.lock()[2].2, vec![0; 512]);
    // Discard one 4 KiB range: its 8 sectors' bits clear; the next page stays.
    submit(&k, &nb, &cx, ReqOp::Discard, 8, vec![0; 4096], n, &ended);
    assert_eq!(ended.lock()[3].1, BLK_STS_OK);
    submit(&k, &nb, &cx, ReqOp::Read, 8, vec![1; 8192], n, &ended);
    assert_eq!(&ended.lock()[4].2[..4096], &[0; 4096][..]);
    assert_eq!(&ended.lock()[4].2[4096..], &data[4096..]);
    assert_eq!(nb.nr_pages(), 1);
    // No write-zeroes limit: submit_bio_noacct() refuses it; an empty flush ends at once.
    assert_eq!(
        submit(&k, &nb, &cx, ReqOp::WriteZeroes, 0, vec![0; 512], n, &ended),
        Submission::Failed(BLK_STS_NOTSUPP)
    );
    assert_eq!(
        submit(
            &k,
            &nb,
            &cx,
            ReqOp::Write,
            0,
            vec![],
            ReqFlags::REQ_PREFLUSH,
            &ended
        ),
        Submission::Completed
    );
    // Beyond the end of the 1 MiB device.
    assert_eq!(
        submit(&k, &nb, &cx, ReqOp::Read, 2048, vec![0; 512], n, &ended),
        Submission::Failed(BLK_STS_IOERR)
    );
    let s = nb.stats();
    assert_eq!((s.submitted, s.completed, s.irqs, s.softirqs), (5, 5, 0, 0));
    assert_eq!(nb.tags_in_use(), 0);
    // The corrupting fault flips a stored byte, and only a stored one.
    assert!(nb.corrupt_stored_byte(4096 + 8 * 512 + 3));
    assert!(!nb.corrupt_stored_byte(50 * 4096));
    let back = nb.read_backing(8 * 512, 8192).unwrap();
    assert_eq!(back[4096 + 3], 0xa5 ^ 0xff);
}

#[test]
fn without_memory_backing_a_read_leaves_its_buffer_as_it_was() {
    let k = Kernel::new(KernelConfig::default(), 1).unwrap();
    let cx = k.cpu(CpuId(0)).unwrap();
    let nb = NullBlk::new(&k, 0, cfg(&[("irqmode", "0")])).unwrap();
    let ended: Ended = Arc::default();
    submit(
        &k,
        &nb,
        &cx,
        ReqOp::Write,
        0,
        vec![9; 512],
        ReqFlags::NONE,
        &ended,
    );
    submit(
        &k,
        &nb,
        &cx,
        ReqOp::Read,
        0,
        vec![3; 512],
        ReqFlags::NONE,
        &ended,
    );
    assert_eq!(ended.lock()[1].2, vec![3; 512]);
    assert!(nb.read_backing(0, 512).is_none());
    // No discard without memory backing.
    assert_eq!(
        submit(
            &k,
            &nb,
            &cx,
            ReqOp::Discard,
            0,
            vec![0; 512],
            ReqFlags::NONE,
            &ended
        ),
        Submission::Failed(BLK_STS_NOTSUPP)
    );
}

#[test]
fn softirq_mode_ends_in_block_softirq_on_the_submitting_cpu() {
    let k = Kernel::new(KernelConfig::default(), 2).unwrap();
    let c1 = k.cpu(CpuId(1)).unwrap();
    let nb = NullBlk::new(&k, 0, cfg(&[("irqmode", "1")])).unwrap();
    let ended: Ended = Arc::default();
    let ev = capture(|| {
        submit(
            &k,
            &nb,
            &c1,
            ReqOp::Write,
            0,
            vec![1; 4096],
            ReqFlags::NONE,
            &ended,
        );
        assert!(ended.lock().is_empty(), "not ended before the softirq");
        assert_eq!(k.pending_softirqs(CpuId(1)), 1);
        assert_eq!(k.pending_softirqs(CpuId(0)), 0);
        assert_eq!(k.run_softirqs(&c1), 1);
    });
    assert_eq!(ended.lock().len(), 1);
    // The irq events are in biosim's known formats (the block ones are checked against the
    // tracefs formats by the loop tests, through the same blk_mq_trace functions).
    let irq: Vec<_> = ev
        .iter()
        .filter(|e| e.tracepoint.starts_with("softirq"))
        .cloned()
        .collect();
    assert_eq!(check_formats(&irq), Vec::<String>::new());
    let names: Vec<&str> = ev.iter().map(|e| e.tracepoint.as_str()).collect();
    assert_eq!(
        names,
        [
            "block_bio_queue",
            "block_getrq",
            "block_rq_issue",
            "softirq_raise",
            "softirq_entry",
            "block_rq_complete",
            "softirq_exit"
        ]
    );
    assert!(
        ev[2]
            .message
            .starts_with("block_rq_issue: 254,0 W 4096 () 0 + 8"),
        "{}",
        ev[2].message
    );
    assert_eq!(nb.stats().softirqs, 1);
}

#[test]
fn timer_mode_fires_as_an_explicit_event_and_ends_in_hardirq_on_the_submitting_cpu() {
    let k = Kernel::new(KernelConfig::default(), 2).unwrap();
    let c1 = k.cpu(CpuId(1)).unwrap();
    let nb = NullBlk::new(
        &k,
        0,
        cfg(&[
            ("irqmode", "2"),
            ("completion_nsec", "2500"),
            ("hw_queue_depth", "1"),
        ]),
    )
    .unwrap();
    let ended: Ended = Arc::default();
    submit(
        &k,
        &nb,
        &c1,
        ReqOp::Read,
        0,
        vec![0; 512],
        ReqFlags::NONE,
        &ended,
    );
    assert_eq!(
        (nb.hrtimers_pending(), nb.next_hrtimer_expiry()),
        (1, Some(2500))
    );
    // The one tag is taken: a NOWAIT bio fails with BLK_STS_AGAIN, a blocking one (no runtime to
    // wait in) warns and fails.
    submit(
        &k,
        &nb,
        &c1,
        ReqOp::Read,
        0,
        vec![0; 512],
        ReqFlags::REQ_NOWAIT,
        &ended,
    );
    assert_eq!(ended.lock()[0].1, BLK_STS_AGAIN);
    submit(
        &k,
        &nb,
        &c1,
        ReqOp::Read,
        0,
        vec![0; 512],
        ReqFlags::NONE,
        &ended,
    );
    assert_eq!(ended.lock()[1].1, BLK_STS_IOERR);
    assert!(k.reports().all()[0].message.contains("no tag freed"));
    assert!(nb.fire_next_hrtimer());
    assert!(!nb.fire_next_hrtimer());
    assert_eq!(k.pending_irqs(CpuId(1)), 1);
    assert_eq!(ended.lock().len(), 2, "ended only when the IRQ is handled");
    let ev = capture(|| assert!(k.deliver_irq(&c1)));
    assert_eq!(ended.lock()[2].1, BLK_STS_OK);
    let names: Vec<&str> = ev.iter().map(|e| e.tracepoint.as_str()).collect();
    assert_eq!(
        names,
        [
            "irq_handler_entry",
            "hrtimer_expire_entry",
            "block_rq_complete",
            "hrtimer_expire_exit",
            "irq_handler_exit"
        ]
    );
    assert!(
        ev[1]
            .message
            .contains("function=null_cmd_timer_expired now=2500"),
        "{}",
        ev[1].message
    );
    assert!(
        ev[0].message.contains("name=nullb-hrtimer"),
        "{}",
        ev[0].message
    );
    let s = nb.stats();
    assert_eq!(
        (
            s.submitted,
            s.completed,
            s.irqs,
            s.timer_fires,
            s.tag_waits,
            s.tag_nowait_fails
        ),
        (1, 1, 1, 1, 1, 1)
    );
    assert_eq!(nb.tags_in_use(), 0);
}

/// Timer mode on the deterministic clock: each request ends exactly `completion_nsec` of
/// simulated time after its submission (`hrtimer_start(..., HRTIMER_MODE_REL)`), never before
/// its hrtimer is fired, in hardirq on the CPU that submitted it; the device's clock moves only
/// when a timer fires, so a request submitted after the first expiry expires later.
#[test]
fn timer_mode_completions_come_completion_nsec_after_submission_in_simulated_time() {
    let k = Kernel::new(KernelConfig::default(), 2).unwrap();
    let (c0, c1) = (k.cpu(CpuId(0)).unwrap(), k.cpu(CpuId(1)).unwrap());
    let nb = NullBlk::new(
        &k,
        0,
        cfg(&[
            ("irqmode", "2"),
            ("completion_nsec", "2500"),
            ("memory_backed", "1"),
        ]),
    )
    .unwrap();
    // (submitted at, CPU) of each request, in submission order; each completion records the
    // clock, the CPU and whether it ran in hardirq.
    let ended: Ended = Arc::default();
    let seen: Arc<Mutex<Vec<(u64, u32, bool)>>> = Arc::default();
    let submit_at = |cpu: &Cpu, op: ReqOp, sector: u64, fill: u8| {
        let (e, s, nbc) = (
            Arc::clone(&ended),
            Arc::clone(&seen),
            UntrackedArc::clone(&nb),
        );
        let mut bio =
            k.bio_alloc(op, sector)
                .with_end_io(BioEndIo::new("test_end_io", move |b, cx| {
                    s.lock()
                        .push((nbc.hrtimer_clock_ns(), cx.id().0, cx.in_hardirq()));
                    e.lock().push((b.op(), b.status(), b.data()))
                }));
        bio.add_data(vec![fill; 512]);
        let t = nb.hrtimer_clock_ns();
        submit_bio_noacct(bio, &*nb, cpu);
        t
    };
    let mut submitted = vec![
        (submit_at(&c1, ReqOp::Write, 0, 7), 1),
        (submit_at(&c0, ReqOp::Read, 8, 0), 0),
    ];
    assert_eq!(submitted, [(0, 1), (0, 0)]);
    assert_eq!(nb.next_hrtimer_expiry(), Some(2500));
    // Nothing ends by itself: no interrupt is pending until a timer fires.
    assert!(!k.deliver_irq(&c1) && !k.deliver_irq(&c0));
    assert!(ended.lock().is_empty());
    assert!(nb.fire_next_hrtimer());
    assert_eq!(nb.hrtimer_clock_ns(), 2500);
    assert!(k.deliver_irq(&c1), "the write's interrupt is on CPU1");
    assert!(!k.deliver_irq(&c0), "the read's timer has not fired yet");
    submitted.push((submit_at(&c0, ReqOp::Read, 0, 0), 0));
    assert_eq!(submitted[2].0, 2500, "submitted at the clock's time");
    assert!(nb.fire_next_hrtimer());
    assert!(k.deliver_irq(&c0));
    assert_eq!(nb.next_hrtimer_expiry(), Some(5000));
    assert!(nb.fire_next_hrtimer());
    assert!(k.deliver_irq(&c0));
    assert!(!nb.fire_next_hrtimer());
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 3);
    for ((at, cpu), (done, on, hardirq)) in submitted.iter().zip(&seen) {
        assert_eq!(done - at, 2500, "submitted at {at}, ended at {done}");
        assert_eq!((on, hardirq), (cpu, &true));
    }
    let ended = ended.lock();
    assert_eq!(
        ended[2].2,
        vec![7; 512],
        "the read after the write sees its data"
    );
    assert!(ended.iter().all(|e| e.1 == BLK_STS_OK));
}
