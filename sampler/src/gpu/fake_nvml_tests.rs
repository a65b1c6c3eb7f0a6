//! The NVML backend and the GPU monitor against the fake `libnvidia-ml.so` (tests/fake-nvml).
//!
//! Each test copies the library into its own temp dir, next to its own `fake-nvml.json`: every
//! copy is a separate dlopen instance with its own state, so tests run in parallel safely.
//! Time bounds here are generous and only prove "does not hang".

use super::assign::{
    gres_conf_gpu_files, select, GpuRef, JobGpuEnv, SelectInputs, SelectionSource,
};
use super::monitor::{BackendConfig, GpuMonitor, LogLevel};
use super::nvml::{NvmlBackend, NvmlConfig};
use super::spool::GPU_FILE_NAME;
use super::{GpuBackend, GpuKind, GpuSelection, Wanted};
use crate::sampler::Schedule;
use crate::spool::EventKind;
use jobscope_common::spool::read_gpu_file;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The fake library built by cargo: `$JOBSCOPE_FAKE_NVML`, else the newest of
/// `target/<profile>/deps/libfake_nvml.so` (built because jobscope-sampler names fake-nvml as a
/// dev-dependency) and `target/<profile>/libfake_nvml.so` (workspace build).
pub(crate) fn fake_lib() -> PathBuf {
    if let Some(p) = std::env::var_os("JOBSCOPE_FAKE_NVML") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("exe dir");
    let candidates = [
        deps.join("libfake_nvml.so"),
        deps.parent()
            .map_or_else(PathBuf::new, |p| p.join("libfake_nvml.so")),
    ];
    candidates
        .iter()
        .filter_map(|p| Some((std::fs::metadata(p).ok()?.modified().ok()?, p.clone())))
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!(
                "the fake NVML library is missing (looked for {:?}); build it with \
                 `cargo build -p fake-nvml` (a workspace build and `cargo test -p jobscope-sampler` \
                 build it), or point JOBSCOPE_FAKE_NVML at it",
                candidates
            )
        })
}

struct Fake {
    /// Holds the library copy and its script for the test's duration.
    _dir: tempfile::TempDir,
    lib: PathBuf,
}

impl Fake {
    fn new(script: Value) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnvidia-ml.so.1");
        std::fs::copy(fake_lib(), &lib).unwrap();
        std::fs::write(
            dir.path().join("fake-nvml.json"),
            serde_json::to_vec_pretty(&script).unwrap(),
        )
        .unwrap();
        Fake { _dir: dir, lib }
    }

    fn backend(&self, give_up_after: Duration) -> NvmlBackend {
        NvmlBackend::new(NvmlConfig {
            lib_path: Some(self.lib.clone()),
            give_up_after,
            ..Default::default()
        })
    }
}

const GIB: u64 = 1 << 30;
const UUID_A: &str = "GPU-aaaaaaaa-0000-1111-2222-333333333333";
const UUID_B: &str = "GPU-bbbbbbbb-0000-1111-2222-333333333333";
const MIG_UUID: &str = "MIG-cccccccc-0000-1111-2222-333333333333";

/// NVML index 0 is /dev/nvidia3, index 1 is /dev/nvidia1 (PCI order is not minor order).
fn two_gpus(util_a: Value, util_b: Value) -> Value {
    json!({
        "driver_version": "550.54.15",
        "devices": [
            {"uuid": UUID_A, "name": "NVIDIA A100-SXM4-80GB", "minor": 3,
             "pci_bus_id": "00000000:3B:00.0", "memory_total": 80 * GIB,
             "utilization": util_a, "memory_used": [GIB, 2 * GIB, 3 * GIB],
             "power_mw": [250_000, 300_000], "energy_mj": [1_000_000, 1_030_000, 1_090_000],
             "throttle": [0, 4],
             "processes": [[[4242, 5 * GIB], [999, GIB]]]},
            {"uuid": UUID_B, "name": "NVIDIA A100-SXM4-80GB", "minor": 1,
             "pci_bus_id": "00000000:5E:00.0", "memory_total": 80 * GIB,
             "utilization": util_b, "memory_used": 0, "power_mw": 60_000,
             "energy_mj": 5, "throttle": 1, "processes": [[]]}
        ]
    })
}

