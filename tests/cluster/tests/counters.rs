//! Every counter the final reading provides is counted to the job's very end (issue 9 §2): each
//! test does its work right before the job ends, after the sampler's last sample, and compares
//! the report with the kernel's own count or with the known workload.
//!
//! The sampler (cadence 5 s, early samples at 1 and 3 s on the test cluster, `slurm-conf/jobscope.toml`)
//! sleeps through the last seconds; what it cannot see must come from the batch step's final
//! readings (`plugin/src/steps.rs`): the job cgroup at `exit` (CPU, memory peak), at the last
//! task's exit (OOM kills, counted in the step's sub-cgroups) and slurmstepd's reaped I/O.
//!
//! I/O on cgroup v1 is `read_bytes`/`write_bytes` of `/proc/<pid>/io` (bytes to and from storage),
//! so the workloads use `dd` with `iflag=direct`/`oflag=direct`: each 1 MiB goes to the disk, not
//! the page cache, and counts 1 MiB.
//!
//! Needs `slurm-conf/cluster.sh up` (as root).

use anyhow::{anyhow, ensure, Context, Result};
use jobscope_cluster_tests::jobscope::*;
use jobscope_cluster_tests::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(300);
const MIB: f64 = 1024.0 * 1024.0;
/// Processes in the I/O bursts, each moving 1 MiB and living a few milliseconds.
const BURST: u32 = 2000;

/// The value of `key: N` in a `/proc/<pid>/io` dump the script printed after `marker`.
fn proc_io_field(output: &str, marker: &str, key: &str) -> Result<f64> {
    let dump = output
        .split_once(marker)
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow!("no {marker} in the job's output:\n{output}"))?;
    dump.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .ok_or_else(|| anyhow!("no {key} after {marker}:\n{output}"))?
        .trim()
        .parse()
        .with_context(|| format!("{key} after {marker}"))
}

fn within(what: &str, got: f64, want: f64, tolerance: f64) -> Result<()> {
    ensure!(
        want > 0.0 && (got - want).abs() / want <= tolerance,
        "{what}: report {got:.0} vs {want:.0} ({:+.1} %, allowed ±{:.0} %)",
        100.0 * (got - want) / want.max(1.0),
        100.0 * tolerance
    );
    Ok(())
}

/// A job that idles past the sampler's early samples, then runs `burst` as its last work and
/// prints its shell's `/proc/$$/io` (the shell reaped every process of the burst, so its counters
/// hold theirs). Returns the job id, once it COMPLETED 0:0.
fn burst_job(name: &str, burst: &str) -> Result<u32> {
    let script = format!(
        r#"#!/bin/bash
#SBATCH --job-name={name} --ntasks=1 --mem=1G --time=10
set -e
head -c 1048576 /dev/urandom > in1m
sync
sleep 6
for i in $(seq {BURST}); do
  {burst}
done
echo SHELL_IO_BEGIN
cat /proc/$$/io
"#
    );
    let id = submit("alice", &[], &script)?;
    let state = wait_job(id, T)?;
    ensure!(
        state == "COMPLETED" && job_field(id, "ExitCode")? == "0:0",
        "job {id}: {state} {}; output:\n{}",
        job_field(id, "ExitCode")?,
        job_output(id).unwrap_or_default()
    );
    Ok(id)
}

/// 2000 processes each read 1 MiB from storage in the job's last seconds and are gone before
/// the next sample. Before slurmstepd's reaped counters, the tail since the last sample was lost
/// (issue 9 §2: 28 % low).
#[test]
fn late_reads_by_short_processes_are_counted() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let id = burst_job(
        "late-reads",
        "dd if=in1m of=/dev/null iflag=direct bs=1M count=1 status=none",
    )?;
    let shell = proc_io_field(&job_output(id)?, "SHELL_IO_BEGIN", "read_bytes")?;
    let known = f64::from(BURST) * MIB;
    ensure!(
        shell >= known,
        "the shell's read_bytes {shell} should hold the {BURST} MiB its children read"
    );
    let got = f64_at(&summary(id)?, "/io/read_bytes")?;
    within("read bytes vs the known workload", got, known, 0.02)?;
    within("read bytes vs the shell's /proc/$$/io", got, shell, 0.02)
}

