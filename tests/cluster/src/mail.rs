//! Mail helpers for the cluster tests: a real SMTP server on loopback (Debian's python3-aiosmtpd,
//! `tests/cluster/smtp/sink.py`), a server that accepts and never answers, temporary edits of
//! /etc/jobscope/jobscope.toml, and readers for the epilog log, the mail queue and local mboxes.
//!
//! The test cluster's config (slurm-conf/jobscope.toml) mails `<user>@localhost` over SMTP to
//! 127.0.0.1:2525 ([`SMTP_PORT`]), where nothing listens unless a test started an [`SmtpSink`] or a
//! [`HangingServer`]; both are owned by a guard and gone when it is dropped.
//!
//! A mail is tied to its job by its Message-ID, `<jobscope.<cluster>.<job>.<start>.<kind>@domain>`
//! (see deliver/src/mail/message.rs `mail_id`), never by the subject (which a job name can fill).

use crate::{write_atomic, WORK_BASE};
use anyhow::{anyhow, bail, ensure, Context, Result};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{sleep, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const SMTP_HOST: &str = "127.0.0.1";
/// The port slurm-conf/jobscope.toml sends to (`[mail.smtp] port`).
pub const SMTP_PORT: u16 = 2525;
/// The system python (python3-aiosmtpd is a Debian package; a pyenv/venv `python3` on PATH lacks it).
pub const PYTHON: &str = "/usr/bin/python3";
pub const SINK_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/smtp/sink.py");
pub const JOBSCOPE_CONFIG: &str = "/etc/jobscope/jobscope.toml";
/// The installed config while a test runs with an edited one ([`edit_config`]); put back by the
/// guard, or by the next [`crate::ClusterGuard::acquire`] if the test was killed.
const CONFIG_BACKUP: &str = "/etc/jobscope/.jobscope.toml.cluster-tests-orig";
pub const EPILOG_LOG: &str = "/var/log/jobscope/epilog.log";
/// `[mail] queue_dir` (the default).
pub const MAIL_QUEUE: &str = "/var/spool/jobscope/mail";
pub const JOBSCOPE_BIN: &str = "/usr/local/bin/jobscope";

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

// ------------------------------------------------------------------ message ids

/// `(job id, kind)` of a jobscope Message-ID or queue id: `[jobscope.]<cluster>.<job>.<start>.<kind>[@domain]`.
pub fn parse_mail_id(id: &str) -> Option<(u32, String)> {
    let id = id.trim().trim_start_matches('<').trim_end_matches('>');
    let local = id.split('@').next()?;
    let mut it = local.rsplitn(4, '.');
    let kind = it.next()?;
    let _start: u64 = it.next()?.parse().ok()?;
    let job: u32 = it.next()?.parse().ok()?;
    it.next()?;
    Some((job, kind.to_string()))
}

/// The header block of a raw message (up to the first empty line), as text.
pub fn header_block(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let end = text
        .find("\r\n\r\n")
        .or_else(|| text.find("\n\n"))
        .unwrap_or(text.len());
    text[..end].to_string()
}

/// The unfolded header lines of a raw message.
pub fn header_lines(raw: &[u8]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in header_block(raw).split('\n') {
        let l = l.trim_end_matches('\r');
        if (l.starts_with(' ') || l.starts_with('\t')) && !out.is_empty() {
            out.last_mut().unwrap().push_str(l);
        } else {
            out.push(l.to_string());
        }
    }
    out
}

// ------------------------------------------------------------------ delivered messages

/// One message the SMTP sink accepted.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub file: PathBuf,
    /// The DATA bytes as they came off the wire.
    pub raw: Vec<u8>,
    /// Envelope: MAIL FROM and RCPT TO.
    pub mail_from: String,
    pub rcpt_tos: Vec<String>,
    pub helo: String,
    pub received_unix_ms: u64,
}

