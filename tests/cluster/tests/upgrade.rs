//! Upgrading the plugin while jobs run (README "Upgrading"): the new `.so` is written aside and
//! renamed over the old file, as dpkg unpacks a package (`<file>.dpkg-new`, then `rename`). A
//! slurmstepd that mapped the old file keeps its inode, so the job it serves goes on being sampled
//! and is reported whole; steps started afterwards load the new file.
//!
//! Needs a running cluster (`slurm-conf/cluster.sh up`, as root); fails, never skips, without.

use anyhow::{bail, ensure, Context, Result};
use jobscope_cluster_tests::jobscope::{f64_at, str_at, summary};
use jobscope_cluster_tests::{
    burn_then_sleep, job_info, job_output, release_root, submit, wait_for, wait_job, ClusterGuard,
    PLUGIN_SO,
};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

const T: Duration = Duration::from_secs(180);

/// `path` as the host sees it: inside the 24.11 root filesystem when the tests run against it.
fn on_host(path: &Path) -> PathBuf {
    match release_root() {
        Some(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
        None => path.to_path_buf(),
    }
}

/// The plugin file slurmstepd loads: `PLUGIN_SO`, or the packaged file it links to (symlinks are
/// followed by hand so an absolute link inside the 24.11 root filesystem stays inside it).
fn plugin_file() -> Result<PathBuf> {
    let mut p = PathBuf::from(PLUGIN_SO);
    for _ in 0..8 {
        let host = on_host(&p);
        let md = std::fs::symlink_metadata(&host).with_context(|| host.display().to_string())?;
        if !md.file_type().is_symlink() {
            return Ok(host);
        }
        let target = std::fs::read_link(&host)?;
        p = if target.is_absolute() {
            target
        } else {
            p.parent().unwrap_or(Path::new("/")).join(target)
        };
    }
    bail!("{PLUGIN_SO}: too many symbolic links")
}

/// Replaces `file` the way dpkg does: the same bytes written to `<file>.dpkg-new`, synced, and
/// renamed over it. Returns the old and the new inode.
fn replace_like_dpkg(file: &Path) -> Result<(u64, u64)> {
    let old = std::fs::metadata(file)?;
    let bytes = std::fs::read(file)?;
    let new = file.with_extension("so.dpkg-new");
    std::fs::write(&new, &bytes)?;
    std::fs::set_permissions(&new, std::fs::Permissions::from_mode(old.mode() & 0o7777))?;
    std::fs::File::open(&new)?.sync_all()?;
    std::fs::rename(&new, file)?;
    Ok((old.ino(), std::fs::metadata(file)?.ino()))
}

/// A finished job's archived summary must be whole: COMPLETED, not partial, sampled to its end by a
/// sampler that ended cleanly with its final counters (written after the replacement, by the code
/// mapped from the replaced file), with at least `min_samples` samples (the test cluster samples
/// every 5 s, `slurm-conf/jobscope.toml`: a sampler stopped at the replacement would have at most 5)
/// and most of the busy loop's CPU time.
fn whole_report(id: u32, min_samples: f64, burn_s: f64) -> Result<()> {
    let s = summary(id)?;
    ensure!(
        str_at(&s, "/state")? == "COMPLETED",
        "job {id}: archived state {}",
        s["state"]
    );
    ensure!(s["partial"] == false, "job {id}: marked partial: {s}");
    let samples = f64_at(&s, "/samples")?;
    ensure!(
        samples >= min_samples,
        "job {id}: {samples} samples, expected at least {min_samples}"
    );
    let nodes = s["nodes"].as_array().context("no nodes")?;
    ensure!(!nodes.is_empty(), "job {id}: no node summaries");
    for n in nodes {
        let q = &n["quality"];
        ensure!(
            q["sampler_ended_cleanly"] == true && q["final_counters"] == true,
            "job {id} on {}: the sampler did not end cleanly with its final counters: {q}",
            n["node"]
        );
    }
    let cpu = f64_at(&s, "/cpu/usage_s")?;
    ensure!(
        cpu >= 0.8 * burn_s,
        "job {id}: CPU {cpu} s for a {burn_s} s busy loop"
    );
    Ok(())
}

#[test]
fn the_plugin_replaced_while_a_job_runs_harms_neither_that_job_nor_the_next() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let file = plugin_file()?;
    // 4 s of CPU, then 26 s asleep: the plugin is replaced while the job sleeps, and its sampler
    // must go on for the rest of the run.
    let before = submit(
        "alice",
        &["--job-name=upgrade-running"],
        &burn_then_sleep(4, 26),
    )?;
    wait_for(&format!("job {before} running"), T, || {
        (job_info(before).ok()?.get("JobState")? == "RUNNING").then_some(())
    })?;
    std::thread::sleep(Duration::from_secs(8));
    let (old_ino, new_ino) = replace_like_dpkg(&file)?;
    ensure!(
        old_ino != new_ino,
        "{}: the rename kept inode {old_ino}: not the dpkg way",
        file.display()
    );
    // A job started after the replacement loads the new file.
    let after = submit("bob", &["--job-name=upgrade-after"], &burn_then_sleep(3, 8))?;

    for (id, min_samples, burn) in [(before, 7.0, 4.0), (after, 3.0, 3.0)] {
        let state = wait_job(id, T)?;
        let out = job_output(id)?;
        ensure!(
            state == "COMPLETED" && out == "start\ndone\n",
            "job {id}: SLURM says {state}, output {out:?}"
        );
        whole_report(id, min_samples, burn)?;
    }
    Ok(())
}
