//! The cluster report over a real archive and index: two weeks of jobs written by the archive and
//! indexed by `Index::update`, some of them under hostile names. Expected figures are computed here
//! from the jobs' own specifications (cores × elapsed, CPU seconds), never from the queries.

use super::page::{mail_id, Page};
use super::*;
use jobscope_audit::testing::{fixture, spec, summary, Fixture, Spec, DAY_MS, T0_MS};
use mail_parser::{MessageParser, MimeHeaders};

/// The hostile names: markup that would run or fetch if it reached the page unescaped, bidi
/// overrides, and a name far longer than any table or chart shows.
pub(super) const SCRIPT_USER: &str = "<script>document.title='pwned'</script>";
pub(super) const IMG_USER: &str = "<img src=/img-evil onerror=alert(1)>";
pub(super) const BIDI_USER: &str = "mallory\u{202E}gnp.exe\u{2066}";
pub(super) const BIDI_ACCOUNT: &str = "<b>acct</b>\u{202E}lab";
pub(super) const STYLE_PARTITION: &str = "gpu<style>*{display:none}</style>";
pub(super) const IFRAME_NAME: &str = "<iframe src=\"/iframe-evil\"></iframe>train";

pub(super) fn long_user() -> &'static str {
    Box::leak(format!("long{}", "x".repeat(300)).into_boxed_str())
}

/// One job: `Spec` with the fields the report's figures depend on.
#[allow(clippy::too_many_arguments)]
fn job(
    id: u32,
    user: &'static str,
    uid: u32,
    part: &'static str,
    day: u64,
    hour: u64,
    cores: u32,
    hours: f64,
    eff: f64,
) -> Spec {
    let mut s = spec(id, user, uid, part, day);
    s.start_ms = T0_MS + day * DAY_MS + hour * 3_600_000;
    s.cores = cores;
    s.elapsed_s = hours * 3600.0;
    s.cpu_s = eff * f64::from(cores) * s.elapsed_s;
    s
}

