//! `mm/readahead.c`: the readahead window of one open file (`struct file_ra_state`),
//! `page_cache_sync_ra()` for a missing folio, `page_cache_async_ra()` when a read reaches the
//! `PG_readahead` marker, and `page_cache_ra_unbounded()`/`read_pages()` that allocate the folios
//! (charging the memcg, reclaiming if needed) and hand them to the path's `->readahead()`
//! (`iomap_readahead()` or `mpage_readahead()`). `ractl.dropbehind` (`IOCB_DONTCACHE`) gives the
//! new folios `PG_dropbehind`. Also `filemap_create_folio()` + `->read_folio()` for a mapping
//! without readahead (`ra_pages == 0`).

// Bios travel boxed everywhere in bio-core (`Box<Bio>` moves from submitter to driver to
// `bio_endio()`); a list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

use super::dontcache::WritebackPath;
use super::filemap::{AddressSpace, FolioFlags, Mapping};
use super::gfp::GfpFlags;
use crate::block::Bio;
use crate::fs::{buffer, iomap};
use crate::kernel::Cpu;

/// `struct file_ra_state`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileRaState {
    /// `start`: the window's first page.
    pub start: u64,
    /// `size`: the window's pages.
    pub size: u64,
    /// `async_size`: start the next window when this many pages of it are left.
    pub async_size: u64,
    /// `ra_pages`: the window's maximum.
    pub ra_pages: u64,
    /// `prev_pos`: the byte after the last read (`None`: no read yet).
    pub prev_pos: Option<u64>,
}

impl FileRaState {
    /// `file_ra_state_init()`.
    pub fn new(ra_pages: u64) -> Self {
        Self {
            ra_pages,
            ..Self::default()
        }
    }
}

/// `get_init_ra_size()`: the first window for a request of `size` pages, at most `max`.
pub fn get_init_ra_size(size: u64, max: u64) -> u64 {
    let newsize = size.max(1).next_power_of_two();
    if newsize <= max / 32 {
        newsize * 4
    } else if newsize <= max / 4 {
        newsize * 2
    } else {
        max
    }
}

/// `get_next_ra_size()`: the window after one of `cur` pages, at most `max`.
pub fn get_next_ra_size(cur: u64, max: u64) -> u64 {
    if cur < max / 16 {
        4 * cur
    } else if cur <= max / 2 {
        2 * cur
    } else {
        max
    }
}

impl AddressSpace {
    /// `ractl_max_pages()`: `ra_pages`, grown to the request up to `io_pages`.
    fn ractl_max_pages(&self, req_count: u64) -> u64 {
        let ra = self.config.ra_pages;
        if req_count > ra && self.config.io_pages > ra {
            req_count.min(self.config.io_pages)
        } else {
            ra
        }
    }

    /// `page_cache_sync_ra()`: a read of `req_count` pages found `index` missing. A sequential
    /// read (at 0, or next to the previous one) opens a window (`get_init_ra_size()`) with the
    /// `PG_readahead` marker `async_size` pages before its end; a random one reads just the
    /// request. Returns the folios created (0: the memcg had no room).
    pub(crate) fn page_cache_sync_ra(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        index: u64,
        req_count: u64,
        dontcache: bool,
        submit: &mut Vec<Box<Bio>>,
    ) -> u64 {
        let max_pages = self.ractl_max_pages(req_count);
        let prev_index =
            m.ra.prev_pos
                .map(|p| p.saturating_sub(1) / super::filemap::PAGE_SIZE as u64);
        let sequential = index == 0
            || req_count > max_pages
            || prev_index.is_some_and(|p| index.wrapping_sub(p) <= 1);
        if sequential {
            let size = get_init_ra_size(req_count, max_pages);
            m.ra.start = index;
            m.ra.size = size;
            m.ra.async_size = if size > req_count {
                size - req_count
            } else {
                size >> 1
            };
            let (start, size, lookahead) = (m.ra.start, m.ra.size, m.ra.async_size);
            self.page_cache_ra_unbounded(m, cx, start, size, lookahead, dontcache, submit)
        } else {
            // force_page_cache_ra(): just the request, no marker.
            self.page_cache_ra_unbounded(
                m,
                cx,
                index,
                req_count.min(max_pages),
                0,
                dontcache,
                submit,
            )
        }
    }

    /// `page_cache_async_ra()`: a read reached the `PG_readahead` folio at `index`; the marker is
    /// cleared and the next window (`get_next_ra_size()`) read ahead, all of it asynchronous.
    pub(crate) fn page_cache_async_ra(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        index: u64,
        req_count: u64,
        dontcache: bool,
        submit: &mut Vec<Box<Bio>>,
    ) {
        if let Some(f) = m.folios.get_mut(&index) {
            f.flags.readahead = false;
        }
        m.stats.readahead_async += 1;
        let max_pages = self.ractl_max_pages(req_count);
        let expected = m.ra.start + m.ra.size - m.ra.async_size;
        if index == expected {
            m.ra.start += m.ra.size;
            m.ra.size = get_next_ra_size(m.ra.size, max_pages);
        } else {
            // The state is someone else's: start after the cached run that follows index.
            let mut start = index + 1;
            while m.folios.contains_key(&start) && start - index <= max_pages {
                start += 1;
            }
            m.ra.start = start;
            m.ra.size = get_next_ra_size((start - index).max(req_count.min(max_pages)), max_pages);
        }
        m.ra.async_size = m.ra.size;
        let (start, size, lookahead) = (m.ra.start, m.ra.size, m.ra.async_size);
        self.page_cache_ra_unbounded(m, cx, start, size, lookahead, dontcache, submit);
    }

