//! What an alert says: the dry run's blocks for the admin, the user's mail (the same text is its
//! HTML part, escaped by the presenter), and the admins' summary. Tables are the audit's own
//! ([`jobscope_audit::render::text`]: aligned, units from the columns, times in the zone the header
//! names, job names and other text cleaned); every other user-supplied string goes through
//! [`clean_line`].

use super::{Decision, Evaluation, Finding, Rule, UserAlert, WasteUnit};
use jobscope_audit::query::Zone;
use jobscope_audit::render::{self, wrap};
use jobscope_audit::table::{ColType, Column, Table, Unit, Value};
use jobscope_config::Config;
use jobscope_report::present::{clean_line, fmt_hours};

/// A rule's name for people.
pub fn title(rule: Rule) -> &'static str {
    match rule {
        Rule::GpuIdle => "GPUs idle or never used",
        Rule::CpuEfficiency => "Low CPU efficiency",
        Rule::MemRequest => "Memory asked for and not used",
        Rule::Timeouts => "Jobs stopped at their time limit",
        Rule::CpuOnGpu => "CPU-only jobs on busy GPU partitions",
    }
}

fn jobs(n: usize) -> String {
    if n == 1 {
        "1 job".into()
    } else {
        format!("{n} jobs")
    }
}

/// What a rule found, in one sentence, with the rule's threshold.
pub fn sentence(cfg: &Config, f: &Finding) -> String {
    let a = &cfg.alerts;
    let (n, days, w) = (f.runs.len(), f.window_days, fmt_hours(Some(f.waste_hours)));
    match f.rule {
        Rule::GpuIdle => format!(
            "{w} GPU-hours of GPUs idle or never used in {} that ended in the last {days} days \
             (the alert starts at {} GPU-hours).",
            jobs(n),
            a.gpu_idle.min_gpu_hours
        ),
        Rule::CpuEfficiency => format!(
            "{} of {} core-hours or more used under {} % of their cores in the last {days} days: \
             {w} core-hours unused (the alert starts at {}).",
            jobs(n),
            a.cpu_efficiency.min_core_hours,
            a.cpu_efficiency.max_cpu_eff_pct,
            jobs(a.cpu_efficiency.min_jobs as usize)
        ),
        Rule::MemRequest => format!(
            "{} in the last {days} days asked for {}× or more the memory the same job needed \
             before (the 95th percentile of your earlier runs' peaks): {w} GB-hours of memory \
             unused (the alert starts at {}).",
            jobs(n),
            a.mem_request.min_ratio,
            jobs(a.mem_request.min_jobs as usize)
        ),
        Rule::Timeouts => format!(
            "{} in the last {days} days were stopped at their time limit (TIMEOUT): {w} \
             core-hours, and whatever they had not saved (the alert starts at {}).",
            jobs(n),
            jobs(a.timeouts.min_jobs as usize)
        ),
        Rule::CpuOnGpu => format!(
            "{} without GPUs in the last {days} days ran on a GPU partition while {} % or more \
             of its cores were allocated: {w} core-hours GPU jobs could not have (the alert \
             starts at {}).",
            jobs(n),
            cfg.audit.busy_pct,
            jobs(a.cpu_on_gpu.min_jobs as usize)
        ),
    }
}

