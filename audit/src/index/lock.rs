//! One index writer at a time, also across hosts on a shared filesystem: a lock file created with
//! `O_EXCL` (atomic on local filesystems and NFSv3+), holding `host pid unix_s`. A lock whose holder
//! is gone (same host, no such process) or that is older than the staleness limit is taken over.

use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub struct Lock {
    path: PathBuf,
}

fn host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Why an existing lock may be taken over, or `None` while its holder may still be working.
fn stale(text: &str, stale_s: u64) -> Option<String> {
    let mut it = text.split_whitespace();
    let (h, pid, t) = (it.next(), it.next(), it.next());
    let (Some(h), Some(pid), Some(t)) = (
        h,
        pid.and_then(|p| p.parse::<i32>().ok()),
        t.and_then(|t| t.parse::<u64>().ok()),
    ) else {
        return Some("unreadable lock file".into());
    };
    if h == host() && pid > 0 {
        // SAFETY: kill with signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            return Some(format!("process {pid} on {h} is gone"));
        }
    }
    let age = now_s().saturating_sub(t);
    (age > stale_s).then(|| format!("held by {h} pid {pid} for {age} s"))
}

impl Lock {
    /// Takes the lock at `path`, waiting up to `wait_s` for a live holder.
    pub fn take(path: &Path, stale_s: u64, wait_s: u64) -> Result<Lock> {
        let start = std::time::Instant::now();
        loop {
            match jobscope_sampler::fsutil::create_new(path, 0o640) {
                Ok(mut f) => {
                    writeln!(f, "{} {} {}", host(), std::process::id(), now_s())
                        .and_then(|_| f.sync_all())
                        .with_context(|| format!("writing {}", path.display()))?;
                    return Ok(Lock {
                        path: path.to_path_buf(),
                    });
                }
                Err(jobscope_sampler::fsutil::FsError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists =>
                {
                    let text =
                        jobscope_sampler::fsutil::read_limited(path, 4096).unwrap_or_default();
                    if let Some(why) = stale(&String::from_utf8_lossy(&text), stale_s) {
                        // Take over: remove it and try again (another taker may win the O_EXCL race).
                        eprintln!("jobscope index: taking over a stale lock ({why})");
                        let _ = std::fs::remove_file(path);
                        continue;
                    }
                    if start.elapsed().as_secs() >= wait_s {
                        bail!(
                            "the index is being updated by another process ({}: {})",
                            path.display(),
                            String::from_utf8_lossy(&text).trim()
                        );
                    }
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
                Err(e) => return Err(e).context("taking the index lock"),
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_taker_waits_then_fails_and_a_dead_holder_is_taken_over() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("LOCK");
        let l = Lock::take(&p, 600, 0).unwrap();
        let e = Lock::take(&p, 600, 0).err().expect("held");
        assert!(e.to_string().contains("another process"), "{e}");
        drop(l);
        assert!(!p.exists());
        // A holder on this host whose process is gone (pid far above pid_max).
        std::fs::write(&p, format!("{} 2147483646 {}\n", host(), now_s())).unwrap();
        let _l = Lock::take(&p, 600, 0).unwrap();
        // An old lock of another host.
        drop(_l);
        std::fs::write(&p, format!("elsewhere 5 {}\n", now_s() - 1000)).unwrap();
        let _l = Lock::take(&p, 600, 0).unwrap();
        drop(_l);
        // A young lock of another host is respected.
        std::fs::write(&p, format!("elsewhere 5 {}\n", now_s())).unwrap();
        assert!(Lock::take(&p, 600, 0).is_err());
    }
}
