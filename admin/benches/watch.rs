//! `cargo bench -p jobscope-admin --bench watch`: what the rules over running jobs cost
//! (docs/watch.md). Figures printed, side by side in one run:
//!
//! 1. The rules alone (pure): every rule of a realistic set (idle GPU, low CPU, memory) planned
//!    for 1 000 running jobs, each 24 hours old with 2 GPUs (2 880 intervals of 30 s each) and
//!    240 CPU and memory points; beside it the floor of reading those figures once (a sum over
//!    every interval), which no evaluation can beat. Target: < 100 ms for the 1 000 jobs.
//! 2. A whole dry-run pass over 1 000 spool directories on disk, written by the sampler's own
//!    writers (2 GPUs, 240 buckets each, as the writer keeps them), SLURM's answers canned: what
//!    one pass of `jobscope watch` costs a node (per job: one read and one summary of its spool).
#![allow(clippy::manual_is_multiple_of)] // `is_multiple_of` needs Rust 1.87; the workspace builds with 1.85
use jobscope_admin::watch::pass;
use jobscope_config::Config;
use jobscope_model::job::{JobFacts, JobState};
use jobscope_model::sample::Reading;
use jobscope_model::spool::{Bucket, Header};
use jobscope_model::watch::*;
use jobscope_report::slurm::FakeSlurm;
use jobscope_sampler::gpu::testing::write_gpu_spool;
use jobscope_sampler::spool::writer::{Limits, SeriesWriter};
use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

const JOBS: u32 = 1_000;
const RUNS: usize = 15;
const START: u64 = 1_800_000_000_000;

fn rules() -> Vec<Rule> {
    vec![
        Rule {
            name: "idle-gpu".into(),
            kind: RuleKind::GpuIdle,
            minutes: 60.0,
            cancel: true,
            cancel_partitions: vec!["gpu".into()],
            ..Rule::default()
        },
        Rule {
            name: "cpu".into(),
            kind: RuleKind::CpuLow,
            minutes: 60.0,
            ..Rule::default()
        },
        Rule {
            name: "memory".into(),
            kind: RuleKind::MemNearLimit,
            minutes: 10.0,
            ..Rule::default()
        },
    ]
}

/// Job `i`: 2 GPUs over 24 h (one busy at 60 %, one idle with a 5 s burst a minute for a third
/// of the jobs), 8 cores at 2 busy, memory rising to 95 % of 64 GiB for one job in ten.
fn live_job(i: u32) -> LiveJob {
    let n = 2_880u64;
    let iv = |u: &dyn Fn(u64) -> f64| -> Vec<GpuInterval> {
        (0..n)
            .map(|k| GpuInterval {
                from_ms: START + k * 30_000,
                to_ms: START + (k + 1) * 30_000,
                util_pct: Some(u(k)),
            })
            .collect()
    };
    let burst = i % 3 == 0;
    let points = |v: &dyn Fn(u64) -> f64| -> Vec<Point> {
        (0..240u64)
            .map(|k| Point {
                from_ms: START + k * 360_000,
                to_ms: START + (k + 1) * 360_000,
                value: v(k),
            })
            .collect()
    };
    let limit = 64u64 << 30;
    LiveJob {
        job_id: i,
        node: "n1".into(),
        user: Some(format!("u{}", i % 50)),
        account: Some("acct".into()),
        partition: Some("gpu".into()),
        qos: Some("normal".into()),
        start_unix_ms: START,
        alloc_cores: Some(8),
        alloc_mem_bytes: Some(limit),
        cpu: points(&|_| 2.0),
        mem: points(&|k| {
            if i % 10 == 0 {
                limit as f64 * (0.5 + 0.45 * k as f64 / 239.0)
            } else {
                limit as f64 * 0.3
            }
        }),
        gpus: vec![
            GpuTrack {
                label: "GPU 0".into(),
                intervals: iv(&|_| 60.0),
            },
            GpuTrack {
                label: "GPU 1".into(),
                intervals: iv(&|k| if burst && k % 2 == 0 { 16.7 } else { 0.0 }),
            },
        ],
    }
}

