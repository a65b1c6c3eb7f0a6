//! The presenter's promises, tested on whole renderings: the text and HTML views agree on every
//! figure, and untrusted text is clean in every view.

use crate::mail::message::{build_mail, parse_address, tests::opts, tests::summary, DIGEST_KIND};
use jobscope_model::job::JobState;
use jobscope_model::params::Report as Thresholds;
use jobscope_model::summary::analysis::analyze;
use jobscope_model::summary::JobSummary;
use jobscope_report::present::*;
use mail_parser::MessageParser;
use regex::Regex;

/// A summary with analysis, findings, advice, a time limit and GPU-hours, so every labelled figure
/// of the report is present.
fn analysed() -> JobSummary {
    let mut s = summary();
    s.alloc.time_limit_s = Some(86_400);
    s.efficiency.time_pct = Some(100.0 * s.elapsed_s / 86_400.0);
    s.nodes[0].mem.oom_kill_events = Some(0);
    s.mem.oom_kill_events = Some(0);
    s.io.read_bytes = Some(3 << 30);
    s.io.write_bytes = Some(1 << 20);
    s.io.peak_bytes_per_s = Some(12e6);
    s.io.source = Some("proc".into());
    let mut a = analyze(&s, &Thresholds::default());
    // GPU-hours at a scale where rounding used to lie ("0.002 unused of 0.002").
    a.waste.gpu_hours_allocated = Some(0.0030);
    a.waste.gpu_hours_wasted = Some(0.0021);
    s.analysis = Some(a);
    s
}

