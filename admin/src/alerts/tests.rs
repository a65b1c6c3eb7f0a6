//! The alert rules over a real archive and its index (the index tests' job builder,
//! `jobscope_audit::testing::summary`, through `Store::write` and `Index::update`), and the mails
//! through the real queue. Expected figures come from the fixtures' own numbers, worked out in
//! the comments (a job of `spec` runs 7200 s on 4 cores: 8 core-hours allocated), never from the
//! code under test.

use super::state::Sent;
use super::*;
use jobscope_archive::Store;
use jobscope_audit::index::{Index, Settings};
use jobscope_audit::testing::{spec, summary, Spec};
use jobscope_model::summary::analysis::analyze;
use jobscope_model::summary::JobSummary;

const DAY_S: i64 = 86_400;
const GIB: u64 = 1 << 30;

/// A Monday 00:00 UTC near the real clock (the run history keeps the last 180 days by the real
/// clock), so that the period is known: every job ends in the week before it.
fn now_s() -> i64 {
    let real = (jobscope_common::now_unix_ms() / 1000) as i64;
    period_start(real, 7)
}

struct Site {
    dir: tempfile::TempDir,
    store: Store,
    settings: Settings,
    cfg: Config,
}

fn site() -> Site {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    let mut cfg = Config::default();
    cfg.paths.archive_dir = archive.clone();
    cfg.mail.queue_dir = dir.path().join("queue");
    cfg.mail.domain = Some("example.org".into());
    cfg.mail.from = "jobscope@cluster.example.org".into();
    Site {
        store: Store::new(&archive, "root"),
        settings: Settings::in_dir(cfg.audit.index_dir(&archive)),
        cfg,
        dir,
    }
}

/// Job `id` of `user` (uid `uid`) on `part` that ended `days_ago` days (and 1 h) before [`now_s`]:
/// 7200 s on 4 cores, 4 GiB asked for; `edit` changes it (state, name, options), then it is
/// analysed again as the Epilog would.
fn job(
    id: u32,
    (user, uid): (&'static str, u32),
    part: &'static str,
    days_ago: i64,
    edit: impl FnOnce(&mut Spec, &mut JobSummary),
) -> JobSummary {
    let mut s = spec(id, user, uid, part, 0);
    s.start_ms = ((now_s() - days_ago * DAY_S - 3 * 3600) * 1000) as u64;
    let mut j = summary(&s);
    edit(&mut s, &mut j);
    let mut j2 = summary(&s);
    // What `edit` did to the summary itself, on the summary of the edited spec.
    j2.name = j.name.clone();
    j2.script_sha256 = j.script_sha256.clone();
    j2.state = j.state;
    j2.user_options = j.user_options.clone();
    j2.analysis = Some(analyze(&j2, &jobscope_model::params::Report::default()));
    j2
}

fn plain(_: &mut Spec, _: &mut JobSummary) {}

const ALICE: (&str, u32) = ("alice", 1001);
const BOB: (&str, u32) = ("bob", 1002);

impl Site {
    fn write(&self, jobs: &[JobSummary]) {
        for j in jobs {
            self.store.write(j).unwrap();
        }
        let idx = Index::new(&self.store, self.settings.clone());
        idx.update(false).unwrap();
        jobscope_audit::history::write_history(&idx).unwrap();
    }

    fn evaluate_listing(&self, now: i64, sent: &Sent, in_full: InFull) -> Evaluation {
        let eng = ParquetEngine::open(&self.settings.dir).unwrap();
        let src = Sources {
            cfg: &self.cfg,
            engine: &eng,
            index_dir: &self.settings.dir,
            now_unix_s: now,
            in_full,
        };
        evaluate(&src, sent).unwrap()
    }

    /// Every job of each finding in full (as `--json`).
    fn evaluate_at(&self, now: i64, sent: &Sent) -> Evaluation {
        self.evaluate_listing(now, sent, InFull::Every)
    }

    fn evaluate(&self) -> Evaluation {
        self.evaluate_at(now_s(), &Sent::default())
    }

    fn send_at(&self, now: i64) -> send::SendReport {
        let eng = ParquetEngine::open(&self.settings.dir).unwrap();
        let src = Sources {
            cfg: &self.cfg,
            engine: &eng,
            index_dir: &self.settings.dir,
            now_unix_s: now,
            // What the mails list, as `jobscope alerts send` asks.
            in_full: InFull::First(self.cfg.alerts.max_jobs_listed as usize),
        };
        send::send(&src, Zone::Utc).unwrap()
    }

    /// The queued messages (`<queue>/*.eml`), by queue id.
    fn queued(&self) -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(&self.cfg.mail.queue_dir)
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().into_string().ok()?;
                let id = n.strip_suffix(".eml")?.to_string();
                Some((id, std::fs::read(e.path()).unwrap()))
            })
            .collect()
    }
}

use jobscope_audit::query::Zone;

fn user<'a>(ev: &'a Evaluation, name: &str) -> Option<&'a UserAlert> {
    ev.users.iter().find(|u| u.user == name)
}

fn rules_of(u: &UserAlert) -> Vec<Rule> {
    u.findings.iter().map(|f| f.rule).collect()
}

