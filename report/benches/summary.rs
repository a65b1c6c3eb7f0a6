//! `cargo bench -p jobscope-report --bench summary`: the epilog's summary time (read spools,
//! summarise nodes, assemble, analyse, render the text report) for synthetic spools written by the
//! real spool writer (so thinning is what the plugin would do):
//! - a 1-day job on 1 node at a 30 s cadence (2 880 samples);
//! - a 30-day job on 64 nodes at 30 s (86 400 samples per node, thinned to the 1 MiB cap).
//!
//! Also prints the spool size per node. Targets from the design: < 50 ms and < 1 s.

use jobscope_common::spool::read_spool_file;
use jobscope_config::Config;
use jobscope_model::job::JobFacts;
use jobscope_model::sample::Reading;
use jobscope_model::spool::codec::{bucket_frame, end_frame, file_start};
use jobscope_model::spool::{Bucket, End, Gauge, GaugeId, Header, N_GAUGES};
use jobscope_report::pipeline::{self, NodeEnd};
use jobscope_report::present::render_text;
use jobscope_sampler::spool::writer::{Limits, SeriesWriter};
use std::path::Path;
use std::time::Instant;

fn header(node: &str) -> Header {
    Header {
        uid: 1001,
        gid: 1001,
        cgroup_version: Some(jobscope_model::sample::CgroupVersion::V1),
        plugin_version: "bench".into(),
        alloc_cores: Some(64),
        alloc_mem_bytes: Some(256 << 30),
        ..Header::new(4242, node, "job", 1_700_000_000_000)
    }
}

/// A plausible sample: a busy phase pattern, memory with a slow ripple, I/O bursts.
fn sample(i: u64) -> Bucket {
    let t = 1_700_000_000_000 + i * 30_000;
    let busy = 40.0 + 20.0 * ((i as f64) / 200.0).sin();
    let mem = ((100u64 << 30) as f64 * (1.0 + 0.2 * ((i as f64) / 50.0).cos())) as u64;
    let mut gauges = [None; N_GAUGES];
    gauges[GaugeId::MemCurrentBytes as usize] = Some(Gauge::one(mem));
    gauges[GaugeId::BusyMilliCores as usize] = Some(Gauge::one((busy * 1000.0) as u64));
    gauges[GaugeId::Tasks as usize] = Some(Gauge::one(64));
    let cpu_ns = (i as f64 * 30.0 * 40.0 * 1e9) as u64;
    Bucket {
        t_first_ms: t,
        t_last_ms: t,
        n: 1,
        last: Reading {
            cpu_usage_ns: Some(cpu_ns),
            cpu_user_ns: Some(cpu_ns / 10 * 9),
            cpu_system_ns: Some(cpu_ns / 10),
            mem_current_bytes: Some(mem),
            mem_peak_bytes: Some(130 << 30),
            mem_limit_bytes: Some(256 << 30),
            mem_rss_bytes: Some(mem / 10 * 9),
            mem_cache_bytes: Some(mem / 10),
            mem_shmem_bytes: Some(0),
            mem_failcnt: Some(0),
            mem_oom_kill_events: Some(0),
            tasks: Some(64),
            threads: Some(128),
            io_read_bytes: Some(i * 1_000_000),
            io_write_bytes: Some(i * 500_000),
            ..Default::default()
        },
        gauges,
    }
}

/// Writes one node's spool with the real writer; returns its size.
fn write_node(dir: &Path, node: &str, samples: u64) -> u64 {
    let d = dir.join(node);
    std::fs::create_dir_all(&d).unwrap();
    let mut w = SeriesWriter::create(&d, "job.jsc", header(node), Limits::default()).unwrap();
    for i in 0..samples {
        w.push(sample(i)).unwrap();
    }
    w.end(&End {
        t_ms: 1_700_000_000_000 + samples * 30_000,
        reason: "stopped".into(),
        samples_taken: samples,
        samples_missed: 0,
    })
    .unwrap();
    std::fs::metadata(d.join("job.jsc")).unwrap().len()
}

/// Same series under another node name (re-encoded header), to build 64 nodes quickly.
fn clone_node(dir: &Path, from: &str, to: &str) {
    let f = read_spool_file(&dir.join(from).join("job.jsc")).unwrap();
    let mut bytes = file_start(&header(to));
    for b in &f.buckets {
        bytes.extend(bucket_frame(b));
    }
    bytes.extend(end_frame(f.end.as_ref().unwrap()));
    std::fs::create_dir_all(dir.join(to)).unwrap();
    std::fs::write(dir.join(to).join("job.jsc"), bytes).unwrap();
}

fn summarise(dir: &Path, nodes: &[String]) -> (f64, usize) {
    let cfg = Config::default();
    let t = Instant::now();
    let ns: Vec<_> = nodes
        .iter()
        .map(|n| {
            let end = NodeEnd::LastRecord { fallback_ms: 0 };
            let spool = pipeline::read_node_dir(&dir.join(n));
            pipeline::node(&spool, n, 4242, end, None, &cfg).summary
        })
        .collect();
    let facts = JobFacts {
        job_id: 4242,
        exit_code: Some(0),
        exit_signal: Some(0),
        ..Default::default()
    };
    let s = pipeline::job(
        &facts,
        ns,
        nodes,
        &cfg,
        "bench",
        &jobscope_report::slurm::decide_end,
    );
    let text = render_text(&s, false).unwrap();
    let json = serde_json::to_vec(&s).unwrap();
    std::hint::black_box((&text, &json));
    (t.elapsed().as_secs_f64() * 1000.0, json.len())
}

fn best_of(n: usize, f: impl Fn() -> (f64, usize)) -> (f64, f64, usize) {
    let mut v: Vec<(f64, usize)> = (0..n).map(|_| f()).collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    (v[0].0, v[v.len() / 2].0, v[0].1)
}

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    println!(
        "jobscope epilog summary benchmark (read spools + summarise + assemble + analyse + render)"
    );

    let day = tmp.path().join("day");
    let size = write_node(&day, "n001", 2880);
    let (min, med, json) = best_of(9, || summarise(&day, &["n001".to_string()]));
    println!("  1-day job, 1 node, 2 880 samples:  min {min:6.1} ms  median {med:6.1} ms  (target < 50 ms); spool {size} bytes; JSON {json} bytes");

    let month = tmp.path().join("month");
    let t = Instant::now();
    let size = write_node(&month, "n001", 30 * 2880);
    let write_s = t.elapsed().as_secs_f64();
    let nodes: Vec<String> = (1..=64).map(|i| format!("n{i:03}")).collect();
    for n in &nodes[1..] {
        clone_node(&month, "n001", n);
    }
    let (min, med, json) = best_of(5, || summarise(&month, &nodes));
    println!("  30-day job, 64 nodes, 86 400 samples/node: min {min:6.1} ms  median {med:6.1} ms  (target < 1 s); spool {size} bytes/node (cap 1 MiB); JSON {json} bytes");
    println!("  (writing the 30-day spool of one node through the thinning writer took {write_s:.1} s, i.e. {:.1} µs per sample)", write_s * 1e6 / 86_400.0);
}
