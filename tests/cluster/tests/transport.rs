//! A cluster, not one host (issue 31, docs/cluster.md): the 4-node cluster of
//! `slurm-conf/cluster.sh up --nodes 4`, in which each slurmd runs in its own mount namespace
//! with private `/var/lib/jobscope`, `/var/spool/jobscope`, `/var/log/jobscope` and
//! `/run/jobscope*` (the host's namespace is the service host that runs the collector), against
//! the test command's real PostgreSQL (slurm-conf/postgres.sh). Tests named `four_node_*` run
//! only on that cluster (tests/run-all.sh).

use anyhow::{anyhow, ensure, Context, Result};
use jobscope_cluster_tests::jobscope::*;
use jobscope_cluster_tests::mail::queue_files;
use jobscope_cluster_tests::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(180);
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// Where `cluster.sh up --nodes 4` keeps each node's private directories.
const NODE_DIRS: &str = "/var/lib/jobscope-nodes";
const PG_DIR: &str = "/var/lib/jobscope-pg-test";
const PG_PORT: u16 = 15432;
const DB: &str = "jobscope_cluster";
const NODE_LOGIN: &str = "jobscope_node_test";
/// The compute nodes' password file: in /etc, which the nodes share with the host (only
/// jobscope's own directories are private to a node).
const NODE_PASSWORD: &str = "/etc/jobscope/test-node.password";
/// The collector's configuration on the service host (the nodes never read it).
const COLLECTOR_TOML: &str = "/etc/jobscope/collector-test.toml";

fn node_dir(node: &str) -> PathBuf {
    Path::new(NODE_DIRS).join(node)
}

