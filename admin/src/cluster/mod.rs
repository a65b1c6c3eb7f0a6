//! The cluster report (`jobscope audit report`, docs/audit.md "The cluster report"): a window of
//! the whole cluster (or of some accounts or partitions) for admins, as one self-contained HTML
//! page, a text, and a mail with both.
//!
//! - here: what it shows, each figure asked of the audit's own queries ([`gather`]: usage by day
//!   and partition, the top wasters, the heat map, idle GPUs, CPU-only jobs on GPU partitions, the
//!   same totals over the window before) — the report computes no figure the audit reports do not;
//!   only the efficiency distribution, which no report has, is counted here, over the index's
//!   stored per-job efficiencies, with the OpenMetrics histogram's buckets;
//! - [`page`]: the words, tables and charts of it, and its text, HTML and mail.
//!
//! Who may run it: admins (root and `archive.admin_group`), who read the index. It ranks users and
//! accounts against each other, so there is no "own jobs" version of it: a user's own figures are
//! `jobscope audit usage` (their jobs only) and the alerts.

pub mod page;

#[cfg(test)]
mod browser;
#[cfg(test)]
mod tests;

use anyhow::{ensure, Context, Result};
use jobscope_audit::index::ParquetEngine;
use jobscope_audit::query::{
    Engine, Filters, GroupKey, Query, Report, WasteMetric, Window, Zone, MAX_TIME_S, MIN_TIME_S,
};
use jobscope_audit::table::Table;

/// What the report covers and how much of it it lists.
#[derive(Debug, Clone)]
pub struct Options {
    /// Both bounds set: the previous window is the same length before it.
    pub window: Window,
    /// The scope (`--account`, `--partition`); empty: the whole cluster.
    pub filters: Filters,
    pub zone: Zone,
    /// Rows of each ranking (users, accounts, jobs).
    pub top_n: usize,
    /// `cpu-on-gpu`'s busy mark (`audit.busy_pct`).
    pub busy_pct: f64,
    /// When the report was made (Unix seconds), for its header.
    pub generated_unix_s: i64,
}

/// The rankings, one per wasted resource, in [`WasteMetric`] order: core-, GB-, GPU-hours.
pub const METRICS: [WasteMetric; 3] = [
    WasteMetric::CoreHours,
    WasteMetric::MemGbHours,
    WasteMetric::GpuHours,
];

/// Jobs per efficiency bucket (`≤ EFF_BUCKETS[0]`, …, `≤ 100`, `> 100`: the OpenMetrics
/// histogram's buckets) and the jobs without a figure: the rollups' histogram.
pub use jobscope_audit::rollup::Histogram as Distribution;

/// Everything the report shows, as the audit's queries answered it.
#[derive(Debug, Clone)]
pub struct Data {
    pub opts: Options,
    /// The window of the same length just before.
    pub previous: Window,
    /// Usage without keys: one row, this window and the one before.
    pub totals: Table,
    pub previous_totals: Table,
    pub by_partition: Table,
    /// Usage by day (by month over a window longer than [`MAX_DAYS`]), and by that and partition.
    pub by_day: Table,
    pub by_day_partition: Table,
    /// Whether `by_day*` are by month.
    pub monthly: bool,
    /// Top wasters by user and by account, one table per [`METRICS`] entry.
    pub top_users: Vec<Table>,
    pub top_accounts: Vec<Table>,
    pub cpu_eff: Distribution,
    pub mem_eff: Distribution,
    pub heatmap: Table,
    /// `gpu-idle`'s jobs, each by its `user` (what the page counts: not the job list, which
    /// over a year is tens of thousands of rows), and what the page shows of `cpu-on-gpu`: its
    /// counts, core-hours per partition and largest busy jobs (not its job list, 87 000 rows over
    /// the benchmark's year).
    pub gpu_idle_jobs: Table,
    pub cpu_on_gpu: jobscope_audit::eval::CpuOnGpuSummary,
}

/// Over a longer window the days would be too many columns to read: months instead.
pub const MAX_DAYS: i64 = 62;

impl Data {
    /// The window's length in seconds.
    pub fn span_s(&self) -> i64 {
        span_s(&self.opts.window).unwrap_or(0)
    }
}

