//! The one place jobscope talks to SLURM. Everything SLURM-release-specific (commands, their output
//! shapes, environment variables, exit-code encodings, state names and what they mean) sits behind
//! the [`Slurm`] trait; the rest of jobscope sees SLURM-free [`JobFacts`] and [`JobState`].
//!
//! - [`v22_05`]: the implementation for SLURM 22.05 ([`Slurm2205`]), with its captured outputs as
//!   test fixtures under `report/testdata/`. A newer release gets its own module and implementation.
//! - [`FakeSlurm`]: canned answers, for tests.
//! - [`decide_end`]: how the job ended, from the facts and jobscope's own evidence.

pub mod v22_05;
pub mod v24_11;
pub mod v26_05;

// The model's job facts, for this crate's own code (other crates name `jobscope_model::job`).
pub(crate) use jobscope_model::job::{EndEvidence, EndReason, JobEnd, JobFacts, JobState};
pub use v22_05::{short_hostname, EpilogEnv, Slurm2205};
pub use v24_11::Slurm2411;

use std::collections::HashMap;
use std::sync::Mutex;

/// One task of a job array as the scheduler lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayTask {
    pub job_id: u32,
    pub task_id: Option<u32>,
    pub state: JobState,
}

/// What jobscope asks the scheduler. Every call is bounded in time; `None`/`false` means the
/// scheduler could not be asked or did not know, never "the answer is empty".
/// A partition as `jobscope config check` needs it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Partition {
    pub name: String,
    /// The most nodes one job may have there; `None`: unlimited.
    pub max_nodes: Option<u32>,
    pub total_nodes: u32,
}

impl Partition {
    /// Whether a job there can span nodes.
    pub fn multi_node(&self) -> bool {
        self.total_nodes > 1 && self.max_nodes.is_none_or(|m| m > 1)
    }
}

pub trait Slurm {
    /// What the controller knows about the job (name, owner, limits, allocation, mail settings…).
    fn job_facts(&self, job_id: u32) -> Option<JobFacts>;
    /// The tasks of job array `array_id` the controller still knows.
    fn array_tasks(&self, array_id: u32) -> Option<Vec<ArrayTask>>;
    /// Whether the controller answers.
    fn ping(&self) -> bool;
    /// What the controller knows about many jobs at once (the collector's pass), by job id; a job
    /// it does not know is absent. `None`: this adapter asks per job ([`Slurm::job_facts`]).
    fn jobs_facts(&self, _job_ids: &[u32]) -> Option<HashMap<u32, JobFacts>> {
        None
    }
    /// The cluster's partitions (`jobscope config check` warns where multi-node jobs can run
    /// without a transport); `None` when the controller did not say.
    fn partitions(&self) -> Option<Vec<Partition>> {
        None
    }
    /// How the job ended (see [`decide_end`]); a release with other semantics overrides it.
    fn decide_end(&self, facts: &JobFacts, evidence: &EndEvidence) -> JobEnd {
        decide_end(facts, evidence)
    }
}

