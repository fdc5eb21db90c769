//! `enum wq_flags` of `include/linux/workqueue.h` and the checks of `alloc_workqueue()`.

use super::{Workqueue, WqInfo};
use crate::kernel::Kernel;
use crate::sync::UntrackedArc;
use std::fmt;

/// `WQ_*` flags.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WqFlags(pub u32);

/// `WQ_UNBOUND`: not bound to any CPU.
pub const WQ_UNBOUND: WqFlags = WqFlags(1 << 1);
/// `WQ_MEM_RECLAIM`: may be used for memory reclaim, so it has a rescuer thread.
pub const WQ_MEM_RECLAIM: WqFlags = WqFlags(1 << 3);
/// `WQ_HIGHPRI`: high priority.
pub const WQ_HIGHPRI: WqFlags = WqFlags(1 << 4);
/// `WQ_PERCPU`: bound to a specific CPU, the explicit complement of `WQ_UNBOUND`
/// (930c2ea566af, "workqueue: Add new WQ_PERCPU flag").
pub const WQ_PERCPU: WqFlags = WqFlags(1 << 8);

impl WqFlags {
    /// Whether all flags of `other` are set.
    pub fn contains(self, other: WqFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Per-CPU behaviour comes from the absence of `WQ_UNBOUND`.
    pub fn is_percpu(self) -> bool {
        !self.contains(WQ_UNBOUND)
    }
}

impl std::ops::BitOr for WqFlags {
    type Output = WqFlags;
    fn bitor(self, rhs: WqFlags) -> WqFlags {
        WqFlags(self.0 | rhs.0)
    }
}

impl fmt::Debug for WqFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names = Vec::new();
        for (flag, name) in [
            (WQ_UNBOUND, "WQ_UNBOUND"),
            (WQ_MEM_RECLAIM, "WQ_MEM_RECLAIM"),
            (WQ_HIGHPRI, "WQ_HIGHPRI"),
            (WQ_PERCPU, "WQ_PERCPU"),
        ] {
            if self.contains(flag) {
                names.push(name);
            }
        }
        f.write_str(&if names.is_empty() {
            "0".to_owned()
        } else {
            names.join("|")
        })
    }
}

/// Why `alloc_workqueue()` refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WqError {
    /// `WQ_PERCPU` and `WQ_UNBOUND` are complements.
    #[error("alloc_workqueue(\"{0}\"): WQ_PERCPU and WQ_UNBOUND are mutually exclusive")]
    PercpuAndUnbound(String),
    /// Flag bits biosim does not model.
    #[error("alloc_workqueue(\"{name}\"): unsupported flag bits {bits:#x}")]
    UnknownFlags {
        /// The workqueue.
        name: String,
        /// The unknown bits.
        bits: u32,
    },
    /// `max_active` beyond `WQ_MAX_ACTIVE` (2048).
    #[error("alloc_workqueue(\"{name}\"): max_active {max_active} is out of range 0..=2048")]
    MaxActive {
        /// The workqueue.
        name: String,
        /// What was asked.
        max_active: u32,
    },
}

/// `WQ_MAX_ACTIVE`.
pub const WQ_MAX_ACTIVE: u32 = 2048;

impl Kernel {
    /// `alloc_workqueue(name, flags, max_active)`. `max_active == 0` selects the default.
    pub fn alloc_workqueue(
        &self,
        name: &str,
        flags: WqFlags,
        max_active: u32,
    ) -> Result<Workqueue, WqError> {
        let known = WQ_UNBOUND | WQ_MEM_RECLAIM | WQ_HIGHPRI | WQ_PERCPU;
        if flags.0 & !known.0 != 0 {
            return Err(WqError::UnknownFlags {
                name: name.to_owned(),
                bits: flags.0 & !known.0,
            });
        }
        if flags.contains(WQ_PERCPU) && flags.contains(WQ_UNBOUND) {
            return Err(WqError::PercpuAndUnbound(name.to_owned()));
        }
        if max_active > WQ_MAX_ACTIVE {
            return Err(WqError::MaxActive {
                name: name.to_owned(),
                max_active,
            });
        }
        let info = UntrackedArc::new(WqInfo {
            name: name.to_owned(),
            flags,
            max_active,
        });
        let mut st = self.workqueues.state.lock();
        st.wqs.push(UntrackedArc::clone(&info));
        Ok(Workqueue {
            id: st.wqs.len() - 1,
            inner: info,
        })
    }
}
