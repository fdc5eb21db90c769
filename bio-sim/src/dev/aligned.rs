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
    /// `Some(capacity)`: the memory is an adopted `Vec<u8>`'s ([`AlignedBuf::from_vec`]), freed
    /// as that `Vec` (its own layout), never with `align`.
    vec_cap: Option<usize>,
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
            return Ok(AlignedBuf {
                ptr,
                len,
                align,
                vec_cap: None,
            });
        }
        let layout = Layout::from_size_align(len, align)
            .map_err(|_| AlignedBufError::TooLarge { len, align })?;
        // SAFETY: `layout` has a non-zero size (len > 0 checked above).
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        Ok(AlignedBuf {
            ptr,
            len,
            align,
            vec_cap: None,
        })
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

    /// Takes `data` itself as an aligned buffer, without copying, when its address is a multiple
    /// of `align` (a power of two) and its length a non-zero multiple of [`SECTOR_SIZE`]: a
    /// bio segment of whole pages that already starts on a page boundary (see
    /// [`crate::dev::page_alloc`]) can go to `O_DIRECT` as it is. Otherwise `data` comes back
    /// untouched, for the caller to bounce.
    pub fn from_vec(data: Vec<u8>, align: usize) -> Result<AlignedBuf, Vec<u8>> {
        let len = data.len();
        if !align.is_power_of_two()
            || len == 0
            || !len.is_multiple_of(SECTOR_SIZE)
            || !(data.as_ptr() as usize).is_multiple_of(align)
        {
            return Err(data);
        }
        let mut data = std::mem::ManuallyDrop::new(data);
        let cap = data.capacity();
        // SAFETY: a non-empty Vec's pointer is non-null.
        let ptr = unsafe { NonNull::new_unchecked(data.as_mut_ptr()) };
        Ok(AlignedBuf {
            ptr,
            len,
            align,
            vec_cap: Some(cap),
        })
    }

    /// The buffer as a `Vec<u8>`: the adopted `Vec` itself (no copy) for one made by
    /// [`AlignedBuf::from_vec`], else a copy of the bytes.
    pub fn into_vec(self) -> Vec<u8> {
        match self.vec_cap {
            Some(cap) => {
                let me = std::mem::ManuallyDrop::new(self);
                // SAFETY: `ptr`, `len` and `cap` are those of the Vec `from_vec` took apart
                // (len never changes), and `me` is never dropped, so the memory has one owner.
                unsafe { Vec::from_raw_parts(me.ptr.as_ptr(), me.len, cap) }
            }
            None => self.to_vec(),
        }
    }

    /// Whether the buffer is an adopted `Vec` ([`AlignedBuf::from_vec`]).
    pub fn is_adopted_vec(&self) -> bool {
        self.vec_cap.is_some()
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
        if let Some(cap) = self.vec_cap {
            // SAFETY: as in `into_vec`: the adopted Vec's own parts, freed once, here.
            drop(unsafe { Vec::from_raw_parts(self.ptr.as_ptr(), self.len, cap) });
            return;
        }
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

    /// A page-aligned Vec (every whole-page Vec here, `crate::dev::page_alloc`) is taken as it
    /// is and comes back as the same memory; a misaligned or odd-length one is handed back.
    #[test]
    fn from_vec_adopts_an_aligned_vec_without_copying_and_refuses_the_others() {
        let v = vec![7u8; 8192];
        let at = v.as_ptr();
        let buf = AlignedBuf::from_vec(v, DEFAULT_ALIGNMENT).expect("whole pages are aligned");
        assert!(buf.is_adopted_vec());
        assert_eq!((buf.as_ptr(), buf.len()), (at, 8192), "the same memory");
        let back = buf.into_vec();
        assert_eq!((back.as_ptr(), back.len()), (at, 8192));
        assert!(back.iter().all(|&b| b == 7));
        // Dropped while adopted: freed as the Vec it was (Miri/ASan would see a mismatch).
        drop(AlignedBuf::from_vec(back, 512).unwrap());
        let odd = AlignedBuf::from_vec(vec![1u8; 100], 1).unwrap_err();
        assert_eq!(odd.len(), 100, "not a sector multiple: handed back");
        let v = vec![2u8; 4096];
        let beyond = 1usize << ((v.as_ptr() as usize).trailing_zeros() + 1);
        let v = AlignedBuf::from_vec(v, beyond).unwrap_err();
        assert!(
            v.iter().all(|&b| b == 2),
            "misaligned: handed back untouched"
        );
        let owned = AlignedBuf::from_slice(&v);
        assert!(!owned.is_adopted_vec());
        assert_eq!(owned.into_vec(), v, "an owned buffer comes out as a copy");
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
