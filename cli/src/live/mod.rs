//! A running SLURM job's report so far: `jobscope show JOBID` on a running job, `jobscope top`.
//!
//! Who reads what (the spool stays root's):
//! - root reads each reachable node's spool directly (`<spool>/<job>.<node>`), through the one
//!   pipeline ([`jobscope_report::pipeline::node`]), as the Epilog will at the end;
//! - the job's owner reads the node's live snapshot, which the sampler writes after every sample
//!   for the owner only (`sampler/src/snapshot.rs`);
//! - anyone else is refused before anything is read.
//!
//! Nodes are the job's as SLURM lists them; a node whose spool or snapshot this host cannot reach
//! (the live directory is node-local unless a site shares it) is named in the report.
pub mod top;

use anyhow::{bail, Result};
use jobscope_common::live::{self as snapshot, ReadError};
use jobscope_config::Config;
use jobscope_model::job::{JobFacts, JobState};
use jobscope_model::spool::job_dir;
use jobscope_model::summary::{JobSummary, NodeSummary};
use jobscope_report::pipeline::{self, NodeEnd};
use jobscope_report::slurm::Slurm;
use jobscope_report::GENERATOR;

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
        vec![jobscope_sampler::scope::short_hostname()]
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
                NodeEnd::At(jobscope_common::now_unix_ms()),
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
        let names: Vec<&str> = sources.iter().map(|(n, _)| n.as_str()).collect();
        bail!(
            "job {id} is running on {}; each node keeps its own live figures and none is reachable from this host: see a node's with `srun --jobid={id} --overlap -w {} jobscope show {id}` (or wait for its first sample)",
            names.join(","),
            names.first().copied().unwrap_or("NODE"),
            id = facts.job_id,
        );
    }
    let expected: Vec<String> = sources.iter().map(|(n, _)| n.clone()).collect();
    let decide = |_: &JobFacts, _: &jobscope_model::job::EndEvidence| jobscope_model::job::JobEnd {
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

#[cfg(test)]
mod tests {
    use super::*;
    use jobscope_model::sample::Reading;
    use jobscope_model::spool::{Bucket, Header, N_GAUGES};
    use jobscope_report::slurm::FakeSlurm;
    use jobscope_sampler::spool::writer::{Limits, SeriesWriter};

    const JOB: u32 = 77;
    const ALICE: u32 = 1001;

    /// A running job's spool on node `n1`: three samples 5 s apart, one core busy, 100 MiB.
    fn setup() -> (tempfile::TempDir, Config) {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config::default();
        cfg.paths.spool_dir = d.path().join("spool");
        cfg.paths.live_dir = d.path().join("live");
        let dir = job_dir(&cfg.paths.spool_dir, JOB, "n1");
        std::fs::create_dir_all(&dir).unwrap();
        let t0 = 1_700_000_000_000u64;
        let h = Header {
            uid: ALICE,
            gid: ALICE,
            alloc_cores: Some(2),
            alloc_mem_bytes: Some(1 << 30),
            ..Header::new(JOB, "n1", "job", t0)
        };
        let mut w = SeriesWriter::<Bucket>::create(&dir, "job.jsc", h, Limits::default()).unwrap();
        for i in 0..3u64 {
            w.push(Bucket {
                t_first_ms: t0 + i * 5000,
                t_last_ms: t0 + i * 5000,
                n: 1,
                last: Reading {
                    cpu_usage_ns: Some(i * 5_000_000_000),
                    mem_current_bytes: Some(100 << 20),
                    ..Default::default()
                },
                gauges: [None; N_GAUGES],
            })
            .unwrap();
        }
        w.flush().unwrap();
        (d, cfg)
    }

    fn running(nodes: &[&str]) -> FakeSlurm {
        let mut s = FakeSlurm::up().with_job(JOB, JobState::Running);
        let f = s.jobs.get_mut(&JOB).unwrap();
        f.uid = Some(ALICE);
        f.user = Some("alice".into());
        f.nodes = nodes.iter().map(|n| n.to_string()).collect();
        f.cpus = Some(2);
        s
    }

    fn am_root() -> bool {
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn the_owner_reads_the_snapshot_root_the_spool_and_nobody_else_anything() {
        if !am_root() {
            eprintln!("skipped: needs root (the snapshot is chowned to its owner)");
            return;
        }
        let (_d, cfg) = setup();
        let dir = job_dir(&cfg.paths.spool_dir, JOB, "n1");
        let snap = snapshot::from_spool(&dir, JOB, "n1", ALICE, &jobscope_config::gpu_params(&cfg));
        snapshot::write(&cfg.paths.live_dir, &snap, ALICE).unwrap();
        let slurm = running(&["n1"]);

        let l = live(&cfg, &slurm, JOB, ALICE).unwrap().unwrap();
        assert_eq!(l.sources, vec![("n1".to_string(), Some("snapshot"))]);
        let s = &l.summary;
        assert_eq!(
            (s.state, s.partial, s.samples),
            (JobState::Running, false, 3)
        );
        assert_eq!(s.end_reason, None);
        assert_eq!(s.cpu.usage_s, Some(10.0), "figures up to the last sample");
        let text = jobscope_report::present::render_text(s, false).unwrap();
        assert!(
            text.contains("State: RUNNING (still running: figures up to the last sample, "),
            "{text}"
        );

        let l = live(&cfg, &slurm, JOB, 0).unwrap().unwrap();
        assert_eq!(l.sources, vec![("n1".to_string(), Some("spool"))]);
        assert_eq!(l.summary.samples, 3);

        let e = live(&cfg, &slurm, JOB, 1002).unwrap_err().to_string();
        assert_eq!(e, not_yours(JOB));

        // The snapshot alone says whose it is: a uid SLURM gave wrongly still cannot read it.
        let mut lying = running(&["n1"]);
        lying.jobs.get_mut(&JOB).unwrap().uid = Some(1002);
        let e = live(&cfg, &lying, JOB, 1002).unwrap_err().to_string();
        assert_eq!(e, not_yours(JOB));
    }

    #[test]
    fn a_job_that_is_not_running_is_the_archives() {
        let (_d, cfg) = setup();
        for state in [JobState::Completed, JobState::Pending, JobState::Completing] {
            let slurm = FakeSlurm::up().with_job(JOB, state);
            assert!(live(&cfg, &slurm, JOB, 0).unwrap().is_none(), "{state}");
        }
        assert!(live(&cfg, &FakeSlurm::up(), JOB, 0).unwrap().is_none());
    }

    #[test]
    fn nodes_out_of_reach_are_named_and_none_reachable_is_an_error() {
        let (_d, cfg) = setup();
        let l = live(&cfg, &running(&["n1", "n2"]), JOB, 0)
            .unwrap()
            .unwrap();
        assert!(l.summary.partial);
        assert_eq!(
            l.summary.partial_reasons,
            vec!["n2: no live data reachable from this host".to_string()]
        );
        let screen = top::render(&l, false);
        let n1 = screen.lines().find(|l| l.starts_with("n1")).unwrap();
        assert!(n1.contains("1.0 of 2") && n1.ends_with("spool"), "{screen}");
        assert!(screen.contains("100.0 MiB of 1.0 GiB"), "{screen}");
        assert!(
            screen
                .lines()
                .any(|l| l.starts_with("n2") && l.contains("not reachable")),
            "{screen}"
        );
        assert!(!screen.contains('\x1b'));
        assert!(top::render(&l, true).contains('\x1b'));

        let e = live(&cfg, &running(&["n3"]), JOB, 0)
            .unwrap_err()
            .to_string();
        // One line: where the job runs, and the command that shows a node's figures.
        assert!(!e.contains('\n'), "{e}");
        assert!(
            e.contains("running on n3;")
                && e.contains(&format!(
                    "srun --jobid={JOB} --overlap -w n3 jobscope show {JOB}"
                )),
            "{e}"
        );
    }
}
