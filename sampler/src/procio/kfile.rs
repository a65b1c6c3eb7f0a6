//! Kernel pseudo-files (cgroupfs, procfs): the one read error of the cgroup and `/proc` readers,
//! and [`KernelFile`], a file kept open across samples and read with `pread`.
//!
//! It sits below both [`crate::cgroup`] and [`crate::procio`] (cgroup → procio → here), so neither
//! reader imports the other's internals.
//!
//! Callers must be able to branch on *why* a read failed, because the answers differ:
//! - [`Error::Gone`]: the cgroup was removed (or the process exited). At the end of a job this is the
//!   normal outcome, not a fault: the sampler stops, nothing is logged as an error.
//! - [`Error::Unsupported`]: the kernel has the file but refuses to read it (PSI files when booted
//!   with `psi=0` answer `EOPNOTSUPP`). The value is simply not available.
//! - [`Error::Io`]: anything else (`EACCES`, `EIO` ...); worth logging once.
//! - [`Error::Malformed`]: the file was read but a line we rely on did not parse; worth logging once.
//!
//! Every variant carries the path, so a log line is actionable without extra context.
//!
//! Why kept descriptors: one sample reads a dozen cgroup files and one `/proc/<pid>/io` per
//! process. Re-opening each one costs a path walk and a kernfs open/release every time, several
//! times the `pread` itself (`cargo bench -p jobscope-sampler --bench sampler` prints both). A kept
//! cgroupfs descriptor whose cgroup was removed answers `ENODEV`, and a kept `/proc/<pid>/io`
//! whose process was reaped answers `ESRCH` (also after the pid was reused), so "gone" is still
//! seen. On plain files (fixture trees) a removed file stays readable through its descriptor;
//! [`KernelFile::is_unlinked`] tells that case.
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Longest offending line kept in [`Error::Malformed`]; a broken file must not make a huge log line.
const MAX_LINE_CHARS: usize = 160;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `ENOENT` or `ENODEV` (the cgroup was removed, also after the file was opened), or `ESRCH`
    /// (the process exited while its `/proc` files were read).
    #[error("{}: gone", path.display())]
    Gone { path: PathBuf },
    /// `EOPNOTSUPP`: the kernel knows the file but does not provide it (e.g. PSI disabled).
    #[error("{}: not supported by this kernel", path.display())]
    Unsupported { path: PathBuf },
    /// Any other I/O error (permission denied, EIO ...).
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A line we need did not parse (truncated to a few dozen characters).
    #[error("{}: malformed line {line:?}", path.display())]
    Malformed { path: PathBuf, line: String },
}

impl Error {
    /// Classifies an I/O error from opening or reading `path`.
    pub fn from_io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        let path = path.into();
        match source.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ESRCH) => Error::Gone { path },
            Some(libc::EOPNOTSUPP) => Error::Unsupported { path },
            _ if source.kind() == io::ErrorKind::NotFound => Error::Gone { path },
            _ => Error::Io { path, source },
        }
    }

    /// A malformed-content error; `line` is cut to a bounded length on a char boundary.
    pub fn malformed(path: impl Into<PathBuf>, line: &str) -> Self {
        let line = match line.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => format!("{}…", &line[..cut]),
            None => line.to_owned(),
        };
        Error::Malformed {
            path: path.into(),
            line,
        }
    }

    /// The file (or `/proc/<pid>` directory) the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Error::Gone { path } | Error::Unsupported { path } => path,
            Error::Io { path, .. } | Error::Malformed { path, .. } => path,
        }
    }

    /// True for [`Error::Gone`]: the cgroup or process no longer exists.
    pub fn is_gone(&self) -> bool {
        matches!(self, Error::Gone { .. })
    }

    /// True for "the value is not there" (gone or unsupported), which readers turn into `None`
    /// without reporting a problem.
    pub fn is_absent(&self) -> bool {
        matches!(self, Error::Gone { .. } | Error::Unsupported { .. })
    }

    /// True when the error is `EACCES`/`EPERM` (reading other users' `/proc/<pid>/io` without
    /// `CAP_SYS_PTRACE`).
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == io::ErrorKind::PermissionDenied)
    }
}

/// Largest file [`read_all`] accepts. A cgroup file this big is not one SLURM makes (a
/// `cgroup.procs` of 100 000 pids is ~700 KiB); the bound keeps a runaway file from taking the
/// sampler's memory.
pub const MAX_FILE_BYTES: usize = 8 << 20;
/// Buffers above this size are shrunk back after use rather than kept for the job's lifetime.
const MAX_KEPT_BUFFER: usize = 1 << 20;
/// First size of a read buffer: every cgroup control file SLURM's job cgroups hold fits.
const INITIAL_BUFFER: usize = 8 << 10;

/// A reusable read buffer. Its bytes stay initialised between reads, so a read costs no zeroing.
#[derive(Debug, Default)]
pub struct ReadBuf {
    bytes: Vec<u8>,
}

impl ReadBuf {
    pub fn new() -> Self {
        ReadBuf {
            bytes: vec![0; INITIAL_BUFFER],
        }
    }

