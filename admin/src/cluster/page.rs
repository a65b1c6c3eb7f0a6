//! The cluster report as people read it: sentences, tables and charts made once from [`Data`]
//! ([`Page::new`]), then rendered as text, as one self-contained HTML page (charts as `data:`
//! URIs; no script, no style sheet, font or picture fetched from anywhere) or as a mail (the same
//! HTML with the charts as inline parts named by `cid:`, and the text as its plain part).
//!
//! Every chart's numbers are also in a table or a sentence beside it, so a reader whose mail
//! client shows no pictures misses nothing. Tables are the audit's own ([`render::text`] for the
//! text, [`render::header`] and [`render::human`] cell by cell for HTML: the same figures, units
//! and cleaning as `jobscope audit`). User text (user, account, partition and job names) is
//! cleaned of control, bidi and invisible characters ([`clean_line`]) before it reaches any view,
//! and the HTML registry escapes every value (handlebars' default; the templates use no
//! `{{{triple}}}`), as the job report's mail does.

use super::{Data, Distribution, METRICS};
use anyhow::{Context, Result};
use base64::Engine as _;
use jobscope_audit::query::{GroupKey, Zone};
use jobscope_audit::render::{self, wrap};
use jobscope_audit::table::{ColType, Column, Table, Unit, Value};
use jobscope_deliver::mail::message::{assemble, InlineImage, Mail, Mailbox};
use jobscope_report::plots::{self, Bars, Grid, Segment, Shade};
use jobscope_report::present::templates::{registry, SUBJECT_MAX_CHARS};
use jobscope_report::present::{clean_line, fmt_hours, fmt_pct, plural, width};
use serde::Serialize;

pub const HTML_TEMPLATE: &str = include_str!("../../../report-templates/cluster.html.hbs");
pub const TEXT_TEMPLATE: &str = include_str!("../../../report-templates/cluster.txt.hbs");

/// Charts are this wide (pixels); the page is a little wider, so they show at their own size.
pub const CHART_WIDTH: u32 = 900;
/// Names in sentences are cut to this many characters (tables cut at 40, charts at 22).
const NAME_CHARS: usize = 40;

/// One cell as shown: its text, and whether it is a number (right-aligned).
#[derive(Debug, Clone, Serialize)]
struct Cell {
    text: String,
    num: bool,
}

#[derive(Debug, Clone, Serialize)]
struct TableView {
    caption: String,
    headers: Vec<Cell>,
    rows: Vec<Vec<Cell>>,
    /// The same table aligned for the text part.
    text: String,
}

#[derive(Debug, Clone, Serialize)]
struct ChartView {
    /// Filled in when rendered: a `data:` URI on the page, `cid:` in the mail.
    src: String,
    alt: String,
    width: u32,
    height: u32,
}

