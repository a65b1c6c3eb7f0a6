//! Rules over a running job's live figures (docs/watch.md): which of a site's rules a job breaks
//! now, and what to do about it given what was already done. Pure: the runner
//! (`jobscope watch`, `admin/src/watch.rs`) reads the node's spools, asks SLURM, mails, cancels and
//! records; everything it decides is decided here.
//!
//! The record of what was done ([`Intervention`]) is written into the job's spool directory on
//! its node, so it reaches the node summary, the job summary, the report and the archive on the
//! same road as the figures (`summary::node::summarize_node_spool`).
use crate::gpu::spool::GpuSeries;
use serde::{Deserialize, Serialize};

/// The rules a site can set (`[[watch.rule]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    /// GPUs allocated and idle (every one, or some) for `minutes`.
    GpuIdle,
    /// CPU efficiency under `below_pct` for `minutes`, on jobs of at least `min_cores` cores.
    CpuLow,
    /// Memory at `at_pct` of the node's allocation or more, and rising over `minutes`.
    MemNearLimit,
}

impl RuleKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RuleKind::GpuIdle => "gpu_idle",
            RuleKind::CpuLow => "cpu_low",
            RuleKind::MemNearLimit => "mem_near_limit",
        }
    }
}

/// Which GPUs must be idle for [`RuleKind::GpuIdle`] to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuScope {
    /// At least one of the job's GPUs on the node.
    #[default]
    Any,
    /// Every GPU of the job on the node.
    All,
}

/// One rule of `[[watch.rule]]`. Fields that do not apply to the rule's kind are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rule {
    /// The rule's name as the site calls it (mails, reports and the record say it).
    pub name: String,
    pub kind: RuleKind,
    /// How long the condition must have held (gpu_idle, cpu_low), or the window over which memory
    /// must have risen (mem_near_limit).
    pub minutes: f64,
    /// gpu_idle: which GPUs.
    pub gpus: GpuScope,
    /// gpu_idle: a GPU is *in use* over a stretch of `sustain_s` when its utilization (the job's
    /// own share on a shared GPU) averaged over that stretch reaches this. Only such sustained use
    /// ends an idle period: a burst of a few seconds does not.
    pub use_pct: f64,
    pub sustain_s: f64,
    /// cpu_low: the efficiency (busy cores over allocated cores) under which the job is warned.
    pub below_pct: f64,
    /// cpu_low: jobs with fewer cores on the node are left alone.
    pub min_cores: u32,
    /// mem_near_limit: share of the node's memory allocation, percent.
    pub at_pct: f64,
    /// Mail the job's user (once per job and rule).
    pub mail: bool,
    /// Cancel the job `grace_minutes` after the warning if the condition still holds, in the
    /// partitions of `cancel_partitions` only (`"*"`: every partition).
    pub cancel: bool,
    pub grace_minutes: f64,
    pub cancel_partitions: Vec<String>,
    pub exempt_users: Vec<String>,
    pub exempt_accounts: Vec<String>,
    pub exempt_partitions: Vec<String>,
    pub exempt_qos: Vec<String>,
}

impl Default for Rule {
    fn default() -> Self {
        Rule {
            name: String::new(),
            kind: RuleKind::GpuIdle,
            minutes: 60.0,
            gpus: GpuScope::Any,
            use_pct: 15.0,
            sustain_s: 300.0,
            below_pct: 10.0,
            min_cores: 4,
            at_pct: 90.0,
            mail: true,
            cancel: false,
            grace_minutes: 60.0,
            cancel_partitions: Vec::new(),
            exempt_users: Vec::new(),
            exempt_accounts: Vec::new(),
            exempt_partitions: Vec::new(),
            exempt_qos: Vec::new(),
        }
    }
}

