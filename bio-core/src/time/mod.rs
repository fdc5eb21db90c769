//! Time: `jiffies` (`kernel/time/jiffies.c`, `include/linux/jiffies.h`) and per-CPU timers
//! (`kernel/time/timer.c`).
//!
//! Jiffies come from a clock the runtime owns: the deterministic runtime advances them as an
//! explicit step; the threaded runtime from real time at `CONFIG_HZ`. The simulated clock starts
//! at 0 (the kernel starts 5 minutes before the wrap to catch wrap bugs; biosim's jiffies are a
//! `u64` and never wrap).

mod jiffies;
mod timer;

pub use jiffies::{jiffies_to_msecs, jiffies_to_usecs, msecs_to_jiffies};
pub(crate) use timer::{calc_wheel_index, register_hotplug_states, TimerAction, Timers};
pub use timer::{TimerFn, TimerList};
