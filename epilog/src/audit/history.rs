//! What the Epilog adds from history, at a bounded cost: the peer percentile (from
//! `<index>/cohorts.json`, see [`super::peer`]) and right-sizing from the user's earlier runs of the
//! same job name (from `<index>/history/<uid>.json`, written here after each index update: per job
//! name, the last [`MAX_RUNS`] runs of the last [`HISTORY_DAYS`] days). The Epilog reads two small
//! files; with no index, or thin history, it adds nothing. Nothing here can fail a report.
//!
//! Same name only: the archived summary has no batch-script hash yet (docs/audit.md says why).

use super::peer::{Cohorts, COHORTS, MAX_COHORTS_BYTES};
use super::query::{Query, Report};
use crate::index::{Index, ParquetEngine};
use anyhow::{Context, Result};
use arrow_array::{Array, Float64Array, Int64Array, StringArray};
use jobscope_core::config::Config;
use jobscope_core::summary::analysis::{mem_flag_mib, time_flag_s, HistoryAdvice, Request};
use jobscope_core::summary::JobSummary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const HISTORY_DIR: &str = "history";
pub const HISTORY_DAYS: i64 = 180;
pub const MAX_RUNS: usize = 50;
/// Job names kept per user (the most recently run).
pub const MAX_NAMES: usize = 500;
const MAX_HISTORY_BYTES: u64 = 8 * 1024 * 1024;

/// One earlier run: end time, memory peak, elapsed, mean busy cores.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub end_unix_ms: i64,
    pub mem_peak_bytes: Option<u64>,
    pub elapsed_s: f64,
    pub busy_cores: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UserHistory {
    /// Job name → runs, oldest first.
    pub names: BTreeMap<String, Vec<Run>>,
}

