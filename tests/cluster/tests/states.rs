//! Every way a job ends is reported as SLURM ends it: each end state a user can meet on the test
//! cluster, produced for real (scancel, a failing program, a failed srun step, a node marked down,
//! preemption by a higher-tier partition, a requeue, a cancel during the prolog), and the archived
//! report's state compared with SLURM's own final state (`scontrol show job`), with the evidence.
//! TIMEOUT and OUT_OF_MEMORY are in foundation.rs.
//!
//! Needs `slurm-conf/cluster.sh up` (1 node): the test cluster has the partitions `debug` and
//! `high` (PreemptType=preempt/partition_prio, PreemptMode=CANCEL) and a Prolog that sleeps when
//! /run/jobscope-test-prolog-sleep exists (slurm-conf/test-cluster/).

use anyhow::{ensure, Context, Result};
use jobscope_cluster_tests::jobscope::*;
use jobscope_cluster_tests::*;
use serde_json::Value;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(180);

fn wait_running(id: u32) -> Result<String> {
    wait_for(&format!("job {id} running"), T, || {
        let info = job_info(id).ok()?;
        (info.get("JobState")? == "RUNNING").then(|| info.get("NodeList").cloned())?
    })
}

/// The archived state and end reason, with SLURM's final state alongside for messages.
fn archived(id: u32) -> Result<(String, Value, Value)> {
    let s = summary(id)?;
    let state = str_at(&s, "/state")?.to_string();
    let reason = s["end_reason"].clone();
    Ok((state, reason, s))
}

#[test]
fn a_nonzero_exit_is_failed() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let id = submit(
        "alice",
        &["--job-name=fails"],
        "#!/bin/bash\necho x\nexit 3\n",
    )?;
    let slurm = wait_job(id, T)?;
    let (state, reason, _) = archived(id)?;
    ensure!(slurm == "FAILED", "job {id}: SLURM says {slurm}");
    ensure!(
        state == slurm && reason["kind"] == "exit_code" && reason["code"] == 3,
        "job {id}: archived {state} {reason} (SLURM {slurm})"
    );
    let text = report_text(id)?;
    ensure!(text.contains("State: FAILED"), "job {id}:\n{text}");
    Ok(())
}

/// The batch script ignores its failed srun step and exits 0: SLURM calls the job COMPLETED (its
/// derived exit code is the step's). The report must not hide the failure: FAILED, naming the step.
#[test]
fn a_failed_srun_step_is_not_hidden() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let id = submit(
        "alice",
        &["--job-name=step-fails"],
        "#!/bin/bash\nsrun bash -c 'exit 4'\necho after\nexit 0\n",
    )?;
    let slurm = wait_job(id, T)?;
    let (state, reason, s) = archived(id)?;
    ensure!(
        state == "FAILED"
            && reason["kind"] == "step_failed"
            && reason["step"] == "0"
            && reason["code"] == 4,
        "job {id}: archived {state} {reason} (SLURM {slurm}, DerivedExitCode {})",
        job_field(id, "DerivedExitCode").unwrap_or_default()
    );
    let steps = s["nodes"][0]["steps"].as_array().context("steps")?;
    ensure!(
        steps
            .iter()
            .any(|st| st["step"] == "0" && st["exit_status"].as_i64().is_some_and(|e| e != 0)),
        "job {id}: steps {steps:?}"
    );
    let text = report_text(id)?;
    ensure!(
        text.contains("State: FAILED") && text.contains("step 0"),
        "job {id}:\n{text}"
    );
    Ok(())
}

#[test]
fn a_job_cancelled_while_running_is_cancelled_with_its_figures() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let id = submit("alice", &["--job-name=cancel-me"], &burn_then_sleep(4, 120))?;
    wait_running(id)?;
    std::thread::sleep(Duration::from_secs(7));
    scancel(id)?;
    let slurm = wait_job(id, T)?;
    let (state, reason, s) = archived(id)?;
    ensure!(slurm == "CANCELLED", "job {id}: SLURM says {slurm}");
    ensure!(
        state == "CANCELLED",
        "job {id}: archived {state} {reason} (SLURM {slurm})"
    );
    // Its figures up to the cancel: about 4 s of CPU, about 7 s elapsed.
    let cpu = f64_at(&s, "/cpu/usage_s")?;
    let elapsed = f64_at(&s, "/elapsed_s")?;
    ensure!(
        (3.0..6.0).contains(&cpu) && (6.0..20.0).contains(&elapsed),
        "job {id}: CPU {cpu} s, elapsed {elapsed} s"
    );
    ensure!(
        report_text(id)?.contains("State: CANCELLED"),
        "job {id}: text"
    );
    Ok(())
}