#[derive(Debug, Clone, Serialize)]
struct Section {
    id: &'static str,
    title: String,
    /// The title's underline in the text part.
    rule: String,
    chart: Option<ChartView>,
    sentences: Vec<String>,
    tables: Vec<TableView>,
    /// Text-part only: a figure drawn in characters (the heat map).
    pre: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
struct View {
    title: String,
    subtitle: String,
    window: String,
    summary: Vec<String>,
    sections: Vec<Section>,
    generated: String,
}

/// A chart of the report, drawn.
#[derive(Debug, Clone)]
pub struct Chart {
    /// The section it belongs to (also its Content-ID's name).
    pub key: &'static str,
    pub png: Vec<u8>,
}

/// The report, made: render it with [`Page::text`], [`Page::html`], [`Page::mail`].
pub struct Page {
    view: View,
    /// In the order of the page.
    pub charts: Vec<Chart>,
    pub subject: String,
    /// Problems that did not stop the report (a chart that could not be drawn).
    pub warnings: Vec<String>,
}

/// A figure of row `r` of `t`, by column name.
fn num(t: &Table, r: usize, col: &str) -> Option<f64> {
    t.column(col)
        .and_then(|c| t.rows.get(r)?.get(c)?.as_f64())
        .filter(|v| v.is_finite())
}

fn text_of(t: &Table, r: usize, col: &str) -> Option<String> {
    t.column(col)
        .and_then(|c| t.rows.get(r)?.get(c)?.as_str().map(str::to_string))
}

/// A name as sentences show it (`(none)` for a job without one).
fn name(s: Option<&str>) -> String {
    match s {
        Some(s) => clean_line(s, NAME_CHARS),
        None => "(none)".into(),
    }
}

/// The columns `cols` of `t`, in that order (those it has).
fn project(t: &Table, cols: &[&str]) -> Table {
    let idx: Vec<usize> = cols.iter().filter_map(|c| t.column(c)).collect();
    Table {
        columns: idx.iter().map(|&i| t.columns[i].clone()).collect(),
        rows: t
            .rows
            .iter()
            .map(|r| idx.iter().map(|&i| r[i].clone()).collect())
            .collect(),
    }
}

fn table_view(caption: String, t: &Table, zone: Zone) -> TableView {
    let num = |c: &Column| !matches!(c.kind, ColType::Text);
    TableView {
        caption,
        headers: t
            .columns
            .iter()
            .map(|c| Cell {
                text: render::header(&c.name, zone),
                num: num(c),
            })
            .collect(),
        rows: t
            .rows
            .iter()
            .map(|r| {
                r.iter()
                    .zip(&t.columns)
                    .map(|(v, c)| Cell {
                        text: render::human(c.unit, v, zone),
                        num: num(c),
                    })
                    .collect()
            })
            .collect(),
        text: render::text(t, zone),
    }
}

/// `7 days`, `1 day`, `36 hours`, else minutes.
fn span_words(s: i64) -> String {
    let s = s.max(0) as u64;
    if s.is_multiple_of(86_400) {
        plural(s / 86_400, "day")
    } else if s.is_multiple_of(3600) {
        plural(s / 3600, "hour")
    } else {
        plural(s / 60, "minute")
    }
}

/// A count the index gave as a figure (`jobs`), for [`plural`].
fn count(v: Option<f64>) -> u64 {
    v.filter(|v| v.is_finite() && *v >= 0.0).unwrap_or(0.0) as u64
}

/// A change in points: `(+3.0 points)`; `(none before)` without an earlier figure.
fn points(cur: Option<f64>, prev: Option<f64>) -> String {
    match (cur, prev) {
        (Some(c), Some(p)) => format!("({:+.1} points)", c - p),
        (Some(_), None) => "(no figure before)".into(),
        _ => String::new(),
    }
}

/// A relative change: `(+12 %)`; `(none before)` when there was nothing to compare with.
fn change(cur: Option<f64>, prev: Option<f64>) -> String {
    let (c, p) = (cur.unwrap_or(0.0), prev.unwrap_or(0.0));
    if p > 0.0 {
        format!("({:+.0} %)", 100.0 * (c - p) / p)
    } else if c > 0.0 {
        "(none before)".into()
    } else {
        String::new()
    }
}

fn join(parts: &[&str]) -> String {
    parts
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The instant `unix_s` on the report's wall clock (the audit's one format).
fn when(unix_s: i64, zone: Zone) -> String {
    render::human(Unit::UnixS, &Value::Int(unix_s), zone)
}

/// The day (days since 1970-01-01) of instant `unix_s` on `zone`'s wall clock.
fn local_day(unix_s: i64, zone: Zone) -> i64 {
    let off = i64::from(zone.offset_s(unix_s).unwrap_or(0));
    unix_s.saturating_add(off).div_euclid(86_400)
}

/// The daily chart's categories: every day of the window on the report's wall clock (months as
/// the index has them, for a monthly report), in order.
fn day_categories(d: &Data, key: &str) -> Vec<String> {
    if d.monthly {
        let mut m: Vec<String> = (0..d.by_day.rows.len())
            .filter_map(|r| text_of(&d.by_day, r, key))
            .collect();
        m.sort();
        m.dedup();
        m
    } else {
        let zone = d.opts.zone;
        let (since, until) = (
            d.opts.window.since_unix_s.unwrap_or(0),
            d.opts.window.until_unix_s.unwrap_or(0),
        );
        let (first, last) = (
            local_day(since, zone),
            local_day(until.saturating_sub(1), zone),
        );
        // Bounded whatever the window: `gather` makes one longer than MAX_DAYS monthly, and
        // MAX_DAYS days touch at most MAX_DAYS + 2 days of a wall clock (part days at each
        // end, an hour's offset change); a window it did not check (issue 29 §4: its length
        // overflowed) cannot make a column per day of 10^16 years.
        let days = last.saturating_sub(first).clamp(0, super::MAX_DAYS + 1);
        (first..=first + days)
            .map(jobscope_audit::query::day_text)
            .collect()
    }
}

/// The daily chart's columns: the categories, and in front of them one "earlier" column for the
/// jobs that started before the first (they ended in the window) when there are any.
pub(super) struct Slots {
    pub(super) cats: Vec<String>,
    pub(super) earlier: bool,
}

impl Slots {
    /// The columns for `cats`, with "earlier" when a row of `by_day` starts before the first.
    pub(super) fn new(cats: Vec<String>, by_day: &Table, key: &str) -> Slots {
        let first = cats.first().cloned().unwrap_or_default();
        let earlier = (0..by_day.rows.len())
            .filter_map(|r| text_of(by_day, r, key))
            .any(|k| k < first);
        Slots { cats, earlier }
    }

    /// The column of day (or month) `k`; `None`: not in the chart.
    pub(super) fn of(&self, k: &str) -> Option<usize> {
        let first = self.cats.first().map_or("", String::as_str);
        if self.earlier && k < first {
            Some(0)
        } else {
            self.cats
                .iter()
                .position(|c| c == k)
                .map(|i| i + self.earlier as usize)
        }
    }

