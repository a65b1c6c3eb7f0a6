//! A durable mail queue, so no report is lost to a relay that is down, slow or hanging.
//!
//! ```text
//! <dir>/                       0700, root
//!   <id>.eml                   the message, exactly as lettre formatted it (written last: the commit)
//!   <id>.json                  envelope, created, attempts, next_attempt_unix, last_error
//!   <id>.lock                  flock'd by whoever works on <id> (enqueue, a flusher)
//!   sent/<id>                  delivered: a marker, kept `keep_sent` so a second enqueue is a no-op
//!   dead/<id>.eml, <id>.json   given up on (too old, or a permanent error), with the reason
//! ```
//!
//! `<id>` is stable for one mail about one job run ([`crate::mail::message::mail_id`]: cluster, job
//! id, start time, kind), so a retried epilog or a `reap` that builds the same mail again enqueues
//! nothing new, and the message is sent at most once:
//! - every state change of `<id>` happens under an exclusive `flock` on `<id>.lock`; a flusher only
//!   try-locks (another flusher already sending it is skipped, never waited for), and re-checks the
//!   files once it holds the lock;
//! - on success the `sent/` marker is written before the message is removed, so a crash in between
//!   leaves a marker and a stale message, which the next flush drops instead of sending again.
//!   (What no queue can rule out: the relay accepted the data but the connection died before its
//!   "250" reached us. That message is retried and may arrive twice.)
//!
//! [`Queue::flush`] tries due messages oldest first, at most `rate_per_s` a second, and stops at its
//! deadline; each attempt gets the time left (see `transport`). A transient failure reschedules the
//! message with exponential backoff; a permanent one, or a message older than `max_age`, moves it to
//! `dead/`.

use super::transport::{Deliver, SendError};
use jobscope_common::fsutil::{
    ensure_dir, is_safe_name, open_regular, read_limited, write_atomic, Access, FsError,
};
use lettre::address::Envelope;
use lettre::Address;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A queued message larger than this is not read back (a mail with charts is ~100 KB–1 MB).
const MAX_MESSAGE_BYTES: u64 = 64 * 1024 * 1024;
const MAX_META_BYTES: u64 = 64 * 1024;
/// Room kept in the queue directory for mail when the filesystem fills up (see [`RESERVE_FILE`]):
/// several reports with charts (one is ~100 KB–1 MB).
pub const DEFAULT_RESERVE_BYTES: u64 = 8 * 1024 * 1024;
/// A preallocated file in the queue directory. A full disk must not cost a user their report mail
/// (the queue usually shares a filesystem with the spool, the archive and the logs): when queueing
/// fails with ENOSPC the reserve is released and the write retried, and it is allocated again by
/// the next `Queue::open` that finds the space.
pub const RESERVE_FILE: &str = "reserve";
/// A sidecar without its message (a crash between the two writes) is removed after this long.
const STALE_AFTER_S: u64 = 3600;
/// How long `enqueue` waits for the lock of its id (held by a flusher sending that very id).
const ENQUEUE_LOCK_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error(transparent)]
    Fs(#[from] FsError),
    #[error("mail queue: {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("mail queue: {0:?} is not a usable message id")]
    BadId(String),
    #[error("mail queue: {0} is locked by another process")]
    Busy(String),
    #[error("mail queue: {path}: {why}")]
    Corrupt { path: PathBuf, why: String },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> QueueError + '_ {
    move |source| QueueError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The sidecar of a queued (or dead) message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub id: String,
    /// Envelope sender and recipients (what MAIL FROM / RCPT TO, or sendmail's -f and arguments, get).
    pub from: Option<String>,
    pub to: Vec<String>,
    pub created_unix: u64,
    pub attempts: u32,
    pub next_attempt_unix: u64,
    #[serde(default)]
    pub last_attempt_unix: Option<u64>,
    #[serde(default)]
    pub last_error: Option<String>,
    /// Set when the message was moved to `dead/`.
    #[serde(default)]
    pub dead_reason: Option<String>,
}

impl Meta {
    fn envelope(&self) -> Result<Envelope, String> {
        let from = match &self.from {
            Some(f) => Some(
                f.parse::<Address>()
                    .map_err(|e| format!("from {f:?}: {e}"))?,
            ),
            None => None,
        };
        let to = self
            .to
            .iter()
            .map(|t| t.parse::<Address>().map_err(|e| format!("to {t:?}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        Envelope::new(from, to).map_err(|e| e.to_string())
    }
}

/// When to try again and when to give up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Wait after the first failure; doubled after each further one, up to `max_backoff`.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// A message still undelivered this long after it was queued goes to `dead/`.
    pub max_age: Duration,
    /// How long `sent/` markers are kept (the window in which a re-enqueue is recognised).
    pub keep_sent: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_backoff: Duration::from_secs(60),
            max_backoff: Duration::from_secs(3600),
            max_age: Duration::from_secs(3 * 86_400),
            keep_sent: Duration::from_secs(30 * 86_400),
        }
    }
}

impl RetryPolicy {
    /// The wait after the `attempts`-th failed attempt (1-based).
    pub fn backoff(&self, attempts: u32) -> Duration {
        let exp = attempts.saturating_sub(1).min(30);
        self.initial_backoff
            .saturating_mul(1u32 << exp)
            .min(self.max_backoff)
    }
}

/// Who flushes, which decides how hard to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlushMode {
    /// `jobscope mail flush` (cron/timer): works through everything due within its budget.
    #[default]
    Full,
    /// The Epilog: every second it spends keeps the node in COMPLETING. It stops at the first
    /// failed attempt (the relay is down or refusing: the rest would fail the same way, each
    /// after its own connect and rate-limit wait), and while the relay is known to be down (the
    /// [`RELAY_DOWN_FILE`] marker a failed attempt leaves) it does not try at all. The backlog is
    /// left to `mail flush`, which ignores the marker.
    Epilog,
}

/// Written in the queue directory after a failed attempt: the Unix time before which Epilogs do not
/// try the relay again. Removed by the next successful delivery.
pub const RELAY_DOWN_FILE: &str = "relay-down";

