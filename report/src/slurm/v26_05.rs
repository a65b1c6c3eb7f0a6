//! SLURM 26.05 (Debian unstable, 26.05.5): the 24.11 adapter ([`super::Slurm2411`]) reads it
//! unchanged, and [`super::for_release`] gives it to every release from 24.11 on. This module
//! holds what was checked against the real 26.05 daemons (cgroup v2, `slurm-conf/vm/`), with the
//! captured outputs in `report/testdata/slurm-26.05/` (from `slurm-conf/vm/captured/sid/io-off/`):
//!
//! - `scontrol --json` moved from data_parser v0.0.42 to v0.0.45. Keys were added (`sluid` under
//!   `step_id`, `submit_line`, `std*_expanded`, …); none the adapter reads changed its shape.
//! - `scontrol show job -o` gained `SubmitLine=`: the whole sbatch command line, unquoted, followed
//!   by more `Key=value` fields. A user's own words in it (`--comment ' WorkDir=/x'`) would read as
//!   fields to a text parser. The adapter reads only the JSON, where it is one string.
//! - In the Epilog the JSON's `job_state` is already final (`["OUT_OF_MEMORY", "COMPLETING"]`)
//!   while `-o` says `COMPLETING`, as in 24.11.
//! - The OOM kill's signal in the JSON is 125 (SIG_OOM, 7-bit), as in 24.11 on cgroup v2.
//! - `StdErr` is empty when only `-o` was given, and `OverSubscribe` says `NO` (24.11: `OK`).
//!   jobscope reads neither.

#[cfg(test)]
mod tests {
    use super::super::v24_11::{decide_end_2411, parse_scontrol_json};
    use super::super::{parse_release, EndEvidence, EndReason, JobState};

    fn testdata(name: &str) -> String {
        let p = format!("{}/testdata/slurm-26.05/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    fn evidence(elapsed_s: f64) -> EndEvidence {
        EndEvidence {
            failed_step: None,
            oom_kills: 0,
            elapsed_s,
            steps_without_end: Vec::new(),
        }
    }

    #[test]
    fn the_release_is_read_from_scontrol_version() {
        assert_eq!(parse_release(&testdata("version.txt")), Some((26, 5)));
    }

    /// Job 1 of `slurm-conf/vm/guest/capture.sh main`: `sbatch -J 'cap main' -c 1 --mem=1G -t 5
    /// -o /home/alice/cap/%j.out main.sh` as alice, asked from inside its Epilog.
    #[test]
    fn the_epilogs_answer_about_a_completed_job() {
        let f = parse_scontrol_json(&testdata("main-epilog-scontrol-json.json"), 1).unwrap();
        assert_eq!(f.name.as_deref(), Some("cap main"));
        assert_eq!(f.user.as_deref(), Some("alice"));
        assert_eq!((f.uid, f.gid), (Some(1001), Some(1001)));
        assert_eq!(f.partition.as_deref(), Some("debug"));
        assert_eq!(f.cluster.as_deref(), Some("jobscope"));
        assert_eq!(f.time_limit_s, Some(5 * 60));
        assert_eq!((f.cpus, f.node_count), (Some(1), Some(1)));
        assert_eq!(f.nodes, vec!["vm".to_string()]);
        assert_eq!(f.mem_per_node_bytes, Some(1 << 30));
        assert_eq!(f.work_dir.as_deref(), Some("/home/alice/cap"));
        assert_eq!(f.scheduler_state, Some(JobState::Completed));
        assert_eq!((f.exit_code, f.exit_signal), (Some(0), None));
        assert!(!f.scheduler_oom && !f.preempted && !f.requeued);
        // The Epilog's environment has the same start and end (SLURM_JOB_{START,END}_TIME).
        let env = testdata("main-epilog-env.txt");
        let var = |k: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .and_then(|v| v.parse::<u64>().ok())
        };
        assert_eq!(f.start_unix_s, var("SLURM_JOB_START_TIME"));
        assert_eq!(f.end_unix_s, var("SLURM_JOB_END_TIME"));
        let end = decide_end_2411(&f, &evidence(32.0));
        assert_eq!(end.state, JobState::Completed);
        // squeue's JSON after the end names the same job the same way.
        let q = parse_scontrol_json(&testdata("main-squeue-json-ended.json"), 1).unwrap();
        assert_eq!(
            (q.name, q.mem_per_node_bytes),
            (f.name, f.mem_per_node_bytes)
        );
    }

    /// `-o` text of the same moment: SubmitLine holds `--mem=1G` and `-J cap main` as bare words,
    /// then real fields follow. This is why 26.05 is read from the JSON only.
    #[test]
    fn the_text_record_carries_the_submit_line_before_real_fields() {
        let text = testdata("main-epilog-scontrol.txt");
        let at = text.find(" SubmitLine=").unwrap();
        let rest = &text[at..];
        assert!(rest.contains("--mem=1G") && rest.contains(" WorkDir=/home/alice/cap"));
        assert!(text.contains("JobState=COMPLETING"));
        let f = parse_scontrol_json(&testdata("main-epilog-scontrol-json.json"), 1).unwrap();
        assert_eq!(
            f.scheduler_state,
            Some(JobState::Completed),
            "the JSON is final"
        );
    }

    /// The end states the 26.05 Epilog sees, each from a real job (capture.sh states: jobs 2–4).
    #[test]
    fn every_captured_end_state() {
        let oom = parse_scontrol_json(&testdata("oom-epilog-scontrol-json.json"), 3).unwrap();
        assert_eq!(oom.scheduler_state, Some(JobState::OutOfMemory));
        assert!(oom.scheduler_oom);
        assert_eq!(oom.exit_signal, Some(0), "125 is SIG_OOM, not a signal");
        assert_eq!(
            decide_end_2411(&oom, &evidence(9.0)).reason,
            Some(EndReason::SchedulerOom)
        );

        let cancel = parse_scontrol_json(&testdata("cancel-epilog-scontrol-json.json"), 4).unwrap();
        assert_eq!(cancel.scheduler_state, Some(JobState::Cancelled));
        assert_eq!(cancel.exit_signal, Some(15));
        assert_eq!(
            decide_end_2411(&cancel, &evidence(20.0)).reason,
            Some(EndReason::SchedulerSays {
                state: JobState::Cancelled
            })
        );

        let timeout =
            parse_scontrol_json(&testdata("timeout-epilog-scontrol-json.json"), 2).unwrap();
        assert_eq!(timeout.scheduler_state, Some(JobState::Timeout));
        assert_eq!(timeout.scheduler_reason.as_deref(), Some("TimeLimit"));
        assert_eq!(timeout.time_limit_s, Some(60));
        assert_eq!(
            decide_end_2411(&timeout, &evidence(61.0)).state,
            JobState::Timeout
        );
        // Another job's id finds nothing in a record of one job.
        assert!(parse_scontrol_json(&testdata("oom-epilog-scontrol-json.json"), 2).is_none());
    }
}
