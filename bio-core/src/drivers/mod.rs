//! `drivers/`: the device drivers biosim models.

pub mod block;