fn ids(f: &Finding) -> Vec<u32> {
    let mut v: Vec<u32> = f.jobs.iter().map(|j| j.job_id).collect();
    v.sort_unstable();
    v
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Two GPUs never used for 7200 s are 4 GPU-hours idle (the GPU summary's own
/// `gpu_hours_wasted`: all of it when never used). At 8 GPU-hours: two such jobs fire, one does
/// not; a job whose GPUs were busy never counts.
#[test]
fn gpu_idle_fires_at_its_gpu_hours() {
    let idle = |s: &mut Spec, _: &mut JobSummary| {
        s.gpus = 2;
        s.gpu_used = false;
        s.nodes = &["g1"];
    };
    let busy = |s: &mut Spec, _: &mut JobSummary| {
        s.gpus = 2;
        s.gpu_used = true;
        s.nodes = &["g1"];
    };
    let mut site = site();
    site.cfg.alerts.gpu_idle.enabled = true;
    site.cfg.alerts.gpu_idle.min_gpu_hours = 8.0;
    site.write(&[
        job(10, ALICE, "gpu", 1, idle),
        job(11, ALICE, "gpu", 2, idle),
        job(12, ALICE, "gpu", 2, busy),
        job(20, BOB, "gpu", 1, idle),
        job(21, BOB, "gpu", 1, busy),
        job(22, BOB, "gpu", 1, busy),
    ]);
    let ev = site.evaluate();
    let a = user(&ev, "alice").expect("alice's two idle jobs: 8 GPU-hours");
    assert_eq!(rules_of(a), [Rule::GpuIdle]);
    assert_eq!(ids(&a.findings[0]), [10, 11]);
    assert!(
        close(a.findings[0].waste_hours, 8.0),
        "{}",
        a.findings[0].waste_hours
    );
    assert_eq!(a.findings[0].waste_unit, WasteUnit::GpuHours);
    assert_eq!(a.decision, Decision::Mail);
    assert_eq!(a.to.as_deref(), Some("alice@example.org"));
    assert!(user(&ev, "bob").is_none(), "bob: one idle job, 4 GPU-hours");
    // Just above what alice wasted: nothing.
    site.cfg.alerts.gpu_idle.min_gpu_hours = 8.001;
    assert!(site.evaluate().users.is_empty());
    // A window of 2 days holds alice's first job (ended 25 h before) and not her second (49 h).
    site.cfg.alerts.gpu_idle.min_gpu_hours = 4.0;
    site.cfg.alerts.gpu_idle.window_days = 2;
    let ev = site.evaluate();
    assert_eq!(ids(&user(&ev, "alice").unwrap().findings[0]), [10]);
}

/// CPU efficiency is CPU time ÷ (4 cores × 7200 s): 2880 s is 10 %, 7200 s is 25 %. At "under
/// 25 % in 3 jobs of 8 core-hours or more": three jobs at 10 % fire; a job at exactly 25 % and a
/// 2-core job (4 core-hours) do not count.
#[test]
fn cpu_efficiency_fires_at_k_jobs_of_m_core_hours_under_x_pct() {
    let pct = |cpu_s: f64, cores: u32| {
        move |s: &mut Spec, _: &mut JobSummary| {
            s.cpu_s = cpu_s;
            s.cores = cores;
        }
    };
    let mut site = site();
    let r = &mut site.cfg.alerts.cpu_efficiency;
    r.enabled = true;
    r.max_cpu_eff_pct = 25.0;
    r.min_jobs = 3;
    r.min_core_hours = 8.0;
    site.write(&[
        job(30, ALICE, "cpu", 1, pct(2880.0, 4)),
        job(31, ALICE, "cpu", 2, pct(2880.0, 4)),
        job(32, ALICE, "cpu", 3, pct(2880.0, 4)),
        // Bob: two at 10 %, one at exactly 25 %, one of 2 cores at 10 % (1440 s of 2 × 7200 s).
        job(40, BOB, "cpu", 1, pct(2880.0, 4)),
        job(41, BOB, "cpu", 1, pct(2880.0, 4)),
        job(42, BOB, "cpu", 1, pct(7200.0, 4)),
        job(43, BOB, "cpu", 1, pct(1440.0, 2)),
    ]);
    let ev = site.evaluate();
    let a = user(&ev, "alice").unwrap();
    assert_eq!(rules_of(a), [Rule::CpuEfficiency]);
    assert_eq!(ids(&a.findings[0]), [30, 31, 32]);
    // Each: 8 core-hours allocated, 0.8 used: 7.2 unused.
    assert!(close(a.findings[0].waste_hours, 3.0 * 7.2));
    assert!(user(&ev, "bob").is_none(), "{:?}", user(&ev, "bob"));
    // Bob's 25 % job counts under 25.001 %.
    site.cfg.alerts.cpu_efficiency.max_cpu_eff_pct = 25.001;
    let ev = site.evaluate();
    assert_eq!(ids(&user(&ev, "bob").unwrap().findings[0]), [40, 41, 42]);
}

fn script(hex: char) -> impl Fn(&mut Spec, &mut JobSummary) {
    move |_: &mut Spec, j: &mut JobSummary| {
        j.script_sha256 = Some(hex.to_string().repeat(64));
        j.name = Some("train".into());
    }
}

/// Three runs of one batch script with a peak of 1 GiB: the 95th percentile of their peaks is
/// 1 GiB, so asking for 4 GiB is 4× it (the rule's default) and fires; 4 GiB less 1 MiB does not.
/// The mail's `#SBATCH` lines are the end-of-job advice for those runs: 1 GiB + 25 % headroom
/// rounds up to 2G; 7200 s + 30 % is 9360 s, up to 5 minutes: 02:40:00; 0.4 busy cores: 1.
#[test]
fn mem_request_fires_at_4x_the_p95_peak_of_the_same_script() {
    let asked = |bytes: u64, hex: char| {
        move |s: &mut Spec, j: &mut JobSummary| {
            s.mem_alloc = bytes;
            s.peak = GIB;
            s.cpu_s = 2880.0;
            script(hex)(s, j);
        }
    };
    let mut site = site();
    site.cfg.alerts.mem_request.enabled = true;
    site.write(&[
        job(50, ALICE, "cpu", 1, asked(4 * GIB, 'a')),
        job(51, ALICE, "cpu", 2, asked(4 * GIB, 'a')),
        job(52, ALICE, "cpu", 3, asked(4 * GIB, 'a')),
        job(60, BOB, "cpu", 1, asked(4 * GIB - (1 << 20), 'b')),
        job(61, BOB, "cpu", 2, asked(4 * GIB - (1 << 20), 'b')),
        job(62, BOB, "cpu", 3, asked(4 * GIB - (1 << 20), 'b')),
    ]);
    let ev = site.evaluate();
    let a = user(&ev, "alice").expect("4 GiB asked, 1 GiB p95 peak");
    assert_eq!(rules_of(a), [Rule::MemRequest]);
    assert_eq!(ids(&a.findings[0]), [50, 51, 52]);
    assert!(a.findings[0]
        .jobs
        .iter()
        .all(|j| j.mem_peak_p95_bytes == Some(GIB)));
    // Each job held 4 GiB for 2 h and needed 1 GiB: 6 GB-hours unused.
    assert!(close(a.findings[0].waste_hours, 3.0 * 6.0));
    assert!(user(&ev, "bob").is_none());
    let lines: Vec<&str> = a.advice[0].lines.iter().map(|l| l.line.as_str()).collect();
    assert_eq!(
        lines,
        [
            "#SBATCH --mem=2G",
            "#SBATCH --time=02:40:00",
            "#SBATCH --cpus-per-task=1"
        ]
    );
    // Made for the most wasteful job, the one that ended first of three that wasted alike.
    assert_eq!(
        a.advice[0].heading,
        "\"train\" (job 52): Based on your last 3 runs of the same batch script:"
    );
    assert_eq!(a.advice.len(), 1, "one script: one block");
    // Fewer runs than audit.history_min_runs: no percentile, no finding.
    site.cfg.audit.history_min_runs = 4;
    assert!(site.evaluate().users.is_empty());
}

fn timeout(_: &mut Spec, j: &mut JobSummary) {
    j.state = JobState::Timeout;
}

/// Three TIMEOUTs in the window fire at 3; two in it (a third ended before it) do not; the waste
/// is the jobs' allocated core-hours (8 each).
#[test]
fn timeouts_fire_at_k_in_the_window() {
    let mut site = site();
    site.cfg.alerts.timeouts.enabled = true;
    site.cfg.alerts.timeouts.min_jobs = 3;
    site.write(&[
        job(70, ALICE, "cpu", 1, timeout),
        job(71, ALICE, "cpu", 2, timeout),
        job(72, ALICE, "cpu", 6, timeout),
        job(73, ALICE, "cpu", 1, plain),
        job(80, BOB, "cpu", 1, timeout),
        job(81, BOB, "cpu", 2, timeout),
        job(82, BOB, "cpu", 9, timeout),
    ]);
    let ev = site.evaluate();
    let a = user(&ev, "alice").unwrap();
    assert_eq!(ids(&a.findings[0]), [70, 71, 72]);
    assert!(close(a.findings[0].waste_hours, 24.0));
    assert_eq!(a.findings[0].waste_unit, WasteUnit::CoreHours);
    assert!(
        user(&ev, "bob").is_none(),
        "bob's third TIMEOUT is 9 days old"
    );
    site.cfg.alerts.timeouts.window_days = 10;
    assert!(user(&site.evaluate(), "bob").is_some());
}

/// A job two rules of one unit list counts once in the user's waste: three TIMEOUTs at 10 %
/// CPU are 3 × 8 core-hours allocated (timeouts) and 3 × 7.2 unused (CPU efficiency): 24 in all.
#[test]
fn a_job_two_rules_list_counts_once_in_the_waste() {
    let slow_timeout = |s: &mut Spec, j: &mut JobSummary| {
        s.cpu_s = 2880.0;
        timeout(s, j);
    };
    let mut site = site();
    site.cfg.alerts.timeouts.enabled = true;
    site.cfg.alerts.cpu_efficiency.enabled = true;
    site.write(&[
        job(75, ALICE, "cpu", 1, slow_timeout),
        job(76, ALICE, "cpu", 2, slow_timeout),
        job(77, ALICE, "cpu", 3, slow_timeout),
    ]);
    let ev = site.evaluate();
    let a = user(&ev, "alice").unwrap();
    assert_eq!(rules_of(a), [Rule::CpuEfficiency, Rule::Timeouts]);
    let w = a.waste();
    assert_eq!(w.len(), 1);
    assert!(close(w[&WasteUnit::CoreHours], 24.0), "{w:?}");
    assert!(words::mail_text(&site.cfg, a, Zone::Utc).contains("Wasted in all: 24.0 core-hours."));
}

/// A GPU job makes `gpu` a GPU partition. Three CPU-only jobs that started with it (16 of the
/// 16 cores the partition was ever seen to have: 100 % busy) fire at 3; a fourth that started
/// alone days later (4 of 16 cores: 25 %, under audit.busy_pct's 80) does not count.
#[test]
fn cpu_on_gpu_fires_for_jobs_that_started_while_the_partition_was_busy() {
    let g = |s: &mut Spec, _: &mut JobSummary| {
        s.gpus = 1;
        s.gpu_used = true;
        s.nodes = &["g1"];
    };
    let mut site = site();
    site.cfg.alerts.cpu_on_gpu.enabled = true;
    site.cfg.alerts.cpu_on_gpu.min_jobs = 3;
    site.write(&[
        job(90, BOB, "gpu", 2, g),
        job(91, ALICE, "gpu", 2, plain),
        job(92, ALICE, "gpu", 2, plain),
        job(93, ALICE, "gpu", 2, plain),
        job(94, ALICE, "gpu", 0, plain),
        // The same CPU-only jobs on a partition without GPU jobs.
        job(95, BOB, "cpu", 2, plain),
        job(96, BOB, "cpu", 2, plain),
        job(97, BOB, "cpu", 2, plain),
    ]);
    let ev = site.evaluate();
    let a = user(&ev, "alice").unwrap();
    assert_eq!(rules_of(a), [Rule::CpuOnGpu]);
    assert_eq!(ids(&a.findings[0]), [91, 92, 93]);
    assert!(a.findings[0]
        .jobs
        .iter()
        .all(|j| j.partition_busy_pct == Some(100.0)));
    assert!(close(a.findings[0].waste_hours, 24.0));
    assert!(user(&ev, "bob").is_none());
    site.cfg.alerts.cpu_on_gpu.min_jobs = 4;
    assert!(site.evaluate().users.is_empty());
}

fn never(_: &mut Spec, j: &mut JobSummary) {
    j.state = JobState::Timeout;
    j.user_options.insert("mail".into(), "Never".into());
}

/// `--jobscope-mail=never` (kept in the record as `user_options.mail`) takes a job out of the
/// alerts: with one of three TIMEOUTs opted out, two are left, under the threshold; with all
/// three, the user is not mailed and the dry run says why.
#[test]
fn jobs_run_with_mail_never_are_left_out() {
    let mut site = site();
    site.cfg.alerts.timeouts.enabled = true;
    site.cfg.alerts.timeouts.min_jobs = 2;
    site.write(&[
        job(100, ALICE, "cpu", 1, timeout),
        job(101, ALICE, "cpu", 1, timeout),
        job(102, ALICE, "cpu", 1, never),
        job(110, BOB, "cpu", 1, never),
        job(111, BOB, "cpu", 1, never),
    ]);
    let ev = site.evaluate();
    let a = user(&ev, "alice").unwrap();
    assert_eq!(ids(&a.findings[0]), [100, 101]);
    assert!(a.notes.iter().any(|n| n.contains("--jobscope-mail=never")));
    let b = user(&ev, "bob").unwrap();
    assert_eq!(b.decision, Decision::OptedOut);
    assert!(b.findings.is_empty());
    site.cfg.alerts.timeouts.min_jobs = 3;
    let ev = site.evaluate();
    assert_eq!(user(&ev, "alice").unwrap().decision, Decision::OptedOut);
    // And nothing is queued for either.
    site.cfg.alerts.timeouts.min_jobs = 2;
    let rep = site.send_at(now_s());
    let to: Vec<&str> = rep.mails.iter().map(|m| m.to.as_str()).collect();
    assert_eq!(to, ["alice@example.org"]);
}

fn eml(raw: &[u8]) -> mail_parser::Message<'_> {
    mail_parser::MessageParser::default().parse(raw).unwrap()
}

/// Two sends in one period queue one mail; jobs that come later in the period wait (the user
/// was mailed); in the next period only they are listed, never the ones mailed before. A crash
/// between queueing and recording (the record lost) queues nothing twice.
#[test]
fn one_mail_per_user_and_period_and_no_job_twice() {
    let mut site = site();
    site.cfg.alerts.timeouts.enabled = true;
    site.cfg.alerts.timeouts.min_jobs = 2;
    site.cfg.alerts.timeouts.window_days = 14;
    site.write(&[
        job(120, ALICE, "cpu", 1, timeout),
        job(121, ALICE, "cpu", 2, timeout),
    ]);
    let now = now_s();
    let first = site.send_at(now);
    assert_eq!(first.mails.len(), 1);
    assert_eq!(first.mails[0].result, "queued");
    let id = send::mail_id(1001, now);
    assert_eq!(first.mails[0].mail_id, id);
    let again = site.send_at(now + 3600);
    assert!(again.mails.is_empty(), "{:?}", again.mails);
    assert!(again.evaluation.users.is_empty(), "both jobs were reported");
    assert_eq!(site.queued().len(), 1);

    // The record lost after the queueing (a crash): the same mail id, queued once.
    std::fs::remove_file(state::dir(&site.settings.dir).join(state::FILE)).unwrap();
    let redo = site.send_at(now + 7200);
    assert_eq!(redo.mails[0].result, "already_queued");
    assert_eq!(site.queued().len(), 1);
    assert!(site.send_at(now + 7300).mails.is_empty(), "recorded now");

    // Two more TIMEOUTs later in the period (they end 2 days after `now`, less an hour): held.
    let later = |id| {
        job(id, ALICE, "cpu", 0, |s: &mut Spec, j: &mut JobSummary| {
            s.start_ms += 2 * DAY_S as u64 * 1000;
            timeout(s, j);
        })
    };
    site.write(&[later(122), later(123)]);
    let in_period = now + 3 * DAY_S;
    let held = site.send_at(in_period);
    assert!(held.mails.is_empty());
    let a = user(&held.evaluation, "alice").unwrap();
    assert_eq!(a.decision, Decision::AlreadyMailed);
    assert_eq!(ids(&a.findings[0]), [122, 123]);
    // The next period: a second mail, with the new jobs only.
    let next = site.send_at(now + 7 * DAY_S);
    assert_eq!(next.mails.len(), 1);
    let id2 = send::mail_id(1001, now + 7 * DAY_S);
    assert_eq!(next.mails[0].mail_id, id2);
    let q = site.queued();
    let text = eml(&q[&id2]).body_text(0).unwrap().into_owned();
    for listed in ["122", "123"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(listed)),
            "{text}"
        );
    }
    for not in ["120", "121"] {
        assert!(
            !text.lines().any(|l| l.trim_start().starts_with(not)),
            "{text}"
        );
    }
}

