//! A scripted, in-process [`GpuBackend`] for tests of the monitor, the plugin glue and the report
//! (no library, no sysfs). For the real NVML code path against a fake driver, see
//! `tests/fake-nvml` and `sampler/src/gpu/fake_nvml_tests.rs`.

use super::assign::{resolve, InventoryDevice, Wanted};
use super::{BackendSample, Cutoff, DeviceSample, GpuBackend, GpuDevice, GpuKind, OpenResult};
use std::time::{Duration, Instant};

/// `(sample number from 0, sorted job pids)` → one entry per opened device.
pub type ScriptFn = Box<dyn FnMut(u64, &[u32]) -> Vec<Option<DeviceSample>> + Send>;

pub struct ScriptedBackend {
    inventory: Vec<GpuDevice>,
    script: ScriptFn,
    n: u64,
    opened: usize,
    /// Sleep this long in every `sample` (bounded by the deadline), to test cadence.
    pub sample_delay: Option<Duration>,
    /// The first this many samples answer at once, without `sample_delay` (a driver that turns
    /// slow later).
    pub fast_samples: u64,
    /// Answer `open` with this "unavailable" reason (quiet).
    pub unavailable: Option<String>,
    /// Sleep through the monitor's cutoff (a backend stuck where it cannot look at it).
    pub ignore_cutoff: bool,
    cutoff: Cutoff,
}

impl ScriptedBackend {
    /// `inventory`: the devices it pretends to have (matched by identity like a real backend).
    pub fn new(
        inventory: Vec<GpuDevice>,
        script: impl FnMut(u64, &[u32]) -> Vec<Option<DeviceSample>> + Send + 'static,
    ) -> Self {
        ScriptedBackend {
            inventory,
            script: Box::new(script),
            n: 0,
            opened: 0,
            sample_delay: None,
            fast_samples: 0,
            unavailable: None,
            ignore_cutoff: false,
            cutoff: Cutoff::default(),
        }
    }
}

impl GpuBackend for ScriptedBackend {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn open(&mut self, wanted: &[Wanted], _deadline: Instant) -> OpenResult {
        if let Some(u) = &self.unavailable {
            return OpenResult {
                unavailable: Some(u.clone()),
                quiet: true,
                ..Default::default()
            };
        }
        let inv: Vec<InventoryDevice> = self
            .inventory
            .iter()
            .map(|id| InventoryDevice {
                device: id.clone(),
                drm_minors: match id.identity.kind {
                    Some(GpuKind::Amd) => id.identity.minor.into_iter().collect(),
                    _ => vec![],
                },
                parent: None,
            })
            .collect();
        let r = resolve(wanted, &inv);
        let mut out = OpenResult::default();
        for (wi, ii) in r.matches {
            let mut id = self.inventory[ii].clone();
            id.identity.gres_index = wanted[wi].gres_index;
            out.devices.push((wi, id));
        }
        self.opened = out.devices.len();
        out
    }

    fn set_cutoff(&mut self, cutoff: Cutoff) {
        self.cutoff = cutoff;
    }

    fn sample(&mut self, job_pids: &[u32], deadline: Instant) -> BackendSample {
        if let Some(d) = self.sample_delay.filter(|_| self.n >= self.fast_samples) {
            // Like a driver thread waited on: the deadline or the cutoff ends the wait.
            let until = (Instant::now() + d).min(deadline);
            if self.ignore_cutoff {
                std::thread::sleep(until.saturating_duration_since(Instant::now()));
            }
            while !self.cutoff.passed(until) {
                std::thread::sleep(self.cutoff.slice(until));
            }
        }
        let mut devices = (self.script)(self.n, job_pids);
        self.n += 1;
        devices.resize(self.opened, None);
        BackendSample {
            devices,
            events: vec![],
        }
    }
}

/// Writes `<dir>/gpu.jsc` of a running job as the plugin's writer does (flushed, not ended): GPUs
/// with indices 0.. and UUIDs `GPU-<index>`, one bucket per `(t_ms, utilization % per GPU)`. For
/// other crates' tests and benchmarks of what reads a node's spool.
pub fn write_gpu_spool(
    dir: &std::path::Path,
    header: jobscope_model::spool::Header,
    buckets: &[(u64, Vec<u64>)],
) -> Result<(), jobscope_common::fsutil::FsError> {
    use jobscope_model::gpu::spool::{DeviceBucket, GpuBucket, GpuInfo};
    use jobscope_model::gpu::{GpuDevice as Device, GpuIdentity, GPU_FILE_NAME};
    use jobscope_model::spool::Gauge;
    let n = buckets.first().map_or(0, |b| b.1.len()) as u32;
    let start = header.start_unix_ms;
    let mut g = super::spool::GpuWriter::create(
        dir,
        GPU_FILE_NAME,
        header,
        super::spool::GpuLimits::default(),
    )?;
    g.set_info(GpuInfo {
        t_ms: start,
        backends: vec!["nvml".into()],
        selection_source: None,
        devices: (0..n)
            .map(|i| Device {
                identity: GpuIdentity {
                    index: Some(i),
                    uuid: Some(format!("GPU-{i}")),
                    ..Default::default()
                },
                ..Default::default()
            })
            .collect(),
        unresolved: vec![],
        notes: vec![],
    })?;
    for (t, utils) in buckets {
        g.push(GpuBucket {
            t_first_ms: *t,
            t_last_ms: *t,
            n: 1,
            devices: utils
                .iter()
                .enumerate()
                .map(|(slot, &u)| DeviceBucket {
                    slot: slot as u32,
                    samples: 1,
                    util_gpu_pct: Some(Gauge::one(u)),
                    ..Default::default()
                })
                .collect(),
        })?;
    }
    g.flush()
}
