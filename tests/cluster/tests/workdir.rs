//! Sites without mail: `mail.workdir_report = true` writes the text report into the job's working
//! directory AS THE USER, never following a symlink and never overwriting.

use anyhow::{ensure, Context, Result};
use jobscope_cluster_tests::jobscope::*;
use jobscope_cluster_tests::mail::edit_config;
use jobscope_cluster_tests::*;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

#[test]
fn report_lands_in_the_workdir_as_the_user() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let _cfg = edit_config(&[
        ("mail.workdir_report", true.into()),
        ("mail.enabled", false.into()),
    ])?;
    let id = submit("alice", &["--job-name=workdir", "--wrap", "sleep 1"], "")?;
    ensure!(wait_job(id, T)? == "COMPLETED");
    let dir = PathBuf::from(job_field(id, "WorkDir")?);
    let file = dir.join(format!("jobscope-{id}.txt"));
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("{} not written", file.display()))?;
    ensure!(
        text.starts_with(&format!("jobscope report: job {id} (workdir)")),
        "{text}"
    );
    ensure!(
        text == report_text(id)?,
        "the file is the same report `jobscope show` prints"
    );
    let md = std::fs::symlink_metadata(&file)?;
    ensure!(
        md.uid() == user_info("alice")?.uid,
        "written as alice, not root (owner uid {})",
        md.uid()
    );
    Ok(())
}

/// A user who plants a symlink where the report will go gets nothing written through it.
#[test]
fn workdir_report_never_follows_a_planted_symlink() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let _cfg = edit_config(&[
        ("mail.workdir_report", true.into()),
        ("mail.enabled", false.into()),
    ])?;
    let target = "/etc/jobscope-symlink-victim";
    std::fs::write(target, "untouched\n")?;
    let script = format!("#!/bin/bash\nln -s {target} jobscope-$SLURM_JOB_ID.txt\n");
    let id = submit("alice", &["--job-name=symlink"], &script)?;
    ensure!(wait_job(id, T)? == "COMPLETED");
    summary(id)?; // archived all the same
    ensure!(
        std::fs::read_to_string(target)? == "untouched\n",
        "the epilog wrote through the user's symlink"
    );
    let link = PathBuf::from(job_field(id, "WorkDir")?).join(format!("jobscope-{id}.txt"));
    ensure!(
        std::fs::symlink_metadata(&link)?.file_type().is_symlink(),
        "the planted link is left as it was"
    );
    std::fs::remove_file(target)?;
    Ok(())
}