fn wanted(r: GpuRef, gres: Option<u32>) -> Vec<Wanted> {
    vec![Wanted {
        reference: r,
        gres_index: gres,
    }]
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

#[test]
fn gpu_scripted_series_appear_in_samples() {
    let f = Fake::new(two_gpus(
        json!([[10, 5], [20, 6], [30, 7]]),
        json!([[0, 0]]),
    ));
    let mut b = f.backend(Duration::from_secs(60));
    let o = b.open(&wanted(GpuRef::NvidiaMinor(3), None), soon());
    assert_eq!(o.unavailable, None);
    assert_eq!(o.devices.len(), 1);
    let utils: Vec<Option<u32>> = (0..4)
        .map(|_| {
            b.sample(&[4242], soon()).devices[0]
                .as_ref()
                .unwrap()
                .util_gpu_pct
        })
        .collect();
    assert_eq!(
        utils,
        vec![Some(10), Some(20), Some(30), Some(30)],
        "series holds its last"
    );
}

/// SLURM gres index 1 = /dev/nvidia3 (gres.conf order) = NVML index 0: the job's numbers come
/// from device 0, not from NVML index 1, and only the job's processes count.
#[test]
fn gpu_ordinal_mismatch_attribution_follows_identity() {
    let f = Fake::new(two_gpus(json!([[90, 40]]), json!([[0, 0]])));
    let gres = "Name=gpu File=/dev/nvidia1\nName=gpu File=/dev/nvidia3\n";
    let files = gres_conf_gpu_files(gres, "n1");
    let sel = select(
        &JobGpuEnv {
            slurm_job_gpus: Some("1".into()),
            cuda_visible_devices: Some("0".into()),
            ..Default::default()
        },
        &SelectInputs {
            gres_files: Some(&files),
            ..Default::default()
        },
    );
    assert_eq!(sel.source, SelectionSource::GresConf);
    let mut b = f.backend(Duration::from_secs(60));
    let o = b.open(&sel.wanted, soon());
    let (id, mem_total_bytes) = (&o.devices[0].1.identity, o.devices[0].1.mem_total_bytes);
    assert_eq!(id.uuid.as_deref(), Some(UUID_A));
    assert_eq!(id.index, Some(0), "NVML index");
    assert_eq!(id.gres_index, Some(1), "SLURM index");
    assert_eq!(id.minor, Some(3));
    assert_eq!(id.kind, Some(GpuKind::Nvidia));
    assert_eq!(id.pci_bus_id.as_deref(), Some("00000000:3B:00.0"));
    assert_eq!(id.name.as_deref(), Some("NVIDIA A100-SXM4-80GB"));
    assert_eq!(mem_total_bytes, Some(80 * GIB));
    let s = b.sample(&[1, 4242, 7000], soon());
    let d = s.devices[0].clone().unwrap();
    assert_eq!(d.util_gpu_pct, Some(90));
    assert_eq!(d.util_mem_pct, Some(40));
    // Device discovery's memory_info (for the total) took the series' first entry.
    assert_eq!(d.mem_used_bytes, Some(2 * GIB));
    assert_eq!(d.power_mw, Some(250_000));
    assert_eq!(d.energy_mj, Some(1_000_000));
    assert_eq!(d.throttle_reasons, Some(0));
    assert_eq!(d.job_processes, Some(1), "pid 4242 is the job's");
    assert_eq!(d.job_mem_bytes, Some(5 * GIB));
    assert_eq!(d.other_processes, Some(1), "pid 999 is not");
    // By UUID and by PCI bus id (sysfs spelling) too.
    let mut b = f.backend(Duration::from_secs(60));
    let o = b.open(
        &[
            Wanted {
                reference: GpuRef::PciBusId("0000:5e:00.0".into()),
                gres_index: None,
            },
            Wanted {
                reference: GpuRef::Uuid(UUID_A.into()),
                gres_index: None,
            },
        ],
        soon(),
    );
    assert_eq!(o.devices[0].1.identity.uuid.as_deref(), Some(UUID_B));
    assert_eq!(o.devices[1].1.identity.uuid.as_deref(), Some(UUID_A));
}

#[test]
fn gpu_mig_instance_utilization_not_supported_is_none() {
    let script = json!({"devices": [{
    "uuid": UUID_A, "name": "NVIDIA A100-SXM4-40GB", "minor": 0,
    "pci_bus_id": "00000000:01:00.0", "memory_total": 40 * GIB,
    "utilization": [[0, 0]], "memory_used": GIB, "mig_mode": [1, 1],
    "mig": [
        {"uuid": "MIG-dddddddd-0000-1111-2222-333333333333", "name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
         "memory_total": 5 * GIB, "utilization": ["NOT_SUPPORTED"], "memory_used": GIB,
         "processes": [[]]},
        {"uuid": MIG_UUID, "name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
         "memory_total": 5 * GIB, "utilization": ["NOT_SUPPORTED"], "memory_used": 2 * GIB,
         "processes": [[[4242, 2 * GIB]]]}
    ]}]});
    let f = Fake::new(script);
    let sel = select(
        &JobGpuEnv {
            cuda_visible_devices: Some(MIG_UUID.into()),
            ..Default::default()
        },
        &SelectInputs::default(),
    );
    let mut b = f.backend(Duration::from_secs(60));
    let o = b.open(&sel.wanted, soon());
    assert_eq!(o.devices.len(), 1);
    let (id, mem_total_bytes) = (&o.devices[0].1.identity, o.devices[0].1.mem_total_bytes);
    assert_eq!(id.kind, Some(GpuKind::Mig));
    assert_eq!(id.uuid.as_deref(), Some(MIG_UUID));
    assert_eq!(id.parent_uuid.as_deref(), Some(UUID_A));
    assert_eq!(mem_total_bytes, Some(5 * GIB));
    let s = b.sample(&[4242], soon());
    let d = s.devices[0].clone().unwrap();
    assert_eq!(d.util_gpu_pct, None, "NOT_SUPPORTED is None, not 0");
    assert_eq!(d.power_mw, None);
    assert_eq!(d.mem_used_bytes, Some(2 * GIB));
    assert_eq!(d.job_processes, Some(1));
    assert!(
        s.events.is_empty(),
        "NOT_SUPPORTED is not an event: {:?}",
        s.events
    );
}

#[test]
fn gpu_lost_is_none_and_one_event() {
    let f = Fake::new(two_gpus(json!([[50, 1], "GPU_IS_LOST"]), json!([[0, 0]])));
    let mut b = f.backend(Duration::from_secs(60));
    b.open(&wanted(GpuRef::Uuid(UUID_A.into()), None), soon());
    assert!(b.sample(&[], soon()).devices[0].is_some());
    let s = b.sample(&[], soon());
    assert!(s.devices[0].is_none());
    assert_eq!(s.events.len(), 1);
    assert_eq!(s.events[0].kind, EventKind::GpuLost);
    assert_eq!(s.events[0].slot, Some(0));
    let s = b.sample(&[], soon());
    assert!(
        s.devices[0].is_none() && s.events.is_empty(),
        "lost stays lost, quietly"
    );
}

#[test]
fn gpu_other_errors_are_none_and_reported_once() {
    let mut script = two_gpus(json!([[50, 1]]), json!([[0, 0]]));
    script["devices"][0]["power_mw"] = json!("NO_PERMISSION");
    let f = Fake::new(script);
    let mut b = f.backend(Duration::from_secs(60));
    b.open(&wanted(GpuRef::NvidiaMinor(3), None), soon());
    let s = b.sample(&[], soon());
    let d = s.devices[0].clone().unwrap();
    assert_eq!((d.power_mw, d.util_gpu_pct), (None, Some(50)));
    assert_eq!(s.events.len(), 1);
    assert!(s.events[0].message.contains("nvmlDeviceGetPowerUsage"));
    assert!(b.sample(&[], soon()).events.is_empty());
}

#[test]
fn gpu_missing_library_or_driver_is_quietly_no_gpus() {
    let d = tempfile::tempdir().unwrap();
    let w = wanted(GpuRef::NvidiaMinor(0), None);
    for lib in [d.path().join("absent.so"), {
        let p = d.path().join("not-a-library.so");
        std::fs::write(&p, b"not an ELF file").unwrap();
        p
    }] {
        let mut b = NvmlBackend::new(NvmlConfig {
            lib_path: Some(lib.clone()),
            ..Default::default()
        });
        let o = b.open(&w, soon());
        assert!(o.devices.is_empty());
        assert!(o.quiet, "{lib:?}: {:?}", o.unavailable);
        assert!(o.unavailable.unwrap().contains("NVML not available"));
        assert!(b.sample(&[], soon()).devices.is_empty());
    }
    let f = Fake::new(json!({"init": "DRIVER_NOT_LOADED", "devices": []}));
    let mut b = f.backend(Duration::from_secs(60));
    let o = b.open(&w, soon());
    assert!(o.quiet && o.devices.is_empty(), "{:?}", o.unavailable);
}

/// The slow call takes 10 s: the bounds below are half of that, 25 times the 200 ms deadline.
#[test]
fn gpu_slow_call_misses_its_sample_within_the_deadline_and_late_answer_is_dropped() {
    let f = Fake::new(two_gpus(
        json!([[10, 1], {"sleep_ms": 10000, "then": [99, 1]}, [55, 1]]),
        json!([[0, 0]]),
    ));
    let mut b = f.backend(Duration::from_secs(60));
    b.open(&wanted(GpuRef::NvidiaMinor(3), None), soon());
    assert_eq!(
        b.sample(&[], soon()).devices[0]
            .as_ref()
            .unwrap()
            .util_gpu_pct,
        Some(10)
    );
    let t = Instant::now();
    let s = b.sample(&[], Instant::now() + Duration::from_millis(200));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "returned at the deadline, not after the slow call: {:?}",
        t.elapsed()
    );
    assert!(s.devices[0].is_none());
    assert_eq!(s.events[0].kind, EventKind::NvmlTimeout);
    // While the worker is busy: no new request, no new event, no wait (neither for the worker
    // nor until this sample's 60 s deadline).
    let t = Instant::now();
    let s = b.sample(&[], Instant::now() + Duration::from_secs(60));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "no wait: {:?}",
        t.elapsed()
    );
    assert!(s.devices[0].is_none() && s.events.is_empty());
    // Once it is back, sampling resumes; the late 99 was dropped.
    let give_up = Instant::now() + Duration::from_secs(60);
    let util = loop {
        let s = b.sample(&[], Instant::now() + Duration::from_secs(5));
        if let Some(d) = &s.devices[0] {
            break d.util_gpu_pct;
        }
        assert!(Instant::now() < give_up, "the worker never came back");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(util, Some(55));
    assert!(!b.gave_up());
}

