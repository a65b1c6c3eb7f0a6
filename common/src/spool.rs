//! The read side of the spool on disk: one file ([`read_spool_file`]), `gpu.jsc`
//! ([`read_gpu_file`]) and one node's directory ([`read_node_dir`]). Reading refuses symlinks and
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
