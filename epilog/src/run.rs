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
        // gpu.jsc shares the framing but is its own series: see `gpu_summaries`.
        if !name.ends_with(".jsc")
            || name.starts_with('.')
            || name == jobscope_core::gpu::GPU_FILE_NAME
        {
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
    ns.gpus = gpu_summaries(cfg, &dir, ns.elapsed_s, &mut problems);
    ns.job_id = env.job_id;
    if let Some(uid) = env.uid {
        ns.uid = uid;
    }
    ns.quality.notes.append(&mut problems.clone());
    problems.retain(|p| !p.contains("No such file"));
    (ns, problems)
}

/// The node's GPU summaries from `gpu.jsc` (none when the job had no GPUs).
pub fn gpu_summaries(
    cfg: &Config,
    dir: &Path,
    elapsed_s: f64,
    problems: &mut Vec<String>,
) -> Vec<jobscope_core::gpu::GpuSummary> {
    let p = dir.join(jobscope_core::gpu::GPU_FILE_NAME);
    if std::fs::symlink_metadata(&p).is_err() {
        return Vec::new();
    }
    match jobscope_core::gpu::read_gpu_file(&p) {
        Ok(series) => {
            let params = jobscope_core::gpu::summary::GpuSummaryParams {
                idle_util_pct: cfg.gpu.idle_util_pct,
                idle_min_s: cfg.gpu.idle_min_s as f64,
                ..Default::default()
            };
            problems.extend(jobscope_core::gpu::summary::gpu_quality_notes(&series));
            jobscope_core::gpu::summary::summarize_gpus_with(&series, elapsed_s, &params)
        }
        Err(e) => {
            problems.push(e.to_string());
            Vec::new()
        }
    }
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
    if let Some(day) = written.path.parent() {
        let name = written
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // The manifest is evidence, not the record: a failure is logged, the report stands.
        if let Err(e) = crate::manifest::append(day, &name, &written.bytes) {
            append_log(
                &cfg.paths.log_file,
                &format!("job {}: manifest: {e}", s.job_id),
            );
        }
    }
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
    // Remember which nodes the job had, for `reap` when SLURM has forgotten the job.
    let dir = job_state_dir(cfg, env.job_id);
    if !dir.join("expected").exists() {
        write_atomic(
            &dir,
            "expected",
            expected.join("\n").as_bytes(),
            0o600,
            None,
        )?;
    }
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
    let (s, path) = finish_job(cfg, env, info.as_ref(), expected)?;
    remove_spool(cfg, env.job_id, &env.node, log);
    sweep_archived_spools(cfg, &env.node, log);
    // Archive first (done above), mail second.
    crate::notify::notify(cfg, &s, info.as_ref(), log);
    Ok(Outcome::Archived { path })
}

