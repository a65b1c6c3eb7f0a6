//! Answering from the rollups (audit::rollup): which questions they can answer, the plan that
//! splits a window into the UTC months the rollups give (a month covered in part: its rollup less
//! the jobs of its days outside the window, when fewer jobs end then than inside) and the days at
//! its ends the job parts give, and the reading of the rollup parts (the per-user rows when they
//! answer; blank columns left undecoded).

use super::{sealed, ParquetEngine, Part, ROW_GROUP_ROWS};
use crate::eval::{filter_columns, matching, needed_columns, Usage, USAGE_INPUTS};
use crate::query::{month_text, GroupKey, Query, Report, Window};
use crate::rollup::{
    self, month_of_ms, month_start_s, Histogram, RollupView, EFF_SUMS, HISTOGRAMS, HIST_BUCKETS,
    TEXT_KEYS,
};
use crate::table::Table;
use anyhow::{bail, Context, Result};
use arrow_array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use parquet::file::statistics::Statistics;
use std::collections::{BTreeMap, BTreeSet};

/// How a question is answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// UTC months (`year × 12 + month − 1`, half-open; `i64::MIN`/`MAX`: unbounded) answered
    /// from the rollups; `None`: the whole window from the job parts.
    pub rollup_months: Option<(i64, i64)>,
    /// The rollup rows read: per every key, or per user alone when the question's keys and
    /// filters are among theirs (`rollup::ALL_KEYS`, `rollup::PER_USER`).
    pub rollup_level: i64,
    /// The windows read from the job parts: the whole window, or the days at its ends outside
    /// the months the rollups give.
    pub part_windows: Vec<Window>,
    /// The days of the rollups' first and last months outside the window, read from the job
    /// parts and taken away (the sums are exact: what is left is the window's own).
    pub minus_windows: Vec<Window>,
    /// Why the rollups do not answer (when they do not).
    pub why_not: Option<String>,
}

impl Plan {
    fn parts_only(q: &Query, why: String) -> Plan {
        Plan {
            rollup_months: None,
            rollup_level: rollup::ALL_KEYS,
            part_windows: vec![q.window.clone()],
            minus_windows: Vec::new(),
            why_not: Some(why),
        }
    }

    /// One sentence for `--explain`.
    pub fn describe(&self, engine: &ParquetEngine) -> String {
        let span = |w: &Window| match (w.since_unix_s, w.until_unix_s) {
            (Some(s), Some(u)) => format!("{:.1} days", (u - s) as f64 / 86_400.0),
            _ => "an open end".into(),
        };
        match (self.rollup_months, &self.why_not) {
            (None, why) => format!(
                "answered from the job parts ({} jobs in the index): {}",
                engine.jobs(),
                why.as_deref().unwrap_or("no whole month in the window")
            ),
            (Some((m0, m1)), _) => {
                let months = match (m0, m1) {
                    (i64::MIN, i64::MAX) => "every month".to_string(),
                    (i64::MIN, m1) => format!("every month before {}", month_text(m1)),
                    (m0, i64::MAX) => format!("every month from {}", month_text(m0)),
                    (m0, m1) => format!(
                        "the {} UTC months {} to {}",
                        m1 - m0,
                        month_text(m0),
                        month_text(m1 - 1)
                    ),
                };
                let parts = engine.rollups_for(Some((m0, m1))).len();
                let rows = if self.rollup_level == rollup::PER_USER {
                    "their rows per user"
                } else {
                    "their rows per every key"
                };
                let mut s =
                    format!("answered from the rollups for {months} ({rows}, {parts} parts)");
                let spans = |ws: &[Window]| ws.iter().map(span).collect::<Vec<_>>().join(" and ");
                if !self.minus_windows.is_empty() {
                    s.push_str(&format!(
                        ", less the jobs that ended outside the window in its first or last \
                         month ({}, from the job parts)",
                        spans(&self.minus_windows)
                    ));
                }
                if self.part_windows.is_empty() {
                    s.push_str(", nothing more from the job parts");
                } else {
                    s.push_str(&format!(
                        ", and from the job parts for the window's ends outside them ({})",
                        spans(&self.part_windows)
                    ));
                }
                s
            }
        }
    }
}

/// A month the window covers in part.
struct Edge {
    month: i64,
    inside: Window,
    outside: Vec<Window>,
}