/// `html` as text: tags become line breaks or spaces, entities decoded, lines trimmed.
fn html_text(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    let mut tag = String::new();
    for c in html.chars() {
        match (in_tag, c) {
            (false, '<') => {
                in_tag = true;
                tag.clear();
            }
            (true, '>') => {
                in_tag = false;
                let name = tag
                    .trim_start_matches('/')
                    .split_whitespace()
                    .next()
                    .unwrap_or("");
                out.push(
                    if matches!(name, "p" | "tr" | "li" | "h2" | "h3" | "br" | "div" | "pre") {
                        '\n'
                    } else {
                        ' '
                    },
                );
            }
            (true, c) => tag.push(c),
            (false, c) => out.push(c),
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#x27;", "'")
        .replace("&#x3D;", "=")
        .replace("&amp;", "&")
}

/// Each line with its runs of whitespace collapsed to one space.
fn lines(s: &str) -> Vec<String> {
    s.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect()
}

/// Every match of `re` over `lines`, as the tuple of its capture groups.
fn figures(re: &Regex, lines: &[String]) -> Vec<Vec<String>> {
    lines
        .iter()
        .flat_map(|l| re.captures_iter(l).collect::<Vec<_>>())
        .map(|c| {
            c.iter()
                .skip(1)
                .map(|m| m.map_or(String::new(), |m| m.as_str().to_string()))
                .collect()
        })
        .collect()
}

#[test]
fn text_and_html_agree_on_every_figure() {
    let s = analysed();
    let view = job_view(&s);
    let t = Templates::builtin();
    let text = lines(&t.render_text(&view).unwrap());
    let html = lines(&html_text(&t.render_html(&view, &mut vec![]).unwrap()));
    // (figure, pattern in the text report, pattern in the HTML); the groups are the figures.
    let labelled: &[(&str, &str, &str)] = &[
        (
            "CPU %",
            r"([\d.]+ %) of allocated core-time",
            r"([\d.]+ %) of allocated core-time",
        ),
        (
            "memory %",
            r"([\d.]+ %) of the request",
            r"([\d.]+ %) of the request",
        ),
        (
            "memory peak",
            r"^Peak (n/a|\S+ \S+) \(",
            r"^Memory peak (n/a|\S+ \S+) \(rss",
        ),
        (
            "memory parts",
            r"^of which rss (n/a|\S+ \S+) \(|^page cache (n/a|\S+ \S+) \(file|^shmem/tmpfs (n/a|\S+ \S+) \(",
            r"\(rss (n/a|\S+ \S+), page cache (n/a|\S+ \S+), shmem (n/a|\S+ \S+)\)",
        ),
        (
            "CPU time",
            r"^CPU time (.+) \(user (.+), system (.+)\)$",
            r"^CPU time (.+) \(user (.+), system (.+)\) ",
        ),
        (
            "elapsed and time limit",
            r"^Elapsed: (\S+) \((of a \S+ limit|no time limit)\)",
            r"^after (\S+) \((of a \S+ limit|no time limit)\)$",
        ),
        (
            "time used",
            r"Time used: ([\d.]+ %|n/a)$",
            r"([\d.]+ %|n/a) used$",
        ),
        (
            "allocation",
            r"(\d+) nodes?, (\S+) cores?, (.+) memory per node, GPUs: (.+)$",
            r"(\d+) nodes?, (\S+) cores?, (.+) memory per node, GPUs: (.+)$",
        ),
        (
            "resource-hours",
            r"^(Core-hours|Memory GB-hours|GPU-hours) (\S+) unused of (\S+) allocated \((.+) unused\)$",
            r"^(Core-hours|Memory GB-hours|GPU-hours) (\S+) unused of (\S+) allocated \((.+) unused\)$",
        ),
        ("OOM kills", r"^OOM kills (\S+)$", r"^OOM kills (\S+)$"),
        (
            "I/O",
            r"^Read (.+), written (.+), peak (.+)$",
            r"read (.+), written (.+), peak (.+)$",
        ),
        ("class", r"^Class (.+)$", r"^Class: (.+)$"),
        ("verdict", r"^Verdict (.+)$", r"^Verdict: (.+)$"),
        (
            "nodes",
            r"^(\S+): (\S+) cores?, CPU (.+) \((\S+ %)\), mem peak (\S+ \S+), (\d+) samples?$",
            r"^(\S+) : (\S+) cores?, CPU (.+) \((\S+ %)\), memory peak (\S+ \S+), (\d+) samples?$",
        ),
        (
            "steps",
            r"^(\S+): (\S+), CPU (.+), mem peak (\S+ \S+), exit (\S+)$",
            r"^(\S+) (\S+) (.+) (\S+ \S+) (\d+)$",
        ),
        ("advice", r"^(#SBATCH \S+)$", r"^(#SBATCH \S+)$"),
        ("advice reasons", r"^# (.+)$", r"^# (.+)$"),
        ("samples", r"^Samples: (\d+)$", r"^(\d+) samples?\. Sent by"),
    ];
    for (what, t_re, h_re) in labelled {
        let (t_re, h_re) = (Regex::new(t_re).unwrap(), Regex::new(h_re).unwrap());
        let mut from_text = figures(&t_re, &text);
        let mut from_html = figures(&h_re, &html);
        // The memory parts are on three lines of the text and one of the HTML.
        if *what == "memory parts" {
            let parts: Vec<String> = from_text
                .concat()
                .into_iter()
                .filter(|x| !x.is_empty())
                .collect();
            from_text = vec![parts];
        }
        if *what == "steps" {
            // The HTML's step table has a header row; the text names none.
            from_html.retain(|r| r[0] != "Step");
        }
        from_text.dedup();
        from_html.dedup();
        assert!(
            !from_text.is_empty(),
            "{what}: not in the text report:\n{}",
            text.join("\n")
        );
        assert!(
            !from_html.is_empty(),
            "{what}: not in the HTML:\n{}",
            html.join("\n")
        );
        assert_eq!(from_text, from_html, "{what} differs between text and HTML");
    }
    // The figures are the summary's (a check of the extraction, not of the views' agreement).
    let all = text.join("\n");
    // 8 cores × 3.2 h = 25.6 core-hours, 41 472 CPU-s = 11.52 used: 14.08 unused, 55 %.
    assert!(
        all.contains("Core-hours 14.1 unused of 25.6 allocated (55 % unused)"),
        "{all}"
    );
    assert!(
        all.contains("GPU-hours 0.0021 unused of 0.0030 allocated (70 % unused)"),
        "{all}"
    );
    assert!(
        all.contains("Elapsed: 3h12m00s (of a 1-00:00:00 limit)"),
        "{all}"
    );
}

const HOSTILE: &str =
    "x\u{202E}gnp.exe\u{2066}y\u{2069}\r\nBcc: evil@example.com\x1b[31mred\u{200B}\u{FEFF}z";

/// No hidden character (control, bidi, invisible) but line breaks, no line injected by the name.
fn assert_clean(what: &str, s: &str) {
    let bad: Vec<String> = s
        .chars()
        .filter(|&c| c != '\n' && jobscope_model::text::is_hidden(c))
        .map(|c| format!("U+{:04X}", c as u32))
        .collect();
    assert!(bad.is_empty(), "{what}: hidden characters {bad:?} in:\n{s}");
    assert!(
        !s.lines().any(|l| l.trim_start().starts_with("Bcc:")),
        "{what}: a line injected by the name:\n{s}"
    );
    assert!(
        s.contains("xgnp.exeyBcc: evil@example.com[31mredz"),
        "{what}: the cleaned name is not shown:\n{s}"
    );
}

fn hostile() -> JobSummary {
    let mut s = analysed();
    s.name = Some(HOSTILE.into());
    s.user = Some(HOSTILE.into());
    s.account = Some(HOSTILE.into());
    s.partition = Some(HOSTILE.into());
    s.partial = true;
    s.partial_reasons = vec![HOSTILE.into()];
    s.nodes[0].node = HOSTILE.into();
    s.nodes[0].steps[0].step = HOSTILE.into();
    s.nodes[0].quality.notes = vec![HOSTILE.into()];
    s
}

#[test]
fn a_hostile_name_is_clean_in_every_view() {
    let s = hostile();
    // `jobscope show` (with and without colour) and the text part / work-directory report.
    let plain = render_text(&s, false).unwrap();
    assert_clean("text report", &plain);
    let colored = render_text(&s, true).unwrap();
    let ours = colored
        .replace("\x1b[1m", "")
        .replace("\x1b[0m", "")
        .replace("\x1b[31m", "");
    assert_clean("jobscope show (colour)", &ours);

    // The mail: subject (decoded), text part, HTML part.
    let to = parse_address("alice@example.org").unwrap();
    let mail = build_mail(&s, &job_view(&s), &to, "end", &opts(), Templates::builtin()).unwrap();
    let raw = mail.message.formatted();
    let m = MessageParser::default().parse(&raw).unwrap();
    let subject = m.subject().unwrap();
    assert!(
        subject.starts_with("Job 1234 (xgnp.exeyBcc: evil@example.com[31mredz"),
        "{subject}"
    );
    assert!(
        !subject.chars().any(jobscope_model::text::is_hidden),
        "{subject:?}"
    );
    let text_part = m.body_text(0).unwrap().replace("\r\n", "\n");
    assert_eq!(text_part, plain, "the mail's text part is the text report");
    let html = m.body_html(0).unwrap().replace("\r\n", "\n");
    assert_clean("HTML part", &html_text(&html));

    // The array digest, text and HTML, and its subject.
    let rows = vec![ArrayRow {
        task_id: 1,
        job_id: 1235,
        state: JobState::Completed,
        elapsed_s: 61.0,
        cpu_pct: Some(50.0),
        mem_peak_bytes: Some(1 << 20),
        mem_pct: Some(10.0),
    }];
    let view = digest_view(&s, 1234, Some(HOSTILE), &rows);
    let t = Templates::builtin();
    assert_clean("digest text", &t.render_text(&view).unwrap());
    assert_clean(
        "digest HTML",
        &html_text(&t.render_html(&view, &mut vec![]).unwrap()),
    );
    let mail = build_mail(&s, &view, &to, DIGEST_KIND, &opts(), t).unwrap();
    let raw = mail.message.formatted();
    let m = MessageParser::default().parse(&raw).unwrap();
    assert!(!m
        .subject()
        .unwrap()
        .chars()
        .any(jobscope_model::text::is_hidden));
}

#[test]
fn no_samples_claims_nothing() {
    let mut s = summary();
    s.samples = 0;
    for n in &mut s.nodes {
        n.timeline.clear();
        n.quality.samples = 0;
    }
    s.analysis = Some(analyze(&s, &Thresholds::default()));
    let text = render_text(&s, false).unwrap();
    assert!(text.contains("No samples: jobscope has no data"), "{text}");
    assert!(text.contains("No advice: there are no samples"), "{text}");
    assert!(!text.contains("used its request well"), "{text}");
    assert!(
        text.contains("Class              unknown (no samples)"),
        "{text}"
    );
    assert!(!text.contains("Verdict"), "{text}");
}

#[test]
fn a_short_job_says_why_it_gets_no_advice() {
    let mut s = summary();
    s.elapsed_s = 35.0;
    s.alloc.time_limit_s = Some(60);
    s.analysis = Some(analyze(&s, &Thresholds::default()));
    let text = render_text(&s, false).unwrap();
    assert!(!text.contains("used its request well"), "{text}");
    let a = s.analysis.as_ref().unwrap();
    if a.advice.is_empty() {
        assert!(
            text.contains(
                "No advice: the job ran 35.0 s, under the 1m00s needed to judge its use."
            ),
            "{text}"
        );
    } else {
        assert!(
            text.contains("judged only from 1m00s on; the job ran 35.0 s"),
            "{text}"
        );
    }
}

#[test]
fn a_timeout_is_told_its_real_limit() {
    let mut s = summary();
    s.state = JobState::Timeout;
    s.alloc.time_limit_s = Some(60);
    s.elapsed_s = 60.0;
    s.analysis = Some(analyze(&s, &Thresholds::default()));
    let text = render_text(&s, false).unwrap();
    assert!(text.contains("#SBATCH --time=00:05:00"), "{text}");
    assert!(
        text.contains("the job hit its 00:01:00 limit before finishing"),
        "{text}"
    );
}

#[test]
fn a_one_core_job_is_not_called_parallel() {
    let mut s = summary();
    s.alloc.cores = Some(1);
    s.alloc.nodes = 1;
    s.nodes.truncate(1);
    s.nodes[0].alloc_cores = Some(1);
    for p in &mut s.nodes[0].timeline {
        p.busy_cores = Some(1.0);
        p.busy_cores_max = Some(1.0);
    }
    s.analysis = Some(analyze(&s, &Thresholds::default()));
    let text = render_text(&s, false).unwrap();
    assert!(
        text.contains("Verdict            single core: used 1.0 of 1 core on average"),
        "{text}"
    );
    assert!(!text.contains("parallel"), "{text}");
}

#[test]
fn histogram_counts_everything() {
    let h = histogram(&[1.0, 2.0, 2.5, 10.0], 3, &|v| format!("{v:.1}"));
    assert_eq!(h.iter().map(|r| r.count).collect::<Vec<_>>(), vec![3, 0, 1]);
    assert_eq!((h[0].from.as_str(), h[2].to.as_str()), ("1.0", "10.0"));
}

/// Pressure on cgroup v2: a "Stalls" line in text and HTML and a finding in the same words; on v1
/// (no pressure figures) neither, and no throttling line.
#[test]
fn stalls_are_reported_on_v2_and_absent_on_v1() {
    let t = Templates::builtin();
    let mut v1 = summary();
    v1.analysis = Some(analyze(&v1, &Thresholds::default()));
    let text = render_text(&v1, false).unwrap();
    let html = html_text(&t.render_html(&job_view(&v1), &mut vec![]).unwrap());
    for view in [&text, &html] {
        assert!(
            !view.contains("Stalls") && !view.contains("stalled"),
            "{view}"
        );
        assert!(!view.contains("Throttled"), "{view}");
    }

    let mut v2 = summary();
    let p = jobscope_model::summary::Pressure {
        window_s: 3600.0,
        cpu_some_pct: Some(2.0),
        mem_some_pct: Some(0.5),
        mem_full_pct: Some(0.1),
        io_some_pct: Some(41.0),
    };
    v2.nodes[0].pressure = Some(p.clone());
    v2.pressure = Some(p);
    v2.cpu.throttled_s = Some(3.25);
    v2.cpu.throttled_periods = Some(120);
    v2.analysis = Some(analyze(&v2, &Thresholds::default()));
    let text = render_text(&v2, false).unwrap();
    let html = html_text(&t.render_html(&job_view(&v2), &mut vec![]).unwrap());
    let node = &v2.nodes[0].node;
    for view in [&text, &html] {
        assert!(
            view.contains("stalled on CPU 2.0 %, memory 0.5 % (all tasks at once 0.1 %), I/O 41.0 % of the time (over 1h00m00s)"),
            "{view}"
        );
        assert!(
            view.contains(&format!("node {node}: stalled on I/O 41 % of the time")),
            "{view}"
        );
        assert!(
            !view.contains("stalled on CPU 2 %"),
            "under the threshold: {view}"
        );
        assert!(view.contains("3.2 s in 120 quota period(s)"), "{view}");
    }
}

/// A GPU summary as the archive holds it, with `extra` fields set.
fn gpu_summary(extra: serde_json::Value) -> jobscope_model::gpu::GpuSummary {
    let mut v = serde_json::json!({
        "node": "gpu01", "slot": 0, "gres_index": 1, "samples": 40,
        "util_mean_pct": 75.0, "util_max_pct": 100.0,
        "utilization_unknown": false, "other_processes_seen": false, "energy_estimated": false,
        "idle_periods": [], "observed_s": 1200.0, "never_used": false,
        "gpu_hours_allocated": 0.33, "throttle_reasons": [], "lost": false, "findings": []
    });
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    serde_json::from_value(v).expect("a GPU summary")
}

#[test]
fn a_shared_gpu_shows_the_device_and_the_jobs_share() {
    let shared = gpu_summary(serde_json::json!({
        "util_source": "driver_buffer", "other_processes_seen": true,
        "job_util_mean_pct": 50.0, "job_util_max_pct": 100.0}));
    assert_eq!(
        words::gpu_util(&shared),
        "device mean 75.0 %, max 100.0 %; this job's share mean 50.0 %, max 100.0 % \
         (other processes used this GPU too)"
    );
    // Alone on its GPU: one figure (the job's share is the device's).
    let alone = gpu_summary(serde_json::json!({
        "util_source": "driver_buffer", "job_util_mean_pct": 75.0, "job_util_max_pct": 100.0}));
    assert_eq!(words::gpu_util(&alone), "mean 75.0 %, max 100.0 %");
    // Without the buffer: said, next to the data note.
    let point = gpu_summary(serde_json::json!({"util_source": "point_reads"}));
    assert_eq!(
        words::gpu_util(&point),
        "mean 75.0 %, max 100.0 % (point reads)"
    );
    // An archive from before the buffer (no source): as it was.
    assert_eq!(
        words::gpu_util(&gpu_summary(serde_json::json!({}))),
        "mean 75.0 %, max 100.0 %"
    );
}
