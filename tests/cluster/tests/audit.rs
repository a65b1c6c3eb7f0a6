//! `jobscope audit` on the real cluster (docs/audit.md): jobs of two users, two accounts and both
//! partitions; the audit's figures equal the sums computed here from the archived JSON files; a
//! user sees only their own jobs and cannot open the index; a damaged or deleted index is rebuilt
//! with the same answers; the Parquet output reads back with pyarrow.

use anyhow::{ensure, Context, Result};
use jobscope_cluster_tests::jobscope::*;
use jobscope_cluster_tests::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const T: Duration = Duration::from_secs(240);
const INDEX: &str = "/var/lib/jobscope/archive/index";
/// The python with pyarrow: the host's venv (slurm-conf/install-deps.sh), or in the VM test
/// cluster the guest's own python3, into which slurm-conf/vm/guest/suite.sh unpacked the same
/// pyarrow release's wheel.
fn python() -> &'static str {
    const VENV: &str = "/opt/jobscope-pyenv/bin/python";
    if Path::new(VENV).exists() {
        VENV
    } else {
        "/usr/bin/python3"
    }
}

fn jobscope_root(args: &[&str]) -> Result<String> {
    let out = release_cmd(JOBSCOPE, Path::new("/"))
        .args(args)
        .env_clear()
        .env("TZ", "UTC")
        .output()
        .context("cannot run jobscope")?;
    ensure!(
        out.status.success(),
        "jobscope {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// (user, account, partition) → (jobs, core-h alloc, core-h used, mem GiB-h alloc), from the
/// archived JSON documents (docs/audit.md's formulas; nothing of jobscope's code).
type Sums = BTreeMap<(String, String, String), (i64, f64, f64, f64)>;

fn sums_of(docs: &[Value]) -> Result<Sums> {
    let mut m = Sums::new();
    for d in docs {
        let key = (
            str_at(d, "/user")?.to_string(),
            str_at(d, "/account")?.to_string(),
            str_at(d, "/partition")?.to_string(),
        );
        let h = f64_at(d, "/elapsed_s")? / 3600.0;
        let e = m.entry(key).or_default();
        e.0 += 1;
        e.1 += f64_at(d, "/alloc/cores")? * h;
        e.2 += f64_at(d, "/cpu/usage_s")? / 3600.0;
        e.3 +=
            f64_at(d, "/alloc/mem_per_node_bytes")? / 1073741824.0 * f64_at(d, "/alloc/nodes")? * h;
    }
    Ok(m)
}

fn sums_from_audit(json: &str) -> Result<Sums> {
    let rows: Vec<Value> = serde_json::from_str(json).context("audit --format json")?;
    let mut m = Sums::new();
    for r in rows {
        let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        m.insert(
            (s("user"), s("account"), s("partition")),
            (
                r["jobs"].as_i64().unwrap_or(-1),
                f("core_hours_alloc"),
                f("core_hours_used"),
                f("mem_gb_hours_alloc"),
            ),
        );
    }
    Ok(m)
}

fn same(a: &Sums, b: &Sums) -> Result<()> {
    ensure!(
        a.keys().eq(b.keys()),
        "groups differ: {:?} vs {:?}",
        a.keys(),
        b.keys()
    );
    for (k, x) in a {
        let y = &b[k];
        let close = |p: f64, q: f64| (p - q).abs() <= 1e-9 * p.abs().max(q.abs()).max(1e-9);
        ensure!(
            x.0 == y.0 && close(x.1, y.1) && close(x.2, y.2) && close(x.3, y.3),
            "{k:?}: audit {x:?} vs archive {y:?}"
        );
    }
    Ok(())
}

#[test]
fn audit_figures_equal_the_archive_and_users_see_only_their_own() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let tag = format!("au{}", std::process::id());
    let (a, b) = (format!("{tag}a"), format!("{tag}b"));
    let burn = "--wrap=timeout 3 sh -c 'while :; do :; done'; true";
    let mut ids = Vec::new();
    // Partition by partition: a job in `high` preempts (cancels) a running `debug` job that holds
    // the cores it needs (slurm-conf/test-cluster/slurm.conf.in), and whether one is running then
    // depends on how fast the machine is (it was, in the VM under software emulation).
    let jobs = [
        ("alice", &a, "debug", "1"),
        ("alice", &b, "high", "2"),
        ("alice", &a, "debug", "2"),
        ("bob", &a, "high", "1"),
        ("bob", &b, "debug", "1"),
    ];
    for wave in ["high", "debug"] {
        let mut batch = Vec::new();
        for (user, acct, part, cpus) in jobs.iter().filter(|j| j.2 == wave) {
            batch.push((
                *user,
                submit(
                    user,
                    &[
                        &format!("--account={acct}"),
                        &format!("--partition={part}"),
                        &format!("--cpus-per-task={cpus}"),
                        "--mem=200M",
                        "--job-name=audit",
                        burn,
                    ],
                    "",
                )?,
            ));
        }
        for (_, id) in &batch {
            let st = wait_job(*id, T)?;
            ensure!(st == "COMPLETED", "job {id}: {st}");
        }
        ids.extend(batch);
    }
    let mut docs = Vec::new();
    for (_, id) in &ids {
        let f = wait_for("the archive record", T, || archive_file(*id).ok())?;
        docs.push(serde_json::from_slice::<Value>(&std::fs::read(&f)?)?);
    }
    let want = sums_of(&docs)?;
    ensure!(want.len() == 4, "four groups: {want:?}");

    // Root: the index is brought up to date and answers.
    let upd = jobscope_root(&["index", "update", "--json"])?;
    let upd: Value = serde_json::from_str(&upd)?;
    ensure!(
        upd["problems"].as_array().is_some_and(|p| p.is_empty()),
        "{upd}"
    );
    let filt = format!("--account={a},{b}");
    let usage_args = [
        "audit",
        "usage",
        "--by",
        "user,account,partition",
        &filt,
        "--format",
        "json",
    ];
    let first = jobscope_root(&usage_args)?;
    same(&sums_from_audit(&first)?, &want)?;

    // The aligned table names every group, its units in the headers, within 120 characters.
    let table = jobscope_root(&["audit", "usage", "--by", "user,partition", &filt])?;
    ensure!(
        table
            .lines()
            .next()
            .is_some_and(|h| h.starts_with("user") && h.contains("core-h alloc")),
        "{table}"
    );
    ensure!(
        table.lines().all(|l| l.chars().count() <= 120),
        "wider than 120 characters:\n{table}"
    );
    ensure!(
        table.lines().count() == 2 + 4,
        "header, rule and 4 groups:\n{table}"
    );

    // alice sees her own 3 jobs only, with the same figures; she cannot open the index.
    let out = run_as(
        "alice",
        &format!("{JOBSCOPE} audit jobs {filt} --format json"),
    )?;
    ensure!(out.success(), "alice audit: {out:?}");
    let rows: Vec<Value> = serde_json::from_str(&out.stdout)?;
    let mut mine: Vec<u64> = rows.iter().filter_map(|r| r["job_id"].as_u64()).collect();
    mine.sort_unstable();
    let mut hers: Vec<u64> = ids
        .iter()
        .filter(|(u, _)| *u == "alice")
        .map(|(_, id)| u64::from(*id))
        .collect();
    hers.sort_unstable();
    ensure!(mine == hers, "alice saw {mine:?}, her jobs are {hers:?}");
    ensure!(rows.iter().all(|r| r["user"] == "alice"), "{rows:?}");
    let out = run_as(
        "alice",
        &format!("{JOBSCOPE} audit usage --by user,account,partition {filt} --format json"),
    )?;
    ensure!(out.success(), "{out:?}");
    let alice_want: Sums = want
        .iter()
        .filter(|(k, _)| k.0 == "alice")
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    same(&sums_from_audit(&out.stdout)?, &alice_want)?;
    let ls = run_as("alice", &format!("ls {INDEX}; cat {INDEX}/state.json"))?;
    ensure!(
        !ls.success() && !ls.stdout.contains("jobs"),
        "alice read the index: {ls:?}"
    );

    // A part cut short: the next audit rebuilds the index and answers the same.
    let state: Value =
        serde_json::from_slice(&std::fs::read(Path::new(INDEX).join("state.json"))?)?;
    let part = Path::new(INDEX).join(str_at(&state, "/jobs/0/file")?);
    let len = std::fs::metadata(&part)?.len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&part)?
        .set_len(len / 3)?;
    same(&sums_from_audit(&jobscope_root(&usage_args)?)?, &want)?;
    // The index deleted: the same.
    std::fs::remove_dir_all(INDEX)?;
    same(&sums_from_audit(&jobscope_root(&usage_args)?)?, &want)?;
    let (mode, owner, _) = mode_of(Path::new(INDEX))?;
    ensure!(
        mode == 0o750 && owner == 0,
        "index dir mode {mode:o} owner {owner}"
    );

    // Parquet output, read back by pyarrow.
    let pq = std::env::temp_dir().join(format!("{tag}.parquet"));
    jobscope_root(&[
        "audit",
        "jobs",
        &filt,
        "--format",
        "parquet",
        "--output",
        pq.to_str().context("path")?,
    ])?;
    // pyarrow is the host's (/opt/jobscope-pyenv), also under 24.11: the file is in /tmp, which
    // the 24.11 root filesystem shares at the same path (slurm-conf/trixie/cluster.sh).
    let py = std::process::Command::new(python())
        .args([
            "-c",
            "import sys, json, pyarrow.parquet as pq\n\
             t = pq.read_table(sys.argv[1])\n\
             print(json.dumps({'rows': t.num_rows, 'ids': sorted(t.column('job_id').to_pylist()),\n\
                               'users': sorted(set(t.column('user').to_pylist())),\n\
                               'types': {f.name: str(f.type) for f in t.schema}}))",
            pq.to_str().context("path")?,
        ])
        .output()
        .context("pyarrow (slurm-conf/install-deps.sh makes /opt/jobscope-pyenv; the VM suites unpack its wheel)")?;
    let _ = std::fs::remove_file(&pq);
    ensure!(
        py.status.success(),
        "pyarrow: {}",
        String::from_utf8_lossy(&py.stderr)
    );
    let v: Value = serde_json::from_slice(&py.stdout)?;
    let mut all: Vec<u64> = ids.iter().map(|(_, id)| u64::from(*id)).collect();
    all.sort_unstable();
    ensure!(v["rows"] == 5, "{v}");
    ensure!(
        v["ids"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_u64()).collect::<Vec<_>>())
            == Some(all),
        "{v}"
    );
    ensure!(v["users"] == serde_json::json!(["alice", "bob"]), "{v}");
    ensure!(
        v["types"]["job_id"] == "int64" && v["types"]["elapsed_s"] == "double",
        "{v}"
    );
    Ok(())
}

