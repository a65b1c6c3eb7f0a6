//! The words of the rules over running jobs (docs/watch.md): what a rule found, what was done, and
//! what the user can do now. One place, used by the report ("While the job ran"), by the mail the
//! runner sends while the job runs, and by `jobscope watch`'s listing.
use super::clean::clean_line as clean;
use super::format::{fmt_bytes, fmt_duration};
use jobscope_model::time::utc_time;
use jobscope_model::watch::{ActionKind, Finding, Intervention, RuleKind};

/// The instant of a Unix time in ms, as every time in a report is written (UTC).
fn at(unix_ms: u64) -> String {
    utc_time(unix_ms / 1000)
}

/// What the finding says, in one sentence without a final period:
/// "GPU 1 (…) idle since 2026-11-29 09:30:00 UTC (62 min, 0.4 % busy on average)".
pub fn finding(f: &Finding) -> String {
    let lasted = fmt_duration(f.seen_until_unix_ms.saturating_sub(f.since_unix_ms) as f64 / 1000.0);
    let text = match f.kind {
        RuleKind::GpuIdle => {
            let what = match f.subjects.len() {
                0 => "the job's GPUs".to_string(),
                _ => f.subjects.join(", "),
            };
            format!(
                "{what} idle since {} ({lasted}, {:.1} % busy on average)",
                at(f.since_unix_ms),
                f.value_pct
            )
        }
        RuleKind::CpuLow => format!(
            "CPU efficiency {:.1} % of the allocated cores since {} ({lasted})",
            f.value_pct,
            at(f.since_unix_ms)
        ),
        RuleKind::MemNearLimit => format!(
            "memory at {:.0} % of the {} allocated on the node ({} in use) and rising since {}",
            f.value_pct,
            fmt_bytes(f.mem_limit_bytes),
            fmt_bytes(f.mem_bytes),
            at(f.since_unix_ms)
        ),
    };
    clean(&text, 600)
}

/// What the user can do now about `f` (job `job_id`).
pub fn what_to_do(f: &Finding, job_id: u32) -> String {
    match f.kind {
        RuleKind::GpuIdle => format!(
            "If the job no longer needs {}, end it (`scancel {job_id}`) so others can use {}; next time request only the GPUs the program uses (`--gpus=N`), and check that it places work on every GPU it was given (CUDA_VISIBLE_DEVICES, the framework's device list).",
            if f.subjects.len() > 1 { "these GPUs" } else { "this GPU" },
            if f.subjects.len() > 1 { "them" } else { "it" },
        ),
        RuleKind::CpuLow => format!(
            "Check that the program runs as many threads or processes as the cores it was given (OMP_NUM_THREADS, `srun`, the program's own option); if it cannot use them, end it (`scancel {job_id}`) and request fewer cores next time (`--cpus-per-task`)."
        ),
        RuleKind::MemNearLimit => format!(
            "The kernel's OOM killer ends the job when it reaches its limit. Now: save what you can (a checkpoint) and, if the job will not finish within its memory, end it (`scancel {job_id}`) and resubmit with more memory (`--mem`); if it holds data in files under /dev/shm or a tmpfs, remove what it no longer needs: they count against the limit."
        ),
    }
}

/// One line of the report for what was done: "warned at …: GPU 1 idle since …; cancelled at … by
/// the site's rule "idle-gpu"".
pub fn intervention(i: &Intervention) -> String {
    let rule = clean(&i.rule, 40);
    let text = match i.action {
        ActionKind::Warned => format!(
            "warned at {} by the site's rule \"{rule}\"{}: {} (on {})",
            at(i.at_unix_ms),
            if i.mailed { " (mailed)" } else { "" },
            finding(&i.finding),
            clean(&i.node, 64)
        ),
        ActionKind::Cancelled => format!(
            "cancelled at {} by the site's rule \"{rule}\": {} (on {})",
            at(i.at_unix_ms),
            finding(&i.finding),
            clean(&i.node, 64)
        ),
        ActionKind::CancelFailed => format!(
            "the site's rule \"{rule}\" tried to cancel the job at {} and could not ({}): {}",
            at(i.at_unix_ms),
            clean(i.error.as_deref().unwrap_or("no reason given"), 200),
            finding(&i.finding)
        ),
    };
    clean(&text, 1000)
}

/// The report's lines for every node's interventions, oldest first.
pub fn interventions(nodes: &[jobscope_model::summary::NodeSummary]) -> Vec<String> {
    let mut all: Vec<&Intervention> = nodes.iter().flat_map(|n| &n.interventions).collect();
    all.sort_by_key(|i| i.at_unix_ms);
    all.into_iter().map(intervention).collect()
}

/// The subject and text of the mail the runner sends about a running job.
pub struct WatchMail {
    pub subject: String,
    pub text: String,
}

