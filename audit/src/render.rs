//! An audit [`Table`] for people (an aligned table, the heat map as shaded cells) or for scripts
//! (CSV, JSON, Parquet). Untrusted text (job names, accounts) is cleaned of control characters before
//! it reaches a terminal; CSV quotes per RFC 4180 and defuses spreadsheet formulas.

use super::query::{GroupKey, Zone};
use super::table::{ColType, Table, Value};
use anyhow::Result;
use chrono::FixedOffset;
use jobscope_report::present::{clean_line, fmt_bytes, fmt_duration, fmt_hours, fmt_pct};

const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// A job's start or end on the zone's wall clock: `2026-11-22 14:05` in UTC (the column's
/// header says UTC), `2026-03-29 03:30 +02:00` elsewhere (daylight saving gives one zone two
/// offsets, and the autumn hour is read twice: each time carries its own).
fn fmt_time(unix_s: i64, zone: Zone) -> String {
    let at = zone
        .offset_s(unix_s)
        .and_then(FixedOffset::east_opt)
        .and_then(|o| jobscope_sampler::time::in_zone(unix_s, &o));
    match at {
        None => format!("@{unix_s}"),
        // A zone named UTC (`TZ=UTC`) has no other offset: its header says so once.
        Some(t) if zone == Zone::Utc || zone.label() == "UTC" => {
            t.format("%Y-%m-%d %H:%M").to_string()
        }
        Some(t) => t.format("%Y-%m-%d %H:%M %:z").to_string(),
    }
}

/// A column's header for people: a time says its zone (`end (UTC)`, `hour_of_day (Europe/Oslo)`).
pub fn header(name: &str, zone: Zone) -> String {
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
        return format!("{name} ({})", zone.label());
    }
    name.to_string()
}

/// One cell as a person reads it; the unit is in the column's name, so `core_hours_alloc` reads as
/// hours, `*_pct` as a percentage, `*_bytes` in binary units.
pub fn human(name: &str, v: &Value, zone: Zone) -> String {
    match v {
        Value::Null => "-".into(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Text(s) => clean_line(s, 40),
        Value::Int(i) if name.ends_with("_bytes") => fmt_bytes(Some(*i as u64)),
        Value::Int(i) if name.ends_with("_unix_s") => fmt_time(*i, zone),
        Value::Int(i) if name == "day_of_week" => WEEKDAYS
            .get((*i - 1) as usize)
            .copied()
            .unwrap_or("?")
            .into(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) if name.ends_with("_pct") => fmt_pct(Some(*f)),
        Value::Float(f) if name == "elapsed_s" => fmt_duration(*f),
        Value::Float(f) if name.ends_with("_kwh") => format!("{f:.2}"),
        Value::Float(f) => fmt_hours(Some(*f)),
    }
}

/// Aligned columns: text left, numbers right; a header line and a rule. Times on `zone`'s wall
/// clock (the query's), which their headers name.
pub fn text(t: &Table, zone: Zone) -> String {
    let cells: Vec<Vec<String>> = t
        .rows
        .iter()
        .map(|r| {
            r.iter()
                .zip(&t.columns)
                .map(|(v, c)| human(&c.name, v, zone))
                .collect()
        })
        .collect();
    let names: Vec<String> = t.columns.iter().map(|c| header(&c.name, zone)).collect();
    let width = |c: usize| {
        cells
            .iter()
            .map(|r| r[c].chars().count())
            .chain([names[c].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..t.columns.len()).map(width).collect();
    let right = |c: usize| !matches!(t.columns[c].kind, ColType::Text);
    let line = |vals: &[String]| {
        let mut s = String::new();
        for (c, v) in vals.iter().enumerate() {
            if c > 0 {
                s.push_str("  ");
            }
            let pad = widths[c].saturating_sub(v.chars().count());
            if right(c) {
                s.push_str(&" ".repeat(pad));
                s.push_str(v);
            } else {
                s.push_str(v);
                if c + 1 < vals.len() {
                    s.push_str(&" ".repeat(pad));
                }
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(&names);
    out.push_str(&line(
        &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(),
    ));
    for r in &cells {
        out.push_str(&line(r));
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

    fn t() -> Table {
        Table {
            columns: vec![
                Column::new("user", ColType::Text),
                Column::new("jobs", ColType::Int),
                Column::new("cpu_eff_pct", ColType::Float),
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
        assert_eq!(lines[0], "user        jobs  cpu_eff_pct");
        assert_eq!(lines[1], "----------  ----  -----------");
        assert_eq!(lines[2], "al,\"ice\"       3       48.9 %");
        assert_eq!(lines[3], "=cmd() [2J    12            -");
        assert!(!s.contains('\x1b'), "{s:?}");
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
            std::iter::once(Column::new("day_of_week", ColType::Int))
                .chain((0..24).map(|h| Column::new(&format!("h{h:02}"), ColType::Float)))
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