    /// Reads all of `file` from offset 0 and returns it as text. Loops until `pread` returns 0:
    /// on kernfs a short read is not end of file (a seq_file hands out whole records only).
    pub fn read_all(&mut self, file: &File, path: &Path) -> Result<&str, Error> {
        let bytes = self.read_all_bytes(file, path)?;
        std::str::from_utf8(bytes).map_err(|_| Error::malformed(path, "<not UTF-8>"))
    }

    /// [`ReadBuf::read_all`] as bytes: for files that hold what a user wrote (a process's `comm`
    /// in `/proc/<pid>/stat`), which need not be UTF-8.
    pub fn read_all_bytes(&mut self, file: &File, path: &Path) -> Result<&[u8], Error> {
        if self.bytes.len() < INITIAL_BUFFER {
            self.bytes.resize(INITIAL_BUFFER, 0);
        }
        let mut filled = 0usize;
        loop {
            if filled == self.bytes.len() {
                if self.bytes.len() >= MAX_FILE_BYTES {
                    return Err(Error::malformed(path, "<file larger than 8 MiB>"));
                }
                let grown = (self.bytes.len() * 2).min(MAX_FILE_BYTES);
                self.bytes.resize(grown, 0);
            }
            match file.read_at(&mut self.bytes[filled..], filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::from_io(path, e)),
            }
        }
        Ok(&self.bytes[..filled])
    }

    /// Gives back memory a huge file made the buffer take.
    pub fn shrink(&mut self) {
        if self.bytes.len() > MAX_KEPT_BUFFER {
            self.bytes = vec![0; INITIAL_BUFFER];
        }
    }
}

/// Opens `path` read-only, close-on-exec, not following a final symlink (a cgroup or `/proc`
/// file is never a symlink; a planted one is refused, `ELOOP`, an I/O error).
pub fn open_file(path: &Path) -> Result<File, Error> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Error::from_io(path, e))
}

/// Opens a directory (for `openat` and for its link count), close-on-exec, not following a
/// final symlink.
pub fn open_dir(path: &Path) -> Result<File, Error> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_DIRECTORY)
        .open(path)
        .map_err(|e| Error::from_io(path, e))
}

/// Opens `name` (one path component) relative to the open directory `dir`, like [`open_file`].
/// `path` is only for the error.
pub fn open_at(dir: &File, name: &str, path: &Path) -> Result<File, Error> {
    let mut c_name = [0u8; 64];
    let bytes = name.as_bytes();
    if bytes.len() >= c_name.len() || bytes.contains(&0) || bytes.contains(&b'/') {
        return Err(Error::malformed(path, "<bad file name>"));
    }
    c_name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: `c_name` is NUL-terminated (zero-filled past `bytes`), `dir` is an open descriptor.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c_name.as_ptr().cast(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return Err(Error::from_io(path, io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just returned by openat and is owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Reads a whole file by path (open, read, close) into `buf`.
pub fn read_path<'b>(path: &Path, buf: &'b mut ReadBuf) -> Result<&'b str, Error> {
    let f = open_file(path)?;
    buf.read_all(&f, path)
}

/// The link count of an open file or directory. 0 means it was removed (plain filesystems); a
/// directory's count is 2 + its subdirectories, on cgroupfs too, so a change says that a child
/// cgroup appeared or went away.
pub fn link_count(f: &File, path: &Path) -> Result<u64, Error> {
    f.metadata()
        .map(|m| m.nlink())
        .map_err(|e| Error::from_io(path, e))
}

/// True when `path` is on procfs: there a kept `/proc/<pid>/io` answers `ESRCH` once its process
/// is gone, elsewhere (fake trees in tests) the link count must be asked.
pub fn is_procfs(path: &Path) -> bool {
    fs_magic_of_path(path) == Some(PROC_SUPER_MAGIC)
}

const PROC_SUPER_MAGIC: i64 = 0x9fa0;
/// `CGROUP_SUPER_MAGIC` (include/uapi/linux/magic.h): a cgroup v1 hierarchy.
const CGROUP_SUPER_MAGIC: i64 = 0x27e0eb;
/// `CGROUP2_SUPER_MAGIC`: the cgroup v2 (unified) hierarchy.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// Which filesystem a cgroup directory is on; it decides how its pid lists may be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupFs {
    /// cgroup v1: `cgroup.procs`/`tasks` are served from a pid list the kernel caches.
    V1,
    /// cgroup v2: `cgroup.procs`/`cgroup.threads` are walked afresh at each read from offset 0.
    V2,
    /// Anything else (a fixture tree on ext4 or tmpfs), or unknown: plain files, no cache.
    Other,
}

impl CgroupFs {
    fn from_magic(magic: Option<i64>) -> CgroupFs {
        match magic {
            Some(CGROUP_SUPER_MAGIC) => CgroupFs::V1,
            Some(CGROUP2_SUPER_MAGIC) => CgroupFs::V2,
            _ => CgroupFs::Other,
        }
    }

    /// The filesystem of an open file or directory (`fstatfs`).
    pub fn of_file(f: &File) -> CgroupFs {
        // SAFETY: `f` is an open descriptor; `st` is plain data the call fills.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) };
        CgroupFs::from_magic((rc == 0).then_some(st.f_type as i64))
    }

    /// The filesystem `path` is on (`statfs`).
    pub fn of_path(path: &Path) -> CgroupFs {
        CgroupFs::from_magic(fs_magic_of_path(path))
    }
}

/// `statfs(path).f_type`, `None` when the call fails.
fn fs_magic_of_path(path: &Path) -> Option<i64> {
    let mut c_path = Vec::with_capacity(path.as_os_str().len() + 1);
    c_path.extend_from_slice(path.as_os_str().as_bytes());
    c_path.push(0);
    if c_path[..c_path.len() - 1].contains(&0) {
        return None;
    }
    // SAFETY: `c_path` is NUL-terminated; `st` is plain data the call fills.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c_path.as_ptr().cast(), &mut st) };
    (rc == 0).then_some(st.f_type as i64)
}

/// The soft limit on open descriptors of this process (`RLIMIT_NOFILE`), 1024 if unknown.
pub fn nofile_soft_limit() -> u64 {
    // SAFETY: `r` is plain data the call fills.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 {
        r.rlim_cur
    } else {
        1024
    }
}