/// Writes `<index>/history/<uid>.json` for every user with jobs in the last [`HISTORY_DAYS`].
pub fn write_history(idx: &Index) -> Result<usize> {
    let dir = idx.settings.dir.join(HISTORY_DIR);
    let eng = ParquetEngine::open(&idx.settings.dir)?;
    let now_s = (jobscope_core::sampler::now_unix_ms() / 1000) as i64;
    let mut q = Query::new(Report::Jobs);
    q.window.since_unix_s = Some(now_s - HISTORY_DAYS * 86_400);
    let batches = eng.scan(
        &q,
        &[
            "end_unix_ms",
            "uid",
            "name",
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
        for i in 0..b.num_rows() {
            if end.is_null(i) || uid.is_null(i) || name.is_null(i) || el.is_null(i) {
                continue;
            }
            if !q.window.contains_end_ms(end.value(i)) {
                continue;
            }
            let elapsed_s = el.value(i);
            users
                .entry(uid.value(i))
                .or_default()
                .names
                .entry(name.value(i).to_string())
                .or_default()
                .push(Run {
                    end_unix_ms: end.value(i),
                    mem_peak_bytes: (!peak.is_null(i)).then(|| peak.value(i) as u64),
                    elapsed_s,
                    busy_cores: (!cpu.is_null(i) && elapsed_s > 0.0)
                        .then(|| cpu.value(i) / elapsed_s),
                });
        }
    }
    let owner = (unsafe { libc::geteuid() } == 0).then_some((0, idx.settings.admin_gid));
    if owner.is_some() {
        jobscope_core::fsutil::ensure_dir(&dir, 0o750, 0, idx.settings.admin_gid)?;
    } else {
        std::fs::create_dir_all(&dir)?;
    }
    let n = users.len();
    for (uid, mut h) in users {
        for runs in h.names.values_mut() {
            runs.sort_by_key(|r| r.end_unix_ms);
            let cut = runs.len().saturating_sub(MAX_RUNS);
            runs.drain(..cut);
        }
        if h.names.len() > MAX_NAMES {
            let mut by_last: Vec<(i64, String)> = h
                .names
                .iter()
                .map(|(k, v)| (v.last().map_or(0, |r| r.end_unix_ms), k.clone()))
                .collect();
            by_last.sort_unstable_by(|a, b| b.cmp(a));
            let keep: std::collections::BTreeSet<String> = by_last
                .into_iter()
                .take(MAX_NAMES)
                .map(|(_, k)| k)
                .collect();
            h.names.retain(|k, _| keep.contains(k));
        }
        jobscope_core::fsutil::write_atomic(
            &dir,
            &format!("{uid}.json"),
            &serde_json::to_vec(&h)?,
            0o640,
            owner,
        )?;
    }
    Ok(n)
}

/// The 95th percentile (nearest rank) of `v`.
fn p95(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((0.95 * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

/// Advice from `runs` (earlier runs and this one), when there are at least `min_runs`. Pure.
pub fn advice_from_runs(
    name: &str,
    runs: &[Run],
    min_runs: u32,
    cfg: &jobscope_core::config::Report,
) -> Option<HistoryAdvice> {
    if runs.len() < min_runs as usize {
        return None;
    }
    let mem = p95(runs
        .iter()
        .filter_map(|r| r.mem_peak_bytes)
        .map(|b| b as f64)
        .collect());
    let elapsed = p95(runs.iter().map(|r| r.elapsed_s).collect());
    let busy = p95(runs.iter().filter_map(|r| r.busy_cores).collect());
    Some(HistoryAdvice {
        name: name.to_string(),
        runs: runs.len() as u32,
        mem_peak_p95_bytes: mem.map(|m| m as u64),
        mem_request: mem
            .map(|m| Request::MemMib(mem_flag_mib(m * (1.0 + cfg.mem_headroom_pct / 100.0)))),
        elapsed_p95_s: elapsed,
        time_request: elapsed
            .map(|e| Request::TimeS(time_flag_s(e * (1.0 + cfg.time_margin_pct / 100.0)))),
        busy_cores_p95: busy,
        cpus_request: busy.map(|b| Request::CpusPerTask((b.ceil() as u32).max(1))),
    })
}

fn read_json<T: serde::de::DeserializeOwned>(path: &std::path::Path, max: u64) -> Option<T> {
    let b = jobscope_core::fsutil::read_limited(path, max).ok()?;
    serde_json::from_slice(&b).ok()
}

/// Adds the peer percentile and the history-based advice to `s`'s analysis (the Epilog, before
/// archiving). Reads at most two small files; any problem means nothing is added.
pub fn enrich(cfg: &Config, s: &mut JobSummary) {
    let dir = cfg.audit.index_dir(&cfg.paths.archive_dir);
    let Some(a) = s.analysis.as_mut() else { return };
    if a.insufficient_data {
        return;
    }
    if let Some(c) = read_json::<Cohorts>(&dir.join(COHORTS), MAX_COHORTS_BYTES) {
        a.peers = c.rank(
            s.cluster.as_deref(),
            s.partition.as_deref(),
            s.efficiency.cpu_pct,
            s.efficiency.mem_pct,
            cfg.audit.peer_min_jobs,
        );
    }
    let (Some(uid), Some(name)) = (s.uid, s.name.as_deref()) else {
        return;
    };
    let Some(h) = read_json::<UserHistory>(
        &dir.join(HISTORY_DIR).join(format!("{uid}.json")),
        MAX_HISTORY_BYTES,
    ) else {
        return;
    };
    let end = s.end_unix_ms as i64;
    // Earlier runs (a run the index already holds with this end time is this job: not twice).
    let mut runs: Vec<Run> = h
        .names
        .get(name)
        .map(|v| v.iter().filter(|r| r.end_unix_ms != end).copied().collect())
        .unwrap_or_default();
    if runs.is_empty() {
        return;
    }
    runs.push(Run {
        end_unix_ms: end,
        mem_peak_bytes: s.mem.peak_bytes,
        elapsed_s: s.elapsed_s,
        busy_cores: s
            .cpu
            .usage_s
            .filter(|_| s.elapsed_s > 0.0)
            .map(|c| c / s.elapsed_s),
    });
    a.history = advice_from_runs(name, &runs, cfg.audit.history_min_runs, &cfg.report);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(peak_mib: u64, elapsed_s: f64, busy: f64) -> Run {
        Run {
            end_unix_ms: 0,
            mem_peak_bytes: Some(peak_mib << 20),
            elapsed_s,
            busy_cores: Some(busy),
        }
    }

    #[test]
    fn advice_rests_on_the_p95_of_all_runs() {
        let cfg = jobscope_core::config::Report::default();
        // 20 runs: peaks 100..=2000 MiB; p95 by nearest rank is the 19th, 1900 MiB.
        let runs: Vec<Run> = (1..=20)
            .map(|i| run(i * 100, 600.0 + i as f64, 1.5))
            .collect();
        assert!(advice_from_runs("x", &runs[..2], 3, &cfg).is_none());
        let a = advice_from_runs("x", &runs, 3, &cfg).unwrap();
        assert_eq!(a.runs, 20);
        assert_eq!(a.mem_peak_p95_bytes, Some(1900 << 20));
        let want_mib = mem_flag_mib(1900.0 * 1048576.0 * (1.0 + cfg.mem_headroom_pct / 100.0));
        assert_eq!(a.mem_request, Some(Request::MemMib(want_mib)));
        assert_eq!(a.elapsed_p95_s, Some(619.0));
        assert_eq!(a.cpus_request, Some(Request::CpusPerTask(2)));
    }
}
