//! Exact counts on known work (needs root and a kernel with BTF; these run as root in CI).
//!
//! Each test loads its own collector with a temporary pin directory, creates a job entry,
//! starts a workload blocked before its exec (jobscope_kernel::launch), tags it through a pidfd
//! as the SPANK plugin does, releases it, waits and reads the job's counters summed over CPUs —
//! every map operation through `jobscope_common::bpf_maps`, the code the plugin runs.
//! The tests run one at a time (a lock): they measure CPU time and run-queue waits, which other
//! tests running beside them would disturb.

use jobscope_common::bpf_maps::{KernelMaps, Registered};
use jobscope_kernel::{launch, Collector, Options};
use jobscope_model::kernel_abi::{Counters, SysClass};
use std::cell::RefCell;
use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

const BIN: &str = env!("CARGO_BIN_EXE_jobscope-kernel");
static SERIAL: Mutex<()> = Mutex::new(());
static NEXT: AtomicU32 = AtomicU32::new(0);

struct Rig {
    c: Collector,
    /// The collector's maps opened from their pins, as the plugin opens them.
    maps: RefCell<KernelMaps>,
    _serial: MutexGuard<'static, ()>,
}

fn rig(max_jobs: u32) -> Rig {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let opts = Options {
        syscalls: true,
        page_cache: true,
        max_jobs,
        pin_dir: format!("/sys/fs/bpf/jobscope-test-{}-{n}", std::process::id()).into(),
        bench: false,
    };
    let c = Collector::start(&opts).expect("loading the collector (root, BTF?)");
    let maps = KernelMaps::open(c.pin_dir(), Path::new("/sys")).expect("opening the pins");
    Rig {
        c,
        maps: RefCell::new(maps),
        _serial: serial,
    }
}

impl Rig {
    /// Runs `program args` as the first task of job `key` (tagged while blocked before its
    /// exec, or not at all); returns its output and the job's counters.
    fn run(&self, key: Option<u64>, program: &str, args: &[&str]) -> (Output, Counters) {
        let child = launch::blocked(program, args).expect("spawn");
        if let Some(key) = key {
            self.tag(child.pid(), key);
        }
        let out = child.release_and_wait().expect("wait");
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let counters = key.and_then(|k| self.read(k)).unwrap_or_default();
        (out, counters)
    }

    fn job(&self, key: u64) -> u64 {
        assert_eq!(self.register(key), Registered::Created, "job {key}");
        key
    }

    fn register(&self, key: u64) -> Registered {
        self.maps.borrow().register(key).expect("register")
    }

    fn tag(&self, pid: u32, key: u64) {
        self.maps.borrow().tag(pid as i32, key).expect("tag");
    }

    fn read(&self, key: u64) -> Option<Counters> {
        self.maps.borrow_mut().read(key).expect("read")
    }
}

fn value(out: &Output, name: &str) -> u64 {
    let s = String::from_utf8_lossy(&out.stdout);
    s.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in the workload's output {s:?}"))
}

fn within(what: &str, got: u64, lo: u64, hi: u64) {
    assert!(
        (lo..=hi).contains(&got),
        "{what}: {got} not in [{lo}, {hi}]"
    );
}

fn close(what: &str, got: u64, want: u64, rel: f64) {
    let err = (got as f64 - want as f64).abs() / want.max(1) as f64;
    assert!(
        err <= rel,
        "{what}: {got} vs {want} ({:.2} % off, {:.2} % allowed)",
        err * 100.0,
        rel * 100.0
    );
}

#[test]
fn dd_one_byte_copies_are_small_reads_writes_and_file_calls() {
    let r = rig(64);
    let key = r.job(101);
    let (_, c) = r.run(
        Some(key),
        "dd",
        &[
            "if=/dev/zero",
            "of=/dev/null",
            "bs=1",
            "count=100000",
            "status=none",
        ],
    );
    // dd's own 100000 reads and writes, plus a few of the loader's reads (ELF headers, < 4 KiB)
    within("small reads", c.small_reads, 100_000, 100_050);
    within("small writes", c.small_writes, 100_000, 100_050);
    let file = c.syscalls[SysClass::File as usize];
    assert!(
        (200_000..200_200).contains(&file),
        "file system calls {file}"
    );
    assert!(c.syscalls[SysClass::Mem as usize] > 0, "the loader's mmaps");
    assert!(
        c.syscalls[SysClass::Proc as usize] >= 2,
        "execve and exit_group"
    );
}

