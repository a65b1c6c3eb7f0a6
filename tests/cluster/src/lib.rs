//! Harness for integration tests that run real jobs on the jobscope test cluster.
//!
//! The cluster is started outside the tests, as root: `slurm-conf/cluster.sh up` (1 node)
//! or `slurm-conf/cluster.sh up --nodes 2`; `tests/run-all.sh` does all of it. Every helper
//! here talks to that cluster with the ordinary SLURM client commands (`sbatch`, `scontrol`,
//! `sinfo`, ...), so the tests must run as root (jobs are submitted as the test users
//! `alice`/`bob` through `runuser`).
//!
//! Conventions:
//! * A test that submits jobs or changes the cluster holds a [`ClusterGuard`] for its whole
//!   duration: nextest runs each test in its own process, and the guard is a file lock, so
//!   such tests run one at a time even with `--test-threads` > 1.
//! * Tests that need two nodes are named `two_node_*` and call [`require_two_nodes`];
//!   `tests/run-all.sh` runs them only against `cluster.sh up --nodes 2`, and all the
//!   other tests only against the 1-node cluster.
//! * Tests that need a pure cgroup v2 machine are named `v2_*`: they run only in the VM test
//!   cluster (`slurm-conf/vm/run-suite.sh`); the host's phases leave them out.
//! * No cluster is not a reason to skip: every entry point fails with a message that says
//!   how to start one.

pub mod gpu;
pub mod jobscope;
pub mod mail;

use anyhow::{anyhow, bail, ensure, Context, Result};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The plugstack line file the tests rewrite (slurmstepd re-reads it for every step).
pub const PLUGSTACK_CONF: &str = "/etc/slurm/plugstack.conf.d/jobscope.conf";
/// Where `cluster.sh install` puts the SPANK plugin.
pub const PLUGIN_SO: &str = "/usr/local/lib/slurm/jobscope_spank.so";
/// The plugstack line `cluster.sh install` writes (the plugin with no arguments).
pub const DEFAULT_PLUGSTACK_LINE: &str = "optional /usr/local/lib/slurm/jobscope_spank.so";
/// The plugin built with the `fault-injection` feature (`inject=`), which the packaged one is not:
/// `cluster.sh install` puts it here (inside the rootfs for 24.11), beside the packaged plugin.
pub const FAULTS_PLUGIN_SO: &str = "/usr/local/lib/slurm/jobscope_spank_faults.so";
/// Jobs are submitted from per-job directories below this one (kept after the test, so the
/// job's output can still be read; they are small).
pub const WORK_BASE: &str = "/tmp/jobscope-cluster-tests";
/// The lock file behind [`ClusterGuard`].
pub const LOCK_FILE: &str = "/tmp/jobscope-cluster-tests.lock";

/// How often [`wait_job`] polls `scontrol show job`.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// How long [`ClusterGuard::acquire`] waits for another test to release the cluster.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(900);

/// PATH for SLURM client commands run as root (the daemons get the same one).
const ROOT_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
/// PATH for commands run as a test user.
const USER_PATH: &str = "/usr/bin:/bin";

const START_HINT: &str =
    "start the test cluster first, as root: `slurm-conf/cluster.sh up` (1 node) or \
     `slurm-conf/cluster.sh up --nodes 2`; or run everything with `tests/run-all.sh`";

// ------------------------------------------------------------------ commands

