//! What an audit asks, independent of the engine that answers it (the Parquet index, PostgreSQL).
//! Every report's columns, order and rules are defined here, so two engines give the same
//! [`Table`] for the same [`Query`] (a test compares them).
//!
//! Common rules:
//! - The window selects jobs by their END time: `since_unix_s * 1000 <= end_unix_ms < until_unix_s * 1000`
//!   (either bound may be absent).
//! - A filter list that is empty does not filter; otherwise the row's value must equal one of the
//!   listed values exactly (a null never matches). `nodes`: any of the job's `node_list` entries.
//!   `gpu = Some(true)`: `alloc_gpus > 0`; `Some(false)`: `alloc_gpus` null or 0.
//!   `uid`: only that uid's rows (the access rule for a caller outside the admin group).
//! - Time keys (hour of day, day of week, day, month) are taken from the job's START
//!   (`start_unix_ms`) on the wall clock of the query's [`Zone`], with the offset of that zone at
//!   that instant (a job on each side of a daylight-saving change gets its own hour and day).
//! - Sums are over the non-null values; a sum with no value is null (never 0). Weighted
//!   efficiencies are `100 × Σ used ÷ Σ alloc` over the rows that have both figures (null when that
//!   Σ alloc is 0 or there are none).
//! - Grouping by `node`: a job counts once on each node of its `node_list`, with its additive
//!   figures (hours, energy) divided equally among those nodes.

use super::table::{ColType, Column, Table, Unit};
use chrono::{Datelike, FixedOffset, Local, NaiveDateTime, Offset, TimeZone, Timelike};
use jobscope_model::time;
use serde::Serialize;

pub type Result<T> = anyhow::Result<T>;

/// An engine answers queries over the rows it holds.
pub trait Engine {
    fn run(&self, q: &Query) -> Result<Table>;
}

/// The earliest instant a window's end may be: 0000-01-01 00:00:00 UTC, the first that a
/// four-digit year spells. With [`MAX_TIME_S`] and [`MAX_SPAN_S`] it keeps every sum made of a
/// window (its length, the window of the same length before it, its milliseconds) far inside i64:
/// `--since=-9223372036854775808` overflowed them (issue 29 §4).
pub const MIN_TIME_S: i64 = -62_167_219_200;
/// The latest: 9999-12-31 23:59:59 UTC.
pub const MAX_TIME_S: i64 = 253_402_300_799;
/// The longest span a window or a duration is given as (`--last`, `--min-elapsed`): 10 000 years
/// of 365.2425 days, 3 652 425 days.
pub const MAX_SPAN_S: i64 = 3_652_425 * 86_400;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Window {
    pub since_unix_s: Option<i64>,
    pub until_unix_s: Option<i64>,
}

impl Window {
    pub fn contains_end_ms(&self, end_unix_ms: i64) -> bool {
        self.since_unix_s
            .is_none_or(|s| end_unix_ms >= s.saturating_mul(1000))
            && self
                .until_unix_s
                .is_none_or(|u| end_unix_ms < u.saturating_mul(1000))
    }

