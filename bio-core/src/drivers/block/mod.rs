//! `drivers/block/`: block drivers.

pub mod loop_drv;
