//! `jobscope index update|rebuild` and `jobscope audit <report>`: arguments, who may see what, and
//! which engine answers (docs/audit.md).
//!
//! Access: root and members of `archive.admin_group` read the Parquet index (0750/0640
//! root:<admin group>, so nobody else can open it). Anyone else audits only their own jobs, read
//! from their read-only owner's copies (`<archive>/users/<uid>/`, archive.rs), and every row is
//! also filtered by their uid: another user's data never reaches them.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use jobscope_archive::{self as archive, Store};
use jobscope_audit::eval::MemEngine;
use jobscope_audit::index::{Index, ParquetEngine, Settings};
use jobscope_audit::query::{Engine, Filters, GroupKey, Query, Report, WasteMetric, Window};
use jobscope_audit::render;
use jobscope_audit::row::JobRow;
use jobscope_sampler::config::Config;
use std::io::{IsTerminal, Write};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum IndexCmd {
    /// Add what the archive gained since the last update (root; a timer runs it).
    Update {
        #[arg(long)]
        json: bool,
    },
    /// Throw the index away and make it again from the archive (root).
    Rebuild {
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

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Metric {
    Core,
    Mem,
    Gpu,
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
    /// Jobs that ended at or after this time: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM` (local time) or Unix seconds.
    #[arg(long)]
    since: Option<String>,
    /// Jobs that ended before this time (same forms as --since).
    #[arg(long)]
    until: Option<String>,
    /// Jobs that ended in the last span: `7d`, `12h`, `2w`, `30m`.
    #[arg(long, conflicts_with = "since")]
    last: Option<String>,
    /// Only these users (comma-separated or repeated); likewise the other filters.
    #[arg(long, value_delimiter = ',')]
    user: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    group: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    account: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    partition: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    qos: Vec<String>,
    /// Jobs that ran on any of these nodes.
    #[arg(long, value_delimiter = ',')]
    node: Vec<String>,
    /// SLURM states (COMPLETED, FAILED, TIMEOUT, …).
    #[arg(long, value_delimiter = ',')]
    state: Vec<String>,
    /// Classes (cpu_bound, memory_bound, io_bound, idle, mixed, gpu_bound, gpu_idle).
    #[arg(long, value_delimiter = ',')]
    class: Vec<String>,
    /// Jobs that ran at least this long (`90s`, `10m`, `2h`).
    #[arg(long)]
    min_elapsed: Option<String>,
    /// Only jobs with GPUs.
    #[arg(long, conflicts_with = "no_gpu")]
    gpu: bool,
    /// Only jobs without GPUs.
    #[arg(long)]
    no_gpu: bool,
    /// Output: an aligned table (default), csv, json, or parquet (to --output, or to a pipe).
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Which engine answers: the Parquet index, or PostgreSQL (root; docs/postgres.md).
    #[arg(long, value_enum, default_value = "index")]
    engine: EngineKind,
    /// Write the output to this file instead of standard output.
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Hours and days in UTC instead of local time.
    #[arg(long)]
    utc: bool,
    /// At most this many rows (job lists).
    #[arg(long)]
    limit: Option<usize>,
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
        #[arg(long, value_delimiter = ',')]
        by: Vec<String>,
        #[arg(long, value_enum, default_value = "core")]
        metric: Metric,
        #[arg(short = 'n', long = "top", default_value_t = 10)]
        n: usize,
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
}

pub fn index_settings(cfg: &Config) -> Settings {
    Settings {
        dir: cfg.audit.index_dir(&cfg.paths.archive_dir),
        admin_gid: archive::group_id(&cfg.archive.admin_group).unwrap_or(0),
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
    let Some(gid) = archive::group_id(&cfg.archive.admin_group) else {
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

pub fn index_cmd(cfg: &Config, cmd: IndexCmd) -> Result<()> {
    if euid() != 0 {
        bail!("the index is written by root (the archive's owner); run this as root");
    }
    let store = Store::new(&cfg.paths.archive_dir, &cfg.archive.admin_group);
    let idx = Index::new(&store, index_settings(cfg));
    let (rebuild, json) = match cmd {
        IndexCmd::Update { json } => (false, json),
        IndexCmd::Rebuild { json } => (true, json),
    };
    let t0 = std::time::Instant::now();
    let rep = idx.update(rebuild)?;
    let secs = t0.elapsed().as_secs_f64();
    let after = jobscope_audit::after_update(cfg, &idx);
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
        for p in &rep.problems {
            println!("  not indexed: {p}");
        }
        for a in &after {
            println!("  {a}");
        }
    }
    Ok(())
}

/// `2026-11-01`, `2026-11-01T12:30` (local, by `offset_s`) or Unix seconds.
fn parse_when(s: &str, offset_s: i32) -> Result<i64> {
    if let Ok(n) = s.parse::<i64>() {
        return Ok(n);
    }
    let bad = || anyhow::anyhow!("{s:?}: expected YYYY-MM-DD, YYYY-MM-DDTHH:MM or Unix seconds");
    let (date, time) = s.split_once(['T', ' ']).unwrap_or((s, "00:00"));
    let mut d = date.split('-');
    let (y, m, dd) = (
        d.next()
            .and_then(|x| x.parse::<i64>().ok())
            .ok_or_else(bad)?,
        d.next()
            .and_then(|x| x.parse::<u32>().ok())
            .ok_or_else(bad)?,
        d.next()
            .and_then(|x| x.parse::<u32>().ok())
            .ok_or_else(bad)?,
    );
    let (hh, mm) = time.split_once(':').ok_or_else(bad)?;
    let (hh, mm): (i64, i64) = (
        hh.parse().map_err(|_| bad())?,
        mm.parse().map_err(|_| bad())?,
    );
    if !(1..=12).contains(&m)
        || !(1..=31).contains(&dd)
        || !(0..24).contains(&hh)
        || !(0..60).contains(&mm)
    {
        return Err(bad());
    }
    let days = jobscope_sampler::time::days_from_civil(y, m, dd)
        .ok_or_else(|| anyhow::anyhow!("{s:?}: there is no such date"))?;
    Ok(days * 86_400 + hh * 3600 + mm * 60 - i64::from(offset_s))
}

/// `90s`, `10m`, `12h`, `7d`, `2w` (a bare number is seconds).
fn parse_span(s: &str) -> Result<i64> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("{s:?}: expected a number and s, m, h, d or w"))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => bail!("{s:?}: the unit must be s, m, h, d or w"),
    };
    n.checked_mul(mult).context("span too large")
}

/// The local offset from UTC now, seconds east.
fn local_offset_s() -> i32 {
    let now = jobscope_sampler::sampler::now_unix_ms() as libc::time_t / 1000;
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: localtime_r writes into tm and reads now.
    if unsafe { libc::localtime_r(&now, &mut tm) }.is_null() {
        return 0;
    }
    tm.tm_gmtoff as i32
}

fn keys(by: &[String]) -> Result<Vec<GroupKey>> {
    by.iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            GroupKey::parse(s).with_context(|| {
                format!(
                    "--by {s:?}: one of {}, hour, day-of-week",
                    GroupKey::ALL.map(|k| k.column()).join(", ")
                )
            })
        })
        .collect()
}