/// Output of a finished command, as text.
#[derive(Debug, Clone)]
pub struct CmdOut {
    /// Exit code; `None` if the command was killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CmdOut {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    pub fn from_output(out: Output) -> Self {
        CmdOut {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Where the rootfs of `slurm-conf/trixie/rootfs.sh` is (its default; the same variable).
const TRIXIE_ROOT_DEFAULT: &str = "/var/cache/jobscope-trixie/rootfs";

/// The SLURM release the tests talk to, from `JOBSCOPE_SLURM`: unset or `22.05`, the host's own
/// (slurm-conf/cluster.sh); `24.11`, the daemons and commands of the Debian 13 root filesystem
/// (slurm-conf/trixie/cluster.sh), whose commands the tests run through `chroot` (the rootfs sees
/// the host's /tmp, /home, /etc/slurm, /etc/jobscope and jobscope's directories at the same paths,
/// and has its own /usr/local: the plugin, CLI and Epilog built for it). Returns that root
/// filesystem for 24.11. Any other value is a mistake: it panics
/// rather than test the wrong release.
pub fn release_root() -> Option<PathBuf> {
    match std::env::var("JOBSCOPE_SLURM").ok().as_deref() {
        None | Some("") | Some("22.05") => None,
        Some("24.11") => Some(PathBuf::from(
            std::env::var("JOBSCOPE_TRIXIE_CACHE")
                .map(|c| format!("{c}/rootfs"))
                .unwrap_or_else(|_| TRIXIE_ROOT_DEFAULT.to_string()),
        )),
        Some(other) => panic!("JOBSCOPE_SLURM={other:?}: the cluster tests know 22.05 and 24.11"),
    }
}

/// `program` run in `cwd` on the host, or inside the 24.11 root filesystem when that release is
/// under test (see [`release_root`]). The caller sets the environment (`env(1)` passes it on).
pub fn release_cmd(program: &str, cwd: &Path) -> Command {
    match release_root() {
        None => {
            let mut c = Command::new(program);
            c.current_dir(cwd);
            c
        }
        Some(root) => {
            // chroot(8) starts in the new root's `/`: env -C goes to the same directory inside.
            let mut c = Command::new("/usr/sbin/chroot");
            c.arg(root)
                .args(["/usr/bin/env", "-C"])
                .arg(cwd)
                .arg(program);
            c
        }
    }
}

/// A SLURM client command run as root with a clean environment (no SLURM_* variables from
/// the test runner, default /etc/slurm/slurm.conf).
fn root_cmd(program: &str) -> Command {
    let mut c = release_cmd(program, Path::new("/"));
    c.env_clear().env("PATH", ROOT_PATH).env("LANG", "C.UTF-8");
    c
}

/// Runs a command; returns its stdout, or an error with its stderr when it fails.
fn run_ok(mut cmd: Command) -> Result<String> {
    let desc = format!("{cmd:?}");
    let out = cmd.output().with_context(|| format!("cannot run {desc}"))?;
    let out = CmdOut::from_output(out);
    if !out.success() {
        bail!(
            "{desc} failed ({}): {}{}",
            out.code
                .map_or_else(|| "killed by a signal".to_string(), |c| format!("exit {c}")),
            out.stderr.trim(),
            if out.stdout.trim().is_empty() {
                String::new()
            } else {
                format!(" / stdout: {}", out.stdout.trim())
            }
        );
    }
    Ok(out.stdout)
}

/// Runs a SLURM client command as root; its stdout.
pub fn slurm_cmd(program: &str, args: &[&str]) -> Result<String> {
    let mut c = root_cmd(program);
    c.args(args);
    run_ok(c)
}

/// `sh -c CMD` as USER, through `runuser` with a minimal environment
/// (`PATH=/usr/bin:/bin HOME=<home>`), in the user's home directory. Does not fail on a
/// non-zero exit: look at [`CmdOut::code`].
pub fn run_as(user: &str, cmd: &str) -> Result<CmdOut> {
    let u = user_info(user)?;
    let cwd = if u.home.is_dir() {
        u.home.as_path()
    } else {
        Path::new("/")
    };
    let mut c = release_cmd("/usr/sbin/runuser", cwd);
    c.env_clear()
        .env("PATH", ROOT_PATH)
        .args(["-u", user, "--", "/usr/bin/env", "-i"])
        .arg(format!("PATH={USER_PATH}"))
        .arg(format!("HOME={}", u.home.display()))
        .args(["/bin/sh", "-c", cmd]);
    let out = c
        .output()
        .with_context(|| format!("cannot run `{cmd}` as {user} via runuser"))?;
    Ok(CmdOut::from_output(out))
}

// ------------------------------------------------------------------ users

/// A local user, from /etc/passwd.
#[derive(Debug, Clone)]
pub struct UserInfo {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

pub fn user_info(user: &str) -> Result<UserInfo> {
    let passwd = fs::read_to_string("/etc/passwd").context("cannot read /etc/passwd")?;
    for line in passwd.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() >= 6 && f[0] == user {
            return Ok(UserInfo {
                name: user.to_string(),
                uid: f[2]
                    .parse()
                    .with_context(|| format!("bad uid in /etc/passwd for {user}"))?,
                gid: f[3]
                    .parse()
                    .with_context(|| format!("bad gid in /etc/passwd for {user}"))?,
                home: PathBuf::from(if f[5].is_empty() {
                    format!("/home/{user}")
                } else {
                    f[5].to_string()
                }),
            });
        }
    }
    bail!("user {user} does not exist (slurm-conf/install-deps.sh creates alice and bob)")
}

fn require_root() -> Result<()> {
    let uid = fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX);
    ensure!(uid == 0, "the cluster tests must run as root (they submit jobs via runuser and edit /etc/slurm); {START_HINT}");
    Ok(())
}

// ------------------------------------------------------------------ cluster state

/// Which cluster `slurm-conf/cluster.sh up` started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterMode {
    /// `cluster.sh up`: one node named `hostname -s`.
    OneNode,
    /// `cluster.sh up --nodes 2`: nodes `<host>n1` and `<host>n2` on one machine.
    TwoNode,
    /// `cluster.sh up --nodes 4`: nodes `<host>n1`..`n4`, each slurmd in its own mount namespace
    /// with private jobscope directories (nodes that share nothing but SLURM).
    FourNode,
}

/// Fails with a clear message unless we are root, slurmctld answers and every node is usable
/// (not down, drained or unresponsive).
pub fn require_cluster() -> Result<()> {
    require_root()?;
    let ping = root_cmd("scontrol").arg("ping").output();
    let ping = match ping {
        Ok(o) => CmdOut::from_output(o),
        Err(e) => bail!("no SLURM test cluster: cannot run scontrol ({e}); {START_HINT}"),
    };
    ensure!(
        ping.stdout.contains("is UP"),
        "no SLURM test cluster is up (`scontrol ping`: {}); {START_HINT}",
        ping.stdout
            .lines()
            .chain(ping.stderr.lines())
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output")
            .trim()
    );
    let states = slurm_cmd("sinfo", &["-h", "-N", "-o", "%N %T %E"])?;
    let mut bad = Vec::new();
    for line in states.lines() {
        let mut it = line.splitn(3, ' ');
        let (node, state, reason) = (
            it.next().unwrap_or(""),
            it.next().unwrap_or(""),
            it.next().unwrap_or(""),
        );
        // 24.11's `planned`: an idle node the backfill scheduler holds for a pending job.
        if !matches!(
            state,
            "idle" | "mixed" | "allocated" | "completing" | "planned"
        ) {
            bad.push(format!("{node}: {state} ({reason})"));
        }
    }
    ensure!(
        !states.trim().is_empty(),
        "the SLURM test cluster has no nodes; {START_HINT}"
    );
    ensure!(
        bad.is_empty(),
        "SLURM test cluster node(s) not usable: {}. An earlier test may have drained a node: \
         restart the cluster (`slurm-conf/cluster.sh up [--nodes 2]`) or \
         `scontrol update nodename=<node> state=resume`",
        bad.join("; ")
    );
    Ok(())
}