fn span_s(w: &Window) -> Option<i64> {
    w.until_unix_s?.checked_sub(w.since_unix_s?)
}

/// Asks the index everything the report shows.
pub fn gather(eng: &ParquetEngine, o: &Options) -> Result<Data> {
    let (since, until) = (
        o.window
            .since_unix_s
            .context("the report's window has no start")?,
        o.window
            .until_unix_s
            .context("the report's window has no end")?,
    );
    ensure!(
        since < until,
        "the report's window is empty (--since is not before --until)"
    );
    // In range, its length and the window before it are far inside i64 (issue 29 §4).
    ensure!(
        o.window.in_range(),
        "the report's window ({since} to {until}) is not within 0000-01-01 and 9999-12-31 UTC \
         (Unix seconds {MIN_TIME_S} to {MAX_TIME_S})"
    );
    let span = until - since;
    let previous = Window {
        since_unix_s: Some(since.saturating_sub(span)),
        until_unix_s: Some(since),
    };
    let q = |report: Report, keys: &[GroupKey]| Query {
        window: o.window.clone(),
        filters: o.filters.clone(),
        group_by: keys.to_vec(),
        report,
        limit: None,
        zone: o.zone,
    };
    let run = |report: Report, keys: &[GroupKey]| eng.run(&q(report, keys));
    let monthly = span > MAX_DAYS * 86_400;
    let when = if monthly {
        GroupKey::Month
    } else {
        GroupKey::Day
    };
    // One aggregation per key for the three lists.
    let top = |by: GroupKey| eng.top_wasters(&q(Report::Usage, &[by]), &METRICS, o.top_n);
    let mut before = q(Report::Usage, &[]);
    before.window = previous.clone();
    let (cpu_eff, mem_eff) = distributions(eng, &q(Report::Jobs, &[]))?;
    Ok(Data {
        totals: run(Report::Usage, &[])?,
        previous_totals: eng.run(&before)?,
        by_partition: run(Report::Usage, &[GroupKey::Partition])?,
        by_day: run(Report::Usage, &[when])?,
        by_day_partition: run(Report::Usage, &[when, GroupKey::Partition])?,
        monthly,
        top_users: top(GroupKey::User)?,
        top_accounts: top(GroupKey::Account)?,
        cpu_eff,
        mem_eff,
        heatmap: run(Report::Heatmap, &[])?,
        gpu_idle_jobs: idle_gpu_jobs(eng, &q(Report::GpuIdle, &[]))?,
        cpu_on_gpu: eng.cpu_on_gpu_summary(
            &q(
                Report::CpuOnlyOnGpu {
                    busy_pct: o.busy_pct,
                },
                &[],
            ),
            o.top_n,
        )?,
        previous,
        opts: o.clone(),
    })
}

/// `gpu-idle`'s jobs as a one-column table of their users: the rows its list would have, read
/// with the user column alone.
fn idle_gpu_jobs(eng: &ParquetEngine, q: &Query) -> Result<Table> {
    use arrow_array::{Array, StringArray};
    use jobscope_audit::table::{ColType, Column, Unit, Value};
    let mut t = Table::new(vec![Column::new("user", ColType::Text, Unit::None)]);
    for b in eng.report_rows(q, &["user"])? {
        let u = b
            .column_by_name("user")
            .and_then(|a| a.as_any().downcast_ref::<StringArray>())
            .context("the index's user column")?;
        t.rows.extend((0..u.len()).map(|i| {
            vec![if u.is_null(i) {
                Value::Null
            } else {
                Value::Text(u.value(i).to_string())
            }]
        }));
    }
    Ok(t)
}

/// The jobs of `q`'s window and scope by CPU and by memory efficiency (the index's per-job
/// `cpu_eff_pct`, `mem_eff_pct`), from the rollups' histograms for the window's whole months and
/// the job parts for its ends (`ParquetEngine::efficiency_histograms`).
fn distributions(eng: &ParquetEngine, q: &Query) -> Result<(Distribution, Distribution)> {
    let q = Query {
        report: Report::Usage,
        group_by: Vec::new(),
        ..q.clone()
    };
    let [cpu, mem] = eng
        .efficiency_histograms(&q)?
        .remove(&Vec::new())
        .unwrap_or_default();
    Ok((cpu, mem))
}
