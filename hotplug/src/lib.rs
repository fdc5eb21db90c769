//! The CPU-hotplug state machine of `kernel/cpu.c`.
