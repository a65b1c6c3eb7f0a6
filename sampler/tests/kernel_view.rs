//! The kernel view's reader and tagger (`jobscope_sampler::kernel_view` over
//! `jobscope_common::bpf_maps`, plain bpf(2) calls, what runs in slurmstepd) against the maps of
//! the real collector (`jobscope-kernel`, loaded here with a
//! pin directory of its own). Root and a kernel with BTF: CI runs the tests as root.

use jobscope_common::bpf_maps::{KernelMaps, Registered};
use jobscope_kernel::{launch, Collector, Options};
use jobscope_model::sample::Reading;
use jobscope_sampler::kernel_view::{JobView, ViewNote};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

/// A collector with system calls and dirtied page cache counted, or neither.
fn collector(tag: &str, max_jobs: u32, syscalls: bool) -> Collector {
    Collector::start(&Options {
        syscalls,
        page_cache: syscalls,
        max_jobs,
        pin_dir: PathBuf::from(format!(
            "/sys/fs/bpf/jobscope-sampler-test-{}-{tag}",
            std::process::id()
        )),
        bench: false,
    })
    .expect("loading the collector (root, BTF?)")
}

/// Runs `sh -c script` as a task tagged for `key` through `maps`, the way the plugin tags at
/// task_post_fork (forked, not yet running the job's code).
fn run_tagged(maps: &KernelMaps, key: u64, script: &str) {
    let child = launch::blocked("/bin/sh", &["-c", script]).expect("spawn");
    maps.tag(child.pid() as i32, key).expect("tag");
    let out = child.release_and_wait().expect("wait");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_tagged_jobs_counters_reach_its_reading_exactly() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = collector("exact", 16, true);
    let key = 4242;
    let (mut view, notes) = JobView::start(c.pin_dir(), Path::new("/sys"), key).expect("view");
    assert!(notes.is_empty(), "{notes:?}");
    // 100 000 one-byte reads and writes, and a 32 MiB direct write to a real disk
    let f = format!("/var/tmp/jobscope-kview-{}", std::process::id());
    run_tagged(
        view.maps(),
        key,
        &format!("dd if=/dev/zero of=/dev/null bs=1 count=100000 2>/dev/null && dd if=/dev/zero of={f} bs=1M count=32 oflag=direct 2>/dev/null"),
    );
    let _ = std::fs::remove_file(&f);
    let mut r = Reading::default();
    assert_eq!(view.fill(&mut r), None);
    let st = view.maps().state().unwrap();
    let reads = r
        .kernel_small_reads
        .unwrap_or_else(|| panic!("small reads not counted: {r:?} {st:?}"));
    let writes = r.kernel_small_writes.expect("small writes counted");
    assert!((100_000..=100_050).contains(&reads), "small reads {reads}");
    assert!(
        (100_000..=100_050).contains(&writes),
        "small writes {writes}"
    );
    assert_eq!(r.kernel_blk_write_bytes, Some(32 << 20));
    assert!(
        r.kernel_dirtied_bytes.is_some(),
        "page cache counted: {r:?}"
    );
    assert!(r.kernel_syscalls_file.unwrap() >= 200_000);
    assert!(r.kernel_run_ns.unwrap() > 0);
    // An untagged process's work adds nothing.
    let before = r.clone();
    let out = std::process::Command::new("dd")
        .args(["if=/dev/zero", "of=/dev/null", "bs=1", "count=10000"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut r2 = Reading::default();
    view.fill(&mut r2);
    assert_eq!(r2.kernel_small_reads, before.kernel_small_reads);
    // The job's end removes its entry.
    let maps = KernelMaps::open(c.pin_dir(), Path::new("/sys")).unwrap();
    view.finish();
    let mut m = maps;
    assert_eq!(m.read(key).unwrap(), None);
}

#[test]
fn without_syscall_or_page_cache_counting_those_are_unseen_not_zero() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = collector("nosys", 16, false);
    let (mut view, notes) = JobView::start(c.pin_dir(), Path::new("/sys"), 7).expect("view");
    assert_eq!(notes, vec![ViewNote::SyscallsOff]);
    // 1 MiB of buffered writes to a real disk: page cache the job dirtied, not counted here.
    let f = format!("/var/tmp/jobscope-kview-nopc-{}", std::process::id());
    run_tagged(
        view.maps(),
        7,
        &format!("dd if=/dev/zero of={f} bs=64k count=16 2>/dev/null"),
    );
    let _ = std::fs::remove_file(&f);
    let mut r = Reading::default();
    assert_eq!(view.fill(&mut r), None);
    assert_eq!(r.kernel_syscalls_file, None);
    assert_eq!(r.kernel_dirtied_bytes, None);
    assert!(r.kernel_ctx_voluntary.is_some() && r.kernel_run_ns.is_some());
}

#[test]
fn no_collector_a_full_table_and_a_stopped_collector_are_said() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let absent = Path::new("/sys/fs/bpf/jobscope-no-such-collector");
    match JobView::start(absent, Path::new("/sys"), 1) {
        Err(ViewNote::Unavailable(m)) => assert!(m.contains("no kernel collector"), "{m}"),
        other => panic!("{:?}", other.map(|v| v.1)),
    }
    let c = collector("full", 2, false);
    let maps = KernelMaps::open(c.pin_dir(), Path::new("/sys")).unwrap();
    assert_eq!(maps.register(1).unwrap(), Registered::Created);
    assert_eq!(maps.register(1).unwrap(), Registered::Existed);
    assert_eq!(maps.register(2).unwrap(), Registered::Created);
    assert_eq!(maps.register(3).unwrap(), Registered::Full);
    match JobView::start(c.pin_dir(), Path::new("/sys"), 3) {
        Err(n @ ViewNote::Full { max_jobs: 2 }) => assert!(n.message().contains("full")),
        other => panic!("{:?}", other.map(|v| v.1)),
    }
    // Stopped mid-job: the programs detach and the heartbeat ages; the reading says so once.
    let (mut view, _) = JobView::start(c.pin_dir(), Path::new("/sys"), 1).unwrap();
    drop(c);
    std::thread::sleep(std::time::Duration::from_millis(
        jobscope_sampler::kernel_view::HEARTBEAT_STALE_NS / 1_000_000 + 1500,
    ));
    let mut r = Reading::default();
    assert_eq!(view.fill(&mut r), Some(ViewNote::Stopped));
    assert_eq!(r.kernel_run_ns, None, "no figure after the stop");
    assert_eq!(view.fill(&mut r), None, "said once");
}