/// The queued mail: to the user, the subject names the rule, the text lists the jobs as a
/// table with the waste in hours and the `#SBATCH` lines; the HTML part is the same text,
/// escaped; a hostile job name is inert in both.
#[test]
fn the_mail_lists_the_jobs_the_waste_and_the_advice_and_a_hostile_name_is_inert() {
    let evil = "<script>alert('x')</script>\u{202E}gpj.exe\r\nBcc: evil@example.com";
    let hostile = move |s: &mut Spec, j: &mut JobSummary| {
        timeout(s, j);
        s.cpu_s = 2880.0;
        j.name = Some(evil.into());
        j.script_sha256 = Some("c".repeat(64));
    };
    let mut site = site();
    site.cfg.alerts.timeouts.enabled = true;
    site.cfg.alerts.timeouts.min_jobs = 3;
    site.cfg.alerts.admin_to = Some("hpc-admins@example.org".into());
    site.write(&[
        job(130, ALICE, "cpu", 1, hostile),
        job(131, ALICE, "cpu", 2, hostile),
        job(132, ALICE, "cpu", 3, hostile),
    ]);
    let rep = site.send_at(now_s());
    assert_eq!(rep.mails.len(), 2, "the user's and the admins' summary");
    let q = site.queued();
    let raw = &q[&send::mail_id(1001, now_s())];
    let m = eml(raw);
    assert_eq!(
        m.to().unwrap().first().unwrap().address(),
        Some("alice@example.org")
    );
    assert!(m.header_raw("Bcc").is_none());
    assert_eq!(
        m.subject(),
        Some("jobscope: your recent jobs: jobs stopped at their time limit")
    );
    let text = m.body_text(0).unwrap().replace("\r\n", "\n");
    // The table: header, rule, then one row per job with its 8 core-hours.
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("job "))
        .unwrap_or_else(|| panic!("no table header in\n{text}"));
    // the headers for people, with their units (audit/src/render.rs LABELS)
    for col in [
        "name",
        "partition",
        "end (UTC)",
        "elapsed",
        "cores",
        "core-h alloc",
    ] {
        assert!(header.contains(col), "{header}");
    }
    for id in ["130", "131", "132"] {
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with(id))
            .unwrap_or_else(|| panic!("no row {id}:\n{text}"));
        assert!(row.ends_with(" 8.00"), "{row}");
        assert!(row.contains("2h00m"), "{row}");
    }
    assert!(text.contains("Wasted in all: 24.0 core-hours."), "{text}");
    // 7200 s + 30 % rounds up to 02:40:00 (the run history of the same script).
    assert!(text.contains("  #SBATCH --time=02:40:00\n"), "{text}");
    // The name: cleaned (no bidi override, no line of its own), and as typed otherwise.
    assert!(!text.contains('\u{202E}'));
    assert!(!text.lines().any(|l| l.starts_with("Bcc:")));
    assert!(
        text.contains("<script>alert('x')</script>gpj.exe"),
        "{text}"
    );
    let html = m.body_html(0).unwrap();
    assert!(
        !html.contains("<script") && !html.contains('\u{202E}'),
        "{html}"
    );
    assert!(
        html.contains("&lt;script&gt;alert(&#x27;x&#x27;)&lt;&#x2F;script&gt;")
            || html.contains("&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;"),
        "{html}"
    );
    // Every line of the text is in the HTML part (escaped).
    // (Lines with a character HTML escapes are escaped there: `=` in `--time=`, the name's `<`.)
    for l in text
        .lines()
        .filter(|l| !l.contains(['<', '>', '&', '"', '\'', '`', '=']))
    {
        assert!(html.contains(l), "{l:?} not in\n{html}");
    }
    // The admins' summary: alice, her rule, her jobs and waste; no job names.
    let (sid, sraw) = q
        .iter()
        .find(|(k, _)| k.starts_with("alerts-summary."))
        .unwrap();
    let s = eml(sraw);
    assert_eq!(
        s.to().unwrap().first().unwrap().address(),
        Some("hpc-admins@example.org"),
        "{sid}"
    );
    let st = s.body_text(0).unwrap().replace("\r\n", "\n");
    let row = st.lines().find(|l| l.starts_with("alice")).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        ["alice", "1001", "timeouts", "3", "-", "24.0", "-"],
        "{st}"
    );
    assert!(!st.contains("script"), "{st}");
}

