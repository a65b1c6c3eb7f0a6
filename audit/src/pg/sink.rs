//! Pushing archived jobs into PostgreSQL.
//!
//! - [`push`]: one upsert per run keyed like the archive (cluster, job id, start second). A run
//!   pushed again with the same summary changes nothing (not even the row version: the update is
//!   skipped when the `jsonb` is equal); a changed summary (a retried write of the same key)
//!   replaces the row.
//! - [`sync`]: walks the archive's days and their MANIFEST lines (archive/src/manifest.rs) past the
//!   checkpoint kept in `jobscope.sync_days`, and commits each day's rows together with that day's
//!   new checkpoint. A database that goes away mid-sync loses the uncommitted day only; the next
//!   sync starts there again, and the upsert makes a second push of anything harmless.
//!   A file whose bytes no longer match its latest manifest line is not pushed (reported: see
//!   `jobscope archive verify`).

use super::schema::ident;
use super::{pg_json, pg_text};
use crate::{ColType, JobRow, Value, COLUMNS};
use anyhow::{Context, Result};
use jobscope_archive::manifest;
use jobscope_archive::{self as archive, Key, Store};
use jobscope_common::fsutil;
use jobscope_model::params::Report;
use jobscope_model::summary::JobSummary;
use postgres::types::ToSql;
use postgres::Client;
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::path::Path;

/// Rows per INSERT statement (66 parameters each; PostgreSQL allows 65 535 per statement).
const BATCH: usize = 500;
/// An archived document larger than this is not read (the archive writes a few hundred KiB at most).
const MAX_DOC_BYTES: u64 = 64 * 1024 * 1024;

/// One run ready to push.
#[derive(Debug, Clone)]
pub struct Item {
    pub key_cluster: String,
    pub key_start_s: i64,
    pub row: JobRow,
    pub summary: serde_json::Value,
    /// Where it came from (`YYYY/MM/DD/<file>`), for people.
    pub archive_file: String,
}

impl Item {
    pub fn of(s: &JobSummary, archive_file: &str) -> Result<Item> {
        let key = Key::of(s);
        let mut summary = serde_json::to_value(s)?;
        pg_json(&mut summary);
        Ok(Item {
            key_cluster: key.cluster.unwrap_or_default(),
            key_start_s: key.start_unix_s as i64,
            row: JobRow::of(s),
            summary,
            archive_file: archive_file.to_string(),
        })
    }
}

/// What a push did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Pushed {
    pub inserted: u64,
    pub updated: u64,
    pub unchanged: u64,
}

impl Pushed {
    fn add(&mut self, o: &Pushed) {
        self.inserted += o.inserted;
        self.updated += o.updated;
        self.unchanged += o.unchanged;
    }
}

fn insert_sql(rows: usize) -> String {
    let names: Vec<String> = ["key_cluster", "key_start_s"]
        .into_iter()
        .chain(COLUMNS.iter().map(|(n, _)| *n))
        .chain(["summary", "archive_file"])
        .map(ident)
        .collect();
    let per = names.len();
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let ps: Vec<String> = (1..=per).map(|c| format!("${}", r * per + c)).collect();
            format!("({})", ps.join(","))
        })
        .collect();
    let set: Vec<String> = names
        .iter()
        .skip(2)
        .map(|n| format!("{n} = EXCLUDED.{n}"))
        .collect();
    format!(
        "INSERT INTO jobscope.jobs ({}) VALUES {}
         ON CONFLICT (key_cluster, job_id, key_start_s) DO UPDATE SET {},
           pushed_at = now(), revision = jobs.revision + 1
         WHERE jobs.summary IS DISTINCT FROM EXCLUDED.summary
         RETURNING (revision = 1)",
        names.join(","),
        values.join(","),
        set.join(",")
    )
}

/// A typed SQL parameter of an audit value.
fn param(v: Value, t: ColType) -> Box<dyn ToSql + Sync> {
    match (v, t) {
        (Value::Int(i), _) => Box::new(i),
        (Value::Float(f), _) => Box::new(f),
        (Value::Text(s), _) => Box::new(pg_text(&s).into_owned()),
        (Value::Bool(b), _) => Box::new(b),
        (Value::Null, ColType::Int) => Box::new(None::<i64>),
        (Value::Null, ColType::Float) => Box::new(None::<f64>),
        (Value::Null, ColType::Text) => Box::new(None::<String>),
        (Value::Null, ColType::Bool) => Box::new(None::<bool>),
    }
}

/// The months the items fall in, created if missing; `done` remembers them for this connection.
fn ensure_months(
    tx: &mut postgres::Transaction<'_>,
    items: &[Item],
    done: &mut HashSet<String>,
) -> Result<()> {
    for it in items {
        let month =
            jobscope_model::time::date_path(it.key_start_s.max(0) as u64 * 1000)[..7].to_string();
        if done.insert(month) {
            tx.execute("SELECT jobscope.ensure_month($1)", &[&it.key_start_s])?;
        }
    }
    Ok(())
}

