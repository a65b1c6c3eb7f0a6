//! The batch script's SHA-256, so that the archive can tell "the same script" under any job name
//! (issue 10: right-sizing from earlier runs of the same name or the same script).
//!
//! Where it comes from: in the batch step, the task's argv[0] (`S_JOB_ARGV`) is slurmd's own copy
//! of the script in its spool (`<SlurmdSpoolDir>/job<NNNNN>/slurm_script`, root's, written from
//! what the user submitted). The Epilog cannot read it: slurmd deletes that directory when the
//! batch step ends, before any epilog runs.
//!
//! Never on the job's path: the file is read and hashed by a thread of its own, started in the
//! first `task_post_fork` (which returns at once); the step records the result at its exit only if
//! the thread has finished by then, and never waits for it. The read is bounded
//! ([`MAX_SCRIPT_BYTES`]), refuses symlinks and anything but a regular file, and any error means
//! no hash: the job and its report are not affected.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver};

/// Scripts larger than this are not hashed (a batch script is a few KiB; this bounds the read).
pub const MAX_SCRIPT_BYTES: u64 = 4 * 1024 * 1024;

/// The SHA-256 of the regular file at `path` (lower-case hex), read with `O_NOFOLLOW` and at most
/// `max_bytes`; `None` on any error, for a symlink, a non-regular file or a larger file.
pub fn sha256_hex(path: &Path, max_bytes: u64) -> Option<String> {
    let bytes = jobscope_common::fsutil::read_limited(path, max_bytes).ok()?;
    // read_limited reads one byte past the limit: a file that grew after its size was checked.
    if bytes.len() as u64 > max_bytes {
        return None;
    }
    Some(jobscope_common::digest::sha256_hex(&bytes))
}

/// The name slurmstepd gives the batch script it writes into slurmd's spool.
pub const SCRIPT_FILE_NAME: &str = "slurm_script";

fn is_slurmd_script(path: &Path) -> bool {
    path.is_absolute() && path.file_name().is_some_and(|n| n == SCRIPT_FILE_NAME)
}

/// A hash being computed by its own thread.
pub struct ScriptHash(Receiver<String>);

impl ScriptHash {
    /// Starts hashing `path` on a thread of its own. Only an absolute path whose file name is
    /// slurmd's `slurm_script` is read (root reads it: never another file, whatever argv[0] says).
    /// `None` when the path is not that or the thread cannot be started.
    pub fn spawn(path: PathBuf) -> Option<ScriptHash> {
        if !is_slurmd_script(&path) {
            return None;
        }
        // The thread may outlive the step's `exit` (a read that hangs): keep its code mapped.
        #[cfg(not(test))]
        crate::resident::pin();
        let (tx, rx) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("jobscope-script".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let h = std::panic::catch_unwind(|| sha256_hex(&path, MAX_SCRIPT_BYTES));
                if let Ok(Some(h)) = h {
                    let _ = tx.send(h);
                }
            })
            .ok()?;
        Some(ScriptHash(rx))
    }

    /// The hash if the thread has finished with one; never waits.
    pub fn ready(&self) -> Option<String> {
        self.0.try_recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The expectation is the well-known SHA-256 of "abc" (FIPS 180-2, appendix B.1), not a value
    /// computed by the code under test.
    #[test]
    fn hashes_a_regular_file_and_refuses_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join(SCRIPT_FILE_NAME);
        std::fs::write(&f, b"abc").unwrap();
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_hex(&f, 3).as_deref(), Some(abc));
        assert_eq!(sha256_hex(&f, 2), None, "larger than the bound");
        std::os::unix::fs::symlink(&f, d.path().join("link")).unwrap();
        assert_eq!(sha256_hex(&d.path().join("link"), 100), None, "a symlink");
        assert_eq!(sha256_hex(d.path(), 100), None, "a directory");
        assert_eq!(sha256_hex(&d.path().join("absent"), 100), None);

        let h = ScriptHash::spawn(f).unwrap();
        let mut got = None;
        for _ in 0..500 {
            got = h.ready();
            if got.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(got.as_deref(), Some(abc));
        assert!(ScriptHash::spawn(PathBuf::from("relative/slurm_script")).is_none());
        let other = d.path().join("other");
        std::fs::write(&other, b"abc").unwrap();
        assert!(
            ScriptHash::spawn(other).is_none(),
            "not slurmd's script file"
        );
    }
}
