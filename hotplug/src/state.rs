//! The hotplug state space: `enum cpuhp_state` of `include/linux/cpuhotplug.h`
//! and the predicates `kernel/cpu.c` uses to decide where a state's callbacks
//! run (`cpuhp_is_ap_state()`, `cpuhp_is_atomic_state()`).
//!
//! # Numbering
//!
//! The numbers are those of a Linux 6.18 x86_64 kernel, as listed by
//! `/sys/devices/system/cpu/hotplug/states` (`shared/reference/cpuhp-states-linux-6.18.txt`).
//! Constants for states the listing names are exact; the dynamic ranges follow
//! from the first dynamic registrations in that listing (`kvmclock:setup_percpu`
//! got 61 = `CPUHP_BP_PREPARE_DYN`, `x86/kvm:online` got 192 = `CPUHP_AP_ONLINE_DYN`)
//! and the kernel's `_END = DYN + 20` / `DYN + 40`. `CPUHP_AP_ONLINE_IDLE` (145)
//! is unnamed in the listing and placed right after `CPUHP_TEARDOWN_CPU` as in the
//! enum. Keeping the kernel's numbers means `biosim states` and the sysfs
//! `state`/`target`/`fail` values read exactly like a real machine's.

use std::fmt;

/// A hotplug state number: a value of `enum cpuhp_state`
/// (`include/linux/cpuhotplug.h`). [`CPUHP_INVALID`] is -1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StateId(pub i32);

impl StateId {
    /// The raw state number.
    pub fn as_i32(self) -> i32 {
        self.0
    }

    /// Whether this is a real step of the table (`CPUHP_OFFLINE..=CPUHP_ONLINE`).
    pub fn in_table(self) -> bool {
        (CPUHP_OFFLINE.0..=CPUHP_ONLINE.0).contains(&self.0)
    }

    /// Which section of the state space this state belongs to.
    pub fn section(self) -> Section {
        if self.0 <= CPUHP_OFFLINE.0 {
            Section::Offline
        } else if self.0 <= CPUHP_BRINGUP_CPU.0 {
            Section::Prepare
        } else if self.0 <= CPUHP_AP_ONLINE.0 {
            Section::Starting
        } else if self == CPUHP_TEARDOWN_CPU {
            Section::TeardownCpu
        } else {
            Section::Online
        }
    }

    /// Whether the kernel runs this state's callbacks on the AP side (the
    /// hotplugged CPU). Models `cpuhp_is_ap_state()` in kernel/cpu.c:
    /// `state > CPUHP_BRINGUP_CPU && state != CPUHP_TEARDOWN_CPU`.
    pub fn cpuhp_is_ap_state(self) -> bool {
        self.0 > CPUHP_BRINGUP_CPU.0 && self != CPUHP_TEARDOWN_CPU
    }

    /// Whether this is a STARTING/DYING state, run with interrupts disabled on
    /// the hotplugged CPU and not allowed to fail. Models
    /// `cpuhp_is_atomic_state()` in kernel/cpu.c:
    /// `CPUHP_AP_IDLE_DEAD <= state && state < CPUHP_AP_ONLINE`.
    pub fn cpuhp_is_atomic_state(self) -> bool {
        CPUHP_AP_IDLE_DEAD.0 <= self.0 && self.0 < CPUHP_AP_ONLINE.0
    }

    /// The side that runs this state during `cpu_up()`/`cpu_down()`.
    pub fn side(self) -> Side {
        if self.cpuhp_is_ap_state() {
            Side::Ap
        } else {
            Side::Bp
        }
    }

    /// Whether this is one of the dynamic slots `CPUHP_BP_PREPARE_DYN..=_END`
    /// or `CPUHP_AP_ONLINE_DYN..=_END`.
    pub fn is_dynamic_slot(self) -> bool {
        (CPUHP_BP_PREPARE_DYN.0..=CPUHP_BP_PREPARE_DYN_END.0).contains(&self.0)
            || (CPUHP_AP_ONLINE_DYN.0..=CPUHP_AP_ONLINE_DYN_END.0).contains(&self.0)
    }
}

impl fmt::Display for StateId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<StateId> for i32 {
    fn from(s: StateId) -> i32 {
        s.0
    }
}

/// A simulated CPU number (`unsigned int cpu` in the kernel). Displays as `CPU3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct CpuId(pub u32);

impl CpuId {
    /// The CPU number as an index into per-CPU vectors.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for CpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CPU{}", self.0)
    }
}

