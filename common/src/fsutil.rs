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

use jobscope_model::text::escape_hidden;

/// A file error, one line: the path escaped ([`escape_hidden`]), whatever characters it holds.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{}: {source}", escape_hidden(&path.to_string_lossy()))]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: refusing to use it: {}", escape_hidden(&path.to_string_lossy()), escape_hidden(why))]
    Unsafe { path: PathBuf, why: String },
}

pub fn io_err(path: &Path) -> impl FnOnce(io::Error) -> FsError + '_ {
    move |source| FsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// An error and its causes on one line, `what: why: root cause`, each said once: a cause whose
/// text already ends the line is left out ([`FsError::Io`] prints its OS error and also has it as
/// its source, so `{:#}` would say "No such file or directory" twice). One line whatever the
/// errors echo: a control, bidi or invisible character any of them let through is escaped
/// ([`escape_hidden`]).
pub fn error_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    escape_hidden(&line).into_owned()
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

/// The most symlinks [`create_output`] follows in one path (the kernel's own limit, `MAXSYMLINKS`).
const MAX_LINK_HOPS: usize = 40;

/// Creates `path` for writing: THE way jobscope creates a file at a path a person named (`--output`),
/// which root may be asked to write into a directory a user controls.
///
/// Every component is resolved by hand, each directory opened with `openat(O_PATH|O_NOFOLLOW)` from
/// the one before, so what was checked is what is used (a user cannot swap a directory for a link
/// between a check and the open). A symlink on the way is followed only when root or the caller owns
/// it: whoever owns a link decides where it leads, and a link root or the caller made is their own
/// decision (the rule of the kernel's `protected_symlinks`, applied to every component, not only
/// in sticky directories); refusing every link would break ordinary paths such as `/var/run`, while
/// following a link another user planted is how root gets tricked into truncating `/etc/shadow`.
/// The link's owner and target are read from one descriptor of the link itself, so it cannot be
/// replaced between the two. The file itself is created with `O_EXCL|O_NOFOLLOW|O_NONBLOCK`: a
/// symlink, FIFO, device or file already at the name is refused, never opened, never truncated.
/// `mode` is filtered by the umask, as for any new file.
pub fn create_output(path: &Path, mode: u32) -> Result<File, FsError> {
    use std::collections::VecDeque;
    use std::ffi::OsString;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::path::Component;

    let unsafe_path = |why: String| FsError::Unsafe {
        path: path.to_path_buf(),
        why,
    };
    let Some(name) = path.file_name().filter(|_| {
        !matches!(
            path.components().next_back(),
            Some(Component::ParentDir | Component::CurDir)
        )
    }) else {
        return Err(unsafe_path("not a file name".into()));
    };
    let name = CString::new(name.as_bytes()).map_err(|_| unsafe_path("NUL in the name".into()))?;
    let open_at = |dir: Option<&OwnedFd>, name: &[u8], flags: i32| -> io::Result<OwnedFd> {
        let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let at = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
        // SAFETY: c is NUL-terminated; `at` is AT_FDCWD or a descriptor we own.
        let fd = unsafe { libc::openat(at, c.as_ptr(), flags | libc::O_CLOEXEC, 0o600) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just opened and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let path_flags = libc::O_PATH | libc::O_NOFOLLOW;
    let root = || open_at(None, b"/", path_flags | libc::O_DIRECTORY);
    // `None`: the current directory (a relative path), which the caller already stands in.
    let mut dir: Option<OwnedFd> = None;
    let mut todo: VecDeque<OsString> = VecDeque::new();
    let parent = path.parent().unwrap_or(Path::new(""));
    if parent.is_absolute() {
        dir = Some(root().map_err(io_err(Path::new("/")))?);
    }
    for c in parent.components() {
        match c {
            Component::Normal(n) => todo.push_back(n.to_os_string()),
            Component::ParentDir => todo.push_back("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut hops = 0;
    while let Some(comp) = todo.pop_front() {
        let fd = open_at(dir.as_ref(), comp.as_bytes(), path_flags).map_err(io_err(path))?;
        let md = File::from(fd.try_clone().map_err(io_err(path))?)
            .metadata()
            .map_err(io_err(path))?;
        if md.is_dir() {
            dir = Some(fd);
            continue;
        }
        if !md.file_type().is_symlink() {
            return Err(unsafe_path(format!(
                "{} is not a directory",
                comp.to_string_lossy()
            )));
        }
        if md.uid() != 0 && md.uid() != me {
            return Err(unsafe_path(format!(
                "{} is a symlink owned by uid {}, neither root nor the caller: not followed",
                comp.to_string_lossy(),
                md.uid()
            )));
        }
        hops += 1;
        if hops > MAX_LINK_HOPS {
            return Err(unsafe_path("too many symlinks".into()));
        }
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: fd is an O_PATH descriptor of the link; an empty name reads the link itself.
        let n = unsafe {
            libc::readlinkat(
                fd.as_raw_fd(),
                c"".as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io_err(path)(io::Error::last_os_error()));
        }
        buf.truncate(n as usize);
        let target = PathBuf::from(std::ffi::OsStr::from_bytes(&buf));
        if target.is_absolute() {
            dir = Some(root().map_err(io_err(Path::new("/")))?);
        }
        for c in target.components().rev() {
            match c {
                Component::Normal(n) => todo.push_front(n.to_os_string()),
                Component::ParentDir => todo.push_front("..".into()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    }
    let at = dir.as_ref().map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: name is NUL-terminated; `at` is AT_FDCWD or a directory descriptor we own.
    let fd = unsafe {
        libc::openat(
            at,
            name.as_ptr(),
            libc::O_WRONLY
                | libc::O_CREAT
                | libc::O_EXCL
                | libc::O_NOFOLLOW
                | libc::O_NONBLOCK
                | libc::O_CLOEXEC,
            mode,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::AlreadyExists {
            // Say what is there, read without following it.
            let what = match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => "a symlink",
                Ok(m) if m.is_file() => "a file",
                Ok(m) if m.is_dir() => "a directory",
                _ => "something",
            };
            return Err(unsafe_path(format!(
                "{what} is already there (a new file is made, nothing is replaced)"
            )));
        }
        return Err(io_err(path)(e));
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    set_blocking(&f).map_err(io_err(path))?;
    Ok(f)
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
    fn an_error_line_says_each_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("the index at /x is missing or damaged")]
        struct Outer(#[source] FsError);
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Other(#[source] io::Error);
        let e = Outer(io_err(Path::new("/x/state.json"))(io::Error::from(
            io::ErrorKind::NotFound,
        )));
        assert_eq!(
            error_line(&e),
            "the index at /x is missing or damaged: /x/state.json: entity not found"
        );
        // A cause the line does not end with yet is said.
        let e = Other(io::Error::other("inner"));
        assert_eq!(error_line(&e), "outer: inner");
        // One line, whatever a path or a cause holds: CR, LF, ESC and bidi overrides escaped.
        let e = Outer(io_err(Path::new("/x/a\r\nFAKE\u{1b}[2J\u{202E}"))(
            io::Error::other("bad\nthing"),
        ));
        assert_eq!(
            error_line(&e),
            "the index at /x is missing or damaged: /x/a\\r\\nFAKE\\u{1b}[2J\\u{202e}: bad\\nthing"
        );
    }

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

    /// A file's bytes and mode, to show that a refused write left it as it was.
    fn bytes_and_mode(p: &Path) -> (Vec<u8>, u32) {
        let md = std::fs::metadata(p).unwrap();
        (std::fs::read(p).unwrap(), md.mode() & 0o7777)
    }

    /// One line naming the path, as the CLI prints it.
    fn assert_one_line_naming(e: &FsError, path: &Path) {
        let s = e.to_string();
        assert!(!s.contains('\n'), "{s}");
        assert!(s.starts_with(&format!("{}: ", path.display())), "{s}");
    }

    #[test]
    fn create_output_refuses_a_link_fifo_or_file_at_the_name_and_leaves_targets_untouched() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o640)).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
        let existing = d.path().join("existing");
        std::fs::write(&existing, b"old").unwrap();
        std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o600)).unwrap();
        let before = [bytes_and_mode(&victim), bytes_and_mode(&existing)];
        for (p, what) in [
            (&link, "a symlink"),
            (&fifo, "something"),
            (&existing, "a file"),
        ] {
            let q = p.clone();
            let e = without_hanging(move || create_output(&q, 0o644).map(|_| ()))
                .expect_err("opened what was there");
            assert_one_line_naming(&e, p);
            assert!(e.to_string().contains(what), "{e}");
        }
        assert_eq!([bytes_and_mode(&victim), bytes_and_mode(&existing)], before);
        assert_eq!(std::fs::read_link(&link).unwrap(), victim);
        // A new name is created, writable, in the directory named.
        let new = d.path().join("new");
        create_output(&new, 0o600)
            .unwrap()
            .write_all(b"report")
            .unwrap();
        assert_eq!(std::fs::read(&new).unwrap(), b"report");
    }

    #[test]
    fn create_output_refuses_a_parent_link_another_user_owns_and_follows_roots() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: planting a link owned by another user needs root");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let target_dir = d.path().join("etc");
        std::fs::create_dir(&target_dir).unwrap();
        let victim = target_dir.join("shadow");
        std::fs::write(&victim, b"root:x").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let before = bytes_and_mode(&victim);
        // A user's directory holding a link to root's directory, and the link is the user's.
        let home = d.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let planted = home.join("reports");
        std::os::unix::fs::symlink(&target_dir, &planted).unwrap();
        std::os::unix::fs::lchown(&planted, Some(65534), Some(65534)).unwrap();
        for p in [
            planted.join("shadow"),
            planted.join("new.csv"),
            // Deeper, and reached through `..`: still through the link.
            planted.join("..").join("reports").join("x"),
        ] {
            let e = create_output(&p, 0o644).expect_err("followed the planted link");
            assert_one_line_naming(&e, &p);
            assert!(e.to_string().contains("uid 65534"), "{e}");
        }
        assert_eq!(bytes_and_mode(&victim), before);
        let names: Vec<_> = std::fs::read_dir(&target_dir).unwrap().collect();
        assert_eq!(names.len(), 1, "a file was made through the link");
        // The same link, root's: root's own decision, followed.
        std::os::unix::fs::lchown(&planted, Some(0), Some(0)).unwrap();
        create_output(&planted.join("new.csv"), 0o644).unwrap();
        assert!(target_dir.join("new.csv").is_file());
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