/// Nothing in one user's alert (mail, dry-run block, JSON) names another user's jobs.
#[test]
fn one_users_alert_shows_none_of_another_users_jobs() {
    let named = |name: &'static str| {
        move |s: &mut Spec, j: &mut JobSummary| {
            timeout(s, j);
            j.name = Some(name.into());
        }
    };
    let mut site = site();
    site.cfg.alerts.timeouts.enabled = true;
    site.cfg.alerts.timeouts.min_jobs = 2;
    site.cfg.alerts.cpu_efficiency.enabled = true;
    site.write(&[
        job(4_400_001, ALICE, "cpu", 1, named("alice-run")),
        job(4_400_002, ALICE, "cpu", 2, named("alice-run")),
        job(7_700_001, BOB, "cpu", 1, named("bobs-secret-sim")),
        job(7_700_002, BOB, "cpu", 2, named("bobs-secret-sim")),
    ]);
    let ev = site.evaluate();
    assert_eq!(ev.users.len(), 2);
    let blocks = |u: &UserAlert| {
        vec![
            words::user_block(&site.cfg, u, Zone::Utc, true),
            words::mail_text(&site.cfg, u, Zone::Utc),
            serde_json::to_string(u).unwrap(),
        ]
    };
    let (a, b) = (user(&ev, "alice").unwrap(), user(&ev, "bob").unwrap());
    for (me, other, other_name) in [(a, b, "bobs-secret-sim"), (b, a, "alice-run")] {
        for text in blocks(me) {
            for j in other.findings.iter().flat_map(|f| &f.jobs) {
                assert!(!text.contains(&j.job_id.to_string()), "{text}");
            }
            assert!(
                !text.contains(other_name) && !text.contains(&other.user),
                "{text}"
            );
        }
    }
    // Each user's own jobs are there.
    assert!(blocks(a)[1].contains("4400001") && blocks(b)[1].contains("7700002"));
}