/// The job's state concluded from what the scheduler says and what jobscope measured. The
/// scheduler's state is used when it is final; during the Epilog the job is still COMPLETING, so
/// the state is concluded from the evidence, and the evidence is kept as the [`EndReason`].
///
/// Order matters: the kernel's OOM kills are the strongest evidence, then the scheduler's own OOM
/// report, then a final state from the scheduler, then a run to the time limit, then the signal,
/// then the exit code.
pub fn decide_end(f: &JobFacts, ev: &EndEvidence) -> JobEnd {
    let end = |state, reason| JobEnd { state, reason };
    let said = f.scheduler_state.unwrap_or(JobState::Unknown);
    if ev.oom_kills > 0 {
        return end(
            JobState::OutOfMemory,
            Some(EndReason::OomKills {
                kills: ev.oom_kills,
            }),
        );
    }
    if f.scheduler_oom || said == JobState::OutOfMemory {
        return end(JobState::OutOfMemory, Some(EndReason::SchedulerOom));
    }
    // During the Epilog the scheduler still says COMPLETING; these marks say why the run ended
    // before its final state shows (a preempted job is also signalled, a requeued one too).
    if f.preempted {
        return end(JobState::Preempted, Some(EndReason::Preempted));
    }
    if f.requeued || said == JobState::Requeued {
        return end(JobState::Requeued, Some(EndReason::Requeued));
    }
    // Ended while the prolog still ran (scancel then): the job never started, and the Epilog's
    // exit status is an untouched 0:0.
    if matches!(said, JobState::Completing | JobState::Unknown)
        && f.scheduler_reason.as_deref() == Some("Prolog")
    {
        return end(JobState::Cancelled, Some(EndReason::EndedInProlog));
    }
    if said.is_final() && said != JobState::Completed {
        return end(said, Some(EndReason::SchedulerSays { state: said }));
    }
    let signal = f.exit_signal.filter(|&s| s != 0);
    let code = f.exit_code.filter(|&c| c != 0);
    if let Some(limit_s) = f.time_limit_s {
        // SLURM checks limits periodically; a job that ran to its limit and was signalled (or whose
        // reason says so) timed out.
        if ev.elapsed_s + 1.0 >= limit_s as f64
            && (signal.is_some()
                || code.is_some()
                || f.scheduler_reason
                    .as_deref()
                    .is_some_and(|r| r.contains("TimeLimit")))
        {
            return end(
                JobState::Timeout,
                Some(EndReason::TimeLimit {
                    elapsed_s: ev.elapsed_s,
                    limit_s,
                }),
            );
        }
    }
    if let Some(signal) = signal {
        return end(JobState::Cancelled, Some(EndReason::Signal { signal }));
    }
    if let Some(code) = code {
        return end(JobState::Failed, Some(EndReason::ExitCode { code }));
    }
    // The script succeeded but a step failed: SLURM calls the job COMPLETED and keeps the step's
    // code as the derived exit code. Reporting COMPLETED would hide a failed program.
    if let Some(code) = f.derived_exit_code.filter(|&c| c != 0) {
        return end(
            JobState::Failed,
            Some(EndReason::StepFailed {
                code,
                step: ev.failed_step.clone(),
            }),
        );
    }
    // An exit status of 0:0 while COMPLETING is what SLURM shows for a job whose batch step's
    // slurmstepd was killed, too: without the steps' ends, a success was not seen.
    if said != JobState::Completed && !ev.steps_without_end.is_empty() {
        return end(
            JobState::Unknown,
            Some(EndReason::StepEndNotSeen {
                steps: ev.steps_without_end.clone(),
            }),
        );
    }
    if said == JobState::Completed || f.exit_code == Some(0) {
        return end(JobState::Completed, None);
    }
    end(JobState::Unknown, Some(EndReason::Unknown))
}

/// The adapter [`detect`] chose, used wherever a `&dyn Slurm` is.
impl<T: Slurm + ?Sized> Slurm for Box<T> {
    fn job_facts(&self, job_id: u32) -> Option<JobFacts> {
        (**self).job_facts(job_id)
    }
    fn array_tasks(&self, array_id: u32) -> Option<Vec<ArrayTask>> {
        (**self).array_tasks(array_id)
    }
    fn ping(&self) -> bool {
        (**self).ping()
    }
    fn decide_end(&self, facts: &JobFacts, evidence: &EndEvidence) -> JobEnd {
        (**self).decide_end(facts, evidence)
    }
}

