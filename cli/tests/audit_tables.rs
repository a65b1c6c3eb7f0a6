//! The audit's tables are for people: every report's default table fits a 120-character terminal
//! with the longest names a site has and the largest figures a year gives, `--wide` and
//! `--columns` show the rest, and csv keeps every column. The real `jobscope` binary over an index
//! this test writes (rows of a recorded archive document, given long hostile names and large
//! figures), in a zone with daylight saving, where every time carries its own offset (the widest
//! time cells there are).

use jobscope_audit::index::write_rows_only;
use jobscope_audit::JobRow;
use jobscope_report::present::width;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

/// The width the issue asks of a default table, in characters.
const MAX_CHARS: usize = 120;

/// 32 characters, the longest user name useradd takes by default.
const LONG_USER: &str = "a.very-long-username-of-32-chars";
/// Names as sites give them, and as users type them (a bidi override, an escape sequence).
const LONG_ACCOUNT: &str = "computational-astrophysics-and-cosmology-2026";
const LONG_PARTITION: &str = "gpu-a100-80gb-highmem-long";
const LONG_NAME: &str = "train_resnet152_imagenet_lr0.1_bs256_seed42_warmup10_cosine_schedule";
const HOSTILE_NAME: &str = "evil\u{202E}gpj.exe\x1b[2Jrm -rf ~ and a very long tail to cut";

struct Site {
    _dir: tempfile::TempDir,
    config: PathBuf,
}

/// A row of the recorded archive document `oom.json` (a real job's figures), as the index holds it.
fn recorded_row() -> JobRow {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../report/testdata/archive-v1/oom.json");
    let doc = jobscope_archive::load(
        &std::fs::read(&p).unwrap(),
        &jobscope_model::params::Report::default(),
    )
    .unwrap();
    JobRow::of(&doc.summary)
}

const DAY_MS: u64 = 86_400_000;
/// 2026-10-20 12:00 UTC: the jobs end on each side of Oslo's change back to CET (2026-10-25).
const T0_MS: u64 = 1_792_497_600_000;

/// One big job: `cores` cores for `days` days, `gpus` GPUs of which `idle` were never used.
#[allow(clippy::too_many_arguments)]
fn big_job(
    job_id: u32,
    user: &str,
    account: &str,
    partition: &str,
    name: &str,
    state: &str,
    end_day: u64,
    cores: u32,
    gpus: u32,
    idle: u32,
) -> JobRow {
    let mut r = recorded_row();
    let elapsed_s = 13.5 * 86_400.0;
    r.cluster = Some("a-cluster-with-a-long-name".into());
    r.job_id = job_id;
    r.user = Some(user.into());
    r.uid = Some(1000 + job_id % 1000);
    r.group = Some(format!("{account}-members"));
    r.account = Some(account.into());
    r.partition = Some(partition.into());
    r.qos = Some("normal-long-running-qos".into());
    r.name = Some(name.into());
    r.state = state.into();
    r.node_count = cores.div_ceil(128);
    r.node_list = (0..r.node_count)
        .map(|n| format!("node{n:04}"))
        .collect::<Vec<_>>()
        .join(",");
    r.end_unix_ms = T0_MS + end_day * DAY_MS + u64::from(job_id % 7) * 60_000;
    r.start_unix_ms = r.end_unix_ms - (elapsed_s * 1000.0) as u64;
    r.elapsed_s = elapsed_s;
    r.alloc_cores = Some(cores);
    r.cpu_usage_s = Some(f64::from(cores) * elapsed_s * 0.37);
    r.cpu_eff_pct = Some(37.0);
    r.alloc_mem_per_node_bytes = Some(2_000 << 30);
    r.mem_peak_bytes = Some(1_234_567_890_123);
    // 61.7 % of the 2000 GiB per node held for the whole run.
    r.mem_gb_hours_used = Some(2_000.0 * f64::from(r.node_count) * elapsed_s / 3600.0 * 0.617);
    r.mem_eff_pct = Some(61.7);
    if gpus > 0 {
        let h = f64::from(gpus) * elapsed_s / 3600.0;
        r.alloc_gpus = Some(gpus);
        r.gpus_idle = Some(idle);
        r.gpus_never_used = Some(idle);
        r.gpu_hours_alloc = Some(h);
        r.gpu_hours_wasted = Some(h * f64::from(idle) / f64::from(gpus));
        r.gpu_util_mean_pct = Some(12.5);
        r.gpu_energy_kwh = Some(4_321.09);
    } else {
        r.alloc_gpus = None;
        r.gpus_idle = None;
        r.gpus_never_used = None;
        r.gpu_hours_alloc = None;
        r.gpu_hours_wasted = None;
        r.gpu_util_mean_pct = None;
        r.gpu_energy_kwh = None;
    }
    r
}

