//! `[report] admin_comment` at the batch script's end: the one moment jobscope can put the job's
//! verdict into slurmctld's own record (`scontrol show job`, the job-completion plugins, the
//! accounting end record). slurmctld refuses any change to a job once it has ended, and the batch
//! step's `exit` runs before slurmstepd tells slurmctld the script ended
//! (docs/slurm-versions.md, "AdminComment").
//!
//! The plugin does not compute the line itself: it runs `jobscope admin-comment JOB --batch-exit
//! STATUS`, which reads the job's spools like `jobscope show` and writes the line with `scontrol
//! update`. Run apart, its memory and any hang stay out of slurmstepd: it is killed, with what it
//! started, at [`WAIT`], and the job ends as it would have (only that much later). Before it runs
//! it leaves the job's cgroups for their hierarchies' roots ([`cgroups_to_leave`]): its CPU time
//! and memory are jobscope's, not the job's, and must not show in the job's figures.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The most the batch step's end waits for the line: the job's end is delayed by the command's
/// run (measured in the cluster test), never by more than this.
pub const WAIT: Duration = Duration::from_secs(5);

/// The first of `candidates` that root may run: a regular file (after links: the path is the
/// site's `[paths] cli`) owned by root and writable by nobody else. `Err` says why none.
pub fn find_cli(candidates: &[&Path]) -> Result<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let mut why = Vec::new();
    for c in candidates {
        match std::fs::metadata(c) {
            Ok(m) if !m.is_file() => why.push(format!("{} is not a regular file", c.display())),
            Ok(m) if m.uid() != 0 || m.mode() & 0o022 != 0 => why.push(format!(
                "{} is not root's alone (owner {}, mode {:o}): not run as root",
                c.display(),
                m.uid(),
                m.mode() & 0o7777
            )),
            Ok(_) => return Ok(c.to_path_buf()),
            Err(e) => why.push(format!("{}: {e}", c.display())),
        }
    }
    Err(format!("no jobscope command to run: {}", why.join("; ")))
}

/// The `cgroup.procs` of the root of every hierarchy in which this process (`proc_self_cgroup`,
/// as `/proc/self/cgroup` says) is below the root: v1 hierarchies at `cgroup_root/<controllers>`
/// (`name=X` at `cgroup_root/X`), the unified one at `unified_mount`.
pub fn cgroups_to_leave(
    proc_self_cgroup: &str,
    cgroup_root: &Path,
    unified_mount: &Path,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if path == "/" || path.is_empty() {
            continue;
        }
        let dir = if controllers.is_empty() {
            unified_mount.to_path_buf()
        } else {
            let name = controllers.strip_prefix("name=").unwrap_or(controllers);
            // A name with a path in it is no mount here.
            if name.contains('/') || name == ".." || name == "." {
                continue;
            }
            cgroup_root.join(name)
        };
        out.push(dir.join("cgroup.procs"));
    }
    out
}

