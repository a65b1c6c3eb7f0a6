//! One index writer at a time, also across hosts on a shared filesystem: an exclusive `flock(2)` on
//! `<archive>/.index.lock`, held on an open descriptor for the whole update. The kernel (or, on NFS,
//! the server's lock manager: Linux maps `flock` to byte-range locks there) releases it when the
//! holder dies, so a dead writer's lock needs no takeover. The file itself is never removed:
//! removing a locked file would let a second writer lock a new file of the same name while the
//! first still holds the old one. It holds `host pid unix_s` of the holder, for the message a waiter
//! prints; the text is never read to decide anything (reading it and then removing the file was a
//! race in which two takers both went ahead).

use anyhow::{bail, Context, Result};
use jobscope_common::fsutil::{open_regular, Access};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Held while alive; dropping it (or the process dying) releases the lock.
pub struct Lock {
    _file: File,
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

/// `Ok(true)`: locked; `Ok(false)`: another descriptor holds it.
fn try_flock(f: &File) -> std::io::Result<bool> {
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            _ => return Err(e),
        }
    }
}

impl Lock {
    /// Takes the lock at `path`, waiting up to `wait_s` for the holder to finish.
    pub fn take(path: &Path, wait_s: u64) -> Result<Lock> {
        // The archive's directory may be reachable by users: the lock file is opened as every such
        // file is (no symlink followed, a FIFO or device planted there refused without blocking).
        let f = open_regular(path, Access::ReadWriteOrCreate(0o640))
            .with_context(|| format!("taking the index lock {}", path.display()))?;
        let start = std::time::Instant::now();
        loop {
            if try_flock(&f).with_context(|| format!("locking {}", path.display()))? {
                break;
            }
            if start.elapsed().as_secs() >= wait_s {
                let mut text = String::new();
                let _ = (&f).take(256).read_to_string(&mut text);
                bail!(
                    "the index is being updated by another process ({}: {})",
                    path.display(),
                    text.trim()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        // Who holds it, for a waiter's message (best effort: the flock is what excludes).
        let _ = f.set_len(0).and_then(|_| {
            (&f).rewind()?;
            writeln!(&f, "{} {} {}", host(), std::process::id(), now_s())
        });
        Ok(Lock { _file: f })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};

    #[test]
    fn a_symlink_or_fifo_at_the_lock_path_is_refused_and_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("target");
        std::fs::write(&target, "kept").unwrap();
        let link = d.path().join("LOCK");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = Lock::take(&link, 0)
            .err()
            .expect("a symlink is not a lock file");
        assert!(format!("{e:#}").contains("taking the index lock"), "{e:#}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept");
        // A FIFO would block a plain open for writing until a reader came: refused at once.
        let fifo = d.path().join("FIFO");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: c is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = Lock::take(&fifo, 0)
            .err()
            .expect("a FIFO is not a lock file");
        assert!(format!("{e:#}").contains("FIFO"), "{e:#}");
    }

    #[test]
    fn a_new_lock_file_is_mode_0640() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("LOCK");
        // SAFETY: umask only sets this process's mask; 0o022 leaves 0640 as it is.
        let old = unsafe { libc::umask(0o022) };
        let _l = Lock::take(&p, 0).unwrap();
        unsafe { libc::umask(old) };
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
    }

    #[test]
    fn second_taker_waits_then_fails_and_a_released_lock_is_taken() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("LOCK");
        let l = Lock::take(&p, 0).unwrap();
        let e = Lock::take(&p, 0).err().expect("held");
        assert!(e.to_string().contains("another process"), "{e}");
        assert!(
            e.to_string().contains(&std::process::id().to_string()),
            "names the holder: {e}"
        );
        drop(l);
        // A lock file left behind by a writer that is gone (the old pid-text format, or ours
        // after a crash) holds no flock: it is taken at once.
        std::fs::write(&p, "elsewhere 5 0\n").unwrap();
        let _l = Lock::take(&p, 0).unwrap();
    }

    #[test]
    fn a_dead_holders_lock_is_released_by_the_kernel() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("LOCK");
        // A child process takes the lock on a descriptor of its own and is killed while holding
        // it (the shell locks fd 9 with flock(1), then becomes `sleep`, which keeps fd 9).
        let script = format!("exec 9>>'{}' && flock -x 9 && exec sleep 30", p.display());
        let Ok(mut child) = std::process::Command::new("sh")
            .args(["-c", &script])
            .spawn()
        else {
            panic!("sh cannot be run");
        };
        // Wait until the child holds it (bounded: 10 s).
        let mut held = false;
        for _ in 0..100 {
            if let Ok(f) = std::fs::File::open(&p) {
                if !try_flock(&f).unwrap() {
                    held = true;
                    break;
                }
            }
            // Not yet (or we got it first; closing `f` gave it back).
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert!(held, "the child never took the lock");
        assert!(Lock::take(&p, 0).is_err(), "a live holder is respected");
        child.kill().unwrap();
        child.wait().unwrap();
        // No takeover, no staleness limit: the kernel released it when the holder died.
        let l = Lock::take(&p, 0);
        assert!(
            l.is_ok(),
            "the dead holder's lock was released: {:?}",
            l.err()
        );
    }

    #[test]
    fn of_many_concurrent_takers_of_a_stale_lock_exactly_one_proceeds_at_a_time() {
        let d = tempfile::tempdir().unwrap();
        let p = Arc::new(d.path().join("LOCK"));
        for round in 0..20 {
            // A stale lock left by a dead writer of the old format.
            std::fs::write(&*p, format!("{} 2147483646 0\n", host())).unwrap();
            let takers = 16;
            let barrier = Arc::new(Barrier::new(takers));
            let inside = Arc::new(AtomicUsize::new(0));
            let most = Arc::new(AtomicUsize::new(0));
            let won = Arc::new(AtomicUsize::new(0));
            let hs: Vec<_> = (0..takers)
                .map(|_| {
                    let (p, barrier, inside, most, won) = (
                        p.clone(),
                        barrier.clone(),
                        inside.clone(),
                        most.clone(),
                        won.clone(),
                    );
                    std::thread::spawn(move || {
                        barrier.wait();
                        // wait_s 0: only the takers that find it free proceed.
                        if let Ok(_l) = Lock::take(&p, 0) {
                            won.fetch_add(1, Ordering::SeqCst);
                            let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(n, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(20));
                            inside.fetch_sub(1, Ordering::SeqCst);
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            assert_eq!(most.load(Ordering::SeqCst), 1, "round {round}: two inside");
            assert!(won.load(Ordering::SeqCst) >= 1, "round {round}: nobody");
        }
    }
}
