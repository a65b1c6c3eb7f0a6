//! The one error type of the cgroup and `/proc` readers.
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
use std::io;
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
    fn malformed_line_is_bounded() {
        let long = "é".repeat(1000);
        match Error::malformed("/x", &long) {
            Error::Malformed { line, .. } => assert_eq!(line.chars().count(), MAX_LINE_CHARS + 1),
            e => panic!("{e:?}"),
        }
    }
}