fn span(since_s: i64, until_s: i64) -> Window {
    Window {
        since_unix_s: Some(since_s),
        until_unix_s: Some(until_s),
    }
}

/// The milliseconds of a bounded window in which the index's jobs end (`extent`: the smallest
/// and largest job end it records): the cost of reading it from the job parts.
fn reach(w: &Window, extent: (Option<i64>, Option<i64>)) -> i64 {
    let (Some(s), Some(u)) = (w.since_unix_s, w.until_unix_s) else {
        return i64::MAX;
    };
    let lo = (s.saturating_mul(1000)).max(extent.0.unwrap_or(i64::MIN));
    let hi = (u.saturating_mul(1000)).min(extent.1.map_or(i64::MAX, |e| e.saturating_add(1)));
    hi.saturating_sub(lo).max(0)
}

/// The rollup rows that answer `q` (one the rollups can answer): the per-user ones when its keys
/// and text filters are theirs (cluster, user, the uid, the month), else those per every key.
fn rollup_level(q: &Query) -> i64 {
    let theirs = |col: &str| rollup::PER_USER_KEYS.contains(&col);
    let keys = q
        .keys()
        .iter()
        .all(|k| *k == GroupKey::Month || theirs(k.column()));
    let filters = q
        .filters
        .text_columns()
        .into_iter()
        .all(|(list, col)| list.is_empty() || theirs(col));
    if keys && filters {
        rollup::PER_USER
    } else {
        rollup::ALL_KEYS
    }
}

/// Why the rollups cannot answer `q` whatever the window (`None`: they can).
pub fn rollup_cannot_answer(q: &Query) -> Option<String> {
    if !matches!(q.report, Report::Usage | Report::TopWasters { .. }) {
        return Some("a list of jobs or the heat map is made of the jobs themselves".into());
    }
    let f = &q.filters;
    for (set, what) in [
        (!f.nodes.is_empty(), "a filter on nodes"),
        (f.min_elapsed_s.is_some(), "a filter on the elapsed time"),
        (f.gpu.is_some(), "a filter on GPUs"),
    ] {
        if set {
            return Some(format!("{what} is not among the rollups' keys"));
        }
    }
    for (list, col) in f.text_columns() {
        if !list.is_empty() && !TEXT_KEYS.contains(&col) {
            return Some(format!("a filter on {col} is not among the rollups' keys"));
        }
    }
    if let Some(k) = q
        .keys()
        .into_iter()
        .find(|k| *k != GroupKey::Month && !TEXT_KEYS.contains(&k.column()))
    {
        return Some(format!(
            "the rollups are not kept per {} (grouping by it reads the jobs)",
            k.column()
        ));
    }
    None
}

impl ParquetEngine {
    /// The rollups of the jobs parts whose end times reach into `months` (all with `None`); a
    /// rollup whose jobs part's entry is not sealed is kept (its rows' end months decide).
    pub(crate) fn rollups_for(&self, months: Option<(i64, i64)>) -> Vec<&Part> {
        let by_seq: BTreeMap<_, &Part> = self
            .state
            .jobs
            .iter()
            .map(|p| ((p.month.as_str(), super::seq_of(p)), p))
            .collect();
        let mut files = BTreeSet::new();
        self.state
            .rollups
            .iter()
            .filter(|r| files.insert(r.file.as_str()))
            .filter(|r| {
                let Some((m0, m1)) = months else { return true };
                match by_seq.get(&(r.month.as_str(), super::seq_of(r))) {
                    Some(j) if sealed("jobs", j) => {
                        j.max_end_ms.is_none_or(|e| month_of_ms(e) >= m0)
                            && j.min_end_ms.is_none_or(|e| month_of_ms(e) < m1)
                    }
                    _ => true,
                }
            })
            .collect()
    }

