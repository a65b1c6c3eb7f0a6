//! The command of `jobscope run`: started inside its cgroup, signals passed on, waited for.
//!
//! Signals: the launcher blocks SIGINT, SIGTERM and SIGHUP in every thread (before it starts any),
//! and one thread takes them with `sigtimedwait` and passes each to the command, except those the
//! terminal sent (`si_code == SI_KERNEL`): Ctrl-C at a terminal reaches the whole foreground
//! process group, the command included, and must not arrive twice. The command starts with an
//! empty signal mask, so it sees signals as if started directly.
use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The signals passed on to the command.
pub const FORWARDED: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FORWARDED {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks the forwarded signals in this thread (and every thread it starts from now on).
pub fn block_forwarded() {
    let set = forwarded_set();
    // SAFETY: a valid set; the old mask is not wanted.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Makes this process the reaper of its orphaned descendants, so processes the command leaves
/// behind stay in its process tree (and their CPU time reaches this process when reaped).
pub fn become_subreaper() {
    // SAFETY: prctl with these arguments only sets a flag of this process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// Starts `argv` with its process writing itself into each of `join` (`cgroup.procs` files)
/// before `exec`, and with an empty signal mask. Returns its pid.
pub fn spawn(argv: &[OsString], join: &[PathBuf]) -> io::Result<u32> {
    let Some((prog, args)) = argv.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
    };
    // Opened here: between fork and exec only async-signal-safe calls are allowed.
    let files = join
        .iter()
        .map(|p| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(p)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        })
        .collect::<io::Result<Vec<_>>>()?;
    let fds: Vec<i32> = files.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
    let mut cmd = Command::new(prog);
    cmd.args(args);
    // SAFETY: the closure only calls write(2) and sigprocmask(2), both async-signal-safe, on
    // descriptors and a set prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(io::Error::last_os_error());
                }
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(files);
    Ok(child.id())
}

/// Passes the forwarded signals to `pid` until stopped.
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The last signal passed on (0: none).
    pub last: Arc<AtomicI32>,
}

impl Forwarder {
    pub fn start(pid: u32) -> io::Result<Forwarder> {
        let stop = Arc::new(AtomicBool::new(false));
        let last = Arc::new(AtomicI32::new(0));
        let (stop2, last2) = (stop.clone(), last.clone());
        let thread = std::thread::Builder::new()
            .name("jobscope-signals".into())
            .spawn(move || {
                let set = forwarded_set();
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 200_000_000,
                };
                while !stop2.load(Ordering::Acquire) {
                    // SAFETY: a valid set, a zeroed siginfo to fill, a valid timeout.
                    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                    let sig = unsafe { libc::sigtimedwait(&set, &mut info, &ts) };
                    if sig <= 0 {
                        continue;
                    }
                    // From the terminal: the command, in the same foreground process group,
                    // has it already.
                    if info.si_code == libc::SI_KERNEL {
                        continue;
                    }
                    last2.store(sig, Ordering::Release);
                    // SAFETY: kill has no memory preconditions.
                    unsafe {
                        libc::kill(pid as i32, sig);
                    }
                }
            })?;
        Ok(Forwarder {
            stop,
            thread: Some(thread),
            last,
        })
    }

    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How the command ended: its raw wait status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status(pub i32);

impl Status {
    pub fn exit_code(self) -> Option<i32> {
        libc::WIFEXITED(self.0).then(|| libc::WEXITSTATUS(self.0))
    }
    pub fn signal(self) -> Option<i32> {
        libc::WIFSIGNALED(self.0).then(|| libc::WTERMSIG(self.0))
    }
    /// The launcher's own exit status: the command's, or 128 + the signal that killed it (as a
    /// shell reports it).
    pub fn shell_code(self) -> i32 {
        match (self.exit_code(), self.signal()) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            _ => 1,
        }
    }
}

/// Waits for `pid` to end.
pub fn wait(pid: u32) -> io::Result<Status> {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes one int.
        let r = unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        if r == pid as i32 {
            return Ok(Status(status));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reaps the orphans that have ended (this process is their subreaper); returns how many.
pub fn reap_orphans() -> usize {
    let mut n = 0;
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes one int.
        let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if r <= 0 {
            return n;
        }
        n += 1;
    }
}

/// Waits a moment for orphans to end (a shell's background job finishing its last write).
pub fn settle() {
    std::thread::sleep(Duration::from_millis(20));
    reap_orphans();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_as_a_shell_reports_them() {
        assert_eq!(Status(3 << 8).shell_code(), 3);
        assert_eq!(Status(3 << 8).exit_code(), Some(3));
        assert_eq!(Status(libc::SIGINT).shell_code(), 130);
        assert_eq!(Status(libc::SIGINT).signal(), Some(libc::SIGINT));
        assert_eq!(Status(libc::SIGKILL).shell_code(), 137);
        assert_eq!(Status(0).shell_code(), 0);
    }
}
