//! The Parquet index of the archive (docs/audit.md): derived, rebuildable, the thing `jobscope
//! audit` reads and admins open with Polars, pandas or DuckDB.
//!
//! ```text
//! <index>/state.json                     the commit point: days consumed, the parts that make the index
//! <index>/jobs/YYYY-MM/part-NNNNNNNN.parquet   job rows (audit::row::COLUMNS less audit::arrow::DERIVED,
//!                                              computed on read), sorted by end time
//! <index>/nodes/YYYY-MM/part-NNNNNNNN.parquet  node rows (audit::row::NODE_COLUMNS)
//! <index>/cohorts.json                   small per-partition distributions for the Epilog's peer percentile
//! <archive>/.index.lock                  one writer at a time (lock.rs)
//! ```
//! `YYYY-MM` is the month of the archive day directory the record is in (its end day), so a month's
//! parts can be rebuilt from that month's day directories alone.
//!
//! Incremental: the per-day MANIFEST lists every archive write in order (archive/src/manifest.rs);
//! state.json keeps, per day, the manifest's size, last sequence number and chain value consumed. A
//! day whose manifest did not grow is skipped without reading it; new lines are indexed; a day whose
//! consumed prefix changed, or a record written again (a retried write replaces its record), makes
//! its month rebuilt from the archive. A record without a manifest line (the manifest append failed;
//! `archive verify` reports it) is picked up by the next rebuild of its month.
//!
//! Crash safety: parts are written under new names and only become part of the index when
//! state.json (written atomically) lists them; files it does not list are removed by the next
//! writer. A missing or unreadable state.json, or a listed part that is missing or unreadable, makes
//! the next update a full rebuild: the index can always be thrown away.

pub mod lock;

use crate::arrow::{
    job_batch, node_batch, node_schema, stored_inputs, stored_job_batch, stored_job_schema,
    with_derived,
};
use crate::eval::{evaluate, needed_columns, Usage};
use crate::query::{Engine, Query, Report as AuditReport};
use crate::row::{JobRow, NodeRow, COLUMNS, NODE_COLUMNS};
use crate::table::ColType;
use crate::table::Table;
use anyhow::{bail, Context, Result};
use arrow_array::{Array, Int64Array, RecordBatch};
use jobscope_archive::manifest;
use jobscope_archive::{self as archive, Store, MAX_DOC_BYTES};
use jobscope_sampler::config::Report;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::{Compression, Encoding};
use parquet::file::properties::WriterProperties;
use parquet::file::statistics::Statistics;
use parquet::schema::types::ColumnPath;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub const STATE: &str = "state.json";
pub const LOCK: &str = ".index.lock";
const STATE_VERSION: u32 = 1;
/// Rows per Parquet row group: row groups are what a time window prunes by their statistics.
const ROW_GROUP_ROWS: usize = 64 * 1024;
/// A state file larger than this is damaged.
const MAX_STATE_BYTES: u64 = 256 * 1024 * 1024;

/// How far the index has consumed one day's MANIFEST.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DayMark {
    pub size: u64,
    pub seq: u64,
    pub chain: String,
}

/// One Parquet file of the index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    /// Relative to the index directory: `jobs/YYYY-MM/part-NNNNNNNN.parquet`.
    pub file: String,
    pub month: String,
    pub rows: u64,
    /// Smallest and largest `end_unix_ms` in the file (a window skips a file without opening it).
    pub min_end_ms: Option<i64>,
    pub max_end_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct State {
    pub version: u32,
    pub days: BTreeMap<String, DayMark>,
    pub jobs: Vec<Part>,
    pub nodes: Vec<Part>,
    pub next_part: u64,
}

/// What an update did, for the command's output.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UpdateReport {
    /// The whole index was rebuilt (asked for, or the index was missing/damaged: `why`).
    pub rebuilt: bool,
    pub why: Option<String>,
    pub days_read: usize,
    pub months_rebuilt: Vec<String>,
    pub jobs_added: u64,
    pub parts_written: usize,
    pub parts_compacted: usize,
    pub jobs_total: u64,
    /// Records that could not be indexed (unreadable, not a summary): named, never silently dropped.
    pub problems: Vec<String>,
}

