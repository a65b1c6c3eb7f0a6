//! `jobscope index update|rebuild` and `jobscope audit <report>`: arguments, who may see what, and
//! which engine answers (docs/audit.md).
//!
//! Access: root and members of `archive.admin_group` read the Parquet index (0750/0640
//! root:<admin group>, so nobody else can open it). Anyone else audits only their own jobs, read
//! from their read-only owner's copies (`<archive>/users/<uid>/`, archive.rs), and every row is
//! also filtered by their uid: another user's data never reaches them.

use anyhow::{bail, Context, Result};
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand, ValueEnum};
use jobscope_archive::{self as archive, Store};
use jobscope_audit::eval::MemEngine;
use jobscope_audit::index::{Index, ParquetEngine, Settings};
use jobscope_audit::query::{
    Engine, Filters, GroupKey, Query, Report, WasteMetric, Window, Zone, MAX_SPAN_S, MAX_TIME_S,
    MIN_TIME_S,
};
use jobscope_audit::render;
use jobscope_audit::row::JobRow;
use jobscope_config::Config;
use jobscope_model::job::JobState;
use jobscope_model::summary::analysis::JobClass;
use jobscope_model::vocab::Vocabulary;
use std::io::{IsTerminal, Write};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// `jobscope audit report`: the cluster report.
mod report;

#[derive(Subcommand, Debug)]
pub enum IndexCmd {
    /// Add what the archive gained since the last update (root; a timer runs it). On a
    /// terminal, standard error shows how far it is.
    Update {
        /// Print what was done as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Throw the index away and make it again from the archive (root).
    Rebuild {
        /// Print what was done as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
    Parquet,
}

/// Which engine answers a report.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    /// The Parquet index next to the archive.
    Index,
    /// The PostgreSQL database of `[postgres]` (docs/postgres.md): root (it reads the password file).
    Postgres,
}

/// Options every report takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Jobs that ended at or after this time: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM` (local time, or
    /// UTC with --utc; a four-digit year) or Unix seconds, from 0000-01-01 to 9999-12-31 UTC.
    // Hyphen values are taken so that negative Unix seconds get the range, not "unknown option".
    #[arg(long, allow_hyphen_values = true)]
    since: Option<String>,
    /// Jobs that ended before this time (same forms and range as --since); after --since.
    #[arg(long, allow_hyphen_values = true)]
    until: Option<String>,
    /// Jobs that ended in the last span: `7d`, `12h`, `2w`, `30m` (at most 3652425d).
    // Hyphen values are taken so that `--last -5d` is told the span cannot be negative, not that
    // `-5` is an unknown option.
    #[arg(long, conflicts_with = "since", allow_hyphen_values = true)]
    last: Option<String>,
    /// Only these users (comma-separated or repeated).
    #[arg(long, value_delimiter = ',')]
    user: Vec<String>,
    /// Only jobs of these Unix groups (the job's primary group; comma-separated or repeated).
    #[arg(long, value_delimiter = ',')]
    group: Vec<String>,
    /// Only jobs charged to these SLURM accounts (comma-separated or repeated).
    #[arg(long, value_delimiter = ',')]
    account: Vec<String>,
    /// Only jobs in these partitions (comma-separated or repeated).
    #[arg(long, value_delimiter = ',')]
    partition: Vec<String>,
    /// Only jobs of these QOS (comma-separated or repeated; a cluster without accounting has none).
    #[arg(long, value_delimiter = ',')]
    qos: Vec<String>,
    /// Jobs that ran on any of these nodes.
    #[arg(long, value_delimiter = ',')]
    node: Vec<String>,
    /// SLURM states (COMPLETED, FAILED, TIMEOUT, …; any case).
    #[arg(long, value_delimiter = ',')]
    state: Vec<String>,
    /// Classes (cpu_bound or cpu-bound, memory_bound, io_bound, idle, mixed, gpu_bound, gpu_idle,
    /// insufficient_data).
    #[arg(long, value_delimiter = ',')]
    class: Vec<String>,
    /// Jobs that ran at least this long (`90s`, `10m`, `2h`; at most 3652425d).
    #[arg(long, allow_hyphen_values = true)]
    min_elapsed: Option<String>,
    /// Only jobs with GPUs.
    #[arg(long, conflicts_with = "no_gpu")]
    gpu: bool,
    /// Only jobs without GPUs.
    #[arg(long)]
    no_gpu: bool,
    /// Output: an aligned table (default: the report's main columns, 120 characters at most),
    /// csv, json, or parquet (to --output, or to a pipe); csv, json and parquet have every column.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Only these columns, in this order, by their csv names (`--columns user,jobs,cpu_eff_pct`),
    /// in the table and in csv, json and parquet; a name that is not one is refused with the list.
    #[arg(long, value_delimiter = ',', conflicts_with = "wide")]
    columns: Vec<String>,
    /// The table with every column of the report (wider than a terminal), names up to 40
    /// characters.
    #[arg(long)]
    wide: bool,
    /// Which engine answers: the Parquet index, or PostgreSQL (root; docs/postgres.md).
    #[arg(long, value_enum, default_value = "index")]
    engine: EngineKind,
    /// Say on standard error what answered: the index's rollups (for which months) and job parts,
    /// or the job parts alone and why (docs/audit.md, "Rollups").
    #[arg(long)]
    explain: bool,
    /// Write the output to this file instead of standard output. It must be new: a file,
    /// symlink or FIFO already at the path is refused (nothing is overwritten), and a symlink on
    /// the way is followed only if root or you own it.
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Hours and days in UTC instead of local time.
    #[arg(long)]
    utc: bool,
    /// At most this many rows (job lists: jobs, gpu-idle, cpu-on-gpu).
    #[arg(long, allow_hyphen_values = true, value_parser = count)]
    limit: Option<u64>,
}

