//! The runner over spools written by the sampler's own writers, with canned SLURM answers: what
//! it records, mails and cancels, and what it leaves alone.
use super::*;
use jobscope_deliver::mail::queue::Queue;
use jobscope_model::spool::Bucket;
use jobscope_model::watch::{GpuScope, RuleKind};
use jobscope_report::pipeline::testing::header;
use jobscope_report::slurm::FakeSlurm;
use jobscope_sampler::gpu::testing::write_gpu_spool;
use jobscope_sampler::spool::writer::{Limits, SeriesWriter};
use std::os::unix::fs::PermissionsExt;

const START: u64 = 1_700_001_000_000;
const JOB: u32 = 31;

/// `<spool>/31.g1/` of a running job with a job series and a GPU series of `minutes` of 30 s
/// buckets: GPU 0 busy at 90 %, GPU 1 at `idle_util` %.
fn spool(root: &Path, minutes: u64, idle_util: u64) -> PathBuf {
    let dir = root.join(format!("{JOB}.g1"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut w = SeriesWriter::<Bucket>::create(
        &dir,
        "job.jsc",
        header(JOB, "g1", "job"),
        Limits::default(),
    )
    .unwrap();
    w.flush().unwrap();
    let buckets: Vec<(u64, Vec<u64>)> = (1..=minutes * 2)
        .map(|i| (START + i * 30_000, vec![90, idle_util]))
        .collect();
    write_gpu_spool(&dir, header(JOB, "g1", "gpu"), &buckets).unwrap();
    dir
}

struct Site {
    _d: tempfile::TempDir,
    cfg: Config,
    now: u64,
}

fn site(rule: Rule, minutes: u64, idle_util: u64) -> Site {
    let d = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.paths.spool_dir = d.path().join("spool");
    cfg.paths.state_dir = d.path().join("state");
    cfg.mail.queue_dir = d.path().join("queue");
    cfg.mail.enabled = true;
    cfg.mail.domain = Some("example.org".into());
    // Nothing is delivered in these tests: the queue is what is checked.
    cfg.mail.flush_budget_s = 0;
    cfg.watch.enabled = true;
    cfg.watch.dry_run = false;
    cfg.watch.rules = vec![rule];
    spool(&cfg.paths.spool_dir, minutes, idle_util);
    Site {
        _d: d,
        cfg,
        now: START + minutes * 60_000 + 5_000,
    }
}

fn idle_rule() -> Rule {
    Rule {
        name: "idle-gpu".into(),
        kind: RuleKind::GpuIdle,
        minutes: 30.0,
        gpus: GpuScope::Any,
        ..Rule::default()
    }
}

/// [`idle_rule`] cancelling in `partition` right after its warning (no grace).
fn cancelling_now(partition: &str) -> Rule {
    Rule {
        cancel: true,
        grace_minutes: 0.0,
        cancel_partitions: vec![partition.into()],
        ..idle_rule()
    }
}

fn slurm(state: JobState) -> FakeSlurm {
    let mut s = FakeSlurm::up();
    s.jobs.insert(
        JOB,
        JobFacts {
            job_id: JOB,
            user: Some("alice".into()),
            account: Some("physics".into()),
            partition: Some("gpu".into()),
            scheduler_state: Some(state),
            name: Some("train".into()),
            ..Default::default()
        },
    );
    s
}

fn recorded(cfg: &Config) -> Vec<Intervention> {
    jobscope_common::spool::read_interventions(&cfg.paths.spool_dir.join(format!("{JOB}.g1")))
        .unwrap()
}

fn queued(cfg: &Config) -> Vec<String> {
    Queue::open(&cfg.mail.queue_dir)
        .map(|q| q.list().into_iter().map(|l| l.meta.id).collect())
        .unwrap_or_default()
}

/// GPU 1 idle for 40 minutes under a 30-minute rule: one warning naming GPU 1, recorded and
/// mailed; the next pass does nothing more.
#[test]
fn an_idle_gpu_is_warned_once_recorded_and_mailed() {
    let s = site(idle_rule(), 40, 0);
    let sl = slurm(JobState::Running);
    let rep = pass(&s.cfg, &sl, "g1", s.now, false).unwrap();
    assert_eq!(rep.jobs_running, 1);
    assert_eq!(rep.actions.len(), 1, "{rep:?}");
    let a = &rep.actions[0];
    assert_eq!(a.action, ActionKind::Warned);
    assert!(a.what.starts_with("GPU 1 "), "{}", a.what);
    assert_eq!(a.outcome, "recorded, mailed");
    let rec = recorded(&s.cfg);
    assert_eq!(rec.len(), 1);
    assert!(rec[0].mailed);
    assert_eq!(rec[0].finding.subjects.len(), 1);
    // From the first sample on.
    assert_eq!(rec[0].finding.since_unix_ms, START + 30_000);
    let ids = queued(&s.cfg);
    assert_eq!(
        ids,
        vec![format!("local.{JOB}.{}.watch-idle-gpu-warn0", START / 1000)]
    );
    let again = pass(&s.cfg, &sl, "g1", s.now + 60_000, false).unwrap();
    assert!(again.actions.is_empty(), "{again:?}");
    assert_eq!(recorded(&s.cfg).len(), 1);
    assert_eq!(queued(&s.cfg).len(), 1);
    assert!(sl.cancelled.lock().unwrap().is_empty());
}

/// Bursts of 10 % mean on the "idle" GPU stay under the rule's 15 %: still idle. At 20 % it is
/// in use, and nothing is said.
#[test]
fn use_under_the_threshold_is_idle_and_above_it_is_not() {
    let s = site(idle_rule(), 40, 10);
    let rep = pass(&s.cfg, &slurm(JobState::Running), "g1", s.now, false).unwrap();
    assert_eq!(rep.actions.len(), 1);
    let s = site(idle_rule(), 40, 20);
    let rep = pass(&s.cfg, &slurm(JobState::Running), "g1", s.now, false).unwrap();
    assert!(rep.actions.is_empty(), "{rep:?}");
}

/// With cancelling enabled for the job's partition and no grace, the second pass cancels: SLURM
/// is asked with the rule's reason, the record says so, the user is mailed again.
#[test]
fn a_cancelling_rule_cancels_after_the_warning() {
    let rule = cancelling_now("gpu");
    let s = site(rule, 40, 0);
    let sl = slurm(JobState::Running);
    pass(&s.cfg, &sl, "g1", s.now, false).unwrap();
    let rep = pass(&s.cfg, &sl, "g1", s.now + 1_000, false).unwrap();
    assert_eq!(rep.actions.len(), 1, "{rep:?}");
    assert_eq!(rep.actions[0].action, ActionKind::Cancelled);
    let c = sl.cancelled.lock().unwrap().clone();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].0, JOB);
    assert!(
        c[0].1.contains("idle-gpu") && c[0].1.contains("GPU 1"),
        "{}",
        c[0].1
    );
    let rec = recorded(&s.cfg);
    assert_eq!(
        rec.iter().map(|i| i.action).collect::<Vec<_>>(),
        vec![ActionKind::Warned, ActionKind::Cancelled]
    );
    assert_eq!(queued(&s.cfg).len(), 2);
}