/// The dry run: a header with the rules, one block per user with the rule, its jobs as a table
/// and the waste; the JSON has the shape scripts read.
#[test]
fn the_dry_run_and_its_json() {
    let mut site = site();
    site.cfg.alerts.timeouts.enabled = true;
    site.cfg.alerts.timeouts.min_jobs = 2;
    site.write(&[
        job(140, ALICE, "cpu", 1, timeout),
        job(141, ALICE, "cpu", 2, timeout),
    ]);
    let ev = site.evaluate();
    let text = words::dry_run(&site.cfg, &ev, Zone::Utc);
    assert!(
        text.contains("\nrules:\n  timeouts        ≥ 2 jobs TIMEOUT in 7 days\n"),
        "{text}"
    );
    assert!(text.contains("1 user would be mailed, 0 not"), "{text}");
    assert!(
        text.contains("alice (uid 1001, alice@example.org): would be mailed:"),
        "{text}"
    );
    assert!(text.contains("  Jobs stopped at their time limit: 2 jobs in the last 7 days"));
    assert!(
        text.contains("  wasted in all: 16.0 core-hours\n"),
        "{text}"
    );
    let v = serde_json::to_value(&ev).unwrap();
    assert_eq!(
        v["rules"],
        serde_json::json!([{"rule": "timeouts", "window_days": 7}])
    );
    let u = &v["users"][0];
    assert_eq!(u["user"], "alice");
    assert_eq!(u["uid"], 1001);
    assert_eq!(u["decision"], "mail");
    assert_eq!(u["to"], "alice@example.org");
    let f = &u["findings"][0];
    assert_eq!(f["rule"], "timeouts");
    assert_eq!(f["waste_unit"], "core_hours");
    assert_eq!(f["waste_hours"], 16.0);
    let j = &f["jobs"][0];
    for k in [
        "job_id",
        "name",
        "partition",
        "state",
        "end_unix_s",
        "elapsed_s",
        "core_hours_alloc",
        "waste_hours",
    ] {
        assert!(j.get(k).is_some(), "{k} in {j}");
    }
    assert_eq!(j["state"], "TIMEOUT");
    assert!(j.get("uid").is_none() && j.get("script_sha256").is_none());
}