/// The job a mail is about.
pub struct MailJob<'a> {
    pub job_id: u32,
    pub name: Option<&'a str>,
    /// The node whose figures were judged.
    pub node: &'a str,
}

/// The mail for `action` on `about` by rule `rule`; `cancel_at_ms`: when the rule will cancel the
/// job if nothing changes (a warning of a rule that cancels).
pub fn mail(
    action: ActionKind,
    rule: &str,
    about: &MailJob<'_>,
    f: &Finding,
    now_ms: u64,
    cancel_at_ms: Option<u64>,
) -> WatchMail {
    let MailJob { job_id, name, node } = *about;
    let job = match name {
        Some(n) => format!("job {job_id} ({})", clean(n, 80)),
        None => format!("job {job_id}"),
    };
    let rule = clean(rule, 40);
    let found = finding(f);
    let (subject, mut text) = match action {
        ActionKind::Cancelled | ActionKind::CancelFailed => (
            format!("Your {job} was cancelled: {found}"),
            format!(
                "Your {job} was cancelled at {} by the site's rule \"{rule}\" after the warning you were sent:\n\n  {found} (on {}).\n",
                at(now_ms),
                clean(node, 64)
            ),
        ),
        ActionKind::Warned => (
            format!("Your running {job}: {found}"),
            format!(
                "jobscope checks running jobs against the site's rules. Your {job} breaks the rule \"{rule}\" (checked at {}):\n\n  {found} (on {}).\n\nWhat to do now: {}\n",
                at(now_ms),
                clean(node, 64),
                what_to_do(f, job_id)
            ),
        ),
    };
    if let Some(c) = cancel_at_ms {
        text.push_str(&format!(
            "\nThe site's rule cancels the job at {} if this still holds then.\n",
            at(c)
        ));
    }
    text.push_str(
        "\nThe job's report at its end lists this too. This mail is sent once per job and rule.\n",
    );
    WatchMail {
        subject: clean(&subject, 200),
        text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle() -> Finding {
        Finding {
            kind: RuleKind::GpuIdle,
            // 2026-11-29 09:30:00 UTC and 62 minutes later.
            since_unix_ms: 1_795_944_600_000,
            seen_until_unix_ms: 1_795_944_600_000 + 62 * 60_000,
            subjects: vec!["GPU 1 (NVIDIA H100, GPU-abc)".into()],
            value_pct: 0.4,
            mem_bytes: None,
            mem_limit_bytes: None,
        }
    }

    #[test]
    fn the_report_line_says_when_what_and_which_rule() {
        let warned = Intervention {
            rule: "idle-gpu".into(),
            action: ActionKind::Warned,
            at_unix_ms: 1_795_944_600_000 + 62 * 60_000,
            node: "n1".into(),
            finding: idle(),
            mailed: true,
            error: None,
        };
        assert_eq!(
            intervention(&warned),
            "warned at 2026-11-29 10:32:00 UTC by the site's rule \"idle-gpu\" (mailed): GPU 1 (NVIDIA H100, GPU-abc) idle since 2026-11-29 09:30:00 UTC (1h02m00s, 0.4 % busy on average) (on n1)"
        );
        let cancelled = Intervention {
            action: ActionKind::Cancelled,
            at_unix_ms: 1_795_944_600_000 + 122 * 60_000,
            ..warned
        };
        assert!(intervention(&cancelled).starts_with(
            "cancelled at 2026-11-29 11:32:00 UTC by the site's rule \"idle-gpu\": GPU 1"
        ));
    }

    /// A rule name or node with control characters cannot break a line of the report or mail.
    #[test]
    fn hostile_names_stay_on_one_line() {
        let m = mail(
            ActionKind::Warned,
            "x\ny",
            &MailJob {
                job_id: 7,
                name: Some("evil\r\nBcc: a@b"),
                node: "n\n1",
            },
            &idle(),
            1_795_944_600_000,
            Some(1_795_948_200_000),
        );
        assert!(!m.subject.contains('\n') && !m.subject.contains('\r'));
        assert!(m.text.contains("scancel 7"));
        assert!(m
            .text
            .contains("cancels the job at 2026-11-29 10:30:00 UTC"));
        for line in m.text.lines() {
            assert!(!line.starts_with("Bcc:"), "{}", m.text);
        }
    }

    #[test]
    fn memory_is_said_with_its_limit_and_what_to_do() {
        let f = Finding {
            kind: RuleKind::MemNearLimit,
            since_unix_ms: 1_795_944_600_000,
            seen_until_unix_ms: 1_795_944_660_000,
            subjects: vec![],
            value_pct: 95.0,
            mem_bytes: Some(950 << 20),
            mem_limit_bytes: Some(1000 << 20),
        };
        let s = finding(&f);
        assert!(s.starts_with("memory at 95 % of the "), "{s}");
        assert!(what_to_do(&f, 9).contains("OOM killer"));
    }
}