/// The job ends (the monitor's cutoff is set from another thread) while a sample waits on a
/// slow call (60 s) with a long deadline (120 s): the wait ends at the cutoff (0.3 s), not at
/// the deadline nor when the call returns.
#[test]
fn gpu_cutoff_ends_a_wait_on_a_slow_call() {
    let f = Fake::new(two_gpus(
        json!([[10, 1], {"sleep_ms": 60000, "then": [99, 1]}]),
        json!([[0, 0]]),
    ));
    let mut b = f.backend(Duration::from_secs(60));
    let cutoff = super::Cutoff::default();
    b.set_cutoff(cutoff.clone());
    b.open(&wanted(GpuRef::NvidiaMinor(3), None), soon());
    assert!(b.sample(&[], soon()).devices[0].is_some());
    let setter = {
        let c = cutoff.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            c.set(Instant::now());
        })
    };
    let t = Instant::now();
    let s = b.sample(&[], Instant::now() + Duration::from_secs(120));
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "ended at the cutoff: {:?}",
        t.elapsed()
    );
    assert!(s.devices[0].is_none());
    assert_eq!(s.events[0].kind, EventKind::NvmlTimeout);
    setter.join().unwrap();
}

#[test]
fn gpu_worker_stuck_too_long_gives_up_nvml_for_the_job() {
    let f = Fake::new(two_gpus(
        json!([[10, 1], {"sleep_ms": 4000, "then": [99, 1]}]),
        json!([[0, 0]]),
    ));
    let mut b = f.backend(Duration::from_millis(300));
    b.open(&wanted(GpuRef::NvidiaMinor(3), None), soon());
    assert!(b.sample(&[], soon()).devices[0].is_some());
    let s = b.sample(&[], Instant::now() + Duration::from_millis(100));
    assert_eq!(s.events[0].kind, EventKind::NvmlTimeout);
    std::thread::sleep(Duration::from_millis(400));
    let s = b.sample(&[], soon());
    assert!(s.devices[0].is_none());
    assert_eq!(s.events[0].kind, EventKind::NvmlGaveUp);
    assert!(b.gave_up());
    let s = b.sample(&[], soon());
    assert!(s.devices[0].is_none() && s.events.is_empty());
}

/// Init hangs for 60 s; the open's deadline is 200 ms.
#[test]
fn gpu_init_that_hangs_gives_up_at_the_open_deadline() {
    let f = Fake::new(json!({"init": {"sleep_ms": 60000, "then": "OK"}, "devices": []}));
    let mut b = f.backend(Duration::from_secs(60));
    let t = Instant::now();
    let o = b.open(
        &wanted(GpuRef::NvidiaMinor(3), None),
        Instant::now() + Duration::from_millis(200),
    );
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "gave up at the open's deadline, not when init returned: {:?}",
        t.elapsed()
    );
    assert!(o.devices.is_empty() && !o.quiet);
    assert_eq!(o.events[0].kind, EventKind::NvmlGaveUp);
}

fn header() -> crate::spool::Header {
    crate::spool::Header {
        format_version: crate::spool::FORMAT_VERSION,
        job_id: 77,
        node: "gpu01".into(),
        series: "job".into(),
        uid: 1000,
        gid: 1000,
        cgroup_version: None,
        cgroup_path: None,
        io_source: None,
        boot_id: None,
        boot_time_s: None,
        start_unix_ms: jobscope_common::now_unix_ms(),
        cadence_s: 1,
        plugin_version: "test".into(),
        alloc_cores: None,
        alloc_mem_bytes: None,
        handover: None,
    }
}

type Logs = Arc<Mutex<Vec<(LogLevel, String)>>>;

/// Waits until monitor `m` has taken `n` samples, or 30 s (the caller asserts what it needs).
/// A monitor's schedule: a sample every `ms` milliseconds, no early ones.
fn every_ms(ms: u64) -> Schedule {
    Schedule {
        early: vec![],
        cadence: Duration::from_millis(ms),
    }
}