/// Settings of the index (from `[audit]` in the configuration).
#[derive(Debug, Clone)]
pub struct Settings {
    pub dir: PathBuf,
    /// gid that may read the index (the archive's admin group).
    pub admin_gid: u32,
    /// A month with more parts than this is compacted into one.
    pub compact_parts: usize,
    pub lock_stale_s: u64,
    pub lock_wait_s: u64,
    /// Thresholds to analyse a stored document that has no analysis (a version-1 upgrade).
    pub report: Report,
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// An index directory: root makes it 0750 root:<admin group> (refusing a symlink); anyone else
/// (tests, an admin's private copy) makes it as they can.
fn mkdir(path: &Path, admin_gid: u32) -> Result<()> {
    if is_root() {
        jobscope_sampler::fsutil::ensure_dir(path, 0o750, 0, admin_gid)?;
    } else {
        std::fs::create_dir_all(path)?;
    }
    Ok(())
}

fn month_of_day(day: &str) -> String {
    // `YYYY/MM/DD` → `YYYY-MM`
    day.get(..7).unwrap_or(day).replace('/', "-")
}

fn load_state(dir: &Path) -> Result<State> {
    let b = jobscope_sampler::fsutil::read_limited(&dir.join(STATE), MAX_STATE_BYTES)?;
    let s: State = serde_json::from_slice(&b).context("state.json does not parse")?;
    if s.version != STATE_VERSION {
        bail!(
            "state.json version {} (this jobscope writes {STATE_VERSION})",
            s.version
        );
    }
    Ok(s)
}

/// Integer columns that grow with end time (rows are sorted by it) or are nearly unique: stored as
/// deltas, no dictionary.
const DELTA_COLUMNS: &[&str] = &[
    "job_id",
    "array_job_id",
    "scheduler_start_unix_s",
    "submit_unix_s",
    "start_unix_ms",
    "end_unix_ms",
    "mem_peak_bytes",
    "mem_rss_peak_bytes",
    "io_read_bytes",
    "io_write_bytes",
    "gpu_mem_peak_bytes",
    "samples",
];

/// Job columns the usage, top-wasters and heat-map reports read (what `needed_columns` asks for
/// with any grouping and filter, through `stored_inputs`): kept on SNAPPY, the codec that decodes
/// fastest. A test in audit/src/index/tests.rs holds this list to `needed_columns`.
pub(crate) const FAST_COLUMNS: &[&str] = &[
    "cluster",
    "uid",
    "user",
    "group",
    "account",
    "partition",
    "qos",
    "node_list",
    "state",
    "class",
    "start_unix_ms",
    "end_unix_ms",
    "elapsed_s",
    "node_count",
    "alloc_cores",
    "alloc_mem_per_node_bytes",
    "alloc_gpus",
    "cpu_usage_s",
    "mem_gb_hours_used",
    "gpu_hours_alloc",
    "gpu_hours_wasted",
    "gpu_energy_kwh",
];

/// A part of fewer rows than this is all SNAPPY: GZIP saves nothing worth having on a few rows, and
/// setting up a compressor for each of its columns made an update after one new job about 2 ms
/// slower (docs/audit.md, "Speed and size"). Compaction rewrites such parts into large ones.
const GZIP_MIN_ROWS: usize = 4096;

/// `gzip`: the columns outside [`FAST_COLUMNS`] are GZIP (a part of [`GZIP_MIN_ROWS`] or more).
fn writer_props(gzip: bool) -> WriterProperties {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS));
    for (name, _) in COLUMNS {
        if gzip && !FAST_COLUMNS.contains(name) {
            // The other job columns are only read by job listings and by other tools: GZIP
            // (pure Rust, zlib-rs) makes them 5-30 % smaller than SNAPPY, and a listing decodes
            // only the row groups its window keeps (docs/audit.md, "Speed and size").
            b = b.set_column_compression(
                ColumnPath::from(*name),
                Compression::GZIP(Default::default()),
            );
        }
    }
    for (name, kind) in COLUMNS.iter().chain(NODE_COLUMNS) {
        let col = ColumnPath::from(*name);
        if *kind == ColType::Float {
            // Measured figures are full-precision floats: a dictionary never pays; split bytes
            // let the compressor find the shared exponents.
            b = b
                .set_column_dictionary_enabled(col.clone(), false)
                .set_column_encoding(col, Encoding::BYTE_STREAM_SPLIT);
        } else if *kind == ColType::Int && DELTA_COLUMNS.contains(name) {
            b = b
                .set_column_dictionary_enabled(col.clone(), false)
                .set_column_encoding(col, Encoding::DELTA_BINARY_PACKED);
        }
    }
    b.build()
}

