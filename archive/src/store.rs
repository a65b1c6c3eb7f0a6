//! The archive store: one schema-versioned JSON document per job run, for admins, plus a copy its
//! owner can read but not alter. [`Store`] is the only code that knows the layout: it writes
//! ([`Store::write`]), finds ([`Store::runs`], [`Store::show`]), prunes ([`Store::prune`]) and
//! verifies ([`Store::verify`]) through one tree walker ([`Store::days`], [`list`]), and every
//! document is read through [`load`], which upgrades schema version 1.
//!
//! ```text
//! <archive>/                                     0755 root:root
//!   YYYY/MM/DD/                                  0750 root:<admin_group>   (the job's end, UTC)
//!     <job>-<start_unix_s>[-<cluster>].json      0640 root:<admin_group>   the record
//!     MANIFEST                                   0640 root:<admin_group>   (manifest.rs)
//!   users/                                       0711 root:root            (not listable)
//!     <uid>/                                     0500 <uid>:root           only that user gets in
//!       <job>-<start_unix_s>[-<cluster>].json    0444 root:root            the owner's copy
//! ```
//!
//! **The key** of a run is (cluster, job id, start second): a job id that SLURM hands out again
//! (after a state reset, or on another cluster sharing the archive) is another file. Writing the
//! same key again (an epilog or `reap` retrying) replaces the earlier file atomically, wherever
//! between the job's start day and its end day it was written, so a retry never leaves two records.
//!
//! **The owner's copy** is root's file in a directory only its owner can enter: other users cannot
//! reach it, and the owner can read it but not write it. The owner can rename or delete entries of
//! their own directory, or put their own files there; such a file is not root's, and
//! [`Store::show`] refuses to present it. `archive verify` compares every copy with the record.
//! Schema-version-1 copies (`<job>.json`, owned by the user) are still shown, with a warning.

use crate::manifest::{self, DayReport, VerifyReport};
use anyhow::{bail, ensure, Context, Result};
use jobscope_common::fsutil::{ensure_dir, is_safe_name, open_regular, write_atomic, Access};
use jobscope_common::users::group_id;
use jobscope_config::Label;
use jobscope_model::params::Report;
use jobscope_model::summary::{analysis, JobSummary, SCHEMA_VERSION};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A document larger than this is not read.
pub const MAX_DOC_BYTES: u64 = 64 * 1024 * 1024;
/// Entries read from one directory at most (a walk never runs away on a flooded directory).
pub const MAX_DIR_ENTRIES: usize = 500_000;
/// A retry looks for its earlier record in at most this many day directories before the end day.
const MAX_JOB_DAYS: u64 = 400;
const USERS: &str = "users";
const DAY_MS: u64 = 86_400_000;

use jobscope_model::time::{date_path, utc_time};

/// Unix seconds of the midnight that starts day `YYYY/MM/DD`.
fn day_start_s(date: &str) -> Option<u64> {
    let mut it = date.split('/');
    let (y, m, d) = (it.next()?, it.next()?, it.next()?);
    let days =
        jobscope_model::time::days_from_civil(y.parse().ok()?, m.parse().ok()?, d.parse().ok()?)?;
    u64::try_from(days).ok().map(|d| d * 86_400)
}

/// The cluster part of a file name: SLURM's ClusterName made a [`Label`] (anything but
/// `[A-Za-z0-9_-]` replaced by `_`, at most 64 characters); `None` for an empty name.
pub fn cluster_label(cluster: &str) -> Option<String> {
    Label::sanitised(cluster).map(|l| l.as_str().to_string())
}

/// What makes an archived run unique: the cluster, SLURM's job id and the start second.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub job_id: u32,
    pub start_unix_s: u64,
    /// [`cluster_label`] of the job's cluster; `None` when the cluster is unknown.
    pub cluster: Option<String>,
}

impl Key {
    pub fn of(s: &JobSummary) -> Key {
        Key {
            job_id: s.job_id,
            // SLURM's start second (what sacct shows); the summary's start may be a node's
            // millisecond record a little later (model/src/summary/job.rs `best_start_ms`).
            start_unix_s: s.scheduler_start_unix_s.unwrap_or(s.start_unix_ms / 1000),
            cluster: s.cluster.as_deref().and_then(cluster_label),
        }
    }

    /// `<job>-<start_unix_s>[-<cluster>].json`.
    pub fn file_name(&self) -> String {
        match &self.cluster {
            Some(c) => format!("{}-{}-{c}.json", self.job_id, self.start_unix_s),
            None => format!("{}-{}.json", self.job_id, self.start_unix_s),
        }
    }
}

/// What an archive file name says about its document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordName {
    Keyed(Key),
    /// `<job>.json`, the name schema version 1 used (no start, no cluster).
    Legacy(u32),
}

fn digits(s: &str) -> Option<u64> {
    (!s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

impl RecordName {
    pub fn parse(file: &str) -> Option<RecordName> {
        if !is_safe_name(file) {
            return None;
        }
        let stem = file.strip_suffix(".json")?;
        let mut it = stem.splitn(3, '-');
        let job_id = u32::try_from(digits(it.next()?)?).ok()?;
        let Some(start) = it.next() else {
            return Some(RecordName::Legacy(job_id));
        };
        let start_unix_s = digits(start)?;
        let cluster = match it.next() {
            None => None,
            Some(c) if Label::new(c).is_ok() => Some(c.to_string()),
            Some(_) => return None,
        };
        Some(RecordName::Keyed(Key {
            job_id,
            start_unix_s,
            cluster,
        }))
    }

    pub fn job_id(&self) -> u32 {
        match self {
            RecordName::Keyed(k) => k.job_id,
            RecordName::Legacy(j) => *j,
        }
    }
}

// ------------------------------------------------------------------------------- the walker

/// One day directory of the dated tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Day {
    /// `YYYY/MM/DD`.
    pub date: String,
    pub path: PathBuf,
}

/// One `*.json` entry of an archive directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub file: String,
    /// `None`: not a name the store writes.
    pub name: Option<RecordName>,
    /// A regular file (not a symlink, directory, fifo…).
    pub regular: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Sorted by file name.
    pub records: Vec<Record>,
    /// The directory had more than [`MAX_DIR_ENTRIES`] entries; the rest were not read.
    pub truncated: bool,
}

/// The `*.json` entries of `dir`, without following symlinks. Hidden names (write_atomic's temp
/// files) are skipped.
pub fn list(dir: &Path) -> std::io::Result<Listing> {
    let mut out = Listing::default();
    for (i, e) in std::fs::read_dir(dir)?.enumerate() {
        if i >= MAX_DIR_ENTRIES {
            out.truncated = true;
            break;
        }
        let Ok(e) = e else { continue };
        let file = e.file_name().to_string_lossy().into_owned();
        if file.starts_with('.') || !file.ends_with(".json") {
            continue;
        }
        // DirEntry::file_type does not follow symlinks.
        let regular = e.file_type().is_ok_and(|t| t.is_file());
        out.records.push(Record {
            name: RecordName::parse(&file),
            file,
            regular,
        });
    }
    out.records.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(out)
}

/// Real subdirectories (never symlinks) of `p` whose name is all digits, `len` of them if given;
/// sorted. An unreadable directory has none (for readers that show what they can: `show`, `verify`,
/// `prune`); [`Store::walk_days`] uses [`numeric_dirs_strict`] instead.
fn numeric_dirs(p: &Path, len: Option<usize>) -> Vec<(String, PathBuf)> {
    numeric_dirs_noting(p, len, &mut Vec::new())
}

