//! `verify=crc32c` during a run: which generation each block must hold, checked on every read,
//! and fio's `verify_state_save` (a small state file, written atomically after each completed
//! flush, that a later `--verify-only` run checks the file against after a crash).
//!
//! Generations are one counter for the whole run (every write takes the next one), so a
//! generation names one write. Its high 32 bits are the run's id, a random number drawn when the
//! run starts (fio's verify header carries the job's `rand_seed` for the same reason): a block
//! another run wrote is never mistaken for this run's write of the same counter, so a lost write
//! that leaves an earlier run's sound block behind is caught, and so is a `--verify-only` block
//! left by another run than the one whose flush was saved. Per block biosim keeps the generation of the last write
//! *acknowledged* (`acked`, the latest by generation if clones raced) and of the last write
//! *submitted* (`issued`). A read submitted when `acked` was `lo` must return a sound block of the
//! right offset with a generation in `lo..=issued` (with writes in flight to the block, either the
//! old or a new one); a block nobody wrote in this run on a file biosim created sparse may be all
//! zeroes.
//!
//! The state file holds, per block, the generation acknowledged before the last completed
//! flush was *submitted* (`REQ_OP_FLUSH`/`fsync(2)` makes durable what completed before it was
//! issued). After a `kill -9` every such block must hold at least that generation; any block may
//! hold an older or newer sound one otherwise, never a torn or misdirected one.

use crate::fio::verify::{self, VerifyError};
use parking_lot::Mutex;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The state file's first line.
const STATE_MAGIC: &str = "biosim-verify-state v1";

/// A block that failed its check: where, and what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyFailure {
    /// The byte offset in the file.
    pub offset: u64,
    /// What the block held instead.
    pub found: String,
}

/// The run's expected generations.
#[derive(Debug)]
pub struct VerifyState {
    bs: u64,
    acked: Vec<AtomicU64>,
    issued: Vec<AtomicU64>,
    next_gen: AtomicU64,
    /// The run's id (the high 32 bits of every generation it writes).
    run_id: u32,
    /// Whether a block with no generation may be all zeroes (a file biosim created, or holes
    /// it punched).
    fresh: AtomicBool,
    /// Where the state is saved after each flush (a job on a file of the user's, with writes).
    save: Option<StateSaver>,
}

#[derive(Debug)]
struct StateSaver {
    path: PathBuf,
    /// The sequence number of the flush last saved (flushes of several clones may complete out
    /// of order; an older snapshot must not replace a newer one).
    last: Mutex<u64>,
    seq: AtomicU64,
}

/// What a flush covers: the `acked` generations when it was submitted.
#[derive(Debug)]
pub struct FlushSnapshot {
    seq: u64,
    gens: Vec<u64>,
}

/// The run id in generation `g`'s high 32 bits.
pub fn run_of(g: u64) -> u32 {
    (g >> 32) as u32
}

/// A run id: random per process (std's `RandomState` keys are drawn from the OS) and per call.
fn new_run_id() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    // Never 0, so a generation is never confused with "no write" (0) even with the counter at 0.
    (h.finish() as u32).max(1)
}

/// Why a sound block of generation `g` is not this run's, when `want`'s run differs.
fn other_run(g: u64, want: u64) -> String {
    format!(
        "generation {:#x}:{} written by another run (run {:#010x}), not by run {:#010x}",
        run_of(g),
        g as u32,
        run_of(g),
        run_of(want)
    )
}

impl VerifyState {
    /// State for `blocks` blocks of `bs` bytes; `fresh` if unwritten blocks may read as zeroes;
    /// `save`: the state file's path.
    pub fn new(bs: u64, blocks: u64, fresh: bool, save: Option<PathBuf>) -> VerifyState {
        Self::with_run_id(new_run_id(), bs, blocks, fresh, save)
    }

    /// [`VerifyState::new`] with a given run id (tests).
    pub fn with_run_id(
        run_id: u32,
        bs: u64,
        blocks: u64,
        fresh: bool,
        save: Option<PathBuf>,
    ) -> VerifyState {
        VerifyState {
            run_id,
            bs,
            acked: (0..blocks).map(|_| AtomicU64::new(0)).collect(),
            issued: (0..blocks).map(|_| AtomicU64::new(0)).collect(),
            next_gen: AtomicU64::new((u64::from(run_id) << 32) | 1),
            fresh: AtomicBool::new(fresh),
            save: save.map(|path| StateSaver {
                path,
                last: Mutex::new(0),
                seq: AtomicU64::new(0),
            }),
        }
    }

    /// Blocks tracked.
    pub fn blocks(&self) -> u64 {
        self.acked.len() as u64
    }

    /// The state file, if the run saves one.
    pub fn state_path(&self) -> Option<&Path> {
        self.save.as_ref().map(|s| s.path.as_path())
    }

    fn index(&self, off: u64) -> usize {
        (off / self.bs) as usize
    }

    /// Every block forgotten (holes were punched): all may read as zeroes again.
    pub fn reset_to_holes(&self) {
        for (a, i) in self.acked.iter().zip(&self.issued) {
            a.store(0, Ordering::Relaxed);
            i.store(0, Ordering::Relaxed);
        }
        self.fresh.store(true, Ordering::Release);
    }