    /// `page_cache_ra_unbounded()` + `read_pages()`: allocates the missing folios of `nr` pages
    /// from `start` (charging each; stopping where the memcg has no room), locked and not
    /// uptodate, `PG_readahead` on the one `lookahead` pages before the end, `PG_dropbehind` under
    /// `ractl.dropbehind`; unwritten blocks are zero-filled at once. The new runs go to the path's
    /// `->readahead()`. Returns the folios created.
    #[allow(clippy::too_many_arguments)] // the kernel's readahead_control, spelled out
    fn page_cache_ra_unbounded(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        start: u64,
        nr: u64,
        lookahead: u64,
        dontcache: bool,
        submit: &mut Vec<Box<Bio>>,
    ) -> u64 {
        let end = (start + nr).min(self.config.nr_pages);
        let mark = (lookahead > 0).then(|| (start + nr).saturating_sub(lookahead));
        let mut run: Vec<(u64, u64)> = Vec::new();
        let mut created = 0;
        // The readahead control holds a reference on each folio it adds until read_pages() is
        // done with it, so reclaim run by a later charge of the same window cannot take it (a
        // zero-filled unwritten folio is clean and unlocked at once).
        let mut pinned = Vec::new();
        for index in start..end {
            if m.folios.contains_key(&index) {
                self.read_pages(m, cx, std::mem::take(&mut run), submit);
                continue;
            }
            // page_cache_ra_unbounded() allocates under memalloc_nofs_save(): no __GFP_FS.
            let gfp = GfpFlags::GFP_KERNEL.without(GfpFlags::__GFP_FS);
            if self.try_charge(m, cx, 1, gfp, submit) == 0 {
                break;
            }
            let unwritten = m.unwritten(index);
            let pfn = m.add_folio(
                &self.config,
                cx,
                index,
                FolioFlags {
                    locked: !unwritten,
                    uptodate: unwritten,
                    dropbehind: dontcache,
                    readahead: mark == Some(index),
                    ..FolioFlags::default()
                },
            );
            m.stats.readahead_pages += 1;
            created += 1;
            m.folios.get_mut(&index).expect("just added").extra_refs += 1;
            pinned.push(index);
            if unwritten {
                // iomap_readahead() on an unwritten extent: folio_zero_range(), no I/O.
                m.stats.zeroed_unwritten_pages += 1;
                self.read_pages(m, cx, std::mem::take(&mut run), submit);
            } else {
                m.reads_in_flight += 1;
                run.push((index, pfn));
            }
        }
        self.read_pages(m, cx, run, submit);
        for index in pinned {
            if let Some(f) = m.folios.get_mut(&index) {
                f.extra_refs -= 1;
            }
        }
        created
    }

    /// `read_pages()`: a run of new locked folios to `->readahead()`.
    fn read_pages(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        run: Vec<(u64, u64)>,
        submit: &mut Vec<Box<Bio>>,
    ) {
        if run.is_empty() {
            return;
        }
        let bios = match self.config.path {
            WritebackPath::Iomap => iomap::iomap_readahead(self, m, cx, &run),
            WritebackPath::BufferHead => buffer::mpage_readahead(self, m, cx, &run),
        };
        submit.extend(bios);
    }

    /// `filemap_create_folio()` + `filemap_read_folio()`: without readahead, one folio (dropbehind
    /// under `IOCB_DONTCACHE`) read with `->read_folio()`. Returns the folios created (0 or 1).
    pub(crate) fn filemap_create_folio(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        index: u64,
        dontcache: bool,
        submit: &mut Vec<Box<Bio>>,
    ) -> u64 {
        // filemap_create_folio() allocates with mapping_gfp_mask(): the block device's GFP_USER,
        // which has __GFP_FS (its __GFP_HARDWALL is not modelled).
        if self.try_charge(m, cx, 1, GfpFlags::GFP_KERNEL, submit) == 0 {
            return 0;
        }
        let unwritten = m.unwritten(index);
        let pfn = m.add_folio(
            &self.config,
            cx,
            index,
            FolioFlags {
                uptodate: unwritten,
                dropbehind: dontcache,
                ..FolioFlags::default()
            },
        );
        if unwritten {
            m.stats.zeroed_unwritten_pages += 1;
        } else {
            self.start_read_folio(m, cx, index, pfn, submit);
        }
        1
    }

    /// `->read_folio()` of a cached, unlocked, not uptodate folio: locks it and builds its read
    /// bio (`iomap_read_folio()` or `block_read_full_folio()`).
    pub(crate) fn start_read_folio(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        index: u64,
        pfn: u64,
        submit: &mut Vec<Box<Bio>>,
    ) {
        let Some(f) = m.folios.get_mut(&index) else {
            return;
        };
        f.flags.locked = true;
        let dropbehind = f.flags.dropbehind;
        m.reads_in_flight += 1;
        m.stats.read_folio_calls += 1;
        let bio = match self.config.path {
            WritebackPath::Iomap => iomap::iomap_read_folio(self, m, cx, index, pfn),
            WritebackPath::BufferHead => {
                buffer::block_read_full_folio(self, m, cx, index, pfn, dropbehind)
            }
        };
        submit.push(bio);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_grow_as_the_kernels_do() {
        // A 4-page read with ra_pages 32: 4 -> 16 (x4 below max/32? 4 > 1, <= 8: x2 = 8).
        assert_eq!(get_init_ra_size(4, 32), 8);
        assert_eq!(get_init_ra_size(1, 32), 4);
        assert_eq!(get_init_ra_size(16, 32), 32);
        assert_eq!(get_init_ra_size(256, 256), 256);
        assert_eq!(get_next_ra_size(8, 32), 16);
        assert_eq!(get_next_ra_size(1, 32), 4);
        assert_eq!(get_next_ra_size(32, 32), 32);
    }
}