impl Delivered {
    fn read(eml: &Path) -> Result<Delivered> {
        let raw = std::fs::read(eml).with_context(|| format!("read {}", eml.display()))?;
        let side = eml.with_extension("json");
        let meta: serde_json::Value = serde_json::from_slice(
            &std::fs::read(&side).with_context(|| format!("read {}", side.display()))?,
        )?;
        Ok(Delivered {
            file: eml.to_path_buf(),
            raw,
            mail_from: meta["mail_from"].as_str().unwrap_or_default().to_string(),
            rcpt_tos: meta["rcpt_tos"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            helo: meta["helo"].as_str().unwrap_or_default().to_string(),
            received_unix_ms: meta["received_unix_ms"].as_u64().unwrap_or(0),
        })
    }

    /// Parses the message with mail-parser; fails if it does not parse.
    pub fn parse(&self) -> Result<mail_parser::Message<'_>> {
        mail_parser::MessageParser::default()
            .parse(&self.raw)
            .ok_or_else(|| anyhow!("{}: mail-parser cannot parse it", self.file.display()))
    }

    /// The Message-ID header (without angle brackets), read from the raw header block.
    pub fn message_id(&self) -> Option<String> {
        header_lines(&self.raw).iter().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("Message-ID").then(|| {
                v.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
        })
    }

    /// `(job id, kind)` from the Message-ID.
    pub fn job(&self) -> Option<(u32, String)> {
        self.message_id().as_deref().and_then(parse_mail_id)
    }
}

// ------------------------------------------------------------------ ports

fn smtp_addr() -> SocketAddr {
    format!("{SMTP_HOST}:{SMTP_PORT}").parse().unwrap()
}

/// Whether something accepts connections on [`SMTP_PORT`].
pub fn smtp_port_open() -> bool {
    TcpStream::connect_timeout(&smtp_addr(), Duration::from_millis(300)).is_ok()
}

/// Waits until nothing listens on [`SMTP_PORT`] (a sink of an earlier, killed test stops by itself
/// within a second: it watches its parent).
pub fn wait_smtp_port_free(timeout: Duration) -> Result<()> {
    let t0 = Instant::now();
    while smtp_port_open() {
        if t0.elapsed() > timeout {
            bail!(
                "something still listens on {SMTP_HOST}:{SMTP_PORT} after {timeout:?} \
                 (`ss -ltnp 'sport = :{SMTP_PORT}'` shows what); the mail tests need that port"
            );
        }
        sleep(Duration::from_millis(100));
    }
    Ok(())
}

// ------------------------------------------------------------------ the SMTP sink

/// A real SMTP server (aiosmtpd) on 127.0.0.1:2525, run as a child process of the test; stopped by
/// its PID (SIGTERM, then SIGKILL) when dropped. Messages land in [`SmtpSink::dir`].
pub struct SmtpSink {
    child: Option<Child>,
    dir: PathBuf,
}

impl SmtpSink {
    /// Starts a sink that stores into a fresh directory below [`WORK_BASE`].
    pub fn start() -> Result<SmtpSink> {
        std::fs::create_dir_all(WORK_BASE)?;
        let dir = tempfile::Builder::new()
            .prefix("smtp-")
            .tempdir_in(WORK_BASE)?
            .keep();
        Self::start_in(&dir)
    }

    /// Starts a sink storing into `dir` (kept across [`Self::stop`] / [`Self::restart`]).
    pub fn start_in(dir: &Path) -> Result<SmtpSink> {
        let mut s = SmtpSink {
            child: None,
            dir: dir.to_path_buf(),
        };
        s.restart()?;
        Ok(s)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// (Re)starts the server process; returns once it accepts connections.
    pub fn restart(&mut self) -> Result<()> {
        ensure!(self.child.is_none(), "the SMTP sink is already running");
        ensure!(
            Path::new(PYTHON).exists(),
            "{PYTHON} is missing (slurm-conf/install-deps.sh installs python3 and python3-aiosmtpd)"
        );
        wait_smtp_port_free(Duration::from_secs(5))?;
        std::fs::create_dir_all(&self.dir)?;
        let mut child = Command::new(PYTHON)
            .arg(SINK_SCRIPT)
            .arg(&self.dir)
            .arg(SMTP_HOST)
            .arg(SMTP_PORT.to_string())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {PYTHON} {SINK_SCRIPT}"))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) if line.starts_with("ready") => {}
            other => {
                let _ = child.kill();
                let _ = child.wait();
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                bail!(
                    "the SMTP sink did not start ({other:?}): {} \
                     (is python3-aiosmtpd installed? slurm-conf/install-deps.sh)",
                    err.trim()
                );
            }
        }
        self.child = Some(child);
        ensure!(
            smtp_port_open(),
            "the SMTP sink says it is ready but {SMTP_HOST}:{SMTP_PORT} does not answer"
        );
        Ok(())
    }

