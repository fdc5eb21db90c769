//! An NVMe-like block device (`drivers/nvme/host/pci.c` seen from the block layer): a queue that
//! transfers at a fixed bandwidth after a fixed command latency, and completes each request with
//! an interrupt on the CPU that submitted it (one MSI-X vector per CPU, as `nvme_pci_map_queues()`
//! maps them). Bios submitted together that are contiguous and of the same direction are merged
//! into one request up to `max_request_bytes`, as the plug's `blk_attempt_plug_merge()` does (so
//! buffer_head's one-bio-per-block writeback does not cost one interrupt per 4 KiB); the
//! request's completion (`blk_mq_end_request()` → `blk_update_request()`) ends each of its bios. The data lives in memory, sparse, so everything written can be read back and
//! verified; a block never written reads as [`page_pattern`]`(block, 0)`, as if the disk had been
//! filled before the run.
//!
//! With [`Completion::WhenQueueEmpty`] the same queue behaves as a virtio-blk disk that
//! Firecracker emulates with its `Sync` engine (this machine's, by inference): a request posted
//! while the device works is executed right after the one before it, and the busy period's
//! requests all complete when it ends. Its interrupts come as this machine's do
//! ([`CompletionIrq::OneVector`]): one request queue, one vector (`virtio1-req.0`) on one CPU,
//! the request ended in `BLOCK_SOFTIRQ` there whichever CPU submitted it.
//! `VIRTIO_RING_F_EVENT_IDX` suppression and the VMM's rate limiter are not modelled.

use super::workload_pattern::page_pattern;
use bio_core::block::{Bio, ReqOp};
use bio_core::kernel::CpuId;
use std::collections::{BTreeMap, HashMap};

/// Bytes per sector (`SECTOR_SIZE`).
pub const SECTOR_SIZE: u64 = 512;

/// When the guest sees a request's completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// NVMe: each request's completion-queue entry is posted, and its interrupt raised, as soon
    /// as its transfer ends.
    PerRequest,
    /// A virtio-blk device emulated by Firecracker's `Sync` engine (the VMM this machine runs
    /// under, by inference): `process_queue()` pops and executes every available request,
    /// including those the guest adds while it works, and only when the avail ring is empty
    /// advances the used ring and signals at most one interrupt. Every request of a busy period
    /// completes at its end.
    WhenQueueEmpty,
}

impl Completion {
    /// The `--device` name: `nvme` or `virtio-blk`.
    pub fn name(self) -> &'static str {
        match self {
            Completion::PerRequest => "nvme",
            Completion::WhenQueueEmpty => "virtio-blk",
        }
    }

    /// `--device NAME`.
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "nvme" => Ok(Completion::PerRequest),
            "virtio-blk" => Ok(Completion::WhenQueueEmpty),
            _ => Err(format!("unknown device '{name}' (known: nvme, virtio-blk)")),
        }
    }
}

/// Where a request's completion interrupt comes in, and in which context blk-mq ends it
/// (`blk_mq_complete_request()` → `blk_mq_complete_request_remote()`, block/blk-mq.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionIrq {
    /// NVMe: a queue and an MSI-X vector per CPU (`nvme_pci_map_queues()`), so the completion
    /// interrupt comes in on the submitting CPU, whose queue has one software context: the driver
    /// ends the request in the hardirq (`rq->mq_hctx->nr_ctx == 1` on this CPU).
    SubmittingCpu,
    /// One request queue whose vector (`virtio1-req.0`) has one CPU as its effective affinity,
    /// chosen at boot from all CPUs, as `/proc/interrupts` of this machine shows (every
    /// `virtio1-req.0` interrupt on CPU1 on the boot of 2026-12-05; CPU0 on an earlier one):
    /// the interrupt comes in on that CPU for every submitter, and
    /// `blk_mq_complete_request_remote()` finds a queue of two software contexts, no IPI to send
    /// (`rq_affinity` 1: the CPUs share their last-level cache) and one hardware queue, so it
    /// raises `BLOCK_SOFTIRQ` there (`blk_mq_raise_softirq()`), where `blk_done_softirq()` ends
    /// the request. Traced on the live kernel: tests/data/tracefs-6.18/virtio-blk-irq-cpu.trace.
    /// `rq_affinity` 2 (an IPI back to the submitter) is not modelled.
    OneVector(CpuId),
}