fn wait_samples(m: &GpuMonitor, n: u64) {
    let t = Instant::now();
    while m.progress().samples_taken < n && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn logger() -> (Logs, super::monitor::GpuLogFn) {
    let logs: Logs = Arc::default();
    let l2 = logs.clone();
    (
        logs,
        Box::new(move |lvl, m: &str| l2.lock().unwrap().push((lvl, m.to_string()))),
    )
}

/// The whole path: monitor thread + NVML worker + fake driver + gpu.jsc. One slow NVML call
/// makes its sample (and the slots while the worker is busy) missing; the cadence holds and
/// sampling resumes; the spool has the scripted values, the energy deltas and the events.
#[test]
fn gpu_monitor_against_fake_nvml_keeps_cadence_through_a_slow_call() {
    let f = Fake::new(two_gpus(
        json!([[10, 1], [10, 1], {"sleep_ms": 800, "then": [99, 1]}, [55, 1]]),
        json!([[0, 0]]),
    ));
    let spool = tempfile::tempdir().unwrap();
    let cfg = BackendConfig {
        nvml_lib_path: Some(f.lib.clone()),
        amd: false,
        sample_timeout: Duration::from_millis(150),
        ..Default::default()
    };
    let (logs, log) = logger();
    let m = GpuMonitor::start(
        GpuSelection::of([GpuRef::NvidiaMinor(3)]),
        &cfg,
        spool.path(),
        header(),
        every_ms(100),
        Box::new(|| vec![4242, 17]),
        log,
    )
    .unwrap();
    wait_samples(&m, 20);
    let p = m.progress();
    assert!(p.samples_taken >= 20, "cadence did not hold: {p:?}");
    assert!(p.samples_missed >= 1, "{p:?}");
    assert!(m.stop(Duration::from_secs(20)), "stop is bounded");
    let s = read_gpu_file(&spool.path().join(GPU_FILE_NAME)).unwrap();
    assert!(s.end.is_some() && !s.torn);
    assert_eq!(s.end.as_ref().unwrap().reason, "stopped");
    assert_eq!(s.devices().len(), 1);
    assert_eq!(s.devices()[0].identity.uuid.as_deref(), Some(UUID_A));
    let utils: Vec<u64> = s
        .buckets
        .iter()
        .filter_map(|b| b.device(0)?.util_gpu_pct)
        .map(|g| g.max)
        .collect();
    // 10s (before the slow call), then 55s; the late 99 is dropped. (Under heavy load an early
    // sample may time out too: the order still holds.)
    assert!(
        !utils.contains(&99),
        "the late answer is dropped: {utils:?}"
    );
    assert!(
        utils.windows(2).all(|w| w[0] <= w[1]) && utils.iter().all(|u| [10, 55].contains(u)),
        "{utils:?}"
    );
    assert!(utils.iter().filter(|u| **u == 55).count() >= 5, "{utils:?}");
    let counters: Vec<u64> = s
        .buckets
        .iter()
        .filter_map(|b| b.device(0)?.energy_counter_mj)
        .collect();
    let energy: u64 = s
        .buckets
        .iter()
        .filter_map(|b| b.device(0)?.energy_mj)
        .sum();
    assert_eq!(
        energy,
        counters.last().unwrap() - counters[0],
        "deltas of the 1_000_000 → 1_030_000 → 1_090_000 mJ counter"
    );
    assert_eq!(*counters.last().unwrap(), 1_090_000);
    let d = s.buckets[0].device(0).unwrap();
    assert_eq!(d.job_processes.map(|g| g.max), Some(1));
    assert_eq!(d.other_processes.map(|g| g.max), Some(1));
    assert!(s.events.iter().any(|e| e.kind == EventKind::NvmlTimeout));
    assert!(
        !logs
            .lock()
            .unwrap()
            .iter()
            .any(|(l, _)| *l == LogLevel::Error),
        "{:?}",
        logs.lock().unwrap()
    );
}

#[test]
fn gpu_monitor_without_driver_is_one_debug_line_and_a_no_gpus_file() {
    let spool = tempfile::tempdir().unwrap();
    let cfg = BackendConfig {
        nvml_lib_path: Some(spool.path().join("no-such-libnvidia-ml.so.1")),
        amd: false,
        ..Default::default()
    };
    let (logs, log) = logger();
    let m = GpuMonitor::start(
        GpuSelection::of([GpuRef::NvidiaMinor(0)]),
        &cfg,
        spool.path(),
        header(),
        every_ms(50),
        Box::new(Vec::new),
        log,
    )
    .unwrap();
    let t = Instant::now();
    while !m.finished() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        m.finished(),
        "ends by itself when there is nothing to sample"
    );
    assert_eq!(m.progress().devices, 0);
    assert!(m.stop(Duration::from_secs(5)));
    let logs = logs.lock().unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0].0, LogLevel::Debug);
    let s = read_gpu_file(&spool.path().join(GPU_FILE_NAME)).unwrap();
    assert_eq!(s.end.as_ref().unwrap().reason, "no_gpus");
    assert!(s.devices().is_empty());
    assert!(s.info.unwrap().unresolved[0].contains("/dev/nvidia0"));
}

#[test]
fn gpu_bench_function_measures_the_fake() {
    let f = Fake::new(two_gpus(json!([[10, 1]]), json!([[20, 1]])));
    let c = super::bench::nvml_sample_cost(
        Some(&f.lib),
        &GpuSelection::of([GpuRef::AllAccessible]),
        &[4242],
        50,
        Duration::ZERO,
    )
    .unwrap();
    assert_eq!((c.devices, c.iterations), (2, 50));
    assert!(c.min <= c.per_sample && c.per_sample <= c.max);
    assert!(c.drain.min <= c.drain.p50 && c.drain.p50 <= c.drain.max);
    eprintln!("NVML sample cost against the fake (2 GPUs): {c:?}");
}

/// The fake's per-call costs are paid: a cycled list makes one call in four pathological, and a
/// sample waits for it (lower bounds only: a sleep lasts at least its time).
#[test]
fn gpu_fake_per_call_costs_are_paid() {
    let mut script = two_gpus(json!([[10, 1]]), json!([[20, 1]]));
    script["cost_ms"] = json!({"nvmlDeviceGetTotalEnergyConsumption": [3, 3, 3, 100],
                               "nvmlDeviceGetSamples": 1});
    script["devices"][0]["busy"] = json!({"period_ms": 1000, "busy_share": 0.5});
    let f = Fake::new(script);
    let c = super::bench::nvml_sample_cost(
        Some(&f.lib),
        &GpuSelection::of([GpuRef::NvidiaMinor(3)]),
        &[4242],
        8,
        Duration::ZERO,
    )
    .unwrap();
    assert!(c.sample.max >= Duration::from_millis(100), "{c:?}");
    // Two sampling types, each asked at least for its count (NOT_FOUND right after the sample's
    // own drain): two calls of 1 ms or more.
    assert!(c.drain.min >= Duration::from_millis(2), "{c:?}");
    // The sample drains too, then reads energy: 3 + 2 ms at least.
    assert!(c.sample.min >= Duration::from_millis(5), "{c:?}");
}