/// `kill -9` of the job's batch slurmstepd: SLURM keeps the job RUNNING until it is cancelled, and
/// then shows it COMPLETING with exit status 0:0 during the Epilog, the same as a success. jobscope
/// saw the batch step start and never end: the record is not COMPLETED, it names the step, and it
/// is partial (issue 19 §2: the state is never better than the evidence).
#[test]
fn a_batch_step_whose_slurmstepd_was_killed_is_not_completed() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    // SLURM may drain the node whose slurmstepd it lost: the tests after this one need it back.
    struct ResumeNodes;
    impl Drop for ResumeNodes {
        fn drop(&mut self) {
            let _ = resume_nodes();
        }
    }
    let _resume = ResumeNodes;
    let id = submit(
        "alice",
        &["--job-name=stepd-killed"],
        &burn_then_sleep(2, 300),
    )?;
    wait_running(id)?;
    std::thread::sleep(Duration::from_secs(6));
    let pgrep = std::process::Command::new("pgrep")
        .args(["-f", &format!(r"^slurmstepd: \[{id}\.batch\]")])
        .output()?;
    let pids: Vec<i32> = String::from_utf8_lossy(&pgrep.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    ensure!(pids.len() == 1, "job {id}: batch slurmstepd pids {pids:?}");
    // SAFETY: kill(2) on a pid just found; SIGKILL as an operator's `kill -9` sends it.
    ensure!(
        unsafe { libc::kill(pids[0], libc::SIGKILL) } == 0,
        "kill -9 {}",
        pids[0]
    );
    std::thread::sleep(Duration::from_secs(3));
    scancel(id)?;
    let slurm = wait_job(id, T)?;
    let (state, reason, s) = archived(id)?;
    ensure!(
        state != "COMPLETED",
        "job {id}: archived COMPLETED {reason} (SLURM {slurm})"
    );
    ensure!(
        s["partial"] == true
            && s["partial_reasons"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r
                    .as_str()
                    .is_some_and(|r| r.contains("step batch was not seen to end")))),
        "job {id}: partial {} {}",
        s["partial"],
        s["partial_reasons"]
    );
    // Either SLURM's final word (CANCELLED) reached the Epilog, or the state is unknown and the
    // reason names the step.
    ensure!(
        (state == "CANCELLED")
            || (state == "UNKNOWN"
                && reason["kind"] == "step_end_not_seen"
                && reason["steps"] == serde_json::json!(["batch"])),
        "job {id}: archived {state} {reason} (SLURM {slurm})"
    );
    let text = report_text(id)?;
    ensure!(!text.contains("State: COMPLETED"), "job {id}:\n{text}");
    Ok(())
}

/// Cancelled while its Prolog still runs: the job never started. If SLURM runs the Epilog for it,
/// the report says CANCELLED and, having no data, claims nothing.
#[test]
fn a_job_cancelled_in_its_prolog_claims_nothing() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let flag = std::path::Path::new("/run/jobscope-test-prolog-sleep");
    std::fs::write(flag, "10\n")?;
    struct Remove<'a>(&'a std::path::Path);
    impl Drop for Remove<'_> {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(self.0);
        }
    }
    let _rm = Remove(flag);
    let id = submit(
        "alice",
        &["--job-name=in-prolog"],
        "#!/bin/bash\necho ran\n",
    )?;
    // The allocation is made and the Prolog is sleeping.
    wait_for(&format!("job {id} allocated"), T, || {
        let info = job_info(id).ok()?;
        matches!(info.get("JobState")?.as_str(), "RUNNING" | "CONFIGURING").then_some(())
    })?;
    std::thread::sleep(Duration::from_secs(2));
    scancel(id)?;
    let slurm = wait_job(id, T)?;
    ensure!(slurm == "CANCELLED", "job {id}: SLURM says {slurm}");
    let out = job_output(id).unwrap_or_default();
    ensure!(!out.contains("ran"), "job {id} ran: {out:?}");
    // Wait for a report a little: whether SLURM runs the Epilog for a job that never started is
    // SLURM's choice; when it does, the report must be right.
    let t0 = Instant::now();
    while archive_files(id).is_empty() && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(300));
    }
    if archive_files(id).is_empty() {
        eprintln!("job {id}: no Epilog ran for a job cancelled in its prolog; nothing archived");
        return Ok(());
    }
    let (state, reason, s) = archived(id)?;
    ensure!(
        state == "CANCELLED",
        "job {id}: archived {state} {reason} (SLURM {slurm})"
    );
    let class = s["analysis"]["classification"]["class"]
        .as_str()
        .unwrap_or("");
    ensure!(
        s["samples"].as_u64().unwrap_or(0) == 0 && class == "insufficient_data",
        "job {id}: claims something without data: class {class}, samples {}",
        s["samples"]
    );
    let text = report_text(id)?;
    ensure!(
        !text.contains("used its request well") && !text.contains("#SBATCH"),
        "job {id}:\n{text}"
    );
    Ok(())
}