/// Two weeks from 2026-03-02 (a Monday): the report's window is the second, the trend compares it
/// with the first. Partitions `cpu`, `debug` and two GPU partitions (`gpu` and a hostile one);
/// users of every kind; GPU jobs with idle GPUs; CPU-only jobs on a GPU partition, one of them
/// while it was busy (under a hostile job name).
pub(super) fn jobs() -> Vec<(Spec, Option<&'static str>, Option<&'static str>)> {
    let long = long_user();
    let users: [(&'static str, u32); 7] = [
        ("alice", 1001),
        ("bob", 1002),
        ("carol", 1003),
        (SCRIPT_USER, 1004),
        (IMG_USER, 1005),
        (BIDI_USER, 1006),
        (long, 1007),
    ];
    let mut v = Vec::new();
    for i in 0..140u32 {
        let (user, uid) = users[(i % 7) as usize];
        let day = u64::from(i % 14);
        let hour = u64::from((i * 5) % 24);
        let part = match i % 5 {
            0 => "cpu",
            1 => "debug",
            2 if i % 3 == 0 => STYLE_PARTITION,
            _ => "cpu",
        };
        // Efficiency 5 % to 95 %, the second week a little better than the first.
        let eff = 0.05 + 0.1 * f64::from((i * 3) % 10) + if day >= 7 { 0.02 } else { 0.0 };
        let eff = eff.min(0.99);
        let mut s = job(
            1000 + i,
            user,
            uid,
            part,
            day,
            hour,
            1 + i % 8,
            0.5 + f64::from(i % 6),
            eff,
        );
        s.peak = (256 << 20) * u64::from(1 + i % 12);
        if i % 5 == 3 {
            // GPU jobs on `gpu`: some never use theirs.
            s.part = "gpu";
            s.nodes = &["g1"];
            s.gpus = 1 + i % 2;
            s.gpu_used = i % 3 != 0;
        }
        let account = match uid % 3 {
            0 => Some(BIDI_ACCOUNT),
            1 => Some("physics"),
            _ => Some("chemistry"),
        };
        v.push((s, account, None));
    }
    // Day 10 (in the window): a large GPU job on `gpu` from 10:00 to 16:00 on 32 cores, and a
    // CPU-only job starting there at 11:00 while it runs (the partition busy), under a hostile
    // name; and a CPU-only one on `gpu` at 20:00 when nothing else runs there.
    let mut big = job(2001, "alice", 1001, "gpu", 10, 10, 32, 6.0, 0.3);
    big.gpus = 4;
    big.gpu_used = false;
    big.nodes = &["g1"];
    v.push((big, Some("physics"), None));
    let hog = job(2002, SCRIPT_USER, 1004, "gpu", 10, 11, 16, 3.0, 0.9);
    v.push((hog, Some(BIDI_ACCOUNT), Some(IFRAME_NAME)));
    let quiet = job(2003, "bob", 1002, "gpu", 10, 20, 2, 1.0, 0.5);
    v.push((quiet, Some("chemistry"), None));
    v
}

/// The archive of [`jobs`], indexed.
pub(super) fn archive() -> (Fixture, Vec<Spec>) {
    let fx = fixture();
    let mut specs = Vec::new();
    for (s, account, name) in jobs() {
        let mut j = summary(&s);
        j.account = account.map(str::to_string);
        if let Some(n) = name {
            j.name = Some(n.to_string());
        }
        fx.store.write(&j).unwrap();
        specs.push(s);
    }
    fx.index().update(false).unwrap();
    (fx, specs)
}

/// The report's window: the second week.
pub(super) fn options() -> Options {
    let s = |ms: u64| (ms / 1000) as i64;
    Options {
        window: Window {
            since_unix_s: Some(s(T0_MS + 7 * DAY_MS)),
            until_unix_s: Some(s(T0_MS + 14 * DAY_MS)),
        },
        filters: Filters::default(),
        zone: Zone::Utc,
        top_n: 10,
        busy_pct: 80.0,
        generated_unix_s: s(T0_MS + 14 * DAY_MS) + 3600,
    }
}

pub(super) fn report() -> (Fixture, Vec<Spec>, Data, Page) {
    let (fx, specs) = archive();
    let d = gather(&fx.engine(), &options()).unwrap();
    let p = Page::new(&d).unwrap();
    (fx, specs, d, p)
}

fn end_ms(s: &Spec) -> u64 {
    s.start_ms + (s.elapsed_s * 1000.0) as u64
}

/// CPU efficiency over the jobs that ended in [from, to) days, from their specifications.
fn cpu_eff(specs: &[Spec], from: u64, to: u64) -> (usize, f64) {
    let inside: Vec<&Spec> = specs
        .iter()
        .filter(|s| (T0_MS + from * DAY_MS..T0_MS + to * DAY_MS).contains(&end_ms(s)))
        .collect();
    let used: f64 = inside.iter().map(|s| s.cpu_s).sum();
    let alloc: f64 = inside
        .iter()
        .map(|s| f64::from(s.cores) * s.elapsed_s)
        .sum();
    (inside.len(), 100.0 * used / alloc)
}

#[test]
fn the_summary_says_the_trend_against_the_week_before() {
    let (_fx, specs, d, page) = report();
    let (jobs, eff) = cpu_eff(&specs, 7, 14);
    let (jobs_before, eff_before) = cpu_eff(&specs, 0, 7);
    assert!(jobs > 50 && jobs_before > 50, "{jobs} {jobs_before}");
    assert_eq!(
        d.totals.rows[0][0],
        jobscope_audit::table::Value::Int(jobs as i64)
    );
    let text = page.text().unwrap();
    let want = format!(
        "CPU efficiency {eff:.1} % ({:+.1} points)",
        eff - eff_before
    );
    assert!(text.contains(&want), "{want}\n{text}");
    assert!(
        text.contains(&format!(
            "{jobs} jobs ended; {jobs_before} in the 7 days before ({:+.0} %).",
            100.0 * (jobs as f64 - jobs_before as f64) / jobs_before as f64
        )),
        "{jobs}\n{text}"
    );
    assert!(
        page.subject.starts_with(&format!(
            "jobscope cluster report: {jobs} jobs, CPU efficiency {eff:.1} %"
        )),
        "{}",
        page.subject
    );
}

#[test]
fn the_efficiency_distribution_counts_each_job_once_in_its_bucket() {
    let (_fx, specs, d, _) = report();
    // The buckets' upper edges, written out: ≤ 10, ≤ 25, ≤ 50, ≤ 75, ≤ 90, ≤ 100, above.
    let edges = [10.0, 25.0, 50.0, 75.0, 90.0, 100.0];
    let mut want = [0u64; 7];
    for s in specs
        .iter()
        .filter(|s| (T0_MS + 7 * DAY_MS..T0_MS + 14 * DAY_MS).contains(&end_ms(s)))
    {
        let e = 100.0 * s.cpu_s / (f64::from(s.cores) * s.elapsed_s);
        want[edges.iter().position(|b| e <= *b).unwrap_or(6)] += 1;
    }
    assert_eq!(d.cpu_eff.jobs, want);
    assert_eq!(d.cpu_eff.unknown, 0);
    assert_eq!(d.mem_eff.jobs.iter().sum::<u64>(), want.iter().sum::<u64>());
}

/// Every section is in the text, with its table; the heat map in characters; no control, bidi or
/// invisible character from a name; long names cut.
#[test]
fn the_text_part_has_every_section_and_no_hostile_characters() {
    let (_fx, _, d, page) = report();
    let text = page.text().unwrap();
    for title in [
        "Usage and waste per day, by partition",
        "Top wasters by user",
        "Top wasters by account",
        "CPU and memory efficiency of the jobs",
        "When the cluster is used: hour of week",
        "GPU-hours idle, by user",
        "CPU-only jobs on GPU partitions while they were busy",
    ] {
        assert!(
            text.contains(&format!(
                "\n{title}\n{}\n",
                "-".repeat(title.chars().count())
            )),
            "{title}\n{text}"
        );
    }
    assert!(
        text.contains(&jobscope_audit::render::heatmap(&d.heatmap, Zone::Utc)),
        "{text}"
    );
    assert!(
        !text
            .chars()
            .any(|c| c != '\n' && jobscope_model::text::is_hidden(c)),
        "{text:?}"
    );
    // Names are shown as typed (it is text), cut.
    assert!(text.contains("<script>document.title="), "{text}");
    assert!(text.contains("mallorygnp.exe"), "{text}");
    assert!(!text.contains(&"x".repeat(60)), "{text}");
    // The busy CPU-only job is listed, under its name.
    assert!(
        text.contains("<iframe src=\"/iframe-evil\"></iframe>"),
        "{text}"
    );
    // Days of the window, a column each (the chart's table: by day).
    for day in 9..=15 {
        assert!(text.contains(&format!("2026-03-{day:02}")), "{day}\n{text}");
    }
}

/// The mail: multipart/alternative of the text and a multipart/related of the HTML with every
/// chart as an inline PNG it names by `cid:`.
#[test]
fn the_mail_is_text_and_html_with_inline_charts() {
    let (_fx, _, d, page) = report();
    let from =
        jobscope_deliver::mail::message::parse_address("jobscope@cluster.example.org").unwrap();
    let to = vec![
        jobscope_deliver::mail::message::parse_address("hpc-admins@example.org").unwrap(),
        jobscope_deliver::mail::message::parse_address("boss@example.org").unwrap(),
    ];
    let id = mail_id(&d);
    assert!(jobscope_common::fsutil::is_safe_name(&id), "{id}");
    let mail = page.mail(&id, &from, &to).unwrap();
    let raw = mail.message.formatted();
    let m = MessageParser::default().parse(&raw).expect("parses");
    assert_eq!(m.content_type().unwrap().subtype(), Some("alternative"));
    let parts: Vec<String> = m
        .parts
        .iter()
        .map(|p| {
            let ct = p.content_type().unwrap();
            format!("{}/{}", ct.ctype(), ct.subtype().unwrap_or(""))
        })
        .collect();
    let charts = page.charts.len();
    assert_eq!(charts, 7, "every section has its chart");
    // alternative, text, related, html, the charts.
    let mut want = vec![
        "multipart/alternative".to_string(),
        "text/plain".into(),
        "multipart/related".into(),
        "text/html".into(),
    ];
    want.extend(std::iter::repeat_n("image/png".to_string(), charts));
    assert_eq!(parts, want);
    assert_eq!(
        m.body_text(0).unwrap().replace("\r\n", "\n"),
        page.text().unwrap()
    );
    let html = m.body_html(0).unwrap();
    assert!(
        !html.contains("data:image"),
        "the mail names its pictures by cid"
    );
    let imgs: Vec<_> = m.attachments().collect();
    assert_eq!(imgs.len(), charts);
    assert_eq!(html.matches("<img ").count(), charts);
    for p in imgs {
        let cid = p.content_id().expect("Content-ID");
        assert!(html.contains(&format!("src=\"cid:{cid}\"")), "{cid}");
        let (w, _, rgb) = decode_png(p.contents());
        assert_eq!(w, 900);
        assert!(busy_share(&rgb) > 0.02, "{cid} is nearly blank");
    }
    assert_eq!(m.to().unwrap().iter().count(), 2);
    assert!(m
        .subject()
        .unwrap()
        .starts_with("jobscope cluster report: "));
    // Queued once per window and scope.
    let dir = tempfile::tempdir().unwrap();
    let q = jobscope_deliver::mail::queue::Queue::open(dir.path()).unwrap();
    use jobscope_deliver::mail::queue::Enqueued;
    assert_eq!(q.enqueue_mail(&mail).unwrap(), Enqueued::Queued);
    assert_eq!(q.enqueue_mail(&mail).unwrap(), Enqueued::AlreadyQueued);
}

/// A scope: only the account's jobs, and the page says which.
#[test]
fn an_account_scope_counts_only_its_jobs() {
    let (fx, specs) = archive();
    let mut o = options();
    o.filters.accounts = vec!["physics".into()];
    let d = gather(&fx.engine(), &o).unwrap();
    let physics = jobs()
        .iter()
        .zip(&specs)
        .filter(|((_, a, _), s)| {
            *a == Some("physics") && (T0_MS + 7 * DAY_MS..T0_MS + 14 * DAY_MS).contains(&end_ms(s))
        })
        .count();
    assert_eq!(
        d.totals.rows[0][0],
        jobscope_audit::table::Value::Int(physics as i64)
    );
    let page = Page::new(&d).unwrap();
    assert!(page
        .text()
        .unwrap()
        .starts_with("jobscope cluster report: account physics\n"));
    assert_ne!(mail_id(&d), mail_id(&report().2));
}

/// (width, height, RGB pixels) of a PNG.
pub(super) fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<[u8; 3]>) {
    let mut r = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("a PNG header");
    let mut buf = vec![0; r.output_buffer_size().expect("size")];
    let info = r.next_frame(&mut buf).expect("a frame");
    let px = info.color_type.samples();
    let mut out = Vec::with_capacity((info.width * info.height) as usize);
    for row in buf[..info.buffer_size()].chunks(info.line_size) {
        for p in row.chunks(px).take(info.width as usize) {
            out.push(if px >= 3 {
                [p[0], p[1], p[2]]
            } else {
                [p[0], p[0], p[0]]
            });
        }
    }
    (info.width, info.height, out)
}