impl Rule {
    /// The configuration's checks, one sentence naming the field.
    pub fn validate(&self) -> Result<(), String> {
        let name = &self.name;
        if name.is_empty()
            || name.len() > 40
            || !name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        {
            return Err(format!(
                "watch.rule name {name:?}: 1 to 40 letters, digits, '-' or '_'"
            ));
        }
        let range = |field: &str, v: f64, lo: f64, hi: f64| -> Result<(), String> {
            if v.is_finite() && v >= lo && v <= hi {
                Ok(())
            } else {
                Err(format!(
                    "watch.rule {name:?}: {field} = {v} is not within {lo}..={hi}"
                ))
            }
        };
        // Down to 6 s: a site wants minutes or hours; the tests on a real cluster want seconds.
        range("minutes", self.minutes, 0.1, 10_080.0)?;
        range("use_pct", self.use_pct, 0.1, 100.0)?;
        range("sustain_s", self.sustain_s, 1.0, 86_400.0)?;
        range("below_pct", self.below_pct, 0.1, 100.0)?;
        range("at_pct", self.at_pct, 1.0, 100.0)?;
        range("grace_minutes", self.grace_minutes, 0.0, 10_080.0)?;
        if self.cancel && self.cancel_partitions.is_empty() {
            return Err(format!(
                "watch.rule {name:?}: cancel = true needs cancel_partitions (the partitions where cancelling is allowed, or \"*\")"
            ));
        }
        Ok(())
    }

    /// Why `job` is exempt from this rule, if it is.
    pub fn exemption(&self, job: &LiveJob) -> Option<String> {
        fn hit<'a>(list: &[String], v: &'a Option<String>) -> Option<&'a str> {
            v.as_deref().filter(|v| list.iter().any(|x| x == v))
        }
        if let Some(u) = hit(&self.exempt_users, &job.user) {
            return Some(format!("user {u} is exempt"));
        }
        if let Some(a) = hit(&self.exempt_accounts, &job.account) {
            return Some(format!("account {a} is exempt"));
        }
        if let Some(p) = hit(&self.exempt_partitions, &job.partition) {
            return Some(format!("partition {p} is exempt"));
        }
        if let Some(q) = hit(&self.exempt_qos, &job.qos) {
            return Some(format!("QOS {q} is exempt"));
        }
        None
    }

    /// Whether this rule may cancel `job` (enabled, and in one of the rule's partitions).
    pub fn may_cancel(&self, job: &LiveJob) -> bool {
        self.cancel
            && self.cancel_partitions.iter().any(|p| {
                p == "*"
                    || job
                        .partition
                        .as_deref()
                        .is_some_and(|jp| jp.split(',').any(|x| x == p))
            })
    }
}

/// One interval of one GPU: `[from_ms, to_ms)` and the job's utilization over it (its own
/// share on a shared GPU), percent; `None` when it is not known.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuInterval {
    pub from_ms: u64,
    pub to_ms: u64,
    pub util_pct: Option<f64>,
}

/// One of the job's GPUs on the node.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuTrack {
    /// `GPU 1 (NVIDIA H100, GPU-…)`.
    pub label: String,
    pub intervals: Vec<GpuInterval>,
}

/// One point of the job's CPU or memory figures: the interval `[from_ms, to_ms)` and its value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub from_ms: u64,
    pub to_ms: u64,
    pub value: f64,
}

/// What the rules see of one running job on one node.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LiveJob {
    pub job_id: u32,
    pub node: String,
    pub user: Option<String>,
    pub account: Option<String>,
    pub partition: Option<String>,
    pub qos: Option<String>,
    pub start_unix_ms: u64,
    pub alloc_cores: Option<u32>,
    pub alloc_mem_bytes: Option<u64>,
    /// Busy cores per interval.
    pub cpu: Vec<Point>,
    /// Memory in use (bytes) at the end of each interval (the highest seen in it).
    pub mem: Vec<Point>,
    pub gpus: Vec<GpuTrack>,
}

/// Who the job is, as SLURM says (the exemptions' keys).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Owner {
    pub user: Option<String>,
    pub account: Option<String>,
    pub partition: Option<String>,
    pub qos: Option<String>,
}

