//! `jobscope alerts`: the rules of `[alerts]` over every user's jobs in the index
//! (jobscope_admin::alerts, docs/audit.md "Alerts"). `check` (the default, or `--dry-run`) prints
//! who would be mailed and why; `send` (root) queues the mails and records them.

use crate::audit::{index_settings, is_admin};
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use jobscope_admin::alerts::{self, send, state::Sent, words, InFull, Sources};
use jobscope_archive::Store;
use jobscope_audit::index::{Index, ParquetEngine};
use jobscope_audit::query::Zone;
use jobscope_config::Config;

#[derive(Args, Debug)]
pub struct AlertsArgs {
    #[command(subcommand)]
    cmd: Option<AlertsCmd>,
    /// Send nothing: print who would be mailed and why (what `check` does).
    #[arg(long, global = true)]
    dry_run: bool,
    /// Print JSON for scripts.
    #[arg(long, global = true)]
    json: bool,
    /// Times in UTC instead of local time (the tables of the dry run and of the mails).
    #[arg(long, global = true)]
    utc: bool,
}

#[derive(Subcommand, Debug)]
enum AlertsCmd {
    /// Who would be mailed and why: one block per user (the default; root and the archive's
    /// admin group).
    Check,
    /// Mail each user an alert is decided for (at most once per alerts.period_days) through the
    /// mail queue, a summary to alerts.admin_to, and record what was sent (root).
    Send,
}

fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

pub fn run(cfg: &Config, a: AlertsArgs) -> Result<()> {
    let sending = matches!(a.cmd, Some(AlertsCmd::Send)) && !a.dry_run;
    if !is_admin(cfg) {
        bail!(
            "alerts read every user's jobs: root and the archive's admin group ({}) only",
            cfg.archive.admin_group
        );
    }
    if sending && euid() != 0 {
        bail!("jobscope alerts send is root's (it writes the mail queue and the record of sent alerts)");
    }
    let zone = if a.utc { Zone::Utc } else { Zone::Local };
    let store = Store::new(&cfg.paths.archive_dir, &cfg.archive.admin_group);
    let settings = index_settings(cfg);
    let dir = settings.dir.clone();
    if euid() == 0 {
        // As `jobscope audit`: root brings the index up to date first (one stat per day when
        // nothing changed).
        let rep = Index::new(&store, settings).update(false)?;
        for p in &rep.problems {
            eprintln!("jobscope: not indexed: {p}");
        }
    }
    let engine = ParquetEngine::open(&dir)?;
    let src = Sources {
        cfg,
        engine: &engine,
        index_dir: &dir,
        now_unix_s: (jobscope_common::now_unix_ms() / 1000) as i64,
        // Scripts get every job of each finding; people (and the mails) the tables' rows.
        in_full: if a.json {
            InFull::Every
        } else {
            InFull::First(cfg.alerts.max_jobs_listed as usize)
        },
    };
    if sending {
        let rep = send::send(&src, zone)?;
        let flushed = if rep.mails.iter().any(|m| m.error.is_none()) {
            Some(jobscope_deliver::notify::flush(
                cfg,
                std::time::Duration::from_secs(cfg.mail.flush_budget_s),
                jobscope_deliver::mail::queue::FlushMode::Full,
            ))
        } else {
            None
        };
        let flush_line = match &flushed {
            Some(Ok(s)) => Some(format!("mail flush: {s}")),
            Some(Err(e)) => Some(format!(
                "mail flush: {e:#} (the mails wait in the queue for `jobscope mail flush`)"
            )),
            None => None,
        };
        if a.json {
            let mut v = serde_json::to_value(&rep)?;
            v["flush"] = flush_line.clone().into();
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            print!("{}", send_text(&rep));
            if let Some(l) = &flush_line {
                println!("{l}");
            }
        }
        if !rep.ok() {
            bail!("some alerts were not queued (see above); the next send tries them again");
        }
        return Ok(());
    }
    let (record, note) = match Sent::read(&dir) {
        Ok(r) => (r.unwrap_or_default(), None),
        // The record is root's: an admin's dry run cannot leave out what was sent already.
        Err(e) if euid() != 0 => (
            Sent::default(),
            Some(format!(
                "the record of sent alerts cannot be read ({e:#}): runs already reported are listed again"
            )),
        ),
        Err(e) => return Err(e),
    };
    let mut ev = alerts::evaluate(&src, &record)?;
    ev.notes.extend(note);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&ev)?);
    } else {
        print!("{}", words::dry_run(cfg, &ev, zone));
    }
    Ok(())
}

/// What `send` did, for people: one line per mail, and the users not mailed with why.
fn send_text(rep: &send::SendReport) -> String {
    use jobscope_report::present::clean_line;
    let ev = &rep.evaluation;
    let mut out = format!(
        "jobscope alerts sent at {} (period of {} days from {})\n",
        jobscope_model::time::utc_time(ev.now_unix_s.max(0) as u64),
        ev.period_days,
        jobscope_model::time::utc_time(ev.period_start_unix_s.max(0) as u64)
    );
    if rep.mails.is_empty() {
        out += "nobody to mail\n";
    }
    for m in &rep.mails {
        out += &format!(
            "  {:<18} {:<32} {:<40} {}{}\n",
            m.user
                .as_deref()
                .map_or("(admins' summary)".to_string(), |u| clean_line(u, 16)),
            clean_line(&m.to, 64),
            m.mail_id,
            m.result,
            m.error
                .as_deref()
                .map(|e| format!(": {}", clean_line(e, 300)))
                .unwrap_or_default()
        );
    }
    for u in ev
        .users
        .iter()
        .filter(|u| u.decision != alerts::Decision::Mail)
    {
        out += &format!(
            "  {:<18} not mailed: {}\n",
            clean_line(&u.user, 16),
            u.reason
        );
    }
    for n in &ev.notes {
        out += &format!("note: {n}\n");
    }
    out
}
