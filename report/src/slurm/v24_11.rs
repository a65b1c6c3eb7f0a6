//! SLURM 24.11 (Debian 13): one `scontrol --json show job ID` answers everything the Epilog asks
//! about its job, and only about that job. In 24.11 the JSON record is final while the Epilog runs:
//! `job_state` is a list whose first word is the base state (`["FAILED", "COMPLETING"]`), and the
//! record holds the exit status, the derived exit code, the preemption time and the mail settings
//! (22.05 needed `scontrol show job -o` text for those, see `v22_05.rs`). Numbers are
//! `{"set", "infinite", "number"}` objects. An array's tasks come from the same command with the
//! array's id, which lists every task the controller holds.
//!
//! Captured from the 24.11 test cluster (slurm-conf/trixie/capture-fixtures.sh) into
//! `report/testdata/slurm-24.11/`: the same job while running, from inside its Epilog, and after.
//! The free-text fields (name, comment, paths) are JSON strings here, so no forged field can be
//! mistaken for another: they are only ever stored and rendered through escaping templates.

use super::v22_05::{parse_squeue_json, run_bounded};
use super::{decide_end, ArrayTask, EndEvidence, JobEnd, JobFacts, JobState, Slurm};
use serde_json::Value;
use std::time::Duration;

/// How long any SLURM command may take (the Epilog must never hang).
const COMMAND_LIMIT: Duration = Duration::from_secs(5);

/// SLURM's pseudo-signal for an OOM kill (SIG_OOM in slurm's src/common/slurm_protocol_defs.h).
/// The JSON's `exit_code.signal.id` shows it 7-bit, as 125, like the Epilog environment
/// (`v22_05::SIG_OOM_IN_EXIT_CODE2`): captured from 24.11 and 26.05 on cgroup v2
/// (`testdata/slurm-24.11/oom-epilog-scontrol-json-cgroup-v2.json`,
/// `testdata/slurm-26.05/oom-epilog-scontrol-json.json`). The full value is accepted too.
const SIG_OOM: [i32; 2] = [253, super::v22_05::SIG_OOM_IN_EXIT_CODE2];

/// A `{"set": bool, "infinite": bool, "number": n}` field (or a plain number); unset/infinite → None.
fn num(v: &Value, k: &str) -> Option<u64> {
    let x = v.get(k)?;
    if let Some(n) = x.as_u64() {
        return Some(n);
    }
    if x.get("set").and_then(Value::as_bool) == Some(false)
        || x.get("infinite").and_then(Value::as_bool) == Some(true)
    {
        return None;
    }
    x.get("number").and_then(Value::as_u64)
}