#[derive(Subcommand, Debug)]
pub enum AuditCmd {
    /// Jobs, core-/GB-/GPU-hours allocated, used and wasted, weighted efficiencies, energy, per group.
    Usage {
        /// Group by these keys (comma-separated): cluster, user, group, account, partition, qos,
        /// node, state, class, hour, day-of-week, day, month.
        #[arg(long, value_delimiter = ',')]
        by: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Who wasted the most (grouped by --by, default user), ranked by wasted --metric hours.
    Top {
        /// Rank these groups (comma-separated keys, as for `usage --by`) [default: user].
        #[arg(long, value_delimiter = ',')]
        by: Vec<String>,
        /// Rank by wasted core-hours, memory GB-hours or GPU-hours.
        #[arg(long, default_value = "core", value_parser = spelled::<WasteMetric>())]
        metric: WasteMetric,
        /// How many groups to list (the most wasteful first).
        #[arg(short = 'n', long = "top", default_value_t = 10, allow_hyphen_values = true,
              value_parser = count)]
        n: u64,
        #[command(flatten)]
        common: Common,
    },
    /// GPU jobs with idle or never-used GPUs, most GPU-hours wasted first.
    GpuIdle {
        #[command(flatten)]
        common: Common,
    },
    /// Jobs without GPUs on partitions that have GPU jobs, marked when the partition was busy.
    CpuOnGpu {
        /// Busy: at least this share of the partition's observed cores allocated at the job's start
        /// [default: audit.busy_pct].
        #[arg(long)]
        busy_pct: Option<f64>,
        #[command(flatten)]
        common: Common,
    },
    /// Allocated core-hours by hour of week, as a shaded grid.
    Heatmap {
        #[command(flatten)]
        common: Common,
    },
    /// A job list like sacct, oldest end first.
    Jobs {
        #[command(flatten)]
        common: Common,
    },
    /// The cluster report with charts (admins): as text, one HTML page or a mail.
    ///
    /// Usage and waste per day by partition, the top wasters by user and by account, the
    /// distribution of CPU and memory efficiency, the hour-of-week heat map, idle GPU-hours by
    /// user, CPU-only jobs on busy GPU partitions, and the trend against the window before
    /// (docs/audit.md, "The cluster report").
    Report(report::ReportArgs),
}