/// An index of big jobs by users with long names, and a configuration whose admin group is this
/// user's own, so the audit reads the index whether the test runs as root or not.
fn site() -> Site {
    let dir = tempfile::tempdir().unwrap();
    let config = common::admin_config(dir.path(), "");
    let users = [
        LONG_USER,
        "b.another-long-username-32-chars",
        "carol",
        "dave-the-data-scientist",
    ];
    let accounts = [LONG_ACCOUNT, "physics-department-hpc-allocation", "chem"];
    let mut rows = Vec::new();
    for i in 0..24u32 {
        let user = users[i as usize % users.len()];
        let account = accounts[i as usize % accounts.len()];
        let (partition, gpus, idle) = match i % 4 {
            0 => (LONG_PARTITION, 64, 48),
            1 => (LONG_PARTITION, 0, 0),
            2 => ("cpu-standard-nodes-2026", 0, 0),
            _ => ("debug", 0, 0),
        };
        // One name in Japanese: three bytes a character, counted as one.
        let name = match i % 3 {
            _ if i == 2 => "名前の長いジョブのシミュレーション計算".to_string(),
            0 => LONG_NAME.to_string(),
            1 => HOSTILE_NAME.to_string(),
            _ => format!("sweep-{i:02}-lr0.{i}-dropout0.5-adamw"),
        };
        let state = ["OUT_OF_MEMORY", "COMPLETED", "TIMEOUT", "CANCELLED"][i as usize % 4];
        rows.push(big_job(
            123_456_789 + i * 1_000,
            user,
            account,
            partition,
            &name,
            state,
            u64::from(i % 8),
            12_800,
            gpus,
            idle,
        ));
    }
    rows.sort_by_key(|r| r.end_unix_ms);
    let cfg = jobscope_config::Config::load(&config).unwrap();
    write_rows_only(&jobscope_cli::audit::index_settings(&cfg), rows).unwrap();
    Site { _dir: dir, config }
}

/// `jobscope --config … audit ARGS` in Oslo's zone: exit status, standard output, standard error.
fn audit(site: &Site, args: &[&str]) -> (i32, String, String) {
    let run = Command::new(common::BIN)
        .arg("--config")
        .arg(&site.config)
        .arg("audit")
        .args(args)
        .env("TZ", "Europe/Oslo")
        .env_remove("JOBSCOPE_CONFIG")
        .output()
        .expect("run jobscope");
    let text = |b: Vec<u8>| String::from_utf8(b).expect("UTF-8 output");
    (
        run.status.code().unwrap_or(-1),
        text(run.stdout),
        text(run.stderr),
    )
}

fn ok(site: &Site, args: &[&str]) -> String {
    let (rc, out, err) = audit(site, args);
    assert_eq!(rc, 0, "{args:?}: {err}");
    out
}

/// The widest line, in terminal columns (a Japanese character takes two; it is 3 bytes).
fn widest(table: &str) -> usize {
    table.lines().map(width).max().unwrap_or(0)
}

/// The header's cells (a table's cells are apart by two spaces or more; a header has single
/// spaces inside, `core-h wasted`).
fn cells(line: &str) -> Vec<String> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn every_report_s_default_table_fits_120_characters() {
    let site = site();
    let reports: [&[&str]; 10] = [
        &["usage"],
        &["usage", "--by", "user"],
        &["usage", "--by", "user,account,partition"],
        &["usage", "--by", "day,partition"],
        &["top"],
        &["top", "--by", "account,user", "--metric", "mem"],
        &["gpu-idle"],
        &["cpu-on-gpu"],
        &["heatmap"],
        &["jobs"],
    ];
    let mut measured = Vec::new();
    for args in reports {
        let table = ok(&site, args);
        assert!(
            !table.contains("(no jobs match)"),
            "{args:?}: no rows:\n{table}"
        );
        // More than a header and a rule: the rows themselves were measured.
        assert!(table.lines().count() >= 3, "{args:?}:\n{table}");
        let w = widest(&table);
        measured.push(format!("{:<45} {w}", args.join(" ")));
        assert!(w <= MAX_CHARS, "{args:?}: {w} characters wide:\n{table}");
        // Cleaned: no control character, no bidi override reached the terminal.
        assert!(
            !table
                .chars()
                .any(|c| c.is_control() && c != '\n' || c == '\u{202E}'),
            "{args:?}:\n{table:?}"
        );
    }
    // The figures for the note (`cargo nextest run … --no-capture` shows them).
    eprintln!(
        "default table widths (characters):\n{}",
        measured.join("\n")
    );
}