/// Two jobs time-slice one GPU (the fake's per-process buffer: pid 4242 busy 50 %, pid 5151
/// 25 %, never at once). Each job's monitor drains the same driver (one library instance, NVML
/// initialised twice) between its samples: both see the device at 75 %, each its own share.
#[test]
fn gpu_monitors_of_two_jobs_on_a_shared_gpu_drain_the_buffer_and_get_their_own_share() {
    let f = Fake::new(json!({
        "devices": [{"uuid": UUID_A, "name": "NVIDIA H100 80GB HBM3", "minor": 0,
            "pci_bus_id": "00000000:3B:00.0", "memory_total": 80 * GIB, "memory_used": GIB,
            "power_mw": 300_000, "energy_mj": 1_000, "throttle": 0,
            "processes": [[[4242, GIB], [5151, GIB]]],
            "process_busy": {
                "4242": {"period_ms": 400, "busy_share": 0.5, "phase_ms": 0},
                "5151": {"period_ms": 400, "busy_share": 0.25, "phase_ms": 200}}}]
    }));
    let start = |pid: u32, dir: &std::path::Path| {
        let cfg = BackendConfig {
            nvml_lib_path: Some(f.lib.clone()),
            amd: false,
            drain_interval: Duration::from_millis(250),
            ..Default::default()
        };
        GpuMonitor::start(
            GpuSelection::of([GpuRef::NvidiaMinor(0)]),
            &cfg,
            dir,
            header(),
            every_ms(1000),
            Box::new(move || vec![pid]),
            Box::new(|_, _| {}),
        )
        .unwrap()
    };
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (start(4242, da.path()), start(5151, db.path()));
    let t = Instant::now();
    while (a.progress().samples_taken < 4 || b.progress().samples_taken < 4)
        && t.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(a.progress().drains >= 3, "{:?}", a.progress());
    assert!(a.stop(Duration::from_secs(10)) && b.stop(Duration::from_secs(10)));
    let sum = |dir: &std::path::Path| {
        let s = read_gpu_file(&dir.join(GPU_FILE_NAME)).unwrap();
        let elapsed_s = (s.end.as_ref().unwrap().t_ms - s.header.start_unix_ms) as f64 / 1000.0;
        let notes = super::summary::gpu_quality_notes(&s);
        (super::summarize_gpus(&s, elapsed_s)[0].clone(), s, notes)
    };
    let (ga, sa, notes) = sum(da.path());
    let (gb, _, _) = sum(db.path());
    for g in [&ga, &gb] {
        assert_eq!(
            g.util_source,
            Some(super::summary::GpuUtilSource::DriverBuffer)
        );
        // Samples alternate 100/50: an odd count off by at most 25/n of an even one.
        let m = g.util_mean_pct.unwrap();
        assert!((m - 75.0).abs() <= 6.0, "device {m}");
        assert!(g.other_processes_seen);
        // Most of the run is covered by the driver's buffer; a loaded machine delays the drains
        // (0.87 seen with two builds beside the test), a monitor that stops draining falls far lower.
        assert!(g.util_coverage_share.unwrap() > 0.75, "{g:?}");
    }
    let (ja, jb) = (ga.job_util_mean_pct.unwrap(), gb.job_util_mean_pct.unwrap());
    for (job, g) in [("A (pid 4242)", &ga), ("B (pid 5151)", &gb)] {
        eprintln!(
            "job {job}: device mean {:.1} %, job's share mean {:.1} %, coverage {:.2}",
            g.util_mean_pct.unwrap_or(f64::NAN),
            g.job_util_mean_pct.unwrap_or(f64::NAN),
            g.util_coverage_share.unwrap_or(f64::NAN)
        );
    }
    assert!((ja - 50.0).abs() <= 6.0, "job A {ja}");
    assert!((jb - 25.0).abs() <= 6.0, "job B {jb}");
    // Every 200 ms sample once: no more than the time from the first to the last bucket holds.
    let count: u64 = sa
        .buckets
        .iter()
        .filter_map(|b| b.device(0)?.util_gpu_pct)
        .map(|g| g.count as u64)
        .sum();
    let span_ms = sa.buckets.last().unwrap().t_last_ms - sa.header.start_unix_ms;
    assert!(
        count <= span_ms / 200 + 2,
        "{count} samples in {span_ms} ms"
    );
    assert!(
        !notes.iter().any(|n| n.contains("point reads")),
        "{notes:?}"
    );
}

/// A GPU whose driver answers NOT_SUPPORTED for the sample buffer (the fake without a busy
/// pattern): the monitor falls back to point reads, and the report's data notes say so.
#[test]
fn gpu_without_buffer_support_falls_back_to_point_reads_and_says_so() {
    let f = Fake::new(two_gpus(json!([[0, 0], [40, 5]]), json!([[0, 0]])));
    let spool = tempfile::tempdir().unwrap();
    let cfg = BackendConfig {
        nvml_lib_path: Some(f.lib.clone()),
        amd: false,
        drain_interval: Duration::from_millis(100),
        ..Default::default()
    };
    let m = GpuMonitor::start(
        GpuSelection::of([GpuRef::NvidiaMinor(3)]),
        &cfg,
        spool.path(),
        header(),
        every_ms(400),
        Box::new(|| vec![4242]),
        Box::new(|_, _| {}),
    )
    .unwrap();
    wait_samples(&m, 3);
    assert!(m.stop(Duration::from_secs(10)));
    let s = read_gpu_file(&spool.path().join(GPU_FILE_NAME)).unwrap();
    let g = &super::summarize_gpus(&s, 2.0)[0];
    assert_eq!(
        g.util_source,
        Some(super::summary::GpuUtilSource::PointReads)
    );
    assert_eq!(g.util_max_pct, Some(40.0), "the point reads' values");
    assert_eq!(g.util_coverage_share, None);
    assert_eq!(g.job_util_mean_pct, None, "no per-process samples either");
    let notes = super::summary::gpu_quality_notes(&s);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("point reads") && n.contains("GPU")),
        "{notes:?}"
    );
}

/// A counter of the library copy at `lib` (`fake_nvml_gpm_buffers_live` or `_allocated`): the
/// instance NVML loaded (a second dlopen of the same path returns it).
fn fake_counter(lib: &std::path::Path, name: &std::ffi::CStr) -> i64 {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(lib.as_os_str().as_bytes()).unwrap();
    // SAFETY: a path and a symbol name, both NUL-terminated; the symbol is the fake's
    // `extern "C" fn() -> i64`.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null(), "dlopen {}", lib.display());
        let f = libc::dlsym(h, name.as_ptr());
        assert!(!f.is_null());
        let f: extern "C" fn() -> i64 = std::mem::transmute(f);
        let n = f();
        libc::dlclose(h);
        n
    }
}

fn gpm_buffers_live(lib: &std::path::Path) -> i64 {
    fake_counter(lib, c"fake_nvml_gpm_buffers_live")
}