    /// How `q` is answered: from the rollups for the UTC months of its window, when they
    /// can answer it and every jobs part has its rollup (on the clock of the question when it
    /// groups by month), and from the job parts for the rest.
    pub fn plan(&self, q: &Query) -> Plan {
        if let Some(why) = rollup_cannot_answer(q) {
            return Plan::parts_only(q, why);
        }
        let have: BTreeSet<_> = self
            .state
            .rollups
            .iter()
            .map(|p| (p.month.as_str(), super::seq_of(p)))
            .collect();
        if let Some(p) = self
            .state
            .jobs
            .iter()
            .find(|p| !have.contains(&(p.month.as_str(), super::seq_of(p))))
        {
            return Plan::parts_only(
                q,
                format!("index part {} has no rollup (an update makes it)", p.file),
            );
        }
        let w = &q.window;
        let bounded = |t: Option<i64>| t.map(|s| month_of_ms(s.saturating_mul(1000)));
        let (first, last) = (bounded(w.since_unix_s), bounded(w.until_unix_s));
        for m in [first, last].into_iter().flatten() {
            if month_start_s(m).is_none() || month_start_s(m + 1).is_none() {
                return Plan::parts_only(q, "the window ends past the calendar".into());
            }
        }
        let start_of = |m: i64| month_start_s(m).unwrap_or_default();
        // The months the window covers in part (`since` inside its month; `until` inside its
        // month), each with the span of it in the window and the spans outside.
        let mut edges: Vec<Edge> = Vec::new();
        if let (Some(s), Some(m)) = (w.since_unix_s, first) {
            if start_of(m) < s {
                let stop = w
                    .until_unix_s
                    .map_or(start_of(m + 1), |u| u.min(start_of(m + 1)));
                let mut out = vec![span(start_of(m), s)];
                if stop < start_of(m + 1) {
                    out.push(span(stop, start_of(m + 1)));
                }
                edges.push(Edge {
                    month: m,
                    inside: span(s, stop),
                    outside: out,
                });
            }
        }
        if let (Some(u), Some(m)) = (w.until_unix_s, last) {
            if start_of(m) < u && edges.first().is_none_or(|e| e.month != m) {
                edges.push(Edge {
                    month: m,
                    inside: span(start_of(m).max(w.since_unix_s.unwrap_or(i64::MIN)), u),
                    outside: vec![span(u, start_of(m + 1))],
                });
            }
        }
        // The whole months: from the first starting at or after `since` to the month `until` is in.
        let mut m0 = match (w.since_unix_s, first) {
            (Some(s), Some(m)) if start_of(m) < s => m + 1,
            (_, Some(m)) => m,
            _ => i64::MIN,
        };
        let mut m1 = last.unwrap_or(i64::MAX);
        // An edge month from its rollup less the jobs of the days outside the window, when
        // fewer of the index's jobs can end then than inside (the days after the newest job
        // hold none: the month so far is its rollup as it is); else its days in the window
        // from the job parts.
        let extent = self.end_extent();
        let mut part_windows = Vec::new();
        let mut minus_windows = Vec::new();
        for e in edges {
            let cost = |w: &Window| reach(w, extent);
            let outside: i64 = e.outside.iter().map(cost).sum();
            if outside < cost(&e.inside) {
                m0 = m0.min(e.month);
                m1 = m1.max(e.month + 1);
                minus_windows.extend(e.outside.into_iter().filter(|w| cost(w) > 0));
            } else {
                part_windows.push(e.inside);
            }
        }
        if m0 >= m1 {
            return Plan::parts_only(
                q,
                "the window holds no whole UTC month, and fewer of its month's jobs are in it than out"
                    .into(),
            );
        }
        if q.keys().contains(&GroupKey::Month) {
            let want = q.zone.name();
            if let Some(r) = self
                .rollups_for(Some((m0, m1)))
                .into_iter()
                .find(|r| r.zone.is_none() || r.zone != want)
            {
                return Plan::parts_only(
                    q,
                    format!(
                        "the rollups' days are on the clock of {} and the question's on {}",
                        r.zone.as_deref().unwrap_or("no zone"),
                        q.zone.label()
                    ),
                );
            }
        }
        Plan {
            rollup_months: Some((m0, m1)),
            rollup_level: rollup_level(q),
            part_windows,
            minus_windows,
            why_not: None,
        }
    }

    /// The smallest and largest job end (ms) the index's parts record (`None` at a side a part
    /// does not say).
    fn end_extent(&self) -> (Option<i64>, Option<i64>) {
        let parts = &self.state.jobs;
        let lo = parts.iter().map(|p| p.min_end_ms).min().flatten();
        let hi = parts
            .iter()
            .map(|p| p.max_end_ms)
            .try_fold(i64::MIN, |a, m| m.map(|m| a.max(m)));
        (lo, hi)
    }

    /// The usage and top-wasters reports, as [`ParquetEngine::plan`] says.
    pub(crate) fn usage(&self, q: &Query) -> Result<Table> {
        self.usage_planned(q, &self.plan(q))
    }