#[test]
fn the_most_useful_columns_come_first_with_units_and_zones() {
    let site = site();
    let usage = ok(&site, &["usage", "--by", "user"]);
    assert_eq!(
        cells(usage.lines().next().unwrap()),
        [
            "user",
            "jobs",
            "core-h alloc",
            "core-h wasted",
            "CPU eff %",
            "mem eff %",
            "GPU-h wasted"
        ],
        "{usage}"
    );
    let jobs = ok(&site, &["jobs"]);
    let head = cells(jobs.lines().next().unwrap());
    assert_eq!(head[..3], ["job", "user", "name"], "{jobs}");
    assert!(head.contains(&"end (Europe/Oslo)".to_string()), "{jobs}");
    // A job name is shown, cleaned and cut short with an ellipsis; the job's id is there whole.
    let row = jobs
        .lines()
        .find(|l| l.starts_with("123456789 "))
        .unwrap_or_else(|| panic!("job 123456789:\n{jobs}"));
    // Here the widest case: 32-character users, OUT_OF_MEMORY, offsets in every time.
    let name = cells(row)[2].clone();
    assert!(name.chars().count() >= 8, "{row}");
    assert!(name.ends_with('…'), "{row}");
    assert!(LONG_NAME.starts_with(name.trim_end_matches('…')), "{row}");
    // Each end carries its own offset: the change back to CET is inside the window.
    assert!(
        jobs.contains(" +02:00") && jobs.contains(" +01:00"),
        "{jobs}"
    );
    // Numbers right-aligned: each row of the last column ends where its header does, in
    // terminal columns (the Japanese name's characters take two each).
    let end = width(jobs.lines().next().unwrap());
    for l in jobs.lines().skip(2) {
        assert_eq!(width(l), end, "{l:?}\n{jobs}");
    }
}

#[test]
fn wide_shows_every_column_and_columns_picks_them() {
    let site = site();
    // csv keeps every column of the report, as it always did.
    let csv = ok(&site, &["jobs", "--format", "csv"]);
    let names: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    assert_eq!(names.len(), 22, "{names:?}");
    let wide = ok(&site, &["jobs", "--wide"]);
    let head = cells(wide.lines().next().unwrap());
    assert_eq!(head.len(), names.len(), "one header per column: {head:?}");
    for want in ["array job", "cores", "mem peak", "core-h alloc", "class"] {
        assert!(head.iter().any(|h| h == want), "{want}: {head:?}");
    }
    assert!(widest(&wide) > MAX_CHARS, "--wide is wide:\n{wide}");
    // Names whole (up to 40 characters), where the default table cut them.
    assert!(wide.contains(LONG_USER), "{wide}");
    assert!(!ok(&site, &["jobs"]).contains(LONG_USER));

    let picked = ok(&site, &["jobs", "--columns", "user,job_id,cpu_eff_pct"]);
    let mut lines = picked.lines();
    assert_eq!(
        cells(lines.next().unwrap()),
        ["user", "job", "CPU eff %"],
        "{picked}"
    );
    lines.next();
    for l in lines {
        let c = cells(l);
        assert_eq!(c.len(), 3, "{l}");
        assert_eq!(c[2], "37.0", "{l}");
    }
    // --columns picks the columns of csv too, in the order given.
    let csv = ok(
        &site,
        &[
            "top",
            "--columns",
            "jobs,user",
            "--format",
            "csv",
            "-n",
            "2",
        ],
    );
    assert_eq!(csv.lines().next(), Some("jobs,user"), "{csv}");
    assert_eq!(csv.lines().count(), 3, "{csv}");

    // An unknown column: one line naming it and the valid ones, no table.
    let (rc, out, err) = audit(
        &site,
        &["usage", "--by", "user", "--columns", "user,cpu_eff"],
    );
    assert_ne!(rc, 0);
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("\"cpu_eff\"")
            && err.contains("cpu_eff_pct")
            && err.contains("core_hours_alloc"),
        "{err}"
    );
}

/// Refused with one line on standard error containing `needle`, nothing on standard output.
fn refused(site: &Site, args: &[&str], needle: &str) {
    let (rc, out, err) = audit(site, args);
    assert_ne!(rc, 0, "{args:?}: exit 0\n{out}");
    assert!(out.is_empty(), "{args:?}: printed a report anyway:\n{out}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: {err}");
    assert!(
        lines[0].contains(needle),
        "{args:?}: no {needle:?} in {err}"
    );
}

