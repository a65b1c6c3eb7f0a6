//! GPUs: which ones belong to the job, sampling them, their spool file and their summary.
//!
//! - [`assign`]: which GPUs are the job's, from SLURM's strings (`SLURM_JOB_GPUS`, UUIDs in
//!   `CUDA_VISIBLE_DEVICES`), gres.conf device files and the v1 devices cgroup; always resolved to a
//!   device *identity* (minor number, UUID, PCI bus id), never to an ordinal: SLURM's gres index,
//!   CUDA's ordinal and NVML's index are three different numberings (inside a constrained job NVML
//!   numbers only the GPUs it can open, from 0).
//! - [`GpuBackend`]: the sampling interface; [`nvml::NvmlBackend`] (NVIDIA, through nvml-wrapper in
//!   a worker thread with a deadline per sample), [`amd::AmdBackend`] (amdgpu sysfs) and
//!   `testing::ScriptedBackend` (tests only, never in the plugin).
//! - [`monitor::GpuMonitor`]: the job's GPU sampling thread, separate from the cgroup sampler so a
//!   hung driver can never stall CPU/memory sampling; it writes `gpu.jsc` ([`spool`]).
//! - [`summary`]: per-GPU figures and findings for the report, and advice.
//!
//! Every measured value is an `Option`: "not supported" (MIG utilization, an old GPU without an
//! energy counter) is `None`, never 0.

pub mod amd;
pub mod assign;
// Test and benchmark code stays out of the library the plugin inside slurmstepd links: the NVML
// cost measurement is compiled into this crate's tests and into benches/gpu.rs (by path) only,
// the scripted backend into tests only (other crates' tests: the `testing` feature).
#[cfg(test)]
pub mod bench;
pub mod dcgm;
pub mod monitor;
pub mod nvml;
pub mod spool;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod fake_nvml_tests;
#[cfg(test)]
mod interval_tests;

pub use assign::{GpuRef, GpuSelection, JobGpuEnv, Wanted};
pub use monitor::{BackendConfig, GpuMonitor, LogLevel};
// The model's GPU names, for this crate's own code (other crates name `jobscope_model::gpu`).
pub(crate) use jobscope_model::gpu::fold::{DeviceDrain, IntervalFold, ProcessUtil, UtilSource};
#[cfg(test)]
use jobscope_model::gpu::{summarize_gpus, summary, SelectionSource};
pub(crate) use jobscope_model::gpu::{GpuDevice, GpuIdentity, GpuKind};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One reading of one device. Counters (`energy_mj`) are cumulative as the driver reports them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceSample {
    /// Percent of the last sample period in which a kernel ran (NVML `utilization.gpu`, amdgpu
    /// `gpu_busy_percent`). `None` on MIG instances (NVML answers NOT_SUPPORTED).
    pub util_gpu_pct: Option<u32>,
    /// Percent of time device memory was read or written (NVML only).
    pub util_mem_pct: Option<u32>,
    pub mem_used_bytes: Option<u64>,
    pub mem_total_bytes: Option<u64>,
    pub power_mw: Option<u64>,
    /// Energy counter since the driver loaded, millijoules (NVML Volta+, amdgpu `energy1_input`).
    pub energy_mj: Option<u64>,
    /// NVML clock throttle (clocks event) reason bits.
    pub throttle_reasons: Option<u64>,
    /// Processes of the job with a compute context on this device (`None`: unknown, e.g. AMD).
    pub job_processes: Option<u32>,
    /// GPU memory used by the job's processes, bytes.
    pub job_mem_bytes: Option<u64>,
    /// Processes of someone else on this device (shared node or a leak of SLURM's isolation).
    pub other_processes: Option<u32>,
    /// The driver's utilization samples since the last drain (NVML), drained with this sample
    /// so the bucket it closes covers the interval up to now (`None`: the backend keeps no
    /// buffer; the point read above is all there is).
    pub drain: Option<DeviceDrain>,
    /// NVML GPM (Hopper and later) over the interval since the previous sample, per mille:
    /// SM activity (`SM_UTIL`), SM occupancy, any tensor pipe, DRAM bandwidth. `None`: no GPM
    /// on this device (or the first sample, which has no interval yet).
    pub sm_active_permille: Option<u32>,
    pub sm_occupancy_permille: Option<u32>,
    pub tensor_active_permille: Option<u32>,
    pub dram_active_permille: Option<u32>,
    /// The clocks now (point reads), MHz: beside the GPM figures, which count cycles.
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    /// Time the power cap / a thermal limit held the clocks down since the driver loaded,
    /// nanoseconds (NVML violation counters; cumulative, as the driver reports them).
    pub violation_power_ns: Option<u64>,
    pub violation_thermal_ns: Option<u64>,
    /// Volatile ECC error counts (since the driver loaded; cumulative).
    pub ecc_corrected_total: Option<u64>,
    pub ecc_uncorrected_total: Option<u64>,
    /// XID errors NVML reported since the previous sample (`None`: its events are not
    /// available for this device).
    pub xids: Option<XidReport>,
}

