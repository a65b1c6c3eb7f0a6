//! `cargo bench -p jobscope-sampler --bench gpu`: what the GPU monitor's NVML work costs per sample
//! and per drain of the utilization buffers, through the real NVML code path (nvml-wrapper, the
//! worker thread) against the fake `libnvidia-ml.so` (tests/fake-nvml) with its per-call costs
//! set three ways, side by side in one run:
//!
//! - `fake, no cost`: the fake's own answer time (about 15 µs a call): the path's floor;
//! - `H100 figures`: the costs the issue measured on an H100 (docs/gpu.md): a sample 2.4-4.4 ms,
//!   nearly all of it `nvmlDeviceGetTotalEnergyConsumption` (3 ms p50, cycled 2.2-3.8 ms here,
//!   the other five calls of a sample 0.07 ms each), a drain about 2 ms
//!   (`nvmlDeviceGetSamples` 0.4 ms a call, `nvmlDeviceGetProcessUtilization` 0.2 ms);
//! - `H100, one 100 ms call in 50`: the same with the energy call's worst case under load.
//!
//! Then what that costs per hour at the default schedule (a sample every 30 s, a drain every
//! 5 s between). On a GPU node, `JOBSCOPE_NVML_LIB=/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1`
//! adds a row for the real driver (all of the node's GPUs).
//!
//! The fake library is `target/<profile>/deps/libfake_nvml.so` (cargo builds it for this bench,
//! fake-nvml being a dev-dependency), or `$JOBSCOPE_FAKE_NVML`.

use bench::{nvml_sample_cost, SampleCost};
// `assign`, `nvml` and `GpuBackend`: what bench.rs reaches as `super::…` from here.
use jobscope_sampler::gpu::{assign, nvml, GpuBackend, GpuRef, GpuSelection};

/// The measuring code is compiled here (and into the crate's tests), never into the library the
/// plugin links.
#[path = "../src/gpu/bench.rs"]
mod bench;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

const ITERATIONS: u32 = 60;
/// Before each sample and each drain: the driver has taken at least one new sample (200 ms), so
/// every drain reads some, as the monitor's every 5 s do.
const PAUSE: Duration = Duration::from_millis(250);

fn fake_lib() -> PathBuf {
    if let Some(p) = std::env::var_os("JOBSCOPE_FAKE_NVML") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("exe dir");
    [
        deps.join("libfake_nvml.so"),
        deps.join("../libfake_nvml.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("libfake_nvml.so: build it with `cargo build --release -p fake-nvml`")
}

fn script(cost_ms: Value) -> Value {
    let gib: u64 = 1 << 30;
    let dev = |i: u32| {
        json!({"uuid": format!("GPU-bench-{i}"), "name": "NVIDIA H100 80GB HBM3", "minor": i,
               "pci_bus_id": format!("00000000:{:02X}:00.0", 0x1b + i), "memory_total": 80 * gib,
               "memory_used": 40 * gib, "power_mw": 350_000, "energy_mj": [1000, 2000, 3000],
               "throttle": 0, "processes": [[[4242, 40 * gib]]],
               "busy": {"period_ms": 7000, "busy_share": 0.3},
               "process_busy": {"4242": {"period_ms": 7000, "busy_share": 0.3}}})
    };
    json!({"devices": [dev(0)], "cost_ms": cost_ms})
}

fn run(lib: &PathBuf, script: Option<&Value>) -> SampleCost {
    // Each setup gets its own copy of the library (its own dlopen instance) next to its script.
    let dir = tempfile::tempdir().unwrap();
    let lib = match script {
        Some(s) => {
            let copy = dir.path().join("libnvidia-ml.so.1");
            std::fs::copy(lib, &copy).unwrap();
            std::fs::write(dir.path().join("fake-nvml.json"), s.to_string()).unwrap();
            copy
        }
        None => lib.clone(),
    };
    nvml_sample_cost(
        Some(&lib),
        &GpuSelection::of([GpuRef::AllAccessible]),
        &[4242],
        ITERATIONS,
        PAUSE,
    )
    .expect("measured")
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

fn main() {
    let lib = fake_lib();
    let others = 0.07;
    let h100 = json!({
        "nvmlDeviceGetTotalEnergyConsumption": [2.2, 2.6, 3.0, 3.0, 3.0, 3.4, 3.8],
        "nvmlDeviceGetUtilizationRates": others, "nvmlDeviceGetMemoryInfo_v2": others,
        "nvmlDeviceGetPowerUsage": others, "nvmlDeviceGetCurrentClocksThrottleReasons": others,
        "nvmlDeviceGetComputeRunningProcesses_v3": others,
        "nvmlDeviceGetSamples": 0.4, "nvmlDeviceGetProcessUtilization": 0.2});
    let mut pathological = h100.clone();
    let mut energy: Vec<f64> = (0..49).map(|i| [2.2, 2.6, 3.0, 3.4, 3.8][i % 5]).collect();
    energy.push(100.0);
    pathological["nvmlDeviceGetTotalEnergyConsumption"] = json!(energy);
    let mut rows = vec![
        ("fake, no cost", run(&lib, Some(&script(json!({}))))),
        ("H100 figures", run(&lib, Some(&script(h100)))),
        (
            "H100, one 100 ms call in 50",
            run(&lib, Some(&script(pathological))),
        ),
    ];
    if let Some(real) = std::env::var_os("JOBSCOPE_NVML_LIB") {
        rows.push(("real driver", run(&PathBuf::from(real), None)));
    }
    println!(
        "jobscope GPU benchmark: the NVML monitor's work per sample and per drain, 1 GPU, \
         {ITERATIONS} of each (ms)"
    );
    println!(
        "{:<28} {:>8} {:>8} {:>8} {:>8}   {:>8} {:>8} {:>8}   {:>12}",
        "setup", "sample", "p50", "p95", "max", "drain", "p95", "max", "ms per hour"
    );
    for (name, c) in &rows {
        // At the default schedule: 120 samples and 600 drains (5 between two samples) an hour.
        let hour = c.sample.mean * 120 + c.drain.mean * 600;
        println!(
            "{:<28} {:>8} {:>8} {:>8} {:>8}   {:>8} {:>8} {:>8}   {:>12}",
            name,
            ms(c.sample.mean),
            ms(c.sample.p50),
            ms(c.sample.p95),
            ms(c.sample.max),
            ms(c.drain.mean),
            ms(c.drain.p95),
            ms(c.drain.max),
            ms(hour)
        );
    }
    println!(
        "(sample = the mean of one sample of all devices, its drain included; drain = one drain \
         of the buffers between samples; both include the worker-thread round trip)"
    );
}
