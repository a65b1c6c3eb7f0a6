//! `cargo bench -p jobscope-sampler --bench kernel_read` (root, a kernel with BTF): what the
//! kernel view adds to one sample, i.e. `JobView::fill` (the collector's `state` from its mapped
//! page, the job's per-CPU counters with one `bpf(2)` lookup, and the 19 fields set), next to its
//! floor (one `bpf(2)` lookup of the one-element `state` array, the least any read of a BPF map
//! through the system call costs),
//! interleaved round by round in one run, medians printed, with a `getppid()` for the cost of
//! any system call on the machine. Issue 21 asks < 5 µs.
//!
//! It loads its own collector (pins under /sys/fs/bpf/jobscope-bench-read-<pid>, removed at the
//! end), registers one job and tags a busy process, so that the
//! counters change between reads as they do in a job. The per-CPU lookup copies one value per
//! possible CPU: the figure grows with the machine's CPU count, which is printed with it.

use jobscope_kernel::{launch, Collector, Options};
use jobscope_model::sample::Reading;
use jobscope_sampler::kernel_view::JobView;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Instant;

const ROUNDS: usize = 31;
const PER_ROUND: usize = 2_000;
const KEY: u64 = 0x6a73_7264; // "jsrd": no SLURM job has this id here

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("kernel_read: needs root (loads BPF programs); nothing measured");
        return;
    }
    let pin_dir = PathBuf::from(format!(
        "/sys/fs/bpf/jobscope-bench-read-{}",
        std::process::id()
    ));
    let collector = match Collector::start(&Options {
        syscalls: false,
        page_cache: false,
        max_jobs: 64,
        pin_dir: pin_dir.clone(),
        bench: false,
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kernel_read: no collector here ({e:#}); nothing measured");
            return;
        }
    };
    // (the one note is "system calls not counted": this collector runs without --syscalls, as
    // the packaged service does)
    let (mut view, _notes) =
        JobView::start(collector.pin_dir(), Path::new("/sys"), KEY).expect("registering the job");
    // a tagged process with work going on, so that the counters move: a shell starting a short
    // sleep again and again for 3 s (not a busy loop, which would take a core from the reads)
    let child = launch::blocked(
        "timeout",
        &["3", "sh", "-c", "while :; do sleep 0.01; done"],
    )
    .expect("spawning the workload");
    view.maps().tag(child.pid() as i32, KEY).expect("tagging");
    let running = std::thread::spawn(move || child.release_and_wait());

    let mut r = Reading::default();
    // [fill, one lookup, one getppid(), the job's entry alone]
    let mut ns: [Vec<f64>; 4] = Default::default();
    for round in 0..ROUNDS {
        // rotate which goes first, so that none always follows another
        for k in 0..4 {
            let which = (round + k) % 4;
            let t = Instant::now();
            for _ in 0..PER_ROUND {
                match which {
                    0 => {
                        black_box(view.fill(black_box(&mut r)));
                    }
                    1 => {
                        black_box(view.maps().state_by_lookup().expect("state"));
                    }
                    2 => {
                        // SAFETY: getppid cannot fail
                        black_box(unsafe { libc::getppid() });
                    }
                    _ => {
                        black_box(view.maps_mut().read(KEY).expect("job entry"));
                    }
                }
            }
            ns[which].push(t.elapsed().as_nanos() as f64 / PER_ROUND as f64);
        }
    }
    let [mut fill_ns, mut floor_ns, mut syscall_ns, mut job_ns] = ns;
    assert!(
        r.kernel_run_ns.is_some(),
        "the job's counters were read: {r:?}"
    );
    let _ = running.join(); // the workload's 3 s end
    view.finish();
    drop(collector); // unpins
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    println!(
        "kernel view read per sample ({ROUNDS} rounds x {PER_ROUND} calls, medians; {cpus} CPUs online, possible {})",
        possible.trim()
    );
    let (fill, floor) = (median(&mut fill_ns), median(&mut floor_ns));
    println!(
        "  any system call: getppid()             {:8.0} ns",
        median(&mut syscall_ns)
    );
    println!("  floor: one bpf(2) lookup of state      {floor:8.0} ns");
    println!(
        "  the job's per-CPU entry alone (read)   {:8.0} ns",
        median(&mut job_ns)
    );
    println!("  JobView::fill (mapped state + job)      {fill:8.0} ns  ({:.1}x the floor; target < 5000 ns)", fill / floor);
}
