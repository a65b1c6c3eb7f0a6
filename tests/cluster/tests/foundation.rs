//! The foundation on a real SLURM cluster: plugin → spool → epilog → archived JSON, with values
//! checked against the kernel's own counters, and the fault cases that must never harm a job.
//!
//! Needs `slurm-conf/cluster.sh up` (as root); `two_node_*` tests need `up --nodes 2`.

use anyhow::{ensure, Context, Result};
use jobscope_cluster_tests::jobscope::*;
use jobscope_cluster_tests::*;
use std::path::PathBuf;
use std::time::Duration;

const T: Duration = Duration::from_secs(180);
const MIB: f64 = 1024.0 * 1024.0;

fn completed(id: u32) -> Result<()> {
    let state = wait_job(id, T)?;
    ensure!(
        state == "COMPLETED",
        "job {id}: {state}, ExitCode={}",
        job_field(id, "ExitCode")?
    );
    ensure!(
        job_field(id, "ExitCode")? == "0:0",
        "job {id}: ExitCode {}",
        job_field(id, "ExitCode")?
    );
    Ok(())
}

/// 2 cores busy for ~20 s, then ~600 MiB touched. CPU time must be within 3 % of the job cgroup's
/// own final cpuacct.usage (read here while the job still runs, after its work is done), and the
/// memory peak within 10 % of what was touched.
#[test]
fn cpu_and_memory_match_the_kernel_counters() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let script = r#"#!/bin/bash
#SBATCH --job-name=burn-touch --ntasks=1 --cpus-per-task=2 --mem=2G --time=5
cat /proc/self/cgroup > proc-self-cgroup
python3 - <<'PY'
import multiprocessing as mp, time
def burn(t):
    end = time.time() + t
    while time.time() < end:
        pass
# fork: Python 3.14 (Debian unstable) starts processes through a forkserver by default, which
# cannot find a function defined in a script read from stdin
ps = [mp.get_context("fork").Process(target=burn, args=(20,)) for _ in range(2)]
[p.start() for p in ps]
[p.join() for p in ps]
a = bytearray(600 * 1024 * 1024)
for i in range(0, len(a), 4096):
    a[i] = 1
open("work-done", "w").write("x")
time.sleep(4)
PY
"#;
    let id = submit("alice", &[], script)?;
    let workdir = PathBuf::from(wait_for("WorkDir", T, || job_field(id, "WorkDir").ok())?);
    let node = wait_for("node", T, || {
        job_field(id, "NodeList")
            .ok()
            .filter(|n| !n.is_empty() && n != "(null)")
    })?;
    wait_for("the job's work-done marker", T, || {
        workdir.join("work-done").exists().then_some(())
    })?;
    // The job's own cgroup (v1 cpuacct, or v2 whatever SLURM names its directory), read while the
    // job still runs: the directory is gone when it ends.
    let kernel_s = kernel_job_cpu_s(&std::fs::read_to_string(workdir.join("proc-self-cgroup"))?)?;
    completed(id)?;
    let s = summary(id)?;
    let cpu_s = f64_at(&s, "/cpu/usage_s")?;
    // ~40 CPU-s on an idle machine; less when the host is busy, which the 3 % check does not mind.
    ensure!(
        kernel_s > 10.0,
        "the job should have burnt CPU, kernel says {kernel_s} s"
    );
    ensure!(
        (cpu_s - kernel_s).abs() / kernel_s <= 0.03,
        "summary CPU {cpu_s:.2} s vs the kernel's count for the job cgroup {kernel_s:.2} s: more than 3 % apart"
    );
    let peak = f64_at(&s, "/mem/peak_bytes")?;
    ensure!(
        (peak - 600.0 * MIB).abs() / (600.0 * MIB) <= 0.10,
        "memory peak {:.0} MiB is not within 10 % of the 600 MiB touched",
        peak / MIB
    );
    ensure!(str_at(&s, "/state")? == "COMPLETED");
    ensure!(f64_at(&s, "/alloc/cores")? == 2.0);
    ensure!((f64_at(&s, "/alloc/mem_per_node_bytes")? - 2048.0 * MIB).abs() < 1.0);
    // CPU efficiency = CPU time ÷ (allocated cores × elapsed).
    let eff = f64_at(&s, "/efficiency/cpu_pct")?;
    let expect = 100.0 * cpu_s / (2.0 * f64_at(&s, "/elapsed_s")?);
    ensure!(
        (eff - expect).abs() < 0.01 && eff <= 100.5,
        "CPU efficiency {eff} vs {expect}"
    );
    ensure!(
        s.pointer("/io/read_bytes").is_some(),
        "I/O bytes are reported"
    );
    ensure!(f64_at(&s, "/samples")? >= 4.0);
    // Archive file: 0640 root:<admin group = root on the test cluster>.
    let file = archive_file(id)?;
    let (mode, uid_owner, _gid) = mode_of(&file)?;
    ensure!(
        mode == 0o640 && uid_owner == 0,
        "{}: mode {mode:o} owner {uid_owner}",
        file.display()
    );
    // Nothing from jobscope in the job's output.
    ensure!(
        job_output(id)?.is_empty(),
        "job output: {:?}",
        job_output(id)?
    );
    // The spool is gone once archived.
    ensure!(
        !PathBuf::from(format!("/var/spool/jobscope/{id}.{node}")).exists(),
        "spool of job {id} not removed after archiving"
    );
    Ok(())
}

