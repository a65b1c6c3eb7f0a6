//! The collector (`transport.mode = "postgres"`, docs/cluster.md): on one service host,
//! `jobscope collect` (the jobscope-collector service) takes the jobs whose node summaries wait in
//! PostgreSQL and makes each job's one report: assembled when every node of the job has sent,
//! or after `archive.node_wait_s` as a partial report naming the nodes that did not. It asks
//! SLURM once per pass (every job listed at once, where the release's adapter can) or once per
//! job, writes the archive on its own disk (the one writer of that archive, so
//! its MANIFEST chain is one history), records the run and marks the rows in the transaction
//! that locked them, and then mails through its own queue: compute nodes need no MTA.
//!
//! A row of a run already archived (a node that reported after its job's partial report) is
//! marked `late` and makes no second record: the archived run names that node as missing.

use crate::flow::{archive_summary, assemble};
use anyhow::Result;
use jobscope_archive::Key;
use jobscope_config::Config;
use jobscope_model::summary::NodeSummary;
use jobscope_report::slurm::Slurm;
use jobscope_transport::store::{self, AssembledRun, JobTx, Row, Taken, WaitingJob};
use jobscope_transport::Envelope;
use postgres::Client;
use serde::Serialize;
use std::path::PathBuf;

/// The most jobs one pass looks at (the next pass takes the rest).
const JOBS_PER_PASS: i64 = 20_000;

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct CollectReport {
    pub archived: Vec<Collected>,
    /// Rows of runs archived before they arrived: (job, node).
    pub late: Vec<(u32, String)>,
    /// Rows whose envelope the collector cannot read (kept in the table, marked).
    pub unreadable: usize,
    /// Jobs still waiting for nodes (within `archive.node_wait_s`).
    pub waiting: usize,
    /// Jobs that failed (archive not writable…): left waiting, retried next pass.
    pub failed: Vec<String>,
}

/// A job the pass archived.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Collected {
    pub cluster: String,
    pub job_id: u32,
    pub record: PathBuf,
    pub missing_nodes: Vec<String>,
}

impl CollectReport {
    /// Sentences for people (`jobscope collect --once`).
    pub fn describe(&self) -> String {
        let mut t = String::new();
        for c in &self.archived {
            t += &format!("job {}: archived at {}", c.job_id, c.record.display());
            if !c.missing_nodes.is_empty() {
                t += &format!(" (partial: no data from {})", c.missing_nodes.join(", "));
            }
            t += "\n";
        }
        for (job, node) in &self.late {
            t += &format!(
                "job {job}: node {node} reported after the job was archived (kept, not counted)\n"
            );
        }
        if self.unreadable > 0 {
            t += &format!("{} unreadable node summaries kept\n", self.unreadable);
        }
        for f in &self.failed {
            t += &format!("{f}\n");
        }
        t += &format!("{} job(s) waiting for nodes\n", self.waiting);
        t
    }
}

/// One pass over the waiting jobs.
pub fn collect_once(
    cfg: &Config,
    c: &mut Client,
    slurm: &dyn Slurm,
    log: &mut dyn FnMut(&str),
) -> Result<CollectReport> {
    let mut rep = CollectReport::default();
    let jobs = store::waiting_jobs(c, JOBS_PER_PASS)?;
    // SLURM once per pass where the adapter can list every job at once, else once per job.
    let ids: Vec<u32> = jobs.iter().map(|j| j.job_id).collect();
    let listed = slurm.jobs_facts(&ids);
    let facts_of = |id: u32| match &listed {
        Some(m) => m.get(&id).cloned(),
        None => slurm.job_facts(id),
    };
    for job in jobs {
        if let Err(e) = collect_job(cfg, c, &job, &facts_of, slurm, &mut rep, log) {
            let line = format!("job {}: not archived yet: {e:#}", job.job_id);
            log(&format!("collect: {line}"));
            rep.failed.push(line);
        }
    }
    Ok(rep)
}

/// The rows of one run: the latest summary of each node (a node's Epilog and a `reap` of the
/// same spool both sent one), sorted by node.
fn latest_per_node(rows: &[(&Row, &Envelope)]) -> Vec<NodeSummary> {
    let mut by_node: std::collections::BTreeMap<&str, &NodeSummary> = Default::default();
    for (_, e) in rows {
        let s = &e.summary;
        let keep = by_node
            .get(s.node.as_str())
            .is_none_or(|k| k.end_unix_ms < s.end_unix_ms);
        if keep {
            by_node.insert(&s.node, s);
        }
    }
    by_node.into_values().cloned().collect()
}

