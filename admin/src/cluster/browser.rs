//! The cluster report's page in a real browser: headless Chromium (Debian's `chromium`) loads it
//! from a loopback HTTP server of the test's own that logs every request, with every other host
//! unresolvable and every other connection sent to a proxy that is not there. Checks:
//!
//! - every chart drew: a screenshot of the page (each picture outlined in magenta by one added
//!   CSS rule, so the test can find it) shows, inside each outline, the chart's own pixels and
//!   not a blank or broken picture; and each `data:` picture of the page decodes to a chart;
//! - nothing was fetched: the server saw one request, for the page, and the page names no
//!   resource but `data:` URIs (no `src`, `href` or `url()` elsewhere, no script);
//! - hostile names are inert: the DOM Chromium built has only the report's own elements (no
//!   script, iframe, style or image from a name), the title no script changed, the names as
//!   escaped text, without bidi overrides.
//!
//! Without `chromium` the test says so loudly and passes, unless JOBSCOPE_REQUIRE_CHROMIUM is set
//! (CI sets it): then a missing browser fails it. $JOBSCOPE_CLUSTER_REPORT_OUT keeps the page and
//! its screenshots.

use super::tests::{
    busy_share, decode_png, report, BIDI_ACCOUNT, BIDI_USER, IFRAME_NAME, IMG_USER, SCRIPT_USER,
    STYLE_PARTITION,
};
use base64::Engine as _;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const REQUIRE: &str = "JOBSCOPE_REQUIRE_CHROMIUM";
/// The browser's window: wider than the page's column (so charts show at their own size) and
/// taller than the whole page (so one screenshot has every chart).
const WINDOW: (u32, u32) = (1000, 7000);
const MAGENTA: [u8; 3] = [255, 0, 255];
/// The outline's width in pixels (the rule the test adds).
const OUTLINE: usize = 3;

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file())
}

/// Serves `pages` (path → HTML) on 127.0.0.1 and logs every request's target.
fn serve(pages: Vec<(&'static str, String)>) -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    let pages = Arc::new(pages);
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let (seen, pages) = (seen.clone(), pages.clone());
            // A connection each: the browser opens spare ones it may never send a request on.
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut first = String::new();
                if r.read_line(&mut first).is_err() || first.trim().is_empty() {
                    return;
                }
                // The rest of the head.
                let mut line = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let target = first
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or(&first)
                    .to_string();
                seen.lock().unwrap().push(target.clone());
                let (status, body) = match pages.iter().find(|(p, _)| *p == target) {
                    Some((_, b)) => ("200 OK", b.clone()),
                    None => ("404 Not Found", String::new()),
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    (port, log)
}

/// Runs headless Chromium on `url` with `extra` arguments, its profile and home in `dir`;
/// returns its standard output.
fn run_chromium(bin: &Path, dir: &Path, extra: &[String], url: &str) -> String {
    let profile = dir.join("profile");
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-sync",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-default-apps",
            "--mute-audio",
            // Loopback only: no other name resolves, and any other connection goes to a proxy
            // nobody listens on (Chromium never proxies loopback).
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            "--proxy-server=http://127.0.0.1:9",
            "--force-device-scale-factor=1",
            "--force-color-profile=srgb",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    // Read the output on threads, so a full pipe never stalls the browser.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish within 180 s: {}",
                err.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.success(), "chromium: {status}\n{err}");
    out
}

/// The values of every `src`, `href` and `url(` in `html`, entities decoded.
fn references(html: &str) -> Vec<String> {
    let mut v = Vec::new();
    for attr in ["src=\"", "href=\"", "src='", "href='"] {
        let quote = attr.chars().last().unwrap();
        let mut rest = html;
        while let Some(i) = rest.find(attr) {
            rest = &rest[i + attr.len()..];
            let end = rest.find(quote).unwrap_or(rest.len());
            v.push(rest[..end].replace("&#x3D;", "=").replace("&amp;", "&"));
        }
    }
    let mut rest = html;
    while let Some(i) = rest.find("url(") {
        rest = &rest[i + 4..];
        v.push(format!("url({}", &rest[..rest.len().min(40)]));
    }
    v
}

/// Start tags of a serialized DOM: (name, the whole tag). Text is serialized with `<` escaped,
/// so every `<` followed by a letter opens a real element.
fn start_tags(dom: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    let mut rest = dom;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        if !rest.starts_with(|c: char| c.is_ascii_alphabetic()) {
            continue;
        }
        let end = rest.find('>').unwrap_or(rest.len());
        let tag = &rest[..end];
        let name = tag
            .split(|c: char| c.is_whitespace() || c == '/')
            .next()
            .unwrap()
            .to_ascii_lowercase();
        v.push((name, tag.to_string()));
    }
    v
}