fn postgres_sh(cmd: &str) -> Result<()> {
    let out = Command::new("bash")
        .arg(format!("{REPO}/slurm-conf/postgres.sh"))
        .arg(cmd)
        .output()?;
    ensure!(
        out.status.success(),
        "postgres.sh {cmd}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// `psql` as the test server's superuser on database `db`.
fn psql(db: &str, sql: &str) -> Result<String> {
    let pw = std::fs::read_to_string(format!("{PG_DIR}/admin.password"))?;
    let bin = std::fs::read_dir("/usr/lib/postgresql")?
        .flatten()
        .map(|e| e.path().join("bin/psql"))
        .filter(|p| p.exists())
        .max()
        .ok_or_else(|| anyhow!("no psql under /usr/lib/postgresql"))?;
    let out = Command::new(bin)
        .args([
            "-X",
            "-q",
            "-tA",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
        ])
        .args([
            "-p",
            &PG_PORT.to_string(),
            "-U",
            "jobscope_admin",
            "-d",
            db,
            "-c",
            sql,
        ])
        .env("PGPASSWORD", pw.trim())
        .output()?;
    ensure!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `jobscope ARGS` as root on the service host (the host's namespace).
fn jobscope_host(args: &[&str]) -> Result<CmdOut> {
    let out = Command::new(JOBSCOPE)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .current_dir("/")
        .output()
        .with_context(|| format!("cannot run {JOBSCOPE}"))?;
    Ok(CmdOut::from_output(out))
}

/// A fresh database with the transport's tables, the nodes' login and its password file; the
/// `[transport]` section of the nodes' configuration (held by the returned guard) and the
/// collector's configuration waiting `node_wait_s` for missing nodes.
fn postgres_mode(node_wait_s: u64) -> Result<ConfigSectionGuard> {
    postgres_sh("up")?;
    psql(
        "postgres",
        &format!("DROP DATABASE IF EXISTS {DB} WITH (FORCE)"),
    )?;
    psql("postgres", &format!("CREATE DATABASE {DB}"))?;
    let password = format!("node-{}-{}", std::process::id(), unix_ms());
    write_atomic(Path::new(NODE_PASSWORD), &format!("{password}\n"), 0o600)?;
    let g = ConfigSectionGuard::set_section(
        "transport",
        &format!(
            "mode = \"postgres\"\nsend_budget_s = 3\nretry_jitter_s = 0\n\
             postgres = {{ conninfo = \"host=127.0.0.1 port={PG_PORT} user={NODE_LOGIN} dbname={DB}\", \
             password_file = \"{NODE_PASSWORD}\", connect_timeout_s = 2 }}"
        ),
    )?;
    write_collector_config(node_wait_s)?;
    let init = jobscope_host(&["--config", COLLECTOR_TOML, "pg", "init"])?;
    ensure!(
        init.success(),
        "jobscope pg init: {}{}",
        init.stdout,
        init.stderr
    );
    let role = jobscope_host(&[
        "--config",
        COLLECTOR_TOML,
        "pg",
        "node-role",
        NODE_LOGIN,
        "--password-file",
        NODE_PASSWORD,
    ])?;
    ensure!(
        role.success(),
        "jobscope pg node-role: {}{}",
        role.stdout,
        role.stderr
    );
    Ok(g)
}

/// The collector's configuration: the nodes' (as the guard left it), with `[postgres]` (the
/// owner's login) and the wait for missing nodes.
fn write_collector_config(node_wait_s: u64) -> Result<()> {
    let cur = ConfigSectionGuard::current()?;
    let cur = replace_toml_section(
        &cur,
        "postgres",
        &format!(
            "conninfo = \"host=127.0.0.1 port={PG_PORT} user=jobscope_admin dbname={DB}\"\n\
             password_file = \"{PG_DIR}/admin.password\""
        ),
    );
    let cur = replace_toml_section(&cur, "archive", &format!("node_wait_s = {node_wait_s}"));
    write_atomic(Path::new(COLLECTOR_TOML), &cur, 0o600)
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Runs the collector (`jobscope collect --once`) until it has archived `job`, or `timeout`.
fn collect_until(job: u32, timeout: Duration) -> Result<Value> {
    let t0 = Instant::now();
    loop {
        let out = jobscope_host(&["--config", COLLECTOR_TOML, "collect", "--once", "--json"])?;
        ensure!(
            out.success(),
            "jobscope collect: {}{}",
            out.stdout,
            out.stderr
        );
        let rep: Value = serde_json::from_str(&out.stdout)?;
        if let Some(c) = rep["archived"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["job_id"] == job))
        {
            return Ok(c.clone());
        }
        ensure!(
            t0.elapsed() < timeout,
            "the collector did not archive job {job} within {timeout:?}; last pass: {}",
            out.stdout
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Archived records of `job` under `root` (an archive's dated tree, not the owners' copies)
/// of runs that started this test run: a job id SLURM handed out before (a cluster started
/// afresh counts from 1 again) is another job.
fn records_in(root: &Path, job: u32) -> Vec<PathBuf> {
    let since_s = test_start_s();
    let mut out = Vec::new();
    let mut todo = vec![(root.to_path_buf(), 0)];
    while let Some((d, depth)) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() && depth < 3 && name != "users" && name != "index" {
                todo.push((p, depth + 1));
            } else if p.is_file() && is_archive_name_of(&name, job) && started_s(&name) >= since_s {
                out.push(p);
            }
        }
    }
    out
}

/// When this test process started, in seconds (less a minute of clock skew between SLURM's start
/// second and this process).
fn test_start_s() -> u64 {
    static T0: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *T0.get_or_init(|| unix_ms() / 1000 - 60)
}

/// The start second in an archive record's name (`<job>-<start>[-<cluster>].json`).
fn started_s(name: &str) -> u64 {
    name.split(['-', '.'])
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Every archived record of `job`: the host's archive and each node's private one.
fn all_records(nodes: &[String], job: u32) -> Vec<PathBuf> {
    let mut v = records_in(Path::new(ARCHIVE), job);
    for n in nodes {
        v.extend(records_in(&node_dir(n).join("lib/archive"), job));
    }
    v
}

/// Every queued or sent mail about this run of `job` (mail ids carry the run's start second):
/// the host's queue and each node's private one.
fn all_mails(nodes: &[String], job: u32) -> Vec<PathBuf> {
    let since_s = test_start_s();
    let this_run = |p: &PathBuf| {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("jobscope."))
            .and_then(|n| n.split('.').nth(1))
            .and_then(|s| s.parse::<u64>().ok())
            .is_some_and(|s| s >= since_s)
    };
    all_mail_files(nodes, job)
        .into_iter()
        .filter(this_run)
        .collect()
}

fn all_mail_files(nodes: &[String], job: u32) -> Vec<PathBuf> {
    let mut v = queue_files(Path::new("/var/spool/jobscope/mail"), job, ".eml");
    v.extend(queue_files(
        Path::new("/var/spool/jobscope/mail/sent"),
        job,
        "",
    ));
    for n in nodes {
        let q = node_dir(n).join("spool/mail");
        v.extend(queue_files(&q, job, ".eml"));
        v.extend(queue_files(&q.join("sent"), job, ""));
    }
    v
}

fn read_json(p: &Path) -> Result<Value> {
    Ok(serde_json::from_slice(&std::fs::read(p)?)?)
}

fn node_names(s: &Value) -> Vec<String> {
    s["nodes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n["node"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A `-N4` job whose task on each node writes its cgroup, burns one core for 3 s, marks itself
/// done and sleeps `tail_s` seconds.
fn four_node_script(tail_s: u32) -> String {
    format!(
        "#!/bin/bash\n#SBATCH --job-name=four --nodes=4 --ntasks-per-node=1 --time=5\n\
         srun sh -c 'cat /proc/self/cgroup > cg.$SLURMD_NODENAME; \
         python3 -c \"import time\nend = time.time() + 3\nwhile time.time() < end: pass\"; \
         touch done.$SLURMD_NODENAME; sleep {tail_s}'\n"
    )
}

/// The work directory of job `id`, once the task on each of `nodes` has left its marker
/// `<prefix>.<node>` there (`cg`: started, `done`: its work is done; [`four_node_script`]).
fn wait_markers(id: u32, nodes: &[String], prefix: &str) -> Result<PathBuf> {
    let workdir = PathBuf::from(wait_for("WorkDir", T, || job_field(id, "WorkDir").ok())?);
    wait_for(&format!("every task's {prefix} marker"), T, || {
        nodes
            .iter()
            .all(|n| workdir.join(format!("{prefix}.{n}")).exists())
            .then_some(())
    })?;
    Ok(workdir)
}

/// `sh -c SCRIPT` as root in a new private mount namespace (a node or a login node of the test:
/// its mounts go nowhere else), with a clean environment.
fn in_own_namespace(script: &str) -> Result<CmdOut> {
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            script,
        ])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .current_dir("/")
        .output()?;
    Ok(CmdOut::from_output(out))
}

/// The Epilog's log lines about `job` in `node`'s private log.
fn epilog_lines(node: &str, job: u32) -> Vec<String> {
    std::fs::read_to_string(node_dir(node).join("log/epilog.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&format!("job {job} ")) || l.contains(&format!("job {job}:")))
        .map(str::to_string)
        .collect()
}

/// How long each node's Epilog took for `job` (its `… in <ms> ms` line).
fn epilog_ms(node: &str, job: u32) -> Option<u64> {
    epilog_lines(node, job)
        .iter()
        .find_map(|l| l.strip_suffix(" ms")?.rsplit_once(" in ")?.1.parse().ok())
}

fn wait_epilogs(nodes: &[String], job: u32) -> Result<()> {
    wait_for("every node's Epilog to log the job", T, || {
        nodes
            .iter()
            .all(|n| epilog_ms(n, job).is_some())
            .then_some(())
    })
}

/// No transport (the default on a real cluster): exactly one report and one mail, by the job's
/// first node, with that node's figures and a reason naming the three it could not see; the
/// other nodes archive and mail nothing.
#[test]
fn four_node_without_a_transport_the_first_node_alone_reports_once() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let nodes = require_four_nodes()?;
    test_start_s();
    let _g = ConfigSectionGuard::set_section("transport", "mode = \"none\"")?;
    let id = submit("alice", &[], &four_node_script(1))?;
    ensure!(wait_job(id, T)? == "COMPLETED", "job {id} did not complete");
    wait_epilogs(&nodes, id)?;
    let recs = all_records(&nodes, id);
    ensure!(
        recs.len() == 1,
        "job {id}: {} records: {recs:?}",
        recs.len()
    );
    ensure!(
        recs[0].starts_with(node_dir(&nodes[0])),
        "the record is not the first node's: {}",
        recs[0].display()
    );
    let s = read_json(&recs[0])?;
    ensure!(
        node_names(&s) == [nodes[0].clone()],
        "nodes {:?}",
        node_names(&s)
    );
    let missing: Vec<&str> = s["missing_nodes"]
        .as_array()
        .context("missing_nodes")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    ensure!(missing == nodes[1..], "missing {missing:?}");
    let why = s["partial_reasons"][0].as_str().unwrap_or("");
    ensure!(
        why.contains("no transport is configured") && why.contains(&nodes[3]),
        "reason: {why}"
    );
    let mails = all_mails(&nodes, id);
    ensure!(mails.len() == 1, "job {id}: mails {mails:?}");
    for n in &nodes[1..] {
        let l = epilog_lines(n, id).join("\n");
        ensure!(
            l.contains(&format!("first node {} reports it", nodes[0])),
            "{n}: {l}"
        );
        ensure!(!job_dir_exists(n, id), "{n} kept its spool of job {id}");
    }
    Ok(())
}

fn job_dir_exists(node: &str, job: u32) -> bool {
    node_dir(node)
        .join("spool")
        .join(format!("{job}.{node}"))
        .exists()
}

/// Through PostgreSQL: one archived record on the service host with all four nodes, their
/// figures equal to each job cgroup's own CPU counter, one mail from the host's queue, and
/// nothing written on the nodes but their outboxes, which are empty.
#[test]
fn four_node_through_postgres_one_record_of_four_nodes_and_one_mail() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let nodes = require_four_nodes()?;
    test_start_s();
    let _g = postgres_mode(600)?;
    let id = submit("alice", &[], &four_node_script(4))?;
    let workdir = wait_markers(id, &nodes, "done")?;
    // Each node's job cgroup, read while the job still runs (its directory goes at the end).
    let mut kernel_s = Vec::new();
    for n in &nodes {
        let cg = std::fs::read_to_string(workdir.join(format!("cg.{n}")))?;
        kernel_s.push(kernel_job_cpu_s(&cg)?);
    }
    ensure!(wait_job(id, T)? == "COMPLETED", "job {id} did not complete");
    wait_epilogs(&nodes, id)?;
    for n in &nodes {
        let l = epilog_lines(n, id).join("\n");
        ensure!(l.contains("summary is in the database"), "{n}: {l}");
    }
    let c = collect_until(id, T)?;
    ensure!(c["missing_nodes"] == serde_json::json!([]), "{c}");
    let recs = all_records(&nodes, id);
    ensure!(recs.len() == 1, "job {id}: records {recs:?}");
    ensure!(recs[0].starts_with(ARCHIVE), "{}", recs[0].display());
    let s = summary(id)?;
    ensure!(node_names(&s) == nodes, "nodes {:?}", node_names(&s));
    ensure!(s["partial"] == false, "{}", s["partial_reasons"]);
    for (n, k) in nodes.iter().zip(&kernel_s) {
        let ns = s["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["node"] == n.as_str())
            .unwrap();
        let cpu = ns["cpu"]["usage_s"].as_f64().context("cpu.usage_s")?;
        ensure!(*k > 0.5, "{n}: the task burnt {k} s");
        ensure!(
            (cpu - k).abs() <= (0.03 * k).max(0.05),
            "{n}: summary CPU {cpu:.3} s vs its job cgroup's {k:.3} s"
        );
    }
    let mails = all_mails(&nodes, id);
    ensure!(
        mails.len() == 1 && mails[0].starts_with("/var/spool/jobscope/mail"),
        "job {id}: mails {mails:?}"
    );
    for n in &nodes {
        let outbox: Vec<_> = std::fs::read_dir(node_dir(n).join("lib/outbox"))
            .into_iter()
            .flatten()
            .flatten()
            .collect();
        ensure!(outbox.is_empty(), "{n}: outbox holds {outbox:?}");
        ensure!(!job_dir_exists(n, id), "{n} kept its spool");
        ensure!(
            !node_dir(n).join(format!("lib/state/{id}")).exists(),
            "{n} wrote a state directory"
        );
    }
    // The same summaries again (a node retrying): still one record.
    let again = jobscope_host(&["--config", COLLECTOR_TOML, "collect", "--once", "--json"])?;
    ensure!(again.success(), "{}", again.stderr);
    ensure!(all_records(&nodes, id).len() == 1);
    Ok(())
}

/// One node's slurmd killed mid-job: its Epilog never runs, and after the collector's
/// (shortened) wait one partial report names it. When the node comes back and reports late, its
/// summary is kept but counted nowhere: still one record.
#[test]
fn four_node_a_node_whose_slurmd_dies_is_named_in_one_partial_report() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let nodes = require_four_nodes()?;
    test_start_s();
    let _g = postgres_mode(5)?;
    let id = submit("alice", &[], &four_node_script(6))?;
    let victim = nodes[3].clone();
    // The last node's task has started.
    wait_markers(id, &nodes[3..], "cg")?;
    let pidfile = format!("/run/slurmd-{victim}.pid");
    let pid: i32 = std::fs::read_to_string(&pidfile)?.trim().parse()?;
    // SAFETY: a plain kill(2) of the slurmd this cluster started (its pid file).
    ensure!(
        unsafe { libc::kill(pid, libc::SIGKILL) } == 0,
        "kill slurmd {pid}"
    );
    let result = (|| -> Result<()> {
        let c = collect_until(id, T)?;
        ensure!(c["missing_nodes"] == serde_json::json!([victim]), "{c}");
        let recs = all_records(&nodes, id);
        ensure!(recs.len() == 1, "records {recs:?}");
        let s = read_json(&recs[0])?;
        ensure!(node_names(&s) == nodes[..3], "nodes {:?}", node_names(&s));
        ensure!(s["partial"] == true);
        let named = s["partial_reasons"].as_array().unwrap().iter().any(|r| {
            r.as_str()
                .unwrap_or("")
                .starts_with(&format!("node {victim}"))
        });
        ensure!(named, "{}", s["partial_reasons"]);
        ensure!(all_mails(&nodes, id).len() == 1);
        // The node's Epilog runs after all (its slurmd back, SLURM retrying the job's end) and
        // sends its summary after the partial report: kept, counted nowhere, no second record.
        // It runs as that node would: in a namespace with the node's own directories.
        let d = node_dir(&victim);
        let script = format!(
            "set -e; mount --bind {lib} /var/lib/jobscope; mount --bind {spool} /var/spool/jobscope; \
             mount --bind {log} /var/log/jobscope; \
             exec {JOBSCOPE} epilog --job {id} --node {victim} --nodelist {list} --json",
            lib = d.join("lib").display(),
            spool = d.join("spool").display(),
            log = d.join("log").display(),
            list = nodes.join(","),
        );
        let o = in_own_namespace(&script)?;
        ensure!(
            o.success() && o.stdout.contains("\"sent\""),
            "late epilog on {victim}: {}{}",
            o.stdout,
            o.stderr
        );
        let pass = jobscope_host(&["--config", COLLECTOR_TOML, "collect", "--once", "--json"])?;
        let rep: Value = serde_json::from_str(&pass.stdout)?;
        ensure!(
            rep["late"] == serde_json::json!([[id, victim]]),
            "the late summary: {}",
            pass.stdout
        );
        ensure!(
            all_records(&nodes, id).len() == 1,
            "a second record after the late summary"
        );
        Ok(())
    })();
    // The node comes back (the whole cluster restarts; the nodes' private directories start
    // empty). Jobs after this one must find four idle nodes.
    let up = Command::new("bash")
        .arg(format!("{REPO}/slurm-conf/cluster.sh"))
        .args(["up", "--nodes", "4"])
        .output()?;
    ensure!(
        up.status.success(),
        "cluster.sh up --nodes 4: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    result
}

/// PostgreSQL stopped while the Epilogs run and started 60 s later: every Epilog ends within
/// its budget with the summary in its node's outbox; each node's `jobscope reap` then sends it,
/// and the collector makes one complete report: nothing lost.
#[test]
fn four_node_database_down_during_the_epilogs_delays_the_report_and_loses_nothing() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let nodes = require_four_nodes()?;
    test_start_s();
    let _g = postgres_mode(600)?;
    let id = submit("alice", &[], &four_node_script(2))?;
    wait_markers(id, &nodes, "done")?;
    postgres_sh("down")?;
    let stopped = Instant::now();
    let result = (|| -> Result<()> {
        ensure!(wait_job(id, T)? == "COMPLETED", "job {id} did not complete");
        wait_epilogs(&nodes, id)?;
        for n in &nodes {
            let ms = epilog_ms(n, id).unwrap();
            // send_budget_s = 3: the Epilog gives up sending then (SLURM's limit is far above).
            ensure!(
                ms < 8_000,
                "{n}: the Epilog took {ms} ms with the database down"
            );
            let l = epilog_lines(n, id).join("\n");
            ensure!(l.contains("waits in the outbox"), "{n}: {l}");
            let ob = std::fs::read_dir(node_dir(n).join("lib/outbox"))?.count();
            ensure!(ob == 1, "{n}: {ob} envelopes in the outbox");
        }
        Ok(())
    })();
    std::thread::sleep(Duration::from_secs(60).saturating_sub(stopped.elapsed()));
    postgres_sh("up")?;
    result?;
    for n in &nodes {
        let out = Command::new("bash")
            .arg(format!("{REPO}/slurm-conf/cluster.sh"))
            .args(["node-exec", n, JOBSCOPE, "reap", "--node", n, "--json"])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .output()?;
        let o = CmdOut::from_output(out);
        ensure!(o.success(), "{n}: jobscope reap: {}{}", o.stdout, o.stderr);
        let rep: Value = serde_json::from_str(&o.stdout)?;
        ensure!(
            rep["outbox"]["sent"] == 1 && rep["outbox"]["left"] == 0,
            "{n}: {}",
            o.stdout
        );
    }
    let c = collect_until(id, T)?;
    ensure!(c["missing_nodes"] == serde_json::json!([]), "{c}");
    let s = summary(id)?;
    ensure!(node_names(&s) == nodes, "nodes {:?}", node_names(&s));
    ensure!(s["partial"] == false, "{}", s["partial_reasons"]);
    ensure!(all_records(&nodes, id).len() == 1);
    Ok(())
}

/// A login node (a namespace of its own, sharing nothing of jobscope's but a read-only mount of
/// the service host's archive): alice is told in one line where her running 4-node job's live
/// figures are, and reads her archived jobs through the read-only mount; bob reads none of hers.
#[test]
fn four_node_a_login_node_reads_the_archive_read_only_and_is_told_where_a_running_job_is(
) -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let nodes = require_four_nodes()?;
    test_start_s();
    let _g = postgres_mode(600)?;
    let done = submit("alice", &[], &four_node_script(0))?;
    ensure!(wait_job(done, T)? == "COMPLETED");
    wait_epilogs(&nodes, done)?;
    let record = collect_until(done, T)?["record"]
        .as_str()
        .map(str::to_string)
        .context("record")?;
    let start = started_s(Path::new(&record).file_name().unwrap().to_str().unwrap());
    let running = submit("alice", &[], &four_node_script(60))?;
    wait_markers(running, &nodes, "cg")?;
    let login = Path::new(NODE_DIRS).join("login");
    for d in ["lib", "live"] {
        std::fs::create_dir_all(login.join(d))?;
    }
    // The login node: its own empty /var/lib/jobscope and /run/jobscope-live, the archive
    // mounted read-only from the service host.
    let ns = |user: &str, args: &str| -> Result<CmdOut> {
        // The archive is mounted beneath the login node's directory first (read-only), then
        // that directory with its mount over /var/lib/jobscope, which hides the host's.
        let script = format!(
            "set -e; mkdir -p {lib}/archive; mount --bind {ARCHIVE} {lib}/archive; \
             mount -o remount,bind,ro {lib}/archive; \
             mount --rbind {lib} /var/lib/jobscope; mount --bind {live} /run/jobscope-live; \
             exec runuser -u {user} -- env -i PATH=/usr/bin:/bin {JOBSCOPE} {args}",
            lib = login.join("lib").display(),
            live = login.join("live").display(),
        );
        in_own_namespace(&script)
    };
    let r = (|| -> Result<()> {
        let live = ns("alice", &format!("show {running}"))?;
        ensure!(
            !live.success(),
            "show of a running job with no node reachable: {}",
            live.stdout
        );
        let line = live.stderr.trim();
        ensure!(
            line.lines().count() == 1
                && line.contains(&format!("srun --jobid={running} --overlap -w {}", nodes[0])),
            "{line}"
        );
        let old = ns("alice", &format!("show {done} --start {start} --json"))?;
        ensure!(
            old.success(),
            "alice reads her archived job: {}",
            old.stderr
        );
        let v: Value = serde_json::from_str(&old.stdout)?;
        ensure!(node_names(&v) == nodes);
        let bob = ns("bob", &format!("show {done} --start {start}"))?;
        ensure!(!bob.success(), "bob read alice's job: {}", bob.stdout);
        // Nothing can be written there, even by root.
        let w = in_own_namespace(&format!(
            "mount --bind -o ro {ARCHIVE} /mnt && mount -o remount,bind,ro /mnt && touch /mnt/x"
        ))?;
        ensure!(!w.success(), "wrote into the read-only archive");
        Ok(())
    })();
    scancel(running)?;
    wait_job(running, T)?;
    r
}