/// Node names of the running cluster, in `sinfo` order.
pub fn nodes() -> Result<Vec<String>> {
    let out =
        slurm_cmd("sinfo", &["-h", "-N", "-o", "%N"]).map_err(|e| anyhow!("{e}; {START_HINT}"))?;
    let mut v: Vec<String> = Vec::new();
    for n in out.split_whitespace() {
        if !v.iter().any(|x| x == n) {
            v.push(n.to_string());
        }
    }
    ensure!(
        !v.is_empty(),
        "the SLURM test cluster has no nodes; {START_HINT}"
    );
    Ok(v)
}

/// The mode of the running cluster (fails if none is up).
pub fn cluster_mode() -> Result<ClusterMode> {
    require_cluster()?;
    let n = nodes()?;
    match n.len() {
        1 => Ok(ClusterMode::OneNode),
        2 => Ok(ClusterMode::TwoNode),
        4 => Ok(ClusterMode::FourNode),
        k => bail!(
            "unexpected cluster with {k} nodes ({}); expected `cluster.sh up` or `up --nodes 2|4`",
            n.join(",")
        ),
    }
}

/// For `two_node_*` tests: fails unless the 2-node cluster is up; returns its node names.
pub fn require_two_nodes() -> Result<Vec<String>> {
    match cluster_mode()? {
        ClusterMode::TwoNode => nodes(),
        m => bail!(
            "this test needs the 2-node cluster (`slurm-conf/cluster.sh up --nodes 2`), but the {m:?} \
             cluster is up; tests named two_node_* run only there (tests/run-all.sh does that)"
        ),
    }
}

/// For `four_node_*` tests: fails unless the 4-node cluster of private nodes is up; returns its
/// node names.
pub fn require_four_nodes() -> Result<Vec<String>> {
    match cluster_mode()? {
        ClusterMode::FourNode => nodes(),
        m => bail!(
            "this test needs the 4-node cluster (`slurm-conf/cluster.sh up --nodes 4`), but the {m:?} \
             cluster is up; tests named four_node_* run only there (tests/run-all.sh does that)"
        ),
    }
}

/// For tests that assume the 1-node cluster.
pub fn require_one_node() -> Result<String> {
    match cluster_mode()? {
        ClusterMode::OneNode => Ok(nodes()?.remove(0)),
        m => bail!(
            "this test needs the 1-node cluster (`slurm-conf/cluster.sh up`), but the {m:?} cluster is up"
        ),
    }
}

