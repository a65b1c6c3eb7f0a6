//! `[report] admin_comment = true` (docs/configuration.md): the job's verdict in one line
//! (`report/src/admin_comment.rs`) goes where SLURM keeps it, twice (docs/slurm-versions.md,
//! "AdminComment"):
//! - at the batch script's end the plugin runs `jobscope admin-comment JOB --batch-exit STATUS`
//!   (`plugin/src/admin_comment.rs`), which writes it into slurmctld's record while the job still
//!   runs: `scontrol show job` shows it after the job's end (`at=batch_end`), and so would the
//!   job-completion plugins and the accounting end record;
//! - the Epilog that archives the job writes the archived line (`at=archived`) into the
//!   accounting database with `sacctmgr`, where slurmdbd runs (none of the test clusters runs it:
//!   the line is then read from the Epilog's log, which names the line it could not write).
//!
//! On real jobs, with the switch turned on for the test:
//! - the line slurmctld keeps has the state the archive has (COMPLETED, and FAILED for a script
//!   that exits 3), the archive's class, and figures within a sample's reach of the archive's;
//!   slurmd's log says how long the job's end waited for it;
//! - after the end slurmctld refuses any change ("Job has already finished"), which is why the
//!   line must be written before. Checked on each release the suite runs on.

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

/// The line's figures against the archive's: `tolerance_pct` for the whole-percent ones,
/// `tolerance_h` for the hours.
fn check_figures(
    got: &BTreeMap<String, String>,
    s: &Value,
    tolerance_pct: f64,
    tolerance_h: f64,
) -> Result<()> {
    check_figure(
        got,
        "cpu_eff_pct",
        s["efficiency"]["cpu_pct"].as_f64(),
        tolerance_pct,
    )?;
    check_figure(
        got,
        "mem_eff_pct",
        s["efficiency"]["mem_pct"].as_f64(),
        tolerance_pct,
    )?;
    let w = &s["analysis"]["waste"];
    check_figure(
        got,
        "core_h_wasted",
        w["core_hours_wasted"].as_f64(),
        tolerance_h,
    )?;
    check_figure(
        got,
        "mem_gb_h_wasted",
        w["mem_gb_hours_wasted"].as_f64(),
        tolerance_h,
    )?;
    check_figure(
        got,
        "gpu_h_wasted",
        w["gpu_hours_wasted"].as_f64(),
        tolerance_h,
    )
}

/// The line slurmctld kept for ended job `id` and slurmd's word on writing it (the batch host's
/// log since `marks`).
fn batch_end_line(id: u32, marks: &[LogMark]) -> Result<(String, String)> {
    let mut said = Vec::new();
    for m in marks {
        said.extend(
            m.since()?
                .lines()
                .filter(|l| {
                    l.contains("jobscope: ") && l.contains(&format!(" job {id}: AdminComment"))
                })
                .map(str::to_string),
        );
    }
    ensure!(said.len() == 1, "job {id}: slurmd logs say {said:?}");
    ensure!(
        said[0].contains("AdminComment written at the batch script's end in "),
        "job {id}: {}",
        said[0]
    );
    Ok((admin_comment_shown(id)?, said.swap_remove(0)))
}

/// The AdminComment in `scontrol show job -o ID`. SLURM's own keys start with a capital and the
/// line's with a small letter (docs/slurm-versions.md), so the line is the tokens after
/// `AdminComment=` up to the first capitalised one.
fn admin_comment_shown(id: u32) -> Result<String> {
    let out = slurm_cmd("scontrol", &["show", "job", "-o", &id.to_string()])?;
    let rest = out
        .split_once(" AdminComment=")
        .map(|(_, r)| r)
        .with_context(|| format!("job {id}: scontrol show job has no AdminComment: {out}"))?;
    let tokens: Vec<&str> = rest
        .split_whitespace()
        .enumerate()
        .take_while(|(i, t)| *i == 0 || t.starts_with(|c: char| c.is_ascii_lowercase()))
        .map(|(_, t)| t)
        .collect();
    Ok(tokens.join(" "))
}

#[test]
fn the_admin_comment_carries_the_verdict_into_slurmctld_and_the_archive() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let _cfg = ConfigSectionGuard::set_section("report", &report_table_with_admin_comment()?)?;
    let log = LogMark::now(EPILOG_LOG);
    let marks: Vec<LogMark> = nodes()?
        .iter()
        .map(|n| LogMark::now(slurmd_log(n)))
        .collect();
    // Longer than the test config's min_elapsed_for_advice_s (10 s): a classified job. The
    // name has a quote and a blank: the line never carries it.
    let id = submit(
        "alice",
        &["--job-name=admin \"comment\"", "-c", "2"],
        &burn_then_sleep(3, 9),
    )?;
    // A script that fails: its line says so before SLURM does.
    let failing = submit(
        "alice",
        &["-c", "1"],
        &format!("{}exit 3\n", burn_then_sleep(1, 1)),
    )?;
    let slurm = wait_job(id, T)?;
    ensure!(slurm == "COMPLETED", "job {id}: SLURM says {slurm}");
    let slurm = wait_job(failing, T)?;
    ensure!(slurm == "FAILED", "job {failing}: SLURM says {slurm}");
    // Never blocking: the job is archived (and validated against the schema).
    let s: Value = summary(id)?;

    // slurmctld's record: the batch step's line, taken at the script's end.
    let (kept, said) = batch_end_line(id, &marks)?;
    eprintln!("job {id}: {said}");
    let got = pairs(&kept)?;
    ensure!(
        got.get("jobscope").map(String::as_str) == Some("1")
            && got.get("at").map(String::as_str) == Some("batch_end")
            && got.get("state").map(String::as_str) == s["state"].as_str()
            && got.get("class").map(String::as_str)
                == s["analysis"]["classification"]["class"].as_str()
            && !got.contains_key("partial"),
        "job {id}: slurmctld keeps {kept:?}; archived state {}, class {}",
        s["state"],
        s["analysis"]["classification"]["class"]
    );
    // Taken before the job's last sample: within a few points (the elapsed time differs by the
    // moments between the script's end and the job's), and within a few core-seconds.
    check_figures(&got, &s, 3.0, 0.01).with_context(|| format!("job {id}: {kept}"))?;
    ensure!(!kept.contains("comment"), "the job's name leaked: {kept}");
    let sf: Value = summary(failing)?;
    let (kept_f, _) = batch_end_line(failing, &marks)?;
    let got_f = pairs(&kept_f)?;
    ensure!(
        got_f.get("state").map(String::as_str) == Some("FAILED")
            && sf["state"].as_str() == Some("FAILED")
            && got_f.get("at").map(String::as_str) == Some("batch_end"),
        "job {failing}: slurmctld keeps {kept_f:?}, archived state {}",
        sf["state"]
    );
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
        got.get("jobscope").map(String::as_str) == Some("1")
            && got.get("at").map(String::as_str) == Some("archived"),
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
    check_figures(&got, &s, 0.5, 0.05)?;
    ensure!(!got.contains_key("partial"), "job {id}: {line}");
    ensure!(!line.contains("comment"), "the job's name leaked: {line}");

    // After the end slurmctld refuses any change: the batch step's line stays what it kept.
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
    let still = admin_comment_shown(id)?;
    ensure!(still == kept, "job {id}: {still:?}, was {kept:?}");
    Ok(())
}