pub fn index_settings(cfg: &Config) -> Settings {
    Settings {
        dir: cfg.audit.index_dir(&cfg.paths.archive_dir),
        admin_gid: jobscope_common::users::group_id(&cfg.archive.admin_group).unwrap_or(0),
        compact_parts: cfg.audit.compact_parts,
        lock_stale_s: cfg.audit.lock_stale_s,
        lock_wait_s: 60,
        report: cfg.report.clone(),
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Root, or a member of the archive's admin group (primary or supplementary).
pub fn is_admin(cfg: &Config) -> bool {
    if euid() == 0 {
        return true;
    }
    let Some(gid) = jobscope_common::users::group_id(&cfg.archive.admin_group) else {
        return false;
    };
    // SAFETY: getegid cannot fail; getgroups writes at most the given count into the buffer.
    if unsafe { libc::getegid() } == gid {
        return true;
    }
    let mut groups = vec![0 as libc::gid_t; 1024];
    let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
    n > 0 && groups[..n as usize].contains(&gid)
}

/// The archive directory, which must be there: a missing one is said as such, with its path,
/// not as the first file that could not be made in it (the index lock) or as "no jobs".
fn archive_dir(cfg: &Config) -> Result<&std::path::Path> {
    let dir = cfg.paths.archive_dir.as_path();
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(dir),
        Ok(_) => bail!(
            "the archive directory {} (paths.archive_dir) is not a directory",
            dir.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "the archive directory {} (paths.archive_dir) is missing: no job has been archived \
             there, or the configuration names another place",
            dir.display()
        ),
        Err(e) => Err(e).with_context(|| {
            format!(
                "the archive directory {} (paths.archive_dir)",
                dir.display()
            )
        }),
    }
}

/// An index update's progress on standard error, one line rewritten in place, when standard error
/// is a terminal; nothing when it is piped or logged (the timer's journal gets the result only).
struct ProgressLine {
    tty: bool,
    shown_at: Option<std::time::Instant>,
}

impl ProgressLine {
    fn new() -> ProgressLine {
        ProgressLine {
            tty: std::io::stderr().is_terminal(),
            shown_at: None,
        }
    }

    fn show(&mut self, p: jobscope_audit::index::Progress) {
        use jobscope_audit::index::Progress;
        if !self.tty {
            return;
        }
        let (done, total, text) = match p {
            Progress::Day { done, total, date } => (
                done,
                total,
                format!("indexing day {done}/{total} ({date}) …"),
            ),
            Progress::Record { done, total } => {
                (done, total, format!("indexing new record {done}/{total} …"))
            }
            Progress::Month { done, total, month } => (
                done,
                total,
                format!("writing the index of {month} ({done}/{total}) …"),
            ),
        };
        // Ten times a second is as fast as anyone reads; the last of each count is always shown.
        let now = std::time::Instant::now();
        if done < total
            && self
                .shown_at
                .is_some_and(|t| now.duration_since(t).as_millis() < 100)
        {
            return;
        }
        self.shown_at = Some(now);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{text}");
        let _ = err.flush();
    }
}

impl Drop for ProgressLine {
    /// The line is cleared: what follows (the result, an error) starts on a clean line.
    fn drop(&mut self) {
        if self.shown_at.is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

/// [`Index::update`] with its progress shown on a terminal.
fn update_index(idx: &Index, rebuild: bool) -> Result<jobscope_audit::index::UpdateReport> {
    let mut line = ProgressLine::new();
    idx.update_with(rebuild, &mut |p| line.show(p))
}

pub fn index_cmd(cfg: &Config, cmd: IndexCmd) -> Result<()> {
    if euid() != 0 {
        bail!("the index is written by root (the archive's owner); run this as root");
    }
    let store = Store::new(archive_dir(cfg)?, &cfg.archive.admin_group);
    let idx = Index::new(&store, index_settings(cfg));
    let (rebuild, json) = match cmd {
        IndexCmd::Update { json } => (false, json),
        IndexCmd::Rebuild { json } => (true, json),
    };
    let t0 = std::time::Instant::now();
    let rep = update_index(&idx, rebuild)?;
    let secs = t0.elapsed().as_secs_f64();
    let after = jobscope_audit::after_update(cfg, &idx, &rep);
    if json {
        let mut v = serde_json::to_value(&rep)?;
        v["seconds"] = secs.into();
        v["after"] = serde_json::to_value(&after)?;
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        if rep.rebuilt {
            println!(
                "index rebuilt ({}): {} jobs in {:.2} s",
                rep.why.as_deref().unwrap_or("asked for"),
                rep.jobs_total,
                secs
            );
        } else {
            println!(
                "index updated: {} jobs added ({} days read, {} months rebuilt), {} jobs in all, {:.3} s",
                rep.jobs_added,
                rep.days_read,
                rep.months_rebuilt.len(),
                rep.jobs_total,
                secs
            );
        }
        if !rep.rebuilt {
            for r in &rep.rebuild_reasons {
                println!("  rebuilt {r}");
            }
        }
        for p in &rep.problems {
            println!("  not indexed: {p}");
        }
        for a in &after {
            println!("  {a}");
        }
    }
    Ok(())
}

/// The range of `--since` and `--until`, as the errors say it.
const TIME_RANGE: &str = "0000-01-01 to 9999-12-31 UTC (Unix seconds -62167219200 to 253402300799)";
/// The range of a span (`--last`, `--min-elapsed`), as the errors say it.
const SPAN_RANGE: &str = "0 to 3652425d (10 000 years)";

/// The time `s` given to `flag`: [`instant`], within [`MIN_TIME_S`]..=[`MAX_TIME_S`] (a window
/// past them overflowed the report's arithmetic, issue 29 §4). Errors name the argument.
fn parse_when(flag: &str, s: &str, zone: Zone) -> Result<i64> {
    let t = instant(s, zone).map_err(|e| anyhow::anyhow!("{flag} {e}"))?;
    match t {
        Some(t) if (MIN_TIME_S..=MAX_TIME_S).contains(&t) => Ok(t),
        _ => bail!("{flag} {s}: out of range: a time from {TIME_RANGE}"),
    }
}

/// `2026-11-01`, `2026-11-01T12:30` (or with a space) on `zone`'s wall clock, at that time's own
/// offset, or Unix seconds; `None`: a number of seconds past i64.
fn instant(s: &str, zone: Zone) -> Result<Option<i64>> {
    use chrono::format::ParseErrorKind;
    use chrono::{NaiveDate, NaiveDateTime, NaiveTime};
    if let Ok(n) = s.parse::<i64>() {
        return Ok(Some(n));
    }
    // Unix seconds that do not fit i64 are out of range, not a malformed date.
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(None);
    }
    // chrono's `%Y` takes any number of digits: `26-11-25` would be the year 26, and the report
    // would cover the whole archive without a word.
    let year = s.split('-').next().unwrap_or("");
    if s.contains('-') && !(year.len() == 4 && year.bytes().all(|b| b.is_ascii_digit())) {
        bail!("{s:?}: the year must have four digits (YYYY-MM-DD, e.g. 2026-11-25)");
    }
    // One form per shape, so the error is the one of the form meant.
    let wall = if s.contains('T') {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M")
    } else if s.contains(' ') {
        NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M")
    } else {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").map(|d| d.and_time(NaiveTime::MIN))
    };
    let wall = wall.map_err(|e| match e.kind() {
        ParseErrorKind::OutOfRange | ParseErrorKind::Impossible => {
            anyhow::anyhow!("{s:?}: there is no such date or time")
        }
        _ => anyhow::anyhow!("{s:?}: expected YYYY-MM-DD, YYYY-MM-DDTHH:MM or Unix seconds"),
    })?;
    zone.instant_of(wall).map(Some)
}

/// `90s`, `10m`, `12h`, `7d`, `2w` given to `flag` (a bare number is seconds): a duration, so `7d`
/// is 168 hours even across a daylight-saving change; at most [`MAX_SPAN_S`]. Errors name the
/// argument.
fn parse_span(flag: &str, s: &str) -> Result<i64> {
    let s = s.trim();
    if s.starts_with('-') {
        bail!("{flag} {s:?}: a duration cannot be negative (`7d` is the last 7 days)");
    }
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let unit_s: i64 = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ if num.is_empty() => bail!("{flag} {s:?}: expected a number and s, m, h, d or w"),
        _ => bail!("{flag} {s:?}: the unit must be s, m, h, d or w"),
    };
    if num.is_empty() {
        bail!("{flag} {s:?}: expected a number and s, m, h, d or w");
    }
    // All digits: a number that does not parse is too large, like one whose seconds are.
    match num.parse::<i64>().ok().and_then(|n| n.checked_mul(unit_s)) {
        Some(span) if span <= MAX_SPAN_S => Ok(span),
        _ => bail!("{flag} {s}: out of range: a span from {SPAN_RANGE}"),
    }
}

/// The start of a window `span` seconds before `end`, which must not be before [`MIN_TIME_S`];
/// `what` names the arguments that made it.
fn start_before(end: i64, span: i64, what: &str) -> Result<i64> {
    match end.checked_sub(span) {
        Some(t) if t >= MIN_TIME_S => Ok(t),
        _ => {
            bail!("{what}: the window would start before 0000-01-01 (times run from {TIME_RANGE})")
        }
    }
}

/// The group keys of `--by`: each known, none empty (`--by ,` is a slip, not "no grouping"), none
/// twice (`--by user,user` would print the same column twice).
fn keys(by: &[String]) -> Result<Vec<GroupKey>> {
    let valid = || {
        format!(
            "{}, hour, day-of-week",
            GroupKey::ALL.map(|k| k.column()).join(", ")
        )
    };
    let mut keys: Vec<GroupKey> = Vec::with_capacity(by.len());
    for s in by {
        if s.trim().is_empty() {
            bail!(
                "--by {:?}: an empty key; give one or more of {} (leave --by out for no grouping)",
                by.join(","),
                valid()
            );
        }
        let k = GroupKey::parse(s).with_context(|| format!("--by {s:?}: one of {}", valid()))?;
        if keys.contains(&k) {
            bail!("--by {:?}: {} is given twice", by.join(","), k.column());
        }
        keys.push(k);
    }
    Ok(keys)
}

/// A filter's values as given, none empty: `--user ,` or `--user alice,` is a slip that would
/// otherwise match nothing (or a user with no name) and read as "no such jobs".
fn listed(flag: &str, given: &[String]) -> Result<Vec<String>> {
    if given.iter().any(|s| s.trim().is_empty()) {
        bail!(
            "{flag} {:?}: an empty value in the list (comma-separated, none empty)",
            given.join(",")
        );
    }
    Ok(given.to_vec())
}

/// A count of rows (`-n`, `--limit`): a whole number, 1 or more (0 would print an empty report,
/// and `-3` is not an option but a mistyped count).
fn count(s: &str) -> std::result::Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("a count of rows must be a whole number, 1 or more".into()),
    }
}

