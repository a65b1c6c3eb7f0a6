//! The kernel view (docs/kernel.md) on the test cluster: the collector `jobscope-kernel` runs
//! (slurm-conf/cluster.sh up starts it with system-call counting), the plugin tags each step's
//! tasks, and the report's figures are checked against known work: N one-byte reads and writes,
//! 4 busy processes on 1 allocated core, a loopback transfer of M bytes, K MiB of direct I/O.
//! Where (tests/cluster/suites.sh): the host's 22.05 cluster on cgroup v1, whose script starts
//! the collector (a host-wide BPF load), and the 26.05 VM on cgroup v2, where the packaged
//! service runs it under systemd (slurm-conf/vm/guest/suite.sh turns on system-call counting
//! with a drop-in). Not the 24.11 rootfs: it shares the host's kernel with the 22.05 cluster.

use anyhow::{ensure, Context, Result};
use jobscope_cluster_tests::jobscope::*;
use jobscope_cluster_tests::*;
use serde_json::Value;
use std::time::Duration;

const T: Duration = Duration::from_secs(240);

fn run(script: &str) -> Result<(u32, Value)> {
    run_and(script, |_| Ok(()))
}

/// [`run`], calling `while_running(job id)` once the job is submitted, before waiting for its end.
fn run_and(script: &str, while_running: impl FnOnce(u32) -> Result<()>) -> Result<(u32, Value)> {
    let _c = ClusterGuard::acquire()?;
    ensure!(
        std::path::Path::new("/sys/fs/bpf/jobscope/state").exists(),
        "no kernel collector on the test cluster (slurm-conf/cluster.sh up starts jobscope-kernel; see /var/log/jobscope/kernel.log)"
    );
    let id = submit("alice", &[], script)?;
    while_running(id)?;
    let state = wait_job(id, T)?;
    ensure!(state == "COMPLETED", "job {id}: SLURM says {state}");
    let s = summary(id)?;
    Ok((id, s))
}

fn u(s: &Value, ptr: &str) -> Result<u64> {
    s.pointer(ptr)
        .and_then(|v| v.as_u64())
        .with_context(|| format!("{ptr} missing in the summary: {}", s["kernel"]))
}

#[test]
fn kernel_view_counts_one_byte_reads_and_writes_exactly() -> Result<()> {
    const N: u64 = 100_000;
    let (id, s) = run(&format!(
        "#!/bin/bash\n#SBATCH --job-name=kreads --ntasks=1 --cpus-per-task=1 --mem=200M\ndd if=/dev/zero of=/dev/null bs=1 count={N} 2>/dev/null\n"
    ))?;
    // dd's N, plus what bash and dd read and write under 4 KiB starting up (the script, the
    // loader, locale files): a few hundred, not thousands.
    let reads = u(&s, "/kernel/small_reads")?;
    let writes = u(&s, "/kernel/small_writes")?;
    ensure!(
        (N..N + 2_000).contains(&reads),
        "job {id}: {reads} small reads for {N}"
    );
    ensure!(
        (N..N + 2_000).contains(&writes),
        "job {id}: {writes} small writes for {N}"
    );
    ensure!(
        u(&s, "/kernel/syscalls/file")? >= 2 * N,
        "job {id}: {}",
        s["kernel"]
    );
    let text = report_text(id)?;
    ensure!(text.contains("Kernel view"), "job {id}:\n{text}");
    Ok(())
}

#[test]
fn kernel_view_sees_four_busy_processes_wait_on_one_core() -> Result<()> {
    // While the job runs, its owner's live view (`jobscope show`) has the waits already: the
    // spinners have not exited, so these come from the collector's catch-up of running tasks.
    let live = |id: u32| -> Result<()> {
        let v = wait_for(
            "alice's live view with a wait for a CPU",
            Duration::from_secs(60),
            || {
                let out = run_as("alice", &format!("{JOBSCOPE} show {id} --json")).ok()?;
                let v: Value = serde_json::from_str(&out.stdout).ok()?;
                (v["state"] == "RUNNING" && v["kernel"]["cpu_wait_s"].as_f64()? > 1.0).then_some(v)
            },
        )?;
        let out = run_as("alice", &format!("{JOBSCOPE} show {id}"))?;
        ensure!(
            out.stdout.contains("Kernel view"),
            "job {id}: the live text has no kernel view:\n{}\n(JSON kernel: {})",
            out.stdout,
            v["kernel"]
        );
        Ok(())
    };
    let (id, s) = run_and(
        "#!/bin/bash\n#SBATCH --job-name=kwait --ntasks=1 --cpus-per-task=1 --mem=200M\n\
         for i in 1 2 3 4; do timeout 12 bash -c 'while :; do :; done' & done; wait\n",
        live,
    )?;
    let run_s = f64_at(&s, "/kernel/run_s")?;
    let wait_s = f64_at(&s, "/kernel/cpu_wait_s")?;
    let share = wait_s / (run_s + wait_s);
    // 4 runnable on 1 core: each waits 3/4 of its runnable time (the shell's own time adds a
    // little running without waiting).
    ensure!(
        (0.62..=0.80).contains(&share),
        "job {id}: waited {wait_s:.1} s, ran {run_s:.1} s: {:.0} %",
        share * 100.0
    );
    // The finding and the class say it, with the numbers.
    let a = &s["analysis"];
    ensure!(
        a.to_string().contains("cpu_wait"),
        "job {id}: no cpu_wait finding in {a}"
    );
    ensure!(
        str_at(&s, "/analysis/classification/class")? == "waiting",
        "job {id}: class {}",
        s["analysis"]["classification"]
    );
    let text = report_text(id)?;
    ensure!(
        text.contains("threads waited for a CPU"),
        "job {id}:\n{text}"
    );
    Ok(())
}

#[test]
fn kernel_view_counts_a_loopback_transfer_and_direct_io_exactly() -> Result<()> {
    const M: u64 = 13 * 1024 * 1024;
    const K: u64 = 32;
    let py = format!(
        "import socket, threading\n\
         srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1)\n\
         got = [0]\n\
         def sink():\n    c, _ = srv.accept()\n    while True:\n        b = c.recv(1 << 16)\n        if not b: break\n        got[0] += len(b)\n    c.close()\n\
         t = threading.Thread(target=sink); t.start()\n\
         cl = socket.create_connection(srv.getsockname()); cl.sendall(b'x' * {M}); cl.close(); t.join()\n\
         assert got[0] == {M}, got\n"
    );
    let (id, s) = run(&format!(
        "#!/bin/bash\n#SBATCH --job-name=knetio --ntasks=1 --cpus-per-task=1 --mem=400M\nset -e\npython3 - <<'EOF'\n{py}EOF\nf=/var/tmp/jobscope-kio-$SLURM_JOB_ID\ndd if=/dev/zero of=$f bs=1M count={K} oflag=direct 2>/dev/null\nrm -f $f\n"
    ))?;
    ensure!(
        u(&s, "/kernel/net_sent_bytes")? == M,
        "job {id}: {}",
        s["kernel"]
    );
    ensure!(
        u(&s, "/kernel/net_received_bytes")? == M,
        "job {id}: {}",
        s["kernel"]
    );
    let w = u(&s, "/kernel/block_write_bytes")?;
    // the data exactly; the file system's own metadata goes through its journal thread
    ensure!(
        (K << 20..(K << 20) + (1 << 20)).contains(&w),
        "job {id}: {w} block bytes written for {K} MiB of direct I/O"
    );
    Ok(())
}