#[test]
fn mistyped_inputs_get_a_clear_answer_not_a_wrong_report() {
    let site = site();
    // There is no 30 February (not 2 March).
    refused(
        &site,
        &["jobs", "--since", "2026-02-30"],
        "\"2026-02-30\": there is no such date or time",
    );
    // A two-digit year is not the year 26.
    refused(
        &site,
        &["usage", "--since", "26-11-25"],
        "\"26-11-25\": the year must have four digits",
    );
    refused(
        &site,
        &["usage", "--until", "26-11-25T10:00"],
        "the year must have four digits",
    );
    // A window that ends before it starts.
    refused(
        &site,
        &["jobs", "--since", "2026-11-25", "--until", "2026-11-01"],
        "--since 2026-11-25 is not before --until 2026-11-01",
    );
    refused(
        &site,
        &["jobs", "--last", "7d", "--until", "2020-01-01"],
        "is not before --until 2020-01-01",
    );
    // Group keys: none twice, none empty.
    refused(
        &site,
        &["usage", "--by", "user,user"],
        "user is given twice",
    );
    refused(&site, &["usage", "--by", ","], "an empty key");
    refused(&site, &["top", "--by", "user,"], "an empty key");
    refused(&site, &["usage", "--user", "carol,"], "an empty value");
    // A negative span, however it is written.
    for args in [
        &["jobs", "--last", "-5d"][..],
        &["jobs", "--last=-5d"][..],
        &["jobs", "--min-elapsed", "-10m"][..],
    ] {
        refused(&site, args, "a duration cannot be negative");
    }
    // A count of rows is 1 or more (clap's usage follows its line, so only the first is checked).
    for args in [&["top", "-n", "0"][..], &["top", "-n", "-3"][..]] {
        let (rc, out, err) = audit(&site, args);
        assert_ne!(rc, 0, "{args:?}");
        assert!(out.is_empty(), "{out}");
        assert!(err.contains("a whole number, 1 or more"), "{args:?}: {err}");
    }
}

/// What the errors of issue 29 §4 say the ranges are.
const TIME_RANGE: &str =
    "a time from 0000-01-01 to 9999-12-31 UTC (Unix seconds -62167219200 to 253402300799)";
const SPAN_RANGE: &str = "a span from 0 to 3652425d (10 000 years)";

/// Issue 29 §4: every time and span argument of every report, at the ends of i64 and just past
/// its range, in both spellings (`--since X`, `--since=X`): one line naming the argument and the
/// range, nothing on standard output, a failed exit, no abort.
#[test]
fn extreme_times_and_spans_are_refused_naming_the_argument_and_the_range() {
    let site = site();
    let (min, max) = (i64::MIN.to_string(), i64::MAX.to_string());
    let times = [
        min.as_str(),
        max.as_str(),
        "-62167219201",
        "253402300800",
        "99999999999999999999",
    ];
    let spans = [max.as_str(), "9223372036854775807w", "3652426d"];
    for report in ["usage", "top", "gpu-idle", "cpu-on-gpu", "heatmap", "jobs"] {
        for v in times {
            for flag in ["--since", "--until"] {
                let needle = format!("{flag} {v}: out of range: {TIME_RANGE}");
                refused(&site, &[report, flag, v], &needle);
                refused(&site, &[report, &format!("{flag}={v}")], &needle);
            }
        }
        for v in spans {
            for flag in ["--last", "--min-elapsed"] {
                let needle = format!("{flag} {v}: out of range: {SPAN_RANGE}");
                refused(&site, &[report, &format!("{flag}={v}")], &needle);
            }
        }
        // The longest span, from now, reaches back before the first time.
        refused(
            &site,
            &[report, "--last", "3652425d"],
            "--last 3652425d: the window would start before 0000-01-01",
        );
    }
    // The ends of the range are taken: every job is in the widest window.
    let (rc, out, err) = audit(
        &site,
        &[
            "jobs",
            "--since=-62167219200",
            "--until",
            "253402300799",
            "--min-elapsed",
            "0",
            "--format",
            "csv",
        ],
    );
    assert_eq!(rc, 0, "{err}");
    assert_eq!(out.lines().count(), 1 + 24, "{out}");
}

/// A scratch directory others can enter and a configuration in it naming `admin_group`.
fn open_site(admin_group: &str) -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = common::config(
        d.path(),
        &format!("[archive]\nadmin_group = \"{admin_group}\""),
    );
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    (d, cfg)
}

