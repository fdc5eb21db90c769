//! `mm/page-writeback.c` and `mm/filemap.c`'s writeback entry points: `writeback_iter()` over a
//! range (`folio_clear_dirty_for_io()` + `folio_start_writeback()`), `filemap_fdatawrite_range()`
//! (`WB_SYNC_NONE`), `filemap_fdatawrite_range_kick()` (`IOCB_DONTCACHE`'s kick),
//! `filemap_write_and_wait_range()` (`fsync`), and the dirty/writeback accounting. The folios
//! go to the path's `->writepages()` (`iomap_writepages()` or `block_write_full_folio()`).

// Bios travel boxed everywhere in bio-core (`Box<Bio>` moves from submitter to driver to
// `bio_endio()`); a list of them is a `Vec<Box<Bio>>`.
#![allow(clippy::vec_box)]

use super::dontcache::WritebackPath;
use super::filemap::{AddressSpace, Blocked, Mapping, SyncProgress, PAGE_SIZE};
use crate::block::Bio;
use crate::errno::Errno;
use crate::fs::{buffer, iomap};
use crate::kernel::Cpu;

/// A folio `folio_start_writeback()` put under writeback, for the path to build bios from.
#[derive(Debug, Clone)]
pub(crate) struct WbFolio {
    pub(crate) index: u64,
    pub(crate) pfn: u64,
    /// The bytes the bio carries (snapshot at submission).
    pub(crate) data: Vec<u8>,
    /// `folio_test_dropbehind()`.
    pub(crate) dropbehind: bool,
    /// The block is an unwritten extent (`IOMAP_UNWRITTEN`).
    pub(crate) unwritten: bool,
}

impl AddressSpace {
    /// `writeback_iter()` + `->writepages()` over the dirty folios of `first..=last` that are not
    /// already under writeback (`WB_SYNC_NONE` skips those).
    pub(crate) fn start_writeback_range(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        first: u64,
        last: u64,
    ) -> Vec<Box<Bio>> {
        if first > last {
            // An empty range (`lend < lstart`): nothing to write, as the kernel returns 0.
            return Vec::new();
        }
        let indices: Vec<u64> = m
            .folios
            .range(first..=last)
            .filter(|(_, f)| f.flags.dirty && !f.flags.writeback)
            .map(|(i, _)| *i)
            .collect();
        self.start_writeback_indices(m, cx, indices)
    }

    /// `folio_clear_dirty_for_io()` + `folio_start_writeback()` on each of `indices` (ascending)
    /// that is dirty and not under writeback, then the path's `->writepages()`.
    pub(crate) fn start_writeback_indices(
        &self,
        m: &mut Mapping,
        cx: &Cpu,
        mut indices: Vec<u64>,
    ) -> Vec<Box<Bio>> {
        indices.sort_unstable();
        let mut wb = Vec::new();
        for index in indices {
            let unwritten = m.unwritten(index);
            let Some(f) = m.folios.get_mut(&index) else {
                continue;
            };
            if !f.flags.dirty || f.flags.writeback {
                continue;
            }
            f.flags.dirty = false;
            f.flags.writeback = true;
            wb.push(WbFolio {
                index,
                pfn: f.pfn,
                data: f.data.clone(),
                dropbehind: f.flags.dropbehind,
                unwritten,
            });
            m.stats.nr_dirty -= 1;
            m.stats.nr_writeback += 1;
            m.stats.writeback_pages += 1;
        }
        if wb.is_empty() {
            return Vec::new();
        }
        match self.config.path {
            WritebackPath::Iomap => iomap::iomap_writepages(self, m, cx, wb),
            WritebackPath::BufferHead => buffer::block_write_full_folios(self, m, cx, wb),
        }
    }

    /// `filemap_fdatawrite_range()` (`WB_SYNC_NONE`) of bytes `start..=end`: starts writeback of
    /// the dirty folios there and returns the bios to submit.
    pub fn filemap_fdatawrite_range(&self, cx: &Cpu, start: u64, end: u64) -> Vec<Box<Bio>> {
        let mut m = self.inner.lock();
        self.start_writeback_range(&mut m, cx, start / PAGE_SIZE as u64, end / PAGE_SIZE as u64)
    }

    /// `filemap_fdatawrite_range_kick()`: what `generic_write_sync()` does for `IOCB_DONTCACHE`
    /// (the same `WB_SYNC_NONE` writeback, without waiting).
    pub fn filemap_fdatawrite_range_kick(&self, cx: &Cpu, start: u64, end: u64) -> Vec<Box<Bio>> {
        self.filemap_fdatawrite_range(cx, start, end)
    }

    /// `filemap_write_and_wait_range()` (`fsync`'s data part, `WB_SYNC_ALL`) of bytes
    /// `start..=end`: starts writeback of the dirty folios and reports the first folio still under
    /// writeback. Call again after completing the bios until `blocked` is `None`.
    pub fn filemap_write_and_wait_range(&self, cx: &Cpu, start: u64, end: u64) -> SyncProgress {
        if end < start {
            // filemap_write_and_wait_range(): `if (lend < lstart) return 0;`.
            return SyncProgress {
                submit: Vec::new(),
                blocked: None,
                error: None,
            };
        }
        let (first, last) = (start / PAGE_SIZE as u64, end / PAGE_SIZE as u64);
        let mut m = self.inner.lock();
        let submit = self.start_writeback_range(&mut m, cx, first, last);
        let blocked = m
            .folios
            .range(first..=last)
            .find(|(_, f)| f.flags.writeback || f.flags.dirty)
            .map(|(i, _)| Blocked::Writeback(*i));
        // filemap_check_errors(): reported once the wait is over.
        let error = (blocked.is_none() && std::mem::take(&mut m.as_eio)).then_some(Errno::EIO);
        SyncProgress {
            submit,
            blocked,
            error,
        }
    }

    /// `vfs_fsync()` of the whole device.
    pub fn fsync(&self, cx: &Cpu) -> SyncProgress {
        let end = self.i_size().saturating_sub(1);
        self.filemap_write_and_wait_range(cx, 0, end)
    }

    /// `iomap_finish_ioend_buffered()` / `end_buffer_async_write()`: ends writeback of every
    /// folio of a completed ioend (`ok`: the bio succeeded; an unwritten ioend's blocks become
    /// written, the extent conversion). `merged_regular`: the regular folios the bio carried
    /// with `BIO_COMPLETE_IN_TASK` (counted when they end in task context).
    pub(crate) fn finish_ioend(
        &self,
        cx: &Cpu,
        folios: &[(u64, u64)],
        ok: bool,
        unwritten: bool,
        merged_regular: u64,
    ) {
        {
            let mut m = self.inner.lock();
            if !ok {
                m.stats.writeback_errors += 1;
                m.as_eio = true; // mapping_set_error()
            }
            if unwritten && ok {
                if let Some(w) = m.written.as_mut() {
                    w.extend(folios.iter().map(|(i, _)| *i));
                }
            }
            if cx.in_task() {
                m.stats.merged_regular_ended_in_task += merged_regular;
                m.stats.writeback_ended_in_task += 1;
            } else {
                m.stats.writeback_ended_in_irq += 1;
            }
        }
        for (index, pfn) in folios {
            self.folio_end_writeback(cx, *index, *pfn);
        }
    }
}