/// A clap parser for a vocabulary: lists every spelling in `--help` and completions, and takes
/// them the way [`Vocabulary::parse`] does (any case, `-` or `_`).
fn spelled<T: Vocabulary + Send + Sync>() -> impl TypedValueParser<Value = T> {
    let names = T::all()
        .iter()
        .flat_map(|v| std::iter::once(v.spelling()).chain(v.aliases().iter().copied()));
    PossibleValuesParser::new(names.map(PossibleValue::new).collect::<Vec<_>>())
        .try_map(|s| T::parse(&s).ok_or_else(|| format!("one of {}", T::spellings())))
}

/// The values of a filter as archived (`cpu-bound` → `cpu_bound`), or one line naming the valid
/// ones: a misspelt value would otherwise match nothing and read as "no such jobs".
fn archived<T: Vocabulary>(flag: &str, given: &[String]) -> Result<Vec<String>> {
    listed(flag, given)?
        .iter()
        .map(|s| match T::parse(s) {
            Some(v) => Ok(v.spelling().to_string()),
            None => bail!(
                "{flag} {s:?}: one of {} (`-` or `_`, any case)",
                T::spellings()
            ),
        })
        .collect()
}

fn query(c: &Common, report: Report, group_by: Vec<GroupKey>) -> Result<Query> {
    let zone = if c.utc { Zone::Utc } else { Zone::Local };
    let now_s = (jobscope_common::now_unix_ms() / 1000) as i64;
    let since = match (&c.since, &c.last) {
        (Some(s), _) => Some(parse_when("--since", s, zone)?),
        (None, Some(l)) => Some(start_before(
            now_s,
            parse_span("--last", l)?,
            &format!("--last {l}"),
        )?),
        (None, None) => None,
    };
    let until = c
        .until
        .as_deref()
        .map(|u| parse_when("--until", u, zone))
        .transpose()?;
    // A window that ends before it starts holds no job: a report of nothing with exit 0 would
    // read as "nobody ran anything", so it is refused, naming both ends as given.
    if let (Some(s), Some(u)) = (since, until) {
        if s >= u {
            let from = match (&c.since, &c.last) {
                (Some(given), _) => format!("--since {given}"),
                (None, Some(span)) => format!("--last {span} (from {})", render::when(s, zone)),
                (None, None) => format!("the start, {}", render::when(s, zone)),
            };
            bail!(
                "{from} is not before --until {}: no job can have ended in that window",
                c.until.as_deref().unwrap_or_default()
            );
        }
    }
    Ok(Query {
        window: Window {
            since_unix_s: since,
            until_unix_s: until,
        },
        filters: Filters {
            uid: None,
            users: listed("--user", &c.user)?,
            groups: listed("--group", &c.group)?,
            accounts: listed("--account", &c.account)?,
            partitions: listed("--partition", &c.partition)?,
            qos: listed("--qos", &c.qos)?,
            nodes: listed("--node", &c.node)?,
            states: archived::<JobState>("--state", &c.state)?,
            classes: archived::<JobClass>("--class", &c.class)?,
            min_elapsed_s: c
                .min_elapsed
                .as_deref()
                .map(|m| parse_span("--min-elapsed", m))
                .transpose()?
                .map(|s| s as f64),
            gpu: match (c.gpu, c.no_gpu) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            },
        },
        group_by,
        report,
        limit: c.limit.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        zone,
    })
}