/// A finding's jobs as an audit table (at most `max` rows): the job, then the figures its rule
/// rests on.
pub fn table(f: &Finding, max: usize) -> Table {
    let mut cols = vec![
        ("job_id", ColType::Int, Unit::None),
        ("name", ColType::Text, Unit::None),
        ("partition", ColType::Text, Unit::None),
        ("end_unix_s", ColType::Int, Unit::UnixS),
        ("elapsed_s", ColType::Float, Unit::DurationS),
    ];
    cols.extend_from_slice(match f.rule {
        Rule::GpuIdle => &[
            ("alloc_gpus", ColType::Int, Unit::None),
            ("gpus_idle", ColType::Int, Unit::None),
            ("gpu_hours_wasted", ColType::Float, Unit::Hours),
        ][..],
        Rule::CpuEfficiency => &[
            ("alloc_cores", ColType::Int, Unit::None),
            ("cpu_eff_pct", ColType::Float, Unit::Pct),
            ("core_hours_alloc", ColType::Float, Unit::Hours),
            ("core_hours_wasted", ColType::Float, Unit::Hours),
        ][..],
        Rule::MemRequest => &[
            ("alloc_mem_per_node_bytes", ColType::Int, Unit::Bytes),
            ("mem_peak_p95_bytes", ColType::Int, Unit::Bytes),
            ("mem_gb_hours_wasted", ColType::Float, Unit::Hours),
        ][..],
        Rule::Timeouts => &[
            ("alloc_cores", ColType::Int, Unit::None),
            ("core_hours_alloc", ColType::Float, Unit::Hours),
        ][..],
        Rule::CpuOnGpu => &[
            ("alloc_cores", ColType::Int, Unit::None),
            ("partition_busy_pct", ColType::Float, Unit::Pct),
            ("core_hours_alloc", ColType::Float, Unit::Hours),
        ][..],
    });
    let mut t = Table::new(
        cols.iter()
            .map(|(n, k, u)| Column::new(n, *k, *u))
            .collect(),
    );
    let int = |v: Option<u64>| v.map_or(Value::Null, |x| Value::Int(x as i64));
    let float = |v: Option<f64>| v.map_or(Value::Null, Value::Float);
    let text = |v: &Option<String>| v.clone().map_or(Value::Null, Value::Text);
    for j in f.jobs.iter().take(max) {
        let row = cols
            .iter()
            .map(|(n, _, _)| match *n {
                "job_id" => Value::Int(i64::from(j.job_id)),
                "name" => text(&j.name),
                "partition" => text(&j.partition),
                "end_unix_s" => Value::Int(j.end_unix_s),
                "elapsed_s" => Value::Float(j.elapsed_s),
                "alloc_gpus" => int(j.alloc_gpus.map(u64::from)),
                "gpus_idle" => int(j.gpus_idle.map(u64::from)),
                "gpu_hours_wasted" => float(j.gpu_hours_wasted),
                "alloc_cores" => int(j.alloc_cores.map(u64::from)),
                "cpu_eff_pct" => float(j.cpu_eff_pct),
                "core_hours_alloc" => float(j.core_hours_alloc),
                "core_hours_wasted" => float(j.core_hours_wasted),
                "alloc_mem_per_node_bytes" => int(j.alloc_mem_per_node_bytes),
                "mem_peak_p95_bytes" => int(j.mem_peak_p95_bytes),
                "mem_gb_hours_wasted" => float(j.mem_gb_hours_wasted),
                "partition_busy_pct" => float(j.partition_busy_pct),
                _ => Value::Null,
            })
            .collect();
        t.rows.push(row);
    }
    t
}

/// `text` with every line indented by `by` spaces.
fn indent(text: &str, by: usize) -> String {
    let mut out = String::with_capacity(text.len() + by * 32);
    for l in text.lines() {
        if !l.is_empty() {
            out.extend(std::iter::repeat_n(' ', by));
            out.push_str(l);
        }
        out.push('\n');
    }
    out
}

/// The finding's table, indented, with the number of jobs left out of it.
fn jobs_table(f: &Finding, max: usize, zone: Zone, by: usize) -> String {
    let mut out = indent(&render::text(&table(f, max), zone), by);
    match f.runs.len().saturating_sub(max) {
        0 => {}
        1 => out += &format!("{}… and 1 more job\n", " ".repeat(by)),
        n => out += &format!("{}… and {n} more jobs\n", " ".repeat(by)),
    }
    out
}

