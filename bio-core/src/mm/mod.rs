//! `mm/`: the page cache, as far as `RWF_DONTCACHE` needs it.

pub mod dropbehind_v3;
pub mod filemap;