/// The sections of `enum cpuhp_state`, in order (see `include/linux/cpuhotplug.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Section {
    /// `CPUHP_OFFLINE` (0).
    Offline,
    /// The PREPARE section, `CPUHP_CREATE_THREADS..=CPUHP_BRINGUP_CPU`: run on a
    /// control CPU (the "BP"); teardowns are the `*_DEAD` callbacks.
    Prepare,
    /// The STARTING section, `CPUHP_AP_IDLE_DEAD..=CPUHP_AP_ONLINE`: run on the
    /// hotplugged CPU with interrupts disabled; teardowns are the DYING callbacks.
    Starting,
    /// `CPUHP_TEARDOWN_CPU`: `takedown_cpu()` on the control CPU.
    TeardownCpu,
    /// The ONLINE section, `CPUHP_AP_ONLINE_IDLE..=CPUHP_ONLINE`: run in the
    /// hotplugged CPU's hotplug thread (`cpuhp/N`), task context.
    Online,
}

/// Which side of the hotplug protocol runs a state: the boot/control
/// processor ("BP") or the application processor being plugged ("AP"), the
/// `CPUHP_BP_*` / `CPUHP_AP_*` split of `enum cpuhp_state` and the
/// `cpuhp_is_ap_state()` test of `kernel/cpu.c`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// Run by the control task on another CPU (PREPARE states, `CPUHP_BRINGUP_CPU`,
    /// `CPUHP_TEARDOWN_CPU`).
    Bp,
    /// Run on the hotplugged CPU (STARTING/DYING states and the ONLINE section).
    Ap,
}

