//! How a node's summary of a job reaches the one place that makes the job's report
//! (docs/cluster.md). Data flows one way: a node's Epilog summarises its spool, puts the
//! [`Envelope`] in its node-local [`outbox`], and hands it to the transport; the collector
//! ([`store`]) takes the envelopes of a job out of the database, exactly once.
//!
//! - [`pg`]: the PostgreSQL connection (also the audit's).
//! - [`schema`]: the transport's tables and the insert-only role of the compute nodes.
//! - [`outbox`]: what a node has not had confirmed yet; `jobscope reap` retries it.
//! - [`send`]: one short idempotent insert per node summary, bounded in time, with jittered retries.
//! - [`store`]: the collector's side: the jobs waiting, their envelopes under a row lock, the
//!   runs assembled.

pub mod outbox;
pub mod pg;
pub mod schema;
pub mod send;
pub mod store;

use jobscope_model::summary::NodeSummary;
use jobscope_report::slurm::EpilogEnv;
use serde::{Deserialize, Serialize};

/// The version of [`Envelope`]'s layout; the collector refuses (and keeps) envelopes of another.
pub const ENVELOPE_VERSION: u32 = 1;

/// What one node sends about one job: its summary, the Epilog's environment (the job's facts as
/// SLURM gave them to the node) and the nodes SLURM allocated to the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub version: u32,
    /// `SLURM_CLUSTER_NAME`, or `""` when SLURM did not say.
    pub cluster: String,
    pub summary: NodeSummary,
    pub env: EpilogEnv,
    pub expected_nodes: Vec<String>,
}

impl Envelope {
    pub fn new(summary: NodeSummary, env: EpilogEnv, expected_nodes: Vec<String>) -> Envelope {
        Envelope {
            version: ENVELOPE_VERSION,
            cluster: env.cluster.clone().unwrap_or_default(),
            summary,
            env,
            expected_nodes,
        }
    }

    /// The envelope's identity, the same on every retry: the node's summary of one run ends at
    /// one moment (its Epilog's), which its start may not tell apart (a node that ran no step has
    /// none), so (cluster, job, node, end) is the key that makes a second send a no-op.
    pub fn key(&self) -> (String, u32, String, u64) {
        (
            self.cluster.clone(),
            self.summary.job_id,
            self.summary.node.clone(),
            self.summary.end_unix_ms,
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An envelope of node `node` for job `job`, as an Epilog would send it.
    pub fn envelope(job: u32, node: &str) -> Envelope {
        let summary = NodeSummary {
            node: node.into(),
            job_id: job,
            uid: 1001,
            start_unix_ms: 1_700_000_000_000,
            end_unix_ms: 1_700_000_060_000,
            ..Default::default()
        };
        let env = EpilogEnv {
            job_id: job,
            node: node.into(),
            uid: Some(1001),
            nodelist: Some("n[1-2]".into()),
            cluster: Some("c1".into()),
            ..Default::default()
        };
        Envelope::new(summary, env, vec!["n1".into(), "n2".into()])
    }

    #[test]
    fn an_envelope_reads_back_as_written_and_its_key_names_the_run_on_the_node() {
        let e = envelope(42, "n2");
        let back: Envelope = serde_json::from_slice(&serde_json::to_vec(&e).unwrap()).unwrap();
        assert_eq!(back, e);
        assert_eq!(
            e.key(),
            ("c1".to_string(), 42, "n2".to_string(), 1_700_000_060_000)
        );
    }

    #[test]
    fn the_outbox_keeps_one_file_per_envelope_and_lists_what_it_cannot_read() {
        let tmp = tempfile::tempdir().unwrap();
        let ob = outbox::Outbox::new(&tmp.path().join("ob"));
        let e = envelope(5, "n1");
        let p1 = ob.put(&e).unwrap();
        let p2 = ob.put(&e).unwrap();
        assert_eq!(p1, p2);
        ob.put(&envelope(6, "n1")).unwrap();
        std::fs::write(ob.dir().join("9.n1.1.json"), b"{not json").unwrap();
        let p = ob.pending(10);
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].envelope.as_ref().unwrap(), &e);
        assert!(p[2].envelope.is_err());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&p1).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        ob.remove(&p1).unwrap();
        ob.remove(&p1).unwrap();
        assert_eq!(ob.len(), 2);
        // A node name that would escape the directory is refused.
        assert!(ob.put(&envelope(7, "../x")).is_err());
    }
}