/// Writes `batch` as a new part file (0640 root:admin), returning its `Part`.
fn write_part(
    s: &Settings,
    table: &str,
    month: &str,
    seq: u64,
    batch: &RecordBatch,
) -> Result<Part> {
    write_part_batches(
        s,
        table,
        month,
        seq,
        batch.schema(),
        batch.num_rows() >= GZIP_MIN_ROWS,
        [Ok(batch.clone())].into_iter(),
    )
}

/// Writes `batches` (one schema) as one new part file (0640 root:admin, written aside and renamed
/// into place), returning its `Part`.
fn write_part_batches(
    s: &Settings,
    table: &str,
    month: &str,
    seq: u64,
    schema: arrow_schema::SchemaRef,
    gzip: bool,
    batches: impl Iterator<Item = Result<RecordBatch>>,
) -> Result<Part> {
    let rel_dir = format!("{table}/{month}");
    let dir = s.dir.join(&rel_dir);
    mkdir(&s.dir.join(table), s.admin_gid)?;
    mkdir(&dir, s.admin_gid)?;
    let name = format!("part-{seq:08}.parquet");
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let f = jobscope_sampler::fsutil::create_new(&tmp, 0o640)?;
    if is_root() {
        std::os::unix::fs::fchown(&f, Some(0), Some(s.admin_gid))?;
    }
    let mut w = ArrowWriter::try_new(f.try_clone()?, schema, Some(writer_props(gzip)))?;
    let (mut rows, mut min_end_ms, mut max_end_ms) = (0u64, None::<i64>, None::<i64>);
    for batch in batches {
        let batch = batch?;
        w.write(&batch)?;
        rows += batch.num_rows() as u64;
        let (lo, hi) = end_range(&batch);
        min_end_ms = lo.into_iter().chain(min_end_ms).min();
        max_end_ms = hi.into_iter().chain(max_end_ms).max();
    }
    w.close()?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(&name))?;
    Ok(Part {
        file: format!("{rel_dir}/{name}"),
        month: month.to_string(),
        rows,
        min_end_ms,
        max_end_ms,
    })
}

fn end_range(b: &RecordBatch) -> (Option<i64>, Option<i64>) {
    let Some(a) = b
        .column_by_name("end_unix_ms")
        .and_then(|a| a.as_any().downcast_ref::<Int64Array>())
    else {
        return (None, None);
    };
    let vals = (0..a.len()).filter(|&i| !a.is_null(i)).map(|i| a.value(i));
    let min = vals.clone().min();
    (min, vals.max())
}

/// Reads a whole part (every column).
fn read_part(dir: &Path, p: &Part) -> Result<Vec<RecordBatch>> {
    let f =
        std::fs::File::open(dir.join(&p.file)).with_context(|| format!("index part {}", p.file))?;
    let r = ParquetRecordBatchReaderBuilder::try_new(f)?
        .with_batch_size(64 * 1024)
        .build()?;
    Ok(r.collect::<std::result::Result<Vec<_>, _>>()?)
}

/// The rows of one archived record, or why not.
fn rows_of(path: &Path, report: &Report) -> Result<(JobRow, Vec<NodeRow>)> {
    let bytes = jobscope_sampler::fsutil::read_limited(path, MAX_DOC_BYTES)?;
    let s = archive::load(&bytes, report)?.summary;
    Ok((JobRow::of(&s), NodeRow::of(&s)))
}

/// Rows of new records, grouped by month.
#[derive(Default)]
struct Pending {
    jobs: BTreeMap<String, Vec<JobRow>>,
    nodes: BTreeMap<String, Vec<NodeRow>>,
}

