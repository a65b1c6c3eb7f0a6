//! `cargo bench -p jobscope-core --bench sampler`: what one sample costs, next to reading the same
//! files raw, in the same run (interleaved A/B rounds, because these machines are noisy), and how
//! many spool bytes one sample takes.
//!
//! As root on a cgroup v1 host it measures a real cgroup it creates (`jobscope_bench/uid_0/job_1` in
//! the memory and cpuacct hierarchies, with this process inside, removed afterwards). Otherwise it
//! measures the captured fixture tree (plain files: a lower bound of the kernel's cost).

use jobscope_core::cgroup::{locate_job, JobCgroup};
use jobscope_core::procio::IoAccumulator;
use jobscope_core::sampler::{Faults, Sampler};
use jobscope_core::spool::writer::{Limits, SeriesWriter};
use jobscope_core::spool::{Header, FORMAT_VERSION};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

const ROUNDS: usize = 20;
const PER_ROUND: usize = 200;

struct RealCgroup {
    dirs: Vec<PathBuf>,
}

impl RealCgroup {
    fn create() -> Option<(RealCgroup, JobCgroup)> {
        let root = Path::new("/sys/fs/cgroup");
        let mut dirs = Vec::new();
        for ctrl in ["memory", "cpuacct"] {
            let d = root.join(ctrl).join("jobscope_bench/uid_0/job_1");
            std::fs::create_dir_all(&d).ok()?;
            std::fs::write(d.join("cgroup.procs"), std::process::id().to_string()).ok()?;
            dirs.push(d);
        }
        let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let cg = locate_job(&text, root, 1)?;
        Some((RealCgroup { dirs }, cg))
    }
}

impl Drop for RealCgroup {
    fn drop(&mut self) {
        // Move back to the root cgroups, then remove ours (deepest first).
        for d in &self.dirs {
            let ctrl_root: PathBuf = d.ancestors().nth(3).unwrap().to_path_buf();
            let _ = std::fs::write(
                ctrl_root.join("cgroup.procs"),
                std::process::id().to_string(),
            );
            for a in d.ancestors().take(3) {
                let _ = std::fs::remove_dir(a);
            }
        }
    }
}

/// The files one v1 sample reads, read raw: open + read + close each, no parsing.
fn raw_files(cg: &JobCgroup) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = [
        "cpuacct.usage",
        "cpuacct.usage_user",
        "cpuacct.usage_sys",
        "cpuacct.usage_percpu",
        "cgroup.procs",
        "tasks",
    ]
    .iter()
    .map(|f| cg.cpu_dir.join(f))
    .collect();
    v.extend(
        [
            "memory.usage_in_bytes",
            "memory.max_usage_in_bytes",
            "memory.limit_in_bytes",
            "memory.failcnt",
            "memory.stat",
            "memory.oom_control",
        ]
        .iter()
        .map(|f| cg.memory_dir.join(f)),
    );
    v.push(PathBuf::from(format!("/proc/{}/io", std::process::id())));
    v
}

fn read_raw(files: &[PathBuf], buf: &mut Vec<u8>) {
    for f in files {
        buf.clear();
        if let Ok(mut h) = std::fs::File::open(f) {
            let _ = h.read_to_end(buf);
        }
    }
}

fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[(v.len() * 95 / 100).min(v.len() - 1)])
}

fn header() -> Header {
    Header {
        format_version: FORMAT_VERSION,
        job_id: 1,
        node: "bench".into(),
        series: "job".into(),
        uid: 0,
        gid: 0,
        cgroup_version: None,
        cgroup_path: None,
        boot_id: None,
        boot_time_s: None,
        start_unix_ms: 0,
        cadence_s: 30,
        plugin_version: "bench".into(),
        alloc_cores: Some(2),
        alloc_mem_bytes: None,
        handover: None,
    }
}

fn main() {
    let real = RealCgroup::create();
    let (cg, what) = match &real {
        Some((_, cg)) => (cg.clone(), "a real cgroup v1 job cgroup (kernel cgroupfs)"),
        None => {
            let fx = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/cgroup-v1-debian12-slurm-22.05");
            let text = std::fs::read_to_string(fx.join("proc-self-cgroup.batch.txt")).unwrap();
            (
                locate_job(&text, &fx, 1).expect("fixture locates"),
                "the captured fixture tree (plain files; not root or no cgroup v1)",
            )
        }
    };
    println!("jobscope sampler benchmark on {what}");
    let proc_root = PathBuf::from("/proc");
    let files = raw_files(&cg);
    let mut io = IoAccumulator::default();
    let mut buf = Vec::with_capacity(64 * 1024);
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            std::hint::black_box(cg.read_with(&proc_root, Some(&mut io)));
        }
        ours.push(t.elapsed().as_secs_f64() * 1e6 / PER_ROUND as f64);
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            read_raw(&files, &mut buf);
        }
        raw.push(t.elapsed().as_secs_f64() * 1e6 / PER_ROUND as f64);
    }
    let (om, op) = stats(ours);
    let (rm, rp) = stats(raw);
    println!(
        "  jobscope read (parse + /proc io):   median {om:7.1} µs   p95 {op:7.1} µs per sample"
    );
    println!(
        "  raw open+read of the same {} files: median {rm:7.1} µs   p95 {rp:7.1} µs per sample",
        files.len()
    );
    println!(
        "  overhead over raw reads:            {:+.1} µs ({:.2}×)",
        om - rm,
        om / rm
    );
    println!(
        "  at a 30 s cadence: {:.2} millionths of one core",
        om / 30e6 * 1e6
    );

    // Spool bytes per sample, with the real sampler writing a real spool.
    let dir = tempfile::tempdir().unwrap();
    let w = SeriesWriter::create(dir.path(), "job.jsc", header(), Limits::default()).unwrap();
    let mut s = Sampler::new(
        cg.clone(),
        proc_root.clone(),
        Some(w),
        Box::new(|_| {}),
        Faults::default(),
    );
    let n = 1000;
    let t = Instant::now();
    for _ in 0..n {
        s.sample_once();
    }
    let full = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let size = std::fs::metadata(dir.path().join("job.jsc")).unwrap().len();
    println!("  full sample (read + gauges + spool append): {full:.1} µs");
    println!("  spool: {size} bytes for {n} samples = {:.1} bytes/sample (cap 1 MiB per node-job: thinning starts after ~{} samples = {:.1} days at 30 s)",
        size as f64 / n as f64,
        (Limits::default().max_bytes as f64 / (size as f64 / n as f64)).min(Limits::default().max_buckets as f64) as u64,
        (Limits::default().max_bytes as f64 / (size as f64 / n as f64)).min(Limits::default().max_buckets as f64) * 30.0 / 86400.0);
    drop(s);
    drop(real);
}
