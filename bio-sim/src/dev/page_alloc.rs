//! Whole pages start on a page boundary, as the kernel's do (`mm/page_alloc.c`: a bio segment's
//! `bv_page` is a page, so a segment of whole pages is page-aligned and `O_DIRECT` can use it as
//! it is).
//!
//! In this process a bio segment is a `Vec<u8>`, and malloc puts a 4 KiB block wherever it likes
//! (16-byte aligned), so every `O_DIRECT` read or write of one went through a bounce buffer: a
//! copy per I/O. [`PageAlignedAlloc`], the process's global allocator, hands out every byte
//! buffer whose size is a non-zero multiple of [`PAGE_SIZE`] on a page boundary. A `GlobalAlloc` may
//! always return memory more aligned than asked; the stronger layout is derived from the asked
//! one alone ([`page_layout`]), so `dealloc` and `realloc` see the same one. Everything else goes
//! to the system allocator unchanged.
//!
//! The io_uring backing then gives such a segment to the ring directly
//! ([`AlignedBuf::from_vec`](super::aligned::AlignedBuf::from_vec)); a segment that is not
//! aligned (a partial page, another allocator) is still bounced.

use std::alloc::{GlobalAlloc, Layout, System};

/// `PAGE_SIZE` on x86_64 (and most aarch64 kernels).
pub const PAGE_SIZE: usize = 4096;

/// The layout [`PageAlignedAlloc`] really allocates for `layout`: page-aligned when it is a byte
/// buffer (alignment 1, as a `Vec<u8>` segment) whose size is a non-zero multiple of
/// [`PAGE_SIZE`], else `layout` itself. Other types are left to malloc: a page-aligned block
/// costs glibc a split (`_int_memalign()`), and a batch of 32 completions of 128 bytes is
/// exactly a page without being a segment.
pub fn page_layout(layout: Layout) -> Layout {
    let size = layout.size();
    if size == 0 || !size.is_multiple_of(PAGE_SIZE) || layout.align() != 1 {
        return layout;
    }
    // The size is already a multiple of the alignment, so this cannot fail; fall back anyway.
    Layout::from_size_align(size, PAGE_SIZE).unwrap_or(layout)
}

/// The system allocator with whole pages page-aligned (see the [module documentation](self)).
#[derive(Debug, Default, Clone, Copy)]
pub struct PageAlignedAlloc;

// SAFETY: every block comes from `System` with `page_layout(layout)`, which is at least as
// large and as aligned as `layout`, and goes back to `System` with that same derived layout.
unsafe impl GlobalAlloc for PageAlignedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `page_layout` keeps the caller's non-zero size.
        unsafe { System.alloc(page_layout(layout)) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(page_layout(layout)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `alloc`/`alloc_zeroed`/`realloc` with this derived layout.
        unsafe { System.dealloc(ptr, page_layout(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size`, rounded up to `layout.align()`, fits isize.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let (old_real, new_real) = (page_layout(layout), page_layout(new));
        if old_real == layout && new_real == new {
            // Neither side is over-aligned: the system's realloc (possibly in place).
            // SAFETY: forwarded from the caller; `ptr` was allocated with `layout` itself.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: `new_real` has a non-zero size (the caller's `new_size` is non-zero).
        let fresh = unsafe { System.alloc(new_real) };
        if !fresh.is_null() {
            // SAFETY: both blocks are live, distinct, and at least this long.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, fresh, layout.size().min(new_size));
                System.dealloc(ptr, old_real);
            }
        }
        fresh
    }
}

/// The allocator of every binary that links bio-sim (biosim, its tests and benches).
#[global_allocator]
static GLOBAL: PageAlignedAlloc = PageAlignedAlloc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_pages_are_page_aligned_and_other_sizes_keep_their_layout() {
        for pages in [1usize, 2, 3, 16] {
            let v = vec![0xa5u8; pages * PAGE_SIZE];
            assert_eq!(v.as_ptr() as usize % PAGE_SIZE, 0, "{pages} page(s)");
            assert!(v.iter().all(|&b| b == 0xa5));
        }
        let small = Layout::from_size_align(512, 1).unwrap();
        assert_eq!(page_layout(small), small, "a partial page is left alone");
        let odd = Layout::from_size_align(PAGE_SIZE + 512, 8).unwrap();
        assert_eq!(page_layout(odd), odd);
        assert_eq!(page_layout(Layout::new::<()>()), Layout::new::<()>());
        let page = Layout::from_size_align(2 * PAGE_SIZE, 1).unwrap();
        assert_eq!(page_layout(page).align(), PAGE_SIZE);
        assert_eq!(page_layout(page).size(), 2 * PAGE_SIZE);
        // A page of anything but bytes (a batch of 32 128-byte completions) is not a segment.
        let structs = Layout::from_size_align(PAGE_SIZE, 8).unwrap();
        assert_eq!(page_layout(structs), structs);
    }

    /// A Vec growing through and out of whole-page sizes keeps its bytes (realloc between the
    /// system's layout and the page-aligned one, both ways).
    #[test]
    fn realloc_across_the_page_boundary_keeps_the_bytes() {
        let mut v: Vec<u8> = Vec::with_capacity(100);
        for i in 0..3 * PAGE_SIZE + 7 {
            v.push((i % 251) as u8);
            if v.len() == PAGE_SIZE {
                v.shrink_to_fit(); // exactly one page: page-aligned
                assert_eq!(v.as_ptr() as usize % PAGE_SIZE, 0);
            }
        }
        assert!(v.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
        v.truncate(100);
        v.shrink_to_fit(); // back to a small block
        assert!(v.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    }
}