/// The node is marked down while the job runs: SLURM ends the job NODE_FAIL.
#[test]
fn a_node_failure_is_node_fail() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let node = require_one_node()?;
    let id = submit(
        "alice",
        &["--job-name=node-fails", "--no-requeue"],
        &burn_then_sleep(2, 120),
    )?;
    wait_running(id)?;
    std::thread::sleep(Duration::from_secs(4));
    slurm_cmd(
        "scontrol",
        &[
            "update",
            &format!("nodename={node}"),
            "state=down",
            "reason=jobscope-states-test",
        ],
    )?;
    let slurm = wait_job(id, T);
    // Whatever happened, the node must come back for the next tests.
    std::thread::sleep(Duration::from_secs(2));
    resume_nodes()?;
    wait_for("node back", T, || {
        let s = slurm_cmd("sinfo", &["-h", "-N", "-o", "%T"]).ok()?;
        s.lines().all(|l| l.trim() == "idle").then_some(())
    })?;
    let slurm = slurm?;
    ensure!(slurm == "NODE_FAIL", "job {id}: SLURM says {slurm}");
    let t0 = Instant::now();
    while archive_files(id).is_empty() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(300));
    }
    let (state, reason, _) = archived(id)?;
    ensure!(
        state == "NODE_FAIL",
        "job {id}: archived {state} {reason} (SLURM {slurm})"
    );
    Ok(())
}

/// A job in partition `debug` holding every core is preempted by a job in `high`.
#[test]
fn a_preempted_job_is_preempted() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let node = require_one_node()?;
    let cpus = slurm_cmd("sinfo", &["-h", "-N", "-n", &node, "-o", "%c"])?
        .lines()
        .next()
        .unwrap_or("1")
        .trim()
        .to_string();
    let low = submit(
        "alice",
        &["--job-name=low", "-p", "debug", "-c", &cpus, "--mem=200M"],
        &burn_then_sleep(2, 120),
    )?;
    wait_running(low)?;
    std::thread::sleep(Duration::from_secs(4));
    let high = submit(
        "bob",
        &["--job-name=high", "-p", "high", "-c", "1", "--mem=100M"],
        "#!/bin/bash\nsleep 2\n",
    )?;
    let slurm = wait_job(low, T)?;
    let high_state = wait_job(high, T)?;
    ensure!(
        slurm == "PREEMPTED" && high_state == "COMPLETED",
        "low job {low}: SLURM says {slurm}; high job {high}: {high_state}"
    );
    let (state, reason, _) = archived(low)?;
    ensure!(
        state == "PREEMPTED",
        "job {low}: archived {state} {reason} (SLURM {slurm})"
    );
    Ok(())
}

/// A requeued job runs twice under the same id: both runs keep their report.
#[test]
fn a_requeued_job_keeps_both_reports() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let id = submit(
        "alice",
        &["--job-name=requeued", "--requeue"],
        &burn_then_sleep(2, 12),
    )?;
    wait_running(id)?;
    std::thread::sleep(Duration::from_secs(5));
    let requeued_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as u64;
    slurm_cmd("scontrol", &["requeue", &id.to_string()])?;
    // The first run ends (and is archived) and the job is pending again, held back by SLURM for
    // two minutes (Reason=BeginTime). Nothing here is about that wait, and the cluster is held by
    // this test meanwhile: root lets the second run start now, and it completes.
    wait_for(
        "the requeued job to be pending again",
        Duration::from_secs(120),
        || {
            let info = job_info(id).ok()?;
            (info.get("JobState").map(String::as_str) == Some("PENDING")).then_some(())
        },
    )?;
    slurm_cmd(
        "scontrol",
        &["update", &format!("JobId={id}"), "StartTime=now"],
    )?;
    let slurm = wait_job(id, Duration::from_secs(400))?;
    ensure!(slurm == "COMPLETED", "job {id}: SLURM says {slurm}");
    let t0 = Instant::now();
    while archive_files(id).len() < 2 && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(300));
    }
    let files = archive_files(id);
    ensure!(files.len() == 2, "job {id}: archived runs {files:?}");
    let mut runs = Vec::new();
    for f in &files {
        let v: Value = serde_json::from_slice(&std::fs::read(f)?)?;
        runs.push((
            v["start_unix_ms"].as_u64().unwrap_or(0),
            v["end_unix_ms"].as_u64().unwrap_or(0),
            v["state"].as_str().unwrap_or("").to_string(),
        ));
    }
    runs.sort();
    // Each run is its own: the first began before the requeue and ended before the second
    // began (the controller's answer to the first run's Epilog already describes the second run:
    // its start must not become the first run's, nor their shared key).
    let [(start1, end1, state1), (start2, end2, state2)] = &runs[..] else {
        unreachable!("two files checked above")
    };
    ensure!(
        state1 == "REQUEUED" && state2 == "COMPLETED",
        "job {id}: runs {runs:?}"
    );
    ensure!(
        start1 < end1 && *start1 < requeued_at_ms && end1 <= start2 && start2 < end2,
        "job {id}: runs {runs:?} (requeued at {requeued_at_ms})"
    );
    Ok(())
}