/// The index as an admin reads it; root brings it up to date first (cheap when nothing changed:
/// one stat per day).
fn admin_index(cfg: &Config) -> Result<ParquetEngine> {
    let store = Store::new(archive_dir(cfg)?, &cfg.archive.admin_group);
    let settings = index_settings(cfg);
    let dir = settings.dir.clone();
    if euid() == 0 {
        // Root brings the index up to date first (cheap when nothing changed: one stat per day).
        let rep = update_index(&Index::new(&store, settings), false)?;
        for p in &rep.problems {
            eprintln!("jobscope: not indexed: {p}");
        }
    }
    ParquetEngine::open(&dir)
}

/// A non-admin's own jobs: their owner's copies, each a regular file owned by root (the archive
/// writes them root's 0444; a file the user made is not theirs to vouch for) whose uid is theirs.
pub fn own_rows(cfg: &Config, uid: u32) -> Result<(Vec<JobRow>, Vec<String>)> {
    let dir = cfg.paths.archive_dir.join("users").join(uid.to_string());
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let listing = match archive::list(&dir) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((rows, notes)),
        Err(e) => return Err(e).with_context(|| format!("{}", dir.display())),
    };
    for r in listing
        .records
        .iter()
        .filter(|r| r.regular && r.name.is_some())
    {
        let p = dir.join(&r.file);
        let ok = std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file() && m.uid() == 0);
        if !ok {
            notes.push(format!("{}: not written by jobscope, skipped", r.file));
            continue;
        }
        let loaded = jobscope_common::fsutil::read_limited(&p, archive::MAX_DOC_BYTES)
            .map_err(anyhow::Error::from)
            .and_then(|b| archive::load(&b, &cfg.report));
        match loaded {
            Ok(l) if l.summary.uid == Some(uid) => rows.push(JobRow::of(&l.summary)),
            Ok(_) => notes.push(format!("{}: another user's job, skipped", r.file)),
            Err(e) => notes.push(format!("{}: {e:#}", r.file)),
        }
    }
    Ok((rows, notes))
}

