//! What the scheduler knows about a job, in jobscope's own terms: [`JobState`], [`EndReason`] and
//! [`JobFacts`]. Pure data: the SLURM adapter (`report/src/slurm/`) fills these in from SLURM's
//! commands and the Epilog's environment; everything downstream (assembly, analysis, the presenter)
//! reads them and never sees a SLURM command, JSON shape or exit-code encoding.

use serde::{Deserialize, Serialize};

crate::vocabulary! {
    /// A job's state. Serialised as SLURM's upper-case names (`COMPLETED`, `OUT_OF_MEMORY`…), which is
    /// what archived documents hold; a name jobscope does not know reads back as [`JobState::Unknown`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    #[derive(Serialize, Deserialize, schemars::JsonSchema)]
    pub enum JobState {
        // Final states.
        Completed = "COMPLETED",
        Failed = "FAILED",
        Cancelled = "CANCELLED",
        Timeout = "TIMEOUT",
        OutOfMemory = "OUT_OF_MEMORY",
        NodeFail = "NODE_FAIL",
        Preempted = "PREEMPTED",
        BootFail = "BOOT_FAIL",
        Deadline = "DEADLINE",
        // Not (yet) final.
        Pending = "PENDING",
        Running = "RUNNING",
        Suspended = "SUSPENDED",
        Completing = "COMPLETING",
        Configuring = "CONFIGURING",
        Requeued = "REQUEUED",
        RequeueHold = "REQUEUE_HOLD",
        Resizing = "RESIZING",
        SpecialExit = "SPECIAL_EXIT",
        Stopped = "STOPPED",
        Signaling = "SIGNALING",
        StageOut = "STAGE_OUT",
        /// Nobody said, or a name jobscope does not know.
        #[default]
        #[serde(other)]
        Unknown = "UNKNOWN",
    }
}

impl JobState {
    /// The state of a name as archived (exactly); unknown names are [`JobState::Unknown`].
    pub fn from_name(name: &str) -> JobState {
        <JobState as crate::vocab::Vocabulary>::from_exact(name).unwrap_or(JobState::Unknown)
    }

    /// The job is over and will not run again under this id.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Completed
                | JobState::Failed
                | JobState::Cancelled
                | JobState::Timeout
                | JobState::OutOfMemory
                | JobState::NodeFail
                | JobState::Preempted
                | JobState::BootFail
                | JobState::Deadline
        )
    }

    /// The job still holds (or waits for, or is being given back) its allocation: its spools are
    /// still being written and must not be collected. COMPLETING counts: its epilogs are running.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            JobState::Pending
                | JobState::Running
                | JobState::Suspended
                | JobState::Completing
                | JobState::Configuring
                | JobState::Requeued
                | JobState::RequeueHold
                | JobState::Resizing
                | JobState::SpecialExit
                | JobState::Stopped
                | JobState::Signaling
                | JobState::StageOut
        )
    }

    /// Whether tasks of an array in this state are still to finish (their epilogs have not run yet).
    /// COMPLETING is not: those tasks are in their epilogs already.
    pub fn is_unfinished(self) -> bool {
        self.is_active() && self != JobState::Completing
    }

    /// The job ended well.
    pub fn is_success(self) -> bool {
        self == JobState::Completed
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for JobState {
    fn from(s: &str) -> JobState {
        JobState::from_name(s)
    }
}

/// Why jobscope concluded the job's state: the evidence, typed. The presenter words it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EndReason {
    /// The kernel's OOM killer killed processes in the job cgroup (jobscope's own counters).
    OomKills { kills: u64 },
    /// The scheduler reported an OOM kill in the job.
    SchedulerOom,
    /// The scheduler's final state, taken as it is.
    SchedulerSays { state: JobState },
    /// The job ran to its time limit and was killed.
    TimeLimit { elapsed_s: f64, limit_s: u64 },
    /// Terminated by a signal.
    Signal { signal: i32 },
    /// Ended with a non-zero exit code.
    ExitCode { code: i32 },
    /// The batch script exited 0 but a step failed (SLURM's derived exit code): `step` names it
    /// when jobscope saw its exit.
    StepFailed { code: i32, step: Option<String> },
    /// A job of a higher-priority partition took this job's resources.
    Preempted,
    /// The job ended while its prolog was still running: none of its programs started.
    EndedInProlog,
    /// The job was put back in the queue; it runs again under the same id (that run gets its own
    /// report).
    Requeued,
    /// The scheduler named no failure and no final state, and jobscope did not see these steps end
    /// (their slurmstepd died or was killed: no exit status, no end time): how the job ended is
    /// not known, and COMPLETED would claim more than was seen.
    StepEndNotSeen { steps: Vec<String> },
    /// Neither the scheduler nor the job's exit status said how the job ended.
    Unknown,
    /// A reason archived as words by schema version 1 (read back, never written).
    Legacy { text: String },
}

/// Reads `end_reason` (schema version 2: typed) or `state_reason` (schema version 1: words).
pub fn deserialize_end_reason<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<EndReason>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Archived {
        Typed(EndReason),
        Words(String),
    }
    Ok(Option::<Archived>::deserialize(d)?.map(|a| match a {
        Archived::Typed(r) => r,
        Archived::Words(text) => EndReason::Legacy { text },
    }))
}

/// The state jobscope concludes and why.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnd {
    pub state: JobState,
    pub reason: Option<EndReason>,
}

/// What jobscope itself measured that bears on how the job ended.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EndEvidence {
    /// OOM kills counted in the job's cgroups, over all nodes.
    pub oom_kills: u64,
    /// The first batch/srun step jobscope saw exit non-zero, by name.
    pub failed_step: Option<String>,
    /// Job elapsed time as jobscope measured it.
    pub elapsed_s: f64,
    /// Steps (not `extern`) jobscope saw start and never saw end, by name, once each.
    pub steps_without_end: Vec<String>,
}