/// The share of pixels that are not white.
pub(super) fn busy_share(px: &[[u8; 3]]) -> f64 {
    px.iter().filter(|p| **p != [255, 255, 255]).count() as f64 / px.len().max(1) as f64
}

/// Writes the report of the fixture to $JOBSCOPE_CLUSTER_REPORT_OUT (report.txt, report.html):
/// to look at, not a check.
#[test]
fn write_the_report_for_a_look() {
    let Some(dir) = std::env::var_os("JOBSCOPE_CLUSTER_REPORT_OUT") else {
        return;
    };
    let t0 = std::time::Instant::now();
    let (fx, _) = archive();
    let t1 = t0.elapsed();
    let d = gather(&fx.engine(), &options()).unwrap();
    let t2 = t0.elapsed();
    let page = Page::new(&d).unwrap();
    let t3 = t0.elapsed();
    let dir = std::path::Path::new(&dir);
    std::fs::write(dir.join("report.txt"), page.text().unwrap()).unwrap();
    std::fs::write(dir.join("report.html"), page.html().unwrap()).unwrap();
    for c in &page.charts {
        std::fs::write(dir.join(format!("{}.png", c.key)), &c.png).unwrap();
    }
    // The archive and its index, for `jobscope audit report` itself.
    let archive = fx.settings.dir.parent().unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(archive)
        .arg(dir.join("archive"))
        .status()
        .unwrap();
    assert!(copied.success());
    eprintln!(
        "archive+index {t1:?}, gather {:?}, page {:?}",
        t2 - t1,
        t3 - t2
    );
}

