//! `jobscope audit report`, the real binary over an index this test writes: the text by default,
//! the page with --html (a new file, not world-readable), the mail into the queue with --mail,
//! nothing and success with --mail while audit.report_to is unset (what the weekly timer runs).
//! The report's contents are tested in jobscope-admin (admin/src/cluster/).

mod common;
use jobscope_audit::index::write_rows_only;
use jobscope_audit::JobRow;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

/// 2026-03-09 00:00 UTC, a Monday.
const T0_S: i64 = 1_773_014_400;

struct Site {
    dir: tempfile::TempDir,
    config: PathBuf,
}

fn root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A job of `cores` cores that ran `hours` from `start_s`, using `eff` of them.
fn job(
    job_id: u32,
    user: &str,
    part: &str,
    start_s: i64,
    hours: f64,
    cores: u32,
    eff: f64,
) -> JobRow {
    let start_ms = (start_s * 1000) as u64;
    let elapsed_s = hours * 3600.0;
    JobRow {
        cluster: Some("c1".into()),
        job_id,
        user: Some(user.into()),
        uid: Some(1001),
        account: Some("physics".into()),
        partition: Some(part.into()),
        node_count: 1,
        node_list: "n1".into(),
        start_unix_ms: start_ms,
        end_unix_ms: start_ms + (elapsed_s * 1000.0) as u64,
        elapsed_s,
        state: "COMPLETED".into(),
        alloc_cores: Some(cores),
        cpu_usage_s: Some(eff * f64::from(cores) * elapsed_s),
        cpu_eff_pct: Some(100.0 * eff),
        ..Default::default()
    }
}

/// An index of two weeks of jobs, and a configuration whose admin group is this user's own (so
/// the report reads the index whether the test runs as root or not), with `extra` appended.
fn site(extra: &str) -> Site {
    let dir = tempfile::tempdir().unwrap();
    let config = common::admin_config(dir.path(), extra);
    let cfg = jobscope_config::Config::load(&config).unwrap();
    let rows: Vec<JobRow> = (0..28u32)
        .map(|i| {
            let user = ["alice", "bob"][(i % 2) as usize];
            let part = ["cpu", "debug"][(i % 3 == 0) as usize];
            let start = T0_S - 7 * 86_400 + i64::from(i) * 12 * 3600;
            job(
                100 + i,
                user,
                part,
                start,
                2.0,
                4,
                0.1 + 0.03 * f64::from(i),
            )
        })
        .collect();
    write_rows_only(&jobscope_cli::audit::index_settings(&cfg), rows).unwrap();
    Site { dir, config }
}

/// `jobscope --config … audit report ARGS` in UTC: (success, stdout, stderr).
fn report(site: &Site, args: &[&str]) -> (bool, String, String) {
    let run = Command::new(env!("CARGO_BIN_EXE_jobscope"))
        .arg("--config")
        .arg(&site.config)
        .args(["audit", "report", "--utc"])
        .args(args)
        .env("TZ", "UTC")
        .env_remove("JOBSCOPE_CONFIG")
        .output()
        .expect("run jobscope");
    let text = |b: Vec<u8>| String::from_utf8(b).expect("UTF-8 output");
    (run.status.success(), text(run.stdout), text(run.stderr))
}

const WEEK: [&str; 4] = ["--since", "2026-03-09", "--until", "2026-03-16"];

#[test]
fn the_timers_command_does_nothing_and_succeeds_without_recipients() {
    let s = site("");
    let (ok, out, err) = report(&s, &["--mail", "--last", "7d"]);
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "audit.report_to is not set: the cluster report is not mailed\n"
    );
}

#[test]
fn the_text_by_default_and_the_page_to_a_new_file() {
    let s = site("");
    let (ok, out, err) = report(&s, &WEEK);
    assert!(ok, "{err}");
    assert!(
        out.starts_with(
            "jobscope cluster report: the whole cluster\nJobs that ended from 2026-03-09 00:00 to \
             2026-03-16 00:00 (UTC, 7 days)"
        ),
        "{out}"
    );
    // A job every 12 hours from 2026-03-02 00:00, each 2 hours long: the 14 that start from
    // 03-09 00:00 end in the window, the 14 before in the week before.
    assert!(
        out.contains("  14 jobs ended; 14 in the 7 days before (+0 %)."),
        "{out}"
    );
    let page = s.dir.path().join("report.html");
    let (ok, out, err) = report(
        &s,
        &[&WEEK[..], &["--html", page.to_str().unwrap()]].concat(),
    );
    assert!(ok, "{err}");
    assert_eq!(out, "", "the page alone, no text");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"), "{html:.200}");
    assert_eq!(html.matches("<img src=\"data:image/png;base64,").count(), 5);
    let mode = std::fs::metadata(&page).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o007, 0, "the page is not for everyone: {mode:o}");
    // Nothing is overwritten.
    let (ok, _, err) = report(&s, &[&WEEK[..], &["-o", page.to_str().unwrap()]].concat());
    assert!(!ok);
    assert!(err.contains("report.html"), "{err}");
}

