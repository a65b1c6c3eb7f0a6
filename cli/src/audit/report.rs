//! `jobscope audit report`: the cluster report (admin/src/cluster/, docs/audit.md "The cluster
//! report") as a page, a text or a mail to `audit.report_to`.
//!
//! Admins only (root and `archive.admin_group`): it ranks users and accounts against each other,
//! so a user who is not an admin is refused with a pointer to the reports of their own jobs
//! rather than given a "report" of one user. `--mail` writes into root's mail queue, so it is
//! root's (the weekly timer runs it as root).

use super::{admin_index, euid, is_admin, parse_span, parse_when, start_before};
use anyhow::{bail, Context, Result};
use clap::Args;
use jobscope_admin::cluster::{self, page::Page};
use jobscope_audit::query::{Filters, Window, Zone};
use jobscope_config::Config;
use jobscope_deliver::mail::message::parse_address;
use jobscope_deliver::mail::queue::{FlushMode, Queue};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// The window when none is given: the last week.
const DEFAULT_SPAN_S: i64 = 7 * 86_400;
/// How long `--mail` tries to hand the report to the relay before leaving it to
/// jobscope-mail-flush.timer.
const FLUSH_BUDGET: Duration = Duration::from_secs(60);

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Jobs that ended at or after this time: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM` (local time) or
    /// Unix seconds, from 0000-01-01 to 9999-12-31 UTC [default: 7 days before --until].
    // Hyphen values are taken so that negative numbers get the range, not "unknown option".
    #[arg(long, allow_hyphen_values = true)]
    since: Option<String>,
    /// Jobs that ended before this time (same forms and range as --since) [default: now].
    #[arg(long, allow_hyphen_values = true)]
    until: Option<String>,
    /// The window as a span before --until: `7d`, `12h`, `2w`, at most 3652425d [default: 7d].
    #[arg(long, conflicts_with = "since", allow_hyphen_values = true)]
    last: Option<String>,
    /// Only these accounts (comma-separated or repeated).
    #[arg(long, value_delimiter = ',')]
    account: Vec<String>,
    /// Only these partitions (comma-separated or repeated).
    #[arg(long, value_delimiter = ',')]
    partition: Vec<String>,
    /// Users, accounts and jobs in each ranking (1 to 100).
    #[arg(short = 'n', long = "top", default_value_t = 10,
          value_parser = clap::value_parser!(u16).range(1..=100))]
    top: u16,
    /// Write the page to FILE: one HTML file with its charts inside, nothing fetched when it is
    /// opened. FILE must be new (nothing is overwritten); it is made 0640.
    #[arg(long, short = 'o', visible_alias = "output", value_name = "FILE")]
    html: Option<PathBuf>,
    /// Print the text (what a mail reader without HTML shows); the default without --html or --mail.
    #[arg(long)]
    text: bool,
    /// Mail the report to audit.report_to through the mail queue (root). Nothing is done, and the
    /// exit status is 0, when audit.report_to is not set.
    #[arg(long)]
    mail: bool,
    /// Hours and days in UTC instead of local time.
    #[arg(long)]
    utc: bool,
}

pub fn run(cfg: &Config, a: ReportArgs) -> Result<()> {
    let to_mail = a.mail && !cfg.audit.report_to.is_empty();
    if a.mail && !to_mail {
        println!("audit.report_to is not set: the cluster report is not mailed");
        if a.html.is_none() && !a.text {
            return Ok(());
        }
    }
    if !is_admin(cfg) {
        bail!(
            "the cluster report ranks every user's jobs: it is for root and the members of \
             archive.admin_group ({}). Your own jobs: `jobscope audit usage --by day`, \
             `jobscope audit jobs`",
            cfg.archive.admin_group
        );
    }
    // Everything that can be refused is, before the index is read.
    let recipients = if to_mail {
        if euid() != 0 {
            bail!(
                "--mail puts the report in root's mail queue ({}): run it as root, as \
                 jobscope-audit-report.service does",
                cfg.mail.queue_dir.display()
            );
        }
        let from = parse_address(&cfg.mail.from)
            .map_err(|e| anyhow::anyhow!("mail.from {:?}: {e}", cfg.mail.from))?;
        let to = cfg
            .audit
            .report_to
            .iter()
            .map(|t| parse_address(t).map_err(|e| anyhow::anyhow!("audit.report_to {t:?}: {e}")))
            .collect::<Result<Vec<_>>>()?;
        Some((from, to))
    } else {
        None
    };
    let zone = if a.utc { Zone::Utc } else { Zone::Local };
    let now_s = (jobscope_common::now_unix_ms() / 1000) as i64;
    let until = match &a.until {
        Some(u) => parse_when("--until", u, zone)?,
        None => now_s,
    };
    // Every end in range (parse_when, start_before): the report's window, its length and the
    // window before it cannot overflow (issue 29 §4).
    let since = match (&a.since, &a.last) {
        (Some(s), _) => parse_when("--since", s, zone)?,
        (None, Some(l)) => start_before(
            until,
            parse_span("--last", l)?,
            &format!(
                "--last {l} before --until {}",
                a.until.as_deref().unwrap_or("now")
            ),
        )?,
        (None, None) => start_before(
            until,
            DEFAULT_SPAN_S,
            &format!(
                "7 days before --until {}",
                a.until.as_deref().unwrap_or("now")
            ),
        )?,
    };
    if since >= until {
        bail!(
            "the window is empty: it starts ({since}) at or after it ends ({until}); the report \
             compares a window with the one before it, so it needs one"
        );
    }
    let opts = cluster::Options {
        window: Window {
            since_unix_s: Some(since),
            until_unix_s: Some(until),
        },
        filters: Filters {
            accounts: a.account.clone(),
            partitions: a.partition.clone(),
            ..Filters::default()
        },
        zone,
        top_n: usize::from(a.top),
        busy_pct: cfg.audit.busy_pct,
        generated_unix_s: now_s,
    };
    let data = cluster::gather(&admin_index(cfg)?, &opts)?;
    let page = Page::new(&data)?;
    for w in &page.warnings {
        eprintln!("jobscope: {w}");
    }
    if let Some(p) = &a.html {
        // Every user's figures: not world-readable, whatever the umask.
        let mut f = jobscope_common::fsutil::create_output(p, 0o640)?;
        f.write_all(page.html()?.as_bytes())
            .and_then(|()| f.sync_all())
            .with_context(|| format!("{}", p.display()))?;
        eprintln!("jobscope: cluster report written to {}", p.display());
    }
    if let Some((from, to)) = recipients {
        let mail = page.mail(&cluster::page::mail_id(&data), &from, &to)?;
        let queued = Queue::open(&cfg.mail.queue_dir)?.enqueue_mail(&mail)?;
        let names: Vec<String> = to.iter().map(|m| m.to_string()).collect();
        println!(
            "cluster report {} for {}: {queued:?}",
            mail.id,
            names.join(", ")
        );
        println!(
            "mail flush: {}",
            jobscope_deliver::notify::flush(cfg, FLUSH_BUDGET, FlushMode::Full)?
        );
    }
    if a.text || (a.html.is_none() && !a.mail) {
        print!("{}", page.text()?);
    }
    Ok(())
}