/// What the installed scheduler's release offers the user, as the advice needs it. The SLURM
/// adapter (`report/src/slurm/`) is the one place that knows the release and fills it; the
/// analysis reads the capability, never a version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedulerFeatures {
    /// `sbatch --mem-update=<margin>@<delay>` (SLURM 26.05.0rc1 and later, docs/slurm-versions.md):
    /// after `delay` SLURM lowers the job's memory limit, once, to its RSS then plus `margin` %.
    pub mem_update: bool,
}

/// What the scheduler says about a job, with no scheduler-specific encoding left in it.
///
/// The allocation fields (`nodes`, `cpus`, `mem_*`, `gpus`) are what a job *scope* is made of: a
/// later source of jobs (a standalone `jobscope run`) or a locator of the job's cgroup can fill the
/// same struct without SLURM.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFacts {
    pub job_id: u32,
    pub name: Option<String>,
    pub user: Option<String>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub group: Option<String>,
    pub account: Option<String>,
    pub partition: Option<String>,
    pub qos: Option<String>,
    pub cluster: Option<String>,
    pub array_job_id: Option<u32>,
    pub array_task_id: Option<u32>,
    pub time_limit_s: Option<u64>,
    /// Cores of the whole allocation.
    pub cpus: Option<u32>,
    pub node_count: Option<u32>,
    /// The allocation's node names (expanded).
    pub nodes: Vec<String>,
    pub mem_per_node_bytes: Option<u64>,
    pub mem_per_cpu_bytes: Option<u64>,
    /// The GPUs allocated, as the scheduler names them (e.g. `0,1`).
    pub gpus: Option<String>,
    /// The trackable resources allocated, as the scheduler writes them.
    pub tres: Option<String>,
    /// The state as the scheduler reports it now (during the Epilog usually COMPLETING).
    pub scheduler_state: Option<JobState>,
    /// The scheduler's own reason word (untrusted text, e.g. `TimeLimit`).
    pub scheduler_reason: Option<String>,
    pub submit_unix_s: Option<u64>,
    pub start_unix_s: Option<u64>,
    pub end_unix_s: Option<u64>,
    /// The job's exit code and the signal that ended it, decoded.
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// The highest exit code of the job's steps (SLURM's derived exit code), decoded.
    pub derived_exit_code: Option<i32>,
    /// The scheduler preempted the job.
    pub preempted: bool,
    /// The scheduler requeued the job: this run is over, the job will run again.
    pub requeued: bool,
    /// The scheduler still completes the job (its COMPLETING flag: epilogs may still run, and
    /// spools are still theirs). 24.11 and later show the final state with the flag beside it
    /// (`["COMPLETED", "COMPLETING"]`), so the state alone does not say it.
    pub completing: bool,
    /// The scheduler reported that its memory enforcement killed the job.
    pub scheduler_oom: bool,
    pub mail_user: Option<String>,
    pub mail_types: Vec<String>,
    pub work_dir: Option<String>,
    pub comment: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_serialise_as_slurm_names_and_round_trip() {
        for s in JobState::ALL {
            let j = serde_json::to_string(&s).unwrap();
            assert_eq!(j, format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<JobState>(&j).unwrap(), s);
            assert_eq!(JobState::from_name(s.as_str()), s);
        }
        assert_eq!(
            serde_json::to_string(&JobState::OutOfMemory).unwrap(),
            "\"OUT_OF_MEMORY\""
        );
        assert_eq!(
            serde_json::from_str::<JobState>("\"RESV_DEL_HOLD\"").unwrap(),
            JobState::Unknown
        );
        assert_eq!(JobState::from_name("completed"), JobState::Unknown);
    }

    #[test]
    fn archived_state_names_are_unchanged_and_people_may_type_them_loosely() {
        // The names archived documents hold, as SLURM prints them.
        let archived = r#"["COMPLETED","FAILED","CANCELLED","TIMEOUT","OUT_OF_MEMORY","NODE_FAIL","PREEMPTED","BOOT_FAIL","DEADLINE","PENDING","RUNNING","SUSPENDED","COMPLETING","CONFIGURING","REQUEUED","REQUEUE_HOLD","RESIZING","SPECIAL_EXIT","STOPPED","SIGNALING","STAGE_OUT","UNKNOWN"]"#;
        assert_eq!(serde_json::to_string(&JobState::ALL).unwrap(), archived);
        use crate::vocab::Vocabulary;
        assert_eq!(
            JobState::parse("out-of-memory"),
            Some(JobState::OutOfMemory)
        );
        assert_eq!(JobState::parse("completed"), Some(JobState::Completed));
        assert_eq!(JobState::parse("nope"), None);
    }

    #[test]
    fn final_and_active_do_not_overlap() {
        let finals = [
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "OUT_OF_MEMORY",
            "NODE_FAIL",
            "PREEMPTED",
            "BOOT_FAIL",
            "DEADLINE",
        ];
        for s in JobState::ALL {
            assert!(!(s.is_final() && s.is_active()), "{s}");
            assert_eq!(s.is_final(), finals.contains(&s.as_str()), "{s}");
        }
        assert!(!JobState::Unknown.is_final() && !JobState::Unknown.is_active());
        assert!(JobState::Completing.is_active() && !JobState::Completing.is_unfinished());
        assert!(JobState::Running.is_unfinished() && JobState::Pending.is_unfinished());
    }

    #[test]
    fn end_reasons_are_tagged() {
        let r = EndReason::TimeLimit {
            elapsed_s: 61.0,
            limit_s: 60,
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"kind": "time_limit", "elapsed_s": 61.0, "limit_s": 60})
        );
    }
}
