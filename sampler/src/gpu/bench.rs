//! Cost of the NVML monitor's work, for the benchmark (`sampler/benches/gpu.rs`, against the fake
//! library with per-call costs, or a real driver on a GPU node): one sample of all devices and
//! one drain of their utilization buffers, each including the worker-thread round trip the
//! monitor pays.

use super::assign::GpuSelection;
use super::nvml::{NvmlBackend, NvmlConfig};
use super::GpuBackend;
use std::path::Path;
use std::time::{Duration, Instant};

/// Distribution of one kind of call's wall time.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    pub mean: Duration,
    pub min: Duration,
    pub p50: Duration,
    pub p95: Duration,
    pub max: Duration,
}

impl Timing {
    fn of(mut v: Vec<Duration>) -> Timing {
        v.sort_unstable();
        let n = v.len().max(1);
        let at = |q: f64| v[((n as f64 * q).ceil() as usize).clamp(1, n) - 1];
        Timing {
            mean: v.iter().sum::<Duration>() / n as u32,
            min: v[0],
            p50: at(0.5),
            p95: at(0.95),
            max: v[n - 1],
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SampleCost {
    pub devices: usize,
    pub iterations: u32,
    /// NVML init plus device discovery.
    pub open: Duration,
    /// Mean wall time of one sample of all devices.
    pub per_sample: Duration,
    pub min: Duration,
    pub max: Duration,
    /// One sample of all devices (with its drain).
    pub sample: Timing,
    /// One drain of all devices' buffers between samples.
    pub drain: Timing,
}

/// Opens NVML from `lib_path` (`None`: the system's `libnvidia-ml.so.1`), resolves `selection`
/// and times `iterations` samples and as many drains, alternated, with `job_pids` as the job.
/// `pause` passes before each drain (and each sample): at least one 200 ms driver sample, so a
/// drain reads new samples as the monitor's do, not an empty buffer.
/// With the fake library, set `FAKE_NVML_SCRIPT` (or put `fake-nvml.json` next to the `.so`) to
/// choose the devices and the per-call costs.
pub fn nvml_sample_cost(
    lib_path: Option<&Path>,
    selection: &GpuSelection,
    job_pids: &[u32],
    iterations: u32,
    pause: Duration,
) -> Result<SampleCost, String> {
    let mut b = NvmlBackend::new(NvmlConfig {
        lib_path: lib_path.map(Path::to_path_buf),
        ..Default::default()
    });
    let t0 = Instant::now();
    let o = b.open(&selection.wanted, t0 + Duration::from_secs(60));
    let open = t0.elapsed();
    if let Some(u) = o.unavailable {
        return Err(u);
    }
    if o.devices.is_empty() {
        return Err("no device of the selection was found".into());
    }
    let mut pids = job_pids.to_vec();
    pids.sort_unstable();
    pids.dedup();
    let (mut samples, mut drains) = (Vec::new(), Vec::new());
    for i in 0..iterations.max(1) {
        std::thread::sleep(pause);
        let t = Instant::now();
        let s = b.sample(&pids, t + Duration::from_secs(10));
        samples.push(t.elapsed());
        if s.devices.iter().any(Option::is_none) {
            return Err(format!("sample {i} missed a device: {:?}", s.events));
        }
        std::thread::sleep(pause);
        let t = Instant::now();
        let d = b.drain(t + Duration::from_secs(10));
        drains.push(t.elapsed());
        if d.is_none_or(|d| d.devices.iter().any(Option::is_none)) {
            return Err(format!("drain {i} missed a device"));
        }
    }
    let sample = Timing::of(samples);
    Ok(SampleCost {
        devices: o.devices.len(),
        iterations: iterations.max(1),
        open,
        per_sample: sample.mean,
        min: sample.min,
        max: sample.max,
        sample,
        drain: Timing::of(drains),
    })
}
