//! A child process waited for with a bound: the one way jobscope runs a helper program (SLURM's
//! commands, sendmail, the unprivileged writer of the work-directory report). The Epilog must never
//! hang on one, so the wait, the input written and the output read are all bounded, and a child
//! still running at the bound is killed (with its process group when it was started in its own)
//! and reaped.
//!
//! The wait polls `try_wait` every few milliseconds rather than waiting on SIGCHLD: a handler or a
//! blocked signal would be process-wide state, and `jobscope run` already manages its own signals
//! (cli/src/run/child.rs).

use std::io::{self, Read, Write};
use std::process::{Child, ExitStatus};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long and how much.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// From the call until the child must have exited; past it, it is killed.
    pub limit: Duration,
    /// Most bytes kept of each of stdout and stderr. Past it the rest is read and dropped, so the
    /// child neither blocks on a full pipe nor dies of `SIGPIPE` (its own exit status still says
    /// how it ended); `limit` bounds an endless writer.
    pub max_output_bytes: u64,
    /// After the child exits, how long its output and input pipes may take to close: a grandchild
    /// that inherited them may keep them open for ever.
    pub pipe_grace: Duration,
    /// Kill the child's process group too (only for a child started with `process_group(0)`, so
    /// that the group is its own).
    pub kill_group: bool,
}

/// One pipe's bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    pub bytes: Vec<u8>,
    /// True when the pipe was read to its end. `false`: cut at `max_output_bytes` (`bytes` holds
    /// the first ones), or not piped, unreadable, or still open `pipe_grace` after the child
    /// exited (`bytes` is then empty).
    pub complete: bool,
}

/// How the child ended.
#[derive(Debug)]
pub struct Ended {
    /// `None`: it was still running at the bound, and was killed.
    pub status: Option<ExitStatus>,
    pub stdout: Output,
    pub stderr: Output,
    /// Whether the whole input was written (`Ok(())` when there was none to write).
    pub input: io::Result<()>,
}

impl Ended {
    /// Exited by itself with status 0 and its whole stdout read.
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| s.success()) && self.stdout.complete
    }
}

/// Writes `input` to the child's stdin (if given and piped), reads its piped stdout and stderr,
/// and waits for it within `bounds`. A child still running at `bounds.limit` is killed and reaped:
/// when this returns, the child is no longer running. `Err` only when waiting for it failed (the
/// child is then killed too).
pub fn wait_bounded(mut child: Child, input: Option<Vec<u8>>, bounds: Bounds) -> io::Result<Ended> {
    let deadline = Instant::now() + bounds.limit;
    let input_rx = match (child.stdin.take(), input) {
        (Some(mut stdin), Some(bytes)) => Some(in_thread(move || {
            let r = stdin.write_all(&bytes);
            drop(stdin); // EOF
            r
        })),
        _ => None, // dropping an unused stdin gives the child EOF
    };
    let max = bounds.max_output_bytes;
    let stdout_rx = child
        .stdout
        .take()
        .map(|p| in_thread(move || read_bounded(p, max)));
    let stderr_rx = child
        .stderr
        .take()
        .map(|p| in_thread(move || read_bounded(p, max)));

    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                kill(&mut child, bounds.kill_group);
                break None;
            }
            Err(e) => {
                kill(&mut child, bounds.kill_group);
                return Err(e);
            }
        }
    };
    // The child is gone: its pipes close unless a grandchild holds them, hence the grace.
    let until = Instant::now() + bounds.pipe_grace;
    let left = || until.saturating_duration_since(Instant::now());
    let output = |rx: Option<mpsc::Receiver<Output>>| {
        rx.and_then(|rx| rx.recv_timeout(left()).ok())
            .unwrap_or_default()
    };
    let stdout = output(stdout_rx);
    let stderr = output(stderr_rx);
    let input = match input_rx {
        None => Ok(()),
        Some(rx) => rx.recv_timeout(left()).unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the input was not read to its end",
            ))
        }),
    };
    Ok(Ended {
        status,
        stdout,
        stderr,
        input,
    })
}

/// Runs `f` in a thread and hands its result over a channel, so that waiting for it can be bounded
/// (a thread blocked on a pipe a grandchild holds is left behind, not waited for).
fn in_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> mpsc::Receiver<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx
}

fn read_bounded(mut pipe: impl Read, max_bytes: u64) -> Output {
    let mut bytes = Vec::new();
    // One byte past the bound tells "exactly max" from "more than max".
    let kept = pipe
        .by_ref()
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes);
    let cut = bytes.len() as u64 > max_bytes;
    bytes.truncate(usize::try_from(max_bytes).unwrap_or(usize::MAX));
    let drained = if cut {
        io::copy(&mut pipe, &mut io::sink()).map(drop)
    } else {
        Ok(())
    };
    Output {
        bytes,
        complete: kept.is_ok() && drained.is_ok() && !cut,
    }
}