impl CompletionIrq {
    /// `virtio1-req.0`'s CPU on this machine's boot of 2026-12-05 (`/proc/interrupts`): the
    /// `--irq-cpu` default, the other CPU than the model's writer.
    pub const VIRTIO_BLK_IRQ_CPU: CpuId = CpuId(1);

    /// The CPU a request submitted from `submitter` completes on.
    pub fn cpu(self, submitter: CpuId) -> CpuId {
        match self {
            CompletionIrq::SubmittingCpu => submitter,
            CompletionIrq::OneVector(cpu) => cpu,
        }
    }

    /// The vector's name in `irq_handler_entry` (`name=`): NVMe's first I/O queue (the name the
    /// model has always given every CPU's vector), or the virtio-blk request queue's.
    pub fn name(self) -> &'static str {
        match self {
            CompletionIrq::SubmittingCpu => "nvme0q1",
            CompletionIrq::OneVector(_) => "virtio1-req.0",
        }
    }
}

/// The device's speed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NvmeModel {
    /// Transfer bandwidth in bytes per second, shared by reads and writes (one queue's worth of
    /// media bandwidth: bios transfer one after another).
    pub bandwidth: f64,
    /// Command latency from submission to the start of the transfer, in ns.
    pub latency_ns: u64,
    /// The largest request a merge builds (`max_sectors_kb`).
    pub max_request_bytes: u64,
    /// When completions reach the guest.
    pub completion: Completion,
    /// Where they come in.
    pub irq: CompletionIrq,
}

impl NvmeModel {
    /// A mid-range PCIe 3 NVMe SSD: 3.2 GB/s, 20 µs per command.
    pub const DEFAULT: NvmeModel = NvmeModel {
        bandwidth: 3.2e9,
        latency_ns: 20_000,
        max_request_bytes: 512 << 10,
        completion: Completion::PerRequest,
        irq: CompletionIrq::SubmittingCpu,
    };

    /// `max_sectors_kb` of this machine's virtio-blk disk (`/sys/block/vda/queue`: 4096): the
    /// live traces show the flusher's 4 MiB requests and a 1 MiB `O_DIRECT` write as one request.
    pub const VIRTIO_BLK_MAX_REQUEST_BYTES: u64 = 4 << 20;

    /// The device `--device NAME` names at the default speed: NVMe-like, or virtio-blk with its
    /// interrupt on [`CompletionIrq::VIRTIO_BLK_IRQ_CPU`] and this machine's request size.
    /// (Other combinations are devices too: a multi-queue virtio-blk has a vector per CPU.)
    pub fn for_device(completion: Completion) -> Self {
        match completion {
            Completion::PerRequest => Self::DEFAULT,
            Completion::WhenQueueEmpty => Self {
                completion,
                irq: CompletionIrq::OneVector(CompletionIrq::VIRTIO_BLK_IRQ_CPU),
                max_request_bytes: Self::VIRTIO_BLK_MAX_REQUEST_BYTES,
                ..Self::DEFAULT
            },
        }
    }

    /// ns to transfer `bytes`.
    pub fn transfer_ns(&self, bytes: u64) -> u64 {
        (bytes as f64 * 1e9 / self.bandwidth).ceil() as u64
    }
}

/// A request in flight: when it completes and on which CPU's interrupt.
#[derive(Debug)]
pub struct InFlight {
    /// Completion time (ns).
    pub done_ns: u64,
    /// The CPU the completion interrupt comes in on ([`CompletionIrq::cpu`] of the submitter).
    pub cpu: CpuId,
    /// The request's bios, their data already transferred (a read's pages filled).
    #[allow(clippy::vec_box)]
    pub bios: Vec<Box<Bio>>,
}

/// The device: media contents, the queue's busy time, the bios in flight.
#[derive(Debug, Default)]
pub struct NvmeDevice {
    model: Option<NvmeModel>,
    /// 4 KiB blocks by block number; sparse.
    blocks: HashMap<u64, Box<[u8; 4096]>>,
    /// When the media is free again (ns).
    busy_until: u64,
    /// In flight, by (completion time, submission number).
    inflight: BTreeMap<(u64, u64), InFlight>,
    submitted: u64,
    /// Bytes read from / written to the media.
    pub bytes_read: u64,
    /// Bytes written to the media.
    pub bytes_written: u64,
}

impl NvmeDevice {
    /// An empty device of `model`'s speed.
    pub fn new(model: NvmeModel) -> Self {
        Self {
            model: Some(model),
            ..Self::default()
        }
    }