pub fn audit_cmd(cfg: &Config, cmd: AuditCmd) -> Result<()> {
    let (report, by, common) = match cmd {
        AuditCmd::Usage { by, common } => (Report::Usage, keys(&by)?, common),
        AuditCmd::Top {
            by,
            metric,
            n,
            common,
        } => (
            Report::TopWasters {
                metric,
                n: usize::try_from(n).unwrap_or(usize::MAX),
            },
            keys(&by)?,
            common,
        ),
        AuditCmd::GpuIdle { common } => (Report::GpuIdle, vec![], common),
        AuditCmd::CpuOnGpu { busy_pct, common } => {
            let busy_pct = busy_pct.unwrap_or(cfg.audit.busy_pct);
            if !(busy_pct > 0.0 && busy_pct <= 100.0) {
                bail!("--busy-pct {busy_pct} is outside (0, 100]");
            }
            (Report::CpuOnlyOnGpu { busy_pct }, vec![], common)
        }
        AuditCmd::Heatmap { common } => (Report::Heatmap, vec![], common),
        AuditCmd::Jobs { common } => (Report::Jobs, vec![], common),
        AuditCmd::Report(args) => return report::run(cfg, args),
    };
    let mut q = query(&common, report, by)?;
    let view = match (common.wide, common.columns.is_empty()) {
        (true, _) => render::View::Wide,
        (false, true) => render::View::Default,
        (false, false) => render::View::Columns(common.columns.clone()),
    };
    let table = if common.engine == EngineKind::Postgres {
        if euid() != 0 {
            bail!(
                "--engine postgres is for root (it reads [postgres] password_file); a user with a \
                 database role of their own queries the database directly and sees only their jobs \
                 (docs/postgres.md)"
            );
        }
        if common.explain {
            eprintln!("jobscope: answered by PostgreSQL (docs/postgres.md)");
        }
        jobscope_audit::pg::engine::PgEngine::new(jobscope_audit::pg::connect(&cfg.postgres)?)
            .run(&q)?
    } else if is_admin(cfg) {
        let eng = admin_index(cfg)?;
        if common.explain {
            eprintln!("jobscope: {}", eng.plan(&q).describe(&eng));
        }
        eng.run(&q)?
    } else {
        if common.explain {
            eprintln!(
                "jobscope: answered from your own archived jobs (the index, and its rollups, are                  read by root and the admin group)"
            );
        }
        archive_dir(cfg)?;
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        q.filters.uid = Some(uid);
        let (rows, notes) = own_rows(cfg, uid)?;
        for n in notes {
            eprintln!("jobscope: {n}");
        }
        let engine = MemEngine::new(&rows)?;
        // Nothing matched: say why the audit may look emptier than the cluster (their own jobs
        // only), on standard error so that csv and json stay as they are.
        let any = Query {
            report: Report::Jobs,
            limit: Some(1),
            ..q.clone()
        };
        if engine.run(&any)?.rows.is_empty() {
            eprintln!(
                "jobscope: no job of yours matches: you are not root nor in the admin group \
                 {:?} (archive.admin_group), so the audit sees only your own jobs",
                cfg.archive.admin_group
            );
        }
        engine.run(&q)?
    };
    let mut out: Box<dyn Write + Send> = match &common.output {
        Some(p) => Box::new(std::io::BufWriter::new(
            // Root may be writing into a directory a user controls: no planted link or FIFO is
            // followed, nothing already there is truncated (fsutil::create_output).
            jobscope_common::fsutil::create_output(p, 0o666)?,
        )),
        None => Box::new(std::io::stdout()),
    };
    // csv, json and parquet keep every column unless --columns names some.
    let table = match (&view, common.format) {
        (render::View::Columns(_), Format::Csv | Format::Json | Format::Parquet) => {
            render::view(&table, &q, &view)?
        }
        _ => table,
    };
    match common.format {
        Format::Table => out.write_all(render::for_people(&table, &q, &view)?.as_bytes())?,
        Format::Csv => out.write_all(render::csv(&table).as_bytes())?,
        Format::Json => out.write_all(render::json(&table)?.as_bytes())?,
        Format::Parquet => {
            if common.output.is_none() && std::io::stdout().is_terminal() {
                bail!("--format parquet writes binary: give --output FILE or a pipe");
            }
            render::parquet(&table, out)?;
            return Ok(());
        }
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_take_either_spelling_and_refuse_an_unknown_word() {
        let given = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            archived::<JobClass>("--class", &given(&["cpu-bound", "GPU_IDLE"])).unwrap(),
            ["cpu_bound", "gpu_idle"]
        );
        // An empty value (`--class cpu-bound,`) is a slip, not "no filter".
        let e = archived::<JobClass>("--class", &given(&["cpu-bound", " "])).unwrap_err();
        assert!(e.to_string().contains("an empty value"), "{e}");
        assert_eq!(
            archived::<JobState>("--state", &given(&["out-of-memory", "completed"])).unwrap(),
            ["OUT_OF_MEMORY", "COMPLETED"]
        );
        let e = archived::<JobClass>("--class", &given(&["nope"])).unwrap_err();
        assert!(e.to_string().contains("cpu_bound, memory_bound"), "{e}");
    }

    #[derive(clap::Parser)]
    struct TopArgs {
        #[arg(long, default_value = "core", value_parser = spelled::<WasteMetric>())]
        metric: WasteMetric,
    }

    #[test]
    fn the_metric_takes_its_short_names_of_old_and_its_archived_ones() {
        use clap::Parser;
        let m = |args: &[&str]| {
            TopArgs::try_parse_from(std::iter::once("top").chain(args.iter().copied()))
                .map(|a| a.metric)
        };
        assert_eq!(m(&[]).unwrap(), WasteMetric::CoreHours);
        assert_eq!(m(&["--metric", "mem"]).unwrap(), WasteMetric::MemGbHours);
        assert_eq!(m(&["--metric", "gpu"]).unwrap(), WasteMetric::GpuHours);
        assert_eq!(
            m(&["--metric", "core_hours"]).unwrap(),
            WasteMetric::CoreHours
        );
        assert!(m(&["--metric", "disk"]).is_err());
    }

    #[derive(clap::Parser)]
    struct AuditArgs {
        #[command(subcommand)]
        cmd: AuditCmd,
    }

    #[derive(clap::Parser)]
    struct IndexArgs {
        #[command(subcommand)]
        cmd: IndexCmd,
    }

    #[test]
    fn every_option_of_every_audit_and_index_command_says_what_it_does() {
        use clap::CommandFactory;
        let mut checked = 0;
        for top in [AuditArgs::command(), IndexArgs::command()] {
            for sub in top.get_subcommands() {
                assert!(sub.get_about().is_some(), "{} has no help", sub.get_name());
                for a in sub.get_arguments() {
                    if a.get_id() == "help" {
                        continue;
                    }
                    let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
                    assert!(
                        !help.trim().is_empty(),
                        "`{} --{}` has no help text",
                        sub.get_name(),
                        a.get_id()
                    );
                    checked += 1;
                }
            }
        }
        // The ones the issue found bare among them.
        let audit = AuditArgs::command();
        let top = audit.find_subcommand("top").unwrap();
        for id in ["by", "n", "metric", "group", "account", "partition", "qos"] {
            assert!(
                top.get_arguments().any(|a| a.get_id() == id),
                "top has no {id}"
            );
        }
        assert!(checked > 100, "{checked} options checked");
    }

    #[test]
    fn group_keys_are_each_given_once_and_none_empty() {
        let by = |v: &[&str]| keys(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            by(&["user", "day-of-week"]).unwrap(),
            [GroupKey::User, GroupKey::DayOfWeek]
        );
        assert!(by(&[]).unwrap().is_empty(), "no --by: no grouping");
        let e = by(&["user", "user"]).unwrap_err().to_string();
        assert!(e.contains("user is given twice"), "{e}");
        // Two spellings of one key.
        let e = by(&["hour", "hour_of_day"]).unwrap_err().to_string();
        assert!(e.contains("hour_of_day is given twice"), "{e}");
        // `--by ,` reaches here as two empty values.
        let e = by(&["", ""]).unwrap_err().to_string();
        assert!(e.contains("an empty key"), "{e}");
        let e = by(&["usr"]).unwrap_err().to_string();
        assert!(e.contains("\"usr\"") && e.contains("partition"), "{e}");
    }

    #[test]
    fn times_and_spans_parse() {
        let when = |s: &str, zone: Zone| parse_when("--since", s, zone);
        assert_eq!(when("1700000000", Zone::Utc).unwrap(), 1_700_000_000);
        // 2024-02-29 13:05 UTC = 1709211900; the same wall time at UTC+1 is an hour earlier.
        assert_eq!(when("2024-02-29T13:05", Zone::Utc).unwrap(), 1_709_211_900);
        assert_eq!(
            when("2024-02-29 13:05", Zone::Fixed(3600)).unwrap(),
            1_709_208_300
        );
        assert_eq!(when("1970-01-01", Zone::Utc).unwrap(), 0);
        for bad in ["2024-13-01", "2026-02-30", "2026-01-01T24:00"] {
            let e = when(bad, Zone::Utc).unwrap_err().to_string();
            assert_eq!(e, format!("--since {bad:?}: there is no such date or time"));
        }
        let e = when("yesterday", Zone::Utc).unwrap_err().to_string();
        assert!(e.contains("expected YYYY-MM-DD"), "{e}");
        // chrono alone reads `26-11-25` as the year 26.
        for bad in [
            "26-11-25",
            "026-11-25",
            "+2026-11-25",
            "26-11-25T10:00",
            "20266-01-01",
        ] {
            let e = when(bad, Zone::Utc).unwrap_err().to_string();
            assert!(e.contains("the year must have four digits"), "{bad}: {e}");
        }
        assert_eq!(when("0001-01-01", Zone::Utc).unwrap(), -62_135_596_800);
        for bad in ["-5d", "-30m", " -1h"] {
            let e = parse_span("--last", bad).unwrap_err().to_string();
            assert!(e.contains("cannot be negative"), "{bad}: {e}");
        }
        let span = |s: &str| parse_span("--last", s);
        assert_eq!(span("7d").unwrap(), 604_800);
        assert_eq!(span("90").unwrap(), 90);
        assert_eq!(span("2w").unwrap(), 1_209_600);
        assert!(span("7y").is_err());
        assert!(span("d").is_err());
    }

    /// Issue 29 §4: times and spans at the ends of i64 (and just past the range) are one error
    /// naming the argument and the range; the ends of the range are taken. The instants are the
    /// calendar's (`date -u -d 0000-01-01 +%s`: -62167219200; 9999-12-31 23:59:59: 253402300799).
    #[test]
    fn times_and_spans_out_of_range_are_refused_naming_the_argument() {
        let first = -62_167_219_200;
        let last = 253_402_300_799;
        assert_eq!(
            parse_when("--since", "0000-01-01", Zone::Utc).unwrap(),
            first
        );
        assert_eq!(
            parse_when("--until", "9999-12-31T23:59", Zone::Utc).unwrap(),
            last - 59
        );
        assert_eq!(
            parse_when("--since", "-62167219200", Zone::Utc).unwrap(),
            first
        );
        assert_eq!(
            parse_when("--until", "253402300799", Zone::Utc).unwrap(),
            last
        );
        let huge = [
            i64::MIN.to_string(),
            i64::MAX.to_string(),
            "-62167219201".into(),
            "253402300800".into(),
            "9223372036854775808".into(),
            "-9223372036854775809".into(),
            "+99999999999999999999999".into(),
        ];
        for bad in &huge {
            for flag in ["--since", "--until"] {
                let e = parse_when(flag, bad, Zone::Utc).unwrap_err().to_string();
                assert_eq!(
                    e,
                    format!(
                        "{flag} {bad}: out of range: a time from 0000-01-01 to 9999-12-31 UTC \
                         (Unix seconds -62167219200 to 253402300799)"
                    )
                );
            }
        }
        // Midnight of 0000-01-01 an hour east of UTC is an hour before the range.
        let e = parse_when("--until", "0000-01-01", Zone::Fixed(3600)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--until 0000-01-01: out of range"),
            "{e}"
        );

        // 10 000 years of 365.2425 days.
        assert_eq!(parse_span("--last", "3652425d").unwrap(), 315_569_520_000);
        assert_eq!(parse_span("--min-elapsed", "0").unwrap(), 0);
        for bad in [
            "3652426d",
            "315569520001",
            "9223372036854775807",
            "9223372036854775808",
            "9223372036854775807w",
            "1317624576693539402w",
            "99999999999999999999999d",
        ] {
            for flag in ["--last", "--min-elapsed"] {
                let e = parse_span(flag, bad).unwrap_err().to_string();
                assert_eq!(
                    e,
                    format!("{flag} {bad}: out of range: a span from 0 to 3652425d (10 000 years)")
                );
            }
        }
        for bad in ["-9223372036854775808", "-9223372036854775808d"] {
            let e = parse_span("--last", bad).unwrap_err().to_string();
            assert!(e.starts_with("--last "), "{e}");
            assert!(e.contains("cannot be negative"), "{e}");
        }
        // A span back from a time: not before the range, and no overflow at the ends of i64.
        assert_eq!(start_before(first + 10, 10, "--last 10s").unwrap(), first);
        for (end, span) in [(first + 10, 11), (i64::MIN, 1), (i64::MIN, i64::MAX)] {
            let e = start_before(end, span, "--last x").unwrap_err().to_string();
            assert!(
                e.starts_with("--last x: the window would start before 0000-01-01"),
                "{e}"
            );
        }
    }
}
