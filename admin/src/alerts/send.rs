//! `jobscope alerts send`: each user an alert is decided for gets one mail through the durable
//! mail queue (jobscope_deliver, as the end-of-job mail), then the record says so.
//!
//! Queue first, then record: a crash in between loses no alert. The next send finds the same
//! users unrecorded and builds their mails again under the same queue id (`alerts.u<uid>.p<period
//! start>`: one per user and period), which the queue takes as already queued, or already sent
//! while it keeps its `sent/` markers (`mail.keep_sent_days`), and records them then. So a user gets
//! at most one alert mail per period; if jobs came in between the crash and that send, the record
//! may then name a few runs the mail did not list (they are not reported again).

use super::state::{self, Sent};
use super::words;
use super::{evaluate, Decision, Evaluation, Sources, UserAlert};
use anyhow::{Context, Result};
use jobscope_audit::query::Zone;
use jobscope_deliver::mail::message::{parse_address, text_and_html_mail};
use jobscope_deliver::mail::queue::{Enqueued, Queue};
use jobscope_report::present::templates::render_text_as_html;
use serde::Serialize;

/// What happened to one mail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Queued {
    /// The user's uid and name; none for the admins' summary.
    pub uid: Option<u32>,
    pub user: Option<String>,
    pub to: String,
    pub mail_id: String,
    /// `queued`, `already_queued`, `already_sent`, `already_dead`; or `failed`.
    pub result: String,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SendReport {
    pub evaluation: Evaluation,
    /// The users' mails, then the admins' summary if there is one.
    pub mails: Vec<Queued>,
}

impl SendReport {
    /// Whether every mail decided was queued.
    pub fn ok(&self) -> bool {
        self.mails.iter().all(|m| m.error.is_none())
    }
}

/// The queue id of `uid`'s alert of the period from `period_start_unix_s`.
pub fn mail_id(uid: u32, period_start_unix_s: i64) -> String {
    format!("alerts.u{uid}.p{period_start_unix_s}")
}

/// FNV-1a, 64 bits: a stable digest (std's hasher may change between releases) of the ids a
/// summary covers, so that the same summary gets the same queue id.
fn fnv1a(parts: &[String]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn result_word(e: &Enqueued) -> &'static str {
    match e {
        Enqueued::Queued | Enqueued::QueuedFromReserve => "queued",
        Enqueued::AlreadyQueued => "already_queued",
        Enqueued::AlreadySent => "already_sent",
        Enqueued::AlreadyDead => "already_dead",
    }
}

/// Decides under the send lock, queues one mail per user decided [`Decision::Mail`] and a
/// summary to `alerts.admin_to` (when set and anyone was mailed), then records what was queued.
/// Delivery is the queue's (`jobscope mail flush`, or the caller's flush).
pub fn send(src: &Sources, zone: Zone) -> Result<SendReport> {
    let cfg = src.cfg;
    anyhow::ensure!(
        cfg.mail.enabled,
        "mail.enabled is false: no alert is sent (`jobscope alerts check` shows what would be)"
    );
    let from = parse_address(&cfg.mail.from)
        .map_err(|e| anyhow::anyhow!("mail.from {:?}: {e}", cfg.mail.from))?;
    let admin = cfg
        .alerts
        .admin_to
        .as_deref()
        .map(|a| parse_address(a).map_err(|e| anyhow::anyhow!("alerts.admin_to {a:?}: {e}")))
        .transpose()?;
    let _lock = state::lock(src.index_dir)?;
    let mut record = Sent::read(src.index_dir)?.unwrap_or_default();
    let ev = evaluate(src, &record)?;
    let queue = Queue::open(&cfg.mail.queue_dir)?;
    let mut mails = Vec::new();
    let mut mailed: Vec<&UserAlert> = Vec::new();
    for u in ev.users.iter().filter(|u| u.decision == Decision::Mail) {
        let id = mail_id(u.uid, ev.period_start_unix_s);
        let to = u.to.clone().unwrap_or_default();
        let queued = (|| -> Result<Enqueued> {
            let mailbox = parse_address(&to).map_err(|e| anyhow::anyhow!("{to:?}: {e}"))?;
            let subject = words::subject(u);
            let text = words::mail_text(cfg, u, zone);
            let html = render_text_as_html(&subject, &text)?;
            let mail = text_and_html_mail(&id, &from, &mailbox, &subject, text, html)?;
            Ok(queue.enqueue_mail(&mail)?)
        })();
        if queued.is_ok() {
            record.record(u, ev.period_start_unix_s, ev.now_unix_s, &id);
            // Already dead (given up on after a permanent error) counts as sent too: the queue
            // keeps it in dead/ for `jobscope mail retry`.
            mailed.push(u);
        }
        mails.push(Queued {
            uid: Some(u.uid),
            user: Some(u.user.clone()),
            to,
            mail_id: id,
            result: queued.as_ref().map_or("failed", result_word).into(),
            error: queued.err().map(|e| format!("{e:#}")),
        });
    }
    if let (Some(admin), false) = (admin, mailed.is_empty()) {
        let ids: Vec<String> = mails
            .iter()
            .filter(|m| m.error.is_none())
            .map(|m| m.mail_id.clone())
            .collect();
        let id = format!(
            "alerts-summary.p{}.{:016x}",
            ev.period_start_unix_s,
            fnv1a(&ids)
        );
        let (subject, text) = words::summary(&ev, &mailed, zone);
        let queued = (|| -> Result<Enqueued> {
            let html = render_text_as_html(&subject, &text)?;
            let mail = text_and_html_mail(&id, &from, &admin, &subject, text, html)?;
            Ok(queue.enqueue_mail(&mail)?)
        })();
        mails.push(Queued {
            uid: None,
            user: None,
            to: admin.email.to_string(),
            mail_id: id,
            result: queued.as_ref().map_or("failed", result_word).into(),
            error: queued.err().map(|e| format!("{e:#}")),
        });
    }
    // A run is forgotten once it is out of every rule's window (enabled or not: one enabled
    // later must not find runs it was told about under another name).
    let a = &cfg.alerts;
    let longest = [
        a.gpu_idle.window_days,
        a.cpu_efficiency.window_days,
        a.mem_request.window_days,
        a.timeouts.window_days,
        a.cpu_on_gpu.window_days,
    ]
    .into_iter()
    .max()
    .unwrap_or(1);
    record.forget_before(
        ev.now_unix_s - i64::from(longest) * 86_400,
        ev.period_start_unix_s,
    );
    record
        .write(src.index_dir)
        .context("the mails are queued but not recorded; the next send records them")?;
    Ok(SendReport {
        evaluation: ev,
        mails,
    })
}
