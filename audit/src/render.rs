//! An audit [`Table`] for people (an aligned table, the heat map as shaded cells) or for scripts
//! (CSV, JSON, Parquet). Untrusted text (job names, accounts) is cleaned of control characters before
//! it reaches a terminal; CSV quotes per RFC 4180 and defuses spreadsheet formulas.

use super::query::{GroupKey, Query, Report, Zone};
use super::table::{ColType, Table, Unit, Value};
use anyhow::Result;
use chrono::FixedOffset;
use jobscope_report::present::{
    clean_line, clean_line_cols, fmt_bytes, fmt_duration, fmt_hours, width,
};

const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// A job's start or end on the zone's wall clock: `2026-11-22 14:05` in UTC (the column's
/// header says UTC), `2026-03-29 03:30 +02:00` elsewhere (daylight saving gives one zone two
/// offsets, and the autumn hour is read twice: each time carries its own).
fn fmt_time(unix_s: i64, zone: Zone) -> String {
    let at = zone
        .offset_s(unix_s)
        .and_then(FixedOffset::east_opt)
        .and_then(|o| jobscope_model::time::in_zone(unix_s, &o));
    match at {
        None => format!("@{unix_s}"),
        // A zone named UTC (`TZ=UTC`, `Etc/UTC`) has no other offset: its header says so once.
        Some(t) if is_utc(zone) => t.format("%Y-%m-%d %H:%M").to_string(),
        Some(t) => t.format("%Y-%m-%d %H:%M %:z").to_string(),
    }
}

/// An instant for a sentence: [`fmt_time`], with `UTC` after it where the time carries no offset.
pub fn when(unix_s: i64, zone: Zone) -> String {
    let t = fmt_time(unix_s, zone);
    if is_utc(zone) {
        format!("{t} UTC")
    } else {
        t
    }
}

/// Zone names that are UTC under another spelling (`/etc/localtime` → `Etc/UTC` on Debian): their
/// times need no offset, as UTC's do not.
const UTC_NAMES: &[&str] = &[
    "UTC",
    "Etc/UTC",
    "UCT",
    "Etc/UCT",
    "Universal",
    "Etc/Universal",
    "Zulu",
    "Etc/Zulu",
];

fn is_utc(zone: Zone) -> bool {
    zone == Zone::Utc || UTC_NAMES.contains(&zone.label().as_str())
}

/// The widest a table for people is by default, in characters: what a terminal shows without
/// wrapping ([`text_within`]).
pub const TABLE_WIDTH_CHARS: usize = 120;

/// The most characters a free-text cell (a job name, an account) shows when nothing else bounds it.
const TEXT_CELL_CHARS: usize = 40;

/// The fewest characters a free-text column is narrowed to when a table must fit its width: enough
/// to tell most names apart (the full name is in `--wide`, CSV and JSON).
const TEXT_MIN_CHARS: usize = 8;

/// Columns of free text from users and sites (names, accounts, partitions): the ones cut short,
/// with an ellipsis, when a table must fit. Vocabulary (state, class) and times are never cut.
const FREE_TEXT: &[&str] = &[
    "cluster",
    "name",
    "user",
    "group",
    "account",
    "partition",
    "qos",
    "node",
];