    /// Whether each end given is within [`MIN_TIME_S`]..=[`MAX_TIME_S`].
    pub fn in_range(&self) -> bool {
        [self.since_unix_s, self.until_unix_s]
            .iter()
            .flatten()
            .all(|t| (MIN_TIME_S..=MAX_TIME_S).contains(t))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Filters {
    /// Only this uid's rows: set for every caller outside the admin group.
    pub uid: Option<u32>,
    pub users: Vec<String>,
    pub groups: Vec<String>,
    pub accounts: Vec<String>,
    pub partitions: Vec<String>,
    pub qos: Vec<String>,
    pub nodes: Vec<String>,
    /// State names as archived (`COMPLETED`, `TIMEOUT`, …: `JobState::as_str`).
    pub states: Vec<String>,
    /// Classes as archived (`cpu_bound`, `gpu_idle`, …: `JobClass::as_str`).
    pub classes: Vec<String>,
    pub min_elapsed_s: Option<f64>,
    pub gpu: Option<bool>,
}

impl Filters {
    /// The filters that keep rows whose text column equals one of the listed values, with that
    /// column (nodes match inside `node_list`, so they are not among them): one table for every
    /// engine.
    pub fn text_columns(&self) -> [(&[String], &'static str); 7] {
        [
            (&self.users, "user"),
            (&self.groups, "group"),
            (&self.accounts, "account"),
            (&self.partitions, "partition"),
            (&self.qos, "qos"),
            (&self.states, "state"),
            (&self.classes, "class"),
        ]
    }
}

/// The zone a query reads the wall clock in: its time keys, its heat map, its printed times.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Zone {
    /// UTC (`--utc`).
    #[default]
    Utc,
    /// The process's local zone (chrono's `Local`: `TZ`, else /etc/localtime), each instant with
    /// its own offset.
    Local,
    /// A fixed offset east of UTC, in seconds: a zone without daylight saving.
    Fixed(i32),
}

impl Zone {
    /// The zone's offset from UTC at a Unix time in seconds, seconds east; `None` past chrono's
    /// range (±262 000 years: no job's time).
    pub fn offset_s(self, unix_s: i64) -> Option<i32> {
        match self {
            Zone::Utc => Some(0),
            Zone::Fixed(o) => Some(o),
            Zone::Local => {
                time::in_zone(unix_s, &Local).map(|t| t.offset().fix().local_minus_utc())
            }
        }
    }

    /// Whether the offset is the same at every instant (UTC, a fixed offset).
    pub fn is_fixed(self) -> bool {
        !matches!(self, Zone::Local)
    }

    /// The instant (Unix seconds) a wall-clock time of this zone names: of the two a repeated
    /// autumn hour names, the earlier; an error for a time the clocks skip in spring.
    pub fn instant_of(self, wall: NaiveDateTime) -> anyhow::Result<i64> {
        let t = match self {
            Zone::Utc => Some(wall.and_utc().timestamp()),
            Zone::Fixed(o) => FixedOffset::east_opt(o)
                .and_then(|z| z.from_local_datetime(&wall).earliest())
                .map(|t| t.timestamp()),
            Zone::Local => Local
                .from_local_datetime(&wall)
                .earliest()
                .map(|t| t.timestamp()),
        };
        t.ok_or_else(|| {
            anyhow::anyhow!(
                "{}: there is no such time in {} (the clocks skip it)",
                wall.format("%Y-%m-%d %H:%M"),
                self.name().unwrap_or_else(|| "the local zone".into())
            )
        })
    }

    /// The zone's name as PostgreSQL's `AT TIME ZONE` and a reader take it: `UTC`, the local zone's
    /// (`TZ`, else the system's: /etc/localtime's link target or /etc/timezone), or a fixed offset
    /// as `+05:30`. `None`: the local zone has no name this process can find.
    pub fn name(self) -> Option<String> {
        match self {
            Zone::Utc => Some("UTC".into()),
            Zone::Fixed(o) => FixedOffset::east_opt(o).map(|z| z.to_string()),
            Zone::Local => local_zone_name(),
        }
    }

    /// How printed times name the zone: its name, or `local` when it has none.
    pub fn label(self) -> String {
        self.name().unwrap_or_else(|| "local".into())
    }
}

/// The local zone's name: `TZ` as the C library reads it (a leading `:` dropped; a path under a
/// `zoneinfo/` directory named by what follows; empty is UTC), else the system's.
/// Looked up once per process: every printed time asks (a table of times asked once per cell, a
/// look at /etc/localtime each time).
fn local_zone_name() -> Option<String> {
    static NAME: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    NAME.get_or_init(local_zone_name_now).clone()
}

fn local_zone_name_now() -> Option<String> {
    match std::env::var("TZ") {
        Ok(tz) => {
            let tz = tz.strip_prefix(':').unwrap_or(&tz);
            let tz = tz.rsplit_once("zoneinfo/").map_or(tz, |(_, n)| n);
            Some(if tz.is_empty() { "UTC" } else { tz }.to_string())
        }
        Err(_) => iana_time_zone::get_timezone().ok(),
    }
}

/// A grouping key. The output column is [`GroupKey::column`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKey {
    Cluster,
    User,
    Group,
    Account,
    Partition,
    Qos,
    Node,
    State,
    Class,
    /// 0–23 (Int).
    HourOfDay,
    /// ISO: 1 = Monday … 7 = Sunday (Int).
    DayOfWeek,
    /// `YYYY-MM-DD` (Text).
    Day,
    /// `YYYY-MM` (Text).
    Month,
}

impl GroupKey {
    pub const ALL: [GroupKey; 13] = [
        GroupKey::Cluster,
        GroupKey::User,
        GroupKey::Group,
        GroupKey::Account,
        GroupKey::Partition,
        GroupKey::Qos,
        GroupKey::Node,
        GroupKey::State,
        GroupKey::Class,
        GroupKey::HourOfDay,
        GroupKey::DayOfWeek,
        GroupKey::Day,
        GroupKey::Month,
    ];