#[derive(Debug, Clone)]
pub struct FlushOptions {
    /// Stop starting new attempts at this instant; each attempt gets at most the time left.
    pub deadline: Instant,
    /// At most this many attempts a second (0: no limit).
    pub rate_per_s: f64,
    pub retry: RetryPolicy,
    /// "Now" for due times and ages (the wall clock; tests move it).
    pub now_unix: u64,
    pub mode: FlushMode,
}

impl FlushOptions {
    /// Flush for at most `budget` from now.
    pub fn within(budget: Duration, rate_per_s: f64, retry: RetryPolicy, mode: FlushMode) -> Self {
        FlushOptions {
            // The configuration bounds the budget; this keeps a caller that did not (a test, a
            // library user) from panicking on an `Instant` overflow: a century is "no deadline".
            deadline: Instant::now() + budget.min(Duration::from_secs(100 * 365 * 86_400)),
            rate_per_s,
            retry,
            now_unix: unix_now(),
            mode,
        }
    }
}

/// What one flush did. Every id is a queue id; every reason is printable.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct FlushReport {
    pub sent: Vec<String>,
    /// Failed this time, rescheduled: (id, error).
    pub deferred: Vec<(String, String)>,
    /// Given up on, moved to `dead/`: (id, why).
    pub dead: Vec<(String, String)>,
    /// Being handled by another flusher right now.
    pub busy: Vec<String>,
    /// Waiting for their next attempt time.
    pub not_due: usize,
    /// Due, but not tried because the deadline came first.
    pub left_at_deadline: usize,
    /// Due, but left to `mail flush` because the relay failed (or is marked down) in Epilog mode.
    pub left_relay_down: usize,
    /// Trouble with the queue itself (unreadable files…), for the log.
    pub problems: Vec<String>,
}

impl FlushReport {
    /// One line for the log.
    pub fn summary(&self) -> String {
        format!(
            "mail queue: {} sent, {} deferred, {} dead, {} busy, {} not due, {} left at the deadline, {} left for `mail flush` (relay down){}",
            self.sent.len(),
            self.deferred.len(),
            self.dead.len(),
            self.busy.len(),
            self.not_due,
            self.left_at_deadline,
            self.left_relay_down,
            if self.problems.is_empty() {
                String::new()
            } else {
                format!(", {} problem(s)", self.problems.len())
            }
        )
    }
}

/// What `enqueue` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    Queued,
    /// Queued, but only after releasing the reserve: the filesystem is full.
    QueuedFromReserve,
    /// Already waiting in the queue (not replaced).
    AlreadyQueued,
    /// Already delivered (a `sent/` marker exists).
    AlreadySent,
    /// Already given up on (in `dead/`); `retry_dead` puts it back.
    AlreadyDead,
}

/// One entry of [`Queue::list`].
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub meta: Meta,
    pub dead: bool,
    pub bytes: u64,
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// An exclusive `flock` on `<dir>/<id>.lock`, checked to still be the file at that path.
struct IdLock {
    _file: File,
    path: PathBuf,
}

impl IdLock {
    /// `Ok(None)`: someone else holds it (only when `wait` is zero, or it stayed held that long).
    fn acquire(path: &Path, wait: Duration) -> Result<Option<IdLock>, QueueError> {
        let until = Instant::now() + wait;
        loop {
            let f = open_regular(path, Access::ReadWriteOrCreate(0o600)).map_err(io_err(path))?;
            // SAFETY: flock on a descriptor we own.
            let rc = unsafe {
                libc::flock(
                    std::os::unix::io::AsRawFd::as_raw_fd(&f),
                    libc::LOCK_EX | libc::LOCK_NB,
                )
            };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                    return Err(QueueError::Io {
                        path: path.to_path_buf(),
                        source: e,
                    });
                }
                if Instant::now() >= until {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            // The holder before us may have removed the file after we opened it: then our lock is on
            // an orphan inode, and we start over on whatever the path names now.
            let held = f.metadata().map_err(io_err(path))?;
            match std::fs::symlink_metadata(path) {
                Ok(m) if m.ino() == held.ino() && m.dev() == held.dev() => {
                    return Ok(Some(IdLock {
                        _file: f,
                        path: path.to_path_buf(),
                    }))
                }
                _ => continue,
            }
        }
    }

    /// Removes the lock file while still holding the lock, then releases it.
    fn release_and_remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

pub struct Queue {
    dir: PathBuf,
}

impl Queue {
    /// Opens (creating if needed) the queue directory and its `sent/` and `dead/`: owned by the
    /// effective user (root in the epilog), mode 0700, not a symlink.
    pub fn open(dir: &Path) -> Result<Queue, QueueError> {
        // SAFETY: plain getters.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        ensure_dir(dir, 0o700, uid, gid)?;
        ensure_dir(&dir.join("sent"), 0o700, uid, gid)?;
        ensure_dir(&dir.join("dead"), 0o700, uid, gid)?;
        let q = Queue {
            dir: dir.to_path_buf(),
        };
        q.ensure_reserve(DEFAULT_RESERVE_BYTES);
        Ok(q)
    }

