//! `jobscope alerts`: the real binary over an archive of real documents (the stored v1 fixture
//! as each job), the dry run for people and its JSON, and `send` delivered end to end to a
//! loopback SMTP server (the deliver crate's test server): one mail per user, the admins'
//! summary, nothing a second time, and nothing of one user's jobs in another's mail.

use jobscope_archive::Store;
use jobscope_model::job::JobState;
use jobscope_model::summary::JobSummary;
use std::path::Path;

mod common;
use common::{am_root, as_nobody, jobscope};

/// The stored fixture as job `job_id` of `user` (`uid`) named `name`, ended TIMEOUT `hours_ago`
/// hours ago after running as long as it did (every time of the document moved by one offset).
fn timed_out(job_id: u32, (user, uid): (&str, u32), name: &str, hours_ago: u64) -> JobSummary {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../report/testdata/archive-v1/oom.json");
    let mut s = jobscope_archive::load(
        &std::fs::read(&p).unwrap(),
        &jobscope_model::params::Report::default(),
    )
    .unwrap()
    .summary;
    let now_ms = jobscope_common::now_unix_ms();
    let shift = (now_ms - hours_ago * 3_600_000) - s.end_unix_ms;
    s.start_unix_ms += shift;
    s.end_unix_ms += shift;
    s.scheduler_start_unix_s = Some(s.start_unix_ms / 1000);
    for n in &mut s.nodes {
        n.start_unix_ms += shift;
        n.end_unix_ms += shift;
        n.uid = uid;
        n.job_id = job_id;
    }
    s.job_id = job_id;
    s.uid = Some(uid);
    s.user = Some(user.into());
    s.name = Some(name.into());
    s.state = JobState::Timeout;
    s.analysis = Some(jobscope_model::summary::analysis::analyze(
        &s,
        &jobscope_model::params::Report::default(),
    ));
    s
}

const ALICE: (&str, u32) = ("alice", 1001);
const BOB: (&str, u32) = ("bob", 1002);
const CAROL: (&str, u32) = ("carol", 1003);

/// An archive where alice and bob each had three jobs stopped at their time limit in the last
/// days and carol one; the `timeouts` rule at 3 jobs; mail by SMTP to `smtp_port`.
fn site(dir: &Path, smtp_port: u16) -> std::path::PathBuf {
    let cfg = common::config(
        dir,
        &format!(
            "[mail]\nfrom = \"jobscope@cluster.example.org\"\ndomain = \"example.org\"\n\
             transport = \"smtp\"\nqueue_dir = \"{}/queue\"\n[mail.smtp]\nhost = \"127.0.0.1\"\n\
             port = {smtp_port}\n[alerts]\nadmin_to = \"hpc-admins@example.org\"\n\
             [alerts.timeouts]\nenabled = true\nmin_jobs = 3\n",
            dir.display()
        ),
    );
    let store = Store::new(&dir.join("archive"), "root");
    for (id, who, name, h) in [
        (4_400_001, ALICE, "<b>alice-train</b>\u{202E}", 5),
        (4_400_002, ALICE, "<b>alice-train</b>\u{202E}", 30),
        (4_400_003, ALICE, "<b>alice-train</b>\u{202E}", 50),
        (7_700_001, BOB, "bobs-secret-sim", 6),
        (7_700_002, BOB, "bobs-secret-sim", 26),
        (7_700_003, BOB, "bobs-secret-sim", 70),
        (9_900_001, CAROL, "carol-one", 8),
    ] {
        store.write(&timed_out(id, who, name, h)).unwrap();
    }
    cfg
}

/// A user's block of the dry run: from its first line to the next empty line.
fn block<'a>(text: &'a str, user: &str) -> &'a str {
    let start = text
        .find(&format!("\n{user} (uid "))
        .unwrap_or_else(|| panic!("no block for {user}:\n{text}"));
    let rest = &text[start + 1..];
    &rest[..rest.find("\n\n").map_or(rest.len(), |e| e + 1)]
}