    fn model(&self) -> NvmeModel {
        self.model.unwrap_or(NvmeModel::DEFAULT)
    }

    /// `submit_bio()` of `bios` at `now_ns` from `cpu`, under one plug: contiguous bios of the
    /// same direction merge into requests. Reads are filled from the media, writes stored, when
    /// the transfer is scheduled (the data path is not what is timed). Returns the requests'
    /// completion times.
    #[allow(clippy::vec_box)]
    pub fn submit_plugged(&mut self, bios: Vec<Box<Bio>>, cpu: CpuId, now_ns: u64) -> Vec<u64> {
        let mut done = Vec::new();
        let mut req: Vec<Box<Bio>> = Vec::new();
        let mut req_bytes = 0u64;
        for bio in bios {
            let bytes = Self::bio_bytes(&bio);
            let merges = req.last().is_some_and(|last| {
                last.op() == bio.op()
                    && last.bi_iter.bi_sector + Self::bio_bytes(last) / SECTOR_SIZE
                        == bio.bi_iter.bi_sector
                    && req_bytes + bytes <= self.model().max_request_bytes
            });
            if !merges && !req.is_empty() {
                done.push(self.issue(std::mem::take(&mut req), req_bytes, cpu, now_ns));
                req_bytes = 0;
            }
            req_bytes += bytes;
            req.push(bio);
        }
        if !req.is_empty() {
            done.push(self.issue(req, req_bytes, cpu, now_ns));
        }
        done
    }

    /// One bio on its own.
    pub fn submit(&mut self, bio: Box<Bio>, cpu: CpuId, now_ns: u64) -> u64 {
        let bytes = Self::bio_bytes(&bio);
        self.issue(vec![bio], bytes, cpu, now_ns)
    }

    /// The bytes `bio` moves: its `bi_size`, or its data for a bio built with buffers only.
    pub fn bio_bytes(bio: &Bio) -> u64 {
        u64::from(bio.bi_iter.bi_size).max(bio.data_len() as u64)
    }

    #[allow(clippy::vec_box)]
    fn issue(&mut self, mut bios: Vec<Box<Bio>>, bytes: u64, cpu: CpuId, now_ns: u64) -> u64 {
        let per_busy_period = self.model().completion == Completion::WhenQueueEmpty
            && !cfg!(feature = "bug-virtio-blk-completes-per-request");
        // A virtio-blk request posted while the VMM still works through the queue is popped in
        // the same loop, right after the one before it: no notification, no command latency.
        let joins = per_busy_period && now_ns < self.busy_until;
        let start = if joins {
            self.busy_until
        } else {
            now_ns
                .saturating_add(self.model().latency_ns)
                .max(self.busy_until)
        };
        let done = start + self.model().transfer_ns(bytes);
        if joins {
            // Every request of the busy period so far ends at `busy_until`; it now ends with
            // this one (an earlier period that ended but is not reaped yet keeps its time).
            let old = self.busy_until;
            let pass: Vec<(u64, u64)> = self
                .inflight
                .range((old, 0)..=(old, u64::MAX))
                .map(|(k, _)| *k)
                .collect();
            for key in pass {
                let mut f = self.inflight.remove(&key).expect("listed above");
                f.done_ns = done;
                self.inflight.insert((done, key.1), f);
            }
        }
        self.busy_until = done;
        for bio in bios.iter_mut() {
            self.transfer(bio);
        }
        self.submitted += 1;
        self.inflight.insert(
            (done, self.submitted),
            InFlight {
                done_ns: done,
                cpu: self.model().irq.cpu(cpu),
                bios,
            },
        );
        done
    }

    fn transfer(&mut self, bio: &mut Bio) {
        let first = bio.bi_iter.bi_sector * SECTOR_SIZE;
        if bio.op() == ReqOp::Write {
            let data = bio.data();
            for (i, chunk) in data.chunks(4096).enumerate() {
                self.store(first + i as u64 * 4096, chunk);
            }
            self.bytes_written += data.len() as u64;
        } else {
            let mut off = first;
            for v in bio.bi_io_vec.iter_mut() {
                if v.data.is_empty() {
                    // A segment without a buffer stands for one page (the folio's).
                    v.data = vec![0; 4096];
                }
                let len = v.data.len();
                let mut filled = 0;
                while filled < len {
                    let n = (4096 - (off % 4096) as usize).min(len - filled);
                    self.load(off, &mut v.data[filled..filled + n]);
                    filled += n;
                    off += n as u64;
                }
            }
            self.bytes_read += Self::bio_bytes(bio);
        }
    }