    /// The columns' labels: days as `11-18` (the year is in the window above), months whole.
    pub(super) fn labels(&self, monthly: bool) -> Vec<String> {
        let mut l: Vec<String> = Vec::new();
        if self.earlier {
            l.push("earlier".into());
        }
        l.extend(self.cats.iter().map(|c| {
            if monthly {
                c.clone()
            } else {
                c.get(5..).unwrap_or(c).to_string()
            }
        }));
        l
    }

    fn len(&self) -> usize {
        self.cats.len() + self.earlier as usize
    }
}

/// The daily chart's series: partitions by core-hours allocated, the largest first (then by name);
/// past the palette's colours, one "other".
pub(super) struct Series {
    pub(super) shown: Vec<Option<String>>,
    pub(super) other: bool,
}

impl Series {
    const MAX_PARTS: usize = 7;

    pub(super) fn of(by_partition: &Table) -> Series {
        let bp = by_partition;
        let mut parts: Vec<(Option<String>, f64)> = (0..bp.rows.len())
            .map(|r| {
                (
                    text_of(bp, r, "partition"),
                    num(bp, r, "core_hours_alloc").unwrap_or(0.0),
                )
            })
            .collect();
        parts.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Series {
            shown: parts
                .iter()
                .take(Self::MAX_PARTS)
                .map(|p| p.0.clone())
                .collect(),
            other: parts.len() > Self::MAX_PARTS,
        }
    }

    /// Each series' used and unused core-hours per column of `slots`, from the rows of
    /// `by_day_partition` (a partition not shown adds to "other"), as a solid and a pale segment.
    pub(super) fn stack(&self, by_day_partition: &Table, key: &str, slots: &Slots) -> Vec<Segment> {
        let series = self.shown.len() + self.other as usize;
        let n = slots.len();
        let mut used = vec![vec![0.0; n]; series];
        let mut unused = vec![vec![0.0; n]; series];
        let dp = by_day_partition;
        for r in 0..dp.rows.len() {
            let Some(k) = text_of(dp, r, key) else {
                continue;
            };
            let Some(c) = slots.of(&k) else { continue };
            let part = text_of(dp, r, "partition");
            let i = self
                .shown
                .iter()
                .position(|p| *p == part)
                .unwrap_or(series.saturating_sub(1));
            used[i][c] += num(dp, r, "core_hours_used").unwrap_or(0.0);
            unused[i][c] += num(dp, r, "core_hours_wasted").unwrap_or(0.0);
        }
        let mut segments = Vec::new();
        for i in 0..series {
            let label = match self.shown.get(i) {
                Some(p) => name(p.as_deref()),
                None => "other".into(),
            };
            segments.push(Segment {
                label: Some(label),
                shade: Shade {
                    hue: i,
                    pale: false,
                },
                values: std::mem::take(&mut used[i]),
            });
            segments.push(Segment {
                label: None,
                shade: Shade { hue: i, pale: true },
                values: std::mem::take(&mut unused[i]),
            });
        }
        segments
    }
}

impl Page {
    /// Words, tables and charts of `d`.
    pub fn new(d: &Data) -> Result<Page> {
        let mut p = Page {
            view: View {
                title: "jobscope cluster report".into(),
                subtitle: scope_words(d),
                window: String::new(),
                summary: Vec::new(),
                sections: Vec::new(),
                generated: format!(
                    "Made by {} at {} ({}) from the archive's audit index (jobscope audit report).",
                    jobscope_report::GENERATOR,
                    when(d.opts.generated_unix_s, d.opts.zone),
                    d.opts.zone.label()
                ),
            },
            charts: Vec::new(),
            subject: String::new(),
            warnings: Vec::new(),
        };
        let zone = d.opts.zone;
        let (since, until) = (
            d.opts.window.since_unix_s.unwrap_or(0),
            d.opts.window.until_unix_s.unwrap_or(0),
        );
        let span = span_words(d.span_s());
        p.view.window = format!(
            "Jobs that ended from {} to {} ({}, {span}), compared with the {span} before.",
            when(since, zone),
            when(until, zone),
            zone.label()
        );
        p.summary(d, &span);
        p.daily(d);
        p.top(
            d,
            GroupKey::User,
            "top-users",
            "Top wasters by user",
            &d.top_users,
        );
        p.top(
            d,
            GroupKey::Account,
            "top-accounts",
            "Top wasters by account",
            &d.top_accounts,
        );
        p.efficiency(d);
        p.heatmap(d);
        p.gpu(d);
        p.cpu_on_gpu(d);
        let t = &d.totals;
        p.subject = clean_line(
            &format!(
                "jobscope cluster report{}: {}, CPU efficiency {} {}",
                match p.view.subtitle.as_str() {
                    "the whole cluster" => String::new(),
                    s => format!(" ({s})"),
                },
                plural(count(num(t, 0, "jobs")), "job"),
                fmt_pct(num(t, 0, "cpu_eff_pct")),
                points(
                    num(t, 0, "cpu_eff_pct"),
                    num(&d.previous_totals, 0, "cpu_eff_pct")
                )
            ),
            SUBJECT_MAX_CHARS,
        );
        Ok(p)
    }

