//! Real files under simulated block devices: the backing file of the loop driver
//! (`lo->lo_backing_file`: preadv2/pwritev2 with `RWF_*` flags, `cachestat(2)`), aligned buffers
//! for `O_DIRECT`, an io_uring engine for asynchronous completions, and the loop driver's
//! [`LoopBacking`](bio_core::drivers::block::loop_drv::LoopBacking) over a real file, and
//! temporary files removed also on Ctrl-C ([`cleanup`]), the free-space check ([`space`]), and a
//! real loop device of the running kernel to compare with ([`kernel_loop`]), and the global
//! allocator that starts whole-page buffers on a page boundary ([`page_alloc`]).

pub mod aligned;
pub mod backing;
pub mod cleanup;
pub mod kernel_loop;
pub mod loop_file;
pub mod page_alloc;
pub mod space;
pub mod uring;
pub mod uring_cpu;