    /// Stops the server process (by PID: SIGTERM, after 10 s SIGKILL); the messages stay.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = child.id() as libc::pid_t;
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let t0 = Instant::now();
        loop {
            if child.try_wait()?.is_some() {
                break;
            }
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            sleep(Duration::from_millis(50));
        }
        wait_smtp_port_free(Duration::from_secs(5))
    }

    /// Every message received so far, oldest first.
    pub fn messages(&self) -> Vec<Delivered> {
        let mut names: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension() == Some(OsStr::new("eml"))
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        names.sort();
        names
            .iter()
            .filter_map(|p| match Delivered::read(p) {
                Ok(d) => Some(d),
                Err(e) => {
                    eprintln!("smtp sink: {e:#}");
                    None
                }
            })
            .collect()
    }

    /// The messages about job `job` (by Message-ID).
    pub fn for_job(&self, job: u32) -> Vec<Delivered> {
        self.messages()
            .into_iter()
            .filter(|d| d.job().is_some_and(|(j, _)| j == job))
            .collect()
    }

    /// Waits for the first message about `job`.
    pub fn wait_for_job(&self, job: u32, timeout: Duration) -> Result<Delivered> {
        crate::wait_for(
            &format!("a mail about job {job} in {}", self.dir.display()),
            timeout,
            || self.for_job(job).into_iter().next(),
        )
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("cluster-tests: stopping the SMTP sink: {e:#}");
        }
    }
}

// ------------------------------------------------------------------ a server that never answers

/// A TCP server on 127.0.0.1:2525 that accepts connections and never says anything (no SMTP
/// greeting): what a wedged relay looks like. Stopped (and its connections closed) when dropped.
pub struct HangingServer {
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl HangingServer {
    pub fn start() -> Result<HangingServer> {
        wait_smtp_port_free(Duration::from_secs(5))?;
        let listener = TcpListener::bind(smtp_addr())
            .with_context(|| format!("cannot listen on {SMTP_HOST}:{SMTP_PORT}"))?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (s, a) = (stop.clone(), accepted.clone());
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        a.fetch_add(1, Ordering::SeqCst);
                        held.push(conn);
                    }
                    Err(_) => sleep(Duration::from_millis(20)),
                }
            }
        });
        Ok(HangingServer {
            stop,
            accepted,
            thread: Some(thread),
        })
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for HangingServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ------------------------------------------------------------------ the jobscope config

fn set_dotted(table: &mut toml::Table, key: &str, value: toml::Value) -> Result<()> {
    let parts: Vec<&str> = key.split('.').collect();
    let (last, path) = parts.split_last().ok_or_else(|| anyhow!("empty key"))?;
    let mut t = table;
    for p in path {
        t = t
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| anyhow!("{key}: {p} is not a table"))?;
    }
    t.insert(last.to_string(), value);
    Ok(())
}

/// The installed config's text with `edits` applied (`("mail.smtp.port", 2526.into())`).
pub fn config_with(edits: &[(&str, toml::Value)]) -> Result<String> {
    let text = std::fs::read_to_string(JOBSCOPE_CONFIG).with_context(|| {
        format!("cannot read {JOBSCOPE_CONFIG} (run slurm-conf/cluster.sh install)")
    })?;
    let mut table: toml::Table = text
        .parse()
        .with_context(|| format!("{JOBSCOPE_CONFIG} is not TOML"))?;
    for (k, v) in edits {
        set_dotted(&mut table, k, v.clone())?;
    }
    Ok(toml::to_string(&table)?)
}

