//! `jobscope watch`: the site's rules over the jobs running on this node (docs/watch.md).
//!
//! Each pass lists the node's spool directories (one per job running here), asks SLURM once
//! which of those jobs run and who they are, reads each spool (root's; nothing is added to the
//! sampler's work), lets the pure rules decide (`jobscope_model::watch::plan`), and then, unless
//! it is a dry run, for each decision: records it in the job's spool directory first (so the
//! report and the archive say it whatever fails next), then cancels where the rule says so, then
//! queues the mail. A single node needs nothing but itself and SLURM's commands: the figures are
//! the node's own, the record travels with the node's summary, the mail goes through the node's
//! queue.
use anyhow::{Context, Result};
use jobscope_config::Config;
use jobscope_deliver::mail::message::{choose_recipient, parse_address, text_and_html_mail};
use jobscope_deliver::mail::queue::Queue;
use jobscope_model::job::{JobFacts, JobState};
use jobscope_model::watch::{
    plan, ActionKind, Intervention, LiveJob, Owner, Planned, Rule, MAX_INTERVENTIONS,
};
use jobscope_report::present::templates::render_text_as_html;
use jobscope_report::present::watch as words;
use jobscope_report::slurm::Slurm;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The most job directories one pass looks at (a node runs far fewer jobs).
const MAX_JOBS: usize = 10_000;

/// One decision of a pass and what became of it.
#[derive(Debug, Clone, Serialize)]
pub struct Done {
    pub job_id: u32,
    pub user: Option<String>,
    pub rule: String,
    pub action: ActionKind,
    /// The finding in words.
    pub what: String,
    /// `would` (dry run), `recorded`, `mailed`, or what failed.
    pub outcome: String,
}

/// A rule that held for a job and was not acted on, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Held {
    pub job_id: u32,
    pub rule: String,
    pub why: String,
}

/// What one pass saw and did.
#[derive(Debug, Clone, Serialize, Default)]
pub struct PassReport {
    pub node: String,
    pub dry_run: bool,
    /// Jobs with a spool directory here that SLURM says are running.
    pub jobs_running: usize,
    pub actions: Vec<Done>,
    pub held: Vec<Held>,
    /// What could not be looked at, and why.
    pub notes: Vec<String>,
}

impl PassReport {
    /// The listing for people: one line per action, then what was held back, then notes.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "{} running job(s) on {} checked{}.\n",
            self.jobs_running,
            self.node,
            if self.dry_run {
                " (dry run: nothing mailed, cancelled or recorded)"
            } else {
                ""
            }
        );
        if self.actions.is_empty() {
            out.push_str("No rule calls for anything now.\n");
        }
        for a in &self.actions {
            let verb = match (a.action, self.dry_run) {
                (ActionKind::Warned, true) => "would warn",
                (ActionKind::Warned, false) => "warned",
                (_, true) => "would cancel",
                (ActionKind::Cancelled, false) => "cancelled",
                (ActionKind::CancelFailed, false) => "could not cancel",
            };
            out.push_str(&format!(
                "job {} ({}): {verb} by rule \"{}\": {} [{}]\n",
                a.job_id,
                a.user.as_deref().unwrap_or("?"),
                a.rule,
                a.what,
                a.outcome
            ));
        }
        for h in &self.held {
            out.push_str(&format!(
                "job {}: rule \"{}\" holds, nothing done: {}\n",
                h.job_id, h.rule, h.why
            ));
        }
        for n in &self.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        out
    }
}

/// The jobs with a spool directory on `node`: `<spool_dir>/<job>.<node>`, directories only.
pub fn node_jobs(spool_dir: &Path, node: &str) -> Vec<(u32, PathBuf)> {
    let suffix = format!(".{node}");
    let mut jobs: Vec<(u32, PathBuf)> = std::fs::read_dir(spool_dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let id = name.strip_suffix(&suffix)?.parse::<u32>().ok()?;
                    Some((id, e.path()))
                })
                .take(MAX_JOBS)
                .collect()
        })
        .unwrap_or_default();
    jobs.sort();
    jobs
}

/// What SLURM says of `ids`: one listing where the adapter can, else one question per job.
fn facts_of(slurm: &dyn Slurm, ids: &[u32]) -> HashMap<u32, JobFacts> {
    if let Some(all) = slurm.jobs_facts(ids) {
        return all;
    }
    ids.iter()
        .filter_map(|&id| slurm.job_facts(id).map(|f| (id, f)))
        .collect()
}

