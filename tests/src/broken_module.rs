//! A deliberately broken module: the v6-llist example (bio-sim/examples/v6_llist) with v6's
//! online callback, which re-enables the work without requeueing it (finding 1's bug). Every
//! other function is the example's, so this is its buggy twin by one function: a hotplug rollback
//! after `down_prep` leaves a bio deferred while the work was disabled on the list, and nothing
//! ever queues the work for it. `explore`, the loom rollback model (model d) and the proptest
//! hotplug-rollback machine must each catch it (tests/tests/own_modules.rs,
//! tests/tests/loom_batcher.rs, tests/tests/hotplug_rollback.rs).

use crate::v6_llist::{BioComplete, V6Llist};
use bio_core::block::complete_in_task::module::prelude::*;

/// v6's online callback: the enable alone.
///
/// ```c
/// static int bio_complete_batch_cpu_online(unsigned int cpu)
/// {
///         enable_delayed_work(&per_cpu(bio_complete_batch, cpu).work);
///         return 0;
/// }
/// ```
pub fn bio_complete_batch_cpu_online(m: &BioComplete, cx: &Cpu, cpu: CpuId) -> Result<(), Errno> {
    enable_delayed_work(per_cpu_ptr(&m.batches, cpu).work, cx);
    Ok(())
}

/// The broken twin of the v6-llist module.
pub static MODULE: V6Llist = V6Llist::new(
    "v6-llist-no-requeue",
    "BROKEN on purpose: v6-llist whose online callback does not requeue (finding 1)",
    bio_complete_batch_cpu_online,
);
