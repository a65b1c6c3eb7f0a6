//! The one way a report is made: spool directory → [`node`] summary (with GPUs) → [`job`] summary
//! (from the nodes and the scheduler's facts) with its analysis. The Epilog (`run::run_epilog`),
//! `jobscope reap`, `jobscope summarize`, the golden tests (`epilog/tests/golden.rs`) and the
//! benchmark (`epilog/benches/summary.rs`) all go through here.

use jobscope_core::config::Config;
use jobscope_core::gpu::summary::GpuSummaryParams;
use jobscope_core::job::{EndEvidence, JobEnd, JobFacts};
use jobscope_core::spool::read::{read_node_dir, NodeSpool};
use jobscope_core::summary::node::summarize_node_spool;
use jobscope_core::summary::{analysis, job, JobSummary, NodeSummary};
use std::path::Path;

pub use crate::GENERATOR;

/// When the job ended on a node.
#[derive(Debug, Clone, Copy)]
pub enum NodeEnd {
    /// At this moment (the Epilog runs right after the job's end on its node).
    At(u64),
    /// At the last thing the spool recorded (collected later: reap, summarize, tests); at `fallback`
    /// when it recorded nothing.
    LastRecord { fallback_ms: u64 },
}

/// One node's summary and what could not be read (for the log; it is in the quality notes too).
#[derive(Debug, Clone)]
pub struct NodeOutput {
    pub summary: NodeSummary,
    pub problems: Vec<String>,
}

/// The GPU thresholds of the site configuration.
pub fn gpu_params(cfg: &Config) -> GpuSummaryParams {
    GpuSummaryParams {
        idle_util_pct: cfg.gpu.idle_util_pct,
        idle_min_s: cfg.gpu.idle_min_s as f64,
        ..Default::default()
    }
}

/// Summarises a spool already read. `node` names the node when no spool file does; `job_id` is
/// the job the caller collects it for; `uid` (the scheduler's) wins over the spool header's.
pub fn node_from_spool(
    spool: &NodeSpool,
    node: &str,
    job_id: u32,
    end: NodeEnd,
    uid: Option<u32>,
    cfg: &Config,
) -> NodeOutput {
    let end_ms = match end {
        NodeEnd::At(t) => t,
        NodeEnd::LastRecord { fallback_ms } => spool.last_record_ms().unwrap_or(fallback_ms),
    };
    let mut summary = summarize_node_spool(spool, node, end_ms, &gpu_params(cfg));
    summary.job_id = job_id;
    if let Some(uid) = uid {
        summary.uid = uid;
    }
    NodeOutput {
        summary,
        problems: spool.problems.clone(),
    }
}

/// Reads and summarises one node's spool directory.
pub fn node(
    dir: &Path,
    node: &str,
    job_id: u32,
    end: NodeEnd,
    uid: Option<u32>,
    cfg: &Config,
) -> NodeOutput {
    node_from_spool(&read_node_dir(dir), node, job_id, end, uid, cfg)
}

/// The job's summary with its analysis. `decide` is the scheduler adapter's end-state decision
/// (`crate::slurm::Slurm::decide_end`).
pub fn job(
    facts: &JobFacts,
    nodes: Vec<NodeSummary>,
    expected_nodes: &[String],
    cfg: &Config,
    generator: &str,
    decide: &dyn Fn(&JobFacts, &EndEvidence) -> JobEnd,
) -> JobSummary {
    let mut s = job::assemble(facts, nodes, expected_nodes, generator, decide);
    s.analysis = Some(analysis::analyze(&s, &cfg.report));
    s
}