fn kill(child: &mut Child, group: bool) {
    if group {
        if let Ok(pgid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) on the process group the caller started the child in (pgid == pid);
            // the child is not reaped yet, so its pid (the group's id) cannot have been reused.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    fn bounds(limit_ms: u64) -> Bounds {
        Bounds {
            limit: Duration::from_millis(limit_ms),
            max_output_bytes: 1 << 20,
            pipe_grace: Duration::from_millis(500),
            kill_group: false,
        }
    }

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Whether `pid` is still a live process (a zombie waiting for its reaper counts as gone).
    fn running(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| !r.trim_start().starts_with('Z'))
        })
    }

    #[test]
    fn a_child_that_exits_gives_its_status_and_output() {
        let child = sh("echo out; echo err >&2; exit 3").spawn().unwrap();
        let e = wait_bounded(child, None, bounds(30_000)).unwrap();
        assert_eq!(e.status.unwrap().code(), Some(3));
        assert_eq!(
            e.stdout,
            Output {
                bytes: b"out\n".to_vec(),
                complete: true
            }
        );
        assert_eq!(e.stderr.bytes, b"err\n");
        assert!(!e.succeeded(), "exit 3");
        assert!(e.input.is_ok());
    }

    #[test]
    fn input_is_written_and_the_output_read_back() {
        let child = sh("cat").stdin(Stdio::piped()).spawn().unwrap();
        let e = wait_bounded(child, Some(b"a message".to_vec()), bounds(30_000)).unwrap();
        assert!(e.succeeded());
        assert_eq!(e.stdout.bytes, b"a message");
        assert!(e.input.is_ok());
    }

    #[test]
    fn a_child_past_the_bound_is_killed_and_reaped() {
        let child = sh("exec sleep 60").spawn().unwrap();
        let pid = child.id();
        let t = Instant::now();
        let e = wait_bounded(child, None, bounds(200)).unwrap();
        assert!(e.status.is_none(), "killed, not exited");
        assert!(!e.succeeded());
        // Far below the child's own 60 s: it was killed, not waited for.
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
        assert!(!running(pid));
    }

    #[test]
    fn its_process_group_is_killed_with_it_when_asked() {
        let mut c = sh("sleep 60 & echo $!; wait");
        c.process_group(0);
        let child = c.spawn().unwrap();
        let e = wait_bounded(
            child,
            None,
            Bounds {
                kill_group: true,
                ..bounds(500)
            },
        )
        .unwrap();
        assert!(e.status.is_none());
        let grandchild: u32 = String::from_utf8_lossy(&e.stdout.bytes)
            .trim()
            .parse()
            .unwrap();
        // Killed by the group kill, then reaped by whoever adopted it: wait for that (bounded).
        let t = Instant::now();
        while running(grandchild) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !running(grandchild),
            "the grandchild survived the group kill"
        );
    }

    /// `script` run with its output cut at 4096 bytes and `limit_ms` to end.
    fn run_cut_at_4096(script: &str, limit_ms: u64) -> Ended {
        let bounds = Bounds {
            max_output_bytes: 4096,
            ..bounds(limit_ms)
        };
        wait_bounded(sh(script).spawn().unwrap(), None, bounds).unwrap()
    }

    #[test]
    fn output_is_cut_at_the_bound_and_the_writer_is_neither_blocked_nor_killed() {
        // 1 MiB through a 64 KiB pipe: the writer finishes only if the rest is read.
        let e = run_cut_at_4096("head -c 1048576 /dev/zero", 30_000);
        assert_eq!(e.stdout.bytes.len(), 4096);
        assert!(!e.stdout.complete);
        assert_eq!(
            e.status.unwrap().code(),
            Some(0),
            "exited by itself, no SIGPIPE"
        );
        assert!(!e.succeeded(), "cut output is not a success");
    }

    #[test]
    fn an_endless_writer_is_killed_at_the_bound_with_its_output_cut() {
        let e = run_cut_at_4096("exec cat /dev/zero", 300);
        assert!(e.status.is_none());
        assert_eq!(e.stdout.bytes.len(), 4096);
        assert!(!e.stdout.complete);
    }

    #[test]
    fn output_of_exactly_the_bound_is_complete() {
        let e = run_cut_at_4096("head -c 4096 /dev/zero", 30_000);
        assert_eq!(e.stdout.bytes.len(), 4096);
        assert!(e.succeeded());
    }

    #[test]
    fn a_grandchild_holding_the_pipe_does_not_hold_the_caller() {
        // The child exits at once; the background sleep keeps stdout open for 60 s.
        let child = sh("sleep 60 & echo started").spawn().unwrap();
        let t = Instant::now();
        let e = wait_bounded(child, None, bounds(30_000)).unwrap();
        assert_eq!(e.status.unwrap().code(), Some(0));
        assert!(!e.stdout.complete, "the pipe was still open");
        assert!(
            !e.succeeded(),
            "output not read to its end is not a success"
        );
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    }
}