impl Pending {
    fn add(&mut self, month: &str, path: &Path, s: &Settings, problems: &mut Vec<String>) {
        match rows_of(path, &s.report) {
            Ok((j, n)) => {
                self.jobs.entry(month.to_string()).or_default().push(j);
                self.nodes.entry(month.to_string()).or_default().extend(n);
            }
            Err(e) => problems.push(format!("{}: {e:#}", path.display())),
        }
    }
}

/// The index of an archive.
pub struct Index<'a> {
    pub store: &'a Store,
    pub settings: Settings,
}

impl<'a> Index<'a> {
    pub fn new(store: &'a Store, settings: Settings) -> Index<'a> {
        Index { store, settings }
    }

    fn lock(&self) -> Result<lock::Lock> {
        lock::Lock::take(
            &self.store.root().join(LOCK),
            self.settings.lock_stale_s,
            self.settings.lock_wait_s,
        )
    }

    /// Brings the index up to date with the archive (a full rebuild when `rebuild`, or when the
    /// index is missing or damaged).
    pub fn update(&self, rebuild: bool) -> Result<UpdateReport> {
        let _lock = self.lock()?;
        let s = &self.settings;
        mkdir(&s.dir, s.admin_gid)?;
        let mut rep = UpdateReport::default();
        let mut state = if rebuild {
            rep.why = Some("asked for".into());
            None
        } else {
            match load_state(&s.dir) {
                Err(_) if !s.dir.join(STATE).exists() => {
                    rep.why = Some("no index yet".into());
                    None
                }
                Ok(st) => match self.check_parts(&st) {
                    Ok(()) => Some(st),
                    Err(e) => {
                        rep.why = Some(format!("{e:#}"));
                        None
                    }
                },
                Err(e) => {
                    rep.why = Some(format!("{e:#}"));
                    None
                }
            }
        }
        .unwrap_or_else(|| {
            rep.rebuilt = true;
            State {
                version: STATE_VERSION,
                ..Default::default()
            }
        });
        let next_part = state.next_part.max(1);

        // Which months must be rebuilt, which days have new lines.
        let days: Vec<archive::Day> = self.store.days().collect();
        let mut rebuild_months: BTreeSet<String> = BTreeSet::new();
        if rep.rebuilt {
            rebuild_months.extend(days.iter().map(|d| month_of_day(&d.date)));
        }
        let mut pending = Pending::default();
        let mut marks: BTreeMap<String, DayMark> = BTreeMap::new();
        for d in &days {
            let month = month_of_day(&d.date);
            let size =
                std::fs::symlink_metadata(d.path.join(manifest::MANIFEST)).map_or(0, |m| m.len());
            let old = state.days.get(&d.date);
            if !rebuild_months.contains(&month) && old.is_some_and(|o| o.size == size) {
                continue;
            }
            let (entries, size) = match manifest::read_entries(&d.path) {
                Ok(x) => x,
                Err(e) => {
                    rep.problems.push(format!("{}: {e}", d.date));
                    (Vec::new(), size)
                }
            };
            rep.days_read += 1;
            let last = entries.last();
            marks.insert(
                d.date.clone(),
                DayMark {
                    size,
                    seq: last.map_or(0, |e| e.seq),
                    chain: last.map_or_else(String::new, |e| e.chain.clone()),
                },
            );
            if rebuild_months.contains(&month) {
                continue;
            }
            let consumed = old.map_or(0, |o| o.seq);
            let prefix_ok = match old {
                None => true,
                Some(o) if o.seq == 0 => true,
                Some(o) => entries.iter().any(|e| e.seq == o.seq && e.chain == o.chain),
            };
            let (done, new): (Vec<_>, Vec<_>) = entries.iter().partition(|e| e.seq <= consumed);
            let rewritten = new.iter().any(|e| done.iter().any(|x| x.name == e.name));
            if !prefix_ok || rewritten {
                rebuild_months.insert(month);
                continue;
            }
            // The latest line of each name wins (a file listed twice among the new lines).
            let names: BTreeSet<&str> = new.iter().map(|e| e.name.as_str()).collect();
            for name in names {
                pending.add(&month, &d.path.join(name), s, &mut rep.problems);
            }
        }
        // Months rebuilt from their day directories' records (the files are the truth).
        for month in &rebuild_months {
            pending.jobs.remove(month);
            pending.nodes.remove(month);
            pending.jobs.entry(month.clone()).or_default();
            for d in days.iter().filter(|d| &month_of_day(&d.date) == month) {
                match archive::list(&d.path) {
                    Ok(l) => {
                        for r in l.records.iter().filter(|r| r.regular && r.name.is_some()) {
                            pending.add(month, &d.path.join(&r.file), s, &mut rep.problems);
                        }
                    }
                    Err(e) => rep.problems.push(format!("{}: {e}", d.date)),
                }
            }
        }
        state.jobs.retain(|p| !rebuild_months.contains(&p.month));
        state.nodes.retain(|p| !rebuild_months.contains(&p.month));
        // Days that are gone (pruned) are forgotten; their rows stay until their month is rebuilt.
        state.days.retain(|k, _| days.iter().any(|d| &d.date == k));
        state.days.extend(marks);
        rep.months_rebuilt = rebuild_months.into_iter().collect();

        let mut seq = next_part;
        for (month, mut rows) in std::mem::take(&mut pending.jobs) {
            if rows.is_empty() {
                continue;
            }
            rows.sort_by_key(|r| (r.end_unix_ms, r.job_id));
            rep.jobs_added += rows.len() as u64;
            state.jobs.push(write_part(
                s,
                "jobs",
                &month,
                seq,
                &stored_job_batch(&job_batch(&rows)?)?,
            )?);
            seq += 1;
            rep.parts_written += 1;
        }
        for (month, mut rows) in std::mem::take(&mut pending.nodes) {
            if rows.is_empty() {
                continue;
            }
            rows.sort_by_key(|r| (r.end_unix_ms, r.job_id));
            state
                .nodes
                .push(write_part(s, "nodes", &month, seq, &node_batch(&rows)?)?);
            seq += 1;
        }
        // Compaction: a month of more than `compact_parts` parts gets fewer. Bounded work per update:
        // the month's largest part stays as it is while the others together hold under a quarter
        // of its rows (they are merged into one); past that, the whole month becomes one part. A
        // row is so rewritten a bounded number of times on average, and an update after one new
        // job merges the month's small parts, not the month (docs/audit.md, "Updates").
        for table in ["jobs", "nodes"] {
            let parts = if table == "jobs" {
                &mut state.jobs
            } else {
                &mut state.nodes
            };
            let mut by_month: BTreeMap<String, Vec<Part>> = BTreeMap::new();
            for p in parts.drain(..) {
                by_month.entry(p.month.clone()).or_default().push(p);
            }
            for (month, mut list) in by_month {
                if list.len() <= s.compact_parts {
                    parts.extend(list);
                    continue;
                }
                let total: u64 = list.iter().map(|p| p.rows).sum();
                let big = (0..list.len()).max_by_key(|&i| list[i].rows).unwrap_or(0);
                if (total - list[big].rows) * 4 < list[big].rows {
                    parts.push(list.remove(big));
                }
                let mut batches = Vec::new();
                for p in &list {
                    batches.extend(read_part(&s.dir, p)?);
                }
                let schema = if table == "jobs" {
                    stored_job_schema()
                } else {
                    node_schema()
                };
                let all = arrow_select_concat(&schema, &batches)?;
                parts.push(write_part(s, table, &month, seq, &all)?);
                seq += 1;
                rep.parts_compacted += list.len();
            }
        }
        state.next_part = seq;
        rep.jobs_total = state.jobs.iter().map(|p| p.rows).sum();
        let json = serde_json::to_vec(&state)?;
        let owner = is_root().then_some((0, s.admin_gid));
        jobscope_sampler::fsutil::write_atomic(&s.dir, STATE, &json, 0o640, owner)?;
        self.remove_unlisted(&state);
        Ok(rep)
    }

    /// Every listed part exists and is a Parquet file with the expected columns.
    fn check_parts(&self, st: &State) -> Result<()> {
        for (p, schema) in st
            .jobs
            .iter()
            .map(|p| (p, stored_job_schema()))
            .chain(st.nodes.iter().map(|p| (p, node_schema())))
        {
            let f = std::fs::File::open(self.settings.dir.join(&p.file))
                .with_context(|| format!("index part {} is missing", p.file))?;
            let b = ParquetRecordBatchReaderBuilder::try_new(f)
                .with_context(|| format!("index part {} is damaged", p.file))?;
            if b.schema().fields() != schema.fields() {
                bail!("index part {} has other columns", p.file);
            }
        }
        Ok(())
    }

    /// Removes part files state.json does not list (older compacted parts, a crashed writer's files).
    fn remove_unlisted(&self, st: &State) {
        let listed: BTreeSet<&str> = st
            .jobs
            .iter()
            .chain(st.nodes.iter())
            .map(|p| p.file.as_str())
            .collect();
        for table in ["jobs", "nodes"] {
            let Ok(months) = std::fs::read_dir(self.settings.dir.join(table)) else {
                continue;
            };
            for m in months.flatten() {
                let month = m.file_name().to_string_lossy().into_owned();
                let Ok(files) = std::fs::read_dir(m.path()) else {
                    continue;
                };
                let mut left = 0;
                for f in files.flatten() {
                    let name = f.file_name().to_string_lossy().into_owned();
                    if !listed.contains(format!("{table}/{month}/{name}").as_str()) {
                        let _ = std::fs::remove_file(f.path());
                    } else {
                        left += 1;
                    }
                }
                if left == 0 {
                    let _ = std::fs::remove_dir(m.path());
                }
            }
        }
    }
}

/// Writes an index made of `rows` alone (no archive behind it): the seeded generator and the
/// benchmarks make indexes of millions of jobs this way, without millions of JSON files. `rows`
/// must come in end-time order (they are written month by month as they arrive, so memory holds one
/// month). `state.json` lists no archive days, so a later `update` against a real archive rebuilds
/// it. The rows' [`crate::arrow::DERIVED`] columns are not stored (they are computed from the
/// stored ones when read). Returns the number of jobs written.
pub fn write_rows_only(settings: &Settings, rows: impl IntoIterator<Item = JobRow>) -> Result<u64> {
    mkdir(&settings.dir, settings.admin_gid)?;
    let mut state = State {
        version: STATE_VERSION,
        next_part: 1,
        ..Default::default()
    };
    let mut n = 0;
    let mut month = String::new();
    let mut buf: Vec<JobRow> = Vec::new();
    let mut last_end = 0u64;
    let flush = |month: &str, buf: &mut Vec<JobRow>, state: &mut State| -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        buf.sort_by_key(|r| (r.end_unix_ms, r.job_id));
        let seq = state.next_part;
        state.next_part += 1;
        state
            .jobs
            .push(write_part_slices(settings, "jobs", month, seq, buf)?);
        buf.clear();
        Ok(())
    };
    for r in rows {
        if r.end_unix_ms < last_end {
            bail!("write_rows_only: rows must come in end-time order");
        }
        last_end = r.end_unix_ms;
        let m = crate::query::time_keys(r.end_unix_ms as i64).3;
        if m != month {
            flush(&month, &mut buf, &mut state)?;
            month = m;
        }
        n += 1;
        buf.push(r);
    }
    flush(&month, &mut buf, &mut state)?;
    let owner = is_root().then_some((0, settings.admin_gid));
    jobscope_sampler::fsutil::write_atomic(
        &settings.dir,
        STATE,
        &serde_json::to_vec(&state)?,
        0o640,
        owner,
    )?;
    Ok(n)
}