/// Descriptors one reader may keep open: a share of `RLIMIT_NOFILE` (slurmstepd must keep
/// most of its limit for itself), at most `cap`. Past it, files are opened for each read.
pub fn fd_allowance(share_divisor: u64, cap: usize) -> usize {
    let soft = nofile_soft_limit();
    usize::try_from(soft / share_divisor.max(1))
        .unwrap_or(usize::MAX)
        .min(cap)
}

/// One control file, kept open when the descriptor allowance permits, else opened for each read.
#[derive(Debug)]
pub struct KernelFile {
    path: PathBuf,
    file: Option<File>,
}

impl KernelFile {
    /// Opens `path`, keeping the descriptor when `keep` is true. A missing file is an error
    /// (`Gone`), so callers can tell "absent" once and not retry every sample.
    pub fn open(path: PathBuf, keep: bool) -> Result<KernelFile, Error> {
        let file = open_file(&path)?;
        Ok(KernelFile {
            path,
            file: keep.then_some(file),
        })
    }

    /// Wraps a file already open (read-only) at `path`.
    pub fn from_open(path: PathBuf, file: File) -> KernelFile {
        KernelFile {
            path,
            file: Some(file),
        }
    }

    /// True when the descriptor is kept open.
    pub fn is_kept(&self) -> bool {
        self.file.is_some()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the whole file (`pread` from offset 0 on the kept descriptor, else open + read).
    pub fn read<'b>(&self, buf: &'b mut ReadBuf) -> Result<&'b str, Error> {
        match &self.file {
            Some(f) => buf.read_all(f, &self.path),
            None => read_path(&self.path, buf),
        }
    }

    /// True when the kept file was removed (link count 0): on plain filesystems a removed file
    /// stays readable through its descriptor. Always false for a file opened per read.
    pub fn is_unlinked(&self) -> bool {
        match &self.file {
            Some(f) => link_count(f, &self.path).is_ok_and(|n| n == 0),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_classification() {
        let p = Path::new("/x");
        assert!(Error::from_io(p, io::Error::from_raw_os_error(libc::ENOENT)).is_gone());
        assert!(Error::from_io(p, io::Error::from_raw_os_error(libc::ENODEV)).is_gone());
        assert!(Error::from_io(p, io::Error::from_raw_os_error(libc::ESRCH)).is_gone());
        assert!(matches!(
            Error::from_io(p, io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
            Error::Unsupported { .. }
        ));
        let e = Error::from_io(p, io::Error::from_raw_os_error(libc::EACCES));
        assert!(e.is_permission_denied() && !e.is_absent());
        assert_eq!(e.path(), p);
    }

    #[test]
    fn cgroup_fs_of_plain_and_cgroup_directories() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(CgroupFs::of_path(tmp.path()), CgroupFs::Other);
        assert_eq!(
            CgroupFs::of_file(&open_dir(tmp.path()).unwrap()),
            CgroupFs::Other
        );
        assert_eq!(CgroupFs::of_path(&tmp.path().join("none")), CgroupFs::Other);
        // The host's own hierarchies, where mounted (statfs(2) reports the mount's type).
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        for line in mounts.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let want = match f.get(2) {
                Some(&"cgroup") => CgroupFs::V1,
                Some(&"cgroup2") => CgroupFs::V2,
                _ => continue,
            };
            let dir = Path::new(f[1]);
            assert_eq!(CgroupFs::of_path(dir), want, "{line}");
            if let Ok(d) = open_dir(dir) {
                assert_eq!(CgroupFs::of_file(&d), want, "{line}");
            }
        }
    }

    #[test]
    fn malformed_line_is_bounded() {
        let long = "é".repeat(1000);
        match Error::malformed("/x", &long) {
            Error::Malformed { line, .. } => assert_eq!(line.chars().count(), MAX_LINE_CHARS + 1),
            e => panic!("{e:?}"),
        }
    }
}