macro_rules! states {
    ($( $(#[$doc:meta])* $name:ident = $value:expr; )*) => {
        $( $(#[$doc])* pub const $name: StateId = StateId($value); )*
    };
}

states! {
    /// `CPUHP_INVALID` (-1): "no state", the cleared value of `hotplug/fail`.
    CPUHP_INVALID = -1;
    /// `CPUHP_OFFLINE` (0), "offline": the state of a CPU that is down.
    CPUHP_OFFLINE = 0;
    /// `CPUHP_CREATE_THREADS`, "threads:prepare" (`smpboot_create_threads()`), `cant_stop`.
    CPUHP_CREATE_THREADS = 1;
    /// `CPUHP_MM_WRITEBACK_DEAD`, "mm/writeback:dead".
    CPUHP_MM_WRITEBACK_DEAD = 12;
    /// `CPUHP_MM_VMSTAT_DEAD`, "mm/vmstat:dead" (`vmstat_cpu_dead()`, mm/vmstat.c).
    CPUHP_MM_VMSTAT_DEAD = 13;
    /// `CPUHP_SOFTIRQ_DEAD`, "softirq:dead".
    CPUHP_SOFTIRQ_DEAD = 14;
    /// `CPUHP_IRQ_POLL_DEAD`, "irq_poll:dead".
    CPUHP_IRQ_POLL_DEAD = 19;
    /// `CPUHP_BLOCK_SOFTIRQ_DEAD`, "block/softirq:dead" (block/blk-mq.c).
    CPUHP_BLOCK_SOFTIRQ_DEAD = 20;
    /// `CPUHP_BIO_DEAD`, "block/bio:dead" (`bio_cpu_dead()`, block/bio.c).
    CPUHP_BIO_DEAD = 21;
    /// `CPUHP_BLK_MQ_DEAD`, "block/mq:dead" (block/blk-mq.c).
    CPUHP_BLK_MQ_DEAD = 24;
    /// `CPUHP_PAGE_ALLOC`, "mm/page_alloc:pcp".
    CPUHP_PAGE_ALLOC = 30;
    /// `CPUHP_RANDOM_PREPARE`, "random:prepare".
    CPUHP_RANDOM_PREPARE = 35;
    /// `CPUHP_WORKQUEUE_PREP`, "workqueue:prepare" (`workqueue_prepare_cpu()`).
    CPUHP_WORKQUEUE_PREP = 36;
    /// `CPUHP_HRTIMERS_PREPARE`, "hrtimers:prepare".
    CPUHP_HRTIMERS_PREPARE = 38;
    /// `CPUHP_SMPCFD_PREPARE`, "smpcfd:prepare".
    CPUHP_SMPCFD_PREPARE = 40;
    /// `CPUHP_RCUTREE_PREP`, "RCU/tree:prepare".
    CPUHP_RCUTREE_PREP = 43;
    /// `CPUHP_TIMERS_PREPARE`, "timers:prepare" (`timers_prepare_cpu()` /
    /// `timers_dead_cpu()`, which migrates the dead CPU's timers).
    CPUHP_TIMERS_PREPARE = 58;
    /// `CPUHP_TMIGR_PREPARE`, "tmigr:prepare".
    CPUHP_TMIGR_PREPARE = 59;
    /// `CPUHP_BP_PREPARE_DYN`: first dynamic PREPARE slot; pass it to
    /// `cpuhp_setup_state*()` to allocate one.
    CPUHP_BP_PREPARE_DYN = 61;
    /// `CPUHP_BP_PREPARE_DYN_END` = `CPUHP_BP_PREPARE_DYN + 20`: last dynamic PREPARE slot.
    CPUHP_BP_PREPARE_DYN_END = 81;
    /// `CPUHP_BP_KICK_AP`, "cpu:kick_ap" (`cpuhp_kick_ap_alive()`).
    CPUHP_BP_KICK_AP = 82;
    /// `CPUHP_BRINGUP_CPU`, "cpu:bringup" (`bringup_cpu()` / `finish_cpu()`), `cant_stop`.
    CPUHP_BRINGUP_CPU = 83;
    /// `CPUHP_AP_IDLE_DEAD`, "idle:dead": first STARTING state; where a dying CPU parks.
    CPUHP_AP_IDLE_DEAD = 84;
    /// `CPUHP_AP_OFFLINE`, "ap:offline", `cant_stop`.
    CPUHP_AP_OFFLINE = 85;
    /// `CPUHP_AP_CACHECTRL_STARTING`, "x86/cachectrl:starting".
    CPUHP_AP_CACHECTRL_STARTING = 86;
    /// `CPUHP_AP_SCHED_STARTING`, "sched:starting" (`sched_cpu_starting()` / `sched_cpu_dying()`).
    CPUHP_AP_SCHED_STARTING = 87;
    /// `CPUHP_AP_RCUTREE_DYING`, "RCU/tree:dying".
    CPUHP_AP_RCUTREE_DYING = 88;
    /// `CPUHP_AP_SMPCFD_DYING`, "smpcfd:dying".
    CPUHP_AP_SMPCFD_DYING = 138;
    /// `CPUHP_AP_HRTIMERS_DYING`, "hrtimers:dying".
    CPUHP_AP_HRTIMERS_DYING = 139;
    /// `CPUHP_AP_TICK_DYING`, "tick:dying".
    CPUHP_AP_TICK_DYING = 140;
    /// `CPUHP_AP_ONLINE`, "ap:online": end of the STARTING section; the CPU
    /// joins `cpu_online_mask` here on the way up.
    CPUHP_AP_ONLINE = 143;
    /// `CPUHP_TEARDOWN_CPU`, "cpu:teardown" (`takedown_cpu()`), `cant_stop`; the CPU
    /// leaves `cpu_online_mask` when its teardown runs.
    CPUHP_TEARDOWN_CPU = 144;
    /// `CPUHP_AP_ONLINE_IDLE`: where `cpuhp_online_idle()` puts a freshly booted CPU.
    CPUHP_AP_ONLINE_IDLE = 145;
    /// `CPUHP_AP_KVM_ONLINE`, "kvm/cpu:online".
    CPUHP_AP_KVM_ONLINE = 147;
    /// `CPUHP_AP_SCHED_WAIT_EMPTY`, "sched:waitempty".
    CPUHP_AP_SCHED_WAIT_EMPTY = 148;
    /// `CPUHP_AP_SMPBOOT_THREADS`, "smpboot/threads:online".
    CPUHP_AP_SMPBOOT_THREADS = 149;
    /// `CPUHP_AP_IRQ_AFFINITY_ONLINE`, "irq/affinity:online".
    CPUHP_AP_IRQ_AFFINITY_ONLINE = 150;
    /// `CPUHP_AP_BLK_MQ_ONLINE`, "block/mq:online".
    CPUHP_AP_BLK_MQ_ONLINE = 151;
    /// `CPUHP_AP_PERF_ONLINE`, "perf:online".
    CPUHP_AP_PERF_ONLINE = 154;
    /// `CPUHP_AP_TMIGR_ONLINE`, "tmigr:online".
    CPUHP_AP_TMIGR_ONLINE = 185;
    /// `CPUHP_AP_WATCHDOG_ONLINE`, "lockup_detector:online".
    CPUHP_AP_WATCHDOG_ONLINE = 186;
    /// `CPUHP_AP_WORKQUEUE_ONLINE`, "workqueue:online" (`workqueue_online_cpu()` /
    /// `workqueue_offline_cpu()`, which unbinds the per-CPU workers).
    CPUHP_AP_WORKQUEUE_ONLINE = 187;
    /// `CPUHP_AP_RANDOM_ONLINE`, "random:online".
    CPUHP_AP_RANDOM_ONLINE = 188;
    /// `CPUHP_AP_RCUTREE_ONLINE`, "RCU/tree:online".
    CPUHP_AP_RCUTREE_ONLINE = 189;
    /// `CPUHP_AP_KTHREADS_ONLINE`, "kthreads:online".
    CPUHP_AP_KTHREADS_ONLINE = 190;
    /// `CPUHP_AP_BASE_CACHEINFO_ONLINE`, "base/cacheinfo:online".
    CPUHP_AP_BASE_CACHEINFO_ONLINE = 191;
    /// `CPUHP_AP_ONLINE_DYN`: first dynamic ONLINE slot; pass it to
    /// `cpuhp_setup_state*()` to allocate one.
    CPUHP_AP_ONLINE_DYN = 192;
    /// `CPUHP_AP_ONLINE_DYN_END` = `CPUHP_AP_ONLINE_DYN + 40`: last dynamic ONLINE slot.
    CPUHP_AP_ONLINE_DYN_END = 232;
    /// `CPUHP_AP_X86_HPET_ONLINE`.
    CPUHP_AP_X86_HPET_ONLINE = 233;
    /// `CPUHP_AP_X86_KVM_CLK_ONLINE`.
    CPUHP_AP_X86_KVM_CLK_ONLINE = 234;
    /// `CPUHP_AP_ACTIVE`, "sched:active" (`sched_cpu_activate()` / `sched_cpu_deactivate()`).
    CPUHP_AP_ACTIVE = 235;
    /// `CPUHP_ONLINE`, "online": the state of a fully online CPU.
    CPUHP_ONLINE = 236;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering_matches_the_kernel_enum() {
        let order = [
            CPUHP_OFFLINE,
            CPUHP_CREATE_THREADS,
            CPUHP_MM_VMSTAT_DEAD,
            CPUHP_BLOCK_SOFTIRQ_DEAD,
            CPUHP_BIO_DEAD,
            CPUHP_BLK_MQ_DEAD,
            CPUHP_WORKQUEUE_PREP,
            CPUHP_RCUTREE_PREP,
            CPUHP_TIMERS_PREPARE,
            CPUHP_TMIGR_PREPARE,
            CPUHP_BP_PREPARE_DYN,
            CPUHP_BP_PREPARE_DYN_END,
            CPUHP_BP_KICK_AP,
            CPUHP_BRINGUP_CPU,
            CPUHP_AP_IDLE_DEAD,
            CPUHP_AP_OFFLINE,
            CPUHP_AP_SCHED_STARTING,
            CPUHP_AP_RCUTREE_DYING,
            CPUHP_AP_TICK_DYING,
            CPUHP_AP_ONLINE,
            CPUHP_TEARDOWN_CPU,
            CPUHP_AP_ONLINE_IDLE,
            CPUHP_AP_WORKQUEUE_ONLINE,
            CPUHP_AP_RCUTREE_ONLINE,
            CPUHP_AP_ONLINE_DYN,
            CPUHP_AP_ONLINE_DYN_END,
            CPUHP_AP_ACTIVE,
            CPUHP_ONLINE,
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(CPUHP_BP_PREPARE_DYN_END.0, CPUHP_BP_PREPARE_DYN.0 + 20);
        assert_eq!(CPUHP_AP_ONLINE_DYN_END.0, CPUHP_AP_ONLINE_DYN.0 + 40);
    }

    #[test]
    fn predicates() {
        assert!(!CPUHP_BRINGUP_CPU.cpuhp_is_ap_state());
        assert!(!CPUHP_TEARDOWN_CPU.cpuhp_is_ap_state());
        assert!(CPUHP_AP_IDLE_DEAD.cpuhp_is_ap_state());
        assert!(CPUHP_AP_ONLINE_DYN.cpuhp_is_ap_state());
        assert!(CPUHP_AP_IDLE_DEAD.cpuhp_is_atomic_state());
        assert!(CPUHP_AP_TICK_DYING.cpuhp_is_atomic_state());
        assert!(!CPUHP_AP_ONLINE.cpuhp_is_atomic_state());
        assert!(!CPUHP_BRINGUP_CPU.cpuhp_is_atomic_state());
        assert_eq!(CPUHP_BIO_DEAD.section(), Section::Prepare);
        assert_eq!(CPUHP_AP_SCHED_STARTING.section(), Section::Starting);
        assert_eq!(CPUHP_TEARDOWN_CPU.section(), Section::TeardownCpu);
        assert_eq!(CPUHP_AP_ACTIVE.section(), Section::Online);
        assert_eq!(CPUHP_AP_ONLINE_DYN.side(), Side::Ap);
        assert_eq!(CPUHP_BP_PREPARE_DYN.side(), Side::Bp);
        assert_eq!(CpuId(3).to_string(), "CPU3");
    }
}