/// No rule enabled: nothing evaluated, and the dry run says so.
#[test]
fn no_rule_enabled_says_so() {
    let site = site();
    site.write(&[job(150, ALICE, "cpu", 1, timeout)]);
    let ev = site.evaluate();
    assert!(ev.users.is_empty() && ev.rules.is_empty());
    assert!(words::dry_run(&site.cfg, &ev, Zone::Utc).contains("no alert rule is enabled"));
}

#[test]
fn periods_start_on_mondays() {
    // 2026-03-02 00:00 UTC was a Monday (1772409600); 2026-03-08 23:59:59 is the same week.
    assert_eq!(period_start(1_772_409_600, 7), 1_772_409_600);
    assert_eq!(
        period_start(1_772_409_600 + 7 * DAY_S - 1, 7),
        1_772_409_600
    );
    assert_eq!(
        period_start(1_772_409_600 + 7 * DAY_S, 7),
        1_772_409_600 + 7 * DAY_S
    );
    // One day: the UTC day.
    assert_eq!(
        period_start(1_772_409_600 + 3 * DAY_S + 5, 1),
        1_772_409_600 + 3 * DAY_S
    );
}

/// One send, delivered by SMTP to a server on the loopback (the deliver crate's test server):
/// the user's mail arrives, with its envelope and its table.
#[test]
fn a_send_is_delivered_through_smtp() {
    use jobscope_deliver::mail::test_smtp::{Mode, Sink};
    let sink = Sink::start(Mode::Accept);
    let mut site = site();
    site.cfg.mail.transport = jobscope_config::MailTransportKind::Smtp;
    site.cfg.mail.smtp.host = "127.0.0.1".into();
    site.cfg.mail.smtp.port = sink.port();
    site.cfg.alerts.timeouts.enabled = true;
    site.cfg.alerts.timeouts.min_jobs = 2;
    site.write(&[
        job(160, ALICE, "cpu", 1, timeout),
        job(161, ALICE, "cpu", 2, timeout),
    ]);
    let rep = site.send_at(now_s());
    assert!(rep.ok());
    let flushed = jobscope_deliver::notify::flush(
        &site.cfg,
        std::time::Duration::from_secs(30),
        jobscope_deliver::mail::queue::FlushMode::Full,
    )
    .unwrap();
    let got = sink.messages();
    assert_eq!(got.len(), 1, "{flushed}");
    assert_eq!(got[0].to, ["alice@example.org"]);
    assert_eq!(got[0].from, "jobscope@cluster.example.org");
    let m = eml(&got[0].data);
    let text = m.body_text(0).unwrap();
    assert!(text.contains("160") && text.contains("161"), "{text}");
    let _ = &site.dir;
}

