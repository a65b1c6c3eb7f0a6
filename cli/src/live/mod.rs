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
    let views = views(cfg, &facts, caller_uid)?;
    Ok(Some(assemble(cfg, &facts, views)?))
}

/// A running job's report at its batch script's end, as root (`jobscope admin-comment
/// --batch-exit`, which the plugin runs there): the nodes reached from here, ended the way the
/// script's wait status `batch_wait_status` (as `waitpid` gives it) ends the job, by the adapter's
/// one end-state decision. `Ok(None)` when SLURM does not list the job as running: its record
/// can no longer be changed.
pub fn at_batch_end(
    cfg: &Config,
    slurm: &dyn Slurm,
    job_id: u32,
    batch_wait_status: i32,
) -> Result<Option<Live>> {
    let Some(mut facts) = slurm.job_facts(job_id) else {
        return Ok(None);
    };
    if facts.scheduler_state != Some(JobState::Running) {
        return Ok(None);
    }
    let views = views(cfg, &facts, 0)?;
    // What slurmctld will learn from slurmstepd in a moment: the script's status, the job ending.
    let (code, signal) = wait_status_parts(batch_wait_status);
    facts.exit_code = Some(code);
    facts.exit_signal = Some(signal);
    facts.scheduler_state = Some(JobState::Completing);
    let decide = |f: &JobFacts, e: &jobscope_model::job::EndEvidence| slurm.decide_end(f, e);
    assemble_with(cfg, &facts, views, &decide).map(Some)
}

/// (exit code, signal) of a `waitpid` status, as SLURM's `ExitCode=code:signal` says them.
fn wait_status_parts(status: i32) -> (i32, i32) {
    if libc::WIFSIGNALED(status) {
        (0, libc::WTERMSIG(status))
    } else {
        (libc::WEXITSTATUS(status), 0)
    }
}

/// Each of the job's nodes as reached from here by `caller_uid`.
fn views(cfg: &Config, facts: &JobFacts, caller_uid: u32) -> Result<Vec<(String, NodeView)>> {
    let job_id = facts.job_id;
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
    Ok(views)
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
    let running =
        |_: &JobFacts, _: &jobscope_model::job::EndEvidence| jobscope_model::job::JobEnd {
            state: JobState::Running,
            reason: None,
        };
    let mut l = assemble_with(cfg, facts, views, &running)?;
    l.summary.state = JobState::Running;
    l.summary.end_reason = None;
    l.summary.exit_code = None;
    Ok(l)
}

/// The job summary from the nodes reached, ended by `decide`; only nodes not reached make it
/// partial.
fn assemble_with(
    cfg: &Config,
    facts: &JobFacts,
    views: Vec<(String, NodeView)>,
    decide: &dyn Fn(&JobFacts, &jobscope_model::job::EndEvidence) -> jobscope_model::job::JobEnd,
) -> Result<Live> {
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
    let mut s = pipeline::job(facts, nodes, &expected, cfg, GENERATOR, decide);
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

    /// At the batch script's end the job is still RUNNING in SLURM; the line's state is the one
    /// the script's status gives, by the adapter's end decision.
    #[test]
    fn the_batch_scripts_status_ends_the_job() {
        let (_d, cfg) = setup();
        let slurm = running(&["n1"]);
        let cases = [
            (0, JobState::Completed, Some(0)),
            (3 << 8, JobState::Failed, Some(3)),
            (libc::SIGTERM, JobState::Cancelled, Some(0)),
        ];
        for (status, state, code) in cases {
            let l = at_batch_end(&cfg, &slurm, JOB, status).unwrap().unwrap();
            assert_eq!(
                (l.summary.state, l.summary.exit_code),
                (state, code),
                "{status}"
            );
            assert_eq!(
                l.summary.cpu.usage_s,
                Some(10.0),
                "figures up to the last sample"
            );
            assert!(!l.summary.partial);
        }
        // Another node not reached from the batch host: the line says partial.
        let l = at_batch_end(&cfg, &running(&["n1", "n2"]), JOB, 0)
            .unwrap()
            .unwrap();
        assert!(l.summary.partial);
        let line = jobscope_report::admin_comment::admin_comment(
            &l.summary,
            jobscope_report::admin_comment::Taken::BatchEnd,
        );
        assert!(
            line.starts_with("jobscope=1 state=COMPLETED at=batch_end partial=1 "),
            "{line}"
        );
        // Ended already (the batch step came too late): nothing to write.
        for state in [JobState::Completing, JobState::Cancelled, JobState::Pending] {
            let slurm = FakeSlurm::up().with_job(JOB, state);
            assert!(
                at_batch_end(&cfg, &slurm, JOB, 0).unwrap().is_none(),
                "{state}"
            );
        }
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