#[test]
fn four_spinners_on_one_cpu_wait_three_quarters_and_switches_match_proc() {
    let r = rig(64);
    let key = r.job(102);
    let threads = 4;
    let (out, c) = r.run(
        Some(key),
        BIN,
        &[
            "workload",
            "spin",
            "--threads",
            "4",
            "--secs",
            "2",
            "--cpu",
            "0",
        ],
    );
    // Four threads runnable for their whole 2 s on one CPU: together they run at most that CPU's
    // 2 s and wait for it the rest, 3/4 of their time when nothing else wants the CPU. Other load
    // on it (a build beside the tests) moves time from running to waiting, never out of the sum.
    let (run_s, wait_s) = (c.run_ns as f64 / 1e9, c.runq_wait_ns as f64 / 1e9);
    assert!(
        (7.2..=9.0).contains(&(run_s + wait_s)),
        "running {run_s:.2} s + waiting {wait_s:.2} s: not four threads' 2 s ({c:?})"
    );
    assert!(
        run_s <= 2.1,
        "running {run_s:.2} s on one CPU in 2 s ({c:?})"
    );
    let ratio = wait_s / (run_s + wait_s);
    assert!(ratio >= 0.7, "run-queue wait ratio {ratio:.3} ({c:?})");
    // /proc was read while every thread was alive and parked. What the job counts in
    // addition: each spinner's wake-up and last switch-out as a dead task (voluntary: it is
    // not preempted), the main thread's waits in join, and any preemption after the read —
    // a few switches per thread at most.
    let (vol, invol) = (value(&out, "voluntary"), value(&out, "nonvoluntary"));
    within(
        "voluntary switches",
        c.ctx_voluntary,
        vol,
        vol + 2 * threads + 6,
    );
    within(
        "involuntary switches",
        c.ctx_involuntary,
        invol,
        invol + threads + 6,
    );
    assert!(
        invol > 100,
        "4 spinners on one CPU preempt each other ({invol})"
    );
}

