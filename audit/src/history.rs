//! Writes the run history the Epilog reads (`jobscope_archive::history`): `<index>/history/<uid>.json`
//! for every user with jobs in the last [`HISTORY_DAYS`], from the index.

use crate::index::{Index, ParquetEngine};
use crate::query::{Query, Report};
use crate::row::JobRow;
use anyhow::{Context, Result};
use arrow_array::{Array, Float64Array, Int64Array, StringArray};
use jobscope_archive::history::{Run, UserHistory, HISTORY_DAYS, HISTORY_DIR};
use std::collections::BTreeMap;
use std::path::Path;

/// Writes `<index>/history/<uid>.json` for every user with jobs in the last [`HISTORY_DAYS`].
pub fn write_history(idx: &Index) -> Result<usize> {
    let dir = idx.settings.dir.join(HISTORY_DIR);
    let eng = ParquetEngine::open(&idx.settings.dir)?;
    let now_s = (jobscope_common::now_unix_ms() / 1000) as i64;
    let mut q = Query::new(Report::Jobs);
    q.window.since_unix_s = Some(now_s - HISTORY_DAYS * 86_400);
    let batches = eng.scan(
        &q,
        &[
            "end_unix_ms",
            "uid",
            "name",
            "script_sha256",
            "mem_peak_bytes",
            "elapsed_s",
            "cpu_usage_s",
        ],
    )?;
    let mut users: BTreeMap<i64, UserHistory> = BTreeMap::new();
    for b in &batches {
        let i64s = |n: &str| -> Result<&Int64Array> {
            b.column_by_name(n)
                .and_then(|a| a.as_any().downcast_ref())
                .context("int column")
        };
        let f64s = |n: &str| -> Result<&Float64Array> {
            b.column_by_name(n)
                .and_then(|a| a.as_any().downcast_ref())
                .context("float column")
        };
        let (end, uid, peak) = (i64s("end_unix_ms")?, i64s("uid")?, i64s("mem_peak_bytes")?);
        let (el, cpu) = (f64s("elapsed_s")?, f64s("cpu_usage_s")?);
        let name: &StringArray = b
            .column_by_name("name")
            .and_then(|a| a.as_any().downcast_ref())
            .context("name")?;
        let script: &StringArray = b
            .column_by_name("script_sha256")
            .and_then(|a| a.as_any().downcast_ref())
            .context("script_sha256")?;
        for i in 0..b.num_rows() {
            if end.is_null(i) || uid.is_null(i) || el.is_null(i) {
                continue;
            }
            if name.is_null(i) && script.is_null(i) {
                continue;
            }
            if !q.window.contains_end_ms(end.value(i)) {
                continue;
            }
            let run = Run::of(
                end.value(i),
                (!peak.is_null(i)).then(|| peak.value(i) as u64),
                el.value(i),
                (!cpu.is_null(i)).then(|| cpu.value(i)),
            );
            users.entry(uid.value(i)).or_default().add(
                (!name.is_null(i)).then(|| name.value(i)),
                (!script.is_null(i)).then(|| script.value(i)),
                run,
            );
        }
    }
    let owner = crate::owner(idx.settings.admin_gid);
    if owner.is_some() {
        jobscope_common::fsutil::ensure_dir(&dir, 0o750, 0, idx.settings.admin_gid)?;
    } else {
        std::fs::create_dir_all(&dir)?;
    }
    let n = users.len();
    let since_ms = (now_s - HISTORY_DAYS * 86_400) * 1000;
    for (uid, h) in users.iter_mut() {
        h.trim(since_ms);
        write_user(&dir, *uid, h, owner)?;
    }
    // A user without a run in the window any more has no history: the file goes.
    for e in std::fs::read_dir(&dir).with_context(|| dir.display().to_string())? {
        let e = e.with_context(|| dir.display().to_string())?;
        let name = e.file_name();
        let uid = name
            .to_str()
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|u| u.parse::<i64>().ok());
        if uid.is_some_and(|u| !users.contains_key(&u)) {
            std::fs::remove_file(e.path()).with_context(|| e.path().display().to_string())?;
        }
    }
    jobscope_common::fsutil::write_atomic(
        &dir,
        WRITTEN_MARK,
        now_s.to_string().as_bytes(),
        0o640,
        owner,
    )?;
    Ok(n)
}