/// Each column's header for people, with its unit; a column not listed keeps its name. Times get
/// their zone in [`header`].
const LABELS: &[(&str, &str)] = &[
    ("job_id", "job"),
    ("array_job_id", "array job"),
    ("array_task_id", "array task"),
    ("elapsed_s", "elapsed"),
    ("node_count", "nodes"),
    ("alloc_cores", "cores"),
    ("alloc_gpus", "GPUs"),
    ("mem_peak_bytes", "mem peak"),
    ("core_hours_alloc", "core-h alloc"),
    ("core_hours_used", "core-h used"),
    ("core_hours_wasted", "core-h wasted"),
    ("cpu_eff_pct", "CPU eff %"),
    ("mem_gb_hours_alloc", "mem GB-h alloc"),
    ("mem_gb_hours_used", "mem GB-h used"),
    ("mem_gb_hours_wasted", "mem GB-h wasted"),
    ("mem_eff_pct", "mem eff %"),
    ("gpu_hours_alloc", "GPU-h alloc"),
    ("gpu_hours_used", "GPU-h used"),
    ("gpu_hours_wasted", "GPU-h wasted"),
    ("gpu_eff_pct", "GPU eff %"),
    ("gpu_energy_kwh", "GPU energy kWh"),
    ("cpu_wait_hours", "CPU wait-h"),
    ("gpus_idle", "GPUs idle"),
    ("gpus_never_used", "GPUs never used"),
    ("gpu_util_mean_pct", "GPU util %"),
    ("partition_busy_pct", "partition busy %"),
    ("hour_of_day", "hour"),
    ("day_of_week", "weekday"),
    // The cluster report's own tables (admin/src/cluster/page.rs).
    ("jobs_by_cpu_eff", "jobs by CPU eff"),
    ("jobs_by_mem_eff", "jobs by mem eff"),
    ("jobs_with_idle_gpus", "jobs with idle GPUs"),
    ("busiest_hour", "busiest hour"),
    (
        "core_hours_alloc_in_busiest_hour",
        "core-h alloc in busiest hour",
    ),
];

/// A column's header for people: its label with its unit, and a time says its zone
/// (`end (UTC)`, `hour (Europe/Oslo)`).
pub fn header(name: &str, zone: Zone) -> String {
    let label = LABELS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(name, |(_, l)| l);
    if let Some(what) = name.strip_suffix("_unix_s") {
        return format!("{what} ({})", zone.label());
    }
    let timed = [
        GroupKey::HourOfDay,
        GroupKey::DayOfWeek,
        GroupKey::Day,
        GroupKey::Month,
    ];
    if timed.iter().any(|k| k.column() == name) {
        return format!("{label} ({})", zone.label());
    }
    label.to_string()
}

/// One cell as a person reads it, by its column's declared [`Unit`]; the unit itself is in the
/// column's header, so hours and percentages are bare figures; bytes carry their binary unit,
/// durations theirs. A figure without a unit reads as the reports' figures do.
pub fn human(unit: Unit, v: &Value, zone: Zone) -> String {
    match (v, unit) {
        (Value::Null, _) => "-".into(),
        (Value::Bool(b), _) => if *b { "yes" } else { "no" }.into(),
        (Value::Text(s), _) => clean_line(s, TEXT_CELL_CHARS),
        (Value::Int(i), Unit::Bytes) => fmt_bytes(Some(*i as u64)),
        (Value::Int(i), Unit::UnixS) => fmt_time(*i, zone),
        (Value::Int(i), Unit::Weekday) => WEEKDAYS
            .get((*i - 1) as usize)
            .copied()
            .unwrap_or("?")
            .into(),
        (Value::Int(i), _) => i.to_string(),
        (Value::Float(f), _) if !f.is_finite() => "n/a".into(),
        (Value::Float(f), Unit::Pct) => format!("{f:.1}"),
        (Value::Float(f), Unit::DurationS) => fmt_duration(*f),
        (Value::Float(f), Unit::KWh) => format!("{f:.2}"),
        (Value::Float(f), _) => fmt_hours(Some(*f)),
    }
}

/// Which columns a table for people shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum View {
    /// The report's most useful columns ([`default_columns`]), fitted to [`TABLE_WIDTH_CHARS`].
    Default,
    /// Every column (`--wide`).
    Wide,
    /// These columns, by their names (`--columns`), in this order.
    Columns(Vec<String>),
}

