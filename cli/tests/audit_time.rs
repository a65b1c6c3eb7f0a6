//! The audit's times on the wall clock of TZ, each job at its own offset: the real `jobscope`
//! binary with TZ=Europe/Oslo over an index this test writes, jobs on each side of both 2026
//! daylight-saving changes (2026-03-29 01:00 UTC: CET +01:00 → CEST +02:00; 2026-10-25 01:00 UTC:
//! back). The expected hours, days and weekdays are read off a calendar (`TZ=Europe/Oslo date -d
//! @…`), not computed by the code under test.

mod common;
use jobscope_audit::index::write_rows_only;
use jobscope_audit::JobRow;
use std::path::PathBuf;
use std::process::Command;

/// Job starts (Unix s, UTC) and what Oslo's clock read then. Each job runs 10 minutes on 6 cores
/// (1.0 core-hour).
const JOBS: [(u32, i64); 6] = [
    // 2026-01-15 22:30 UTC = Thu 23:30 CET (a summer offset would make it Fri 00:30).
    (1, 1_768_516_200),
    // 2026-03-29 00:30 UTC = Sun 01:30 CET, half an hour before the change.
    (2, 1_774_744_200),
    // 2026-03-29 01:30 UTC = Sun 03:30 CEST, half an hour after it.
    (3, 1_774_747_800),
    // 2026-07-01 22:30 UTC = Thu 2026-07-02 00:30 CEST (a winter offset: Wed 23:30).
    (4, 1_782_945_000),
    // 2026-10-25 00:30 UTC = Sun 02:30 CEST, the first time the clock reads 02:30 that night.
    (5, 1_792_888_200),
    // 2026-10-25 01:30 UTC = Sun 02:30 CET, the second time.
    (6, 1_792_891_800),
];
const RUN_S: i64 = 600;

struct Site {
    _dir: tempfile::TempDir,
    config: PathBuf,
    tz: &'static str,
}

/// A job of `cores` cores that ran `run_s` seconds from `start_s`.
fn job(job_id: u32, start_s: i64, run_s: i64, cores: u32) -> JobRow {
    let start_ms = (start_s * 1000) as u64;
    JobRow {
        cluster: Some("oslo".into()),
        job_id,
        user: Some(format!("user{job_id}")),
        uid: Some(1001),
        partition: Some("cpu".into()),
        node_count: 1,
        node_list: "n1".into(),
        start_unix_ms: start_ms,
        end_unix_ms: start_ms + run_s as u64 * 1000,
        elapsed_s: run_s as f64,
        state: "COMPLETED".into(),
        alloc_cores: Some(cores),
        core_hours_alloc: Some(f64::from(cores) * run_s as f64 / 3600.0),
        ..Default::default()
    }
}