// The phases of `evaluate`, each on its own.

/// A job of a finding with only what the phases read: its key, end and waste.
fn alert_job(job_id: u32, end_unix_ms: u64, waste_hours: f64) -> AlertJob {
    AlertJob {
        cluster: Some("c1".into()),
        job_id,
        start_unix_s: 1000 + u64::from(job_id),
        end_unix_s: (end_unix_ms / 1000) as i64,
        name: None,
        partition: None,
        state: "COMPLETED".into(),
        elapsed_s: 60.0,
        alloc_cores: None,
        alloc_gpus: None,
        alloc_mem_per_node_bytes: None,
        mem_peak_bytes: None,
        cpu_eff_pct: None,
        core_hours_alloc: None,
        core_hours_wasted: None,
        mem_gb_hours_wasted: None,
        gpu_hours_wasted: None,
        gpus_idle: None,
        gpus_never_used: None,
        mem_peak_p95_bytes: None,
        partition_busy_pct: None,
        waste_hours,
        uid: 1001,
        user: "alice".into(),
        script_sha256: None,
        start_unix_ms: (1000 + u64::from(job_id)) * 1000,
        end_unix_ms,
        cpu_usage_s: None,
        mail_never: false,
    }
}

fn finding(rule: Rule, jobs: Vec<AlertJob>) -> Finding {
    let runs = jobs
        .iter()
        .map(|j| FoundRun {
            cluster: j.cluster.as_deref().map(Arc::from),
            job_id: j.job_id,
            start_unix_s: j.start_unix_s,
            end_unix_s: j.end_unix_s,
            waste_hours: j.waste_hours,
        })
        .collect();
    Finding {
        rule,
        window_days: 7,
        waste_hours: 1.0,
        waste_unit: rule.unit(),
        jobs,
        runs,
    }
}

/// A hit of job `job_id` (its row: batch 0, row `job_id`) with what the phases after the rules'
/// tests read.
fn hit(job_id: u32, end_unix_ms: u64, waste_hours: f64) -> Hit {
    Hit {
        uid: 1001,
        rule: Rule::Timeouts,
        end_unix_ms,
        job_id,
        start_unix_s: 1000 + u64::from(job_id),
        at: (0, job_id),
        pass: Pass {
            waste_hours,
            mem_peak_p95_bytes: None,
            partition_busy_pct: None,
        },
        mail_never: false,
    }
}

#[test]
fn the_decision_is_opted_out_then_no_address_then_already_mailed_then_mail() {
    let one = vec![finding(Rule::Timeouts, vec![alert_job(1, 5_000, 1.0)])];
    let two = vec![
        finding(Rule::Timeouts, vec![alert_job(1, 5_000, 1.0)]),
        finding(Rule::CpuEfficiency, vec![alert_job(2, 5_000, 1.0)]),
    ];
    let period = 1_772_409_600;
    // Nothing left: opted out, whatever else holds.
    let (d, why) = decide(&[], Some("no domain".into()), Some(period), period);
    assert_eq!(d, Decision::OptedOut);
    assert!(why.contains("--jobscope-mail=never"), "{why}");
    // No address before "mailed already".
    let (d, why) = decide(&one, Some("no domain".into()), Some(period), period);
    assert_eq!(
        (d, why.as_str()),
        (Decision::NoAddress, "no address: no domain")
    );
    let (d, why) = decide(&one, None, Some(period), period);
    assert_eq!(d, Decision::AlreadyMailed);
    assert!(
        why.contains("2026-03-02"),
        "the period's start in UTC: {why}"
    );
    // A mail in an earlier period does not hold this one back.
    let (d, why) = decide(&one, None, Some(period - 7 * 86_400), period);
    assert_eq!(
        (d, why.as_str()),
        (Decision::Mail, "1 rule fired over jobs not reported before")
    );
    let (d, why) = decide(&two, None, None, period);
    assert_eq!(
        (d, why.as_str()),
        (
            Decision::Mail,
            "2 rules fired over jobs not reported before"
        )
    );
}