    /// Adds `view` to the section begun last.
    fn push_table(&mut self, view: TableView) {
        self.view
            .sections
            .last_mut()
            .expect("a section")
            .tables
            .push(view);
    }

    fn section(&mut self, id: &'static str, title: &str) -> &mut Section {
        self.view.sections.push(Section {
            id,
            title: title.to_string(),
            rule: "-".repeat(width(title)),
            chart: None,
            sentences: Vec::new(),
            tables: Vec::new(),
            pre: None,
        });
        self.view.sections.last_mut().expect("just pushed")
    }

    /// Draws a chart for the last section; a chart that cannot be drawn is left out with a
    /// warning and a sentence (its numbers are in the section's table all the same).
    fn chart(
        &mut self,
        key: &'static str,
        alt: String,
        height: u32,
        draw: impl FnOnce(u32, u32) -> Result<Vec<u8>, jobscope_report::charts::ChartError>,
    ) {
        match draw(CHART_WIDTH, height) {
            Ok(png) => {
                self.charts.push(Chart { key, png });
                let s = self.view.sections.last_mut().expect("a section");
                s.chart = Some(ChartView {
                    src: String::new(),
                    alt,
                    width: CHART_WIDTH,
                    height,
                });
            }
            Err(e) => {
                self.warnings.push(format!("{key} chart left out: {e}"));
                let s = self.view.sections.last_mut().expect("a section");
                s.sentences
                    .push(format!("(The chart could not be drawn: {e}.)"));
            }
        }
    }

    fn summary(&mut self, d: &Data, span: &str) {
        let (t, b) = (&d.totals, &d.previous_totals);
        let f = |col: &str| (num(t, 0, col), num(b, 0, col));
        let mut s = Vec::new();
        let (jobs, jobs_before) = f("jobs");
        s.push(format!(
            "{} ended; {} in the {span} before{}.",
            plural(count(jobs), "job"),
            count(jobs_before),
            // "0 in the 7 days before" says there is nothing to compare with.
            match change(jobs, jobs_before).as_str() {
                _ if count(jobs_before) == 0 => String::new(),
                "" => String::new(),
                c => format!(" {c}"),
            }
        ));
        for (what, col) in [
            ("CPU efficiency", "cpu_eff_pct"),
            ("Memory efficiency", "mem_eff_pct"),
            ("GPU efficiency", "gpu_eff_pct"),
        ] {
            let (c, p) = f(col);
            if c.is_some() || p.is_some() {
                s.push(join(&[what, &fmt_pct(c), &points(c, p)]));
            }
        }
        for (what, alloc, wasted, unused) in [
            (
                "Core-hours",
                "core_hours_alloc",
                "core_hours_wasted",
                "unused",
            ),
            (
                "Memory GB-hours",
                "mem_gb_hours_alloc",
                "mem_gb_hours_wasted",
                "unused",
            ),
            ("GPU-hours", "gpu_hours_alloc", "gpu_hours_wasted", "idle"),
        ] {
            let ((a, ap), (w, wp)) = (f(alloc), f(wasted));
            if a.is_none() && ap.is_none() {
                continue;
            }
            s.push(format!(
                "{}, {}.",
                join(&[what, "allocated", &fmt_hours(a), &change(a, ap)]),
                join(&[unused, &fmt_hours(w), &change(w, wp)])
            ));
        }
        self.view.summary = s;
    }

    /// The section "usage and waste per day (or month), by partition": its words, the stacked
    /// columns ([`day_categories`], [`Slots`], [`Series::of`], [`Series::stack`]) and two tables.
    fn daily(&mut self, d: &Data) {
        let zone = d.opts.zone;
        let key = if d.monthly { "month" } else { "day" };
        let per = if d.monthly { "month" } else { "day" };
        let s = self.section("daily", &format!("Usage and waste per {per}, by partition"));
        s.sentences.push(format!(
            "Core-hours allocated per {per}: used in the solid part, unused in the pale part above \
             it. A job counts in the window by its end and on the {per} it started ({}).",
            zone.label()
        ));
        let slots = Slots::new(day_categories(d, key), &d.by_day, key);
        let series = Series::of(&d.by_partition);
        let bars = Bars {
            title: format!("core-hours per {per} by partition: used (solid), unused (pale)"),
            unit: "core-hours".into(),
            categories: slots.labels(d.monthly),
            segments: series.stack(&d.by_day_partition, key, &slots),
            counts: false,
        };
        self.chart(
            "daily",
            format!(
                "Columns: core-hours per {per}, stacked by partition; the numbers are in the \
                 tables below."
            ),
            340,
            |w, h| plots::columns_png(std::slice::from_ref(&bars), w, h),
        );
        // Narrow enough for the page's column: the rest is in `jobscope audit usage`.
        let figures = [
            "jobs",
            "core_hours_alloc",
            "core_hours_used",
            "core_hours_wasted",
            "cpu_eff_pct",
            "mem_gb_hours_wasted",
            "mem_eff_pct",
            "gpu_hours_wasted",
        ];
        let mut cols = vec!["partition"];
        cols.extend(figures.iter().filter(|f| **f != "core_hours_used"));
        let by_part = table_view(
            "By partition".into(),
            &project(&d.by_partition, &cols),
            zone,
        );
        let mut cols = vec![key];
        cols.extend(&figures[..5]);
        let by_day = table_view(
            format!("By {per} (the jobs' start)"),
            &project(&d.by_day, &cols),
            zone,
        );
        self.push_table(by_part);
        self.push_table(by_day);
    }

