//! The block layer model: `block/bio.c`, `include/linux/bio.h`, `include/linux/blk_types.h`,
//! `block/blk-core.c`'s status table and the block tracepoints.

mod bio;
mod bio_alloc_cache;
mod bio_list;
pub mod blk_core;
pub mod blk_merge;
pub mod blk_mq;
pub mod blk_plug;
mod blk_status;
mod blk_types;
pub mod blk_wbt;
pub mod complete_in_task;
pub mod fops;
pub mod partition;
pub mod trace;

pub use bio::{
    bio_chain, bio_endio, bio_endio_ref, bio_endio_status, bio_in_atomic, bio_inc_remaining,
    bio_io_error, bio_wouldblock_error, bvec_alloc, fs_bio_set, BioRef, BioSet, BIO_INLINE_VECS,
    BIO_MAX_VECS, BIO_POOL_SIZE, BIO_SLAB, BVEC_SLAB,
};
pub use bio_alloc_cache::{bio_put, BioAllocCache, ALLOC_CACHE_MAX, ALLOC_CACHE_THRESHOLD};
pub use bio_list::{BioChain, BioList, BioListIter};
pub use blk_core::{
    submit_bio_noacct, submit_bio_noacct_nocheck, BlockDriver, QueueLimits, Submission,
};
pub use blk_status::*;
pub use blk_types::{
    BiPrivate, Bio, BioEndIo, BioEndIoFn, BioFlag, BioVec, BlkOpf, BvecIter, ChainShared, ReqFlags,
    ReqOp, Rwbs, BIO_FLAG_LAST, RWBS_LEN, SECTOR_SHIFT, SECTOR_SIZE,
};
