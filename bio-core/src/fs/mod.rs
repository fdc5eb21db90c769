//! The filesystem side of the task-completion series: where submitters set
//! `BIO_COMPLETE_IN_TASK` (`fs/buffer.c`, patch 3/4; `fs/iomap/ioend.c`, patch 2/4).

pub mod buffer;
pub mod iomap;