#[test]
fn a_user_who_is_not_an_admin_is_told_they_see_only_their_own_jobs() {
    let (_d, cfg) = open_site("root");
    let (rc, out, err) = if common::am_root() {
        common::as_nobody(&cfg, &["audit", "jobs"])
    } else {
        // Not root: this user is outside the admin group `root` already.
        common::jobscope(&cfg, &["audit", "jobs"])
    };
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("(no jobs match)"), "{out}");
    assert!(err.contains("only your own jobs"), "{err}");
    assert!(err.contains("\"root\""), "names the admin group: {err}");
}

#[test]
fn an_admin_whose_index_cannot_be_read_gets_one_line_with_the_os_error_once() {
    let run = |cfg: &Path| {
        if common::am_root() {
            common::as_nobody(cfg, &["audit", "usage"])
        } else {
            common::jobscope(cfg, &["audit", "usage"])
        }
    };
    // An admin who is not root: nobody in `nogroup`, or this user in their own group.
    let group = if common::am_root() {
        "nogroup".to_string()
    } else {
        let g = Command::new("id").arg("-gn").output().unwrap();
        String::from_utf8(g.stdout).unwrap().trim().to_string()
    };
    let (d, cfg) = open_site(&group);
    let (rc, out, err) = run(&cfg);
    assert_ne!(rc, 0, "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let state = d.path().join("archive/index/state.json");
    assert!(
        err.contains(&format!(
            "is missing or damaged: {}: No such file or directory (os error 2)",
            state.display()
        )),
        "{err}"
    );
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn a_missing_archive_directory_is_said_as_such() {
    let d = tempfile::tempdir().unwrap();
    let gone = d.path().join("no-archive-here");
    let cfg = d.path().join("jobscope.toml");
    std::fs::write(
        &cfg,
        format!("[paths]\narchive_dir = \"{}\"\n", gone.display()),
    )
    .unwrap();
    let mut commands = vec![
        &["audit", "jobs"][..],
        &["audit", "usage", "--by", "user"][..],
    ];
    if common::am_root() {
        commands.push(&["index", "update"][..]);
    }
    for args in commands {
        let (rc, out, err) = common::jobscope(&cfg, args);
        assert_ne!(rc, 0, "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(&format!("the archive directory {} ", gone.display()))
                && err.contains("is missing"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("lock"), "{args:?}: {err}");
    }
}

/// An archive with the recorded document `oom.json` as one job on each of `days` days.
fn archive_of_days(archive: &Path, days: u64) {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../report/testdata/archive-v1/oom.json");
    let doc = jobscope_archive::load(
        &std::fs::read(&p).unwrap(),
        &jobscope_model::params::Report::default(),
    )
    .unwrap();
    let store = jobscope_archive::Store::new(archive, "root");
    for k in 0..days {
        let mut s = doc.summary.clone();
        let shift = k * DAY_MS;
        s.job_id = 1000 + k as u32;
        s.start_unix_ms += shift;
        s.end_unix_ms += shift;
        s.scheduler_start_unix_s = s.scheduler_start_unix_s.map(|t| t + shift / 1000);
        for n in &mut s.nodes {
            n.job_id = s.job_id;
            n.start_unix_ms += shift;
            n.end_unix_ms += shift;
        }
        store.write(&s).unwrap();
    }
}

#[test]
fn index_update_shows_progress_on_a_terminal_and_nothing_when_piped() {
    if !common::am_root() {
        eprintln!("skipped: the index is written by root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let cfg = common::config(d.path(), "");
    archive_of_days(&d.path().join("archive"), 3);
    // Piped (a timer's journal, `| tee`): the result, and not a character of progress.
    let (rc, out, err) = common::jobscope(&cfg, &["index", "update"]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.starts_with("index rebuilt (no index yet): 3 jobs"),
        "{out}"
    );
    assert_eq!(err, "", "progress on a pipe");
    assert!(!out.contains("indexing") && !out.contains('\r'), "{out:?}");

    // On a terminal (`script` gives the command one): the days counted, in place.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped the terminal half: no `script` (util-linux)");
        return;
    }
    let cmd = format!(
        "TZ=UTC {} --config {} index rebuild",
        common::BIN,
        cfg.display()
    );
    let tty = Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success(), "{shown}");
    assert!(shown.contains("\x1b[Kindexing day 3/3 ("), "{shown:?}");
    // Cleared before the result: the result's line starts clean.
    assert!(shown.contains("\r\x1b[Kindex rebuilt"), "{shown:?}");
}