    /// `q` answered from the job parts alone, as before the rollups: what tests and the benchmark
    /// compare the rollups' answers with.
    pub fn run_from_parts(&self, q: &Query) -> Result<Table> {
        match q.report {
            Report::Usage | Report::TopWasters { .. } => {
                self.usage_planned(q, &Plan::parts_only(q, "asked for".into()))
            }
            _ => crate::query::Engine::run(self, q),
        }
    }

    /// [`ParquetEngine::efficiency_histograms`] from the job parts alone.
    pub fn efficiency_histograms_from_parts(
        &self,
        q: &Query,
    ) -> Result<BTreeMap<Vec<Option<String>>, [Histogram; 2]>> {
        self.histograms_planned(q, &Plan::parts_only(q, "asked for".into()))
    }

    /// The usage of `q`'s jobs that ended in `windows`, from the job parts.
    fn usage_of_parts(&self, q: &Query, windows: &[Window]) -> Result<Usage> {
        let cols = needed_columns(q);
        let mut all = Usage::new(q)?;
        for w in windows {
            let qw = Query {
                window: w.clone(),
                ..q.clone()
            };
            let aggs = self.fold(
                &qw,
                &cols,
                true,
                || Usage::new(q),
                |u: &mut Result<Usage>, _, b| match u {
                    Ok(u) => u.add(&qw, &b),
                    Err(e) => bail!("{e:#}"),
                },
            )?;
            for u in aggs {
                all.merge(u?);
            }
        }
        Ok(all)
    }

    fn usage_planned(&self, q: &Query, plan: &Plan) -> Result<Table> {
        self.usage_aggregate(q, plan)?.finish(q)
    }

    /// The top wasters of `q`'s groups by each of `metrics` (`n` each): `q` asked once, each
    /// list taken from the same sums (as many `TopWasters` questions would give).
    pub fn top_wasters(
        &self,
        q: &Query,
        metrics: &[crate::query::WasteMetric],
        n: usize,
    ) -> Result<Vec<Table>> {
        let ask = |metric| Query {
            report: Report::TopWasters { metric, n },
            ..q.clone()
        };
        let Some(first) = metrics.first() else {
            return Ok(Vec::new());
        };
        let q0 = ask(*first);
        let all = self.usage_aggregate(&q0, &self.plan(&q0))?;
        metrics.iter().map(|m| all.table(&ask(*m))).collect()
    }

    fn usage_aggregate(&self, q: &Query, plan: &Plan) -> Result<Usage> {
        let mut all = self.usage_of_parts(q, &plan.part_windows)?;
        if let Some(months) = plan.rollup_months {
            let mut cols = rollup_key_columns(q);
            cols.push("jobs".into());
            let sum = |cols: &mut Vec<String>, n: &str| {
                let (lo, hi) = rollup::sum_columns(n);
                cols.extend([lo, hi]);
            };
            for n in USAGE_INPUTS {
                sum(&mut cols, n);
                cols.push(rollup::values_column(n));
            }
            for (u, a) in EFF_SUMS {
                sum(&mut cols, u);
                sum(&mut cols, a);
            }
            let level = plan.rollup_level;
            let aggs = self.fold_rollups(
                (months, level),
                &cols,
                true,
                || Usage::new(q),
                |u: &mut Result<Usage>, b| match u {
                    Ok(u) => u.add_rollup(q, &b, (months, level)),
                    Err(e) => bail!("{e:#}"),
                },
            )?;
            for u in aggs {
                all.merge(u?);
            }
            all.subtract(self.usage_of_parts(q, &plan.minus_windows)?);
        }
        Ok(all)
    }

    /// The CPU and memory efficiency histograms of the jobs `q` selects, per group of its text
    /// keys (`q` is a usage question; its keys must be text keys the rollups hold), answered as
    /// [`ParquetEngine::plan`] says.
    pub fn efficiency_histograms(
        &self,
        q: &Query,
    ) -> Result<BTreeMap<Vec<Option<String>>, [Histogram; 2]>> {
        self.histograms_planned(q, &self.plan(q))
    }