#[test]
fn the_dry_run_its_json_and_a_send_through_smtp() {
    if !am_root() {
        eprintln!("skipped: writing an archive and sending alerts need root");
        return;
    }
    use jobscope_deliver::mail::test_smtp::{Mode, Sink};
    let sink = Sink::start(Mode::Accept);
    let d = tempfile::tempdir().unwrap();
    let cfg = site(d.path(), sink.port());

    let (rc, out, err) = jobscope(&cfg, &["alerts", "--dry-run", "--utc"]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.contains("\nrules:\n  timeouts        ≥ 3 jobs TIMEOUT in 7 days\n"),
        "{out}"
    );
    assert!(out.contains("2 users would be mailed, 0 not"), "{out}");
    let alice = block(&out, "alice");
    assert!(alice.starts_with("alice (uid 1001, alice@example.org): would be mailed:"));
    assert!(
        alice.contains("Jobs stopped at their time limit: 3 jobs"),
        "{alice}"
    );
    for id in ["4400001", "4400002", "4400003"] {
        assert!(alice.contains(id), "{alice}");
    }
    // The name as typed, without its bidi override; nothing of bob's.
    assert!(alice.contains("<b>alice-train</b>") && !alice.contains('\u{202E}'));
    assert!(
        !alice.contains("7700") && !alice.contains("bobs-secret"),
        "{alice}"
    );
    assert!(
        !out.contains("carol"),
        "one TIMEOUT is under the rule's 3:\n{out}"
    );

    // `check` and `send --dry-run` are the same dry run (past the line with the time).
    let body = |s: &str| s.split_once('\n').unwrap().1.to_string();
    for args in [
        &["alerts", "check", "--utc"][..],
        &["alerts", "send", "--dry-run", "--utc"],
    ] {
        let (rc, o, e) = jobscope(&cfg, args);
        assert_eq!(rc, 0, "{args:?}: {e}");
        assert_eq!(body(&o), body(&out), "{args:?}");
    }

    let (rc, out, err) = jobscope(&cfg, &["alerts", "--json"]);
    assert_eq!(rc, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["rules"],
        serde_json::json!([{"rule": "timeouts", "window_days": 7}])
    );
    assert_eq!(v["period_days"], 7);
    let users: Vec<&str> = v["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["user"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["alice", "bob"]);
    let f = &v["users"][0]["findings"][0];
    assert_eq!(f["rule"], "timeouts");
    assert_eq!(f["jobs"].as_array().unwrap().len(), 3);
    assert_eq!(f["jobs"][0]["state"], "TIMEOUT");
    assert!(v["users"][0]["decision"] == "mail" && v["users"][0]["to"] == "alice@example.org");

    // Nothing was sent by any of that.
    assert!(sink.messages().is_empty());
    let (rc, out, err) = jobscope(&cfg, &["alerts", "send", "--utc"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("mail flush: mail queue: 3 sent"), "{out}");
    let got = sink.messages();
    let mut to: Vec<&str> = got.iter().map(|m| m.to[0].as_str()).collect();
    to.sort_unstable();
    assert_eq!(
        to,
        [
            "alice@example.org",
            "bob@example.org",
            "hpc-admins@example.org"
        ]
    );
    let text_to = |who: &str| {
        let m = got.iter().find(|m| m.to[0] == who).unwrap();
        let p = mail_parser::MessageParser::default()
            .parse(&m.data)
            .unwrap();
        (
            p.body_text(0).unwrap().replace("\r\n", "\n"),
            p.body_html(0).unwrap().into_owned(),
        )
    };
    let (text, html) = text_to("alice@example.org");
    for id in ["4400001", "4400002", "4400003"] {
        assert!(text.contains(id) && html.contains(id), "{text}");
    }
    assert!(!text.contains("7700") && !text.contains("bobs-secret") && !text.contains("bob"));
    assert!(!html.contains("<b>alice") && html.contains("&lt;b&gt;alice-train&lt;"));
    let (text, _) = text_to("bob@example.org");
    assert!(!text.contains("4400") && !text.contains("alice"), "{text}");
    let (summary, _) = text_to("hpc-admins@example.org");
    assert!(summary.lines().any(|l| l.starts_with("alice ")) && summary.contains("bob "));

    // A second send in the period: nobody (their jobs were reported), nothing more arrives.
    let (rc, out, err) = jobscope(&cfg, &["alerts", "send"]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.contains("nobody to mail"), "{out}");
    assert_eq!(sink.messages().len(), 3);
    let (_, out, _) = jobscope(&cfg, &["alerts", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["users"], serde_json::json!([]));
}

/// Alerts read every user's jobs: someone outside the admin group is told so in one line.
#[test]
fn a_user_who_is_not_an_admin_is_refused() {
    if !am_root() {
        eprintln!("skipped: needs root to run as another user");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = common::config(d.path(), "[alerts.timeouts]\nenabled = true\n");
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    for args in [&["alerts"][..], &["alerts", "send"]] {
        let (rc, out, err) = as_nobody(&cfg, args);
        assert_eq!(rc, 1, "{args:?}: {out}");
        assert!(out.is_empty());
        assert_eq!(
            err.trim(),
            "jobscope: alerts read every user's jobs: root and the archive's admin group (root) only",
            "{args:?}"
        );
    }
}
