//! Live snapshots: how a job's owner sees a running job without reading the root-only spool. The
//! file and its rules are here, beneath the stages, because three of them use it: the plugin writes
//! it, the CLI (`jobscope show`/`top`) reads it, and the plugin or the Epilog removes it; how often
//! it is written is the sampler's (`sampler/src/snapshot.rs`).
//!
//! After every sample the job's sampler (in the extern slurmstepd, `plugin/src/glue.rs`) turns its
//! node's spool into a node summary, the same function the Epilog uses
//! ([`jobscope_model::summary::node::summarize_node_spool`]), and writes it here as
//! `<live_dir>/<job>.<node>.json`:
//! - `live_dir` is root's, mode 0711: others may open a name they know but list nothing, and
//!   nobody but root can create, rename or link anything in it, so no symlink or hard link can be
//!   planted for root to write through ([`crate::fsutil::ensure_dir`] refuses a symlinked or
//!   foreign directory).
//! - the file is written by root, atomically (a new `O_EXCL|O_NOFOLLOW` file, `fchown` to the job's
//!   user, mode 0400, `rename`), so the owner can read it and nobody else can.
//! - it is bounded ([`MAX_SNAPSHOT_BYTES`]; the timeline is already capped at 240 points).
//!
//! [`read`] is the owner's side: it refuses a symlink, a file in a directory that is not root's
//! or that others may write, a file not owned by the caller (root may read any), and anything
//! larger than the bound. The extern step removes the file when the job ends on the node.
use crate::fsutil::{ensure_dir, is_safe_name, read_limited, write_atomic, FsError};
use jobscope_model::summary::NodeSummary;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A snapshot larger than this is neither written nor read.
pub const MAX_SNAPSHOT_BYTES: u64 = 2 * 1024 * 1024;
/// The format of [`Snapshot`]; a reader refuses another.
pub const SNAPSHOT_FORMAT: u32 = 1;

/// One node's view of a running job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub format: u32,
    pub job_id: u32,
    pub node: String,
    pub uid: u32,
    /// When it was written (the node summary's figures end at its last sample).
    pub written_unix_ms: u64,
    pub summary: NodeSummary,
}

/// `<job>.<node>.json`; `None` for a node name that could not be a file name.
pub fn file_name(job_id: u32, node: &str) -> Option<String> {
    let name = format!("{job_id}.{node}.json");
    is_safe_name(&name).then_some(name)
}

/// Writes `snap` for its owner (`uid`, `gid`). Root only (it chowns).
pub fn write(live_dir: &Path, snap: &Snapshot, gid: u32) -> Result<PathBuf, FsError> {
    let name = file_name(snap.job_id, &snap.node).ok_or_else(|| FsError::Unsafe {
        path: live_dir.to_path_buf(),
        why: format!("node name {:?} is not a safe file name", snap.node),
    })?;
    let json = serde_json::to_vec(snap).map_err(|e| FsError::Unsafe {
        path: live_dir.join(&name),
        why: format!("cannot serialise: {e}"),
    })?;
    if json.len() as u64 > MAX_SNAPSHOT_BYTES {
        return Err(FsError::Unsafe {
            path: live_dir.join(&name),
            why: format!("{} bytes, over {MAX_SNAPSHOT_BYTES}", json.len()),
        });
    }
    ensure_dir(live_dir, 0o711, 0, 0)?;
    write_atomic(live_dir, &name, &json, 0o400, Some((snap.uid, gid)))
}

/// Removes the snapshot of `job_id` on `node` (the job ended there). Absent is fine.
pub fn remove(live_dir: &Path, job_id: u32, node: &str) {
    if let Some(name) = file_name(job_id, node) {
        let _ = std::fs::remove_file(live_dir.join(name));
    }
}

/// Why a snapshot could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadError {
    /// No snapshot of this job on this node (not running here, or not sampled yet).
    Absent,
    /// There is one, and it is not the caller's.
    NotYours,
    /// Something is wrong with the file or its directory (the text says what).
    Refused(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Absent => f.write_str("no live snapshot"),
            ReadError::NotYours => f.write_str("the job is not yours"),
            ReadError::Refused(why) => write!(f, "live snapshot refused: {why}"),
        }
    }
}

