//! `cargo bench -p jobscope-epilog --bench relay_down`: what the mail relay being down costs each
//! Epilog, i.e. how long the node stays COMPLETING after every job.
//!
//! 1. The whole Epilog (`run::run_epilog`: spool → report → archive → mail queued → flush) for 30
//!    jobs with the relay refusing connections and a growing backlog, in its two cases: the relay
//!    failed just before (the Epilog tries once and stops), and the relay is already marked down
//!    (it does not try). Target: < 100 ms at p95.
//! 2. Side by side in the same run, the flush alone over a backlog of 10 deferred messages at the
//!    default rate: the Epilog's mode (stop at the first failure) against a full flush, which is
//!    what every Epilog did before (seen: 1.85 s per job end with a 2 s budget).

use jobscope_config::{Config, MailPolicy, MailTransportKind};
use jobscope_deliver::mail::queue::{FlushMode, FlushOptions, Queue, RetryPolicy, RELAY_DOWN_FILE};
use jobscope_epilog::flow::run_epilog;
use jobscope_model::job::{JobFacts, JobState};
use jobscope_model::sample::Reading;
use jobscope_model::spool::{job_dir, Bucket, End, Event, EventKind, Header};
use jobscope_report::slurm::{EpilogEnv, FakeSlurm};
use jobscope_sampler::spool::writer::{Limits, SeriesWriter, StepWriter};
use std::time::{Duration, Instant};

const T0: u64 = 1_700_000_000_000;

fn header(job: u32, series: &str) -> Header {
    Header {
        uid: 1001,
        gid: 1001,
        plugin_version: "bench".into(),
        alloc_cores: Some(2),
        alloc_mem_bytes: Some(1 << 30),
        ..Header::new(job, "n1", series, T0)
    }
}

/// A 10-minute job's spool as the plugin leaves it.
fn spool(cfg: &Config, job: u32) {
    let dir = job_dir(&cfg.paths.spool_dir, job, "n1");
    std::fs::create_dir_all(&dir).unwrap();
    let mut w = SeriesWriter::create(&dir, "job.jsc", header(job, "job"), Limits::default())
        .expect("series");
    for i in 0..20u64 {
        w.push(Bucket {
            t_first_ms: T0 + i * 30_000,
            t_last_ms: T0 + i * 30_000,
            n: 1,
            last: Reading {
                cpu_usage_ns: Some(i * 45_000_000_000),
                mem_current_bytes: Some(300 << 20),
                ..Default::default()
            },
            gauges: Default::default(),
        })
        .unwrap();
    }
    w.end(&End {
        t_ms: T0 + 600_000,
        reason: "stopped".into(),
        samples_taken: 20,
        samples_missed: 0,
    })
    .unwrap();
    let mut s = StepWriter::create(&dir, &header(job, "batch")).unwrap();
    s.event(&Event {
        t_ms: T0 + 599_000,
        kind: EventKind::StepExit,
        step: Some("batch".into()),
        job: Some(Reading {
            cpu_usage_ns: Some(900_000_000_000),
            ..Default::default()
        }),
        step_reading: None,
        exit_status: Some(0),
        message: None,
    })
    .unwrap();
}

fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let d = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.paths.spool_dir = d.path().join("spool");
    cfg.paths.state_dir = d.path().join("state");
    cfg.paths.archive_dir = d.path().join("archive");
    cfg.paths.log_file = d.path().join("epilog.log");
    cfg.mail.queue_dir = d.path().join("mail");
    cfg.mail.enabled = true;
    cfg.mail.default_policy = MailPolicy::Always;
    cfg.mail.domain = Some("example.org".into());
    cfg.mail.transport = MailTransportKind::Smtp;
    cfg.mail.smtp.host = "127.0.0.1".into();
    cfg.mail.smtp.port = closed_port();
    cfg.mail.flush_budget_s = 2;
    let mut jobs = FakeSlurm::up();
    for job in 1..=30u32 {
        jobs = jobs.with_job(job, JobState::Completed);
        if let Some(f) = jobs.jobs.get_mut(&job) {
            *f = JobFacts {
                user: Some("alice".into()),
                uid: Some(1001),
                name: Some(format!("bench-{job}")),
                start_unix_s: Some(T0 / 1000),
                ..f.clone()
            };
        }
    }
    let queue = Queue::open(&cfg.mail.queue_dir).unwrap();
    let mut tried_once = Vec::new();
    let mut marked_down = Vec::new();
    for job in 1..=30u32 {
        spool(&cfg, job);
        let env = EpilogEnv {
            job_id: job,
            node: "n1".into(),
            uid: Some(1001),
            user: Some("alice".into()),
            nodelist: Some("n1".into()),
            exit_code2: Some("0:0".into()),
            ..Default::default()
        };
        // Odd jobs: the relay failed for an earlier Epilog and the marker says "down"; even
        // jobs: no marker, so this Epilog makes its one attempt.
        if job % 2 == 0 {
            let _ = std::fs::remove_file(queue.dir().join(RELAY_DOWN_FILE));
        }
        let t = Instant::now();
        run_epilog(&cfg, &env, &jobs, &mut |_| {}).expect("epilog");
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if job % 2 == 0 {
            tried_once.push(ms);
        } else if job > 1 {
            marked_down.push(ms);
        }
    }
    let queued = queue.list().len();
    println!("jobscope Epilog with the mail relay down (connection refused), {queued} messages queued at the end");
    for (what, v) in [
        ("relay failed before: one attempt", &mut tried_once),
        ("relay marked down: no attempt", &mut marked_down),
    ] {
        let n = v.len();
        println!(
            "  whole Epilog, {what:34} n={n:2}  median {:6.1} ms  p95 {:6.1} ms  max {:6.1} ms  (target p95 < 100 ms)",
            pct(v, 0.5),
            pct(v, 0.95),
            pct(v, 1.0)
        );
    }

    // 2. The flush alone over 10 deferred messages, both modes, alternating, at the default rate.
    // Messages must stay due and never age into dead letters while the clock is moved on.
    let retry = RetryPolicy {
        initial_backoff: Duration::from_secs(1),
        max_backoff: Duration::from_secs(1),
        max_age: Duration::from_secs(u32::MAX as u64),
        ..RetryPolicy::default()
    };
    let q2 = Queue::open(&d.path().join("mail2")).unwrap();
    let env = lettre::address::Envelope::new(
        Some("jobscope@example.org".parse().unwrap()),
        vec!["alice@example.org".parse().unwrap()],
    )
    .unwrap();
    for i in 0..10 {
        q2.enqueue(
            &format!("bench.{i}.0.end"),
            &env,
            b"Subject: x\r\n\r\nx\r\n",
        )
        .unwrap();
    }
    let transport = jobscope_deliver::mail::transport::Transport::Smtp(
        jobscope_deliver::mail::transport::SmtpConfig {
            host: "127.0.0.1".into(),
            port: cfg.mail.smtp.port,
            tls: jobscope_deliver::mail::transport::TlsMode::None,
            user: None,
            password: None,
            timeout: Duration::from_secs(2),
            ca_file: None,
            helo_name: None,
        },
    );
    let (mut epilog_mode, mut full_mode) = (Vec::new(), Vec::new());
    let mut now = jobscope_deliver::mail::queue::unix_now() + 10_000;
    for round in 0..10 {
        for mode in [FlushMode::Epilog, FlushMode::Full] {
            let _ = std::fs::remove_file(q2.dir().join(RELAY_DOWN_FILE));
            // Past every message's next attempt.
            now += 10;
            let opts = FlushOptions {
                deadline: Instant::now() + Duration::from_secs(cfg.mail.flush_budget_s),
                rate_per_s: cfg.mail.rate_per_s,
                retry,
                now_unix: now,
                mode,
            };
            let t = Instant::now();
            let r = q2.flush(&transport, &opts);
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            assert!(r.sent.is_empty(), "round {round}: the relay is down");
            assert!(r.dead.is_empty() && r.not_due == 0, "round {round}: {r:?}");
            match mode {
                FlushMode::Epilog => epilog_mode.push(ms),
                FlushMode::Full => full_mode.push(ms),
            }
        }
    }
    println!(
        "  flush of 10 deferred messages at {} msg/s, {} s budget, alternating, 10 rounds each:",
        cfg.mail.rate_per_s, cfg.mail.flush_budget_s
    );
    for (what, v) in [
        ("Epilog mode (stop at first failure)", &mut epilog_mode),
        ("full flush (every Epilog before)", &mut full_mode),
    ] {
        println!(
            "    {what:38} median {:7.1} ms  p95 {:7.1} ms",
            pct(v, 0.5),
            pct(v, 0.95)
        );
    }
}