fn gpm_buffers_allocated(lib: &std::path::Path) -> i64 {
    fake_counter(lib, c"fake_nvml_gpm_buffers_allocated")
}

/// GPU A: kernels "ran" 98 % of the time (utilization.gpu) while GPM says 6 % SM activity; its
/// power cap held it back 12 minutes, one uncorrected ECC error, two XIDs. GPU B: a pre-Hopper
/// GPU that answers none of it.
fn health_script() -> Value {
    json!({
        "driver_version": "550.54.15",
        "devices": [
            {"uuid": UUID_A, "name": "NVIDIA H100 80GB HBM3", "minor": 3,
             "pci_bus_id": "00000000:3B:00.0", "memory_total": 80 * GIB,
             "utilization": [[98, 10]], "memory_used": GIB, "power_mw": 300_000,
             "energy_mj": 1_000, "throttle": 4, "processes": [[[4242, GIB]]],
             "gpm": [{"sm_util": 6.0, "sm_occupancy": 3.5, "any_tensor": 0.0}],
             "sm_clock_mhz": 1980, "mem_clock_mhz": 2619,
             "violation_power_ns": [0, 720_000_000_000u64], "violation_thermal_ns": 0,
             "ecc_corrected": [5, 7], "ecc_uncorrected": [0, 1],
             "xid": [79, 48]},
            {"uuid": UUID_B, "name": "NVIDIA A100-SXM4-80GB", "minor": 1,
             "pci_bus_id": "00000000:5E:00.0", "memory_total": 80 * GIB,
             "utilization": [[98, 10]], "memory_used": GIB, "power_mw": 300_000,
             "energy_mj": 1_000, "throttle": 0, "processes": [[[4242, GIB]]]}
        ]
    })
}

/// The whole path, monitor to summary: GPM figures, clocks, throttle time, ECC and XID from the
/// fake driver reach gpu.jsc and the GPU summary; the GPU that has none of them reads `None`
/// (not 0) and the data notes say so once; the GPM buffers are allocated once per device and
/// freed at the end.
#[test]
fn gpu_sm_activity_throttle_ecc_and_xid_end_to_end() {
    let f = Fake::new(health_script());
    let spool = tempfile::tempdir().unwrap();
    let cfg = BackendConfig {
        nvml_lib_path: Some(f.lib.clone()),
        amd: false,
        ..Default::default()
    };
    let m = GpuMonitor::start(
        GpuSelection::of([GpuRef::NvidiaMinor(3), GpuRef::NvidiaMinor(1)]),
        &cfg,
        spool.path(),
        header(),
        every_ms(100),
        Box::new(|| vec![4242]),
        Box::new(|_, _| {}),
    )
    .unwrap();
    wait_samples(&m, 6);
    assert!(m.progress().samples_taken >= 6, "{:?}", m.progress());
    assert_eq!(
        gpm_buffers_live(&f.lib),
        2,
        "two GPM buffers for the one GPM device, after 6 samples: allocated once"
    );
    assert_eq!(
        gpm_buffers_allocated(&f.lib),
        2,
        "and never again per sample"
    );
    assert!(m.stop(Duration::from_secs(20)));
    let s = read_gpu_file(&spool.path().join(GPU_FILE_NAME)).unwrap();
    assert!(!s.torn && s.end.is_some());
    let sums = super::summarize_gpus(&s, 3600.0);
    let (a, b) = (&sums[0], &sums[1]);
    assert_eq!(a.identity.uuid.as_deref(), Some(UUID_A));
    assert_eq!(a.sm_active_mean_pct, Some(6.0));
    assert_eq!(a.sm_occupancy_mean_pct, Some(3.5));
    assert_eq!(a.tensor_active_mean_pct, Some(0.0), "measured zero is 0");
    assert_eq!(
        a.dram_active_mean_pct, None,
        "the metric the driver refused"
    );
    assert_eq!(a.sm_clock_mean_mhz, Some(1980.0));
    assert_eq!(a.mem_clock_mean_mhz, Some(2619.0));
    assert_eq!(a.throttle_power_s, Some(720.0));
    assert_eq!(a.throttle_thermal_s, Some(0.0));
    assert_eq!((a.ecc_corrected, a.ecc_uncorrected), (Some(2), Some(1)));
    assert_eq!(a.xid_errors, Some(2));
    let codes: Vec<u32> = a.xid_events.iter().map(|x| x.code).collect();
    assert_eq!(codes, vec![79, 48]);
    assert!(a.xid_events.iter().all(|x| x.t_s >= 0.0 && x.t_s < 60.0));
    use super::summary::{GpuClass, GpuFinding};
    assert_eq!(a.classification, Some(GpuClass::LowSmActivity));
    assert!(a.findings.contains(&GpuFinding::LowSmActivity {
        util_mean_pct: 98.0,
        sm_active_mean_pct: 6.0
    }));
    assert!(
        a.findings.iter().any(|f| matches!(f,
            GpuFinding::NodeHealth { throttle_power_s: Some(p), ecc_uncorrected: Some(1),
                                     xid_errors: Some(2), .. } if *p == 720.0)),
        "{:?}",
        a.findings
    );
    // GPU B: nothing of it measured, nothing invented.
    assert_eq!(b.identity.uuid.as_deref(), Some(UUID_B));
    assert_eq!(
        (
            b.sm_active_mean_pct,
            b.sm_clock_mean_mhz,
            b.throttle_power_s
        ),
        (None, None, None)
    );
    assert_eq!((b.ecc_uncorrected, b.xid_errors), (None, None));
    assert_eq!(
        b.classification,
        Some(GpuClass::GpuBound),
        "kernel time alone"
    );
    let notes = super::summary::gpu_quality_notes(&s);
    let about_b: Vec<&String> = notes.iter().filter(|n| n.contains(UUID_B)).collect();
    assert_eq!(
        about_b.iter().filter(|n| n.contains("SM activity")).count(),
        1,
        "{notes:?}"
    );
    assert_eq!(
        about_b.iter().filter(|n| n.contains("XID")).count(),
        1,
        "{notes:?}"
    );
    assert!(
        !notes
            .iter()
            .any(|n| n.contains(UUID_A) && (n.contains("SM activity") || n.contains("XID"))),
        "{notes:?}"
    );
    let t = Instant::now();
    while gpm_buffers_live(&f.lib) != 0 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        gpm_buffers_live(&f.lib),
        0,
        "the GPM buffers are freed at the end"
    );
}

