//! The filesystem side of the page cache: the block device's address-space operations with and
//! without buffer heads (`fs/buffer.c` + `fs/mpage.c`, `fs/iomap/`), where the series sets
//! `BIO_COMPLETE_IN_TASK` (patches 2/4 and 3/4), and XFS's own ioend workqueue completion
//! (`fs/xfs/xfs_aops.c`) that patch 2/4 replaces; and freeze protection (`fs/super.c`,
//! [`super_block`]).

pub mod buffer;
pub mod fs_writeback;
pub mod iomap;
pub mod super_block;
pub mod xfs_aops;
