//! null_blk's memory backing (`drivers/block/null_blk/main.c`: `struct nullb_page`, the
//! `dev->data` xarray, `copy_to_nullb()`, `copy_from_nullb()`, `null_free_sector()`).
//!
//! Data lives in 4 KiB pages indexed by `sector >> PAGE_SECTORS_SHIFT`; each page has a bitmap
//! of the sectors that hold data. A write of one block allocates the page if needed
//! (`null_insert_page()`), copies, and sets the bit of the block's first sector; a read of a
//! block whose bit is clear is zero-filled (`null_lookup_page()` finds nothing); a discard
//! clears the bit (`null_free_sector()`) and frees the page once its bitmap is empty. The kernel
//! works in `blocksize` chunks and marks only each chunk's first sector, so with 4 KiB blocks a
//! page has one bit in use: the model does the same.

use crate::block::SECTOR_SHIFT;
use std::collections::BTreeMap;

/// `PAGE_SHIFT - SECTOR_SHIFT`.
const PAGE_SECTORS_SHIFT: u32 = 12 - SECTOR_SHIFT;
/// `PAGE_SECTORS`: sectors per 4 KiB page.
const PAGE_SECTORS: u64 = 1 << PAGE_SECTORS_SHIFT;
/// `SECTOR_MASK`.
const SECTOR_MASK: u64 = PAGE_SECTORS - 1;
/// `PAGE_SIZE`.
pub const NULLB_PAGE_SIZE: usize = 4096;

/// `struct nullb_page`: one page and its sector bitmap.
#[derive(Debug, Clone)]
struct NullbPage {
    page: Box<[u8; NULLB_PAGE_SIZE]>,
    /// `bitmap`: bit `s` set iff sector `s` of the page holds data.
    bitmap: u8,
}

/// `dev->data`: the pages of a memory-backed device.
#[derive(Debug, Default, Clone)]
pub struct NullbPages {
    pages: BTreeMap<u64, NullbPage>,
    blocksize: u64,
}

impl NullbPages {
    /// An empty store for a device of `blocksize`-byte blocks (a power of two, 512..=64 KiB; a block
    /// over 4 KiB is copied page by page, each page marking its first sector).
    pub fn new(blocksize: u32) -> Self {
        NullbPages {
            pages: BTreeMap::new(),
            blocksize: u64::from(blocksize),
        }
    }

    /// Pages allocated (`nullb->dev->curr_cache` aside, what `null_free_device_storage()` frees).
    pub fn nr_pages(&self) -> usize {
        self.pages.len()
    }

    /// `copy_to_nullb()`: `src` at `sector`, in `blocksize` chunks.
    pub fn copy_to_nullb(&mut self, src: &[u8], mut sector: u64) {
        let mut count = 0;
        while count < src.len() {
            let temp = (self.blocksize as usize).min(src.len() - count);
            let offset = ((sector & SECTOR_MASK) << SECTOR_SHIFT) as usize;
            // null_insert_page(). Its bytes are never read before written: a clear bit reads
            // as zeroes.
            let p = self
                .pages
                .entry(sector >> PAGE_SECTORS_SHIFT)
                .or_insert_with(|| NullbPage {
                    page: Box::new([0; NULLB_PAGE_SIZE]),
                    bitmap: 0,
                });
            let n = temp.min(NULLB_PAGE_SIZE - offset);
            p.page[offset..offset + n].copy_from_slice(&src[count..count + n]);
            p.bitmap |= 1 << (sector & SECTOR_MASK);
            count += n;
            sector += (n as u64) >> SECTOR_SHIFT;
        }
    }

    /// `copy_from_nullb()`: fills `dst` from `sector`; a chunk whose sector holds nothing reads
    /// as zeroes (`memzero_page()`).
    pub fn copy_from_nullb(&self, dst: &mut [u8], mut sector: u64) {
        let mut count = 0;
        while count < dst.len() {
            let temp = (self.blocksize as usize).min(dst.len() - count);
            let offset = ((sector & SECTOR_MASK) << SECTOR_SHIFT) as usize;
            let n = temp.min(NULLB_PAGE_SIZE - offset);
            match self.null_lookup_page(sector) {
                Some(p) => dst[count..count + n].copy_from_slice(&p.page[offset..offset + n]),
                None => dst[count..count + n].fill(0),
            }
            count += n;
            sector += (n as u64) >> SECTOR_SHIFT;
        }
    }

    /// `null_lookup_page()`: the page of `sector` if that sector's bit is set.
    fn null_lookup_page(&self, sector: u64) -> Option<&NullbPage> {
        self.pages
            .get(&(sector >> PAGE_SECTORS_SHIFT))
            .filter(|p| p.bitmap & (1 << (sector & SECTOR_MASK)) != 0)
    }

    /// `null_handle_discard()`: `null_free_sector()` for each `blocksize` chunk of the range.
    pub fn discard(&mut self, mut sector: u64, nr_sectors: u64) {
        let mut n = nr_sectors << SECTOR_SHIFT;
        while n > 0 {
            let temp = self.blocksize.min(n);
            self.null_free_sector(sector);
            sector += temp >> SECTOR_SHIFT;
            n -= temp;
        }
    }

    /// `null_free_sector()`: clears the sector's bit; an empty bitmap frees the page.
    fn null_free_sector(&mut self, sector: u64) {
        let idx = sector >> PAGE_SECTORS_SHIFT;
        if let Some(p) = self.pages.get_mut(&idx) {
            p.bitmap &= !(1 << (sector & SECTOR_MASK));
            if p.bitmap == 0 {
                self.pages.remove(&idx);
            }
        }
    }

    /// Fault injection for checkers' buggy twins: flips every bit of the stored byte at byte
    /// `pos`. Returns whether its block holds data (a hole has nothing to corrupt).
    pub fn flip_byte(&mut self, pos: u64) -> bool {
        let block_sector = (pos / self.blocksize * self.blocksize) >> SECTOR_SHIFT;
        let idx = block_sector >> PAGE_SECTORS_SHIFT;
        match self.pages.get_mut(&idx) {
            Some(p) if p.bitmap & (1 << (block_sector & SECTOR_MASK)) != 0 => {
                p.page[(pos % NULLB_PAGE_SIZE as u64) as usize] ^= 0xff;
                true
            }
            _ => false,
        }
    }
}
