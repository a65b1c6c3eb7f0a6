//! The record of the alerts sent: `<index>/alerts/sent.json` (directory 0700, file 0600, the
//! owner root's: it says who was told what). Per user: the period of the last mail, its queue id,
//! and per rule the runs it reported (with their end times, so a run is forgotten once it is out
//! of every rule's window and can never be listed again).
//!
//! Written atomically (`fsutil::write_atomic`: a new file with `O_EXCL|O_NOFOLLOW`, fsynced, then
//! renamed over the old one), read with `O_NOFOLLOW` and a size bound; the directory is checked
//! not to be a symlink (`fsutil::ensure_dir`). One `jobscope alerts send` at a time: [`lock`].

use super::{AlertJob, Reported, Rule, UserAlert};
use anyhow::{bail, Context, Result};
use jobscope_common::fsutil::{ensure_dir, open_regular, read_limited, write_atomic, Access};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The record's directory under the index directory.
pub const DIR: &str = "alerts";
pub const FILE: &str = "sent.json";
const LOCK_FILE: &str = "send.lock";
/// A record larger than this is not read (a run key is ~40 bytes: millions of runs).
const MAX_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sent {
    /// By uid.
    pub users: BTreeMap<u32, UserSent>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSent {
    /// The period the last mail went in (`super::period_start`).
    pub period_start_unix_s: i64,
    pub sent_unix_s: i64,
    /// Its mail queue id.
    pub mail_id: String,
    /// Rule (`Rule::key`) → run (`AlertJob::key`) → the run's end (Unix s).
    pub reported: BTreeMap<String, BTreeMap<String, i64>>,
}

impl Reported for Sent {
    fn was_reported(&self, rule: Rule, j: &AlertJob<&str>) -> bool {
        // The key is spelled only for a user with runs reported under the rule.
        self.users
            .get(&j.uid)
            .and_then(|u| u.reported.get(rule.key()))
            .is_some_and(|r| r.contains_key(&j.key()))
    }
    fn mailed_in(&self, uid: u32) -> Option<i64> {
        self.users.get(&uid).map(|u| u.period_start_unix_s)
    }
}

/// `<index_dir>/alerts`.
pub fn dir(index_dir: &Path) -> PathBuf {
    index_dir.join(DIR)
}

impl Sent {
    /// The record under `index_dir`; `Ok(None)` when there is none yet. A record that cannot be
    /// read or decoded is an error: sending without it could send everything again.
    pub fn read(index_dir: &Path) -> Result<Option<Sent>> {
        let path = dir(index_dir).join(FILE);
        match read_limited(&path, MAX_BYTES) {
            Ok(b) => serde_json::from_slice(&b).map(Some).with_context(|| {
                format!(
                    "{}: the record of sent alerts is damaged (move it away to start a new one: \
                     every finding in the rules' windows would then be sent again)",
                    path.display()
                )
            }),
            Err(jobscope_common::fsutil::FsError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Records that `u`'s alert went (or is queued) as `mail_id` in the period from
    /// `period_start_unix_s`: its runs are not reported again.
    pub fn record(
        &mut self,
        u: &UserAlert,
        period_start_unix_s: i64,
        now_unix_s: i64,
        mail_id: &str,
    ) {
        let e = self.users.entry(u.uid).or_default();
        e.period_start_unix_s = period_start_unix_s;
        e.sent_unix_s = now_unix_s;
        e.mail_id = mail_id.to_string();
        for (rule, runs) in u.reported() {
            e.reported
                .entry(rule.key().to_string())
                .or_default()
                .extend(runs);
        }
    }

    /// Forgets the runs that ended before `since_unix_s` (out of every rule's window: no window
    /// can list them again), and the users left with nothing whose period is over.
    pub fn forget_before(&mut self, since_unix_s: i64, period_start_unix_s: i64) {
        for u in self.users.values_mut() {
            for runs in u.reported.values_mut() {
                runs.retain(|_, end| *end >= since_unix_s);
            }
            u.reported.retain(|_, runs| !runs.is_empty());
        }
        self.users
            .retain(|_, u| !u.reported.is_empty() || u.period_start_unix_s >= period_start_unix_s);
    }

    /// Writes the record atomically under `index_dir` (directory 0700, file 0600, this process's
    /// owner: root's when `jobscope alerts send` runs as it must).
    pub fn write(&self, index_dir: &Path) -> Result<()> {
        let d = ensure_own_dir(index_dir)?;
        write_atomic(&d, FILE, &serde_json::to_vec(self)?, 0o600, None)?;
        Ok(())
    }
}

fn ensure_own_dir(index_dir: &Path) -> Result<PathBuf> {
    if std::fs::symlink_metadata(index_dir).is_err() {
        bail!(
            "the index at {} is missing (run `jobscope index update`)",
            index_dir.display()
        );
    }
    let d = dir(index_dir);
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    ensure_dir(&d, 0o700, uid, gid)?;
    Ok(d)
}

/// Held while one `jobscope alerts send` decides and records: a second one waits for nothing and
/// says so, since two at once could both mail the same user.
pub struct Lock {
    _file: std::fs::File,
}

/// Takes the send lock (`<index>/alerts/send.lock`, `flock`), or says another send holds it.
pub fn lock(index_dir: &Path) -> Result<Lock> {
    use std::os::unix::io::AsRawFd;
    let path = ensure_own_dir(index_dir)?.join(LOCK_FILE);
    let f = open_regular(&path, Access::ReadWriteOrCreate(0o600))
        .with_context(|| path.display().to_string())?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            bail!(
                "another `jobscope alerts send` is running ({} is locked)",
                path.display()
            );
        }
        return Err(e).with_context(|| path.display().to_string());
    }
    Ok(Lock { _file: f })
}
