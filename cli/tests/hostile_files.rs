//! Files and values a user could plant are inert (issue 19, section 4): `--output FILE` of
//! `audit` and `run` never writes through a symlink (final or in a parent directory another user
//! owns), never opens a FIFO or truncates a file already there; configuration values and flags
//! out of range are one line naming the key, never a panic.
//!
//! The real binary runs, as the test's user; the parts that plant a link owned by another user
//! need root and say so when skipped.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

mod common;
use common::*;

/// One line on stderr containing every word, a non-zero exit, no panic.
fn refused_in_one_line(got: (i32, String, String), words: &[&str]) {
    let (rc, _, err) = got;
    assert_ne!(rc, 0, "exit 0: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    for w in words {
        assert!(lines[0].contains(w), "no {w:?} in {err}");
    }
}

fn bytes_and_mode(p: &Path) -> (Vec<u8>, u32) {
    (
        std::fs::read(p).unwrap(),
        std::fs::metadata(p).unwrap().mode() & 0o7777,
    )
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
}

/// What a user plants at `--output` paths: a link to a file of root's, a FIFO, a file already
/// there. Returns (victim, [(path, what the error says)]).
fn planted(dir: &Path) -> (PathBuf, Vec<(PathBuf, &'static str)>) {
    let victim = dir.join("shadow");
    std::fs::write(&victim, b"root:$6$secret:19000::::::\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o640)).unwrap();
    let link = dir.join("report.csv");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let fifo = dir.join("fifo.csv");
    mkfifo(&fifo);
    let existing = dir.join("existing.csv");
    std::fs::write(&existing, b"yesterday's report\n").unwrap();
    (
        victim,
        vec![
            (link, "symlink"),
            (fifo, "already there"),
            (existing, "file is already there"),
        ],
    )
}

#[test]
fn audit_output_refuses_a_planted_link_fifo_or_file_and_leaves_the_target_untouched() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path(), "");
    let (victim, paths) = planted(d.path());
    let existing = paths[2].0.clone();
    let before = (bytes_and_mode(&victim), bytes_and_mode(&existing));
    for (p, what) in &paths {
        let shown = p.display().to_string();
        refused_in_one_line(
            jobscope(&cfg, &["audit", "jobs", "--format", "csv", "-o", &shown]),
            &[&shown, what],
        );
    }
    assert_eq!((bytes_and_mode(&victim), bytes_and_mode(&existing)), before);
    // A new name is written.
    let new = d.path().join("new.csv");
    let (rc, _, err) = jobscope(
        &cfg,
        &[
            "audit",
            "jobs",
            "--format",
            "csv",
            "-o",
            new.to_str().unwrap(),
        ],
    );
    assert_eq!(rc, 0, "{err}");
    assert!(std::fs::read_to_string(&new)
        .unwrap()
        .starts_with("cluster,"));
}

