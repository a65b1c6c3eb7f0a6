//! The epilog flow, and how one report per job comes out of several nodes' epilogs.
//!
//! Each node's epilog:
//! 1. reads its spool (`<spool_dir>/<job>.<node>/`) and builds its [`NodeSummary`];
//! 2. stores it in `<state_dir>/<job>/<node>.json` (state_dir must be shared by a job's nodes);
//! 3. if every node of the job has reported, claims the job (`O_EXCL` on `<state_dir>/<job>/claim`) and
//!    assembles, archives and renders the one job summary; otherwise it leaves that to the last node;
//! 4. removes its spool only once the job is archived (marker `<state_dir>/<job>/archived`).
//!
//! `jobscope reap` (cron) finishes jobs whose missing nodes never reported within `archive.node_wait_s`
//! (a partial report naming those nodes), and turns spools orphaned by a crash or reboot into reports.

use crate::archive;
use crate::assemble::{assemble, Inputs};
use crate::jobinfo::{self, EpilogEnv, JobInfo};
use anyhow::{Context, Result};
use jobscope_core::config::Config;
use jobscope_core::fsutil::{create_new, ensure_dir, is_safe_name, read_limited, write_atomic};
use jobscope_core::sampler::now_unix_ms;
use jobscope_core::slurm::expand_hostlist;
use jobscope_core::spool::writer::read_spool_file;
use jobscope_core::spool::{job_dir, SpoolFile};
use jobscope_core::summary::node::summarize_node;
use jobscope_core::summary::{JobSummary, NodeSummary};
use std::path::{Path, PathBuf};

pub const GENERATOR: &str = concat!("jobscope ", env!("CARGO_PKG_VERSION"));

/// Reads one node-job spool directory. Unreadable files are reported, not fatal.
pub fn read_spool_dir(dir: &Path) -> (Option<SpoolFile>, Vec<SpoolFile>, Vec<String>) {
    let mut problems = Vec::new();
    let mut series = None;
    let mut steps = Vec::new();
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            problems.push(format!("{}: not a directory; ignored", dir.display()));
            return (None, steps, problems);
        }
        Err(e) => {
            problems.push(format!("{}: {e}", dir.display()));
            return (None, steps, problems);
        }
    }
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    for name in names.iter().take(4096) {
        if !name.ends_with(".jsc") || name.starts_with('.') {
            continue;
        }
        let p = dir.join(name);
        match read_spool_file(&p) {
            Ok(f) if name == "job.jsc" => series = Some(f),
            Ok(f) => steps.push(f),
            Err(e) => problems.push(e.to_string()),
        }
    }
    (series, steps, problems)
}

fn job_state_dir(cfg: &Config, job_id: u32) -> PathBuf {
    cfg.paths.state_dir.join(job_id.to_string())
}

/// Summarises this node's spool for `env.job_id`.
pub fn node_summary(cfg: &Config, env: &EpilogEnv, end_unix_ms: u64) -> (NodeSummary, Vec<String>) {
    let dir = job_dir(&cfg.paths.spool_dir, env.job_id, &env.node);
    let (series, steps, mut problems) = read_spool_dir(&dir);
    let mut ns = summarize_node(series.as_ref(), &steps, &env.node, end_unix_ms);
    ns.job_id = env.job_id;
    if let Some(uid) = env.uid {
        ns.uid = uid;
    }
    ns.quality.notes.append(&mut problems.clone());
    problems.retain(|p| !p.contains("No such file"));
    (ns, problems)
}

/// Stores a node summary in the shared state directory.
pub fn store_node(cfg: &Config, ns: &NodeSummary) -> Result<()> {
    ensure_dir(&cfg.paths.state_dir, 0o700, 0, 0)?;
    let dir = job_state_dir(cfg, ns.job_id);
    ensure_dir(&dir, 0o700, 0, 0)?;
    let name = format!("{}.json", ns.node);
    anyhow::ensure!(is_safe_name(&name), "unsafe node name {:?}", ns.node);
    write_atomic(&dir, &name, &serde_json::to_vec(ns)?, 0o600, None)?;
    Ok(())
}

/// Node summaries stored for a job.
pub fn stored_nodes(cfg: &Config, job_id: u32) -> Vec<NodeSummary> {
    let dir = job_state_dir(cfg, job_id);
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".json") || name.starts_with('.') {
                continue;
            }
            if let Ok(b) = read_limited(&e.path(), 64 * 1024 * 1024) {
                if let Ok(ns) = serde_json::from_slice::<NodeSummary>(&b) {
                    out.push(ns);
                }
            }
        }
    }
    out
}

pub fn is_archived(cfg: &Config, job_id: u32) -> bool {
    job_state_dir(cfg, job_id).join("archived").exists()
}

/// Claims the right to assemble the job (exactly one node wins).
fn claim(cfg: &Config, job_id: u32) -> bool {
    create_new(&job_state_dir(cfg, job_id).join("claim"), 0o600).is_ok()
}

