//! A running SLURM job's report so far: `jobscope show JOBID` on a running job, `jobscope top`.
//!
//! Who reads what (the spool stays root's):
//! - root reads each reachable node's spool directly (`<spool>/<job>.<node>`), through the one
//!   pipeline ([`crate::pipeline::node`]), as the Epilog will at the end;
//! - the job's owner reads the node's live snapshot, which the sampler writes after every sample
//!   for the owner only (`core/src/snapshot.rs`);
//! - anyone else is refused before anything is read.
//!
//! Nodes are the job's as SLURM lists them; a node whose spool or snapshot this host cannot reach
//! (the live directory is node-local unless a site shares it) is named in the report.
pub mod top;

use crate::pipeline::{self, NodeEnd};
use crate::slurm::Slurm;
use crate::GENERATOR;
use anyhow::{bail, Result};
use jobscope_core::config::Config;
use jobscope_core::job::{JobFacts, JobState};
use jobscope_core::snapshot::{self, ReadError};
use jobscope_core::spool::job_dir;
use jobscope_core::summary::{JobSummary, NodeSummary};

/// One node's data as reached from here.
#[derive(Debug)]
pub enum NodeView {
    Spool(NodeSummary),
    Snapshot(NodeSummary),
    Unreachable,
}

/// The report of a running job so far.
#[derive(Debug)]
pub struct Live {
    pub summary: JobSummary,
    /// Per node, where its figures came from (`spool`, `snapshot`) or `None`: not reachable.
    pub sources: Vec<(String, Option<&'static str>)>,
}

/// The refusal another user gets: nothing of the job but that it is not theirs.
pub fn not_yours(job_id: u32) -> String {
    format!("job {job_id} is running and is not yours: only its owner and root can see it")
}

/// `Ok(None)` when SLURM does not list the job as running (then the archive has its report, if
/// any); an error for a running job the caller may not see, or none of whose nodes is reachable.
pub fn live(cfg: &Config, slurm: &dyn Slurm, job_id: u32, caller_uid: u32) -> Result<Option<Live>> {
    let Some(facts) = slurm.job_facts(job_id) else {
        return Ok(None);
    };
    let state = facts.scheduler_state.unwrap_or(JobState::Unknown);
    if !matches!(state, JobState::Running | JobState::Suspended) {
        return Ok(None);
    }
    if caller_uid != 0 && facts.uid != Some(caller_uid) {
        bail!("{}", not_yours(job_id));
    }
    let nodes = if facts.nodes.is_empty() {
        vec![jobscope_core::scope::short_hostname()]
    } else {
        facts.nodes.clone()
    };
    let views: Vec<(String, NodeView)> = nodes
        .iter()
        .map(|n| {
            let v = node_view(cfg, job_id, n, caller_uid, facts.uid);
            v.map(|v| (n.clone(), v))
        })
        .collect::<Result<_>>()?;
    Ok(Some(assemble(cfg, &facts, views)?))
}

fn node_view(
    cfg: &Config,
    job_id: u32,
    node: &str,
    caller_uid: u32,
    owner: Option<u32>,
) -> Result<NodeView> {
    if caller_uid == 0 {
        let dir = job_dir(&cfg.paths.spool_dir, job_id, node);
        if dir.join("job.jsc").exists() {
            let spool = pipeline::read_node_dir(&dir);
            let out = pipeline::node(
                &spool,
                node,
                job_id,
                NodeEnd::At(jobscope_core::sampler::now_unix_ms()),
                owner,
                cfg,
            );
            return Ok(NodeView::Spool(out.summary));
        }
    }
    match snapshot::read(&cfg.paths.live_dir, job_id, node, caller_uid) {
        Ok(s) => Ok(NodeView::Snapshot(s.summary)),
        Err(ReadError::Absent) => Ok(NodeView::Unreachable),
        Err(ReadError::NotYours) => bail!("{}", not_yours(job_id)),
        Err(e @ ReadError::Refused(_)) => bail!("job {job_id} on {node}: {e}"),
    }
}

/// The job summary from the nodes reached: the pipeline's assembly, marked running.
pub fn assemble(cfg: &Config, facts: &JobFacts, views: Vec<(String, NodeView)>) -> Result<Live> {
    let mut sources = Vec::new();
    let mut nodes = Vec::new();
    for (n, v) in views {
        match v {
            NodeView::Spool(s) => {
                sources.push((n, Some("spool")));
                nodes.push(s);
            }
            NodeView::Snapshot(s) => {
                sources.push((n, Some("snapshot")));
                nodes.push(s);
            }
            NodeView::Unreachable => sources.push((n, None)),
        }
    }
    if nodes.is_empty() {
        bail!(
            "job {} is running, but no live data of its node(s) {} is reachable from this host \
             (each node keeps its own; run this on a node of the job, or wait for its first sample)",
            facts.job_id,
            sources
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    let expected: Vec<String> = sources.iter().map(|(n, _)| n.clone()).collect();
    let decide = |_: &JobFacts, _: &jobscope_core::job::EndEvidence| jobscope_core::job::JobEnd {
        state: JobState::Running,
        reason: None,
    };
    let mut s = pipeline::job(facts, nodes, &expected, cfg, GENERATOR, &decide);
    s.state = JobState::Running;
    s.end_reason = None;
    s.exit_code = None;
    // A running job is not missing its nodes' data: it has not reported yet. Only nodes this host
    // cannot reach make the view partial.
    s.partial_reasons = sources
        .iter()
        .filter(|(_, src)| src.is_none())
        .map(|(n, _)| format!("{n}: no live data reachable from this host"))
        .collect();
    s.partial = !s.partial_reasons.is_empty();
    Ok(Live {
        summary: s,
        sources,
    })
}