/// `scontrol update nodename=N state=resume` for every drained/down node (after a test that
/// drains a node on purpose).
pub fn resume_nodes() -> Result<()> {
    let states = slurm_cmd("sinfo", &["-h", "-N", "-o", "%N %T"])?;
    for line in states.lines() {
        let mut it = line.split_whitespace();
        if let (Some(node), Some(state)) = (it.next(), it.next()) {
            if state.starts_with("drain") || state.starts_with("down") {
                slurm_cmd(
                    "scontrol",
                    &["update", &format!("nodename={node}"), "state=resume"],
                )?;
            }
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ the cluster lock

mod sys {
    // flock(2) from the C library std already links; std's File::lock needs Rust 1.89,
    // newer than this workspace's rust-version.
    extern "C" {
        pub fn flock(fd: i32, operation: i32) -> i32;
    }
    pub const LOCK_EX: i32 = 2;
    pub const LOCK_NB: i32 = 4;
}

/// Exclusive use of the test cluster for one test (a `flock` on [`LOCK_FILE`], released when
/// the guard is dropped or the test process dies).
///
/// [`ClusterGuard::acquire`] also checks that the cluster is up and usable, and puts the
/// plugstack line back to [`DEFAULT_PLUGSTACK_LINE`] if an earlier test was killed before
/// it could restore it.
pub struct ClusterGuard {
    _lock: File,
}

/// The lock a parent already holds for the whole run, passed down as an open descriptor:
/// `JOBSCOPE_CLUSTER_LOCK_FD=N` (e.g. `exec 9>>/tmp/jobscope-cluster-tests.lock; flock 9;
/// JOBSCOPE_CLUSTER_LOCK_FD=9 cargo nextest run …`, as slurm-conf/trixie/run-suite.sh does while
/// the 24.11 daemons stand in for 22.05's). flock on the same open file succeeds again, and other
/// processes' tests keep waiting. The descriptor must be that lock file.
fn inherited_lock() -> Result<Option<File>> {
    use std::os::unix::io::FromRawFd;
    let Ok(v) = std::env::var("JOBSCOPE_CLUSTER_LOCK_FD") else {
        return Ok(None);
    };
    let fd: i32 = v
        .parse()
        .with_context(|| format!("JOBSCOPE_CLUSTER_LOCK_FD={v:?} is not a descriptor number"))?;
    let target = fs::read_link(format!("/proc/self/fd/{fd}"))
        .with_context(|| format!("JOBSCOPE_CLUSTER_LOCK_FD={fd} is not open here"))?;
    ensure!(
        target == Path::new(LOCK_FILE),
        "JOBSCOPE_CLUSTER_LOCK_FD={fd} is {}, not {LOCK_FILE}",
        target.display()
    );
    // SAFETY: dup of a descriptor that is open (checked above); the File owns the copy only.
    let copy = unsafe { libc::dup(fd) };
    ensure!(copy >= 0, "dup({fd}): {}", std::io::Error::last_os_error());
    // SAFETY: `copy` is a fresh descriptor nothing else owns.
    Ok(Some(unsafe { File::from_raw_fd(copy) }))
}

impl ClusterGuard {
    pub fn acquire() -> Result<ClusterGuard> {
        require_root()?;
        let mut f = match inherited_lock()? {
            Some(f) => f,
            None => OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(LOCK_FILE)
                .with_context(|| format!("cannot open {LOCK_FILE}"))?,
        };
        let start = Instant::now();
        loop {
            // SAFETY: flock on a file descriptor we own; no memory is involved.
            let rc = unsafe { sys::flock(f.as_raw_fd(), sys::LOCK_EX | sys::LOCK_NB) };
            if rc == 0 {
                break;
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(11) && err.kind() != std::io::ErrorKind::Interrupted {
                bail!("flock({LOCK_FILE}): {err}");
            }
            if start.elapsed() > LOCK_TIMEOUT {
                let holder = fs::read_to_string(LOCK_FILE).unwrap_or_default();
                bail!("timed out after {LOCK_TIMEOUT:?} waiting for the cluster lock {LOCK_FILE} (held by: {})", holder.trim());
            }
            sleep(POLL_INTERVAL);
        }
        f.set_len(0)?;
        writeln!(
            f,
            "pid {} {}",
            std::process::id(),
            std::env::args().collect::<Vec<_>>().join(" ")
        )?;
        require_cluster()?;
        restore_config_left_behind()?;
        // Likewise for a mail test's `mail::edit_config`.
        mail::recover_config()?;
        if let Ok(cur) = fs::read_to_string(PLUGSTACK_CONF) {
            if cur.trim() != DEFAULT_PLUGSTACK_LINE {
                eprintln!(
                    "cluster-tests: resetting {PLUGSTACK_CONF} from {:?} to the default line",
                    cur.trim()
                );
                write_atomic(
                    Path::new(PLUGSTACK_CONF),
                    &format!("{DEFAULT_PLUGSTACK_LINE}\n"),
                    0o644,
                )?;
            }
        }
        Ok(ClusterGuard { _lock: f })
    }
}

// ------------------------------------------------------------------ plugstack line

/// Restores the plugstack file to what it was before (or removes it if it did not exist)
/// when dropped.
pub struct PlugstackGuard {
    original: Option<String>,
    restored: bool,
}

impl PlugstackGuard {
    /// Restores now (also done on drop).
    pub fn restore(mut self) -> Result<()> {
        self.restore_inner()
    }

    fn restore_inner(&mut self) -> Result<()> {
        if self.restored {
            return Ok(());
        }
        self.restored = true;
        match self.original.take() {
            Some(s) => write_atomic(Path::new(PLUGSTACK_CONF), &s, 0o644),
            None => match fs::remove_file(PLUGSTACK_CONF) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            },
        }
    }
}

impl Drop for PlugstackGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore_inner() {
            eprintln!("cluster-tests: cannot restore {PLUGSTACK_CONF}: {e:#}");
        }
    }
}

/// Rewrites the plugstack line with plugin arguments, e.g.
/// `set_plugin_args("spool_dir=/x inject_panic=sampler")` gives
/// `optional /usr/local/lib/slurm/jobscope_spank.so spool_dir=/x inject_panic=sampler`.
/// New job steps see it at once (slurmstepd reads plugstack per step); the returned guard
/// restores the previous content when dropped.
pub fn set_plugin_args(args: &str) -> Result<PlugstackGuard> {
    let line = format!("{DEFAULT_PLUGSTACK_LINE} {}", args.trim());
    set_plugstack_line(line.trim_end())
}

/// [`set_plugin_args`] for the fault-injection build ([`FAULTS_PLUGIN_SO`]) in place of the
/// packaged plugin, e.g. `set_fault_plugin_args("inject=sampler_panic")`: only the jobs started
/// while the guard lives load it.
pub fn set_fault_plugin_args(args: &str) -> Result<PlugstackGuard> {
    let so = match release_root() {
        Some(root) => root.join(FAULTS_PLUGIN_SO.trim_start_matches('/')),
        None => PathBuf::from(FAULTS_PLUGIN_SO),
    };
    ensure!(
        so.is_file(),
        "{} missing: build it (tests/run-all.sh's build phase, or slurm-conf/trixie/cluster.sh build) \
         and run cluster.sh install",
        so.display()
    );
    set_plugstack_line(&format!("optional {FAULTS_PLUGIN_SO} {}", args.trim()))
}

/// Writes an arbitrary plugstack line (e.g. `required ...`); the guard restores.
pub fn set_plugstack_line(line: &str) -> Result<PlugstackGuard> {
    let original = match fs::read_to_string(PLUGSTACK_CONF) {
        Ok(s) => Some(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(anyhow!(e).context(format!("cannot read {PLUGSTACK_CONF}"))),
    };
    write_atomic(Path::new(PLUGSTACK_CONF), &format!("{line}\n"), 0o644)?;
    Ok(PlugstackGuard {
        original,
        restored: false,
    })
}

/// Puts back the default plugstack line (the plugin with no arguments).
pub fn restore_plugin_args() -> Result<()> {
    write_atomic(
        Path::new(PLUGSTACK_CONF),
        &format!("{DEFAULT_PLUGSTACK_LINE}\n"),
        0o644,
    )
}

/// The current content of the plugstack line file, if any.
pub fn plugstack_line() -> Option<String> {
    fs::read_to_string(PLUGSTACK_CONF)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Writes via a temporary file + rename, so a slurmstepd reading it never sees half a file.
pub fn write_atomic(path: &Path, content: &str, mode: u32) -> Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent", path.display()))?;
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    fs::write(&tmp, content).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
    fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
    Ok(())
}

// ------------------------------------------------------------------ jobscope.toml

/// The jobscope config the plugin (per step), the epilog and the CLI read.
pub const JOBSCOPE_TOML: &str = "/etc/jobscope/jobscope.toml";
/// While a [`ConfigSectionGuard`] is active the original config is also kept here, so that a test
/// killed before its guard could restore it is undone by the next [`ClusterGuard::acquire`].
pub const JOBSCOPE_TOML_BACKUP: &str = "/etc/jobscope/.jobscope.toml.config-guard-orig";
/// First line of a config written by a [`ConfigSectionGuard`].
const SECTION_GUARD_MARK: &str =
    "# TEMPORARY config of a jobscope cluster test (ConfigSectionGuard)";

/// Puts back the config a killed test left behind (see [`JOBSCOPE_TOML_BACKUP`]). A backup
/// next to a config that is not ours (`cluster.sh install` ran since) is just removed.
pub fn restore_config_left_behind() -> Result<()> {
    let Ok(orig) = fs::read_to_string(JOBSCOPE_TOML_BACKUP) else {
        return Ok(());
    };
    let cur = fs::read_to_string(JOBSCOPE_TOML).unwrap_or_default();
    if cur.starts_with(SECTION_GUARD_MARK) {
        eprintln!("cluster-tests: restoring {JOBSCOPE_TOML} left behind by a killed test");
        write_atomic(Path::new(JOBSCOPE_TOML), &orig, 0o644)?;
    }
    fs::remove_file(JOBSCOPE_TOML_BACKUP)
        .with_context(|| format!("cannot remove {JOBSCOPE_TOML_BACKUP}"))?;
    Ok(())
}

/// Replaces the `[name]` table of `toml` (from its header to the next table header) with
/// `body`, or appends the table when there is none. Other tables are kept byte for byte.
pub fn replace_toml_section(toml: &str, name: &str, body: &str) -> String {
    let header = format!("[{name}]");
    let is_header = |l: &str| l.trim_start().starts_with('[');
    let mut out = String::new();
    let mut skipping = false;
    let mut done = false;
    for line in toml.split_inclusive('\n') {
        if is_header(line) {
            skipping = false;
            if line.trim() == header && !done {
                skipping = true;
                done = true;
                out.push_str(&header);
                out.push('\n');
                out.push_str(body.trim_end());
                out.push_str("\n\n");
                continue;
            }
        }
        if !skipping {
            out.push_str(line);
        }
    }
    if !done {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
        out.push_str(&header);
        out.push('\n');
        out.push_str(body.trim_end());
        out.push('\n');
    }
    out
}

/// A temporary change of [`JOBSCOPE_TOML`]; the original is put back when the guard is
/// dropped (also on a failed test), and by the next [`ClusterGuard::acquire`] if the test
/// process was killed. Hold it inside a [`ClusterGuard`]: new job steps, epilogs and the CLI
/// read the config afresh, so it applies to every job submitted while it is held.
pub struct ConfigSectionGuard {
    original: Option<String>,
    restored: bool,
}

impl ConfigSectionGuard {
    /// Sets table `[name]` of the config to `body` (replacing the table or appending it).
    pub fn set_section(name: &str, body: &str) -> Result<ConfigSectionGuard> {
        let original = match fs::read_to_string(JOBSCOPE_TOML) {
            Ok(s) => Some(s),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(anyhow!(e).context(format!("cannot read {JOBSCOPE_TOML}"))),
        };
        let g = ConfigSectionGuard {
            original: original.clone(),
            restored: false,
        };
        g.change(name, body)?;
        Ok(g)
    }

    /// Sets (another) table while the guard is held; the drop still restores the original.
    pub fn change(&self, name: &str, body: &str) -> Result<()> {
        if let Some(o) = &self.original {
            if !Path::new(JOBSCOPE_TOML_BACKUP).exists() {
                write_atomic(Path::new(JOBSCOPE_TOML_BACKUP), o, 0o600)?;
            }
        }
        let cur = fs::read_to_string(JOBSCOPE_TOML).unwrap_or_default();
        let cur = match cur.strip_prefix(SECTION_GUARD_MARK) {
            Some(rest) => rest.split_once('\n').map_or("", |x| x.1).to_string(),
            None => cur,
        };
        let new = format!(
            "{SECTION_GUARD_MARK}; the original is restored after the test\n{}",
            replace_toml_section(&cur, name, body)
        );
        write_atomic(Path::new(JOBSCOPE_TOML), &new, 0o644)
    }

    /// The config as it is now.
    pub fn current() -> Result<String> {
        fs::read_to_string(JOBSCOPE_TOML).with_context(|| format!("cannot read {JOBSCOPE_TOML}"))
    }

    /// Restores now (also done on drop).
    pub fn restore(mut self) -> Result<()> {
        self.restore_inner()
    }

    fn restore_inner(&mut self) -> Result<()> {
        if self.restored {
            return Ok(());
        }
        self.restored = true;
        match self.original.take() {
            Some(s) => write_atomic(Path::new(JOBSCOPE_TOML), &s, 0o644)?,
            None => match fs::remove_file(JOBSCOPE_TOML) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            },
        }
        match fs::remove_file(JOBSCOPE_TOML_BACKUP) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

impl Drop for ConfigSectionGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore_inner() {
            eprintln!("cluster-tests: cannot restore {JOBSCOPE_TOML}: {e:#}");
        }
    }
}

// ------------------------------------------------------------------ logs

/// A position in a log file; [`LogMark::since`] gives what was appended after it.
#[derive(Debug, Clone)]
pub struct LogMark {
    pub path: PathBuf,
    offset: u64,
}

impl LogMark {
    pub fn now(path: impl Into<PathBuf>) -> LogMark {
        let path = path.into();
        let offset = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        LogMark { path, offset }
    }

    /// The text appended since the mark (all of the file if it shrank: rotated).
    pub fn since(&self) -> Result<String> {
        let bytes =
            fs::read(&self.path).with_context(|| format!("cannot read {}", self.path.display()))?;
        let from = if (bytes.len() as u64) < self.offset {
            0
        } else {
            self.offset as usize
        };
        Ok(String::from_utf8_lossy(&bytes[from..]).into_owned())
    }
}

/// The slurmd log file of NODE (`slurmd-<node>.log` in the 2-node mode, else `slurmd.log`).
pub fn slurmd_log(node: &str) -> PathBuf {
    let per_node = PathBuf::from(format!("/var/log/slurm/slurmd-{node}.log"));
    if nodes().map(|n| n.len() > 1).unwrap_or(false) && per_node.exists() {
        per_node
    } else {
        PathBuf::from("/var/log/slurm/slurmd.log")
    }
}

// ------------------------------------------------------------------ jobs

/// A fresh directory owned by USER (mode 0755) below [`WORK_BASE`]; kept after the test.
pub fn user_work_dir(user: &str) -> Result<PathBuf> {
    let u = user_info(user)?;
    fs::create_dir_all(WORK_BASE).with_context(|| format!("cannot create {WORK_BASE}"))?;
    fs::set_permissions(WORK_BASE, fs::Permissions::from_mode(0o755))?;
    let dir = tempfile::Builder::new()
        .prefix(&format!("{user}-"))
        .tempdir_in(WORK_BASE)
        .with_context(|| format!("cannot create a directory in {WORK_BASE}"))?
        .keep();
    chown(&dir, Some(u.uid), Some(u.gid))
        .with_context(|| format!("cannot chown {}", dir.display()))?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}

/// Submits a batch job as USER and returns its id.
///
/// Runs `runuser -u USER -- env -i PATH=/usr/bin:/bin HOME=<home> sbatch --parsable
/// SBATCH_ARGS... [job.sh]` in a fresh directory owned by the user (so the default output
/// file `slurm-<id>.out` lands there; read it with [`job_output`]). SCRIPT is written to
/// `job.sh` in that directory; pass `""` to submit without a script (with `--wrap`).
/// A batch script that prints `start`, keeps one core busy for `burn_s` seconds of wall time,
/// sleeps `sleep_s` seconds and prints `done`, so the CPU time up to any later moment is known.
/// The loop reads bash's `EPOCHREALTIME` (microseconds; its decimal mark depends on the locale, so
/// only the digits are kept): `SECONDS` counts whole seconds, so a loop
/// on it runs anywhere between `burn_s - 1` and `burn_s` seconds and tests on its CPU time flake.
pub fn burn_then_sleep(burn_s: u32, sleep_s: u32) -> String {
    format!(
        "#!/bin/bash\necho start\nend=$(( ${{EPOCHREALTIME//[!0-9]/}} + {burn_s} * 1000000 ))\nwhile (( ${{EPOCHREALTIME//[!0-9]/}} < end )); do :; done\nsleep {sleep_s}\necho done\n"
    )
}

/// Submits `script` as alice and returns (id, node) once SLURM says the job runs.
pub fn submit_running(args: &[&str], script: &str) -> Result<(u32, String)> {
    let id = submit("alice", args, script)?;
    let node = wait_for(
        &format!("job {id} running"),
        Duration::from_secs(180),
        || {
            let info = job_info(id).ok()?;
            (info.get("JobState")? == "RUNNING").then(|| info.get("NodeList").cloned())?
        },
    )?;
    Ok((id, node))
}

pub fn submit(user: &str, sbatch_args: &[&str], script: &str) -> Result<u32> {
    let args: Vec<OsString> = sbatch_args.iter().map(OsString::from).collect();
    submit_os(user, &args, script)
}

/// [`submit`] with arguments that need not be UTF-8 (e.g. `-J` with invalid bytes).
pub fn submit_os(user: &str, sbatch_args: &[OsString], script: &str) -> Result<u32> {
    require_root()?;
    let u = user_info(user)?;
    let dir = user_work_dir(user)?;
    let mut c = release_cmd("/usr/sbin/runuser", &dir);
    c.env_clear()
        .env("PATH", ROOT_PATH)
        .args(["-u", user, "--", "/usr/bin/env", "-i"])
        .arg(format!("PATH={USER_PATH}"))
        .arg(format!("HOME={}", u.home.display()))
        .args(["sbatch", "--parsable"])
        .args(sbatch_args);
    if !script.is_empty() {
        let path = dir.join("job.sh");
        fs::write(&path, script).with_context(|| format!("cannot write {}", path.display()))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
        chown(&path, Some(u.uid), Some(u.gid))?;
        c.arg(&path);
    }
    let out = CmdOut::from_output(c.output().context("cannot run runuser/sbatch")?);
    if !out.success() {
        bail!(
            "sbatch as {user} failed (exit {:?}): {} {}\n(args: {sbatch_args:?}); is the cluster up? {START_HINT}",
            out.code,
            out.stderr.trim(),
            out.stdout.trim()
        );
    }
    let first = out.stdout.lines().next().unwrap_or("").trim();
    let id = first.split(';').next().unwrap_or("");
    id.parse::<u32>().map_err(|_| {
        anyhow!(
            "unexpected `sbatch --parsable` output {:?} (stderr: {:?})",
            out.stdout,
            out.stderr
        )
    })
}

/// `scontrol show job -o ID` as a key/value map.
pub fn job_info(id: u32) -> Result<BTreeMap<String, String>> {
    let out = slurm_cmd("scontrol", &["show", "job", "-o", &id.to_string()])?;
    let line = out.lines().find(|l| l.starts_with("JobId=")).unwrap_or("");
    let map = parse_record(line);
    ensure!(
        map.contains_key("JobState"),
        "no record for job {id} in scontrol output: {out:?}"
    );
    Ok(map)
}

/// One field of `scontrol show job -o ID`, e.g. `job_field(id, "ExitCode")` -> `"0:0"`.
pub fn job_field(id: u32, key: &str) -> Result<String> {
    let info = job_info(id)?;
    info.get(key).cloned().ok_or_else(|| {
        anyhow!(
            "job {id} has no field {key:?} (fields: {:?})",
            info.keys().collect::<Vec<_>>()
        )
    })
}

/// Parses one `scontrol ... -o` record (`Key=value Key=value ...`). A token that does not
/// start with `Key=` is appended (with its space) to the previous value, so values with
/// spaces survive.
pub fn parse_record(line: &str) -> BTreeMap<String, String> {
    fn is_key(k: &str) -> bool {
        k.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '/' | '-'))
    }
    let mut map = BTreeMap::new();
    let mut cur: Option<String> = None;
    for tok in line.split_whitespace() {
        if let Some((k, v)) = tok.split_once('=') {
            if is_key(k) {
                map.insert(k.to_string(), v.to_string());
                cur = Some(k.to_string());
                continue;
            }
        }
        if let Some(k) = &cur {
            if let Some(v) = map.get_mut(k) {
                v.push(' ');
                v.push_str(tok);
            }
        }
    }
    map
}