/// [`write_part`] for many rows: Arrow batches of [`ROW_GROUP_ROWS`] rows into one file.
fn write_part_slices(
    s: &Settings,
    table: &str,
    month: &str,
    seq: u64,
    rows: &[JobRow],
) -> Result<Part> {
    let batches = rows
        .chunks(ROW_GROUP_ROWS)
        .map(|c| stored_job_batch(&job_batch(c)?));
    let gzip = rows.len() >= GZIP_MIN_ROWS;
    write_part_batches(s, table, month, seq, stored_job_schema(), gzip, batches)
}

fn arrow_select_concat(
    schema: &arrow_schema::SchemaRef,
    batches: &[RecordBatch],
) -> Result<RecordBatch> {
    // Sorting across parts by end time keeps row-group statistics tight after compaction.
    let mut rows: Vec<(i64, usize, usize)> = Vec::new();
    for (bi, b) in batches.iter().enumerate() {
        let a = b
            .column_by_name("end_unix_ms")
            .and_then(|a| a.as_any().downcast_ref::<Int64Array>())
            .context("part without end_unix_ms")?;
        for i in 0..b.num_rows() {
            rows.push((if a.is_null(i) { i64::MIN } else { a.value(i) }, bi, i));
        }
    }
    rows.sort_unstable();
    let cols = schema.fields().len();
    let mut out = Vec::with_capacity(cols);
    for c in 0..cols {
        let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
        let idx: Vec<(usize, usize)> = rows.iter().map(|&(_, b, i)| (b, i)).collect();
        out.push(arrow_select::interleave::interleave(&arrays, &idx)?);
    }
    Ok(RecordBatch::try_new(schema.clone(), out)?)
}