    fn top(&mut self, d: &Data, by: GroupKey, id: &'static str, title: &str, tables: &[Table]) {
        let zone = d.opts.zone;
        let key = by.column();
        let s = self.section(id, title);
        s.sentences.push(format!(
            "The {key}s with the most allocated but unused core-hours, memory GB-hours and idle \
             GPU-hours, at most {} in each chart.",
            d.opts.top_n
        ));
        let titles = [
            "core-hours unused",
            "memory GB-hours unused",
            "GPU-hours idle",
        ];
        let units = ["core-hours", "GB-hours", "GPU-hours"];
        let mut panels = Vec::new();
        // Each group that has a bar in any panel, once, for the table.
        let mut rows: Vec<Vec<Value>> = Vec::new();
        let mut seen: Vec<Value> = Vec::new();
        let mut longest = 0;
        for (i, (t, m)) in tables.iter().zip(METRICS).enumerate() {
            let col = m.wasted_column();
            let ranked: Vec<usize> = (0..t.rows.len())
                .filter(|&r| num(t, r, col).is_some_and(|v| v > 0.0))
                .collect();
            longest = longest.max(ranked.len());
            let kc = t.column(key);
            for &r in &ranked {
                let k = kc.map(|c| t.rows[r][c].clone()).unwrap_or(Value::Null);
                if !seen.contains(&k) {
                    seen.push(k);
                    rows.push(t.rows[r].clone());
                }
            }
            panels.push(Bars {
                title: titles[i].into(),
                unit: units[i].into(),
                categories: ranked
                    .iter()
                    .map(|&r| name(text_of(t, r, key).as_deref()))
                    .collect(),
                segments: vec![Segment {
                    label: None,
                    shade: Shade {
                        hue: 2,
                        pale: false,
                    },
                    values: ranked
                        .iter()
                        .map(|&r| num(t, r, col).unwrap_or(0.0))
                        .collect(),
                }],
                counts: false,
            });
        }
        if rows.is_empty() {
            let s = self.view.sections.last_mut().expect("a section");
            s.sentences
                .push("Nothing allocated went unused in this window (or nothing ran).".into());
            return;
        }
        let height = (130 + 24 * longest as u32).clamp(200, 720);
        self.chart(
            id,
            format!(
                "Bars: the {key}s with the most unused hours; the numbers are in the table below."
            ),
            height,
            |w, h| plots::bars_png(&panels, w, h),
        );
        let Some(t) = tables.first() else { return };
        let mut all = Table {
            columns: t.columns.clone(),
            rows,
        };
        let by = |r: &Vec<Value>, c: &str| all_col(&all.columns, r, c);
        all.rows.sort_by(|a, b| {
            for c in [
                "core_hours_wasted",
                "mem_gb_hours_wasted",
                "gpu_hours_wasted",
            ] {
                let o = by(b, c).total_cmp(&by(a, c));
                if o.is_ne() {
                    return o;
                }
            }
            std::cmp::Ordering::Equal
        });
        let view = table_view(
            format!("Each {key} above, by core-hours unused"),
            &project(
                &all,
                &[
                    key,
                    "jobs",
                    "core_hours_wasted",
                    "cpu_eff_pct",
                    "mem_gb_hours_wasted",
                    "mem_eff_pct",
                    "gpu_hours_wasted",
                    "gpu_eff_pct",
                ],
            ),
            zone,
        );
        self.push_table(view);
    }

