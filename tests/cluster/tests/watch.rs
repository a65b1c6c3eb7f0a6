//! The site's rules over running jobs (`jobscope watch`, docs/watch.md) on the real cluster: jobs
//! holding the test cluster's two fake GPUs (the fake NVML scripted per device, see
//! tests/cluster/tests/gpu.rs), a job growing towards its memory limit, mail through the loopback
//! SMTP sink, cancellation through SLURM's own `scancel`, and the job's report at its end.
//!
//! The rules are shortened (seconds, not hours); the test cluster samples every 5 s;
//! `jobscope watch --once` is run by the test, as the service would every `watch.interval_s`.
//!
//! Needs `slurm-conf/cluster.sh up` (1 node) and a `cluster.sh install` that installed the fake.

use anyhow::{ensure, Context, Result};
use jobscope_cluster_tests::gpu::*;
use jobscope_cluster_tests::jobscope::*;
use jobscope_cluster_tests::mail::*;
use jobscope_cluster_tests::*;
use serde_json::{json, Value};
use std::time::Duration;

const T: Duration = Duration::from_secs(240);
const UUID_GRES0: &str = "GPU-fa4e0000-5555-4000-8000-000000000005";
const UUID_GRES1: &str = "GPU-fa4e0001-7777-4000-8000-000000000007";
const SPOOL: &str = "/var/spool/jobscope";

/// `[watch]` with one rule (TOML lines of `[[watch.rule]]`), acting (not a dry run).
fn watch_section(rule: &str) -> String {
    format!(
        "enabled = true\ndry_run = false\ninterval_s = 5\n\n[[watch.rule]]\n{}\n",
        rule.trim()
    )
}

/// Runs `jobscope watch --once --json [more]`; its JSON pass report.
fn watch_once(more: &[&str]) -> Result<Value> {
    let mut args = vec!["watch", "--once", "--json"];
    args.extend_from_slice(more);
    let out = jobscope(&args)?;
    ensure!(
        out.success(),
        "jobscope watch failed: {}{}",
        out.stderr,
        out.stdout
    );
    serde_json::from_str(&out.stdout).with_context(|| format!("not JSON: {}", out.stdout))
}

/// Passes every 5 s until one acts on `job` with `action` (`warned`, `cancelled`); that action.
/// Fails as soon as the job no longer runs (the rule cannot act on it any more), with what the
/// last pass said.
fn watch_until(job: u32, action: &str, more: &[&str]) -> Result<Value> {
    let until = std::time::Instant::now() + T;
    loop {
        std::thread::sleep(Duration::from_secs(5));
        let last = match watch_once(more) {
            Ok(rep) => {
                if let Some(a) = rep["actions"].as_array().and_then(|a| {
                    a.iter()
                        .find(|a| a["job_id"] == job && a["action"] == action)
                }) {
                    return Ok(a.clone());
                }
                rep.to_string()
            }
            Err(e) => format!("{e:#}"),
        };
        let state = job_field(job, "JobState").unwrap_or_default();
        ensure!(
            state == "RUNNING" && std::time::Instant::now() < until,
            "job {job} is {state} and jobscope watch never said {action}; its last pass: {last}"
        );
    }
}