    /// Makes sure [`RESERVE_FILE`] holds `bytes` of allocated space (best effort: on a full or
    /// non-allocating filesystem it keeps what it got and tries again next time).
    pub fn ensure_reserve(&self, bytes: u64) {
        use std::os::unix::io::AsRawFd;
        let path = self.dir.join(RESERVE_FILE);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.blocks() * 512 >= bytes)
        {
            return;
        }
        let Ok(f) = open_regular(&path, Access::ReadWriteOrCreate(0o600)) else {
            return;
        };
        let Ok(len) = libc::off_t::try_from(bytes) else {
            return;
        };
        // SAFETY: a valid open descriptor; posix_fallocate only allocates blocks for it.
        unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len) };
    }

    /// True when `e` is the filesystem being full.
    fn is_enospc(e: &QueueError) -> bool {
        match e {
            QueueError::Fs(FsError::Io { source, .. }) | QueueError::Io { source, .. } => {
                source.raw_os_error() == Some(libc::ENOSPC)
            }
            _ => false,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn check_id(id: &str) -> Result<(), QueueError> {
        if is_safe_name(id) && id.len() <= 180 {
            Ok(())
        } else {
            Err(QueueError::BadId(crate::mail::message::printable(id)))
        }
    }

    fn eml(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.eml"))
    }
    fn json(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }
    fn lock_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.lock"))
    }
    fn sent_marker(&self, id: &str) -> PathBuf {
        self.dir.join("sent").join(id)
    }
    fn dead_eml(&self, id: &str) -> PathBuf {
        self.dir.join("dead").join(format!("{id}.eml"))
    }

    /// Queues `message` (the bytes of `Message::formatted()`) for `envelope` under `id`, unless that
    /// id is already queued, sent or dead. Durable when it returns `Queued` (fsync'd, renamed).
    pub fn enqueue(
        &self,
        id: &str,
        envelope: &Envelope,
        message: &[u8],
    ) -> Result<Enqueued, QueueError> {
        Self::check_id(id)?;
        let lock = IdLock::acquire(&self.lock_path(id), ENQUEUE_LOCK_WAIT)?
            .ok_or_else(|| QueueError::Busy(id.to_string()))?;
        let exists = |p: PathBuf| std::fs::symlink_metadata(p).is_ok();
        if exists(self.sent_marker(id)) {
            lock.release_and_remove();
            return Ok(Enqueued::AlreadySent);
        }
        if exists(self.dead_eml(id)) {
            lock.release_and_remove();
            return Ok(Enqueued::AlreadyDead);
        }
        if exists(self.eml(id)) {
            return Ok(Enqueued::AlreadyQueued);
        }
        let now = unix_now();
        let meta = Meta {
            id: id.to_string(),
            from: envelope.from().map(|a| a.to_string()),
            to: envelope.to().iter().map(|a| a.to_string()).collect(),
            created_unix: now,
            attempts: 0,
            next_attempt_unix: now,
            last_attempt_unix: None,
            last_error: None,
            dead_reason: None,
        };
        let write = || -> Result<(), QueueError> {
            self.write_meta(&self.dir, &meta)?;
            // The message last: its presence is what makes the entry queued.
            write_atomic(&self.dir, &format!("{id}.eml"), message, 0o600, None)?;
            Ok(())
        };
        let queued = match write() {
            Ok(()) => Enqueued::Queued,
            Err(e) if Self::is_enospc(&e) => {
                let _ = std::fs::remove_file(self.dir.join(RESERVE_FILE));
                write()?;
                Enqueued::QueuedFromReserve
            }
            Err(e) => return Err(e),
        };
        drop(lock);
        Ok(queued)
    }

    /// [`Self::enqueue`] for a built mail.
    pub fn enqueue_mail(&self, mail: &super::message::Mail) -> Result<Enqueued, QueueError> {
        self.enqueue(&mail.id, mail.message.envelope(), &mail.message.formatted())
    }

    fn write_meta(&self, dir: &Path, meta: &Meta) -> Result<(), QueueError> {
        let bytes = serde_json::to_vec_pretty(meta).expect("Meta serialises");
        write_atomic(dir, &format!("{}.json", meta.id), &bytes, 0o600, None)?;
        Ok(())
    }

    fn read_meta(path: &Path) -> Result<Meta, QueueError> {
        let bytes = read_limited(path, MAX_META_BYTES)?;
        serde_json::from_slice(&bytes).map_err(|e| QueueError::Corrupt {
            path: path.to_path_buf(),
            why: e.to_string(),
        })
    }

    /// Ids with a `<id><suffix>` file in `dir`.
    fn ids_in(dir: &Path, suffix: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter_map(|n| n.strip_suffix(suffix).map(str::to_string))
                    .filter(|id| is_safe_name(id))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Moves `id` (locked by the caller) to `dead/` with `why`.
    fn bury(&self, id: &str, meta: Option<Meta>, why: &str, now: u64) -> Result<(), QueueError> {
        let dead = self.dir.join("dead");
        let mut meta = meta.unwrap_or_else(|| Meta {
            id: id.to_string(),
            from: None,
            to: vec![],
            created_unix: now,
            attempts: 0,
            next_attempt_unix: now,
            last_attempt_unix: None,
            last_error: None,
            dead_reason: None,
        });
        meta.dead_reason = Some(why.to_string());
        self.write_meta(&dead, &meta)?;
        std::fs::rename(self.eml(id), self.dead_eml(id)).map_err(io_err(&self.eml(id)))?;
        let _ = std::fs::remove_file(self.json(id));
        jobscope_common::fsutil::sync_dir(&self.dir);
        jobscope_common::fsutil::sync_dir(&dead);
        Ok(())
    }

    /// Delivers what is due, within `opts.deadline`. Never panics on a bad queue entry: problems are
    /// reported and the entry is left (or buried, if it can never be sent).
    pub fn flush(&self, transport: &dyn Deliver, opts: &FlushOptions) -> FlushReport {
        let mut report = FlushReport::default();
        let now = opts.now_unix;
        self.tidy(opts, &mut report);
        let entries = self.in_due_order();
        let interval = attempt_interval(opts.rate_per_s);
        let mut last_attempt: Option<Instant> = None;
        let is_due = |m: &Option<Meta>| m.as_ref().is_none_or(|m| m.next_attempt_unix <= now);
        let epilog = opts.mode == FlushMode::Epilog;
        let mut relay_down = epilog && self.relay_down_until().is_some_and(|t| t > now);
        for n in 0..entries.len() {
            let (id, listed_meta) = &entries[n];
            if !is_due(listed_meta) {
                report.not_due += 1;
                continue;
            }
            if relay_down {
                report.left_relay_down += 1;
                continue;
            }
            if !wait_turn(interval, last_attempt, opts.deadline) {
                report.left_at_deadline += entries[n..].iter().filter(|(_, m)| is_due(m)).count();
                break;
            }
            let Some(c) = self.claim(id, opts, &mut report) else {
                continue;
            };
            last_attempt = Some(Instant::now());
            let left = opts.deadline.saturating_duration_since(Instant::now());
            match transport.deliver(&c.envelope, &c.bytes, left) {
                Ok(()) => self.record_sent(id, c.lock, &mut report),
                Err(e) if e.is_permanent() => self.record_refused(id, c, &e, now, &mut report),
                Err(e) => {
                    self.record_deferred(id, c, &e, opts, &mut report);
                    relay_down = epilog;
                }
            }
        }
        report
    }

    /// The queued ids with their metadata (`None`: unreadable), in due order: next attempt time,
    /// then age, then id.
    fn in_due_order(&self) -> Vec<(String, Option<Meta>)> {
        let mut entries: Vec<(String, Option<Meta>)> = Self::ids_in(&self.dir, ".eml")
            .into_iter()
            .map(|id| {
                let m = Self::read_meta(&self.json(&id)).ok();
                (id, m)
            })
            .collect();
        entries.sort_by_key(|(id, m)| {
            (
                m.as_ref().map_or(0, |m| m.next_attempt_unix),
                m.as_ref().map_or(0, |m| m.created_unix),
                id.clone(),
            )
        });
        entries
    }

    /// Takes `id` for an attempt: locks it, checks under the lock that it is still queued, unsent,
    /// young enough and sendable, and reads it. `None` when there is nothing to attempt now (the
    /// report says why, and an entry that can never be sent is buried).
    fn claim(&self, id: &str, opts: &FlushOptions, report: &mut FlushReport) -> Option<Claimed> {
        let now = opts.now_unix;
        let lock = match IdLock::acquire(&self.lock_path(id), Duration::ZERO) {
            Ok(Some(l)) => l,
            Ok(None) => {
                report.busy.push(id.to_string());
                return None;
            }
            Err(e) => {
                report.problems.push(e.to_string());
                return None;
            }
        };
        // Re-check under the lock: another flusher may have finished it meanwhile.
        if std::fs::symlink_metadata(self.eml(id)).is_err() {
            lock.release_and_remove();
            return None;
        }
        if std::fs::symlink_metadata(self.sent_marker(id)).is_ok() {
            // Sent, but the crash came before the cleanup: drop, never send twice.
            let _ = std::fs::remove_file(self.json(id));
            let _ = std::fs::remove_file(self.eml(id));
            lock.release_and_remove();
            return None;
        }
        let meta = match Self::read_meta(&self.json(id)) {
            Ok(m) => m,
            Err(e) => {
                self.bury_locked(
                    id,
                    None,
                    format!("no usable envelope ({e})"),
                    now,
                    lock,
                    report,
                );
                return None;
            }
        };
        if meta.next_attempt_unix > now {
            report.not_due += 1;
            return None;
        }
        let age = now.saturating_sub(meta.created_unix);
        if age > opts.retry.max_age.as_secs() {
            let why = format!(
                "undelivered after {} attempt(s) over {}; last error: {}",
                meta.attempts,
                jobscope_report::present::fmt_duration(age as f64),
                meta.last_error.as_deref().unwrap_or("none")
            );
            self.bury_locked(id, Some(meta), why, now, lock, report);
            return None;
        }
        let envelope = match meta.envelope() {
            Ok(e) => e,
            Err(e) => {
                self.bury_locked(
                    id,
                    Some(meta),
                    format!("bad envelope: {e}"),
                    now,
                    lock,
                    report,
                );
                return None;
            }
        };
        let bytes = match read_limited(&self.eml(id), MAX_MESSAGE_BYTES) {
            Ok(b) => b,
            Err(e) => {
                report.problems.push(e.to_string());
                return None;
            }
        };
        Some(Claimed {
            lock,
            meta,
            envelope,
            bytes,
        })
    }

    /// Buries `id`, locked by `lock`, with `why` (a dead letter in the report, or the problem why
    /// not), then releases the lock.
    fn bury_locked(
        &self,
        id: &str,
        meta: Option<Meta>,
        why: String,
        now: u64,
        lock: IdLock,
        report: &mut FlushReport,
    ) {
        match self.bury(id, meta, &why, now) {
            Ok(()) => report.dead.push((id.to_string(), why)),
            Err(e) => report.problems.push(e.to_string()),
        }
        lock.release_and_remove();
    }

    /// After a delivery: the `sent/` marker, then the message goes; the relay is up again.
    fn record_sent(&self, id: &str, lock: IdLock, report: &mut FlushReport) {
        let marker = format!("{}\n", unix_now());
        if let Err(e) = write_atomic(&self.dir.join("sent"), id, marker.as_bytes(), 0o600, None) {
            // Sent, but unmarked: removing the message is what prevents a second send.
            report.problems.push(format!("{id}: sent, but {e}"));
        }
        let _ = std::fs::remove_file(self.json(id));
        if let Err(e) = std::fs::remove_file(self.eml(id)) {
            report.problems.push(format!(
                "{id}: sent, but could not remove {}: {e}",
                self.eml(id).display()
            ));
        }
        jobscope_common::fsutil::sync_dir(&self.dir);
        lock.release_and_remove();
        let _ = std::fs::remove_file(self.dir.join(RELAY_DOWN_FILE));
        report.sent.push(id.to_string());
    }

    /// After a permanent refusal: the attempt is counted and the message buried.
    fn record_refused(
        &self,
        id: &str,
        c: Claimed,
        e: &SendError,
        now: u64,
        report: &mut FlushReport,
    ) {
        let why = e.to_string();
        let mut meta = c.meta;
        meta.attempts += 1;
        meta.last_attempt_unix = Some(now);
        meta.last_error = Some(why.clone());
        self.bury_locked(id, Some(meta), why, now, c.lock, report);
    }

    /// After a failure that may pass: the next attempt is put off by the backoff, and later
    /// Epilogs are told to leave the relay alone until the first backoff has passed.
    fn record_deferred(
        &self,
        id: &str,
        c: Claimed,
        e: &SendError,
        opts: &FlushOptions,
        report: &mut FlushReport,
    ) {
        let now = opts.now_unix;
        let mut meta = c.meta;
        meta.attempts += 1;
        meta.last_attempt_unix = Some(now);
        meta.last_error = Some(e.to_string());
        meta.next_attempt_unix = now + opts.retry.backoff(meta.attempts).as_secs().max(1);
        if let Err(e2) = self.write_meta(&self.dir, &meta) {
            report.problems.push(e2.to_string());
        }
        drop(c.lock);
        let what = match e {
            SendError::Config(_) => e.to_string(),
            _ => format!(
                "{e} (attempt {}, next in {} s)",
                meta.attempts,
                meta.next_attempt_unix - now
            ),
        };
        report.deferred.push((id.to_string(), what));
        let until = now + opts.retry.initial_backoff.as_secs().max(1);
        if let Err(e2) = write_atomic(
            &self.dir,
            RELAY_DOWN_FILE,
            format!("{until}\n").as_bytes(),
            0o600,
            None,
        ) {
            report.problems.push(e2.to_string());
        }
    }

    /// The Unix time before which Epilogs leave the relay alone, if a failed attempt set one.
    pub fn relay_down_until(&self) -> Option<u64> {
        let b = read_limited(&self.dir.join(RELAY_DOWN_FILE), 64).ok()?;
        String::from_utf8_lossy(&b).trim().parse().ok()
    }

    /// Housekeeping: old `sent/` markers, sidecars and locks without a message, temp files of a crash.
    fn tidy(&self, opts: &FlushOptions, report: &mut FlushReport) {
        let now = opts.now_unix;
        let age_s = |p: &Path| -> Option<u64> {
            let m = std::fs::symlink_metadata(p).ok()?;
            Some(now.saturating_sub(u64::try_from(m.mtime()).unwrap_or(0)))
        };
        let sent = self.dir.join("sent");
        if let Ok(rd) = std::fs::read_dir(&sent) {
            for e in rd.flatten() {
                let p = e.path();
                if age_s(&p).is_some_and(|a| a > opts.retry.keep_sent.as_secs()) {
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            report
                .problems
                .push(format!("{}: cannot list", self.dir.display()));
            return;
        };
        for e in rd.flatten() {
            let Ok(name) = e.file_name().into_string() else {
                continue;
            };
            let p = e.path();
            if name.starts_with('.') && name.contains(".tmp.") {
                if age_s(&p).is_some_and(|a| a > STALE_AFTER_S) {
                    let _ = std::fs::remove_file(&p);
                }
                continue;
            }
            let id = match name
                .strip_suffix(".json")
                .or_else(|| name.strip_suffix(".lock"))
            {
                Some(id) if is_safe_name(id) => id.to_string(),
                _ => continue,
            };
            if std::fs::symlink_metadata(self.eml(&id)).is_ok()
                || age_s(&p).is_none_or(|a| a <= STALE_AFTER_S)
            {
                continue;
            }
            if let Ok(Some(lock)) = IdLock::acquire(&self.lock_path(&id), Duration::ZERO) {
                if std::fs::symlink_metadata(self.eml(&id)).is_err() {
                    let _ = std::fs::remove_file(self.json(&id));
                    lock.release_and_remove();
                }
            }
        }
    }

    /// Everything queued and dead, oldest first.
    pub fn list(&self) -> Vec<Listed> {
        let mut out = Vec::new();
        for (dir, dead) in [(self.dir.clone(), false), (self.dir.join("dead"), true)] {
            for id in Self::ids_in(&dir, ".eml") {
                let bytes = std::fs::symlink_metadata(dir.join(format!("{id}.eml")))
                    .map(|m| m.len())
                    .unwrap_or(0);
                let meta = Self::read_meta(&dir.join(format!("{id}.json"))).unwrap_or(Meta {
                    id: id.clone(),
                    from: None,
                    to: vec![],
                    created_unix: 0,
                    attempts: 0,
                    next_attempt_unix: 0,
                    last_attempt_unix: None,
                    last_error: Some("sidecar missing or unreadable".into()),
                    dead_reason: None,
                });
                out.push(Listed { meta, dead, bytes });
            }
        }
        out.sort_by_key(|l| (l.meta.created_unix, l.meta.id.clone()));
        out
    }

    /// Puts a dead message back in the queue, due now, with a fresh age. `Ok(false)`: no such message.
    pub fn retry_dead(&self, id: &str) -> Result<bool, QueueError> {
        Self::check_id(id)?;
        let lock = IdLock::acquire(&self.lock_path(id), ENQUEUE_LOCK_WAIT)?
            .ok_or_else(|| QueueError::Busy(id.to_string()))?;
        let dead = self.dir.join("dead");
        if std::fs::symlink_metadata(self.dead_eml(id)).is_err() {
            lock.release_and_remove();
            return Ok(false);
        }
        let now = unix_now();
        let mut meta = Self::read_meta(&dead.join(format!("{id}.json")))?;
        meta.created_unix = now;
        meta.next_attempt_unix = now;
        meta.attempts = 0;
        meta.dead_reason = None;
        self.write_meta(&self.dir, &meta)?;
        std::fs::rename(self.dead_eml(id), self.eml(id)).map_err(io_err(&self.eml(id)))?;
        let _ = std::fs::remove_file(dead.join(format!("{id}.json")));
        jobscope_common::fsutil::sync_dir(&self.dir);
        drop(lock);
        Ok(true)
    }
}

/// A queued message taken for an attempt, under its lock.
struct Claimed {
    lock: IdLock,
    meta: Meta,
    envelope: Envelope,
    bytes: Vec<u8>,
}

/// The least time between two attempts at `rate_per_s`: at least one attempt per 1000 s (the
/// configuration's least non-zero rate), so a tiny rate cannot overflow `Duration` (1 / 1e-300 s
/// panics); NaN or 0: no limit.
fn attempt_interval(rate_per_s: f64) -> Option<Duration> {
    (rate_per_s > 0.0).then(|| Duration::from_secs_f64(1.0 / rate_per_s.clamp(0.001, 1e9)))
}

/// Waits for the next attempt's turn under the rate limit. `false`, without waiting, when that
/// turn (or now) is at or past the deadline.
fn wait_turn(interval: Option<Duration>, last_attempt: Option<Instant>, deadline: Instant) -> bool {
    if let (Some(iv), Some(last)) = (interval, last_attempt) {
        let next = last + iv;
        if next >= deadline {
            return false;
        }
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    Instant::now() < deadline
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mail::test_smtp::{Mode, Sink};
    use crate::mail::transport::{SmtpConfig, TlsMode, Transport};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn smtp(port: u16, timeout: Duration) -> Transport {
        Transport::Smtp(SmtpConfig {
            host: "127.0.0.1".into(),
            port,
            tls: TlsMode::None,
            user: None,
            password: None,
            timeout,
            ca_file: None,
            helo_name: None,
        })
    }

    fn envelope(to: &str) -> Envelope {
        Envelope::new(
            Some("jobscope@cluster.example.org".parse().unwrap()),
            vec![to.parse().unwrap()],
        )
        .unwrap()
    }

    fn msg(n: usize) -> Vec<u8> {
        format!(
            "From: jobscope@cluster.example.org\r\nTo: alice@example.org\r\nSubject: job {n}\r\n\r\nbody {n}\r\n"
        )
        .into_bytes()
    }

    fn opts(budget: Duration, now_unix: u64) -> FlushOptions {
        FlushOptions {
            deadline: Instant::now() + budget,
            rate_per_s: 0.0,
            retry: RetryPolicy::default(),
            now_unix,
            mode: FlushMode::Full,
        }
    }

    /// A full filesystem: the mail is still queued, from the reserve, and the reserve comes back
    /// once there is room again. Needs root for a small tmpfs of its own.
    #[test]
    fn full_filesystem_still_queues_the_mail_from_the_reserve() {
        // SAFETY: plain getter.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root to mount a small tmpfs");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let mnt = d.path().join("fs");
        std::fs::create_dir(&mnt).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=12m,mode=0700", "jobscope-test"])
            .arg(&mnt)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mount a 12 MiB tmpfs");
        struct Umount(PathBuf);
        impl Drop for Umount {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(&self.0).status();
            }
        }
        let _guard = Umount(mnt.clone());
        let q = Queue::open(&mnt.join("q")).unwrap();
        let reserve = std::fs::metadata(q.dir().join(RESERVE_FILE)).unwrap();
        assert!(
            reserve.blocks() * 512 >= DEFAULT_RESERVE_BYTES,
            "reserve allocated at open"
        );
        // Fill the rest of the filesystem.
        let mut filler = std::fs::File::create(mnt.join("filler")).unwrap();
        let chunk = vec![7u8; 64 * 1024];
        while std::io::Write::write_all(&mut filler, &chunk).is_ok() {}
        let _ = filler.sync_all();
        let big = vec![b'x'; 200 * 1024];
        assert!(
            std::fs::write(mnt.join("probe"), &big).is_err(),
            "the filesystem is full"
        );
        let _ = std::fs::remove_file(mnt.join("probe"));
        let r = q
            .enqueue("c.1.0.end", &envelope("alice@example.org"), &big)
            .unwrap();
        assert_eq!(r, Enqueued::QueuedFromReserve);
        assert_eq!(std::fs::read(q.eml("c.1.0.end")).unwrap(), big);
        assert!(!mnt.join("q").join(RESERVE_FILE).exists());
        // Space returns: the next open allocates the reserve again.
        drop(filler);
        std::fs::remove_file(mnt.join("filler")).unwrap();
        let q = Queue::open(&mnt.join("q")).unwrap();
        let m = std::fs::metadata(q.dir().join(RESERVE_FILE)).unwrap();
        assert!(
            m.blocks() * 512 >= DEFAULT_RESERVE_BYTES,
            "{} blocks",
            m.blocks()
        );
    }

    /// The Epilog's flush with the relay down: one attempt, then the backlog is left to
    /// `mail flush`; the next Epilog does not try at all until the backoff has passed; the relay
    /// coming back is noticed by `mail flush`, which delivers everything and clears the marker.
    #[test]
    fn epilog_stops_at_the_first_refusal_and_leaves_the_backlog() {
        let d = tempfile::tempdir().unwrap();
        let q = Queue::open(d.path()).unwrap();
        let port = Sink::closed_port();
        let t = smtp(port, Duration::from_secs(2));
        for i in 0..10 {
            q.enqueue(
                &format!("c.{i}.0.end"),
                &envelope("alice@example.org"),
                &msg(i),
            )
            .unwrap();
        }
        let now = unix_now();
        // One attempt every 20 s, within a 300 s budget: a flush that went on after the refusal
        // (to a second attempt, paced by the rate) would take 20 s at least.
        let epilog = |now_unix| FlushOptions {
            rate_per_s: 0.05,
            mode: FlushMode::Epilog,
            ..opts(Duration::from_secs(300), now_unix)
        };
        let t0 = Instant::now();
        let r = q.flush(&t, &epilog(now));
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "stopped at the first refusal, not after the next attempt: {:?}",
            t0.elapsed()
        );
        assert_eq!(r.deferred.len(), 1, "{r:?}");
        assert_eq!(r.left_relay_down, 9, "{r:?}");
        assert_eq!(q.relay_down_until(), Some(now + 60));
        // A later Epilog inside the backoff does not touch the relay at all.
        let r = q.flush(&t, &epilog(now + 5));
        assert!(r.deferred.is_empty() && r.sent.is_empty(), "{r:?}");
        assert_eq!(r.left_relay_down, 9, "{r:?}");
        // `mail flush` ignores the marker: the relay is back, everything goes, the marker is gone.
        let sink = Sink::start_on(port, Mode::Accept).expect("rebind the port");
        let r = q.flush(&t, &opts(Duration::from_secs(10), now + 61));
        assert_eq!(r.sent.len(), 10, "{r:?}");
        assert_eq!(sink.messages().len(), 10);
        assert_eq!(q.relay_down_until(), None);
    }

    fn subjects(sink: &Sink) -> Vec<String> {
        let mut v: Vec<String> = sink
            .messages()
            .iter()
            .map(|m| {
                let t = String::from_utf8_lossy(&m.data).to_string();
                t.lines()
                    .find_map(|l| l.strip_prefix("Subject: ").map(str::to_string))
                    .unwrap()
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn queue_dir_is_private_and_enqueue_is_idempotent() {
        let d = tempfile::tempdir().unwrap();
        let q = Queue::open(&d.path().join("q")).unwrap();
        let md = std::fs::metadata(q.dir()).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o700);
        let env = envelope("alice@example.org");
        assert_eq!(
            q.enqueue("c.1.0.end", &env, &msg(1)).unwrap(),
            Enqueued::Queued
        );
        assert_eq!(
            q.enqueue("c.1.0.end", &env, &msg(99)).unwrap(),
            Enqueued::AlreadyQueued
        );
        assert_eq!(std::fs::read(q.eml("c.1.0.end")).unwrap(), msg(1));
        let m = std::fs::metadata(q.eml("c.1.0.end")).unwrap();
        assert_eq!(m.mode() & 0o777, 0o600);
        for bad in ["", "../x", "a/b", ".hidden", "a\nb"] {
            assert!(matches!(
                q.enqueue(bad, &env, b"x"),
                Err(QueueError::BadId(_))
            ));
        }
        let l = q.list();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].meta.to, vec!["alice@example.org".to_string()]);
    }

    #[test]
    fn relay_down_then_back_delivers_exactly_once() {
        let d = tempfile::tempdir().unwrap();
        let q = Queue::open(d.path()).unwrap();
        let port = Sink::closed_port();
        let t = smtp(port, Duration::from_secs(2));
        for i in 0..3 {
            let id = format!("c.{i}.0.end");
            q.enqueue(&id, &envelope("alice@example.org"), &msg(i))
                .unwrap();
        }
        let now = unix_now();
        // Down: everything deferred, with backoff.
        let r = q.flush(&t, &opts(Duration::from_secs(5), now));
        assert_eq!(r.deferred.len(), 3, "{r:?}");
        assert!(r.sent.is_empty());
        let m = Queue::read_meta(&q.json("c.0.0.end")).unwrap();
        assert_eq!(m.attempts, 1);
        assert_eq!(m.next_attempt_unix, now + 60);
        assert!(m.last_error.is_some());
        // Not due yet: nothing is tried.
        let r = q.flush(&t, &opts(Duration::from_secs(5), now + 10));
        assert_eq!(r.not_due, 3, "{r:?}");

        // The relay comes back on the same port.
        let sink = Sink::start_on(port, Mode::Accept).expect("rebind the port");
        let r = q.flush(&t, &opts(Duration::from_secs(5), now + 61));
        assert_eq!(r.sent.len(), 3, "{r:?}");
        assert_eq!(subjects(&sink), vec!["job 0", "job 1", "job 2"]);
        // Flushing again, and enqueueing the same mails again, sends nothing more.
        let r = q.flush(&t, &opts(Duration::from_secs(5), now + 3600));
        assert!(r.sent.is_empty() && r.deferred.is_empty(), "{r:?}");
        assert_eq!(
            q.enqueue("c.0.0.end", &envelope("alice@example.org"), &msg(0))
                .unwrap(),
            Enqueued::AlreadySent
        );
        q.flush(&t, &opts(Duration::from_secs(5), now + 3600));
        assert_eq!(sink.messages().len(), 3);
        assert!(q.list().is_empty());
        // No lock files or sidecars left behind (the reserve is meant to stay).
        let left: Vec<_> = std::fs::read_dir(q.dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().unwrap().is_file() && e.file_name() != RESERVE_FILE)
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn hanging_relay_returns_within_the_deadline() {
        let d = tempfile::tempdir().unwrap();
        let q = Queue::open(d.path()).unwrap();
        let sink = Sink::start(Mode::Hang);
        // SMTP timeout 30 s, but only 1 s for the whole flush.
        let t = smtp(sink.port(), Duration::from_secs(30));
        for i in 0..3 {
            q.enqueue(
                &format!("c.{i}.0.end"),
                &envelope("alice@example.org"),
                &msg(i),
            )
            .unwrap();
        }
        let t0 = Instant::now();
        let r = q.flush(&t, &opts(Duration::from_secs(1), unix_now()));
        let took = t0.elapsed();
        assert!(
            took < Duration::from_secs(15),
            "at the 1 s deadline, well before the 30 s SMTP timeout: {took:?}"
        );
        assert_eq!(r.deferred.len(), 1, "{r:?}");
        assert_eq!(r.left_at_deadline, 2, "{r:?}");
        assert_eq!(q.list().len(), 3);
    }

    #[test]
    fn permanent_failure_and_old_age_go_to_dead_and_can_be_retried() {
        let d = tempfile::tempdir().unwrap();
        let q = Queue::open(d.path()).unwrap();
        let sink = Sink::start(Mode::RejectRcpt);
        let t = smtp(sink.port(), Duration::from_secs(5));
        q.enqueue("c.1.0.end", &envelope("nobody@example.org"), &msg(1))
            .unwrap();
        let r = q.flush(&t, &opts(Duration::from_secs(5), unix_now()));
        assert_eq!(r.dead.len(), 1, "{r:?}");
        assert!(r.dead[0].1.contains("550"), "{}", r.dead[0].1);
        assert!(q.dead_eml("c.1.0.end").exists());
        assert_eq!(
            q.enqueue("c.1.0.end", &envelope("nobody@example.org"), &msg(1))
                .unwrap(),
            Enqueued::AlreadyDead
        );

        // Too old: buried without another try.
        let down = smtp(Sink::closed_port(), Duration::from_secs(1));
        q.enqueue("c.2.0.end", &envelope("alice@example.org"), &msg(2))
            .unwrap();
        let later = unix_now() + 4 * 86_400;
        let r = q.flush(&down, &opts(Duration::from_secs(5), later));
        assert_eq!(r.dead.len(), 1, "{r:?}");
        assert!(
            r.dead[0].1.contains("undelivered after 0 attempt"),
            "{}",
            r.dead[0].1
        );
        let l = q.list();
        assert_eq!(l.len(), 2);
        assert!(l.iter().all(|l| l.dead && l.meta.dead_reason.is_some()));

        // An admin puts one back; it goes out.
        assert!(q.retry_dead("c.2.0.end").unwrap());
        assert!(!q.retry_dead("c.9.0.end").unwrap());
        let ok = Sink::start(Mode::Accept);
        let r = q.flush(
            &smtp(ok.port(), Duration::from_secs(5)),
            &opts(Duration::from_secs(5), unix_now()),
        );
        assert_eq!(r.sent, vec!["c.2.0.end".to_string()]);
        assert_eq!(subjects(&ok), vec!["job 2"]);
    }

    #[test]
    fn rate_limit_spaces_attempts() {
        let d = tempfile::tempdir().unwrap();
        let q = Queue::open(d.path()).unwrap();
        let sink = Sink::start(Mode::Accept);
        let t = smtp(sink.port(), Duration::from_secs(5));
        for i in 0..4 {
            q.enqueue(
                &format!("c.{i}.0.end"),
                &envelope("alice@example.org"),
                &msg(i),
            )
            .unwrap();
        }
        let mut o = opts(Duration::from_secs(10), unix_now());
        o.rate_per_s = 4.0;
        let t0 = Instant::now();
        let r = q.flush(&t, &o);
        assert_eq!(r.sent.len(), 4);
        // 4 attempts at 4/s: at least 3 gaps of 250 ms.
        assert!(
            t0.elapsed() >= Duration::from_millis(740),
            "{:?}",
            t0.elapsed()
        );
        // A deadline shorter than the rate allows: the rest waits for next time.
        for i in 10..14 {
            q.enqueue(
                &format!("c.{i}.0.end"),
                &envelope("alice@example.org"),
                &msg(i),
            )
            .unwrap();
        }
        let mut o = opts(Duration::from_millis(1000), unix_now());
        o.rate_per_s = 2.0;
        let r = q.flush(&t, &o);
        assert_eq!(r.sent.len(), 2, "{r:?}");
        assert_eq!(r.left_at_deadline, 2, "{r:?}");
    }

    /// Counts deliveries; slow enough that two flushers overlap.
    struct Counting<'a> {
        inner: &'a Transport,
        n: AtomicUsize,
    }
    impl Deliver for Counting<'_> {
        fn deliver(&self, e: &Envelope, m: &[u8], t: Duration) -> Result<(), SendError> {
            self.n.fetch_add(1, Ordering::SeqCst);
            self.inner.deliver(e, m, t)
        }
    }

    #[test]
    fn concurrent_flushers_never_send_twice() {
        let d = tempfile::tempdir().unwrap();
        let q = Queue::open(d.path()).unwrap();
        let sink = Sink::start(Mode::Accept);
        sink.set_data_delay(Duration::from_millis(30));
        let t = smtp(sink.port(), Duration::from_secs(5));
        for i in 0..12 {
            q.enqueue(
                &format!("c.{i:02}.0.end"),
                &envelope("alice@example.org"),
                &msg(i),
            )
            .unwrap();
        }
        let c = Counting {
            inner: &t,
            n: AtomicUsize::new(0),
        };
        let reports: Vec<FlushReport> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let q = Queue::open(d.path()).unwrap();
                        q.flush(&c, &opts(Duration::from_secs(20), unix_now()))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let sent: usize = reports.iter().map(|r| r.sent.len()).sum();
        assert_eq!(sent, 12, "{reports:?}");
        assert_eq!(c.n.load(Ordering::SeqCst), 12);
        assert_eq!(sink.messages().len(), 12);
        let subj = subjects(&sink);
        let mut uniq = subj.clone();
        uniq.dedup();
        assert_eq!(uniq.len(), 12);
        assert!(sink.connections() >= 12);
    }

    #[test]
    fn a_crash_after_sending_does_not_resend() {
        let d = tempfile::tempdir().unwrap();
        let q = Queue::open(d.path()).unwrap();
        q.enqueue("c.1.0.end", &envelope("alice@example.org"), &msg(1))
            .unwrap();
        // As if the flusher died between writing the marker and removing the message.
        std::fs::write(q.sent_marker("c.1.0.end"), "1\n").unwrap();
        let sink = Sink::start(Mode::Accept);
        let r = q.flush(
            &smtp(sink.port(), Duration::from_secs(5)),
            &opts(Duration::from_secs(5), unix_now()),
        );
        assert!(r.sent.is_empty(), "{r:?}");
        assert!(sink.messages().is_empty());
        assert!(q.list().is_empty());
    }

    #[test]
    fn sendmail_transport_through_the_queue() {
        use crate::mail::transport::SendmailConfig;
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let q = Queue::open(&d.path().join("q")).unwrap();
        let out = d.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let sm = d.path().join("sendmail");
        std::fs::write(&sm, format!("#!/bin/sh\ncat > {}/$$.eml\n", out.display())).unwrap();
        std::fs::set_permissions(&sm, std::fs::Permissions::from_mode(0o755)).unwrap();
        let t = Transport::Sendmail(SendmailConfig {
            path: sm,
            timeout: Duration::from_secs(5),
        });
        q.enqueue("c.1.0.end", &envelope("alice@example.org"), &msg(1))
            .unwrap();
        let r = q.flush(&t, &opts(Duration::from_secs(5), unix_now()));
        assert_eq!(r.sent.len(), 1, "{r:?}");
        let files: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().collect();
        assert_eq!(files.len(), 1);
        assert_eq!(std::fs::read(files[0].path()).unwrap(), msg(1));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(1), Duration::from_secs(60));
        assert_eq!(p.backoff(2), Duration::from_secs(120));
        assert_eq!(p.backoff(6), Duration::from_secs(1920));
        assert_eq!(p.backoff(7), Duration::from_secs(3600));
        assert_eq!(p.backoff(1000), Duration::from_secs(3600));
    }

    /// The rate is bounded both ways; no rate (0, negative, NaN) is no limit.
    #[test]
    fn the_attempt_interval_follows_the_rate_within_bounds() {
        assert_eq!(attempt_interval(2.0), Some(Duration::from_millis(500)));
        assert_eq!(attempt_interval(1e-300), Some(Duration::from_secs(1000)));
        assert_eq!(attempt_interval(0.0), None);
        assert_eq!(attempt_interval(-1.0), None);
        assert_eq!(attempt_interval(f64::NAN), None);
    }

    /// A turn that would come at or after the deadline is not waited for.
    #[test]
    fn no_turn_is_waited_for_past_the_deadline() {
        let now = Instant::now();
        let hour = Duration::from_secs(3600);
        assert!(!wait_turn(Some(hour), Some(now), now + hour));
        assert!(!wait_turn(None, None, now));
        assert!(wait_turn(None, None, now + hour));
        assert!(wait_turn(Some(hour), None, now + hour));
    }
}
