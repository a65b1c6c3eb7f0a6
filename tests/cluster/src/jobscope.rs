//! jobscope-specific helpers: the archived summary of a job, schema validation, job cgroups.

use anyhow::{anyhow, bail, ensure, Context, Result};
use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const JOBSCOPE: &str = "/usr/local/bin/jobscope";
pub const ARCHIVE: &str = "/var/lib/jobscope/archive";
pub const SCHEMA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/schema/job-summary.schema.json"
);

/// `jobscope show ID --json` as root, parsed; also validated against the published JSON Schema.
pub fn summary(id: u32) -> Result<Value> {
    let out = crate::release_cmd(JOBSCOPE, Path::new("/"))
        .args(["show", &id.to_string(), "--json"])
        .env_clear()
        .output()
        .context("cannot run jobscope")?;
    ensure!(
        out.status.success(),
        "jobscope show {id} --json failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value =
        serde_json::from_slice(&out.stdout).context("jobscope show --json printed invalid JSON")?;
    validate(&v).with_context(|| format!("archived summary of job {id}"))?;
    Ok(v)
}

/// The text report as root.
pub fn report_text(id: u32) -> Result<String> {
    let out = crate::release_cmd(JOBSCOPE, Path::new("/"))
        .args(["show", &id.to_string()])
        .env_clear()
        .output()?;
    ensure!(
        out.status.success(),
        "jobscope show {id} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Validates a summary against docs/schema/job-summary.schema.json.
pub fn validate(v: &Value) -> Result<()> {
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(SCHEMA)?)?;
    let validator =
        jsonschema::validator_for(&schema).map_err(|e| anyhow!("schema does not compile: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .take(10)
        .collect();
    if !errors.is_empty() {
        bail!(
            "summary does not validate against the schema: {}",
            errors.join("; ")
        );
    }
    Ok(())
}

/// Whether an archive file name is one of job `id`'s: `<id>-<start_unix_s>[-<cluster>].json`
/// (schema 2, archive/src/store.rs) or `<id>.json` (schema 1).
pub fn is_archive_name_of(name: &str, id: u32) -> bool {
    let Some(stem) = name.strip_suffix(".json") else {
        return false;
    };
    let mut it = stem.splitn(3, '-');
    it.next() == Some(id.to_string().as_str())
        && it
            .next()
            .is_none_or(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
}

/// The archived file of a job (admin tree; its newest run), with its mode and group checked by
/// callers.
pub fn archive_file(id: u32) -> Result<PathBuf> {
    let mut found = archive_files(id);
    found.sort_by_key(|p| p.file_name().map(|n| n.to_os_string()));
    found
        .pop()
        .ok_or_else(|| anyhow!("job {id}: no archive file under {ARCHIVE}"))
}

/// Every archived file of a job in the admin tree (one per run).
pub fn archive_files(id: u32) -> Vec<PathBuf> {
    walk(Path::new(ARCHIVE), 4)
        .into_iter()
        .filter(|e| {
            e.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| is_archive_name_of(n, id))
                && !e.to_string_lossy().contains("/users/")
        })
        .collect()
}

fn walk(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() && depth > 0 {
                out.extend(walk(&p, depth - 1));
            } else if p.is_file() {
                out.push(p);
            }
        }
    }
    out
}

pub fn mode_of(p: &Path) -> Result<(u32, u32, u32)> {
    let m = std::fs::metadata(p)?;
    Ok((m.permissions().mode() & 0o7777, m.uid(), m.gid()))
}

/// The CPU time the kernel counts for a job's whole cgroup, in seconds, read now, from the
/// `/proc/self/cgroup` text of one of the job's processes: v1 `cpuacct.usage` of the job's cpuacct
/// directory, v2 `cpu.stat usage_usec` of its unified directory. The job's directory is the path
/// cut before its first `step_*` component, whatever SLURM names it (`job_<id>`, or the SLUID on
/// SLURM 26.05).
pub fn kernel_job_cpu_s(proc_cgroup: &str) -> Result<f64> {
    let job_dir = |rel: &str| rel.split("/step_").next().unwrap_or(rel).to_string();
    let v1 = proc_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        ctrls
            .split(',')
            .any(|c| c == "cpuacct")
            .then(|| job_dir(path))
    });
    let (file, v2) = match v1 {
        Some(rel) => (format!("/sys/fs/cgroup/cpuacct{rel}/cpuacct.usage"), false),
        None => {
            let rel = proc_cgroup
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .ok_or_else(|| anyhow!("no cgroup line in {proc_cgroup:?}"))?;
            (format!("/sys/fs/cgroup{}/cpu.stat", job_dir(rel)), true)
        }
    };
    let text = std::fs::read_to_string(&file).with_context(|| format!("read {file}"))?;
    if v2 {
        let usec: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .ok_or_else(|| anyhow!("no usage_usec in {file}"))?
            .trim()
            .parse()?;
        Ok(usec / 1e6)
    } else {
        Ok(text.trim().parse::<f64>()? / 1e9)
    }
}

/// Whether this machine runs cgroup v2 only (the VM clusters, slurm-conf/vm/): no v1 controller
/// hierarchy under /sys/fs/cgroup.
pub fn pure_cgroup_v2() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
        && !Path::new("/sys/fs/cgroup/memory").exists()
}

/// A float field by JSON pointer.
pub fn f64_at(v: &Value, ptr: &str) -> Result<f64> {
    v.pointer(ptr)
        .and_then(|x| x.as_f64())
        .ok_or_else(|| anyhow!("{ptr} missing or not a number in {}", short(v)))
}

pub fn str_at<'a>(v: &'a Value, ptr: &str) -> Result<&'a str> {
    v.pointer(ptr)
        .and_then(|x| x.as_str())
        .ok_or_else(|| anyhow!("{ptr} missing or not a string in {}", short(v)))
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    s.chars().take(600).collect()
}
