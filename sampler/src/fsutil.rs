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

/// How [`open_regular`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read an existing file.
    Read,
    /// Append to an existing file.
    Append,
    /// Read and append, creating the file with this mode if it is missing.
    AppendOrCreate(u32),
    /// Read and write (not truncated), creating the file with this mode if it is missing.
    ReadWriteOrCreate(u32),
    /// Create a new file with this mode; fails if anything (file or symlink) is there.
    CreateNew(u32),
}

/// Opens `path` as a regular file, THE way jobscope opens a file that root may reach through a
/// directory a user controls: `O_NOFOLLOW` (a final symlink is refused, `ELOOP`), `O_CLOEXEC`,
/// and `O_NONBLOCK`, so a FIFO or device planted at the path cannot block the open; the type is
/// then checked on the descriptor (never by path again, which a user could swap between the
/// check and the use), and anything but a regular file is refused. The returned descriptor is
/// blocking again, so reads and writes behave as usual.
pub fn open_regular(path: &Path, access: Access) -> io::Result<File> {
    let mut o = OpenOptions::new();
    match access {
        Access::Read => o.read(true),
        Access::Append => o.append(true),
        Access::AppendOrCreate(mode) => o.read(true).append(true).create(true).mode(mode),
        Access::ReadWriteOrCreate(mode) => o
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(mode),
        Access::CreateNew(mode) => o.write(true).create_new(true).mode(mode),
    };
    let f = o
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    let kind = f.metadata()?.file_type();
    if !kind.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_block_device() || kind.is_char_device() {
            "a device"
        } else {
            "not a regular file"
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what}, not a regular file: refused"),
        ));
    }
    set_blocking(&f)?;
    Ok(f)
}

/// Clears `O_NONBLOCK` (set only so that opening a FIFO could not hang).
fn set_blocking(f: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor `f` owns; F_GETFL/F_SETFL touch only its status flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens a new file for writing; fails if anything (file or symlink) is already there.
pub fn create_new(path: &Path, mode: u32) -> Result<File, FsError> {
    open_regular(path, Access::CreateNew(mode)).map_err(io_err(path))
}

/// Opens an existing regular file for appending, refusing symlinks.
pub fn open_append(path: &Path) -> Result<File, FsError> {
    open_regular(path, Access::Append).map_err(io_err(path))
}

/// Reads a regular file, refusing symlinks, FIFOs and anything above `max_bytes`.
pub fn read_limited(path: &Path, max_bytes: u64) -> Result<Vec<u8>, FsError> {
    use std::io::Read;
    let f = open_regular(path, Access::Read).map_err(|e| match e.kind() {
        io::ErrorKind::InvalidInput => FsError::Unsafe {
            path: path.to_path_buf(),
            why: e.to_string(),
        },
        _ => io_err(path)(e),
    })?;
    let md = f.metadata().map_err(io_err(path))?;
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

    /// Runs `f` in a thread and fails the test if it has not returned within 10 s: only a hang
    /// detector (an open of a FIFO that blocks never returns), far above any honest duration.
    fn without_hanging<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("blocked: the open waited on a FIFO")
    }

    fn mkfifo(path: &Path) {
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    const EVERY_ACCESS: [Access; 5] = [
        Access::Read,
        Access::Append,
        Access::AppendOrCreate(0o600),
        Access::ReadWriteOrCreate(0o600),
        Access::CreateNew(0o600),
    ];

    #[test]
    fn a_fifo_at_the_path_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("cohorts.json");
        mkfifo(&fifo);
        for access in EVERY_ACCESS {
            let p = fifo.clone();
            let r = without_hanging(move || open_regular(&p, access).map(|_| ()));
            assert!(r.is_err(), "{access:?} opened a FIFO");
        }
        // Read and read-write open a FIFO without a peer; the type check on the descriptor refuses it.
        let p = fifo.clone();
        let e = without_hanging(move || open_regular(&p, Access::Read)).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        let p = fifo.clone();
        let e = without_hanging(move || read_limited(&p, 1024)).unwrap_err();
        assert!(matches!(e, FsError::Unsafe { .. }), "{e}");
        // Nothing was created or replaced beside it.
        let md = std::fs::symlink_metadata(&fifo).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&md.file_type()));
    }

    #[test]
    fn a_symlink_at_the_path_is_refused_and_its_target_untouched() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        // A symlink to a FIFO too: following it would block.
        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
        let fifo_link = d.path().join("fifo-link");
        std::os::unix::fs::symlink(&fifo, &fifo_link).unwrap();
        for access in EVERY_ACCESS {
            for l in [&link, &fifo_link] {
                let p = l.clone();
                let r = without_hanging(move || open_regular(&p, access).map(|_| ()));
                assert!(r.is_err(), "{access:?} followed {}", l.display());
            }
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn a_regular_file_opens_blocking_in_each_access() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        let mut w = open_regular(&f, Access::CreateNew(0o600)).unwrap();
        w.write_all(b"ab").unwrap();
        assert!(open_regular(&f, Access::CreateNew(0o600)).is_err());
        open_regular(&f, Access::Append)
            .unwrap()
            .write_all(b"c")
            .unwrap();
        open_regular(&f, Access::AppendOrCreate(0o600))
            .unwrap()
            .write_all(b"d")
            .unwrap();
        let mut rw = open_regular(&f, Access::ReadWriteOrCreate(0o600)).unwrap();
        // The descriptor is blocking again (O_NONBLOCK was only for the open).
        // SAFETY: F_GETFL on a descriptor `rw` owns.
        let flags = unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&rw), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0);
        let mut text = String::new();
        std::io::Read::read_to_string(&mut rw, &mut text).unwrap();
        assert_eq!(text, "abcd");
        let mut r = String::new();
        std::io::Read::read_to_string(&mut open_regular(&f, Access::Read).unwrap(), &mut r)
            .unwrap();
        assert_eq!(r, "abcd");
        let g = d.path().join("g");
        open_regular(&g, Access::ReadWriteOrCreate(0o640)).unwrap();
        assert!(open_regular(&d.path().join("missing"), Access::Read).is_err());
        assert!(open_regular(d.path(), Access::Read).is_err(), "a directory");
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