/// Removes this node's spools of jobs that have since been archived (a node that did not assemble
/// its job keeps its spool until the archive exists). Bounded: looks at most at 256 entries per run.
pub fn sweep_archived_spools(cfg: &Config, node: &str, log: &mut dyn FnMut(&str)) {
    let Ok(rd) = std::fs::read_dir(&cfg.paths.spool_dir) else {
        return;
    };
    let suffix = format!(".{node}");
    for e in rd.flatten().take(256) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(job) = name
            .strip_suffix(&suffix)
            .and_then(|j| j.parse::<u32>().ok())
        else {
            continue;
        };
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

/// What `jobscope reap` did.
#[derive(Debug, Default)]
pub struct ReapReport {
    /// Jobs finished as partial reports because some nodes never reported.
    pub partial: Vec<(u32, Vec<String>)>,
    /// Local spools turned into node summaries because no epilog ever ran for them (crash, reboot).
    pub orphans: Vec<u32>,
}

/// Finishes what epilogs could not:
/// 1. spools on this node whose job is no longer running and which no epilog collected (the node
///    crashed or rebooted mid-job, or slurmd died): summarised as partial node summaries;
/// 2. jobs whose first node summary is older than `archive.node_wait_s` and whose other nodes never
///    reported: archived as partial reports that name the missing nodes.
///
/// `is_running(job)` asks SLURM; it is a parameter so the logic can be tested without a cluster.
pub fn reap(
    cfg: &Config,
    node: &str,
    now_ms: u64,
    is_running: &dyn Fn(u32) -> bool,
    query: &dyn Fn(u32) -> Option<JobInfo>,
    log: &mut dyn FnMut(&str),
) -> Result<ReapReport> {
    let mut rep = ReapReport::default();
    sweep_archived_spools(cfg, node, log);
    prune_state(cfg, now_ms, log);
    crate::notify::send_pending_digests(cfg, log);
    // 1. Orphaned spools of this node (including ones moved aside as stale).
    let suffix = format!(".{node}");
    let mut orphan_dirs: Vec<(u32, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(&cfg.paths.spool_dir)
        .into_iter()
        .flatten()
        .flatten()
        .take(1024)
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let base = name
            .strip_prefix(".stale.")
            .map(|rest| rest.rsplit_once('.').map(|(a, _)| a).unwrap_or(rest))
            .unwrap_or(&name);
        let Some(job) = base
            .strip_suffix(&suffix)
            .and_then(|j| j.parse::<u32>().ok())
        else {
            continue;
        };
        let stale = name.starts_with(".stale.");
        if stale
            || (!is_running(job)
                && !is_archived(cfg, job)
                && !job_state_dir(cfg, job)
                    .join(format!("{node}.json"))
                    .exists())
        {
            orphan_dirs.push((job, e.path()));
        }
    }
    for (job, dir) in orphan_dirs {
        let (series, steps, problems) = read_spool_dir(&dir);
        for p in problems {
            log(&format!("reap: {p}"));
        }
        let end = series
            .as_ref()
            .and_then(|s| {
                s.end
                    .as_ref()
                    .map(|e| e.t_ms)
                    .or_else(|| s.buckets.last().map(|b| b.t_last_ms))
            })
            .unwrap_or(now_ms);
        let mut ns = summarize_node(series.as_ref(), &steps, node, end);
        ns.job_id = job;
        ns.quality.notes.push("collected by `jobscope reap`: no epilog ran for this job on this node (crash or reboot?)".into());
        // A stale spool of an earlier job with a reused id must not overwrite the later job's data.
        if dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(".stale."))
            && is_archived(cfg, job)
        {
            log(&format!(
                "reap: {} belongs to an earlier job {job} whose id was reused; kept for inspection",
                dir.display()
            ));
            continue;
        }
        store_node(cfg, &ns)?;
        rep.orphans.push(job);
        let _ = std::fs::remove_dir_all(&dir);
    }
    // 2. Jobs waiting too long for their other nodes.
    let wait_ms = cfg.archive.node_wait_s.saturating_mul(1000);
    for e in std::fs::read_dir(&cfg.paths.state_dir)
        .into_iter()
        .flatten()
        .flatten()
        .take(4096)
    {
        let Some(job) = e.file_name().to_string_lossy().parse::<u32>().ok() else {
            continue;
        };
        if is_archived(cfg, job) || is_running(job) {
            continue;
        }
        let nodes = stored_nodes(cfg, job);
        let Some(oldest) = nodes.iter().map(|n| n.end_unix_ms).min() else {
            continue;
        };
        let info = query(job);
        // The expected node list: SLURM's if it still knows the job, else what the node summaries say.
        let recorded = read_limited(&job_state_dir(cfg, job).join("expected"), 1 << 20)
            .ok()
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .lines()
                    .filter(|l| is_safe_name(l))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .filter(|v| !v.is_empty());
        let expected: Vec<String> = recorded
            .or_else(|| {
                info.as_ref()
                    .and_then(|i| i.nodes.as_deref())
                    .and_then(expand_hostlist)
            })
            .unwrap_or_else(|| nodes.iter().map(|n| n.node.clone()).collect());
        let waited = now_ms.saturating_sub(oldest) >= wait_ms;
        let complete = expected.iter().all(|x| nodes.iter().any(|n| &n.node == x));
        if !(waited || complete) || !claim(cfg, job) {
            continue;
        }
        let env = EpilogEnv {
            job_id: job,
            node: node.to_string(),
            uid: nodes.first().map(|n| n.uid),
            num_nodes: Some(expected.len() as u32),
            exit_code2: None,
            ..Default::default()
        };
        let missing: Vec<String> = expected
            .iter()
            .filter(|x| !nodes.iter().any(|n| &n.node == *x))
            .cloned()
            .collect();
        let (s, path) = finish_job(cfg, &env, info.as_ref(), expected)?;
        crate::notify::notify(cfg, &s, info.as_ref(), log);
        log(&format!(
            "reap: job {job} archived at {} (missing nodes: {missing:?})",
            path.display()
        ));
        rep.partial.push((job, missing));
    }
    Ok(rep)
}