    fn efficiency(&mut self, d: &Data) {
        let zone = d.opts.zone;
        let s = self.section("efficiency", "CPU and memory efficiency of the jobs");
        let (cpu, mem) = (&d.cpu_eff, &d.mem_eff);
        let t = &d.totals;
        s.sentences.push(format!(
            "Jobs by their own CPU efficiency and memory efficiency (peak of the request). Over \
             all their hours: CPU {}, memory {}. Not counted: {} without a CPU figure and {} \
             without a memory figure (too short to judge, or not measured).",
            fmt_pct(num(t, 0, "cpu_eff_pct")),
            fmt_pct(num(t, 0, "mem_eff_pct")),
            plural(cpu.unknown, "job"),
            mem.unknown
        ));
        let labels = Distribution::labels();
        // The chart's title says "%": the columns' names go without, to fit under them.
        let short: Vec<String> = labels.iter().map(|l| l.replace(" %", "")).collect();
        let panel = |title: &str, dist: &Distribution, hue: usize| Bars {
            title: title.into(),
            unit: "jobs".into(),
            categories: short.clone(),
            segments: vec![Segment {
                label: None,
                shade: Shade { hue, pale: false },
                values: dist.jobs.iter().map(|&j| j as f64).collect(),
            }],
            counts: true,
        };
        let panels = [
            panel("jobs by CPU efficiency (%)", cpu, 0),
            panel("jobs by memory efficiency (%)", mem, 4),
        ];
        self.chart(
            "efficiency",
            "Columns: jobs by CPU and by memory efficiency; the numbers are in the table below."
                .into(),
            300,
            |w, h| plots::columns_png(&panels, w, h),
        );
        let mut table = Table::new(vec![
            Column::new("efficiency", ColType::Text, Unit::None),
            Column::new("jobs_by_cpu_eff", ColType::Int, Unit::None),
            Column::new("jobs_by_mem_eff", ColType::Int, Unit::None),
        ]);
        for (i, l) in labels.iter().enumerate() {
            table.rows.push(vec![
                Value::Text(l.clone()),
                Value::Int(cpu.jobs[i] as i64),
                Value::Int(mem.jobs[i] as i64),
            ]);
        }
        let view = table_view("Jobs per efficiency bucket".into(), &table, zone);
        self.push_table(view);
    }

    fn heatmap(&mut self, d: &Data) {
        const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
        let zone = d.opts.zone;
        let h = &d.heatmap;
        let values: Vec<Vec<f64>> = (0..h.rows.len())
            .map(|r| {
                (0..24)
                    .map(|hour| num(h, r, &format!("h{hour:02}")).unwrap_or(0.0))
                    .collect()
            })
            .collect();
        let s = self.section("heatmap", "When the cluster is used: hour of week");
        let mut busiest: Option<(usize, usize, f64)> = None;
        let mut table = Table::new(vec![
            Column::new("day_of_week", ColType::Int, Unit::Weekday),
            Column::new("core_hours_alloc", ColType::Float, Unit::Hours),
            Column::new("busiest_hour", ColType::Text, Unit::None),
            Column::new(
                "core_hours_alloc_in_busiest_hour",
                ColType::Float,
                Unit::Hours,
            ),
        ]);
        let mut week = 0.0;
        let mut weekend = 0.0;
        for (r, row) in values.iter().enumerate() {
            let total: f64 = row.iter().sum();
            week += total;
            if r >= 5 {
                weekend += total;
            }
            let (hour, top) =
                row.iter()
                    .enumerate()
                    .fold((0, 0.0), |a, (i, &v)| if v > a.1 { (i, v) } else { a });
            if busiest.is_none_or(|b| top > b.2) && top > 0.0 {
                busiest = Some((r, hour, top));
            }
            table.rows.push(vec![
                Value::Int(r as i64 + 1),
                Value::Float(total),
                if top > 0.0 {
                    Value::Text(format!("{hour:02}:00"))
                } else {
                    Value::Null
                },
                Value::Float(top),
            ]);
        }
        s.sentences.push(match busiest {
            Some((r, hour, top)) => format!(
                "Allocated core-hours by hour of the week ({}), each job spread over the hours it \
                 ran. Busiest hour: {} {hour:02}:00–{:02}:00, {} core-hours; Saturday and Sunday \
                 had {} of the week's {} core-hours.",
                zone.label(),
                DAYS[r.min(6)],
                (hour + 1) % 24,
                fmt_hours(Some(top)),
                fmt_pct((week > 0.0).then(|| 100.0 * weekend / week)),
                fmt_hours(Some(week))
            ),
            None => "No core-hours were allocated in this window.".into(),
        });
        s.pre = Some(render::heatmap(h, zone));
        let grid = Grid {
            title: format!("allocated core-hours by hour of week ({})", zone.label()),
            unit: "core-hours".into(),
            rows: DAYS.iter().map(|d| d.to_string()).collect(),
            cols: (0..24).map(|h| format!("{h:02}")).collect(),
            values,
        };
        self.chart(
            "heatmap",
            "Grid: allocated core-hours by weekday and hour, darker is busier; each day's total \
             and busiest hour are in the table below."
                .into(),
            300,
            |w, h| plots::grid_png(&grid, w, h),
        );
        let view = table_view("Per weekday".into(), &table, zone);
        self.push_table(view);
    }

