//! The machines the seed's experiment can run on (`biosim bench dontcache --preset ... --machine
//! NAME`): what a run takes from the hardware and the booted kernel, named once, so that "the
//! seed's experiment on this machine" is one flag rather than a list a reader must keep in sync.
//!
//! A machine sets the device and where its interrupt comes in, whether the guest reports free
//! pages to its host (mm/page_reporting.c), the memory controller's hierarchy and `CONFIG_HZ`,
//! and its memory: the seed's reads went over "a 45GB range (~2x RAM)" and its cover letter names
//! a memcg only for the writes, so on a named machine the `seed-reads` preset's cache limit is
//! that machine's RAM (the preset's own 256 MiB stands for a RAM scaled down). The page cache of
//! a real machine never reaches `MemTotal` (watermarks, the kernel's own memory); that does not
//! matter while a run caches a fraction of it, as the seed's 14 s do (6.1 GB of 24105 MiB).
//! `seed-writes` keeps its memcg: the seed set that one.
//! `--limit`, `--irq-cpu` and `--device-gbps` still apply on top.

use super::nvme_device::{Completion, NvmeModel};
use super::seed_bench::SeedBenchConfig;
use super::seed_presets::Workload;

/// A machine the seed's presets can be run on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeedMachine {
    /// `--machine NAME`.
    pub name: &'static str,
    /// What it is and where its facts come from (the header line of a run).
    pub description: &'static str,
    /// The block device under the page cache.
    pub device: NvmeModel,
    /// Free page reporting at this order (a VM guest whose balloon reports free memory).
    pub page_reporting_order: Option<u32>,
    /// The memcg on cgroup v2 (a dirty domain of its own); cgroup v1 otherwise.
    pub cgroup_v2: bool,
    /// The booted kernel's `CONFIG_HZ`.
    pub hz: u32,
    /// RAM in bytes (`MemTotal`, whole MiB): `seed-reads`' cache limit on this machine.
    pub memory_bytes: u64,
}

impl SeedMachine {
    /// The Firecracker guest the live companion (`biosim bench dontcache --live`) and the live
    /// traces of tests/data/tracefs-6.18/ were recorded on, as measured on 2026-12-05: Linux
    /// 6.18.44, 2 vCPUs, `MemTotal` 24,683,792 kB (24,105 MiB), `CONFIG_HZ=250`, cgroup v1;
    /// `vda` a one-queue virtio-blk disk whose vector `virtio1-req.0` came in on CPU1 on that
    /// boot ([`NvmeModel::for_device`] with [`Completion::WhenQueueEmpty`]); a virtio-balloon
    /// with `VIRTIO_BALLOON_F_REPORTING` (`page_reporting_order` 9 in sysfs: the command line
    /// asks for 11, which the parameter's setter refuses as above `MAX_PAGE_ORDER`, 10, so the
    /// default, `pageblock_order`, stays). Not the machine the command runs on: the run stays
    /// deterministic, the same everywhere.
    pub fn fc_guest() -> SeedMachine {
        SeedMachine {
            name: "fc-guest",
            description: "the Firecracker guest of the live companion (Linux 6.18.44, measured \
                          2026-12-05), 2 CPUs, 24105 MiB, CONFIG_HZ=250, cgroup v1, a one-queue \
                          virtio-blk disk, free page reporting",
            device: NvmeModel::for_device(Completion::WhenQueueEmpty),
            page_reporting_order: Some(bio_core::mm::page_reporting::PAGEBLOCK_ORDER),
            cgroup_v2: false,
            hz: 250,
            memory_bytes: 24_105 << 20,
        }
    }

    /// Every machine, by name.
    pub fn all() -> [SeedMachine; 1] {
        [SeedMachine::fc_guest()]
    }

    /// The machine called `name`, or an error naming the known ones.
    pub fn by_name(name: &str) -> Result<SeedMachine, String> {
        let all = SeedMachine::all();
        all.iter().find(|m| m.name == name).copied().ok_or_else(|| {
            format!(
                "unknown machine '{name}' (known: {})",
                all.map(|m| m.name).join(", ")
            )
        })
    }

    /// `cfg` run on this machine: its device, page reporting, cgroup and `CONFIG_HZ`, and for
    /// reads its RAM as the cache limit.
    pub fn apply(&self, cfg: &mut SeedBenchConfig) {
        cfg.machine = Some(*self);
        cfg.device = self.device;
        cfg.page_reporting_order = self.page_reporting_order;
        cfg.cgroup_v2 = self.cgroup_v2;
        cfg.hz = self.hz;
        if cfg.preset.workload == Workload::Reads {
            cfg.limit_bytes = self.memory_bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pagecache::nvme_device::CompletionIrq;
    use crate::pagecache::seed_presets::{SEED_READS, SEED_WRITES};

    #[test]
    fn fc_guest_is_this_machines_disk_memory_and_kernel() {
        let m = SeedMachine::by_name("fc-guest").unwrap();
        assert_eq!(m.device.completion, Completion::WhenQueueEmpty);
        assert_eq!(
            m.device.irq,
            // The literal facts of 2026-12-05, not the constants they were copied into.
            CompletionIrq::OneVector(bio_core::kernel::CpuId(1))
        );
        assert_eq!(m.device.bandwidth, NvmeModel::DEFAULT.bandwidth);
        assert_eq!(m.device.max_request_bytes, 4096 << 10);
        assert_eq!(m.page_reporting_order, Some(9));
        assert!(!m.cgroup_v2);
        assert_eq!(m.hz, 250);
        // MemTotal 24,683,792 kB, whole MiB.
        assert_eq!(m.memory_bytes, (24_683_792u64 << 10) >> 20 << 20);
        let e = SeedMachine::by_name("nvme").unwrap_err();
        assert!(e.contains("'nvme'") && e.contains("known: fc-guest"), "{e}");
    }

    #[test]
    fn a_machine_sets_the_reads_limit_to_its_ram_and_leaves_the_writers_memcg() {
        let m = SeedMachine::fc_guest();
        let mut reads = SeedBenchConfig::new(SEED_READS);
        m.apply(&mut reads);
        assert_eq!(reads.limit_bytes, m.memory_bytes);
        assert_eq!(reads.device, m.device);
        assert_eq!(reads.page_reporting_order, Some(9));
        assert_eq!(reads.machine, Some(m));
        let mut writes = SeedBenchConfig::new(SEED_WRITES);
        writes.cgroup_v2 = true;
        writes.hz = 1000;
        m.apply(&mut writes);
        assert_eq!(writes.limit_bytes, SEED_WRITES.limit_bytes);
        assert!(!writes.cgroup_v2);
        assert_eq!(writes.hz, 250);
    }
}
