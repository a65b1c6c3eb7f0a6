//! Writes the run history the Epilog reads (`jobscope_archive::history`): `<index>/history/<uid>.json`
//! for every user with jobs in the last [`HISTORY_DAYS`], from the index.

use crate::index::{Index, ParquetEngine};
use crate::query::{Query, Report};
use anyhow::{Context, Result};
use arrow_array::{Array, Float64Array, Int64Array, StringArray};
use jobscope_archive::history::{bound, Run, UserHistory, HISTORY_DAYS, HISTORY_DIR};
use std::collections::BTreeMap;

/// Writes `<index>/history/<uid>.json` for every user with jobs in the last [`HISTORY_DAYS`].
pub fn write_history(idx: &Index) -> Result<usize> {
    let dir = idx.settings.dir.join(HISTORY_DIR);
    let eng = ParquetEngine::open(&idx.settings.dir)?;
    let now_s = (jobscope_sampler::sampler::now_unix_ms() / 1000) as i64;
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
            let elapsed_s = el.value(i);
            let run = Run {
                end_unix_ms: end.value(i),
                mem_peak_bytes: (!peak.is_null(i)).then(|| peak.value(i) as u64),
                elapsed_s,
                busy_cores: (!cpu.is_null(i) && elapsed_s > 0.0).then(|| cpu.value(i) / elapsed_s),
            };
            let h = users.entry(uid.value(i)).or_default();
            if !name.is_null(i) {
                h.names
                    .entry(name.value(i).to_string())
                    .or_default()
                    .push(run);
            }
            if !script.is_null(i) {
                h.scripts
                    .entry(script.value(i).to_string())
                    .or_default()
                    .push(run);
            }
        }
    }
    let owner = (unsafe { libc::geteuid() } == 0).then_some((0, idx.settings.admin_gid));
    if owner.is_some() {
        jobscope_sampler::fsutil::ensure_dir(&dir, 0o750, 0, idx.settings.admin_gid)?;
    } else {
        std::fs::create_dir_all(&dir)?;
    }
    let n = users.len();
    for (uid, mut h) in users {
        bound(&mut h.names);
        bound(&mut h.scripts);
        jobscope_sampler::fsutil::write_atomic(
            &dir,
            &format!("{uid}.json"),
            &serde_json::to_vec(&h)?,
            0o640,
            owner,
        )?;
    }
    Ok(n)
}
