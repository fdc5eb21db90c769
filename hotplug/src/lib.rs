//! The CPU-hotplug state machine of `kernel/cpu.c`, as a library the biosim
//! runtimes drive.
//!
//! - [`state`]: the numbered state space (`enum cpuhp_state`, 6.18 numbering),
//!   sections and sides.
//! - [`table`]: the default step table (`cpuhp_hp_states[]`) and its kinds of step.
//! - [`Cpuhp`] ([`cpuhp`]): per-CPU `struct cpuhp_cpu_state`, the online and
//!   dying masks, `cpuhp_setup_state*()` / `cpuhp_remove_state*()`.
//! - [`step`]: `cpu_up()` / `cpu_down()`, the stepping API and rollback.
//! - [`sysfs`]: the `state`/`target`/`fail` knobs and the `states` listing.
//! - [`invoke`]: what one callback invocation is and where it runs.
//! - [`listing`]: a table read from a live kernel (its `states` listing and a callback map).
//! - [`multi`]: multi-instance states (`cpuhp_setup_state_multi()`, instances).
//! - [`task`]: the tasks callbacks run in (`cpuhp/N`, the BP's `kworker/C:0` or writer, ...).
//! - [`trace`]: `cpuhp_enter`/`cpuhp_multi_enter`/`cpuhp_exit` tracepoints, the in-memory log,
//!   WARN/BUG values.
//! - [`tracefs`]: parsing tracefs `trace` lines, recording the model's tracepoints as such lines.
//! - [`errno`], [`error`]: typed kernel errors.
//!
//! The crate knows nothing about bios: callbacks are [`Callback<E>`] closures
//! over an environment `E` the runtime supplies. See `docs/cpu-hotplug.md`.
//!
//! ```
//! use std::sync::Arc;
//! use hotplug::*;
//!
//! let mut hp: Cpuhp<()> = Cpuhp::new(2, 2).unwrap();
//! let slot = hp
//!     .cpuhp_setup_state_nocalls(
//!         CPUHP_AP_ONLINE_DYN,
//!         "demo:online",
//!         Some(Arc::new(|_: &(), _: &Invocation| Ok(()))),
//!         Some(Arc::new(|_: &(), _: &Invocation| Err(Errno::EBUSY))),
//!     )
//!     .unwrap();
//! assert_eq!(slot, CPUHP_AP_ONLINE_DYN);
//! // The teardown refuses: the offline is rolled back and CPU1 stays online.
//! let err = hp.cpu_down(CpuId(1), CPUHP_OFFLINE, &()).unwrap_err();
//! assert_eq!(err.errno(), Errno::EBUSY);
//! assert!(hp.cpu_online(CpuId(1)));
//! assert_eq!(hp.state(CpuId(1)).unwrap(), CPUHP_ONLINE);
//! ```
#![deny(missing_docs)]

pub mod cpuhp;
pub mod errno;
pub mod error;
pub mod invoke;
pub mod listing;
pub mod multi;
pub mod state;
pub mod step;
pub mod sysfs;
pub mod table;
pub mod task;
pub mod trace;
pub mod tracefs;

pub use cpuhp::{Cpuhp, CpuhpConfig};
pub use errno::Errno;
pub use error::HotplugError;
pub use invoke::{Callback, InstanceId, Invocation, InvokeFn, Origin, RunsOn};
pub use listing::{CallbackInfo, CallbackMap, ListingError, StatesListing, StepCallbacks};
pub use state::*;
pub use step::{Executed, StepCall, StepOutcome};
pub use table::{BuiltinFns, CoreStep, StepInfo, StepKind, BUILTIN_FNS, BUILTIN_STEPS, CORE_STEPS};
pub use task::Task;
pub use trace::{LogRecord, Warning};
