//! A scratch XFS file system (fs/xfs) on a loop device over a sparse temporary file: `mkfs.xfs -f`
//! (Debian's xfsprogs), `mount(2)` on a temporary directory, unmounted, detached and removed when
//! the guard drops or on a signal ([`Restore`]s: `umount2(MNT_DETACH)`, `LOOP_CLR_FD`, `rmdir`;
//! the backing file is a [`TempFile`]).
//!
//! Why XFS: its writeback completes an ioend whose folios are dropbehind on its own workqueue
//! (`xfs_end_bio()` → `xfs_ioend_needs_wq_completion()` sees `IOMAP_IOEND_DONTCACHE` → "xfs-conv"
//! per-CPU workqueue → `xfs_end_io()` → `iomap_finish_ioends()` → `folio_end_writeback()` in task
//! context), so DONTCACHE overwrites are dropped on 6.18 where ext4's IRQ completion
//! (`ext4_end_bio()`) keeps them. That workqueue completion is what patch 2/4 replaces with
//! `BIO_COMPLETE_IN_TASK` for every iomap user.

use crate::dev::cleanup::{Blocked, Restore, RestoreAction, TempFile};
use crate::dev::kernel_loop::KernelLoop;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A mounted scratch XFS. Fields drop in order: unmount, detach, mount point, backing file.
pub struct ScratchXfs {
    mountpoint: PathBuf,
    umount: Restore,
    lo: Option<KernelLoop>,
    _rmdir: Restore,
    backing: Option<std::fs::File>,
    _tmp: TempFile,
}

/// Whether `mkfs.xfs` is on the `PATH` (else the reason to skip, in one line).
pub fn mkfs_available() -> Result<(), String> {
    let ok = std::process::Command::new("mkfs.xfs")
        .arg("-V")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err("mkfs.xfs not found (Debian: apt-get install -y xfsprogs)".into())
    }
}

impl std::fmt::Debug for ScratchXfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScratchXfs")
            .field("mountpoint", &self.mountpoint)
            .field("device", &self.device())
            .finish()
    }
}

impl ScratchXfs {
    /// Makes and mounts an XFS of `bytes` (sparse) whose backing file lives in `dir`.
    pub fn create(dir: &Path, bytes: u64) -> Result<ScratchXfs, String> {
        mkfs_available()?;
        crate::dev::space::ensure_fits(dir, bytes, "scratch XFS image")?;
        let tmp = TempFile::create_in(dir, "biosim-dontcache-xfs").map_err(|e| e.to_string())?;
        let backing = std::fs::File::options()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(tmp.path())
            .map_err(|e| format!("open {}: {e}", tmp.path().display()))?;
        backing
            .set_len(bytes)
            .map_err(|e| format!("truncate {}: {e}", tmp.path().display()))?;
        let mountpoint = std::env::temp_dir().join(format!(
            "biosim-dontcache-xfs-mnt-{}-{}",
            std::process::id(),
            tmp.path()
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| s.rsplit('-').next())
                .unwrap_or("0")
        ));
        let blocked = Blocked::new();
        std::fs::create_dir(&mountpoint)
            .map_err(|e| format!("mkdir {}: {e}", mountpoint.display()))?;
        let rmdir = Restore::register(RestoreAction::Rmdir {
            path: mountpoint.clone(),
        });
        drop(blocked);
        let rmdir = rmdir.map_err(|e| {
            let _ = std::fs::remove_dir(&mountpoint);
            e.to_string()
        })?;
        let lo = crate::calibrate::loop_cal::live::attach(tmp.path()).map_err(|e| e.to_string())?;
        let dev = lo.dev_path().display().to_string();
        let out = std::process::Command::new("mkfs.xfs")
            .args(["-f", "-q", &dev])
            .output()
            .map_err(|e| format!("mkfs.xfs {dev}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mkfs.xfs -f -q {dev}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let c_dev = CString::new(dev.as_bytes()).map_err(|_| "NUL in the device path")?;
        let c_mnt = CString::new(mountpoint.as_os_str().as_bytes())
            .map_err(|_| "NUL in the mount point")?;
        let blocked = Blocked::new();
        // SAFETY: valid NUL-terminated strings; no mount data.
        let rc = unsafe {
            libc::mount(
                c_dev.as_ptr(),
                c_mnt.as_ptr(),
                c"xfs".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            drop(blocked);
            return Err(format!("mount -t xfs {dev} {}: {e}", mountpoint.display()));
        }
        let umount = Restore::register(RestoreAction::Umount {
            path: mountpoint.clone(),
        });
        drop(blocked);
        let umount = match umount {
            Ok(u) => u,
            Err(e) => {
                // SAFETY: unmounting what we just mounted.
                unsafe { libc::umount2(c_mnt.as_ptr(), libc::MNT_DETACH) };
                return Err(e.to_string());
            }
        };
        Ok(ScratchXfs {
            mountpoint,
            umount,
            lo: Some(lo),
            _rmdir: rmdir,
            backing: Some(backing),
            _tmp: tmp,
        })
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.mountpoint
    }

    /// The loop device, e.g. `/dev/loop0`.
    pub fn device(&self) -> String {
        self.lo
            .as_ref()
            .map_or_else(String::new, |l| l.dev_path().display().to_string())
    }

    /// Unmounts (a plain `umount2(0)`, so a busy file system is an error), detaches and removes
    /// everything; errors name what failed (the guards still clean up on drop).
    pub fn finish(mut self) -> Result<(), String> {
        let c_mnt = CString::new(self.mountpoint.as_os_str().as_bytes())
            .map_err(|_| "NUL in the mount point")?;
        // SAFETY: unmounting our own mount.
        if unsafe { libc::umount2(c_mnt.as_ptr(), 0) } != 0 {
            return Err(format!(
                "umount {}: {}",
                self.mountpoint.display(),
                std::io::Error::last_os_error()
            ));
        }
        let _ = &self.umount;
        drop(self.lo.take());
        drop(self.backing.take());
        Ok(())
    }
}