/// The installed config is replaced while this lives; dropping it puts the original back.
pub struct ConfigGuard {
    original: String,
    restored: bool,
}

impl ConfigGuard {
    pub fn restore(mut self) -> Result<()> {
        self.restore_inner()
    }

    fn restore_inner(&mut self) -> Result<()> {
        if self.restored {
            return Ok(());
        }
        self.restored = true;
        write_atomic(Path::new(JOBSCOPE_CONFIG), &self.original, 0o644)?;
        let _ = std::fs::remove_file(CONFIG_BACKUP);
        Ok(())
    }
}

impl Drop for ConfigGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore_inner() {
            eprintln!("cluster-tests: cannot restore {JOBSCOPE_CONFIG}: {e:#}");
        }
    }
}

/// Installs an edited copy of /etc/jobscope/jobscope.toml (the epilog reads it at every run) until
/// the guard is dropped, e.g. `edit_config(&[("mail.transport", "sendmail".into())])`.
pub fn edit_config(edits: &[(&str, toml::Value)]) -> Result<ConfigGuard> {
    recover_config()?;
    let original = std::fs::read_to_string(JOBSCOPE_CONFIG)?;
    let edited = config_with(edits)?;
    write_atomic(Path::new(CONFIG_BACKUP), &original, 0o600)?;
    write_atomic(Path::new(JOBSCOPE_CONFIG), &edited, 0o644)?;
    Ok(ConfigGuard {
        original,
        restored: false,
    })
}

/// Puts back the config a killed test left edited (called by [`crate::ClusterGuard::acquire`]).
pub fn recover_config() -> Result<()> {
    if let Ok(orig) = std::fs::read_to_string(CONFIG_BACKUP) {
        eprintln!("cluster-tests: restoring {JOBSCOPE_CONFIG} that an earlier test left edited");
        write_atomic(Path::new(JOBSCOPE_CONFIG), &orig, 0o644)?;
        std::fs::remove_file(CONFIG_BACKUP)?;
    }
    Ok(())
}

/// An integer from the installed config, e.g. `config_u64("mail.flush_budget_s")`.
pub fn config_value(key: &str) -> Result<toml::Value> {
    let table: toml::Table = std::fs::read_to_string(JOBSCOPE_CONFIG)?.parse()?;
    let mut v = toml::Value::Table(table);
    for p in key.split('.') {
        v = v
            .get(p)
            .cloned()
            .ok_or_else(|| anyhow!("{JOBSCOPE_CONFIG} has no {key}"))?;
    }
    Ok(v)
}

pub fn config_u64(key: &str) -> Result<u64> {
    config_value(key)?
        .as_integer()
        .map(|i| i as u64)
        .ok_or_else(|| anyhow!("{key} is not an integer"))
}

// ------------------------------------------------------------------ the epilog log

/// A position in the epilog log; [`LogCursor::lines`] gives what was written after it.
pub struct LogCursor {
    path: PathBuf,
    offset: u64,
}

impl LogCursor {
    pub fn now() -> LogCursor {
        Self::at_end(Path::new(EPILOG_LOG))
    }

    pub fn at_end(path: &Path) -> LogCursor {
        LogCursor {
            path: path.to_path_buf(),
            offset: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        }
    }