/// The XID errors of one device over one interval.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct XidReport {
    /// The first ones kept: (Unix ms when polled, XID code).
    pub first: Vec<(u64, u32)>,
    /// All of them, kept or not.
    pub count: u64,
}

/// Something that happened to a device or a backend, recorded in the spool as an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuEvent {
    pub kind: crate::spool::EventKind,
    /// The device's slot in the backend's list, if the event is about one device.
    pub slot: Option<usize>,
    pub message: String,
}

/// What [`GpuBackend::open`] found.
#[derive(Debug, Clone, Default)]
pub struct OpenResult {
    /// The devices this backend will sample, in slot order, each with the index of the
    /// [`Wanted`] entry it answers.
    pub devices: Vec<(usize, GpuDevice)>,
    /// Why the backend cannot sample at all (no driver, no library, init failed).
    pub unavailable: Option<String>,
    /// True when `unavailable` is the normal state of a node without this vendor's driver
    /// (log it at debug level only).
    pub quiet: bool,
    pub events: Vec<GpuEvent>,
    /// What this backend cannot measure on some device (no GPM before Hopper…), once per job:
    /// the spool's data notes.
    pub notes: Vec<String>,
}

/// One sample of all the backend's devices.
#[derive(Debug, Clone, Default)]
pub struct BackendSample {
    /// One entry per opened device, in slot order; `None` when the device could not be read this
    /// time (deadline overrun, lost GPU, backend given up).
    pub devices: Vec<Option<DeviceSample>>,
    pub events: Vec<GpuEvent>,
}

/// One drain of all the backend's devices (see [`GpuBackend::drain`]).
#[derive(Debug, Clone, Default)]
pub struct BackendDrain {
    /// One entry per opened device, in slot order; `None`: not read this time.
    pub devices: Vec<Option<DeviceDrain>>,
    pub events: Vec<GpuEvent>,
}

/// An instant by which a backend's wait must end, set from another thread when the job ends
/// ([`GpuMonitor::stop`]): a sample waiting on a slow driver is cut short so the monitor can write
/// its end record within the stop's bounded wait. Clones share the instant.
#[derive(Debug, Clone, Default)]
pub struct Cutoff(Arc<Mutex<Option<Instant>>>);

impl Cutoff {
    /// How often a backend waiting on its driver looks at the cutoff.
    pub const POLL: Duration = Duration::from_millis(20);

    /// Sets the cutoff (an earlier one stays).
    pub fn set(&self, t: Instant) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *g = Some(g.map_or(t, |x| x.min(t)));
    }

    pub fn get(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `deadline`, or the cutoff if that is earlier.
    pub fn bound(&self, deadline: Instant) -> Instant {
        self.get().map_or(deadline, |c| c.min(deadline))
    }

    /// How long to wait now for something due by `deadline`: at most [`Cutoff::POLL`], so a
    /// cutoff set meanwhile is seen. Zero once `deadline` or the cutoff has passed.
    pub fn slice(&self, deadline: Instant) -> Duration {
        self.bound(deadline)
            .saturating_duration_since(Instant::now())
            .min(Self::POLL)
    }

    /// True once `deadline` or the cutoff has passed.
    pub fn passed(&self, deadline: Instant) -> bool {
        Instant::now() >= self.bound(deadline)
    }
}

/// A source of GPU readings. Implementations must bound their own time: `open` and `sample` get a
/// deadline and return (with `None`s) when it passes.
pub trait GpuBackend: Send {
    /// `nvml`, `amdgpu`, `scripted`.
    fn name(&self) -> &'static str;
    /// Resolves the wanted devices (those it can recognise; others are left for other backends).
    /// Called once, from the monitor thread.
    fn open(&mut self, wanted: &[Wanted], deadline: Instant) -> OpenResult;
    /// Reads every opened device. `job_pids` is sorted and deduplicated.
    fn sample(&mut self, job_pids: &[u32], deadline: Instant) -> BackendSample;
    /// Drains the driver's utilization sample buffers between two samples, so a bucket's
    /// utilization covers its whole interval (see `jobscope_model::gpu::fold`). `None`: this
    /// backend keeps no buffer (the default), and the monitor does not wake up for it.
    fn drain(&mut self, _deadline: Instant) -> Option<BackendDrain> {
        None
    }
    /// The monitor's [`Cutoff`], given before `open`: a backend that waits (on a driver thread)
    /// stops waiting at it as at its deadline. Backends that never wait ignore it.
    fn set_cutoff(&mut self, _cutoff: Cutoff) {}
}
