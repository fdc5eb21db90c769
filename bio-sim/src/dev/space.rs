//! Room on the filesystem a backing file is created on: `statvfs(3)`'s `f_bavail * f_frsize`
//! (what an unprivileged writer may still use), checked before biosim creates or fills a file,
//! so a bench never writes the disk full.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Space left on the filesystem a run needs to keep free beyond its own file: 1 GiB or 5% of the
/// filesystem, whichever is smaller, so the machine stays usable.
pub fn reserve(total: u64) -> u64 {
    (1u64 << 30).min(total / 20)
}

/// Bytes available to this process on the filesystem holding `dir`, and the filesystem's size.
pub fn available(dir: &Path) -> io::Result<(u64, u64)> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: `st` is plain old data; statvfs fills it and reads only the NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `st` a valid out-pointer for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok((st.f_bavail as u64 * frsize, st.f_blocks as u64 * frsize))
}

/// Refuses a file of `bytes` in `dir` (named `what` in the message) unless it fits with
/// [`reserve`] to spare.
pub fn ensure_fits(dir: &Path, bytes: u64, what: &str) -> Result<(), String> {
    let (avail, total) =
        available(dir).map_err(|e| format!("{what}: statvfs {}: {e}", dir.display()))?;
    let keep = reserve(total);
    if bytes.saturating_add(keep) > avail {
        return Err(format!(
            "{what}: {} MiB does not fit in {}: {} MiB free, and biosim keeps {} MiB of it free",
            bytes.div_ceil(1 << 20),
            dir.display(),
            avail >> 20,
            keep >> 20
        ));
    }
    Ok(())
}