impl LiveJob {
    /// What the rules see of job `job_id` on `node` from its spool there, read at `now_unix_ms`:
    /// the node summary's timeline (the same figures the report will have) and the GPUs'
    /// intervals.
    pub fn from_spool(
        spool: &crate::summary::node::NodeSpool,
        job_id: u32,
        node: &str,
        owner: Owner,
        now_unix_ms: u64,
    ) -> LiveJob {
        let ns = crate::summary::node::summarize_node(
            spool.series.as_ref(),
            &spool.steps,
            node,
            now_unix_ms,
        );
        let start = ns.start_unix_ms;
        let at = |t_s: f64| start + (t_s.max(0.0) * 1000.0) as u64;
        let mut cpu = Vec::new();
        let mut mem = Vec::new();
        let mut from = start;
        for p in &ns.timeline {
            let to = at(p.t_s);
            if let Some(v) = p.busy_cores {
                cpu.push(Point {
                    from_ms: from,
                    to_ms: to,
                    value: v,
                });
            }
            if let Some(v) = p.mem_bytes_max.or(p.mem_bytes) {
                mem.push(Point {
                    from_ms: from,
                    to_ms: to,
                    value: v as f64,
                });
            }
            from = to;
        }
        LiveJob {
            job_id,
            node: node.to_string(),
            user: owner.user,
            account: owner.account,
            partition: owner.partition,
            qos: owner.qos,
            start_unix_ms: start,
            alloc_cores: ns.alloc_cores,
            alloc_mem_bytes: ns.alloc_mem_bytes,
            cpu,
            mem,
            gpus: spool.gpu.as_ref().map(gpu_tracks).unwrap_or_default(),
        }
    }
}

/// The GPU tracks of a node's `gpu.jsc`, one per device, labelled as the report labels them.
pub fn gpu_tracks(series: &GpuSeries) -> Vec<GpuTrack> {
    series
        .devices()
        .iter()
        .enumerate()
        .map(|(slot, dev)| GpuTrack {
            label: dev.identity.label(),
            intervals: crate::gpu::summary::job_util_intervals(series, slot as u32)
                .into_iter()
                .map(|(from_ms, to_ms, util_pct)| GpuInterval {
                    from_ms,
                    to_ms,
                    util_pct,
                })
                .collect(),
        })
        .collect()
}

/// A rule that holds for a job now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    pub kind: RuleKind,
    /// Since when the condition holds (gpu_idle, cpu_low: the start of the stretch; mem_near_limit:
    /// the start of the rise).
    pub since_unix_ms: u64,
    /// The last instant seen (the figures end there).
    pub seen_until_unix_ms: u64,
    /// What it is about: the idle GPUs' labels; empty for the job as a whole.
    pub subjects: Vec<String>,
    /// The figure: the idle GPUs' mean utilization over the stretch (gpu_idle), the CPU efficiency
    /// over it (cpu_low), memory in use as a share of the allocation (mem_near_limit), percent.
    pub value_pct: f64,
    /// mem_near_limit: memory in use and allocated, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_limit_bytes: Option<u64>,
}

/// When a GPU's idle stretch began, given its intervals: the end of its last *sustained* use (a
/// stretch of at least `sustain_ms` whose time-weighted mean utilization reached `use_pct`), or of
/// the last interval whose utilization is unknown (an unknown interval is not idle evidence), or
/// the first interval's start. `None` when it has no interval or its last one is unknown.
pub fn idle_since_ms(intervals: &[GpuInterval], use_pct: f64, sustain_ms: u64) -> Option<u64> {
    let last = intervals.last()?;
    last.util_pct?;
    let mut since = intervals[0].from_ms;
    // A window [lo, hi] of consecutive known intervals, slid forward: whenever the shortest
    // window ending at interval hi that covers sustain_ms has mean ≥ use_pct, use ended at hi.
    let mut lo = 0usize;
    let mut busy_ms_pct = 0.0f64; // Σ util × duration over lo..=hi
    for hi in 0..intervals.len() {
        let iv = intervals[hi];
        let Some(u) = iv.util_pct else {
            since = iv.to_ms;
            lo = hi + 1;
            busy_ms_pct = 0.0;
            continue;
        };
        busy_ms_pct += u * iv.to_ms.saturating_sub(iv.from_ms) as f64;
        // Drop intervals from the front while the window without them still covers sustain_ms.
        while lo < hi && iv.to_ms.saturating_sub(intervals[lo + 1].from_ms) >= sustain_ms {
            let d = intervals[lo];
            busy_ms_pct -= d.util_pct.unwrap_or(0.0) * d.to_ms.saturating_sub(d.from_ms) as f64;
            lo += 1;
        }
        let span_ms = iv.to_ms.saturating_sub(intervals[lo].from_ms);
        // Only a window that covers sustain_ms decides; a shorter one (the job's first minutes,
        // or right after a gap) is judged by its mean over sustain_ms, so a short burst is
        // diluted as it would be within a full window.
        let mean = busy_ms_pct / span_ms.max(sustain_ms).max(1) as f64;
        if mean >= use_pct {
            since = iv.to_ms;
        }
    }
    Some(since)
}

