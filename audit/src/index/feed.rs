//! What the index feeds after each update (docs/audit.md): the peer distributions
//! ([`write_cohorts`], `<index>/cohorts.json`) and the run history ([`crate::history`]), the files
//! the Epilog reads through `jobscope_archive::{peer, history}`; and the OpenMetrics textfile
//! ([`write_metrics`]). [`after_update`] decides which of them an update calls for.

use super::{Index, ParquetEngine, UpdateReport};
use crate::query::{Engine, Query, Report};
use crate::{history, metrics, owner};
use anyhow::{Context, Result};
use arrow_array::{Array, Float64Array, StringArray};
use jobscope_archive::peer;
use jobscope_config::Config;
use std::collections::BTreeMap;

/// Writes `<index>/cohorts.json` (the peer distributions) from the index.
pub fn write_cohorts(cfg: &Config, idx: &Index) -> Result<usize> {
    let dir = &idx.settings.dir;
    let eng = ParquetEngine::open(dir)?;
    let now_s = (jobscope_common::now_unix_ms() / 1000) as i64;
    let window_days = cfg.audit.peer_window_days;
    let mut q = Query::new(Report::Jobs);
    q.window.since_unix_s = Some(now_s - i64::from(window_days) * 86_400);
    let batches = eng.scan(
        &q,
        &[
            "end_unix_ms",
            "cluster",
            "partition",
            "cpu_eff_pct",
            "mem_eff_pct",
        ],
    )?;
    // (cluster, partition) → (CPU efficiencies, memory efficiencies)
    type Effs = (Vec<f64>, Vec<f64>);
    let mut groups: BTreeMap<(Option<String>, Option<String>), Effs> = BTreeMap::new();
    for b in &batches {
        let col = |n: &str| b.column_by_name(n).context("column");
        let end = col("end_unix_ms")?
            .as_any()
            .downcast_ref::<arrow_array::Int64Array>()
            .context("end")?;
        let cl = col("cluster")?
            .as_any()
            .downcast_ref::<StringArray>()
            .context("cluster")?;
        let pa = col("partition")?
            .as_any()
            .downcast_ref::<StringArray>()
            .context("partition")?;
        let ce = col("cpu_eff_pct")?
            .as_any()
            .downcast_ref::<Float64Array>()
            .context("cpu")?;
        let me = col("mem_eff_pct")?
            .as_any()
            .downcast_ref::<Float64Array>()
            .context("mem")?;
        for i in 0..b.num_rows() {
            if end.is_null(i) || !q.window.contains_end_ms(end.value(i)) {
                continue;
            }
            let s = |a: &StringArray| (!a.is_null(i)).then(|| a.value(i).to_string());
            let g = groups.entry((s(cl), s(pa))).or_default();
            if !ce.is_null(i) {
                g.0.push(ce.value(i));
            }
            if !me.is_null(i) {
                g.1.push(me.value(i));
            }
        }
    }
    let cohorts = peer::Cohorts {
        generated_unix_s: now_s,
        window_days,
        cohorts: groups
            .into_iter()
            .map(|((cluster, partition), (c, m))| peer::Cohort {
                cluster,
                partition,
                cpu_eff_pct: peer::Dist::of(c),
                mem_eff_pct: peer::Dist::of(m),
            })
            .collect(),
    };
    let n = cohorts.cohorts.len();
    // Readable by the Epilog (root); aggregate only, but the index is the admin group's.
    jobscope_common::fsutil::write_atomic(
        dir,
        peer::COHORTS,
        &serde_json::to_vec(&cohorts)?,
        0o640,
        owner(idx.settings.admin_gid),
    )?;
    Ok(n)
}