/// The report of `n` jobs over the fixture's second week (one day each, spread over users,
/// partitions and efficiencies); `n` = 1 is a cluster's first week.
fn report_of(n: u32) -> (Fixture, Data, Page) {
    let fx = fixture();
    let users: [(&'static str, u32); 4] = [
        ("alice", 1001),
        ("bob", 1002),
        ("carol", 1003),
        ("dave", 1004),
    ];
    for i in 0..n {
        let (user, uid) = users[(i % 4) as usize];
        let part = ["cpu", "debug", "gpu"][(i % 3) as usize];
        let eff = 0.05 + 0.9 * f64::from(i % 19) / 18.0;
        let mut s = job(
            10_000 + i,
            user,
            uid,
            part,
            7 + u64::from(i % 7),
            u64::from(i % 20),
            1 + i % 16,
            0.25 + f64::from(i % 5),
            eff,
        );
        if part == "gpu" {
            s.nodes = &["g1"];
            s.gpus = 1;
            s.gpu_used = i % 2 == 0;
        }
        let mut j = summary(&s);
        j.account = Some(["physics", "chemistry"][(i % 2) as usize].to_string());
        fx.store.write(&j).unwrap();
    }
    fx.index().update(false).unwrap();
    let d = gather(&fx.engine(), &options()).unwrap();
    let p = Page::new(&d).unwrap();
    (fx, d, p)
}

/// The headers of every table of the page (`<th>`), and of the text part (the line above each
/// rule of dashes).
fn headers(page: &Page) -> Vec<String> {
    let html = page.html().unwrap();
    let mut v: Vec<String> = html
        .split("<th")
        .skip(1)
        .filter_map(|s| Some(s.split_once('>')?.1.split_once("</th>")?.0.to_string()))
        .collect();
    let text = page.text().unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for w in lines.windows(2) {
        if w[1].starts_with("--") && w[1].contains("  -") {
            v.push(w[0].to_string());
        }
    }
    v
}

/// A cluster's first week, one job: the words agree with the count ("1 job ended", not "1
/// jobs"), every chart draws, and every table has headers for people.
#[test]
fn one_job_reads_right() {
    let (_fx, d, page) = report_of(1);
    assert_eq!(d.totals.rows[0][0], jobscope_audit::table::Value::Int(1));
    let text = page.text().unwrap();
    assert!(
        text.contains("1 job ended; 0 in the 7 days before"),
        "{text}"
    );
    assert!(!text.contains("1 jobs"), "{text}");
    assert!(
        page.subject.contains(": 1 job, CPU efficiency"),
        "{}",
        page.subject
    );
    for c in &page.charts {
        let (_, _, px) = decode_png(&c.png);
        assert!(busy_share(&px) > 0.01, "{} is nearly blank", c.key);
    }
    for h in headers(&page) {
        assert!(!h.contains('_'), "a raw column name in a header: {h}");
    }
}

/// Every table of the fixture's page and text has headers for people, not column names
/// (`jobs_by_cpu_eff`), and no sentence names a column.
#[test]
fn every_table_header_is_for_people() {
    let (_fx, _, _, page) = report();
    let hs = headers(&page);
    assert!(hs.len() > 20, "{hs:?}");
    for h in &hs {
        assert!(!h.contains('_'), "a raw column name in a header: {h}");
    }
    let text = page.text().unwrap();
    for raw in [
        "jobs_by_",
        "gpu_hours_wasted",
        "busiest_hour",
        "jobs_with_idle",
    ] {
        assert!(!text.contains(raw), "{raw} in\n{text}");
    }
}

/// Writes the reports of 1 and of $JOBSCOPE_CLUSTER_REPORT_JOBS jobs (default 10 000) to
/// $JOBSCOPE_CLUSTER_REPORT_OUT/jobs-N/ (report.txt, report.html, the charts): to look at, not a
/// check.
#[test]
fn write_small_and_large_reports_for_a_look() {
    let Some(dir) = std::env::var_os("JOBSCOPE_CLUSTER_REPORT_OUT") else {
        return;
    };
    let many: u32 = std::env::var("JOBSCOPE_CLUSTER_REPORT_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    for n in [1, many] {
        let (_fx, _, page) = report_of(n);
        let out = std::path::Path::new(&dir).join(format!("jobs-{n}"));
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("report.txt"), page.text().unwrap()).unwrap();
        std::fs::write(out.join("report.html"), page.html().unwrap()).unwrap();
        for c in &page.charts {
            std::fs::write(out.join(format!("{}.png", c.key)), &c.png).unwrap();
        }
    }
}