/// Upserts `items` inside `tx` (the caller commits).
fn push_in(
    tx: &mut postgres::Transaction<'_>,
    items: &[Item],
    months: &mut HashSet<String>,
) -> Result<Pushed> {
    ensure_months(tx, items, months)?;
    let mut out = Pushed::default();
    let mut max_span = i64::MIN;
    let mut max_lead = i64::MIN;
    for chunk in items.chunks(BATCH) {
        let mut params: Vec<Box<dyn ToSql + Sync>> = Vec::with_capacity(chunk.len() * 66);
        for it in chunk {
            params.push(Box::new(pg_text(&it.key_cluster).into_owned()));
            params.push(Box::new(it.key_start_s));
            for (v, (_, t)) in it.row.values().into_iter().zip(COLUMNS) {
                params.push(param(v, *t));
            }
            params.push(Box::new(it.summary.clone()));
            params.push(Box::new(pg_text(&it.archive_file).into_owned()));
            let end_s = (it.row.end_unix_ms / 1000) as i64;
            max_span = max_span.max(end_s - it.key_start_s);
            max_lead = max_lead.max(it.key_start_s - end_s);
        }
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
        let rows = tx.query(&insert_sql(chunk.len()), &refs)?;
        let inserted = rows.iter().filter(|r| r.get::<_, bool>(0)).count() as u64;
        out.inserted += inserted;
        out.updated += rows.len() as u64 - inserted;
        out.unchanged += (chunk.len() - rows.len()) as u64;
    }
    if !items.is_empty() {
        tx.execute(
            "INSERT INTO jobscope.meta (k, v) VALUES ('max_span_s', $1), ('max_lead_s', $2)
             ON CONFLICT (k) DO UPDATE SET v = GREATEST(meta.v, EXCLUDED.v)",
            &[&max_span.max(0), &max_lead.max(0)],
        )?;
    }
    Ok(out)
}

/// Upserts `items` in one transaction.
pub fn push(client: &mut Client, items: &[Item]) -> Result<Pushed> {
    super::schema::ensure(client)?;
    let mut tx = client.transaction()?;
    let out = push_in(&mut tx, items, &mut HashSet::new())?;
    tx.commit()?;
    Ok(out)
}

/// What a sync did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SyncReport {
    pub days_seen: u64,
    /// Days whose manifest had grown since the checkpoint.
    pub days_synced: u64,
    /// Manifest lines read past the checkpoint.
    pub lines: u64,
    pub pushed: Pushed,
    /// Files not pushed, one sentence each.
    pub problems: Vec<String>,
}

/// Reads an archived file without following links, bounded.
fn read_doc(path: &Path) -> std::io::Result<Vec<u8>> {
    let f = fsutil::open_regular(path, fsutil::Access::Read)?;
    let mut b = Vec::new();
    f.take(MAX_DOC_BYTES).read_to_end(&mut b)?;
    Ok(b)
}

/// Pushes what the archive's manifests list past this source's checkpoint (see the module doc).
/// `thresholds` analyse a document stored without its analysis ([`archive::load`]).
pub fn sync(
    client: &mut Client,
    store: &Store,
    source: &str,
    thresholds: &Report,
) -> Result<SyncReport> {
    super::schema::ensure(client)?;
    let mut done: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for r in client.query(
        "SELECT day, seq, manifest_bytes FROM jobscope.sync_days WHERE source = $1",
        &[&source],
    )? {
        done.insert(r.get(0), (r.get(1), r.get(2)));
    }
    let mut rep = SyncReport::default();
    let mut months = HashSet::new();
    for day in store.days() {
        rep.days_seen += 1;
        let (seq0, bytes0) = done.get(&day.date).copied().unwrap_or((0, 0));
        let (entries, bytes) = match manifest::read_entries(&day.path) {
            Ok(x) => x,
            Err(e) => {
                rep.problems.push(format!("{}: {e}", day.date));
                continue;
            }
        };
        if bytes as i64 == bytes0 {
            continue;
        }
        // The latest line of each file is the one its bytes must match.
        let mut latest: BTreeMap<&str, u64> = BTreeMap::new();
        for e in &entries {
            latest.insert(&e.name, e.seq);
        }
        let mut items = Vec::new();
        let mut last_seq = seq0;
        for e in entries.iter().filter(|e| e.seq as i64 > seq0) {
            rep.lines += 1;
            last_seq = last_seq.max(e.seq as i64);
            if latest.get(e.name.as_str()) != Some(&e.seq) {
                continue; // a later line of the same file follows
            }
            let rel = format!("{}/{}", day.date, e.name);
            let bytes = match read_doc(&day.path.join(&e.name)) {
                Ok(b) => b,
                Err(err) => {
                    rep.problems.push(format!("{rel}: not pushed: {err}"));
                    continue;
                }
            };
            if jobscope_common::digest::sha256_hex(&bytes) != e.sha256 {
                rep.problems.push(format!(
                    "{rel}: not pushed: its bytes differ from its manifest line (run `jobscope archive verify`)"
                ));
                continue;
            }
            match archive::load(&bytes, thresholds).and_then(|l| Item::of(&l.summary, &rel)) {
                Ok(it) => items.push(it),
                Err(err) => rep.problems.push(format!("{rel}: not pushed: {err:#}")),
            }
        }
        let mut tx = client.transaction()?;
        let p = push_in(&mut tx, &items, &mut months)
            .with_context(|| format!("pushing {}", day.date))?;
        tx.execute(
            "INSERT INTO jobscope.sync_days (source, day, seq, manifest_bytes) VALUES ($1, $2, $3, $4)
             ON CONFLICT (source, day) DO UPDATE
               SET seq = EXCLUDED.seq, manifest_bytes = EXCLUDED.manifest_bytes, synced_at = now()",
            &[&source, &day.date, &last_seq, &(bytes as i64)],
        )?;
        tx.commit()
            .with_context(|| format!("committing {}", day.date))?;
        rep.days_synced += 1;
        rep.pushed.add(&p);
    }
    Ok(rep)
}