/// Runs `cli [--config CONFIG] admin-comment JOB --batch-exit STATUS` with an empty environment
/// and no terminal, moved first into each `cgroup.procs` of `leave` (a failed move is ignored:
/// the line is worth more than the few milliseconds it would add), and waits for it at most
/// `wait`. `Ok`: the line written and how long it took; `Err`: what went wrong (the command's
/// own first words of error where it said any).
pub fn write_at_batch_end(
    cli: &Path,
    config: Option<&Path>,
    job_id: u32,
    batch_wait_status: i32,
    leave: &[PathBuf],
    wait: Duration,
) -> Result<(String, Duration), String> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    let started = Instant::now();
    // Built before the fork: the child only opens, writes and closes.
    let leave: Vec<std::ffi::CString> = leave
        .iter()
        .filter_map(|p| std::ffi::CString::new(p.as_os_str().as_bytes()).ok())
        .collect();
    let mut cmd = Command::new(cli);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd.args([
        "admin-comment",
        &job_id.to_string(),
        "--batch-exit",
        &batch_wait_status.to_string(),
    ])
    .env_clear()
    .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    // Its own process group: at the bound, scontrol goes with it.
    .process_group(0);
    // SAFETY: between fork and exec the child calls only open, write and close (async-signal
    // safe) on paths built before the fork; "0" moves the writing process itself.
    unsafe {
        cmd.pre_exec(move || {
            for p in &leave {
                let fd = libc::open(
                    p.as_ptr(),
                    libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                );
                if fd >= 0 {
                    libc::write(fd, b"0".as_ptr().cast(), 1);
                    libc::close(fd);
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| format!("{}: {e}", cli.display()))?;
    let ended = jobscope_common::child::wait_bounded(
        child,
        None,
        jobscope_common::child::Bounds {
            limit: wait,
            max_output_bytes: 4096,
            pipe_grace: Duration::from_millis(200),
            kill_group: true,
        },
    )
    .map_err(|e| format!("waiting for {}: {e}", cli.display()))?;
    let took = started.elapsed();
    let first_line = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(400)
            .collect::<String>()
    };
    match ended.status {
        None => Err(format!(
            "{} did not end within {:.1} s: killed",
            cli.display(),
            wait.as_secs_f64()
        )),
        Some(s) if s.success() => Ok((first_line(&ended.stdout.bytes), took)),
        Some(s) => Err(format!("{} ({s})", first_line(&ended.stderr.bytes))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn am_root() -> bool {
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() == 0 }
    }

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// Captured `/proc/self/cgroup` of slurmstepd's batch step: 22.05 on cgroup v1 (this host's
    /// hybrid layout) and SLURM's v2 layout. Only the hierarchies the step is below the root in.
    #[test]
    fn the_command_leaves_the_jobs_cgroups_for_the_roots() {
        let fixture = |dir: &str, name: &str| {
            std::fs::read_to_string(format!(
                "{}/../sampler/testdata/{dir}/{name}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap()
        };
        let root = Path::new("/sys/fs/cgroup");
        let unified = Path::new("/sys/fs/cgroup/unified");
        let v1 = fixture(
            "cgroup-v1-debian12-slurm-22.05",
            "proc-self-cgroup.batch.txt",
        );
        assert_eq!(
            cgroups_to_leave(&v1, root, unified),
            [
                "/sys/fs/cgroup/freezer/cgroup.procs",
                "/sys/fs/cgroup/memory/cgroup.procs",
                "/sys/fs/cgroup/cpuset/cgroup.procs"
            ]
            .map(PathBuf::from)
        );
        let v2 = fixture("cgroup-v2-slurm-layout", "proc-self-cgroup.task.txt");
        assert_eq!(
            cgroups_to_leave(&v2, root, root),
            [PathBuf::from("/sys/fs/cgroup/cgroup.procs")]
        );
        // Odd names go nowhere.
        assert!(cgroups_to_leave("3:name=../x:/a\n4:..:/b\nnonsense\n", root, unified).is_empty());
    }

    #[test]
    fn only_a_file_that_is_roots_alone_is_run() {
        if !am_root() {
            eprintln!("skipped: needs root (the files are root's)");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let good = script(d.path(), "good", "true");
        let writable = script(d.path(), "writable", "true");
        std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o777)).unwrap();
        let users = script(d.path(), "users", "true");
        std::os::unix::fs::chown(&users, Some(1000), None).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        let absent = d.path().join("absent");
        assert_eq!(find_cli(&[&absent, d.path(), &good]).unwrap(), good);
        // A link root placed to a good file is that file.
        assert_eq!(find_cli(&[&link]).unwrap(), link);
        let e = find_cli(&[&absent, d.path(), &writable, &users]).unwrap_err();
        for said in [
            "absent: No such file",
            "is not a regular file",
            "writable is not root's alone (owner 0, mode 777)",
            "users is not root's alone (owner 1000, mode 755)",
        ] {
            assert!(e.contains(said), "{said:?} not in {e}");
        }
    }

    #[test]
    fn the_command_gets_the_job_and_status_and_nothing_else_and_is_bounded() {
        let d = tempfile::tempdir().unwrap();
        // Prints its arguments and its environment's names: what it was given, all of it.
        let echo = script(
            d.path(),
            "echo",
            r#"echo "$*|$(env | cut -d= -f1 | sort | tr '\n' ' ')""#,
        );
        let (line, _) = write_at_batch_end(
            &echo,
            Some(Path::new("/etc/x.toml")),
            42,
            256,
            &[d.path().join("absent/cgroup.procs")],
            Duration::from_secs(10),
        )
        .unwrap();
        let (args, env) = line.split_once('|').unwrap();
        assert_eq!(
            args,
            "--config /etc/x.toml admin-comment 42 --batch-exit 256"
        );
        // sh adds PWD (and may add SHLVL, _); nothing of slurmstepd's environment reaches it.
        for name in env.split_whitespace() {
            assert!(
                ["PATH", "PWD", "SHLVL", "_"].contains(&name),
                "{name} leaked: {env}"
            );
        }

        let fails = script(
            d.path(),
            "fails",
            "echo 'jobscope: job 42 is not running' >&2; exit 1",
        );
        let e = write_at_batch_end(&fails, None, 42, 0, &[], Duration::from_secs(10)).unwrap_err();
        assert!(e.starts_with("jobscope: job 42 is not running ("), "{e}");

        // A hung command and what it started are killed at the bound; the wait ends there.
        let pidfile = d.path().join("grandchild");
        let hangs = script(
            d.path(),
            "hangs",
            &format!("sleep 300 & echo $! > {}; wait", pidfile.display()),
        );
        let t = Instant::now();
        let e =
            write_at_batch_end(&hangs, None, 42, 0, &[], Duration::from_millis(500)).unwrap_err();
        assert!(e.contains("did not end within 0.5 s: killed"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild is gone (reaped by init once killed; give it a moment).
        let gone = (0..100).any(|_| {
            // SAFETY: kill with signal 0 only asks whether the process exists.
            let alive = unsafe { libc::kill(pid, 0) } == 0
                && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z "));
            if alive {
                std::thread::sleep(Duration::from_millis(20));
            }
            !alive
        });
        assert!(gone, "sleep {pid} outlived the bound");
    }
}