/// Job states after which nothing more happens to the job (and its epilogs have finished:
/// while they run the state reads COMPLETING).
pub const TERMINAL_STATES: &[&str] = &[
    "COMPLETED",
    "FAILED",
    "TIMEOUT",
    "CANCELLED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
];

/// Polls `scontrol show job` every 0.2 s until the job reaches a terminal state
/// ([`TERMINAL_STATES`]) and returns it, e.g. `"COMPLETED"`. Because SLURM reports
/// `COMPLETING` until every node's Epilog has finished, the epilog's output exists when this
/// returns. Fails on timeout, with the last job record in the message.
pub fn wait_job(id: u32, timeout: Duration) -> Result<String> {
    let start = Instant::now();
    loop {
        let last = match job_info(id) {
            Ok(info) => {
                let state = info.get("JobState").cloned().unwrap_or_default();
                if TERMINAL_STATES.contains(&state.as_str()) {
                    return Ok(state);
                }
                format!(
                    "JobState={state} Reason={} NodeList={}",
                    info.get("Reason").map_or("?", |s| s.as_str()),
                    info.get("NodeList").map_or("?", |s| s.as_str())
                )
            }
            Err(e) => format!("{e:#}"),
        };
        if start.elapsed() >= timeout {
            bail!("job {id} did not finish within {timeout:?}: last seen {last}");
        }
        sleep(POLL_INTERVAL);
    }
}

