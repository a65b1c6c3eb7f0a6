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
use jobscope_model::job::SchedulerFeatures;
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
    /// What this release offers users that the advice names (`--mem-update` from 26.05 on).
    fn features(&self) -> SchedulerFeatures {
        SchedulerFeatures::default()
    }
    /// Writes `text` into ended job `job_id`'s AdminComment (`[report] admin_comment`), bounded by
    /// `limit`. `Err` says what failed; the caller logs it and goes on.
    fn set_admin_comment(
        &self,
        job_id: u32,
        cluster: Option<&str>,
        text: &str,
        limit: std::time::Duration,
    ) -> Result<(), String> {
        set_admin_comment_with_sacctmgr(job_id, cluster, text, limit)
    }
    /// Writes `text` into running job `job_id`'s AdminComment in slurmctld's own record (what
    /// `scontrol show job`, the job-completion plugins and the accounting end record carry),
    /// bounded by `limit`. slurmctld refuses it once the job has ended. `Err` says what failed.
    fn update_admin_comment(
        &self,
        job_id: u32,
        text: &str,
        limit: std::time::Duration,
    ) -> Result<(), String> {
        update_admin_comment_with_scontrol(job_id, text, limit)
    }
    /// Cancels running job `job_id` for a site's rule over running jobs (docs/watch.md). `why`
    /// goes into the job's AdminComment first, where `scontrol show job` and `sacct` show it;
    /// each command is bounded by `limit`. `Err` says what failed.
    fn cancel(&self, job_id: u32, why: &str, limit: std::time::Duration) -> Result<(), String> {
        cancel_with_scancel(job_id, why, limit)
    }
}

/// [`Slurm::update_admin_comment`], the same in every release supported: `scontrol update
/// JobId=… AdminComment=…`, with control characters made blanks and at most 1000 characters
/// (SLURM keeps a comment field under 1 KiB).
pub fn update_admin_comment_with_scontrol(
    job_id: u32,
    text: &str,
    limit: std::time::Duration,
) -> Result<(), String> {
    let comment: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(crate::admin_comment::MAX_BYTES)
        .collect();
    v22_05::run_bounded(
        "/usr/bin/scontrol",
        &[
            "update",
            &format!("JobId={job_id}"),
            &format!("AdminComment={comment}"),
        ],
        limit,
    )
    .map(|_| ())
    .ok_or_else(|| {
        format!(
            "scontrol update JobId={job_id} AdminComment=… failed or did not end within {} s (slurmctld refuses it once the job has ended)",
            limit.as_secs()
        )
    })
}

/// [`Slurm::cancel`] with SLURM's commands, the same in every release supported: the reason into
/// the job's AdminComment ([`update_admin_comment_with_scontrol`], at most 400 characters; its
/// failure does not stop the cancel), then `scancel`.
pub fn cancel_with_scancel(
    job_id: u32,
    why: &str,
    limit: std::time::Duration,
) -> Result<(), String> {
    let why: String = why.chars().take(400).collect();
    let _ = update_admin_comment_with_scontrol(job_id, &why, limit);
    v22_05::run_bounded("scancel", &[&job_id.to_string()], limit)
        .map(|_| ())
        .ok_or_else(|| {
            format!(
                "scancel {job_id} failed or did not end within {} s",
                limit.as_secs()
            )
        })
}