    /// The output column's name (also the name on the command line).
    pub fn column(self) -> &'static str {
        match self {
            GroupKey::Cluster => "cluster",
            GroupKey::User => "user",
            GroupKey::Group => "group",
            GroupKey::Account => "account",
            GroupKey::Partition => "partition",
            GroupKey::Qos => "qos",
            GroupKey::Node => "node",
            GroupKey::State => "state",
            GroupKey::Class => "class",
            GroupKey::HourOfDay => "hour_of_day",
            GroupKey::DayOfWeek => "day_of_week",
            GroupKey::Day => "day",
            GroupKey::Month => "month",
        }
    }

    pub fn kind(self) -> ColType {
        match self {
            GroupKey::HourOfDay | GroupKey::DayOfWeek => ColType::Int,
            _ => ColType::Text,
        }
    }

    /// How people read the key: the weekday by its name, the others as they are.
    pub fn unit(self) -> Unit {
        match self {
            GroupKey::DayOfWeek => Unit::Weekday,
            _ => Unit::None,
        }
    }

    pub fn parse(s: &str) -> Option<GroupKey> {
        let s = s.trim().replace('-', "_");
        let s = match s.as_str() {
            "hour" => "hour_of_day",
            "weekday" | "dow" => "day_of_week",
            other => other,
        };
        GroupKey::ALL.into_iter().find(|k| k.column() == s)
    }
}

jobscope_model::vocab::vocabulary! {
    // The aliases are the short names `jobscope audit top --metric` has always taken.
    /// Which wasted resource ranks the top wasters.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    pub enum WasteMetric {
        CoreHours = "core_hours" | "core",
        MemGbHours = "mem_gb_hours" | "mem",
        GpuHours = "gpu_hours" | "gpu",
    }
}

impl WasteMetric {
    /// The usage column it ranks by (descending).
    pub fn wasted_column(self) -> &'static str {
        match self {
            WasteMetric::CoreHours => "core_hours_wasted",
            WasteMetric::MemGbHours => "mem_gb_hours_wasted",
            WasteMetric::GpuHours => "gpu_hours_wasted",
        }
    }
}

/// The reports. Output columns are given by [`Query::columns`]; the order of rows is below.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Report {
    /// Group keys, then [`USAGE_COLUMNS`]. One row per group, ordered by the keys ascending (null
    /// first). Without keys: exactly one row (jobs 0 and nulls when nothing matched).
    Usage,
    /// The usage rows (grouped by the query's keys; `user` when it has none), ordered by `metric`'s
    /// wasted column descending (null last), ties by the keys ascending, at most `n` rows.
    TopWasters { metric: WasteMetric, n: usize },
    /// Jobs with GPUs of which at least one was idle or never used (`gpus_idle > 0` or
    /// `gpus_never_used > 0`): [`JOB_COLUMNS`] then `gpus_idle`, `gpus_never_used`,
    /// `gpu_util_mean_pct`; ordered by `gpu_hours_wasted` descending (null last), then
    /// `end_unix_ms`, `job_id` ascending; at most `limit` rows (query's).
    GpuIdle,
    /// Jobs without GPUs (`alloc_gpus` null or 0) in a partition where at least one job in the
    /// window had GPUs. [`JOB_COLUMNS`] then `partition_busy_pct` (Float) and `busy` (Bool).
    /// `partition_busy_pct`: the cores allocated in that partition at the job's start instant
    /// (Σ `alloc_cores` of the window's jobs of the partition with `start_unix_ms <= t < end_unix_ms`,
    /// the job itself included) ÷ the largest such sum at any job start in that partition and
    /// window (the partition's observed capacity) × 100. `busy`: `partition_busy_pct >= busy_pct`.
    /// Ordered by `core_hours_alloc` descending (null last), then `end_unix_ms`, `job_id`.
    CpuOnlyOnGpu { busy_pct: f64 },
    /// Allocated core-hours by hour of week: columns `day_of_week` (Int 1–7) then `h00`…`h23`
    /// (Float). Each job's `alloc_cores` × the part of [start, end) inside each local hour.
    /// Always 7 rows, Monday first; an hour with nothing is 0.0 (a measured nothing, not unknown).
    Heatmap,
    /// Like `sacct`: [`JOB_COLUMNS`], ordered by `end_unix_ms`, then `job_id` ascending; at most
    /// `limit` rows (the first ones in that order).
    Jobs,
}