/// Reads the index for queries: only the parts and row groups a window can touch, only the
/// columns a query needs.
pub struct ParquetEngine {
    dir: PathBuf,
    state: State,
}

impl ParquetEngine {
    pub fn open(dir: &Path) -> Result<ParquetEngine> {
        let state = load_state(dir).with_context(|| {
            format!(
                "the index at {} is missing or damaged (run `jobscope index rebuild`)",
                dir.display()
            )
        })?;
        Ok(ParquetEngine {
            dir: dir.to_path_buf(),
            state,
        })
    }

    pub fn jobs(&self) -> u64 {
        self.state.jobs.iter().map(|p| p.rows).sum()
    }

    /// The batches of the parts a query can touch, projected to `columns` (text as plain UTF-8),
    /// in part order.
    pub fn scan(&self, q: &Query, columns: &[&str]) -> Result<Vec<RecordBatch>> {
        let per_part = self.fold(
            q,
            columns,
            false,
            Vec::new,
            |acc: &mut Vec<(usize, RecordBatch)>, part, b| {
                acc.push((part, b));
                Ok(())
            },
        )?;
        let mut all: Vec<(usize, RecordBatch)> = per_part.into_iter().flatten().collect();
        // Stable: batches of one part keep their order.
        all.sort_by_key(|(part, _)| *part);
        Ok(all.into_iter().map(|(_, b)| b).collect())
    }

