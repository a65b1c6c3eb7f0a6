//! The archive: one schema-versioned JSON file per job, for admins, plus a copy each owner can read.
//!
//! ```text
//! <archive>/YYYY/MM/DD/<jobid>.json      0640 root:<admin_group>   (dirs 0750 root:<admin_group>)
//! <archive>/users/<uid>/<jobid>.json     0400 <uid>                (dirs 0711 root: not listable)
//! ```
//! Only root and the admin group can read the dated tree. A user reads their own jobs through the
//! per-uid copy, which no other user can open (mode 0400, owned by the job's uid). Directories are
//! created root-owned and checked with lstat; files are written with `fsutil::write_atomic`.

use anyhow::{bail, Context, Result};
use jobscope_core::fsutil::{ensure_dir, write_atomic};
use jobscope_core::summary::JobSummary;
use std::path::{Path, PathBuf};

/// Looks up a group id by name (`getgrnam_r`).
pub fn group_id(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::group = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; buf outlives it.
    let rc = unsafe {
        libc::getgrnam_r(
            c.as_ptr(),
            &mut grp,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    (rc == 0 && !result.is_null()).then_some(grp.gr_gid)
}

/// `YYYY/MM/DD` of a Unix time in ms (UTC).
pub fn date_path(unix_ms: u64) -> String {
    let days = (unix_ms / 1000 / 86_400) as i64;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}/{m:02}/{d:02}")
}

/// Howard Hinnant's days → civil date (proleptic Gregorian, UTC).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

pub struct Archived {
    pub path: PathBuf,
    pub user_copy: Option<PathBuf>,
    /// The exact bytes written (for the manifest digest).
    pub bytes: Vec<u8>,
}

/// Writes the job summary into the archive (admin copy first; it is the record), then the owner's copy.
pub fn write(archive_dir: &Path, admin_group: &str, s: &JobSummary) -> Result<Archived> {
    let gid = group_id(admin_group)
        .with_context(|| format!("archive.admin_group {admin_group:?} does not exist"))?;
    let json = serde_json::to_vec_pretty(s)?;
    ensure_dir(archive_dir, 0o755, 0, 0)?;
    let mut dir = archive_dir.to_path_buf();
    for part in date_path(s.end_unix_ms).split('/') {
        dir.push(part);
        ensure_dir(&dir, 0o750, 0, gid)?;
    }
    let name = format!("{}.json", s.job_id);
    let path = write_atomic(&dir, &name, &json, 0o640, Some((0, gid)))?;
    let user_copy = if s.uid != u32::MAX && s.uid != 0 {
        let users = archive_dir.join("users");
        ensure_dir(&users, 0o711, 0, 0)?;
        let mine = users.join(s.uid.to_string());
        ensure_dir(&mine, 0o711, 0, 0)?;
        Some(write_atomic(&mine, &name, &json, 0o400, Some((s.uid, 0)))?)
    } else {
        None
    };
    Ok(Archived {
        path,
        user_copy,
        bytes: json,
    })
}

/// Finds job `job_id` for the caller: root (or a reader of the dated tree) may read any job; anyone else
/// only their own copy. Returns the file's bytes.
pub fn find(archive_dir: &Path, job_id: u32, caller_uid: u32) -> Result<Vec<u8>> {
    let name = format!("{job_id}.json");
    let read = |p: &Path| jobscope_core::fsutil::read_limited(p, 64 * 1024 * 1024);
    if caller_uid != 0 {
        let p = archive_dir
            .join("users")
            .join(caller_uid.to_string())
            .join(&name);
        return match read(&p) {
            Ok(b) => Ok(b),
            Err(_) => bail!("job {job_id}: no report of yours in {} (only the job's owner and administrators can see a job's report)", archive_dir.display()),
        };
    }
    // Root: newest dated copy wins (job ids can be reused after a SLURM state reset).
    let mut found: Option<PathBuf> = None;
    for y in sorted_dirs(archive_dir)
        .into_iter()
        .rev()
        .filter(|d| is_num_dir(d, 4))
    {
        for m in sorted_dirs(&y).into_iter().rev() {
            for d in sorted_dirs(&m).into_iter().rev() {
                let p = d.join(&name);
                if p.is_file() {
                    found = Some(p);
                    break;
                }
            }
            if found.is_some() {
                break;
            }
        }
        if found.is_some() {
            break;
        }
    }
    match found {
        Some(p) => Ok(read(&p)?),
        None => bail!("job {job_id}: not in the archive {}", archive_dir.display()),
    }
}

/// Retention: removes whole day directories (`YYYY/MM/DD`, with their MANIFEST, so verification of
/// the remaining days is unaffected) older than `retention_days`, and users' copies whose file is
/// older. `retention_days == 0` keeps everything. Returns (days removed, user copies removed).
pub fn prune(archive_dir: &Path, retention_days: u32, now_ms: u64) -> Result<(usize, usize)> {
    if retention_days == 0 {
        return Ok((0, 0));
    }
    let cutoff_ms = now_ms.saturating_sub(retention_days as u64 * 86_400_000);
    let cutoff = date_path(cutoff_ms);
    let mut days = 0;
    for y in sorted_dirs(archive_dir)
        .into_iter()
        .filter(|d| is_num_dir(d, 4))
    {
        for m in sorted_dirs(&y) {
            for d in sorted_dirs(&m) {
                let rel = d
                    .strip_prefix(archive_dir)
                    .map(|r| r.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if rel.len() == 10 && rel < cutoff {
                    std::fs::remove_dir_all(&d)
                        .with_context(|| format!("remove {}", d.display()))?;
                    days += 1;
                }
            }
            let _ = std::fs::remove_dir(&m);
        }
        let _ = std::fs::remove_dir(&y);
    }
    let mut copies = 0;
    for u in sorted_dirs(&archive_dir.join("users")) {
        for f in std::fs::read_dir(&u).into_iter().flatten().flatten() {
            let old = f
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .is_some_and(|d| (d.as_millis() as u64) < cutoff_ms);
            if old && std::fs::remove_file(f.path()).is_ok() {
                copies += 1;
            }
        }
    }
    Ok((days, copies))
}

fn is_num_dir(p: &Path, len: usize) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.len() == len && n.bytes().all(|b| b.is_ascii_digit()))
}

fn sorted_dirs(p: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(p)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(date_path(0), "1970/01/01");
        assert_eq!(date_path(1_795_305_466_000), "2026/11/21");
        assert_eq!(date_path(951_782_400_000), "2000/02/29");
    }

    #[test]
    fn prune_removes_only_old_days() {
        let d = tempfile::tempdir().unwrap();
        let now = 1_795_305_466_000u64; // 2026-11-21
        for day in ["2026/01/05", "2026/11/01", "2026/11/21"] {
            std::fs::create_dir_all(d.path().join(day)).unwrap();
            std::fs::write(d.path().join(day).join("1.json"), b"{}").unwrap();
        }
        assert_eq!(
            prune(d.path(), 0, now).unwrap(),
            (0, 0),
            "0 keeps everything"
        );
        let (days, _) = prune(d.path(), 30, now).unwrap();
        assert_eq!(days, 1);
        assert!(!d.path().join("2026/01").exists());
        assert!(
            d.path().join("2026/11/01/1.json").exists()
                && d.path().join("2026/11/21/1.json").exists()
        );
    }

    #[test]
    fn root_group_exists() {
        assert_eq!(group_id("root"), Some(0));
        assert_eq!(group_id("no-such-group-xyz"), None);
    }
}