    fn store(&mut self, off: u64, chunk: &[u8]) {
        let (blk, at) = (off / 4096, (off % 4096) as usize);
        let b = self.blocks.entry(blk).or_insert_with(|| {
            let mut page = Box::new([0u8; 4096]);
            page_pattern(blk, 0, &mut page[..]);
            page
        });
        let n = chunk.len().min(4096 - at);
        b[at..at + n].copy_from_slice(&chunk[..n]);
        if n < chunk.len() {
            self.store(off + n as u64, &chunk[n..]);
        }
    }

    fn load(&self, off: u64, out: &mut [u8]) {
        let (blk, at) = (off / 4096, (off % 4096) as usize);
        match self.blocks.get(&blk) {
            Some(b) => out.copy_from_slice(&b[at..at + out.len()]),
            None => {
                let mut page = [0u8; 4096];
                page_pattern(blk, 0, &mut page);
                out.copy_from_slice(&page[at..at + out.len()]);
            }
        }
    }

    /// The media's bytes at `off` (for verification).
    pub fn read_media(&self, off: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        let mut done = 0;
        while done < len {
            let o = off + done as u64;
            let n = (4096 - (o % 4096) as usize).min(len - done);
            self.load(o, &mut out[done..done + n]);
            done += n;
        }
        out
    }

    /// When the next bio completes, if any is in flight.
    pub fn next_completion(&self) -> Option<u64> {
        self.inflight.keys().next().map(|k| k.0)
    }