/// The columns a report shows by default, most useful first, chosen so that the table fits
/// [`TABLE_WIDTH_CHARS`] with long names (a test holds every report to it). The heat map draws
/// all of its columns as its grid.
pub fn default_columns(q: &Query) -> Vec<String> {
    const USAGE: [&str; 6] = [
        "jobs",
        "core_hours_alloc",
        "core_hours_wasted",
        "cpu_eff_pct",
        "mem_eff_pct",
        "gpu_hours_wasted",
    ];
    let keys = || q.keys().into_iter().map(|k| k.column());
    let list: Vec<&str> = match &q.report {
        Report::Usage => keys().chain(USAGE).collect(),
        // The column it is ranked by next to the job count, then usage's.
        Report::TopWasters { metric, .. } => {
            let ranked = metric.wasted_column();
            keys()
                .chain(["jobs", ranked])
                .chain(USAGE.into_iter().filter(|c| *c != "jobs" && *c != ranked))
                .collect()
        }
        Report::GpuIdle => vec![
            "job_id",
            "user",
            "name",
            "end_unix_s",
            "alloc_gpus",
            "gpus_idle",
            "gpus_never_used",
            "gpu_hours_wasted",
        ],
        Report::CpuOnlyOnGpu { .. } => vec![
            "job_id",
            "user",
            "name",
            "partition",
            "end_unix_s",
            "alloc_cores",
            "core_hours_alloc",
            "partition_busy_pct",
            "busy",
        ],
        Report::Heatmap => return q.columns().into_iter().map(|c| c.name).collect(),
        Report::Jobs => vec![
            "job_id",
            "user",
            "name",
            "state",
            "end_unix_s",
            "elapsed_s",
            "cpu_eff_pct",
            "mem_eff_pct",
            "core_hours_wasted",
        ],
    };
    list.into_iter().map(String::from).collect()
}

/// The columns `view` shows of a report's answer `t` (what the query `q` asked): the defaults, all,
/// or those named (an unknown or repeated name is an error that lists the valid ones).
pub fn view(t: &Table, q: &Query, view: &View) -> Result<Table> {
    match view {
        View::Default => t.select(&default_columns(q)).map_err(anyhow::Error::msg),
        View::Wide => Ok(t.clone()),
        View::Columns(names) => t
            .select(names)
            .map_err(|e| anyhow::anyhow!("--columns: {e}")),
    }
}

/// The table for people: the heat map's grid, or [`text_within`] of the view's columns (fitted to
/// [`TABLE_WIDTH_CHARS`] unless `--wide`).
pub fn for_people(t: &Table, q: &Query, v: &View) -> Result<String> {
    if q.report == Report::Heatmap && *v == View::Default {
        return Ok(heatmap(t, q.zone));
    }
    let shown = view(t, q, v)?;
    let fit = (*v != View::Wide).then_some(TABLE_WIDTH_CHARS);
    Ok(text_within(&shown, q.zone, fit))
}

/// Aligned columns: text left, numbers right; a header line and a rule. Times on `zone`'s wall
/// clock (the query's), which their headers name. Every column, free text up to 40 characters.
pub fn text(t: &Table, zone: Zone) -> String {
    text_within(t, zone, None)
}

