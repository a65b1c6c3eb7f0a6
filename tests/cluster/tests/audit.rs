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
const PYTHON: &str = "/opt/jobscope-pyenv/bin/python";

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
    for (user, acct, part, cpus) in [
        ("alice", &a, "debug", "1"),
        ("alice", &b, "high", "2"),
        ("alice", &a, "debug", "2"),
        ("bob", &a, "high", "1"),
        ("bob", &b, "debug", "1"),
    ] {
        ids.push((
            user,
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
    for (_, id) in &ids {
        let st = wait_job(*id, T)?;
        ensure!(st == "COMPLETED", "job {id}: {st}");
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

    // The aligned table names every group.
    let table = jobscope_root(&["audit", "usage", "--by", "user,partition", &filt])?;
    ensure!(
        table
            .lines()
            .next()
            .is_some_and(|h| h.starts_with("user") && h.contains("core_hours_alloc")),
        "{table}"
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
    let py = std::process::Command::new(PYTHON)
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
        .context("pyarrow (slurm-conf/install-deps.sh makes /opt/jobscope-pyenv)")?;
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
