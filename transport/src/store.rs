//! The collector's side of the transport: which jobs have envelopes waiting, and each job's
//! envelopes taken under a row lock in one transaction, so that the database decides, exactly
//! once, who assembles a job: a collector first takes the job's transaction-scoped advisory lock
//! (a second collector skips a job another holds), then its rows, and marks them `taken` in the
//! same transaction that records the assembled run.

use crate::Envelope;
use anyhow::{Context, Result};
use postgres::{Client, Transaction};
use serde::Serialize;

/// A job with envelopes waiting.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct WaitingJob {
    pub cluster: String,
    pub job_id: u32,
}

/// Up to `limit` jobs with envelopes waiting, the longest-waiting first.
pub fn waiting_jobs(c: &mut Client, limit: i64) -> Result<Vec<WaitingJob>> {
    let rows = c
        .query(
            "SELECT cluster, job_id FROM jobscope.node_summaries WHERE taken IS NULL
             GROUP BY cluster, job_id ORDER BY min(received_at) LIMIT $1",
            &[&limit],
        )
        .context("listing the jobs whose node summaries wait")?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            Some(WaitingJob {
                cluster: r.get(0),
                job_id: u32::try_from(r.get::<_, i64>(1)).ok()?,
            })
        })
        .collect())
}

/// One waiting envelope of a job.
#[derive(Debug)]
pub struct Row {
    pub id: i64,
    pub node: String,
    pub node_start_ms: u64,
    /// When the database received it (its own clock: every node's rows are timed alike).
    pub received_ms: u64,
    pub envelope: Result<Envelope, String>,
}

/// A run of the job archived before, as [`JobTx::record_run`] stored it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssembledRun {
    pub run_start_s: u64,
    /// The latest end of the node summaries it was made from.
    pub nodes_end_ms: u64,
    /// The archive record's path.
    pub record: String,
    pub missing_nodes: Vec<String>,
}

/// A job's waiting envelopes, locked; nothing changes in the database until [`JobTx::commit`].
pub struct JobTx<'a> {
    tx: Transaction<'a>,
    pub job: WaitingJob,
    pub rows: Vec<Row>,
    /// The job's latest archived run, if any.
    pub last_run: Option<AssembledRun>,
    /// The database's clock now.
    pub now_ms: u64,
}

fn ms(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Locks and reads the waiting envelopes of `job`; `None` when another collector holds them (or
/// none wait any more).
pub fn take_job<'a>(c: &'a mut Client, job: &WaitingJob) -> Result<Option<JobTx<'a>>> {
    let mut tx = c.transaction()?;
    let job_id = i64::from(job.job_id);
    // The job as a whole, not row by row: with row locks alone (`SKIP LOCKED`) two collectors
    // could each lock part of a job's rows, and past the node wait each would archive a partial
    // report of a job whose every node had reported. A hash collision between two jobs only
    // defers one of them to the next pass.
    let locked: bool = tx
        .query_one(
            "SELECT pg_try_advisory_xact_lock(hashtextextended($1::text || '/' || ($2::bigint)::text, 0))",
            &[&job.cluster, &job_id],
        )
        .with_context(|| format!("job {}: taking its lock", job.job_id))?
        .get(0);
    if !locked {
        return Ok(None);
    }
    let rows = tx
        .query(
            "SELECT id, node, node_start_ms, (extract(epoch from received_at) * 1000)::bigint,
                    envelope
             FROM jobscope.node_summaries
             WHERE cluster = $1 AND job_id = $2 AND taken IS NULL
             ORDER BY id FOR UPDATE",
            &[&job.cluster, &job_id],
        )
        .with_context(|| format!("job {}: reading its node summaries", job.job_id))?;
    if rows.is_empty() {
        return Ok(None);
    }
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|r| {
            let id: i64 = r.get(0);
            let doc: serde_json::Value = r.get(4);
            Row {
                id,
                node: r.get(1),
                node_start_ms: ms(r.get(2)),
                received_ms: ms(r.get(3)),
                envelope: serde_json::from_value::<Envelope>(doc)
                    .map_err(|e| format!("row {id}: {e}"))
                    .and_then(|e| {
                        if e.version == crate::ENVELOPE_VERSION {
                            Ok(e)
                        } else {
                            Err(format!("row {id}: envelope version {}", e.version))
                        }
                    }),
            }
        })
        .collect();
    let last_run = tx
        .query_opt(
            "SELECT run_start_s, nodes_end_ms, record, missing_nodes FROM jobscope.assembled_runs
             WHERE cluster = $1 AND job_id = $2 ORDER BY nodes_end_ms DESC LIMIT 1",
            &[&job.cluster, &job_id],
        )?
        .map(|r| AssembledRun {
            run_start_s: ms(r.get(0)),
            nodes_end_ms: ms(r.get(1)),
            record: r.get(2),
            missing_nodes: r.get(3),
        });
    let now_ms = ms(tx
        .query_one("SELECT (extract(epoch from now()) * 1000)::bigint", &[])?
        .get(0));
    Ok(Some(JobTx {
        tx,
        job: job.clone(),
        rows,
        last_run,
        now_ms,
    }))
}

/// What became of a row ([`crate::schema`]'s `taken`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    Assembled,
    Late,
    Unreadable,
}

impl Taken {
    fn as_str(self) -> &'static str {
        match self {
            Taken::Assembled => "assembled",
            Taken::Late => "late",
            Taken::Unreadable => "unreadable",
        }
    }
}

impl JobTx<'_> {
    /// Marks rows `ids` as `taken`, into run `run_start_s` when assembled.
    pub fn mark(&mut self, ids: &[i64], taken: Taken, run_start_s: Option<u64>) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let run = run_start_s.map(|s| s.min(i64::MAX as u64) as i64);
        self.tx.execute(
            "UPDATE jobscope.node_summaries SET taken = $1, run_start_s = $2 WHERE id = ANY($3)",
            &[&taken.as_str(), &run, &ids],
        )?;
        Ok(())
    }

    /// Records the run just archived (the same run archived again replaces its row: a collector
    /// that died after writing the archive and before committing wrote the same record).
    pub fn record_run(&mut self, run: &AssembledRun) -> Result<()> {
        let clamp = |v: u64| v.min(i64::MAX as u64) as i64;
        self.tx.execute(
            "INSERT INTO jobscope.assembled_runs
                 (cluster, job_id, run_start_s, nodes_end_ms, record, missing_nodes)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (cluster, job_id, run_start_s) DO UPDATE
             SET nodes_end_ms = EXCLUDED.nodes_end_ms, record = EXCLUDED.record,
                 missing_nodes = EXCLUDED.missing_nodes, assembled_at = now()",
            &[
                &self.job.cluster,
                &i64::from(self.job.job_id),
                &clamp(run.run_start_s),
                &clamp(run.nodes_end_ms),
                &run.record,
                &run.missing_nodes,
            ],
        )?;
        Ok(())
    }

    pub fn commit(self) -> Result<()> {
        self.tx.commit().context("committing the assembled job")
    }
}