/// The release `scontrol --version` names (`slurm 22.05.8`, `slurm-wlm 24.11.5`) as (major, minor).
pub fn parse_release(version_output: &str) -> Option<(u32, u32)> {
    let v = version_output.split_whitespace().nth(1)?;
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The adapter for a release: 24.11 and later ask `scontrol --json` (tested on 24.11 and 26.05,
/// see docs/slurm-versions.md and `v26_05`); anything older, or a release that could not be learned, gets the 22.05
/// adapter, whose text commands every release understands.
pub fn for_release(release: Option<(u32, u32)>) -> Box<dyn Slurm> {
    match release {
        Some(r) if r >= (24, 11) => Box::new(Slurm2411::default()),
        _ => Box::new(Slurm2205::default()),
    }
}

/// The adapter for the SLURM installed here. `scontrol --version` reads no controller: it costs one
/// local exec, bounded like every other command.
pub fn detect() -> Box<dyn Slurm> {
    let out = v22_05::run_bounded(
        "/usr/bin/scontrol",
        &["--version"],
        std::time::Duration::from_secs(5),
    );
    for_release(out.as_deref().and_then(parse_release))
}

/// A scheduler with canned answers, for tests: facts per job, array listings, and whether it answers.
#[derive(Debug, Default)]
pub struct FakeSlurm {
    pub jobs: HashMap<u32, JobFacts>,
    pub arrays: HashMap<u32, Vec<ArrayTask>>,
    pub up: bool,
    /// The job ids asked about, in order (to check what was asked).
    pub asked: Mutex<Vec<u32>>,
}

impl FakeSlurm {
    /// A controller that answers and knows no job.
    pub fn up() -> FakeSlurm {
        FakeSlurm {
            up: true,
            ..Default::default()
        }
    }

    /// Adds a job the controller knows, in `state`.
    pub fn with_job(mut self, job_id: u32, state: JobState) -> FakeSlurm {
        self.jobs.insert(
            job_id,
            JobFacts {
                job_id,
                scheduler_state: Some(state),
                ..Default::default()
            },
        );
        self
    }
}

impl Slurm for FakeSlurm {
    fn job_facts(&self, job_id: u32) -> Option<JobFacts> {
        if let Ok(mut a) = self.asked.lock() {
            a.push(job_id);
        }
        self.jobs.get(&job_id).cloned().filter(|_| self.up)
    }
    fn array_tasks(&self, array_id: u32) -> Option<Vec<ArrayTask>> {
        self.up
            .then(|| self.arrays.get(&array_id).cloned().unwrap_or_default())
    }
    fn ping(&self) -> bool {
        self.up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(state: Option<JobState>, exit: Option<(i32, i32)>) -> JobFacts {
        JobFacts {
            job_id: 1,
            scheduler_state: state,
            exit_code: exit.map(|e| e.0),
            exit_signal: exit.map(|e| e.1),
            ..Default::default()
        }
    }

    /// Every end state jobscope can conclude, with the evidence that leads to it.
    #[test]
    fn end_state_table() {
        use EndReason as R;
        use JobState as S;
        let ev = |oom_kills, elapsed_s| EndEvidence {
            failed_step: None,
            oom_kills,
            elapsed_s,
            steps_without_end: Vec::new(),
        };
        let completing = Some(S::Completing);
        let limited = |mut f: JobFacts, reason: Option<&str>| {
            f.time_limit_s = Some(60);
            f.scheduler_reason = reason.map(str::to_string);
            f
        };
        let oom_signalled = JobFacts {
            scheduler_oom: true,
            ..facts(completing, Some((0, 0)))
        };
        #[rustfmt::skip]
        let table: Vec<(&str, JobFacts, EndEvidence, S, Option<R>)> = vec![
            ("kernel OOM kills win over everything", facts(Some(S::Completed), Some((0, 0))), ev(3, 10.0), S::OutOfMemory, Some(R::OomKills { kills: 3 })),
            ("the scheduler's OOM report (SIG_OOM)", oom_signalled, ev(0, 10.0), S::OutOfMemory, Some(R::SchedulerOom)),
            ("the scheduler's OUT_OF_MEMORY state", facts(Some(S::OutOfMemory), None), ev(0, 10.0), S::OutOfMemory, Some(R::SchedulerOom)),
            ("scheduler FAILED", facts(Some(S::Failed), Some((0, 0))), ev(0, 10.0), S::Failed, Some(R::SchedulerSays { state: S::Failed })),
            ("scheduler CANCELLED", facts(Some(S::Cancelled), None), ev(0, 10.0), S::Cancelled, Some(R::SchedulerSays { state: S::Cancelled })),
            ("scheduler TIMEOUT", facts(Some(S::Timeout), None), ev(0, 10.0), S::Timeout, Some(R::SchedulerSays { state: S::Timeout })),
            ("scheduler NODE_FAIL", facts(Some(S::NodeFail), None), ev(0, 10.0), S::NodeFail, Some(R::SchedulerSays { state: S::NodeFail })),
            ("scheduler PREEMPTED", facts(Some(S::Preempted), None), ev(0, 10.0), S::Preempted, Some(R::SchedulerSays { state: S::Preempted })),
            ("scheduler BOOT_FAIL", facts(Some(S::BootFail), None), ev(0, 10.0), S::BootFail, Some(R::SchedulerSays { state: S::BootFail })),
            ("scheduler DEADLINE", facts(Some(S::Deadline), None), ev(0, 10.0), S::Deadline, Some(R::SchedulerSays { state: S::Deadline })),
            ("signalled at the time limit", limited(facts(completing, Some((0, 15))), None), ev(0, 61.0), S::Timeout, Some(R::TimeLimit { elapsed_s: 61.0, limit_s: 60 })),
            ("non-zero exit at the time limit", limited(facts(completing, Some((1, 0))), None), ev(0, 59.5), S::Timeout, Some(R::TimeLimit { elapsed_s: 59.5, limit_s: 60 })),
            ("the reason says TimeLimit", limited(facts(completing, Some((0, 0))), Some("TimeLimit")), ev(0, 60.0), S::Timeout, Some(R::TimeLimit { elapsed_s: 60.0, limit_s: 60 })),
            ("signalled well before the limit", limited(facts(completing, Some((0, 9))), None), ev(0, 30.0), S::Cancelled, Some(R::Signal { signal: 9 })),
            ("at the limit but exited cleanly", limited(facts(completing, Some((0, 0))), None), ev(0, 61.0), S::Completed, None),
            ("signal, no limit", facts(completing, Some((0, 15))), ev(0, 10.0), S::Cancelled, Some(R::Signal { signal: 15 })),
            ("exit code", facts(completing, Some((3, 0))), ev(0, 10.0), S::Failed, Some(R::ExitCode { code: 3 })),
            ("exit 0 while COMPLETING", facts(completing, Some((0, 0))), ev(0, 10.0), S::Completed, None),
            ("scheduler COMPLETED, no exit status", facts(Some(S::Completed), None), ev(0, 10.0), S::Completed, None),
            ("preempted while COMPLETING (signalled too)", JobFacts { preempted: true, ..facts(completing, Some((0, 15))) }, ev(0, 10.0), S::Preempted, Some(R::Preempted)),
            ("requeued while COMPLETING", JobFacts { requeued: true, ..facts(completing, Some((0, 0))) }, ev(0, 10.0), S::Requeued, Some(R::Requeued)),
            ("batch exit 0, a step failed", JobFacts { derived_exit_code: Some(4), ..facts(completing, Some((0, 0))) }, EndEvidence { failed_step: Some("0".into()), ..ev(0, 10.0) }, S::Failed, Some(R::StepFailed { code: 4, step: Some("0".into()) })),
            ("a failed step does not hide the job's own exit code", JobFacts { derived_exit_code: Some(4), ..facts(completing, Some((3, 0))) }, ev(0, 10.0), S::Failed, Some(R::ExitCode { code: 3 })),
            ("cancelled in its prolog", JobFacts { scheduler_reason: Some("Prolog".into()), ..facts(completing, Some((0, 0))) }, ev(0, 0.0), S::Cancelled, Some(R::EndedInProlog)),
            ("exit 0 while COMPLETING, the batch step's end not seen (its slurmstepd killed)", facts(completing, Some((0, 0))), EndEvidence { steps_without_end: vec!["batch".into()], ..ev(0, 10.0) }, S::Unknown, Some(R::StepEndNotSeen { steps: vec!["batch".into()] })),
            ("SLURM's final COMPLETED stands (the record says what is missing)", facts(Some(S::Completed), Some((0, 0))), EndEvidence { steps_without_end: vec!["batch".into()], ..ev(0, 10.0) }, S::Completed, None),
            ("a final CANCELLED stands", facts(Some(S::Cancelled), Some((0, 0))), EndEvidence { steps_without_end: vec!["batch".into()], ..ev(0, 10.0) }, S::Cancelled, Some(R::SchedulerSays { state: S::Cancelled })),
            ("a signal explains an unseen end", facts(completing, Some((0, 9))), EndEvidence { steps_without_end: vec!["batch".into()], ..ev(0, 10.0) }, S::Cancelled, Some(R::Signal { signal: 9 })),
            ("nobody says", facts(None, None), ev(0, 10.0), S::Unknown, Some(R::Unknown)),
            ("only COMPLETING", facts(completing, None), ev(0, 10.0), S::Unknown, Some(R::Unknown)),
        ];
        for (case, f, e, state, reason) in table {
            let got = decide_end(&f, &e);
            assert_eq!((got.state, got.reason), (state, reason), "{case}");
        }
    }

    /// `scontrol --version` as the two releases print it (report/testdata/slurm-24.11/version.txt
    /// is 24.11's, captured; 22.05's is Debian 12's `slurm 22.05.8`).
    #[test]
    fn release_from_scontrol_version() {
        let v2411 = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/slurm-24.11/version.txt"
        ))
        .unwrap();
        assert_eq!(parse_release(&v2411), Some((24, 11)));
        assert_eq!(parse_release("slurm 22.05.8\n"), Some((22, 5)));
        assert_eq!(parse_release("slurm-wlm 25.05.0-0rc1"), Some((25, 5)));
        assert_eq!(parse_release(""), None);
        assert_eq!(parse_release("scontrol: command not found"), None);
    }

    #[test]
    fn fake_answers_only_when_up() {
        let f = FakeSlurm::up().with_job(5, JobState::Running);
        assert_eq!(
            f.job_facts(5).and_then(|j| j.scheduler_state),
            Some(JobState::Running)
        );
        assert!(f.job_facts(6).is_none());
        let down = FakeSlurm {
            up: false,
            ..FakeSlurm::default().with_job(5, JobState::Running)
        };
        assert!(down.job_facts(5).is_none() && down.array_tasks(1).is_none() && !down.ping());
    }
}