/// `6.5 GPU-hours, 12 core-hours`.
pub fn waste_line(u: &UserAlert) -> String {
    u.waste()
        .iter()
        .map(|(unit, h)| format!("{} {}", fmt_hours(Some(*h)), unit.words()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn advice_text(u: &UserAlert, by: usize) -> String {
    let pad = " ".repeat(by);
    let mut out = String::new();
    for b in &u.advice {
        out += &format!("{pad}{}\n", b.heading);
        for l in &b.lines {
            out += &format!("{pad}  {}\n{pad}      # {}\n", l.line, l.reason);
        }
    }
    out
}

fn decision_words(d: Decision, dry_run: bool) -> &'static str {
    match (d, dry_run) {
        (Decision::Mail, true) => "would be mailed",
        (Decision::Mail, false) => "mailed",
        (Decision::AlreadyMailed, _) => "not mailed",
        (Decision::OptedOut, _) => "not mailed",
        (Decision::NoAddress, _) => "not mailed",
    }
}

/// One user's block of the dry run: who, the decision and why, each rule with its jobs as a
/// table, the waste in hours, the `#SBATCH` lines the mail would give, notes.
pub fn user_block(cfg: &Config, u: &UserAlert, zone: Zone, dry_run: bool) -> String {
    let mut out = format!(
        "{} (uid {}{}): {}: {}\n",
        clean_line(&u.user, 64),
        u.uid,
        u.to.as_deref()
            .map(|t| format!(", {}", clean_line(t, 254)))
            .unwrap_or_default(),
        decision_words(u.decision, dry_run),
        u.reason
    );
    for f in &u.findings {
        out += &indent(
            &(wrap(&format!("{}: {}", title(f.rule), sentence(cfg, f)), 100, "") + "\n"),
            2,
        );
        out += &jobs_table(f, cfg.alerts.max_jobs_listed as usize, zone, 4);
    }
    if !u.findings.is_empty() {
        out += &format!("  wasted in all: {}\n", waste_line(u));
    }
    if !u.advice.is_empty() {
        // The lines the mail gives, without their reasons (the mail has them).
        out += "  #SBATCH lines the mail gives, from the user's earlier runs:\n";
        for b in &u.advice {
            let lines: Vec<&str> = b.lines.iter().map(|l| l.line.as_str()).collect();
            out += &format!("    {}\n      {}\n", b.heading, lines.join("  "));
        }
    }
    for n in &u.notes {
        out += &format!("  note: {}\n", clean_line(n, 300));
    }
    out
}

/// The enabled rules, one line each: name, threshold, window.
fn rules_lines(cfg: &Config, ev: &Evaluation) -> String {
    if ev.rules.is_empty() {
        return "rules: none enabled\n".into();
    }
    let a = &cfg.alerts;
    let mut out = "rules:\n".to_string();
    for r in &ev.rules {
        let t = match r.rule {
            Rule::GpuIdle => format!("≥ {} GPU-hours idle", a.gpu_idle.min_gpu_hours),
            Rule::CpuEfficiency => format!(
                "≥ {} of ≥ {} core-hours under {} % CPU",
                jobs(a.cpu_efficiency.min_jobs as usize),
                a.cpu_efficiency.min_core_hours,
                a.cpu_efficiency.max_cpu_eff_pct
            ),
            Rule::MemRequest => format!(
                "≥ {} asking ≥ {}× the p95 peak of their earlier runs",
                jobs(a.mem_request.min_jobs as usize),
                a.mem_request.min_ratio
            ),
            Rule::Timeouts => format!("≥ {} TIMEOUT", jobs(a.timeouts.min_jobs as usize)),
            Rule::CpuOnGpu => format!(
                "≥ {} of ≥ {} core-hours without GPUs on a GPU partition ≥ {} % busy",
                jobs(a.cpu_on_gpu.min_jobs as usize),
                a.cpu_on_gpu.min_core_hours,
                cfg.audit.busy_pct
            ),
        };
        out += &format!("  {:<15} {t} in {} days\n", r.rule.key(), r.window_days);
    }
    out
}

/// The dry run for people: when and over what, then one block per user with a finding.
pub fn dry_run(cfg: &Config, ev: &Evaluation, zone: Zone) -> String {
    let mailed = ev
        .users
        .iter()
        .filter(|u| u.decision == Decision::Mail)
        .count();
    let mut out = format!(
        "jobscope alerts (dry run) at {}; period of {} days from {}\n{}",
        jobscope_model::time::utc_time(ev.now_unix_s.max(0) as u64),
        ev.period_days,
        jobscope_model::time::utc_time(ev.period_start_unix_s.max(0) as u64),
        rules_lines(cfg, ev)
    );
    out += &format!(
        "{} would be mailed, {} not (already mailed this period, opted out or no address)\n",
        match mailed {
            1 => "1 user".to_string(),
            n => format!("{n} users"),
        },
        ev.users.len() - mailed
    );
    for n in &ev.notes {
        out += &format!("note: {n}\n");
    }
    // The users' blocks on every core, in order (each block is the user's alone).
    let parts = super::in_order_on_every_core(ev.users.iter().collect(), |users| {
        let mut s = String::new();
        for u in users {
            s += "\n";
            s += &user_block(cfg, u, zone, true);
        }
        s
    });
    for p in parts {
        out += &p;
    }
    out
}

/// A rule's name inside a sentence (the subject).
fn short(rule: Rule) -> &'static str {
    match rule {
        Rule::GpuIdle => "idle GPUs",
        Rule::CpuEfficiency => "low CPU efficiency",
        Rule::MemRequest => "memory asked for and not used",
        Rule::Timeouts => "jobs stopped at their time limit",
        Rule::CpuOnGpu => "CPU-only jobs on busy GPU partitions",
    }
}

/// The subject of a user's alert mail.
pub fn subject(u: &UserAlert) -> String {
    let rules: Vec<&str> = u.findings.iter().map(|f| short(f.rule)).collect();
    format!("jobscope: your recent jobs: {}", rules.join(", "))
}

/// The body of a user's alert mail (its text part, and in `<pre>` its HTML part).
pub fn mail_text(cfg: &Config, u: &UserAlert, zone: Zone) -> String {
    let max = cfg.alerts.max_jobs_listed as usize;
    let mut out = format!(
        "Hello {},\n\njobscope reports on each of your jobs when it ends. Looking at your recent \
         jobs together, it found\nresources they held and did not use, which other jobs were \
         waiting for:\n",
        clean_line(&u.user, 64)
    );
    for (i, f) in u.findings.iter().enumerate() {
        out += &format!("\n{}. {}\n", i + 1, title(f.rule));
        out += &indent(&(wrap(&sentence(cfg, f), 96, "") + "\n"), 3);
        out += "\n";
        out += &jobs_table(f, max, zone, 3);
    }
    out += &format!("\nWasted in all: {}.\n", waste_line(u));
    if !u.advice.is_empty() {
        out += "\nWhat to ask for next time, from your earlier runs of these jobs:\n";
        out += &advice_text(u, 2);
    }
    out += &format!(
        "\nEach job's own report: jobscope show <job_id>.\nYou get at most one such mail every \
         {} days, about jobs not in an earlier one.\nJobs submitted with --jobscope-mail=never \
         are left out.\n",
        cfg.alerts.period_days
    );
    out
}

/// The admins' summary of one send: one row per user mailed (rules, jobs, waste by unit).
pub fn summary_table(mailed: &[&UserAlert]) -> Table {
    let cols = [
        ("user", ColType::Text, Unit::None),
        ("uid", ColType::Int, Unit::None),
        ("rules", ColType::Text, Unit::None),
        ("jobs", ColType::Int, Unit::None),
        ("gpu_hours_wasted", ColType::Float, Unit::Hours),
        ("core_hours_wasted", ColType::Float, Unit::Hours),
        ("mem_gb_hours_wasted", ColType::Float, Unit::Hours),
    ];
    let mut t = Table::new(
        cols.iter()
            .map(|(n, k, u)| Column::new(n, *k, *u))
            .collect(),
    );
    for u in mailed {
        let w = u.waste();
        let h = |unit| w.get(&unit).map_or(Value::Null, |x| Value::Float(*x));
        t.rows.push(vec![
            Value::Text(u.user.clone()),
            Value::Int(i64::from(u.uid)),
            Value::Text(
                u.findings
                    .iter()
                    .map(|f| f.rule.key())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            // Each job once, however many rules list it.
            Value::Int(
                u.findings
                    .iter()
                    .flat_map(|f| f.runs.iter().map(|j| j.key()))
                    .collect::<std::collections::BTreeSet<_>>()
                    .len() as i64,
            ),
            h(WasteUnit::GpuHours),
            h(WasteUnit::CoreHours),
            h(WasteUnit::MemGbHours),
        ]);
    }
    t
}

/// The admins' summary mail: subject and text.
pub fn summary(ev: &Evaluation, mailed: &[&UserAlert], zone: Zone) -> (String, String) {
    let period = jobscope_model::time::utc_time(ev.period_start_unix_s.max(0) as u64);
    let subject = format!(
        "jobscope alerts: {} mailed (period from {period})",
        match mailed.len() {
            1 => "1 user".to_string(),
            n => format!("{n} users"),
        }
    );
    let text = format!(
        "jobscope alerts sent at {} (period of {} days from {period}), one mail to each user \
         below:\n\n{}",
        jobscope_model::time::utc_time(ev.now_unix_s.max(0) as u64),
        ev.period_days,
        render::text(&summary_table(mailed), zone)
    );
    (subject, text)
}
