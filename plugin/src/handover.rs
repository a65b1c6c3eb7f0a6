//! job_prolog → extern step hand-over (the extern step sees neither user options nor GPU variables).
//!
//! `<handover_dir>/<jobid>.<node>.json`, root only, written atomically in job_prolog and read (then
//! removed) by the extern step. The directory is node-local tmpfs (`/run`), so a reboot clears it.

use jobscope_common::fsutil::{ensure_dir, is_safe_name, read_limited, write_atomic};
use jobscope_model::spool::Handover;
use std::path::{Path, PathBuf};

fn file_name(job_id: u32, node: &str) -> Option<String> {
    let n = format!("{job_id}.{node}.json");
    is_safe_name(&n).then_some(n)
}

pub fn write(dir: &Path, node: &str, h: &Handover) -> Result<PathBuf, String> {
    let name = file_name(h.job_id, node).ok_or_else(|| format!("unsafe node name {node:?}"))?;
    ensure_dir(dir, 0o700, 0, 0).map_err(|e| e.to_string())?;
    let json = serde_json::to_vec(h).map_err(|e| e.to_string())?;
    write_atomic(dir, &name, &json, 0o600, None).map_err(|e| e.to_string())
}

pub fn read(dir: &Path, job_id: u32, node: &str) -> Option<Handover> {
    let p = dir.join(file_name(job_id, node)?);
    let bytes = read_limited(&p, 64 * 1024).ok()?;
    let h: Handover = serde_json::from_slice(&bytes).ok()?;
    (h.job_id == job_id).then_some(h)
}

pub fn remove(dir: &Path, job_id: u32, node: &str) {
    if let Some(n) = file_name(job_id, node) {
        let _ = std::fs::remove_file(dir.join(n));
    }
}