// The daily chart's phases, each on its own (over tables written here, not gathered).

fn day_table(rows: &[(&str, Option<&str>, f64, f64, f64)]) -> Table {
    use jobscope_audit::table::{ColType, Column, Unit, Value};
    let mut t = Table::new(vec![
        Column::new("day", ColType::Text, Unit::None),
        Column::new("partition", ColType::Text, Unit::None),
        Column::new("core_hours_alloc", ColType::Float, Unit::Hours),
        Column::new("core_hours_used", ColType::Float, Unit::Hours),
        Column::new("core_hours_wasted", ColType::Float, Unit::Hours),
    ]);
    for (day, part, alloc, used, wasted) in rows {
        t.rows.push(vec![
            Value::Text(day.to_string()),
            part.map_or(Value::Null, |p| Value::Text(p.into())),
            Value::Float(*alloc),
            Value::Float(*used),
            Value::Float(*wasted),
        ]);
    }
    t
}

#[test]
fn the_daily_columns_put_jobs_started_before_the_window_in_front() {
    use super::page::Slots;
    let cats = vec!["2026-03-09".to_string(), "2026-03-10".to_string()];
    let by_day = day_table(&[
        ("2026-03-07", None, 1.0, 1.0, 0.0),
        ("2026-03-10", None, 1.0, 1.0, 0.0),
    ]);
    let s = Slots::new(cats.clone(), &by_day, "day");
    assert!(s.earlier);
    assert_eq!(s.labels(false), ["earlier", "03-09", "03-10"]);
    assert_eq!(s.of("2026-03-01"), Some(0));
    assert_eq!(s.of("2026-03-09"), Some(1));
    assert_eq!(s.of("2026-03-10"), Some(2));
    assert_eq!(s.of("2026-03-11"), None);
    // No job before the first day: no "earlier" column; months keep their year.
    let s = Slots::new(
        cats,
        &day_table(&[("2026-03-09", None, 1.0, 1.0, 0.0)]),
        "day",
    );
    assert!(!s.earlier);
    assert_eq!(s.of("2026-03-09"), Some(0));
    assert_eq!(s.labels(true), ["2026-03-09", "2026-03-10"]);
}

