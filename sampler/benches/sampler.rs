//! `cargo bench -p jobscope-sampler --bench sampler`: what one jobscope read of a job cgroup costs,
//! next to the floor (the same files read with `pread` through descriptors kept open, no
//! parsing) and to re-opening each file every time, measured side by side in one run
//! (interleaved rounds, because these machines are noisy); then how many spool bytes one sample
//! takes.
//!
//! Setups: the captured v1 fixture tree and the hand-built v2 fixture tree (plain files), and,
//! as root on a cgroup v1 host, a real job cgroup it creates in the memory and cpuacct
//! hierarchies, SLURM's layout (`jobscope_bench/uid_0/job_1/{step_extern,step_0}/task_0`) with
//! 10 `sleep` processes in it, so `/proc/<pid>/io` counts; all removed afterwards.
//!
//! "The same files" are those the reader read in its last sample ([`JobCgroupReader::files`]):
//! control files, each sub-cgroup's pid lists, `/proc/<pid>/io` of each process. The floor reads
//! each to end of file, as the reader does.
//!
//! Two paces on the real cgroup. Back to back (many samples in a row), the reader opens a real v1
//! cgroup's `cgroup.procs`/`tasks` afresh each sample (a kept descriptor read again within 1 s
//! shows the kernel's cached pid list, see `sampler/src/cgroup/reader.rs`), while the floor re-reads
//! them through kept descriptors, i.e. the cached lists: a floor lower than any correct reader
//! can reach. Paced, one call every 1.6 s (rounds of reader, floor and reopen in turn), the
//! kernel has dropped its cached lists before each call, so the reader reads every file through
//! its kept descriptors and all three pay for the lists being built afresh: what the sampler pays
//! at its cadence (4 s and more after the first second). Each call gets its own 1.6 s pause,
//! because the cached list is shared by all readers of a file: a floor read right after the
//! reader's would find the list the reader just built. `JOBSCOPE_BENCH_PACED_ROUNDS` sets the
//! number of paced rounds (default 30, i.e. 2.4 minutes).

use jobscope_model::spool::Header;
use jobscope_sampler::cgroup::{locate, JobCgroup, JobCgroupReader};
use jobscope_sampler::procio::kfile::{open_file, ReadBuf};
use jobscope_sampler::sampler::Sampler;
use jobscope_sampler::spool::writer::{Limits, SeriesWriter};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const ROUNDS: usize = 30;
const PER_ROUND: usize = 200;
const BENCH_PROCESSES: usize = 10;
/// Pause before each paced call: longer than the reader's `PIDLIST_REUSE_AFTER` (1.5 s).
const PACE: Duration = Duration::from_millis(1600);
const PACED_ROUNDS: usize = 30;

/// A real v1 job cgroup with `BENCH_PROCESSES` sleeping processes, removed on drop.
struct RealCgroup {
    children: Vec<Child>,
    /// Deepest first, per controller.
    dirs: Vec<PathBuf>,
}

impl RealCgroup {
    fn create() -> Option<(RealCgroup, JobCgroup)> {
        let root = Path::new("/sys/fs/cgroup");
        if !root.join("memory").is_dir() || !root.join("cpuacct").is_dir() {
            return None;
        }
        let mut rc = RealCgroup {
            children: Vec::new(),
            dirs: Vec::new(),
        };
        let job = "jobscope_bench/uid_0/job_1";
        for ctrl in ["memory", "cpuacct"] {
            let base = root.join(ctrl);
            for leaf in ["step_extern/task_0", "step_0/task_0"] {
                std::fs::create_dir_all(base.join(job).join(leaf)).ok()?;
            }
            for d in [
                "jobscope_bench/uid_0/job_1/step_extern/task_0",
                "jobscope_bench/uid_0/job_1/step_extern",
                "jobscope_bench/uid_0/job_1/step_0/task_0",
                "jobscope_bench/uid_0/job_1/step_0",
                "jobscope_bench/uid_0/job_1",
                "jobscope_bench/uid_0",
                "jobscope_bench",
            ] {
                rc.dirs.push(base.join(d));
            }
        }
        for i in 0..BENCH_PROCESSES {
            let child = Command::new("sleep").arg("600").spawn().ok()?;
            let pid = child.id().to_string();
            rc.children.push(child);
            // One process in the extern step (as `sleep infinity` there), the rest in step 0.
            let leaf = if i == 0 {
                "step_extern/task_0"
            } else {
                "step_0/task_0"
            };
            for ctrl in ["memory", "cpuacct"] {
                let procs = root.join(ctrl).join(job).join(leaf).join("cgroup.procs");
                std::fs::write(procs, &pid).ok()?;
            }
        }
        let pid = rc.children.last()?.id();
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let cg = locate(&text, root, &is_dir("job_1"))?;
        Some((rc, cg))
    }
}