/// The text of the job's stdout file (`StdOut=` of `scontrol show job`).
pub fn job_output(id: u32) -> Result<String> {
    let path = job_field(id, "StdOut")?;
    fs::read_to_string(&path).with_context(|| format!("cannot read output file {path} of job {id}"))
}

/// `scancel ID` (as root).
pub fn scancel(id: u32) -> Result<()> {
    slurm_cmd("scancel", &[&id.to_string()]).map(|_| ())
}

/// Polls CHECK every 0.2 s until it returns `Some`, or fails after TIMEOUT with WHAT.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return Ok(v);
        }
        if start.elapsed() >= timeout {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        sleep(POLL_INTERVAL);
    }
}

/// One job record as `squeue` lists it (`-r`: array tasks one per line, pending ones included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRecord {
    pub job_id: u32,
    /// The array's id (`%F`; the job's own id when it is not an array task).
    pub array_job_id: u32,
    /// `%K`: the task index, `None` for a job that is no array task (or a pending range like `3-5`).
    pub array_task_id: Option<u32>,
    pub state: String,
}

/// `squeue -h -r -t all -j ID` as records. Unlike [`job_info`] this never prints the job name,
/// so it works for jobs whose name holds a newline.
pub fn queue_records(id: u32) -> Result<Vec<QueueRecord>> {
    let out = slurm_cmd(
        "squeue",
        &[
            "-h",
            "-r",
            "-t",
            "all",
            "-j",
            &id.to_string(),
            "-o",
            "%A|%F|%K|%T",
        ],
    )?;
    let mut v = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.trim().split('|').collect();
        ensure!(f.len() == 4, "unexpected squeue line {line:?}");
        v.push(QueueRecord {
            job_id: f[0]
                .parse()
                .with_context(|| format!("squeue line {line:?}"))?,
            array_job_id: f[1]
                .parse()
                .with_context(|| format!("squeue line {line:?}"))?,
            array_task_id: f[2].parse().ok(),
            state: f[3].to_string(),
        });
    }
    Ok(v)
}