/// Assembles, archives and returns the job summary. The archive is written before anything is removed.
pub fn finish_job(
    cfg: &Config,
    env: &EpilogEnv,
    info: Option<&JobInfo>,
    expected: Vec<String>,
) -> Result<(JobSummary, PathBuf)> {
    let nodes = stored_nodes(cfg, env.job_id);
    let mut s = assemble(Inputs {
        env,
        info,
        nodes,
        expected_nodes: expected,
        generator: GENERATOR.into(),
    });
    s.analysis = Some(jobscope_core::summary::analysis::analyze(&s, &cfg.report));
    let written = archive::write(&cfg.paths.archive_dir, &cfg.archive.admin_group, &s)
        .context("archive write failed")?;
    let dir = job_state_dir(cfg, env.job_id);
    write_atomic(
        &dir,
        "archived",
        written.path.display().to_string().as_bytes(),
        0o600,
        None,
    )?;
    // The node summaries are inside the archived document now.
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().ends_with(".json") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    Ok((s, written.path))
}

/// What one Epilog run did.
#[derive(Debug)]
pub enum Outcome {
    Archived { path: PathBuf },
    WaitingForNodes { missing: Vec<String> },
    AlreadyArchived,
}

/// The Epilog: steps 1–4 of the module doc.
pub fn run_epilog(cfg: &Config, env: &EpilogEnv, log: &mut dyn FnMut(&str)) -> Result<Outcome> {
    if is_archived(cfg, env.job_id) {
        remove_spool(cfg, env.job_id, &env.node, log);
        return Ok(Outcome::AlreadyArchived);
    }
    let now = now_unix_ms();
    let (ns, problems) = node_summary(cfg, env, now);
    for p in &problems {
        log(&format!("job {}: {p}", env.job_id));
    }
    store_node(cfg, &ns)?;
    let expected: Vec<String> = env
        .nodelist
        .as_deref()
        .and_then(expand_hostlist)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| vec![env.node.clone()]);
    let have: Vec<String> = stored_nodes(cfg, env.job_id)
        .into_iter()
        .map(|n| n.node)
        .collect();
    let missing: Vec<String> = expected
        .iter()
        .filter(|e| !have.contains(e))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Ok(Outcome::WaitingForNodes { missing });
    }
    if !claim(cfg, env.job_id) {
        // Another node of this job is assembling it right now; its archive marker lets a later
        // epilog on this node (see `sweep_archived_spools`) remove this node's spool.
        sweep_archived_spools(cfg, &env.node, log);
        return Ok(Outcome::AlreadyArchived);
    }
    let info = jobinfo::query(env.job_id);
    if info.is_none() {
        log(&format!(
            "job {}: squeue gave no job information; report has no name/limit",
            env.job_id
        ));
    }
    let (_s, path) = finish_job(cfg, env, info.as_ref(), expected)?;
    remove_spool(cfg, env.job_id, &env.node, log);
    sweep_archived_spools(cfg, &env.node, log);
    Ok(Outcome::Archived { path })
}

/// Removes this node's spools of jobs that have since been archived (a node that did not assemble
/// its job keeps its spool until the archive exists). Bounded: looks at most at 256 entries per run.
pub fn sweep_archived_spools(cfg: &Config, node: &str, log: &mut dyn FnMut(&str)) {
    let Ok(rd) = std::fs::read_dir(&cfg.paths.spool_dir) else { return };
    let suffix = format!(".{node}");
    for e in rd.flatten().take(256) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(job) = name.strip_suffix(&suffix).and_then(|j| j.parse::<u32>().ok()) else { continue };
        if is_archived(cfg, job) {
            remove_spool(cfg, job, node, log);
        }
    }
}

/// Removes this node's spool of a job, once archived.
pub fn remove_spool(cfg: &Config, job_id: u32, node: &str, log: &mut dyn FnMut(&str)) {
    let dir = job_dir(&cfg.paths.spool_dir, job_id, node);
    if !is_archived(cfg, job_id) {
        return;
    }
    if let Some(keep) = &cfg.archive.keep_spools_dir {
        copy_spool(&dir, &keep.join(format!("{job_id}.{node}")), log);
    }
    if let Ok(m) = std::fs::symlink_metadata(&dir) {
        if m.is_dir() {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                log(&format!("{}: {e}", dir.display()));
            }
        }
    }
}

/// Copies the regular files of a spool directory (no symlinks followed) into `to`.
fn copy_spool(from: &Path, to: &Path, log: &mut dyn FnMut(&str)) {
    if ensure_dir(to, 0o700, 0, 0).is_err() {
        log(&format!("{}: cannot create spool copy directory", to.display()));
        return;
    }
    for e in std::fs::read_dir(from).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let (true, Ok(bytes)) = (is_safe_name(&name), read_limited(&e.path(), 4 * 1024 * 1024)) {
            let _ = write_atomic(to, &name, &bytes, 0o600, None);
        }
    }
}

/// Appends a line to the epilog log (best effort: the epilog must not fail for want of a log).
pub fn append_log(path: &Path, line: &str) {
    use std::io::Write;
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{} {line}", now_unix_ms() / 1000);
    }
}