    fn histograms_planned(
        &self,
        q: &Query,
        plan: &Plan,
    ) -> Result<BTreeMap<Vec<Option<String>>, [Histogram; 2]>> {
        let keys = q.keys();
        if let Some(k) = keys.iter().find(|k| !TEXT_KEYS.contains(&k.column())) {
            bail!(
                "efficiency histograms are kept per text key, not per {}",
                k.column()
            );
        }
        type Groups = BTreeMap<Vec<Option<String>>, [Histogram; 2]>;
        let merge = |out: &mut Groups, parts: Vec<Groups>| {
            for g in parts {
                for (k, h) in g {
                    let e = out.entry(k).or_default();
                    e[0].merge(&h[0]);
                    e[1].merge(&h[1]);
                }
            }
        };
        let key_of = |b: &RecordBatch, i: usize| -> Result<Vec<Option<String>>> {
            keys.iter()
                .map(|k| {
                    let a = b
                        .column_by_name(k.column())
                        .and_then(|a| a.as_any().downcast_ref::<StringArray>())
                        .with_context(|| format!("column {}", k.column()))?;
                    Ok((!a.is_null(i)).then(|| a.value(i).to_string()))
                })
                .collect()
        };
        let of_parts = |windows: &[Window]| -> Result<Groups> {
            let mut out = Groups::new();
            for w in windows {
                let qw = Query {
                    window: w.clone(),
                    ..q.clone()
                };
                let mut cols = filter_columns(&qw);
                for k in &keys {
                    if !cols.contains(&k.column()) {
                        cols.push(k.column());
                    }
                }
                cols.extend(HISTOGRAMS.iter().map(|h| h.0));
                let parts = self.fold(&qw, &cols, false, Groups::new, |acc, _, b| {
                    let effs: Vec<&Float64Array> = HISTOGRAMS
                        .iter()
                        .map(|h| {
                            b.column_by_name(h.0)
                                .and_then(|a| a.as_any().downcast_ref::<Float64Array>())
                                .with_context(|| format!("the index's {} column", h.0))
                        })
                        .collect::<Result<_>>()?;
                    for i in matching(&qw, &b)? {
                        let e = acc.entry(key_of(&b, i)?).or_default();
                        for (h, a) in effs.iter().enumerate() {
                            e[h].add((!a.is_null(i)).then(|| a.value(i)));
                        }
                    }
                    Ok(())
                })?;
                merge(&mut out, parts);
            }
            Ok(out)
        };
        let mut out = of_parts(&plan.part_windows)?;
        if let Some(months) = plan.rollup_months {
            let mut cols = rollup_key_columns(q);
            for (_, p) in HISTOGRAMS {
                for i in 0..HIST_BUCKETS {
                    cols.push(rollup::bucket_column(p, i));
                }
                cols.push(format!("{p}_jobs_unknown"));
                let (lo, hi) = rollup::sum_columns(&format!("{p}_pct"));
                cols.extend([lo, hi]);
            }
            let rows = (months, plan.rollup_level);
            let parts = self.fold_rollups(rows, &cols, false, Groups::new, |acc, b| {
                let v = RollupView { b: &b };
                let mut keep = rollup::rows_of(&b, rows)?;
                crate::eval::retain_rollup_filters(q, &b, &mut keep)?;
                let mut hist_cols = Vec::new();
                for (_, p) in HISTOGRAMS {
                    let buckets: Vec<&Int64Array> = (0..HIST_BUCKETS)
                        .map(|i| v.int(&rollup::bucket_column(p, i)))
                        .collect::<Result<_>>()?;
                    hist_cols.push((
                        buckets,
                        v.int(&format!("{p}_jobs_unknown"))?,
                        v.sum(&format!("{p}_pct")),
                    ));
                }
                for i in keep {
                    let e = acc.entry(key_of(&b, i)?).or_default();
                    for (h, (buckets, unknown, sum)) in hist_cols.iter().enumerate() {
                        for (k, a) in buckets.iter().enumerate() {
                            e[h].jobs[k] += a.value(i) as u64;
                        }
                        e[h].unknown += unknown.value(i) as u64;
                        e[h].pct_sum += sum.at(i).unwrap_or_default();
                    }
                }
                Ok(())
            })?;
            merge(&mut out, parts);
            for (k, h) in of_parts(&plan.minus_windows)? {
                let e = out.get_mut(&k);
                if !e.is_some_and(|e| e[0].subtract(&h[0]) && e[1].subtract(&h[1])) {
                    bail!(
                        "the index's rollups and job parts disagree (run `jobscope index rebuild`)"
                    );
                }
            }
            // A group whose jobs were all taken away is no group.
            out.retain(|_, h| h[0].count() + h[0].unknown > 0);
        }
        if keys.is_empty() && out.is_empty() {
            out.insert(Vec::new(), Default::default());
        }
        Ok(out)
    }

