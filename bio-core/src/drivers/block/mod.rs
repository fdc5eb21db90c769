//! `drivers/block/`: block drivers.

pub mod blk_mq_trace;
pub mod loop_drv;
pub mod null_blk;