impl Drop for RealCgroup {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// The locator's predicate: the job's directory is the one named `name` (the fixtures' and this
/// benchmark's trees copy SLURM's layout; the plugin's own predicate is in plugin/src/scope.rs).
fn is_dir(name: &'static str) -> impl Fn(&str) -> bool {
    move |c| c == name
}

fn stats(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[(v.len() * 95 / 100).min(v.len() - 1)])
}

/// Reads each kept file to end of file with `pread`, no parsing.
fn read_kept(files: &[(PathBuf, File)], buf: &mut ReadBuf) {
    for (p, f) in files {
        let _ = std::hint::black_box(buf.read_all(f, p).map(str::len));
    }
}

/// Opens, reads and closes each file.
fn read_reopened(files: &[PathBuf], buf: &mut ReadBuf) {
    for p in files {
        if let Ok(f) = open_file(p) {
            let _ = std::hint::black_box(buf.read_all(&f, p).map(str::len));
        }
    }
}

struct Figures {
    ours: (f64, f64),
    floor: (f64, f64),
    reopen: (f64, f64),
}

impl Figures {
    fn new(ours: Vec<f64>, floor: Vec<f64>, reopen: Vec<f64>) -> Figures {
        Figures {
            ours: stats(ours),
            floor: stats(floor),
            reopen: stats(reopen),
        }
    }

    fn print(&self) {
        for (what, (m, p)) in [
            ("jobscope reader (pread + parse)", self.ours),
            ("floor: pread, kept fds, no parse", self.floor),
            ("reopen every file, no parse", self.reopen),
        ] {
            println!(
                "  {what:34} median {m:7.1} µs   p95 {p:7.1} µs   {:5.2}× floor (p95 {:5.2}×)",
                m / self.floor.0,
                p / self.floor.1
            );
        }
    }
}

/// The reader after one sample, the files it read, and those files opened (the floor's).
fn setup(
    cg: &JobCgroup,
    proc_root: &Path,
) -> (JobCgroupReader, Vec<PathBuf>, Vec<(PathBuf, File)>) {
    let mut reader = JobCgroupReader::new(cg.clone(), proc_root.to_path_buf());
    reader.sample();
    let paths = reader.files();
    let kept = paths
        .iter()
        .filter_map(|p| open_file(p).ok().map(|f| (p.clone(), f)))
        .collect();
    (reader, paths, kept)
}

/// Measures one setup: jobscope's reader, the kept-descriptor floor and reopening, interleaved.
fn measure(name: &str, cg: &JobCgroup, proc_root: &Path) -> Figures {
    let (mut reader, paths, kept) = setup(cg, proc_root);
    let mut buf = ReadBuf::new();
    let reopens_before = reader.pid_list_reopens();
    let (mut ours, mut floor, mut reopen) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // Rotate the order so no method always runs first after a pause.
        for k in 0..3 {
            let t = Instant::now();
            match (round + k) % 3 {
                0 => {
                    for _ in 0..PER_ROUND {
                        std::hint::black_box(reader.sample());
                    }
                }
                1 => {
                    for _ in 0..PER_ROUND {
                        read_kept(&kept, &mut buf);
                    }
                }
                _ => {
                    for _ in 0..PER_ROUND {
                        read_reopened(&paths, &mut buf);
                    }
                }
            }
            let us = t.elapsed().as_secs_f64() * 1e6 / PER_ROUND as f64;
            match (round + k) % 3 {
                0 => ours.push(us),
                1 => floor.push(us),
                _ => reopen.push(us),
            }
        }
    }
    let reopens = reader.pid_list_reopens() - reopens_before;
    let f = Figures::new(ours, floor, reopen);
    let snap = reader.sample();
    println!(
        "\n{name}, back to back: {} files per sample ({} kept /proc/<pid>/io), tasks {:?}, \
         pid lists opened afresh per sample: {:.1}",
        paths.len(),
        reader.io().kept_fds(),
        snap.reading.tasks,
        reopens as f64 / (ROUNDS * PER_ROUND) as f64
    );
    f.print();
    f
}

