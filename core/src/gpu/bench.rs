//! Cost of one NVML sample, for the benchmark script (run it against the fake library, or a real
//! driver on a GPU node: it includes the worker-thread round trip the monitor pays).

use super::assign::GpuSelection;
use super::nvml::{NvmlBackend, NvmlConfig};
use super::GpuBackend;
use std::path::Path;
use std::time::{Duration, Instant};

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
}

/// Opens NVML from `lib_path` (`None`: the system's `libnvidia-ml.so.1`), resolves `selection`
/// and times `iterations` samples with `job_pids` as the job. With the fake library, set
/// `FAKE_NVML_SCRIPT` (or put `fake-nvml.json` next to the `.so`) to choose the devices.
pub fn nvml_sample_cost(
    lib_path: Option<&Path>,
    selection: &GpuSelection,
    job_pids: &[u32],
    iterations: u32,
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
    let (mut total, mut min, mut max) = (Duration::ZERO, Duration::MAX, Duration::ZERO);
    for i in 0..iterations.max(1) {
        let t = Instant::now();
        let s = b.sample(&pids, t + Duration::from_secs(10));
        let dt = t.elapsed();
        if s.devices.iter().any(Option::is_none) {
            return Err(format!("sample {i} missed a device: {:?}", s.events));
        }
        total += dt;
        min = min.min(dt);
        max = max.max(dt);
    }
    Ok(SampleCost {
        devices: o.devices.len(),
        iterations: iterations.max(1),
        open,
        per_sample: total / iterations.max(1),
        min,
        max,
    })
}
