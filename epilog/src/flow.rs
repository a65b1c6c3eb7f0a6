//! The epilog flow, and how one report per job comes out of several nodes' epilogs. Each node's
//! Epilog reads its spool (`<spool_dir>/<job>.<node>/`) and builds its [`NodeSummary`]; what
//! happens next is the node's `transport.mode` (docs/cluster.md):
//!
//! - `none` (the default: nodes share nothing): a one-node job is reported by its node. A
//!   multi-node job is reported by its first node alone, with that node's figures and a reason
//!   naming the nodes it could not see; its other nodes remove their spools. Never one report per
//!   node.
//! - `shared_dir`: the summary is stored in `<state_dir>/<job>/<node>.json` (state_dir shared by
//!   the job's nodes); if every node of the job has reported, the node claims the job (`O_EXCL` on
//!   `<state_dir>/<job>/claim`) and assembles, archives and mails the one report; otherwise it
//!   leaves that to the last node. It removes its spool only once the job is archived (marker
//!   `<state_dir>/<job>/archived`).
//! - `postgres`: the summary goes into the node-local outbox and then to PostgreSQL
//!   (jobscope-transport); the collector (`jobscope collect`, [`crate::collect`]) makes the report.
//!
//! `jobscope reap` (cron) finishes jobs whose missing nodes never reported within `archive.node_wait_s`
//! (a partial report naming those nodes), turns spools orphaned by a crash or reboot into summaries,
//! and sends what the outbox still holds.

use anyhow::{Context, Result};
use jobscope_archive as archive;
use jobscope_common::fsutil::{create_new, ensure_dir, is_safe_name, read_limited, write_atomic};
use jobscope_common::now_unix_ms;
use jobscope_config::{Config, TransportMode};
use jobscope_model::job::JobFacts;
use jobscope_model::spool::job_dir;
use jobscope_model::summary::{JobSummary, NodeSummary};
use jobscope_report::pipeline::{self, NodeEnd};
use jobscope_report::slurm::{EpilogEnv, Slurm};
use jobscope_transport::outbox::Outbox;
use jobscope_transport::{send, Envelope};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use jobscope_report::pipeline::GENERATOR;