/// An exclusive lock on `<state_dir>/watch.lock` for the pass: two passes at once (the service and
/// a `jobscope watch --once` by hand) would both warn.
fn lock(state_dir: &Path) -> Result<std::fs::File> {
    std::fs::create_dir_all(state_dir).with_context(|| format!("{}", state_dir.display()))?;
    let path = state_dir.join("watch.lock");
    let f = jobscope_common::fsutil::open_regular(
        &path,
        jobscope_common::fsutil::Access::ReadWriteOrCreate(0o600),
    )
    .with_context(|| format!("{}", path.display()))?;
    // SAFETY: flock on a descriptor we own.
    let rc = unsafe {
        libc::flock(
            std::os::unix::io::AsRawFd::as_raw_fd(&f),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    };
    anyhow::ensure!(
        rc == 0,
        "another `jobscope watch` pass holds {}; not running two at once",
        path.display()
    );
    Ok(f)
}

/// One pass over the jobs running on `node` at `now_ms`.
pub fn pass(
    cfg: &Config,
    slurm: &dyn Slurm,
    node: &str,
    now_ms: u64,
    dry_run: bool,
) -> Result<PassReport> {
    let rules = &cfg.watch.rules;
    let mut rep = PassReport {
        node: node.to_string(),
        dry_run,
        ..PassReport::default()
    };
    let _lock = if dry_run {
        None
    } else {
        Some(lock(&cfg.paths.state_dir)?)
    };
    let dirs = node_jobs(&cfg.paths.spool_dir, node);
    if dirs.is_empty() || rules.is_empty() {
        return Ok(rep);
    }
    let ids: Vec<u32> = dirs.iter().map(|(id, _)| *id).collect();
    let facts = facts_of(slurm, &ids);
    if facts.is_empty() && !slurm.ping() {
        rep.notes.push(
            "slurmctld does not answer: no job is judged without knowing it runs and whose it is"
                .into(),
        );
        return Ok(rep);
    }
    let mut mail = MailOut::new(cfg, dry_run);
    for (job_id, dir) in dirs {
        let Some(f) = facts.get(&job_id) else {
            continue;
        };
        if f.scheduler_state != Some(JobState::Running) {
            continue;
        }
        rep.jobs_running += 1;
        let spool = jobscope_common::spool::read_node_dir(&dir);
        let owner = Owner {
            user: f.user.clone(),
            account: f.account.clone(),
            partition: f.partition.clone(),
            qos: f.qos.clone(),
        };
        let job = LiveJob::from_spool(&spool, job_id, node, owner, now_ms);
        let (todo, skipped) = plan(rules, &job, &spool.interventions, now_ms);
        rep.held.extend(skipped.into_iter().map(|s| Held {
            job_id,
            rule: s.rule,
            why: s.why,
        }));
        if todo.is_empty() {
            continue;
        }
        let mut record = spool.interventions.clone();
        for p in todo {
            let rule = rules
                .iter()
                .find(|r| r.name == p.rule)
                .expect("planned from these rules");
            let done = act(
                cfg,
                slurm,
                &dir,
                &mut record,
                rule,
                &p,
                &job,
                f,
                now_ms,
                dry_run,
                &mut mail,
            );
            rep.actions.push(done);
        }
    }
    if mail.queued > 0 {
        // The mails go out now where the relay answers; the rest stays queued for `mail flush`.
        if let Err(e) = jobscope_deliver::notify::flush(
            cfg,
            Duration::from_secs(cfg.mail.flush_budget_s),
            jobscope_deliver::mail::queue::FlushMode::Full,
        ) {
            rep.notes.push(format!("mail flush: {e:#}"));
        }
    }
    Ok(rep)
}

/// The mail side of a pass: the queue and the sender, opened once.
struct MailOut {
    queue: Option<Queue>,
    from: Option<jobscope_deliver::mail::message::Mailbox>,
    why_not: Option<String>,
    queued: usize,
}

impl MailOut {
    fn new(cfg: &Config, dry_run: bool) -> MailOut {
        let mut m = MailOut {
            queue: None,
            from: None,
            why_not: None,
            queued: 0,
        };
        if dry_run {
            return m;
        }
        if !cfg.mail.enabled {
            m.why_not = Some("mail.enabled is false".into());
            return m;
        }
        match (
            Queue::open(&cfg.mail.queue_dir),
            parse_address(&cfg.mail.from),
        ) {
            (Ok(q), Ok(from)) => {
                m.queue = Some(q);
                m.from = Some(from);
            }
            (Err(e), _) => m.why_not = Some(format!("mail queue: {e}")),
            (_, Err(e)) => m.why_not = Some(format!("mail.from: {e}")),
        }
        m
    }

    /// Queues the mail for `p`; `Err` says why none was.
    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        cfg: &Config,
        f: &JobFacts,
        job: &LiveJob,
        p: &Planned,
        action: ActionKind,
        seq: usize,
        now_ms: u64,
        cancel_at_ms: Option<u64>,
    ) -> Result<(), String> {
        if let Some(why) = &self.why_not {
            return Err(why.clone());
        }
        let (Some(queue), Some(from)) = (&self.queue, &self.from) else {
            return Err("no mail queue".into());
        };
        let to = choose_recipient(
            f.mail_user.as_deref(),
            f.user.as_deref(),
            cfg.mail.domain.as_deref(),
        )
        .map_err(|e| format!("no recipient: {e}"))?;
        let m = words::mail(
            action,
            &p.rule,
            &words::MailJob {
                job_id: job.job_id,
                name: f.name.as_deref(),
                node: &job.node,
            },
            &p.finding,
            now_ms,
            cancel_at_ms,
        );
        // Stable per job run, rule and action (queueing it again queues nothing), in the job
        // mail's form `<cluster>.<job>.<start>.<kind>` (deliver's `mail_id`).
        let id = format!(
            "{}.{}.{}.watch-{}-{}{}",
            cfg.run.cluster,
            job.job_id,
            job.start_unix_ms / 1000,
            p.rule,
            action_word(action),
            seq
        );
        let html = render_text_as_html(&m.subject, &m.text).map_err(|e| e.to_string())?;
        let mail = text_and_html_mail(&id, from, &to.mailbox, &m.subject, m.text, html)
            .map_err(|e| e.to_string())?;
        queue.enqueue_mail(&mail).map_err(|e| e.to_string())?;
        self.queued += 1;
        Ok(())
    }
}

