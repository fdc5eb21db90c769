//! What the real-file benches share: their error and size parsing (`64M`); their scratch file is
//! [`crate::dev::space::scratch_file`].

use crate::dev::backing::BackingError;
use crate::runtime::threaded::ThreadedError;
use std::path::{Path, PathBuf};

/// What can stop a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The backing file could not be opened or prepared.
    #[error(transparent)]
    Backing(#[from] BackingError),
    /// I/O on the backing file failed outside the model.
    #[error("{what} on {path}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The simulated machine failed.
    #[error("the simulated machine: {0}")]
    Machine(String),
    /// A bad parameter.
    #[error("{0}")]
    Param(String),
}

impl From<ThreadedError> for BenchError {
    fn from(e: ThreadedError) -> Self {
        BenchError::Machine(e.to_string())
    }
}

/// Maps an I/O error of `what` on `path` to [`BenchError::Io`].
pub(super) fn io_err(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> BenchError {
    let (what, path) = (what.to_owned(), path.to_owned());
    move |source| BenchError::Io { what, path, source }
}

/// Parses a size such as `64M`, `1G`, `4096`, `512K`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("size `{s}`: unknown suffix `{c}` (use K, M or G)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("size `{s}`: expected a number with an optional K, M or G suffix"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size `{s}`: too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_or_say_what_is_wrong() {
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("12X").unwrap_err().contains("unknown suffix"));
        assert!(parse_size("M").unwrap_err().contains("expected a number"));
        assert!(parse_size("99999999999G")
            .unwrap_err()
            .contains("too large"));
    }
}