    /// Takes every bio that has completed by `now_ns`, oldest first.
    pub fn complete_until(&mut self, now_ns: u64) -> Vec<InFlight> {
        let later = self.inflight.split_off(&(now_ns + 1, 0));
        let done = std::mem::replace(&mut self.inflight, later);
        done.into_values().collect()
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_read_back_and_time_is_bandwidth_plus_latency() {
        let mut d = NvmeDevice::new(NvmeModel {
            bandwidth: 4096.0 * 1e6, // one page per µs
            latency_ns: 10_000,
            max_request_bytes: 8192,
            completion: Completion::PerRequest,
            irq: CompletionIrq::SubmittingCpu,
        });
        let w = Bio::new(1, ReqOp::Write, 8).with_data(vec![7; 8192]);
        assert_eq!(d.submit(w, CpuId(0), 0), 10_000 + 2_000);
        let mut r = Bio::new(2, ReqOp::Read, 8);
        r.add_data(vec![0; 4096]);
        r.add_data(vec![0; 4096]);
        // Queued behind the write: the media is busy until 12 µs.
        assert_eq!(d.submit(r, CpuId(1), 1_000), 14_000);
        assert_eq!(d.next_completion(), Some(12_000));
        assert_eq!(d.complete_until(12_000).len(), 1);
        let done = d.complete_until(20_000);
        assert_eq!(done[0].cpu, CpuId(1));
        assert_eq!(done[0].bios[0].data(), vec![7; 8192]);
        assert_eq!(d.read_media(4096 + 100, 10), vec![7; 10]);
        let mut p0 = [0u8; 4096];
        page_pattern(0, 0, &mut p0);
        assert_eq!(
            d.read_media(0, 4),
            p0[..4].to_vec(),
            "never written: pass 0"
        );
        assert_eq!(d.in_flight(), 0);
        // Under a plug, contiguous writes merge up to 8 KiB: three 4 KiB bios, two requests.
        let bios = (0..3)
            .map(|i| Bio::new(10 + i, ReqOp::Write, 100 + 8 * i).with_data(vec![1; 4096]))
            .collect();
        let t = d.submit_plugged(bios, CpuId(0), 100_000);
        assert_eq!(t, vec![112_000, 113_000]);
        let done = d.complete_until(200_000);
        assert_eq!(
            done.iter().map(|r| r.bios.len()).collect::<Vec<_>>(),
            vec![2, 1]
        );
    }

    /// Firecracker's `Sync` engine: a request posted while the device works joins the busy
    /// period (popped in the same loop, no command latency) and the period's requests all
    /// complete when it ends; one posted after it (even at the instant it ends) starts a period
    /// of its own, and an ended period not yet reaped keeps its time. The same requests on NVMe
    /// complete one by one.
    #[test]
    #[cfg_attr(feature = "bug-virtio-blk-completes-per-request", should_panic)]
    fn on_virtio_blk_a_pass_completes_when_the_queue_is_empty() {
        let model = |completion| NvmeModel {
            bandwidth: 4096.0 * 1e6, // one page per µs
            latency_ns: 1_000,
            max_request_bytes: 4096,
            ..NvmeModel::for_device(completion)
        };
        let write = |id, block: u64| Bio::new(id, ReqOp::Write, block * 8).with_data(vec![1; 4096]);
        let times = |d: &mut NvmeDevice| {
            let mut t = Vec::new();
            while let Some(n) = d.next_completion() {
                t.extend(d.complete_until(n).iter().map(|f| f.done_ns));
            }
            t
        };
        let mut nvme = NvmeDevice::new(model(Completion::PerRequest));
        let mut virtio = NvmeDevice::new(model(Completion::WhenQueueEmpty));
        for d in [&mut nvme, &mut virtio] {
            // Two at 0; one at 3.5 µs, after the first period; one at 4 µs, during the second.
            d.submit(write(1, 0), CpuId(0), 0);
            d.submit(write(2, 1), CpuId(0), 0);
            d.submit(write(3, 2), CpuId(1), 3_500);
            d.submit(write(4, 3), CpuId(1), 4_000);
        }
        // NVMe: 1-2, 2-3 µs; 4.5-5.5, 5.5-6.5 µs (each with its command latency, queued).
        assert_eq!(times(&mut nvme), vec![2_000, 3_000, 5_500, 6_500]);
        // virtio-blk: 1-2, 2-3 µs (the second popped at once); 4.5-5.5, 5.5-6.5 µs.
        assert_eq!(times(&mut virtio), vec![3_000, 3_000, 6_500, 6_500]);
        // A period ends at 12 µs; at that instant, before it is reaped, two more arrive: the
        // first starts a period of its own (13-14 µs), the second joins it (14-15 µs).
        virtio.submit(write(5, 4), CpuId(0), 10_000); // 11-12 µs
        virtio.submit(write(6, 5), CpuId(0), 12_000);
        virtio.submit(write(7, 6), CpuId(0), 12_000);
        assert_eq!(times(&mut virtio), vec![12_000, 15_000, 15_000]);
        assert_eq!(
            virtio.read_media(3 * 4096, 4),
            vec![1; 4],
            "the data is there"
        );
        assert_eq!(
            Completion::parse("virtio-blk"),
            Ok(Completion::WhenQueueEmpty)
        );
        assert_eq!(
            Completion::parse(Completion::PerRequest.name()),
            Ok(Completion::PerRequest)
        );
        assert!(Completion::parse("virtio")
            .unwrap_err()
            .contains("unknown device 'virtio'"));
    }

    /// NVMe's completion comes in on the submitter's vector; virtio-blk's on its one vector's
    /// CPU, whoever submitted, as the live trace shows (`dd` on CPU0, `virtio1-req.0` on CPU1).
    #[test]
    fn virtio_blk_completes_on_its_vectors_cpu_nvme_on_the_submitters() {
        let write = |id, block: u64| Bio::new(id, ReqOp::Write, block * 8).with_data(vec![1; 4096]);
        for (model, want) in [
            (NvmeModel::DEFAULT, [CpuId(0), CpuId(1)]),
            (
                NvmeModel::for_device(Completion::WhenQueueEmpty),
                [CpuId(1), CpuId(1)],
            ),
            (
                NvmeModel {
                    irq: CompletionIrq::OneVector(CpuId(0)),
                    ..NvmeModel::for_device(Completion::WhenQueueEmpty)
                },
                [CpuId(0), CpuId(0)],
            ),
        ] {
            let mut d = NvmeDevice::new(model);
            d.submit(write(1, 0), CpuId(0), 0);
            d.submit(write(2, 100), CpuId(1), 1_000_000);
            let cpus: Vec<CpuId> = d
                .complete_until(1_000_000_000)
                .iter()
                .map(|f| f.cpu)
                .collect();
            assert_eq!(cpus, want, "{model:?}");
        }
        assert_eq!(
            NvmeModel::for_device(Completion::WhenQueueEmpty).irq.name(),
            "virtio1-req.0"
        );
    }
}