/// The same with writes: 2000 processes each write 1 MiB to storage at the job's end.
#[test]
fn late_writes_by_short_processes_are_counted() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let id = burst_job(
        "late-writes",
        "dd if=/dev/zero of=out1m oflag=direct conv=notrunc bs=1M count=1 status=none",
    )?;
    let shell = proc_io_field(&job_output(id)?, "SHELL_IO_BEGIN", "write_bytes")?;
    let known = f64::from(BURST) * MIB;
    ensure!(
        shell >= known,
        "the shell's write_bytes {shell} should hold the {BURST} MiB its children wrote"
    );
    let got = f64_at(&summary(id)?, "/io/write_bytes")?;
    within("write bytes vs the known workload", got, known, 0.02)?;
    within("write bytes vs the shell's /proc/$$/io", got, shell, 0.02)
}

/// 2 cores burn for 4 s after the sampler's last sample and the job ends right after; the script's
/// last command prints the job cgroup's own `cpuacct.usage`.
#[test]
fn late_cpu_is_counted() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let script = r#"#!/bin/bash
#SBATCH --job-name=late-cpu --ntasks=1 --cpus-per-task=2 --mem=1G --time=5
sleep 6
python3 - <<'PY'
import multiprocessing as mp, time
def burn(t):
    end = time.time() + t
    while time.time() < end:
        pass
ps = [mp.Process(target=burn, args=(4,)) for _ in range(2)]
[p.start() for p in ps]
[p.join() for p in ps]
PY
rel=$(awk -F: '$2 ~ /(^|,)cpuacct(,|$)/ {print $3}' /proc/self/cgroup)
echo "KERNEL_CPU_NS=$(cat /sys/fs/cgroup/cpuacct${rel%%/step_*}/cpuacct.usage)"
"#;
    let id = submit("alice", &[], script)?;
    let state = wait_job(id, T)?;
    ensure!(state == "COMPLETED", "job {id}: {state}");
    let out = job_output(id)?;
    let kernel_ns: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("KERNEL_CPU_NS="))
        .ok_or_else(|| anyhow!("no KERNEL_CPU_NS in the output:\n{out}"))?
        .trim()
        .parse()
        .context("KERNEL_CPU_NS")?;
    let kernel_s = kernel_ns / 1e9;
    ensure!(
        kernel_s > 4.0,
        "the job should have burnt ~8 CPU-s, the kernel says {kernel_s} s"
    );
    let got = f64_at(&summary(id)?, "/cpu/usage_s")?;
    within(
        "CPU seconds vs the job cgroup's cpuacct.usage",
        got,
        kernel_s,
        0.03,
    )
}

/// 600 MiB touched in the job's last fraction of a second, then the job ends.
#[test]
fn late_memory_peak_is_counted() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let script = r#"#!/bin/bash
#SBATCH --job-name=late-peak --ntasks=1 --mem=2G --time=5
sleep 6
python3 -c '
a = bytearray(600 * 1024 * 1024)
for i in range(0, len(a), 4096):
    a[i] = 1
'
"#;
    let id = submit("alice", &[], script)?;
    let state = wait_job(id, T)?;
    ensure!(state == "COMPLETED", "job {id}: {state}");
    let peak = f64_at(&summary(id)?, "/mem/peak_bytes")?;
    within(
        "memory peak vs the 600 MiB touched",
        peak,
        600.0 * MIB,
        0.10,
    )
}

/// An OOM kill right before the end, after a quiet start: the sampler never saw it.
#[test]
fn late_oom_kill_is_counted() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let script = r#"#!/bin/bash
#SBATCH --job-name=late-oom --ntasks=1 --mem=150M --time=5
sleep 6
python3 -c '
a = bytearray(600 * 1024 * 1024)
for i in range(0, len(a), 4096):
    a[i] = 1
' || true
"#;
    let id = submit("alice", &[], script)?;
    let state = wait_job(id, T)?;
    let s = summary(id)?;
    let kills = f64_at(&s, "/mem/oom_kill_events")?;
    ensure!(
        kills >= 1.0,
        "job {id} ({state}): {kills} OOM kills reported; the python process was killed"
    );
    Ok(())
}
