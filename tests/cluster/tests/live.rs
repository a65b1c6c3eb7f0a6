//! The live view of a running job (issue 13 §2): `jobscope show` on a running job prints the
//! report so far, marked running, to its owner (from the owner-only snapshot the sampler writes,
//! sampler/src/snapshot.rs) and to root (from the spool); shown again later it has more samples;
//! another user gets a refusal and nothing else, and cannot read or list the snapshots; the
//! snapshot goes when the job ends, and `show` gives the archived report.
//!
//! Needs a running cluster (`slurm-conf/cluster.sh up`, as root); fails, never skips, without.

use anyhow::{ensure, Context, Result};
use jobscope_cluster_tests::jobscope::JOBSCOPE;
use jobscope_cluster_tests::{
    job_field, release_cmd, require_one_node, run_as, scancel, submit, wait_for, wait_job,
    ClusterGuard, CmdOut,
};
use serde_json::Value;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

/// Where the plugin writes live snapshots (paths.live_dir's default; the test cluster's
/// jobscope.toml does not set it).
const LIVE_DIR: &str = "/run/jobscope-live";

/// Two cores busy and 100 MiB held for up to 60 s (the test cancels it sooner).
const SCRIPT: &str = "#!/bin/sh\nexec python3 - <<'EOF'\nimport os, time\nx = bytearray(100 << 20)\nfor i in range(0, len(x), 4096):\n    x[i] = 1\nif os.fork() == 0:\n    pass\nt = time.time()\nwhile time.time() - t < 60:\n    pass\nEOF\n";

fn show_json(user: &str, id: u32) -> Result<(CmdOut, Option<Value>)> {
    let out = run_as(user, &format!("{JOBSCOPE} show {id} --json"))?;
    let v = out
        .success()
        .then(|| serde_json::from_str(&out.stdout).ok())
        .flatten();
    Ok((out, v))
}

fn samples(v: &Value) -> u64 {
    v["samples"].as_u64().unwrap_or(0)
}

#[test]
fn live_show_of_a_running_job_grows_and_only_its_owner_sees_it() -> Result<()> {
    let _cluster = ClusterGuard::acquire()?;
    let node = require_one_node()?;
    let id = submit(
        "alice",
        &["--job-name=live", "-c", "2", "--mem=600M"],
        SCRIPT,
    )?;
    let result = (|| -> Result<()> {
        // The owner's first look, once the sampler has written a snapshot with two samples.
        let first = wait_for(
            "alice's live view with 2 samples",
            Duration::from_secs(60),
            || {
                show_json("alice", id)
                    .ok()
                    .and_then(|(_, v)| v)
                    .filter(|v| samples(v) >= 2)
            },
        )?;
        ensure!(first["state"] == "RUNNING", "{first:#}");
        ensure!(first["job_id"] == id, "{first:#}");
        ensure!(
            first["partial"] == false,
            "all nodes reachable here: {first:#}"
        );
        // The second look, a sample or more later: more samples, more CPU time, longer.
        let n1 = samples(&first);
        let second = wait_for("a later sample", Duration::from_secs(30), || {
            show_json("alice", id)
                .ok()
                .and_then(|(_, v)| v)
                .filter(|v| samples(v) > n1)
        })?;
        let cpu = |v: &Value| v["cpu"]["usage_s"].as_f64().unwrap_or(0.0);
        ensure!(
            cpu(&second) > cpu(&first),
            "CPU time grows: {} then {}",
            cpu(&first),
            cpu(&second)
        );
        ensure!(
            second["elapsed_s"].as_f64() > first["elapsed_s"].as_f64(),
            "elapsed grows"
        );
        let peak = second["mem"]["peak_bytes"].as_f64().unwrap_or(0.0);
        ensure!(peak >= 100.0 * 1048576.0, "100 MiB held: peak {peak}");

        // The text says so.
        let text = run_as("alice", &format!("{JOBSCOPE} show {id}"))?;
        ensure!(text.success(), "{text:?}");
        ensure!(
            text.stdout
                .contains("State: RUNNING (still running: figures up to the last sample"),
            "{}",
            text.stdout
        );
        // `top` as a one-shot off a terminal: one line for the node, from its snapshot.
        let top = run_as("alice", &format!("{JOBSCOPE} top {id}"))?;
        ensure!(top.success(), "{top:?}");
        let line = top
            .stdout
            .lines()
            .find(|l| l.starts_with(&node))
            .with_context(|| format!("no line for {node}: {}", top.stdout))?;
        ensure!(
            line.ends_with("snapshot") && line.contains(" of 2"),
            "{line}"
        );
        ensure!(!top.stdout.contains('\x1b'), "no colour off a terminal");

        // Root reads the spool itself (with the release's own commands: under 24.11, inside its
        // root filesystem, where `scontrol` can ask the 24.11 controller).
        let root = release_cmd(JOBSCOPE, Path::new("/"))
            .args(["show", &id.to_string(), "--json"])
            .output()?;
        ensure!(root.status.success(), "{root:?}");
        let rv: Value = serde_json::from_slice(&root.stdout)?;
        ensure!(rv["state"] == "RUNNING" && samples(&rv) >= 2, "{rv:#}");

        // Bob: a refusal, nothing else; the snapshot can be neither read nor listed.
        for cmd in [
            format!("{JOBSCOPE} show {id}"),
            format!("{JOBSCOPE} top {id}"),
        ] {
            let bob = run_as("bob", &cmd)?;
            ensure!(bob.code == Some(1), "{cmd}: {bob:?}");
            ensure!(bob.stdout.is_empty(), "{cmd}: nothing on stdout: {bob:?}");
            ensure!(
                bob.stderr.trim()
                    == format!(
                        "jobscope: job {id} is running and is not yours: only its owner and root can see it"
                    ),
                "{cmd}: {bob:?}"
            );
        }
        let snap = format!("{LIVE_DIR}/{id}.{node}.json");
        let md = std::fs::metadata(&snap).with_context(|| snap.clone())?;
        let alice_uid = job_field(id, "UserId")?;
        ensure!(
            alice_uid.contains(&format!("({})", md.uid())) && md.mode() & 0o777 == 0o400,
            "{snap}: uid {} mode {:o}, job UserId={alice_uid}",
            md.uid(),
            md.mode() & 0o777
        );
        let cat = run_as("bob", &format!("cat {snap}"))?;
        ensure!(
            !cat.success() && cat.stderr.contains("Permission denied"),
            "{cat:?}"
        );
        let ls = run_as("bob", &format!("ls {LIVE_DIR}"))?;
        ensure!(
            !ls.success() && ls.stdout.is_empty(),
            "the live directory lists nothing to others: {ls:?}"
        );

        // The job ends: the snapshot goes, and `show` gives the archived report.
        scancel(id)?;
        wait_job(id, Duration::from_secs(60))?;
        ensure!(
            !Path::new(&snap).exists(),
            "{snap} removed at the job's end"
        );
        let (after, v) = show_json("alice", id)?;
        let v = v.with_context(|| format!("{after:?}"))?;
        ensure!(v["state"] == "CANCELLED", "{v:#}");
        Ok(())
    })();
    let _ = scancel(id);
    result
}