/// SHA-256 of `bytes` by coreutils' `sha256sum` (nothing of jobscope's code).
fn sha256sum(bytes: &str) -> Result<String> {
    use std::io::Write;
    let mut c = std::process::Command::new("/usr/bin/sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("sha256sum")?;
    c.stdin
        .take()
        .context("stdin")?
        .write_all(bytes.as_bytes())?;
    let out = c.wait_with_output()?;
    let s = String::from_utf8(out.stdout)?;
    Ok(s.split_whitespace()
        .next()
        .context("sha256sum output")?
        .to_string())
}

/// QOS, submit time and the batch script's hash, from SLURM and the plugin into the archived JSON
/// and the index (docs/audit.md), and right-sizing by the same script under another name: two
/// jobs with different names and the same script have that script's SHA-256 (as `sha256sum`
/// computes it from the submitted file: the plugin hashes slurmd's copy of it), a third with
/// another script does not; the submit time is SLURM's own; the QOS is what SLURM says (this
/// cluster has no accounting, so none: `QOS=(null)`); a fourth run of the first script under a
/// new name gets advice from the 3 runs of the same script.
#[test]
fn the_same_script_has_one_hash_under_any_name_and_right_sizing_uses_it() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let tag = format!("sh{}", std::process::id());
    // A tag of this run in each script: earlier runs of the test have other scripts.
    let script =
        |v: &str| format!("#!/bin/sh\n# {tag} {v}\ntimeout 3 sh -c 'while :; do :; done'\ntrue\n");
    let (sa, sb) = (script("a"), script("b"));
    let (ha, hb) = (sha256sum(&sa)?, sha256sum(&sb)?);
    ensure!(ha != hb);
    let acct = format!("--account={tag}");
    let run = |name: &str, s: &str| -> Result<u32> {
        submit(
            "alice",
            &[
                &acct,
                &format!("--job-name={tag}-{name}"),
                "--cpus-per-task=1",
                "--mem=200M",
            ],
            s,
        )
    };
    let jobs = [
        (run("one", &sa)?, &ha),
        (run("two", &sa)?, &ha),
        (run("one", &sb)?, &hb),
    ];
    let mut docs = Vec::new();
    for (id, want) in &jobs {
        let st = wait_job(*id, T)?;
        ensure!(st == "COMPLETED", "job {id}: {st}");
        let f = wait_for("the archive record", T, || archive_file(*id).ok())?;
        let d: Value = serde_json::from_slice(&std::fs::read(&f)?)?;
        validate(&d)?;
        ensure!(
            d["script_sha256"] == want.as_str() && d["nodes"][0]["script_sha256"] == want.as_str(),
            "job {id}: script_sha256 {} / node {}, the script's is {want}",
            d["script_sha256"],
            d["nodes"][0]["script_sha256"]
        );
        // SLURM's own submit time, asked here in epoch seconds.
        let out = release_cmd("scontrol", Path::new("/"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("SLURM_TIME_FORMAT", "%s")
            .args(["show", "job", "-o", &id.to_string()])
            .output()?;
        let rec = parse_record(String::from_utf8_lossy(&out.stdout).trim());
        let submit: u64 = rec.get("SubmitTime").context("SubmitTime")?.parse()?;
        ensure!(
            d["submit_unix_s"] == submit,
            "job {id}: submit_unix_s {} vs SLURM's {submit}",
            d["submit_unix_s"]
        );
        match rec.get("QOS").map(String::as_str) {
            Some("(null)") | None => ensure!(d.get("qos").is_none(), "{}", d["qos"]),
            Some(q) => ensure!(d["qos"] == q, "job {id}: qos {} vs SLURM's {q}", d["qos"]),
        }
        docs.push(d);
    }

    // The index holds the same figures (read with pyarrow from the parts state.json lists).
    jobscope_root(&["index", "update"])?;
    let ids: Vec<u32> = jobs.iter().map(|j| j.0).collect();
    let py = std::process::Command::new(python())
        .args([
            "-c",
            "import sys, json, pyarrow.parquet as pq\n\
             ids = set(json.loads(sys.argv[2])); out = {}\n\
             for j in json.load(open(sys.argv[1] + '/state.json'))['jobs']:\n\
             \x20   t = pq.read_table(sys.argv[1] + '/' + j['file'],\n\
             \x20                     columns=['job_id', 'script_sha256', 'submit_unix_s', 'qos'])\n\
             \x20   for r in t.to_pylist():\n\
             \x20       if r['job_id'] in ids: out[str(r['job_id'])] = r\n\
             print(json.dumps(out))",
            INDEX,
            &serde_json::to_string(&ids)?,
        ])
        .output()
        .context("pyarrow (slurm-conf/install-deps.sh makes /opt/jobscope-pyenv; the VM suites unpack its wheel)")?;
    ensure!(
        py.status.success(),
        "pyarrow: {}",
        String::from_utf8_lossy(&py.stderr)
    );
    let rows: Value = serde_json::from_slice(&py.stdout)?;
    for (d, id) in docs.iter().zip(&ids) {
        let r = &rows[id.to_string()];
        ensure!(
            r["script_sha256"] == d["script_sha256"]
                && r["submit_unix_s"] == d["submit_unix_s"]
                && r["qos"] == d.get("qos").cloned().unwrap_or(Value::Null),
            "job {id}: index row {r} vs archive"
        );
    }
    // Grouped by QOS: what SLURM said, here one group (no QOS) of the 3 jobs.
    let by_qos: Vec<Value> = serde_json::from_str(&jobscope_root(&[
        "audit", "usage", "--by", "qos", &acct, "--format", "json",
    ])?)?;
    ensure!(by_qos.len() == 1 && by_qos[0]["jobs"] == 3, "{by_qos:?}");

    // A fourth run of script a under a new name: the 2 earlier runs of that script and this one.
    let id = run("three", &sa)?;
    let st = wait_job(id, T)?;
    ensure!(st == "COMPLETED", "job {id}: {st}");
    let f = wait_for("the archive record", T, || archive_file(id).ok())?;
    let d: Value = serde_json::from_slice(&std::fs::read(&f)?)?;
    let h = &d["analysis"]["history"];
    ensure!(
        h["basis"] == "same_script" && h["runs"] == 3 && d["script_sha256"] == ha.as_str(),
        "history advice {h}"
    );
    Ok(())
}