fn median_p95(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let p95 = v[((v.len() as f64 * 0.95).ceil() as usize).min(v.len()) - 1];
    (v[v.len() / 2], p95)
}

fn pure() {
    let jobs: Vec<LiveJob> = (0..JOBS).map(live_job).collect();
    let rules = rules();
    let now = START + 86_400_000;
    let mut eval = Vec::new();
    let mut floor = Vec::new();
    let mut planned = 0;
    for _ in 0..RUNS {
        let t = Instant::now();
        let mut sum = 0.0;
        for j in &jobs {
            for g in &j.gpus {
                for iv in &g.intervals {
                    sum += iv.util_pct.unwrap_or(0.0);
                }
            }
            for p in j.cpu.iter().chain(&j.mem) {
                sum += p.value;
            }
        }
        std::hint::black_box(sum);
        floor.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        planned = 0;
        for j in &jobs {
            let (p, _) = plan(&rules, j, &[], now);
            planned += p.len();
        }
        eval.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (fm, fp) = median_p95(floor);
    let (em, ep) = median_p95(eval);
    println!(
        "1. rules over {JOBS} running jobs (24 h, 2 GPUs × 2 880 intervals, 3 rules), {RUNS} runs:"
    );
    println!("   floor (each figure read once)   median {fm:7.2} ms   p95 {fp:7.2} ms");
    println!("   every rule planned              median {em:7.2} ms   p95 {ep:7.2} ms   ({planned} actions planned; target < 100 ms)");
}

fn header(job: u32, series: &str) -> Header {
    Header {
        uid: 4242,
        gid: 4242,
        plugin_version: "bench".into(),
        alloc_cores: Some(8),
        alloc_mem_bytes: Some(64 << 30),
        ..Header::new(job, "n1", series, START)
    }
}

fn write_spool(root: &std::path::Path, job: u32) {
    let dir = root.join(format!("{job}.n1"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut w =
        SeriesWriter::<Bucket>::create(&dir, "job.jsc", header(job, "job"), Limits::default())
            .unwrap();
    for k in 1..=240u64 {
        let t = START + k * 360_000;
        w.push(Bucket {
            t_first_ms: t,
            t_last_ms: t,
            n: 1,
            last: Reading {
                cpu_usage_ns: Some(k * 360 * 2_000_000_000),
                mem_current_bytes: Some(20 << 30),
                ..Default::default()
            },
            gauges: Default::default(),
        })
        .unwrap();
    }
    w.flush().unwrap();
    let buckets: Vec<(u64, Vec<u64>)> = (1..=240u64)
        .map(|k| (START + k * 360_000, vec![60, 0]))
        .collect();
    write_gpu_spool(&dir, header(job, "gpu"), &buckets).unwrap();
}

fn whole_pass() {
    let d = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.paths.spool_dir = d.path().join("spool");
    cfg.paths.state_dir = d.path().join("state");
    cfg.watch.rules = rules();
    let mut slurm = FakeSlurm::up();
    for j in 1..=JOBS {
        write_spool(&cfg.paths.spool_dir, j);
        slurm.jobs.insert(
            j,
            JobFacts {
                job_id: j,
                user: Some("u".into()),
                partition: Some("gpu".into()),
                scheduler_state: Some(JobState::Running),
                ..Default::default()
            },
        );
    }
    let now = START + 86_400_000;
    let mut times = Vec::new();
    let mut acted = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let rep = pass(&cfg, &slurm, "n1", now, true).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e3);
        acted = rep.actions.len();
        assert_eq!(rep.jobs_running, JOBS as usize);
    }
    let (m, p) = median_p95(times);
    println!("2. one dry-run pass over {JOBS} spools on disk (24 h, 2 GPUs), 5 runs:");
    println!(
        "   median {m:8.1} ms   p95 {p:8.1} ms   ({:.2} ms a job; {acted} actions listed)",
        m / JOBS as f64
    );
}

fn main() {
    pure();
    whole_pass();
}