    /// A generation for a write to `off` (recorded as issued).
    pub fn begin_write(&self, off: u64) -> u64 {
        let g = self.next_gen.fetch_add(1, Ordering::Relaxed);
        self.issued[self.index(off)].fetch_max(g, Ordering::AcqRel);
        g
    }

    /// Whether a write to `off` is in flight (one write per block at a time keeps what the
    /// block holds defined: two overlapping writes may land in either order).
    pub fn write_in_flight(&self, off: u64) -> bool {
        let i = self.index(off);
        self.issued[i].load(Ordering::Acquire) != self.acked[i].load(Ordering::Acquire)
    }

    /// The write of generation `g` to `off` completed.
    pub fn write_done(&self, off: u64, g: u64) {
        self.acked[self.index(off)].fetch_max(g, Ordering::AcqRel);
    }

    /// What a read submitted now may return at least.
    pub fn begin_read(&self, off: u64) -> u64 {
        self.acked[self.index(off)].load(Ordering::Acquire)
    }

    /// Checks a completed read of `buf` at `off`, submitted when the block's acked generation
    /// was `lo`.
    pub fn check_read(&self, buf: &[u8], off: u64, lo: u64) -> Result<(), VerifyFailure> {
        let hi = self.issued[self.index(off)].load(Ordering::Acquire);
        let fail = |found: String| Err(VerifyFailure { offset: off, found });
        match verify::check(buf, off) {
            Ok(g) if lo == 0 && hi == 0 => {
                // Nobody wrote it in this run: any sound block of this offset is the file's.
                let _ = g;
                Ok(())
            }
            Ok(g) if run_of(g) != self.run_id => fail(other_run(g, hi.max(lo))),
            Ok(g) if g >= lo && g <= hi.max(lo) => Ok(()),
            Ok(g) if g < lo => fail(format!(
                "generation {g}, older than {lo}, the last write acknowledged before the read"
            )),
            Ok(g) => fail(format!(
                "generation {g}, newer than any write issued to it ({hi})"
            )),
            Err(VerifyError::NeverWritten) if lo == 0 && self.fresh.load(Ordering::Acquire) => {
                Ok(())
            }
            Err(e) => fail(e.to_string()),
        }
    }

    /// Lays out generation `g` as acknowledged for every block (a layout pass wrote them).
    pub fn laid_out(&self, g: u64) {
        for (a, i) in self.acked.iter().zip(&self.issued) {
            a.store(g, Ordering::Relaxed);
            i.store(g, Ordering::Relaxed);
        }
        self.next_gen.fetch_max(g + 1, Ordering::AcqRel);
    }

    /// The next generation to use (a layout pass takes one for all its blocks).
    pub fn take_generation(&self) -> u64 {
        self.next_gen.fetch_add(1, Ordering::Relaxed)
    }

    /// A flush is being submitted: what it will make durable. `None` when nothing is saved.
    pub fn begin_flush(&self) -> Option<FlushSnapshot> {
        let s = self.save.as_ref()?;
        Some(FlushSnapshot {
            seq: s.seq.fetch_add(1, Ordering::Relaxed) + 1,
            gens: self
                .acked
                .iter()
                .map(|a| a.load(Ordering::Acquire))
                .collect(),
        })
    }

    /// The flush of `snap` completed: saves it (temp file + rename in the same directory, so a
    /// crash leaves the old state or the new one, never half of one).
    pub fn flush_done(&self, snap: FlushSnapshot) -> std::io::Result<()> {
        let Some(s) = &self.save else { return Ok(()) };
        let mut last = s.last.lock();
        if snap.seq <= *last {
            return Ok(());
        }
        save_state(&s.path, self.bs, &snap.gens)?;
        *last = snap.seq;
        Ok(())
    }

    /// The run ended well: the state file is not needed any more.
    pub fn remove_state(&self) {
        if let Some(s) = &self.save {
            let _ = std::fs::remove_file(&s.path);
        }
    }

    /// Checks a block read after every write completed (the verify pass): exactly the last
    /// acknowledged generation.
    pub fn check_settled(&self, buf: &[u8], off: u64) -> Result<(), VerifyFailure> {
        let want = self.acked[self.index(off)].load(Ordering::Acquire);
        let fail = |found: String| Err(VerifyFailure { offset: off, found });
        match verify::check(buf, off) {
            Ok(g) if want == 0 || g == want => Ok(()),
            Ok(g) if run_of(g) != run_of(want) => fail(other_run(g, want)),
            Ok(g) => fail(format!(
                "generation {g}, not {want}, the last write acknowledged"
            )),
            Err(VerifyError::NeverWritten) if want == 0 && self.fresh.load(Ordering::Acquire) => {
                Ok(())
            }
            Err(e) => fail(e.to_string()),
        }
    }
}

/// The state file of the job's file `file`: `FILE.biosim-verify.state` beside it.
pub fn state_path_for(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".biosim-verify.state");
    file.with_file_name(name)
}