/// The words of `job_state` (base state first, then flags such as COMPLETING or REQUEUED).
fn state_words(job: &Value) -> Vec<&str> {
    match job.get("job_state") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// (return code, signal) of an `exit_code`/`derived_exit_code` object.
fn exit_status(job: &Value, k: &str) -> (Option<i32>, Option<i32>) {
    let Some(e) = job.get(k) else {
        return (None, None);
    };
    let code = num(e, "return_code").map(|c| c as i32);
    let signal = e.get("signal").and_then(|s| num(s, "id")).map(|s| s as i32);
    (code, signal)
}

fn jobs(text: &str) -> Option<Vec<Value>> {
    let v: Value = serde_json::from_str(text).ok()?;
    v.get("jobs")?.as_array().cloned()
}

/// Parses `scontrol --json show job ID` (24.11, data_parser v0.0.42); `None` if the job is not in it.
pub fn parse_scontrol_json(text: &str, job_id: u32) -> Option<JobFacts> {
    // The fields 24.11 shares with `squeue --json` (names, owner, allocation, times, mail…).
    let mut f = parse_squeue_json(text, job_id)?;
    let jobs = jobs(text)?;
    let job = jobs
        .iter()
        .find(|j| num(j, "job_id") == Some(job_id as u64))?;
    let words = state_words(job);
    // The base state is final while the Epilog runs (COMPLETING is only a flag in 24.11).
    f.scheduler_state = words
        .first()
        .map(|w| JobState::from_name(w))
        .filter(|s| *s != JobState::Unknown);
    let (code, signal) = exit_status(job, "exit_code");
    let oom = signal.is_some_and(|s| SIG_OOM.contains(&s));
    f.exit_code = code;
    f.exit_signal = if oom { Some(0) } else { signal };
    f.scheduler_oom = oom;
    f.derived_exit_code = exit_status(job, "derived_exit_code").0;
    // preempt_time is 0 until the job is preempted.
    f.preempted = num(job, "preempt_time").is_some_and(|t| t > 0);
    // A run whose Epilog runs has ended: a controller that already says PENDING has reset the
    // job for its next run, i.e. requeued it (22.05's record shows this as EndTime=Unknown).
    f.requeued = words.iter().any(|w| w.starts_with("REQUEUE"))
        || f.scheduler_state == Some(JobState::Pending);
    f.completing = words.contains(&"COMPLETING");
    Some(f)
}

/// The tasks of array `array_id` in `scontrol --json show job <array_id>` output.
pub fn parse_array_tasks_json(text: &str, array_id: u32) -> Option<Vec<ArrayTask>> {
    Some(
        jobs(text)?
            .iter()
            .filter(|j| num(j, "array_job_id") == Some(array_id as u64))
            .filter_map(|j| {
                Some(ArrayTask {
                    job_id: num(j, "job_id")? as u32,
                    task_id: num(j, "array_task_id").map(|t| t as u32),
                    state: state_words(j)
                        .first()
                        .map(|w| JobState::from_name(w))
                        .unwrap_or(JobState::Unknown),
                })
            })
            .collect(),
    )
}

/// SLURM 24.11 through its commands in `/usr/bin`.
#[derive(Debug, Clone)]
pub struct Slurm2411 {
    pub scontrol: String,
    /// What the release offers (set by `super::for_release`, which knows the release).
    pub features: super::SchedulerFeatures,
}

impl Default for Slurm2411 {
    fn default() -> Self {
        Slurm2411 {
            scontrol: "/usr/bin/scontrol".into(),
            features: super::SchedulerFeatures::default(),
        }
    }
}

impl Slurm2411 {
    fn show_job(&self, id: u32) -> Option<String> {
        run_bounded(
            &self.scontrol,
            &["--json", "show", "job", &id.to_string()],
            COMMAND_LIMIT,
        )
    }
}

impl Slurm for Slurm2411 {
    fn features(&self) -> super::SchedulerFeatures {
        self.features
    }
    fn job_facts(&self, job_id: u32) -> Option<JobFacts> {
        parse_scontrol_json(&self.show_job(job_id)?, job_id)
    }

    fn array_tasks(&self, array_id: u32) -> Option<Vec<ArrayTask>> {
        parse_array_tasks_json(&self.show_job(array_id)?, array_id)
    }

    fn ping(&self) -> bool {
        run_bounded(&self.scontrol, &["ping"], COMMAND_LIMIT).is_some_and(|o| o.contains("UP"))
    }

    /// The one-line text form has not changed since 22.05.
    fn partitions(&self) -> Option<Vec<super::Partition>> {
        run_bounded(&self.scontrol, &["show", "partition", "-o"], COMMAND_LIMIT)
            .map(|o| super::v22_05::parse_partitions(&o))
    }

    fn decide_end(&self, facts: &JobFacts, evidence: &EndEvidence) -> JobEnd {
        decide_end_2411(facts, evidence)
    }
}

/// 24.11 already says FAILED or COMPLETED while the Epilog runs (22.05 says COMPLETING there).
/// Those two states only sum up the exit status, whose own reason (the exit code, the signal, the
/// failed step) says more: conclude from the evidence as for 22.05, and keep the scheduler's word
/// only when the evidence concludes nothing. Every other final state (CANCELLED, TIMEOUT,
/// OUT_OF_MEMORY, NODE_FAIL, PREEMPTED…) is the scheduler's own knowledge and stays as it is.
pub fn decide_end_2411(facts: &JobFacts, evidence: &EndEvidence) -> JobEnd {
    if matches!(
        facts.scheduler_state,
        Some(JobState::Failed | JobState::Completed)
    ) {
        let as_2205 = JobFacts {
            scheduler_state: Some(JobState::Completing),
            ..facts.clone()
        };
        let end = decide_end(&as_2205, evidence);
        if end.state != JobState::Unknown {
            return end;
        }
    }
    decide_end(facts, evidence)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn testdata(name: &str) -> String {
        let p = format!("{}/testdata/slurm-24.11/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    fn captured_id() -> u32 {
        testdata("job-id.txt").trim().parse().unwrap()
    }

    /// The job of slurm-conf/trixie/capture-fixtures.sh: `sbatch -J 'cap ture' --comment 'a comment'
    /// --mail-type=END,FAIL --mail-user=alice@localhost -t 5 -c 1 --mem=200M --wrap 'sleep 4; exit 3'`
    /// as alice (uid 1001), asked from inside its Epilog (the record scontrol-epilog.txt shows the
    /// same job as text: JobState=COMPLETING Reason=NonZeroExitCode ExitCode=3:0).
    #[test]
    fn the_epilogs_one_answer_is_final() {
        let id = captured_id();
        let f = parse_scontrol_json(&testdata("scontrol-json-epilog.json"), id).unwrap();
        assert_eq!(f.name.as_deref(), Some("cap ture"));
        assert_eq!(f.user.as_deref(), Some("alice"));
        assert_eq!((f.uid, f.gid), (Some(1001), Some(1001)));
        assert_eq!(f.partition.as_deref(), Some("debug"));
        assert_eq!(f.cluster.as_deref(), Some("jobscope"));
        assert_eq!(f.account, None, "24.11 prints \"\" when accounting is off");
        assert_eq!(f.time_limit_s, Some(5 * 60));
        assert_eq!((f.cpus, f.node_count), (Some(1), Some(1)));
        assert_eq!(f.nodes, vec!["vm".to_string()]);
        assert_eq!(f.mem_per_node_bytes, Some(200 * 1024 * 1024));
        assert_eq!(
            f.mem_per_cpu_bytes, None,
            "memory_per_cpu is {{set: false}}"
        );
        assert_eq!(f.array_job_id, None);
        assert_eq!(f.array_task_id, None);
        assert_eq!(f.comment.as_deref(), Some("a comment"));
        assert_eq!(f.work_dir.as_deref(), Some("/home/alice/capture"));
        assert_eq!(f.mail_user.as_deref(), Some("alice@localhost"));
        assert_eq!(f.mail_types, vec!["END".to_string(), "FAIL".to_string()]);
        // ["FAILED", "COMPLETING"]: the final state is already there during the Epilog.
        assert_eq!(f.scheduler_state, Some(JobState::Failed));
        assert_eq!(f.scheduler_reason.as_deref(), Some("NonZeroExitCode"));
        assert_eq!((f.exit_code, f.exit_signal), (Some(3), None));
        assert_eq!(f.derived_exit_code, Some(0));
        assert!(!f.scheduler_oom && !f.preempted && !f.requeued);
        assert!(f.completing, "the Epilog runs: COMPLETING is still a flag");
        // The run lasted 4 s (the script sleeps 4 s): StartTime and EndTime of the text record.
        let (start, end) = (f.start_unix_s.unwrap(), f.end_unix_s.unwrap());
        assert!((4..=5).contains(&(end - start)), "{start}..{end}");
        assert!(f.submit_unix_s.unwrap() <= start);
        // submit_time 1795382230 = the text record's SubmitTime=2026-11-22T21:17:10 (UTC); the
        // captured cluster has no accounting, so no QOS ("qos": "", text QOS=(null)).
        assert_eq!(f.submit_unix_s, Some(1_795_382_230));
        assert_eq!(f.qos, None);
    }

    /// The captured job exited 3 and 24.11 said FAILED during its Epilog: the report names the
    /// exit code (as on 22.05, tests/cluster/tests/states.rs a_nonzero_exit_is_failed), not only
    /// "the scheduler says FAILED".
    #[test]
    fn a_failed_job_ends_with_its_exit_code() {
        use super::super::EndReason;
        let f = parse_scontrol_json(&testdata("scontrol-json-epilog.json"), captured_id()).unwrap();
        let ev = EndEvidence {
            failed_step: None,
            oom_kills: 0,
            elapsed_s: 4.0,
            steps_without_end: Vec::new(),
        };
        let end = Slurm2411::default().decide_end(&f, &ev);
        assert_eq!(end.state, JobState::Failed);
        assert_eq!(end.reason, Some(EndReason::ExitCode { code: 3 }));
        // A state the scheduler knows on its own stays the scheduler's.
        let cancelled = JobFacts {
            scheduler_state: Some(JobState::Cancelled),
            ..f.clone()
        };
        assert_eq!(
            decide_end_2411(&cancelled, &ev).reason,
            Some(EndReason::SchedulerSays {
                state: JobState::Cancelled
            })
        );
        // COMPLETED with a failed step: the step is named.
        let step = JobFacts {
            scheduler_state: Some(JobState::Completed),
            exit_code: Some(0),
            derived_exit_code: Some(4),
            ..f
        };
        let ev = EndEvidence {
            failed_step: Some("0".into()),
            ..ev
        };
        assert_eq!(
            decide_end_2411(&step, &ev).reason,
            Some(EndReason::StepFailed {
                code: 4,
                step: Some("0".into())
            })
        );
    }

    #[test]
    fn a_running_job_is_running() {
        let f =
            parse_scontrol_json(&testdata("scontrol-json-running.json"), captured_id()).unwrap();
        assert_eq!(f.scheduler_state, Some(JobState::Running));
        assert_eq!(
            f.end_unix_s.map(|e| e > f.start_unix_s.unwrap()),
            Some(true)
        );
        // Not ended yet: no exit status to speak of (return code 0, no signal).
        assert_eq!(f.exit_code, Some(0));
        assert_eq!(f.exit_signal, None);
    }

    /// squeue's JSON of 24.11 has the same job shape: the shared parser reads it too.
    #[test]
    fn squeue_json_of_2411_has_the_same_job() {
        let id = captured_id();
        let a = parse_scontrol_json(&testdata("squeue-epilog.json"), id).unwrap();
        let b = parse_scontrol_json(&testdata("scontrol-json-epilog.json"), id).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn another_job_or_no_json_is_none() {
        let text = testdata("scontrol-json-epilog.json");
        assert!(parse_scontrol_json(&text, captured_id() + 1).is_none());
        assert!(
            parse_scontrol_json("slurm_load_jobs error: Invalid job id specified", 1).is_none()
        );
        assert!(parse_scontrol_json(r#"{"jobs": {}}"#, 1).is_none());
    }

    /// A real OOM kill under cgroup v2 (slurm-conf/vm/captured/trixie/io-off: `--mem=100M`, 400 MiB
    /// touched): OUT_OF_MEMORY with signal 125, the scheduler's OOM report and not a signal.
    #[test]
    fn a_captured_oom_kill_is_the_schedulers_oom_report() {
        let text = testdata("oom-epilog-scontrol-json-cgroup-v2.json");
        let id: u32 = serde_json::from_str::<Value>(&text).unwrap()["jobs"][0]["job_id"]
            .as_u64()
            .unwrap() as u32;
        let f = parse_scontrol_json(&text, id).unwrap();
        assert_eq!(f.scheduler_state, Some(JobState::OutOfMemory));
        assert!(f.scheduler_oom);
        assert_eq!(f.exit_signal, Some(0), "125 is SIG_OOM, not a signal");
        assert_eq!(f.mem_per_node_bytes, Some(100 << 20));
    }

    /// Edits of the captured record for what a single capture cannot show: an OOM kill (SIG_OOM as
    /// the signal), a preempted job, a requeued one, and a signal.
    #[test]
    fn oom_preemption_requeue_and_signals() {
        let id = captured_id();
        let mut v: Value = serde_json::from_str(&testdata("scontrol-json-epilog.json")).unwrap();
        let job = &mut v["jobs"][0];
        job["exit_code"]["signal"]["id"] =
            serde_json::json!({"set": true, "infinite": false, "number": 253});
        job["preempt_time"]["number"] = 1795382235u64.into();
        job["job_state"] = serde_json::json!(["PENDING", "REQUEUED"]);
        let f = parse_scontrol_json(&v.to_string(), id).unwrap();
        assert!(f.scheduler_oom && f.preempted && f.requeued);
        assert_eq!(
            f.exit_signal,
            Some(0),
            "SIG_OOM is the scheduler's OOM report, not a signal"
        );
        assert_eq!(f.scheduler_state, Some(JobState::Pending));
        v["jobs"][0]["job_state"] = serde_json::json!(["PENDING"]);
        assert!(parse_scontrol_json(&v.to_string(), id).unwrap().requeued);
        v["jobs"][0]["exit_code"]["signal"]["id"]["number"] = 9.into();
        let f = parse_scontrol_json(&v.to_string(), id).unwrap();
        assert_eq!((f.exit_signal, f.scheduler_oom), (Some(9), false));
    }

    #[test]
    fn array_tasks_from_json() {
        let text = r#"{"jobs": [
          {"job_id": 11, "array_job_id": {"set": true, "infinite": false, "number": 10},
           "array_task_id": {"set": true, "infinite": false, "number": 1}, "job_state": ["COMPLETED"]},
          {"job_id": 10, "array_job_id": {"set": true, "infinite": false, "number": 10},
           "array_task_id": {"set": false, "infinite": false, "number": 0}, "job_state": ["PENDING"]},
          {"job_id": 12, "array_job_id": {"set": true, "infinite": false, "number": 0},
           "array_task_id": {"set": false, "infinite": false, "number": 0}, "job_state": ["RUNNING"]}]}"#;
        let t = parse_array_tasks_json(text, 10).unwrap();
        assert_eq!(
            t,
            vec![
                ArrayTask {
                    job_id: 11,
                    task_id: Some(1),
                    state: JobState::Completed
                },
                ArrayTask {
                    job_id: 10,
                    task_id: None,
                    state: JobState::Pending
                },
            ]
        );
    }
}
