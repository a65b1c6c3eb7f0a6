//! The Parquet index of the archive (docs/audit.md): derived, rebuildable, the thing `jobscope
//! audit` reads and admins open with Polars, pandas or DuckDB.
//!
//! ```text
//! <index>/state.json                     the commit point: days consumed, the parts that make the index
//! <index>/jobs/YYYY-MM/part-NNNNNNNN.parquet   job rows (audit::row::COLUMNS less audit::arrow::DERIVED,
//!                                              computed on read), sorted by end time
//! <index>/nodes/YYYY-MM/part-NNNNNNNN.parquet  node rows (audit::row::NODE_COLUMNS)
//! <index>/rollups/YYYY-MM/part-NNNNNNNN.parquet the sums of the jobs part of the same number per
//!                                              end day and keys (audit::rollup)
//! <index>/cohorts.json                   small per-partition distributions for the Epilog's peer percentile
//! <archive>/.index.lock                  one writer at a time (lock.rs)
//! ```
//! `YYYY-MM` is the month of the archive day directory the record is in (its end day), so a month's
//! parts can be rebuilt from that month's day directories alone.
//!
//! Incremental: the per-day MANIFEST lists every archive write in order (archive/src/manifest.rs);
//! state.json keeps, per day, the manifest's size, last sequence number and chain value consumed,
//! and the day directory's stamp. A day whose manifest and directory did not change is skipped
//! without reading it; new lines, and records without a line, are indexed, one row per run key
//! within the month; a day gone, a consumed prefix changed, or a record written again makes its
//! month rebuilt from the archive. An unreadable directory or manifest stops the update.
//!
//! Crash safety: parts are written under new names and only become part of the index when
//! state.json (written atomically) lists them; files it does not list are removed by the next
//! writer. A missing or unreadable state.json makes the next update a full rebuild; a listed part
//! that is missing, listed twice, under another month or table than its path, not what was written
//! (its SHA-256), or whose entry's rows or end times are not the file's own makes both the month
//! its entry names and the month of its path rebuilt, and so does a part file no entry lists though
//! a committed update wrote it (an entry gone): each run stays one row. An entry's seal (a hash of
//! its fields) tells an entry edited since it was checked without reading the file. The index can
//! always be thrown away.

pub mod feed;
pub mod lock;
pub mod rollups;

use crate::arrow::{
    job_batch, node_batch, node_schema, stored_inputs, stored_job_batch, stored_job_schema,
    with_derived, View,
};
use crate::eval::{evaluate, needed_columns};
use crate::query::Zone;
use crate::query::{Engine, Query, Report as AuditReport};
use crate::rollup;
use crate::row::{JobRow, NodeRow, COLUMNS, NODE_COLUMNS};
use crate::table::ColType;
use crate::table::Table;
use anyhow::{bail, Context, Result};
use arrow_array::{Array, BooleanArray, Int64Array, RecordBatch};
use jobscope_archive::manifest;
use jobscope_archive::{self as archive, Key, Store, MAX_DOC_BYTES};
use jobscope_model::params::Report;
use parquet::arrow::arrow_reader::{
    ArrowPredicateFn, ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
    RowFilter,
};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::{Compression, Encoding};
use parquet::file::metadata::PageIndexPolicy;
use parquet::file::properties::WriterProperties;
use parquet::file::statistics::Statistics;
use parquet::schema::types::ColumnPath;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub const STATE: &str = "state.json";
pub const LOCK: &str = ".index.lock";
/// Bumped when the parts' columns change (2: the kernel view's columns; 3: the GPUs' SM
/// activity and health, `gpu_sm_active_mean_pct` …; 4: the rollups; 5: the rollups' per-user
/// rows; 6: `mail_never`): an index of another version is rebuilt whole by the next update,
/// which says why.
const STATE_VERSION: u32 = 6;
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
    /// The day directory's [`Stamp`] when it was listed (`None`: too recent to be trusted, see
    /// [`RACY_S`]): a record written without its MANIFEST line changes the directory, not the
    /// manifest, so a day is read again when either changed.
    #[serde(default)]
    pub dir: Option<Stamp>,
}

/// A file's identity and change times. An equal stamp means the file was not written to,
/// replaced or renamed over since: each of those moves its ctime, which no one can set back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub ino: u64,
    pub size: u64,
    pub ctime_ns: i64,
    pub mtime_ns: i64,
}

/// A stamp taken within this many seconds of the file's last change proves nothing later:
/// filesystem timestamps are coarse (a clock tick), so a change in the same tick leaves them
/// equal. Such a file is checked in full next time (git's "racily clean" entries).
const RACY_S: i64 = 2;

fn stamp_of(md: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    Stamp {
        ino: md.ino(),
        size: md.size(),
        ctime_ns: md.ctime().saturating_mul(1_000_000_000) + md.ctime_nsec(),
        mtime_ns: md.mtime().saturating_mul(1_000_000_000) + md.mtime_nsec(),
    }
}