fn collect_job(
    cfg: &Config,
    c: &mut Client,
    job: &WaitingJob,
    facts_of: &dyn Fn(u32) -> Option<jobscope_model::job::JobFacts>,
    slurm: &dyn Slurm,
    rep: &mut CollectReport,
    log: &mut dyn FnMut(&str),
) -> Result<()> {
    let Some(mut tx) = store::take_job(c, job)? else {
        return Ok(());
    };
    let bad: Vec<i64> = tx
        .rows
        .iter()
        .filter(|r| r.envelope.is_err())
        .map(|r| r.id)
        .collect();
    for r in tx.rows.iter().filter(|r| r.envelope.is_err()) {
        log(&format!(
            "collect: job {}: node {}: unreadable summary kept: {}",
            job.job_id,
            r.node,
            r.envelope.as_ref().err().map_or("", |e| e.as_str())
        ));
    }
    tx.mark(&bad, Taken::Unreadable, None)?;
    rep.unreadable += bad.len();
    mark_late(&mut tx, rep, log)?;
    let rows: Vec<(&Row, &Envelope)> = tx
        .rows
        .iter()
        .filter_map(|r| Some((r, r.envelope.as_ref().ok()?)))
        .filter(|(_, e)| !is_late(tx.last_run.as_ref(), e))
        .collect();
    if rows.is_empty() {
        return tx.commit();
    }
    let expected = rows
        .iter()
        .map(|(_, e)| e.expected_nodes.clone())
        .max_by_key(Vec::len)
        .unwrap_or_default();
    let nodes = latest_per_node(&rows);
    let complete = expected.iter().all(|x| nodes.iter().any(|n| &n.node == x));
    let first_ms = rows.iter().map(|(r, _)| r.received_ms).min().unwrap_or(0);
    let waited = tx.now_ms.saturating_sub(first_ms) >= cfg.archive.node_wait_s.saturating_mul(1000);
    if !complete && !waited {
        rep.waiting += 1;
        return tx.commit();
    }
    // What SLURM says of the job (asked once per pass or per job: `facts_of`). Its state does
    // not hold the report back: a row
    // exists only once its node's Epilog ran, so the run is over; a node whose slurmd died
    // keeps the job COMPLETING for SlurmdTimeout, and a requeued job already runs again. The
    // environment of the job's first node (its batch host, whose exit status is the job's) when
    // it sent, else of any node.
    let ctl = facts_of(job.job_id);
    let env = rows
        .iter()
        .map(|(_, e)| &e.env)
        .find(|e| expected.first() == Some(&e.node))
        .unwrap_or(&rows[0].1.env)
        .clone();
    let ctl_known = ctl.is_some();
    let facts = env.facts_with(ctl);
    let ids: Vec<i64> = rows.iter().map(|(r, _)| r.id).collect();
    let nodes_end_ms = nodes.iter().map(|n| n.end_unix_ms).max().unwrap_or(0);
    let s = assemble(cfg, &facts, nodes, &expected, slurm);
    let record = archive_summary(cfg, &s)?;
    let run = AssembledRun {
        run_start_s: Key::of(&s).start_unix_s,
        nodes_end_ms,
        record: record.display().to_string(),
        missing_nodes: s.missing_nodes.clone(),
    };
    tx.record_run(&run)?;
    tx.mark(&ids, Taken::Assembled, Some(run.run_start_s))?;
    // Archive first (done), then the rows and the run committed; mail last. A collector that
    // dies between the archive and the commit archives the same run again (one record: the
    // archive replaces a record of the same key).
    tx.commit()?;
    log(&format!(
        "collect: job {} archived at {}{}",
        job.job_id,
        record.display(),
        if run.missing_nodes.is_empty() {
            String::new()
        } else {
            format!(" (missing nodes: {})", run.missing_nodes.join(", "))
        }
    ));
    jobscope_deliver::notify::notify(cfg, &s, ctl_known.then_some(&facts), slurm, log);
    crate::flow::write_admin_comment(cfg, &s, slurm, log);
    rep.archived.push(Collected {
        cluster: job.cluster.clone(),
        job_id: job.job_id,
        record,
        missing_nodes: run.missing_nodes,
    });
    Ok(())
}

/// Whether an envelope belongs to the run archived last: its node began before that run's
/// nodes had all ended (a later run, a requeued job's, begins after: SLURM starts it again
/// only once every Epilog of the earlier run has finished; crate::flow `set_aside_earlier_run`).
fn is_late(last: Option<&AssembledRun>, e: &Envelope) -> bool {
    last.is_some_and(|r| e.summary.start_unix_ms <= r.nodes_end_ms)
}

fn mark_late(tx: &mut JobTx<'_>, rep: &mut CollectReport, log: &mut dyn FnMut(&str)) -> Result<()> {
    let Some(last) = tx.last_run.clone() else {
        return Ok(());
    };
    let late: Vec<(i64, String)> = tx
        .rows
        .iter()
        .filter_map(|r| Some((r, r.envelope.as_ref().ok()?)))
        .filter(|(_, e)| is_late(Some(&last), e))
        .map(|(r, e)| (r.id, e.summary.node.clone()))
        .collect();
    for (_, node) in &late {
        log(&format!(
            "collect: job {}: node {node} reported after the run was archived at {} (kept in the table, not counted)",
            tx.job.job_id, last.record
        ));
        rep.late.push((tx.job.job_id, node.clone()));
    }
    let ids: Vec<i64> = late.iter().map(|(id, _)| *id).collect();
    tx.mark(&ids, Taken::Late, Some(last.run_start_s))
}