    fn gpu(&mut self, d: &Data) {
        let zone = d.opts.zone;
        let t = &d.totals;
        let s = self.section("gpu-idle", "GPU-hours idle, by user");
        let alloc = num(t, 0, "gpu_hours_alloc");
        if alloc.is_none() {
            s.sentences.push("No jobs with GPUs in this window.".into());
            return;
        }
        let jobs = &d.gpu_idle_jobs;
        s.sentences.push(format!(
            "{} had a GPU idle or never used; {} of the {} GPU-hours allocated were idle \
             ({}). The idle share of a GPU's hours is the time its utilization stayed at the \
             idle mark.",
            plural(jobs.rows.len() as u64, "job"),
            fmt_hours(num(t, 0, "gpu_hours_wasted")),
            fmt_hours(alloc),
            fmt_pct(
                num(t, 0, "gpu_hours_wasted")
                    .zip(alloc)
                    .filter(|(_, a)| *a > 0.0)
                    .map(|(w, a)| 100.0 * w / a)
            )
        ));
        let Some(top) = d.top_users.get(2) else {
            return;
        };
        let ranked: Vec<usize> = (0..top.rows.len())
            .filter(|&r| num(top, r, "gpu_hours_wasted").is_some_and(|v| v > 0.0))
            .collect();
        if ranked.is_empty() {
            return;
        }
        let users: Vec<Option<String>> = ranked.iter().map(|&r| text_of(top, r, "user")).collect();
        let bars = Bars {
            title: "GPU-hours by user: idle and used".into(),
            unit: "GPU-hours".into(),
            categories: users.iter().map(|u| name(u.as_deref())).collect(),
            segments: vec![
                Segment {
                    label: Some("idle".into()),
                    shade: Shade {
                        hue: 2,
                        pale: false,
                    },
                    values: ranked
                        .iter()
                        .map(|&r| num(top, r, "gpu_hours_wasted").unwrap_or(0.0))
                        .collect(),
                },
                Segment {
                    label: Some("used".into()),
                    shade: Shade { hue: 2, pale: true },
                    values: ranked
                        .iter()
                        .map(|&r| num(top, r, "gpu_hours_used").unwrap_or(0.0))
                        .collect(),
                },
            ],
            counts: false,
        };
        let height = (130 + 24 * ranked.len() as u32).clamp(200, 720);
        self.chart(
            "gpu-idle",
            "Bars: GPU-hours idle and used of the users with the most idle; the numbers are in \
             the table below."
                .into(),
            height,
            |w, h| plots::bars_png(std::slice::from_ref(&bars), w, h),
        );
        // The users' rows with, from `gpu-idle`'s job list, how many of their jobs had an idle GPU.
        let mut table = project(
            top,
            &[
                "user",
                "gpu_hours_alloc",
                "gpu_hours_used",
                "gpu_hours_wasted",
                "gpu_eff_pct",
            ],
        );
        table.rows = ranked.iter().map(|&r| table.rows[r].clone()).collect();
        table.columns.insert(
            1,
            Column::new("jobs_with_idle_gpus", ColType::Int, Unit::None),
        );
        for (row, u) in table.rows.iter_mut().zip(&users) {
            let n = (0..jobs.rows.len())
                .filter(|&r| text_of(jobs, r, "user") == *u)
                .count();
            row.insert(1, Value::Int(n as i64));
        }
        let view = table_view("The users above".into(), &table, zone);
        self.push_table(view);
    }

    fn cpu_on_gpu(&mut self, d: &Data) {
        let zone = d.opts.zone;
        let c = &d.cpu_on_gpu;
        let s = self.section(
            "cpu-on-gpu",
            "CPU-only jobs on GPU partitions while they were busy",
        );
        if c.jobs == 0 {
            s.sentences.push(
                "No job without GPUs ran on a partition where jobs with GPUs ran in this window."
                    .into(),
            );
            return;
        }
        // Per partition: core-hours allocated of the jobs that started while it was busy, and of
        // the others.
        let mut parts = c.partitions.clone();
        parts.sort_by(|a, b| (b.1 + b.2).total_cmp(&(a.1 + a.2)).then(a.0.cmp(&b.0)));
        let busy_h: f64 = parts.iter().map(|p| p.1).sum();
        let names: Vec<String> = parts.iter().map(|p| name(p.0.as_deref())).collect();
        s.sentences.push(format!(
            "{} without GPUs ran on partitions where jobs with GPUs ran ({}); {} of them \
             started while their partition was busy (at least {} % of its cores seen allocated), \
             {} core-hours in all.",
            plural(c.jobs, "job"),
            names.join(", "),
            c.busy_jobs,
            d.opts.busy_pct,
            fmt_hours(Some(busy_h))
        ));
        let bars = Bars {
            title: "core-hours of CPU-only jobs on GPU partitions".into(),
            unit: "core-hours".into(),
            categories: names,
            segments: vec![
                Segment {
                    label: Some("started while busy".into()),
                    shade: Shade {
                        hue: 1,
                        pale: false,
                    },
                    values: parts.iter().map(|p| p.1).collect(),
                },
                Segment {
                    label: Some("otherwise".into()),
                    shade: Shade { hue: 1, pale: true },
                    values: parts.iter().map(|p| p.2).collect(),
                },
            ],
            counts: false,
        };
        let height = (130 + 30 * parts.len() as u32).clamp(180, 600);
        self.chart(
            "cpu-on-gpu",
            "Bars: core-hours of CPU-only jobs per GPU partition, while busy and otherwise; the \
             numbers are in the sentence above and the table below."
                .into(),
            height,
            |w, h| plots::bars_png(std::slice::from_ref(&bars), w, h),
        );
        // The job list is the largest first (cpu-on-gpu's order).
        let busy = project(
            &c.busy,
            &[
                "job_id",
                "name",
                "user",
                "account",
                "partition",
                "start_unix_s",
                "elapsed_s",
                "alloc_cores",
                "core_hours_alloc",
                "partition_busy_pct",
            ],
        );
        let caption = if busy.rows.len() as u64 == c.busy_jobs {
            format!(
                "The {} that started while busy, by core-hours allocated",
                plural(c.busy_jobs, "job")
            )
        } else {
            format!(
                "The {} largest of the {} that started while busy, by core-hours allocated",
                busy.rows.len(),
                plural(c.busy_jobs, "job")
            )
        };
        let view = table_view(caption, &busy, zone);
        self.push_table(view);
    }