#[test]
fn opted_out_jobs_are_taken_away_and_counted_once() {
    let job = |id, never| Hit {
        mail_never: never,
        ..hit(id, 1, 1.0)
    };
    let mut per_rule = BTreeMap::new();
    per_rule.insert(
        Rule::Timeouts,
        vec![job(1, false), job(2, true), job(3, false)],
    );
    // Job 2 is in two rules: opted out once, counted once.
    per_rule.insert(
        Rule::CpuEfficiency,
        vec![job(2, true), job(4, true), job(5, false)],
    );
    let notes = drop_opted_out(&mut per_rule);
    let left: Vec<(Rule, Vec<u32>)> = per_rule
        .iter()
        .map(|(r, hs)| (*r, hs.iter().map(|h| h.job_id).collect()))
        .collect();
    assert_eq!(
        left,
        [(Rule::CpuEfficiency, vec![5]), (Rule::Timeouts, vec![1, 3])]
    );
    assert_eq!(notes, ["2 jobs left out: run with --jobscope-mail=never"]);
    let mut one = BTreeMap::from([(Rule::Timeouts, vec![job(7, true)])]);
    assert_eq!(
        drop_opted_out(&mut one),
        ["1 job left out: run with --jobscope-mail=never"]
    );
    let mut none = BTreeMap::from([(Rule::Timeouts, vec![job(8, false)])]);
    assert!(drop_opted_out(&mut none).is_empty());
}

#[test]
fn findings_keep_the_rules_still_met_with_the_most_wasteful_jobs_first() {
    let mut cfg = Config::default();
    cfg.alerts.timeouts.min_jobs = 3;
    cfg.alerts.cpu_efficiency.min_jobs = 2;
    let rules = [(Rule::CpuEfficiency, 14), (Rule::Timeouts, 7)];
    let mut per_rule = BTreeMap::from([
        // 3 jobs: met. Equal waste: the earlier end first, then the lower id.
        (
            Rule::Timeouts,
            vec![
                hit(9, 2_000, 1.0),
                hit(3, 9_000, 5.0),
                hit(8, 1_000, 1.0),
                hit(7, 1_000, 1.0),
            ],
        ),
        // 1 job of the 2 needed (the others opted out): no longer met.
        (Rule::CpuEfficiency, vec![hit(4, 1_000, 9.0)]),
    ]);
    still_met(&cfg, &mut per_rule);
    let mut made = Vec::new();
    let f = findings_of(
        &rules,
        per_rule,
        InFull::First(2),
        &|h| Some(alert_job(h.job_id, h.end_unix_ms, h.pass.waste_hours)),
        &mut |h| {
            made.push(h.job_id);
            FoundRun {
                cluster: Some("c1".into()),
                job_id: h.job_id,
                start_unix_s: h.start_unix_s,
                end_unix_s: (h.end_unix_ms / 1000) as i64,
                waste_hours: h.pass.waste_hours,
            }
        },
    );
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].rule, Rule::Timeouts);
    assert_eq!(f[0].window_days, 7);
    let order: Vec<u32> = f[0].runs.iter().map(|j| j.job_id).collect();
    assert_eq!(order, [3, 7, 8, 9]);
    assert_eq!(made, [3, 7, 8, 9], "each run made once");
    // The first two in full, with the waste their pass gave them.
    let full: Vec<(u32, f64)> = f[0]
        .jobs
        .iter()
        .map(|j| (j.job_id, j.waste_hours))
        .collect();
    assert_eq!(full, [(3, 5.0), (7, 1.0)]);
    assert!(close(f[0].waste_hours, 8.0), "{}", f[0].waste_hours);
}

/// A finding made with its first jobs in full (the dry run, the mails) holds every run, and says
/// and records what the one with every job in full (`--json`) says and records: the first jobs
/// are the same, the waste and the runs too, and the dry run's text is the same to the byte.
#[test]
fn a_finding_lists_its_first_jobs_in_full_and_counts_every_one() {
    let mut site = site();
    site.cfg.alerts.timeouts.enabled = true;
    site.cfg.alerts.timeouts.min_jobs = 2;
    site.cfg.alerts.max_jobs_listed = 2;
    // Five TIMEOUTs of alice's, 8 core-hours each (7200 s on 4 cores), and two of bob's.
    site.write(&[
        job(150, ALICE, "cpu", 1, timeout),
        job(151, ALICE, "cpu", 2, timeout),
        job(152, ALICE, "cpu", 3, timeout),
        job(153, ALICE, "cpu", 4, timeout),
        job(154, ALICE, "cpu", 5, timeout),
        job(160, BOB, "cpu", 1, timeout),
        job(161, BOB, "cpu", 2, timeout),
    ]);
    let now = now_s();
    let every = site.evaluate_listing(now, &Sent::default(), InFull::Every);
    let first = site.evaluate_listing(now, &Sent::default(), InFull::First(2));
    let (a_every, a_first) = (
        user(&every, "alice").unwrap(),
        user(&first, "alice").unwrap(),
    );
    let (fe, ff) = (&a_every.findings[0], &a_first.findings[0]);
    assert_eq!(fe.jobs.len(), 5);
    assert_eq!(ff.jobs.len(), 2);
    assert_eq!(ff.jobs[..], fe.jobs[..2]);
    assert_eq!(ff.runs.len(), 5);
    assert_eq!(ff.runs, fe.runs);
    assert!(close(ff.waste_hours, 40.0), "{}", ff.waste_hours);
    assert_eq!(a_first.waste(), a_every.waste());
    assert_eq!(a_first.reported(), a_every.reported());
    assert_eq!(a_first.reported()[&Rule::Timeouts].len(), 5);
    let text = words::dry_run(&site.cfg, &first, Zone::Utc);
    assert_eq!(text, words::dry_run(&site.cfg, &every, Zone::Utc));
    assert!(text.contains("… and 3 more jobs"), "{text}");
    assert!(text.contains("2 jobs in the last 7 days"), "bob's: {text}");
}
