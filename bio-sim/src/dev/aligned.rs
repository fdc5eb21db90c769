//! Aligned I/O buffers: the userspace stand-in for the page-aligned bio segments (`struct bio_vec`
//! pages) a block driver hands to its backing file. `O_DIRECT` I/O on Linux requires the buffer
//! address, the length and the file offset to be aligned (to the device's logical block size, or
//! to what `statx(STATX_DIOALIGN)` reports, see
//! [`BackingFile::logical_block_size`](super::backing::BackingFile::logical_block_size)), so every
//! buffer the simulated devices pass to a backing file is an [`AlignedBuf`].

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The sector size every [`AlignedBuf`] length is a multiple of (`SECTOR_SIZE`, `1 << SECTOR_SHIFT`
/// in `include/linux/blk_types.h`).
pub const SECTOR_SIZE: usize = 512;

/// The default alignment of an [`AlignedBuf`]: one page (`PAGE_SIZE` on x86_64 and most
/// aarch64 kernels), which satisfies every `O_DIRECT` alignment requirement in practice.
pub const DEFAULT_ALIGNMENT: usize = 4096;

/// An owned, zero-initialised heap buffer whose start address is aligned to a power of two and
/// whose length is a multiple of [`SECTOR_SIZE`]: what `O_DIRECT` reads and writes need.
///
/// It dereferences to `[u8]`. A zero-length buffer allocates nothing. `Debug` prints the length and
/// the alignment, never the contents.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    align: usize,
}

// SAFETY: `AlignedBuf` owns its allocation exclusively (like `Box<[u8]>`); no other handle to the
// memory exists, so moving it to another thread or sharing `&AlignedBuf` is as safe as for
// `Box<[u8]>`.
unsafe impl Send for AlignedBuf {}
// SAFETY: `&AlignedBuf` only gives out `&[u8]`; mutation needs `&mut AlignedBuf`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes aligned to [`DEFAULT_ALIGNMENT`] (4096).
    ///
    /// # Panics
    ///
    /// If `len` is not a multiple of [`SECTOR_SIZE`] (512), or the allocation size overflows.
    pub fn new(len: usize) -> AlignedBuf {
        AlignedBuf::with_alignment(len, DEFAULT_ALIGNMENT)
    }

    /// A zeroed buffer of `len` bytes whose address is a multiple of `align`.
    ///
    /// # Panics
    ///
    /// If `align` is not a power of two, if `len` is not a multiple of [`SECTOR_SIZE`] (512), or if
    /// the size rounded up to `align` overflows `isize`. Use [`AlignedBuf::try_with_alignment`] to
    /// get an error instead.
    pub fn with_alignment(len: usize, align: usize) -> AlignedBuf {
        match AlignedBuf::try_with_alignment(len, align) {
            Ok(buf) => buf,
            Err(e) => panic!("AlignedBuf::with_alignment({len}, {align}): {e}"),
        }
    }

    /// Like [`AlignedBuf::with_alignment`], but a bad length or alignment is an error, not a panic.
    /// (An allocator failure still aborts through [`handle_alloc_error`], as for `Vec`.)
    pub fn try_with_alignment(len: usize, align: usize) -> Result<AlignedBuf, AlignedBufError> {
        if !align.is_power_of_two() {
            return Err(AlignedBufError::Alignment { align });
        }
        if !len.is_multiple_of(SECTOR_SIZE) {
            return Err(AlignedBufError::Length { len });
        }
        if len == 0 {
            // No allocation: a dangling pointer that is still aligned (so a zero-length O_DIRECT
            // iovec is well formed) and never dereferenced for more than zero bytes.
            let dangling = std::ptr::without_provenance_mut::<u8>(align);
            // SAFETY: `align` is a power of two, hence non-zero, so the pointer is non-null.
            let ptr = unsafe { NonNull::new_unchecked(dangling) };
            return Ok(AlignedBuf { ptr, len, align });
        }
        let layout = Layout::from_size_align(len, align)
            .map_err(|_| AlignedBufError::TooLarge { len, align })?;
        // SAFETY: `layout` has a non-zero size (len > 0 checked above).
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        Ok(AlignedBuf { ptr, len, align })
    }

    /// A buffer aligned to [`DEFAULT_ALIGNMENT`] holding a copy of `data`.
    ///
    /// # Panics
    ///
    /// If `data.len()` is not a multiple of [`SECTOR_SIZE`] (512).
    pub fn from_slice(data: &[u8]) -> AlignedBuf {
        let mut buf = AlignedBuf::new(data.len());
        buf.copy_from_slice(data);
        buf
    }

    /// The alignment of the buffer's start address.
    pub fn alignment(&self) -> usize {
        self.align
    }

    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        self
    }

    /// The buffer's bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` initialised (zeroed at allocation) bytes owned by `self`
        // (or `len == 0` and `ptr` is non-null and aligned), and the borrow is tied to `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        // SAFETY: a non-empty buffer was allocated by `alloc_zeroed` with exactly this layout
        // (the same size and alignment were validated then), and is freed only here.
        unsafe {
            dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.len, self.align),
            )
        }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        let mut copy = AlignedBuf::with_alignment(self.len, self.align);
        copy.copy_from_slice(self);
        copy
    }
}