#[test]
fn the_daily_series_are_the_largest_partitions_then_other() {
    use super::page::{Series, Slots};
    // Nine partitions: p1..p9 allocated 1..9 core-hours; p8 and p9 tie with a and b at the top.
    let names = [
        "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "b", "a",
    ];
    let allocs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 9.0, 9.0, 9.0, 9.0];
    let rows: Vec<(&str, Option<&str>, f64, f64, f64)> = names
        .iter()
        .zip(allocs)
        .map(|(n, a)| ("2026-03-09", Some(*n), a, a / 2.0, a / 2.0))
        .collect();
    let s = Series::of(&day_table(&rows));
    let shown: Vec<&str> = s.shown.iter().map(|p| p.as_deref().unwrap()).collect();
    assert_eq!(shown, ["a", "b", "p8", "p9", "p7", "p6", "p5"]);
    assert!(s.other);
    let slots = Slots::new(vec!["2026-03-09".into()], &day_table(&[]), "day");
    let segs = s.stack(&day_table(&rows), "day", &slots);
    // A solid (used) and a pale (unused) segment per series, "other" last with p1..p4's figures.
    assert_eq!(segs.len(), 16);
    assert_eq!(segs[0].label.as_deref(), Some("a"));
    assert_eq!(segs[0].values, [4.5]);
    assert!(segs[1].label.is_none() && segs[1].shade.pale);
    assert_eq!(segs[14].label.as_deref(), Some("other"));
    assert_eq!(segs[14].values, [(1.0 + 2.0 + 3.0 + 4.0) / 2.0]);
    assert_eq!(segs[15].values, [5.0]);
}