/// An XID storm: every error is counted, only the first few are kept with their codes; a GPM
/// that starts answering NOT_SUPPORTED mid-job is given up (its buffers freed) and reads `None`
/// from then on; a failed GPM call is never a 0.
#[test]
fn gpu_xid_storm_is_capped_and_a_gpm_not_supported_is_given_up() {
    let mut script = health_script();
    script["devices"][0]["xid"] = json!((0..40).map(|i| 13 + i % 3).collect::<Vec<u32>>());
    script["devices"][0]["gpm"] = json!([{"sm_util": 50.0}, {"sm_util": 40.0}, "NOT_SUPPORTED"]);
    let f = Fake::new(script);
    let mut b = f.backend(Duration::from_secs(60));
    let o = b.open(&wanted(GpuRef::NvidiaMinor(3), None), soon());
    assert_eq!(o.devices.len(), 1);
    assert!(o.notes.is_empty(), "{:?}", o.notes);
    assert_eq!(gpm_buffers_live(&f.lib), 2);
    // The fill at open took the first figures (50): the first interval ends at this sample.
    let s1 = b.sample(&[4242], soon()).devices[0].clone().unwrap();
    assert_eq!(s1.sm_active_permille, Some(400));
    assert_eq!(
        s1.sm_occupancy_permille, None,
        "not in the script: NOT_SUPPORTED"
    );
    let x = s1.xids.expect("XIDs watched");
    assert_eq!(x.count, 40);
    assert_eq!(x.first.len(), 32);
    assert_eq!(
        x.first[..3].iter().map(|p| p.1).collect::<Vec<_>>(),
        [13, 14, 15]
    );
    let s2 = b.sample(&[4242], soon()).devices[0].clone().unwrap();
    assert_eq!(s2.sm_active_permille, None);
    assert_eq!(s2.xids, Some(Default::default()), "watched, none since");
    assert_eq!(gpm_buffers_live(&f.lib), 0, "given up: freed at once");
    let s3 = b.sample(&[4242], soon()).devices[0].clone().unwrap();
    assert_eq!(s3.sm_active_permille, None);
    assert_eq!(s3.violation_power_ns, Some(720_000_000_000));
}

// ------------------------------------------------------------------ DCGM (tests/fake-dcgm)

/// The fake DCGM library built by cargo, found as [`fake_lib`] finds the fake NVML
/// (`$JOBSCOPE_FAKE_DCGM` first).
fn fake_dcgm_lib() -> PathBuf {
    if let Some(p) = std::env::var_os("JOBSCOPE_FAKE_DCGM") {
        return PathBuf::from(p);
    }
    let nvml = fake_lib();
    let p = nvml.with_file_name("libfake_dcgm.so");
    assert!(
        p.exists(),
        "the fake DCGM library is missing ({}); `cargo build -p fake-dcgm` builds it",
        p.display()
    );
    p
}

/// A copy of the fake DCGM next to its own `fake-dcgm.json`, in the fake NVML's directory.
fn with_dcgm(f: &Fake, script: Value) -> PathBuf {
    let dir = f.lib.parent().unwrap();
    let lib = dir.join("libdcgm.so.4");
    std::fs::copy(fake_dcgm_lib(), &lib).unwrap();
    std::fs::write(
        dir.join("fake-dcgm.json"),
        serde_json::to_vec_pretty(&script).unwrap(),
    )
    .unwrap();
    lib
}

fn dcgm_backend(f: &Fake, dcgm_lib: &std::path::Path) -> NvmlBackend {
    NvmlBackend::new(NvmlConfig {
        lib_path: Some(f.lib.clone()),
        give_up_after: Duration::from_secs(60),
        dcgm: Some(super::dcgm::DcgmConfig {
            lib_path: Some(dcgm_lib.to_path_buf()),
            ..Default::default()
        }),
        dcgm_interval: Duration::from_secs(5),
    })
}

fn both() -> Vec<Wanted> {
    let mut w = wanted(GpuRef::NvidiaMinor(3), None);
    w.extend(wanted(GpuRef::NvidiaMinor(1), None));
    w
}

/// The host engine numbers GPUs its own way: a third GPU first, then B, then A.
fn dcgm_script() -> Value {
    json!({
        "gpus": [
            {"uuid": "GPU-ffffffff-0000-1111-2222-333333333333", "sm_active": 0.99},
            {"uuid": UUID_B, "sm_active": [0.5, 0.7, 0.9], "sm_occupancy": 0.25, "tensor": 0.0},
            {"uuid": UUID_A, "sm_active": [0.06, 0.06, 0.03], "dram": ["BLANK", 0.2, 0.4]}
        ]
    })
}

/// GPUs before Hopper (no GPM) get SM activity from DCGM: matched by UUID, not by index; each
/// sample has the mean of the values read at its interval's drains and at the sample; a figure
/// DCGM leaves blank or does not have is `None`, never 0; the watch is at the drain interval and
/// is removed, and the connection closed, when the job's monitor stops.
#[test]
fn gpus_without_gpm_get_sm_activity_from_dcgm() {
    let f = Fake::new(two_gpus(json!([[98, 10]]), json!([[98, 10]])));
    let dcgm = with_dcgm(&f, dcgm_script());
    let mut b = dcgm_backend(&f, &dcgm);
    let o = b.open(&both(), soon());
    assert_eq!(o.devices.len(), 2);
    let sm: Vec<&String> = o
        .notes
        .iter()
        .filter(|n| n.contains("SM activity"))
        .collect();
    assert_eq!(
        sm,
        vec![&format!(
            "GPU 0 (NVIDIA A100-SXM4-80GB, {UUID_A}), GPU 1 (NVIDIA A100-SXM4-80GB, {UUID_B}): \
             SM activity from DCGM's profiling fields (nv-hostengine at 127.0.0.1): NVML GPM not \
             supported by this GPU (Hopper and later)"
        )],
    );
    assert_eq!(fake_counter(&dcgm, c"fake_dcgm_watches_live"), 1);
    assert_eq!(fake_counter(&dcgm, c"fake_dcgm_last_watch_us"), 5_000_000);
    // Two drains, then the sample: three reads in the interval.
    b.drain(soon()).unwrap();
    b.drain(soon()).unwrap();
    let s = b.sample(&[4242], soon());
    let (a, bb) = (s.devices[0].clone().unwrap(), s.devices[1].clone().unwrap());
    assert_eq!(a.sm_active_permille, Some(50), "(60 + 60 + 30) / 3");
    assert_eq!(a.sm_occupancy_permille, None, "DCGM has none: not 0");
    assert_eq!(
        a.dram_active_permille,
        Some(300),
        "the blank is no value: (200 + 400) / 2"
    );
    assert_eq!(bb.sm_active_permille, Some(700));
    assert_eq!(bb.sm_occupancy_permille, Some(250));
    assert_eq!(bb.tensor_active_permille, Some(0), "measured zero is 0");
    // The next interval starts empty: one read at the sample, the series' last values.
    let s = b.sample(&[4242], soon());
    assert_eq!(s.devices[0].as_ref().unwrap().sm_active_permille, Some(30));
    assert_eq!(s.devices[1].as_ref().unwrap().sm_active_permille, Some(900));
    drop(b);
    let t = Instant::now();
    while fake_counter(&dcgm, c"fake_dcgm_connections_live") != 0
        && t.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fake_counter(&dcgm, c"fake_dcgm_connections_live"), 0);
    assert_eq!(fake_counter(&dcgm, c"fake_dcgm_watches_live"), 0);
}