/// `s` in lines of at most `max_cols` terminal columns (a longer word alone on its line), each
/// after the first indented by `indent`. The one word wrapper of the audit's texts (the cluster
/// report, the alert mails).
pub fn wrap(s: &str, max_cols: usize, indent: &str) -> String {
    let mut out = String::new();
    let mut line = 0;
    for w in s.split_whitespace() {
        let n = width(w);
        // `41.0 %`: the sign stays with its number.
        let glued = w.starts_with('%');
        if line > 0 && line + 1 + n > max_cols && !glued {
            out.push('\n');
            out.push_str(indent);
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(w);
        line += n;
    }
    out
}

/// [`text`], its lines at most `max_cols` terminal columns ([`width`]: a CJK character takes two)
/// where that can be had by cutting free text ([`FREE_TEXT`]: names, accounts) short with an ellipsis, widest column first, down to
/// [`TEXT_MIN_CHARS`] or its header. Numbers, times and vocabulary are never cut.
pub fn text_within(t: &Table, zone: Zone, max_cols: Option<usize>) -> String {
    let cells: Vec<Vec<String>> = t
        .rows
        .iter()
        .map(|r| {
            r.iter()
                .zip(&t.columns)
                .map(|(v, c)| human(c.unit, v, zone))
                .collect()
        })
        .collect();
    let names: Vec<String> = t.columns.iter().map(|c| header(&c.name, zone)).collect();
    let col_width = |c: usize| {
        cells
            .iter()
            .map(|r| width(&r[c]))
            .chain([width(&names[c])])
            .max()
            .unwrap_or(0)
    };
    let mut widths: Vec<usize> = (0..t.columns.len()).map(col_width).collect();
    if let Some(max) = max_cols {
        let floor = |c: usize| {
            if FREE_TEXT.contains(&t.columns[c].name.as_str()) {
                width(&names[c]).max(TEXT_MIN_CHARS)
            } else {
                usize::MAX
            }
        };
        let total = |w: &[usize]| w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1);
        while total(&widths) > max {
            // The widest column that may still give a character.
            let Some(c) = (0..widths.len())
                .filter(|&c| widths[c] > floor(c))
                .max_by_key(|&c| (widths[c], std::cmp::Reverse(c)))
            else {
                break;
            };
            widths[c] -= 1;
        }
    }
    let right = |c: usize| !matches!(t.columns[c].kind, ColType::Text);
    let spaces = |s: &mut String, n: usize| s.extend(std::iter::repeat_n(' ', n));
    let line = |s: &mut String, vals: &[String]| {
        let from = s.len();
        for (c, v) in vals.iter().enumerate() {
            if c > 0 {
                s.push_str("  ");
            }
            // Cut short to the column (only free text is ever longer), the cut shown by `…`.
            let w = width(v);
            let cut;
            let (v, w) = if w > widths[c] {
                cut = clean_line_cols(v, widths[c]);
                (&cut, width(&cut))
            } else {
                (v, w)
            };
            let pad = widths[c].saturating_sub(w);
            if right(c) {
                spaces(s, pad);
                s.push_str(v);
            } else {
                s.push_str(v);
                if c + 1 < vals.len() {
                    spaces(s, pad);
                }
            }
        }
        let end = from + s[from..].trim_end().len();
        s.truncate(end);
        s.push('\n');
    };
    let mut out = String::new();
    line(&mut out, &names);
    line(
        &mut out,
        &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(),
    );
    for r in &cells {
        line(&mut out, r);
    }
    if t.rows.is_empty() {
        out.push_str("(no jobs match)\n");
    }
    out
}

/// The hour-of-week heat map: one line per weekday, one shaded cell per hour (scaled to the
/// busiest hour), the day's total, and the scale; the hours are `zone`'s, which the title names.
pub fn heatmap(t: &Table, zone: Zone) -> String {
    const SHADES: [char; 5] = [' ', '░', '▒', '▓', '█'];
    let vals: Vec<Vec<f64>> = t
        .rows
        .iter()
        .map(|r| {
            r.iter()
                .skip(1)
                .map(|v| v.as_f64().unwrap_or(0.0))
                .collect()
        })
        .collect();
    let max = vals.iter().flatten().copied().fold(0.0, f64::max);
    let mut out = format!("allocated core-hours by hour of week ({})\n", zone.label());
    out.push_str(&format!(
        "{:<5}{:<24}  {:>9}\n",
        "", "00    06    12    18", "total"
    ));
    for (d, row) in vals.iter().enumerate() {
        out.push_str(&format!("{:<5}", WEEKDAYS.get(d).copied().unwrap_or("?")));
        for &v in row {
            let i = if max > 0.0 && v > 0.0 {
                (1.0 + (v / max) * 3.999).floor().min(4.0) as usize
            } else {
                0
            };
            out.push(SHADES[i]);
        }
        out.push_str(&format!("  {:>9}\n", fmt_hours(Some(row.iter().sum()))));
    }
    out.push_str(&format!(
        "scale: ░ up to 25 %, ▒ 50 %, ▓ 75 %, █ up to {} core-hours in one hour cell\n",
        fmt_hours(Some(max))
    ));
    out
}