/// Whether `rule` holds for `job` now, and its figure. Exemptions are not looked at here.
pub fn evaluate(rule: &Rule, job: &LiveJob) -> Option<Finding> {
    let need_ms = (rule.minutes * 60_000.0) as u64;
    match rule.kind {
        RuleKind::GpuIdle => gpu_idle(rule, job, need_ms),
        RuleKind::CpuLow => cpu_low(rule, job, need_ms),
        RuleKind::MemNearLimit => mem_near_limit(rule, job, need_ms),
    }
}

fn gpu_idle(rule: &Rule, job: &LiveJob, need_ms: u64) -> Option<Finding> {
    if job.gpus.is_empty() {
        return None;
    }
    let sustain_ms = (rule.sustain_s * 1000.0) as u64;
    let mut idle = Vec::new();
    let mut any_unknown = false;
    for g in &job.gpus {
        let end = g.intervals.last().map(|i| i.to_ms);
        match (idle_since_ms(&g.intervals, rule.use_pct, sustain_ms), end) {
            (Some(since), Some(end)) if end.saturating_sub(since) >= need_ms => {
                idle.push((g, since, end))
            }
            (None, _) => any_unknown = true,
            _ => {}
        }
    }
    if idle.is_empty()
        || (rule.gpus == GpuScope::All && (idle.len() < job.gpus.len() || any_unknown))
    {
        return None;
    }
    let since = idle.iter().map(|(_, s, _)| *s).max()?;
    let until = idle.iter().map(|(_, _, e)| *e).min()?;
    // The idle GPUs' mean utilization over the stretch all of them were idle.
    let (mut sum, mut ms) = (0.0, 0.0);
    for (g, _, _) in &idle {
        for iv in g.intervals.iter().filter(|i| i.from_ms >= since) {
            let d = iv.to_ms.saturating_sub(iv.from_ms) as f64;
            sum += iv.util_pct.unwrap_or(0.0) * d;
            ms += d;
        }
    }
    Some(Finding {
        kind: RuleKind::GpuIdle,
        since_unix_ms: since,
        seen_until_unix_ms: until,
        subjects: idle.iter().map(|(g, _, _)| g.label.clone()).collect(),
        value_pct: if ms > 0.0 { sum / ms } else { 0.0 },
        mem_bytes: None,
        mem_limit_bytes: None,
    })
}

fn cpu_low(rule: &Rule, job: &LiveJob, need_ms: u64) -> Option<Finding> {
    let cores = job.alloc_cores?;
    if cores < rule.min_cores.max(1) {
        return None;
    }
    let end = job.cpu.last()?.to_ms;
    // The efficiency over the last `minutes`, only once that much was seen.
    let start = end.checked_sub(need_ms)?;
    let window: Vec<&Point> = job.cpu.iter().filter(|p| p.to_ms > start).collect();
    let first = *window.first()?;
    if first.from_ms > start {
        return None;
    }
    let (mut busy, mut ms) = (0.0, 0.0);
    for p in &window {
        let d = p.to_ms.saturating_sub(p.from_ms) as f64;
        busy += p.value * d;
        ms += d;
    }
    let eff = 100.0 * busy / ms.max(1.0) / cores as f64;
    (eff < rule.below_pct).then(|| Finding {
        kind: RuleKind::CpuLow,
        since_unix_ms: first.from_ms,
        seen_until_unix_ms: end,
        subjects: Vec::new(),
        value_pct: eff,
        mem_bytes: None,
        mem_limit_bytes: None,
    })
}

fn mem_near_limit(rule: &Rule, job: &LiveJob, window_ms: u64) -> Option<Finding> {
    let limit = job.alloc_mem_bytes.filter(|&l| l > 0)?;
    let last = job.mem.last()?;
    let share = 100.0 * last.value / limit as f64;
    if share < rule.at_pct {
        return None;
    }
    // Rising: the newest figure is above the lowest one of the window before it.
    let from = last.to_ms.saturating_sub(window_ms);
    let earlier: Vec<&Point> = job.mem[..job.mem.len() - 1]
        .iter()
        .filter(|p| p.to_ms >= from)
        .collect();
    let low = earlier.iter().min_by(|a, b| a.value.total_cmp(&b.value))?;
    (last.value > low.value).then(|| Finding {
        kind: RuleKind::MemNearLimit,
        since_unix_ms: low.to_ms,
        seen_until_unix_ms: last.to_ms,
        subjects: Vec::new(),
        value_pct: share,
        mem_bytes: Some(last.value as u64),
        mem_limit_bytes: Some(limit),
    })
}