impl PartialEq for AlignedBuf {
    /// Two buffers are equal when their contents are (the alignment is not compared).
    fn eq(&self, other: &AlignedBuf) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for AlignedBuf {}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for AlignedBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("align", &self.align)
            .finish_non_exhaustive()
    }
}

/// Why an [`AlignedBuf`] could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlignedBufError {
    /// The alignment is not a power of two.
    #[error("alignment {align} is not a power of two")]
    Alignment {
        /// The requested alignment.
        align: usize,
    },
    /// The length is not a multiple of [`SECTOR_SIZE`].
    #[error("length {len} is not a multiple of the {SECTOR_SIZE}-byte sector")]
    Length {
        /// The requested length.
        len: usize,
    },
    /// The length rounded up to the alignment overflows `isize`.
    #[error("a buffer of {len} bytes aligned to {align} is too large")]
    TooLarge {
        /// The requested length.
        len: usize,
        /// The requested alignment.
        align: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_aligned_and_sized() {
        for &(len, align) in &[
            (512, 512),
            (4096, 4096),
            (8192, 4096),
            (1 << 20, 65536),
            (512, 1),
        ] {
            let buf = AlignedBuf::with_alignment(len, align);
            assert_eq!(buf.len(), len);
            assert_eq!(buf.alignment(), align);
            assert_eq!(buf.as_ptr() as usize % align, 0, "len {len} align {align}");
            assert!(buf.iter().all(|&b| b == 0));
        }
        let buf = AlignedBuf::new(4096);
        assert_eq!(buf.alignment(), DEFAULT_ALIGNMENT);
        assert_eq!(buf.as_ptr() as usize % DEFAULT_ALIGNMENT, 0);
    }

    #[test]
    fn zero_length_allocates_nothing_and_is_aligned() {
        let buf = AlignedBuf::new(0);
        assert!(buf.is_empty());
        assert_eq!(buf.as_ptr() as usize % DEFAULT_ALIGNMENT, 0);
        let copy = buf.clone();
        assert_eq!(copy, buf);
    }

    #[test]
    fn write_read_clone_eq() {
        let mut buf = AlignedBuf::new(1024);
        buf[0] = 1;
        buf[1023] = 0xff;
        buf.as_mut_slice()[512] = 7;
        let copy = buf.clone();
        assert_eq!(copy, buf);
        assert_ne!(copy.as_ptr(), buf.as_ptr());
        assert_eq!(&copy[..2], &[1, 0]);
        assert_eq!(copy[512], 7);
        assert_eq!(copy[1023], 0xff);
        let from = AlignedBuf::from_slice(&copy);
        assert_eq!(from, copy);
    }

    #[test]
    fn bad_length_and_alignment_are_errors() {
        assert_eq!(
            AlignedBuf::try_with_alignment(100, 4096).unwrap_err(),
            AlignedBufError::Length { len: 100 }
        );
        assert_eq!(
            AlignedBuf::try_with_alignment(512, 3000).unwrap_err(),
            AlignedBufError::Alignment { align: 3000 }
        );
        assert_eq!(
            AlignedBuf::try_with_alignment(512, 0).unwrap_err(),
            AlignedBufError::Alignment { align: 0 }
        );
        assert!(matches!(
            AlignedBuf::try_with_alignment(usize::MAX - 511, 4096),
            Err(AlignedBufError::TooLarge { .. })
        ));
    }

    #[test]
    #[should_panic(expected = "not a multiple")]
    fn new_panics_on_bad_length() {
        let _ = AlignedBuf::new(4000);
    }

    #[test]
    fn debug_does_not_dump_contents() {
        let mut buf = AlignedBuf::new(512);
        buf.fill(0xab);
        let s = format!("{buf:?}");
        assert!(s.contains("len: 512"), "{s}");
        assert!(s.contains("align: 4096"), "{s}");
        assert!(!s.contains("171"), "{s}");
    }

    #[test]
    fn send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<AlignedBuf>();
        let buf = AlignedBuf::new(512);
        let handle = std::thread::spawn(move || buf.len());
        assert_eq!(handle.join().unwrap(), 512);
    }
}