/// A 2-second job still gets a summary with at least 2 samples.
#[test]
fn short_job_gets_samples() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let id = submit("alice", &["--job-name=short", "--wrap", "sleep 2"], "")?;
    completed(id)?;
    let s = summary(id)?;
    ensure!(f64_at(&s, "/samples")? >= 2.0, "samples: {}", s["samples"]);
    ensure!(f64_at(&s, "/elapsed_s")? >= 1.5);
    Ok(())
}

/// A job killed at its time limit says so.
#[test]
fn timeout_job_states_why_it_ended() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let id = submit(
        "alice",
        &["--job-name=limit", "--time=1", "--wrap", "sleep 600"],
        "",
    )?;
    let state = wait_job(id, Duration::from_secs(240))?;
    ensure!(state == "TIMEOUT", "SLURM says {state}");
    let s = summary(id)?;
    ensure!(
        str_at(&s, "/state")? == "TIMEOUT",
        "summary state {}",
        s["state"]
    );
    // The typed end reason (model/src/job.rs EndReason): SLURM's own TIMEOUT, or the run to the
    // limit concluded while SLURM still said COMPLETING.
    let kind = str_at(&s, "/end_reason/kind")?;
    ensure!(
        kind == "time_limit"
            || (kind == "scheduler_says" && str_at(&s, "/end_reason/state")? == "TIMEOUT"),
        "reason {}",
        s["end_reason"]
    );
    ensure!(report_text(id)?.contains("TIMEOUT"));
    Ok(())
}

/// A job killed for exceeding --mem says so, with the OOM evidence.
#[test]
fn oom_job_states_why_it_ended() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let script = "#!/bin/bash\n#SBATCH --job-name=oom --mem=150M\npython3 -c 'a = bytearray(600 * 1024 * 1024)\nfor i in range(0, len(a), 4096): a[i] = 1'\n";
    let id = submit("alice", &[], script)?;
    let state = wait_job(id, T)?;
    ensure!(
        state == "OUT_OF_MEMORY" || state == "FAILED",
        "SLURM says {state}"
    );
    let s = summary(id)?;
    ensure!(
        str_at(&s, "/state")? == "OUT_OF_MEMORY",
        "summary state {} ({})",
        s["state"],
        s["end_reason"]
    );
    ensure!(f64_at(&s, "/mem/oom_kill_events")? >= 1.0);
    ensure!(
        matches!(
            str_at(&s, "/end_reason/kind")?,
            "oom_kills" | "scheduler_oom"
        ),
        "reason {}",
        s["end_reason"]
    );
    Ok(())
}

/// A job run with `args` on the plugstack line; `fault_plugin`: the fault-injection build
/// ([`set_fault_plugin_args`]) in place of the packaged plugin.
fn fault_case_with(args: &str, fault_plugin: bool) -> Result<u32> {
    let _guard = if fault_plugin {
        set_fault_plugin_args(args)?
    } else {
        set_plugin_args(args)?
    };
    let id = submit(
        "alice",
        &[
            "--job-name=fault",
            "--wrap",
            "echo ok; sleep 2; srun -n1 echo step",
        ],
        "",
    )?;
    completed(id)?;
    let out = job_output(id)?;
    ensure!(
        out == "ok\nstep\n",
        "job output must hold only the job's own text, got {out:?}"
    );
    ensure!(!out.to_lowercase().contains("jobscope") && !out.contains("panic"));
    Ok(id)
}

fn fault_case(args: &str) -> Result<u32> {
    fault_case_with(args, false)
}

/// Faults inside jobscope never fail, delay or pollute a job, and a report still comes out.
#[test]
fn unwritable_spool_directory_harms_nothing() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let id = fault_case("spool_dir=/dev/null/jobscope")?;
    let s = summary(id)?;
    ensure!(
        s["partial"] == true,
        "a report without samples is marked partial"
    );
    Ok(())
}