fn save_state(path: &Path, bs: u64, gens: &[u64]) -> std::io::Result<()> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let mut bytes = format!("{STATE_MAGIC} bs={bs} blocks={}\n", gens.len()).into_bytes();
    bytes.reserve(gens.len() * 8);
    for g in gens {
        bytes.extend_from_slice(&g.to_le_bytes());
    }
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_data()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// A saved state: the block size and per block the generation that must have survived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedState {
    /// The block size it was saved for.
    pub bs: u64,
    /// Per block, the least generation it must hold (0: nothing flushed).
    pub gens: Vec<u64>,
}

/// Reads a state file (`Ok(None)` if there is none).
pub fn load_state(path: &Path) -> Result<Option<SavedState>, String> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: cannot read: {e}", path.display())),
    };
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let bad = |why: &str| format!("{}: not a biosim verify state ({why})", path.display());
    let nl = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| bad("no header line"))?;
    let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| bad("header not text"))?;
    let rest = header
        .strip_prefix(STATE_MAGIC)
        .ok_or_else(|| bad("wrong magic"))?;
    let field = |k: &str| -> Result<u64, String> {
        rest.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad(&format!("no {k}")))
    };
    let bs = field("bs=")?;
    let blocks = field("blocks=")? as usize;
    let body = &bytes[nl + 1..];
    if body.len() != blocks * 8 {
        return Err(bad("truncated"));
    }
    let gens = body
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    Ok(Some(SavedState { bs, gens }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_accept_the_acked_or_an_inflight_generation_and_nothing_else() {
        let st = VerifyState::new(512, 4, true, None);
        let mut b = vec![0u8; 512];
        assert_eq!(st.check_read(&b, 0, st.begin_read(0)), Ok(()), "a hole");
        let g1 = st.begin_write(0);
        st.write_done(0, g1);
        let lo = st.begin_read(0);
        assert!(st.check_read(&b, 0, lo).is_err(), "zeroes after a write");
        verify::stamp(&mut b, 0, g1);
        assert_eq!(st.check_read(&b, 0, lo), Ok(()));
        let g2 = st.begin_write(0); // in flight
        assert_eq!(st.check_read(&b, 0, lo), Ok(()), "the old one meanwhile");
        let mut new = vec![0u8; 512];
        verify::stamp(&mut new, 0, g2);
        assert_eq!(st.check_read(&new, 0, lo), Ok(()), "or the new one");
        st.write_done(0, g2);
        let e = st.check_read(&b, 0, st.begin_read(0)).unwrap_err();
        assert!(e.found.contains("older"), "{e:?}");
        let mut other = vec![0u8; 512];
        verify::stamp(&mut other, 512, g2);
        assert!(st.check_read(&other, 0, 0).is_err(), "another block's");
        assert!(st.check_settled(&new, 0).is_ok());
        assert!(st.check_settled(&b, 0).is_err());
    }

    #[test]
    fn a_sound_block_of_another_run_is_flagged_even_with_the_same_counter() {
        let st = VerifyState::with_run_id(7, 512, 2, true, None);
        let g = st.begin_write(0);
        st.write_done(0, g);
        // A lost write: the block still holds what run 9 wrote with the same counter.
        let mut stale = vec![0u8; 512];
        verify::stamp(&mut stale, 0, (9u64 << 32) | (g & 0xffff_ffff));
        let e = st.check_read(&stale, 0, st.begin_read(0)).unwrap_err();
        assert!(e.found.contains("another run"), "{e:?}");
        let e = st.check_settled(&stale, 0).unwrap_err();
        assert!(e.found.contains("another run"), "{e:?}");
        let mut ours = vec![0u8; 512];
        verify::stamp(&mut ours, 0, g);
        assert_eq!(st.check_read(&ours, 0, st.begin_read(0)), Ok(()));
        // A block this run never wrote holds whatever sound block the file had.
        let mut old = vec![0u8; 512];
        verify::stamp(&mut old, 512, 9u64 << 32 | 3);
        assert_eq!(st.check_read(&old, 512, st.begin_read(512)), Ok(()));
        assert_ne!(
            run_of(VerifyState::new(512, 1, true, None).take_generation()),
            0,
            "a run id is never 0"
        );
    }

    #[test]
    fn the_state_file_round_trips_and_an_older_flush_does_not_replace_a_newer() {
        let dir = tempfile::tempdir().unwrap();
        let path = state_path_for(&dir.path().join("f.img"));
        let st = VerifyState::new(4096, 3, true, Some(path.clone()));
        let g = st.begin_write(4096);
        st.write_done(4096, g);
        let old = st.begin_flush().unwrap();
        let g2 = st.begin_write(8192);
        st.write_done(8192, g2);
        let new = st.begin_flush().unwrap();
        st.flush_done(new).unwrap();
        st.flush_done(old).unwrap();
        let s = load_state(&path).unwrap().unwrap();
        assert_eq!(
            s,
            SavedState {
                bs: 4096,
                gens: vec![0, g, g2]
            }
        );
        st.remove_state();
        assert_eq!(load_state(&path).unwrap(), None);
    }
}
