//! The read side of the spool on disk: one file ([`read_spool_file`]), `gpu.jsc`
//! ([`read_gpu_file`]) and one node's directory ([`read_node_dir`]), and the record of what the
//! rules over running jobs did there ([`write_interventions`]). Reading refuses symlinks and
//! oversized files; decoding is pure (`jobscope_model::spool`, `jobscope_model::gpu::spool`). The
//! writers are the sampler's (`jobscope_sampler::spool::writer`, `jobscope_sampler::gpu::spool`).

use crate::fsutil::FsError;
use jobscope_model::gpu::spool::{decode_gpu_file, GpuSeries, DEFAULT_MAX_GPU_FILE_BYTES};
use jobscope_model::gpu::GPU_FILE_NAME;
use jobscope_model::spool::{
    decode_file, SpoolError, SpoolFile, StepsNotRecorded, STEPS_NOT_RECORDED_FILE,
    STEPS_NOT_RECORDED_MAX_BYTES,
};
use jobscope_model::summary::node::NodeSpool;
use jobscope_model::watch::{Intervention, MAX_INTERVENTIONS, WATCH_FILE, WATCH_FILE_MAX_BYTES};
use std::path::Path;

/// Files read from one spool directory at most (a directory is per job and node: a few steps).
const MAX_FILES: usize = 4096;

/// Left in a node's spool directory by the plugin when it did not spool at all (the free-space
/// floor): one line saying why, so the report's data notes give the reason, not only slurmd's log.
pub const NOT_SPOOLED_FILE: &str = "not-spooled.txt";

/// Reads and decodes one spool file (refusing symlinks and oversized files).
pub fn read_spool_file(path: &Path) -> Result<SpoolFile, SpoolError> {
    let bytes =
        crate::fsutil::read_limited(path, 64 * 1024 * 1024 + 4096).map_err(|e| match e {
            FsError::Io { path, source } => SpoolError::Io { path, source },
            FsError::Unsafe { path, why } => SpoolError::Unsafe { path, what: why },
        })?;
    decode_file(&bytes, path)
}

/// Reads and decodes `gpu.jsc` (refusing symlinks and oversized files).
pub fn read_gpu_file(path: &Path) -> Result<GpuSeries, SpoolError> {
    let bytes =
        crate::fsutil::read_limited(path, DEFAULT_MAX_GPU_FILE_BYTES * 4).map_err(|e| match e {
            FsError::Io { path, source } => SpoolError::Io { path, source },
            FsError::Unsafe { path, why } => SpoolError::Unsafe { path, what: why },
        })?;
    decode_gpu_file(&bytes, path)
}

/// Reads one node-job spool directory (`<spool_dir>/<job>.<node>/`): `job.jsc`, the steps'
/// `step_*.jsc` and `gpu.jsc`. What cannot be read is listed in `problems`, never fatal.
pub fn read_node_dir(dir: &Path) -> NodeSpool {
    let mut spool = NodeSpool::default();
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            spool
                .problems
                .push(format!("{}: not a directory; ignored", dir.display()));
            return spool;
        }
        Err(e) => {
            spool.problems.push(format!("{}: {e}", dir.display()));
            return spool;
        }
    }
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    if names.iter().any(|n| n == NOT_SPOOLED_FILE) {
        if let Ok(b) = crate::fsutil::read_limited(&dir.join(NOT_SPOOLED_FILE), 4096) {
            let why: String = String::from_utf8_lossy(&b)
                .chars()
                .filter(|c| !c.is_control())
                .take(300)
                .collect();
            spool
                .problems
                .push(format!("not sampled on this node: {why}"));
        }
    }
    if names.iter().any(|n| n == STEPS_NOT_RECORDED_FILE) {
        let p = dir.join(STEPS_NOT_RECORDED_FILE);
        // The plugin stops appending one short line past the bound.
        match crate::fsutil::read_limited(&p, STEPS_NOT_RECORDED_MAX_BYTES + 64) {
            Ok(b) => spool.steps_not_recorded = Some(StepsNotRecorded::parse(&b)),
            Err(e) => spool.problems.push(e.to_string()),
        }
    }
    if names.iter().any(|n| n == WATCH_FILE) {
        match read_interventions(dir) {
            Ok(v) => spool.interventions = v,
            Err(e) => spool.problems.push(e),
        }
    }
    for name in names.iter().take(MAX_FILES) {
        if !name.ends_with(".jsc") || name.starts_with('.') {
            continue;
        }
        let p = dir.join(name);
        if name == GPU_FILE_NAME {
            // Same framing, its own series (per-GPU buckets).
            match read_gpu_file(&p) {
                Ok(g) => spool.gpu = Some(g),
                Err(e) => spool.problems.push(e.to_string()),
            }
            continue;
        }
        match read_spool_file(&p) {
            Ok(f) if name == "job.jsc" => spool.series = Some(f),
            Ok(f) => spool.steps.push(f),
            Err(e) => spool.problems.push(e.to_string()),
        }
    }
    spool
}

