//! `[report] admin_comment = true` (docs/configuration.md): the Epilog that archives a job writes
//! the job's verdict in one line into SLURM's AdminComment (`report/src/admin_comment.rs`), after
//! the archive and the mail, through `sacctmgr` (docs/slurm-versions.md, "AdminComment").
//!
//! On a real job, with the switch turned on for the test:
//! - the line's figures are those of the job's archived JSON (read back from `sacct` where the
//!   cluster has slurmdbd, else from the Epilog's log, which names the line it could not write);
//! - without slurmdbd the failure is logged with sacctmgr's reason and the job is archived all
//!   the same;
//! - slurmctld's own record (`scontrol show job`) never holds the line: it refuses an update of a
//!   job that has ended ("Job has already finished"), which is why the Epilog, running while the
//!   job is COMPLETING, cannot use `scontrol update`. Checked on each release the suite runs on.

use anyhow::{anyhow, ensure, Context, Result};
use jobscope_cluster_tests::jobscope::*;
use jobscope_cluster_tests::mail::EPILOG_LOG;
use jobscope_cluster_tests::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

const T: Duration = Duration::from_secs(180);

/// The `[report]` table of the installed config with `admin_comment = true` added.
fn report_table_with_admin_comment() -> Result<String> {
    let cur: toml::Table = ConfigSectionGuard::current()?
        .parse()
        .context("the installed config is not TOML")?;
    let mut report = cur
        .get("report")
        .and_then(|v| v.as_table())
        .cloned()
        .unwrap_or_default();
    report.insert("admin_comment".into(), toml::Value::Boolean(true));
    Ok(toml::to_string(&report)?)
}

/// `key=value` pairs of a line, split on blanks and the first `=` (as docs/slurm-versions.md
/// tells an exporter to read it).
fn pairs(line: &str) -> Result<BTreeMap<String, String>> {
    line.split(' ')
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| anyhow!("{p:?} is no key=value pair in {line:?}"))
        })
        .collect()
}

/// A whole-percent or one-decimal figure of the line against the archive's (`None`: the archive
/// has none, so the line must not have the key either).
fn check_figure(
    got: &BTreeMap<String, String>,
    key: &str,
    archived: Option<f64>,
    tolerance: f64,
) -> Result<()> {
    match (got.get(key), archived) {
        (None, None) => Ok(()),
        (Some(v), Some(want)) => {
            let v: f64 = v.parse().with_context(|| format!("{key}={v}"))?;
            ensure!(
                (v - want).abs() <= tolerance,
                "{key}={v}, the archive says {want}"
            );
            Ok(())
        }
        (g, w) => Err(anyhow!("{key}: the line has {g:?}, the archive {w:?}")),
    }
}

#[test]
fn the_admin_comment_carries_the_archived_verdict_and_never_blocks_the_epilog() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let _cfg = ConfigSectionGuard::set_section("report", &report_table_with_admin_comment()?)?;
    let log = LogMark::now(EPILOG_LOG);
    // Longer than the test config's min_elapsed_for_advice_s (10 s): a classified job. The
    // name has a quote and a blank: the line never carries it.
    let id = submit(
        "alice",
        &["--job-name=admin \"comment\"", "-c", "2"],
        &burn_then_sleep(3, 9),
    )?;
    let slurm = wait_job(id, T)?;
    ensure!(slurm == "COMPLETED", "job {id}: SLURM says {slurm}");
    // Never blocking: the job is archived (and validated against the schema).
    let s: Value = summary(id)?;
    let said = log.since()?;
    let mine: Vec<&str> = said
        .lines()
        .filter(|l| l.contains(&format!("job {id}: AdminComment")))
        .collect();
    ensure!(mine.len() == 1, "job {id}: epilog log:\n{said}");

    let config = slurm_cmd("scontrol", &["show", "config"])?;
    let slurmdbd = config.lines().any(|l| {
        l.starts_with("AccountingStorageType") && l.contains("accounting_storage/slurmdbd")
    });
    let line = if slurmdbd {
        ensure!(
            mine[0].contains("AdminComment written"),
            "job {id}: {}",
            mine[0]
        );
        slurm_cmd(
            "sacct",
            &[
                "-n",
                "-X",
                "-P",
                "-j",
                &id.to_string(),
                "-o",
                "AdminComment%1000",
            ],
        )?
        .trim()
        .to_string()
    } else {
        // sacctmgr's own words: only slurmdbd keeps a record it may change.
        ensure!(
            mine[0].contains("AdminComment not written: sacctmgr failed")
                && mine[0].contains("slurmdbd"),
            "job {id}: {}",
            mine[0]
        );
        mine[0]
            .split_once("(the line: ")
            .and_then(|(_, rest)| rest.strip_suffix(')'))
            .with_context(|| format!("job {id}: no line in {:?}", mine[0]))?
            .to_string()
    };
    ensure!(line.len() < 1024, "job {id}: {} bytes", line.len());
    let got = pairs(&line)?;
    ensure!(
        got.get("jobscope").map(String::as_str) == Some("1"),
        "{line}"
    );
    ensure!(
        got.get("state").map(String::as_str) == s["state"].as_str(),
        "job {id}: {line}; archived state {}",
        s["state"]
    );
    ensure!(
        got.get("class").map(String::as_str) == s["analysis"]["classification"]["class"].as_str(),
        "job {id}: {line}; archived class {}",
        s["analysis"]["classification"]["class"]
    );
    check_figure(
        &got,
        "cpu_eff_pct",
        s["efficiency"]["cpu_pct"].as_f64(),
        0.5,
    )?;
    check_figure(
        &got,
        "mem_eff_pct",
        s["efficiency"]["mem_pct"].as_f64(),
        0.5,
    )?;
    let w = &s["analysis"]["waste"];
    check_figure(&got, "core_h_wasted", w["core_hours_wasted"].as_f64(), 0.05)?;
    check_figure(
        &got,
        "mem_gb_h_wasted",
        w["mem_gb_hours_wasted"].as_f64(),
        0.05,
    )?;
    check_figure(&got, "gpu_h_wasted", w["gpu_hours_wasted"].as_f64(), 0.05)?;
    ensure!(!got.contains_key("partial"), "job {id}: {line}");
    ensure!(!line.contains("comment"), "the job's name leaked: {line}");

    // slurmctld's record: the job has ended, so an update is refused and the line is not there.
    let probe = slurm_cmd(
        "scontrol",
        &["update", &format!("JobId={id}"), "AdminComment=probe"],
    );
    ensure!(
        probe
            .as_ref()
            .is_err_and(|e| format!("{e:#}").contains("already finished")),
        "job {id}: scontrol update of an ended job: {probe:?}"
    );
    let shown = job_info(id)?;
    ensure!(
        !shown
            .get("AdminComment")
            .is_some_and(|v| v.contains("jobscope=")),
        "job {id}: scontrol show job has {:?}",
        shown.get("AdminComment")
    );
    Ok(())
}