/// [`wait_job`] through `squeue` ([`queue_records`]): for jobs with hostile names.
pub fn wait_job_squeue(id: u32, timeout: Duration) -> Result<String> {
    let what = format!("job {id} to finish");
    let mut last = String::new();
    let r = wait_for(&what, timeout, || match queue_records(id) {
        Ok(v) => {
            let r = v.into_iter().find(|r| r.job_id == id)?;
            last = r.state.clone();
            TERMINAL_STATES
                .contains(&r.state.as_str())
                .then_some(r.state)
        }
        Err(e) => {
            last = format!("{e:#}");
            None
        }
    });
    r.with_context(|| format!("last seen: {last}"))
}

/// Waits until job array ARRAY_ID has N tasks, all in a terminal state (and so past their
/// epilogs); returns them sorted by task index.
pub fn wait_array(array_id: u32, n: usize, timeout: Duration) -> Result<Vec<QueueRecord>> {
    let mut last = Vec::new();
    let r = wait_for(
        &format!("the {n} tasks of job array {array_id}"),
        timeout,
        || {
            let mut v: Vec<QueueRecord> = queue_records(array_id)
                .ok()?
                .into_iter()
                .filter(|r| r.array_job_id == array_id)
                .collect();
            v.sort_by_key(|r| r.array_task_id);
            last = v.clone();
            (v.len() == n
                && v.iter().all(|r| {
                    r.array_task_id.is_some() && TERMINAL_STATES.contains(&r.state.as_str())
                }))
            .then_some(v)
        },
    );
    r.with_context(|| format!("last seen: {last:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_section_is_replaced_or_appended() {
        let t = "# c\n[sampler]\ncadence_s = 5\n\n[gpu]\nenabled = false\n\n[mail]\nfrom = \"x\"\n";
        let r = replace_toml_section(t, "gpu", "nvml_lib_path = \"/x.so\"\n");
        assert_eq!(
            r,
            "# c\n[sampler]\ncadence_s = 5\n\n[gpu]\nnvml_lib_path = \"/x.so\"\n\n[mail]\nfrom = \"x\"\n"
        );
        let r = replace_toml_section("[sampler]\ncadence_s = 5", "gpu", "a = 1");
        assert_eq!(r, "[sampler]\ncadence_s = 5\n\n[gpu]\na = 1\n");
        // [gpu.x] is another table: kept.
        let r = replace_toml_section("[gpu.x]\nb = 2\n", "gpu", "a = 1");
        assert_eq!(r, "[gpu.x]\nb = 2\n\n[gpu]\na = 1\n");
    }

    #[test]
    fn parses_scontrol_records() {
        let m = parse_record(
            "JobId=7 JobName=wrap UserId=alice(1001) JobState=COMPLETED Reason=None Dependency=(null) \
             ExitCode=0:0 TRES=cpu=1,mem=1000M,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* \
             Comment=two words StdOut=/tmp/x/slurm-7.out",
        );
        assert_eq!(m["JobId"], "7");
        assert_eq!(m["JobState"], "COMPLETED");
        assert_eq!(m["ExitCode"], "0:0");
        assert_eq!(m["TRES"], "cpu=1,mem=1000M,node=1,billing=1");
        assert_eq!(m["Socks/Node"], "*");
        assert_eq!(m["NtasksPerN:B:S:C"], "0:0:*:*");
        assert_eq!(m["Comment"], "two words");
        assert_eq!(m["StdOut"], "/tmp/x/slurm-7.out");
    }
}