/// The spool's free-space floor stops spooling: the job runs untouched, and its report says it has
/// no data, why (the floor, in the data notes, not only in slurmd's log), and claims nothing.
#[test]
fn below_the_free_space_floor_the_report_says_why_it_has_no_data() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    // A floor above any disk's free space.
    let _cfg = ConfigSectionGuard::set_section(
        "sampler",
        "cadence_s = 5\nmin_free_bytes = 1000000000000000000\n",
    )?;
    let id = submit(
        "alice",
        &["--job-name=floor", "-c", "2"],
        "#!/bin/bash\necho start\nsleep 3\necho done\n",
    )?;
    completed(id)?;
    ensure!(job_output(id)? == "start\ndone\n", "job {id}: output");
    let s = summary(id)?;
    ensure!(
        f64_at(&s, "/samples")? == 0.0
            && s["analysis"]["classification"]["class"] == "insufficient_data",
        "job {id}: samples {} class {}",
        s["samples"],
        s["analysis"]["classification"]["class"]
    );
    let text = report_text(id)?;
    ensure!(
        text.contains("No samples")
            && text.contains("under sampler.min_free_bytes")
            && !text.contains("#SBATCH")
            && !text.contains("used its request well"),
        "job {id}:\n{text}"
    );
    Ok(())
}

#[test]
fn missing_job_cgroup_harms_nothing() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let id = fault_case("cgroup_root=/nonexistent/cgroup")?;
    let s = summary(id)?;
    ensure!(s["partial"] == true);
    Ok(())
}

#[test]
fn panics_in_sampler_init_and_exit_harm_nothing() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    // The packaged plugin has no fault injection: the injected panics need the other build.
    let id = fault_case_with("inject=sampler_panic,init_panic,exit_panic", true)?;
    summary(id)?;
    let id = fault_case_with("inject=sampler_panic", true)?;
    let s = summary(id)?;
    // The sampler died after its first sample; the steps' final readings still give the totals.
    ensure!(f64_at(&s, "/samples")? >= 1.0);
    // The packaged plugin logs `inject=` and ignores it: the job and its report are as usual.
    let id = fault_case("inject=sampler_panic,init_panic,exit_panic")?;
    summary(id)?;
    Ok(())
}

/// The job's owner and root see the report; another user does not.
#[test]
fn only_owner_and_root_can_show_a_report() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let id = submit("alice", &["--job-name=private", "--wrap", "true"], "")?;
    completed(id)?;
    summary(id)?;
    let mine = run_as("alice", &format!("{JOBSCOPE} show {id}"))?;
    ensure!(
        mine.success() && mine.stdout.contains(&format!("job {id}")),
        "alice: {:?} {:?}",
        mine.stdout,
        mine.stderr
    );
    let json = run_as("alice", &format!("{JOBSCOPE} show {id} --json"))?;
    ensure!(json.success() && json.stdout.contains("\"schema_version\""));
    let theirs = run_as("bob", &format!("{JOBSCOPE} show {id}"))?;
    ensure!(
        !theirs.success(),
        "bob could read alice's report: {:?}",
        theirs.stdout
    );
    ensure!(
        !theirs.stdout.contains("private") && theirs.stderr.contains("owner"),
        "bob: {:?}",
        theirs.stderr
    );
    // bob cannot read the archive files directly either
    let file = archive_file(id)?;
    let cat = run_as("bob", &format!("cat {}", file.display()))?;
    ensure!(!cat.success(), "bob read {}", file.display());
    Ok(())
}

/// A 2-node job runs, and each node's summary is in the one job summary.
#[test]
fn two_node_each_node_writes_its_summary() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let nodes = require_two_nodes()?;
    let script = "#!/bin/bash\n#SBATCH --job-name=two --nodes=2 --ntasks=2\nsrun python3 -c 'import time\nend = time.time() + 4\nwhile time.time() < end: pass'\n";
    let id = submit("alice", &[], script)?;
    completed(id)?;
    let s = summary(id)?;
    let got: Vec<&str> = s["nodes"]
        .as_array()
        .context("nodes")?
        .iter()
        .filter_map(|n| n["node"].as_str())
        .collect();
    ensure!(
        got.len() == 2 && nodes.iter().all(|n| got.contains(&n.as_str())),
        "nodes in summary: {got:?}, cluster: {nodes:?}"
    );
    for n in s["nodes"].as_array().unwrap() {
        ensure!(
            n["quality"]["samples"].as_f64().unwrap_or(0.0) >= 2.0,
            "node {} samples {}",
            n["node"],
            n["quality"]["samples"]
        );
        // Each node's task burns for 4 s, but the two test nodes are one 2-core host, and each
        // slurmd gives the job's task the first core of "its" two (both slurmd logs say "job
        // physical CPUs are '0'"): the tasks share core 0 and get about 2 s each, so the bar is
        // well below that (it was 2.0, which they met or missed by a few hundredths).
        ensure!(
            n["cpu"]["usage_s"].as_f64().unwrap_or(0.0) > 1.0,
            "node {} cpu {}",
            n["node"],
            n["cpu"]["usage_s"]
        );
    }
    ensure!(s["partial"] == false, "reasons: {}", s["partial_reasons"]);
    Ok(())
}
