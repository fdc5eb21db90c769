//! `mm/memcontrol.c` (cgroup v1's `memory.limit_in_bytes`): the page cache's charge against a
//! memory limit. `mem_cgroup_charge()` of a new folio over the limit first reclaims
//! (`try_to_free_mem_cgroup_pages()`, [`super::vmscan`]); the uncharge is in
//! `__filemap_remove_folio()`'s `mem_cgroup_uncharge()`.

/// `struct mem_cgroup`: the limit and the pages charged (`memory.usage_in_bytes` / `PAGE_SIZE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemCgroup {
    /// `memory.limit_in_bytes` in pages; `None` is unlimited.
    pub limit_pages: Option<u64>,
    /// Pages charged.
    pub usage_pages: u64,
}

impl MemCgroup {
    /// A memcg with `limit_pages`.
    pub fn new(limit_pages: Option<u64>) -> Self {
        Self {
            limit_pages,
            usage_pages: 0,
        }
    }

    /// How many pages must be reclaimed before `nr` more can be charged (0: they fit).
    pub fn over_by(&self, nr: u64) -> u64 {
        match self.limit_pages {
            Some(limit) => (self.usage_pages + nr).saturating_sub(limit),
            None => 0,
        }
    }

    /// `try_charge()` succeeded: `nr` pages are charged.
    pub fn charge(&mut self, nr: u64) {
        self.usage_pages += nr;
    }

    /// `mem_cgroup_uncharge()` of one folio.
    pub fn uncharge(&mut self, nr: u64) {
        self.usage_pages = self.usage_pages.saturating_sub(nr);
    }
}