    /// Everything written after the cursor.
    pub fn text(&self) -> String {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return String::new();
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return String::new();
        }
        let mut b = Vec::new();
        let _ = f.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    }

    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_string).collect()
    }

    /// The epilog's messages about job `job`: `job <id>: …` and `job <id> node …`, each from its
    /// start to the end of its line. Found anywhere in a line, not only after the timestamp:
    /// epilogs of jobs that end together append to the log at the same moment, and a message may
    /// be glued to the end of another one's line.
    pub fn job_lines(&self, job: u32) -> Vec<String> {
        let pats = [format!("job {job}: "), format!("job {job} node ")];
        let text = self.text();
        let mut out: Vec<(usize, String)> = Vec::new();
        for p in &pats {
            for (i, _) in text.match_indices(p.as_str()) {
                // `job 12: ` must not match inside `job 112: `.
                if text[..i].ends_with(|c: char| c.is_ascii_digit()) {
                    continue;
                }
                let end = text[i..].find('\n').map_or(text.len(), |e| i + e);
                out.push((i, text[i..end].to_string()));
            }
        }
        out.sort();
        out.into_iter().map(|(_, l)| l).collect()
    }

    /// The epilog's own duration for `job`, from its last message `job <id> node <n>: … in <ms> ms`.
    pub fn epilog_ms(&self, job: u32) -> Option<u64> {
        self.job_lines(job).iter().rev().find_map(|l| {
            if !l.starts_with(&format!("job {job} node ")) {
                return None;
            }
            // `… in 57 ms`, possibly followed by another epilog's message on the same line.
            let words: Vec<&str> = l.split(' ').collect();
            words.windows(3).find_map(|w| {
                (w[0] == "in" && w[2].starts_with("ms"))
                    .then(|| w[1].parse().ok())
                    .flatten()
            })
        })
    }
}

// ------------------------------------------------------------------ the mail queue

/// Queue files (`<id>.eml`, `<id>.json`) of mails about `job` in `dir` (the queue or its `dead/`).
pub fn queue_files(dir: &Path, job: u32, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(suffix))
                .and_then(parse_mail_id)
                .is_some_and(|(j, _)| j == job)
        })
        .collect();
    v.sort();
    v
}

/// Messages about `job` waiting in the queue.
pub fn queued_for_job(job: u32) -> Vec<PathBuf> {
    queue_files(Path::new(MAIL_QUEUE), job, ".eml")
}

/// `sent/` markers of mails about `job`.
pub fn sent_markers_for_job(job: u32) -> Vec<PathBuf> {
    queue_files(&Path::new(MAIL_QUEUE).join("sent"), job, "")
}

/// Waits until every queued mail about `job` is due (`next_attempt_unix` has passed).
pub fn wait_until_due(job: u32, timeout: Duration) -> Result<()> {
    crate::wait_for(
        &format!("the queued mail of job {job} to be due"),
        timeout,
        || {
            let now = unix_ms() / 1000;
            queue_files(Path::new(MAIL_QUEUE), job, ".json")
                .iter()
                .all(|p| {
                    std::fs::read(p)
                        .ok()
                        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                        .and_then(|m| m["next_attempt_unix"].as_u64())
                        .is_some_and(|t| t < now)
                })
                .then_some(())
        },
    )
}