/// Writes the OpenMetrics textfile (`audit.metrics_file`) from the index.
pub fn write_metrics(cfg: &Config, idx: &Index, path: &std::path::Path) -> Result<()> {
    let eng = ParquetEngine::open(&idx.settings.dir)?;
    let user = cfg.audit.metrics_user_label;
    let usage = eng.run(&metrics::usage_query(user))?;
    // The CPU-efficiency histograms per (cluster, partition[, user]): from the rollups.
    let hist: metrics::Histograms = eng
        .efficiency_histograms(&metrics::usage_query(user))?
        .into_iter()
        .filter(|(_, [cpu, _])| cpu.count() > 0)
        .map(|(k, [cpu, _])| {
            let mut le = [0u64; metrics::EFF_BUCKETS.len()];
            let mut below = 0;
            for (i, n) in le.iter_mut().enumerate() {
                below += cpu.jobs[i];
                *n = below;
            }
            let labels = k.into_iter().map(Option::unwrap_or_default).collect();
            (labels, le, cpu.count(), crate::rollup::float(cpu.pct_sum))
        })
        .collect();
    let text = metrics::render(&usage, &hist, user)?;
    let dir = path.parent().context("metrics_file has no directory")?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .context("metrics_file has no file name")?;
    // node_exporter runs as its own user: the textfile is world-readable (aggregates only).
    jobscope_common::fsutil::write_atomic(dir, name, text.as_bytes(), 0o644, owner(0))?;
    Ok(())
}

/// How often the peer distributions are made again while jobs come in: they are quantiles over
/// `audit.peer_window_days` (30 by default) of a partition's jobs, which an hour's jobs move by a
/// fraction of a percent, and making them reads the whole window from the index.
pub const COHORTS_REFRESH_S: i64 = 3600;
/// The longest the peer distributions go unwritten, so their window follows the calendar.
pub const COHORTS_MAX_AGE_S: i64 = 86_400;

/// How old `<index>/cohorts.json` is by its own `generated_unix_s` (None: missing or unreadable).
fn cohorts_age_s(idx: &Index, now_s: i64) -> Option<i64> {
    let c = peer::read(&idx.settings.dir)?;
    Some(now_s - c.generated_unix_s).filter(|a| *a >= 0)
}

/// What follows an index update (`rep`), at the cost of what it changed: the peer distributions
/// when jobs came or went and they are an hour old, or a day old in any case; the run history of
/// the users with new jobs (all users after a rebuild or once a day, [`history::update_history`]);
/// the metrics textfile. A failure here is reported, never undoes the update.
pub fn after_update(cfg: &Config, idx: &Index, rep: &UpdateReport) -> Vec<String> {
    let mut out = Vec::new();
    let now_s = (jobscope_common::now_unix_ms() / 1000) as i64;
    let changed = rep.rebuilt || !rep.months_rebuilt.is_empty() || rep.jobs_added > 0;
    let due = match cohorts_age_s(idx, now_s) {
        None => true,
        Some(age) => {
            age >= COHORTS_MAX_AGE_S || rep.rebuilt || (changed && age >= COHORTS_REFRESH_S)
        }
    };
    if due {
        match write_cohorts(cfg, idx) {
            Ok(n) => out.push(format!("peer distributions: {n} cohorts")),
            Err(e) => out.push(format!("peer distributions not written: {e:#}")),
        }
    } else {
        out.push("peer distributions: current (made again hourly while jobs come in)".into());
    }
    let added = if changed {
        rep.added.as_deref()
    } else {
        Some(&[][..])
    };
    match history::update_history(idx, added) {
        Ok(history::HistoryWrite::Whole(n)) => out.push(format!(
            "run history (by job name and batch script): {n} users"
        )),
        Ok(history::HistoryWrite::Users(n)) => out.push(format!(
            "run history (by job name and batch script): {n} users with new jobs"
        )),
        Ok(history::HistoryWrite::Unchanged) => out.push("run history: current".into()),
        Err(e) => out.push(format!("run history not written: {e:#}")),
    }
    if let Some(p) = &cfg.audit.metrics_file {
        match write_metrics(cfg, idx, p) {
            Ok(()) => out.push(format!("metrics written to {}", p.display())),
            Err(e) => out.push(format!("metrics not written: {e:#}")),
        }
    }
    out
}