/// [`Slurm::set_admin_comment`], the same in every release supported: `sacctmgr -i modify job
/// where JobID=… [Cluster=…] set AdminComment=…` writes the accounting database's record (what
/// `sacct` shows). `scontrol update JobId=… AdminComment=…` cannot do it: slurmctld refuses any
/// update of a job whose base state is final (`_update_job`: `IS_JOB_FINISHED` →
/// ESLURM_JOB_FINISHED), and during the Epilog the job is already COMPLETING on a final base state.
/// Measured on 22.05.8 ("Job has already finished", while COMPLETING and after), read in the
/// 24.11.7 and 26.05.3 sources (docs/slurm-versions.md). Without slurmdbd, sacctmgr says so and
/// fails.
pub fn set_admin_comment_with_sacctmgr(
    job_id: u32,
    cluster: Option<&str>,
    text: &str,
    limit: std::time::Duration,
) -> Result<(), String> {
    use std::process::{Command, Stdio};
    let mut args = vec![
        "-i".to_string(),
        "modify".into(),
        "job".into(),
        "where".into(),
        format!("JobID={job_id}"),
    ];
    // A cluster name with anything but a plain name is not passed: the local cluster is the default.
    if let Some(c) = cluster.filter(|c| {
        !c.is_empty()
            && c.chars()
                .all(|x| x.is_ascii_alphanumeric() || x == '_' || x == '-')
    }) {
        args.push(format!("Cluster={c}"));
    }
    args.push("set".into());
    args.push(format!("AdminComment={text}"));
    let child = Command::new("/usr/bin/sacctmgr")
        .args(&args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("sacctmgr: {e}"))?;
    let ended = jobscope_common::child::wait_bounded(
        child,
        None,
        jobscope_common::child::Bounds {
            limit,
            max_output_bytes: 64 * 1024,
            pipe_grace: std::time::Duration::from_secs(1),
            kill_group: false,
        },
    )
    .map_err(|e| format!("sacctmgr: {e}"))?;
    let said = |o: &jobscope_common::child::Output| {
        String::from_utf8_lossy(&o.bytes)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(300)
            .collect::<String>()
    };
    match ended.status {
        None => Err(format!(
            "sacctmgr did not end within {} s (killed)",
            limit.as_secs()
        )),
        Some(st) if st.success() => {
            // sacctmgr exits 0 and says so when no record matched.
            let out = said(&ended.stdout);
            if out.contains("Nothing modified") || out.contains("Nothing to change") {
                Err(format!("sacctmgr: {out}"))
            } else {
                Ok(())
            }
        }
        Some(st) => Err(format!(
            "sacctmgr failed ({st}): {}",
            [said(&ended.stderr), said(&ended.stdout)]
                .into_iter()
                .filter(|x| !x.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        )),
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
    // Every method is forwarded: one left out would answer with the trait's default for a boxed
    // adapter (a method call on the `Box` itself resolves here, not through the vtable).
    fn jobs_facts(&self, job_ids: &[u32]) -> Option<HashMap<u32, JobFacts>> {
        (**self).jobs_facts(job_ids)
    }
    fn partitions(&self) -> Option<Vec<Partition>> {
        (**self).partitions()
    }
    fn cancel(&self, job_id: u32, why: &str, limit: std::time::Duration) -> Result<(), String> {
        (**self).cancel(job_id, why, limit)
    }
    fn update_admin_comment(
        &self,
        job_id: u32,
        text: &str,
        limit: std::time::Duration,
    ) -> Result<(), String> {
        (**self).update_admin_comment(job_id, text, limit)
    }
    fn features(&self) -> SchedulerFeatures {
        (**self).features()
    }
    fn set_admin_comment(
        &self,
        job_id: u32,
        cluster: Option<&str>,
        text: &str,
        limit: std::time::Duration,
    ) -> Result<(), String> {
        (**self).set_admin_comment(job_id, cluster, text, limit)
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
        // The one place a release decides a capability (`SchedulerFeatures`).
        Some(r) if r >= (24, 11) => Box::new(Slurm2411 {
            features: SchedulerFeatures {
                mem_update: r >= (26, 5),
            },
            ..Slurm2411::default()
        }),
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
    /// The jobs cancelled, with the reason given, in order.
    pub cancelled: Mutex<Vec<(u32, String)>>,
    /// Whether `cancel` fails.
    pub cancel_fails: bool,
    /// The AdminComments written, in order (job, cluster, text); `update_admin_comment`'s (a
    /// running job's, in slurmctld's record) with cluster `None`.
    pub admin_comments: Mutex<Vec<(u32, Option<String>, String)>>,
    /// What `set_admin_comment` answers when it fails (`None`: it succeeds).
    pub admin_comment_fails: Option<String>,
    /// The release's capabilities.
    pub features: SchedulerFeatures,
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
    fn features(&self) -> SchedulerFeatures {
        self.features
    }
    fn set_admin_comment(
        &self,
        job_id: u32,
        cluster: Option<&str>,
        text: &str,
        _limit: std::time::Duration,
    ) -> Result<(), String> {
        if let Some(e) = &self.admin_comment_fails {
            return Err(e.clone());
        }
        if let Ok(mut c) = self.admin_comments.lock() {
            c.push((job_id, cluster.map(str::to_string), text.to_string()));
        }
        Ok(())
    }
    fn update_admin_comment(
        &self,
        job_id: u32,
        text: &str,
        _limit: std::time::Duration,
    ) -> Result<(), String> {
        let running =
            self.jobs.get(&job_id).and_then(|f| f.scheduler_state) == Some(JobState::Running);
        if !self.up || !running {
            return Err("scontrol update refused (canned): the job is not running".into());
        }
        if let Ok(mut c) = self.admin_comments.lock() {
            c.push((job_id, None, text.to_string()));
        }
        Ok(())
    }
    fn cancel(&self, job_id: u32, why: &str, _limit: std::time::Duration) -> Result<(), String> {
        if self.cancel_fails || !self.up {
            return Err("scancel refused (canned)".into());
        }
        if let Ok(mut c) = self.cancelled.lock() {
            c.push((job_id, why.to_string()));
        }
        Ok(())
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

    /// `sbatch --mem-update` is in 26.05's man page and in none of 24.11's, 25.05's or 25.11's
    /// (SchedMD/slurm, doc/man/man1/sbatch.1 on each release branch).
    #[test]
    fn only_26_05_and_later_offer_mem_update() {
        for (release, want) in [
            (None, false),
            (Some((22, 5)), false),
            (Some((24, 11)), false),
            (Some((25, 11)), false),
            (Some((26, 5)), true),
            (Some((27, 5)), true),
        ] {
            assert_eq!(
                for_release(release).features().mem_update,
                want,
                "{release:?}"
            );
        }
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