/// `jobscope [--config C] ARGS…` as root with a clean environment.
pub fn jobscope(args: &[&str]) -> Result<crate::CmdOut> {
    // Inside the 24.11 rootfs when that release is under test: `jobscope` asks SLURM too.
    let out = crate::release_cmd(JOBSCOPE_BIN, std::path::Path::new("/"))
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .with_context(|| format!("cannot run {JOBSCOPE_BIN}"))?;
    Ok(crate::CmdOut {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// A sink with the queue drained into it, so that old undelivered mail of other tests does not
/// take this test's flush budget.
pub fn sink_with_empty_queue() -> Result<SmtpSink> {
    let sink = SmtpSink::start()?;
    let out = flush_queue(120)?;
    eprintln!("drained the mail queue: {out}");
    Ok(sink)
}

/// `jobscope mail flush --budget S`; fails unless it exits 0. Returns its summary line.
pub fn flush_queue(budget_s: u64) -> Result<String> {
    let out = jobscope(&["mail", "flush", "--budget", &budget_s.to_string()])?;
    ensure!(
        out.success(),
        "jobscope mail flush failed: {}{}",
        out.stderr,
        out.stdout
    );
    Ok(out.stdout.trim().to_string())
}

// ------------------------------------------------------------------ local mailboxes

/// A position in a local mbox (`/var/mail/<user>`); [`MboxCursor::messages`] gives what was
/// delivered after it, one raw message each (the mbox `From ` separator line removed).
pub struct MboxCursor {
    path: PathBuf,
    offset: u64,
}

impl MboxCursor {
    pub fn now(user: &str) -> MboxCursor {
        let path = PathBuf::from(format!("/var/mail/{user}"));
        let offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        MboxCursor { path, offset }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn messages(&self) -> Vec<Vec<u8>> {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return vec![];
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        // The mailbox was emptied or replaced meanwhile: read it all.
        let start = if len < self.offset { 0 } else { self.offset };
        if f.seek(SeekFrom::Start(start)).is_err() {
            return vec![];
        }
        let mut b = Vec::new();
        let _ = f.read_to_end(&mut b);
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut prev_blank = true;
        for line in b.split_inclusive(|&c| c == b'\n') {
            if prev_blank && line.starts_with(b"From ") {
                out.push(Vec::new());
            } else if let Some(m) = out.last_mut() {
                // The MTA escapes a body line that starts with "From " as ">From " in the mbox
                // (exim's mail_spool transport, the host's and the 24.11 rootfs's): undone here,
                // so the message is what was sent (e.g. a report's "From your last 3 runs…").
                let line = if line.starts_with(b">From ") {
                    &line[1..]
                } else {
                    line
                };
                m.extend_from_slice(line);
            }
            prev_blank = line == b"\n" || line == b"\r\n";
        }
        out
    }
}

/// Makes `path` readable by everyone (test output the user may want to look at).
pub fn world_readable(path: &Path) {
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mail_ids() {
        assert_eq!(
            parse_mail_id("<jobscope.jobscope.55.1795308096.end@localhost>"),
            Some((55, "end".to_string()))
        );
        assert_eq!(
            parse_mail_id("jobscope.55.1795308096.array-digest"),
            Some((55, "array-digest".to_string()))
        );
        assert_eq!(parse_mail_id("x.55.end"), None);
        assert_eq!(parse_mail_id("a.b.c.d"), None);
    }

    #[test]
    fn dotted_keys() {
        let mut t: toml::Table = "[mail]\nfrom = \"a@b\"\n".parse().unwrap();
        set_dotted(&mut t, "mail.smtp.port", 2526.into()).unwrap();
        set_dotted(&mut t, "paths.archive_dir", "/x".into()).unwrap();
        assert_eq!(t["mail"]["smtp"]["port"].as_integer(), Some(2526));
        assert_eq!(t["mail"]["from"].as_str(), Some("a@b"));
        assert_eq!(t["paths"]["archive_dir"].as_str(), Some("/x"));
    }

    #[test]
    fn log_messages_of_concurrent_epilogs() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log");
        std::fs::write(&p, "old\n").unwrap();
        let c = LogCursor::at_end(&p);
        std::fs::write(
            &p,
            "old\n17953112221795311222  job 249: --mail-user x refused (why); insteadjob 250: no mail (policy never)\n\
             1795311222 job 1250 node vm: Archived in 9 ms\n\
             1795311222 job 250 node vm: Archived { path: \"/a/250.json\" } in 57 msjob 251: y\n",
        )
        .unwrap();
        assert_eq!(
            c.job_lines(250),
            vec![
                "job 250: no mail (policy never)".to_string(),
                "job 250 node vm: Archived { path: \"/a/250.json\" } in 57 msjob 251: y"
                    .to_string()
            ]
        );
        assert_eq!(c.job_lines(249).len(), 1);
        assert_eq!(c.epilog_ms(250), Some(57));
        assert_eq!(c.epilog_ms(1250), Some(9));
    }

    #[test]
    fn mbox_split() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("mbox");
        std::fs::write(
            &p,
            "From a@b Sat\nSubject: 1\n\nx\nFrom inside\n\nFrom c@d Sun\nSubject: 2\n\ny\n\n>From your last 3 runs\n",
        )
        .unwrap();
        let c = MboxCursor { path: p, offset: 0 };
        let m = c.messages();
        assert_eq!(m.len(), 2);
        assert!(m[0].starts_with(b"Subject: 1"));
        assert!(m[0].ends_with(b"From inside\n\n"));
        assert_eq!(m[1], b"Subject: 2\n\ny\n\nFrom your last 3 runs\n");
    }
}