/// No host engine, a watch refused (another profiler), a GPU the host engine does not list, a
/// host engine that goes away mid-job: the figures stay `None`, the notes say why, the job's GPU
/// sampling goes on, and nothing is left watched or connected.
#[test]
fn without_dcgm_the_figures_are_none_and_the_notes_say_why() {
    let cases = [
        (
            json!({"connect": "CONNECTION_NOT_VALID", "gpus": []}),
            "and none from DCGM (no host engine (nv-hostengine) answered at 127.0.0.1 (-21))",
        ),
        (
            {
                let mut s = dcgm_script();
                s["watch"] = json!("NOT_SUPPORTED");
                s
            },
            "and none from DCGM (the profiling fields cannot be watched (-6: another profiler",
        ),
        (
            json!({"gpus": [{"uuid": "GPU-ffffffff-0000-1111-2222-333333333333"}]}),
            "and none from DCGM (the host engine does not list the job's GPUs)",
        ),
    ];
    for (script, said) in cases {
        let f = Fake::new(two_gpus(json!([[98, 10]]), json!([[98, 10]])));
        let dcgm = with_dcgm(&f, script.clone());
        let mut b = dcgm_backend(&f, &dcgm);
        let o = b.open(&both(), soon());
        assert_eq!(o.devices.len(), 2, "{script}");
        let sm: Vec<&String> = o
            .notes
            .iter()
            .filter(|n| n.contains("SM activity"))
            .collect();
        assert_eq!(sm.len(), 1, "{:?}", o.notes);
        assert!(
            sm[0].contains(said) && sm[0].contains("the GPU figures are kernel time"),
            "{:?}",
            o.notes
        );
        let s = b.sample(&[4242], soon());
        for d in &s.devices {
            let d = d.as_ref().unwrap();
            assert_eq!(d.util_gpu_pct, Some(98));
            assert_eq!(d.sm_active_permille, None);
        }
        assert_eq!(
            fake_counter(&dcgm, c"fake_dcgm_watches_live"),
            0,
            "{script}"
        );
        assert_eq!(
            fake_counter(&dcgm, c"fake_dcgm_connections_live"),
            0,
            "{script}"
        );
    }

    // Away after two reads: the first sample has its figures, then one event and `None`.
    let f = Fake::new(two_gpus(json!([[98, 10]]), json!([[98, 10]])));
    let mut script = dcgm_script();
    script["fail_reads_after"] = json!(2);
    let dcgm = with_dcgm(&f, script);
    let mut b = dcgm_backend(&f, &dcgm);
    b.open(&both(), soon());
    b.drain(soon()).unwrap();
    let s = b.sample(&[4242], soon());
    assert_eq!(s.devices[1].as_ref().unwrap().sm_active_permille, Some(600));
    let s = b.sample(&[4242], soon());
    assert_eq!(s.devices[1].as_ref().unwrap().sm_active_permille, None);
    let dcgm_events: Vec<&super::GpuEvent> = s
        .events
        .iter()
        .filter(|e| e.message.starts_with("DCGM: "))
        .collect();
    assert_eq!(dcgm_events.len(), 1, "{:?}", s.events);
    assert!(dcgm_events[0]
        .message
        .contains("SM activity is not read from now on"));
    let s = b.sample(&[4242], soon());
    assert!(
        s.events.iter().all(|e| !e.message.starts_with("DCGM")),
        "said once"
    );
    assert_eq!(
        s.devices[0].as_ref().unwrap().util_gpu_pct,
        Some(98),
        "NVML goes on"
    );
    assert_eq!(fake_counter(&dcgm, c"fake_dcgm_watches_live"), 0);
}

/// End to end through the monitor and `gpu.jsc`: an A100 whose kernels ran 98 % of the time
/// while DCGM says 6 % of its SMs were busy is `low_sm_activity`, as an H100 with GPM would be.
#[test]
fn dcgm_sm_activity_reaches_the_gpu_summary() {
    let f = Fake::new(two_gpus(json!([[98, 10]]), json!([[98, 10]])));
    let mut script = dcgm_script();
    script["gpus"][2]["sm_active"] = json!(0.06);
    let dcgm = with_dcgm(&f, script);
    let spool = tempfile::tempdir().unwrap();
    let cfg = BackendConfig {
        nvml_lib_path: Some(f.lib.clone()),
        dcgm: Some(super::dcgm::DcgmConfig {
            lib_path: Some(dcgm.clone()),
            ..Default::default()
        }),
        amd: false,
        ..Default::default()
    };
    let m = GpuMonitor::start(
        GpuSelection::of([GpuRef::NvidiaMinor(3), GpuRef::NvidiaMinor(1)]),
        &cfg,
        spool.path(),
        header(),
        every_ms(100),
        Box::new(|| vec![4242]),
        Box::new(|_, _| {}),
    )
    .unwrap();
    wait_samples(&m, 4);
    assert!(m.stop(Duration::from_secs(20)));
    let s = read_gpu_file(&spool.path().join(GPU_FILE_NAME)).unwrap();
    let sums = super::summarize_gpus(&s, 3600.0);
    let a = sums
        .iter()
        .find(|g| g.identity.uuid.as_deref() == Some(UUID_A))
        .unwrap();
    assert_eq!(a.sm_active_mean_pct, Some(6.0));
    use super::summary::{GpuClass, GpuFinding};
    assert_eq!(a.classification, Some(GpuClass::LowSmActivity));
    assert!(a.findings.contains(&GpuFinding::LowSmActivity {
        util_mean_pct: 98.0,
        sm_active_mean_pct: 6.0
    }));
    let notes = super::summary::gpu_quality_notes(&s);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("SM activity from DCGM's profiling fields")),
        "{notes:?}"
    );
    let t = Instant::now();
    while fake_counter(&dcgm, c"fake_dcgm_watches_live") != 0
        && t.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fake_counter(&dcgm, c"fake_dcgm_watches_live"), 0);
}