/// The stamp of `md` if it is old enough to be trusted by a later update.
fn settled(md: &std::fs::Metadata) -> Option<Stamp> {
    let st = stamp_of(md);
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let last = st.ctime_ns.max(st.mtime_ns);
    (now_ns.saturating_sub(last) > RACY_S * 1_000_000_000).then_some(st)
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
    /// SHA-256 of the whole file as written: damage (a flipped bit, another part copied over it)
    /// is found before a query trips on it, and its month is rebuilt. `None`: written by an
    /// earlier jobscope (checked by decoding every page once, then recorded).
    #[serde(default)]
    pub sha256: Option<String>,
    /// The file's [`Stamp`] when its checksum last matched: while it is unchanged the file is not
    /// read again (an update must not read the whole index).
    #[serde(default)]
    pub stamp: Option<Stamp>,
    /// [`seal_of`] this entry when it was last checked against its file: while it matches, no field
    /// above was changed since (an edited or damaged state.json), so its month, rows and end times
    /// are the file's without reading it. `None`: never checked (an earlier jobscope).
    #[serde(default)]
    pub seal: Option<String>,
    /// A rollup part's zone: the wall clock its start days are on (`UTC`, or the local zone's
    /// name when it was written). `None` for the other tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

/// What [`seal_of`] hashes first: a seal is of nothing else.
const SEAL_DOMAIN: &str = "jobscope index part entry 1";

/// The SHA-256 of everything an entry of `table` says about its part (every field but the seal).
fn seal_of(table: &str, p: &Part) -> String {
    let facts = serde_json::json!([
        SEAL_DOMAIN,
        table,
        p.file,
        p.month,
        p.rows,
        p.min_end_ms,
        p.max_end_ms,
        p.sha256,
        p.stamp,
        p.zone
    ]);
    jobscope_common::digest::sha256_hex(facts.to_string().as_bytes())
}

/// Whether `p`'s entry is as it was when last checked against its file.
fn sealed(table: &str, p: &Part) -> bool {
    p.seal.as_deref() == Some(seal_of(table, p).as_str())
}

/// A month of the index's directories: `YYYY-MM`.
fn is_month(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 7
        && b[4] == b'-'
        && b[..4].iter().chain(&b[5..]).all(u8::is_ascii_digit)
        && matches!(s[5..].parse::<u8>(), Ok(1..=12))
}

/// The number in a part file's name, `part-NNNNNNNN.parquet`.
fn part_seq(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("part-")?.strip_suffix(".parquet")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A part's table, month and number from its path, `<table>/<YYYY-MM>/part-NNNNNNNN.parquet`.
fn parse_part_path(file: &str) -> Option<(&str, &str, u64)> {
    let mut it = file.split('/');
    let (table, month, name) = (it.next()?, it.next()?, it.next()?);
    if it.next().is_some() || !TABLES.contains(&table) || !is_month(month) {
        return None;
    }
    Some((table, month, part_seq(name)?))
}

/// A part number past this is not one an index reaches (a new part per update every minute for a
/// million years is 5·10^11): a larger `next_part` in state.json is damage.
const MAX_PART_SEQ: u64 = 1_000_000_000_000;

/// The index's tables, each a directory of months of parts.
const TABLES: [&str; 3] = ["jobs", "nodes", "rollups"];

/// The schema a table's parts hold.
fn table_schema(table: &str) -> arrow_schema::SchemaRef {
    match table {
        "jobs" => stored_job_schema(),
        "nodes" => node_schema(),
        _ => rollup::schema(),
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct State {
    pub version: u32,
    pub days: BTreeMap<String, DayMark>,
    pub jobs: Vec<Part>,
    pub nodes: Vec<Part>,
    /// One per jobs part, of the same month and number (audit::rollup).
    #[serde(default)]
    pub rollups: Vec<Part>,
    pub next_part: u64,
}

impl State {
    fn parts_mut(&mut self) -> [(&'static str, &mut Vec<Part>); 3] {
        [
            ("jobs", &mut self.jobs),
            ("nodes", &mut self.nodes),
            ("rollups", &mut self.rollups),
        ]
    }

    fn all_parts(&self) -> impl Iterator<Item = &Part> {
        self.jobs.iter().chain(&self.nodes).chain(&self.rollups)
    }
}

/// What an update did, for the command's output.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UpdateReport {
    /// The whole index was rebuilt (asked for, or the index was missing/damaged: `why`).
    pub rebuilt: bool,
    pub why: Option<String>,
    pub days_read: usize,
    pub months_rebuilt: Vec<String>,
    /// Why each month in `months_rebuilt` was (a day gone, a manifest changed, a damaged part…).
    pub rebuild_reasons: Vec<String>,
    pub jobs_added: u64,
    pub parts_written: usize,
    pub parts_compacted: usize,
    pub jobs_total: u64,
    /// Records that could not be indexed (unreadable, not a summary): named, never silently dropped.
    pub problems: Vec<String>,
    /// The rows this update added, when adding them is all it did (no rebuild, no month made again,
    /// at most [`MAX_ADDED_KEPT`]): what the files written after it from the index need to change
    /// (`crate::history::update_history`). `None`: rows may have gone too; rewrite from the index.
    #[serde(skip)]
    pub added: Option<Vec<JobRow>>,
}

/// How far an update is, for a person watching (`jobscope index update` on a terminal). Sent
/// often (once per day directory and per record): the receiver decides how often to show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress<'a> {
    /// Looking at the archive's day directory `date`, the `done`-th of `total`: the days of the
    /// archive, or those of the months being made again.
    Day {
        done: usize,
        total: usize,
        date: &'a str,
    },
    /// Reading the `done`-th of `total` records new since the last update.
    Record { done: usize, total: usize },
    /// Writing the index files of `month`, the `done`-th of `total` months with new rows.
    Month {
        done: usize,
        total: usize,
        month: &'a str,
    },
}

/// The most added rows an [`UpdateReport`] keeps; past it, what follows the update rereads the index.
pub const MAX_ADDED_KEPT: usize = 100_000;

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

impl Settings {
    /// An index in `dir` owned by root's group 0, with the configuration's defaults for the rest
    /// (tests, benchmarks; the CLI builds its settings from the configuration).
    pub fn in_dir(dir: PathBuf) -> Settings {
        Settings {
            dir,
            admin_gid: 0,
            compact_parts: 16,
            lock_stale_s: 600,
            lock_wait_s: 5,
            report: Report::default(),
        }
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// An index directory: root makes it 0750 root:<admin group> (refusing a symlink); anyone else
/// (tests, an admin's private copy) makes it as they can.
fn mkdir(path: &Path, admin_gid: u32) -> Result<()> {
    if is_root() {
        jobscope_common::fsutil::ensure_dir(path, 0o750, 0, admin_gid)?;
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
    let b = jobscope_common::fsutil::read_limited(&dir.join(STATE), MAX_STATE_BYTES)?;
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
    "cpu_wait_hours",
    // Read for every job of a window by the row filters of `audit gpu-idle` and `cpu-on-gpu`
    // and of `jobscope alerts` (admin/src/alerts/mod.rs, `candidates`).
    "job_id",
    "cpu_eff_pct",
    "gpus_idle",
    "gpus_never_used",
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

/// The rollups' writer: SNAPPY, the default encodings (their sums are whole numbers).
fn rollup_props() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .build()
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

/// Writes the rollup of a jobs part (`stored`: its batches) as the rollups part of the same month
/// and number, its start days on the clock of `zone` (named `zone_name`).
fn write_rollup(
    s: &Settings,
    month: &str,
    seq: u64,
    stored: &[RecordBatch],
    (zone, zone_name): &(Zone, String),
) -> Result<Part> {
    let batches = rollup::of_jobs(stored, *zone)?;
    let mut p = write_part_batches(
        s,
        "rollups",
        month,
        seq,
        rollup::schema(),
        false,
        batches.into_iter().map(Ok),
    )?;
    p.zone = Some(zone_name.clone());
    p.seal = Some(seal_of("rollups", &p));
    Ok(p)
}

/// The number of a part, from its file name.
fn seq_of(p: &Part) -> Option<u64> {
    parse_part_path(&p.file).map(|(_, _, seq)| seq)
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
    let f = jobscope_common::fsutil::create_new(&tmp, 0o640)?;
    if is_root() {
        std::os::unix::fs::fchown(&f, Some(0), Some(s.admin_gid))?;
    }
    let props = if table == "rollups" {
        rollup_props()
    } else {
        writer_props(gzip)
    };
    let mut w = ArrowWriter::try_new(f.try_clone()?, schema, Some(props))?;
    let (mut rows, mut min_end_ms, mut max_end_ms) = (0u64, None::<i64>, None::<i64>);
    for batch in batches {
        let batch = batch?;
        w.write(&batch)?;
        if table == "rollups" {
            // Each level of rows in row groups of its own: a reader skips the other by the
            // statistics of `level` (audit::rollup::PER_USER).
            w.flush()?;
        }
        rows += batch.num_rows() as u64;
        let (lo, hi) = end_range(&batch);
        min_end_ms = lo.into_iter().chain(min_end_ms).min();
        max_end_ms = hi.into_iter().chain(max_end_ms).max();
    }
    w.close()?;
    f.sync_all()?;
    // Read back from the page cache: what is on disk is what later updates compare with.
    let sha256 = manifest::sha256_file(&tmp).with_context(|| format!("{}", tmp.display()))?;
    let path = dir.join(&name);
    std::fs::rename(&tmp, &path)?;
    let stamp = settled(&std::fs::symlink_metadata(&path)?);
    let mut part = Part {
        file: format!("{rel_dir}/{name}"),
        month: month.to_string(),
        rows,
        min_end_ms,
        max_end_ms,
        sha256: Some(sha256),
        stamp,
        seal: None,
        zone: None,
    };
    part.seal = Some(seal_of(table, &part));
    Ok(part)
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
    let bytes = jobscope_common::fsutil::read_limited(path, MAX_DOC_BYTES)?;
    let s = archive::load(&bytes, report)?.summary;
    Ok((JobRow::of(&s), NodeRow::of(&s)))
}

/// The key of an archived run ([`archive::Key::of`]) from its row's columns.
fn key_of(cluster: Option<&str>, job_id: u32, sched_start_s: Option<u64>, start_ms: u64) -> Key {
    Key {
        job_id,
        start_unix_s: sched_start_s.unwrap_or(start_ms / 1000),
        cluster: cluster.and_then(archive::cluster_label),
    }
}

fn key_of_row(r: &JobRow) -> Key {
    key_of(
        r.cluster.as_deref(),
        r.job_id,
        r.scheduler_start_unix_s,
        r.start_unix_ms,
    )
}

/// The columns [`key_of`] reads.
const KEY_COLUMNS: [&str; 4] = [
    "cluster",
    "job_id",
    "scheduler_start_unix_s",
    "start_unix_ms",
];

/// The keys of the runs in `parts` (reading only the key columns).
/// The keys of the rows in `parts`; with `ids`, only those of rows with one of those job ids (an
/// update asks about a few new runs: a set of a whole month's keys cost it ~100 ms at 10 M jobs).
fn keys_in(dir: &Path, parts: &[&Part], ids: Option<&BTreeSet<u32>>) -> Result<BTreeSet<Key>> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    let mut out = BTreeSet::new();
    for p in parts {
        let f = std::fs::File::open(dir.join(&p.file))
            .with_context(|| format!("index part {}", p.file))?;
        let b = ParquetRecordBatchReaderBuilder::try_new(f)
            .with_context(|| format!("index part {} is damaged", p.file))?;
        let idx = KEY_COLUMNS
            .iter()
            .map(|c| b.schema().index_of(c))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mask = ProjectionMask::roots(b.parquet_schema(), idx);
        for batch in b.with_projection(mask).with_batch_size(64 * 1024).build()? {
            let batch = batch.with_context(|| format!("index part {} is damaged", p.file))?;
            let col = |n: &str| batch.column_by_name(n).context("key column missing");
            let cluster = col("cluster")?
                .as_string_opt::<i32>()
                .context("cluster is not text")?;
            let int = |n: &str| -> Result<&Int64Array> {
                col(n)?
                    .as_primitive_opt::<Int64Type>()
                    .with_context(|| format!("{n} is not Int64"))
            };
            let (job, sched, start) = (
                int("job_id")?,
                int("scheduler_start_unix_s")?,
                int("start_unix_ms")?,
            );
            for i in 0..batch.num_rows() {
                if ids.is_some_and(|ids| !ids.contains(&(job.value(i) as u32))) {
                    continue;
                }
                out.insert(key_of(
                    (!cluster.is_null(i)).then(|| cluster.value(i)),
                    job.value(i) as u32,
                    (!sched.is_null(i)).then(|| sched.value(i) as u64),
                    start.value(i) as u64,
                ));
            }
        }
    }
    Ok(out)
}

/// One run's rows and the record they come from.
type Rows = (JobRow, Vec<NodeRow>, PathBuf);

/// Rows of new records, grouped by month, one per key: the key is unique by construction.
#[derive(Default)]
struct Pending {
    months: BTreeMap<String, BTreeMap<Key, Rows>>,
}

impl Pending {
    /// Adds the rows of the record at `path`, returning its key (`None`: not readable, named in
    /// `problems`). A key already pending is replaced by this later record, and said.
    fn add(
        &mut self,
        month: &str,
        path: &Path,
        s: &Settings,
        problems: &mut Vec<String>,
    ) -> Option<Key> {
        match rows_of(path, &s.report) {
            Ok((j, n)) => {
                let k = key_of_row(&j);
                let m = self.months.entry(month.to_string()).or_default();
                if let Some((_, _, old)) = m.insert(k.clone(), (j, n, path.to_path_buf())) {
                    problems.push(format!(
                        "{}: the same run as {} (one row, from the later)",
                        path.display(),
                        old.display()
                    ));
                }
                Some(k)
            }
            Err(e) => {
                problems.push(format!("{}: {e:#}", path.display()));
                None
            }
        }
    }
}

/// Marks `month` to be rebuilt, saying why (once per month).
fn redo(months: &mut BTreeSet<String>, reasons: &mut Vec<String>, month: &str, why: String) {
    if months.insert(month.to_string()) {
        reasons.push(format!("{month}: {why}"));
    }
}

/// A day's MANIFEST size (0 when there is none) and directory metadata, taken before reading it.
fn day_stat(d: &archive::Day) -> Result<(u64, std::fs::Metadata)> {
    let dir = std::fs::symlink_metadata(&d.path)
        .with_context(|| format!("archive day {} cannot be read", d.path.display()))?;
    let m = d.path.join(manifest::MANIFEST);
    let size = match std::fs::symlink_metadata(&m) {
        Ok(md) => md.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => bail!("{} cannot be read: {e}", m.display()),
    };
    Ok((size, dir))
}

/// A day's manifest lines and the records in it. The manifest first: a line is appended after
/// its record is written, so every record a line names is in the listing that follows.
fn read_day(d: &archive::Day) -> Result<(Vec<manifest::Entry>, u64, archive::Listing)> {
    let (entries, size) = manifest::read_entries(&d.path)?;
    let listing = archive::list(&d.path)
        .with_context(|| format!("archive day {} cannot be read", d.path.display()))?;
    if listing.truncated {
        bail!(
            "archive day {} has more entries than can be listed",
            d.path.display()
        );
    }
    Ok((entries, size, listing))
}

fn mark(entries: &[manifest::Entry], size: u64, dir: &std::fs::Metadata) -> DayMark {
    let last = entries.last();
    DayMark {
        size,
        seq: last.map_or(0, |e| e.seq),
        chain: last.map_or_else(String::new, |e| e.chain.clone()),
        // Not held to RACY_S as parts are: a record added in the clock tick of this stamp but
        // after the listing is missed only if its MANIFEST line never comes (the line grows the
        // manifest), and then only until the day changes again or its month is rebuilt; holding
        // it would re-read every day written in the last seconds at each update.
        dir: Some(stamp_of(dir)),
    }
}

/// One update under way: what it reports, the months to be made again from their day
/// directories (`redo`), the days read (`marks`) and the rows read from new records (`pending`).
struct Update<'p> {
    rep: UpdateReport,
    redo: BTreeSet<String>,
    marks: BTreeMap<String, DayMark>,
    pending: Pending,
    progress: &'p mut dyn FnMut(Progress),
}

/// New records by month: each record's path, and whether it has no MANIFEST line (an orphan).
type Found = BTreeMap<String, Vec<(PathBuf, bool)>>;

/// Which of a day's MANIFEST lines are new to the index, given how far it had read the day
/// (`old`); `Err`: why the day's month must be made again instead (the lines it read are not
/// the MANIFEST's any more, or a new line names a record an earlier line named).
fn new_entries<'e>(
    date: &str,
    old: Option<&DayMark>,
    entries: &'e [manifest::Entry],
) -> std::result::Result<Vec<&'e manifest::Entry>, String> {
    let consumed = old.map_or(0, |o| o.seq);
    let prefix_ok = match old {
        None => true,
        Some(o) if o.seq == 0 => true,
        Some(o) => entries.iter().any(|e| e.seq == o.seq && e.chain == o.chain),
    };
    let (done, new): (Vec<_>, Vec<_>) = entries.iter().partition(|e| e.seq <= consumed);
    if !prefix_ok {
        return Err(format!("the MANIFEST of {date} changed or is gone"));
    }
    if new.iter().any(|e| done.iter().any(|x| x.name == e.name)) {
        return Err(format!("a record of {date} was written again"));
    }
    Ok(new)
}

impl Update<'_> {
    /// Marks `month` to be rebuilt, saying why (once per month).
    fn redo(&mut self, month: &str, why: String) {
        redo(&mut self.redo, &mut self.rep.rebuild_reasons, month, why);
    }

    /// Which days changed, what they gained: records of new MANIFEST lines, and records without
    /// a line (`orphan`: the writer died between the record and its line). Days of months to be
    /// made again are left to [`Update::reread_months`].
    fn changed_days(&mut self, state: &State, days: &[archive::Day]) -> Result<Found> {
        let mut found = Found::new();
        for (i, d) in days.iter().enumerate() {
            let month = month_of_day(&d.date);
            if self.redo.contains(&month) {
                continue;
            }
            (self.progress)(Progress::Day {
                done: i + 1,
                total: days.len(),
                date: &d.date,
            });
            let old = state.days.get(&d.date);
            let (size, dir_md) = day_stat(d)?;
            let dir = stamp_of(&dir_md);
            if old.is_some_and(|o| o.size == size && o.dir == Some(dir)) {
                continue;
            }
            let (entries, size, listing) = read_day(d)?;
            self.rep.days_read += 1;
            self.marks
                .insert(d.date.clone(), mark(&entries, size, &dir_md));
            let new = match new_entries(&d.date, old, &entries) {
                Ok(new) => new,
                Err(why) => {
                    self.redo(&month, why);
                    continue;
                }
            };
            let lined: BTreeSet<&str> = entries.iter().map(|e| e.name.as_str()).collect();
            let f = found.entry(month).or_default();
            // The latest line of each name wins (a file listed twice among the new lines).
            let names: BTreeSet<&str> = new.iter().map(|e| e.name.as_str()).collect();
            f.extend(names.into_iter().map(|n| (d.path.join(n), false)));
            f.extend(
                listing
                    .records
                    .iter()
                    .filter(|r| r.regular && r.name.is_some() && !lined.contains(r.file.as_str()))
                    .map(|r| (d.path.join(&r.file), true)),
            );
        }
        Ok(found)
    }

    /// The rows of the new records. Each run one row: a record whose key the month already has is
    /// skipped when it has no line (it was indexed as an orphan before), and makes the month
    /// rebuilt when a new line names it (a newer write of that run: the files are the truth).
    fn add_new_records(&mut self, s: &Settings, state: &State, found: Found) {
        let new_records: usize = found
            .iter()
            .filter(|(m, _)| !self.redo.contains(*m))
            .map(|(_, l)| l.len())
            .sum();
        let mut records_read = 0;
        for (month, list) in found {
            if self.redo.contains(&month) || list.is_empty() {
                continue;
            }
            let parts: Vec<&Part> = state.jobs.iter().filter(|p| p.month == month).collect();
            // The job ids the records' names give; a record whose content has another id is
            // checked against all the month's keys (read then, once).
            let ids: BTreeSet<u32> = list
                .iter()
                .filter_map(|(path, _)| path.file_name())
                .filter_map(|n| archive::RecordName::parse(&n.to_string_lossy()))
                .map(|n| match n {
                    archive::RecordName::Keyed(k) => k.job_id,
                    archive::RecordName::Legacy(id) => id,
                })
                .collect();
            let mut all: Option<BTreeSet<Key>> = None;
            let have = match keys_in(&s.dir, &parts, Some(&ids)) {
                Ok(k) => k,
                Err(e) => {
                    self.redo(&month, format!("{e:#}"));
                    continue;
                }
            };
            for (path, orphan) in list {
                records_read += 1;
                (self.progress)(Progress::Record {
                    done: records_read,
                    total: new_records,
                });
                let named = path
                    .file_name()
                    .and_then(|n| archive::RecordName::parse(&n.to_string_lossy()));
                if let (true, Some(archive::RecordName::Keyed(k))) = (orphan, &named) {
                    if have.contains(k) {
                        continue;
                    }
                }
                let Some(k) = self.pending.add(&month, &path, s, &mut self.rep.problems) else {
                    continue;
                };
                let known = if ids.contains(&k.job_id) {
                    have.contains(&k)
                } else {
                    if all.is_none() {
                        match keys_in(&s.dir, &parts, None) {
                            Ok(a) => all = Some(a),
                            Err(e) => {
                                self.redo(&month, format!("{e:#}"));
                                break;
                            }
                        }
                    }
                    all.as_ref().is_some_and(|a| a.contains(&k))
                };
                if known {
                    if orphan {
                        self.pending
                            .months
                            .entry(month.clone())
                            .or_default()
                            .remove(&k);
                        continue;
                    }
                    let why = format!("{} is a run the index has", path.display());
                    self.redo(&month, why);
                    break;
                }
            }
        }
    }

    /// The months to be made again, from their day directories' records (the files are the
    /// truth): all their rows pending, none kept.
    fn reread_months(&mut self, s: &Settings, days: &[archive::Day]) -> Result<()> {
        let rebuilt_days = days
            .iter()
            .filter(|d| self.redo.contains(&month_of_day(&d.date)))
            .count();
        let mut days_done = 0;
        for month in &self.redo {
            self.pending.months.insert(month.clone(), BTreeMap::new());
            for d in days.iter().filter(|d| &month_of_day(&d.date) == month) {
                days_done += 1;
                (self.progress)(Progress::Day {
                    done: days_done,
                    total: rebuilt_days,
                    date: &d.date,
                });
                let (_, dir_md) = day_stat(d)?;
                let (entries, size, listing) = read_day(d)?;
                self.rep.days_read += 1;
                self.marks
                    .insert(d.date.clone(), mark(&entries, size, &dir_md));
                for r in listing
                    .records
                    .iter()
                    .filter(|r| r.regular && r.name.is_some())
                {
                    self.pending
                        .add(month, &d.path.join(&r.file), s, &mut self.rep.problems);
                }
            }
        }
        Ok(())
    }
}

/// Writes each month's pending rows as new parts (a jobs part, and a nodes part when it has
/// nodes), numbered from `seq`, listed in `state`; the jobs added go in `rep.added` while few.
fn write_months(
    s: &Settings,
    state: &mut State,
    pending: Pending,
    rep: &mut UpdateReport,
    seq: &mut u64,
    zone: &(Zone, String),
    progress: &mut dyn FnMut(Progress),
) -> Result<()> {
    let months = pending.months;
    let with_rows = months.values().filter(|r| !r.is_empty()).count();
    for (done, (month, runs)) in months
        .into_iter()
        .filter(|(_, r)| !r.is_empty())
        .enumerate()
    {
        progress(Progress::Month {
            done: done + 1,
            total: with_rows,
            month: &month,
        });
        let (mut jobs, mut nodes) = (Vec::new(), Vec::new());
        for (j, n, _) in runs.into_values() {
            jobs.push(j);
            nodes.extend(n);
        }
        jobs.sort_by_key(|r| (r.end_unix_ms, r.job_id));
        rep.jobs_added += jobs.len() as u64;
        let batch = stored_job_batch(&job_batch(&jobs)?)?;
        state
            .jobs
            .push(write_part(s, "jobs", &month, *seq, &batch)?);
        state.rollups.push(write_rollup(
            s,
            &month,
            *seq,
            std::slice::from_ref(&batch),
            zone,
        )?);
        *seq += 1;
        rep.parts_written += 1;
        if !nodes.is_empty() {
            nodes.sort_by_key(|r| (r.end_unix_ms, r.job_id));
            let batch = node_batch(&nodes)?;
            state
                .nodes
                .push(write_part(s, "nodes", &month, *seq, &batch)?);
            *seq += 1;
        }
        if let Some(a) = rep.added.as_mut() {
            a.extend(jobs);
            if a.len() > MAX_ADDED_KEPT {
                rep.added = None;
            }
        }
    }
    Ok(())
}

/// What compaction does to one month's parts (their rows, in order), past `compact_parts` of
/// them: `None` leaves them; `Some(Some(i))` merges all but part `i`, the largest, which the
/// others together hold under a quarter of the rows of; `Some(None)` merges them all.
fn compaction(rows: &[u64], compact_parts: usize) -> Option<Option<usize>> {
    if rows.len() <= compact_parts {
        return None;
    }
    let total: u64 = rows.iter().sum();
    let big = (0..rows.len()).max_by_key(|&i| rows[i]).unwrap_or(0);
    Some(((total - rows[big]) * 4 < rows[big]).then_some(big))
}

/// Compaction: a month of more than `compact_parts` parts gets fewer. Bounded work per update:
/// the month's largest part stays as it is while the others together hold under a quarter of its
/// rows (they are merged into one); past that, the whole month becomes one part. A row is so
/// rewritten a bounded number of times on average, and an update after one new job merges the
/// month's small parts, not the month (docs/audit.md, "Updates").
fn compact(
    s: &Settings,
    state: &mut State,
    rep: &mut UpdateReport,
    seq: &mut u64,
    zone: &(Zone, String),
) -> Result<()> {
    let mut new_rollups = Vec::new();
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
            let rows: Vec<u64> = list.iter().map(|p| p.rows).collect();
            let Some(keep) = compaction(&rows, s.compact_parts) else {
                parts.extend(list);
                continue;
            };
            if let Some(big) = keep {
                parts.push(list.remove(big));
            }
            let mut batches = Vec::new();
            for p in &list {
                batches.extend(read_part(&s.dir, p)?);
            }
            let all = arrow_select_concat(&table_schema(table), &batches)?;
            parts.push(write_part(s, table, &month, *seq, &all)?);
            if table == "jobs" {
                new_rollups.push(write_rollup(
                    s,
                    &month,
                    *seq,
                    std::slice::from_ref(&all),
                    zone,
                )?);
            }
            *seq += 1;
            rep.parts_compacted += list.len();
        }
    }
    // The rollups of the jobs parts merged go with them.
    let jobs: BTreeSet<Option<u64>> = state.jobs.iter().map(seq_of).collect();
    state.rollups.retain(|r| jobs.contains(&seq_of(r)));
    state.rollups.extend(new_rollups);
    Ok(())
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
        lock::Lock::take(&self.store.root().join(LOCK), self.settings.lock_wait_s)
    }

    /// Brings the index up to date with the archive (a full rebuild when `rebuild`, or when the
    /// index is missing or damaged).
    pub fn update(&self, rebuild: bool) -> Result<UpdateReport> {
        self.update_with(rebuild, &mut |_| {})
    }

    /// [`Index::update`], telling `progress` how far it is.
    pub fn update_with(
        &self,
        rebuild: bool,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<UpdateReport> {
        let _lock = self.lock()?;
        let s = &self.settings;
        mkdir(&s.dir, s.admin_gid)?;
        let mut up = Update {
            rep: UpdateReport::default(),
            redo: BTreeSet::new(),
            marks: BTreeMap::new(),
            pending: Pending::default(),
            progress,
        };
        let mut state = self.starting_state(rebuild, &mut up);
        let next_part = self.next_free_seq(&state);

        // A directory that cannot be read stops the update here, the index as it was.
        let days = self.store.walk_days()?;
        if up.rep.rebuilt {
            up.redo.extend(days.iter().map(|d| month_of_day(&d.date)));
        }
        // A day indexed before and gone now (pruned, moved, removed): its rows go with it, as a
        // rebuild from the archive would have it. Its month is made again from the days left.
        let present: BTreeSet<&str> = days.iter().map(|d| d.date.as_str()).collect();
        for k in state.days.keys().filter(|k| !present.contains(k.as_str())) {
            up.redo(&month_of_day(k), format!("day {k} is gone"));
        }
        let found = up.changed_days(&state, &days)?;
        up.add_new_records(s, &state, found);
        up.reread_months(s, &days)?;

        for (_, parts) in state.parts_mut() {
            parts.retain(|p| !up.redo.contains(&p.month));
        }
        state
            .days
            .retain(|k, _| present.contains(k.as_str()) && !up.redo.contains(&month_of_day(k)));
        state.days.extend(std::mem::take(&mut up.marks));
        let mut rep = up.rep;
        rep.months_rebuilt = up.redo.into_iter().collect();
        rep.added = (rep.months_rebuilt.is_empty() && !rep.rebuilt).then(Vec::new);
        let mut seq = next_part;
        let zone = rollup::writer_zone();
        write_months(
            s,
            &mut state,
            up.pending,
            &mut rep,
            &mut seq,
            &zone,
            up.progress,
        )?;
        compact(s, &mut state, &mut rep, &mut seq, &zone)?;
        state.next_part = seq;
        rep.jobs_total = state.jobs.iter().map(|p| p.rows).sum();
        let json = serde_json::to_vec(&state)?;
        let owner = is_root().then_some((0, s.admin_gid));
        jobscope_common::fsutil::write_atomic(&s.dir, STATE, &json, 0o640, owner)?;
        self.remove_unlisted(&state);
        Ok(rep)
    }

    /// The state an update starts from: the one on disk, its entries checked against their files
    /// (each month that disagrees to be made again), or a new one when a rebuild is asked for or
    /// there is no readable state (`rep.rebuilt`, and why).
    fn starting_state(&self, rebuild: bool, up: &mut Update) -> State {
        let s = &self.settings;
        let state = if rebuild {
            up.rep.why = Some("asked for".into());
            None
        } else {
            match load_state(&s.dir) {
                Err(_) if !s.dir.join(STATE).exists() => {
                    up.rep.why = Some("no index yet".into());
                    None
                }
                Ok(mut st) => {
                    for (month, why) in self.validate(&mut st) {
                        up.redo(&month, why);
                    }
                    Some(st)
                }
                Err(e) => {
                    up.rep.why = Some(format!("{e:#}"));
                    None
                }
            }
        };
        state.unwrap_or_else(|| {
            up.rep.rebuilt = true;
            State {
                version: STATE_VERSION,
                ..Default::default()
            }
        })
    }

    /// Checks every entry of state.json against its part: listed once, under the table and month
    /// of its path, there, with the checksum it was written with (read again only when its
    /// [`Stamp`] moved), and with the file's own rows and end times (read again only when the
    /// entry's seal does not match). An entry that fails is dropped, and both the month it names
    /// and the month of its path are rebuilt: either may be where its rows are (a month edited in
    /// state.json, or a path). Part files no entry lists are [`Index::unlisted`]. Returns the
    /// months to rebuild and why; records the checksums, stamps and seals it verified in `st`.
    fn validate(&self, st: &mut State) -> BTreeMap<String, String> {
        let mut bad = BTreeMap::new();
        let unlisted = self.unlisted(st);
        let mut seen = BTreeSet::new();
        for (table, parts) in st.parts_mut() {
            parts.retain_mut(|p| {
                let Err(e) = self.check_part(table, p, &mut seen) else {
                    return true;
                };
                let in_path = p.file.split('/').nth(1).unwrap_or_default();
                for month in [p.month.as_str(), in_path] {
                    if is_month(month) {
                        bad.entry(month.to_string())
                            .or_insert_with(|| format!("{e:#}"));
                    }
                }
                false
            });
        }
        for (month, why) in unlisted {
            bad.entry(month).or_insert(why);
        }
        // Each jobs part has its rollup, of its month and number, and each rollup its jobs part.
        let key = |p: &Part| (p.month.clone(), seq_of(p));
        let jobs: BTreeSet<_> = st.jobs.iter().map(key).collect();
        let rollups: BTreeSet<_> = st.rollups.iter().map(key).collect();
        for (month, seq) in jobs.symmetric_difference(&rollups) {
            bad.entry(month.clone()).or_insert_with(|| {
                format!(
                    "index part {:08} of {month} has no rollup, or a rollup no jobs part",
                    seq.unwrap_or_default()
                )
            });
        }
        bad
    }

    fn check_part(&self, table: &str, p: &mut Part, seen: &mut BTreeSet<String>) -> Result<()> {
        if !parse_part_path(&p.file).is_some_and(|(t, m, _)| t == table && m == p.month) {
            bail!(
                "index part {} is listed in {table} under month {}",
                p.file,
                p.month
            );
        }
        if !seen.insert(p.file.clone()) {
            bail!("index part {} is listed twice", p.file);
        }
        let path = self.settings.dir.join(&p.file);
        let md = std::fs::symlink_metadata(&path)
            .with_context(|| format!("index part {} is missing", p.file))?;
        if !md.is_file() {
            bail!("index part {} is not a regular file", p.file);
        }
        let unchanged = p.sha256.is_some() && p.stamp == Some(stamp_of(&md));
        if unchanged && sealed(table, p) {
            return Ok(());
        }
        if !unchanged {
            self.check_sum(table, p, &path)?;
            p.stamp = settled(&md);
        }
        self.check_footer(table, p)?;
        p.seal = Some(seal_of(table, p));
        Ok(())
    }

    /// The part's bytes against the checksum it was written with (or, written before checksums
    /// were kept, every page decoded once; its checksum is then recorded).
    fn check_sum(&self, table: &str, p: &mut Part, path: &Path) -> Result<()> {
        let sum = manifest::sha256_file(path)
            .with_context(|| format!("index part {} cannot be read", p.file))?;
        match &p.sha256 {
            Some(want) if *want != sum => {
                bail!("index part {} is not what was written (SHA-256)", p.file)
            }
            Some(_) => {}
            None => {
                let schema = table_schema(table);
                let batches = read_part(&self.settings.dir, p)
                    .with_context(|| format!("index part {} is damaged", p.file))?;
                let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                if batches
                    .iter()
                    .any(|b| b.schema().fields() != schema.fields())
                    || rows as u64 != p.rows
                {
                    bail!("index part {} has other columns or rows", p.file);
                }
                p.sha256 = Some(sum);
            }
        }
        Ok(())
    }

    /// The entry's rows and end times against the part's own footer (its row count and the
    /// statistics of `end_unix_ms`): an entry that says fewer rows or other end times than the file
    /// holds would make totals wrong and a window skip the file.
    fn check_footer(&self, table: &str, p: &Part) -> Result<()> {
        let f = std::fs::File::open(self.settings.dir.join(&p.file))
            .with_context(|| format!("index part {}", p.file))?;
        let m = ArrowReaderMetadata::load(&f, ArrowReaderOptions::new())
            .with_context(|| format!("index part {} is damaged", p.file))?;
        let schema = table_schema(table);
        if m.schema().fields() != schema.fields() {
            bail!("index part {} has other columns than {table}", p.file);
        }
        let rows = m.metadata().file_metadata().num_rows();
        if u64::try_from(rows).ok() != Some(p.rows) {
            bail!(
                "index part {} holds {rows} rows, state.json says {}",
                p.file,
                p.rows
            );
        }
        let (mut min, mut max) = (None::<i64>, None::<i64>);
        if let Ok(col) = m.schema().index_of("end_unix_ms") {
            for rg in m.metadata().row_groups() {
                match rg.column(col).statistics() {
                    Some(Statistics::Int64(st)) => {
                        min = st.min_opt().copied().into_iter().chain(min).min();
                        max = st.max_opt().copied().into_iter().chain(max).max();
                    }
                    _ if rg.num_rows() == 0 => {}
                    _ => bail!("index part {} has no statistics of its end times", p.file),
                }
            }
        }
        if (min, max) != (p.min_end_ms, p.max_end_ms) {
            bail!(
                "index part {} holds end times {min:?} to {max:?}, state.json says {:?} to {:?}",
                p.file,
                p.min_end_ms,
                p.max_end_ms
            );
        }
        Ok(())
    }

    /// Every month directory of both tables with the files in it, each as (path in the index,
    /// path on disk): what [`Index::part_files`] and [`Index::remove_unlisted`] both walk.
    fn month_files(&self) -> Vec<(PathBuf, Vec<(String, PathBuf)>)> {
        let mut out = Vec::new();
        for table in TABLES {
            let Ok(months) = std::fs::read_dir(self.settings.dir.join(table)) else {
                continue;
            };
            for m in months.flatten() {
                let month = m.file_name().to_string_lossy().into_owned();
                let Ok(files) = std::fs::read_dir(m.path()) else {
                    continue;
                };
                let files = files
                    .flatten()
                    .map(|f| {
                        let name = f.file_name().to_string_lossy().into_owned();
                        (format!("{table}/{month}/{name}"), f.path())
                    })
                    .collect();
                out.push((m.path(), files));
            }
        }
        out
    }

    /// The part files in the index's month directories: (path in the index, month, number).
    fn part_files(&self) -> Vec<(String, String, u64)> {
        self.month_files()
            .into_iter()
            .flat_map(|(_, files)| files)
            .filter_map(|(file, _)| {
                let (_, month, seq) = parse_part_path(&file)?;
                let month = month.to_string();
                Some((file, month, seq))
            })
            .collect()
    }

    /// Months that hold a part file state.json does not list although a committed update wrote
    /// it (its number is below `next_part`): an entry gone from state.json, whose rows would
    /// otherwise be missing while its days count as read. A crashed writer's new files are numbered
    /// from `next_part` on and are not counted; those a committed update had replaced (compacted,
    /// or of a rebuilt month) are, when it died before removing them: a month rebuilt once more.
    /// When `next_part` itself disagrees with the listed parts, every unlisted file is counted.
    fn unlisted(&self, st: &State) -> BTreeMap<String, String> {
        let listed: BTreeSet<&str> = st.all_parts().map(|p| p.file.as_str()).collect();
        let highest = listed
            .iter()
            .filter_map(|f| parse_part_path(f))
            .map(|(_, _, seq)| seq)
            .max();
        let below = if st.next_part <= MAX_PART_SEQ && highest.is_none_or(|h| h < st.next_part) {
            st.next_part
        } else {
            u64::MAX
        };
        let mut out = BTreeMap::new();
        for (file, month, seq) in self.part_files() {
            if seq < below && !listed.contains(file.as_str()) {
                out.entry(month)
                    .or_insert_with(|| format!("index part {file} is not listed in state.json"));
            }
        }
        out
    }

    /// The number of the next part file: past every part listed or on disk (a new part never
    /// replaces a file, whatever `next_part` in state.json says).
    fn next_free_seq(&self, st: &State) -> u64 {
        let listed = st.all_parts().filter_map(|p| parse_part_path(&p.file));
        let on_disk = self.part_files();
        let taken = listed
            .map(|(_, _, seq)| seq)
            .chain(on_disk.iter().map(|(_, _, seq)| *seq))
            .filter(|&seq| seq < MAX_PART_SEQ)
            .max()
            .map_or(1, |seq| seq + 1);
        let said = if st.next_part <= MAX_PART_SEQ {
            st.next_part
        } else {
            1
        };
        said.max(taken)
    }

    /// Removes part files state.json does not list (older compacted parts, a crashed writer's files).
    fn remove_unlisted(&self, st: &State) {
        let listed: BTreeSet<&str> = st.all_parts().map(|p| p.file.as_str()).collect();
        for (dir, files) in self.month_files() {
            let mut left = 0;
            for (file, path) in files {
                if !listed.contains(file.as_str()) {
                    let _ = std::fs::remove_file(path);
                } else {
                    left += 1;
                }
            }
            if left == 0 {
                let _ = std::fs::remove_dir(dir);
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
    let zone = rollup::writer_zone();
    let flush = |month: &str, buf: &mut Vec<JobRow>, state: &mut State| -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        buf.sort_by_key(|r| (r.end_unix_ms, r.job_id));
        let seq = state.next_part;
        state.next_part += 1;
        let (jobs, rollups) = write_part_slices(settings, month, seq, buf, &zone)?;
        state.jobs.push(jobs);
        state.rollups.push(rollups);
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
    jobscope_common::fsutil::write_atomic(
        &settings.dir,
        STATE,
        &serde_json::to_vec(&state)?,
        0o640,
        owner,
    )?;
    Ok(n)
}

/// [`write_part`] for many job rows: Arrow batches of [`ROW_GROUP_ROWS`] rows into one file, and
/// its rollup.
fn write_part_slices(
    s: &Settings,
    month: &str,
    seq: u64,
    rows: &[JobRow],
    zone: &(Zone, String),
) -> Result<(Part, Part)> {
    let batches = rows
        .chunks(ROW_GROUP_ROWS)
        .map(|c| stored_job_batch(&job_batch(c)?))
        .collect::<Result<Vec<_>>>()?;
    let gzip = rows.len() >= GZIP_MIN_ROWS;
    let jobs = write_part_batches(
        s,
        "jobs",
        month,
        seq,
        stored_job_schema(),
        gzip,
        batches.iter().cloned().map(Ok),
    )?;
    Ok((jobs, write_rollup(s, month, seq, &batches, zone)?))
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
        // One line, the OS error once: "… missing or damaged: <path>: <why>" and what mends it.
        let state = load_state(dir).map_err(|e| {
            anyhow::anyhow!(
                "the index at {} is missing or damaged: {} (root's `jobscope index update` makes \
                 it again)",
                dir.display(),
                jobscope_common::fsutil::error_line(e.as_ref())
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
        self.scan_where(q, columns, None)
    }

    /// [`ParquetEngine::scan`] of the rows `keep` keeps: it is handed each row group's `keep.0`
    /// columns first, and only the rows it keeps are decoded in the others (a job list over a year
    /// decodes its wide text columns for its own rows, not for every job).
    pub fn scan_where(
        &self,
        q: &Query,
        columns: &[&str],
        keep: Option<RowPredicate>,
    ) -> Result<Vec<RecordBatch>> {
        self.scan_where_as(q, columns, false, keep)
    }

    /// [`ParquetEngine::scan_where`]; `dict`: the low-cardinality text as dictionaries (see
    /// [`ParquetEngine::fold`]).
    pub fn scan_where_as(
        &self,
        q: &Query,
        columns: &[&str],
        dict: bool,
        keep: Option<RowPredicate>,
    ) -> Result<Vec<RecordBatch>> {
        let per_part = self.fold_where(
            q,
            columns,
            dict,
            keep,
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
        self.fold_where(q, columns, dict, None, init, f)
    }

    /// [`ParquetEngine::fold`] over the rows `keep` keeps (see [`ParquetEngine::scan_where`]).
    pub fn fold_where<T: Send>(
        &self,
        q: &Query,
        columns: &[&str],
        dict: bool,
        keep: Option<RowPredicate>,
        init: impl Fn() -> T + Sync,
        f: impl Fn(&mut T, usize, RecordBatch) -> Result<()> + Sync,
    ) -> Result<Vec<T>> {
        let since = q.window.since_unix_s.map(|s| s.saturating_mul(1000));
        let until = q.window.until_unix_s.map(|u| u.saturating_mul(1000));
        let overlaps = |min: Option<i64>, max: Option<i64>| {
            since.is_none_or(|s| max.is_none_or(|m| m >= s))
                && until.is_none_or(|u| min.is_none_or(|m| m < u))
        };
        // An entry's end times skip its file only while its seal holds (state.json edited or
        // damaged since the last update: the footer's statistics decide instead), and a file
        // listed twice is read once; the next update rebuilds such months.
        let mut files = BTreeSet::new();
        let parts: Vec<&Part> = self
            .state
            .jobs
            .iter()
            .filter(|p| files.insert(p.file.as_str()))
            .filter(|p| !sealed("jobs", p) || overlaps(p.min_end_ms, p.max_end_ms))
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
        // part's footer is read once here, again with its page index when the window covers a
        // row group in part (the pages of its other days are then skipped).
        let inside = |min: Option<i64>, max: Option<i64>| {
            since.is_none_or(|s| min.is_some_and(|m| m >= s))
                && until.is_none_or(|u| max.is_some_and(|m| m < u))
        };
        let mut metas = Vec::with_capacity(parts.len());
        let mut units: Vec<(usize, usize)> = Vec::new();
        for (pi, p) in parts.iter().enumerate() {
            let load = |pages: bool| {
                ArrowReaderMetadata::load(
                    &open(p)?,
                    opts().with_page_index_policy(if pages {
                        PageIndexPolicy::Optional
                    } else {
                        PageIndexPolicy::Skip
                    }),
                )
                .with_context(|| format!("index part {} is damaged", p.file))
            };
            let mut m = load(false)?;
            let end_col = m.schema().index_of("end_unix_ms")?;
            let mut in_part = false;
            for (gi, rg) in m.metadata().row_groups().iter().enumerate() {
                let (touch, whole) = match rg.column(end_col).statistics() {
                    Some(Statistics::Int64(st)) => {
                        let (lo, hi) = (st.min_opt().copied(), st.max_opt().copied());
                        (overlaps(lo, hi), inside(lo, hi))
                    }
                    _ => (true, false),
                };
                if touch {
                    units.push((pi, gi));
                    in_part |= !whole;
                }
            }
            if in_part && (since.is_some() || until.is_some()) {
                m = load(true)?;
            }
            metas.push(m);
        }
        let read = |unit: usize, acc: &mut T| -> Result<()> {
            let (pi, gi) = units[unit];
            let m = &metas[pi];
            let pages = window_pages(
                m.metadata(),
                gi,
                m.schema().index_of("end_unix_ms")?,
                overlaps,
            );
            let b = ParquetRecordBatchReaderBuilder::new_with_metadata(open(parts[pi])?, m.clone());
            let idx: Vec<usize> = stored
                .iter()
                .map(|c| m.schema().index_of(c))
                .collect::<std::result::Result<_, _>>()?;
            let mask = ProjectionMask::roots(b.parquet_schema(), idx);
            let mut b = b
                .with_projection(mask)
                .with_row_groups(vec![gi])
                .with_batch_size(ROW_GROUP_ROWS);
            if let Some(sel) = pages {
                b = b.with_row_selection(sel);
            }
            if let Some((cols, pred)) = &keep {
                let idx: Vec<usize> = cols
                    .iter()
                    .map(|c| m.schema().index_of(c))
                    .collect::<std::result::Result<_, _>>()?;
                let pred = pred.clone();
                let f = ArrowPredicateFn::new(
                    ProjectionMask::roots(b.parquet_schema(), idx),
                    move |batch: RecordBatch| {
                        pred(&batch)
                            .map(BooleanArray::from)
                            .map_err(|e| arrow_schema::ArrowError::ExternalError(e.into()))
                    },
                );
                b = b.with_row_filter(RowFilter::new(vec![Box::new(f)]));
            }
            for batch in b.build()? {
                f(acc, unit, with_derived(&batch?, columns)?)?;
            }
            Ok(())
        };
        on_every_core(units.len(), init, read)
    }
}

/// The rows of row group `gi` on the pages whose end times (column `end_col`) `overlaps` the
/// window, from the page index (`None`: no page index, or every page): what a reader decodes of a
/// row group the window covers in part. The rows it does not select all ended outside the window.
fn window_pages(
    meta: &parquet::file::metadata::ParquetMetaData,
    gi: usize,
    end_col: usize,
    overlaps: impl Fn(Option<i64>, Option<i64>) -> bool,
) -> Option<parquet::arrow::arrow_reader::RowSelection> {
    use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
    use parquet::file::page_index::column_index::ColumnIndexMetaData;
    let ColumnIndexMetaData::INT64(ix) = meta.column_index()?.get(gi)?.get(end_col)? else {
        return None;
    };
    let locations = meta.offset_index()?.get(gi)?.get(end_col)?.page_locations();
    let rows = meta.row_group(gi).num_rows();
    if locations.len() != ix.min_values_iter().count() || locations.is_empty() {
        return None;
    }
    let mut selectors: Vec<RowSelector> = Vec::with_capacity(locations.len());
    for (k, loc) in locations.iter().enumerate() {
        let next = locations.get(k + 1).map_or(rows, |l| l.first_row_index);
        let n = usize::try_from(next - loc.first_row_index).ok()?;
        // A page of nulls only, or without figures, is read: no row of it is left out unseen.
        let keep =
            ix.is_null_page(k) || overlaps(ix.min_value(k).copied(), ix.max_value(k).copied());
        selectors.push(if keep {
            RowSelector::select(n)
        } else {
            RowSelector::skip(n)
        });
    }
    if selectors.iter().all(|s| !s.skip) {
        return None;
    }
    Some(RowSelection::from(selectors))
}

/// Which rows a scan keeps: the stored columns it looks at, and for a batch of those, whether to
/// keep each row.
pub type RowPredicate = (Vec<&'static str>, KeepRows);

/// For a batch of a scan's predicate columns, whether to keep each row.
pub type KeepRows = std::sync::Arc<dyn Fn(&RecordBatch) -> Result<Vec<bool>> + Send + Sync>;

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
    with_dictionaries(&stored_job_schema(), DICT_COLUMNS)
}

/// `schema` with the text columns `names` as `Dictionary(Int32, Utf8)`: a reader's schema hint
/// (the files store plain UTF-8 columns, dictionary-encoded by Parquet itself).
fn with_dictionaries(schema: &arrow_schema::Schema, names: &[&str]) -> arrow_schema::SchemaRef {
    let fields: Vec<arrow_schema::Field> = schema
        .fields()
        .iter()
        .map(|f| {
            if names.contains(&f.name().as_str()) {
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

/// Work units `0..units` shared by one reader per core (each takes the next unit), each reader
/// adding into its own accumulator; returns the accumulators.
fn on_every_core<T: Send>(
    units: usize,
    init: impl Fn() -> T + Sync,
    read: impl Fn(usize, &mut T) -> Result<()> + Sync,
) -> Result<Vec<T>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let worker = || -> Result<T> {
        let mut acc = init();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if i >= units {
                return Ok(acc);
            }
            read(i, &mut acc)?;
        }
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_READERS)
        .min(units.max(1));
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

impl ParquetEngine {
    /// The rows a job report lists (`gpu-idle`: exactly them; `cpu-on-gpu`: every job of the GPU
    /// partitions), projected to `columns`, without making its table: what a caller that needs
    /// a column or two of a long list reads.
    pub fn report_rows(&self, q: &Query, columns: &[&str]) -> Result<Vec<RecordBatch>> {
        self.scan_where(q, columns, self.rows_a_report_needs(q)?)
    }

    /// The rows a job report reads, decided on a few columns before its others are decoded:
    /// those in the window and filters, and of them, for `gpu-idle`, the jobs with an idle GPU;
    /// for `cpu-on-gpu`, the jobs of the partitions where a job with GPUs ran (found first, from
    /// two columns). `None`: every row of the row groups the window touches.
    fn rows_a_report_needs(&self, q: &Query) -> Result<Option<RowPredicate>> {
        use crate::eval::{filter_columns, matching};
        let q2 = q.clone();
        let mut cols = filter_columns(q);
        let keep: KeepRows = match &q.report {
            AuditReport::Jobs => std::sync::Arc::new(move |b: &RecordBatch| {
                let mut keep = vec![false; b.num_rows()];
                matching(&q2, b)?.into_iter().for_each(|i| keep[i] = true);
                Ok(keep)
            }),
            AuditReport::GpuIdle => {
                cols.extend(["gpus_idle", "gpus_never_used"]);
                std::sync::Arc::new(move |b: &RecordBatch| {
                    let v = View::new(b);
                    let (idle, never) = (v.i("gpus_idle")?, v.i("gpus_never_used")?);
                    let some = |a: &Int64Array, i: usize| !a.is_null(i) && a.value(i) > 0;
                    let mut keep = vec![false; b.num_rows()];
                    for i in matching(&q2, b)? {
                        keep[i] = some(idle, i) || some(never, i);
                    }
                    Ok(keep)
                })
            }
            AuditReport::CpuOnlyOnGpu { .. } => {
                // How busy a partition was counts every job the caller may see (eval.rs):
                // the window and the uid rule only.
                let scope = Query {
                    filters: crate::query::Filters {
                        uid: q.filters.uid,
                        ..Default::default()
                    },
                    ..q.clone()
                };
                let mut light = filter_columns(&scope);
                light.extend(["partition", "alloc_gpus"]);
                // The partition as a dictionary: its names are not made per row.
                let found = self.fold(
                    &scope,
                    &light,
                    true,
                    BTreeSet::new,
                    |acc: &mut BTreeSet<String>, _, b| {
                        let v = View::new(&b);
                        let (p, g) = (v.t("partition")?, v.i("alloc_gpus")?);
                        for i in matching(&scope, &b)? {
                            // Looked up before it is copied: most rows name a partition
                            // already found.
                            if let Some(p) = p.get(i).filter(|_| !g.is_null(i) && g.value(i) > 0) {
                                if !acc.contains(p) {
                                    acc.insert(p.to_string());
                                }
                            }
                        }
                        Ok(())
                    },
                )?;
                let gpu_parts: BTreeSet<String> = found.into_iter().flatten().collect();
                cols = filter_columns(&scope);
                cols.push("partition");
                std::sync::Arc::new(move |b: &RecordBatch| {
                    let p = View::new(b).t("partition")?;
                    let mut keep = vec![false; b.num_rows()];
                    for i in matching(&scope, b)? {
                        keep[i] = p.get(i).is_some_and(|p| gpu_parts.contains(p));
                    }
                    Ok(keep)
                })
            }
            _ => return Ok(None),
        };
        cols.dedup();
        let mut seen = BTreeSet::new();
        cols.retain(|c| seen.insert(*c));
        Ok(Some((cols, keep)))
    }
}

impl Engine for ParquetEngine {
    fn run(&self, q: &Query) -> Result<Table> {
        if matches!(
            q.report,
            AuditReport::Usage | AuditReport::TopWasters { .. }
        ) {
            // Each core decodes and aggregates its parts (or rollups); the partial aggregations
            // are merged.
            return self.usage(q);
        }
        let cols = needed_columns(q);
        if let AuditReport::CpuOnlyOnGpu { busy_pct } = q.report {
            let (occupancy, listed) = self.cpu_only_batches(q, true)?;
            return crate::eval::cpu_only_on_gpu_of(q, &occupancy, &listed, busy_pct);
        }
        if q.report == AuditReport::Heatmap {
            // Each core walks the hours of its own jobs; the exact sums merge.
            let parts = self.fold(
                q,
                &cols,
                false,
                || crate::eval::Heat::new(q),
                |h, _, b| h.add(q, &b),
            )?;
            let mut all = crate::eval::Heat::new(q);
            parts.iter().for_each(|h| all.merge(h));
            return Ok(all.finish(q));
        }
        let batches = self.scan_where(q, &cols, self.rows_a_report_needs(q)?)?;
        evaluate(q, &batches)
    }
}

impl ParquetEngine {
    /// What the cluster report shows of the `cpu-on-gpu` report `q`
    /// ([`crate::eval::CpuOnGpuSummary`]), its busy jobs' rows for the first `top_n`.
    pub fn cpu_on_gpu_summary(
        &self,
        q: &Query,
        top_n: usize,
    ) -> Result<crate::eval::CpuOnGpuSummary> {
        let AuditReport::CpuOnlyOnGpu { busy_pct } = q.report else {
            bail!("a summary of cpu-on-gpu is asked of another report");
        };
        let (occupancy, _) = self.cpu_only_batches(q, false)?;
        crate::eval::cpu_only_on_gpu_summary(q, &occupancy, busy_pct, top_n, |ids| {
            // The report's columns of these jobs alone: the filter reads two columns of every
            // row, the others of the few it keeps.
            let ids: std::collections::HashSet<(i64, i64)> = ids.iter().copied().collect();
            let keep: KeepRows = std::sync::Arc::new(move |b: &RecordBatch| {
                let col = |n: &str| {
                    b.column_by_name(n)
                        .and_then(|a| a.as_any().downcast_ref::<Int64Array>())
                        .with_context(|| format!("the index's {n} column"))
                };
                let (id, end) = (col("job_id")?, col("end_unix_ms")?);
                Ok((0..b.num_rows())
                    .map(|i| {
                        !id.is_null(i)
                            && !end.is_null(i)
                            && ids.contains(&(id.value(i), end.value(i)))
                    })
                    .collect())
            });
            self.scan_where(
                q,
                &needed_columns(q),
                Some((vec!["job_id", "end_unix_ms"], keep)),
            )
        })
    }

    /// The jobs the `cpu-on-gpu` report `q` marks busy ([`crate::eval::cpu_only_busy_runs`]),
    /// from the occupancy columns alone.
    pub fn cpu_on_gpu_busy(&self, q: &Query) -> Result<Vec<(crate::eval::RunKey, f64)>> {
        let AuditReport::CpuOnlyOnGpu { busy_pct } = q.report else {
            bail!("the busy jobs of cpu-on-gpu are asked of another report");
        };
        let (occupancy, _) = self.cpu_only_batches(q, false)?;
        crate::eval::cpu_only_busy_runs(q, &occupancy, busy_pct)
    }

    /// The batches `cpu-on-gpu` is made of: the occupancy from five columns of every job of the
    /// GPU partitions; the report's columns only for the CPU-only jobs it lists.
    /// `cpu_only_batches(q, false)`: the occupancy alone, with what a summary counts the listed
    /// jobs by (`job_id`, `cluster`, `core_hours_alloc`).
    fn cpu_only_batches(
        &self,
        q: &Query,
        list: bool,
    ) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>)> {
        let cols = needed_columns(q);
        {
            let keep = self.rows_a_report_needs(q)?;
            let mut light = crate::eval::filter_columns(q);
            light.extend([
                "partition",
                "start_unix_ms",
                "alloc_cores",
                "alloc_gpus",
                "job_id",
            ]);
            if !list {
                light.extend(["cluster", "core_hours_alloc"]);
            }
            let mut seen = BTreeSet::new();
            light.retain(|c| seen.insert(*c));
            // Text as dictionaries: the occupancy reads a partition per row, never a copy.
            let occupancy = self.scan_where_as(q, &light, true, keep.clone())?;
            if !list {
                return Ok((occupancy, Vec::new()));
            }
            let listed = keep.map(|(mut cols, keep)| -> (Vec<&'static str>, KeepRows) {
                if !cols.contains(&"alloc_gpus") {
                    cols.push("alloc_gpus");
                }
                let only_cpu: KeepRows = std::sync::Arc::new(move |b: &RecordBatch| {
                    let mut rows = keep(b)?;
                    let g = b
                        .column_by_name("alloc_gpus")
                        .and_then(|a| a.as_any().downcast_ref::<Int64Array>())
                        .context("the index's alloc_gpus column")?;
                    for (i, k) in rows.iter_mut().enumerate() {
                        *k &= g.is_null(i) || g.value(i) <= 0;
                    }
                    Ok(rows)
                });
                (cols, only_cpu)
            });
            let listed = self.scan_where(q, &cols, listed)?;
            Ok((occupancy, listed))
        }
    }
}

#[cfg(test)]
mod faults;
/// Also the archive and index fixtures of other modules' tests (the cluster report's).
#[cfg(test)]
pub(crate) mod tests;