/// Usage/waste figures per group (after the group keys).
pub const USAGE_COLUMNS: &[(&str, ColType, Unit)] = &[
    ("jobs", ColType::Int, Unit::None),
    ("core_hours_alloc", ColType::Float, Unit::Hours),
    ("core_hours_used", ColType::Float, Unit::Hours),
    ("core_hours_wasted", ColType::Float, Unit::Hours),
    ("cpu_eff_pct", ColType::Float, Unit::Pct),
    ("mem_gb_hours_alloc", ColType::Float, Unit::Hours),
    ("mem_gb_hours_used", ColType::Float, Unit::Hours),
    ("mem_gb_hours_wasted", ColType::Float, Unit::Hours),
    ("mem_eff_pct", ColType::Float, Unit::Pct),
    ("gpu_hours_alloc", ColType::Float, Unit::Hours),
    ("gpu_hours_used", ColType::Float, Unit::Hours),
    ("gpu_hours_wasted", ColType::Float, Unit::Hours),
    ("gpu_eff_pct", ColType::Float, Unit::Pct),
    ("gpu_energy_kwh", ColType::Float, Unit::KWh),
    // the kernel view: time the jobs' tasks were runnable but waiting for a CPU
    ("cpu_wait_hours", ColType::Float, Unit::Hours),
];

/// A job's line in the job reports: the row's own values under the same names
/// (`start_unix_s`/`end_unix_s` are the ms figures ÷ 1000, truncated).
pub const JOB_COLUMNS: &[(&str, ColType, Unit)] = &[
    ("cluster", ColType::Text, Unit::None),
    ("job_id", ColType::Int, Unit::None),
    // The job's name as SLURM gave it (user text: cleaned for a terminal, quoted and defused in CSV).
    ("name", ColType::Text, Unit::None),
    ("array_job_id", ColType::Int, Unit::None),
    ("array_task_id", ColType::Int, Unit::None),
    ("user", ColType::Text, Unit::None),
    ("account", ColType::Text, Unit::None),
    ("partition", ColType::Text, Unit::None),
    ("state", ColType::Text, Unit::None),
    ("start_unix_s", ColType::Int, Unit::UnixS),
    ("end_unix_s", ColType::Int, Unit::UnixS),
    ("elapsed_s", ColType::Float, Unit::DurationS),
    ("node_count", ColType::Int, Unit::None),
    ("alloc_cores", ColType::Int, Unit::None),
    ("alloc_gpus", ColType::Int, Unit::None),
    ("cpu_eff_pct", ColType::Float, Unit::Pct),
    ("mem_peak_bytes", ColType::Int, Unit::Bytes),
    ("mem_eff_pct", ColType::Float, Unit::Pct),
    ("core_hours_alloc", ColType::Float, Unit::Hours),
    ("core_hours_wasted", ColType::Float, Unit::Hours),
    ("gpu_hours_wasted", ColType::Float, Unit::Hours),
    ("class", ColType::Text, Unit::None),
];

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Query {
    pub window: Window,
    pub filters: Filters,
    pub group_by: Vec<GroupKey>,
    pub report: Report,
    /// Most rows for the job reports (`None`: all).
    pub limit: Option<usize>,
    /// The zone of the time keys and the heat map.
    pub zone: Zone,
}

impl Query {
    pub fn new(report: Report) -> Query {
        Query {
            window: Window::default(),
            filters: Filters::default(),
            group_by: Vec::new(),
            report,
            limit: None,
            zone: Zone::Utc,
        }
    }

    /// The grouping keys the report uses (top wasters default to `user`).
    pub fn keys(&self) -> Vec<GroupKey> {
        match self.report {
            Report::TopWasters { .. } if self.group_by.is_empty() => vec![GroupKey::User],
            Report::Usage | Report::TopWasters { .. } => self.group_by.clone(),
            _ => Vec::new(),
        }
    }