/// Written beside the users' files after each whole rewrite ([`write_history`]): its time. An
/// update that only added jobs then rewrites only their users' files ([`add_runs`]) while this is
/// under a day old; the daily whole rewrite drops the runs that left the window.
pub const WRITTEN_MARK: &str = "written-at.txt";

/// How old the last whole rewrite may be for an update to rewrite only the users with new jobs.
pub const REWRITE_ALL_AFTER_S: i64 = 86_400;

fn write_user(dir: &Path, uid: i64, h: &UserHistory, owner: Option<(u32, u32)>) -> Result<()> {
    jobscope_common::fsutil::write_atomic(
        dir,
        &format!("{uid}.json"),
        &serde_json::to_vec(h)?,
        0o640,
        owner,
    )?;
    Ok(())
}

/// When the history was last written whole (the [`WRITTEN_MARK`]), if it was.
fn last_whole_write_s(dir: &Path) -> Option<i64> {
    let b = jobscope_common::fsutil::read_limited(&dir.join(WRITTEN_MARK), 64).ok()?;
    std::str::from_utf8(&b).ok()?.trim().parse().ok()
}

/// What [`update_history`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryWrite {
    /// Every user's file, from the index.
    Whole(usize),
    /// Only the files of the users with new jobs (their new runs added to their files).
    Users(usize),
    /// Nothing changed since the last write.
    Unchanged,
}

/// Keeps the history current after an index update at the cost of what changed: the whole history
/// from the index after a rebuild, after any month was made again (rows may have gone), when the
/// last whole write is a day old or missing; otherwise, when the update only added jobs (`added`),
/// each of their users' files gets their new runs (read, added, trimmed to the window, written).
pub fn update_history(idx: &Index, added: Option<&[JobRow]>) -> Result<HistoryWrite> {
    let dir = idx.settings.dir.join(HISTORY_DIR);
    let now_s = (jobscope_common::now_unix_ms() / 1000) as i64;
    let fresh =
        last_whole_write_s(&dir).is_some_and(|t| (0..REWRITE_ALL_AFTER_S).contains(&(now_s - t)));
    let Some(added) = added.filter(|_| fresh) else {
        return Ok(HistoryWrite::Whole(write_history(idx)?));
    };
    let mut by_user: BTreeMap<u32, Vec<&JobRow>> = BTreeMap::new();
    for r in added {
        if let Some(uid) = r
            .uid
            .filter(|_| r.name.is_some() || r.script_sha256.is_some())
        {
            by_user.entry(uid).or_default().push(r);
        }
    }
    if by_user.is_empty() {
        return Ok(HistoryWrite::Unchanged);
    }
    let owner = crate::owner(idx.settings.admin_gid);
    let since_ms = (now_s - HISTORY_DAYS * 86_400) * 1000;
    for (uid, rows) in &by_user {
        // A file that cannot be read is made again from the index, whole, with everyone's.
        let Ok(h) = jobscope_archive::history::read_user(&idx.settings.dir, *uid) else {
            return Ok(HistoryWrite::Whole(write_history(idx)?));
        };
        let mut h = h.unwrap_or_default();
        for r in rows {
            // As the index stores and the whole rewrite reads them (`end_unix_ms` as Int64).
            let run = Run::of(
                r.end_unix_ms as i64,
                r.mem_peak_bytes,
                r.elapsed_s,
                r.cpu_usage_s,
            );
            h.add(r.name.as_deref(), r.script_sha256.as_deref(), run);
        }
        h.trim(since_ms);
        write_user(&dir, i64::from(*uid), &h, owner)?;
    }
    Ok(HistoryWrite::Users(by_user.len()))
}