/// The interventions recorded in a running job's spool on `node`.
fn recorded(job: u32, node: &str) -> Vec<Value> {
    std::fs::read(format!("{SPOOL}/{job}.{node}/watch.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Vec<Value>>(&b).ok())
        .unwrap_or_default()
}

/// Every intervention of a finished job's summary.
fn interventions(s: &Value) -> Vec<Value> {
    s["nodes"]
        .as_array()
        .map(|n| {
            n.iter()
                .flat_map(|n| n["interventions"].as_array().cloned().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

/// The mails the sink got from the watch about `job` (their Message-ID kind starts `watch-`).
fn watch_mails(sink: &SmtpSink, job: u32) -> Vec<Delivered> {
    sink.for_job(job)
        .into_iter()
        .filter(|d| d.job().is_some_and(|(_, k)| k.starts_with("watch-")))
        .collect()
}

fn subject(d: &Delivered) -> String {
    d.parse()
        .ok()
        .and_then(|m| m.subject().map(str::to_string))
        .unwrap_or_default()
}

/// The fake's two GPUs: gres 0 busy at 80–90 %, gres 1 as `idle_one` says.
fn two_gpus(f: &FakeNvml, idle_one: Value) -> Result<()> {
    let (m0, m1) = (f.minors[0], f.minors[1]);
    let mut gres1 = fake_device(m1, UUID_GRES1, json!([[0, 0]]));
    if let Some(o) = idle_one.as_object() {
        for (k, v) in o {
            if v.is_null() {
                gres1.as_object_mut().map(|d| d.remove(k));
            } else {
                gres1[k] = v.clone();
            }
        }
    }
    f.set_script(&fake_script(vec![
        gres1,
        fake_device(m0, UUID_GRES0, alternating(80, 90)),
    ]))
}

/// The GPU finding names gres 1 (its UUID) and not gres 0.
fn names_only_the_idle_gpu(what: &str) -> bool {
    what.contains(UUID_GRES1) && !what.contains(UUID_GRES0)
}

/// A job holding 2 GPUs that uses one: one warning naming the idle GPU (recorded in its spool,
/// one mail), then, with cancelling enabled for the test partition, cancelled after the grace:
/// SLURM says CANCELLED and why (AdminComment), the report says both. Beside it (the same passes:
/// the rules run over every job of the node), a job growing slowly past 90 % of its memory is
/// warned, and told what to do, before the kernel's OOM killer ends it.
#[test]
fn an_idle_gpu_is_cancelled_after_its_warning_and_a_job_near_its_memory_limit_is_warned_before_the_oom_kill(
) -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    // Earlier tests' undelivered mail must not take the watch's flush budget.
    let sink = sink_with_empty_queue()?;
    let f = FakeNvml::new("watch-idle")?;
    two_gpus(&f, json!({}))?;
    let cfg = ConfigSectionGuard::set_section("gpu", &f.config_section("sample_timeout_s = 2"))?;
    let partition = job_partition_default()?;
    cfg.change(
        "watch",
        &watch_section(&format!(
            "name = \"idle-gpu\"\nkind = \"gpu_idle\"\nminutes = 0.5\nsustain_s = 20\nuse_pct = 15\ncancel = true\ngrace_minutes = 0.25\ncancel_partitions = [\"{partition}\"]\n\n[[watch.rule]]\nname = \"memory\"\nkind = \"mem_near_limit\"\nminutes = 0.5\nat_pct = 90"
        )),
    )?;
    let (id, node) = submit_running(
        &["--job-name=watch-idle", "--gres=gpu:2", "-t", "10"],
        "#!/bin/bash\nsleep 600\n",
    )?;
    // 256 MiB: 232 MiB at once (with the interpreter, 94 %), then 1 MiB every 3 s until the
    // limit (about 45 s later).
    let grow = "#!/bin/bash\nexec /usr/bin/python3 -c '\nimport time\na = [bytearray(232 << 20)]\nwhile True:\n    time.sleep(3)\n    a.append(bytearray(1 << 20))\n'\n";
    let (mem_id, _) = submit_running(&["--job-name=watch-mem", "--mem=256M", "-t", "10"], grow)?;
    let warned = watch_until(id, "warned", &[])?;
    let what = warned["what"].as_str().unwrap_or_default();
    ensure!(names_only_the_idle_gpu(what), "job {id}: {warned}");
    ensure!(
        warned["outcome"] == "recorded, mailed",
        "job {id}: {warned}"
    );
    let rec = recorded(id, &node);
    ensure!(rec.len() == 1 && rec[0]["action"] == "warned", "{rec:?}");
    // The idle stretch is at least the rule's 30 s of what was seen.
    let f0 = &rec[0]["finding"];
    let seen_ms = f0["seen_until_unix_ms"].as_u64().unwrap_or(0)
        - f0["since_unix_ms"].as_u64().unwrap_or(u64::MAX);
    ensure!(seen_ms >= 30_000, "{f0}");
    let mail = wait_for("the warning mail", T, || {
        watch_mails(&sink, id).into_iter().next()
    })?;
    let subj = subject(&mail);
    ensure!(
        subj.contains(&format!("job {id}")) && subj.contains(UUID_GRES1),
        "subject {subj:?}"
    );
    let cancelled = watch_until(id, "cancelled", &[])?;
    ensure!(
        cancelled["outcome"]
            .as_str()
            .unwrap_or_default()
            .contains("cancelled"),
        "{cancelled}"
    );
    let state = wait_job(id, T)?;
    ensure!(state == "CANCELLED", "job {id}: {state}");
    let comment = job_field(id, "AdminComment").unwrap_or_default();
    ensure!(
        comment.contains("cancelled by the site's rule idle-gpu"),
        "AdminComment {comment:?}"
    );
    let s = summary(id)?;
    let all = interventions(&s);
    let actions: Vec<&str> = all.iter().filter_map(|i| i["action"].as_str()).collect();
    ensure!(actions == ["warned", "cancelled"], "job {id}: {all:?}");
    let text = report_text(id)?;
    ensure!(
        text.contains("While the job ran:")
            && text.contains("by the site's rule \"idle-gpu\" (mailed): GPU")
            && text.contains("cancelled at ")
            && text.contains(UUID_GRES1),
        "job {id}:\n{text}"
    );
    // One warning and one cancellation mail, nothing twice.
    let mails = wait_for("both mails", T, || {
        let m = watch_mails(&sink, id);
        (m.len() >= 2).then_some(m)
    })?;
    ensure!(mails.len() == 2, "job {id}: {} watch mails", mails.len());

    // The memory job: its warning is in its archived summary, so it was recorded while it ran
    // (the Epilog read its spool at its end); then the OOM killer ended it.
    let state = wait_job(mem_id, T)?;
    ensure!(state == "OUT_OF_MEMORY", "job {mem_id}: {state}");
    let all = interventions(&summary(mem_id)?);
    ensure!(
        all.len() == 1
            && all[0]["action"] == "warned"
            && all[0]["finding"]["kind"] == "mem_near_limit"
            && all[0]["finding"]["value_pct"].as_f64().unwrap_or(0.0) >= 90.0,
        "job {mem_id}: {all:?}"
    );
    let mail = wait_for("the memory warning", T, || {
        watch_mails(&sink, mem_id).into_iter().next()
    })?;
    let body = String::from_utf8_lossy(&mail.raw).to_string();
    ensure!(
        body.contains("OOM killer") && body.contains(&format!("scancel {mem_id}")),
        "{body}"
    );
    Ok(())
}

/// The same job whose idle GPU runs 5 s in every minute (the driver's sample buffer shows the
/// bursts): still idle. The dry run lists the warning and records, mails and cancels nothing; an
/// exempt user gets nothing.
#[test]
fn bursts_do_not_reset_idleness_and_the_dry_run_and_exemptions_do_nothing() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    // Earlier tests' undelivered mail must not take the watch's flush budget.
    let sink = sink_with_empty_queue()?;
    let f = FakeNvml::new("watch-burst")?;
    two_gpus(
        &f,
        json!({"utilization": null, "busy": {"period_ms": 60_000, "busy_share": 5.0 / 60.0, "phase_ms": 0}}),
    )?;
    let cfg = ConfigSectionGuard::set_section("gpu", &f.config_section("sample_timeout_s = 2"))?;
    let partition = job_partition_default()?;
    let rule = format!(
        "name = \"idle-gpu\"\nkind = \"gpu_idle\"\nminutes = 1.2\nsustain_s = 120\nuse_pct = 15\ncancel = true\ngrace_minutes = 0\ncancel_partitions = [\"{partition}\"]"
    );
    cfg.change(
        "watch",
        &watch_section(&format!("{rule}\nexempt_users = [\"alice\"]")),
    )?;
    let (id, node) = submit_running(
        &["--job-name=watch-burst", "--gres=gpu:2", "-t", "10"],
        "#!/bin/bash\nsleep 600\n",
    )?;
    // Past the rule's 72 s, with at least one burst in it: the exempt user is held, not acted on.
    std::thread::sleep(Duration::from_secs(80));
    let held = wait_for("the exemption to be said", T, || {
        std::thread::sleep(Duration::from_secs(5));
        let rep = watch_once(&[]).ok()?;
        rep["held"]
            .as_array()?
            .iter()
            .find(|h| h["job_id"] == id)
            .cloned()
    })?;
    ensure!(held["why"] == "user alice is exempt", "{held}");
    ensure!(recorded(id, &node).is_empty(), "exempt, yet recorded");

    // The rule's own table (`[[watch.rule]]`) replaced: the same rule without the exemption.
    cfg.change("[watch.rule]", &rule)?;
    // The dry run: what would be done, and nothing done.
    let dry = watch_until(id, "warned", &["--dry-run"])?;
    ensure!(dry["outcome"] == "would", "{dry}");
    ensure!(
        names_only_the_idle_gpu(dry["what"].as_str().unwrap_or_default()),
        "{dry}"
    );
    ensure!(recorded(id, &node).is_empty(), "the dry run recorded");
    ensure!(
        job_field(id, "JobState")? == "RUNNING",
        "the dry run touched the job"
    );

    // Acting: the bursts did not end the idle stretch, which began with the job's first samples.
    let warned = watch_until(id, "warned", &[])?;
    let rec = recorded(id, &node);
    let since = rec[0]["finding"]["since_unix_ms"].as_u64().unwrap_or(0);
    let until = rec[0]["finding"]["seen_until_unix_ms"]
        .as_u64()
        .unwrap_or(0);
    ensure!(
        until.saturating_sub(since) >= 72_000,
        "the bursts cut the idle stretch: {warned} {rec:?}"
    );
    scancel(id)?;
    wait_job(id, T)?;
    // The bursts were there to be seen: the GPU's busiest interval is well above idle.
    let s = summary(id)?;
    let g1 = s["nodes"][0]["gpus"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["uuid"] == UUID_GRES1).cloned())
        .context("gres 1 in the summary")?;
    ensure!(
        g1["util_max_pct"].as_f64().unwrap_or(0.0) >= 50.0,
        "no burst seen on gres 1: {g1}"
    );
    // Only the acting pass mailed (the exempt and dry-run passes did not).
    let mails = wait_for("the warning mail", T, || {
        let m = watch_mails(&sink, id);
        (!m.is_empty()).then_some(m)
    })?;
    ensure!(mails.len() == 1, "{} watch mails", mails.len());
    Ok(())
}

/// The partition a job lands in by default (the test cluster's default partition).
fn job_partition_default() -> Result<String> {
    let out = slurm_cmd("scontrol", &["show", "partition", "-o"])?;
    out.lines()
        .find(|l| l.contains("Default=YES"))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|kv| kv.strip_prefix("PartitionName="))
        })
        .map(str::to_string)
        .context("no default partition")
}