fn csv_field(s: &str) -> String {
    // A leading =, +, - or @ is a formula to a spreadsheet (and a leading tab or carriage return
    // hides one from the eye): defuse it with a quote.
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) && s.parse::<f64>().is_err() {
        format!("'{s}")
    } else {
        s.to_string()
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// RFC 4180 CSV with a header; nulls are empty fields; figures unrounded.
pub fn csv(t: &Table) -> String {
    let mut out = t
        .columns
        .iter()
        .map(|c| csv_field(&c.name))
        .collect::<Vec<_>>()
        .join(",");
    out.push_str("\r\n");
    for r in &t.rows {
        let line: Vec<String> = r
            .iter()
            .map(|v| match v {
                Value::Null => String::new(),
                Value::Int(i) => i.to_string(),
                Value::Float(f) => f.to_string(),
                Value::Bool(b) => b.to_string(),
                Value::Text(s) => csv_field(s),
            })
            .collect();
        out.push_str(&line.join(","));
        out.push_str("\r\n");
    }
    out
}

/// A JSON array of objects, one per row, keys = column names; nulls stay null.
pub fn json(t: &Table) -> Result<String> {
    let rows: Vec<serde_json::Map<String, serde_json::Value>> = t
        .rows
        .iter()
        .map(|r| {
            t.columns
                .iter()
                .zip(r)
                .map(|(c, v)| (c.name.clone(), serde_json::to_value(v).unwrap_or_default()))
                .collect()
        })
        .collect();
    Ok(serde_json::to_string_pretty(&rows)? + "\n")
}

/// The table as one Parquet file (the columns' types as in the table).
pub fn parquet(t: &Table, out: impl std::io::Write + Send) -> Result<()> {
    let cols: Vec<(&str, ColType)> = t
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.kind))
        .collect();
    let batch = super::arrow::batch_of(&cols, &t.rows)?;
    let mut w = parquet::arrow::ArrowWriter::try_new(out, batch.schema(), None)?;
    w.write(&batch)?;
    w.close()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Column;

    #[test]
    fn a_cell_reads_as_its_columns_declared_unit_whatever_the_name() {
        let z = Zone::Utc;
        assert_eq!(human(Unit::Weekday, &Value::Int(1), z), "Mon");
        assert_eq!(human(Unit::Weekday, &Value::Int(7), z), "Sun");
        assert_eq!(human(Unit::None, &Value::Int(1), z), "1");
        assert_eq!(human(Unit::Pct, &Value::Float(150.0), z), "150.0");
        assert_eq!(human(Unit::Hours, &Value::Float(150.0), z), "150");
        assert_eq!(human(Unit::KWh, &Value::Float(150.0), z), "150.00");
        assert_eq!(human(Unit::Pct, &Value::Float(f64::NAN), z), "n/a");
        // The name is for scripts: a `_pct` name declared in hours reads as hours.
        let mut t = Table::new(vec![Column::new("odd_pct", ColType::Float, Unit::Hours)]);
        t.rows.push(vec![Value::Float(150.0)]);
        let text = text(&t, z);
        assert!(text.lines().any(|l| l.trim() == "150"), "{text}");
    }

    #[test]
    fn every_figure_column_of_every_report_declares_its_unit() {
        let reports = [
            Report::Usage,
            Report::TopWasters {
                metric: crate::query::WasteMetric::CoreHours,
                n: 1,
            },
            Report::GpuIdle,
            Report::CpuOnlyOnGpu { busy_pct: 50.0 },
            Report::Heatmap,
            Report::Jobs,
        ];
        for r in reports {
            let mut q = Query::new(r);
            q.group_by = vec![GroupKey::DayOfWeek, GroupKey::User];
            for c in q.columns() {
                assert!(
                    c.kind != ColType::Float || c.unit != Unit::None,
                    "{}: a figure without a unit",
                    c.name
                );
            }
        }
        let q = Query::new(Report::Heatmap);
        assert_eq!(q.columns()[0].unit, Unit::Weekday);
    }

    fn t() -> Table {
        Table {
            columns: vec![
                Column::new("user", ColType::Text, Unit::None),
                Column::new("jobs", ColType::Int, Unit::None),
                Column::new("cpu_eff_pct", ColType::Float, Unit::Pct),
            ],
            rows: vec![
                vec![
                    Value::Text("al,\"ice\"".into()),
                    Value::Int(3),
                    Value::Float(48.94),
                ],
                vec![
                    Value::Text("=cmd()\x1b[2J".into()),
                    Value::Int(12),
                    Value::Null,
                ],
            ],
        }
    }

    #[test]
    fn text_is_aligned_and_cleaned() {
        let s = text(&t(), Zone::Utc);
        let lines: Vec<&str> = s.lines().collect();
        // The escape sequence's ESC is dropped and splits the words: `=cmd() [2J`, 10 characters.
        // The unit is in the header, the figures right-aligned under it.
        assert_eq!(lines[0], "user        jobs  CPU eff %");
        assert_eq!(lines[1], "----------  ----  ---------");
        assert_eq!(lines[2], "al,\"ice\"       3       48.9");
        assert_eq!(lines[3], "=cmd() [2J    12          -");
        assert!(!s.contains('\x1b'), "{s:?}");
    }

    /// Every report, grouped by every key where it groups.
    fn every_query() -> Vec<Query> {
        let mut reports = vec![
            Report::Usage,
            Report::GpuIdle,
            Report::CpuOnlyOnGpu { busy_pct: 80.0 },
            Report::Heatmap,
            Report::Jobs,
        ];
        reports.extend(
            crate::query::WasteMetric::ALL
                .iter()
                .map(|&metric| Report::TopWasters { metric, n: 10 }),
        );
        let mut out = Vec::new();
        for r in reports {
            let mut q = Query::new(r);
            q.group_by = GroupKey::ALL.to_vec();
            out.push(q);
        }
        out
    }

    #[test]
    fn every_column_of_every_report_has_a_header_for_people() {
        for q in every_query() {
            for c in q.columns() {
                let h = header(&c.name, Zone::Utc);
                // A column without a label would show its machine name, `core_hours_alloc`.
                let bare = c.name.contains('_') && !c.name.starts_with('h');
                assert!(!(bare && h.contains('_')), "{}: {h}", c.name);
            }
            // The default columns are the report's own.
            let names: Vec<String> = q.columns().into_iter().map(|c| c.name).collect();
            for d in default_columns(&q) {
                assert!(names.contains(&d), "{:?}: {d}", q.report);
            }
        }
    }

    /// A CJK job name takes two terminal columns a character: the columns after it still line up,
    /// and a cut keeps the line within the width asked for, counted in columns.
    #[test]
    fn wide_characters_are_measured_in_terminal_columns() {
        let mut t = Table::new(vec![
            Column::new("name", ColType::Text, Unit::None),
            Column::new("state", ColType::Text, Unit::None),
        ]);
        for name in ["計算化学のシミュレーション", "plain-ascii-name"] {
            t.rows.push(vec![
                Value::Text(name.into()),
                Value::Text("COMPLETED".into()),
            ]);
        }
        // hand-counted: 13 wide characters = 26 columns, the widest name
        let out = text_within(&t, Zone::Utc, None);
        let lines: Vec<&str> = out.lines().collect();
        let state_col = |l: &str| {
            let at = l.find("COMPLETED").unwrap_or_else(|| panic!("{out}"));
            width(&l[..at])
        };
        // lines[1] is the header's rule
        assert_eq!(state_col(lines[2]), 26 + 2, "{out}");
        assert_eq!(state_col(lines[3]), 26 + 2, "{out}");
        // 20 columns: the name gets 20 - 2 - 9 = 9 columns: four wide characters and the ellipsis
        let fit = text_within(&t, Zone::Utc, Some(20));
        let lines: Vec<&str> = fit.lines().collect();
        assert!(lines.iter().all(|l| width(l) <= 20), "{fit}");
        assert!(lines[2].starts_with("計算化学…  COMPLETED"), "{fit}");
    }

    #[test]
    fn a_table_is_fitted_by_cutting_the_widest_free_text_only() {
        let mut t = Table::new(vec![
            Column::new("user", ColType::Text, Unit::None),
            Column::new("name", ColType::Text, Unit::None),
            Column::new("state", ColType::Text, Unit::None),
            Column::new("core_hours_wasted", ColType::Float, Unit::Hours),
        ]);
        t.rows.push(vec![
            Value::Text("a-user-name-of-twenty".into()),
            Value::Text("a job name of thirty-one chars".into()),
            Value::Text("OUT_OF_MEMORY".into()),
            Value::Float(1234567.0),
        ]);
        // Natural: 21 + 30 + 13 + 13 (the header `core-h wasted`) + 3 × 2 = 83.
        let wide = text_within(&t, Zone::Utc, None);
        assert_eq!(wide.lines().map(|l| l.chars().count()).max(), Some(83));
        // 60: 23 characters go, from the name first (30 → 21), then from both in turn (21 → 14);
        // each cut name keeps 13 characters and its ellipsis.
        let fit = text_within(&t, Zone::Utc, Some(60));
        let lines: Vec<&str> = fit.lines().collect();
        assert!(lines.iter().all(|l| l.chars().count() <= 60), "{fit}");
        assert_eq!(
            lines[2],
            "a-user-name-o…  a job name of…  OUT_OF_MEMORY        1234567"
        );
        // Nothing but free text is cut: at 10 characters the names stop at 8, the rest stays.
        let tight = text_within(&t, Zone::Utc, Some(10));
        let row = tight.lines().nth(2).unwrap();
        assert!(
            row.contains("OUT_OF_MEMORY") && row.ends_with("1234567"),
            "{tight}"
        );
        assert!(row.starts_with("a-user-…  a job n…  "), "{tight}");
    }

    #[test]
    fn csv_quotes_and_defuses_formulas() {
        let s = csv(&t());
        assert_eq!(
            s,
            "user,jobs,cpu_eff_pct\r\n\"al,\"\"ice\"\"\",3,48.94\r\n'=cmd()\x1b[2J,12,\r\n"
        );
    }

    #[test]
    fn heat_map_shades_hours_under_aligned_headings() {
        let mut t = Table::new(
            std::iter::once(Column::new("day_of_week", ColType::Int, Unit::Weekday))
                .chain(
                    (0..24).map(|h| Column::new(&format!("h{h:02}"), ColType::Float, Unit::Hours)),
                )
                .collect(),
        );
        for d in 1..=7 {
            let mut r = vec![Value::Int(d)];
            r.extend((0..24).map(|h| {
                Value::Float(if d == 2 && h == 6 {
                    4.0
                } else if d == 2 && h == 7 {
                    1.0
                } else {
                    0.0
                })
            }));
            t.rows.push(r);
        }
        let s = heatmap(&t, Zone::Utc);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[1].find("06"), Some(11), "{s}");
        assert_eq!(
            lines[1].len(),
            lines[3].chars().count(),
            "total under the totals:\n{s}"
        );
        // Tuesday: 06h is the busiest (█), 07h a quarter of it (░).
        let tue: Vec<char> = lines[3].chars().collect();
        assert_eq!((tue[11], tue[12], tue[13]), ('█', '░', ' '), "{s}");
        assert!(lines[3].ends_with("5.00"), "{s}");
    }

    #[test]
    fn json_keeps_nulls() {
        let v: serde_json::Value = serde_json::from_str(&json(&t()).unwrap()).unwrap();
        assert_eq!(v[1]["cpu_eff_pct"], serde_json::Value::Null);
        assert_eq!(v[0]["jobs"], 3);
    }
}