    /// The answer's columns: what every engine must return, in this order.
    pub fn columns(&self) -> Vec<Column> {
        let cols = |list: &[(&str, ColType, Unit)]| {
            list.iter()
                .map(|(n, k, u)| Column::new(n, *k, *u))
                .collect::<Vec<_>>()
        };
        match &self.report {
            Report::Usage | Report::TopWasters { .. } => {
                let mut c: Vec<Column> = self
                    .keys()
                    .into_iter()
                    .map(|k| Column::new(k.column(), k.kind(), k.unit()))
                    .collect();
                c.extend(cols(USAGE_COLUMNS));
                c
            }
            Report::GpuIdle => {
                let mut c = cols(JOB_COLUMNS);
                c.push(Column::new("gpus_idle", ColType::Int, Unit::None));
                c.push(Column::new("gpus_never_used", ColType::Int, Unit::None));
                c.push(Column::new("gpu_util_mean_pct", ColType::Float, Unit::Pct));
                c
            }
            Report::CpuOnlyOnGpu { .. } => {
                let mut c = cols(JOB_COLUMNS);
                c.push(Column::new("partition_busy_pct", ColType::Float, Unit::Pct));
                c.push(Column::new("busy", ColType::Bool, Unit::None));
                c
            }
            Report::Heatmap => {
                let mut c = vec![Column::new("day_of_week", ColType::Int, Unit::Weekday)];
                c.extend(
                    (0..24).map(|h| Column::new(&format!("h{h:02}"), ColType::Float, Unit::Hours)),
                );
                c
            }
            Report::Jobs => cols(JOB_COLUMNS),
        }
    }

    pub fn empty_table(&self) -> Table {
        Table::new(self.columns())
    }
}

/// The time keys of a wall-clock reading: hour 0–23, ISO weekday 1–7 (Monday 1), the day as
/// days since 1970-01-01, the month as `year × 12 + month − 1`.
pub fn wall_keys(w: NaiveDateTime) -> (i64, i64, i64, i64) {
    (
        i64::from(w.hour()),
        i64::from(w.weekday().number_from_monday()),
        i64::from(w.date().to_epoch_days()),
        i64::from(w.year()) * 12 + i64::from(w.month0()),
    )
}

/// A day key (days since 1970-01-01) as `YYYY-MM-DD`.
pub fn day_text(days: i64) -> String {
    let (y, m, d) = time::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// A month key (`year × 12 + month − 1`) as `YYYY-MM`.
pub fn month_text(month: i64) -> String {
    format!(
        "{:04}-{:02}",
        month.div_euclid(12),
        month.rem_euclid(12) + 1
    )
}

/// The time keys of an instant (ms since the epoch, already shifted to the wall clock):
/// (hour 0–23, ISO weekday 1–7, `YYYY-MM-DD`, `YYYY-MM`); past chrono's range, its ends.
pub fn time_keys(local_ms: i64) -> (i64, i64, String, String) {
    let w = time::wall(local_ms.div_euclid(1000)).unwrap_or(if local_ms < 0 {
        NaiveDateTime::MIN
    } else {
        NaiveDateTime::MAX
    });
    let (hour, dow, day, month) = wall_keys(w);
    (hour, dow, day_text(day), month_text(month))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_keys_of_known_instants() {
        // 2024-02-29 13:05:00 UTC was a Thursday (leap day).
        assert_eq!(
            time_keys(1_709_211_900_000),
            (13, 4, "2024-02-29".into(), "2024-02".into())
        );
        // 1969-12-31 23:59:59 UTC, a Wednesday.
        assert_eq!(
            time_keys(-1000),
            (23, 3, "1969-12-31".into(), "1969-12".into())
        );
    }

    #[test]
    fn window_is_half_open_on_end_time() {
        let w = Window {
            since_unix_s: Some(100),
            until_unix_s: Some(200),
        };
        assert!(!w.contains_end_ms(99_999));
        assert!(w.contains_end_ms(100_000));
        assert!(w.contains_end_ms(199_999));
        assert!(!w.contains_end_ms(200_000));
    }

    #[test]
    fn group_keys_parse_from_their_column_names_and_aliases() {
        for k in GroupKey::ALL {
            assert_eq!(GroupKey::parse(k.column()), Some(k));
        }
        assert_eq!(GroupKey::parse("hour"), Some(GroupKey::HourOfDay));
        assert_eq!(GroupKey::parse("day-of-week"), Some(GroupKey::DayOfWeek));
        assert_eq!(GroupKey::parse("jobid"), None);
    }
}