    /// Reads the row groups a query can touch on every core at once (one reader per core takes the
    /// next row group), handing each batch to `f` with that reader's own accumulator and the row
    /// group's number in end-time order; returns the accumulators. Decoding and aggregating run together on each core, and no more than one
    /// batch per core is held at a time. `dict`: low-cardinality text columns
    /// ([`DICT_COLUMNS`]) come as `Dictionary(Int32, Utf8)` arrays, each distinct value once.
    pub fn fold<T: Send>(
        &self,
        q: &Query,
        columns: &[&str],
        dict: bool,
        init: impl Fn() -> T + Sync,
        f: impl Fn(&mut T, usize, RecordBatch) -> Result<()> + Sync,
    ) -> Result<Vec<T>> {
        let since = q.window.since_unix_s.map(|s| s.saturating_mul(1000));
        let until = q.window.until_unix_s.map(|u| u.saturating_mul(1000));
        let overlaps = |min: Option<i64>, max: Option<i64>| {
            since.is_none_or(|s| max.is_none_or(|m| m >= s))
                && until.is_none_or(|u| min.is_none_or(|m| m < u))
        };
        let parts: Vec<&Part> = self
            .state
            .jobs
            .iter()
            .filter(|p| overlaps(p.min_end_ms, p.max_end_ms))
            .collect();
        let read_schema = dict.then(dict_job_schema);
        let stored = stored_inputs(columns);
        let opts = || match &read_schema {
            Some(s) => ArrowReaderOptions::new().with_schema(s.clone()),
            None => ArrowReaderOptions::new(),
        };
        let open = |p: &Part| {
            std::fs::File::open(self.dir.join(&p.file))
                .with_context(|| format!("index part {} (run `jobscope index rebuild`)", p.file))
        };
        // The work: each row group the window can touch (a few per month part), in end order; a
        // part's footer is read once here.
        let mut metas = Vec::with_capacity(parts.len());
        let mut units: Vec<(usize, usize)> = Vec::new();
        for (pi, p) in parts.iter().enumerate() {
            let m = ArrowReaderMetadata::load(&open(p)?, opts())
                .with_context(|| format!("index part {} is damaged", p.file))?;
            let end_col = m.schema().index_of("end_unix_ms")?;
            for (gi, rg) in m.metadata().row_groups().iter().enumerate() {
                let touch = match rg.column(end_col).statistics() {
                    Some(Statistics::Int64(st)) => {
                        overlaps(st.min_opt().copied(), st.max_opt().copied())
                    }
                    _ => true,
                };
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
            let idx: Vec<usize> = stored
                .iter()
                .map(|c| m.schema().index_of(c))
                .collect::<std::result::Result<_, _>>()?;
            let mask = ProjectionMask::roots(b.parquet_schema(), idx);
            let r = b
                .with_projection(mask)
                .with_row_groups(vec![gi])
                .with_batch_size(ROW_GROUP_ROWS)
                .build()?;
            for batch in r {
                f(acc, unit, with_derived(&batch?, columns)?)?;
            }
            Ok(())
        };
        let next = std::sync::atomic::AtomicUsize::new(0);
        let worker = || -> Result<T> {
            let mut acc = init();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= units.len() {
                    return Ok(acc);
                }
                read(i, &mut acc)?;
            }
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_READERS)
            .min(units.len().max(1));
        std::thread::scope(|sc| {
            let others: Vec<_> = (1..threads).map(|_| sc.spawn(worker)).collect();
            let mut out = vec![worker()?];
            for h in others {
                out.push(
                    h.join()
                        .unwrap_or_else(|_| bail!("index reader panicked"))?,
                );
            }
            Ok(out)
        })
    }
}