/// Bands of consecutive rows that hold a magenta run at least as wide as a chart: the top and
/// bottom edges of the outlines, in order. Each band: (first row, last row, first column, last
/// column).
fn outline_edges(w: usize, px: &[[u8; 3]], min_run: usize) -> Vec<(usize, usize, usize, usize)> {
    let mut bands: Vec<(usize, usize, usize, usize)> = Vec::new();
    for (y, row) in px.chunks(w).enumerate() {
        let mut best: Option<(usize, usize)> = None;
        let mut x = 0;
        while x < w {
            if row[x] == MAGENTA {
                let start = x;
                while x < w && row[x] == MAGENTA {
                    x += 1;
                }
                if x - start >= min_run {
                    best = Some((start, x - 1));
                }
            } else {
                x += 1;
            }
        }
        if let Some((x0, x1)) = best {
            match bands.last_mut() {
                Some(b) if b.1 + 1 == y && b.2 == x0 && b.3 == x1 => b.1 = y,
                _ => bands.push((y, y, x0, x1)),
            }
        }
    }
    bands
}

#[test]
fn the_page_renders_in_chromium_with_every_chart_nothing_fetched_and_names_inert() {
    let Some(bin) = chromium() else {
        if std::env::var_os(REQUIRE).is_some() {
            panic!(
                "{REQUIRE} is set but there is no `chromium` on PATH (apt-get install chromium)"
            );
        }
        eprintln!(
            "\n!!!! SKIPPED: the cluster report's browser test needs `chromium` on PATH \
             (apt-get install --no-install-recommends chromium); set {REQUIRE}=1 to make its \
             absence a failure !!!!\n"
        );
        return;
    };
    let (_fx, _, _, page) = report();
    let html = page.html().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let keep = std::env::var_os("JOBSCOPE_CLUSTER_REPORT_OUT").map(PathBuf::from);

    // The page as written: only data: URIs, no script, one style sheet of its own.
    for r in references(&html) {
        assert!(r.starts_with("data:"), "the page names {r:?}");
    }
    for bad in [
        "<script", "http:", "https:", "@import", "<iframe", "<object", "<embed",
    ] {
        assert!(!html.contains(bad), "the page has {bad:?}");
    }
    assert_eq!(html.matches("<style").count(), 1);
    // Every inline picture is a chart: a PNG with something drawn in it.
    let pictures: Vec<Vec<u8>> = references(&html)
        .iter()
        .filter_map(|r| r.strip_prefix("data:image/png;base64,"))
        .map(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b)
                .expect("base64")
        })
        .collect();
    assert_eq!(pictures.len(), page.charts.len());
    assert_eq!(page.charts.len(), 7);
    for (p, c) in pictures.iter().zip(&page.charts) {
        assert_eq!(p, &c.png, "{}", c.key);
        let (_, _, px) = decode_png(p);
        let mut colours: Vec<[u8; 3]> = px.clone();
        colours.sort_unstable();
        colours.dedup();
        assert!(
            busy_share(&px) > 0.02 && colours.len() > 8,
            "{}: {:.3} drawn, {} colours",
            c.key,
            busy_share(&px),
            colours.len()
        );
    }

    // The screenshot: each picture outlined, the rest of the page as it is.
    let framed = html.replacen(
        "</head>",
        "<style>img { outline: 3px solid #ff00ff !important; }</style></head>",
        1,
    );
    let (port, log) = serve(vec![
        ("/framed.html", framed),
        ("/report.html", html.clone()),
    ]);
    let shot = dir.path().join("framed.png");
    run_chromium(
        &bin,
        dir.path(),
        &[
            format!("--screenshot={}", shot.display()),
            format!("--window-size={},{}", WINDOW.0, WINDOW.1),
        ],
        &format!("http://127.0.0.1:{port}/framed.html"),
    );
    assert_eq!(
        *log.lock().unwrap(),
        ["/framed.html"],
        "requests while the page was shown"
    );
    let bytes = std::fs::read(&shot).unwrap();
    let (w, h, px) = decode_png(&bytes);
    assert_eq!((w, h), WINDOW);
    let w = w as usize;
    let width = super::page::CHART_WIDTH as usize;
    let edges = outline_edges(w, &px, width);
    assert_eq!(
        edges.len(),
        2 * page.charts.len(),
        "outlines found: {edges:?} (is the page longer than the window?)"
    );
    for (c, pair) in page.charts.iter().zip(edges.chunks(2)) {
        let (top, bottom) = (pair[0], pair[1]);
        assert_eq!(top.1 + 1 - top.0, OUTLINE, "{}: {top:?}", c.key);
        let (x0, y0) = (top.2 + OUTLINE, top.1 + 1);
        let (x1, y1) = (top.3 + 1 - OUTLINE, bottom.0);
        let (cw, ch, chart) = decode_png(&c.png);
        assert_eq!(
            (x1 - x0, y1 - y0),
            (cw as usize, ch as usize),
            "{}: shown at its own size",
            c.key
        );
        let region: Vec<[u8; 3]> = (y0..y1)
            .flat_map(|y| px[y * w + x0..y * w + x1].iter().copied())
            .collect();
        assert!(
            busy_share(&region) > 0.02,
            "{}: the picture's place is blank",
            c.key
        );
        let same = region
            .iter()
            .zip(&chart)
            .filter(|(a, b)| a.iter().zip(b.iter()).all(|(x, y)| x.abs_diff(*y) <= 8))
            .count();
        assert!(
            same as f64 >= 0.99 * chart.len() as f64,
            "{}: {same} of {} pixels are the chart's",
            c.key,
            chart.len()
        );
    }

    // The DOM Chromium built from the page as served.
    log.lock().unwrap().clear();
    let dom = run_chromium(
        &bin,
        dir.path(),
        &["--dump-dom".to_string()],
        &format!("http://127.0.0.1:{port}/report.html"),
    );
    assert_eq!(*log.lock().unwrap(), ["/report.html"]);
    assert!(dom.contains("</html>"), "{dom}");
    const OURS: &[&str] = &[
        "html", "head", "meta", "link", "title", "style", "body", "main", "h1", "h2", "p", "ul",
        "li", "section", "figure", "img", "div", "table", "caption", "thead", "tbody", "tr", "th",
        "td",
    ];
    let tags = start_tags(&dom);
    for (name, tag) in &tags {
        assert!(
            OURS.contains(&name.as_str()),
            "an element not of the report: <{tag}>"
        );
        // An attribute named on…= (an event handler); the alt texts' words are not followed by `=`.
        let lower = tag.to_ascii_lowercase();
        for (i, _) in lower.match_indices(" on") {
            let after = &lower[i + 3..];
            let name_len = after
                .find(|c: char| !c.is_ascii_alphabetic())
                .unwrap_or(after.len());
            assert!(
                !after[name_len..].starts_with('='),
                "an event handler: <{tag}>"
            );
        }
    }
    let count = |n: &str| tags.iter().filter(|(t, _)| t == n).count();
    assert_eq!(count("img"), page.charts.len());
    assert_eq!((count("style"), count("link"), count("title")), (1, 1, 1));
    for (name, tag) in &tags {
        if name == "img" {
            assert!(tag.contains("src=\"data:image/png;base64,"), "<{tag}>");
        }
    }
    assert!(
        dom.contains("<title>jobscope cluster report: the whole cluster</title>"),
        "a script ran or the title is not the report's"
    );
    // The names, escaped as text, their bidi controls gone.
    let escaped = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let no_hidden = |s: &str| jobscope_report::present::clean_line(s, 40);
    for name in [
        SCRIPT_USER,
        IMG_USER,
        BIDI_USER,
        BIDI_ACCOUNT,
        STYLE_PARTITION,
        IFRAME_NAME,
    ] {
        let shown = escaped(&no_hidden(name));
        assert!(dom.contains(&shown), "{shown} is not on the page");
    }
    assert!(
        !dom.chars()
            .any(|c| c != '\n' && c != '\t' && jobscope_model::text::is_hidden(c)),
        "a control, bidi or invisible character reached the page"
    );
    assert!(!dom.contains(&"x".repeat(60)), "a long name was not cut");

    if let Some(out) = keep {
        std::fs::write(out.join("report.html"), &html).unwrap();
        std::fs::copy(&shot, out.join("framed.png")).unwrap();
        // The top of the page as it is, for docs/img/cluster-report.png.
        run_chromium(
            &bin,
            dir.path(),
            &[
                format!("--screenshot={}", out.join("top.png").display()),
                "--window-size=1000,1400".to_string(),
            ],
            &format!("http://127.0.0.1:{port}/report.html"),
        );
    }
}