#[test]
fn an_empty_window_is_refused_in_words() {
    let s = site("");
    let (ok, _, err) = report(&s, &["--since", "2026-03-16", "--until", "2026-03-09"]);
    assert!(!ok);
    assert!(err.contains("the window is empty"), "{err}");
}

/// Issue 29 §4: `--since=-9223372036854775808 --until=0` aborted (the window's length overflowed
/// and the per-day chart asked for 2.5 PB). Each time and span argument at the ends of i64, past
/// its range, or making a window that starts before it: one line naming the argument, a failed
/// exit.
#[test]
fn extreme_windows_are_one_line_errors_naming_the_argument() {
    let s = site("");
    let time_range =
        "a time from 0000-01-01 to 9999-12-31 UTC (Unix seconds -62167219200 to 253402300799)";
    let span_range = "a span from 0 to 3652425d (10 000 years)";
    let (min, max) = (i64::MIN.to_string(), i64::MAX.to_string());
    let mut cases: Vec<(Vec<String>, String)> = vec![(
        vec![format!("--since={min}"), "--until=0".into()],
        format!("--since {min}: out of range: {time_range}"),
    )];
    for v in [
        &min,
        &max,
        "-62167219201",
        "253402300800",
        "99999999999999999999",
    ] {
        for flag in ["--since", "--until"] {
            cases.push((
                vec![flag.into(), v.to_string()],
                format!("{flag} {v}: out of range: {time_range}"),
            ));
        }
    }
    for v in [&max, "9223372036854775807w", "3652426d"] {
        cases.push((
            vec![format!("--last={v}")],
            format!("--last {v}: out of range: {span_range}"),
        ));
    }
    cases.push((
        vec![
            "--last".into(),
            "3652425d".into(),
            "--until".into(),
            "2026-03-16".into(),
        ],
        "--last 3652425d before --until 2026-03-16: the window would start before 0000-01-01"
            .into(),
    ));
    cases.push((
        vec!["--until".into(), "0000-01-03".into()],
        "7 days before --until 0000-01-03: the window would start before 0000-01-01".into(),
    ));
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, out, err) = report(&s, &args);
        assert!(!ok, "{args:?}: {out}");
        assert!(out.is_empty(), "{args:?}: {out}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(
            lines[0].contains(&needle),
            "{args:?}: no {needle:?} in {err}"
        );
    }
    // The ends of the range are taken: a window of ten thousand years is a report by month.
    let (ok, out, err) = report(&s, &["--since=-62167219200", "--until", "253402300799"]);
    assert!(ok, "{err}");
    assert!(out.contains("Usage and waste per month"), "{out}");
    assert!(out.contains("  28 jobs ended"), "{out}");
}

/// --mail with recipients: root queues one mail (its MIME parts in the queue's file), and does it
/// once per window; anyone else is told the queue is root's.
#[test]
fn the_mail_goes_into_the_queue_once() {
    let dir = tempfile::tempdir().unwrap();
    let queue = dir.path().join("mail");
    let s = site(&format!(
        "[audit]\nreport_to = [\"hpc-admins@example.org\"]\n[mail]\nfrom = \
         \"jobscope@example.org\"\nqueue_dir = \"{}\"\ntransport = \"sendmail\"\n\
         [mail.sendmail]\npath = \"/bin/false\"\n",
        queue.display()
    ));
    let (ok, out, err) = report(&s, &[&WEEK[..], &["--mail"]].concat());
    if !root() {
        assert!(!ok);
        assert!(err.contains("run it as root"), "{err}");
        return;
    }
    assert!(ok, "{err}");
    assert!(out.contains("for hpc-admins@example.org: Queued"), "{out}");
    let eml: Vec<PathBuf> = std::fs::read_dir(&queue)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "eml"))
        .collect();
    assert_eq!(eml.len(), 1, "{eml:?}");
    let raw = std::fs::read_to_string(&eml[0]).unwrap();
    for part in [
        "multipart/alternative",
        "text/plain",
        "multipart/related",
        "text/html",
        "image/png",
    ] {
        assert!(raw.contains(part), "{part}");
    }
    let (ok, out, err) = report(&s, &[&WEEK[..], &["--mail"]].concat());
    assert!(ok, "{err}");
    assert!(out.contains(": AlreadyQueued"), "{out}");
}