/// Text columns with few distinct values, read as dictionaries by the aggregation.
pub const DICT_COLUMNS: &[&str] = &[
    "cluster",
    "user",
    "group",
    "account",
    "partition",
    "qos",
    "state",
    "class",
    "verdict",
];

/// At most this many readers at once.
const MAX_READERS: usize = 8;

/// The job table's schema with [`DICT_COLUMNS`] as `Dictionary(Int32, Utf8)`: the reader's schema
/// hint (the files store plain UTF-8 columns, dictionary-encoded by Parquet itself).
fn dict_job_schema() -> arrow_schema::SchemaRef {
    let s = stored_job_schema();
    let fields: Vec<arrow_schema::Field> = s
        .fields()
        .iter()
        .map(|f| {
            if DICT_COLUMNS.contains(&f.name().as_str()) {
                f.as_ref()
                    .clone()
                    .with_data_type(arrow_schema::DataType::Dictionary(
                        Box::new(arrow_schema::DataType::Int32),
                        Box::new(arrow_schema::DataType::Utf8),
                    ))
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    std::sync::Arc::new(arrow_schema::Schema::new(fields))
}

impl Engine for ParquetEngine {
    fn run(&self, q: &Query) -> Result<Table> {
        let cols = needed_columns(q);
        if matches!(
            q.report,
            AuditReport::Usage | AuditReport::TopWasters { .. }
        ) {
            // Each core decodes and aggregates its parts; the partial aggregations are merged.
            let aggs = self.fold(
                q,
                &cols,
                true,
                || Usage::new(q),
                |u: &mut Result<Usage>, _, b| match u {
                    Ok(u) => u.add(q, &b),
                    Err(e) => bail!("{e:#}"),
                },
            )?;
            let mut aggs = aggs.into_iter();
            let mut all = aggs.next().context("no index reader")??;
            for u in aggs {
                all.merge(u?);
            }
            return all.finish(q);
        }
        let batches = self.scan(q, &cols)?;
        evaluate(q, &batches)
    }
}

#[cfg(test)]
mod tests;
