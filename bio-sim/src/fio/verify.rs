//! `verify=crc32c`: self-describing blocks, as fio's verify headers make them (HOWTO
//! "Verification"; fio's `verify.c` writes a header with a magic, the length, the offset and a
//! sequence number, and a checksum of the block). biosim's layout, little-endian, at the start of
//! every block:
//!
//! | bytes  | field                                                          |
//! |--------|----------------------------------------------------------------|
//! | 0..4   | magic `VERIFY_MAGIC`                                           |
//! | 4..8   | block length                                                   |
//! | 8..16  | byte offset the block was written at                           |
//! | 16..24 | generation: the writer's sequence number (the runner: run id << 32 | counter) |
//! | 24..28 | CRC-32C of the whole block with these four bytes zero          |
//! | 28..32 | zero                                                           |
//!
//! The rest of the block is a pattern drawn from (offset, generation), so a block written at
//! another offset, a stale generation with a forged header, or a torn block (two writes' halves)
//! fails the check: the offset or the checksum says which.

use std::fmt;

/// The header's magic (`"bsvf"` read as a little-endian u32).
pub const VERIFY_MAGIC: u32 = u32::from_le_bytes(*b"bsvf");

/// Bytes of header at the start of each block.
pub const VERIFY_HEADER_LEN: usize = 32;

/// Why a block failed its check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyError {
    /// Every byte is zero: the block was never written (a hole, or a fresh file).
    NeverWritten,
    /// The block is shorter than a header, or its header's length is not the block's.
    BadLength {
        /// The length in the header.
        found: u32,
        /// The block's length.
        expected: u32,
    },
    /// No magic: the block holds something else.
    BadMagic {
        /// The first four bytes.
        found: u32,
    },
    /// The block was written for another offset (misdirected or another block's data).
    WrongOffset {
        /// The offset in the header.
        found: u64,
    },
    /// The checksum does not match: the block is corrupt or torn.
    BadCrc {
        /// The checksum stored in the header.
        stored: u32,
        /// The checksum of the block as read.
        computed: u32,
        /// The generation the header claims.
        generation: u64,
    },
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NeverWritten => write!(f, "the block is all zeroes (never written)"),
            Self::BadLength { found, expected } => {
                write!(f, "header length {found}, block length {expected}")
            }
            Self::BadMagic { found } => write!(f, "bad magic {found:#010x}"),
            Self::WrongOffset { found } => {
                write!(f, "the block was written for offset {found}")
            }
            Self::BadCrc {
                stored,
                computed,
                generation,
            } => write!(
                f,
                "crc32c {computed:#010x}, header says {stored:#010x} (generation {generation})"
            ),
        }
    }
}

/// Fills `buf` as the block at byte `offset` of generation `generation`. `buf` must be at least
/// [`VERIFY_HEADER_LEN`] bytes (a fio block size is at least 512).
pub fn stamp(buf: &mut [u8], offset: u64, generation: u64) {
    assert!(
        buf.len() >= VERIFY_HEADER_LEN,
        "a verify block is at least 32 bytes"
    );
    let mut x = offset ^ generation.rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15;
    for chunk in buf[VERIFY_HEADER_LEN..].chunks_mut(8) {
        // xorshift64*: cheap, and different for every (offset, generation).
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
    buf[0..4].copy_from_slice(&VERIFY_MAGIC.to_le_bytes());
    let len = buf.len() as u32;
    buf[4..8].copy_from_slice(&len.to_le_bytes());
    buf[8..16].copy_from_slice(&offset.to_le_bytes());
    buf[16..24].copy_from_slice(&generation.to_le_bytes());
    buf[24..32].fill(0);
    let crc = crc32c::crc32c(buf);
    buf[24..28].copy_from_slice(&crc.to_le_bytes());
}

/// Checks the block read at byte `offset`; its generation if it is sound.
pub fn check(buf: &[u8], offset: u64) -> Result<u64, VerifyError> {
    let expected = buf.len() as u32;
    if buf.len() < VERIFY_HEADER_LEN {
        return Err(VerifyError::BadLength { found: 0, expected });
    }
    if buf.iter().all(|&b| b == 0) {
        return Err(VerifyError::NeverWritten);
    }
    let u32_at = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
    let magic = u32_at(0);
    if magic != VERIFY_MAGIC {
        return Err(VerifyError::BadMagic { found: magic });
    }
    let len = u32_at(4);
    if len != expected {
        return Err(VerifyError::BadLength {
            found: len,
            expected,
        });
    }
    let generation = u64_at(16);
    let stored = u32_at(24);
    let mut h = crc32c::crc32c(&buf[..24]);
    h = crc32c::crc32c_append(h, &[0; 4]);
    let computed = crc32c::crc32c_append(h, &buf[28..]);
    if computed != stored {
        return Err(VerifyError::BadCrc {
            stored,
            computed,
            generation,
        });
    }
    let found = u64_at(8);
    if found != offset {
        return Err(VerifyError::WrongOffset { found });
    }
    Ok(generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamped_block_checks_and_says_its_generation() {
        let mut b = vec![0u8; 4096];
        stamp(&mut b, 8192, 7);
        assert_eq!(check(&b, 8192), Ok(7));
    }

    #[test]
    fn corruption_misdirection_tearing_and_holes_are_caught() {
        let mut b = vec![0u8; 4096];
        stamp(&mut b, 8192, 7);
        assert_eq!(
            check(&b, 4096),
            Err(VerifyError::WrongOffset { found: 8192 })
        );
        let mut flipped = b.clone();
        flipped[1000] ^= 1;
        assert!(matches!(
            check(&flipped, 8192),
            Err(VerifyError::BadCrc { .. })
        ));
        let mut newer = vec![0u8; 4096];
        stamp(&mut newer, 8192, 8);
        let mut torn = b.clone();
        torn[2048..].copy_from_slice(&newer[2048..]);
        assert!(matches!(
            check(&torn, 8192),
            Err(VerifyError::BadCrc { .. })
        ));
        assert_eq!(check(&[0u8; 512], 0), Err(VerifyError::NeverWritten));
        assert!(matches!(
            check(&[0xffu8; 512], 0),
            Err(VerifyError::BadMagic { .. })
        ));
        assert!(matches!(
            check(&b[..2048], 8192),
            Err(VerifyError::BadLength { found: 4096, .. })
        ));
    }
}
