//! What the CLI's integration tests share: who runs them, the real binary run with a config, and
//! a config over a scratch directory. (`mod common;` in each test file; not every file uses all.)
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_jobscope");

/// [`BIN`] at a path every user may reach, for the tests that run it as another user: a clone in
/// root's home (`/root` is 0700, as on a fresh machine) leaves the build's own path closed to them.
/// A hard link (a copy across filesystems) in a root-owned 0755 directory of the temporary
/// directory, named after the build's path, replaced atomically so that concurrent test processes
/// share it.
pub fn bin_for_anyone() -> PathBuf {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut h: u64 = 0xcbf29ce484222325;
    for b in BIN.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
    }
    let dir = std::env::temp_dir().join(format!("jobscope-test-bin-{h:016x}"));
    match std::fs::create_dir(&dir) {
        Ok(()) => std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap(),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("{}: {e}", dir.display()),
    }
    // Someone else's directory (or a link) there is not used: the tests would run their program.
    let m = std::fs::symlink_metadata(&dir).unwrap();
    assert!(
        m.is_dir() && m.uid() == unsafe { libc::geteuid() } && m.mode() & 0o022 == 0,
        "{} is not this user's own directory",
        dir.display()
    );
    let tmp = dir.join(format!(".jobscope.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    if std::fs::hard_link(BIN, &tmp).is_err() {
        std::fs::copy(BIN, &tmp).unwrap();
    }
    let bin = dir.join("jobscope");
    std::fs::rename(&tmp, &bin).unwrap();
    bin
}

/// `jobscope --config CFG ARGS` as `nobody` (uid and gid 65534), from `/`, in UTC.
pub fn as_nobody(cfg: &Path, args: &[&str]) -> (i32, String, String) {
    use std::os::unix::process::CommandExt;
    let out = Command::new(bin_for_anyone())
        .arg("--config")
        .arg(cfg)
        .args(args)
        .env_remove("JOBSCOPE_CONFIG")
        .env("TZ", "UTC")
        .current_dir("/")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn am_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `jobscope --config CFG ARGS`; a run that has not ended after a minute (a FIFO opened
/// for writing waits for a reader for ever) is killed and reported as hung.
pub fn jobscope(cfg: &Path, args: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(cfg)
        .args(args)
        .env_remove("JOBSCOPE_CONFIG")
        .env("TZ", "UTC")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("jobscope {args:?} hung (opened a FIFO?)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A config whose archive, state and mail queue are under `dir` (plus `extra` lines).
pub fn config(dir: &Path, extra: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("archive")).unwrap();
    let cfg = dir.join("jobscope.toml");
    std::fs::write(
        &cfg,
        format!(
            "[paths]\narchive_dir = \"{0}/archive\"\nstate_dir = \"{0}/state\"\n\n{extra}\n",
            dir.display()
        ),
    )
    .unwrap();
    cfg
}

/// A config over `dir` whose archive is `dir/archive` (made here) and whose admin group is this
/// process's own group, so the audit reads every job whether the test runs as root or not (plus
/// `extra` lines).
pub fn admin_config(dir: &Path, extra: &str) -> PathBuf {
    let archive = dir.join("archive");
    std::fs::create_dir_all(&archive).unwrap();
    let group = Command::new("id").arg("-gn").output().unwrap();
    let group = String::from_utf8(group.stdout).unwrap().trim().to_string();
    let cfg = dir.join("jobscope.toml");
    std::fs::write(
        &cfg,
        format!(
            "[paths]\narchive_dir = \"{}\"\n[archive]\nadmin_group = \"{group}\"\n{extra}",
            archive.display()
        ),
    )
    .unwrap();
    cfg
}