/// What was done about a running job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// The user was told (by mail where the rule mails).
    Warned,
    /// The job was cancelled by the rule.
    Cancelled,
    /// Cancelling was tried and SLURM refused or did not answer (`error` says what).
    CancelFailed,
}

/// One thing jobscope did about a running job, as recorded in the job's spool, report and archive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Intervention {
    /// The site's rule.
    pub rule: String,
    pub action: ActionKind,
    pub at_unix_ms: u64,
    /// The node whose figures were judged.
    pub node: String,
    pub finding: Finding,
    /// Whether a mail to the user was queued.
    #[serde(default)]
    pub mailed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The file in a job's spool directory on a node holding that node's [`Intervention`]s, as JSON:
/// written by the runner (root, atomically), read with the spool.
pub const WATCH_FILE: &str = "watch.json";
/// The most bytes of [`WATCH_FILE`].
pub const WATCH_FILE_MAX_BYTES: u64 = 256 * 1024;

/// The most interventions kept per job and node (a rule warns once and cancels once).
pub const MAX_INTERVENTIONS: usize = 64;

/// What to do now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Planned {
    pub rule: String,
    pub action: ActionKind,
    pub finding: Finding,
    /// Mail the user (the rule mails; a cancellation is always told).
    pub mail: bool,
}

/// What a rule did not do to a job, and why (the dry run and `--json` list them).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    pub rule: String,
    pub why: String,
}

/// The plan for one job: each rule that holds and is not exempt gives a warning the first time,
/// and a cancellation once the warning is `grace_minutes` old, cancelling is enabled for the rule
/// and the job's partition, and the condition has held without a break since before the warning
/// (when it broke off and began again, a rule that cancels warns anew first). Nothing is planned
/// twice: `past` holds what was done.
pub fn plan(
    rules: &[Rule],
    job: &LiveJob,
    past: &[Intervention],
    now_unix_ms: u64,
) -> (Vec<Planned>, Vec<Skipped>) {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for rule in rules {
        let Some(f) = evaluate(rule, job) else {
            continue;
        };
        if let Some(why) = rule.exemption(job) {
            skipped.push(Skipped {
                rule: rule.name.clone(),
                why,
            });
            continue;
        }
        let mine = |a: ActionKind| {
            past.iter()
                .filter(move |i| i.rule == rule.name && i.action == a)
        };
        if mine(ActionKind::Cancelled).next().is_some() {
            continue;
        }
        let warn = |out: &mut Vec<Planned>, f: Finding| {
            out.push(Planned {
                rule: rule.name.clone(),
                action: ActionKind::Warned,
                finding: f,
                mail: rule.mail,
            })
        };
        let Some(warned) = mine(ActionKind::Warned).map(|i| i.at_unix_ms).max() else {
            warn(&mut out, f);
            continue;
        };
        // A rule that does not cancel warns once per job.
        if !rule.may_cancel(job) {
            continue;
        }
        if f.since_unix_ms > warned {
            // The condition broke off after the last warning and began again: the user is
            // warned anew before any cancellation, and the grace counts from then.
            warn(&mut out, f);
            continue;
        }
        // One failed try is retried at the next pass; after three, it is left to the admins.
        if mine(ActionKind::CancelFailed).count() >= 3 {
            skipped.push(Skipped {
                rule: rule.name.clone(),
                why: "cancelling failed three times".into(),
            });
            continue;
        }
        let grace_ms = (rule.grace_minutes * 60_000.0) as u64;
        if now_unix_ms.saturating_sub(warned) < grace_ms {
            continue;
        }
        out.push(Planned {
            rule: rule.name.clone(),
            action: ActionKind::Cancelled,
            finding: f,
            mail: true,
        });
    }
    (out, skipped)
}

#[cfg(test)]
mod tests;