/// Measures one setup at the sampler's pace: one call every [`PACE`], reader, floor and reopen
/// in turn (rotated per round), one call each per round.
fn measure_paced(name: &str, cg: &JobCgroup, proc_root: &Path, rounds: usize) -> Figures {
    let (mut reader, paths, kept) = setup(cg, proc_root);
    let mut buf = ReadBuf::new();
    let reopens_before = reader.pid_list_reopens();
    let (mut ours, mut floor, mut reopen) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        for k in 0..3 {
            std::thread::sleep(PACE);
            let which = (round + k) % 3;
            let t = Instant::now();
            match which {
                0 => {
                    std::hint::black_box(reader.sample());
                }
                1 => read_kept(&kept, &mut buf),
                _ => read_reopened(&paths, &mut buf),
            }
            let us = t.elapsed().as_secs_f64() * 1e6;
            match which {
                0 => ours.push(us),
                1 => floor.push(us),
                _ => reopen.push(us),
            }
        }
    }
    let f = Figures::new(ours, floor, reopen);
    println!(
        "\n{name}, paced ({rounds} rounds, each call after a {:.1} s pause): {} files per \
         sample, pid lists opened afresh in all: {}",
        PACE.as_secs_f64(),
        paths.len(),
        reader.pid_list_reopens() - reopens_before
    );
    f.print();
    f
}

fn header() -> Header {
    Header {
        plugin_version: "bench".into(),
        alloc_cores: Some(2),
        ..Header::new(1, "bench", "job", 0)
    }
}

fn main() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    println!("jobscope sampler benchmark: one read of a job cgroup, per sample");

    let v1 = manifest.join("testdata/cgroup-v1-debian12-slurm-22.05");
    let text = std::fs::read_to_string(v1.join("proc-self-cgroup.extern.txt")).unwrap();
    let v1_cg = locate(&text, &v1, &is_dir("job_1")).expect("v1 fixture locates");
    measure("v1 fixture tree (plain files)", &v1_cg, &v1.join("proc"));

    let v2 = manifest.join("testdata/cgroup-v2-slurm-layout");
    let text = std::fs::read_to_string(v2.join("proc-self-cgroup.task.txt")).unwrap();
    let v2_cg = locate(&text, &v2, &is_dir("job_4242")).expect("v2 fixture locates");
    measure("v2 fixture tree (plain files)", &v2_cg, &v2);

    let real = RealCgroup::create();
    let proc_root = PathBuf::from("/proc");
    let cg = match &real {
        Some((_, cg)) => {
            let f = measure(
                "real cgroup v1 job cgroup (cgroupfs, 10 processes)",
                cg,
                &proc_root,
            );
            let rounds = std::env::var("JOBSCOPE_BENCH_PACED_ROUNDS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(PACED_ROUNDS);
            let paced = if rounds > 0 {
                measure_paced(
                    "real cgroup v1 job cgroup (cgroupfs, 10 processes)",
                    cg,
                    &proc_root,
                    rounds,
                )
            } else {
                f
            };
            println!(
                "  at a 30 s cadence: {:.2} millionths of one core",
                paced.ours.0 / 30e6 * 1e6
            );
            cg.clone()
        }
        None => {
            println!("\nreal cgroup: skipped (needs root and the cgroup v1 memory and cpuacct hierarchies)");
            v1_cg
        }
    };

    // Spool bytes per sample, with the real sampler writing a real spool.
    let dir = tempfile::tempdir().unwrap();
    let w = SeriesWriter::create(dir.path(), "job.jsc", header(), Limits::default()).unwrap();
    let root = if real.is_some() {
        proc_root
    } else {
        v1.join("proc")
    };
    let mut s = Sampler::new(cg, root, Some(w), Box::new(|_| {}));
    let n = 1000;
    let t = Instant::now();
    for _ in 0..n {
        s.sample_once();
    }
    let full = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let size = std::fs::metadata(dir.path().join("job.jsc")).unwrap().len();
    println!("\nfull sample (read + gauges + spool append): {full:.1} µs");
    println!("spool: {size} bytes for {n} samples = {:.1} bytes/sample (cap 1 MiB per node-job: thinning starts after ~{} samples = {:.1} days at 30 s)",
        size as f64 / n as f64,
        (Limits::default().max_bytes as f64 / (size as f64 / n as f64)).min(Limits::default().max_buckets as f64) as u64,
        (Limits::default().max_bytes as f64 / (size as f64 / n as f64)).min(Limits::default().max_buckets as f64) * 30.0 / 86400.0);
    drop(s);
    drop(real);
}
