//! The owner's copy of a report on the real cluster (archive/src/store.rs, docs/json-archive.md):
//! alice can read hers and cannot alter what `jobscope show` presents; bob can neither read it nor
//! list her directory; `jobscope archive verify` names an altered copy.

use anyhow::{ensure, Context, Result};
use jobscope_cluster_tests::jobscope::*;
use jobscope_cluster_tests::*;
use std::path::Path;
use std::time::Duration;

const T: Duration = Duration::from_secs(180);

#[test]
fn only_the_owner_reads_her_copy_and_cannot_alter_it() -> Result<()> {
    let _c = ClusterGuard::acquire()?;
    let id = submit("alice", &["--job-name=copy", "--wrap", "true"], "")?;
    let state = wait_job(id, T)?;
    ensure!(state == "COMPLETED", "job {id}: {state}");
    let record = wait_for("the archive record", T, || archive_file(id).ok())?;
    let name = record
        .file_name()
        .context("record name")?
        .to_string_lossy()
        .into_owned();
    let alice = user_info("alice")?;
    let dir = Path::new(ARCHIVE).join("users").join(alice.uid.to_string());
    let copy = dir.join(&name);
    let copy_s = copy.display().to_string();
    wait_for("the owner's copy", T, || copy.is_file().then_some(()))?;
    ensure!(
        std::fs::read(&copy)? == std::fs::read(&record)?,
        "copy differs from the record"
    );
    let (mode, owner, _) = mode_of(&copy)?;
    ensure!(
        mode == 0o444 && owner == 0,
        "{copy_s}: mode {mode:o} owner {owner}"
    );
    let (dmode, downer, _) = mode_of(&dir)?;
    ensure!(
        dmode == 0o500 && downer == alice.uid,
        "{}: mode {dmode:o} owner {downer}",
        dir.display()
    );

    // alice reads and lists; she cannot write the file.
    let cat = run_as("alice", &format!("cat {copy_s}"))?;
    ensure!(
        cat.success() && cat.stdout.contains("\"job_id\""),
        "alice cat: {cat:?}"
    );
    let ls = run_as("alice", &format!("ls {}", dir.display()))?;
    ensure!(
        ls.success() && ls.stdout.contains(&name),
        "alice ls: {ls:?}"
    );
    let w = run_as("alice", &format!("echo x >> {copy_s}"))?;
    ensure!(!w.success(), "alice appended to {copy_s}");

    // bob can neither read it nor list the directory nor show it.
    let cat = run_as("bob", &format!("cat {copy_s}"))?;
    ensure!(
        !cat.success() && !cat.stdout.contains("job_id"),
        "bob cat: {cat:?}"
    );
    let ls = run_as("bob", &format!("ls {}", dir.display()))?;
    ensure!(!ls.success(), "bob listed alice's copies: {ls:?}");
    let show = run_as("bob", &format!("{JOBSCOPE} show {id}"))?;
    ensure!(
        !show.success() && show.stderr.contains("owner"),
        "bob show: {show:?}"
    );

    // alice swaps in her own file with a better CPU figure (she owns the directory, so she can).
    let forge = format!(
        "cd {d} && chmod u+w . && sed 's/\"usage_s\": [0-9.e+-]*/\"usage_s\": 99999.0/' {name} > .f \
         && rm -f {name} && mv .f {name} && chmod 0444 {name} && chmod 0500 .",
        d = dir.display()
    );
    let f = run_as("alice", &forge)?;
    ensure!(f.success(), "alice could not even swap the file: {f:?}");
    let show = run_as("alice", &format!("{JOBSCOPE} show {id} --json"))?;
    ensure!(
        !show.success() && show.stderr.contains("not the one jobscope wrote"),
        "alice's own file was shown: {show:?}"
    );
    ensure!(!show.stdout.contains("99999"), "{show:?}");
    let verify = std::process::Command::new(JOBSCOPE)
        .args(["archive", "verify"])
        .env_clear()
        .output()?;
    let out = String::from_utf8_lossy(&verify.stdout);
    ensure!(
        !verify.status.success()
            && out
                .lines()
                .any(|l| l.starts_with(&format!("users/{}/{name}: ALTERED", alice.uid))),
        "verify: {out}"
    );

    // Put jobscope's copy back (as the epilog would write it) and alice sees her report again.
    std::fs::remove_file(&copy)?;
    std::fs::copy(&record, &copy)?;
    std::os::unix::fs::chown(&copy, Some(0), Some(0))?;
    std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o444))?;
    let show = run_as("alice", &format!("{JOBSCOPE} show {id}"))?;
    ensure!(
        show.success() && show.stdout.contains(&format!("{id}")),
        "{show:?}"
    );
    Ok(())
}