/// [`numeric_dirs`], noting in `unreadable` (`<path>: <error>`) a directory that exists but could
/// not be read (permission denied, an NFS error), so a reader that reports (`archive verify`) can
/// say what it did not see rather than count nothing as "all OK". A missing directory is not noted:
/// an archive with no owners' copies has no `users/`.
fn numeric_dirs_noting(
    p: &Path,
    len: Option<usize>,
    unreadable: &mut Vec<String>,
) -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = std::fs::read_dir(p)
        .inspect_err(|e| {
            if e.kind() != std::io::ErrorKind::NotFound {
                unreadable.push(format!("{}: {e}", p.display()));
            }
        })
        .map(|rd| {
            rd.take(MAX_DIR_ENTRIES)
                .flatten()
                .filter_map(|e| {
                    let n = e.file_name().into_string().ok()?;
                    let ok = numeric_name(&n, len) && e.file_type().is_ok_and(|t| t.is_dir());
                    ok.then(|| (n, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn numeric_name(n: &str, len: Option<usize>) -> bool {
    len.is_none_or(|l| n.len() == l)
        && (1..=10).contains(&n.len())
        && n.bytes().all(|b| b.is_ascii_digit())
}

/// [`numeric_dirs`] for a reader that must see everything or nothing (the index): a directory that
/// cannot be read, an entry that cannot be, or a dated name that is not a directory (so cannot be
/// read as one) is an error naming the path, never an empty listing. Symlinks are still not followed
/// (skipped, as `archive verify` reports).
fn numeric_dirs_strict(p: &Path, len: Option<usize>) -> Result<Vec<(String, PathBuf)>> {
    let err = |path: &Path, e: std::io::Error| {
        anyhow::anyhow!("archive directory {} cannot be read: {e}", path.display())
    };
    let mut v = Vec::new();
    for e in std::fs::read_dir(p).map_err(|e| err(p, e))? {
        let e = e.map_err(|e| err(p, e))?;
        let Ok(n) = e.file_name().into_string() else {
            continue;
        };
        if !numeric_name(&n, len) {
            continue;
        }
        let t = e.file_type().map_err(|x| err(&e.path(), x))?;
        if t.is_symlink() {
            continue;
        }
        if !t.is_dir() {
            let path = e.path();
            return Err(err(&path, std::io::Error::from_raw_os_error(libc::ENOTDIR)));
        }
        v.push((n, e.path()));
    }
    v.sort();
    Ok(v)
}

// -------------------------------------------------------------------------------- loading

/// A document as read, upgraded to the current schema.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub summary: JobSummary,
    /// The schema version the document was written with.
    pub stored_version: u32,
}

/// Reads an archived document: THE way any archived JSON becomes a [`JobSummary`] (show, the audit,
/// the index, PostgreSQL, tests). Version 1 is upgraded: `uid` 4294967295 (its "unknown") becomes
/// absent, `gid` and `group` are absent, and its stored `analysis` is dropped (its wording and
/// vocabulary are not version 2's). A document without its analysis gets it here, computed with
/// the site's `thresholds`, so that every reader sees an analysed document.
pub fn load(bytes: &[u8], thresholds: &Report) -> Result<Loaded> {
    let mut v: serde_json::Value = serde_json::from_slice(bytes).context("not a JSON document")?;
    let stored = v
        .get("schema_version")
        .and_then(|x| x.as_u64())
        .context("no schema_version")?;
    let o = v.as_object_mut().context("not a JSON object")?;
    match stored {
        1 => {
            if o.get("uid").and_then(|u| u.as_u64()) == Some(u32::MAX as u64) {
                o.insert("uid".into(), serde_json::Value::Null);
            }
            o.entry("gid").or_insert(serde_json::Value::Null);
            o.entry("group").or_insert(serde_json::Value::Null);
            o.remove("analysis");
            o.insert("schema_version".into(), SCHEMA_VERSION.into());
        }
        n if n == SCHEMA_VERSION as u64 => {}
        n if n > SCHEMA_VERSION as u64 => bail!(
            "schema_version {n} is newer than this jobscope reads ({SCHEMA_VERSION}); update jobscope"
        ),
        n => bail!("unknown schema_version {n}"),
    }
    check_ranges("", &v)?;
    let mut summary: JobSummary = serde_json::from_value(v)
        .with_context(|| format!("not a valid schema-version-{stored} job summary"))?;
    if summary.analysis.is_none() {
        summary.analysis = Some(analysis::analyze(&summary, thresholds));
    }
    Ok(Loaded {
        summary,
        stored_version: stored as u32,
    })
}

/// The largest a number in a document may be, by the unit its field's name ends in (the model
/// names every unit: `elapsed_s`, `peak_bytes`, `start_unix_ms`, `cpu_efficiency_pct`), and
/// whether it may be negative. Checked once, here at load, for every reader (`show`, the index,
/// the audit of one's own copies, `pg sync`), so a forged or corrupt document is refused with the
/// field named instead of showing "0.0s" in one view and negative core-hours in another.
fn number_range(field: &str) -> (f64, f64) {
    const YEAR_S: f64 = 365.25 * 86_400.0;
    if matches!(
        field,
        "exit_status" | "exit_code" | "exit_signal" | "derived_exit_code"
    ) {
        // Signed by nature (a wait status, an exit code, a signal).
        return (-(2f64.powi(31)), 2f64.powi(31));
    }
    let most = if field == "elapsed_s" || field == "t_s" {
        // A job's wall time, an offset in it: a century.
        100.0 * YEAR_S
    } else if field.ends_with("_unix_ms") {
        // Before the year 2200.
        7_258_118_400_000.0
    } else if field.ends_with("_s") {
        // CPU seconds too: a million cores for a century.
        1e6 * 100.0 * YEAR_S
    } else if field.ends_with("_pct") {
        // Efficiencies above 100 % exist (a share of a request); a million percent does not.
        1e6
    } else if field.ends_with("_bytes") || field.ends_with("_bytes_per_s") {
        // An exbibyte.
        2f64.powi(60)
    } else {
        // Counts, cores, hours, ids: integers a double holds exactly.
        2f64.powi(53)
    };
    (0.0, most)
}

/// Refuses a document with a number outside [`number_range`] of its field, naming the field
/// (`nodes[1].elapsed_s = -5 is outside 0..=3155760000`).
fn check_ranges(at: &str, v: &serde_json::Value) -> Result<()> {
    use serde_json::Value;
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                check_ranges(&path, x)?;
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                check_ranges(&format!("{at}[{i}]"), x)?;
            }
        }
        Value::Number(n) => {
            // The field's name: the last name in the path, before any index.
            let field = at
                .rsplit('.')
                .next()
                .unwrap_or(at)
                .split('[')
                .next()
                .unwrap_or("");
            let (least, most) = number_range(field);
            let x = n.as_f64().unwrap_or(f64::NAN);
            if !(x.is_finite() && least <= x && x <= most) {
                bail!("field {at} = {n} is outside {least}..={most}");
            }
        }
        _ => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------------- store

/// What [`Store::write`] did. The record is in place; `problems` are failures after it (manifest
/// line, owner's copy) to log: they do not undo the record.
#[derive(Debug)]
pub struct Archived {
    pub path: PathBuf,
    pub user_copy: Option<PathBuf>,
    /// The exact bytes written.
    pub bytes: Vec<u8>,
    pub problems: Vec<String>,
}

/// One archived run of a job id, as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub name: RecordName,
    pub path: PathBuf,
    /// The day directory of a record (`YYYY/MM/DD`); `None` for an owner's copy.
    pub day: Option<String>,
}

impl Run {
    /// When the run started, as far as the name tells: the start second, else (version-1 names)
    /// the start of the day it ended, else 0.
    fn order(&self) -> u64 {
        match &self.name {
            RecordName::Keyed(k) => k.start_unix_s,
            RecordName::Legacy(_) => self.day.as_deref().and_then(day_start_s).unwrap_or(0),
        }
    }

    /// One line for people: start, cluster, file.
    pub fn describe(&self) -> String {
        let file = self.path.file_name().unwrap_or_default().to_string_lossy();
        match &self.name {
            RecordName::Keyed(k) => format!(
                "started {} (--start {}){}  {file}",
                utc_time(k.start_unix_s),
                k.start_unix_s,
                k.cluster
                    .as_deref()
                    .map(|c| format!(" on cluster {c} (--cluster {c})"))
                    .unwrap_or_default()
            ),
            RecordName::Legacy(_) => match &self.day {
                Some(d) => format!("ended {d} (archived before schema 2, no start known)  {file}"),
                None => format!("archived before schema 2, no start known  {file}"),
            },
        }
    }
}

/// Which run `show` presents when a job id has several.
#[derive(Debug, Clone, Default)]
pub struct Pick {
    pub start_unix_s: Option<u64>,
    pub cluster: Option<String>,
}

impl Pick {
    fn matches(&self, r: &Run) -> bool {
        match &r.name {
            RecordName::Keyed(k) => {
                self.start_unix_s.is_none_or(|s| s == k.start_unix_s)
                    && self
                        .cluster
                        .as_deref()
                        .is_none_or(|c| cluster_label(c) == k.cluster)
            }
            RecordName::Legacy(_) => self.start_unix_s.is_none() && self.cluster.is_none(),
        }
    }
}

/// What [`Store::show`] found.
#[derive(Debug)]
pub struct Shown {
    pub loaded: Loaded,
    pub run: Run,
    /// Every run of the job id the caller may see, oldest first (the shown one included).
    pub runs: Vec<Run>,
    /// For the person asking (other runs, an unverifiable old copy…).
    pub notes: Vec<String>,
}

pub struct Store {
    root: PathBuf,
    admin_group: String,
}

impl Store {
    /// The archive at `root`. `admin_group` owns the dated tree; it is looked up only when writing.
    pub fn new(root: &Path, admin_group: &str) -> Store {
        Store {
            root: root.to_path_buf(),
            admin_group: admin_group.to_string(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The day directories, oldest first: `YYYY/MM/DD` of digits, real directories only.
    pub fn days(&self) -> impl Iterator<Item = Day> {
        numeric_dirs(&self.root, Some(4))
            .into_iter()
            .flat_map(|(y, yp)| {
                numeric_dirs(&yp, Some(2))
                    .into_iter()
                    .flat_map(move |(m, mp)| {
                        let y = y.clone();
                        numeric_dirs(&mp, Some(2))
                            .into_iter()
                            .map(move |(d, dp)| Day {
                                date: format!("{y}/{m}/{d}"),
                                path: dp,
                            })
                    })
            })
    }

    /// The day directories like [`Store::days`], and every directory of the tree (the root
    /// included) that exists but could not be read, as `<path>: <error>`.
    pub fn days_noting(&self) -> (Vec<Day>, Vec<String>) {
        let mut unreadable = Vec::new();
        let mut out = Vec::new();
        for (y, yp) in numeric_dirs_noting(&self.root, Some(4), &mut unreadable) {
            for (m, mp) in numeric_dirs_noting(&yp, Some(2), &mut unreadable) {
                for (d, dp) in numeric_dirs_noting(&mp, Some(2), &mut unreadable) {
                    out.push(Day {
                        date: format!("{y}/{m}/{d}"),
                        path: dp,
                    });
                }
            }
        }
        (out, unreadable)
    }

    /// The day directories like [`Store::days`], but a year, month or day directory that cannot
    /// be read is an error naming it: the index must not take an NFS error for "no records".
    pub fn walk_days(&self) -> Result<Vec<Day>> {
        let mut out = Vec::new();
        for (y, yp) in numeric_dirs_strict(&self.root, Some(4))? {
            for (m, mp) in numeric_dirs_strict(&yp, Some(2))? {
                for (d, dp) in numeric_dirs_strict(&mp, Some(2))? {
                    out.push(Day {
                        date: format!("{y}/{m}/{d}"),
                        path: dp,
                    });
                }
            }
        }
        Ok(out)
    }

    /// The owners' directories `users/<uid>/`.
    pub fn user_dirs(&self) -> Vec<(u32, PathBuf)> {
        numeric_dirs(&self.root.join(USERS), None)
            .into_iter()
            .filter_map(|(n, p)| Some((n.parse().ok()?, p)))
            .collect()
    }

    /// The dated record of the run `key` that ran from `start_ms` to `end_ms` (what the index's row
    /// names), when it is there: a few `lstat`s of the days it can be under, no walk of the tree.
    pub fn record_path(&self, key: &Key, start_ms: u64, end_ms: u64) -> Option<PathBuf> {
        let name = key.file_name();
        self.existing_day(&name, start_ms, end_ms)
            .map(|d| d.join(name))
    }

    /// Where a record of `name` already is, for a job that ran from `start_ms` to `end_ms`: a retry
    /// replaces it there instead of adding a second record under its own end day.
    fn existing_day(&self, name: &str, start_ms: u64, end_ms: u64) -> Option<PathBuf> {
        let last = end_ms / DAY_MS;
        let first = if start_ms == 0 {
            last
        } else {
            (start_ms / DAY_MS).max(last.saturating_sub(MAX_JOB_DAYS))
        };
        (first..=last).rev().find_map(|d| {
            let dir = self.root.join(date_path(d * DAY_MS));
            std::fs::symlink_metadata(dir.join(name))
                .is_ok_and(|m| m.is_file())
                .then_some(dir)
        })
    }

    /// Archives `s`: the record first (atomically: an `Err` means nothing new is visible, so the
    /// caller can give the job back for a retry), then its MANIFEST line, then the owner's copy.
    /// The same key written again replaces the earlier record and copy.
    pub fn write(&self, s: &JobSummary) -> Result<Archived> {
        let gid = group_id(&self.admin_group).with_context(|| {
            format!("archive.admin_group {:?} does not exist", self.admin_group)
        })?;
        let key = Key::of(s);
        let name = key.file_name();
        let json = serde_json::to_vec_pretty(s)?;
        ensure_dir(&self.root, 0o755, 0, 0)?;
        let day_dir = match self.existing_day(&name, s.start_unix_ms, s.end_unix_ms) {
            Some(d) => {
                refuse_another_run(&d.join(&name), s)?;
                d
            }
            None => self.root.join(date_path(s.end_unix_ms)),
        };
        let mut dir = self.root.clone();
        for part in day_dir
            .strip_prefix(&self.root)
            .context("day directory outside the archive")?
            .components()
        {
            dir.push(part);
            ensure_dir(&dir, 0o750, 0, gid)?;
        }
        let path = write_atomic(&dir, &name, &json, 0o640, Some((0, gid)))
            .with_context(|| format!("job {}: archive record", s.job_id))?;
        let mut problems = Vec::new();
        // The manifest is evidence, not the record: a failure is reported, the record stands.
        if let Err(e) = manifest::append(&dir, &name, &json) {
            problems.push(format!("manifest: {e}"));
        }
        let user_copy = match s.uid {
            Some(uid) if uid != 0 => match self.write_user_copy(uid, &name, &json) {
                Ok(p) => Some(p),
                Err(e) => {
                    problems.push(format!("owner's copy: {e:#}"));
                    None
                }
            },
            _ => None,
        };
        Ok(Archived {
            path,
            user_copy,
            bytes: json,
            problems,
        })
    }

    fn write_user_copy(&self, uid: u32, name: &str, json: &[u8]) -> Result<PathBuf> {
        let users = self.root.join(USERS);
        ensure_dir(&users, 0o711, 0, 0)?;
        let mine = users.join(uid.to_string());
        // The owner may enter and list, nobody else (but root); the files in it stay root's.
        ensure_dir(&mine, 0o500, uid, 0)?;
        Ok(write_atomic(&mine, name, json, 0o444, Some((0, 0)))?)
    }

    /// Every run of `job_id` the caller may see, oldest first: root (uid 0) searches the dated
    /// tree, anyone else their own copies.
    pub fn runs(&self, job_id: u32, caller_uid: u32) -> Result<Vec<Run>> {
        let mut runs = Vec::new();
        let mut keep = |rec: Record, dir: &Path, day: Option<String>| {
            if let Some(name) = rec.name.filter(|n| n.job_id() == job_id) {
                runs.push(Run {
                    name,
                    path: dir.join(&rec.file),
                    day,
                });
            }
        };
        // Directories that exist but could not be read: finding no run there is not "no such
        // run", and the caller is told which and why.
        let mut unreadable = Vec::new();
        if caller_uid == 0 {
            let (days, walk) = self.days_noting();
            unreadable = walk;
            for day in days {
                match list(&day.path) {
                    Ok(l) => {
                        for rec in l.records {
                            keep(rec, &day.path, Some(day.date.clone()));
                        }
                    }
                    Err(e) => unreadable.push(format!("{}: {e}", day.path.display())),
                }
            }
        } else {
            let mine = self.root.join(USERS).join(caller_uid.to_string());
            match list(&mine) {
                Ok(l) => {
                    for rec in l.records {
                        keep(rec, &mine, None);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => unreadable.push(format!("{}: {e}", mine.display())),
            }
        }
        if runs.is_empty() && !unreadable.is_empty() {
            bail!(
                "job {job_id}: cannot read {} (so it cannot say whether the job is there)",
                unreadable.join("; ")
            );
        }
        runs.sort_by_key(|r| (r.order(), r.path.clone()));
        Ok(runs)
    }

    /// Reads one run for the caller and checks that it is what jobscope wrote for that run (see the
    /// module doc: an owner's copy must be root's, unwritable, with one link, on the archive's
    /// file system).
    /// `thresholds`: see [`load`].
    pub fn read(
        &self,
        run: &Run,
        caller_uid: u32,
        thresholds: &Report,
    ) -> Result<(Loaded, Vec<String>)> {
        let shown = run.path.display();
        let f = open_regular(&run.path, Access::Read).with_context(|| format!("{shown}"))?;
        let md = f.metadata().with_context(|| format!("{shown}"))?;
        ensure!(
            md.len() <= MAX_DOC_BYTES,
            "{shown}: {} bytes, more than {MAX_DOC_BYTES}",
            md.len()
        );
        let mut notes = Vec::new();
        if caller_uid != 0 {
            let root_dev = std::fs::metadata(&self.root)
                .with_context(|| format!("{}", self.root.display()))?
                .dev();
            let altered = |why: String| {
                anyhow::anyhow!(
                    "job {}: your copy {shown} is not the one jobscope wrote ({why}); an administrator can show the archived record",
                    run.name.job_id()
                )
            };
            if md.dev() != root_dev {
                return Err(altered("it is on another file system".into()));
            }
            if md.nlink() != 1 {
                return Err(altered(format!("{} links", md.nlink())));
            }
            match run.name {
                RecordName::Keyed(_) => {
                    if md.uid() != 0 || md.mode() & 0o222 != 0 {
                        return Err(altered(format!(
                            "owner uid {}, mode {:o}",
                            md.uid(),
                            md.mode() & 0o7777
                        )));
                    }
                }
                RecordName::Legacy(_) => notes.push(format!(
                    "job {}: this copy was written before schema version 2, when owners' copies were their own files: it cannot be vouched for",
                    run.name.job_id()
                )),
            }
        }
        let mut bytes = Vec::with_capacity(md.len() as usize);
        (&f).take(MAX_DOC_BYTES + 1)
            .read_to_end(&mut bytes)
            .with_context(|| format!("{shown}"))?;
        let loaded = load(&bytes, thresholds).with_context(|| format!("{shown}"))?;
        let s = &loaded.summary;
        let consistent = match &run.name {
            RecordName::Keyed(k) => Key::of(s) == *k,
            RecordName::Legacy(j) => s.job_id == *j,
        };
        ensure!(
            consistent,
            "{shown}: holds job {} started {}, not the run its name says",
            s.job_id,
            utc_time(s.start_unix_ms / 1000)
        );
        if caller_uid != 0 && s.uid != Some(caller_uid) {
            bail!("job {}: not your job", s.job_id);
        }
        Ok((loaded, notes))
    }

    /// The run of `job_id` to show the caller: the newest one matching `pick`, with a note when
    /// there are others.
    pub fn show(
        &self,
        job_id: u32,
        caller_uid: u32,
        pick: &Pick,
        thresholds: &Report,
    ) -> Result<Shown> {
        let runs = self.runs(job_id, caller_uid)?;
        if runs.is_empty() {
            if caller_uid == 0 {
                bail!("job {job_id}: not in the archive {}", self.root.display());
            }
            bail!(
                "job {job_id}: no report of yours in {} (only the job's owner and administrators can see a job's report)",
                self.root.display()
            );
        }
        let Some(run) = runs.iter().rev().find(|r| pick.matches(r)).cloned() else {
            bail!(
                "job {job_id}: no run matches; its runs:\n  {}",
                runs.iter()
                    .map(Run::describe)
                    .collect::<Vec<_>>()
                    .join("\n  ")
            );
        };
        let (loaded, mut notes) = self.read(&run, caller_uid, thresholds)?;
        if runs.len() > 1 {
            notes.push(format!(
                "job id {job_id} was archived {} times; showing the run {}. `jobscope show {job_id} --list` lists them; --start and --cluster pick one",
                runs.len(),
                run.describe()
            ));
        }
        Ok(Shown {
            loaded,
            run,
            runs,
            notes,
        })
    }

    /// Retention: removes whole day directories (with their MANIFEST, so the remaining days still
    /// verify) older than `retention_days`, and owners' copies written before the cutoff.
    /// `retention_days == 0` keeps everything. Returns (days removed, owners' copies removed).
    pub fn prune(&self, retention_days: u32, now_ms: u64) -> Result<(usize, usize)> {
        if retention_days == 0 {
            return Ok((0, 0));
        }
        let cutoff_ms = now_ms.saturating_sub(retention_days as u64 * DAY_MS);
        let cutoff = date_path(cutoff_ms);
        let old: Vec<Day> = self.days().filter(|d| d.date < cutoff).collect();
        for d in &old {
            std::fs::remove_dir_all(&d.path)
                .with_context(|| format!("remove {}", d.path.display()))?;
            // Empty month and year directories go too (remove_dir fails on a non-empty one).
            if let Some(month) = d.path.parent() {
                let _ = std::fs::remove_dir(month);
                if let Some(year) = month.parent() {
                    let _ = std::fs::remove_dir(year);
                }
            }
        }
        let mut copies = 0;
        for (_, dir) in self.user_dirs() {
            for rec in list(&dir).map(|l| l.records).unwrap_or_default() {
                let p = dir.join(&rec.file);
                // The copies are root's: their owner cannot change their modification time.
                let written_ms = std::fs::symlink_metadata(&p)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_millis() as u64);
                if written_ms.is_some_and(|w| w < cutoff_ms) && std::fs::remove_file(&p).is_ok() {
                    copies += 1;
                }
            }
        }
        Ok((old.len(), copies))
    }

    /// Checks every day's MANIFEST chain against its files (manifest.rs), and every owner's copy
    /// against its record: same bytes, root's, mode 0444.
    pub fn verify(&self) -> VerifyReport {
        let mut rep = VerifyReport::default();
        // The owners' copies first, so the day walk keeps only the record paths they need.
        let mut copies: Vec<(u32, PathBuf, Record)> = Vec::new();
        let users = numeric_dirs_noting(&self.root.join(USERS), None, &mut rep.unreadable);
        let users = users
            .into_iter()
            .filter_map(|(n, p)| Some((n.parse::<u32>().ok()?, p)));
        for (uid, dir) in users {
            match list(&dir) {
                Ok(l) => {
                    if l.truncated {
                        rep.user_findings.push(format!(
                            "users/{uid}/: more than {MAX_DIR_ENTRIES} entries, the rest not checked"
                        ));
                    }
                    copies.extend(l.records.into_iter().map(|r| (uid, dir.clone(), r)));
                }
                Err(e) => rep
                    .user_findings
                    .push(format!("users/{uid}/: cannot list: {e}")),
            }
        }
        let wanted: BTreeSet<&str> = copies.iter().map(|(_, _, r)| r.file.as_str()).collect();
        let mut records: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        let (days, unreadable) = self.days_noting();
        rep.unreadable.extend(unreadable);
        for day in days {
            let report = match list(&day.path) {
                Ok(l) => {
                    for r in &l.records {
                        if r.regular && wanted.contains(r.file.as_str()) {
                            records
                                .entry(r.file.clone())
                                .or_default()
                                .push(day.path.join(&r.file));
                        }
                    }
                    let present: Vec<(String, bool)> = l
                        .records
                        .iter()
                        .map(|r| (r.file.clone(), r.regular))
                        .collect();
                    let mut d = manifest::verify_day(&day.path, &day.date, &present);
                    if l.truncated {
                        d.problems.push(format!(
                            "more than {MAX_DIR_ENTRIES} entries, the rest not checked"
                        ));
                    }
                    d
                }
                Err(e) => DayReport {
                    day: day.date.clone(),
                    problems: vec![format!("{}: {e}", day.path.display())],
                    ..Default::default()
                },
            };
            rep.days.push(report);
        }
        for (uid, dir, rec) in &copies {
            rep.user_copies += 1;
            if let Some(f) = check_copy(*uid, dir, rec, records.get(&rec.file)) {
                rep.user_findings
                    .push(format!("users/{uid}/{}: {f}", rec.file));
            }
        }
        rep
    }
}

/// What is wrong with one owner's copy, if anything. `records`: the records of the same name.
fn check_copy(
    uid: u32,
    dir: &Path,
    rec: &Record,
    records: Option<&Vec<PathBuf>>,
) -> Option<String> {
    let path = dir.join(&rec.file);
    if !rec.regular {
        return Some("ALTERED: not a regular file".into());
    }
    let Some(name) = &rec.name else {
        return Some("NO RECORD: not a name jobscope writes".into());
    };
    let md = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) => return Some(format!("cannot check: {e}")),
    };
    match name {
        RecordName::Keyed(_) => {
            if md.uid() != 0 || md.mode() & 0o7777 != 0o444 || md.nlink() != 1 {
                return Some(format!(
                    "ALTERED: owner uid {}, mode {:o}, {} link(s) (jobscope writes root, 0444, 1)",
                    md.uid(),
                    md.mode() & 0o7777,
                    md.nlink()
                ));
            }
        }
        // Version 1 wrote the copy as the user's own file.
        RecordName::Legacy(_) => {
            if md.uid() != uid {
                return Some(format!("ALTERED: owner uid {}, expected {uid}", md.uid()));
            }
        }
    }
    let Some(records) = records else {
        return Some("NO RECORD: no archive record of that name".into());
    };
    let mine = match manifest::sha256_file(&path) {
        Ok(d) => d,
        Err(e) => return Some(format!("cannot check: {e}")),
    };
    // A version-1 name may be in several days (a reused job id): any of them may be the source.
    let same = records
        .iter()
        .any(|r| manifest::sha256_file(r).is_ok_and(|d| d == mine));
    (!same).then(|| {
        format!(
            "ALTERED: differs from the record {}",
            records
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// The newest run of `job_id` the caller may see, as stored bytes (parse them with [`load`]).
pub fn find(archive_dir: &Path, job_id: u32, caller_uid: u32) -> Result<Vec<u8>> {
    let store = Store::new(archive_dir, "");
    let runs = store.runs(job_id, caller_uid)?;
    let run = runs
        .last()
        .with_context(|| format!("job {job_id}: not in the archive {}", archive_dir.display()))?;
    Ok(jobscope_common::fsutil::read_limited(
        &run.path,
        MAX_DOC_BYTES,
    )?)
}

/// The same key written again replaces the earlier record only when it is the same run (a retry,
/// a late node): a record whose run ended before this one began, or began after this one ended, is
/// another run of the job (a requeue) that happens to share the key, and replacing it would lose
/// its report. Refused, so the caller keeps this run's evidence and says why.
fn refuse_another_run(existing: &Path, s: &JobSummary) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Span {
        start_unix_ms: u64,
        end_unix_ms: u64,
    }
    let Ok(bytes) = jobscope_common::fsutil::read_limited(existing, MAX_DOC_BYTES) else {
        return Ok(());
    };
    let Ok(old) = serde_json::from_slice::<Span>(&bytes) else {
        return Ok(());
    };
    ensure!(
        old.end_unix_ms >= s.start_unix_ms && old.start_unix_ms <= s.end_unix_ms,
        "job {}: {} holds another run of this job ({} to {}), not this one ({} to {}): not replaced",
        s.job_id,
        existing.display(),
        utc_time(old.start_unix_ms / 1000),
        utc_time(old.end_unix_ms / 1000),
        utc_time(s.start_unix_ms / 1000),
        utc_time(s.end_unix_ms / 1000),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const V1_TWO_NODE: &str =
        include_str!("../../report/testdata/archive-v1/two-node-imbalanced.json");
    const V1_OOM: &str = include_str!("../../report/testdata/archive-v1/oom.json");

    /// A real document (the stored v1 fixture, upgraded) made into job `job` of uid 1001 that ran
    /// from `start_s` to `end_s`.
    fn summary(job: u32, start_s: u64, end_s: u64) -> JobSummary {
        let mut s = load(V1_TWO_NODE.as_bytes(), &Report::default())
            .unwrap()
            .summary;
        s.job_id = job;
        s.start_unix_ms = start_s * 1000;
        s.end_unix_ms = end_s * 1000;
        s.uid = Some(1001);
        // As a reader gets it back: analysed (by `load`), its figures once through JSON.
        s.analysis = None;
        load(&serde_json::to_vec(&s).unwrap(), &Report::default())
            .unwrap()
            .summary
    }

    /// The document less its analysis, which is present after every load (see [`load`]) but
    /// whose computed floats may come back one ulp apart through JSON (serde_json parses without
    /// `float_roundtrip`): the stored figures are compared exactly.
    fn figures(s: &JobSummary) -> JobSummary {
        assert!(s.analysis.is_some(), "a loaded document is analysed");
        JobSummary {
            analysis: None,
            ..s.clone()
        }
    }

    fn store() -> (tempfile::TempDir, Store) {
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(&d.path().join("archive"), "root");
        (d, s)
    }

    /// Two runs of one job under one key (a requeued job whose runs got the same start second
    /// from a confused source): the second is refused, the first record stays as it was. The
    /// same run written again (a retry) still replaces its record.
    #[test]
    fn another_run_under_the_same_key_is_refused_not_written_over() {
        const DAY: u64 = 20_000 * 86_400;
        let (_d, st) = store();
        let mut first = summary(7, DAY + 100, DAY + 200);
        first.scheduler_start_unix_s = Some(DAY + 100);
        let a = st.write(&first).unwrap();
        let before = std::fs::read(&a.path).unwrap();
        let mut again = first.clone();
        again.end_unix_ms += 1_000;
        assert_eq!(
            st.write(&again).unwrap().path,
            a.path,
            "a retry of the same run"
        );
        let kept = std::fs::read(&a.path).unwrap();
        assert_ne!(kept, before);
        let mut later = summary(7, DAY + 300, DAY + 400);
        later.scheduler_start_unix_s = Some(DAY + 100);
        let err = format!("{:#}", st.write(&later).unwrap_err());
        assert!(err.contains("another run of this job"), "{err}");
        assert_eq!(std::fs::read(&a.path).unwrap(), kept);
        assert_eq!(files(&st.root).len(), 2, "the record and the owner's copy");
    }

    /// Every `*.json` below `dir` (any depth), relative, sorted.
    fn files(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if e.file_type().unwrap().is_dir() {
                    todo.push(p);
                } else if p.extension().is_some_and(|x| x == "json") {
                    out.push(p.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
                }
            }
        }
        out.sort();
        out
    }

    // 2026-11-21 00:00:00 UTC
    const DAY: u64 = 1_795_219_200;

    #[test]
    fn dates() {
        assert_eq!(date_path(0), "1970/01/01");
        assert_eq!(date_path(1_795_305_466_000), "2026/11/21");
        assert_eq!(date_path(951_782_400_000), "2000/02/29");
        assert_eq!(
            utc_time(DAY + 3 * 3600 + 4 * 60 + 5),
            "2026-11-21 03:04:05 UTC"
        );
        assert_eq!(day_start_s("2026/11/21"), Some(DAY));
        assert_eq!(day_start_s("2000/02/29"), Some(951_782_400));
        assert_eq!(day_start_s("2026/11"), None);
    }

    #[test]
    fn key_names() {
        let k = Key {
            job_id: 77,
            start_unix_s: DAY,
            cluster: Some("alpha-2".into()),
        };
        assert_eq!(k.file_name(), "77-1795219200-alpha-2.json");
        assert_eq!(
            RecordName::parse(&k.file_name()),
            Some(RecordName::Keyed(k))
        );
        assert_eq!(
            RecordName::parse("77-1795219200.json"),
            Some(RecordName::Keyed(Key {
                job_id: 77,
                start_unix_s: DAY,
                cluster: None
            }))
        );
        assert_eq!(RecordName::parse("77.json"), Some(RecordName::Legacy(77)));
        for bad in [
            "77-1795219200-a.b.json",
            "../77.json",
            "x77.json",
            "77-.json",
            "77-12x.json",
            "99999999999.json",
            ".77.json.tmp.1",
            "77-1-a b.json",
            "MANIFEST",
        ] {
            assert_eq!(RecordName::parse(bad), None, "{bad}");
        }
        // A cluster name is made safe for a file name, never dropped.
        assert_eq!(
            cluster_label("my cluster/../x").as_deref(),
            Some("my_cluster____x")
        );
        assert_eq!(cluster_label(""), None);
        let mut s = summary(5, DAY, DAY + 60);
        s.cluster = Some("a.b".into());
        assert_eq!(Key::of(&s).file_name(), "5-1795219200-a_b.json");
    }

    #[test]
    fn a_job_id_reused_the_same_day_keeps_both_runs() {
        let (_d, st) = store();
        let first = summary(77, DAY + 100, DAY + 200);
        let mut second = summary(77, DAY + 5000, DAY + 6000);
        second.name = Some("second run".into());
        st.write(&first).unwrap();
        let w = st.write(&second).unwrap();
        assert!(w.problems.is_empty(), "{:?}", w.problems);
        assert_eq!(
            files(st.root()),
            [
                "2026/11/21/77-1795219300-jobscope.json",
                "2026/11/21/77-1795224200-jobscope.json",
                "users/1001/77-1795219300-jobscope.json",
                "users/1001/77-1795224200-jobscope.json",
            ]
        );
        for caller in [0, 1001] {
            let runs = st.runs(77, caller).unwrap();
            assert_eq!(runs.len(), 2, "caller {caller}");
            // Newest by default, with a note that there is another.
            let shown = st
                .show(77, caller, &Pick::default(), &Report::default())
                .unwrap();
            assert_eq!(shown.loaded.summary.name.as_deref(), Some("second run"));
            assert!(
                shown.notes.iter().any(|n| n.contains("archived 2 times")),
                "{:?}",
                shown.notes
            );
            // The other one by its start.
            let older = st
                .show(
                    77,
                    caller,
                    &Pick {
                        start_unix_s: Some(DAY + 100),
                        cluster: None,
                    },
                    &Report::default(),
                )
                .unwrap();
            assert_eq!(older.loaded.summary.start_unix_ms, (DAY + 100) * 1000);
            assert_eq!(figures(&older.loaded.summary), figures(&first));
        }
        let none = st.show(
            77,
            0,
            &Pick {
                start_unix_s: Some(1),
                cluster: None,
            },
            &Report::default(),
        );
        let e = format!("{:#}", none.unwrap_err());
        assert!(
            e.contains("no run matches") && e.contains("--start 1795224200"),
            "{e}"
        );
        assert!(st.verify().ok(), "{}", st.verify().render(true));
    }

    #[test]
    fn the_same_key_twice_is_one_record() {
        let (_d, st) = store();
        let first = summary(78, DAY + 100, DAY + 200);
        st.write(&first).unwrap();
        // The retry (reap, a day later) ends on another day: it replaces the record where it is.
        let mut retry = summary(78, DAY + 100, DAY + 86_400 + 50);
        retry.partial = true;
        let w = st.write(&retry).unwrap();
        assert!(w.problems.is_empty(), "{:?}", w.problems);
        assert_eq!(
            files(st.root()),
            [
                "2026/11/21/78-1795219300-jobscope.json",
                "users/1001/78-1795219300-jobscope.json",
            ]
        );
        let shown = st
            .show(78, 0, &Pick::default(), &Report::default())
            .unwrap();
        assert_eq!(figures(&shown.loaded.summary), figures(&retry));
        assert!(shown.notes.is_empty(), "{:?}", shown.notes);
        assert_eq!(
            std::fs::read(w.user_copy.as_ref().unwrap()).unwrap(),
            std::fs::read(&w.path).unwrap()
        );
        // Two MANIFEST lines for the one file; verify checks it against the latest.
        let m = std::fs::read_to_string(st.root().join("2026/11/21/MANIFEST")).unwrap();
        assert_eq!(m.lines().count(), 2);
        let rep = st.verify();
        assert!(rep.ok(), "{}", rep.render(true));
        assert_eq!(rep.user_copies, 1);
    }

    #[test]
    fn a_failed_write_leaves_nothing_visible() {
        let (d, st) = store();
        let s = summary(79, DAY, DAY + 10);
        let bad = Store::new(st.root(), "no-such-group-xyz");
        let e = format!("{:#}", bad.write(&s).unwrap_err());
        assert!(e.contains("no-such-group-xyz"), "{e}");
        assert!(!st.root().exists());
        // A day directory that is a symlink is refused, not written through.
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::create_dir_all(st.root().join("2026/11")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, st.root().join("2026/11/21")).unwrap();
        assert!(st.write(&s).is_err());
        assert!(files(&elsewhere).is_empty() && files(st.root()).is_empty());
    }

    #[test]
    fn the_owners_copy_is_roots_and_only_its_owner_gets_in() {
        let (_d, st) = store();
        let w = st.write(&summary(80, DAY, DAY + 10)).unwrap();
        let mode = |p: &Path| {
            let m = std::fs::symlink_metadata(p).unwrap();
            (m.mode() & 0o7777, m.uid(), m.gid(), m.nlink())
        };
        // Root's file, readable by whoever can reach it, writable by nobody.
        assert_eq!(mode(w.user_copy.as_ref().unwrap()), (0o444, 0, 0, 1));
        // Only uid 1001 (and root) can enter its directory; nobody but root can write in users/.
        assert_eq!(mode(&st.root().join("users/1001")).0, 0o500);
        assert_eq!(mode(&st.root().join("users/1001")).1, 1001);
        assert_eq!(mode(&st.root().join("users")), (0o711, 0, 0, 3));
        // The record: root:<admin group> 0640 in a 0750 day.
        assert_eq!(mode(&w.path).0, 0o640);
        assert_eq!(mode(&st.root().join("2026/11/21")).0, 0o750);
        // No copy for root's jobs or an unknown uid.
        for uid in [Some(0), None] {
            let mut s = summary(81, DAY, DAY + 10);
            s.uid = uid;
            assert!(st.write(&s).unwrap().user_copy.is_none());
        }
    }

    #[test]
    fn show_refuses_a_copy_its_owner_changed() {
        let (_d, st) = store();
        let w = st.write(&summary(82, DAY, DAY + 10)).unwrap();
        st.write(&summary(83, DAY, DAY + 10)).unwrap();
        let copy = w.user_copy.unwrap();
        let show = || {
            st.show(82, 1001, &Pick::default(), &Report::default())
                .map(|s| s.loaded.summary)
        };
        assert_eq!(show().unwrap().job_id, 82);
        assert!(
            st.show(82, 1002, &Pick::default(), &Report::default())
                .is_err(),
            "another uid"
        );

        // What the owner can do in their directory: replace the file with their own.
        let mut forged = summary(82, DAY, DAY + 10);
        forged.cpu.usage_s = Some(1e9);
        std::fs::remove_file(&copy).unwrap();
        std::fs::write(&copy, serde_json::to_vec(&forged).unwrap()).unwrap();
        std::os::unix::fs::chown(&copy, Some(1001), Some(1001)).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o400)).unwrap();
        let e = format!("{:#}", show().unwrap_err());
        assert!(
            e.contains("not the one jobscope wrote") && e.contains("owner uid 1001"),
            "{e}"
        );

        // A writable root file (not what jobscope writes) is refused too.
        st.write(&summary(82, DAY, DAY + 10)).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o646)).unwrap();
        assert!(show().is_err());

        // Another run's root-owned copy under this run's name (a rename, or a hard link).
        st.write(&summary(82, DAY, DAY + 10)).unwrap();
        let other = copy.with_file_name("83-1795219200-jobscope.json");
        std::fs::remove_file(&copy).unwrap();
        std::fs::hard_link(&other, &copy).unwrap();
        assert!(format!("{:#}", show().unwrap_err()).contains("2 links"));
        std::fs::remove_file(&copy).unwrap();
        std::fs::copy(&other, &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o444)).unwrap();
        let e = format!("{:#}", show().unwrap_err());
        assert!(e.contains("holds job 83"), "{e}");
        // Root reads the record, not the copy.
        assert_eq!(
            st.show(82, 0, &Pick::default(), &Report::default())
                .unwrap()
                .loaded
                .summary
                .job_id,
            82
        );
    }

    #[test]
    fn verify_catches_an_altered_owners_copy() {
        let (_d, st) = store();
        let w = st.write(&summary(84, DAY, DAY + 10)).unwrap();
        assert!(st.verify().ok());
        let copy = w.user_copy.unwrap();
        // Root's file with other bytes.
        let mut b = std::fs::read(&copy).unwrap();
        b[10] ^= 1;
        std::fs::write(&copy, &b).unwrap();
        let rep = st.verify();
        assert!(!rep.ok());
        assert!(rep.days.iter().all(DayReport::ok));
        assert_eq!(rep.user_findings.len(), 1, "{:?}", rep.user_findings);
        assert!(
            rep.user_findings[0].starts_with(
                "users/1001/84-1795219200-jobscope.json: ALTERED: differs from the record"
            ),
            "{:?}",
            rep.user_findings
        );
        assert!(rep
            .render(false)
            .contains("1 owner's copies checked, 1 with findings"));
        // The record's bytes, but the owner's file.
        std::fs::write(&copy, &w.bytes).unwrap();
        std::os::unix::fs::chown(&copy, Some(1001), None).unwrap();
        let rep = st.verify();
        assert!(
            rep.user_findings[0].contains("owner uid 1001"),
            "{:?}",
            rep.user_findings
        );
        // A copy no record has.
        std::os::unix::fs::chown(&copy, Some(0), None).unwrap();
        assert!(st.verify().ok());
        std::fs::copy(&copy, copy.with_file_name("84-1795219999-jobscope.json")).unwrap();
        let rep = st.verify();
        assert!(
            rep.user_findings
                .iter()
                .any(|f| f.contains("NO RECORD: no archive record")),
            "{:?}",
            rep.user_findings
        );
    }

    #[test]
    fn a_number_outside_its_fields_range_is_refused_at_load_naming_the_field() {
        let doc: serde_json::Value = serde_json::from_str(V1_TWO_NODE).unwrap();
        load(V1_TWO_NODE.as_bytes(), &Report::default()).unwrap();
        let forged = |pointer: &str, x: serde_json::Value| {
            let mut d = doc.clone();
            *d.pointer_mut(pointer).unwrap() = x;
            load(&serde_json::to_vec(&d).unwrap(), &Report::default())
        };
        for (pointer, x, named) in [
            (
                "/elapsed_s",
                serde_json::json!(-3600.0),
                "field elapsed_s = -3600",
            ),
            (
                "/nodes/1/elapsed_s",
                serde_json::json!(-0.5),
                "field nodes[1].elapsed_s = -0.5",
            ),
            // A century and a bit: no job runs that long.
            (
                "/elapsed_s",
                serde_json::json!(3.2e9),
                "field elapsed_s = 3200000000",
            ),
            (
                "/elapsed_s",
                serde_json::json!(1e300),
                "field elapsed_s = 1e",
            ),
            (
                "/nodes/0/cpu_efficiency_pct",
                serde_json::json!(-1.0),
                "field nodes[0].cpu_efficiency_pct = -1",
            ),
            (
                "/nodes/0/alloc_mem_bytes",
                serde_json::json!(9.3e18),
                "field nodes[0].alloc_mem_bytes",
            ),
            (
                "/start_unix_ms",
                serde_json::json!(9.0e15),
                "field start_unix_ms",
            ),
        ] {
            let e = format!("{:#}", forged(pointer, x.clone()).unwrap_err());
            assert!(e.contains(named), "{pointer} = {x}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        // Signed by nature: a negative exit code loads.
        forged("/exit_code", serde_json::json!(-1)).unwrap();
        // NaN is not JSON: refused as such.
        let text = V1_TWO_NODE.replacen("\"elapsed_s\":", "\"elapsed_s\": NaN, \"x\":", 1);
        assert!(load(text.as_bytes(), &Report::default()).is_err());
    }

    #[test]
    fn verify_says_what_it_could_not_read() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            // Root reads through any mode; the CLI test runs this as another user.
            eprintln!("skipped: root reads every directory");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let day = d.path().join("2026/11/25");
        std::fs::create_dir_all(&day).unwrap();
        let month = d.path().join("2026/11");
        std::fs::set_permissions(&month, std::fs::Permissions::from_mode(0o000)).unwrap();
        let rep = Store::new(d.path(), "root").verify();
        std::fs::set_permissions(&month, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!rep.ok());
        assert!(
            rep.unreadable[0].contains("2026/11"),
            "{:?}",
            rep.unreadable
        );
        assert!(rep.render(false).contains("NOT fully checked"));
    }

    #[test]
    fn the_v1_fixture_loads_shows_and_keeps_its_figures() {
        let mut thresholds_mattered = false;
        for text in [V1_TWO_NODE, V1_OOM] {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            let l = load(text.as_bytes(), &Report::default()).unwrap();
            assert_eq!(l.stored_version, 1);
            let s = &l.summary;
            assert_eq!(s.schema_version, SCHEMA_VERSION);
            // v1's analysis is dropped (not version 2's words) and recomputed with the thresholds given.
            let mut bare = s.clone();
            bare.analysis = None;
            assert_eq!(
                s.analysis,
                Some(analysis::analyze(&bare, &Report::default()))
            );
            // Both fixtures are shorter than the default minimum for advice (60 s): 1 s lets it be given.
            let strict = Report {
                min_elapsed_for_advice_s: 1,
                ..Report::default()
            };
            let strict_load = load(text.as_bytes(), &strict).unwrap().summary;
            assert_eq!(
                strict_load.analysis,
                Some(analysis::analyze(&bare, &strict))
            );
            thresholds_mattered |= strict_load.analysis != s.analysis;
            assert_eq!((s.gid, s.group.as_deref()), (None, None));
            assert_eq!(s.uid.map(u64::from), v["uid"].as_u64());
            assert_eq!(Some(s.job_id as u64), v["job_id"].as_u64());
            assert_eq!(s.cluster.as_deref(), v["cluster"].as_str());
            assert_eq!(Some(s.start_unix_ms), v["start_unix_ms"].as_u64());
            assert_eq!(Some(s.end_unix_ms), v["end_unix_ms"].as_u64());
            assert_eq!(Some(s.elapsed_s), v["elapsed_s"].as_f64());
            assert_eq!(s.cpu.usage_s, v["cpu"]["usage_s"].as_f64());
            assert_eq!(s.mem.peak_bytes, v["mem"]["peak_bytes"].as_u64());
            assert_eq!(s.mem.limit_bytes, v["mem"]["limit_bytes"].as_u64());
            assert_eq!(s.io.read_bytes, v["io"]["read_bytes"].as_u64());
            assert_eq!(s.efficiency.cpu_pct, v["efficiency"]["cpu_pct"].as_f64());
            assert_eq!(s.efficiency.mem_pct, v["efficiency"]["mem_pct"].as_f64());
            assert_eq!(s.alloc.cores.map(u64::from), v["alloc"]["cores"].as_u64());
            assert_eq!(Some(s.samples), v["samples"].as_u64());
            assert_eq!(s.nodes.len(), v["nodes"].as_array().unwrap().len());
            for (n, vn) in s.nodes.iter().zip(v["nodes"].as_array().unwrap()) {
                assert_eq!(Some(n.node.as_str()), vn["node"].as_str());
                assert_eq!(n.cpu.usage_s, vn["cpu"]["usage_s"].as_f64());
                assert_eq!(n.timeline.len(), vn["timeline"].as_array().unwrap().len());
            }
            // The state reads back as the same word.
            assert_eq!(serde_json::to_value(s.state).unwrap(), v["state"]);
            // `show`: the text rendered.
            let s = l.summary.clone();
            let text = jobscope_report::present::render_text(&s, false).unwrap();
            assert!(text.contains(&format!("{}", s.job_id)), "{text}");
        }
        assert!(thresholds_mattered, "the site's thresholds were not used");
        // Version 1's "unknown uid" becomes absent.
        let mut v: serde_json::Value = serde_json::from_str(V1_OOM).unwrap();
        v["uid"] = u32::MAX.into();
        let l = load(&serde_json::to_vec(&v).unwrap(), &Report::default()).unwrap();
        assert_eq!(l.summary.uid, None);
        // Other versions are refused with a reason.
        v["schema_version"] = 3.into();
        let e = format!(
            "{:#}",
            load(&serde_json::to_vec(&v).unwrap(), &Report::default()).unwrap_err()
        );
        assert!(e.contains("newer"), "{e}");
        assert!(load(b"{\"job_id\":1}", &Report::default()).is_err());
        assert!(load(b"[1]", &Report::default()).is_err());
        // A document written now loads as itself.
        let s = summary(85, DAY, DAY + 10);
        let l = load(&serde_json::to_vec(&s).unwrap(), &Report::default()).unwrap();
        assert_eq!(l.stored_version, SCHEMA_VERSION);
        assert_eq!(figures(&l.summary), figures(&s));
    }

    /// An archive as version 1 left it: `<job>.json` in the end day, the owner's own 0400 copy.
    #[test]
    fn a_v1_archive_is_found_shown_and_verified() {
        let (_d, st) = store();
        let day = st.root().join("2026/11/21");
        std::fs::create_dir_all(&day).unwrap();
        std::fs::write(day.join("69.json"), V1_OOM).unwrap();
        manifest::append(&day, "69.json", V1_OOM.as_bytes()).unwrap();
        let mine = st.root().join("users/1001");
        std::fs::create_dir_all(&mine).unwrap();
        std::fs::write(mine.join("69.json"), V1_OOM).unwrap();
        std::os::unix::fs::chown(mine.join("69.json"), Some(1001), Some(0)).unwrap();
        std::fs::set_permissions(mine.join("69.json"), std::fs::Permissions::from_mode(0o400))
            .unwrap();
        let root = st
            .show(69, 0, &Pick::default(), &Report::default())
            .unwrap();
        assert_eq!(root.loaded.stored_version, 1);
        assert!(root.notes.is_empty());
        let own = st
            .show(69, 1001, &Pick::default(), &Report::default())
            .unwrap();
        assert_eq!(own.loaded.summary, root.loaded.summary);
        assert!(
            own.notes[0].contains("cannot be vouched for"),
            "{:?}",
            own.notes
        );
        let rep = st.verify();
        assert!(rep.ok(), "{}", rep.render(true));
        assert_eq!(rep.user_copies, 1);
        // The same id archived again under schema 2: two runs, the new one shown by default.
        let s = summary(69, DAY + 86_400, DAY + 86_500);
        st.write(&s).unwrap();
        let shown = st
            .show(69, 0, &Pick::default(), &Report::default())
            .unwrap();
        assert_eq!(shown.runs.len(), 2);
        assert_eq!(figures(&shown.loaded.summary), figures(&s));
        assert!(shown.runs[0].describe().contains("ended 2026/11/21"));
    }

    #[test]
    fn prune_removes_only_old_days_and_copies() {
        let (_d, st) = store();
        let now_ms = (DAY + 3600) * 1000;
        let old = st
            .write(&summary(1, DAY - 40 * 86_400, DAY - 40 * 86_400 + 10))
            .unwrap();
        st.write(&summary(2, DAY - 20 * 86_400, DAY - 20 * 86_400 + 10))
            .unwrap();
        st.write(&summary(3, DAY, DAY + 10)).unwrap();
        // The owner's copy is as old as its record.
        let then = std::time::UNIX_EPOCH + std::time::Duration::from_secs(DAY - 40 * 86_400 + 10);
        std::fs::File::options()
            .write(true)
            .open(old.user_copy.as_ref().unwrap())
            .unwrap()
            .set_modified(then)
            .unwrap();
        assert_eq!(st.prune(0, now_ms).unwrap(), (0, 0), "0 keeps everything");
        assert_eq!(st.prune(30, now_ms).unwrap(), (1, 1));
        assert_eq!(
            files(st.root()),
            [
                "2026/11/01/2-1793491200-jobscope.json",
                "2026/11/21/3-1795219200-jobscope.json",
                "users/1001/2-1793491200-jobscope.json",
                "users/1001/3-1795219200-jobscope.json",
            ]
        );
        // The emptied month went with its day.
        assert!(!st.root().join("2026/10").exists());
        assert!(st.verify().ok());
    }

    #[test]
    fn the_walker_does_not_follow_symlinks() {
        let (d, st) = store();
        st.write(&summary(90, DAY, DAY + 10)).unwrap();
        let outside = d.path().join("outside/2026/11/22");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("91-1.json"), "{}").unwrap();
        // A linked day, a linked year, a linked record.
        std::os::unix::fs::symlink(&outside, st.root().join("2026/11/22")).unwrap();
        std::os::unix::fs::symlink(d.path().join("outside/2026"), st.root().join("2025")).unwrap();
        std::os::unix::fs::symlink(
            outside.join("91-1.json"),
            st.root().join("2026/11/21/91-1.json"),
        )
        .unwrap();
        let days: Vec<String> = st.days().map(|d| d.date).collect();
        assert_eq!(days, ["2026/11/21"]);
        let l = list(&st.root().join("2026/11/21")).unwrap();
        let linked = l.records.iter().find(|r| r.file == "91-1.json").unwrap();
        assert!(!linked.regular);
        assert_eq!(st.runs(91, 0).unwrap().len(), 1);
        assert!(
            st.show(91, 0, &Pick::default(), &Report::default())
                .is_err(),
            "a symlink is not read"
        );
        let rep = st.verify();
        assert_eq!(rep.days[0].inserted, ["91-1.json (not a regular file)"]);
    }
}