    /// The Content-ID of a chart in the mail (made of the section's id: no user text).
    pub fn cid(key: &str) -> String {
        format!("cluster-{key}@jobscope")
    }

    fn render_html(&self, src: impl Fn(&Chart) -> String) -> Result<String> {
        let mut v = self.view.clone();
        for s in &mut v.sections {
            if let Some(c) = &mut s.chart {
                let chart = self
                    .charts
                    .iter()
                    .find(|x| x.key == s.id)
                    .context("a chart without its picture")?;
                c.src = src(chart);
            }
        }
        let mut h = registry(true);
        h.register_template_string("cluster.html", HTML_TEMPLATE)
            .context("the built-in cluster report template")?;
        Ok(h.render("cluster.html", &v)?)
    }

    /// The page: one HTML file, every chart in it as a `data:` URI.
    pub fn html(&self) -> Result<String> {
        self.render_html(|c| {
            format!(
                "data:image/png;base64,{}",
                base64::engine::general_purpose::STANDARD.encode(&c.png)
            )
        })
    }

    /// The text: the same sentences (wrapped) and tables, the heat map in characters.
    pub fn text(&self) -> Result<String> {
        let mut v = self.view.clone();
        v.window = wrap(&v.window, TEXT_COLUMNS, "");
        v.generated = wrap(&v.generated, TEXT_COLUMNS, "");
        for l in &mut v.summary {
            *l = wrap(l, TEXT_COLUMNS - 2, "  ");
        }
        for s in &mut v.sections {
            for l in &mut s.sentences {
                *l = wrap(l, TEXT_COLUMNS, "");
            }
        }
        let mut h = registry(false);
        h.register_template_string("cluster.txt", TEXT_TEMPLATE)
            .context("the built-in cluster report template")?;
        Ok(h.render("cluster.txt", &v)?)
    }

    /// The mail: the text, and the HTML with its charts as inline parts (`cid:`), from `from` to
    /// `to`, under queue id `id`.
    pub fn mail(&self, id: &str, from: &Mailbox, to: &[Mailbox]) -> Result<Mail> {
        let html = self.render_html(|c| format!("cid:{}", Page::cid(c.key)))?;
        let images = self
            .charts
            .iter()
            .map(|c| InlineImage {
                cid: Page::cid(c.key),
                png: c.png.clone(),
            })
            .collect();
        let message = assemble(
            id,
            from,
            to,
            self.subject.clone(),
            self.text()?,
            html,
            images,
        )?;
        Ok(Mail {
            id: id.to_string(),
            message,
            warnings: self.warnings.clone(),
        })
    }
}

/// Sentences in the text part are wrapped at this many characters.
const TEXT_COLUMNS: usize = 90;

fn all_col(cols: &[Column], r: &[Value], c: &str) -> f64 {
    cols.iter()
        .position(|x| x.name == c)
        .and_then(|i| r.get(i)?.as_f64())
        .filter(|v| v.is_finite())
        .unwrap_or(f64::NEG_INFINITY)
}

/// `the whole cluster`, or the scope's filters in words: `account physics, partition gpu`.
fn scope_words(d: &Data) -> String {
    let f = &d.opts.filters;
    let mut parts = Vec::new();
    for (list, what) in f.text_columns() {
        if !list.is_empty() {
            let names: Vec<String> = list.iter().map(|s| name(Some(s))).collect();
            parts.push(format!("{what} {}", names.join(", ")));
        }
    }
    if parts.is_empty() {
        "the whole cluster".into()
    } else {
        parts.join("; ")
    }
}

/// The queue id of the report mail of `d`: its window, and its scope made safe for a file name
/// (with a hash of it, so two scopes that read alike apart from odd characters stay two mails).
/// The same window and scope is the same mail: run twice, it is queued once.
pub fn mail_id(d: &Data) -> String {
    let scope = scope_words(d);
    let safe: String = scope
        .chars()
        .take(48)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    // FNV-1a (64 bits): a stable short digest, not a secret.
    let hash = scope.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!(
        "cluster-report.{}.{}.{safe}.{:08x}",
        d.opts.window.since_unix_s.unwrap_or(0),
        d.opts.window.until_unix_s.unwrap_or(0),
        hash as u32
    )
}