/// SLURM refusing the cancel is recorded as such, with its reason, and retried next pass.
#[test]
fn a_refused_cancel_is_recorded_as_failed() {
    let rule = cancelling_now("*");
    let s = site(rule, 40, 0);
    let mut sl = slurm(JobState::Running);
    sl.cancel_fails = true;
    pass(&s.cfg, &sl, "g1", s.now, false).unwrap();
    let rep = pass(&s.cfg, &sl, "g1", s.now + 1_000, false).unwrap();
    assert_eq!(rep.actions[0].action, ActionKind::CancelFailed);
    let rec = recorded(&s.cfg);
    assert_eq!(rec[1].action, ActionKind::CancelFailed);
    assert!(rec[1].error.as_deref().unwrap().contains("refused"));
    let rep = pass(&s.cfg, &sl, "g1", s.now + 2_000, false).unwrap();
    assert_eq!(rep.actions.len(), 1, "tried again");
}

/// The dry run lists the warning and does nothing: no record, no mail, no cancel.
#[test]
fn the_dry_run_changes_nothing() {
    let rule = cancelling_now("gpu");
    let s = site(rule, 40, 0);
    let sl = slurm(JobState::Running);
    let rep = pass(&s.cfg, &sl, "g1", s.now, true).unwrap();
    assert_eq!(rep.actions.len(), 1);
    assert_eq!(rep.actions[0].outcome, "would");
    assert!(
        rep.describe().contains("would warn by rule \"idle-gpu\""),
        "{}",
        rep.describe()
    );
    assert!(recorded(&s.cfg).is_empty());
    assert!(queued(&s.cfg).is_empty());
    assert!(sl.cancelled.lock().unwrap().is_empty());
}

/// A job SLURM does not call running, a job it does not know, an exempt user: nothing. A
/// controller that does not answer: nothing, and a note says why.
#[test]
fn only_running_known_unexempt_jobs_are_judged() {
    let s = site(idle_rule(), 40, 0);
    for sl in [slurm(JobState::Completing), FakeSlurm::up()] {
        let rep = pass(&s.cfg, &sl, "g1", s.now, false).unwrap();
        assert_eq!((rep.jobs_running, rep.actions.len()), (0, 0));
    }
    let down = FakeSlurm::default();
    let rep = pass(&s.cfg, &down, "g1", s.now, false).unwrap();
    assert!(
        rep.notes[0].contains("slurmctld does not answer"),
        "{rep:?}"
    );
    let exempt = site(
        Rule {
            exempt_users: vec!["alice".into()],
            ..idle_rule()
        },
        40,
        0,
    );
    let rep = pass(
        &exempt.cfg,
        &slurm(JobState::Running),
        "g1",
        exempt.now,
        false,
    )
    .unwrap();
    assert!(rep.actions.is_empty());
    assert_eq!(rep.held[0].why, "user alice is exempt");
    assert!(recorded(&exempt.cfg).is_empty());
    // Another node's directory is not this node's job.
    let rep = pass(&s.cfg, &slurm(JobState::Running), "g2", s.now, false).unwrap();
    assert_eq!(rep.jobs_running, 0);
}

/// What the runner records reaches the node summary, and from there the report's lines.
#[test]
fn the_record_reaches_the_report() {
    let s = site(idle_rule(), 40, 0);
    pass(&s.cfg, &slurm(JobState::Running), "g1", s.now, false).unwrap();
    let dir = s.cfg.paths.spool_dir.join(format!("{JOB}.g1"));
    let sp = jobscope_common::spool::read_node_dir(&dir);
    let ns =
        jobscope_model::summary::node::summarize_node_spool(&sp, "g1", s.now, &Default::default());
    assert_eq!(ns.interventions.len(), 1);
    let lines = jobscope_report::present::watch::interventions(&[ns]);
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with("warned at ") && lines[0].contains("\"idle-gpu\" (mailed): GPU 1"),
        "{}",
        lines[0]
    );
}
