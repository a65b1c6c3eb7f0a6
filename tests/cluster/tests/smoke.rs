//! Smoke tests: the test cluster runs ordinary jobs as the test users, and nothing (plugin,
//! epilog, daemon environment) adds text to a job's output.
//!
//! Needs a running cluster (`slurm-conf/cluster.sh up`, as root); fails, never skips, without.
//! `two_node_*` tests need `slurm-conf/cluster.sh up --nodes 2`.

use anyhow::{ensure, Result};
use jobscope_cluster_tests::{
    job_field, job_output, plugstack_line, require_two_nodes, run_as, set_plugin_args, submit,
    wait_job, ClusterGuard, DEFAULT_PLUGSTACK_LINE,
};
use std::time::Duration;

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn smoke_wrap_echo_hi_as_alice() -> Result<()> {
    let _cluster = ClusterGuard::acquire()?;
    let id = submit("alice", &["--job-name=smoke", "--wrap", "echo hi"], "")?;
    let state = wait_job(id, JOB_TIMEOUT)?;
    let out = job_output(id)?;
    ensure!(
        state == "COMPLETED",
        "job {id}: JobState={state} ExitCode={}; output: {out:?}",
        job_field(id, "ExitCode")?
    );
    ensure!(
        job_field(id, "ExitCode")? == "0:0",
        "job {id}: ExitCode={}",
        job_field(id, "ExitCode")?
    );
    ensure!(
        out == "hi\n",
        "output file of job {id} must contain exactly \"hi\\n\" (nothing from the plugin, epilog or daemon env), got {out:?}"
    );
    Ok(())
}

#[test]
fn smoke_script_runs_as_bob() -> Result<()> {
    let _cluster = ClusterGuard::acquire()?;
    let id = submit("bob", &["--job-name=smoke-script"], "#!/bin/sh\nid -un\n")?;
    let state = wait_job(id, JOB_TIMEOUT)?;
    let out = job_output(id)?;
    ensure!(
        state == "COMPLETED",
        "job {id}: JobState={state}; output: {out:?}"
    );
    ensure!(out == "bob\n", "job {id} output: {out:?}");
    ensure!(
        job_field(id, "UserId")?.starts_with("bob("),
        "job {id} UserId={}",
        job_field(id, "UserId")?
    );
    Ok(())
}

/// The harness itself: run_as drops to the user with a clean environment, and the plugstack
/// guard puts the line back.
#[test]
fn smoke_harness_run_as_and_plugstack_guard() -> Result<()> {
    let _cluster = ClusterGuard::acquire()?;
    let out = run_as("alice", "id -un; env | sort")?;
    ensure!(out.success(), "run_as failed: {out:?}");
    let mut lines = out.stdout.lines();
    ensure!(lines.next() == Some("alice"), "run_as: {out:?}");
    let env: Vec<&str> = lines
        .filter(|l| !l.starts_with("PWD=") && !l.starts_with("SHLVL=") && !l.starts_with("_="))
        .collect();
    ensure!(
        env == ["HOME=/home/alice", "PATH=/usr/bin:/bin"],
        "run_as environment: {env:?}"
    );

    let before = plugstack_line();
    {
        let _args = set_plugin_args("spool_dir=/tmp/x cadence=1")?;
        ensure!(
            plugstack_line().as_deref()
                == Some(&*format!(
                    "{DEFAULT_PLUGSTACK_LINE} spool_dir=/tmp/x cadence=1"
                )),
            "plugstack line not set: {:?}",
            plugstack_line()
        );
    }
    ensure!(
        plugstack_line() == before,
        "plugstack line not restored: {:?} != {before:?}",
        plugstack_line()
    );
    Ok(())
}

#[test]
fn two_node_smoke_srun_on_both_nodes() -> Result<()> {
    let _cluster = ClusterGuard::acquire()?;
    let mut nodes = require_two_nodes()?;
    let id = submit(
        "alice",
        &[
            "-N2",
            "--ntasks-per-node=1",
            "--job-name=smoke2",
            "--wrap",
            "srun sh -c 'echo $SLURMD_NODENAME'",
        ],
        "",
    )?;
    let state = wait_job(id, JOB_TIMEOUT)?;
    let out = job_output(id)?;
    ensure!(
        state == "COMPLETED",
        "job {id}: JobState={state}; output: {out:?}"
    );
    let mut seen: Vec<String> = out.lines().map(str::to_string).collect();
    seen.sort();
    nodes.sort();
    ensure!(
        seen == nodes,
        "job {id} should print each node name once ({nodes:?}), got {out:?}"
    );
    Ok(())
}