/// An archive with only an index (of `rows`), in zone `tz`, and a configuration whose admin group
/// is this user's own, so the audit reads the index whether the test runs as root or not.
fn site_of(tz: &'static str, mut rows: Vec<JobRow>) -> Site {
    // Without the zone's file the C library and chrono quietly use UTC: say so instead.
    let zone_file = std::path::Path::new("/usr/share/zoneinfo").join(tz);
    assert!(
        zone_file.exists(),
        "{}: tzdata is needed",
        zone_file.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let config = common::admin_config(dir.path(), "");
    let cfg = jobscope_config::Config::load(&config).unwrap();
    rows.sort_by_key(|r| r.end_unix_ms);
    write_rows_only(&jobscope_cli::audit::index_settings(&cfg), rows).unwrap();
    Site {
        _dir: dir,
        config,
        tz,
    }
}

/// [`JOBS`] in Oslo.
fn site() -> Site {
    site_of(
        "Europe/Oslo",
        JOBS.iter().map(|&(id, s)| job(id, s, RUN_S, 6)).collect(),
    )
}

/// `jobscope --config … audit ARGS` with TZ set to the site's zone: whether it succeeded, its
/// standard output and its standard error.
fn audit(site: &Site, args: &[&str]) -> (bool, String, String) {
    let run = Command::new(env!("CARGO_BIN_EXE_jobscope"))
        .arg("--config")
        .arg(&site.config)
        .arg("audit")
        .args(args)
        .env("TZ", site.tz)
        .env_remove("JOBSCOPE_CONFIG")
        .output()
        .expect("run jobscope");
    let text = |b: Vec<u8>| String::from_utf8(b).expect("UTF-8 output");
    (run.status.success(), text(run.stdout), text(run.stderr))
}

fn ok(site: &Site, args: &[&str]) -> String {
    let (success, out, err) = audit(site, args);
    assert!(success, "{args:?}: {err}");
    out
}

/// The first two CSV fields of each data line: (key, jobs).
fn key_jobs(csv: &str) -> Vec<(String, String)> {
    csv.lines()
        .skip(1)
        .map(|l| {
            let mut f = l.split(',');
            (f.next().unwrap().into(), f.next().unwrap().into())
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn each_job_gets_the_hour_and_day_of_its_own_offset() {
    let site = site();
    let by = |key: &str, more: &[&str]| {
        let mut args = vec!["usage", "--by", key, "--format", "csv"];
        args.extend(more);
        key_jobs(&ok(&site, &args))
    };
    // Oslo: 23:30 (Jan), 01:30 and 03:30 (Mar 29: 02 never happens), 00:30 (Jul), 02:30 twice (Oct 25).
    assert_eq!(
        by("hour", &[]),
        pairs(&[("0", "1"), ("1", "1"), ("2", "2"), ("3", "1"), ("23", "1")])
    );
    assert_eq!(
        by("day", &[]),
        pairs(&[
            ("2026-01-15", "1"),
            ("2026-03-29", "2"),
            ("2026-07-02", "1"),
            ("2026-10-25", "2"),
        ])
    );
    // ISO weekdays: Thursday 4 (Jan 15, Jul 2), Sunday 7 (both changes).
    assert_eq!(by("day-of-week", &[]), pairs(&[("4", "2"), ("7", "4")]));
    // --utc: the instants as they are.
    assert_eq!(
        by("hour", &["--utc"]),
        pairs(&[("0", "2"), ("1", "2"), ("22", "2")])
    );
    assert_eq!(
        by("day", &["--utc"]),
        pairs(&[
            ("2026-01-15", "1"),
            ("2026-03-29", "2"),
            ("2026-07-01", "1"),
            ("2026-10-25", "2"),
        ])
    );
}

#[test]
fn the_heat_map_puts_each_job_in_its_own_local_hour() {
    let site = site();
    let csv = ok(&site, &["heatmap", "--format", "csv"]);
    // Every job is 1.0 core-hour.
    let mut expected = [[0.0; 24]; 7];
    expected[3][23] = 1.0; // Thu 23:30-23:40 CET
    expected[3][0] = 1.0; // Thu 00:30-00:40 CEST
    expected[6][1] = 1.0; // Sun 01:30 CET
    expected[6][3] = 1.0; // Sun 03:30 CEST
    expected[6][2] = 2.0; // Sun 02:30 CEST and 02:30 CET
    assert_cells(&heat_cells(&csv), &expected, &csv);
    let table = ok(&site, &["heatmap"]);
    assert!(
        table.starts_with("allocated core-hours by hour of week (Europe/Oslo)\n"),
        "{table}"
    );
}

#[test]
fn printed_times_say_their_zone_and_offset() {
    let site = site();
    // Every column (the default table shows the end only).
    let out = ok(&site, &["jobs", "--wide"]);
    let head = out.lines().next().unwrap();
    assert!(
        head.contains("start (Europe/Oslo)") && head.contains("end (Europe/Oslo)"),
        "{out}"
    );
    // Jobs 5 and 6 both start at 02:30 on the clock; the offset tells them apart.
    let line = |job: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(job))
            .unwrap_or_else(|| panic!("job {job}:\n{out}"))
            .to_string()
    };
    assert!(line("5").contains("2026-10-25 02:30 +02:00"), "{out}");
    assert!(line("6").contains("2026-10-25 02:30 +01:00"), "{out}");
    assert!(line("3").contains("2026-03-29 03:30 +02:00"), "{out}");
    let out = ok(&site, &["jobs", "--utc", "--wide"]);
    assert!(out.lines().next().unwrap().contains("end (UTC)"), "{out}");
    assert!(out.contains("2026-10-25 01:30  "), "{out}");
    let usage = ok(&site, &["usage", "--by", "hour"]);
    assert!(usage.starts_with("hour (Europe/Oslo)"), "{usage}");
}

/// The heat map's CSV as [weekday − 1][hour] core-hours.
fn heat_cells(csv: &str) -> Vec<Vec<f64>> {
    csv.lines()
        .skip(1)
        .map(|l| l.split(',').skip(1).map(|x| x.parse().unwrap()).collect())
        .collect()
}

fn assert_cells(got: &[Vec<f64>], want: &[[f64; 24]; 7], csv: &str) {
    for (d, hours) in want.iter().enumerate() {
        for (h, w) in hours.iter().enumerate() {
            let g = got[d][h];
            assert!((g - w).abs() < 1e-9, "day {} h{h:02}: {g}\n{csv}", d + 1);
        }
    }
}

/// St. John's (−03:30) moves its clocks at 02:00 local = 05:30 UTC, inside a UTC hour: on
/// 2026-03-08 its clock jumps from 01:59:59 NST (−03:30) to 03:00 NDT (−02:30).
#[test]
fn a_change_inside_a_utc_hour_of_a_half_hour_zone_is_found_to_the_second() {
    let site = site_of(
        "America/St_Johns",
        vec![
            // 05:00-06:00 UTC on 1 core: 01:30-02:00 NST, then 03:00-03:30 NDT.
            job(11, 1_772_946_000, 3600, 1),
            // 05:29:59 UTC = 01:59:59 NST; 05:30:00 UTC = 03:00:00 NDT.
            job(12, 1_772_947_799, 1, 1),
            job(13, 1_772_947_800, 1, 1),
        ],
    );
    let by_hour = key_jobs(&ok(&site, &["usage", "--by", "hour", "--format", "csv"]));
    assert_eq!(by_hour, pairs(&[("1", "2"), ("3", "1")]));
    let csv = ok(&site, &["heatmap", "--user", "user11", "--format", "csv"]);
    let mut want = [[0.0; 24]; 7];
    want[6][1] = 0.5;
    want[6][3] = 0.5;
    assert_cells(&heat_cells(&csv), &want, &csv);
}

/// Jobs ending in `[since, until)`, given as Oslo wall-clock times.
fn ids_between(site: &Site, since: &str, until: &str) -> Vec<String> {
    let out = ok(
        site,
        &[
            "jobs", "--since", since, "--until", until, "--format", "csv",
        ],
    );
    // job_id is the second column.
    out.lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap().to_string())
        .collect()
}

#[test]
fn since_and_until_are_local_at_their_own_offset() {
    let site = site();
    // Job 2 ends 00:40 UTC = 01:40 CET; job 3 ends 01:40 UTC = 03:40 CEST. A single offset for
    // both windows would miss one of them.
    assert_eq!(
        ids_between(&site, "2026-03-29T01:35", "2026-03-29T01:45"),
        ["2"]
    );
    assert_eq!(
        ids_between(&site, "2026-03-29T03:35", "2026-03-29 03:45"),
        ["3"]
    );
    // A date is its local midnight: 2026-07-02 00:00 CEST = 2026-07-01 22:00 UTC.
    assert_eq!(ids_between(&site, "2026-07-02", "2026-07-03"), ["4"]);
}

#[test]
fn impossible_dates_and_times_are_one_line_errors() {
    let site = site();
    for (args, needle) in [
        (
            vec!["jobs", "--since", "2026-02-30"],
            "\"2026-02-30\": there is no such date or time",
        ),
        (
            vec!["jobs", "--until", "2026-13-01"],
            "\"2026-13-01\": there is no such date or time",
        ),
        (
            vec!["jobs", "--since", "2026-03-29T02:30"],
            "2026-03-29 02:30: there is no such time in Europe/Oslo (the clocks skip it)",
        ),
        (
            vec!["jobs", "--since", "last tuesday"],
            "expected YYYY-MM-DD, YYYY-MM-DDTHH:MM or Unix seconds",
        ),
    ] {
        let (success, out, err) = audit(&site, &args);
        assert!(!success, "{args:?}");
        assert!(out.is_empty(), "{args:?}: {out}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(lines[0].contains(needle), "{args:?}: {err}");
    }
}