/// A user's directory holding a link (the user's) to a directory of root's: root, asked to write
/// `--output ~user/reports/x`, must not create or truncate anything in root's directory.
#[test]
fn output_through_a_parent_link_another_user_owns_is_refused_for_audit_and_run() {
    if !am_root() {
        eprintln!("skipped: planting a link owned by another user needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path(), "");
    let etc = d.path().join("etc");
    std::fs::create_dir(&etc).unwrap();
    let victim = etc.join("shadow");
    std::fs::write(&victim, b"root:x\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = bytes_and_mode(&victim);
    let home = d.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let reports = home.join("reports");
    std::os::unix::fs::symlink(&etc, &reports).unwrap();
    std::os::unix::fs::lchown(&reports, Some(65534), Some(65534)).unwrap();
    let ran = d.path().join("cmd-ran");
    for name in ["shadow", "new.txt"] {
        let out = reports.join(name);
        let shown = out.display().to_string();
        refused_in_one_line(
            jobscope(&cfg, &["audit", "jobs", "-o", &shown]),
            &[&shown, "uid 65534"],
        );
        refused_in_one_line(
            jobscope(
                &cfg,
                &["run", "-o", &shown, "--", "touch", ran.to_str().unwrap()],
            ),
            &[&shown, "uid 65534"],
        );
    }
    assert_eq!(bytes_and_mode(&victim), before);
    assert_eq!(
        std::fs::read_dir(&etc).unwrap().count(),
        1,
        "made a file in etc/"
    );
    // The report is opened before CMD runs: a refused one means CMD never ran.
    assert!(!ran.exists());
}

#[test]
fn run_output_refuses_a_final_link_and_a_fifo() {
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path(), "");
    let (victim, paths) = planted(d.path());
    let before = bytes_and_mode(&victim);
    let ran = d.path().join("cmd-ran");
    for (p, what) in &paths {
        let shown = p.display().to_string();
        refused_in_one_line(
            jobscope(
                &cfg,
                &["run", "-o", &shown, "--", "touch", ran.to_str().unwrap()],
            ),
            &[&shown, what],
        );
    }
    assert_eq!(bytes_and_mode(&victim), before);
    assert!(!ran.exists());
}

/// Each of these panicked `jobscope mail flush` (a `Duration` from 1 / 1e-300 s, an `Instant`
/// overflow) or was accepted against the documentation (a relative queue directory).
#[test]
fn mail_settings_out_of_range_are_one_line_never_a_panic() {
    let d = tempfile::tempdir().unwrap();
    let q = d.path().join("q");
    for (extra, words) in [
        (
            "[mail]\nrate_per_s = 1e-300",
            &["mail.rate_per_s", "1e-300"][..],
        ),
        (
            "[mail]\nflush_budget_s = 9223372036854775807",
            &["mail.flush_budget_s", "9223372036854775807"][..],
        ),
        (
            "[mail]\nkeep_sent_days = 213503982334601",
            &["mail.keep_sent_days", "213503982334601"][..],
        ),
        (
            "[mail]\nqueue_dir = \"relative/q/../q\"",
            &["mail.queue_dir", "relative/q/../q"][..],
        ),
    ] {
        let extra = format!("{extra}\n");
        let cfg = if extra.contains("queue_dir") {
            config(d.path(), &extra)
        } else {
            config(
                d.path(),
                &format!("{extra}queue_dir = \"{}\"\n", q.display()),
            )
        };
        refused_in_one_line(jobscope(&cfg, &["mail", "flush"]), words);
    }
    // The flag: clap names it and its range (its message adds a "try --help" line).
    let cfg = config(
        d.path(),
        &format!("[mail]\nqueue_dir = \"{}\"\n", q.display()),
    );
    let (rc, _, err) = jobscope(&cfg, &["mail", "flush", "--budget", "9223372036854775807"]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("--budget")
            && err.contains("9223372036854775807")
            && err.contains("0..=86400"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// A real document (the stored fixture) as job `job_id` of uid 65534 (`nobody`).
fn fixture(job_id: u32) -> jobscope_model::summary::JobSummary {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../report/testdata/archive-v1/oom.json");
    let mut s = jobscope_archive::load(
        &std::fs::read(&p).unwrap(),
        &jobscope_model::params::Report::default(),
    )
    .unwrap()
    .summary;
    s.job_id = job_id;
    s.uid = Some(65534);
    s
}

/// A record whose elapsed time was made negative after it was written: `show` and the audit
/// (through the index) both refuse it, naming the file and the field, instead of "0.0s" in one
/// and negative core-hours in the other.
#[test]
fn a_document_out_of_range_is_refused_alike_by_show_and_the_audit() {
    if !am_root() {
        eprintln!("skipped: writing an archive needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let cfg = config(d.path(), "");
    let store = jobscope_archive::Store::new(&d.path().join("archive"), "root");
    let w = store.write(&fixture(4242)).unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(&w.bytes).unwrap();
    doc["elapsed_s"] = serde_json::json!(-3600.0);
    std::fs::write(&w.path, serde_json::to_vec(&doc).unwrap()).unwrap();
    let file = w.path.file_name().unwrap().to_str().unwrap().to_string();

    let (rc, out, err) = jobscope(&cfg, &["show", "4242"]);
    assert_ne!(rc, 0, "show printed it:\n{out}");
    assert!(
        err.contains(&file) && err.contains("elapsed_s = -3600"),
        "{err}"
    );
    // The audit's index leaves it out and says which file and why; no row has negative hours.
    let (rc, out, err) = jobscope(&cfg, &["audit", "jobs", "--format", "json"]);
    assert!(
        err.contains(&file) && err.contains("elapsed_s = -3600"),
        "rc {rc}: {err}"
    );
    assert!(!out.contains("4242"), "{out}");
}

/// An archive that `nobody` cannot read (root's, 0700): no command may find nothing and call that
/// success; each says it could not read and exits non-zero.
#[test]
fn an_unreadable_archive_is_never_reported_as_empty_and_fine() {
    if !am_root() {
        eprintln!("skipped: needs root to make an archive another user cannot read");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = config(d.path(), "");
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let archive = d.path().join("archive");
    let store = jobscope_archive::Store::new(&archive, "root");
    store.write(&fixture(77)).unwrap();
    std::fs::set_permissions(&archive, std::fs::Permissions::from_mode(0o700)).unwrap();
    for args in [
        &["archive", "verify"][..],
        &["audit", "jobs"][..],
        &["show", "77"][..],
        &["index", "update"][..],
    ] {
        let (rc, out, err) = as_nobody(&cfg, args);
        assert_ne!(rc, 0, "{args:?} exit 0:\n{out}{err}");
        assert!(!out.contains("all OK"), "{args:?}: {out}");
        let said = format!("{out}{err}");
        assert!(
            said.contains("Permission denied") || said.contains("run this as root"),
            "{args:?} does not say why:\n{said}"
        );
    }
    // The month directory alone unreadable, the root readable: verify still says so.
    std::fs::set_permissions(&archive, std::fs::Permissions::from_mode(0o755)).unwrap();
    for year in std::fs::read_dir(&archive).unwrap().flatten() {
        if year.file_name().to_string_lossy().len() == 4 {
            std::fs::set_permissions(year.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        }
    }
    let (rc, out, err) = as_nobody(&cfg, &["archive", "verify"]);
    assert_ne!(rc, 0, "{out}{err}");
    assert!(
        out.contains("NOT fully checked") && out.contains("Permission denied"),
        "{out}"
    );
}
