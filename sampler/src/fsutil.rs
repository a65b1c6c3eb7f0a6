//! File-system helpers for directories root writes into (spool, handover, archive).
//!
//! Every path here may sit under a directory a user can influence (a mis-set spool dir, a user's own
//! archive copy directory), so: directories are checked with `lstat` (a symlink is refused, not
//! followed), files are created with `O_EXCL | O_NOFOLLOW` and published with `rename`, which replaces a
//! planted symlink instead of writing through it, and names are validated before they are joined.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: refusing to use it: {why}")]
    Unsafe { path: PathBuf, why: String },
}

pub fn io_err(path: &Path) -> impl FnOnce(io::Error) -> FsError + '_ {
    move |source| FsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A name that may be joined to a directory: no separators, no `..`, no control characters.
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name != "."
        && name != ".."
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+'))
}

/// Creates `path` (and missing parents, as 0755 root) if needed, then insists that `path` itself is a real
/// directory (not a symlink) owned by `uid`, that no one else can write to it, and sets `mode`.
pub fn ensure_dir(path: &Path, mode: u32, uid: u32, gid: u32) -> Result<(), FsError> {
    if let Some(parent) = path.parent() {
        if !parent.as_os_str().is_empty() && std::fs::symlink_metadata(parent).is_err() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
    }
    match std::fs::create_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(FsError::Io {
                path: path.to_path_buf(),
                source: e,
            })
        }
    }
    let md = std::fs::symlink_metadata(path).map_err(io_err(path))?;
    if md.file_type().is_symlink() || !md.is_dir() {
        return Err(FsError::Unsafe {
            path: path.to_path_buf(),
            why: "not a directory (symlink?)".into(),
        });
    }
    if md.uid() != uid || md.gid() != gid {
        // Only root may hand a directory to another owner; if we are not root this fails and is reported.
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(io_err(path))?;
    }
    if md.mode() & 0o7777 != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(io_err(path))?;
    }
    Ok(())
}

/// Opens a new file for writing; fails if anything (file or symlink) is already there.
pub fn create_new(path: &Path, mode: u32) -> Result<File, FsError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io_err(path))
}

/// Opens an existing regular file for appending, refusing symlinks.
pub fn open_append(path: &Path) -> Result<File, FsError> {
    OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io_err(path))
}

/// Reads a regular file, refusing symlinks and anything above `max_bytes`.
pub fn read_limited(path: &Path, max_bytes: u64) -> Result<Vec<u8>, FsError> {
    use std::io::Read;
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io_err(path))?;
    let md = f.metadata().map_err(io_err(path))?;
    if !md.is_file() {
        return Err(FsError::Unsafe {
            path: path.to_path_buf(),
            why: "not a regular file".into(),
        });
    }
    if md.len() > max_bytes {
        return Err(FsError::Unsafe {
            path: path.to_path_buf(),
            why: format!("{} bytes, more than the {max_bytes} allowed", md.len()),
        });
    }
    let mut buf = Vec::with_capacity(md.len() as usize);
    f.take(max_bytes + 1)
        .read_to_end(&mut buf)
        .map_err(io_err(path))?;
    Ok(buf)
}

/// Writes `bytes` to `dir/name` atomically: a new temp file (`O_EXCL|O_NOFOLLOW`), `fchown`, `fsync`,
/// `rename` over the target, then `fsync` of the directory, so a crash leaves the old or the new file,
/// never a partial one.
pub fn write_atomic(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
) -> Result<PathBuf, FsError> {
    if !is_safe_name(name) {
        return Err(FsError::Unsafe {
            path: dir.join(name),
            why: "unsafe file name".into(),
        });
    }
    let target = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let mut f = create_new(&tmp, mode)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::fchown(&f, Some(uid), Some(gid)).map_err(io_err(&tmp))?;
        }
        // create_new's mode is filtered by the umask; set it exactly.
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(io_err(&tmp))?;
        f.write_all(bytes).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, &target).map_err(io_err(&target))?;
        sync_dir(dir);
        Ok(target.clone())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Best-effort `fsync` of a directory so a rename in it is durable.
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Free bytes for unprivileged users on the filesystem holding `path`.
pub fn free_bytes(path: &Path) -> Option<u64> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid NUL-terminated string, st is a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_safe_name("1234.json"));
        assert!(is_safe_name("42.node-1"));
        for bad in [
            "", "..", ".", "../x", "a/b", ".hidden", "a\nb", "a b", "x\0",
        ] {
            assert!(!is_safe_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn atomic_write_replaces_planted_symlink_instead_of_following_it() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join("out.json")).unwrap();
        write_atomic(d.path(), "out.json", b"new", 0o640, None).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(d.path().join("out.json")).unwrap(), b"new");
        let md = std::fs::symlink_metadata(d.path().join("out.json")).unwrap();
        assert!(md.is_file());
        assert_eq!(md.mode() & 0o777, 0o640);
    }

    #[test]
    fn ensure_dir_refuses_symlink() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let me = unsafe { (libc::geteuid(), libc::getegid()) };
        let e = ensure_dir(&link, 0o700, me.0, me.1).unwrap_err();
        assert!(matches!(e, FsError::Unsafe { .. }), "{e}");
        ensure_dir(&d.path().join("new/sub"), 0o700, me.0, me.1).unwrap();
        let md = std::fs::metadata(d.path().join("new/sub")).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o700);
    }

    #[test]
    fn read_limited_refuses_symlink_and_big_files() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, vec![0u8; 100]).unwrap();
        assert_eq!(read_limited(&f, 100).unwrap().len(), 100);
        assert!(read_limited(&f, 99).is_err());
        std::os::unix::fs::symlink(&f, d.path().join("l")).unwrap();
        assert!(read_limited(&d.path().join("l"), 1000).is_err());
    }
}