/// How long the per-job state (claim and `archived` markers, array rows) is kept after archiving:
/// long enough for late epilogs and `reap` runs to see that the job is done.
pub const STATE_KEEP_MS: u64 = 7 * 86_400 * 1000;

/// Removes per-job state directories archived more than [`STATE_KEEP_MS`] ago.
fn prune_state(cfg: &Config, now_ms: u64, log: &mut dyn FnMut(&str)) {
    let old = |p: &Path| {
        std::fs::symlink_metadata(p)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .is_some_and(|d| now_ms.saturating_sub(d.as_millis() as u64) > STATE_KEEP_MS)
    };
    for e in std::fs::read_dir(&cfg.paths.state_dir)
        .into_iter()
        .flatten()
        .flatten()
        .take(10_000)
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let done = if name == "arrays" {
            for a in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
                if old(&a.path().join("digest-claimed")) {
                    let _ = std::fs::remove_dir_all(a.path());
                }
            }
            false
        } else {
            name.parse::<u32>().is_ok() && old(&e.path().join("archived"))
        };
        if done {
            if let Err(err) = std::fs::remove_dir_all(e.path()) {
                log(&format!("reap: {}: {err}", e.path().display()));
            }
        }
    }
}

/// Copies the regular files of a spool directory (no symlinks followed) into `to`.
fn copy_spool(from: &Path, to: &Path, log: &mut dyn FnMut(&str)) {
    if ensure_dir(to, 0o700, 0, 0).is_err() {
        log(&format!(
            "{}: cannot create spool copy directory",
            to.display()
        ));
        return;
    }
    for e in std::fs::read_dir(from).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let (true, Ok(bytes)) = (
            is_safe_name(&name),
            read_limited(&e.path(), 4 * 1024 * 1024),
        ) {
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
    use std::os::unix::fs::OpenOptionsExt;
    // Root appends here: never through a symlink.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        // One write(2) per line, so epilogs ending together do not interleave their lines.
        let _ = f.write_all(format!("{} {line}\n", now_unix_ms() / 1000).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobscope_core::cgroup::CgroupVersion;
    use jobscope_core::sample::Reading;
    use jobscope_core::spool::writer::{Limits, SeriesWriter, StepWriter};
    use jobscope_core::spool::{Bucket, End, Event, Header, FORMAT_VERSION};

    fn cfg(root: &Path) -> Config {
        let mut c = Config::default();
        c.paths.spool_dir = root.join("spool");
        c.paths.state_dir = root.join("state");
        c.paths.archive_dir = root.join("archive");
        c.paths.log_file = root.join("log");
        c.archive.node_wait_s = 60;
        c
    }

    fn header(job: u32, node: &str, series: &str) -> Header {
        Header {
            format_version: FORMAT_VERSION,
            job_id: job,
            node: node.into(),
            series: series.into(),
            uid: 4242,
            gid: 4242,
            cgroup_version: Some(CgroupVersion::V1),
            cgroup_path: None,
            boot_id: None,
            boot_time_s: None,
            start_unix_ms: 1_000_000,
            cadence_s: 30,
            plugin_version: "t".into(),
            alloc_cores: Some(2),
            alloc_mem_bytes: Some(1 << 30),
            handover: None,
        }
    }

    /// A spool as the plugin leaves it; `crashed` = the sampler never wrote its end record and no
    /// step reached its exit (the node died mid-job).
    fn make_spool(c: &Config, job: u32, node: &str, crashed: bool) {
        let dir = job_dir(&c.paths.spool_dir, job, node);
        std::fs::create_dir_all(&dir).unwrap();
        let mut w =
            SeriesWriter::create(&dir, "job.jsc", header(job, node, "job"), Limits::default())
                .unwrap();
        for i in 0..5u64 {
            w.push(Bucket {
                t_first_ms: 1_000_000 + i * 30_000,
                t_last_ms: 1_000_000 + i * 30_000,
                n: 1,
                last: Reading {
                    cpu_usage_ns: Some(i * 30_000_000_000),
                    mem_current_bytes: Some(1 << 28),
                    ..Default::default()
                },
                gauges: Default::default(),
            })
            .unwrap();
        }
        if !crashed {
            w.end(&End {
                t_ms: 1_150_000,
                reason: "stopped".into(),
                samples_taken: 5,
                samples_missed: 0,
            })
            .unwrap();
            let mut s = StepWriter::create(&dir, &header(job, node, "batch")).unwrap();
            s.event(&Event {
                t_ms: 1_149_000,
                kind: "step_exit".into(),
                step: Some("batch".into()),
                job: Some(Reading {
                    cpu_usage_ns: Some(140_000_000_000),
                    ..Default::default()
                }),
                step_reading: None,
                exit_status: Some(0),
                message: None,
            })
            .unwrap();
        }
    }

    fn env(job: u32, node: &str, nodelist: &str) -> EpilogEnv {
        EpilogEnv {
            job_id: job,
            node: node.into(),
            uid: Some(4242),
            nodelist: Some(nodelist.into()),
            exit_code2: Some("0:0".into()),
            ..Default::default()
        }
    }

    #[test]
    fn two_nodes_give_exactly_one_report_whatever_the_order() {
        for order in [["a", "b"], ["b", "a"]] {
            let d = tempfile::tempdir().unwrap();
            let c = cfg(d.path());
            make_spool(&c, 77, "a", false);
            make_spool(&c, 77, "b", false);
            let mut log = |_: &str| {};
            let first = run_epilog(&c, &env(77, order[0], "a,b"), &mut log).unwrap();
            assert!(
                matches!(first, Outcome::WaitingForNodes { ref missing } if missing == &vec![order[1].to_string()]),
                "{first:?}"
            );
            let second = run_epilog(&c, &env(77, order[1], "a,b"), &mut log).unwrap();
            assert!(matches!(second, Outcome::Archived { .. }), "{second:?}");
            let again = run_epilog(&c, &env(77, order[0], "a,b"), &mut log).unwrap();
            assert!(matches!(again, Outcome::AlreadyArchived));
            let bytes = archive::find(&c.paths.archive_dir, 77, 0).unwrap();
            let s: JobSummary = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(s.nodes.len(), 2);
            assert!(!s.partial, "{:?}", s.partial_reasons);
            // 140 CPU-s per node from the batch exit readings
            assert_eq!(s.cpu.usage_s, Some(280.0));
            // both spools are gone once archived (the first node's by its next epilog's sweep)
            assert!(
                !job_dir(&c.paths.spool_dir, 77, "a").exists()
                    && !job_dir(&c.paths.spool_dir, 77, "b").exists()
            );
        }
    }

    #[test]
    fn missing_node_gives_partial_report_after_the_wait() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path());
        make_spool(&c, 78, "a", false);
        let mut log = |_: &str| {};
        run_epilog(&c, &env(78, "a", "a,b"), &mut log).unwrap();
        let no = |_: u32| false;
        let none = |_: u32| None;
        let early = reap(&c, "a", now_unix_ms(), &no, &none, &mut log).unwrap();
        assert!(early.partial.is_empty(), "must wait node_wait_s first");
        let later = reap(&c, "a", now_unix_ms() + 61_000, &no, &none, &mut log).unwrap();
        assert_eq!(later.partial, vec![(78, vec!["b".to_string()])]);
        let s: JobSummary =
            serde_json::from_slice(&archive::find(&c.paths.archive_dir, 78, 0).unwrap()).unwrap();
        assert!(s.partial && s.missing_nodes == vec!["b"]);
        assert!(s.partial_reasons.iter().any(|r| r.contains("node b")));
    }

    #[test]
    fn crash_mid_job_still_gives_a_partial_report() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path());
        make_spool(&c, 79, "a", true);
        let mut log = |_: &str| {};
        let r = reap(&c, "a", now_unix_ms(), &|_| false, &|_| None, &mut log).unwrap();
        assert_eq!(r.orphans, vec![79]);
        assert_eq!(
            r.partial.len(),
            1,
            "single-node job: complete once its node is in"
        );
        let s: JobSummary =
            serde_json::from_slice(&archive::find(&c.paths.archive_dir, 79, 0).unwrap()).unwrap();
        assert!(s.partial, "a crashed job's report is partial");
        assert!(
            s.partial_reasons
                .iter()
                .any(|r| r.contains("stopped early")),
            "{:?}",
            s.partial_reasons
        );
        // 4 intervals of 30 CPU-s seen before the crash
        assert_eq!(s.cpu.usage_s, Some(120.0));
    }

    #[test]
    fn running_jobs_are_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path());
        make_spool(&c, 80, "a", true);
        let mut log = |_: &str| {};
        let r = reap(&c, "a", now_unix_ms(), &|_| true, &|_| None, &mut log).unwrap();
        assert!(r.orphans.is_empty() && r.partial.is_empty());
        assert!(job_dir(&c.paths.spool_dir, 80, "a").exists());
    }
}