    /// Reads the row groups of the rollup parts that reach into `months` and hold rows of `level`
    /// on every core at once,
    /// projected to `columns` (text keys as plain UTF-8, or as dictionaries with `dict`) less
    /// those its statistics say are blank ([`rollup::may_leave_out`]), each
    /// batch handed to `f` with that reader's accumulator; returns the accumulators.
    fn fold_rollups<T: Send>(
        &self,
        (months, level): ((i64, i64), i64),
        columns: &[String],
        dict: bool,
        init: impl Fn() -> T + Sync,
        f: impl Fn(&mut T, RecordBatch) -> Result<()> + Sync,
    ) -> Result<Vec<T>> {
        let parts = self.rollups_for(Some(months));
        let open = |p: &Part| {
            std::fs::File::open(self.dir.join(&p.file))
                .with_context(|| format!("index part {} (run `jobscope index rebuild`)", p.file))
        };
        let mut metas = Vec::with_capacity(parts.len());
        let mut units: Vec<(usize, usize)> = Vec::new();
        for (pi, p) in parts.iter().enumerate() {
            let opts = if dict {
                ArrowReaderOptions::new()
                    .with_schema(super::with_dictionaries(&rollup::schema(), &TEXT_KEYS))
            } else {
                ArrowReaderOptions::new()
            };
            let m = ArrowReaderMetadata::load(&open(p)?, opts)
                .with_context(|| format!("index part {} is damaged", p.file))?;
            let month_col = m.schema().index_of("end_month")?;
            let level_col = m.schema().index_of("level")?;
            for (gi, rg) in m.metadata().row_groups().iter().enumerate() {
                let reaches = |col: usize, (lo, hi): (i64, i64)| match rg.column(col).statistics() {
                    Some(Statistics::Int64(st)) => {
                        st.max_opt().is_none_or(|&m| m >= lo)
                            && st.min_opt().is_none_or(|&m| m < hi)
                    }
                    _ => true,
                };
                let touch = reaches(month_col, months) && reaches(level_col, (level, level + 1));
                if touch {
                    units.push((pi, gi));
                }
            }
            metas.push(m);
        }
        let read = |unit: usize, acc: &mut T| -> Result<()> {
            let (pi, gi) = units[unit];
            let m = &metas[pi];
            let b = ParquetRecordBatchReaderBuilder::new_with_metadata(open(parts[pi])?, m.clone());
            let rg = m.metadata().row_group(gi);
            let mut idx = Vec::with_capacity(columns.len());
            for c in columns {
                let i = m.schema().index_of(c)?;
                // Leaf i is root i: the rollup schema is flat.
                let (all_null, all_zero) = match rg.column(i).statistics() {
                    Some(Statistics::Int64(st)) => (
                        st.null_count_opt() == Some(rg.num_rows() as u64),
                        st.null_count_opt() == Some(0)
                            && st.min_opt() == Some(&0)
                            && st.max_opt() == Some(&0),
                    ),
                    _ => (false, false),
                };
                if !rollup::may_leave_out(c, all_null, all_zero) {
                    idx.push(i);
                }
            }
            let mask = ProjectionMask::roots(b.parquet_schema(), idx);
            let r = b
                .with_projection(mask)
                .with_row_groups(vec![gi])
                .with_batch_size(ROW_GROUP_ROWS)
                .build()?;
            for batch in r {
                f(acc, batch?)?;
            }
            Ok(())
        };
        super::on_every_core(units.len(), init, read)
    }
}

/// The rollup columns a question's keys and filters read (besides its sums).
fn rollup_key_columns(q: &Query) -> Vec<String> {
    let mut c: Vec<String> = vec!["end_month".into(), "level".into()];
    let mut add = |n: &str| {
        if !c.iter().any(|x| x == n) {
            c.push(n.to_string())
        }
    };
    if q.filters.uid.is_some() {
        add("uid");
    }
    for (list, col) in q.filters.text_columns() {
        if !list.is_empty() {
            add(col);
        }
    }
    for k in q.keys() {
        match k {
            GroupKey::Month => add("start_month"),
            other => add(other.column()),
        }
    }
    c
}