fn job_state_dir(cfg: &Config, job_id: u32) -> PathBuf {
    cfg.paths.state_dir.join(job_id.to_string())
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

/// A requeued job runs again under the same id, and its state directory still holds the first
/// run's `archived` marker, which would make this run's Epilog skip its report. A spool that began
/// after the archived run had ended on every node it was archived from (`archived_end_ms`, the
/// latest end of its node summaries) is a later run's: SLURM starts a requeued job again only after
/// every Epilog of the earlier run has finished, and a node of the archived run whose summary
/// came too late began before that run ended. Then the earlier run's state moves to
/// `<job>.run<start_s>` and this run proceeds. Returns whether it did.
///
/// Without `archived_end_ms` (a state written by an older version, or a run archived with no node
/// summary), a spool that began more than [`LATER_RUN_S`] after the archived run's start counts as
/// a later run: SLURM holds a requeued job back for a minute or more unless an admin lets it start.
fn set_aside_earlier_run(
    cfg: &Config,
    job_id: u32,
    spool: &Path,
    log: &mut dyn FnMut(&str),
) -> bool {
    let state = job_state_dir(cfg, job_id);
    // The marker holds the archived record's path; its name is the run's key.
    let Some(archived_start_s) = read_limited(&state.join("archived"), 4096)
        .ok()
        .and_then(|b| {
            let p = PathBuf::from(String::from_utf8_lossy(&b).trim());
            match archive::RecordName::parse(&p.file_name()?.to_string_lossy())? {
                archive::RecordName::Keyed(k) => Some(k.start_unix_s),
                archive::RecordName::Legacy(_) => None,
            }
        })
    else {
        return false;
    };
    let Some(spool_start_ms) = pipeline::read_node_dir(spool).start_unix_ms() else {
        return false;
    };
    let archived_end_ms = read_limited(&state.join(ARCHIVED_END_FILE), 64)
        .ok()
        .and_then(|b| String::from_utf8_lossy(&b).trim().parse::<u64>().ok());
    let later = match archived_end_ms {
        Some(end_ms) => spool_start_ms > end_ms,
        None => spool_start_ms / 1000 > archived_start_s + LATER_RUN_S,
    };
    if !later {
        return false;
    }
    let aside = cfg
        .paths
        .state_dir
        .join(format!("{job_id}.run{archived_start_s}"));
    match std::fs::rename(&state, &aside) {
        Ok(()) => {
            log(&format!(
                "job {job_id}: a later run (requeued): the run of {archived_start_s} is archived, its state kept in {}",
                aside.display()
            ));
            true
        }
        // Another node of the job did it first.
        Err(_) => !is_archived(cfg, job_id),
    }
}

/// In a job's state directory, beside `archived`: when the archived run ended, the latest end of
/// the node summaries it was made from (ms since the epoch).
const ARCHIVED_END_FILE: &str = "archived_end_ms";

/// Without [`ARCHIVED_END_FILE`]: how long after the archived run's start a spool must begin to be
/// a later run's.
const LATER_RUN_S: u64 = 10;

pub fn is_archived(cfg: &Config, job_id: u32) -> bool {
    job_state_dir(cfg, job_id).join("archived").exists()
}

/// Claims the right to assemble the job (exactly one node wins).
fn claim(cfg: &Config, job_id: u32) -> bool {
    create_new(&job_state_dir(cfg, job_id).join("claim"), 0o600).is_ok()
}

/// Gives the claim back, so that the next epilog or `reap` tries again.
fn release_claim(cfg: &Config, job_id: u32) -> std::io::Result<()> {
    match std::fs::remove_file(job_state_dir(cfg, job_id).join("claim")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// [`finish_job`] for a job this process has claimed. When finishing fails (the archive cannot be
/// written, its admin group is missing…), the claim is released: otherwise no later epilog or
/// `reap` would ever try again, and the report would be lost.
fn finish_claimed(
    cfg: &Config,
    facts: &JobFacts,
    expected: &[String],
    slurm: &dyn Slurm,
    log: &mut dyn FnMut(&str),
) -> Result<(JobSummary, PathBuf)> {
    let nodes = stored_nodes(cfg, facts.job_id);
    let r = finish_job(cfg, facts, nodes, expected, slurm);
    if r.is_err() {
        if let Err(e) = release_claim(cfg, facts.job_id) {
            log(&format!(
                "job {}: finishing failed and the claim could not be released: {e}",
                facts.job_id
            ));
        }
    }
    r
}

/// The job's summary from its nodes' summaries, as every mode makes it: assembled, analysed, the
/// group named where SLURM did not, enriched from the user's history; in mode `none` the nodes
/// the first node could not see are named as unseen, not as failed.
pub fn assemble(
    cfg: &Config,
    facts: &JobFacts,
    nodes: Vec<NodeSummary>,
    expected: &[String],
    slurm: &dyn Slurm,
) -> JobSummary {
    let mut s = pipeline::job(facts, nodes, expected, cfg, GENERATOR, &|f, e| {
        slurm.decide_end(f, e)
    });
    // `--mem-update` exists only on some releases: the adapter says whether this one has it.
    let mem_update =
        jobscope_model::summary::analysis::mem_update_advice(&s, &cfg.report, slurm.features());
    if let (Some(a), Some(x)) = (s.analysis.as_mut(), mem_update) {
        a.advice.push(x);
    }
    if cfg.transport.mode == TransportMode::None {
        jobscope_model::summary::job::unseen_without_transport(&mut s);
    }
    // The group's name as this host knows it, when SLURM did not say.
    if s.group.is_none() {
        s.group = s.gid.and_then(jobscope_common::users::group_name);
    }
    // The peer percentile and advice from the user's earlier runs: two small files of the audit
    // index (archive/src/history.rs), nothing when there is no index.
    jobscope_archive::history::enrich(cfg, &mut s);
    s
}

/// Archives `s` (the record first; the manifest line and the owner's copy are not the record:
/// their failures are logged, it stands) and returns the record's path.
pub fn archive_summary(cfg: &Config, s: &JobSummary) -> Result<PathBuf> {
    let written = archive::Store::new(&cfg.paths.archive_dir, &cfg.archive.admin_group)
        .write(s)
        .context("archive write failed")?;
    for p in &written.problems {
        append_log(&cfg.paths.log_file, &format!("job {}: {p}", s.job_id));
    }
    Ok(written.path)
}

/// How long writing the AdminComment may take: the Epilog must not hang on SLURM.
pub const ADMIN_COMMENT_LIMIT: Duration = Duration::from_secs(5);

/// Where the site turned `[report] admin_comment` on: the job's verdict in one line
/// (`jobscope_report::admin_comment`) into SLURM's AdminComment, by whoever archived the job,
/// after the archive and the mail. Bounded by [`ADMIN_COMMENT_LIMIT`]; a failure (no slurmdbd,
/// SLURM away) is logged and changes nothing else.
pub fn write_admin_comment(
    cfg: &Config,
    s: &JobSummary,
    slurm: &dyn Slurm,
    log: &mut dyn FnMut(&str),
) {
    if !cfg.report.admin_comment {
        return;
    }
    let line = jobscope_report::admin_comment::admin_comment(
        s,
        jobscope_report::admin_comment::Taken::Archived,
    );
    match slurm.set_admin_comment(s.job_id, s.cluster.as_deref(), &line, ADMIN_COMMENT_LIMIT) {
        Ok(()) => log(&format!("job {}: AdminComment written: {line}", s.job_id)),
        // The line too: what SLURM would have shown, for the site (and the cluster test) to see.
        Err(e) => log(&format!(
            "job {}: AdminComment not written: {e} (the line: {line})",
            s.job_id
        )),
    }
}

/// Assembles, archives and returns the job summary from `nodes` (modes `none` and `shared_dir`:
/// the state directory's markers follow). The archive is written before anything is removed.
pub fn finish_job(
    cfg: &Config,
    facts: &JobFacts,
    nodes: Vec<NodeSummary>,
    expected: &[String],
    slurm: &dyn Slurm,
) -> Result<(JobSummary, PathBuf)> {
    let nodes_end_ms = nodes.iter().map(|n| n.end_unix_ms).max();
    let s = assemble(cfg, facts, nodes, expected, slurm);
    let written_path = archive_summary(cfg, &s)?;

    let dir = job_state_dir(cfg, facts.job_id);
    // Written before the marker: a marker is never without the end that tells a later run's
    // spool from this one's (set_aside_earlier_run).
    match nodes_end_ms {
        Some(end_ms) => {
            write_atomic(
                &dir,
                ARCHIVED_END_FILE,
                end_ms.to_string().as_bytes(),
                0o600,
                None,
            )?;
        }
        None => {
            let _ = std::fs::remove_file(dir.join(ARCHIVED_END_FILE));
        }
    }
    write_atomic(
        &dir,
        "archived",
        written_path.display().to_string().as_bytes(),
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
    Ok((s, written_path))
}

/// What one Epilog run did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    Archived {
        path: PathBuf,
    },
    WaitingForNodes {
        missing: Vec<String>,
    },
    AlreadyArchived,
    /// Mode `postgres`: the database has this node's summary.
    Sent,
    /// Mode `postgres`: the summary waits in the outbox (`jobscope reap` retries).
    Queued {
        why: String,
    },
    /// Mode `none`, a node of a multi-node job other than its first: the first node reports.
    LeftToFirstNode {
        first: String,
    },
}

impl Outcome {
    /// What happened, in words for people (the log, `jobscope epilog`), after `job <id>: `.
    pub fn describe(&self) -> String {
        match self {
            Outcome::Archived { path } => format!("report archived at {}", path.display()),
            Outcome::WaitingForNodes { missing } => format!(
                "this node's summary is stored; waiting for {} other node(s): {}",
                missing.len(),
                missing.join(", ")
            ),
            Outcome::AlreadyArchived => {
                "already archived (or being archived by another node)".to_string()
            }
            Outcome::Sent => "this node's summary is in the database".to_string(),
            Outcome::Queued { why } => {
                format!("this node's summary waits in the outbox (jobscope reap retries): {why}")
            }
            Outcome::LeftToFirstNode { first } => {
                format!("no transport is configured: the job's first node {first} reports it")
            }
        }
    }
}

/// The Epilog, by the node's `transport.mode` (the module doc).
pub fn run_epilog(
    cfg: &Config,
    env: &EpilogEnv,
    slurm: &dyn Slurm,
    log: &mut dyn FnMut(&str),
) -> Result<Outcome> {
    // The job is over on this node: its live view too (the extern step removes it at its exit;
    // this covers an extern step that died first). common/src/live.rs.
    jobscope_common::live::remove(&cfg.paths.live_dir, env.job_id, &env.node);
    let expected = env.expected_nodes();
    match cfg.transport.mode {
        TransportMode::Postgres => return send_node(cfg, env, expected, log),
        TransportMode::None if expected.first().is_some_and(|f| f != &env.node) => {
            discard_spool(cfg, env.job_id, &env.node, log);
            return Ok(Outcome::LeftToFirstNode {
                first: expected[0].clone(),
            });
        }
        TransportMode::None | TransportMode::SharedDir => {}
    }
    let dir = job_dir(&cfg.paths.spool_dir, env.job_id, &env.node);
    if is_archived(cfg, env.job_id) && !set_aside_earlier_run(cfg, env.job_id, &dir, log) {
        remove_spool(cfg, env.job_id, &env.node, log);
        return Ok(Outcome::AlreadyArchived);
    }
    let summary = summarize_node(cfg, env, log);
    store_node(cfg, &summary)?;
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
    // With no transport the first node reports what it alone saw; with a shared directory the
    // last node to arrive reports.
    if !missing.is_empty() && cfg.transport.mode == TransportMode::SharedDir {
        return Ok(Outcome::WaitingForNodes { missing });
    }
    if !claim(cfg, env.job_id) {
        // Another node of this job is assembling it right now; its archive marker lets a later
        // epilog on this node (see `sweep_archived_spools`) remove this node's spool.
        sweep_archived_spools(cfg, &env.node, log);
        return Ok(Outcome::AlreadyArchived);
    }
    let ctl = slurm.job_facts(env.job_id);
    if ctl.is_none() {
        log(&format!(
            "job {}: SLURM gave no job information; report has no name/limit",
            env.job_id
        ));
    }
    let facts = env.facts_with(ctl);
    let (s, path) = finish_claimed(cfg, &facts, &expected, slurm, log)?;
    remove_spool(cfg, env.job_id, &env.node, log);
    sweep_archived_spools(cfg, &env.node, log);
    // Archive first (done above), mail second, SLURM's AdminComment last.
    jobscope_deliver::notify::notify(cfg, &s, Some(&facts), slurm, log);
    write_admin_comment(cfg, &s, slurm, log);
    Ok(Outcome::Archived { path })
}

/// This node's summary of the job from its spool (problems logged; a node without a spool, the
/// plugin off or no step run here, is normal and not worth a line).
fn summarize_node(cfg: &Config, env: &EpilogEnv, log: &mut dyn FnMut(&str)) -> NodeSummary {
    let dir = job_dir(&cfg.paths.spool_dir, env.job_id, &env.node);
    let out = pipeline::node(
        &pipeline::read_node_dir(&dir),
        &env.node,
        env.job_id,
        NodeEnd::At(now_unix_ms()),
        env.uid,
        cfg,
    );
    for p in out.problems.iter().filter(|p| !p.contains("No such file")) {
        log(&format!("job {}: {p}", env.job_id));
    }
    out.summary
}

/// Mode `postgres`: the node's summary into the outbox (durably), the spool removed (the outbox
/// holds all of it that the report needs), then sent within `transport.send_budget_s`.
fn send_node(
    cfg: &Config,
    env: &EpilogEnv,
    expected: Vec<String>,
    log: &mut dyn FnMut(&str),
) -> Result<Outcome> {
    let summary = summarize_node(cfg, env, log);
    let outbox = Outbox::new(&cfg.transport.outbox_dir);
    let path = outbox.put(&Envelope::new(summary, env.clone(), expected))?;
    discard_spool(cfg, env.job_id, &env.node, log);
    let d = send::deliver(
        &cfg.transport,
        &outbox,
        Some(&path),
        Duration::from_secs(cfg.transport.send_budget_s),
    );
    Ok(if d.left == 0 {
        Outcome::Sent
    } else {
        Outcome::Queued {
            why: d.last_error.unwrap_or_else(|| "not sent".into()),
        }
    })
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
    if is_archived(cfg, job_id) {
        discard_spool(cfg, job_id, node, log);
    }
}

/// Removes this node's spool of a job (a copy kept first where `archive.keep_spools_dir` says).
fn discard_spool(cfg: &Config, job_id: u32, node: &str, log: &mut dyn FnMut(&str)) {
    let dir = job_dir(&cfg.paths.spool_dir, job_id, node);
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
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
pub struct ReapReport {
    /// Jobs finished as partial reports because some nodes never reported.
    pub partial: Vec<ReapedJob>,
    /// Local spools turned into node summaries because no epilog ever ran for them (crash, reboot).
    pub orphans: Vec<u32>,
    /// Mode `postgres`: what the outbox's retry did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outbox: Option<send::Delivery>,
}

/// How long `reap` may spend sending the outbox (it runs every few minutes).
const REAP_SEND_BUDGET: Duration = Duration::from_secs(60);

/// Sends what the outbox holds, after a random wait of up to `transport.retry_jitter_s` (every
/// node's reap runs at the same minute: after an outage they must not all connect at once).
fn retry_outbox(cfg: &Config, log: &mut dyn FnMut(&str)) -> send::Delivery {
    let outbox = Outbox::new(&cfg.transport.outbox_dir);
    if outbox.is_empty() {
        return send::Delivery::default();
    }
    let jitter_ms = cfg.transport.retry_jitter_s.saturating_mul(1000);
    std::thread::sleep(Duration::from_millis(fastrand::u64(0..=jitter_ms)));
    let d = send::deliver(&cfg.transport, &outbox, None, REAP_SEND_BUDGET);
    if d.left > 0 {
        log(&format!(
            "reap: {} node summar{} still in the outbox: {}",
            d.left,
            if d.left == 1 { "y" } else { "ies" },
            d.last_error.as_deref().unwrap_or("not sent")
        ));
    }
    for u in &d.unreadable {
        log(&format!("reap: outbox: {u} (left there)"));
    }
    d
}

/// A job `reap` archived, and the nodes whose data never arrived.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ReapedJob {
    pub job_id: u32,
    pub missing_nodes: Vec<String>,
}

impl ReapReport {
    /// Sentences for people (`jobscope reap`).
    pub fn describe(&self) -> String {
        let outbox_idle = self
            .outbox
            .as_ref()
            .is_none_or(|d| d.sent == 0 && d.left == 0 && d.unreadable.is_empty());
        if self.partial.is_empty() && self.orphans.is_empty() && outbox_idle {
            return "nothing to reap\n".into();
        }
        let mut t = String::new();
        if let Some(d) = self.outbox.as_ref().filter(|_| !outbox_idle) {
            t += &format!("outbox: {} node summaries sent, {} left", d.sent, d.left);
            if let Some(e) = &d.last_error {
                t += &format!(" ({e})");
            }
            t += "\n";
        }
        for j in &self.orphans {
            t += &format!("job {j}: this node's spool collected (no epilog ran for it here)\n");
        }
        for j in &self.partial {
            if j.missing_nodes.is_empty() {
                t += &format!("job {}: archived\n", j.job_id);
            } else {
                t += &format!(
                    "job {}: archived as a partial report; no data from {}\n",
                    j.job_id,
                    j.missing_nodes.join(", ")
                );
            }
        }
        t
    }
}

/// Whether the scheduler says the job still holds its allocation (its spools are still written)
/// or still completes it (its epilogs may not have run yet: 24.11 and later say COMPLETED with a
/// COMPLETING flag then, and collecting the spool there left the Epilog no data, seen in the VM
/// suite under software emulation).
fn is_active(facts: Option<&JobFacts>) -> bool {
    facts.is_some_and(|f| f.completing || f.scheduler_state.is_some_and(|s| s.is_active()))
}

/// Finishes what epilogs could not:
/// 1. spools on this node whose job is no longer running and which no epilog collected (the node
///    crashed or rebooted mid-job, or slurmd died): summarised as partial node summaries;
/// 2. jobs whose first node summary is older than `archive.node_wait_s` and whose other nodes never
///    reported (or whose archiving failed before): archived, as partial reports that name the
///    missing nodes.
///
/// SLURM is asked through `slurm`, so the logic can be tested with `jobscope_report::slurm::FakeSlurm`.
pub fn reap(
    cfg: &Config,
    node: &str,
    now_ms: u64,
    slurm: &dyn Slurm,
    log: &mut dyn FnMut(&str),
) -> Result<ReapReport> {
    let mut rep = ReapReport::default();
    sweep_archived_spools(cfg, node, log);
    prune_state(cfg, now_ms, log);
    jobscope_deliver::notify::send_pending_digests(cfg, slurm, log);
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
            || (!is_archived(cfg, job)
                && !job_state_dir(cfg, job)
                    .join(format!("{node}.json"))
                    .exists()
                && !is_active(slurm.job_facts(job).as_ref()))
        {
            orphan_dirs.push((job, e.path()));
        }
    }
    for (job, dir) in orphan_dirs {
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
        let out = pipeline::node(
            &pipeline::read_node_dir(&dir),
            node,
            job,
            NodeEnd::LastRecord {
                fallback_ms: now_ms,
            },
            None,
            cfg,
        );
        for p in &out.problems {
            log(&format!("reap: {p}"));
        }
        let mut ns = out.summary;
        ns.quality.notes.push("collected by `jobscope reap`: no epilog ran for this job on this node (crash or reboot?)".into());
        let ctl = slurm.job_facts(job);
        let expected = ctl
            .as_ref()
            .map(|f| f.nodes.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| vec![node.to_string()]);
        match cfg.transport.mode {
            TransportMode::SharedDir => store_node(cfg, &ns)?,
            // Not this node's to report: its first node reports alone (nothing else may).
            TransportMode::None if expected[0] != node => {
                log(&format!(
                    "reap: job {job}: spool dropped: no transport is configured and the job's first node {} reports it",
                    expected[0]
                ));
                let _ = std::fs::remove_dir_all(&dir);
                continue;
            }
            TransportMode::None => store_node(cfg, &ns)?,
            TransportMode::Postgres => {
                // The Epilog's environment is gone: what SLURM still says stands in for it.
                let env = EpilogEnv {
                    job_id: job,
                    node: node.to_string(),
                    uid: Some(ns.uid),
                    cluster: ctl.as_ref().and_then(|f| f.cluster.clone()),
                    ..Default::default()
                };
                Outbox::new(&cfg.transport.outbox_dir).put(&Envelope::new(ns, env, expected))?;
            }
        }
        rep.orphans.push(job);
        let _ = std::fs::remove_dir_all(&dir);
    }
    if cfg.transport.mode == TransportMode::Postgres {
        rep.outbox = Some(retry_outbox(cfg, log));
        return Ok(rep);
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
        if is_archived(cfg, job) {
            continue;
        }
        let nodes = stored_nodes(cfg, job);
        let Some(oldest) = nodes.iter().map(|n| n.end_unix_ms).min() else {
            continue;
        };
        let ctl = slurm.job_facts(job);
        if is_active(ctl.as_ref()) {
            continue;
        }
        // The expected node list: what the first epilog recorded, else SLURM's if it still knows
        // the job, else what the node summaries say.
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
                ctl.as_ref()
                    .map(|f| f.nodes.clone())
                    .filter(|n| !n.is_empty())
            })
            .unwrap_or_else(|| nodes.iter().map(|n| n.node.clone()).collect());
        let waited = now_ms.saturating_sub(oldest) >= wait_ms;
        let complete = expected.iter().all(|x| nodes.iter().any(|n| &n.node == x));
        if !(waited || complete) || !claim(cfg, job) {
            continue;
        }
        // No Epilog environment here: the uid is the spool's, the rest SLURM's if it still knows.
        let ctl_known = ctl.is_some();
        let mut facts = ctl.unwrap_or_default();
        facts.job_id = job;
        facts.uid = nodes.first().map(|n| n.uid).or(facts.uid);
        facts.node_count = facts.node_count.or(Some(expected.len() as u32));
        let missing: Vec<String> = expected
            .iter()
            .filter(|x| !nodes.iter().any(|n| &n.node == *x))
            .cloned()
            .collect();
        let (s, path) = finish_claimed(cfg, &facts, &expected, slurm, log)?;
        jobscope_deliver::notify::notify(cfg, &s, ctl_known.then_some(&facts), slurm, log);
        write_admin_comment(cfg, &s, slurm, log);
        log(&format!(
            "reap: job {job} archived at {} (missing nodes: {missing:?})",
            path.display()
        ));
        rep.partial.push(ReapedJob {
            job_id: job,
            missing_nodes: missing,
        });
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
            // `<job>` and the state of an earlier run set aside, `<job>.run<start_s>`.
            let job = name.split_once(".run").map_or(name.as_str(), |(j, _)| j);
            job.parse::<u32>().is_ok() && old(&e.path().join("archived"))
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
    // Root appends here: never through a symlink, never blocked on a FIFO.
    if let Ok(mut f) = jobscope_common::fsutil::open_regular(
        path,
        jobscope_common::fsutil::Access::AppendOrCreate(0o640),
    ) {
        // One write(2) per line, so epilogs ending together do not interleave their lines.
        let _ = f.write_all(format!("{} {line}\n", now_unix_ms() / 1000).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobscope_model::job::{EndReason, JobFacts, JobState};
    use jobscope_model::sample::Reading;
    use jobscope_model::spool::{Bucket, End, Event, EventKind};
    use jobscope_report::pipeline::testing::header;
    use jobscope_report::slurm::FakeSlurm;
    use jobscope_sampler::spool::writer::{Limits, SeriesWriter, StepWriter};

    fn cfg(root: &Path) -> Config {
        let mut c = Config::default();
        c.paths.spool_dir = root.join("spool");
        c.paths.state_dir = root.join("state");
        c.paths.archive_dir = root.join("archive");
        c.paths.log_file = root.join("log");
        c.archive.node_wait_s = 60;
        // The tests of several nodes on one file system share their state directory.
        c.transport.mode = TransportMode::SharedDir;
        c
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
                t_first_ms: 1_700_001_000_000 + i * 30_000,
                t_last_ms: 1_700_001_000_000 + i * 30_000,
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
                t_ms: 1_700_001_150_000,
                reason: "stopped".into(),
                samples_taken: 5,
                samples_missed: 0,
            })
            .unwrap();
            let mut s = StepWriter::create(&dir, &header(job, node, "batch")).unwrap();
            s.event(&Event {
                t_ms: 1_700_001_149_000,
                kind: EventKind::StepExit,
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

    /// A controller that does not answer (as in the tests before SLURM is up).
    fn down() -> FakeSlurm {
        FakeSlurm::default()
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
            let first = run_epilog(&c, &env(77, order[0], "a,b"), &down(), &mut log).unwrap();
            assert!(
                matches!(first, Outcome::WaitingForNodes { ref missing } if missing == &vec![order[1].to_string()]),
                "{first:?}"
            );
            let second = run_epilog(&c, &env(77, order[1], "a,b"), &down(), &mut log).unwrap();
            assert!(matches!(second, Outcome::Archived { .. }), "{second:?}");
            let again = run_epilog(&c, &env(77, order[0], "a,b"), &down(), &mut log).unwrap();
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

    /// `[report] admin_comment`: the node that archives writes the line once, after the archive;
    /// a refusal is logged and the job is archived all the same; off, nothing is written.
    #[test]
    fn the_archiving_node_writes_the_admin_comment_and_a_refusal_changes_nothing() {
        for (on, fails) in [(true, false), (true, true), (false, false)] {
            let d = tempfile::tempdir().unwrap();
            let mut c = cfg(d.path());
            c.report.admin_comment = on;
            make_spool(&c, 81, "a", false);
            let slurm = FakeSlurm {
                admin_comment_fails: fails.then(|| "sacctmgr failed (canned)".to_string()),
                ..FakeSlurm::default()
            };
            let mut lines = Vec::new();
            let o = run_epilog(&c, &env(81, "a", "a"), &slurm, &mut |l: &str| {
                lines.push(l.to_string())
            })
            .unwrap();
            assert!(matches!(o, Outcome::Archived { .. }), "{o:?}");
            let s: JobSummary =
                serde_json::from_slice(&archive::find(&c.paths.archive_dir, 81, 0).unwrap())
                    .unwrap();
            let written = slurm.admin_comments.lock().unwrap().clone();
            let said = |w: &str| lines.iter().filter(|l| l.contains(w)).count();
            match (on, fails) {
                (true, false) => {
                    assert_eq!(written.len(), 1, "{written:?}");
                    let (job, _, text) = &written[0];
                    assert_eq!(*job, 81);
                    // The archived state, as the archive spells it.
                    let state = serde_json::to_value(s.state).unwrap();
                    assert!(
                        text.starts_with(&format!("jobscope=1 state={} ", state.as_str().unwrap())),
                        "{text}"
                    );
                    assert_eq!(said("AdminComment written"), 1, "{lines:?}");
                }
                (true, true) => {
                    assert!(written.is_empty());
                    assert_eq!(
                        said("job 81: AdminComment not written: sacctmgr failed (canned)"),
                        1,
                        "{lines:?}"
                    );
                }
                _ => assert!(written.is_empty() && said("AdminComment") == 0, "{lines:?}"),
            }
        }
    }

    /// With no transport (the default), each node sees only its own state: exactly one report,
    /// by the job's first node, whatever order the Epilogs run in, naming the unseen nodes.
    #[test]
    fn without_a_transport_the_first_node_alone_reports_once() {
        for order in [["a", "b", "c"], ["c", "b", "a"], ["b", "a", "c"]] {
            let d = tempfile::tempdir().unwrap();
            let mut c = cfg(d.path());
            c.transport.mode = TransportMode::None;
            let mut reports = 0;
            for node in order {
                // Nodes share nothing: each has its own spool and state directories.
                let mut own = c.clone();
                own.paths.spool_dir = d.path().join(node).join("spool");
                own.paths.state_dir = d.path().join(node).join("state");
                make_spool(&own, 79, node, false);
                let mut log = |_: &str| {};
                let o = run_epilog(&own, &env(79, node, "a,b,c"), &down(), &mut log).unwrap();
                match (node, &o) {
                    ("a", Outcome::Archived { .. }) => reports += 1,
                    (_, Outcome::LeftToFirstNode { first }) => assert_eq!(first, "a"),
                    _ => panic!("node {node}: {o:?}"),
                }
                assert!(!job_dir(&own.paths.spool_dir, 79, node).exists(), "{node}");
                // A second Epilog run on a node (SLURM retrying) adds nothing.
                let again = run_epilog(&own, &env(79, node, "a,b,c"), &down(), &mut log).unwrap();
                assert!(
                    !matches!(again, Outcome::Archived { .. }),
                    "{node}: {again:?}"
                );
            }
            assert_eq!(reports, 1);
            let s: JobSummary =
                serde_json::from_slice(&archive::find(&c.paths.archive_dir, 79, 0).unwrap())
                    .unwrap();
            assert_eq!(s.nodes.len(), 1);
            assert_eq!(s.nodes[0].node, "a");
            assert_eq!(s.missing_nodes, ["b", "c"]);
            assert!(s.partial);
            assert!(
                s.partial_reasons[0].contains("no transport is configured")
                    && s.partial_reasons[0].contains("b, c were not seen"),
                "{:?}",
                s.partial_reasons
            );
            // 140 CPU-s from node a's batch exit reading: its figures are all there.
            assert_eq!(s.cpu.usage_s, Some(140.0));
        }
    }

    /// Mode `postgres` with the database away: the Epilog keeps the summary in the outbox,
    /// removes the spool (the outbox holds what the report needs), writes nothing shared and
    /// ends within its send budget.
    #[test]
    fn with_the_database_away_the_summary_waits_in_the_outbox() {
        let d = tempfile::tempdir().unwrap();
        let mut c = cfg(d.path());
        c.transport.mode = TransportMode::Postgres;
        c.transport.outbox_dir = d.path().join("outbox");
        c.transport.send_budget_s = 1;
        c.transport.postgres.conninfo = Some("host=127.0.0.1 port=9 user=n dbname=j".into());
        make_spool(&c, 80, "b", false);
        let mut log = |_: &str| {};
        let t0 = std::time::Instant::now();
        let o = run_epilog(&c, &env(80, "b", "a,b"), &down(), &mut log).unwrap();
        assert!(t0.elapsed() < std::time::Duration::from_secs(10));
        assert!(
            matches!(&o, Outcome::Queued { why } if why.contains("127.0.0.1")),
            "{o:?}"
        );
        let ob = Outbox::new(&c.transport.outbox_dir);
        let p = ob.pending(10);
        assert_eq!(p.len(), 1);
        let e = p[0].envelope.as_ref().unwrap();
        assert_eq!((e.summary.job_id, e.summary.node.as_str()), (80, "b"));
        assert_eq!(e.expected_nodes, ["a", "b"]);
        assert_eq!(e.summary.cpu.usage_s, Some(140.0));
        assert!(!job_dir(&c.paths.spool_dir, 80, "b").exists());
        assert!(!c.paths.state_dir.exists() && !c.paths.archive_dir.exists());
    }

    #[test]
    fn missing_node_gives_partial_report_after_the_wait() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path());
        make_spool(&c, 78, "a", false);
        let mut log = |_: &str| {};
        run_epilog(&c, &env(78, "a", "a,b"), &down(), &mut log).unwrap();
        let slurm = FakeSlurm::up();
        // The wait runs from the job's end on node a: its batch step's exit in the fixture.
        let end_a = 1_700_001_149_000;
        let early = reap(&c, "a", end_a + 1_000, &slurm, &mut log).unwrap();
        assert!(early.partial.is_empty(), "must wait node_wait_s first");
        let later = reap(&c, "a", end_a + 61_000, &slurm, &mut log).unwrap();
        assert_eq!(
            later.partial,
            vec![ReapedJob {
                job_id: 78,
                missing_nodes: vec!["b".to_string()]
            }]
        );
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
        let r = reap(&c, "a", now_unix_ms(), &FakeSlurm::up(), &mut log).unwrap();
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
        let slurm = FakeSlurm::up().with_job(80, JobState::Running);
        let r = reap(&c, "a", now_unix_ms(), &slurm, &mut log).unwrap();
        assert!(r.orphans.is_empty() && r.partial.is_empty());
        assert!(job_dir(&c.paths.spool_dir, 80, "a").exists());
        assert_eq!(slurm.asked.lock().unwrap().as_slice(), &[80]);
        // 24.11 and later during the Epilog: COMPLETED with the COMPLETING flag. The Epilog may
        // not have run yet: the spool is still its.
        let mut slurm = FakeSlurm::up().with_job(80, JobState::Completed);
        slurm.jobs.get_mut(&80).unwrap().completing = true;
        let r = reap(&c, "a", now_unix_ms(), &slurm, &mut log).unwrap();
        assert!(r.orphans.is_empty(), "collected while COMPLETING");
        assert!(job_dir(&c.paths.spool_dir, 80, "a").exists());
        // Once SLURM says it ended, the spool is collected.
        let slurm = FakeSlurm::up().with_job(80, JobState::Completed);
        let r = reap(&c, "a", now_unix_ms(), &slurm, &mut log).unwrap();
        assert_eq!(r.orphans, vec![80]);
    }

    #[test]
    fn a_failed_archive_releases_the_claim_and_reap_archives_later() {
        let d = tempfile::tempdir().unwrap();
        let mut c = cfg(d.path());
        c.archive.admin_group = "no-such-group-jobscope-test".into();
        make_spool(&c, 81, "a", false);
        let mut lines = Vec::new();
        let mut log = |m: &str| lines.push(m.to_string());
        let err = run_epilog(&c, &env(81, "a", "a"), &down(), &mut log).unwrap_err();
        assert!(format!("{err:#}").contains("archive"), "{err:#}");
        assert!(
            !job_state_dir(&c, 81).join("claim").exists(),
            "the claim is released when archiving fails"
        );
        assert!(!is_archived(&c, 81));
        assert!(
            job_dir(&c.paths.spool_dir, 81, "a").exists(),
            "the spool stays until the job is archived"
        );
        // The site fixes its configuration; the next `reap` archives the job.
        c.archive.admin_group = Config::default().archive.admin_group;
        let r = reap(&c, "a", now_unix_ms(), &FakeSlurm::up(), &mut log).unwrap();
        assert_eq!(
            r.partial,
            vec![ReapedJob {
                job_id: 81,
                missing_nodes: vec![]
            }]
        );
        assert!(is_archived(&c, 81));
        let s: JobSummary =
            serde_json::from_slice(&archive::find(&c.paths.archive_dir, 81, 0).unwrap()).unwrap();
        assert_eq!(s.cpu.usage_s, Some(140.0));
        assert!(!s.partial, "{:?}", s.partial_reasons);
    }

    #[test]
    fn the_epilog_takes_its_facts_from_the_environment_and_slurm() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path());
        make_spool(&c, 82, "a", false);
        let mut slurm = FakeSlurm::up();
        slurm.jobs.insert(
            82,
            JobFacts {
                job_id: 82,
                name: Some("train".into()),
                time_limit_s: Some(600),
                scheduler_state: Some(JobState::Completing),
                ..Default::default()
            },
        );
        let mut e = env(82, "a", "a");
        e.exit_code2 = Some("0:125".into());
        let mut log = |_: &str| {};
        run_epilog(&c, &e, &slurm, &mut log).unwrap();
        let s: JobSummary =
            serde_json::from_slice(&archive::find(&c.paths.archive_dir, 82, 0).unwrap()).unwrap();
        assert_eq!(s.name.as_deref(), Some("train"));
        assert_eq!(s.alloc.time_limit_s, Some(600));
        assert_eq!(s.uid, Some(4242));
        // SIG_OOM in SLURM_JOB_EXIT_CODE2 is SLURM's OOM report.
        assert_eq!(s.state, JobState::OutOfMemory);
        assert_eq!(s.end_reason, Some(EndReason::SchedulerOom));
    }

    #[test]
    fn people_get_sentences_scripts_get_json() {
        let o = Outcome::WaitingForNodes {
            missing: vec!["b".into(), "c".into()],
        };
        assert_eq!(
            o.describe(),
            "this node's summary is stored; waiting for 2 other node(s): b, c"
        );
        assert_eq!(
            serde_json::to_value(&o).unwrap(),
            serde_json::json!({"outcome": "waiting_for_nodes", "missing": ["b", "c"]})
        );
        let r = ReapReport {
            partial: vec![ReapedJob {
                job_id: 9,
                missing_nodes: vec!["n2".into()],
            }],
            orphans: vec![9],
            outbox: None,
        };
        assert_eq!(
            r.describe(),
            "job 9: this node's spool collected (no epilog ran for it here)\n\
             job 9: archived as a partial report; no data from n2\n"
        );
        assert_eq!(ReapReport::default().describe(), "nothing to reap\n");
    }

    /// A short run's spool on node `node`, beginning `start_ms` after the fixtures' start and
    /// ending `end_ms` after it.
    fn short_spool(c: &Config, job: u32, node: &str, start_ms: u64, end_ms: u64) {
        let dir = job_dir(&c.paths.spool_dir, job, node);
        std::fs::create_dir_all(&dir).unwrap();
        let mut h = header(job, node, "job");
        let t0 = h.start_unix_ms;
        h.start_unix_ms = t0 + start_ms;
        let mut w = SeriesWriter::create(&dir, "job.jsc", h, Limits::default()).unwrap();
        w.push(Bucket {
            t_first_ms: t0 + start_ms + 500,
            t_last_ms: t0 + start_ms + 500,
            n: 1,
            last: Reading {
                cpu_usage_ns: Some(1),
                ..Default::default()
            },
            gauges: Default::default(),
        })
        .unwrap();
        w.end(&End {
            t_ms: t0 + end_ms,
            reason: "stopped".into(),
            samples_taken: 1,
            samples_missed: 0,
        })
        .unwrap();
    }

    /// A requeued job that an admin let start again at once (`scontrol update StartTime=now`):
    /// its second run begins seconds after the first began, but after the first ended. It gets
    /// its own report; an Epilog of the first run again (a retry, its spool beginning before
    /// that run ended) does not make a second one.
    #[test]
    fn a_requeued_run_started_at_once_gets_its_own_report_and_a_retry_none() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path());
        let slurm = FakeSlurm::up();
        let mut log = |_: &str| {};
        short_spool(&c, 91, "a", 0, 3_000);
        let first = run_epilog(&c, &env(91, "a", "a"), &slurm, &mut log).unwrap();
        assert!(matches!(first, Outcome::Archived { .. }), "{first:?}");
        short_spool(&c, 91, "a", 0, 3_000);
        let retry = run_epilog(&c, &env(91, "a", "a"), &slurm, &mut log).unwrap();
        assert!(matches!(retry, Outcome::AlreadyArchived), "{retry:?}");
        // 5 s after the first run's start: within what the hold-off rule would take for it
        short_spool(&c, 91, "a", 5_000, 9_000);
        let second = run_epilog(&c, &env(91, "a", "a"), &slurm, &mut log).unwrap();
        assert!(matches!(second, Outcome::Archived { .. }), "{second:?}");
        let runs = archive::Store::new(&c.paths.archive_dir, &c.archive.admin_group)
            .runs(91, 0)
            .unwrap();
        assert_eq!(runs.len(), 2, "{runs:?}");
    }

    /// A requeued job that an admin let start again at once, under load: the first run's Epilog
    /// asks the controller only after the requeue and `scontrol update StartTime=now`, and the
    /// controller answers with the job's next start (the second run's), seconds after the first
    /// run's own first record. Each run is archived under its own start: the first run's record
    /// keeps its start and is not replaced by the second's (they shared a key when the first run
    /// took the controller's start: the second run's report was written over the first's path).
    #[test]
    fn each_run_of_a_requeued_job_is_keyed_by_its_own_start_whatever_slurm_says_later() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path());
        let t0_s = header(93, "a", "job").start_unix_ms / 1000;
        let next_start_s = t0_s + 5;
        let facts = |state, requeued| JobFacts {
            job_id: 93,
            scheduler_state: Some(state),
            requeued,
            start_unix_s: Some(next_start_s),
            ..Default::default()
        };
        let mut slurm = FakeSlurm::up();
        // The first run's Epilog: the job is pending again, due to start at `next_start_s`.
        slurm.jobs.insert(93, facts(JobState::Pending, true));
        let mut log = |_: &str| {};
        short_spool(&c, 93, "a", 0, 3_000);
        let first = run_epilog(&c, &env(93, "a", "a"), &slurm, &mut log).unwrap();
        assert!(matches!(first, Outcome::Archived { .. }), "{first:?}");
        // The second run began at `next_start_s` and completed.
        slurm.jobs.insert(93, facts(JobState::Completed, false));
        short_spool(&c, 93, "a", 5_000, 9_000);
        let second = run_epilog(&c, &env(93, "a", "a"), &slurm, &mut log).unwrap();
        assert!(matches!(second, Outcome::Archived { .. }), "{second:?}");
        let runs = archive::Store::new(&c.paths.archive_dir, &c.archive.admin_group)
            .runs(93, 0)
            .unwrap();
        assert_eq!(runs.len(), 2, "{runs:?}");
        let mut got: Vec<(u64, u64, Option<u64>)> = runs
            .iter()
            .map(|r| {
                let bytes = std::fs::read(&r.path).unwrap();
                let s: JobSummary = serde_json::from_slice(&bytes).unwrap();
                (s.start_unix_ms, s.end_unix_ms, s.scheduler_start_unix_s)
            })
            .collect();
        got.sort();
        let t0_ms = t0_s * 1000;
        // The first run: its own start and end; SLURM's start (the next run's) is not kept as its.
        assert_eq!(got[0], (t0_ms, t0_ms + 3_000, None), "{got:?}");
        // The second run: SLURM's start is its own, and its first record falls in that second.
        assert_eq!(
            got[1],
            (t0_ms + 5_000, t0_ms + 9_000, Some(next_start_s)),
            "{got:?}"
        );
    }

    /// A requeued job: the same id runs again; the second run's Epilog finds the first run's
    /// `archived` marker, sets that state aside, and archives its own report.
    #[test]
    fn a_requeued_jobs_second_run_gets_its_own_report() {
        let d = tempfile::tempdir().unwrap();
        let c = cfg(d.path());
        let slurm = FakeSlurm::up();
        let mut log = |_: &str| {};
        make_spool(&c, 90, "a", false);
        let first = run_epilog(&c, &env(90, "a", "a"), &slurm, &mut log).unwrap();
        assert!(matches!(first, Outcome::Archived { .. }), "{first:?}");
        // The second run's spool starts five minutes later.
        short_spool(&c, 90, "a", 300_000, 330_000);
        let second = run_epilog(&c, &env(90, "a", "a"), &slurm, &mut log).unwrap();
        assert!(matches!(second, Outcome::Archived { .. }), "{second:?}");
        let runs = archive::Store::new(&c.paths.archive_dir, &c.archive.admin_group)
            .runs(90, 0)
            .unwrap();
        assert_eq!(runs.len(), 2, "{runs:?}");
        // Epilogs of the same run later (another node, a retry) still see it archived.
        let again = run_epilog(&c, &env(90, "a", "a"), &slurm, &mut log).unwrap();
        assert!(matches!(again, Outcome::AlreadyArchived), "{again:?}");
    }
}