fn action_word(a: ActionKind) -> &'static str {
    match a {
        ActionKind::Warned => "warn",
        ActionKind::Cancelled | ActionKind::CancelFailed => "cancel",
    }
}

/// Carries out one planned action on job `job` (spool directory `dir`, record `record`): record
/// first, then cancel, then mail. Each failure is said in the record and the outcome.
#[allow(clippy::too_many_arguments)]
fn act(
    cfg: &Config,
    slurm: &dyn Slurm,
    dir: &Path,
    record: &mut Vec<Intervention>,
    rule: &Rule,
    p: &Planned,
    job: &LiveJob,
    f: &JobFacts,
    now_ms: u64,
    dry_run: bool,
    mail: &mut MailOut,
) -> Done {
    let mut done = Done {
        job_id: job.job_id,
        user: f.user.clone(),
        rule: p.rule.clone(),
        action: p.action,
        what: words::finding(&p.finding),
        outcome: "would".into(),
    };
    if dry_run {
        return done;
    }
    let seq = record
        .iter()
        .filter(|i| i.rule == p.rule && i.action == p.action)
        .count();
    record.push(Intervention {
        rule: p.rule.clone(),
        action: p.action,
        at_unix_ms: now_ms,
        node: job.node.clone(),
        finding: p.finding.clone(),
        mailed: false,
        error: None,
    });
    let at = record.len() - 1;
    if record.len() > MAX_INTERVENTIONS {
        done.outcome = "not recorded: the job's record is full".into();
        record.pop();
        return done;
    }
    // Recorded before anything is done: a cancelled job's report must say why.
    if let Err(e) = jobscope_common::spool::write_interventions(dir, record) {
        record.pop();
        done.outcome = format!("not recorded ({e}); nothing done");
        return done;
    }
    let mut outcome = vec!["recorded".to_string()];
    let mut action = p.action;
    if p.action == ActionKind::Cancelled {
        let why = format!(
            "jobscope: cancelled by the site's rule {}: {}",
            p.rule,
            words::finding(&p.finding)
        );
        match slurm.cancel(
            job.job_id,
            &why,
            Duration::from_secs(cfg.watch.slurm_timeout_s),
        ) {
            Ok(()) => outcome.push("cancelled".into()),
            Err(e) => {
                action = ActionKind::CancelFailed;
                record[at].action = action;
                record[at].error = Some(e.clone());
                outcome.push(format!("cancel failed: {e}"));
            }
        }
    }
    let cancel_at = (action == ActionKind::Warned && rule.may_cancel(job))
        .then(|| now_ms + (rule.grace_minutes * 60_000.0) as u64);
    if p.mail && action != ActionKind::CancelFailed {
        match mail.send(cfg, f, job, p, action, seq, now_ms, cancel_at) {
            Ok(()) => {
                record[at].mailed = true;
                outcome.push("mailed".into());
            }
            Err(e) => {
                record[at].error = Some(format!("mail: {e}"));
                outcome.push(format!("not mailed: {e}"));
            }
        }
    }
    if record[at].mailed || record[at].error.is_some() || action != p.action {
        if let Err(e) = jobscope_common::spool::write_interventions(dir, record) {
            outcome.push(format!("record not updated: {e}"));
        }
    }
    done.action = action;
    done.outcome = outcome.join(", ");
    done
}

#[cfg(test)]
mod tests;