#[test]
fn run_and_wait_times_match_schedstat() {
    let r = rig(64);
    let key = r.job(103);
    // an untagged competitor on the same CPU, so that there is a run-queue wait to compare
    let competitor = std::process::Command::new(BIN)
        .args(["workload", "schedstat", "--secs", "3", "--cpu", "0"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("competitor");
    let (out, c) = r.run(
        Some(key),
        BIN,
        &["workload", "schedstat", "--secs", "2", "--cpu", "0"],
    );
    let mut competitor = competitor;
    competitor.wait().expect("competitor");
    // schedstat is read at the workload's very end; the job adds only its exit (µs to a
    // slice of a few ms of waiting), far below 1 % of seconds.
    close("run ns", c.run_ns, value(&out, "run_ns"), 0.01);
    close(
        "run-queue wait ns",
        c.runq_wait_ns,
        value(&out, "wait_ns"),
        0.01,
    );
    assert!(
        c.runq_wait_ns > 500_000_000,
        "the competitor made it wait ({})",
        c.runq_wait_ns
    );
}

#[test]
fn loopback_tcp_bytes_are_exact() {
    let r = rig(64);
    let key = r.job(104);
    const M: u64 = 13 << 20;
    let (out, c) = r.run(Some(key), BIN, &["workload", "tcp", &M.to_string()]);
    assert_eq!(value(&out, "received"), M);
    assert_eq!(c.net_tx_bytes, M, "sent");
    assert_eq!(c.net_rx_bytes, M, "received");
    assert!(
        c.net_tx_calls >= M / (64 << 10) && c.net_rx_calls > 0,
        "{c:?}"
    );
}

#[test]
fn direct_and_buffered_writes_to_a_block_device() {
    let r = rig(64);
    let key = r.job(105);
    let file = format!("/var/tmp/jobscope-test-{}.dio", std::process::id());
    let of = format!("of={file}");
    let (_, c) = r.run(
        Some(key),
        "dd",
        &[
            "if=/dev/zero",
            &of,
            "bs=1M",
            "count=32",
            "oflag=direct",
            "status=none",
        ],
    );
    let _ = std::fs::remove_file(&file);
    assert_eq!(c.blk_write_bytes, 32 << 20, "direct writes");
    // no data in the page cache; only the file system's metadata blocks (inode, directory,
    // bitmaps: a few pages) that creating and growing the file dirtied
    assert!(
        c.dirtied_bytes < 256 << 10,
        "direct I/O dirtied {} bytes",
        c.dirtied_bytes
    );

    let key = r.job(106);
    let (_, c) = r.run(
        Some(key),
        "dd",
        &["if=/dev/zero", &of, "bs=1M", "count=8", "status=none"],
    );
    let _ = std::fs::remove_file(&file);
    // a fresh file: every page of it is dirtied once, whatever the folio sizes, plus the
    // metadata pages as above
    within(
        "page cache dirtied",
        c.dirtied_bytes,
        8 << 20,
        (8 << 20) + (256 << 10),
    );
}

#[test]
fn untagged_work_adds_nothing_and_a_missing_job_only_drops() {
    let r = rig(64);
    let key = r.job(107);
    r.run(
        None,
        "dd",
        &[
            "if=/dev/zero",
            "of=/dev/null",
            "bs=1",
            "count=10000",
            "status=none",
        ],
    );
    r.run(None, BIN, &["workload", "tcp", "1000000"]);
    let c = r.read(key).expect("entry");
    assert_eq!(c, Counters::default(), "untagged work counted");

    // tagged, but the job's entry is gone: nothing is counted, nothing is created
    let gone = r.job(108);
    let dropped_before = r.c.state().unwrap().dropped_events;
    let child = launch::blocked(
        "dd",
        &[
            "if=/dev/zero",
            "of=/dev/null",
            "bs=1",
            "count=1000",
            "status=none",
        ],
    )
    .unwrap();
    r.tag(child.pid(), gone);
    assert!(r.maps.borrow().forget(gone).unwrap(), "the entry was there");
    assert!(child.release_and_wait().unwrap().status.success());
    assert_eq!(r.read(gone), None, "a program created an entry");
    // The task's events were counted in its own storage; its accounting at exit found no entry
    // and counted a drop (once; the once-a-second iterator is not run here).
    let dropped = r.c.state().unwrap().dropped_events;
    assert!(
        dropped > dropped_before,
        "dropped events {dropped_before} -> {dropped}"
    );
    // the heartbeat is a one-word store: it keeps the programs' count
    r.c.beat();
    assert_eq!(r.c.state().unwrap().dropped_events, dropped);
    assert_eq!(r.read(key), Some(Counters::default()));
}

#[test]
fn a_full_jobs_map_is_reported() {
    let r = rig(2);
    r.job(1);
    r.job(2);
    assert_eq!(r.register(3), Registered::Full, "third job in a map of 2");
    assert_eq!(r.register(2), Registered::Existed);
    let s = r.c.state().unwrap();
    assert_eq!(s.max_jobs, 2);
    assert_eq!(s.abi_version, jobscope_model::kernel_abi::ABI_VERSION);
    // deleting one makes room again
    assert!(r.maps.borrow().forget(1).unwrap());
    assert_eq!(r.register(3), Registered::Created, "room after a delete");
    // the walk the sweep and `status` use finds exactly the entries
    let mut keys = Vec::new();
    r.maps.borrow().job_keys(&mut keys, 100).unwrap();
    keys.sort();
    assert_eq!(keys, [2, 3]);
    r.maps.borrow().job_keys(&mut keys, 1).unwrap();
    assert_eq!(keys.len(), 1, "bounded walk");
}

#[test]
fn pins_appear_and_go() {
    let r = rig(8);
    let dir = r.c.pin_dir().to_owned();
    for m in jobscope_kernel::PINNED_MAPS {
        assert!(dir.join(m).exists(), "{m} pinned");
    }
    let out = std::process::Command::new(BIN)
        .args(["status", "--json", "--pin-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && s.contains("\"pinned\":true") && s.contains("\"max_jobs\":8"),
        "{s}"
    );
    drop(r);
    assert!(!dir.exists(), "unpinned at drop");
}