/// The interventions recorded in a job's spool directory `dir` ([`WATCH_FILE`]); none when there
/// is no such file. An unreadable or malformed file is an error naming it (never a panic).
pub fn read_interventions(dir: &Path) -> Result<Vec<Intervention>, String> {
    let p = dir.join(WATCH_FILE);
    let bytes = match crate::fsutil::read_limited(&p, WATCH_FILE_MAX_BYTES) {
        Ok(b) => b,
        Err(FsError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(e.to_string()),
    };
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", p.display()))
}

/// Records `all` (the node's whole list, oldest first, at most [`MAX_INTERVENTIONS`]) in the job's
/// spool directory `dir`: root's file, 0600, written atomically so a reader sees the old list or
/// the new one. The directory must be root's (the plugin made it).
pub fn write_interventions(dir: &Path, all: &[Intervention]) -> Result<(), FsError> {
    let keep = &all[all.len().saturating_sub(MAX_INTERVENTIONS)..];
    let json = serde_json::to_vec_pretty(keep).map_err(|e| FsError::Unsafe {
        path: dir.join(WATCH_FILE),
        why: format!("cannot serialise: {e}"),
    })?;
    let md = std::fs::symlink_metadata(dir).map_err(|source| FsError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid cannot fail.
        if !md.is_dir() || md.uid() != unsafe { libc::geteuid() } || md.mode() & 0o022 != 0 {
            return Err(FsError::Unsafe {
                path: dir.to_path_buf(),
                why: "not this user's private directory".into(),
            });
        }
    }
    crate::fsutil::write_atomic(dir, WATCH_FILE, &json, 0o600, None).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_nothing_was_spooled_becomes_a_problem() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join(NOT_SPOOLED_FILE),
            "/var/spool/jobscope: only 100 bytes free\n",
        )
        .unwrap();
        let s = read_node_dir(d.path());
        assert!(s.series.is_none());
        assert_eq!(
            s.problems,
            vec!["not sampled on this node: /var/spool/jobscope: only 100 bytes free".to_string()]
        );
    }

    fn intervention(rule: &str, at: u64) -> Intervention {
        use jobscope_model::watch::*;
        Intervention {
            rule: rule.into(),
            action: ActionKind::Warned,
            at_unix_ms: at,
            node: "n1".into(),
            finding: Finding {
                kind: RuleKind::GpuIdle,
                since_unix_ms: 1,
                seen_until_unix_ms: 2,
                subjects: vec!["GPU 1".into()],
                value_pct: 0.0,
                mem_bytes: None,
                mem_limit_bytes: None,
            },
            mailed: true,
            error: None,
        }
    }

    /// Written, read back with the spool; the list is cut to its newest entries; a malformed file
    /// is a problem of the spool, not a panic and not an empty record passed off as fine.
    #[test]
    fn interventions_round_trip_through_the_spool_directory() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(read_interventions(d.path()), Ok(vec![]));
        let all: Vec<_> = (0..MAX_INTERVENTIONS as u64 + 3)
            .map(|i| intervention("idle", i))
            .collect();
        write_interventions(d.path(), &all).unwrap();
        let back = read_node_dir(d.path()).interventions;
        assert_eq!(back.len(), MAX_INTERVENTIONS);
        assert_eq!(back[0].at_unix_ms, 3);
        let md = std::fs::metadata(d.path().join(WATCH_FILE)).unwrap();
        assert_eq!(md.permissions().mode() & 0o777, 0o600);
        std::fs::write(d.path().join(WATCH_FILE), b"[{").unwrap();
        let s = read_node_dir(d.path());
        assert!(s.interventions.is_empty());
        assert!(s.problems[0].contains(WATCH_FILE), "{:?}", s.problems);
        // A directory others may write is refused.
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(write_interventions(d.path(), &all).is_err());
    }

    #[test]
    fn a_missing_or_odd_directory_is_a_problem_not_a_panic() {
        let d = tempfile::tempdir().unwrap();
        let s = read_node_dir(&d.path().join("nope"));
        assert!(s.series.is_none() && s.problems.len() == 1);
        std::fs::write(d.path().join("file"), b"x").unwrap();
        let s = read_node_dir(&d.path().join("file"));
        assert!(s.problems[0].contains("not a directory"));
    }
}