/// Reads the snapshot of `job_id` on `node` as `caller_uid` (see the module docs for the checks).
pub fn read(
    live_dir: &Path,
    job_id: u32,
    node: &str,
    caller_uid: u32,
) -> Result<Snapshot, ReadError> {
    let name =
        file_name(job_id, node).ok_or_else(|| ReadError::Refused(format!("bad node {node:?}")))?;
    let dir = std::fs::symlink_metadata(live_dir).map_err(|_| ReadError::Absent)?;
    if !dir.is_dir() || dir.uid() != 0 || dir.mode() & 0o022 != 0 {
        return Err(ReadError::Refused(format!(
            "{} is not root's private directory",
            live_dir.display()
        )));
    }
    let path = live_dir.join(&name);
    let bytes = match read_limited(&path, MAX_SNAPSHOT_BYTES) {
        Ok(b) => b,
        Err(FsError::Io { source, .. }) => {
            return Err(match source.kind() {
                std::io::ErrorKind::NotFound => ReadError::Absent,
                std::io::ErrorKind::PermissionDenied => ReadError::NotYours,
                // ELOOP: a symlink where the file should be.
                _ => ReadError::Refused(format!("{}: {source}", path.display())),
            });
        }
        Err(e) => return Err(ReadError::Refused(e.to_string())),
    };
    // Opened: it must be the caller's (root reads any). A file someone made readable to all is
    // still not shown to another user.
    let md = std::fs::symlink_metadata(&path).map_err(|_| ReadError::Absent)?;
    if caller_uid != 0 && md.uid() != caller_uid {
        return Err(ReadError::NotYours);
    }
    let snap: Snapshot = serde_json::from_slice(&bytes)
        .map_err(|e| ReadError::Refused(format!("{}: {e}", path.display())))?;
    if snap.format != SNAPSHOT_FORMAT {
        return Err(ReadError::Refused(format!(
            "{}: format {} (this jobscope reads {SNAPSHOT_FORMAT})",
            path.display(),
            snap.format
        )));
    }
    if snap.job_id != job_id || snap.node != node || (caller_uid != 0 && snap.uid != caller_uid) {
        return Err(ReadError::Refused(format!(
            "{}: names job {} on {} of uid {}",
            path.display(),
            snap.job_id,
            snap.node,
            snap.uid
        )));
    }
    Ok(snap)
}

/// Summarises the node spool directory `spool_job_dir` now, as the Epilog would at this moment.
pub fn from_spool(
    spool_job_dir: &Path,
    job_id: u32,
    node: &str,
    uid: u32,
    gpu: &jobscope_model::gpu::summary::GpuSummaryParams,
) -> Snapshot {
    let now = crate::now_unix_ms();
    let spool = crate::spool::read_node_dir(spool_job_dir);
    let mut summary = jobscope_model::summary::node::summarize_node_spool(&spool, node, now, gpu);
    summary.job_id = job_id;
    summary.uid = uid;
    Snapshot {
        format: SNAPSHOT_FORMAT,
        job_id,
        node: node.to_string(),
        uid,
        written_unix_ms: now,
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn snap(uid: u32) -> Snapshot {
        let d = tempfile::tempdir().unwrap();
        from_spool(d.path(), 7, "n1", uid, &Default::default())
    }

    fn am_root() -> bool {
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn names_are_safe_or_none() {
        assert_eq!(file_name(7, "n1").as_deref(), Some("7.n1.json"));
        assert_eq!(file_name(7, "../etc"), None);
        assert_eq!(file_name(7, "a/b"), None);
    }

    /// Root writes for uid 1001: the file is 0400 and 1001's, the directory 0711 and root's; the
    /// owner reads it back; another uid is refused; a symlink in its place is refused.
    #[test]
    fn owner_only_file_in_roots_directory() {
        if !am_root() {
            eprintln!("skipped: needs root (chown)");
            return;
        }
        let base = tempfile::tempdir().unwrap();
        let live = base.path().join("live");
        let p = write(&live, &snap(1001), 1001).unwrap();
        let md = std::fs::metadata(&p).unwrap();
        assert_eq!(
            (md.uid(), md.gid(), md.mode() & 0o7777),
            (1001, 1001, 0o400)
        );
        let dmd = std::fs::metadata(&live).unwrap();
        assert_eq!((dmd.uid(), dmd.mode() & 0o7777), (0, 0o711));
        let back = read(&live, 7, "n1", 1001).unwrap();
        assert_eq!((back.job_id, back.uid, back.node.as_str()), (7, 1001, "n1"));
        assert_eq!(read(&live, 7, "n1", 1002), Err(ReadError::NotYours));
        assert_eq!(read(&live, 8, "n1", 1001), Err(ReadError::Absent));
        // Rewritten in place: still one file, still the owner's.
        write(&live, &snap(1001), 1001).unwrap();
        assert_eq!(std::fs::read_dir(&live).unwrap().count(), 1);

        // A symlink where the snapshot should be (as if planted): not followed.
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &p).unwrap();
        assert!(
            matches!(read(&live, 7, "n1", 1001), Err(ReadError::Refused(_))),
            "{:?}",
            read(&live, 7, "n1", 1001)
        );
        // Written again, the link is replaced by a real file; the link's target is untouched.
        let before = std::fs::read("/etc/hostname").unwrap();
        write(&live, &snap(1001), 1001).unwrap();
        assert!(!std::fs::symlink_metadata(&p)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read("/etc/hostname").unwrap(), before);

        // A directory others may write to is not trusted.
        std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            read(&live, 7, "n1", 1001),
            Err(ReadError::Refused(_))
        ));
        remove(&live, 7, "n1");
        std::fs::set_permissions(&live, std::fs::Permissions::from_mode(0o711)).unwrap();
        assert_eq!(read(&live, 7, "n1", 1001), Err(ReadError::Absent));
    }

    #[test]
    fn a_snapshot_of_an_empty_spool_is_still_a_summary() {
        let s = snap(5);
        assert_eq!(s.summary.job_id, 7);
        assert_eq!(s.summary.uid, 5);
        assert_eq!(s.summary.quality.samples, 0);
    }
}