fn query(c: &Common, report: Report, group_by: Vec<GroupKey>) -> Result<Query> {
    let tz = if c.utc { 0 } else { local_offset_s() };
    let now_s = (jobscope_sampler::sampler::now_unix_ms() / 1000) as i64;
    let since = match (&c.since, &c.last) {
        (Some(s), _) => Some(parse_when(s, tz)?),
        (None, Some(l)) => Some(now_s - parse_span(l)?),
        (None, None) => None,
    };
    let until = c.until.as_deref().map(|u| parse_when(u, tz)).transpose()?;
    Ok(Query {
        window: Window {
            since_unix_s: since,
            until_unix_s: until,
        },
        filters: Filters {
            uid: None,
            users: c.user.clone(),
            groups: c.group.clone(),
            accounts: c.account.clone(),
            partitions: c.partition.clone(),
            qos: c.qos.clone(),
            nodes: c.node.clone(),
            states: c.state.iter().map(|s| s.to_ascii_uppercase()).collect(),
            classes: c.class.clone(),
            min_elapsed_s: c
                .min_elapsed
                .as_deref()
                .map(parse_span)
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
        limit: c.limit,
        tz_offset_s: tz,
    })
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
        let loaded = jobscope_sampler::fsutil::read_limited(&p, archive::MAX_DOC_BYTES)
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
    let (report, by, common, heat) = match cmd {
        AuditCmd::Usage { by, common } => (Report::Usage, keys(&by)?, common, false),
        AuditCmd::Top {
            by,
            metric,
            n,
            common,
        } => (
            Report::TopWasters {
                metric: match metric {
                    Metric::Core => WasteMetric::CoreHours,
                    Metric::Mem => WasteMetric::MemGbHours,
                    Metric::Gpu => WasteMetric::GpuHours,
                },
                n,
            },
            keys(&by)?,
            common,
            false,
        ),
        AuditCmd::GpuIdle { common } => (Report::GpuIdle, vec![], common, false),
        AuditCmd::CpuOnGpu { busy_pct, common } => {
            let busy_pct = busy_pct.unwrap_or(cfg.audit.busy_pct);
            if !(busy_pct > 0.0 && busy_pct <= 100.0) {
                bail!("--busy-pct {busy_pct} is outside (0, 100]");
            }
            (Report::CpuOnlyOnGpu { busy_pct }, vec![], common, false)
        }
        AuditCmd::Heatmap { common } => (Report::Heatmap, vec![], common, true),
        AuditCmd::Jobs { common } => (Report::Jobs, vec![], common, false),
    };
    let mut q = query(&common, report, by)?;
    let table = if common.engine == EngineKind::Postgres {
        if euid() != 0 {
            bail!(
                "--engine postgres is for root (it reads [postgres] password_file); a user with a \
                 database role of their own queries the database directly and sees only their jobs \
                 (docs/postgres.md)"
            );
        }
        jobscope_audit::pg::engine::PgEngine::new(jobscope_audit::pg::connect(&cfg.postgres)?)
            .run(&q)?
    } else if is_admin(cfg) {
        let store = Store::new(&cfg.paths.archive_dir, &cfg.archive.admin_group);
        let settings = index_settings(cfg);
        let dir = settings.dir.clone();
        if euid() == 0 {
            // Root brings the index up to date first (cheap when nothing changed: one stat per day).
            let rep = Index::new(&store, settings).update(false)?;
            for p in &rep.problems {
                eprintln!("jobscope: not indexed: {p}");
            }
        }
        ParquetEngine::open(&dir)?.run(&q)?
    } else {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        q.filters.uid = Some(uid);
        let (rows, notes) = own_rows(cfg, uid)?;
        for n in notes {
            eprintln!("jobscope: {n}");
        }
        MemEngine::new(&rows)?.run(&q)?
    };
    let mut out: Box<dyn Write + Send> = match &common.output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("{}", p.display()))?,
        )),
        None => Box::new(std::io::stdout()),
    };
    match common.format {
        Format::Table if heat => out.write_all(render::heatmap(&table).as_bytes())?,
        Format::Table => out.write_all(render::text(&table).as_bytes())?,
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
    fn times_and_spans_parse() {
        assert_eq!(parse_when("1700000000", 0).unwrap(), 1_700_000_000);
        // 2024-02-29 13:05 UTC = 1709211900; the same wall time at UTC+1 is an hour earlier.
        assert_eq!(parse_when("2024-02-29T13:05", 0).unwrap(), 1_709_211_900);
        assert_eq!(parse_when("2024-02-29 13:05", 3600).unwrap(), 1_709_208_300);
        assert_eq!(parse_when("1970-01-01", 0).unwrap(), 0);
        assert!(parse_when("2024-13-01", 0).is_err());
        assert!(parse_when("yesterday", 0).is_err());
        assert_eq!(parse_span("7d").unwrap(), 604_800);
        assert_eq!(parse_span("90").unwrap(), 90);
        assert_eq!(parse_span("2w").unwrap(), 1_209_600);
        assert!(parse_span("7y").is_err());
        assert!(parse_span("d").is_err());
    }
}
